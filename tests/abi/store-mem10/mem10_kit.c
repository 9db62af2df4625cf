/* store-mem10, bottom floor: the in-memory database and the text helpers.
 * Rows, the hash index, claim orders, key sets, tables and checkpoint marks
 * are plain data structures: whoever uses them holds the store's mutex.
 * Named stores are kept in a registry under a mutex of its own (taken
 * before a store's). Memory comes only from the host table. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "mem10_int.h"

MEM10_HIDDEN const outbox_host_t *outbox_mem10_host;

#define H outbox_mem10_host

/* ------------------------------------------------------------------ text */

char *outbox_mem10_strdup(const char *s)
{
    if (s == NULL)
        return NULL;
    size_t n = strlen(s) + 1;
    char *p = H->alloc(n);
    if (p != NULL)
        memcpy(p, s, n);
    return p;
}

static int ident_start(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static size_t ident_len(const char *s)
{
    if (!ident_start(s[0]))
        return 0;
    size_t i = 1;
    while (ident_start(s[i]) || (s[i] >= '0' && s[i] <= '9'))
        i++;
    return i;
}

int outbox_mem10_ident_valid(const char *s)
{
    if (s == NULL || strlen(s) > 255)
        return 0;
    size_t n = ident_len(s);
    if (n == 0)
        return 0;
    if (s[n] == '\0')
        return 1;
    if (s[n] != '.')
        return 0;
    size_t m = ident_len(s + n + 1);
    return m > 0 && s[n + 1 + m] == '\0';
}

void outbox_mem10_buf_add(mem10_buf_t *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (need < 0) {
        b->failed = 1;
        return;
    }
    if (b->len + (size_t)need + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + (size_t)need + 1)
            cap *= 2;
        char *p = H->realloc(b->p, cap);
        if (p == NULL) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)need;
}

/* ------------------------------------------------------------------ rows */

/* The row's text members, so that sizing and copying go over one list. */
enum { ROW_TEXTS = 11 };

static void row_texts(outbox_row_t *v, const char **t[ROW_TEXTS])
{
    const char **all[ROW_TEXTS] = {
        &v->id,           &v->route,        &v->event_id,     &v->event_type,
        &v->tenant_id,    &v->execution_id, &v->correlation_id, &v->causation_id,
        &v->ordering_key, &v->traceparent,  &v->last_error,
    };
    memcpy(t, all, sizeof all);
}

/* Bytes the texts and the payload of v take, NULs included. */
static size_t texts_size(outbox_row_t *v)
{
    const char **t[ROW_TEXTS];
    row_texts(v, t);
    size_t total = v->payload_len + 1;
    for (int i = 0; i < ROW_TEXTS; i++)
        if (*t[i] != NULL)
            total += strlen(*t[i]) + 1;
    return total;
}

/* Copies the texts and the payload of v to *w and points v at the copies. */
static void texts_copy(outbox_row_t *v, char **w)
{
    const char **t[ROW_TEXTS];
    row_texts(v, t);
    for (int i = 0; i < ROW_TEXTS; i++) {
        if (*t[i] == NULL)
            continue;
        size_t n = strlen(*t[i]) + 1;
        memcpy(*w, *t[i], n);
        *t[i] = *w;
        *w += n;
    }
    memcpy(*w, v->payload, v->payload_len);
    (*w)[v->payload_len] = '\0';
    v->payload = *w;
    *w += v->payload_len + 1;
}

mem10_row_t *outbox_mem10_row_new(const outbox_row_t *in)
{
    outbox_row_t v = *in;
    v.payload_len = in->payload_len ? in->payload_len : strlen(in->payload);
    v.last_error = NULL; /* a fresh row has none */
    v.attempts = 0;
    if (v.payload_len > SIZE_MAX / 4)
        return NULL;
    mem10_row_t *r = H->alloc(sizeof *r + texts_size(&v));
    if (r == NULL)
        return NULL;
    memset(r, 0, sizeof *r);
    char *w = r->text;
    texts_copy(&v, &w);
    r->v = v;
    r->status = MEM10_PENDING;
    return r;
}

size_t outbox_mem10_row_export_size(const mem10_row_t *r)
{
    outbox_row_t v = r->v;
    v.last_error = r->error;
    return texts_size(&v);
}

void outbox_mem10_row_export(const mem10_row_t *r, outbox_row_t *out, char **w)
{
    *out = r->v;
    out->last_error = r->error;
    texts_copy(out, w);
}

void outbox_mem10_row_free(mem10_row_t *r)
{
    if (r == NULL)
        return;
    H->free(r->error);
    H->free(r);
}

/* ---------------------------------------------------------- hash index */

#define FNV_OFFSET UINT64_C(1469598103934665603)
#define FNV_PRIME UINT64_C(1099511628211)

static uint64_t hash_text(uint64_t h, const char *s)
{
    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * FNV_PRIME;
    return h;
}

static uint64_t key_hash(const mem10_index_t *ix, const char *a, const char *b)
{
    uint64_t h = hash_text(FNV_OFFSET, a);
    if (ix->by_event)
        h = hash_text((h ^ 0xffu) * FNV_PRIME, b); /* 0xff never occurs in a route or UUID */
    return h;
}

static mem10_row_t **chain_next(const mem10_index_t *ix, mem10_row_t *r)
{
    return ix->by_event ? &r->next_event : &r->next_id;
}

static size_t row_slot(const mem10_index_t *ix, const mem10_row_t *r, size_t n_slots)
{
    uint64_t h = ix->by_event ? key_hash(ix, r->v.route, r->v.event_id) : key_hash(ix, r->v.id, NULL);
    return (size_t)(h & (n_slots - 1));
}

static mem10_row_t **slots_new(size_t n)
{
    mem10_row_t **s = H->alloc(n * sizeof *s);
    if (s != NULL)
        memset(s, 0, n * sizeof *s);
    return s;
}

int outbox_mem10_index_init(mem10_index_t *ix, int by_event)
{
    memset(ix, 0, sizeof *ix);
    ix->by_event = by_event;
    ix->n_slots = 64;
    ix->slots = slots_new(ix->n_slots);
    return ix->slots != NULL ? OUTBOX_OK : OUTBOX_ENOMEM;
}

void outbox_mem10_index_fini(mem10_index_t *ix)
{
    H->free(ix->slots);
    memset(ix, 0, sizeof *ix);
}

mem10_row_t *outbox_mem10_index_find(const mem10_index_t *ix, const char *a, const char *b)
{
    size_t i = (size_t)(key_hash(ix, a, b) & (ix->n_slots - 1));
    for (mem10_row_t *r = ix->slots[i]; r != NULL; r = *chain_next(ix, r)) {
        if (ix->by_event ? strcmp(r->v.route, a) == 0 && strcmp(r->v.event_id, b) == 0
                         : strcmp(r->v.id, a) == 0)
            return r;
    }
    return NULL;
}

/* Doubles the slots when the chains average more than one row. Without
 * memory the chains just get longer. */
static void index_grow(mem10_index_t *ix)
{
    if (ix->count <= ix->n_slots || ix->n_slots > SIZE_MAX / 2 / sizeof *ix->slots)
        return;
    size_t n = ix->n_slots * 2;
    mem10_row_t **s = slots_new(n);
    if (s == NULL)
        return;
    for (size_t i = 0; i < ix->n_slots; i++) {
        mem10_row_t *r = ix->slots[i];
        while (r != NULL) {
            mem10_row_t *next = *chain_next(ix, r);
            size_t j = row_slot(ix, r, n);
            *chain_next(ix, r) = s[j];
            s[j] = r;
            r = next;
        }
    }
    H->free(ix->slots);
    ix->slots = s;
    ix->n_slots = n;
}

void outbox_mem10_index_add(mem10_index_t *ix, mem10_row_t *r)
{
    size_t i = row_slot(ix, r, ix->n_slots);
    *chain_next(ix, r) = ix->slots[i];
    ix->slots[i] = r;
    ix->count++;
    index_grow(ix);
}

void outbox_mem10_index_remove(mem10_index_t *ix, mem10_row_t *r)
{
    mem10_row_t **p = &ix->slots[row_slot(ix, r, ix->n_slots)];
    while (*p != NULL && *p != r)
        p = chain_next(ix, *p);
    if (*p == r) {
        *p = *chain_next(ix, r);
        *chain_next(ix, r) = NULL;
        ix->count--;
    }
}

/* --------------------------------------------------------- claim orders */

static int order_before(const mem10_order_t *o, const mem10_row_t *a, const mem10_row_t *b)
{
    if (o->hlc && a->v.hlc != b->v.hlc) {
        if (a->v.hlc == 0 || b->v.hlc == 0)
            return b->v.hlc == 0; /* NULLS LAST */
        return a->v.hlc < b->v.hlc;
    }
    if (a->v.created_at != b->v.created_at)
        return a->v.created_at < b->v.created_at;
    return strcmp(a->v.id, b->v.id) < 0;
}

int outbox_mem10_order_reserve(mem10_order_t *o, size_t need)
{
    if (need <= o->cap)
        return OUTBOX_OK;
    size_t cap = o->cap ? o->cap : 64;
    while (cap < need) {
        if (cap > SIZE_MAX / 2 / sizeof *o->v)
            return OUTBOX_ENOMEM;
        cap *= 2;
    }
    mem10_row_t **v = H->realloc(o->v, cap * sizeof *v);
    if (v == NULL)
        return OUTBOX_ENOMEM;
    o->v = v;
    o->cap = cap;
    return OUTBOX_OK;
}

void outbox_mem10_order_insert(mem10_order_t *o, mem10_row_t *r)
{
    /* Rows mostly arrive in order: try the end first. */
    size_t pos = o->n;
    if (o->n > 0 && !order_before(o, o->v[o->n - 1], r)) {
        size_t lo = 0, hi = o->n;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (order_before(o, r, o->v[mid]))
                hi = mid;
            else
                lo = mid + 1;
        }
        pos = lo;
        memmove(&o->v[pos + 1], &o->v[pos], (o->n - pos) * sizeof *o->v);
    }
    o->v[pos] = r;
    o->n++;
    if (pos < o->settled)
        o->settled = pos;
}

void outbox_mem10_order_compact(mem10_order_t *o, int free_gone)
{
    size_t kept = 0, settled = 0;
    for (size_t i = 0; i < o->n; i++) {
        mem10_row_t *r = o->v[i];
        if (r->status == MEM10_GONE) {
            if (free_gone)
                outbox_mem10_row_free(r);
            continue;
        }
        if (i < o->settled)
            settled++;
        o->v[kept++] = r;
    }
    o->n = kept;
    o->settled = settled;
}

/* ------------------------------------------------------------- key sets */

static size_t keyset_slot(const mem10_keyset_t *s, const char *key)
{
    size_t i = (size_t)(hash_text(FNV_OFFSET, key) & (s->cap - 1));
    while (s->slots[i] != NULL && strcmp(s->slots[i], key) != 0)
        i = (i + 1) & (s->cap - 1);
    return i;
}

int outbox_mem10_keyset_has(const mem10_keyset_t *s, const char *key)
{
    return s->n > 0 && s->slots[keyset_slot(s, key)] != NULL;
}

int outbox_mem10_keyset_add(mem10_keyset_t *s, const char *key)
{
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 32;
        if (cap > SIZE_MAX / 2 / sizeof *s->slots)
            return OUTBOX_ENOMEM;
        const char **slots = H->alloc(cap * sizeof *slots);
        if (slots == NULL)
            return OUTBOX_ENOMEM;
        memset(slots, 0, cap * sizeof *slots);
        mem10_keyset_t grown = {slots, cap, 0};
        for (size_t i = 0; i < s->cap; i++)
            if (s->slots[i] != NULL) {
                grown.slots[keyset_slot(&grown, s->slots[i])] = s->slots[i];
                grown.n++;
            }
        H->free(s->slots);
        *s = grown;
    }
    size_t i = keyset_slot(s, key);
    if (s->slots[i] == NULL) {
        s->slots[i] = key;
        s->n++;
    }
    return OUTBOX_OK;
}

void outbox_mem10_keyset_fini(mem10_keyset_t *s)
{
    H->free(s->slots);
    memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------- tables */

mem10_table_t *outbox_mem10_table_new(const char *name, int checkpoint, uint64_t generation)
{
    size_t len = strlen(name) + 1;
    mem10_table_t *t = H->alloc(sizeof *t + len);
    if (t == NULL)
        return NULL;
    memset(t, 0, sizeof *t);
    memcpy(t->name, name, len);
    t->checkpoint = checkpoint;
    t->generation = generation;
    if (!checkpoint && (outbox_mem10_index_init(&t->ids, 0) != OUTBOX_OK ||
                        outbox_mem10_index_init(&t->events, 1) != OUTBOX_OK)) {
        outbox_mem10_table_free(t);
        return NULL;
    }
    return t;
}

void outbox_mem10_table_free(mem10_table_t *t)
{
    if (t == NULL)
        return;
    /* The event index holds every row, the uncommitted ones too. */
    for (size_t i = 0; i < t->events.n_slots; i++) {
        mem10_row_t *r = t->events.slots[i];
        while (r != NULL) {
            mem10_row_t *next = r->next_event;
            outbox_mem10_row_free(r);
            r = next;
        }
    }
    while (t->routes != NULL) {
        mem10_route_t *r = t->routes;
        t->routes = r->next;
        H->free(r->by_created.v);
        H->free(r->by_hlc.v);
        H->free(r);
    }
    outbox_mem10_index_fini(&t->ids);
    outbox_mem10_index_fini(&t->events);
    for (size_t i = 0; i < t->n_marks; i++)
        H->free(t->marks[i].node_key);
    H->free(t->marks);
    H->free(t);
}

int outbox_mem10_table_add_hlc(mem10_table_t *t)
{
    if (t->has_hlc)
        return OUTBOX_OK;
    /* Every row there is has hlc NULL, so the hlc order starts as a copy of
     * the created_at order. All or nothing: */
    for (mem10_route_t *r = t->routes; r != NULL; r = r->next) {
        if (outbox_mem10_order_reserve(&r->by_hlc, r->by_created.n + r->uncommitted) != OUTBOX_OK) {
            for (mem10_route_t *u = t->routes; u != r; u = u->next) {
                H->free(u->by_hlc.v);
                u->by_hlc = (mem10_order_t){.hlc = 1};
            }
            return OUTBOX_ENOMEM;
        }
    }
    for (mem10_route_t *r = t->routes; r != NULL; r = r->next) {
        if (r->by_created.n > 0)
            memcpy(r->by_hlc.v, r->by_created.v, r->by_created.n * sizeof *r->by_created.v);
        r->by_hlc.n = r->by_created.n;
        r->by_hlc.settled = r->by_created.settled;
    }
    t->has_hlc = 1;
    return OUTBOX_OK;
}

mem10_route_t *outbox_mem10_route_find(const mem10_table_t *t, const char *route)
{
    for (mem10_route_t *r = t->routes; r != NULL; r = r->next)
        if (strcmp(r->name, route) == 0)
            return r;
    return NULL;
}

mem10_route_t *outbox_mem10_route_get(mem10_table_t *t, const char *route)
{
    mem10_route_t *r = outbox_mem10_route_find(t, route);
    if (r != NULL)
        return r;
    size_t len = strlen(route) + 1;
    r = H->alloc(sizeof *r + len);
    if (r == NULL)
        return NULL;
    memset(r, 0, sizeof *r);
    memcpy(r->name, route, len);
    r->by_hlc.hlc = 1;
    r->next = t->routes;
    t->routes = r;
    return r;
}

int outbox_mem10_route_reserve(const mem10_table_t *t, mem10_route_t *r, size_t extra)
{
    size_t base = r->by_created.n + r->uncommitted;
    if (extra > SIZE_MAX / 4 - base)
        return OUTBOX_ENOMEM;
    int rc = outbox_mem10_order_reserve(&r->by_created, base + extra);
    if (rc == OUTBOX_OK && t->has_hlc)
        rc = outbox_mem10_order_reserve(&r->by_hlc, base + extra);
    return rc;
}

void outbox_mem10_table_link(mem10_table_t *t, mem10_row_t *r)
{
    outbox_mem10_index_add(&t->ids, r);
    outbox_mem10_order_insert(&r->route->by_created, r);
    if (t->has_hlc)
        outbox_mem10_order_insert(&r->route->by_hlc, r);
}

mem10_mark_t *outbox_mem10_mark_find(mem10_mark_t *marks, size_t n, const char *node_key)
{
    /* A checkpoint table has a handful of node keys, one per relay node. */
    for (size_t i = 0; i < n; i++)
        if (strcmp(marks[i].node_key, node_key) == 0)
            return &marks[i];
    return NULL;
}

/* -------------------------------------------------------- named stores */

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static mem10_store_t *registry;

int outbox_mem10_store_attach(const char *name, mem10_store_t **out, outbox_diag_t *d)
{
    int rc = OUTBOX_OK;
    pthread_mutex_lock(&registry_mu);
    mem10_store_t *s = registry;
    while (s != NULL && strcmp(s->name, name) != 0)
        s = s->next;
    if (s == NULL) {
        size_t len = strlen(name) + 1;
        s = H->alloc(sizeof *s + len);
        if (s == NULL) {
            rc = H->error(d, OUTBOX_ENOMEM, "mem10: out of memory");
        } else {
            memset(s, 0, sizeof *s);
            memcpy(s->name, name, len);
            if (pthread_mutex_init(&s->mu, NULL) != 0) {
                H->free(s);
                s = NULL;
                rc = H->error(d, OUTBOX_ETRANSIENT, "mem10: cannot create the store's mutex");
            } else {
                s->next = registry;
                registry = s;
            }
        }
    }
    if (s != NULL)
        s->handles++;
    pthread_mutex_unlock(&registry_mu);
    *out = s;
    return rc;
}

void outbox_mem10_store_detach(mem10_store_t *s)
{
    pthread_mutex_lock(&registry_mu);
    pthread_mutex_lock(&s->mu);
    int unused = --s->handles == 0 && s->tables == NULL;
    pthread_mutex_unlock(&s->mu);
    if (unused) {
        mem10_store_t **p = &registry;
        while (*p != s)
            p = &(*p)->next;
        *p = s->next;
        pthread_mutex_destroy(&s->mu);
        H->free(s);
    }
    pthread_mutex_unlock(&registry_mu);
}

mem10_table_t *outbox_mem10_table_find(const mem10_store_t *s, const char *name)
{
    if (name == NULL)
        return NULL;
    mem10_table_t *t = s->tables;
    while (t != NULL && strcmp(t->name, name) != 0)
        t = t->next;
    return t;
}

void outbox_mem10_table_drop(mem10_store_t *s, mem10_table_t *t)
{
    mem10_table_t **p = &s->tables;
    while (*p != t)
        p = &(*p)->next;
    *p = t->next;
    outbox_mem10_table_free(t);
}

/* The handle's outbox table, or OUTBOX_ESCHEMA naming it. */
int outbox_mem10_outbox_table(const mem10_handle_t *h, mem10_table_t **t, outbox_diag_t *d)
{
    *t = outbox_mem10_table_find(h->store, h->relation);
    if (*t == NULL)
        return H->error(d, OUTBOX_ESCHEMA,
                        "mem10: relation %s does not exist in store %s (create it with schema apply)",
                        h->relation, h->store->name);
    if ((*t)->checkpoint)
        return H->error(d, OUTBOX_ESCHEMA, "mem10: %s is a checkpoint table, not an outbox table",
                        h->relation);
    return OUTBOX_OK;
}

/* The handle's checkpoint table; an optional part, so OUTBOX_ENOTSUP. */
int outbox_mem10_checkpoint_table(const mem10_handle_t *h, mem10_table_t **c, outbox_diag_t *d)
{
    *c = outbox_mem10_table_find(h->store, h->checkpoint_relation);
    if (*c == NULL || !(*c)->checkpoint)
        return H->error(d, OUTBOX_ENOTSUP, "mem10: no checkpoint table %s in store %s",
                        h->checkpoint_relation ? h->checkpoint_relation : "(none)", h->store->name);
    return OUTBOX_OK;
}

int outbox_mem10_detect(mem10_handle_t *h, int require_table, outbox_diag_t *d)
{
    outbox_diag_t why = {0}, ignored = {0};
    mem10_table_t *t, *c;
    uint32_t caps = 0;
    pthread_mutex_lock(&h->store->mu);
    int rc = outbox_mem10_outbox_table(h, &t, &why);
    if (rc == OUTBOX_OK) {
        caps |= t->has_hlc ? OUTBOX_STORE_CAP_HLC : 0;
        caps |= t->has_traceparent ? OUTBOX_STORE_CAP_TRACEPARENT : 0;
    }
    if (outbox_mem10_checkpoint_table(h, &c, &ignored) == OUTBOX_OK)
        caps |= OUTBOX_STORE_CAP_CHECKPOINT;
    pthread_mutex_unlock(&h->store->mu);
    h->caps = caps;
    if (require_table && rc != OUTBOX_OK)
        return H->error(d, rc, "%s", why.message);
    return OUTBOX_OK;
}
