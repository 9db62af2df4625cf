#!/usr/bin/env bash
# A slow store link: two relays reach a private PostgreSQL server through
# toxiproxy, and every answer of the server is held back 3 s (a latency
# toxic, 1 s of jitter) while the relays run with a 2 s lease. A batch's
# claim answer then arrives after its lease has run out, so the other relay
# may claim the same rows again; the first relay's settle must then be
# refused by the fence (the relay logs "N of M rows no longer hold this
# claim's fence") and change nothing. The slow spell lasts until such a
# conflict was seen (20 s at least, 60 s with --long; 90 s and 240 s at
# most), then the link is fast again and the relays drain the rest.
#
# Checks: every event delivered, per-key order by first appearance, every
# row published and none pending, processing or dead; fence conflicts
# happened, rows were claimed again, and the relays' stop lines count each
# row published exactly once (a refused settle counted nothing); the
# duplicates at most the rows whose settle was refused. The longest pause
# is the longest time the sink's output did not grow, from the staging on.
#
#   proxy_latency.sh OUTBOX_CLI
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
. "$(dirname "$0")/faults.sh"
need_service toxiproxy
need_cmd curl curl
need_cmd psql postgresql-client
announce_seed

EVENTS=$(long_or 1500 5000)
SLOW_MIN=$(long_or 20 60)
SLOW_MAX=$(long_or 90 240)
BATCH=50
ROUTE=orders
private_server postgres
URI=$PRIV_URI
proxy_to store "$(cat "$PRIV_DIR/port")"
VIA=postgresql://outbox@127.0.0.1:$PROXY_PORT/outbox_test
OUT=$TMP/out.jsonl
outbox schema apply --store "$URI" --yes-i-know >/dev/null || { fail "schema apply"; finish; }

# The relays connect while the link is fast (a connection's start-up is
# several round trips), and wait on an empty table.
LOGS=()
RELAYS=()
for i in 1 2; do
    background "relay$i" "$OUTBOX" relay --store "$VIA" --route "$ROUTE" --sink "file:$OUT" \
        --batch "$BATCH" --lease 2s --backoff-base 100ms --backoff-cap 1s
    RELAYS+=("$BG_PID")
    LOGS+=("$TMP/relay$i.log")
done
for l in "${LOGS[@]}"; do
    wait_started "$l" 1 || { fail "a relay did not start: $(tail -1 "$l")"; finish; }
done

# conflicts: settles refused so far (rows, summed over the relays' warnings).
conflict_rows() {
    sed -n 's/.* \([0-9]*\) of [0-9]* rows no longer hold this claim.s fence.*/\1/p' "${LOGS[@]}" |
        awk '{n += $1} END {print n + 0}'
}
conflict_lines() {
    cat "${LOGS[@]}" | grep -c "no longer hold this claim.s fence"
}

toxic store slow latency downstream '{"latency":3000,"jitter":1000}'
watch_output "$OUT"
t0=$SECONDS
stage_load "$URI" "$ROUTE" "$EVENTS" 24 500
echo "$STAGED events staged with every answer of the server 3 s late"
until { [ $((SECONDS - t0)) -ge "$SLOW_MIN" ] && [ "$(conflict_lines)" -gt 0 ]; } ||
    [ $((SECONDS - t0)) -ge "$SLOW_MAX" ]; do
    sleep 1
done
slow_s=$((SECONDS - t0))
published_slow=$(q "SELECT count(*) FROM outbox WHERE status = 'published'")
untoxic store slow
echo "the link was slow for $slow_s s; $published_slow events were published meanwhile"

drained() { [ "$(q "SELECT count(*) FROM outbox WHERE status IN ('pending', 'processing')")" = 0 ]; }
wait_until 120 drained || fail "not drained 120 s after the link was fast again: $(stats_of "$URI" --route "$ROUTE")"
unwatch_output
for i in 0 1; do
    stop_process "${RELAYS[$i]}" TERM
    [ "$RC" = 0 ] || fail "relay $((i + 1)) exited $RC on SIGTERM: $(tail -1 "${LOGS[$i]}")"
done

check "pending processing published dead" "0 0 $STAGED 0" "$(stats_of "$URI" --route "$ROUTE")"
lines=$(conflict_lines)
rows=$(conflict_rows)
if [ "$lines" -gt 0 ]; then
    pass "$lines settles were refused by the fence ($rows rows): $(grep -h -m1 "no longer hold" "${LOGS[@]}" | head -1 | cut -c1-160)"
else
    fail "no settle was refused in $slow_s s of a 3 s link with a 2 s lease: the slow link tested nothing"
fi
again=$(q "SELECT count(*) FROM outbox WHERE attempts > 1")
[ "$again" -gt 0 ] && pass "$again rows were claimed again after their lease ran out" ||
    fail "no row was claimed twice: no lease ran out under the slow link"
# Each row's settle as published was applied once: the refused ones
# count nothing in the stop lines.
read -r claimed published retried dead released <<<"$(relay_stop_counts "${LOGS[@]}")"
check "rows the relays' stop lines count as published" "$STAGED" "$published"
echo "stop lines: claimed $claimed, published $published, retried $retried, dead $dead, released $released"
dups=$(duplicates "$OUT")
analyze "serials:$SEQ" "$OUT" "$rows"
figures 1 "$STAGED" "$dups" "$(output_pause "$OUT")" "fence conflicts $lines ($rows rows), slow for $slow_s s, $published_slow published while slow"
finish
