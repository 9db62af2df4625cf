#!/usr/bin/env bash
# schema print / apply / check against SQLite.
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"

if expect 0 schema print --store sqlite; then
    grep -qi 'create table' "$OUT" && grep -q 'ordering_key' "$OUT" && grep -q 'outbox' "$OUT" &&
        pass "schema print --store sqlite" || fail "schema print --store sqlite printed: $(cat "$OUT")"
fi
if expect 0 schema print --store sqlite --relation events --hlc --traceparent --checkpoint; then
    grep -q 'events' "$OUT" && grep -q 'hlc' "$OUT" && grep -q 'traceparent' "$OUT" &&
        grep -q 'hlc_checkpoint' "$OUT" && pass "schema print with every option" ||
        fail "schema print --relation events --hlc --traceparent --checkpoint printed: $(cat "$OUT")"
fi
expect_error 'relation' schema print --store sqlite --relation 'x;drop'
expect_error 'store is required' schema print

db=$TMP/apply.db
expect_error 'schema apply changes the database; add --yes-i-know' schema apply --store "sqlite://$db"
[ -e "$db" ] && [ -s "$db" ] && fail "schema apply without --yes-i-know created $db"
expect_error 'unknown option --yes-i-know for schema check' schema check --store "sqlite://$db" --yes-i-know

expect 0 schema apply --store "sqlite://$db" --yes-i-know && pass "schema apply: $(cat "$OUT")"
expect 0 schema apply --store "sqlite://$db" --yes-i-know && pass "schema apply twice (idempotent)"
expect 0 schema check --store "sqlite://$db" && pass "schema check after apply: $(cat "$OUT")"

# The optional parts: checking for them on a plain table finds them missing.
run schema check --store "sqlite://$db" --hlc
[ "$RC" -eq 1 ] && grep -q 'hlc' "$OUT" && pass "check --hlc on a table without hlc: $(tr '\n' ';' <"$OUT")" ||
    fail "check --hlc on a table without hlc exited $RC: $(cat "$OUT" "$ERR")"
expect 0 schema apply --store "sqlite://$db" --yes-i-know --hlc --traceparent --checkpoint
expect 0 schema check --store "sqlite://$db" --hlc --traceparent --checkpoint &&
    pass "check with every option after applying them"

# A table that lost a column: exit 1 and the column named, on stdout.
broken=$TMP/broken.db
expect 0 schema apply --store "sqlite://$broken" --yes-i-know
if sqlite3 "$broken" 'ALTER TABLE outbox DROP COLUMN last_error;'; then
    run schema check --store "sqlite://$broken"
    if [ "$RC" -ne 1 ]; then
        fail "check on a table without last_error exited $RC, expected 1: $(cat "$OUT" "$ERR")"
    elif ! grep -q 'last_error' "$OUT"; then
        fail "check on a table without last_error does not name it: $(cat "$OUT")"
    elif ! grep -q '^outbox: ' "$ERR"; then
        fail "check with problems says nothing on stderr"
    else
        pass "check names the missing column: $(cat "$OUT")"
    fi
else
    fail "sqlite3 could not drop the column"
fi

# A database without the table at all.
empty=$TMP/empty.db
sqlite3 "$empty" 'CREATE TABLE unrelated (x INTEGER);'
run schema check --store "sqlite://$empty"
[ "$RC" -eq 1 ] && [ -s "$OUT" ] && pass "check on a missing table: $(head -n 1 "$OUT")" ||
    fail "check on a database without the table exited $RC: $(cat "$OUT" "$ERR")"

# A store that cannot be opened is an error (2), not a problem (1).
expect_error '.' schema check --store "sqlite://$TMP/no/such/dir/x.db"

finish
