#!/usr/bin/env bash
# PostgreSQL -> a three-node Kafka cluster: does one broker's crash hold up
# only the keys of the partitions it hosts? (docs/sinks.md, "One
# partition's outage delays only its keys".) In kafka_leader.sh every
# partition has a replica on every broker, so with acks=all every partition
# waits for the controller to fence a dead broker (6 s) and shrink its ISR:
# no client can do better there. Here the topic is laid out so that half of
# it does not depend on the victim at all:
#
#   partitions 0-2: replicas on nodes 1 and 2 only (node 3 is none of them);
#   partitions 3-5: replicas on node 3 (the preferred leader) and 1 or 2.
#
# Replication factor 2 with min.insync.replicas=1, so that a partition of
# 3-5 takes writes again from its surviving replica alone once node 3 is
# fenced. That weakens durability (an acknowledged record may live on one
# broker only): this topic measures isolation, it is no model for a
# production topic.
#
# A private PostgreSQL and a private cluster (tools/services/kafka-cluster.sh);
# two relays (one worker each) through the Kafka sink; events staged all the
# time (40 every 0.1 s, 480 keys, so both groups of partitions have traffic).
# Node 3 gets SIGKILL while the relays are seen publishing a backlog, and is
# started again once partitions 3-5 have new leaders (or after 10 s); before
# the next kill it is back in sync and leads 3-5 again (a preferred leader
# election). 1 kill, 3 with --long.
#
# Two rounds, each with a topic and a route of its own, on the same cluster:
#
#  - "default": the sink's default partition_timeout (1 s), where the calls
#    leave the messages of a partition without a leader queued (DEFER) and
#    the healthy keys go on;
#  - "control": partition_timeout=1h, where each call waits for every
#    partition as before the option existed.
#
# Each round checks what kafka_leader.sh checks: a kill counts as caught
# when the relays were publishing just before it with a backlog left, and
# rows of partitions 3-5 committed before it were still unpublished 2 s
# later; then, once the trickle stops and everything drains: every row
# published, none pending, processing or dead; the topic read back has every
# event, each key in staging order by first appearance, duplicates at most
# one batch per relay per kill, plus one per row handed back (a deferred
# row the other relay claims goes out again through its own producer). Last, the round's figures
# (tests/faults/clusters/figures.py), printed, never checked: per kill, the
# longest publish-to-publish gap (the broker's LogAppendTime) on partitions
# 0-2 ("healthy": node 3 is not a replica) and on 3-5 ("killed leader's"),
# and the longest commit-to-publish of the keys of each.
#
# OUTBOX_ISOLATION_KEEP=DIR keeps the relays' logs (--verbose: a line a
# batch), what was read back and the brokers' logs in DIR;
# OUTBOX_ISOLATION_SINK='&debug=eos' adds options to both rounds' sink URI
# (librdkafka's idempotence states, in the relays' logs).
#
#   kafka_isolation.sh OUTBOX_CLI
. "$(dirname "$0")/../../harness/harness.sh"
. "$(dirname "$0")/cluster.sh"
use_outbox "$1"
need_cmd psql postgresql-client
need_python
announce_seed

KILLS=$(long_or 1 3)
ROUND_KILLS=$KILLS
RELAYS=2
BATCH=50
LEASE=2s
PARTITIONS=6
VICTIM=3
# Partitions 0-2 on nodes 1 and 2; 3-5 led by node 3, their other replica
# on 1 or 2.
ASSIGNMENT=1:2,2:1,1:2,3:1,3:2,3:1
STUCK=3,4,5
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
# Which partition each key goes to: librdkafka's default partitioner, the
# CRC-32 of the key modulo the partitions (checked against what is read
# back), so that the kill can be seen to hold the keys of 3-5.
python3 -c 'import sys, zlib
for i in range(int(sys.argv[2])):
    print(f"k{i}", zlib.crc32(f"k{i}".encode()) % int(sys.argv[1]))' "$PARTITIONS" "$KEYS" >"$TMP/keymap"
STUCK_KEYS=$(awk -v p=",$STUCK," 'index(p, "," $2 ",") {printf "%s\047%s\047", n++ ? "," : "", $1}' "$TMP/keymap")

count() {
    q "SELECT count(*) FROM $REL WHERE outbox_route = '$ROUTE' AND status = '$1'"
}

# relay I: (re)starts relay I of this round; its pid in RELAY[I], its log
# in LOG[I].
RELAY=()
LOG=()
relay() {
    LOG[$1]=$TMP/$ROUTE-relay$1.log
    background "$ROUTE-relay$1" "$OUTBOX" --verbose relay --store "$URI" --relation "$REL" --route "$ROUTE" \
        --sink "$SINK" --destination "$TOPIC" --batch "$BATCH" --lease "$LEASE" --poll 10ms \
        --backoff-base 100ms --backoff-cap 1s
    RELAY[$1]=$BG_PID
    wait_started "${LOG[$1]}" 1 || fail "relay $1 did not start: $(tail -1 "${LOG[$1]}")"
}

# leaders: "PARTITION LEADER ISR" lines of the topic, in $TMP/leaders.
leaders() {
    kc leaders "$KDIR" "$TOPIC" >"$TMP/leaders" 2>"$TMP/leaders.err"
}

# laid_out: every partition has both replicas in sync, and node 3 leads
# exactly 3-5 (after a restart it leads nothing until an election).
laid_out() {
    leaders || return 1
    [ "$(awk '$2 >= 1 && $3 == 2' "$TMP/leaders" | wc -l)" = "$PARTITIONS" ] || return 1
    [ "$(awk -v v=$VICTIM '$2 == v {print $1}' "$TMP/leaders" | paste -sd,)" = "$STUCK" ] && return 0
    kc elect "$KDIR" "$TOPIC" 2>"$TMP/elect.err" >/dev/null
    return 1
}

# moved: partitions 3-5 have leaders other than node 3.
moved() {
    leaders && [ "$(awk -v v=$VICTIM '$2 >= 1 && $2 != v' "$TMP/leaders" | wc -l)" = "$PARTITIONS" ]
}

caught_up() {
    [ "$(count pending)" -le 200 ]
}

# round NAME SINK_OPTIONS: one round, on topic and route iso_NAME.
round() {
    local name=$1 opts=$2 i k busy held t before moved_ms
    TOPIC=iso_$name
    ROUTE=iso_$name
    SINK="$KAFKA?timeout=15s$opts${OUTBOX_ISOLATION_SINK:-}"
    FAULTS_LOG=$TMP/faults-$name.tsv
    : >"$FAULTS_LOG"
    echo "--- round $name: sink ${SINK#*\?}"
    kc topic "$KDIR" "$TOPIC" "$PARTITIONS" --assignment "$ASSIGNMENT" min.insync.replicas=1 \
        message.timestamp.type=LogAppendTime 2>"$TMP/topic.err" || { fail "topic $TOPIC: $(cat "$TMP/topic.err")"; return; }
    wait_until 60 laid_out || { fail "topic $TOPIC not laid out as asked in 60 s: $(tr '\n' ';' <"$TMP/leaders")"; return; }

    start_trickle "$URI" "$ROUTE"
    for i in $(seq 1 $RELAYS); do relay "$i"; done
    publishing() { [ "$(count published)" -gt 0 ]; }
    wait_until 60 publishing || fail "$name: nothing published 60 s after the relays started"
    local caught=0 k=0
    # Kills go on, up to three times as many, until one was caught.
    while [ $k -lt "$KILLS" ] || { [ $caught = 0 ] && [ $k -lt $((KILLS * 3)) ]; }; do
        k=$((k + 1))
        wait_until 90 laid_out ||
            { fail "$name: the topic not back in sync and led by node $VICTIM 90 s after kill $((k - 1)): $(tr '\n' ';' <"$TMP/leaders")$(cat "$TMP/elect.err")"; break; }
        wait_until 120 caught_up || { fail "$name: still $(count pending) rows pending 120 s after kill $((k - 1))"; break; }
        # A backlog staged, the relays seen publishing it, a random
        # instant later the kill.
        burst "$BURST"
        before=$(count published)
        # Seen publishing (slow under a sanitizer), then a random instant.
        progressed() { [ "$(count published)" -gt "$before" ]; }
        wait_until 30 progressed || true
        random_sleep 30 200
        [ "$(q "SELECT count(*) FILTER (WHERE status = 'published') > $before
                 AND count(*) FILTER (WHERE status = 'pending') > 0 FROM $REL WHERE outbox_route = '$ROUTE'")" = t ] &&
            busy=1 || busy=0
        fault leader "node$VICTIM" "$STUCK"
        kc kill "$KDIR" "$VICTIM" || fail "kafka-cluster.sh kill $VICTIM"
        t=$FAULT_AT
        sleep 2
        held=$(q "SELECT count(*) FROM $REL WHERE outbox_route = '$ROUTE'
                  AND created_at < to_timestamp($t / 1000.0)
                  AND status <> 'published' AND ordering_key IN ($STUCK_KEYS)")
        # Restarted once 3-5 have new leaders, or after 10 s.
        if wait_until 8 moved; then moved_ms="after $(($(now_ms) - t)) ms"; else moved_ms="not within 10 s"; fi
        echo "$name kill $k: node $VICTIM (partitions $STUCK), new leaders $moved_ms, busy before $busy;" \
            "2 s after: their keys' earlier rows unpublished $held, rows in processing $(count processing)"
        kc start-node "$KDIR" "$VICTIM" 2>"$TMP/start.err" || fail "node $VICTIM did not start again: $(tail -1 "$TMP/start.err")"
        [ "$busy" = 1 ] && [ "$held" -gt 0 ] && caught=$((caught + 1))
    done
    ROUND_KILLS=$k
    [ $caught -gt 0 ] && pass "$name: $caught of $k kills caught the relays publishing and held the rows of 3-5" ||
        fail "$name: none of $k kills caught the relays publishing: the kills tested nothing"

    # The trickle goes on until the last kill's backlog is worked off, so
    # that the figures see the pause end.
    wait_until 120 caught_up || fail "$name: still $(count pending) rows pending 120 s after the last kill"
    stop_trickle
    drained() { [ "$(q "SELECT count(*) FROM $REL WHERE outbox_route = '$ROUTE' AND status IN ('pending', 'processing')")" = 0 ]; }
    wait_until 120 drained ||
        fail "$name: not drained 120 s after the trickle stopped: $(q "SELECT status, count(*) FROM $REL WHERE outbox_route = '$ROUTE' GROUP BY 1" | tr '\n' ' ')"
    local retried=0 released=0
    for i in $(seq 1 $RELAYS); do
        stop_process "${RELAY[$i]}" TERM
        [ "$RC" = 0 ] || fail "$name: relay $i exited $RC on SIGTERM: $(tail -1 "${LOG[$i]}")"
        stop_counters "${LOG[$i]}"
        retried=$((retried + RETRIED)) released=$((released + RELEASED))
    done
    # The relays' batch lines (--verbose): how long the longest took, and
    # how many took over a second, the calls that waited for a partition
    # without a leader (the default round's released rows are its DEFERs).
    echo "$name: the relays' stop lines: retried $retried, released $released; batches:" \
        "$(cat "${LOG[@]}" | sed -n 's/.*: batch: claimed .*, \([0-9]*\) ms$/\1/p' |
            awk '{n++; if ($1 > m) m = $1; if ($1 >= 1000) s++} END {printf "%d, %d of them over 1 s, the longest %d ms", n, s, m}')"

    local got total
    got=$(q "SELECT count(*), count(*) FILTER (WHERE status = 'published'), count(*) FILTER (WHERE status = 'dead')
             FROM $REL WHERE outbox_route = '$ROUTE'")
    total=${got%%|*}
    [ "$got" = "$total|$total|0" ] && pass "$name: all $total rows published, none dead, pending or processing" ||
        fail "$name: rows total|published|dead = $got"

    staged_pg "$TMP/$name.staged" "$REL" "$ROUTE"
    q "COPY (SELECT event_id, (extract(epoch FROM created_at) * 1000)::bigint FROM $REL
             WHERE outbox_route = '$ROUTE') TO STDOUT" >"$TMP/$name.times.tsv"
    "$PY" "$CLUSTER_HERE/read_kafka.py" "$KAFKA" "$TOPIC" "$TMP/$name.read.jsonl" "$TMP/$name.staged" "$ROUTE" \
        >"$TMP/$name.read.out" 2>&1 || fail "$name: read_kafka.py exited $?"
    cat "$TMP/$name.read.out"
    # A deferred row stays queued in the producer of the relay that sent it;
    # handed back, it may be claimed by the other relay, whose producer sends
    # it again: one more copy at most per row handed back (released).
    analyze "$TMP/$name.staged.ids" "$TMP/$name.read.jsonl" $((ROUND_KILLS * RELAYS * PIPELINE * BATCH + released))
    python3 - "$TMP/keymap" "$TMP/$name.read.jsonl" >"$TMP/keymap.out" <<'PYEOF'
import json, sys
want = dict(line.split() for line in open(sys.argv[1]))
bad = [m for m in map(json.loads, open(sys.argv[2]))
       if m["partitionkey"] in want and int(want[m["partitionkey"]]) != m["partition"]]
if bad:
    print(f"{len(bad)} records not on CRC-32(key) mod partitions, e.g. key {bad[0]['partitionkey']} "
          f"on partition {bad[0]['partition']}")
PYEOF
    local rc=$?
    [ $rc = 0 ] && [ ! -s "$TMP/keymap.out" ] &&
        pass "$name: every key's records are on the partition counted for it" ||
        fail "$name: the key to partition check (exit $rc): $(cat "$TMP/keymap.out")"
    grep -q '"ts_type": 2' "$TMP/$name.read.jsonl" && ! grep -Eq '"ts_type": [01]\b' "$TMP/$name.read.jsonl" &&
        pass "$name: every record carries the broker's LogAppendTime" ||
        fail "$name: records without LogAppendTime: the figures would time the relay, not the broker"
    # "healthy" partitions 0-2 have no replica on node 3.
    figures "$TMP/$name.read.jsonl" "$TMP/$name.times.tsv" | sed "s/^/$name: /"
}

if [ -n "${OUTBOX_ISOLATION_KEEP:-}" ]; then
    mkdir -p "$OUTBOX_ISOLATION_KEEP" || fail "mkdir $OUTBOX_ISOLATION_KEEP"
    at_exit "cp '$TMP'/*.log '$TMP'/*.tsv '$TMP'/*.jsonl '$TMP'/*.out '$OUTBOX_ISOLATION_KEEP'/;
             for n in 1 2 3; do cp '$KDIR'/n\$n/server.log '$OUTBOX_ISOLATION_KEEP'/kafka-n\$n.log; done"
fi
round default ""
# The control: each call waits for every partition (partition_timeout
# above timeout turns DEFER off).
round control "&partition_timeout=1h"
finish
