#!/usr/bin/env bash
# End to end: `outbox stage` into SQLite and into PostgreSQL, `outbox relay`
# to Kafka, and the topic read back by confluent-kafka and parsed by the
# CloudEvents SDK (consume.py): ids, payloads and headers as staged. On
# SQLite the relay is killed with SIGKILL several times and the broker is
# stopped and started under it (tools/services/kafka.sh): nothing lost,
# each key's events first reach the topic in staging order, duplicates at
# most a batch per kill. Stops the shared broker: it runs alone.
. "$(dirname "$0")/../../faults/lib.sh" "$1"
KAFKA_SERVICE=$SRC_ROOT/tools/services/kafka.sh

# check NAME EXPECTED ACTUAL
check() {
    if [ "$2" = "$3" ]; then pass "$1: $3"; else fail "$1: got '$3', expected '$2'"; fi
}

need() {
    if [ -n "${!1:-}" ]; then return 0; fi
    if [ "${CI:-}" = true ]; then echo "FAIL: $1 is not set and CI=true: $2"; exit 1; fi
    echo
    echo "*** SKIPPED: $1 is not set: $2 ***"
    echo
    exit 77
}
need OUTBOX_KAFKA_URI 'eval "$(tools/services/kafka.sh start DIR)"'
need OUTBOX_KAFKA_DIR 'eval "$(tools/services/kafka.sh start DIR)"'
need OUTBOX_PYTHON 'eval "$(tools/services/pyclients.sh)"'
BOOT=${OUTBOX_KAFKA_URI#kafka://}
BOOT=${BOOT%%[/?]*}
KILLS=$(faults 3 10)
BATCH=200

create_topic() {
    "$OUTBOX_PYTHON" - "$BOOT" "$1" <<'PY' || { fail "creating topic $1"; finish; }
import sys
from confluent_kafka.admin import AdminClient, NewTopic
a = AdminClient({"bootstrap.servers": sys.argv[1]})
for f in a.create_topics([NewTopic(sys.argv[2], 3, 1)]).values():
    f.result()
PY
}

# stage STORE N: N events in transactions of 1..400, on 12 keys or none.
SEQ=0
stage() {
    local store=$1 goal=$2 done=0 size key
    while [ "$done" -lt "$goal" ]; do
        size=$((1 + RANDOM % 400))
        if [ $((RANDOM % 8)) = 0 ]; then key=(); else key=(--key "k$((RANDOM % 12))"); fi
        for ((i = 0; i < size; i++)); do echo "{\"n\":$((SEQ + i)),\"s\":\"caf\u00e9\"}"; done >"$TMP/batch"
        out=$(outbox stage --store "$store" "${STORE_REL[@]}" --route orders --type order.created \
            "${key[@]}" --payload - <"$TMP/batch") || { fail "stage: $out"; finish; }
        SEQ=$((SEQ + size))
        done=$((done + size))
    done
}

# ---------------------------------------------------------- SQLite, faults
TOPIC=kr_$$_sqlite
create_topic "$TOPIC"
new_db kafka
STORE=sqlite:$DB
STORE_REL=()
stage "$STORE" 6000
SINK="kafka://$BOOT/$TOPIC?timeout=5s"
STARTS=0
relay() {
    STARTS=$((STARTS + 1))
    LOG=$TMP/relay-$STARTS.log
    background "relay-$STARTS" "$OUTBOX" relay --store "$STORE" --route orders --sink "$SINK" \
        --batch "$BATCH" --lease 1s --poll 10ms --backoff-base 100ms --backoff-cap 1s
}
relay
for k in $(seq 1 "$KILLS"); do
    wait_started "$LOG" 1 || { fail "relay $STARTS did not start: $(tail -1 "$LOG")"; break; }
    random_sleep 100 600
    kill9 "$BG_PID"
    relay
    if [ "$k" = 2 ]; then
        # The broker goes away under a running relay and comes back.
        random_sleep 100 400
        "$KAFKA_SERVICE" stop "$OUTBOX_KAFKA_DIR" || fail "kafka.sh stop"
        sleep 1
        "$KAFKA_SERVICE" start "$OUTBOX_KAFKA_DIR" >/dev/null || { fail "kafka.sh start"; finish; }
        pass "broker stopped and started under relay $STARTS"
    fi
done
stage "$STORE" 500
end=$((SECONDS + 120))
while [ "$(sqlite3 "$DB" "SELECT count(*) FROM outbox WHERE status <> 'published'")" != 0 ] && [ $SECONDS -lt $end ]; do
    sleep 0.2
done
stop_process "$BG_PID" TERM
forget "$BG_PID"
check_rows=$(sqlite3 "$DB" "SELECT count(*), sum(status = 'published') FROM outbox")
[ "${check_rows%|*}" = "${check_rows#*|}" ] && pass "all ${check_rows%|*} rows published" ||
    fail "rows total|published = $check_rows"
sqlite3 -separator $'\t' "$DB" "SELECT event_id, coalesce(ordering_key, ''), event_type, outbox_route, '', payload
    FROM outbox ORDER BY created_at, id" >"$TMP/staged.full"
cut -f1,2 "$TMP/staged.full" >"$TMP/staged"
"$OUTBOX_PYTHON" "$(dirname "$0")/consume.py" "$BOOT" "$TOPIC" "$TMP/staged.full" "$TMP/out.jsonl" ||
    FAILED=$((FAILED + 1))
analyze "$TMP/staged" "$TMP/out.jsonl" $(((KILLS + 1) * BATCH))

# ------------------------------------------------------------- PostgreSQL
if [ -z "${OUTBOX_PG_URI:-}" ]; then
    [ "${CI:-}" = true ] && fail "OUTBOX_PG_URI is not set and CI=true"
    echo "*** the PostgreSQL half is SKIPPED: OUTBOX_PG_URI is not set ***"
    finish
fi
TOPIC=kr_$$_pg
create_topic "$TOPIC"
SCH=it_kafka_$$
URI=$OUTBOX_PG_URI
q "CREATE SCHEMA $SCH" >/dev/null
trap 'q "DROP SCHEMA IF EXISTS $SCH CASCADE" >/dev/null 2>&1; cleanup' EXIT
STORE_REL=(--relation "$SCH.outbox")
outbox schema apply --store "$URI" --relation "$SCH.outbox" --yes-i-know >/dev/null || { fail "schema apply"; finish; }
stage "$URI" 2000
outbox relay --store "$URI" --relation "$SCH.outbox" --route orders --sink "kafka://$BOOT/$TOPIC" \
    --batch 500 --until-idle --quiet 2>"$TMP/pg-relay.log" || fail "relay --until-idle: $(tail -1 "$TMP/pg-relay.log")"
q "SELECT event_id, coalesce(ordering_key, ''), event_type, outbox_route, '', payload
   FROM $SCH.outbox ORDER BY created_at, id" | tr '|' '\t' >"$TMP/pg.full"
cut -f1,2 "$TMP/pg.full" >"$TMP/pg.staged"
check "PostgreSQL rows published" "$(wc -l <"$TMP/pg.full" | tr -d ' ')" \
    "$(q "SELECT count(*) FROM $SCH.outbox WHERE status = 'published'")"
"$OUTBOX_PYTHON" "$(dirname "$0")/consume.py" "$BOOT" "$TOPIC" "$TMP/pg.full" "$TMP/pg.jsonl" ||
    FAILED=$((FAILED + 1))
analyze "$TMP/pg.staged" "$TMP/pg.jsonl" 0
finish
