/* outbox-bench, latency mode: commit-to-publish latency.
 *
 * Producers (--producers, default 1, each with its own store handle) stage
 * one event per transaction on a fixed schedule of --rate events per second
 * in total and note the instant each COMMIT returned; a relay (with the store's push wake-up when
 * it has one, else polling every --poll) publishes to an in-process sink
 * that notes the instant each message reached it. The payload carries the
 * event's sequence number, which joins the two. Both instants come from
 * CLOCK_MONOTONIC in this process, so no clock skew enters the numbers.
 *
 * A message can reach the sink a few microseconds before COMMIT has
 * returned to the producer (the row is visible as soon as the commit is
 * durable); such a latency counts as 0.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* How long to wait for the last events once the producer has stopped. */
#define DRAIN_WAIT_US (30 * 1000000LL)

typedef struct lat_state {
    long n;
    int64_t *commit_us;  /* written by the producer */
    int64_t *publish_us; /* written by the sink, in the relay's thread */
    atomic_long published;
    atomic_long duplicates;
    atomic_int warm; /* the warm-up event (seq n) reached the sink */
} lat_state_t;

static lat_state_t *lat; /* the run in progress, for the sink */

/* ------------------------------------------------- the recording sink */

static int lat_init(const outbox_host_t *host, outbox_diag_t *d)
{
    (void)host, (void)d;
    return OUTBOX_OK;
}

static int lat_open(const outbox_sink_open_t *p, void **h, outbox_diag_t *d)
{
    (void)p, (void)d;
    *h = &lat;
    return OUTBOX_OK;
}

static void lat_close(void *h)
{
    (void)h;
}

/* The sequence number from a payload made by bench_payload(). A store may
 * hand the JSON back normalised (PostgreSQL's jsonb adds spaces and orders
 * the keys), so look for the key and skip blanks after the colon. */
static long payload_seq(const char *p, size_t len)
{
    static const char key[] = "\"seq\":";
    size_t k = sizeof key - 1;
    for (size_t i = 0; i + k <= len; i++) {
        if (memcmp(p + i, key, k) != 0)
            continue;
        size_t j = i + k;
        while (j < len && (p[j] == ' ' || p[j] == '\t' || p[j] == '\n' || p[j] == '\r'))
            j++;
        if (j >= len || p[j] < '0' || p[j] > '9')
            return -1;
        long v = 0;
        for (; j < len && p[j] >= '0' && p[j] <= '9'; j++)
            v = v * 10 + (p[j] - '0');
        return v;
    }
    return -1;
}

static void record(const outbox_message_t *m, int64_t now);

static int lat_publish(void *h, const outbox_message_t *msgs, size_t n,
                       outbox_publish_result_t *res, outbox_diag_t *d)
{
    (void)h, (void)d;
    int64_t now = bench_mono_us();
    for (size_t i = 0; i < n; i++) {
        res[i].status = OUTBOX_PUBLISH_OK;
        record(&msgs[i], now);
    }
    return OUTBOX_OK;
}

/* --sink: the recording sink wraps the real one. Its open opens the sink
 * of --sink (lat_wrapped), its publish hands the batch on and notes the
 * instant the real sink's publish returned for each message it reported
 * OK: the broker's acknowledgement, not the relay's hand-over. */
static const char *lat_wrapped;

typedef struct wrap {
    outbox_sink_t *real;
} wrap_t;

static int wrap_open(const outbox_sink_open_t *p, void **h, outbox_diag_t *d)
{
    (void)p;
    wrap_t *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(d->message, sizeof d->message, "out of memory");
        return OUTBOX_ENOMEM;
    }
    int rc = outbox_sink_open(lat_wrapped, NULL, &w->real, d);
    if (rc != OUTBOX_OK) {
        free(w);
        return rc;
    }
    *h = w;
    return OUTBOX_OK;
}

static void wrap_close(void *h)
{
    wrap_t *w = h;
    if (!w)
        return;
    outbox_sink_close(w->real);
    free(w);
}

static void record(const outbox_message_t *m, int64_t now)
{
    long seq = payload_seq(m->payload, m->payload_len);
    if (lat && seq == lat->n)
        atomic_store(&lat->warm, 1);
    if (!lat || seq < 0 || seq >= lat->n)
        return;
    if (lat->publish_us[seq] != 0) {
        atomic_fetch_add(&lat->duplicates, 1);
        return;
    }
    lat->publish_us[seq] = now;
    atomic_fetch_add(&lat->published, 1);
}

static int wrap_publish(void *h, const outbox_message_t *msgs, size_t n,
                        outbox_publish_result_t *res, outbox_diag_t *d)
{
    wrap_t *w = h;
    int rc = outbox_sink_publish(w->real, msgs, n, res);
    int64_t now = bench_mono_us();
    if (rc != OUTBOX_OK) {
        snprintf(d->message, sizeof d->message, "%s", outbox_sink_message(w->real));
        return rc;
    }
    for (size_t i = 0; i < n; i++)
        if (res[i].status == OUTBOX_PUBLISH_OK)
            record(&msgs[i], now);
    return OUTBOX_OK;
}

static const outbox_sink_vtable_t wrap_vt = {
    .struct_size = sizeof wrap_vt, .open = wrap_open, .close = wrap_close, .publish = wrap_publish};
static const char *const wrap_schemes[] = {"benchlatwrap", NULL};
/* Its capabilities are the real sink's, filled in before registering. */
static outbox_driver_t wrap_driver = {
    .struct_size = sizeof wrap_driver,
    .abi_major = OUTBOX_ABI_MAJOR,
    .abi_minor = OUTBOX_ABI_MINOR,
    .kind = OUTBOX_DRIVER_SINK,
    .name = "bench-latency-wrap",
    .version = "1",
    .schemes = wrap_schemes,
    .init = lat_init,
    .sink = &wrap_vt,
};

static const outbox_sink_vtable_t lat_vt = {
    .struct_size = sizeof lat_vt, .open = lat_open, .close = lat_close, .publish = lat_publish};
static const char *const lat_schemes[] = {"benchlat", NULL};
static const outbox_driver_t lat_driver = {
    .struct_size = sizeof lat_driver,
    .abi_major = OUTBOX_ABI_MAJOR,
    .abi_minor = OUTBOX_ABI_MINOR,
    .kind = OUTBOX_DRIVER_SINK,
    .name = "bench-latency",
    .version = "1",
    .schemes = lat_schemes,
    .capabilities = OUTBOX_SINK_CAP_ORDERED,
    .init = lat_init,
    .sink = &lat_vt,
};

/* -------------------------------------------------------------- relay */

typedef struct relay_thread {
    outbox_relay_t *relay;
    int rc;
} relay_thread_t;

static void *relay_main(void *arg)
{
    relay_thread_t *t = arg;
    t->rc = outbox_relay_run(t->relay);
    return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v[0..n), in milliseconds. */
static double pct_ms(const int64_t *v, long n, double p)
{
    if (n == 0)
        return 0;
    long k = (long)ceil(p * (double)n) - 1;
    if (k < 0)
        k = 0;
    if (k >= n)
        k = n - 1;
    return (double)v[k] / 1000.0;
}

static void sleep_until(int64_t mono_us)
{
    int64_t left = mono_us - bench_mono_us();
    if (left <= 0)
        return;
    struct timespec ts = {.tv_sec = left / 1000000, .tv_nsec = (left % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* One producer: events first, first + stride, ... of the schedule, each in
 * its own transaction on its own store handle. */
typedef struct producer {
    const bench_opts_t *o;
    lat_state_t *st;
    outbox_store_t *store;
    long first, stride;
    int64_t t0;
    int rc;
    char err[600];
} producer_t;

static void *produce(void *arg)
{
    producer_t *p = arg;
    const bench_opts_t *o = p->o;
    char payload[BENCH_PAYLOAD_MAX], key[32];
    for (long i = p->first; i < p->st->n; i += p->stride) {
        sleep_until(p->t0 + (int64_t)((double)i * 1e6 / o->rate));
        size_t len = bench_payload(payload, i);
        outbox_event_t ev = {.event_type = "bench.order_created", .payload = payload,
                             .payload_len = len};
        if (o->keys > 0) {
            snprintf(key, sizeof key, "key-%ld", i % o->keys);
            ev.ordering_key = key;
        }
        size_t staged = 0;
        if (outbox_store_begin(p->store) != OUTBOX_OK ||
            outbox_store_stage(p->store, NULL, BENCH_ROUTE, &ev, 1, &staged) != OUTBOX_OK ||
            outbox_store_commit(p->store) != OUTBOX_OK) {
            snprintf(p->err, sizeof p->err, "producer: %s", outbox_store_message(p->store));
            outbox_store_rollback(p->store);
            p->rc = BENCH_EXIT_FAIL;
            break;
        }
        p->st->commit_us[i] = bench_mono_us();
    }
    return NULL;
}

/* Runs o->producers producers at o->rate in total, until st->n events. */
static int produce_all(const bench_opts_t *o, lat_state_t *st, int64_t *t_end, char *err,
                       size_t errlen)
{
    long np = o->producers;
    producer_t *p = calloc((size_t)np, sizeof *p);
    pthread_t *tid = calloc((size_t)np, sizeof *tid);
    int rc = p && tid ? 0 : BENCH_EXIT_FAIL;
    if (rc != 0)
        snprintf(err, errlen, "out of memory");
    outbox_store_options_t so = {.struct_size = sizeof so, .relation = o->relation};
    for (long i = 0; rc == 0 && i < np; i++) {
        outbox_diag_t d;
        if (outbox_store_open(o->store, &so, &p[i].store, &d) != OUTBOX_OK) {
            snprintf(err, errlen, "cannot open store %s: %s", bench_uri_shown(o->store), d.message);
            rc = BENCH_EXIT_FAIL;
        }
    }
    int64_t t0 = bench_mono_us() + 1000;
    long started = 0;
    for (long i = 0; rc == 0 && i < np; i++) {
        p[i].o = o;
        p[i].st = st;
        p[i].first = i;
        p[i].stride = np;
        p[i].t0 = t0;
        if (pthread_create(&tid[i], NULL, produce, &p[i]) != 0) {
            snprintf(err, errlen, "cannot start %ld producer threads", np);
            rc = BENCH_EXIT_FAIL;
            break;
        }
        started++;
    }
    for (long i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    *t_end = bench_mono_us() - t0;
    for (long i = 0; p && i < np; i++) {
        if (rc == 0 && p[i].rc != 0) {
            snprintf(err, errlen, "%s", p[i].err);
            rc = p[i].rc;
        }
        outbox_store_close(p[i].store);
    }
    free(p);
    free(tid);
    return rc;
}

static int warm_up(const bench_opts_t *o, lat_state_t *st, char *err, size_t errlen)
{
    outbox_store_options_t so = {.struct_size = sizeof so, .relation = o->relation};
    outbox_store_t *s = NULL;
    outbox_diag_t d;
    if (outbox_store_open(o->store, &so, &s, &d) != OUTBOX_OK) {
        snprintf(err, errlen, "cannot open store %s: %s", bench_uri_shown(o->store), d.message);
        return BENCH_EXIT_FAIL;
    }
    char payload[BENCH_PAYLOAD_MAX];
    size_t len = bench_payload(payload, st->n);
    outbox_event_t ev = {.event_type = "bench.order_created", .payload = payload,
                         .payload_len = len};
    int rc = 0;
    if (outbox_store_stage(s, NULL, BENCH_ROUTE, &ev, 1, NULL) != OUTBOX_OK) {
        snprintf(err, errlen, "warm-up: %s", outbox_store_message(s));
        rc = BENCH_EXIT_FAIL;
    }
    outbox_store_close(s);
    int64_t deadline = bench_mono_us() + DRAIN_WAIT_US;
    while (rc == 0 && !atomic_load(&st->warm) && bench_mono_us() < deadline) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    if (rc == 0 && !atomic_load(&st->warm)) {
        snprintf(err, errlen, "warm-up: the sink did not acknowledge one event within %lld s",
                 DRAIN_WAIT_US / 1000000);
        rc = BENCH_EXIT_FAIL;
    }
    return rc;
}

static int run(const bench_opts_t *o, lat_state_t *st, double *achieved, double *cpu_s, char *err,
               size_t errlen)
{
    outbox_store_options_t so = {.struct_size = sizeof so, .relation = o->relation};
    outbox_store_t *rstore = NULL;
    outbox_sink_t *sink = NULL;
    outbox_relay_t *relay = NULL;
    outbox_diag_t d;
    int rc = 0;
    if (outbox_store_open(o->store, &so, &rstore, &d) != OUTBOX_OK) {
        snprintf(err, errlen, "cannot open store %s: %s", bench_uri_shown(o->store), d.message);
        rc = BENCH_EXIT_FAIL;
    }
    if (rc == 0 && outbox_sink_open(lat_wrapped ? "benchlatwrap:" : "benchlat:", NULL, &sink,
                                    &d) != OUTBOX_OK) {
        snprintf(err, errlen, "cannot open the recording sink: %s", d.message);
        rc = BENCH_EXIT_FAIL;
    }
    if (rc == 0) {
        outbox_relay_config_t cfg;
        outbox_relay_config_init(&cfg);
        cfg.route = BENCH_ROUTE;
        cfg.batch = (size_t)o->batch;
        if (o->pipeline > 0)
            cfg.pipeline = (size_t)o->pipeline;
        cfg.poll_us = o->poll_us;
        if (o->destination)
            cfg.destination = o->destination;
        if (outbox_relay_new(rstore, sink, &cfg, &relay, &d) != OUTBOX_OK) {
            snprintf(err, errlen, "relay: %s", d.message);
            rc = BENCH_EXIT_FAIL;
        }
    }
    relay_thread_t rt = {.relay = relay};
    pthread_t tid;
    int started = 0;
    if (rc == 0) {
        if (pthread_create(&tid, NULL, relay_main, &rt) != 0) {
            snprintf(err, errlen, "cannot start the relay thread");
            rc = BENCH_EXIT_FAIL;
        } else {
            started = 1;
        }
    }
    /* A real sink connects, and a Kafka producer gets its producer id and
     * the topic's metadata, on its first publish: one warm-up event (seq n,
     * not counted) goes through before the clock, so the numbers are the
     * steady state's. */
    if (rc == 0 && started && lat_wrapped)
        rc = warm_up(o, st, err, errlen);
    double cpu0 = bench_cpu_s();
    int64_t produced_us = 0;
    if (rc == 0)
        rc = produce_all(o, st, &produced_us, err, errlen);
    if (started) {
        int64_t deadline = bench_mono_us() + DRAIN_WAIT_US;
        while (rc == 0 && atomic_load(&st->published) < st->n && bench_mono_us() < deadline) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        outbox_relay_stop(relay);
        pthread_join(tid, NULL);
        if (rc == 0 && rt.rc != OUTBOX_OK) {
            snprintf(err, errlen, "relay: %s", outbox_relay_message(relay));
            rc = BENCH_EXIT_FAIL;
        }
        if (rc == 0 && atomic_load(&st->published) < st->n) {
            snprintf(err, errlen, "only %ld of %ld events were published within %lld s",
                     atomic_load(&st->published), st->n, DRAIN_WAIT_US / 1000000);
            rc = BENCH_EXIT_FAIL;
        }
    }
    *cpu_s = bench_cpu_s() - cpu0;
    *achieved = produced_us > 0 ? (double)st->n * 1e6 / (double)produced_us : 0;
    outbox_relay_free(relay);
    outbox_sink_close(sink);
    outbox_store_close(rstore);
    return rc;
}

/* The run's line: the schedule, what the producers achieved, and the
 * commit-to-publish percentiles of lat_us[0..m), sorted. */
static int print_line(const bench_opts_t *o, lat_state_t *st, const int64_t *lat_us, long m,
                      double achieved, double cpu_s)
{
    bench_json_t j = {0};
    bench_json_open(&j, NULL);
    bench_json_text(&j, "mode", "latency");
    bench_json_text(&j, "store", bench_uri_shown(o->store));
    /* Without --sink the in-process recording sink. */
    bench_json_text(&j, "sink", o->sink ? bench_uri_shown(o->sink) : "in-process");
    bench_json_int(&j, "events", st->n);
    bench_json_int(&j, "keys", o->keys);
    bench_json_int(&j, "batch", o->batch);
    bench_json_int(&j, "producers", o->producers);
    bench_json_num(&j, "rate", o->rate, 0);
    bench_json_num(&j, "achieved_rate", achieved, 0);
    bench_json_num(&j, "duration_s", (double)o->duration_us / 1e6, 3);
    bench_json_num(&j, "poll_ms", (double)o->poll_us / 1000.0, 3);
    bench_json_num(&j, "p50_ms", pct_ms(lat_us, m, 0.50), 3);
    bench_json_num(&j, "p99_ms", pct_ms(lat_us, m, 0.99), 3);
    bench_json_num(&j, "p999_ms", pct_ms(lat_us, m, 0.999), 3);
    bench_json_num(&j, "max_ms", m ? (double)lat_us[m - 1] / 1000.0 : 0, 3);
    bench_json_int(&j, "duplicates", atomic_load(&st->duplicates));
    bench_json_num(&j, "cpu_s", cpu_s, 3);
    bench_json_int(&j, "peak_rss_kb", bench_peak_rss_kb());
    bench_json_num(&j, "loadavg", bench_loadavg(), 2);
    bench_json_close(&j);
    return bench_json_print(&j);
}

/* --sink: the bench's own handle on the real sink, and the run's fresh
 * destination on it when the sink has destinations. */
typedef struct real_sink {
    outbox_sink_t *ctl;
    char dest[96];
    int has_dest;
} real_sink_t;

/* Drops the run's destination (a warning when that fails and warn is
 * set) and closes the handle. */
static void real_sink_close(real_sink_t *rs, int warn)
{
    if (rs->has_dest && outbox_sink_destination_drop(rs->ctl, rs->dest) != OUTBOX_OK && warn)
        bench_err("warning: dropping destination %s: %s", rs->dest, outbox_sink_message(rs->ctl));
    outbox_sink_close(rs->ctl);
    rs->ctl = NULL;
}

/* Opens --sink, creates the run's destination (ro->destination), and
 * registers the recording wrapper with the real sink's capabilities.
 * Errors are printed. */
static int real_sink_open(const bench_opts_t *o, real_sink_t *rs, bench_opts_t *ro)
{
    outbox_diag_t d;
    if (outbox_sink_open(o->sink, NULL, &rs->ctl, &d) != OUTBOX_OK) {
        bench_err("cannot open sink %s: %s", bench_uri_shown(o->sink), d.message);
        return BENCH_EXIT_USAGE;
    }
    const outbox_sink_vtable_t *kvt = outbox_sink_driver(rs->ctl)->sink;
    int has_dest = OUTBOX_ENTRY_HAS(outbox_sink_vtable_t, kvt, destination_create) &&
                   OUTBOX_ENTRY_HAS(outbox_sink_vtable_t, kvt, destination_drop);
    snprintf(rs->dest, sizeof rs->dest, "outbox_bench_%ld_latency", (long)getpid());
    if (has_dest && outbox_sink_destination_create(rs->ctl, rs->dest) != OUTBOX_OK) {
        bench_err("creating destination %s on the sink: %s", rs->dest,
                  outbox_sink_message(rs->ctl));
        real_sink_close(rs, 0);
        return BENCH_EXIT_FAIL;
    }
    rs->has_dest = has_dest;
    if (has_dest)
        ro->destination = rs->dest;
    static int wrap_registered;
    wrap_driver.capabilities = outbox_sink_capabilities(rs->ctl);
    lat_wrapped = o->sink;
    if (!wrap_registered && outbox_driver_register(&wrap_driver, &d) != OUTBOX_OK) {
        bench_err("registering the recording wrapper: %s", d.message);
        real_sink_close(rs, 0);
        return BENCH_EXIT_FAIL;
    }
    wrap_registered = 1;
    return 0;
}

/* The run's events (o->rate for o->duration_us, at least one) and their
 * instants; -1 when memory runs out. */
static int state_alloc(const bench_opts_t *o, lat_state_t *st, int64_t **lat_us)
{
    st->n = (long)ceil(o->rate * (double)o->duration_us / 1e6);
    if (st->n < 1)
        st->n = 1;
    st->commit_us = calloc((size_t)st->n, sizeof *st->commit_us);
    st->publish_us = calloc((size_t)st->n, sizeof *st->publish_us);
    *lat_us = calloc((size_t)st->n, sizeof **lat_us);
    atomic_init(&st->published, 0);
    atomic_init(&st->duplicates, 0);
    atomic_init(&st->warm, 0);
    return st->commit_us && st->publish_us && *lat_us ? 0 : -1;
}

static void state_free(lat_state_t *st, int64_t *lat_us)
{
    free(st->commit_us);
    free(st->publish_us);
    free(lat_us);
}

/* The relation made new and quiet, the run on it, the relation dropped. */
static int measure(const bench_opts_t *o, lat_state_t *st, double *achieved, double *cpu_s,
                   char *err, size_t errlen)
{
    void *b = NULL;
    int rc = bench_ceiling_open(o->ceiling, o->store, &b, err, errlen);
    if (rc == 0)
        rc = o->ceiling->claim_relation(b, o->relation, err, errlen);
    if (rc == 0)
        rc = bench_schema_apply(o->store, o->relation, err, errlen);
    if (rc == 0)
        rc = o->ceiling->quiesce(b, o->relation, err, errlen);
    if (rc == 0) {
        lat = st;
        rc = run(o, st, achieved, cpu_s, err, errlen);
        lat = NULL;
    }
    if (b) {
        char err2[512];
        o->ceiling->drop_relation(b, o->relation, err2, sizeof err2);
        o->ceiling->quiesce(b, NULL, err2, sizeof err2);
        o->ceiling->close(b);
    }
    return rc;
}

/* Commit to publish of every event with both instants, sorted, into
 * lat_us; their count. One published before its commit returned counts
 * as 0. */
static long latencies(const lat_state_t *st, int64_t *lat_us)
{
    long m = 0;
    for (long i = 0; i < st->n; i++)
        if (st->publish_us[i] && st->commit_us[i])
            lat_us[m++] = st->publish_us[i] > st->commit_us[i] ? st->publish_us[i] - st->commit_us[i]
                                                               : 0;
    qsort(lat_us, (size_t)m, sizeof *lat_us, cmp_i64);
    return m;
}

int bench_latency(const bench_opts_t *o)
{
    char err[1024] = "";
    static int registered;
    outbox_diag_t d;
    if (!registered && outbox_driver_register(&lat_driver, &d) != OUTBOX_OK) {
        bench_err("registering the recording sink: %s", d.message);
        return BENCH_EXIT_FAIL;
    }
    registered = 1;
    bench_opts_t ro = *o;
    real_sink_t rs = {0};
    int rc = o->sink ? real_sink_open(o, &rs, &ro) : 0;
    if (rc != 0)
        return rc;
    o = &ro;
    lat_state_t st = {0};
    int64_t *lat_us = NULL;
    if (state_alloc(o, &st, &lat_us) != 0) {
        state_free(&st, lat_us);
        bench_err("out of memory for %ld events", st.n);
        real_sink_close(&rs, 0);
        return BENCH_EXIT_FAIL;
    }
    double achieved = 0, cpu_s = 0;
    rc = measure(o, &st, &achieved, &cpu_s, err, sizeof err);
    if (rc == 0) {
        long m = latencies(&st, lat_us);
        if (print_line(o, &st, lat_us, m, achieved, cpu_s) != 0) {
            snprintf(err, sizeof err, "out of memory");
            rc = BENCH_EXIT_FAIL;
        }
    }
    if (rc != 0)
        bench_err("%s", err);
    state_free(&st, lat_us);
    real_sink_close(&rs, 1);
    lat_wrapped = NULL;
    return rc;
}
