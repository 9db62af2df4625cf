/* outbox relay's metrics (outbox-bench --metrics runs the same module): the
 * relays' observations aggregated per route,
 * a stats poller on store handles of its own, and an HTTP server with
 * /metrics (Prometheus text format), /healthz, /readyz and a status page. */
#ifndef OUTBOX_CLI_METRICS_H
#define OUTBOX_CLI_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "outbox/outbox.h"

typedef struct cli_metrics cli_metrics_t;

typedef struct cli_metrics_route {
    const char *route;
    const char *store_uri; /* opened again by the stats poller */
    const char *relation;  /* NULL: the default */
    int64_t poll_us;       /* the relay's poll: readiness allows max(3 x poll, 10 s) */
} cli_metrics_route_t;

/* Parse "HOST:PORT" ("[v6]:PORT" too); one-line reason in err on failure. */
int cli_metrics_listen_check(const char *listen, char *err, size_t size);

struct MHD_Connection;

/* Pages of another module served under /routes/ behind the same
 * authentication, each route's linked from the status page: the dead
 * letters (status_dead.h). The server calls them on its own thread. */
typedef struct cli_metrics_pages {
    /* The pages of routes[0..n) (the array is copied); tls: the endpoint
     * serves HTTPS; user: its basic authentication user, or NULL. NULL
     * when out of memory. */
    void *(*open)(const cli_metrics_route_t *routes, size_t n, bool tls, const char *user);
    /* Called once the server has stopped. */
    void (*close)(void *pages);
    /* libmicrohttpd's access handler (MHD_YES or MHD_NO) for a path under
     * /routes/, once authentication passed. */
    int (*handle)(void *pages, struct MHD_Connection *conn, const char *url, const char *method,
                  const char *upload, size_t *upload_size, void **state);
    /* Frees what handle left in *state (not NULL) when the request ends. */
    void (*completed)(void **state);
    /* The path of route's page, percent-encoded (safe in an attribute). */
    void (*put_path)(FILE *f, const char *route);
} cli_metrics_pages_t;

/* Where and how the endpoint serves. */
typedef struct cli_metrics_opts {
    const char *listen;        /* HOST:PORT; NULL: no endpoint */
    int64_t stats_interval_us; /* 0: 5 s */
    /* PEM files: serve HTTPS with them (both or neither). */
    const char *tls_cert, *tls_key;
    /* HTTP basic authentication for every page but /healthz (a password
     * without a user is ignored). */
    const char *user, *password;
    const cli_metrics_pages_t *pages; /* NULL: none (/routes/ is a 404) */
    /* Where libmicrohttpd's own messages go, one line each at level
     * OUTBOX_LOG_DEBUG (any client can cause them); NULL: dropped. */
    void (*log)(int level, const char *line);
} cli_metrics_opts_t;

/* Checks what o names (the files readable, pairs complete) without
 * starting anything; a one-line reason in err on failure. */
int cli_metrics_opts_check(const cli_metrics_opts_t *o, char *err, size_t size);

/* Binds o->listen and starts serving and polling: 0, or -1 with *out NULL
 * and a one-line reason in err (no program name; the caller says whose). */
int cli_metrics_start(const cli_metrics_opts_t *o, const cli_metrics_route_t *routes, size_t n,
                      cli_metrics_t **out, char *err, size_t errlen);
/* The observe_ctx for route i (its observer is cli_metrics_observe). */
void *cli_metrics_route_ctx(cli_metrics_t *m, size_t i);
void cli_metrics_observe(void *ctx, const outbox_relay_observation_t *o);
void cli_metrics_stop(cli_metrics_t *m);

/* The span exporter's counters (outbox relay --otlp-endpoint), process-wide,
 * read at each scrape of /metrics through read(ctx, ...), which must be
 * safe from the server's thread. Without it the tracing series are absent. */
typedef struct cli_metrics_tracing {
    uint64_t exported, dropped_queue, dropped_export, dropped_rejected, export_failures;
} cli_metrics_tracing_t;
void cli_metrics_set_tracing(cli_metrics_t *m, void (*read)(void *ctx, cli_metrics_tracing_t *out),
                             void *ctx);

#endif
