#!/usr/bin/env bash
# The hand-run SQL files in sql/postgres/ work as shipped: outbox.sql,
# optional.sql, the migration and autovacuum.sql apply (twice, where they say
# they are safe to run again) to a fresh schema, the result passes
# `outbox schema check`, and the autovacuum settings are on the table.
. "$(dirname "$0")/../../harness/harness.sh"
use_outbox "$1"
pg_outbox sqlfiles
SQL=${3:?usage: $0 OUTBOX_CLI PG_STAGE SQL_DIR}

# apply FILE: the file with app. replaced by this test's schema.
apply() {
    sed "s/\bapp\./$SCH./g; s/SCHEMA IF NOT EXISTS app;/SCHEMA IF NOT EXISTS $SCH;/" "$SQL/$1" >"$TMP/$1"
    psql -X -q -v ON_ERROR_STOP=1 "$URI" -f "$TMP/$1" >"$TMP/psql.out" 2>&1
}

if apply outbox.sql; then pass "outbox.sql applies"; else fail "outbox.sql: $(cat "$TMP/psql.out")"; fi
for f in migrate_001_attempts_available_ordering.sql optional.sql autovacuum.sql; do
    for n in 1 2; do
        if apply "$f"; then pass "$f applies (run $n)"; else fail "$f run $n: $(cat "$TMP/psql.out")"; fi
    done
done
if "$OUTBOX" schema check --store "$URI" --relation "$REL" >"$TMP/out" 2>&1; then
    pass "schema check after the shipped files: $(head -1 "$TMP/out")"
else
    fail "schema check after the shipped files: $(cat "$TMP/out")"
fi
opts=$(q "SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = '$REL'::regclass")
for want in autovacuum_vacuum_scale_factor=0 autovacuum_vacuum_threshold=10000 \
    autovacuum_vacuum_cost_delay=0 autovacuum_analyze_threshold=100000 \
    autovacuum_vacuum_insert_threshold=100000; do
    case ",$opts," in
    *",$want,"*) pass "reloption $want" ;;
    *) fail "reloption $want missing from '$opts'" ;;
    esac
done
finish
