#!/usr/bin/env bash
# What the relay says on stderr: timestamped info lines when it starts and
# stops, one warning when the sink goes down, debug lines per batch only
# with --verbose, nothing but warnings and errors with --quiet; and never a
# password from a URI, in a log line or an error.
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"

TS='[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z'

new_db log
db=$DB
expect 0 stage --store "sqlite://$db" --route orders --type t --count 25

# --- start and stop ----------------------------------------------------------
expect 0 relay --store "sqlite://$db" --route orders --sink "file://$TMP/o.jsonl" --batch 10 --until-idle
cp "$ERR" "$TMP/plain.err"
has "$TMP/plain.err" "^outbox: $TS info: relay orders: starting 1 worker: store sqlite://$db \(sqlite\), sink file://$TMP/o\.jsonl, batch 10$" \
    "the command's start line names the route, store, sink, batch and workers"
has "$TMP/plain.err" "^outbox: $TS info: relay orders: started: store sqlite \(outbox\), batch 10 \(pipeline of 4\), max attempts 10, lease 3s \(renewed every 1s\), poll 100ms$" \
    "the relay's start line names the store driver, relation, batch and timings"
has "$TMP/plain.err" "^outbox: $TS info: relay orders: stopped \(nothing left to claim\): claimed 25, published 25, retried 0, dead 0, released 0, leases renewed 0$" \
    "the relay's stop line has the counts"
has "$TMP/plain.err" '^outbox: relay orders: claimed 25, published 25, retried 0, dead 0, released 0$' \
    "the summary line is unchanged"
lacks "$TMP/plain.err" ' debug: ' "no debug lines without --verbose"
lacks "$TMP/plain.err" '^outbox: (info|warning|error|debug): ' "no log line without a timestamp"

# --- --verbose: one debug line per batch ---------------------------------------
expect 0 stage --store "sqlite://$db" --route orders --type t --count 25
expect 0 relay --verbose --store "sqlite://$db" --route orders --sink "file://$TMP/o.jsonl" --batch 10 --until-idle
cp "$ERR" "$TMP/verbose.err"
batches=$(grep -Ec "^outbox: $TS debug: relay orders: batch: claimed [0-9]+, published [0-9]+, retried 0, dead 0, released 0, [0-9]+ ms$" "$TMP/verbose.err")
[ "$batches" -eq 3 ] && pass "--verbose: a debug line for each of the 3 batches" ||
    fail "--verbose: $batches batch lines, expected 3: $(cat "$TMP/verbose.err")"
has "$TMP/verbose.err" "debug: relay orders: batch: claimed 5, published 5, retried 0, dead 0, released 0, [0-9]+ ms$" \
    "the last batch line has the last batch's counts"
has "$TMP/verbose.err" "^outbox: $TS info: relay orders: stopped" "--verbose keeps the info lines"
# --verbose is accepted before the command too.
expect 0 stage --store "sqlite://$db" --route orders --type t
expect 0 --verbose relay --store "sqlite://$db" --route orders --sink "file://$TMP/o.jsonl" --until-idle
has "$ERR" "^outbox: $TS debug: " "outbox --verbose relay: debug lines"

# --- --quiet: warnings and errors only -------------------------------------------
expect 0 stage --store "sqlite://$db" --route orders --type t --count 3
expect 0 relay --store "sqlite://$db" --route orders --sink "file://$TMP/o.jsonl" --until-idle --quiet
[ -s "$ERR" ] && fail "relay --quiet wrote: $(cat "$ERR")" || pass "relay --quiet: nothing on stderr"

# --- a sink outage and the recovery ------------------------------------------------
# /dev/full refuses every write: a warning once when the outage begins, not
# one per attempt; then a file that takes writes again, and an info line.
if [ -w /dev/full ]; then
    expect 0 stage --store "sqlite://$db" --route down --type t --count 5
    # shellcheck disable=SC2086
    ${OUTBOX_CLI_WRAPPER:-} "$OUTBOX" relay --store "sqlite://$db" --route down --sink file:///dev/full \
        --poll 10ms --backoff-base 1ms --backoff-cap 5ms --verbose >"$TMP/full.out" 2>"$TMP/full.err" &
    pid=$!
    wait_until 30 lines_match "$TMP/full.err" 'debug: relay down: sink still unavailable' 3
    stop_process "$pid" TERM
    [ "$RC" -eq 0 ] || fail "relay into /dev/full: exit $RC"
    has "$TMP/full.err" "^outbox: $TS warning: relay down: sink unavailable \(.*\): released 5 rows, pausing [0-9]+ ms, then retrying, and for as long as it fails \(a warning every 10 failures\)$" \
        "the outage begins with a warning that says the relay keeps retrying"
    warnings=$(grep -c 'warning: relay down: sink unavailable' "$TMP/full.err")
    [ "$warnings" -eq 1 ] && pass "one warning for the whole outage" ||
        fail "$warnings outage warnings, expected 1"
    has "$TMP/full.err" "^outbox: $TS info: relay down: stopped \(stop requested\): claimed [0-9]+, published 0, " \
        "a relay stopped during an outage says so"
fi

# The end of an outage (an info line) needs a sink that comes back; the
# unit tests of the relay show it with their scriptable sink.

# --- passwords ---------------------------------------------------------------------
# None of these URIs opens, and every message about them is one line that
# does not carry the password.
for uri in "sqlite://u:s3cret@h/x.db" "sqlite://$db?password=s3cret" "sqlite://$db?password=s3cret&x=%zz" \
    "sqlite://u:s3cret@h/x.db?x=%zz" "sqlite://u:s3cr%65t@h/x.db"; do
    run stats --store "$uri"
    if [ "$RC" -ne 2 ]; then
        fail "stats --store $uri exited $RC"
    elif grep -Eq 's3cre' "$ERR"; then
        fail "stats --store $uri shows the password: $(cat "$ERR")"
    else
        pass "stats --store $uri: $(cat "$ERR")"
    fi
done
for sink in "file://u:s3cret@localhost/$TMP/x.jsonl" "file://$TMP/x.jsonl?password=s3cret" "null://u:s3cret@h" \
    "stdout://u:s3cret@h" "nosuch://u:s3cret@h" "file://u:s3cret@h/x?x=%zz"; do
    run relay --store "sqlite://$db" --route orders --sink "$sink" --until-idle --verbose
    if [ "$RC" -ne 2 ]; then
        fail "relay --sink $sink exited $RC"
    elif grep -Eq 's3cre' "$ERR"; then
        fail "relay --sink $sink shows the password: $(cat "$ERR")"
    else
        pass "relay --sink $sink: $(tail -n 1 "$ERR")"
    fi
done

finish
