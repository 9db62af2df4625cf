# The Redis Streams sink in tests/integration/sink_relay.sh.
SERVICE=redis
READER=read_stream.py
# Redis has no dedupe id: a fault may deliver a batch again.
DEDUPE=0
# A server with no password refuses one (WRONGPASS).
SECRET_REFUSED=1
FAULT_QUERY='timeout=2s'
# The fastest sink here: a backlog large enough to outlast a fault's pause.
FAULT_BACKLOG=8000

sink_prepare() {
    "$PY" -c 'import redis, sys; redis.Redis.from_url(sys.argv[1]).delete(sys.argv[2])' "$1" "$2" ||
        fail "DEL $2 on $1"
}
