/* The NATS JetStream sink against a real nats-server, through the public
 * sink API and the real loader (OUTBOX_DRIVER_PATH points at the build
 * tree): what is particular to NATS. What every sink must do (round trip,
 * key order, dedupe, oversize and unreachable servers, outages, passwords
 * in the URI) is the sink battery's (battery_nats).
 *
 * OUTBOX_NATS_URI names the shared server; the case on a server that is
 * not there yet starts a private one with tools/services/nats.sh (its path
 * is argv[1]). Every case publishes to subjects of its own (it_<pid>_<tag>),
 * so cases and test programs can share one server. */
#include <nats/nats.h>

#include "sinktest.h"

static const char *nats_uri;

/* ------------------------------------------------------------- options */

START_TEST(uri_errors)
{
    static const th_refusal_t bad[] = {
        {"/s?bogus=1", "unknown parameter bogus"},
        {"/s?timeout=ten", "timeout=ten is not a duration"},
        {"/s?timeout=0s", "not a duration"},
        {"/s?tls=maybe", "tls=maybe"},
        {"/s?servers=h1", "has no port"},
        {"/s?tls_cert=/c.pem", "tls_key go together"},
        {"/s?token_env=OUTBOX_IT_NO_SUCH_VAR", "OUTBOX_IT_NO_SUCH_VAR, which is not set"},
        {"nats:relative", "names no server"},
        /* A secret, a password or a token of NATS's own (from the URI or
         * the environment, beside or instead of a password): refused for
         * another reason, the URI is named, never the secret. */
        {"nats://alice:{secret}@127.0.0.1:4222/s?bogus=1", "unknown parameter bogus"},
        {"nats://127.0.0.1:4222/s?token={secret}&timeout=x", "timeout=x"},
        {"nats://alice:{secret}@127.0.0.1:4222/s?token={secret}", "not both"},
        {"nats://bob@127.0.0.1:4222/s?token_env=" TH_SECRET_VAR, "not both"},
        {"/s?token={secret}&token_env=" TH_SECRET_VAR, "give token or token_env, not both"},
    };
    th_expect_refusals(nats_uri, bad, sizeof bad / sizeof *bad);
}
END_TEST

START_TEST(token_masked)
{
    /* A token (the battery tries a password): the results of a handle on
     * a closed port name the URI with the token masked. */
    th_expect_retry_masked("nats://127.0.0.1:1/s?token={secret}");
}
END_TEST

/* ------------------------------------------------------------- mapping */

START_TEST(message_mapping)
{
    /* How JetStream holds a message, as the reader gives it: the subject
     * is the destination, Nats-Msg-Id the event id, there is no key (it
     * travels as the partitionkey attribute), and one subject keeps the
     * publish order of a whole call, across keys. A stream made twice is
     * no error. */
    char dest[64];
    outbox_sink_t *k = th_open_dest(nats_uri, "map", dest);
    th_create(k, dest);
    th_expect_call_read_back(k, dest, 1);
    th_drop(k, dest);
    outbox_sink_close(k);
}
END_TEST

/* nats://dead:1,live:port: a list of servers in the authority; one that
 * answers is enough. */
START_TEST(server_list)
{
    char dest[64], uri[512], server[256];
    snprintf(dest, sizeof dest, "%s", th_name("sl"));
    snprintf(server, sizeof server, "%s", nats_uri + strlen("nats://"));
    server[strcspn(server, "/?")] = '\0';
    snprintf(uri, sizeof uri, "nats://127.0.0.1:1,%s", server);
    outbox_sink_t *k = th_open_sink(uri);
    th_create(k, dest);
    th_batch_t *b = th_batch(1, dest, "k");
    th_batch_publish(k, b);
    ck_assert_msg(b->r[0].status == OUTBOX_PUBLISH_OK, "%d %s", b->r[0].status, b->r[0].message);
    static char ids[8][40];
    ck_assert_int_eq(th_read_ids(k, dest, ids, 8, 2000), 1);
    ck_assert_str_eq(ids[0], b->t[0].id);
    th_drop(k, dest);
    outbox_sink_close(k);
}
END_TEST

/* -------------------------------------------------------------- REJECT */

START_TEST(reject_no_stream)
{
    char dest[64];
    snprintf(dest, sizeof dest, "%s", th_name("nostream"));
    outbox_publish_result_t r = th_publish_one(nats_uri, dest);
    ck_assert_int_eq(r.status, OUTBOX_PUBLISH_REJECT);
    ck_assert_msg(strstr(r.message, "no JetStream stream captures subject") != NULL, "%s",
                  r.message);
    ck_assert_msg(strstr(r.message, dest) != NULL, "%s", r.message);
}
END_TEST

START_TEST(oversize_names_max_payload)
{
    /* The REJECT (the battery's) names the server's limit. */
    char dest[64];
    outbox_sink_t *k = th_open_dest(nats_uri, "big", dest);
    size_t big = 4u << 20;
    char *payload = malloc(big);
    ck_assert(payload != NULL);
    memset(payload, ' ', big);
    payload[0] = '1';
    th_batch_t *b = th_batch(1, dest, "a");
    b->m[0].payload = payload;
    b->m[0].payload_len = big;
    th_batch_publish(k, b);
    ck_assert_msg(b->r[0].status == OUTBOX_PUBLISH_REJECT &&
                      strstr(b->r[0].message, "max_payload") != NULL,
                  "%d %s", b->r[0].status, b->r[0].message);
    free(payload);
    th_drop(k, dest);
    outbox_sink_close(k);
}
END_TEST

START_TEST(reject_line_break_header)
{
    /* A NATS header is one line: found before sending, REJECT, and the
     * key's later event is held back, while another key goes on. */
    char dest[64];
    outbox_sink_t *k = th_open_dest(nats_uri, "lb", dest);
    th_batch_t *b = th_batch(4, dest, "k");
    th_make_msg(&b->t[3], &b->m[3], dest, "other", 3);
    b->t[1].headers[1].value = "order\r\ncreated";
    th_batch_publish(k, b);
    th_expect_key_stopped(b, 1, OUTBOX_PUBLISH_REJECT);
    ck_assert_msg(strstr(b->r[1].message, "line break") != NULL, "%s", b->r[1].message);
    th_expect_dest_holds_ok(k, b, dest, 2000);
    th_drop(k, dest);
    outbox_sink_close(k);
}
END_TEST

/* --------------------------------------------------------------- order */

/* A stream of its own with a small max_msg_size, made with libnats: the
 * server refuses (JetStream error 10054) one message in the middle of a
 * key's run, after the sink has already handed over earlier ones. */
static void small_stream(const char *subject, const char *stream)
{
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    ck_assert(natsConnection_ConnectTo(&nc, nats_uri) == NATS_OK);
    ck_assert(natsConnection_JetStream(&js, nc, NULL) == NATS_OK);
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    const char *subjects[] = {subject};
    cfg.Name = stream;
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    cfg.Storage = js_MemoryStorage;
    cfg.MaxMsgSize = 700; /* headers count: a small message is just over 600 bytes */
    jsErrCode code = 0;
    jsStreamInfo *si = NULL;
    natsStatus s = js_AddStream(&si, js, &cfg, NULL, &code);
    ck_assert_msg(s == NATS_OK, "add stream: %s %d", natsStatus_GetText(s), (int)code);
    jsStreamInfo_Destroy(si);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

START_TEST(order_after_server_reject)
{
    char dest[64], stream[80];
    snprintf(dest, sizeof dest, "%s", th_name("ord"));
    snprintf(stream, sizeof stream, "%s_s", dest);
    small_stream(dest, stream);
    outbox_sink_t *k = th_open_sink(nats_uri);
    /* Key a: a0 a1 a2(too big for the stream) a3 a4; key b: b0..b4, all
     * fine, interleaved with a's. */
    th_batch_t *b = th_batch_ab(10, dest, dest);
    static char bigpayload[800];
    memset(bigpayload, ' ', sizeof bigpayload);
    bigpayload[0] = '2';
    b->m[4].payload = bigpayload;
    b->m[4].payload_len = sizeof bigpayload;
    th_batch_publish(k, b);
    th_expect_key_stopped(b, 4, OUTBOX_PUBLISH_REJECT);
    ck_assert_msg(strstr(b->r[4].message, "10054") != NULL, "%s", b->r[4].message);
    /* The stream holds a0 a1 and every b, and nothing of a after a2. */
    th_expect_dest_holds_ok(k, b, dest, 2000);
    /* Dropping by destination uses our own naming; this stream is the
     * test's: delete it through libnats. */
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    if (natsConnection_ConnectTo(&nc, nats_uri) == NATS_OK &&
        natsConnection_JetStream(&js, nc, NULL) == NATS_OK)
        js_DeleteStream(js, stream, NULL, NULL);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    outbox_sink_close(k);
}
END_TEST

/* ------------------------------------------------------ the first connect */

START_TEST(first_connect_in_background)
{
    /* A handle opened while no server listens goes on connecting in the
     * background (libnats' retry on a failed connect): once a server
     * starts on that port, the same handle makes a stream and delivers.
     * The battery's outages start from a connected handle. */
    int port = th_private_port();
    char uri[128], env[64], started[256];
    snprintf(uri, sizeof uri, "nats://127.0.0.1:%d?timeout=3s&reconnect_wait=100ms", port);
    outbox_sink_t *k = th_open_sink(uri);
    th_batch_t *b = th_batch(1, "later", "k");
    th_batch_publish(k, b);
    ck_assert_msg(b->r[0].status == OUTBOX_PUBLISH_RETRY, "no server yet: %d %s", b->r[0].status,
                  b->r[0].message);

    snprintf(env, sizeof env, "OUTBOX_NATS_PORT=%d", port);
    th_service_start(env, th_private_dir("first"), "OUTBOX_NATS_PORT", started, sizeof started);
    ck_assert_msg(atoi(started) == port, "the private server took port %s, not %d", started, port);
    int created = OUTBOX_ETRANSIENT;
    for (int i = 0; i < 100 && created != OUTBOX_OK; i++) {
        created = outbox_sink_destination_create(k, "later");
        if (created != OUTBOX_OK)
            usleep(100000);
    }
    ck_assert_msg(created == OUTBOX_OK, "create after the start: %s", outbox_sink_message(k));
    for (int i = 0; i < 300; i++) {
        th_batch_publish(k, b);
        if (b->r[0].status == OUTBOX_PUBLISH_OK)
            break;
        ck_assert_msg(b->r[0].status == OUTBOX_PUBLISH_RETRY, "while connecting: %d %s",
                      b->r[0].status, b->r[0].message);
        usleep(200000);
    }
    ck_assert_msg(b->r[0].status == OUTBOX_PUBLISH_OK, "never OK after the server started: %s",
                  b->r[0].message);
    static char ids[4][40];
    ck_assert_int_eq(th_read_ids(k, "later", ids, 4, 2000), 1);
    outbox_sink_close(k);
}
END_TEST

TH_SINK_MAIN("nats_sink", 120, "OUTBOX_NATS_URI", "nats", nats_uri,
             uri_errors, token_masked, message_mapping, server_list, reject_no_stream,
             oversize_names_max_payload, reject_line_break_header, order_after_server_reject,
             th_script() ? first_connect_in_background : NULL)
