/* The Redis Streams sink against a real redis-server, through the public
 * sink API and the real loader (OUTBOX_DRIVER_PATH points at the build
 * tree): what is particular to Redis. What every sink must do (round trip,
 * key order, oversize and unreachable servers, outages, a user's password
 * in the URI) is the sink battery's (battery_redis).
 *
 * OUTBOX_REDIS_URI names the shared server; the cases that close the
 * sink's connection or want a password start private servers of their own
 * with tools/services/redis.sh (its path is argv[1]). hiredis, used
 * directly, sets up what a case needs (a key of the wrong type) and checks
 * what the sink cannot say itself (an entry's fields, a stream's length, a
 * database).
 *
 * Every case uses streams of its own (it_<pid>_<tag>), so cases and test
 * programs can share one server. */
#include <hiredis/hiredis.h>

#include "sinktest.h"

static const char *redis_uri;

/* A connection of hiredis's own to the server of OUTBOX_REDIS_URI. */
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

/* Two keys of the case's own: str (tag_s) holds a string, where the sink
 * wants a stream, and good (tag_g) is free; a sink that adds each route's
 * messages to the stream of that name; the connection that made str, to
 * delete both with (drop_both). */
static outbox_sink_t *string_beside_stream(const char *tag_s, char str[64], const char *tag_g,
                                           char good[64], redisContext **c)
{
    snprintf(str, 64, "%s", th_name(tag_s));
    snprintf(good, 64, "%s", th_name(tag_g));
    *c = direct();
    redisReply *r = redisCommand(*c, "SET %s hello", str);
    ck_assert_msg(r && r->type != REDIS_REPLY_ERROR, "SET %s: %s", str, r && r->str ? r->str : "?");
    freeReplyObject(r);
    return th_open_sink(th_uri_with(redis_uri, "/{route}"));
}

static void drop_both(redisContext *c, const char *str, const char *good)
{
    direct_int(c, "DEL", str);
    direct_int(c, "DEL", good);
    redisFree(c);
}

static void direct_ok(redisContext *c, const char *cmd)
{
    redisReply *r = redisCommand(c, cmd);
    ck_assert_msg(r && r->type != REDIS_REPLY_ERROR, "%s: %s", cmd, r && r->str ? r->str : "?");
    freeReplyObject(r);
}

/* ------------------------------------------------------------- options */

START_TEST(uri_errors)
{
    static const th_refusal_t bad[] = {
        {"/s?bogus=1", "unknown parameter bogus"},
        {"/s?timeout=ten", "timeout=ten is not a duration"},
        {"/s?timeout=0s", "not a duration"},
        {"/s?maxlen=0", "maxlen=0"},
        {"/s?maxlen=-5", "maxlen=-5"},
        {"/s?max_bytes=1g", "max_bytes=1g"},
        {"/s?max_bytes=999999999999", "max_bytes="},
        {"/1234567890/s", "database number"},
        {"redis:relative", "names no server"},
        {"redis://h1:6379,h2:6379/s", "need sentinel=NAME"},
        {"/s?sentinel=", "sentinel= needs the name"},
        {"/s?wait_replicas=-1", "wait_replicas=-1"},
        {"/s?wait_replicas=two", "wait_replicas=two"},
        {"/s?wait_timeout=1", "wait_timeout=1"},
        {"redis://alice@127.0.0.1:1/s", "has no password"},
        {"/s?password_env=OUTBOX_IT_NO_SUCH_VAR", "OUTBOX_IT_NO_SUCH_VAR, which is not set"},
        /* A database the server does not have (16 by default). */
        {"/99/s", "SELECT refused"},
        /* A secret, in Redis's own form too (a password alone), refused for
         * another reason: never shown. */
        {"redis://alice:{secret}@127.0.0.1:1/s?bogus=1", "unknown parameter bogus"},
        {"redis://:{secret}@127.0.0.1:1/s?timeout=x", "timeout=x"},
    };
    th_expect_refusals(redis_uri, bad, sizeof bad / sizeof *bad);
    th_open_error("rediss://127.0.0.1:6379/s", OUTBOX_ENOTSUP, "not supported", NULL);
}
END_TEST

/* ------------------------------------------------------------- mapping */

START_TEST(entry_layout)
{
    /* A stream entry as any client sees it: "data" (the payload) first,
     * then the 13 attributes as fields, nothing else. The reader gives the
     * stream as the destination and no dedupe id (Redis has none);
     * dropping the destination deletes the key. */
    char dest[64];
    outbox_sink_t *k = th_open_dest(redis_uri, "layout", dest);
    th_batch_t *b = th_batch(3, dest, "k");
    th_batch_publish(k, b);
    th_expect_all(b->r, b->n, OUTBOX_PUBLISH_OK, "publishing");

    redisContext *c = direct();
    redisReply *x = redisCommand(c, "XRANGE %s - + COUNT 1", dest);
    ck_assert(x && x->type == REDIS_REPLY_ARRAY && x->elements == 1);
    redisReply *fields = x->element[0]->element[1];
    ck_assert_msg(fields->elements == 28, "an entry has %zu field names and values, want 28",
                  fields->elements);
    ck_assert_str_eq(fields->element[0]->str, "data");
    freeReplyObject(x);

    outbox_sink_reader_t *rd = NULL;
    ck_assert(outbox_sink_reader_open(k, dest, &rd) == OUTBOX_OK);
    for (size_t i = 0; i < b->n; i++) {
        outbox_received_t got = {.struct_size = sizeof got};
        ck_assert_msg(outbox_sink_reader_read(rd, 2000000, &got) == OUTBOX_OK, "entry %zu: %s", i,
                      outbox_sink_reader_message(rd));
        ck_assert_str_eq(got.destination, dest);
        ck_assert_ptr_null(got.dedupe_id);
    }
    outbox_sink_reader_close(rd);
    th_drop(k, dest);
    ck_assert_int_eq(direct_int(c, "EXISTS", dest), 0);
    redisFree(c);
    outbox_sink_close(k);
}
END_TEST

START_TEST(stream_template_and_db)
{
    /* The path: database 3, stream "it_<pid>:{route}". */
    char tpl[128], dest[96];
    snprintf(tpl, sizeof tpl, "/3/%s:{route}", th_name("tpl"));
    snprintf(dest, sizeof dest, "%s:orders", th_name("tpl"));
    outbox_sink_t *k = th_open_sink(th_uri_with(redis_uri, tpl));
    th_batch_t *b = th_batch(3, "orders", "k");
    th_batch_publish(k, b);
    th_expect_all(b->r, b->n, OUTBOX_PUBLISH_OK, "template");
    redisContext *c = direct();
    ck_assert_int_eq(direct_int(c, "EXISTS", dest), 0); /* not in database 0 */
    direct_ok(c, "SELECT 3");
    ck_assert_int_eq(direct_int(c, "XLEN", dest), 3);
    direct_int(c, "DEL", dest);
    redisFree(c);
    outbox_sink_close(k);
}
END_TEST

START_TEST(max_bytes_option)
{
    /* Redis itself would take 2 MiB: the sink's max_bytes (1 MiB by
     * default) refuses it before sending, saying so; raised, it lets the
     * same message go. */
    char dest[64];
    snprintf(dest, sizeof dest, "%s", th_name("big"));
    th_batch_t *b = th_batch(1, dest, "b");
    size_t big = (size_t)2 << 20;
    char *p = malloc(big);
    ck_assert(p);
    memset(p, 'x', big);
    b->m[0].payload = p;
    b->m[0].payload_len = big;
    outbox_sink_t *k = th_open_sink(redis_uri);
    th_batch_publish(k, b);
    ck_assert_msg(b->r[0].status == OUTBOX_PUBLISH_REJECT && strstr(b->r[0].message, "max_bytes"),
                  "2 MiB: %d %s", b->r[0].status, b->r[0].message);
    outbox_sink_close(k);
    k = th_open_sink(th_uri_with(redis_uri, "?max_bytes=4194304"));
    th_batch_publish(k, b);
    ck_assert_msg(b->r[0].status == OUTBOX_PUBLISH_OK, "with max_bytes=4194304: %s",
                  b->r[0].message);
    outbox_sink_close(k);
    free(p);
    redisContext *c = direct();
    ck_assert_int_eq(direct_int(c, "XLEN", dest), 1);
    direct_int(c, "DEL", dest);
    redisFree(c);
}
END_TEST

/* wait_replicas=1 on a server with no replica: the server adds the entry,
 * but WAIT counts 0 replicas within wait_timeout, so the message is RETRY
 * (sent again later), saying so. */
START_TEST(wait_replicas_unmet_is_retry)
{
    char dest[64];
    snprintf(dest, sizeof dest, "%s", th_name("wait"));
    th_batch_t *b = th_batch(3, dest, "w");
    outbox_sink_t *k = th_open_sink(th_uri_with(redis_uri, "?wait_replicas=1&wait_timeout=100ms"));
    th_batch_publish(k, b);
    for (size_t i = 0; i < 3; i++)
        ck_assert_msg(b->r[i].status == OUTBOX_PUBLISH_RETRY &&
                          strstr(b->r[i].message, "0 of the 1 replicas asked for had it within "
                                                  "wait_timeout=100ms"),
                      "message %zu: %d %s", i, b->r[i].status, b->r[i].message);
    outbox_sink_close(k);
    redisContext *c = direct();
    ck_assert_int_eq(direct_int(c, "XLEN", dest), 3); /* added, not yet trusted */
    direct_int(c, "DEL", dest);
    redisFree(c);
    /* wait_replicas=0 asks nothing: OK at once. */
    k = th_open_sink(th_uri_with(redis_uri, "?wait_replicas=0"));
    b = th_batch(1, dest, "w");
    th_batch_publish(k, b);
    ck_assert_msg(b->r[0].status == OUTBOX_PUBLISH_OK, "%s", b->r[0].message);
    outbox_sink_close(k);
    c = direct();
    direct_int(c, "DEL", dest);
    redisFree(c);
}
END_TEST

/* sentinel=NAME with a host that answers no Sentinel command (the plain
 * server, or nothing at all): the open still succeeds (a master may come
 * later), and publish is RETRY naming the master it could not find. */
START_TEST(sentinel_without_sentinels_is_retry)
{
    char u[512];
    snprintf(u, sizeof u, "redis://127.0.0.1:%d,127.0.0.1:1/%s?sentinel=nosuchmaster&timeout=1s",
             th_port_of(redis_uri), th_name("snt"));
    outbox_sink_t *k = th_open_sink(u);
    th_batch_t *b = th_batch(1, "x", "s");
    th_batch_publish(k, b);
    ck_assert_msg(b->r[0].status == OUTBOX_PUBLISH_RETRY && strstr(b->r[0].message, "no master for nosuchmaster"),
                  "%d %s", b->r[0].status, b->r[0].message);
    outbox_sink_close(k);
}
END_TEST

START_TEST(wrongtype_reject)
{
    /* The stream key holds a string: WRONGTYPE, REJECT, as a plain XADD
     * (one message of its key) and in a key's run (the first REJECT, the
     * rest RETRY); another key's message is delivered. */
    char str[64], ok[64];
    redisContext *c;
    outbox_sink_t *k = string_beside_stream("str", str, "strok", ok, &c);
    ck_assert_int_eq(outbox_sink_destination_create(k, str), OUTBOX_EPERMANENT);
    ck_assert_msg(strstr(outbox_sink_message(k), "holds a string"), "%s", outbox_sink_message(k));
    th_batch_t *b = th_batch(5, str, "run");
    th_make_msg(&b->t[0], &b->m[0], str, "solo", 0);
    th_make_msg(&b->t[2], &b->m[2], ok, "other", 2);
    th_batch_publish(k, b);
    const outbox_publish_result_t *r = b->r;
    ck_assert_msg(r[0].status == OUTBOX_PUBLISH_REJECT && strstr(r[0].message, "WRONGTYPE"),
                  "single XADD: %d %s", r[0].status, r[0].message);
    ck_assert_msg(r[1].status == OUTBOX_PUBLISH_REJECT && strstr(r[1].message, "WRONGTYPE"),
                  "run's first: %d %s", r[1].status, r[1].message);
    ck_assert_msg(r[3].status == OUTBOX_PUBLISH_RETRY && strstr(r[3].message, "held back"),
                  "run's second: %d %s", r[3].status, r[3].message);
    ck_assert_int_eq(r[4].status, OUTBOX_PUBLISH_RETRY);
    ck_assert_int_eq(r[2].status, OUTBOX_PUBLISH_OK);
    drop_both(c, str, ok);
    outbox_sink_close(k);
}
END_TEST

START_TEST(order_after_server_error)
{
    /* Key a's messages over two streams ("{route}"), the second of which
     * holds a string: a0 OK on A, a1 refused by the server on B, and a2
     * and a3, back on A, must not be added after it (RETRY); key b, on A,
     * is delivered in full. The server, not the sink, finds the error,
     * in the middle of the key's run. */
    char a[64], bad[64];
    redisContext *c;
    outbox_sink_t *k = string_beside_stream("ordB", bad, "ordA", a, &c);
    th_batch_t *b = th_batch_ab(8, a, a);
    th_make_msg(&b->t[2], &b->m[2], bad, "a", 2);
    th_batch_publish(k, b);
    th_expect_key_stopped(b, 2, OUTBOX_PUBLISH_REJECT);
    ck_assert_msg(strstr(b->r[2].message, "WRONGTYPE"), "a1: %s", b->r[2].message);
    th_expect_dest_holds_ok(k, b, a, 1000); /* a0 and b0..b3 */
    drop_both(c, bad, a);
    outbox_sink_close(k);
}
END_TEST

START_TEST(maxlen_trims)
{
    /* maxlen=50: XADD MAXLEN ~ 50 keeps the stream near 50 entries (the
     * server trims whole nodes of up to 100, so "near" is under 200), not
     * the 1000 added. */
    char dest[64];
    snprintf(dest, sizeof dest, "%s", th_name("trim"));
    outbox_sink_t *k = th_open_sink(th_uri_with(redis_uri, "?maxlen=50"));
    enum { N = 1000 };
    th_batch_t *b = th_batch(N, dest, "k0");
    for (int i = 0; i < N; i += 3) { /* runs and single messages */
        char key[16];
        snprintf(key, sizeof key, "k%d", i);
        th_make_msg(&b->t[i], &b->m[i], dest, key, i);
    }
    th_batch_publish(k, b);
    th_expect_all(b->r, N, OUTBOX_PUBLISH_OK, "maxlen");
    redisContext *c = direct();
    long long len = direct_int(c, "XLEN", dest);
    ck_assert_msg(len >= 50 && len < 200, "with maxlen=50 the stream holds %lld of %d", len, N);
    direct_int(c, "DEL", dest);
    redisFree(c);
    outbox_sink_close(k);
}
END_TEST

/* ---------------------------------------------------- private servers */

/* Starts this program's private server tag (env: more of its settings);
 * its port. */
static int private_server(const char *tag, const char *env)
{
    char settings[256], port[32];
    snprintf(settings, sizeof settings, "%s OUTBOX_REDIS_PORT=%d", env, th_private_port());
    th_service_start(settings, th_private_dir(tag), "OUTBOX_REDIS_PORT", port,
                     sizeof port);
    return atoi(port);
}

static void close_connections(void *port)
{
    char cmd[200];
    snprintf(cmd, sizeof cmd, "redis-cli -p %d CLIENT KILL TYPE normal >/dev/null", *(int *)port);
    ck_assert(system(cmd) == 0);
}

START_TEST(server_closes_idle_connection)
{
    /* The server closes the sink's idle connection (as its timeout
     * setting or a proxy would): the next call finds out on its first
     * reply, connects again and delivers, without a RETRY. */
    int port = private_server("idle", "");
    char uri[128];
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/idle", port);
    outbox_sink_t *k = th_open_sink(uri);
    th_expect_ok_across(k, "idle", close_connections, &port);
    outbox_sink_close(k);
}
END_TEST

/* ------------------------------------------------------------ passwords */

START_TEST(password_alone_masked)
{
    /* A password with no user name (AUTH with the password alone): the
     * results of a handle on a closed port name the URI with it masked. */
    th_expect_retry_masked("redis://:{secret}@127.0.0.1:1/s");
}
END_TEST

/* Opens uri and publishes b: the status. */
static int status_through(const char *uri, th_batch_t *b)
{
    outbox_sink_t *k = th_open_sink(uri);
    th_batch_publish(k, b);
    outbox_sink_close(k);
    return b->r[0].status;
}

START_TEST(auth)
{
    /* A server with requirepass, and an ACL user: the right password
     * (in the URI, or from password_env) delivers; a wrong one fails the
     * open (the server answered: no use retrying); no message shows it. */
    const char *secret = "It5RedisPw9";
    char env[128];
    snprintf(env, sizeof env, "OUTBOX_REDIS_PASSWORD=%s", secret);
    int port = private_server("auth", env);
    char cmd[400];
    snprintf(cmd, sizeof cmd,
             "redis-cli -p %d --no-auth-warning -a %s ACL SETUSER relay on '>RelayPw77' '~*' "
             "'+@all' >/dev/null",
             port, secret);
    ck_assert(system(cmd) == 0);

    char uri[256];
    th_batch_t *b = th_batch(1, "authed", "k");
    snprintf(uri, sizeof uri, "redis://:%s@127.0.0.1:%d/authed", secret, port);
    ck_assert_msg(status_through(uri, b) == OUTBOX_PUBLISH_OK, "with the password: %s",
                  b->r[0].message);
    snprintf(uri, sizeof uri, "redis://relay:RelayPw77@127.0.0.1:%d/authed", port);
    ck_assert_msg(status_through(uri, b) == OUTBOX_PUBLISH_OK, "as ACL user relay: %s",
                  b->r[0].message);
    setenv("OUTBOX_IT_REDIS_PW", secret, 1);
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/authed?password_env=OUTBOX_IT_REDIS_PW", port);
    ck_assert_msg(status_through(uri, b) == OUTBOX_PUBLISH_OK, "password_env: %s",
                  b->r[0].message);

    char wrong[64];
    snprintf(wrong, sizeof wrong, "Wrong%s", secret);
    snprintf(uri, sizeof uri, "redis://:%s@127.0.0.1:%d/authed", wrong, port);
    th_open_error(uri, OUTBOX_EPERMANENT, "AUTH refused", wrong);
    snprintf(uri, sizeof uri, "redis://relay:%s@127.0.0.1:%d/authed", wrong, port);
    th_open_error(uri, OUTBOX_EPERMANENT, "WRONGPASS", wrong);

    /* No password at all: the open fails, saying so. */
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/authed", port);
    th_open_error(uri, OUTBOX_EPERMANENT, "NOAUTH", NULL);
}
END_TEST

TH_SINK_MAIN("redis_sink", 120, "OUTBOX_REDIS_URI", "redis", redis_uri,
             uri_errors, entry_layout, stream_template_and_db, max_bytes_option, wrongtype_reject,
             order_after_server_error, maxlen_trims, password_alone_masked,
             wait_replicas_unmet_is_retry, sentinel_without_sentinels_is_retry,
             th_script() ? server_closes_idle_connection : NULL, th_script() ? auth : NULL)
