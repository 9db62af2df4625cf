/* outbox relay's tracing: the --otlp-endpoint, --trace-sample and
 * --trace-service-name flags (or the config file's tracing: section), and
 * the span exporter of tools/tracing that they start, shared by every
 * route's relays, with its counters in /metrics and in the closing log. */
#ifndef OUTBOX_CLI_TRACING_H
#define OUTBOX_CLI_TRACING_H

#include <stdbool.h>

#include "metrics.h"

typedef struct cli_tracing_opts {
    const char *endpoint;     /* NULL: no tracing */
    double sample;            /* share of batches traced; 1 unless given */
    bool sample_given;
    const char *service_name; /* NULL: outbox-relay */
} cli_tracing_opts_t;

#define CLI_TRACING_OPTS_INIT {NULL, 1.0, false, NULL}

/* OPT_OTLP_ENDPOINT, OPT_TRACE_SAMPLE, OPT_TRACE_SERVICE_NAME into o; true
 * when id is one of them and its value is good, false after printing the
 * error (or when id is none of them: *handled says which). */
bool cli_tracing_option(cli_tracing_opts_t *o, int id, const char *value, bool *handled);
/* The options together: a sample or a service name needs an endpoint.
 * False after printing the error. */
bool cli_tracing_check(const cli_tracing_opts_t *o);

typedef struct cli_tracing cli_tracing_t;

/* Starts the exporter when o names an endpoint (*out NULL otherwise);
 * the CLI exit status, the error printed. */
int cli_tracing_start(const cli_tracing_opts_t *o, cli_tracing_t **out);
/* The tracer for outbox_relay_config_t.tracer (NULL for a NULL t). */
const outbox_relay_tracer_t *cli_tracing_tracer(cli_tracing_t *t);
/* Serve the exporter's counters in m's /metrics (either may be NULL). */
void cli_tracing_metrics(cli_tracing_t *t, cli_metrics_t *m);
/* The info line saying where spans go, once the routes are open (a start
 * that fails stays one line). NULL is a no-op. */
void cli_tracing_log_start(cli_tracing_t *t);
/* Posts what is queued and stops the exporter; when the relays ran, logs
 * what it did: an info line, a warning when spans were dropped. Every
 * relay using it must be freed, and the metrics stopped, first. NULL is a
 * no-op. */
void cli_tracing_stop(cli_tracing_t *t, bool ran);

#endif
