/* The stages of a batch and the step that runs them: the claim, the publish,
 * the settle (with the relay's counters and the circuit breaker), and
 * outbox_relay_step. Also what both run loops share between steps: the
 * wait for new rows, and the runs of failures (store errors, outages) with
 * the until_idle bound on them.
 *
 * A round whose every message came back RETRY means the sink is down: the
 * rest of the batch is released uncharged and the relay backs off (the
 * circuit breaker), so an outage never dead-letters healthy events.
 *
 * Transient failures (a store error worth retrying, or such an outage) are
 * retried for as long as they last, except under until_idle: a drain that
 * makes no progress for RELAY_IDLE_GIVE_UP steps in a row returns the last
 * reason instead of waiting for ever (a full disk is transient, but may
 * never clear by itself). */
#include <stdio.h>
#include <stdlib.h>

#include "relay_int.h"

/* ---------------------------------------------------------- the stages
 *
 * A batch goes through three: claim (into one of the relay's batches),
 * publish, settle. A step runs them one after the other; a pipelined run
 * publishes on a thread of its own while its own thread settles and
 * claims. The claim and the settle touch the store and the relay's
 * counters, on the relay's thread only; the publish touches the sink and
 * the batch only. */

/* Claim into batch `slot`; b->n = 0 when nothing was claimable. own: copy
 * the rows, which must outlive the store's next claim. An observed step
 * that ends here (nothing claimed, or a failure) is reported here. */
int outbox_relay_claim_stage(outbox_relay_t *r, size_t slot, int own)
{
    batch_t *b = &r->batches[slot];
    outbox_relay_counters_t before = r->counters;
    b->claimed_us = outbox_monotonic_us();
    outbox_claim_req_t req = {
        .struct_size = sizeof req,
        .route = r->route,
        .limit = r->cfg.batch,
        .lease_us = r->cfg.lease_us,
        .hlc_order = r->cfg.hlc_order,
    };
    int rc = outbox_store_claim(r->store, &req, &b->rows, &b->n, &b->fence);
    b->claim_us = outbox_monotonic_us() - b->claimed_us;
    outbox_relay_observation_t obs = {.claim_us = b->claim_us, .publish_us = -1, .settle_us = -1};
    if (rc != OUTBOX_OK) {
        b->n = 0;
        rc = outbox_relay_fail(r, rc, "claim: %s", outbox_store_message(r->store));
        if (r->cfg.observe != NULL)
            outbox_relay_observe_step(r, &obs, &before, rc);
        return rc;
    }
    if (b->n == 0) {
        if (r->cfg.observe != NULL)
            outbox_relay_observe_step(r, &obs, &before, OUTBOX_OK);
        return OUTBOX_OK;
    }
    r->counters.claimed += b->n;
    rc = outbox_batch_fit(b);
    if (rc == OUTBOX_OK && own)
        rc = outbox_batch_own(b);
    if (rc != OUTBOX_OK) {
        /* Hand the rows back uncharged rather than sit on them until the
         * lease ends: in the batch's items when it has room for them, else
         * in an array of their own if that much memory is left. */
        outbox_settle_item_t *items = b->n <= b->cap ? b->items : calloc(b->n, sizeof *items);
        for (size_t i = 0; items != NULL && i < b->n; i++)
            items[i] = (outbox_settle_item_t){.id = b->rows[i].id, .kind = OUTBOX_SETTLE_RELEASE};
        if (items != NULL)
            outbox_store_settle(r->store, &b->fence, items, b->n, NULL);
        if (items != b->items)
            free(items);
        b->n = 0;
        rc = outbox_relay_fail(r, rc, "relay: out of memory preparing a batch");
        if (r->cfg.observe != NULL)
            outbox_relay_observe_step(r, &obs, &before, rc);
        return rc;
    }
    if (r->renewer != NULL) {
        for (size_t i = 0; i < b->n; i++)
            b->ids[i] = b->rows[i].id;
        outbox_renewer_hold(r->renewer, slot, &b->fence, b->ids, b->n, b->claimed_us);
    }
    outbox_relay_batch_prepare(r, b);
    return OUTBOX_OK;
}

/* Publish a claimed batch; what it did is noted in the batch. */
void outbox_relay_publish_stage(outbox_relay_t *r, batch_t *b)
{
    int64_t t0 = outbox_monotonic_us();
    int down = outbox_relay_publish_batch(r, b);
    b->publish_us = outbox_monotonic_us() - t0;
    b->published_at = outbox_now_us();
    b->down = down;
}

/* The breaker's part of a published batch: an outage opens it (the next
 * claim waits r->pause_us), a batch the sink answered closes it. */
static void breaker(outbox_relay_t *r, batch_t *b)
{
    if (b->down) {
        r->counters.outages++;
        r->outage_streak++;
        int64_t pause = outbox_backoff_us(r->cfg.backoff_base_us, r->cfg.backoff_cap_us, r->outage_streak);
        r->pause_us = pause > r->cfg.poll_us ? pause : r->cfg.poll_us;
        outbox_relay_log_outage(r, b);
    } else if (!b->skipped) {
        r->outage_streak = 0;
        outbox_relay_log_recovery(r, b);
    }
}

static void count_outcomes(outbox_relay_t *r, const batch_t *b)
{
    for (size_t i = 0; i < b->n; i++) {
        if (!b->items[i].applied) {
            r->counters.fence_lost++;
            continue;
        }
        switch (b->items[i].kind) {
        case OUTBOX_SETTLE_PUBLISHED: r->counters.published++; break;
        case OUTBOX_SETTLE_RESCHEDULE: r->counters.retried++; break;
        case OUTBOX_SETTLE_DEAD: r->counters.dead++; break;
        default: r->counters.released++; break;
        }
    }
}

static int settle_batch(outbox_relay_t *r, batch_t *b)
{
    int rc = OUTBOX_ETRANSIENT;
    /* Settling twice is harmless (the fence stops a second change), so a
     * transient failure is retried at once: fewer duplicates later. */
    for (int tries = 0; tries < 3 && rc == OUTBOX_ETRANSIENT; tries++) {
        size_t applied = 0;
        rc = outbox_store_settle(r->store, &b->fence, b->items, b->n, &applied);
        if (rc == OUTBOX_ETRANSIENT)
            outbox_sleep_us(50000 << tries, NULL);
    }
    if (rc == OUTBOX_ECONFLICT) {
        outbox_log(OUTBOX_LOG_WARN, "relay %s: %s (lease expired?)", r->route,
                   outbox_store_message(r->store));
        rc = OUTBOX_OK;
    }
    if (rc != OUTBOX_OK)
        return outbox_relay_fail(r, rc, "settle: %s", outbox_store_message(r->store));
    count_outcomes(r, b);
    return OUTBOX_OK;
}

/* Settle batch `slot` with its own (newest) fence, and report the step. */
int outbox_relay_settle_stage(outbox_relay_t *r, size_t slot)
{
    batch_t *b = &r->batches[slot];
    /* The counters this batch changes, as they were before its claim. */
    outbox_relay_counters_t before = r->counters;
    before.claimed -= b->n;
    /* From here on the fence no longer moves: settle with the newest. */
    if (r->renewer != NULL)
        outbox_renewer_release(r->renewer, slot, &b->fence);
    int observed = r->cfg.observe != NULL;
    outbox_relay_observation_t obs = {
        .claim_us = b->claim_us,
        .publish_us = b->publish_us,
        .outage = b->down || (b->skipped && atomic_load(&r->pipe_down)),
    };
    if (observed && b->publish_us >= 0)
        for (size_t i = 0; i < b->n; i++)
            r->lag_us[i] = b->published_at - b->rows[i].created_at;
    breaker(r, b);
    outbox_relay_release_undecided(b);
    int64_t t0 = outbox_monotonic_us();
    int rc = settle_batch(r, b);
    if (rc == OUTBOX_OK)
        outbox_relay_log_batch(r, b->n, &before, b->claimed_us);
    if (observed) {
        obs.settle_us = outbox_monotonic_us() - t0;
        /* The rows counted as published: applied by the settle. */
        for (size_t i = 0; rc == OUTBOX_OK && b->publish_us >= 0 && i < b->n; i++)
            if (b->items[i].applied && b->items[i].kind == OUTBOX_SETTLE_PUBLISHED)
                r->lag_us[obs.n_lag++] = r->lag_us[i];
        outbox_relay_observe_step(r, &obs, &before, rc);
    }
    outbox_batch_clear(b);
    return rc;
}

int outbox_relay_step(outbox_relay_t *r, size_t *claimed)
{
    if (claimed != NULL)
        *claimed = 0;
    if (r == NULL)
        return OUTBOX_EINVAL;
    outbox_diag_clear(&r->diag);
    r->pause_us = 0;
    if (atomic_load(&r->stop))
        return OUTBOX_OK;
    int rc = outbox_relay_claim_stage(r, 0, 0);
    if (rc != OUTBOX_OK || r->batches[0].n == 0)
        return rc;
    if (claimed != NULL)
        *claimed = r->batches[0].n;
    outbox_relay_publish_stage(r, &r->batches[0]);
    return outbox_relay_settle_stage(r, 0);
}

/* Wait for new rows: the store's push wake-up when it has one, in slices
 * short enough to notice a stop request; otherwise an interruptible poll. */
void outbox_relay_idle_wait(outbox_relay_t *r)
{
    if (!(outbox_store_capabilities(r->store) & OUTBOX_STORE_CAP_WAIT)) {
        outbox_sleep_us(r->cfg.poll_us, &r->stop);
        return;
    }
    int64_t us = r->cfg.poll_us;
    us = us < 1000 ? 1000 : us > 250000 ? 250000 : us;
    outbox_store_wait_for(r->store, r->route, us);
}

/* The end of the run under until_idle after failures consecutive failed
 * steps, the last a store error (store) or an outage: the reason is the
 * last failure's. */
static int give_up(outbox_relay_t *r, int failures, int store)
{
    char last[OUTBOX_MESSAGE_MAX]; /* the store's diag is about to be overwritten */
    snprintf(last, sizeof last, "%s", store ? r->diag.message : r->outage_why);
    return outbox_relay_fail(r, OUTBOX_ETRANSIENT,
                             "giving up on route %s after %d consecutive transient failures "
                             "under until-idle: %s%s",
                             r->route, failures, store ? "" : "sink unavailable: ", last);
}

/* A step or settle that failed with a transient store error (connection
 * trouble, a lock, a full disk): OUTBOX_OK and *pause, how long to back
 * off (the lease protects the rows), or under until_idle the error that
 * ends the run. */
int outbox_relay_store_failed(outbox_relay_t *r, streak_t *s, int64_t *pause)
{
    if (s->errors++ == 0)
        s->failing_since_us = outbox_monotonic_us();
    if (++s->failures >= RELAY_IDLE_GIVE_UP && r->cfg.until_idle)
        return give_up(r, s->failures, 1);
    *pause = outbox_backoff_us(r->cfg.poll_us, 5000000, s->errors) + r->cfg.poll_us;
    outbox_relay_log_store_failure(r, s->errors, *pause);
    return OUTBOX_OK;
}

/* The store answered: a run of its failures is over. */
void outbox_relay_store_answered(outbox_relay_t *r, streak_t *s)
{
    if (s->errors > 0)
        outbox_log(OUTBOX_LOG_INFO, "relay %s: store recovered after %d failure%s in a row (%lld ms)",
                   r->route, s->errors, s->errors == 1 ? "" : "s",
                   (long long)((outbox_monotonic_us() - s->failing_since_us) / 1000));
    s->errors = 0;
}

/* A batch the sink turned down (the breaker released it): a failure, or
 * under until_idle the error that ends the run, unless some of it went
 * out first; that is progress, and ends a run of failures like any other
 * delivery. */
int outbox_relay_sink_failed(outbox_relay_t *r, streak_t *s, int progressed)
{
    if (progressed)
        s->failures = 0;
    else if (++s->failures >= RELAY_IDLE_GIVE_UP && r->cfg.until_idle)
        return give_up(r, s->failures, 0);
    return OUTBOX_OK;
}
