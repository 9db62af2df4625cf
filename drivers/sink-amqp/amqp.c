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

#define LABEL "AMQP sink"
#define MS INT64_C(1000)
#define S (1000 * MS)
#define MAX_BYTES_LIMIT (INT64_C(128) << 20) /* RabbitMQ's own max_message_size default */

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

    const char *unknown = outbox_kit_uri_unknown(uri, known_params);
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

    int64_t timeout_us = 10 * S, connect_us = 5 * S, hb_us = 60 * S, max_bytes = 1 << 20;
    int rc = outbox_kit_opt_duration(host, uri, LABEL, "timeout", MS, 86400 * S, &timeout_us, d);
    if (rc == OUTBOX_OK)
        rc = outbox_kit_opt_duration(host, uri, LABEL, "connect_timeout", MS, 86400 * S,
                                     &connect_us, d);
    /* AMQP negotiates the heartbeat in whole seconds, at most 65535; "0"
     * turns it off. */
    const char *hb = outbox_kit_uri_get(uri, "heartbeat");
    if (hb != NULL && strcmp(hb, "0") == 0)
        hb_us = 0;
    else if (rc == OUTBOX_OK)
        rc = outbox_kit_opt_duration(host, uri, LABEL, "heartbeat", S, 65535 * S, &hb_us, d);
    if (rc == OUTBOX_OK && hb_us % S != 0)
        rc = host->error(d, OUTBOX_EINVAL,
                         "AMQP sink %s: heartbeat=%s is not 0 (off) or whole seconds from 1s "
                         "to 65535s (e.g. 30s, 2m)",
                         shown, hb);
    if (rc == OUTBOX_OK)
        rc = outbox_kit_opt_int(host, uri, LABEL, "max_bytes", 1, MAX_BYTES_LIMIT, &max_bytes, d);
    int tls_verify = 1;
    if (rc == OUTBOX_OK)
        rc = outbox_kit_opt_bool(host, uri, LABEL, "tls_verify", &tls_verify, d);
    if (rc != OUTBOX_OK)
        return rc;
    h->timeout_ms = timeout_us / 1000;
    c->connect_timeout_ms = connect_us / 1000;
    c->heartbeat_s = (int)(hb_us / S);
    h->max_bytes = (size_t)max_bytes;
    c->tls_verify = tls_verify;

    const char *ca = outbox_kit_uri_get(uri, "tls_ca"), *cert = outbox_kit_uri_get(uri, "tls_cert");
    const char *key = outbox_kit_uri_get(uri, "tls_key");
    if ((ca || cert || key || outbox_kit_uri_get(uri, "tls_verify")) && !c->tls)
        return host->error(d, OUTBOX_EINVAL,
                           "AMQP sink %s: the tls_* options need the amqps:// scheme", shown);
    if (!cert != !key)
        return host->error(d, OUTBOX_EINVAL,
                           "AMQP sink %s: tls_cert and tls_key go together (a client "
                           "certificate and its key)",
                           shown);

    /* The URI's user and password unless user_env and password_env name
     * others. */
    const char *user = uri->user && uri->user[0] ? uri->user : NULL, *password = uri->password;
    rc = outbox_kit_opt_secret(host, uri, LABEL, "user", &user, d);
    if (rc == OUTBOX_OK)
        rc = outbox_kit_opt_secret(host, uri, LABEL, "password", &password, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (password && !user)
        return host->error(d, OUTBOX_EINVAL, "AMQP sink %s: a password needs a user name", shown);

    /* The vhost: the path without its first '/', so that /%2f (decoded
     * "//") and no path at all both mean "/". */
    const char *path = uri->path ? uri->path : "";
    if (path[0] == '/')
        path++;
    const char *vhost = path[0] ? path : "/", *ex = outbox_kit_uri_get(uri, "exchange");
    const char *rk = outbox_kit_uri_get(uri, "routing_key");
    rc = short_string("vhost", vhost, shown, d);
    if (rc == OUTBOX_OK)
        rc = short_string("exchange name", ex ? ex : "", shown, d);
    if (rc == OUTBOX_OK)
        rc = short_string("routing_key template", rk ? rk : "", shown, d);
    if (rc != OUTBOX_OK)
        return rc;

    /* Every string the handle keeps, copied at once. */
    const char *from[] = {uri->host, vhost, user, password, ca, cert, key, ex ? ex : "",
                          rk ? rk : ""};
    char **to[] = {&c->host, &c->vhost, &c->user, &c->password, &c->tls_ca,
                   &c->tls_cert, &c->tls_key, &h->exchange, &h->rk_tpl};
    for (size_t i = 0; i < sizeof to / sizeof to[0]; i++) {
        *to[i] = from[i] != NULL ? outbox_kit_strdup(host, from[i]) : NULL;
        if (from[i] != NULL && *to[i] == NULL)
            return host->error(d, OUTBOX_ENOMEM, "out of memory opening the AMQP sink");
    }
    return OUTBOX_OK;
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
    outbox_kit_uri_show(host, params->uri, h->shown, sizeof h->shown);
    h->cfg.redactor = outbox_kit_redactor_new(host, params->uri);

    int rc = h->cfg.redactor != NULL
                 ? parse_uri(params->uri, h, d)
                 : host->error(d, OUTBOX_ENOMEM, "out of memory opening the AMQP sink");
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
    .abi_minor = 2, /* the lowest it relies on: the reader entries of 1.2 */
    .kind = OUTBOX_DRIVER_SINK,
    .name = AMQP_SINK_NAME,
    .version = OUTBOX_VERSION,
    .schemes = amqp_schemes,
    .capabilities = OUTBOX_SINK_CAP_ORDERED,
    .init = amqp_init,
    .sink = &amqp_vtable,
};

OUTBOX_DRIVER_ENTRY(amqp_driver)
