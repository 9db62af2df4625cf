/* The MongoDB driver's benchmark ceiling (drivers/store-mongo/ceiling.c)
 * against the driver it was built with, on a real server (OUTBOX_MONGO_URI,
 * FerretDB: the only server the ceiling serves).
 *
 * Every client the driver makes is made by mongoc_client_new_from_uri_with_
 * error, which this test wraps at link time (-Wl,--wrap) to add libmongoc's
 * command monitoring: each command a client sends while recording is on is
 * kept, written out with what legitimately differs from one run to the next
 * replaced (row _ids by their place in claim order, claim and settle tokens
 * by the order they first appear, dates, the session and cluster time).
 * Two claim + settle(published) cycles of the driver's vtable and two steps
 * of a ceiling worker, each on the same fresh backlog, must send the same
 * commands, in the same order, on the same collections, with the same
 * filters and updates. A drain test checks that a ceiling worker publishes
 * a whole backlog.
 *
 * Each run works in a database of its own (it_ceiling_<pid>, Check forks
 * each case), dropped afterwards. */
#include <check.h>
#include <ctype.h>
#include <mongoc/mongoc.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "mongot.h"
#include "outbox/ceiling.h"
#include "outbox/driver.h"
#include "outbox/outbox.h"

extern const outbox_store_ceiling_t outbox_ceiling_mongo;

#define ROWS 6
#define BATCH 3
#define CYCLES 2
#define MAX_CMDS 512
#define LEASE_US 30000000LL


/* --------------------------------------------------- what the server got */

typedef struct cmds {
    char *v[MAX_CMDS];
    size_t n;
    int overflow;
} cmds_t;

static pthread_mutex_t rec_mu = PTHREAD_MUTEX_INITIALIZER;
static int recording;
static cmds_t seen;
/* The backlog's row _ids in claim order (created_at, _id), and the tokens
 * met so far in this recording, in the order met. */
static char row_ids[ROWS][64];
static char tokens[64][40];
static size_t n_tokens;

typedef struct sb {
    char *p;
    size_t len, cap;
} sb_t;

static void sb_put(sb_t *b, const char *s)
{
    size_t n = strlen(s);
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            abort();
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n + 1);
    b->len += n;
}

/* A claim or settle token: the 24 hex digits of an ObjectId, a dash and
 * 8 hex digits of the pid. */
static int is_token(const char *s, uint32_t len)
{
    if (len != 33 || s[24] != '-')
        return 0;
    for (uint32_t i = 0; i < len; i++)
        if (i != 24 && (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i])))
            return 0;
    return 1;
}

/* A string value as it compares: a row _id by its place, a token by the
 * order it was first met, anything else as it is. */
static void put_string(sb_t *b, const char *s, uint32_t len)
{
    char tmp[64];
    for (int i = 0; i < ROWS; i++)
        if (row_ids[i][0] && strcmp(row_ids[i], s) == 0) {
            snprintf(tmp, sizeof tmp, "<row %d>", i);
            sb_put(b, tmp);
            return;
        }
    if (is_token(s, len)) {
        size_t i = 0;
        while (i < n_tokens && strcmp(tokens[i], s) != 0)
            i++;
        if (i == n_tokens && n_tokens < sizeof tokens / sizeof tokens[0])
            snprintf(tokens[n_tokens++], sizeof tokens[0], "%s", s);
        snprintf(tmp, sizeof tmp, "<token %zu>", i);
        sb_put(b, tmp);
        return;
    }
    sb_put(b, "\"");
    sb_put(b, s);
    sb_put(b, "\"");
}

static void put_doc(sb_t *b, const bson_t *doc, int top, int array);

static void put_value(sb_t *b, bson_iter_t *it)
{
    char tmp[64];
    switch (bson_iter_type(it)) {
    case BSON_TYPE_UTF8: {
        uint32_t len = 0;
        const char *s = bson_iter_utf8(it, &len);
        put_string(b, s, len);
        break;
    }
    case BSON_TYPE_DATE_TIME: sb_put(b, "<date>"); break;
    case BSON_TYPE_INT32:
        snprintf(tmp, sizeof tmp, "i32:%d", bson_iter_int32(it));
        sb_put(b, tmp);
        break;
    case BSON_TYPE_INT64:
        snprintf(tmp, sizeof tmp, "i64:%lld", (long long)bson_iter_int64(it));
        sb_put(b, tmp);
        break;
    case BSON_TYPE_DOUBLE:
        snprintf(tmp, sizeof tmp, "d:%g", bson_iter_double(it));
        sb_put(b, tmp);
        break;
    case BSON_TYPE_BOOL: sb_put(b, bson_iter_bool(it) ? "true" : "false"); break;
    case BSON_TYPE_NULL: sb_put(b, "null"); break;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY: {
        uint32_t len = 0;
        const uint8_t *data = NULL;
        int array = bson_iter_type(it) == BSON_TYPE_ARRAY;
        if (array)
            bson_iter_array(it, &len, &data);
        else
            bson_iter_document(it, &len, &data);
        bson_t sub;
        if (bson_init_static(&sub, data, len))
            put_doc(b, &sub, 0, array);
        break;
    }
    default:
        snprintf(tmp, sizeof tmp, "<type %d>", (int)bson_iter_type(it));
        sb_put(b, tmp);
        break;
    }
}

/* The session, the cluster time and the like say nothing of the command;
 * a cursor id is the server's choice. */
static int skipped(const char *key)
{
    static const char *const keys[] = {"lsid", "$clusterTime", "txnNumber", "$readPreference",
                                       "signature"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(key, keys[i]) == 0)
            return 1;
    return 0;
}

static void put_doc(sb_t *b, const bson_t *doc, int top, int array)
{
    bson_iter_t it;
    sb_put(b, array ? "[" : "{");
    int first = 1;
    if (bson_iter_init(&it, doc))
        while (bson_iter_next(&it)) {
            const char *key = bson_iter_key(&it);
            if (top && skipped(key))
                continue;
            if (!first)
                sb_put(b, ", ");
            first = 0;
            if (!array) {
                sb_put(b, key);
                sb_put(b, ": ");
            }
            if (top && strcmp(key, "getMore") == 0)
                sb_put(b, "<cursor>");
            else
                put_value(b, &it);
        }
    sb_put(b, array ? "]" : "}");
}

static void command_started(const mongoc_apm_command_started_t *ev)
{
    pthread_mutex_lock(&rec_mu);
    if (recording) {
        sb_t b = {0};
        sb_put(&b, mongoc_apm_command_started_get_database_name(ev));
        sb_put(&b, " ");
        sb_put(&b, mongoc_apm_command_started_get_command_name(ev));
        sb_put(&b, " ");
        put_doc(&b, mongoc_apm_command_started_get_command(ev), 1, 0);
        if (seen.n < MAX_CMDS)
            seen.v[seen.n++] = b.p;
        else {
            seen.overflow = 1;
            free(b.p);
        }
    }
    pthread_mutex_unlock(&rec_mu);
}

/* The link-time hook: every client the driver (and so the ceiling) makes
 * reports the commands it sends. */
mongoc_client_t *__real_mongoc_client_new_from_uri_with_error(const mongoc_uri_t *u,
                                                              bson_error_t *e);
mongoc_client_t *__wrap_mongoc_client_new_from_uri_with_error(const mongoc_uri_t *u,
                                                              bson_error_t *e);

mongoc_client_t *__wrap_mongoc_client_new_from_uri_with_error(const mongoc_uri_t *u,
                                                              bson_error_t *e)
{
    mongoc_client_t *c = __real_mongoc_client_new_from_uri_with_error(u, e);
    if (c) {
        mongoc_apm_callbacks_t *cb = mongoc_apm_callbacks_new();
        mongoc_apm_set_command_started_cb(cb, command_started);
        mongoc_client_set_apm_callbacks(c, cb, NULL);
        mongoc_apm_callbacks_destroy(cb);
    }
    return c;
}

static void record_start(void)
{
    pthread_mutex_lock(&rec_mu);
    n_tokens = 0;
    seen.n = 0;
    seen.overflow = 0;
    recording = 1;
    pthread_mutex_unlock(&rec_mu);
}

/* Stops recording and hands over what was kept. */
static cmds_t record_stop(void)
{
    pthread_mutex_lock(&rec_mu);
    recording = 0;
    cmds_t out = seen;
    seen.n = 0;
    pthread_mutex_unlock(&rec_mu);
    ck_assert_msg(!out.overflow, "more than %d commands recorded", MAX_CMDS);
    return out;
}

static void cmds_free(cmds_t *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->v[i]);
    c->n = 0;
}

static size_t cmds_count(const cmds_t *c, const char *part)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n; i++)
        n += strstr(c->v[i], part) != NULL;
    return n;
}

/* ------------------------------------------------------------- the data */

static outbox_store_t *open_store(uint32_t flags)
{
    outbox_store_options_t o = {.struct_size = sizeof o, .relation = "outbox", .flags = flags};
    outbox_store_t *s = NULL;
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_store_open(uri, &o, &s, &d) == OUTBOX_OK, "open %s: %s", uri,
                  d.message);
    ck_assert_msg(outbox_store_driver(s) == outbox_ceiling_mongo.driver(),
                  "the store was not opened by the ceiling's driver");
    return s;
}

/* A fresh database with the outbox collection and ROWS pending rows on
 * route r, half of them keyed (two keys), the same events every time; the
 * row _ids (new each time) into row_ids in claim order. */
static void fresh_backlog(void)
{
    mt_drop_db();
    memset(row_ids, 0, sizeof row_ids);
    outbox_store_t *s = open_store(OUTBOX_OPEN_SCHEMA_ONLY);
    outbox_schema_opts_t so = {.struct_size = sizeof so, .relation = "outbox"};
    ck_assert_msg(outbox_store_schema_apply(s, &so) == OUTBOX_OK, "schema apply: %s",
                  outbox_store_message(s));
    outbox_store_close(s);
    s = open_store(0);
    char ids[ROWS][40];
    outbox_event_t ev[ROWS];
    for (int i = 0; i < ROWS; i++) {
        snprintf(ids[i], sizeof ids[i], "00000000-0000-4000-8000-%012d", i);
        ev[i] = (outbox_event_t){.event_id = ids[i], .event_type = "t", .payload = "{\"n\":1}",
                                 .ordering_key = i % 2 ? (i % 4 == 1 ? "k1" : "k2") : NULL};
    }
    size_t staged = 0;
    ck_assert_msg(outbox_store_stage(s, NULL, "r", ev, ROWS, &staged) == OUTBOX_OK, "%s",
                  outbox_store_message(s));
    ck_assert_uint_eq(staged, ROWS);
    outbox_store_close(s);

    mongoc_collection_t *c = mongoc_client_get_collection(client, dbname, "outbox");
    bson_t f = BSON_INITIALIZER, opts = BSON_INITIALIZER, sort;
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sort);
    BSON_APPEND_INT32(&sort, "created_at", 1);
    BSON_APPEND_INT32(&sort, "_id", 1);
    bson_append_document_end(&opts, &sort);
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(c, &f, &opts, NULL);
    const bson_t *doc;
    int n = 0;
    while (mongoc_cursor_next(cur, &doc)) {
        bson_iter_t it;
        ck_assert(n < ROWS);
        ck_assert(bson_iter_init_find(&it, doc, "_id") && BSON_ITER_HOLDS_UTF8(&it));
        snprintf(row_ids[n++], sizeof row_ids[0], "%s", bson_iter_utf8(&it, NULL));
    }
    bson_error_t e;
    ck_assert_msg(!mongoc_cursor_error(cur, &e), "%s", e.message);
    ck_assert_int_eq(n, ROWS);
    mongoc_cursor_destroy(cur);
    bson_destroy(&f);
    bson_destroy(&opts);
    mongoc_collection_destroy(c);
}

static long count_status(const char *status)
{
    mongoc_collection_t *c = mongoc_client_get_collection(client, dbname, "outbox");
    bson_t f = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&f, "status", status);
    bson_error_t e;
    int64_t n = mongoc_collection_count_documents(c, &f, NULL, NULL, NULL, &e);
    ck_assert_msg(n >= 0, "%s", e.message);
    bson_destroy(&f);
    mongoc_collection_destroy(c);
    return (long)n;
}

/* The case's database; the client is the test's own, never recorded
 * (the wrap below sees only mongoc_client_new_from_uri_with_error). */
static void setup(void)
{
    mt_setup("it_ceiling");
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_driver_register(outbox_ceiling_mongo.driver(), &d) == OUTBOX_OK, "%s",
                  d.message);
}

/* ---------------------------------------------------------------- cases */

/* CYCLES claims of BATCH rows and settles of them as published, through
 * the driver's vtable on a fresh handle: the commands they sent. */
static cmds_t driver_cycles(void)
{
    outbox_store_t *s = open_store(0);
    const outbox_store_vtable_t *vt = outbox_ceiling_mongo.driver()->store;
    void *h = outbox_store_driver_handle(s);
    outbox_diag_t d = {0};
    record_start();
    for (int k = 0; k < CYCLES; k++) {
        outbox_claim_req_t req = {.struct_size = sizeof req, .route = "r", .limit = BATCH,
                                  .lease_us = LEASE_US};
        const outbox_row_t *rows = NULL;
        size_t n = 0;
        outbox_fence_t fence;
        memset(&fence, 0, sizeof fence);
        ck_assert_msg(vt->claim(h, &req, &rows, &n, &fence, &d) == OUTBOX_OK, "%s", d.message);
        ck_assert_uint_eq(n, BATCH);
        outbox_settle_item_t items[BATCH];
        for (size_t i = 0; i < n; i++)
            items[i] = (outbox_settle_item_t){.id = rows[i].id, .kind = OUTBOX_SETTLE_PUBLISHED};
        size_t applied = 0;
        ck_assert_msg(vt->settle(h, &fence, items, n, &applied, &d) == OUTBOX_OK, "%s",
                      d.message);
        ck_assert_uint_eq(applied, BATCH);
    }
    cmds_t out = record_stop();
    outbox_store_close(s);
    return out;
}

/* CYCLES steps of a ceiling worker at BATCH: the commands they sent. */
static cmds_t ceiling_steps(void)
{
    const outbox_store_ceiling_t *c = &outbox_ceiling_mongo;
    char err[512] = "";
    void *db = NULL, *w = NULL;
    ck_assert_msg(c->open(uri, &db, err, sizeof err) == 0, "%s", err);
    outbox_ceiling_job_t job = {.struct_size = sizeof job, .relation = "outbox", .route = "r",
                                .batch = BATCH, .lease_us = LEASE_US};
    ck_assert_msg(c->worker_open(db, &job, &w, err, sizeof err) == 0, "%s", err);
    record_start();
    for (int k = 0; k < CYCLES; k++) {
        long published = 0;
        ck_assert_msg(c->worker_step(w, &published, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(published, BATCH);
    }
    cmds_t out = record_stop();
    c->worker_close(w);
    c->close(db);
    return out;
}

START_TEST(steps_send_the_drivers_commands)
{
    fresh_backlog();
    cmds_t drv = driver_cycles();
    ck_assert_int_eq(count_status("published"), CYCLES * BATCH);

    fresh_backlog();
    cmds_t ceil = ceiling_steps();
    ck_assert_int_eq(count_status("published"), CYCLES * BATCH);

    /* The recording saw the driver's FerretDB path: per row a find on its
     * _id and a findAndModify that takes it, a findAndModify per settled
     * row, and the lock's turns on outbox_locks. */
    ck_assert_uint_eq(cmds_count(&drv, " findAndModify "), 2 * CYCLES * BATCH);
    ck_assert_uint_ge(cmds_count(&drv, " insert {insert: \"outbox_locks\""), CYCLES);
    ck_assert_uint_ge(cmds_count(&drv, "{find: \"outbox\", filter: {_id: <row 0>}"), 1);

    size_t n = drv.n < ceil.n ? drv.n : ceil.n;
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(strcmp(drv.v[i], ceil.v[i]) == 0,
                      "command %zu of %zu differs:\n  driver:  %s\n  ceiling: %s", i, drv.n,
                      drv.v[i], ceil.v[i]);
    ck_assert_msg(drv.n == ceil.n, "the driver sent %zu commands, the ceiling %zu (next: %s)",
                  drv.n, ceil.n, drv.n > ceil.n ? drv.v[n] : ceil.v[n]);
    cmds_free(&drv);
    cmds_free(&ceil);
}
END_TEST

START_TEST(worker_drains_the_backlog)
{
    fresh_backlog();
    const outbox_store_ceiling_t *c = &outbox_ceiling_mongo;
    ck_assert_int_eq(c->has_reference, 0);
    char err[512] = "";
    void *db = NULL, *w = NULL;
    ck_assert_msg(c->open(uri, &db, err, sizeof err) == 0, "%s", err);
    outbox_ceiling_job_t job = {.struct_size = sizeof job, .relation = "outbox", .route = "r",
                                .batch = 4, .lease_us = LEASE_US};
    ck_assert_msg(c->worker_open(db, &job, &w, err, sizeof err) == 0, "%s", err);
    long total = 0, n = 0;
    int steps = 0;
    do {
        ck_assert_msg(c->worker_step(w, &n, err, sizeof err) == 0, "%s", err);
        ck_assert_int_le(n, 4);
        total += n;
    } while (n > 0 && ++steps < 10);
    ck_assert_int_eq(total, ROWS);
    long published = -1, pending = -1;
    ck_assert_msg(c->count(db, "outbox", "published", &published, err, sizeof err) == 0, "%s",
                  err);
    ck_assert_msg(c->count(db, "outbox", "pending", &pending, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(published, ROWS);
    ck_assert_int_eq(pending, 0);
    ck_assert_int_eq(count_status("processing"), 0);
    c->worker_close(w);

    /* The outbox collection was made by schema apply, not by the bench. */
    ck_assert_int_eq(c->claim_relation(db, "outbox", err, sizeof err), OUTBOX_CEILING_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "not created by outbox-bench"));
    c->close(db);
}
END_TEST

int main(void)
{
    mt_server_uri(); /* skips (77), or fails under CI=true, before any fork */
    Suite *s = suite_create("ceiling_mongo");
    TCase *tc = tcase_create("ceiling");
    tcase_add_checked_fixture(tc, setup, mt_teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, steps_send_the_drivers_commands);
    tcase_add_test(tc, worker_drains_the_backlog);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
