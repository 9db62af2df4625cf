#!/usr/bin/env bash
# The store link reset while the relay settles: one relay reaches a
# private PostgreSQL server through toxiproxy, whose answers come 500 ms
# late (a latency toxic), so that a batch's claim answer spends that long on
# its way back. A fault waits for that moment (the server shows the relay's
# session idle right after the claim, with rows in processing), then puts a
# reset_peer toxic on what the relay sends: the next thing it sends, the
# settle of that batch, is dropped and the connection reset (TCP RST). The
# toxic goes once the server has lost the session. 4 faults, 15 with --long.
#
# Checks: each fault caught a batch between its claim and its settle and
# cost the relay its session (the server saw it go, the relay reconnected);
# every event delivered, per-key order by first appearance, every row
# published and none pending, processing or dead; at most one pipeline of batches
# duplicated per fault. The longest pause is the longest time the sink's
# output did not grow while the relay ran.
#
#   proxy_reset.sh OUTBOX_CLI
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
. "$(dirname "$0")/faults.sh"
need_service toxiproxy
need_cmd curl curl
need_cmd psql postgresql-client
announce_seed

FAULTS=$(long_or 4 15)
BACKLOG=2000
BATCH=50
ROUTE=orders
APP=reset_$$
private_server postgres
URI=$PRIV_URI
proxy_to store "$(cat "$PRIV_DIR/port")"
VIA="postgresql://outbox@127.0.0.1:$PROXY_PORT/outbox_test?application_name=$APP"
OUT=$TMP/out.jsonl
LOG=$TMP/relay.log
outbox schema apply --store "$URI" --yes-i-know >/dev/null || { fail "schema apply"; finish; }

pending() { q "SELECT count(*) FROM outbox WHERE status = 'pending'"; }

# in_flight: the relay's session has just run a claim that took rows and is
# idle (its answer is still in the proxy's 500 ms): sets VICTIM to the
# session's pid and the rows that claim took. The claim is the one
# statement with SKIP LOCKED, and its rows carry the instant it ran
# (processing_at; a session that only prepared the claim took none);
# anything the relay sends next is that batch's settle.
in_flight() {
    local got
    got=$(q "SELECT a.pid, (SELECT count(*) FROM outbox WHERE status = 'processing'
                            AND processing_at >= a.query_start)
             FROM pg_stat_activity a WHERE a.application_name = '$APP' AND a.state = 'idle'
             AND a.query LIKE '%SKIP LOCKED%' AND a.state_change > clock_timestamp() - interval '200 ms'")
    [ -n "$got" ] && [ "${got#*|}" -gt 0 ] && VICTIM=$got
}
gone() { [ "$(q "SELECT count(*) FROM pg_stat_activity WHERE pid = ${VICTIM%|*}")" = 0 ]; }

stage_load "$URI" "$ROUTE" "$BACKLOG" 24 500
toxic store slow latency downstream '{"latency":500}'
background relay "$OUTBOX" relay --store "$VIA" --route "$ROUTE" --sink "file:$OUT" --batch "$BATCH" \
    --lease 3s --backoff-base 100ms --backoff-cap 1s
R=$BG_PID
wait_started "$LOG" 1 || { fail "the relay did not start: $(tail -1 "$LOG")"; finish; }
watch_output "$OUT"

caught=0
missed=0
f=0
while [ $f -lt "$FAULTS" ]; do
    [ "$(pending)" -ge $((BACKLOG / 2)) ] || stage_load "$URI" "$ROUTE" "$BACKLOG" 24 500
    random_sleep 0 500
    if ! wait_until 20 in_flight; then
        fail "the relay never stood between a claim and its settle for 20 s: $(tail -1 "$LOG")"
        break
    fi
    toxic store reset reset_peer upstream '{"timeout":0}'
    # Off again as soon as the session is gone: the relay retries its
    # settle at once on a new connection, which the toxic would cut too.
    end=$((SECONDS + 10))
    until gone || [ $SECONDS -ge $end ]; do :; done
    gone; lost=$?
    untoxic store reset
    f=$((f + 1))
    if [ $lost = 0 ]; then
        caught=$((caught + 1))
        echo "fault $f: session ${VICTIM%|*} reset between its claim and its settle, ${VICTIM#*|} rows in processing"
    else
        missed=$((missed + 1))
        echo "fault $f: session ${VICTIM%|*} still there 10 s after the reset toxic"
    fi
done
[ "$caught" = "$FAULTS" ] && pass "all $FAULTS resets cut the relay's session between a claim and its settle" ||
    fail "$caught of $FAULTS resets cut the relay's session between a claim and its settle ($missed never cut it)"
untoxic store slow

drained() { [ "$(q "SELECT count(*) FROM outbox WHERE status <> 'published'")" = 0 ]; }
wait_until 120 drained || fail "not drained 120 s after the last fault: $(stats_of "$URI" --route "$ROUTE")"
unwatch_output
kill -0 "$R" 2>/dev/null && pass "the relay survived every reset" ||
    fail "the relay died: $(grep -v ' info: ' "$LOG" | tail -1)"
stop_process "$R" TERM
[ "$RC" = 0 ] && pass "the relay stopped on SIGTERM with status 0" || fail "the relay exited $RC on SIGTERM"
back=$(grep -c "reconnected to PostgreSQL" "$LOG")
[ "$back" -ge "$caught" ] && pass "the relay reconnected $back times" ||
    fail "the relay reconnected $back times for $caught resets: $(grep -v ' info: ' "$LOG" | tail -1)"
resets=$(grep -c "Connection reset by peer" "$PRIV_DIR/server.log")
echo "the server logged $resets connections reset by peer"

check "pending processing published dead" "0 0 $STAGED 0" "$(stats_of "$URI" --route "$ROUTE")"
again=$(q "SELECT count(*) FROM outbox WHERE attempts > 1")
dups=$(duplicates "$OUT")
analyze "serials:$SEQ" "$OUT" $((FAULTS * PIPELINE * BATCH))
figures "$FAULTS" "$STAGED" "$dups" "$(output_pause "$OUT")" "reconnects $back, rows claimed again $again"
finish
