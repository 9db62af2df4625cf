#!/usr/bin/env bash
# A driver template in docs/examples builds the way its Makefile and
# meson.build say (make and meson, with pkg-config, against the SDK of this
# build) and loads through the real loader: the battery refuses it only for
# the one optional entry it cannot run without, i.e. after the ABI checks
# and init() passed. A store template lacks schema_apply (the battery
# creates a relation per case with it); a sink template lacks a reader (the
# battery reads back what it published with it).
#
# usage: template.sh store|sink TEMPLATE_DIR BUILD_ROOT BATTERY
. "$(dirname "$0")/../harness/harness.sh"
kind=$1
src=$2
build_root=$3
battery=$4
case $battery in /*) ;; *) battery=$PWD/$battery ;; esac
case $kind in
store) missing='schema_apply' ;;
sink) missing='reader' ;;
*) echo "usage: template.sh store|sink TEMPLATE_DIR BUILD_ROOT BATTERY"; exit 2 ;;
esac
name=$kind-template

cp -r "$src" "$TMP/$name" || exit 2
cd "$TMP/$name" || exit 2
PKG_CONFIG_PATH=$build_root/meson-uninstalled
export PKG_CONFIG_PATH

if ! make -s CFLAGS="-O2 -Wall -Wextra -Werror" >"$TMP/make.log" 2>&1 || [ ! -f "$name.so" ]; then
    echo "FAIL: make did not build $name.so:"
    cat "$TMP/make.log"
    exit 1
fi
echo "ok: make built $name.so"

if command -v meson >/dev/null 2>&1; then
    if ! meson setup "$TMP/build" -Dwerror=true >"$TMP/meson.log" 2>&1 ||
        ! ninja -C "$TMP/build" >>"$TMP/meson.log" 2>&1 || [ ! -f "$TMP/build/$name.so" ]; then
        echo "FAIL: meson did not build $name.so:"
        tail -30 "$TMP/meson.log"
        exit 1
    fi
    echo "ok: meson built $name.so"
fi

"$battery" --driver "./$name.so" --uri template:anything >"$TMP/out" 2>"$TMP/err"
status=$?
if [ "$status" -ne 2 ] || ! grep -q "the template driver has no $missing" "$TMP/err"; then
    echo "FAIL: the battery on the $kind template exited $status, expected 2 for the missing $missing:"
    cat "$TMP/out" "$TMP/err"
    exit 1
fi
echo "ok: the $kind template loads; the battery asks for $(cat "$TMP/err")"
exit 0
