#!/usr/bin/env bash
# --help on every subcommand, --version, and `outbox drivers`.
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"

for cmd in "" "schema" "schema print" "schema apply" "schema check" stage relay stats \
    replay purge drivers conformance; do
    # shellcheck disable=SC2086
    if expect 0 $cmd --help; then
        if ! grep -q '^usage: outbox' "$OUT"; then
            fail "outbox $cmd --help: no usage line on stdout"
        elif [ -s "$ERR" ]; then
            fail "outbox $cmd --help wrote to stderr: $(cat "$ERR")"
        else
            pass "outbox $cmd --help"
        fi
    fi
done

# The subcommand's own usage, not the general one.
expect 0 relay --help && grep -q -- '--until-idle' "$OUT" || fail "relay --help does not list --until-idle"
expect 0 stage -h && grep -q -- '--payload' "$OUT" || fail "stage -h does not list --payload"

expect 0 --version && grep -q "^outbox ${OUTBOX_TEST_VERSION:?meson test sets it} " "$OUT" &&
    pass "--version: $(cat "$OUT")" || fail "--version printed: $(cat "$OUT"), the project is $OUTBOX_TEST_VERSION"

# The help texts offer the drivers this build made and no others; `outbox
# --help` names them, and they are what `outbox drivers` finds in the build.
# Broker drivers this build made are left out of the pattern of those it
# must not offer.
expect 0 drivers
absent=$(for d in kafka mongo nats amqp redis; do grep -q "^$d " "$OUT" || echo "$d"; done | tr '\n' '|')
grep -q "^http " "$OUT" || absent="${absent}https?:|"
absent="${absent%|}" # empty when every broker driver was built
for cmd in "" stage relay schema; do
    # shellcheck disable=SC2086
    expect 0 $cmd --help || continue
    if [ -n "$absent" ] && grep -Eiq "$absent" "$OUT"; then
        fail "outbox $cmd --help offers a driver this build does not have: $(grep -Ei "$absent" "$OUT")"
    elif [ -n "$cmd" ] && [ "$cmd" != schema ] && ! grep -q 'outbox drivers. lists them' "$OUT"; then
        fail "outbox $cmd --help does not point at outbox drivers"
    else
        pass "outbox $cmd --help names only built drivers"
    fi
done
expect 0 relay --help && grep -q -- '--sink URI .*stdout:, file:///path.jsonl' "$OUT" ||
    fail "relay --help does not offer the file sink's URIs: $(grep -- --sink "$OUT")"
expect 0 stage --help && grep -q -- '--store URI .*sqlite:///path/to.db' "$OUT" ||
    fail "stage --help does not offer the sqlite store's URI: $(grep -- --store "$OUT")"
expect 0 schema --help && grep -Eq -- '^usage: outbox schema print --store sqlite(\|[a-z]+)* ' "$OUT" ||
    fail "schema --help does not name the built stores: $(head -1 "$OUT")"
if expect 0 --help; then
    built=$(sed -n 's/^Drivers in this build: stores \(.*\); sinks \(.*\)\.$/\1, \2/p' "$OUT" | tr -d ' ' | tr ',' '\n' | sort | tr '\n' ' ')
    expect 0 drivers
    found=$(awk '{ print $1 }' "$OUT" | sort | tr '\n' ' ')
    if [ -z "$built" ] || [ "$built" != "$found" ]; then
        fail "--help names the drivers \"$built\", the build has \"$found\""
    else
        pass "--help names the drivers of this build: $built"
    fi
fi

if expect 0 drivers; then
    grep -Eq '^sqlite +store +1\.[0-9]+ .*store-sqlite\.so$' "$OUT" || fail "drivers does not list sqlite: $(cat "$OUT")"
    grep -Eq '^file +sink +1\.[0-9]+ .*sink-file\.so$' "$OUT" || fail "drivers does not list file: $(cat "$OUT")"
    pass "drivers:
$(cat "$OUT")"
fi

# A directory holding a module that is not a driver: refused on stderr, exit 0.
if [ -n "${OUTBOX_TEST_MODULES:-}" ] && [ -e "$OUTBOX_TEST_MODULES/not_a_driver.so" ]; then
    OUTBOX_DRIVER_PATH="$OUTBOX_TEST_MODULES:${OUTBOX_DRIVER_PATH:-}" run drivers
    if [ "$RC" -ne 0 ]; then
        fail "drivers with a broken module exited $RC"
    elif ! grep -q '^outbox: .*not_a_driver' "$ERR"; then
        fail "drivers did not report not_a_driver.so as refused: $(cat "$ERR")"
    elif ! grep -q '^sqlite ' "$OUT"; then
        fail "drivers with a broken module no longer lists sqlite"
    else
        pass "drivers reports refused modules: $(grep not_a_driver "$ERR")"
    fi
fi

finish
