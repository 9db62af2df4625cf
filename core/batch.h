/* A relay's batch: the rows of one claim and everything publishing and
 * settling them needs, in arrays kept from batch to batch.
 *
 * A batch is reused: outbox_batch_fit() grows its arrays only for a claim
 * larger than any before, and clears what the last batch left, so a relay
 * in its steady state allocates nothing per batch. */
#ifndef OUTBOX_BATCH_H
#define OUTBOX_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "outbox_int.h"

typedef struct batch {
    size_t n;
    const outbox_row_t *rows; /* the store's, or own[] once the batch owns them */
    outbox_fence_t fence;
    outbox_settle_item_t *items;
    const char **ids; /* the rows' ids, for the renewer */
    outbox_message_t *msgs;
    outbox_ce_headers_t *ce;
    size_t *group; /* index of the first row sharing this row's key; SIZE_MAX: no key */
    size_t *slots; /* key hash table: 1 + the group leader's index, 0 = free */
    size_t n_slots; /* a power of two, at least twice n */
    unsigned char *blocked; /* per group leader: an earlier row of the key failed */
    size_t *next;  /* the next row of this row's key still to publish; SIZE_MAX: none */
    size_t *last;  /* per group leader: its key's last row linked so far */
    size_t *round; /* one round's rows (a sink that is not ordered) */
    outbox_message_t *wave_msgs; /* one call's messages */
    outbox_publish_result_t *results;
    size_t *wave_idx;
    char **errors; /* messages kept for the settle call */
    const outbox_row_t **trace_rows; /* with a tracer only: the rows handed to the sink */
    size_t cap;    /* rows every array above holds */
    size_t presize; /* rows to make room for at the first growth (0: the claim's) */
    int want_trace; /* the relay has a tracer: grow trace_rows with the rest */
    /* Copies of the rows and their strings (outbox_batch_own). */
    outbox_row_t *own;
    char *arena;
    size_t arena_cap;
    /* What the stages noted, for the settle and the observer. */
    int64_t claimed_us;   /* monotonic: when the claim was asked for */
    int64_t claim_us;     /* the claim's duration */
    int64_t publish_us;   /* the publish's duration; -1: not published */
    int64_t published_at; /* wall clock at the end of publishing */
    int in_flight;        /* 1: claimed and not yet settled (a pipelined run) */
    int down;             /* 1: the sink looked down (the breaker released it) */
    int skipped;          /* 1: released unpublished: the sink was down or a stop came */
    /* The tracer's view of the batch while it is published (relay_trace.c). */
    int traced;           /* 1: begin() took the batch: end() is due */
    outbox_relay_span_t span;
    void *span_handle;
    char span_tp[OUTBOX_TRACEPARENT_LEN + 1];
    char span_error[OUTBOX_MESSAGE_MAX];
} batch_t;

/* Ready the batch for the b->n rows just claimed: its arrays grown if
 * they are too small (to b->presize rows if that is more), its outcomes
 * and key table cleared. OUTBOX_ENOMEM leaves it without arrays (cap 0);
 * the next claim tries again. */
int outbox_batch_fit(batch_t *b);
/* After the settle: free the error texts; n = 0. */
void outbox_batch_clear(batch_t *b);
/* Copy the claimed rows into the batch, so that they outlive the store's
 * next claim; OUTBOX_ENOMEM leaves them the store's. The copies' memory
 * grows with room for b->presize rows like these (up to a few MiB). */
int outbox_batch_own(batch_t *b);
void outbox_batch_free(batch_t *b);

#endif
