/* The Kafka producer ceiling (drivers/sink-kafka/ceiling.c) against a real
 * broker (OUTBOX_KAFKA_URI): what it sends is what the sink sends, record
 * for record (key, payload, the headers under their wire names, in their
 * order), and it refuses a bad URI and a broker that is not there. */
#include "ceilingtest.h"

extern const outbox_sink_ceiling_t outbox_ceiling_kafka;

static const char *base_uri;

START_TEST(ceiling_sends_what_the_sink_sends)
{
    tc_expect_sink_equals_ceiling(&outbox_ceiling_kafka, base_uri, 1, 1);
}
END_TEST

START_TEST(ceiling_refuses_a_bad_uri)
{
    /* A password (for SASL) and an option value the sink refuses. */
    char uri[512];
    snprintf(uri, sizeof uri, "kafka://outbox:%s@127.0.0.1:%d?partitions=lots", TH_SECRET,
             th_port_of(base_uri));
    tc_expect_usage(&outbox_ceiling_kafka, uri);
    snprintf(uri, sizeof uri, "kafka://outbox:%s@127.0.0.1:%d?acks=1", TH_SECRET,
             th_port_of(base_uri));
    tc_expect_usage(&outbox_ceiling_kafka, uri);
}
END_TEST

START_TEST(ceiling_fails_without_a_broker)
{
    /* Port 1: nothing listens; the password must not show; the sink's
     * timeout bounds the wait. */
    tc_expect_refused(&outbox_ceiling_kafka,
                      th_with_secret("kafka://outbox:{secret}@127.0.0.1:1?timeout=2s&"
                                     "security.protocol=sasl_plaintext&sasl.mechanism=PLAIN"),
                      "nowhere");
}
END_TEST

START_TEST(ceiling_fails_on_a_refusal)
{
    /* A topic that does not exist (the broker creates none on first
     * use): every report fails, so the chunk does; no retries. */
    tc_expect_chunk_refused(&outbox_ceiling_kafka, th_uri_with(base_uri, "?timeout=2s"),
                            th_name("ceil_missing"), "failed");
}
END_TEST

TH_SINK_MAIN("ceiling_kafka", 120, "OUTBOX_KAFKA_URI", "kafka", base_uri,
             ceiling_sends_what_the_sink_sends, ceiling_refuses_a_bad_uri,
             ceiling_fails_without_a_broker, ceiling_fails_on_a_refusal)
