#!/usr/bin/env bash
# outbox routes, outbox stats by route and outbox dead list on SQLite:
# their text and JSON output, paging, and every bad input.
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"

new_db admin
db=$DB
S=sqlite://$db

# json EXPR: EXPR evaluated on the JSON in $OUT as `d`, printed.
json() {
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($1)" "$OUT"
}

# Empty table: no routes, totals only.
expect 0 routes --store "$S" && [ "$(wc -l <"$OUT")" -eq 1 ] && grep -q '^ROUTE ' "$OUT" &&
    pass "routes on an empty table: a header alone" || fail "routes on an empty table: $(cat "$OUT")"
expect 0 routes --store "$S" --json && [ "$(json 'd["routes"]')" = "[]" ] &&
    pass "routes --json on an empty table" || fail "routes --json on an empty table: $(cat "$OUT")"

expect 0 stage --store "$S" --route orders --type order.created --count 5
expect 0 stage --store "$S" --route bills --type bill.sent --count 2
expect 0 stage --store "$S" --route bills --type bill.sent --count 1 --key acct-1
expect 0 stage --store "$S" --route zeta --type z --count 1

# Settle by hand, as a relay would have: orders gets 4 dead rows (two of
# them with errors holding a newline, a tab and an escape byte), one
# published; bills one processing.
sqlite3 "$db" "UPDATE outbox SET status = 'dead', attempts = 3,
                 last_error = 'sink said: ' || char(10) || 'line 2' || char(9) || 'tab' || char(27) || '[31m'
               WHERE outbox_route = 'orders' AND id IN (SELECT id FROM outbox WHERE outbox_route = 'orders' ORDER BY id LIMIT 2);
               UPDATE outbox SET status = 'dead', attempts = 1, last_error = 'rejected'
               WHERE outbox_route = 'orders' AND status = 'pending' AND id IN (SELECT id FROM outbox WHERE outbox_route = 'orders' AND status = 'pending' ORDER BY id LIMIT 2);
               UPDATE outbox SET status = 'published', published_at = 1 WHERE outbox_route = 'orders' AND status = 'pending';
               UPDATE outbox SET status = 'processing', processing_at = 1, attempts = 1
               WHERE id = (SELECT id FROM outbox WHERE outbox_route = 'bills' ORDER BY id LIMIT 1);
               UPDATE outbox SET status = 'dead', last_error = 'other route' WHERE outbox_route = 'zeta';" ||
    fail "settling rows with sqlite3"

# routes: one line per route, sorted, with its counts.
expect 0 routes --store "$S"
row() { awk -v r="$1" '$1 == r {print $2, $3, $4, $5}' "$OUT"; }
[ "$(row orders)" = "0 0 1 4" ] && [ "$(row bills)" = "2 1 0 0" ] && [ "$(row zeta)" = "0 0 0 1" ] &&
    [ "$(sed -n '2p;3p;4p' "$OUT" | awk '{print $1}' | tr '\n' ' ')" = "bills orders zeta " ] &&
    pass "routes (text)" || fail "routes printed: $(cat "$OUT")"
expect 0 routes --store "$S" --json
got=$(json '" ".join("%s:%d/%d/%d/%d" % (r["route"], r["pending"], r["processing"], r["published"], r["dead"]) for r in d["routes"])')
[ "$got" = "bills:2/1/0/0 orders:0/0/1/4 zeta:0/0/0/1" ] && [ "$(wc -l <"$OUT")" -eq 1 ] &&
    pass "routes --json: $got" || fail "routes --json: $got ($(cat "$OUT"))"
age=$(json 'd["routes"][0]["oldest_pending_age_s"]')
[ -n "$age" ] && [ "$age" -ge 0 ] && pass "routes --json has oldest_pending_age_s" ||
    fail "routes --json: no age in $(cat "$OUT")"

# stats: without --route a table per route, then the totals as before.
expect 0 stats --store "$S"
[ "$(row bills)" = "2 1 0 0" ] && grep -q '^pending  *2$' "$OUT" && grep -q '^dead  *5$' "$OUT" &&
    pass "stats (text) by route, then totals" || fail "stats printed: $(cat "$OUT")"
stats_is "$db" 2 1 1 5
expect 0 stats --store "$S" --json
got=$(json '"%d %d %s" % (d["pending"], d["dead"], ",".join(r["route"] for r in d["routes"]))')
[ "$got" = "2 5 bills,orders,zeta" ] && pass "stats --json: totals and routes" ||
    fail "stats --json: $got ($(cat "$OUT"))"
# With --route: as before, no table and no routes key.
expect 0 stats --store "$S" --route bills
! grep -q '^ROUTE' "$OUT" && grep -q '^pending  *2$' "$OUT" && pass "stats --route: no table" ||
    fail "stats --route printed: $(cat "$OUT")"
expect 0 stats --store "$S" --route bills --json
[ "$(json '"routes" in d')" = False ] && pass "stats --route --json: no routes key" ||
    fail "stats --route --json: $(cat "$OUT")"

# dead list: text, one line per event, tab-separated, errors made printable.
expect 0 dead list --store "$S" --route orders
[ "$(wc -l <"$OUT")" -eq 4 ] && [ "$(awk -F'\t' '{print NF}' "$OUT" | sort -u)" = 7 ] &&
    pass "dead list: 4 lines of 7 fields" || fail "dead list printed: $(cat "$OUT")"
first=$(head -n 1 "$OUT")
want_err='sink said: \nline 2\ttab\x1b[31m'
[ "$(printf '%s' "$first" | cut -f7)" = "$want_err" ] && [ "$(printf '%s' "$first" | cut -f5)" = 3 ] &&
    [ "$(printf '%s' "$first" | cut -f4)" = - ] &&
    pass "dead list: escaped error, attempts, no key" || fail "dead list first line: $first"
printf '%s' "$first" | cut -f6 | grep -Eq '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z$' &&
    pass "dead list: created_at in RFC 3339" || fail "dead list created_at: $(printf '%s' "$first" | cut -f6)"
order=$(sqlite3 "$db" "SELECT id FROM outbox WHERE outbox_route = 'orders' AND status = 'dead' ORDER BY created_at, id" | tr '\n' ' ')
[ "$(cut -f1 "$OUT" | tr '\n' ' ')" = "$order" ] && pass "dead list: claim order" ||
    fail "dead list order: $(cut -f1 "$OUT" | tr '\n' ' '), expected $order"
ev=$(cut -f2 "$OUT" | tr '\n' ' ')
evw=$(sqlite3 "$db" "SELECT event_id FROM outbox WHERE outbox_route = 'orders' AND status = 'dead' ORDER BY created_at, id" | tr '\n' ' ')
[ "$ev" = "$evw" ] && pass "dead list: event ids" || fail "dead list event ids: $ev, expected $evw"

# JSON: the error byte for byte, next null on the last page.
expect 0 dead list --store "$S" --route orders --json
got=$(json '"%d %s %r %s %s" % (len(d["events"]), d["next"], d["events"][0]["last_error"], d["events"][0]["attempts"], d["events"][3]["last_error"])')
[ "$got" = "4 None 'sink said: \\nline 2\\ttab\\x1b[31m' 3 rejected" ] && pass "dead list --json: $got" ||
    fail "dead list --json: $got ($(cat "$OUT"))"
[ "$(json '" ".join(e["id"] for e in d["events"]) + " "')" = "$order" ] && pass "dead list --json: ids in order" ||
    fail "dead list --json ids: $(cat "$OUT")"

# Paging: 3 pages of at most 3, 3, ... by --after.
expect 0 dead list --store "$S" --route orders --limit 3 --json
p1=$(json '" ".join(e["id"] for e in d["events"])') next=$(json 'd["next"]')
last1=$(json 'd["events"][-1]["id"]')
[ "$(json 'len(d["events"])')" = 3 ] && [ "$next" = "$last1" ] && pass "page 1 of 3: next = its last id" ||
    fail "page 1: $(cat "$OUT")"
expect 0 dead list --store "$S" --route orders --limit 3 --after "$next" --json
p2=$(json '" ".join(e["id"] for e in d["events"])')
[ "$(json 'len(d["events"])')" = 1 ] && [ "$(json 'd["next"]')" = None ] && [ "$p1 $p2 " = "$order" ] &&
    pass "page 2: the rest, next null" || fail "page 2: $(cat "$OUT")"
expect 0 dead list --store "$S" --route orders --limit 2 --after "$last1"
[ "$(cut -f1 "$OUT")" = "$p2" ] && pass "text page after an id" || fail "text page after $last1: $(cat "$OUT")"
# UPPER case ids are the same id.
upper=$(printf '%s' "$last1" | tr a-f A-F)
expect 0 dead list --store "$S" --route orders --after "$upper" && [ "$(cut -f1 "$OUT")" = "$p2" ] &&
    pass "--after in upper case" || fail "--after $upper: $(cat "$OUT") $(cat "$ERR")"

# Nothing dead: nothing printed, exit 0; JSON an empty array.
expect 0 dead list --store "$S" --route bills && [ ! -s "$OUT" ] && pass "no dead events: nothing printed" ||
    fail "dead list of bills: $(cat "$OUT")"
expect 0 dead list --store "$S" --route nosuch --json &&
    [ "$(json '"%s %s" % (d["events"], d["next"])')" = "[] None" ] && pass "no dead events: empty JSON array" ||
    fail "dead list --json of nosuch: $(cat "$OUT")"

# Find dead events and replay them.
ids=$(outbox dead list --store "$S" --route orders --limit 2 | cut -f2)
for id in $ids; do
    expect 0 replay --store "$S" --route orders --event-id "$id" || break
done
stats_is "$db" 2 0 1 2 --route orders

# Bad input: one line on stderr, exit 2.
expect_error '^outbox: dead list: --route is required$' dead list --store "$S"
expect_error '^outbox: dead list: --store is required$' dead list --route orders
expect_error '^outbox: dead list: --route must not be empty' dead list --store "$S" --route ''
expect_error '^outbox: --limit: "0" ' dead list --store "$S" --route orders --limit 0
expect_error '^outbox: --limit: "10001" ' dead list --store "$S" --route orders --limit 10001
expect_error '^outbox: --limit: "abc" ' dead list --store "$S" --route orders --limit abc
expect_error '^outbox: --after: "nope" is not a UUID$' dead list --store "$S" --route orders --after nope
expect_error 'no row with id 01234567-89ab-7def-8123-456789abcdef on route orders' dead list --store "$S" --route orders --after 01234567-89ab-7def-8123-456789abcdef
expect_error '^outbox: dead: unknown action "show"' dead show --store "$S"
expect_error '^outbox: dead: say list' dead
expect_error 'unknown option --route for routes' routes --store "$S" --route x
expect_error '^outbox: routes: --store is required$' routes
expect_error 'option --json takes no value' routes --store "$S" --json=1
for cmd in "routes" "dead list --route orders"; do
    # shellcheck disable=SC2086
    expect_error '.' $cmd --store "sqlite://$TMP/never-created.db"
    [ ! -e "$TMP/never-created.db" ] && pass "$cmd did not create the database" ||
        fail "$cmd created $TMP/never-created.db"
done
expect_error 'not a valid relation name' routes --store "$S" --relation '1abc'
expect_error 'nope' dead list --store "$S" --relation nope --route orders
[ ! -s "$OUT" ] && pass "a failed dead list prints nothing on stdout" || fail "stdout: $(cat "$OUT")"

# Help.
expect 0 dead --help && grep -q '^usage: outbox dead list' "$OUT" && pass "dead --help" || fail "dead --help: $(cat "$OUT")"
expect 0 routes --help && grep -q '^usage: outbox routes' "$OUT" && pass "routes --help" || fail "routes --help"

finish
