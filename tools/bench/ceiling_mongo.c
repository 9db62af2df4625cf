/* outbox-bench, MongoDB: the bench's own collections and the store ceiling.
 *
 * The ceiling is a bare libmongoc loop of the commands the MongoDB store
 * driver (drivers/store-mongo/) sends for one claim + settle(published)
 * cycle, copied by hand and never linked; each part names the driver
 * function it follows. It runs in this process, one thread and one client
 * per --workers, and its clock starts once every client has connected.
 *
 * Only the path the driver takes on FerretDB is copied (the driver finds
 * FerretDB by `ferretdbVersion` in buildInfo). There a claim is:
 *
 *   - when the claim cache is spent (first claim, or a walk that ends
 *     before the batch is full): one find of the route's unfinished rows,
 *     small fields only, sorted in the client, the first 4096 kept
 *     (cache_read in mongo_claim.c);
 *   - the route's lock (mongo_lock.c): find of the newest turn, insert of
 *     the next one, find of a later turn, and after the walk an update
 *     marking it done; every 32nd turn deletes the old ones;
 *   - the walk: per cached row, a find on its _id (its state), then a
 *     findAndModify on its _id that takes it (walk, ask, take_one);
 *
 * and a settle is one findAndModify on each item's _id (settle_each in
 * mongo_settle.c). What the driver does between the commands in memory
 * (decoding the claimed documents into rows, the payload to JSON) is not
 * copied: the ceiling is what the server and the client library cost.
 *
 * On a MongoDB server (no ferretdbVersion) the driver claims with a held-
 * keys find, a candidates find, one guarded updateMany and a read back by
 * token, and settles with bulk updateMany statements. That path is not
 * copied here, because it could not be measured against a real server when
 * this was written: the ceiling refuses such a server and says to run with
 * --no-ceiling.
 *
 * The bench's own collections are recorded in outbox_bench_relations
 * ({_id: relation}) in the URI's database; a collection it did not create
 * is never dropped.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mongoc/mongoc.h>
#include <openssl/crypto.h>

#include "bench.h"

/* libmongoc, linked into this program, sets OpenSSL up when the program is
 * loaded, and OpenSSL keeps the main thread's error state and random
 * generator in thread-local storage that the process's end never frees
 * (LeakSanitizer reports it). Handing them back at exit, after everything
 * else, keeps the sanitizer runs clean. */
static void openssl_thread_stop(void)
{
    OPENSSL_thread_stop();
}

__attribute__((constructor)) static void register_openssl_thread_stop(void)
{
    atexit(openssl_thread_stop);
}

/* The relay's default lease (core/relay.c, outbox_relay_config_init). */
#define BMG_LEASE_MS 30000
/* mongo_claim.c: MONGO_CLAIM_CACHE_MAX, MONGO_CLAIM_LOCK_TTL_MS and
 * MONGO_CLAIM_LOCK_WAIT_MS. */
#define BMG_CACHE_MAX 4096
#define BMG_LOCK_TTL_MS 15000
#define BMG_LOCK_WAIT_MS 20000
/* mongo_int.h: MONGO_STMT_MAX, the most documents of one insert. */
#define BMG_STMT_MAX 50

#define BMG_MARKS "outbox_bench_relations"

typedef struct bmg {
    mongoc_uri_t *uri;
    mongoc_client_t *client;
    char db[128];
} bmg_t;

static int mg_fail(const bson_error_t *e, const char *what, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s: %s", what, e->message[0] ? e->message : "failed");
    return BENCH_EXIT_FAIL;
}

/* "db.coll" or "coll" (then in the URI's database). */
static void split_rel(const bmg_t *b, const char *relation, char *db, size_t dbsize, char *coll,
                      size_t collsize)
{
    const char *dot = strchr(relation, '.');
    if (dot) {
        snprintf(db, dbsize, "%.*s", (int)(dot - relation), relation);
        snprintf(coll, collsize, "%s", dot + 1);
    } else {
        snprintf(db, dbsize, "%s", b->db);
        snprintf(coll, collsize, "%s", relation);
    }
}

static mongoc_collection_t *coll_of(const bmg_t *b, mongoc_client_t *client, const char *relation,
                                    const char *suffix)
{
    char db[128], coll[256], name[300];
    split_rel(b, relation, db, sizeof db, coll, sizeof coll);
    /* mongo_conn.c names the locks "%.57s_locks" after the table. */
    if (suffix)
        snprintf(name, sizeof name, "%.57s%s", coll, suffix);
    else
        snprintf(name, sizeof name, "%s", coll);
    return mongoc_client_get_collection(client, db, name);
}

/* A client of the URI that checks the server is FerretDB (*ferret). */
static int connect_client(const mongoc_uri_t *uri, mongoc_client_t **out, int *ferret, char *err,
                          size_t errlen)
{
    bson_error_t e;
    memset(&e, 0, sizeof e);
    *out = mongoc_client_new_from_uri_with_error(uri, &e);
    if (!*out)
        return mg_fail(&e, "MongoDB client", err, errlen);
    mongoc_client_set_error_api(*out, MONGOC_ERROR_API_VERSION_2);
    mongoc_client_set_appname(*out, "outbox-bench");
    bson_t cmd = BSON_INITIALIZER, reply;
    BSON_APPEND_INT32(&cmd, "buildInfo", 1);
    int ok = mongoc_client_command_simple(*out, "admin", &cmd, NULL, &reply, &e);
    bson_destroy(&cmd);
    bson_iter_t it;
    if (ok)
        *ferret = bson_iter_init_find(&it, &reply, "ferretdbVersion");
    bson_destroy(&reply);
    if (!ok) {
        mongoc_client_destroy(*out);
        *out = NULL;
        return mg_fail(&e, "connecting to MongoDB", err, errlen);
    }
    return 0;
}

static void bmg_close(void *db)
{
    bmg_t *b = db;
    if (!b)
        return;
    mongoc_client_destroy(b->client);
    mongoc_uri_destroy(b->uri);
    free(b);
}

static int bmg_open(const char *uri, void **out, char *err, size_t errlen)
{
    *out = NULL;
    /* The driver's init installs its libmongoc log handler (libmongoc's lines
     * go to the host's log, not stderr) and runs mongoc_init; load it first,
     * so the bench's own clients never write to stderr either. Without the
     * driver the relay cannot run: its open says why, later. */
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    (void)outbox_driver_load("mongo", &drv, &d);
    mongoc_init(); /* once per process: a second call does nothing */
    bmg_t *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(err, errlen, "out of memory");
        return BENCH_EXIT_FAIL;
    }
    bson_error_t e;
    memset(&e, 0, sizeof e);
    b->uri = mongoc_uri_new_with_error(uri, &e);
    if (!b->uri) {
        free(b);
        snprintf(err, errlen, "invalid MongoDB URI: %s", e.message);
        return BENCH_EXIT_USAGE;
    }
    const char *name = mongoc_uri_get_database(b->uri);
    if (!name || !name[0] || strlen(name) >= sizeof b->db) {
        bmg_close(b);
        snprintf(err, errlen, "the MongoDB URI names no database (mongodb://HOST/DATABASE)");
        return BENCH_EXIT_USAGE;
    }
    snprintf(b->db, sizeof b->db, "%s", name);
    int ferret = 0;
    int rc = connect_client(b->uri, &b->client, &ferret, err, errlen);
    if (rc == 0 && !ferret) {
        snprintf(err, errlen,
                 "this MongoDB server is not FerretDB: outbox-bench's Mongo ceiling copies only "
                 "the driver's FerretDB path (per-row claims under a lock); measure this server "
                 "with --no-ceiling");
        rc = BENCH_EXIT_USAGE;
    }
    if (rc != 0) {
        bmg_close(b);
        return rc;
    }
    *out = b;
    return 0;
}

/* ------------------------------------------------------ the relations */

static int coll_exists(bmg_t *b, const char *relation, int *exists, char *err, size_t errlen)
{
    char db[128], coll[256];
    split_rel(b, relation, db, sizeof db, coll, sizeof coll);
    mongoc_database_t *d = mongoc_client_get_database(b->client, db);
    bson_t opts = BSON_INITIALIZER, filter;
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "filter", &filter);
    BSON_APPEND_UTF8(&filter, "name", coll);
    bson_append_document_end(&opts, &filter);
    mongoc_cursor_t *c = mongoc_database_find_collections_with_opts(d, &opts);
    const bson_t *doc;
    *exists = 0;
    while (mongoc_cursor_next(c, &doc))
        *exists = 1;
    bson_error_t e;
    int rc = mongoc_cursor_error(c, &e) ? mg_fail(&e, "listing collections", err, errlen) : 0;
    mongoc_cursor_destroy(c);
    bson_destroy(&opts);
    mongoc_database_destroy(d);
    return rc;
}

static mongoc_collection_t *marks_coll(bmg_t *b)
{
    return mongoc_client_get_collection(b->client, b->db, BMG_MARKS);
}

static int marked(bmg_t *b, const char *relation, int *is_marked, char *err, size_t errlen)
{
    mongoc_collection_t *m = marks_coll(b);
    bson_t f = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&f, "_id", relation);
    bson_error_t e;
    int64_t n = mongoc_collection_count_documents(m, &f, NULL, NULL, NULL, &e);
    bson_destroy(&f);
    mongoc_collection_destroy(m);
    if (n < 0)
        return mg_fail(&e, "reading " BMG_MARKS, err, errlen);
    *is_marked = n > 0;
    return 0;
}

static int drop_coll(mongoc_collection_t *c, char *err, size_t errlen)
{
    bson_error_t e;
    int rc = 0;
    /* 26: NamespaceNotFound, already gone. */
    if (!mongoc_collection_drop(c, &e) && !(e.domain == MONGOC_ERROR_SERVER && e.code == 26))
        rc = mg_fail(&e, "dropping a bench collection", err, errlen);
    mongoc_collection_destroy(c);
    return rc;
}

/* The collection and the lock collection the driver keeps beside it. */
static int drop_both(bmg_t *b, const char *relation, char *err, size_t errlen)
{
    int rc = drop_coll(coll_of(b, b->client, relation, NULL), err, errlen);
    if (rc == 0)
        rc = drop_coll(coll_of(b, b->client, relation, "_locks"), err, errlen);
    return rc;
}

static int bmg_claim_relation(void *db, const char *relation, char *err, size_t errlen)
{
    bmg_t *b = db;
    int exists = 0, ours = 0;
    int rc = coll_exists(b, relation, &exists, err, errlen);
    if (rc == 0)
        rc = marked(b, relation, &ours, err, errlen);
    if (rc != 0)
        return rc;
    if (exists && !ours) {
        snprintf(err, errlen,
                 "collection %s exists and was not created by outbox-bench; choose another "
                 "--relation or database",
                 relation);
        return BENCH_EXIT_USAGE;
    }
    if (ours)
        rc = drop_both(b, relation, err, errlen);
    if (rc != 0 || ours)
        return rc;
    mongoc_collection_t *m = marks_coll(b);
    bson_t doc = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&doc, "_id", relation);
    bson_error_t e;
    if (!mongoc_collection_insert_one(m, &doc, NULL, NULL, &e) &&
        !(e.domain == MONGOC_ERROR_SERVER && e.code == 11000))
        rc = mg_fail(&e, "writing " BMG_MARKS, err, errlen);
    bson_destroy(&doc);
    mongoc_collection_destroy(m);
    return rc;
}

static int bmg_drop_relation(void *db, const char *relation, char *err, size_t errlen)
{
    bmg_t *b = db;
    int ours = 0;
    int rc = marked(b, relation, &ours, err, errlen);
    if (rc == 0 && ours)
        rc = drop_both(b, relation, err, errlen);
    if (rc == 0) {
        mongoc_collection_t *m = marks_coll(b);
        bson_t f = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&f, "_id", relation);
        bson_error_t e;
        if (!mongoc_collection_delete_one(m, &f, NULL, NULL, &e))
            rc = mg_fail(&e, "writing " BMG_MARKS, err, errlen);
        bson_destroy(&f);
        mongoc_collection_destroy(m);
    }
    return rc;
}

/* Every document of from into to, insertMany ordered:false in commands of
 * BMG_STMT_MAX documents, as the driver's stage sends them. */
static int bmg_copy(void *db, const char *from, const char *to, char *err, size_t errlen)
{
    bmg_t *b = db;
    mongoc_collection_t *src = coll_of(b, b->client, from, NULL);
    mongoc_collection_t *dst = coll_of(b, b->client, to, NULL);
    bson_t f = BSON_INITIALIZER, opts = BSON_INITIALIZER, s, iopts = BSON_INITIALIZER;
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &s);
    BSON_APPEND_INT32(&s, "created_at", 1);
    BSON_APPEND_INT32(&s, "_id", 1);
    bson_append_document_end(&opts, &s);
    BSON_APPEND_BOOL(&iopts, "ordered", false);
    mongoc_cursor_t *c = mongoc_collection_find_with_opts(src, &f, &opts, NULL);
    bson_t *docs[BMG_STMT_MAX];
    size_t n = 0;
    int rc = 0;
    bson_error_t e;
    const bson_t *doc;
    for (int more = 1; rc == 0 && more;) {
        more = mongoc_cursor_next(c, &doc);
        if (more)
            docs[n++] = bson_copy(doc);
        if (n == BMG_STMT_MAX || (!more && n > 0)) {
            if (!mongoc_collection_insert_many(dst, (const bson_t **)docs, n, &iopts, NULL, &e))
                rc = mg_fail(&e, "copying the backlog", err, errlen);
            for (size_t i = 0; i < n; i++)
                bson_destroy(docs[i]);
            n = 0;
        }
    }
    for (size_t i = 0; i < n; i++)
        bson_destroy(docs[i]);
    if (rc == 0 && mongoc_cursor_error(c, &e))
        rc = mg_fail(&e, "reading the backlog", err, errlen);
    mongoc_cursor_destroy(c);
    bson_destroy(&f);
    bson_destroy(&opts);
    bson_destroy(&iopts);
    mongoc_collection_destroy(src);
    mongoc_collection_destroy(dst);
    return rc;
}

static int bmg_count(void *db, const char *relation, const char *status, long *count, char *err,
                     size_t errlen)
{
    bmg_t *b = db;
    mongoc_collection_t *c = coll_of(b, b->client, relation, NULL);
    bson_t f = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&f, "status", status);
    bson_error_t e;
    int64_t n = mongoc_collection_count_documents(c, &f, NULL, NULL, NULL, &e);
    bson_destroy(&f);
    mongoc_collection_destroy(c);
    if (n < 0)
        return mg_fail(&e, "counting documents", err, errlen);
    *count = (long)n;
    return 0;
}

/* FerretDB on SQLite has nothing the bench could bring to the same state
 * before each drain: each side drains a fresh collection of its own. */
static int bmg_quiesce(void *db, const char *relation, char *err, size_t errlen)
{
    (void)db;
    (void)relation;
    (void)err;
    (void)errlen;
    return 0;
}

/* ------------------------------------------------------ the bare loop */

typedef struct crow {
    char *id;
    char *key;
    int pending;
    int64_t available_ms, processing_ms, created_ms;
    int finished;
    int64_t busy_until_ms;
} crow_t;

typedef struct cworker {
    const bmg_t *b;
    const char *relation;
    long batch, events;
    int64_t poll_us;
    atomic_long *published;
    bench_gate_t *gate;
    mongoc_client_t *client;
    mongoc_collection_t *coll, *locks;
    char lock_name[400];
    /* the claim cache */
    crow_t *rows;
    size_t n_rows, cap_rows, start;
    int has_cache;
    /* this claim's rows */
    char (*ids)[64];
    long n_ids;
    char token[25];
    int rc;
    char err[600];
} cworker_t;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* mongo_err.c, outbox_mongo_token: 24 hex digits of a fresh ObjectId. */
static void new_token(char out[25])
{
    bson_oid_t oid;
    bson_oid_init(&oid, NULL);
    bson_oid_to_string(&oid, out);
}

static const char *str_of(const bson_t *doc, const char *key)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_UTF8(&it))
        return bson_iter_utf8(&it, NULL);
    return NULL;
}

static int64_t date_of(const bson_t *doc, const char *key)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_DATE_TIME(&it))
        return bson_iter_date_time(&it);
    return 0;
}

static int wfail(cworker_t *w, const bson_error_t *e, const char *what)
{
    snprintf(w->err, sizeof w->err, "%s: %s", what, e->message);
    return BENCH_EXIT_FAIL;
}

static void cache_free(cworker_t *w)
{
    for (size_t i = 0; i < w->n_rows; i++) {
        free(w->rows[i].id);
        free(w->rows[i].key);
    }
    w->n_rows = 0;
    w->start = 0;
    w->has_cache = 0;
}

static int cmp_crow(const void *a, const void *b)
{
    const crow_t *x = a, *y = b;
    if (x->created_ms != y->created_ms)
        return x->created_ms < y->created_ms ? -1 : 1;
    return strcmp(x->id, y->id);
}

/* mongo_claim.c, cache_read: the route's unfinished rows, small fields. */
static int cache_read(cworker_t *w)
{
    cache_free(w);
    w->has_cache = 1;
    bson_t f = BSON_INITIALIZER, st, arr, opts = BSON_INITIALIZER, p;
    BSON_APPEND_UTF8(&f, "outbox_route", BENCH_ROUTE);
    BSON_APPEND_DOCUMENT_BEGIN(&f, "status", &st);
    BSON_APPEND_ARRAY_BEGIN(&st, "$in", &arr);
    BSON_APPEND_UTF8(&arr, "0", "pending");
    BSON_APPEND_UTF8(&arr, "1", "processing");
    bson_append_array_end(&st, &arr);
    bson_append_document_end(&f, &st);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &p);
    static const char *const proj[] = {"_id",           "status",     "ordering_key", "available_at",
                                       "processing_at", "created_at", "hlc"};
    for (size_t i = 0; i < sizeof proj / sizeof proj[0]; i++)
        BSON_APPEND_INT32(&p, proj[i], 1);
    bson_append_document_end(&opts, &p);
    mongoc_cursor_t *c = mongoc_collection_find_with_opts(w->coll, &f, &opts, NULL);
    const bson_t *doc;
    int rc = 0;
    while (rc == 0 && mongoc_cursor_next(c, &doc)) {
        const char *id = str_of(doc, "_id"), *s = str_of(doc, "status");
        if (!id || !s)
            continue;
        if (w->n_rows == w->cap_rows) {
            size_t cap = w->cap_rows ? w->cap_rows * 2 : 256;
            crow_t *v = realloc(w->rows, cap * sizeof *v);
            if (!v) {
                snprintf(w->err, sizeof w->err, "out of memory");
                rc = BENCH_EXIT_FAIL;
                break;
            }
            w->rows = v;
            w->cap_rows = cap;
        }
        const char *key = str_of(doc, "ordering_key");
        crow_t *r = &w->rows[w->n_rows++];
        *r = (crow_t){.id = strdup(id),
                      .key = key ? strdup(key) : NULL,
                      .pending = strcmp(s, "pending") == 0,
                      .available_ms = date_of(doc, "available_at"),
                      .processing_ms = date_of(doc, "processing_at"),
                      .created_ms = date_of(doc, "created_at")};
        if (!r->id || (key && !r->key)) {
            snprintf(w->err, sizeof w->err, "out of memory");
            rc = BENCH_EXIT_FAIL;
        }
    }
    bson_error_t e;
    if (rc == 0 && mongoc_cursor_error(c, &e))
        rc = wfail(w, &e, "claim (unfinished rows)");
    mongoc_cursor_destroy(c);
    bson_destroy(&f);
    bson_destroy(&opts);
    if (rc == 0 && w->n_rows > 1)
        qsort(w->rows, w->n_rows, sizeof *w->rows, cmp_crow);
    while (w->n_rows > BMG_CACHE_MAX) {
        crow_t *r = &w->rows[--w->n_rows];
        free(r->id);
        free(r->key);
    }
    return rc;
}

/* ------------------------------------------------ the lock (mongo_lock.c) */

typedef struct turn {
    int found, done;
    int64_t turn, at_ms;
} turn_t;

static int find_turn(cworker_t *w, int64_t above, turn_t *out)
{
    memset(out, 0, sizeof *out);
    bson_t f = BSON_INITIALIZER, opts = BSON_INITIALIZER, s, gt;
    BSON_APPEND_UTF8(&f, "name", w->lock_name);
    if (above > 0) {
        BSON_APPEND_DOCUMENT_BEGIN(&f, "turn", &gt);
        BSON_APPEND_INT64(&gt, "$gt", above);
        bson_append_document_end(&f, &gt);
    }
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &s);
    BSON_APPEND_INT32(&s, "turn", -1);
    bson_append_document_end(&opts, &s);
    BSON_APPEND_INT64(&opts, "limit", 1);
    mongoc_cursor_t *c = mongoc_collection_find_with_opts(w->locks, &f, &opts, NULL);
    const bson_t *doc;
    while (mongoc_cursor_next(c, &doc)) {
        bson_iter_t it;
        out->found = 1;
        if (bson_iter_init_find(&it, doc, "turn") && BSON_ITER_HOLDS_NUMBER(&it))
            out->turn = bson_iter_as_int64(&it);
        out->done = bson_iter_init_find(&it, doc, "done") && bson_iter_as_bool(&it);
        out->at_ms = date_of(doc, "at");
    }
    bson_error_t e;
    int rc = mongoc_cursor_error(c, &e) ? wfail(w, &e, "taking the lock") : 0;
    mongoc_cursor_destroy(c);
    bson_destroy(&f);
    bson_destroy(&opts);
    return rc;
}

static void mark_done(cworker_t *w, const char *id)
{
    bson_t f = BSON_INITIALIZER, u = BSON_INITIALIZER, set;
    BSON_APPEND_UTF8(&f, "_id", id);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
    BSON_APPEND_BOOL(&set, "done", true);
    bson_append_document_end(&u, &set);
    mongoc_collection_update_one(w->locks, &f, &u, NULL, NULL, NULL);
    bson_destroy(&f);
    bson_destroy(&u);
}

static void cleanup_turns(cworker_t *w, int64_t turn)
{
    bson_t f = BSON_INITIALIZER, lt;
    BSON_APPEND_UTF8(&f, "name", w->lock_name);
    BSON_APPEND_DOCUMENT_BEGIN(&f, "turn", &lt);
    BSON_APPEND_INT64(&lt, "$lt", turn - 1);
    bson_append_document_end(&f, &lt);
    mongoc_collection_delete_many(w->locks, &f, NULL, NULL, NULL);
    bson_destroy(&f);
}

static int lock_take(cworker_t *w, char *id, size_t idsize)
{
    int64_t deadline = bench_mono_us() + (int64_t)BMG_LOCK_WAIT_MS * 1000;
    for (unsigned round = 0;; round++) {
        turn_t cur;
        int rc = find_turn(w, 0, &cur);
        if (rc != 0)
            return rc;
        int64_t now = now_ms();
        if (!cur.found || cur.done || cur.at_ms < now - BMG_LOCK_TTL_MS) {
            int64_t turn = cur.turn + 1;
            snprintf(id, idsize, "%s/%lld", w->lock_name, (long long)turn);
            bson_t doc = BSON_INITIALIZER;
            BSON_APPEND_UTF8(&doc, "_id", id);
            BSON_APPEND_UTF8(&doc, "name", w->lock_name);
            BSON_APPEND_INT64(&doc, "turn", turn);
            BSON_APPEND_DATE_TIME(&doc, "at", now);
            BSON_APPEND_BOOL(&doc, "done", false);
            bson_error_t e;
            int got = mongoc_collection_insert_one(w->locks, &doc, NULL, NULL, &e);
            bson_destroy(&doc);
            if (!got && !(e.domain == MONGOC_ERROR_SERVER && e.code == 11000))
                return wfail(w, &e, "taking the lock");
            if (got) {
                turn_t later;
                rc = find_turn(w, turn, &later);
                if (rc != 0) {
                    mark_done(w, id);
                    return rc;
                }
                if (!later.found) {
                    if (turn % 32 == 0)
                        cleanup_turns(w, turn);
                    return 0;
                }
                mark_done(w, id);
            }
        }
        if (bench_mono_us() > deadline) {
            snprintf(w->err, sizeof w->err, "the lock %s stayed taken for %d ms", w->lock_name,
                     BMG_LOCK_WAIT_MS);
            return BENCH_EXIT_FAIL;
        }
        struct timespec ts = {0, (round < 10 ? 1 + (long)round * 2 : 20) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* ------------------------------------------- the walk (mongo_claim.c) */

enum { ROW_GONE, ROW_FINISHED, ROW_CLAIMABLE, ROW_OURS, ROW_IN_THE_WAY };

typedef struct asked {
    int64_t now_ms, cut_ms;
    int state;
    int64_t processing_ms;
} asked_t;

static int state_of(const cworker_t *w, const bson_t *doc, const asked_t *a)
{
    const char *st = str_of(doc, "status");
    if (!st || (strcmp(st, "pending") != 0 && strcmp(st, "processing") != 0))
        return ROW_FINISHED;
    const char *tok = str_of(doc, "claim_token");
    if (strcmp(st, "pending") == 0) {
        int64_t av = date_of(doc, "available_at");
        return av == 0 || av <= a->now_ms ? ROW_CLAIMABLE : ROW_IN_THE_WAY;
    }
    if (tok && strcmp(tok, w->token) == 0)
        return ROW_OURS;
    return date_of(doc, "processing_at") <= a->cut_ms ? ROW_CLAIMABLE : ROW_IN_THE_WAY;
}

/* ask: a find on the row's _id alone, four fields. */
static int ask(cworker_t *w, const char *id, asked_t *a)
{
    bson_t f = BSON_INITIALIZER, opts = BSON_INITIALIZER, p;
    BSON_APPEND_UTF8(&f, "_id", id);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &p);
    BSON_APPEND_INT32(&p, "status", 1);
    BSON_APPEND_INT32(&p, "claim_token", 1);
    BSON_APPEND_INT32(&p, "available_at", 1);
    BSON_APPEND_INT32(&p, "processing_at", 1);
    bson_append_document_end(&opts, &p);
    a->state = ROW_GONE;
    a->processing_ms = 0;
    mongoc_cursor_t *c = mongoc_collection_find_with_opts(w->coll, &f, &opts, NULL);
    const bson_t *doc;
    while (mongoc_cursor_next(c, &doc)) {
        a->state = state_of(w, doc, a);
        const char *st = str_of(doc, "status");
        a->processing_ms = st && strcmp(st, "processing") == 0 ? date_of(doc, "processing_at") : 0;
    }
    bson_error_t e;
    int rc = mongoc_cursor_error(c, &e) ? wfail(w, &e, "claim (asking a row)") : 0;
    mongoc_cursor_destroy(c);
    bson_destroy(&f);
    bson_destroy(&opts);
    return rc;
}

/* take_one: findAndModify on the _id; the old document says whether it was
 * still claimable, else it is written back as it was. */
static int take_one(cworker_t *w, const char *id, const bson_t *up, const asked_t *a, int *took)
{
    *took = 0;
    bson_t q = BSON_INITIALIZER, reply;
    BSON_APPEND_UTF8(&q, "_id", id);
    mongoc_find_and_modify_opts_t *fam = mongoc_find_and_modify_opts_new();
    mongoc_find_and_modify_opts_set_update(fam, up);
    bson_error_t e;
    int rc = 0;
    if (!mongoc_collection_find_and_modify_with_opts(w->coll, &q, fam, &reply, &e)) {
        rc = wfail(w, &e, "claim");
    } else {
        bson_iter_t it;
        bson_t old;
        const uint8_t *data = NULL;
        uint32_t len = 0;
        if (bson_iter_init_find(&it, &reply, "value") && BSON_ITER_HOLDS_DOCUMENT(&it))
            bson_iter_document(&it, &len, &data);
        if (data && bson_init_static(&old, data, len)) {
            if (state_of(w, &old, a) == ROW_CLAIMABLE) {
                snprintf(w->ids[w->n_ids++], sizeof w->ids[0], "%s", id);
                *took = 1;
            } else if (!mongoc_collection_replace_one(w->coll, &q, &old, NULL, NULL, &e)) {
                rc = wfail(w, &e, "claim (putting back a settled row)");
            }
        }
    }
    bson_destroy(&reply);
    bson_destroy(&q);
    mongoc_find_and_modify_opts_destroy(fam);
    return rc;
}

typedef struct keys {
    char **v;
    size_t n, cap;
} keys_t;

static int key_in(const keys_t *k, const char *key)
{
    for (size_t i = 0; key && i < k->n; i++)
        if (strcmp(k->v[i], key) == 0)
            return 1;
    return 0;
}

static void key_add(keys_t *k, const char *key)
{
    if (key_in(k, key))
        return;
    if (k->n == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 16;
        char **v = realloc(k->v, cap * sizeof *v);
        if (!v)
            return;
        k->v = v;
        k->cap = cap;
    }
    if ((k->v[k->n] = strdup(key)) != NULL)
        k->n++;
}

static int walk(cworker_t *w, const bson_t *up, const asked_t *a0, keys_t *blocked)
{
    int rc = 0;
    for (size_t i = w->start; rc == 0 && i < w->n_rows && w->n_ids < w->batch; i++) {
        crow_t *r = &w->rows[i];
        if (r->finished) {
            if (i == w->start)
                w->start++;
            continue;
        }
        if (key_in(blocked, r->key))
            continue;
        if (!r->key && r->busy_until_ms > a0->now_ms)
            continue;
        asked_t a = *a0;
        rc = ask(w, r->id, &a);
        if (rc != 0)
            break;
        switch (a.state) {
        case ROW_GONE:
        case ROW_FINISHED:
            r->finished = 1;
            if (i == w->start)
                w->start++;
            break;
        case ROW_OURS: break;
        case ROW_CLAIMABLE: {
            int took = 0;
            rc = take_one(w, r->id, up, &a, &took);
            if (rc == 0 && !took && r->key)
                key_add(blocked, r->key);
            break;
        }
        default:
            if (r->key)
                key_add(blocked, r->key);
            else if (a.processing_ms)
                r->busy_until_ms = a.processing_ms + (a.now_ms - a.cut_ms);
            break;
        }
    }
    return rc;
}

static int walk_locked(cworker_t *w, const bson_t *up, const asked_t *a, keys_t *blocked)
{
    char id[500];
    int rc = lock_take(w, id, sizeof id);
    if (rc != 0)
        return rc;
    rc = walk(w, up, a, blocked);
    mark_done(w, id);
    return rc;
}

/* mongo_claim.c, claim_racy. */
static int claim_once(cworker_t *w)
{
    w->n_ids = 0;
    new_token(w->token);
    int64_t now = now_ms();
    asked_t a = {.now_ms = now, .cut_ms = now - BMG_LEASE_MS};
    bson_t up = BSON_INITIALIZER, set, inc;
    BSON_APPEND_DOCUMENT_BEGIN(&up, "$set", &set);
    BSON_APPEND_UTF8(&set, "status", "processing");
    BSON_APPEND_UTF8(&set, "claim_token", w->token);
    BSON_APPEND_DATE_TIME(&set, "processing_at", now);
    bson_append_document_end(&up, &set);
    BSON_APPEND_DOCUMENT_BEGIN(&up, "$inc", &inc);
    BSON_APPEND_INT32(&inc, "attempts", 1);
    bson_append_document_end(&up, &inc);
    keys_t blocked = {0};
    int rc = 0, fresh = 0;
    if (!w->has_cache) {
        rc = cache_read(w);
        fresh = 1;
    }
    if (rc == 0)
        rc = walk_locked(w, &up, &a, &blocked);
    if (rc == 0 && w->n_ids < w->batch && !fresh) {
        rc = cache_read(w);
        if (rc == 0)
            rc = walk_locked(w, &up, &a, &blocked);
    }
    if (rc != 0)
        cache_free(w);
    for (size_t i = 0; i < blocked.n; i++)
        free(blocked.v[i]);
    free(blocked.v);
    bson_destroy(&up);
    return rc;
}

/* mongo_settle.c, settle_each: one findAndModify per item, published. */
static int settle_once(cworker_t *w, long *applied)
{
    *applied = 0;
    char mark[25];
    new_token(mark);
    int64_t now = now_ms();
    bson_t u = BSON_INITIALIZER, set;
    BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
    BSON_APPEND_UTF8(&set, "claim_token", mark);
    BSON_APPEND_UTF8(&set, "status", "published");
    BSON_APPEND_DATE_TIME(&set, "published_at", now);
    bson_append_document_end(&u, &set);
    int rc = 0;
    for (long i = 0; rc == 0 && i < w->n_ids; i++) {
        bson_t q = BSON_INITIALIZER, reply;
        BSON_APPEND_UTF8(&q, "_id", w->ids[i]);
        mongoc_find_and_modify_opts_t *fam = mongoc_find_and_modify_opts_new();
        mongoc_find_and_modify_opts_set_update(fam, &u);
        bson_error_t e;
        if (!mongoc_collection_find_and_modify_with_opts(w->coll, &q, fam, &reply, &e)) {
            rc = wfail(w, &e, "settle");
        } else {
            bson_iter_t it;
            bson_t old;
            const uint8_t *data = NULL;
            uint32_t len = 0;
            if (bson_iter_init_find(&it, &reply, "value") && BSON_ITER_HOLDS_DOCUMENT(&it))
                bson_iter_document(&it, &len, &data);
            if (data && bson_init_static(&old, data, len)) {
                const char *st = str_of(&old, "status"), *tok = str_of(&old, "claim_token");
                if (st && tok && strcmp(st, "processing") == 0 && strcmp(tok, w->token) == 0)
                    (*applied)++;
                else if (!mongoc_collection_replace_one(w->coll, &q, &old, NULL, NULL, &e))
                    rc = wfail(w, &e, "settle (putting back a row the fence did not hold)");
            }
        }
        bson_destroy(&reply);
        mongoc_find_and_modify_opts_destroy(fam);
        bson_destroy(&q);
    }
    bson_destroy(&u);
    return rc;
}

static int cworker_connect(cworker_t *w)
{
    int ferret = 0;
    int rc = connect_client(w->b->uri, &w->client, &ferret, w->err, sizeof w->err);
    if (rc != 0)
        return rc;
    w->coll = coll_of(w->b, w->client, w->relation, NULL);
    w->locks = coll_of(w->b, w->client, w->relation, "_locks");
    char db[128], coll[256];
    split_rel(w->b, w->relation, db, sizeof db, coll, sizeof coll);
    /* mongo_claim.c, walk_locked: "claim:<db>.<collection>:<route>". */
    snprintf(w->lock_name, sizeof w->lock_name, "claim:%s.%s:%s", db, coll, BENCH_ROUTE);
    w->ids = calloc((size_t)w->batch, sizeof *w->ids);
    if (!w->ids) {
        snprintf(w->err, sizeof w->err, "out of memory");
        return BENCH_EXIT_FAIL;
    }
    /* A first command on the collection, so the clock does not time the
     * server's first look at it. */
    bson_t f = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&f, "_id", "");
    mongoc_cursor_t *c = mongoc_collection_find_with_opts(w->coll, &f, NULL, NULL);
    const bson_t *doc;
    while (mongoc_cursor_next(c, &doc))
        ;
    bson_error_t e;
    if (mongoc_cursor_error(c, &e))
        rc = wfail(w, &e, "reading the ceiling's collection");
    mongoc_cursor_destroy(c);
    bson_destroy(&f);
    return rc;
}

static void *cworker_main(void *arg)
{
    cworker_t *w = arg;
    pthread_setname_np(pthread_self(), "bench-ceiling");
    w->rc = cworker_connect(w);
    if (!bench_gate_wait(w->gate))
        return NULL;
    bench_idle_t idle = BENCH_IDLE_INIT;
    while (w->rc == 0 && atomic_load(w->published) < w->events) {
        long applied = 0;
        w->rc = claim_once(w);
        if (w->rc == 0 && w->n_ids > 0) {
            w->rc = settle_once(w, &applied);
            atomic_fetch_add(w->published, applied);
        } else if (w->rc == 0 && bench_idle_wait(&idle, w->published, w->events, w->poll_us)) {
            snprintf(w->err, sizeof w->err,
                     "ceiling stalled: nothing published for %lld s, %ld of %ld published",
                     BENCH_STALL_US / 1000000, atomic_load(w->published), w->events);
            w->rc = BENCH_EXIT_FAIL;
        }
    }
    return NULL;
}

static int bmg_ceiling(void *db, const bench_opts_t *o, const char *relation, bench_drain_t *out,
                       char *err, size_t errlen)
{
    bmg_t *b = db;
    cworker_t *w = calloc((size_t)o->workers, sizeof *w);
    pthread_t *tid = calloc((size_t)o->workers, sizeof *tid);
    if (!w || !tid) {
        free(w);
        free(tid);
        snprintf(err, errlen, "out of memory");
        return BENCH_EXIT_FAIL;
    }
    atomic_long published;
    atomic_init(&published, 0);
    bench_gate_t gate;
    bench_gate_init(&gate);
    long started = 0;
    for (long i = 0; i < o->workers; i++) {
        w[i] = (cworker_t){.b = b,
                           .relation = relation,
                           .batch = o->batch,
                           .events = o->events,
                           .poll_us = o->poll_us,
                           .published = &published,
                           .gate = &gate};
        if (pthread_create(&tid[i], NULL, cworker_main, &w[i]) != 0)
            break;
        started++;
    }
    int rc = 0;
    if (started < o->workers) {
        snprintf(err, errlen, "cannot start %ld threads", o->workers);
        rc = BENCH_EXIT_FAIL;
    }
    /* Every client is connected before the clock starts. */
    bench_gate_open(&gate, started, rc == 0);
    double cpu0 = bench_cpu_s();
    int64_t t0 = bench_mono_us();
    for (long i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    out->seconds = (double)(bench_mono_us() - t0) / 1e6;
    out->cpu_s = bench_cpu_s() - cpu0;
    for (long i = 0; i < started; i++) {
        if (w[i].rc != 0 && rc == 0) {
            snprintf(err, errlen, "ceiling: %s", w[i].err);
            rc = w[i].rc;
        }
        cache_free(&w[i]);
        free(w[i].rows);
        free(w[i].ids);
        if (w[i].coll)
            mongoc_collection_destroy(w[i].coll);
        if (w[i].locks)
            mongoc_collection_destroy(w[i].locks);
        if (w[i].client)
            mongoc_client_destroy(w[i].client);
    }
    bench_gate_destroy(&gate);
    free(w);
    free(tid);
    return rc;
}

/* The bench's whole drain, as the bench's options it reads. */
static int bmg_drain(void *db, const outbox_ceiling_job_t *job, long workers, long events,
                     double *seconds, double *cpu_s, char *err, size_t errlen)
{
    const bench_opts_t o = {.workers = workers, .batch = job->batch, .events = events,
                            .poll_us = 100 * 1000};
    bench_drain_t out = {0};
    int rc = bmg_ceiling(db, &o, job->relation, &out, err, errlen);
    *seconds = out.seconds;
    *cpu_s = out.cpu_s;
    return rc;
}

const outbox_store_ceiling_t outbox_ceiling_mongo = {
    .struct_size = sizeof(outbox_store_ceiling_t),
    .name = "mongo",
    .in_process = 1,
    .open = bmg_open,
    .close = bmg_close,
    .claim_relation = bmg_claim_relation,
    .drop_relation = bmg_drop_relation,
    .copy = bmg_copy,
    .count = bmg_count,
    .quiesce = bmg_quiesce,
    .drain = bmg_drain,
};
