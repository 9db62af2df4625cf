#!/usr/bin/env bash
# A running relay survives a PostgreSQL restart (pg_ctl restart under it)
# and finishes with nothing lost. Needs the server of
# tools/services/postgres.sh (OUTBOX_PG_DIR); it must run alone, since the
# restart cuts every other test's connections too.
. "$(dirname "$0")/lib.sh" "$@"

SERVICE=$(cd "$(dirname "$0")/../../.." && pwd)/tools/services/postgres.sh
if [ -z "${OUTBOX_PG_DIR:-}" ]; then
    echo "*** SKIPPED: restarting the server needs OUTBOX_PG_DIR (set by tools/services/postgres.sh start)"
    exit 77
fi

make_table
check "staged" "staged 20000" "$("$PG_LOAD" "$URI" "$REL" orders 20000 40 1000)"
OUT=$TMP/out.jsonl
relay --route orders --sink "file:$OUT" --batch 100 --lease 3s --poll 20ms
R=$RELAY_PID
wait_for "SELECT count(*) >= 2000 FROM $REL WHERE status = 'published'" t 60 || fail "no progress before the restart"
before=$(q "SELECT count(*) FROM $REL WHERE status = 'published'")
"$SERVICE" restart "$OUTBOX_PG_DIR" || { fail "restart failed"; finish; }
pass "server restarted under the relay after $before events"
wait_for "SELECT count(*) FROM $REL WHERE status <> 'published'" 0 180 || fail "not drained: $(unpublished) left"
if kill -0 "$R" 2>/dev/null; then pass "relay still running"; else fail "relay died: $(tail -3 "$TMP/relay.log")"; fi
kill -TERM "$R"
wait "$R" || fail "relay exited $? after SIGTERM"
PIDS=""

check "published rows" 20000 "$(q "SELECT count(*) FROM $REL WHERE status = 'published'")"
check "distinct events written" 20000 "$(grep -o '"id":"[^"]*"' "$OUT" | sort -u | wc -l | tr -d ' ')"
check "per-key order breaks" 0 "$(order_breaks)"
grep -q "reconnected\|relay orders:" "$TMP/relay.log" && echo "relay log: $(grep -c . "$TMP/relay.log") lines, e.g. $(head -1 "$TMP/relay.log")"
finish
