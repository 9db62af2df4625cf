/* The Kafka sink against a real broker (OUTBOX_KAFKA_URI, from
 * tools/services/kafka.sh), through the public API and the real loader:
 * what is particular to Kafka. What every sink must do (round trip, key
 * order, oversize and unreachable brokers, outages, a password in the URI)
 * is the sink battery's (battery_kafka). Every case uses topics of its
 * own, it_<pid>_<tag>, dropped at the end. */
#include <librdkafka/rdkafka.h>

#include "sinktest.h"

static const char *base_uri;

/* "host:port" of the broker. */
static const char *broker(void)
{
    static char hp[256];
    snprintf(hp, sizeof hp, "%s", base_uri + strlen("kafka://"));
    hp[strcspn(hp, "/?")] = '\0';
    return hp;
}

/* The broker's URI with path_and_query (static buffer). */
static char *uri_with(const char *path_and_query)
{
    static char u[1024];
    snprintf(u, sizeof u, "kafka://%s%s", broker(), path_and_query);
    return u;
}

/* ------------------------------------------------------------ messages */

#define NH 13
typedef struct msgs {
    outbox_message_t *m;
    outbox_header_t (*h)[NH];
    char (*id)[40];
    char (*key)[16];
    char **payload;
    size_t n;
} msgs_t;

static const char *const header_names[NH] = {
    "id", "type", "source", "specversion", "time", "datacontenttype", "partitionkey",
    "traceparent", "tenantid", "correlationid", "causationid", "executionid", "hlc",
};

static msgs_t make(size_t n, const char *route, size_t keys, size_t payload_size)
{
    msgs_t s = {.n = n};
    s.m = calloc(n, sizeof *s.m);
    s.h = calloc(n, sizeof *s.h);
    s.id = calloc(n, sizeof *s.id);
    s.key = calloc(n, sizeof *s.key);
    s.payload = calloc(n, sizeof *s.payload);
    for (size_t i = 0; i < n; i++) {
        snprintf(s.id[i], sizeof s.id[i], "0190aaaa-0000-7000-8000-%012u", (unsigned)(i % 1000000));
        snprintf(s.key[i], sizeof s.key[i], "key%u", (unsigned)(i % keys % 1000));
        size_t len = payload_size > 32 ? payload_size : 32;
        s.payload[i] = malloc(len + 1);
        int w = snprintf(s.payload[i], len + 1, "{\"n\":%zu,\"pad\":\"", i);
        memset(s.payload[i] + w, 'x', len - (size_t)w - 2);
        memcpy(s.payload[i] + len - 2, "\"}", 3);
        const char *values[NH] = {s.id[i], "order.created", "/outbox/orders", "1.0",
                                  "2026-12-01T10:00:00.123456Z", "application/json", s.key[i],
                                  "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                                  "tenant-1", "corr-1", "cause-1", "exec-1", "1234567890"};
        for (int h = 0; h < NH; h++)
            s.h[i][h] = (outbox_header_t){header_names[h], values[h]};
        s.m[i] = (outbox_message_t){.route = route, .destination = route, .key = s.key[i],
                                    .event_id = s.id[i], .payload = s.payload[i],
                                    .payload_len = strlen(s.payload[i]), .headers = s.h[i],
                                    .n_headers = NH};
    }
    return s;
}

static void unmake(msgs_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->payload[i]);
    free(s->m);
    free(s->h);
    free(s->id);
    free(s->key);
    free(s->payload);
}

static outbox_publish_result_t *publish(outbox_sink_t *k, msgs_t *s)
{
    outbox_publish_result_t *r = calloc(s->n, sizeof *r);
    int rc = outbox_sink_publish(k, s->m, s->n, r);
    ck_assert_msg(rc == OUTBOX_OK, "publish: %d %s", rc, outbox_sink_message(k));
    return r;
}

/* Reads the whole topic: the event ids in the order of each partition,
 * partitions one after another (which keeps each key's order). */
typedef struct got {
    char (*id)[40];
    size_t n;
} got_t;

static got_t read_all(outbox_sink_t *k, const char *topic, const msgs_t *want)
{
    outbox_sink_reader_t *r = NULL;
    int rc = outbox_sink_reader_open(k, topic, &r);
    ck_assert_msg(rc == OUTBOX_OK, "reader_open %s: %s", topic, outbox_sink_message(k));
    got_t g = {.id = calloc(want->n + 100, sizeof *g.id)};
    outbox_received_t m = {.struct_size = sizeof m};
    while ((rc = outbox_sink_reader_read(r, 5000000, &m)) == OUTBOX_OK) {
        ck_assert_msg(g.n < want->n + 100, "more messages than published");
        const char *id = NULL;
        for (size_t h = 0; h < m.n_headers; h++)
            if (strcmp(m.headers[h].name, "id") == 0)
                id = m.headers[h].value;
        ck_assert_msg(id != NULL, "a message without the id header");
        snprintf(g.id[g.n++], sizeof g.id[0], "%s", id);
        /* Everything staged comes back: key, payload, all 13 headers. */
        size_t i = strtoul(id + 24, NULL, 10);
        ck_assert_uint_lt(i, want->n);
        ck_assert_str_eq(m.key, want->key[i]);
        ck_assert_uint_eq(m.payload_len, want->m[i].payload_len);
        ck_assert(memcmp(m.payload, want->payload[i], m.payload_len) == 0);
        ck_assert_uint_eq(m.n_headers, NH);
        for (int h = 0; h < NH; h++) {
            const char *v = NULL;
            for (size_t j = 0; j < m.n_headers; j++)
                if (strcmp(m.headers[j].name, header_names[h]) == 0)
                    v = m.headers[j].value;
            ck_assert_msg(v != NULL, "header %s missing", header_names[h]);
            ck_assert_str_eq(v, want->h[i][h].value);
        }
    }
    ck_assert_msg(rc == OUTBOX_ENOTFOUND, "reader_next: %d %s", rc, outbox_sink_reader_message(r));
    outbox_sink_reader_close(r);
    return g;
}

/* Per key, the ids read back in order; 1 when msg i was read. */
static int was_read(const got_t *g, const char *id)
{
    for (size_t i = 0; i < g->n; i++)
        if (strcmp(g->id[i], id) == 0)
            return 1;
    return 0;
}

/* Each key's messages read back are in array order. */
static void assert_key_order(const got_t *g, const msgs_t *s)
{
    long last[64];
    for (int i = 0; i < 64; i++)
        last[i] = -1;
    for (size_t j = 0; j < g->n; j++) {
        size_t i = strtoul(g->id[j] + 24, NULL, 10);
        int key = atoi(s->key[i] + 3);
        ck_assert_msg((long)i > last[key], "key %s: message %zu read after %ld", s->key[i], i, last[key]);
        last[key] = (long)i;
    }
}

/* --------------------------------------------------------------- cases */

START_TEST(uri_errors)
{
    const char *m = th_open_error(uri_with("/t?no.such.property=1"), OUTBOX_EINVAL,
                                  "no.such.property", NULL);
    th_open_error(uri_with("/t?linger.ms=soon"), OUTBOX_EINVAL, "linger.ms", NULL);
    m = th_open_error(uri_with("/t?acks=1"), OUTBOX_EINVAL, "acks", NULL);
    ck_assert_msg(strstr(m, "all") != NULL, "%s", m);
    th_open_error(uri_with("/t?enable.idempotence=false"), OUTBOX_EINVAL, "enable.idempotence",
                  NULL);
    th_open_error(uri_with("/t?enable.gapless.guarantee=false"), OUTBOX_EINVAL,
                  "enable.gapless.guarantee", NULL);
    th_open_error(uri_with("/t?message.timeout.ms=1000"), OUTBOX_EINVAL, "timeout=", NULL);
    th_open_error(uri_with("/t?timeout=soon"), OUTBOX_EINVAL, "timeout=soon", NULL);
    /* Every driver's duration grammar: a unit is required, an hour is the
     * most. */
    th_open_error(uri_with("/t?timeout=30"), OUTBOX_EINVAL, "timeout=30 is not a duration", NULL);
    th_open_error(uri_with("/t?timeout=61m"), OUTBOX_EINVAL, "from 100ms to 1h", NULL);
    th_open_error(uri_with("/t?partitions=0"), OUTBOX_EINVAL, "partitions=0", NULL);
    th_open_error(uri_with("/t?replication=x"), OUTBOX_EINVAL, "replication=x", NULL);
    th_open_error("kafka:///t", OUTBOX_EINVAL, "broker", NULL);

    /* Secrets: a secret-named value, a password, a value from the
     * environment never show, whatever else is wrong. */
    th_open_error(uri_with("/t?sasl.password=Sw0rdfish42&linger.ms=soon"), OUTBOX_EINVAL,
                  "linger.ms", "Sw0rdfish42");
    char u[512];
    snprintf(u, sizeof u, "kafka://bob:Sw0rdfish42@%s/t?acks=0", broker());
    th_open_error(u, OUTBOX_EINVAL, "acks", "Sw0rdfish42");
    setenv("KT_SECRET", "Env5ecretValue", 1);
    th_open_error(uri_with("/t?sasl.password_env=KT_SECRET&queue.buffering.max.ms=never"),
                  OUTBOX_EINVAL, "", "Env5ecretValue");
    /* librdkafka's own refusal of a value from the environment. */
    th_open_error(uri_with("/t?linger.ms_env=KT_SECRET"), OUTBOX_EINVAL, "linger.ms",
                  "Env5ecretValue");
    th_open_error(uri_with("/t?sasl.password_env=KT_UNSET_VARIABLE"), OUTBOX_EINVAL,
                  "KT_UNSET_VARIABLE", NULL);
    th_open_error(uri_with("/t?sasl.password=Sw0rdfish42&sasl.password_env=KT_SECRET"),
                  OUTBOX_EINVAL, "not both", "Env5ecretValue");
    /* The former ${NAME} spelling says what to write instead. */
    th_open_error(uri_with("/t?sasl.password=${KT_SECRET}"), OUTBOX_EINVAL,
                  "sasl.password_env=VARIABLE", "Env5ecretValue");

    /* A value from the environment is used: a good one opens. */
    setenv("KT_LINGER", "2", 1);
    outbox_sink_close(
        th_open_sink(uri_with("/t?linger.ms_env=KT_LINGER&compression.type=lz4&timeout=1h")));
}
END_TEST

/* librdkafka's log lines reach the host's log with the secrets masked,
 * the reader's too, also after the sink that opened it was closed. The
 * secret is also the client.id, which librdkafka's configuration dump
 * (debug=conf) prints as it stands. */
static int log_leaks, log_masked;

static void keep_log(void *ctx, int level, const char *line)
{
    (void)ctx;
    (void)level;
    log_leaks += strstr(line, "Env5ecretValue") != NULL;
    log_masked += strstr(line, "client.id = ***") != NULL;
}

START_TEST(secrets_not_logged)
{
    setenv("KT_SECRET", "Env5ecretValue", 1);
    const char *topic = th_name("log");
    char u[1024];
    snprintf(u, sizeof u,
             "kafka://%s/%s?debug=conf&sasl.password_env=KT_SECRET&client.id=Env5ecretValue",
             broker(), topic);
    outbox_set_logger(keep_log, NULL);
    outbox_sink_t *k = th_open_sink(u);
    ck_assert_int_eq(outbox_sink_destination_create(k, topic), OUTBOX_OK);
    outbox_sink_reader_t *r = NULL;
    ck_assert_msg(outbox_sink_reader_open(k, topic, &r) == OUTBOX_OK, "reader_open: %s",
                  outbox_sink_message(k));
    outbox_sink_close(k);
    outbox_received_t m = {.struct_size = sizeof m};
    ck_assert_int_eq(outbox_sink_reader_read(r, 200000, &m), OUTBOX_ENOTFOUND);
    outbox_sink_reader_close(r);
    outbox_set_logger(NULL, NULL);
    ck_assert_msg(log_leaks == 0, "%d log lines show the secret", log_leaks);
    ck_assert_msg(log_masked >= 2, "the producer's and the reader's dumps: %d masked", log_masked);
    k = th_open_sink(base_uri);
    ck_assert_int_eq(outbox_sink_destination_drop(k, topic), OUTBOX_OK);
    outbox_sink_close(k);
}
END_TEST

static int election_warnings;
static char election_line[512];

static void keep_election_warning(void *ctx, int level, const char *line)
{
    (void)ctx;
    if (level == OUTBOX_LOG_WARN && strstr(line, "shorter than a partition leader election")) {
        election_warnings++;
        snprintf(election_line, sizeof election_line, "%s", line);
    }
}

/* A timeout shorter than a leader election is warned about at open, once,
 * naming the timeout; 15 s and the default are not. */
START_TEST(short_timeout_warned)
{
    static const struct {
        const char *query;
        int warned;
    } cases[] = {{"/t?timeout=5s", 1}, {"/t?timeout=14999ms", 1}, {"/t?timeout=15s", 0}, {"/t", 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        election_warnings = 0;
        election_line[0] = '\0';
        outbox_set_logger(keep_election_warning, NULL);
        outbox_sink_t *k = th_open_sink(uri_with(cases[i].query));
        outbox_set_logger(NULL, NULL);
        outbox_sink_close(k);
        ck_assert_msg(election_warnings == cases[i].warned, "%s: %d warnings (%s)", cases[i].query,
                      election_warnings, election_line);
        if (cases[i].warned)
            ck_assert_msg(strstr(election_line, "timeout=") != NULL && strstr(election_line, "15s or more"),
                          "the warning: %s", election_line);
    }
}
END_TEST

START_TEST(topic_create_twice)
{
    /* The broker says the topic exists (TOPIC_ALREADY_EXISTS): no error. */
    const char *topic = th_name("twice");
    outbox_sink_t *k = th_open_sink(base_uri);
    ck_assert_int_eq(outbox_sink_destination_create(k, topic), OUTBOX_OK);
    ck_assert_msg(outbox_sink_destination_create(k, topic) == OUTBOX_OK, "an existing topic: %s",
                  outbox_sink_message(k));
    ck_assert_int_eq(outbox_sink_destination_drop(k, topic), OUTBOX_OK);
    outbox_sink_close(k);
}
END_TEST

/* kafka://dead:1,live:port/...: a list of brokers in the authority; one
 * that answers is enough. */
START_TEST(broker_list)
{
    const char *topic = th_name("bl");
    static char uri[1024];
    snprintf(uri, sizeof uri, "kafka://127.0.0.1:1,%s/%s", broker(), topic);
    outbox_sink_t *k = th_open_sink(uri);
    ck_assert_int_eq(outbox_sink_destination_create(k, topic), OUTBOX_OK);
    msgs_t s = make(10, topic, 2, 50);
    outbox_publish_result_t *r = publish(k, &s);
    for (size_t i = 0; i < s.n; i++)
        ck_assert_msg(r[i].status == OUTBOX_PUBLISH_OK, "message %zu: %d %s", i, r[i].status,
                      r[i].message);
    got_t g = read_all(k, topic, &s);
    ck_assert_uint_eq(g.n, s.n);
    ck_assert_int_eq(outbox_sink_destination_drop(k, topic), OUTBOX_OK);
    free(g.id);
    free(r);
    unmake(&s);
    outbox_sink_close(k);
}
END_TEST

/* A message whose partition gives no report within partition_timeout is
 * kept queued and reported DEFER when another message of the call went
 * through (a partial outage; an unknown topic stands in for a partition
 * without a leader: librdkafka holds its messages until it gives up on the
 * topic). Offered again, the same event is not sent twice: the later calls
 * report the kept copy's fate, and it ends REJECT (unknown topic) once
 * librdkafka gives its verdict. A message of the working topic in each call
 * goes through at once. */
START_TEST(slow_partition_deferred_then_settled)
{
    char good[128], never[128], alone_topic[128];
    snprintf(good, sizeof good, "%s", th_name("defer_ok"));
    snprintf(never, sizeof never, "%s", th_name("defer_never_created"));
    snprintf(alone_topic, sizeof alone_topic, "%s", th_name("defer_alone_never_created"));
    outbox_sink_t *k = th_open_sink(uri_with("?timeout=6s&partition_timeout=300ms"));
    ck_assert_int_eq(outbox_sink_destination_create(k, good), OUTBOX_OK);
    msgs_t ok = make(1, good, 1, 64);
    msgs_t stuck = make(1, never, 1, 64);
    snprintf(stuck.id[0], sizeof stuck.id[0], "0190bbbb-0000-7000-8000-000000000001");
    outbox_message_t m[2] = {ok.m[0], stuck.m[0]};
    outbox_publish_result_t r[2];
    /* The new topic's leader is known after a first message gets through. */
    for (int warm = 0; warm < 40; warm++) {
        th_publish(k, m, 1, r);
        if (r[0].status == OUTBOX_PUBLISH_OK)
            break;
    }
    ck_assert_msg(r[0].status == OUTBOX_PUBLISH_OK, "the working topic: %d %s", r[0].status, r[0].message);
    int deferred = 0, calls = 0;
    for (calls = 1; calls <= 40; calls++) {
        th_publish(k, m, 2, r);
        ck_assert_msg(r[0].status == OUTBOX_PUBLISH_OK, "call %d, working topic: %d %s", calls, r[0].status,
                      r[0].message);
        if (r[1].status != OUTBOX_PUBLISH_DEFER)
            break;
        ck_assert_msg(strstr(r[1].message, "keeps the message queued"), "%s", r[1].message);
        deferred++;
    }
    ck_assert_msg(deferred >= 1, "the stuck message was never deferred: %d %s", r[1].status, r[1].message);
    ck_assert_msg(r[1].status == OUTBOX_PUBLISH_REJECT && strstr(r[1].message, "nknown"),
                  "after %d calls: %d %s", calls, r[1].status, r[1].message);
    /* One more kept message, never offered again: the close frees it. */
    msgs_t alone = make(1, alone_topic, 1, 64);
    snprintf(alone.id[0], sizeof alone.id[0], "0190cccc-0000-7000-8000-000000000001");
    m[1] = alone.m[0];
    th_publish(k, m, 2, r);
    ck_assert_msg(r[0].status == OUTBOX_PUBLISH_OK, "%d %s", r[0].status, r[0].message);
    ck_assert_msg(r[1].status == OUTBOX_PUBLISH_DEFER, "%d %s", r[1].status, r[1].message);
    ck_assert_int_eq(outbox_sink_destination_drop(k, good), OUTBOX_OK);
    outbox_sink_close(k); /* with a message still kept: freed, not leaked */
    unmake(&ok);
    unmake(&stuck);
    unmake(&alone);
}
END_TEST

START_TEST(reject_unknown_topic)
{
    /* librdkafka gives up on a topic after topic.metadata.propagation.max.ms
     * (half the timeout): a partition_timeout past it waits for that
     * verdict in this call rather than keeping the messages for the next. */
    outbox_sink_t *k = th_open_sink(uri_with("?timeout=6s&partition_timeout=6s"));
    msgs_t s = make(5, th_name("never_created"), 2, 64);
    outbox_publish_result_t *r = publish(k, &s);
    for (size_t i = 0; i < s.n; i++)
        ck_assert_msg(r[i].status == OUTBOX_PUBLISH_REJECT, "message %zu: %d %s", i, r[i].status, r[i].message);
    ck_assert_msg(strstr(r[0].message, "nknown") != NULL, "%s", r[0].message);
    free(r);
    unmake(&s);
    outbox_sink_close(k);
}
END_TEST

/* A topic of its own with a small max.message.bytes, made with
 * librdkafka's admin API (the sink makes topics without configs). */
static void create_small_topic(const char *topic, const char *max_bytes)
{
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", broker(), err, sizeof err);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    ck_assert_msg(rk != NULL, "%s", err);
    rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(topic, 3, 1, err, sizeof err);
    rd_kafka_NewTopic_set_config(nt, "max.message.bytes", max_bytes);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_CreateTopics(rk, &nt, 1, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
    ck_assert(ev != NULL);
    size_t n = 0;
    const rd_kafka_topic_result_t **res =
        rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
    ck_assert_msg(n == 1 && rd_kafka_topic_result_error(res[0]) == 0, "create %s: %s", topic,
                  n ? rd_kafka_topic_result_error_string(res[0]) : "no result");
    rd_kafka_event_destroy(ev);
    rd_kafka_NewTopic_destroy(nt);
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
}

/* The order promise where it is hard: the BROKER refuses a message in the
 * middle of a key's run (larger than the topic's max.message.bytes,
 * smaller than the client's limit) while the key's later messages are
 * already on their way. Nothing of that key after it may be written, each
 * later one is RETRY; every other key's messages go out (the refused
 * message's batch-mates are not REJECT), and each key reads back in
 * order. Three rounds, the culprit at a different place each time. */
START_TEST(order_after_broker_reject)
{
    const char *topic = th_name("order");
    create_small_topic(topic, "4000");
    outbox_sink_t *k = th_open_sink(base_uri);
    size_t keys = 5, n = 1500, rejected = 0;
    const size_t culprits[] = {500, 21, 1234};
    for (int round = 0; round < 3; round++) {
        msgs_t s = make(n, topic, keys, 120);
        size_t bad = culprits[round];
        free(s.payload[bad]);
        s.payload[bad] = malloc(9001);
        memset(s.payload[bad], ' ', 9000);
        s.payload[bad][0] = '7';
        s.payload[bad][9000] = '\0';
        s.m[bad].payload = s.payload[bad];
        s.m[bad].payload_len = 9000;
        outbox_publish_result_t *r = publish(k, &s);
        size_t ok = 0, retry = 0;
        for (size_t i = 0; i < n; i++) {
            int same = i % keys == bad % keys;
            /* The culprit is REJECT, unless an earlier message of its key
             * already failed (one the resending after the refusal had no
             * time left for stays RETRY, and holds the key back). */
            if (i == bad && r[i].status != OUTBOX_PUBLISH_REJECT) {
                size_t j = bad % keys;
                while (j < bad && r[j].status == OUTBOX_PUBLISH_OK)
                    j += keys;
                ck_assert_msg(j < bad && r[i].status == OUTBOX_PUBLISH_RETRY,
                              "round %d: the culprit %zu: %d %s", round, i, r[i].status, r[i].message);
                printf("round %d: the culprit is RETRY: %s\n", round, r[i].message);
            } else if (i == bad) {
                rejected++;
            } else if (same && i > bad) {
                ck_assert_msg(r[i].status == OUTBOX_PUBLISH_RETRY, "round %d: %zu after the culprit: %d %s",
                              round, i, r[i].status, r[i].message);
            } else {
                ck_assert_msg(r[i].status != OUTBOX_PUBLISH_REJECT, "round %d: innocent %zu REJECT: %s",
                              round, i, r[i].message);
            }
            ok += r[i].status == OUTBOX_PUBLISH_OK;
            retry += r[i].status == OUTBOX_PUBLISH_RETRY;
        }
        /* The topic holds exactly the messages reported OK (of this round). */
        got_t g = read_all(k, topic, &s);
        size_t mine = 0;
        for (size_t i = 0; i < n; i++) {
            int read = was_read(&g, s.id[i]);
            mine += read;
            if (r[i].status == OUTBOX_PUBLISH_OK)
                ck_assert_msg(read, "round %d: %zu reported OK, not in the topic", round, i);
            else if (i % keys == bad % keys)
                ck_assert_msg(!read, "round %d: %zu of the culprit's key (%d) is in the topic", round, i,
                              r[i].status);
        }
        ck_assert_uint_eq(mine, ok);
        assert_key_order(&g, &s);
        printf("round %d: culprit %zu: %zu OK, %zu RETRY\n", round, bad, ok, retry);
        free(g.id);
        free(r);
        unmake(&s);
        /* The ids repeat in every round: start each round on a new topic. */
        outbox_sink_destination_drop(k, topic);
        if (round < 2) {
            sleep(1);
            create_small_topic(topic, "4000");
        }
    }
    /* The refusal itself was seen and reported as REJECT. */
    ck_assert_uint_gt(rejected, 0);
    outbox_sink_close(k);
}
END_TEST

TH_SINK_MAIN("kafka_sink", 180, "OUTBOX_KAFKA_URI", "kafka", base_uri,
             uri_errors, secrets_not_logged, short_timeout_warned, topic_create_twice, broker_list,
             reject_unknown_topic, slow_partition_deferred_then_settled, order_after_broker_reject)
