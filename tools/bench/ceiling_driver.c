/* outbox-bench: which store ceiling (outbox/ceiling.h, beside its driver)
 * serves a store URI, and the one loop that drives any such ceiling: a
 * thread per worker, each opened before the clock starts, then stepping
 * until the backlog is published (or the ceiling's own drain, for one run
 * by a client outside this process).
 *
 * The ceiling was compiled with the driver's sources; the driver it was
 * built with is registered first, so the relay the bench measures against
 * it runs the same code. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <outbox/ceiling.h>

#include "bench.h"

/* A relay's default lease (outbox_relay_config_init): the claim's cut. */
#define CEILING_LEASE_US (30 * 1000000LL)

/* The ceiling's codes are the bench's exit statuses. */
_Static_assert((int)OUTBOX_CEILING_FAIL == (int)BENCH_EXIT_FAIL &&
                   (int)OUTBOX_CEILING_USAGE == (int)BENCH_EXIT_USAGE,
               "ceiling and bench exit codes differ");

extern const outbox_store_ceiling_t outbox_ceiling_sqlite;
#ifdef OUTBOX_BENCH_POSTGRES
extern const outbox_store_ceiling_t outbox_ceiling_postgres;
#endif
#ifdef OUTBOX_BENCH_MONGO
extern const outbox_store_ceiling_t outbox_ceiling_mongo;
#endif

/* By URI scheme. */
static const bench_scheme_t ceilings[] = {
    {"sqlite", &outbox_ceiling_sqlite},
#ifdef OUTBOX_BENCH_POSTGRES
    {"postgres", &outbox_ceiling_postgres},
    {"postgresql", &outbox_ceiling_postgres},
#endif
#ifdef OUTBOX_BENCH_MONGO
    {"mongodb", &outbox_ceiling_mongo},
#endif
    {NULL, NULL},
};

const outbox_store_ceiling_t *bench_ceiling_for(const char *uri)
{
    return bench_scheme_find(ceilings, uri);
}

int bench_ceiling_open(const outbox_store_ceiling_t *c, const char *uri, void **db, char *err,
                       size_t errlen)
{
    *db = NULL;
    outbox_diag_t d = {0};
    if (c->driver && outbox_driver_register(c->driver(), &d) != OUTBOX_OK) {
        snprintf(err, errlen, "the %s ceiling's driver: %s", c->name, d.message);
        return BENCH_EXIT_FAIL;
    }
    return c->open(uri, db, err, errlen);
}

/* ------------------------------------------------------ the bare loop */

typedef struct worker {
    const outbox_store_ceiling_t *c;
    void *db;
    outbox_ceiling_job_t job;
    long events;
    int64_t poll_us;
    atomic_long *published;
    bench_gate_t *start;
    int rc;
    char err[512];
} worker_t;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    pthread_setname_np(pthread_self(), "bench-ceiling"); /* for perf and top */
    void *cw = NULL;
    w->rc = w->c->worker_open(w->db, &w->job, &cw, w->err, sizeof w->err);
    if (!bench_gate_wait(w->start)) {
        if (cw)
            w->c->worker_close(cw);
        return NULL;
    }
    bench_idle_t idle = BENCH_IDLE_INIT;
    while (w->rc == 0 && atomic_load(w->published) < w->events) {
        long n = 0;
        w->rc = w->c->worker_step(cw, &n, w->err, sizeof w->err);
        if (w->rc == 0 && n > 0) {
            atomic_fetch_add(w->published, n);
        } else if (w->rc == 0 && bench_idle_wait(&idle, w->published, w->events, w->poll_us)) {
            snprintf(w->err, sizeof w->err,
                     "stalled: nothing published for %lld s, %ld of %ld published",
                     BENCH_STALL_US / 1000000, atomic_load(w->published), w->events);
            w->rc = BENCH_EXIT_FAIL;
        }
    }
    if (cw)
        w->c->worker_close(cw);
    return NULL;
}

static int bare_drain(void *db, const bench_opts_t *o, const char *relation, int reference,
                      bench_drain_t *out, char *err, size_t errlen)
{
    worker_t *w = calloc((size_t)o->workers, sizeof *w);
    if (!w) {
        snprintf(err, errlen, "out of memory");
        return BENCH_EXIT_FAIL;
    }
    atomic_long published;
    atomic_init(&published, 0);
    bench_team_t team;
    for (long i = 0; i < o->workers; i++)
        w[i] = (worker_t){.c = o->ceiling, .db = db, .events = o->events, .poll_us = o->poll_us,
                          .published = &published, .start = &team.gate,
                          .job = {.struct_size = sizeof w[i].job, .relation = relation,
                                  .route = BENCH_ROUTE, .batch = o->batch,
                                  .lease_us = CEILING_LEASE_US, .reference = reference}};
    /* Every worker is connected and its statements prepared before the
     * clock starts. */
    int rc = bench_team_start(&team, o->workers, worker_main, w, sizeof *w, err, errlen);
    long started = team.started;
    bench_team_finish(&team, rc == 0, &out->seconds, &out->cpu_s);
    for (long i = 0; i < started && rc == 0; i++)
        if (w[i].rc != 0) {
            snprintf(err, errlen, "%s: %s", reference ? "reference" : "ceiling", w[i].err);
            rc = w[i].rc;
        }
    free(w);
    return rc;
}

int bench_ceiling_drain(const bench_opts_t *o, void *db, const char *relation, int reference,
                        bench_drain_t *out, char *err, size_t errlen)
{
    if (!o->ceiling->drain)
        return bare_drain(db, o, relation, reference, out, err, errlen);
    const outbox_ceiling_job_t job = {.struct_size = sizeof job, .relation = relation,
                                      .route = BENCH_ROUTE, .batch = o->batch,
                                      .lease_us = CEILING_LEASE_US, .reference = reference};
    return o->ceiling->drain(db, &job, o->workers, o->events, &out->seconds, &out->cpu_s, err,
                             errlen);
}
