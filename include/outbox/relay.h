/* liboutbox: the relay, and the store operations a relay is built from.
 *
 * outbox_relay_* runs the loop of claim, publish and settle on one route;
 * outbox_store_claim, _settle, _checkpoint_* and _wait_for are its steps,
 * for a relay of your own and for tests. An application that only stages
 * events needs none of this. Included by outbox/outbox.h; the conventions
 * (errors, durations, threads) are stated there.
 */
#ifndef OUTBOX_RELAY_H
#define OUTBOX_RELAY_H

#include "outbox/outbox.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------- store steps of a relay */

/* Take up to req->limit claimable rows of req->route atomically, in claim
 * order and obeying the per-key rule, under a lease of req->lease_us.
 * *rows (n of them) belong to the handle until its next claim or close;
 * fence identifies this claim for settle. n = 0: nothing claimable.
 * Errors: OUTBOX_EINVAL (route, limit 0, lease not above 0), OUTBOX_ENOTSUP
 * (hlc_order without the hlc column). */
OUTBOX_API int outbox_store_claim(outbox_store_t *s, const outbox_claim_req_t *req,
                                  const outbox_row_t **rows, size_t *n, outbox_fence_t *fence);
/* Apply each item's outcome (published, reschedule, dead, release) to its
 * row if the row still holds fence, in one round trip; items[i].applied
 * says which were, *applied (may be NULL) how many.
 * Errors: OUTBOX_ECONFLICT when some item no longer held the fence (its
 * row was claimed again after the lease ran out; the others are applied),
 * OUTBOX_EINVAL (an item without an id or with an unknown kind). */
OUTBOX_API int outbox_store_settle(outbox_store_t *s, const outbox_fence_t *fence,
                                   outbox_settle_item_t *items, size_t n, size_t *applied);
/* Renew the lease of rows a claim gave: each of ids[0..n) that still
 * holds *fence gets a fresh lease and a new fence, written to *fence (use
 * it for the next renew and for settle); *renewed (may be NULL) says how
 * many. A relay calls it while it publishes, every third of the lease, so
 * a slow publish never loses its rows to another relay.
 * Errors: OUTBOX_ECONFLICT when some rows no longer held the fence (the
 * rest were renewed and *fence moved), OUTBOX_ENOTSUP (the driver cannot
 * renew: the rows keep their lease), OUTBOX_EINVAL (route, a NULL id). */
OUTBOX_API int outbox_store_renew(outbox_store_t *s, const char *route, outbox_fence_t *fence,
                                  const char *const *ids, size_t n, size_t *renewed);
/* Raise node_key's checkpoint to hlc (never lowers it), in native_tx when
 * given, else in the handle's transaction or one of its own.
 * Errors: OUTBOX_EINVAL (node key, negative hlc), OUTBOX_ENOTSUP (no
 * checkpoint table). */
OUTBOX_API int outbox_store_checkpoint_advance(outbox_store_t *s, void *native_tx,
                                               const char *node_key, int64_t hlc);
/* The highest checkpoint of any node, into *hlc (0: none).
 * Errors: OUTBOX_ENOTSUP (no checkpoint table). */
OUTBOX_API int outbox_store_checkpoint_recover(outbox_store_t *s, int64_t *hlc);
/* Wait up to timeout_us (rounded up to whole milliseconds) for new rows on
 * route: the store's push wake-up when it has one (OUTBOX_STORE_CAP_WAIT),
 * else a plain sleep. OUTBOX_OK either way; a wake-up may be spurious. */
OUTBOX_API int outbox_store_wait_for(outbox_store_t *s, const char *route, int64_t timeout_us);

/* -------------------------------------------------------------- relay */


typedef struct outbox_relay outbox_relay_t;

struct outbox_relay_observation;
struct outbox_relay_tracer;

typedef struct outbox_relay_config {
    uint32_t struct_size;     /* sizeof(outbox_relay_config_t) */
    const char *route;        /* required */
    size_t batch;             /* default 100 */
    int max_attempts;         /* default 10 */
    /* Durations: each at most OUTBOX_DURATION_MAX_US. */
    int64_t lease_us;         /* 0 (the default): OUTBOX_RELAY_LEASE_RENEWED_US when
                                 the relay renews leases, else OUTBOX_RELAY_LEASE_US */
    int64_t poll_us;          /* default 100 ms */
    int64_t backoff_base_us;  /* default 1 s; 0 = retry at once */
    int64_t backoff_cap_us;   /* default 5 min */
    int hlc_order;            /* claim in hlc order */
    const char *source;       /* CloudEvents source; default "/outbox/<route>" */
    const char *destination;  /* template; "{route}" is replaced; default "{route}" */
    int until_idle;           /* outbox_relay_run returns once nothing is claimable, or
                                 after 8 transient failures in a row */
    /* Observer (NULL = none, and nothing is measured for it): called on the
     * relay's thread once per step that claimed, including an empty claim
     * and a failed one, with what the step did. See
     * outbox_relay_observation_t. */
    void (*observe)(void *ctx, const struct outbox_relay_observation *o);
    void *observe_ctx;
    /* 1: never renew leases. By default a relay whose store can renew
     * (outbox_store_renew) renews the rows it holds every third of the
     * lease on a second handle of the store of its own (a second
     * connection), so the lease can be short: a relay that dies holding
     * rows keeps them only that long, while a live one keeps them through
     * any publish. Without renewal the lease must outlast the slowest
     * publish. */
    int no_lease_renewal;
    /* Batches outbox_relay_run() keeps in flight at once, 1 to
     * OUTBOX_RELAY_PIPELINE_MAX (default OUTBOX_RELAY_PIPELINE_DEFAULT). Above 1, a second thread
     * publishes while the relay's own thread settles the batch before and
     * claims the one after, so the store and the sink work at the same
     * time. Per-key order holds as with 1: a key with a row in flight is
     * not claimed again until that row's outcome is stored. Each batch's
     * lease must cover its whole stay in the pipeline: lease renewal does
     * that, and the relay claims nothing while a batch it holds has less
     * than a third of its lease left (without renewal, a short lease thus
     * keeps the pipeline short). outbox_relay_step() always works on one
     * batch. */
    size_t pipeline;
    /* Tracer (NULL = none: nothing is measured for it and every message
     * carries its row's own traceparent). Copied by outbox_relay_new(); its
     * ctx must outlive the relay. See outbox_relay_tracer_t. */
    const struct outbox_relay_tracer *tracer;
} outbox_relay_config_t;

/* The default leases (outbox_relay_config_t.lease_us = 0). */
#define OUTBOX_RELAY_LEASE_RENEWED_US 3000000LL
#define OUTBOX_RELAY_LEASE_US 30000000LL

/* What one relay step did (one batch, in a pipelined run), for
 * outbox_relay_config_t.observe. Valid only
 * during the call (copy what you keep). Counts are of this step only and
 * follow the same rules as outbox_relay_counters_t. */
typedef struct outbox_relay_observation {
    uint32_t struct_size;    /* sizeof(outbox_relay_observation_t) of the library */
    const char *route;
    uint64_t claimed, published, retried, dead, released, fence_lost;
    /* Phase durations, microseconds on the monotonic clock; -1 when the
     * phase did not run (publish and settle after an empty or failed claim,
     * settle after an out-of-memory batch). publish_us covers every publish
     * call of the batch. */
    int64_t claim_us, publish_us, settle_us;
    int outage;              /* 1: the breaker released this batch (the sink looked down) */
    int breaker_open;        /* 1: the last batch published was released by the breaker */
    int ok;                  /* 0: the claim or the settle failed */
    /* When !ok, the relay's message (outbox_relay_message()); on an outage,
     * the sink's reason; "" otherwise. Masked like every library message. */
    const char *error;
    /* Commit-to-publish lag of each row published in this step: the wall
     * clock at the end of publishing minus the row's created_at, in us. */
    const int64_t *lag_us;
    size_t n_lag;
} outbox_relay_observation_t;

/* ------------------------------------------------------------ tracing
 *
 * A tracer sees each batch the relay publishes: begin() right before the
 * batch's first publish call, end() after its last, both on the thread
 * that publishes (the relay's own, or the publishing thread of a
 * pipelined run). begin() may give the batch a W3C traceparent, the
 * context of a "publish" span the tracer records: every message of the
 * batch then carries it as its traceparent header instead of its row's
 * own, so consumers continue the publish span's trace; the rows' own
 * contexts are the tracer's to keep as span links. Relays on several
 * threads call one tracer concurrently. The relay allocates nothing for
 * a tracer per batch; a tracer should not block (export elsewhere). */

/* The length of a W3C traceparent of version 00, "00-<32 hex>-<16 hex>-<2 hex>". */
#define OUTBOX_TRACEPARENT_LEN 55

/* One batch as a tracer sees it. Valid only during the call (copy what you
 * keep); the same struct is passed to begin() and then to end(), which
 * finds the members marked "end" filled in. */
typedef struct outbox_relay_span {
    uint32_t struct_size;    /* sizeof(outbox_relay_span_t) of the library */
    const char *route;
    const char *destination; /* the route's destination, its template expanded */
    const char *sink;        /* the sink driver's name: "kafka", "amqp", "file", ... */
    /* The messages the batch hands to the sink (rows dead-lettered before
     * publishing are not among them): rows[0..n_messages), in claim
     * order. rows[i]->traceparent is the row's own trace context (NULL:
     * none), rows[i]->event_id its event. */
    size_t n_messages;
    const outbox_row_t *const *rows;
    /* end: the wall clock, microseconds since the epoch, at begin() and
     * after the last publish call. */
    int64_t start_us, end_us;
    /* end: what the sink said of each message (they add up to n_messages):
     * OK, RETRY (every message of a call the breaker took for an outage
     * included), REJECT, DEFER; unsent were never handed to the sink (held
     * back behind a failed row of their key, released after an outage or
     * at a stop). */
    uint64_t ok, retried, rejected, deferred, unsent;
    int outage;              /* end: 1 when the breaker released the batch (the sink looked down) */
    /* end: the sink's reason for the first message that was not OK; ""
     * when every one was. */
    const char *error;
    /* end: what begin() wrote into traceparent ("" when nothing). */
    const char *traceparent;
} outbox_relay_span_t;

typedef struct outbox_relay_tracer {
    uint32_t struct_size; /* sizeof(outbox_relay_tracer_t) */
    /* Whether to trace this batch: non-zero to have end() called for it,
     * 0 to leave it alone (end() is not called and the messages keep their
     * rows' traceparents). To have the messages carry the publish span's
     * context, write it into traceparent (OUTBOX_TRACEPARENT_LEN characters
     * and a NUL); leave traceparent[0] NUL to keep the rows' own. The relay
     * checks the form and ignores one that is not W3C trace context of
     * version 00. *span (NULL on entry) is handed back to end(). */
    int (*begin)(void *ctx, const outbox_relay_span_t *s, char traceparent[OUTBOX_TRACEPARENT_LEN + 1],
                 void **span);
    /* The batch's publish is over; s has its end members. */
    void (*end)(void *ctx, const outbox_relay_span_t *s, void *span);
    void *ctx;
} outbox_relay_tracer_t;

/* The largest batch a relay claims at once (outbox_relay_config_t.batch). */
#define OUTBOX_RELAY_BATCH_MAX 100000
/* The most batches a relay keeps in flight (outbox_relay_config_t.pipeline),
 * and the default. */
#define OUTBOX_RELAY_PIPELINE_MAX 16
#define OUTBOX_RELAY_PIPELINE_DEFAULT 4

/* Fill cfg with the defaults (route NULL) and struct_size. */
OUTBOX_API void outbox_relay_config_init(outbox_relay_config_t *cfg);

typedef struct outbox_relay_counters {
    uint64_t claimed, published, retried, dead, released, fence_lost, outages;
} outbox_relay_counters_t;

/* A relay on store and sink (borrowed: both must outlive it) for
 * cfg->route. Errors: OUTBOX_EINVAL (cfg's struct_size not set, no route,
 * batch outside 1..OUTBOX_RELAY_BATCH_MAX, pipeline outside
 * 1..OUTBOX_RELAY_PIPELINE_MAX, max_attempts below 1, a negative
 * lease, a poll not above 0, a duration above OUTBOX_DURATION_MAX_US, backoff
 * cap below base, a tracer without its struct_size, begin or end),
 * OUTBOX_ENOTSUP (hlc_order without the hlc column). d (may
 * be NULL) says why. With lease renewal, it opens the store's second handle
 * here; if that fails, the relay runs without renewal and logs why. */
OUTBOX_API int outbox_relay_new(outbox_store_t *store, outbox_sink_t *sink,
                                const outbox_relay_config_t *cfg, outbox_relay_t **out,
                                outbox_diag_t *d);
OUTBOX_API void outbox_relay_free(outbox_relay_t *r);
/* One cycle: claim a batch, publish it, settle it. *claimed (may be NULL)
 * = rows claimed (0 = nothing was claimable). A sink that retries every
 * message is not an error: the batch is released and the next step waits.
 * Errors: what the claim or the settle returned (OUTBOX_ETRANSIENT: try
 * again), OUTBOX_ENOMEM; outbox_relay_message() says why. */
OUTBOX_API int outbox_relay_step(outbox_relay_t *r, size_t *claimed);
/* Loop until outbox_relay_stop() (or, with until_idle, until idle), with
 * cfg.pipeline batches in flight. Returns OUTBOX_OK after a graceful stop
 * with nothing left in processing by it (every batch in flight settled).
 * Transient failures (store errors, a sink that retries every message) are
 * retried for as long as they last; with until_idle, 8 in a row end the run
 * with OUTBOX_ETRANSIENT and outbox_relay_message() naming the last one. */
OUTBOX_API int outbox_relay_run(outbox_relay_t *r);
/* Ask a running outbox_relay_run() to return after the current step (the
 * batch being published; later batches of a pipeline are released). Safe
 * from any thread and async-signal-safe; NULL is a no-op. */
OUTBOX_API void outbox_relay_stop(outbox_relay_t *r);
/* The message of the relay's last failure. */
OUTBOX_API const char *outbox_relay_message(const outbox_relay_t *r);
/* What the relay has done since outbox_relay_new(), into *out. */
OUTBOX_API void outbox_relay_counters(const outbox_relay_t *r, outbox_relay_counters_t *out);

#ifdef __cplusplus
}
#endif
#endif
