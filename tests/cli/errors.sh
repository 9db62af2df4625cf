#!/usr/bin/env bash
# Bad input: each refused with exit 2 and one line on stderr naming it.
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"

new_db errors

db=$DB
S=sqlite://$db
expect 0 stage --store "$S" --route keep --type t --count 2

# Command line.
expect_error 'unknown command "frobnicate"' frobnicate
expect_error 'unknown option --bogus' --bogus stats
expect_error '^outbox: stage: --route is required$' stage --store "$S" --type t
expect_error '^outbox: relay: --route is required$' relay --store "$S" --sink stdout:
expect_error '^outbox: relay: --sink is required$' relay --store "$S" --route r
expect_error '^outbox: stats: --store is required$' stats
expect_error '^outbox: unknown option --foo for stage; usage: outbox stage ' stage --store "$S" --route r --type t --foo
expect_error '^outbox: unknown option --foo for relay; usage: outbox relay ' relay --foo
expect_error 'unknown option -x for stats' stats -x
expect_error 'unknown option --rout for stage' stage --store "$S" --rout r --type t
expect_error 'unexpected argument "extra"' stats --store "$S" extra
expect_error 'option --route needs a value' stage --store "$S" --type t --route
expect_error 'option --route needs a value' stage --store "$S" --route --type t
expect_error 'option --json takes no value' stats --store "$S" --json=yes
expect_error 'schema: unknown action "drop"' schema drop
expect_error 'say print, apply or check' schema

# Numbers.
expect_error '^outbox: --count: "abc" is not a positive integer$' stage --store "$S" --route r --type t --count abc
expect_error '^outbox: --count: "0" is not a positive integer$' stage --store "$S" --route r --type t --count 0
expect_error '^outbox: --count: "-3" is not a positive integer$' stage --store "$S" --route r --type t --count=-3
expect_error '^outbox: --count: " 3" is not a positive integer$' stage --store "$S" --route r --type t --count ' 3'
expect_error '^outbox: --count: "3x" is not a positive integer$' stage --store "$S" --route r --type t --count 3x
expect_error '^outbox: --count: "\+3" is not a positive integer$' stage --store "$S" --route r --type t --count +3
expect_error '^outbox: --count: "99999999999999999999999" is too large' stage --store "$S" --route r --type t --count 99999999999999999999999
expect_error '^outbox: --batch: "0" is not a positive integer$' relay --store "$S" --route r --sink stdout: --batch 0
expect_error '^outbox: --workers: "1000" is too large' relay --store "$S" --route r --sink stdout: --workers 1000
expect_error '^outbox: --pipeline: "17" is too large' relay --store "$S" --route r --sink stdout: --pipeline 17
expect_error '^outbox: --pipeline: "0" is not a positive integer$' relay --store "$S" --route r --sink stdout: --pipeline 0
expect_error '^outbox: --max-attempts: "x" is not a positive integer$' relay --store "$S" --route r --sink stdout: --max-attempts x

# Durations.
expect_error '^outbox: --lease: duration "5" needs a unit' relay --store "$S" --route r --sink stdout: --lease 5
expect_error '^outbox: --poll: .*"fast"' relay --store "$S" --route r --sink stdout: --poll fast
expect_error '^outbox: --lease: .*"10 years"' relay --store "$S" --route r --sink stdout: --lease '10 years'
expect_error '^outbox: --lease: duration "0s" must be greater than zero$' relay --store "$S" --route r --sink stdout: --lease 0s
expect_error '^outbox: --backoff-cap: .*negative' relay --store "$S" --route r --sink stdout: --backoff-cap=-1s
expect_error 'backoff-cap must not be shorter than --backoff-base' relay --store "$S" --route r --sink stdout: --backoff-base 1m --backoff-cap 1s
# A base above the default cap (5m), given alone, raises the cap with it.
expect 0 relay --store "$S" --route none --sink stdout: --until-idle --quiet --backoff-base 10m &&
    pass "--backoff-base 10m alone is accepted"
expect_error '^outbox: --published-before: .*"yesterday"' purge --store "$S" --published-before yesterday
# A store URI's durations follow the same grammar: a unit is required.
expect_error '^outbox: stats: sqlite store .*busy_timeout=5000 is not a duration from 0us to ' stats --store "$S?busy_timeout=5000"
expect 0 stats --store "$S?busy_timeout=5s" && pass "busy_timeout=5s is accepted"
# Durations are bounded so they can be added to a clock: at most 36500d.
# --until-idle: a relay that took one would return at once instead of
# sleeping forever (or overflowing the clock).
for opt in --poll --lease --backoff-base --backoff-cap; do
    expect_error "^outbox: $opt: duration \"9223372036854775807us\" is too large: at most 36500d \(100 years\)\$" \
        relay --store "$S" --route none --sink stdout: --until-idle "$opt" 9223372036854775807us
    expect_error "^outbox: $opt: duration \"36501d\" is too large: at most 36500d \(100 years\)\$" \
        relay --store "$S" --route none --sink stdout: --until-idle "$opt" 36501d
done
expect 0 relay --store "$S" --route none --sink stdout: --until-idle --quiet --poll 36500d --lease 36500d \
    --backoff-base 36500d --backoff-cap 36500d && pass "36500d is accepted for every relay duration"
expect_error '^outbox: --published-before: duration "36501d" is too large: at most 36500d \(100 years\)$' \
    purge --store "$S" --published-before 36501d

# Relation names: refused before anything is opened.
for cmd in "stage --route r --type t" "relay --route r --sink stdout:" "stats" "replay --all-dead" \
    "purge --published-before 1d" "schema check" "schema apply --yes-i-know"; do
    # shellcheck disable=SC2086
    expect_error '^outbox: --relation: "x;drop" is not a valid relation name' $cmd --store "$S" --relation 'x;drop'
done
expect_error 'not a valid relation name' stats --store "$S" --relation '1abc'
expect_error 'not a valid relation name' stats --store "$S" --relation 'a.b.c'
expect_error 'not a valid relation name' stats --store "$S" --relation ''

# Store URIs.
expect_error 'URI "nope"' stats --store nope
expect_error 'foo' stats --store foo:bar
expect_error 'store must not be empty' stats --store ''
missing=$TMP/no/such/dir/x.db
expect_error "$TMP/no/such/dir" stage --store "sqlite://$missing" --route r --type t
[ -e "$TMP/no" ] && fail "a failed open created $TMP/no"
expect_error '.' stats --store "sqlite://$TMP/never-created.db"
expect_error 'hlc ordering needs the hlc column' relay --store "$S" --route keep --sink stdout: --hlc --until-idle
expect_error '.' relay --store "sqlite://$db" --relation not_there --route r --sink stdout: --until-idle

# Sink URIs.
expect_error 'unknown parameter x in file sink URI' relay --store "$S" --route keep --sink "file://$TMP/o.jsonl?x=1"
expect_error 'no path' relay --store "$S" --route keep --sink file:
expect_error 'takes no path' relay --store "$S" --route keep --sink stdout:foo
expect_error 'names a host' relay --store "$S" --route keep --sink file://somehost/tmp/x
expect_error 'nosuch' relay --store "$S" --route keep --sink nosuch://broker
expect_error 'URI "garbage"' relay --store "$S" --route keep --sink garbage
expect_error "cannot open file sink $TMP/no/dir/x.jsonl: No such file or directory" \
    relay --store "$S" --route keep --sink "file://$TMP/no/dir/x.jsonl"
mkdir "$TMP/ro" && chmod 555 "$TMP/ro"
if [ "$(id -u)" -ne 0 ]; then
    expect_error "cannot open file sink $TMP/ro/x.jsonl: Permission denied" \
        relay --store "$S" --route keep --sink "file://$TMP/ro/x.jsonl"
fi
expect_error "cannot open file sink $TMP/ro: Is a directory" relay --store "$S" --route keep --sink "file://$TMP/ro"

# Payloads and ids.
expect_error '^outbox: --payload: "\{nope" is not valid JSON$' stage --store "$S" --route r --type t --payload '{nope'
expect_error 'is not valid JSON' stage --store "$S" --route r --type t --payload '{"a":1} trailing'
expect_error 'event-id: "123" is not a UUID' replay --store "$S" --event-id 123

# A control character in a value stays on one line.
expect_error 'unknown option --a\\x0ab for stats' stats "--a
b"

# Nothing above staged or changed anything.
stats_is "$db" 2 0 0 0

finish
