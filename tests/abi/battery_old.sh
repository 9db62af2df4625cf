#!/usr/bin/env bash
# The conformance battery, through `outbox conformance`, on a driver built
# against the frozen headers of an older ABI minor (store-mem10: 1.0,
# sink-mem13: 1.3), loaded by path: the current host must still load it and
# it must still pass.
#
# usage: battery_old.sh OUTBOX MODULE URI KIND NAME ABI
# Passes when the runner exits 0, says it loaded KIND driver NAME with that
# ABI, and its summary counts 0 failed and at least one passed. Cases
# skipped for a capability the driver does not have are allowed, and
# listed.
. "$(dirname "$0")/../harness/harness.sh"
outbox=$1
module=$2
uri=$3
kind=$4
name=$5
abi=$6

"$outbox" conformance --driver "$module" --uri "$uri" --tap "$TMP/battery.tap" >"$TMP/out" 2>"$TMP/err"
status=$?
cat "$TMP/out"
cat "$TMP/err" >&2

grep -q "^conformance: $kind driver $name .*(ABI ${abi//./\\.}) on " "$TMP/out" ||
    fail "the runner did not report loading $kind driver $name with ABI $abi"
summary=$(grep -E '^conformance: [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$TMP/out" | tail -n 1)
[ -n "$summary" ] || { fail "no summary line (exit $status)"; finish; }
passed=$(echo "$summary" | sed -E 's/^conformance: ([0-9]+) passed.*/\1/')
failed=$(echo "$summary" | sed -E 's/^.* ([0-9]+) failed.*/\1/')

echo "--- $name: $summary"
echo "--- $name: skipped cases:"
grep '# SKIP' "$TMP/battery.tap" || echo "(none)"
if grep -q '^not ok' "$TMP/battery.tap"; then
    grep -A1 '^not ok' "$TMP/battery.tap"
    fail "cases failed on $name"
fi
[ "$status" -eq 0 ] || fail "outbox conformance exited $status, expected 0"
[ "$failed" -eq 0 ] || fail "$failed cases failed"
[ "$passed" -gt 0 ] || fail "no case passed"
pass "the battery passes on the ABI $abi driver ($passed passed)"
finish
