#!/usr/bin/env bash
# relay end to end into the file and stdout sinks, with one and three
# workers, graceful stop on SIGTERM, then replay and purge.
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"

N=10000

# ids_in_db DB ROUTE: every event_id of the route, sorted.
ids_in_db() {
    sqlite3 "$1" "SELECT event_id FROM outbox WHERE outbox_route = '$2'" | sort
}

# delivered_exactly DB ROUTE FILE: every staged id in FILE exactly once.
delivered_exactly() {
    local db=$1 route=$2 file=$3 lines uniq
    lines=$(wc -l <"$file")
    uniq=$(ids_in_file "$file" | uniq | wc -l)
    ids_in_file "$file" >"$TMP/file.ids"
    ids_in_db "$db" "$route" >"$TMP/db.ids"
    if [ "$lines" -ne "$N" ] || [ "$uniq" -ne "$N" ]; then
        fail "$file: $lines lines, $uniq distinct ids, expected $N each"
    elif ! cmp -s "$TMP/file.ids" "$TMP/db.ids"; then
        fail "$file: ids differ from the database: $(diff "$TMP/file.ids" "$TMP/db.ids" | head -n 5)"
    else
        pass "$file: the $N staged ids, each once"
    fi
    if command -v jq >/dev/null 2>&1; then
        jq -e 'select(.specversion == "1.0" and .type == "order.created" and .source == "/outbox/'"$route"'"
                      and .datacontenttype == "application/json" and .data.n == 1 and (.time | test("Z$")))' \
            "$file" >/dev/null 2>&1 && [ "$(jq -c 'select(.data.n == 1)' "$file" | wc -l)" -eq "$N" ] &&
            pass "$file: every line is a CloudEvent" || fail "$file: lines are not the expected CloudEvents: $(head -n 1 "$file")"
    fi
}

# --- one worker ---------------------------------------------------------------
new_db one
db=$DB
expect 0 stage --store "sqlite://$db" --route orders --type order.created --count $N --payload '{"n":1}'
expect 0 stage --store "sqlite://$db" --route other --type x --count 5
stats_is "$db" $N 0 0 0 --route orders
expect 0 relay --store "sqlite://$db" --route orders --sink "file://$TMP/one.jsonl" --until-idle
grep -q "^outbox: relay orders: claimed $N, published $N, retried 0, dead 0" "$ERR" &&
    pass "relay summary: $(cat "$ERR")" || fail "relay summary: $(cat "$ERR")"
delivered_exactly "$db" orders "$TMP/one.jsonl"
stats_is "$db" 0 0 $N 0 --route orders
stats_is "$db" 5 0 0 0 --route other
expect 0 stats --store "sqlite://$db" --route orders --json
[ "$(json_field oldest_pending_age_s "$OUT")" = 0 ] && pass "oldest_pending_age_s is 0 with nothing pending" ||
    fail "oldest_pending_age_s with nothing pending: $(cat "$OUT")"

# Nothing left: a second run publishes nothing, and --quiet says nothing.
expect 0 relay --store "sqlite://$db" --route orders --sink "file://$TMP/one.jsonl" --until-idle --quiet
[ -s "$ERR" ] && fail "relay --quiet wrote: $(cat "$ERR")"
[ "$(wc -l <"$TMP/one.jsonl")" -eq $N ] && pass "second relay published nothing" || fail "second relay appended lines"

# --- three workers, relative file: path ---------------------------------------
new_db three
db3=$DB
expect 0 stage --store "sqlite://$db3" --route orders --type order.created --count $N --payload '{"n":1}'
(cd "$TMP" && outbox relay --store "sqlite://$db3" --route orders --sink file:three.jsonl \
    --until-idle --workers 3 --batch 50) >"$OUT" 2>"$ERR"
[ $? -eq 0 ] && pass "relay --workers 3: $(cat "$ERR")" || fail "relay --workers 3: $(cat "$ERR")"
delivered_exactly "$db3" orders "$TMP/three.jsonl"
stats_is "$db3" 0 0 $N 0

# --- a pipeline of four batches, keys ----------------------------------------------
new_db piped
dbp=$DB
expect 0 stage --store "sqlite://$dbp" --route orders --type order.created --count $N --payload '{"n":1}' --key k1
outbox relay --store "sqlite://$dbp" --route orders --sink "file://$TMP/piped.jsonl" \
    --until-idle --pipeline 4 --batch 50 >"$OUT" 2>"$ERR"
[ $? -eq 0 ] && pass "relay --pipeline 4: $(cat "$ERR")" || fail "relay --pipeline 4: $(cat "$ERR")"
delivered_exactly "$dbp" orders "$TMP/piped.jsonl"
stats_is "$dbp" 0 0 $N 0
# One key: the file holds its events in staging (id) order.
sed -n 's/^{"specversion":"1\.0","id":"\([^"]*\)".*/\1/p' "$TMP/piped.jsonl" >"$TMP/piped.ids"
sqlite3 "$dbp" "SELECT event_id FROM outbox WHERE outbox_route = 'orders' ORDER BY id" >"$TMP/piped.want"
cmp -s "$TMP/piped.ids" "$TMP/piped.want" && pass "one key through a pipeline: staging order" ||
    fail "one key through a pipeline: out of order: $(diff "$TMP/piped.ids" "$TMP/piped.want" | head -n 3)"

# --- stdout sink ----------------------------------------------------------------
new_db stdout
dbs=$DB
expect 0 stage --store "sqlite://$dbs" --route r --type t --count 7 --key k
expect 0 relay --store "sqlite://$dbs" --route r --sink stdout: --until-idle --quiet \
    --source 'urn:test:{route}' --destination 'topic-{route}'
[ "$(grep -c '"source":"urn:test:r"' "$OUT")" -eq 7 ] && grep -q '"partitionkey":"k"' "$OUT" &&
    pass "stdout sink: 7 events, source template and key" || fail "stdout sink printed: $(head -n 2 "$OUT")"
stats_is "$dbs" 0 0 7 0

# --- graceful stop in mid-flight ---------------------------------------------------
G=20000
new_db graceful
dbg=$DB
expect 0 stage --store "sqlite://$dbg" --route r --type t --count $G
# Run directly, not through the outbox function, so $! is the relay itself.
# shellcheck disable=SC2086
${OUTBOX_CLI_WRAPPER:-} "$OUTBOX" relay --store "sqlite://$dbg" --route r --sink "file://$TMP/graceful.jsonl" --batch 10 \
    --workers 2 >"$TMP/graceful.out" 2>"$TMP/graceful.err" &
pid=$!
# Publishing proves the handlers are in place (they are installed before the
# workers start); stop in mid-flight.
wait_for_lines "$TMP/graceful.jsonl" 1000 || fail "the relay published nothing"
stop_process "$pid" TERM
[ "$RC" -eq 0 ] && grep -q '^outbox: relay r: claimed' "$TMP/graceful.err" &&
    pass "SIGTERM: exit 0, $(cat "$TMP/graceful.err")" || fail "SIGTERM: exit $RC, $(cat "$TMP/graceful.err")"
expect 0 stats --store "sqlite://$dbg" --json
pe=$(json_field pending "$OUT") pr=$(json_field processing "$OUT") pu=$(json_field published "$OUT")
lines=$(wc -l <"$TMP/graceful.jsonl")
if [ "$pr" != 0 ] || [ $((pe + pu)) -ne $G ] || [ "$pu" -gt "$lines" ] || [ "$pe" -eq 0 ]; then
    fail "after SIGTERM: pending $pe, processing $pr, published $pu, lines written $lines"
else
    pass "after SIGTERM: pending $pe, processing 0, published $pu, lines written $lines"
fi
expect 0 relay --store "sqlite://$dbg" --route r --sink "file://$TMP/graceful.jsonl" --until-idle --quiet
stats_is "$dbg" 0 0 $G 0
ids_in_file "$TMP/graceful.jsonl" | uniq >"$TMP/file.ids"
ids_in_db "$dbg" r >"$TMP/db.ids"
cmp -s "$TMP/file.ids" "$TMP/db.ids" && pass "stop and restart: every id delivered" ||
    fail "stop and restart: delivered ids differ from the database"

# SIGINT on a relay that is waiting for work.
expect 0 stage --store "sqlite://$dbg" --route idle --type t
# shellcheck disable=SC2086
${OUTBOX_CLI_WRAPPER:-} "$OUTBOX" relay --store "sqlite://$dbg" --route idle --sink "file://$TMP/idle.jsonl" --quiet &
pid=$!
wait_for_lines "$TMP/idle.jsonl" 1 || fail "the idle relay published nothing"
sleep 0.3
stop_process "$pid" INT
[ "$RC" -eq 0 ] && pass "SIGINT on an idle relay: exit 0" || fail "SIGINT on an idle relay: exit $RC"
stats_is "$dbg" 0 0 1 0 --route idle

# --- a sink that cannot write -------------------------------------------------------
# Every write fails (ENOSPC): each batch is retried, the relay's breaker backs
# off without charging attempts, nothing is lost and nothing is left claimed.
if [ -w /dev/full ]; then
    new_db full
    dbf=$DB
    expect 0 stage --store "sqlite://$dbf" --route r --type t --count 50
    # shellcheck disable=SC2086
    ${OUTBOX_CLI_WRAPPER:-} "$OUTBOX" relay --store "sqlite://$dbf" --route r --sink file:///dev/full --poll 10ms \
        --backoff-base 10ms --backoff-cap 50ms >"$TMP/full.out" 2>"$TMP/full.err" &
    pid=$!
    # Signal only once the relay has met the outage, which is after its
    # handlers are installed.
    wait_until 30 lines_match "$TMP/full.err" '^outbox: [0-9T:.-]*Z warning: relay r: sink unavailable'
    stop_process "$pid" TERM
    rc=$RC
    [ "$rc" -eq 0 ] && pass "relay into /dev/full stops cleanly: $(tail -n 1 "$TMP/full.err")" ||
        fail "relay into /dev/full: exit $rc, $(cat "$TMP/full.err")"
    stats_is "$dbf" 50 0 0 0
    charged=$(sqlite3 "$dbf" "SELECT count(*) FROM outbox WHERE attempts <> 0")
    [ "$charged" = 0 ] && pass "a sink outage charges no attempts" || fail "$charged rows charged attempts during the outage"
    last=$(sqlite3 "$dbf" "SELECT DISTINCT last_error FROM outbox WHERE last_error IS NOT NULL")
    [ -z "$last" ] || echo "note: last_error after the outage: $last"
fi

# --- replay ------------------------------------------------------------------------
sqlite3 "$db" "UPDATE outbox SET status = 'dead', last_error = 'boom', published_at = NULL
               WHERE id IN (SELECT id FROM outbox WHERE outbox_route = 'orders' ORDER BY id LIMIT 3)"
stats_is "$db" 0 0 $((N - 3)) 3 --route orders
one=$(sqlite3 "$db" "SELECT event_id FROM outbox WHERE status = 'dead' ORDER BY id LIMIT 1")
expect 0 replay --store "sqlite://$db" --route orders --event-id "$one" &&
    grep -qx 'replayed 1' "$OUT" && pass "replay --event-id" || fail "replay --event-id printed: $(cat "$OUT")"
stats_is "$db" 1 0 $((N - 3)) 2 --route orders
[ "$(sqlite3 "$db" "SELECT attempts FROM outbox WHERE event_id = '$one'")" = 0 ] ||
    fail "replay did not reset attempts"
run replay --store "sqlite://$db" --route orders --event-id "$one"
[ "$RC" -eq 1 ] && grep -qx "outbox: no dead event $one" "$ERR" && pass "replay of a row that is not dead: exit 1" ||
    fail "replay of a row that is not dead: exit $RC, $(cat "$ERR")"
expect 0 replay --store "sqlite://$db" --route other --all-dead && grep -qx 'replayed 0' "$OUT" ||
    fail "replay --all-dead on another route: $(cat "$OUT")"
expect 0 replay --store "sqlite://$db" --all-dead && grep -qx 'replayed 2' "$OUT" &&
    pass "replay --all-dead" || fail "replay --all-dead printed: $(cat "$OUT")"
stats_is "$db" 3 0 $((N - 3)) 0 --route orders
expect_error 'exactly one of --event-id' replay --store "sqlite://$db" --all-dead --event-id "$one"
expect_error 'exactly one of --event-id' replay --store "sqlite://$db"
expect_error 'event-id: "nope" is not a UUID' replay --store "sqlite://$db" --event-id nope
expect 0 relay --store "sqlite://$db" --route orders --sink "file://$TMP/one.jsonl" --until-idle --quiet
stats_is "$db" 0 0 $N 0 --route orders

# --- purge -------------------------------------------------------------------------
expect 0 purge --store "sqlite://$db" --published-before 1h && grep -qx 'purged 0' "$OUT" &&
    pass "purge: nothing older than 1h" || fail "purge --published-before 1h printed: $(cat "$OUT")"
sqlite3 "$db" "UPDATE outbox SET published_at = published_at - 7200000000
               WHERE id IN (SELECT id FROM outbox WHERE status = 'published' ORDER BY id LIMIT 10)"
expect 0 purge --store "sqlite://$db" --route other --published-before 1h && grep -qx 'purged 0' "$OUT" ||
    fail "purge on another route: $(cat "$OUT")"
expect 0 purge --store "sqlite://$db" --route orders --published-before 1h && grep -qx 'purged 10' "$OUT" &&
    pass "purge --published-before 1h removed 10" || fail "purge printed: $(cat "$OUT")"
stats_is "$db" 0 0 $((N - 10)) 0 --route orders
stats_is "$db" 5 0 0 0 --route other
expect_error 'published-before is required' purge --store "sqlite://$db"
expect_error 'needs a unit' purge --store "sqlite://$db" --published-before 7

finish
