/* The NATS producer ceiling (drivers/sink-nats/ceiling.c) against a real
 * nats-server: it must send exactly what the sink sends (tests/harness/
 * ceilingtest.h: the same messages through both, read back and compared
 * byte for byte, Nats-Msg-Id and every header under its wire name
 * included). Then its refusals: a bad URI (one line, no password), a
 * server that is not there, a chunk JetStream refuses, a server killed
 * under it, each followed by a close that must not crash.
 *
 * OUTBOX_NATS_URI names the shared server (the skip rule of
 * tests/harness); the case with a server killed starts a private one with
 * tools/services/nats.sh (argv[1]). */
#include "ceilingtest.h"

extern const outbox_sink_ceiling_t outbox_ceiling_nats;

static const char *nats_uri;
static const outbox_sink_ceiling_t *const ceiling = &outbox_ceiling_nats;

START_TEST(names_client)
{
    ck_assert_str_eq(ceiling->name, "nats");
    ck_assert_uint_eq(ceiling->struct_size, sizeof(outbox_sink_ceiling_t));
    ck_assert_msg(strncmp(ceiling->client(), "libnats ", 8) == 0, "%s", ceiling->client());
}
END_TEST

START_TEST(same_wire_as_sink)
{
    tc_expect_sink_equals_ceiling(ceiling, nats_uri, 1, 0);
}
END_TEST

START_TEST(bad_uri_is_usage)
{
    /* Refused by the driver's own parser, or the host's, the password
     * masked. */
    tc_register(ceiling);
    tc_expect_open_fails(ceiling, "nats://alice:" TH_SECRET "@127.0.0.1:4222/s?timeout=ten",
                         OUTBOX_CEILING_USAGE);
    tc_expect_open_fails(ceiling, "nats://alice:" TH_SECRET "@127.0.0.1:4222/s?bogus=1",
                         OUTBOX_CEILING_USAGE);
    tc_expect_open_fails(ceiling, "nats://alice:" TH_SECRET "@127.0.0.1:99999/s",
                         OUTBOX_CEILING_USAGE);
}
END_TEST

START_TEST(refused_port_fails)
{
    tc_register(ceiling);
    tc_expect_open_fails(ceiling,
                         "nats://alice:" TH_SECRET "@127.0.0.1:1/s?connect_timeout=500ms",
                         OUTBOX_CEILING_FAIL);
}
END_TEST

START_TEST(open_then_close)
{
    /* The bench opens the ceiling once before staging, to refuse a URI it
     * cannot serve, and closes it without a publish. */
    tc_register(ceiling);
    void *p = tc_open(ceiling, nats_uri);
    ceiling->close(p);
}
END_TEST

START_TEST(refused_chunk_fails)
{
    /* No stream captures the subject: JetStream has no responder. The
     * chunk fails, and the producer still publishes and closes. */
    tc_register(ceiling);
    char nostream[64], dest[64];
    snprintf(nostream, sizeof nostream, "%s", th_name("ceil_nostream"));
    outbox_sink_t *k = th_open_dest(nats_uri, "ceil_after", dest);
    void *p = tc_open(ceiling, nats_uri);
    tc_expect_chunk(ceiling, p, nostream, 0);
    tc_expect_chunk(ceiling, p, dest, 1);
    ceiling->close(p);
    th_drop(k, dest);
    outbox_sink_close(k);
}
END_TEST

START_TEST(server_killed_fails)
{
    /* A private server killed after a chunk: the next fails within the
     * sink's timeout (its PubAcks abandoned), and close does not crash. */
    tc_register(ceiling);
    char uri[256];
    const char *dir = th_private_dir("killed");
    th_service_start("", dir, "OUTBOX_NATS_URI", uri, sizeof uri);
    snprintf(uri + strlen(uri), sizeof uri - strlen(uri), "?timeout=2s&reconnect_wait=100ms");
    outbox_sink_t *k = th_open_sink(uri);
    th_create(k, "ceil_killed");
    void *p = tc_open(ceiling, uri);
    tc_expect_chunk(ceiling, p, "ceil_killed", 1);
    th_service("kill", th_private_dir("killed"));
    tc_expect_chunk(ceiling, p, "ceil_killed", 0);
    ceiling->close(p);
    outbox_sink_close(k);
}
END_TEST

TH_SINK_MAIN("ceiling_nats", 120, "OUTBOX_NATS_URI", "nats", nats_uri, names_client,
             same_wire_as_sink, bad_uri_is_usage, refused_port_fails, open_then_close,
             refused_chunk_fails,
             th_script() ? server_killed_fails : NULL)
