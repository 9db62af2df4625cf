/* The AMQP producer ceiling (drivers/sink-amqp/ceiling.c) against a real
 * RabbitMQ: it must send exactly what the sink sends (tests/harness/
 * ceilingtest.h: the same messages through both, read back and compared
 * byte for byte: message_id, type, content_type, timestamp and every
 * application property under its wire name). The URI carries the broker's
 * user and password, read by the driver's own parser. Then its refusals: a
 * bad URI (one line, no password), a broker that is not there, a wrong
 * password, a chunk the broker returns, each followed by a close that must
 * not crash.
 *
 * OUTBOX_RABBITMQ_URI names the shared broker (the skip rule of
 * tests/harness). */
#include "ceilingtest.h"

extern const outbox_sink_ceiling_t outbox_ceiling_amqp;

static const char *amqp_uri;
static const outbox_sink_ceiling_t *const ceiling = &outbox_ceiling_amqp;

START_TEST(names_client)
{
    ck_assert_str_eq(ceiling->name, "amqp");
    ck_assert_uint_eq(ceiling->struct_size, sizeof(outbox_sink_ceiling_t));
    ck_assert_msg(strncmp(ceiling->client(), "librabbitmq ", 12) == 0, "%s", ceiling->client());
}
END_TEST

START_TEST(same_wire_as_sink)
{
    ck_assert_msg(strchr(amqp_uri, '@') != NULL, "OUTBOX_RABBITMQ_URI has no user: %s", amqp_uri);
    tc_expect_sink_equals_ceiling(ceiling, amqp_uri, 1, 0);
}
END_TEST

START_TEST(bad_uri_is_usage)
{
    /* Refused by the driver's own parser, or the host's, the password
     * masked. */
    tc_register(ceiling);
    tc_expect_open_fails(ceiling, "amqp://alice:" TH_SECRET "@127.0.0.1:5672/%2f?timeout=ten",
                         OUTBOX_CEILING_USAGE);
    tc_expect_open_fails(ceiling, "amqp://alice:" TH_SECRET "@127.0.0.1:5672/%2f?max_bytes=0",
                         OUTBOX_CEILING_USAGE);
    tc_expect_open_fails(ceiling, "amqp://alice:" TH_SECRET "@127.0.0.1:99999/%2f",
                         OUTBOX_CEILING_USAGE);
}
END_TEST

START_TEST(refused_port_fails)
{
    tc_register(ceiling);
    tc_expect_open_fails(ceiling,
                         "amqp://alice:" TH_SECRET "@127.0.0.1:1/%2f?connect_timeout=500ms",
                         OUTBOX_CEILING_FAIL);
}
END_TEST

START_TEST(wrong_password_fails)
{
    /* The real broker, a wrong password: the login fails, the line does
     * not show it. */
    tc_register(ceiling);
    const char *at = strchr(amqp_uri, '@');
    ck_assert_msg(at != NULL, "OUTBOX_RABBITMQ_URI has no user: %s", amqp_uri);
    char uri[512];
    snprintf(uri, sizeof uri, "amqp://guest:" TH_SECRET "%s", at);
    tc_expect_open_fails(ceiling, uri, OUTBOX_CEILING_FAIL);
}
END_TEST

START_TEST(returned_chunk_fails)
{
    /* No queue for the routing key: the broker returns the mandatory
     * publish. The chunk fails, a later one says why, close is harmless. */
    tc_register(ceiling);
    char noqueue[64];
    snprintf(noqueue, sizeof noqueue, "%s", th_name("ceil_noqueue"));
    void *p = tc_open(ceiling, amqp_uri);
    tc_expect_chunk(ceiling, p, noqueue, 0);
    tc_expect_chunk(ceiling, p, noqueue, 0);
    ceiling->close(p);
}
END_TEST

TH_SINK_MAIN("ceiling_amqp", 120, "OUTBOX_RABBITMQ_URI", "rabbitmq", amqp_uri, names_client,
             same_wire_as_sink, bad_uri_is_usage, refused_port_fails, wrong_password_fails,
             returned_chunk_fails)
