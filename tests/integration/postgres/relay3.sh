#!/usr/bin/env bash
# Three relays on one route drain 20,000 events over 40 interleaved keys:
# every event is published exactly once, and within each key published_at
# never goes back in staging order.
. "$(dirname "$0")/lib.sh" "$@"

make_table
check "staged" "staged 20000" "$("$PG_LOAD" "$URI" "$REL" orders 20000 40 1000)"
OUT=$TMP/out.jsonl
start=$(date +%s.%N)
for i in 1 2 3; do
    relay --route orders --sink "file:$OUT" --batch 50 --poll 20ms
done
wait_for "SELECT count(*) FROM $REL WHERE status <> 'published'" 0 180 || fail "not drained in 180 s: $(unpublished) left"
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
for p in $PIDS; do kill -TERM "$p"; done
for p in $PIDS; do wait "$p" || fail "relay $p exited $?"; done
PIDS=""
echo "drained 20000 events with 3 relays in ${elapsed}s"

check "published rows" 20000 "$(q "SELECT count(*) FROM $REL WHERE status = 'published'")"
check "lines written" 20000 "$(wc -l <"$OUT" | tr -d ' ')"
check "distinct events written" 20000 "$(grep -o '"id":"[^"]*"' "$OUT" | sort -u | wc -l | tr -d ' ')"
check "attempts" 1 "$(q "SELECT max(attempts) FROM $REL")"
check "per-key order breaks" 0 "$(order_breaks)"
# Each key's lines in the file are in staging order, too.
check "per-key file order breaks" 0 "$(grep -o '"id":"[^"]*"' "$OUT" | cut -d'"' -f4 | awk '{print NR, $1}' >"$TMP/pos"
    q "SELECT id, ordering_key, row_number() OVER (PARTITION BY ordering_key ORDER BY created_at, id) FROM $REL" |
    tr '|' ' ' | sort >"$TMP/rank"
    sort -k2 "$TMP/pos" | join -1 2 -2 1 - "$TMP/rank" | sort -k2n |
    awk '{ if (($3 in last) && $4 < last[$3]) bad++; last[$3] = $4 } END { print bad + 0 }')"
grep -c "relay orders: claimed" "$TMP/relay.log" >/dev/null || true
busy=$(grep -o "published [0-9]*" "$TMP/relay.log" | awk '$2 > 0' | wc -l)
[ "$busy" -ge 2 ] && pass "$busy relays published" || fail "only $busy relay(s) published: $(cat "$TMP/relay.log")"
finish
