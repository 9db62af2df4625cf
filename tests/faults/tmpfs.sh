# What the full-disk tests (tests/faults/full_*.sh) add to the harness,
# sourced after it: small tmpfs mounts under the test's own $TMP, unmounted
# at exit however the test ends (after its background processes are
# killed), and the checks of a command that met a full disk.
#
# Mounting needs root (or CAP_SYS_ADMIN). Where it is refused the tests
# skip, and fail under CI=true, where a skipped fault test would hide that
# the faults were never tried.

# mount_small NAME SIZE: a fresh tmpfs of SIZE (as mount -o size= takes it)
# at $TMP/NAME; its path in $MNT.
mount_small() {
    local dir=$TMP/$1
    mkdir -p "$dir" || exit 1
    mount -t tmpfs -o "size=$2,mode=0755" outbox-faults "$dir" 2>"$TMP/.mount.err" ||
        skip "cannot mount a $2 tmpfs ($(tr -s '\n ' ' ' <"$TMP/.mount.err"))" \
            "run the full-disk tests as root or with CAP_SYS_ADMIN"
    # Lazily when busy, so the mount never outlives the test.
    at_exit "umount '$dir' || umount -l '$dir'"
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

# gave_up WHAT: the relay_bounded run onto a full WHAT gave up in time,
# with exit status 2.
gave_up() {
    if [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ]; then
        fail "relay --until-idle onto a full $1 timed out: it never gave up"
    elif [ "$RC" -ne 2 ]; then
        fail "relay --until-idle onto a full $1 exited $RC, expected 2: $(head -c 2000 "$ERR")"
    else
        pass "relay --until-idle onto a full $1 exited 2"
    fi
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
