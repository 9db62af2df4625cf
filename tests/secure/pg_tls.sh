#!/usr/bin/env bash
# PostgreSQL over TLS with authentication, as a user meets it: a private
# server in the TLS mode of tools/services/postgres.sh (certificates from
# tools/services/tls.sh; a user with a scram-sha-256 password and one that
# must present a client certificate, both allowed in over TLS only), and
# `outbox relay` on it with sslmode=verify-full.
#
# Checks: a relay drains over TLS end to end with the password and with the
# client certificate (nothing lost, per-key order); a CA that did not sign
# the server, a server certificate for another host name, a wrong password,
# a missing client certificate and a connection without TLS each end
# `outbox relay --until-idle` with exit 2 and one line naming the cause,
# with no row touched; no password appears in the relay's log (text,
# logfmt, json), in `outbox config check`, on /metrics or on the status
# page; a password changed on the server under a running relay stops it
# from reconnecting (rows wait, nothing dead), and the relay restarted with
# the new password from ${ENV} in its config file publishes everything.
#
#   pg_tls.sh OUTBOX_CLI
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
. "$(dirname "$0")/secure.sh"
need_cmd psql postgresql-client
need_cmd curl curl

ROUTE=orders
EVENTS=$TMP/events.jsonl
OUTBOX_PG_TLS=1 private_server postgres pg
eval "$("$SERVICES/postgres.sh" env "$PRIV_DIR")"
URI=$PRIV_URI # the trusted test user, for the checks' own psql
SCRAM=$OUTBOX_PG_SCRAM_URI
CERT=$OUTBOX_PG_CERT_URI
PW=$OUTBOX_PG_SCRAM_PASSWORD
T=$OUTBOX_PG_TLS_DIR
"$OUTBOX" schema apply --store "$SCRAM" --yes-i-know >/dev/null 2>"$TMP/schema.err" ||
    { fail "schema apply over TLS with the password: $(cat "$TMP/schema.err")"; finish; }
pass "schema applied over TLS (verify-full) as outbox_scram"
# The certificate user works on the same tables.
q "GRANT ALL ON ALL TABLES IN SCHEMA public TO outbox_cert;
   GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO outbox_cert" >/dev/null || fail "grants to outbox_cert"

rows() { q "SELECT count(*) FILTER (WHERE status = 'pending') || ' ' || count(*) FILTER (WHERE status = 'published')
            || ' ' || count(*) FILTER (WHERE status = 'dead') || ' ' || coalesce(sum(attempts), 0) FROM outbox"; }

# ------------------------------------------------------------ happy paths
stage_load "$SCRAM" "$ROUTE" 2000 24 500
"$OUTBOX" relay --store "$SCRAM" --route "$ROUTE" --sink "file:$EVENTS" --until-idle 2>"$TMP/happy.log"
rc=$?
[ "$rc" = 0 ] && pass "a relay over TLS with the password drained with exit 0" ||
    fail "the relay over TLS with the password exited $rc: $(tail -1 "$TMP/happy.log")"
stage_load "$CERT" "$ROUTE" 1000 24 500
"$OUTBOX" relay --store "$CERT" --route "$ROUTE" --sink "file:$EVENTS" --until-idle 2>"$TMP/cert.log"
rc=$?
[ "$rc" = 0 ] && pass "a relay presenting the client certificate drained with exit 0" ||
    fail "the relay with the client certificate exited $rc: $(tail -1 "$TMP/cert.log")"
staged_pg "$TMP/staged" outbox
analyze "$TMP/staged.ids" "$EVENTS" 0
[ "$(rows)" = "0 3000 0 3000" ] && pass "3000 rows published over TLS, each with one attempt" ||
    fail "pending published dead attempts = $(rows), expected 0 3000 0 3000"

# ------------------------------------------------------------ refusals
stage_load "$URI" "$ROUTE" 100 4 100
store_refused other_ca "${SCRAM/ca.pem/other-ca.pem}" "certificate verify failed" \
    "a CA that did not sign the server" "$PW"
store_refused bad_password "${SCRAM/:$PW@/:not-the-password@}" "password authentication failed for user \"outbox_scram\"" \
    "a wrong password" "$PW" "not-the-password"
store_refused no_cert "${CERT%%&sslcert=*}" "requires a valid client certificate" \
    "the certificate user without a client certificate" "$PW"
store_refused no_tls "${SCRAM/sslmode=verify-full/sslmode=disable}" "no encryption" \
    "the password user without TLS" "$PW"
# A server presenting a certificate of the same CA for another name.
OUTBOX_PG_TLS=1 OUTBOX_PG_TLS_CERT=wronghost private_server postgres pgwrong
WRONG=$(env -i bash -c "$("$SERVICES/postgres.sh" env "$PRIV_DIR"); printf %s \"\$OUTBOX_PG_SCRAM_URI\"")
store_refused wrong_host "$WRONG" 'server certificate for "wrong-host.invalid" does not match host name "localhost"' \
    "a server certificate for another host name" "$PW"

# The same failures in every log format, with a metrics endpoint asked for.
for fmt in text logfmt json; do
    "$OUTBOX" relay --store "${SCRAM/:$PW@/:not-the-password@}" --route "$ROUTE" --sink "file:$TMP/x.jsonl" \
        --until-idle --log-format "$fmt" 2>"$TMP/fmt-$fmt.err"
    no_secret_in "not-the-password" "$TMP/fmt-$fmt.err" "--log-format $fmt, wrong password"
done

# ------------------------------------------------------------ rotation
# A relay from a config file whose store URI takes the password from
# ${PGPW}; config check shows no password.
cat >"$TMP/relay.yaml" <<EOF
stores:
  db: {uri: "postgresql://outbox_scram:\${PGPW}@localhost:$OUTBOX_PG_PORT/outbox_test?sslmode=verify-full&sslrootcert=$T/ca.pem&application_name=tls_relay"}
sinks:
  out: {uri: "file:$EVENTS"}
routes:
  $ROUTE: {store: db, sink: out, batch: 50, poll: 20ms, backoff_base: 100ms, backoff_cap: 500ms}
EOF
PGPW=$PW "$OUTBOX" config check "$TMP/relay.yaml" >"$TMP/check.out" 2>&1 ||
    fail "config check of the TLS config: $(tail -1 "$TMP/check.out")"
no_secret_in "$PW" "$TMP/check.out" "config check"
MPORT=$(private_port)
PGPW=$PW background rotate "$OUTBOX" relay --config "$TMP/relay.yaml" --metrics-listen "127.0.0.1:$MPORT" \
    --log-format logfmt
R=$BG_PID
wait_started "$TMP/rotate.log" 1 || { fail "the config relay did not start: $(tail -1 "$TMP/rotate.log")"; finish; }
_drained() { [ "$(q "SELECT count(*) FROM outbox WHERE status <> 'published'")" = 0 ]; }
wait_until 60 _drained || fail "the config relay left rows: $(rows)"
tls=$(q "SELECT count(*) || ' ' || count(*) FILTER (WHERE s.ssl AND s.version LIKE 'TLS%')
         FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'tls_relay'")
[ "${tls% *}" -gt 0 ] && [ "${tls% *}" = "${tls#* }" ] &&
    pass "the running relay's ${tls% *} sessions all use TLS ($(q "SELECT DISTINCT version FROM pg_stat_ssl s
        JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'tls_relay'" | head -1))" ||
    fail "the running relay's sessions, all and with TLS: $tls"
NEWPW=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
q "ALTER ROLE outbox_scram PASSWORD '$NEWPW'" >/dev/null || fail "changing the password"
cut=$(q "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
         WHERE application_name = 'tls_relay'")
[ "$cut" -gt 0 ] || fail "the relay had no session to cut"
_refused() { grep -q 'password authentication failed' "$TMP/rotate.log"; }
wait_until 30 _refused && pass "with the password changed the relay cannot reconnect: $(grep -m1 'password authentication failed' "$TMP/rotate.log" | cut -c1-240)" ||
    fail "no authentication failure in the relay's log after the change: $(tail -1 "$TMP/rotate.log")"
published=$(q "SELECT count(*) FROM outbox WHERE status = 'published'")
stage_load "$URI" "$ROUTE" 500 8 100
sleep 1
[ "$(q "SELECT count(*) FROM outbox WHERE status = 'published'")" = "$published" ] &&
    [ "$(q "SELECT count(*) FROM outbox WHERE status = 'dead'")" = 0 ] &&
    pass "meanwhile nothing is published and nothing dead" ||
    fail "while locked out: $(rows)"
curl -s "http://127.0.0.1:$MPORT/metrics" >"$TMP/metrics.txt" || fail "no /metrics from the relay"
curl -s "http://127.0.0.1:$MPORT/" >"$TMP/status.html" || fail "no status page from the relay"
grep -q 'outbox_' "$TMP/metrics.txt" || fail "/metrics has no outbox series"
for f in rotate.log metrics.txt status.html; do
    no_secret_in "$PW" "$TMP/$f" "$f, old password"
    no_secret_in "$NEWPW" "$TMP/$f" "$f, new password"
done
kill -0 "$R" 2>/dev/null && pass "the relay keeps running through the refusals" || fail "the relay died"
stop_process "$R" TERM
[ "$RC" = 0 ] || fail "the locked-out relay exited $RC on SIGTERM"
PGPW=$NEWPW background rotated "$OUTBOX" relay --config "$TMP/relay.yaml"
R=$BG_PID
wait_until 60 _drained && pass "restarted with the new password from \${PGPW}, the relay published the rest" ||
    fail "after the restart: $(rows)"
stop_process "$R" TERM
staged_pg "$TMP/staged" outbox
analyze "$TMP/staged.ids" "$EVENTS" 0
[ "$(q "SELECT count(*) FROM outbox WHERE status <> 'published'")" = 0 ] &&
    pass "nothing lost: every row published" || fail "after the rotation: $(rows)"
finish
