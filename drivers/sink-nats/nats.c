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
#include <errno.h>
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
    "user_env", "password_env", "tls", "tls_ca", "tls_cert", "tls_key", "nkey", "nkey_seed", NULL,
};

#define LABEL "NATS sink"
#define MS INT64_C(1000)
#define DAY (INT64_C(86400) * 1000000)

/* A copy of s that the handle keeps (NULL for NULL); *failed once memory
 * ran out, so that open checks once. */
static char *keep(const char *s, bool *failed)
{
    char *p = s != NULL ? outbox_kit_strdup(outbox_nats_host, s) : NULL;
    *failed = *failed || (s != NULL && p == NULL);
    return p;
}

static int add_server(nats_config_t *c, const char *hostport, bool tls, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_nats_host;
    char **grown = host->realloc(c->servers, (c->n_servers + 1) * sizeof *grown);
    if (grown == NULL)
        return host->error(d, OUTBOX_ENOMEM, "out of memory opening the NATS sink");
    c->servers = grown;
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, host);
    outbox_kit_buf_printf(&b, "%s://%s", tls ? "tls" : "nats", hostport);
    c->servers[c->n_servers] = outbox_kit_buf_steal(&b);
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

/* nkey=U...&nkey_seed=FILE: a user nkey (56 characters of base32, the
 * public half) and a readable file holding its seed. libnats reads the
 * seed itself at each connect, so this only checks that it can. */
static int check_nkey(const char *nkey, const char *seed, bool other_login, const char *shown,
                      outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_nats_host;
    if (nkey == NULL && seed == NULL)
        return OUTBOX_OK;
    if (nkey == NULL || seed == NULL || nkey[0] == '\0' || seed[0] == '\0')
        return host->error(d, OUTBOX_EINVAL,
                           "NATS sink %s: nkey and nkey_seed go together (the user's public "
                           "nkey and the file holding its seed)",
                           shown);
    if (other_login)
        return host->error(d, OUTBOX_EINVAL,
                           "NATS sink %s: log in with an nkey, a user name and password or a "
                           "token, only one of them",
                           shown);
    /* A seed given as the key is a secret: this message leaves the URI out. */
    if (nkey[0] == 'S')
        return host->error(d, OUTBOX_EINVAL,
                           "NATS sink: nkey holds what looks like a seed (it starts with S): "
                           "give the public key (starting with U) and put the seed in the "
                           "nkey_seed file");
    if (strlen(nkey) != 56 || nkey[0] != 'U' || strspn(nkey, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") != 56)
        return host->error(d, OUTBOX_EINVAL,
                           "NATS sink %s: nkey is not a user's public nkey (56 characters "
                           "starting with U; the seed, starting with SU, goes in the nkey_seed file)",
                           shown);
    FILE *f = fopen(seed, "r");
    if (f == NULL)
        return host->error(d, OUTBOX_EINVAL, "NATS sink %s: cannot read the nkey_seed file %s: %s",
                           shown, seed, strerror(errno));
    fclose(f);
    return OUTBOX_OK;
}

static int parse_uri(const outbox_uri_t *uri, nats_sink_t *h, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_nats_host;
    const char *shown = h->shown;
    nats_config_t *c = &h->cfg;

    const char *unknown = outbox_kit_uri_unknown(uri, known_params);
    if (unknown)
        return host->error(d, OUTBOX_EINVAL,
                           "NATS sink %s: unknown parameter %s (known: timeout, connect_timeout, "
                           "reconnect_wait, name, servers, token, token_env, user_env, "
                           "password_env, tls, tls_ca, tls_cert, tls_key, nkey, nkey_seed)",
                           shown, unknown);
    if (uri->raw == NULL || strncmp(uri->raw + strlen(uri->scheme), "://", 3) != 0 ||
        uri->host == NULL || uri->host[0] == '\0')
        return host->error(d, OUTBOX_EINVAL,
                           "NATS sink %s names no server: use nats://host:port/SUBJECT", shown);

    /* libnats takes milliseconds. */
    struct {
        const char *name;
        int64_t *dst;
        int64_t dflt_us;
    } durations[] = {
        {"timeout", &h->timeout_ms, 10000 * MS},
        {"connect_timeout", &c->connect_timeout_ms, 2000 * MS},
        {"reconnect_wait", &c->reconnect_wait_ms, 250 * MS},
    };
    int rc = OUTBOX_OK;
    for (size_t i = 0; rc == OUTBOX_OK && i < sizeof durations / sizeof durations[0]; i++) {
        int64_t us = durations[i].dflt_us;
        rc = outbox_kit_opt_duration(host, uri, LABEL, durations[i].name, MS, DAY, &us, d);
        *durations[i].dst = us / 1000;
    }
    int tls = 0;
    if (rc == OUTBOX_OK)
        rc = outbox_kit_opt_bool(host, uri, LABEL, "tls", &tls, d);
    if (rc != OUTBOX_OK)
        return rc;
    bool failed = false;
    c->tls_ca = keep(outbox_kit_uri_get(uri, "tls_ca"), &failed);
    c->tls_cert = keep(outbox_kit_uri_get(uri, "tls_cert"), &failed);
    c->tls_key = keep(outbox_kit_uri_get(uri, "tls_key"), &failed);
    if (failed)
        return host->error(d, OUTBOX_ENOMEM, "out of memory opening the NATS sink");
    c->tls = tls || c->tls_ca || c->tls_cert || c->tls_key;
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
    const char *more = outbox_kit_uri_get(uri, "servers");
    if (rc == OUTBOX_OK && more)
        rc = add_servers(c, more, shown, d);

    /* The URI's user and password unless user_env and password_env name
     * others. */
    const char *user = uri->user && uri->user[0] ? uri->user : NULL, *password = uri->password;
    const char *token = NULL;
    if (rc == OUTBOX_OK)
        rc = outbox_kit_opt_secret(host, uri, LABEL, "user", &user, d);
    if (rc == OUTBOX_OK)
        rc = outbox_kit_opt_secret(host, uri, LABEL, "password", &password, d);
    if (rc == OUTBOX_OK)
        rc = outbox_kit_opt_secret(host, uri, LABEL, "token", &token, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (password && !user)
        return host->error(d, OUTBOX_EINVAL, "NATS sink %s: a password needs a user name", shown);
    if (token && user)
        return host->error(d, OUTBOX_EINVAL,
                           "NATS sink %s: give a user name and password or a token, not both",
                           shown);
    const char *nkey = outbox_kit_uri_get(uri, "nkey");
    const char *seed = outbox_kit_uri_get(uri, "nkey_seed");
    rc = check_nkey(nkey, seed, user != NULL || token != NULL, shown, d);
    if (rc != OUTBOX_OK)
        return rc;
    const char *name = outbox_kit_uri_get(uri, "name");
    const char *path = uri->path ? uri->path : "";
    if (path[0] == '/')
        path++;
    c->user = keep(user, &failed);
    c->password = keep(password, &failed);
    c->token = keep(token, &failed);
    c->nkey = keep(nkey, &failed);
    c->nkey_seed = keep(seed, &failed);
    c->name = keep(name ? name : "outbox", &failed);
    h->subject_tpl = keep(path, &failed);
    if (failed)
        return host->error(d, OUTBOX_ENOMEM, "out of memory opening the NATS sink");
    return OUTBOX_OK;
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
    outbox_kit_redactor_free(outbox_nats_host, h->redactor);
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
    outbox_kit_uri_show(host, params->uri, h->shown, sizeof h->shown);
    h->redactor = outbox_kit_redactor_new(host, params->uri);

    int rc = h->redactor != NULL
                 ? parse_uri(params->uri, h, d)
                 : host->error(d, OUTBOX_ENOMEM, "out of memory opening the NATS sink");
    if (rc == OUTBOX_OK)
        rc = outbox_nats_connect(h, &h->nc, h->open_error, sizeof h->open_error, d);
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
    .abi_minor = 2, /* the lowest it relies on: the reader entries of 1.2 */
    .kind = OUTBOX_DRIVER_SINK,
    .name = NATS_SINK_NAME,
    .version = OUTBOX_VERSION,
    .schemes = nats_schemes,
    .capabilities = OUTBOX_SINK_CAP_ORDERED | OUTBOX_SINK_CAP_DEDUPE,
    .init = nats_init,
    .sink = &nats_vtable,
};

OUTBOX_DRIVER_ENTRY(nats_driver)
