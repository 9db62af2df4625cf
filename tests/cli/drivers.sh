#!/usr/bin/env bash
# How the CLI finds drivers: `outbox drivers` runs no init(), duplicates on
# the path are reported and the first wins, and what is not a regular file
# is refused or skipped without blocking.
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"

modules=${OUTBOX_TEST_MODULES:?OUTBOX_TEST_MODULES is not set}
run drivers
file_so=$(awk '$1 == "file" && $2 == "sink" { print $NF }' "$OUT")
sqlite_so=$(awk '$1 == "sqlite" && $2 == "store" { print $NF }' "$OUT")
[ -n "$file_so" ] || fail "drivers does not list the file sink: $(cat "$OUT")"

# Listing reads every module but runs none of their init().
marker=$TMP/init-ran
OUTBOX_TEST_INIT_MARKER=$marker OUTBOX_DRIVER_PATH=$modules run drivers
if [ "$RC" -ne 0 ]; then
    fail "drivers on the test modules exited $RC: $(cat "$ERR")"
elif ! grep -q '^marker ' "$OUT"; then
    fail "drivers does not list the marker module: $(cat "$OUT")"
elif [ -e "$marker" ]; then
    fail "drivers ran a driver's init(): $(cat "$marker")"
else
    pass "drivers lists the marker module without running its init()"
fi

# The same driver twice on the path: both listed, the first used, a warning
# on stderr that names both, exit 0.
mkdir -p "$TMP/first" "$TMP/second"
cp "$file_so" "$TMP/first/"
cp "$file_so" "$TMP/second/"
want="$TMP/second/sink-file.so: warning: duplicate sink driver \"file\" in $TMP/first/sink-file.so and $TMP/second/sink-file.so: using $TMP/first/sink-file.so, the first on the driver path"
OUTBOX_DRIVER_PATH=$TMP/first:$TMP/second run drivers
if [ "$RC" -ne 0 ]; then
    fail "drivers with a duplicate exited $RC"
elif ! grep -qF "outbox: drivers: $want" "$ERR"; then
    fail "drivers did not warn about the duplicate as expected: $(cat "$ERR")"
elif [ "$(grep -c '^file ' "$OUT")" -ne 2 ]; then
    fail "drivers should list both copies: $(cat "$OUT")"
else
    pass "drivers warns about a duplicate: $(cat "$ERR")"
fi

# Chosen by name, the first copy is used and the log says so, once.
if [ -n "$sqlite_so" ]; then
    cp "$sqlite_so" "$TMP/first/"
    cp "$sqlite_so" "$TMP/second/"
    OUTBOX_DRIVER_PATH=$TMP/first:$TMP/second run schema print --store sqlite
    want="warning: duplicate store driver \"sqlite\" in $TMP/first/store-sqlite.so and $TMP/second/store-sqlite.so: using $TMP/first/store-sqlite.so, the first on the driver path"
    # A log line: "outbox: TIMESTAMP warning: ...".
    if [ "$RC" -ne 0 ]; then
        fail "schema print with a duplicate sqlite exited $RC: $(cat "$ERR")"
    elif [ "$(wc -l <"$ERR")" -ne 1 ] || [ "$(sed -E 's/^outbox: [0-9T:.-]+Z //' "$ERR")" != "$want" ]; then
        fail "schema print should log one warning, got: $(cat "$ERR")"
    elif ! grep -q 'CREATE TABLE' "$OUT"; then
        fail "schema print with a duplicate printed no DDL"
    else
        pass "choosing a duplicated driver logs: $(cat "$ERR")"
    fi
fi

# Nothing that is not a regular file reaches the dynamic loader: a FIFO
# would block it, a directory made libltdl abort. Each run has a time limit.
mkdir -p "$TMP/fifo"
mkfifo "$TMP/fifo/store-x.so"
saved_wrapper=${OUTBOX_CLI_WRAPPER:-}
OUTBOX_CLI_WRAPPER="timeout 60 $saved_wrapper"
OUTBOX_DRIVER_PATH=$TMP/fifo:${OUTBOX_DRIVER_PATH:-} run drivers
if [ "$RC" -eq 124 ]; then
    fail "drivers hung on a FIFO on the driver path"
elif [ "$RC" -ne 0 ]; then
    fail "drivers with a FIFO on the path exited $RC: $(cat "$ERR")"
elif ! grep -qF "outbox: drivers: $TMP/fifo/store-x.so: skipped: not a regular file (a FIFO)" "$ERR"; then
    fail "drivers did not say it skipped the FIFO: $(cat "$ERR")"
elif ! grep -q '^file ' "$OUT"; then
    fail "drivers with a FIFO on the path no longer lists the file sink"
else
    pass "drivers skips a FIFO: $(cat "$ERR")"
fi
expect_error "driver file $TMP/fifo/store-x.so is not a regular file \(a FIFO\)" \
    conformance --driver "$TMP/fifo/store-x.so" --uri sqlite::memory:
OUTBOX_DRIVER_PATH=$TMP/fifo expect_error 'no driver named x on the driver path.*1 module on the driver path could not be read' \
    conformance --driver x --uri sqlite::memory:
expect_error 'driver file / is not a regular file \(a directory\)' conformance --driver / --uri sqlite::memory:
expect_error "driver file $TMP/none.so does not exist" conformance --driver "$TMP/none.so" --uri sqlite::memory:
printf 'This text file is named like a driver module but is none; it is longer than an ELF header.\n' >"$TMP/text.so"
expect_error "$TMP/text.so: cannot load: (invalid ELF header|Exec format error)" \
    conformance --driver "$TMP/text.so" --uri sqlite::memory:
OUTBOX_CLI_WRAPPER=$saved_wrapper

finish
