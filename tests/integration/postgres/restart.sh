#!/usr/bin/env bash
# A running relay survives a PostgreSQL restart (pg_ctl restart under it)
# and finishes with nothing lost, each key's events in staging order. On a
# private server of this test, so that the restart cuts no other test's
# connections.
. "$(dirname "$0")/../../harness/harness.sh"
use_outbox "$1"
need_cmd psql postgresql-client
private_server postgres
URI=$PRIV_URI
SCH=public
REL=outbox
pg_table "${4:-}"

stage_load "$URI" orders 20000 40 1000 "$REL"
check "staged" 20000 "$STAGED"
OUT=$TMP/out.jsonl
pg_relay --route orders --sink "file:$OUT" --batch 100 --lease 3s --poll 20ms
R=$RELAY_PID
wait_until 60 sql_is "SELECT count(*) >= 2000 FROM $REL WHERE status = 'published'" t ||
    fail "no progress before the restart"
before=$(q "SELECT count(*) FROM $REL WHERE status = 'published'")
"$SERVICES/postgres.sh" restart "$PRIV_DIR" >/dev/null || { fail "restart failed"; finish; }
[ "$before" -lt 20000 ] && pass "server restarted under the relay after $before of 20000 events" ||
    fail "the relay had published everything before the restart: the restart tested nothing"
wait_until 180 sql_is "SELECT count(*) FROM $REL WHERE status <> 'published'" 0 ||
    fail "not drained: $(q "SELECT count(*) FROM $REL WHERE status <> 'published'") left"
if kill -0 "$R" 2>/dev/null; then pass "relay still running"; else fail "relay died: $(tail -3 "$TMP/relay.log")"; fi
stop_process "$R" TERM
[ "$RC" = 0 ] || fail "relay exited $RC after SIGTERM"

check "published rows" 20000 "$(q "SELECT count(*) FROM $REL WHERE status = 'published'")"
analyze "serials:20000" "$OUT" 100
check "per-key published_at order breaks" 0 "$(order_breaks)"
grep -c "reconnected to PostgreSQL" "$TMP/relay.log" >/dev/null &&
    echo "relay log: $(grep -c . "$TMP/relay.log") lines, e.g. $(grep -m1 reconnected "$TMP/relay.log")"
finish
