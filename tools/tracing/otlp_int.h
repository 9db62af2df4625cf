/* What the exporter's files share: the span record (fixed size, so the
 * queue is made once and a relay thread never allocates), the queue, and
 * the functions one file calls in another. Calls go downward: otlp.c (the
 * exporter's life, its thread and the POSTs) -> otlp_span.c (the tracer:
 * sampling, ids, a batch into a record) and otlp_json.c (records into an
 * OTLP/JSON body) -> otlp_check.c (inputs, ids as text). */
#ifndef OUTBOX_TOOLS_OTLP_INT_H
#define OUTBOX_TOOLS_OTLP_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "otlp.h"

/* Links kept per span (OpenTelemetry's default link limit); the rest are
 * counted in the span's droppedLinksCount. */
#define OTLP_LINKS_MAX 128
#define OTLP_QUEUE_DEFAULT 512
/* Spans per POST at most: a full span with its links is about 25 KB of
 * JSON, so a POST stays well under a collector's usual 20 MiB limit. */
#define OTLP_POST_MAX 128
/* Post as soon as this many are waiting, without waiting out the interval. */
#define OTLP_POST_EARLY 64

typedef struct otlp_link {
    uint8_t trace_id[16], span_id[8];
    uint8_t flags;
    char event_id[64]; /* messaging.message.id; "" when too long to keep */
} otlp_link_t;

typedef struct otlp_span {
    uint8_t trace_id[16], span_id[8], parent_id[8];
    bool has_parent;
    int64_t start_us, end_us;
    char route[256];
    char destination[512];
    char system[32];
    char error[256];
    uint64_t n_messages, ok, retried, rejected, deferred, unsent;
    bool outage;
    size_t n_links;
    uint32_t dropped_links;
    otlp_link_t links[OTLP_LINKS_MAX];
} otlp_span_t;

/* A growing byte buffer for the JSON body. */
typedef struct otlp_buf {
    char *p;
    size_t len, cap;
    bool failed; /* an allocation failed: the body is incomplete */
} otlp_buf_t;

struct otlp_exporter {
    outbox_relay_tracer_t tracer;
    double sample;
    char *endpoint;   /* as given */
    char *url;        /* <endpoint>/v1/traces */
    char *shown;      /* endpoint, password masked */
    char *service_name;
    int64_t timeout_us, interval_us;
    /* The queue: every record made at the start; free[] holds the ones
     * not in use, ready[] (in order) the finished spans to post. A relay
     * thread takes a free record under mu, fills it outside, then puts it
     * in ready under mu. */
    otlp_span_t *records;
    size_t n_records;
    size_t *free_idx, n_free;
    size_t *ready_idx, ready_head, n_ready;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* the thread waits on it (CLOCK_MONOTONIC) */
    bool stopping;
    pthread_t thread;
    bool started;
    atomic_uint_fast64_t exported, dropped_queue, dropped_export, dropped_rejected, export_failures;
};

/* otlp_span.c: the tracer's two callbacks. */
int otlp_span_begin(void *ctx, const outbox_relay_span_t *s, char traceparent[OUTBOX_TRACEPARENT_LEN + 1],
                    void **span);
void otlp_span_end(void *ctx, const outbox_relay_span_t *s, void *span);

/* otlp.c: the queue, for otlp_span.c. A free record or NULL (the queue
 * is full: counted as dropped); then the filled record into ready. */
otlp_span_t *otlp_queue_take(otlp_exporter_t *e);
void otlp_queue_put(otlp_exporter_t *e, otlp_span_t *rec);

/* otlp_json.c: the ExportTraceServiceRequest for spans[0..n), appended
 * to b. */
void otlp_json_encode(const otlp_exporter_t *e, otlp_span_t *const *spans, size_t n, otlp_buf_t *b);
void otlp_buf_add(otlp_buf_t *b, const char *s, size_t len);

/* otlp_check.c: ids as text. */
/* Parse a W3C traceparent of version 00: 1 and its ids and flags, or 0. */
int otlp_traceparent_parse(const char *t, uint8_t trace_id[16], uint8_t span_id[8], uint8_t *flags);
/* Lower-case hex of n bytes into out (2n characters and a NUL). */
void otlp_hex(const uint8_t *bytes, size_t n, char *out);

#endif
