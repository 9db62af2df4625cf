#!/usr/bin/env bash
# outbox config check: a good file is described route by route; every
# mistake is one line naming the file, the line and the problem, exit 2.
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"

F=$TMP/relay.yaml

# cfg LINES...: writes the lines to $F.
cfg() {
    printf '%s\n' "$@" >"$F"
}

good=(
    'node_key: relay-a'
    'checkpoint_table: outbox_ckpt'
    'stores:'
    '  main:'
    '    uri: sqlite://${OUTBOX_TEST_DB}'
    '    relation: outbox'
    'sinks:'
    '  out:'
    '    uri: "file://${OUTBOX_TEST_DIR}/out.jsonl"'
    '  secret:'
    '    uri: stdout:?token=${OUTBOX_TEST_TOKEN}'
    'routes:'
    '  orders:'
    '    store: main'
    '    sink: out'
    '    destination: "orders.{route}"'
    '    batch: 250'
    '    pipeline: 3'
    '    workers: 2'
    '    max_attempts: 5'
    '    lease: 10s'
    '    poll: 50ms'
    '    backoff_base: 0s'
    '    backoff_cap: 1m'
    '    hlc: false'
    '    require_transaction: yes'
    '  audit: {store: main, sink: secret}'
)
export OUTBOX_TEST_DB=$TMP/app.db OUTBOX_TEST_DIR=$TMP OUTBOX_TEST_TOKEN=hunter2-not-shown
cfg "${good[@]}"
if expect 0 config check "$F"; then
    grep -q "^$F: 1 store, 2 sinks, 2 routes: ok$" "$OUT" && pass "a good file: $(tail -1 "$OUT")" ||
        fail "a good file's summary: $(cat "$OUT")"
    grep -q "^route orders: store main (sqlite://$TMP/app.db) -> sink out (file://$TMP/out.jsonl), batch 250 (pipeline of 3), 2 workers$" "$OUT" &&
        pass "the route is described with its values" || fail "route line: $(cat "$OUT")"
    grep -q "^route audit: .*batch 100 (pipeline of 4), 1 worker$" "$OUT" && pass "defaults fill what a route leaves out" ||
        fail "defaults: $(cat "$OUT")"
    if grep -q hunter2 "$OUT" "$ERR"; then fail "a secret from the environment was printed"; else pass "the token is masked"; fi
fi
expect 0 config --help && grep -q 'usage: outbox config check FILE' "$OUT" && pass "config --help" ||
    fail "config --help: $(cat "$OUT")"

# bad LINE PATTERN LINES...: the file holding LINES is refused on line LINE
# (0: no line) with a message matching PATTERN.
bad() {
    local line=$1 pattern=$2
    shift 2
    cfg "$@"
    if [ "$line" = 0 ]; then
        expect_error "^outbox: $F: $pattern" config check "$F"
    else
        expect_error "^outbox: $F:$line: $pattern" config check "$F"
    fi
}
S='stores: {main: {uri: "sqlite:///tmp/x.db"}}'
K='sinks: {out: {uri: "stdout:"}}'

# The command line.
expect_error 'expected "check FILE"' config
expect_error 'expected "check FILE"' config lint "$F"
expect_error 'expected one FILE' config check
expect_error 'expected one FILE' config check "$F" "$F"
expect_error "^outbox: $TMP/none.yaml: cannot open: No such file or directory$" config check "$TMP/none.yaml"
expect_error "^outbox: $TMP: " config check "$TMP"

# Not YAML, or not the right shape.
bad 0 'the file is empty' ''
bad 3 'did not find expected' 'stores:' '  main: [uri: x' '  : :'
bad 1 'the file must be a mapping' '- a' '- b'
bad 1 'unknown key "store"' 'store: {}' "$K"
bad 0 'no stores: the file must declare at least one' "$K" 'routes: {r: {store: main, sink: out}}'
bad 0 'no routes' "$S" "$K"
bad 1 'stores is empty' 'stores: {}' "$K" 'routes: {r: {store: main, sink: out}}'
bad 1 'stores must be a mapping' 'stores: [a, b]' "$K" 'routes: {r: {store: main, sink: out}}'
bad 5 '"r" is given twice' "$S" "$K" 'routes:' '  r: {store: main, sink: out}' '  r: {store: main, sink: out}'

# Stores and sinks.
bad 1 'store main has no uri' 'stores: {main: {relation: outbox}}' "$K" 'routes: {r: {store: main, sink: out}}'
bad 1 'store main: unknown key "url" \(uri, relation\)' 'stores: {main: {url: x}}' "$K" 'routes: {r: {store: main, sink: out}}'
bad 1 'store main: uri "no-scheme" has no scheme' 'stores: {main: {uri: no-scheme}}' "$K" 'routes: {r: {store: main, sink: out}}'
bad 1 'store main: uri "//admin:\*\*\*@host/db" has no scheme' 'stores: {main: {uri: "//admin:s3cret@host/db"}}' "$K" 'routes: {r: {store: main, sink: out}}'
bad 1 'store main: relation "bad-name" is not a table' 'stores: {main: {uri: "sqlite:///x", relation: bad-name}}' "$K" 'routes: {r: {store: main, sink: out}}'
bad 1 'store main: uri must be a single value' 'stores: {main: {uri: [a]}}' "$K" 'routes: {r: {store: main, sink: out}}'
bad 1 'store name "m a" may hold only letters' 'stores: {"m a": {uri: "sqlite:///x"}}' "$K" 'routes: {r: {store: main, sink: out}}'
bad 2 'sink out has no uri' "$S" 'sinks: {out: {}}' 'routes: {r: {store: main, sink: out}}'
bad 2 'sink out: unknown key "topic" \(uri\)' "$S" 'sinks: {out: {uri: "stdout:", topic: t}}' 'routes: {r: {store: main, sink: out}}'
bad 2 'a sink must be a mapping' "$S" 'sinks: {out: "stdout:"}' 'routes: {r: {store: main, sink: out}}'

# Routes.
bad 3 'route r has no store' "$S" "$K" 'routes: {r: {sink: out}}'
bad 3 'route r has no sink' "$S" "$K" 'routes: {r: {store: main}}'
bad 3 'route r: no store is named "other" under stores' "$S" "$K" 'routes: {r: {store: other, sink: out}}'
bad 3 'route r: no sink is named "kafka" under sinks' "$S" "$K" 'routes: {r: {store: main, sink: kafka}}'
bad 3 'route r: unknown key "batches"' "$S" "$K" 'routes: {r: {store: main, sink: out, batches: 3}}'
bad 3 'route r: batch must be a whole number from 1 to 100000, not "0"' "$S" "$K" 'routes: {r: {store: main, sink: out, batch: 0}}'
bad 3 'route r: batch must be a whole number .* not "-5"' "$S" "$K" 'routes: {r: {store: main, sink: out, batch: -5}}'
bad 3 'route r: batch must be a whole number .* not "1e3"' "$S" "$K" 'routes: {r: {store: main, sink: out, batch: 1e3}}'
bad 3 'route r: batch must be a whole number .* not "99999999999999999999999"' "$S" "$K" 'routes: {r: {store: main, sink: out, batch: 99999999999999999999999}}'
bad 3 'route r: workers must be a whole number from 1 to 64, not "65"' "$S" "$K" 'routes: {r: {store: main, sink: out, workers: 65}}'
bad 3 'route r: pipeline must be a whole number from 1 to 16, not "17"' "$S" "$K" 'routes: {r: {store: main, sink: out, pipeline: 17}}'
bad 3 'route r: pipeline must be a whole number .* not "0"' "$S" "$K" 'routes: {r: {store: main, sink: out, pipeline: 0}}'
bad 3 'route r: max_attempts must be a whole number' "$S" "$K" 'routes: {r: {store: main, sink: out, max_attempts: many}}'
bad 3 'route r: lease: ' "$S" "$K" 'routes: {r: {store: main, sink: out, lease: 30}}'
bad 3 'route r: lease must be longer than 0' "$S" "$K" 'routes: {r: {store: main, sink: out, lease: 0s}}'
bad 3 'route r: poll: ' "$S" "$K" 'routes: {r: {store: main, sink: out, poll: soon}}'
bad 3 'route r: hlc must be true or false, not "maybe"' "$S" "$K" 'routes: {r: {store: main, sink: out, hlc: maybe}}'
bad 3 'route r: require_transaction must be true or false' "$S" "$K" 'routes: {r: {store: main, sink: out, require_transaction: 1}}'
bad 3 'a route must be a mapping' "$S" "$K" 'routes: {r: main}'
bad 1 'checkpoint_table "x;y" is not a table name' 'checkpoint_table: "x;y"' "$S" "$K" 'routes: {r: {store: main, sink: out}}'

# ${NAME} substitution.
unset OUTBOX_TEST_UNSET
bad 1 'store main: uri: the environment variable OUTBOX_TEST_UNSET is not set' 'stores: {main: {uri: "sqlite://${OUTBOX_TEST_UNSET}"}}' "$K" 'routes: {r: {store: main, sink: out}}'
bad 1 'store main: uri: "\$\{" starts no variable name' 'stores: {main: {uri: "sqlite://${OPEN"}}' "$K" 'routes: {r: {store: main, sink: out}}'
bad 1 'store main: uri: "1X" is not an environment variable name' 'stores: {main: {uri: "sqlite://${1X}"}}' "$K" 'routes: {r: {store: main, sink: out}}'
cfg 'stores: {main: {uri: "sqlite:///tmp/$$x.db"}}' "$K" 'routes: {r: {store: main, sink: out}}'
expect 0 config check "$F" && grep -q 'sqlite:///tmp/\$x.db' "$OUT" && pass '$$ is a literal $' ||
    fail "\$\$: $(cat "$OUT" "$ERR")"

# Drivers: each URI's scheme is served by a driver of the right kind.
bad 1 'store main: no driver on the driver path serves nosuch: \(outbox drivers lists them\)$' 'stores: {main: {uri: "nosuch://x"}}' "$K" 'routes: {r: {store: main, sink: out}}'
bad 1 'store main: stdout: is a sink scheme, not a store one' 'stores: {main: {uri: "stdout:"}}' "$K" 'routes: {r: {store: main, sink: out}}'
bad 2 'sink out: sqlite: is a store scheme, not a sink one' "$S" 'sinks: {out: {uri: "sqlite:///x"}}' 'routes: {r: {store: main, sink: out}}'

# outbox relay --config: two routes of one store to two sinks at once, each
# route's events to its own sink only, every event once.
db=$TMP/two.db
expect 0 schema apply --store "sqlite://$db" --yes-i-know
expect 0 stage --store "sqlite://$db" --route orders --type t --count 120
expect 0 stage --store "sqlite://$db" --route audit --type t --count 80
cfg 'stores:' "  app: {uri: \"sqlite://$db\"}" 'sinks:' \
    "  a: {uri: \"file://$TMP/orders.jsonl\"}" "  b: {uri: \"file://$TMP/audit.jsonl\"}" \
    'routes:' '  orders: {store: app, sink: a, batch: 7}' '  audit: {store: app, sink: b, batch: 5}'
if expect 0 relay --config "$F" --until-idle; then
    [ "$(wc -l <"$TMP/orders.jsonl")" = 120 ] && [ "$(wc -l <"$TMP/audit.jsonl")" = 80 ] &&
        pass "each route published its own events to its own sink" ||
        fail "lines: orders $(wc -l <"$TMP/orders.jsonl"), audit $(wc -l <"$TMP/audit.jsonl")"
    if [ "$(grep -c '"source":"/outbox/orders"' "$TMP/orders.jsonl")" = 120 ] &&
        [ "$(grep -c '"source":"/outbox/audit"' "$TMP/audit.jsonl")" = 80 ]; then
        pass "no event crossed to the other route's sink"
    else
        fail "events crossed sinks: $(grep -c '/outbox/audit' "$TMP/orders.jsonl") audit events in orders"
    fi
    grep -q '^outbox: relay orders: claimed 120, published 120' "$ERR" &&
        grep -q '^outbox: relay audit: claimed 80, published 80' "$ERR" &&
        pass "one summary line per route" || fail "summaries: $(cat "$ERR")"
    expect 0 stats --store "sqlite://$db" --json &&
        grep -q '"published":200' "$OUT" && pass "all 200 published in the store" || fail "stats: $(cat "$OUT")"
fi
# SIGTERM while both routes work: exit 0, nothing left in processing, and a
# later run publishes the rest, each event once.
expect 0 stage --store "sqlite://$db" --route orders --type t --count 3000
expect 0 stage --store "sqlite://$db" --route audit --type t --count 3000
cfg 'stores:' "  app: {uri: \"sqlite://$db\"}" 'sinks:' \
    "  a: {uri: \"file://$TMP/orders.jsonl\"}" "  b: {uri: \"file://$TMP/audit.jsonl\"}" \
    'routes:' '  orders: {store: app, sink: a, batch: 5}' '  audit: {store: app, sink: b, batch: 5}'
${OUTBOX_CLI_WRAPPER:-} "$OUTBOX" relay --config "$F" >"$TMP/term.out" 2>"$TMP/term.err" &
pid=$!
for _ in $(seq 1 300); do
    [ "$(cat "$TMP/orders.jsonl" "$TMP/audit.jsonl" | wc -l)" -gt 400 ] && break
    sleep 0.05
done
stop_process "$pid" TERM
processing=$(sqlite3 "$db" "SELECT count(*) FROM outbox WHERE status = 'processing'")
if [ "$RC" -eq 0 ] && [ "$processing" = 0 ]; then
    pass "SIGTERM with two routes: exit 0, nothing in processing"
else
    fail "SIGTERM with two routes: exit $RC, $processing in processing; $(head -c 300 "$TMP/term.err")"
fi
grep -q '^outbox: relay orders: claimed' "$TMP/term.err" && grep -q '^outbox: relay audit: claimed' "$TMP/term.err" &&
    pass "SIGTERM: a summary per route" || fail "SIGTERM summaries: $(cat "$TMP/term.err")"
expect 0 relay --config "$F" --until-idle --quiet
for want in orders:3120 audit:3080; do
    r=${want%%:*}
    n=$(grep -c "\"source\":\"/outbox/$r\"" "$TMP/$r.jsonl")
    d=$(sed -n 's/^{"specversion":"1\.0","id":"\([^"]*\)".*/\1/p' "$TMP/$r.jsonl" | sort | uniq -d | wc -l)
    if [ "$n" = "${want#*:}" ] && [ "$d" -eq 0 ]; then
        pass "$r: all ${want#*:} events published across the stop, none twice"
    else
        fail "$r: $n lines (expected ${want#*:}), $d duplicates"
    fi
done

expect_error 'relay: --config FILE takes the routes, stores and sinks from the file' relay --config "$F" --batch 3
expect_error "^outbox: relay: --config: $TMP/none.yaml: cannot open" relay --config "$TMP/none.yaml"
cfg "$S" "$K" 'routes: {r: {store: main, sink: out, batch: 0}}'
expect_error "^outbox: relay: --config: $F:3: route r: batch must be" relay --config "$F" --until-idle

# The metrics: section (the relay's HTTP endpoints; tests/cli/metrics.sh runs them).
R='routes: {r: {store: main, sink: out}}'
bad 4 'metrics: listen "127.0.0.1": expected HOST:PORT' "$S" "$K" "$R" 'metrics: {listen: "127.0.0.1"}'
bad 4 'metrics: listen ".*": the port must be a number' "$S" "$K" "$R" 'metrics: {listen: "h:0"}'
bad 4 'metrics: stats_interval must be longer than 0' "$S" "$K" "$R" 'metrics: {listen: "h:1", stats_interval: 0s}'
bad 4 'metrics: unknown key "interval"' "$S" "$K" "$R" 'metrics: {listen: "h:1", interval: 1s}'
bad 4 'metrics: listen is required' "$S" "$K" "$R" 'metrics: {}'
bad 4 'metrics must be a mapping' "$S" "$K" "$R" 'metrics: [a]'
bad 1 'unknown key "metric" .*metrics, tracing\)' 'metric: {}' "$S" "$K" "$R"

finish
