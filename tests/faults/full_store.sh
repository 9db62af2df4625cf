#!/usr/bin/env bash
# The SQLite database on a small tmpfs, the file sink on an ordinary disk.
# Staging until the disk is full fails with one clear line and writes
# nothing of the failed call; a relay run with --until-idle on the full disk,
# where every claim fails, gives up in bounded time (exit 2, the reason in
# one line) instead of retrying for ever; with a little room the disk fills
# again mid-run, and nothing is marked published that was not written; the
# database stays intact; and once there is room again everything is
# published and written.
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
. "$(dirname "$0")/tmpfs.sh"

TS='[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z'
PAD=$(printf '%0300d' 0)
PER=20

mount_small dbfs 512k
db=$MNT/outbox.db
store=sqlite://$db
expect 0 schema apply --store "$store" --yes-i-know

# --- stage until full ------------------------------------------------------------
staged=0
full=0
for _ in $(seq 1 200); do
    run stage --store "$store" --route orders --type order.created --count $PER \
        --payload "{\"pad\":\"$PAD\"}"
    if [ "$RC" -ne 0 ]; then
        full=1
        break
    fi
    staged=$((staged + PER))
done
if [ "$full" -eq 0 ]; then
    fail "200 stagings of $PER events fit on a 512k disk: it never filled"
else
    echo "staging failed after $staged events"
    [ "$RC" -eq 2 ] && pass "staging on a full disk exits 2" || fail "staging on a full disk exited $RC"
    lines=$(wc -l <"$ERR")
    [ "$lines" -eq 1 ] && grep -Eq '^outbox: stage: .*database or disk is full$' "$ERR" &&
        pass "one line says so: $(cat "$ERR")" || fail "staging on a full disk said ($lines lines): $(cat "$ERR")"
fi
[ "$staged" -gt 0 ] || fail "not one staging fitted on the disk"
rows=$(sqlite3 "$db" "SELECT count(*) FROM outbox")
[ "$rows" = "$staged" ] && pass "$rows rows: the successful stagings, none of the failed one" ||
    fail "$rows rows after $staged staged events"
check=$(sqlite3 "$db" "PRAGMA integrity_check")
[ "$check" = ok ] && pass "integrity_check after the failed staging: ok" || fail "integrity_check: $check"

# --- a relay on the full disk -----------------------------------------------------
# The application that staged keeps its connection open, and so the WAL
# and its index exist (an idle WAL is empty); the filler then takes the
# last byte, so the relay's first write, its claim, cannot grow the WAL.
mkfifo "$TMP/holder.in"
sqlite3 "$db" <"$TMP/holder.in" >/dev/null 2>&1 &
PIDS="$PIDS $!"
exec 9>"$TMP/holder.in"
echo "SELECT count(*) FROM outbox;" >&9
for _ in $(seq 1 100); do
    [ "$(stat -c %s "$db-shm" 2>/dev/null || echo 0)" -ge 32768 ] && break
    sleep 0.05
done
fill_up "$MNT"

out=$TMP/orders.jsonl
relay_args=(--store "$store" --route orders --sink "file://$out" --until-idle --batch 10 --poll 10ms)
started=$(date +%s)
relay_bounded 30 "${relay_args[@]}"
echo "the relay gave up after $(($(date +%s) - started))s"
gave_up database
cp "$ERR" "$TMP/first.err"
one_error_line '^outbox: relay: giving up on route orders after [0-9]+ consecutive transient failures under until-idle: claim: .*database or disk is full$'
warnings=$(grep -cE "^outbox: $TS warning: relay orders: claim: .*database or disk is full: retrying in [0-9]+ ms; until-idle gives up after 8 transient failures in a row$" "$TMP/first.err")
[ "$warnings" -eq 1 ] && pass "one warning for the failing claims, not one per attempt" ||
    fail "$warnings claim warnings, expected 1: $(cat "$TMP/first.err")"
stats_is "$db" "$staged" 0 0 0
[ -s "$out" ] && fail "events were written while none could be marked: $(wc -l <"$out") lines" ||
    pass "nothing written to the sink"
check=$(sqlite3 "$db" "PRAGMA integrity_check")
[ "$check" = ok ] && pass "integrity_check on the full disk: ok" || fail "integrity_check: $check"

# --- some room: the disk fills again mid-run --------------------------------------
# Removing the filler alone may free nothing: when the failed staging's
# connection closed, its checkpoint could not grow the database file, so the
# WAL kept its frames and may hold the disk full by itself. The operator's
# fix is more room. 4 MiB is not enough for a drain: the WAL grows by every
# claim and settle until SQLite's auto-checkpoint at 1000 pages (4 MiB), so
# the disk fills part-way through, at a claim or at a settle.
rm -f "$MNT/filler"
mount -o remount,size=4m "$MNT" || fail "remount $MNT with 4m"
exec 9>&-
relay_bounded 30 "${relay_args[@]}"
gave_up "database filling up mid-run"
one_error_line '^outbox: relay: giving up on route orders after [0-9]+ consecutive transient failures under until-idle: (claim|settle): .*database or disk is full$'
sqlite3 "$db" "SELECT event_id FROM outbox WHERE status = 'published'" | sort >"$TMP/published.ids"
sqlite3 "$db" "SELECT event_id FROM outbox WHERE status = 'processing'" | sort >"$TMP/unsettled.ids"
ids_in_file "$out" | uniq >"$TMP/written.ids"
published=$(wc -l <"$TMP/published.ids")
if [ "$published" -eq 0 ] || [ "$published" -ge "$staged" ]; then
    fail "$published of $staged published on 4 MiB: the disk did not fill mid-run"
else
    pass "$published of $staged published before the disk filled again"
fi
whole_lines "$out"
unwritten=$(comm -23 "$TMP/published.ids" "$TMP/written.ids" | wc -l)
[ "$unwritten" -eq 0 ] && pass "every event marked published is in the file" ||
    fail "$unwritten events are marked published but not in the file"
# Written but not marked: only a batch whose settle failed, still claimed.
comm -13 "$TMP/published.ids" "$TMP/written.ids" >"$TMP/unmarked.ids"
stray=$(comm -23 "$TMP/unmarked.ids" "$TMP/unsettled.ids" | wc -l)
[ "$stray" -eq 0 ] && pass "written but unmarked: $(wc -l <"$TMP/unmarked.ids") events, all still in processing" ||
    fail "$stray events are in the file but neither published nor in processing"
check=$(sqlite3 "$db" "PRAGMA integrity_check")
[ "$check" = ok ] && pass "integrity_check after the disk filled mid-run: ok" || fail "integrity_check: $check"

# --- room again -------------------------------------------------------------------
# Enough for the WAL between checkpoints besides the database; the rows
# whose settle failed are taken over once their lease has passed.
mount -o remount,size=16m "$MNT" || fail "remount $MNT with 16m"
sleep 1.1
relay_bounded 30 "${relay_args[@]}" --lease 1s
cp "$ERR" "$TMP/drain.err"
[ "$RC" -eq 0 ] && pass "relay --until-idle with room again: exit 0" ||
    fail "relay --until-idle with room again exited $RC: $(head -c 2000 "$ERR")"
stats_is "$db" 0 0 "$staged" 0
whole_lines "$out"
sqlite3 "$db" "SELECT event_id FROM outbox" | sort >"$TMP/staged.ids"
ids_in_file "$out" >"$TMP/lines.ids"
missing=$(sort -u "$TMP/lines.ids" | comm -23 "$TMP/staged.ids" - | wc -l)
[ "$missing" -eq 0 ] && pass "all $staged events are in the file" || fail "$missing events are not in the file"
# At least once: an event is in the file twice only if it was written and
# its settle failed.
uniq -d "$TMP/lines.ids" >"$TMP/twice.ids"
extra=$(comm -23 "$TMP/twice.ids" "$TMP/unmarked.ids" | wc -l)
[ "$extra" -eq 0 ] && pass "$(wc -l <"$TMP/twice.ids") events written twice, each one whose settle had failed" ||
    fail "$extra events are in the file more than once without a failed settle: $(comm -23 "$TMP/twice.ids" "$TMP/unmarked.ids" | head -n 3)"
[ "$(uniq -c "$TMP/lines.ids" | awk '$1 > 2' | wc -l)" -eq 0 ] || fail "events written three times or more"
check=$(sqlite3 "$db" "PRAGMA integrity_check")
[ "$check" = ok ] && pass "integrity_check after the drain: ok" || fail "integrity_check: $check"

finish
