/* Streams: checking and removing one, and the reader (XREAD from the
 * start, on a connection of its own). The reader reports every field of
 * an entry, data included, as a wire header under its field name. */
#include <stdio.h>
#include <string.h>

#include "redis_int.h"

#define READER_BATCH "200"

/* The type of key: "none", "stream", "string", ... into out. */
static int key_type(redis_sink_t *h, redisContext *c, const char *key, char *out, size_t size,
                    outbox_diag_t *d)
{
    outbox_kit_buf_t scratch;
    outbox_kit_buf_init(&scratch, outbox_redis_host);
    const char *argv[2] = {"TYPE", key};
    redisReply *r = outbox_redis_command(c, &scratch, 2, argv);
    outbox_kit_buf_free(&scratch);
    int rc = OUTBOX_OK;
    char text[256];
    if (r == NULL) {
        outbox_kit_redact(outbox_redis_host, h->cfg.redactor, c->errstr, text, sizeof text);
        rc = outbox_redis_host->error(d, OUTBOX_ETRANSIENT, "Redis sink %s: TYPE %s: %s", h->shown,
                                      key, text);
    } else if (r->type != REDIS_REPLY_STATUS) {
        outbox_kit_redact(outbox_redis_host, h->cfg.redactor,
                          r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply", text,
                          sizeof text);
        rc = outbox_redis_host->error(d, OUTBOX_ETRANSIENT, "Redis sink %s: TYPE %s: %s", h->shown,
                                      key, text);
    } else {
        snprintf(out, size, "%s", r->str);
    }
    freeReplyObject(r);
    return rc;
}

/* A connection for one admin call: the sink's own, (re)connected. */
static int admin_conn(redis_sink_t *h, outbox_diag_t *d)
{
    if (h->c != NULL && h->c->err) {
        redisFree(h->c);
        h->c = NULL;
    }
    if (h->c == NULL)
        return outbox_redis_connect(&h->cfg, h->shown, &h->c, d);
    return OUTBOX_OK;
}

/* A stream needs no creating: the first XADD makes it. What can stop
 * publishing is a key of another type under that name, which this says. */
int outbox_redis_destination_create(void *handle, const char *destination, outbox_diag_t *d)
{
    redis_sink_t *h = handle;
    char type[32];
    int rc = admin_conn(h, d);
    if (rc == OUTBOX_OK)
        rc = key_type(h, h->c, destination, type, sizeof type, d);
    if (rc == OUTBOX_OK && strcmp(type, "none") != 0 && strcmp(type, "stream") != 0)
        rc = outbox_redis_host->error(d, OUTBOX_EPERMANENT,
                                      "Redis sink %s: key %s holds a %s, not a stream", h->shown,
                                      destination, type);
    return rc;
}

/* DEL of the stream; a key of another type is left alone. */
int outbox_redis_destination_drop(void *handle, const char *destination, outbox_diag_t *d)
{
    redis_sink_t *h = handle;
    char type[32];
    int rc = admin_conn(h, d);
    if (rc == OUTBOX_OK)
        rc = key_type(h, h->c, destination, type, sizeof type, d);
    if (rc != OUTBOX_OK || strcmp(type, "none") == 0)
        return rc;
    if (strcmp(type, "stream") != 0)
        return outbox_redis_host->error(d, OUTBOX_EPERMANENT,
                                        "Redis sink %s: key %s holds a %s, not a stream: not "
                                        "dropped",
                                        h->shown, destination, type);
    outbox_kit_buf_t scratch;
    outbox_kit_buf_init(&scratch, outbox_redis_host);
    const char *argv[2] = {"DEL", destination};
    redisReply *r = outbox_redis_command(h->c, &scratch, 2, argv);
    outbox_kit_buf_free(&scratch);
    char text[256];
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        outbox_kit_redact(outbox_redis_host, h->cfg.redactor, r ? r->str : h->c->errstr, text,
                          sizeof text);
        rc = outbox_redis_host->error(d, OUTBOX_ETRANSIENT, "Redis sink %s: DEL %s: %s", h->shown,
                                      destination, text);
    }
    freeReplyObject(r);
    return rc;
}

/* ------------------------------------------------------------- reader */

typedef struct redis_reader {
    redis_config_t cfg;   /* a copy: the sink may be closed while the reader lives */
    char shown[OUTBOX_MESSAGE_MAX / 2];
    redisContext *c;
    char *stream;
    char last_id[64];     /* the last entry handed out; "0-0" before the first */
    redisReply *batch;    /* the entries of the last XREAD */
    size_t next;          /* the next entry of batch to hand out */
    outbox_kit_received_t attrs; /* the attributes of the entry handed out, and its fields */
    outbox_kit_buf_t scratch;
} redis_reader_t;

void outbox_redis_reader_close(void *reader)
{
    redis_reader_t *r = reader;
    if (r == NULL)
        return;
    freeReplyObject(r->batch);
    redisFree(r->c);
    outbox_redis_config_free(&r->cfg);
    outbox_redis_host->free(r->stream);
    outbox_kit_received_free(&r->attrs);
    outbox_kit_buf_free(&r->scratch);
    outbox_redis_host->free(r);
}

int outbox_redis_reader_open(void *handle, const char *destination, void **reader,
                             outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_redis_host;
    redis_sink_t *h = handle;
    *reader = NULL;
    redis_reader_t *r = host->alloc(sizeof *r);
    if (r == NULL)
        return host->error(d, OUTBOX_ENOMEM, "out of memory opening a Redis reader");
    memset(r, 0, sizeof *r);
    outbox_kit_buf_init(&r->scratch, host);
    outbox_kit_received_init(&r->attrs, host);
    snprintf(r->shown, sizeof r->shown, "%s", h->shown);
    snprintf(r->last_id, sizeof r->last_id, "0-0");
    r->stream = outbox_kit_strdup(host, destination);
    if (r->stream == NULL || outbox_redis_config_copy(&h->cfg, &r->cfg) != 0) {
        outbox_redis_reader_close(r);
        return host->error(d, OUTBOX_ENOMEM, "out of memory opening a Redis reader");
    }
    int rc = outbox_redis_connect(&r->cfg, r->shown, &r->c, d);
    if (rc != OUTBOX_OK) {
        outbox_redis_reader_close(r);
        return rc;
    }
    *reader = r;
    return OUTBOX_OK;
}

/* XREAD COUNT n [BLOCK ms] STREAMS key last_id into r->batch (the
 * entries array, or NULL when none came). */
static int fetch(redis_reader_t *r, int timeout_ms, outbox_diag_t *d)
{
    freeReplyObject(r->batch);
    r->batch = NULL;
    r->next = 0;
    char block[24];
    snprintf(block, sizeof block, "%d", timeout_ms);
    const char *with_block[8] = {"XREAD", "COUNT", READER_BATCH, "BLOCK", block,
                                 "STREAMS", r->stream, r->last_id};
    const char *without[6] = {"XREAD", "COUNT", READER_BATCH, "STREAMS", r->stream, r->last_id};
    /* The socket waits for the block, and the sink's timeout beyond it. */
    int64_t wait_ms = r->cfg.timeout_ms + (timeout_ms > 0 ? timeout_ms : 0);
    struct timeval tv = {.tv_sec = (time_t)(wait_ms / 1000),
                         .tv_usec = (suseconds_t)(wait_ms % 1000) * 1000};
    redisSetTimeout(r->c, tv);
    redisReply *rep = timeout_ms > 0
                          ? outbox_redis_command(r->c, &r->scratch, 8, with_block)
                          : outbox_redis_command(r->c, &r->scratch, 6, without);
    char text[256];
    if (rep == NULL || rep->type == REDIS_REPLY_ERROR) {
        outbox_kit_redact(outbox_redis_host, r->cfg.redactor, rep ? rep->str : r->c->errstr, text,
                          sizeof text);
        freeReplyObject(rep);
        return outbox_redis_host->error(d, OUTBOX_ETRANSIENT, "Redis reader (%s) on %s: %s",
                                        r->shown, r->stream, text);
    }
    /* [[key, [[id, [f, v, ...]], ...]]], or nil when nothing came. */
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 &&
        rep->element[0]->type == REDIS_REPLY_ARRAY && rep->element[0]->elements == 2 &&
        rep->element[0]->element[1]->type == REDIS_REPLY_ARRAY) {
        r->batch = rep;
        return OUTBOX_OK;
    }
    int nil = rep->type == REDIS_REPLY_NIL;
    freeReplyObject(rep);
    if (nil)
        return OUTBOX_OK;
    return outbox_redis_host->error(d, OUTBOX_ETRANSIENT,
                                    "Redis reader (%s) on %s: XREAD gave an unexpected reply",
                                    r->shown, r->stream);
}

static redisReply *batch_entries(const redis_reader_t *r)
{
    return r->batch ? r->batch->element[0]->element[1] : NULL;
}

int outbox_redis_reader_next(void *reader, int timeout_ms, outbox_received_t *out,
                             outbox_diag_t *d)
{
    redis_reader_t *r = reader;
    redisReply *entries = batch_entries(r);
    if (entries == NULL || r->next >= entries->elements) {
        int rc = fetch(r, timeout_ms > 0 ? timeout_ms : 0, d);
        if (rc != OUTBOX_OK)
            return rc;
        entries = batch_entries(r);
        if (entries == NULL || entries->elements == 0)
            return OUTBOX_ENOTFOUND;
    }
    redisReply *e = entries->element[r->next++];
    if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
        e->element[0]->type != REDIS_REPLY_STRING || e->element[1]->type != REDIS_REPLY_ARRAY)
        return outbox_redis_host->error(d, OUTBOX_ETRANSIENT,
                                        "Redis reader (%s) on %s: an entry of an unexpected shape",
                                        r->shown, r->stream);
    snprintf(r->last_id, sizeof r->last_id, "%s", e->element[0]->str);
    redisReply *f = e->element[1];
    /* Every member is ABI 1.2's, which every caller's struct holds. */
    out->destination = r->stream;
    out->key = NULL;
    out->dedupe_id = NULL; /* Redis has no dedupe id */
    out->payload = "";
    out->payload_len = 0;
    outbox_kit_received_reset(&r->attrs);
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        redisReply *name = f->element[i], *value = f->element[i + 1];
        if (name->type != REDIS_REPLY_STRING || value->type != REDIS_REPLY_STRING)
            continue;
        outbox_kit_received_wire(&r->attrs, name->str, name->len, value->str, value->len);
        if (strcmp(name->str, "data") == 0) {
            out->payload = value->str;
            out->payload_len = value->len;
            continue;
        }
        if (strcmp(name->str, "partitionkey") == 0)
            out->key = value->str;
        outbox_kit_received_add(&r->attrs, name->str, name->len, value->str, value->len);
    }
    if (r->attrs.text.failed)
        return outbox_redis_host->error(d, OUTBOX_ENOMEM, "Redis reader (%s) on %s: out of memory",
                                        r->shown, r->stream);
    outbox_kit_received_fill(&r->attrs, out);
    return OUTBOX_OK;
}
