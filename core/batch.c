/* The relay's batch arrays, kept from batch to batch (batch.h). */
#include "batch.h"

#include <stdlib.h>
#include <string.h>

/* Every array sized for n rows, allocated together: all or none. */
static int grow(batch_t *b, size_t n)
{
    size_t n_slots = 16;
    while (n_slots < 2 * n)
        n_slots *= 2;
    batch_t g = {0};
    g.items = calloc(n, sizeof *g.items);
    g.ids = calloc(n, sizeof *g.ids);
    g.msgs = calloc(n, sizeof *g.msgs);
    g.ce = calloc(n, sizeof *g.ce);
    g.group = calloc(n, sizeof *g.group);
    g.slots = calloc(n_slots, sizeof *g.slots);
    g.blocked = calloc(n, 1);
    g.sched = calloc(n, sizeof *g.sched);
    g.sched_idx = calloc(n, sizeof *g.sched_idx);
    g.wave_msgs = calloc(n, sizeof *g.wave_msgs);
    g.results = calloc(n, sizeof *g.results);
    g.wave_idx = calloc(n, sizeof *g.wave_idx);
    g.errors = calloc(n, sizeof *g.errors);
    g.own = calloc(n, sizeof *g.own);
    if (!(g.items && g.ids && g.msgs && g.ce && g.group && g.slots && g.blocked && g.sched &&
          g.sched_idx && g.wave_msgs && g.results && g.wave_idx && g.errors && g.own)) {
        outbox_batch_free(&g);
        return OUTBOX_ENOMEM;
    }
    /* The new arrays replace the old ones; the rows and what the stages
     * noted stay (the arena too: own[] is refilled from it by the next
     * outbox_batch_own). */
    batch_t keep = *b;
    keep.arena = NULL; /* not freed with the old arrays */
    keep.n = 0;
    outbox_batch_free(&keep);
    g.n = b->n;
    g.rows = b->rows;
    g.fence = b->fence;
    g.cap = n;
    g.arena = b->arena;
    g.arena_cap = b->arena_cap;
    g.claimed_us = b->claimed_us;
    g.claim_us = b->claim_us;
    *b = g;
    return OUTBOX_OK;
}

int outbox_batch_fit(batch_t *b)
{
    if (b->n > b->cap && grow(b, b->n) != OUTBOX_OK)
        return OUTBOX_ENOMEM;
    size_t n = b->n;
    b->n_slots = 16;
    while (b->n_slots < 2 * n)
        b->n_slots *= 2;
    memset(b->items, 0, n * sizeof *b->items);
    memset(b->slots, 0, b->n_slots * sizeof *b->slots);
    memset(b->blocked, 0, n);
    b->publish_us = -1;
    b->published_at = 0;
    b->down = 0;
    b->skipped = 0;
    b->nomem = 0;
    return OUTBOX_OK;
}

void outbox_batch_clear(batch_t *b)
{
    for (size_t i = 0; b->errors != NULL && i < b->n; i++) {
        free(b->errors[i]);
        b->errors[i] = NULL;
    }
    b->n = 0;
    b->rows = NULL;
}

/* The bytes a string takes in the arena, its NUL included. */
static size_t text_len(const char *s)
{
    return s != NULL ? strlen(s) + 1 : 0;
}

/* Copy len bytes of s to the arena at *used, then a NUL. */
static const char *put(char *arena, size_t *used, const char *s, size_t len)
{
    if (s == NULL)
        return NULL;
    char *at = arena + *used;
    memcpy(at, s, len);
    at[len] = '\0';
    *used += len + 1;
    return at;
}

#define ROW_TEXTS(X)                                                                               \
    X(id) X(route) X(event_id) X(event_type) X(tenant_id) X(execution_id) X(correlation_id)          \
        X(causation_id) X(ordering_key) X(traceparent) X(last_error)

int outbox_batch_own(batch_t *b)
{
    if (b->rows == b->own)
        return OUTBOX_OK;
    size_t need = 0;
    for (size_t i = 0; i < b->n; i++) {
        const outbox_row_t *r = &b->rows[i];
#define SIZE_OF(f) need += text_len(r->f);
        ROW_TEXTS(SIZE_OF)
#undef SIZE_OF
        need += r->payload != NULL ? r->payload_len + 1 : 0;
    }
    if (need > b->arena_cap) {
        char *a = malloc(need);
        if (a == NULL)
            return OUTBOX_ENOMEM;
        free(b->arena);
        b->arena = a;
        b->arena_cap = need;
    }
    size_t used = 0;
    for (size_t i = 0; i < b->n; i++) {
        const outbox_row_t *r = &b->rows[i];
        outbox_row_t *o = &b->own[i];
        *o = *r;
#define COPY(f) o->f = put(b->arena, &used, r->f, r->f != NULL ? strlen(r->f) : 0);
        ROW_TEXTS(COPY)
#undef COPY
        o->payload = put(b->arena, &used, r->payload, r->payload_len);
    }
    b->rows = b->own;
    return OUTBOX_OK;
}

void outbox_batch_free(batch_t *b)
{
    outbox_batch_clear(b);
    free(b->items);
    free(b->ids);
    free(b->msgs);
    free(b->ce);
    free(b->group);
    free(b->slots);
    free(b->blocked);
    free(b->sched);
    free(b->sched_idx);
    free(b->wave_msgs);
    free(b->results);
    free(b->wave_idx);
    free(b->errors);
    free(b->own);
    free(b->arena);
    memset(b, 0, sizeof *b);
}
