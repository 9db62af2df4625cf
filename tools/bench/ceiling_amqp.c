/* outbox-bench: the AMQP (RabbitMQ) producer ceiling. A bare librabbitmq
 * connection in confirm mode publishes the messages the relay would
 * publish (same payload bytes; persistent, mandatory, message_id the
 * event id, type, content_type, timestamp, and the other CloudEvents
 * attributes as cloudEvents_<name> application properties) to the queue
 * of a fresh destination through the default exchange, --batch at a
 * time: every basic.publish of the chunk written at once, then one wait
 * for the chunk's confirms (an ack may cover many). A returned or nacked
 * message fails the run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <amqp.h>
#include <amqp_tcp_socket.h>

#include "bench.h"

static int amqp_fail(const char *what, const char *why, char *err, size_t errlen)
{
    snprintf(err, errlen, "amqp producer ceiling: %s: %s", what, why);
    return BENCH_EXIT_FAIL;
}

static const char *reply_why(amqp_rpc_reply_t r)
{
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION)
        return amqp_error_string2(r.library_error);
    return r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION ? "refused by the broker" : "no reply";
}

/* Connects, logs in (RabbitMQ's default guest account: the sink URI's
 * user and password are not in bench_sink_uri_t), opens channel 1 and
 * puts it in confirm mode. */
static int amqp_connect(amqp_connection_state_t conn, const bench_sink_uri_t *u, char *err,
                        size_t errlen)
{
    amqp_socket_t *sock = conn ? amqp_tcp_socket_new(conn) : NULL;
    if (sock == NULL)
        return amqp_fail("connect", "out of memory", err, errlen);
    struct timeval tv = {10, 0};
    int st = amqp_socket_open_noblock(sock, u->host, u->port ? u->port : 5672, &tv);
    if (st != AMQP_STATUS_OK)
        return amqp_fail("connect", amqp_error_string2(st), err, errlen);
    amqp_rpc_reply_t r =
        amqp_login(conn, "/", 0, AMQP_DEFAULT_FRAME_SIZE, 60, AMQP_SASL_METHOD_PLAIN, "guest", "guest");
    if (r.reply_type == AMQP_RESPONSE_NORMAL) {
        amqp_channel_open(conn, 1);
        r = amqp_get_rpc_reply(conn);
    }
    if (r.reply_type == AMQP_RESPONSE_NORMAL) {
        amqp_confirm_select(conn, 1);
        r = amqp_get_rpc_reply(conn);
    }
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        return amqp_fail("login and confirm.select", reply_why(r), err, errlen);
    return 0;
}

/* Publishes m, persistent and mandatory, to target's queue through the
 * default exchange; names[] are the headers' names. */
static int publish_one(amqp_connection_state_t conn, const char *target, const outbox_message_t *m,
                       char names[][64], char *err, size_t errlen)
{
    amqp_basic_properties_t p;
    memset(&p, 0, sizeof p);
    p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_HEADERS_FLAG |
               AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TIMESTAMP_FLAG;
    p.delivery_mode = AMQP_DELIVERY_PERSISTENT;
    p.message_id = amqp_cstring_bytes(m->event_id);
    p.timestamp = (uint64_t)time(NULL);
    amqp_table_entry_t e[BENCH_CE_MAX];
    int n = 0;
    for (size_t k = 0; k < m->n_headers; k++) {
        const outbox_header_t *h = &m->headers[k];
        if (strcmp(h->name, "datacontenttype") == 0) {
            p._flags |= AMQP_BASIC_CONTENT_TYPE_FLAG;
            p.content_type = amqp_cstring_bytes(h->value);
            continue;
        }
        if (strcmp(h->name, "type") == 0) {
            p._flags |= AMQP_BASIC_TYPE_FLAG;
            p.type = amqp_cstring_bytes(h->value);
        }
        e[n].key = amqp_cstring_bytes(names[k]);
        e[n].value.kind = AMQP_FIELD_KIND_UTF8;
        e[n].value.value.bytes = amqp_cstring_bytes(h->value);
        n++;
    }
    p.headers.num_entries = n;
    p.headers.entries = e;
    amqp_bytes_t body = {.len = m->payload_len, .bytes = (void *)m->payload};
    int st = amqp_basic_publish(conn, 1, amqp_empty_bytes, amqp_cstring_bytes(target), 1, 0, &p,
                                body);
    return st == AMQP_STATUS_OK ? 0 : amqp_fail("publish", amqp_error_string2(st), err, errlen);
}

/* The confirms so far: delivery tags up to done are settled. */
typedef struct confirms {
    long sent, acked, refused;
    uint64_t tag, done;
} confirms_t;

/* One frame while confirms are awaited: an ack or nack (which may cover
 * every tag up to its own), a returned message, or a closed channel. */
static int on_frame(amqp_connection_state_t conn, const amqp_frame_t *f, confirms_t *c, char *err,
                    size_t errlen)
{
    if (f->frame_type != AMQP_FRAME_METHOD)
        return 0;
    amqp_method_number_t id = f->payload.method.id;
    if (id == AMQP_BASIC_ACK_METHOD || id == AMQP_BASIC_NACK_METHOD) {
        const amqp_basic_ack_t *a = f->payload.method.decoded; /* same layout for nack */
        uint64_t upto = a->multiple ? a->delivery_tag : c->done + 1;
        long now = (long)(upto - c->done);
        if (id == AMQP_BASIC_ACK_METHOD)
            c->acked += now;
        else
            c->refused += now;
        c->done = upto;
    } else if (id == AMQP_BASIC_RETURN_METHOD) {
        amqp_message_t msg;
        amqp_rpc_reply_t r = amqp_read_message(conn, f->channel, &msg, 0);
        if (r.reply_type == AMQP_RESPONSE_NORMAL)
            amqp_destroy_message(&msg);
        return amqp_fail("publish", "a message was returned: no queue for the routing key", err,
                         errlen);
    } else if (id == AMQP_CHANNEL_CLOSE_METHOD || id == AMQP_CONNECTION_CLOSE_METHOD) {
        return amqp_fail("publish", "the broker closed the channel", err, errlen);
    }
    return 0;
}

/* One wait for a chunk's confirms: every tag sent so far settled. */
static int wait_confirms(amqp_connection_state_t conn, confirms_t *c, char *err, size_t errlen)
{
    int rc = 0;
    c->done = c->tag - (uint64_t)(c->sent - c->acked - c->refused);
    while (rc == 0 && c->done < c->tag) {
        amqp_frame_t f;
        struct timeval wait = {60, 0};
        int st = amqp_simple_wait_frame_noblock(conn, &f, &wait);
        if (st != AMQP_STATUS_OK)
            return amqp_fail("waiting for confirms", amqp_error_string2(st), err, errlen);
        rc = on_frame(conn, &f, c, err, errlen);
    }
    if (rc == 0 && c->refused > 0)
        rc = amqp_fail("publish", "the broker nacked messages", err, errlen);
    return rc;
}

static int amqp_drain(const bench_sink_uri_t *u, const char *target, const bench_msgs_t *ms,
                      const bench_opts_t *o, bench_drain_t *out, char *err, size_t errlen)
{
    confirms_t c = {0};
    double cpu0 = bench_cpu_s();
    int64_t t0 = bench_mono_us();
    amqp_connection_state_t conn = amqp_new_connection();
    int rc = amqp_connect(conn, u, err, errlen);
    char names[BENCH_CE_MAX][64];
    for (size_t k = 0; ms->n > 0 && k < ms->m[0].n_headers; k++) {
        const char *a = ms->m[0].headers[k].name;
        snprintf(names[k], sizeof names[k], strcmp(a, "traceparent") == 0 ? "%s" : "cloudEvents_%s", a);
    }
    for (long i = 0; rc == 0 && i < ms->n;) {
        long chunk = ms->n - i < o->batch ? ms->n - i : o->batch;
        for (long j = i; rc == 0 && j < i + chunk; j++) {
            rc = publish_one(conn, target, &ms->m[j], names, err, errlen);
            if (rc == 0)
                c.sent++, c.tag++;
        }
        if (rc == 0)
            rc = wait_confirms(conn, &c, err, errlen);
        amqp_maybe_release_buffers(conn);
        i += chunk;
    }
    out->seconds = (double)(bench_mono_us() - t0) / 1e6;
    out->cpu_s = bench_cpu_s() - cpu0;
    out->published = c.acked;
    if (conn) {
        if (rc == 0) {
            amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS);
            amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
        }
        amqp_destroy_connection(conn);
    }
    return rc;
}

const bench_producer_t bench_amqp_producer = {
    .scheme = "amqp",
    .client = "librabbitmq",
    .drain = amqp_drain,
};
