#!/usr/bin/env bash
# `outbox conformance`: usage, exit statuses and messages of the runner.
#
# usage: runner.sh OUTBOX BROKEN_RMW_MODULE
. "$(dirname "$0")/../harness/harness.sh"
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

if conf 0 --help; then
    grep -q '^usage: outbox conformance' "$OUT" || fail "--help: no usage line"
    for opt in --verbose --timeout-scale; do
        grep -q -- "^  $opt " "$OUT" || fail "--help does not explain $opt"
    done
fi

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
# --timeout-scale takes a plain number above 0, at most 1000.
for bad in abc 0 -1 '' 0x10x nan inf 1,5 2s; do
    expect_error "^outbox: --timeout-scale: \"$bad\" is not a number above 0\$" \
        conformance --driver sqlite --uri "$uri" --case claim_limit --timeout-scale "$bad"
done
for big in 1001 1e9 1e999; do
    expect_error "^outbox: --timeout-scale: \"$big\" is too large \\(at most 1000\\)\$" \
        conformance --driver sqlite --uri "$uri" --case claim_limit --timeout-scale "$big"
done
expect_error '--timeout-scale needs a value' conformance --driver sqlite --uri "$uri" --timeout-scale

# The URI may come from the environment; a passing case exits 0, and says
# nothing of itself but in the summary.
if OUTBOX_CONFORMANCE_URI=$uri conf 0 --driver sqlite --case stage_duplicate --tap "$TMP/ok.tap"; then
    grep -q '^ok 1 - stage_duplicate_skipped$' "$TMP/ok.tap" || fail "TAP lacks the passing case: $(cat "$TMP/ok.tap")"
    grep -q 'PASS' "$OUT" && fail "a PASS line without --verbose: $(cat "$OUT")"
    grep -qx 'conformance: 1 passed, 0 failed, 0 skipped' "$OUT" || fail "summary: $(cat "$OUT")"
fi

# --verbose: a PASS line per passing case (wherever the option stands).
conf 0 --verbose --driver sqlite --uri "$uri" --case stage_duplicate &&
    { grep -qx 'conformance: PASS stage_duplicate_skipped' "$OUT" || fail "--verbose: no PASS line: $(cat "$OUT")"; }
conf 0 --driver sqlite --uri "$uri" --case stage_duplicate --verbose &&
    { grep -qx 'conformance: PASS stage_duplicate_skipped' "$OUT" || fail "--verbose last: no PASS line: $(cat "$OUT")"; }

# A failing case exits 1, says so in one line naming the case and what it
# checked, with no path of the battery's sources, and in the TAP.
if conf 1 --driver "$rmw" --uri "$uri" --case compare_and_set_hold --tap "$TMP/bad.tap" --verbose; then
    line=$(grep '^conformance: FAIL compare_and_set_hold_100: ' "$OUT")
    case $line in
    '') fail "no FAIL line for compare_and_set_hold_100: $(cat "$OUT")" ;;
    *'.c:'[0-9]*) fail "the FAIL line names a source file: $line" ;;
    *'expected 100'*) pass "$line" ;;
    *) fail "the FAIL line does not say what was expected: $line" ;;
    esac
    [ "$(grep -Ec '^conformance: (PASS|FAIL) compare_and_set_hold_(100|50)' "$OUT")" -eq 2 ] ||
        fail "--verbose: not a line for each of the two cases: $(cat "$OUT")"
    grep -q '^not ok [0-9]* - compare_and_set_hold_100$' "$TMP/bad.tap" || fail "TAP: $(cat "$TMP/bad.tap")"
    comment=$(grep -A1 '^not ok [0-9]* - compare_and_set_hold_100$' "$TMP/bad.tap" | tail -n 1)
    [ "# ${line#conformance: FAIL compare_and_set_hold_100: }" = "$comment" ] ||
        fail "the TAP comment differs from the FAIL line: $comment"
fi

# --timeout-scale reaches Check: the case holds a transaction for 200 ms,
# beyond its 30 s timeout scaled by 0.001 (Check's own multiplier set to 1,
# as a run under a sanitizer may raise it).
if CK_TIMEOUT_MULTIPLIER=1 conf 1 --driver sqlite --uri "$uri" --case compare_and_set_hold_100 --timeout-scale 0.001; then
    grep -qx 'conformance: FAIL compare_and_set_hold_100: did not finish within its timeout of 0.03 s .*' "$OUT" ||
        fail "--timeout-scale 0.001: $(cat "$OUT")"
fi
conf 0 --driver sqlite --uri "$uri" --case compare_and_set_hold_100 --timeout-scale 2.5
finish
