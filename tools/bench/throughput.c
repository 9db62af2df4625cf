/* outbox-bench, throughput mode: stage a backlog, drain it with the relay,
 * drain an identical backlog with the bare SQL of the store (the ceiling),
 * and print one JSON line with both rates and their ratio.
 *
 * The backlog is staged once through outbox_store_stage() into <relation>_backlog.
 * Each round copies it row for row into <relation> (for the relay),
 * <relation>_ceiling and, for a store with a reference claim + mark
 * (both built-in stores), <relation>_reference; it checkpoints the WAL before each
 * drain and lets the sides take turns to go first. The clock of a drain runs from the
 * moment every worker has its connections open until the last row is
 * published. The medians over the rounds are printed.
 */
#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "metrics.h"
#include "otlp.h"

/* Staging: events per outbox_store_stage() call and per transaction. */
#define STAGE_CHUNK 1000
#define STAGE_TX 10000

int bench_schema_apply(const char *store_uri, const char *relation, char *err, size_t errlen)
{
    outbox_store_options_t so = {.struct_size = sizeof so,
                                 .relation = relation,
                                 .flags = OUTBOX_OPEN_SCHEMA_ONLY};
    outbox_store_t *s = NULL;
    outbox_diag_t d;
    if (outbox_store_open(store_uri, &so, &s, &d) != OUTBOX_OK) {
        snprintf(err, errlen, "cannot open store %s: %s", bench_uri_shown(store_uri), d.message);
        return BENCH_EXIT_FAIL;
    }
    outbox_schema_opts_t opts = {.struct_size = sizeof opts, .relation = relation};
    int rc = outbox_store_schema_apply(s, &opts);
    if (rc != OUTBOX_OK)
        snprintf(err, errlen, "schema apply on %s: %s", relation, outbox_store_message(s));
    outbox_store_close(s);
    return rc == OUTBOX_OK ? 0 : BENCH_EXIT_FAIL;
}

/* Stages o->events events on route of relation in transactions of
 * STAGE_TX, or without transactions when the store has none. */
int bench_stage_backlog(const bench_opts_t *o, const char *relation, const char *route,
                        double *seconds, char *err, size_t errlen)
{
    outbox_store_options_t so = {
        .struct_size = sizeof so, .relation = relation, .driver = o->driver};
    outbox_store_t *s = NULL;
    outbox_diag_t d;
    if (outbox_store_open(o->store, &so, &s, &d) != OUTBOX_OK) {
        snprintf(err, errlen, "cannot open store %s: %s", bench_uri_shown(o->store), d.message);
        return BENCH_EXIT_FAIL;
    }
    const outbox_store_vtable_t *vt = outbox_store_driver(s)->store;
    const int use_tx = (outbox_store_capabilities(s) & OUTBOX_STORE_CAP_TRANSACTIONS) &&
                       BENCH_VT_HAS(vt, begin) && BENCH_VT_HAS(vt, commit) &&
                       BENCH_VT_HAS(vt, rollback);
    outbox_event_t *ev = calloc(STAGE_CHUNK, sizeof *ev);
    char (*payload)[BENCH_PAYLOAD_MAX] = calloc(STAGE_CHUNK, sizeof *payload);
    char (*key)[32] = calloc(STAGE_CHUNK, sizeof *key);
    int rc = 0;
    if (!ev || !payload || !key) {
        snprintf(err, errlen, "out of memory");
        rc = BENCH_EXIT_FAIL;
    }
    int64_t t0 = bench_mono_us();
    int in_tx = 0;
    for (long i = 0; rc == 0 && i < o->events;) {
        long m = o->events - i < STAGE_CHUNK ? o->events - i : STAGE_CHUNK;
        for (long j = 0; j < m; j++) {
            long seq = i + j;
            size_t len = bench_payload(payload[j], seq);
            ev[j] = (outbox_event_t){.event_type = "bench.order_created",
                                     .payload = payload[j],
                                     .payload_len = len};
            if (o->keys > 0) {
                snprintf(key[j], sizeof key[j], "key-%ld", seq % o->keys);
                ev[j].ordering_key = key[j];
            }
        }
        if (use_tx && !in_tx) {
            if (outbox_store_begin(s) != OUTBOX_OK)
                break;
            in_tx = 1;
        }
        size_t staged = 0;
        if (outbox_store_stage(s, NULL, route, ev, (size_t)m, &staged) != OUTBOX_OK)
            break;
        if ((long)staged != m) {
            snprintf(err, errlen, "staging: %zu of %ld events staged", staged, m);
            rc = BENCH_EXIT_FAIL;
            break;
        }
        i += m;
        if (in_tx && (i % STAGE_TX == 0 || i == o->events)) {
            in_tx = 0;
            if (outbox_store_commit(s) != OUTBOX_OK)
                break;
        }
    }
    if (rc == 0 && outbox_store_message(s)[0]) {
        snprintf(err, errlen, "staging: %s", outbox_store_message(s));
        rc = BENCH_EXIT_FAIL;
    }
    if (in_tx)
        outbox_store_rollback(s);
    *seconds = (double)(bench_mono_us() - t0) / 1e6;
    free(ev);
    free(payload);
    free(key);
    outbox_store_close(s);
    return rc;
}

/* ------------------------------------------------------------ the relay */

typedef struct rworker {
    long events;
    int64_t poll_us;
    atomic_long *published;
    bench_gate_t *gate;
    uint64_t own_published; /* this worker's relay counter, read after the drain */
    outbox_store_t *store;
    outbox_sink_t *sink;
    outbox_relay_t *relay;
    int rc;
    char err[600];
} rworker_t;

/* Runs the relay until idle, again and again, until every row of the
 * backlog is published by some worker: with several workers one of them
 * may find nothing claimable while another still holds the last rows. */
static void *rworker_main(void *arg)
{
    rworker_t *w = arg;
    pthread_setname_np(pthread_self(), "bench-relay"); /* for perf and top */
    if (!bench_gate_wait(w->gate))
        return NULL;
    uint64_t seen = 0;
    bench_idle_t idle = BENCH_IDLE_INIT;
    while (atomic_load(w->published) < w->events) {
        int rc = outbox_relay_run(w->relay);
        if (rc != OUTBOX_OK) {
            snprintf(w->err, sizeof w->err, "relay: %s", outbox_relay_message(w->relay));
            w->rc = BENCH_EXIT_FAIL;
            /* Let the others stop too. */
            atomic_store(w->published, w->events);
            break;
        }
        outbox_relay_counters_t c;
        outbox_relay_counters(w->relay, &c);
        if (c.retried || c.dead || c.fence_lost || c.outages) {
            snprintf(w->err, sizeof w->err,
                     "relay: unexpected outcomes: %llu retried, %llu dead, %llu fences lost, "
                     "%llu outages",
                     (unsigned long long)c.retried, (unsigned long long)c.dead,
                     (unsigned long long)c.fence_lost, (unsigned long long)c.outages);
            w->rc = BENCH_EXIT_FAIL;
            atomic_store(w->published, w->events);
            break;
        }
        long delta = (long)(c.published - seen);
        seen = c.published;
        w->own_published = c.published;
        if (delta > 0) {
            atomic_fetch_add(w->published, delta);
        } else if (bench_idle_wait(&idle, w->published, w->events, w->poll_us)) {
            snprintf(w->err, sizeof w->err,
                     "relay stalled: nothing published for %lld s, %ld of %ld published",
                     BENCH_STALL_US / 1000000, atomic_load(w->published), w->events);
            w->rc = BENCH_EXIT_FAIL;
            break;
        }
    }
    return NULL;
}

static void rworkers_free(rworker_t *w, long n)
{
    for (long i = 0; i < n; i++) {
        outbox_relay_free(w[i].relay);
        outbox_sink_close(w[i].sink);
        outbox_store_close(w[i].store);
    }
    free(w);
}

/* A broker's client connects, gets its producer id and the destination's
 * metadata on its first publish: for Kafka about a second on a topic just
 * created, which the producer ceiling's client (whose first messages find
 * the broker warm) does not pay. One message through each relay's sink
 * before the clock starts, as the latency mode does, so that the rate is
 * the steady state's. */
static int warm_sink(outbox_sink_t *k, const char *destination, char *err, size_t errlen)
{
    outbox_header_t h[] = {{"ce-id", "outbox-bench-warm-up"}, {"ce-type", "bench.warm_up"}};
    outbox_message_t m = {.route = BENCH_ROUTE, .destination = destination, .key = "warm-up",
                          .event_id = "outbox-bench-warm-up", .payload = "{}", .payload_len = 2,
                          .headers = h, .n_headers = 2};
    outbox_publish_result_t res = {0};
    outbox_sink_publish(k, &m, 1, &res);
    if (res.status != OUTBOX_PUBLISH_OK) {
        snprintf(err, errlen, "warm-up message to %s: %s", destination, res.message);
        return BENCH_EXIT_FAIL;
    }
    return 0;
}

/* Opens each worker's store, sink and relay. */
static int rworkers_open(const bench_opts_t *o, const char *relation, const char *route,
                         rworker_t *w, atomic_long *published, bench_gate_t *gate,
                         cli_metrics_t *metrics, const outbox_relay_tracer_t *tracer, char *err,
                         size_t errlen)
{
    outbox_store_options_t so = {
        .struct_size = sizeof so, .relation = relation, .driver = o->driver};
    outbox_relay_config_t cfg;
    outbox_relay_config_init(&cfg);
    cfg.route = route;
    cfg.batch = (size_t)o->batch;
    if (o->pipeline > 0)
        cfg.pipeline = (size_t)o->pipeline;
    cfg.until_idle = 1;
    cfg.poll_us = o->poll_us;
    if (o->destination)
        cfg.destination = o->destination;
    if (metrics) {
        cfg.observe = cli_metrics_observe;
        cfg.observe_ctx = cli_metrics_route_ctx(metrics, 0);
    }
    cfg.tracer = tracer;
    for (long i = 0; i < o->workers; i++) {
        outbox_diag_t d;
        w[i].events = o->events;
        w[i].poll_us = o->poll_us;
        w[i].published = published;
        w[i].gate = gate;
        if (outbox_store_open(o->store, &so, &w[i].store, &d) != OUTBOX_OK) {
            snprintf(err, errlen, "cannot open store %s: %s", bench_uri_shown(o->store), d.message);
            return BENCH_EXIT_FAIL;
        }
        if (outbox_sink_open(o->sink, NULL, &w[i].sink, &d) != OUTBOX_OK) {
            snprintf(err, errlen, "cannot open sink %s: %s", bench_uri_shown(o->sink), d.message);
            return BENCH_EXIT_USAGE;
        }
        /* A fresh destination of a real broker's (see round_destinations). */
        if (o->destination != NULL && warm_sink(w[i].sink, o->destination, err, errlen) != 0)
            return BENCH_EXIT_FAIL;
        if (outbox_relay_new(w[i].store, w[i].sink, &cfg, &w[i].relay, &d) != OUTBOX_OK) {
            snprintf(err, errlen, "relay: %s", d.message);
            return BENCH_EXIT_FAIL;
        }
    }
    return 0;
}

int bench_relay_drain(const bench_opts_t *o, const char *relation, const char *route,
                      bench_drain_t *out, char *err, size_t errlen)
{
    rworker_t *w = calloc((size_t)o->workers, sizeof *w);
    pthread_t *tid = calloc((size_t)o->workers, sizeof *tid);
    if (!w || !tid) {
        free(w);
        free(tid);
        snprintf(err, errlen, "out of memory");
        return BENCH_EXIT_FAIL;
    }
    atomic_long published;
    atomic_init(&published, 0);
    bench_gate_t gate;
    bench_gate_init(&gate);
    /* --metrics: what outbox relay --metrics-listen adds, around this drain. */
    cli_metrics_t *metrics = NULL;
    int rc = 0;
    if (o->metrics_listen) {
        cli_metrics_route_t mr = {.route = route, .store_uri = o->store, .relation = relation,
                                  .poll_us = o->poll_us};
        cli_metrics_opts_t mo = {.listen = o->metrics_listen, .stats_interval_us = 5000000};
        char why[600];
        if (cli_metrics_start(&mo, &mr, 1, &metrics, why, sizeof why) != 0) {
            snprintf(err, errlen, "--metrics: %s", why);
            rc = BENCH_EXIT_USAGE;
        }
    }
    /* --otlp-endpoint: what outbox relay --otlp-endpoint adds, every batch
     * traced; the export thread's last POST is outside the clock. */
    otlp_exporter_t *exporter = NULL;
#ifdef OUTBOX_HAVE_TRACING
    if (rc == 0 && o->otlp_endpoint) {
        otlp_options_t eo = {.endpoint = o->otlp_endpoint, .sample = 1, .service_name = "outbox-bench"};
        char why[600];
        if (otlp_start(&eo, &exporter, why, sizeof why) != 0) {
            snprintf(err, errlen, "--otlp-endpoint: %s", why);
            rc = BENCH_EXIT_USAGE;
        }
    }
#endif
    if (rc == 0)
        rc = rworkers_open(o, relation, route, w, &published, &gate, metrics,
                           exporter ? otlp_tracer(exporter) : NULL, err, errlen);
    long started = 0;
    for (long i = 0; rc == 0 && i < o->workers; i++) {
        if (pthread_create(&tid[i], NULL, rworker_main, &w[i]) != 0) {
            snprintf(err, errlen, "cannot start %ld threads", o->workers);
            rc = BENCH_EXIT_FAIL;
            break;
        }
        started++;
    }
    /* The relay's own share of the resident set: the high-water mark is
     * reset to what the process holds now (the staged backlog's leftovers,
     * the other side's caches), and read again after the drain. */
    out->rss_start_kb = bench_hwm_reset() == 0 ? bench_rss_kb() : -1;
    bench_gate_open(&gate, started, rc == 0);
    double cpu0 = bench_cpu_s();
    int64_t t0 = bench_mono_us();
    for (long i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    out->seconds = (double)(bench_mono_us() - t0) / 1e6;
    out->cpu_s = bench_cpu_s() - cpu0;
    out->rss_hwm_kb = out->rss_start_kb >= 0 ? bench_hwm_kb() : -1;
    out->published = 0;
    out->driver = w[0].store ? outbox_store_driver(w[0].store) : NULL;
    for (long i = 0; i < started; i++) {
        out->published += (long)w[i].own_published;
        if (w[i].rc != 0 && rc == 0) {
            snprintf(err, errlen, "%s", w[i].err);
            rc = w[i].rc;
        }
    }
    bench_gate_destroy(&gate);
    rworkers_free(w, o->workers);
    cli_metrics_stop(metrics);
#ifdef OUTBOX_HAVE_TRACING
    if (exporter != NULL) {
        otlp_counters_t c;
        otlp_stop(exporter, &c);
        fprintf(stderr, "outbox-bench: tracing: %llu spans exported, %llu dropped (queue full %llu, "
                        "export failed %llu)\n",
                (unsigned long long)c.exported,
                (unsigned long long)(c.dropped_queue + c.dropped_export + c.dropped_rejected),
                (unsigned long long)c.dropped_queue, (unsigned long long)c.dropped_export);
    }
#endif
    free(tid);
    return rc;
}

/* ------------------------------------------------------------ the run */

static int check_published(const bench_opts_t *o, void *b, const char *relation, const char *who,
                           char *err, size_t errlen)
{
    long n = 0;
    int rc = o->backend->count(b, relation, "published", &n, err, errlen);
    if (rc == 0 && n != o->events) {
        snprintf(err, errlen, "%s: %ld of %ld rows published after the drain", who, n, o->events);
        rc = BENCH_EXIT_FAIL;
    }
    return rc;
}

/* The drains of one round: the relay, the ceiling and, when the store has
 * one, the reference; with --table two-index or both, the relay on a table
 * with only the canonical indexes instead of or besides them. */
enum { SIDE_RELAY, SIDE_CEILING, SIDE_REFERENCE, SIDE_RELAY_TWO, SIDE_PRODUCER, SIDES };
static const char *const side_names[SIDES] = {"relay", "ceiling", "reference",
                                              "relay on the two-index table",
                                              "producer ceiling"};

/* A real sink's side of a run: the bench's own handle on the sink, for
 * creating and dropping each round's destinations, and the bare client
 * of its broker (NULL when none is built for the scheme). */
typedef struct sink_side {
    outbox_sink_t *ctl;
    int has_destinations; /* the sink creates and drops destinations */
    const bench_producer_t *producer;
    bench_sink_uri_t uri;
    char relay_dest[96], producer_dest[96]; /* this round's */
} sink_side_t;

static int dest_create(sink_side_t *ss, const char *dest, char *err, size_t errlen)
{
    if (outbox_sink_destination_create(ss->ctl, dest) != OUTBOX_OK) {
        snprintf(err, errlen, "creating destination %s on the sink: %s", dest,
                 outbox_sink_message(ss->ctl));
        return BENCH_EXIT_FAIL;
    }
    return 0;
}

/* Fresh destinations for the round's relay and producer ceiling. */
static int round_destinations(sink_side_t *ss, long round, char *err, size_t errlen)
{
    snprintf(ss->relay_dest, sizeof ss->relay_dest, "outbox_bench_%ld_%ld", (long)getpid(),
             round);
    snprintf(ss->producer_dest, sizeof ss->producer_dest, "outbox_bench_%ld_%ld_bare",
             (long)getpid(), round);
    if (!ss->has_destinations)
        return 0;
    int rc = dest_create(ss, ss->relay_dest, err, errlen);
    if (rc == 0 && ss->producer)
        rc = dest_create(ss, ss->producer_dest, err, errlen);
    return rc;
}

static void round_destinations_drop(sink_side_t *ss)
{
    if (!ss->has_destinations)
        return;
    if (outbox_sink_destination_drop(ss->ctl, ss->relay_dest) != OUTBOX_OK)
        bench_err("warning: dropping destination %s: %s", ss->relay_dest,
                  outbox_sink_message(ss->ctl));
    if (ss->producer && outbox_sink_destination_drop(ss->ctl, ss->producer_dest) != OUTBOX_OK)
        bench_err("warning: dropping destination %s: %s", ss->producer_dest,
                  outbox_sink_message(ss->ctl));
}

/* The producer ceiling: the backlog's rows as the relay would publish
 * them, read before the clock starts, sent by the bare client. */
static int producer_drain(const bench_opts_t *o, void *b, const char *backlog, sink_side_t *ss,
                          bench_drain_t *out, char *err, size_t errlen)
{
    bench_msgs_t ms = {0};
    int rc = o->backend->messages(b, backlog, &ms, err, errlen);
    if (rc == 0 && ms.n != o->events) {
        snprintf(err, errlen, "the backlog holds %ld rows, not %ld", ms.n, o->events);
        rc = BENCH_EXIT_FAIL;
    }
    char target[600];
    bench_sink_target(&ss->uri, ss->producer_dest, BENCH_ROUTE, target, sizeof target);
    if (rc == 0)
        rc = ss->producer->drain(&ss->uri, target, &ms, o, out, err, errlen);
    bench_msgs_free(&ms);
    /* Give the messages' memory back, so that the relay drain after this
     * one starts from the resident set it would have without it. */
    malloc_trim(0);
    if (rc == 0 && out->published != o->events) {
        snprintf(err, errlen, "producer ceiling: %ld of %ld acknowledged", out->published,
                 o->events);
        rc = BENCH_EXIT_FAIL;
    }
    return rc;
}

/* Recreates relation empty with the canonical schema (only the canonical
 * table's indexes when two_index) and fills it with a copy of the backlog. */
static int fresh_copy(const bench_opts_t *o, void *b, const char *backlog, const char *relation,
                      int two_index, char *err, size_t errlen)
{
    int rc = o->backend->drop_relation(b, relation, err, errlen);
    if (rc == 0)
        rc = o->backend->claim_relation(b, relation, err, errlen);
    if (rc == 0)
        rc = bench_schema_apply(o->store, relation, err, errlen);
    if (rc == 0 && two_index)
        rc = o->backend->canonical_only(b, relation, err, errlen);
    if (rc == 0)
        rc = o->backend->copy(b, backlog, relation, err, errlen);
    return rc;
}

/* One round: a fresh copy of the backlog for each side of sides[], then the
 * drains in an order that rotates with the round (the second side first in
 * round 0: with relay, ceiling and reference, the ceiling, as before the
 * reference existed), so no side always runs on the warmer cache. */
static int round_once(const bench_opts_t *o, void *b, int round, const char *backlog,
                      const char *const rels[SIDES], const int *sides, int n_sides,
                      sink_side_t *ss, bench_drain_t out[SIDES], char *err, size_t errlen)
{
    int rc = ss->ctl ? round_destinations(ss, round, err, errlen) : 0;
    bench_opts_t ro = *o;
    if (ss->ctl && ss->has_destinations)
        ro.destination = ss->relay_dest;
    for (int i = 0; i < n_sides && rc == 0; i++)
        if (sides[i] != SIDE_PRODUCER)
            rc = fresh_copy(o, b, backlog, rels[sides[i]], sides[i] == SIDE_RELAY_TWO, err,
                            errlen);
    for (int step = 0; step < n_sides && rc == 0; step++) {
        int k = sides[(1 + step + round * (n_sides - 1)) % n_sides];
        if (k != SIDE_PRODUCER)
            rc = o->backend->quiesce(b, rels[k], err, errlen);
        /* The machine's busy CPUs over the drain call (its set-up too,
         * which is short beside a drain). */
        double busy0 = bench_machine_busy_s();
        int64_t t0 = bench_mono_us();
        if (rc == 0)
            rc = k == SIDE_PRODUCER ? producer_drain(o, b, backlog, ss, &out[k], err, errlen)
                 : k == SIDE_RELAY || k == SIDE_RELAY_TWO
                     ? bench_relay_drain(&ro, rels[k], BENCH_ROUTE, &out[k], err, errlen)
                 : k == SIDE_CEILING ? o->backend->ceiling(b, o, rels[k], &out[k], err, errlen)
                                     : o->backend->reference(b, o, rels[k], &out[k], err, errlen);
        double busy1 = bench_machine_busy_s();
        int64_t wall = bench_mono_us() - t0;
        out[k].busy_cores = busy0 >= 0 && busy1 >= busy0 && wall > 0 ? (busy1 - busy0) * 1e6 / (double)wall : -1;
        if (rc == 0 && k != SIDE_PRODUCER)
            rc = check_published(o, b, rels[k], side_names[k], err, errlen);
    }
    if (ss->ctl)
        round_destinations_drop(ss);
    return rc;
}

/* Runs the driver over a few rows with statement tracing on, and checks
 * that the ceiling's copies of its statements are the ones it runs. */
static int verify_driver_sql(const bench_opts_t *o, void *b, const char *relation, int *verified,
                             char *err, size_t errlen)
{
    *verified = 0;
    int rc = o->backend->claim_relation(b, relation, err, errlen);
    if (rc == 0)
        rc = bench_schema_apply(o->store, relation, err, errlen);
    if (rc == 0)
        rc = bench_register_ok_sink(err, errlen);
    if (rc != 0)
        return rc;
    if (o->backend->trace_start)
        o->backend->trace_start();
    outbox_store_options_t so = {.struct_size = sizeof so, .relation = relation};
    outbox_store_t *s = NULL;
    outbox_sink_t *k = NULL;
    outbox_relay_t *r = NULL;
    outbox_diag_t d = {0};
    outbox_relay_config_t cfg;
    outbox_relay_config_init(&cfg);
    cfg.route = BENCH_ROUTE;
    cfg.batch = (size_t)o->batch;
    if (o->pipeline > 0)
        cfg.pipeline = (size_t)o->pipeline;
    cfg.until_idle = 1;
    char payload[3][BENCH_PAYLOAD_MAX];
    outbox_event_t ev[3];
    for (int i = 0; i < 3; i++) {
        size_t len = bench_payload(payload[i], i);
        ev[i] = (outbox_event_t){.event_type = "bench.order_created", .payload = payload[i],
                                 .payload_len = len, .ordering_key = i ? "key-1" : NULL};
    }
    if (outbox_store_open(o->store, &so, &s, &d) != OUTBOX_OK ||
        outbox_sink_open("benchok:", NULL, &k, &d) != OUTBOX_OK ||
        outbox_relay_new(s, k, &cfg, &r, &d) != OUTBOX_OK) {
        snprintf(err, errlen, "checking the driver's SQL: %s", d.message);
        rc = BENCH_EXIT_FAIL;
    } else if (outbox_store_stage(s, NULL, BENCH_ROUTE, ev, 3, NULL) != OUTBOX_OK) {
        snprintf(err, errlen, "checking the driver's SQL: %s", outbox_store_message(s));
        rc = BENCH_EXIT_FAIL;
    } else if (outbox_relay_run(r) != OUTBOX_OK) {
        snprintf(err, errlen, "checking the driver's SQL: %s", outbox_relay_message(r));
        rc = BENCH_EXIT_FAIL;
    }
    outbox_relay_free(r);
    outbox_sink_close(k);
    outbox_store_close(s);
    char err2[1024];
    int rc2 = o->backend->trace_check ? o->backend->trace_check(relation, verified, err2, sizeof err2)
                                      : 0;
    if (rc == 0 && rc2 != 0) {
        snprintf(err, errlen, "%s", err2);
        rc = rc2;
    }
    if (rc == 0)
        rc = o->backend->drop_relation(b, relation, err, errlen);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, long n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int bench_throughput(const bench_opts_t *o)
{
    char err[1024] = "";
    char ceiling_rel[300], reference_rel[300], backlog_rel[300], check_rel[300], two_rel[300];
    snprintf(ceiling_rel, sizeof ceiling_rel, "%s_ceiling", o->relation);
    snprintf(reference_rel, sizeof reference_rel, "%s_reference", o->relation);
    snprintf(two_rel, sizeof two_rel, "%s_two", o->relation);
    /* With --table two-index the relay's own relation is the two-index one. */
    const char *const side_rels[SIDES] = {o->relation, ceiling_rel, reference_rel,
                                          o->table == BENCH_TABLE_BOTH ? two_rel : o->relation};
    /* The ceiling and the reference copy the claim written for the shipped
     * indexes: they run with the shipped table only. */
    int sides[SIDES], n_sides = 0;
    if (o->table == BENCH_TABLE_TWO_INDEX) {
        sides[n_sides++] = SIDE_RELAY_TWO;
    } else {
        sides[n_sides++] = SIDE_RELAY;
        if (o->table == BENCH_TABLE_BOTH) {
            sides[n_sides++] = SIDE_RELAY_TWO;
        } else {
            sides[n_sides++] = SIDE_CEILING;
            if (o->backend->reference)
                sides[n_sides++] = SIDE_REFERENCE;
        }
    }
    const int main_side = o->table == BENCH_TABLE_TWO_INDEX ? SIDE_RELAY_TWO : SIDE_RELAY;
    const int has_ceiling = o->table == BENCH_TABLE_SHIPPED;
    const int has_reference = has_ceiling && o->backend->reference;
    snprintf(backlog_rel, sizeof backlog_rel, "%s_backlog", o->relation);
    snprintf(check_rel, sizeof check_rel, "%s_sqlcheck", o->relation);
    /* A sink that cannot open is bad input: say so before staging anything.
     * The handle stays open for the run when the sink has destinations to
     * create (a topic, a stream) or a producer ceiling. */
    sink_side_t ss = {0};
    outbox_diag_t d;
    if (outbox_sink_open(o->sink, NULL, &ss.ctl, &d) != OUTBOX_OK) {
        bench_err("cannot open sink %s: %s", bench_uri_shown(o->sink), d.message);
        return BENCH_EXIT_USAGE;
    }
    {
        const outbox_sink_vtable_t *kvt = outbox_sink_driver(ss.ctl)->sink;
        ss.has_destinations = OUTBOX_ENTRY_HAS(outbox_sink_vtable_t, kvt, destination_create) &&
                              OUTBOX_ENTRY_HAS(outbox_sink_vtable_t, kvt, destination_drop);
    }
    ss.producer = has_ceiling && o->backend->messages ? bench_producer_for(o->sink) : NULL;
    if (ss.producer) {
        char uerr[512];
        int urc = bench_sink_uri_parse(o->sink, &ss.uri, uerr, sizeof uerr);
        if (urc == 0 && ss.uri.path[0] && !strstr(ss.uri.path, "{destination}")) {
            snprintf(uerr, sizeof uerr,
                     "--sink: with the path \"%.64s\" every destination goes to one place; "
                     "the bench publishes each drain to a fresh one: give the URI no path, or "
                     "one with {destination}",
                     ss.uri.path);
            urc = BENCH_EXIT_USAGE;
        }
        if (urc != 0) {
            bench_err("%s", uerr);
            outbox_sink_close(ss.ctl);
            return urc;
        }
        sides[n_sides++] = SIDE_PRODUCER;
    } else if (has_ceiling && (strncasecmp(o->sink, "kafka:", 6) == 0 ||
                               strncasecmp(o->sink, "nats:", 5) == 0)) {
        bench_err("note: this outbox-bench was built without the %.*s client library: no "
                  "producer ceiling",
                  (int)strcspn(o->sink, ":"), o->sink);
    }
    if (!ss.producer && !ss.has_destinations) {
        outbox_sink_close(ss.ctl);
        ss.ctl = NULL;
    }

    double *eps = calloc((size_t)o->repeat, sizeof *eps);
    double *ceps = calloc((size_t)o->repeat, sizeof *ceps);
    double *ratio = calloc((size_t)o->repeat, sizeof *ratio);
    double *cpu = calloc((size_t)o->repeat, sizeof *cpu);
    double *ccpu = calloc((size_t)o->repeat, sizeof *ccpu);
    double *cpu_ratio = calloc((size_t)o->repeat, sizeof *cpu_ratio);
    double *reps = calloc((size_t)o->repeat, sizeof *reps);
    double *rratio = calloc((size_t)o->repeat, sizeof *rratio);
    double *teps = calloc((size_t)o->repeat, sizeof *teps);
    double *tratio = calloc((size_t)o->repeat, sizeof *tratio);
    double *peps = calloc((size_t)o->repeat, sizeof *peps);
    double *pcpu = calloc((size_t)o->repeat, sizeof *pcpu);
    double *lratio = calloc((size_t)o->repeat, sizeof *lratio);
    /* Busy CPUs of the relay's, the store ceiling's and the producer
     * ceiling's drains, and the CPU bound of each round. */
    double *rbusy = calloc((size_t)o->repeat, sizeof *rbusy);
    double *cbusy = calloc((size_t)o->repeat, sizeof *cbusy);
    double *pbusy = calloc((size_t)o->repeat, sizeof *pbusy);
    double *cbound = calloc((size_t)o->repeat, sizeof *cbound);
    long relay_hwm = -1, relay_growth = -1;
    char prates[2048] = "", lratios[1024] = "";
    size_t plen = 0, llen = 0;
    void *b = NULL;
    int rc = eps && ceps && ratio && cpu && ccpu && cpu_ratio && reps && rratio && teps &&
                     tratio && peps && pcpu && lratio && rbusy && cbusy && pbusy && cbound
                 ? 0
                 : BENCH_EXIT_FAIL;
    if (rc != 0)
        snprintf(err, sizeof err, "out of memory");
    if (rc == 0)
        rc = o->backend->open(o->store, &b, err, sizeof err);
    /* Refuse foreign tables before dropping anything. */
    const char *rels[] = {o->relation, ceiling_rel, backlog_rel, check_rel, reference_rel, two_rel};
    /* The two-index copy only when it is drained: a table of that name the
     * bench did not create stops only the runs that would use it. */
    const int n_rels = (int)(sizeof rels / sizeof rels[0]) - (o->table == BENCH_TABLE_BOTH ? 0 : 1);
    for (int i = 0; i < n_rels && rc == 0; i++)
        rc = o->backend->claim_relation(b, rels[i], err, sizeof err);
    int verified = 0;
    if (rc == 0 && o->backend->trace_start)
        rc = verify_driver_sql(o, b, check_rel, &verified, err, sizeof err);
    if (rc == 0 && !verified && o->backend->trace_start)
        bench_err("warning: could not observe the driver's SQL (is it linked to another "
                  "SQLite?); the ceiling's copy of it is unchecked");
    if (rc == 0)
        rc = bench_schema_apply(o->store, backlog_rel, err, sizeof err);
    double stage_s = 0;
    if (rc == 0)
        rc = bench_stage_backlog(o, backlog_rel, BENCH_ROUTE, &stage_s, err, sizeof err);
    char ratios[1024] = "", rratios[1024] = "", rates[2048] = "", trates[2048] = "";
    char tratios[1024] = "";
    size_t rlen = 0, rrlen = 0, elen = 0, tlen = 0, trlen = 0;
    const outbox_driver_t *driver = NULL;
    for (long r = 0; r < o->repeat && rc == 0; r++) {
        bench_drain_t drains[SIDES] = {{0}};
        rc = round_once(o, b, (int)r, backlog_rel, side_rels, sides, n_sides, &ss, drains, err,
                        sizeof err);
        if (rc != 0)
            break;
        const bench_drain_t relay = drains[main_side], ceiling = drains[SIDE_CEILING];
        if (relay.rss_hwm_kb > relay_hwm)
            relay_hwm = relay.rss_hwm_kb;
        if (relay.rss_hwm_kb >= 0 && relay.rss_hwm_kb - relay.rss_start_kb > relay_growth)
            relay_growth = relay.rss_hwm_kb - relay.rss_start_kb;
        if (has_ceiling) {
            const double relay_eps = relay.seconds > 0 ? (double)o->events / relay.seconds : 0;
            const double store_eps = ceiling.seconds > 0 ? (double)o->events / ceiling.seconds : 0;
            double lesser = store_eps;
            if (ss.producer) {
                double p_s = drains[SIDE_PRODUCER].seconds;
                peps[r] = p_s > 0 ? (double)o->events / p_s : 0;
                pcpu[r] = drains[SIDE_PRODUCER].cpu_s;
                if (peps[r] < lesser)
                    lesser = peps[r];
                if (plen < sizeof prates - 24)
                    plen += (size_t)snprintf(prates + plen, sizeof prates - plen, "%s%.0f",
                                             r ? "," : "", peps[r]);
            }
            lratio[r] = lesser > 0 ? relay_eps / lesser : 0;
            rbusy[r] = relay.busy_cores;
            cbusy[r] = ceiling.busy_cores;
            pbusy[r] = ss.producer ? drains[SIDE_PRODUCER].busy_cores : -1;
            cbound[r] = -1;
            if (ss.producer && cbusy[r] >= 0 && pbusy[r] >= 0 && store_eps > 0 && peps[r] > 0 &&
                lesser > 0) {
                /* The rate at which the machine's CPUs would be used up
                 * doing both sides' work, each costing what it did alone. */
                double per_event = cbusy[r] / store_eps + pbusy[r] / peps[r];
                double bound = per_event > 0 ? (double)bench_ncpu() / per_event : lesser;
                cbound[r] = bound < lesser ? bound / lesser : 1;
            }
            if (llen < sizeof lratios - 16)
                llen += (size_t)snprintf(lratios + llen, sizeof lratios - llen, "%s%.3f",
                                         r ? "," : "", lratio[r]);
        }
        if (o->table == BENCH_TABLE_BOTH) {
            double two_s = drains[SIDE_RELAY_TWO].seconds;
            teps[r] = two_s > 0 ? (double)o->events / two_s : 0;
            tratio[r] = relay.seconds > 0 ? teps[r] / ((double)o->events / relay.seconds) : 0;
            if (tlen < sizeof trates - 24)
                tlen += (size_t)snprintf(trates + tlen, sizeof trates - tlen, "%s%.0f",
                                         r ? "," : "", teps[r]);
            if (trlen < sizeof tratios - 16)
                trlen += (size_t)snprintf(tratios + trlen, sizeof tratios - trlen, "%s%.3f",
                                          r ? "," : "", tratio[r]);
        }
        if (has_reference) {
            double ref_s = drains[SIDE_REFERENCE].seconds;
            reps[r] = ref_s > 0 ? (double)o->events / ref_s : 0;
            rratio[r] = reps[r] > 0 && relay.seconds > 0 ? ((double)o->events / relay.seconds) / reps[r] : 0;
            if (rrlen < sizeof rratios - 16)
                rrlen += (size_t)snprintf(rratios + rrlen, sizeof rratios - rrlen, "%s%.3f",
                                          r ? "," : "", rratio[r]);
        }
        eps[r] = relay.seconds > 0 ? (double)o->events / relay.seconds : 0;
        ceps[r] = ceiling.seconds > 0 ? (double)o->events / ceiling.seconds : 0;
        ratio[r] = ceps[r] > 0 ? eps[r] / ceps[r] : 0;
        cpu[r] = relay.cpu_s;
        ccpu[r] = ceiling.cpu_s;
        cpu_ratio[r] = relay.cpu_s > 0 ? ceiling.cpu_s / relay.cpu_s : 0;
        if (rlen < sizeof ratios - 16)
            rlen += (size_t)snprintf(ratios + rlen, sizeof ratios - rlen, "%s%.3f", r ? "," : "",
                                     ratio[r]);
        if (elen < sizeof rates - 24)
            elen += (size_t)snprintf(rates + elen, sizeof rates - elen, "%s%.0f", r ? "," : "",
                                     eps[r]);
        driver = relay.driver;
    }

    if (b) {
        /* Leave no backlog behind, whatever happened. */
        char err2[512];
        for (int i = 0; i < n_rels; i++)
            o->backend->drop_relation(b, rels[i], err2, sizeof err2);
        o->backend->quiesce(b, NULL, err2, sizeof err2);
        o->backend->close(b);
    }
    if (rc == 0) {
        char store[1024], sink[1024];
        bench_json_str(store, sizeof store, o->store);
        bench_json_str(sink, sizeof sink, o->sink);
        long n = o->repeat;
        char cpu_ratio_text[32] = "null";
        if (o->backend->ceiling_in_process)
            snprintf(cpu_ratio_text, sizeof cpu_ratio_text, "%.3f", median(cpu_ratio, n));
        /* The reference's numbers, or nulls for a store without one. */
        char reference[1200] = "\"reference_events_per_s\":null,\"reference_ratio\":null,"
                               "\"reference_ratios\":null";
        if (has_reference)
            snprintf(reference, sizeof reference,
                     "\"reference_events_per_s\":%.0f,\"reference_ratio\":%.3f,"
                     "\"reference_ratios\":[%s]",
                     median(reps, n), median(rratio, n), rratios);
        char name[200], missing[200];
        bench_json_str(name, sizeof name, driver ? driver->name : "");
        bench_missing_entries(driver, missing, sizeof missing);
        const double cpu_med = median(cpu, n);
        /* The ceiling's numbers, or nulls when the tables were not the
         * shipped ones (as in no_ceiling.c's line). */
        char ceiling_text[1400] = "\"ceiling\":false,\"ceiling_events_per_s\":null,\"ratio\":null";
        char ratios_text[1100] = "null", ccpu_text[32] = "null";
        if (has_ceiling) {
            snprintf(ceiling_text, sizeof ceiling_text,
                     "\"ceiling\":true,\"ceiling_events_per_s\":%.0f,\"ratio\":%.3f",
                     median(ceps, n), median(ratio, n));
            snprintf(ratios_text, sizeof ratios_text, "[%s]", ratios);
            snprintf(ccpu_text, sizeof ccpu_text, "%.3f", median(ccpu, n));
        }
        static const char *const table_names[] = {"shipped", "two-index", "both"};
        char two_text[3200] = "\"two_index_events_per_s\":null,\"two_index_ratio\":null,"
                              "\"two_index_rounds\":null,\"two_index_ratios\":null";
        if (o->table == BENCH_TABLE_BOTH)
            snprintf(two_text, sizeof two_text,
                     "\"two_index_events_per_s\":%.0f,\"two_index_ratio\":%.3f,"
                     "\"two_index_rounds\":[%s],\"two_index_ratios\":[%s]",
                     median(teps, n), median(tratio, n), trates, tratios);
        /* The sink's: the producer ceiling, the ratio to the lesser of the
         * two ceilings, and the relay's share of the resident set. */
        char sink_text[4400];
        char pc_text[2200] = "\"producer_ceiling\":null,\"producer_ceiling_events_per_s\":null,"
                             "\"producer_ceiling_rounds\":null,\"producer_ceiling_cpu_s\":null";
        if (ss.producer)
            snprintf(pc_text, sizeof pc_text,
                     "\"producer_ceiling\":\"%s\",\"producer_ceiling_events_per_s\":%.0f,"
                     "\"producer_ceiling_rounds\":[%s],\"producer_ceiling_cpu_s\":%.3f",
                     ss.producer->client, median(peps, n), prates, median(pcpu, n));
        char lr_text[1200] = "\"ratio_to_lesser\":null,\"ratios_to_lesser\":null";
        if (has_ceiling)
            snprintf(lr_text, sizeof lr_text,
                     "\"ratio_to_lesser\":%.3f,\"ratios_to_lesser\":[%s]", median(lratio, n),
                     lratios);
        char busy_text[400] = "\"busy_cores\":null,\"cpu_bound_ratio\":null";
        if (has_ceiling && ss.producer && median(cbound, n) >= 0)
            snprintf(busy_text, sizeof busy_text,
                     "\"busy_cores\":{\"relay\":%.2f,\"store_ceiling\":%.2f,"
                     "\"producer_ceiling\":%.2f,\"cpus\":%ld},\"cpu_bound_ratio\":%.3f",
                     median(rbusy, n), median(cbusy, n), median(pbusy, n), bench_ncpu(),
                     median(cbound, n));
        char metrics_text[300];
        bench_json_str(metrics_text, sizeof metrics_text, o->metrics_listen ? o->metrics_listen : "");
        snprintf(sink_text, sizeof sink_text, "%s,%s,%s,\"relay_peak_rss_kb\":%ld,"
                 "\"relay_rss_growth_kb\":%ld,\"metrics\":%s", pc_text, lr_text, busy_text,
                 relay_hwm, relay_growth, o->metrics_listen ? metrics_text : "null");
        outbox_relay_config_t defaults;
        outbox_relay_config_init(&defaults);
        long pipeline = o->pipeline > 0 ? o->pipeline : (long)defaults.pipeline;
        /* The keys and their order are those of no_ceiling.c's line, then
         * the table's, then the sink's. */
        printf("{\"store\":%s,\"driver\":%s,\"sink\":%s,\"events\":%ld,\"keys\":%ld,"
               "\"batch\":%ld,\"workers\":%ld,\"events_per_s\":%.0f,\"cpu_s\":%.3f,"
               "\"cpu_s_per_1k_events\":%.4f,\"peak_rss_kb\":%ld,%s,\"repeat\":%ld,"
               "\"ratios\":%s,\"events_per_s_rounds\":[%s],\"ceiling_cpu_s\":%s,"
               "\"cpu_ratio\":%s,\"stage_events_per_s\":%.0f,%s,\"sql_verified\":%s,"
               "\"missing_entries\":%s,\"loadavg\":%.2f,\"table\":\"%s\",%s,%s,\"pipeline\":%ld}\n",
               store, name, sink, o->events, o->keys, o->batch, o->workers, median(eps, n),
               cpu_med, cpu_med * 1000 / (double)o->events, bench_peak_rss_kb(), ceiling_text, n,
               ratios_text, rates, ccpu_text, has_ceiling ? cpu_ratio_text : "null",
               stage_s > 0 ? (double)o->events / stage_s : 0, reference,
               has_ceiling && o->backend->trace_check ? (verified ? "true" : "false") : "null",
               missing, bench_loadavg(),
               table_names[o->table], two_text, sink_text, pipeline);
        fflush(stdout);
    } else {
        bench_err("%s", err);
    }
    free(eps);
    free(ceps);
    free(ratio);
    free(cpu);
    free(ccpu);
    free(cpu_ratio);
    free(reps);
    free(rratio);
    free(teps);
    free(tratio);
    free(peps);
    free(pcpu);
    free(lratio);
    free(rbusy);
    free(cbusy);
    free(pbusy);
    free(cbound);
    outbox_sink_close(ss.ctl);
    return rc;
}
