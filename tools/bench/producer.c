/* outbox-bench: what the producer ceilings share (sink URIs taken
 * apart), and the relay's share of the
 * resident set. The bare clients are ceiling_kafka.c, ceiling_nats.c,
 * ceiling_redis.c, ceiling_http.c and ceiling_amqp.c. */
#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>

#include "bench.h"

/* ------------------------------------------------------------ sink URIs */

static int hexv(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Percent-decodes s[0..n) into out; -1 when it does not fit. */
static int decode(const char *s, size_t n, char *out, size_t size)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%' && i + 2 < n && hexv(s[i + 1]) >= 0 && hexv(s[i + 2]) >= 0) {
            c = (char)(hexv(s[i + 1]) * 16 + hexv(s[i + 2]));
            i += 2;
        } else if (c == '+') {
            c = ' ';
        }
        if (w + 1 >= size)
            return -1;
        out[w++] = c;
    }
    out[w] = '\0';
    return 0;
}

/* The scheme, lowercased, of a URI that goes on with "://"; the rest
 * after it into *rest. */
static int parse_scheme(const char *uri, bench_sink_uri_t *u, const char **rest, char *err,
                        size_t errlen)
{
    const char *colon = strchr(uri, ':');
    if (!colon || colon == uri || (size_t)(colon - uri) >= sizeof u->scheme ||
        strncmp(colon, "://", 3) != 0) {
        snprintf(err, errlen, "--sink: expected scheme://host[:port]/..., got a URI without //");
        return BENCH_EXIT_USAGE;
    }
    for (const char *p = uri; p < colon; p++)
        u->scheme[p - uri] = (char)tolower((unsigned char)*p);
    *rest = colon + 3;
    return 0;
}

/* A port of digits from p to end, 1 to 65535. */
static int parse_port(const char *p, const char *end, bench_sink_uri_t *u, char *err,
                      size_t errlen)
{
    const char *start = p;
    long v = 0;
    for (; p < end && *p >= '0' && *p <= '9' && v < 70000; p++)
        v = v * 10 + (*p - '0');
    if (p != end || p == start || v < 1 || v > 65535) {
        snprintf(err, errlen, "--sink: bad port");
        return BENCH_EXIT_USAGE;
    }
    u->port = (int)v;
    return 0;
}

/* host[:port] or [v6]:port from a to end; credentials refused. */
static int parse_authority(const char *a, const char *end, bench_sink_uri_t *u, char *err,
                           size_t errlen)
{
    size_t alen = (size_t)(end - a);
    if (memchr(a, '@', alen)) {
        /* Credentials are the sink's business; the bare clients connect
         * without them. */
        snprintf(err, errlen,
                 "--sink: the producer ceiling connects without credentials; give a URI without "
                 "user or password");
        return BENCH_EXIT_USAGE;
    }
    const char *port = NULL;
    if (*a == '[') {
        const char *rb = memchr(a, ']', alen);
        if (!rb) {
            snprintf(err, errlen, "--sink: unterminated [ in the host");
            return BENCH_EXIT_USAGE;
        }
        snprintf(u->host, sizeof u->host, "%.*s", (int)(rb - a - 1), a + 1);
        port = rb + 1 < end && rb[1] == ':' ? rb + 2 : NULL;
    } else {
        const char *c = memchr(a, ':', alen);
        snprintf(u->host, sizeof u->host, "%.*s", (int)((c ? c : end) - a), a);
        port = c ? c + 1 : NULL;
    }
    return port ? parse_port(port, end, u, err, errlen) : 0;
}

/* One key[=value] of the query, seg bytes at q, percent-decoded. */
static int parse_param(const char *q, size_t seg, bench_sink_uri_t *u, char *err, size_t errlen)
{
    if (u->n_params == BENCH_URI_PARAMS) {
        snprintf(err, errlen, "--sink: more than %d parameters", BENCH_URI_PARAMS);
        return BENCH_EXIT_USAGE;
    }
    const char *eq = memchr(q, '=', seg);
    size_t kl = eq ? (size_t)(eq - q) : seg;
    if (decode(q, kl, u->key[u->n_params], sizeof u->key[0]) != 0 ||
        decode(eq ? eq + 1 : q + seg, eq ? seg - kl - 1 : 0, u->value[u->n_params],
               sizeof u->value[0]) != 0) {
        snprintf(err, errlen, "--sink: a parameter is too long");
        return BENCH_EXIT_USAGE;
    }
    u->n_params++;
    return 0;
}

/* The parameters of the query after '?', up to a '#'. */
static int parse_query(const char *q, bench_sink_uri_t *u, char *err, size_t errlen)
{
    while (*q && *q != '#') {
        size_t seg = strcspn(q, "&#");
        if (seg > 0) {
            int rc = parse_param(q, seg, u, err, errlen);
            if (rc != 0)
                return rc;
        }
        q += seg + (q[seg] == '&');
    }
    return 0;
}

int bench_sink_uri_parse(const char *uri, bench_sink_uri_t *u, char *err, size_t errlen)
{
    memset(u, 0, sizeof *u);
    const char *a = NULL;
    int rc = parse_scheme(uri, u, &a, err, errlen);
    if (rc != 0)
        return rc;
    const char *end = a + strcspn(a, "/?#");
    rc = parse_authority(a, end, u, err, errlen);
    if (rc != 0)
        return rc;
    const char *path = end;
    size_t plen = strcspn(path, "?#");
    if (plen > 0 && *path == '/') {
        path++;
        plen--;
    }
    if (decode(path, plen, u->path, sizeof u->path) != 0) {
        snprintf(err, errlen, "--sink: path too long");
        return BENCH_EXIT_USAGE;
    }
    return path[plen] == '?' ? parse_query(path + plen + 1, u, err, errlen) : 0;
}

void bench_sink_target(const bench_sink_uri_t *u, const char *destination, const char *route,
                       char *out, size_t size)
{
    const char *t = u->path[0] ? u->path : "{destination}";
    size_t w = 0;
    while (*t && w + 1 < size) {
        const char *with = NULL;
        size_t skip = 0;
        if (strncmp(t, "{destination}", 13) == 0)
            with = destination, skip = 13;
        else if (strncmp(t, "{route}", 7) == 0)
            with = route, skip = 7;
        if (with) {
            for (; *with && w + 1 < size; with++)
                out[w++] = *with;
            t += skip;
        } else {
            out[w++] = *t++;
        }
    }
    out[w] = '\0';
}

const bench_producer_t *bench_producer_for(const char *sink_uri)
{
    size_t n = strcspn(sink_uri, ":");
    if (sink_uri[n] != ':')
        return NULL;
#ifdef OUTBOX_BENCH_KAFKA
    if (n == 5 && strncasecmp(sink_uri, "kafka", 5) == 0)
        return &bench_kafka_producer;
#endif
#ifdef OUTBOX_BENCH_NATS
    if (n == 4 && strncasecmp(sink_uri, "nats", 4) == 0)
        return &bench_nats_producer;
#endif
#ifdef OUTBOX_BENCH_REDIS
    if (n == 5 && strncasecmp(sink_uri, "redis", 5) == 0)
        return &bench_redis_producer;
#endif
#ifdef OUTBOX_BENCH_HTTP
    if ((n == 4 && strncasecmp(sink_uri, "http", 4) == 0) ||
        (n == 5 && strncasecmp(sink_uri, "https", 5) == 0))
        return &bench_http_producer;
#endif
#ifdef OUTBOX_BENCH_AMQP
    if (n == 4 && strncasecmp(sink_uri, "amqp", 4) == 0)
        return &bench_amqp_producer;
#endif
    return NULL;
}

/* ------------------------------------------------------ resident set */

static long status_kb(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && line[n] == ':') {
            v = strtol(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

long bench_rss_kb(void)
{
    return status_kb("VmRSS");
}

long bench_hwm_kb(void)
{
    return status_kb("VmHWM");
}

/* The high-water marks a reset took away, so that bench_peak_rss_kb()
 * still reports the whole run's peak. */
static atomic_long hwm_before_resets;

long bench_peak_before_resets_kb(void)
{
    return atomic_load(&hwm_before_resets);
}

int bench_hwm_reset(void)
{
    long hwm = bench_hwm_kb();
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0 && ru.ru_maxrss > hwm)
        hwm = ru.ru_maxrss;
    if (hwm > atomic_load(&hwm_before_resets))
        atomic_store(&hwm_before_resets, hwm);
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f)
        return -1;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}
