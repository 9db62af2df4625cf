#!/usr/bin/env bash
# An idle relay is woken by NOTIFY: with --poll 10s, an event staged while it
# idles is published well under a second later, long before a poll could
# have found it. (A functional check of the wake-up, not a benchmark.)
. "$(dirname "$0")/lib.sh" "$@"

make_table
OUT=$TMP/out.jsonl
relay --route wake --sink "file:$OUT" --poll 10s
sleep 1 # let it find nothing and settle into its wait
worst=0
for i in 1 2 3 4 5; do
    t0=$(date +%s%N)
    "$PG_LOAD" "$URI" "$REL" wake 1 0 >/dev/null || fail "staging"
    wait_for "SELECT count(*) FROM $REL WHERE status = 'published'" "$i" 10 || fail "event $i not published within 10 s"
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    echo "event $i: staged to published in ${ms} ms"
    [ "$ms" -gt "$worst" ] && worst=$ms
    sleep 0.3
done
[ "$worst" -lt 1000 ] && pass "worst commit-to-published ${worst} ms with a 10 s poll" ||
    fail "worst commit-to-published ${worst} ms: the relay was not woken"
kill -TERM "$RELAY_PID"
wait "$RELAY_PID" || fail "relay exited $?"
PIDS=""
finish
