#!/usr/bin/env bash
# outbox relay --metrics-listen: /metrics agrees with outbox stats, /healthz
# and /readyz answer, and bad listen addresses and metrics: sections are
# one-line errors before any route starts.
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"

need_cmd curl curl

# metric NAME ROUTE: the value of NAME{route="ROUTE"} in $TMP/scrape.
metric() {
    sed -n "s/^$1{route=\"$2\"} //p" "$TMP/scrape"
}

# ---------------------------------------------------------- bad inputs
new_db bad
expect_error 'metrics-listen .*port is required' relay --store "sqlite://$DB" --route r --sink null: \
    --metrics-listen 127.0.0.1
expect_error 'metrics-listen .*port must be a number' relay --store "sqlite://$DB" --route r --sink null: \
    --metrics-listen 127.0.0.1:notaport
expect_error 'metrics-listen .*port must be a number' relay --store "sqlite://$DB" --route r --sink null: \
    --metrics-listen 127.0.0.1:70000
expect_error 'metrics-listen .*host is missing' relay --store "sqlite://$DB" --route r --sink null: \
    --metrics-listen :9464
expect_error 'metrics listen .*cannot resolve host' relay --store "sqlite://$DB" --route r --sink null: \
    --metrics-listen no-such-host.invalid:9464 --until-idle
expect_error 'metrics listen .*cannot listen on 192\.0\.2\.1' relay --store "sqlite://$DB" --route r --sink null: \
    --metrics-listen 192.0.2.1:9464 --until-idle

F=$TMP/m.yaml
base=("stores: {main: {uri: \"sqlite://$DB\"}}" 'sinks: {out: {uri: "null:"}}' 'routes: {r: {store: main, sink: out}}')
printf '%s\n' "${base[@]}" 'metrics: {listen: "127.0.0.1"}' >"$F"
expect_error "^outbox: .*m\.yaml:4: metrics: listen .*port is required" config check "$F"
printf '%s\n' "${base[@]}" 'metrics: {listen: "127.0.0.1:9464", stats_interval: 0s}' >"$F"
expect_error "m\.yaml:4: metrics: stats_interval must be longer than 0" config check "$F"
printf '%s\n' "${base[@]}" 'metrics: {listen: "127.0.0.1:9464", stats_interval: soon}' >"$F"
expect_error "m\.yaml:4: metrics: stats_interval: " config check "$F"
printf '%s\n' "${base[@]}" 'metrics: {stats_interval: 1s}' >"$F"
expect_error "m\.yaml:4: metrics: listen is required" config check "$F"
printf '%s\n' "${base[@]}" 'metrics: {listen: "127.0.0.1:9464", port: 1}' >"$F"
expect_error "m\.yaml:4: metrics: unknown key \"port\"" config check "$F"
printf '%s\n' "${base[@]}" 'metrics: 127.0.0.1:9464' >"$F"
expect_error "m\.yaml:4: metrics must be a mapping" config check "$F"
printf '%s\n' "${base[@]}" 'metrics: {listen: "127.0.0.1:9464", stats_interval: 2s}' >"$F"
if expect 0 config check "$F"; then pass "config check takes a metrics: section"; fi

# ------------------------------------------ the scrape matches outbox stats
new_db scrape
S=sqlite://$DB
expect 0 stage --store "$S" --route alpha --type t --count 40
expect 0 stage --store "$S" --route beta --type t --count 30
# Ten of beta's rows have spent their attempts: the relay dead-letters them
# at claim ("attempts exhausted"), the same every run.
sqlite3 "$DB" "UPDATE outbox SET attempts = 3 WHERE outbox_route = 'beta' AND id IN
               (SELECT id FROM outbox WHERE outbox_route = 'beta' ORDER BY id LIMIT 10)" ||
    fail "could not mark beta's rows"
LOG=$TMP/relay.log
start_relay() { # CONFIG_FILE: starts the relay with metrics on a free port; PORT and PID
    for _ in 1 2 3 4 5; do
        PORT=$(private_port)
        # shellcheck disable=SC2086
        ${OUTBOX_CLI_WRAPPER:-} "$OUTBOX" relay --config "$1" --metrics-listen "127.0.0.1:$PORT" >"$LOG" 2>&1 &
        PID=$!
        for _ in $(seq 1 100); do
            curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && return 0
            kill -0 "$PID" 2>/dev/null || break
            sleep 0.1
        done
        wait "$PID" 2>/dev/null
        grep -q "Address already in use" "$LOG" || break
    done
    fail "relay with metrics did not start: $(head -c 400 "$LOG")"
    return 1
}
cat >"$F" <<YAML
stores: {main: {uri: "sqlite://$DB"}}
sinks: {out: {uri: "null:"}}
routes:
  alpha: {store: main, sink: out, poll: 20ms}
  beta: {store: main, sink: out, poll: 20ms, max_attempts: 3}
metrics: {listen: "127.0.0.1:1", stats_interval: 200ms}
YAML
if start_relay "$F"; then
    # Drained, and the stats poll has seen it (pending 0 on both).
    drained=0
    for _ in $(seq 1 300); do
        if curl -fs "http://127.0.0.1:$PORT/metrics" -o "$TMP/scrape" &&
            [ "$(metric outbox_pending_events alpha)" = 0 ] && [ "$(metric outbox_pending_events beta)" = 0 ]; then
            drained=1
            break
        fi
        sleep 0.1
    done
    [ $drained = 1 ] && pass "metrics: the pending gauge reaches 0 on both routes" ||
        fail "metrics never showed both routes drained: $(grep pending "$TMP/scrape")"
    curl -fs -D "$TMP/headers" "http://127.0.0.1:$PORT/metrics" -o "$TMP/scrape" || fail "scrape failed"
    grep -qi '^content-type: text/plain; version=0.0.4' "$TMP/headers" && pass "metrics: content type 0.0.4" ||
        fail "metrics content type: $(cat "$TMP/headers")"
    for r in alpha beta; do
        expect 0 stats --store "$S" --route "$r" --json
        for k in published dead; do
            want=$(json_field "$k" "$OUT")
            got=$(metric "outbox_events_${k}_total" "$r")
            [ "$got" = "$want" ] && pass "metrics $r ${k}_total $got = stats" ||
                fail "metrics $r outbox_events_${k}_total = '$got', outbox stats says $want"
        done
        [ "$(metric outbox_dead_events "$r")" = "$(json_field dead "$OUT")" ] && pass "metrics $r dead gauge = stats" ||
            fail "metrics $r dead gauge $(metric outbox_dead_events "$r") != $(json_field dead "$OUT")"
        got=$(sed -n "s/^outbox_commit_to_publish_lag_seconds_count{route=\"$r\"} //p" "$TMP/scrape")
        [ "$got" = "$(metric outbox_events_published_total "$r")" ] && pass "metrics $r: one lag sample per published row" ||
            fail "metrics $r: lag count $got"
    done
    [ "$(metric outbox_events_dead_total beta)" = 10 ] && pass "beta dead-lettered the 10 spent rows" ||
        fail "beta dead_total $(metric outbox_events_dead_total beta), expected 10"
    for h in HELP TYPE; do
        grep -q "^# $h outbox_claim_duration_seconds" "$TMP/scrape" || fail "no # $h for the claim histogram"
    done
    grep -q '^outbox_claim_duration_seconds_bucket{route="alpha",le="+Inf"} ' "$TMP/scrape" ||
        fail "no +Inf bucket"
    code=$(curl -s -o "$TMP/ready" -w '%{http_code}' "http://127.0.0.1:$PORT/readyz")
    [ "$code" = 200 ] && pass "readyz 200 with every route working" || fail "readyz $code: $(cat "$TMP/ready")"
    code=$(curl -s -o "$TMP/health" -w '%{http_code}' "http://127.0.0.1:$PORT/healthz")
    [ "$code" = 200 ] && grep -qx ok "$TMP/health" && pass "healthz 200 ok" || fail "healthz $code"
    curl -fs "http://127.0.0.1:$PORT/" -o "$TMP/page.html" || fail "status page failed"
    grep -q '<td class="name">alpha</td>' "$TMP/page.html" && grep -q '<td class="name">beta</td>' "$TMP/page.html" &&
        pass "status page has a row per route" || fail "status page: $(head -c 600 "$TMP/page.html")"
    # The status page in a real browser: each route's row against outbox stats.
    if command -v chromium >/dev/null; then
        if timeout 120 chromium --headless --no-sandbox --disable-gpu --user-data-dir="$TMP/chromium" \
            --dump-dom "http://127.0.0.1:$PORT/" >"$TMP/dom.html" 2>"$TMP/chromium.err"; then
            for r in alpha beta; do
                expect 0 stats --store "$S" --route "$r" --json
                row=$(grep -o "<tr class=\"route\" data-route=\"$r\">.*</tr>" "$TMP/dom.html")
                pe=$(sed -n 's/.*<td class="pending">\([0-9]*\)<.*/\1/p' <<<"$row")
                de=$(sed -n 's/.*<td class="dead">\([0-9]*\)<.*/\1/p' <<<"$row")
                [ -n "$row" ] && [ "$pe" = "$(json_field pending "$OUT")" ] && [ "$de" = "$(json_field dead "$OUT")" ] &&
                    pass "chromium: status row $r pending $pe dead $de = outbox stats" ||
                    fail "chromium: status row $r: '$row' vs $(cat "$OUT")"
            done
        else
            fail "chromium --dump-dom failed: $(tail -2 "$TMP/chromium.err")"
        fi
    else
        skip_part "the status page in headless Chromium: no chromium (the Debian package chromium)"
    fi
    # A second relay on the same port: a one-line error, before any route starts.
    expect_error "metrics listen cannot listen on 127\.0\.0\.1:$PORT: Address already in use" \
        relay --config "$F" --metrics-listen "127.0.0.1:$PORT"
    stop_process "$PID" TERM
    [ "$RC" = 0 ] && pass "relay with metrics stops cleanly on SIGTERM" || fail "relay exit $RC: $(tail -3 "$LOG")"
fi

finish
