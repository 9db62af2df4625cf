#!/usr/bin/env bash
# End to end through the NATS sink, read back by clients nobody here wrote:
#
#  1. `outbox stage` into SQLite, and into PostgreSQL when OUTBOX_PG_URI is
#     set, then `outbox relay --until-idle` to the server of OUTBOX_NATS_URI;
#     nats-py reads the stream back and the CloudEvents SDK builds each
#     event: ids, payloads and attributes match what the store holds, each
#     event is in the stream once, and nats-py publishing an event's
#     Nats-Msg-Id again is told it is a duplicate.
#  2. On a private server of this test (tools/services/nats.sh in $TMP):
#     the relay killed with SIGKILL and restarted several times, and the
#     server stopped and started, then killed with SIGKILL and started,
#     all under a running relay. Then: nothing lost, each event in the
#     stream once (the stream's duplicate window, 10 minutes here, outlasts
#     the test), each key's events first reach the stream in staging order,
#     every row published.
#
#   relay.sh OUTBOX_CLI
. "$(dirname "$0")/../../faults/lib.sh" "$1"

HERE=$(cd "$(dirname "$0")" && pwd)
NATS_SERVICE=$SRC_ROOT/tools/services/nats.sh
PRIVATE_NATS=""
eval "orig_$(declare -f cleanup)"
cleanup() {
    [ -n "$PRIVATE_NATS" ] && "$NATS_SERVICE" stop "$PRIVATE_NATS" >/dev/null 2>&1
    orig_cleanup
}

skip() {
    if [ "${CI:-}" = true ]; then
        echo "FAIL: $1, and CI=true: the NATS tests must run in CI"
        exit 1
    fi
    echo
    echo "*** SKIPPED: $1. ***"
    echo "*** Start a server with eval \"\$(tools/services/nats.sh start /tmp/outbox-nats)\" and make the"
    echo "*** Python clients with eval \"\$(tools/services/pyclients.sh)\", then run the tests again."
    echo
    exit 77
}

[ -n "${OUTBOX_NATS_URI:-}" ] || skip "OUTBOX_NATS_URI is not set"
if [ -z "${OUTBOX_PYTHON:-}" ]; then
    py_env=$("$SRC_ROOT/tools/services/pyclients.sh" 2>"$TMP/pyclients.err") ||
        skip "no OUTBOX_PYTHON, and tools/services/pyclients.sh failed: $(tail -1 "$TMP/pyclients.err")"
    eval "$py_env"
fi
PY=$OUTBOX_PYTHON

# add_stream URL SUBJECT: a file stream capturing SUBJECT, made with nats-py,
# with a duplicate window of 10 minutes.
add_stream() {
    "$PY" - "$1" "$2" <<'EOF' || fail "add stream $2 on $1"
import asyncio, sys, nats
from nats.js.api import StreamConfig, StorageType
async def main():
    nc = await nats.connect(sys.argv[1])
    js = nc.jetstream()
    name = sys.argv[2].replace(".", "_")
    await js.add_stream(StreamConfig(name=name, subjects=[sys.argv[2]], storage=StorageType.FILE,
                                     duplicate_window=600))
    await nc.close()
asyncio.run(main())
EOF
}

# stage_file STORE ROUTE N: N events from $TMP/lines-*, in transactions of
# one key each (a fifth without a key), keys interleaved.
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

# check_stream URL SUBJECT STAGED ROUTE MAX_DUPLICATES: read back and compare.
check_stream() {
    "$PY" "$HERE/read_stream.py" "$1" "$2" "$TMP/read.jsonl" "$3" "$4" >"$TMP/read.out" 2>&1
    local rc=$?
    cat "$TMP/read.out"
    [ $rc = 0 ] || fail "read_stream.py on $2 exited $rc"
    analyze "$3.ids" "$TMP/read.jsonl" "$5"
}

sqlite_staged() {
    sqlite3 -cmd '.timeout 10000' -separator "$(printf '\t')" "$DB" \
        "SELECT event_id, coalesce(ordering_key, ''), event_type, payload FROM outbox ORDER BY created_at, id" >"$1"
    cut -f1,2 "$1" >"$1.ids"
}

# ---------------------------------------------------------- 1. round trips
echo "== SQLite -> NATS ($OUTBOX_NATS_URI)"
SUBJ=itn_$$_sqlite
add_stream "$OUTBOX_NATS_URI" "$SUBJ"
new_db e2e
stage_events "sqlite:$DB" orders 400
# With a password in the URI (a server without authorization takes any):
# no line of the relay's log shows it.
SECRET=Nats5ecretPw
WITH_PW=$(echo "$OUTBOX_NATS_URI" | sed "s#^nats://#nats://outbox:$SECRET@#")
"$OUTBOX" relay --store "sqlite:$DB" --route orders --sink "$WITH_PW/$SUBJ" --until-idle \
    --batch 100 2>"$TMP/relay-sqlite.log" || fail "relay to NATS: $(tail -2 "$TMP/relay-sqlite.log")"
if grep -q "$SECRET" "$TMP/relay-sqlite.log"; then
    fail "the relay's log shows the sink's password: $(grep "$SECRET" "$TMP/relay-sqlite.log" | head -2)"
else
    pass "no password in the relay's $(wc -l <"$TMP/relay-sqlite.log" | tr -d ' ') log lines ($(grep -m1 -o 'sink nats://[^ ]*' "$TMP/relay-sqlite.log"))"
fi
sqlite_staged "$TMP/staged-sqlite"
check_stream "$OUTBOX_NATS_URI" "$SUBJ" "$TMP/staged-sqlite" orders 0

if [ -n "${OUTBOX_PG_URI:-}" ]; then
    echo "== PostgreSQL -> NATS"
    REL=itn_$$
    "$OUTBOX" schema apply --store "$OUTBOX_PG_URI" --relation "$REL" --yes-i-know >/dev/null ||
        fail "schema apply on PostgreSQL"
    SUBJ=itn_$$_pg
    add_stream "$OUTBOX_NATS_URI" "$SUBJ"
    stage_events "$OUTBOX_PG_URI" payments 400 --relation "$REL"
    "$OUTBOX" relay --store "$OUTBOX_PG_URI" --relation "$REL" --route payments \
        --sink "$OUTBOX_NATS_URI/$SUBJ" --until-idle --batch 100 2>"$TMP/relay-pg.log" ||
        fail "relay from PostgreSQL: $(tail -2 "$TMP/relay-pg.log")"
    psql -X -qtA -F "$(printf '\t')" -v ON_ERROR_STOP=1 "$OUTBOX_PG_URI" -c \
        "SELECT event_id, coalesce(ordering_key, ''), event_type, payload FROM $REL
         WHERE outbox_route = 'payments' ORDER BY created_at, id" >"$TMP/staged-pg" ||
        fail "psql read of $REL"
    cut -f1,2 "$TMP/staged-pg" >"$TMP/staged-pg.ids"
    check_stream "$OUTBOX_NATS_URI" "$SUBJ" "$TMP/staged-pg" payments 0
    psql -X -q "$OUTBOX_PG_URI" -c "DROP TABLE $REL" >/dev/null 2>&1
elif [ "${CI:-}" = true ]; then
    fail "OUTBOX_PG_URI is not set and CI=true: the PostgreSQL half did not run"
else
    echo "*** the PostgreSQL half is skipped: OUTBOX_PG_URI is not set ***"
fi

# ------------------------------------------------------------- 2. faults
echo "== faults on a private server"
PRIVATE_NATS=$TMP/nats
for try in 1 2 3 4 5; do
    if env=$(OUTBOX_NATS_PORT=$((27100 + RANDOM % 1800)) "$NATS_SERVICE" start "$PRIVATE_NATS" 2>"$TMP/nats-start.err"); then
        eval "$env"
        break
    fi
    rm -rf "$PRIVATE_NATS"
done
[ -n "${OUTBOX_NATS_DIR:-}" ] && [ "$OUTBOX_NATS_DIR" != "${PRIVATE_NATS%/}" ] && true
PRIV_URI=$(sed -n 's/^export OUTBOX_NATS_URI=//p' <<<"$env")
[ -n "$PRIV_URI" ] || { fail "no private nats-server would start: $(tail -1 "$TMP/nats-start.err")"; finish; }
echo "private nats-server at $PRIV_URI"
SUBJ=itn_faults
add_stream "$PRIV_URI" "$SUBJ"
new_db faults
stage_events "sqlite:$DB" orders 3000
sql() { sqlite3 -cmd '.timeout 10000' "$DB" "$1"; }

STARTS=0
relay() {
    STARTS=$((STARTS + 1))
    LOG=$TMP/relay-$STARTS.log
    background "relay-$STARTS" "$OUTBOX" relay --store "sqlite:$DB" --route orders \
        --sink "$PRIV_URI/$SUBJ?timeout=2s&reconnect_wait=100ms" --batch 50 --lease 1s --poll 10ms \
        --backoff-base 100ms --backoff-cap 500ms
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
# The server faults must fall on a relay at work: under a sanitizer on a
# busy machine a new relay can spend a fixed sleep still starting, and then
# never meet the outage. Wait until it has published (up to 60 s).
published=$(sql "SELECT count(*) FROM outbox WHERE status = 'published'")
for _ in $(seq 1 600); do
    [ "$(sql "SELECT count(*) FROM outbox WHERE status = 'published'")" -gt "$published" ] && break
    sleep 0.1
done
random_sleep 100 400
"$NATS_SERVICE" stop "$PRIVATE_NATS" || fail "nats.sh stop"
random_sleep 200 800
"$NATS_SERVICE" start "$PRIVATE_NATS" >/dev/null || fail "nats.sh start after stop"
stage_events "sqlite:$DB" orders 800
random_sleep 200 600
"$NATS_SERVICE" kill "$PRIVATE_NATS" || fail "nats.sh kill"
random_sleep 200 800
"$NATS_SERVICE" start "$PRIVATE_NATS" >/dev/null || fail "nats.sh start after kill"

end=$((SECONDS + 120))
while [ "$(sql "SELECT count(*) FROM outbox WHERE status <> 'published'")" != 0 ] && [ $SECONDS -lt $end ]; do
    sleep 0.2
done
stop_process "$BG_PID" TERM
forget "$BG_PID"
[ "$RC" = 0 ] && pass "the last relay stopped on SIGTERM with status 0" ||
    fail "the last relay exited $RC on SIGTERM: $(tail -1 "$LOG")"
# The server faults fell on the last relay: it must have seen the outage.
outage=$(grep -c -E 'not connected to the NATS server|connection to the NATS server .* was lost|no PubAck' "$LOG")
[ "$outage" -gt 0 ] && pass "the last relay saw the server outage ($outage log lines, e.g. $(grep -m1 -E 'NATS server|PubAck' "$LOG" | cut -c1-200))" ||
    fail "the last relay never saw the server down: the server faults tested nothing ($(tail -1 "$LOG"))"
got=$(sql "SELECT count(*), sum(status = 'published'), sum(status = 'dead') FROM outbox")
total=${got%%|*}
[ "$got" = "$total|$total|0" ] && pass "all $total rows published, none dead" ||
    fail "rows total|published|dead = $got"
echo "$(sql "SELECT count(*) FROM outbox WHERE attempts > 1") rows were claimed more than once"
sqlite_staged "$TMP/staged-faults"
check_stream "$PRIV_URI" "$SUBJ" "$TMP/staged-faults" orders 0
finish
