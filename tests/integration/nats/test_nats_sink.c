/* The NATS JetStream sink against a real nats-server, through the public
 * sink API and the real loader (OUTBOX_DRIVER_PATH points at the build
 * tree). OUTBOX_NATS_URI names the shared server; the outage cases start
 * a private one of their own with tools/services/nats.sh (its path is
 * argv[1]), so stopping it disturbs no other test.
 *
 * Every case publishes to subjects of its own (it_<pid>_<case>), so cases
 * and test programs can share one server. */
#include <check.h>
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "outbox/outbox.h"

static const char *nats_uri;
static const char *service_script;

static const char *base_uri(void)
{
    const char *uri = getenv("OUTBOX_NATS_URI");
    if (uri && *uri)
        return uri;
    const char *ci = getenv("CI");
    if (ci && strcmp(ci, "true") == 0) {
        fprintf(stderr, "FAIL: OUTBOX_NATS_URI is not set and CI=true: the NATS tests must run in "
                        "CI. Start a server with `eval \"$(tools/services/nats.sh start DIR)\"`.\n");
        exit(1);
    }
    fprintf(stderr,
            "\n*** SKIPPED: the NATS sink tests need a nats-server with JetStream. ***\n"
            "*** Install nats-server and libnats-dev (Debian), then run\n"
            "***   eval \"$(tools/services/nats.sh start /tmp/outbox-nats)\"\n"
            "*** (or set OUTBOX_NATS_URI=nats://host:port) and run the tests again.\n\n");
    exit(77);
}

/* The URI with a subject template path and query appended. */
static char *uri_with(const char *base, const char *path_and_query)
{
    static char buf[1024];
    snprintf(buf, sizeof buf, "%s%s", base, path_and_query);
    return buf;
}

static char *name_of(const char *tag)
{
    static char name[64];
    snprintf(name, sizeof name, "it_%ld_%s", (long)getpid(), tag);
    return name;
}

static outbox_sink_t *open_sink(const char *uri)
{
    outbox_sink_t *k = NULL;
    outbox_diag_t d = {0};
    int rc = outbox_sink_open(uri, NULL, &k, &d);
    ck_assert_msg(rc == OUTBOX_OK, "open %s: %s", uri, d.message);
    return k;
}

/* ------------------------------------------------------------ messages */

typedef struct tmsg {
    char id[40], key[32], payload[256], route[64];
    outbox_header_t headers[13];
} tmsg_t;

static const char *const header_names[] = {
    "id", "type", "source", "specversion", "time", "datacontenttype", "partitionkey",
    "traceparent", "tenantid", "correlationid", "causationid", "executionid", "hlc",
};
static char header_values[13][96];

static void make_msg(tmsg_t *t, outbox_message_t *m, const char *dest, const char *key, int n,
                     size_t payload_len)
{
    memset(t, 0, sizeof *t);
    outbox_uuid_v7(t->id);
    snprintf(t->key, sizeof t->key, "%s", key);
    snprintf(t->route, sizeof t->route, "%s", dest);
    snprintf(t->payload, sizeof t->payload, "{\"n\":%d}", n);
    snprintf(header_values[0], 96, "%s", "x");
    for (int i = 0; i < 13; i++) {
        t->headers[i].name = header_names[i];
        t->headers[i].value = header_names[i]; /* overwritten below where it matters */
    }
    t->headers[0].value = t->id;
    t->headers[1].value = "order.created";
    t->headers[2].value = "/outbox/it";
    t->headers[3].value = "1.0";
    t->headers[4].value = "2026-12-01T15:00:00.000000Z";
    t->headers[5].value = "application/json";
    t->headers[6].value = t->key;
    t->headers[7].value = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    t->headers[8].value = "0190a0e4-0000-7000-8000-000000000001";
    t->headers[9].value = "0190a0e4-0000-7000-8000-000000000002";
    t->headers[10].value = "0190a0e4-0000-7000-8000-000000000003";
    t->headers[11].value = "0190a0e4-0000-7000-8000-000000000004";
    t->headers[12].value = "123456789";
    *m = (outbox_message_t){.route = t->route, .destination = t->route, .key = t->key,
                            .event_id = t->id, .payload = t->payload,
                            .payload_len = payload_len ? payload_len : strlen(t->payload),
                            .headers = t->headers, .n_headers = 13};
}

static void publish(outbox_sink_t *k, outbox_message_t *m, size_t n, outbox_publish_result_t *r)
{
    memset(r, 0, n * sizeof *r);
    int rc = outbox_sink_publish(k, m, n, r);
    ck_assert_msg(rc == OUTBOX_OK, "publish: %s", outbox_sink_message(k));
}

static void create(outbox_sink_t *k, const char *dest)
{
    ck_assert_msg(outbox_sink_destination_create(k, dest) == OUTBOX_OK, "create %s: %s", dest,
                  outbox_sink_message(k));
}

/* Reads everything in dest until 2 s pass without a message. */
static int read_all(outbox_sink_t *k, const char *dest, char ids[][40], char payloads[][256],
                    int max)
{
    outbox_sink_reader_t *r = NULL;
    ck_assert_msg(outbox_sink_reader_open(k, dest, &r) == OUTBOX_OK, "reader: %s",
                  outbox_sink_message(k));
    int n = 0;
    outbox_received_t got;
    int rc;
    while ((rc = outbox_sink_reader_next(r, 2000, &got)) == OUTBOX_OK) {
        ck_assert_msg(n < max, "more than %d messages in %s", max, dest);
        ck_assert_ptr_null(got.key);
        ck_assert_ptr_nonnull(got.dedupe_id);
        snprintf(ids[n], 40, "%s", got.dedupe_id);
        snprintf(payloads[n], 256, "%.*s", (int)got.payload_len, got.payload);
        n++;
    }
    ck_assert_msg(rc == OUTBOX_ENOTFOUND, "reader_next: %s", outbox_sink_reader_message(r));
    outbox_sink_reader_close(r);
    return n;
}

/* ------------------------------------------------------------- options */

static void expect_open_error(const char *uri, const char *want, const char *secret)
{
    outbox_sink_t *k = NULL;
    outbox_diag_t d = {0};
    int rc = outbox_sink_open(uri, NULL, &k, &d);
    ck_assert_msg(rc == OUTBOX_EINVAL, "open %s: got %d (%s), expected EINVAL", uri, rc,
                  d.message);
    ck_assert_msg(strstr(d.message, want) != NULL, "open %s: \"%s\" lacks \"%s\"", uri, d.message,
                  want);
    ck_assert_msg(strchr(d.message, '\n') == NULL, "two lines: %s", d.message);
    if (secret)
        ck_assert_msg(strstr(d.message, secret) == NULL, "the secret shows: %s", d.message);
}

START_TEST(uri_errors)
{
    expect_open_error(uri_with(nats_uri, "/s?bogus=1"), "unknown parameter bogus", NULL);
    expect_open_error(uri_with(nats_uri, "/s?timeout=ten"), "timeout=ten is not a duration", NULL);
    expect_open_error(uri_with(nats_uri, "/s?timeout=0s"), "not a duration", NULL);
    expect_open_error(uri_with(nats_uri, "/s?tls=maybe"), "tls=maybe", NULL);
    expect_open_error(uri_with(nats_uri, "/s?servers=h1"), "has no port", NULL);
    expect_open_error(uri_with(nats_uri, "/s?tls_cert=/c.pem"), "tls_key go together", NULL);
    expect_open_error("nats:relative", "names no server", NULL);
    unsetenv("OUTBOX_IT_NO_SUCH_VAR");
    expect_open_error(uri_with(nats_uri, "/s?token_env=OUTBOX_IT_NO_SUCH_VAR"),
                      "OUTBOX_IT_NO_SUCH_VAR, which is not set", NULL);
}
END_TEST

START_TEST(secrets_not_shown)
{
    /* Each URI carries a secret and is refused for another reason: the
     * message names the URI, but never the secret. */
    const char *secret = "Sup3rSecretPw";
    char uri[512];
    snprintf(uri, sizeof uri, "nats://alice:%s@127.0.0.1:4222/s?bogus=1", secret);
    expect_open_error(uri, "unknown parameter bogus", secret);
    snprintf(uri, sizeof uri, "nats://127.0.0.1:4222/s?token=%s&timeout=x", secret);
    expect_open_error(uri, "timeout=x", secret);
    snprintf(uri, sizeof uri, "nats://alice:%s@127.0.0.1:4222/s?token=%s", secret, secret);
    expect_open_error(uri, "not both", secret);
    setenv("OUTBOX_IT_TOKEN", secret, 1);
    snprintf(uri, sizeof uri, "nats://bob@127.0.0.1:4222/s?token_env=OUTBOX_IT_TOKEN");
    expect_open_error(uri, "not both", secret);

    /* A server that wants no password still gets one; the handle's
     * messages (RETRY on a closed port) do not show it either. */
    snprintf(uri, sizeof uri, "nats://alice:%s@127.0.0.1:1/s", secret);
    outbox_sink_t *k = open_sink(uri);
    tmsg_t t;
    outbox_message_t m;
    outbox_publish_result_t r;
    make_msg(&t, &m, "s", "k", 1, 0);
    publish(k, &m, 1, &r);
    ck_assert_int_eq(r.status, OUTBOX_PUBLISH_RETRY);
    ck_assert_msg(strstr(r.message, secret) == NULL, "the secret shows: %s", r.message);
    ck_assert_msg(strstr(r.message, "***") != NULL, "the URI is not named: %s", r.message);
    outbox_sink_close(k);
}
END_TEST

/* ----------------------------------------------------------- round trip */

START_TEST(round_trip)
{
    const char *dest = name_of("rt");
    outbox_sink_t *k = open_sink(nats_uri);
    ck_assert(outbox_sink_capabilities(k) & OUTBOX_SINK_CAP_ORDERED);
    ck_assert(outbox_sink_capabilities(k) & OUTBOX_SINK_CAP_DEDUPE);
    create(k, dest);
    create(k, dest); /* again: not an error */
    enum { N = 50 };
    static tmsg_t t[N];
    outbox_message_t m[N];
    outbox_publish_result_t r[N];
    for (int i = 0; i < N; i++) {
        char key[8];
        snprintf(key, sizeof key, "k%d", i % 5);
        make_msg(&t[i], &m[i], dest, key, i, 0);
    }
    publish(k, m, N, r);
    for (int i = 0; i < N; i++)
        ck_assert_msg(r[i].status == OUTBOX_PUBLISH_OK, "message %d: %d %s", i, r[i].status,
                      r[i].message);

    outbox_sink_reader_t *rd = NULL;
    ck_assert(outbox_sink_reader_open(k, dest, &rd) == OUTBOX_OK);
    for (int i = 0; i < N; i++) {
        outbox_received_t got;
        ck_assert_msg(outbox_sink_reader_next(rd, 5000, &got) == OUTBOX_OK, "message %d: %s", i,
                      outbox_sink_reader_message(rd));
        ck_assert_str_eq(got.destination, dest);
        ck_assert_ptr_null(got.key);
        ck_assert_str_eq(got.dedupe_id, t[i].id);
        ck_assert_int_eq(got.payload_len, strlen(t[i].payload));
        ck_assert(memcmp(got.payload, t[i].payload, got.payload_len) == 0);
        ck_assert_int_eq(got.n_headers, 13);
        for (int h = 0; h < 13; h++) {
            const char *v = NULL;
            for (size_t j = 0; j < got.n_headers; j++)
                if (strcmp(got.headers[j].name, header_names[h]) == 0)
                    v = got.headers[j].value;
            ck_assert_msg(v != NULL, "header %s missing", header_names[h]);
            ck_assert_str_eq(v, t[i].headers[h].value);
        }
    }
    outbox_received_t more;
    ck_assert_int_eq(outbox_sink_reader_next(rd, 500, &more), OUTBOX_ENOTFOUND);
    outbox_sink_reader_close(rd);
    ck_assert(outbox_sink_destination_drop(k, dest) == OUTBOX_OK);
    outbox_sink_close(k);
}
END_TEST

START_TEST(dedupe)
{
    const char *dest = name_of("dd");
    outbox_sink_t *k = open_sink(nats_uri);
    create(k, dest);
    tmsg_t t;
    outbox_message_t m;
    outbox_publish_result_t r;
    make_msg(&t, &m, dest, "k", 1, 0);
    publish(k, &m, 1, &r);
    ck_assert_int_eq(r.status, OUTBOX_PUBLISH_OK);
    publish(k, &m, 1, &r); /* the relay publishing it again after a crash */
    ck_assert_int_eq(r.status, OUTBOX_PUBLISH_OK);
    static char ids[8][40], payloads[8][256];
    ck_assert_int_eq(read_all(k, dest, ids, payloads, 8), 1);
    ck_assert_str_eq(ids[0], t.id);
    outbox_sink_destination_drop(k, dest);
    outbox_sink_close(k);
}
END_TEST

/* nats://dead:1,live:port: a list of servers in the authority; one that
 * answers is enough. */
START_TEST(server_list)
{
    const char *dest = name_of("sl");
    char uri[512];
    char server[256];
    snprintf(server, sizeof server, "%s", nats_uri + strlen("nats://"));
    server[strcspn(server, "/?")] = '\0';
    snprintf(uri, sizeof uri, "nats://127.0.0.1:1,%s", server);
    outbox_sink_t *k = open_sink(uri);
    create(k, dest);
    tmsg_t t;
    outbox_message_t m;
    outbox_publish_result_t r;
    make_msg(&t, &m, dest, "k", 1, 0);
    publish(k, &m, 1, &r);
    ck_assert_msg(r.status == OUTBOX_PUBLISH_OK, "%d %s", r.status, r.message);
    static char ids[8][40], payloads[8][256];
    ck_assert_int_eq(read_all(k, dest, ids, payloads, 8), 1);
    ck_assert_str_eq(ids[0], t.id);
    outbox_sink_destination_drop(k, dest);
    outbox_sink_close(k);
}
END_TEST

/* -------------------------------------------------------------- REJECT */

START_TEST(reject_no_stream)
{
    outbox_sink_t *k = open_sink(nats_uri);
    tmsg_t t;
    outbox_message_t m;
    outbox_publish_result_t r;
    make_msg(&t, &m, name_of("nostream"), "k", 1, 0);
    publish(k, &m, 1, &r);
    ck_assert_int_eq(r.status, OUTBOX_PUBLISH_REJECT);
    ck_assert_msg(strstr(r.message, "no JetStream stream captures subject") != NULL, "%s",
                  r.message);
    ck_assert_msg(strstr(r.message, name_of("nostream")) != NULL, "%s", r.message);
    outbox_sink_close(k);
}
END_TEST

START_TEST(reject_oversize)
{
    const char *dest = name_of("big");
    outbox_sink_t *k = open_sink(nats_uri);
    create(k, dest);
    size_t big = 4u << 20;
    char *payload = malloc(big);
    memset(payload, ' ', big);
    payload[0] = '1';
    static tmsg_t t[2];
    outbox_message_t m[2];
    outbox_publish_result_t r[2];
    make_msg(&t[0], &m[0], dest, "a", 0, 0);
    m[0].payload = payload;
    m[0].payload_len = big;
    make_msg(&t[1], &m[1], dest, "b", 1, 0);
    publish(k, m, 2, r);
    ck_assert_msg(r[0].status == OUTBOX_PUBLISH_REJECT, "%d %s", r[0].status, r[0].message);
    ck_assert_msg(strstr(r[0].message, "max_payload") != NULL, "%s", r[0].message);
    ck_assert_msg(r[1].status == OUTBOX_PUBLISH_OK, "%s", r[1].message);
    free(payload);
    outbox_sink_destination_drop(k, dest);
    outbox_sink_close(k);
}
END_TEST

START_TEST(reject_line_break_header)
{
    /* Found before sending: REJECT, and the key's later event is held
     * back, while another key goes on. */
    const char *dest = name_of("lb");
    outbox_sink_t *k = open_sink(nats_uri);
    create(k, dest);
    static tmsg_t t[4];
    outbox_message_t m[4];
    outbox_publish_result_t r[4];
    for (int i = 0; i < 4; i++)
        make_msg(&t[i], &m[i], dest, i == 3 ? "other" : "k", i, 0);
    t[1].headers[1].value = "order\r\ncreated";
    publish(k, m, 4, r);
    ck_assert_msg(r[0].status == OUTBOX_PUBLISH_OK, "%s", r[0].message);
    ck_assert_msg(r[1].status == OUTBOX_PUBLISH_REJECT, "%d %s", r[1].status, r[1].message);
    ck_assert_msg(strstr(r[1].message, "line break") != NULL, "%s", r[1].message);
    ck_assert_msg(r[2].status == OUTBOX_PUBLISH_RETRY, "%d %s", r[2].status, r[2].message);
    ck_assert_msg(strstr(r[2].message, "held back") != NULL, "%s", r[2].message);
    ck_assert_msg(r[3].status == OUTBOX_PUBLISH_OK, "%s", r[3].message);
    static char ids[8][40], payloads[8][256];
    ck_assert_int_eq(read_all(k, dest, ids, payloads, 8), 2);
    outbox_sink_destination_drop(k, dest);
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
    cfg.MaxMsgSize = 600; /* headers count: a small message is about 450 bytes */
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
    const char *dest = name_of("ord");
    char stream[80];
    snprintf(stream, sizeof stream, "%s_s", dest);
    small_stream(dest, stream);
    outbox_sink_t *k = open_sink(nats_uri);
    /* Key a: a0 a1 a2(too big for the stream) a3 a4; key b: b0..b4, all
     * fine, interleaved with a's. */
    enum { N = 10 };
    static tmsg_t t[N];
    outbox_message_t m[N];
    outbox_publish_result_t r[N];
    static char bigpayload[800];
    memset(bigpayload, ' ', sizeof bigpayload);
    bigpayload[0] = '2';
    for (int i = 0; i < N; i++) {
        make_msg(&t[i], &m[i], dest, i % 2 ? "b" : "a", i, 0);
        if (i == 4) {
            m[i].payload = bigpayload;
            m[i].payload_len = sizeof bigpayload;
        }
    }
    publish(k, m, N, r);
    for (int i = 0; i < N; i++) {
        int want = i % 2 ? OUTBOX_PUBLISH_OK
                   : i < 4 ? OUTBOX_PUBLISH_OK
                   : i == 4 ? OUTBOX_PUBLISH_REJECT
                            : OUTBOX_PUBLISH_RETRY;
        ck_assert_msg(r[i].status == want, "message %d (key %s): status %d, expected %d: %s", i,
                      t[i].key, r[i].status, want, r[i].message);
    }
    ck_assert_msg(strstr(r[4].message, "10054") != NULL, "%s", r[4].message);
    ck_assert_msg(strstr(r[6].message, "held back") != NULL, "%s", r[6].message);
    /* The stream holds a0 a1 and every b, and nothing of a after a2. */
    static char ids[16][40], payloads[16][256];
    int n = read_all(k, dest, ids, payloads, 16);
    ck_assert_int_eq(n, 7);
    for (int j = 0; j < n; j++)
        for (int i = 6; i < N; i += 2)
            ck_assert_msg(strcmp(ids[j], t[i].id) != 0, "a%d was delivered after a2 failed", i / 2);
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

/* ------------------------------------------------------------- outages */

START_TEST(retry_closed_port)
{
    outbox_sink_t *k = open_sink("nats://127.0.0.1:1/s");
    enum { N = 20 };
    static tmsg_t t[N];
    outbox_message_t m[N];
    outbox_publish_result_t r[N];
    for (int i = 0; i < N; i++)
        make_msg(&t[i], &m[i], "s", i % 3 ? "x" : "y", i, 0);
    publish(k, m, N, r);
    for (int i = 0; i < N; i++)
        ck_assert_msg(r[i].status == OUTBOX_PUBLISH_RETRY, "message %d: %d %s", i, r[i].status,
                      r[i].message);
    outbox_sink_close(k);
}
END_TEST

static char private_dir[256];

/* A port nothing listens on now, from the kernel (bound to port 0 and
 * let go), so parallel tests with servers of their own do not collide. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    ck_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    ck_assert(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

static void service(const char *cmd)
{
    char line[1024];
    snprintf(line, sizeof line, "%s %s %s >/dev/null", service_script, cmd, private_dir);
    ck_assert_msg(system(line) == 0, "%s failed", line);
}

/* Publishes m until it is OK: the connection comes back by itself after
 * a server start, at its reconnect wait. Gives up after 60 tries of one
 * PubAck timeout each at most. */
static void publish_until_ok(outbox_sink_t *k, outbox_message_t *m)
{
    outbox_publish_result_t r;
    for (int i = 0; i < 300; i++) {
        publish(k, m, 1, &r);
        if (r.status == OUTBOX_PUBLISH_OK)
            return;
        ck_assert_msg(r.status == OUTBOX_PUBLISH_RETRY, "while reconnecting: %d %s", r.status,
                      r.message);
        usleep(200000);
    }
    ck_abort_msg("never OK after the server came back: %s", r.message);
}

START_TEST(retry_server_down)
{
    /* A private server on a port chosen now, so the sink can be opened
     * before the server exists; nats.sh starts on the ports it finds. */
    snprintf(private_dir, sizeof private_dir, "/tmp/outbox-it-nats.%ld", (long)getpid());
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", private_dir, private_dir);
    ck_assert(system(cmd) == 0);
    int port = free_port(), mport = free_port();
    while (mport == port)
        mport = free_port();
    snprintf(cmd, sizeof cmd, "echo %d >%s/port && echo %d >%s/monitor_port", port, private_dir,
             mport, private_dir);
    ck_assert(system(cmd) == 0);
    char uri[128];
    snprintf(uri, sizeof uri, "nats://127.0.0.1:%d?timeout=3s&reconnect_wait=100ms", port);

    outbox_sink_t *k = open_sink(uri); /* nothing listens yet */
    enum { N = 10 };
    static tmsg_t t[N];
    outbox_message_t m[N];
    outbox_publish_result_t r[N];
    for (int i = 0; i < N; i++)
        make_msg(&t[i], &m[i], "down", "k", i, 0);
    publish(k, m, N, r);
    for (int i = 0; i < N; i++)
        ck_assert_msg(r[i].status == OUTBOX_PUBLISH_RETRY, "down: %d %s", r[i].status,
                      r[i].message);

    service("start");
    int created = OUTBOX_ETRANSIENT;
    for (int i = 0; i < 100 && created != OUTBOX_OK; i++) {
        created = outbox_sink_destination_create(k, "down");
        if (created != OUTBOX_OK)
            usleep(100000);
    }
    ck_assert_msg(created == OUTBOX_OK, "create after start: %s", outbox_sink_message(k));
    publish_until_ok(k, &m[0]);
    publish(k, m, N, r);
    for (int i = 0; i < N; i++)
        ck_assert_msg(r[i].status == OUTBOX_PUBLISH_OK, "up: %d %s", r[i].status, r[i].message);

    /* Killed: RETRY, never OK or REJECT; back on its store: OK again on
     * the same handle, and the stream kept what was acknowledged. */
    service("kill");
    publish(k, m, N, r);
    for (int i = 0; i < N; i++)
        ck_assert_msg(r[i].status == OUTBOX_PUBLISH_RETRY, "killed: %d %s", r[i].status,
                      r[i].message);
    service("start");
    publish_until_ok(k, &m[1]);
    publish(k, m, N, r);
    for (int i = 0; i < N; i++)
        ck_assert_msg(r[i].status == OUTBOX_PUBLISH_OK, "restarted: %d %s", r[i].status,
                      r[i].message);
    static char ids[64][40], payloads[64][256];
    ck_assert_int_eq(read_all(k, "down", ids, payloads, 64), N);
    outbox_sink_close(k);
    service("stop");
    snprintf(cmd, sizeof cmd, "rm -rf %s", private_dir);
    ck_assert(system(cmd) == 0);
}
END_TEST

int main(int argc, char **argv)
{
    nats_uri = base_uri();
    service_script = argc > 1 ? argv[1] : NULL;
    Suite *s = suite_create("nats_sink");
    TCase *tc = tcase_create("nats");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, uri_errors);
    tcase_add_test(tc, secrets_not_shown);
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, dedupe);
    tcase_add_test(tc, server_list);
    tcase_add_test(tc, reject_no_stream);
    tcase_add_test(tc, reject_oversize);
    tcase_add_test(tc, reject_line_break_header);
    tcase_add_test(tc, order_after_server_reject);
    tcase_add_test(tc, retry_closed_port);
    if (service_script)
        tcase_add_test(tc, retry_server_down);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
