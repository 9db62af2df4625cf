/* Queues (destination_create/drop) and the reader, each on a connection
 * of its own.
 *
 * destination_create declares a durable queue named after the destination
 * and, when the sink publishes to a named exchange, binds it there with
 * the routing key the sink's template gives that destination.
 *
 * The reader consumes the queue with manual acknowledgement and never
 * acknowledges: what it read goes back to the queue, in its place, when
 * the reader closes (the broker requeues a closed channel's unacknowledged
 * messages), so reading takes nothing away. Besides the CloudEvents
 * attributes it reports, as wire headers, the basic properties the sink
 * sets (content_type, message_id, type, timestamp) and every entry of the
 * headers table, each under its AMQP name. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "amqp_int.h"

typedef struct amqp_reader {
    amqp_connection_state_t conn;
    amqp_envelope_t env;
    bool has_env;
    char *queue;
    outbox_kit_received_t attrs;  /* the current message's attributes and wire headers */
    char dedupe[256];             /* and its message_id, an AMQP short string */
    outbox_redactor_t *redactor;  /* the password: the reader may outlive the sink */
    char shown[OUTBOX_MESSAGE_MAX / 2];
} amqp_reader_t;

static int queue_name_ok(const amqp_sink_t *h, const char *destination, outbox_diag_t *d)
{
    if (destination == NULL || destination[0] == '\0' || strlen(destination) > 255)
        return outbox_amqp_host->error(d, OUTBOX_EINVAL,
                                       "AMQP sink %s: a queue name is 1 to 255 bytes", h->shown);
    return OUTBOX_OK;
}

/* The error of a failed queue call: the broker's refusal (no such queue
 * or exchange, a queue declared with other arguments, no permission) is
 * EINVAL, no answer is ETRANSIENT. */
static int rpc_failure(const amqp_sink_t *h, amqp_rpc_reply_t r, const char *what,
                       const char *name, outbox_diag_t *d)
{
    char text[300], shown[120];
    bool server = outbox_amqp_reply_text(h->cfg.redactor, r, text, sizeof text);
    outbox_kit_text_line(name, shown, sizeof shown);
    return outbox_amqp_host->error(d, server ? OUTBOX_EINVAL : OUTBOX_ETRANSIENT,
                                   "AMQP sink %s: %s %s: %s", h->shown, what, shown, text);
}

static int connect_for(const amqp_sink_t *h, const char *what, amqp_connection_state_t *conn,
                       outbox_diag_t *d)
{
    char why[OUTBOX_MESSAGE_MAX / 2];
    if (outbox_amqp_connect(&h->cfg, false, conn, why, sizeof why) != 0)
        return outbox_amqp_host->error(d, OUTBOX_ETRANSIENT,
                                       "AMQP sink %s: cannot connect to %s: %s", h->shown, what,
                                       why);
    return OUTBOX_OK;
}

int outbox_amqp_destination_create(void *handle, const char *destination, outbox_diag_t *d)
{
    amqp_sink_t *h = handle;
    int rc = queue_name_ok(h, destination, d);
    amqp_connection_state_t conn = NULL;
    if (rc == OUTBOX_OK)
        rc = connect_for(h, "declare a queue", &conn, d);
    if (rc != OUTBOX_OK)
        return rc;
    amqp_bytes_t q = amqp_cstring_bytes(destination);
    amqp_queue_declare(conn, 1, q, 0, 1, 0, 0, amqp_empty_table);
    amqp_rpc_reply_t r = amqp_get_rpc_reply(conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        rc = rpc_failure(h, r, "declaring queue", destination, d);
    if (rc == OUTBOX_OK && h->exchange[0] != '\0') {
        /* The routing key the sink gives messages bound for destination. */
        outbox_kit_buf_t rk;
        outbox_kit_buf_init(&rk, outbox_amqp_host);
        outbox_kit_template(&rk, h->rk_tpl, destination, destination);
        if (rk.failed) {
            rc = outbox_amqp_host->error(d, OUTBOX_ENOMEM, "out of memory binding a queue");
        } else {
            amqp_queue_bind(conn, 1, q, amqp_cstring_bytes(h->exchange),
                            amqp_cstring_bytes(rk.data), amqp_empty_table);
            r = amqp_get_rpc_reply(conn);
            if (r.reply_type != AMQP_RESPONSE_NORMAL)
                rc = rpc_failure(h, r, "binding to the exchange the queue", destination, d);
        }
        outbox_kit_buf_free(&rk);
    }
    outbox_amqp_disconnect(conn, rc == OUTBOX_OK);
    return rc;
}

int outbox_amqp_destination_drop(void *handle, const char *destination, outbox_diag_t *d)
{
    amqp_sink_t *h = handle;
    int rc = queue_name_ok(h, destination, d);
    amqp_connection_state_t conn = NULL;
    if (rc == OUTBOX_OK)
        rc = connect_for(h, "delete a queue", &conn, d);
    if (rc != OUTBOX_OK)
        return rc;
    /* Deleting a queue that does not exist succeeds on RabbitMQ. */
    amqp_queue_delete(conn, 1, amqp_cstring_bytes(destination), 0, 0);
    amqp_rpc_reply_t r = amqp_get_rpc_reply(conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        rc = rpc_failure(h, r, "deleting queue", destination, d);
    outbox_amqp_disconnect(conn, rc == OUTBOX_OK);
    return rc;
}

static void reader_release(amqp_reader_t *r)
{
    if (r->has_env)
        amqp_destroy_envelope(&r->env);
    r->has_env = false;
    if (r->conn)
        amqp_maybe_release_buffers(r->conn);
}

void outbox_amqp_reader_close(void *reader)
{
    amqp_reader_t *r = reader;
    if (r == NULL)
        return;
    reader_release(r);
    outbox_amqp_disconnect(r->conn, true);
    outbox_kit_received_free(&r->attrs);
    outbox_kit_redactor_free(outbox_amqp_host, r->redactor);
    outbox_amqp_host->free(r->queue);
    outbox_amqp_host->free(r);
}

int outbox_amqp_reader_open(void *handle, const char *destination, void **reader, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_amqp_host;
    amqp_sink_t *h = handle;
    *reader = NULL;
    int rc = queue_name_ok(h, destination, d);
    if (rc != OUTBOX_OK)
        return rc;
    amqp_reader_t *r = host->alloc(sizeof *r);
    if (r == NULL)
        return host->error(d, OUTBOX_ENOMEM, "out of memory opening an AMQP reader");
    memset(r, 0, sizeof *r);
    outbox_kit_received_init(&r->attrs, host);
    snprintf(r->shown, sizeof r->shown, "%s", h->shown);
    r->queue = outbox_kit_strdup(host, destination);
    outbox_uri_t secrets = {.password = h->cfg.password};
    r->redactor = outbox_kit_redactor_new(host, &secrets);
    if (r->queue == NULL || r->redactor == NULL) {
        outbox_amqp_reader_close(r);
        return host->error(d, OUTBOX_ENOMEM, "out of memory opening an AMQP reader");
    }
    rc = connect_for(h, "read a queue", &r->conn, d);
    if (rc == OUTBOX_OK) {
        /* No prefetch limit: nothing is acknowledged, so a limit would
         * stop the deliveries after that many. */
        amqp_basic_qos(r->conn, 1, 0, 0, 0);
        amqp_rpc_reply_t rr = amqp_get_rpc_reply(r->conn);
        if (rr.reply_type == AMQP_RESPONSE_NORMAL) {
            amqp_basic_consume(r->conn, 1, amqp_cstring_bytes(destination), amqp_empty_bytes, 0, 0,
                               0, amqp_empty_table);
            rr = amqp_get_rpc_reply(r->conn);
        }
        if (rr.reply_type != AMQP_RESPONSE_NORMAL)
            rc = rpc_failure(h, rr, "consuming queue", destination, d);
    }
    if (rc != OUTBOX_OK) {
        outbox_amqp_reader_close(r);
        return rc;
    }
    *reader = r;
    return OUTBOX_OK;
}

/* The attribute an application property carries, or NULL. */
static const char *attribute_name(amqp_bytes_t key, size_t *len)
{
    static const size_t pl = sizeof AMQP_CE_PREFIX - 1;
    const char *k = key.bytes;
    if (key.len > pl && (memcmp(k, AMQP_CE_PREFIX, pl) == 0 || memcmp(k, AMQP_CE_PREFIX_OLD, pl) == 0)) {
        *len = key.len - pl;
        return k + pl;
    }
    if (key.len == 11 && memcmp(k, "traceparent", 11) == 0) {
        *len = key.len;
        return k;
    }
    return NULL;
}

/* The text of a headers-table value: strings as they are, numbers and
 * booleans as their decimal text (in num), a nested table or array and
 * void as nothing. *len is its length. */
static const char *field_text(const amqp_field_value_t *v, char *num, size_t size, size_t *len)
{
    int n = -1;
    switch (v->kind) {
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES:
        *len = v->value.bytes.len;
        return v->value.bytes.len ? v->value.bytes.bytes : "";
    case AMQP_FIELD_KIND_BOOLEAN:
        n = snprintf(num, size, "%s", v->value.boolean ? "true" : "false");
        break;
    case AMQP_FIELD_KIND_I8: n = snprintf(num, size, "%d", v->value.i8); break;
    case AMQP_FIELD_KIND_U8: n = snprintf(num, size, "%u", (unsigned)v->value.u8); break;
    case AMQP_FIELD_KIND_I16: n = snprintf(num, size, "%d", v->value.i16); break;
    case AMQP_FIELD_KIND_U16: n = snprintf(num, size, "%u", (unsigned)v->value.u16); break;
    case AMQP_FIELD_KIND_I32: n = snprintf(num, size, "%" PRId32, v->value.i32); break;
    case AMQP_FIELD_KIND_U32: n = snprintf(num, size, "%" PRIu32, v->value.u32); break;
    case AMQP_FIELD_KIND_I64: n = snprintf(num, size, "%" PRId64, v->value.i64); break;
    case AMQP_FIELD_KIND_U64:
    case AMQP_FIELD_KIND_TIMESTAMP: n = snprintf(num, size, "%" PRIu64, v->value.u64); break;
    case AMQP_FIELD_KIND_F32: n = snprintf(num, size, "%.9g", (double)v->value.f32); break;
    case AMQP_FIELD_KIND_F64: n = snprintf(num, size, "%.17g", v->value.f64); break;
    case AMQP_FIELD_KIND_DECIMAL:
        n = snprintf(num, size, "%" PRIu32 "e-%u", v->value.decimal.value,
                     (unsigned)v->value.decimal.decimals);
        break;
    default: break;
    }
    *len = n > 0 && (size_t)n < size ? (size_t)n : 0;
    return *len ? num : "";
}

/* The basic properties the sink sets, under their AMQP names, when present. */
static void wire_properties(outbox_kit_received_t *h, const amqp_basic_properties_t *p)
{
    if (p->_flags & AMQP_BASIC_CONTENT_TYPE_FLAG)
        outbox_kit_received_wire(h, "content_type", 12, p->content_type.bytes, p->content_type.len);
    if (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
        outbox_kit_received_wire(h, "message_id", 10, p->message_id.bytes, p->message_id.len);
    if (p->_flags & AMQP_BASIC_TYPE_FLAG)
        outbox_kit_received_wire(h, "type", 4, p->type.bytes, p->type.len);
    if (p->_flags & AMQP_BASIC_TIMESTAMP_FLAG) {
        char ts[24];
        int n = snprintf(ts, sizeof ts, "%" PRIu64, p->timestamp);
        outbox_kit_received_wire(h, "timestamp", 9, ts, (size_t)n);
    }
}

int outbox_amqp_reader_next(void *reader, int timeout_ms, outbox_received_t *out, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_amqp_host;
    amqp_reader_t *r = reader;
    reader_release(r);
    int ms = timeout_ms > 0 ? timeout_ms : 1;
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    amqp_rpc_reply_t rr = amqp_consume_message(r->conn, &r->env, &tv, 0);
    if (rr.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && rr.library_error == AMQP_STATUS_TIMEOUT)
        return OUTBOX_ENOTFOUND;
    if (rr.reply_type != AMQP_RESPONSE_NORMAL) {
        char text[300];
        outbox_amqp_reply_text(r->redactor, rr, text, sizeof text);
        return host->error(d, OUTBOX_ETRANSIENT, "AMQP reader of queue %s (%s): %s", r->queue,
                           r->shown, text);
    }
    r->has_env = true;
    const amqp_basic_properties_t *p = &r->env.message.properties;

    outbox_kit_received_reset(&r->attrs);
    wire_properties(&r->attrs, p);
    bool has_ct = false;
    for (int k = 0; (p->_flags & AMQP_BASIC_HEADERS_FLAG) && k < p->headers.num_entries; k++) {
        const amqp_table_entry_t *e = &p->headers.entries[k];
        char num[48];
        size_t vlen = 0;
        const char *value = field_text(&e->value, num, sizeof num, &vlen);
        outbox_kit_received_wire(&r->attrs, e->key.bytes, e->key.len, value, vlen);
        size_t len = 0;
        const char *name = attribute_name(e->key, &len);
        /* One place is kept for content_type. */
        if (name == NULL || r->attrs.n + 1 >= OUTBOX_KIT_RECEIVED_MAX ||
            (e->value.kind != AMQP_FIELD_KIND_UTF8 && e->value.kind != AMQP_FIELD_KIND_BYTES))
            continue;
        has_ct = has_ct || (len == 15 && memcmp(name, "datacontenttype", 15) == 0);
        outbox_kit_received_add(&r->attrs, name, len, value, vlen);
    }
    if (!has_ct && (p->_flags & AMQP_BASIC_CONTENT_TYPE_FLAG))
        outbox_kit_received_add(&r->attrs, "datacontenttype", 15, p->content_type.bytes,
                                p->content_type.len);
    if (r->attrs.text.failed)
        return host->error(d, OUTBOX_ENOMEM, "out of memory reading queue %s", r->queue);
    bool has_id = (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) != 0;
    if (has_id)
        snprintf(r->dedupe, sizeof r->dedupe, "%.*s", (int)p->message_id.len,
                 p->message_id.len ? (const char *)p->message_id.bytes : "");
    outbox_kit_received_fill(&r->attrs, out);
    out->destination = r->queue;
    out->key = NULL; /* AMQP has none: the key is the partitionkey attribute */
    out->dedupe_id = has_id ? r->dedupe : NULL;
    out->payload = r->env.message.body.bytes ? r->env.message.body.bytes : "";
    out->payload_len = r->env.message.body.len;
    return OUTBOX_OK;
}
