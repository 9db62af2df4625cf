#!/usr/bin/env bash
# An idle relay is woken by NOTIFY: with --poll 60s, an event staged while it
# idles is published long before a poll could have found it (within 20 s,
# a bound a loaded CI machine keeps; it is usually milliseconds). A
# functional check of the wake-up, not a benchmark.
. "$(dirname "$0")/lib.sh" "$@"

make_table
OUT=$TMP/out.jsonl
relay --route wake --sink "file:$OUT" --poll 60s
sleep 1 # let it find nothing and settle into its wait
worst=0
for i in 1 2 3 4 5; do
    t0=$(date +%s%N)
    "$PG_LOAD" "$URI" "$REL" wake 1 0 >/dev/null || fail "staging"
    wait_for "SELECT count(*) FROM $REL WHERE status = 'published'" "$i" 20 ||
        fail "event $i not published within 20 s with a 60 s poll: the relay was not woken"
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    echo "event $i: staged to published in ${ms} ms"
    [ "$ms" -gt "$worst" ] && worst=$ms
    sleep 0.3
done
pass "every event published after its NOTIFY; worst commit-to-published ${worst} ms with a 60 s poll"
kill -TERM "$RELAY_PID"
wait "$RELAY_PID" || fail "relay exited $?"
PIDS=""
finish
