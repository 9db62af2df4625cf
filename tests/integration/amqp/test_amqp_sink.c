/* The AMQP sink against a real RabbitMQ, through the public sink API and
 * the real loader (OUTBOX_DRIVER_PATH points at the build tree): what is
 * particular to AMQP and RabbitMQ. What every sink must do (round trip,
 * key order, oversize and unreachable brokers, outages, a password in the
 * URI) is the sink battery's (battery_amqp).
 *
 * OUTBOX_RABBITMQ_URI names the shared broker; the restart case starts a
 * private node of its own with tools/services/rabbitmq.sh (its path is
 * argv[1]). Every case uses queues of its own (it_<pid>_<tag>), so cases
 * and test programs can share one broker. */
#include <amqp.h>
#include <amqp_tcp_socket.h>

#include "sinktest.h"

static const char *amqp_uri;

/* ------------------------------------------------------------- options */

START_TEST(uri_errors)
{
    char longname[300], exchange[400];
    memset(longname, 'x', 270);
    longname[270] = '\0';
    snprintf(exchange, sizeof exchange, "?exchange=%s", longname);
    const th_refusal_t bad[] = {
        {"?bogus=1", "unknown parameter bogus"},
        {"?timeout=ten", "timeout=ten is not a duration"},
        {"?timeout=0s", "not a duration"},
        {"?connect_timeout=5", "not a duration"},
        {"?heartbeat=1500ms", "heartbeat=1500ms"},
        {"?max_bytes=2GiB", "max_bytes=2GiB"},
        {"?max_bytes=0", "max_bytes=0"},
        {"?tls_ca=/ca.pem", "need the amqps:// scheme"},
        {"amqps://h:5671/?tls_cert=/c.pem", "tls_key go together"},
        {"amqps://h:5671/?tls_verify=maybe", "tls_verify=maybe"},
        {"amqp://h1:5672,h2:5672/", "one broker only"},
        {"amqp:relative", "names no broker"},
        {exchange, "AMQP allows 255"},
        {"?password_env=OUTBOX_IT_NO_SUCH_VAR", "OUTBOX_IT_NO_SUCH_VAR, which is not set"},
        /* A password, from the URI or the environment, refused for another
         * reason: never shown. */
        {"amqp://alice:{secret}@127.0.0.1:1/?bogus=1", "unknown parameter bogus"},
        {"amqp://127.0.0.1:1/?password_env=" TH_SECRET_VAR, "needs a user name"},
    };
    th_expect_refusals(amqp_uri, bad, sizeof bad / sizeof *bad);
}
END_TEST

START_TEST(wrong_password_from_env)
{
    /* The real broker with a wrong password from the environment (the
     * battery tries one in the URI): the login fails, RETRY; the results
     * say so without it. */
    setenv(TH_SECRET_VAR, TH_SECRET, 1);
    const char *at = strstr(amqp_uri, "@");
    ck_assert_msg(at != NULL, "OUTBOX_RABBITMQ_URI has no user: %s", amqp_uri);
    char uri[512];
    snprintf(uri, sizeof uri, "amqp://guest%s%spassword_env=" TH_SECRET_VAR, at,
             strchr(at, '?') ? "&" : "?");
    outbox_sink_t *k = th_open_sink(uri);
    th_batch_t *b = th_batch(1, "it_nowhere", "k");
    th_batch_publish(k, b);
    const outbox_publish_result_t *r = &b->r[0];
    ck_assert_msg(r->status == OUTBOX_PUBLISH_RETRY, "wrong password: %d %s", r->status,
                  r->message);
    ck_assert_msg(strstr(r->message, TH_SECRET) == NULL, "the secret shows: %s", r->message);
    ck_assert_msg(strstr(r->message, "logging in") != NULL, "%s", r->message);
    ck_assert_msg(strstr(outbox_sink_message(k), TH_SECRET) == NULL, "the secret shows: %s",
                  outbox_sink_message(k));
    outbox_sink_close(k);
}
END_TEST

/* ------------------------------------------------------------- mapping */

START_TEST(queue_reader)
{
    /* How a queue holds a message, as the reader gives it: message_id is
     * the event id (RabbitMQ dedupes nothing: no dedupe capability), no
     * key, and one queue keeps the publish order of a whole call (every
     * round's messages are confirmed before the next). Reading does not
     * take the messages away; a queue made or dropped twice is no error. */
    char dest[64];
    outbox_sink_t *k = th_open_dest(amqp_uri, "map", dest);
    ck_assert(!(outbox_sink_capabilities(k) & OUTBOX_SINK_CAP_DEDUPE));
    th_create(k, dest);
    th_expect_call_read_back(k, dest, 2);
    th_drop(k, dest);
    th_drop(k, dest);
    outbox_sink_close(k);
}
END_TEST

/* ------------------------------------------------------------- refusals */

START_TEST(reject_unroutable)
{
    /* A named exchange with no queue bound for the key: the broker returns
     * the mandatory message, REJECT. */
    outbox_publish_result_t r = th_publish_one(
        th_uri_with(amqp_uri, "?exchange=amq.direct&routing_key=nobody.{route}"), "it_unbound");
    ck_assert_msg(r.status == OUTBOX_PUBLISH_REJECT && strstr(r.message, "amq.direct"),
                  "unbound key on amq.direct: %d %s", r.status, r.message);
    /* No queue of that name on the default exchange: the same; its
     * neighbours are delivered. */
    char good[64];
    outbox_sink_t *k = th_open_dest(amqp_uri, "unr", good);
    th_batch_t *b = th_batch_ab(3, good, "it_no_such_queue_anywhere");
    th_batch_publish(k, b);
    ck_assert_msg(b->r[1].status == OUTBOX_PUBLISH_REJECT &&
                      strstr(b->r[1].message, "routes to no queue") != NULL &&
                      strstr(b->r[1].message, "it_no_such_queue_anywhere") != NULL,
                  "unroutable: %d %s", b->r[1].status, b->r[1].message);
    th_expect_dest_holds_ok(k, b, good, 2000);
    ck_assert_msg(b->r[0].status == OUTBOX_PUBLISH_OK && b->r[2].status == OUTBOX_PUBLISH_OK,
                  "neighbours: %s / %s", b->r[0].message, b->r[2].message);
    th_drop(k, good);
    outbox_sink_close(k);
}
END_TEST

START_TEST(exchange_binding)
{
    /* destination_create binds the queue to the named exchange with the
     * routing key the template gives, so publishing through it arrives. */
    char dest[64];
    outbox_sink_t *k = th_open_dest(
        th_uri_with(amqp_uri, "?exchange=amq.topic&routing_key=out.{destination}"), "ex", dest);
    th_batch_t *b = th_batch(4, dest, "k");
    th_batch_publish(k, b);
    th_expect_all(b->r, b->n, OUTBOX_PUBLISH_OK, "through amq.topic");
    static char ids[8][40];
    ck_assert_int_eq(th_read_ids(k, dest, ids, 8, 2000), 4);
    for (int i = 0; i < 4; i++)
        ck_assert_str_eq(ids[i], b->t[i].id);
    th_drop(k, dest);
    outbox_sink_close(k);
}
END_TEST

START_TEST(max_bytes_option)
{
    /* max_bytes: one byte over is refused before sending, saying so;
     * exactly the limit goes. */
    char dest[64];
    outbox_sink_t *k = th_open_dest(th_uri_with(amqp_uri, "?max_bytes=1KiB"), "big", dest);
    static char big[1025];
    memset(big, ' ', sizeof big);
    big[0] = '1';
    th_batch_t *b = th_batch(1, dest, "big");
    b->m[0].payload = big;
    b->m[0].payload_len = sizeof big;
    th_batch_publish(k, b);
    ck_assert_msg(b->r[0].status == OUTBOX_PUBLISH_REJECT &&
                      strstr(b->r[0].message, "max_bytes of 1024"),
                  "1025 bytes: %d %s", b->r[0].status, b->r[0].message);
    b->m[0].payload_len = 1024;
    th_batch_publish(k, b);
    ck_assert_msg(b->r[0].status == OUTBOX_PUBLISH_OK, "1024 bytes: %s", b->r[0].message);
    static char ids[8][40];
    ck_assert_int_eq(th_read_ids(k, dest, ids, 8, 2000), 1);
    th_drop(k, dest);
    outbox_sink_close(k);
}
END_TEST

START_TEST(order_after_broker_reject)
{
    /* A failure the broker reports: key a's third message goes to a
     * routing key no queue has (returned: REJECT); a's later messages,
     * to the good queue, must not be delivered (RETRY, held back), while
     * key b, interleaved, goes on. */
    char good[64];
    outbox_sink_t *k = th_open_dest(amqp_uri, "ord", good);
    th_batch_t *b = th_batch_ab(10, good, good);
    th_make_msg(&b->t[4], &b->m[4], "it_no_such_queue_anywhere", "a", 4);
    th_batch_publish(k, b);
    th_expect_key_stopped(b, 4, OUTBOX_PUBLISH_REJECT);
    th_expect_dest_holds_ok(k, b, good, 2000);
    th_drop(k, good);
    outbox_sink_close(k);
}
END_TEST

/* A queue of at most max messages that refuses (basic.nack) what comes
 * beyond, declared with librabbitmq itself: the sink declares plain ones.
 * The test broker takes the URI's default guest login. */
static void declare_bounded_queue(const char *name, int max)
{
    char host[64] = "127.0.0.1";
    int port = 5672;
    const char *at = strchr(amqp_uri, '@');
    const char *hp = at ? at + 1 : strstr(amqp_uri, "//") + 2;
    ck_assert(sscanf(hp, "%63[^:/]:%d", host, &port) >= 1);
    amqp_connection_state_t c = amqp_new_connection();
    amqp_socket_t *sock = amqp_tcp_socket_new(c);
    ck_assert(amqp_socket_open(sock, host, port) == AMQP_STATUS_OK);
    amqp_rpc_reply_t r = amqp_login(c, "/", 0, AMQP_DEFAULT_FRAME_SIZE, 0, AMQP_SASL_METHOD_PLAIN,
                                    "guest", "guest");
    ck_assert_int_eq(r.reply_type, AMQP_RESPONSE_NORMAL);
    amqp_channel_open(c, 1);
    ck_assert_int_eq(amqp_get_rpc_reply(c).reply_type, AMQP_RESPONSE_NORMAL);
    amqp_queue_delete(c, 1, amqp_cstring_bytes(name), 0, 0);
    ck_assert_int_eq(amqp_get_rpc_reply(c).reply_type, AMQP_RESPONSE_NORMAL);
    amqp_table_entry_t args[2] = {
        {.key = amqp_cstring_bytes("x-max-length"),
         .value = {.kind = AMQP_FIELD_KIND_I32, .value.i32 = max}},
        {.key = amqp_cstring_bytes("x-overflow"),
         .value = {.kind = AMQP_FIELD_KIND_UTF8,
                   .value.bytes = amqp_cstring_bytes("reject-publish")}},
    };
    amqp_table_t t = {.num_entries = 2, .entries = args};
    amqp_queue_declare(c, 1, amqp_cstring_bytes(name), 0, 1, 0, 0, t);
    ck_assert_int_eq(amqp_get_rpc_reply(c).reply_type, AMQP_RESPONSE_NORMAL);
    amqp_channel_close(c, 1, AMQP_REPLY_SUCCESS);
    amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c);
}

START_TEST(nack_retry_and_order)
{
    /* A full queue that refuses more (x-overflow reject-publish): the
     * broker nacks, which is RETRY, and holds back the rest of the key;
     * another key on another queue goes on. */
    char full[64], other[64];
    snprintf(full, sizeof full, "%s", th_name("full"));
    snprintf(other, sizeof other, "%s", th_name("other"));
    declare_bounded_queue(full, 2);
    outbox_sink_t *k = th_open_sink(amqp_uri);
    th_create(k, other);
    /* a0 a1 fill the queue, a2 is refused, a3 is held back; b0..b3 go on. */
    th_batch_t *b = th_batch_ab(8, full, other);
    th_batch_publish(k, b);
    th_expect_key_stopped(b, 4, OUTBOX_PUBLISH_RETRY);
    ck_assert_msg(strstr(b->r[4].message, "basic.nack") != NULL, "%s", b->r[4].message);
    th_expect_dest_holds_ok(k, b, full, 2000);
    th_expect_dest_holds_ok(k, b, other, 2000);
    /* The handle goes on after the refusal. */
    th_publish(k, &b->m[1], 1, b->r);
    ck_assert_msg(b->r[0].status == OUTBOX_PUBLISH_OK, "after the nack: %s", b->r[0].message);
    th_drop(k, full);
    th_drop(k, other);
    outbox_sink_close(k);
}
END_TEST

static void idle_4s(void *ctx)
{
    (void)ctx;
    sleep(4);
}

START_TEST(idle_past_heartbeat)
{
    /* Idle for longer than the heartbeat interval, nobody answered the
     * broker's heartbeats: the next call must still be OK (the sink starts
     * a fresh connection rather than fail on the stale one). */
    char dest[64];
    outbox_sink_t *k = th_open_dest(th_uri_with(amqp_uri, "?heartbeat=1s"), "idle", dest);
    th_expect_ok_across(k, dest, idle_4s, NULL);
    th_drop(k, dest);
    outbox_sink_close(k);
}
END_TEST

START_TEST(tls_round_trip)
{
    /* amqps:// against the TLS listener rabbitmq.sh makes with
     * OUTBOX_RABBITMQ_TLS=1 (a throwaway CA in the URI's tls_ca): the
     * certificate and host name are checked, and a message goes round. */
    const char *tls = getenv("OUTBOX_RABBITMQ_TLS_URI");
    char dest[64];
    outbox_sink_t *k = th_open_dest(tls, "tls", dest);
    th_batch_t *b = th_batch(1, dest, "k");
    th_batch_publish(k, b);
    ck_assert_msg(b->r[0].status == OUTBOX_PUBLISH_OK, "over TLS: %d %s", b->r[0].status,
                  b->r[0].message);
    static char ids[4][40];
    ck_assert_int_eq(th_read_ids(k, dest, ids, 4, 2000), 1);
    ck_assert_str_eq(ids[0], b->t[0].id);
    th_drop(k, dest);
    outbox_sink_close(k);

    /* The system's CAs do not know the throwaway one: RETRY, never OK. */
    char bad[1024];
    snprintf(bad, sizeof bad, "%.*s?tls_ca=/etc/ssl/certs/ca-certificates.crt",
             (int)strcspn(tls, "?"), tls);
    outbox_publish_result_t r = th_publish_one(bad, dest);
    ck_assert_msg(r.status == OUTBOX_PUBLISH_RETRY, "an unknown CA: %d %s", r.status, r.message);
}
END_TEST

/* tls_round_trip, when the broker has a TLS listener. */
static const TTest *tls_case(void)
{
    const char *tls = getenv("OUTBOX_RABBITMQ_TLS_URI");
    if (tls != NULL && tls[0] != '\0')
        return tls_round_trip;
    fprintf(stderr, "note: OUTBOX_RABBITMQ_TLS_URI is not set: amqps:// is not tested "
                    "(OUTBOX_RABBITMQ_TLS=1 tools/services/rabbitmq.sh start DIR sets it)\n");
    return NULL;
}

/* ------------------------------------------------------------- restarts */

static void clean_restart(void *dir)
{
    th_service("stop", dir);
    th_service("start", dir);
}

START_TEST(clean_restart_between_calls)
{
    /* A clean stop and start of the broker between two calls: the broker
     * closed the connection (connection.close), which the sink sees before
     * it sends, so the first call after is OK, not RETRY. (The battery's
     * outages accept RETRY until the sink has reconnected.) */
    char env[64], uri[256], dir[256];
    snprintf(env, sizeof env, "OUTBOX_RABBITMQ_PORT=%d", th_private_port());
    snprintf(dir, sizeof dir, "%s", th_private_dir("restart"));
    th_service_start(env, dir, "OUTBOX_RABBITMQ_URI", uri, sizeof uri);
    outbox_sink_t *k = th_open_sink(th_uri_with(uri, "?timeout=3s"));
    th_create(k, "restart");
    th_expect_ok_across(k, "restart", clean_restart, dir);
    outbox_sink_close(k);
}
END_TEST

TH_SINK_MAIN("amqp_sink", 180, "OUTBOX_RABBITMQ_URI", "rabbitmq", amqp_uri,
             uri_errors, wrong_password_from_env, queue_reader, reject_unroutable, exchange_binding,
             max_bytes_option, order_after_broker_reject, nack_retry_and_order,
             idle_past_heartbeat, tls_case(), th_script() ? clean_restart_between_calls : NULL)
