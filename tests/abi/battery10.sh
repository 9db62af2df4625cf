#!/usr/bin/env bash
# The conformance battery on store-mem10, the driver built against the
# frozen ABI 1.0 headers, through `outbox conformance`, loaded by path.
#
# usage: battery10.sh OUTBOX MODULE URI
# Passes when the runner exits 0, says it loaded mem10 with ABI 1.0, and its
# summary counts 0 failed and at least one passed. Cases skipped for a
# capability mem10 does not have are allowed, and listed.
. "$(dirname "$0")/../harness/harness.sh"
outbox=$1
module=$2
uri=$3

"$outbox" conformance --driver "$module" --uri "$uri" --tap "$TMP/battery.tap" >"$TMP/out" 2>"$TMP/err"
status=$?
cat "$TMP/out"
cat "$TMP/err" >&2

grep -q '^conformance: store driver mem10 .*(ABI 1\.0) on ' "$TMP/out" ||
    fail "the runner did not report loading store driver mem10 with ABI 1.0"
summary=$(grep -E '^conformance: [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$TMP/out" | tail -n 1)
[ -n "$summary" ] || { fail "no summary line (exit $status)"; finish; }
passed=$(echo "$summary" | sed -E 's/^conformance: ([0-9]+) passed.*/\1/')
failed=$(echo "$summary" | sed -E 's/^.* ([0-9]+) failed.*/\1/')

echo "--- abi10: $summary"
echo "--- abi10: skipped cases:"
grep '# SKIP' "$TMP/battery.tap" || echo "(none)"
if grep -q '^not ok' "$TMP/battery.tap"; then
    grep -A1 '^not ok' "$TMP/battery.tap"
    fail "cases failed on mem10"
fi
[ "$status" -eq 0 ] || fail "outbox conformance exited $status, expected 0"
[ "$failed" -eq 0 ] || fail "$failed cases failed"
[ "$passed" -gt 0 ] || fail "no case passed"
pass "the battery passes on the ABI 1.0 driver ($passed passed)"
finish
