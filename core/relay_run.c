/* The relay loop of SPEC 5: claim a batch, publish it, settle every row in
 * one round trip. outbox_relay_run runs it until a stop request (under
 * until_idle, until nothing is left to claim or the failures last too
 * long): one step after another (run_loop), or with up to cfg.pipeline
 * batches in flight and a publishing thread of their own (run_pipelined).
 * Both count their runs of failures with the helpers of relay_stages.c. */
#include "pipeline.h"
#include "relay_int.h"

/* ------------------------------------------------------------ the loop */

/* The loop of outbox_relay_run; *why says why it ended well. */
static int run_loop(outbox_relay_t *r, const char **why)
{
    streak_t s = {0};
    while (!atomic_load(&r->stop)) {
        size_t claimed = 0;
        uint64_t published = r->counters.published;
        int rc = outbox_relay_step(r, &claimed);
        if (rc != OUTBOX_OK && rc != OUTBOX_ETRANSIENT)
            return rc;
        if (rc == OUTBOX_ETRANSIENT) {
            int64_t pause = 0;
            if ((rc = outbox_relay_store_failed(r, &s, &pause)) != OUTBOX_OK)
                return rc;
            outbox_sleep_us(pause, &r->stop);
            continue;
        }
        if (r->pause_us > 0) {
            if ((rc = outbox_relay_sink_failed(r, &s, r->counters.published > published)) != OUTBOX_OK)
                return rc;
        } else {
            s.failures = 0;
        }
        outbox_relay_store_answered(r, &s);
        if (r->pause_us > 0) {
            outbox_sleep_us(r->pause_us, &r->stop);
        } else if (claimed == 0) {
            if (r->cfg.until_idle) {
                *why = "nothing left to claim";
                return OUTBOX_OK;
            }
            outbox_relay_idle_wait(r);
        }
    }
    return OUTBOX_OK;
}

/* ------------------------------------------------- the pipelined loop
 *
 * Up to cfg.pipeline batches in flight: the publishing thread (pipe_work)
 * publishes them in claim order while this thread settles each one it
 * hands back and claims the next into a free batch. Per-key order needs
 * nothing more: a batch's rows stay in processing until it is settled,
 * and the store never hands out a key that has a row in processing, so a
 * key is in one batch of the pipeline at most, and its next rows are
 * claimed only once that batch's outcomes (a retry's delay, a dead row)
 * are stored. Each batch keeps its own fence, and the renewer holds each
 * from its claim to its settle.
 *
 * When a batch finds the sink down, the publishing thread releases every
 * later batch unpublished; they are settled (uncharged) as they come back.
 * Claims wait for the breaker's pause, then one batch goes alone until the
 * sink answers one. A stop request: no more claims; the batch being
 * published finishes, the later ones go back unpublished, and the run
 * returns once every batch is settled. */

/* The publishing thread of a pipelined run: a batch that comes after the
 * sink looked down, or after a stop request, goes back unpublished. */
static void pipe_work(void *ctx, void *item)
{
    outbox_relay_t *r = ctx;
    batch_t *b = item;
    if (atomic_load(&r->pipe_down) || atomic_load(&r->stop)) {
        b->skipped = 1;
        outbox_relay_release_undecided(b);
        return;
    }
    outbox_relay_publish_stage(r, b);
    if (b->down)
        atomic_store(&r->pipe_down, 1);
}

typedef struct pipe_run {
    outbox_pipe_t *pipe;
    size_t in_flight;
    size_t free_head, n_free; /* r->free_slots as a ring: taken in turn, so
                               * every batch is used within the first claims */
    streak_t streak;
    int64_t resume_us; /* monotonic: no claim before (the breaker, a store error) */
    int probing;       /* after an outage: one batch at a time until the sink answers */
    int empty;         /* the last claim found nothing */
    int rc;            /* a failure that ends the run once every batch is settled */
    const char *why;
} pipe_run_t;

static size_t slot_take(outbox_relay_t *r, pipe_run_t *pr)
{
    size_t slot = r->free_slots[pr->free_head];
    pr->free_head = (pr->free_head + 1) % r->cfg.pipeline;
    pr->n_free--;
    return slot;
}

static void slot_give(outbox_relay_t *r, pipe_run_t *pr, size_t slot)
{
    r->free_slots[(pr->free_head + pr->n_free++) % r->cfg.pipeline] = slot;
}

/* A transient store failure: no claim before the pause has passed. */
static void pipe_store_failed(outbox_relay_t *r, pipe_run_t *pr)
{
    int64_t pause = 0;
    int rc = outbox_relay_store_failed(r, &pr->streak, &pause);
    if (rc != OUTBOX_OK && pr->rc == OUTBOX_OK)
        pr->rc = rc;
    pr->resume_us = outbox_monotonic_us() + pause;
}

/* Settle a batch the publishing thread handed back, and free it. */
static void pipe_settle(outbox_relay_t *r, pipe_run_t *pr, batch_t *b)
{
    size_t slot = (size_t)(b - r->batches);
    int down = b->down, skipped = b->skipped;
    uint64_t published = r->counters.published;
    r->pause_us = 0;
    int rc = outbox_relay_settle_stage(r, slot);
    b->in_flight = 0;
    pr->in_flight--;
    slot_give(r, pr, slot);
    pr->empty = 0; /* its keys are free again, and its retries may be due */
    if (rc != OUTBOX_OK && rc != OUTBOX_ETRANSIENT) {
        if (pr->rc == OUTBOX_OK)
            pr->rc = rc;
        return;
    }
    if (rc == OUTBOX_ETRANSIENT) {
        pipe_store_failed(r, pr);
        return;
    }
    if (down) {
        pr->probing = 1;
        pr->resume_us = outbox_monotonic_us() + r->pause_us;
        rc = outbox_relay_sink_failed(r, &pr->streak, r->counters.published > published);
        if (rc != OUTBOX_OK && pr->rc == OUTBOX_OK)
            pr->rc = rc;
    } else if (!skipped) {
        pr->probing = 0;
        pr->streak.failures = 0;
    }
    outbox_relay_store_answered(r, &pr->streak);
}

/* 1 when a batch in flight has less than a third of its lease left: a
 * claim now could take its rows again (a claim takes rows whose lease ran
 * out, a relay's own among them), so the relay waits for that batch to be
 * settled or renewed first. With renewal this happens only when renewals
 * fall behind; without, it keeps the pipeline short enough for the lease. */
static int lease_at_risk(outbox_relay_t *r)
{
    int64_t now = outbox_monotonic_us();
    for (size_t i = 0; i < r->cfg.pipeline; i++) {
        const batch_t *b = &r->batches[i];
        if (!b->in_flight)
            continue;
        int64_t leased = r->renewer != NULL ? outbox_renewer_leased_at(r->renewer, i) : b->claimed_us;
        if (now - leased > r->cfg.lease_us - r->cfg.lease_us / 3)
            return 1;
    }
    return 0;
}

/* Claim the next batch and hand it to the publishing thread. */
static void pipe_claim(outbox_relay_t *r, pipe_run_t *pr)
{
    if (pr->in_flight == 0)
        atomic_store(&r->pipe_down, 0); /* every batch the outage caught is settled */
    size_t slot = slot_take(r, pr);
    outbox_diag_clear(&r->diag);
    int rc = outbox_relay_claim_stage(r, slot, 1);
    if (rc != OUTBOX_OK || r->batches[slot].n == 0)
        slot_give(r, pr, slot);
    if (rc == OUTBOX_ETRANSIENT) {
        pipe_store_failed(r, pr);
        return;
    }
    if (rc != OUTBOX_OK) {
        pr->rc = rc;
        return;
    }
    outbox_relay_store_answered(r, &pr->streak);
    pr->empty = r->batches[slot].n == 0;
    if (pr->empty)
        return;
    r->batches[slot].in_flight = 1;
    outbox_pipe_put(pr->pipe, &r->batches[slot]);
    pr->in_flight++;
}

static int run_pipelined(outbox_relay_t *r, const char **why)
{
    pipe_run_t pr = {.n_free = r->cfg.pipeline};
    for (size_t i = 0; i < r->cfg.pipeline; i++)
        r->free_slots[i] = i;
    if (outbox_pipe_start(r->cfg.pipeline, pipe_work, r, &pr.pipe) != OUTBOX_OK)
        return outbox_relay_fail(r, OUTBOX_ENOMEM, "relay: cannot start the publishing thread");
    /* A stop request is noticed within this. */
    const int64_t slice_us = 100000;
    for (;;) {
        batch_t *b;
        while ((b = outbox_pipe_take(pr.pipe, 0)) != NULL)
            pipe_settle(r, &pr, b);
        int64_t now = outbox_monotonic_us();
        if (atomic_load(&r->stop) || pr.rc != OUTBOX_OK || pr.why != NULL) {
            if (pr.in_flight == 0)
                break;
            if ((b = outbox_pipe_take(pr.pipe, now + slice_us)) != NULL)
                pipe_settle(r, &pr, b);
            continue;
        }
        if (now < pr.resume_us || pr.n_free == 0 ||
            (pr.in_flight > 0 && (pr.probing || pr.empty || lease_at_risk(r)))) {
            /* Wait for a batch to settle (it frees a batch, and its keys),
             * or for the pause to pass, or for a renewal: with batches in
             * flight, in tenths of a short lease (1 ms at least). */
            int64_t step = slice_us;
            if (pr.in_flight > 0 && r->cfg.lease_us / 10 < step)
                step = r->cfg.lease_us / 10 > 1000 ? r->cfg.lease_us / 10 : 1000;
            int64_t until = now + step;
            if (now < pr.resume_us && pr.resume_us < until)
                until = pr.resume_us;
            if ((b = outbox_pipe_take(pr.pipe, until)) != NULL)
                pipe_settle(r, &pr, b);
            continue;
        }
        if (pr.empty) {
            /* Nothing claimable, nothing in flight. */
            if (r->cfg.until_idle) {
                pr.why = "nothing left to claim";
                continue;
            }
            outbox_relay_idle_wait(r);
            pr.empty = 0;
            continue;
        }
        pipe_claim(r, &pr);
    }
    outbox_pipe_stop(pr.pipe);
    if (pr.why != NULL)
        *why = pr.why;
    return pr.rc;
}

int outbox_relay_run(outbox_relay_t *r)
{
    if (r == NULL)
        return OUTBOX_EINVAL;
    outbox_relay_log_start(r);
    const char *why = "stop requested";
    int rc = r->cfg.pipeline > 1 ? run_pipelined(r, &why) : run_loop(r, &why);
    outbox_relay_log_stop(r, rc == OUTBOX_OK ? why : "on an error");
    return rc;
}
