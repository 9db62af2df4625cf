# Sourced by the cluster fault tests after tests/harness/harness.sh: what
# both share. A steady trickle of events staged in the background (so that
# every partition has traffic through a fault and a pause can be measured),
# the faults' log, and the figures computed from what was read back.

CLUSTER_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The readers import modules from the source tree: no __pycache__ there.
export PYTHONDONTWRITEBYTECODE=1

# now_ms: the wall clock in milliseconds.
now_ms() {
    date +%s%3N
}

# start_trickle STORE ROUTE: from now on, 40 events every 0.1 s (at most
# 400 a second, far below what one relay publishes) through the library, on
# KEYS keys interleaved, serial numbers from 1,000,000 on; in a process of
# its own (a subshell of the test would carry its exit trap). It runs until
# stop_trickle; TRICKLE_FROM and TRICKLE_TO (ms) say when it ran. All the
# events of a test go through it, bursts too: one process staging in turn
# commits in staging order, where two would overlap and could commit a
# key's events out of it.
#
# 480 keys: a batch of 50 then holds 50 keys, and the next batch 50 others,
# so that two relays (or workers) both have rows in hand at once; with
# fewer keys than a batch, one relay's batch would hold every key and the
# other would wait for it.
KEYS=480
start_trickle() {
    rm -f "$TMP/trickle.stop" "$TMP/trickle.burst"
    : >"$TMP/trickle.burst.log"
    background trickle bash -c '
        stage=$1 store=$2 route=$3 stop=$4 burst=$5 keys=$6 n=1000000
        until [ -e "$stop" ]; do
            size=40
            [ -e "$burst" ] && size=$(cat "$burst")
            "$stage" "$store" - "$route" "$size" "$keys" 500 "$n" >/dev/null || exit 1
            [ "$size" = 40 ] || { echo "$n $((n + size - 1))" >>"$burst.log"; rm -f "$burst"; }
            n=$((n + size))
            sleep 0.1
        done' trickle "${OUTBOX_TEST_STAGE_LOAD:?the stage_load program, which meson test names}" \
        "$1" "$2" "$TMP/trickle.stop" "$TMP/trickle.burst" "$KEYS"
    TRICKLE_PID=$BG_PID
    TRICKLE_FROM=$(now_ms)
}

# burst N: the trickle stages N events at once next time round; returns
# once they are committed.
burst() {
    echo "$1" >"$TMP/trickle.burst.new"
    mv "$TMP/trickle.burst.new" "$TMP/trickle.burst"
    _burst_staged() { [ ! -e "$TMP/trickle.burst" ]; }
    wait_until 60 _burst_staged || fail "the trickle did not stage a burst of $1 in 60 s"
}

# alive PID: a child of the test that has not exited (kill -0 is true of
# one that exited and was not yet waited for).
alive() {
    local state=
    read -r _ _ state _ 2>/dev/null <"/proc/$1/stat"
    [ -n "$state" ] && [ "$state" != Z ]
}

# stop_trickle: stops it between two calls, so that nothing is staged after
# it returns; a trickle that died on its own is a failure.
stop_trickle() {
    local was_alive=0
    alive "$TRICKLE_PID" && was_alive=1
    touch "$TMP/trickle.stop"
    wait "$TRICKLE_PID" 2>/dev/null
    forget "$TRICKLE_PID"
    if [ $was_alive = 1 ]; then
        pass "events were staged all through the faults"
    else
        fail "staging stopped during the run: $(tail -1 "$TMP/trickle.log")"
    fi
    TRICKLE_TO=$(now_ms)
}

# fault KIND VICTIM [PARTITIONS]: logs a fault at this instant (its time in
# FAULT_AT) for the figures: KIND leader or relay, the node or relay hit,
# and the partitions it led (comma-separated), if any.
FAULTS_LOG=$TMP/faults.tsv
: >"$FAULTS_LOG"
fault() {
    FAULT_AT=$(now_ms)
    printf '%s\t%s\t%s\t%s\n' "$1" "$FAULT_AT" "$2" "${3:--}" >>"$FAULTS_LOG"
}

# figures READ.jsonl TIMES.tsv: the pauses each fault cost, from the times
# the broker stored each message (READ.jsonl, what the reader wrote, with
# "ts" in ms) and the times each event was committed (TIMES.tsv: event id,
# created_at in ms); printed, never checked. The bursts' events are left
# out of commit-to-publish: they wait their turn in a backlog.
figures() {
    python3 "$CLUSTER_HERE/figures.py" "$1" "$2" "$FAULTS_LOG" "$TMP/trickle.burst.log" \
        "$TRICKLE_FROM" "$TRICKLE_TO"
}

# stop_counters LOG: RETRIED and RELEASED from a relay's stop line; a log
# without one is a failure, and counts 0.
stop_counters() {
    local c
    c=$(sed -n 's/.*stopped ([^)]*): claimed [0-9]*, published [0-9]*, retried \([0-9]*\), dead [0-9]*, released \([0-9]*\).*/\1 \2/p' "$1" | tail -1)
    [ -n "$c" ] || { fail "no stop line with counters in $1: $(tail -1 "$1")"; c="0 0"; }
    RETRIED=${c% *}
    RELEASED=${c#* }
}
