/* The amqp: sink: AMQP 0-9-1 (RabbitMQ) with publisher confirms, through
 * librabbitmq.
 *
 *   amqp[s]://[user:password@]host[:port][/VHOST][?name=value&...]
 *
 * The path is the vhost ("/" when left out; %2f is "/" too). Each message
 * is one persistent basic.publish, mandatory, to the exchange (default ""),
 * with the routing key from the routing_key template (default the relay's
 * destination). OK means the broker confirmed it (basic.ack) and routed it
 * to at least one queue; a message that routes nowhere comes back
 * (basic.return) and is REJECT.
 *
 * librabbitmq has no threads and no global state: each handle owns its
 * connection, made at open when the broker answers and again on the next
 * publish after it was lost. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amqp_int.h"
#include "outbox/version.h"

const outbox_host_t *outbox_amqp_host;

static int amqp_init(const outbox_host_t *h, outbox_diag_t *d)
{
    (void)d;
    outbox_amqp_host = h;
    return OUTBOX_OK;
}

/* ------------------------------------------------------------ options */

static const char *const known_params[] = {
    "exchange", "routing_key", "timeout", "connect_timeout", "heartbeat", "max_bytes",
    "user_env", "password_env", "tls_ca", "tls_cert", "tls_key", "tls_verify", NULL,
};

#define MAX_BYTES_LIMIT ((size_t)128 << 20) /* RabbitMQ's own max_message_size default */

/* "500ms", "10s", "2m", "1h" -> milliseconds, within [min_ms, 24h]. */
static int parse_duration_ms(const char *text, int64_t min_ms, int64_t *ms)
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
    int64_t out;
    if (strcmp(p, "ms") == 0)
        out = v;
    else if (strcmp(p, "s") == 0)
        out = v * 1000;
    else if (strcmp(p, "m") == 0)
        out = v * 60000;
    else if (strcmp(p, "h") == 0)
        out = v * 3600000;
    else
        return -1;
    if (out < min_ms || out > INT64_C(86400000))
        return -1;
    *ms = out;
    return 0;
}

/* "1048576", "512KiB", "1MiB" -> bytes, 1 .. 128 MiB. */
static int parse_size(const char *text, size_t *out)
{
    const char *p = text;
    uint64_t v = 0;
    if (*p < '0' || *p > '9')
        return -1;
    while (*p >= '0' && *p <= '9') {
        if (v > (UINT64_C(1) << 40))
            return -1;
        v = v * 10 + (uint64_t)(*p++ - '0');
    }
    if (strcmp(p, "KiB") == 0)
        v <<= 10;
    else if (strcmp(p, "MiB") == 0)
        v <<= 20;
    else if (*p != '\0')
        return -1;
    if (v < 1 || v > MAX_BYTES_LIMIT)
        return -1;
    *out = (size_t)v;
    return 0;
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

static int dup_into(char **dst, const char *src, outbox_diag_t *d)
{
    *dst = src ? outbox_kit_strdup(outbox_amqp_host, src) : NULL;
    if (src && !*dst)
        return outbox_amqp_host->error(d, OUTBOX_ENOMEM, "out of memory opening the AMQP sink");
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
        return outbox_amqp_host->error(d, OUTBOX_EINVAL,
                                       "AMQP sink %s: %s names environment variable %s, which "
                                       "is not set or empty",
                                       shown, option, var);
    outbox_amqp_host->free(*dst);
    return dup_into(dst, v, d);
}

/* AMQP short strings (exchange names, routing keys) hold at most 255 bytes. */
static int short_string(const char *what, const char *v, const char *shown, outbox_diag_t *d)
{
    if (strlen(v) > 255)
        return outbox_amqp_host->error(d, OUTBOX_EINVAL,
                                       "AMQP sink %s: the %s is %zu bytes; AMQP allows 255", shown,
                                       what, strlen(v));
    return OUTBOX_OK;
}

static int parse_uri(const outbox_uri_t *uri, amqp_sink_t *h, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_amqp_host;
    const char *shown = h->shown;
    amqp_config_t *c = &h->cfg;

    const char *unknown = outbox_uri_unknown(uri, known_params);
    if (unknown)
        return host->error(d, OUTBOX_EINVAL,
                           "AMQP sink %s: unknown parameter %s (known: exchange, routing_key, "
                           "timeout, connect_timeout, heartbeat, max_bytes, user_env, "
                           "password_env, tls_ca, tls_cert, tls_key, tls_verify)",
                           shown, unknown);
    if (uri->raw == NULL || strncmp(uri->raw + strlen(uri->scheme), "://", 3) != 0 ||
        uri->host == NULL || uri->host[0] == '\0')
        return host->error(d, OUTBOX_EINVAL,
                           "AMQP sink %s names no broker: use amqp://user:password@host:port/vhost",
                           shown);
    if (strchr(uri->host, ',') != NULL)
        return host->error(d, OUTBOX_EINVAL,
                           "AMQP sink %s: one broker only (librabbitmq connects to one host; put "
                           "a load balancer or DNS name in front of a cluster)",
                           shown);
    c->tls = strcmp(uri->scheme, "amqps") == 0;
    c->port = uri->port > 0 ? uri->port : c->tls ? 5671 : 5672;

    struct {
        const char *name;
        int64_t *dst;
        int64_t dflt, min;
    } durations[] = {
        {"timeout", &h->timeout_ms, 10000, 1},
        {"connect_timeout", &c->connect_timeout_ms, 5000, 1},
    };
    for (size_t i = 0; i < sizeof durations / sizeof durations[0]; i++) {
        const char *v = outbox_uri_get(uri, durations[i].name);
        *durations[i].dst = durations[i].dflt;
        if (v && parse_duration_ms(v, durations[i].min, durations[i].dst) != 0)
            return host->error(d, OUTBOX_EINVAL,
                               "AMQP sink %s: %s=%s is not a duration from 1ms to 24h "
                               "(e.g. 500ms, 10s, 2m)",
                               shown, durations[i].name, v);
    }
    const char *hb = outbox_uri_get(uri, "heartbeat");
    int64_t hb_ms = 60000;
    if (hb && strcmp(hb, "0") == 0)
        hb_ms = 0;
    else if (hb && (parse_duration_ms(hb, 1000, &hb_ms) != 0 || hb_ms % 1000 != 0 ||
                    hb_ms > 65535000))
        return host->error(d, OUTBOX_EINVAL,
                           "AMQP sink %s: heartbeat=%s is not 0 (off) or whole seconds from 1s "
                           "to 65535s (e.g. 30s, 2m)",
                           shown, hb);
    c->heartbeat_s = (int)(hb_ms / 1000);

    const char *mb = outbox_uri_get(uri, "max_bytes");
    h->max_bytes = (size_t)1 << 20;
    if (mb && parse_size(mb, &h->max_bytes) != 0)
        return host->error(d, OUTBOX_EINVAL,
                           "AMQP sink %s: max_bytes=%s is not a size from 1 byte to 128MiB "
                           "(e.g. 1048576, 512KiB, 16MiB)",
                           shown, mb);

    c->tls_verify = true;
    const char *tv = outbox_uri_get(uri, "tls_verify");
    if (tv && parse_bool(tv, &c->tls_verify) != 0)
        return host->error(d, OUTBOX_EINVAL, "AMQP sink %s: tls_verify=%s is not 0 or 1", shown,
                           tv);
    int rc = OUTBOX_OK;
    if (rc == OUTBOX_OK)
        rc = dup_into(&c->tls_ca, outbox_uri_get(uri, "tls_ca"), d);
    if (rc == OUTBOX_OK)
        rc = dup_into(&c->tls_cert, outbox_uri_get(uri, "tls_cert"), d);
    if (rc == OUTBOX_OK)
        rc = dup_into(&c->tls_key, outbox_uri_get(uri, "tls_key"), d);
    if (rc != OUTBOX_OK)
        return rc;
    if ((c->tls_ca || c->tls_cert || c->tls_key || tv) && !c->tls)
        return host->error(d, OUTBOX_EINVAL,
                           "AMQP sink %s: the tls_* options need the amqps:// scheme", shown);
    if (!c->tls_cert != !c->tls_key)
        return host->error(d, OUTBOX_EINVAL,
                           "AMQP sink %s: tls_cert and tls_key go together (a client "
                           "certificate and its key)",
                           shown);

    rc = dup_into(&c->host, uri->host, d);
    if (rc == OUTBOX_OK)
        rc = dup_into(&c->user, uri->user && uri->user[0] ? uri->user : NULL, d);
    if (rc == OUTBOX_OK)
        rc = dup_into(&c->password, uri->password, d);
    if (rc == OUTBOX_OK)
        rc = from_env("user_env", outbox_uri_get(uri, "user_env"), shown, &c->user, d);
    if (rc == OUTBOX_OK)
        rc = from_env("password_env", outbox_uri_get(uri, "password_env"), shown, &c->password, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (c->password && !c->user)
        return host->error(d, OUTBOX_EINVAL, "AMQP sink %s: a password needs a user name", shown);

    /* The vhost: the path without its first '/', so that /%2f (decoded
     * "//") and no path at all both mean "/". */
    const char *path = uri->path ? uri->path : "";
    if (path[0] == '/')
        path++;
    rc = dup_into(&c->vhost, path[0] ? path : "/", d);
    if (rc == OUTBOX_OK)
        rc = short_string("vhost", c->vhost, shown, d);

    const char *ex = outbox_uri_get(uri, "exchange");
    if (rc == OUTBOX_OK)
        rc = dup_into(&h->exchange, ex ? ex : "", d);
    if (rc == OUTBOX_OK)
        rc = short_string("exchange name", h->exchange, shown, d);
    const char *rk = outbox_uri_get(uri, "routing_key");
    if (rc == OUTBOX_OK)
        rc = dup_into(&h->rk_tpl, rk ? rk : "", d);
    if (rc == OUTBOX_OK)
        rc = short_string("routing_key template", h->rk_tpl, shown, d);
    return rc;
}

/* --------------------------------------------------------- open/close */

static void amqp_sink_close(void *handle)
{
    amqp_sink_t *h = handle;
    if (h == NULL)
        return;
    outbox_amqp_disconnect(h->conn, true);
    outbox_amqp_config_free(&h->cfg);
    outbox_amqp_host->free(h->exchange);
    outbox_amqp_host->free(h->rk_tpl);
    outbox_amqp_host->free(h);
}

static int amqp_sink_open(const outbox_sink_open_t *params, void **handle, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_amqp_host;
    *handle = NULL;
    amqp_sink_t *h = host->alloc(sizeof *h);
    if (h == NULL)
        return host->error(d, OUTBOX_ENOMEM, "out of memory opening the AMQP sink");
    memset(h, 0, sizeof *h);
    outbox_uri_show(params->uri, h->shown, sizeof h->shown);

    int rc = parse_uri(params->uri, h, d);
    if (rc != OUTBOX_OK) {
        amqp_sink_close(h);
        return rc;
    }
    /* A broker that does not answer now is no error: publish connects
     * again, and its messages are RETRY until it answers. */
    char why[OUTBOX_MESSAGE_MAX / 2];
    if (outbox_amqp_connect(&h->cfg, true, &h->conn, why, sizeof why) != 0)
        host->log(OUTBOX_LOG_WARN, AMQP_SINK_NAME,
                  "AMQP sink %s: not connected yet (%s); publishing will try again", h->shown,
                  why);
    h->last_used_us = host->monotonic_us();
    *handle = h;
    return OUTBOX_OK;
}

/* --------------------------------------------------------- descriptor */

static const char *const amqp_schemes[] = {"amqp", "amqps", NULL};

static const outbox_sink_vtable_t amqp_vtable = {
    .struct_size = sizeof(outbox_sink_vtable_t),
    .open = amqp_sink_open,
    .close = amqp_sink_close,
    .publish = outbox_amqp_publish,
    .destination_create = outbox_amqp_destination_create,
    .destination_drop = outbox_amqp_destination_drop,
    .reader_open = outbox_amqp_reader_open,
    .reader_next = outbox_amqp_reader_next,
    .reader_close = outbox_amqp_reader_close,
};

static const outbox_driver_t amqp_driver = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = OUTBOX_ABI_MAJOR,
    .abi_minor = OUTBOX_ABI_MINOR,
    .kind = OUTBOX_DRIVER_SINK,
    .name = AMQP_SINK_NAME,
    .version = OUTBOX_VERSION,
    .schemes = amqp_schemes,
    .capabilities = OUTBOX_SINK_CAP_ORDERED,
    .init = amqp_init,
    .sink = &amqp_vtable,
};

OUTBOX_DRIVER_ENTRY(amqp_driver)
