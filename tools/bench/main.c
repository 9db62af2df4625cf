/* outbox-bench: relay throughput against the store's physical ceiling (or,
 * for any other store driver, without one), and commit-to-publish latency.
 * See docs/performance.md. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench.h"
#include "metrics.h"
#include "otlp.h"

static const char usage_text[] =
    "usage: outbox-bench --store URI [options]\n"
    "\n"
    "Throughput (default): stage a backlog of --events events, drain it with --workers\n"
    "relays, drain an identical backlog with the store's bare claim/mark SQL (the\n"
    "ceiling), and print one JSON line with both rates and their ratio. A third copy is\n"
    "drained by a plain reference claim+mark (NAME_reference), for scale. The line also\n"
    "has the bench's peak RSS and the relay drain's own (relay_peak_rss_kb, and\n"
    "relay_rss_growth_kb over what the process held when the drain started).\n"
    "\n"
    "  --store URI        store to measure (sqlite:///path/bench.db,\n"
    "                     postgresql://..., mongodb://HOST/DATABASE)\n"
    "  --relation NAME    relation to create and drop (default outbox_bench; the ceiling\n"
    "                     uses NAME_ceiling); a table outbox-bench did not create is refused\n"
    "  --sink URI         sink for the relay (default null:). With kafka://, nats://,\n"
    "                     amqp://, redis:// or http(s):// (no path, or one with\n"
    "                     {destination}) each round also runs the producer ceiling: a\n"
    "                     bare librdkafka, libnats, librabbitmq, hiredis or libcurl\n"
    "                     client sends the same messages (payloads as the store\n"
    "                     returns them, keys, CloudEvents headers) --batch at a time,\n"
    "                     waiting for the acks of\n"
    "                     each chunk; ratio_to_lesser = relay / min(store ceiling,\n"
    "                     producer ceiling). Each round's relay and producer get fresh\n"
    "                     destinations (topics, streams), dropped after the round\n"
    "  --events N         backlog size (default 100000)\n"
    "  --keys K           ordering keys, round-robin (default 0: no keys)\n"
    "  --batch B          claim batch size (default 100)\n"
    "  --workers W        relays (and ceiling connections) in parallel (default 1)\n"
    "  --pipeline P       batches each relay keeps in flight, 1 to 16 (default: the\n"
    "                     relay's, as outbox relay --pipeline)\n"
    "  --repeat N         rounds, each on a fresh copy of the backlog, the ceiling and\n"
    "                     the relay taking turns to go first; medians are printed\n"
    "                     (default 3, 1 with --quick)\n"
    "  --quick            a few thousand events: a smoke test, not a measurement\n"
    "  --table T          PostgreSQL: the indexes of the relay's table. shipped (default):\n"
    "                     what schema apply creates; two-index: only the canonical table's\n"
    "                     (primary key, unique (route, event_id), the claim index), no\n"
    "                     ceiling or reference; both: each round drains the relay on a\n"
    "                     shipped copy and a two-index copy (NAME_two), in turns, and\n"
    "                     prints the rates and their ratio, no ceiling or reference\n"
    "  --metrics HOST:PORT the relays run with outbox relay --metrics-listen's metrics:\n"
    "                     the observer, its aggregation, the HTTP server on HOST:PORT and\n"
    "                     the stats poll; compare a run's ratio with and without it\n"
    "  --otlp-endpoint URL the relays trace every batch, as outbox relay --otlp-endpoint\n"
    "                     at --trace-sample 1, and send the spans to URL; compare a run's\n"
    "                     rate with and without it\n"
    "\n"
    "Throughput without a ceiling, for any store driver: stage the backlog on a fresh\n"
    "route, drain it with --workers relays, check that every row was published once,\n"
    "purge it; one JSON line of the same keys, the ceiling's and the reference's null.\n"
    "Chosen by --driver, by --no-ceiling, and for a URI scheme other than sqlite,\n"
    "postgresql and mongodb (whose ceiling runs on FerretDB only). It needs nothing\n"
    "but the driver's public entries (stats, purge and schema_apply are used when\n"
    "present) and never drops anything.\n"
    "\n"
    "  --driver NAME_OR_PATH  the store driver: a name on the driver path (sqlite) or a\n"
    "                     module file (./store-mine.so), as outbox conformance takes it\n"
    "  --no-ceiling       this mode on sqlite, postgresql or mongodb too\n"
    "  (--relation, default outbox_bench_driver, is created with the driver's schema apply\n"
    "  when it does not exist; --sink, --events, --keys, --batch, --workers, --repeat,\n"
    "  --quick and --poll apply)\n"
    "\n"
    "Latency: a producer stages one event per transaction at --rate for --duration;\n"
    "prints commit-to-publish p50/p99/p99.9 as one JSON line.\n"
    "\n"
    "  --latency          latency mode\n"
    "  --sink URI         publish through this sink (on a fresh destination) and measure\n"
    "                     commit to the sink's OK, i.e. the broker's acknowledgement\n"
    "                     (default: an in-process sink that records the hand-over)\n"
    "  --rate R           events per second, in total (default 1000)\n"
    "  --producers P      producer threads, each with its own connection, sharing the\n"
    "                     rate (default 1); one synchronous commit per event limits a\n"
    "                     single producer to about 1 / commit latency\n"
    "  --duration D       how long the producer runs, e.g. 10s (default 10s)\n"
    "  --poll D           relay poll interval when the store has no push wake-up\n"
    "                     (default 100ms, the relay's own default); in throughput mode,\n"
    "                     how long a worker that found nothing waits before it claims again\n"
    "\n"
    "Sustained: a producer stages --events-per-round events per transaction at --rate\n"
    "events per second (as fast as it can without --rate) while --workers relays drain;\n"
    "one JSON line per --interval (events/s published, pending backlog, PostgreSQL dead\n"
    "tuples), then one comparing the last interval with the first.\n"
    "\n"
    "  --sustain D        sustained mode for D, e.g. 10m\n"
    "  --interval D       reporting interval (default 1m)\n"
    "  --events-per-round N  events per producer transaction (default 100)\n"
    "  --pg-autovacuum    apply the per-table autovacuum settings of\n"
    "                     sql/postgres/autovacuum.sql to the relation first (PostgreSQL)\n"
    "  --purge-after D    purge (every 5 s) the rows published more than D ago\n"
    "  (--rate, --keys, --batch, --workers, --sink and --poll apply too)\n"
    "\n"
    "  --pgbench-script   print the PostgreSQL ceiling's pgbench script for --relation\n"
    "                     (the NAME_ceiling table it drains) and --batch, and exit\n"
    "  --help             this text\n";

enum {
    OPT_STORE = 256,
    OPT_RELATION,
    OPT_SINK,
    OPT_EVENTS,
    OPT_KEYS,
    OPT_BATCH,
    OPT_WORKERS,
    OPT_PIPELINE,
    OPT_REPEAT,
    OPT_QUICK,
    OPT_LATENCY,
    OPT_RATE,
    OPT_PRODUCERS,
    OPT_DURATION,
    OPT_POLL,
    OPT_PGBENCH_SCRIPT,
    OPT_SUSTAIN,
    OPT_INTERVAL,
    OPT_EVENTS_PER_ROUND,
    OPT_PG_AUTOVACUUM,
    OPT_PURGE_AFTER,
    OPT_DRIVER,
    OPT_NO_CEILING,
    OPT_TABLE,
    OPT_METRICS,
    OPT_OTLP_ENDPOINT,
    OPT_HELP,
};

static const struct option options[] = {
    {"store", required_argument, NULL, OPT_STORE},
    {"relation", required_argument, NULL, OPT_RELATION},
    {"sink", required_argument, NULL, OPT_SINK},
    {"events", required_argument, NULL, OPT_EVENTS},
    {"keys", required_argument, NULL, OPT_KEYS},
    {"batch", required_argument, NULL, OPT_BATCH},
    {"workers", required_argument, NULL, OPT_WORKERS},
    {"pipeline", required_argument, NULL, OPT_PIPELINE},
    {"repeat", required_argument, NULL, OPT_REPEAT},
    {"quick", no_argument, NULL, OPT_QUICK},
    {"latency", no_argument, NULL, OPT_LATENCY},
    {"rate", required_argument, NULL, OPT_RATE},
    {"producers", required_argument, NULL, OPT_PRODUCERS},
    {"duration", required_argument, NULL, OPT_DURATION},
    {"poll", required_argument, NULL, OPT_POLL},
    {"pgbench-script", no_argument, NULL, OPT_PGBENCH_SCRIPT},
    {"sustain", required_argument, NULL, OPT_SUSTAIN},
    {"interval", required_argument, NULL, OPT_INTERVAL},
    {"events-per-round", required_argument, NULL, OPT_EVENTS_PER_ROUND},
    {"pg-autovacuum", no_argument, NULL, OPT_PG_AUTOVACUUM},
    {"purge-after", required_argument, NULL, OPT_PURGE_AFTER},
    {"driver", required_argument, NULL, OPT_DRIVER},
    {"no-ceiling", no_argument, NULL, OPT_NO_CEILING},
    {"table", required_argument, NULL, OPT_TABLE},
    {"metrics", required_argument, NULL, OPT_METRICS},
    {"otlp-endpoint", required_argument, NULL, OPT_OTLP_ENDPOINT},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    bench_err("%s", line);
    return BENCH_EXIT_USAGE;
}

static int parse_long(const char *opt, const char *text, long min, long max, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (!*text || *end || errno || v < min || v > max) {
        bench_err("%s: expected a whole number from %ld to %ld, got \"%.64s\"", opt, min, max,
                  text);
        return BENCH_EXIT_USAGE;
    }
    *out = v;
    return 0;
}

static int parse_duration(const char *opt, const char *text, int64_t *out)
{
    outbox_diag_t d;
    if (outbox_parse_duration(text, out, &d) != OUTBOX_OK) {
        bench_err("%s: %s", opt, d.message);
        return BENCH_EXIT_USAGE;
    }
    if (*out <= 0) {
        bench_err("%s: must be above 0, got \"%.64s\"", opt, text);
        return BENCH_EXIT_USAGE;
    }
    return 0;
}

const bench_backend_t *bench_backend_for(const char *uri)
{
    size_t n = strcspn(uri, ":");
    if (uri[n] != ':')
        return NULL;
    if (n == 6 && strncasecmp(uri, "sqlite", 6) == 0)
        return &bench_sqlite_backend;
#ifdef OUTBOX_BENCH_POSTGRES
    if ((n == 8 && strncasecmp(uri, "postgres", 8) == 0) ||
        (n == 10 && strncasecmp(uri, "postgresql", 10) == 0))
        return &bench_postgres_backend;
#endif
#ifdef OUTBOX_BENCH_MONGO
    if (n == 7 && strncasecmp(uri, "mongodb", 7) == 0)
        return &bench_mongo_backend;
#endif
    return NULL;
}

/* A store URI, and the backend that measures its ceiling (NULL when the
 * bench has none: the store is then measured without one). */
static int check_store(const char *uri, const bench_backend_t **out)
{
    size_t n = strcspn(uri, ":");
    if (uri[n] != ':' || n == 0)
        return bad("--store: \"%.200s\" is not a URI (expected e.g. sqlite:///tmp/bench.db)",
                   uri);
    *out = bench_backend_for(uri);
    return 0;
}

/* --driver: loads it now, so that a missing module or a sink driver is
 * refused before anything runs. */
static int check_driver(const char *driver)
{
    if (!*driver)
        return bad("--driver: empty name (expected a driver name or a module path)");
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    if (outbox_driver_load(driver, &drv, &d) != OUTBOX_OK)
        return bad("--driver %.200s: %s", driver, d.message);
    if (drv->kind != OUTBOX_DRIVER_STORE)
        return bad("--driver %.200s: %s is a %s driver, not a store driver", driver, drv->name,
                   drv->kind == OUTBOX_DRIVER_SINK ? "sink" : "non-store");
    return 0;
}

static int parse(int argc, char **argv, bench_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->relation = "outbox_bench";
    o->batch = 100;
    o->workers = 1;
    o->producers = 1;
    o->events = -1;
    o->rate = -1;
    o->duration_us = -1;
    o->poll_us = 100 * 1000;
    const char *sink = NULL;
    int seen_events = 0, seen_workers = 0, seen_repeat = 0, seen_rate = 0, seen_duration = 0,
        seen_producers = 0, seen_sustain_opt = 0, seen_relation = 0, seen_table = 0;
    o->interval_us = 60 * 1000000LL;
    o->events_per_round = 100;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", options, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case OPT_STORE: o->store = optarg; break;
        case OPT_RELATION:
            seen_relation = 1;
            o->relation = optarg;
            break;
        case OPT_SINK: sink = optarg; break;
        case OPT_EVENTS:
            seen_events = 1;
            rc = parse_long("--events", optarg, 1, 100000000, &o->events);
            break;
        case OPT_KEYS: rc = parse_long("--keys", optarg, 0, 10000000, &o->keys); break;
        case OPT_BATCH: rc = parse_long("--batch", optarg, 1, 100000, &o->batch); break;
        case OPT_WORKERS:
            seen_workers = 1;
            rc = parse_long("--workers", optarg, 1, 64, &o->workers);
            break;
        case OPT_PIPELINE: rc = parse_long("--pipeline", optarg, 1, 16, &o->pipeline); break;
        case OPT_REPEAT:
            seen_repeat = 1;
            rc = parse_long("--repeat", optarg, 1, 100, &o->repeat);
            break;
        case OPT_QUICK: o->quick = 1; break;
        case OPT_LATENCY: o->latency = 1; break;
        case OPT_RATE: {
            seen_rate = 1;
            char *end = NULL;
            errno = 0;
            o->rate = strtod(optarg, &end);
            if (!*optarg || *end || errno || !isfinite(o->rate) || o->rate <= 0 || o->rate > 1e6)
                rc = bad("--rate: expected events per second above 0 and at most 1000000, got "
                         "\"%.64s\"",
                         optarg);
            break;
        }
        case OPT_PRODUCERS:
            seen_producers = 1;
            rc = parse_long("--producers", optarg, 1, 64, &o->producers);
            break;
        case OPT_DURATION:
            seen_duration = 1;
            rc = parse_duration("--duration", optarg, &o->duration_us);
            if (rc == 0 && o->duration_us > 3600LL * 1000000)
                rc = bad("--duration: at most 1h, got \"%.64s\"", optarg);
            break;
        case OPT_POLL:
            rc = parse_duration("--poll", optarg, &o->poll_us);
            break;
        case OPT_PGBENCH_SCRIPT: o->pgbench_script = 1; break;
        case OPT_SUSTAIN:
            o->sustain = 1;
            rc = parse_duration("--sustain", optarg, &o->duration_us);
            if (rc == 0 && o->duration_us > 24 * 3600LL * 1000000)
                rc = bad("--sustain: at most 24h, got \"%.64s\"", optarg);
            break;
        case OPT_INTERVAL:
            seen_sustain_opt = 1;
            rc = parse_duration("--interval", optarg, &o->interval_us);
            break;
        case OPT_EVENTS_PER_ROUND:
            seen_sustain_opt = 1;
            rc = parse_long("--events-per-round", optarg, 1, 100000, &o->events_per_round);
            break;
        case OPT_PG_AUTOVACUUM:
            seen_sustain_opt = 1;
            o->pg_autovacuum = 1;
            break;
        case OPT_PURGE_AFTER:
            seen_sustain_opt = 1;
            rc = parse_duration("--purge-after", optarg, &o->purge_after_us);
            break;
        case OPT_DRIVER: o->driver = optarg; break;
        case OPT_NO_CEILING: o->no_ceiling = 1; break;
        case OPT_TABLE:
            seen_table = 1;
            if (strcmp(optarg, "shipped") == 0)
                o->table = BENCH_TABLE_SHIPPED;
            else if (strcmp(optarg, "two-index") == 0)
                o->table = BENCH_TABLE_TWO_INDEX;
            else if (strcmp(optarg, "both") == 0)
                o->table = BENCH_TABLE_BOTH;
            else
                rc = bad("--table: expected shipped, two-index or both, got \"%.64s\"", optarg);
            break;
        case OPT_METRICS: {
            char why[256];
            if (cli_metrics_listen_check(optarg, why, sizeof why) != 0)
                rc = bad("--metrics %s", why);
            o->metrics_listen = optarg;
            break;
        }
        case OPT_OTLP_ENDPOINT: {
            char why[600];
#ifdef OUTBOX_HAVE_TRACING
            if (otlp_endpoint_check(optarg, why, sizeof why) != 0)
                rc = bad("--otlp-endpoint: %s", why);
#else
            snprintf(why, sizeof why, "built without libcurl");
            rc = bad("--otlp-endpoint: this outbox-bench cannot export spans (%s)", why);
#endif
            o->otlp_endpoint = optarg;
            break;
        }
        case OPT_HELP: fputs(usage_text, stdout); exit(0);
        case ':':
            rc = bad("%s needs a value", argv[optind - 1]);
            break;
        default:
            rc = bad("unknown option \"%.64s\" (try --help)", argv[optind - 1]);
            break;
        }
        if (rc != 0)
            return rc;
    }
    if (optind < argc)
        return bad("unexpected argument \"%.64s\" (try --help)", argv[optind]);
    if (o->pgbench_script) {
        if (!outbox_relation_valid(o->relation) || strlen(o->relation) > 200)
            return bad("--relation: \"%.64s\" is not a usable name", o->relation);
        return 0;
    }
    if (!o->store)
        return bad("--store is required, e.g. --store sqlite:///tmp/bench.db");
    int rc = check_store(o->store, &o->backend);
    if (rc != 0)
        return rc;
    if (o->driver || !o->backend)
        o->no_ceiling = 1;
#ifdef OUTBOX_BENCH_MONGO
    /* Their producers stage in transactions, which FerretDB and a standalone
     * mongod do not run. */
    if (o->backend == &bench_mongo_backend && !o->no_ceiling && (o->latency || o->sustain))
        return bad("%s: the mongodb store is measured in throughput mode only (the producer "
                   "of --latency and --sustain stages in transactions)",
                   o->latency ? "--latency" : "--sustain");
#endif
    if (seen_table && o->table != BENCH_TABLE_SHIPPED &&
        (o->no_ceiling || o->latency || o->sustain || !o->backend->canonical_only))
        return bad("--table %s: throughput mode on a postgresql store only (without --driver, "
                   "--no-ceiling, --latency or --sustain)",
                   o->table == BENCH_TABLE_BOTH ? "both" : "two-index");
    if (o->no_ceiling) {
        char why[96];
        if (o->driver || o->backend)
            snprintf(why, sizeof why, "%s", o->driver ? "--driver" : "--no-ceiling");
        else
            snprintf(why, sizeof why, "the %.*s store", (int)strcspn(o->store, ":"), o->store);
        if (o->latency || o->sustain)
            return bad("%s: outbox-bench measures throughput only, without a ceiling (--latency "
                       "and --sustain run on sqlite and postgresql stores, without --driver)",
                       why);
        if (o->driver && (rc = check_driver(o->driver)) != 0)
            return rc;
        if (!seen_relation)
            o->relation = "outbox_bench_driver";
    }
    if (!outbox_relation_valid(o->relation) || strlen(o->relation) > 200 ||
        strcasecmp(o->relation, "outbox_bench_relations") == 0)
        return bad("--relation: \"%.64s\" is not a usable name (letters, digits and _, "
                   "optionally schema.name, at most 200 characters)",
                   o->relation);
    if (o->metrics_listen && (o->latency || o->sustain))
        return bad("--metrics belongs to throughput mode");
    if (o->otlp_endpoint && (o->latency || o->sustain))
        return bad("--otlp-endpoint belongs to throughput mode");
    if (seen_sustain_opt && !o->sustain)
        return bad("--interval, --events-per-round, --pg-autovacuum and --purge-after belong to "
                   "--sustain mode");
    if (o->sustain) {
        if (o->latency)
            return bad("--sustain and --latency are different modes");
        if (seen_events || seen_repeat || seen_duration || seen_producers)
            return bad("--events, --repeat, --duration and --producers cannot be used with "
                       "--sustain");
        if (o->pg_autovacuum && !o->backend->autovacuum)
            return bad("--pg-autovacuum: the %s store has no autovacuum", o->backend->name);
        if (o->interval_us > o->duration_us)
            return bad("--interval is longer than --sustain");
        if (!seen_rate)
            o->rate = 0;
    } else if (o->latency) {
        if (seen_events)
            return bad("--events cannot be used with --latency: it stages --rate events per "
                       "second for --duration");
        if (seen_repeat)
            return bad("--repeat cannot be used with --latency");
        if (seen_workers)
            return bad("--workers cannot be used with --latency: it runs one producer and one "
                       "relay");
        if (!seen_rate)
            o->rate = o->quick ? 200 : 1000;
        if (!seen_duration)
            o->duration_us = (o->quick ? 1 : 10) * 1000000LL;
    } else {
        if (seen_rate || seen_duration || seen_producers)
            return bad("--rate, --duration and --producers belong to --latency mode");
        if (!seen_events)
            o->events = o->quick ? 2000 : 100000;
        if (!seen_repeat)
            o->repeat = o->quick ? 1 : 3;
    }
    /* Latency mode without --sink records in-process (o->sink NULL). */
    o->sink = sink ? sink : o->latency ? NULL : "null:";
    return 0;
}

int main(int argc, char **argv)
{
    bench_opts_t o;
    int rc = parse(argc, argv, &o);
    if (rc != 0)
        return rc;
    if (o.pgbench_script) {
#ifdef OUTBOX_BENCH_POSTGRES
        char rel[300];
        snprintf(rel, sizeof rel, "%s_ceiling", o.relation);
        char *script = bench_pg_script(rel, o.batch);
        if (!script) {
            bench_err("out of memory");
            return BENCH_EXIT_FAIL;
        }
        fputs(script, stdout);
        free(script);
        return 0;
#else
        bench_err("--pgbench-script: this outbox-bench was built without libpq");
        return BENCH_EXIT_USAGE;
#endif
    }
    if (o.no_ceiling)
        return bench_throughput_no_ceiling(&o);
    return o.sustain ? bench_sustain(&o) : o.latency ? bench_latency(&o) : bench_throughput(&o);
}
