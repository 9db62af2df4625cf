/* The nats: sink: JetStream publish through libnats.
 *
 *   nats://[user:password@]host[:port][/SUBJECT_TEMPLATE][?name=value&...]
 *
 * The path is the subject template ("{route}", "{destination}"; none =
 * the relay's destination). Each message is one JetStream publish with
 * Nats-Msg-Id = event_id, so the stream drops a second copy within its
 * duplicate window, and the CloudEvents attributes as "ce-<name>" headers
 * (traceparent under its own name). OK means the PubAck came.
 *
 * libnats keeps global state (threads, timers) that nats_Close() tears
 * down. The host may use libnats itself, so the driver never calls it:
 * the library stays open until the process ends, as drivers stay loaded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nats_int.h"
#include "outbox/version.h"

const outbox_host_t *outbox_nats_host;

static int nats_init(const outbox_host_t *h, outbox_diag_t *d)
{
    (void)d;
    outbox_nats_host = h;
    return OUTBOX_OK;
}

/* ------------------------------------------------------------ options */

static const char *const known_params[] = {
    "timeout", "connect_timeout", "reconnect_wait", "name", "servers", "token", "token_env",
    "user_env", "password_env", "tls", "tls_ca", "tls_cert", "tls_key", NULL,
};

/* "500ms", "10s", "2m", "250us", "1h" -> milliseconds (at least 1). */
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
    int64_t us;
    if (strcmp(p, "us") == 0)
        us = v;
    else if (strcmp(p, "ms") == 0)
        us = v * 1000;
    else if (strcmp(p, "s") == 0)
        us = v * 1000000;
    else if (strcmp(p, "m") == 0)
        us = v * 60000000;
    else if (strcmp(p, "h") == 0)
        us = v * 3600000000;
    else
        return -1;
    if (us < 1000 || us > INT64_C(86400) * 1000000)
        return -1;
    *ms = us / 1000;
    return 0;
}

static int dup_into(char **dst, const char *src, outbox_diag_t *d)
{
    *dst = src ? outbox_kit_strdup(outbox_nats_host, src) : NULL;
    if (src && !*dst)
        return outbox_nats_host->error(d, OUTBOX_ENOMEM, "out of memory opening the NATS sink");
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
        return outbox_nats_host->error(d, OUTBOX_EINVAL,
                                       "NATS sink %s: %s names environment variable %s, which "
                                       "is not set or empty",
                                       shown, option, var);
    outbox_nats_host->free(*dst);
    return dup_into(dst, v, d);
}

static int add_server(nats_config_t *c, const char *hostport, bool tls, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_nats_host;
    char **grown = host->realloc(c->servers, (c->n_servers + 1) * sizeof *grown);
    if (grown == NULL)
        return host->error(d, OUTBOX_ENOMEM, "out of memory opening the NATS sink");
    c->servers = grown;
    outbox_buf_t b;
    outbox_buf_init(&b, host);
    outbox_buf_printf(&b, "%s://%s", tls ? "tls" : "nats", hostport);
    c->servers[c->n_servers] = outbox_buf_steal(&b);
    if (c->servers[c->n_servers] == NULL)
        return host->error(d, OUTBOX_ENOMEM, "out of memory opening the NATS sink");
    c->n_servers++;
    return OUTBOX_OK;
}

/* host:port,host:port: the servers of a cluster, from the URI's authority
 * or its servers= parameter (more of them). */
static int add_servers(nats_config_t *c, const char *list, const char *shown, outbox_diag_t *d)
{
    const char *p = list;
    while (*p) {
        size_t n = strcspn(p, ",");
        char one[300];
        if (n == 0 || n >= sizeof one || memchr(p, '/', n) || memchr(p, '@', n) ||
            memchr(p, ' ', n))
            return outbox_nats_host->error(d, OUTBOX_EINVAL,
                                           "NATS sink %s: the servers are host:port[,host:port...]",
                                           shown);
        memcpy(one, p, n);
        one[n] = '\0';
        if (!strchr(one, ':') || one[n - 1] == ':')
            return outbox_nats_host->error(d, OUTBOX_EINVAL,
                                           "NATS sink %s: server %s in the list has no port",
                                           shown, one);
        int rc = add_server(c, one, c->tls, d);
        if (rc != OUTBOX_OK)
            return rc;
        p += n;
        if (*p == ',')
            p++;
    }
    return OUTBOX_OK;
}

static int parse_bool(const char *v, bool *out)
{
    if (strcmp(v, "1") == 0 || strcmp(v, "true") == 0 || strcmp(v, "yes") == 0)
        *out = true;
    else if (strcmp(v, "0") == 0 || strcmp(v, "false") == 0 || strcmp(v, "no") == 0)
        *out = false;
    else
        return -1;
    return 0;
}

static int parse_uri(const outbox_uri_t *uri, nats_sink_t *h, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_nats_host;
    const char *shown = h->shown;
    nats_config_t *c = &h->cfg;

    const char *unknown = outbox_uri_unknown(uri, known_params);
    if (unknown)
        return host->error(d, OUTBOX_EINVAL,
                           "NATS sink %s: unknown parameter %s (known: timeout, connect_timeout, "
                           "reconnect_wait, name, servers, token, token_env, user_env, "
                           "password_env, tls, tls_ca, tls_cert, tls_key)",
                           shown, unknown);
    if (uri->raw == NULL || strncmp(uri->raw + strlen(uri->scheme), "://", 3) != 0 ||
        uri->host == NULL || uri->host[0] == '\0')
        return host->error(d, OUTBOX_EINVAL,
                           "NATS sink %s names no server: use nats://host:port/SUBJECT", shown);

    struct {
        const char *name;
        int64_t *dst;
        int64_t dflt;
    } durations[] = {
        {"timeout", &h->timeout_ms, 10000},
        {"connect_timeout", &c->connect_timeout_ms, 2000},
        {"reconnect_wait", &c->reconnect_wait_ms, 250},
    };
    for (size_t i = 0; i < sizeof durations / sizeof durations[0]; i++) {
        const char *v = outbox_uri_get(uri, durations[i].name);
        *durations[i].dst = durations[i].dflt;
        if (v && parse_duration_ms(v, durations[i].dst) != 0)
            return host->error(d, OUTBOX_EINVAL,
                               "NATS sink %s: %s=%s is not a duration from 1ms to 24h "
                               "(e.g. 500ms, 10s, 2m)",
                               shown, durations[i].name, v);
    }
    const char *tls = outbox_uri_get(uri, "tls");
    if (tls && parse_bool(tls, &c->tls) != 0)
        return host->error(d, OUTBOX_EINVAL, "NATS sink %s: tls=%s is not 0 or 1", shown, tls);
    int rc = OUTBOX_OK;
    if (rc == OUTBOX_OK)
        rc = dup_into(&c->tls_ca, outbox_uri_get(uri, "tls_ca"), d);
    if (rc == OUTBOX_OK)
        rc = dup_into(&c->tls_cert, outbox_uri_get(uri, "tls_cert"), d);
    if (rc == OUTBOX_OK)
        rc = dup_into(&c->tls_key, outbox_uri_get(uri, "tls_key"), d);
    if (rc != OUTBOX_OK)
        return rc;
    if (c->tls_ca || c->tls_cert || c->tls_key)
        c->tls = true;
    if (!c->tls_cert != !c->tls_key)
        return host->error(d, OUTBOX_EINVAL,
                           "NATS sink %s: tls_cert and tls_key go together (a client "
                           "certificate and its key)",
                           shown);

    if (strchr(uri->host, ',') != NULL) {
        /* nats://h1:4222,h2:4222/...: the host then holds the list. */
        rc = add_servers(c, uri->host, shown, d);
    } else {
        char hostport[300];
        bool v6 = strchr(uri->host, ':') != NULL;
        snprintf(hostport, sizeof hostport, "%s%s%s:%d", v6 ? "[" : "", uri->host,
                 v6 ? "]" : "", uri->port > 0 ? uri->port : 4222);
        rc = add_server(c, hostport, c->tls, d);
    }
    const char *more = outbox_uri_get(uri, "servers");
    if (rc == OUTBOX_OK && more)
        rc = add_servers(c, more, shown, d);

    if (rc == OUTBOX_OK)
        rc = dup_into(&c->user, uri->user && uri->user[0] ? uri->user : NULL, d);
    if (rc == OUTBOX_OK)
        rc = dup_into(&c->password, uri->password, d);
    if (rc == OUTBOX_OK)
        rc = dup_into(&c->token, outbox_uri_get(uri, "token"), d);
    if (rc == OUTBOX_OK)
        rc = from_env("user_env", outbox_uri_get(uri, "user_env"), shown, &c->user, d);
    if (rc == OUTBOX_OK)
        rc = from_env("password_env", outbox_uri_get(uri, "password_env"), shown, &c->password, d);
    if (rc == OUTBOX_OK)
        rc = from_env("token_env", outbox_uri_get(uri, "token_env"), shown, &c->token, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (c->password && !c->user)
        return host->error(d, OUTBOX_EINVAL, "NATS sink %s: a password needs a user name", shown);
    if (c->token && c->user)
        return host->error(d, OUTBOX_EINVAL,
                           "NATS sink %s: give a user name and password or a token, not both",
                           shown);
    rc = dup_into(&c->name, outbox_uri_get(uri, "name") ? outbox_uri_get(uri, "name") : "outbox",
                  d);
    if (rc != OUTBOX_OK)
        return rc;

    const char *path = uri->path ? uri->path : "";
    if (path[0] == '/')
        path++;
    return dup_into(&h->subject_tpl, path, d);
}

/* --------------------------------------------------------- open/close */

static void nats_close(void *handle)
{
    nats_sink_t *h = handle;
    if (h == NULL)
        return;
    jsCtx_Destroy(h->js);
    natsConnection_Destroy(h->nc);
    outbox_nats_config_free(&h->cfg);
    outbox_nats_host->free(h->subject_tpl);
    /* A PubAck handler that never finished could still touch the handle
     * (see abandon_round): then its few bytes are left rather than freed
     * under it. */
    if (!h->handler_may_run) {
        pthread_mutex_destroy(&h->mu);
        outbox_nats_host->free(h);
    }
}

static int nats_open(const outbox_sink_open_t *params, void **handle, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_nats_host;
    *handle = NULL;
    nats_sink_t *h = host->alloc(sizeof *h);
    if (h == NULL)
        return host->error(d, OUTBOX_ENOMEM, "out of memory opening the NATS sink");
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->mu, NULL);
    outbox_uri_show(params->uri, h->shown, sizeof h->shown);

    int rc = parse_uri(params->uri, h, d);
    if (rc == OUTBOX_OK)
        rc = outbox_nats_connect(&h->cfg, h->shown, &h->nc, d);
    if (rc == OUTBOX_OK)
        rc = outbox_nats_jetstream(h->nc, h->timeout_ms, outbox_nats_on_ack, h, &h->js, d);
    if (rc != OUTBOX_OK) {
        nats_close(h);
        return rc;
    }
    *handle = h;
    return OUTBOX_OK;
}

/* --------------------------------------------------------- descriptor */

static const char *const nats_schemes[] = {"nats", NULL};

static const outbox_sink_vtable_t nats_vtable = {
    .struct_size = sizeof(outbox_sink_vtable_t),
    .open = nats_open,
    .close = nats_close,
    .publish = outbox_nats_publish,
    .destination_create = outbox_nats_destination_create,
    .destination_drop = outbox_nats_destination_drop,
    .reader_open = outbox_nats_reader_open,
    .reader_next = outbox_nats_reader_next,
    .reader_close = outbox_nats_reader_close,
};

static const outbox_driver_t nats_driver = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = OUTBOX_ABI_MAJOR,
    .abi_minor = OUTBOX_ABI_MINOR,
    .kind = OUTBOX_DRIVER_SINK,
    .name = NATS_SINK_NAME,
    .version = OUTBOX_VERSION,
    .schemes = nats_schemes,
    .capabilities = OUTBOX_SINK_CAP_ORDERED | OUTBOX_SINK_CAP_DEDUPE,
    .init = nats_init,
    .sink = &nats_vtable,
};

OUTBOX_DRIVER_ENTRY(nats_driver)
