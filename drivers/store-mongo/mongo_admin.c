/* MongoDB store driver, third floor: stats, replay and purge. */
#include <stdio.h>
#include <string.h>

#include "mongo_ops.h"

/* Documents of one purge command. */
#define MONGO_PURGE_BATCH 1000

static void route_filter(bson_t *f, const char *route)
{
    if (route)
        BSON_APPEND_UTF8(f, MF_ROUTE, route);
}

/* ---------------------------------------------------------------- stats */

static int oldest_pending(mongo_handle_t *h, const char *route, int64_t *out, outbox_diag_t *d);

static int count_status(const bson_t *doc, void *ctx, outbox_diag_t *d)
{
    (void)d;
    outbox_stats_t *s = ctx;
    const char *st = outbox_mongo_str(doc, "_id");
    bson_iter_t it;
    uint64_t n = 0;
    if (bson_iter_init_find(&it, doc, "n") && BSON_ITER_HOLDS_NUMBER(&it))
        n = (uint64_t)bson_iter_as_int64(&it);
    if (!st)
        return OUTBOX_OK;
    if (strcmp(st, "pending") == 0)
        s->pending = n;
    else if (strcmp(st, "processing") == 0)
        s->processing = n;
    else if (strcmp(st, "published") == 0)
        s->published = n;
    else if (strcmp(st, "dead") == 0)
        s->dead = n;
    return OUTBOX_OK;
}

int outbox_mongo_stats(void *handle, const char *route, outbox_stats_t *out, outbox_diag_t *d)
{
    mongo_handle_t *h = handle;
    if (!out)
        return outbox_mongo_fail(d, OUTBOX_EINVAL, "stats needs an output");
    memset(out, 0, sizeof *out);
    bson_t pipeline = BSON_INITIALIZER, stage, match, group, grp, sum;
    BSON_APPEND_DOCUMENT_BEGIN(&pipeline, "0", &stage);
    BSON_APPEND_DOCUMENT_BEGIN(&stage, "$match", &match);
    route_filter(&match, route);
    BSON_APPEND_DOCUMENT_BEGIN(&match, MF_STATUS, &sum);
    BSON_APPEND_BOOL(&sum, "$exists", true);
    bson_append_document_end(&match, &sum);
    bson_append_document_end(&stage, &match);
    bson_append_document_end(&pipeline, &stage);
    BSON_APPEND_DOCUMENT_BEGIN(&pipeline, "1", &group);
    BSON_APPEND_DOCUMENT_BEGIN(&group, "$group", &grp);
    BSON_APPEND_UTF8(&grp, "_id", "$status");
    BSON_APPEND_DOCUMENT_BEGIN(&grp, "n", &sum);
    BSON_APPEND_INT32(&sum, "$sum", 1);
    bson_append_document_end(&grp, &sum);
    bson_append_document_end(&group, &grp);
    bson_append_document_end(&pipeline, &group);
    mongoc_cursor_t *c = mongoc_collection_aggregate(h->coll, MONGOC_QUERY_NONE, &pipeline, NULL, NULL);
    bson_destroy(&pipeline);
    if (!c)
        return outbox_mongo_nomem(d);
    const bson_t *doc;
    while (mongoc_cursor_next(c, &doc))
        count_status(doc, out, d);
    bson_error_t e;
    const bson_t *reply = NULL;
    int rc = OUTBOX_OK;
    if (mongoc_cursor_error_document(c, &e, &reply))
        rc = outbox_mongo_error(d, &e, reply, "counting rows");
    mongoc_cursor_destroy(c);
    if (rc == OUTBOX_OK && out->pending)
        rc = oldest_pending(h, route, &out->oldest_pending_created_at, d);
    return rc;
}

static int take_created(const bson_t *doc, void *ctx, outbox_diag_t *d)
{
    (void)d;
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, "created_at") && BSON_ITER_HOLDS_DATE_TIME(&it))
        *(int64_t *)ctx = bson_iter_date_time(&it) * 1000;
    return OUTBOX_OK;
}

static int oldest_pending(mongo_handle_t *h, const char *route, int64_t *out, outbox_diag_t *d)
{
    bson_t f = BSON_INITIALIZER, opts = BSON_INITIALIZER, s, p;
    route_filter(&f, route);
    BSON_APPEND_UTF8(&f, MF_STATUS, "pending");
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &s);
    BSON_APPEND_INT32(&s, "created_at", 1);
    bson_append_document_end(&opts, &s);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &p);
    BSON_APPEND_INT32(&p, "created_at", 1);
    bson_append_document_end(&opts, &p);
    BSON_APPEND_INT64(&opts, "limit", 1);
    int rc = outbox_mongo_find(h->coll, &f, &opts, take_created, out, d, "finding the oldest pending row");
    bson_destroy(&f);
    bson_destroy(&opts);
    return rc;
}

/* --------------------------------------------------------------- replay */

int outbox_mongo_replay(void *handle, const char *route, const char *event_id, uint64_t *count,
                        outbox_diag_t *d)
{
    mongo_handle_t *h = handle;
    if (count)
        *count = 0;
    int rc = outbox_mongo_no_open_tx(h, "replay", d);
    if (rc != OUTBOX_OK)
        return rc;
    bson_t f = BSON_INITIALIZER, u = BSON_INITIALIZER, set, unset, reply;
    route_filter(&f, route);
    BSON_APPEND_UTF8(&f, MF_STATUS, "dead");
    if (event_id)
        BSON_APPEND_UTF8(&f, "event_id", event_id);
    /* last_error stays, so an operator still sees why the row died. */
    BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
    BSON_APPEND_UTF8(&set, MF_STATUS, "pending");
    BSON_APPEND_INT32(&set, "attempts", 0);
    BSON_APPEND_NULL(&set, "available_at");
    bson_append_document_end(&u, &set);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "$unset", &unset);
    BSON_APPEND_UTF8(&unset, "processing_at", "");
    BSON_APPEND_UTF8(&unset, MF_TOKEN, "");
    bson_append_document_end(&u, &unset);
    bson_error_t e;
    if (!mongoc_collection_update_many(h->coll, &f, &u, NULL, &reply, &e)) {
        rc = outbox_mongo_error(d, &e, &reply, "replaying dead rows");
    } else if (count) {
        bson_iter_t it;
        if (bson_iter_init_find(&it, &reply, "modifiedCount") && BSON_ITER_HOLDS_NUMBER(&it))
            *count = (uint64_t)bson_iter_as_int64(&it);
    }
    bson_destroy(&reply);
    bson_destroy(&f);
    bson_destroy(&u);
    return rc;
}

/* ---------------------------------------------------------------- purge */

typedef struct idlist {
    char **v;
    size_t n;
    int failed;
} idlist_t;

static int add_id(const bson_t *doc, void *ctx, outbox_diag_t *d)
{
    idlist_t *l = ctx;
    const char *id = outbox_mongo_str(doc, MF_ID);
    if (!id || l->n >= MONGO_PURGE_BATCH)
        return OUTBOX_OK;
    l->v[l->n] = outbox_kit_strdup(outbox_mongo_host, id);
    if (!l->v[l->n])
        return outbox_mongo_nomem(d);
    l->n++;
    return OUTBOX_OK;
}

static void published_before(bson_t *f, const char *route, int64_t before)
{
    bson_t lt;
    route_filter(f, route);
    BSON_APPEND_UTF8(f, MF_STATUS, "published");
    BSON_APPEND_DOCUMENT_BEGIN(f, "published_at", &lt);
    BSON_APPEND_DATE_TIME(&lt, "$lt", outbox_mongo_ms(before));
    bson_append_document_end(f, &lt);
}

/* One batch: up to MONGO_PURGE_BATCH ids, then one deleteMany of them
 * (still published and old: the condition is checked again). */
static int purge_batch(mongo_handle_t *h, const char *route, int64_t before, uint64_t *deleted,
                       size_t *found, outbox_diag_t *d)
{
    idlist_t l = {0};
    l.v = outbox_mongo_host->alloc(MONGO_PURGE_BATCH * sizeof *l.v);
    if (!l.v)
        return outbox_mongo_nomem(d);
    bson_t f = BSON_INITIALIZER, opts = BSON_INITIALIZER, p;
    published_before(&f, route, before);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &p);
    BSON_APPEND_INT32(&p, MF_ID, 1);
    bson_append_document_end(&opts, &p);
    BSON_APPEND_INT64(&opts, "limit", MONGO_PURGE_BATCH);
    int rc = outbox_mongo_find(h->coll, &f, &opts, add_id, &l, d, "purging");
    bson_destroy(&opts);
    *found = l.n;
    if (rc == OUTBOX_OK && l.n > 0) {
        bson_t in, reply;
        BSON_APPEND_DOCUMENT_BEGIN(&f, MF_ID, &in);
        int ok = outbox_mongo_append_ids(&in, "$in", (const char *const *)l.v, l.n);
        bson_append_document_end(&f, &in);
        bson_error_t e;
        if (!ok) {
            rc = outbox_mongo_nomem(d);
        } else {
            if (!mongoc_collection_delete_many(h->coll, &f, NULL, &reply, &e)) {
                rc = outbox_mongo_error(d, &e, &reply, "purging");
            } else {
                bson_iter_t it;
                if (bson_iter_init_find(&it, &reply, "deletedCount") && BSON_ITER_HOLDS_NUMBER(&it))
                    *deleted += (uint64_t)bson_iter_as_int64(&it);
            }
            bson_destroy(&reply);
        }
    }
    bson_destroy(&f);
    for (size_t i = 0; i < l.n; i++)
        outbox_mongo_host->free(l.v[i]);
    outbox_mongo_host->free(l.v);
    return rc;
}

int outbox_mongo_purge(void *handle, const char *route, int64_t before, uint64_t *count,
                       outbox_diag_t *d)
{
    mongo_handle_t *h = handle;
    if (count)
        *count = 0;
    int rc = outbox_mongo_no_open_tx(h, "purge", d);
    uint64_t deleted = 0;
    size_t found = MONGO_PURGE_BATCH;
    while (rc == OUTBOX_OK && found == MONGO_PURGE_BATCH)
        rc = purge_batch(h, route, before, &deleted, &found, d);
    if (count)
        *count = deleted;
    return rc;
}
