/* The relay's batch arrays, kept from batch to batch (batch.h). */
#include "batch.h"

#include <stdlib.h>
#include <string.h>

/* The key table's size for n rows: a power of two, at least twice n. */
static size_t slots_for(size_t n)
{
    size_t n_slots = 16;
    while (n_slots < 2 * n)
        n_slots *= 2;
    return n_slots;
}

/* Free the per-row arrays (not the arena); cap = 0. */
static void free_arrays(batch_t *b)
{
    free(b->items);
    free(b->ids);
    free(b->msgs);
    free(b->ce);
    free(b->group);
    free(b->slots);
    free(b->blocked);
    free(b->next);
    free(b->last);
    free(b->round);
    free(b->wave_msgs);
    free(b->results);
    free(b->wave_idx);
    free(b->errors);
    free(b->trace_rows);
    free(b->own);
    b->items = NULL;
    b->ids = NULL;
    b->msgs = NULL;
    b->ce = NULL;
    b->group = NULL;
    b->slots = NULL;
    b->blocked = NULL;
    b->next = NULL;
    b->last = NULL;
    b->round = NULL;
    b->wave_msgs = NULL;
    b->results = NULL;
    b->wave_idx = NULL;
    b->errors = NULL;
    b->trace_rows = NULL;
    b->own = NULL;
    b->cap = 0;
}

/* Every array sized for n rows, in place of the smaller ones (their
 * contents are the last batch's, of no further use): all or none. */
static int grow(batch_t *b, size_t n)
{
    free_arrays(b);
    b->items = calloc(n, sizeof *b->items);
    b->ids = calloc(n, sizeof *b->ids);
    b->msgs = calloc(n, sizeof *b->msgs);
    b->ce = calloc(n, sizeof *b->ce);
    b->group = calloc(n, sizeof *b->group);
    b->slots = calloc(slots_for(n), sizeof *b->slots);
    b->blocked = calloc(n, 1);
    b->next = calloc(n, sizeof *b->next);
    b->last = calloc(n, sizeof *b->last);
    b->round = calloc(n, sizeof *b->round);
    b->wave_msgs = calloc(n, sizeof *b->wave_msgs);
    b->results = calloc(n, sizeof *b->results);
    b->wave_idx = calloc(n, sizeof *b->wave_idx);
    b->errors = calloc(n, sizeof *b->errors);
    b->own = calloc(n, sizeof *b->own);
    b->trace_rows = b->want_trace ? calloc(n, sizeof *b->trace_rows) : NULL;
    if (!(b->items && b->ids && b->msgs && b->ce && b->group && b->slots && b->blocked && b->next &&
          b->last && b->round && b->wave_msgs && b->results && b->wave_idx && b->errors && b->own &&
          (b->trace_rows || !b->want_trace))) {
        free_arrays(b);
        return OUTBOX_ENOMEM;
    }
    b->cap = n;
    return OUTBOX_OK;
}

int outbox_batch_fit(batch_t *b)
{
    if (b->n > b->cap && grow(b, b->n > b->presize ? b->n : b->presize) != OUTBOX_OK)
        return OUTBOX_ENOMEM;
    size_t n = b->n;
    b->n_slots = slots_for(n);
    memset(b->items, 0, n * sizeof *b->items);
    memset(b->slots, 0, b->n_slots * sizeof *b->slots);
    memset(b->blocked, 0, n);
    b->publish_us = -1;
    b->published_at = 0;
    b->down = 0;
    b->skipped = 0;
    b->traced = 0;
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

/* The most the row copies' memory is made ready for ahead of need. */
#define ARENA_PRESIZE_MAX ((size_t)4 << 20)

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
        /* Room for a full batch of rows like these, and a quarter more:
         * the next batches' rows differ a little in size. */
        size_t cap = need;
        if (b->presize > b->n && need / b->n < ARENA_PRESIZE_MAX / b->presize)
            cap = need / b->n * b->presize;
        cap = cap <= SIZE_MAX - cap / 4 ? cap + cap / 4 : cap;
        cap = cap > need ? cap : need;
        char *a = malloc(cap);
        if (a == NULL)
            return OUTBOX_ENOMEM;
        free(b->arena);
        b->arena = a;
        b->arena_cap = cap;
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
    free_arrays(b);
    free(b->arena);
    memset(b, 0, sizeof *b);
}
