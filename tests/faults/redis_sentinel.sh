#!/usr/bin/env bash
# Redis Sentinel failover under a running relay. A private primary, its
# replica and a Sentinel watching them (tools/services/redis.sh); the relay
# publishes from SQLite through the Sentinel (sentinel=outbox) and counts an
# entry only once the replica has it too (wait_replicas=1). The primary is
# killed with SIGKILL while the relay is at work; the Sentinel promotes the
# replica, and the relay finds it by itself; the old primary is restarted
# and becomes the new one's replica. Then, read back from the new primary
# with redis-py: every event there (nothing a dead primary acknowledged
# was lost), each key in staging order, duplicates counted (each retry
# while the new primary has no replica adds its batch again) and bounded,
# every row published and none dead, and the kill hit the relay with rows
# in hand (its counters show retries or releases).
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
need_cmd redis-cli redis-tools
need_cmd redis-sentinel redis-sentinel
need_python
announce_seed
HERE=$(cd "$(dirname "$0")/../integration/redis" && pwd)

private_server redis primary
PRIMARY_DIR=$PRIV_DIR
"$SERVICES/redis.sh" replica "$TMP/replica" "$PRIMARY_DIR" >"$TMP/replica.env" 2>"$TMP/replica.err" ||
    skip "no replica would start: $(tail -1 "$TMP/replica.err")" "see tools/services/redis.sh"
_SERVERS+=("redis:$TMP/replica")
"$SERVICES/redis.sh" sentinel "$TMP/sentinel" "$PRIMARY_DIR" outbox >"$TMP/sentinel.env" 2>"$TMP/sentinel.err" ||
    skip "no sentinel would start: $(tail -1 "$TMP/sentinel.err")" "see tools/services/redis.sh"
_SERVERS+=("redis:$TMP/sentinel")
SPORT=$(sed -n 's/^export OUTBOX_REDIS_SENTINEL_PORT=//p' "$TMP/sentinel.env")
master_port() {
    redis-cli -p "$SPORT" --raw sentinel get-master-addr-by-name outbox 2>/dev/null | sed -n 2p
}
OLD=$(master_port)
check "the Sentinel's master is the primary" "$(cat "$PRIMARY_DIR/port")" "$OLD"

new_db sentinel
BATCH=50
stage_load "sqlite:$DB" orders 6000 12 500
SINK="redis://127.0.0.1:$SPORT/orders?sentinel=outbox&wait_replicas=1&wait_timeout=2s&timeout=2s"
background relay "$OUTBOX" relay --store "sqlite:$DB" --route orders --sink "$SINK" --batch $BATCH \
    --poll 10ms --backoff-base 500ms --backoff-cap 2s
R=$BG_PID
published() { sql "SELECT count(*) FROM outbox WHERE status = 'published'"; }
some() { [ "$(published)" -gt 500 ]; }
wait_until 60 some || { fail "the relay published nothing through the Sentinel: $(tail -1 "$TMP/relay.log")"; finish; }
t0=$(date +%s%N)
"$SERVICES/redis.sh" kill "$PRIMARY_DIR" >/dev/null 2>&1 || fail "could not kill the primary"
at_kill=$(published)
moved() { p=$(master_port); [ -n "$p" ] && [ "$p" != "$OLD" ]; }
if wait_until 60 moved; then
    pass "the Sentinel promoted the replica (port $(master_port)) $(( ($(date +%s%N) - t0) / 1000000 )) ms after the kill"
else
    fail "the Sentinel still names $(master_port) 60 s after the primary was killed"
fi
# The new primary has no replica until the old one comes back: with
# wait_replicas=1 nothing it adds counts meanwhile (RETRY, added again
# later). Restarted, the old primary is made a replica of the new one by
# the Sentinel.
"$SERVICES/redis.sh" start "$PRIMARY_DIR" >/dev/null 2>"$TMP/restart.err" ||
    fail "the old primary did not restart: $(tail -1 "$TMP/restart.err")"
replicated() {
    redis-cli -p "$(master_port)" INFO replication 2>/dev/null | tr -d '\r' | grep -q '^connected_slaves:[1-9]'
}
wait_until 60 replicated && pass "the old primary rejoined as a replica of the new one" ||
    fail "the new primary has no replica 60 s after the old one restarted"
# A backlog staged after the failover must go to the new primary too.
stage_load "sqlite:$DB" orders 1000 12 500
drained() { [ "$(sql "SELECT count(*) FROM outbox WHERE status <> 'published'")" = 0 ]; }
wait_until 120 drained || fail "not drained 120 s after the failover: $(tail -1 "$TMP/relay.log")"
pause_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
stop_process "$R" TERM
[ "$RC" = 0 ] || fail "the relay exited $RC on SIGTERM: $(tail -1 "$TMP/relay.log")"
met=$(sed -n 's/.*stopped ([^)]*): claimed [0-9]*, published [0-9]*, retried \([0-9]*\), dead [0-9]*, released \([0-9]*\).*/\1 \2/p' "$TMP/relay.log" | tail -1)
if [ -n "$met" ] && [ $((${met% *} + ${met#* })) -gt 0 ] && [ "$at_kill" -lt "$STAGED" ]; then
    pass "the kill met the relay at work ($at_kill of $STAGED published): retried, released = $met"
else
    fail "the kill did not meet the relay at work (published $at_kill of $STAGED; retried, released = ${met:-?})"
fi
check "rows total|published|dead" "$STAGED|$STAGED|0" \
    "$(sql "SELECT count(*), sum(status = 'published'), sum(status = 'dead') FROM outbox")"
staged_sqlite "$TMP/staged"
"$PY" "$HERE/read_stream.py" "redis://127.0.0.1:$(master_port)" orders "$TMP/read.jsonl" "$TMP/staged" orders \
    >"$TMP/read.out" 2>&1 || fail "read_stream.py: $(tail -3 "$TMP/read.out")"
cat "$TMP/read.out"
analyze "$TMP/staged.ids" "$TMP/read.jsonl" $((40 * BATCH))
dups=$(( $(wc -l <"$TMP/read.jsonl") - STAGED ))
echo "figures: faults 1 (primary SIGKILL, Sentinel failover), events $STAGED, duplicates $dups, kill to drained ${pause_ms} ms"
finish
