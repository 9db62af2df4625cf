#!/usr/bin/env bash
# Read-only commands on a database the user may only read: stats and
# schema check open the store read-only, so they work and leave the file
# and its directory exactly as they were (no -wal or -shm file, no change
# of journal mode). Root ignores file permissions, so as root the commands
# run as user nobody.
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"

as_reader=()
if [ "$(id -u)" -eq 0 ]; then
    if ! command -v setpriv >/dev/null 2>&1 || ! id nobody >/dev/null 2>&1; then
        skip "running as root without setpriv or user nobody" "install util-linux's setpriv, or run as a user"
    fi
    group=$(id -gn nobody)
    as_reader=(setpriv --reuid=nobody --regid="$group" --clear-groups)
    chmod 0711 "$TMP" # nobody may pass through, not list or write
fi

# reader ARGS...: runs outbox as the reader, like run.
reader() {
    # shellcheck disable=SC2086
    "${as_reader[@]}" ${OUTBOX_CLI_WRAPPER:-} "$OUTBOX" "$@" >"$OUT" 2>"$ERR"
    RC=$?
}

# The database is made in a rollback-journal mode: a read-write open would
# switch it to WAL, which writes the file header and makes -wal and -shm.
mkdir "$TMP/ro"
db=$TMP/ro/outbox.db
outbox schema apply --store "sqlite://$db" --yes-i-know >/dev/null 2>"$ERR" || fail "schema apply: $(cat "$ERR")"
outbox stage --store "sqlite://$db" --route r --type t --count 3 >/dev/null 2>"$ERR" || fail "stage: $(cat "$ERR")"
sqlite3 "$db" "PRAGMA journal_mode=DELETE" >/dev/null
chmod 0444 "$db"
chmod 0555 "$TMP/ro"
before=$(ls -A "$TMP/ro" | tr '\n' ' ')
sum=$(cksum <"$db")

# Make sure the permissions really bind the reader (they would not for root).
if "${as_reader[@]}" sh -c ": >>'$db'" 2>/dev/null; then
    fail "the reader can still write the database: this test would prove nothing"
fi

reader stats --store "sqlite://$db" --json
if [ "$RC" -eq 0 ] && [ "$(json_field pending "$OUT")" = 3 ]; then
    pass "stats on a read-only database: $(cat "$OUT")"
else
    fail "stats on a read-only database: exit $RC, $(cat "$ERR")"
fi

reader schema check --store "sqlite://$db"
[ "$RC" -eq 0 ] && pass "schema check on a read-only database: $(cat "$OUT")" ||
    fail "schema check on a read-only database: exit $RC, $(cat "$OUT" "$ERR")"

after=$(ls -A "$TMP/ro" | tr '\n' ' ')
[ "$after" = "$before" ] && pass "no file created beside the database ($after)" ||
    fail "files beside the database: before [$before], after [$after]"
[ "$(cksum <"$db")" = "$sum" ] && pass "the database file is unchanged" || fail "the database file changed"
[ "$(sqlite3 "$db" "PRAGMA journal_mode")" = delete ] && pass "journal mode still delete" ||
    fail "journal mode changed to $(sqlite3 "$db" "PRAGMA journal_mode")"

# A command that writes still says clearly that it cannot.
reader stage --store "sqlite://$db" --route r --type t
[ "$RC" -ne 0 ] && [ "$(wc -l <"$ERR")" -eq 1 ] && pass "stage on a read-only database fails: $(cat "$ERR")" ||
    fail "stage on a read-only database: exit $RC, $(cat "$ERR")"

# schema check on a file that does not exist creates nothing.
reader schema check --store "sqlite://$TMP/ro/none.db"
[ "$RC" -eq 2 ] && [ ! -e "$TMP/ro/none.db" ] && pass "schema check on a missing file: $(cat "$ERR")" ||
    fail "schema check on a missing file: exit $RC, $(cat "$ERR")"

# A database in WAL mode, as the driver leaves it, with no -wal or -shm
# file beside it (the last connection removed them) in a directory the
# reader cannot write: SQLite cannot make the -shm file it reads through.
chmod 0755 "$TMP/ro"
mkdir "$TMP/wal"
dbw=$TMP/wal/outbox.db
outbox schema apply --store "sqlite://$dbw" --yes-i-know >/dev/null 2>"$ERR" || fail "schema apply: $(cat "$ERR")"
outbox stage --store "sqlite://$dbw" --route r --type t --count 4 >/dev/null 2>"$ERR" || fail "stage: $(cat "$ERR")"
[ "$(sqlite3 "$dbw" "PRAGMA journal_mode")" = wal ] || fail "the driver did not leave the file in WAL mode"
chmod 0444 "$dbw"
chmod 0555 "$TMP/wal"
before=$(ls -A "$TMP/wal" | tr '\n' ' ')
sum=$(cksum <"$dbw")
reader stats --store "sqlite://$dbw" --json
if [ "$RC" -eq 0 ] && [ "$(json_field pending "$OUT")" = 4 ]; then
    pass "stats on a read-only WAL database: $(cat "$OUT")"
else
    fail "stats on a read-only WAL database: exit $RC, $(cat "$ERR")"
fi
reader schema check --store "sqlite://$dbw"
[ "$RC" -eq 0 ] && pass "schema check on a read-only WAL database" ||
    fail "schema check on a read-only WAL database: exit $RC, $(cat "$OUT" "$ERR")"
after=$(ls -A "$TMP/wal" | tr '\n' ' ')
[ "$after" = "$before" ] && [ "$(cksum <"$dbw")" = "$sum" ] && pass "the WAL database and its directory are unchanged" ||
    fail "WAL database: before [$before], after [$after]"

chmod 0755 "$TMP/ro" "$TMP/wal"
finish
