/* The PostgreSQL driver's benchmark ceiling (drivers/store-postgres/
 * ceiling.c) against the driver it was built with, on a real server
 * (OUTBOX_PG_URI).
 *
 * The ceiling hands pgbench a script; the driver prepares its statements
 * on its own connection. After one claim and one settle through the
 * driver's vtable, the server's pg_prepared_statements on that connection
 * says which statements ran and how often; the script's statements, with
 * the two changes pgbench forces undone (its variables back to $n, the
 * claim's final UPDATE out of the CTE that hands its ids to \gset), must
 * be exactly those, in that order, on every shape of table the driver
 * builds a claim for. So the test fails when the ceiling's statements part
 * from the driver's: a condition dropped or added on either side, another
 * batch limit, another claim shape, a prepared statement more or less per
 * cycle. (The claim's LISTEN, once per session for the relay's wake-up,
 * is not a prepared statement and not part of the ceiling.)
 *
 * Then the ceiling's drain (pgbench) publishes a backlog, every row. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox/ceiling.h"
#include "outbox/outbox.h"
#include "pg_ceiling.h"
#include "pg_conn.h"
#include "pgt.h"

#define ROWS 12
#define BACKLOG 300
#define LEASE_US 30000000LL

/* What the ceiling wraps the claim's final UPDATE in (see ceiling.c). */
#define CLAIMED_HEAD ", claimed AS ("
#define CLAIMED_TAIL                                                                           \
    ") SELECT coalesce(array_agg(id), '{}')::text AS ids, count(*) AS n, "                     \
    "coalesce(max(processing_at), 'epoch')::text AS fence FROM claimed"

static PGconn *db;
static char schema[64];
static char rel[128];

static void setup(void)
{
    db = pgt_connect();
    snprintf(schema, sizeof schema, "%s", pgt_schema("ceiling"));
    snprintf(rel, sizeof rel, "%s.outbox", schema);
    pgt_exec(db, "DROP SCHEMA IF EXISTS %s CASCADE", schema);
    pgt_exec(db, "CREATE SCHEMA %s", schema);
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_driver_register(outbox_ceiling_postgres.driver(), &d) == OUTBOX_OK, "%s",
                  d.message);
}

static void teardown(void)
{
    if (!getenv("PGT_KEEP"))
        pgt_exec(db, "DROP SCHEMA IF EXISTS %s CASCADE", schema);
    PQfinish(db);
}

static outbox_store_t *open_store(const char *relation, uint32_t flags)
{
    outbox_store_options_t o = {.struct_size = sizeof o, .relation = relation, .flags = flags};
    outbox_store_t *s = NULL;
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_store_open(pgt_uri(), &o, &s, &d) == OUTBOX_OK, "open %s: %s", relation,
                  d.message);
    ck_assert_ptr_eq(outbox_store_driver(s), outbox_ceiling_postgres.driver());
    return s;
}

/* relation as outbox-bench makes it: the driver's schema apply. */
static void make_table(const char *relation, uint32_t schema_flags)
{
    outbox_store_t *s = open_store(relation, OUTBOX_OPEN_SCHEMA_ONLY);
    outbox_schema_opts_t so = {.struct_size = sizeof so, .relation = relation,
                               .flags = schema_flags};
    ck_assert_msg(outbox_store_schema_apply(s, &so) == OUTBOX_OK, "%s", outbox_store_message(s));
    outbox_store_close(s);
}

/* n events on route "bench", a third of them on four ordering keys: the
 * claim's per-key rule has work to do. */
static void stage_rows(const char *relation, int n)
{
    outbox_store_t *s = open_store(relation, 0);
    for (int i = 0; i < n; i++) {
        outbox_event_t e = {.event_type = "t", .payload = "{\"n\": 1}",
                            .ordering_key = i % 3 ? NULL : (const char *[]){"k0", "k1", "k2",
                                                                             "k3"}[i % 4]};
        size_t staged = 0;
        ck_assert_msg(outbox_store_stage(s, NULL, "bench", &e, 1, &staged) == OUTBOX_OK, "%s",
                      outbox_store_message(s));
    }
    outbox_store_close(s);
}

/* ------------------------------------------------------- text helpers */

/* s with every from replaced by to; the caller frees it. */
static char *replace_all(const char *s, const char *from, const char *to)
{
    size_t nf = strlen(from), nt = strlen(to), count = 0;
    for (const char *p = strstr(s, from); p; p = strstr(p + nf, from))
        count++;
    char *out = malloc(strlen(s) + count * nt + 1);
    ck_assert_ptr_nonnull(out);
    char *w = out;
    for (const char *p = s;;) {
        const char *hit = strstr(p, from);
        if (!hit) {
            strcpy(w, p);
            break;
        }
        memcpy(w, p, (size_t)(hit - p));
        w += hit - p;
        memcpy(w, to, nt);
        w += nt;
        p = hit + nf;
    }
    return out;
}

/* Applies pairs of (pgbench spelling, driver spelling) to s, freeing s. */
static char *undo_vars(char *s, const char *const (*pairs)[2], size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char *t = replace_all(s, pairs[i][0], pairs[i][1]);
        free(s);
        s = t;
    }
    return s;
}

/* The script's claim and settle as the driver would spell them. */
static void script_statements(const char *script, char **claim, char **settle)
{
    /* The comment lines first, then the claim, \gset, the settle. */
    const char *p = script;
    while (strncmp(p, "-- ", 3) == 0)
        p = strchr(p, '\n') + 1;
    const char *gset = strstr(p, "\n\\gset\n");
    ck_assert_msg(gset != NULL, "no \\gset in the script:\n%s", script);
    const char *end = gset + strlen("\n\\gset\n");
    size_t settle_len = strlen(end);
    ck_assert_msg(settle_len > 2 && strcmp(end + settle_len - 2, ";\n") == 0,
                  "the script does not end with the settle:\n%s", end);
    ck_assert_msg(strchr(end, '\n') == end + settle_len - 1, "more than two statements:\n%s",
                  script);

    char *c = strndup(p, (size_t)(gset - p));
    const char *head = strstr(c, CLAIMED_HEAD);
    size_t clen = strlen(c), tlen = strlen(CLAIMED_TAIL);
    ck_assert_msg(head && clen > tlen && strcmp(c + clen - tlen, CLAIMED_TAIL) == 0,
                  "the claim is not wrapped for \\gset:\n%s", c);
    /* "..., claimed AS (UPDATE ...) SELECT ..." back to "... UPDATE ...". */
    size_t at = (size_t)(head - c);
    c[clen - tlen] = '\0';
    memmove(c + at + 1, head + strlen(CLAIMED_HEAD), strlen(head + strlen(CLAIMED_HEAD)) + 1);
    c[at] = ' ';
    static const char *const claim_vars[][2] = {{":route", "$1"}, {":lease", "$2"}};
    *claim = undo_vars(c, claim_vars, 2);

    static const char *const settle_vars[][2] = {
        {"array_fill(1, ARRAY[:n::int4])", "$2"},
        {"array_fill(NULL::timestamptz, ARRAY[:n::int4])", "$3"},
        {"array_fill(NULL::text, ARRAY[:n::int4])", "$4"},
        {":ids", "$1"},
        {":fence", "$5"},
    };
    *settle = undo_vars(strndup(end, settle_len - 2), settle_vars, 5);
}

/* Fails, saying where, unless the ceiling's statement is the driver's. */
static void same_statement(const char *shape, const char *which, const char *ceiling,
                           const char *driver)
{
    size_t at = 0;
    while (ceiling[at] && ceiling[at] == driver[at])
        at++;
    if (ceiling[at] == driver[at])
        return;
    /* Whole, on stderr: Check's messages are short. */
    fprintf(stderr, "%s table, %s\nceiling: %s\ndriver:  %s\n", shape, which, ceiling, driver);
    size_t from = at > 60 ? at - 60 : 0;
    ck_abort_msg("%s table: the ceiling's %s is not the driver's at byte %zu:\n"
                 "  ceiling: ...%.160s\n  driver:  ...%.160s",
                 shape, which, at, ceiling + from, driver + from);
}

/* One claim of ROWS rows and one settle of them as published through the
 * driver's vtable, on a fresh handle; the statements its connection
 * prepared, in the order it prepared them, each checked to have run once. */
static void driver_cycle(const char *relation, char *stmts[2])
{
    outbox_store_t *s = open_store(relation, 0);
    const outbox_store_vtable_t *vt = outbox_ceiling_postgres.driver()->store;
    pg_handle_t *h = outbox_store_driver_handle(s);
    outbox_claim_req_t req = {.struct_size = sizeof req, .route = "bench", .limit = ROWS,
                              .lease_us = LEASE_US};
    const outbox_row_t *rows = NULL;
    size_t n = 0;
    outbox_fence_t fence = {0};
    outbox_diag_t d = {0};
    ck_assert_msg(vt->claim(h, &req, &rows, &n, &fence, &d) == OUTBOX_OK, "%s", d.message);
    ck_assert_uint_gt(n, 0);
    outbox_settle_item_t items[ROWS];
    for (size_t i = 0; i < n; i++)
        items[i] = (outbox_settle_item_t){.id = rows[i].id, .kind = OUTBOX_SETTLE_PUBLISHED};
    size_t applied = 0;
    ck_assert_msg(vt->settle(h, &fence, items, n, &applied, &d) == OUTBOX_OK, "%s", d.message);
    ck_assert_uint_eq(applied, n);

    PGresult *r = PQexec(h->conn, "SELECT statement, generic_plans + custom_plans FROM "
                                  "pg_prepared_statements ORDER BY prepare_time, name");
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s", PQerrorMessage(h->conn));
    ck_assert_msg(PQntuples(r) == 2, "the driver's claim and settle prepared %d statements, not 2",
                  PQntuples(r));
    for (int i = 0; i < 2; i++) {
        ck_assert_msg(strcmp(PQgetvalue(r, i, 1), "1") == 0,
                      "the driver ran statement %d %s times in one claim and settle:\n%s", i,
                      PQgetvalue(r, i, 1), PQgetvalue(r, i, 0));
        stmts[i] = strdup(PQgetvalue(r, i, 0));
    }
    PQclear(r);
    outbox_store_close(s);
}

/* The shapes of table a claim is built for: what outbox-bench makes (the
 * shipped schema), the canonical indexes only, and the optional columns. */
static const struct {
    const char *name;
    uint32_t schema_flags;
    int canonical;
} shapes[] = {
    {"shipped", 0, 0},
    {"canonical", 0, 1},
    {"hlc and traceparent", OUTBOX_SCHEMA_HLC | OUTBOX_SCHEMA_TRACEPARENT, 0},
};

START_TEST(script_runs_the_drivers_statements)
{
    const char *shape = shapes[_i].name;
    make_table(rel, shapes[_i].schema_flags);
    char err[512] = "";
    if (shapes[_i].canonical) {
        void *cdb = NULL;
        ck_assert_msg(outbox_ceiling_postgres.open(pgt_uri(), &cdb, err, sizeof err) == 0, "%s",
                      err);
        ck_assert_msg(outbox_ceiling_postgres.canonical_only(cdb, rel, err, sizeof err) == 0, "%s",
                      err);
        outbox_ceiling_postgres.close(cdb);
    }
    stage_rows(rel, 2 * ROWS);

    char *drv[2];
    driver_cycle(rel, drv);
    char *script = outbox_pg_ceiling_store_script(pgt_uri(), rel, ROWS, 0, err, sizeof err);
    ck_assert_msg(script != NULL, "%s", err);
    char *claim = NULL, *settle = NULL;
    script_statements(script, &claim, &settle);
    same_statement(shape, "claim", claim, drv[0]);
    same_statement(shape, "settle", settle, drv[1]);

    if (_i == 0) {
        /* outbox-bench --pgbench-script prints, without a server, the
         * script the bench runs on the table it makes. */
        char *printed = outbox_pg_ceiling_script(rel, ROWS, 0);
        ck_assert_ptr_nonnull(printed);
        ck_assert_msg(strcmp(printed, script) == 0,
                      "--pgbench-script's script is not the one the drain runs:\n%s\n---\n%s",
                      printed, script);
        free(printed);
    }
    free(claim);
    free(settle);
    free(script);
    free(drv[0]);
    free(drv[1]);
}
END_TEST

/* The ceiling's own drain, pgbench with two clients, and the reference's
 * on a copy: every row published, none left pending or processing. */
START_TEST(drain_publishes_the_backlog)
{
    const outbox_store_ceiling_t *c = &outbox_ceiling_postgres;
    char err[512] = "", copy[160];
    snprintf(copy, sizeof copy, "%s.outbox_reference", schema);
    void *cdb = NULL;
    ck_assert_msg(c->open(pgt_uri(), &cdb, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(c->claim_relation(cdb, rel, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(c->claim_relation(cdb, copy, err, sizeof err) == 0, "%s", err);
    make_table(rel, 0);
    make_table(copy, 0);
    stage_rows(rel, BACKLOG);
    ck_assert_msg(c->copy(cdb, rel, copy, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(c->quiesce(cdb, rel, err, sizeof err) == 0, "%s", err);

    for (int reference = 0; reference <= 1; reference++) {
        const char *relation = reference ? copy : rel;
        outbox_ceiling_job_t job = {.struct_size = sizeof job, .relation = relation,
                                    .route = "bench", .batch = 50, .lease_us = LEASE_US,
                                    .reference = reference};
        double seconds = -1, cpu = -1;
        ck_assert_msg(c->drain(cdb, &job, 2, BACKLOG, &seconds, &cpu, err, sizeof err) == 0,
                      "%s", err);
        ck_assert_msg(seconds > 0 && cpu >= 0, "seconds %g, cpu %g", seconds, cpu);
        long published = -1, pending = -1, processing = -1;
        ck_assert_msg(c->count(cdb, relation, "published", &published, err, sizeof err) == 0,
                      "%s", err);
        ck_assert_msg(c->count(cdb, relation, "pending", &pending, err, sizeof err) == 0, "%s",
                      err);
        ck_assert_msg(c->count(cdb, relation, "processing", &processing, err, sizeof err) == 0,
                      "%s", err);
        ck_assert_msg(published == BACKLOG && pending == 0 && processing == 0,
                      "%s: %ld published, %ld pending, %ld processing of %d",
                      reference ? "reference" : "ceiling", published, pending, processing,
                      BACKLOG);
        ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s WHERE published_at IS NULL",
                                 relation),
                         0);
    }
    ck_assert_msg(c->drop_relation(cdb, rel, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(c->drop_relation(cdb, copy, err, sizeof err) == 0, "%s", err);
    c->close(cdb);
}
END_TEST

START_TEST(foreign_table_refused)
{
    const outbox_store_ceiling_t *c = &outbox_ceiling_postgres;
    char err[512] = "";
    make_table(rel, 0);
    void *cdb = NULL;
    ck_assert_msg(c->open(pgt_uri(), &cdb, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c->claim_relation(cdb, rel, err, sizeof err), OUTBOX_CEILING_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "not created by outbox-bench"));
    ck_assert_int_eq(pgt_int(db, "SELECT count(*) FROM %s", rel), 0);
    c->close(cdb);
}
END_TEST

int main(void)
{
    pgt_uri(); /* skip, loudly, without a server */
    Suite *s = suite_create("ceiling_postgres");
    TCase *tc = tcase_create("ceiling");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, script_runs_the_drivers_statements, 0,
                        (int)(sizeof shapes / sizeof shapes[0]));
    tcase_add_test(tc, drain_publishes_the_backlog);
    tcase_add_test(tc, foreign_table_refused);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
