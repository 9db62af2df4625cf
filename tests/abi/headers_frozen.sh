#!/usr/bin/env bash
# The compiler's word on which SDK headers a driver built against an older
# ABI's frozen headers was really built against: every outbox/*.h that the
# objects of the module depend on (the compiler's -MD output, as ninja
# recorded it) must be one of the frozen copy's.
#
# usage: headers_frozen.sh NINJA BUILD_ROOT OBJECT_DIR FROZEN_INCLUDE OBJECTS
#   OBJECT_DIR  what the module's object paths contain (store-mem10.so.p/)
#   OBJECTS     how many objects the module has
. "$(dirname "$0")/../harness/harness.sh"
ninja=$1
build=$2
objdir=$3
frozen=$(realpath "$4/outbox")
want_objects=$5

"$ninja" -C "$build" -t deps >"$TMP/deps" || { fail "$ninja -t deps failed"; finish; }

# Lines "object: #deps N, ..." start a block of indented dependency paths,
# relative to the build directory.
awk -v objdir="$objdir" '
    /^[^ \t]/ { inside = index($0, objdir) > 0; if (inside) { sub(/:.*/, ""); print "object " $0 } next }
    inside && NF { print "dep " $1 }
' "$TMP/deps" >"$TMP/module"

objects=$(grep -c '^object ' "$TMP/module")
check "objects of ${objdir%.so.p/} in ninja's deps log" "$want_objects" "$objects"
for dep in $(sed -n 's/^dep //p' "$TMP/module" | grep '/outbox/[^/]*\.h$'); do
    case $dep in /*) path=$dep ;; *) path=$build/$dep ;; esac
    realpath "$path"
done | sort -u >"$TMP/headers"
cat "$TMP/headers"

ls "$frozen"/*.h | xargs -n1 realpath | sort >"$TMP/frozen"
outside=$(comm -23 "$TMP/headers" "$TMP/frozen")
[ -z "$outside" ] || fail "${objdir%.so.p/} was compiled with outbox headers other than the frozen copy: $outside"
[ -s "$TMP/headers" ] || fail "no outbox header in the deps log of ${objdir%.so.p/}"
pass "the objects of ${objdir%.so.p/} read only the frozen headers in $frozen"
finish
