#!/usr/bin/env bash
# Three relays on one route drain a backlog over 40 keys interleaved event
# by event: every event is published exactly once, each key's events first
# reach the sink in staging order, and more than one relay did the work.
# The same test on every server store; what differs is the table below.
#
#   relay3.sh OUTBOX_CLI postgres|mongo [canonical]
#
#   store     events (--long)    also checked
#   postgres  20000              one attempt per row; per key, published_at in staging order
#   mongo     2000 (20000)       (FerretDB reads the whole collection for most queries)
#
# With "canonical" the PostgreSQL table has only the canonical indexes.
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
KIND=${2:?usage: relay3.sh OUTBOX_CLI postgres|mongo [canonical]}
ROUTE=r3
DRAIN_S=180
case $KIND in
postgres)
    pg_outbox relay3
    pg_table "${3:-}"
    STORE=$URI
    WHERE=(--relation "$REL")
    COUNT=20000
    ;;
mongo)
    need_service ferretdb
    mongo_db relay3
    STORE=$MONGO_URI
    WHERE=()
    outbox schema apply --store "$STORE" --yes-i-know >/dev/null || { fail "schema apply"; finish; }
    COUNT=$(long_or 2000 20000)
    DRAIN_S=900
    ;;
*) echo "relay3.sh: unknown store $KIND"; exit 2 ;;
esac

stage_load "$STORE" "$ROUTE" "$COUNT" 40 1000 "${REL:-}"
check "staged" "$COUNT" "$STAGED"
OUT=$TMP/out.jsonl
start=$(date +%s.%N)
for i in 1 2 3; do
    background "relay$i" "$OUTBOX" relay --store "$STORE" "${WHERE[@]}" --route "$ROUTE" --sink "file:$OUT" \
        --batch 50 --poll 20ms
done
drained() { [ "$(stats_of "$STORE" "${WHERE[@]}" --route "$ROUTE")" = "0 0 $COUNT 0" ]; }
wait_until "$DRAIN_S" drained ||
    fail "not drained in $DRAIN_S s: pending processing published dead = $(stats_of "$STORE" "${WHERE[@]}" --route "$ROUTE")"
echo "drained $COUNT events with 3 relays in $(echo "$(date +%s.%N) - $start" | bc)s"
for p in $PIDS; do
    stop_process "$p" TERM
    [ "$RC" = 0 ] || fail "relay $p exited $RC on SIGTERM"
done

# A relay whose lease ran out before it could renew it (a machine so loaded
# that a renewal came late) may have published rows another relay then took
# again: those, and only those, may arrive twice. The relays say how many.
lost=$(cat "$TMP"/relay*.log | sed -n 's/.*stopped ([^)]*):.*, fence lost \([0-9]*\)$/\1/p' |
    awk '{ n += $1 } END { print n + 0 }')
[ "$lost" = 0 ] || echo "note: the relays lost the lease of $lost rows (late renewals): that many may repeat"
analyze "serials:$COUNT" "$OUT" "$lost"
busy=$(cat "$TMP"/relay*.log | sed -n 's/.*stopped ([^)]*): claimed [0-9]*, published \([0-9]*\),.*/\1/p' | awk '$1 > 0' | wc -l)
[ "$busy" -ge 2 ] && pass "$busy relays published" || fail "only $busy relay(s) published: $(cat "$TMP"/relay*.log)"
if [ "$KIND" = postgres ]; then
    check "attempts" 1 "$(q "SELECT max(attempts) FROM $REL")"
    check "per-key published_at order breaks" 0 "$(order_breaks)"
fi
finish
