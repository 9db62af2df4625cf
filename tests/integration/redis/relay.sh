#!/usr/bin/env bash
# End to end through the Redis sink, read back by clients nobody here wrote:
#
#  1. `outbox stage` into SQLite, and into PostgreSQL when OUTBOX_PG_URI is
#     set, then `outbox relay --until-idle` to the server of OUTBOX_REDIS_URI;
#     redis-py reads the stream back and the CloudEvents SDK builds each
#     event from the entry's fields: ids, payloads and attributes match what
#     the store holds, and each event is in the stream once.
#  2. On a private server of this test (tools/services/redis.sh in $TMP,
#     appendfsync always): the relay killed with SIGKILL and restarted
#     several times, and the server stopped and started, then killed with
#     SIGKILL and started, all under a running relay. Then: nothing lost,
#     each key's events first reach the stream in staging order, every row
#     published, and duplicates (Redis has no dedupe id) at most one batch
#     per fault.
#
#   relay.sh OUTBOX_CLI
. "$(dirname "$0")/../../faults/lib.sh" "$1"

HERE=$(cd "$(dirname "$0")" && pwd)
REDIS_SERVICE=$SRC_ROOT/tools/services/redis.sh
PRIVATE_REDIS=""
eval "orig_$(declare -f cleanup)"
cleanup() {
    [ -n "$PRIVATE_REDIS" ] && "$REDIS_SERVICE" stop "$PRIVATE_REDIS" >/dev/null 2>&1
    orig_cleanup
}

skip() {
    if [ "${CI:-}" = true ]; then
        echo "FAIL: $1, and CI=true: the Redis tests must run in CI"
        exit 1
    fi
    echo
    echo "*** SKIPPED: $1. ***"
    echo "*** Start a server with eval \"\$(tools/services/redis.sh start /tmp/outbox-redis)\" and make the"
    echo "*** Python clients with eval \"\$(tools/services/pyclients.sh)\", then run the tests again."
    echo
    exit 77
}

[ -n "${OUTBOX_REDIS_URI:-}" ] || skip "OUTBOX_REDIS_URI is not set"
if [ -z "${OUTBOX_PYTHON:-}" ]; then
    py_env=$("$SRC_ROOT/tools/services/pyclients.sh" 2>"$TMP/pyclients.err") ||
        skip "no OUTBOX_PYTHON, and tools/services/pyclients.sh failed: $(tail -1 "$TMP/pyclients.err")"
    eval "$py_env"
fi
PY=$OUTBOX_PYTHON

# stage_events STORE ROUTE N [ARGS]: N events or a few more, in transactions
# of one key each (a fifth without a key), keys interleaved.
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

# check_stream URL STREAM STAGED ROUTE MAX_DUPLICATES: read back and compare.
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

del_stream() {
    "$PY" -c 'import redis, sys; redis.Redis.from_url(sys.argv[1]).delete(sys.argv[2])' "$1" "$2" ||
        fail "DEL $2 on $1"
}

# ---------------------------------------------------------- 1. round trips
echo "== SQLite -> Redis ($OUTBOX_REDIS_URI)"
STREAM=itr_$$_sqlite
new_db e2e
stage_events "sqlite:$DB" orders 400
# With a password for a user the server does not know: the sink's open
# fails, and its message does not show the password.
SECRET=Redis5ecretPw
WITH_PW=$(echo "$OUTBOX_REDIS_URI" | sed "s#^redis://#redis://outbox:$SECRET@#")
"$OUTBOX" relay --store "sqlite:$DB" --route orders --sink "$WITH_PW/$STREAM" --until-idle \
    >"$TMP/relay-pw.log" 2>&1 && fail "a relay with a wrong password ran"
if grep -q "$SECRET" "$TMP/relay-pw.log"; then
    fail "the relay's output shows the sink's password: $(grep "$SECRET" "$TMP/relay-pw.log" | head -2)"
else
    pass "a refused password does not show in the relay's output ($(grep -m1 -o 'WRONGPASS[^.]*' "$TMP/relay-pw.log"))"
fi
"$OUTBOX" relay --store "sqlite:$DB" --route orders --sink "$OUTBOX_REDIS_URI/$STREAM" --until-idle \
    --batch 100 2>"$TMP/relay-sqlite.log" || fail "relay to Redis: $(tail -2 "$TMP/relay-sqlite.log")"
sqlite_staged "$TMP/staged-sqlite"
check_stream "$OUTBOX_REDIS_URI" "$STREAM" "$TMP/staged-sqlite" orders 0
del_stream "$OUTBOX_REDIS_URI" "$STREAM"

if [ -n "${OUTBOX_PG_URI:-}" ]; then
    echo "== PostgreSQL -> Redis"
    REL=itr_$$
    "$OUTBOX" schema apply --store "$OUTBOX_PG_URI" --relation "$REL" --yes-i-know >/dev/null ||
        fail "schema apply on PostgreSQL"
    STREAM=itr_$$_pg
    stage_events "$OUTBOX_PG_URI" payments 400 --relation "$REL"
    "$OUTBOX" relay --store "$OUTBOX_PG_URI" --relation "$REL" --route payments \
        --sink "$OUTBOX_REDIS_URI/$STREAM" --until-idle --batch 100 2>"$TMP/relay-pg.log" ||
        fail "relay from PostgreSQL: $(tail -2 "$TMP/relay-pg.log")"
    psql -X -qtA -F "$(printf '\t')" -v ON_ERROR_STOP=1 "$OUTBOX_PG_URI" -c \
        "SELECT event_id, coalesce(ordering_key, ''), event_type, payload FROM $REL
         WHERE outbox_route = 'payments' ORDER BY created_at, id" >"$TMP/staged-pg" ||
        fail "psql read of $REL"
    cut -f1,2 "$TMP/staged-pg" >"$TMP/staged-pg.ids"
    check_stream "$OUTBOX_REDIS_URI" "$STREAM" "$TMP/staged-pg" payments 0
    del_stream "$OUTBOX_REDIS_URI" "$STREAM"
    psql -X -q "$OUTBOX_PG_URI" -c "DROP TABLE $REL" >/dev/null 2>&1
elif [ "${CI:-}" = true ]; then
    fail "OUTBOX_PG_URI is not set and CI=true: the PostgreSQL half did not run"
else
    echo "*** the PostgreSQL half is skipped: OUTBOX_PG_URI is not set ***"
fi

# ------------------------------------------------------------- 2. faults
echo "== faults on a private server"
PRIVATE_REDIS=$TMP/redis
env=
for try in 1 2 3 4 5; do
    if env=$(OUTBOX_REDIS_PORT=$((27100 + RANDOM % 1800)) "$REDIS_SERVICE" start "$PRIVATE_REDIS" 2>"$TMP/redis-start.err"); then
        break
    fi
    "$REDIS_SERVICE" stop "$PRIVATE_REDIS" >/dev/null 2>&1
    rm -rf "$PRIVATE_REDIS"
done
PRIV_URI=$(sed -n 's/^export OUTBOX_REDIS_URI=//p' <<<"$env")
[ -n "$PRIV_URI" ] || { fail "no private redis-server would start: $(tail -1 "$TMP/redis-start.err")"; finish; }
echo "private redis-server at $PRIV_URI"
STREAM=itr_faults
BATCH=50
new_db faults
stage_events "sqlite:$DB" orders 3000
sql() { sqlite3 -cmd '.timeout 10000' "$DB" "$1"; }

STARTS=0
relay() {
    STARTS=$((STARTS + 1))
    LOG=$TMP/relay-$STARTS.log
    background "relay-$STARTS" "$OUTBOX" relay --store "sqlite:$DB" --route orders \
        --sink "$PRIV_URI/$STREAM?timeout=2s" --batch $BATCH --lease 1s --poll 10ms \
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
random_sleep 100 400
"$REDIS_SERVICE" stop "$PRIVATE_REDIS" || fail "redis.sh stop"
random_sleep 200 800
"$REDIS_SERVICE" start "$PRIVATE_REDIS" >/dev/null || fail "redis.sh start after stop"
stage_events "sqlite:$DB" orders 800
random_sleep 200 600
"$REDIS_SERVICE" kill "$PRIVATE_REDIS" || fail "redis.sh kill"
random_sleep 200 800
"$REDIS_SERVICE" start "$PRIVATE_REDIS" >/dev/null || fail "redis.sh start after kill"

end=$((SECONDS + 120))
while [ "$(sql "SELECT count(*) FROM outbox WHERE status <> 'published'")" != 0 ] && [ $SECONDS -lt $end ]; do
    sleep 0.2
done
stop_process "$BG_PID" TERM
forget "$BG_PID"
[ "$RC" = 0 ] && pass "the last relay stopped on SIGTERM with status 0" ||
    fail "the last relay exited $RC on SIGTERM: $(tail -1 "$LOG")"
# The server faults fell on the last relay: it must have seen the outage.
# A publish after the server came back reconnects (and says so) without a
# RETRY; one while it was down is RETRY.
outage=$(grep -c -E 'no reply from the Redis server|cannot connect|not sent: |reconnected to the Redis server' "$LOG")
[ "$outage" -gt 0 ] && pass "the last relay saw the server outage ($outage log lines, e.g. $(grep -m1 -E 'Redis server|cannot connect|not sent' "$LOG" | cut -c1-200))" ||
    fail "the last relay never saw the server down: the server faults tested nothing ($(tail -1 "$LOG"))"
got=$(sql "SELECT count(*), sum(status = 'published'), sum(status = 'dead') FROM outbox")
total=${got%%|*}
[ "$got" = "$total|$total|0" ] && pass "all $total rows published, none dead" ||
    fail "rows total|published|dead = $got"
echo "$(sql "SELECT count(*) FROM outbox WHERE attempts > 1") rows were claimed more than once"
sqlite_staged "$TMP/staged-faults"
# A relay killed after the server took a batch, or a server gone before
# its replies left, repeats at most that batch: one batch per fault.
check_stream "$PRIV_URI" "$STREAM" "$TMP/staged-faults" orders $(((KILLS + 2) * BATCH))
finish
