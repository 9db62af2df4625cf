/* outbox relay --metrics-listen: what the relays observe, aggregated per
 * route under a mutex (observers run on every worker thread, the HTTP
 * daemon and the stats poller on threads of their own), served over HTTP
 * with libmicrohttpd. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "metrics.h"

#define N_DUR_BUCKETS 14
#define N_LAG_BUCKETS 16
#define RING 60

static const double dur_le[N_DUR_BUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                             0.1,    0.25,  0.5,    1,     2.5,   5,     10};
static const double lag_le[N_LAG_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                             0.5,   1,      2.5,   5,    10,   30,    60,  300};

typedef struct histo {
    uint64_t bucket[N_LAG_BUCKETS]; /* per bucket, not cumulative; +Inf is count */
    uint64_t count;
    double sum;
} histo_t;

typedef struct route_metrics {
    cli_metrics_t *m;
    cli_metrics_route_t cfg;
    pthread_mutex_t mu;
    uint64_t claimed, published, retried, dead, released, fence_lost, outages, store_errors;
    histo_t claim, publish, settle, lag;
    int breaker_open;
    int64_t last_claim_ok_us; /* monotonic; 0 = never */
    double last_lag_s;        /* -1 = none yet */
    char last_error[OUTBOX_MESSAGE_MAX];
    int64_t ring_sec[RING];
    uint64_t ring_n[RING];
    /* From the stats poller. */
    int stats_ok;
    int64_t stats_at_us; /* monotonic time of the last successful poll; 0 = none */
    outbox_stats_t stats;
    int64_t oldest_age_us;
    char stats_error[OUTBOX_MESSAGE_MAX];
} route_metrics_t;

struct cli_metrics {
    struct MHD_Daemon *daemon;
    char *tls_cert, *tls_key; /* the PEM files' contents; NULL: plain HTTP */
    char *user, *password;    /* NULL: no authentication */
    int64_t interval_us;
    size_t n;
    route_metrics_t *routes;
    pthread_t poller;
    bool poller_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stopping;
    const cli_metrics_pages_t *pages; /* under /routes/; NULL: none */
    void *pages_ctx;
    /* Under mu: the span exporter's counters (NULL: no tracing). */
    void (*tracing_read)(void *ctx, cli_metrics_tracing_t *out);
    void *tracing_ctx;
    void (*log)(int level, const char *line); /* NULL: libmicrohttpd's lines dropped */
};

static void histo_add(histo_t *h, const double *le, size_t n_le, double v)
{
    for (size_t i = 0; i < n_le; i++)
        if (v <= le[i]) {
            h->bucket[i]++;
            break;
        }
    h->count++;
    h->sum += v;
}

/* ------------------------------------------------------------ listen */

typedef struct hostport {
    char host[256];
    char port[8];
} hostport_t;

static int split_listen(const char *listen, hostport_t *hp, char *err, size_t size)
{
    const char *colon;
    size_t hlen;
    const char *h = listen;
    if (listen[0] == '[') {
        const char *close = strchr(listen, ']');
        if (close == NULL || close[1] != ':') {
            snprintf(err, size, "\"%.100s\": expected [IPv6]:PORT", listen);
            return -1;
        }
        h = listen + 1;
        hlen = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(listen, ':');
        if (colon == NULL) {
            snprintf(err, size, "\"%.100s\": expected HOST:PORT (a port is required)", listen);
            return -1;
        }
        hlen = (size_t)(colon - listen);
    }
    if (hlen == 0 || hlen >= sizeof hp->host) {
        snprintf(err, size, "\"%.100s\": expected HOST:PORT (the host is missing or too long)", listen);
        return -1;
    }
    const char *p = colon + 1;
    size_t plen = strlen(p);
    long port = 0;
    for (size_t i = 0; i < plen && plen <= 5; i++)
        port = p[i] >= '0' && p[i] <= '9' ? port * 10 + (p[i] - '0') : -1000000;
    if (plen == 0 || plen > 5 || port < 1 || port > 65535) {
        snprintf(err, size, "\"%.100s\": the port must be a number 1..65535", listen);
        return -1;
    }
    memcpy(hp->host, h, hlen);
    hp->host[hlen] = '\0';
    snprintf(hp->port, sizeof hp->port, "%ld", port);
    return 0;
}

int cli_metrics_listen_check(const char *listen, char *err, size_t size)
{
    hostport_t hp;
    return split_listen(listen, &hp, err, size);
}

/* A listening socket on listen, or -1 with the reason in err. */
static int bind_listen(const char *where, char *err, size_t size)
{
    hostport_t hp;
    if (split_listen(where, &hp, err, size) != 0)
        return -1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *ai = NULL;
    int g = getaddrinfo(hp.host, hp.port, &hints, &ai);
    if (g != 0) {
        snprintf(err, size, "\"%.100s\": cannot resolve host \"%.100s\": %s", where, hp.host,
                 gai_strerror(g));
        return -1;
    }
    int fd = -1, e = 0;
    for (struct addrinfo *a = ai; a != NULL && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 64) != 0) {
            e = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0)
        snprintf(err, size, "cannot listen on %.100s: %s", where, strerror(e));
    return fd;
}

/* ----------------------------------------------------------- observe */

void cli_metrics_observe(void *ctx, const outbox_relay_observation_t *o)
{
    route_metrics_t *rm = ctx;
    int64_t now = o->ok && o->claim_us >= 0 ? tool_mono_us() : 0;
    pthread_mutex_lock(&rm->mu);
    rm->claimed += o->claimed;
    rm->published += o->published;
    rm->retried += o->retried;
    rm->dead += o->dead;
    rm->released += o->released;
    rm->fence_lost += o->fence_lost;
    rm->outages += o->outage != 0;
    if (!o->ok)
        rm->store_errors++;
    /* A failed claim says nothing of the sink: only a batch that was
     * published moves the breaker state. */
    if (o->publish_us >= 0)
        rm->breaker_open = o->breaker_open;
    if (o->claim_us >= 0 && (o->ok || o->settle_us >= 0))
        rm->last_claim_ok_us = now ? now : tool_mono_us();
    if (o->claim_us >= 0)
        histo_add(&rm->claim, dur_le, N_DUR_BUCKETS, (double)o->claim_us / 1e6);
    if (o->publish_us >= 0)
        histo_add(&rm->publish, dur_le, N_DUR_BUCKETS, (double)o->publish_us / 1e6);
    if (o->settle_us >= 0)
        histo_add(&rm->settle, dur_le, N_DUR_BUCKETS, (double)o->settle_us / 1e6);
    for (size_t i = 0; i < o->n_lag; i++) {
        double s = o->lag_us[i] > 0 ? (double)o->lag_us[i] / 1e6 : 0;
        histo_add(&rm->lag, lag_le, N_LAG_BUCKETS, s);
        rm->last_lag_s = s;
    }
    if (o->published > 0) {
        int64_t sec = (now ? now : tool_mono_us()) / 1000000;
        size_t slot = (size_t)(sec % RING);
        if (rm->ring_sec[slot] != sec) {
            rm->ring_sec[slot] = sec;
            rm->ring_n[slot] = 0;
        }
        rm->ring_n[slot] += o->published;
    }
    if ((!o->ok || o->outage) && o->error != NULL)
        snprintf(rm->last_error, sizeof rm->last_error, "%s", o->error);
    pthread_mutex_unlock(&rm->mu);
}

void *cli_metrics_route_ctx(cli_metrics_t *m, size_t i)
{
    return &m->routes[i];
}

/* -------------------------------------------------------- stats poll */

static void *poller_main(void *arg)
{
    cli_metrics_t *m = arg;
    outbox_store_t **stores = calloc(m->n, sizeof *stores);
    pthread_mutex_lock(&m->mu);
    while (!m->stopping && stores != NULL) {
        pthread_mutex_unlock(&m->mu);
        for (size_t i = 0; i < m->n; i++) {
            route_metrics_t *rm = &m->routes[i];
            char why[OUTBOX_MESSAGE_MAX] = "";
            outbox_stats_t st = {0};
            int rc = OUTBOX_OK;
            if (stores[i] == NULL) {
                outbox_store_options_t so = {.struct_size = sizeof so, .relation = rm->cfg.relation};
                outbox_diag_t d = {0};
                rc = outbox_store_open(rm->cfg.store_uri, &so, &stores[i], &d);
                if (rc != OUTBOX_OK) {
                    stores[i] = NULL;
                    snprintf(why, sizeof why, "stats: %.400s", d.message);
                }
            }
            if (stores[i] != NULL) {
                rc = outbox_store_stats(stores[i], rm->cfg.route, &st);
                if (rc != OUTBOX_OK) {
                    snprintf(why, sizeof why, "stats: %.400s", outbox_store_message(stores[i]));
                    outbox_store_close(stores[i]); /* reconnect next time */
                    stores[i] = NULL;
                }
            }
            int64_t now = tool_mono_us(), wall = tool_wall_us();
            pthread_mutex_lock(&rm->mu);
            rm->stats_ok = rc == OUTBOX_OK;
            if (rc == OUTBOX_OK) {
                rm->stats = st;
                rm->stats_at_us = now;
                rm->oldest_age_us = st.oldest_pending_created_at > 0 && wall > st.oldest_pending_created_at
                                        ? wall - st.oldest_pending_created_at
                                        : 0;
                rm->stats_error[0] = '\0';
            } else {
                snprintf(rm->stats_error, sizeof rm->stats_error, "%s", why);
            }
            pthread_mutex_unlock(&rm->mu);
        }
        pthread_mutex_lock(&m->mu);
        if (m->stopping)
            break;
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        int64_t ns = (int64_t)until.tv_nsec + (m->interval_us % 1000000) * 1000;
        until.tv_sec += (time_t)(m->interval_us / 1000000 + ns / 1000000000);
        until.tv_nsec = (long)(ns % 1000000000);
        while (!m->stopping && pthread_cond_timedwait(&m->cv, &m->mu, &until) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&m->mu);
    for (size_t i = 0; stores != NULL && i < m->n; i++)
        outbox_store_close(stores[i]);
    free(stores);
    return NULL;
}

/* ------------------------------------------------------------- pages */

/* Why route rm is not ready, or NULL; rm->mu held. */
static const char *unready(const cli_metrics_t *m, const route_metrics_t *rm, int64_t now, char *buf,
                           size_t size)
{
    int64_t allow = 3 * rm->cfg.poll_us > 10000000 ? 3 * rm->cfg.poll_us : 10000000;
    int64_t stats_allow = 3 * m->interval_us > 10000000 ? 3 * m->interval_us : 10000000;
    if (rm->last_claim_ok_us == 0)
        snprintf(buf, size, "no successful claim yet");
    else if (now - rm->last_claim_ok_us > allow)
        snprintf(buf, size, "no successful claim for %lld ms (last error: %s)",
                 (long long)((now - rm->last_claim_ok_us) / 1000),
                 rm->last_error[0] ? rm->last_error : "none");
    else if (!rm->stats_ok || rm->stats_at_us == 0 || now - rm->stats_at_us > stats_allow)
        snprintf(buf, size, "stats poll failing: %s", rm->stats_error[0] ? rm->stats_error : "no answer yet");
    else if (rm->breaker_open)
        snprintf(buf, size, "sink unavailable: %s", rm->last_error[0] ? rm->last_error : "breaker open");
    else
        return NULL;
    return buf;
}

static void label_escape(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            fprintf(f, "\\%c", *s);
        else if (*s == '\n')
            fputs("\\n", f);
        else
            fputc(*s, f);
    }
}

static void html_escape(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(*s, f);
        }
    }
}

static const struct {
    const char *name, *help;
    size_t off;
} counters[] = {
    {"outbox_events_claimed_total", "Rows claimed by the relay's workers.", offsetof(route_metrics_t, claimed)},
    {"outbox_events_published_total", "Rows published and marked published.", offsetof(route_metrics_t, published)},
    {"outbox_events_retried_total", "Rows rescheduled for a later attempt.", offsetof(route_metrics_t, retried)},
    {"outbox_events_dead_total", "Rows dead-lettered.", offsetof(route_metrics_t, dead)},
    {"outbox_events_released_total", "Rows handed back uncharged (outage, key blocked, stop).", offsetof(route_metrics_t, released)},
    {"outbox_fence_conflicts_total", "Verdicts refused because the row's lease had been taken over.", offsetof(route_metrics_t, fence_lost)},
    {"outbox_sink_outages_total", "Batches the circuit breaker released because the sink looked down.", offsetof(route_metrics_t, outages)},
    {"outbox_store_errors_total", "Relay steps whose claim or settle failed.", offsetof(route_metrics_t, store_errors)},
};

static void emit_histo(FILE *f, const cli_metrics_t *m, const route_metrics_t *snap, const char *name,
                       const char *help, size_t off, const double *le, size_t n_le)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (size_t r = 0; r < m->n; r++) {
        const histo_t *h = (const histo_t *)((const char *)&snap[r] + off);
        uint64_t cum = 0;
        for (size_t i = 0; i < n_le; i++) {
            cum += h->bucket[i];
            fprintf(f, "%s_bucket{route=\"", name);
            label_escape(f, snap[r].cfg.route);
            fprintf(f, "\",le=\"%g\"} %llu\n", le[i], (unsigned long long)cum);
        }
        fprintf(f, "%s_bucket{route=\"", name);
        label_escape(f, snap[r].cfg.route);
        fprintf(f, "\",le=\"+Inf\"} %llu\n%s_sum{route=\"", (unsigned long long)h->count, name);
        label_escape(f, snap[r].cfg.route);
        fprintf(f, "\"} %.6f\n%s_count{route=\"", h->sum, name);
        label_escape(f, snap[r].cfg.route);
        fprintf(f, "\"} %llu\n", (unsigned long long)h->count);
    }
}

static void emit_gauge_head(FILE *f, const char *name, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
}

static void emit_series(FILE *f, const char *name, const char *route, double v)
{
    fprintf(f, "%s{route=\"", name);
    label_escape(f, route);
    fprintf(f, "\"} %.15g\n", v);
}

/* A consistent copy of every route, taken one route at a time. */
static route_metrics_t *snapshot(cli_metrics_t *m, int64_t now, char (*why)[OUTBOX_MESSAGE_MAX + 64],
                                 int *ready)
{
    route_metrics_t *snap = malloc(m->n * sizeof *snap);
    if (snap == NULL)
        return NULL;
    for (size_t r = 0; r < m->n; r++) {
        route_metrics_t *rm = &m->routes[r];
        pthread_mutex_lock(&rm->mu);
        snap[r] = *rm;
        ready[r] = unready(m, rm, now, why[r], sizeof why[r]) == NULL;
        pthread_mutex_unlock(&rm->mu);
    }
    return snap;
}

static double rate_last_minute(const route_metrics_t *rm, int64_t now)
{
    int64_t sec = now / 1000000;
    uint64_t sum = 0;
    for (size_t i = 0; i < RING; i++)
        if (rm->ring_sec[i] > sec - RING && rm->ring_sec[i] <= sec)
            sum += rm->ring_n[i];
    return (double)sum / RING;
}

/* The span exporter's counters: process-wide, so without a route label. */
static void emit_tracing(FILE *f, cli_metrics_t *m)
{
    pthread_mutex_lock(&m->mu);
    void (*read)(void *, cli_metrics_tracing_t *) = m->tracing_read;
    void *ctx = m->tracing_ctx;
    pthread_mutex_unlock(&m->mu);
    if (read == NULL)
        return;
    cli_metrics_tracing_t t;
    read(ctx, &t);
    fprintf(f, "# HELP outbox_trace_spans_exported_total Publish spans the collector accepted.\n"
               "# TYPE outbox_trace_spans_exported_total counter\n"
               "outbox_trace_spans_exported_total %llu\n", (unsigned long long)t.exported);
    fprintf(f, "# HELP outbox_trace_spans_dropped_total Publish spans dropped: the export queue was full, "
               "their POST failed, or the collector rejected them.\n"
               "# TYPE outbox_trace_spans_dropped_total counter\n"
               "outbox_trace_spans_dropped_total{reason=\"queue_full\"} %llu\n"
               "outbox_trace_spans_dropped_total{reason=\"export_failed\"} %llu\n"
               "outbox_trace_spans_dropped_total{reason=\"rejected\"} %llu\n",
            (unsigned long long)t.dropped_queue, (unsigned long long)t.dropped_export,
            (unsigned long long)t.dropped_rejected);
    fprintf(f, "# HELP outbox_trace_export_failures_total POSTs of spans to the collector that failed.\n"
               "# TYPE outbox_trace_export_failures_total counter\n"
               "outbox_trace_export_failures_total %llu\n", (unsigned long long)t.export_failures);
}

void cli_metrics_set_tracing(cli_metrics_t *m, void (*read)(void *ctx, cli_metrics_tracing_t *out), void *ctx)
{
    pthread_mutex_lock(&m->mu);
    m->tracing_read = read;
    m->tracing_ctx = ctx;
    pthread_mutex_unlock(&m->mu);
}

static char *render(cli_metrics_t *m, const char *url, unsigned *status, const char **type, size_t *len)
{
    int64_t now = tool_mono_us();
    char(*why)[OUTBOX_MESSAGE_MAX + 64] = calloc(m->n, sizeof *why);
    int *ready = calloc(m->n, sizeof *ready);
    route_metrics_t *snap = why && ready ? snapshot(m, now, why, ready) : NULL;
    char *buf = NULL;
    FILE *f = snap ? open_memstream(&buf, len) : NULL;
    *status = MHD_HTTP_OK;
    *type = "text/plain; charset=utf-8";
    if (f == NULL) {
        free(why);
        free(ready);
        free(snap);
        return NULL;
    }
    if (strcmp(url, "/healthz") == 0) {
        fputs("ok\n", f);
    } else if (strcmp(url, "/readyz") == 0) {
        int all = 1;
        for (size_t r = 0; r < m->n; r++)
            if (!ready[r]) {
                all = 0;
                fputs("route ", f);
                fputs(snap[r].cfg.route, f);
                fprintf(f, ": %s\n", why[r]);
            }
        if (all)
            fputs("ready\n", f);
        else
            *status = MHD_HTTP_SERVICE_UNAVAILABLE;
    } else if (strcmp(url, "/metrics") == 0) {
        *type = "text/plain; version=0.0.4; charset=utf-8";
        for (size_t c = 0; c < sizeof counters / sizeof counters[0]; c++) {
            fprintf(f, "# HELP %s %s\n# TYPE %s counter\n", counters[c].name, counters[c].help,
                    counters[c].name);
            for (size_t r = 0; r < m->n; r++)
                emit_series(f, counters[c].name, snap[r].cfg.route,
                            (double)*(const uint64_t *)((const char *)&snap[r] + counters[c].off));
        }
        emit_histo(f, m, snap, "outbox_claim_duration_seconds", "Time one claim took.",
                   offsetof(route_metrics_t, claim), dur_le, N_DUR_BUCKETS);
        emit_histo(f, m, snap, "outbox_publish_duration_seconds", "Time publishing one batch took.",
                   offsetof(route_metrics_t, publish), dur_le, N_DUR_BUCKETS);
        emit_histo(f, m, snap, "outbox_settle_duration_seconds", "Time settling one batch took.",
                   offsetof(route_metrics_t, settle), dur_le, N_DUR_BUCKETS);
        emit_histo(f, m, snap, "outbox_commit_to_publish_lag_seconds",
                   "Time from a row's commit (created_at) to its publication.",
                   offsetof(route_metrics_t, lag), lag_le, N_LAG_BUCKETS);
        emit_gauge_head(f, "outbox_pending_events", "Rows pending on the route (last stats poll).");
        for (size_t r = 0; r < m->n; r++)
            if (snap[r].stats_at_us)
                emit_series(f, "outbox_pending_events", snap[r].cfg.route, (double)snap[r].stats.pending);
        emit_gauge_head(f, "outbox_dead_events", "Dead-lettered rows on the route (last stats poll).");
        for (size_t r = 0; r < m->n; r++)
            if (snap[r].stats_at_us)
                emit_series(f, "outbox_dead_events", snap[r].cfg.route, (double)snap[r].stats.dead);
        emit_gauge_head(f, "outbox_oldest_pending_age_seconds",
                        "Age of the oldest pending row at the last stats poll; 0 when none.");
        for (size_t r = 0; r < m->n; r++)
            if (snap[r].stats_at_us)
                emit_series(f, "outbox_oldest_pending_age_seconds", snap[r].cfg.route,
                            (double)snap[r].oldest_age_us / 1e6);
        emit_gauge_head(f, "outbox_breaker_open", "1 when the relay's last batch found the sink down.");
        for (size_t r = 0; r < m->n; r++)
            emit_series(f, "outbox_breaker_open", snap[r].cfg.route, snap[r].breaker_open);
        emit_gauge_head(f, "outbox_route_ready", "1 when the route passes the /readyz checks.");
        for (size_t r = 0; r < m->n; r++)
            emit_series(f, "outbox_route_ready", snap[r].cfg.route, ready[r]);
        emit_tracing(f, m);
    } else if (strcmp(url, "/") == 0) {
        *type = "text/html; charset=utf-8";
        fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
              "<meta http-equiv=\"refresh\" content=\"5\"><title>outbox relay</title>"
              "<style>body{font-family:sans-serif}table{border-collapse:collapse}"
              "td,th{border:1px solid #999;padding:4px 8px;text-align:left}</style></head>\n"
              "<body><h1>outbox relay</h1>\n<table id=\"routes\">\n<tr><th>route</th><th>ready</th>"
              "<th>pending</th><th>dead</th><th>published/s (1 min)</th><th>last lag (s)</th>"
              "<th>breaker</th><th>last error</th>", f);
        fputs(m->pages ? "<th>dead letters</th></tr>\n" : "</tr>\n", f);
        for (size_t r = 0; r < m->n; r++) {
            const route_metrics_t *s = &snap[r];
            char pending[32] = "?", dead[32] = "?", lag[32] = "-";
            if (s->stats_at_us) {
                snprintf(pending, sizeof pending, "%llu", (unsigned long long)s->stats.pending);
                snprintf(dead, sizeof dead, "%llu", (unsigned long long)s->stats.dead);
            }
            if (s->lag.count)
                snprintf(lag, sizeof lag, "%.3f", s->last_lag_s);
            fputs("<tr class=\"route\" data-route=\"", f);
            html_escape(f, s->cfg.route);
            fputs("\"><td class=\"name\">", f);
            html_escape(f, s->cfg.route);
            fprintf(f, "</td><td class=\"ready\">%s</td><td class=\"pending\">%s</td>"
                       "<td class=\"dead\">%s</td><td class=\"rate\">%.2f</td><td class=\"lag\">%s</td>"
                       "<td class=\"breaker\">%s</td><td class=\"error\">",
                    ready[r] ? "yes" : "no", pending, dead, rate_last_minute(s, now), lag,
                    s->breaker_open ? "open" : "closed");
            html_escape(f, ready[r] ? s->last_error : why[r]);
            if (m->pages) {
                fputs("</td><td class=\"deadlink\"><a href=\"", f);
                m->pages->put_path(f, s->cfg.route);
                fputs("\">list</a>", f);
            }
            fputs("</td></tr>\n", f);
        }
        fputs("</table>\n<p>pending and dead: the last stats poll; last lag: commit-to-publish of the "
              "last row published; <a href=\"/metrics\">/metrics</a>, <a href=\"/readyz\">/readyz</a></p>\n"
              "</body></html>\n", f);
    } else {
        *status = MHD_HTTP_NOT_FOUND;
        fputs("not found: try /metrics, /healthz, /readyz or /\n", f);
    }
    fclose(f);
    free(why);
    free(ready);
    free(snap);
    return buf;
}

/* Equal strings, compared in a time that does not depend on where they
 * differ. */
static bool same_secret(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = la != lb;
    for (size_t i = 0; i < la; i++)
        diff |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
    return diff == 0;
}

/* With authentication on, whether the request carries the user and the
 * password; /healthz is always open. */
static bool allowed(const cli_metrics_t *m, struct MHD_Connection *conn, const char *url)
{
    if (m->user == NULL || strcmp(url, "/healthz") == 0)
        return true;
    char *pass = NULL;
    char *user = MHD_basic_auth_get_username_password(conn, &pass);
    bool ok = user != NULL && pass != NULL && same_secret(user, m->user) && same_secret(pass, m->password);
    if (user)
        MHD_free(user);
    if (pass)
        MHD_free(pass);
    return ok;
}

static enum MHD_Result refuse(struct MHD_Connection *conn)
{
    static const char text[] = "authentication required\n";
    struct MHD_Response *res =
        MHD_create_response_from_buffer(sizeof text - 1, (void *)text, MHD_RESPMEM_PERSISTENT);
    if (res == NULL)
        return MHD_NO;
    MHD_add_response_header(res, "Content-Type", "text/plain");
    enum MHD_Result ret = MHD_queue_basic_auth_fail_response(conn, "outbox relay", res);
    MHD_destroy_response(res);
    return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **state)
{
    (void)version;
    (void)upload;
    (void)upload_size;
    (void)state;
    cli_metrics_t *m = cls;
    if (!allowed(m, conn, url))
        return refuse(conn);
    if (m->pages && strncmp(url, "/routes/", 8) == 0)
        return (enum MHD_Result)m->pages->handle(m->pages_ctx, conn, url, method, upload, upload_size,
                                                 state);
    unsigned status;
    const char *type;
    size_t len = 0;
    char *body;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        body = strdup("method not allowed\n");
        len = body ? strlen(body) : 0;
        status = MHD_HTTP_METHOD_NOT_ALLOWED;
        type = "text/plain";
    } else {
        body = render(m, url, &status, &type, &len);
    }
    if (body == NULL)
        return MHD_NO;
    struct MHD_Response *res = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (res == NULL) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(res, "Content-Type", type);
    MHD_add_response_header(res, "Cache-Control", "no-store");
    enum MHD_Result ret = MHD_queue_response(conn, status, res);
    MHD_destroy_response(res);
    return ret;
}

/* ------------------------------------------------------------- life */

/* The whole of a small file, NUL-terminated; NULL with the reason in err. */
static char *read_pem(const char *path, char *err, size_t size)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, size, "cannot read %.200s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf != NULL && (got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len - 1 == 0) {
            char *grown = cap < (1u << 20) ? realloc(buf, cap * 2) : NULL;
            if (grown == NULL) {
                free(buf);
                buf = NULL;
                snprintf(err, size, "%.200s is larger than 1 MiB: not a PEM file", path);
                fclose(f);
                return NULL;
            }
            buf = grown;
            cap *= 2;
        }
    }
    bool failed = ferror(f);
    fclose(f);
    if (buf == NULL) {
        snprintf(err, size, "out of memory");
        return NULL;
    }
    buf[len] = '\0';
    if (failed || strstr(buf, "-----BEGIN ") == NULL) {
        snprintf(err, size, "%.200s is not a PEM file", path);
        free(buf);
        return NULL;
    }
    return buf;
}

int cli_metrics_opts_check(const cli_metrics_opts_t *o, char *err, size_t size)
{
    if ((o->tls_cert == NULL) != (o->tls_key == NULL)) {
        snprintf(err, size, "tls_cert and tls_key go together: give both or neither");
        return -1;
    }
    if (o->user != NULL && o->password == NULL) {
        snprintf(err, size, "a user needs a password (OUTBOX_METRICS_PASSWORD, or password: in "
                            "the config file)");
        return -1;
    }
    if (o->user != NULL && (o->user[0] == '\0' || strchr(o->user, ':') != NULL)) {
        snprintf(err, size, "the user must be non-empty and without ':'");
        return -1;
    }
    if (o->user != NULL && o->password[0] == '\0') {
        snprintf(err, size, "the password is empty");
        return -1;
    }
    const char *files[] = {o->tls_cert, o->tls_key};
    for (size_t i = 0; i < 2; i++) {
        if (files[i] == NULL)
            continue;
        char *pem = read_pem(files[i], err, size);
        if (pem == NULL)
            return -1;
        free(pem);
    }
    return 0;
}

static void free_metrics(cli_metrics_t *m)
{
    free(m->tls_cert);
    free(m->tls_key);
    free(m->user);
    free(m->password);
    free(m->routes);
    free(m);
}

/* libmicrohttpd's own messages (a client's failed TLS handshake, say) go
 * to the relay's log at debug level, in its format, rather than to stderr:
 * any client can cause them. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    cli_metrics_t *m = cls;
    if (m->log == NULL)
        return;
    char line[512];
    int w = snprintf(line, sizeof line, "metrics: ");
    vsnprintf(line + w, sizeof line - (size_t)w, fmt, ap);
    line[strcspn(line, "\r\n")] = '\0';
    m->log(OUTBOX_LOG_DEBUG, line);
}

/* The end of a request: what the pages kept for it is freed. */
static void request_completed(void *cls, struct MHD_Connection *conn, void **state,
                              enum MHD_RequestTerminationCode toe)
{
    (void)conn;
    (void)toe;
    cli_metrics_t *m = cls;
    if (*state != NULL && m->pages)
        m->pages->completed(state);
}

/* Connections served at once; each has a thread of its own. */
#define METRICS_CONNECTIONS_MAX 32u

/* The daemon, over TLS when m has a certificate. A thread per connection,
 * so a dead-letter page waiting on a slow store never holds up /healthz
 * or a scrape of /metrics. */
static struct MHD_Daemon *start_daemon(cli_metrics_t *m, int fd)
{
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_ERROR_LOG;
    if (m->tls_cert == NULL)
        return MHD_start_daemon(flags, 0, NULL, NULL, handle, m, MHD_OPTION_LISTEN_SOCKET, fd,
                                MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
                                m, MHD_OPTION_NOTIFY_COMPLETED, request_completed, m,
                                MHD_OPTION_CONNECTION_LIMIT, METRICS_CONNECTIONS_MAX, MHD_OPTION_END);
    return MHD_start_daemon(flags | MHD_USE_TLS, 0, NULL, NULL, handle, m, MHD_OPTION_LISTEN_SOCKET, fd,
                            MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, m,
                            MHD_OPTION_NOTIFY_COMPLETED, request_completed, m,
                            MHD_OPTION_CONNECTION_LIMIT, METRICS_CONNECTIONS_MAX,
                            MHD_OPTION_HTTPS_MEM_CERT, m->tls_cert, MHD_OPTION_HTTPS_MEM_KEY, m->tls_key,
                            MHD_OPTION_END);
}

/* Fills err (when there is room) and returns -1. */
static int start_fail(char *err, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int start_fail(char *err, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (size > 0)
        vsnprintf(err, size, fmt, ap);
    va_end(ap);
    return -1;
}

int cli_metrics_start(const cli_metrics_opts_t *o, const cli_metrics_route_t *routes, size_t n,
                      cli_metrics_t **out, char *errbuf, size_t errlen)
{
    *out = NULL;
    char err[512];
    if (cli_metrics_opts_check(o, err, sizeof err) != 0)
        return start_fail(errbuf, errlen, "metrics: %s", err);
    if (o->tls_cert != NULL && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        return start_fail(errbuf, errlen, "metrics: this libmicrohttpd was built without TLS");
    cli_metrics_t *m = calloc(1, sizeof *m);
    route_metrics_t *rs = calloc(n, sizeof *rs);
    if (m == NULL || rs == NULL) {
        free(m);
        free(rs);
        return start_fail(errbuf, errlen, "out of memory");
    }
    m->routes = rs;
    m->log = o->log;
    if (o->tls_cert != NULL && ((m->tls_cert = read_pem(o->tls_cert, err, sizeof err)) == NULL ||
                                (m->tls_key = read_pem(o->tls_key, err, sizeof err)) == NULL)) {
        free_metrics(m);
        return start_fail(errbuf, errlen, "metrics: %s", err);
    }
    if (o->user != NULL && ((m->user = strdup(o->user)) == NULL ||
                            (m->password = strdup(o->password)) == NULL)) {
        free_metrics(m);
        return start_fail(errbuf, errlen, "out of memory");
    }
    int fd = bind_listen(o->listen, err, sizeof err);
    if (fd < 0) {
        free_metrics(m);
        return start_fail(errbuf, errlen, "metrics listen %s", err);
    }
    m->n = n;
    m->interval_us = o->stats_interval_us > 0 ? o->stats_interval_us : 5000000;
    pthread_mutex_init(&m->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);
    for (size_t i = 0; i < n; i++) {
        rs[i].m = m;
        rs[i].cfg = routes[i];
        rs[i].last_lag_s = -1;
        pthread_mutex_init(&rs[i].mu, NULL);
    }
    if (o->pages != NULL && (m->pages_ctx = o->pages->open(routes, n, m->tls_cert != NULL, m->user)) == NULL) {
        close(fd);
        cli_metrics_stop(m);
        return start_fail(errbuf, errlen, "out of memory");
    }
    m->pages = o->pages;
    m->daemon = start_daemon(m, fd);
    if (m->daemon == NULL) {
        close(fd);
        bool tls = m->tls_cert != NULL;
        cli_metrics_stop(m);
        return tls ? start_fail(errbuf, errlen, "metrics: cannot start the HTTPS server on %s: the "
                                          "certificate or the key was refused (do they belong together?)",
                               o->listen)
                   : start_fail(errbuf, errlen, "metrics: cannot start the HTTP server on %s", o->listen);
    }
    int e = pthread_create(&m->poller, NULL, poller_main, m);
    if (e != 0) {
        cli_metrics_stop(m);
        return start_fail(errbuf, errlen, "metrics: cannot start the stats poller: %s", strerror(e));
    }
    m->poller_started = true;
    *out = m;
    return 0;
}

void cli_metrics_stop(cli_metrics_t *m)
{
    if (m == NULL)
        return;
    if (m->daemon)
        MHD_stop_daemon(m->daemon);
    if (m->pages)
        m->pages->close(m->pages_ctx);
    pthread_mutex_lock(&m->mu);
    m->stopping = true;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    if (m->poller_started)
        pthread_join(m->poller, NULL);
    for (size_t i = 0; i < m->n; i++)
        pthread_mutex_destroy(&m->routes[i].mu);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free_metrics(m);
}
