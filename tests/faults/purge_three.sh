#!/usr/bin/env bash
# Three relays purging one large table at once: a private PostgreSQL
# server holds an outbox of 100,000 rows published two hours ago (400,000
# with --long), beside rows published a minute ago, dead rows and a backlog
# of pending ones. Three `outbox relay --config` processes run the same
# route with `retention: 1h`, so each starts by purging the same old rows
# (docs/config.md: in batches, each its own transaction) while all three
# publish the backlog to the file sink.
#
# Checks: the purges ran at the same time (the server showed two or more
# purge statements running together); no relay logged a warning or an
# error and the server logged no deadlock; the relays together purged
# exactly the old published rows, and none is left; the rows published a
# minute ago, the dead rows and the backlog are all still there; the
# backlog delivered (every event, no duplicates, per-key order by first
# appearance), every row of it published.
#
#   purge_three.sh OUTBOX_CLI
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
. "$(dirname "$0")/faults.sh"
need_cmd psql postgresql-client

OLD=$(long_or 100000 400000)
RECENT=2000
DEAD=500
BACKLOG=5000
ROUTE=orders
private_server postgres
URI=$PRIV_URI
OUT=$TMP/out.jsonl
outbox schema apply --store "$URI" --yes-i-know >/dev/null || { fail "schema apply"; finish; }

# Each kind of row staged through the library, then given its state.
t0=$SECONDS
stage_load "$URI" "$ROUTE" "$OLD" 24 5000
q "UPDATE outbox SET status = 'published', attempts = 1, published_at = now() - interval '2 hours'" >/dev/null
stage_load "$URI" "$ROUTE" "$RECENT" 24 1000
q "UPDATE outbox SET status = 'published', attempts = 1, published_at = now() - interval '1 minute'
   WHERE status = 'pending'" >/dev/null
stage_load "$URI" "$ROUTE" "$DEAD" 24 500
q "UPDATE outbox SET status = 'dead', attempts = 10, last_error = 'dead on purpose'
   WHERE status = 'pending'" >/dev/null
stage_load "$URI" "$ROUTE" "$BACKLOG" 24 1000
q "VACUUM ANALYZE outbox" || fail "vacuum"
q "COPY (SELECT event_id, coalesce(ordering_key, '') FROM outbox WHERE status = 'pending'
    ORDER BY created_at, id) TO STDOUT" >"$TMP/backlog.ids"
echo "$STAGED rows staged and set up in $((SECONDS - t0)) s: $(q "SELECT string_agg(status || ' ' || n, ', ')
    FROM (SELECT status, count(*) n FROM outbox GROUP BY status ORDER BY status) x")"
START=$(q "SELECT clock_timestamp()")
START_S=$(date +%s.%6N)

cat >"$TMP/relay.yaml" <<EOF
stores:
  db: {uri: "$URI"}
sinks:
  out: {uri: "file:$OUT"}
routes:
  $ROUTE: {store: db, sink: out, batch: 100, retention: 1h}
EOF
outbox config check "$TMP/relay.yaml" >/dev/null 2>"$ERR" || { fail "config check: $(cat "$ERR")"; finish; }

# The purge statements running at one instant, the most seen.
purging() {
    q "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid()
       AND query LIKE '%DELETE FROM%USING c%'"
}
LOGS=()
RELAYS=()
t1=$SECONDS
for i in 1 2 3; do
    background "relay$i" "$OUTBOX" relay --config "$TMP/relay.yaml"
    RELAYS+=("$BG_PID")
    LOGS+=("$TMP/relay$i.log")
done
purged() {
    sed -n 's/.*purged \([0-9]*\) published rows older than the retention.*/\1/p' "${LOGS[@]}" |
        awk '{n += $1} END {print n + 0}'
}
most=0
end=$((SECONDS + 300))
while [ "$(purged)" -lt "$OLD" ] && [ $SECONDS -lt $end ]; do
    now=$(purging)
    [ "$now" -le "$most" ] || most=$now
    sleep 0.05
done
purge_s=$((SECONDS - t1))
[ "$most" -ge 2 ] && pass "the purges overlapped: $most purge statements ran at one instant" ||
    fail "at most $most purge statement ran at any instant: the relays never purged at once"

drained() { [ "$(q "SELECT count(*) FROM outbox WHERE status IN ('pending', 'processing')")" = 0 ]; }
wait_until 120 drained || fail "the backlog not drained: $(stats_of "$URI" --route "$ROUTE")"
for i in 0 1 2; do
    stop_process "${RELAYS[$i]}" TERM
    [ "$RC" = 0 ] || fail "relay $((i + 1)) exited $RC on SIGTERM: $(tail -1 "${LOGS[$i]}")"
done
for l in "${LOGS[@]}"; do
    echo "$(basename "$l" .log): $(grep -c 'purged' "$l") purges that deleted rows: $(sed -n 's/.*purged \([0-9]*\) published.*/\1/p' "$l" | tr '\n' ' ')"
done

lacks "$TMP/relay1.log" ' (warning|error): ' "relay 1 logged no warning or error"
lacks "$TMP/relay2.log" ' (warning|error): ' "relay 2 logged no warning or error"
lacks "$TMP/relay3.log" ' (warning|error): ' "relay 3 logged no warning or error"
lacks "$PRIV_DIR/server.log" 'deadlock detected' "the server logged no deadlock"
check "rows the relays purged" "$OLD" "$(purged)"
check "published rows older than the retention left" 0 \
    "$(q "SELECT count(*) FROM outbox WHERE status = 'published' AND published_at < now() - interval '1 hour'")"
check "rows published a minute before, dead, and published by the relays" "$RECENT $DEAD $BACKLOG" \
    "$(q "SELECT count(*) FILTER (WHERE status = 'published' AND published_at < '$START'),
              count(*) FILTER (WHERE status = 'dead'),
              count(*) FILTER (WHERE status = 'published' AND published_at >= '$START') FROM outbox" | tr '|' ' ')"
check "rows in the table" $((RECENT + DEAD + BACKLOG)) "$(q "SELECT count(*) FROM outbox")"
dups=$(duplicates "$OUT")
analyze "$TMP/backlog.ids" "$OUT" 0
figures 3 "$BACKLOG" "$dups" "$(pause_pg outbox "$START_S" "$(date +%s.%6N)")" "rows purged $(purged) of a table of $STAGED, purges at once $most, until purged ${purge_s}s"
finish
