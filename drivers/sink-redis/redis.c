/* The redis: sink: Redis Streams through hiredis.
 *
 *   redis://[[user]:password@]host[:port][/DB][/STREAM_TEMPLATE][?name=value&...]
 *
 * A first path segment of digits only is the database number (SELECT);
 * the rest of the path is the stream key template ("{route}",
 * "{destination}"; none = the relay's destination). Each message is one
 * XADD of the payload under "data" and the CloudEvents attributes under
 * their own names; OK means the server answered with the entry's id.
 * rediss:// (TLS) is not supported: hiredis 0.14 has no TLS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_int.h"
#include "outbox/version.h"

const outbox_host_t *outbox_redis_host;

static int redis_init(const outbox_host_t *h, outbox_diag_t *d)
{
    (void)d;
    outbox_redis_host = h;
    return OUTBOX_OK;
}

/* ------------------------------------------------------------ options */

static const char *const known_params[] = {
    "timeout", "maxlen", "max_bytes", "password_env", "user_env", NULL,
};

/* "500ms", "10s", "2m", "1h" -> milliseconds (1ms to 24h). */
static int parse_duration_ms(const char *text, int64_t *ms)
{
    const char *p = text;
    int64_t v = 0;
    if (*p < '0' || *p > '9')
        return -1;
    while (*p >= '0' && *p <= '9') {
        if (v > INT64_C(1) << 40)
            return -1;
        v = v * 10 + (*p++ - '0');
    }
    int64_t mult;
    if (strcmp(p, "ms") == 0)
        mult = 1;
    else if (strcmp(p, "s") == 0)
        mult = 1000;
    else if (strcmp(p, "m") == 0)
        mult = 60000;
    else if (strcmp(p, "h") == 0)
        mult = 3600000;
    else
        return -1;
    if (v * mult < 1 || v * mult > INT64_C(86400000))
        return -1;
    *ms = v * mult;
    return 0;
}

/* Decimal digits only, at most max. */
static int parse_count(const char *text, long long max, long long *out)
{
    long long v = 0;
    if (text == NULL || *text == '\0')
        return -1;
    for (const char *p = text; *p; p++) {
        if (*p < '0' || *p > '9' || v > max / 10)
            return -1;
        v = v * 10 + (*p - '0');
    }
    if (v > max)
        return -1;
    *out = v;
    return 0;
}

static int dup_into(char **dst, const char *src, outbox_diag_t *d)
{
    outbox_redis_host->free(*dst);
    *dst = src ? outbox_kit_strdup(outbox_redis_host, src) : NULL;
    if (src && !*dst)
        return outbox_redis_host->error(d, OUTBOX_ENOMEM, "out of memory opening the Redis sink");
    return OUTBOX_OK;
}

/* The value of the environment variable a *_env option names. */
static int from_env(const char *option, const char *var, const char *shown, char **dst,
                    outbox_diag_t *d)
{
    if (var == NULL)
        return OUTBOX_OK;
    const char *v = getenv(var);
    if (v == NULL || v[0] == '\0')
        return outbox_redis_host->error(d, OUTBOX_EINVAL,
                                        "Redis sink %s: %s names environment variable %s, which "
                                        "is not set or empty",
                                        shown, option, var);
    return dup_into(dst, v, d);
}

/* The path: [/DB][/STREAM_TEMPLATE]. */
static int parse_path(const char *path, redis_sink_t *h, outbox_diag_t *d)
{
    const char *p = path ? path : "";
    if (*p == '/')
        p++;
    size_t seg = strcspn(p, "/");
    size_t digits = strspn(p, "0123456789");
    h->cfg.db = 0;
    if (seg > 0 && digits == seg) {
        char num[16];
        long long db = 0;
        snprintf(num, sizeof num, "%.*s", (int)(seg < 10 ? seg : 10), p);
        if (seg > 9 || parse_count(num, 999999999, &db) != 0)
            return outbox_redis_host->error(d, OUTBOX_EINVAL,
                                            "Redis sink %s: database number %s is too large",
                                            h->shown, num);
        h->cfg.db = (long)db;
        p += seg;
        if (*p == '/')
            p++;
    }
    return dup_into(&h->stream_tpl, p, d);
}

static int parse_uri(const outbox_uri_t *uri, redis_sink_t *h, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_redis_host;
    const char *shown = h->shown;
    redis_config_t *c = &h->cfg;

    if (uri->scheme != NULL && strcmp(uri->scheme, "rediss") == 0)
        return host->error(d, OUTBOX_ENOTSUP,
                           "Redis sink %s: rediss:// (TLS) is not supported: the hiredis 0.14 "
                           "this sink is built with has no TLS",
                           shown);
    const char *unknown = outbox_uri_unknown(uri, known_params);
    if (unknown)
        return host->error(d, OUTBOX_EINVAL,
                           "Redis sink %s: unknown parameter %s (known: timeout, maxlen, "
                           "max_bytes, password_env, user_env)",
                           shown, unknown);
    if (uri->raw == NULL || strncmp(uri->raw + strlen(uri->scheme), "://", 3) != 0 ||
        uri->host == NULL || uri->host[0] == '\0')
        return host->error(d, OUTBOX_EINVAL,
                           "Redis sink %s names no server: use redis://host:port/STREAM", shown);
    if (strchr(uri->host, ',') != NULL)
        return host->error(d, OUTBOX_EINVAL,
                           "Redis sink %s: one server only (Redis Cluster and Sentinel are not "
                           "supported)",
                           shown);

    const char *v = outbox_uri_get(uri, "timeout");
    c->timeout_ms = 10000;
    if (v && parse_duration_ms(v, &c->timeout_ms) != 0)
        return host->error(d, OUTBOX_EINVAL,
                           "Redis sink %s: timeout=%s is not a duration from 1ms to 24h "
                           "(e.g. 500ms, 10s, 2m)",
                           shown, v);
    v = outbox_uri_get(uri, "maxlen");
    h->maxlen = 0;
    if (v && (parse_count(v, INT64_C(1) << 50, &h->maxlen) != 0 || h->maxlen < 1))
        return host->error(d, OUTBOX_EINVAL,
                           "Redis sink %s: maxlen=%s is not a number of entries of 1 or more", shown,
                           v);
    snprintf(h->maxlen_text, sizeof h->maxlen_text, "%lld", h->maxlen);
    v = outbox_uri_get(uri, "max_bytes");
    long long mb = 1 << 20;
    if (v && (parse_count(v, 512LL << 20, &mb) != 0 || mb < 1))
        return host->error(d, OUTBOX_EINVAL,
                           "Redis sink %s: max_bytes=%s is not a size in bytes from 1 to "
                           "536870912 (512 MiB, the server's largest string)",
                           shown, v);
    h->max_bytes = (size_t)mb;

    int rc = dup_into(&c->host, uri->host, d);
    c->port = uri->port > 0 ? uri->port : 6379;
    if (rc == OUTBOX_OK)
        rc = dup_into(&c->user, uri->user && uri->user[0] ? uri->user : NULL, d);
    if (rc == OUTBOX_OK)
        rc = dup_into(&c->password, uri->password && uri->password[0] ? uri->password : NULL, d);
    if (rc == OUTBOX_OK)
        rc = from_env("user_env", outbox_uri_get(uri, "user_env"), shown, &c->user, d);
    if (rc == OUTBOX_OK)
        rc = from_env("password_env", outbox_uri_get(uri, "password_env"), shown, &c->password, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (c->user && !c->password)
        return host->error(d, OUTBOX_EINVAL,
                           "Redis sink %s: user %s has no password (redis://user:password@host)",
                           shown, c->user);
    return parse_path(uri->path, h, d);
}

/* --------------------------------------------------------- open/close */

static void redis_close(void *handle)
{
    redis_sink_t *h = handle;
    if (h == NULL)
        return;
    redisFree(h->c);
    outbox_redis_config_free(&h->cfg);
    outbox_redis_host->free(h->stream_tpl);
    outbox_buf_free(&h->out);
    outbox_redis_host->free(h);
}

static int redis_open(const outbox_sink_open_t *params, void **handle, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_redis_host;
    *handle = NULL;
    redis_sink_t *h = host->alloc(sizeof *h);
    if (h == NULL)
        return host->error(d, OUTBOX_ENOMEM, "out of memory opening the Redis sink");
    memset(h, 0, sizeof *h);
    outbox_buf_init(&h->out, host);
    outbox_uri_show(params->uri, h->shown, sizeof h->shown);

    int rc = parse_uri(params->uri, h, d);
    if (rc == OUTBOX_OK) {
        /* A server that is down (or not ready) is no reason to fail: the
         * first publish connects, and gives RETRY until it can. A server
         * that refuses the password or the database is. */
        outbox_diag_t quiet = {0};
        rc = outbox_redis_connect(&h->cfg, h->shown, &h->c, &quiet);
        h->was_connected = rc == OUTBOX_OK;
        if (rc == OUTBOX_ETRANSIENT)
            rc = OUTBOX_OK;
        else if (rc != OUTBOX_OK)
            rc = host->error(d, rc, "%s", quiet.message);
    }
    if (rc != OUTBOX_OK) {
        redis_close(h);
        return rc;
    }
    *handle = h;
    return OUTBOX_OK;
}

/* --------------------------------------------------------- descriptor */

static const char *const redis_schemes[] = {"redis", "rediss", NULL};

static const outbox_sink_vtable_t redis_vtable = {
    .struct_size = sizeof(outbox_sink_vtable_t),
    .open = redis_open,
    .close = redis_close,
    .publish = outbox_redis_publish,
    .destination_create = outbox_redis_destination_create,
    .destination_drop = outbox_redis_destination_drop,
    .reader_open = outbox_redis_reader_open,
    .reader_next = outbox_redis_reader_next,
    .reader_close = outbox_redis_reader_close,
};

static const outbox_driver_t redis_driver = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = OUTBOX_ABI_MAJOR,
    .abi_minor = OUTBOX_ABI_MINOR,
    .kind = OUTBOX_DRIVER_SINK,
    .name = REDIS_SINK_NAME,
    .version = OUTBOX_VERSION,
    .schemes = redis_schemes,
    .capabilities = OUTBOX_SINK_CAP_ORDERED,
    .init = redis_init,
    .sink = &redis_vtable,
};

OUTBOX_DRIVER_ENTRY(redis_driver)
