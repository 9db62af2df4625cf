#!/usr/bin/env bash
# The MongoDB store over TLS with SCRAM, as a user meets it: a private
# FerretDB in the TLS mode of tools/services/ferretdb.sh (a TLS listener with
# the certificates of tools/services/tls.sh, and FerretDB's experimental
# SCRAM with a user "outbox"), restarted in turn to present a certificate
# for another host name and to require a client certificate. FerretDB is
# the MongoDB-wire server the tests have; a MongoDB server is not tested.
#
# Checks: a relay drains over TLS (tls=true, tlsCAFile) with the password
# end to end (nothing lost, per-key order); a CA that did not sign the
# server, a certificate for another host name, a wrong password, no
# password and a missing client certificate each end `outbox relay
# --until-idle` with exit 2 and one line naming the cause (libmongoc's),
# with no row touched; no password in any log format or in `outbox config
# check`; a password changed on the server (updateUser, then a restart)
# locks a running relay out without losing anything, and the relay
# restarted with the new password from ${ENV} publishes the rest; with a
# client certificate required, the relay presenting one
# (tlsCertificateKeyFile) publishes.
#
#   mongo_tls.sh OUTBOX_CLI
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
. "$(dirname "$0")/secure.sh"
need_python

ROUTE=orders
EVENTS=$TMP/events.jsonl
OUTBOX_MONGO_TLS=1 private_server ferretdb mongo
DIR=$PRIV_DIR
eval "$("$SERVICES/ferretdb.sh" env "$DIR")"
URI=$OUTBOX_MONGO_TLS_URI
PW=$OUTBOX_MONGO_PASSWORD
T=$OUTBOX_MONGO_TLS_DIR
PLAIN=$OUTBOX_MONGO_URI # the same user on the plain listener: the checks' own reads
rows() { stats_of "$PLAIN" --route "$ROUTE"; }
"$OUTBOX" schema apply --store "$URI" --yes-i-know >/dev/null 2>"$TMP/schema.err" ||
    { fail "schema apply over TLS with the password: $(cat "$TMP/schema.err")"; finish; }
pass "schema applied over TLS with SCRAM-SHA-256"

# ------------------------------------------------------------ happy path
stage_load "$URI" "$ROUTE" 1000 16 500
"$OUTBOX" relay --store "$URI" --route "$ROUTE" --sink "file:$EVENTS" --until-idle 2>"$TMP/happy.err"
rc=$?
[ "$rc" = 0 ] && [ "$(rows)" = "0 0 1000 0" ] &&
    pass "a relay over TLS with the password drained 1000 events with exit 0" ||
    fail "the relay over TLS exited $rc, pending processing published dead = $(rows): $(tail -1 "$TMP/happy.err")"
no_secret_in "$PW" "$TMP/happy.err" "the relay's log"

# ------------------------------------------------------------ refusals
stage_load "$URI" "$ROUTE" 50 4 50
store_refused other_ca "${URI/ca.pem/other-ca.pem}" \
    "TLS handshake failed: certificate verify failed \(20\): unable to get local issuer certificate" \
    "a CA that did not sign the server" "$PW"
store_refused bad_password "${URI/:$PW@/:not-the-password@}" "connecting to MongoDB: Authentication failed" \
    "a wrong password" "$PW" "not-the-password"
NOPW=${URI/outbox:$PW@/}
store_refused no_password "${NOPW/&authMechanism=SCRAM-SHA-256/}" "requires authentication" "no user and password" "$PW"
for fmt in text logfmt json; do
    "$OUTBOX" relay --store "${URI/:$PW@/:not-the-password@}" --route "$ROUTE" --sink "file:$TMP/x.jsonl" \
        --until-idle --log-format "$fmt" 2>"$TMP/fmt-$fmt.err"
    no_secret_in "not-the-password" "$TMP/fmt-$fmt.err" "--log-format $fmt, wrong password"
done
cat >"$TMP/relay.yaml" <<EOF
stores:
  db: {uri: "mongodb://outbox:\${MPW}@localhost:$OUTBOX_MONGO_TLS_PORT/outbox_test?tls=true&tlsCAFile=$T/ca.pem&authMechanism=SCRAM-SHA-256"}
sinks:
  out: {uri: "file:$EVENTS"}
routes:
  $ROUTE: {store: db, sink: out}
EOF
MPW=$PW expect 0 config check "$TMP/relay.yaml" && no_secret_in "$PW" "$OUT" "config check"

# ------------------------------------------------------------ rotation
# A relay from that file; the password changed (updateUser, with pymongo)
# and the server restarted under it, so that it must log in again.
MPW=$PW background rotate "$OUTBOX" relay --config "$TMP/relay.yaml" --log-format json
R=$BG_PID
_drained() { [ "$(rows)" = "0 0 $SEQ 0" ]; }
wait_until 60 _drained && pass "the config relay drained the rows the refusals left" ||
    fail "the config relay left: $(rows)"
NEWPW=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
"$PY" - "$PLAIN" "$NEWPW" <<'PYEOF' >"$TMP/update.out" 2>&1 || fail "updateUser: $(tail -1 "$TMP/update.out")"
import sys, pymongo
client = pymongo.MongoClient(sys.argv[1])
client.outbox_test.command("updateUser", "outbox", pwd=sys.argv[2])
PYEOF
server ferretdb "$DIR" stop
server ferretdb "$DIR" start
PLAIN=${PLAIN/:$PW@/:$NEWPW@}
URI=${URI/:$PW@/:$NEWPW@}
stage_load "$PLAIN" "$ROUTE" 200 8 100
_refused() { grep -q 'Authentication failed' "$TMP/rotate.log"; }
wait_until 30 _refused && pass "with the password changed the relay cannot log in again: $(grep -m1 -o '"msg":"[^"]*Authentication failed[^"]*' "$TMP/rotate.log" | cut -c1-200)" ||
    fail "no refusal in the relay's log after the change: $(tail -1 "$TMP/rotate.log")"
sleep 1
st=$(rows)
set -- $st
[ "$1" -gt 0 ] && [ "$4" = 0 ] && pass "meanwhile rows wait and none is dead ($st)" || fail "while locked out: $st"
for s in "$PW" "$NEWPW"; do no_secret_in "$s" "$TMP/rotate.log" "the locked-out relay's JSON log"; done
kill -0 "$R" 2>/dev/null && pass "the relay keeps running while refused" || fail "the relay died: $(tail -4 "$TMP/rotate.log" | cut -c1-300)"
stop_process "$R" TERM
[ "$RC" = 0 ] || fail "the locked-out relay exited $RC on SIGTERM"
MPW=$NEWPW background rotated "$OUTBOX" relay --config "$TMP/relay.yaml"
R=$BG_PID
wait_until 60 _drained && pass "restarted with the new password from \${MPW}, the relay published the rest" ||
    fail "after the restart: $(rows)"
stop_process "$R" TERM
PW=$NEWPW

# ------------------------------------------------------------ another name
server ferretdb "$DIR" stop
OUTBOX_MONGO_TLS_CERT=wronghost server ferretdb "$DIR" start
store_refused wrong_host "$URI" "TLS handshake failed.*(host|name)" \
    "a server certificate for another host name" "$PW"

# ------------------------------------------------------------ client certificate
server ferretdb "$DIR" stop
OUTBOX_MONGO_TLS_VERIFY=1 server ferretdb "$DIR" start
store_refused no_cert "$URI" "the server closed the TLS session: one that requires a client certificate, tlsCertificateKeyFile, does this.*(Failed to receive length header|connection closed)" \
    "no client certificate where the server requires one" "$PW"
cat "$T/client.pem" "$T/client.key" >"$TMP/client-bundle.pem"
chmod 600 "$TMP/client-bundle.pem"
"$OUTBOX" relay --store "$URI&tlsCertificateKeyFile=$TMP/client-bundle.pem" --route "$ROUTE" --sink "file:$EVENTS" \
    --until-idle 2>"$TMP/cert.err"
rc=$?
[ "$rc" = 0 ] && [ "$(rows)" = "0 0 $SEQ 0" ] &&
    pass "presenting the client certificate, the relay published the rest" ||
    fail "with the client certificate: exit $rc, $(rows): $(tail -1 "$TMP/cert.err")"
analyze "serials:$SEQ" "$EVENTS" 0
finish
