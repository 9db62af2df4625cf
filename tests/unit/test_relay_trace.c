/* The relay's tracer hook (outbox_relay_tracer_t) on the SQLite store and
 * the scriptable test sink: begin and end once per published batch with
 * the right counts and the rows' traceparents, the traceparent begin()
 * returns in every message instead of the row's own, the rows' own kept
 * without a tracer, when begin() declines, or when it returns something
 * that is not trace context; a pipelined run (OUTBOX_TEST_PIPELINE, the
 * suite runs this file with 1 and 4) calls it once per batch too, on the
 * publishing thread, and the config's checks. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_int.h"
#include "test_sink.h"
#include "test_store.h"

static char dir[256];
static char uri[600];
static outbox_store_t *store;

static void setup(void)
{
    test_store_make("trace", dir, uri, OUTBOX_SCHEMA_TRACEPARENT);
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_store_open(uri, NULL, &store, &d) == OUTBOX_OK, "%s", d.message);
    test_sink_register();
    test_sink_reset(NULL);
}

static void teardown(void)
{
    outbox_store_close(store);
    store = NULL;
    test_store_remove(dir);
}

static size_t test_pipeline(void)
{
    const char *v = getenv("OUTBOX_TEST_PIPELINE");
    return v != NULL && atoi(v) > 0 ? (size_t)atoi(v) : 1;
}

/* The W3C contexts the tests stage with, and one a tracer returns. */
#define TP_A "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
#define TP_B "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
#define TP_SPAN "00-11111111111111111111111111111111-2222222222222222-01"

/* Stage one event on route r with key and traceparent (either may be NULL). */
static void stage(const char *key, const char *tp, char out[OUTBOX_UUID_STRLEN + 1])
{
    char id[OUTBOX_UUID_STRLEN + 1];
    outbox_uuid_v7(id);
    outbox_event_t e = {.event_id = id, .event_type = "t", .payload = "{}", .ordering_key = key,
                        .traceparent = tp};
    size_t n = 0;
    ck_assert_msg(outbox_store_stage(store, NULL, "r", &e, 1, &n) == OUTBOX_OK, "%s",
                  outbox_store_message(store));
    ck_assert_int_eq(n, 1);
    if (out != NULL)
        memcpy(out, id, sizeof id);
}

/* ------------------------------------------------------ the recorder */

#define MAX_SPANS 256
#define MAX_MSGS 64

typedef struct recorded {
    char route[32], destination[64], sink[32];
    size_t n_messages;
    char tps[MAX_MSGS][64];    /* rows' traceparents, "" for none */
    char events[MAX_MSGS][40]; /* rows' event ids */
    int64_t start_us, end_us;
    uint64_t ok, retried, rejected, deferred, unsent;
    int outage;
    char error[OUTBOX_MESSAGE_MAX];
    char traceparent[64];
    int ended;
    pthread_t begin_thread, end_thread;
    uint32_t span_struct_size;
} recorded_t;

typedef struct recorder {
    pthread_mutex_t mu;
    int begins, ends;
    recorded_t spans[MAX_SPANS];
    /* What begin() does: 0 declines, 1 returns a traceparent made from
     * its count (unique per batch), 2 returns nothing, 3 returns junk. */
    int mode;
} recorder_t;

static recorder_t rec;

static int rec_begin(void *ctx, const outbox_relay_span_t *s, char tp[OUTBOX_TRACEPARENT_LEN + 1], void **span)
{
    recorder_t *r = ctx;
    ck_assert_ptr_eq(*span, NULL);
    ck_assert_str_eq(tp, "");
    pthread_mutex_lock(&r->mu);
    int i = r->begins++;
    pthread_mutex_unlock(&r->mu);
    ck_assert_int_lt(i, MAX_SPANS);
    recorded_t *x = &r->spans[i];
    x->span_struct_size = s->struct_size;
    snprintf(x->route, sizeof x->route, "%s", s->route);
    snprintf(x->destination, sizeof x->destination, "%s", s->destination);
    snprintf(x->sink, sizeof x->sink, "%s", s->sink);
    x->n_messages = s->n_messages;
    ck_assert_uint_le(s->n_messages, MAX_MSGS);
    for (size_t k = 0; k < s->n_messages; k++) {
        snprintf(x->tps[k], sizeof x->tps[k], "%s", s->rows[k]->traceparent ? s->rows[k]->traceparent : "");
        snprintf(x->events[k], sizeof x->events[k], "%s", s->rows[k]->event_id);
    }
    x->start_us = s->start_us;
    x->begin_thread = pthread_self();
    if (r->mode == 0)
        return 0;
    if (r->mode == 1)
        snprintf(tp, OUTBOX_TRACEPARENT_LEN + 1, "00-11111111111111111111111111111111-%016x-01", i + 1);
    if (r->mode == 3)
        snprintf(tp, OUTBOX_TRACEPARENT_LEN + 1, "00-not-a-trace-context");
    *span = x;
    return 1;
}

static void rec_end(void *ctx, const outbox_relay_span_t *s, void *span)
{
    recorder_t *r = ctx;
    recorded_t *x = span;
    ck_assert_ptr_nonnull(x);
    ck_assert_int_eq(x->ended, 0);
    ck_assert_uint_eq(s->n_messages, x->n_messages);
    x->end_us = s->end_us;
    x->ok = s->ok;
    x->retried = s->retried;
    x->rejected = s->rejected;
    x->deferred = s->deferred;
    x->unsent = s->unsent;
    x->outage = s->outage;
    snprintf(x->error, sizeof x->error, "%s", s->error);
    snprintf(x->traceparent, sizeof x->traceparent, "%s", s->traceparent);
    x->end_thread = pthread_self();
    x->ended = 1;
    pthread_mutex_lock(&r->mu);
    r->ends++;
    pthread_mutex_unlock(&r->mu);
}

static outbox_relay_tracer_t tracer = {
    .struct_size = sizeof tracer, .begin = rec_begin, .end = rec_end, .ctx = &rec};

static void rec_reset(int mode)
{
    memset(&rec, 0, sizeof rec);
    pthread_mutex_init(&rec.mu, NULL);
    rec.mode = mode;
}

/* A relay on sink_uri with the recorder as its tracer (or none). */
static outbox_relay_t *traced_relay(const char *sink_uri, outbox_sink_t **sink, size_t batch, int traced)
{
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_sink_open(sink_uri, NULL, sink, &d) == OUTBOX_OK, "%s", d.message);
    outbox_relay_config_t cfg;
    outbox_relay_config_init(&cfg);
    cfg.route = "r";
    cfg.destination = "topic.{route}";
    cfg.batch = batch;
    cfg.pipeline = test_pipeline();
    cfg.backoff_base_us = 0;
    cfg.poll_us = 1000;
    cfg.until_idle = 1;
    cfg.tracer = traced ? &tracer : NULL;
    outbox_relay_t *r = NULL;
    ck_assert_msg(outbox_relay_new(store, *sink, &cfg, &r, &d) == OUTBOX_OK, "%s", d.message);
    return r;
}

/* The traceparent the sink saw on event id, "" when none. */
static const char *delivered_tp(const char *event_id)
{
    const test_sink_log_t *log;
    size_t n = test_sink_delivered(&log);
    for (size_t i = 0; i < n; i++)
        if (strcmp(log[i].event_id, event_id) == 0)
            return log[i].traceparent;
    ck_abort_msg("event %s was not delivered", event_id);
    return NULL;
}

/* --------------------------------------------------------------- tests */

static const char *reject_id, *retry_id;

static int reject_one_retry_one(const outbox_message_t *m, int call)
{
    (void)call;
    if (strcmp(m->event_id, reject_id) == 0)
        return OUTBOX_PUBLISH_REJECT;
    if (retry_id != NULL && strcmp(m->event_id, retry_id) == 0)
        return OUTBOX_PUBLISH_RETRY;
    return OUTBOX_PUBLISH_OK;
}

START_TEST(begin_and_end_once_per_batch_with_counts_and_links)
{
    char ids[5][OUTBOX_UUID_STRLEN + 1];
    const char *tps[5] = {TP_A, NULL, TP_B, TP_A, NULL};
    for (int i = 0; i < 5; i++)
        stage(NULL, tps[i], ids[i]);
    reject_id = ids[1];
    retry_id = ids[2];
    test_sink_reset(reject_one_retry_one);
    rec_reset(1);
    outbox_sink_t *sink;
    outbox_relay_t *r = traced_relay("test:", &sink, 10, 1);
    size_t claimed = 0;
    int64_t before = outbox_now_us();
    ck_assert_int_eq(outbox_relay_step(r, &claimed), OUTBOX_OK);
    int64_t after = outbox_now_us();
    ck_assert_int_eq(claimed, 5);
    ck_assert_int_eq(rec.begins, 1);
    ck_assert_int_eq(rec.ends, 1);
    const recorded_t *x = &rec.spans[0];
    ck_assert_uint_eq(x->span_struct_size, sizeof(outbox_relay_span_t));
    ck_assert_str_eq(x->route, "r");
    ck_assert_str_eq(x->destination, "topic.r");
    ck_assert_str_eq(x->sink, "test");
    ck_assert_uint_eq(x->n_messages, 5);
    for (int i = 0; i < 5; i++) {
        ck_assert_str_eq(x->events[i], ids[i]);
        ck_assert_str_eq(x->tps[i], tps[i] ? tps[i] : "");
    }
    ck_assert_int_le(before, x->start_us);
    ck_assert_int_le(x->start_us, x->end_us);
    ck_assert_int_le(x->end_us, after);
    ck_assert_uint_eq(x->ok, 3);
    ck_assert_uint_eq(x->rejected, 1);
    ck_assert_uint_eq(x->retried, 1);
    ck_assert_uint_eq(x->deferred + x->unsent, 0);
    ck_assert_int_eq(x->outage, 0);
    ck_assert_msg(strstr(x->error, "test sink says") != NULL, "%s", x->error);
    ck_assert_str_eq(x->traceparent, "00-11111111111111111111111111111111-0000000000000001-01");
    /* The retried row again: a second batch, a second span, all OK. */
    retry_id = NULL;
    ck_assert_int_eq(outbox_relay_step(r, &claimed), OUTBOX_OK);
    ck_assert_int_eq(claimed, 1);
    ck_assert_int_eq(rec.begins, 2);
    ck_assert_int_eq(rec.ends, 2);
    ck_assert_uint_eq(rec.spans[1].n_messages, 1);
    ck_assert_uint_eq(rec.spans[1].ok, 1);
    ck_assert_str_eq(rec.spans[1].tps[0], TP_B);
    ck_assert_str_eq(rec.spans[1].error, "");
    /* Nothing claimable: no batch, no span. */
    ck_assert_int_eq(outbox_relay_step(r, &claimed), OUTBOX_OK);
    ck_assert_int_eq(claimed, 0);
    ck_assert_int_eq(rec.begins, 2);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

START_TEST(returned_traceparent_replaces_the_rows_own)
{
    char ids[4][OUTBOX_UUID_STRLEN + 1];
    const char *tps[4] = {TP_A, NULL, TP_B, NULL};
    for (int i = 0; i < 4; i++)
        stage(i < 2 ? "k" : NULL, tps[i], ids[i]);
    rec_reset(1);
    outbox_sink_t *sink;
    outbox_relay_t *r = traced_relay("testordered:", &sink, 10, 1);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    ck_assert_int_eq(rec.begins, 1);
    for (int i = 0; i < 4; i++)
        ck_assert_str_eq(delivered_tp(ids[i]), "00-11111111111111111111111111111111-0000000000000001-01");
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

static void without_a_span(int traced, int mode)
{
    char ids[3][OUTBOX_UUID_STRLEN + 1];
    const char *tps[3] = {TP_A, NULL, TP_B};
    for (int i = 0; i < 3; i++)
        stage(NULL, tps[i], ids[i]);
    rec_reset(mode);
    outbox_sink_t *sink;
    outbox_relay_t *r = traced_relay("test:", &sink, 10, traced);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    for (int i = 0; i < 3; i++)
        ck_assert_str_eq(delivered_tp(ids[i]), tps[i] ? tps[i] : "");
    outbox_relay_free(r);
    outbox_sink_close(sink);
}

START_TEST(no_tracer_keeps_the_rows_traceparent)
{
    without_a_span(0, 0);
    ck_assert_int_eq(rec.begins, 0);
}
END_TEST

START_TEST(declined_batch_keeps_the_rows_traceparent_and_gets_no_end)
{
    without_a_span(1, 0);
    ck_assert_int_eq(rec.begins, 1);
    ck_assert_int_eq(rec.ends, 0);
}
END_TEST

START_TEST(no_traceparent_from_begin_keeps_the_rows_own)
{
    without_a_span(1, 2);
    ck_assert_int_eq(rec.ends, 1);
    ck_assert_str_eq(rec.spans[0].traceparent, "");
}
END_TEST

START_TEST(malformed_traceparent_from_begin_is_ignored)
{
    without_a_span(1, 3);
    ck_assert_int_eq(rec.ends, 1);
    ck_assert_str_eq(rec.spans[0].traceparent, "");
}
END_TEST

/* A head that fails holds back its key's later rows: they are unsent. */
START_TEST(rows_held_behind_a_failed_key_are_unsent)
{
    char ids[4][OUTBOX_UUID_STRLEN + 1];
    for (int i = 0; i < 3; i++)
        stage("k", NULL, ids[i]);
    stage(NULL, NULL, ids[3]);
    reject_id = ids[0];
    retry_id = NULL;
    test_sink_reset(reject_one_retry_one);
    rec_reset(1);
    outbox_sink_t *sink;
    outbox_relay_t *r = traced_relay("test:", &sink, 10, 1);
    size_t claimed;
    ck_assert_int_eq(outbox_relay_step(r, &claimed), OUTBOX_OK);
    ck_assert_int_eq(rec.ends, 1);
    const recorded_t *x = &rec.spans[0];
    ck_assert_uint_eq(x->n_messages, 4);
    ck_assert_uint_eq(x->ok, 1);
    ck_assert_uint_eq(x->rejected, 1);
    ck_assert_uint_eq(x->unsent, 2);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

static int all_retry(const outbox_message_t *m, int call)
{
    (void)m, (void)call;
    return OUTBOX_PUBLISH_RETRY;
}

START_TEST(outage_is_reported_to_end)
{
    for (int i = 0; i < 3; i++)
        stage(NULL, NULL, NULL);
    test_sink_reset(all_retry);
    rec_reset(1);
    outbox_sink_t *sink;
    outbox_relay_t *r = traced_relay("test:", &sink, 10, 1);
    size_t claimed;
    ck_assert_int_eq(outbox_relay_step(r, &claimed), OUTBOX_OK);
    ck_assert_int_eq(rec.ends, 1);
    ck_assert_int_eq(rec.spans[0].outage, 1);
    ck_assert_uint_eq(rec.spans[0].retried, 3);
    ck_assert_uint_eq(rec.spans[0].ok, 0);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

/* A run of many batches (pipelined when OUTBOX_TEST_PIPELINE says so):
 * one begin and one end per batch, on the same thread, every message
 * carrying its own batch's traceparent, the counts adding up. */
START_TEST(every_batch_of_a_run_is_traced_once)
{
    enum { N = 200, BATCH = 10 };
    static char ids[N][OUTBOX_UUID_STRLEN + 1];
    for (int i = 0; i < N; i++)
        stage(i % 3 ? "k" : NULL, i % 2 ? TP_A : NULL, ids[i]);
    rec_reset(1);
    outbox_sink_t *sink;
    outbox_relay_t *r = traced_relay("test:", &sink, BATCH, 1);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    ck_assert_int_eq(rec.begins, rec.ends);
    ck_assert_int_ge(rec.begins, N / BATCH);
    uint64_t messages = 0, ok = 0;
    for (int b = 0; b < rec.begins; b++) {
        const recorded_t *x = &rec.spans[b];
        ck_assert(pthread_equal(x->begin_thread, x->end_thread));
        messages += x->n_messages;
        ok += x->ok;
        char want[64];
        snprintf(want, sizeof want, "00-11111111111111111111111111111111-%016x-01", b + 1);
        ck_assert_str_eq(x->traceparent, want);
        for (size_t k = 0; k < x->n_messages; k++)
            ck_assert_str_eq(delivered_tp(x->events[k]), want);
    }
    ck_assert_uint_eq(messages, N);
    ck_assert_uint_eq(ok, N);
    if (test_pipeline() > 1)
        ck_assert_msg(!pthread_equal(rec.spans[0].begin_thread, pthread_self()),
                      "a pipelined run traces on its publishing thread");
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

static int noop_begin(void *ctx, const outbox_relay_span_t *s, char tp[OUTBOX_TRACEPARENT_LEN + 1], void **span)
{
    (void)ctx, (void)s, (void)tp, (void)span;
    return 0;
}

START_TEST(tracer_checks)
{
    outbox_diag_t d = {0};
    outbox_sink_t *sink;
    ck_assert_int_eq(outbox_sink_open("test:", NULL, &sink, &d), OUTBOX_OK);
    outbox_relay_config_t cfg;
    outbox_relay_config_init(&cfg);
    cfg.route = "r";
    outbox_relay_tracer_t t = {.struct_size = sizeof t, .begin = noop_begin};
    cfg.tracer = &t;
    outbox_relay_t *r = NULL;
    ck_assert_int_eq(outbox_relay_new(store, sink, &cfg, &r, &d), OUTBOX_EINVAL);
    ck_assert_msg(strstr(d.message, "both begin and end") != NULL, "%s", d.message);
    t = (outbox_relay_tracer_t){.begin = noop_begin, .end = rec_end};
    ck_assert_int_eq(outbox_relay_new(store, sink, &cfg, &r, &d), OUTBOX_EINVAL);
    ck_assert_msg(strstr(d.message, "struct_size") != NULL, "%s", d.message);
    /* A caller built before the tracer existed: its config ends earlier
     * and the relay reads no tracer from it. */
    cfg.struct_size = (uint32_t)offsetof(outbox_relay_config_t, tracer);
    ck_assert_msg(outbox_relay_new(store, sink, &cfg, &r, &d) == OUTBOX_OK, "%s", d.message);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("relay_trace");
    TCase *tc = tcase_create("trace");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, begin_and_end_once_per_batch_with_counts_and_links);
    tcase_add_test(tc, returned_traceparent_replaces_the_rows_own);
    tcase_add_test(tc, no_tracer_keeps_the_rows_traceparent);
    tcase_add_test(tc, declined_batch_keeps_the_rows_traceparent_and_gets_no_end);
    tcase_add_test(tc, no_traceparent_from_begin_keeps_the_rows_own);
    tcase_add_test(tc, malformed_traceparent_from_begin_is_ignored);
    tcase_add_test(tc, rows_held_behind_a_failed_key_are_unsent);
    tcase_add_test(tc, outage_is_reported_to_end);
    tcase_add_test(tc, every_batch_of_a_run_is_traced_once);
    tcase_add_test(tc, tracer_checks);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
