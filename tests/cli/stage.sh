#!/usr/bin/env bash
# stage: --count, payloads, stdin, and that a failure stages nothing.
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"

new_db stage

db=$DB
store=sqlite://$db

expect 0 stage --store "$store" --route orders --type order.created --count 3 &&
    grep -qx 'staged 3' "$OUT" && pass "stage --count 3" || fail "stage --count 3 printed: $(cat "$OUT")"
stats_is "$db" 3 0 0 0
stats_is "$db" 3 0 0 0 --route orders
stats_is "$db" 0 0 0 0 --route other
expect 0 stats --store "$store" --json
age=$(json_field oldest_pending_age_s "$OUT")
[ -n "$age" ] && pass "oldest_pending_age_s = $age" || fail "no oldest_pending_age_s in $(cat "$OUT")"
[ "$(wc -l <"$OUT")" -eq 1 ] || fail "stats --json printed more than one line"
expect 0 stats --store "$store" && grep -q '^pending  *3$' "$OUT" && pass "stats (text)" ||
    fail "stats printed: $(cat "$OUT")"

# Payload, type and key reach the row.
expect 0 stage --store "$store" --route orders --type order.paid --key cust-7 \
    --payload '{"amount": 12.5, "tags": ["a", "b"]}'
row=$(sqlite3 "$db" "SELECT event_type, ordering_key, json_extract(payload, '$.amount') FROM outbox WHERE event_type = 'order.paid'")
[ "$row" = "order.paid|cust-7|12.5" ] && pass "payload, type and key stored" || fail "stored row: $row"
stats_is "$db" 4 0 0 0

# One JSON document per stdin line, blank lines skipped.
printf '{"n":1}\n\n  \n[1,2,3]\n"just a string"\r\n{"n":4}' >"$TMP/good.jsonl"
expect 0 stage --store "$store" --route lines --type t --payload - <"$TMP/good.jsonl" &&
    grep -qx 'staged 4' "$OUT" && pass "stage --payload - (4 lines)" || fail "stage --payload - printed: $(cat "$OUT")"
stats_is "$db" 4 0 0 0 --route lines
got=$(sqlite3 "$db" "SELECT payload FROM outbox WHERE outbox_route = 'lines' ORDER BY id" | tr '\n' '|')
[ "$got" = '{"n":1}|[1,2,3]|"just a string"|{"n":4}|' ] && pass "stdin payloads in order" ||
    fail "stdin payloads stored as: $got"

# A bad line anywhere: exit 2, the line number named, nothing staged.
printf '{"n":1}\n{"n":2}\n\n{"n": oops}\n{"n":5}\n' >"$TMP/bad.jsonl"
run stage --store "$store" --route badlines --type t --payload - <"$TMP/bad.jsonl"
if [ "$RC" -eq 2 ] && grep -q '^outbox: .*line 4' "$ERR"; then
    pass "bad stdin line: $(cat "$ERR")"
else
    fail "bad stdin line: exit $RC, stderr $(cat "$ERR")"
fi
stats_is "$db" 0 0 0 0 --route badlines
echo '{"ok":true}' | outbox stage --store "$store" --route badlines --type t --payload - --count 2 >"$OUT" 2>"$ERR"
[ $? -eq 2 ] && grep -q '^outbox: .*--count' "$ERR" && pass "--count with --payload - refused" ||
    fail "--count with --payload - : $(cat "$ERR")"

# Empty stdin stages nothing and is not an error.
expect 0 stage --store "$store" --route empty --type t --payload - </dev/null &&
    grep -qx 'staged 0' "$OUT" && pass "empty stdin" || fail "empty stdin printed: $(cat "$OUT")"

# Refused payloads and routes leave nothing behind.
expect_error 'payload.*not valid JSON' stage --store "$store" --route orders --type t --payload '{"a":'
expect_error 'payload.*not valid JSON' stage --store "$store" --route orders --type t --payload ''
expect_error '--route must not be empty' stage --store "$store" --route '' --type t
expect_error 'stage: --type is required' stage --store "$store" --route orders
stats_is "$db" 4 0 0 0 --route orders

# --hlc needs the hlc column: an error on a plain table, a stamp with it.
expect_error 'hlc' stage --store "$store" --route orders --type t --hlc
hdb=$TMP/hlc.db
expect 0 schema apply --store "sqlite://$hdb" --yes-i-know --hlc
expect 0 stage --store "sqlite://$hdb" --route r --type t --hlc --count 2
n=$(sqlite3 "$hdb" "SELECT count(*) FROM outbox WHERE hlc > 0")
[ "$n" = 2 ] && pass "stage --hlc stamps rows" || fail "stage --hlc: $n rows stamped"

# The trace context and the extension ids reach the sink's CloudEvents
# (an upper-case UUID as given, lower-case as stored).
tdb=$TMP/trace.db
TP=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
expect 0 schema apply --store "sqlite://$tdb" --yes-i-know --traceparent
expect 0 stage --store "sqlite://$tdb" --route r --type t --count 2 --traceparent "$TP" \
    --tenant-id 0190A0E4-0000-7000-8000-000000000001 --correlation-id 0190a0e4-0000-7000-8000-000000000002 \
    --causation-id 0190a0e4-0000-7000-8000-000000000003 --execution-id 0190a0e4-0000-7000-8000-000000000004
expect 0 relay --store "sqlite://$tdb" --route r --sink "file://$TMP/trace.jsonl" --until-idle --quiet
want="\"traceparent\":\"$TP\",\"tenantid\":\"0190a0e4-0000-7000-8000-000000000001\",\"correlationid\":\"0190a0e4-0000-7000-8000-000000000002\",\"causationid\":\"0190a0e4-0000-7000-8000-000000000003\",\"executionid\":\"0190a0e4-0000-7000-8000-000000000004\""
[ "$(grep -cF "$want" "$TMP/trace.jsonl")" = 2 ] && pass "every event carries the trace context and the ids" ||
    fail "the events do not carry what was staged: $(head -1 "$TMP/trace.jsonl")"
expect_error '^outbox: --tenant-id: "nope" is not a UUID$' stage --store "sqlite://$tdb" --route r --type t --tenant-id nope
expect_error '^outbox: --causation-id: "" is not a UUID$' stage --store "sqlite://$tdb" --route r --type t --causation-id ''
expect_error 'traceparent "00-bad" is not W3C trace context' stage --store "sqlite://$tdb" --route r --type t --traceparent 00-bad
expect_error 'traceparent needs the traceparent column' stage --store "$store" --route r --type t --traceparent "$TP"
stats_is "$tdb" 0 0 2 0 --route r

finish
