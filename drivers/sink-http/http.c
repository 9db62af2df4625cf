/* The http: and https: sink: each message is one webhook POST through
 * libcurl, in the CloudEvents HTTP binding's binary mode.
 *
 *   http[s]://[user:password@]host[:port][/PATH_TEMPLATE][?name=value&...]
 *
 * The path is the URL path template ("{route}", "{destination}"; none or
 * "/" = "/{destination}"); the URI's query holds the sink's options, and
 * the query= option what the webhook's URL carries after '?'. OK means
 * the receiver answered 2xx.
 *
 * libcurl's global state: init() calls curl_global_init once (it counts
 * its callers, so a host that uses libcurl too and pairs its own init and
 * cleanup does not pull it from under the driver), and the driver never
 * calls curl_global_cleanup, as drivers stay loaded until the process
 * ends. */
#include <stdio.h>
#include <string.h>

#include "http_int.h"
#include "outbox/version.h"

const outbox_host_t *outbox_http_host;

#ifdef OUTBOX_DRIVER_STATIC
_Thread_local http_sink_t *outbox_http_opened;
#endif

static int http_init(const outbox_host_t *h, outbox_diag_t *d)
{
    outbox_http_host = h;
    CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
    if (rc != CURLE_OK)
        return h->error(d, OUTBOX_EPERMANENT, "HTTP sink: libcurl does not start: %s",
                        curl_easy_strerror(rc));
    return OUTBOX_OK;
}

/* ------------------------------------------------------------ options */

static const char *const known_params[] = {
    "timeout", "connect_timeout", "parallel", "query", "header", "password_env", "token_env",
    "hmac_secret_env", "tls_ca", "tls_cert", "tls_key", "insecure", NULL,
};
#define KNOWN_TEXT                                                                           \
    "timeout, connect_timeout, parallel, query, header, password_env, token_env, "           \
    "hmac_secret_env, tls_ca, tls_cert, tls_key, insecure"

/* What a message about the URI starts with, the kit's about an option's
 * value too. */
#define HTTP_LABEL "HTTP sink"

static int out_of_memory(outbox_diag_t *d)
{
    return outbox_http_host->error(d, OUTBOX_ENOMEM, "out of memory opening the HTTP sink");
}

static int bad(const char *shown, outbox_diag_t *d, const char *fmt, ...) OUTBOX_PRINTF(3, 4);
static int bad(const char *shown, outbox_diag_t *d, const char *fmt, ...)
{
    char why[OUTBOX_MESSAGE_MAX / 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return outbox_http_host->error(d, OUTBOX_EINVAL, HTTP_LABEL " %s: %s", shown, why);
}

/* Headers the sink writes itself, which header= may not replace. */
static int reserved_header(const char *name, size_t n)
{
    static const char *const words[] = {"content-type", "content-length", "host", "expect",
                                        "traceparent", "authorization", "transfer-encoding",
                                        "connection", NULL};
    if ((n >= 3 && strncasecmp(name, "ce-", 3) == 0) ||
        (n >= 8 && strncasecmp(name, "webhook-", 8) == 0))
        return 1;
    for (const char *const *w = words; *w; w++)
        if (strlen(*w) == n && strncasecmp(name, *w, n) == 0)
            return 1;
    return 0;
}

static int add_header(http_config_t *c, const char *value, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_http_host;
    const char *colon = strchr(value, ':');
    size_t n = colon ? (size_t)(colon - value) : 0;
    if (n == 0 || strpbrk(value, "\r\n") != NULL || strcspn(value, " \t") < n)
        return bad(c->shown, d, "header=%s is not \"Name: value\" on one line", value);
    for (size_t i = 0; i < n; i++)
        if (strchr("()<>@,;:\\\"/[]?={}", value[i]) != NULL || value[i] < 0x21 || value[i] > 0x7e)
            return bad(c->shown, d, "header=%s: the name is not an HTTP token", value);
    if (reserved_header(value, n))
        return bad(c->shown, d,
                   "header=%.*s: the sink sets that header itself (Content-Type, ce-*, "
                   "webhook-*, traceparent, Authorization and the framing ones)",
                   (int)n, value);
    char **grown = host->realloc(c->headers, (c->n_headers + 1) * sizeof *grown);
    if (grown == NULL)
        return out_of_memory(d);
    c->headers = grown;
    c->headers[c->n_headers] = outbox_kit_strdup(host, value);
    if (c->headers[c->n_headers] == NULL)
        return out_of_memory(d);
    c->n_headers++;
    return OUTBOX_OK;
}

/* The durations, counts and switches, in the one grammar of every
 * driver's options. */
static int parse_options(const outbox_uri_t *uri, http_config_t *c, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_http_host;
    struct {
        const char *name;
        long *dst;
        int64_t us;
    } durations[] = {{"timeout", &c->timeout_ms, INT64_C(10000000)},
                     {"connect_timeout", &c->connect_timeout_ms, INT64_C(2000000)}};
    for (size_t i = 0; i < sizeof durations / sizeof *durations; i++) {
        int rc = outbox_kit_opt_duration(host, uri, HTTP_LABEL, durations[i].name, INT64_C(1000),
                                         INT64_C(3600000000), &durations[i].us, d);
        if (rc != OUTBOX_OK)
            return rc;
        /* libcurl counts milliseconds; a part of one is not dropped. */
        *durations[i].dst = (long)((durations[i].us + 999) / 1000);
    }
    int64_t parallel = 8;
    int insecure = 0;
    int rc = outbox_kit_opt_int(host, uri, HTTP_LABEL, "parallel", 1, 64, &parallel, d);
    if (rc == OUTBOX_OK)
        rc = outbox_kit_opt_bool(host, uri, HTTP_LABEL, "insecure", &insecure, d);
    c->parallel = (int)parallel;
    c->insecure = insecure != 0;
    return rc;
}

static int parse_uri(const outbox_uri_t *uri, http_config_t *c, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_http_host;
    const char *shown = c->shown;
    bool https = strcmp(uri->scheme, "https") == 0;

    const char *unknown = outbox_kit_uri_unknown(uri, known_params);
    if (unknown)
        return bad(shown, d, "unknown parameter %s (known: " KNOWN_TEXT ")", unknown);
    if (uri->raw == NULL || strncmp(uri->raw + strlen(uri->scheme), "://", 3) != 0 ||
        uri->host == NULL || uri->host[0] == '\0')
        return bad(shown, d, "names no host: use %s://host:port/PATH", uri->scheme);
    if (strchr(uri->host, ',') != NULL)
        return bad(shown, d, "names several hosts; a webhook has one");
    int rc = parse_options(uri, c, d);
    if (rc != OUTBOX_OK)
        return rc;

    const char *tls_ca = outbox_kit_uri_get(uri, "tls_ca");
    const char *tls_cert = outbox_kit_uri_get(uri, "tls_cert");
    const char *tls_key = outbox_kit_uri_get(uri, "tls_key");
    if (!https && (tls_ca || tls_cert || tls_key || outbox_kit_uri_get(uri, "insecure")))
        return bad(shown, d, "TLS options (tls_ca, tls_cert, tls_key, insecure) need https://");
    if (!tls_cert != !tls_key)
        return bad(shown, d, "tls_cert and tls_key go together (a client certificate and its key)");
    const char *query = outbox_kit_uri_get(uri, "query");
    if (query && (query[0] == '\0' || strpbrk(query, " #\r\n") != NULL))
        return bad(shown, d, "query=%s is not a URL query (no spaces, no '#')", query);
    for (size_t i = 0; rc == OUTBOX_OK && i < uri->n_params; i++)
        if (strcmp(uri->params[i].key, "header") == 0)
            rc = add_header(c, uri->params[i].value ? uri->params[i].value : "", d);

    /* Only the *_env forms are known options: a secret typed into the
     * query would end up in shell histories and unit files. password_env
     * stands in for a password in the URI. */
    const char *user = uri->user && uri->user[0] ? uri->user : NULL, *password = uri->password;
    const char *token = NULL, *secret = NULL;
    if (rc == OUTBOX_OK)
        rc = outbox_kit_opt_secret(host, uri, HTTP_LABEL, "password", &password, d);
    if (rc == OUTBOX_OK)
        rc = outbox_kit_opt_secret(host, uri, HTTP_LABEL, "token", &token, d);
    if (rc == OUTBOX_OK)
        rc = outbox_kit_opt_secret(host, uri, HTTP_LABEL, "hmac_secret", &secret, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (password && !user)
        return bad(shown, d, "a password needs a user name (http://user:password@host/...)");
    if (token && user)
        return bad(shown, d, "give a user name and password or a bearer token, not both");

    const char *path = uri->path && strcmp(uri->path, "/") != 0 && uri->path[0] ? uri->path
                                                                               : "/{destination}";
    struct {
        const char *value;
        char **dst;
    } keep[] = {{tls_ca, &c->tls_ca},     {tls_cert, &c->tls_cert}, {tls_key, &c->tls_key},
                {query, &c->query},       {user, &c->user},         {password, &c->password},
                {token, &c->token},       {secret, &c->secret},     {path, &c->path_tpl}};
    for (size_t i = 0; i < sizeof keep / sizeof *keep; i++)
        if (keep[i].value != NULL &&
            (*keep[i].dst = outbox_kit_strdup(host, keep[i].value)) == NULL)
            return out_of_memory(d);
    if (c->secret) {
        int k = outbox_http_signing_key(c->secret, &c->key, &c->key_len);
        if (k == -2)
            return out_of_memory(d);
        if (k != 0 || c->key_len == 0)
            return bad(shown, d,
                       "the signing secret in %s starts with whsec_ but what follows is no "
                       "base64 key",
                       outbox_kit_uri_get(uri, "hmac_secret_env"));
    }

    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, host);
    bool v6 = strchr(uri->host, ':') != NULL;
    outbox_kit_buf_printf(&b, "%s://%s%s%s", uri->scheme, v6 ? "[" : "", uri->host, v6 ? "]" : "");
    if (uri->port > 0)
        outbox_kit_buf_printf(&b, ":%d", uri->port);
    c->base = outbox_kit_buf_steal(&b);
    return c->base != NULL ? OUTBOX_OK : out_of_memory(d);
}

/* --------------------------------------------------------- open/close */

static void config_free(http_config_t *c)
{
    const outbox_host_t *host = outbox_http_host;
    char **strs[] = {&c->base, &c->path_tpl, &c->query, &c->user, &c->password, &c->token,
                     &c->secret, &c->tls_ca, &c->tls_cert, &c->tls_key};
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++) {
        if (*strs[i] != NULL)
            memset(*strs[i], 0, strlen(*strs[i])); /* secrets leave no copy behind */
        host->free(*strs[i]);
        *strs[i] = NULL;
    }
    if (c->key != NULL)
        memset(c->key, 0, c->key_len);
    host->free(c->key);
    for (size_t i = 0; i < c->n_headers; i++)
        host->free(c->headers[i]);
    host->free(c->headers);
}

static void http_close(void *handle)
{
    http_sink_t *h = handle;
    if (h == NULL)
        return;
    outbox_http_slots_free(h);
    outbox_kit_redactor_free(outbox_http_host, h->redactor);
    config_free(&h->cfg);
    outbox_http_host->free(h);
}

static int http_open(const outbox_sink_open_t *params, void **handle, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_http_host;
    *handle = NULL;
    http_sink_t *h = host->alloc(sizeof *h);
    if (h == NULL)
        return out_of_memory(d);
    memset(h, 0, sizeof *h);
    outbox_kit_uri_show(host, params->uri, h->cfg.shown, sizeof h->cfg.shown);
    int rc = parse_uri(params->uri, &h->cfg, d);
    if (rc == OUTBOX_OK && (h->redactor = outbox_kit_redactor_new(host, params->uri)) == NULL)
        rc = out_of_memory(d);
    if (rc == OUTBOX_OK)
        rc = outbox_http_slots_init(h, d);
    if (rc != OUTBOX_OK) {
        http_close(h);
        return rc;
    }
    *handle = h;
#ifdef OUTBOX_DRIVER_STATIC
    outbox_http_opened = h;
#endif
    return OUTBOX_OK;
}

/* --------------------------------------------------------- descriptor */

static const char *const http_schemes[] = {"http", "https", NULL};

static const outbox_sink_vtable_t http_vtable = {
    .struct_size = sizeof(outbox_sink_vtable_t),
    .open = http_open,
    .close = http_close,
    .publish = outbox_http_publish,
    .destination_create = outbox_http_destination_create,
    .destination_drop = outbox_http_destination_drop,
    .reader_open = outbox_http_reader_open,
    .reader_next = outbox_http_reader_next,
    .reader_close = outbox_http_reader_close,
};

static const outbox_driver_t http_driver = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = OUTBOX_ABI_MAJOR,
    .abi_minor = 2, /* the lowest it relies on: the reader entries of 1.2 */
    .kind = OUTBOX_DRIVER_SINK,
    .name = HTTP_SINK_NAME,
    .version = OUTBOX_VERSION,
    .schemes = http_schemes,
    .capabilities = OUTBOX_SINK_CAP_ORDERED,
    .init = http_init,
    .sink = &http_vtable,
};

OUTBOX_DRIVER_ENTRY(http_driver)
