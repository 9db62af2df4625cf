#!/usr/bin/env bash
# The relay's metrics endpoint over HTTPS with basic authentication
# (--metrics-tls-cert, --metrics-tls-key, --metrics-user with the password
# in OUTBOX_METRICS_PASSWORD; or tls_cert, tls_key, user, password in the
# config file's metrics: section), with the certificates of
# tools/services/tls.sh.
#
# Checks: curl trusting the test CA gets /healthz without credentials, and
# /metrics, /readyz and the status page only with the right user and
# password (401 otherwise); a client that trusts another CA, and plain HTTP,
# get nothing, and the relay keeps serving without printing anything on
# stderr for them; headless Chromium, trusting only the server's key, loads
# the status page with the credentials; every bad input (half a pair, a
# missing or foreign file, a key of another certificate, a user without a
# password, a password without a user) is one line and exit 2 before any
# route starts; the password shows in no log line and not in `config
# check`.
#
#   metrics_tls.sh OUTBOX_CLI
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
need_cmd curl curl

T=$TMP/tls
"$SERVICES/tls.sh" make "$T" >/dev/null || { fail "making the test certificates"; finish; }
PW=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
new_db m
S=sqlite://$DB
expect 0 stage --store "$S" --route r --type t --count 20
LOG=$TMP/relay.log

# ------------------------------------------------------------ bad inputs
TLS=(--metrics-tls-cert "$T/server.pem" --metrics-tls-key "$T/server.key")
R=(relay --store "$S" --route r --sink null: --until-idle)
expect_error "metrics: tls_cert and tls_key go together" "${R[@]}" --metrics-listen 127.0.0.1:1 \
    --metrics-tls-cert "$T/server.pem"
expect_error "metrics: cannot read $TMP/none.pem: No such file or directory" "${R[@]}" \
    --metrics-listen 127.0.0.1:1 --metrics-tls-cert "$TMP/none.pem" --metrics-tls-key "$T/server.key"
printf 'not a certificate\n' >"$TMP/junk.pem"
expect_error "metrics: $TMP/junk.pem is not a PEM file" "${R[@]}" --metrics-listen 127.0.0.1:1 \
    --metrics-tls-cert "$TMP/junk.pem" --metrics-tls-key "$T/server.key"
PORT=$(private_port)
expect_error "metrics: cannot start the HTTPS server on 127\.0\.0\.1:$PORT: the certificate or the key was refused" \
    "${R[@]}" --metrics-listen "127.0.0.1:$PORT" --metrics-tls-cert "$T/server.pem" --metrics-tls-key "$T/wronghost.key"
expect_error "metrics: a user needs a password \(OUTBOX_METRICS_PASSWORD" "${R[@]}" \
    --metrics-listen 127.0.0.1:1 --metrics-user prom
OUTBOX_METRICS_PASSWORD=$PW expect_error "metrics: the user must be non-empty and without ':'" "${R[@]}" \
    --metrics-listen 127.0.0.1:1 --metrics-user pr:om
OUTBOX_METRICS_PASSWORD= expect_error "metrics: the password is empty" "${R[@]}" \
    --metrics-listen 127.0.0.1:1 --metrics-user prom
[ "$(sql "SELECT count(*) FROM outbox WHERE status = 'pending'")" = 20 ] &&
    pass "the refused relays touched no row" || fail "a refused relay touched rows"
F=$TMP/m.yaml
base=("stores: {main: {uri: \"$S\"}}" 'sinks: {out: {uri: "null:"}}' 'routes: {r: {store: main, sink: out}}')
printf '%s\n' "${base[@]}" 'metrics: {listen: "127.0.0.1:9464", password: "${MPW}"}' >"$F"
MPW=$PW expect_error "m\.yaml:4: metrics: a password needs a user" config check "$F"
printf '%s\n' "${base[@]}" "metrics: {listen: \"127.0.0.1:9464\", tls_key: \"$T/server.key\"}" >"$F"
expect_error "m\.yaml:4: metrics: tls_cert and tls_key go together" config check "$F"
printf '%s\n' "${base[@]}" "metrics: {listen: \"127.0.0.1:9464\", user: prom, password: \"\${MPW}\"," \
    "  tls_cert: \"$T/server.pem\", tls_key: \"$T/server.key\"}" >"$F"
MPW=$PW expect 0 config check "$F" && pass "config check takes tls_cert, tls_key, user and password"
no_secret_in "$PW" "$OUT" "config check"

# ------------------------------------------------------------ serving
# From the config file, the password from ${MPW}; port chosen here.
sed -i "s/127.0.0.1:9464/127.0.0.1:PORT/" "$F"
for _ in 1 2 3 4 5; do
    PORT=$(private_port)
    sed "s/127.0.0.1:PORT/127.0.0.1:$PORT/" "$F" >"$TMP/serve.yaml"
    MPW=$PW background relay "$OUTBOX" relay --config "$TMP/serve.yaml" --log-format logfmt
    PID=$BG_PID
    _up() { curl -fs --cacert "$T/ca.pem" "https://localhost:$PORT/healthz" >/dev/null 2>&1; }
    wait_until 10 _up && break
    stop_process "$PID" KILL
    grep -q "Address already in use" "$LOG" || { fail "the relay did not serve: $(tail -1 "$LOG")"; finish; }
done
URL=https://localhost:$PORT
# code PATH CURL_ARGS...: the status curl gets.
code() {
    local path=$1
    shift
    curl -s -o "$TMP/body" -w '%{http_code}' "$@" "$URL$path"
}
[ "$(code /healthz --cacert "$T/ca.pem")" = 200 ] && pass "/healthz over HTTPS without credentials: 200" ||
    fail "/healthz: $(cat "$TMP/body")"
for path in /metrics /readyz /; do
    c1=$(code "$path" --cacert "$T/ca.pem")
    c2=$(code "$path" --cacert "$T/ca.pem" -u "prom:not-$PW")
    c3=$(code "$path" --cacert "$T/ca.pem" -u "prom:$PW")
    [ "$c1" = 401 ] && [ "$c2" = 401 ] && [ "$c3" = 200 ] &&
        pass "$path: 401 without credentials, 401 with a wrong password, 200 with the right one" ||
        fail "$path: $c1 without, $c2 wrong, $c3 right (expected 401 401 200)"
done
code /metrics --cacert "$T/ca.pem" -u "prom:$PW" >/dev/null
grep -q '^outbox_events_published_total{route="r"} 20$' "$TMP/body" &&
    pass "/metrics over HTTPS counts the 20 events published" ||
    fail "/metrics: $(grep published "$TMP/body" | head -2)"
curl -s -I --cacert "$T/ca.pem" "$URL/metrics" | tr -d '\r' | grep -qi '^WWW-Authenticate: Basic realm="outbox relay"' &&
    pass "a request without credentials is asked for basic authentication" ||
    fail "no WWW-Authenticate header on a 401"
out=$(curl -s -o /dev/null -w '%{http_code} %{errormsg}' --cacert "$T/other-ca.pem" "$URL/healthz")
[[ $out == 000*certificate* ]] && pass "a client trusting another CA refuses the endpoint: $out" ||
    fail "a client trusting another CA: $out"
out=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$PORT/healthz")
[ "$out" != 200 ] && pass "plain HTTP to the HTTPS endpoint gets nothing ($out)" || fail "plain HTTP answered 200"
[ "$(code /healthz --cacert "$T/ca.pem")" = 200 ] && pass "the endpoint still serves after the bad clients" ||
    fail "the endpoint stopped serving"

# Headless Chromium, trusting the server's key only (its SPKI hash).
if command -v chromium >/dev/null; then
    spki=$(openssl x509 -in "$T/server.pem" -pubkey -noout | openssl pkey -pubin -outform der |
        openssl dgst -sha256 -binary | base64)
    browse() { # URL OUT
        timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
            --disable-background-networking --disable-component-update --disable-sync \
            --user-data-dir="$TMP/chromium" --ignore-certificate-errors-spki-list="$spki" \
            --dump-dom "$1" >"$2" 2>>"$TMP/chromium.err"
    }
    if browse "https://prom:$PW@localhost:$PORT/" "$TMP/dom.html"; then
        grep -q '<tr class="route" data-route="r">' "$TMP/dom.html" &&
            pass "chromium loads the status page over HTTPS with the credentials: route r's row" ||
            fail "chromium with credentials: $(head -c 400 "$TMP/dom.html")"
    else
        fail "chromium --dump-dom failed: $(tail -2 "$TMP/chromium.err")"
    fi
    # Without them it gets no page (headless, the 401 leaves it empty).
    browse "https://localhost:$PORT/" "$TMP/dom-anon.html"
    ! grep -q 'data-route=' "$TMP/dom-anon.html" &&
        pass "chromium without credentials gets no status page" ||
        fail "chromium without credentials: $(head -c 400 "$TMP/dom-anon.html")"
else
    skip_part "the status page in headless Chromium: no chromium (the Debian package chromium)"
fi
stop_process "$PID" TERM
[ "$RC" = 0 ] && pass "the relay stops cleanly on SIGTERM" || fail "the relay exited $RC"
no_secret_in "$PW" "$LOG" "the relay's log"
lacks "$LOG" '^Error|handshake' "the relay's stderr has no TLS library lines"
finish
