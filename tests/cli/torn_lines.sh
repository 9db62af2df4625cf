#!/usr/bin/env bash
# The file sink after a writer died inside write(2): the partial line it
# left is cut off before anything is appended, so every line of the file is
# one whole JSON object, and every event marked published is on a whole line.
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"

# --- a partial last line, as a killed writer leaves it ------------------------
new_db torn
db=$DB
out=$TMP/torn.jsonl
printf '{"specversion":"1.0","id":"whole"}\n{"specversion":"1.0","id":"torn-tail","da' >"$out"
expect 0 stage --store "sqlite://$db" --route r --type t --count 3 --payload '{"n":1}'
expect 0 relay --store "sqlite://$db" --route r --sink "file://$out" --until-idle --quiet
whole_lines "$out"
grep -q 'torn-tail' "$out" && fail "the torn line's bytes are still in the file: $(cat "$out")" ||
    pass "the partial line is gone"
[ "$(head -n 1 "$out")" = '{"specversion":"1.0","id":"whole"}' ] && pass "the whole line before it is kept" ||
    fail "the first line changed: $(head -n 1 "$out")"
[ "$(wc -l <"$out")" -eq 4 ] && pass "3 events appended after the kept line" ||
    fail "expected 4 lines, found $(wc -l <"$out")"

# A file of one partial line and nothing else is emptied before the append.
printf '{"specversion":"1.0","id":"torn-only"' >"$TMP/only.jsonl"
expect 0 stage --store "sqlite://$db" --route only --type t --count 2
expect 0 relay --store "sqlite://$db" --route only --sink "file://$TMP/only.jsonl" --until-idle --quiet
whole_lines "$TMP/only.jsonl"
[ "$(wc -l <"$TMP/only.jsonl")" -eq 2 ] && ! grep -q torn-only "$TMP/only.jsonl" &&
    pass "a file holding only a partial line: cut to nothing, then 2 events" ||
    fail "only.jsonl: $(cat "$TMP/only.jsonl")"

# --- relays killed with SIGKILL at random moments ------------------------------
N=60000
new_db killed
dbk=$DB
outk=$TMP/killed.jsonl
expect 0 stage --store "sqlite://$dbk" --route r --type t --count $N \
    --payload '{"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}'
for round in 1 2 3 4 5 6 7 8; do
    # Run directly, not through the outbox function, so $! is the relay itself.
    # shellcheck disable=SC2086
    ${OUTBOX_CLI_WRAPPER:-} "$OUTBOX" relay --store "sqlite://$dbk" --route r --sink "file://$outk" \
        --batch 2000 --lease 100ms --quiet >/dev/null 2>"$TMP/killed.err" &
    pid=$!
    sleep "0.$((RANDOM % 3))$((RANDOM % 9 + 1))"
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    echo "round $round: $(wc -c <"$outk" 2>/dev/null || echo 0) bytes written"
done
sleep 0.2 # past the lease of the last killed relay's claim
expect 0 relay --store "sqlite://$dbk" --route r --sink "file://$outk" --until-idle --lease 100ms --quiet
stats_is "$dbk" 0 0 $N 0
whole_lines "$outk"
sqlite3 "$dbk" "SELECT event_id FROM outbox WHERE status = 'published'" | sort >"$TMP/published.ids"
jq -r '.id' "$outk" 2>/dev/null | sort -u >"$TMP/written.ids"
missing=$(comm -23 "$TMP/published.ids" "$TMP/written.ids" | wc -l)
[ "$missing" -eq 0 ] && pass "every published event is on a whole line ($(wc -l <"$outk") lines)" ||
    fail "$missing published events are not on a whole line of the file"

finish
