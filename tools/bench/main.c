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
#include "secrets.h"
#ifdef OUTBOX_BENCH_POSTGRES
#include "pg_ceiling.h"
#endif
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

/* A store URI, and its ceiling (NULL when none is built in: the store is
 * then measured without one). */
static int check_store(const char *uri, const outbox_store_ceiling_t **out)
{
    size_t n = strcspn(uri, ":");
    if (uri[n] != ':' || n == 0)
        return bad("--store: \"%.200s\" is not a URI (expected e.g. sqlite:///tmp/bench.db)",
                   uri);
    *out = bench_ceiling_for(uri);
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

/* ------------------------------------------------------------- options */

/* The modes; an option may be refused in some of them. */
enum { MODE_THROUGHPUT, MODE_LATENCY, MODE_SUSTAIN, MODES };

/* Why an option is refused in a mode. When several options are, the rule
 * listed first here is the one reported, so the order is that in which
 * the rules are checked. */
enum {
    ACCEPTED,
    R_METRICS,
    R_OTLP,
    R_SUSTAIN_ONLY,
    R_SUSTAIN_LATENCY,
    R_SUSTAIN_MIX,
    R_LATENCY_EVENTS,
    R_LATENCY_REPEAT,
    R_LATENCY_WORKERS,
    R_LATENCY_ONLY,
    RULES
};

static const char *const rule_text[RULES] = {
    [R_METRICS] = "--metrics belongs to throughput mode",
    [R_OTLP] = "--otlp-endpoint belongs to throughput mode",
    [R_SUSTAIN_ONLY] = "--interval, --events-per-round, --pg-autovacuum and --purge-after belong "
                       "to --sustain mode",
    [R_SUSTAIN_LATENCY] = "--sustain and --latency are different modes",
    [R_SUSTAIN_MIX] = "--events, --repeat, --duration and --producers cannot be used with "
                      "--sustain",
    [R_LATENCY_EVENTS] = "--events cannot be used with --latency: it stages --rate events per "
                         "second for --duration",
    [R_LATENCY_REPEAT] = "--repeat cannot be used with --latency",
    [R_LATENCY_WORKERS] = "--workers cannot be used with --latency: it runs one producer and "
                          "one relay",
    [R_LATENCY_ONLY] = "--rate, --duration and --producers belong to --latency mode",
};

/* How an option's value is read, and what it sets. */
typedef enum {
    ARG_TEXT,     /* const char *: the value; check() may refuse it */
    ARG_LONG,     /* long: a whole number from min to max */
    ARG_RATE,     /* double: events per second above 0 and at most max */
    ARG_DURATION, /* int64_t: microseconds above 0, at most max_us when set */
    ARG_CHOICE,   /* int: the index of the value in choices */
    ARG_FLAG,     /* int: 1; no value */
    ARG_HELP,     /* the usage text on stdout, exit 0 */
} arg_kind_t;

typedef struct opt {
    const char *name; /* with its dashes */
    arg_kind_t kind;
    size_t offset;    /* of the bench_opts_t member it sets */
    long min, max;
    int64_t max_us;
    const char *max_text;            /* max_us as the message says it */
    const char *const *choices;      /* NULL-terminated */
    int (*check)(const char *value); /* 0, or BENCH_EXIT_USAGE (said) */
    /* Per mode, ACCEPTED or the rule that refuses the option there. */
    unsigned char refused[MODES];
} opt_t;

static int check_metrics(const char *value)
{
    char why[256];
    if (cli_metrics_listen_check(value, why, sizeof why) != 0)
        return bad("--metrics %s", why);
    return 0;
}

static int check_otlp(const char *value)
{
    char why[600];
#ifdef OUTBOX_HAVE_TRACING
    if (otlp_endpoint_check(value, why, sizeof why) != 0)
        return bad("--otlp-endpoint: %s", why);
    return 0;
#else
    (void)value;
    snprintf(why, sizeof why, "built without libcurl");
    return bad("--otlp-endpoint: this outbox-bench cannot export spans (%s)", why);
#endif
}

static const char *const table_choices[] = {"shipped", "two-index", "both", NULL};

/* Indexes into options[], for the rules that look at what was given. */
enum {
    O_STORE, O_RELATION, O_SINK, O_EVENTS, O_KEYS, O_BATCH, O_WORKERS, O_PIPELINE, O_REPEAT,
    O_QUICK, O_LATENCY, O_RATE, O_PRODUCERS, O_DURATION, O_POLL, O_PGBENCH_SCRIPT, O_SUSTAIN,
    O_INTERVAL, O_EVENTS_PER_ROUND, O_PG_AUTOVACUUM, O_PURGE_AFTER, O_DRIVER, O_NO_CEILING,
    O_TABLE, O_METRICS, O_OTLP_ENDPOINT, O_HELP, N_OPTIONS
};

/* An entry's name, how its value is read, and the member it sets. */
#define OPT(n, k, member) .name = (n), .kind = (k), .offset = offsetof(bench_opts_t, member)
/* An option's refused[]: the rule in throughput, latency and sustain mode. */
#define NOT_IN(t, l, s) {[MODE_THROUGHPUT] = (t), [MODE_LATENCY] = (l), [MODE_SUSTAIN] = (s)}
#define SUSTAIN_ONLY NOT_IN(R_SUSTAIN_ONLY, R_SUSTAIN_ONLY, ACCEPTED)

static const opt_t options[N_OPTIONS] = {
    [O_STORE] = {OPT("--store", ARG_TEXT, store)},
    [O_RELATION] = {OPT("--relation", ARG_TEXT, relation)},
    [O_SINK] = {OPT("--sink", ARG_TEXT, sink)},
    [O_EVENTS] = {OPT("--events", ARG_LONG, events), .min = 1, .max = 100000000,
                  .refused = NOT_IN(ACCEPTED, R_LATENCY_EVENTS, R_SUSTAIN_MIX)},
    [O_KEYS] = {OPT("--keys", ARG_LONG, keys), .min = 0, .max = 10000000},
    [O_BATCH] = {OPT("--batch", ARG_LONG, batch), .min = 1, .max = 100000},
    [O_WORKERS] = {OPT("--workers", ARG_LONG, workers), .min = 1, .max = 64,
                   .refused = NOT_IN(ACCEPTED, R_LATENCY_WORKERS, ACCEPTED)},
    [O_PIPELINE] = {OPT("--pipeline", ARG_LONG, pipeline), .min = 1, .max = 16},
    [O_REPEAT] = {OPT("--repeat", ARG_LONG, repeat), .min = 1, .max = BENCH_REPEAT_MAX,
                  .refused = NOT_IN(ACCEPTED, R_LATENCY_REPEAT, R_SUSTAIN_MIX)},
    [O_QUICK] = {OPT("--quick", ARG_FLAG, quick)},
    [O_LATENCY] = {OPT("--latency", ARG_FLAG, latency),
                   .refused = NOT_IN(ACCEPTED, ACCEPTED, R_SUSTAIN_LATENCY)},
    [O_RATE] = {OPT("--rate", ARG_RATE, rate), .max = 1000000,
                .refused = NOT_IN(R_LATENCY_ONLY, ACCEPTED, ACCEPTED)},
    [O_PRODUCERS] = {OPT("--producers", ARG_LONG, producers), .min = 1, .max = 64,
                     .refused = NOT_IN(R_LATENCY_ONLY, ACCEPTED, R_SUSTAIN_MIX)},
    [O_DURATION] = {OPT("--duration", ARG_DURATION, duration_us), .max_us = 3600LL * 1000000,
                    .max_text = "1h", .refused = NOT_IN(R_LATENCY_ONLY, ACCEPTED, R_SUSTAIN_MIX)},
    [O_POLL] = {OPT("--poll", ARG_DURATION, poll_us)},
    [O_PGBENCH_SCRIPT] = {OPT("--pgbench-script", ARG_FLAG, pgbench_script)},
    /* Its presence is sustained mode (o->sustain). */
    [O_SUSTAIN] = {OPT("--sustain", ARG_DURATION, duration_us), .max_us = 24 * 3600LL * 1000000,
                   .max_text = "24h"},
    [O_INTERVAL] = {OPT("--interval", ARG_DURATION, interval_us), .refused = SUSTAIN_ONLY},
    [O_EVENTS_PER_ROUND] = {OPT("--events-per-round", ARG_LONG, events_per_round), .min = 1,
                            .max = 100000, .refused = SUSTAIN_ONLY},
    [O_PG_AUTOVACUUM] = {OPT("--pg-autovacuum", ARG_FLAG, pg_autovacuum),
                         .refused = SUSTAIN_ONLY},
    [O_PURGE_AFTER] = {OPT("--purge-after", ARG_DURATION, purge_after_us),
                       .refused = SUSTAIN_ONLY},
    [O_DRIVER] = {OPT("--driver", ARG_TEXT, driver)},
    [O_NO_CEILING] = {OPT("--no-ceiling", ARG_FLAG, no_ceiling)},
    /* Its own rule (check_table) says where a table other than shipped runs. */
    [O_TABLE] = {OPT("--table", ARG_CHOICE, table), .choices = table_choices},
    [O_METRICS] = {OPT("--metrics", ARG_TEXT, metrics_listen), .check = check_metrics,
                   .refused = NOT_IN(ACCEPTED, R_METRICS, R_METRICS)},
    [O_OTLP_ENDPOINT] = {OPT("--otlp-endpoint", ARG_TEXT, otlp_endpoint), .check = check_otlp,
                         .refused = NOT_IN(ACCEPTED, R_OTLP, R_OTLP)},
    /* --help sets nothing. */
    [O_HELP] = {.name = "--help", .kind = ARG_HELP},
};

#define SEEN(seen, o) (((seen) >> (o)) & 1)

static int parse_rate(const opt_t *opt, const char *text, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (!*text || *end || errno || !isfinite(v) || v <= 0 || v > (double)opt->max)
        return bad("%s: expected events per second above 0 and at most %ld, got \"%.64s\"",
                   opt->name, opt->max, text);
    *out = v;
    return 0;
}

static int parse_limited_duration(const opt_t *opt, const char *text, int64_t *out)
{
    int rc = parse_duration(opt->name, text, out);
    if (rc == 0 && opt->max_us > 0 && *out > opt->max_us)
        return bad("%s: at most %s, got \"%.64s\"", opt->name, opt->max_text, text);
    return rc;
}

/* The value's index in opt->choices; the message lists them all. */
static int parse_choice(const opt_t *opt, const char *text, int *out)
{
    char list[200] = "";
    size_t n = 0;
    for (int i = 0; opt->choices[i]; i++) {
        if (strcmp(text, opt->choices[i]) == 0) {
            *out = i;
            return 0;
        }
        const char *sep = i == 0 ? "" : opt->choices[i + 1] ? ", " : " or ";
        if (n < sizeof list)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", sep, opt->choices[i]);
    }
    return bad("%s: expected %s, got \"%.64s\"", opt->name, list, text);
}

/* One option's value into o: 0 or BENCH_EXIT_USAGE (said). */
static int set_option(const opt_t *opt, const char *value, bench_opts_t *o)
{
    void *dest = (char *)o + opt->offset;
    switch (opt->kind) {
    case ARG_TEXT:
        /* A URI's password never shows in a line the bench prints. */
        tool_note_secrets(value);
        *(const char **)dest = value;
        return opt->check ? opt->check(value) : 0;
    case ARG_LONG: return parse_long(opt->name, value, opt->min, opt->max, dest);
    case ARG_RATE: return parse_rate(opt, value, dest);
    case ARG_DURATION: return parse_limited_duration(opt, value, dest);
    case ARG_CHOICE: return parse_choice(opt, value, dest);
    case ARG_FLAG: *(int *)dest = 1; return 0;
    case ARG_HELP: fputs(usage_text, stdout); exit(0);
    }
    return 0;
}

/* The command line into o, each option as options[] says; *seen gets a
 * bit per option given (1 << its index). */
static int parse_args(int argc, char **argv, bench_opts_t *o, uint64_t *seen)
{
    struct option longopts[N_OPTIONS + 1] = {{0}};
    for (int i = 0; i < N_OPTIONS; i++) {
        const int bare = options[i].kind == ARG_FLAG || options[i].kind == ARG_HELP;
        longopts[i] = (struct option){options[i].name + 2, bare ? no_argument : required_argument,
                                      NULL, 256 + i};
    }
    opterr = 0;
    int c, rc = 0;
    while (rc == 0 && (c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (c >= 256) {
            *seen |= (uint64_t)1 << (c - 256);
            rc = set_option(&options[c - 256], optarg, o);
        } else if (c == ':') {
            rc = bad("%s needs a value", argv[optind - 1]);
        } else {
            rc = bad("unknown option \"%.64s\" (try --help)", argv[optind - 1]);
        }
    }
    if (rc == 0 && optind < argc)
        rc = bad("unexpected argument \"%.64s\" (try --help)", argv[optind]);
    return rc;
}

/* ------------------------------------------------ rules across options */

/* --table other than shipped: throughput mode on a store whose ceiling
 * can drop the shipped schema's extra indexes. */
static int check_table(const bench_opts_t *o, uint64_t seen)
{
    if (SEEN(seen, O_TABLE) && o->table != BENCH_TABLE_SHIPPED &&
        (o->no_ceiling || o->latency || o->sustain || !o->ceiling->canonical_only))
        return bad("--table %s: throughput mode on a postgresql store only (without --driver, "
                   "--no-ceiling, --latency or --sustain)",
                   o->table == BENCH_TABLE_BOTH ? "both" : "two-index");
    return 0;
}

/* Without a ceiling (--driver, --no-ceiling, or a store the bench has no
 * ceiling for): throughput only, the driver loadable, its own relation. */
static int check_no_ceiling(bench_opts_t *o, uint64_t seen)
{
    char why[96];
    if (o->driver || o->ceiling)
        snprintf(why, sizeof why, "%s", o->driver ? "--driver" : "--no-ceiling");
    else
        snprintf(why, sizeof why, "the %.*s store", (int)strcspn(o->store, ":"), o->store);
    if (o->latency || o->sustain)
        return bad("%s: outbox-bench measures throughput only, without a ceiling (--latency "
                   "and --sustain run on sqlite and postgresql stores, without --driver)",
                   why);
    int rc = o->driver ? check_driver(o->driver) : 0;
    if (rc == 0 && !SEEN(seen, O_RELATION))
        o->relation = "outbox_bench_driver";
    return rc;
}

/* The store, and what follows from it: its ceiling or none. */
static int check_store_rules(bench_opts_t *o, uint64_t seen)
{
    if (!o->store)
        return bad("--store is required, e.g. --store sqlite:///tmp/bench.db");
    int rc = check_store(o->store, &o->ceiling);
    if (rc != 0)
        return rc;
    if (o->driver || !o->ceiling)
        o->no_ceiling = 1;
#ifdef OUTBOX_BENCH_MONGO
    /* Their producers stage in transactions, which FerretDB and a standalone
     * mongod do not run. */
    if (strncasecmp(o->store, "mongodb:", 8) == 0 && !o->no_ceiling && (o->latency || o->sustain))
        return bad("%s: the mongodb store is measured in throughput mode only (the producer "
                   "of --latency and --sustain stages in transactions)",
                   o->latency ? "--latency" : "--sustain");
#endif
    rc = check_table(o, seen);
    if (rc == 0 && o->no_ceiling)
        rc = check_no_ceiling(o, seen);
    return rc;
}

static int check_relation(const bench_opts_t *o)
{
    if (!outbox_relation_valid(o->relation) || strlen(o->relation) > 200 ||
        strcasecmp(o->relation, "outbox_bench_relations") == 0)
        return bad("--relation: \"%.64s\" is not a usable name (letters, digits and _, "
                   "optionally schema.name, at most 200 characters)",
                   o->relation);
    return 0;
}

/* Each option given against the mode: the first rule (in rule order)
 * that refuses one of them. */
static int check_modes(const bench_opts_t *o, uint64_t seen)
{
    const int mode = o->sustain ? MODE_SUSTAIN : o->latency ? MODE_LATENCY : MODE_THROUGHPUT;
    int rule = RULES;
    for (int i = 0; i < N_OPTIONS; i++) {
        int r = options[i].refused[mode];
        if (SEEN(seen, i) && r != ACCEPTED && r < rule)
            rule = r;
    }
    return rule < RULES ? bad("%s", rule_text[rule]) : 0;
}

/* Sustained mode's own rules. */
static int check_sustain(const bench_opts_t *o)
{
    if (o->pg_autovacuum && !o->ceiling->autovacuum)
        return bad("--pg-autovacuum: the %s store has no autovacuum", o->ceiling->name);
    if (o->interval_us > o->duration_us)
        return bad("--interval is longer than --sustain");
    return 0;
}

/* What the mode does when an option was not given (less with --quick). */
static void apply_defaults(bench_opts_t *o, uint64_t seen)
{
    if (o->sustain) {
        if (!SEEN(seen, O_RATE))
            o->rate = 0; /* as fast as the producer can */
    } else if (o->latency) {
        if (!SEEN(seen, O_RATE))
            o->rate = o->quick ? 200 : 1000;
        if (!SEEN(seen, O_DURATION))
            o->duration_us = (o->quick ? 1 : 10) * 1000000LL;
    } else {
        if (!SEEN(seen, O_EVENTS))
            o->events = o->quick ? 2000 : 100000;
        if (!SEEN(seen, O_REPEAT))
            o->repeat = o->quick ? 1 : 3;
    }
    /* Latency mode without --sink records in-process (o->sink NULL). */
    if (!o->sink && !o->latency)
        o->sink = "null:";
}

static int parse(int argc, char **argv, bench_opts_t *o)
{
    *o = (bench_opts_t){.relation = "outbox_bench",
                        .batch = 100,
                        .workers = 1,
                        .producers = 1,
                        .events = -1,
                        .rate = -1,
                        .duration_us = -1,
                        .poll_us = 100 * 1000,
                        .interval_us = 60 * 1000000LL,
                        .events_per_round = 100};
    uint64_t seen = 0;
    int rc = parse_args(argc, argv, o, &seen);
    o->sustain = SEEN(seen, O_SUSTAIN);
    if (rc != 0)
        return rc;
    if (o->pgbench_script) {
        if (!outbox_relation_valid(o->relation) || strlen(o->relation) > 200)
            return bad("--relation: \"%.64s\" is not a usable name", o->relation);
        return 0;
    }
    rc = check_store_rules(o, seen);
    if (rc == 0)
        rc = check_relation(o);
    if (rc == 0)
        rc = check_modes(o, seen);
    if (rc == 0 && o->sustain)
        rc = check_sustain(o);
    if (rc == 0)
        apply_defaults(o, seen);
    return rc;
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
        char *script = outbox_pg_ceiling_script(rel, o.batch, 0);
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
