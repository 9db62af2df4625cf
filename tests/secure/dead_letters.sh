#!/usr/bin/env bash
# The status page's dead letters (/routes/ROUTE/dead), checked with curl
# against `outbox relay` on an SQLite store and the file sink, the metrics
# endpoint on TLS with basic authentication (tools/services/tls.sh's
# certificates).
#
# 60 events of route orders die at their first claim (their attempts are
# spent before the relay starts: max attempts 3, attempts 3), three of them
# with a hostile ordering key and type, one given a hostile last error.
# Checks, in three runs of the relay:
#  - a user without TLS, then TLS without a user: the pages are read-only
#    (the sentence saying why, no form, no button, no cookie) and every
#    POST is a 403 that changes nothing;
#  - TLS and a user: 401 without or with a wrong password; the pages list
#    exactly the rows `outbox dead list --json` lists, in its order, 50 and
#    then 10 through the next-page link; the hostile texts are escaped and
#    control bytes shown as \xNN; a route this relay does not serve is a
#    404; GET on an action is a 405; a POST without the token, without the
#    cookie, with a token the server never issued, with another Origin,
#    another Referer or Sec-Fetch-Site cross-site is a 403 and changes
#    nothing; replaying one event with a proper POST answers 303 to the
#    page with the result, and the relay publishes that event (sink,
#    outbox stats); replay all needs its confirmation, then every event is
#    published; each action and refusal is a log line naming the user, and
#    the log never shows the password or a token.
#
#   dead_letters.sh OUTBOX_CLI
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
need_cmd curl curl
need_cmd python3 python3

T=$TMP/tls
"$SERVICES/tls.sh" make "$T" >/dev/null || { fail "making the test certificates"; finish; }
PW=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
new_db dl
S=sqlite://$DB
SINK=$TMP/sink.jsonl
HKEY='<img src=x onerror=alert(1)>"&'"'"
expect 0 stage --store "$S" --route orders --type order.created --count 57
expect 0 stage --store "$S" --route orders --type 'order.<i>odd</i>' --key "$HKEY" --count 3
expect 0 stage --store "$S" --route other --type t --count 2
sql "UPDATE outbox SET attempts = 3" || fail "could not spend the rows' attempts"
TLS=(--metrics-tls-cert "$T/server.pem" --metrics-tls-key "$T/server.key")

# serve LOG SCHEME ARGS...: a relay on route orders with the metrics
# endpoint on a private port (SCHEME http or https); PID, PORT and URL.
serve() {
    local log=$TMP/$1.log scheme=$2
    shift 2
    for _ in 1 2 3 4 5; do
        PORT=$(private_port)
        URL=$scheme://localhost:$PORT
        # shellcheck disable=SC2086
        OUTBOX_METRICS_PASSWORD=$PW ${OUTBOX_CLI_WRAPPER:-} "$OUTBOX" relay --store "$S" --route orders \
            --sink "file://$SINK" --max-attempts 3 --poll 50ms --log-format logfmt \
            --metrics-listen "127.0.0.1:$PORT" "$@" 2>>"$log" &
        PID=$!
        PIDS="$PIDS $PID"
        _up() { curl -fs --cacert "$T/ca.pem" "$URL/healthz" >/dev/null 2>&1; }
        wait_until 15 _up && return 0
        stop_process "$PID" KILL
        grep -q "Address already in use" "$log" || break
    done
    fail "the relay did not serve: $(tail -2 "$log")"
    finish
}

# req PATH CURL_ARGS...: the status of a request to the endpoint; the body
# in $TMP/body, the headers in $TMP/headers.
req() {
    local path=$1
    shift
    curl -s --cacert "$T/ca.pem" -o "$TMP/body" -D "$TMP/headers" -w '%{http_code}' "$@" "$URL$path"
}
AUTH=(-u "prom:$PW")
dead_of() { stats_of "$S" --route "$1" | cut -d' ' -f4; }
dead_is() { [ "$(dead_of orders)" = "$1" ]; }

# read_only WHAT: the pages of a relay without actions.
read_only() {
    local what=$1 id c1 c2
    check "$what: the dead page answers" 200 "$(req /routes/orders/dead "${AUTH[@]}")"
    if grep -q '<p id="readonly">read-only: actions need TLS and a user on the metrics endpoint</p>' "$TMP/body" &&
        ! grep -Eq '<form|<button' "$TMP/body" && ! grep -qi '^set-cookie' "$TMP/headers"; then
        pass "$what: read-only, says why, no form, no button, no cookie"
    else
        fail "$what: not read-only: $(grep -E 'readonly|<form|<button' "$TMP/body" | head -3)"
    fi
    check "$what: it lists 50 rows" 50 "$(grep -c '<tr class="dead"' "$TMP/body")"
    id=$(sed -n 's/.*<tr class="dead" data-event-id="\([^"]*\)".*/\1/p' "$TMP/body" | head -1)
    c1=$(req /routes/orders/dead/replay "${AUTH[@]}" -H "Origin: $URL" -d "csrf=x&event_id=$id")
    c2=$(req /routes/orders/dead/replay-all "${AUTH[@]}" -H "Origin: $URL" -d "csrf=x&confirm=yes")
    [ "$c1" = 403 ] && [ "$c2" = 403 ] && dead_is 60 &&
        pass "$what: POST replay and replay-all are 403, nothing replayed" ||
        fail "$what: POSTs $c1 $c2, dead $(dead_of orders) (expected 403 403, 60)"
}

# --------------------------------------------- a user, but no TLS: read-only
serve ro1 http --metrics-user prom
wait_until 15 dead_is 60 || fail "the 60 rows did not die: $(stats_of "$S" --route orders)"
read_only "a user without TLS"
has "$TMP/ro1.log" 'level=warning route=orders msg="relay orders: dead letters: refused a replay of all dead events by user prom from 127\.0\.0\.1: read-only: actions need TLS and a user on the metrics endpoint \(HTTP 403\)"' \
    "the refusal is logged"
stop_process "$PID" TERM

# --------------------------------------------- TLS, but no user: read-only
serve ro2 https "${TLS[@]}"
read_only "TLS without a user"
has "$TMP/ro2.log" 'refused a replay of an event by an anonymous client from 127\.0\.0\.1: read-only' \
    "the refusal of an anonymous client is logged"
stop_process "$PID" TERM

# ---------------------------------------------------- TLS and a user
# One row gets a hostile last error (a driver's message may hold anything).
sql "UPDATE outbox SET last_error = '<script>alert(1)</script>' || char(1) || char(10) || '\"&''\\'
     WHERE id = (SELECT id FROM outbox WHERE outbox_route = 'orders' ORDER BY created_at, id LIMIT 1)" ||
    fail "could not set the hostile last error"
LOG=$TMP/rw.log
serve rw https "${TLS[@]}" --metrics-user prom
c1=$(req /routes/orders/dead)
c2=$(req /routes/orders/dead -u "prom:not-$PW")
[ "$c1" = 401 ] && [ "$c2" = 401 ] && pass "the dead page: 401 without credentials and with a wrong password" ||
    fail "the dead page: $c1 without credentials, $c2 with a wrong password (expected 401 401)"

# Page by page against outbox dead list --json.
expect 0 dead list --store "$S" --route orders --limit 10000 --json
python3 -c 'import json,sys; [print(e["event_id"], e["attempts"]) for e in json.load(open(sys.argv[1]))["events"]]' \
    "$OUT" >"$TMP/want"
: >"$TMP/got"
path=/routes/orders/dead
pages=()
while [ -n "$path" ] && [ ${#pages[@]} -lt 5 ]; do
    c=$(req "$path" "${AUTH[@]}")
    [ "$c" = 200 ] || { fail "GET $path: $c $(head -c 300 "$TMP/body")"; break; }
    cp "$TMP/body" "$TMP/page${#pages[@]}.html"
    [ ${#pages[@]} = 0 ] && cp "$TMP/headers" "$TMP/page0.headers"
    pages+=("$(grep -c '<tr class="dead"' "$TMP/body")")
    sed -n 's/.*<tr class="dead" data-event-id="\([^"]*\)".*<td class="attempts">\([0-9]*\)<.*/\1 \2/p' \
        "$TMP/body" >>"$TMP/got"
    path=$(sed -n 's/.*<a id="next" href="\([^"]*\)">next page<.*/\1/p' "$TMP/body")
done
check "rows per page, following the next-page link" "50 10" "${pages[*]}"
cmp -s "$TMP/want" "$TMP/got" && pass "the pages list exactly outbox dead list's 60 rows, in its order" ||
    fail "the pages and outbox dead list differ: $(diff "$TMP/want" "$TMP/got" | head -5)"
TOK=$(sed -n 's/^set-cookie: __Host-outbox_csrf=\([0-9a-f]\{32\}\); Path=\/; Secure; HttpOnly; SameSite=Strict\r$/\1/Ip' \
    "$TMP/page0.headers")
[ -n "$TOK" ] && pass "the page sets the token cookie: __Host-, Path=/, Secure, HttpOnly, SameSite=Strict" ||
    fail "no token cookie: $(grep -i cookie "$TMP/page0.headers")"
grep -q "name=\"csrf\" value=\"$TOK\"" "$TMP/page0.html" && pass "the forms carry the cookie's token" ||
    fail "the forms do not carry the token"
check "a button per row" 50 "$(grep -c '<button type="submit" class="replay">replay</button>' "$TMP/page0.html")"
grep -q '<button type="submit" class="replay-all">replay all</button>' "$TMP/page0.html" &&
    grep -q 'send all 60 dead events of this route back to pending' "$TMP/page0.html" &&
    pass "one replay-all button, the count shown beside it" || fail "no replay-all form with the count"
for h in 'X-Frame-Options: DENY' "Content-Security-Policy: default-src 'none'.*frame-ancestors 'none'"; do
    grep -Eqi "^$h" "$TMP/page0.headers" && pass "header $h" || fail "no header $h"
done

# Hostile texts, escaped.
grep -qF '<td class="error">&lt;script&gt;alert(1)&lt;/script&gt;\x01\n&quot;&amp;&#39;\\</td>' "$TMP/page0.html" &&
    pass "the hostile last error is escaped, its control bytes shown as \\x01 and \\n" ||
    fail "hostile last error: $(grep -o '<td class="error">[^/]*script[^<]*' "$TMP/page0.html" | head -1)"
grep -qF '<td class="key">&lt;img src=x onerror=alert(1)&gt;&quot;&amp;&#39;</td>' "$TMP/page1.html" &&
    grep -qF '<td class="type">order.&lt;i&gt;odd&lt;/i&gt;</td>' "$TMP/page1.html" &&
    pass "the hostile key and type are escaped" || fail "hostile key or type: $(grep -o 'class="key">[^/]*' "$TMP/page1.html" | head -1)"
lacks "$TMP/page0.html" '<script|<img|<i>' "page 1 has no tag from the data"
lacks "$TMP/page1.html" '<script|<img|<i>' "page 2 has no tag from the data"
grep -q '<td class="time">20[0-9][0-9]-[01][0-9]-[0-3][0-9]T[0-9:]*\.[0-9]\{6\}Z</td>' "$TMP/page0.html" &&
    pass "times are RFC 3339 in UTC" || fail "no RFC 3339 time"

# The status page links each route's dead letters.
req / "${AUTH[@]}" >/dev/null
grep -q '<td class="deadlink"><a href="/routes/orders/dead">list</a></td>' "$TMP/body" &&
    pass "the status page links the dead-letter page" || fail "no link on the status page"

# Wrong places and methods.
check "a route of the store this relay does not serve" 404 "$(req /routes/other/dead "${AUTH[@]}")"
check "no such route" 404 "$(req /routes/nope/dead "${AUTH[@]}")"
check "GET on the replay action" 405 "$(req /routes/orders/dead/replay "${AUTH[@]}")"
grep -qi '^allow: POST' "$TMP/headers" || fail "the 405 has no Allow: POST"
check "GET on the replay-all action" 405 "$(req /routes/orders/dead/replay-all "${AUTH[@]}")"
check "POST on the page" 405 "$(req /routes/orders/dead "${AUTH[@]}" -d x=y)"

# Cross-site requests: each a 403 that changes nothing.
ID=$(head -1 "$TMP/want" | cut -d' ' -f1)
COOKIE=(-b "__Host-outbox_csrf=$TOK")
ORIGIN=(-H "Origin: https://localhost:$PORT")
FAKE=0123456789abcdef0123456789abcdef
while IFS='|' read -r what args; do
    eval "extra=($args)"
    c=$(req /routes/orders/dead/replay "${AUTH[@]}" "${extra[@]}")
    [ "$c" = 403 ] && dead_is 60 && pass "$what: 403, nothing replayed" ||
        fail "$what: $c, dead $(dead_of orders) (expected 403, 60): $(cat "$TMP/body")"
done <<EOF
no token in the form|"\${COOKIE[@]}" "\${ORIGIN[@]}" -d "event_id=$ID"
the token but no cookie|"\${ORIGIN[@]}" -d "csrf=$TOK&event_id=$ID"
cookie and form differ|-b "__Host-outbox_csrf=$FAKE" "\${ORIGIN[@]}" -d "csrf=$TOK&event_id=$ID"
a token the server never issued, in both|-b "__Host-outbox_csrf=$FAKE" "\${ORIGIN[@]}" -d "csrf=$FAKE&event_id=$ID"
the right token from another Origin|"\${COOKIE[@]}" -H "Origin: https://evil.example" -d "csrf=$TOK&event_id=$ID"
the right token from Origin null|"\${COOKIE[@]}" -H "Origin: null" -d "csrf=$TOK&event_id=$ID"
the right token, no Origin, another Referer|"\${COOKIE[@]}" -H "Referer: https://evil.example/x" -d "csrf=$TOK&event_id=$ID"
the right token, Sec-Fetch-Site cross-site|"\${COOKIE[@]}" "\${ORIGIN[@]}" -H "Sec-Fetch-Site: cross-site" -d "csrf=$TOK&event_id=$ID"
EOF
c=$(req /routes/orders/dead/replay "${AUTH[@]}" "${COOKIE[@]}" "${ORIGIN[@]}" -H 'Content-Type: application/json' \
    -d "csrf=$TOK&event_id=$ID")
check "a body that is not a form" 415 "$c"

# Replay one, as the page's form does.
c=$(req /routes/orders/dead/replay "${AUTH[@]}" "${COOKIE[@]}" "${ORIGIN[@]}" -H "Referer: $URL/routes/orders/dead" \
    -d "csrf=$TOK&event_id=$ID")
loc=$(sed -n 's/^location: \(.*\)\r$/\1/Ip' "$TMP/headers")
[ "$c" = 303 ] && [ "$loc" = "/routes/orders/dead?done=replayed%201%3A%20event%20$ID" ] &&
    pass "replay of one event: 303 to $loc" || fail "replay of one event: $c, Location '$loc'"
_one_published() { [ "$(stats_of "$S" --route orders)" = "0 0 1 59" ]; }
wait_until 15 _one_published && pass "outbox stats after one replay: 0 0 1 59 (pending processing published dead)" ||
    fail "after one replay: $(stats_of "$S" --route orders), expected 0 0 1 59"
check "the sink holds the replayed event, and only it" "$ID" "$(ids_in_file "$SINK")"
c=$(req "$loc" "${AUTH[@]}" "${COOKIE[@]}")
grep -qF "<p id=\"done\">replayed 1: event $ID</p>" "$TMP/body" && grep -q '<p id="count">59 dead events</p>' "$TMP/body" &&
    pass "the page it redirects to shows the result and 59 dead events" ||
    fail "after the replay: $c $(grep -E 'id="(done|count)"' "$TMP/body")"

# Replay all: the confirmation first.
c=$(req /routes/orders/dead/replay-all "${AUTH[@]}" "${COOKIE[@]}" "${ORIGIN[@]}" -d "csrf=$TOK")
[ "$c" = 400 ] && dead_is 59 && pass "replay all without its confirmation: 400, nothing replayed" ||
    fail "replay all unconfirmed: $c, dead $(dead_of orders)"
c=$(req /routes/orders/dead/replay-all "${AUTH[@]}" "${COOKIE[@]}" "${ORIGIN[@]}" -d "csrf=$TOK&confirm=yes")
loc=$(sed -n 's/^location: \(.*\)\r$/\1/Ip' "$TMP/headers")
[ "$c" = 303 ] && [ "$loc" = "/routes/orders/dead?done=replayed%2059%3A%20all%20dead%20events" ] &&
    pass "replay all: 303 to $loc" || fail "replay all: $c, Location '$loc'"
_all_published() { [ "$(stats_of "$S" --route orders)" = "0 0 60 0" ]; }
wait_until 20 _all_published && pass "every replayed event is published: outbox stats 0 0 60 0" ||
    fail "after replay all: $(stats_of "$S" --route orders)"
check "the sink holds the 60 events once each" "60 60" "$(wc -l <"$SINK") $(ids_in_file "$SINK" | uniq | wc -l)"
check "route other is untouched (pending processing published dead)" "2 0 0 0" "$(stats_of "$S" --route other)"
req /routes/orders/dead "${AUTH[@]}" >/dev/null
grep -q '<p id="empty">' "$TMP/body" && ! grep -q 'id="replay-all"' "$TMP/body" &&
    pass "with no dead events left the page says so, without a replay-all button" ||
    fail "the empty page: $(grep -E 'empty|replay-all' "$TMP/body")"

stop_process "$PID" TERM
[ "$RC" = 0 ] && pass "the relay stops cleanly on SIGTERM" || fail "the relay exited $RC"
has "$LOG" "level=info route=orders msg=\"relay orders: dead letters: user prom from 127\\.0\\.0\\.1 replayed event $ID: 1 replayed\"" \
    "the replay of one event is logged with the user"
has "$LOG" 'level=info route=orders msg="relay orders: dead letters: user prom from 127\.0\.0\.1 replayed all dead events: 59 replayed"' \
    "replay all is logged with the user and the count"
check "refusals logged with the user (8 cross-site, the form, the confirmation)" 10 \
    "$(grep -c 'level=warning route=orders msg="relay orders: dead letters: refused a replay of .* by user prom from 127\.0\.0\.1: ' "$LOG")"
has "$LOG" "refused a replay of event $ID by user prom from 127\\.0\\.0\\.1: not sent from this endpoint's own page \\(its Origin is not this endpoint\\) \\(HTTP 403\\)" \
    "a refusal says why"
for f in "$TMP/ro1.log" "$TMP/ro2.log" "$LOG"; do
    no_secret_in "$PW" "$f" "$(basename "$f")"
    no_secret_in "$TOK" "$f" "$(basename "$f") (the token)"
done
finish
