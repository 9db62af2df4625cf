/* outbox relay: publish a route's staged events to a sink, with N worker
 * threads, each owning its store handle, sink handle and relay; or, with
 * --config, every route of a configuration file at once, each with its
 * own workers. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "clock.h"
#include "config.h"
#include "metrics.h"
#include "status_dead.h"
#include "tracing.h"

static const char usage[] =
    "usage: outbox relay --store URI --route R --sink URI [OPTIONS]\n"
    "       outbox relay --config FILE [--until-idle] [--quiet] [--metrics-listen HOST:PORT]\n"
    "                    [--log-format F] [--log-file FILE] [--otlp-endpoint URL]\n"
    "\n"
    "Publishes the route's events to the sink until SIGINT/SIGTERM (then\n"
    "releases what it holds and exits 0), or with --until-idle until nothing\n"
    "is left to claim. A summary goes to stderr on exit. With --config, every\n"
    "route of the file (docs/config.md; outbox config check FILE validates it)\n"
    "runs at once, each with its own workers and connections.\n"
    "\n"
    "  --config FILE           the routes, stores and sinks of a configuration file\n"
    "  --store URI             the store: " OUTBOX_CLI_STORE_URIS "\n"
    "  --relation NAME         table or collection, default outbox\n"
    "  --route R               the route to relay\n"
    "  --sink URI              where to publish: " OUTBOX_CLI_SINK_URIS "\n"
    "  --batch N               rows per claim (default 100)\n"
    "  --pipeline N            batches in flight at once, 1 to 16: one is published\n"
    "                          while the next is claimed and the last settled (default 4)\n"
    "  --max-attempts N        attempts before an event is dead-lettered (default 10)\n"
    "  --lease DURATION        a claim older than this may be taken over (default 3s\n"
    "                          when the store renews leases, else 30s)\n"
    "  --no-lease-renewal      never renew the lease of rows being published\n"
    "  --poll DURATION         idle poll interval when the store has no push (default 100ms)\n"
    "  --backoff-base DURATION first retry delay ceiling (default 1s; 0s: retry at once)\n"
    "  --backoff-cap DURATION  largest retry delay (default 5m, or the base if longer)\n"
    "  --source S              CloudEvents source (default /outbox/<route>)\n"
    "  --destination TEMPLATE  topic/subject/path; {route} is replaced (default {route})\n"
    "  --hlc                   claim in hybrid-logical-clock order\n"
    "  --workers N             relay threads, each with its own connections (default 1)\n"
    "  --until-idle            exit once no claimable row is left, or with status 2\n"
    "                          after 8 transient failures in a row (store or sink)\n"
    "  --quiet                 no summary line, and no info lines in the log\n"
    "  --log-format FORMAT     text (default), logfmt or json: one line per record\n"
    "  --log-file FILE         append the log to FILE instead of stderr; SIGHUP reopens it\n"
    "  --metrics-listen HOST:PORT  serve /metrics (Prometheus), /healthz, /readyz and a\n"
    "                          status page at / (docs/operations.md)\n"
    "  --metrics-tls-cert FILE, --metrics-tls-key FILE\n"
    "                          serve them over HTTPS with this certificate and key (PEM)\n"
    "  --metrics-user NAME     ask for HTTP basic authentication (all but /healthz); the\n"
    "                          password comes from OUTBOX_METRICS_PASSWORD\n"
    "  --otlp-endpoint URL     export a span per published batch to this OpenTelemetry\n"
    "                          collector (OTLP/HTTP, JSON; POST URL/v1/traces)\n"
    "  --trace-sample R        share of batches traced, 0 to 1 (default 1)\n"
    "  --trace-service-name S  the spans' service.name (default outbox-relay)\n"
    "\n"
    "Durations take a unit: 250us, 500ms, 30s, 5m, 2h, 7d.\n"
    "Drivers on the driver path serve their URIs too; `outbox drivers` lists them.\n";

static const cli_option_t options[] = {
    {"store", true, OPT_STORE},
    {"relation", true, OPT_RELATION},
    {"route", true, OPT_ROUTE},
    {"sink", true, OPT_SINK},
    {"batch", true, OPT_BATCH},
    {"max-attempts", true, OPT_MAX_ATTEMPTS},
    {"lease", true, OPT_LEASE},
    {"no-lease-renewal", false, OPT_NO_LEASE_RENEWAL},
    {"poll", true, OPT_POLL},
    {"backoff-base", true, OPT_BACKOFF_BASE},
    {"backoff-cap", true, OPT_BACKOFF_CAP},
    {"source", true, OPT_SOURCE},
    {"destination", true, OPT_DESTINATION},
    {"hlc", false, OPT_HLC},
    {"workers", true, OPT_WORKERS},
    {"pipeline", true, OPT_PIPELINE},
    {"until-idle", false, OPT_UNTIL_IDLE},
    {"quiet", false, OPT_QUIET},
    {"config", true, OPT_CONFIG},
    {"log-format", true, OPT_LOG_FORMAT},
    {"log-file", true, OPT_LOG_FILE},
    {"metrics-listen", true, OPT_METRICS_LISTEN},
    {"metrics-tls-cert", true, OPT_METRICS_TLS_CERT},
    {"metrics-tls-key", true, OPT_METRICS_TLS_KEY},
    {"metrics-user", true, OPT_METRICS_USER},
    {"otlp-endpoint", true, OPT_OTLP_ENDPOINT},
    {"trace-sample", true, OPT_TRACE_SAMPLE},
    {"trace-service-name", true, OPT_TRACE_SERVICE_NAME},
    {NULL, false, 0},
};

typedef struct relay_args {
    cli_store_args_t store;
    const char *sink;
    outbox_relay_config_t cfg;
    size_t workers;
    bool quiet;
    bool base_given, cap_given;
    const char *config;  /* --config FILE */
    bool route_flags;    /* a flag that --config replaces was given */
    const char *log_file;
    int64_t retention_us;      /* from the config file: 0 = no purge */
    int64_t purge_interval_us;
    cli_metrics_opts_t metrics; /* the --metrics-* flags, or the file's metrics: */
    cli_tracing_opts_t tracing; /* the tracing flags, or the file's tracing: */
} relay_args_t;

typedef struct worker {
    const relay_args_t *args; /* its route's */
    outbox_store_t *store;
    outbox_sink_t *sink;
    outbox_relay_t *relay;
    pthread_t thread;
    bool started;
    int rc;
    char message[OUTBOX_MESSAGE_MAX];
} worker_t;

/* What the signal handler stops: the relays of stop_workers that exist so
 * far. Set before the first store is opened and cleared only with the
 * signals blocked. A stop that arrives before a worker's relay exists is
 * kept in stop_requested, and the relay is stopped as soon as it is made. */
static worker_t *volatile stop_workers;
static volatile sig_atomic_t stop_count;
static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t reopen_requested;
/* Workers whose relay has returned: the supervising loop ends with them. */
static atomic_size_t workers_done;

static void stop_all(void)
{
    worker_t *w = stop_workers;
    for (sig_atomic_t i = 0; i < stop_count; i++)
        if (w[i].relay)
            outbox_relay_stop(w[i].relay);
}

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
    stop_all();
}

static void on_hangup(int sig)
{
    (void)sig;
    reopen_requested = 1;
}

static void block_stop_signals(sigset_t *prev)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, prev);
}

/* First thing the command does, before drivers are loaded and stores
 * connected (a PostgreSQL connection takes tens of milliseconds): from here
 * on SIGINT and SIGTERM mean a graceful stop, whenever they come. They stay
 * installed until the process ends, so a signal during the final clean-up
 * cannot turn a clean exit into death by signal. SIGHUP asks for the log
 * file to be reopened (after logrotate moved it), never for an exit.
 * SIGPIPE is ignored: a reader of a stdout: sink going away is a write
 * error (RETRY), not a reason to die with rows in processing. */
static void install_signal_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = on_hangup;
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    w->rc = outbox_relay_run(w->relay);
    if (w->rc != OUTBOX_OK) {
        const char *m = outbox_relay_message(w->relay);
        snprintf(w->message, sizeof w->message, "%s",
                 m && m[0] ? m : outbox_strerror(w->rc));
        stop_all(); /* one worker failing ends the run */
    }
    atomic_fetch_add(&workers_done, 1);
    return NULL;
}

/* ----------------------------------------------------------- arguments */

static bool parse_option(relay_args_t *a, int id, const char *v)
{
    uint64_t n;
    if (id != OPT_CONFIG && id != OPT_QUIET && id != OPT_UNTIL_IDLE && id != OPT_LOG_FORMAT &&
        id != OPT_LOG_FILE && id != OPT_METRICS_LISTEN && id != OPT_METRICS_TLS_CERT &&
        id != OPT_METRICS_TLS_KEY && id != OPT_METRICS_USER && id != OPT_OTLP_ENDPOINT &&
        id != OPT_TRACE_SAMPLE && id != OPT_TRACE_SERVICE_NAME)
        a->route_flags = true;
    bool tracing_flag = false;
    bool tracing_ok = cli_tracing_option(&a->tracing, id, v, &tracing_flag);
    if (tracing_flag)
        return tracing_ok;
    switch (id) {
    case OPT_LOG_FORMAT:
        if (!cli_log_set_format(v)) {
            cli_error("relay: --log-format: \"%.40s\" is not a log format (text, logfmt, json)", v);
            return false;
        }
        return true;
    case OPT_LOG_FILE:
        if (!cli_nonempty("relay", "--log-file", v))
            return false;
        a->log_file = v;
        return true;
    case OPT_METRICS_LISTEN: {
        char why[256];
        if (cli_metrics_listen_check(v, why, sizeof why) != 0) {
            cli_error("relay: --metrics-listen %s", why);
            return false;
        }
        a->metrics.listen = v;
        return true;
    }
    case OPT_METRICS_TLS_CERT:
        if (!cli_nonempty("relay", "--metrics-tls-cert", v))
            return false;
        a->metrics.tls_cert = v;
        return true;
    case OPT_METRICS_TLS_KEY:
        if (!cli_nonempty("relay", "--metrics-tls-key", v))
            return false;
        a->metrics.tls_key = v;
        return true;
    case OPT_METRICS_USER:
        if (!cli_nonempty("relay", "--metrics-user", v))
            return false;
        a->metrics.user = v;
        return true;
    case OPT_CONFIG: a->config = v; return true;
    case OPT_HLC: a->cfg.hlc_order = 1; return true;
    case OPT_NO_LEASE_RENEWAL: a->cfg.no_lease_renewal = 1; return true;
    case OPT_ROUTE: a->cfg.route = v; return true;
    case OPT_SINK:
        a->sink = v;
        tool_note_secrets(v);
        return true;
    case OPT_SOURCE: a->cfg.source = v; return true;
    case OPT_DESTINATION: a->cfg.destination = v; return true;
    case OPT_UNTIL_IDLE: a->cfg.until_idle = 1; return true;
    case OPT_QUIET:
        a->quiet = true;
        cli_set_quiet(true);
        return true;
    case OPT_BATCH:
        if (!cli_parse_uint("--batch", v, 1, CLI_RELAY_BATCH_MAX, &n))
            return false;
        a->cfg.batch = (size_t)n;
        return true;
    case OPT_MAX_ATTEMPTS:
        if (!cli_parse_uint("--max-attempts", v, 1, CLI_RELAY_ATTEMPTS_MAX, &n))
            return false;
        a->cfg.max_attempts = (int)n;
        return true;
    case OPT_PIPELINE:
        if (!cli_parse_uint("--pipeline", v, 1, CLI_RELAY_PIPELINE_MAX, &n))
            return false;
        a->cfg.pipeline = (size_t)n;
        return true;
    case OPT_WORKERS:
        if (!cli_parse_uint("--workers", v, 1, CLI_RELAY_WORKERS_MAX, &n))
            return false;
        a->workers = (size_t)n;
        return true;
    case OPT_LEASE: return cli_parse_duration("--lease", v, false, &a->cfg.lease_us);
    case OPT_POLL: return cli_parse_duration("--poll", v, false, &a->cfg.poll_us);
    case OPT_BACKOFF_BASE:
        a->base_given = true;
        return cli_parse_duration("--backoff-base", v, true, &a->cfg.backoff_base_us);
    case OPT_BACKOFF_CAP:
        a->cap_given = true;
        return cli_parse_duration("--backoff-cap", v, false, &a->cfg.backoff_cap_us);
    default:
        return cli_store_option(&a->store, id, v);
    }
}

static bool check_args(relay_args_t *a)
{
    if (!cli_require("relay", "--store", a->store.uri) ||
        !cli_require("relay", "--route", a->cfg.route) ||
        !cli_require("relay", "--sink", a->sink) ||
        !cli_nonempty("relay", "--source", a->cfg.source) ||
        !cli_nonempty("relay", "--destination", a->cfg.destination) ||
        !cli_relation_ok(a->store.relation))
        return false;
    /* The library would offer a store URI as the example. */
    if (cli_lacks_scheme(a->sink)) {
        cli_error("relay: --sink: missing scheme in URI \"%.160s\": expected a sink URI such as %s",
                  a->sink, OUTBOX_CLI_SINK_URIS);
        return false;
    }
    /* A base above the default cap, given alone, raises the cap with it. */
    if (a->base_given && !a->cap_given && a->cfg.backoff_cap_us < a->cfg.backoff_base_us)
        a->cfg.backoff_cap_us = a->cfg.backoff_base_us;
    if (a->base_given && a->cap_given && a->cfg.backoff_cap_us < a->cfg.backoff_base_us) {
        cli_error("relay: --backoff-cap must not be shorter than --backoff-base");
        return false;
    }
    return true;
}

/* ------------------------------------------------------------- workers */

static int worker_open(worker_t *w, const relay_args_t *a)
{
    int ex = cli_open_store("relay", &a->store, 0, false, &w->store);
    if (ex != CLI_EXIT_OK)
        return ex;
    outbox_diag_t d = {0};
    int rc = outbox_sink_open(a->sink, NULL, &w->sink, &d);
    if (rc != OUTBOX_OK) {
        w->sink = NULL;
        return cli_diag_error("relay: --sink", rc, d.message);
    }
    rc = outbox_relay_new(w->store, w->sink, &a->cfg, &w->relay, &d);
    if (rc != OUTBOX_OK) {
        w->relay = NULL;
        return cli_diag_error("relay", rc, d.message);
    }
    /* The handler stops relays that exist; this one may be younger than
     * the signal. */
    if (stop_requested)
        outbox_relay_stop(w->relay);
    return CLI_EXIT_OK;
}

static void worker_close(worker_t *w)
{
    if (w->relay)
        outbox_relay_free(w->relay);
    if (w->sink)
        outbox_sink_close(w->sink);
    if (w->store)
        outbox_store_close(w->store);
}

/* Starts every opened worker with SIGINT/SIGTERM blocked, so the handler
 * always runs on the main thread. */
static int start_workers(worker_t *ws, size_t n)
{
    sigset_t prev;
    block_stop_signals(&prev);
    int ex = CLI_EXIT_OK;
    for (size_t i = 0; i < n && ws[i].relay; i++) {
        int err = pthread_create(&ws[i].thread, NULL, worker_main, &ws[i]);
        if (err) {
            ex = cli_error("relay: cannot start worker %zu: %s", i + 1, strerror(err));
            stop_all();
            break;
        }
        ws[i].started = true;
    }
    pthread_sigmask(SIG_SETMASK, &prev, NULL);
    return ex;
}

static void join_workers(worker_t *ws, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ws[i].started)
            pthread_join(ws[i].thread, NULL);
}

/* ----------------------------------------------------------- retention */

/* The periodic purge of routes with a retention: a thread of its own with
 * a store handle per such route, so a purge never holds up a relay's
 * connection. Each run deletes the route's published rows older than the
 * retention in the store's small batches (each its own short transaction). */
typedef struct purger {
    const relay_args_t *routes;
    size_t n;
    outbox_store_t **stores; /* per route; NULL: no retention */
    int64_t *due_us;         /* monotonic */
    pthread_t thread;
    bool started;
    atomic_bool stop;
} purger_t;

static void nap_us(int64_t us)
{
    struct timespec ts = {.tv_sec = (time_t)(us / 1000000), .tv_nsec = (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static void purge_route(purger_t *p, size_t i)
{
    const relay_args_t *a = &p->routes[i];
    uint64_t count = 0;
    int rc = outbox_store_purge(p->stores[i], a->cfg.route, tool_wall_us() - a->retention_us, &count);
    if (rc != OUTBOX_OK)
        cli_log(OUTBOX_LOG_WARN, "relay %s: purge failed, trying again in a purge interval: %s",
                a->cfg.route, outbox_store_message(p->stores[i]));
    else if (count > 0)
        cli_log(OUTBOX_LOG_INFO, "relay %s: purged %llu published rows older than the retention",
                a->cfg.route, (unsigned long long)count);
}

static void *purger_main(void *arg)
{
    purger_t *p = arg;
    while (!atomic_load(&p->stop)) {
        int64_t now = tool_mono_us();
        for (size_t i = 0; i < p->n && !atomic_load(&p->stop); i++)
            if (p->stores[i] && now >= p->due_us[i]) {
                purge_route(p, i);
                p->due_us[i] = tool_mono_us() + p->routes[i].purge_interval_us;
            }
        nap_us(100000);
    }
    return NULL;
}

/* Opens a purge handle for every route with a retention; nothing to do is
 * CLI_EXIT_OK with p->stores NULL. The first purge runs at once. */
static int purger_open(purger_t *p, const relay_args_t *routes, size_t n)
{
    memset(p, 0, sizeof *p);
    atomic_init(&p->stop, false);
    p->routes = routes;
    p->n = n;
    size_t want = 0;
    for (size_t i = 0; i < n; i++)
        want += routes[i].retention_us > 0;
    if (want == 0)
        return CLI_EXIT_OK;
    p->stores = calloc(n, sizeof *p->stores);
    p->due_us = calloc(n, sizeof *p->due_us);
    if (!p->stores || !p->due_us)
        return cli_error("relay: out of memory");
    for (size_t i = 0; i < n; i++) {
        if (routes[i].retention_us == 0)
            continue;
        int ex = cli_open_store("relay", &routes[i].store, 0, false, &p->stores[i]);
        if (ex != CLI_EXIT_OK) {
            p->stores[i] = NULL;
            return ex;
        }
    }
    return CLI_EXIT_OK;
}

static int purger_start(purger_t *p)
{
    if (!p->stores)
        return CLI_EXIT_OK;
    sigset_t prev;
    block_stop_signals(&prev);
    int err = pthread_create(&p->thread, NULL, purger_main, p);
    pthread_sigmask(SIG_SETMASK, &prev, NULL);
    if (err)
        return cli_error("relay: cannot start the purge thread: %s", strerror(err));
    p->started = true;
    return CLI_EXIT_OK;
}

/* Stops the thread and closes the handles; a second call does nothing. */
static void purger_close(purger_t *p)
{
    atomic_store(&p->stop, true);
    if (p->started)
        pthread_join(p->thread, NULL);
    p->started = false;
    for (size_t i = 0; p->stores && i < p->n; i++)
        if (p->stores[i])
            outbox_store_close(p->stores[i]);
    free(p->stores);
    free(p->due_us);
    p->stores = NULL;
    p->due_us = NULL;
}

/* ----------------------------------------------------------- supervising */

/* The main thread while the workers run: it takes the signals (the
 * workers and the purge thread block them), reopens the log on SIGHUP,
 * tells systemd when the drain starts, and pets its watchdog. It returns
 * when every started worker's relay has returned. */
static void supervise(size_t started)
{
    int64_t watchdog_us = cli_notify_watchdog_us();
    int64_t pet_at = 0;
    bool stopping = false;
    while (atomic_load(&workers_done) < started) {
        if (reopen_requested) {
            reopen_requested = 0;
            cli_log_reopen();
        }
        if (stop_requested && !stopping) {
            stopping = true;
            cli_notify_stopping();
        }
        if (watchdog_us > 0 && tool_mono_us() >= pet_at) {
            cli_notify_watchdog();
            pet_at = tool_mono_us() + watchdog_us / 2;
        }
        nap_us(50000);
    }
}

/* From now on the handler must not touch ws, which is about to be freed. */
static void forget_workers(void)
{
    sigset_t prev;
    block_stop_signals(&prev);
    stop_count = 0;
    stop_workers = NULL;
    pthread_sigmask(SIG_SETMASK, &prev, NULL);
}

/* The command's own start line: what the relays' own lines cannot say (the
 * URIs, masked, and how many workers). ws is the route's own workers. */
static void log_start(const worker_t *ws, const relay_args_t *a)
{
    size_t n = 0;
    while (n < a->workers && ws[n].relay)
        n++;
    if (n == 0)
        return;
    char *store = tool_mask_uri(a->store.uri);
    char *sink = tool_mask_uri(a->sink);
    const outbox_driver_t *drv = outbox_store_driver(ws[0].store);
    cli_log(OUTBOX_LOG_INFO, "relay %s: starting %zu worker%s: store %s (%s), sink %s, batch %zu",
            a->cfg.route, n, n == 1 ? "" : "s", store ? store : "?", drv ? drv->name : "?",
            sink ? sink : "?", a->cfg.batch);
    free(store);
    free(sink);
}

static void print_summary(const worker_t *ws, size_t n, const char *route)
{
    outbox_relay_counters_t sum = {0};
    for (size_t i = 0; i < n; i++) {
        outbox_relay_counters_t c = {0};
        if (ws[i].relay)
            outbox_relay_counters(ws[i].relay, &c);
        sum.claimed += c.claimed;
        sum.published += c.published;
        sum.retried += c.retried;
        sum.dead += c.dead;
        sum.released += c.released;
    }
    char line[512];
    snprintf(line, sizeof line,
             "relay %s: claimed %llu, published %llu, retried %llu, dead %llu, released %llu", route,
             (unsigned long long)sum.claimed, (unsigned long long)sum.published,
             (unsigned long long)sum.retried, (unsigned long long)sum.dead,
             (unsigned long long)sum.released);
    /* In text, "outbox: " and the counts; in logfmt or JSON, a record of
     * its own like every other line. */
    if (cli_log_format() == CLI_LOG_TEXT)
        cli_log_record(OUTBOX_LOG_INFO, "outbox: ", line);
    else
        cli_log_record(OUTBOX_LOG_INFO, NULL, line);
}

/* Opens the workers of one route (ws, a->workers of them). */
static int open_route(worker_t *ws, const relay_args_t *a, bool first)
{
    /* Once stopped, no more connections: the workers opened so far start,
     * see their stop at once and end cleanly. */
    if (!first && stop_requested)
        return CLI_EXIT_OK;
    int ex = worker_open(&ws[0], a);
    if (ex == CLI_EXIT_OK && a->workers > 1 &&
        !(outbox_store_capabilities(ws[0].store) & OUTBOX_STORE_CAP_CONCURRENT))
        ex = cli_error("relay%s%s: --workers %zu: the %s store does not allow concurrent "
                       "claimers; run one worker",
                       a->config ? " " : "", a->config ? a->cfg.route : "", a->workers,
                       outbox_store_driver(ws[0].store)->name);
    for (size_t i = 1; i < a->workers && ex == CLI_EXIT_OK && !stop_requested; i++)
        ex = worker_open(&ws[i], a);
    return ex;
}

/* With metrics on (routes[0] says), binds and starts serving before any
 * route opens, and gives every route's relays the observer. */
/* The metrics server's own lines, in the relay's log. */
static void metrics_log(int level, const char *line)
{
    cli_log(level, "%s", line);
}

static int metrics_begin(relay_args_t *routes, size_t n_routes, cli_metrics_t **m)
{
    *m = NULL;
    if (routes[0].metrics.listen == NULL)
        return CLI_EXIT_OK;
    cli_metrics_route_t *mr = calloc(n_routes, sizeof *mr);
    if (!mr)
        return cli_error("relay: out of memory");
    for (size_t r = 0; r < n_routes; r++)
        mr[r] = (cli_metrics_route_t){.route = routes[r].cfg.route, .store_uri = routes[r].store.uri,
                                      .relation = routes[r].store.relation, .poll_us = routes[r].cfg.poll_us};
    routes[0].metrics.pages = &cli_dead_pages;
    routes[0].metrics.log = metrics_log;
    char err[600];
    int ex = cli_metrics_start(&routes[0].metrics, mr, n_routes, m, err, sizeof err) == 0
                 ? CLI_EXIT_OK
                 : cli_error("relay: %s", err);
    free(mr);
    for (size_t r = 0; r < n_routes && ex == CLI_EXIT_OK; r++) {
        routes[r].cfg.observe = cli_metrics_observe;
        routes[r].cfg.observe_ctx = cli_metrics_route_ctx(*m, r);
    }
    return ex;
}

/* With tracing on (routes[0] says), starts the span exporter and gives
 * every route's relays its tracer, and metrics its counters. */
static int tracing_begin(relay_args_t *routes, size_t n_routes, cli_metrics_t *metrics,
                         cli_tracing_t **t)
{
    int ex = cli_tracing_start(&routes[0].tracing, t);
    for (size_t r = 0; r < n_routes && ex == CLI_EXIT_OK; r++)
        routes[r].cfg.tracer = cli_tracing_tracer(*t);
    cli_tracing_metrics(*t, metrics);
    return ex;
}

/* Runs the routes (each with its own workers) until all stop. */
static int run(relay_args_t *routes, size_t n_routes)
{
    cli_metrics_t *metrics = NULL;
    int mex = metrics_begin(routes, n_routes, &metrics);
    if (mex != CLI_EXIT_OK)
        return mex;
    cli_tracing_t *tracing = NULL;
    mex = tracing_begin(routes, n_routes, metrics, &tracing);
    if (mex != CLI_EXIT_OK) {
        cli_metrics_stop(metrics);
        return mex;
    }
    size_t total = 0;
    for (size_t r = 0; r < n_routes; r++)
        total += routes[r].workers;
    worker_t *ws = calloc(total, sizeof *ws);
    if (!ws) {
        cli_metrics_stop(metrics);
        cli_tracing_stop(tracing, false);
        return cli_error("relay: out of memory");
    }
    for (size_t r = 0, at = 0; r < n_routes; r++)
        for (size_t j = 0; j < routes[r].workers; j++)
            ws[at++].args = &routes[r];
    sigset_t prev;
    block_stop_signals(&prev);
    stop_workers = ws;
    stop_count = (sig_atomic_t)total;
    pthread_sigmask(SIG_SETMASK, &prev, NULL);

    int ex = CLI_EXIT_OK;
    for (size_t r = 0, at = 0; r < n_routes && ex == CLI_EXIT_OK; at += routes[r].workers, r++)
        ex = open_route(&ws[at], &routes[r], r == 0);
    purger_t purger;
    int pex = purger_open(&purger, routes, ex == CLI_EXIT_OK ? n_routes : 0);
    if (ex == CLI_EXIT_OK)
        ex = pex;

    bool ran = ex == CLI_EXIT_OK;
    if (ex == CLI_EXIT_OK) {
        cli_tracing_log_start(tracing);
        for (size_t r = 0, at = 0; r < n_routes; at += routes[r].workers, r++)
            log_start(&ws[at], &routes[r]);
        atomic_store(&workers_done, 0);
        ex = start_workers(ws, total);
        if (ex == CLI_EXIT_OK)
            ex = purger_start(&purger);
        if (ex != CLI_EXIT_OK)
            stop_all();
        size_t started = 0;
        for (size_t i = 0; i < total; i++)
            started += ws[i].started;
        if (ex == CLI_EXIT_OK) {
            char status[160];
            snprintf(status, sizeof status, "relaying %zu route%s with %zu worker%s", n_routes,
                     n_routes == 1 ? "" : "s", started, started == 1 ? "" : "s");
            cli_notify_ready(status);
        }
        supervise(started);
        purger_close(&purger);
        join_workers(ws, total);
        for (size_t i = 0; i < total && ex == CLI_EXIT_OK; i++)
            if (ws[i].rc != OUTBOX_OK)
                ex = n_routes > 1 ? cli_error("relay %s: %s", ws[i].args->cfg.route, ws[i].message)
                                  : cli_error("relay: %s", ws[i].message);
        for (size_t r = 0, at = 0; r < n_routes && ex == CLI_EXIT_OK; at += routes[r].workers, r++)
            if (!routes[r].quiet)
                print_summary(&ws[at], routes[r].workers, routes[r].cfg.route);
    }
    purger_close(&purger);
    forget_workers();
    cli_metrics_stop(metrics);
    for (size_t i = 0; i < total; i++)
        worker_close(&ws[i]);
    free(ws);
    /* After the relays: the spans of their last batches are queued. */
    cli_tracing_stop(tracing, ran);
    return ex;
}

/* --config: one set of arguments per route of the file. */
static int run_config(const relay_args_t *flags)
{
    cli_config_t c;
    char err[1024];
    if (cli_config_load(flags->config, &c, err, sizeof err) != OUTBOX_OK)
        return cli_error("relay: --config: %s", err);
    relay_args_t *routes = calloc(c.n_routes, sizeof *routes);
    if (!routes) {
        cli_config_free(&c);
        return cli_error("relay: out of memory");
    }
    for (size_t i = 0; i < c.n_stores; i++)
        tool_note_secrets(c.stores[i].uri);
    for (size_t i = 0; i < c.n_sinks; i++)
        tool_note_secrets(c.sinks[i].uri);
    if (c.tracing_endpoint)
        tool_note_secrets(c.tracing_endpoint);
    for (size_t r = 0; r < c.n_routes; r++) {
        const cli_config_route_t *cr = &c.routes[r];
        relay_args_t *a = &routes[r];
        a->store.uri = c.stores[cr->store].uri;
        a->store.relation = c.stores[cr->store].relation;
        a->sink = c.sinks[cr->sink].uri;
        a->cfg = cr->relay;
        a->cfg.struct_size = sizeof a->cfg;
        a->cfg.until_idle = flags->cfg.until_idle;
        /* The flags over the file, each on its own. */
        const cli_tracing_opts_t *ft = &flags->tracing;
        a->tracing = (cli_tracing_opts_t){
            .endpoint = ft->endpoint ? ft->endpoint : c.tracing_endpoint,
            .sample = ft->sample_given ? ft->sample : c.tracing_sample,
            .sample_given = ft->sample_given || c.tracing_sample_given,
            .service_name = ft->service_name ? ft->service_name : c.tracing_service_name,
        };
        a->workers = cr->workers;
        a->quiet = flags->quiet;
        a->config = flags->config;
        a->retention_us = cr->retention_us;
        a->purge_interval_us = cr->purge_interval_us;
        /* The flags over the file, each on its own. */
        const cli_metrics_opts_t *fm = &flags->metrics;
        a->metrics = (cli_metrics_opts_t){
            .listen = fm->listen ? fm->listen : c.metrics_listen,
            .stats_interval_us = c.metrics_stats_interval_us,
            .tls_cert = fm->tls_cert ? fm->tls_cert : c.metrics_tls_cert,
            .tls_key = fm->tls_key ? fm->tls_key : c.metrics_tls_key,
            .user = fm->user ? fm->user : c.metrics_user,
            .password = fm->password ? fm->password : c.metrics_password,
        };
    }
    int ex = cli_tracing_check(&routes[0].tracing) ? run(routes, c.n_routes) : CLI_EXIT_ERROR;
    free(routes);
    cli_config_free(&c);
    return ex;
}

int cli_cmd_relay(int argc, char **argv)
{
    install_signal_handlers();
    relay_args_t a = {.workers = 1, .tracing = CLI_TRACING_OPTS_INIT};
    outbox_relay_config_init(&a.cfg);
    a.cfg.struct_size = sizeof a.cfg;
    cli_parser_t p;
    cli_parser_init(&p, "relay", usage, argc, argv);
    int id;
    while ((id = cli_next(&p, options)) > 0)
        if (!parse_option(&a, id, p.value))
            return CLI_EXIT_ERROR;
    if (id == CLI_HELP) {
        fputs(usage, stdout);
        return CLI_EXIT_OK;
    }
    if (id == CLI_ERROR)
        return CLI_EXIT_ERROR;
    if (a.config && a.route_flags)
        return cli_error("relay: --config FILE takes the routes, stores and sinks from the "
                         "file; give only --until-idle, --quiet, --metrics-*, --log-format, "
                         "--log-file, --otlp-endpoint and --trace-* with it");
    /* The endpoint's password only from the environment: an argument
     * would show in ps. */
    a.metrics.password = getenv("OUTBOX_METRICS_PASSWORD");
    tool_note_secret(a.metrics.password);
    if (!a.config && !check_args(&a))
        return CLI_EXIT_ERROR;
    /* With --config, the file's tracing: may name the endpoint. */
    if (!a.config && !cli_tracing_check(&a.tracing))
        return CLI_EXIT_ERROR;
    /* Opened before any connection, so a bad path fails before the start. */
    if (a.log_file && !cli_log_open_file(a.log_file))
        return CLI_EXIT_ERROR;
    int ex = a.config ? run_config(&a) : run(&a, 1);
    cli_log_close();
    return ex;
}
