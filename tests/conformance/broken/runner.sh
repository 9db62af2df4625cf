#!/bin/sh
# `outbox conformance`: usage, exit statuses and messages of the runner.
#
# usage: runner.sh OUTBOX BROKEN_RMW_MODULE
set -u
outbox=$1
rmw=$2
case $outbox in /*) ;; *) outbox=$PWD/$outbox ;; esac
case $rmw in /*) ;; *) rmw=$PWD/$rmw ;; esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/outbox-runner.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
uri=sqlite://$tmp/runner.db
failed=0
unset OUTBOX_CONFORMANCE_URI

fail() {
    echo "FAIL: $*"
    failed=$((failed + 1))
}

# expect STATUS ARGS...: runs `outbox conformance ARGS`, checks the status.
expect() {
    want=$1
    shift
    "$outbox" conformance "$@" >"$tmp/out" 2>"$tmp/err"
    got=$?
    if [ "$got" -ne "$want" ]; then
        fail "conformance $* exited $got, expected $want; stderr: $(head -c 300 "$tmp/err")"
        return 1
    fi
    echo "ok: conformance $* -> $want"
    return 0
}

# error_is PATTERN: exactly one stderr line, "outbox: ...", matching PATTERN.
error_is() {
    if [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -q '^outbox: ' "$tmp/err" ||
        ! grep -Eq -- "$1" "$tmp/err"; then
        fail "expected one stderr line matching /$1/, got: $(cat "$tmp/err")"
    fi
}

expect 0 --help && { grep -q '^usage: outbox conformance' "$tmp/out" || fail "--help: no usage line"; }

if expect 0 --list; then
    grep -qx compare_and_set_hold_100 "$tmp/out" || fail "--list lacks compare_and_set_hold_100"
    grep -qx per_key_fifo "$tmp/out" || fail "--list lacks per_key_fifo"
fi

expect 77 --driver sqlite && error_is 'OUTBOX_CONFORMANCE_URI'
expect 2 --uri "$uri" && error_is '--driver is required'
expect 2 --driver sqlite --uri "$uri" --bogus && error_is 'unknown option --bogus'
expect 2 --driver sqlite --uri "$uri" --case no_such_case && error_is 'no case name contains "no_such_case"'
expect 2 --driver no_such_driver --uri "$uri" && error_is 'no_such_driver'
# A sink driver gets the sink battery, which needs the driver's reader.
expect 2 --driver file --uri "$uri" && error_is 'the file driver has no reader'
expect 2 --driver sqlite --uri "$uri" --broker-stop true && error_is 'give --broker-stop and --broker-start together'
expect 2 --driver sqlite --uri "$uri" --broker-start '' && error_is '--broker-start'
expect 2 --driver sqlite --uri "$uri" --case claim_limit --tap "$tmp/no/such/dir.tap" &&
    error_is 'cannot write the TAP file'

# The URI may come from the environment; a passing case exits 0.
OUTBOX_CONFORMANCE_URI=$uri expect 0 --driver sqlite --case stage_duplicate --tap "$tmp/ok.tap" &&
    { grep -q '^ok 1 - stage_duplicate_skipped$' "$tmp/ok.tap" || fail "TAP lacks the passing case: $(cat "$tmp/ok.tap")"; }

# A failing case exits 1, says so in Check's report and in the TAP.
if expect 1 --driver "$rmw" --uri "$uri" --case compare_and_set_hold --tap "$tmp/bad.tap"; then
    grep -q 'Failures: [1-9]' "$tmp/out" || fail "no failure in Check's report: $(cat "$tmp/out")"
    grep -q '^not ok [0-9]* - compare_and_set_hold_100$' "$tmp/bad.tap" || fail "TAP: $(cat "$tmp/bad.tap")"
fi

[ "$failed" -eq 0 ] && echo "all runner checks passed"
[ "$failed" -eq 0 ]
