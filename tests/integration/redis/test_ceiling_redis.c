/* The Redis Streams producer ceiling (drivers/sink-redis/ceiling.c)
 * against a real server (OUTBOX_REDIS_URI): what it adds is what the sink
 * adds, entry for entry (every field under its name, in order), and it
 * refuses a bad URI and a server that is not there. */
#include <hiredis/hiredis.h>

#include "ceilingtest.h"

extern const outbox_sink_ceiling_t outbox_ceiling_redis;

static const char *base_uri;

START_TEST(ceiling_sends_what_the_sink_sends)
{
    tc_expect_sink_equals_ceiling(&outbox_ceiling_redis, base_uri, 1, 1);
}
END_TEST

START_TEST(ceiling_refuses_a_bad_uri)
{
    char uri[512];
    snprintf(uri, sizeof uri, "redis://:%s@127.0.0.1:%d?maxlen=lots", TH_SECRET,
             th_port_of(base_uri));
    tc_expect_usage(&outbox_ceiling_redis, uri);
    snprintf(uri, sizeof uri, "redis://:%s@127.0.0.1:%d?nosuchoption=1", TH_SECRET,
             th_port_of(base_uri));
    tc_expect_usage(&outbox_ceiling_redis, uri);
}
END_TEST

START_TEST(ceiling_fails_without_a_server)
{
    /* Port 1: nothing listens; the password must not show. */
    tc_expect_refused(&outbox_ceiling_redis, th_with_secret("redis://:{secret}@127.0.0.1:1?timeout=2s"),
                      "nowhere");
}
END_TEST

START_TEST(ceiling_fails_on_a_refusal)
{
    /* A key that holds a string: the server refuses XADD (WRONGTYPE),
     * so the chunk fails; no retries. */
    char dest[64];
    snprintf(dest, sizeof dest, "%s", th_name("ceil_string"));
    redisContext *r = redisConnect("127.0.0.1", th_port_of(base_uri));
    ck_assert_msg(r != NULL && r->err == 0, "connect: %s", r ? r->errstr : "out of memory");
    redisReply *set = redisCommand(r, "SET %s not-a-stream", dest);
    ck_assert_msg(set != NULL && set->type == REDIS_REPLY_STATUS, "SET %s", dest);
    freeReplyObject(set);
    tc_expect_chunk_refused(&outbox_ceiling_redis, base_uri, dest, "WRONGTYPE");
    freeReplyObject(redisCommand(r, "DEL %s", dest));
    redisFree(r);
}
END_TEST

TH_SINK_MAIN("ceiling_redis", 120, "OUTBOX_REDIS_URI", "redis", base_uri,
             ceiling_sends_what_the_sink_sends, ceiling_refuses_a_bad_uri,
             ceiling_fails_without_a_server, ceiling_fails_on_a_refusal)
