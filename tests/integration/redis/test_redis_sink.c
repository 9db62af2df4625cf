/* The Redis Streams sink against a real redis-server, through the public
 * sink API and the real loader (OUTBOX_DRIVER_PATH points at the build
 * tree). OUTBOX_REDIS_URI names the shared server; the outage and
 * password cases start private ones of their own with
 * tools/services/redis.sh (its path is argv[1]), so stopping one disturbs
 * no other test. hiredis, used directly, sets up what a case needs (a
 * key of the wrong type) and checks what the sink cannot say itself (a
 * stream's length, a database).
 *
 * Every case uses streams of its own (it_<pid>_<tag>), so cases and test
 * programs can share one server. */
#include <check.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "outbox/outbox.h"

static const char *redis_uri;
static const char *service_script;
static long main_pid; /* names the private servers' directories, for the teardown */

static const char *base_uri(void)
{
    const char *uri = getenv("OUTBOX_REDIS_URI");
    if (uri && *uri)
        return uri;
    const char *ci = getenv("CI");
    if (ci && strcmp(ci, "true") == 0) {
        fprintf(stderr, "FAIL: OUTBOX_REDIS_URI is not set and CI=true: the Redis tests must run "
                        "in CI. Start a server with `eval \"$(tools/services/redis.sh start DIR)\"`.\n");
        exit(1);
    }
    fprintf(stderr,
            "\n*** SKIPPED: the Redis sink tests need a redis-server. ***\n"
            "*** Install redis-server and libhiredis-dev (Debian), then run\n"
            "***   eval \"$(tools/services/redis.sh start /tmp/outbox-redis)\"\n"
            "*** (or set OUTBOX_REDIS_URI=redis://host:port) and run the tests again.\n\n");
    exit(77);
}

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

/* host and port of OUTBOX_REDIS_URI (redis://host:port). */
static redisContext *direct(void)
{
    char host[128];
    int port = 6379;
    const char *p = redis_uri + strlen("redis://");
    size_t n = strcspn(p, ":/");
    snprintf(host, sizeof host, "%.*s", (int)n, p);
    if (p[n] == ':')
        port = atoi(p + n + 1);
    redisContext *c = redisConnect(host, port);
    ck_assert_msg(c && !c->err, "hiredis connect to %s: %s", redis_uri, c ? c->errstr : "?");
    return c;
}

static long long direct_int(redisContext *c, const char *cmd, const char *arg)
{
    redisReply *r = redisCommand(c, "%s %s", cmd, arg);
    ck_assert_msg(r && r->type == REDIS_REPLY_INTEGER, "%s %s: %s", cmd, arg,
                  r && r->str ? r->str : "no integer");
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

static void direct_ok(redisContext *c, const char *cmd)
{
    redisReply *r = redisCommand(c, cmd);
    ck_assert_msg(r && r->type != REDIS_REPLY_ERROR, "%s: %s", cmd, r && r->str ? r->str : "?");
    freeReplyObject(r);
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

static void make_msg(tmsg_t *t, outbox_message_t *m, const char *dest, const char *key, int n)
{
    memset(t, 0, sizeof *t);
    outbox_uuid_v7(t->id);
    snprintf(t->key, sizeof t->key, "%s", key);
    snprintf(t->route, sizeof t->route, "%s", dest);
    snprintf(t->payload, sizeof t->payload, "{\"n\":%d,\"s\":\"caf\xc3\xa9\"}", n);
    static const char *const values[13] = {
        NULL, "order.created", "/outbox/it", "1.0", "2026-12-01T15:00:00.000000Z",
        "application/json", NULL, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "0190a0e4-0000-7000-8000-000000000001", "0190a0e4-0000-7000-8000-000000000002",
        "0190a0e4-0000-7000-8000-000000000003", "0190a0e4-0000-7000-8000-000000000004",
        "123456789",
    };
    for (int i = 0; i < 13; i++) {
        t->headers[i].name = header_names[i];
        t->headers[i].value = values[i];
    }
    t->headers[0].value = t->id;
    t->headers[6].value = t->key;
    *m = (outbox_message_t){.route = t->route, .destination = t->route, .key = t->key,
                            .event_id = t->id, .payload = t->payload,
                            .payload_len = strlen(t->payload), .headers = t->headers,
                            .n_headers = 13};
}

static void publish(outbox_sink_t *k, outbox_message_t *m, size_t n, outbox_publish_result_t *r)
{
    memset(r, 0, n * sizeof *r);
    int rc = outbox_sink_publish(k, m, n, r);
    ck_assert_msg(rc == OUTBOX_OK, "publish: %s", outbox_sink_message(k));
}

static void expect_all(const outbox_publish_result_t *r, size_t n, int status, const char *when)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(r[i].status == status, "%s: message %zu gave %d (%s), expected %d", when, i,
                      r[i].status, r[i].message, status);
}

/* The event ids in dest, in stream order, until 1 s passes without one. */
static int read_ids(outbox_sink_t *k, const char *dest, char ids[][40], int max)
{
    outbox_sink_reader_t *r = NULL;
    ck_assert_msg(outbox_sink_reader_open(k, dest, &r) == OUTBOX_OK, "reader: %s",
                  outbox_sink_message(k));
    int n = 0, rc;
    outbox_received_t got = {.struct_size = sizeof got};
    while ((rc = outbox_sink_reader_next(r, 1000, &got)) == OUTBOX_OK) {
        ck_assert_msg(n < max, "more than %d messages in %s", max, dest);
        const char *id = NULL;
        for (size_t h = 0; h < got.n_headers; h++)
            if (strcmp(got.headers[h].name, "id") == 0)
                id = got.headers[h].value;
        ck_assert_msg(id != NULL, "an entry of %s has no id field", dest);
        snprintf(ids[n++], 40, "%s", id);
    }
    ck_assert_msg(rc == OUTBOX_ENOTFOUND, "reader_next: %s", outbox_sink_reader_message(r));
    outbox_sink_reader_close(r);
    return n;
}

/* ------------------------------------------------------------- options */

static void expect_open_error(const char *uri, int code, const char *want, const char *secret)
{
    outbox_sink_t *k = NULL;
    outbox_diag_t d = {0};
    int rc = outbox_sink_open(uri, NULL, &k, &d);
    ck_assert_msg(rc == code, "open %s: got %d (%s), expected %d", uri, rc, d.message, code);
    ck_assert_msg(strstr(d.message, want) != NULL, "open %s: \"%s\" lacks \"%s\"", uri, d.message,
                  want);
    ck_assert_msg(strchr(d.message, '\n') == NULL, "two lines: %s", d.message);
    if (secret)
        ck_assert_msg(strstr(d.message, secret) == NULL, "the secret shows: %s", d.message);
}

START_TEST(uri_errors)
{
    const char *u = redis_uri;
    expect_open_error(uri_with(u, "/s?bogus=1"), OUTBOX_EINVAL, "unknown parameter bogus", NULL);
    expect_open_error(uri_with(u, "/s?timeout=ten"), OUTBOX_EINVAL, "timeout=ten is not a duration",
                      NULL);
    expect_open_error(uri_with(u, "/s?timeout=0s"), OUTBOX_EINVAL, "not a duration", NULL);
    expect_open_error(uri_with(u, "/s?maxlen=0"), OUTBOX_EINVAL, "maxlen=0", NULL);
    expect_open_error(uri_with(u, "/s?maxlen=-5"), OUTBOX_EINVAL, "maxlen=-5", NULL);
    expect_open_error(uri_with(u, "/s?max_bytes=1g"), OUTBOX_EINVAL, "max_bytes=1g", NULL);
    expect_open_error(uri_with(u, "/s?max_bytes=999999999999"), OUTBOX_EINVAL, "max_bytes=", NULL);
    expect_open_error(uri_with(u, "/1234567890/s"), OUTBOX_EINVAL, "database number", NULL);
    expect_open_error("redis:relative", OUTBOX_EINVAL, "names no server", NULL);
    expect_open_error("redis://h1:6379,h2:6379/s", OUTBOX_EINVAL, "one server only", NULL);
    expect_open_error("rediss://127.0.0.1:6379/s", OUTBOX_ENOTSUP, "not supported", NULL);
    expect_open_error("redis://alice@127.0.0.1:1/s", OUTBOX_EINVAL, "has no password", NULL);
    unsetenv("OUTBOX_IT_NO_SUCH_VAR");
    expect_open_error(uri_with(u, "/s?password_env=OUTBOX_IT_NO_SUCH_VAR"), OUTBOX_EINVAL,
                      "OUTBOX_IT_NO_SUCH_VAR, which is not set", NULL);
    /* A database the server does not have (16 by default). */
    expect_open_error(uri_with(u, "/99/s"), OUTBOX_EINVAL, "SELECT refused", NULL);
}
END_TEST

START_TEST(secrets_not_shown_offline)
{
    /* Each URI carries a secret and is refused for another reason, or
     * points at a closed port: no message shows the secret. */
    const char *secret = "Sup3rSecretPw";
    char uri[512];
    snprintf(uri, sizeof uri, "redis://alice:%s@127.0.0.1:1/s?bogus=1", secret);
    expect_open_error(uri, OUTBOX_EINVAL, "unknown parameter bogus", secret);
    snprintf(uri, sizeof uri, "redis://:%s@127.0.0.1:1/s?timeout=x", secret);
    expect_open_error(uri, OUTBOX_EINVAL, "timeout=x", secret);
    snprintf(uri, sizeof uri, "redis://:%s@127.0.0.1:1/s", secret);
    outbox_sink_t *k = open_sink(uri);
    static tmsg_t t;
    outbox_message_t m;
    outbox_publish_result_t r;
    make_msg(&t, &m, "s", "k", 1);
    publish(k, &m, 1, &r);
    ck_assert_int_eq(r.status, OUTBOX_PUBLISH_RETRY);
    ck_assert_msg(strstr(r.message, secret) == NULL, "the result shows the secret: %s", r.message);
    ck_assert_msg(strstr(r.message, "***") != NULL, "the result names no URI: %s", r.message);
    outbox_sink_close(k);
}
END_TEST

/* ------------------------------------------------------------ delivery */

START_TEST(round_trip)
{
    /* Payload bytes, the key and all 13 attributes come back through the
     * reader, and the entries hold exactly the documented fields. */
    outbox_sink_t *k = open_sink(uri_with(redis_uri, ""));
    enum { N = 40 };
    static tmsg_t t[N];
    outbox_message_t m[N];
    outbox_publish_result_t r[N];
    char dest[64];
    snprintf(dest, sizeof dest, "%s", name_of("rt"));
    ck_assert_msg(outbox_sink_destination_create(k, dest) == OUTBOX_OK, "create: %s",
                  outbox_sink_message(k));
    for (int i = 0; i < N; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%d", i % 4);
        make_msg(&t[i], &m[i], dest, key, i);
    }
    publish(k, m, N, r);
    expect_all(r, N, OUTBOX_PUBLISH_OK, "round trip");

    outbox_sink_reader_t *rd = NULL;
    ck_assert(outbox_sink_reader_open(k, dest, &rd) == OUTBOX_OK);
    int last[4] = {-1, -1, -1, -1};
    for (int n = 0; n < N; n++) {
        outbox_received_t got = {.struct_size = sizeof got};
        ck_assert_msg(outbox_sink_reader_next(rd, 2000, &got) == OUTBOX_OK, "entry %d: %s", n,
                      outbox_sink_reader_message(rd));
        ck_assert_str_eq(got.destination, dest);
        ck_assert_ptr_null(got.dedupe_id);
        const char *id = NULL;
        for (size_t h = 0; h < got.n_headers; h++)
            if (strcmp(got.headers[h].name, "id") == 0)
                id = got.headers[h].value;
        int i = -1;
        for (int j = 0; j < N && id; j++)
            if (strcmp(t[j].id, id) == 0)
                i = j;
        ck_assert_msg(i >= 0, "entry %d is no published event (id %s)", n, id ? id : "none");
        ck_assert_msg(got.payload_len == m[i].payload_len &&
                          memcmp(got.payload, m[i].payload, got.payload_len) == 0,
                      "entry %d: payload %.*s, published %s", n, (int)got.payload_len,
                      got.payload, m[i].payload);
        ck_assert_msg(got.key && strcmp(got.key, t[i].key) == 0, "entry %d: key %s, want %s", n,
                      got.key ? got.key : "none", t[i].key);
        ck_assert_msg(got.n_headers == 13, "entry %d has %zu attributes, want 13", n,
                      got.n_headers);
        for (size_t h = 0; h < 13; h++) {
            const char *v = NULL;
            for (size_t g = 0; g < got.n_headers; g++)
                if (strcmp(got.headers[g].name, t[i].headers[h].name) == 0)
                    v = got.headers[g].value;
            ck_assert_msg(v && strcmp(v, t[i].headers[h].value) == 0, "entry %d: %s is %s, want %s",
                          n, t[i].headers[h].name, v ? v : "missing", t[i].headers[h].value);
        }
        int kk = i % 4;
        ck_assert_msg(i > last[kk], "key k%d: event %d read after event %d", kk, i, last[kk]);
        last[kk] = i;
    }
    outbox_received_t extra = {.struct_size = sizeof extra};
    ck_assert_int_eq(outbox_sink_reader_next(rd, 300, &extra), OUTBOX_ENOTFOUND);
    outbox_sink_reader_close(rd);

    /* The entry as any client sees it: data plus the 13 fields. */
    redisContext *c = direct();
    redisReply *x = redisCommand(c, "XRANGE %s - + COUNT 1", dest);
    ck_assert(x && x->type == REDIS_REPLY_ARRAY && x->elements == 1);
    redisReply *fields = x->element[0]->element[1];
    ck_assert_msg(fields->elements == 28, "an entry has %zu field names and values, want 28",
                  fields->elements);
    ck_assert_str_eq(fields->element[0]->str, "data");
    freeReplyObject(x);
    ck_assert_msg(outbox_sink_destination_drop(k, dest) == OUTBOX_OK, "drop: %s",
                  outbox_sink_message(k));
    ck_assert_int_eq(direct_int(c, "EXISTS", dest), 0);
    redisFree(c);
    outbox_sink_close(k);
}
END_TEST

START_TEST(stream_template_and_db)
{
    /* The path: database 3, stream "it_<pid>:{route}". */
    char tpl[128], dest[96];
    snprintf(tpl, sizeof tpl, "/3/%s:{route}", name_of("tpl"));
    snprintf(dest, sizeof dest, "%s:orders", name_of("tpl"));
    outbox_sink_t *k = open_sink(uri_with(redis_uri, tpl));
    static tmsg_t t[3];
    outbox_message_t m[3];
    outbox_publish_result_t r[3];
    for (int i = 0; i < 3; i++)
        make_msg(&t[i], &m[i], "orders", "k", i);
    publish(k, m, 3, r);
    expect_all(r, 3, OUTBOX_PUBLISH_OK, "template");
    redisContext *c = direct();
    ck_assert_int_eq(direct_int(c, "EXISTS", dest), 0); /* not in database 0 */
    direct_ok(c, "SELECT 3");
    ck_assert_int_eq(direct_int(c, "XLEN", dest), 3);
    direct_int(c, "DEL", dest);
    redisFree(c);
    outbox_sink_close(k);
}
END_TEST

START_TEST(reject_oversize)
{
    /* Over max_bytes (1 MiB by default): REJECT before sending, with a
     * message; its neighbours of other keys are delivered. Redis itself
     * would take it. */
    outbox_sink_t *k = open_sink(uri_with(redis_uri, ""));
    char dest[64];
    snprintf(dest, sizeof dest, "%s", name_of("big"));
    static tmsg_t t[3];
    outbox_message_t m[3];
    outbox_publish_result_t r[3];
    for (int i = 0; i < 3; i++)
        make_msg(&t[i], &m[i], dest, i == 1 ? "b" : "a", i);
    m[2].key = t[2].key;
    snprintf(t[2].key, sizeof t[2].key, "c");
    size_t big = (size_t)2 << 20;
    char *p = malloc(big);
    ck_assert(p);
    memset(p, 'x', big);
    m[1].payload = p;
    m[1].payload_len = big;
    publish(k, m, 3, r);
    ck_assert_msg(r[1].status == OUTBOX_PUBLISH_REJECT && strstr(r[1].message, "max_bytes"),
                  "2 MiB: %d %s", r[1].status, r[1].message);
    ck_assert_int_eq(r[0].status, OUTBOX_PUBLISH_OK);
    ck_assert_int_eq(r[2].status, OUTBOX_PUBLISH_OK);
    outbox_sink_close(k);

    /* max_bytes raised: the same message goes. */
    k = open_sink(uri_with(redis_uri, "?max_bytes=4194304"));
    publish(k, &m[1], 1, r);
    ck_assert_msg(r[0].status == OUTBOX_PUBLISH_OK, "with max_bytes=4194304: %s", r[0].message);
    outbox_sink_close(k);
    free(p);
    redisContext *c = direct();
    ck_assert_int_eq(direct_int(c, "XLEN", dest), 3);
    direct_int(c, "DEL", dest);
    redisFree(c);
}
END_TEST

START_TEST(wrongtype_reject)
{
    /* The stream key holds a string: WRONGTYPE, REJECT, as a plain XADD
     * (one message of its key) and in a key's run (the first REJECT, the
     * rest RETRY); another key's message is delivered. */
    char str[64], ok[64];
    snprintf(str, sizeof str, "%s", name_of("str"));
    snprintf(ok, sizeof ok, "%s", name_of("strok"));
    redisContext *c = direct();
    redisReply *x = redisCommand(c, "SET %s hello", str);
    freeReplyObject(x);
    outbox_sink_t *k = open_sink(uri_with(redis_uri, "/{route}"));
    ck_assert_int_eq(outbox_sink_destination_create(k, str), OUTBOX_EPERMANENT);
    ck_assert_msg(strstr(outbox_sink_message(k), "holds a string"), "%s", outbox_sink_message(k));
    static tmsg_t t[5];
    outbox_message_t m[5];
    outbox_publish_result_t r[5];
    make_msg(&t[0], &m[0], str, "solo", 0);
    make_msg(&t[1], &m[1], str, "run", 1);
    make_msg(&t[2], &m[2], ok, "other", 2);
    make_msg(&t[3], &m[3], str, "run", 3);
    make_msg(&t[4], &m[4], str, "run", 4);
    publish(k, m, 5, r);
    ck_assert_msg(r[0].status == OUTBOX_PUBLISH_REJECT && strstr(r[0].message, "WRONGTYPE"),
                  "single XADD: %d %s", r[0].status, r[0].message);
    ck_assert_msg(r[1].status == OUTBOX_PUBLISH_REJECT && strstr(r[1].message, "WRONGTYPE"),
                  "run's first: %d %s", r[1].status, r[1].message);
    ck_assert_msg(r[3].status == OUTBOX_PUBLISH_RETRY && strstr(r[3].message, "held back"),
                  "run's second: %d %s", r[3].status, r[3].message);
    ck_assert_int_eq(r[4].status, OUTBOX_PUBLISH_RETRY);
    ck_assert_int_eq(r[2].status, OUTBOX_PUBLISH_OK);
    direct_int(c, "DEL", str);
    direct_int(c, "DEL", ok);
    redisFree(c);
    outbox_sink_close(k);
}
END_TEST

START_TEST(order_after_server_error)
{
    /* One key's messages over two streams ("{route}"), the second of which
     * holds a string: a0 OK on A, a1 refused by the server on B, and a2
     * and a3, back on A, must not be added after it (RETRY); key b, on A,
     * is delivered in full. The server, not the sink, finds the error,
     * in the middle of the key's run. */
    char a[64], bad[64];
    snprintf(a, sizeof a, "%s", name_of("ordA"));
    snprintf(bad, sizeof bad, "%s", name_of("ordB"));
    redisContext *c = direct();
    freeReplyObject(redisCommand(c, "SET %s x", bad));
    outbox_sink_t *k = open_sink(uri_with(redis_uri, "/{route}"));
    enum { N = 8 };
    static tmsg_t t[N];
    outbox_message_t m[N];
    outbox_publish_result_t r[N];
    const char *routes[N] = {a, a, bad, a, a, a, a, a};
    const char *keys[N] = {"ka", "kb", "ka", "kb", "ka", "kb", "ka", "kb"};
    for (int i = 0; i < N; i++)
        make_msg(&t[i], &m[i], routes[i], keys[i], i);
    publish(k, m, N, r);
    ck_assert_msg(r[0].status == OUTBOX_PUBLISH_OK, "a0: %s", r[0].message);
    ck_assert_msg(r[2].status == OUTBOX_PUBLISH_REJECT && strstr(r[2].message, "WRONGTYPE"),
                  "a1: %d %s", r[2].status, r[2].message);
    ck_assert_msg(r[4].status == OUTBOX_PUBLISH_RETRY && r[6].status == OUTBOX_PUBLISH_RETRY,
                  "a2, a3 after a1's refusal: %d %s / %d %s", r[4].status, r[4].message,
                  r[6].status, r[6].message);
    for (int i = 1; i < N; i += 2)
        ck_assert_msg(r[i].status == OUTBOX_PUBLISH_OK, "b%d: %s", i / 2, r[i].message);
    static char ids[16][40];
    int n = read_ids(k, a, ids, 16);
    ck_assert_int_eq(n, 5); /* a0 and b0..b3 */
    for (int j = 0; j < n; j++)
        ck_assert_msg(strcmp(ids[j], t[4].id) != 0 && strcmp(ids[j], t[6].id) != 0,
                      "a message of ka was added after its refused one");
    direct_int(c, "DEL", a);
    direct_int(c, "DEL", bad);
    redisFree(c);
    outbox_sink_close(k);
}
END_TEST

START_TEST(maxlen_trims)
{
    /* maxlen=50: XADD MAXLEN ~ 50 keeps the stream near 50 entries (the
     * server trims whole nodes of up to 100, so "near" is under 200), not
     * the 1000 added. */
    char dest[64];
    snprintf(dest, sizeof dest, "%s", name_of("trim"));
    outbox_sink_t *k = open_sink(uri_with(redis_uri, "?maxlen=50"));
    enum { N = 1000 };
    static tmsg_t t[N];
    static outbox_message_t m[N];
    static outbox_publish_result_t r[N];
    for (int i = 0; i < N; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%d", i % 3 ? 0 : i); /* runs and single messages */
        make_msg(&t[i], &m[i], dest, key, i);
    }
    publish(k, m, N, r);
    expect_all(r, N, OUTBOX_PUBLISH_OK, "maxlen");
    redisContext *c = direct();
    long long len = direct_int(c, "XLEN", dest);
    ck_assert_msg(len >= 50 && len < 200, "with maxlen=50 the stream holds %lld of %d", len, N);
    direct_int(c, "DEL", dest);
    redisFree(c);
    outbox_sink_close(k);
}
END_TEST

/* ------------------------------------------------------------- outages */

START_TEST(retry_closed_port)
{
    outbox_sink_t *k = open_sink("redis://127.0.0.1:1/s");
    enum { N = 20 };
    static tmsg_t t[N];
    outbox_message_t m[N];
    outbox_publish_result_t r[N];
    for (int i = 0; i < N; i++)
        make_msg(&t[i], &m[i], "s", i % 3 ? "x" : "y", i);
    publish(k, m, N, r);
    expect_all(r, N, OUTBOX_PUBLISH_RETRY, "closed port");
    outbox_sink_close(k);
}
END_TEST

static char private_dir[256];

/* A port nothing listens on now, from the kernel. */
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

static void service(const char *env, const char *cmd)
{
    char line[2048];
    snprintf(line, sizeof line, "%s %s %s %s >/dev/null", env, service_script, cmd, private_dir);
    ck_assert_msg(system(line) == 0, "%s failed", line);
}

/* A private directory whose server will listen on a port chosen now. */
static int private_server(const char *tag)
{
    snprintf(private_dir, sizeof private_dir, "/tmp/outbox-it-redis.%ld.%s", main_pid, tag);
    char cmd[1200];
    int port = free_port();
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s && echo %d >%s/port", private_dir,
             private_dir, port, private_dir);
    ck_assert(system(cmd) == 0);
    return port;
}

static void private_cleanup(void)
{
    char cmd[400];
    service("", "stop");
    snprintf(cmd, sizeof cmd, "rm -rf %s", private_dir);
    ck_assert(system(cmd) == 0);
}

START_TEST(retry_server_down)
{
    int port = private_server("down");
    char uri[128];
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/down?timeout=3s", port);
    outbox_sink_t *k = open_sink(uri); /* nothing listens yet */
    enum { N = 10 };
    static tmsg_t t[N];
    outbox_message_t m[N];
    outbox_publish_result_t r[N];
    for (int i = 0; i < N; i++)
        make_msg(&t[i], &m[i], "down", i % 2 ? "k" : "j", i);
    publish(k, m, N, r);
    expect_all(r, N, OUTBOX_PUBLISH_RETRY, "before the server started");

    /* The script returns once the server answers, and the next call
     * connects: OK at once. */
    service("", "start");
    publish(k, m, N, r);
    expect_all(r, N, OUTBOX_PUBLISH_OK, "after the start");

    /* Killed: RETRY, never OK or REJECT; started again: the same handle
     * delivers, and what was acknowledged before the kill is there. */
    service("", "kill");
    publish(k, m, N, r);
    expect_all(r, N, OUTBOX_PUBLISH_RETRY, "killed");
    service("", "start");
    publish(k, m, N, r);
    expect_all(r, N, OUTBOX_PUBLISH_OK, "restarted after the kill");
    service("", "stop");
    publish(k, m, N, r);
    expect_all(r, N, OUTBOX_PUBLISH_RETRY, "stopped");
    service("", "start");
    publish(k, m, N, r);
    expect_all(r, N, OUTBOX_PUBLISH_OK, "restarted after the stop");

    /* The server closes the sink's idle connection (as its timeout
     * setting or a proxy would): the next call finds out on its first
     * reply, connects again and delivers, without a RETRY. */
    char cmd[200];
    snprintf(cmd, sizeof cmd, "redis-cli -p %d CLIENT KILL TYPE normal >/dev/null", port);
    ck_assert(system(cmd) == 0);
    publish(k, m, N, r);
    expect_all(r, N, OUTBOX_PUBLISH_OK, "after the server closed the connection");
    static char ids[64][40];
    ck_assert_int_eq(read_ids(k, "down", ids, 64), 4 * N);
    outbox_sink_close(k);
    private_cleanup();
}
END_TEST

START_TEST(auth)
{
    /* A server with requirepass, and an ACL user: the right password
     * (in the URI, or from password_env) delivers; a wrong one fails the
     * open (the server answered: no use retrying); no message shows it. */
    const char *secret = "It5RedisPw9";
    int port = private_server("auth");
    char env[128];
    snprintf(env, sizeof env, "OUTBOX_REDIS_PASSWORD=%s", secret);
    service(env, "start");
    char cmd[400];
    snprintf(cmd, sizeof cmd,
             "redis-cli -p %d --no-auth-warning -a %s ACL SETUSER relay on '>RelayPw77' '~*' "
             "'+@all' >/dev/null",
             port, secret);
    ck_assert(system(cmd) == 0);

    char uri[256];
    static tmsg_t t;
    outbox_message_t m;
    outbox_publish_result_t r;
    make_msg(&t, &m, "authed", "k", 1);

    snprintf(uri, sizeof uri, "redis://:%s@127.0.0.1:%d/authed", secret, port);
    outbox_sink_t *k = open_sink(uri);
    publish(k, &m, 1, &r);
    ck_assert_msg(r.status == OUTBOX_PUBLISH_OK, "with the password: %s", r.message);
    outbox_sink_close(k);

    snprintf(uri, sizeof uri, "redis://relay:RelayPw77@127.0.0.1:%d/authed", port);
    k = open_sink(uri);
    publish(k, &m, 1, &r);
    ck_assert_msg(r.status == OUTBOX_PUBLISH_OK, "as ACL user relay: %s", r.message);
    outbox_sink_close(k);

    setenv("OUTBOX_IT_REDIS_PW", secret, 1);
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/authed?password_env=OUTBOX_IT_REDIS_PW", port);
    k = open_sink(uri);
    publish(k, &m, 1, &r);
    ck_assert_msg(r.status == OUTBOX_PUBLISH_OK, "password_env: %s", r.message);
    outbox_sink_close(k);

    snprintf(uri, sizeof uri, "redis://:Wrong%s@127.0.0.1:%d/authed", secret, port);
    char wrong[64];
    snprintf(wrong, sizeof wrong, "Wrong%s", secret);
    expect_open_error(uri, OUTBOX_EPERMANENT, "AUTH refused", wrong);
    snprintf(uri, sizeof uri, "redis://relay:%s@127.0.0.1:%d/authed", wrong, port);
    expect_open_error(uri, OUTBOX_EPERMANENT, "WRONGPASS", wrong);

    /* No password at all: the open fails, saying so. */
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/authed", port);
    expect_open_error(uri, OUTBOX_EPERMANENT, "NOAUTH", NULL);

    /* The server stopped with the password in the URI: RETRY, the
     * message names the URI without the password. */
    service("", "stop");
    snprintf(uri, sizeof uri, "redis://:%s@127.0.0.1:%d/authed", secret, port);
    k = open_sink(uri);
    publish(k, &m, 1, &r);
    ck_assert_int_eq(r.status, OUTBOX_PUBLISH_RETRY);
    ck_assert_msg(strstr(r.message, secret) == NULL, "the password shows: %s", r.message);
    outbox_sink_close(k);
    private_cleanup();
}
END_TEST

/* After all cases, in the parent: a case that failed before its cleanup
 * leaves its private server running; stop it here. */
static void stop_private_servers(void)
{
    static const char *const tags[] = {"down", "auth"};
    for (size_t i = 0; service_script && i < sizeof tags / sizeof tags[0]; i++) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "%s stop /tmp/outbox-it-redis.%ld.%s >/dev/null 2>&1; rm -rf "
                 "/tmp/outbox-it-redis.%ld.%s", service_script, main_pid, tags[i], main_pid,
                 tags[i]);
        if (system(cmd) != 0)
            fprintf(stderr, "could not stop the private server of case %s\n", tags[i]);
    }
}

int main(int argc, char **argv)
{
    main_pid = (long)getpid();
    redis_uri = base_uri();
    service_script = argc > 1 ? argv[1] : NULL;
    Suite *s = suite_create("redis_sink");
    TCase *tc = tcase_create("redis");
    tcase_set_timeout(tc, 120);
    tcase_add_unchecked_fixture(tc, NULL, stop_private_servers);
    tcase_add_test(tc, uri_errors);
    tcase_add_test(tc, secrets_not_shown_offline);
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, stream_template_and_db);
    tcase_add_test(tc, reject_oversize);
    tcase_add_test(tc, wrongtype_reject);
    tcase_add_test(tc, order_after_server_error);
    tcase_add_test(tc, maxlen_trims);
    tcase_add_test(tc, retry_closed_port);
    if (service_script) {
        tcase_add_test(tc, retry_server_down);
        tcase_add_test(tc, auth);
    }
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
