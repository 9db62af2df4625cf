#!/usr/bin/env bash
# Errors that say how to fix them: a missing table or database file points
# at `outbox schema apply`, a sink URI without a scheme gets sink examples,
# an unknown option gets the command's usage line; `outbox help CMD` and a
# bare `outbox` show the usage. A command that only reads never creates a
# database file.
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"

# literal TEXT: TEXT as a grep -E pattern matching just itself.
literal() {
    printf '%s' "$1" | sed 's/[][\.*^$?+(){}|/]/\\&/g'
}

# --- a missing table ----------------------------------------------------------
empty=$TMP/empty.db
sqlite3 "$empty" 'CREATE TABLE unrelated (x INTEGER)'
S="sqlite://$empty"
apply="create it with \`outbox schema apply --store $S --yes-i-know\`"
for cmd in "stats" "stage --route r --type t" "relay --route r --sink stdout: --until-idle" \
    "replay --all-dead" "purge --published-before 1d"; do
    name=${cmd%% *}
    # shellcheck disable=SC2086
    expect_error "^outbox: $name: table \"outbox\" not found: $(literal "$apply")\$" $cmd --store "$S"
done
expect_error "^outbox: stats: table \"events\" not found: $(literal "create it with \`outbox schema apply --store $S --relation events --yes-i-know\`")\$" \
    stats --store "$S" --relation events
# A URI that is not one shell word is quoted in the command to copy.
mkdir "$TMP/a dir"
sqlite3 "$TMP/a dir/e.db" 'CREATE TABLE unrelated (x INTEGER)'
expect_error "$(literal "create it with \`outbox schema apply --store 'sqlite://$TMP/a dir/e.db' --yes-i-know\`")\$" \
    stats --store "sqlite://$TMP/a dir/e.db"
# A table that lacks a column: schema check says what is missing.
sqlite3 "$TMP/old.db" 'CREATE TABLE outbox (id TEXT PRIMARY KEY)'
expect_error "$(literal "\`outbox schema check --store sqlite://$TMP/old.db\` lists what is missing")" \
    stats --store "sqlite://$TMP/old.db"
# The hint follows the advice: schema apply, then the command works.
expect 0 schema apply --store "$S" --yes-i-know && expect 0 stats --store "$S" && pass "schema apply, then stats works"

# --- a missing database file ------------------------------------------------------
nofile=$TMP/nofile.db
N="sqlite://$nofile"
create="create it with \`outbox schema apply --store $N --yes-i-know\`"
for cmd in "stats" "stage --route r --type t" "relay --route r --sink stdout: --until-idle" \
    "replay --all-dead" "purge --published-before 1d" "schema check"; do
    name=${cmd%% --*}
    # shellcheck disable=SC2086
    expect_error "^outbox: $name: database file $(literal "$nofile") does not exist: $(literal "$create")\$" $cmd --store "$N"
    [ -e "$nofile" ] && { fail "outbox $cmd created $nofile"; rm -f "$nofile"*; }
done
expect_error "database file $(literal "$nofile") does not exist" stats --store "sqlite:$nofile?busy_timeout=10ms"
(cd "$TMP" && outbox stats --store sqlite:rel.db) >"$OUT" 2>"$ERR"
grep -q '^outbox: stats: database file rel.db does not exist: ' "$ERR" && pass "a relative path: $(cat "$ERR")" ||
    fail "stats --store sqlite:rel.db: $(cat "$ERR")"
[ -e "$TMP/rel.db" ] && fail "stats created $TMP/rel.db"
# schema apply is the one that creates it, in a directory that exists.
expect_error "^outbox: schema apply: directory $(literal "$TMP/no/such") does not exist\$" \
    schema apply --store "sqlite://$TMP/no/such/x.db" --yes-i-know
[ -e "$TMP/no" ] && fail "schema apply created $TMP/no"
expect 0 schema apply --store "$N" --yes-i-know && [ -f "$nofile" ] && pass "schema apply creates the file"

# --- sink URIs without a scheme ----------------------------------------------------------
new_db sinks
for sink in stdout file null "$TMP/x.jsonl" "x.jsonl"; do
    expect_error "^outbox: relay: --sink: missing scheme in URI \"$(literal "$sink")\": expected a sink URI such as stdout:" \
        relay --store "sqlite://$DB" --route r --sink "$sink" --until-idle
    grep -q sqlite "$ERR" && fail "--sink $sink: the example is a store's: $(cat "$ERR")"
done
# A scheme that is there but invalid is the library's to explain.
expect_error '^outbox: relay: --sink: invalid scheme "1abc" in URI "1abc:x"' \
    relay --store "sqlite://$DB" --route r --sink 1abc:x --until-idle
# A store keeps a store example.
expect_error 'missing scheme in URI "nope": expected e.g. sqlite:' stats --store nope

# --- unknown options show the command's usage line --------------------------------
expect_error '^outbox: unknown option --foo for stage; usage: outbox stage --store URI --route R --type T \[OPTIONS\]$' \
    stage --foo
expect_error '^outbox: unknown option --foo for relay; usage: outbox relay --store URI --route R --sink URI \[OPTIONS\]$' \
    relay --foo
expect_error '^outbox: unknown option -x for stats; usage: outbox stats --store URI \[--relation NAME\] \[--route R\] \[--json\]$' \
    stats -x
expect_error '^outbox: unknown option --rout for replay; usage: outbox replay --store URI \[--relation NAME\] \[--route R\]' \
    replay --rout r
expect_error '^outbox: unknown option --x for purge; usage: outbox purge --store URI ' purge --x
expect_error '^outbox: unknown option --x for drivers; usage: outbox drivers$' drivers --x
expect_error '^outbox: unknown option --x for schema check; usage: outbox schema check --store URI \[SCHEMA OPTIONS\]$' \
    schema check --x
expect_error '^outbox: unknown option --yes-i-know for schema check; usage: outbox schema check --store URI' \
    schema check --store "$S" --yes-i-know
expect_error '^outbox: unknown option --x for schema apply; usage: outbox schema apply --store URI \[SCHEMA OPTIONS\] --yes-i-know$' \
    schema apply --x
expect_error '^outbox: unknown option --x for schema print; usage: outbox schema print --store ' schema print --x
expect_error '^outbox: unknown option --x for conformance; usage: outbox conformance --driver NAME_OR_PATH --uri URI' \
    conformance --x
expect_error '^outbox: unknown option --bogus; usage: outbox \[--verbose\] COMMAND \[OPTIONS\]$' --bogus stats

# --- help ------------------------------------------------------------------------
for cmd in schema stage relay stats replay purge drivers conformance; do
    expect 0 "$cmd" --help && cp "$OUT" "$TMP/want"
    if expect 0 help "$cmd"; then
        if ! cmp -s "$OUT" "$TMP/want"; then
            fail "outbox help $cmd differs from outbox $cmd --help"
        elif [ -s "$ERR" ]; then
            fail "outbox help $cmd wrote to stderr: $(cat "$ERR")"
        else
            pass "outbox help $cmd = outbox $cmd --help"
        fi
    fi
done
expect 0 --help && cp "$OUT" "$TMP/want"
expect 0 help && cmp -s "$OUT" "$TMP/want" && pass "outbox help = outbox --help" || fail "outbox help: $(head -n 3 "$OUT")"
expect 0 help schema apply && grep -q '^usage: outbox schema' "$OUT" && pass "outbox help schema apply" ||
    fail "outbox help schema apply: $(head -n 3 "$OUT")"
expect_error '^outbox: help: unknown command "frobnicate" \(try outbox --help\)$' help frobnicate
expect 0 help help && cmp -s "$OUT" "$TMP/want" && pass "outbox help help = outbox --help" || fail "outbox help help"

# --- a bare outbox --------------------------------------------------------------
run
if [ "$RC" -ne 2 ]; then
    fail "outbox with no command exited $RC, expected 2"
elif [ -s "$OUT" ]; then
    fail "outbox with no command wrote to stdout: $(head -n 2 "$OUT")"
elif ! grep -q '^usage: outbox \[--verbose\] COMMAND \[OPTIONS\]$' "$ERR" || ! grep -q 'relay' "$ERR"; then
    fail "outbox with no command does not print the usage: $(cat "$ERR")"
else
    pass "outbox with no command: the usage on stderr, exit 2"
fi
run --verbose
[ "$RC" -eq 2 ] && grep -q '^usage: outbox' "$ERR" && pass "outbox --verbose alone: usage, exit 2" ||
    fail "outbox --verbose alone: exit $RC, $(head -n 2 "$ERR")"

finish
