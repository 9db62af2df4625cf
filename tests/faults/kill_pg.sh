#!/usr/bin/env bash
# Three relays on one PostgreSQL route; one of them, picked at random, is
# killed with SIGKILL at a random instant (10 times, 50 with --long) and
# restarted, while events keep coming. Then, once the relays have drained
# everything, the killed ones' leases included: nothing lost, at most one
# batch duplicated per kill, each key's events first reach the sink in
# staging order, nothing left in processing. Runs on a private server.
. "$(dirname "$0")/lib.sh" "$@"

KILLS=$(faults 10 50)
RELAYS=3
BATCH=50
LEASE_S=1
private_pg
REL=outbox
OUT=$TMP/out.jsonl
STAGED=0
"$OUTBOX" schema apply --store "$URI" --relation "$REL" --yes-i-know >/dev/null || { fail "schema apply"; finish; }

# stage N: N more events over 1000 keys, interleaved event by event, in
# transactions of 500.
stage() {
    local out
    out=$("$PG_LOAD" "$URI" "$REL" orders "$1" 1000 500) || { fail "pg_load: $out"; finish; }
    STAGED=$((STAGED + ${out#staged }))
}

# relay I: (re)starts relay number I; its pid is in RELAY[I], its log in
# LOG[I].
RELAY=()
LOG=()
STARTS=0
relay() {
    STARTS=$((STARTS + 1))
    LOG[$1]=$TMP/relay$1-$STARTS.log
    background "relay$1-$STARTS" "$OUTBOX" relay --store "$URI" --relation "$REL" --route orders \
        --sink "file:$OUT" --batch "$BATCH" --lease "${LEASE_S}s" --poll 10ms
    RELAY[$1]=$BG_PID
}

stage 10000
for i in $(seq 1 $RELAYS); do relay "$i"; done
victims=""
for k in $(seq 1 "$KILLS"); do
    for i in $(seq 1 $RELAYS); do
        wait_started "${LOG[$i]}" 1 || { fail "relay $i did not start: $(tail -1 "${LOG[$i]}")"; break 2; }
    done
    # A backlog that outlasts the longest pause (three relays take up to
    # 15,000 events a second), so that every kill lands on busy relays.
    [ "$(q "SELECT count(*) FROM $REL WHERE status = 'pending'")" -ge 10000 ] || stage 10000
    random_sleep 50 400
    v=$((1 + RANDOM % RELAYS))
    kill9 "${RELAY[$v]}"
    victims="$victims $v"
    relay "$v"
done
echo "$STAGED events staged; relays killed in turn:$victims"

# The relays take over what the killed ones held once the lease ends, and
# drain the rest.
end=$((SECONDS + 120))
while [ "$(q "SELECT count(*) FROM $REL WHERE status <> 'published'")" != 0 ] && [ $SECONDS -lt $end ]; do
    sleep 0.2
done
stopped=0
for i in $(seq 1 $RELAYS); do
    stop_process "${RELAY[$i]}" TERM
    forget "${RELAY[$i]}"
    [ "$RC" = 0 ] && stopped=$((stopped + 1)) || fail "relay $i exited $RC on SIGTERM: $(tail -1 "${LOG[$i]}")"
done
[ "$stopped" = "$RELAYS" ] && pass "all $RELAYS relays stopped on SIGTERM with status 0"

got=$(q "SELECT count(*), count(*) FILTER (WHERE status = 'published'), count(*) FILTER (WHERE status = 'processing'),
         count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'dead') FROM $REL")
[ "$got" = "$STAGED|$STAGED|0|0|0" ] &&
    pass "all $STAGED rows published, none processing, pending or dead" ||
    fail "rows total|published|processing|pending|dead = $got, expected $STAGED|$STAGED|0|0|0"
# A row is claimed a second time only when a lease expired: the kills
# caught relays holding rows.
again=$(q "SELECT count(*) FROM $REL WHERE attempts > 1")
[ "$again" -gt 0 ] && pass "$again rows were taken over from killed relays" ||
    fail "no row was ever claimed twice: no kill caught a relay holding rows, the test tested nothing"
q "COPY (SELECT event_id, coalesce(ordering_key, '') FROM $REL ORDER BY created_at, id) TO STDOUT" >"$TMP/staged"
analyze "$TMP/staged" "$OUT" $((KILLS * BATCH))
finish
