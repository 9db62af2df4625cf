/* Publishing one claimed batch: each row's message and key group, the calls
 * to the sink (the whole batch to an ordered sink, rounds to any other),
 * and each row's outcome, recorded in the batch for the settle. It touches
 * the sink and the batch only, never the store or the counters, so that
 * the publishing thread of a pipelined run can do it.
 *
 * Per-key FIFO inside a batch: the store hands over a key's rows as a
 * contiguous run from the key's head, in claim order. A sink that declares
 * OUTBOX_SINK_CAP_ORDERED gets the whole batch in one call; any other sink
 * gets it in rounds, as the kit's per-key scheduler (outbox_kit_keys_t)
 * hands them to ordered sinks inside a call: the first holds the first row
 * of every key and every row without a key, each next one the next row of
 * every key whose last row came back OK. Once a row of a key fails (RETRY
 * or REJECT), the key's later rows are released uncharged: they go out in
 * a later batch, after the failed row's verdict is stored. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay_int.h"

/* Record a row's outcome; the error text is prefix followed by why. */
static void decide(batch_t *b, size_t i, int kind, int64_t available_at, const char *prefix,
                   const char *why)
{
    b->items[i].kind = kind;
    b->items[i].available_at = available_at;
    if (prefix != NULL) {
        size_t len = strlen(prefix) + (why ? strlen(why) : 0) + 1;
        free(b->errors[i]);
        b->errors[i] = malloc(len);
        if (b->errors[i] != NULL)
            snprintf(b->errors[i], len, "%s%s", prefix, why ? why : "");
        b->items[i].error = b->errors[i];
    }
}

/* FNV-1a: ordering keys are short strings; the table only groups a batch. */
static size_t key_hash(const char *k)
{
    uint64_t h = 14695981039346656037u;
    for (const unsigned char *p = (const unsigned char *)k; *p != '\0'; p++)
        h = (h ^ *p) * 1099511628211u;
    return (size_t)h;
}

/* The index of the first row of the batch with row i's key (i itself when
 * it is the first), found in the batch's key table in expected O(1). */
static size_t key_group(batch_t *b, size_t i)
{
    const char *key = b->rows[i].ordering_key;
    size_t mask = b->n_slots - 1;
    for (size_t h = key_hash(key) & mask;; h = (h + 1) & mask) {
        if (b->slots[h] == 0) {
            b->slots[h] = i + 1;
            return i;
        }
        size_t leader = b->slots[h] - 1;
        if (strcmp(b->rows[leader].ordering_key, key) == 0)
            return leader;
    }
}

/* Messages and key groups; rows out of attempts are dead at once. */
void outbox_relay_batch_prepare(outbox_relay_t *r, batch_t *b)
{
    for (size_t i = 0; i < b->n; i++) {
        const outbox_row_t *row = &b->rows[i];
        b->items[i].id = row->id;
        const char *key = row->ordering_key ? row->ordering_key : row->event_id;
        outbox_ce_build(row, r->source, key, &b->ce[i]);
        b->msgs[i] = (outbox_message_t){
            .route = row->route,
            .destination = r->destination,
            .key = key,
            .event_id = row->event_id,
            .payload = row->payload,
            .payload_len = row->payload_len,
            .headers = b->ce[i].headers,
            .n_headers = b->ce[i].n,
            .row = row,
        };
        b->group[i] = row->ordering_key != NULL ? key_group(b, i) : SIZE_MAX;
        if (row->attempts > r->cfg.max_attempts) {
            /* Claimed again after crashes: its attempts were spent without an outcome. */
            char why[96];
            snprintf(why, sizeof why, "attempts exhausted (%d of %d) without an outcome",
                     row->attempts - 1, r->cfg.max_attempts);
            decide(b, i, OUTBOX_SETTLE_DEAD, 0, "", why);
        }
    }
}

void outbox_relay_release_undecided(batch_t *b)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->items[i].kind == 0)
            decide(b, i, OUTBOX_SETTLE_RELEASE, 0, NULL, NULL);
}

/* Record one published message's outcome. */
static void take_result(outbox_relay_t *r, batch_t *b, size_t i, const outbox_publish_result_t *res)
{
    size_t g = b->group[i];
    if (g != SIZE_MAX && b->blocked[g]) {
        /* An earlier row of the key failed in this same call. */
        if (res->status == OUTBOX_PUBLISH_OK) {
            outbox_log(OUTBOX_LOG_WARN, "relay %s: sink delivered %s after an earlier row of its key failed",
                       r->route, b->rows[i].event_id);
            decide(b, i, OUTBOX_SETTLE_PUBLISHED, 0, NULL, NULL);
        } else {
            decide(b, i, OUTBOX_SETTLE_RELEASE, 0, NULL, NULL);
        }
        return;
    }
    /* Any failure stops the key for the rest of the batch, a REJECT too:
     * its dead verdict is not stored until the settle, and if the process
     * dies first the row is claimed again and may then be accepted. Had a
     * later row of its key gone out meanwhile, the rejected one would reach
     * the broker after it. */
    if (g != SIZE_MAX && res->status != OUTBOX_PUBLISH_OK)
        b->blocked[g] = 1;
    switch (res->status) {
    case OUTBOX_PUBLISH_OK:
        decide(b, i, OUTBOX_SETTLE_PUBLISHED, 0, NULL, NULL);
        break;
    case OUTBOX_PUBLISH_DEFER:
        /* Stuck outside the message (a partition without a leader): back
         * uncharged, and out of the next claims for backoff_base, so that
         * the stuck keys do not fill every batch while the others could go
         * (their later rows wait behind them by the key rule). */
        decide(b, i, OUTBOX_SETTLE_RELEASE,
               r->cfg.backoff_base_us > 0 ? outbox_now_us() + r->cfg.backoff_base_us : 0, NULL, NULL);
        break;
    case OUTBOX_PUBLISH_REJECT:
        decide(b, i, OUTBOX_SETTLE_DEAD, 0, "rejected: ", res->message);
        break;
    default:
        if (b->rows[i].attempts >= r->cfg.max_attempts) {
            decide(b, i, OUTBOX_SETTLE_DEAD, 0, "max attempts reached, last: ", res->message);
        } else {
            int64_t delay = outbox_backoff_us(r->cfg.backoff_base_us, r->cfg.backoff_cap_us,
                                              b->rows[i].attempts);
            decide(b, i, OUTBOX_SETTLE_RESCHEDULE, outbox_now_us() + delay, "retry: ", res->message);
        }
        break;
    }
}

/* One call of m messages, wave_msgs[0..m) for rows wave_idx[0..m); their
 * outcomes recorded. 1 when every one was RETRY: the sink looked down, and
 * the rest of the batch is released. */
static int publish_wave(outbox_relay_t *r, batch_t *b, size_t m)
{
    outbox_sink_publish(r->sink, b->wave_msgs, m, b->results);
    if (b->traced)
        outbox_relay_trace_results(b, b->results, m);
    size_t retry = 0;
    for (size_t k = 0; k < m; k++)
        retry += b->results[k].status == OUTBOX_PUBLISH_RETRY;
    if (retry == m) {
        outbox_relay_release_undecided(b);
        return 1;
    }
    for (size_t k = 0; k < m; k++)
        take_result(r, b, b->wave_idx[k], &b->results[k]);
    return 0;
}

/* An ordered sink: the whole batch in one call; the sink keeps each key's
 * order and stops a key at its first failure. */
static int publish_ordered(outbox_relay_t *r, batch_t *b)
{
    size_t m = 0;
    for (size_t i = 0; i < b->n; i++)
        if (b->items[i].kind == 0) {
            b->wave_idx[m] = i;
            b->wave_msgs[m++] = b->msgs[i];
        }
    return m > 0 && !atomic_load(&r->stop) ? publish_wave(r, b, m) : 0;
}

/* Any other sink: rounds of one call each, at most one row of a key in a
 * call. The first round holds the first row still to publish of every key
 * and every row without one; the next, the following row of each key
 * whose row came back OK. A key whose row failed gets no next round; its
 * later rows are released with whatever else is left. The chains live in
 * the batch's arrays: nothing is allocated. */
static int publish_rounds(outbox_relay_t *r, batch_t *b)
{
    size_t m = 0;
    for (size_t i = 0; i < b->n; i++) {
        b->next[i] = SIZE_MAX;
        b->last[i] = SIZE_MAX;
    }
    for (size_t i = 0; i < b->n; i++) {
        if (b->items[i].kind != 0)
            continue; /* dead before publishing: not in the chain */
        size_t g = b->group[i];
        if (g != SIZE_MAX && b->last[g] != SIZE_MAX)
            b->next[b->last[g]] = i;
        else
            b->round[m++] = i;
        if (g != SIZE_MAX)
            b->last[g] = i;
    }
    int down = 0;
    while (m > 0 && !down && !atomic_load(&r->stop)) {
        for (size_t k = 0; k < m; k++) {
            b->wave_idx[k] = b->round[k];
            b->wave_msgs[k] = b->msgs[b->round[k]];
        }
        down = publish_wave(r, b, m);
        size_t c = 0;
        for (size_t k = 0; k < m && !down; k++) {
            size_t i = b->wave_idx[k];
            if (b->items[i].kind == OUTBOX_SETTLE_PUBLISHED && b->next[i] != SIZE_MAX) {
                /* In array order: insert it among those found so far. */
                size_t j = c++;
                for (; j > 0 && b->round[j - 1] > b->next[i]; j--)
                    b->round[j] = b->round[j - 1];
                b->round[j] = b->next[i];
            }
        }
        m = c;
    }
    return down;
}

/* Publish the batch; 1 when the sink looked down. What was not published
 * is released. A tracer sees it begin before the first call, with its
 * messages still undecided, and end after the last. */
int outbox_relay_publish_batch(outbox_relay_t *r, batch_t *b)
{
    if (r->tracer.begin != NULL && !atomic_load(&r->stop))
        outbox_relay_trace_begin(r, b);
    int down = outbox_sink_capabilities(r->sink) & OUTBOX_SINK_CAP_ORDERED ? publish_ordered(r, b)
                                                                            : publish_rounds(r, b);
    if (b->traced)
        outbox_relay_trace_end(r, b, down);
    outbox_relay_release_undecided(b);
    return down;
}
