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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* ------------------------------------------------------------ the run */

static int check_published(const bench_opts_t *o, void *b, const char *relation, const char *who,
                           char *err, size_t errlen)
{
    long n = 0;
    int rc = o->ceiling->count(b, relation, "published", &n, err, errlen);
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
    const outbox_sink_ceiling_t *producer;
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

/* The producer ceiling: the messages a relay hands its sink for a copy
 * of the backlog, captured before the clock starts, sent by the bare
 * client to this round's destination of its own. */
static int producer_drain(const bench_opts_t *o, void *b, const char *backlog,
                          const char *capture, sink_side_t *ss, bench_drain_t *out, char *err,
                          size_t errlen)
{
    bench_msgs_t ms = {0};
    int rc = bench_capture_messages(o, b, backlog, capture, &ms, err, errlen);
    char why[512] = "";
    if (rc == 0)
        rc = bench_producer_drain(o, ss->producer, &ms, ss->producer_dest, out, why, sizeof why);
    if (why[0])
        snprintf(err, errlen, "producer ceiling: %s", why);
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

/* Runs the driver over a few rows with statement tracing on, and checks
 * that the ceiling's copies of its statements are the ones it runs. */
static int verify_driver_sql(const bench_opts_t *o, void *b, const char *relation, int *verified,
                             char *err, size_t errlen)
{
    *verified = 0;
    int rc = o->ceiling->claim_relation(b, relation, err, errlen);
    if (rc == 0)
        rc = bench_schema_apply(o->store, relation, err, errlen);
    if (rc == 0)
        rc = bench_register_ok_sink(err, errlen);
    if (rc != 0)
        return rc;
    if (o->ceiling->trace_start)
        o->ceiling->trace_start();
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
    int rc2 = o->ceiling->trace_check ? o->ceiling->trace_check(relation, verified, err2, sizeof err2)
                                      : 0;
    if (rc == 0 && rc2 != 0) {
        snprintf(err, errlen, "%s", err2);
        rc = rc2;
    }
    if (rc == 0)
        rc = o->ceiling->drop_relation(b, relation, err, errlen);
    return rc;
}

/* A throughput run: the relations of its sides, which sides drain and in
 * what order, the sink's side, and the bench's own store connection. It
 * points into itself (side_rels, rels): it stays where it was made. */
typedef struct run {
    const bench_opts_t *o;
    char ceiling_rel[300], reference_rel[300], backlog_rel[300], check_rel[300], two_rel[300],
        capture_rel[300];
    const char *side_rels[SIDES];
    int sides[SIDES], n_sides;
    int main_side;     /* the relay drain whose numbers are the relay's */
    int has_ceiling;   /* the store ceiling drains (the shipped table) */
    int has_reference; /* and the reference too */
    const char *rels[7]; /* every relation the run creates and drops */
    int n_rels;
    sink_side_t ss;
    void *b;
} run_t;

/* The relations and the sides of a run of o. */
static void run_plan(const bench_opts_t *o, run_t *run)
{
    run->o = o;
    snprintf(run->ceiling_rel, sizeof run->ceiling_rel, "%s_ceiling", o->relation);
    snprintf(run->reference_rel, sizeof run->reference_rel, "%s_reference", o->relation);
    snprintf(run->two_rel, sizeof run->two_rel, "%s_two", o->relation);
    snprintf(run->backlog_rel, sizeof run->backlog_rel, "%s_backlog", o->relation);
    snprintf(run->check_rel, sizeof run->check_rel, "%s_sqlcheck", o->relation);
    snprintf(run->capture_rel, sizeof run->capture_rel, "%s_capture", o->relation);
    run->side_rels[SIDE_RELAY] = o->relation;
    run->side_rels[SIDE_CEILING] = run->ceiling_rel;
    run->side_rels[SIDE_REFERENCE] = run->reference_rel;
    /* With --table two-index the relay's own relation is the two-index one. */
    run->side_rels[SIDE_RELAY_TWO] = o->table == BENCH_TABLE_BOTH ? run->two_rel : o->relation;
    /* The ceiling and the reference copy the claim written for the shipped
     * indexes: they run with the shipped table only. */
    run->main_side = o->table == BENCH_TABLE_TWO_INDEX ? SIDE_RELAY_TWO : SIDE_RELAY;
    run->has_ceiling = o->table == BENCH_TABLE_SHIPPED;
    run->has_reference = run->has_ceiling && o->ceiling->has_reference;
    run->sides[run->n_sides++] = run->main_side;
    if (o->table == BENCH_TABLE_BOTH)
        run->sides[run->n_sides++] = SIDE_RELAY_TWO;
    if (run->has_ceiling)
        run->sides[run->n_sides++] = SIDE_CEILING;
    if (run->has_reference)
        run->sides[run->n_sides++] = SIDE_REFERENCE;
    const char *rels[] = {o->relation,        run->ceiling_rel,   run->backlog_rel,
                          run->check_rel,     run->reference_rel, run->capture_rel,
                          run->two_rel};
    memcpy(run->rels, rels, sizeof rels);
    /* The two-index copy only when it is drained: a table of that name the
     * bench did not create stops only the runs that would use it. */
    run->n_rels = 7 - (o->table == BENCH_TABLE_BOTH ? 0 : 1);
}

/* The destination template of a sink URI: its path, or for AMQP (whose
 * path is the vhost) the routing_key option; *len 0 when it has none. */
static const char *sink_template(const char *uri, size_t *len)
{
    const char *a = strstr(uri, "://");
    const char *path = a ? a + 3 + strcspn(a + 3, "/?#") : "";
    *len = strcspn(path, "?#");
    if (strncasecmp(uri, "amqp", 4) != 0)
        return path;
    const char *q = path[*len] == '?' ? path + *len + 1 : "";
    for (*len = 0; *q && *q != '#'; q += strcspn(q, "&#") + (q[strcspn(q, "&#")] == '&'))
        if (strncmp(q, "routing_key=", 12) == 0) {
            *len = strcspn(q + 12, "&#");
            return q + 12;
        }
    return q;
}

/* The producer ceiling of a sink URI whose scheme has one: a destination
 * template that would send every round to one place is refused, and the
 * ceiling opened once, so that a URI it cannot serve is said before
 * staging anything. */
static int sink_side_producer(const bench_opts_t *o, sink_side_t *ss)
{
    size_t len = 0;
    const char *tpl = sink_template(o->sink, &len);
    char t[512], why[512] = "";
    snprintf(t, sizeof t, "%.*s", (int)(len < sizeof t ? len : sizeof t - 1), tpl);
    int rc = 0;
    if (len > 0 && strcmp(t, "/") != 0 && !strstr(t, "{destination}") &&
        !strcasestr(t, "%7Bdestination%7D")) {
        snprintf(why, sizeof why,
                 "--sink: with the destination template \"%.*s\" every destination goes to "
                 "one place; the bench publishes each drain to a fresh one: give the URI no "
                 "template, or one with {destination}",
                 (int)(len < 64 ? len : 64), t);
        rc = BENCH_EXIT_USAGE;
    }
    void *p = NULL;
    if (rc == 0)
        rc = ss->producer->open(o->sink, &p, why, sizeof why);
    if (p)
        ss->producer->close(p);
    if (rc != 0)
        bench_err("%s%s", strncmp(why, "--sink", 6) == 0 ? "" : "producer ceiling: ", why);
    return rc;
}

/* Opens the run's handle on the sink and finds its producer ceiling. A
 * sink that cannot open is bad input: said before staging anything. The
 * handle stays open for the run when the sink has destinations to create
 * (a topic, a stream) or a producer ceiling. Errors are printed. */
static int sink_side_open(const bench_opts_t *o, int has_ceiling, sink_side_t *ss)
{
    outbox_diag_t d;
    char err[512];
    ss->producer = has_ceiling ? bench_producer_for(o->sink) : NULL;
    if (ss->producer && bench_producer_register(ss->producer, err, sizeof err) != 0) {
        bench_err("%s", err);
        return BENCH_EXIT_FAIL;
    }
    if (outbox_sink_open(o->sink, NULL, &ss->ctl, &d) != OUTBOX_OK) {
        bench_err("cannot open sink %s: %s", bench_uri_shown(o->sink), d.message);
        return BENCH_EXIT_USAGE;
    }
    const outbox_sink_vtable_t *kvt = outbox_sink_driver(ss->ctl)->sink;
    ss->has_destinations = OUTBOX_ENTRY_HAS(outbox_sink_vtable_t, kvt, destination_create) &&
                           OUTBOX_ENTRY_HAS(outbox_sink_vtable_t, kvt, destination_drop);
    int rc = ss->producer ? sink_side_producer(o, ss) : 0;
    if (rc != 0) {
        outbox_sink_close(ss->ctl);
        ss->ctl = NULL;
        return rc;
    }
    if (!ss->producer && has_ceiling &&
        (strncasecmp(o->sink, "kafka:", 6) == 0 || strncasecmp(o->sink, "nats:", 5) == 0))
        bench_err("note: this outbox-bench was built without the %.*s client library: no "
                  "producer ceiling",
                  (int)strcspn(o->sink, ":"), o->sink);
    if (!ss->producer && !ss->has_destinations) {
        outbox_sink_close(ss->ctl);
        ss->ctl = NULL;
    }
    return 0;
}

/* Before the rounds: the bench's connection, its relations claimed
 * (foreign tables refused before anything is dropped), the driver's SQL
 * checked against the ceiling's copy, and the backlog staged once. */
static int run_prepare(run_t *run, int *verified, double *stage_s, char *err, size_t errlen)
{
    const bench_opts_t *o = run->o;
    int rc = bench_ceiling_open(o->ceiling, o->store, &run->b, err, errlen);
    for (int i = 0; i < run->n_rels && rc == 0; i++)
        rc = o->ceiling->claim_relation(run->b, run->rels[i], err, errlen);
    if (rc == 0 && o->ceiling->trace_start)
        rc = verify_driver_sql(o, run->b, run->check_rel, verified, err, errlen);
    if (rc == 0 && !*verified && o->ceiling->trace_start)
        bench_err("warning: could not observe the driver's SQL (is it linked to another "
                  "SQLite?); the ceiling's copy of it is unchecked");
    if (rc == 0)
        rc = bench_schema_apply(o->store, run->backlog_rel, err, errlen);
    if (rc == 0)
        rc = bench_stage_backlog(o, run->backlog_rel, BENCH_ROUTE, stage_s, err, errlen);
    return rc;
}

/* After the rounds, whatever happened: no backlog is left behind. */
static void run_cleanup(run_t *run)
{
    const bench_opts_t *o = run->o;
    if (!run->b)
        return;
    char err2[512];
    for (int i = 0; i < run->n_rels; i++)
        o->ceiling->drop_relation(run->b, run->rels[i], err2, sizeof err2);
    o->ceiling->quiesce(run->b, NULL, err2, sizeof err2);
    o->ceiling->close(run->b);
    run->b = NULL;
}

/* ------------------------------------------------------------ one round */

/* A fresh copy of the backlog for each side that drains a table (the
 * two-index copy, with --table both or two-index, without the shipped
 * schema's extra indexes). */
static int round_copies(run_t *run, char *err, size_t errlen)
{
    int rc = 0;
    for (int i = 0; i < run->n_sides && rc == 0; i++) {
        int k = run->sides[i];
        if (k != SIDE_PRODUCER)
            rc = bench_fresh_copy(run->o, run->b, run->backlog_rel, run->side_rels[k],
                            k == SIDE_RELAY_TWO, err, errlen);
    }
    return rc;
}

/* Side k's drain. ro is o with this round's destination for the relays. */
static int drain_side(run_t *run, const bench_opts_t *ro, int k, bench_drain_t *out, char *err,
                      size_t errlen)
{
    const bench_opts_t *o = run->o;
    switch (k) {
    case SIDE_RELAY:
    case SIDE_RELAY_TWO:
        return bench_relay_drain(ro, run->side_rels[k], BENCH_ROUTE, out, err, errlen);
    case SIDE_CEILING:
        return bench_ceiling_drain(o, run->b, run->side_rels[k], 0, out, err, errlen);
    case SIDE_REFERENCE:
        return bench_ceiling_drain(o, run->b, run->side_rels[k], 1, out, err, errlen);
    default:
        return producer_drain(o, run->b, run->backlog_rel, run->capture_rel, &run->ss, out, err,
                              errlen);
    }
}

/* Side k's drain from the same quiet store, with the machine's busy CPUs
 * over it (its set-up too, which is short beside a drain), and its table
 * checked after it: every row published. */
static int drain_timed(run_t *run, const bench_opts_t *ro, int k, bench_drain_t *out, char *err,
                       size_t errlen)
{
    const bench_opts_t *o = run->o;
    int rc = 0;
    if (k != SIDE_PRODUCER)
        rc = o->ceiling->quiesce(run->b, run->side_rels[k], err, errlen);
    double busy0 = bench_machine_busy_s();
    int64_t t0 = bench_mono_us();
    if (rc == 0)
        rc = drain_side(run, ro, k, out, err, errlen);
    double busy1 = bench_machine_busy_s();
    int64_t wall = bench_mono_us() - t0;
    out->busy_cores =
        busy0 >= 0 && busy1 >= busy0 && wall > 0 ? (busy1 - busy0) * 1e6 / (double)wall : -1;
    if (rc == 0 && k != SIDE_PRODUCER)
        rc = check_published(o, run->b, run->side_rels[k], side_names[k], err, errlen);
    return rc;
}

/* One round: a fresh copy of the backlog for each side, then the drains in
 * an order that rotates with the round (the second side first in round 0:
 * with relay, ceiling and reference, the ceiling, as before the reference
 * existed), so no side always runs on the warmer cache. */
static int round_once(run_t *run, int round, bench_drain_t out[SIDES], char *err, size_t errlen)
{
    sink_side_t *ss = &run->ss;
    int rc = ss->ctl ? round_destinations(ss, round, err, errlen) : 0;
    bench_opts_t ro = *run->o;
    if (ss->ctl && ss->has_destinations)
        ro.destination = ss->relay_dest;
    if (rc == 0)
        rc = round_copies(run, err, errlen);
    const int n = run->n_sides;
    for (int step = 0; step < n && rc == 0; step++) {
        int k = run->sides[(1 + step + round * (n - 1)) % n];
        rc = drain_timed(run, &ro, k, &out[k], err, errlen);
    }
    if (ss->ctl)
        round_destinations_drop(ss);
    return rc;
}

/* ---------------------------------------------------- a round's numbers */

static double per_s(long events, double seconds)
{
    return seconds > 0 ? (double)events / seconds : 0;
}

/* The relay drain's resident set: the highest mark and growth so far. */
static void record_memory(const bench_drain_t *relay, bench_result_t *res)
{
    if (relay->rss_hwm_kb > res->relay_hwm_kb)
        res->relay_hwm_kb = relay->rss_hwm_kb;
    if (relay->rss_hwm_kb >= 0 && relay->rss_hwm_kb - relay->rss_start_kb > res->relay_growth_kb)
        res->relay_growth_kb = relay->rss_hwm_kb - relay->rss_start_kb;
}

/* The producer ceiling beside the store's: the relay against the lesser
 * of the two, and how far the machine's CPUs would let both go. */
static void record_lesser(const bench_opts_t *o, const run_t *run, const bench_drain_t d[SIDES],
                          bench_round_t *r)
{
    double lesser = r->ceps;
    const int producer = run->ss.producer != NULL;
    if (producer) {
        r->peps = per_s(o->events, d[SIDE_PRODUCER].seconds);
        r->pcpu = d[SIDE_PRODUCER].cpu_s;
        if (r->peps < lesser)
            lesser = r->peps;
    }
    r->lratio = lesser > 0 ? r->eps / lesser : 0;
    r->rbusy = d[run->main_side].busy_cores;
    r->cbusy = d[SIDE_CEILING].busy_cores;
    r->pbusy = producer ? d[SIDE_PRODUCER].busy_cores : -1;
    r->cbound = -1;
    if (producer && r->cbusy >= 0 && r->pbusy >= 0 && r->ceps > 0 && r->peps > 0 && lesser > 0) {
        /* The rate at which the machine's CPUs would be used up doing
         * both sides' work, each costing what it did alone. */
        double per_event = r->cbusy / r->ceps + r->pbusy / r->peps;
        double bound = per_event > 0 ? (double)bench_ncpu() / per_event : lesser;
        r->cbound = bound < lesser ? bound / lesser : 1;
    }
}

/* The numbers of one round's drains into r. */
static void record_round(const run_t *run, const bench_drain_t d[SIDES], bench_round_t *r,
                         bench_result_t *res)
{
    const bench_opts_t *o = run->o;
    const bench_drain_t *relay = &d[run->main_side], *ceiling = &d[SIDE_CEILING];
    record_memory(relay, res);
    r->eps = per_s(o->events, relay->seconds);
    r->cpu = relay->cpu_s;
    r->ceps = per_s(o->events, ceiling->seconds);
    r->ccpu = ceiling->cpu_s;
    r->ratio = r->ceps > 0 ? r->eps / r->ceps : 0;
    r->cpu_ratio = relay->cpu_s > 0 ? ceiling->cpu_s / relay->cpu_s : 0;
    if (run->has_ceiling)
        record_lesser(o, run, d, r);
    if (o->table == BENCH_TABLE_BOTH) {
        r->teps = per_s(o->events, d[SIDE_RELAY_TWO].seconds);
        r->tratio = relay->seconds > 0 ? r->teps / r->eps : 0;
    }
    if (run->has_reference) {
        r->reps = per_s(o->events, d[SIDE_REFERENCE].seconds);
        r->rratio = r->reps > 0 && relay->seconds > 0 ? r->eps / r->reps : 0;
    }
    res->driver = relay->driver;
}

/* ------------------------------------------------------------ the run */

/* The rounds, each recorded into res; stage_s is staging's time. */
static int run_rounds(run_t *run, double stage_s, bench_result_t *res, char *err, size_t errlen)
{
    const bench_opts_t *o = run->o;
    int rc = 0;
    for (long r = 0; r < o->repeat && rc == 0; r++) {
        bench_drain_t drains[SIDES] = {{0}};
        rc = round_once(run, (int)r, drains, err, errlen);
        if (rc != 0)
            break;
        res->rounds[r].stage_eps = per_s(o->events, stage_s);
        record_round(run, drains, &res->rounds[r], res);
        res->n = r + 1;
    }
    return rc;
}

int bench_throughput(const bench_opts_t *o)
{
    char err[1024] = "";
    run_t run = {0};
    run_plan(o, &run);
    int rc = sink_side_open(o, run.has_ceiling, &run.ss);
    if (rc != 0)
        return rc;
    if (run.ss.producer)
        run.sides[run.n_sides++] = SIDE_PRODUCER;
    bench_result_t res = {.o = o, .has_ceiling = run.has_ceiling,
                          .has_reference = run.has_reference,
                          .ceiling_in_process = o->ceiling->in_process,
                          .traced = o->ceiling->trace_check != NULL,
                          .producer = run.ss.producer ? run.ss.producer->client() : NULL,
                          .relay_hwm_kb = -1, .relay_growth_kb = -1};
    res.rounds = calloc((size_t)o->repeat, sizeof *res.rounds);
    if (!res.rounds) {
        snprintf(err, sizeof err, "out of memory");
        rc = BENCH_EXIT_FAIL;
    }
    double stage_s = 0;
    if (rc == 0)
        rc = run_prepare(&run, &res.verified, &stage_s, err, sizeof err);
    if (rc == 0)
        rc = run_rounds(&run, stage_s, &res, err, sizeof err);
    run_cleanup(&run);
    if (rc == 0)
        rc = bench_result_report(&res);
    else
        bench_err("%s", err);
    free(res.rounds);
    outbox_sink_close(run.ss.ctl);
    return rc;
}
