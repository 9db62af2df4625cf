#!/usr/bin/env bash
# A PostgreSQL store URI with a password (in the user info, as ?password=,
# or in a key=value string): the relay's log shows the URI with the password
# masked, and no line of any command, log or error, shows the password.
. "$(dirname "$0")/../../harness/harness.sh"
use_outbox "$1"
pg_outbox secrets

pg_table "${4:-}"
TS='[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z'
SECRET=s3cretPW

# The test server trusts local connections, so a password is sent only when
# asked for: these URIs connect, and carry a password all the same.
case $URI in
*://*@*) with_info=$(echo "$URI" | sed "s#://\([^:@/]*\)@#://\1:$SECRET@#") ;;
*) with_info=$(echo "$URI" | sed "s#://#://outbox:$SECRET@#") ;;
esac
case $URI in
*\?*) with_param="$URI&password=$SECRET" ;;
*) with_param="$URI?password=$SECRET" ;;
esac
host=$(q "SELECT coalesce(host(inet_server_addr()), '')")
[ -n "$host" ] || host=${OUTBOX_PG_SOCKET:-/var/run/postgresql}
kv="postgres:host=$host port=$(q "SELECT current_setting('port')") user=$(q "SELECT current_user") password='$SECRET' dbname=$(q "SELECT current_database()")"

shown_info=$(echo "$with_info" | sed "s#:$SECRET@#:***@#")
shown_param=$(echo "$with_param" | sed "s#password=$SECRET#password=***#")

i=0
for store in "$with_info" "$with_param" "$kv"; do
    i=$((i + 1))
    "$OUTBOX" stage --store "$store" --relation "$REL" --route r$i --type t --count 3 >/dev/null 2>"$TMP/stage.err" ||
        fail "stage on URI $i: $(cat "$TMP/stage.err")"
    "$OUTBOX" relay --verbose --store "$store" --relation "$REL" --route r$i --sink "file:$TMP/out.jsonl" \
        --until-idle 2>"$TMP/relay$i.err"
    check "relay on URI $i" 0 $?
    no_secret_in "$SECRET" "$TMP/relay$i.err" "relay --verbose on URI $i"
    "$OUTBOX" stats --store "$store" --relation nope_$SCH 2>"$TMP/err$i.err"
    check "stats of a missing table on URI $i" 2 $?
    no_secret_in "$SECRET" "$TMP/err$i.err" "the error on URI $i"
    "$OUTBOX" relay --store "$store" --relation "$REL" --route r$i --sink "file:$TMP/no/such/dir.jsonl" \
        --until-idle 2>"$TMP/sinkerr$i.err"
    check "relay to a sink that cannot open, URI $i" 2 $?
    no_secret_in "$SECRET" "$TMP/sinkerr$i.err" "the sink error on URI $i"
done

# The start line shows each URI as given, its password masked.
grep -Eq "^outbox: $TS info: relay r1: starting 1 worker: store $(printf '%s' "$shown_info" | sed 's/[][\.*^$?+(){}|/]/\\&/g') \(postgres\)" "$TMP/relay1.err" &&
    pass "start line: $(grep 'starting' "$TMP/relay1.err")" || fail "start line with the user info password: $(cat "$TMP/relay1.err")"
grep -Eq "^outbox: $TS info: relay r2: starting 1 worker: store $(printf '%s' "$shown_param" | sed 's/[][\.*^$?+(){}|/]/\\&/g') \(postgres\)" "$TMP/relay2.err" &&
    pass "start line: $(grep 'starting' "$TMP/relay2.err")" || fail "start line with ?password=: $(cat "$TMP/relay2.err")"
grep -q "info: relay r3: starting 1 worker: store postgres:host=.* password=\*\*\* dbname=" "$TMP/relay3.err" &&
    pass "start line: $(grep 'starting' "$TMP/relay3.err")" || fail "start line with password='...': $(cat "$TMP/relay3.err")"
# The missing table's error says how to make it, with the password masked.
# (quoted: a shell would expand the *)
grep -qF "create it with \`outbox schema apply --store '$shown_info' --relation nope_$SCH --yes-i-know\`" "$TMP/err1.err" &&
    pass "missing table: $(cat "$TMP/err1.err")" || fail "missing table: $(cat "$TMP/err1.err")"
check "published" 9 "$(q "SELECT count(*) FROM $REL WHERE status = 'published'")"
finish
