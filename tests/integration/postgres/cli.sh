#!/usr/bin/env bash
# The outbox CLI on PostgreSQL: schema print/apply/check, stage, relay,
# stats, replay and purge, on postgresql:// URIs and on libpq key=value
# strings ("postgres:host=... dbname=..."), and its one-line errors.
. "$(dirname "$0")/../../harness/harness.sh"
use_outbox "$1"
pg_outbox cli

# The same server as a libpq key=value string.
host=$(q "SELECT coalesce(host(inet_server_addr()), '')")
[ -n "$host" ] || host=${OUTBOX_PG_SOCKET:-/var/run/postgresql}
KV="postgres:host=$host port=$(q "SELECT current_setting('port')") user=$(q "SELECT current_user") dbname=$(q "SELECT current_database()")"

expect 0 schema print --store postgres --relation "$REL" --hlc --checkpoint &&
    grep -q "CREATE TABLE IF NOT EXISTS \"$SCH\".\"outbox\"" "$OUT" && grep -q "hlc_checkpoint" "$OUT" &&
    pass "schema print"
expect 1 schema check --store "$URI" --relation "$REL" && grep -q "missing table $REL" "$OUT" &&
    pass "schema check on a missing table: $(cat "$OUT")"
run stats --store "$URI" --relation "$REL"
[ "$RC" -eq 2 ] && grep -q "not found" "$ERR" && pass "stats on a missing table: $(cat "$ERR")" ||
    fail "stats on a missing table: $RC $(cat "$ERR")"
expect 0 schema apply --store "$KV" --relation "$REL" --yes-i-know && pass "schema apply (key=value)"
expect 0 schema check --store "$URI" --relation "$REL" && pass "schema check: $(cat "$OUT")"

expect 0 stage --store "$URI" --relation "$REL" --route orders --type order.created --count 3 --payload '{"n":1}' &&
    check "stage" "staged 3" "$(cat "$OUT")"
expect 0 stage --store "$KV" --relation "$REL" --route orders --type order.created --key c1 &&
    check "stage (key=value)" "staged 1" "$(cat "$OUT")"
expect 0 stats --store "$KV" --relation "$REL" --route orders --json &&
    grep -q '"pending":4' "$OUT" && pass "stats (key=value): $(cat "$OUT")"
expect 0 relay --store "$URI" --relation "$REL" --route orders --sink "file:$TMP/out.jsonl" --until-idle --quiet &&
    check "relay wrote" 4 "$(wc -l <"$TMP/out.jsonl" | tr -d ' ')"
expect 0 stats --store "$URI" --relation "$REL" --json && grep -q '"published":4' "$OUT" &&
    pass "stats: $(cat "$OUT")"

dead=$(q "UPDATE $REL SET status = 'dead', last_error = 'rejected' WHERE id = (SELECT min(id::text)::uuid FROM $REL) RETURNING event_id")
q "UPDATE $REL SET status = 'dead' WHERE ordering_key = 'c1'" >/dev/null
expect 0 replay --store "$URI" --relation "$REL" --route orders --event-id "$dead" &&
    check "replay one" "replayed 1" "$(cat "$OUT")"
expect 1 replay --store "$URI" --relation "$REL" --event-id "$dead" && pass "replay of a row no longer dead: $(cat "$ERR")"
expect 0 replay --store "$KV" --relation "$REL" --all-dead && check "replay all (key=value)" "replayed 1" "$(cat "$OUT")"
check "replayed rows are pending with attempts 0" 2 "$(q "SELECT count(*) FROM $REL WHERE status = 'pending' AND attempts = 0")"

q "UPDATE $REL SET published_at = now() - interval '3 days' WHERE status = 'published'" >/dev/null
expect 0 purge --store "$URI" --relation "$REL" --route other --published-before 1d && check "purge other route" "purged 0" "$(cat "$OUT")"
expect 0 purge --store "$KV" --relation "$REL" --published-before 1d && check "purge" "purged 2" "$(cat "$OUT")"
check "rows left" 2 "$(q "SELECT count(*) FROM $REL")"

# Errors are one line and name the problem.
run stats --store "postgresql://127.0.0.1:1/nowhere?connect_timeout=2" --relation "$REL"
[ "$RC" -eq 2 ] && [ "$(wc -l <"$ERR")" -eq 1 ] && grep -q "cannot connect" "$ERR" &&
    pass "unreachable server: $(cat "$ERR")" || fail "unreachable server: $RC $(cat "$ERR")"
run stats --store "postgres:host=x nosuchoption=1"
[ "$RC" -eq 2 ] && grep -q "nosuchoption" "$ERR" && pass "bad key=value: $(cat "$ERR")" ||
    fail "bad key=value: $RC $(cat "$ERR")"
q "ALTER TABLE $REL DROP COLUMN last_error" >/dev/null
run stats --store "$URI" --relation "$REL"
[ "$RC" -eq 2 ] && grep -q "column last_error missing" "$ERR" && pass "missing column: $(cat "$ERR")" ||
    fail "missing column: $RC $(cat "$ERR")"
finish
