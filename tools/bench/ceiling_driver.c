/* outbox-bench: a store driver's own ceiling (outbox/ceiling.h, beside the
 * driver) as a backend of the bench, and the one loop that drives any such
 * ceiling: a thread per worker, each opened before the clock starts, then
 * stepping until the backlog is published.
 *
 * The ceiling was compiled with the driver's sources; the driver it was
 * built with is registered first, so the relay the bench measures against
 * it runs the same code. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <outbox/ceiling.h>

#include "bench.h"

/* A relay's default lease (outbox_relay_config_init): the claim's cut. */
#define CEILING_LEASE_US (30 * 1000000LL)

typedef struct cdb {
    const outbox_store_ceiling_t *c;
    void *db;
} cdb_t;

/* The ceiling's codes are the bench's exit statuses. */
_Static_assert((int)OUTBOX_CEILING_FAIL == (int)BENCH_EXIT_FAIL &&
                   (int)OUTBOX_CEILING_USAGE == (int)BENCH_EXIT_USAGE,
               "ceiling and bench exit codes differ");

static int open_with(const outbox_store_ceiling_t *c, const char *uri, void **out, char *err,
                     size_t errlen)
{
    *out = NULL;
    outbox_diag_t d = {0};
    if (outbox_driver_register(c->driver(), &d) != OUTBOX_OK) {
        snprintf(err, errlen, "the %s ceiling's driver: %s", c->name, d.message);
        return BENCH_EXIT_FAIL;
    }
    cdb_t *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, errlen, "out of memory");
        return BENCH_EXIT_FAIL;
    }
    w->c = c;
    int rc = c->open(uri, &w->db, err, errlen);
    if (rc != 0) {
        free(w);
        return rc;
    }
    *out = w;
    return 0;
}

static void cd_close(void *db)
{
    cdb_t *w = db;
    if (w)
        w->c->close(w->db);
    free(w);
}

static int cd_claim_relation(void *db, const char *relation, char *err, size_t errlen)
{
    cdb_t *w = db;
    return w->c->claim_relation(w->db, relation, err, errlen);
}

static int cd_drop_relation(void *db, const char *relation, char *err, size_t errlen)
{
    cdb_t *w = db;
    return w->c->drop_relation(w->db, relation, err, errlen);
}

static int cd_copy(void *db, const char *from, const char *to, char *err, size_t errlen)
{
    cdb_t *w = db;
    return w->c->copy(w->db, from, to, err, errlen);
}

static int cd_count(void *db, const char *relation, const char *st, long *count, char *err,
                    size_t errlen)
{
    cdb_t *w = db;
    return w->c->count(w->db, relation, st, count, err, errlen);
}

static int cd_quiesce(void *db, const char *relation, char *err, size_t errlen)
{
    cdb_t *w = db;
    return w->c->quiesce(w->db, relation, err, errlen);
}

static int add_row(void *ctx, const outbox_ceiling_row_t *r)
{
    return bench_msgs_add(ctx, r->event_id, r->ordering_key, r->occurred_us, r->payload,
                          r->payload_len);
}

static int cd_messages(void *db, const char *relation, bench_msgs_t *out, char *err,
                       size_t errlen)
{
    cdb_t *w = db;
    int rc = w->c->messages(w->db, relation, add_row, out, err, errlen);
    if (rc == 0)
        bench_msgs_seal(out);
    return rc;
}

/* ------------------------------------------------------ the bare loop */

typedef struct worker {
    const cdb_t *cdb;
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
    w->rc = w->cdb->c->worker_open(w->cdb->db, &w->job, &cw, w->err, sizeof w->err);
    if (!bench_gate_wait(w->start)) {
        if (cw)
            w->cdb->c->worker_close(cw);
        return NULL;
    }
    bench_idle_t idle = BENCH_IDLE_INIT;
    while (w->rc == 0 && atomic_load(w->published) < w->events) {
        long n = 0;
        w->rc = w->cdb->c->worker_step(cw, &n, w->err, sizeof w->err);
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
        w->cdb->c->worker_close(cw);
    return NULL;
}

/* Joins the started workers; the first failure into err. */
static int join_workers(worker_t *w, pthread_t *tid, long started, int rc, const char *what,
                        char *err, size_t errlen)
{
    for (long i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    for (long i = 0; i < started && rc == 0; i++)
        if (w[i].rc != 0) {
            snprintf(err, errlen, "%s: %s", what, w[i].err);
            rc = w[i].rc;
        }
    return rc;
}

static int bare_drain(void *db, const bench_opts_t *o, const char *relation, int reference,
                      bench_drain_t *out, char *err, size_t errlen)
{
    worker_t *w = calloc((size_t)o->workers, sizeof *w);
    pthread_t *tid = calloc((size_t)o->workers, sizeof *tid);
    if (!w || !tid) {
        free(w);
        free(tid);
        snprintf(err, errlen, "out of memory");
        return BENCH_EXIT_FAIL;
    }
    atomic_long published;
    atomic_init(&published, 0);
    bench_gate_t start;
    bench_gate_init(&start);
    long started = 0;
    for (long i = 0; i < o->workers; i++) {
        w[i] = (worker_t){.cdb = db, .events = o->events, .poll_us = o->poll_us,
                          .published = &published, .start = &start,
                          .job = {.struct_size = sizeof w[i].job, .relation = relation,
                                  .route = BENCH_ROUTE, .batch = o->batch,
                                  .lease_us = CEILING_LEASE_US, .reference = reference}};
        if (pthread_create(&tid[i], NULL, worker_main, &w[i]) != 0)
            break;
        started++;
    }
    int rc = 0;
    if (started < o->workers) {
        snprintf(err, errlen, "cannot start %ld threads", o->workers);
        rc = BENCH_EXIT_FAIL;
    }
    /* Every worker is connected and its statements prepared before the clock starts. */
    bench_gate_open(&start, started, rc == 0);
    double cpu0 = bench_cpu_s();
    int64_t t0 = bench_mono_us();
    rc = join_workers(w, tid, started, rc, reference ? "reference" : "ceiling", err, errlen);
    out->seconds = (double)(bench_mono_us() - t0) / 1e6;
    out->cpu_s = bench_cpu_s() - cpu0;
    bench_gate_destroy(&start);
    free(w);
    free(tid);
    return rc;
}

static int cd_ceiling(void *db, const bench_opts_t *o, const char *relation, bench_drain_t *out,
                      char *err, size_t errlen)
{
    return bare_drain(db, o, relation, 0, out, err, errlen);
}

static int cd_reference(void *db, const bench_opts_t *o, const char *relation,
                        bench_drain_t *out, char *err, size_t errlen)
{
    return bare_drain(db, o, relation, 1, out, err, errlen);
}

/* ----------------------------------------------------- the backends */

extern const outbox_store_ceiling_t outbox_ceiling_sqlite;

static int sqlite_open(const char *uri, void **out, char *err, size_t errlen)
{
    return open_with(&outbox_ceiling_sqlite, uri, out, err, errlen);
}

const bench_backend_t bench_sqlite_backend = {
    .name = "sqlite",
    .ceiling_in_process = 1,
    .open = sqlite_open,
    .close = cd_close,
    .claim_relation = cd_claim_relation,
    .drop_relation = cd_drop_relation,
    .copy = cd_copy,
    .count = cd_count,
    .quiesce = cd_quiesce,
    .ceiling = cd_ceiling,
    .reference = cd_reference,
    .messages = cd_messages,
};
