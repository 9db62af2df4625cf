#!/usr/bin/env bash
# The HTTP sink over TLS with authentication, as a user meets it: a private
# receiver in the TLS mode of tools/services/http.sh (HTTPS with the
# certificates of tools/services/tls.sh, basic authentication as user
# "outbox" with a random password), restarted in turn to present a
# certificate for another host name and to require a client certificate.
#
# Checks: a relay drains over https:// with the test CA and the password
# from the environment, end to end (read back through the receiver's
# inspection protocol by tests/integration/http/read_requests.py: nothing
# lost, per-key order); a CA that did not sign the receiver, a certificate
# for another host name, a wrong password (401) and a missing client
# certificate each end `outbox relay --until-idle` with exit 2 and a line
# naming the cause, every row still pending with no attempt charged and
# none dead; the password shows in no log format and not in `outbox config
# check`; a password changed on the receiver under a running relay locks it
# out (401) without losing anything, and the relay restarted with the new
# password from ${ENV} publishes the rest; with a client certificate
# required, the relay presenting one publishes.
#
#   http_tls.sh OUTBOX_CLI
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
. "$(dirname "$0")/secure.sh"
need_python

ROUTE=orders
OUTBOX_HTTP_TLS=1 private_server http receiver
DIR=$PRIV_DIR
eval "$("$SERVICES/http.sh" env "$DIR")"
PW=$OUTBOX_HTTP_PASSWORD
T=$OUTBOX_HTTP_TLS_DIR
PORT=$OUTBOX_HTTP_PORT
# uri PASSWORD_VARIABLE [QUERY]: the outbox user over TLS, the password
# from the environment.
uri() {
    echo "https://outbox@localhost:$PORT/?password_env=$1&tls_ca=$T/ca.pem&timeout=2s&connect_timeout=2s${2:+&$2}"
}
# readback MAX_DUPLICATES: everything the receiver stored for /orders
# against what was staged. The reader trusts the test CA, and presents no
# client certificate: the receiver must not require one.
readback() {
    SSL_CERT_FILE=$T/ca.pem "$PY" "$HARNESS_DIR/../integration/http/read_requests.py" \
        "https://127.0.0.1:$PORT/" "/$ROUTE" "$TMP/read.jsonl" >"$TMP/read.out" 2>&1 ||
        fail "read_requests.py: $(tail -1 "$TMP/read.out")"
    staged_sqlite "$TMP/staged"
    analyze "$TMP/staged.ids" "$TMP/read.jsonl" "$1"
}
# set_password PW: the receiver's credentials from now on (renamed over
# the file it reads on every request, never read half-written).
set_password() {
    echo "outbox:$1" >"$T/http.auth.new" && mv "$T/http.auth.new" "$T/http.auth"
}

secure_store
# ------------------------------------------------------------ happy path
stage_load "$S" "$ROUTE" 1000 16 500
"$OUTBOX" relay --store "$S" --route "$ROUTE" --sink "$(uri OUTBOX_HTTP_PASSWORD)" --until-idle 2>"$TMP/happy.err"
rc=$?
[ "$rc" = 0 ] && [ "$(pending_state)" = "0 0 0" ] &&
    pass "a relay over https:// with the CA and the password from the environment drained with exit 0" ||
    fail "the relay over TLS exited $rc, pending charged dead = $(pending_state): $(tail -1 "$TMP/happy.err")"
no_secret_in "$PW" "$TMP/happy.err" "the relay's log"
readback 0

# ------------------------------------------------------------ refusals
export HTTP_BAD_PW=not-the-password
stage_load "$S" "$ROUTE" 40 4 40
sink_refused other_ca "$(uri OUTBOX_HTTP_PASSWORD | sed 's/ca\.pem/other-ca.pem/')" \
    "SSL certificate problem: unable to get local issuer certificate" \
    "a CA that did not sign the receiver" "$PW"
sink_refused bad_password "$(uri HTTP_BAD_PW)" "HTTP 401 from https://localhost:$PORT/$ROUTE: authentication required" \
    "a wrong password from the environment" "$HTTP_BAD_PW" "$PW"
for fmt in text logfmt json; do
    "$OUTBOX" relay --store "$S" --route "$ROUTE" \
        --sink "https://outbox:$HTTP_BAD_PW@localhost:$PORT/?tls_ca=$T/ca.pem&timeout=2s" --until-idle \
        --backoff-base 50ms --backoff-cap 100ms --log-format "$fmt" 2>"$TMP/fmt-$fmt.err"
    rc=$?
    [ "$rc" = 2 ] && grep -q 'HTTP 401' "$TMP/fmt-$fmt.err" ||
        fail "--log-format $fmt, wrong password in the URI: exit $rc, no HTTP 401 in: $(tail -1 "$TMP/fmt-$fmt.err")"
    no_secret_in "$HTTP_BAD_PW" "$TMP/fmt-$fmt.err" "--log-format $fmt, wrong password in the URI"
done

# ------------------------------------------------------------ rotation
cat >"$TMP/relay.yaml" <<EOF
stores:
  db: {uri: "$S"}
sinks:
  hook: {uri: "https://outbox:\${HOOK_PW}@localhost:$PORT/?tls_ca=$T/ca.pem&timeout=2s"}
routes:
  $ROUTE: {store: db, sink: hook, batch: 20, poll: 20ms, backoff_base: 100ms, backoff_cap: 500ms}
EOF
HOOK_PW=$PW expect 0 config check "$TMP/relay.yaml" && no_secret_in "$PW" "$OUT" "config check"
HOOK_PW=$PW background rotate "$OUTBOX" relay --config "$TMP/relay.yaml" --log-format json
R=$BG_PID
_drained() { [ "$(sql "SELECT count(*) FROM outbox WHERE status <> 'published'")" = 0 ]; }
wait_until 30 _drained && pass "the config relay drained the rows the refusals left" ||
    fail "the config relay left: $(pending_state)"
NEWPW=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
set_password "$NEWPW" || fail "rewriting $T/http.auth"
stage_load "$S" "$ROUTE" 200 8 100
_refused() { grep -q 'HTTP 401' "$TMP/rotate.log"; }
wait_until 30 _refused &&
    pass "with the password changed the relay's requests are refused: $(grep -m1 -o 'HTTP 401[^")]*' "$TMP/rotate.log")" ||
    fail "no 401 in the relay's log after the change: $(tail -1 "$TMP/rotate.log")"
sleep 1
[ "$(sql "SELECT count(*) FROM outbox WHERE status = 'dead'")" = 0 ] &&
    [ "$(sql "SELECT count(*) FROM outbox WHERE status = 'pending'")" -gt 0 ] &&
    pass "meanwhile rows wait and none is dead: pending charged dead = $(pending_state)" ||
    fail "while locked out: pending charged dead = $(pending_state)"
no_secret_in "$PW" "$TMP/rotate.log" "the locked-out relay's JSON log, the old password"
no_secret_in "$NEWPW" "$TMP/rotate.log" "the locked-out relay's JSON log, the new password"
kill -0 "$R" 2>/dev/null && pass "the relay keeps running while refused" || fail "the relay died"
stop_process "$R" TERM
[ "$RC" = 0 ] || fail "the locked-out relay exited $RC on SIGTERM"
HOOK_PW=$NEWPW background rotated "$OUTBOX" relay --config "$TMP/relay.yaml"
R=$BG_PID
wait_until 30 _drained && pass "restarted with the new password from \${HOOK_PW}, the relay published the rest" ||
    fail "after the restart: pending charged dead = $(pending_state)"
stop_process "$R" TERM
no_secret_in "$PW" "$TMP/rotated.log" "the restarted relay's log, the old password"
no_secret_in "$NEWPW" "$TMP/rotated.log" "the restarted relay's log, the new password"
# A request cut by the stop may have been stored without its answer
# reaching the relay: at most one pipeline of batches again.
readback $((PIPELINE * 20))
PW=$NEWPW
export OUTBOX_HTTP_PASSWORD=$NEWPW

# ------------------------------------------------------------ another name
server http "$DIR" stop
OUTBOX_HTTP_TLS_CERT_NAME=wronghost server http "$DIR" start
stage_load "$S" "$ROUTE" 20 4 20
sink_refused wrong_host "$(uri OUTBOX_HTTP_PASSWORD)" \
    "SSL: no alternative certificate subject name matches target host name 'localhost'" \
    "a receiver certificate for another host name" "$PW"

# ------------------------------------------------------------ client certificate
server http "$DIR" stop
OUTBOX_HTTP_TLS_VERIFY=1 server http "$DIR" start
sink_refused no_cert "$(uri OUTBOX_HTTP_PASSWORD)" "tlsv13 alert certificate required" \
    "no client certificate where the receiver requires one" "$PW"
"$OUTBOX" relay --store "$S" --route "$ROUTE" \
    --sink "$(uri OUTBOX_HTTP_PASSWORD "tls_cert=$T/client.pem&tls_key=$T/client.key")" \
    --until-idle 2>"$TMP/cert.err"
rc=$?
[ "$rc" = 0 ] && [ "$(sql "SELECT count(*) FROM outbox WHERE status <> 'published'")" = 0 ] &&
    pass "with the client certificate the relay published the rest" ||
    fail "with the client certificate: exit $rc, pending charged dead = $(pending_state): $(tail -1 "$TMP/cert.err")"
no_secret_in "$PW" "$TMP/cert.err" "the relay's log with the client certificate"
# The reader presents no certificate: read back from the receiver started
# again without the requirement (same logs, same port).
server http "$DIR" stop
server http "$DIR" start
readback $((PIPELINE * 20))
finish
