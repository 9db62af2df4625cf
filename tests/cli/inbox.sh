#!/usr/bin/env bash
# outbox schema --inbox and outbox inbox stats|purge on SQLite: the inbox
# table is created and checked with the schema, stats count each
# consumer's records with the age of its oldest and newest, purge deletes
# only records older than the cut (of one consumer or all) and says how
# many; a store without the table, and bad options, are one line each.
#
#   inbox.sh OUTBOX_CLI
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
need_cmd sqlite3 sqlite3

new_db plain
expect 1 schema check --store "sqlite://$DB" --inbox
has "$OUT" '^missing table outbox_inbox$' "schema check --inbox names the missing inbox table"
expect_error 'no inbox table outbox_inbox: create it with `outbox schema apply --inbox`' \
    inbox stats --store "sqlite://$DB"
expect 0 schema apply --store "sqlite://$DB" --inbox --yes-i-know
expect 0 schema check --store "sqlite://$DB" --inbox
has "$OUT" 'schema of outbox is valid' "schema check --inbox after apply"
expect 0 schema print --store sqlite --inbox
has "$OUT" 'PRIMARY KEY \(consumer, event_id\)' "schema print --inbox shows the unique key"

# Records as the library writes them: received_at in microseconds.
now=$(($(date +%s) * 1000000))
day=$((86400 * 1000000))
sql "INSERT INTO outbox_inbox (consumer, event_id, received_at) VALUES
     ('billing', 'e1', $((now - 40 * day))), ('billing', 'e2', $((now - 10 * day))),
     ('billing', 'e3', $((now - 3600 * 1000000))), ('shipping', 'e1', $((now - 50 * day)))"
expect 0 inbox stats --store "sqlite://$DB"
has "$OUT" '^billing +3 +345[0-9]{4} +36[0-9]{2}$' "stats: billing has 3 records, oldest 40 days, newest an hour"
has "$OUT" '^shipping +1 +43[0-9]{5} +43[0-9]{5}$' "stats: shipping has 1 record of 50 days"
expect 0 inbox stats --store "sqlite://$DB" --consumer shipping --json
has "$OUT" '^\{"consumers": \[\{"consumer": "shipping", "records": 1, "oldest_age_s": 43[0-9]{5}, "newest_age_s": 43[0-9]{5}\}\]\}$' \
    "stats --consumer --json: shipping alone"

expect 0 inbox purge --store "sqlite://$DB" --older-than 30d --consumer billing
has "$OUT" '^purged 1$' "purge of billing older than 30 days deletes e1 of billing only"
[ "$(sql "SELECT group_concat(consumer || '/' || event_id, ' ') FROM (SELECT * FROM outbox_inbox ORDER BY consumer, event_id)")" = "billing/e2 billing/e3 shipping/e1" ] &&
    pass "shipping's 50-day record stays" || fail "left: $(sql "SELECT consumer, event_id FROM outbox_inbox")"
expect 0 inbox purge --store "sqlite://$DB" --older-than 1d
has "$OUT" '^purged 2$' "purge of every consumer older than a day"
[ "$(sql "SELECT consumer || '/' || event_id FROM outbox_inbox")" = "billing/e3" ] &&
    pass "the hour-old record stays" || fail "left: $(sql "SELECT consumer, event_id FROM outbox_inbox")"

# A named inbox table.
expect 0 schema apply --store "sqlite://$DB" --inbox-relation handled --yes-i-know
expect 0 inbox stats --store "sqlite://$DB" --inbox-relation handled
has "$OUT" '^CONSUMER +RECORDS' "stats of an empty named inbox: the header alone"
[ "$(wc -l <"$OUT")" = 1 ] && pass "no consumer in the named inbox" || fail "stats: $(cat "$OUT")"

# Bad input: one line, exit 2, nothing changed.
before=$(sql "SELECT count(*) FROM outbox_inbox")
expect_error 'inbox purge: --older-than is required' inbox purge --store "sqlite://$DB"
expect_error 'older-than' inbox purge --store "sqlite://$DB" --older-than 0s
expect_error 'older-than' inbox purge --store "sqlite://$DB" --older-than soon
expect_error '--consumer must not be empty' inbox stats --store "sqlite://$DB" --consumer ''
expect_error 'unknown option --older-than for inbox stats' inbox stats --store "sqlite://$DB" --older-than 1d
expect_error 'unknown option --json for inbox purge' inbox purge --store "sqlite://$DB" --older-than 1d --json
expect_error 'inbox: unknown action "list" \(stats or purge\)' inbox list --store "sqlite://$DB"
expect_error 'inbox: say stats or purge' inbox
expect_error 'consumer' inbox purge --store "sqlite://$DB" --older-than 1d --consumer "$(printf 'a\tb')"
expect_error '--inbox-relation: "no-such;table" is not a valid relation name' inbox stats --store "sqlite://$DB" --inbox-relation 'no-such;table'
[ "$(sql "SELECT count(*) FROM outbox_inbox")" = "$before" ] && pass "the bad commands changed nothing" ||
    fail "records changed: $before -> $(sql "SELECT count(*) FROM outbox_inbox")"

# The shipped timer's service, its command line run as systemd would
# expand it (the store from its environment file), on this database.
units=$(dirname "$0")/../../tools/systemd
grep -q '^OnCalendar=daily$' "$units/outbox-inbox-purge.timer" &&
    grep -q '^Type=oneshot$' "$units/outbox-inbox-purge.service" &&
    pass "the shipped timer runs the oneshot purge daily" || fail "tools/systemd/outbox-inbox-purge.* are not what the docs say"
sql "INSERT INTO outbox_inbox (consumer, event_id, received_at) VALUES ('billing', 'old', $((now - 31 * day)))"
exec_start=$(sed -n 's/^ExecStart=//p' "$units/outbox-inbox-purge.service")
read -ra argv <<<"${exec_start//\${OUTBOX_INBOX_STORE\}/sqlite://$DB}"
[ "${argv[0]}" = /usr/local/bin/outbox ] || fail "ExecStart runs ${argv[0]}"
expect 0 "${argv[@]:1}"
has "$OUT" '^purged 1$' "the unit's ExecStart purges the 31-day-old record and keeps the rest"

# The shipped SQL, run by hand (twice: it says it is safe to run again), is
# the schema the driver checks.
shipped=$(dirname "$0")/../../sql/sqlite
new_db shipped
for n in 1 2; do
    if out=$(sqlite3 "$DB" <"$shipped/outbox.sql" 2>&1 && sqlite3 "$DB" <"$shipped/inbox.sql" 2>&1); then
        pass "sql/sqlite/outbox.sql and inbox.sql apply (run $n)"
    else
        fail "sql/sqlite run $n: $out"
    fi
done
expect 0 schema check --store "sqlite://$DB" --inbox
has "$OUT" 'schema of outbox is valid' "schema check --inbox after the shipped files"

# sql/mongo/inbox.js (mongosh is not here to run it) makes what the Mongo
# driver makes: its statements are the driver's, line for line.
if outbox drivers | grep -q "^mongo  *store"; then
    expect 0 schema print --store mongo --inbox
    n=0
    while IFS= read -r line; do
        n=$((n + 1))
        grep -qxF "$line" "$OUT" || fail "sql/mongo/inbox.js: not what the driver prints: $line"
    done < <(grep '^db\.' "$(dirname "$0")/../../sql/mongo/inbox.js")
    [ "$n" = 3 ] && pass "sql/mongo/inbox.js: its $n statements are the driver's" ||
        fail "sql/mongo/inbox.js has $n statements, expected 3"
fi
finish
