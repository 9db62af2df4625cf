/* The exporter's inputs (endpoint, ratio, service name), the sampling
 * rule, and trace ids as text. Nothing here needs libcurl or the queue:
 * the CLI's flag and config file checks call it too. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "otlp_int.h"

int otlp_endpoint_check(const char *endpoint, char *err, size_t size)
{
    char shown[512];
    outbox_uri_mask(endpoint, shown, sizeof shown);
    const char *rest = NULL;
    if (strncasecmp(endpoint, "http://", 7) == 0)
        rest = endpoint + 7;
    else if (strncasecmp(endpoint, "https://", 8) == 0)
        rest = endpoint + 8;
    if (rest == NULL) {
        snprintf(err, size, "\"%.200s\" is not an http:// or https:// URL (the collector's OTLP/HTTP "
                 "endpoint, such as http://127.0.0.1:4318)", shown);
        return -1;
    }
    size_t auth = strcspn(rest, "/?#");
    const char *at = memchr(rest, '@', auth);
    const char *host = at ? at + 1 : rest;
    size_t hlen = auth - (size_t)(host - rest);
    if (hlen == 0 || host[0] == ':') {
        snprintf(err, size, "\"%.200s\" has no host", shown);
        return -1;
    }
    for (const char *p = endpoint; *p; p++)
        if ((unsigned char)*p <= 0x20 || *p == 0x7f) {
            snprintf(err, size, "\"%.200s\" holds a space or a control character", shown);
            return -1;
        }
    if (rest[auth] == '?' || rest[auth] == '#' || strpbrk(rest + auth, "?#") != NULL) {
        snprintf(err, size, "\"%.200s\": a query or fragment has no place in the endpoint (its path "
                 "gets /v1/traces)", shown);
        return -1;
    }
    /* A port, when given, is a number 1..65535 (after a ]:
     * for [v6] hosts, else after the last colon). */
    const char *close = host[0] == '[' ? memchr(host, ']', hlen) : NULL;
    if (host[0] == '[' && close == NULL) {
        snprintf(err, size, "\"%.200s\": an IPv6 host needs its closing ]", shown);
        return -1;
    }
    const char *colon = NULL;
    if (close != NULL)
        colon = close + 1 < host + hlen && close[1] == ':' ? close + 1 : NULL;
    else
        for (const char *p = host; p < host + hlen; p++)
            if (*p == ':')
                colon = p;
    if (colon != NULL) {
        long port = 0;
        const char *p = colon + 1;
        size_t plen = (size_t)(host + hlen - p);
        for (size_t i = 0; i < plen; i++)
            port = isdigit((unsigned char)p[i]) && port < 100000 ? port * 10 + (p[i] - '0') : 100000;
        if (plen == 0 || port < 1 || port > 65535) {
            snprintf(err, size, "\"%.200s\": the port must be a number 1..65535", shown);
            return -1;
        }
    }
    return 0;
}

int otlp_sample_parse(const char *text, double *out, char *err, size_t size)
{
    char *end = NULL;
    errno = 0;
    double v = text[0] != '\0' && !isspace((unsigned char)text[0]) ? strtod(text, &end) : NAN;
    if (end == NULL || *end != '\0' || errno != 0 || isnan(v)) {
        snprintf(err, size, "\"%.40s\" is not a number (a share of batches from 0 to 1, such as 0.1)", text);
        return -1;
    }
    if (v < 0 || v > 1) {
        snprintf(err, size, "%.40s is outside 0 to 1 (the share of batches traced)", text);
        return -1;
    }
    *out = v;
    return 0;
}

int otlp_service_name_check(const char *name, char *err, size_t size)
{
    size_t n = strlen(name);
    if (n == 0 || n > 255) {
        snprintf(err, size, "the service name must be 1 to 255 bytes, not %zu", n);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f) {
            snprintf(err, size, "the service name holds a control character");
            return -1;
        }
    return 0;
}

int otlp_sample_says(double sample, const uint8_t trace_id[16])
{
    if (sample >= 1)
        return 1;
    if (sample <= 0)
        return 0;
    /* The last 8 bytes, as OpenTelemetry's TraceIdRatioBased reads them
     * (the W3C random part of a level-2 trace id is the last 7). */
    uint64_t x = 0;
    for (int i = 8; i < 16; i++)
        x = x << 8 | trace_id[i];
    x >>= 1; /* 63 bits: compared exactly in a double's range below */
    return (double)x < sample * 9223372036854775808.0;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static int unhex(const char *p, uint8_t *out, size_t n)
{
    int nonzero = 0;
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(p[2 * i]), lo = hexval(p[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return 0;
        out[i] = (uint8_t)(hi << 4 | lo);
        nonzero |= out[i];
    }
    return nonzero != 0;
}

int otlp_traceparent_parse(const char *t, uint8_t trace_id[16], uint8_t span_id[8], uint8_t *flags)
{
    if (t == NULL || strlen(t) != OUTBOX_TRACEPARENT_LEN || strncmp(t, "00-", 3) != 0 || t[35] != '-' ||
        t[52] != '-')
        return 0;
    uint8_t f;
    if (!unhex(t + 3, trace_id, 16) || !unhex(t + 36, span_id, 8))
        return 0;
    if (hexval(t[53]) < 0 || hexval(t[54]) < 0)
        return 0;
    f = (uint8_t)(hexval(t[53]) << 4 | hexval(t[54]));
    *flags = f;
    return 1;
}

void otlp_hex(const uint8_t *bytes, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}
