#!/usr/bin/env bash
# The file sink on a small tmpfs that fills up in the middle of a run, the
# store on an ordinary disk. The relay must say why in one line (ENOSPC),
# cut back any line it could not finish, mark published exactly the events
# whose lines are in the file, and, run with --until-idle, give up in
# bounded time instead of pausing and retrying for ever. Once there is room
# again, a second run delivers the rest, each event once.
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
. "$(dirname "$0")/tmpfs.sh"

N=400
PAD=$(printf '%0400d' 0)
TS='[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z'

new_db store
db=$DB
expect 0 stage --store "sqlite://$db" --route orders --type order.created --count $N \
    --payload "{\"pad\":\"$PAD\"}"
# About 600 bytes a line: 64 KiB holds roughly a quarter of the events.
mount_small sinkfs 64k
out=$MNT/orders.jsonl

# Short pauses, so the breaker's retries take well under a second.
relay_args=(--store "sqlite://$db" --route orders --sink "file://$out" --until-idle
            --batch 10 --poll 10ms --backoff-base 10ms --backoff-cap 100ms)

# --- the disk fills mid-run ----------------------------------------------------
relay_bounded 30 "${relay_args[@]}"
gave_up disk
cp "$ERR" "$TMP/first.err"
one_error_line '^outbox: relay: giving up on route orders after [0-9]+ consecutive transient failures under until-idle: sink unavailable: file sink write: No space left on device$'
warnings=$(grep -cE "^outbox: $TS warning: relay orders: sink unavailable \(file sink write: No space left on device\): released 10 rows, pausing [0-9]+ ms, then retrying; until-idle gives up after 8 transient failures in a row$" "$TMP/first.err")
[ "$warnings" -eq 1 ] && pass "one warning names ENOSPC when the sink fills up, and says what comes next" ||
    fail "$warnings sink warnings naming ENOSPC, expected 1: $(cat "$TMP/first.err")"

whole_lines "$out"
sqlite3 "$db" "SELECT event_id FROM outbox WHERE status = 'published'" | sort >"$TMP/published.ids"
ids_in_file "$out" >"$TMP/written.ids"
published=$(wc -l <"$TMP/published.ids")
if [ "$published" -eq 0 ] || [ "$published" -ge $N ]; then
    fail "$published of $N published before the disk filled: the disk did not fill mid-run"
elif cmp -s "$TMP/published.ids" "$TMP/written.ids"; then
    pass "the $published events marked published are exactly the $(wc -l <"$TMP/written.ids") lines written"
else
    fail "published and written differ: $(diff "$TMP/published.ids" "$TMP/written.ids" | head -n 5)"
fi
stats_is "$db" $((N - published)) 0 "$published" 0
charged=$(sqlite3 "$db" "SELECT count(*) FROM outbox WHERE status = 'pending' AND attempts <> 0")
[ "$charged" = 0 ] && pass "the unwritten events were not charged an attempt" ||
    fail "$charged unwritten events were charged an attempt"

# --- room again: everything is delivered, once ---------------------------------
mount -o remount,size=1m "$MNT" || fail "remount $MNT with 1m"
relay_bounded 30 "${relay_args[@]}"
[ "$RC" -eq 0 ] && pass "relay --until-idle with room again: exit 0" ||
    fail "relay --until-idle with room again exited $RC: $(head -c 2000 "$ERR")"
stats_is "$db" 0 0 $N 0
whole_lines "$out"
sqlite3 "$db" "SELECT event_id FROM outbox" | sort >"$TMP/staged.ids"
ids_in_file "$out" >"$TMP/written.ids"
cmp -s "$TMP/staged.ids" "$TMP/written.ids" && pass "all $N events in the file, each once" ||
    fail "the file differs from the staged events: $(wc -l <"$TMP/written.ids") lines, $(sort -u "$TMP/written.ids" | wc -l) distinct, diff: $(diff "$TMP/staged.ids" "$TMP/written.ids" | head -n 5)"

finish
