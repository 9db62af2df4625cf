#!/usr/bin/env bash
# The status page's dead letters in a real browser: headless Chromium,
# driven through the DevTools Protocol (dead_letters_browser.py), trusting
# only the relay's key (its SPKI hash), loads a route's dead-letter page
# over HTTPS with basic authentication and clicks one row's replay button
# with mouse events at the button's centre. Checks: the click POSTs the
# form and lands, through a 303, on the page showing the result; the relay
# then publishes that event (the sink, outbox stats). Then, in the same
# browser session (credentials cached), a page of another origin
# (python3 -m http.server) submits a forged replay form to the relay: the
# relay answers 403, the event stays dead, and the log says why.
#
#   dead_letters_browser.sh OUTBOX_CLI
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
need_cmd curl curl
need_cmd python3 python3
need_cmd chromium chromium

T=$TMP/tls
"$SERVICES/tls.sh" make "$T" >/dev/null || { fail "making the test certificates"; finish; }
PW=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
new_db db
S=sqlite://$DB
SINK=$TMP/sink.jsonl
expect 0 stage --store "$S" --route orders --type order.created --count 5
# Their attempts are spent: the relay dead-letters them at the first claim.
sql "UPDATE outbox SET attempts = 3" || fail "could not spend the rows' attempts"
LOG=$TMP/relay.log
for _ in 1 2 3 4 5; do
    PORT=$(private_port)
    URL=https://localhost:$PORT
    # shellcheck disable=SC2086
    OUTBOX_METRICS_PASSWORD=$PW ${OUTBOX_CLI_WRAPPER:-} "$OUTBOX" relay --store "$S" --route orders \
        --sink "file://$SINK" --max-attempts 3 --poll 50ms --metrics-listen "127.0.0.1:$PORT" \
        --metrics-tls-cert "$T/server.pem" --metrics-tls-key "$T/server.key" --metrics-user prom 2>>"$LOG" &
    PID=$!
    PIDS="$PIDS $PID"
    _up() { curl -fs --cacert "$T/ca.pem" "$URL/healthz" >/dev/null 2>&1; }
    wait_until 15 _up && break
    stop_process "$PID" KILL
    grep -q "Address already in use" "$LOG" || { fail "the relay did not serve: $(tail -2 "$LOG")"; finish; }
done
_dead() { [ "$(stats_of "$S" --route orders)" = "0 0 0 5" ]; }
wait_until 15 _dead || { fail "the 5 rows did not die: $(stats_of "$S" --route orders)"; finish; }
expect 0 dead list --store "$S" --route orders --json
mapfile -t IDS < <(python3 -c 'import json,sys; [print(e["event_id"]) for e in json.load(open(sys.argv[1]))["events"]]' "$OUT")
CLICK=${IDS[2]}
FORGED=${IDS[3]}

# The other origin: a page that posts a replay form to the relay on load,
# with a token it made up (it cannot read the real one).
mkdir "$TMP/evil"
cat >"$TMP/evil/forge.html" <<HTML
<!DOCTYPE html><html><body>
<form id="f" method="post" action="$URL/routes/orders/dead/replay">
<input type="hidden" name="csrf" value="0123456789abcdef0123456789abcdef">
<input type="hidden" name="event_id" value="$FORGED">
</form><script>document.getElementById("f").submit();</script>
</body></html>
HTML
for _ in 1 2 3 4 5; do
    EVIL_PORT=$(private_port)
    background evil python3 -m http.server "$EVIL_PORT" --bind 127.0.0.1 --directory "$TMP/evil" >/dev/null
    EVIL_PID=$BG_PID
    _evil_up() { curl -fs "http://127.0.0.1:$EVIL_PORT/forge.html" >/dev/null 2>&1; }
    wait_until 10 _evil_up && break
    stop_process "$EVIL_PID" KILL
done

spki=$(openssl x509 -in "$T/server.pem" -pubkey -noout | openssl pkey -pubin -outform der |
    openssl dgst -sha256 -binary | base64)
timeout 120 python3 "$(dirname "$0")/dead_letters_browser.py" "$(command -v chromium)" "$TMP/chromium" "$spki" \
    "https://prom:$PW@localhost:$PORT/routes/orders/dead" "$CLICK" \
    "http://127.0.0.1:$EVIL_PORT/forge.html" >"$TMP/cdp.json" 2>"$TMP/cdp.err" ||
    fail "the DevTools client failed: $(tail -3 "$TMP/cdp.err")"
echo "chromium saw: $(cat "$TMP/cdp.json")"
# v KEY: a value of the client's JSON object, as JSON.
v() { python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1])).get(sys.argv[2])))' "$TMP/cdp.json" "$1"; }
[ "$(v error)" = null ] || fail "the browser session: $(v error)"
check "chromium loads the dead page with the credentials" 200 "$(v page_status)"
check "chromium: the page's rows and buttons" "5 5" "$(v rows) $(v buttons)"
check "the click POSTs the row's form" "\"$URL/routes/orders/dead/replay\"" "$(v click_post)"
check "the POST answers 303" "[303]" "$(v click_redirects)"
check "the browser lands on the dead page with the result" \
    "\"/routes/orders/dead?done=replayed%201%3A%20event%20$CLICK\" 200" "$(v after_click_url) $(v after_click_status)"
check "the page shows the result" "\"replayed 1: event $CLICK\"" "$(v done)"
_published() { [ "$(stats_of "$S" --route orders)" = "0 0 1 4" ]; }
wait_until 15 _published && pass "outbox stats: 0 0 1 4 (pending processing published dead)" ||
    fail "after the click: $(stats_of "$S" --route orders), expected 0 0 1 4"
check "the sink holds the clicked event" "$CLICK" "$(ids_in_file "$SINK")"
has "$LOG" "info: relay orders: dead letters: user prom from 127\\.0\\.0\\.1 replayed event $CLICK: 1 replayed" \
    "the click is logged with the user"

check "the forged cross-site form is answered 403" 403 "$(v forge_status)"
check "the forged request was a POST from the other origin" "\"POST\" \"http://127.0.0.1:$EVIL_PORT\"" \
    "$(v forge_method) $(v forge_origin)"
[ "$(v forge_had_auth)" = true ] && pass "the browser sent its cached credentials with it (so only the CSRF checks stopped it)" ||
    fail "the forged request carried no credentials: the 403 proves nothing"
[ "$(v forge_had_cookie)" = false ] && pass "the token cookie (SameSite=Strict) did not go with it" ||
    fail "the token cookie went with a cross-site request"
grep -q '^"forbidden: not sent from this endpoint.s own page (its Origin is not this endpoint)' <<<"$(v forge_body)" && pass "the browser shows: $(v forge_body)" ||
    fail "the forged page shows: $(v forge_body)"
expect 0 dead list --store "$S" --route orders --json
grep -q "\"event_id\":\"$FORGED\"" "$OUT" && pass "the forged event $FORGED is still dead" ||
    fail "the forged event is no longer dead"
check "outbox stats after the forgery" "0 0 1 4" "$(stats_of "$S" --route orders)"
has "$LOG" "warning: relay orders: dead letters: refused a replay of event $FORGED by user prom from 127\\.0\\.0\\.1: not sent from this endpoint's own page \\(its Origin is not this endpoint\\)" \
    "the forgery is logged, refused"

stop_process "$EVIL_PID" TERM
stop_process "$PID" TERM
[ "$RC" = 0 ] && pass "the relay stops cleanly on SIGTERM" || fail "the relay exited $RC"
no_secret_in "$PW" "$LOG" "the relay's log"
no_secret_in "$PW" "$TMP/cdp.json" "what the DevTools client printed"
finish
