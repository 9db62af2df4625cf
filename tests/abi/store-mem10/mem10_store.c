/* store-mem10, middle floor: the store contract on rows (SPEC sections 3
 * and 5): transactions, stage, claim with the per-key rule, fenced settle,
 * checkpoints, stats, replay and purge, on the structures of mem10_kit.c.
 *
 * Every entry holds the store's mutex for the whole call, so each call is
 * atomic, concurrent claimers never take the same row, and a checkpoint
 * max-upsert never interleaves with another.
 *
 * Transactions: rows staged in a handle's transaction go into the table's
 * (route, event_id) index at once, so the key is taken, but stay out of the
 * claim orders and the id index until commit; checkpoint advances are held
 * per node key and applied as max() at commit, against whatever the table
 * holds by then. Everything a commit needs is allocated while staging, so a
 * commit cannot fail halfway. A stage of an event that another open
 * transaction holds is OUTBOX_ETRANSIENT with nothing written, as a
 * database would make it wait on the row lock: skipping it as a duplicate
 * would lose it if that transaction rolled back.
 */
#include <pthread.h>
#include <string.h>

#include "mem10_int.h"

#define H outbox_mem10_host

/* ---------------------------------------------------------- transactions */

/* Undoes what the open transaction staged, under the store's lock. When its
 * table was dropped meanwhile, the rows went with it. */
static void tx_discard(mem10_handle_t *h)
{
    mem10_tx_t *x = &h->tx;
    mem10_table_t *t = x->n_rows > 0 ? outbox_mem10_table_find(h->store, h->relation) : NULL;
    if (t != NULL && t->generation == x->table_gen) {
        for (size_t i = 0; i < x->n_rows; i++) {
            outbox_mem10_index_remove(&t->events, x->rows[i]);
            x->rows[i]->route->uncommitted--;
            outbox_mem10_row_free(x->rows[i]);
        }
    }
    mem10_table_t *c = x->n_marks > 0 ? outbox_mem10_table_find(h->store, h->checkpoint_relation) : NULL;
    if (c != NULL && c->generation == x->ckpt_gen)
        c->reserved_marks -= x->n_marks;
    for (size_t i = 0; i < x->n_marks; i++)
        H->free(x->marks[i].node_key);
    x->id = x->table_gen = x->ckpt_gen = 0;
    x->n_rows = x->n_marks = 0;
}

int outbox_mem10_begin(void *handle, outbox_diag_t *d)
{
    mem10_handle_t *h = handle;
    if (h->tx.id != 0)
        return H->error(d, OUTBOX_EINVAL, "mem10: a transaction is already open on this handle");
    pthread_mutex_lock(&h->store->mu);
    h->tx.id = ++h->store->transactions;
    pthread_mutex_unlock(&h->store->mu);
    return OUTBOX_OK;
}

/* The tables the transaction wrote to, unless one was dropped meanwhile. */
static int tx_tables(mem10_handle_t *h, mem10_table_t **t, mem10_table_t **c, outbox_diag_t *d)
{
    const mem10_tx_t *x = &h->tx;
    *t = x->n_rows > 0 ? outbox_mem10_table_find(h->store, h->relation) : NULL;
    *c = x->n_marks > 0 ? outbox_mem10_table_find(h->store, h->checkpoint_relation) : NULL;
    if (x->n_rows > 0 && (*t == NULL || (*t)->generation != x->table_gen))
        return H->error(d, OUTBOX_ESCHEMA,
                        "mem10: %s was dropped while the transaction was open; nothing was committed",
                        h->relation);
    if (x->n_marks > 0 && (*c == NULL || (*c)->generation != x->ckpt_gen))
        return H->error(d, OUTBOX_ESCHEMA,
                        "mem10: %s was dropped while the transaction was open; nothing was committed",
                        h->checkpoint_relation);
    return OUTBOX_OK;
}

int outbox_mem10_commit(void *handle, outbox_diag_t *d)
{
    mem10_handle_t *h = handle;
    mem10_tx_t *x = &h->tx;
    if (x->id == 0)
        return H->error(d, OUTBOX_EINVAL, "mem10: commit: no transaction is open on this handle");
    pthread_mutex_lock(&h->store->mu);
    mem10_table_t *t, *c;
    int rc = tx_tables(h, &t, &c, d);
    if (rc != OUTBOX_OK) {
        tx_discard(h); /* a failed commit leaves nothing open */
        pthread_mutex_unlock(&h->store->mu);
        return rc;
    }
    /* Room for all of this was made while staging: nothing below fails. */
    for (size_t i = 0; i < x->n_rows; i++) {
        mem10_row_t *r = x->rows[i];
        r->tx = 0;
        r->route->uncommitted--;
        outbox_mem10_table_link(t, r);
    }
    for (size_t i = 0; i < x->n_marks; i++) {
        mem10_mark_t *m = outbox_mem10_mark_find(c->marks, c->n_marks, x->marks[i].node_key);
        if (m != NULL) {
            if (x->marks[i].hlc > m->hlc)
                m->hlc = x->marks[i].hlc;
            H->free(x->marks[i].node_key);
        } else {
            c->marks[c->n_marks++] = x->marks[i];
        }
        c->reserved_marks--;
    }
    x->id = x->table_gen = x->ckpt_gen = 0;
    x->n_rows = x->n_marks = 0;
    pthread_mutex_unlock(&h->store->mu);
    return OUTBOX_OK;
}

int outbox_mem10_rollback(void *handle, outbox_diag_t *d)
{
    mem10_handle_t *h = handle;
    if (h->tx.id == 0)
        return H->error(d, OUTBOX_EINVAL, "mem10: rollback: no transaction is open on this handle");
    pthread_mutex_lock(&h->store->mu);
    tx_discard(h);
    pthread_mutex_unlock(&h->store->mu);
    return OUTBOX_OK;
}

void outbox_mem10_handle_reset(mem10_handle_t *h)
{
    if (h->tx.id != 0) {
        pthread_mutex_lock(&h->store->mu);
        tx_discard(h);
        pthread_mutex_unlock(&h->store->mu);
    }
    H->free(h->tx.rows);
    H->free(h->tx.marks);
    memset(&h->tx, 0, sizeof h->tx);
    H->free(h->claimed);
    h->claimed = NULL;
}

/* ----------------------------------------------------- checkpoint marks */

/* v with room for need elements of elem bytes (*cap updated), or NULL
 * without memory, v then being left as it was. */
static void *grow(void *v, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap && v != NULL)
        return v;
    size_t n = *cap ? *cap : 8;
    while (n < need) {
        if (n > SIZE_MAX / 2 / elem)
            return NULL;
        n *= 2;
    }
    void *p = H->realloc(v, n * elem);
    if (p != NULL)
        *cap = n;
    return p;
}

/* The two arrays a checkpoint advance may have to grow. */
static int grow_marks(mem10_mark_t **v, size_t *cap, size_t need)
{
    mem10_mark_t *p = grow(*v, cap, need, sizeof **v);
    if (p == NULL)
        return OUTBOX_ENOMEM;
    *v = p;
    return OUTBOX_OK;
}

/* A pending advance of node_key: prepared (room made, key copied) before
 * anything changes, then put, which cannot fail. key_copy stays NULL when
 * the key already has a mark (or, in a transaction, a held advance). */
typedef struct mark_op {
    mem10_table_t *c;
    const char *node_key;
    char *key_copy;
} mark_op_t;

static int mark_prepare(mem10_handle_t *h, mark_op_t *op, outbox_diag_t *d)
{
    mem10_tx_t *x = &h->tx;
    mem10_table_t *c = op->c;
    op->key_copy = NULL;
    if (x->id != 0) {
        if (x->n_marks > 0 && x->ckpt_gen != c->generation)
            return H->error(d, OUTBOX_ESCHEMA,
                            "mem10: %s was dropped and created again during this transaction",
                            c->name);
        if (outbox_mem10_mark_find(x->marks, x->n_marks, op->node_key) != NULL)
            return OUTBOX_OK;
        if (grow_marks(&x->marks, &x->cap_marks, x->n_marks + 1) != OUTBOX_OK)
            return H->error(d, OUTBOX_ENOMEM, "mem10: out of memory");
    } else if (outbox_mem10_mark_find(c->marks, c->n_marks, op->node_key) != NULL) {
        return OUTBOX_OK;
    }
    /* A new key needs a slot in the table; in a transaction it is kept
     * (reserved) for the commit, which may find the key new too. */
    if (grow_marks(&c->marks, &c->cap_marks, c->n_marks + c->reserved_marks + 1) != OUTBOX_OK)
        return H->error(d, OUTBOX_ENOMEM, "mem10: out of memory");
    if ((op->key_copy = outbox_mem10_strdup(op->node_key)) == NULL)
        return H->error(d, OUTBOX_ENOMEM, "mem10: out of memory");
    return OUTBOX_OK;
}

/* The max-upsert itself: in the table now, or held in the transaction
 * until commit applies it as max() against what the table has by then. */
static void mark_put(mem10_handle_t *h, mark_op_t *op, int64_t hlc)
{
    mem10_tx_t *x = &h->tx;
    mem10_table_t *c = op->c;
    int in_tx = x->id != 0;
    mem10_mark_t *v = in_tx ? x->marks : c->marks;
    size_t *n = in_tx ? &x->n_marks : &c->n_marks;
    mem10_mark_t *m = outbox_mem10_mark_find(v, *n, op->node_key);
    if (m != NULL) {
        if (hlc > m->hlc)
            m->hlc = hlc;
        return;
    }
    v[(*n)++] = (mem10_mark_t){op->key_copy, hlc};
    op->key_copy = NULL;
    if (in_tx) {
        c->reserved_marks++;
        x->ckpt_gen = c->generation;
    }
}

/* ----------------------------------------------------------------- stage */

static int ctx_ok(const mem10_handle_t *h, const outbox_stage_ctx_t *ctx, outbox_diag_t *d)
{
    if (ctx == NULL || ctx->struct_size < sizeof *ctx)
        return H->error(d, OUTBOX_EINVAL, "mem10: stage context: struct_size not set");
    if (ctx->native_tx != NULL)
        return H->error(d, OUTBOX_ENOTSUP,
                        "mem10 has no native transaction handles: use the handle's own transaction");
    if ((ctx->in_own_tx != 0) != (h->tx.id != 0))
        return H->error(d, OUTBOX_EINVAL, "mem10: %s",
                        ctx->in_own_tx ? "no transaction is open on this handle"
                                       : "a transaction is open on this handle");
    return OUTBOX_OK;
}

static const char *row_missing(const outbox_row_t *r)
{
    return !r->id ? "id" : !r->route ? "route" : !r->event_id ? "event_id"
         : !r->event_type ? "event_type" : !r->payload ? "payload" : NULL;
}

/* Makes room for every row of the call in its route's orders (and in the
 * transaction's list), before anything is written. */
static int stage_room(mem10_handle_t *h, mem10_table_t *t, mem10_row_t **copies, size_t n,
                      outbox_diag_t *d)
{
    mem10_route_t *prev = NULL;
    for (size_t i = 0; i < n; i++) {
        mem10_route_t *r = prev != NULL && strcmp(prev->name, copies[i]->v.route) == 0
                               ? prev : outbox_mem10_route_get(t, copies[i]->v.route);
        if (r == NULL || (r != prev && outbox_mem10_route_reserve(t, r, n) != OUTBOX_OK))
            return H->error(d, OUTBOX_ENOMEM, "mem10: out of memory");
        copies[i]->route = prev = r;
    }
    mem10_tx_t *x = &h->tx;
    if (x->id != 0) {
        mem10_row_t **v = grow(x->rows, &x->cap_rows, x->n_rows + n, sizeof *x->rows);
        if (v == NULL)
            return H->error(d, OUTBOX_ENOMEM, "mem10: out of memory");
        x->rows = v;
    }
    return OUTBOX_OK;
}

static int stage_locked(mem10_handle_t *h, const outbox_stage_ctx_t *ctx, mem10_row_t **copies,
                        size_t n, size_t *staged, outbox_diag_t *d)
{
    mem10_tx_t *x = &h->tx;
    mem10_table_t *t;
    int rc = outbox_mem10_outbox_table(h, &t, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (x->id != 0 && x->n_rows > 0 && x->table_gen != t->generation)
        return H->error(d, OUTBOX_ESCHEMA,
                        "mem10: %s was dropped and created again during this transaction",
                        h->relation);
    for (size_t i = 0; i < n; i++) {
        const mem10_row_t *held = outbox_mem10_index_find(&t->events, copies[i]->v.route,
                                                          copies[i]->v.event_id);
        if (held != NULL && held->tx != 0 && held->tx != x->id)
            return H->error(d, OUTBOX_ETRANSIENT,
                            "mem10: event %s of route %.64s is being staged by another open "
                            "transaction; retry when it ends",
                            held->v.event_id, held->v.route);
    }
    mark_op_t mark = {.node_key = ctx->checkpoint_node_key};
    if (mark.node_key != NULL && (rc = outbox_mem10_checkpoint_table(h, &mark.c, d)) != OUTBOX_OK)
        return rc;
    if ((rc = stage_room(h, t, copies, n, d)) != OUTBOX_OK ||
        (mark.node_key != NULL && (rc = mark_prepare(h, &mark, d)) != OUTBOX_OK))
        return rc;

    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        mem10_row_t *r = copies[i];
        /* A duplicate: committed, staged earlier in this transaction, or
         * earlier in this very call. */
        if (outbox_mem10_index_find(&t->events, r->v.route, r->v.event_id) != NULL)
            continue;
        if (!t->has_hlc)
            r->v.hlc = 0; /* stored only when the column exists */
        if (!t->has_traceparent)
            r->v.traceparent = NULL;
        outbox_mem10_index_add(&t->events, r);
        if (x->id != 0) {
            r->tx = x->id;
            r->route->uncommitted++;
            x->rows[x->n_rows++] = r;
            x->table_gen = t->generation;
        } else {
            outbox_mem10_table_link(t, r);
        }
        copies[i] = NULL;
        count++;
    }
    if (mark.node_key != NULL)
        mark_put(h, &mark, ctx->max_hlc);
    H->free(mark.key_copy);
    *staged = count;
    return OUTBOX_OK;
}

int outbox_mem10_stage(void *handle, const outbox_stage_ctx_t *ctx, const outbox_row_t *rows,
                       size_t n, size_t *staged, outbox_diag_t *d)
{
    mem10_handle_t *h = handle;
    *staged = 0;
    int rc = ctx_ok(h, ctx, d);
    if (rc != OUTBOX_OK || n == 0)
        return rc;
    if (rows == NULL)
        return H->error(d, OUTBOX_EINVAL, "mem10: stage: no rows given");
    for (size_t i = 0; i < n; i++)
        if (row_missing(&rows[i]) != NULL)
            return H->error(d, OUTBOX_EINVAL, "mem10: row %zu has no %s", i, row_missing(&rows[i]));
    if (n > SIZE_MAX / sizeof(mem10_row_t *))
        return H->error(d, OUTBOX_EINVAL, "mem10: too many rows in one call");
    /* The copies are made before the lock is taken. */
    mem10_row_t **copies = H->alloc(n * sizeof *copies);
    if (copies == NULL)
        return H->error(d, OUTBOX_ENOMEM, "mem10: out of memory");
    memset(copies, 0, n * sizeof *copies);
    for (size_t i = 0; i < n && rc == OUTBOX_OK; i++)
        if ((copies[i] = outbox_mem10_row_new(&rows[i])) == NULL)
            rc = H->error(d, OUTBOX_ENOMEM, "mem10: out of memory");
    if (rc == OUTBOX_OK) {
        pthread_mutex_lock(&h->store->mu);
        rc = stage_locked(h, ctx, copies, n, staged, d);
        pthread_mutex_unlock(&h->store->mu);
    }
    for (size_t i = 0; i < n; i++)
        outbox_mem10_row_free(copies[i]); /* skipped duplicates, or all on failure */
    H->free(copies);
    return rc;
}

/* ----------------------------------------------------------------- claim */

static int row_settled(const mem10_row_t *r)
{
    return r->status == MEM10_PUBLISHED || r->status == MEM10_DEAD;
}

static int row_claimable(const mem10_row_t *r, int64_t now, int64_t lease_us)
{
    if (r->status == MEM10_PENDING)
        return r->v.available_at == 0 || r->v.available_at <= now;
    return r->status == MEM10_PROCESSING && r->processing_at < now - lease_us;
}

/* Walks the route in claim order and picks up to cap rows, obeying the
 * per-key rule: once a row with a key is passed over (in flight, not yet
 * due, or behind such a row), every later row of that key is too. */
static int claim_pick(mem10_order_t *o, size_t cap, int64_t now, int64_t lease_us,
                      mem10_row_t **picked, size_t *n)
{
    mem10_keyset_t blocked = {0};
    int rc = OUTBOX_OK;
    size_t k = 0;
    for (size_t i = o->settled; i < o->n && k < cap && rc == OUTBOX_OK; i++) {
        mem10_row_t *r = o->v[i];
        const char *key = r->v.ordering_key;
        if (row_settled(r) || (key != NULL && outbox_mem10_keyset_has(&blocked, key)))
            continue;
        if (row_claimable(r, now, lease_us))
            picked[k++] = r;
        else if (key != NULL)
            rc = outbox_mem10_keyset_add(&blocked, key);
    }
    outbox_mem10_keyset_fini(&blocked);
    *n = k;
    return rc;
}

static int claim_locked(mem10_handle_t *h, const outbox_claim_req_t *req,
                        const outbox_row_t **rows, size_t *n, outbox_fence_t *fence,
                        outbox_diag_t *d)
{
    mem10_table_t *t;
    int rc = outbox_mem10_outbox_table(h, &t, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (req->hlc_order && !t->has_hlc)
        return H->error(d, OUTBOX_ENOTSUP, "mem10: hlc ordering needs the hlc column on %s",
                        h->relation);
    /* The fence is the processing_at this claim writes, unique in the
     * table even when the clock has not moved since the last claim. */
    int64_t now = H->now_us();
    int64_t stamp = now > t->last_stamp ? now : t->last_stamp + 1;
    t->last_stamp = stamp;
    fence->stamp = stamp;
    mem10_route_t *route = outbox_mem10_route_find(t, req->route);
    if (route == NULL)
        return OUTBOX_OK;
    mem10_order_t *o = req->hlc_order ? &route->by_hlc : &route->by_created;
    while (o->settled < o->n && row_settled(o->v[o->settled]))
        o->settled++;
    size_t cap = o->n - o->settled < req->limit ? o->n - o->settled : req->limit;
    if (cap == 0)
        return OUTBOX_OK;
    mem10_row_t **picked = H->alloc(cap * sizeof *picked);
    size_t k = 0;
    if (picked == NULL || claim_pick(o, cap, now, req->lease_us, picked, &k) != OUTBOX_OK) {
        H->free(picked);
        return H->error(d, OUTBOX_ENOMEM, "mem10: out of memory");
    }
    if (k == 0) {
        H->free(picked);
        return OUTBOX_OK;
    }
    /* The rows go out as copies the handle owns: the table's may change
     * (or go) as soon as the lock is released. */
    size_t size = k * sizeof(outbox_row_t);
    for (size_t i = 0; i < k; i++)
        size += outbox_mem10_row_export_size(picked[i]);
    outbox_row_t *out = H->alloc(size);
    if (out == NULL) {
        H->free(picked);
        return H->error(d, OUTBOX_ENOMEM, "mem10: out of memory");
    }
    char *w = (char *)(out + k);
    for (size_t i = 0; i < k; i++) {
        mem10_row_t *r = picked[i];
        r->status = MEM10_PROCESSING;
        r->processing_at = stamp;
        r->v.attempts++;
        outbox_mem10_row_export(r, &out[i], &w);
    }
    H->free(picked);
    h->claimed = out;
    *rows = out;
    *n = k;
    return OUTBOX_OK;
}

int outbox_mem10_claim(void *handle, const outbox_claim_req_t *req, const outbox_row_t **rows,
                       size_t *n, outbox_fence_t *fence, outbox_diag_t *d)
{
    mem10_handle_t *h = handle;
    *rows = NULL;
    *n = 0;
    memset(fence, 0, sizeof *fence);
    H->free(h->claimed); /* the last claim's rows are the handle's until now */
    h->claimed = NULL;
    if (req == NULL || req->struct_size < sizeof *req || req->route == NULL || req->lease_us < 0)
        return H->error(d, OUTBOX_EINVAL, "mem10: claim needs a route and a lease of 0 or more");
    if (h->tx.id != 0)
        return H->error(d, OUTBOX_EINVAL,
                        "mem10: claim runs on its own: commit or roll back the handle's "
                        "transaction first");
    if (req->limit == 0)
        return OUTBOX_OK;
    pthread_mutex_lock(&h->store->mu);
    int rc = claim_locked(h, req, rows, n, fence, d);
    pthread_mutex_unlock(&h->store->mu);
    return rc;
}

/* ---------------------------------------------------------------- settle */

static void settle_item(mem10_row_t *r, const outbox_settle_item_t *it, char **error, int64_t now)
{
    char *old = r->error;
    switch (it->kind) {
    case OUTBOX_SETTLE_PUBLISHED:
        r->status = MEM10_PUBLISHED;
        r->published_at = now;
        return;
    case OUTBOX_SETTLE_RESCHEDULE:
        r->status = MEM10_PENDING;
        r->v.available_at = it->available_at;
        break;
    case OUTBOX_SETTLE_DEAD:
        r->status = MEM10_DEAD;
        break;
    default: /* RELEASE: the attempt never happened */
        r->status = MEM10_PENDING;
        if (r->v.attempts > 0)
            r->v.attempts--;
        return;
    }
    r->error = *error;
    *error = old; /* freed by the caller, after the lock */
}

int outbox_mem10_settle(void *handle, const outbox_fence_t *fence, outbox_settle_item_t *items,
                        size_t n, size_t *applied, outbox_diag_t *d)
{
    mem10_handle_t *h = handle;
    *applied = 0;
    if (fence == NULL || (items == NULL && n > 0))
        return H->error(d, OUTBOX_EINVAL, "mem10: settle needs a fence and items");
    for (size_t i = 0; i < n; i++) {
        items[i].applied = 0;
        if (items[i].id == NULL || items[i].kind < OUTBOX_SETTLE_PUBLISHED ||
            items[i].kind > OUTBOX_SETTLE_RELEASE)
            return H->error(d, OUTBOX_EINVAL, "mem10: settle item %zu: no id or unknown kind", i);
    }
    if (h->tx.id != 0)
        return H->error(d, OUTBOX_EINVAL,
                        "mem10: settle runs on its own: commit or roll back the handle's "
                        "transaction first");
    if (n == 0)
        return OUTBOX_OK;
    /* Error texts are copied first, so nothing can fail once rows change. */
    char **errors = n <= SIZE_MAX / sizeof *errors ? H->alloc(n * sizeof *errors) : NULL;
    int rc = errors != NULL ? OUTBOX_OK : OUTBOX_ENOMEM;
    if (errors != NULL)
        memset(errors, 0, n * sizeof *errors);
    for (size_t i = 0; i < n && rc == OUTBOX_OK; i++)
        if (items[i].error != NULL && (items[i].kind == OUTBOX_SETTLE_RESCHEDULE ||
                                       items[i].kind == OUTBOX_SETTLE_DEAD) &&
            (errors[i] = outbox_mem10_strdup(items[i].error)) == NULL)
            rc = OUTBOX_ENOMEM;
    size_t count = 0;
    if (rc == OUTBOX_OK) {
        pthread_mutex_lock(&h->store->mu);
        mem10_table_t *t;
        rc = outbox_mem10_outbox_table(h, &t, d);
        int64_t now = H->now_us();
        for (size_t i = 0; i < n && rc == OUTBOX_OK; i++) {
            mem10_row_t *r = outbox_mem10_index_find(&t->ids, items[i].id, NULL);
            /* The fence: still processing, under this claim's processing_at. */
            if (r == NULL || r->status != MEM10_PROCESSING || r->processing_at != fence->stamp)
                continue;
            settle_item(r, &items[i], &errors[i], now);
            items[i].applied = 1;
            count++;
        }
        pthread_mutex_unlock(&h->store->mu);
    } else {
        H->error(d, rc, "mem10: out of memory");
    }
    for (size_t i = 0; errors != NULL && i < n; i++)
        H->free(errors[i]);
    H->free(errors);
    *applied = count;
    return rc;
}

/* ----------------------------------------------------------- checkpoints */

int outbox_mem10_checkpoint_advance(void *handle, const outbox_stage_ctx_t *ctx,
                                    const char *node_key, int64_t hlc, outbox_diag_t *d)
{
    mem10_handle_t *h = handle;
    int rc = ctx_ok(h, ctx, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (node_key == NULL)
        return H->error(d, OUTBOX_EINVAL, "mem10: checkpoint advance needs a node key");
    pthread_mutex_lock(&h->store->mu);
    mark_op_t mark = {.node_key = node_key};
    rc = outbox_mem10_checkpoint_table(h, &mark.c, d);
    if (rc == OUTBOX_OK)
        rc = mark_prepare(h, &mark, d);
    if (rc == OUTBOX_OK)
        mark_put(h, &mark, hlc);
    pthread_mutex_unlock(&h->store->mu);
    H->free(mark.key_copy);
    return rc;
}

int outbox_mem10_checkpoint_recover(void *handle, int64_t *hlc, outbox_diag_t *d)
{
    mem10_handle_t *h = handle;
    *hlc = 0;
    pthread_mutex_lock(&h->store->mu);
    mem10_table_t *c;
    int rc = outbox_mem10_checkpoint_table(h, &c, d);
    int64_t max = 0;
    for (size_t i = 0; rc == OUTBOX_OK && i < c->n_marks; i++)
        if (c->marks[i].hlc > max)
            max = c->marks[i].hlc;
    /* A transaction reads its own held advances. */
    if (rc == OUTBOX_OK && h->tx.id != 0 && h->tx.ckpt_gen == c->generation)
        for (size_t i = 0; i < h->tx.n_marks; i++)
            if (h->tx.marks[i].hlc > max)
                max = h->tx.marks[i].hlc;
    pthread_mutex_unlock(&h->store->mu);
    *hlc = max;
    return rc;
}

/* --------------------------------------------------- stats, replay, purge */

static int route_matches(const mem10_route_t *r, const char *route)
{
    return route == NULL || strcmp(r->name, route) == 0;
}

int outbox_mem10_stats(void *handle, const char *route, outbox_stats_t *out, outbox_diag_t *d)
{
    mem10_handle_t *h = handle;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&h->store->mu);
    mem10_table_t *t;
    int rc = outbox_mem10_outbox_table(h, &t, d);
    for (mem10_route_t *r = rc == OUTBOX_OK ? t->routes : NULL; r != NULL; r = r->next) {
        if (!route_matches(r, route))
            continue;
        for (size_t i = 0; i < r->by_created.n; i++) {
            const mem10_row_t *row = r->by_created.v[i];
            switch (row->status) {
            case MEM10_PENDING:
                out->pending++;
                if (out->oldest_pending_created_at == 0 ||
                    row->v.created_at < out->oldest_pending_created_at)
                    out->oldest_pending_created_at = row->v.created_at;
                break;
            case MEM10_PROCESSING:
                out->processing++;
                break;
            case MEM10_PUBLISHED:
                out->published++;
                break;
            default:
                out->dead++;
                break;
            }
        }
    }
    pthread_mutex_unlock(&h->store->mu);
    return rc;
}

static void revive(mem10_row_t *r)
{
    r->status = MEM10_PENDING;
    r->v.attempts = 0;
    r->v.available_at = 0;
    /* last_error stays: an operator still sees why it died */
    r->route->by_created.settled = 0;
    r->route->by_hlc.settled = 0;
}

int outbox_mem10_replay(void *handle, const char *route, const char *event_id, uint64_t *count,
                        outbox_diag_t *d)
{
    mem10_handle_t *h = handle;
    *count = 0;
    pthread_mutex_lock(&h->store->mu);
    mem10_table_t *t;
    int rc = outbox_mem10_outbox_table(h, &t, d);
    if (rc == OUTBOX_OK && route != NULL && event_id != NULL) {
        mem10_row_t *r = outbox_mem10_index_find(&t->events, route, event_id);
        if (r != NULL && r->tx == 0 && r->status == MEM10_DEAD) {
            revive(r);
            (*count)++;
        }
    } else if (rc == OUTBOX_OK) {
        for (mem10_route_t *r = t->routes; r != NULL; r = r->next) {
            for (size_t i = 0; route_matches(r, route) && i < r->by_created.n; i++) {
                mem10_row_t *row = r->by_created.v[i];
                if (row->status == MEM10_DEAD &&
                    (event_id == NULL || strcmp(row->v.event_id, event_id) == 0)) {
                    revive(row);
                    (*count)++;
                }
            }
        }
    }
    pthread_mutex_unlock(&h->store->mu);
    return rc;
}

int outbox_mem10_purge(void *handle, const char *route, int64_t before, uint64_t *count,
                       outbox_diag_t *d)
{
    mem10_handle_t *h = handle;
    *count = 0;
    pthread_mutex_lock(&h->store->mu);
    mem10_table_t *t;
    int rc = outbox_mem10_outbox_table(h, &t, d);
    /* One pass per route: in memory that is the batch, and it holds the
     * lock for no longer than a claim of the same backlog. */
    for (mem10_route_t *r = rc == OUTBOX_OK ? t->routes : NULL; r != NULL; r = r->next) {
        if (!route_matches(r, route))
            continue;
        uint64_t gone = 0;
        for (size_t i = 0; i < r->by_created.n; i++) {
            mem10_row_t *row = r->by_created.v[i];
            if (row->status != MEM10_PUBLISHED || row->published_at >= before)
                continue;
            row->status = MEM10_GONE;
            outbox_mem10_index_remove(&t->ids, row);
            outbox_mem10_index_remove(&t->events, row);
            gone++;
        }
        if (gone == 0)
            continue;
        if (t->has_hlc)
            outbox_mem10_order_compact(&r->by_hlc, 0);
        outbox_mem10_order_compact(&r->by_created, 1); /* frees them */
        *count += gone;
    }
    pthread_mutex_unlock(&h->store->mu);
    return rc;
}
