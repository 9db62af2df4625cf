#!/usr/bin/env bash
# docs/examples/pg_stage.c: the business row and its event commit together
# on the application's own PGconn, and a rollback leaves neither.
. "$(dirname "$0")/../../harness/harness.sh"
use_outbox "$1"
pg_outbox example
PG_STAGE=$2
[ -x "$PG_STAGE" ] || { echo "FAIL: pg_stage example not built"; exit 1; }

pg_table "${4:-}"
q "CREATE TABLE $SCH.orders (id bigint PRIMARY KEY, status text NOT NULL);
   INSERT INTO $SCH.orders VALUES (1, 'new'), (2, 'new')" >/dev/null
# The example names plain "orders" and "outbox": search_path finds them.
case $URI in *\?*) SEP='&' ;; *) SEP='?' ;; esac
APP_URI="$URI${SEP}options=-csearch_path%3D$SCH"

out=$("$PG_STAGE" "$APP_URI" 1) || fail "pg_stage 1 failed: $out"
echo "$out"
check "order 1 paid" paid "$(q "SELECT status FROM $SCH.orders WHERE id = 1")"
check "order 1 event" 1 "$(q "SELECT count(*) FROM $REL WHERE event_type = 'order.paid' AND ordering_key = '1' AND payload->>'status' = 'paid'")"

out=$("$PG_STAGE" "$APP_URI" 2 --abort) || fail "pg_stage 2 --abort failed: $out"
echo "$out"
check "order 2 untouched" new "$(q "SELECT status FROM $SCH.orders WHERE id = 2")"
check "order 2 no event" 0 "$(q "SELECT count(*) FROM $REL WHERE ordering_key = '2'")"

out=$("$PG_STAGE" "$APP_URI" 99 2>&1) && fail "pg_stage on a missing order succeeded"
check "missing order leaves no event" 1 "$(q "SELECT count(*) FROM $REL")"
echo "$out" | grep -q "no such order" && pass "missing order: $out" || fail "missing order: $out"
finish
