#!/usr/bin/env bash
# The compiler's word on which SDK headers store-mem10 was built against:
# every outbox/*.h that the objects of the module depend on (the compiler's
# -MD output, as ninja recorded it) must be the frozen 1.0 copy.
#
# usage: headers10.sh NINJA BUILD_ROOT OBJECT_DIR FROZEN_INCLUDE
#   OBJECT_DIR  what the module's object paths contain (store-mem10.so.p/)
. "$(dirname "$0")/../harness/harness.sh"
ninja=$1
build=$2
objdir=$3
frozen=$(realpath "$4/outbox")

"$ninja" -C "$build" -t deps >"$TMP/deps" || { fail "$ninja -t deps failed"; finish; }

# Lines "object: #deps N, ..." start a block of indented dependency paths,
# relative to the build directory.
awk -v objdir="$objdir" '
    /^[^ \t]/ { inside = index($0, objdir) > 0; if (inside) { sub(/:.*/, ""); print "object " $0 } next }
    inside && NF { print "dep " $1 }
' "$TMP/deps" >"$TMP/mem10"

objects=$(grep -c '^object ' "$TMP/mem10")
[ "$objects" -ge 3 ] || fail "found $objects objects of store-mem10 in ninja's deps log, expected 3"
for dep in $(sed -n 's/^dep //p' "$TMP/mem10" | grep '/outbox/[^/]*\.h$'); do
    case $dep in /*) path=$dep ;; *) path=$build/$dep ;; esac
    realpath "$path"
done | sort -u >"$TMP/headers"
cat "$TMP/headers"

outside=$(grep -v -x -F -e "$frozen/common.h" -e "$frozen/driver.h" "$TMP/headers")
[ -z "$outside" ] || fail "store-mem10 was compiled with outbox headers other than the frozen 1.0 copy: $outside"
[ "$(wc -l <"$TMP/headers")" -eq 2 ] || fail "expected exactly common.h and driver.h from $frozen"
pass "the $objects objects of store-mem10 read only the frozen 1.0 headers in $frozen"
finish
