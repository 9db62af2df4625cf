#!/usr/bin/env bash
# The AMQP sink over TLS with authentication, as a user meets it: a private
# RabbitMQ node in the TLS mode of tools/services/rabbitmq.sh (a TLS
# listener with the certificates of tools/services/tls.sh, a user "outbox"
# with a random password), restarted in turn to present a certificate for
# another host name and to require a client certificate.
#
# Checks: a relay drains over amqps:// with the test CA and the password,
# end to end (read back by pika: nothing lost, per-key order); a CA that
# did not sign the broker, a certificate for another host name, a wrong
# password and a missing client certificate each end `outbox relay
# --until-idle` with exit 2 and a line naming the cause, every row still
# pending with no attempt charged and none dead; the password shows in no
# log format and not in `outbox config check`; a password changed on the
# broker under a running relay locks it out without losing anything, and
# the relay restarted with the new password from ${ENV} publishes the rest;
# with a client certificate required, the relay presenting one publishes.
#
#   amqp_tls.sh OUTBOX_CLI
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
. "$(dirname "$0")/secure.sh"
need_python

ROUTE=orders
QUEUE=orders
OUTBOX_RABBITMQ_TLS=1 private_server rabbitmq amqp
DIR=$PRIV_DIR
node_env() { eval "$("$SERVICES/rabbitmq.sh" env "$DIR")"; }
node_env
PLAIN=$OUTBOX_RABBITMQ_URI # guest over plain AMQP: the checks' own reader
PW=$OUTBOX_RABBITMQ_PASSWORD
T=$OUTBOX_RABBITMQ_TLS_DIR
# uri PASSWORD [QUERY]: the outbox user over TLS.
uri() { echo "amqps://outbox:$1@localhost:$OUTBOX_RABBITMQ_TLS_PORT/%2f?tls_ca=$T/ca.pem&timeout=2s&connect_timeout=2s${2:+&$2}"; }
"$PY" - "$PLAIN" "$QUEUE" <<'PYEOF' || { fail "declare queue $QUEUE"; finish; }
import sys, pika
conn = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
conn.channel().queue_declare(sys.argv[2], durable=True)
conn.close()
PYEOF
# readback MAX_DUPLICATES: the queue against what was staged.
readback() {
    "$PY" "$HARNESS_DIR/../integration/amqp/read_queue.py" "$PLAIN" "$QUEUE" "$TMP/read.jsonl" \
        >"$TMP/read.out" 2>&1 || fail "read_queue.py: $(tail -1 "$TMP/read.out")"
    staged_sqlite "$TMP/staged"
    analyze "$TMP/staged.ids" "$TMP/read.jsonl" "$1"
}

secure_store
# ------------------------------------------------------------ happy path
stage_load "$S" "$ROUTE" 1000 16 500
"$OUTBOX" relay --store "$S" --route "$ROUTE" --sink "$(uri "$PW")" --until-idle 2>"$TMP/happy.err"
rc=$?
[ "$rc" = 0 ] && pass "a relay over amqps:// with the CA and the password drained with exit 0" ||
    fail "the relay over TLS exited $rc: $(tail -1 "$TMP/happy.err")"
no_secret_in "$PW" "$TMP/happy.err" "the relay's log"

# ------------------------------------------------------------ refusals
stage_load "$S" "$ROUTE" 40 4 40
sink_refused other_ca "$(uri "$PW" | sed 's/ca\.pem/other-ca.pem/')" \
    "SSL peer cert verification failed" "a CA that did not sign the broker" "$PW"
sink_refused bad_password "$(uri not-the-password)" "ACCESS_REFUSED - Login was refused" \
    "a wrong password" "not-the-password" "$PW"
for fmt in text logfmt json; do
    "$OUTBOX" relay --store "$S" --route "$ROUTE" --sink "$(uri not-the-password)" --until-idle \
        --backoff-base 50ms --backoff-cap 100ms --log-format "$fmt" 2>"$TMP/fmt-$fmt.err"
    no_secret_in "not-the-password" "$TMP/fmt-$fmt.err" "--log-format $fmt, wrong password"
done

# ------------------------------------------------------------ rotation
cat >"$TMP/relay.yaml" <<EOF
stores:
  db: {uri: "$S"}
sinks:
  broker: {uri: "amqps://outbox:\${AMQP_PW}@localhost:$OUTBOX_RABBITMQ_TLS_PORT/%2f?tls_ca=$T/ca.pem&timeout=2s"}
routes:
  $ROUTE: {store: db, sink: broker, batch: 20, poll: 20ms, backoff_base: 100ms, backoff_cap: 500ms}
EOF
AMQP_PW=$PW expect 0 config check "$TMP/relay.yaml" && no_secret_in "$PW" "$OUT" "config check"
AMQP_PW=$PW background rotate "$OUTBOX" relay --config "$TMP/relay.yaml" --log-format json
R=$BG_PID
_drained() { [ "$(sql "SELECT count(*) FROM outbox WHERE status <> 'published'")" = 0 ]; }
wait_until 60 _drained && pass "the config relay drained the rows the refusals left" ||
    fail "the config relay left: $(pending_state)"
NEWPW=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
"$SERVICES/rabbitmq.sh" ctl "$DIR" change_password outbox "$NEWPW" >/dev/null 2>"$TMP/ctl.err" &&
    "$SERVICES/rabbitmq.sh" ctl "$DIR" close_all_connections "password changed" >/dev/null 2>>"$TMP/ctl.err" ||
    fail "changing the password: $(tail -1 "$TMP/ctl.err")"
stage_load "$S" "$ROUTE" 200 8 100
_refused() { grep -q 'ACCESS_REFUSED' "$TMP/rotate.log"; }
wait_until 30 _refused && pass "with the password changed the relay cannot log in again: $(grep -m1 -o 'ACCESS_REFUSED[^"]*' "$TMP/rotate.log" | head -1)" ||
    fail "no refusal in the relay's log after the change: $(tail -1 "$TMP/rotate.log")"
sleep 1
[ "$(sql "SELECT count(*) FROM outbox WHERE status = 'dead'")" = 0 ] &&
    [ "$(sql "SELECT count(*) FROM outbox WHERE status = 'pending'")" -gt 0 ] &&
    pass "meanwhile rows wait and none is dead" || fail "while locked out: $(pending_state)"
for s in "$PW" "$NEWPW"; do no_secret_in "$s" "$TMP/rotate.log" "the locked-out relay's JSON log"; done
kill -0 "$R" 2>/dev/null && pass "the relay keeps running while refused" || fail "the relay died"
stop_process "$R" TERM
[ "$RC" = 0 ] || fail "the locked-out relay exited $RC on SIGTERM"
AMQP_PW=$NEWPW background rotated "$OUTBOX" relay --config "$TMP/relay.yaml"
R=$BG_PID
wait_until 60 _drained && pass "restarted with the new password from \${AMQP_PW}, the relay published the rest" ||
    fail "after the restart: $(pending_state)"
stop_process "$R" TERM
# Closing the connections may cut a batch between its publish and its
# settle: at most one pipeline of batches again (RabbitMQ does not dedupe).
readback $((PIPELINE * 20))
PW=$NEWPW

# ------------------------------------------------------------ another name
server rabbitmq "$DIR" stop
OUTBOX_RABBITMQ_TLS_CERT=wronghost server rabbitmq "$DIR" start
stage_load "$S" "$ROUTE" 20 4 20
sink_refused wrong_host "$(uri "$PW")" "SSL hostname verification failed" \
    "a broker certificate for another host name" "$PW"

# ------------------------------------------------------------ client certificate
server rabbitmq "$DIR" stop
OUTBOX_RABBITMQ_TLS_VERIFY=1 server rabbitmq "$DIR" start
sink_refused no_cert "$(uri "$PW")" "logging in: a SSL error occurred( \(tlsv13 alert certificate required\)|; a broker that requires a client certificate \(tls_cert, tls_key\) ends the session this way)" \
    "no client certificate where the broker requires one" "$PW"
"$OUTBOX" relay --store "$S" --route "$ROUTE" --sink "$(uri "$PW" "tls_cert=$T/client.pem&tls_key=$T/client.key")" \
    --until-idle 2>"$TMP/cert.err"
rc=$?
[ "$rc" = 0 ] && [ "$(sql "SELECT count(*) FROM outbox WHERE status <> 'published'")" = 0 ] &&
    pass "with the client certificate the relay published the rest" ||
    fail "with the client certificate: exit $rc, $(pending_state): $(tail -1 "$TMP/cert.err")"
readback $((PIPELINE * 20))
finish
