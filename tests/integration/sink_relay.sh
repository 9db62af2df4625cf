#!/usr/bin/env bash
# End to end through one sink, read back by clients nobody here wrote. The
# same test for every sink; what differs (its server, its reader, how a
# destination is made, whether the broker dedupes) is in SINK/sink.sh.
#
#  1. `outbox stage` into SQLite and into PostgreSQL, then `outbox relay
#     --until-idle` to the shared server (OUTBOX_<X>_URI): the sink's
#     third-party reader builds a CloudEvent of each message with the
#     CloudEvents SDK, and ids, payloads, attributes and the protocol's own
#     fields match what the store holds, each event once, each key in
#     staging order. The SQLite relay is first given a sink URI with a
#     password: the relay's output never shows it.
#  2. On a private server of this test: the relay killed with SIGKILL and
#     restarted several times, and the server stopped and started, then
#     killed with SIGKILL and started, all under a running relay. Then:
#     nothing lost, each key's events first reach the broker in staging
#     order, every row published, none dead, and duplicates none where the
#     broker dedupes, else at most one pipeline of batches per fault.
#
#   sink_relay.sh OUTBOX_CLI SINK
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
SINK=${2:?usage: sink_relay.sh OUTBOX_CLI SINK}
HERE=$(cd "$(dirname "$0")/$SINK" && pwd)
SINK_QUERY=
READ_EXTRA=
FAULT_BACKLOG=3000
# shellcheck source=nats/sink.sh
. "$HERE/sink.sh"
need_service "$SERVICE"
need_python
announce_seed
prefix=$(service_prefix "$SERVICE")
BASE_VAR=OUTBOX_${prefix}_URI
BASE=${!BASE_VAR}

# with_query URI QUERY: URI with QUERY added to its query string.
with_query() {
    if [ -z "$2" ]; then echo "$1"; else case $1 in *\?*) echo "$1&$2" ;; *) echo "$1?$2" ;; esac; fi
}

# with_secret URI SECRET: URI with SECRET as its password.
with_secret() {
    case $1 in
    *://*:*@*) echo "$1" | sed -E "s#^([a-z]+://[^:/@]+):[^@]*@#\1:$2@#" ;;
    *) echo "$1" | sed -E "s#^([a-z]+://)#\1outbox:$2@#" ;;
    esac
}

# read_back URI DEST STAGED ROUTE MAX_DUPLICATES: the sink's reader on
# DEST, checked against STAGED, then the delivery analysis.
read_back() {
    "$PY" "$HERE/$READER" "$1" "$2" "$TMP/read.jsonl" "$3" "$4" ${READ_EXTRA:+"$READ_EXTRA"} \
        >"$TMP/read.out" 2>&1
    local rc=$?
    cat "$TMP/read.out"
    [ $rc = 0 ] || fail "$READER on $2 exited $rc"
    analyze "$3.ids" "$TMP/read.jsonl" "$5"
}

# ---------------------------------------------------------- 1. round trips
echo "== SQLite -> $SINK ($BASE)"
DEST=rt_$$_sqlite
sink_prepare "$BASE" "$DEST"
new_db e2e
stage_events "sqlite:$DB" orders 400
SECRET=S1nk5ecret$$
SECRET_URI=$(with_query "$(with_secret "$BASE" "$SECRET")" "$SINK_QUERY")
outbox relay --store "sqlite:$DB" --route orders --sink "$SECRET_URI" --destination "$DEST" \
    --until-idle --batch 100 --backoff-base 10ms --backoff-cap 50ms >"$TMP/relay-secret.log" 2>&1
rc=$?
no_secret_in "$SECRET" "$TMP/relay-secret.log" "the relay's output, its sink URI holding a password"
if [ "$SECRET_REFUSED" = 1 ]; then
    [ $rc != 0 ] && pass "the server refused the password: $(grep -v ' info: ' "$TMP/relay-secret.log" | tail -1)" ||
        fail "a relay ran with a password the server should refuse"
    outbox relay --store "sqlite:$DB" --route orders --sink "$(with_query "$BASE" "$SINK_QUERY")" \
        --destination "$DEST" --until-idle --batch 100 2>"$TMP/relay-sqlite.log" ||
        fail "relay to $SINK: $(tail -2 "$TMP/relay-sqlite.log")"
else
    [ $rc = 0 ] || fail "relay to $SINK with a password: $(tail -2 "$TMP/relay-secret.log")"
fi
staged_sqlite "$TMP/staged-sqlite"
read_back "$BASE" "$DEST" "$TMP/staged-sqlite" orders 0

if [ -n "${OUTBOX_PG_URI:-}" ]; then
    echo "== PostgreSQL -> $SINK"
    URI=$OUTBOX_PG_URI
    pg_schema "it_$SINK"
    outbox schema apply --store "$URI" --relation "$SCH.outbox" --yes-i-know >/dev/null ||
        fail "schema apply on PostgreSQL"
    DEST=rt_$$_pg
    sink_prepare "$BASE" "$DEST"
    stage_events "$URI" payments 400 --relation "$SCH.outbox"
    outbox relay --store "$URI" --relation "$SCH.outbox" --route payments \
        --sink "$(with_query "$BASE" "$SINK_QUERY")" --destination "$DEST" --until-idle --batch 100 \
        2>"$TMP/relay-pg.log" || fail "relay from PostgreSQL: $(tail -2 "$TMP/relay-pg.log")"
    staged_pg "$TMP/staged-pg" "$SCH.outbox" payments
    read_back "$BASE" "$DEST" "$TMP/staged-pg" payments 0
else
    skip_part "the PostgreSQL half: OUTBOX_PG_URI is not set"
fi

# ------------------------------------------------------------- 2. faults
echo "== faults on a private server"
private_server "$SERVICE"
DEST=faults
sink_prepare "$PRIV_URI" "$DEST"
new_db faults
BATCH=50
STARTS=0
LOG=/dev/null
pending() {
    sql "SELECT count(*) FROM outbox WHERE status = 'pending'"
}
# relay_at_work: a new relay, busy: a backlog of at least FAULT_BACKLOG
# events staged while no relay runs (through the library in one process:
# a relay drains events about as fast as they are staged), the relay started and seen publishing (a new
# relay can spend a fixed sleep still starting, under a sanitizer on a busy
# machine). A fault a random instant later falls on work in hand.
relay_at_work() {
    [ "$(pending)" -ge "$FAULT_BACKLOG" ] || stage_load "sqlite:$DB" orders "$FAULT_BACKLOG" 12 500
    local before
    before=$(sql "SELECT count(*) FROM outbox WHERE status = 'published'")
    STARTS=$((STARTS + 1))
    LOG=$TMP/relay-$STARTS.log
    background "relay-$STARTS" "$OUTBOX" relay --store "sqlite:$DB" --route orders \
        --sink "$(with_query "$(with_query "$PRIV_URI" "$SINK_QUERY")" "$FAULT_QUERY")" \
        --destination "$DEST" --batch $BATCH --lease 1s --poll 10ms --backoff-base 100ms --backoff-cap 500ms
    wait_started "$LOG" 1 || { fail "relay $STARTS did not start: $(tail -1 "$LOG")"; return 1; }
    _progressed() { [ "$(sql "SELECT count(*) FROM outbox WHERE status = 'published'")" -gt "$before" ]; }
    wait_until 60 _progressed || { fail "relay $STARTS published nothing in 60 s: $(tail -1 "$LOG")"; return 1; }
}

# A fast broker can drain a backlog before a random instant comes: a kill
# counts as caught when the relay it killed left rows in processing (the
# only relay running, so they were its own), and the kills go on, up to
# three times as many, until at least one was caught.
KILLS=$(long_or 4 12)
caught=0
k=0
while [ $k -lt "$KILLS" ] || { [ $caught = 0 ] && [ $k -lt $((KILLS * 3)) ]; }; do
    k=$((k + 1))
    relay_at_work || break
    random_sleep 0 150
    kill9 "$BG_PID"
    [ "$(sql "SELECT count(*) FROM outbox WHERE status = 'processing'")" -gt 0 ] && caught=$((caught + 1))
done
KILLS=$k
[ $caught -gt 0 ] && pass "$caught of $KILLS relay kills caught the relay holding rows" ||
    fail "none of $KILLS relay kills caught the relay holding rows: the kills tested nothing"
relay_at_work
random_sleep 0 150
server "$SERVICE" "$PRIV_DIR" stop
random_sleep 200 800
server "$SERVICE" "$PRIV_DIR" start
stage_load "sqlite:$DB" orders 800 12 500
random_sleep 200 600
server "$SERVICE" "$PRIV_DIR" kill
random_sleep 200 800
server "$SERVICE" "$PRIV_DIR" start

drained() { [ "$(sql "SELECT count(*) FROM outbox WHERE status <> 'published'")" = 0 ]; }
wait_until 120 drained || fail "not drained 120 s after the last fault"
stop_process "$BG_PID" TERM
[ "$RC" = 0 ] && pass "the last relay stopped on SIGTERM with status 0" ||
    fail "the last relay exited $RC on SIGTERM: $(tail -1 "$LOG")"
# The server faults fell on the last relay at work: rows of its batches
# were rescheduled or released for want of the server (its stop line
# counts them; nothing else makes it do either once the kills are over).
met=$(sed -n 's/.*stopped ([^)]*): claimed [0-9]*, published [0-9]*, retried \([0-9]*\), dead [0-9]*, released \([0-9]*\).*/\1 \2/p' "$LOG" | tail -1)
if [ -n "$met" ] && [ $((${met% *} + ${met#* })) -gt 0 ]; then
    pass "the last relay met the server faults with work in hand: retried, released = $met ($(grep -m1 -E 'sink unavailable|retry' "$LOG" | cut -c1-160))"
else
    fail "the last relay never met the server down with work in hand (retried, released = ${met:-?}): the server faults tested nothing"
fi
got=$(sql "SELECT count(*), sum(status = 'published'), sum(status = 'dead') FROM outbox")
total=${got%%|*}
[ "$got" = "$total|$total|0" ] && pass "all $total rows published, none dead" ||
    fail "rows total|published|dead = $got"
again=$(sql "SELECT count(*) FROM outbox WHERE attempts > 1")
[ "$again" -gt 0 ] && pass "$again rows were taken over from killed relays" ||
    fail "no row was ever claimed twice: no kill caught a relay holding rows, the kills tested nothing"
staged_sqlite "$TMP/staged-faults"
# Without dedupe, each relay kill and each server fault may deliver a batch
# again.
if [ "$DEDUPE" = 1 ]; then dups=0; else dups=$(((KILLS + 2) * PIPELINE * BATCH)); fi
read_back "$PRIV_URI" "$DEST" "$TMP/staged-faults" orders "$dups"
finish
