#!/usr/bin/env bash
# The battery never prints a password: not in its header line, which names
# the store it runs on, nor when the store cannot be opened. Run through the
# library call (the battery test program), without the outbox CLI, whose
# own masking would hide a leak of the library's.
#
# usage: secrets.sh BATTERY
. "$(dirname "$0")/../harness/harness.sh"
battery=$1
secret=hunter2S3cr

# battery_once EXPECTED_STATUS URI WHAT DRIVER: the battery's whole output must not hold
# the secret, and must show the URI masked.
battery_once() {
    "$battery" --driver "$4" --uri "$2" --case claim_limit >"$TMP/out" 2>&1
    rc=$?
    if [ "$rc" -ne "$1" ]; then
        fail "$3: exit $rc, expected $1: $(head -3 "$TMP/out")"
    elif grep -q "$secret" "$TMP/out"; then
        fail "$3: the output shows the secret: $(grep "$secret" "$TMP/out" | head -2)"
    elif ! grep -qF '***' "$TMP/out"; then
        fail "$3: the output does not show the URI masked: $(head -3 "$TMP/out")"
    else
        pass "$3: $(grep -F '***' "$TMP/out" | head -1)"
    fi
}

# Setup errors: the store does not open.
battery_once 2 "sqlite://$TMP/a.db?token=$secret" "unknown secret parameter" sqlite
battery_once 2 "sqlite://app:$secret@/$TMP/a.db" "password in a host part" sqlite
battery_once 2 "sqlite://app:hun#ter2S3cr@/$TMP/a.db" "password holding '#'" sqlite
battery_once 2 "sqlite://$TMP/a.db?x=1&password=$secret" "password parameter after another" sqlite

# The header line: a PostgreSQL server that trusts local connections takes
# any password, so the battery opens the store and names it.
if [ -n "${OUTBOX_PG_URI:-}" ]; then
    with_pw=$(printf '%s' "$OUTBOX_PG_URI" | sed "s|^postgresql://\([^@/:]*\)@|postgresql://\1:$secret@|")
    case $with_pw in
    *"$secret"*) battery_once 0 "$with_pw" "header line on PostgreSQL" postgres ;;
    *) fail "could not add a password to OUTBOX_PG_URI=$OUTBOX_PG_URI" ;;
    esac
    battery_once 0 "$OUTBOX_PG_URI?password=$secret" "password parameter on PostgreSQL" postgres
else
    skip_part "the header line on PostgreSQL: OUTBOX_PG_URI is not set (tools/test sets it)"
fi

finish
