/* The redis: sink: Redis Streams through hiredis.
 *
 *   redis://[[user]:password@]host[:port][/DB][/STREAM_TEMPLATE][?name=value&...]
 *
 * A first path segment of digits only is the database number (SELECT);
 * the rest of the path is the stream key template ("{route}",
 * "{destination}"; none = the relay's destination). Each message is one
 * XADD of the payload under "data" and the CloudEvents attributes under
 * their own names; OK means the server answered with the entry's id (and,
 * with wait_replicas=N, that N replicas have it too: WAIT). With
 * sentinel=NAME the hosts are Sentinels, asked for NAME's master at every
 * (re)connection.
 * rediss:// (TLS) is not supported: hiredis 0.14 has no TLS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_int.h"
#include "outbox/version.h"

const outbox_host_t *outbox_redis_host;

#ifdef OUTBOX_DRIVER_STATIC
_Thread_local redis_sink_t *outbox_redis_opened;
#endif

static int redis_init(const outbox_host_t *h, outbox_diag_t *d)
{
    (void)d;
    outbox_redis_host = h;
    return OUTBOX_OK;
}

/* ------------------------------------------------------------ options */

static const char *const known_params[] = {
    "timeout", "maxlen", "max_bytes", "password_env", "user_env", "sentinel", "wait_replicas",
    "wait_timeout", NULL,
};

#define LABEL "Redis sink"
#define MS INT64_C(1000)
#define DAY (INT64_C(86400) * 1000000)

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
        snprintf(num, sizeof num, "%.*s", (int)(seg < 10 ? seg : 10), p);
        if (seg > 9)
            return outbox_redis_host->error(d, OUTBOX_EINVAL,
                                            "Redis sink %s: database number %s is too large",
                                            h->shown, num);
        h->cfg.db = strtol(num, NULL, 10); /* nine digits at most */
        p += seg;
        if (*p == '/')
            p++;
    }
    h->stream_tpl = outbox_kit_strdup(outbox_redis_host, p);
    if (h->stream_tpl == NULL)
        return outbox_redis_host->error(d, OUTBOX_ENOMEM, "out of memory opening the Redis sink");
    return OUTBOX_OK;
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
    const char *unknown = outbox_kit_uri_unknown(uri, known_params);
    if (unknown)
        return host->error(d, OUTBOX_EINVAL,
                           "Redis sink %s: unknown parameter %s (known: timeout, maxlen, "
                           "max_bytes, password_env, user_env, sentinel, wait_replicas, "
                           "wait_timeout)",
                           shown, unknown);
    if (uri->raw == NULL || strncmp(uri->raw + strlen(uri->scheme), "://", 3) != 0 ||
        uri->host == NULL || uri->host[0] == '\0')
        return host->error(d, OUTBOX_EINVAL,
                           "Redis sink %s names no server: use redis://host:port/STREAM", shown);
    const char *master = outbox_kit_uri_get(uri, "sentinel");
    if (master != NULL && master[0] == '\0')
        return host->error(d, OUTBOX_EINVAL,
                           "Redis sink %s: sentinel= needs the name the Sentinels monitor the master "
                           "under (sentinel=mymaster)",
                           shown);
    if (master == NULL && strchr(uri->host, ',') != NULL)
        return host->error(d, OUTBOX_EINVAL,
                           "Redis sink %s: several hosts are Sentinels and need sentinel=NAME "
                           "(Redis Cluster is not supported)",
                           shown);

    int64_t timeout_us = 10000 * MS, maxlen = 0, max_bytes = 1 << 20, wait_replicas = 0;
    int64_t wait_timeout_us = 1000 * MS;
    int rc = outbox_kit_opt_duration(host, uri, LABEL, "timeout", MS, DAY, &timeout_us, d);
    if (rc == OUTBOX_OK)
        rc = outbox_kit_opt_int(host, uri, LABEL, "wait_replicas", 0, 1000, &wait_replicas, d);
    if (rc == OUTBOX_OK)
        rc = outbox_kit_opt_duration(host, uri, LABEL, "wait_timeout", MS, DAY, &wait_timeout_us, d);
    if (rc == OUTBOX_OK)
        rc = outbox_kit_opt_int(host, uri, LABEL, "maxlen", 1, INT64_C(1) << 50, &maxlen, d);
    /* 512 MiB: the server's largest string. */
    if (rc == OUTBOX_OK)
        rc = outbox_kit_opt_int(host, uri, LABEL, "max_bytes", 1, 512 << 20, &max_bytes, d);
    /* The URI's user and password unless user_env and password_env name
     * others. */
    const char *user = uri->user && uri->user[0] ? uri->user : NULL;
    const char *password = uri->password && uri->password[0] ? uri->password : NULL;
    if (rc == OUTBOX_OK)
        rc = outbox_kit_opt_secret(host, uri, LABEL, "user", &user, d);
    if (rc == OUTBOX_OK)
        rc = outbox_kit_opt_secret(host, uri, LABEL, "password", &password, d);
    if (rc != OUTBOX_OK)
        return rc;
    c->timeout_ms = timeout_us / 1000;
    h->wait_replicas = (long)wait_replicas;
    h->wait_timeout_ms = wait_timeout_us / 1000;
    h->maxlen = maxlen;
    snprintf(h->maxlen_text, sizeof h->maxlen_text, "%lld", h->maxlen);
    h->max_bytes = (size_t)max_bytes;
    if (user && !password)
        return host->error(d, OUTBOX_EINVAL,
                           "Redis sink %s: user %s has no password (redis://user:password@host)",
                           shown, user);
    c->port = uri->port > 0 ? uri->port : master != NULL ? 26379 : 6379;
    c->host = outbox_kit_strdup(host, uri->host);
    if (master != NULL) {
        /* The Sentinels: the URI's host list as it stands, or its one host
         * with the port (26379, Sentinel's, when left out). */
        outbox_kit_buf_t b;
        outbox_kit_buf_init(&b, host);
        if (strchr(uri->host, ',') != NULL)
            outbox_kit_buf_puts(&b, uri->host);
        else
            outbox_kit_buf_printf(&b, "%s:%d", uri->host, c->port);
        c->sentinels = b.failed ? NULL : outbox_kit_buf_steal(&b);
        outbox_kit_buf_free(&b);
        c->master = outbox_kit_strdup(host, master);
        if (c->sentinels == NULL || c->master == NULL)
            return host->error(d, OUTBOX_ENOMEM, "out of memory opening the Redis sink");
    }
    c->user = user ? outbox_kit_strdup(host, user) : NULL;
    c->password = password ? outbox_kit_strdup(host, password) : NULL;
    if (c->host == NULL || (user && !c->user) || (password && !c->password))
        return host->error(d, OUTBOX_ENOMEM, "out of memory opening the Redis sink");
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
    outbox_kit_buf_free(&h->out);
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
    outbox_kit_buf_init(&h->out, host);
    outbox_kit_uri_show(host, params->uri, h->shown, sizeof h->shown);
    h->cfg.redactor = outbox_kit_redactor_new(host, params->uri);

    int rc = h->cfg.redactor != NULL
                 ? parse_uri(params->uri, h, d)
                 : host->error(d, OUTBOX_ENOMEM, "out of memory opening the Redis sink");
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
#ifdef OUTBOX_DRIVER_STATIC
    outbox_redis_opened = h;
#endif
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
    .abi_minor = 2, /* the lowest it relies on: the reader entries of 1.2 */
    .kind = OUTBOX_DRIVER_SINK,
    .name = REDIS_SINK_NAME,
    .version = OUTBOX_VERSION,
    .schemes = redis_schemes,
    .capabilities = OUTBOX_SINK_CAP_ORDERED,
    .init = redis_init,
    .sink = &redis_vtable,
};

OUTBOX_DRIVER_ENTRY(redis_driver)
