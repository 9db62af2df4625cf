#!/usr/bin/env bash
# Relays killed with SIGKILL at random instants and restarted while events
# keep coming, the same test on every store; what differs is the table
# below. Then, once the relays have taken over the killed ones' rows (their
# lease passed) and drained the rest: every row published, none
# processing, pending or dead; nothing lost; at most the batches of one
# pipeline per worker duplicated per kill; each key's events first reach the sink in staging
# order (rebuilt from the serial numbers the events carry); and the kills
# caught relays holding rows.
#
#   kill_relays.sh OUTBOX_CLI sqlite|postgres|mongo
#
#   store     relays  workers  kills (--long)  lease  backlog  server
#   sqlite    1       2        10 (50)         1s     8000     a file of this test
#   postgres  3       1        10 (50)         1s     20000    a private server
#   mongo     1       1        5 (20)          2s     1500     the shared FerretDB, a database of this test
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
KIND=${2:?usage: kill_relays.sh OUTBOX_CLI sqlite|postgres|mongo}
announce_seed

BATCH=50
ROUTE=orders
DRAIN_S=120
KEYS=24
case $KIND in
sqlite)
    RELAYS=1 WORKERS=2 KILLS=$(long_or 10 50) LEASE=1s BACKLOG=8000
    new_db kill
    STORE=sqlite:$DB
    attempts_over_1() { sql "SELECT count(*) FROM outbox WHERE attempts > 1"; }
    ;;
postgres)
    RELAYS=3 WORKERS=1 KILLS=$(long_or 10 50) LEASE=1s BACKLOG=20000
    # More keys than one relay's pipeline holds (4 batches of 50): with 24,
    # one relay could hold every key's head and leave the other two idle,
    # so that a kill of either caught nothing.
    KEYS=360
    need_cmd psql postgresql-client
    private_server postgres
    URI=$PRIV_URI
    STORE=$URI
    outbox schema apply --store "$STORE" --yes-i-know >/dev/null || { fail "schema apply"; finish; }
    attempts_over_1() { q "SELECT count(*) FROM outbox WHERE attempts > 1"; }
    ;;
mongo)
    # FerretDB reads the whole collection for most queries: fewer, smaller
    # rounds, and a longer lease and drain.
    RELAYS=1 WORKERS=1 KILLS=$(long_or 5 20) LEASE=2s BACKLOG=1500 DRAIN_S=900
    need_service ferretdb
    mongo_db fault_kill
    STORE=$MONGO_URI
    outbox schema apply --store "$STORE" --yes-i-know >/dev/null || { fail "schema apply"; finish; }
    attempts_over_1() { echo unknown; }
    ;;
*) echo "kill_relays.sh: unknown store $KIND"; exit 2 ;;
esac
OUT=$TMP/out.jsonl
# stage N: N more events through the library in calls of 500, over KEYS keys
# interleaved event by event (one process: quick even under a sanitizer,
# so the backlog is there before the relays catch up with it).
stage() {
    stage_load "$STORE" "$ROUTE" "$1" "$KEYS" 500
}

# count STATUS: rows of the route in STATUS.
count() {
    local s
    s=$(stats_of "$STORE" --route "$ROUTE") || { echo "?"; return; }
    set -- "$1" $s
    case $1 in pending) echo "$2" ;; processing) echo "$3" ;; published) echo "$4" ;; dead) echo "$5" ;; esac
}

# relay I: (re)starts relay number I; its pid in RELAY[I], its log in LOG[I].
RELAY=()
LOG=()
STARTS=0
relay() {
    STARTS=$((STARTS + 1))
    LOG[$1]=$TMP/relay$1-$STARTS.log
    background "relay$1-$STARTS" "$OUTBOX" relay --store "$STORE" --route "$ROUTE" --sink "file:$OUT" \
        --batch "$BATCH" --pipeline "$PIPELINE" --workers "$WORKERS" --lease "$LEASE" --poll 10ms
    RELAY[$1]=$BG_PID
}

# at_work: every relay has started its workers and the route made progress
# since the last kill (MARK), so that the next kill's random
# instant falls in the relays' work, not in their start-up (slow under a
# sanitizer; a first claim on FerretDB reads the whole collection).
at_work() {
    local i
    for i in $(seq 1 $RELAYS); do
        wait_started "${LOG[$i]}" "$WORKERS" || { fail "relay $i did not start: $(tail -1 "${LOG[$i]}")"; return 1; }
    done
    _progressed() { [ "$(count published)" -gt "$MARK" ]; }
    wait_until 60 _progressed || { fail "no relay published in 60 s: $(tail -1 "${LOG[1]}")"; return 1; }
}

MARK=$(count published)
stage "$BACKLOG"
for i in $(seq 1 $RELAYS); do relay "$i"; done
caught=0
victims=""
for k in $(seq 1 "$KILLS"); do
    at_work || break
    random_sleep 50 400
    v=$((1 + RANDOM % RELAYS))
    kill9 "${RELAY[$v]}"
    victims="$victims $v"
    # A lone relay's rows in processing are the killed one's.
    [ $RELAYS = 1 ] && [ "$(count processing)" -gt 0 ] && caught=$((caught + 1))
    # A backlog that outlasts the next pause, staged while the victim is
    # down, so that the next kill lands on busy relays.
    MARK=$(count published)
    [ "$(count pending)" -ge "$BACKLOG" ] || stage "$BACKLOG"
    relay "$v"
done
echo "$STAGED events staged; relays killed in turn:$victims"

# The relays take over what the killed ones held once the lease ends, and
# drain the rest.
drained() { [ "$(count pending) $(count processing)" = "0 0" ]; }
wait_until "$DRAIN_S" drained || fail "not drained in $DRAIN_S s: $(stats_of "$STORE" --route "$ROUTE")"
stopped=0
for i in $(seq 1 $RELAYS); do
    stop_process "${RELAY[$i]}" TERM
    [ "$RC" = 0 ] && stopped=$((stopped + 1)) || fail "relay $i exited $RC on SIGTERM: $(tail -1 "${LOG[$i]}")"
done
[ "$stopped" = "$RELAYS" ] && pass "all $RELAYS relays stopped on SIGTERM with status 0"

check "pending processing published dead" "0 0 $STAGED 0" "$(stats_of "$STORE" --route "$ROUTE")"
# The kills caught relays holding rows: a lone relay's in processing just
# after the kill, or rows claimed a second time once a lease expired.
again=$(attempts_over_1)
if [ $RELAYS = 1 ]; then
    [ "$caught" -gt 0 ] && pass "$caught of $KILLS kills caught the relay holding rows ($again rows claimed twice)" ||
        fail "none of $KILLS kills caught the relay holding rows: the test tested nothing"
else
    [ "$again" -gt 0 ] && pass "$again rows were taken over from killed relays" ||
        fail "no row was ever claimed twice: no kill caught a relay holding rows, the test tested nothing"
fi
analyze "serials:$SEQ" "$OUT" $((KILLS * WORKERS * PIPELINE * BATCH))
[ "$FAILED" -eq 0 ] || echo "the relays' last warning: $(grep -h ' warn' "$TMP"/relay*.log | tail -1)"
finish
