/* MongoDB store driver, top of the house beside mongo.c: its benchmark
 * ceiling (outbox/ceiling.h), compiled with the driver's sources into
 * outbox-bench and its test only.
 *
 * A ceiling worker is a handle the driver opened on the bench's collection
 * (its own client, one per --workers), and a step is the driver's own
 * claim and settle(published) on it: outbox_mongo_claim of job->batch rows,
 * then outbox_mongo_settle of every row it returned as published, the very
 * functions of the driver's vtable. On FerretDB (which the driver finds by
 * `ferretdbVersion` in buildInfo) that is the per-row claim under the
 * route's lock (mongo_claim.c, mongo_lock.c) and one findAndModify per
 * settled row (mongo_settle.c); a change to those commands is a change to
 * the ceiling. What a step leaves out is what the relay adds: copying the
 * rows, building messages, publishing. What it keeps that is not the
 * server's cost is the driver's own decoding of each taken document into a
 * row (the walk decodes a row as it takes it, and the rows it holds decide
 * when the walk stops, so the two cannot be parted without a second walk).
 *
 * tests/integration/mongo/test_ceiling_mongo.c records every command the
 * server receives and checks that ceiling steps send what the driver's
 * claims and settles send.
 *
 * On a MongoDB server (no ferretdbVersion) the driver claims with guarded
 * updates; that path has not been measured against a real server, so the
 * ceiling refuses such a server and says to run with --no-ceiling. There
 * is no reference claim: has_reference is 0.
 *
 * Beside the workers, the bench's own bookkeeping on a schema-only handle
 * of the driver: its collections are recorded in outbox_bench_relations
 * ({_id: relation}) in the URI's database, and a collection it did not
 * create is never dropped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "mongo_ops.h"
#include "outbox/ceiling.h"
#include "outbox/outbox.h"

/* The descriptor mongo.c defines when built with
 * -DOUTBOX_DRIVER_STATIC=mongo_ceiling. */
const outbox_driver_t *outbox_driver_entry_mongo_ceiling(void);

/* libmongoc, linked into the program, sets OpenSSL up when the program is
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

#define BMG_MARKS "outbox_bench_relations"

/* The bench's connection: a schema-only handle of the driver's on the
 * marks collection, whose client serves everything around the drains. */
typedef struct bmg {
    outbox_store_t *store;
    mongo_handle_t *h;
    mongoc_client_t *client; /* h->client */
    char db[OUTBOX_KIT_IDENT_MAX + 1];
    char *uri;
} bmg_t;

static int mg_fail(const bson_error_t *e, const char *what, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s: %s", what, e->message[0] ? e->message : "failed");
    return OUTBOX_CEILING_FAIL;
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
    /* The driver names its locks "%.57s_locks" after the collection
     * (mongo_conn.c). */
    if (suffix)
        snprintf(name, sizeof name, "%.57s%s", coll, suffix);
    else
        snprintf(name, sizeof name, "%s", coll);
    return mongoc_client_get_collection(client, db, name);
}

/* Opens uri on relation through the driver this ceiling was built with
 * (registered by the bench), checking that it was: only then is the
 * handle a mongo_handle_t. A server that is not FerretDB is refused. */
static int open_store(const char *uri, const char *relation, uint32_t flags, outbox_store_t **s,
                      mongo_handle_t **h, char *err, size_t errlen)
{
    void *handle = NULL;
    int rc = outbox_ceiling_store_open(outbox_driver_entry_mongo_ceiling(), MONGO_NAME, uri,
                                       relation, flags, s, &handle, err, errlen);
    if (rc != 0)
        return rc;
    *h = handle;
    if (!(*h)->racy_updates) {
        outbox_store_close(*s);
        *s = NULL;
        snprintf(err, errlen,
                 "this MongoDB server is not FerretDB: outbox-bench's Mongo ceiling serves only "
                 "the driver's FerretDB path (per-row claims under a lock); measure this server "
                 "with --no-ceiling");
        return OUTBOX_CEILING_USAGE;
    }
    return 0;
}

static void bmg_close(void *db)
{
    bmg_t *b = db;
    if (!b)
        return;
    outbox_store_close(b->store);
    free(b->uri);
    free(b);
}

static int bmg_open(const char *uri, void **out, char *err, size_t errlen)
{
    *out = NULL;
    bmg_t *b = calloc(1, sizeof *b);
    if (!b || !(b->uri = strdup(uri))) {
        free(b);
        snprintf(err, errlen, "out of memory");
        return OUTBOX_CEILING_FAIL;
    }
    int rc = open_store(uri, BMG_MARKS, OUTBOX_OPEN_SCHEMA_ONLY, &b->store, &b->h, err, errlen);
    if (rc != 0) {
        bmg_close(b);
        return rc;
    }
    b->client = b->h->client;
    snprintf(b->db, sizeof b->db, "%s", b->h->db);
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
        return OUTBOX_CEILING_USAGE;
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
 * MONGO_STMT_MAX documents, as the driver's stage sends them. */
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
    bson_t *docs[MONGO_STMT_MAX];
    size_t n = 0;
    int rc = 0;
    bson_error_t e;
    const bson_t *doc;
    for (int more = 1; rc == 0 && more;) {
        more = mongoc_cursor_next(c, &doc);
        if (more)
            docs[n++] = bson_copy(doc);
        if (n == MONGO_STMT_MAX || (!more && n > 0)) {
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

/* ---------------------------------------------------- the workers */

typedef struct cworker {
    outbox_ceiling_job_t job;
    outbox_store_t *store;
    mongo_handle_t *h;
    outbox_settle_item_t *items;
} cworker_t;

static void bmg_worker_close(void *worker)
{
    cworker_t *w = worker;
    if (!w)
        return;
    outbox_store_close(w->store);
    free(w->items);
    free(w);
}

static int bmg_worker_open(void *db, const outbox_ceiling_job_t *job, void **out, char *err,
                           size_t errlen)
{
    *out = NULL;
    if (job->reference) {
        snprintf(err, errlen, "the MongoDB ceiling has no reference claim");
        return OUTBOX_CEILING_USAGE;
    }
    if (job->batch <= 0) {
        snprintf(err, errlen, "the batch must be above 0");
        return OUTBOX_CEILING_USAGE;
    }
    cworker_t *w = calloc(1, sizeof *w);
    if (!w || !(w->items = calloc((size_t)job->batch, sizeof *w->items))) {
        free(w);
        snprintf(err, errlen, "out of memory");
        return OUTBOX_CEILING_FAIL;
    }
    w->job = *job;
    int rc = open_store(((bmg_t *)db)->uri, job->relation, 0, &w->store, &w->h, err, errlen);
    if (rc == 0) {
        /* A first command on the collection, so the clock does not time
         * the server's first look at it. */
        bson_t f = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&f, MF_ID, "");
        mongoc_cursor_t *c = mongoc_collection_find_with_opts(w->h->coll, &f, NULL, NULL);
        const bson_t *doc;
        while (mongoc_cursor_next(c, &doc))
            ;
        bson_error_t e;
        if (mongoc_cursor_error(c, &e))
            rc = mg_fail(&e, "reading the ceiling's collection", err, errlen);
        mongoc_cursor_destroy(c);
        bson_destroy(&f);
    }
    if (rc != 0) {
        bmg_worker_close(w);
        return rc;
    }
    *out = w;
    return 0;
}

/* One claim of job->batch rows and one settle of every row it returned as
 * published: the driver's vtable entries on the driver's handle. */
static int bmg_worker_step(void *worker, long *published, char *err, size_t errlen)
{
    cworker_t *w = worker;
    *published = 0;
    outbox_claim_req_t req = {.struct_size = sizeof req, .route = w->job.route,
                              .limit = (size_t)w->job.batch, .lease_us = w->job.lease_us};
    const outbox_row_t *rows = NULL;
    size_t n = 0;
    outbox_fence_t fence;
    memset(&fence, 0, sizeof fence);
    outbox_diag_t d = {0};
    int rc = outbox_mongo_claim(w->h, &req, &rows, &n, &fence, &d);
    if (rc == OUTBOX_OK && n > (size_t)w->job.batch)
        rc = outbox_mongo_fail(&d, OUTBOX_EPERMANENT, "claimed %zu rows, asked for %ld", n,
                               w->job.batch);
    size_t applied = 0;
    if (rc == OUTBOX_OK && n > 0) {
        for (size_t i = 0; i < n; i++)
            w->items[i] = (outbox_settle_item_t){.id = rows[i].id,
                                                 .kind = OUTBOX_SETTLE_PUBLISHED};
        rc = outbox_mongo_settle(w->h, &fence, w->items, n, &applied, &d);
    }
    if (rc != OUTBOX_OK) {
        snprintf(err, errlen, "%s", d.message[0] ? d.message : "the driver failed");
        return OUTBOX_CEILING_FAIL;
    }
    *published = (long)applied;
    return 0;
}

const outbox_store_ceiling_t outbox_ceiling_mongo = {
    .struct_size = sizeof(outbox_store_ceiling_t),
    .name = MONGO_NAME,
    .driver = outbox_driver_entry_mongo_ceiling,
    .in_process = 1,
    .has_reference = 0,
    .open = bmg_open,
    .close = bmg_close,
    .claim_relation = bmg_claim_relation,
    .drop_relation = bmg_drop_relation,
    .copy = bmg_copy,
    .count = bmg_count,
    .quiesce = bmg_quiesce,
    .worker_open = bmg_worker_open,
    .worker_step = bmg_worker_step,
    .worker_close = bmg_worker_close,
};
