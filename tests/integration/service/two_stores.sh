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
. "$(dirname "$0")/../../harness/harness.sh"
use_outbox "$1"
need_service postgres nats redis
need_python
ITEST=$SRC_ROOT/tests/integration
URI=$OUTBOX_PG_URI
# Short calls over few keys: the two routes each get hundreds of events.
STAGE_MAX=60
STAGE_KEYS=8

SUBJ=svc_$$_orders
STREAM=svc_$$_payments
pg_schema svc
REL=$SCH.outbox
# The NATS sink test's own way to make the stream (nats/sink.sh).
. "$ITEST/nats/sink.sh"
sink_prepare "$OUTBOX_NATS_URI" "$SUBJ"
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
    q "SELECT count(*) FROM $REL WHERE $1"
}
sqlite_count() {
    sql "SELECT count(*) FROM outbox WHERE $1"
}

"$OUTBOX" relay --config "$TMP/relay.yaml" --log-format json >"$TMP/relay.out" 2>"$TMP/relay.err" &
pid=$!
# More events on both routes while it runs.
stage_events "sqlite:$DB" orders 300
stage_events "$OUTBOX_PG_URI" payments 300 --relation "$REL"
drained() {
    [ "$(sqlite_count "status <> 'published'")" = 0 ] && [ "$(pg_count "status <> 'published'")" = 0 ] ||
        ! kill -0 "$pid" 2>/dev/null
}
wait_until 120 drained
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

staged_sqlite "$TMP/staged-orders"
staged_pg "$TMP/staged-payments" "$REL"

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
finish
