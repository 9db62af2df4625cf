#!/usr/bin/env bash
# The relay as a service: one configuration file, two routes on two stores
# (SQLite and PostgreSQL) to two brokers (NATS JetStream and Redis Streams),
# all at once in one process. Events are staged before and while it runs;
# once both stores are drained, SIGTERM ends it with exit 0 and nothing in
# processing, and clients nobody here wrote (nats-py, redis-py, the
# CloudEvents SDK) read back every event of each route, once, from its own
# broker only, each key in staging order.
#
#   two_stores.sh OUTBOX_CLI
. "$(dirname "$0")/../../faults/lib.sh" "$1"

skip() {
    if [ "${CI:-}" = true ]; then
        echo "FAIL: $1, and CI=true: the service test must run in CI"
        exit 1
    fi
    echo
    echo "*** SKIPPED: $1. ***"
    echo "*** tools/test starts PostgreSQL, NATS and Redis and makes the Python clients;"
    echo "*** by hand: tools/services/{postgres,nats,redis}.sh start DIR, tools/services/pyclients.sh."
    echo
    exit 77
}

for v in OUTBOX_PG_URI OUTBOX_NATS_URI OUTBOX_REDIS_URI; do
    [ -n "${!v:-}" ] || skip "$v is not set"
done
if [ -z "${OUTBOX_PYTHON:-}" ]; then
    py_env=$("$SRC_ROOT/tools/services/pyclients.sh" 2>"$TMP/pyclients.err") ||
        skip "no OUTBOX_PYTHON, and tools/services/pyclients.sh failed: $(tail -1 "$TMP/pyclients.err")"
    eval "$py_env"
fi
PY=$OUTBOX_PYTHON
ITEST=$SRC_ROOT/tests/integration

# stage_events STORE ROUTE N [ARGS]: about N events in transactions of one
# key each (a fifth without a key).
SEQ=0
stage_events() {
    local store=$1 route=$2 goal=$3 size key i done=0 out
    shift 3
    while [ $done -lt "$goal" ]; do
        size=$((1 + RANDOM % 60))
        if [ $((RANDOM % 5)) = 0 ]; then key=(); else key=(--key "k$((RANDOM % 8))"); fi
        for ((i = 0; i < size; i++)); do echo "{\"n\":$((SEQ + i))}"; done >"$TMP/batch"
        out=$("$OUTBOX" stage --store "$store" "$@" --route "$route" --type "t.$((SEQ % 3))" \
            "${key[@]}" --payload - <"$TMP/batch") || { fail "stage: $out"; finish; }
        SEQ=$((SEQ + size))
        done=$((done + ${out#staged }))
    done
}

SUBJ=svc_$$_orders
STREAM=svc_$$_payments
REL=svc_$$
"$PY" - "$OUTBOX_NATS_URI" "$SUBJ" <<'PYEOF' || fail "add stream $SUBJ"
import asyncio, sys, nats
from nats.js.api import StreamConfig, StorageType
async def main():
    nc = await nats.connect(sys.argv[1])
    await nc.jetstream().add_stream(StreamConfig(name=sys.argv[2], subjects=[sys.argv[2]],
                                                 storage=StorageType.FILE))
    await nc.close()
asyncio.run(main())
PYEOF
new_db orders
"$OUTBOX" schema apply --store "$OUTBOX_PG_URI" --relation "$REL" --yes-i-know >/dev/null ||
    fail "schema apply on PostgreSQL"
stage_events "sqlite:$DB" orders 500
stage_events "$OUTBOX_PG_URI" payments 500 --relation "$REL"

cat >"$TMP/relay.yaml" <<YAML
stores:
  local: {uri: "sqlite://$DB"}
  main: {uri: "\${SVC_PG_URI}", relation: $REL}
sinks:
  nats: {uri: "$OUTBOX_NATS_URI/{destination}"}
  redis: {uri: "$OUTBOX_REDIS_URI/{destination}"}
routes:
  orders: {store: local, sink: nats, destination: $SUBJ, batch: 50, poll: 20ms}
  payments: {store: main, sink: redis, destination: $STREAM, batch: 40, workers: 2, poll: 20ms}
YAML
"$OUTBOX" config check "$TMP/relay.yaml" >"$TMP/check.out" 2>&1 &&
    fail "config check passed with \${SVC_PG_URI} unset" ||
    pass "config check names the unset variable: $(tail -1 "$TMP/check.out")"
export SVC_PG_URI=$OUTBOX_PG_URI
"$OUTBOX" config check "$TMP/relay.yaml" >"$TMP/check.out" 2>&1 &&
    pass "config check: $(tail -1 "$TMP/check.out")" || fail "config check: $(cat "$TMP/check.out")"

pg_count() {
    psql -X -qtA -v ON_ERROR_STOP=1 "$OUTBOX_PG_URI" -c "SELECT count(*) FROM $REL WHERE $1"
}
sqlite_count() {
    sqlite3 -cmd '.timeout 10000' "$DB" "SELECT count(*) FROM outbox WHERE $1"
}

"$OUTBOX" relay --config "$TMP/relay.yaml" --log-format json >"$TMP/relay.out" 2>"$TMP/relay.err" &
pid=$!
# More events on both routes while it runs.
stage_events "sqlite:$DB" orders 300
stage_events "$OUTBOX_PG_URI" payments 300 --relation "$REL"
end=$((SECONDS + 120))
while [ $SECONDS -lt $end ]; do
    [ "$(sqlite_count "status <> 'published'")" = 0 ] && [ "$(pg_count "status <> 'published'")" = 0 ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
done
stop_process "$pid" TERM
[ "$RC" -eq 0 ] && pass "SIGTERM: the relay of two routes exits 0" ||
    fail "relay exit $RC: $(tail -3 "$TMP/relay.err")"
left="$(sqlite_count "status <> 'published'") $(pg_count "status <> 'published'")"
[ "$left" = "0 0" ] && pass "both stores drained, nothing left in processing" ||
    fail "rows not published (sqlite, postgres): $left"
"$PY" -c '
import json, sys
routes = set()
for line in open(sys.argv[1]):
    r = json.loads(line)
    routes.add(r.get("route"))
assert {"orders", "payments"} <= routes, routes' "$TMP/relay.err" &&
    pass "the JSON log has records of both routes" || fail "log: $(head -c 400 "$TMP/relay.err")"

sqlite3 -cmd '.timeout 10000' -separator "$(printf '\t')" "$DB" \
    "SELECT event_id, coalesce(ordering_key, ''), event_type, payload FROM outbox ORDER BY created_at, id" \
    >"$TMP/staged-orders"
cut -f1,2 "$TMP/staged-orders" >"$TMP/staged-orders.ids"
psql -X -qtA -F "$(printf '\t')" -v ON_ERROR_STOP=1 "$OUTBOX_PG_URI" -c \
    "SELECT event_id, coalesce(ordering_key, ''), event_type, payload FROM $REL ORDER BY created_at, id" \
    >"$TMP/staged-payments" || fail "psql read of $REL"
cut -f1,2 "$TMP/staged-payments" >"$TMP/staged-payments.ids"

echo "== orders: SQLite -> NATS $SUBJ"
"$PY" "$ITEST/nats/read_stream.py" "$OUTBOX_NATS_URI" "$SUBJ" "$TMP/read-orders.jsonl" \
    "$TMP/staged-orders" orders >"$TMP/read.out" 2>&1 || fail "nats read_stream.py exited $?"
cat "$TMP/read.out"
analyze "$TMP/staged-orders.ids" "$TMP/read-orders.jsonl" 0

echo "== payments: PostgreSQL -> Redis $STREAM"
"$PY" "$ITEST/redis/read_stream.py" "$OUTBOX_REDIS_URI" "$STREAM" "$TMP/read-payments.jsonl" \
    "$TMP/staged-payments" payments >"$TMP/read.out" 2>&1 || fail "redis read_stream.py exited $?"
cat "$TMP/read.out"
analyze "$TMP/staged-payments.ids" "$TMP/read-payments.jsonl" 0

"$PY" -c 'import redis, sys; redis.Redis.from_url(sys.argv[1]).delete(sys.argv[2])' "$OUTBOX_REDIS_URI" "$STREAM"
psql -X -q "$OUTBOX_PG_URI" -c "DROP TABLE $REL" >/dev/null 2>&1
finish
