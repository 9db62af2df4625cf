#!/usr/bin/env bash
# The SQLite database on a small tmpfs, the file sink on an ordinary disk.
# Staging until the disk is full fails with one clear line and writes
# nothing of the failed call; a relay run with --until-idle on the full disk,
# where every claim fails, gives up in bounded time (exit 2, the reason in
# one line) instead of retrying for ever; the database stays intact; and
# once there is room again everything is published and written.
. "$(dirname "$0")/../cli/lib.sh" "$@"
. "$(dirname "$0")/full/tmpfs.sh"

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
BACKGROUND+=($!)
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
took=$(($(date +%s) - started))
if [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ]; then
    fail "relay --until-idle on a full database timed out after 30 s: it never gave up"
elif [ "$RC" -ne 2 ]; then
    fail "relay --until-idle on a full database exited $RC, expected 2: $(head -c 2000 "$ERR")"
else
    pass "relay --until-idle on a full database exited 2 after ${took}s"
fi
cp "$ERR" "$TMP/first.err"
one_error_line '^outbox: relay: giving up on route orders after [0-9]+ consecutive transient failures under until-idle: claim: .*database or disk is full$'
warnings=$(grep -cE "^outbox: $TS warning: relay orders: claim: .*database or disk is full" "$TMP/first.err")
[ "$warnings" -eq 1 ] && pass "one warning for the failing claims, not one per attempt" ||
    fail "$warnings claim warnings, expected 1: $(cat "$TMP/first.err")"
stats_is "$db" "$staged" 0 0 0
[ -s "$out" ] && fail "events were written while none could be marked: $(wc -l <"$out") lines" ||
    pass "nothing written to the sink"
check=$(sqlite3 "$db" "PRAGMA integrity_check")
[ "$check" = ok ] && pass "integrity_check on the full disk: ok" || fail "integrity_check: $check"

# --- room again ---------------------------------------------------------------------
# Removing the filler alone may free nothing: when the failed staging's
# connection closed, its checkpoint could not grow the database file, so the
# WAL kept its frames and may hold the disk full by itself. The operator's
# fix is more room, here a bigger tmpfs: one that holds a WAL of SQLite's
# default auto-checkpoint size (1000 pages, 4 MiB) besides the database.
rm -f "$MNT/filler"
mount -o remount,size=16m "$MNT" || fail "remount $MNT with 16m"
exec 9>&-
relay_bounded 30 "${relay_args[@]}"
cp "$ERR" "$TMP/drain.err"
[ "$RC" -eq 0 ] && pass "relay --until-idle with room again: exit 0" ||
    fail "relay --until-idle with room again exited $RC: $(head -c 2000 "$ERR")"
stats_is "$db" 0 0 "$staged" 0
whole_lines "$out"
sqlite3 "$db" "SELECT event_id FROM outbox" | sort >"$TMP/staged.ids"
ids_in_file "$out" >"$TMP/written.ids"
cmp -s "$TMP/staged.ids" "$TMP/written.ids" && pass "all $staged events in the file, each once" ||
    fail "the file differs from the staged events: $(wc -l <"$TMP/written.ids") lines, $(sort -u "$TMP/written.ids" | wc -l) distinct"
check=$(sqlite3 "$db" "PRAGMA integrity_check")
[ "$check" = ok ] && pass "integrity_check after the drain: ok" || fail "integrity_check: $check"

finish
