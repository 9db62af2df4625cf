/* Internals shared by the relay's files: struct outbox_relay, its
 * constants, and the functions one of them calls in another. Calls go
 * downward only: relay_run.c (the loops) -> relay_stages.c (claim,
 * publish, settle; the step) -> relay_publish.c (one batch to the sink)
 * -> relay_trace.c (the tracer's begin and end around it) and
 * relay_report.c (logs, errors, the observer); relay.c (a relay's config,
 * creation and end) calls none of them. */
#ifndef OUTBOX_RELAY_INT_H
#define OUTBOX_RELAY_INT_H

#include <stddef.h>
#include <stdint.h>

#include "batch.h"
#include "outbox_int.h"

/* Under until_idle, the number of consecutive failed steps (each a
 * transient store error or a batch the sink turned down whole) after which
 * the run gives up. With the default pauses the store's eight failures take
 * about 6 s (12 s at worst) and the sink's about a minute (2 at worst):
 * long enough to ride out a restart, short enough for a drain job. */
#define RELAY_IDLE_GIVE_UP 8
/* Without until_idle, a run of failures is warned about at its first
 * failure and then at every this many, so a long one cannot flood the log. */
#define RELAY_WARN_EVERY 10
/* Batches up to this size get their arrays whole at the first claim. */
#define RELAY_PRESIZE_MAX 4096

struct outbox_relay {
    outbox_store_t *store;
    outbox_sink_t *sink;
    outbox_relay_config_t cfg;
    char *route;
    char *source;      /* expanded for route: every claimed row is of this route */
    char *destination; /* likewise */
    atomic_int stop;
    int outage_streak;
    int64_t pause_us; /* set by a step that hit an outage */
    /* The outage being reported: when its first batch was released
     * (monotonic; 0 = none), and how many batches it has released. */
    int64_t outage_since_us;
    uint64_t outage_batches;
    char outage_why[OUTBOX_MESSAGE_MAX]; /* the sink's reason for the last outage batch */
    outbox_relay_counters_t counters;
    outbox_diag_t diag;
    int64_t *lag_us; /* cfg.batch entries, only with an observer */
    outbox_renewer_t *renewer; /* NULL: leases are not renewed */
    /* The config's tracer, copied (begin NULL: none), and the sink's
     * driver name it is told. */
    outbox_relay_tracer_t tracer;
    const char *sink_name;
    /* cfg.pipeline batches, kept from batch to batch; a step uses the first. */
    batch_t *batches;
    size_t *free_slots; /* the pipelined run's batches not in flight */
    /* The pipelined run: the sink looked down, and the publishing thread
     * releases every later batch unpublished until the relay clears it. */
    atomic_int pipe_down;
};

/* Runs of failures, as both loops count them. */
typedef struct streak {
    int errors;   /* consecutive transient store errors: their backoff and log */
    int failures; /* consecutive failed steps of either kind: the until_idle bound */
    int64_t failing_since_us;
} streak_t;

/* relay_report.c */
int outbox_relay_fail(outbox_relay_t *r, int code, const char *fmt, ...) OUTBOX_PRINTF(3, 4);
void outbox_relay_log_start(const outbox_relay_t *r);
void outbox_relay_log_stop(const outbox_relay_t *r, const char *why);
void outbox_relay_log_outage(outbox_relay_t *r, const batch_t *b);
void outbox_relay_log_recovery(outbox_relay_t *r, const batch_t *b);
void outbox_relay_log_batch(const outbox_relay_t *r, size_t claimed,
                            const outbox_relay_counters_t *before, int64_t started_us);
void outbox_relay_log_store_failure(const outbox_relay_t *r, int errors, int64_t pause_us);
void outbox_relay_observe_step(outbox_relay_t *r, outbox_relay_observation_t *o,
                               const outbox_relay_counters_t *before, int rc);

/* relay_trace.c: only called when the relay has a tracer. */
void outbox_relay_trace_begin(outbox_relay_t *r, batch_t *b);
void outbox_relay_trace_results(batch_t *b, const outbox_publish_result_t *res, size_t m);
void outbox_relay_trace_end(outbox_relay_t *r, batch_t *b, int down);

/* relay_publish.c */
void outbox_relay_batch_prepare(outbox_relay_t *r, batch_t *b);
void outbox_relay_release_undecided(batch_t *b);
int outbox_relay_publish_batch(outbox_relay_t *r, batch_t *b);

/* relay_stages.c */
int outbox_relay_claim_stage(outbox_relay_t *r, size_t slot, int own);
void outbox_relay_publish_stage(outbox_relay_t *r, batch_t *b);
int outbox_relay_settle_stage(outbox_relay_t *r, size_t slot);
void outbox_relay_idle_wait(outbox_relay_t *r);
int outbox_relay_store_failed(outbox_relay_t *r, streak_t *s, int64_t *pause);
void outbox_relay_store_answered(outbox_relay_t *r, streak_t *s);
int outbox_relay_sink_failed(outbox_relay_t *r, streak_t *s, int progressed);

#endif
