/* outbox-bench: the Kafka producer ceiling. A bare librdkafka producer,
 * configured as the Kafka sink configures its own (acks=all,
 * enable.idempotence=true, enable.gapless.guarantee=true, linger.ms=5
 * unless the URI says otherwise, and every librdkafka property the sink
 * URI passes through), publishes the messages
 * the relay would publish (same payload bytes, keys and CloudEvents
 * headers) to a fresh topic, --batch at a time: all of a chunk is handed to
 * rd_kafka_producev(), then rd_kafka_flush() in 1 ms slices waits for its
 * delivery reports, as a client that must know each message is stored
 * before it goes on does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>

#include "bench.h"

/* The sink URI's own names, which are not librdkafka properties. */
static const char *const sink_names[] = {"timeout", "partition_timeout", "partitions", "replication",
                                         "bootstrap.servers", "metadata.broker.list", NULL};

typedef struct kstate {
    long delivered, failed;
    char first_error[256];
} kstate_t;

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    kstate_t *st = opaque;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        st->delivered++;
    } else {
        if (st->failed++ == 0)
            snprintf(st->first_error, sizeof st->first_error, "%s", rd_kafka_err2str(m->err));
    }
}

static int conf_set(rd_kafka_conf_t *conf, const char *k, const char *v, char *err, size_t errlen)
{
    char why[512];
    if (rd_kafka_conf_set(conf, k, v, why, sizeof why) != RD_KAFKA_CONF_OK) {
        snprintf(err, errlen, "kafka producer ceiling: %s=%s: %s", k, v, why);
        return BENCH_EXIT_USAGE;
    }
    return 0;
}

/* The Kafka binary binding's header name for a CloudEvents attribute. */
static const char *header_name(const char *attr, char *buf, size_t size)
{
    if (strcmp(attr, "datacontenttype") == 0)
        return "content-type";
    if (strcmp(attr, "traceparent") == 0)
        return attr;
    snprintf(buf, size, "ce_%s", attr);
    return buf;
}

/* One of the sink URI's parameters into conf, as the sink passes it on:
 * its own names skipped, PROPERTY_env=VARIABLE as the variable's value
 * (never shown), the rest as librdkafka properties. */
static int conf_param(rd_kafka_conf_t *conf, const char *key, const char *value, char *err,
                      size_t errlen)
{
    for (const char *const *s = sink_names; *s; s++)
        if (strcmp(*s, key) == 0)
            return 0;
    size_t kl = strlen(key);
    if (kl <= 4 || strcmp(key + kl - 4, "_env") != 0)
        return conf_set(conf, key, value, err, errlen);
    const char *v = getenv(value);
    if (v == NULL || v[0] == '\0') {
        snprintf(err, errlen, "kafka producer ceiling: %s names environment variable %s, "
                 "which is not set or empty", key, value);
        return BENCH_EXIT_USAGE;
    }
    char prop[256], why[512];
    snprintf(prop, sizeof prop, "%.*s", (int)(kl - 4), key);
    if (rd_kafka_conf_set(conf, prop, v, why, sizeof why) != RD_KAFKA_CONF_OK) {
        /* The value came from the environment: never shown. */
        snprintf(err, errlen, "kafka producer ceiling: %s=***: refused by librdkafka", prop);
        return BENCH_EXIT_USAGE;
    }
    return 0;
}

/* The producer's configuration in drivers/sink-kafka/kafka_conf.c's
 * order: its defaults, the URI's properties, then what it pins
 * (message.timeout.ms is its default timeout of 30 s plus 10 s). */
static int kafka_conf(rd_kafka_conf_t *conf, const bench_sink_uri_t *u, char *err, size_t errlen)
{
    char brokers[300];
    snprintf(brokers, sizeof brokers, "%s%s%s:%d", strchr(u->host, ':') ? "[" : "", u->host,
             strchr(u->host, ':') ? "]" : "", u->port ? u->port : 9092);
    /* Errors only: librdkafka warns at every start that the gapless
     * guarantee is experimental. */
    int rc = conf_set(conf, "log_level", "3", err, errlen);
    if (rc == 0)
        rc = conf_set(conf, "linger.ms", "5", err, errlen);
    for (long i = 0; rc == 0 && i < u->n_params; i++)
        rc = conf_param(conf, u->key[i], u->value[i], err, errlen);
    static const char *const pinned[][2] = {
        {"enable.idempotence", "true"},
        {"acks", "all"},
        {"enable.gapless.guarantee", "true"},
        {"message.timeout.ms", "40000"},
    };
    if (rc == 0)
        rc = conf_set(conf, "bootstrap.servers", brokers, err, errlen);
    for (size_t i = 0; rc == 0 && i < sizeof pinned / sizeof pinned[0]; i++)
        rc = conf_set(conf, pinned[i][0], pinned[i][1], err, errlen);
    return rc;
}

/* Hands message m to librdkafka, waiting while its queue is full. */
static int produce_one(rd_kafka_t *rk, rd_kafka_topic_t *rkt, const outbox_message_t *m,
                       const char *const *hname, char *err, size_t errlen)
{
    rd_kafka_headers_t *h = rd_kafka_headers_new(m->n_headers);
    for (size_t k = 0; k < m->n_headers; k++)
        rd_kafka_header_add(h, hname[k], -1, m->headers[k].value, -1);
    for (;;) {
        rd_kafka_resp_err_t e = rd_kafka_producev(
            rk, RD_KAFKA_V_RKT(rkt), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_KEY(m->key, strlen(m->key)),
            RD_KAFKA_V_VALUE((void *)m->payload, m->payload_len), RD_KAFKA_V_HEADERS(h),
            RD_KAFKA_V_END);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
            return 0;
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            rd_kafka_headers_destroy(h);
            snprintf(err, errlen, "kafka producer ceiling: produce: %s", rd_kafka_err2str(e));
            return BENCH_EXIT_FAIL;
        }
        rd_kafka_poll(rk, 10);
    }
}

/* Every delivery report of a chunk, until st holds want of them. While
 * rd_kafka_flush() runs, the broker threads send without waiting for
 * linger.ms; but one long flush() waits for the reports in steps of up to
 * 10 ms (a lone message takes 10 ms to come back that way on this
 * machine, 2 ms with 1 ms flushes), so it is called in 1 ms slices. */
static int wait_chunk(rd_kafka_t *rk, kstate_t *st, long want, long total, char *err,
                      size_t errlen)
{
    int64_t deadline = bench_mono_us() + 60000000;
    while (st->delivered + st->failed < want && bench_mono_us() < deadline)
        rd_kafka_flush(rk, 1);
    if (st->failed || st->delivered != want) {
        snprintf(err, errlen, "kafka producer ceiling: %ld of %ld delivered, %ld failed (%s)",
                 st->delivered, total, st->failed,
                 st->first_error[0] ? st->first_error : "timed out after 60 s");
        return BENCH_EXIT_FAIL;
    }
    return 0;
}

/* Every message of ms, o->batch at a time, each chunk's reports awaited;
 * hname[] are the headers' names. */
static int produce_all(rd_kafka_t *rk, rd_kafka_topic_t *rkt, const bench_msgs_t *ms,
                       const char *const *hname, const bench_opts_t *o, kstate_t *st, char *err,
                       size_t errlen)
{
    int rc = 0;
    for (long i = 0; rc == 0 && i < ms->n;) {
        long chunk = ms->n - i < o->batch ? ms->n - i : o->batch;
        long want = st->delivered + st->failed + chunk;
        for (long j = i; rc == 0 && j < i + chunk; j++)
            rc = produce_one(rk, rkt, &ms->m[j], hname, err, errlen);
        if (rc == 0)
            rc = wait_chunk(rk, st, want, ms->n, err, errlen);
        i += chunk;
    }
    return rc;
}

static int kafka_drain(const bench_sink_uri_t *u, const char *target, const bench_msgs_t *ms,
                       const bench_opts_t *o, bench_drain_t *out, char *err, size_t errlen)
{
    kstate_t st = {0};
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    int rc = kafka_conf(conf, u, err, errlen);
    if (rc != 0) {
        rd_kafka_conf_destroy(conf);
        return rc;
    }
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_opaque(conf, &st);
    char why[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof why);
    if (!rk) {
        rd_kafka_conf_destroy(conf);
        snprintf(err, errlen, "kafka producer ceiling: %s", why);
        return BENCH_EXIT_FAIL;
    }
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, target, NULL);
    char names[BENCH_CE_MAX][64];
    const char *hname[BENCH_CE_MAX];
    for (size_t k = 0; ms->n > 0 && k < ms->m[0].n_headers; k++)
        hname[k] = header_name(ms->m[0].headers[k].name, names[k], sizeof names[k]);

    double cpu0 = bench_cpu_s();
    int64_t t0 = bench_mono_us();
    rc = produce_all(rk, rkt, ms, hname, o, &st, err, errlen);
    out->seconds = (double)(bench_mono_us() - t0) / 1e6;
    out->cpu_s = bench_cpu_s() - cpu0;
    out->published = st.delivered;
    rd_kafka_topic_destroy(rkt);
    rd_kafka_flush(rk, 5000);
    rd_kafka_destroy(rk);
    return rc;
}

const bench_producer_t bench_kafka_producer = {
    .scheme = "kafka",
    .client = "librdkafka",
    .drain = kafka_drain,
};
