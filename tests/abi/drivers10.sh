#!/bin/sh
# `outbox drivers` finds store-mem10 on OUTBOX_DRIVER_PATH (its build
# directory) and lists it as a store driver of ABI 1.0, refusing nothing.
#
# usage: drivers10.sh OUTBOX MODULE
set -u
outbox=$1
module=$2

tmp=$(mktemp -d "${TMPDIR:-/tmp}/outbox-abi10.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "FAIL: $*"
    exit 1
}

echo "OUTBOX_DRIVER_PATH=${OUTBOX_DRIVER_PATH:-}"
"$outbox" drivers >"$tmp/out" 2>"$tmp/err"
status=$?
cat "$tmp/out"
cat "$tmp/err" >&2
[ "$status" -eq 0 ] || fail "outbox drivers exited $status"
[ ! -s "$tmp/err" ] || fail "outbox drivers refused a module: $(cat "$tmp/err")"

# name kind major.minor version path
line=$(awk '$1 == "mem10"' "$tmp/out")
[ -n "$line" ] || fail "mem10 is not listed"
echo "$line" | awk '{ exit !($2 == "store" && $3 == "1.0") }' ||
    fail "mem10 is not listed as a store driver of ABI 1.0: $line"
listed=$(echo "$line" | awk '{ print $NF }')
[ "$(realpath "$listed")" = "$(realpath "$module")" ] ||
    fail "mem10 is listed at $listed, expected $module"
echo "ok: $line"
