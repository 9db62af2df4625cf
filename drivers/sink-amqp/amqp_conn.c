/* Connections made from the parsed URI, and librabbitmq's errors as text. */
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#include <openssl/err.h>

#include "amqp_int.h"

static void method_text(amqp_method_t m, char *out, size_t size)
{
    if (m.id == AMQP_CONNECTION_CLOSE_METHOD || m.id == AMQP_CHANNEL_CLOSE_METHOD) {
        uint16_t code;
        amqp_bytes_t text;
        if (m.id == AMQP_CONNECTION_CLOSE_METHOD) {
            const amqp_connection_close_t *c = m.decoded;
            code = c->reply_code, text = c->reply_text;
        } else {
            const amqp_channel_close_t *c = m.decoded;
            code = c->reply_code, text = c->reply_text;
        }
        snprintf(out, size, "%.*s (%s %u)", (int)(text.len > 300 ? 300 : text.len),
                 text.bytes ? (const char *)text.bytes : "",
                 m.id == AMQP_CONNECTION_CLOSE_METHOD ? "connection closed," : "channel closed,",
                 (unsigned)code);
    } else {
        snprintf(out, size, "unexpected method %s", amqp_method_name(m.id));
    }
}

bool outbox_amqp_reply_text(const outbox_redactor_t *red, amqp_rpc_reply_t r, char *out,
                            size_t size)
{
    char text[512];
    bool server = false;
    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
        snprintf(text, sizeof text, "no error");
        break;
    case AMQP_RESPONSE_NONE:
        snprintf(text, sizeof text, "no reply from the broker");
        break;
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
        snprintf(text, sizeof text, "%s", amqp_error_string2(r.library_error));
        break;
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        method_text(r.reply, text, sizeof text);
        server = true;
        break;
    default:
        snprintf(text, sizeof text, "unknown reply");
    }
    outbox_kit_redact(outbox_amqp_host, red, text, out, size);
    return server;
}

void outbox_amqp_disconnect(amqp_connection_state_t conn, bool polite)
{
    if (conn == NULL)
        return;
    if (polite) {
        /* Each close waits for its -ok at most the RPC timeout set at
         * connect. */
        amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS);
        amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
    }
    amqp_destroy_connection(conn);
}

/* After librabbitmq's "a SSL error occurred": OpenSSL's own reason, from
 * this thread's error queue ("tlsv13 alert certificate required"), or "". */
static const char *tls_reason(char *buf, size_t size)
{
    unsigned long e = ERR_peek_last_error();
    const char *reason = e ? ERR_reason_error_string(e) : NULL;
    snprintf(buf, size, "%s", reason ? reason : "");
    ERR_clear_error();
    return buf;
}

static struct timeval tv_of(int64_t ms)
{
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

int outbox_amqp_connect(const amqp_config_t *cfg, bool confirm, amqp_connection_state_t *out,
                        char *why, size_t size)
{
    *out = NULL;
    amqp_connection_state_t conn = amqp_new_connection();
    if (conn == NULL) {
        snprintf(why, size, "out of memory");
        return -1;
    }
    amqp_socket_t *sock = cfg->tls ? amqp_ssl_socket_new(conn) : amqp_tcp_socket_new(conn);
    if (sock == NULL) {
        snprintf(why, size, "cannot make a %s socket", cfg->tls ? "TLS" : "TCP");
        amqp_destroy_connection(conn);
        return -1;
    }
    if (cfg->tls) {
        amqp_ssl_socket_set_verify_peer(sock, cfg->tls_verify);
        amqp_ssl_socket_set_verify_hostname(sock, cfg->tls_verify);
        int st = AMQP_STATUS_OK;
        if (cfg->tls_ca)
            st = amqp_ssl_socket_set_cacert(sock, cfg->tls_ca);
        if (st == AMQP_STATUS_OK && cfg->tls_cert)
            st = amqp_ssl_socket_set_key(sock, cfg->tls_cert, cfg->tls_key);
        if (st != AMQP_STATUS_OK) {
            snprintf(why, size, "loading the TLS files: %s", amqp_error_string2(st));
            amqp_destroy_connection(conn);
            return -1;
        }
    }
    struct timeval tv = tv_of(cfg->connect_timeout_ms);
    amqp_set_handshake_timeout(conn, &tv);
    amqp_set_rpc_timeout(conn, &tv);
    ERR_clear_error();
    int st = amqp_socket_open_noblock(sock, cfg->host, cfg->port, &tv);
    if (st != AMQP_STATUS_OK) {
        char reason[200] = "";
        if (st == AMQP_STATUS_SSL_ERROR)
            tls_reason(reason, sizeof reason);
        snprintf(why, size, "%s%s%s%s", amqp_error_string2(st), reason[0] ? " (" : "", reason,
                 reason[0] ? ")" : "");
        amqp_destroy_connection(conn);
        return -1;
    }
    amqp_table_entry_t prop = {.key = amqp_cstring_bytes("connection_name"),
                               .value = {.kind = AMQP_FIELD_KIND_UTF8,
                                         .value.bytes = amqp_cstring_bytes("outbox")}};
    amqp_table_t props = {.num_entries = 1, .entries = &prop};
    amqp_rpc_reply_t r = amqp_login_with_properties(
        conn, cfg->vhost, 0, AMQP_DEFAULT_FRAME_SIZE, cfg->heartbeat_s, &props,
        AMQP_SASL_METHOD_PLAIN, cfg->user ? cfg->user : "guest",
        cfg->password ? cfg->password : (cfg->user ? "" : "guest"));
    const char *step = "logging in";
    if (r.reply_type == AMQP_RESPONSE_NORMAL) {
        step = "opening a channel";
        amqp_channel_open(conn, 1);
        r = amqp_get_rpc_reply(conn);
    }
    if (r.reply_type == AMQP_RESPONSE_NORMAL && confirm) {
        step = "turning publisher confirms on";
        amqp_confirm_select(conn, 1);
        r = amqp_get_rpc_reply(conn);
    }
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        char text[400];
        outbox_amqp_reply_text(cfg->redactor, r, text, sizeof text);
        char reason[200] = "";
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_SSL_ERROR) {
            /* After the handshake: the broker ended the session, which a
             * broker that wants a client certificate does under TLS 1.3. */
            tls_reason(reason, sizeof reason);
            snprintf(why, size, "%s: %s%s%s%s%s", step, text, reason[0] ? " (" : "", reason,
                     reason[0] ? ")" : "",
                     cfg->tls_cert == NULL && reason[0] == '\0'
                         ? "; a broker that requires a client certificate (tls_cert, tls_key) ends "
                           "the session this way"
                         : "");
        } else if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
                 r.library_error == AMQP_STATUS_CONNECTION_CLOSED && strcmp(step, "logging in") == 0)
            snprintf(why, size, "%s: %s (a wrong user or password, or a vhost %s does not "
                     "let it in, closes the connection this way)",
                     step, text, cfg->vhost);
        else
            snprintf(why, size, "%s: %s", step, text);
        amqp_destroy_connection(conn);
        return -1;
    }
    /* Publishing waits on confirms by its own deadline; queue calls and
     * closing keep the RPC timeout above. */
    *out = conn;
    return 0;
}

void outbox_amqp_config_free(amqp_config_t *cfg)
{
    const outbox_host_t *host = outbox_amqp_host;
    host->free(cfg->host);
    host->free(cfg->vhost);
    host->free(cfg->user);
    if (cfg->password)
        memset(cfg->password, 0, strlen(cfg->password));
    host->free(cfg->password);
    host->free(cfg->tls_ca);
    host->free(cfg->tls_cert);
    host->free(cfg->tls_key);
    outbox_kit_redactor_free(host, cfg->redactor);
    memset(cfg, 0, sizeof *cfg);
}
