/* Span records as an OTLP ExportTraceServiceRequest in the JSON encoding
 * of OTLP/HTTP: field names in lowerCamelCase, trace and span ids as hex
 * strings (not base64), enums as numbers, 64-bit integers as strings. One
 * resource (service.name), one scope (liboutbox), the spans.
 *
 * Each span follows the OpenTelemetry messaging conventions for a publish
 * of a batch: name "publish <destination>", kind PRODUCER (its context is
 * what the messages carry), messaging.system, messaging.destination.name,
 * messaging.operation.name and .type "publish",
 * messaging.batch.message_count; then the outbox's own: the route and what
 * the sink said of the messages. Status ERROR with a description when any
 * message was rejected or retried. Links carry messaging.message.id. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "otlp_int.h"

#define SPAN_KIND_PRODUCER 4
#define STATUS_CODE_ERROR 2
/* Span and link flags: the W3C trace flags in the low byte, then "whether
 * the parent (the linked context) is remote is known" and "it is". */
#define FLAG_HAS_IS_REMOTE 0x100u
#define FLAG_IS_REMOTE 0x200u

void otlp_buf_add(otlp_buf_t *b, const char *s, size_t len)
{
    if (b->failed)
        return;
    if (b->len + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + len + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, len);
    b->len += len;
    b->p[b->len] = '\0';
}

static void add(otlp_buf_t *b, const char *s)
{
    otlp_buf_add(b, s, strlen(s));
}

static void addf(otlp_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void addf(otlp_buf_t *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        otlp_buf_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* The length of the valid UTF-8 sequence at p (0: not one). */
static size_t utf8_len(const unsigned char *p)
{
    if (p[0] < 0x80)
        return 1;
    size_t n = p[0] >= 0xc2 && p[0] <= 0xdf ? 2 : p[0] >= 0xe0 && p[0] <= 0xef ? 3
             : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    /* No overlong forms, surrogates or code points past U+10FFFF. */
    if ((n == 3 && p[0] == 0xe0 && p[1] < 0xa0) || (n == 3 && p[0] == 0xed && p[1] >= 0xa0) ||
        (n == 4 && p[0] == 0xf0 && p[1] < 0x90) || (n == 4 && p[0] == 0xf4 && p[1] >= 0x90))
        return 0;
    return n;
}

/* s as a JSON string, quotes included; a byte that is not UTF-8 becomes
 * U+FFFD, so one bad error text cannot make a collector refuse the POST. */
static void add_str(otlp_buf_t *b, const char *s)
{
    otlp_buf_add(b, "\"", 1);
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t n = utf8_len(p);
        if (n == 0) {
            add(b, "\\ufffd");
            p++;
        } else if (n > 1) {
            otlp_buf_add(b, (const char *)p, n);
            p += n;
        } else if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p};
            otlp_buf_add(b, esc, 2);
            p++;
        } else if (*p == '\n' || *p == '\t' || *p == '\r') {
            char esc[2] = {'\\', *p == '\n' ? 'n' : *p == '\t' ? 't' : 'r'};
            otlp_buf_add(b, esc, 2);
            p++;
        } else if (*p < 0x20 || *p == 0x7f) {
            addf(b, "\\u%04x", *p);
            p++;
        } else {
            const unsigned char *q = p;
            while (*q >= 0x20 && *q < 0x7f && *q != '"' && *q != '\\')
                q++;
            otlp_buf_add(b, (const char *)p, (size_t)(q - p));
            p = q;
        }
    }
    otlp_buf_add(b, "\"", 1);
}

/* Attributes, each preceded by a comma but the first (*first). */
static void attr_head(otlp_buf_t *b, int *first, const char *key)
{
    if (!*first)
        add(b, ",");
    *first = 0;
    add(b, "{\"key\":");
    add_str(b, key);
    add(b, ",\"value\":");
}

static void attr_str(otlp_buf_t *b, int *first, const char *key, const char *value)
{
    attr_head(b, first, key);
    add(b, "{\"stringValue\":");
    add_str(b, value);
    add(b, "}}");
}

static void attr_int(otlp_buf_t *b, int *first, const char *key, uint64_t value)
{
    attr_head(b, first, key);
    addf(b, "{\"intValue\":\"%" PRIu64 "\"}}", value);
}

static void attr_bool(otlp_buf_t *b, int *first, const char *key, bool value)
{
    attr_head(b, first, key);
    addf(b, "{\"boolValue\":%s}}", value ? "true" : "false");
}

static void add_uint(otlp_buf_t *b, unsigned v)
{
    char digits[12];
    size_t i = sizeof digits;
    do
        digits[--i] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    otlp_buf_add(b, digits + i, sizeof digits - i);
}

/* "field":"<hex>", without printf: a span with its links writes hundreds. */
static void add_id(otlp_buf_t *b, const char *field, const uint8_t *id, size_t n)
{
    char out[64];
    size_t flen = strlen(field), len = 0;
    out[len++] = '"';
    memcpy(out + len, field, flen);
    len += flen;
    memcpy(out + len, "\":\"", 3);
    len += 3;
    otlp_hex(id, n, out + len);
    len += 2 * n;
    out[len++] = '"';
    otlp_buf_add(b, out, len);
}

/* The status description: what failed, then the sink's first reason. */
static void status_text(const otlp_span_t *s, char *out, size_t size)
{
    char what[160] = "";
    size_t len = 0;
    if (s->rejected > 0)
        len += (size_t)snprintf(what + len, sizeof what - len, "%" PRIu64 " rejected", s->rejected);
    if (s->retried > 0 && len < sizeof what)
        len += (size_t)snprintf(what + len, sizeof what - len, "%s%" PRIu64 " retried", len ? ", " : "",
                                s->retried);
    snprintf(out, size, "%s of %" PRIu64 " messages%s%s%s", what, s->n_messages,
             s->outage ? " (the sink looked down)" : "", s->error[0] ? ": " : "", s->error);
}

static void encode_span(otlp_buf_t *b, const otlp_span_t *s)
{
    add(b, "{");
    add_id(b, "traceId", s->trace_id, 16);
    add(b, ",");
    add_id(b, "spanId", s->span_id, 8);
    if (s->has_parent) {
        add(b, ",");
        add_id(b, "parentSpanId", s->parent_id, 8);
    }
    /* Sampled, and whether the parent came from elsewhere: it always does. */
    addf(b, ",\"flags\":%u", 1u | (s->has_parent ? FLAG_HAS_IS_REMOTE | FLAG_IS_REMOTE : 0));
    add(b, ",\"name\":");
    char name[sizeof s->destination + 16];
    snprintf(name, sizeof name, "publish %s", s->destination);
    add_str(b, name);
    addf(b, ",\"kind\":%d", SPAN_KIND_PRODUCER);
    addf(b, ",\"startTimeUnixNano\":\"%" PRId64 "000\"", s->start_us);
    addf(b, ",\"endTimeUnixNano\":\"%" PRId64 "000\"", s->end_us > s->start_us ? s->end_us : s->start_us);
    add(b, ",\"attributes\":[");
    int first = 1;
    attr_str(b, &first, "messaging.system", s->system);
    attr_str(b, &first, "messaging.destination.name", s->destination);
    attr_str(b, &first, "messaging.operation.name", "publish");
    attr_str(b, &first, "messaging.operation.type", "publish");
    attr_int(b, &first, "messaging.batch.message_count", s->n_messages);
    attr_str(b, &first, "outbox.route", s->route);
    attr_int(b, &first, "outbox.messages.ok", s->ok);
    attr_int(b, &first, "outbox.messages.retried", s->retried);
    attr_int(b, &first, "outbox.messages.rejected", s->rejected);
    if (s->deferred > 0)
        attr_int(b, &first, "outbox.messages.deferred", s->deferred);
    if (s->unsent > 0)
        attr_int(b, &first, "outbox.messages.unsent", s->unsent);
    if (s->outage)
        attr_bool(b, &first, "outbox.sink_unavailable", true);
    bool failed = s->rejected > 0 || s->retried > 0;
    if (failed)
        attr_str(b, &first, "error.type", s->outage ? "sink_unavailable" : s->rejected > 0 ? "rejected" : "retried");
    add(b, "]");
    if (s->n_links > 0) {
        add(b, ",\"links\":[");
        for (size_t i = 0; i < s->n_links; i++) {
            const otlp_link_t *l = &s->links[i];
            add(b, i ? ",{" : "{");
            add_id(b, "traceId", l->trace_id, 16);
            add(b, ",");
            add_id(b, "spanId", l->span_id, 8);
            add(b, ",\"flags\":");
            add_uint(b, l->flags | FLAG_HAS_IS_REMOTE | FLAG_IS_REMOTE);
            if (l->event_id[0]) {
                add(b, ",\"attributes\":[");
                int lf = 1;
                attr_str(b, &lf, "messaging.message.id", l->event_id);
                add(b, "]");
            }
            add(b, "}");
        }
        add(b, "]");
    }
    if (s->dropped_links > 0)
        addf(b, ",\"droppedLinksCount\":%u", s->dropped_links);
    if (failed) {
        char text[512];
        status_text(s, text, sizeof text);
        addf(b, ",\"status\":{\"code\":%d,\"message\":", STATUS_CODE_ERROR);
        add_str(b, text);
        add(b, "}");
    }
    add(b, "}");
}

void otlp_json_encode(const otlp_exporter_t *e, otlp_span_t *const *spans, size_t n, otlp_buf_t *b)
{
    add(b, "{\"resourceSpans\":[{\"resource\":{\"attributes\":[");
    int first = 1;
    attr_str(b, &first, "service.name", e->service_name);
    attr_str(b, &first, "telemetry.sdk.name", "liboutbox");
    attr_str(b, &first, "telemetry.sdk.language", "c");
    attr_str(b, &first, "telemetry.sdk.version", outbox_version());
    add(b, "]},\"scopeSpans\":[{\"scope\":{\"name\":\"liboutbox\",\"version\":");
    add_str(b, outbox_version());
    add(b, "},\"spans\":[");
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            add(b, ",");
        encode_span(b, spans[i]);
    }
    add(b, "]}]}]}");
}
