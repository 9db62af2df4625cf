/* MongoDB store driver, third floor: the inbox, a consumer's record of the
 * events it handled.
 *
 * Documents {_id: {c: consumer, e: event_id}, consumer, event_id,
 * received_at: date}. The pair is the _id, so the unique index every
 * collection has keeps it unique, on FerretDB too, where an insert on a
 * unique _id is the one write that decides between two writers (its
 * updates do not: mongo_conn.h). The unique index on (consumer, event_id)
 * that schema apply adds says the same again.
 *
 * Accept on its own is ONE insertOne: it goes in (new) or fails on the
 * duplicate key, 11000 (recorded before). Inside a transaction, the
 * application's session or the handle's own (only a MongoDB server has
 * them), a failed write would abort the whole transaction, so there it is
 * ONE updateOne on the _id with $setOnInsert and upsert instead, new when
 * the reply counts an upsert. Two transactions racing on one pair collide
 * on the document: the server fails the later one with a write conflict,
 * labelled TransientTransactionError (OUTBOX_ETRANSIENT), and the
 * consumer's retry finds the pair. received_at is the host's clock, like
 * every stamp the driver writes, at a BSON date's millisecond precision.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mongo_ops.h"

static int inbox_missing(const mongo_handle_t *h, outbox_diag_t *d)
{
    return outbox_mongo_fail(d, OUTBOX_EMISSING,
                             "inbox collection \"%s\" not found (create it with schema apply)",
                             h->shown_inbox);
}

/* --------------------------------------------------------------- accept */

static void append_pair_id(bson_t *doc, const char *consumer, const char *event_id)
{
    bson_t id;
    BSON_APPEND_DOCUMENT_BEGIN(doc, "_id", &id);
    BSON_APPEND_UTF8(&id, "c", consumer);
    BSON_APPEND_UTF8(&id, "e", event_id);
    bson_append_document_end(doc, &id);
}

static void append_record(bson_t *doc, const char *consumer, const char *event_id, int64_t now_ms)
{
    BSON_APPEND_UTF8(doc, "consumer", consumer);
    BSON_APPEND_UTF8(doc, "event_id", event_id);
    BSON_APPEND_DATE_TIME(doc, "received_at", now_ms);
}

static int insert_pair(mongoc_collection_t *coll, const char *consumer, const char *event_id,
                       int64_t now_ms, int *is_new, outbox_diag_t *d)
{
    bson_t doc = BSON_INITIALIZER, reply;
    append_pair_id(&doc, consumer, event_id);
    append_record(&doc, consumer, event_id, now_ms);
    bson_error_t e;
    int rc = OUTBOX_OK;
    if (mongoc_collection_insert_one(coll, &doc, NULL, &reply, &e))
        *is_new = 1;
    else if (e.domain == MONGOC_ERROR_SERVER && e.code == 11000)
        *is_new = 0; /* on the _id or the unique index: both are the pair */
    else
        rc = outbox_mongo_error(d, &e, &reply, "inbox accept");
    bson_destroy(&reply);
    bson_destroy(&doc);
    return rc;
}

static int upsert_pair(mongoc_collection_t *coll, mongoc_client_session_t *session,
                       const char *consumer, const char *event_id, int64_t now_ms, int *is_new,
                       outbox_diag_t *d)
{
    bson_t f = BSON_INITIALIZER, u = BSON_INITIALIZER, set, opts = BSON_INITIALIZER, reply;
    append_pair_id(&f, consumer, event_id);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "$setOnInsert", &set);
    append_record(&set, consumer, event_id, now_ms);
    bson_append_document_end(&u, &set);
    BSON_APPEND_BOOL(&opts, "upsert", true);
    int rc = outbox_mongo_opts_session(session, &opts, d);
    if (rc == OUTBOX_OK) {
        bson_error_t e;
        if (mongoc_collection_update_one(coll, &f, &u, &opts, &reply, &e)) {
            bson_iter_t it;
            *is_new = (bson_iter_init_find(&it, &reply, "upsertedCount") &&
                       BSON_ITER_HOLDS_NUMBER(&it) && bson_iter_as_int64(&it) > 0) ||
                      bson_iter_init_find(&it, &reply, "upsertedId");
        } else {
            rc = outbox_mongo_error(d, &e, &reply, "inbox accept");
        }
        bson_destroy(&reply);
    }
    bson_destroy(&f);
    bson_destroy(&u);
    bson_destroy(&opts);
    return rc;
}

int outbox_mongo_inbox_accept(void *handle, const outbox_stage_ctx_t *ctx, const char *consumer,
                              const char *event_id, int *is_new, outbox_diag_t *d)
{
    mongo_handle_t *h = handle;
    if (is_new)
        *is_new = 0;
    if (!consumer || !event_id || !is_new)
        return outbox_mongo_fail(d, OUTBOX_EINVAL,
                                 "inbox accept needs a consumer, an event id and an output");
    if (!h->has_inbox)
        return inbox_missing(h, d);
    mongoc_client_session_t *session = NULL;
    mongoc_client_t *client = NULL;
    int rc = outbox_mongo_write_target(h, ctx, &session, &client, "inbox accept", d);
    mongoc_collection_t *coll = NULL;
    if (rc == OUTBOX_OK) {
        /* The application's session belongs to a client of its own. */
        coll = client == h->client ? h->inbox_coll : outbox_mongo_coll(h, client, &h->inbox);
        if (!coll)
            rc = outbox_mongo_nomem(d);
    }
    int64_t now_ms = outbox_mongo_ms(outbox_mongo_host->now_us());
    if (rc == OUTBOX_OK && session)
        rc = upsert_pair(coll, session, consumer, event_id, now_ms, is_new, d);
    else if (rc == OUTBOX_OK)
        rc = insert_pair(coll, consumer, event_id, now_ms, is_new, d);
    if (coll && coll != h->inbox_coll)
        mongoc_collection_destroy(coll);
    if (rc != OUTBOX_OK)
        *is_new = 0;
    return ctx && ctx->in_own_tx ? outbox_mongo_tx_note(h, rc) : rc;
}

/* ---------------------------------------------------------------- purge */

int outbox_mongo_inbox_purge(void *handle, const char *consumer, int64_t before_us,
                             uint64_t *count, outbox_diag_t *d)
{
    mongo_handle_t *h = handle;
    if (count)
        *count = 0;
    if (!h->has_inbox)
        return inbox_missing(h, d);
    int rc = outbox_mongo_no_open_tx(h, "inbox purge", d);
    if (rc != OUTBOX_OK)
        return rc;
    /* Floored to the millisecond, as received_at was: a record of the same
     * millisecond as the bound stays. The floor of the smallest instants
     * would not fit in an int64 of microseconds on the way. */
    int64_t before_ms = before_us < INT64_MIN + 1000 ? INT64_MIN / 1000 - 1
                                                     : outbox_mongo_ms(before_us);
    bson_t f = BSON_INITIALIZER, lt, reply;
    if (consumer)
        BSON_APPEND_UTF8(&f, "consumer", consumer);
    BSON_APPEND_DOCUMENT_BEGIN(&f, "received_at", &lt);
    BSON_APPEND_DATE_TIME(&lt, "$lt", before_ms);
    bson_append_document_end(&f, &lt);
    bson_error_t e;
    if (!mongoc_collection_delete_many(h->inbox_coll, &f, NULL, &reply, &e)) {
        rc = outbox_mongo_error(d, &e, &reply, "purging inbox records");
    } else if (count) {
        bson_iter_t it;
        if (bson_iter_init_find(&it, &reply, "deletedCount") && BSON_ITER_HOLDS_NUMBER(&it))
            *count = (uint64_t)bson_iter_as_int64(&it);
    }
    bson_destroy(&reply);
    bson_destroy(&f);
    return rc;
}

/* ---------------------------------------------------------------- stats */

typedef struct consumer_counts {
    char *consumer;
    uint64_t n;
    int64_t lo_ms, hi_ms;
    int dated; /* lo_ms and hi_ms hold a received_at */
} consumer_counts_t;

typedef struct counts {
    consumer_counts_t *v;
    size_t n, cap;
} counts_t;

static void counts_free(counts_t *a)
{
    for (size_t i = 0; i < a->n; i++)
        outbox_mongo_host->free(a->v[i].consumer);
    outbox_mongo_host->free(a->v);
}

/* The slot of consumer, made when it is new; NULL when out of memory. The
 * documents come grouped, so the last slot is nearly always the one. */
static consumer_counts_t *counts_slot(counts_t *a, const char *consumer)
{
    for (size_t i = a->n; i > 0; i--)
        if (strcmp(a->v[i - 1].consumer, consumer) == 0)
            return &a->v[i - 1];
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        consumer_counts_t *v = outbox_mongo_host->realloc(a->v, cap * sizeof *v);
        if (!v)
            return NULL;
        a->v = v;
        a->cap = cap;
    }
    char *copy = outbox_kit_strdup(outbox_mongo_host, consumer);
    if (!copy)
        return NULL;
    a->v[a->n] = (consumer_counts_t){.consumer = copy};
    return &a->v[a->n++];
}

static void counts_date(consumer_counts_t *c, const bson_t *doc, const char *key)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, doc, key) || !BSON_ITER_HOLDS_DATE_TIME(&it))
        return;
    int64_t ms = bson_iter_date_time(&it);
    if (!c->dated || ms < c->lo_ms)
        c->lo_ms = ms;
    if (!c->dated || ms > c->hi_ms)
        c->hi_ms = ms;
    c->dated = 1;
}

/* One group of the aggregation: {_id: consumer, n, lo, hi}. */
static int take_group(const bson_t *doc, void *ctx, outbox_diag_t *d)
{
    const char *consumer = outbox_mongo_str(doc, "_id");
    if (!consumer)
        return OUTBOX_OK;
    consumer_counts_t *c = counts_slot(ctx, consumer);
    if (!c)
        return outbox_mongo_nomem(d);
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, "n") && BSON_ITER_HOLDS_NUMBER(&it))
        c->n += (uint64_t)bson_iter_as_int64(&it);
    counts_date(c, doc, "lo");
    counts_date(c, doc, "hi");
    return OUTBOX_OK;
}

/* One record of the find: {consumer, received_at}. */
static int take_record(const bson_t *doc, void *ctx, outbox_diag_t *d)
{
    const char *consumer = outbox_mongo_str(doc, "consumer");
    if (!consumer)
        return OUTBOX_OK;
    consumer_counts_t *c = counts_slot(ctx, consumer);
    if (!c)
        return outbox_mongo_nomem(d);
    c->n++;
    counts_date(c, doc, "received_at");
    return OUTBOX_OK;
}

static void append_accumulator(bson_t *grp, const char *name, const char *op, const char *field)
{
    bson_t acc;
    BSON_APPEND_DOCUMENT_BEGIN(grp, name, &acc);
    BSON_APPEND_UTF8(&acc, op, field);
    bson_append_document_end(grp, &acc);
}

/* The server groups: $group by consumer with $sum, $min and $max.
 * *refused is set when the server does not know an accumulator. */
static int stats_grouped(mongo_handle_t *h, const char *consumer, counts_t *a, int *refused,
                         outbox_diag_t *d)
{
    *refused = 0;
    bson_t pipeline = BSON_INITIALIZER, stage, match, grp, sum;
    BSON_APPEND_DOCUMENT_BEGIN(&pipeline, "0", &stage);
    BSON_APPEND_DOCUMENT_BEGIN(&stage, "$match", &match);
    if (consumer)
        BSON_APPEND_UTF8(&match, "consumer", consumer);
    bson_append_document_end(&stage, &match);
    bson_append_document_end(&pipeline, &stage);
    BSON_APPEND_DOCUMENT_BEGIN(&pipeline, "1", &stage);
    BSON_APPEND_DOCUMENT_BEGIN(&stage, "$group", &grp);
    BSON_APPEND_UTF8(&grp, "_id", "$consumer");
    BSON_APPEND_DOCUMENT_BEGIN(&grp, "n", &sum);
    BSON_APPEND_INT32(&sum, "$sum", 1);
    bson_append_document_end(&grp, &sum);
    append_accumulator(&grp, "lo", "$min", "$received_at");
    append_accumulator(&grp, "hi", "$max", "$received_at");
    bson_append_document_end(&stage, &grp);
    bson_append_document_end(&pipeline, &stage);
    mongoc_cursor_t *c =
        mongoc_collection_aggregate(h->inbox_coll, MONGOC_QUERY_NONE, &pipeline, NULL, NULL);
    bson_destroy(&pipeline);
    if (!c)
        return outbox_mongo_nomem(d);
    const bson_t *doc;
    int rc = OUTBOX_OK;
    while (rc == OUTBOX_OK && mongoc_cursor_next(c, &doc))
        rc = take_group(doc, a, d);
    bson_error_t e;
    const bson_t *reply = NULL;
    if (rc == OUTBOX_OK && mongoc_cursor_error_document(c, &e, &reply)) {
        /* 238 NotImplemented (FerretDB 1.24 has no $min or $max in
         * $group), 15952 unknown group operator. */
        *refused = e.domain == MONGOC_ERROR_SERVER && (e.code == 238 || e.code == 15952);
        rc = outbox_mongo_error(d, &e, reply, "counting inbox records");
    }
    mongoc_cursor_destroy(c);
    return rc;
}

/* The driver groups: every record's consumer and received_at, sorted by
 * consumer so that each consumer's records come together. */
static int stats_counted(mongo_handle_t *h, const char *consumer, counts_t *a, outbox_diag_t *d)
{
    bson_t f = BSON_INITIALIZER, opts = BSON_INITIALIZER, sub;
    if (consumer)
        BSON_APPEND_UTF8(&f, "consumer", consumer);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &sub);
    BSON_APPEND_INT32(&sub, "_id", 0);
    BSON_APPEND_INT32(&sub, "consumer", 1);
    BSON_APPEND_INT32(&sub, "received_at", 1);
    bson_append_document_end(&opts, &sub);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sub);
    BSON_APPEND_INT32(&sub, "consumer", 1);
    bson_append_document_end(&opts, &sub);
    int rc = outbox_mongo_find(h->inbox_coll, &f, &opts, take_record, a, d,
                               "counting inbox records");
    bson_destroy(&f);
    bson_destroy(&opts);
    return rc;
}

static int by_consumer(const void *x, const void *y)
{
    return strcmp(((const consumer_counts_t *)x)->consumer, ((const consumer_counts_t *)y)->consumer);
}

int outbox_mongo_inbox_stats(void *handle, const char *consumer, outbox_inbox_fn fn, void *ctx,
                             outbox_diag_t *d)
{
    mongo_handle_t *h = handle;
    if (!fn)
        return outbox_mongo_fail(d, OUTBOX_EINVAL, "inbox stats needs a callback");
    if (!h->has_inbox)
        return inbox_missing(h, d);
    counts_t a = {0};
    int rc = OUTBOX_OK;
    if (!h->inbox_no_group) {
        int refused = 0;
        rc = stats_grouped(h, consumer, &a, &refused, d);
        if (refused) {
            outbox_mongo_host->log(OUTBOX_LOG_DEBUG, MONGO_NAME,
                                   "inbox stats: the server cannot group with $min and $max; "
                                   "counting the records here instead");
            h->inbox_no_group = 1;
            memset(d, 0, sizeof *d);
            counts_free(&a);
            a = (counts_t){0};
        }
    }
    if (h->inbox_no_group)
        rc = stats_counted(h, consumer, &a, d);
    /* Byte order, whatever collation the collection sorts by. */
    if (rc == OUTBOX_OK && a.n > 1)
        qsort(a.v, a.n, sizeof *a.v, by_consumer);
    for (size_t i = 0; rc == OUTBOX_OK && i < a.n; i++) {
        const consumer_counts_t *c = &a.v[i];
        rc = fn(ctx, c->consumer, c->n, c->dated ? c->lo_ms * 1000 : 0,
                c->dated ? c->hi_ms * 1000 : 0);
    }
    counts_free(&a);
    return rc;
}
