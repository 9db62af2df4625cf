/* MongoDB store driver, third floor: the claim.
 *
 * Without multi-document transactions (FerretDB has none) a claim is a
 * short series of commands that each stay correct under any number of
 * concurrent claimers, and whose guarded update decides who gets a row:
 *
 *   1. held keys: the ordering keys that have a row that is unfinished and
 *      not claimable (in flight under a live lease, or waiting for its
 *      retry). Such rows are few; a keyed row of a held key is not a
 *      candidate.
 *   2. candidates: the ids of the first `limit` claimable rows of the route
 *      in claim order (find with filter, sort, limit, projection _id).
 *   3. the claim itself: one updateMany on `_id $in` the candidates, guarded
 *      by the same status and ripeness condition, that sets processing, a
 *      fresh claim_token, processing_at and $inc attempts. A row another
 *      claimer took since step 2 fails the guard, so two claimers never
 *      share a row: each gets exactly the rows its own update changed.
 *   4. read back: the documents holding this claim's token.
 *   5. the per-key check, for the keyed rows read back: the key's
 *      unfinished rows that are not this claim's. A row of ours that comes
 *      after one of them in claim order was taken past an earlier row (one
 *      that another claimer took, or that turned unclaimable, between step 1
 *      and step 3); it and every later row of its key are released again in
 *      one fenced update (pending, attempts given back), and the claim
 *      returns the rest.
 *
 * Step 5 runs after our update, so every row that another claimer could
 * take ahead of ours is either visible to it as unfinished (and ours goes
 * back), or already published or dead, which the per-key rule allows. A
 * key's rows therefore leave only as a run that starts at its first
 * unfinished row, the same promise the SQL stores keep.
 *
 * Dates are BSON dates (milliseconds): ripeness and lease expiry compare at
 * that precision, and a lease expires once its millisecond is past. The
 * fence is the token, never a clock reading, so a reclaim always writes a
 * new fence.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mongo_ops.h"

/* The string fields of a row, in the order offs[] keeps them. */
enum {
    S_ID,
    S_ROUTE,
    S_EVENT_ID,
    S_EVENT_TYPE,
    S_TENANT,
    S_EXECUTION,
    S_CORRELATION,
    S_CAUSATION,
    S_PAYLOAD,
    S_KEY,
    S_TRACEPARENT,
    S_LAST_ERROR,
    S_COUNT
};

static const char *const string_fields[S_COUNT] = {
    MF_ID, MF_ROUTE, "event_id", "event_type", "tenant_id", "execution_id", "correlation_id",
    "causation_id", "payload", "ordering_key", "traceparent", "last_error",
};

#define NO_OFF SIZE_MAX

/* A claim holding the route's lock longer than this is taken to have died
 * (commands time out well before: the socket timeout is per command, and
 * FerretDB answers a claim's in milliseconds). */
#define MONGO_CLAIM_LOCK_TTL_MS 15000
/* How long a claim waits for its turn before it reports a busy lock. */
#define MONGO_CLAIM_LOCK_WAIT_MS 20000

typedef struct claimed {
    mongo_handle_t *h;
    size_t (*offs)[S_COUNT]; /* per row, where each string starts in the arena */
    size_t cap;
    int failed;
    int spent; /* a walk stopped on its time budget */
} claimed_t;

/* ------------------------------------------------------------ filters */

/* The claimable rows of the route: pending and ripe, or processing with an
 * expired lease. */
static void append_claimable(bson_t *f, int64_t now_ms, int64_t cut_ms)
{
    bson_t or, a, b, c, cond;
    BSON_APPEND_ARRAY_BEGIN(f, "$or", &or);
    BSON_APPEND_DOCUMENT_BEGIN(&or, "0", &a);
    BSON_APPEND_UTF8(&a, MF_STATUS, "pending");
    BSON_APPEND_NULL(&a, "available_at");
    bson_append_document_end(&or, &a);
    BSON_APPEND_DOCUMENT_BEGIN(&or, "1", &b);
    BSON_APPEND_UTF8(&b, MF_STATUS, "pending");
    BSON_APPEND_DOCUMENT_BEGIN(&b, "available_at", &cond);
    BSON_APPEND_DATE_TIME(&cond, "$lte", now_ms);
    bson_append_document_end(&b, &cond);
    bson_append_document_end(&or, &b);
    BSON_APPEND_DOCUMENT_BEGIN(&or, "2", &c);
    BSON_APPEND_UTF8(&c, MF_STATUS, "processing");
    BSON_APPEND_DOCUMENT_BEGIN(&c, "processing_at", &cond);
    BSON_APPEND_DATE_TIME(&cond, "$lte", cut_ms);
    bson_append_document_end(&c, &cond);
    bson_append_document_end(&or, &c);
    bson_append_array_end(f, &or);
}

static void append_sort(bson_t *opts, int hlc)
{
    bson_t s;
    BSON_APPEND_DOCUMENT_BEGIN(opts, "sort", &s);
    if (hlc)
        BSON_APPEND_INT32(&s, "hlc", 1);
    BSON_APPEND_INT32(&s, "created_at", 1);
    BSON_APPEND_INT32(&s, MF_ID, 1);
    bson_append_document_end(opts, &s);
}

static void append_projection(bson_t *opts, const char *const *fields, size_t n)
{
    bson_t p;
    BSON_APPEND_DOCUMENT_BEGIN(opts, "projection", &p);
    for (size_t i = 0; i < n; i++)
        BSON_APPEND_INT32(&p, fields[i], 1);
    bson_append_document_end(opts, &p);
}

/* ----------------------------------------------------- a list of strings */

typedef struct strs {
    char **v;
    size_t n, cap;
    int failed;
} strs_t;

static void strs_add(strs_t *s, const char *v)
{
    if (s->failed || !v)
        return;
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], v) == 0)
            return;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        char **p = outbox_mongo_host->realloc(s->v, cap * sizeof *p);
        if (!p) {
            s->failed = 1;
            return;
        }
        s->v = p;
        s->cap = cap;
    }
    s->v[s->n] = outbox_kit_strdup(outbox_mongo_host, v);
    if (!s->v[s->n])
        s->failed = 1;
    else
        s->n++;
}

static void strs_free(strs_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        outbox_mongo_host->free(s->v[i]);
    outbox_mongo_host->free(s->v);
    memset(s, 0, sizeof *s);
}

static int add_key(const bson_t *doc, void *ctx, outbox_diag_t *d)
{
    (void)d;
    strs_add(ctx, outbox_mongo_str(doc, "ordering_key"));
    return OUTBOX_OK;
}

static int add_id(const bson_t *doc, void *ctx, outbox_diag_t *d)
{
    strs_t *s = ctx;
    const char *id = outbox_mongo_str(doc, MF_ID);
    if (!id)
        return outbox_mongo_fail(d, OUTBOX_EPERMANENT,
                                 "a document of the outbox has an _id that is not a string");
    /* Ids are distinct: skip the duplicate search of strs_add. */
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        char **p = outbox_mongo_host->realloc(s->v, cap * sizeof *p);
        if (!p)
            return outbox_mongo_nomem(d);
        s->v = p;
        s->cap = cap;
    }
    s->v[s->n] = outbox_kit_strdup(outbox_mongo_host, id);
    if (!s->v[s->n])
        return outbox_mongo_nomem(d);
    s->n++;
    return OUTBOX_OK;
}

/* ------------------------------------------------------ steps 1 and 2 */

static int held_keys(mongo_handle_t *h, const char *route, int64_t now_ms, int64_t cut_ms,
                     strs_t *held, outbox_diag_t *d)
{
    bson_t f = BSON_INITIALIZER, ne, or, a, b, cond, opts = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&f, MF_ROUTE, route);
    BSON_APPEND_DOCUMENT_BEGIN(&f, "ordering_key", &ne);
    BSON_APPEND_NULL(&ne, "$ne");
    bson_append_document_end(&f, &ne);
    BSON_APPEND_ARRAY_BEGIN(&f, "$or", &or);
    BSON_APPEND_DOCUMENT_BEGIN(&or, "0", &a);
    BSON_APPEND_UTF8(&a, MF_STATUS, "pending");
    BSON_APPEND_DOCUMENT_BEGIN(&a, "available_at", &cond);
    BSON_APPEND_DATE_TIME(&cond, "$gt", now_ms);
    bson_append_document_end(&a, &cond);
    bson_append_document_end(&or, &a);
    BSON_APPEND_DOCUMENT_BEGIN(&or, "1", &b);
    BSON_APPEND_UTF8(&b, MF_STATUS, "processing");
    BSON_APPEND_DOCUMENT_BEGIN(&b, "processing_at", &cond);
    BSON_APPEND_DATE_TIME(&cond, "$gt", cut_ms);
    bson_append_document_end(&b, &cond);
    bson_append_document_end(&or, &b);
    bson_append_array_end(&f, &or);
    static const char *const proj[] = {"ordering_key"};
    append_projection(&opts, proj, 1);
    int rc = outbox_mongo_find(h->coll, &f, &opts, add_key, held, d, "claiming (held keys)");
    bson_destroy(&f);
    bson_destroy(&opts);
    if (rc == OUTBOX_OK && held->failed)
        rc = outbox_mongo_nomem(d);
    return rc;
}

static int candidates(mongo_handle_t *h, const outbox_claim_req_t *req, int64_t now_ms,
                      int64_t cut_ms, const strs_t *held, strs_t *ids, outbox_diag_t *d)
{
    bson_t f = BSON_INITIALIZER, nin, opts = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&f, MF_ROUTE, req->route);
    int ok = 1;
    if (held->n) {
        /* $nin also matches documents without a key. */
        BSON_APPEND_DOCUMENT_BEGIN(&f, "ordering_key", &nin);
        ok = outbox_mongo_append_ids(&nin, "$nin", (const char *const *)held->v, held->n);
        bson_append_document_end(&f, &nin);
    }
    append_claimable(&f, now_ms, cut_ms);
    append_sort(&opts, req->hlc_order);
    BSON_APPEND_INT64(&opts, "limit", (int64_t)req->limit);
    static const char *const proj[] = {MF_ID};
    append_projection(&opts, proj, 1);
    int rc = ok ? outbox_mongo_find(h->coll, &f, &opts, add_id, ids, d, "claiming (candidates)")
                : outbox_mongo_nomem(d);
    bson_destroy(&f);
    bson_destroy(&opts);
    return rc;
}

/* ------------------------------------------------------------- step 3 */

static int take(mongo_handle_t *h, const char *route, const strs_t *ids, int64_t now_ms,
                int64_t cut_ms, const char *token, outbox_diag_t *d)
{
    int rc = OUTBOX_OK;
    for (size_t at = 0; rc == OUTBOX_OK && at < ids->n; at += MONGO_IN_MAX) {
        size_t k = ids->n - at < MONGO_IN_MAX ? ids->n - at : MONGO_IN_MAX;
        bson_t f = BSON_INITIALIZER, in, u = BSON_INITIALIZER, set, inc, reply;
        BSON_APPEND_UTF8(&f, MF_ROUTE, route);
        BSON_APPEND_DOCUMENT_BEGIN(&f, MF_ID, &in);
        int ok = outbox_mongo_append_ids(&in, "$in", (const char *const *)ids->v + at, k);
        bson_append_document_end(&f, &in);
        append_claimable(&f, now_ms, cut_ms);
        BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
        BSON_APPEND_UTF8(&set, MF_STATUS, "processing");
        BSON_APPEND_UTF8(&set, MF_TOKEN, token);
        BSON_APPEND_DATE_TIME(&set, "processing_at", now_ms);
        bson_append_document_end(&u, &set);
        BSON_APPEND_DOCUMENT_BEGIN(&u, "$inc", &inc);
        BSON_APPEND_INT32(&inc, "attempts", 1);
        bson_append_document_end(&u, &inc);
        bson_error_t e;
        if (!ok)
            rc = outbox_mongo_nomem(d);
        else if (!mongoc_collection_update_many(h->coll, &f, &u, NULL, &reply, &e)) {
            rc = outbox_mongo_error(d, &e, &reply, "claiming");
            bson_destroy(&reply);
        } else {
            bson_destroy(&reply);
        }
        bson_destroy(&f);
        bson_destroy(&u);
    }
    return rc;
}

/* ------------------------------------------------------------- step 4 */

static size_t put_string(outbox_kit_buf_t *a, const char *s, size_t len)
{
    size_t at = a->len;
    outbox_kit_buf_put(a, s, len);
    outbox_kit_buf_putc(a, '\0');
    return at;
}

static int64_t date_us(const bson_t *doc, const char *key)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_DATE_TIME(&it))
        return bson_iter_date_time(&it) * 1000;
    return 0;
}

static int64_t int_of(const bson_t *doc, const char *key)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_NUMBER(&it))
        return bson_iter_as_int64(&it);
    return 0;
}

static int keep_doc(const bson_t *doc, void *ctx, outbox_diag_t *d)
{
    claimed_t *c = ctx;
    mongo_handle_t *h = c->h;
    if (h->n_rows == h->cap_rows) {
        size_t cap = h->cap_rows ? h->cap_rows * 2 : 64;
        outbox_row_t *v = outbox_mongo_host->realloc(h->rows, cap * sizeof *v);
        if (!v)
            return outbox_mongo_nomem(d);
        h->rows = v;
        h->cap_rows = cap;
    }
    if (h->n_rows == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        size_t(*o)[S_COUNT] = outbox_mongo_host->realloc(c->offs, cap * sizeof *o);
        if (!o)
            return outbox_mongo_nomem(d);
        c->offs = o;
        c->cap = cap;
    }
    outbox_row_t *r = &h->rows[h->n_rows];
    size_t *offs = c->offs[h->n_rows];
    memset(r, 0, sizeof *r);
    for (int k = 0; k < S_COUNT; k++) {
        offs[k] = NO_OFF;
        bson_iter_t it;
        if (!bson_iter_init_find(&it, doc, string_fields[k]))
            continue;
        if (k == S_PAYLOAD) {
            size_t at = h->arena.len;
            outbox_mongo_json_value(&it, &h->arena);
            r->payload_len = h->arena.len - at;
            outbox_kit_buf_putc(&h->arena, '\0');
            offs[k] = at;
        } else if (BSON_ITER_HOLDS_UTF8(&it)) {
            uint32_t len = 0;
            const char *s = bson_iter_utf8(&it, &len);
            offs[k] = put_string(&h->arena, s, len);
        }
    }
    if (h->arena.failed)
        return outbox_mongo_nomem(d);
    if (offs[S_ID] == NO_OFF || offs[S_ROUTE] == NO_OFF || offs[S_EVENT_ID] == NO_OFF ||
        offs[S_EVENT_TYPE] == NO_OFF || offs[S_PAYLOAD] == NO_OFF)
        return outbox_mongo_fail(d, OUTBOX_EPERMANENT,
                                 "claimed a document without a string _id, outbox_route, event_id "
                                 "or event_type, or without a payload, from \"%s\"",
                                 h->shown);
    r->occurred_at = date_us(doc, "occurred_at");
    r->created_at = date_us(doc, "created_at");
    r->available_at = date_us(doc, "available_at");
    r->attempts = (int32_t)int_of(doc, "attempts");
    r->hlc = int_of(doc, "hlc");
    h->n_rows++;
    return OUTBOX_OK;
}

static void fix_pointers(mongo_handle_t *h, const claimed_t *c)
{
    for (size_t i = 0; i < h->n_rows; i++) {
        outbox_row_t *r = &h->rows[i];
        const char **dst[S_COUNT] = {&r->id, &r->route, &r->event_id, &r->event_type,
                                     &r->tenant_id, &r->execution_id, &r->correlation_id,
                                     &r->causation_id, &r->payload, &r->ordering_key,
                                     &r->traceparent, &r->last_error};
        for (int k = 0; k < S_COUNT; k++)
            *dst[k] = c->offs[i][k] == NO_OFF ? NULL : h->arena.data + c->offs[i][k];
    }
}

static int read_back(mongo_handle_t *h, const char *token, outbox_diag_t *d)
{
    bson_t f = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&f, MF_TOKEN, token);
    claimed_t c = {.h = h};
    int rc = outbox_mongo_find(h->coll, &f, NULL, keep_doc, &c, d, "claiming (reading back)");
    bson_destroy(&f);
    if (rc == OUTBOX_OK)
        fix_pointers(h, &c);
    outbox_mongo_host->free(c.offs);
    return rc;
}

/* -------------------------------------------------------------- order */

/* MongoDB sorts a missing hlc before every value: unstamped rows first
 * (OUTBOX_STORE_CAP_HLC_NULLS_FIRST). */
static int cmp_pos(int hlc_order, int64_t ha, int64_t ca, const char *ia, int64_t hb, int64_t cb,
                   const char *ib)
{
    if (hlc_order && ha != hb) {
        if ((ha == 0) != (hb == 0))
            return ha == 0 ? -1 : 1;
        return ha < hb ? -1 : 1;
    }
    if (ca != cb)
        return ca < cb ? -1 : 1;
    return strcmp(ia, ib);
}

static int cmp_created(const void *a, const void *b)
{
    const outbox_row_t *x = a, *y = b;
    return cmp_pos(0, 0, x->created_at, x->id, 0, y->created_at, y->id);
}

static int cmp_hlc(const void *a, const void *b)
{
    const outbox_row_t *x = a, *y = b;
    return cmp_pos(1, x->hlc, x->created_at, x->id, y->hlc, y->created_at, y->id);
}

/* ------------------------------------------------------------- step 5 */

typedef struct keycheck {
    mongo_handle_t *h;
    int hlc_order;
    unsigned char *drop; /* per claimed row: taken past an earlier unfinished row */
} keycheck_t;

/* A row of the key that is unfinished and not ours: every row of ours
 * after it in claim order goes back. */
static int blocker(const bson_t *doc, void *ctx, outbox_diag_t *d)
{
    (void)d;
    keycheck_t *k = ctx;
    const char *key = outbox_mongo_str(doc, "ordering_key");
    const char *id = outbox_mongo_str(doc, MF_ID);
    if (!key || !id)
        return OUTBOX_OK;
    int64_t hlc = int_of(doc, "hlc"), created = date_us(doc, "created_at");
    for (size_t i = 0; i < k->h->n_rows; i++) {
        const outbox_row_t *r = &k->h->rows[i];
        if (r->ordering_key && strcmp(r->ordering_key, key) == 0 &&
            cmp_pos(k->hlc_order, hlc, created, id, r->hlc, r->created_at, r->id) < 0)
            k->drop[i] = 1;
    }
    return OUTBOX_OK;
}

static int find_blockers(mongo_handle_t *h, const char *route, int hlc_order, const char *token,
                         const strs_t *keys, unsigned char *drop, outbox_diag_t *d)
{
    int64_t last = 0;
    for (size_t i = 0; i < h->n_rows; i++)
        if (h->rows[i].ordering_key && h->rows[i].created_at > last)
            last = h->rows[i].created_at;
    bson_t f = BSON_INITIALIZER, in, st, ne, lte, opts = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&f, MF_ROUTE, route);
    BSON_APPEND_DOCUMENT_BEGIN(&f, "ordering_key", &in);
    int ok = outbox_mongo_append_ids(&in, "$in", (const char *const *)keys->v, keys->n);
    bson_append_document_end(&f, &in);
    BSON_APPEND_DOCUMENT_BEGIN(&f, MF_STATUS, &st);
    static const char *const unfinished[] = {"pending", "processing"};
    ok = ok && outbox_mongo_append_ids(&st, "$in", unfinished, 2);
    bson_append_document_end(&f, &st);
    BSON_APPEND_DOCUMENT_BEGIN(&f, MF_TOKEN, &ne);
    BSON_APPEND_UTF8(&ne, "$ne", token);
    bson_append_document_end(&f, &ne);
    if (!hlc_order) {
        /* Nothing after our last keyed row can be ahead of it. */
        BSON_APPEND_DOCUMENT_BEGIN(&f, "created_at", &lte);
        BSON_APPEND_DATE_TIME(&lte, "$lte", last / 1000);
        bson_append_document_end(&f, &lte);
    }
    static const char *const proj[] = {MF_ID, "ordering_key", "created_at", "hlc"};
    append_projection(&opts, proj, 4);
    keycheck_t k = {h, hlc_order, drop};
    int rc = ok ? outbox_mongo_find(h->coll, &f, &opts, blocker, &k, d, "claiming (key check)")
                : outbox_mongo_nomem(d);
    bson_destroy(&f);
    bson_destroy(&opts);
    return rc;
}

/* Puts rows taken past an earlier row back: pending, the attempt given
 * back, no fence. Guarded by our token, so only our own rows change. */
static int release_dropped(mongo_handle_t *h, const char *token, const unsigned char *drop,
                           outbox_diag_t *d)
{
    strs_t ids = {0};
    for (size_t i = 0; i < h->n_rows; i++)
        if (drop[i]) {
            /* ids are distinct; strs_add's search is cheap at these sizes */
            strs_add(&ids, h->rows[i].id);
        }
    if (ids.failed) {
        strs_free(&ids);
        return outbox_mongo_nomem(d);
    }
    int rc = OUTBOX_OK;
    for (size_t at = 0; rc == OUTBOX_OK && at < ids.n; at += MONGO_IN_MAX) {
        size_t k = ids.n - at < MONGO_IN_MAX ? ids.n - at : MONGO_IN_MAX;
        bson_t f = BSON_INITIALIZER, in, u = BSON_INITIALIZER, set, unset, inc, reply;
        BSON_APPEND_DOCUMENT_BEGIN(&f, MF_ID, &in);
        int ok = outbox_mongo_append_ids(&in, "$in", (const char *const *)ids.v + at, k);
        bson_append_document_end(&f, &in);
        BSON_APPEND_UTF8(&f, MF_TOKEN, token);
        BSON_APPEND_UTF8(&f, MF_STATUS, "processing");
        BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
        BSON_APPEND_UTF8(&set, MF_STATUS, "pending");
        bson_append_document_end(&u, &set);
        BSON_APPEND_DOCUMENT_BEGIN(&u, "$unset", &unset);
        BSON_APPEND_UTF8(&unset, MF_TOKEN, "");
        BSON_APPEND_UTF8(&unset, "processing_at", "");
        bson_append_document_end(&u, &unset);
        BSON_APPEND_DOCUMENT_BEGIN(&u, "$inc", &inc);
        BSON_APPEND_INT32(&inc, "attempts", -1);
        bson_append_document_end(&u, &inc);
        bson_error_t e;
        if (!ok)
            rc = outbox_mongo_nomem(d);
        else if (!mongoc_collection_update_many(h->coll, &f, &u, NULL, &reply, &e))
            rc = outbox_mongo_error(d, &e, &reply, "claiming (giving back rows of a held key)");
        if (ok)
            bson_destroy(&reply);
        bson_destroy(&f);
        bson_destroy(&u);
    }
    strs_free(&ids);
    return rc;
}

/* Step 5 for the rows read back; drops the released ones from h->rows. */
static int key_check(mongo_handle_t *h, const char *route, int hlc_order, const char *token,
                     outbox_diag_t *d)
{
    strs_t keys = {0};
    for (size_t i = 0; i < h->n_rows; i++)
        strs_add(&keys, h->rows[i].ordering_key);
    if (keys.failed) {
        strs_free(&keys);
        return outbox_mongo_nomem(d);
    }
    if (keys.n == 0)
        return OUTBOX_OK;
    unsigned char *drop = outbox_mongo_host->alloc(h->n_rows);
    if (!drop) {
        strs_free(&keys);
        return outbox_mongo_nomem(d);
    }
    memset(drop, 0, h->n_rows);
    int rc = find_blockers(h, route, hlc_order, token, &keys, drop, d);
    strs_free(&keys);
    size_t dropped = 0;
    for (size_t i = 0; i < h->n_rows; i++)
        dropped += drop[i];
    if (rc == OUTBOX_OK && dropped)
        rc = release_dropped(h, token, drop, d);
    if (rc == OUTBOX_OK && dropped) {
        size_t w = 0;
        for (size_t i = 0; i < h->n_rows; i++)
            if (!drop[i])
                h->rows[w++] = h->rows[i];
        h->n_rows = w;
    }
    outbox_mongo_host->free(drop);
    return rc;
}

/* ------------------------------------------------ without atomic updates */

/* Where updates are not atomic (FerretDB), claims of a route take turns
 * under the route's lock (mongo_lock.c), and FerretDB reads and decodes the
 * whole collection for every filter but a lone _id, which it finds through
 * its index. So a claim reads the route's unfinished rows in one such read
 * only now and then, keeps them in the handle in claim order (the claim
 * cache), and walks them, asking the server about each row by its _id:
 *
 *   - finished (published, dead) or gone: marked so, never asked again;
 *   - claimable now (pending and ripe, or processing with an expired
 *     lease) and no earlier row of its key is in the way: taken by a
 *     findAndModify on its _id, which returns the document as it was; a row
 *     that stopped being claimable in between (its old holder settled it
 *     late) is written back as it was;
 *   - anything else (in flight under a live lease, waiting for its retry):
 *     its key is in the way for the rest of this claim.
 *
 * Every row of a key that comes before a candidate in claim order was
 * unfinished when the cache was read (rows are staged in order, so later
 * ones come after), and the walk asks about each of them first: a key's
 * rows leave only as a run that starts at its first unfinished row. A walk
 * that reaches the end of the cache before the claim is full reads the
 * collection again, once, and walks the new cache: an empty claim means
 * that nothing was claimable at that read. With hlc ordering a row staged
 * later may sort earlier, so every such claim reads the collection. */

/* The most rows a cache keeps: the first ones in claim order, so every
 * row of a key before a kept row is kept too. */
#define MONGO_CLAIM_CACHE_MAX 4096

typedef struct urow {
    char *id;
    char *key;
    int pending;          /* else processing */
    int64_t available_ms; /* 0: none */
    int64_t processing_ms;
    int64_t created_us;
    int64_t hlc;
    int finished;         /* asked since: published, dead or gone */
    int64_t busy_until_ms; /* keyless and in flight: not asked again before */
} urow_t;

typedef struct urows {
    urow_t *v;
    size_t n, cap;
} urows_t;

struct mongo_claim_cache {
    char *route;
    urows_t rows;
    size_t start; /* rows before it are all finished */
};

static int64_t date_ms_of(const bson_t *doc, const char *key)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_DATE_TIME(&it))
        return bson_iter_date_time(&it);
    return 0;
}

static int add_urow(const bson_t *doc, void *ctx, outbox_diag_t *d)
{
    urows_t *u = ctx;
    const char *id = outbox_mongo_str(doc, MF_ID), *st = outbox_mongo_str(doc, MF_STATUS);
    if (!id || !st)
        return OUTBOX_OK;
    if (u->n == u->cap) {
        size_t cap = u->cap ? u->cap * 2 : 256;
        urow_t *v = outbox_mongo_host->realloc(u->v, cap * sizeof *v);
        if (!v)
            return outbox_mongo_nomem(d);
        u->v = v;
        u->cap = cap;
    }
    urow_t *r = &u->v[u->n];
    memset(r, 0, sizeof *r);
    r->id = outbox_kit_strdup(outbox_mongo_host, id);
    const char *key = outbox_mongo_str(doc, "ordering_key");
    r->key = key ? outbox_kit_strdup(outbox_mongo_host, key) : NULL;
    if (!r->id || (key && !r->key)) {
        outbox_mongo_host->free(r->id);
        outbox_mongo_host->free(r->key);
        return outbox_mongo_nomem(d);
    }
    r->pending = strcmp(st, "pending") == 0;
    r->available_ms = date_ms_of(doc, "available_at");
    r->processing_ms = date_ms_of(doc, "processing_at");
    r->created_us = date_us(doc, "created_at");
    r->hlc = int_of(doc, "hlc");
    u->n++;
    return OUTBOX_OK;
}

static void urows_free(urows_t *u)
{
    for (size_t i = 0; i < u->n; i++) {
        outbox_mongo_host->free(u->v[i].id);
        outbox_mongo_host->free(u->v[i].key);
    }
    outbox_mongo_host->free(u->v);
    memset(u, 0, sizeof *u);
}

MONGO_HIDDEN void outbox_mongo_claim_cache_free(mongo_handle_t *h)
{
    if (!h->claim_cache)
        return;
    urows_free(&h->claim_cache->rows);
    outbox_mongo_host->free(h->claim_cache->route);
    outbox_mongo_host->free(h->claim_cache);
    h->claim_cache = NULL;
}

static int cmp_urow_created(const void *a, const void *b)
{
    const urow_t *x = a, *y = b;
    return cmp_pos(0, 0, x->created_us, x->id, 0, y->created_us, y->id);
}

static int cmp_urow_hlc(const void *a, const void *b)
{
    const urow_t *x = a, *y = b;
    return cmp_pos(1, x->hlc, x->created_us, x->id, y->hlc, y->created_us, y->id);
}

static int urow_claimable(const urow_t *r, int64_t now_ms, int64_t cut_ms)
{
    if (r->pending)
        return r->available_ms == 0 || r->available_ms <= now_ms;
    return r->processing_ms <= cut_ms;
}

/* The cache, read again: the route's unfinished rows, small fields only,
 * the first MONGO_CLAIM_CACHE_MAX in claim order. */
static int cache_read(mongo_handle_t *h, const outbox_claim_req_t *req, outbox_diag_t *d)
{
    outbox_mongo_claim_cache_free(h);
    struct mongo_claim_cache *c = outbox_mongo_host->alloc(sizeof *c);
    if (!c)
        return outbox_mongo_nomem(d);
    memset(c, 0, sizeof *c);
    c->route = outbox_kit_strdup(outbox_mongo_host, req->route);
    if (!c->route) {
        outbox_mongo_host->free(c);
        return outbox_mongo_nomem(d);
    }
    h->claim_cache = c;
    bson_t f = BSON_INITIALIZER, st, opts = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&f, MF_ROUTE, req->route);
    BSON_APPEND_DOCUMENT_BEGIN(&f, MF_STATUS, &st);
    static const char *const unfinished[] = {"pending", "processing"};
    int ok = outbox_mongo_append_ids(&st, "$in", unfinished, 2);
    bson_append_document_end(&f, &st);
    static const char *const proj[] = {MF_ID,           MF_STATUS,    "ordering_key", "available_at",
                                       "processing_at", "created_at", "hlc"};
    append_projection(&opts, proj, 7);
    int64_t t0 = outbox_mongo_host->monotonic_us();
    int rc = ok ? outbox_mongo_find(h->coll, &f, &opts, add_urow, &c->rows, d,
                                    "claiming (unfinished rows)")
                : outbox_mongo_nomem(d);
    bson_destroy(&f);
    bson_destroy(&opts);
    if (rc != OUTBOX_OK) {
        outbox_mongo_claim_cache_free(h);
        return rc;
    }
    if (c->rows.n > 1)
        qsort(c->rows.v, c->rows.n, sizeof *c->rows.v,
              req->hlc_order ? cmp_urow_hlc : cmp_urow_created);
    for (size_t i = MONGO_CLAIM_CACHE_MAX; i < c->rows.n; i++) {
        outbox_mongo_host->free(c->rows.v[i].id);
        outbox_mongo_host->free(c->rows.v[i].key);
    }
    if (c->rows.n > MONGO_CLAIM_CACHE_MAX)
        c->rows.n = MONGO_CLAIM_CACHE_MAX;
    outbox_mongo_host->log(OUTBOX_LOG_DEBUG, MONGO_NAME, "claim: read %zu unfinished rows in %lld us",
                           c->rows.n, (long long)(outbox_mongo_host->monotonic_us() - t0));
    return OUTBOX_OK;
}

/* What the server says of one row now. */
enum { ROW_GONE, ROW_FINISHED, ROW_CLAIMABLE, ROW_OURS, ROW_IN_THE_WAY };

typedef struct asked {
    int64_t now_ms, cut_ms, lease_ms;
    const char *token;
    int state;
    int64_t processing_ms; /* of an in-flight row */
} asked_t;

static int state_of(const bson_t *doc, const asked_t *a)
{
    const char *st = outbox_mongo_str(doc, MF_STATUS);
    if (!st || (strcmp(st, "pending") != 0 && strcmp(st, "processing") != 0))
        return ROW_FINISHED;
    const char *tok = outbox_mongo_str(doc, MF_TOKEN);
    urow_t r = {.pending = strcmp(st, "pending") == 0,
                .available_ms = date_ms_of(doc, "available_at"),
                .processing_ms = date_ms_of(doc, "processing_at")};
    if (!r.pending && tok && strcmp(tok, a->token) == 0)
        return ROW_OURS;
    return urow_claimable(&r, a->now_ms, a->cut_ms) ? ROW_CLAIMABLE : ROW_IN_THE_WAY;
}

static int note_state(const bson_t *doc, void *ctx, outbox_diag_t *d)
{
    (void)d;
    asked_t *a = ctx;
    a->state = state_of(doc, a);
    const char *st = outbox_mongo_str(doc, MF_STATUS);
    a->processing_ms = st && strcmp(st, "processing") == 0 ? date_ms_of(doc, "processing_at") : 0;
    return OUTBOX_OK;
}

static int ask(mongo_handle_t *h, const char *id, asked_t *a, outbox_diag_t *d)
{
    bson_t f = BSON_INITIALIZER, opts = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&f, MF_ID, id);
    static const char *const proj[] = {MF_STATUS, MF_TOKEN, "available_at", "processing_at"};
    append_projection(&opts, proj, 4);
    a->state = ROW_GONE;
    int rc = outbox_mongo_find(h->coll, &f, &opts, note_state, a, d, "claiming (asking a row)");
    bson_destroy(&f);
    bson_destroy(&opts);
    return rc;
}

/* Takes one claimable row by its _id; *took says whether it was still
 * claimable (else it is written back as it was). */
typedef struct taking {
    mongo_handle_t *h;
    const asked_t *a;
    claimed_t *c;
    int took;
} taking_t;

/* The claim stands only on a row that was still claimable. */
static int keep_claimed(const bson_t *old, void *ctx, int *stands, outbox_diag_t *d)
{
    taking_t *t = ctx;
    *stands = state_of(old, t->a) == ROW_CLAIMABLE;
    if (!*stands)
        return OUTBOX_OK;
    int rc = keep_doc(old, t->c, d);
    if (rc == OUTBOX_OK) {
        t->h->rows[t->h->n_rows - 1].attempts++;
        t->took = 1;
    }
    return rc;
}

/* Takes one claimable row by its _id; *took says whether it was still
 * claimable (else it is written back as it was, the way a late settle of
 * its old holder left it). A row purged meanwhile is not taken. */
static int take_one(mongo_handle_t *h, const char *id, const bson_t *up, const asked_t *a,
                    claimed_t *c, int *took, outbox_diag_t *d)
{
    taking_t t = {.h = h, .a = a, .c = c};
    int rc = outbox_mongo_swap_by_id(h->coll, id, up, keep_claimed, &t, d, "claiming");
    *took = t.took;
    return rc;
}

static int key_blocked(const strs_t *blocked, const char *key)
{
    for (size_t k = 0; key && k < blocked->n; k++)
        if (strcmp(blocked->v[k], key) == 0)
            return 1;
    return 0;
}

/* One walk of the cache (see above), until the claim holds req->limit or
 * has spent a third of a lease of a second or more: every row it takes is
 * leased from the walk's start, so a slow walk would hand the relay rows
 * whose lease is about to run out (another claim could then take them
 * while they are being published). */
static int walk(mongo_handle_t *h, const outbox_claim_req_t *req, const bson_t *up,
                const asked_t *a0, claimed_t *c, strs_t *blocked, outbox_diag_t *d)
{
    struct mongo_claim_cache *cc = h->claim_cache;
    int64_t t0 = outbox_mongo_host->monotonic_us();
    int64_t budget_us = req->lease_us >= 1000000 ? req->lease_us / 3 : INT64_MAX;
    int rc = OUTBOX_OK;
    for (size_t i = cc->start; rc == OUTBOX_OK && i < cc->rows.n && h->n_rows < req->limit; i++) {
        if (h->n_rows > 0 && outbox_mongo_host->monotonic_us() - t0 > budget_us) {
            c->spent = 1;
            break;
        }
        urow_t *r = &cc->rows.v[i];
        if (r->finished) {
            if (i == cc->start)
                cc->start++;
            continue;
        }
        if (key_blocked(blocked, r->key))
            continue;
        /* A keyless row in another claim's flight holds nothing up: it is
         * asked about again when its lease may have run out, or at the
         * next read of the collection. */
        if (!r->key && r->busy_until_ms > a0->now_ms)
            continue;
        asked_t a = *a0;
        rc = ask(h, r->id, &a, d);
        if (rc != OUTBOX_OK)
            break;
        switch (a.state) {
        case ROW_GONE:
        case ROW_FINISHED:
            r->finished = 1;
            if (i == cc->start)
                cc->start++;
            break;
        case ROW_OURS: /* taken earlier in this claim: its key goes on */
            break;
        case ROW_CLAIMABLE: {
            int took = 0;
            rc = take_one(h, r->id, up, &a, c, &took, d);
            if (rc == OUTBOX_OK && !took && r->key)
                strs_add(blocked, r->key);
            break;
        }
        default:
            if (r->key)
                strs_add(blocked, r->key);
            else if (a.processing_ms)
                r->busy_until_ms = a.processing_ms + a.lease_ms;
            break;
        }
        if (blocked->failed)
            rc = outbox_mongo_nomem(d);
    }
    return rc;
}

/* The update that takes a row: processing under this claim's token since
 * now_ms, one more attempt. */
static void build_take(bson_t *up, const char *token, int64_t now_ms)
{
    bson_t set, inc;
    BSON_APPEND_DOCUMENT_BEGIN(up, "$set", &set);
    BSON_APPEND_UTF8(&set, MF_STATUS, "processing");
    BSON_APPEND_UTF8(&set, MF_TOKEN, token);
    BSON_APPEND_DATE_TIME(&set, "processing_at", now_ms);
    bson_append_document_end(up, &set);
    BSON_APPEND_DOCUMENT_BEGIN(up, "$inc", &inc);
    BSON_APPEND_INT32(&inc, "attempts", 1);
    bson_append_document_end(up, &inc);
}

/* One walk under the route's lock. The clock is read once the lock is
 * held: a claim that waited its turn leases its rows from when it takes
 * them, not from when it started waiting. */
static int walk_locked(mongo_handle_t *h, const outbox_claim_req_t *req, const char *token,
                       claimed_t *c, strs_t *blocked, outbox_diag_t *d)
{
    char name[300];
    snprintf(name, sizeof name, "claim:%s.%s:%s", outbox_mongo_db_of(h, &h->rel), h->rel.table,
             req->route);
    mongo_lock_t lock = {0};
    int rc = outbox_mongo_lock(h, name, MONGO_CLAIM_LOCK_TTL_MS, MONGO_CLAIM_LOCK_WAIT_MS, &lock, d);
    if (rc == OUTBOX_OK) {
        int64_t now_us = outbox_mongo_host->now_us();
        int64_t now_ms = outbox_mongo_ms(now_us);
        int64_t cut_ms = outbox_mongo_ms(req->lease_us > now_us ? INT64_MIN / 2 : now_us - req->lease_us);
        asked_t a = {.now_ms = now_ms, .cut_ms = cut_ms, .lease_ms = now_ms - cut_ms, .token = token};
        bson_t up = BSON_INITIALIZER;
        build_take(&up, token, now_ms);
        rc = walk(h, req, &up, &a, c, blocked, d);
        bson_destroy(&up);
    }
    outbox_mongo_unlock(h, &lock);
    return rc;
}

/* The claim where updates are not atomic. The collection is read outside
 * the lock (the read only lists rows; the walk asks about each under it),
 * so claimers that wait for rows never hold up one that takes them. */
static int claim_racy(mongo_handle_t *h, const outbox_claim_req_t *req, const char *token,
                      outbox_diag_t *d)
{
    int64_t t0 = outbox_mongo_host->monotonic_us();
    claimed_t c = {.h = h};
    strs_t blocked = {0};
    int rc = OUTBOX_OK;
    int fresh = 0;
    if (req->hlc_order || !h->claim_cache || strcmp(h->claim_cache->route, req->route) != 0) {
        rc = cache_read(h, req, d);
        fresh = 1;
    }
    if (rc == OUTBOX_OK)
        rc = walk_locked(h, req, token, &c, &blocked, d);
    if (rc == OUTBOX_OK && h->n_rows < req->limit && !fresh && !c.spent) {
        /* What the old cache held is spent: read the collection again. A
         * key found in the way stays so for this claim. */
        rc = cache_read(h, req, d);
        if (rc == OUTBOX_OK)
            rc = walk_locked(h, req, token, &c, &blocked, d);
    }
    if (rc == OUTBOX_OK)
        fix_pointers(h, &c);
    else
        outbox_mongo_claim_cache_free(h);
    outbox_mongo_host->free(c.offs);
    strs_free(&blocked);
    outbox_mongo_host->log(OUTBOX_LOG_DEBUG, MONGO_NAME, "claim: took %zu rows, %lld us in all",
                           h->n_rows, (long long)(outbox_mongo_host->monotonic_us() - t0));
    return rc;
}

/* -------------------------------------------------------------- claim */

int outbox_mongo_claim(void *handle, const outbox_claim_req_t *req, const outbox_row_t **rows,
                       size_t *n, outbox_fence_t *fence, outbox_diag_t *d)
{
    mongo_handle_t *h = handle;
    /* driver.h: the host has checked req and cleared the outputs. */
    int rc = outbox_mongo_no_open_tx(h, "claim", d);
    if (rc != OUTBOX_OK)
        return rc;
    h->n_rows = 0;
    outbox_kit_buf_reset(&h->arena);

    /* One clock reading for ripeness, lease expiry and processing_at. */
    int64_t now_us = outbox_mongo_host->now_us();
    int64_t now_ms = outbox_mongo_ms(now_us);
    int64_t cut_ms = outbox_mongo_ms(req->lease_us > now_us ? INT64_MIN / 2 : now_us - req->lease_us);
    char token[40];
    outbox_mongo_token(token);

    strs_t held = {0}, ids = {0};
    int took = 0;
    if (h->racy_claims) {
        /* Claims of one route take turns (mongo_lock.c); the walk keeps
         * the per-key rule itself, in claim order. */
        rc = claim_racy(h, req, token, d);
        /* A second walk may find rows before the first one's. */
        if (rc == OUTBOX_OK && h->n_rows > 1)
            qsort(h->rows, h->n_rows, sizeof *h->rows, req->hlc_order ? cmp_hlc : cmp_created);
    } else {
        rc = held_keys(h, req->route, now_ms, cut_ms, &held, d);
        if (rc == OUTBOX_OK)
            rc = candidates(h, req, now_ms, cut_ms, &held, &ids, d);
        if (rc == OUTBOX_OK && ids.n > 0)
            rc = take(h, req->route, &ids, now_ms, cut_ms, token, d);
        took = rc == OUTBOX_OK && ids.n > 0;
        if (took)
            rc = read_back(h, token, d);
    }
    strs_free(&held);
    strs_free(&ids);
    if (took && rc == OUTBOX_OK && h->n_rows > 1)
        qsort(h->rows, h->n_rows, sizeof *h->rows, req->hlc_order ? cmp_hlc : cmp_created);
    if (took && rc == OUTBOX_OK)
        rc = key_check(h, req->route, req->hlc_order, token, d);
    if (rc != OUTBOX_OK) {
        /* Rows this claim took stay processing until their lease ends and
         * are claimed again then: delayed, never lost. */
        h->n_rows = 0;
        return rc;
    }
    *rows = h->rows;
    *n = h->n_rows;
    if (h->n_rows)
        snprintf(fence->token, sizeof fence->token, "%s", token);
    return OUTBOX_OK;
}
