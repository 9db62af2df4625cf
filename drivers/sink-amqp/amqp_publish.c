/* Publishing: basic.publish with publisher confirms, OK only on the ack.
 *
 * A call goes out in rounds. A round holds the next message of every key
 * whose messages so far were all confirmed: every basic.publish of the
 * round is written at once (pipelined on the one channel), then the round
 * reads the broker's answers once, until each of its messages has its
 * confirm (one basic.ack with multiple set may cover many). So a key's
 * message is never sent before the one ahead of it is confirmed, and after
 * one fails (a basic.return, a basic.nack, a lost connection, a timeout,
 * or a local refusal such as max_bytes) nothing later of its key goes out
 * in this call: those are RETRY, "held back". A call whose messages all
 * have different keys is one round; a call takes as many rounds as its
 * longest run of one key. The kit's outbox_kit_keys_* makes the rounds.
 *
 * A message that the exchange routes to no queue comes back as a
 * basic.return (publishes are mandatory) before its basic.ack: it is
 * REJECT. A basic.nack (the broker could not store it) is RETRY. The
 * channel's delivery tags count publishes from 1, so the round's n-th
 * publish is known by its tag. */
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "amqp_int.h"

enum { SLOT_IDLE = 0, SLOT_SENT = 1, SLOT_DONE = 2 };

static const char *id_of(const outbox_message_t *m)
{
    return m->event_id ? m->event_id : "?";
}

static void drop_connection(amqp_sink_t *h)
{
    outbox_amqp_disconnect(h->conn, false);
    h->conn = NULL;
}

/* Between calls nothing should arrive but the broker closing the
 * connection (a shutdown, a missed heartbeat): read what is there without
 * waiting, and drop a connection that is closing or broken, so that the
 * call reconnects instead of failing on it. */
static void check_idle_connection(amqp_sink_t *h)
{
    const outbox_host_t *host = outbox_amqp_host;
    if (h->conn == NULL)
        return;
    /* Idle past the heartbeat interval (nobody answered the broker's
     * heartbeats meanwhile), librabbitmq and the broker soon count the
     * other side as gone: a fresh connection then. */
    if (h->cfg.heartbeat_s > 0 &&
        host->monotonic_us() - h->last_used_us > (int64_t)h->cfg.heartbeat_s * 1000000) {
        /* Not the polite close: it would wait on a broker that may be gone. */
        drop_connection(h);
        return;
    }
    for (;;) {
        if (!amqp_frames_enqueued(h->conn) && !amqp_data_in_buffer(h->conn)) {
            struct pollfd p = {.fd = amqp_get_sockfd(h->conn), .events = POLLIN};
            if (poll(&p, 1, 0) <= 0)
                return;
        }
        amqp_frame_t f;
        struct timeval tv = {0, 0};
        int st = amqp_simple_wait_frame_noblock(h->conn, &f, &tv);
        if (st == AMQP_STATUS_TIMEOUT)
            return;
        if (st != AMQP_STATUS_OK || (f.frame_type == AMQP_FRAME_METHOD &&
                                     (f.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD ||
                                      f.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD))) {
            drop_connection(h);
            return;
        }
    }
}

typedef struct call {
    amqp_sink_t *h;
    const outbox_message_t *msgs;
    outbox_publish_result_t *results;
    unsigned char *state;
    unsigned char *returned; /* came back as unroutable: REJECT at its ack */
    size_t *sent;            /* the round's publishes, in tag order */
    size_t n_sent;
    uint64_t first_tag;      /* the tag of sent[0] */
    size_t acked;            /* sent[0..acked) are all settled */
    size_t ret_from;         /* returns come in publish order: search from here */
    size_t pending;
    char tmo[32];
} call_t;

static void settle_one(call_t *c, size_t k, bool nack)
{
    size_t i = c->sent[k];
    if (c->state[i] != SLOT_SENT)
        return;
    c->state[i] = SLOT_DONE;
    c->pending--;
    if (nack)
        outbox_kit_result(&c->results[i], OUTBOX_PUBLISH_RETRY,
                          "the broker did not take event %s (basic.nack: it could not store it)",
                          id_of(&c->msgs[i]));
    else if (!c->returned[i])
        c->results[i].status = OUTBOX_PUBLISH_OK;
    /* A returned message keeps the REJECT its basic.return set. */
}

/* basic.ack or basic.nack of tag, for it alone or with every earlier one. */
static void settle_tag(call_t *c, uint64_t tag, bool multiple, bool nack)
{
    if (tag < c->first_tag || tag - c->first_tag >= c->n_sent)
        return;
    size_t k = (size_t)(tag - c->first_tag);
    if (multiple) {
        for (size_t j = c->acked; j <= k; j++)
            settle_one(c, j, nack);
    } else {
        settle_one(c, k, nack);
    }
    while (c->acked < c->n_sent && c->state[c->sent[c->acked]] == SLOT_DONE)
        c->acked++;
}

/* A basic.return: its message (found by message_id, the event id) routes
 * to no queue. */
static void on_return(call_t *c, const amqp_basic_return_t *r, const amqp_message_t *msg)
{
    amqp_bytes_t mid = (msg->properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG)
                           ? msg->properties.message_id
                           : amqp_empty_bytes;
    size_t k = c->ret_from, found = SIZE_MAX;
    for (; k < c->n_sent; k++) {
        size_t i = c->sent[k];
        if (c->state[i] != SLOT_SENT || c->returned[i])
            continue;
        const char *id = c->msgs[i].event_id;
        if (mid.len == 0 || (id && strlen(id) == mid.len && memcmp(id, mid.bytes, mid.len) == 0)) {
            found = k;
            break;
        }
    }
    if (found == SIZE_MAX)
        return;
    c->ret_from = found + 1;
    size_t i = c->sent[found];
    c->returned[i] = 1;
    int tl = (int)(r->reply_text.len > 100 ? 100 : r->reply_text.len);
    int el = (int)(r->exchange.len > 100 ? 100 : r->exchange.len);
    int kl = (int)(r->routing_key.len > 200 ? 200 : r->routing_key.len);
    outbox_kit_result(&c->results[i], OUTBOX_PUBLISH_REJECT,
                      "event %s routes to no queue: exchange \"%.*s\", routing key \"%.*s\" "
                      "(%.*s %u); declare a queue%s for it",
                      id_of(&c->msgs[i]), el, el ? (const char *)r->exchange.bytes : "", kl,
                      kl ? (const char *)r->routing_key.bytes : "", tl,
                      tl ? (const char *)r->reply_text.bytes : "", (unsigned)r->reply_code,
                      el ? " and bind it to the exchange" : " named after the routing key");
}

/* The round's still unsettled messages: RETRY for why, and the connection
 * is dropped (late confirms must not meet the next call's tags). */
static void fail_pending(call_t *c, const char *fmt, ...) OUTBOX_PRINTF(2, 3);
static void fail_pending(call_t *c, const char *fmt, ...)
{
    char why[OUTBOX_MESSAGE_MAX / 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    for (size_t k = 0; k < c->n_sent; k++) {
        size_t i = c->sent[k];
        if (c->state[i] != SLOT_SENT)
            continue;
        outbox_kit_result(&c->results[i], OUTBOX_PUBLISH_RETRY, "event %s: %s", id_of(&c->msgs[i]),
                          why);
        c->state[i] = SLOT_DONE;
    }
    c->pending = 0;
    drop_connection(c->h);
}

/* Reads the broker's answers until every publish of the round is settled
 * or the deadline passes. */
static void wait_confirms(call_t *c, int64_t deadline_us)
{
    const outbox_host_t *host = outbox_amqp_host;
    amqp_sink_t *h = c->h;
    while (c->pending > 0) {
        int64_t left = deadline_us - host->monotonic_us();
        if (left <= 0) {
            fail_pending(c, "no confirm from the broker within %s", c->tmo);
            return;
        }
        struct timeval tv = {.tv_sec = (time_t)(left / 1000000),
                             .tv_usec = (suseconds_t)(left % 1000000)};
        amqp_frame_t f;
        int st = amqp_simple_wait_frame_noblock(h->conn, &f, &tv);
        if (st == AMQP_STATUS_TIMEOUT)
            continue;
        if (st != AMQP_STATUS_OK) {
            fail_pending(c, "no confirm: the connection to the broker (%s) was lost: %s",
                         h->shown, amqp_error_string2(st));
            return;
        }
        if (f.frame_type != AMQP_FRAME_METHOD)
            continue;
        switch (f.payload.method.id) {
        case AMQP_BASIC_ACK_METHOD: {
            const amqp_basic_ack_t *a = f.payload.method.decoded;
            settle_tag(c, a->delivery_tag, a->multiple, false);
            break;
        }
        case AMQP_BASIC_NACK_METHOD: {
            const amqp_basic_nack_t *a = f.payload.method.decoded;
            settle_tag(c, a->delivery_tag, a->multiple, true);
            break;
        }
        case AMQP_BASIC_RETURN_METHOD: {
            /* The decoded method lives in the connection's pool, which
             * reading the message's content may reuse: copy it first. */
            const amqp_basic_return_t *r = f.payload.method.decoded;
            char text[128], ex[256], key[256];
            amqp_basic_return_t copy = *r;
            snprintf(text, sizeof text, "%.*s",
                     (int)(r->reply_text.len > 127 ? 127 : r->reply_text.len),
                     (const char *)r->reply_text.bytes);
            snprintf(ex, sizeof ex, "%.*s", (int)(r->exchange.len > 255 ? 255 : r->exchange.len), (const char *)r->exchange.bytes);
            snprintf(key, sizeof key, "%.*s",
                     (int)(r->routing_key.len > 255 ? 255 : r->routing_key.len),
                     (const char *)r->routing_key.bytes);
            copy.reply_text = amqp_cstring_bytes(text);
            copy.exchange = amqp_cstring_bytes(ex);
            copy.routing_key = amqp_cstring_bytes(key);
            amqp_message_t msg;
            amqp_rpc_reply_t rr = amqp_read_message(h->conn, f.channel, &msg, 0);
            if (rr.reply_type != AMQP_RESPONSE_NORMAL) {
                char why[256];
                outbox_amqp_reply_text(h->cfg.redactor, rr, why, sizeof why);
                fail_pending(c, "reading a returned message: %s", why);
                return;
            }
            on_return(c, &copy, &msg);
            amqp_destroy_message(&msg);
            break;
        }
        case AMQP_CHANNEL_CLOSE_METHOD:
        case AMQP_CONNECTION_CLOSE_METHOD: {
            amqp_rpc_reply_t rr = {.reply_type = AMQP_RESPONSE_SERVER_EXCEPTION,
                                   .reply = f.payload.method};
            char why[256];
            outbox_amqp_reply_text(h->cfg.redactor, rr, why, sizeof why);
            fail_pending(c, "no confirm: the broker closed the %s: %s",
                         f.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD ? "channel"
                                                                          : "connection",
                         why);
            return;
        }
        default:
            break;
        }
    }
}

int outbox_amqp_prepare(const amqp_sink_t *h, const outbox_message_t *m, outbox_kit_buf_t *rk,
                        amqp_out_t *out, outbox_publish_result_t *r)
{
    if (m->payload == NULL) {
        outbox_kit_result(r, OUTBOX_PUBLISH_REJECT, "event %s has no payload", id_of(m));
        return -1;
    }
    if (m->payload_len > h->max_bytes) {
        outbox_kit_result(r, OUTBOX_PUBLISH_REJECT,
                          "event %s is %zu bytes, over the sink's max_bytes of %zu (raise "
                          "max_bytes, up to the broker's max_message_size)",
                          id_of(m), m->payload_len, h->max_bytes);
        return -1;
    }
    outbox_kit_buf_reset(rk);
    outbox_kit_destination(rk, h->rk_tpl, m);
    if (rk->failed) {
        outbox_kit_result(r, OUTBOX_PUBLISH_RETRY, "out of memory publishing event %s", id_of(m));
        return -1;
    }
    if (rk->len > 255) {
        char shown[120];
        outbox_kit_text_line(rk->data, shown, sizeof shown);
        outbox_kit_result(r, OUTBOX_PUBLISH_REJECT,
                          "event %s: its routing key \"%s...\" is %zu bytes; AMQP allows 255",
                          id_of(m), shown, rk->len);
        return -1;
    }

    amqp_basic_properties_t *p = &out->props;
    memset(p, 0, sizeof *p);
    p->_flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_HEADERS_FLAG;
    p->delivery_mode = AMQP_DELIVERY_PERSISTENT;
    if (m->event_id && strlen(m->event_id) <= 255) {
        p->_flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
        p->message_id = amqp_cstring_bytes(m->event_id);
    }
    const char *type = outbox_kit_header(m, "type");
    if (type && strlen(type) <= 255) {
        p->_flags |= AMQP_BASIC_TYPE_FLAG;
        p->type = amqp_cstring_bytes(type);
    }
    const char *ct = outbox_kit_header(m, "datacontenttype");
    if (ct && strlen(ct) <= 255) {
        p->_flags |= AMQP_BASIC_CONTENT_TYPE_FLAG;
        p->content_type = amqp_cstring_bytes(ct);
    }
    if (m->row && m->row->occurred_at > 0) {
        p->_flags |= AMQP_BASIC_TIMESTAMP_FLAG;
        p->timestamp = (uint64_t)(m->row->occurred_at / 1000000);
    }
    /* Every other attribute as an application property cloudEvents_<name>
     * (traceparent under its own name), and the key as partitionkey when
     * the relay gave none. */
    amqp_table_entry_t *e = out->entries;
    size_t n = 0;
    bool has_key = false;
    for (size_t k = 0; k < m->n_headers && n + 1 < AMQP_MAX_HEADERS; k++) {
        const outbox_header_t *hd = &m->headers[k];
        if (hd->name == NULL || hd->value == NULL)
            continue;
        /* The binding puts datacontenttype in content_type alone. */
        if (strcmp(hd->name, "datacontenttype") == 0 && (p->_flags & AMQP_BASIC_CONTENT_TYPE_FLAG))
            continue;
        if (strcmp(hd->name, "traceparent") == 0)
            snprintf(out->names[n], sizeof out->names[n], "%s", hd->name);
        else
            snprintf(out->names[n], sizeof out->names[n], AMQP_CE_PREFIX "%s", hd->name);
        has_key = has_key || strcmp(hd->name, "partitionkey") == 0;
        e[n].key = amqp_cstring_bytes(out->names[n]);
        e[n].value.kind = AMQP_FIELD_KIND_UTF8;
        e[n].value.value.bytes = amqp_cstring_bytes(hd->value);
        n++;
    }
    if (!has_key && m->key) {
        snprintf(out->names[n], sizeof out->names[n], AMQP_CE_PREFIX "partitionkey");
        e[n].key = amqp_cstring_bytes(out->names[n]);
        e[n].value.kind = AMQP_FIELD_KIND_UTF8;
        e[n].value.value.bytes = amqp_cstring_bytes(m->key);
        n++;
    }
    p->headers.num_entries = (int)n;
    p->headers.entries = e;
    return 0;
}

int outbox_amqp_send(const amqp_sink_t *h, amqp_connection_state_t conn,
                     const outbox_message_t *m, const outbox_kit_buf_t *rk, const amqp_out_t *out)
{
    amqp_bytes_t body = {.len = m->payload_len, .bytes = (void *)m->payload};
    return amqp_basic_publish(conn, 1, amqp_cstring_bytes(h->exchange),
                              amqp_cstring_bytes(rk->data), 1, 0, &out->props, body);
}

/* Sends message i; 0, or -1 when it did not leave (its result then set). */
static int send_one(call_t *c, size_t i, outbox_kit_buf_t *rk)
{
    amqp_sink_t *h = c->h;
    const outbox_message_t *m = &c->msgs[i];
    outbox_publish_result_t *r = &c->results[i];
    amqp_out_t out;
    if (outbox_amqp_prepare(h, m, rk, &out, r) != 0)
        return -1;
    int st = outbox_amqp_send(h, h->conn, m, rk, &out);
    if (st != AMQP_STATUS_OK) {
        outbox_kit_result(r, OUTBOX_PUBLISH_RETRY, "event %s not sent: %s", id_of(m),
                          amqp_error_string2(st));
        return -1;
    }
    return 0;
}

int outbox_amqp_publish(void *handle, const outbox_message_t *msgs, size_t n,
                        outbox_publish_result_t *results, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_amqp_host;
    amqp_sink_t *h = handle;
    outbox_kit_keys_t k;
    if (outbox_kit_keys_init(&k, host, msgs, n) != 0)
        return host->error(d, OUTBOX_ENOMEM, "out of memory publishing %zu events", n);
    /* One block: the round's publishes, then a state and a returned mark
     * per message, all SLOT_IDLE and 0. */
    call_t c = {.h = h, .msgs = msgs, .results = results};
    c.sent = host->alloc(n * sizeof *c.sent + 2 * n);
    if (c.sent == NULL) {
        outbox_kit_keys_free(&k);
        return host->error(d, OUTBOX_ENOMEM, "out of memory publishing %zu events", n);
    }
    c.state = memset(c.sent + n, 0, 2 * n);
    c.returned = c.state + n;
    unsigned char *state = c.state;
    size_t *sent = c.sent;
    outbox_kit_show_duration(h->timeout_ms * 1000, c.tmo, sizeof c.tmo);

    check_idle_connection(h);
    char why[OUTBOX_MESSAGE_MAX / 2] = "";
    if (h->conn == NULL) {
        if (outbox_amqp_connect(&h->cfg, true, &h->conn, why, sizeof why) == 0)
            h->last_tag = 0;
    }

    outbox_kit_buf_t rk;
    outbox_kit_buf_init(&rk, host);
    int64_t deadline = host->monotonic_us() + h->timeout_ms * 1000;
    do {
        const char *skip = NULL;
        char text[2 * OUTBOX_MESSAGE_MAX];
        if (h->conn == NULL) {
            snprintf(text, sizeof text, "not connected to the AMQP broker %s%s%s", h->shown,
                     why[0] ? ": " : "", why);
            skip = text;
        } else if (host->monotonic_us() >= deadline) {
            snprintf(text, sizeof text,
                     "not sent: the call's confirm timeout of %s was spent on events ahead of it",
                     c.tmo);
            skip = text;
        }
        if (skip != NULL) {
            for (size_t r = 0; r < k.n_round; r++) {
                outbox_kit_result(&results[k.round[r]], OUTBOX_PUBLISH_RETRY, "%s", skip);
                outbox_kit_keys_hold(&k, k.round[r], msgs, results, "was not sent");
            }
            break;
        }

        c.n_sent = c.acked = c.ret_from = c.pending = 0;
        c.first_tag = h->last_tag + 1;
        bool broken = false;
        for (size_t r = 0; r < k.n_round; r++) {
            size_t i = k.round[r];
            if (broken) {
                outbox_kit_result(&results[i], OUTBOX_PUBLISH_RETRY,
                                  "event %s not sent: the connection to the broker broke",
                                  id_of(&msgs[i]));
                state[i] = SLOT_DONE;
                continue;
            }
            if (send_one(&c, i, &rk) != 0) {
                state[i] = SLOT_DONE;
                /* A failed write leaves the connection unusable. */
                broken = results[i].status == OUTBOX_PUBLISH_RETRY && !rk.failed;
                continue;
            }
            state[i] = SLOT_SENT;
            sent[c.n_sent++] = i;
            c.pending++;
            h->last_tag++;
        }
        if (broken && c.pending > 0)
            fail_pending(&c, "no confirm: the connection to the broker (%s) broke while "
                             "sending",
                         h->shown);
        else if (broken)
            drop_connection(h);
        else if (c.pending > 0)
            wait_confirms(&c, deadline);
        if (h->conn == NULL)
            snprintf(why, sizeof why, "the connection was lost in this call");

        /* Every message of the round is settled now: each lets the next of
         * its key into the next round, or holds the rest of its key back. */
        for (size_t r = 0; r < k.n_round; r++) {
            size_t i = k.round[r];
            if (results[i].status == OUTBOX_PUBLISH_OK)
                outbox_kit_keys_ok(&k, i);
            else if (results[i].status == OUTBOX_PUBLISH_REJECT)
                outbox_kit_keys_hold(&k, i, msgs, results, "was refused in this call");
            else
                outbox_kit_keys_hold(&k, i, msgs, results, "failed in this call");
        }
    } while (outbox_kit_keys_next(&k) > 0);
    outbox_kit_buf_free(&rk);
    if (h->conn != NULL)
        amqp_maybe_release_buffers(h->conn);
    h->last_used_us = host->monotonic_us();
    outbox_kit_keys_free(&k);
    host->free(c.sent);
    return OUTBOX_OK;
}
