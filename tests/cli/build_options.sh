#!/usr/bin/env bash
# The build's driver options: one feature option per driver folder and no
# option for a driver that does not exist (the options that are not about a
# driver, tests and systemd, are read where they apply); an enabled driver whose library
# is missing stops the configure step, auto leaves it out of the summary.
# Usage: build_options.sh SOURCE_DIR MESON
. "$(dirname "$0")/../harness/harness.sh"
src=${1:?usage: $0 SOURCE_DIR MESON}
meson=${2:?usage: $0 SOURCE_DIR MESON}

options=$(sed -n "s/^option('\([a-z_]*\)'.*/\1/p" "$src/meson_options.txt")
for opt in $options; do
    [ "$opt" = tests ] && continue
    if [ "$opt" = systemd ]; then
        grep -q "get_option('systemd')" "$src/tools/meson.build" && pass "option systemd is read by tools/" ||
            fail "option systemd is read nowhere"
        continue
    fi
    if grep -lq "get_option('$opt')" "$src"/drivers/*/meson.build; then
        pass "option $opt builds $(grep -l "get_option('$opt')" "$src"/drivers/*/meson.build | xargs -n1 dirname | xargs -n1 basename)"
    else
        fail "option $opt is read by no driver folder"
    fi
done
for f in "$src"/drivers/*/meson.build; do
    grep -q "get_option('" "$f" || fail "$(dirname "$f") has no option of its own"
done

# Configure with pkg-config finding nothing, so sqlite3 and libpq are "missing".
setup() {
    rm -rf "$TMP/build"
    PKG_CONFIG_LIBDIR=$TMP/empty PKG_CONFIG_PATH='' "$meson" setup "$TMP/build" "$src" \
        -Dtests=disabled "$@" >"$TMP/log" 2>&1
}
if setup -Dkafka=enabled; then
    fail "-Dkafka=enabled was accepted, but there is no Kafka driver"
else
    pass "-Dkafka=enabled is refused: $(grep -m1 -i 'unknown option' "$TMP/log")"
fi
setup -Dsqlite=auto -Dpostgres=auto
if grep -q 'Run-time dependency sqlite3 found: YES' "$TMP/log"; then
    echo "sqlite3 is found without pkg-config here; the missing-library checks are skipped"
else
    if ! grep -Eq 'store drivers *: *$' "$TMP/log"; then
        fail "with sqlite3 and libpq missing, auto should build no store driver: $(grep 'store drivers' "$TMP/log")"
    else
        pass "auto without the libraries configures, summary: $(grep 'sink drivers' "$TMP/log")"
    fi
    if setup -Dsqlite=enabled; then
        fail "-Dsqlite=enabled configured without sqlite3"
    elif ! grep -q 'Dependency "sqlite3" not found' "$TMP/log"; then
        fail "-Dsqlite=enabled failed, but not on sqlite3: $(tail -3 "$TMP/log")"
    else
        pass "-Dsqlite=enabled without sqlite3 stops the configure step"
    fi
fi

finish
