#!/usr/bin/env bash
# The sink link blackholed and partitioned: a relay publishes from SQLite to
# a private NATS JetStream server through toxiproxy. A blackhole (the
# timeout toxic on both directions: the connection stays open, nothing
# gets through, PubAcks never come) lasts 3 s, then a partition (the proxy
# disabled: connections closed, new ones refused) 4 s; --long makes them
# 5 s and 20 s, twice each. Each fault falls on the relay with a backlog in
# hand and published the moment before; it counts once it caught the relay
# with work in hand (a batch held in processing when the fault ends, or
# rows released for want of the sink: "sink unavailable"), and is repeated
# (three tries at most) until it does. After each, the relay must publish
# again.
#
# Checks: every fault caught the relay with work in hand and the relay
# published again after it; every event read back by nats-py
# (tests/integration/nats/read_stream.py: CloudEvents attributes and
# payloads as staged), no duplicates (JetStream drops a repeated
# Nats-Msg-Id), per-key order by first appearance; every row published,
# none dead. The longest pause is the longest gap between two settles
# (published_at) in each fault's window.
#
#   proxy_sink.sh OUTBOX_CLI
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
. "$(dirname "$0")/faults.sh"
need_service toxiproxy
need_cmd curl curl
need_cmd sqlite3 sqlite3
need_python
announce_seed

BLACKHOLE_S=$(long_or 3 5)
PARTITION_S=$(long_or 4 20)
ROUNDS=$(long_or 1 2)
BATCH=50
ROUTE=orders
SUBJECT=faults
private_server nats
NATS_URI=$PRIV_URI
proxy_to sink "$(cat "$PRIV_DIR/port")"
"$PY" - "$NATS_URI" "$SUBJECT" <<'PYEOF' || { fail "add stream $SUBJECT"; finish; }
import asyncio, sys, nats
from nats.js.api import StreamConfig, StorageType
async def main():
    nc = await nats.connect(sys.argv[1])
    await nc.jetstream().add_stream(StreamConfig(
        name=sys.argv[2], subjects=[sys.argv[2]], storage=StorageType.FILE, duplicate_window=600))
    await nc.close()
asyncio.run(main())
PYEOF
new_db sink
LOG=$TMP/relay.log

published() { sql "SELECT count(*) FROM outbox WHERE status = 'published'"; }
pending() { sql "SELECT count(*) FROM outbox WHERE status = 'pending'"; }
processing() { sql "SELECT count(*) FROM outbox WHERE status = 'processing'"; }
now() { date +%s.%6N; }
# outages: how many times the relay found the sink unavailable.
outages() { grep -c "sink unavailable" "$LOG"; }

BACKLOG=3000
stage_load "sqlite:$DB" "$ROUTE" "$BACKLOG" 24 500
background relay "$OUTBOX" relay --store "sqlite:$DB" --route "$ROUTE" \
    --sink "nats://127.0.0.1:$PROXY_PORT/$SUBJECT?timeout=2s&reconnect_wait=100ms" \
    --batch "$BATCH" --lease 30s --poll 10ms --backoff-base 100ms --backoff-cap 1s
R=$BG_PID
wait_started "$LOG" 1 || { fail "the relay did not start: $(tail -1 "$LOG")"; finish; }

# fault KIND SECONDS: one fault on a busy relay: a backlog, the relay seen
# publishing, a random pause, and still a backlog left when the fault
# begins (else the backlog doubles and it begins again, uncounted: the
# relay's pace differs by build and machine). Tried again (three times at
# most) until it caught the relay with work in hand. Its window (from its
# start to the relay's first publish after it) goes into WINDOWS for the
# pauses.
WINDOWS=()
FAULTS=0
MET=0
fault() {
    local kind=$1 secs=$2 try=0 out mark start held how
    while [ $try -lt 3 ]; do
        [ "$(pending)" -ge "$BACKLOG" ] || stage_load "sqlite:$DB" "$ROUTE" "$BACKLOG" 24 500
        mark=$(published)
        _moved() { [ "$(published)" -gt "$mark" ]; }
        wait_until 60 _moved || { fail "the relay published nothing in 60 s before a $kind: $(tail -1 "$LOG")"; return 1; }
        random_sleep 100 400
        if [ "$(pending)" = 0 ] && [ "$BACKLOG" -lt 100000 ]; then
            BACKLOG=$((BACKLOG * 2))
            echo "the backlog ran out before the $kind began; $BACKLOG events next time"
            continue
        fi
        try=$((try + 1))
        out=$(outages)
        start=$(now)
        if [ "$kind" = blackhole ]; then
            toxic sink hole_up timeout upstream '{"timeout":0}'
            toxic sink hole_down timeout downstream '{"timeout":0}'
            sleep "$secs"
            held=$(processing)
            untoxic sink hole_up
            untoxic sink hole_down
        else
            proxy_enabled sink false
            sleep "$secs"
            held=$(processing)
            proxy_enabled sink true
        fi
        FAULTS=$((FAULTS + 1))
        mark=$(published)
        wait_until 60 _moved || { fail "the relay published nothing in 60 s after a $kind: $(tail -1 "$LOG")"; return 1; }
        WINDOWS+=("$kind $secs $start $(now)")
        how=
        [ "$held" -gt 0 ] && how="$held rows held in processing at its end"
        [ "$(outages)" -gt "$out" ] && how="${how:+$how, }rows released: $(grep "sink unavailable" "$LOG" | tail -1 | sed 's/.*sink unavailable (\([^)]*\)).*/\1/' | cut -c1-100)"
        if [ -n "$how" ]; then
            MET=$((MET + 1))
            echo "$kind of $secs s caught the relay at work: $how"
            return 0
        fi
        echo "$kind of $secs s (try $try) found the relay idle; again"
    done
    fail "three ${kind}s of $secs s never caught the relay with work in hand"
}
for _ in $(seq 1 "$ROUNDS"); do
    fault blackhole "$BLACKHOLE_S"
    fault partition "$PARTITION_S"
done
[ "$MET" -gt 0 ] && [ "$MET" = $((ROUNDS * 2)) ] &&
    pass "$MET faults caught the relay with work in hand, and it published again after each ($FAULTS faults in all)"

drained() { [ "$(sql "SELECT count(*) FROM outbox WHERE status <> 'published'")" = 0 ]; }
wait_until 120 drained || fail "not drained 120 s after the last fault: $(stats_of "sqlite:$DB" --route "$ROUTE")"
kill -0 "$R" 2>/dev/null && pass "the relay survived every fault" ||
    fail "the relay died: $(grep -v ' info: ' "$LOG" | tail -1)"
stop_process "$R" TERM
[ "$RC" = 0 ] && pass "the relay stopped on SIGTERM with status 0" || fail "the relay exited $RC on SIGTERM"
read -r claimed pub retried dead released <<<"$(relay_stop_counts "$LOG")"
echo "stop line: claimed $claimed, published $pub, retried $retried, dead $dead, released $released"
stats_is "$DB" 0 0 "$STAGED" 0 --route "$ROUTE"

# Each window's longest gap between settles: the pause that fault cost.
longest=0
pauses=""
for w in "${WINDOWS[@]}"; do
    read -r kind secs from to <<<"$w"
    p=$(pause_sqlite "$from - 5" "$to")
    pauses="$pauses, $kind ${secs}s: ${p} ms"
    [ "$p" -le "$longest" ] || longest=$p
done

staged_sqlite "$TMP/staged" "$ROUTE"
"$PY" "$SRC_ROOT/tests/integration/nats/read_stream.py" "$NATS_URI" "$SUBJECT" "$TMP/read.jsonl" \
    "$TMP/staged" "$ROUTE" >"$TMP/read.out" 2>&1
rc=$?
cat "$TMP/read.out"
[ $rc = 0 ] || fail "read_stream.py exited $rc"
dups=$(duplicates "$TMP/read.jsonl")
analyze "$TMP/staged.ids" "$TMP/read.jsonl" 0
figures "$FAULTS" "$STAGED" "$dups" "$longest" "per fault${pauses#,}; retried $retried, released $released"
finish
