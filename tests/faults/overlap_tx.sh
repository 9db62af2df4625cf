#!/usr/bin/env bash
# Overlapping transactions on PostgreSQL (docs/operations.md, "Overlapping
# transactions and per-key order"):
# two connections stage an event each on the same key, and the one that
# staged first commits second. Session 1 (psql, a transaction held open)
# inserts event A the way the library stages (status pending, created_at
# the moment of staging); then `outbox stage`, in a transaction of its own,
# stages event B on the same key and commits; the relay publishes B while
# A's transaction is still open; then session 1 commits, and the relay
# publishes A after B. 10 rounds over 3 keys, 40 with --long, with a
# backlog of ordinary events on other keys going out meanwhile.
#
# Checks: in each round A was staged before B (created_at) and committed
# after it; B reached the sink while A's transaction was open (an invisible
# earlier row holds nothing back); A reached it after B. Over the run,
# what the file sink got, against the events in commit order: every event
# delivered, none foreign, no duplicates, each key's events first reached
# the sink in commit order; every row published, none dead.
#
# The longest pause here is the longest wait from a commit (as the server's
# clock read it when the commit had returned) to the settle that published
# the event: what a stall behind an invisible row would lengthen.
#
# Then, for the record (printed, not checked): the same two transactions
# with no relay running until both committed. The relay then sees both at
# once and sends them in claim order, created_at: A before B, although B
# committed first.
#
#   overlap_tx.sh OUTBOX_CLI
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
. "$(dirname "$0")/faults.sh"
need_cmd psql postgresql-client

ROUNDS=$(long_or 10 40)
ROUTE=orders
private_server postgres
URI=$PRIV_URI
OUT=$TMP/out.jsonl
LOG=$TMP/relay.log
outbox schema apply --store "$URI" --yes-i-know >/dev/null || { fail "schema apply"; finish; }
# When each overlapping event's commit had returned, for the pauses.
q "CREATE TABLE commits (event_id uuid PRIMARY KEY, at timestamptz NOT NULL)" || { fail "commits table"; finish; }

# A psql session held open on a FIFO: session_sql SQL runs SQL in it and
# waits until it is done; its rows (unaligned) go to $TMP/s1.out.
mkfifo "$TMP/s1.in"
psql -X -qtA -v ON_ERROR_STOP=1 "$URI" <"$TMP/s1.in" >"$TMP/s1.out" 2>&1 &
S1=$!
PIDS="$PIDS $S1"
exec 7>"$TMP/s1.in"
at_exit "exec 7>&-"
MARK=0
session_sql() {
    MARK=$((MARK + 1))
    printf '%s\n\\echo mark-%s\n' "$1" "$MARK" >&7
    wait_until 20 lines_match "$TMP/s1.out" "^mark-$MARK\$" ||
        { fail "session 1: no answer to $1: $(tail -2 "$TMP/s1.out")"; finish; }
}
# The row session 1 just inserted: the line before the last mark.
session_row() { tail -2 "$TMP/s1.out" | head -1; }

# stage_a KEY N: session 1 opens a transaction and stages event A (payload
# serial N) on KEY, as outbox_stage would: its event id in $A_ID.
stage_a() {
    session_sql "BEGIN; INSERT INTO outbox (id, outbox_route, event_id, event_type, occurred_at, payload,
        status, created_at, attempts, ordering_key) VALUES (gen_random_uuid(), '$ROUTE', gen_random_uuid(),
        'overlap.a', clock_timestamp(), '{\"n\":$2,\"k\":\"$1\"}', 'pending', clock_timestamp(), 0, '$1')
        RETURNING event_id;"
    A_ID=$(session_row)
}
# stage_b KEY N: event B through the library, its own transaction,
# committed when this returns; its event id in $B_ID.
stage_b() {
    outbox stage --store "$URI" --route "$ROUTE" --type overlap.b --key "$1" \
        --payload "{\"n\":$2,\"k\":\"$1\"}" >"$TMP/.staged" 2>&1 || { fail "stage B: $(cat "$TMP/.staged")"; finish; }
    B_ID=$(q "SELECT event_id FROM outbox WHERE payload->>'n' = '$2'")
}
status_of() { q "SELECT status FROM outbox WHERE event_id = '$1'"; }
published() { [ "$(status_of "$1")" = published ]; }
# line_of ID: the line of the sink's output where ID first appears.
line_of() { grep -n -m1 "\"id\":\"$1\"" "$OUT" | cut -d: -f1; }

# Ordinary traffic on other keys, staged and delivered meanwhile.
stage_load "$URI" "$ROUTE" 2000 8 500
background relay "$OUTBOX" relay --store "$URI" --route "$ROUTE" --sink "file:$OUT" --batch 50 --poll 20ms
R=$BG_PID
wait_started "$LOG" 1 || { fail "the relay did not start: $(tail -1 "$LOG")"; finish; }

: >"$TMP/commit_order.ids"
n=100000
good=0
for r in $(seq 1 "$ROUNDS"); do
    key=ov$((r % 3))
    stage_a "$key" "$n"
    stage_b "$key" $((n + 1))
    q "INSERT INTO commits VALUES ('$B_ID', clock_timestamp())" || fail "noting B's commit"
    n=$((n + 2))
    printf '%s\t%s\n' "$B_ID" "$key" >>"$TMP/commit_order.ids"
    wait_until 30 published "$B_ID" || { fail "round $r: B not published in 30 s while A's transaction is open"; break; }
    [ "$(status_of "$A_ID")" = "" ] || { fail "round $r: A visible before its commit"; break; }
    session_sql "COMMIT;"
    q "INSERT INTO commits VALUES ('$A_ID', clock_timestamp())" || fail "noting A's commit"
    printf '%s\t%s\n' "$A_ID" "$key" >>"$TMP/commit_order.ids"
    wait_until 30 published "$A_ID" || { fail "round $r: A not published in 30 s after its commit"; break; }
    earlier=$(q "SELECT (SELECT created_at FROM outbox WHERE event_id = '$A_ID') <
                        (SELECT created_at FROM outbox WHERE event_id = '$B_ID')")
    la=$(line_of "$A_ID")
    lb=$(line_of "$B_ID")
    if [ "$earlier" = t ] && [ -n "$la" ] && [ -n "$lb" ] && [ "$lb" -lt "$la" ]; then
        good=$((good + 1))
    else
        fail "round $r: A staged earlier: $earlier; sink lines B $lb, A $la"
    fi
    [ $((r % 4)) != 0 ] || stage_load "$URI" "$ROUTE" 500 8 500
done
[ "$good" = "$ROUNDS" ] &&
    pass "$ROUNDS rounds: A staged first and committed second, B out while A was open, A out after B"

drained() { [ "$(q "SELECT count(*) FROM outbox WHERE status <> 'published'")" = 0 ]; }
wait_until 60 drained || fail "not drained: $(stats_of "$URI" --route "$ROUTE")"
stop_process "$R" TERM
[ "$RC" = 0 ] || fail "the relay exited $RC on SIGTERM: $(tail -1 "$LOG")"
total=$(q "SELECT count(*) FROM outbox")
check "pending processing published dead" "0 0 $total 0" "$(stats_of "$URI" --route "$ROUTE")"

# Commit order: the ordinary events keep their staging order (one commit
# per call, in order), the overlapping pairs the order recorded above.
q "COPY (SELECT event_id, coalesce(ordering_key, '') FROM outbox WHERE event_type = 'load'
    ORDER BY created_at, id) TO STDOUT" >"$TMP/load.ids"
cat "$TMP/load.ids" "$TMP/commit_order.ids" >"$TMP/all.ids"
dups=$(duplicates "$OUT")
analyze "$TMP/all.ids" "$OUT" 0

# For the record: both committed before the relay looks.
: >"$TMP/out2.jsonl"
stage_a ovx "$n"
stage_b ovx $((n + 1))
session_sql "COMMIT;"
outbox relay --store "$URI" --route "$ROUTE" --sink "file:$TMP/out2.jsonl" --until-idle --quiet 2>"$TMP/relay2.log" ||
    fail "relay --until-idle: $(tail -1 "$TMP/relay2.log")"
got=$(sed -n 's/.*"type":"overlap\.\([ab]\)".*/\1/p' "$TMP/out2.jsonl" | tr -d '\n')
echo "info: staged A then B, committed B then A, relay started after both: the sink got ${got:-nothing} (${#got} events)"
wait_ms=$(q "SELECT coalesce(round(extract(epoch FROM max(greatest(o.published_at - c.at, interval '0')))
             * 1000), 0)::bigint FROM commits c JOIN outbox o USING (event_id)")
figures "$ROUNDS" "$total" "$dups" "$wait_ms" "overlapping pairs $good; the pause is the longest wait from a commit to its publish"
finish
