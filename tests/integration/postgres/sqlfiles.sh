#!/usr/bin/env bash
# The hand-run SQL files in sql/postgres/ work as shipped: outbox.sql,
# optional.sql, the migrations, inbox.sql and autovacuum.sql apply (twice,
# where they say they are safe to run again) to a fresh schema, the result
# passes `outbox schema check` (with --inbox for the inbox table), and the
# autovacuum settings are on the table.
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

# The inbox: the migration on an installation without it, then inbox.sql over
# it (both safe to run again), and the table is the one the driver makes.
for f in migrate_002_inbox.sql inbox.sql; do
    for n in 1 2; do
        if apply "$f"; then pass "$f applies (run $n)"; else fail "$f run $n: $(cat "$TMP/psql.out")"; fi
    done
done
check "inbox columns" "consumer text NO,event_id text NO,received_at timestamp with time zone NO now()" \
    "$(q "SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod) || ' ' ||
          CASE WHEN attnotnull THEN 'NO' ELSE 'YES' END ||
          coalesce(' ' || pg_get_expr(d.adbin, d.adrelid), ''), ',' ORDER BY attnum)
          FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
          WHERE attrelid = '$SCH.outbox_inbox'::regclass AND attnum > 0 AND NOT attisdropped")"
check "inbox indexes" "outbox_inbox_pkey (consumer, event_id) unique,outbox_inbox_received_idx (received_at)" \
    "$(q "SELECT string_agg(c.relname || ' (' || array_to_string(ARRAY(SELECT attname FROM
          unnest(i.indkey) WITH ORDINALITY k(n, o) JOIN pg_attribute ON attrelid = i.indrelid AND
          attnum = k.n ORDER BY o), ', ') || ')' || CASE WHEN i.indisunique THEN ' unique' ELSE '' END,
          ',' ORDER BY c.relname) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
          WHERE i.indrelid = '$SCH.outbox_inbox'::regclass")"
if "$OUTBOX" schema check --store "$URI" --relation "$REL" --inbox >"$TMP/out" 2>&1; then
    pass "schema check --inbox after inbox.sql: $(head -1 "$TMP/out")"
else
    fail "schema check --inbox after inbox.sql: $(cat "$TMP/out")"
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
