#!/usr/bin/env bash
# PostgreSQL failing over to its standby under running relays: a private
# primary with a synchronous streaming standby (tools/services/postgres.sh
# standby: every staging commit waits for the standby), two relays on a URI
# naming every host (postgresql://127.0.0.1:P1,127.0.0.1:P2,...
# ?target_session_attrs=read-write, so libpq finds whichever takes writes)
# publishing to a private NATS JetStream server. At the first instant after
# a random pause at which the relays hold rows in processing, the primary
# is stopped hard (pg_ctl stop -m immediate), and a random moment later the
# standby is promoted (pg_ctl promote); the relays must find it on their
# own. Then more events are staged through the same multi-host URI, and a
# new standby of the new primary is made for the next failover. 1
# failover, 3 with --long. Claims and settles commit without waiting for
# the standby (the driver's choice: a lost one means rows delivered again),
# so a crash that caught the relays at work leaves the standby behind them:
# rows it shows in processing (claims not settled), or fewer rows published
# than the primary showed just before the crash (settles lost). A failover
# that finds neither does not count, and another follows (two more at
# most). Each backlog is staged in one transaction, so the relays meet all
# of it at once rather than keeping pace with the staging, and the crash
# waits for a moment at which the primary shows rows in processing and
# still BUSY rows pending (the relays cannot run dry in the instant the
# stop takes); relays that never show that within 5 s get a backlog twice
# as large first (their pace differs by build and machine).
#
# Checks: every staged event survives on the last primary (a synchronous
# standby loses no commit that returned), every one published and none
# pending, processing or dead; every event read back by nats-py
# (tests/integration/nats/read_stream.py) with no duplicates (the relays
# publish again what the lost claims and settles held, and JetStream drops
# a repeated Nats-Msg-Id), per-key order by first appearance; the relays
# survived, published again on each new primary, and each reconnected
# after each failover; the failovers caught rows in processing. The longest
# pause is the longest gap between settles in a failover's window, from
# the crash to the first publish on the new primary.
#
#   pg_failover.sh OUTBOX_CLI
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
. "$(dirname "$0")/faults.sh"
need_cmd psql postgresql-client
need_python
announce_seed

FAILOVERS=$(long_or 1 3)
MAX_FAILOVERS=$((FAILOVERS + 2))
BACKLOG=$(long_or 5000 8000)
ROUTE=orders
SUBJECT=failover
BATCH=50
BUSY=1000

private_server nats
NATS_URI=$PRIV_URI
"$PY" - "$NATS_URI" "$SUBJECT" <<'PYEOF' || { fail "add stream $SUBJECT"; finish; }
import asyncio, sys, nats
from nats.js.api import StreamConfig, StorageType
async def main():
    nc = await nats.connect(sys.argv[1])
    await nc.jetstream().add_stream(StreamConfig(
        name=sys.argv[2], subjects=[sys.argv[2]], storage=StorageType.FILE, duplicate_window=600))
    await nc.close()
asyncio.run(main())
PYEOF

private_server postgres pg0
DIRS=("$PRIV_DIR")
PORTS=("$(cat "$PRIV_DIR/port")")
# The standbys' ports, chosen now: the relays' URI names every server the
# run will have, the later ones not started yet (libpq passes over a
# refused host).
for ((k = 1; k <= MAX_FAILOVERS; k++)); do
    p=$(private_port)
    while [[ " ${PORTS[*]} " == *" $p "* ]]; do p=$(private_port); done
    PORTS+=("$p")
    DIRS+=("$TMP/pg$k")
done
hosts=$(printf '127.0.0.1:%s,' "${PORTS[@]}")
MULTI="postgresql://outbox@${hosts%,}/outbox_test?target_session_attrs=read-write&connect_timeout=5"
echo "relays on $MULTI"
URI=$PRIV_URI
outbox schema apply --store "$URI" --yes-i-know >/dev/null || { fail "schema apply"; finish; }

# standby K: server K as the synchronous standby of server K-1, on its
# reserved port.
standby() {
    local k=$1 err
    at_exit "'$SERVICES/postgres.sh' stop '${DIRS[$k]}' immediate"
    if ! err=$(OUTBOX_PG_PORT=${PORTS[$k]} "$SERVICES/postgres.sh" standby "${DIRS[$k]}" "${DIRS[$((k - 1))]}" 2>&1 >/dev/null); then
        fail "standby $k: $err"
        finish
    fi
    [ "$(cat "${DIRS[$k]}/port")" = "${PORTS[$k]}" ] ||
        { fail "standby $k took port $(cat "${DIRS[$k]}/port"), not its reserved ${PORTS[$k]}"; finish; }
    echo "standby $k streaming synchronously on port ${PORTS[$k]}"
}
at() { echo "postgresql://outbox@127.0.0.1:${PORTS[$1]}/outbox_test"; }
count() { URI=$(at "$CUR") q "SELECT count(*) FROM outbox WHERE status = '$1'"; }
count_since() { URI=$(at "$CUR") q "SELECT count(*) FROM outbox WHERE published_at > to_timestamp($1)"; }

standby 1
stage_load "$URI" "$ROUTE" "$BACKLOG" 24 500
LOGS=()
RELAYS=()
for i in 1 2; do
    background "relay$i" "$OUTBOX" relay --store "$MULTI" --route "$ROUTE" \
        --sink "$NATS_URI/$SUBJECT?timeout=5s" \
        --batch "$BATCH" --lease 2s --backoff-base 100ms --backoff-cap 1s
    RELAYS+=("$BG_PID")
    LOGS+=("$TMP/relay$i.log")
done
for l in "${LOGS[@]}"; do
    wait_started "$l" 1 || { fail "a relay did not start: $(tail -1 "$l")"; finish; }
done

CUR=0
caught=0
done_faults=0
held_list=""
idle=0
WINDOWS=()
while [ "$caught" -lt "$FAILOVERS" ] && [ "$done_faults" -lt "$MAX_FAILOVERS" ]; do
    # At work: a backlog, and the relays published since the last look.
    [ "$(count pending)" -ge $((BACKLOG / 2)) ] || stage_load "$MULTI" "$ROUTE" "$BACKLOG" 24 "$BACKLOG"
    mark=$(count published)
    _moved() { [ "$(count published)" -gt "$mark" ]; }
    wait_until 60 _moved || { fail "no relay published for 60 s on server $CUR: $(tail -1 "${LOGS[0]}")"; break; }
    random_sleep 0 300
    # The same look gives the published count the crash is measured
    # against, so that the crash follows it with no other round trip.
    _holding() {
        local r
        r=$(URI=$(at "$CUR") q "SELECT count(*) FILTER (WHERE status = 'processing') > 0
             AND count(*) FILTER (WHERE status = 'pending') >= $BUSY,
             count(*) FILTER (WHERE status = 'published') FROM outbox") || return 1
        seen=${r#*|}
        [ "${r%%|*}" = t ]
    }
    if ! wait_until 5 _holding; then
        # The relays ran out of work first: a larger backlog, no crash yet.
        idle=$((idle + 1))
        [ "$idle" -lt 6 ] || { fail "the relays were never caught busy in 6 tries of 5 s: $(tail -1 "${LOGS[0]}")"; break; }
        [ "$BACKLOG" -ge 100000 ] || BACKLOG=$((BACKLOG * 2))
        echo "the relays were not caught busy in 5 s; a backlog of $BACKLOG next"
        continue
    fi
    crash_at=$(date +%s.%6N)
    "$SERVICES/postgres.sh" stop "${DIRS[$CUR]}" immediate >/dev/null || { fail "stopping server $CUR"; break; }
    NEXT=$((CUR + 1))
    # What the relays had in hand at the crash, as the standby shows it:
    # claims not settled, and settles it never got.
    got=$(URI=$(at "$NEXT") q "SELECT count(*) FILTER (WHERE status = 'processing'),
          $seen - count(*) FILTER (WHERE status = 'published') FROM outbox")
    claimed=${got%|*}
    lost=${got#*|}
    [ "$lost" -gt 0 ] || lost=0
    held=$((claimed + lost))
    random_sleep 300 1500
    "$SERVICES/postgres.sh" promote "${DIRS[$NEXT]}" >/dev/null || { fail "promoting server $NEXT"; break; }
    promoted_at=$(date +%s.%6N)
    done_faults=$((done_faults + 1))
    CUR=$NEXT
    held_list="$held_list $held"
    if [ "$held" -gt 0 ]; then
        caught=$((caught + 1))
        echo "failover $done_faults: server $((CUR - 1)) stopped hard; the standby shows $claimed rows in processing and $lost settles lost; server $CUR promoted"
    else
        echo "failover $done_faults: server $((CUR - 1)) stopped hard; the standby is not behind the relays (does not count); server $CUR promoted"
    fi
    # Staging goes on through the same URI, on the new primary, and the
    # relays publish there.
    stage_load "$MULTI" "$ROUTE" 500 24 500
    _resumed() { [ "$(count_since "$promoted_at")" -gt 0 ]; }
    wait_until 60 _resumed || { fail "no relay published in 60 s after server $CUR was promoted"; break; }
    [ "$held" = 0 ] || WINDOWS+=("$crash_at $(date +%s.%6N)")
    [ "$caught" -lt "$FAILOVERS" ] && [ "$done_faults" -lt "$MAX_FAILOVERS" ] && standby $((CUR + 1))
done
[ "$caught" -ge "$FAILOVERS" ] && pass "$caught failovers caught the relays holding rows (rows to do again at each crash:$held_list)" ||
    fail "$caught of $done_faults failovers caught the relays holding rows: the failovers tested nothing"

URI=$(at "$CUR")
# Each relay lost its sessions at each crash, and finds the new primary on
# its own: a reconnection per failover at least.
reconnects() { grep -c "reconnected to PostgreSQL" "$1"; }
for l in "${LOGS[@]}"; do
    _back() { [ "$(reconnects "$l")" -ge "$done_faults" ]; }
    wait_until 60 _back && pass "$(basename "$l" .log) reconnected $(reconnects "$l") times" ||
        fail "$(basename "$l" .log) reconnected $(reconnects "$l") times in $done_faults failovers: $(grep -v ' info: ' "$l" | tail -1)"
done
drained() { [ "$(q "SELECT count(*) FROM outbox WHERE status <> 'published'")" = 0 ]; }
wait_until 120 drained || fail "not drained 120 s after the last failover: $(stats_of "$URI" --route "$ROUTE")"
for i in 0 1; do
    if kill -0 "${RELAYS[$i]}" 2>/dev/null; then
        stop_process "${RELAYS[$i]}" TERM
        [ "$RC" = 0 ] || fail "relay $((i + 1)) exited $RC on SIGTERM: $(tail -1 "${LOGS[$i]}")"
    else
        fail "relay $((i + 1)) died: $(grep -v ' info: ' "${LOGS[$i]}" | tail -1)"
    fi
done
back=$(cat "${LOGS[@]}" | grep -c "reconnected to PostgreSQL")

check "pending processing published dead on the last primary" "0 0 $STAGED 0" "$(stats_of "$URI" --route "$ROUTE")"
again=$(q "SELECT count(*) FROM outbox WHERE attempts > 1")
staged_pg "$TMP/staged" outbox "$ROUTE"
"$PY" "$SRC_ROOT/tests/integration/nats/read_stream.py" "$NATS_URI" "$SUBJECT" "$TMP/read.jsonl" \
    "$TMP/staged" "$ROUTE" >"$TMP/read.out" 2>&1
rc=$?
cat "$TMP/read.out"
[ $rc = 0 ] || fail "read_stream.py exited $rc"
dups=$(duplicates "$TMP/read.jsonl")
analyze "$TMP/staged.ids" "$TMP/read.jsonl" 0
# Settles the relays counted as published that the failovers took back:
# those rows went to JetStream a second time and it dropped them.
read -r _ published _ <<<"$(relay_stop_counts "${LOGS[@]}")"
# Each failover's pause (of those that caught the relays at work): the
# longest gap between settles (published_at, as the last primary has them)
# from the crash to the relays' first publish on the new primary.
longest=0
for w in "${WINDOWS[@]}"; do
    read -r from to <<<"$w"
    p=$(pause_pg outbox "$from - 5" "$to")
    echo "failover pause: $p ms"
    [ "$p" -le "$longest" ] || longest=$p
done
figures "$done_faults" "$STAGED" "$dups" "$longest" \
    "published again and dropped by JetStream $((published - STAGED)), rows claimed again $again, reconnects $back"
finish
