/* The outbox command-line tool: the relay's configuration file (YAML, read
 * with libyaml). One file declares named stores and sinks and the routes
 * that join them; `outbox config check` validates it and `outbox relay
 * --config` will run it.
 *
 *   node_key: relay-a                 # optional
 *   checkpoint_table: outbox_ckpt     # optional
 *   stores:
 *     main: {uri: "postgresql://outbox@db/app", relation: outbox}
 *   sinks:
 *     bus: {uri: "kafka://k1:9092/{destination}"}
 *   routes:
 *     orders: {store: main, sink: bus, batch: 100, workers: 2}
 *
 * Every scalar may hold ${NAME}, replaced by the environment variable NAME
 * (a missing one is an error); $$ is a literal $.
 */
#ifndef OUTBOX_CLI_CONFIG_H
#define OUTBOX_CLI_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "outbox/outbox.h"

typedef struct cli_config_store {
    char *name;
    char *uri;
    char *relation; /* NULL: the library's default */
    int line;
} cli_config_store_t;

typedef struct cli_config_sink {
    char *name;
    char *uri;
    int line;
} cli_config_sink_t;

typedef struct cli_config_route {
    char *name;
    size_t store; /* index into stores */
    size_t sink;  /* index into sinks */
    outbox_relay_config_t relay; /* route, source and destination point into this route */
    char *source;
    char *destination;
    size_t workers;
    int require_transaction;
    int64_t retention_us;      /* 0: keep published rows; else purge those older */
    int64_t purge_interval_us; /* how often the purge runs (default 1 minute) */
    int line;
} cli_config_route_t;

#define CONFIG_PURGE_INTERVAL_US (60 * INT64_C(1000000))

typedef struct cli_config {
    char *path;
    char *node_key;         /* NULL when not given */
    char *checkpoint_table; /* NULL when not given */
    cli_config_store_t *stores;
    size_t n_stores;
    cli_config_sink_t *sinks;
    size_t n_sinks;
    cli_config_route_t *routes;
    size_t n_routes;
    /* metrics: {listen: "HOST:PORT", stats_interval: 5s, tls_cert, tls_key,
     * user, password} (listen NULL: none) */
    char *metrics_listen;
    int64_t metrics_stats_interval_us;
    char *metrics_tls_cert, *metrics_tls_key, *metrics_user, *metrics_password;
    /* tracing: {otlp_endpoint: URL, sample: 0..1, service_name: NAME}
     * (otlp_endpoint NULL: none; sample 1 unless given) */
    char *tracing_endpoint;
    double tracing_sample;
    int tracing_sample_given;
    char *tracing_service_name;
} cli_config_t;

/* Reads and checks path. On failure returns OUTBOX_EINVAL (or OUTBOX_ENOMEM)
 * with one line in err, "PATH:LINE: problem" (or "PATH: problem" when no line
 * applies), and leaves *out empty. The URIs are checked as URIs here; whether
 * a driver serves them is found when they are opened. */
int cli_config_load(const char *path, cli_config_t *out, char *err, size_t errlen);
void cli_config_free(cli_config_t *c);

#endif
