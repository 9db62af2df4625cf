#!/usr/bin/env bash
# stage --delay and --at: a delayed event is stored with its time, not
# published before it, published after it, and holds back the later events
# of its key; --at takes RFC 3339 with an offset; bad values change nothing.
#
#   delay.sh OUTBOX_CLI
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
need_cmd sqlite3 sqlite3

new_db delay
store=sqlite://$DB
out_file=$TMP/published.jsonl

# --at: the instant as stored (microseconds), whatever the offset says.
expect 0 stage --store "$store" --route later --type t --at 2030-01-02T03:04:05.25+01:00
check "--at with an offset" "$(( ($(date -u -d 2030-01-02T02:04:05Z +%s) * 1000000) + 250000 ))" \
    "$(sql "SELECT available_at FROM outbox WHERE outbox_route = 'later'")"
expect 0 stage --store "$store" --route later --type t --at 2024-02-29T23:59:59Z
check "--at on a leap day, Z" "$(( $(date -u -d 2024-02-29T23:59:59Z +%s) * 1000000 ))" \
    "$(sql "SELECT min(available_at) FROM outbox WHERE outbox_route = 'later'")"

# --delay: key k's first event in 5 s, a second one of k due at once,
# another key due at once.
t0=$(($(date +%s%N) / 1000))
expect 0 stage --store "$store" --route r --type first --key k --delay 5s
t1=$(($(date +%s%N) / 1000))
avail=$(sql "SELECT available_at FROM outbox WHERE event_type = 'first'")
[ "$avail" -ge $((t0 + 5000000)) ] && [ "$avail" -le $((t1 + 5000000)) ] &&
    pass "--delay 5s stored as the staging time plus 5 s" ||
    fail "--delay 5s stored $avail, staged between $t0 and $t1"
expect 0 stage --store "$store" --route r --type second --key k
expect 0 stage --store "$store" --route r --type other --key j

expect 0 relay --store "$store" --route r --sink "file://$out_file" --until-idle
types() { grep -o '"type":"[a-z]*"' "$out_file" | cut -d'"' -f4 | tr '\n' ' '; }
check "before the delay: only key j's event" "other " "$(types)"
stats_is "$DB" 2 0 1 0 --route r
due() { [ "$(($(date +%s%N) / 1000))" -gt "$avail" ]; }
wait_until 10 due || fail "the clock did not pass $avail"
expect 0 relay --store "$store" --route r --sink "file://$out_file" --until-idle
check "after the delay: key k's events in order" "other first second " "$(types)"
stats_is "$DB" 0 0 3 0 --route r

# Bad values: one line, exit 2, nothing staged.
before=$(sql "SELECT count(*) FROM outbox")
expect_error '--at: "2026-12-04T09:00:00" is not an RFC 3339 time' stage --store "$store" --route r --type t --at 2026-12-04T09:00:00
expect_error '--at: "2026-02-29T00:00:00Z" is not a valid time' stage --store "$store" --route r --type t --at 2026-02-29T00:00:00Z
expect_error '--at: "1969-12-31T23:59:59Z" is not a valid time' stage --store "$store" --route r --type t --at 1969-12-31T23:59:59Z
expect_error '--at: "2026-12-04T24:00:00Z" is not a valid time' stage --store "$store" --route r --type t --at 2026-12-04T24:00:00Z
expect_error '--at: "2026-12-04T09:00:00\+24:00" is not an RFC 3339 time' stage --store "$store" --route r --type t --at 2026-12-04T09:00:00+24:00
expect_error '--at: "tomorrow" is not an RFC 3339 time' stage --store "$store" --route r --type t --at tomorrow
expect_error '--delay: duration "0s" must be greater than zero' stage --store "$store" --route r --type t --delay 0s
expect_error '--delay: negative duration "-5m"' stage --store "$store" --route r --type t --delay -5m
expect_error 'stage: give --delay or --at, not both' stage --store "$store" --route r --type t --delay 5m --at 2030-01-01T00:00:00Z
check "the bad commands staged nothing" "$before" "$(sql "SELECT count(*) FROM outbox")"
finish
