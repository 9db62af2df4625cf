#!/usr/bin/env bash
# outbox relay as a service: log formats (text, logfmt, JSON), a log file
# that SIGHUP reopens, retention (the periodic purge of old published rows)
# and systemd's notify protocol (READY, WATCHDOG, STOPPING) when the build
# has libsystemd.
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"

PY=${OUTBOX_PYTHON:-python3}
F=$TMP/relay.yaml

# ------------------------------------------------------------ log formats
new_db fmt
expect 0 stage --store "sqlite://$DB" --route orders --type t --count 5
for format in logfmt json; do
    if expect 0 relay --store "sqlite://$DB" --route orders --sink null: --until-idle \
        --log-format "$format" --verbose; then
        lines=$(wc -l <"$ERR")
        if [ "$format" = json ]; then
            bad=$("$PY" -c '
import json, sys
bad = 0
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
        ok = set(r) >= {"ts", "level", "msg"} and r["ts"].endswith("Z")
    except ValueError:
        ok = False
    bad += not ok
print(bad)' "$ERR")
        else
            bad=$(grep -Evc '^ts=[0-9T:.-]+Z level=(debug|info|warning|error)( route=[^ ]+)? msg=' "$ERR")
        fi
        if [ "$lines" -gt 0 ] && [ "$bad" = 0 ]; then
            pass "--log-format $format: all $lines lines are records with ts, level and msg"
        else
            fail "--log-format $format: $bad of $lines lines malformed: $(head -c 400 "$ERR")"
        fi
        grep -Eq 'route=orders|"route":"orders"' "$ERR" && pass "--log-format $format: the route is a field" ||
            fail "--log-format $format: no route field: $(head -c 300 "$ERR")"
    fi
done
# A message with a quote and a newline stays one record of its format.
if expect 0 relay --store "sqlite://$DB" --route 'we"ird' --sink null: --until-idle --log-format json; then
    "$PY" -c '
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert any(r.get("route") == "we\"ird" for r in recs), recs' "$ERR" &&
        pass "JSON escapes a quote in a route name" || fail "JSON with a quote: $(cat "$ERR")"
fi
expect_error 'relay: --log-format: "yaml" is not a log format \(text, logfmt, json\)' \
    relay --store "sqlite://$DB" --route orders --sink null: --log-format yaml
expect_error "cannot open the log file $TMP/no/such/dir/log: No such file or directory" \
    relay --store "sqlite://$DB" --route orders --sink null: --log-file "$TMP/no/such/dir/log"
expect_error 'relay: --log-file must not be empty' \
    relay --store "sqlite://$DB" --route orders --sink null: --log-file ''

# Secrets stay masked in every format.
for format in text logfmt json; do
    run relay --store "sqlite://$DB" --route orders --sink 'nats://u:s3cr3t-pw@127.0.0.1:1/x' \
        --until-idle --log-format "$format"
    if grep -q 's3cr3t-pw' "$ERR"; then
        fail "--log-format $format printed the sink's password"
    else
        pass "--log-format $format: the password is masked (exit $RC)"
    fi
done

# ------------------------------------------------- the log file and SIGHUP
new_db hup
expect 0 stage --store "sqlite://$DB" --route orders --type t --count 3
LOG=$TMP/relay.log
${OUTBOX_CLI_WRAPPER:-} "$OUTBOX" relay --store "sqlite://$DB" --route orders --sink null: \
    --log-file "$LOG" --log-format logfmt >"$TMP/hup.out" 2>"$TMP/hup.err" &
pid=$!
wait_until 10 lines_match "$LOG" 'starting 1 worker'
grep -q 'level=info route=orders msg="relay orders: starting 1 worker' "$LOG" &&
    pass "the log goes to the file" || fail "log file: $(cat "$LOG" 2>/dev/null) / stderr: $(cat "$TMP/hup.err")"
mv "$LOG" "$LOG.1"
kill -HUP "$pid"
for _ in $(seq 1 200); do
    [ -s "$LOG" ] && break
    sleep 0.05
done
if grep -q "log file $LOG reopened" "$LOG" 2>/dev/null && kill -0 "$pid" 2>/dev/null; then
    pass "SIGHUP reopens the log file at its path, and the relay goes on"
else
    fail "SIGHUP: new file: $(cat "$LOG" 2>/dev/null); running: $(kill -0 "$pid" 2>&1 && echo yes)"
fi
grep -q 'reopened' "$LOG.1" && fail "the reopen line went to the rotated file" ||
    pass "the rotated file is let go"
stop_process "$pid" TERM
[ "$RC" -eq 0 ] && pass "SIGTERM after SIGHUP: exit 0" || fail "exit $RC: $(cat "$TMP/hup.err")"
grep -q 'relay orders: stopped' "$LOG" && pass "the stop line is in the new file" ||
    fail "new file: $(cat "$LOG")"
[ ! -s "$TMP/hup.err" ] || grep -q '^outbox: relay orders: claimed 3, published 3' "$TMP/hup.err" &&
    pass "stderr holds only the summary" || fail "stderr: $(cat "$TMP/hup.err")"

# --------------------------------------------------------------- retention
new_db keep
expect 0 stage --store "sqlite://$DB" --route old --type t --count 40
expect 0 stage --store "sqlite://$DB" --route kept --type t --count 10
expect 0 relay --store "sqlite://$DB" --route old --sink null: --until-idle --quiet
expect 0 relay --store "sqlite://$DB" --route kept --sink null: --until-idle --quiet
# Published two hours ago, as far as the purge can tell.
sqlite3 "$DB" "UPDATE outbox SET published_at = published_at - 7200000000 WHERE outbox_route = 'old'"
expect 0 stage --store "sqlite://$DB" --route old --type t --count 5
cat >"$F" <<EOF
stores:
  app: {uri: "sqlite://$DB"}
sinks:
  out: {uri: "null:"}
routes:
  old: {store: app, sink: out, retention: 1h, purge_interval: 1s}
  kept: {store: app, sink: out}
EOF
expect 0 config check "$F" && grep -q '^route old: .*, purges published rows after 3600s every 1s$' "$OUT" &&
    pass "config check describes the retention" || fail "config check: $(cat "$OUT" "$ERR")"
${OUTBOX_CLI_WRAPPER:-} "$OUTBOX" relay --config "$F" >"$TMP/keep.out" 2>"$TMP/keep.err" &
pid=$!
wait_until 30 lines_match "$TMP/keep.err" 'purged 40 published rows'
stop_process "$pid" TERM
grep -q 'relay old: purged 40 published rows older than the retention' "$TMP/keep.err" &&
    pass "retention purged the old published rows and said how many" ||
    fail "no purge line: $(head -c 600 "$TMP/keep.err")"
left_old=$(sqlite3 "$DB" "SELECT count(*) FROM outbox WHERE outbox_route = 'old'")
left_kept=$(sqlite3 "$DB" "SELECT count(*) FROM outbox WHERE outbox_route = 'kept'")
[ "$left_old" = 5 ] && [ "$left_kept" = 10 ] &&
    pass "the young rows and the route without retention are untouched" ||
    fail "rows left: old $left_old (want 5), kept $left_kept (want 10)"
[ "$RC" -eq 0 ] && pass "retention: SIGTERM exits 0" || fail "retention run exit $RC: $(cat "$TMP/keep.err")"

cfg_bad() {
    printf '%s\n' 'stores: {app: {uri: "sqlite:///x.db"}}' 'sinks: {out: {uri: "null:"}}' "$1" >"$F"
    expect_error "$2" config check "$F"
}
cfg_bad 'routes: {r: {store: app, sink: out, retention: soon}}' "^outbox: $F:3: route r: retention: "
cfg_bad 'routes: {r: {store: app, sink: out, retention: 0s}}' "^outbox: $F:3: route r: retention must be longer than 0"
cfg_bad 'routes: {r: {store: app, sink: out, purge_interval: 5m}}' "^outbox: $F:3: route r: purge_interval without retention"

# ------------------------------------------------------- systemd's notify
# The unit the project ships runs outbox relay with Type=notify.
unit=$(dirname "$0")/../../tools/systemd/outbox-relay.service
grep -q '^Type=notify$' "$unit" && grep -q '^ExecStart=.*outbox relay --config' "$unit" &&
    grep -q '^ExecReload=/bin/kill -HUP \$MAINPID$' "$unit" &&
    pass "the shipped unit is Type=notify, runs --config and reloads with SIGHUP" ||
    fail "tools/systemd/outbox-relay.service is not what the docs say"
if "$OUTBOX" --version 2>/dev/null | grep -q 'systemd notify no'; then
    skip_part "the notify checks: this outbox was built without libsystemd (install libsystemd-dev)"
else
    new_db notify
    expect 0 stage --store "sqlite://$DB" --route orders --type t --count 3
    # A notify socket of our own, as systemd would give, with a watchdog of 1 s.
    "$PY" - "$TMP/notify.sock" "$TMP/notify.log" <<'EOF' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(60)
with open(sys.argv[2], "w", buffering=1) as log:
    try:
        while True:
            msg = s.recv(4096).decode()
            log.write(msg.replace("\n", "|") + "\n")
            if "STOPPING=1" in msg:
                break
    except socket.timeout:
        pass
EOF
    listener=$!
    for _ in $(seq 1 100); do [ -S "$TMP/notify.sock" ] && break; sleep 0.05; done
    NOTIFY_SOCKET=$TMP/notify.sock WATCHDOG_USEC=1000000 \
        ${OUTBOX_CLI_WRAPPER:-} "$OUTBOX" relay --store "sqlite://$DB" --route orders --sink null: \
        >"$TMP/notify.out" 2>"$TMP/notify.err" &
    pid=$!
    wait_until 10 lines_match "$TMP/notify.log" 'WATCHDOG=1' 3
    stop_process "$pid" TERM
    wait "$listener"
    grep -q '^READY=1|STATUS=relaying 1 route with 1 worker$' "$TMP/notify.log" &&
        pass "READY=1 with a status once the workers run" || fail "notify: $(cat "$TMP/notify.log")"
    [ "$(grep -c '^WATCHDOG=1$' "$TMP/notify.log")" -ge 3 ] &&
        pass "WATCHDOG=1 at half the watchdog interval" || fail "watchdog: $(cat "$TMP/notify.log")"
    grep -q '^STOPPING=1|' "$TMP/notify.log" && pass "STOPPING=1 on SIGTERM" ||
        fail "no STOPPING: $(cat "$TMP/notify.log")"
    [ "$RC" -eq 0 ] && pass "notify run: exit 0" || fail "notify run: exit $RC: $(cat "$TMP/notify.err")"
fi

finish
