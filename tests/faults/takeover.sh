#!/usr/bin/env bash
# Lease renewal, end to end with the relay's defaults (no --lease):
#
#  1. Relay A claims a batch holding every key and stalls in its publish
#     (its file sink writes into a pipe nobody reads), for three leases.
#     Relay B runs beside it all that time: A's renewals keep the rows, so
#     B takes none of them over (none claimed twice, nothing in B's output).
#  2. A is killed with SIGKILL. B publishes A's rows once A's last lease
#     runs out: the test prints how long that took (the default lease is
#     3 s), and checks that everything is then delivered, nothing claimed
#     a third time, each key in staging order.
#
#   takeover.sh OUTBOX_CLI sqlite|postgres
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
KIND=${2:?usage: takeover.sh OUTBOX_CLI sqlite|postgres}
ROUTE=orders
KEYS=20
case $KIND in
sqlite)
    new_db takeover
    STORE=sqlite:$DB
    attempts_of() { sql "SELECT count(*) FROM outbox WHERE attempts $1"; }
    ;;
postgres)
    need_cmd psql postgresql-client
    need_service postgres
    URI=$OUTBOX_PG_URI
    pg_schema takeover
    STORE=$URI
    outbox schema apply --store "$STORE" --relation "$SCH.outbox" --yes-i-know >/dev/null ||
        { fail "schema apply"; finish; }
    attempts_of() { q "SELECT count(*) FROM $SCH.outbox WHERE attempts $1"; }
    ;;
*) echo "takeover.sh: unknown store $KIND"; exit 2 ;;
esac
# rel: the --relation option of this store, if any.
rel() { [ "$KIND" = postgres ] && echo --relation "$SCH.outbox"; }

# 100 events over the 20 keys, each with a 4 KiB payload: A's first batch
# (all of them, every key) is 400 KiB, far more than a pipe holds.
pad=$(head -c 4096 /dev/zero | tr '\0' x)
for i in $(seq 0 99); do
    echo "{\"n\":$i,\"pad\":\"$pad\"}" >"$TMP/p"
    outbox stage --store "$STORE" $(rel) --route "$ROUTE" --type t --key "k$((i % KEYS))" \
        --payload - <"$TMP/p" >/dev/null 2>"$TMP/stage.err" || { fail "stage: $(cat "$TMP/stage.err")"; finish; }
done
STAGED=100

FIFO=$TMP/stuck
mkfifo "$FIFO"
# Held open for reading and writing, never read: A's writes fill it and block.
exec 3<>"$FIFO"
background relayA "$OUTBOX" relay --store "$STORE" $(rel) --route "$ROUTE" --sink "file:$FIFO" \
    --batch 100 --poll 10ms
A=$BG_PID
held() { [ "$(stats_of "$STORE" $(rel) --route "$ROUTE" | cut -d' ' -f2)" = "$STAGED" ]; }
wait_until 60 held || { fail "relay A never held the $STAGED rows: $(tail -1 "$TMP/relayA.log")"; finish; }
grep -q 'lease 3s (renewed every 1s)' "$TMP/relayA.log" &&
    pass "relay A runs with the default lease, renewed: $(grep -o 'lease [^,]*' "$TMP/relayA.log" | head -1)" ||
    fail "relay A's start line: $(grep ': started: ' "$TMP/relayA.log")"

OUT=$TMP/out.jsonl
: >"$OUT"
background relayB "$OUTBOX" relay --store "$STORE" $(rel) --route "$ROUTE" --sink "file:$OUT" \
    --batch 100 --poll 10ms
B=$BG_PID
wait_started "$TMP/relayB.log" 1 || fail "relay B did not start: $(tail -1 "$TMP/relayB.log")"
# Three leases with A stalled in its publish and B claiming beside it.
sleep 9
kill -0 "$A" 2>/dev/null || fail "relay A died while stalled: $(tail -1 "$TMP/relayA.log")"
check "rows claimed twice while A, stalled, renewed its lease" 0 "$(attempts_of '> 1')"
check "lines relay B published while A held every key" 0 "$(wc -l <"$OUT")"

# 2. A dies; B takes over once A's last lease has run out.
t0=$(date +%s%N)
kill9 "$A"
exec 3<&-
drained() { [ "$(wc -l <"$OUT")" -ge "$STAGED" ]; }
if wait_until 60 drained; then
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    pass "relay B published the killed relay's $STAGED rows $ms ms after the kill (default lease 3 s)"
    echo "figures: faults 1 (relay SIGKILL holding every key), events $STAGED, takeover ${ms} ms"
else
    fail "relay B published $(wc -l <"$OUT") of $STAGED rows in the 60 s after the kill"
fi
settled() { [ "$(stats_of "$STORE" $(rel) --route "$ROUTE")" = "0 0 $STAGED 0" ]; }
wait_until 30 settled || true
check "pending processing published dead" "0 0 $STAGED 0" "$(stats_of "$STORE" $(rel) --route "$ROUTE")"
check "rows claimed more than twice" 0 "$(attempts_of '> 2')"
stop_process "$B" TERM
[ "$RC" = 0 ] || fail "relay B exited $RC on SIGTERM: $(tail -1 "$TMP/relayB.log")"
if [ "$KIND" = sqlite ]; then staged_sqlite "$TMP/staged"; else staged_pg "$TMP/staged" "$SCH.outbox"; fi
analyze "$TMP/staged.ids" "$OUT" 0
finish
