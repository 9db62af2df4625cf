#!/usr/bin/env bash
# The Redis Streams sink with an ACL user, as a user meets it: a private
# redis-server in the ACL mode of tools/services/redis.sh (a user "outbox"
# with a random password). TLS is not among the cases: the Debian hiredis
# the sink is built on has none, and `rediss://` is refused at open, which
# is checked here (docs/sinks.md says how to put a TLS tunnel in front).
#
# Checks: a relay drains as the ACL user, end to end (read back with
# redis-py: nothing lost, per-key order); a wrong password and `rediss://`
# each end `outbox relay` with exit 2 and one line naming the cause, every
# row still pending and uncharged; the password shows in no log format and
# not in `outbox config check`; a password changed on the server under a
# running relay locks it out without losing anything, and the relay
# restarted with the new password from ${ENV} publishes the rest.
#
#   redis_auth.sh OUTBOX_CLI
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
. "$(dirname "$0")/secure.sh"
need_cmd redis-cli redis-tools
need_python

ROUTE=orders
OUTBOX_REDIS_ACL=1 private_server redis redis
eval "$("$SERVICES/redis.sh" env "$PRIV_DIR")"
PORT=$OUTBOX_REDIS_PORT
PW=$OUTBOX_REDIS_ACL_PASSWORD
cli() { redis-cli -h 127.0.0.1 -p "$PORT" --no-auth-warning "$@"; }
readback() {
    "$PY" "$HARNESS_DIR/../integration/redis/read_stream.py" "$OUTBOX_REDIS_URI" "$ROUTE" "$TMP/read.jsonl" \
        >"$TMP/read.out" 2>&1 || fail "read_stream.py: $(tail -1 "$TMP/read.out")"
    staged_sqlite "$TMP/staged"
    analyze "$TMP/staged.ids" "$TMP/read.jsonl" "$1"
}

secure_store
stage_load "$S" "$ROUTE" 1000 16 500
RPW=$PW "$OUTBOX" relay --store "$S" --route "$ROUTE" --sink "redis://outbox@127.0.0.1:$PORT?password_env=RPW" \
    --until-idle 2>"$TMP/happy.err" </dev/null
rc=$?
[ "$rc" = 0 ] && pass "a relay as the ACL user drained with exit 0" ||
    fail "the relay as the ACL user exited $rc: $(tail -1 "$TMP/happy.err")"
stage_load "$S" "$ROUTE" 40 4 40
RPW=$PW sink_refused rediss "rediss://outbox@127.0.0.1:$PORT?password_env=RPW" \
    "rediss:// \(TLS\) is not supported: the hiredis 0\.14 this sink is built with has no TLS" \
    "rediss://" "$PW"
sink_refused bad_password "redis://outbox:not-the-password@127.0.0.1:$PORT" \
    "AUTH refused: WRONGPASS invalid username-password pair" "a wrong password" "not-the-password"
for fmt in text logfmt json; do
    "$OUTBOX" relay --store "$S" --route "$ROUTE" --sink "redis://outbox:not-the-password@127.0.0.1:$PORT" \
        --until-idle --log-format "$fmt" 2>"$TMP/fmt-$fmt.err"
    no_secret_in "not-the-password" "$TMP/fmt-$fmt.err" "--log-format $fmt, wrong password"
done

# ------------------------------------------------------------ rotation
cat >"$TMP/relay.yaml" <<EOF
stores:
  db: {uri: "$S"}
sinks:
  streams: {uri: "redis://outbox:\${RPW}@127.0.0.1:$PORT?timeout=2s"}
routes:
  $ROUTE: {store: db, sink: streams, batch: 20, poll: 20ms, backoff_base: 100ms, backoff_cap: 500ms}
EOF
RPW=$PW expect 0 config check "$TMP/relay.yaml" && no_secret_in "$PW" "$OUT" "config check"
RPW=$PW background rotate "$OUTBOX" relay --config "$TMP/relay.yaml" --log-format logfmt
R=$BG_PID
_drained() { [ "$(sql "SELECT count(*) FROM outbox WHERE status <> 'published'")" = 0 ]; }
wait_until 60 _drained && pass "the config relay drained the rows the refusals left" ||
    fail "the config relay left: $(pending_state)"
NEWPW=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
[ "$(cli ACL SETUSER outbox resetpass ">$NEWPW")" = OK ] || fail "changing the password"
killed=$(cli CLIENT KILL USER outbox)
[ "${killed:-0}" -gt 0 ] || fail "the relay had no connection to cut: $killed"
stage_load "$S" "$ROUTE" 200 8 100
_refused() { grep -q 'WRONGPASS' "$TMP/rotate.log"; }
wait_until 30 _refused && pass "with the password changed the relay cannot log in again: $(grep -m1 -o 'AUTH refused: WRONGPASS[^"]*' "$TMP/rotate.log" | head -1)" ||
    fail "no refusal in the relay's log after the change: $(tail -1 "$TMP/rotate.log")"
sleep 1
[ "$(sql "SELECT count(*) FROM outbox WHERE status = 'dead'")" = 0 ] &&
    [ "$(sql "SELECT count(*) FROM outbox WHERE status = 'pending'")" -gt 0 ] &&
    pass "meanwhile rows wait and none is dead" || fail "while locked out: $(pending_state)"
for s in "$PW" "$NEWPW"; do no_secret_in "$s" "$TMP/rotate.log" "the locked-out relay's log"; done
kill -0 "$R" 2>/dev/null && pass "the relay keeps running while refused" || fail "the relay died"
stop_process "$R" TERM
[ "$RC" = 0 ] || fail "the locked-out relay exited $RC on SIGTERM"
RPW=$NEWPW background rotated "$OUTBOX" relay --config "$TMP/relay.yaml"
R=$BG_PID
wait_until 60 _drained && pass "restarted with the new password from \${RPW}, the relay published the rest" ||
    fail "after the restart: $(pending_state)"
stop_process "$R" TERM
# Cutting the connections may catch a batch between its XADD and its
# settle: at most one pipeline of batches again.
readback $((PIPELINE * 20))
finish
