#!/bin/sh
# A driver template in docs/examples builds the way its Makefile and
# meson.build say (make and meson, with pkg-config, against the SDK of this
# build) and loads through the real loader: the battery refuses it only for
# the one optional entry it cannot run without, i.e. after the ABI checks
# and init() passed. A store template lacks schema_apply (the battery
# creates a relation per case with it); a sink template lacks a reader (the
# battery reads back what it published with it).
#
# usage: template.sh store|sink TEMPLATE_DIR BUILD_ROOT BATTERY
set -u
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

tmp=$(mktemp -d "${TMPDIR:-/tmp}/outbox-template.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
cp -r "$src" "$tmp/$name" || exit 2
cd "$tmp/$name" || exit 2
PKG_CONFIG_PATH=$build_root/meson-uninstalled
export PKG_CONFIG_PATH

if ! make -s CFLAGS="-O2 -Wall -Wextra -Werror" >"$tmp/make.log" 2>&1 || [ ! -f "$name.so" ]; then
    echo "FAIL: make did not build $name.so:"
    cat "$tmp/make.log"
    exit 1
fi
echo "ok: make built $name.so"

if command -v meson >/dev/null 2>&1; then
    if ! meson setup "$tmp/build" -Dwerror=true >"$tmp/meson.log" 2>&1 ||
        ! ninja -C "$tmp/build" >>"$tmp/meson.log" 2>&1 || [ ! -f "$tmp/build/$name.so" ]; then
        echo "FAIL: meson did not build $name.so:"
        tail -30 "$tmp/meson.log"
        exit 1
    fi
    echo "ok: meson built $name.so"
fi

"$battery" --driver "./$name.so" --uri template:anything >"$tmp/out" 2>"$tmp/err"
status=$?
if [ "$status" -ne 2 ] || ! grep -q "the template driver has no $missing" "$tmp/err"; then
    echo "FAIL: the battery on the $kind template exited $status, expected 2 for the missing $missing:"
    cat "$tmp/out" "$tmp/err"
    exit 1
fi
echo "ok: the $kind template loads; the battery asks for $(cat "$tmp/err")"
exit 0
