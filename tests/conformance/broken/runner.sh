#!/usr/bin/env bash
# `outbox conformance`: usage, exit statuses and messages of the runner.
#
# usage: runner.sh OUTBOX BROKEN_RMW_MODULE
. "$(dirname "$0")/../../harness/harness.sh"
use_outbox "$1"
rmw=$2
case $rmw in /*) ;; *) rmw=$PWD/$rmw ;; esac
uri=sqlite://$TMP/runner.db
unset OUTBOX_CONFORMANCE_URI

# conf STATUS ARGS...: `outbox conformance ARGS` exits STATUS.
conf() {
    local want=$1
    shift
    expect "$want" conformance "$@" && pass "conformance $* -> $want"
}

conf 0 --help && { grep -q '^usage: outbox conformance' "$OUT" || fail "--help: no usage line"; }

if conf 0 --list; then
    grep -qx compare_and_set_hold_100 "$OUT" || fail "--list lacks compare_and_set_hold_100"
    grep -qx per_key_fifo "$OUT" || fail "--list lacks per_key_fifo"
fi

# No URI: a skip (77), saying where the URI comes from.
conf 77 --driver sqlite && { grep -q 'OUTBOX_CONFORMANCE_URI' "$ERR" || fail "the skip does not name OUTBOX_CONFORMANCE_URI: $(cat "$ERR")"; }
expect_error '--driver is required' conformance --uri "$uri"
expect_error 'unknown option --bogus' conformance --driver sqlite --uri "$uri" --bogus
expect_error 'no case name contains "no_such_case"' conformance --driver sqlite --uri "$uri" --case no_such_case
expect_error 'no_such_driver' conformance --driver no_such_driver --uri "$uri"
# A sink driver gets the sink battery, which needs the driver's reader.
expect_error 'the file driver has no reader' conformance --driver file --uri "$uri"
expect_error 'give --broker-stop and --broker-start together' conformance --driver sqlite --uri "$uri" --broker-stop true
expect_error '--broker-start' conformance --driver sqlite --uri "$uri" --broker-start ''
expect_error 'cannot write the TAP file' conformance --driver sqlite --uri "$uri" --case claim_limit \
    --tap "$TMP/no/such/dir.tap"

# The URI may come from the environment; a passing case exits 0.
OUTBOX_CONFORMANCE_URI=$uri conf 0 --driver sqlite --case stage_duplicate --tap "$TMP/ok.tap" &&
    { grep -q '^ok 1 - stage_duplicate_skipped$' "$TMP/ok.tap" || fail "TAP lacks the passing case: $(cat "$TMP/ok.tap")"; }

# A failing case exits 1, says so in Check's report and in the TAP.
if conf 1 --driver "$rmw" --uri "$uri" --case compare_and_set_hold --tap "$TMP/bad.tap"; then
    grep -q 'Failures: [1-9]' "$OUT" || fail "no failure in Check's report: $(cat "$OUT")"
    grep -q '^not ok [0-9]* - compare_and_set_hold_100$' "$TMP/bad.tap" || fail "TAP: $(cat "$TMP/bad.tap")"
fi
finish
