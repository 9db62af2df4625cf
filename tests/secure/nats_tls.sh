#!/usr/bin/env bash
# NATS JetStream over TLS with authentication, as a user meets it: private
# servers in the TLS mode of tools/services/nats.sh (certificates from
# tools/services/tls.sh, user outbox with a password; one server that also
# requires a client certificate, one that presents a certificate for another
# host name), `outbox relay` from SQLite to them, and nats-py reading back
# over TLS (an ssl.SSLContext that trusts the test CA).
#
# Checks: a relay over TLS with the password publishes every event, and
# nats-py reads each back once, none missing, none foreign, per-key order,
# from a connection the server saw with TLS as user outbox; a CA that did not
# sign the server, a server certificate for another host name, a wrong
# password and a missing client certificate each end `outbox relay
# --until-idle` with exit 2 and a last line naming the cause, with every row
# still pending and no attempt charged; with the client certificate the
# relay publishes end to end; no password appears in the relay's log (text,
# logfmt, json), in the rows' last_error or in `outbox config check`; a
# password changed on the server under a running relay stops it from
# publishing (rows wait, nothing dead), and the relay restarted with the new
# password from ${ENV} in its config file publishes the rest, each event
# once in the stream. A second user logs in with an nkey (public key in the
# URI, seed in a file): a relay publishes end to end with it, the seed of
# another key is refused as above, no seed is printed, and each mistake in
# the nkey options is one line at open with exit 2.
#
#   nats_tls.sh OUTBOX_CLI
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
need_cmd sqlite3 sqlite3
need_cmd curl curl
need_python

ROUTE=orders
SUBJECT=orders
FAST=(--backoff-base 20ms --backoff-cap 100ms)

# nats-py over TLS, with TLS_CA (and TLS_CERT, TLS_KEY) from the
# environment: `js.py add URL SUBJECT` makes the stream; `js.py read ...`
# is tests/integration/nats/read_stream.py (its arguments, its checks) with
# every connection it makes on that context.
cat >"$TMP/js.py" <<'PYEOF'
import asyncio, os, ssl, sys
import nats
from nats.js.api import StreamConfig, StorageType

ctx = ssl.create_default_context(cafile=os.environ["TLS_CA"])
if os.environ.get("TLS_CERT"):
    ctx.load_cert_chain(os.environ["TLS_CERT"], os.environ["TLS_KEY"])
plain_connect = nats.connect


async def connect(url, **kw):
    return await plain_connect(url, tls=ctx, tls_hostname="localhost", **kw)


nats.connect = connect
if sys.argv.pop(1) == "add":
    async def add(url, subject):
        nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=3)
        await nc.jetstream().add_stream(StreamConfig(
            name=subject, subjects=[subject], storage=StorageType.FILE, duplicate_window=600))
        await nc.close()
    asyncio.run(add(sys.argv[1], sys.argv[2]))
else:
    sys.path.insert(0, os.environ["READ_STREAM_DIR"])
    import read_stream
    sys.exit(read_stream.readback.main(read_stream.read, read_stream.after, read_stream.__doc__))
PYEOF
export READ_STREAM_DIR=$SRC_ROOT/tests/integration/nats

# server_vars DIR: the exports of the TLS-mode server in DIR as S_DIR,
# S_PW, S_T (the certificates), S_PORT, S_MPORT, S_URI (the sink URI for
# SUBJECT) and S_NC (the URL nats-py takes).
server_vars() {
    local env
    env=$("$SERVICES/nats.sh" env "$1") || { fail "no exports from $1"; finish; }
    eval "$env"
    S_DIR=$1
    S_PW=$OUTBOX_NATS_PASSWORD
    S_T=$OUTBOX_NATS_TLS_DIR
    S_PORT=$OUTBOX_NATS_PORT
    S_MPORT=$(cat "$1/monitor_port")
    S_URI=${OUTBOX_NATS_TLS_URI/\?//$SUBJECT?}
    S_NC=nats://outbox:$S_PW@localhost:$S_PORT
}

# add_stream [cert]: the stream for SUBJECT on the S_ server, made by
# nats-py over TLS (with the client certificate).
add_stream() {
    TLS_CA=$S_T/ca.pem TLS_CERT=${1:+$S_T/client.pem} TLS_KEY=${1:+$S_T/client.key} \
        "$PY" "$TMP/js.py" add "$S_NC" "$SUBJECT" >"$TMP/add.out" 2>&1 ||
        { fail "nats-py could not add stream $SUBJECT over TLS: $(tail -1 "$TMP/add.out")"; finish; }
}

# read_back NAME URL [cert]: nats-py reads the server's stream over TLS
# into $TMP/NAME.jsonl and checks it against what $DB staged (read_stream.py),
# then analyze: nothing lost or foreign, no duplicate, per-key order.
read_back() {
    local name=$1 url=$2 rc
    staged_sqlite "$TMP/$name.staged" "$ROUTE"
    TLS_CA=$S_T/ca.pem TLS_CERT=${3:+$S_T/client.pem} TLS_KEY=${3:+$S_T/client.key} \
        "$PY" "$TMP/js.py" read "$url" "$SUBJECT" "$TMP/$name.jsonl" "$TMP/$name.staged" "$ROUTE" \
        >"$TMP/$name.read" 2>&1
    rc=$?
    grep -v '^ok: ' "$TMP/$name.read"
    [ $rc = 0 ] && pass "$name: nats-py read the stream over TLS, every check of read_stream.py passed" ||
        fail "$name: read_stream.py over TLS exited $rc: $(grep -m1 FAIL "$TMP/$name.read")"
    analyze "$TMP/$name.staged.ids" "$TMP/$name.jsonl" 0
}

# no_secret SECRET FILE WHAT: no_secret_in, on a FILE that must be there
# (grep finds nothing in a file that is not).
no_secret() {
    [ -s "$2" ] || { fail "$3: $2 is missing or empty"; return; }
    no_secret_in "$@"
}

# rows: "pending published dead attempts" of $DB.
rows() {
    sql "SELECT count(*) FILTER (WHERE status = 'pending') || ' ' || count(*) FILTER (WHERE status = 'published')
         || ' ' || count(*) FILTER (WHERE status = 'dead') || ' ' || coalesce(sum(attempts), 0) FROM outbox"
}

# seen_by_server NAME: how the server saw the connections named NAME, open
# or closed: "COUNT TLS_VERSIONS USERS".
seen_by_server() {
    curl -fsS "http://127.0.0.1:$S_MPORT/connz?state=all&auth=1&limit=10000" | python3 -c '
import json, sys
cs = [c for c in json.load(sys.stdin)["connections"] if c.get("name") == sys.argv[1]]
print(len(cs), ",".join(sorted({c.get("tls_version", "none") for c in cs})) or "-",
      ",".join(sorted({c.get("authorized_user", "none") for c in cs})) or "-")' "$1"
}

# drains NAME URI WHAT [USER]: a relay on URI publishes $DB's route with
# exit 0, every row published, over a connection the server saw with TLS
# as USER (default outbox; "none" for an nkey, which nats-server 2.9 does
# not record on a closed connection).
drains() {
    local name=$1 uri=$2 what=$3 user=${4:-outbox} rc seen
    outbox relay --store "sqlite:$DB" --route "$ROUTE" --sink "$uri&name=$name" --until-idle \
        2>"$TMP/$name.log"
    rc=$?
    [ $rc = 0 ] && pass "$what: the relay drained with exit 0 ($(tail -1 "$TMP/$name.log"))" ||
        fail "$what: the relay exited $rc: $(tail -1 "$TMP/$name.log")"
    [ "$(sql "SELECT count(*) FROM outbox WHERE status <> 'published'")" = 0 ] &&
        pass "$what: every row published" || fail "$what: pending/published/dead/attempts = $(rows)"
    seen=$(seen_by_server "$name")
    [ "${seen%% *}" -gt 0 ] && [[ "$seen" =~ ^[0-9]+\ 1\.[23]\ $user$ ]] &&
        pass "$what: the server saw it over TLS as user $user (connections, TLS, user: $seen)" ||
        fail "$what: the server's record of the relay's connections (count, TLS, user): $seen"
    no_secret "$S_PW" "$TMP/$name.log" "$what: the log"
}

# refused NAME URI PATTERN WHAT [FORMAT]: a relay on URI under
# --until-idle exits 2, its last line (the reason it gave up) matches
# PATTERN (grep -E), and no row changed: all still pending, no attempt
# charged, nothing dead.
refused() {
    local name=$1 uri=$2 pattern=$3 what=$4 fmt=${5:-text} before rc last
    before=$(rows)
    outbox relay --store "sqlite:$DB" --route "$ROUTE" --sink "$uri" --until-idle "${FAST[@]}" \
        --log-format "$fmt" >"$TMP/$name.out" 2>"$TMP/$name.log"
    rc=$?
    last=$(tail -1 "$TMP/$name.log")
    if [ $rc = 2 ] && grep -Eq -- "$pattern" <<<"$last"; then
        pass "$what: exit 2, saying: ${last//$S_PW/***}"
    else
        fail "$what: exit $rc (expected 2), last line not matching /$pattern/: ${last//$S_PW/***}"
    fi
    [ "$(rows)" = "$before" ] && pass "$what: rows untouched (pending/published/dead/attempts $before)" ||
        fail "$what: rows changed: $before -> $(rows)"
    no_secret "$S_PW" "$TMP/$name.log" "$what: the log ($fmt), the server's password,"
    sql "SELECT coalesce(last_error, '') FROM outbox" >"$TMP/$name.errors"
    no_secret "$S_PW" "$TMP/$name.errors" "$what: the rows' last_error"
}

started=$SECONDS
# ------------------------------------------------ the password server
OUTBOX_NATS_TLS=1 private_server nats plain
A_DIR=$PRIV_DIR
server_vars "$A_DIR"
add_stream
new_db a
DB_A=$DB
stage_load "sqlite:$DB" "$ROUTE" 2000 24 500
drains tls_happy "$S_URI" "over TLS, verifying the server, with user and password"
read_back happy "$S_NC"

# ------------------------------------------------ refusals
stage_load "sqlite:$DB" "$ROUTE" 100 8 100
refused other_ca "${S_URI/ca.pem/other-ca.pem}" \
    'SSL handshake error: 20:unable to get local issuer certificate' "a CA that did not sign the server"
BADPW=wrong$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
for fmt in text logfmt json; do
    refused "bad_password_$fmt" "${S_URI/:$S_PW@/:$BADPW@}" 'Authorization Violation' \
        "a wrong password" "$fmt"
    no_secret "$BADPW" "$TMP/bad_password_$fmt.log" "a wrong password: the log ($fmt), the wrong password,"
done
has "$A_DIR/server.log" 'authentication error' "the server refused the login (it names the nkey field, empty, once nkey users exist)"
cat >"$TMP/bad.yaml" <<EOF
stores:
  db: {uri: "sqlite:$DB"}
sinks:
  out: {uri: "${S_URI/:$S_PW@/:$BADPW@}"}
routes:
  $ROUTE: {store: db, sink: out}
EOF
outbox config check "$TMP/bad.yaml" >"$TMP/bad.check" 2>&1 || fail "config check: $(tail -1 "$TMP/bad.check")"
has "$TMP/bad.check" "sink out \(nats://outbox:\*\*\*@localhost:$S_PORT/" "config check shows the URI with ***"
no_secret "$BADPW" "$TMP/bad.check" "config check of a file with the password in it"

# ------------------------------------------------ the nkey user
# The same server's second user logs in with an nkey: the URI names no user
# and no password, so only the signature made with the seed lets it in.
eval "$("$SERVICES/nats.sh" env "$A_DIR" | grep NKEY)"
SEED=$(cat "$OUTBOX_NATS_NKEY_SEED")
NK_URI="nats://localhost:$S_PORT/$SUBJECT?tls_ca=$S_T/ca.pem&nkey=$OUTBOX_NATS_NKEY&nkey_seed=$OUTBOX_NATS_NKEY_SEED"
drains tls_nkey "$NK_URI" "with the nkey user" none
no_secret "$SEED" "$TMP/tls_nkey.log" "with the nkey user: the log, the seed,"
stage_load "sqlite:$DB" "$ROUTE" 100 8 100
"$SERVICES/nats.sh" nkey "$TMP/other.seed" >/dev/null || fail "no second nkey"
for fmt in text json; do
    refused "bad_seed_$fmt" "${NK_URI/$OUTBOX_NATS_NKEY_SEED/$TMP/other.seed}" 'Authorization Violation' \
        "the nkey with another key's seed" "$fmt"
    no_secret "$SEED" "$TMP/bad_seed_$fmt.log" "another key's seed: the log ($fmt), the user's seed,"
    no_secret "$(cat "$TMP/other.seed")" "$TMP/bad_seed_$fmt.log" "another key's seed: the log ($fmt), that seed,"
done
# Mistakes in the options: one line at open, exit 2, no seed shown.
while IFS='|' read -r query pattern; do
    outbox relay --store "sqlite:$DB" --route "$ROUTE" --sink "nats://localhost:$S_PORT/$SUBJECT?tls=1&$query" \
        --until-idle >"$TMP/nkopt.out" 2>&1
    rc=$?
    last=$(tail -1 "$TMP/nkopt.out")
    [ $rc = 2 ] && [ "$(wc -l <"$TMP/nkopt.out")" = 1 ] && grep -q -- "$pattern" <<<"$last" &&
        pass "nkey option ${query//$SEED/SEED}: exit 2, one line: ${last//$SEED/SEED}" ||
        fail "nkey option ${query//$SEED/SEED}: exit $rc, $(wc -l <"$TMP/nkopt.out") lines, last: ${last//$SEED/SEED}"
    no_secret "$SEED" "$TMP/nkopt.out" "nkey option ${query//$SEED/SEED}"
done <<NKEOF
nkey=$OUTBOX_NATS_NKEY|nkey and nkey_seed go together
nkey=$OUTBOX_NATS_NKEY&nkey_seed=$TMP/no-such-seed|cannot read the nkey_seed file $TMP/no-such-seed: No such file
nkey=$SEED&nkey_seed=$OUTBOX_NATS_NKEY_SEED|nkey holds what looks like a seed
nkey=UABC&nkey_seed=$OUTBOX_NATS_NKEY_SEED|nkey is not a user's public nkey
nkey=$OUTBOX_NATS_NKEY&nkey_seed=$OUTBOX_NATS_NKEY_SEED&token=abc|log in with an nkey, a user name and password or a token, only one
NKEOF

# A server presenting the test CA's certificate for wrong-host.invalid.
OUTBOX_NATS_TLS=1 OUTBOX_NATS_TLS_CERT=wronghost private_server nats wronghost
server_vars "$PRIV_DIR"
refused wrong_host "$S_URI" \
    'SSL handshake error: 62:hostname mismatch:expected=localhost:cert=/CN=wrong-host.invalid' \
    "a server certificate for another host name"

# ------------------------------------------------ client certificates
OUTBOX_NATS_TLS=1 OUTBOX_NATS_TLS_VERIFY=1 private_server nats verify
server_vars "$PRIV_DIR"
add_stream cert
new_db c
stage_load "sqlite:$DB" "$ROUTE" 500 12 100
refused no_cert "${S_URI%%&tls_cert=*}" 'does it require a client certificate\? set tls_cert and tls_key' \
    "no client certificate for a server that requires one"
has "$S_DIR/server.log" "client didn't provide a certificate" "the server refused for want of a client certificate"
drains tls_cert "$S_URI" "with the client certificate"
read_back cert "$S_NC" cert

# ------------------------------------------------ rotation
# Back on the password server: a relay from a config file whose sink URI
# takes the password from ${NATS_PASSWORD}.
server_vars "$A_DIR"
DB=$DB_A
cat >"$TMP/relay.yaml" <<EOF
stores:
  db: {uri: "sqlite:$DB"}
sinks:
  out: {uri: "nats://outbox:\${NATS_PASSWORD}@localhost:$S_PORT/$SUBJECT?tls_ca=$S_T/ca.pem&name=tls_rotate&reconnect_wait=100ms"}
routes:
  $ROUTE: {store: db, sink: out, batch: 50, poll: 20ms, backoff_base: 50ms, backoff_cap: 200ms}
EOF
NATS_PASSWORD=$S_PW outbox config check "$TMP/relay.yaml" >"$TMP/check.out" 2>&1 ||
    fail "config check of the TLS config: $(tail -1 "$TMP/check.out")"
no_secret "$S_PW" "$TMP/check.out" "config check of a file with \${NATS_PASSWORD}"
stage_load "sqlite:$DB" "$ROUTE" 3000 24 500
published() { sql "SELECT count(*) FROM outbox WHERE status = 'published'"; }
mark=$(published)
NATS_PASSWORD=$S_PW background rotate "$OUTBOX" relay --config "$TMP/relay.yaml" --log-format logfmt
R=$BG_PID
wait_started "$TMP/rotate.log" 1 || { fail "the config relay did not start: $(tail -1 "$TMP/rotate.log")"; finish; }
_moved() { [ "$(published)" -gt "$mark" ]; }
wait_until 30 _moved || fail "the config relay published nothing: $(tail -1 "$TMP/rotate.log")"
OLDPW=$S_PW
NEWPW=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
echo "$NEWPW" >"$A_DIR/tls.password"
server nats "$A_DIR" reload
echo "password changed on the server with $(published) rows published and $(rows | cut -d' ' -f1) pending"
_locked_out() { grep -q 'Authorization Violation' "$TMP/rotate.log"; }
wait_until 30 _locked_out &&
    pass "with the password changed the relay cannot publish: $(grep -m1 'Authorization Violation' "$TMP/rotate.log" | cut -c1-400)" ||
    fail "no authorization failure in the relay's log after the change: $(tail -1 "$TMP/rotate.log")"
stage_load "sqlite:$DB" "$ROUTE" 500 8 100
held=$(published)
sleep 1
[ "$(published)" = "$held" ] && [ "$(sql "SELECT count(*) FROM outbox WHERE status = 'dead'")" = 0 ] &&
    [ "$(sql "SELECT count(*) FROM outbox WHERE status = 'pending'")" -ge 500 ] &&
    pass "meanwhile nothing is published and nothing dead ($(rows | cut -d' ' -f1) pending, with $(sql "SELECT coalesce(sum(attempts), 0) FROM outbox WHERE status = 'pending'") attempts charged)" ||
    fail "while locked out: pending/published/dead/attempts = $(rows), $held published before"
kill -0 "$R" 2>/dev/null && pass "the relay keeps running through the refusals" || fail "the relay died"
stop_process "$R" TERM
[ "$RC" = 0 ] || fail "the locked-out relay exited $RC on SIGTERM"
NATS_PASSWORD=$NEWPW background rotated "$OUTBOX" relay --config "$TMP/relay.yaml" --log-format json
R=$BG_PID
_drained() { [ "$(sql "SELECT count(*) FROM outbox WHERE status <> 'published'")" = 0 ]; }
wait_until 60 _drained && pass "restarted with the new password from \${NATS_PASSWORD}, the relay published the rest" ||
    fail "after the restart: pending/published/dead/attempts = $(rows)"
stop_process "$R" TERM
for f in rotate.log rotated.log; do
    no_secret "$OLDPW" "$TMP/$f" "$f, old password"
    no_secret "$NEWPW" "$TMP/$f" "$f, new password"
done
read_back rotation "nats://outbox:$NEWPW@localhost:$S_PORT"
echo "nats_tls: $((SECONDS - started)) s"
finish
