/* The SQLite driver's benchmark ceiling (drivers/store-sqlite/ceiling.c)
 * against the driver it was built with: one step of a ceiling worker runs
 * the statements, in the order and transactions, that one claim and one
 * settle of the driver run on the same rows; and it publishes them. Every
 * statement SQLite runs in this process is traced per connection, so the
 * test fails when the ceiling's loop and the driver's claim or settle part
 * (a statement added to one of them, a transaction split or merged). */
#include <check.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox/ceiling.h"
#include "outbox/driver.h"
#include "test_store.h"

extern const outbox_store_ceiling_t outbox_ceiling_sqlite;

#define ROWS 6
#define MAX_TRACED 64

/* The statements one connection ran while recording was on. */
typedef struct trace {
    sqlite3 *db;
    char *sql[MAX_TRACED];
    size_t n;
} trace_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static trace_t traces[8];
static size_t n_traces;
static int recording;

static void traces_clear(void)
{
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < n_traces; i++)
        for (size_t j = 0; j < traces[i].n; j++)
            free(traces[i].sql[j]);
    n_traces = 0;
    pthread_mutex_unlock(&mu);
}

static int trace_stmt(unsigned type, void *ctx, void *p, void *x)
{
    (void)ctx, (void)x;
    const char *sql = type == SQLITE_TRACE_STMT ? sqlite3_sql(p) : NULL;
    pthread_mutex_lock(&mu);
    if (sql && recording) {
        sqlite3 *db = sqlite3_db_handle(p);
        size_t i = 0;
        while (i < n_traces && traces[i].db != db)
            i++;
        if (i == n_traces && n_traces < sizeof traces / sizeof traces[0])
            traces[n_traces++] = (trace_t){.db = db};
        if (i < n_traces && traces[i].n < MAX_TRACED)
            traces[i].sql[traces[i].n++] = strdup(sql);
    }
    pthread_mutex_unlock(&mu);
    return 0;
}

static int trace_hook(sqlite3 *db, char **err, const struct sqlite3_api_routines *api)
{
    (void)err, (void)api;
    sqlite3_trace_v2(db, SQLITE_TRACE_STMT, trace_stmt, NULL);
    return SQLITE_OK;
}

/* The one connection that ran statements while recording; its trace. */
static trace_t *only_trace(const char *who)
{
    ck_assert_msg(n_traces == 1, "%s ran statements on %zu connections, expected 1", who, n_traces);
    return &traces[0];
}

static char dir[256], uri[600];

static void stage_rows(void)
{
    outbox_store_t *s = NULL;
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_store_open(uri, NULL, &s, &d) == OUTBOX_OK, "%s", d.message);
    outbox_event_t ev[ROWS * 2];
    char ids[ROWS * 2][40];
    for (int i = 0; i < ROWS * 2; i++) {
        snprintf(ids[i], sizeof ids[i], "00000000-0000-4000-8000-%012d", i);
        /* Half of them keyed, two keys: the per-key rule is in the claim. */
        ev[i] = (outbox_event_t){.event_id = ids[i],
                                 .event_type = "t", .payload = "{}",
                                 .ordering_key = i % 2 ? (i % 4 == 1 ? "k1" : "k2") : NULL};
    }
    size_t staged = 0;
    ck_assert_msg(outbox_store_stage(s, NULL, "r", ev, ROWS * 2, &staged) == OUTBOX_OK, "%s",
                  outbox_store_message(s));
    outbox_store_close(s);
}

static long count_published(void)
{
    sqlite3 *db = NULL;
    char path[300];
    snprintf(path, sizeof path, "%s/t.db", dir);
    ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    ck_assert_int_eq(sqlite3_prepare_v2(db,
                                        "SELECT count(*) FROM outbox WHERE status = 'published' "
                                        "AND published_at IS NOT NULL",
                                        -1, &st, NULL),
                     SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    long n = (long)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

static void setup(void)
{
    sqlite3_auto_extension((void (*)(void))trace_hook);
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_driver_register(outbox_ceiling_sqlite.driver(), &d) == OUTBOX_OK, "%s",
                  d.message);
    test_store_make("ceiling", dir, uri, 0);
    stage_rows();
}

static void teardown(void)
{
    traces_clear();
    test_store_remove(dir);
}

/* One claim of ROWS rows and one settle of them as published, through the
 * driver's vtable on a fresh handle; its statements into *out. */
static trace_t driver_cycle(void)
{
    outbox_store_t *s = NULL;
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_store_open(uri, NULL, &s, &d) == OUTBOX_OK, "%s", d.message);
    ck_assert_ptr_eq(outbox_store_driver(s), outbox_ceiling_sqlite.driver());
    const outbox_store_vtable_t *vt = outbox_ceiling_sqlite.driver()->store;
    void *h = outbox_store_driver_handle(s);
    outbox_claim_req_t req = {.struct_size = sizeof req, .route = "r", .limit = ROWS,
                              .lease_us = 30000000};
    const outbox_row_t *rows = NULL;
    size_t n = 0;
    outbox_fence_t fence = {0};
    recording = 1;
    ck_assert_msg(vt->claim(h, &req, &rows, &n, &fence, &d) == OUTBOX_OK, "%s", d.message);
    ck_assert_uint_eq(n, ROWS);
    outbox_settle_item_t items[ROWS];
    for (size_t i = 0; i < n; i++)
        items[i] = (outbox_settle_item_t){.id = rows[i].id, .kind = OUTBOX_SETTLE_PUBLISHED};
    size_t applied = 0;
    ck_assert_msg(vt->settle(h, &fence, items, n, &applied, &d) == OUTBOX_OK, "%s", d.message);
    recording = 0;
    ck_assert_uint_eq(applied, ROWS);
    trace_t t = *only_trace("the driver's claim and settle");
    n_traces = 0;
    outbox_store_close(s);
    return t;
}

START_TEST(step_runs_the_drivers_statements)
{
    trace_t drv = driver_cycle();
    ck_assert_int_eq(count_published(), ROWS);

    const outbox_store_ceiling_t *c = &outbox_ceiling_sqlite;
    char err[512] = "";
    void *db = NULL, *w = NULL;
    ck_assert_msg(c->open(uri, &db, err, sizeof err) == 0, "%s", err);
    outbox_ceiling_job_t job = {.struct_size = sizeof job, .relation = "outbox", .route = "r",
                                .batch = ROWS, .lease_us = 30000000};
    ck_assert_msg(c->worker_open(db, &job, &w, err, sizeof err) == 0, "%s", err);
    long published = 0;
    recording = 1;
    ck_assert_msg(c->worker_step(w, &published, err, sizeof err) == 0, "%s", err);
    recording = 0;
    ck_assert_int_eq(published, ROWS);
    ck_assert_int_eq(count_published(), 2 * ROWS);
    trace_t *ceil = only_trace("a ceiling step");

    ck_assert_msg(ceil->n == drv.n,
                  "a ceiling step ran %zu statements, the driver's claim and settle %zu",
                  ceil->n, drv.n);
    for (size_t i = 0; i < drv.n; i++)
        ck_assert_msg(strcmp(ceil->sql[i], drv.sql[i]) == 0,
                      "statement %zu differs:\n  ceiling: %s\n  driver:  %s", i, ceil->sql[i],
                      drv.sql[i]);
    /* The claim and the settle each in a transaction of its own, and one
     * fenced update per row. */
    size_t begins = 0, commits = 0, updates = 0;
    for (size_t i = 0; i < drv.n; i++) {
        begins += strcmp(drv.sql[i], "BEGIN IMMEDIATE") == 0;
        commits += strcmp(drv.sql[i], "COMMIT") == 0;
        updates += strstr(drv.sql[i], "SET status = 'published'") != NULL;
    }
    ck_assert_uint_eq(begins, 2);
    ck_assert_uint_eq(commits, 2);
    ck_assert_uint_eq(updates, ROWS);
    ck_assert_str_eq(drv.sql[drv.n - 1], "COMMIT");

    /* Nothing left: a step publishes nothing and says so. */
    ck_assert_msg(c->worker_step(w, &published, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(published, 0);
    for (size_t j = 0; j < drv.n; j++)
        free(drv.sql[j]);
    c->worker_close(w);
    c->close(db);
}
END_TEST

START_TEST(reference_publishes_the_rest)
{
    const outbox_store_ceiling_t *c = &outbox_ceiling_sqlite;
    char err[512] = "";
    void *db = NULL, *w = NULL;
    ck_assert_msg(c->open(uri, &db, err, sizeof err) == 0, "%s", err);
    outbox_ceiling_job_t job = {.struct_size = sizeof job, .relation = "outbox", .route = "r",
                                .batch = 5, .lease_us = 30000000, .reference = 1};
    ck_assert_msg(c->worker_open(db, &job, &w, err, sizeof err) == 0, "%s", err);
    long total = 0, n = 0;
    do {
        ck_assert_msg(c->worker_step(w, &n, err, sizeof err) == 0, "%s", err);
        ck_assert_int_le(n, 5);
        total += n;
    } while (n > 0);
    ck_assert_int_eq(total, 2 * ROWS);
    ck_assert_int_eq(count_published(), 2 * ROWS);
    long left = -1;
    ck_assert_msg(c->count(db, "outbox", "pending", &left, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(left, 0);
    c->worker_close(w);
    c->close(db);
}
END_TEST

START_TEST(foreign_table_refused)
{
    const outbox_store_ceiling_t *c = &outbox_ceiling_sqlite;
    char err[512] = "";
    void *db = NULL;
    ck_assert_msg(c->open(uri, &db, err, sizeof err) == 0, "%s", err);
    /* The outbox table was made by schema apply, not by the bench. */
    ck_assert_int_eq(c->claim_relation(db, "outbox", err, sizeof err), OUTBOX_CEILING_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "not created by outbox-bench"));
    long n = -1;
    ck_assert_msg(c->count(db, "outbox", "pending", &n, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(n, 2 * ROWS);
    /* One of its own is dropped and forgotten. */
    ck_assert_msg(c->claim_relation(db, "mine", err, sizeof err) == 0, "%s", err);
    ck_assert_msg(c->drop_relation(db, "mine", err, sizeof err) == 0, "%s", err);
    c->close(db);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ceiling_sqlite");
    TCase *tc = tcase_create("ceiling");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, step_runs_the_drivers_statements);
    tcase_add_test(tc, reference_publishes_the_rest);
    tcase_add_test(tc, foreign_table_refused);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
