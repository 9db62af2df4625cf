# The NATS JetStream sink in tests/integration/sink_relay.sh.
SERVICE=nats
READER=read_stream.py
# JetStream drops a repeated Nats-Msg-Id within the stream's duplicate
# window (10 minutes here, longer than the test): no duplicates at all.
DEDUPE=1
# A server with no authorization takes any password.
SECRET_REFUSED=0
FAULT_QUERY='timeout=2s&reconnect_wait=100ms'

# sink_prepare URI DEST: a file stream capturing DEST, made with nats-py.
sink_prepare() {
    "$PY" - "$1" "$2" <<'PYEOF' || fail "add stream $2 on $1"
import asyncio, sys, nats
from nats.js.api import StreamConfig, StorageType
async def main():
    nc = await nats.connect(sys.argv[1])
    await nc.jetstream().add_stream(StreamConfig(
        name=sys.argv[2].replace(".", "_"), subjects=[sys.argv[2]], storage=StorageType.FILE,
        duplicate_window=600))
    await nc.close()
asyncio.run(main())
PYEOF
}
