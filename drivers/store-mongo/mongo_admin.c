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

/* --------------------------------------------------------------- routes */

typedef struct route_counts {
    char *route;
    outbox_stats_t st;
} route_counts_t;

typedef struct route_acc {
    route_counts_t *v;
    size_t n, cap;
    int nomem;
} route_acc_t;

static route_counts_t *route_slot(route_acc_t *a, const char *route)
{
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->v[i].route, route) == 0)
            return &a->v[i];
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        route_counts_t *v = outbox_mongo_host->realloc(a->v, cap * sizeof *v);
        if (!v)
            return NULL;
        a->v = v;
        a->cap = cap;
    }
    size_t len = strlen(route);
    char *copy = outbox_mongo_host->alloc(len + 1);
    if (!copy)
        return NULL;
    memcpy(copy, route, len + 1);
    a->v[a->n] = (route_counts_t){.route = copy};
    return &a->v[a->n++];
}

static void route_acc_free(route_acc_t *a)
{
    for (size_t i = 0; i < a->n; i++)
        outbox_mongo_host->free(a->v[i].route);
    outbox_mongo_host->free(a->v);
}

/* One group of {_id: {r: route, s: status}, n}. */
static int count_route_status(const bson_t *doc, route_acc_t *a)
{
    bson_iter_t it, key;
    const char *route = NULL, *st = NULL;
    if (bson_iter_init_find(&it, doc, "_id") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &key)) {
        while (bson_iter_next(&key)) {
            if (!BSON_ITER_HOLDS_UTF8(&key))
                continue;
            if (strcmp(bson_iter_key(&key), "r") == 0)
                route = bson_iter_utf8(&key, NULL);
            else if (strcmp(bson_iter_key(&key), "s") == 0)
                st = bson_iter_utf8(&key, NULL);
        }
    }
    if (!route || !st)
        return OUTBOX_OK;
    uint64_t n = 0;
    if (bson_iter_init_find(&it, doc, "n") && BSON_ITER_HOLDS_NUMBER(&it))
        n = (uint64_t)bson_iter_as_int64(&it);
    route_counts_t *slot = route_slot(a, route);
    if (!slot) {
        a->nomem = 1;
        return OUTBOX_ENOMEM;
    }
    if (strcmp(st, "pending") == 0)
        slot->st.pending = n;
    else if (strcmp(st, "processing") == 0)
        slot->st.processing = n;
    else if (strcmp(st, "published") == 0)
        slot->st.published = n;
    else if (strcmp(st, "dead") == 0)
        slot->st.dead = n;
    return OUTBOX_OK;
}

int outbox_mongo_routes(void *handle, outbox_route_fn fn, void *ctx, outbox_diag_t *d)
{
    mongo_handle_t *h = handle;
    /* The stats pipeline grouped by route as well; then, as stats does,
     * one indexed find for the oldest pending row of each route that has
     * pending rows. */
    bson_t pipeline = BSON_INITIALIZER, stage, match, group, grp, id, sum;
    BSON_APPEND_DOCUMENT_BEGIN(&pipeline, "0", &stage);
    BSON_APPEND_DOCUMENT_BEGIN(&stage, "$match", &match);
    BSON_APPEND_DOCUMENT_BEGIN(&match, MF_STATUS, &sum);
    BSON_APPEND_BOOL(&sum, "$exists", true);
    bson_append_document_end(&match, &sum);
    bson_append_document_end(&stage, &match);
    bson_append_document_end(&pipeline, &stage);
    BSON_APPEND_DOCUMENT_BEGIN(&pipeline, "1", &group);
    BSON_APPEND_DOCUMENT_BEGIN(&group, "$group", &grp);
    BSON_APPEND_DOCUMENT_BEGIN(&grp, "_id", &id);
    BSON_APPEND_UTF8(&id, "r", "$" MF_ROUTE);
    BSON_APPEND_UTF8(&id, "s", "$" MF_STATUS);
    bson_append_document_end(&grp, &id);
    BSON_APPEND_DOCUMENT_BEGIN(&grp, "n", &sum);
    BSON_APPEND_INT32(&sum, "$sum", 1);
    bson_append_document_end(&grp, &sum);
    bson_append_document_end(&group, &grp);
    bson_append_document_end(&pipeline, &group);
    mongoc_cursor_t *c = mongoc_collection_aggregate(h->coll, MONGOC_QUERY_NONE, &pipeline, NULL, NULL);
    bson_destroy(&pipeline);
    if (!c)
        return outbox_mongo_nomem(d);
    route_acc_t a = {0};
    const bson_t *doc;
    while (!a.nomem && mongoc_cursor_next(c, &doc))
        count_route_status(doc, &a);
    bson_error_t e;
    const bson_t *reply = NULL;
    int rc = OUTBOX_OK;
    if (a.nomem)
        rc = outbox_mongo_nomem(d);
    else if (mongoc_cursor_error_document(c, &e, &reply))
        rc = outbox_mongo_error(d, &e, reply, "counting rows by route");
    mongoc_cursor_destroy(c);
    for (size_t i = 0; i < a.n && rc == OUTBOX_OK; i++) {
        if (a.v[i].st.pending)
            rc = oldest_pending(h, a.v[i].route, &a.v[i].st.oldest_pending_created_at, d);
        if (rc == OUTBOX_OK)
            rc = fn(ctx, a.v[i].route, &a.v[i].st);
    }
    route_acc_free(&a);
    return rc;
}

/* ------------------------------------------------------------ dead list */

typedef struct dead_ctx {
    const char *route;
    outbox_row_fn fn;
    void *ctx;
} dead_ctx_t;

static const char *opt_str(const bson_t *doc, const char *key)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_UTF8(&it))
        return bson_iter_utf8(&it, NULL);
    return NULL;
}

static int dead_row(const bson_t *doc, void *ctx, outbox_diag_t *d)
{
    (void)d;
    dead_ctx_t *c = ctx;
    outbox_row_t row = {
        .id = opt_str(doc, MF_ID),
        .route = c->route,
        .event_id = opt_str(doc, "event_id"),
        .event_type = opt_str(doc, "event_type"),
        .ordering_key = opt_str(doc, "ordering_key"),
        .last_error = opt_str(doc, "last_error"),
    };
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, "attempts") && BSON_ITER_HOLDS_NUMBER(&it))
        row.attempts = (int32_t)bson_iter_as_int64(&it);
    if (bson_iter_init_find(&it, doc, "created_at") && BSON_ITER_HOLDS_DATE_TIME(&it))
        row.created_at = bson_iter_date_time(&it) * 1000;
    if (!row.id)
        return OUTBOX_OK;
    return c->fn(c->ctx, &row);
}

/* created_at of the row to list after, as the store holds it (a date, in
 * milliseconds). */
static int after_stamp(const bson_t *doc, void *ctx, outbox_diag_t *d)
{
    (void)d;
    bson_iter_t it;
    int64_t *out = ctx;
    if (bson_iter_init_find(&it, doc, "created_at") && BSON_ITER_HOLDS_DATE_TIME(&it))
        *out = bson_iter_date_time(&it);
    return OUTBOX_OK;
}

int outbox_mongo_dead_list(void *handle, const char *route, const char *after_id, size_t limit,
                           outbox_row_fn fn, void *ctx, outbox_diag_t *d)
{
    mongo_handle_t *h = handle;
    int rc;
    int64_t after_ms = INT64_MIN;
    if (after_id) {
        bson_t f = BSON_INITIALIZER, opts = BSON_INITIALIZER, p;
        BSON_APPEND_UTF8(&f, MF_ID, after_id);
        BSON_APPEND_UTF8(&f, MF_ROUTE, route);
        BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &p);
        BSON_APPEND_INT32(&p, "created_at", 1);
        bson_append_document_end(&opts, &p);
        BSON_APPEND_INT64(&opts, "limit", 1);
        rc = outbox_mongo_find(h->coll, &f, &opts, after_stamp, &after_ms, d,
                               "finding the row to list after");
        bson_destroy(&f);
        bson_destroy(&opts);
        if (rc != OUTBOX_OK)
            return rc;
        if (after_ms == INT64_MIN)
            return outbox_mongo_fail(d, OUTBOX_ENOTFOUND, "no row with id %s on route %s",
                                     after_id, route);
    }
    /* outbox_claim_idx leads with (route, status): one route's dead rows,
     * sorted per page. */
    bson_t f = BSON_INITIALIZER, opts = BSON_INITIALIZER, s, or, alt, cond;
    BSON_APPEND_UTF8(&f, MF_ROUTE, route);
    BSON_APPEND_UTF8(&f, MF_STATUS, "dead");
    if (after_id) {
        BSON_APPEND_ARRAY_BEGIN(&f, "$or", &or);
        BSON_APPEND_DOCUMENT_BEGIN(&or, "0", &alt);
        BSON_APPEND_DOCUMENT_BEGIN(&alt, "created_at", &cond);
        BSON_APPEND_DATE_TIME(&cond, "$gt", after_ms);
        bson_append_document_end(&alt, &cond);
        bson_append_document_end(&or, &alt);
        BSON_APPEND_DOCUMENT_BEGIN(&or, "1", &alt);
        BSON_APPEND_DATE_TIME(&alt, "created_at", after_ms);
        BSON_APPEND_DOCUMENT_BEGIN(&alt, MF_ID, &cond);
        BSON_APPEND_UTF8(&cond, "$gt", after_id);
        bson_append_document_end(&alt, &cond);
        bson_append_document_end(&or, &alt);
        bson_append_array_end(&f, &or);
    }
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &s);
    BSON_APPEND_INT32(&s, "created_at", 1);
    BSON_APPEND_INT32(&s, MF_ID, 1);
    bson_append_document_end(&opts, &s);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &s);
    BSON_APPEND_INT32(&s, "event_id", 1);
    BSON_APPEND_INT32(&s, "event_type", 1);
    BSON_APPEND_INT32(&s, "ordering_key", 1);
    BSON_APPEND_INT32(&s, "attempts", 1);
    BSON_APPEND_INT32(&s, "created_at", 1);
    BSON_APPEND_INT32(&s, "last_error", 1);
    bson_append_document_end(&opts, &s);
    BSON_APPEND_INT64(&opts, "limit", (int64_t)limit);
    dead_ctx_t c = {.route = route, .fn = fn, .ctx = ctx};
    rc = outbox_mongo_find(h->coll, &f, &opts, dead_row, &c, d, "listing dead rows");
    bson_destroy(&f);
    bson_destroy(&opts);
    return rc;
}
