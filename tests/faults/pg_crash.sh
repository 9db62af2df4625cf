#!/usr/bin/env bash
# Server faults under one running relay (two workers) on a private
# PostgreSQL server: at random instants, in turn, the server is crashed and
# restarted (pg_ctl restart -m immediate: no checkpoint, crash recovery) or
# every session of the relay is cut (pg_terminate_backend); 6 faults, 20
# with --long. The same relay process, never restarted, must reconnect and
# drain everything: nothing lost, each key's events first reach the sink in
# staging order, nothing left in processing.
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
need_cmd psql postgresql-client
announce_seed

FAULTS=$(long_or 6 20)
BATCH=10
LEASE_S=2
private_server postgres
URI=$PRIV_URI
REL=outbox
OUT=$TMP/out.jsonl
APP=faults_relay
STAGED=0
"$OUTBOX" schema apply --store "$URI" --relation "$REL" --yes-i-know >/dev/null || { fail "schema apply"; finish; }

# stage N: N more events through the library (one process, in calls of
# 500), over 200 keys interleaved. The server commits asynchronously
# (tools/services/postgres.sh), so a crash could take back the last
# commits; the checkpoint makes the staged events durable before any fault,
# which is what staging promises an application on a durable server.
stage() {
    stage_load "$URI" orders "$1" 200 500 "$REL"
    q "CHECKPOINT" >/dev/null || { fail "checkpoint after staging"; finish; }
}

# sessions: how many connections the relay has open now.
sessions() {
    q "SELECT count(*) FROM pg_stat_activity WHERE application_name = '$APP'"
}

stage 8000
# The relay logs JSON to a file: its stderr (relay.log) must stay empty,
# server notices included (a crash sends one to every session).
LOGF=$TMP/relay.json
background relay "$OUTBOX" relay --store "$URI?application_name=$APP" --relation "$REL" --route orders \
    --sink "file:$OUT" --batch "$BATCH" --workers 2 --lease "${LEASE_S}s" --poll 10ms \
    --log-format json --log-file "$LOGF"
R=$BG_PID
done_faults=""
busy=0
for f in $(seq 1 "$FAULTS"); do
    # Each fault finds the relay connected again, or the relay failed.
    end=$((SECONDS + 30))
    while [ "$(sessions)" = 0 ] && [ $SECONDS -lt $end ]; do sleep 0.05; done
    [ "$(sessions)" != 0 ] || { fail "the relay has no session 30 s after fault $((f - 1))"; break; }
    # A backlog that outlasts the pause, so that faults hit a busy relay.
    [ "$(q "SELECT count(*) FROM $REL WHERE status = 'pending'")" -ge 8000 ] || stage 8000
    # The relay was at work when the fault came: it published in the pause
    # before it, and a backlog was left.
    before=$(q "SELECT count(*) FROM $REL WHERE status = 'published'")
    random_sleep 200 800
    [ "$(q "SELECT count(*) > $before AND count(*) < $STAGED FROM $REL WHERE status = 'published'")" = t ] &&
        busy=$((busy + 1))
    if [ $((f % 2)) = 1 ]; then
        "$SERVICES/postgres.sh" restart "$PRIV_DIR" immediate >/dev/null || { fail "pg_ctl restart -m immediate failed"; break; }
        done_faults="$done_faults crash"
    else
        cut=$(q "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
                 WHERE application_name = '$APP'")
        [ "$cut" -gt 0 ] || fail "pg_terminate_backend found no session of the relay to cut"
        done_faults="$done_faults cut$cut"
    fi
done
echo "$STAGED events staged; faults:$done_faults"
[ "$busy" -gt 0 ] && pass "$busy of $FAULTS faults fell on the relay at work" ||
    fail "no fault fell on the relay at work: the faults tested nothing"

end=$((SECONDS + 120))
while [ "$(q "SELECT count(*) FROM $REL WHERE status <> 'published'")" != 0 ] && [ $SECONDS -lt $end ]; do
    sleep 0.2
done
if kill -0 "$R" 2>/dev/null; then
    pass "the relay survived every fault"
else
    fail "the relay died: $(tail -1 "$LOGF")"
fi
stop_process "$R" TERM
[ "$RC" = 0 ] && pass "the relay stopped on SIGTERM with status 0" || fail "the relay exited $RC on SIGTERM"
back=$(grep -c "reconnected to PostgreSQL" "$LOGF")
[ "$back" -gt 0 ] && pass "the relay reconnected $back times" ||
    fail "the relay log shows no reconnection: $(tail -1 "$LOGF")"
[ -s "$TMP/relay.log" ] && fail "the relay wrote to stderr past --log-file: $(head -1 "$TMP/relay.log")" ||
    pass "the relay's stderr stayed empty with --log-file"
notices=$(grep -c '"msg":"[^"]*server [A-Z]*: ' "$LOGF")
bad=$(python3 -c 'import json,sys
n=0
for line in open(sys.argv[1]):
    try: json.loads(line)
    except ValueError: n+=1
print(n)' "$LOGF")
[ "$notices" -gt 0 ] && [ "$bad" = 0 ] &&
    pass "$notices server notices went through the relay's JSON log: $(grep -m1 '"msg":"[^"]*server [A-Z]*: ' "$LOGF" | cut -c1-200)" ||
    fail "server notices in the JSON log: $notices, lines not JSON: $bad"

got=$(q "SELECT count(*), count(*) FILTER (WHERE status = 'published'), count(*) FILTER (WHERE status = 'processing'),
         count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'dead') FROM $REL")
[ "$got" = "$STAGED|$STAGED|0|0|0" ] &&
    pass "all $STAGED rows published, none processing, pending or dead" ||
    fail "rows total|published|processing|pending|dead = $got, expected $STAGED|$STAGED|0|0|0"
staged_pg "$TMP/staged" "$REL"
# Duplicates are only counted: a crash takes back the relay's own last
# asynchronous commits too (marks of batches already published), so more
# than a batch per fault may come again.
analyze "$TMP/staged.ids" "$OUT" -
finish
