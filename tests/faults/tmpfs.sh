# Helpers of the full-disk tests (tests/faults/full_*.sh), sourced after
# tests/cli/lib.sh: small tmpfs mounts under the test's own $TMP, background
# processes the test started, and one clean-up that undoes both however the
# test ends (a failed check, exit 77, SIGTERM from the test runner).
#
# Mounting needs root (or CAP_SYS_ADMIN). Where it is refused the tests skip
# (exit 77) with a loud line, except under CI=true, where a skipped fault
# test would hide that the faults were never tried: there they fail.

MOUNTS=()
BACKGROUND=()

cleanup_full() {
    local pid m
    for pid in "${BACKGROUND[@]}"; do
        kill "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    for m in "${MOUNTS[@]}"; do
        # Lazily when busy, so the mount never outlives the test.
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null ||
            echo "WARNING: could not unmount $m"
    done
    rm -rf "$TMP"
}
trap cleanup_full EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# mount_small NAME SIZE: a fresh tmpfs of SIZE (as mount -o size= takes it)
# at $TMP/NAME; its path in $MNT.
mount_small() {
    local dir=$TMP/$1
    mkdir -p "$dir" || exit 1
    if ! mount -t tmpfs -o "size=$2,mode=0755" outbox-faults "$dir" 2>"$TMP/.mount.err"; then
        local why
        why=$(tr -s '\n ' ' ' <"$TMP/.mount.err")
        if [ "${CI:-}" = true ]; then
            echo "FAIL: cannot mount a $2 tmpfs at $dir ($why); CI=true needs the full-disk tests to run"
            exit 1
        fi
        echo "############################################################################"
        echo "SKIPPED: cannot mount a $2 tmpfs ($why)."
        echo "The full-disk tests need root or CAP_SYS_ADMIN; nothing was tested."
        echo "############################################################################"
        exit 77
    fi
    MOUNTS+=("$dir")
    MNT=$dir
}

# fill_up DIR: writes DIR/filler until the file system is full.
fill_up() {
    dd if=/dev/zero of="$1/filler" bs=4096 2>/dev/null
    local avail
    avail=$(df -P -k "$1" | awk 'NR == 2 { print $4 }')
    [ "$avail" = 0 ] && pass "$1 is full" || fail "$1 still has $avail KiB free after the filler"
}

# relay_bounded SECONDS ARGS...: outbox relay ARGS under timeout(1), stdout
# in $OUT, stderr in $ERR, status in $RC (124: it did not end in time).
relay_bounded() {
    local limit=$1
    shift
    # shellcheck disable=SC2086
    timeout -k 5 "$limit" ${OUTBOX_CLI_WRAPPER:-} "$OUTBOX" relay "$@" >"$OUT" 2>"$ERR"
    RC=$?
}

# whole_lines FILE: every line of the sink file is one whole CloudEvent.
whole_lines() {
    local file=$1 n bad
    n=$(wc -l <"$file")
    # A torn line lacks its end; two glued lines hold two specversions.
    bad=$(grep -cvE '^\{"specversion":"1\.0","id":"[^"]+",.*\}$' "$file")
    bad=$((bad + $(grep -c '"specversion".*"specversion"' "$file")))
    if command -v jq >/dev/null 2>&1; then
        bad=$((bad + $(jq -R -r 'try (fromjson | if type == "object" then "ok" else "bad" end) catch "bad"' \
            "$file" | grep -c bad)))
    fi
    if [ -s "$file" ] && [ "$(tail -c 1 "$file" | od -An -tx1 | tr -d ' ')" != 0a ]; then
        bad=$((bad + 1))
        echo "$file does not end in a newline"
    fi
    if [ "$bad" -ne 0 ]; then
        fail "$file: $bad torn or malformed lines of $n"
        return 1
    fi
    pass "$file: all $n lines are whole CloudEvents"
}

# ids_in_file FILE: the CloudEvents id of every line, sorted (repeats kept).
ids_in_file() {
    sed -n 's/^{"specversion":"1\.0","id":"\([^"]*\)".*/\1/p' "$1" | sort
}

# one_error_line PATTERN: stderr ($ERR) holds exactly one line that is the
# command's error (no timestamp), and it matches PATTERN (grep -E).
one_error_line() {
    local errors
    errors=$(grep -cE '^outbox: [a-z]' "$ERR")
    if [ "$errors" -ne 1 ]; then
        fail "expected one error line on stderr, found $errors: $(head -c 2000 "$ERR")"
    elif ! grep -E '^outbox: [a-z]' "$ERR" | grep -Eq -- "$1"; then
        fail "the error line does not match /$1/: $(grep -E '^outbox: [a-z]' "$ERR")"
    else
        pass "error line: $(grep -E '^outbox: [a-z]' "$ERR")"
    fi
}
