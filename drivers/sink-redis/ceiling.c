/* The Redis Streams sink, on top: its producer ceiling (outbox/ceiling.h),
 * compiled with the driver's sources into outbox-bench only.
 *
 * Everything but the loop is the driver's: the sink is opened through the
 * host as the relay opens it (the host splits the URI, redis.c reads every
 * option), the connection is the driver's (redis_conn.c: connect, AUTH,
 * SELECT, Sentinel), each entry's stream comes from the URI's template as
 * the driver resolves it and each XADD (MAXLEN, the fields) is written by
 * the driver's outbox_redis_put_xadd, and commands go out and replies come
 * back through redis_wire.c. What is left out is the sink's bookkeeping:
 * no per-key scripts that stop a key at its first failure, no verdicts. A
 * chunk is one pipeline: every XADD written, then every reply read (the
 * server's acknowledgement), then WAIT when the URI asks for replicas; any
 * error fails the chunk. */
#include <stdio.h>
#include <string.h>

#include "outbox/ceiling.h"
#include "redis_int.h"

/* The descriptor redis.c defines when built with
 * -DOUTBOX_DRIVER_STATIC=redis_ceiling. */
const outbox_driver_t *outbox_driver_entry_redis_ceiling(void);

typedef struct rceil {
    outbox_sink_t *sink;  /* the driver's handle: its configuration and connection */
    redis_sink_t *h;
    outbox_kit_buf_t out;    /* a chunk's commands */
    outbox_kit_buf_t stream; /* a message's stream key */
} rceil_t;

static const char *rceil_client(void)
{
    static char v[64];
    snprintf(v, sizeof v, "hiredis %d.%d.%d", HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH);
    return v;
}

static void rceil_close(void *producer)
{
    rceil_t *c = producer;
    if (c == NULL)
        return;
    outbox_kit_buf_free(&c->out);
    outbox_kit_buf_free(&c->stream);
    outbox_sink_close(c->sink);
    outbox_redis_host->free(c);
}

/* The sink through the host, with the driver this ceiling was built with;
 * its handle in *h. */
static int open_sink(const char *uri, outbox_sink_t **sink, redis_sink_t **h, char *err,
                     size_t errlen)
{
    void *handle = NULL;
    int rc = outbox_ceiling_sink_open(outbox_driver_entry_redis_ceiling(), REDIS_SINK_NAME, uri, sink, &handle, err,
                                      errlen);
    *h = handle;
    return rc;
}

/* The sink's connection, made now when its open could not (the server was
 * not there): the ceiling connects before the clock. */
static int connect_now(redis_sink_t *h, char *err, size_t errlen)
{
    if (h->c != NULL && h->c->err == 0)
        return 0;
    redisFree(h->c);
    h->c = NULL;
    outbox_diag_t d = {0};
    int rc = outbox_redis_connect(&h->cfg, h->shown, &h->c, &d);
    if (rc == OUTBOX_OK)
        return 0;
    snprintf(err, errlen, "%s", d.message);
    return rc == OUTBOX_EINVAL ? OUTBOX_CEILING_USAGE : OUTBOX_CEILING_FAIL;
}

static int rceil_open(const char *sink_uri, void **producer, char *err, size_t errlen)
{
    *producer = NULL;
    rceil_t *c = outbox_redis_host ? outbox_redis_host->alloc(sizeof *c) : NULL;
    if (c == NULL) {
        snprintf(err, errlen, outbox_redis_host ? "out of memory"
                                                : "the Redis ceiling's driver is not registered");
        return OUTBOX_CEILING_FAIL;
    }
    memset(c, 0, sizeof *c);
    outbox_kit_buf_init(&c->out, outbox_redis_host);
    outbox_kit_buf_init(&c->stream, outbox_redis_host);
    int rc = open_sink(sink_uri, &c->sink, &c->h, err, errlen);
    if (rc == 0)
        rc = connect_now(c->h, err, errlen);
    if (rc != 0) {
        rceil_close(c);
        return rc;
    }
    *producer = c;
    return 0;
}

/* The connection's failure as one line, secrets masked. */
static int conn_fail(rceil_t *c, const char *what, char *err, size_t errlen)
{
    char text[300];
    outbox_kit_redact(outbox_redis_host, c->h->cfg.redactor, c->h->c->errstr, text, sizeof text);
    snprintf(err, errlen, "redis ceiling %s: %s: %s", c->h->shown, what, text);
    return OUTBOX_CEILING_FAIL;
}

/* WAIT for the URI's wait_replicas, as the sink does after a call. */
static int wait_replicas(rceil_t *c, char *err, size_t errlen)
{
    redis_sink_t *h = c->h;
    char want[24], ms[24];
    snprintf(want, sizeof want, "%ld", h->wait_replicas);
    snprintf(ms, sizeof ms, "%lld", (long long)h->wait_timeout_ms);
    const char *argv[3] = {"WAIT", want, ms};
    redisReply *r = outbox_redis_command(h->c, &c->out, 3, argv);
    if (r == NULL)
        return conn_fail(c, "WAIT", err, errlen);
    int ok = r->type == REDIS_REPLY_INTEGER && r->integer >= h->wait_replicas;
    if (!ok)
        snprintf(err, errlen, "redis ceiling: WAIT %s: %lld replicas had the chunk", want,
                 r->type == REDIS_REPLY_INTEGER ? r->integer : -1LL);
    freeReplyObject(r);
    return ok ? 0 : OUTBOX_CEILING_FAIL;
}

static int rceil_publish(void *producer, const outbox_message_t *msgs, size_t n, char *err,
                         size_t errlen)
{
    rceil_t *c = producer;
    redis_sink_t *h = c->h;
    outbox_kit_buf_reset(&c->out);
    for (size_t i = 0; i < n; i++) {
        outbox_kit_buf_reset(&c->stream);
        outbox_kit_destination(&c->stream, h->stream_tpl, &msgs[i]);
        outbox_redis_put_xadd(h, &c->out, &msgs[i], &c->stream);
    }
    if (c->out.failed || c->stream.failed) {
        snprintf(err, errlen, "out of memory");
        return OUTBOX_CEILING_FAIL;
    }
    if (outbox_redis_send(h->c, c->out.data, c->out.len) != 0)
        return conn_fail(c, "sending", err, errlen);
    size_t refused = 0;
    char first[300] = "";
    for (size_t i = 0; i < n; i++) {
        redisReply *r = outbox_redis_reply(h->c);
        if (r == NULL)
            return conn_fail(c, "reading the replies", err, errlen);
        if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS && refused++ == 0)
            outbox_kit_redact(outbox_redis_host, h->cfg.redactor,
                              r->type == REDIS_REPLY_ERROR ? r->str : "an unexpected reply",
                              first, sizeof first);
        freeReplyObject(r);
    }
    if (refused > 0) {
        snprintf(err, errlen, "redis ceiling: %zu of %zu XADD refused: %s", refused, n, first);
        return OUTBOX_CEILING_FAIL;
    }
    return h->wait_replicas > 0 ? wait_replicas(c, err, errlen) : 0;
}

static const outbox_driver_t *rceil_driver(void)
{
    return outbox_driver_entry_redis_ceiling();
}

const outbox_sink_ceiling_t outbox_ceiling_redis = {
    .struct_size = sizeof(outbox_sink_ceiling_t),
    .name = REDIS_SINK_NAME,
    .driver = rceil_driver,
    .client = rceil_client,
    .open = rceil_open,
    .publish = rceil_publish,
    .close = rceil_close,
};
