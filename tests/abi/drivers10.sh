#!/usr/bin/env bash
# `outbox drivers` finds store-mem10 on OUTBOX_DRIVER_PATH (its build
# directory) and lists it as a store driver of ABI 1.0, refusing nothing.
#
# usage: drivers10.sh OUTBOX MODULE
. "$(dirname "$0")/../harness/harness.sh"
outbox=$1
module=$2

echo "OUTBOX_DRIVER_PATH=${OUTBOX_DRIVER_PATH:-}"
"$outbox" drivers >"$TMP/out" 2>"$TMP/err"
status=$?
cat "$TMP/out"
cat "$TMP/err" >&2
[ "$status" -eq 0 ] || fail "outbox drivers exited $status"
[ ! -s "$TMP/err" ] || fail "outbox drivers refused a module: $(cat "$TMP/err")"

# name kind major.minor version path
line=$(awk '$1 == "mem10"' "$TMP/out")
[ -n "$line" ] || { fail "mem10 is not listed"; finish; }
echo "$line" | awk '{ exit !($2 == "store" && $3 == "1.0") }' ||
    fail "mem10 is not listed as a store driver of ABI 1.0: $line"
listed=$(echo "$line" | awk '{ print $NF }')
[ "$(realpath "$listed")" = "$(realpath "$module")" ] ||
    fail "mem10 is listed at $listed, expected $module"
pass "$line"
finish
