#!/usr/bin/env bash
# `outbox relay --workers 2` on SQLite, killed with SIGKILL at random
# instants (10 times, 50 with --long) and restarted each time while events
# keep coming. Then, once the last relay has taken over the killed ones'
# rows (their lease passed) and drained the rest: nothing lost, at most one
# batch per worker duplicated per kill, each key's events first reach the
# sink in staging order, nothing left in processing.
. "$(dirname "$0")/lib.sh" "$@"

KILLS=$(faults 10 50)
BATCH=50
WORKERS=2
LEASE_S=1
new_db kill
STORE=sqlite:$DB
OUT=$TMP/out.jsonl
STAGED=0
SEQ=0

sql() {
    sqlite3 -cmd '.timeout 10000' "$DB" "$1"
}

# stage N: about N more events, in transactions of 1 to 1500 events, each
# transaction on one of 24 keys or (one in eight) without a key, so keys
# interleave in staging order. Every event carries a serial number.
stage() {
    local goal=$((STAGED + $1)) size key out i
    while [ "$STAGED" -lt "$goal" ]; do
        size=$((1 + RANDOM % 1500))
        if [ $((RANDOM % 8)) = 0 ]; then key=(); else key=(--key "k$((RANDOM % 24))"); fi
        for ((i = 0; i < size; i++)); do echo "{\"n\":$((SEQ + i))}"; done >"$TMP/batch"
        out=$("$OUTBOX" stage --store "$STORE" --route orders --type t "${key[@]}" --payload - <"$TMP/batch") ||
            { fail "stage: $out"; finish; }
        SEQ=$((SEQ + size))
        STAGED=$((STAGED + ${out#staged }))
    done
}

# relay: a new relay, logging to $LOG.
STARTS=0
relay() {
    STARTS=$((STARTS + 1))
    LOG=$TMP/relay-$STARTS.log
    STARTED_US=$(date +%s%6N)
    background "relay-$STARTS" "$OUTBOX" relay --store "$STORE" --route orders --sink "file:$OUT" \
        --batch "$BATCH" --workers "$WORKERS" --lease "${LEASE_S}s" --poll 10ms
}

stage 10000
relay
caught=0
holds=""
for k in $(seq 1 "$KILLS"); do
    wait_started "$LOG" "$WORKERS" || { fail "relay $STARTS did not start: $(tail -1 "$LOG")"; break; }
    random_sleep 50 400
    kill9 "$BG_PID"
    # The killed relay was the only one: what it claimed since it started
    # is still processing (older claims are other kills' catch).
    held=$(sql "SELECT count(*) FROM outbox WHERE status = 'processing' AND processing_at >= $STARTED_US")
    [ "$held" -gt 0 ] && caught=$((caught + 1))
    holds="$holds $held"
    # A backlog that outlasts the longest pause (a relay takes up to 15,000
    # events a second), staged while no relay runs, so that kills land on
    # a busy relay.
    [ "$(sql "SELECT count(*) FROM outbox WHERE status = 'pending'")" -ge 8000 ] || stage 8000
    relay
done
echo "$STAGED events staged; rows each kill caught in processing:$holds"
[ "$caught" -gt 0 ] && pass "$caught of $KILLS kills caught a relay holding rows" ||
    fail "none of $KILLS kills caught a relay holding rows: the test tested nothing"

# The last relay takes over what the killed ones held once their lease ends,
# and drains the rest.
end=$((SECONDS + 120))
while [ "$(sql "SELECT count(*) FROM outbox WHERE status <> 'published'")" != 0 ] && [ $SECONDS -lt $end ]; do
    sleep 0.2
done
stop_process "$BG_PID" TERM
forget "$BG_PID"
[ "$RC" = 0 ] && pass "the last relay stopped on SIGTERM with status 0" ||
    fail "the last relay exited $RC on SIGTERM: $(tail -1 "$LOG")"

check_status() {
    local got
    got=$(sql "SELECT count(*), sum(status = 'published'), sum(status = 'processing'), sum(status = 'pending'),
               sum(status = 'dead') FROM outbox")
    [ "$got" = "$STAGED|$STAGED|0|0|0" ] &&
        pass "all $STAGED rows published, none processing, pending or dead" ||
        fail "rows total|published|processing|pending|dead = $got, expected $STAGED|$STAGED|0|0|0"
}
check_status
echo "$(sql "SELECT count(*) FROM outbox WHERE attempts > 1") rows were claimed more than once"
sql "SELECT event_id, coalesce(ordering_key, '') FROM outbox ORDER BY created_at, id" | tr '|' '\t' >"$TMP/staged"
analyze "$TMP/staged" "$OUT" $((KILLS * WORKERS * BATCH))
[ "$FAILED" -eq 0 ] || echo "the relays' last warning: $(grep -h ' warn: ' "$TMP"/relay-*.log | tail -1)"
finish
