/* outbox-bench: the backlog and the relay, for every mode. The backlog is
 * staged once through outbox_store_stage(); a drain copies it afresh (the
 * store ceiling's copy) and empties the copy with --workers relays, each
 * with its store, sink and relay opened before the clock starts. */
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
    if (!w) {
        snprintf(err, errlen, "out of memory");
        return BENCH_EXIT_FAIL;
    }
    atomic_long published;
    atomic_init(&published, 0);
    bench_team_t team = {0};
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
        rc = rworkers_open(o, relation, route, w, &published, &team.gate, metrics,
                           exporter ? otlp_tracer(exporter) : NULL, err, errlen);
    const int teamed = rc == 0;
    if (teamed)
        rc = bench_team_start(&team, o->workers, rworker_main, w, sizeof *w, err, errlen);
    long started = team.started;
    /* The relay's own share of the resident set: the high-water mark is
     * reset to what the process holds now (the staged backlog's leftovers,
     * the other side's caches), and read again after the drain. */
    out->rss_start_kb = bench_hwm_reset() == 0 ? bench_rss_kb() : -1;
    if (teamed)
        bench_team_finish(&team, rc == 0, &out->seconds, &out->cpu_s);
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
    return rc;
}

/* Recreates relation empty with the shipped schema (only the canonical
 * table's indexes when two_index) and fills it with a copy of the backlog. */
int bench_fresh_copy(const bench_opts_t *o, void *b, const char *backlog, const char *relation,
                     int two_index, char *err, size_t errlen)
{
    int rc = o->ceiling->drop_relation(b, relation, err, errlen);
    if (rc == 0)
        rc = o->ceiling->claim_relation(b, relation, err, errlen);
    if (rc == 0)
        rc = bench_schema_apply(o->store, relation, err, errlen);
    if (rc == 0 && two_index)
        rc = o->ceiling->canonical_only(b, relation, err, errlen);
    if (rc == 0)
        rc = o->ceiling->copy(b, backlog, relation, err, errlen);
    return rc;
}

