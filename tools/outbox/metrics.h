/* outbox relay's metrics: the relays' observations aggregated per route,
 * a stats poller on store handles of its own, and an HTTP server with
 * /metrics (Prometheus text format), /healthz, /readyz and a status page. */
#ifndef OUTBOX_CLI_METRICS_H
#define OUTBOX_CLI_METRICS_H

#include <stddef.h>
#include <stdint.h>

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

/* Where and how the endpoint serves. */
typedef struct cli_metrics_opts {
    const char *listen;        /* HOST:PORT; NULL: no endpoint */
    int64_t stats_interval_us; /* 0: 5 s */
    /* PEM files: serve HTTPS with them (both or neither). */
    const char *tls_cert, *tls_key;
    /* HTTP basic authentication for every page but /healthz (a password
     * without a user is ignored). */
    const char *user, *password;
} cli_metrics_opts_t;

/* Checks what o names (the files readable, pairs complete) without
 * starting anything; a one-line reason in err on failure. */
int cli_metrics_opts_check(const cli_metrics_opts_t *o, char *err, size_t size);

/* Binds o->listen and starts serving and polling; on failure prints a
 * one-line error and returns the CLI exit status (*out NULL). */
int cli_metrics_start(const cli_metrics_opts_t *o, const cli_metrics_route_t *routes, size_t n,
                      cli_metrics_t **out);
/* The observe_ctx for route i (its observer is cli_metrics_observe). */
void *cli_metrics_route_ctx(cli_metrics_t *m, size_t i);
void cli_metrics_observe(void *ctx, const outbox_relay_observation_t *o);
void cli_metrics_stop(cli_metrics_t *m);

#endif
