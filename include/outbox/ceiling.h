/* outbox/ceiling.h: a store driver's benchmark ceiling, for outbox-bench.
 *
 * A ceiling is what the driver's claim and mark-published cost by
 * themselves: the driver's own statements, run by a bare loop that does
 * nothing else (no relay, no sink, no copy of the rows), so that
 * outbox-bench can say which share of it the relay reaches. It lives beside
 * its driver (drivers/store-NAME/ceiling.c), is compiled with the driver's
 * own sources (-DOUTBOX_DRIVER_STATIC) into outbox-bench only, and builds
 * its statements with the driver's own functions: a change to the driver's
 * SQL is a change to its ceiling. The bench registers the driver it was
 * built with (outbox_driver_register), so the relay it measures runs the
 * same code.
 *
 * The bench owns the threads and the clock: each worker is opened (and its
 * statements prepared) before the clock starts, then steps until the
 * backlog is published.
 *
 * Part of the source tree, not of the installed SDK: a driver kept
 * elsewhere is measured with outbox-bench --driver PATH --no-ceiling.
 *
 * Every int entry returns 0, or OUTBOX_CEILING_FAIL / OUTBOX_CEILING_USAGE
 * (bad input: a table the bench did not create, a URI the ceiling cannot
 * serve) with one line in err, no program name. */
#ifndef OUTBOX_CEILING_H
#define OUTBOX_CEILING_H

#include <stddef.h>
#include <stdint.h>

#include "outbox/driver.h"
#include "outbox/outbox.h"

enum { OUTBOX_CEILING_FAIL = 1, OUTBOX_CEILING_USAGE = 2 };

/* What one worker drains. */
typedef struct outbox_ceiling_job {
    uint32_t struct_size; /* sizeof(outbox_ceiling_job_t) */
    const char *relation; /* the copy of the backlog this drain empties */
    const char *route;
    long batch;
    int64_t lease_us; /* the relay's lease: the claim's takeover cut */
    int reference;    /* 1: the plain reference claim + mark, not the driver's */
} outbox_ceiling_job_t;

typedef struct outbox_store_ceiling {
    uint32_t struct_size; /* sizeof(outbox_store_ceiling_t) */
    const char *name;     /* the driver's name */
    /* The driver the ceiling was compiled with (its OUTBOX_DRIVER_STATIC
     * entry), for outbox_driver_register. */
    const outbox_driver_t *(*driver)(void);
    /* 1 when the ceiling runs in the bench's process, so its CPU time
     * compares with the relay's. */
    int in_process;
    /* 1 when the workers (or drain) also run the reference claim + mark
     * (job->reference): plainer than the driver's, for scale against
     * numbers measured elsewhere. */
    int has_reference;

    /* The bench's own connection, for everything around the drains. The
     * bench drops and recreates its relations, so claim_relation records
     * each one it creates and refuses an existing table it did not create;
     * drop_relation drops one of its own and forgets it. */
    int (*open)(const char *uri, void **db, char *err, size_t errlen);
    void (*close)(void *db);
    int (*claim_relation)(void *db, const char *relation, char *err, size_t errlen);
    int (*drop_relation)(void *db, const char *relation, char *err, size_t errlen);
    /* Copies every row of from into the empty table to. */
    int (*copy)(void *db, const char *from, const char *to, char *err, size_t errlen);
    /* Rows of relation whose status is status. */
    int (*count)(void *db, const char *relation, const char *status, long *count, char *err,
                 size_t errlen);
    /* The same quiet state before every drain of relation (SQLite: an empty
     * WAL); relation NULL: the whole store, after the run. */
    int (*quiesce)(void *db, const char *relation, char *err, size_t errlen);

    /* A worker: a connection of its own with its statements ready. */
    int (*worker_open)(void *db, const outbox_ceiling_job_t *job, void **worker, char *err,
                       size_t errlen);
    /* One claim of job->batch rows and one mark of those rows published, as
     * the driver runs them; *published the rows marked (0: nothing was
     * claimable just now). */
    int (*worker_step)(void *worker, long *published, char *err, size_t errlen);
    void (*worker_close)(void *worker);

    /* Optional (NULL: the bench's own loop over worker_open/step/close).
     * A ceiling driven by a client outside the bench's process (pgbench
     * running a script built from the driver's statements) runs the whole
     * drain itself: workers connections at job->batch until events rows of
     * job->relation are published. It fills the drain's wall seconds and
     * the client's CPU seconds. */
    int (*drain)(void *db, const outbox_ceiling_job_t *job, long workers, long events,
                 double *seconds, double *cpu_s, char *err, size_t errlen);
    /* Optional: check at run time that the driver still runs the
     * statements the ceiling runs. trace_start() before the bench opens a
     * store and runs a relay over a few rows of relation, trace_check()
     * after closing it; *verified = 0 when the driver's statements could
     * not be observed, an error when they differ. */
    void (*trace_start)(void);
    int (*trace_check)(const char *relation, int *verified, char *err, size_t errlen);
    /* Optional (NULL: count() of pending rows, the rest -1): the pending
     * backlog and, from the server's statistics, dead and live tuples and
     * how often autovacuum has run on relation (sustained mode). */
    int (*stats)(void *db, const char *relation, long *pending, long *dead, long *live,
                 long *autovacuums, char *err, size_t errlen);
    /* Optional (NULL: refused): per-table autovacuum settings for a
     * relation that is drained as fast as it fills. */
    int (*autovacuum)(void *db, const char *relation, char *err, size_t errlen);
    /* Optional (NULL: refused): drops the indexes the shipped schema adds
     * to the canonical table, leaving the primary key, the unique
     * (route, event_id) and the claim index. */
    int (*canonical_only)(void *db, const char *relation, char *err, size_t errlen);
} outbox_store_ceiling_t;

/* A sink driver's producer ceiling: a bare client of its broker (or
 * receiver), configured from the sink URI by the driver's own code, that
 * sends messages in the driver's own wire format (headers named and
 * encoded by the driver's own builders) and nothing else: no relay, no
 * store, no retries. It lives beside its driver (drivers/sink-NAME/
 * ceiling.c), compiled with the driver's sources into outbox-bench only.
 *
 * The bench owns the clock: open before it, publish in chunks of the
 * bench's batch, each returning once the broker has acknowledged every
 * message of the chunk (as the relay waits before it marks rows), close
 * after. The messages are the ones the relay handed a sink for the same
 * backlog. */
typedef struct outbox_sink_ceiling {
    uint32_t struct_size; /* sizeof(outbox_sink_ceiling_t) */
    const char *name;     /* the driver's name, its URI scheme */
    const outbox_driver_t *(*driver)(void);
    /* The client library and its version ("librdkafka 2.0.2"). */
    const char *(*client)(void);
    int (*open)(const char *sink_uri, void **producer, char *err, size_t errlen);
    int (*publish)(void *producer, const outbox_message_t *msgs, size_t n, char *err,
                   size_t errlen);
    void (*close)(void *producer);
} outbox_sink_ceiling_t;

/* For a ceiling's own files (core/ceiling.c). outbox_ceiling_store_open
 * opens uri with the store driver the ceiling was compiled with (driver,
 * which the caller registered first; name is its registered name) on
 * relation with flags; outbox_ceiling_sink_open opens the sink uri the
 * same way, so that the core's URI parser and the driver's own open
 * configure and connect it. Each hands back the driver's own handle and,
 * in *s or *k, the host's handle to close. A URI the driver refuses is
 * OUTBOX_CEILING_USAGE, any other failure OUTBOX_CEILING_FAIL, with the
 * driver's one line in err (secrets masked as the driver masks them). */
OUTBOX_API int outbox_ceiling_store_open(const outbox_driver_t *driver, const char *name,
                                         const char *uri, const char *relation, uint32_t flags,
                                         outbox_store_t **s, void **handle, char *err,
                                         size_t errlen);
OUTBOX_API int outbox_ceiling_sink_open(const outbox_driver_t *driver, const char *name,
                                        const char *uri, outbox_sink_t **k, void **handle,
                                        char *err, size_t errlen);

#endif
