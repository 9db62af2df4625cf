#!/usr/bin/env bash
# SQLite -> a three-node NATS JetStream cluster, with the stream's leader
# crashed under a running relay. A private cluster
# (tools/services/nats-cluster.sh); a file stream of three replicas with a
# 10-minute duplicate window; one relay (two workers) through the NATS sink
# given all three servers; events staged all the time (40 every 0.1 s).
# Faults: the node leading the stream gets SIGKILL while the relay is seen
# publishing a backlog, and is started again once another node leads; the
# next fault waits until all three replicas are current. 2 kills, 5 with
# --long.
#
# A kill counts as caught when the relay was publishing in the moment
# before it, with a backlog left, and the kill held its work: rows still in
# processing 1 s later, or the relay logging the sink unavailable after
# it. Kills go on, up to three times as many, until one was
# caught. Then, once the trickle stops and everything drains: every row
# published, none pending, processing or dead; the stream read back with
# nats-py has every event, each key in staging order by first appearance,
# and no duplicate at all (JetStream drops a repeated Nats-Msg-Id, also
# across a change of leader). Last, one figure line: the pauses the kills
# cost (tests/faults/clusters/figures.py).
#
#   nats_leader.sh OUTBOX_CLI
. "$(dirname "$0")/../../harness/harness.sh"
. "$(dirname "$0")/cluster.sh"
use_outbox "$1"
need_cmd sqlite3 sqlite3
need_python
announce_seed

KILLS=$(long_or 2 5)
STREAM=ORDERS
SUBJECT=orders
ROUTE=orders
BATCH=50
BURST=4000

new_db nats
STORE=sqlite:$DB
private_server nats-cluster
NATS=$PRIV_URI
NDIR=$PRIV_DIR
# nats-py takes one server as a URL; it learns the others from it.
FIRST=nats://$(echo "${NATS#nats://}" | cut -d, -f1)
cluster() {
    "$SERVICES/nats-cluster.sh" "$@"
}
"$PY" - "$FIRST" "$STREAM" "$SUBJECT" >"$TMP/stream.out" 2>&1 <<'PYEOF' || { fail "add stream: $(tail -1 "$TMP/stream.out")"; finish; }
import asyncio, sys, nats
from nats.js.api import StreamConfig, StorageType
async def main():
    nc = await nats.connect(sys.argv[1], connect_timeout=5)
    await nc.jetstream().add_stream(StreamConfig(
        name=sys.argv[2], subjects=[sys.argv[3]], storage=StorageType.FILE,
        num_replicas=3, duplicate_window=600))
    await nc.close()
asyncio.run(main())
PYEOF
# A stream leader is replaced within about 5 s: a publish call waits at most
# 2 s for its acknowledgements before the rest is RETRY, and the relay
# backs off at most 1 s between tries.
SINK="$NATS?timeout=2s&reconnect_wait=100ms"

count() {
    sql "SELECT count(*) FROM outbox WHERE status = '$1'"
}

STARTS=0
relay() {
    STARTS=$((STARTS + 1))
    LOG=$TMP/relay-$STARTS.log
    background "relay-$STARTS" "$OUTBOX" relay --store "$STORE" --route "$ROUTE" --sink "$SINK" \
        --destination "$SUBJECT" --batch "$BATCH" --workers 2 --lease 2s --poll 10ms \
        --backoff-base 100ms --backoff-cap 1s
    RELAY_PID=$BG_PID
    wait_started "$LOG" 2 || fail "the relay did not start: $(tail -1 "$LOG")"
}

# whole: the stream has a live leader and three current replicas.
whole() {
    [ "$(cluster current "$NDIR" "$STREAM" 2>/dev/null)" = 3 ]
}

# caught_up: no more than a few of the trickle's rounds pending.
caught_up() {
    [ "$(count pending)" -le 200 ]
}

# met_fault: relay log lines that say the sink failed (nothing else logs
# them: the store's own transient failures are worded otherwise).
met_fault() {
    grep -cE 'sink (still )?unavailable' "$LOG"
}

start_trickle "$STORE" "$ROUTE"
relay
# The first fault too falls on relays at work, not still starting.
publishing() { [ "$(count published)" -gt 0 ]; }
wait_until 60 publishing || fail "nothing published 60 s after the relays started"
caught=0 k=0
while [ $k -lt "$KILLS" ] || { [ $caught = 0 ] && [ $k -lt $((KILLS * 3)) ]; }; do
    k=$((k + 1))
    wait_until 60 whole || { fail "the stream's replicas were not all current 60 s after kill $((k - 1))"; break; }
    # Each kill from a steady state: what the last one piled up is worked off.
    wait_until 120 caught_up || { fail "still $(count pending) rows pending 120 s after kill $((k - 1))"; break; }
    victim=$(cluster leader "$NDIR" "$STREAM") || { fail "no leader of stream $STREAM"; break; }
    burst "$BURST"
    before=$(count published)
    lines=$(met_fault)
    random_sleep 20 150
    [ "$(sql "SELECT sum(status = 'published') > $before AND sum(status = 'pending') > 0 FROM outbox")" = 1 ] &&
        busy=1 || busy=0
    fault leader "n$victim"
    t=$FAULT_AT
    cluster kill "$NDIR" "$victim" || fail "nats-cluster.sh kill $victim"
    sleep 1
    held=$(count processing)
    led() { cluster leader "$NDIR" "$STREAM" >/dev/null 2>&1; }
    wait_until 60 led || fail "no node leads stream $STREAM 60 s after n$victim was killed"
    elected=$(( $(now_ms) - t ))
    cluster start-node "$NDIR" "$victim" 2>"$TMP/start.err" || fail "n$victim did not start again: $(tail -1 "$TMP/start.err")"
    met=$(( $(met_fault) - lines ))
    echo "leader kill $k: n$victim, a new leader after $elected ms, busy before $busy, rows in processing 1 s after $held, sink failures logged $met"
    [ $busy = 1 ] && { [ "$held" -gt 0 ] || [ $met -gt 0 ]; } && caught=$((caught + 1))
done
[ $caught -gt 0 ] && pass "$caught of $k leader kills caught the relay publishing and held its work" ||
    fail "none of $k leader kills caught the relay publishing: the kills tested nothing"

# The trickle goes on through the last fault's pause, until its backlog is
# worked off, so that the figures see the pause end.
wait_until 120 caught_up || fail "still $(count pending) rows pending 120 s after the last kill"
stop_trickle
drained() { [ "$(sql "SELECT count(*) FROM outbox WHERE status IN ('pending', 'processing')")" = 0 ]; }
wait_until 120 drained || fail "not drained 120 s after the trickle stopped: $(sql "SELECT status, count(*) FROM outbox GROUP BY 1" | tr '\n' ' ')"
stop_process "$RELAY_PID" TERM
[ "$RC" = 0 ] && pass "the relay stopped on SIGTERM with status 0" ||
    fail "the relay exited $RC on SIGTERM: $(tail -1 "$LOG")"
stop_counters "$LOG"
echo "the relay's stop line: retried $RETRIED, released $RELEASED"

got=$(sql "SELECT count(*), sum(status = 'published'), sum(status = 'dead') FROM outbox")
total=${got%%|*}
[ "$got" = "$total|$total|0" ] && pass "all $total rows published, none dead, pending or processing" ||
    fail "rows total|published|dead = $got"

staged_sqlite "$TMP/staged" "$ROUTE"
sql "SELECT event_id, created_at / 1000 FROM outbox" | tr '|' '\t' >"$TMP/times.tsv"
"$PY" "$CLUSTER_HERE/read_nats.py" "$FIRST" "$SUBJECT" "$TMP/read.jsonl" "$TMP/staged" "$ROUTE" >"$TMP/read.out" 2>&1 ||
    fail "read_nats.py exited $?"
cat "$TMP/read.out"
analyze "$TMP/staged.ids" "$TMP/read.jsonl" 0
figures "$TMP/read.jsonl" "$TMP/times.tsv"
finish
