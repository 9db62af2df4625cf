/* The Kafka sink, on top: its producer ceiling (outbox/ceiling.h),
 * compiled with the driver's sources into outbox-bench only.
 *
 * Everything but the loop is the driver's: the sink is opened through the
 * host as the relay opens it (the host splits the URI, kafka_conf.c reads
 * every option and refuses what the sink refuses), the producer is made
 * from the librdkafka configuration the driver builds (its defaults, the
 * URI's properties, the pinned acks=all, idempotence and gapless
 * guarantee), each message's topic comes from the URI's template as the
 * driver resolves it, and each message is handed over by the driver's own
 * outbox_kafka_produce (key, payload, the CloudEvents headers as the sink
 * names them). What is left out is the sink's bookkeeping: no kept slots,
 * no per-key holds, no purge and retry after a refusal. A chunk is handed
 * to librdkafka whole, then its delivery reports are awaited; any failure
 * fails the chunk. */
#include <stdio.h>
#include <string.h>

#include "kafka_int.h"
#include "outbox/ceiling.h"

/* The descriptor kafka.c defines when built with
 * -DOUTBOX_DRIVER_STATIC=kafka_ceiling. */
const outbox_driver_t *outbox_driver_entry_kafka_ceiling(void);

typedef struct kceil {
    outbox_sink_t *sink;  /* the driver's handle, for its configuration */
    kafka_sink_t *k;
    rd_kafka_t *rk;       /* the ceiling's producer, on the driver's configuration */
    outbox_kit_buf_t topic;
    size_t delivered;     /* reports of the current chunk */
    size_t failed;
    rd_kafka_resp_err_t first;
} kceil_t;

static const char *kceil_client(void)
{
    static char v[64];
    snprintf(v, sizeof v, "librdkafka %s", rd_kafka_version_str());
    return v;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    (void)opaque;
    kceil_t *c = m->_private;
    if (c == NULL)
        return;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        c->delivered++;
    } else if (c->failed++ == 0) {
        c->first = m->err;
    }
}

static void kceil_close(void *producer)
{
    kceil_t *c = producer;
    if (c == NULL)
        return;
    if (c->rk != NULL) {
        rd_kafka_flush(c->rk, 1000);
        rd_kafka_purge(c->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_destroy(c->rk);
    }
    outbox_kit_buf_free(&c->topic);
    outbox_sink_close(c->sink);
    outbox_kafka_host->free(c);
}

/* The sink through the host, with the driver this ceiling was built with;
 * its handle in *k. */
static int open_sink(const char *uri, outbox_sink_t **sink, kafka_sink_t **k, char *err,
                     size_t errlen)
{
    void *handle = NULL;
    int rc = outbox_ceiling_sink_open(outbox_driver_entry_kafka_ceiling(), KAFKA_SINK_NAME, uri, sink, &handle, err,
                                      errlen);
    *k = handle;
    return rc;
}

/* A producer on the driver's configuration, with the ceiling's delivery
 * reports; the broker's metadata fetched, so that the connection is made
 * before the clock. */
static int make_producer(kceil_t *c, char *err, size_t errlen)
{
    outbox_diag_t d = {0};
    c->rk = outbox_kafka_producer_new(&c->k->cfg, on_delivery, &d);
    if (c->rk == NULL) {
        snprintf(err, errlen, "%s", d.message);
        return OUTBOX_CEILING_USAGE;
    }
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(c->rk, 0, NULL, &md, (int)c->k->cfg.timeout_ms);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        char last[256];
        outbox_kafka_last_error(c->k->cfg.secrets, last, sizeof last);
        snprintf(err, errlen, "kafka ceiling %s: no broker answered: %s%s%s", c->k->cfg.shown,
                 rd_kafka_err2str(e), last[0] ? "; " : "", last);
        return OUTBOX_CEILING_FAIL;
    }
    rd_kafka_metadata_destroy(md);
    return 0;
}

static int kceil_open(const char *sink_uri, void **producer, char *err, size_t errlen)
{
    *producer = NULL;
    kceil_t *c = outbox_kafka_host ? outbox_kafka_host->alloc(sizeof *c) : NULL;
    if (c == NULL) {
        snprintf(err, errlen, outbox_kafka_host ? "out of memory"
                                                : "the Kafka ceiling's driver is not registered");
        return OUTBOX_CEILING_FAIL;
    }
    memset(c, 0, sizeof *c);
    outbox_kit_buf_init(&c->topic, outbox_kafka_host);
    int rc = open_sink(sink_uri, &c->sink, &c->k, err, errlen);
    if (rc == 0) {
        /* The sink's own producer is not used: its reports belong to the
         * sink's slots. */
        outbox_kafka_producer_drop(c->k);
        rc = make_producer(c, err, errlen);
    }
    if (rc != 0) {
        kceil_close(c);
        return rc;
    }
    *producer = c;
    return 0;
}

/* Hands m to librdkafka, waiting while its queue is full, until deadline. */
static int produce(kceil_t *c, const outbox_message_t *m, int64_t deadline, char *err,
                   size_t errlen)
{
    outbox_kit_buf_reset(&c->topic);
    outbox_kit_destination(&c->topic, c->k->cfg.topic_tpl, m);
    if (c->topic.failed) {
        snprintf(err, errlen, "out of memory");
        return OUTBOX_CEILING_FAIL;
    }
    for (;;) {
        rd_kafka_resp_err_t e = outbox_kafka_produce(c->rk, c->topic.data, m, c);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
            return 0;
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL || outbox_kafka_host->monotonic_us() >= deadline) {
            snprintf(err, errlen, "kafka ceiling: topic %s: %s", c->topic.data, rd_kafka_err2str(e));
            return OUTBOX_CEILING_FAIL;
        }
        rd_kafka_poll(c->rk, 10);
    }
}

/* The chunk of n: every message handed over, then every report awaited
 * in 1 ms flushes (one long flush returns only in steps of up to 10 ms),
 * within the sink's timeout. */
static int kceil_publish(void *producer, const outbox_message_t *msgs, size_t n, char *err,
                         size_t errlen)
{
    kceil_t *c = producer;
    const outbox_host_t *h = outbox_kafka_host;
    int64_t deadline = h->monotonic_us() + c->k->cfg.timeout_ms * 1000;
    c->delivered = c->failed = 0;
    c->first = RD_KAFKA_RESP_ERR_NO_ERROR;
    size_t queued = 0;
    int rc = 0;
    for (; rc == 0 && queued < n; queued++)
        rc = produce(c, &msgs[queued], deadline, err, errlen);
    if (rc != 0)
        queued--;
    while (c->delivered + c->failed < queued && h->monotonic_us() < deadline)
        rd_kafka_flush(c->rk, 1);
    if (rc != 0)
        return rc;
    if (c->failed > 0 || c->delivered != n) {
        char last[256];
        outbox_kafka_last_error(c->k->cfg.secrets, last, sizeof last);
        snprintf(err, errlen, "kafka ceiling: %zu of %zu delivered, %zu failed: %s%s%s",
                 c->delivered, n, c->failed,
                 c->failed ? rd_kafka_err2str(c->first) : "no delivery report within timeout",
                 last[0] ? "; " : "", last);
        /* Nothing of this chunk may report into a later one. */
        rd_kafka_purge(c->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        int64_t until = h->monotonic_us() + 2000000;
        while (rd_kafka_outq_len(c->rk) > 0 && h->monotonic_us() < until)
            rd_kafka_poll(c->rk, 10);
        return OUTBOX_CEILING_FAIL;
    }
    return 0;
}

static const outbox_driver_t *kceil_driver(void)
{
    return outbox_driver_entry_kafka_ceiling();
}

const outbox_sink_ceiling_t outbox_ceiling_kafka = {
    .struct_size = sizeof(outbox_sink_ceiling_t),
    .name = KAFKA_SINK_NAME,
    .driver = kceil_driver,
    .client = kceil_client,
    .open = kceil_open,
    .publish = kceil_publish,
    .close = kceil_close,
};
