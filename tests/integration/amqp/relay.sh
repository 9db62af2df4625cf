#!/usr/bin/env bash
# End to end through the AMQP sink, read back by clients nobody here wrote:
#
#  1. `outbox stage` into SQLite, and into PostgreSQL when OUTBOX_PG_URI is
#     set, then `outbox relay --until-idle` to the broker of
#     OUTBOX_RABBITMQ_URI; pika reads the queue back and the CloudEvents
#     SDK's AMQP binding builds each event: ids, payloads, attributes and
#     AMQP properties match what the store holds, each event is in the
#     queue once.
#  2. On a private node of this test (tools/services/rabbitmq.sh in $TMP):
#     the relay killed with SIGKILL and restarted several times, and the
#     broker stopped and started, then killed with SIGKILL and started,
#     all under a running relay. Then: nothing lost, each key's events
#     first reach the queue in staging order, every row published, and
#     duplicates (RabbitMQ has no dedupe) at most one batch per fault.
#
#   relay.sh OUTBOX_CLI
. "$(dirname "$0")/../../faults/lib.sh" "$1"

HERE=$(cd "$(dirname "$0")" && pwd)
RMQ_SERVICE=$SRC_ROOT/tools/services/rabbitmq.sh
PRIVATE_RMQ=""
eval "orig_$(declare -f cleanup)"
cleanup() {
    [ -n "$PRIVATE_RMQ" ] && "$RMQ_SERVICE" stop "$PRIVATE_RMQ" >/dev/null 2>&1
    orig_cleanup
}

skip() {
    if [ "${CI:-}" = true ]; then
        echo "FAIL: $1, and CI=true: the AMQP tests must run in CI"
        exit 1
    fi
    echo
    echo "*** SKIPPED: $1. ***"
    echo "*** Start a broker with eval \"\$(tools/services/rabbitmq.sh start /tmp/outbox-rabbitmq)\" and make the"
    echo "*** Python clients with eval \"\$(tools/services/pyclients.sh)\", then run the tests again."
    echo
    exit 77
}

[ -n "${OUTBOX_RABBITMQ_URI:-}" ] || skip "OUTBOX_RABBITMQ_URI is not set"
if [ -z "${OUTBOX_PYTHON:-}" ]; then
    py_env=$("$SRC_ROOT/tools/services/pyclients.sh" 2>"$TMP/pyclients.err") ||
        skip "no OUTBOX_PYTHON, and tools/services/pyclients.sh failed: $(tail -1 "$TMP/pyclients.err")"
    eval "$py_env"
fi
PY=$OUTBOX_PYTHON
"$PY" -c "import pika, cloudevents.core.bindings.amqp" 2>/dev/null ||
    skip "$PY has no pika or cloudevents (tools/services/pyclients.sh installs them)"

# add_queue URL QUEUE: a durable queue, declared with pika.
add_queue() {
    "$PY" - "$1" "$2" <<'PYEOF' || fail "declare queue $2 on $1"
import sys, pika
conn = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
ch = conn.channel()
ch.queue_delete(sys.argv[2])
ch.queue_declare(sys.argv[2], durable=True)
conn.close()
PYEOF
}

del_queue() {
    "$PY" - "$1" "$2" <<'PYEOF' >/dev/null 2>&1
import sys, pika
conn = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
conn.channel().queue_delete(sys.argv[2])
conn.close()
PYEOF
}

# stage_events STORE ROUTE N: N events in transactions of one key each (a
# fifth without a key), keys interleaved.
SEQ=0
stage_events() {
    local store=$1 route=$2 goal=$3 size key i done=0 out
    shift 3
    while [ $done -lt "$goal" ]; do
        size=$((1 + RANDOM % 120))
        if [ $((RANDOM % 5)) = 0 ]; then key=(); else key=(--key "k$((RANDOM % 12))"); fi
        for ((i = 0; i < size; i++)); do echo "{\"n\":$((SEQ + i)),\"s\":\"caf\u00e9\"}"; done >"$TMP/batch"
        out=$("$OUTBOX" stage --store "$store" "$@" --route "$route" --type "t.$((SEQ % 3))" \
            "${key[@]}" --payload - <"$TMP/batch") || { fail "stage: $out"; finish; }
        SEQ=$((SEQ + size))
        done=$((done + ${out#staged }))
    done
}

# check_queue URL QUEUE STAGED ROUTE MAX_DUPLICATES: read back and compare.
check_queue() {
    "$PY" "$HERE/read_queue.py" "$1" "$2" "$TMP/read.jsonl" "$3" "$4" >"$TMP/read.out" 2>&1
    local rc=$?
    cat "$TMP/read.out"
    [ $rc = 0 ] || fail "read_queue.py on $2 exited $rc"
    analyze "$3.ids" "$TMP/read.jsonl" "$5"
}

sqlite_staged() {
    sqlite3 -cmd '.timeout 10000' -separator "$(printf '\t')" "$DB" \
        "SELECT event_id, coalesce(ordering_key, ''), event_type, payload FROM outbox ORDER BY created_at, id" >"$1"
    cut -f1,2 "$1" >"$1.ids"
}

# The broker's URI with a query parameter added.
with_q() {
    case $1 in *\?*) echo "$1&$2" ;; *) echo "$1?$2" ;; esac
}

# ---------------------------------------------------------- 1. round trips
echo "== SQLite -> RabbitMQ ($OUTBOX_RABBITMQ_URI)"
Q=ita_$$_sqlite
add_queue "$OUTBOX_RABBITMQ_URI" "$Q"
new_db e2e
stage_events "sqlite:$DB" orders 400
"$OUTBOX" relay --store "sqlite:$DB" --route orders --sink "$(with_q "$OUTBOX_RABBITMQ_URI" "routing_key=$Q")" \
    --until-idle --batch 100 2>"$TMP/relay-sqlite.log" || fail "relay to RabbitMQ: $(tail -2 "$TMP/relay-sqlite.log")"
sqlite_staged "$TMP/staged-sqlite"
check_queue "$OUTBOX_RABBITMQ_URI" "$Q" "$TMP/staged-sqlite" orders 0
del_queue "$OUTBOX_RABBITMQ_URI" "$Q"

if [ -n "${OUTBOX_PG_URI:-}" ]; then
    echo "== PostgreSQL -> RabbitMQ"
    REL=ita_$$
    "$OUTBOX" schema apply --store "$OUTBOX_PG_URI" --relation "$REL" --yes-i-know >/dev/null ||
        fail "schema apply on PostgreSQL"
    Q=ita_$$_pg
    add_queue "$OUTBOX_RABBITMQ_URI" "$Q"
    stage_events "$OUTBOX_PG_URI" payments 400 --relation "$REL"
    # The queue through the relay's destination this time (the sink's
    # routing key defaults to it).
    "$OUTBOX" relay --store "$OUTBOX_PG_URI" --relation "$REL" --route payments \
        --sink "$OUTBOX_RABBITMQ_URI" --destination "$Q" --until-idle --batch 100 2>"$TMP/relay-pg.log" ||
        fail "relay from PostgreSQL: $(tail -2 "$TMP/relay-pg.log")"
    psql -X -qtA -F "$(printf '\t')" -v ON_ERROR_STOP=1 "$OUTBOX_PG_URI" -c \
        "SELECT event_id, coalesce(ordering_key, ''), event_type, payload FROM $REL
         WHERE outbox_route = 'payments' ORDER BY created_at, id" >"$TMP/staged-pg" ||
        fail "psql read of $REL"
    cut -f1,2 "$TMP/staged-pg" >"$TMP/staged-pg.ids"
    check_queue "$OUTBOX_RABBITMQ_URI" "$Q" "$TMP/staged-pg" payments 0
    del_queue "$OUTBOX_RABBITMQ_URI" "$Q"
    psql -X -q "$OUTBOX_PG_URI" -c "DROP TABLE $REL" >/dev/null 2>&1
elif [ "${CI:-}" = true ]; then
    fail "OUTBOX_PG_URI is not set and CI=true: the PostgreSQL half did not run"
else
    echo "*** the PostgreSQL half is skipped: OUTBOX_PG_URI is not set ***"
fi

# ------------------------------------------------------------- 2. faults
echo "== faults on a private node"
PRIVATE_RMQ=$TMP/rabbitmq
env=
for try in 1 2 3; do
    if env=$(OUTBOX_RABBITMQ_PORT=$((27100 + RANDOM % 1800)) "$RMQ_SERVICE" start "$PRIVATE_RMQ" 2>"$TMP/rmq-start.err"); then
        break
    fi
    "$RMQ_SERVICE" stop "$PRIVATE_RMQ" >/dev/null 2>&1
    rm -rf "$PRIVATE_RMQ"
done
PRIV_URI=$(sed -n 's/^export OUTBOX_RABBITMQ_URI=//p' <<<"$env")
[ -n "$PRIV_URI" ] || { fail "no private node would start: $(tail -1 "$TMP/rmq-start.err")"; finish; }
echo "private RabbitMQ at $PRIV_URI"
Q=ita_faults
add_queue "$PRIV_URI" "$Q"
new_db faults
stage_events "sqlite:$DB" orders 3000
sql() { sqlite3 -cmd '.timeout 10000' "$DB" "$1"; }

BATCH=50
STARTS=0
relay() {
    STARTS=$((STARTS + 1))
    LOG=$TMP/relay-$STARTS.log
    background "relay-$STARTS" "$OUTBOX" relay --store "sqlite:$DB" --route orders \
        --sink "$(with_q "$PRIV_URI" "routing_key=$Q&timeout=2s&connect_timeout=1s")" --batch $BATCH \
        --lease 1s --poll 10ms --backoff-base 100ms --backoff-cap 500ms
}

relay
KILLS=$(faults 4 12)
for k in $(seq 1 "$KILLS"); do
    wait_started "$LOG" 1 || { fail "relay $STARTS did not start: $(tail -1 "$LOG")"; break; }
    random_sleep 100 500
    kill9 "$BG_PID"
    [ "$(sql "SELECT count(*) FROM outbox WHERE status = 'pending'")" -ge 500 ] || stage_events "sqlite:$DB" orders 800
    relay
done
wait_started "$LOG" 1
random_sleep 100 400
"$RMQ_SERVICE" stop "$PRIVATE_RMQ" || fail "rabbitmq.sh stop"
random_sleep 200 800
"$RMQ_SERVICE" start "$PRIVATE_RMQ" >/dev/null || fail "rabbitmq.sh start after stop"
stage_events "sqlite:$DB" orders 800
random_sleep 200 600
"$RMQ_SERVICE" kill "$PRIVATE_RMQ" || fail "rabbitmq.sh kill"
random_sleep 200 800
"$RMQ_SERVICE" start "$PRIVATE_RMQ" >/dev/null || fail "rabbitmq.sh start after kill"

end=$((SECONDS + 120))
while [ "$(sql "SELECT count(*) FROM outbox WHERE status <> 'published'")" != 0 ] && [ $SECONDS -lt $end ]; do
    sleep 0.2
done
stop_process "$BG_PID" TERM
forget "$BG_PID"
[ "$RC" = 0 ] && pass "the last relay stopped on SIGTERM with status 0" ||
    fail "the last relay exited $RC on SIGTERM: $(tail -1 "$LOG")"
# The broker faults fell on the last relay: it must have seen the outage.
outage=$(grep -c -E 'not connected to the AMQP broker|connection to the broker|no confirm|broker closed' "$LOG")
[ "$outage" -gt 0 ] && pass "the last relay saw the broker outage ($outage log lines, e.g. $(grep -m1 -E 'AMQP broker|connection to the broker|no confirm|broker closed' "$LOG" | cut -c1-200))" ||
    fail "the last relay never saw the broker down: the broker faults tested nothing ($(tail -1 "$LOG"))"
got=$(sql "SELECT count(*), sum(status = 'published'), sum(status = 'dead') FROM outbox")
total=${got%%|*}
[ "$got" = "$total|$total|0" ] && pass "all $total rows published, none dead" ||
    fail "rows total|published|dead = $got"
echo "$(sql "SELECT count(*) FROM outbox WHERE attempts > 1") rows were claimed more than once"
sqlite_staged "$TMP/staged-faults"
# No dedupe on RabbitMQ: a relay killed after the broker confirmed a batch
# but before the store recorded it, or a broker that stopped after storing
# what it could not confirm, sends that batch again: one batch per fault.
check_queue "$PRIV_URI" "$Q" "$TMP/staged-faults" orders $(((KILLS + 2) * BATCH))
finish
