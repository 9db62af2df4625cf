#!/usr/bin/env bash
# PostgreSQL -> a three-node Kafka cluster, with partition leaders crashed
# under running relays. A private PostgreSQL and a private cluster
# (tools/services/kafka-cluster.sh); a topic of 6 partitions, replication
# factor 3, min.insync.replicas=2, LogAppendTime; two relays (one worker
# each) through the Kafka sink, whose acks=all is its own; events staged
# all the time (40 every 0.1 s) so every partition has traffic through each
# fault. Faults, in turn (2 leader kills and 1 relay kill; 5 and 2 with
# --long):
#
#  - leader kill: the broker leading the most partitions gets SIGKILL while
#    the relays are seen publishing a backlog, and is started again once
#    its partitions have new leaders; the next fault waits until every
#    replica is back in sync;
#  - relay kill: one relay gets SIGKILL while publishing a backlog, and is
#    started again.
#
# A fault counts as caught when the relays were publishing in the moment
# before it, with a backlog left, and it held rows: a leader kill, rows of
# the keys of its partitions, committed before it, still unpublished 2 s
# later (before any new leader can be elected); a relay kill, rows the
# killed relay held (see kill_relay). Faults go on, up to three times as many, until each kind was
# caught at least once. Then, once the trickle stops and everything drains:
# every row published, none pending, processing or dead; the topic read
# back with confluent-kafka has every event, each key in staging order by
# first appearance, duplicates at most one pipeline of batches per relay per fault. Last,
# one figure line: the pauses, overall and split between the killed
# leaders' partitions and the healthy ones (tests/faults/clusters/figures.py).
#
#   kafka_leader.sh OUTBOX_CLI
. "$(dirname "$0")/../../harness/harness.sh"
. "$(dirname "$0")/cluster.sh"
use_outbox "$1"
need_cmd psql postgresql-client
need_python
announce_seed

LEADER_KILLS=$(long_or 2 5)
RELAY_KILLS=$(long_or 1 2)
RELAYS=2
BATCH=50
LEASE=2s
PARTITIONS=6
TOPIC=orders
ROUTE=orders
BURST=1500

private_server postgres
URI=$PRIV_URI
REL=outbox
outbox schema apply --store "$URI" --relation "$REL" --yes-i-know >/dev/null || { fail "schema apply"; finish; }
private_server kafka-cluster
KAFKA=$PRIV_URI
KDIR=$PRIV_DIR
kc() {
    "$SERVICES/kafka-cluster.sh" "$@"
}
kc topic "$KDIR" "$TOPIC" "$PARTITIONS" min.insync.replicas=2 message.timestamp.type=LogAppendTime \
    2>"$TMP/topic.err" || { fail "topic $TOPIC: $(cat "$TMP/topic.err")"; finish; }
# Which partition each key goes to: librdkafka's default partitioner, the
# CRC-32 of the key modulo the partitions (checked against what is read
# back at the end), so that a leader's kill can be seen to hold its own
# keys' rows.
python3 -c 'import sys, zlib
for i in range(int(sys.argv[2])):
    print(f"k{i}", zlib.crc32(f"k{i}".encode()) % int(sys.argv[1]))' "$PARTITIONS" "$KEYS" >"$TMP/keymap"
# The sink's timeout is above the ~7 s a crashed leader takes to be
# replaced: what waits for the new leader gets there in the same call.
SINK="$KAFKA?timeout=15s"

count() {
    q "SELECT count(*) FROM $REL WHERE status = '$1'"
}

# relay I: (re)starts relay I; its pid in RELAY[I], its log in LOG[I].
RELAY=()
LOG=()
STARTS=0
relay() {
    STARTS=$((STARTS + 1))
    LOG[$1]=$TMP/relay$1-$STARTS.log
    background "relay$1-$STARTS" "$OUTBOX" relay --store "$URI" --relation "$REL" --route "$ROUTE" \
        --sink "$SINK" --destination "$TOPIC" --batch "$BATCH" --lease "$LEASE" --poll 10ms \
        --backoff-base 100ms --backoff-cap 1s
    RELAY[$1]=$BG_PID
    wait_started "${LOG[$1]}" 1 || fail "relay $1 did not start: $(tail -1 "${LOG[$1]}")"
}

# leaders: "PARTITION LEADER ISR" lines of the topic, in $TMP/leaders.
leaders() {
    kc leaders "$KDIR" "$TOPIC" >"$TMP/leaders" 2>"$TMP/leaders.err"
}

# whole: every partition has a leader and three replicas in sync.
whole() {
    leaders && [ "$(awk '$2 >= 1 && $3 == 3' "$TMP/leaders" | wc -l)" = "$PARTITIONS" ]
}

# led_by_other VICTIM: every partition has a leader other than VICTIM.
led_by_other() {
    leaders && [ "$(awk -v v="$1" '$2 >= 1 && $2 != v' "$TMP/leaders" | wc -l)" = "$PARTITIONS" ]
}

# caught_up: no more than a few of the trickle's rounds pending.
caught_up() {
    [ "$(count pending)" -le 200 ]
}

# busy_then FAULT...: a backlog staged, the relays seen publishing it, a
# random instant later the fault (a command); sets BUSY=1 when the relays
# had published in the pause before it and a backlog was left.
busy_then() {
    local before
    burst "$BURST"
    before=$(count published)
    random_sleep 30 200
    [ "$(q "SELECT count(*) FILTER (WHERE status = 'published') > $before
             AND count(*) FILTER (WHERE status = 'pending') > 0 FROM $REL")" = t ] && BUSY=1 || BUSY=0
    "$@"
}

kill_leader() {
    local victim parts
    # The broker leading the most partitions, which it leads, and their keys.
    victim=$(awk '{print $2}' "$TMP/leaders" | sort | uniq -c | sort -k1,1nr -k2,2n | awk 'NR == 1 {print $2}')
    parts=$(awk -v v="$victim" '$2 == v {print $1}' "$TMP/leaders" | paste -sd,)
    VICTIM_KEYS=$(awk -v p=",$parts," 'index(p, "," $2 ",") {printf "%s\047%s\047", n++ ? "," : "", $1}' "$TMP/keymap")
    fault leader "node$victim" "$parts"
    kc kill "$KDIR" "$victim" || fail "kafka-cluster.sh kill $victim"
    VICTIM=$victim
}

# held_keys KEYS: rows of these keys committed before the fault and not
# yet published. Their partitions have no leader until the controller
# fences the dead one (6 s without heartbeats), whichever way the sink
# waits: in the call, or handing them back to be offered again.
held_keys() {
    q "SELECT count(*) FROM $REL WHERE created_at < to_timestamp($FAULT_AT / 1000.0)
       AND status <> 'published' AND ordering_key IN (${1:-NULL})"
}

# kill_relay: a relay that holds rows gets SIGKILL. No column says which
# relay claimed a row, so each candidate (the first one at random) is
# frozen (SIGSTOP) for 1.2 s: the live relay renews each of its leases
# every third of LEASE (0.67 s), so the rows in processing whose lease was
# last taken before the freeze are the frozen relay's. A relay found
# holding some is killed while still frozen (VICTIM_HELD of them); one
# holding none is let go and the other tried.
kill_relay() {
    local first=$((1 + RANDOM % RELAYS)) i t0
    VICTIM_HELD=0
    for i in $(seq 0 $((RELAYS - 1))); do
        VICTIM=$(( (first - 1 + i) % RELAYS + 1 ))
        t0=$(now_ms)
        "$HARNESS_DIR/freeze.sh" stop "${RELAY[$VICTIM]}" || fail "relay $VICTIM could not be frozen"
        sleep 1.2
        VICTIM_HELD=$(q "SELECT count(*) FROM $REL WHERE status = 'processing'
                         AND processing_at < to_timestamp($t0 / 1000.0)")
        [ "$VICTIM_HELD" -gt 0 ] && break
        "$HARNESS_DIR/freeze.sh" cont "${RELAY[$VICTIM]}"
    done
    fault relay "relay$VICTIM"
    kill9 "${RELAY[$VICTIM]}"
}

# The plan: leader and relay kills alternate, leader kills first.
plan=()
for i in $(seq 1 $((LEADER_KILLS > RELAY_KILLS ? LEADER_KILLS : RELAY_KILLS))); do
    [ "$i" -le "$LEADER_KILLS" ] && plan+=(leader)
    [ "$i" -le "$RELAY_KILLS" ] && plan+=(relay)
done

start_trickle "$URI" "$ROUTE"
for i in $(seq 1 $RELAYS); do relay "$i"; done
# The first fault too falls on relays at work, not still starting.
publishing() { [ "$(count published)" -gt 0 ]; }
wait_until 60 publishing || fail "nothing published 60 s after the relays started"
done_l=0 done_r=0 caught_l=0 caught_r=0 k=0
while :; do
    if [ $k -lt ${#plan[@]} ]; then
        kind=${plan[$k]}
    elif [ $caught_l = 0 ] && [ $done_l -lt $((LEADER_KILLS * 3)) ]; then
        kind=leader
    elif [ $caught_r = 0 ] && [ $done_r -lt $((RELAY_KILLS * 3)) ]; then
        kind=relay
    else
        break
    fi
    k=$((k + 1))
    wait_until 90 whole || { fail "the cluster was not whole again 90 s after fault $((k - 1)): $(tr '\n' ';' <"$TMP/leaders")$(cat "$TMP/leaders.err")"; break; }
    # Each fault from a steady state: what the last one piled up is worked off.
    wait_until 120 caught_up || { fail "still $(count pending) rows pending 120 s after fault $((k - 1))"; break; }
    if [ "$kind" = leader ]; then
        busy_then kill_leader
        t=$FAULT_AT
        sleep 2
        held=$(held_keys "$VICTIM_KEYS")
        proc=$(count processing)
        wait_until 60 led_by_other "$VICTIM" || fail "partitions still without a leader 60 s after node $VICTIM was killed"
        echo "leader kill $((done_l + 1)): node $VICTIM (partitions $(tail -1 "$FAULTS_LOG" | cut -f4)), new leaders after $(( $(now_ms) - t )) ms, busy before $BUSY; 2 s after: its keys' earlier rows unpublished $held, rows in processing $proc"
        kc start-node "$KDIR" "$VICTIM" 2>"$TMP/start.err" || fail "node $VICTIM did not start again: $(tail -1 "$TMP/start.err")"
        done_l=$((done_l + 1))
        [ "$BUSY" = 1 ] && [ "$held" -gt 0 ] && caught_l=$((caught_l + 1))
    else
        busy_then kill_relay
        echo "relay kill $((done_r + 1)): relay $VICTIM, busy before $BUSY, rows it held when killed $VICTIM_HELD"
        relay "$VICTIM"
        done_r=$((done_r + 1))
        [ "$BUSY" = 1 ] && [ "$VICTIM_HELD" -gt 0 ] && caught_r=$((caught_r + 1))
    fi
done
[ $caught_l -gt 0 ] && pass "$caught_l of $done_l leader kills caught the relays publishing and held the rows of its keys" ||
    fail "none of $done_l leader kills caught the relays publishing: the kills tested nothing"
[ $caught_r -gt 0 ] && pass "$caught_r of $done_r relay kills caught the relay holding rows" ||
    fail "none of $done_r relay kills caught the relay holding rows: the kills tested nothing"

# The trickle goes on through the last fault's pause, until its backlog is
# worked off, so that the figures see the pause end.
wait_until 120 caught_up || fail "still $(count pending) rows pending 120 s after the last fault"
stop_trickle
drained() { [ "$(q "SELECT count(*) FROM $REL WHERE status IN ('pending', 'processing')")" = 0 ]; }
wait_until 120 drained || fail "not drained 120 s after the trickle stopped: $(q "SELECT status, count(*) FROM $REL GROUP BY 1" | tr '\n' ' ')"
retried=0 released=0
for i in $(seq 1 $RELAYS); do
    stop_process "${RELAY[$i]}" TERM
    [ "$RC" = 0 ] || fail "relay $i exited $RC on SIGTERM: $(tail -1 "${LOG[$i]}")"
    stop_counters "${LOG[$i]}"
    retried=$((retried + RETRIED)) released=$((released + RELEASED))
done
echo "the last relays' stop lines: retried $retried, released $released"

got=$(q "SELECT count(*), count(*) FILTER (WHERE status = 'published'), count(*) FILTER (WHERE status = 'dead') FROM $REL")
total=${got%%|*}
[ "$got" = "$total|$total|0" ] && pass "all $total rows published, none dead, pending or processing" ||
    fail "rows total|published|dead = $got"

staged_pg "$TMP/staged" "$REL" "$ROUTE"
q "COPY (SELECT event_id, (extract(epoch FROM created_at) * 1000)::bigint FROM $REL) TO STDOUT" >"$TMP/times.tsv"
"$PY" "$CLUSTER_HERE/read_kafka.py" "$KAFKA" "$TOPIC" "$TMP/read.jsonl" "$TMP/staged" "$ROUTE" >"$TMP/read.out" 2>&1 ||
    fail "read_kafka.py exited $?"
cat "$TMP/read.out"
# Each fault may send again what was in flight: a batch per relay.
analyze "$TMP/staged.ids" "$TMP/read.jsonl" $((k * RELAYS * PIPELINE * BATCH))
# The key to partition map the leader kills' counts relied on.
python3 - "$TMP/keymap" "$TMP/read.jsonl" >"$TMP/keymap.out" <<'PYEOF'
import json, sys
want = dict(line.split() for line in open(sys.argv[1]))
bad = [m for m in map(json.loads, open(sys.argv[2]))
       if m["partitionkey"] in want and int(want[m["partitionkey"]]) != m["partition"]]
if bad:
    print(f"{len(bad)} records not on CRC-32(key) mod partitions, e.g. key {bad[0]['partitionkey']} "
          f"on partition {bad[0]['partition']}")
PYEOF
rc=$?
[ $rc = 0 ] && [ ! -s "$TMP/keymap.out" ] &&
    pass "every key's records are on the partition the leader kills counted it on" ||
    fail "the key to partition check (exit $rc): $(cat "$TMP/keymap.out")"
grep -q '"ts_type": 2' "$TMP/read.jsonl" && ! grep -Eq '"ts_type": [01]\b' "$TMP/read.jsonl" &&
    pass "every record carries the broker's LogAppendTime" ||
    fail "records without LogAppendTime: the figures would time the relay, not the broker"
figures "$TMP/read.jsonl" "$TMP/times.tsv"
finish
