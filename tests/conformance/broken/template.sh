#!/bin/sh
# The store template in docs/examples builds the way its README says (make
# and meson, with pkg-config, against the SDK of this build) and loads
# through the real loader: the battery refuses it only for the missing
# schema_apply it needs, i.e. after the ABI checks and init() passed.
#
# usage: template.sh TEMPLATE_DIR BUILD_ROOT BATTERY
set -u
src=$1
build_root=$2
battery=$3
case $battery in /*) ;; *) battery=$PWD/$battery ;; esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/outbox-template.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
cp -r "$src" "$tmp/store-template" || exit 2
cd "$tmp/store-template" || exit 2
PKG_CONFIG_PATH=$build_root/meson-uninstalled
export PKG_CONFIG_PATH

if ! make -s CFLAGS="-O2 -Wall -Wextra -Werror" >"$tmp/make.log" 2>&1 || [ ! -f store-template.so ]; then
    echo "FAIL: make did not build store-template.so:"
    cat "$tmp/make.log"
    exit 1
fi
echo "ok: make built store-template.so"

if command -v meson >/dev/null 2>&1; then
    if ! meson setup "$tmp/build" -Dwerror=true >"$tmp/meson.log" 2>&1 ||
        ! ninja -C "$tmp/build" >>"$tmp/meson.log" 2>&1 || [ ! -f "$tmp/build/store-template.so" ]; then
        echo "FAIL: meson did not build store-template.so:"
        tail -30 "$tmp/meson.log"
        exit 1
    fi
    echo "ok: meson built store-template.so"
fi

"$battery" --driver ./store-template.so --uri template:anything >"$tmp/out" 2>"$tmp/err"
status=$?
if [ "$status" -ne 2 ] || ! grep -q 'template driver has no schema_apply' "$tmp/err"; then
    echo "FAIL: the battery on the template exited $status, expected 2 for the missing schema_apply:"
    cat "$tmp/out" "$tmp/err"
    exit 1
fi
echo "ok: the template loads; the battery asks for $(cat "$tmp/err")"
exit 0
