/* An OpenTelemetry span exporter for the relay: a tracer
 * (outbox_relay_tracer_t) that turns each published batch into one
 * "publish" span after the OpenTelemetry messaging conventions, and a
 * thread of its own that posts them to a collector as OTLP/HTTP with the
 * JSON encoding (POST <endpoint>/v1/traces, libcurl).
 *
 * The relay's side never waits: a finished span goes into a bounded queue
 * of records made at the start, or is dropped and counted when the queue
 * is full; the thread posts what is queued in batches, each POST with a
 * short timeout, and a batch whose POST fails is dropped and counted (no
 * retries: a collector that is down costs spans, never relay time).
 *
 * One exporter serves every relay of a process; its tracer may be called
 * from any number of threads at once. Used by the outbox CLI (outbox relay
 * --otlp-endpoint) and by outbox-bench; never part of liboutbox, which
 * stays free of libcurl. */
#ifndef OUTBOX_TOOLS_OTLP_H
#define OUTBOX_TOOLS_OTLP_H

#include <stddef.h>
#include <stdint.h>

#include <outbox/outbox.h>

typedef struct otlp_exporter otlp_exporter_t;

/* service.name when none is given. */
#define OTLP_SERVICE_NAME_DEFAULT "outbox-relay"

typedef struct otlp_options {
    const char *endpoint;     /* http:// or https:// base URL; spans go to <endpoint>/v1/traces */
    double sample;            /* share of batches traced, 0 to 1 (see otlp_sample_says) */
    const char *service_name; /* NULL: OTLP_SERVICE_NAME_DEFAULT */
    /* Tuning, 0 for the defaults below (tests shrink them). */
    size_t queue_max;         /* spans waiting for export at most (512) */
    int64_t timeout_us;       /* each POST, connection included (2 s) */
    int64_t interval_us;      /* the longest a span waits for its POST (200 ms) */
} otlp_options_t;

/* What the exporter has done since it started. */
typedef struct otlp_counters {
    uint64_t exported;          /* spans the collector accepted */
    uint64_t dropped_queue;     /* spans dropped because the queue was full */
    uint64_t dropped_export;    /* spans dropped because their POST failed */
    uint64_t dropped_rejected;  /* spans the collector said it rejected (partial success) */
    uint64_t export_failures;   /* POSTs that failed (no answer, or not 2xx) */
} otlp_counters_t;

/* ---------------------------------------------- checks (no libcurl) */

/* endpoint is an http:// or https:// URL with a host (an optional port
 * and path; no query or fragment). 0, or -1 with one line in err that
 * shows the URL with its password masked. */
int otlp_endpoint_check(const char *endpoint, char *err, size_t size);
/* text is a number from 0 to 1 ("0.25", "1", "1e-3"). 0 and *out, or -1
 * with one line in err. */
int otlp_sample_parse(const char *text, double *out, char *err, size_t size);
/* service.name: 1 to 255 bytes, no control characters. 0, or -1 with one
 * line in err. */
int otlp_service_name_check(const char *name, char *err, size_t size);

/* The sampling rule, exposed for tests: whether a batch of trace trace_id
 * is traced at ratio sample. A batch is traced when the trace id's last 8
 * bytes, read as a number, fall in the lowest `sample` share of their
 * range (OpenTelemetry's TraceIdRatioBased), so every component sampling
 * the same trace at the same ratio decides alike. */
int otlp_sample_says(double sample, const uint8_t trace_id[16]);

/* ------------------------------------------------------- the exporter */

/* Check o, make the queue and start the export thread. 0, or -1 with one
 * line in err (the endpoint masked). */
int otlp_start(const otlp_options_t *o, otlp_exporter_t **out, char *err, size_t size);
/* The tracer to put in outbox_relay_config_t.tracer; valid until
 * otlp_stop(). */
const outbox_relay_tracer_t *otlp_tracer(otlp_exporter_t *e);
/* Safe from any thread. */
void otlp_counters(otlp_exporter_t *e, otlp_counters_t *out);
/* The endpoint as it may be shown (its password masked). */
const char *otlp_endpoint_shown(const otlp_exporter_t *e);
/* Post what is queued (one more try, each POST with its timeout; what
 * fails is dropped and counted), stop the thread, fill *final (may be
 * NULL) with the counters as they end, and free. Every relay using the
 * tracer must be freed first. NULL is a no-op. */
void otlp_stop(otlp_exporter_t *e, otlp_counters_t *final);

#endif
