/* The HTTP webhook producer ceiling (drivers/sink-http/ceiling.c) against
 * the project's receiver (OUTBOX_HTTP_URI): what it sends is what the sink
 * sends, request for request (path, body, every header line under its
 * name), and it refuses a bad URI and a receiver that is not there. */
#include "ceilingtest.h"

extern const outbox_sink_ceiling_t outbox_ceiling_http;

static const char *base_uri;

START_TEST(ceiling_sends_what_the_sink_sends)
{
    /* The request's header lines come in the order libcurl writes them,
     * the same for both. */
    tc_expect_sink_equals_ceiling(&outbox_ceiling_http, base_uri, 1, 1);
}
END_TEST

START_TEST(ceiling_refuses_a_bad_uri)
{
    char uri[512];
    snprintf(uri, sizeof uri, "http://outbox:%s@127.0.0.1:%d/?parallel=lots", TH_SECRET,
             th_port_of(base_uri));
    tc_expect_usage(&outbox_ceiling_http, uri);
    snprintf(uri, sizeof uri, "http://outbox:%s@127.0.0.1:%d/?tls_ca=/nowhere", TH_SECRET,
             th_port_of(base_uri));
    tc_expect_usage(&outbox_ceiling_http, uri);
}
END_TEST

START_TEST(ceiling_fails_without_a_receiver)
{
    /* Port 1: nothing listens. */
    tc_expect_refused(&outbox_ceiling_http, "http://127.0.0.1:1/", "nowhere");
}
END_TEST

TH_SINK_MAIN("ceiling_http", 120, "OUTBOX_HTTP_URI", "http", base_uri,
             ceiling_sends_what_the_sink_sends, ceiling_refuses_a_bad_uri,
             ceiling_fails_without_a_receiver)
