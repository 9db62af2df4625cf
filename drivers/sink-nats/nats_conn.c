/* Connections and JetStream contexts, made from the parsed URI. */
#include <stdio.h>
#include <string.h>

#include "nats_int.h"

static void on_connected(natsConnection *nc, void *closure)
{
    /* Only there so that a failed first connect goes on in the
     * background instead of blocking open. */
    (void)nc;
    (void)closure;
}

void outbox_nats_status_text(const nats_sink_t *h, natsStatus s, const char *extra, char *out,
                             size_t size)
{
    char text[512];
    snprintf(text, sizeof text, "%s%s%s", natsStatus_GetText(s), extra && extra[0] ? ": " : "",
             extra ? extra : "");
    outbox_kit_redact(outbox_nats_host, h->redactor, text, out, size);
}

int outbox_nats_connect(const nats_sink_t *h, natsConnection **nc, char *why, size_t why_size,
                        outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_nats_host;
    const nats_config_t *cfg = &h->cfg;
    natsOptions *o = NULL;
    *nc = NULL;
    natsStatus s = natsOptions_Create(&o);
    if (s == NATS_OK)
        s = natsOptions_SetServers(o, (const char **)cfg->servers, (int)cfg->n_servers);
    if (s == NATS_OK && cfg->user)
        s = natsOptions_SetUserInfo(o, cfg->user, cfg->password ? cfg->password : "");
    if (s == NATS_OK && cfg->token)
        s = natsOptions_SetToken(o, cfg->token);
    if (s == NATS_OK && cfg->nkey)
        s = natsOptions_SetNKeyFromSeed(o, cfg->nkey, cfg->nkey_seed);
    if (s == NATS_OK && cfg->name)
        s = natsOptions_SetName(o, cfg->name);
    if (s == NATS_OK)
        s = natsOptions_SetTimeout(o, cfg->connect_timeout_ms);
    if (s == NATS_OK)
        s = natsOptions_SetMaxReconnect(o, -1);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectWait(o, cfg->reconnect_wait_ms);
    const char *what = "setting connection options";
    if (s == NATS_OK && cfg->tls) {
        what = "setting up TLS";
        s = natsOptions_SetSecure(o, true);
        if (s == NATS_OK && cfg->tls_ca)
            s = natsOptions_LoadCATrustedCertificates(o, cfg->tls_ca);
        if (s == NATS_OK && (cfg->tls_cert || cfg->tls_key))
            s = natsOptions_LoadCertificatesChain(o, cfg->tls_cert, cfg->tls_key);
    }
    if (s != NATS_OK) {
        char text[256];
        outbox_nats_status_text(h, s, nats_GetLastError(NULL), text, sizeof text);
        natsOptions_Destroy(o);
        return host->error(d, s == NATS_NO_MEMORY ? OUTBOX_ENOMEM : OUTBOX_EINVAL,
                           "NATS sink %s: %s: %s", h->shown, what, text);
    }
    if (why != NULL) {
        /* One attempt without retries first: only its caller learns why
         * it failed (a TLS handshake's reason, an authorization
         * violation). The retrying connect below clears that reason. */
        why[0] = '\0';
        s = natsConnection_Connect(nc, o);
        if (s == NATS_OK) {
            natsOptions_Destroy(o);
            return OUTBOX_OK;
        }
        /* Its text starts with where in libnats it was set: "(conn.c:733): ". */
        const char *text = nats_GetLastError(NULL), *at = text ? strstr(text, "): ") : NULL;
        if (text && text[0] == '(' && at)
            text = at + 3;
        if (text && strcmp(text, natsStatus_GetText(s)) == 0)
            text = NULL;
        /* Under TLS 1.3 a server refuses a client certificate after the
         * handshake, and libnats then reads only an empty line. */
        char more[300];
        if (cfg->tls && (s == NATS_PROTOCOL_ERROR || s == NATS_CONNECTION_CLOSED)) {
            snprintf(more, sizeof more, "%s (the server closed the connection after the TLS "
                     "handshake: %s)", text ? text : "",
                     cfg->tls_cert ? "did it refuse the client certificate?"
                                   : "does it require a client certificate? set tls_cert and "
                                     "tls_key");
            text = more;
        }
        outbox_nats_status_text(h, s, text, why, why_size);
        *nc = NULL;
    }
    s = natsOptions_SetRetryOnFailedConnect(o, true, on_connected, NULL);
    if (s == NATS_OK)
        s = natsConnection_Connect(nc, o);
    natsOptions_Destroy(o);
    if (s == NATS_OK || s == NATS_NOT_YET_CONNECTED)
        return OUTBOX_OK;
    char text[256];
    outbox_nats_status_text(h, s, nats_GetLastError(NULL), text, sizeof text);
    *nc = NULL;
    return host->error(d, OUTBOX_ETRANSIENT, "NATS sink %s: cannot connect: %s", h->shown, text);
}

int outbox_nats_down(nats_sink_t *h, char *out, size_t size)
{
    natsConnStatus st = natsConnection_Status(h->nc);
    if (st == NATS_CONN_STATUS_CONNECTED) {
        h->open_error[0] = '\0'; /* from now on, only the connection's own errors */
        return 0;
    }
    /* libnats 3.4 closes a connection whose first attempt failed after
     * the TCP connect (fixed in 3.12), saying only "no server": the
     * reason is then the one open kept. */
    const char *last = NULL;
    char why[256] = "";
    natsStatus e = natsConnection_GetLastError(h->nc, &last);
    if (e != NATS_OK && e != NATS_NO_SERVER && last && last[0])
        outbox_kit_redact(outbox_nats_host, h->redactor, last, why, sizeof why);
    else if (h->open_error[0])
        snprintf(why, sizeof why, "%s", h->open_error);
    else if (e != NATS_OK && last)
        outbox_kit_redact(outbox_nats_host, h->redactor, last, why, sizeof why);
    if (st == NATS_CONN_STATUS_CLOSED)
        snprintf(out, size,
                 "the connection to the NATS server (%s) is closed%s%s; libnats does not "
                 "reconnect it: open the sink again",
                 h->shown, why[0] ? ": " : "", why);
    else
        snprintf(out, size, "not connected to the NATS server (%s)%s%s: reconnecting", h->shown,
                 why[0] ? ": " : "", why);
    return 1;
}

int outbox_nats_jetstream(natsConnection *nc, int64_t wait_ms, jsPubAckHandler ack_handler,
                          void *closure, jsCtx **js, outbox_diag_t *d)
{
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = wait_ms;
    jo.PublishAsync.AckHandler = ack_handler;
    jo.PublishAsync.AckHandlerClosure = closure;
    natsStatus s = natsConnection_JetStream(js, nc, &jo);
    if (s != NATS_OK) {
        *js = NULL;
        return outbox_nats_host->error(d, OUTBOX_ENOMEM, "NATS sink: no JetStream context: %s",
                                       natsStatus_GetText(s));
    }
    return OUTBOX_OK;
}

void outbox_nats_config_free(nats_config_t *cfg)
{
    const outbox_host_t *host = outbox_nats_host;
    for (size_t i = 0; i < cfg->n_servers; i++)
        host->free(cfg->servers[i]);
    host->free(cfg->servers);
    host->free(cfg->user);
    if (cfg->password)
        memset(cfg->password, 0, strlen(cfg->password));
    host->free(cfg->password);
    if (cfg->token)
        memset(cfg->token, 0, strlen(cfg->token));
    host->free(cfg->token);
    host->free(cfg->nkey);
    host->free(cfg->nkey_seed);
    host->free(cfg->name);
    host->free(cfg->tls_ca);
    host->free(cfg->tls_cert);
    host->free(cfg->tls_key);
    memset(cfg, 0, sizeof *cfg);
}
