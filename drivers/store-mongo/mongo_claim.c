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

static size_t put_string(outbox_buf_t *a, const char *s, size_t len)
{
    size_t at = a->len;
    outbox_buf_put(a, s, len);
    outbox_buf_putc(a, '\0');
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
            outbox_buf_putc(&h->arena, '\0');
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

/* Where updates are not atomic (FerretDB, which also scans the whole
 * collection for every filter but an _id), a claim holds the route's lock
 * and reads the route's unfinished rows once, small fields only; the held
 * keys and the candidates come from that one read, and each candidate is
 * taken by an update of its _id alone, which returns the document as it
 * was: a row that stopped being claimable since the read (a stale relay's
 * late settle) is put back as it was and left out. */

typedef struct urow {
    char *id;
    char *key;
    int pending;      /* else processing */
    int64_t available_ms; /* 0: none */
    int64_t processing_ms;
    int64_t created_us;
    int64_t hlc;
} urow_t;

typedef struct urows {
    urow_t *v;
    size_t n, cap;
} urows_t;

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

static int read_unfinished(mongo_handle_t *h, const char *route, urows_t *u, outbox_diag_t *d)
{
    bson_t f = BSON_INITIALIZER, st, opts = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&f, MF_ROUTE, route);
    BSON_APPEND_DOCUMENT_BEGIN(&f, MF_STATUS, &st);
    static const char *const unfinished[] = {"pending", "processing"};
    int ok = outbox_mongo_append_ids(&st, "$in", unfinished, 2);
    bson_append_document_end(&f, &st);
    static const char *const proj[] = {MF_ID,         MF_STATUS,     "ordering_key", "available_at",
                                       "processing_at", "created_at", "hlc"};
    append_projection(&opts, proj, 7);
    int rc = ok ? outbox_mongo_find(h->coll, &f, &opts, add_urow, u, d, "claiming (unfinished rows)")
                : outbox_mongo_nomem(d);
    bson_destroy(&f);
    bson_destroy(&opts);
    return rc;
}

static int claim_locked(mongo_handle_t *h, const outbox_claim_req_t *req, int64_t now_ms,
                        int64_t cut_ms, const char *token, outbox_diag_t *d)
{
    urows_t u = {0};
    int64_t t0 = outbox_mongo_host->monotonic_us();
    int rc = read_unfinished(h, req->route, &u, d);
    outbox_mongo_host->log(OUTBOX_LOG_DEBUG, MONGO_NAME, "claim: read %zu unfinished rows in %lld us",
                           u.n, (long long)(outbox_mongo_host->monotonic_us() - t0));
    if (rc == OUTBOX_OK && u.n > 1)
        qsort(u.v, u.n, sizeof *u.v, req->hlc_order ? cmp_urow_hlc : cmp_urow_created);
    strs_t held = {0};
    for (size_t i = 0; rc == OUTBOX_OK && i < u.n; i++)
        if (u.v[i].key && !urow_claimable(&u.v[i], now_ms, cut_ms))
            strs_add(&held, u.v[i].key);
    if (held.failed)
        rc = outbox_mongo_nomem(d);
    bson_t up = BSON_INITIALIZER, set, inc;
    BSON_APPEND_DOCUMENT_BEGIN(&up, "$set", &set);
    BSON_APPEND_UTF8(&set, MF_STATUS, "processing");
    BSON_APPEND_UTF8(&set, MF_TOKEN, token);
    BSON_APPEND_DATE_TIME(&set, "processing_at", now_ms);
    bson_append_document_end(&up, &set);
    BSON_APPEND_DOCUMENT_BEGIN(&up, "$inc", &inc);
    BSON_APPEND_INT32(&inc, "attempts", 1);
    bson_append_document_end(&up, &inc);
    /* The rows to take, in claim order, up to the limit. */
    const char **take_ids = outbox_mongo_host->alloc((req->limit < u.n ? req->limit : u.n) * sizeof *take_ids + 1);
    size_t taken = 0;
    if (!take_ids)
        rc = outbox_mongo_nomem(d);
    for (size_t i = 0; rc == OUTBOX_OK && i < u.n && taken < req->limit; i++) {
        const urow_t *r = &u.v[i];
        if (!urow_claimable(r, now_ms, cut_ms))
            continue;
        int blocked = 0;
        for (size_t k = 0; r->key && k < held.n && !blocked; k++)
            blocked = strcmp(held.v[k], r->key) == 0;
        if (!blocked)
            take_ids[taken++] = r->id;
    }
    /* One update of them all (we hold the route's lock: no other claimer
     * competes), then the documents read back by the token. */
    for (size_t at = 0; rc == OUTBOX_OK && at < taken; at += MONGO_IN_MAX) {
        size_t k = taken - at < MONGO_IN_MAX ? taken - at : MONGO_IN_MAX;
        bson_t f = BSON_INITIALIZER, in, reply;
        BSON_APPEND_DOCUMENT_BEGIN(&f, MF_ID, &in);
        int ok = outbox_mongo_append_ids(&in, "$in", take_ids + at, k);
        bson_append_document_end(&f, &in);
        append_claimable(&f, now_ms, cut_ms);
        bson_error_t e;
        if (!ok) {
            rc = outbox_mongo_nomem(d);
        } else {
            if (!mongoc_collection_update_many(h->coll, &f, &up, NULL, &reply, &e))
                rc = outbox_mongo_error(d, &e, &reply, "claiming");
            bson_destroy(&reply);
        }
        bson_destroy(&f);
    }
    if (rc == OUTBOX_OK && taken)
        rc = read_back(h, token, d);
    outbox_mongo_host->free(take_ids);
    outbox_mongo_host->log(OUTBOX_LOG_DEBUG, MONGO_NAME, "claim: took %zu rows, %lld us in all",
                           h->n_rows, (long long)(outbox_mongo_host->monotonic_us() - t0));
    bson_destroy(&up);
    strs_free(&held);
    urows_free(&u);
    return rc;
}

/* -------------------------------------------------------------- claim */

int outbox_mongo_claim(void *handle, const outbox_claim_req_t *req, const outbox_row_t **rows,
                       size_t *n, outbox_fence_t *fence, outbox_diag_t *d)
{
    mongo_handle_t *h = handle;
    if (!rows || !n || !fence)
        return outbox_mongo_fail(d, OUTBOX_EINVAL, "claim needs rows, n and fence");
    *rows = NULL;
    *n = 0;
    memset(fence, 0, sizeof *fence);
    if (!req || !req->route)
        return outbox_mongo_fail(d, OUTBOX_EINVAL, "claim needs a route");
    if (req->lease_us < 0)
        return outbox_mongo_fail(d, OUTBOX_EINVAL, "claim lease must not be negative");
    int rc = outbox_mongo_no_open_tx(h, "claim", d);
    if (rc != OUTBOX_OK)
        return rc;
    h->n_rows = 0;
    outbox_buf_reset(&h->arena);
    if (req->limit == 0)
        return OUTBOX_OK;

    /* One clock reading for ripeness, lease expiry and processing_at. */
    int64_t now_us = outbox_mongo_host->now_us();
    int64_t now_ms = outbox_mongo_ms(now_us);
    int64_t cut_ms = outbox_mongo_ms(req->lease_us > now_us ? INT64_MIN / 2 : now_us - req->lease_us);
    char token[40];
    outbox_mongo_token(token);

    /* Where updates are not atomic, claims of one route take turns (see
     * mongo_lock.c); the key check is then exact without step 5. */
    mongo_lock_t lock = {0};
    if (h->racy_updates) {
        char name[300];
        snprintf(name, sizeof name, "claim:%s.%s:%s", outbox_mongo_db_of(h, &h->rel), h->rel.table,
                 req->route);
        rc = outbox_mongo_lock(h, name, MONGO_CLAIM_LOCK_TTL_MS, MONGO_CLAIM_LOCK_WAIT_MS, &lock, d);
        if (rc != OUTBOX_OK)
            return rc;
    }
    strs_t held = {0}, ids = {0};
    int took = 0;
    if (lock.held) {
        rc = claim_locked(h, req, now_ms, cut_ms, token, d);
        took = rc == OUTBOX_OK && h->n_rows > 0;
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
    if (took && rc == OUTBOX_OK && !lock.held)
        rc = key_check(h, req->route, req->hlc_order, token, d);
    outbox_mongo_unlock(h, &lock);
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
