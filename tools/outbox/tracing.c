/* outbox relay's tracing flags and the span exporter's life (tracing.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "otlp.h"
#include "tracing.h"

bool cli_tracing_option(cli_tracing_opts_t *o, int id, const char *v, bool *handled)
{
    char why[600];
    *handled = true;
    switch (id) {
    case OPT_OTLP_ENDPOINT:
        tool_note_secrets(v);
        if (otlp_endpoint_check(v, why, sizeof why) != 0) {
            cli_error("relay: --otlp-endpoint: %s", why);
            return false;
        }
        o->endpoint = v;
        return true;
    case OPT_TRACE_SAMPLE:
        if (otlp_sample_parse(v, &o->sample, why, sizeof why) != 0) {
            cli_error("relay: --trace-sample: %s", why);
            return false;
        }
        o->sample_given = true;
        return true;
    case OPT_TRACE_SERVICE_NAME:
        if (otlp_service_name_check(v, why, sizeof why) != 0) {
            cli_error("relay: --trace-service-name: %s", why);
            return false;
        }
        o->service_name = v;
        return true;
    default:
        *handled = false;
        return false;
    }
}

bool cli_tracing_check(const cli_tracing_opts_t *o)
{
    if (o->endpoint == NULL && (o->sample_given || o->service_name != NULL)) {
        cli_error("relay: %s needs --otlp-endpoint (the collector to send spans to)",
                  o->sample_given ? "--trace-sample" : "--trace-service-name");
        return false;
    }
    return true;
}

#ifdef OUTBOX_HAVE_TRACING

struct cli_tracing {
    otlp_exporter_t *e;
    double sample;
    const char *service_name;
};

int cli_tracing_start(const cli_tracing_opts_t *o, cli_tracing_t **out)
{
    *out = NULL;
    if (o->endpoint == NULL)
        return CLI_EXIT_OK;
    cli_tracing_t *t = calloc(1, sizeof *t);
    if (t == NULL)
        return cli_error("relay: out of memory");
    otlp_options_t eo = {.endpoint = o->endpoint, .sample = o->sample, .service_name = o->service_name};
    char err[600];
    if (otlp_start(&eo, &t->e, err, sizeof err) != 0) {
        free(t);
        return cli_error("relay: tracing: %s", err);
    }
    t->sample = o->sample;
    t->service_name = o->service_name ? o->service_name : OTLP_SERVICE_NAME_DEFAULT;
    *out = t;
    return CLI_EXIT_OK;
}

void cli_tracing_log_start(cli_tracing_t *t)
{
    if (t != NULL)
        cli_log(OUTBOX_LOG_INFO, "relay: tracing: spans to %s (OTLP/HTTP) as service %s, %g of the batches",
                otlp_endpoint_shown(t->e), t->service_name, t->sample);
}

const outbox_relay_tracer_t *cli_tracing_tracer(cli_tracing_t *t)
{
    return t ? otlp_tracer(t->e) : NULL;
}

static void read_counters(void *ctx, cli_metrics_tracing_t *out)
{
    otlp_counters_t c;
    otlp_counters(ctx, &c);
    *out = (cli_metrics_tracing_t){.exported = c.exported,
                                   .dropped_queue = c.dropped_queue,
                                   .dropped_export = c.dropped_export,
                                   .dropped_rejected = c.dropped_rejected,
                                   .export_failures = c.export_failures};
}

void cli_tracing_metrics(cli_tracing_t *t, cli_metrics_t *m)
{
    if (t != NULL && m != NULL)
        cli_metrics_set_tracing(m, read_counters, t->e);
}

void cli_tracing_stop(cli_tracing_t *t, bool ran)
{
    if (t == NULL)
        return;
    otlp_counters_t c;
    otlp_stop(t->e, &c);
    if (!ran) {
        free(t);
        return;
    }
    uint64_t dropped = c.dropped_queue + c.dropped_export + c.dropped_rejected;
    cli_log(dropped > 0 ? OUTBOX_LOG_WARN : OUTBOX_LOG_INFO,
            "relay: tracing: %" PRIu64 " spans exported, %" PRIu64 " dropped (queue full %" PRIu64
            ", export failed %" PRIu64 ", rejected by the collector %" PRIu64 "), %" PRIu64
            " failed exports",
            c.exported, dropped, c.dropped_queue, c.dropped_export, c.dropped_rejected, c.export_failures);
    free(t);
}

#else /* built without libcurl: the flags are checked, nothing exports */

int cli_tracing_start(const cli_tracing_opts_t *o, cli_tracing_t **out)
{
    *out = NULL;
    if (o->endpoint == NULL)
        return CLI_EXIT_OK;
    return cli_error("relay: tracing: this outbox was built without libcurl and cannot export spans "
                     "(install libcurl's development files and build again)");
}

const outbox_relay_tracer_t *cli_tracing_tracer(cli_tracing_t *t)
{
    (void)t;
    return NULL;
}

void cli_tracing_metrics(cli_tracing_t *t, cli_metrics_t *m)
{
    (void)t;
    (void)m;
}

void cli_tracing_log_start(cli_tracing_t *t)
{
    (void)t;
}

void cli_tracing_stop(cli_tracing_t *t, bool ran)
{
    (void)t;
    (void)ran;
}

#endif
