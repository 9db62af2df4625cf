/* The SQLite store's durability per write: staging, schema and admin
 * writes commit with synchronous=FULL (an undone stage would be a lost
 * event), claims and settles with NORMAL (an undone claim or settle is
 * only a redelivery). Every statement SQLite runs in this process is
 * traced, with the synchronous setting of its connection at that moment. */
#include <check.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "outbox_int.h"

/* What one connection did, in order; a test opens few. */
typedef struct conn_log {
    sqlite3 *db;
    int full; /* the synchronous setting last traced: 1 FULL (SQLite's default), 0 NORMAL */
} conn_log_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static conn_log_t conns[16];
static size_t n_conns;
/* Writes seen per kind and setting: [kind][full]. */
enum { W_STAGE, W_CLAIM, W_SETTLE, W_ADMIN, W_KINDS };
static unsigned writes[W_KINDS][2];
static const char *const kind_names[W_KINDS] = {"stage", "claim", "settle", "replay/purge"};

static conn_log_t *conn_of(sqlite3 *db)
{
    for (size_t i = 0; i < n_conns; i++)
        if (conns[i].db == db)
            return &conns[i];
    if (n_conns == sizeof conns / sizeof conns[0])
        return NULL;
    conns[n_conns] = (conn_log_t){.db = db, .full = 1};
    return &conns[n_conns++];
}

/* The kind of write sql is, or -1 for anything else. */
static int kind_of(const char *sql)
{
    int update = strncmp(sql, "UPDATE \"outbox\"", 15) == 0;
    if (strncmp(sql, "INSERT INTO \"outbox\"", 20) == 0)
        return W_STAGE;
    if (update && strstr(sql, "SET status = 'processing'"))
        return W_CLAIM;
    if (update && strstr(sql, "AND status = 'processing' AND processing_at = ?2"))
        return W_SETTLE;
    if (strncmp(sql, "DELETE FROM \"outbox\"", 20) == 0 || (update && strstr(sql, "attempts = 0")))
        return W_ADMIN;
    return -1;
}

static int trace_stmt(unsigned type, void *ctx, void *p, void *x)
{
    (void)ctx, (void)x;
    if (type != SQLITE_TRACE_STMT)
        return 0;
    sqlite3_stmt *st = p;
    const char *sql = sqlite3_sql(st);
    if (sql == NULL)
        return 0;
    pthread_mutex_lock(&mu);
    conn_log_t *c = conn_of(sqlite3_db_handle(st));
    if (c != NULL) {
        if (strncmp(sql, "PRAGMA synchronous=", 19) == 0)
            c->full = strcmp(sql + 19, "FULL") == 0 ? 1 : strcmp(sql + 19, "NORMAL") == 0 ? 0 : -1;
        int k = kind_of(sql);
        if (k >= 0 && c->full >= 0)
            writes[k][c->full]++;
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

static outbox_store_t *open_store(const char *uri, uint32_t flags)
{
    outbox_diag_t d = {0};
    outbox_store_options_t o = {.struct_size = sizeof o, .flags = flags};
    outbox_store_t *s = NULL;
    ck_assert_msg(outbox_store_open(uri, &o, &s, &d) == OUTBOX_OK, "%s", d.message);
    return s;
}

static void stage(outbox_store_t *s, int n0, int n)
{
    for (int i = 0; i < n; i++) {
        char id[OUTBOX_UUID_STRLEN + 1];
        outbox_uuid_v7(id);
        outbox_event_t e = {.event_id = id, .event_type = "t", .payload = "{}"};
        size_t staged = 0;
        ck_assert_msg(outbox_store_stage(s, NULL, "r", &e, 1, &staged) == OUTBOX_OK && staged == 1,
                      "stage %d: %s", n0 + i, outbox_store_message(s));
    }
}

/* Claims everything of route r and settles it with kind. */
static size_t claim_settle(outbox_store_t *s, int kind)
{
    outbox_claim_req_t req = {.struct_size = sizeof req, .route = "r", .limit = 100,
                              .lease_us = 60000000};
    const outbox_row_t *rows = NULL;
    size_t n = 0;
    outbox_fence_t fence;
    ck_assert_msg(outbox_store_claim(s, &req, &rows, &n, &fence) == OUTBOX_OK, "claim: %s",
                  outbox_store_message(s));
    outbox_settle_item_t items[100];
    for (size_t i = 0; i < n; i++)
        items[i] = (outbox_settle_item_t){.id = rows[i].id, .kind = kind, .error = "x"};
    size_t applied = 0;
    if (n > 0)
        ck_assert_msg(outbox_store_settle(s, &fence, items, n, &applied) == OUTBOX_OK && applied == n,
                      "settle: %s", outbox_store_message(s));
    return n;
}

START_TEST(claims_and_settles_run_normal_the_rest_full)
{
    sqlite3_auto_extension((void (*)(void))trace_hook);
    char dir[] = "/tmp/outbox-sync-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char uri[128];
    snprintf(uri, sizeof uri, "sqlite://%s/t.db", dir);

    outbox_store_t *s = open_store(uri, OUTBOX_OPEN_SCHEMA_ONLY);
    outbox_schema_opts_t so = {.struct_size = sizeof so};
    ck_assert_msg(outbox_store_schema_apply(s, &so) == OUTBOX_OK, "%s", outbox_store_message(s));
    outbox_store_close(s);

    /* One handle does everything, in turns: the setting must follow the
     * write, not stick to whatever ran last. */
    s = open_store(uri, 0);
    stage(s, 0, 3);
    ck_assert_uint_eq(claim_settle(s, OUTBOX_SETTLE_PUBLISHED), 3);
    ck_assert_int_eq(outbox_store_begin(s), OUTBOX_OK);
    stage(s, 3, 2);
    ck_assert_int_eq(outbox_store_commit(s), OUTBOX_OK);
    ck_assert_uint_eq(claim_settle(s, OUTBOX_SETTLE_DEAD), 2);
    uint64_t count = 0;
    ck_assert_msg(outbox_store_purge(s, "r", INT64_MAX / 2, &count) == OUTBOX_OK && count == 3, "purge: %s",
                  outbox_store_message(s));
    ck_assert_msg(outbox_store_replay(s, "r", NULL, &count) == OUTBOX_OK && count == 2, "replay: %s",
                  outbox_store_message(s));
    stage(s, 5, 1);
    ck_assert_uint_eq(claim_settle(s, OUTBOX_SETTLE_PUBLISHED), 3);
    outbox_store_close(s);

    pthread_mutex_lock(&mu);
    for (int k = 0; k < W_KINDS; k++)
        printf("%-12s FULL %u, NORMAL %u\n", kind_names[k], writes[k][1], writes[k][0]);
    ck_assert_msg(writes[W_STAGE][1] == 6 && writes[W_STAGE][0] == 0,
                  "stages: %u under FULL, %u under NORMAL; expected all 6 under FULL",
                  writes[W_STAGE][1], writes[W_STAGE][0]);
    ck_assert_msg(writes[W_CLAIM][0] == 3 && writes[W_CLAIM][1] == 0,
                  "claims: %u under NORMAL, %u under FULL; expected all 3 under NORMAL",
                  writes[W_CLAIM][0], writes[W_CLAIM][1]);
    ck_assert_msg(writes[W_SETTLE][0] > 0 && writes[W_SETTLE][1] == 0,
                  "settles: %u under NORMAL, %u under FULL; expected all under NORMAL",
                  writes[W_SETTLE][0], writes[W_SETTLE][1]);
    ck_assert_msg(writes[W_ADMIN][1] == 2 && writes[W_ADMIN][0] == 0,
                  "purge and replay: %u under FULL, %u under NORMAL; expected both under FULL",
                  writes[W_ADMIN][1], writes[W_ADMIN][0]);
    pthread_mutex_unlock(&mu);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sqlite_sync");
    TCase *tc = tcase_create("sync");
    tcase_add_test(tc, claims_and_settles_run_normal_the_rest_full);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
