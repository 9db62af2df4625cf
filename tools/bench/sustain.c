/* outbox-bench, sustained mode: does throughput hold over time?
 *
 * A producer thread stages --events-per-round events per transaction, paced
 * to --rate events per second (unpaced without --rate), while --workers relay
 * threads (each its own store, sink and relay, as in throughput mode) step
 * and publish to --sink. Every --interval (default 1 minute) the main thread
 * prints one JSON line: events published and staged in that interval, the
 * pending backlog, and on PostgreSQL the table's dead and live tuples and
 * autovacuum count from pg_stat_user_tables. After --sustain it prints a
 * final line comparing the last full interval with the first.
 *
 * Published rows stay in the table (nothing purges them), as in an outbox
 * whose purge runs rarely: the table grows for the whole run. With
 * --purge-after D a purger thread (its own store handle) deletes, every
 * 5 seconds, the rows published more than D ago, as a production outbox's
 * periodic outbox_store_purge() does; each line then also says how many rows per
 * second it purged.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

static void sleep_us(int64_t us)
{
    if (us <= 0)
        return;
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

typedef struct shared {
    atomic_long staged;
    atomic_long published;
    atomic_long purged;
    atomic_int stop;
    atomic_int failed;
} shared_t;

typedef struct producer {
    const bench_opts_t *o;
    shared_t *sh;
    outbox_store_t *store;
    int64_t t0;
    char err[600];
} producer_t;

static void *produce(void *arg)
{
    producer_t *p = arg;
    const bench_opts_t *o = p->o;
    long n = o->events_per_round;
    outbox_event_t *ev = calloc((size_t)n, sizeof *ev);
    char (*payload)[BENCH_PAYLOAD_MAX] = calloc((size_t)n, sizeof *payload);
    char (*key)[32] = calloc((size_t)n, sizeof *key);
    if (!ev || !payload || !key) {
        snprintf(p->err, sizeof p->err, "producer: out of memory");
        atomic_store(&p->sh->failed, 1);
        atomic_store(&p->sh->stop, 1);
    }
    long seq = 0;
    while (ev && payload && key && !atomic_load(&p->sh->stop)) {
        if (o->rate > 0) {
            /* The round that starts at event seq is due at seq / rate. */
            int64_t due = p->t0 + (int64_t)((double)seq * 1e6 / o->rate);
            int64_t now = bench_mono_us();
            if (due > now) {
                sleep_us(due - now < 100000 ? due - now : 100000);
                continue;
            }
        }
        for (long j = 0; j < n; j++) {
            size_t len = bench_payload(payload[j], seq + j);
            ev[j] = (outbox_event_t){.event_type = "bench.order_created",
                                     .payload = payload[j],
                                     .payload_len = len};
            if (o->keys > 0) {
                snprintf(key[j], sizeof key[j], "key-%ld", (seq + j) % o->keys);
                ev[j].ordering_key = key[j];
            }
        }
        size_t staged = 0;
        if (outbox_store_begin(p->store) != OUTBOX_OK ||
            outbox_store_stage(p->store, NULL, BENCH_ROUTE, ev, (size_t)n, &staged) != OUTBOX_OK ||
            outbox_store_commit(p->store) != OUTBOX_OK) {
            snprintf(p->err, sizeof p->err, "producer: %s", outbox_store_message(p->store));
            outbox_store_rollback(p->store);
            atomic_store(&p->sh->failed, 1);
            atomic_store(&p->sh->stop, 1);
            break;
        }
        seq += n;
        atomic_fetch_add(&p->sh->staged, n);
    }
    free(ev);
    free(payload);
    free(key);
    return NULL;
}

typedef struct sworker {
    const bench_opts_t *o;
    shared_t *sh;
    outbox_store_t *store;
    outbox_sink_t *sink;
    outbox_relay_t *relay;
    char err[600];
} sworker_t;

static void *relay_main(void *arg)
{
    sworker_t *w = arg;
    uint64_t seen = 0;
    while (!atomic_load(&w->sh->stop)) {
        size_t claimed = 0;
        if (outbox_relay_step(w->relay, &claimed) != OUTBOX_OK) {
            snprintf(w->err, sizeof w->err, "relay: %s", outbox_relay_message(w->relay));
            atomic_store(&w->sh->failed, 1);
            atomic_store(&w->sh->stop, 1);
            break;
        }
        outbox_relay_counters_t c;
        outbox_relay_counters(w->relay, &c);
        if (c.published > seen) {
            atomic_fetch_add(&w->sh->published, (long)(c.published - seen));
            seen = c.published;
        }
        if (claimed == 0)
            sleep_us(w->o->poll_us);
    }
    return NULL;
}

/* --purge-after: every PURGE_EVERY_US, outbox_store_purge() of the rows
 * published before now - purge_after_us. */
#define PURGE_EVERY_US 5000000LL

typedef struct purger {
    const bench_opts_t *o;
    shared_t *sh;
    outbox_store_t *store;
    char err[600];
} purger_t;

static void *purge_main(void *arg)
{
    purger_t *p = arg;
    while (!atomic_load(&p->sh->stop)) {
        for (int64_t slept = 0; slept < PURGE_EVERY_US && !atomic_load(&p->sh->stop); slept += 200000)
            sleep_us(200000);
        if (atomic_load(&p->sh->stop))
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t now_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
        uint64_t n = 0;
        if (outbox_store_purge(p->store, BENCH_ROUTE, now_us - p->o->purge_after_us, &n) != OUTBOX_OK) {
            snprintf(p->err, sizeof p->err, "purge: %s", outbox_store_message(p->store));
            atomic_store(&p->sh->failed, 1);
            atomic_store(&p->sh->stop, 1);
            break;
        }
        atomic_fetch_add(&p->sh->purged, (long)n);
    }
    return NULL;
}

typedef struct interval {
    double purged_per_s;
    double published_per_s, staged_per_s;
    long pending, dead, live, autovacuums;
} interval_t;

static int print_interval(const bench_opts_t *o, int idx, double t_s, const interval_t *iv)
{
    bench_json_t j = {0};
    bench_json_open(&j, NULL);
    bench_json_text(&j, "mode", "sustain");
    bench_json_int(&j, "interval", idx);
    bench_json_num(&j, "t_s", t_s, 1);
    bench_json_num(&j, "events_per_s", iv->published_per_s, 0);
    bench_json_num(&j, "staged_per_s", iv->staged_per_s, 0);
    bench_json_int(&j, "pending", iv->pending);
    /* Only with --purge-after: a purger runs. */
    if (o->purge_after_us > 0)
        bench_json_num(&j, "purged_per_s", iv->purged_per_s, 0);
    /* The server's statistics, null when the store has none (dead < 0). */
    const int stats = iv->dead >= 0;
    bench_json_num_or_null(&j, "dead_tuples", stats, (double)iv->dead, 0);
    bench_json_num_or_null(&j, "live_tuples", stats, (double)iv->live, 0);
    bench_json_num_or_null(&j, "autovacuum_count", stats, (double)iv->autovacuums, 0);
    bench_json_int(&j, "workers", o->workers);
    bench_json_int(&j, "batch", o->batch);
    bench_json_num(&j, "cpu_s", bench_cpu_s(), 2);
    bench_json_num(&j, "loadavg", bench_loadavg(), 2);
    bench_json_close(&j);
    return bench_json_print(&j);
}

/* The last line: the run's parameters and its last full interval against
 * the first. */
static int print_summary(const bench_opts_t *o, int intervals, const interval_t *first,
                         const interval_t *last, long staged, long published)
{
    double ratio = first->published_per_s > 0 ? last->published_per_s / first->published_per_s : 0;
    bench_json_t j = {0};
    bench_json_open(&j, NULL);
    bench_json_text(&j, "mode", "sustain");
    bench_json_bool(&j, "summary", 1);
    bench_json_text(&j, "store", bench_uri_shown(o->store));
    bench_json_text(&j, "sink", o->sink ? bench_uri_shown(o->sink) : NULL);
    bench_json_num(&j, "duration_s", (double)o->duration_us / 1e6, 0);
    bench_json_num(&j, "interval_s", (double)o->interval_us / 1e6, 0);
    bench_json_int(&j, "intervals", intervals);
    bench_json_num(&j, "rate", o->rate > 0 ? o->rate : 0, 0);
    bench_json_int(&j, "events_per_round", o->events_per_round);
    bench_json_int(&j, "keys", o->keys);
    bench_json_int(&j, "batch", o->batch);
    bench_json_int(&j, "workers", o->workers);
    bench_json_bool(&j, "pg_autovacuum", o->pg_autovacuum);
    bench_json_num(&j, "purge_after_s", (double)o->purge_after_us / 1e6, 3);
    bench_json_num(&j, "first_events_per_s", first->published_per_s, 0);
    bench_json_num(&j, "last_events_per_s", last->published_per_s, 0);
    bench_json_num(&j, "ratio", ratio, 3);
    bench_json_bool(&j, "within_10pct", fabs(ratio - 1) <= 0.10);
    bench_json_int(&j, "staged", staged);
    bench_json_int(&j, "published", published);
    bench_json_int(&j, "pending", last->pending);
    bench_json_num(&j, "cpu_s", bench_cpu_s(), 2);
    bench_json_int(&j, "peak_rss_kb", bench_peak_rss_kb());
    bench_json_num(&j, "loadavg", bench_loadavg(), 2);
    bench_json_close(&j);
    return bench_json_print(&j);
}

/* A sustained run: the threads, their handles, and the bench's own
 * connection. The threads point into it: it stays where it was made. */
typedef struct srun {
    const bench_opts_t *o;
    void *b;
    shared_t sh;
    producer_t prod;
    pthread_t prod_tid;
    int prod_started;
    purger_t purger;
    pthread_t purge_tid;
    int purge_started;
    sworker_t *w;
    pthread_t *tid;
    long started; /* relay threads */
} srun_t;

/* The relation, new and quiet, on the bench's own connection. */
static int prepare_store(const bench_opts_t *o, void **b, char *err, size_t errlen)
{
    int rc = bench_ceiling_open(o->ceiling, o->store, b, err, errlen);
    if (rc == 0)
        rc = o->ceiling->claim_relation(*b, o->relation, err, errlen);
    if (rc == 0)
        rc = bench_schema_apply(o->store, o->relation, err, errlen);
    if (rc == 0 && o->pg_autovacuum) {
        if (!o->ceiling->autovacuum) {
            snprintf(err, errlen, "--pg-autovacuum: the %s store has no autovacuum",
                     o->ceiling->name);
            rc = BENCH_EXIT_USAGE;
        } else {
            rc = o->ceiling->autovacuum(*b, o->relation, err, errlen);
        }
    }
    if (rc == 0)
        rc = o->ceiling->quiesce(*b, o->relation, err, errlen);
    if (rc == 0 && strncmp(o->sink, "benchok:", 8) == 0)
        rc = bench_register_ok_sink(err, errlen);
    return rc;
}

/* A store handle of the run's relation, for one thread. */
static int open_store(const bench_opts_t *o, outbox_store_t **s, char *err, size_t errlen)
{
    outbox_store_options_t so = {.struct_size = sizeof so, .relation = o->relation};
    outbox_diag_t d;
    if (outbox_store_open(o->store, &so, s, &d) != OUTBOX_OK) {
        snprintf(err, errlen, "cannot open store %s: %s", bench_uri_shown(o->store), d.message);
        return BENCH_EXIT_FAIL;
    }
    return 0;
}

/* One relay worker's store, sink and relay. */
static int open_worker(const bench_opts_t *o, const outbox_relay_config_t *cfg, sworker_t *w,
                       char *err, size_t errlen)
{
    outbox_diag_t d;
    int rc = open_store(o, &w->store, err, errlen);
    if (rc != 0)
        return rc;
    if (outbox_sink_open(o->sink, NULL, &w->sink, &d) != OUTBOX_OK) {
        snprintf(err, errlen, "cannot open sink %s: %s", bench_uri_shown(o->sink), d.message);
        return BENCH_EXIT_USAGE;
    }
    if (outbox_relay_new(w->store, w->sink, cfg, &w->relay, &d) != OUTBOX_OK) {
        snprintf(err, errlen, "relay: %s", d.message);
        return BENCH_EXIT_FAIL;
    }
    return 0;
}

/* The producer's store handle and every worker's. */
static int open_handles(srun_t *run, char *err, size_t errlen)
{
    const bench_opts_t *o = run->o;
    int rc = open_store(o, &run->prod.store, err, errlen);
    if (rc != 0)
        return rc;
    outbox_relay_config_t cfg;
    outbox_relay_config_init(&cfg);
    cfg.route = BENCH_ROUTE;
    cfg.batch = (size_t)o->batch;
    if (o->pipeline > 0)
        cfg.pipeline = (size_t)o->pipeline;
    cfg.poll_us = o->poll_us;
    for (long i = 0; rc == 0 && i < o->workers; i++) {
        run->w[i].o = o;
        run->w[i].sh = &run->sh;
        rc = open_worker(o, &cfg, &run->w[i], err, errlen);
    }
    return rc;
}

/* --purge-after: the purger's own store handle and thread. */
static int start_purger(srun_t *run, char *err, size_t errlen)
{
    int rc = open_store(run->o, &run->purger.store, err, errlen);
    if (rc != 0)
        return rc;
    if (pthread_create(&run->purge_tid, NULL, purge_main, &run->purger) != 0) {
        snprintf(err, errlen, "cannot start the purger thread");
        return BENCH_EXIT_FAIL;
    }
    run->purge_started = 1;
    return 0;
}

/* The relays first, then the purger, then the producer. */
static int start_threads(srun_t *run, char *err, size_t errlen)
{
    const bench_opts_t *o = run->o;
    for (long i = 0; i < o->workers; i++) {
        if (pthread_create(&run->tid[i], NULL, relay_main, &run->w[i]) != 0) {
            snprintf(err, errlen, "cannot start %ld relay threads", o->workers);
            return BENCH_EXIT_FAIL;
        }
        run->started++;
    }
    int rc = o->purge_after_us > 0 ? start_purger(run, err, errlen) : 0;
    if (rc == 0 && pthread_create(&run->prod_tid, NULL, produce, &run->prod) != 0) {
        snprintf(err, errlen, "cannot start the producer thread");
        return BENCH_EXIT_FAIL;
    }
    run->prod_started = rc == 0;
    return rc;
}

/* The shared counters at the end of an interval. */
typedef struct mark {
    int64_t at;
    long published, staged, purged;
} mark_t;

/* The interval since *prev, which becomes now: its rates from the shared
 * counters, and the backlog and statistics of the store. */
static int measure(srun_t *run, mark_t *prev, interval_t *iv, char *err, size_t errlen)
{
    const bench_opts_t *o = run->o;
    mark_t now;
    now.at = bench_mono_us();
    now.published = atomic_load(&run->sh.published);
    now.staged = atomic_load(&run->sh.staged);
    now.purged = atomic_load(&run->sh.purged);
    double secs = (double)(now.at - prev->at) / 1e6;
    *iv = (interval_t){.purged_per_s = (double)(now.purged - prev->purged) / secs,
                       .published_per_s = (double)(now.published - prev->published) / secs,
                       .staged_per_s = (double)(now.staged - prev->staged) / secs,
                       .dead = -1,
                       .live = -1,
                       .autovacuums = -1};
    *prev = now;
    if (o->ceiling->stats)
        return o->ceiling->stats(run->b, o->relation, &iv->pending, &iv->dead, &iv->live,
                                 &iv->autovacuums, err, errlen);
    return o->ceiling->count(run->b, o->relation, "pending", &iv->pending, err, errlen);
}

/* Sleeps until due, or until a thread has stopped the run. */
static void wait_until(shared_t *sh, int64_t due)
{
    while (!atomic_load(&sh->stop) && bench_mono_us() < due)
        sleep_us(due - bench_mono_us() < 200000 ? due - bench_mono_us() : 200000);
}

/* A JSON line could not be built. */
static int no_memory(char *err, size_t errlen)
{
    snprintf(err, errlen, "out of memory");
    return BENCH_EXIT_FAIL;
}

/* One line per interval from t0 on, then the summary. */
static int report(srun_t *run, int64_t t0, char *err, size_t errlen)
{
    const bench_opts_t *o = run->o;
    int nint = (int)(o->duration_us / o->interval_us);
    if (nint < 1)
        nint = 1;
    interval_t first = {0}, last = {0};
    mark_t mark = {.at = t0};
    int rc = 0;
    for (int k = 1; rc == 0 && k <= nint; k++) {
        wait_until(&run->sh, t0 + (int64_t)k * o->interval_us);
        if (atomic_load(&run->sh.failed))
            break;
        interval_t iv;
        rc = measure(run, &mark, &iv, err, errlen);
        if (rc == 0 && print_interval(o, k, (double)(mark.at - t0) / 1e6, &iv) != 0)
            rc = no_memory(err, errlen);
        if (k == 1)
            first = iv;
        last = iv;
        if (rc == 0 && k == nint &&
            print_summary(o, nint, &first, &last, mark.staged, mark.published) != 0)
            rc = no_memory(err, errlen);
    }
    return rc;
}

/* Stops and joins every thread; a thread's failure is the run's when
 * nothing failed before. */
static int stop_threads(srun_t *run, int rc, char *err, size_t errlen)
{
    atomic_store(&run->sh.stop, 1);
    if (run->prod_started)
        pthread_join(run->prod_tid, NULL);
    if (run->purge_started)
        pthread_join(run->purge_tid, NULL);
    for (long i = 0; i < run->started; i++)
        pthread_join(run->tid[i], NULL);
    if (rc == 0 && atomic_load(&run->sh.failed)) {
        rc = BENCH_EXIT_FAIL;
        snprintf(err, errlen, "%s", run->prod.err[0] ? run->prod.err : run->purger.err);
        for (long i = 0; !err[0] && i < run->o->workers; i++)
            snprintf(err, errlen, "%s", run->w[i].err);
    }
    return rc;
}

/* Every handle, then the relation and the bench's connection. */
static void close_all(srun_t *run)
{
    const bench_opts_t *o = run->o;
    for (long i = 0; run->w && i < o->workers; i++) {
        outbox_relay_free(run->w[i].relay);
        outbox_sink_close(run->w[i].sink);
        outbox_store_close(run->w[i].store);
    }
    outbox_store_close(run->prod.store);
    outbox_store_close(run->purger.store);
    free(run->w);
    free(run->tid);
    if (run->b) {
        char err2[512];
        o->ceiling->drop_relation(run->b, o->relation, err2, sizeof err2);
        o->ceiling->quiesce(run->b, NULL, err2, sizeof err2);
        o->ceiling->close(run->b);
    }
}

int bench_sustain(const bench_opts_t *o)
{
    char err[1024] = "";
    srun_t run = {.o = o};
    atomic_init(&run.sh.staged, 0);
    atomic_init(&run.sh.published, 0);
    atomic_init(&run.sh.stop, 0);
    atomic_init(&run.sh.failed, 0);
    atomic_init(&run.sh.purged, 0);
    run.prod = (producer_t){.o = o, .sh = &run.sh};
    run.purger = (purger_t){.o = o, .sh = &run.sh};
    int rc = prepare_store(o, &run.b, err, sizeof err);
    run.w = calloc((size_t)o->workers, sizeof *run.w);
    run.tid = calloc((size_t)o->workers, sizeof *run.tid);
    if (rc == 0 && (!run.w || !run.tid)) {
        snprintf(err, sizeof err, "out of memory");
        rc = BENCH_EXIT_FAIL;
    }
    if (rc == 0)
        rc = open_handles(&run, err, sizeof err);
    int64_t t0 = bench_mono_us();
    run.prod.t0 = t0;
    if (rc == 0)
        rc = start_threads(&run, err, sizeof err);
    if (rc == 0)
        rc = report(&run, t0, err, sizeof err);
    rc = stop_threads(&run, rc, err, sizeof err);
    close_all(&run);
    if (rc != 0)
        bench_err("%s", err[0] ? err : "sustained run failed");
    return rc;
}
