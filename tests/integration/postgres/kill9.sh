#!/usr/bin/env bash
# A relay killed with SIGKILL in the middle of a batch loses nothing: once
# another relay has run past the lease, every event is published (some of
# the killed relay's batch twice, never more than a batch).
. "$(dirname "$0")/../../harness/harness.sh"
use_outbox "$1"
pg_outbox kill9

pg_table "${4:-}"
stage_load "$URI" orders 5000 20 500 "$REL"
check "staged" 5000 "$STAGED"
OUT=$TMP/out.jsonl
pg_relay --route orders --sink "file:$OUT" --batch 50 --lease 2s --poll 20ms
A=$RELAY_PID
wait_until 60 sql_is "SELECT count(*) >= 1000 FROM $REL WHERE status = 'published'" t || fail "relay A made no progress"

# Freeze A until it holds a claimed batch, then kill it right there.
held=0
for _ in $(seq 1 200); do
    kill -STOP "$A"
    held=$(q "SELECT count(*) FROM $REL WHERE status = 'processing'")
    [ "$held" -gt 0 ] && break
    kill -CONT "$A"
    sleep 0.01
done
kill9 "$A"
[ "$held" -gt 0 ] && pass "killed relay A holding $held rows" || fail "never caught relay A holding a batch"
done_before=$(q "SELECT count(*) FROM $REL WHERE status = 'published'")
echo "relay A killed after $done_before published, $held in processing"

start=$SECONDS
pg_relay --route orders --sink "file:$OUT" --batch 50 --lease 2s --poll 20ms
B=$RELAY_PID
wait_until 120 sql_is "SELECT count(*) FROM $REL WHERE status <> 'published'" 0 || fail "not drained: $(q "SELECT count(*) FROM $REL WHERE status <> 'published'") left"
stop_process "$B" TERM
[ "$RC" = 0 ] || fail "relay B exited $RC"
echo "relay B finished in $((SECONDS - start))s"

check "published rows" 5000 "$(q "SELECT count(*) FROM $REL WHERE status = 'published'")"
check "distinct events written" 5000 "$(grep -o '"id":"[^"]*"' "$OUT" | sort -u | wc -l | tr -d ' ')"
dups=$(( $(wc -l <"$OUT") - 5000 ))
[ "$dups" -le 50 ] && pass "$dups duplicate(s), at most one batch" || fail "$dups duplicates, more than a batch"
check "reclaimed rows were charged a second attempt" "$held" "$(q "SELECT count(*) FROM $REL WHERE attempts = 2")"
check "per-key order breaks" 0 "$(order_breaks)"
finish
