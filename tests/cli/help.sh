#!/usr/bin/env bash
# --help on every subcommand, --version, and `outbox drivers`.
. "$(dirname "$0")/lib.sh" "$@"

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

expect 0 --version && grep -Eq '^outbox [0-9]+\.[0-9]+\.[0-9]+' "$OUT" && pass "--version: $(cat "$OUT")" ||
    fail "--version printed: $(cat "$OUT")"

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
