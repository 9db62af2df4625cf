/* The relay's lease renewer: a thread with a store handle of its own that
 * renews the lease of the rows its relay holds, every third of the lease,
 * for as long as the relay works on them (outbox_store_renew).
 *
 * The relay hands each claimed batch over (hold, in a slot of its own: a
 * pipelined relay holds several) and takes it back before it settles
 * (release), getting the newest fence: each renewal moves the
 * fence, so a relay that lost its rows to another one (its renewals came
 * too late) still loses every settle. release waits for a renewal on the
 * wire, so the relay never settles with a fence that is about to change.
 *
 * A renewal that fails (the store is unreachable) is tried again sooner;
 * if the lease runs out meanwhile, the rows may be claimed by another
 * relay and this one's settle is refused, as without renewal. A renewal
 * whose reply is lost may have moved the fence without telling: the
 * settle is then refused and the rows are delivered again once the lease
 * passes, never lost.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_int.h"

/* One batch handed over. */
typedef struct held {
    int held;   /* a batch is handed over */
    int busy;   /* a renewal of it is on the wire */
    int warned; /* this batch's lost rows were reported */
    outbox_fence_t fence;
    const char *const *ids;
    size_t n;
    int64_t due_us;    /* monotonic: when to renew next */
    int64_t leased_us; /* monotonic: when the lease last began (claim or renewal asked) */
} held_t;

struct outbox_renewer {
    outbox_store_t *store; /* the twin: this thread's alone */
    char *route;
    int64_t every_us;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC */
    /* Under mu. */
    int stop;
    held_t *slots; /* one per batch the relay can hold at once */
    size_t n_slots;
    uint64_t renewals;
};

/* One renewal of batch h; called with mu held, returns with it held. */
static void renew_once(outbox_renewer_t *rn, held_t *h)
{
    outbox_fence_t fence = h->fence;
    const char *const *ids = h->ids;
    size_t n = h->n;
    h->busy = 1;
    pthread_mutex_unlock(&rn->mu);

    int64_t asked_us = outbox_monotonic_us();
    size_t count = 0;
    int rc = outbox_store_renew(rn->store, rn->route, &fence, ids, n, &count);
    char why[OUTBOX_MESSAGE_MAX];
    snprintf(why, sizeof why, "%s", outbox_store_message(rn->store));

    pthread_mutex_lock(&rn->mu);
    h->busy = 0;
    int64_t now = outbox_monotonic_us();
    if (count > 0) {
        h->fence = fence;
        h->leased_us = asked_us;
        rn->renewals++;
    }
    if (rc == OUTBOX_OK || rc == OUTBOX_ECONFLICT) {
        h->due_us = now + rn->every_us;
        if (rc == OUTBOX_ECONFLICT && !h->warned) {
            h->warned = 1;
            outbox_log(OUTBOX_LOG_WARN,
                       "relay %s: lease renewal: %zu of %zu rows were taken over by another relay "
                       "(their lease ran out first)",
                       rn->route, n - count, n);
        }
    } else {
        /* Sooner than the next regular turn: the lease is running out. */
        h->due_us = now + rn->every_us / 3;
        outbox_log(OUTBOX_LOG_WARN, "relay %s: lease renewal failed, trying again in %lld ms: %s", rn->route,
                   (long long)(rn->every_us / 3000), why);
    }
    pthread_cond_broadcast(&rn->cv);
}

/* The held batch due first, or NULL when none is held. */
static held_t *next_due(outbox_renewer_t *rn)
{
    held_t *first = NULL;
    for (size_t i = 0; i < rn->n_slots; i++) {
        held_t *h = &rn->slots[i];
        if (h->held && (first == NULL || h->due_us < first->due_us))
            first = h;
    }
    return first;
}

static void *renewer_main(void *arg)
{
    outbox_renewer_t *rn = arg;
    pthread_mutex_lock(&rn->mu);
    while (!rn->stop) {
        held_t *h = next_due(rn);
        if (h == NULL) {
            pthread_cond_wait(&rn->cv, &rn->mu);
            continue;
        }
        if (outbox_monotonic_us() < h->due_us) {
            outbox_cond_wait_until(&rn->cv, &rn->mu, h->due_us);
            continue;
        }
        renew_once(rn, h);
    }
    pthread_mutex_unlock(&rn->mu);
    return NULL;
}

int outbox_renewer_start(const outbox_store_t *store, const char *route, int64_t every_us,
                         size_t slots, outbox_renewer_t **out, outbox_diag_t *d)
{
    *out = NULL;
    outbox_renewer_t *rn = calloc(1, sizeof *rn);
    if (rn == NULL)
        return outbox_diag_set(d, OUTBOX_ENOMEM, "out of memory");
    rn->route = strdup(route);
    /* A lease shorter than a few milliseconds is a test's: no need to spin. */
    rn->every_us = every_us > 1000 ? every_us : 1000;
    rn->n_slots = slots > 0 ? slots : 1;
    rn->slots = calloc(rn->n_slots, sizeof *rn->slots);
    if (rn->route == NULL || rn->slots == NULL) {
        free(rn->slots);
        free(rn->route);
        free(rn);
        return outbox_diag_set(d, OUTBOX_ENOMEM, "out of memory");
    }
    int rc = outbox_store_twin(store, &rn->store, d);
    if (rc != OUTBOX_OK) {
        free(rn->slots);
        free(rn->route);
        free(rn);
        return rc;
    }
    pthread_mutex_init(&rn->mu, NULL);
    outbox_cond_init_monotonic(&rn->cv);
    if (pthread_create(&rn->thread, NULL, renewer_main, rn) != 0) {
        pthread_cond_destroy(&rn->cv);
        pthread_mutex_destroy(&rn->mu);
        outbox_store_close(rn->store);
        free(rn->slots);
        free(rn->route);
        free(rn);
        return outbox_diag_set(d, OUTBOX_ENOMEM, "cannot start the lease renewal thread");
    }
    *out = rn;
    return OUTBOX_OK;
}

void outbox_renewer_hold(outbox_renewer_t *rn, size_t slot, const outbox_fence_t *fence,
                         const char *const *ids, size_t n, int64_t claimed_us)
{
    pthread_mutex_lock(&rn->mu);
    held_t *h = &rn->slots[slot];
    h->fence = *fence;
    h->ids = ids;
    h->n = n;
    h->held = n > 0;
    h->warned = 0;
    /* The lease began when the claim was asked for: a slow claim leaves
     * less of it, and the first renewal comes that much sooner. */
    h->due_us = claimed_us + rn->every_us;
    h->leased_us = claimed_us;
    pthread_cond_broadcast(&rn->cv);
    pthread_mutex_unlock(&rn->mu);
}

int64_t outbox_renewer_leased_at(outbox_renewer_t *rn, size_t slot)
{
    pthread_mutex_lock(&rn->mu);
    int64_t at = rn->slots[slot].leased_us;
    pthread_mutex_unlock(&rn->mu);
    return at;
}

void outbox_renewer_release(outbox_renewer_t *rn, size_t slot, outbox_fence_t *fence)
{
    pthread_mutex_lock(&rn->mu);
    held_t *h = &rn->slots[slot];
    while (h->busy)
        pthread_cond_wait(&rn->cv, &rn->mu);
    if (h->held)
        *fence = h->fence;
    h->held = 0;
    h->ids = NULL;
    h->n = 0;
    pthread_mutex_unlock(&rn->mu);
}

uint64_t outbox_renewer_count(outbox_renewer_t *rn)
{
    pthread_mutex_lock(&rn->mu);
    uint64_t n = rn->renewals;
    pthread_mutex_unlock(&rn->mu);
    return n;
}

void outbox_renewer_stop(outbox_renewer_t *rn)
{
    if (rn == NULL)
        return;
    pthread_mutex_lock(&rn->mu);
    rn->stop = 1;
    pthread_cond_broadcast(&rn->cv);
    pthread_mutex_unlock(&rn->mu);
    pthread_join(rn->thread, NULL);
    pthread_cond_destroy(&rn->cv);
    pthread_mutex_destroy(&rn->mu);
    outbox_store_close(rn->store);
    free(rn->slots);
    free(rn->route);
    free(rn);
}
