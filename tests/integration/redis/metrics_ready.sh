#!/usr/bin/env bash
# outbox relay --metrics-listen against a private redis-server: /readyz turns
# 503 naming the route when the sink goes down while events are being
# staged, and 200 again once it is back; /healthz is 200 throughout.
. "$(dirname "$0")/../../harness/harness.sh"
use_outbox "$1"
need_cmd curl curl
private_server redis

new_db ready
S=sqlite://$DB
expect 0 stage --store "$S" --route orders --type t --count 20
started=0
for _ in 1 2 3 4 5; do
    PORT=$(private_port)
    background relay "$OUTBOX" relay --store "$S" --route orders --sink "$PRIV_URI/metrics_ready?timeout=1s" \
        --poll 20ms --backoff-base 100ms --backoff-cap 200ms --metrics-listen "127.0.0.1:$PORT"
    for _ in $(seq 1 100); do
        curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && { started=1; break; }
        kill -0 "$BG_PID" 2>/dev/null || break
        sleep 0.1
    done
    [ $started = 1 ] && break
    grep -q "Address already in use" "$TMP/relay.log" || break
done
[ $started = 1 ] || { fail "relay did not start: $(tail -2 "$TMP/relay.log")"; finish; }

# ready_is CODE: until /readyz answers CODE (at most 30 s); its body in $TMP/ready.
ready_is() {
    local code=
    for _ in $(seq 1 300); do
        code=$(curl -s -o "$TMP/ready" -w '%{http_code}' "http://127.0.0.1:$PORT/readyz")
        [ "$code" = "$1" ] && return 0
        sleep 0.1
    done
    return 1
}
health_ok() {
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/healthz")" = 200 ] && pass "healthz 200 $1" ||
        fail "healthz not 200 $1"
}

ready_is 200 && pass "readyz 200 with the sink up" || fail "readyz never 200: $(cat "$TMP/ready")"
health_ok "with the sink up"
server redis "$PRIV_DIR" stop
expect 0 stage --store "$S" --route orders --type t --count 20
if ready_is 503; then
    grep -q '^route orders: sink unavailable' "$TMP/ready" && pass "readyz 503 names the route: $(cat "$TMP/ready")" ||
        fail "readyz 503 body: $(cat "$TMP/ready")"
else
    fail "readyz never 503 with the sink down: $(cat "$TMP/ready")"
fi
curl -s "http://127.0.0.1:$PORT/metrics" | grep -q '^outbox_breaker_open{route="orders"} 1$' &&
    pass "breaker gauge 1 with the sink down" || fail "breaker gauge not 1"
health_ok "with the sink down"
server redis "$PRIV_DIR" start
ready_is 200 && pass "readyz 200 again after the sink is back" || fail "readyz not 200 after restart: $(cat "$TMP/ready")"
health_ok "after the restart"
stop_process "$BG_PID" TERM
[ "$RC" = 0 ] && pass "relay exits 0 on SIGTERM" || fail "relay exit $RC"
finish
