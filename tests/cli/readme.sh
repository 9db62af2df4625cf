#!/usr/bin/env bash
# The README's tour, run as a reader would run it: every shell block of the
# "A short tour" section in order, from the top of a checkout where
# tools/demo (build-demo/) or a build (build/) has run, with nothing else
# set up: no driver path, no library path, no outbox on PATH. The C example
# it shows is saved as the file it names and built as it says.
#   readme.sh OUTBOX README BUILD_ROOT [SANITIZE]
# SANITIZE is the build's b_sanitize: a sanitized liboutbox needs a program
# built with the same sanitizers, so then the tour's cc adds them.
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
README=${2:?usage: $0 OUTBOX README BUILD_ROOT [SANITIZE]}
BUILD=${3:?usage: $0 OUTBOX README BUILD_ROOT [SANITIZE]}
SANITIZE=${4:-none}

# block_lines SECTION: the fenced blocks of the section whose heading is
# SECTION, as "LANG<TAB>LINE" per line, a "END" line after each block.
block_lines() {
    awk -v want="## $1" '
        /^## / { inside = ($0 == want) }
        !inside { next }
        /^```/ {
            if (fence) { print "END"; fence = 0 } else { fence = 1; lang = substr($0, 4) }
            next
        }
        fence { print lang "\t" $0 }
    ' "$README"
}

# --- the set-up section keeps its two commands -----------------------------
setup=$(block_lines "Set up on a fresh Debian machine" | grep -v '^END$' | cut -f2- | tr '\n' ' ')
[ "$setup" = "tools/demo tools/test " ] && pass "set-up: tools/demo and tools/test" ||
    fail "the set-up section's commands are: $setup"

# --- the tour ----------------------------------------------------------------
work=$TMP/checkout
mkdir -p "$work" "$TMP/t"
ln -s "$BUILD" "$work/build-demo"
ln -s "$BUILD" "$work/build"
: >"$TMP/tour.sh"
n_c=0
while IFS= read -r line; do
    if [ "$line" = END ]; then
        echo >>"$TMP/tour.sh"
        continue
    fi
    lang=${line%%	*}
    text=${line#*	}
    # The tour writes to /tmp; this test to its own directory.
    text=${text//\/tmp\//$TMP/t/}
    case $lang in
    c) printf '%s\n' "$text" >>"$work/app.c.part" ;;
    "" | sh | shell | bash) printf '%s\n' "$text" >>"$TMP/tour.sh" ;;
    *) ;;
    esac
done < <(block_lines "A short tour")
if [ -f "$work/app.c.part" ]; then
    mv "$work/app.c.part" "$work/app.c"
    n_c=1
fi
[ -s "$TMP/tour.sh" ] || fail "no shell block in the tour"
grep -q 'app\.c' "$TMP/tour.sh" && [ "$n_c" -eq 0 ] && fail "the tour builds app.c but shows no C block"

path=/usr/local/bin:/usr/bin:/bin
if [ "$SANITIZE" != none ]; then
    mkdir "$TMP/bin"
    printf '#!/bin/sh\nexec %s -fsanitize=%s "$@"\n' "$(command -v cc)" "$SANITIZE" >"$TMP/bin/cc"
    chmod +x "$TMP/bin/cc"
    path=$TMP/bin:$path
fi

# A fresh shell: nothing of this test's environment that the tour should
# set itself.
(cd "$work" && env -u OUTBOX_DRIVER_PATH -u LD_LIBRARY_PATH -u PKG_CONFIG_PATH \
    PATH="$path" OUTBOX_NO_INSTALLED_DRIVERS=1 \
    bash -e -o pipefail "$TMP/tour.sh") >"$OUT" 2>"$ERR"
rc=$?
if [ "$rc" -ne 0 ]; then
    fail "the tour stopped (exit $rc): $(tail -n 5 "$ERR")"
else
    pass "every command of the tour ran: $(wc -l <"$TMP/tour.sh" | tr -d ' ') lines"
fi
grep -q '^staged 1$' "$OUT" && pass "the tour staged an event" || fail "the tour staged nothing: $(head -n 20 "$OUT")"
[ -s "$TMP/t/orders.jsonl" ] && pass "the tour's relay wrote $(wc -l <"$TMP/t/orders.jsonl") event(s)" ||
    fail "the tour's relay wrote nothing"
grep -q '"published":' "$OUT" && pass "the tour printed the stats" || fail "no stats in: $(head -n 20 "$OUT")"
if [ "$n_c" -eq 1 ]; then
    [ -x "$work/app" ] && pass "the C example built" || fail "the C example did not build"
    grep -q '"order":2' "$TMP/t/orders.jsonl" && pass "the event the C example staged was relayed" ||
        fail "the C example's event is not in the sink file"
else
    fail "the tour shows no C example"
fi

finish
