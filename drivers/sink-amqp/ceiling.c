/* AMQP 0-9-1 (RabbitMQ) sink, on top beside amqp.c: its producer ceiling
 * (outbox/ceiling.h), compiled with the driver's sources into outbox-bench
 * and its test only.
 *
 * Everything but the pacing is the driver's: the URI (credentials, vhost,
 * TLS, exchange, routing key template, timeouts, max_bytes) is read and
 * the confirm-mode connection made by the driver's own open, and each
 * message is checked, routed and given its properties by the driver's
 * outbox_amqp_prepare and sent by its outbox_amqp_send. What the ceiling
 * leaves out is what the sink adds for the relay: rounds per key, verdicts
 * per message, reconnects. Every basic.publish of a chunk is written at
 * once, then the chunk waits once for its confirms (one basic.ack may
 * cover many), within the sink's timeout; a nack, a returned message or a
 * closed channel fails the chunk, and the connection is then dropped so
 * that no late confirm meets the next chunk.
 *
 * The sink is opened through the host (its one URI parser, then the
 * driver's open), and the ceiling works on the driver's handle behind it
 * (outbox_sink_driver_handle). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "amqp_int.h"
#include "outbox/ceiling.h"

/* The descriptor amqp.c defines when built with
 * -DOUTBOX_DRIVER_STATIC=amqp_ceiling. */
const outbox_driver_t *outbox_driver_entry_amqp_ceiling(void);

/* ---------------------------------------------------------- the producer */

typedef struct producer {
    outbox_sink_t *sink; /* the driver's sink, opened through the host */
    amqp_sink_t *h;      /* its handle: config, confirm-mode connection */
    uint64_t last_tag;   /* the delivery tag of the last publish on the channel */
} producer_t;

static const outbox_driver_t *ceil_driver(void)
{
    return outbox_driver_entry_amqp_ceiling();
}

static const char *ceil_client(void)
{
    static char v[64];
    if (v[0] == '\0')
        snprintf(v, sizeof v, "librabbitmq %s", amqp_version());
    return v;
}

static void ceil_close(void *producer)
{
    producer_t *p = producer;
    if (p == NULL)
        return;
    outbox_sink_close(p->sink);
    free(p);
}

static int ceil_open(const char *sink_uri, void **producer, char *err, size_t errlen)
{
    *producer = NULL;
    producer_t *p = calloc(1, sizeof *p);
    if (p == NULL) {
        snprintf(err, errlen, "out of memory");
        return OUTBOX_CEILING_FAIL;
    }
    void *handle = NULL;
    int rc = outbox_ceiling_sink_open(ceil_driver(), AMQP_SINK_NAME, sink_uri, &p->sink, &handle,
                                      err, errlen);
    if (rc != 0) {
        ceil_close(p);
        return rc;
    }
    p->h = handle;
    if (p->h == NULL) {
        snprintf(err, errlen, "the AMQP ceiling's driver gave no handle");
        ceil_close(p);
        return OUTBOX_CEILING_FAIL;
    }
    /* The sink's open leaves a broker that does not answer to publish; a
     * ceiling measures a connected client, and says why it is not. */
    if (p->h->conn == NULL) {
        char why[OUTBOX_MESSAGE_MAX / 2];
        if (outbox_amqp_connect(&p->h->cfg, true, &p->h->conn, why, sizeof why) != 0) {
            snprintf(err, errlen, "AMQP sink %s: cannot connect: %s", p->h->shown, why);
            ceil_close(p);
            return OUTBOX_CEILING_FAIL;
        }
    }
    *producer = p;
    return 0;
}

/* Fails the chunk with one line and drops the connection, so that close
 * does not wait on a broker that may be gone and no late confirm is read
 * as the next chunk's. */
static int chunk_fail(producer_t *p, char *err, size_t errlen, const char *fmt, ...)
    OUTBOX_PRINTF(4, 5);
static int chunk_fail(producer_t *p, char *err, size_t errlen, const char *fmt, ...)
{
    char text[OUTBOX_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    outbox_kit_text_line(text, err, errlen);
    outbox_amqp_disconnect(p->h->conn, false);
    p->h->conn = NULL;
    return OUTBOX_CEILING_FAIL;
}

/* Reads the broker's answers until the sent tags first..first+sent-1 are
 * all confirmed, within the sink's timeout. */
static int wait_confirms(producer_t *p, uint64_t first, size_t sent, unsigned char *settled,
                         char *err, size_t errlen)
{
    const outbox_host_t *host = outbox_amqp_host;
    amqp_sink_t *h = p->h;
    int64_t deadline = host->monotonic_us() + h->timeout_ms * 1000;
    size_t acked = 0, nacked = 0;
    while (acked + nacked < sent) {
        int64_t left = deadline - host->monotonic_us();
        if (left <= 0)
            return chunk_fail(p, err, errlen, "no confirm for %zu of %zu events within %lld ms",
                              sent - acked - nacked, sent, (long long)h->timeout_ms);
        struct timeval tv = {.tv_sec = (time_t)(left / 1000000),
                             .tv_usec = (suseconds_t)(left % 1000000)};
        amqp_frame_t f;
        int st = amqp_simple_wait_frame_noblock(h->conn, &f, &tv);
        if (st == AMQP_STATUS_TIMEOUT)
            continue;
        if (st != AMQP_STATUS_OK)
            return chunk_fail(p, err, errlen, "the connection to the broker (%s) was lost: %s",
                              h->shown, amqp_error_string2(st));
        if (f.frame_type != AMQP_FRAME_METHOD)
            continue;
        amqp_method_number_t id = f.payload.method.id;
        if (id == AMQP_BASIC_ACK_METHOD || id == AMQP_BASIC_NACK_METHOD) {
            uint64_t tag;
            bool multiple;
            if (id == AMQP_BASIC_ACK_METHOD) {
                const amqp_basic_ack_t *a = f.payload.method.decoded;
                tag = a->delivery_tag, multiple = a->multiple;
            } else {
                const amqp_basic_nack_t *a = f.payload.method.decoded;
                tag = a->delivery_tag, multiple = a->multiple;
            }
            if (tag < first || tag - first >= sent)
                continue;
            for (size_t k = multiple ? 0 : (size_t)(tag - first); k <= (size_t)(tag - first); k++) {
                if (settled[k])
                    continue;
                settled[k] = 1;
                if (id == AMQP_BASIC_ACK_METHOD)
                    acked++;
                else
                    nacked++;
            }
        } else if (id == AMQP_BASIC_RETURN_METHOD) {
            amqp_message_t msg;
            amqp_rpc_reply_t rr = amqp_read_message(h->conn, f.channel, &msg, 0);
            if (rr.reply_type == AMQP_RESPONSE_NORMAL)
                amqp_destroy_message(&msg);
            return chunk_fail(p, err, errlen,
                              "the broker returned an event: its routing key routes to no queue");
        } else if (id == AMQP_CHANNEL_CLOSE_METHOD || id == AMQP_CONNECTION_CLOSE_METHOD) {
            amqp_rpc_reply_t rr = {.reply_type = AMQP_RESPONSE_SERVER_EXCEPTION,
                                   .reply = f.payload.method};
            char why[256];
            outbox_amqp_reply_text(h->cfg.redactor, rr, why, sizeof why);
            return chunk_fail(p, err, errlen, "the broker closed the %s: %s",
                              id == AMQP_CHANNEL_CLOSE_METHOD ? "channel" : "connection", why);
        }
    }
    if (nacked > 0)
        return chunk_fail(p, err, errlen, "the broker nacked %zu of %zu events", nacked, sent);
    return 0;
}

static int ceil_publish(void *producer, const outbox_message_t *msgs, size_t n, char *err,
                        size_t errlen)
{
    producer_t *p = producer;
    amqp_sink_t *h = p->h;
    if (h->conn == NULL) {
        snprintf(err, errlen, "not connected to the AMQP broker %s (an earlier chunk failed)",
                 h->shown);
        return OUTBOX_CEILING_FAIL;
    }
    unsigned char *settled = calloc(n ? n : 1, 1);
    if (settled == NULL) {
        snprintf(err, errlen, "out of memory");
        return OUTBOX_CEILING_FAIL;
    }
    outbox_kit_buf_t rk;
    outbox_kit_buf_init(&rk, outbox_amqp_host);
    uint64_t first = p->last_tag + 1;
    size_t sent = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const outbox_message_t *m = &msgs[i];
        amqp_out_t out;
        outbox_publish_result_t r = {0};
        if (outbox_amqp_prepare(h, m, &rk, &out, &r) != 0) {
            rc = chunk_fail(p, err, errlen, "%s", r.message);
            break;
        }
        int st = outbox_amqp_send(h, h->conn, m, &rk, &out);
        if (st != AMQP_STATUS_OK) {
            rc = chunk_fail(p, err, errlen, "event %s not sent: %s",
                            m->event_id ? m->event_id : "?", amqp_error_string2(st));
            break;
        }
        sent++;
        p->last_tag++;
    }
    outbox_kit_buf_free(&rk);
    if (rc == 0 && sent > 0)
        rc = wait_confirms(p, first, sent, settled, err, errlen);
    if (rc == 0)
        amqp_maybe_release_buffers(h->conn);
    free(settled);
    return rc;
}

const outbox_sink_ceiling_t outbox_ceiling_amqp = {
    .struct_size = sizeof(outbox_sink_ceiling_t),
    .name = AMQP_SINK_NAME,
    .driver = ceil_driver,
    .client = ceil_client,
    .open = ceil_open,
    .publish = ceil_publish,
    .close = ceil_close,
};
