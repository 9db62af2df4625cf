/* The kafka: sink (librdkafka): each message becomes one Kafka record,
 * key = the message key, value = the payload bytes, and the CloudEvents
 * attributes as headers in the Kafka binding's binary mode (ce_id,
 * ce_type, ..., content-type, traceparent).
 *
 * The descriptor, open and close. kafka_conf.c reads the URI,
 * kafka_publish.c produces, kafka_topic.c creates and drops topics and
 * reads them back. */
#include <string.h>

#include "kafka_int.h"
#include "outbox/version.h"

const outbox_host_t *outbox_kafka_host;

#ifdef OUTBOX_DRIVER_STATIC
_Thread_local kafka_sink_t *outbox_kafka_opened;
#endif

static int kafka_init(const outbox_host_t *h, outbox_diag_t *d)
{
    (void)d;
    outbox_kafka_host = h;
    return OUTBOX_OK;
}

static int kafka_open(const outbox_sink_open_t *params, void **handle, outbox_diag_t *d)
{
    *handle = NULL;
    kafka_sink_t *k = outbox_kafka_host->alloc(sizeof *k);
    if (k == NULL)
        return outbox_kafka_host->error(d, OUTBOX_ENOMEM, "out of memory opening the kafka sink");
    memset(k, 0, sizeof *k);
    k->defer_ok = OUTBOX_STRUCT_HAS(outbox_sink_open_t, params, defer_ok) && params->defer_ok;
    int rc = outbox_kafka_config_parse(params->uri, &k->cfg, d);
    if (rc != OUTBOX_OK) {
        outbox_kafka_host->free(k);
        return rc;
    }
    /* librdkafka connects lazily: an unreachable broker is no error here;
     * publish reports it (RETRY) within the timeout. */
    rc = outbox_kafka_producer(k, d);
    if (rc != OUTBOX_OK) {
        outbox_kafka_config_free(&k->cfg);
        outbox_kafka_host->free(k);
        return rc;
    }
    /* After a broker dies, its partitions have no leader until the
     * controllers fence it (broker.session.timeout.ms, 9 s by default) and
     * elect new ones: 8 to 12 s measured on a 3-node KRaft cluster. A call
     * that gives up sooner takes back every message still pending, on
     * healthy partitions too, and the relay's breaker pauses the route. */
    if (k->cfg.timeout_ms < KAFKA_ELECTION_MS)
        outbox_kafka_host->log(OUTBOX_LOG_WARN, KAFKA_SINK_NAME,
                               "%s: timeout=%lldms is shorter than a partition leader election after "
                               "a broker dies (about 10 s): such a death would turn whole batches "
                               "into RETRY and send them again; %ds or more rides one out",
                               k->cfg.shown, (long long)k->cfg.timeout_ms, KAFKA_ELECTION_MS / 1000);
    if (k->cfg.has_creds) {
        int sasl = 0;
        for (size_t i = 0; i < k->cfg.n_params; i++)
            if (strcmp(k->cfg.params[i].key, "security.protocol") == 0 &&
                strncmp(k->cfg.params[i].value, "sasl", 4) == 0)
                sasl = 1;
        if (!sasl)
            outbox_kafka_host->log(OUTBOX_LOG_WARN, KAFKA_SINK_NAME,
                                   "%s: the user and password are for SASL, and security.protocol "
                                   "is not sasl_plaintext or sasl_ssl: they are not used",
                                   k->cfg.shown);
    }
    *handle = k;
#ifdef OUTBOX_DRIVER_STATIC
    outbox_kafka_opened = k;
#endif
    return OUTBOX_OK;
}

static void kafka_close(void *handle)
{
    kafka_sink_t *k = handle;
    if (k == NULL)
        return;
    if (k->rk != NULL) {
        /* Every call waited for its own messages, so there is nothing to
         * flush but a report still on its way, or a message a call handed
         * back (DEFER) whose partition is still without a leader; a short
         * wait, then the purge in outbox_kafka_producer_drop. Their rows
         * were handed back, so nothing is lost. */
        rd_kafka_flush(k->rk, 1000);
        outbox_kafka_producer_drop(k);
    }
    outbox_kafka_kept_free(k);
    outbox_kafka_config_free(&k->cfg);
    outbox_kafka_host->free(k);
}

static const char *const kafka_schemes[] = {"kafka", NULL};

static const outbox_sink_vtable_t kafka_vtable = {
    .struct_size = sizeof(outbox_sink_vtable_t),
    .open = kafka_open,
    .close = kafka_close,
    .publish = outbox_kafka_publish,
    .destination_create = outbox_kafka_destination_create,
    .destination_drop = outbox_kafka_destination_drop,
    .reader_open = outbox_kafka_reader_open,
    .reader_next = outbox_kafka_reader_next,
    .reader_close = outbox_kafka_reader_close,
};

static const outbox_driver_t kafka_driver = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = OUTBOX_ABI_MAJOR,
    .abi_minor = 2, /* the lowest it relies on: the reader entries of 1.2 */
    .kind = OUTBOX_DRIVER_SINK,
    .name = KAFKA_SINK_NAME,
    .version = OUTBOX_VERSION,
    .schemes = kafka_schemes,
    /* Kept by enable.gapless.guarantee and the call-wide purge (kafka_publish.c);
     * tests/integration/kafka/test_kafka_sink.c proves it. */
    .capabilities = OUTBOX_SINK_CAP_ORDERED,
    .init = kafka_init,
    .sink = &kafka_vtable,
};

OUTBOX_DRIVER_ENTRY(kafka_driver)
