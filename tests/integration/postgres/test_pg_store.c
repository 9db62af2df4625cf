/* PostgreSQL store driver against a real server, through the public API
 * and the real loader (OUTBOX_DRIVER_PATH points at the build tree).
 *
 * Every case works in its own schema (it_<tag>_<pid>, Check forks each
 * case) and drops it afterwards, so cases and other test programs can share
 * one server and run in parallel. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "outbox/outbox.h"
#include "pgt.h"
#include "th_inbox.h"

static PGconn *db;
static char schema[64];
static char rel[128];
/* Set by the argument "canonical": every table made by fresh() keeps only
 * the canonical indexes (SPEC 2's), so claims take the shape built for
 * such a table. */
static int canonical;

static void setup(void)
{
    db = pgt_connect();
    snprintf(schema, sizeof schema, "%s", pgt_schema("store"));
    snprintf(rel, sizeof rel, "%s.outbox", schema);
    pgt_exec(db, "DROP SCHEMA IF EXISTS %s CASCADE", schema);
}

static void teardown(void)
{
    if (!getenv("PGT_KEEP")) /* PGT_KEEP=1 leaves a failed case's rows to look at */
        pgt_exec(db, "DROP SCHEMA IF EXISTS %s CASCADE", schema);
    PQfinish(db);
}

static outbox_store_t *open_rel(const char *uri, const char *relation, int want, char *msg,
                                size_t size)
{
    outbox_store_options_t o = {.struct_size = sizeof o, .relation = relation};
    outbox_store_t *s = NULL;
    outbox_diag_t d = {0};
    int rc = outbox_store_open(uri, &o, &s, &d);
    if (msg)
        snprintf(msg, size, "%s", d.message);
    ck_assert_msg(rc == want, "open %s on %s: rc %d (%s), want %d", relation, uri, rc, d.message, want);
    return s;
}

/* A store on rel, made by the driver's own schema apply. */
static outbox_store_t *fresh(uint32_t flags)
{
    outbox_store_options_t o = {.struct_size = sizeof o, .relation = rel, .flags = OUTBOX_OPEN_SCHEMA_ONLY};
    outbox_store_t *s = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_store_open(pgt_uri(), &o, &s, &d), OUTBOX_OK);
    outbox_schema_opts_t so = {.struct_size = sizeof so, .relation = rel, .flags = flags};
    ck_assert_msg(outbox_store_schema_apply(s, &so) == OUTBOX_OK, "%s", outbox_store_message(s));
    outbox_store_close(s);
    if (canonical)
        pgt_exec(db, "DROP INDEX IF EXISTS %s.outbox_pending_idx, %s.outbox_key_idx, "
                     "%s.outbox_processing_idx, %s.outbox_pending_hlc_idx, %s.outbox_key_hlc_idx",
                 schema, schema, schema, schema, schema);
    return open_rel(pgt_uri(), rel, OUTBOX_OK, NULL, 0);
}

static int stage(outbox_store_t *s, void *native, const char *route, const char *key,
                 const char *event_id, const char *payload)
{
    outbox_event_t e = {.event_type = "test.event", .payload = payload ? payload : "{}",
                        .ordering_key = key, .event_id = event_id};
    size_t n = 0;
    int rc = outbox_store_stage(s, native, route, &e, 1, &n);
    return rc == OUTBOX_OK ? (int)n : rc;
}

static outbox_claim_req_t req(const char *route, size_t limit)
{
    return (outbox_claim_req_t){.struct_size = sizeof(outbox_claim_req_t), .route = route,
                                .limit = limit, .lease_us = 30000000};
}

/* application_name=tag on top of OUTBOX_PG_URI, to find our session. */
static void tagged_uri(char *out, size_t size, const char *tag, const char *extra)
{
    const char *u = pgt_uri();
    snprintf(out, size, "%s%sapplication_name=%s%s", u, strchr(u, '?') ? "&" : "?", tag, extra ? extra : "");
}

/* ---------------------------------------------------------------- open */

START_TEST(test_spec_ddl_open)
{
    /* The table exactly as SPEC 2 writes it: the relay must work on it. */
    pgt_spec_table(db, schema, "outbox", NULL);
    outbox_store_t *s = open_rel(pgt_uri(), rel, OUTBOX_OK, NULL, 0);
    uint32_t caps = outbox_store_capabilities(s);
    ck_assert(caps & OUTBOX_STORE_CAP_CONCURRENT);
    ck_assert(caps & OUTBOX_STORE_CAP_WAIT);
    ck_assert(caps & OUTBOX_STORE_CAP_NATIVE_TX);
    ck_assert(!(caps & (OUTBOX_STORE_CAP_HLC | OUTBOX_STORE_CAP_TRACEPARENT | OUTBOX_STORE_CAP_CHECKPOINT)));
    ck_assert_int_eq(stage(s, NULL, "orders", "k", NULL, "{\"n\":1}"), 1);
    const outbox_row_t *rows;
    size_t n;
    outbox_fence_t f;
    outbox_claim_req_t r = req("orders", 10);
    ck_assert_int_eq(outbox_store_claim(s, &r, &rows, &n, &f), OUTBOX_OK);
    ck_assert_uint_eq(n, 1);
    outbox_settle_item_t it = {.id = rows[0].id, .kind = OUTBOX_SETTLE_PUBLISHED};
    ck_assert_int_eq(outbox_store_settle(s, &f, &it, 1, NULL), OUTBOX_OK);
    outbox_store_close(s);

    /* The optional parts of SPEC 2, added by hand, are detected. */
    pgt_exec(db, "ALTER TABLE %s ADD COLUMN traceparent TEXT", rel);
    pgt_exec(db, "ALTER TABLE %s ADD COLUMN hlc BIGINT", rel);
    pgt_exec(db, "CREATE INDEX outbox_claim_hlc_idx ON %s (outbox_route, status, available_at, hlc, created_at, id)", rel);
    pgt_exec(db, "CREATE TABLE %s.hlc_checkpoint (node_key TEXT NOT NULL, hlc BIGINT NOT NULL, PRIMARY KEY (node_key))", schema);
    s = open_rel(pgt_uri(), rel, OUTBOX_OK, NULL, 0);
    caps = outbox_store_capabilities(s);
    ck_assert(caps & OUTBOX_STORE_CAP_HLC);
    ck_assert(caps & OUTBOX_STORE_CAP_TRACEPARENT);
    ck_assert(caps & OUTBOX_STORE_CAP_CHECKPOINT);
    outbox_store_close(s);
}
END_TEST

START_TEST(test_missing_parts)
{
    char msg[OUTBOX_MESSAGE_MAX];
    /* A missing table has a code of its own: schema apply makes it. */
    open_rel(pgt_uri(), rel, OUTBOX_EMISSING, msg, sizeof msg);
    ck_assert_msg(strstr(msg, "outbox") && strstr(msg, "not found"), "%s", msg);
    pgt_spec_table(db, schema, "outbox", "ordering_key");
    open_rel(pgt_uri(), rel, OUTBOX_ESCHEMA, msg, sizeof msg);
    ck_assert_msg(strstr(msg, "column ordering_key missing"), "%s", msg);
}
END_TEST

static void collect(void *ctx, const char *problem)
{
    char *all = ctx;
    strncat(all, problem, 4000 - strlen(all));
    strncat(all, "\n", 4000 - strlen(all));
}

START_TEST(test_schema_check)
{
    pgt_spec_table(db, schema, "outbox", NULL);
    outbox_store_t *s = open_rel(pgt_uri(), rel, OUTBOX_OK, NULL, 0);
    outbox_schema_opts_t so = {.struct_size = sizeof so, .relation = rel};
    char all[4096] = "";
    size_t problems = 0;
    ck_assert_int_eq(outbox_store_schema_check(s, &so, collect, all, &problems), OUTBOX_OK);
    /* The relay works with the SPEC's indexes alone, more slowly: warned. */
    ck_assert_msg(problems == 3, "%zu problems:\n%s", problems, all);
    ck_assert_msg(strstr(all, "WHERE status = 'pending': claims fall back to outbox_claim_idx"), "%s", all);
    ck_assert_msg(!strstr(all, "column"), "%s", all);
    ck_assert_int_eq(outbox_store_schema_apply(s, &so), OUTBOX_OK);
    all[0] = '\0';
    ck_assert_int_eq(outbox_store_schema_check(s, &so, collect, all, &problems), OUTBOX_OK);
    ck_assert_msg(problems == 0, "%s", all);
    pgt_exec(db, "ALTER TABLE %s ALTER COLUMN payload TYPE text", rel);
    pgt_exec(db, "DROP INDEX %s.outbox_pending_idx", schema);
    so.flags = OUTBOX_SCHEMA_HLC | OUTBOX_SCHEMA_CHECKPOINT;
    ck_assert_int_eq(outbox_store_schema_check(s, &so, collect, all, &problems), OUTBOX_OK);
    ck_assert_msg(strstr(all, "column payload has type text, expected jsonb"), "%s", all);
    ck_assert_msg(strstr(all, "missing column hlc"), "%s", all);
    ck_assert_msg(strstr(all, "missing table " ), "%s", all);
    ck_assert_msg(strstr(all, "missing index on (outbox_route, created_at, id)"), "%s", all);
    outbox_store_close(s);
}
END_TEST

/* -------------------------------------------------------------- basics */

START_TEST(test_stage_claim_settle)
{
    outbox_store_t *s = fresh(0);
    const char *dup = "0190a0b0-0000-7000-8000-000000000001";
    ck_assert_int_eq(stage(s, NULL, "orders", NULL, dup, "{\"a\":[1,2]}"), 1);
    ck_assert_int_eq(stage(s, NULL, "orders", NULL, dup, "{}"), 0); /* a duplicate is skipped */
    ck_assert_int_eq(stage(s, NULL, "orders", "k", NULL, "\"x\""), 1);
    ck_assert_int_eq(stage(s, NULL, "orders", "k", NULL, "3"), 1);
    ck_assert_int_eq(stage(s, NULL, "other", NULL, NULL, "null"), 1);
    ck_assert_int_eq(stage(s, NULL, "orders", NULL, NULL, "{bad"), OUTBOX_EINVAL);

    const outbox_row_t *rows;
    size_t n;
    outbox_fence_t f;
    outbox_claim_req_t r = req("orders", 10);
    ck_assert_int_eq(outbox_store_claim(s, &r, &rows, &n, &f), OUTBOX_OK);
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(rows[0].event_id, dup);
    ck_assert_str_eq(rows[0].payload, "{\"a\": [1, 2]}"); /* jsonb's own spelling */
    ck_assert_int_eq(rows[0].attempts, 1);
    ck_assert_str_eq(rows[1].ordering_key, "k");
    ck_assert_str_eq(rows[1].payload, "\"x\"");
    ck_assert(f.stamp > 0);

    int64_t later = rows[0].created_at + 3600 * INT64_C(1000000);
    outbox_settle_item_t it[3] = {
        {.id = rows[0].id, .kind = OUTBOX_SETTLE_PUBLISHED},
        {.id = rows[1].id, .kind = OUTBOX_SETTLE_RESCHEDULE, .available_at = later, .error = "503 \xff bad"},
        {.id = rows[2].id, .kind = OUTBOX_SETTLE_RELEASE},
    };
    size_t applied = 0;
    ck_assert_int_eq(outbox_store_settle(s, &f, it, 3, &applied), OUTBOX_OK);
    ck_assert_uint_eq(applied, 3);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s WHERE status = 'published' AND published_at IS NOT NULL", rel), 1);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s WHERE last_error = '503 ? bad' AND available_at > now()", rel), 1);
    ck_assert_int_eq(pgt_int(db, "SELECT attempts FROM %s WHERE id = '%s'", rel, it[2].id), 0);

    /* A stale fence changes nothing. */
    outbox_fence_t stale = f;
    ck_assert_int_eq(outbox_store_settle(s, &stale, it, 1, &applied), OUTBOX_ECONFLICT);
    ck_assert_uint_eq(applied, 0);

    /* The released row is behind its rescheduled elder: the key is held. */
    ck_assert_int_eq(outbox_store_claim(s, &r, &rows, &n, &f), OUTBOX_OK);
    ck_assert_uint_eq(n, 0);
    pgt_exec(db, "UPDATE %s SET available_at = now() - interval '1 second' WHERE last_error IS NOT NULL", rel);
    ck_assert_int_eq(outbox_store_claim(s, &r, &rows, &n, &f), OUTBOX_OK);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(rows[0].last_error, "503 ? bad");
    ck_assert_int_eq(rows[0].attempts, 2);
    outbox_settle_item_t dead[2] = {{.id = rows[0].id, .kind = OUTBOX_SETTLE_DEAD, .error = "400"},
                                    {.id = rows[1].id, .kind = OUTBOX_SETTLE_DEAD}};
    ck_assert_int_eq(outbox_store_settle(s, &f, dead, 2, NULL), OUTBOX_OK);

    outbox_stats_t st;
    ck_assert_int_eq(outbox_store_stats(s, "orders", &st), OUTBOX_OK);
    ck_assert_uint_eq(st.published, 1);
    ck_assert_uint_eq(st.dead, 2);
    ck_assert_uint_eq(st.pending, 0);
    ck_assert_int_eq(outbox_store_stats(s, NULL, &st), OUTBOX_OK);
    ck_assert_uint_eq(st.pending, 1);
    ck_assert(st.oldest_pending_created_at > 0);

    uint64_t count = 0;
    ck_assert_int_eq(outbox_store_replay(s, "orders", dup, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 0); /* published, not dead */
    ck_assert_int_eq(outbox_store_replay(s, "orders", NULL, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 2);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s WHERE status = 'pending' AND attempts = 0", rel), 3);

    ck_assert_int_eq(outbox_store_purge(s, NULL, INT64_MAX / 2, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 1);
    outbox_store_close(s);
}
END_TEST

START_TEST(test_hlc_refused)
{
    outbox_store_t *s = fresh(0);
    const outbox_row_t *rows;
    size_t n;
    outbox_fence_t f;
    outbox_claim_req_t r = req("orders", 10);
    r.hlc_order = 1;
    ck_assert_int_eq(outbox_store_claim(s, &r, &rows, &n, &f), OUTBOX_ENOTSUP);
    ck_assert_msg(strstr(outbox_store_message(s), "hlc"), "%s", outbox_store_message(s));
    outbox_route_config_t rc = {.struct_size = sizeof rc, .route = "orders", .hlc = 1};
    ck_assert_int_eq(outbox_store_configure_route(s, &rc), OUTBOX_ENOTSUP);
    outbox_store_close(s);

    /* With the column, hlc order puts unstamped rows last. */
    s = fresh(OUTBOX_SCHEMA_HLC | OUTBOX_SCHEMA_CHECKPOINT);
    ck_assert_int_eq(stage(s, NULL, "orders", "k", NULL, "1"), 1);
    ck_assert_int_eq(outbox_store_configure_route(s, &rc), OUTBOX_OK);
    ck_assert_int_eq(stage(s, NULL, "orders", "k", NULL, "2"), 1);
    ck_assert_int_eq(outbox_store_claim(s, &r, &rows, &n, &f), OUTBOX_OK);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(rows[0].payload, "2");
    ck_assert(rows[0].hlc > 0);
    ck_assert_int_eq(rows[1].hlc, 0);
    outbox_store_close(s);
}
END_TEST

/* ---------------------------------------------------------------- URIs */

/* The connection parameters of OUTBOX_PG_URI as a libpq key=value string. */
static void keyvalue(char *out, size_t size)
{
    char *err = NULL;
    PQconninfoOption *opts = PQconninfoParse(pgt_uri(), &err);
    ck_assert_msg(opts, "%s", err ? err : "");
    out[0] = '\0';
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        if (!o->val || !*o->val)
            continue;
        size_t used = strlen(out);
        snprintf(out + used, size - used, "%s%s=%s", used ? " " : "", o->keyword, o->val);
    }
    PQconninfoFree(opts);
}

START_TEST(test_uri_forms)
{
    outbox_store_close(fresh(0));
    char kv[512], uri[600];
    keyvalue(kv, sizeof kv);
    snprintf(uri, sizeof uri, "postgres:%s", kv);
    outbox_store_t *s = open_rel(uri, rel, OUTBOX_OK, NULL, 0);
    ck_assert_int_eq(stage(s, NULL, "r", NULL, NULL, "{}"), 1);
    outbox_store_close(s);
    /* The scheme is matched without regard to case, also for libpq. */
    if (strncmp(pgt_uri(), "postgresql://", 13) == 0) {
        snprintf(uri, sizeof uri, "PostgreSQL://%s", pgt_uri() + 13);
        outbox_store_close(open_rel(uri, rel, OUTBOX_OK, NULL, 0));
    }
    char msg[OUTBOX_MESSAGE_MAX];
    open_rel("postgresql:host=localhost bogus_option=1", rel, OUTBOX_EINVAL, msg, sizeof msg);
    ck_assert_msg(strstr(msg, "bogus_option"), "%s", msg);
    open_rel("postgresql://127.0.0.1:1/nothing?connect_timeout=2", rel, OUTBOX_ETRANSIENT, msg, sizeof msg);
    ck_assert_msg(strstr(msg, "cannot connect"), "%s", msg);
    open_rel("postgres:?host=127.0.0.1&port=1&connect_timeout=2", rel, OUTBOX_ETRANSIENT, msg, sizeof msg);
}
END_TEST

/* -------------------------------------------------------- transactions */

/* Claim and settle commit without waiting for the WAL flush, for their own
 * transaction only; staging on the same connection afterwards keeps the
 * session's setting. A trigger records the setting each write ran under.
 * Claims alternate between batch limits, which rebuilds the statement. */
START_TEST(test_claim_commit_setting_and_limits)
{
    outbox_store_close(fresh(0));
    /* The test server runs with synchronous_commit off; this session asks
     * for it on, as a production server has it. */
    char uri[512];
    tagged_uri(uri, sizeof uri, "commitsetting", "&options=-csynchronous_commit%3Don");
    outbox_store_t *s = open_rel(uri, rel, OUTBOX_OK, NULL, 0);
    pgt_exec(db, "CREATE TABLE %s.seen (op text, sc text)", schema);
    pgt_exec(db, "CREATE FUNCTION %s.note() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                 "INSERT INTO %s.seen VALUES (TG_OP, current_setting('synchronous_commit')); "
                 "RETURN NULL; END $$",
             schema, schema);
    pgt_exec(db, "CREATE TRIGGER note AFTER INSERT OR UPDATE ON %s FOR EACH ROW EXECUTE FUNCTION %s.note()",
             rel, schema);
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(stage(s, NULL, "orders", NULL, NULL, "{}"), 1);

    static const size_t limits[] = {1, 3, 1, 100};
    static const size_t want[] = {1, 3, 1, 1};
    for (int i = 0; i < 4; i++) {
        const outbox_row_t *rows;
        size_t n;
        outbox_fence_t f;
        outbox_claim_req_t r = req("orders", limits[i]);
        ck_assert_msg(outbox_store_claim(s, &r, &rows, &n, &f) == OUTBOX_OK, "%s", outbox_store_message(s));
        ck_assert_uint_eq(n, want[i]);
        outbox_settle_item_t it[3];
        for (size_t k = 0; k < n; k++)
            it[k] = (outbox_settle_item_t){.id = rows[k].id, .kind = OUTBOX_SETTLE_PUBLISHED};
        size_t applied = 0;
        ck_assert_int_eq(outbox_store_settle(s, &f, it, n, &applied), OUTBOX_OK);
        ck_assert_uint_eq(applied, n);
    }
    ck_assert_int_eq(stage(s, NULL, "orders", NULL, NULL, "{}"), 1);

    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s WHERE status = 'published'", rel), 6);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s.seen WHERE op = 'INSERT' AND sc = 'on'", schema), 7);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s.seen WHERE op = 'UPDATE' AND sc = 'off'", schema), 12);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s.seen", schema), 19);
    outbox_store_close(s);
}
END_TEST

/* The driver's own session runs without JIT and without sequential scans;
 * a connection the application hands in keeps its own settings. A trigger
 * records the settings each insert ran under. */
START_TEST(test_session_settings)
{
    outbox_store_t *s = fresh(0);
    pgt_exec(db, "CREATE TABLE %s.seen (jit text, seqscan text)", schema);
    pgt_exec(db, "CREATE FUNCTION %s.note() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                 "INSERT INTO %s.seen VALUES (current_setting('jit'), current_setting('enable_seqscan')); "
                 "RETURN NULL; END $$",
             schema, schema);
    pgt_exec(db, "CREATE TRIGGER note AFTER INSERT ON %s FOR EACH ROW EXECUTE FUNCTION %s.note()", rel,
             schema);
    ck_assert_int_eq(stage(s, NULL, "orders", NULL, NULL, "{}"), 1);
    PGconn *app = pgt_connect();
    pgt_exec(app, "SET jit = on");
    pgt_exec(app, "BEGIN");
    ck_assert_int_eq(stage(s, app, "orders", NULL, NULL, "{}"), 1);
    pgt_exec(app, "COMMIT");
    PQfinish(app);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s.seen WHERE jit = 'off' AND seqscan = 'off'", schema), 1);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s.seen WHERE jit = 'on' AND seqscan = 'on'", schema), 1);
    outbox_store_close(s);
}
END_TEST

/* The claim's plan is cached after a few runs. A relay started on an empty
 * table must not keep a plan that reads the whole table once the table has
 * grown: no claim or settle of the driver's session may scan it
 * sequentially. Counted by pg_stat_user_tables once the session is gone
 * (a backend flushes its statistics when it exits). */
START_TEST(test_claim_plan_survives_growth)
{
    outbox_store_close(fresh(0));
    char uri[512];
    tagged_uri(uri, sizeof uri, "planstays", NULL);
    outbox_store_t *s = open_rel(uri, rel, OUTBOX_OK, NULL, 0);
    int64_t before = pgt_int(db, "SELECT seq_scan FROM pg_stat_user_tables WHERE relid = '%s'::regclass", rel);
    const outbox_row_t *rows;
    size_t n;
    outbox_fence_t f;
    outbox_claim_req_t r = req("orders", 100);
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(outbox_store_claim(s, &r, &rows, &n, &f), OUTBOX_OK);
        ck_assert_uint_eq(n, 0);
    }
    pgt_exec(db, "INSERT INTO %s (id, outbox_route, event_id, event_type, occurred_at, payload, status, "
                 "created_at) SELECT gen_random_uuid(), 'orders', gen_random_uuid(), 't', now(), '{}', "
                 "'pending', now() + g * interval '1 microsecond' FROM generate_series(1, 20000) AS g",
             rel);
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(outbox_store_claim(s, &r, &rows, &n, &f), OUTBOX_OK);
        ck_assert_uint_eq(n, 100);
        outbox_settle_item_t it[100];
        for (size_t k = 0; k < n; k++)
            it[k] = (outbox_settle_item_t){.id = rows[k].id, .kind = OUTBOX_SETTLE_PUBLISHED};
        ck_assert_int_eq(outbox_store_settle(s, &f, it, n, NULL), OUTBOX_OK);
    }
    outbox_store_close(s);
    for (int i = 0; i < 100 && pgt_int(db, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'planstays'"); i++)
        usleep(50000);
    int64_t after = pgt_int(db, "SELECT seq_scan FROM pg_stat_user_tables WHERE relid = '%s'::regclass", rel);
    ck_assert_msg(after == before, "the relay's session scanned the table %lld times", (long long)(after - before));
}
END_TEST

/* Waits until no session named app is left: a backend flushes its table
 * statistics when it exits. */
static void session_gone(const char *app)
{
    for (int i = 0; i < 200 && pgt_int(db, "SELECT count(*) FROM pg_stat_activity WHERE application_name = '%s'", app); i++)
        usleep(50000);
}

/* n more pending rows behind the backlog, in staging calls of 500 rows
 * (each call one created_at), keys k0..k49 round-robin, inserted by a
 * session of their own that is gone when this returns. */
static void grow_backlog(int n, int from)
{
    PGconn *c = pgt_connect();
    pgt_exec(c, "SET application_name = 'grower'");
    pgt_exec(c, "INSERT INTO %s (id, outbox_route, event_id, event_type, occurred_at, payload, status, "
                "created_at, ordering_key) SELECT gen_random_uuid(), 'orders', gen_random_uuid(), 't', "
                "now(), '{}', 'pending', timestamptz '2026-01-01' + (g / 500) * interval '1 ms', "
                "'k' || g %% 50 FROM generate_series(%d, %d) AS g",
             rel, from, from + n - 1);
    pgt_exec(c, "VACUUM (ANALYZE) %s", rel);
    PQfinish(c);
    session_gone("grower");
}

typedef struct reads {
    int64_t seq_scan, idx_tup_read;
} reads_t;

static reads_t table_reads(void)
{
    return (reads_t){
        pgt_int(db, "SELECT seq_scan FROM pg_stat_user_tables WHERE relid = '%s'::regclass", rel),
        pgt_int(db, "SELECT coalesce(sum(idx_tup_read), 0) FROM pg_stat_user_indexes WHERE relid = '%s'::regclass", rel),
    };
}

/* What one claim of 100 (and the settle of its rows) reads, in a session
 * of its own; in hlc order when hlc. */
static reads_t one_claim_reads(int hlc)
{
    char uri[512];
    tagged_uri(uri, sizeof uri, "onereads", NULL);
    reads_t before = table_reads();
    outbox_store_t *s = open_rel(uri, rel, OUTBOX_OK, NULL, 0);
    const outbox_row_t *rows;
    size_t n;
    outbox_fence_t f;
    outbox_claim_req_t r = req("orders", 100);
    r.hlc_order = hlc;
    ck_assert_int_eq(outbox_store_claim(s, &r, &rows, &n, &f), OUTBOX_OK);
    ck_assert_uint_eq(n, 100);
    outbox_settle_item_t it[100];
    for (size_t k = 0; k < n; k++)
        it[k] = (outbox_settle_item_t){.id = rows[k].id, .kind = OUTBOX_SETTLE_PUBLISHED};
    ck_assert_int_eq(outbox_store_settle(s, &f, it, n, NULL), OUTBOX_OK);
    outbox_store_close(s);
    session_gone("onereads");
    reads_t after = table_reads();
    return (reads_t){after.seq_scan - before.seq_scan, after.idx_tup_read - before.idx_tup_read};
}

/* A claim reads a batch's worth of rows, not the backlog: with the backlog
 * ten times longer, one claim reads about as many index entries (its
 * batch, the rest of the staging call it ends in, the rows its key check
 * looks back over) and never scans the table. A claim that sorted the
 * pending rows, or looked for each row's predecessor through them, would
 * read some 45,000 entries more. In hlc order the pending rows are
 * unstamped, behind as many stamped rows already published: every stamped
 * row is then before the batch, and the planner's statistics say half the
 * rows have a stamp. */
static void claim_reads_bounded(int hlc)
{
    outbox_store_close(fresh(hlc ? OUTBOX_SCHEMA_HLC : 0));
    if (hlc)
        pgt_exec(db, "INSERT INTO %s (id, outbox_route, event_id, event_type, occurred_at, payload, "
                     "status, created_at, published_at, ordering_key, hlc) SELECT gen_random_uuid(), "
                     "'orders', gen_random_uuid(), 't', now(), '{}', 'published', timestamptz "
                     "'2025-01-01' + (g / 500) * interval '1 ms', now(), 'k' || g %% 50, g FROM "
                     "generate_series(1, 50000) AS g",
                 rel);
    grow_backlog(5000, 0);
    reads_t small = one_claim_reads(hlc);
    grow_backlog(45000, 5000);
    reads_t large = one_claim_reads(hlc);
    ck_assert_msg(small.seq_scan == 0 && large.seq_scan == 0, "sequential scans: %lld and %lld",
                  (long long)small.seq_scan, (long long)large.seq_scan);
    ck_assert_msg(small.idx_tup_read > 0, "no index reads counted");
    /* Some slack: the first claim's settled rows leave dead entries at the
     * front of the indexes that the second claim steps over (VACUUM skips
     * index cleanup for so few). */
    ck_assert_msg(large.idx_tup_read < small.idx_tup_read + 1000,
                  "one claim read %lld index entries from 5,000 pending rows and %lld from 49,900",
                  (long long)small.idx_tup_read, (long long)large.idx_tup_read);
}

START_TEST(test_claim_reads_bounded)
{
    claim_reads_bounded(0);
}
END_TEST

START_TEST(test_claim_reads_bounded_hlc)
{
    claim_reads_bounded(1);
}
END_TEST

/* Rows of one staging call share created_at, so within it claim order is
 * id order alone. A key whose head is locked by another transaction keeps
 * all its rows of that call, whatever their place; the other keys move. */
START_TEST(test_locked_head_one_call)
{
    outbox_store_t *s = fresh(0);
    enum { N = 40 };
    outbox_event_t ev[N];
    char keys[N][8];
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof keys[i], "k%d", i % 4);
        ev[i] = (outbox_event_t){.event_type = "t", .payload = "{}", .ordering_key = i % 5 == 4 ? NULL : keys[i]};
    }
    size_t staged = 0;
    ck_assert_int_eq(outbox_store_stage(s, NULL, "r", ev, N, &staged), OUTBOX_OK);
    ck_assert_uint_eq(staged, N);
    ck_assert_int_eq(pgt_int(db, "SELECT count(DISTINCT created_at) FROM %s", rel), 1);

    /* k2's head in claim order, whichever row that is. */
    PGconn *other = pgt_connect();
    pgt_exec(other, "BEGIN");
    pgt_exec(other, "SELECT 1 FROM %s WHERE id = (SELECT id FROM %s WHERE ordering_key = 'k2' ORDER BY "
                    "created_at, id LIMIT 1) FOR UPDATE", rel, rel);
    int k2 = (int)pgt_int(db, "SELECT count(*) FROM %s WHERE ordering_key = 'k2'", rel);
    const outbox_row_t *rows;
    size_t n;
    outbox_fence_t f;
    outbox_claim_req_t r = req("r", 100);
    ck_assert_int_eq(outbox_store_claim(s, &r, &rows, &n, &f), OUTBOX_OK);
    ck_assert_uint_eq(n, (size_t)(N - k2));
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(!rows[i].ordering_key || strcmp(rows[i].ordering_key, "k2") != 0,
                      "claimed a k2 row behind its locked head");
        if (i)
            ck_assert_msg(strcmp(rows[i - 1].id, rows[i].id) < 0, "rows out of claim order");
    }
    outbox_settle_item_t it[N];
    for (size_t i = 0; i < n; i++)
        it[i] = (outbox_settle_item_t){.id = rows[i].id, .kind = OUTBOX_SETTLE_PUBLISHED};
    ck_assert_int_eq(outbox_store_settle(s, &f, it, n, NULL), OUTBOX_OK);
    pgt_exec(other, "ROLLBACK");
    PQfinish(other);

    /* Released, k2 moves as one run from its head. */
    ck_assert_int_eq(outbox_store_claim(s, &r, &rows, &n, &f), OUTBOX_OK);
    ck_assert_uint_eq(n, (size_t)k2);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s WHERE ordering_key = 'k2' AND status = 'processing'", rel), k2);
    outbox_store_close(s);
}
END_TEST

START_TEST(test_native_tx)
{
    outbox_store_t *s = fresh(0);
    PGconn *app = pgt_connect();
    pgt_exec(app, "CREATE TABLE %s.accounts (id int PRIMARY KEY, balance int)", schema);
    pgt_exec(app, "INSERT INTO %s.accounts VALUES (1, 100)", schema);

    pgt_exec(app, "BEGIN");
    pgt_exec(app, "UPDATE %s.accounts SET balance = 50 WHERE id = 1", schema);
    ck_assert_int_eq(stage(s, app, "acct", NULL, NULL, "{\"balance\":50}"), 1);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s", rel), 0); /* not yet visible */
    pgt_exec(app, "ROLLBACK");
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s", rel), 0);
    ck_assert_int_eq(pgt_int(db, "SELECT balance FROM %s.accounts", schema), 100);

    pgt_exec(app, "BEGIN");
    pgt_exec(app, "UPDATE %s.accounts SET balance = 50 WHERE id = 1", schema);
    ck_assert_int_eq(stage(s, app, "acct", NULL, NULL, "{\"balance\":50}"), 1);
    pgt_exec(app, "COMMIT");
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s", rel), 1);
    ck_assert_int_eq(pgt_int(db, "SELECT balance FROM %s.accounts", schema), 50);

    /* Outside BEGIN the application's connection is refused. */
    ck_assert_int_eq(stage(s, app, "acct", NULL, NULL, "{}"), OUTBOX_EINVAL);
    ck_assert_msg(strstr(outbox_store_message(s), "BEGIN"), "%s", outbox_store_message(s));
    PQfinish(app);
    outbox_store_close(s);
}
END_TEST

START_TEST(test_own_tx)
{
    outbox_store_t *s = fresh(OUTBOX_SCHEMA_HLC | OUTBOX_SCHEMA_CHECKPOINT);
    outbox_route_config_t rc = {.struct_size = sizeof rc, .route = "r", .hlc = 1,
                                .checkpoint_node_key = "node-a"};
    ck_assert_int_eq(outbox_store_configure_route(s, &rc), OUTBOX_OK);
    ck_assert_int_eq(outbox_store_begin(s), OUTBOX_OK);
    ck_assert_int_eq(stage(s, NULL, "r", NULL, NULL, "{}"), 1);
    ck_assert_int_eq(outbox_store_rollback(s), OUTBOX_OK);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s", rel), 0);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s.hlc_checkpoint", schema), 0);

    ck_assert_int_eq(outbox_store_begin(s), OUTBOX_OK);
    ck_assert_int_eq(stage(s, NULL, "r", NULL, NULL, "{}"), 1);
    ck_assert_int_eq(stage(s, NULL, "r", NULL, NULL, "{}"), 1);
    ck_assert_int_eq(outbox_store_commit(s), OUTBOX_OK);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s", rel), 2);
    /* The mark moved in that transaction, to the highest stamp staged. */
    ck_assert_int_eq(pgt_int(db, "SELECT hlc FROM %s.hlc_checkpoint WHERE node_key = 'node-a'", schema),
                     pgt_int(db, "SELECT max(hlc) FROM %s", rel));
    /* Claims run their own transaction and refuse to nest. */
    ck_assert_int_eq(outbox_store_begin(s), OUTBOX_OK);
    const outbox_row_t *rows;
    size_t n;
    outbox_fence_t f;
    outbox_claim_req_t r = req("r", 10);
    ck_assert_int_eq(outbox_store_claim(s, &r, &rows, &n, &f), OUTBOX_EINVAL);
    ck_assert_int_eq(outbox_store_rollback(s), OUTBOX_OK);
    outbox_store_close(s);
}
END_TEST

/* --------------------------------------------------------------- faults */

static void *terminate_later(void *arg)
{
    const char *tag = arg;
    usleep(300000);
    PGconn *c = pgt_connect();
    pgt_exec(c, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '%s'", tag);
    PQfinish(c);
    return NULL;
}

START_TEST(test_reconnect)
{
    outbox_store_close(fresh(0));
    char uri[600], tag[64];
    snprintf(tag, sizeof tag, "it_reset_%ld", (long)getpid());
    tagged_uri(uri, sizeof uri, tag, NULL);
    outbox_store_t *s = open_rel(uri, rel, OUTBOX_OK, NULL, 0);
    const char *e1 = "0190a0b0-0000-7000-8000-0000000000c1";

    /* The session dies while a stage waits on a lock: transient. */
    PGconn *other = pgt_connect();
    pgt_exec(other, "BEGIN");
    pgt_exec(other, "INSERT INTO %s (id, outbox_route, event_id, event_type, occurred_at, payload, status, created_at) "
                    "VALUES (gen_random_uuid(), 'r', '%s', 't', now(), '{}', 'pending', now())", rel, e1);
    pthread_t t;
    pthread_create(&t, NULL, terminate_later, tag);
    ck_assert_int_eq(stage(s, NULL, "r", NULL, e1, "{}"), OUTBOX_ETRANSIENT);
    ck_assert_msg(strstr(outbox_store_message(s), "57P01") || strstr(outbox_store_message(s), "closed"),
                  "%s", outbox_store_message(s));
    pthread_join(t, NULL);
    pgt_exec(other, "ROLLBACK");
    PQfinish(other);
    /* The next call reconnects, prepares again and works. */
    ck_assert_int_eq(stage(s, NULL, "r", NULL, e1, "{}"), 1);

    /* A session that died while idle is noticed before the next statement
     * is sent, and replaced at once, or that call fails as transient. */
    ck_assert_int_eq(pgt_int(db, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = '%s'", tag), 1);
    usleep(100000);
    const outbox_row_t *rows;
    size_t n = 0;
    outbox_fence_t f;
    outbox_claim_req_t r = req("r", 10);
    int rc = outbox_store_claim(s, &r, &rows, &n, &f);
    if (rc == OUTBOX_ETRANSIENT)
        rc = outbox_store_claim(s, &r, &rows, &n, &f);
    ck_assert_msg(rc == OUTBOX_OK, "%s", outbox_store_message(s));
    ck_assert_uint_eq(n, 1);
    outbox_store_close(s);
}
END_TEST

typedef struct crossed {
    outbox_store_t *s;
    const char *first, *second;
    pthread_barrier_t *bar;
    int rc;
    char msg[OUTBOX_MESSAGE_MAX];
} crossed_t;

static void *crossed_stage(void *arg)
{
    crossed_t *c = arg;
    ck_assert_int_eq(outbox_store_begin(c->s), OUTBOX_OK);
    ck_assert_int_eq(stage(c->s, NULL, "r", NULL, c->first, "{}"), 1);
    pthread_barrier_wait(c->bar);
    c->rc = stage(c->s, NULL, "r", NULL, c->second, "{}");
    snprintf(c->msg, sizeof c->msg, "%s", outbox_store_message(c->s));
    outbox_store_rollback(c->s);
    return NULL;
}

START_TEST(test_deadlock_is_transient)
{
    outbox_store_t *a = fresh(0);
    outbox_store_t *b = open_rel(pgt_uri(), rel, OUTBOX_OK, NULL, 0);
    const char *e1 = "0190a0b0-0000-7000-8000-0000000000e1", *e2 = "0190a0b0-0000-7000-8000-0000000000e2";
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    crossed_t ca = {a, e1, e2, &bar, 0, ""}, cb = {b, e2, e1, &bar, 0, ""};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, crossed_stage, &ca);
    pthread_create(&tb, NULL, crossed_stage, &cb);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    pthread_barrier_destroy(&bar);
    crossed_t *victim = ca.rc == OUTBOX_ETRANSIENT ? &ca : &cb;
    ck_assert_msg(victim->rc == OUTBOX_ETRANSIENT, "rcs %d %d: %s / %s", ca.rc, cb.rc, ca.msg, cb.msg);
    ck_assert_msg(strstr(victim->msg, "40P01"), "%s", victim->msg);
    outbox_store_close(a);
    outbox_store_close(b);
}
END_TEST

START_TEST(test_serialization_is_transient)
{
    outbox_store_close(fresh(0));
    char uri[600];
    tagged_uri(uri, sizeof uri, "it_ser", "&options=-c%20default_transaction_isolation%3Dserializable");
    outbox_store_t *a = open_rel(uri, rel, OUTBOX_OK, NULL, 0);
    outbox_store_t *b = open_rel(uri, rel, OUTBOX_OK, NULL, 0);
    const char *e1 = "0190a0b0-0000-7000-8000-0000000000f1";
    ck_assert_int_eq(outbox_store_begin(a), OUTBOX_OK);
    ck_assert_int_eq(outbox_store_begin(b), OUTBOX_OK);
    ck_assert_int_eq(stage(b, NULL, "r", NULL, NULL, "{}"), 1); /* b's snapshot is taken */
    ck_assert_int_eq(stage(a, NULL, "r", NULL, e1, "{}"), 1);
    ck_assert_int_eq(outbox_store_commit(a), OUTBOX_OK);
    /* b cannot see a's row and must not skip it as a duplicate. */
    ck_assert_int_eq(stage(b, NULL, "r", NULL, e1, "{}"), OUTBOX_ETRANSIENT);
    ck_assert_msg(strstr(outbox_store_message(b), "40001"), "%s", outbox_store_message(b));
    ck_assert_int_eq(outbox_store_commit(b), OUTBOX_ETRANSIENT); /* the failure, not a silent rollback */
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s", rel), 1);
    outbox_store_close(a);
    outbox_store_close(b);
}
END_TEST

/* ---------------------------------------------------------- per-key rule */

START_TEST(test_locked_head_holds_key)
{
    outbox_store_t *s = fresh(0);
    const char *head = "0190a0b0-0000-7000-8000-00000000a001";
    ck_assert_int_eq(stage(s, NULL, "r", "k1", head, "1"), 1);
    ck_assert_int_eq(stage(s, NULL, "r", "k2", NULL, "1"), 1);
    ck_assert_int_eq(stage(s, NULL, "r", "k1", NULL, "2"), 1);
    ck_assert_int_eq(stage(s, NULL, "r", NULL, NULL, "0"), 1);
    ck_assert_int_eq(stage(s, NULL, "r", "k1", NULL, "3"), 1);
    ck_assert_int_eq(stage(s, NULL, "r", "k2", NULL, "2"), 1);

    /* Another transaction holds k1's head, as a claim in flight would. */
    PGconn *other = pgt_connect();
    pgt_exec(other, "BEGIN");
    pgt_exec(other, "SELECT 1 FROM %s WHERE event_id = '%s' FOR UPDATE", rel, head);
    const outbox_row_t *rows;
    size_t n;
    outbox_fence_t f;
    outbox_claim_req_t r = req("r", 100);
    ck_assert_int_eq(outbox_store_claim(s, &r, &rows, &n, &f), OUTBOX_OK);
    /* The rows behind the locked head look claimable to the snapshot, but
     * the chain check leaves them: only k2 and the unkeyed row move. */
    ck_assert_uint_eq(n, 3);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(!rows[i].ordering_key || strcmp(rows[i].ordering_key, "k1") != 0,
                      "claimed k1 row %s behind a locked head", rows[i].payload);
    outbox_settle_item_t it[3];
    for (size_t i = 0; i < n; i++)
        it[i] = (outbox_settle_item_t){.id = rows[i].id, .kind = OUTBOX_SETTLE_PUBLISHED};
    ck_assert_int_eq(outbox_store_settle(s, &f, it, n, NULL), OUTBOX_OK);
    pgt_exec(other, "ROLLBACK");
    PQfinish(other);

    /* Released, the key moves as one run: head and the rows behind it. */
    ck_assert_int_eq(outbox_store_claim(s, &r, &rows, &n, &f), OUTBOX_OK);
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(rows[0].event_id, head);
    ck_assert_str_eq(rows[1].payload, "2");
    ck_assert_str_eq(rows[2].payload, "3");
    outbox_store_close(s);
}
END_TEST

/* A key's head that is claimable again, an expired lease or a retry that
 * has come due, while another claim holds it locked right now (it is
 * taking it): the rows behind it look claimable to the snapshot, and the
 * chain check alone keeps them. */
START_TEST(test_locked_reclaimable_head_holds_key)
{
    outbox_store_t *s = fresh(0);
    const char *lease_head = "0190a0b0-0000-7000-8000-00000000b001";
    const char *retry_head = "0190a0b0-0000-7000-8000-00000000b002";
    ck_assert_int_eq(stage(s, NULL, "r", "ka", lease_head, "1"), 1);
    ck_assert_int_eq(stage(s, NULL, "r", "kb", retry_head, "1"), 1);
    ck_assert_int_eq(stage(s, NULL, "r", "ka", NULL, "2"), 1);
    ck_assert_int_eq(stage(s, NULL, "r", "kb", NULL, "2"), 1);
    ck_assert_int_eq(stage(s, NULL, "r", NULL, NULL, "0"), 1);
    /* ka's head was claimed by a relay that died an hour ago; kb's head
     * failed and its retry is due. */
    pgt_exec(db, "UPDATE %s SET status = 'processing', processing_at = now() - interval '1 hour', "
                 "attempts = 1 WHERE event_id = '%s'", rel, lease_head);
    pgt_exec(db, "UPDATE %s SET available_at = now() - interval '1 second', attempts = 1, "
                 "last_error = 'retry' WHERE event_id = '%s'", rel, retry_head);
    PGconn *other = pgt_connect();
    pgt_exec(other, "BEGIN");
    pgt_exec(other, "SELECT 1 FROM %s WHERE event_id IN ('%s', '%s') FOR UPDATE", rel, lease_head,
             retry_head);
    const outbox_row_t *rows;
    size_t n;
    outbox_fence_t f;
    outbox_claim_req_t r = req("r", 100);
    ck_assert_int_eq(outbox_store_claim(s, &r, &rows, &n, &f), OUTBOX_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_ptr_null(rows[0].ordering_key);
    outbox_settle_item_t it = {.id = rows[0].id, .kind = OUTBOX_SETTLE_PUBLISHED};
    ck_assert_int_eq(outbox_store_settle(s, &f, &it, 1, NULL), OUTBOX_OK);
    pgt_exec(other, "ROLLBACK");
    PQfinish(other);
    /* Unlocked, each key moves as one run from its head. */
    ck_assert_int_eq(outbox_store_claim(s, &r, &rows, &n, &f), OUTBOX_OK);
    ck_assert_uint_eq(n, 4);
    ck_assert_str_eq(rows[0].event_id, lease_head);
    ck_assert_str_eq(rows[1].event_id, retry_head);
    outbox_store_close(s);
}
END_TEST

/* A sink for the stress test: RETRY for some rows on their first attempts,
 * OK otherwise, and a live check that each key's rows are accepted in
 * staging order, each exactly once. */
#define KEYS 24
#define PER_KEY 60
#define UNKEYED 150
static pthread_mutex_t sink_mu = PTHREAD_MUTEX_INITIALIZER;
static int next_of[KEYS];
static int unkeyed_ok[UNKEYED];
static int deliveries[KEYS][PER_KEY], unkeyed_deliveries[UNKEYED];
static atomic_int violations, duplicates, accepted, retried;

static int sink_open(const outbox_sink_open_t *p, void **h, outbox_diag_t *d)
{
    (void)p;
    (void)d;
    *h = &sink_mu;
    return OUTBOX_OK;
}

static void sink_close(void *h)
{
    (void)h;
}

static int sink_publish(void *h, const outbox_message_t *msgs, size_t n, outbox_publish_result_t *res,
                        outbox_diag_t *d)
{
    (void)h;
    (void)d;
    for (size_t i = 0; i < n; i++) {
        /* jsonb hands the payload back in its own key order. */
        const char *pk = strstr(msgs[i].payload, "\"k\": ");
        const char *pi = strstr(msgs[i].payload, "\"i\": ");
        int k = pk ? atoi(pk + 5) : KEYS, seq = pi ? atoi(pi + 5) : -1;
        /* Every 7th row fails its first 1-3 deliveries. Counted here, not
         * by attempts: a batch that only fails is an outage to the relay,
         * which gives the attempts back. */
        pthread_mutex_lock(&sink_mu);
        int *seen = k >= 0 && k < KEYS && seq >= 0 && seq < PER_KEY ? &deliveries[k][seq]
                    : k < 0 && seq >= 0 && seq < UNKEYED          ? &unkeyed_deliveries[seq]
                                                                  : NULL;
        int flaky = (k * 31 + seq * 7 + 3) % 7 == 0 ? 1 + (k + seq + 3) % 3 : 0;
        if (seen && (*seen)++ < flaky) {
            pthread_mutex_unlock(&sink_mu);
            res[i].status = OUTBOX_PUBLISH_RETRY;
            snprintf(res[i].message, sizeof res[i].message, "flaky");
            atomic_fetch_add(&retried, 1);
            continue;
        }
        if (k < 0) {
            if (seq >= 0 && seq < UNKEYED && unkeyed_ok[seq]++)
                atomic_fetch_add(&duplicates, 1);
        } else if (k >= KEYS || seq != next_of[k]) {
            if (k < KEYS && seq < next_of[k])
                atomic_fetch_add(&duplicates, 1);
            else
                atomic_fetch_add(&violations, 1);
        } else {
            next_of[k]++;
        }
        pthread_mutex_unlock(&sink_mu);
        atomic_fetch_add(&accepted, 1);
        res[i].status = OUTBOX_PUBLISH_OK;
    }
    return OUTBOX_OK;
}

static const outbox_sink_vtable_t sink_vt = {.struct_size = sizeof sink_vt, .open = sink_open,
                                             .close = sink_close, .publish = sink_publish};
static const char *const sink_schemes[] = {"pgtest", NULL};
static int sink_init(const outbox_host_t *host, outbox_diag_t *d)
{
    (void)host;
    (void)d;
    return OUTBOX_OK;
}
static const outbox_driver_t sink_desc = {
    .struct_size = sizeof sink_desc, .abi_major = OUTBOX_ABI_MAJOR, .abi_minor = OUTBOX_ABI_MINOR,
    .kind = OUTBOX_DRIVER_SINK, .name = "pgtest", .version = "1", .schemes = sink_schemes,
    .init = sink_init, .sink = &sink_vt};

typedef struct worker {
    outbox_store_t *store;
    outbox_sink_t *sink;
    outbox_relay_t *relay;
    pthread_t thread;
    int rc;
} worker_t;

static void *run_relay(void *arg)
{
    worker_t *w = arg;
    w->rc = outbox_relay_run(w->relay);
    return NULL;
}

/* Four relays, each on its own connection, drain keys interleaved with
 * unkeyed rows through the flaky sink; hlc: stamped rows, claimed in hlc
 * order. */
static void race_relays(int hlc)
{
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_register(&sink_desc, &d), OUTBOX_OK);
    outbox_store_t *s = fresh(hlc ? OUTBOX_SCHEMA_HLC : 0);
    outbox_route_config_t rc = {.struct_size = sizeof rc, .route = "stress", .hlc = hlc};
    ck_assert_int_eq(outbox_store_configure_route(s, &rc), OUTBOX_OK);
    /* Keys interleaved in staging order, some unkeyed rows between. */
    outbox_event_t ev[KEYS + 1];
    char payloads[KEYS + 1][48], keys[KEYS][16];
    int unkeyed = 0;
    for (int seq = 0; seq < PER_KEY; seq++) {
        size_t m = 0;
        for (int k = 0; k < KEYS; k++) {
            snprintf(keys[k], sizeof keys[k], "key-%d", k);
            snprintf(payloads[m], sizeof payloads[m], "{\"k\": %d, \"i\": %d}", k, seq);
            ev[m] = (outbox_event_t){.event_type = "t", .payload = payloads[m], .ordering_key = keys[k]};
            m++;
        }
        if (unkeyed < UNKEYED) {
            snprintf(payloads[m], sizeof payloads[m], "{\"k\": -1, \"i\": %d}", unkeyed++);
            ev[m] = (outbox_event_t){.event_type = "t", .payload = payloads[m]};
            m++;
        }
        size_t staged = 0;
        ck_assert_int_eq(outbox_store_stage(s, NULL, "stress", ev, m, &staged), OUTBOX_OK);
        ck_assert_uint_eq(staged, m);
    }
    int total = KEYS * PER_KEY + unkeyed;

    enum { WORKERS = 4 };
    worker_t w[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        w[i].store = open_rel(pgt_uri(), rel, OUTBOX_OK, NULL, 0);
        ck_assert_int_eq(outbox_sink_open("pgtest:", NULL, &w[i].sink, &d), OUTBOX_OK);
        outbox_relay_config_t cfg;
        outbox_relay_config_init(&cfg);
        cfg.route = "stress";
        cfg.batch = 5 + 4 * (size_t)i; /* unequal batches interleave the claims */
        cfg.backoff_base_us = 0;
        cfg.poll_us = 5000;
        cfg.max_attempts = 100;
        cfg.hlc_order = hlc;
        ck_assert_int_eq(outbox_relay_new(w[i].store, w[i].sink, &cfg, &w[i].relay, &d), OUTBOX_OK);
        pthread_create(&w[i].thread, NULL, run_relay, &w[i]);
    }
    int64_t deadline = pgt_mono_us() + 120 * INT64_C(1000000);
    while (pgt_int(db, "SELECT count(*) FROM %s WHERE status = 'published'", rel) < total &&
           pgt_mono_us() < deadline)
        usleep(50000);
    for (int i = 0; i < WORKERS; i++)
        outbox_relay_stop(w[i].relay);
    uint64_t claimed_by[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        pthread_join(w[i].thread, NULL);
        ck_assert_msg(w[i].rc == OUTBOX_OK, "relay %d: %s", i, outbox_relay_message(w[i].relay));
        outbox_relay_counters_t c;
        outbox_relay_counters(w[i].relay, &c);
        claimed_by[i] = c.published;
        outbox_relay_free(w[i].relay);
        outbox_sink_close(w[i].sink);
        outbox_store_close(w[i].store);
    }
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s WHERE status = 'published'", rel), total);
    ck_assert_int_eq(atomic_load(&violations), 0);
    ck_assert_int_eq(atomic_load(&duplicates), 0);
    ck_assert_int_eq(atomic_load(&accepted), total);
    ck_assert(atomic_load(&retried) > 0);
    for (int k = 0; k < KEYS; k++)
        ck_assert_int_eq(next_of[k], PER_KEY);
    /* published_at never goes back within a key, in staging order. */
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM (SELECT published_at < lag(published_at) OVER "
                                 "(PARTITION BY ordering_key ORDER BY created_at, id) AS back FROM %s "
                                 "WHERE ordering_key IS NOT NULL) x WHERE back", rel), 0);
    int busy = 0;
    for (int i = 0; i < WORKERS; i++)
        busy += claimed_by[i] > 0;
    ck_assert_msg(busy >= 2, "only %d of %d relays published anything", busy, WORKERS);
    if (hlc)
        ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s WHERE hlc IS NULL", rel), 0);
    outbox_store_close(s);
}

START_TEST(test_relays_keep_key_order)
{
    race_relays(0);
}
END_TEST

START_TEST(test_relays_keep_key_order_hlc)
{
    race_relays(1);
}
END_TEST

/* ----------------------------------------------------------- wake-up */

typedef struct waiter {
    outbox_store_t *s;
    const char *route;
    int timeout_ms;
    int64_t took_us;
    pthread_barrier_t *ready;
} waiter_t;

static void *wait_thread(void *arg)
{
    waiter_t *w = arg;
    /* A first short wait issues LISTEN, so the stage below cannot race it. */
    outbox_store_wait_for(w->s, w->route, 1000);
    pthread_barrier_wait(w->ready);
    int64_t t0 = pgt_mono_us();
    outbox_store_wait_for(w->s, w->route, (int64_t)w->timeout_ms * 1000);
    w->took_us = pgt_mono_us() - t0;
    return NULL;
}

static int64_t wait_while_staging(outbox_store_t *waiting, outbox_store_t *stager,
                                  const char *wait_route, const char *stage_route, int timeout_ms)
{
    pthread_barrier_t ready;
    pthread_barrier_init(&ready, NULL, 2);
    waiter_t w = {waiting, wait_route, timeout_ms, 0, &ready};
    pthread_t t;
    pthread_create(&t, NULL, wait_thread, &w);
    pthread_barrier_wait(&ready);
    usleep(200000);
    ck_assert_int_eq(stage(stager, NULL, stage_route, NULL, NULL, "{}"), 1);
    pthread_join(t, NULL);
    pthread_barrier_destroy(&ready);
    return w.took_us;
}

START_TEST(test_wait_wakes_on_stage)
{
    outbox_store_t *relay = fresh(0);
    outbox_store_t *app = open_rel(pgt_uri(), rel, OUTBOX_OK, NULL, 0);
    /* Woken by the commit, long before the 5 s timeout. */
    int64_t took = wait_while_staging(relay, app, "orders", "orders", 5000);
    ck_assert_msg(took >= 150000 && took < 1500000, "wait took %lld us", (long long)took);
    /* Staging on another route does not wake it. */
    took = wait_while_staging(relay, app, "orders", "invoices", 1000);
    ck_assert_msg(took >= 950000, "woken after %lld us by another route", (long long)took);
    /* A claim answers the wake-ups that came before it. */
    ck_assert_int_eq(stage(app, NULL, "orders", NULL, NULL, "{}"), 1);
    usleep(100000);
    const outbox_row_t *rows;
    size_t n;
    outbox_fence_t f;
    outbox_claim_req_t r = req("orders", 10);
    ck_assert_int_eq(outbox_store_claim(relay, &r, &rows, &n, &f), OUTBOX_OK);
    ck_assert_uint_eq(n, 2);
    int64_t t0 = pgt_mono_us();
    ck_assert_int_eq(outbox_store_wait_for(relay, "orders", 300000), OUTBOX_OK);
    ck_assert_msg(pgt_mono_us() - t0 >= 250000, "woke for a row the claim already took");
    outbox_store_close(app);
    outbox_store_close(relay);
}
END_TEST

/* ------------------------------------------------------------- purge */

START_TEST(test_purge_batches)
{
    outbox_store_t *s = fresh(0);
    enum { N = 12000, BATCH = 1000 };
    outbox_event_t ev[BATCH];
    for (int i = 0; i < BATCH; i++)
        ev[i] = (outbox_event_t){.event_type = "t", .payload = "{}"};
    for (int i = 0; i < N / BATCH; i++)
        ck_assert_int_eq(outbox_store_stage(s, NULL, i % 2 ? "a" : "b", ev, BATCH, NULL), OUTBOX_OK);
    pgt_exec(db, "UPDATE %s SET status = 'published', published_at = now() - interval '2 days' "
                 "WHERE id IN (SELECT id FROM %s ORDER BY created_at LIMIT 11000)", rel, rel);
    uint64_t count = 0;
    int64_t day_ago = (int64_t)time(NULL) * 1000000 - 86400 * INT64_C(1000000);
    /* Batches 0-10 are published: 5 of route a, 6 of route b. */
    ck_assert_int_eq(outbox_store_purge(s, "a", day_ago, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 5000);
    ck_assert_int_eq(outbox_store_purge(s, NULL, day_ago, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 6000);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s", rel), 1000);
    outbox_store_close(s);
}
END_TEST

/* --------------------------------------------------------------- inbox */

static int accept1(outbox_store_t *s, void *native, const char *consumer, const char *event_id)
{
    int is_new = -1;
    int rc = outbox_inbox_accept(s, native, consumer, event_id, &is_new);
    return rc == OUTBOX_OK ? is_new : rc;
}

/* A connection to pgt_uri() named tag, to find its session. */
static PGconn *tagged_conn(const char *tag)
{
    char uri[600];
    tagged_uri(uri, sizeof uri, tag, NULL);
    PGconn *c = PQconnectdb(uri);
    ck_assert_msg(PQstatus(c) == CONNECTION_OK, "%s", PQerrorMessage(c));
    return c;
}

/* Until the session named tag waits on a lock (5 s at most). */
static void wait_blocked(const char *tag)
{
    for (int i = 0; i < 250; i++) {
        if (pgt_int(db, "SELECT count(*) FROM pg_stat_activity WHERE application_name = '%s' AND "
                        "wait_event_type = 'Lock'", tag) > 0)
            return;
        usleep(20000);
    }
    ck_abort_msg("session %s never waited on a lock", tag);
}

START_TEST(test_inbox_accept)
{
    /* Without the table: no capability, and accept says what to do. */
    outbox_store_t *s = fresh(0);
    ck_assert(!(outbox_store_capabilities(s) & OUTBOX_STORE_CAP_INBOX));
    ck_assert_int_eq(accept1(s, NULL, "billing", "e1"), OUTBOX_EMISSING);
    ck_assert_msg(strstr(outbox_store_message(s), "outbox_inbox"), "%s", outbox_store_message(s));
    outbox_store_close(s);

    s = fresh(OUTBOX_SCHEMA_INBOX);
    ck_assert(outbox_store_capabilities(s) & OUTBOX_STORE_CAP_INBOX);
    ck_assert_int_eq(accept1(s, NULL, "billing", "e1"), 1);
    ck_assert_int_eq(accept1(s, NULL, "billing", "e1"), 0);
    ck_assert_int_eq(accept1(s, NULL, "shipping", "e1"), 1); /* the pair is the key */
    ck_assert_int_eq(accept1(s, NULL, "billing", "E1"), 1);  /* compared as bytes */
    const char *odd = "id with 'quotes', \"dq\", ; -- and ünïcødé";
    ck_assert_int_eq(accept1(s, NULL, odd, odd), 1);
    ck_assert_int_eq(accept1(s, NULL, odd, odd), 0);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s.outbox_inbox", schema), 4);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s.outbox_inbox WHERE received_at > now() - "
                                 "interval '1 minute' AND received_at <= now()", schema), 4);
    /* The host checks what the caller gave before the driver sees it. */
    ck_assert_int_eq(accept1(s, NULL, "", "e1"), OUTBOX_EINVAL);
    ck_assert_int_eq(accept1(s, NULL, "billing", "a\nb"), OUTBOX_EINVAL);
    outbox_store_close(s);
}
END_TEST

START_TEST(test_inbox_own_tx)
{
    outbox_store_t *s = fresh(OUTBOX_SCHEMA_INBOX);
    ck_assert_int_eq(outbox_store_begin(s), OUTBOX_OK);
    ck_assert_int_eq(accept1(s, NULL, "c", "e1"), 1);
    ck_assert_int_eq(accept1(s, NULL, "c", "e1"), 0); /* its own uncommitted row */
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s.outbox_inbox", schema), 0);
    ck_assert_int_eq(outbox_store_rollback(s), OUTBOX_OK);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s.outbox_inbox", schema), 0);
    /* Rolled back, so new again. */
    ck_assert_int_eq(outbox_store_begin(s), OUTBOX_OK);
    ck_assert_int_eq(accept1(s, NULL, "c", "e1"), 1);
    ck_assert_int_eq(stage(s, NULL, "r", NULL, NULL, "{}"), 1); /* with the events it causes */
    ck_assert_int_eq(outbox_store_commit(s), OUTBOX_OK);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s.outbox_inbox", schema), 1);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s", rel), 1);
    ck_assert_int_eq(accept1(s, NULL, "c", "e1"), 0);
    /* A failed accept inside the transaction fails the commit, and takes
     * what the transaction did with it. */
    pgt_exec(db, "ALTER TABLE %s.outbox_inbox RENAME TO gone", schema);
    ck_assert_int_eq(outbox_store_begin(s), OUTBOX_OK);
    ck_assert_int_eq(stage(s, NULL, "r", NULL, NULL, "{}"), 1);
    ck_assert_int_eq(accept1(s, NULL, "c", "e2"), OUTBOX_ESCHEMA);
    ck_assert_msg(strstr(outbox_store_message(s), "42P01"), "%s", outbox_store_message(s));
    ck_assert_int_eq(outbox_store_commit(s), OUTBOX_ESCHEMA);
    pgt_exec(db, "ALTER TABLE %s.gone RENAME TO outbox_inbox", schema);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s", rel), 1);
    ck_assert_int_eq(accept1(s, NULL, "c", "e2"), 1);
    outbox_store_close(s);
}
END_TEST

START_TEST(test_inbox_native_tx)
{
    outbox_store_t *s = fresh(OUTBOX_SCHEMA_INBOX);
    PGconn *app = pgt_connect();
    pgt_exec(app, "CREATE TABLE %s.ledger (n int)", schema);

    pgt_exec(app, "BEGIN");
    ck_assert_int_eq(accept1(s, app, "c", "e1"), 1);
    pgt_exec(app, "INSERT INTO %s.ledger VALUES (1)", schema);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s.outbox_inbox", schema), 0);
    pgt_exec(app, "ROLLBACK");
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s.outbox_inbox", schema), 0);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s.ledger", schema), 0);

    pgt_exec(app, "BEGIN");
    ck_assert_int_eq(accept1(s, app, "c", "e1"), 1); /* the rollback left no trace */
    pgt_exec(app, "INSERT INTO %s.ledger VALUES (1)", schema);
    pgt_exec(app, "COMMIT");
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s.outbox_inbox", schema), 1);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s.ledger", schema), 1);

    pgt_exec(app, "BEGIN");
    ck_assert_int_eq(accept1(s, app, "c", "e1"), 0); /* redelivered: skip it */
    pgt_exec(app, "COMMIT");
    /* Outside BEGIN the record would commit alone: refused. */
    ck_assert_int_eq(accept1(s, app, "c", "e2"), OUTBOX_EINVAL);
    ck_assert_msg(strstr(outbox_store_message(s), "BEGIN"), "%s", outbox_store_message(s));
    PQfinish(app);
    outbox_store_close(s);
}
END_TEST

typedef struct acceptor {
    outbox_store_t *s;
    PGconn *native; /* inside BEGIN, or NULL */
    const char *consumer, *event_id;
    pthread_barrier_t *start; /* or NULL */
    int commit;               /* 1: COMMIT native afterwards, in the thread */
    atomic_int done;
    int rc, is_new;
    char msg[OUTBOX_MESSAGE_MAX];
} acceptor_t;

static void *accept_thread(void *arg)
{
    acceptor_t *a = arg;
    if (a->start)
        pthread_barrier_wait(a->start);
    a->rc = outbox_inbox_accept(a->s, a->native, a->consumer, a->event_id, &a->is_new);
    snprintf(a->msg, sizeof a->msg, "%s", outbox_store_message(a->s));
    if (a->commit && a->native) {
        PGresult *r = PQexec(a->native, a->rc == OUTBOX_OK ? "COMMIT" : "ROLLBACK");
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            a->rc = OUTBOX_EPERMANENT;
            snprintf(a->msg, sizeof a->msg, "commit: %s", PQresultErrorMessage(r));
        }
        PQclear(r);
    }
    atomic_store(&a->done, 1);
    return NULL;
}

/* First holds (c, e) uncommitted in its transaction; second's accept, in
 * a transaction at iso ("" for none), must wait for it, and get what the
 * end of the first's transaction (commit or not) leaves. */
static void hold_and_race(outbox_store_t *first, outbox_store_t *second, const char *iso,
                          int commit, const char *event_id, int want_rc, int want_new)
{
    char tag[64];
    snprintf(tag, sizeof tag, "it_inbox_%ld", (long)getpid());
    PGconn *holder = pgt_connect();
    pgt_exec(holder, "BEGIN");
    ck_assert_int_eq(accept1(first, holder, "c", event_id), 1);
    PGconn *other = iso[0] ? tagged_conn(tag) : NULL;
    if (other) {
        pgt_exec(other, "BEGIN ISOLATION LEVEL %s", iso);
        pgt_exec(other, "SELECT 1"); /* the snapshot is from before the first commits */
    }
    acceptor_t a = {.s = second, .native = other, .consumer = "c", .event_id = event_id};
    pthread_t t;
    pthread_create(&t, NULL, accept_thread, &a);
    wait_blocked(tag);
    usleep(100000);
    ck_assert_msg(!atomic_load(&a.done), "the second accept did not wait for the first");
    pgt_exec(holder, commit ? "COMMIT" : "ROLLBACK");
    pthread_join(t, NULL);
    ck_assert_msg(a.rc == want_rc && (want_rc != OUTBOX_OK || a.is_new == want_new),
                  "%s %s: rc %d is_new %d (%s), want rc %d is_new %d", iso[0] ? iso : "autocommit",
                  commit ? "commit" : "rollback", a.rc, a.is_new, a.msg, want_rc, want_new);
    if (other) {
        pgt_exec(other, a.rc == OUTBOX_OK ? "COMMIT" : "ROLLBACK");
        PQfinish(other);
    }
    PQfinish(holder);
}

START_TEST(test_inbox_race_held)
{
    outbox_store_close(fresh(OUTBOX_SCHEMA_INBOX));
    char uri[600], tag[64];
    snprintf(tag, sizeof tag, "it_inbox_%ld", (long)getpid());
    tagged_uri(uri, sizeof uri, tag, NULL);
    outbox_store_t *first = open_rel(pgt_uri(), rel, OUTBOX_OK, NULL, 0);
    outbox_store_t *second = open_rel(uri, rel, OUTBOX_OK, NULL, 0);
    /* A statement on its own, then the application's transactions: the
     * second waits on the first's row, and sees its commit or rollback. */
    hold_and_race(first, second, "", 1, "e1", OUTBOX_OK, 0);
    hold_and_race(first, second, "", 0, "e2", OUTBOX_OK, 1);
    hold_and_race(first, second, "READ COMMITTED", 1, "e3", OUTBOX_OK, 0);
    hold_and_race(first, second, "READ COMMITTED", 0, "e4", OUTBOX_OK, 1);
    /* Under snapshot isolation a pair committed after the snapshot is a
     * serialization failure: transient, and the retry sees 0. */
    hold_and_race(first, second, "REPEATABLE READ", 1, "e5", OUTBOX_ETRANSIENT, 0);
    hold_and_race(first, second, "REPEATABLE READ", 0, "e6", OUTBOX_OK, 1);
    hold_and_race(first, second, "SERIALIZABLE", 1, "e7", OUTBOX_ETRANSIENT, 0);
    hold_and_race(first, second, "SERIALIZABLE", 0, "e8", OUTBOX_OK, 1);
    ck_assert_int_eq(accept1(second, NULL, "c", "e5"), 0);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s.outbox_inbox", schema), 8);
    /* The handle's own transaction waits the same way. */
    PGconn *holder = pgt_connect();
    pgt_exec(holder, "BEGIN");
    ck_assert_int_eq(accept1(first, holder, "c", "e9"), 1);
    ck_assert_int_eq(outbox_store_begin(second), OUTBOX_OK);
    acceptor_t a = {.s = second, .consumer = "c", .event_id = "e9"};
    pthread_t t;
    pthread_create(&t, NULL, accept_thread, &a);
    wait_blocked(tag);
    ck_assert(!atomic_load(&a.done));
    pgt_exec(holder, "ROLLBACK");
    pthread_join(t, NULL);
    ck_assert_msg(a.rc == OUTBOX_OK && a.is_new == 1, "rc %d is_new %d: %s", a.rc, a.is_new, a.msg);
    ck_assert_int_eq(outbox_store_commit(second), OUTBOX_OK);
    ck_assert_int_eq(accept1(first, NULL, "c", "e9"), 0);
    PQfinish(holder);
    outbox_store_close(first);
    outbox_store_close(second);
}
END_TEST

/* Many handles accept the same pairs at once, each on its own or in an
 * application transaction: every pair is new to exactly one of them. */
static void race_many(int native)
{
    enum { THREADS = 8, EVENTS = 20 };
    outbox_store_close(fresh(OUTBOX_SCHEMA_INBOX));
    outbox_store_t *s[THREADS];
    PGconn *c[THREADS];
    for (int i = 0; i < THREADS; i++) {
        s[i] = open_rel(pgt_uri(), rel, OUTBOX_OK, NULL, 0);
        c[i] = native ? pgt_connect() : NULL;
    }
    for (int e = 0; e < EVENTS; e++) {
        char id[32];
        snprintf(id, sizeof id, "ev-%d", e);
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, THREADS);
        acceptor_t a[THREADS];
        pthread_t t[THREADS];
        for (int i = 0; i < THREADS; i++) {
            if (native)
                pgt_exec(c[i], "BEGIN");
            a[i] = (acceptor_t){.s = s[i], .native = c[i], .consumer = "c", .event_id = id,
                                .start = &start, .commit = 1};
            pthread_create(&t[i], NULL, accept_thread, &a[i]);
        }
        int fresh_ones = 0;
        for (int i = 0; i < THREADS; i++) {
            pthread_join(t[i], NULL);
            ck_assert_msg(a[i].rc == OUTBOX_OK, "accept %d of %s: %d %s", i, id, a[i].rc, a[i].msg);
            fresh_ones += a[i].is_new;
        }
        pthread_barrier_destroy(&start);
        ck_assert_msg(fresh_ones == 1, "%s was new to %d accepts", id, fresh_ones);
    }
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s.outbox_inbox", schema), EVENTS);
    for (int i = 0; i < THREADS; i++) {
        outbox_store_close(s[i]);
        if (c[i])
            PQfinish(c[i]);
    }
}

START_TEST(test_inbox_race_many)
{
    race_many(0);
}
END_TEST

START_TEST(test_inbox_race_many_native)
{
    race_many(1);
}
END_TEST

START_TEST(test_inbox_purge)
{
    outbox_store_t *s = fresh(OUTBOX_SCHEMA_INBOX);
    for (int i = 0; i < 10; i++) {
        char id[16];
        snprintf(id, sizeof id, "e%d", i);
        ck_assert_int_eq(accept1(s, NULL, "a", id), 1);
        ck_assert_int_eq(accept1(s, NULL, "b", id), 1);
    }
    /* e0..e5 of both are two days old. */
    pgt_exec(db, "UPDATE %s.outbox_inbox SET received_at = now() - interval '2 days' WHERE "
                 "event_id < 'e6'", schema);
    int64_t now = (int64_t)time(NULL) * 1000000;
    int64_t day_ago = now - 86400 * INT64_C(1000000);
    uint64_t count = 99;
    ck_assert_int_eq(outbox_inbox_purge(s, "a", day_ago, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 6);
    ck_assert_int_eq(outbox_inbox_purge(s, "a", day_ago, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 0);
    ck_assert_int_eq(outbox_inbox_purge(s, NULL, day_ago, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 6);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s.outbox_inbox", schema), 8);
    /* A purged pair is new again: purge only what can no longer come back. */
    ck_assert_int_eq(accept1(s, NULL, "a", "e0"), 1);
    /* Instants beyond PostgreSQL's range: nothing is older than the one,
     * everything older than the other. */
    ck_assert_int_eq(outbox_inbox_purge(s, NULL, INT64_MIN, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 0);
    ck_assert_int_eq(outbox_inbox_purge(s, "nobody", INT64_MAX, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 0);
    /* It commits on its own: not inside the handle's transaction. */
    ck_assert_int_eq(outbox_store_begin(s), OUTBOX_OK);
    ck_assert_int_eq(outbox_inbox_purge(s, NULL, INT64_MAX, &count), OUTBOX_EINVAL);
    ck_assert_int_eq(outbox_store_rollback(s), OUTBOX_OK);
    ck_assert_int_eq(outbox_inbox_purge(s, NULL, INT64_MAX, NULL), OUTBOX_OK);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s.outbox_inbox", schema), 0);
    /* More than one batch: every old record goes, the recent ones stay. */
    pgt_exec(db, "INSERT INTO %s.outbox_inbox (consumer, event_id, received_at) SELECT 'bulk', "
                 "'b' || i, now() - interval '2 days' FROM generate_series(1, 12345) i", schema);
    pgt_exec(db, "INSERT INTO %s.outbox_inbox (consumer, event_id) VALUES ('bulk', 'new1'), "
                 "('bulk', 'new2')", schema);
    ck_assert_int_eq(outbox_inbox_purge(s, "bulk", day_ago, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 12345);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s.outbox_inbox", schema), 2);
    outbox_store_close(s);
}
END_TEST

START_TEST(test_inbox_stats)
{
    outbox_store_t *s = fresh(OUTBOX_SCHEMA_INBOX);
    th_inbox_seen_t v = {0};
    ck_assert_int_eq(outbox_inbox_stats(s, NULL, th_inbox_collect, &v), OUTBOX_OK);
    ck_assert_int_eq(v.n, 0);
    /* Byte order whatever the database's collation: "B" < "a" < "b" < "é". */
    const char *names[] = {"b", "\xc3\xa9", "a", "B"};
    for (int i = 0; i < 4; i++)
        for (int k = 0; k <= i; k++) {
            char id[16];
            snprintf(id, sizeof id, "e%d", k);
            ck_assert_int_eq(accept1(s, NULL, names[i], id), 1);
        }
    /* Known receipt times for "a": 2024-01-01 00:00:00 and +1.5 s. */
    pgt_exec(db, "UPDATE %s.outbox_inbox SET received_at = '2024-01-01 00:00:00+00'::timestamptz "
                 "+ (event_id = 'e1')::int * interval '1.5 seconds' WHERE consumer = 'a'", schema);
    ck_assert_int_eq(outbox_inbox_stats(s, NULL, th_inbox_collect, &v), OUTBOX_OK);
    ck_assert_int_eq(v.n, 4);
    ck_assert_str_eq(v.consumer[0], "B");
    ck_assert_str_eq(v.consumer[1], "a");
    ck_assert_str_eq(v.consumer[2], "b");
    ck_assert_str_eq(v.consumer[3], "\xc3\xa9");
    ck_assert_uint_eq(v.records[0], 4);
    ck_assert_uint_eq(v.records[1], 3);
    ck_assert_uint_eq(v.records[2], 1);
    ck_assert_uint_eq(v.records[3], 2);
    ck_assert_int_eq(v.oldest[1], INT64_C(1704067200000000));
    ck_assert_int_eq(v.newest[1], INT64_C(1704067201500000));
    int64_t now = (int64_t)time(NULL) * 1000000;
    ck_assert(v.oldest[0] > now - 60000000 && v.oldest[0] <= v.newest[0] && v.newest[0] <= now + 2000000);
    /* One consumer. */
    memset(&v, 0, sizeof v);
    ck_assert_int_eq(outbox_inbox_stats(s, "b", th_inbox_collect, &v), OUTBOX_OK);
    ck_assert_int_eq(v.n, 1);
    ck_assert_str_eq(v.consumer[0], "b");
    ck_assert_uint_eq(v.records[0], 1);
    memset(&v, 0, sizeof v);
    ck_assert_int_eq(outbox_inbox_stats(s, "nobody", th_inbox_collect, &v), OUTBOX_OK);
    ck_assert_int_eq(v.n, 0);
    /* The callback's non-zero return stops the listing and comes back. */
    memset(&v, 0, sizeof v);
    v.stop_at = 2;
    ck_assert_int_eq(outbox_inbox_stats(s, NULL, th_inbox_collect, &v), TH_INBOX_STOP);
    ck_assert_int_eq(v.n, 2);
    /* The callback's value is no error of the store's. */
    ck_assert_str_eq(outbox_store_message(s), "");
    outbox_store_close(s);
}
END_TEST

static size_t check_schema(outbox_store_t *s, uint32_t flags, char *all)
{
    outbox_schema_opts_t so = {.struct_size = sizeof so, .relation = rel, .flags = flags};
    size_t problems = 0;
    all[0] = '\0';
    ck_assert_int_eq(outbox_store_schema_check(s, &so, collect, all, &problems), OUTBOX_OK);
    return problems;
}

START_TEST(test_inbox_schema)
{
    char all[4096];
    outbox_store_t *s = fresh(0);
    /* The outbox table's own problems (its missing indexes when canonical). */
    size_t base = check_schema(s, 0, all);
    ck_assert_uint_eq(check_schema(s, OUTBOX_SCHEMA_INBOX, all), base + 1);
    char want[256];
    snprintf(want, sizeof want, "missing table %s.outbox_inbox\n", schema);
    ck_assert_msg(strstr(all, want), "%s", all);
    /* Apply adds it, twice is no change. */
    outbox_schema_opts_t so = {.struct_size = sizeof so, .relation = rel, .flags = OUTBOX_SCHEMA_INBOX};
    ck_assert_int_eq(outbox_store_schema_apply(s, &so), OUTBOX_OK);
    ck_assert_int_eq(outbox_store_schema_apply(s, &so), OUTBOX_OK);
    base = check_schema(s, 0, all); /* apply made the outbox's indexes too */
    ck_assert_msg(check_schema(s, OUTBOX_SCHEMA_INBOX, all) == base, "%s", all);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM pg_indexes WHERE schemaname = '%s' AND "
                                 "tablename = 'outbox_inbox'", schema), 2);
    outbox_store_close(s);
    s = open_rel(pgt_uri(), rel, OUTBOX_OK, NULL, 0);
    ck_assert(outbox_store_capabilities(s) & OUTBOX_STORE_CAP_INBOX);
    ck_assert_int_eq(accept1(s, NULL, "c", "e1"), 1);

    /* Each part that goes missing is named. */
    pgt_exec(db, "DROP INDEX %s.outbox_inbox_received_idx", schema);
    ck_assert_uint_eq(check_schema(s, OUTBOX_SCHEMA_INBOX, all), base + 1);
    snprintf(want, sizeof want, "%s.outbox_inbox: missing index on (received_at)", schema);
    ck_assert_msg(strstr(all, want), "%s", all);
    /* An index led by received_at serves. */
    pgt_exec(db, "CREATE INDEX by_age ON %s.outbox_inbox (received_at, consumer)", schema);
    ck_assert_msg(check_schema(s, OUTBOX_SCHEMA_INBOX, all) == base, "%s", all);
    pgt_exec(db, "ALTER TABLE %s.outbox_inbox DROP CONSTRAINT outbox_inbox_pkey", schema);
    ck_assert_uint_eq(check_schema(s, OUTBOX_SCHEMA_INBOX, all), base + 1);
    ck_assert_msg(strstr(all, "missing unique index on (consumer, event_id)"), "%s", all);
    /* Accept names its key: without it, an error, never a pair recorded twice. */
    ck_assert_int_eq(accept1(s, NULL, "c", "e1"), OUTBOX_ESCHEMA);
    ck_assert_msg(strstr(outbox_store_message(s), "42P10"), "%s", outbox_store_message(s));
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s.outbox_inbox", schema), 1);
    pgt_exec(db, "ALTER TABLE %s.outbox_inbox ALTER COLUMN event_id TYPE bytea USING "
                 "event_id::bytea, DROP COLUMN received_at", schema);
    /* received_at went with by_age: four problems. */
    ck_assert_uint_eq(check_schema(s, OUTBOX_SCHEMA_INBOX, all), base + 4);
    ck_assert_msg(strstr(all, "column event_id has type bytea, expected text"), "%s", all);
    ck_assert_msg(strstr(all, "missing column received_at"), "%s", all);
    outbox_store_close(s);
    /* Without its columns the table is not an inbox. */
    s = open_rel(pgt_uri(), rel, OUTBOX_OK, NULL, 0);
    ck_assert(!(outbox_store_capabilities(s) & OUTBOX_STORE_CAP_INBOX));
    ck_assert_int_eq(accept1(s, NULL, "c", "e1"), OUTBOX_EMISSING);
    outbox_store_close(s);
    /* A table made by hand with varchar columns and no default works. */
    pgt_exec(db, "DROP TABLE %s.outbox_inbox", schema);
    pgt_exec(db, "CREATE TABLE %s.outbox_inbox (received_at timestamptz NOT NULL, event_id "
                 "varchar(200) NOT NULL, consumer varchar(200) NOT NULL, UNIQUE (event_id, "
                 "consumer))", schema);
    s = open_rel(pgt_uri(), rel, OUTBOX_OK, NULL, 0);
    ck_assert_uint_eq(check_schema(s, OUTBOX_SCHEMA_INBOX, all), base + 1); /* the age index */
    ck_assert_int_eq(accept1(s, NULL, "c", "e1"), 1);
    ck_assert_int_eq(accept1(s, NULL, "c", "e1"), 0);
    outbox_store_close(s);
}
END_TEST

START_TEST(test_inbox_named)
{
    /* An inbox named apart from the outbox, in a schema of its own. */
    char other[80], inbox[128];
    snprintf(other, sizeof other, "%s_in", schema);
    snprintf(inbox, sizeof inbox, "%s.received", other);
    pgt_exec(db, "DROP SCHEMA IF EXISTS %s CASCADE", other);
    outbox_store_close(fresh(0));
    outbox_store_options_t o = {.struct_size = sizeof o, .relation = rel, .inbox_relation = inbox};
    outbox_store_t *s = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_store_open(pgt_uri(), &o, &s, &d), OUTBOX_OK);
    ck_assert(!(outbox_store_capabilities(s) & OUTBOX_STORE_CAP_INBOX));
    outbox_schema_opts_t so = {.struct_size = sizeof so, .relation = rel, .flags = OUTBOX_SCHEMA_INBOX,
                               .inbox_relation = inbox};
    ck_assert_msg(outbox_store_schema_apply(s, &so) == OUTBOX_OK, "%s", outbox_store_message(s));
    char all[4096] = "";
    size_t problems = 0;
    ck_assert_int_eq(outbox_store_schema_check(s, &so, collect, all, &problems), OUTBOX_OK);
    ck_assert_msg(!strstr(all, inbox), "%s", all);
    outbox_store_close(s);
    ck_assert_int_eq(outbox_store_open(pgt_uri(), &o, &s, &d), OUTBOX_OK);
    ck_assert(outbox_store_capabilities(s) & OUTBOX_STORE_CAP_INBOX);
    ck_assert_int_eq(accept1(s, NULL, "c", "e1"), 1);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s", inbox), 1);
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM pg_indexes WHERE schemaname = '%s' AND "
                                 "indexname = 'received_received_idx'", other), 1);
    outbox_store_close(s);
    /* The default beside the outbox table is not it. */
    s = open_rel(pgt_uri(), rel, OUTBOX_OK, NULL, 0);
    ck_assert(!(outbox_store_capabilities(s) & OUTBOX_STORE_CAP_INBOX));
    outbox_store_close(s);
    pgt_exec(db, "DROP SCHEMA %s CASCADE", other);
}
END_TEST

START_TEST(test_inbox_ddl)
{
    outbox_schema_opts_t so = {.struct_size = sizeof so, .relation = "app.outbox",
                               .flags = OUTBOX_SCHEMA_INBOX};
    char *text = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_schema_ddl("postgres", &so, &text, &d), OUTBOX_OK);
    ck_assert_msg(strstr(text, "CREATE TABLE IF NOT EXISTS \"app\".\"outbox_inbox\" (\n"
                               "    consumer    TEXT NOT NULL,\n"
                               "    event_id    TEXT NOT NULL,\n"
                               "    received_at TIMESTAMPTZ NOT NULL DEFAULT now(),\n"
                               "    PRIMARY KEY (consumer, event_id)\n);\n"), "%s", text);
    ck_assert_msg(strstr(text, "CREATE INDEX IF NOT EXISTS \"outbox_inbox_received_idx\" ON "
                               "\"app\".\"outbox_inbox\" (received_at);"), "%s", text);
    free(text);
    so.inbox_relation = "consumers.seen";
    ck_assert_int_eq(outbox_schema_ddl("postgres", &so, &text, &d), OUTBOX_OK);
    ck_assert_msg(strstr(text, "CREATE SCHEMA IF NOT EXISTS \"consumers\";\nCREATE TABLE IF NOT "
                               "EXISTS \"consumers\".\"seen\" ("), "%s", text);
    ck_assert_msg(strstr(text, "\"seen_received_idx\" ON \"consumers\".\"seen\""), "%s", text);
    free(text);
    so.flags = 0;
    ck_assert_int_eq(outbox_schema_ddl("postgres", &so, &text, &d), OUTBOX_OK);
    ck_assert_msg(!strstr(text, "seen") && !strstr(text, "inbox"), "%s", text);
    free(text);
}
END_TEST

static Suite *suite(void)
{
    Suite *su = suite_create("postgres");
    TCase *tc = tcase_create("store");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, test_spec_ddl_open);
    tcase_add_test(tc, test_missing_parts);
    tcase_add_test(tc, test_schema_check);
    tcase_add_test(tc, test_stage_claim_settle);
    tcase_add_test(tc, test_hlc_refused);
    tcase_add_test(tc, test_uri_forms);
    tcase_add_test(tc, test_claim_commit_setting_and_limits);
    tcase_add_test(tc, test_session_settings);
    tcase_add_test(tc, test_claim_plan_survives_growth);
    tcase_add_test(tc, test_claim_reads_bounded);
    tcase_add_test(tc, test_claim_reads_bounded_hlc);
    tcase_add_test(tc, test_locked_head_one_call);
    tcase_add_test(tc, test_native_tx);
    tcase_add_test(tc, test_own_tx);
    tcase_add_test(tc, test_reconnect);
    tcase_add_test(tc, test_deadlock_is_transient);
    tcase_add_test(tc, test_serialization_is_transient);
    tcase_add_test(tc, test_locked_head_holds_key);
    tcase_add_test(tc, test_locked_reclaimable_head_holds_key);
    tcase_add_test(tc, test_relays_keep_key_order);
    tcase_add_test(tc, test_relays_keep_key_order_hlc);
    tcase_add_test(tc, test_wait_wakes_on_stage);
    tcase_add_test(tc, test_purge_batches);
    tcase_add_test(tc, test_inbox_accept);
    tcase_add_test(tc, test_inbox_own_tx);
    tcase_add_test(tc, test_inbox_native_tx);
    tcase_add_test(tc, test_inbox_race_held);
    tcase_add_test(tc, test_inbox_race_many);
    tcase_add_test(tc, test_inbox_race_many_native);
    tcase_add_test(tc, test_inbox_purge);
    tcase_add_test(tc, test_inbox_stats);
    tcase_add_test(tc, test_inbox_schema);
    tcase_add_test(tc, test_inbox_named);
    tcase_add_test(tc, test_inbox_ddl);
    suite_add_tcase(su, tc);
    return su;
}

int main(int argc, char **argv)
{
    if (argc > 2 || (argc == 2 && strcmp(argv[1], "canonical") != 0)) {
        fprintf(stderr, "usage: %s [canonical]\n", argv[0]);
        return 2;
    }
    canonical = argc == 2;
    pgt_uri(); /* skip or fail here, before Check forks */
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
