#!/usr/bin/env bash
# A PostgreSQL relay stopped during its start-up, while its workers are
# still connecting (tens of milliseconds): SIGTERM or SIGINT means exit 0
# and no row left in processing, whenever it arrives.
. "$(dirname "$0")/../../harness/harness.sh"
use_outbox "$1"
pg_outbox stop

pg_table "${4:-}"
"$OUTBOX" stage --store "$URI" --relation "$REL" --route r --type t --count 3000 >/dev/null ||
    { echo "FAIL: stage"; exit 1; }

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

for workers in 1 3; do
    for delay in 0 0.005 0.01 0.02 0.04 0.06 0.1; do
        for sig in TERM INT; do
            "$OUTBOX" relay --store "$URI" --relation "$REL" --route r --sink "file:$TMP/out.jsonl" \
                --batch 20 --workers "$workers" 2>"$TMP/stop.err" &
            pid=$!
            loading "$pid"
            [ "$delay" = 0 ] || sleep "$delay"
            stop_process "$pid" "$sig"
            rc=$RC
            what="SIG$sig after ${delay}s, $workers worker(s)"
            check "$what: exit status" 0 "$rc"
            check "$what: rows in processing" 0 "$(q "SELECT count(*) FROM $REL WHERE status = 'processing'")"
            [ "$rc" -eq 0 ] || echo "   stderr: $(head -c 300 "$TMP/stop.err")"
        done
    done
done

# Whatever the stops left pending, a last run publishes, each event once.
"$OUTBOX" relay --store "$URI" --relation "$REL" --route r --sink "file:$TMP/out.jsonl" --until-idle --quiet ||
    fail "the last relay failed"
check "published" 3000 "$(q "SELECT count(*) FROM $REL WHERE status = 'published'")"
check "events written twice" 0 "$(sed -n 's/^{"specversion":"1\.0","id":"\([^"]*\)".*/\1/p' "$TMP/out.jsonl" | sort | uniq -d | wc -l | tr -d ' ')"
finish
