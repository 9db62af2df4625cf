#!/usr/bin/env bash
# An idle relay is woken by NOTIFY: with --poll 60s, an event staged while it
# idles is published long before a poll could have found it (within 20 s,
# a bound a loaded CI machine keeps; it is usually milliseconds). A
# functional check of the wake-up, not a benchmark.
. "$(dirname "$0")/../../harness/harness.sh"
use_outbox "$1"
pg_outbox wakeup

pg_table "${4:-}"
OUT=$TMP/out.jsonl
pg_relay --route wake --sink "file:$OUT" --poll 60s
# Started, found nothing, and settled into its wait.
wait_started "$TMP/relay.log" 1 || fail "the relay did not start: $(tail -1 "$TMP/relay.log")"
sleep 0.3
worst=0
for i in 1 2 3 4 5; do
    t0=$(date +%s%N)
    stage_load "$URI" wake 1 0 1 "$REL"
    wait_until 20 sql_is "SELECT count(*) FROM $REL WHERE status = 'published'" "$i" ||
        fail "event $i not published within 20 s with a 60 s poll: the relay was not woken"
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    echo "event $i: staged to published in ${ms} ms"
    [ "$ms" -gt "$worst" ] && worst=$ms
    sleep 0.3
done
pass "every event published after its NOTIFY; worst commit-to-published ${worst} ms with a 60 s poll"
stop_process "$RELAY_PID" TERM
[ "$RC" = 0 ] || fail "relay exited $RC"
finish
