#!/usr/bin/env bash
# docs/examples/consumer.c end to end: events staged in PostgreSQL, relayed
# to Kafka by relays killed with SIGKILL mid-batch (so that some events reach
# the topic twice), consumed into PostgreSQL with the inbox by consumers
# killed with SIGKILL inside their transaction, then drained. Each staged
# event must be applied exactly once, and recorded once in the inbox.
#
#  - Duplicates are proven, not assumed: the topic is read back with a
#    client nobody here wrote (read_topic.py) and some ce_id must be on it
#    more than once; the consumer must have said "duplicate" at least once.
#    When the relay kills left no duplicate on the topic, more are made
#    (bounded).
#  - A consumer kill counts as in flight only when it was caught there: the
#    consumer is stopped (SIGSTOP), its session (application_name = its
#    consumer name) must be `idle in transaction` in pg_stat_activity with
#    a transaction id (it has written: the inbox record at least), and only
#    then is it killed; otherwise it goes on (SIGCONT) and is tried again a
#    random instant later (bounded).
#
#   consumer.sh OUTBOX_CLI CONSUMER
. "$(dirname "$0")/../../harness/harness.sh"
use_outbox "$1"
CONSUMER=${2:?usage: consumer.sh OUTBOX_CLI CONSUMER}
case $CONSUMER in /*) ;; *) CONSUMER=$PWD/$CONSUMER ;; esac
[ -x "$CONSUMER" ] || { echo "FAIL: the consumer example is not built: $CONSUMER"; exit 1; }
need_service kafka
pg_outbox inbox_consumer
need_python
announce_seed
T0=$(date +%s%N)
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }

EVENTS=$(long_or 3000 12000) # staged in CHUNKs, one before each relay start
CHUNK=500
KEYS=20
RELAY_KILLS=$(long_or 5 20)
CATCH_TRIES=150 # stop-and-look attempts per consumer kill
ROUTE=orders
NAME=billing_$$

BROKERS=${OUTBOX_KAFKA_URI#kafka://}
BROKERS=${BROKERS%%/*}
BROKERS=${BROKERS%%\?*}
TOPIC=inbox_$$_$(date +%s)
GROUP=$TOPIC

# ------------------------------------------------------------- set up
# The topic, 3 partitions (the brokers here create none on first use),
# deleted at exit.
kafka_admin() {
    "$PY" - "$BROKERS" "$1" "$TOPIC" <<'PYEOF'
import sys
from confluent_kafka.admin import AdminClient, NewTopic
a = AdminClient({"bootstrap.servers": sys.argv[1]})
fs = a.create_topics([NewTopic(sys.argv[3], 3, 1)]) if sys.argv[2] == "create" else a.delete_topics([sys.argv[3]])
for f in fs.values():
    f.result()
PYEOF
}
kafka_admin create || { fail "creating topic $TOPIC"; finish; }
at_exit "kafka_admin delete"

# The outbox and the inbox beside it, and the business table of the
# example (no unique key: a second apply would be a second row).
pg_table
outbox schema apply --store "$URI" --relation "$REL" --inbox --yes-i-know >/dev/null ||
    { fail "schema apply --inbox"; finish; }
q "CREATE TABLE $SCH.applied (event_id text NOT NULL, event_type text, key text, payload text)" >/dev/null
# The example names plain "outbox" and "applied": search_path finds them.
case $URI in *\?*) SEP='&' ;; *) SEP='?' ;; esac
APP_URI="$URI${SEP}options=-csearch_path%3D$SCH"

# A relay sends a batch again when it dies after the broker took the batch
# and before the UPDATE that marks its rows published commits. That UPDATE
# takes 20 ms more here (a trigger), and the relay's server session notices
# a dead client within 5 ms and rolls it back (client_connection_check_interval),
# so that a kill at a random instant often falls in that window.
q "CREATE FUNCTION $SCH.slow_settle() RETURNS trigger LANGUAGE plpgsql AS \$\$
   BEGIN
       IF EXISTS (SELECT 1 FROM settled WHERE status = 'published') THEN
           PERFORM pg_sleep(0.02);
       END IF;
       RETURN NULL;
   END \$\$;
   CREATE TRIGGER slow_settle AFTER UPDATE ON $REL REFERENCING NEW TABLE AS settled
       FOR EACH STATEMENT EXECUTE FUNCTION $SCH.slow_settle()" >/dev/null || { fail "the settle trigger"; finish; }
RELAY_URI="$URI${SEP}options=-cclient_connection_check_interval%3D5ms"

# count STATUS: rows of the route in STATUS.
count() {
    q "SELECT count(*) FROM $REL WHERE outbox_route = '$ROUTE' AND status = '$1'"
}

stage() {
    stage_load "$URI" "$ROUTE" "$1" "$KEYS" 500 "$REL"
}

# ------------------------------------------------------------- relays
RSTARTS=0
relay_start() {
    RSTARTS=$((RSTARTS + 1))
    RLOG=$TMP/relay-$RSTARTS.log
    MARK=$(count published)
    background "relay-$RSTARTS" "$OUTBOX" relay --store "$RELAY_URI" --relation "$REL" --route "$ROUTE" \
        --sink "$OUTBOX_KAFKA_URI" --destination "$TOPIC" --batch 25 --lease 1s --poll 10ms \
        --backoff-base 100ms --backoff-cap 500ms
    RELAY_PID=$BG_PID
}

# relay_kill: once the relay is seen publishing, SIGKILL a random instant
# later; it counts as caught when it left rows in processing (the only
# relay, so they were its own).
RKILLS=0
RCAUGHT=0
relay_kill() {
    _progressed() { [ "$(count published)" -gt "$MARK" ]; }
    wait_until 30 _progressed || { fail "relay $RSTARTS published nothing in 30 s: $(tail -1 "$RLOG")"; return 1; }
    random_sleep 0 60
    kill9 "$RELAY_PID"
    RKILLS=$((RKILLS + 1))
    [ "$(count processing)" -gt 0 ] && RCAUGHT=$((RCAUGHT + 1))
    return 0
}

# ----------------------------------------------------------- consumers
COUT=$TMP/consumer.out
: >"$COUT"
CSTARTS=0
# consumer_start [ARGS...]: a consumer in the background, stdout appended to
# COUT; its pid in CPID. A static member (--instance): the next one takes
# its partitions back at once after a kill.
consumer_start() {
    CSTARTS=$((CSTARTS + 1))
    CLOG=$TMP/consumer-$CSTARTS.log
    "$CONSUMER" "$BROKERS" "$TOPIC" "$GROUP" "$APP_URI" --consumer "$NAME" --instance "$NAME" "$@" \
        >>"$COUT" 2>"$CLOG" &
    CPID=$!
    PIDS="$PIDS $CPID"
}

handled() {
    wc -l <"$COUT"
}

# look: the consumer's session in ST, "STATE|WROTE" (WROTE true once its
# transaction has a transaction id, i.e. wrote a row), asked on a psql
# session kept open: a new psql for each look would take longer than the
# consumer's transaction.
coproc LOOK { psql -X -qtA "$URI" 2>&1; }
PIDS="$PIDS $LOOK_PID"
look() {
    echo "SELECT coalesce((SELECT state || '|' || (backend_xid IS NOT NULL) FROM pg_stat_activity
          WHERE application_name = '$NAME' LIMIT 1), 'none|false');" >&"${LOOK[1]}"
    IFS= read -r -t 10 ST <&"${LOOK[0]}" || ST="no answer from psql|false"
}

# catch_consumer: kill the consumer inside a transaction, proven by its
# session's state while it is stopped. 1 when no try caught it there.
CKILLS=0
catch_consumer() {
    local mark try
    mark=$(handled)
    _consuming() { [ "$(handled)" -gt "$mark" ]; }
    wait_until 30 _consuming || { fail "consumer $CSTARTS handled nothing in 30 s: $(tail -1 "$CLOG")"; return 1; }
    for try in $(seq 1 $CATCH_TRIES); do
        random_sleep 0 20
        kill -0 "$CPID" 2>/dev/null || { fail "consumer $CSTARTS exited: $(tail -1 "$CLOG")"; return 1; }
        kill -STOP "$CPID"
        look
        # A statement under way finishes while the client is stopped.
        [ "${ST%|*}" = active ] && { sleep 0.02; look; }
        if [ "$ST" = "idle in transaction|true" ]; then
            local last
            last=$(q "SELECT left(regexp_replace(query, '\s+', ' ', 'g'), 50) FROM pg_stat_activity
                      WHERE application_name = '$NAME'")
            kill9 "$CPID"
            CKILLS=$((CKILLS + 1))
            echo "consumer $CSTARTS killed inside its transaction (try $try; last statement: $last)"
            # Its backend rolls back; the next consumer starts once it is gone.
            wait_until 10 sql_is "SELECT count(*) FROM pg_stat_activity WHERE application_name = '$NAME'" 0 ||
                fail "the killed consumer's session outlived it by 10 s"
            consumer_start
            return 0
        fi
        kill -CONT "$CPID"
    done
    echo "consumer $CSTARTS: not caught inside a transaction in $CATCH_TRIES tries (last look: $ST)"
    return 1
}

# ------------------------------------------------------------ 1. faults
stage "$CHUNK"
relay_start
consumer_start
round=0
while [ "$STAGED" -lt "$EVENTS" ] || [ "$round" -lt "$RELAY_KILLS" ]; do
    round=$((round + 1))
    relay_kill || break
    stage "$CHUNK"
    relay_start
    catch_consumer
done
echo "phase 1: $STAGED events staged, $RKILLS relay kills ($RCAUGHT left rows in processing)," \
    "$CKILLS consumer kills inside a transaction, $(handled) messages handled so far; $(ms_since "$T0") ms"

# ------------------------------------------------------------- 2. drain
drained() { [ "$(count pending) $(count processing)" = "0 0" ]; }
# read_topic: the topic read back by a third-party client and checked
# against what the outbox holds; DUPS: how many ids it holds more than once.
read_topic() {
    staged_pg "$TMP/staged" "$REL" "$ROUTE"
    "$PY" "$(dirname "$0")/read_topic.py" "$OUTBOX_KAFKA_URI" "$TOPIC" "$TMP/read.jsonl" \
        "$TMP/staged" "$ROUTE" >"$TMP/read.out" 2>&1 || { cat "$TMP/read.out"; fail "read_topic.py on $TOPIC"; }
    sed -n 's/.*"id": "\([^"]*\)".*/\1/p' "$TMP/read.jsonl" | sort | uniq -d >"$TMP/dup-ids"
    DUPS=$(wc -l <"$TMP/dup-ids")
}
extra=0
while :; do
    wait_until 60 drained || fail "not drained 60 s after the last relay start: $(tail -1 "$RLOG")"
    read_topic
    [ "$DUPS" -gt 0 ] || [ "$extra" -ge 3 ] && break
    # No kill left a duplicate on the topic: more kills, on more events.
    extra=$((extra + 1))
    echo "no id on the topic twice yet: relay kill round $extra more"
    stage "$CHUNK"
    relay_kill || break
    stage "$CHUNK"
    relay_start
done
stop_process "$RELAY_PID" TERM
[ "$RC" = 0 ] || fail "the last relay exited $RC on SIGTERM: $(tail -1 "$RLOG")"
echo "relays drained; $(ms_since "$T0") ms"

# The consumer at work finishes its message on SIGTERM and exits 0; one more
# drains what is left and exits once nothing came for 3 s.
stop_process "$CPID" TERM
[ "$RC" = 0 ] && pass "consumer $CSTARTS stopped on SIGTERM with status 0" ||
    fail "consumer $CSTARTS exited $RC on SIGTERM: $(tail -1 "$CLOG")"
consumer_start --idle-exit 3
_exited() {
    local st
    read -r _ _ st _ 2>/dev/null <"/proc/$CPID/stat" || return 0
    [ "$st" = Z ]
}
if wait_until 60 _exited; then
    wait "$CPID"
    RC=$?
    forget "$CPID"
    [ "$RC" = 0 ] && pass "the last consumer exited with status 0 once nothing came for 3 s" ||
        fail "the last consumer exited $RC: $(tail -1 "$CLOG")"
else
    fail "the last consumer was still running 60 s later"
fi
echo "consumers drained; $(ms_since "$T0") ms"

# ------------------------------------------------------------ 3. checks
check "pending processing published dead" "0 0 $STAGED 0" \
    "$(count pending) $(count processing) $(count published) $(count dead)"
cat "$TMP/read.out"
analyze "$TMP/staged.ids" "$TMP/read.jsonl" -
[ "$DUPS" -gt 0 ] && pass "$DUPS event ids are on the topic more than once (e.g. $(head -1 "$TMP/dup-ids")), after $RKILLS relay kills" ||
    fail "no event id is on the topic twice after $RKILLS relay kills: the consumer was never tested with a redelivery"
[ "$RCAUGHT" -gt 0 ] && pass "$RCAUGHT of $RKILLS relay kills left rows in processing" ||
    fail "none of $RKILLS relay kills left rows in processing"

check "rows in applied, distinct ids in applied" "$STAGED|$STAGED" \
    "$(q "SELECT count(*), count(DISTINCT event_id) FROM $SCH.applied")"
check "applied rows matching a staged event's id, type, key and payload" "$STAGED" \
    "$(q "SELECT count(*) FROM $REL o JOIN $SCH.applied a ON a.event_id = o.event_id::text
          AND a.event_type = o.event_type AND a.key = o.ordering_key AND a.payload::jsonb = o.payload")"
check "inbox records of $NAME, of staged events" "$STAGED|$STAGED" \
    "$(q "SELECT count(*), count(o.event_id) FROM $SCH.outbox_inbox i
          LEFT JOIN $REL o ON o.event_id::text = i.event_id WHERE i.consumer = '$NAME'")"
check "inbox records of other consumers" 0 "$(q "SELECT count(*) FROM $SCH.outbox_inbox WHERE consumer <> '$NAME'")"

applied=$(grep -c '^applied ' "$COUT")
dups=$(grep -c '^duplicate ' "$COUT")
twice=$(sed -n 's/^applied //p' "$COUT" | sort | uniq -d | wc -l)
check "ids the consumers said they applied twice" 0 "$twice"
[ "$applied" -le "$STAGED" ] && [ "$applied" -ge $((STAGED - CKILLS)) ] &&
    pass "the consumers said \"applied\" $applied times for $STAGED events ($CKILLS kills)" ||
    fail "the consumers said \"applied\" $applied times for $STAGED events"
# Every extra copy on the topic was handled as a duplicate (a failed offset
# commit may add more).
copies=$(($(wc -l <"$TMP/read.jsonl") - STAGED))
[ "$dups" -gt 0 ] && [ "$dups" -ge "$copies" ] &&
    pass "the consumers skipped $dups duplicates for $copies extra copies on the topic (e.g. $(grep -m1 '^duplicate ' "$COUT"))" ||
    fail "the consumers said \"duplicate\" $dups times for $copies extra copies on the topic"
[ "$CKILLS" -gt 0 ] && pass "$CKILLS consumer kills caught a transaction in flight" ||
    fail "no consumer kill caught a transaction in flight: the kills tested nothing"
# Errors stop a consumer; warnings (a failed offset commit, a broker error
# librdkafka retries) do not, and are only shown.
cat "$TMP"/consumer-*.log | grep '^consumer: ' >"$TMP/consumer-lines"
grep -v '(retrying)\|(it will come again)' "$TMP/consumer-lines" >"$TMP/consumer-errors"
check "error lines of the consumers" 0 "$(wc -l <"$TMP/consumer-errors")"
head -3 "$TMP/consumer-errors"
grep '(retrying)\|(it will come again)' "$TMP/consumer-lines" | head -3 | sed 's/^/warning: /'

echo "timing: $(ms_since "$T0") ms for $STAGED events, $RKILLS relay kills, $CKILLS consumer kills"
finish
