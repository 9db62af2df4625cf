#!/usr/bin/env bash
# A relay stopped at any moment of its start-up, before it has opened the
# store, the sink or its workers: SIGTERM or SIGINT still means exit 0 with
# no row left in processing.
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"

new_db stop
db=$DB
expect 0 stage --store "sqlite://$db" --route r --type t --count 2000

# loading PID: until PID has begun to load its driver modules, the first
# thing the command does that takes time; the signals below come from 0 to
# 100 ms after that. (Earlier, while the kernel and the dynamic linker are
# still starting the program, no program can catch a signal.)
loading() {
    local end=$((SECONDS + 30))
    while [ -e "/proc/$1" ] && [ $SECONDS -lt $end ]; do
        grep -Eqs '/(store|sink)-[a-z0-9]+\.so' "/proc/$1/maps" && return 0
    done
}

n=0
# workers:pipeline
for shape in 1:1 2:1 1:4; do
    workers=${shape%:*} pipeline=${shape#*:}
    for delay in 0 0.002 0.005 0.01 0.02 0.05 0.1; do
        for sig in TERM INT; do
            n=$((n + 1))
            # shellcheck disable=SC2086
            ${OUTBOX_CLI_WRAPPER:-} "$OUTBOX" relay --store "sqlite://$db" --route r \
                --sink "file://$TMP/out.jsonl" --batch 10 --workers "$workers" --pipeline "$pipeline" \
                >"$TMP/stop.out" 2>"$TMP/stop.err" &
            pid=$!
            loading "$pid"
            [ "$delay" = 0 ] || sleep "$delay"
            stop_process "$pid" "$sig"
            what="SIG$sig after ${delay}s, $workers worker(s), pipeline of $pipeline"
            if [ "$RC" -ne 0 ]; then
                fail "$what: exit $RC, $(head -c 300 "$TMP/stop.err")"
                continue
            fi
            processing=$(sqlite3 "$db" "SELECT count(*) FROM outbox WHERE status = 'processing'")
            [ "$processing" = 0 ] && pass "$what: exit 0, nothing in processing" ||
                fail "$what: $processing rows left in processing"
        done
    done
done

# Nothing was lost on the way: a last run publishes the rest, each event once.
expect 0 relay --store "sqlite://$db" --route r --sink "file://$TMP/out.jsonl" --until-idle --quiet
stats_is "$db" 0 0 2000 0
dups=$(sed -n 's/^{"specversion":"1\.0","id":"\([^"]*\)".*/\1/p' "$TMP/out.jsonl" | sort | uniq -d | wc -l)
[ "$dups" -eq 0 ] && pass "after $n stops: 2000 published, no duplicates" || fail "$dups events published twice"

finish
