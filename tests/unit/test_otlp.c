/* The span exporter of tools/tracing on its own: its input checks, the
 * sampling rule, the tracer's parent and sampling decisions, a span's
 * OTLP/JSON (valid JSON whatever the texts hold), and the bounded queue:
 * spans past its size and spans whose POST fails are dropped and counted,
 * never waited for. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "otlp_int.h"

START_TEST(endpoint_checks)
{
    char err[600];
    const char *good[] = {"http://127.0.0.1:4318", "https://collector.example", "http://h:1/otlp/",
                          "http://[::1]:4318", "http://user:pw@h:4318/base"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        ck_assert_msg(otlp_endpoint_check(good[i], err, sizeof err) == 0, "%s: %s", good[i], err);
    const struct {
        const char *url, *why;
    } bad[] = {
        {"ftp://h:4318", "is not an http:// or https:// URL"},
        {"h:4318", "is not an http:// or https:// URL"},
        {"http://", "has no host"},
        {"http://:4318", "has no host"},
        {"http://h:0", "the port must be a number 1..65535"},
        {"http://h:65536", "the port must be a number 1..65535"},
        {"http://h:x", "the port must be a number 1..65535"},
        {"http://h/?a=b", "a query or fragment"},
        {"http://h/#f", "a query or fragment"},
        {"http://h /x", "a space or a control character"},
        {"http://[::1:4318", "closing ]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(otlp_endpoint_check(bad[i].url, err, sizeof err) != 0, "%s accepted", bad[i].url);
        ck_assert_msg(strstr(err, bad[i].why) != NULL, "%s: %s", bad[i].url, err);
    }
    ck_assert_int_ne(otlp_endpoint_check("ftp://u:s3cret@h", err, sizeof err), 0);
    ck_assert_msg(strstr(err, "s3cret") == NULL, "%s", err);
}
END_TEST

START_TEST(sample_and_service_name_checks)
{
    char err[200];
    double v = -1;
    const struct {
        const char *text;
        double value;
    } good[] = {{"0", 0}, {"1", 1}, {"0.25", 0.25}, {"1e-3", 0.001}, {"1.0", 1}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        ck_assert_msg(otlp_sample_parse(good[i].text, &v, err, sizeof err) == 0, "%s: %s", good[i].text, err);
        ck_assert_double_eq(v, good[i].value);
    }
    const char *bad[] = {"", "abc", "0.5x", "nan", "inf", "1.5", "-0.1", " 1", "0x1p-1x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(otlp_sample_parse(bad[i], &v, err, sizeof err) != 0, "\"%s\" accepted", bad[i]);
    ck_assert_int_eq(otlp_service_name_check("billing-relay", err, sizeof err), 0);
    ck_assert_int_ne(otlp_service_name_check("", err, sizeof err), 0);
    ck_assert_int_ne(otlp_service_name_check("a\nb", err, sizeof err), 0);
}
END_TEST

START_TEST(ratio_sampling_reads_the_trace_id)
{
    uint8_t id[16];
    int at_quarter = 0, n = 20000;
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(getrandom(id, sizeof id, 0), (ssize_t)sizeof id);
        ck_assert(otlp_sample_says(1, id));
        ck_assert(!otlp_sample_says(0, id));
        int q = otlp_sample_says(0.25, id);
        at_quarter += q;
        /* A trace sampled at a ratio is sampled at every larger one. */
        if (q)
            ck_assert(otlp_sample_says(0.5, id));
    }
    ck_assert_msg(at_quarter > n / 4 - 600 && at_quarter < n / 4 + 600, "%d of %d at 0.25", at_quarter, n);
    /* The same trace id, the same decision: all zeros in the last 8 bytes
     * is the lowest value, sampled at any ratio above 0. */
    memset(id, 0xab, 8);
    memset(id + 8, 0, 8);
    ck_assert(otlp_sample_says(1e-9, id));
    memset(id + 8, 0xff, 8);
    ck_assert(!otlp_sample_says(0.999, id));
}
END_TEST

START_TEST(traceparent_parsing)
{
    uint8_t t[16], s[8], f;
    ck_assert(otlp_traceparent_parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", t, s, &f));
    ck_assert_uint_eq(t[0], 0x0a);
    ck_assert_uint_eq(s[7], 0x31);
    ck_assert_uint_eq(f, 1);
    const char *bad[] = {NULL, "", "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
                         "00-00000000000000000000000000000000-b7ad6b7169203331-01",
                         "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
                         "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                         "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0",
                         "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(!otlp_traceparent_parse(bad[i], t, s, &f), "%s accepted", bad[i] ? bad[i] : "NULL");
}
END_TEST

/* ------------------------------------------------------- the tracer */

#define TP_A "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
#define TP_A2 "00-0af7651916cd43dd8448eb211c80319c-1111111111111111-01"
#define TP_B "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
#define TP_UNSAMPLED "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"

static outbox_row_t rows[3];
static const outbox_row_t *row_ptrs[3] = {&rows[0], &rows[1], &rows[2]};

static outbox_relay_span_t span_of(const char *a, const char *b, const char *c)
{
    rows[0] = (outbox_row_t){.event_id = "e-0", .traceparent = a};
    rows[1] = (outbox_row_t){.event_id = "e-1", .traceparent = b};
    rows[2] = (outbox_row_t){.event_id = "e-2", .traceparent = c};
    return (outbox_relay_span_t){.struct_size = sizeof(outbox_relay_span_t), .route = "orders",
                                 .destination = "orders.v1", .sink = "amqp", .n_messages = 3,
                                 .rows = row_ptrs, .start_us = 1000, .end_us = 2500, .error = "",
                                 .traceparent = ""};
}

/* An exporter whose collector is not there (port 9, discard, which no
 * test machine serves: the POST is refused at once) and that posts only
 * when stopped. */
static otlp_exporter_t *exporter(double sample, size_t queue)
{
    otlp_options_t o = {.endpoint = "http://127.0.0.1:9", .sample = sample, .queue_max = queue,
                        .interval_us = 60 * 1000000LL, .timeout_us = 500000};
    otlp_exporter_t *e = NULL;
    char err[600];
    ck_assert_msg(otlp_start(&o, &e, err, sizeof err) == 0, "%s", err);
    return e;
}

START_TEST(parent_links_and_sampling)
{
    otlp_exporter_t *e = exporter(1, 8);
    const outbox_relay_tracer_t *t = otlp_tracer(e);
    char tp[OUTBOX_TRACEPARENT_LEN + 1] = "";
    void *h = NULL;
    /* One trace: a child of the first message's span, in its trace. */
    outbox_relay_span_t s = span_of(TP_A, TP_A2, TP_A);
    ck_assert_int_eq(t->begin(t->ctx, &s, tp, &h), 1);
    ck_assert_int_eq(strncmp(tp, TP_A, 36), 0);
    ck_assert_str_ne(tp + 36, "b7ad6b7169203331-01");
    ck_assert_str_eq(tp + 52, "-01");
    /* Two traces: a trace of its own. */
    s = span_of(TP_A, TP_B, NULL);
    tp[0] = '\0';
    h = NULL;
    ck_assert_int_eq(t->begin(t->ctx, &s, tp, &h), 1);
    ck_assert_int_ne(strncmp(tp, TP_A, 36), 0);
    ck_assert_int_ne(strncmp(tp, TP_B, 36), 0);
    ck_assert_ptr_eq(h, NULL);
    /* An unsampled parent: not traced. */
    s = span_of(TP_UNSAMPLED, TP_UNSAMPLED, TP_UNSAMPLED);
    tp[0] = '\0';
    ck_assert_int_eq(t->begin(t->ctx, &s, tp, &h), 0);
    otlp_stop(e, NULL);
    /* Sample 0: nothing. */
    e = exporter(0, 8);
    t = otlp_tracer(e);
    s = span_of(TP_A, TP_A, TP_A);
    ck_assert_int_eq(t->begin(t->ctx, &s, tp, &h), 0);
    otlp_stop(e, NULL);
}
END_TEST

START_TEST(a_full_queue_and_a_missing_collector_drop_spans)
{
    otlp_exporter_t *e = exporter(1, 2);
    const outbox_relay_tracer_t *t = otlp_tracer(e);
    for (int i = 0; i < 3; i++) {
        outbox_relay_span_t s = span_of(TP_A, NULL, TP_B);
        char tp[OUTBOX_TRACEPARENT_LEN + 1] = "";
        void *h = NULL;
        ck_assert_int_eq(t->begin(t->ctx, &s, tp, &h), 1);
        s.traceparent = tp;
        s.ok = 3;
        t->end(t->ctx, &s, h);
    }
    otlp_counters_t c;
    otlp_counters(e, &c);
    ck_assert_uint_eq(c.dropped_queue, 1);
    otlp_stop(e, &c);
    ck_assert_uint_eq(c.dropped_queue, 1);
    ck_assert_uint_eq(c.dropped_export, 2);
    ck_assert_uint_eq(c.export_failures, 1);
    ck_assert_uint_eq(c.exported, 0);
}
END_TEST

START_TEST(json_is_valid_whatever_the_texts_hold)
{
    otlp_exporter_t *e = exporter(1, 2);
    otlp_span_t *rec = calloc(1, sizeof *rec);
    ck_assert_ptr_nonnull(rec);
    memset(rec->trace_id, 0x0a, 16);
    memset(rec->span_id, 0x0b, 8);
    memset(rec->parent_id, 0x0c, 8);
    rec->has_parent = true;
    rec->start_us = 1764900000000000;
    rec->end_us = 1764900000001234;
    snprintf(rec->route, sizeof rec->route, "r\"o\\u\ttе");
    snprintf(rec->destination, sizeof rec->destination, "dest \xff\xfe bad utf-8 \x01");
    snprintf(rec->system, sizeof rec->system, "rabbitmq");
    snprintf(rec->error, sizeof rec->error, "broker said \"no\"\n\xc3");
    rec->n_messages = 130;
    rec->ok = 127;
    rec->rejected = 2;
    rec->retried = 1;
    rec->n_links = 2;
    rec->dropped_links = 128;
    memset(rec->links[0].trace_id, 1, 16);
    memset(rec->links[0].span_id, 2, 8);
    rec->links[0].flags = 1;
    snprintf(rec->links[0].event_id, sizeof rec->links[0].event_id, "e-1");
    memset(rec->links[1].trace_id, 3, 16);
    memset(rec->links[1].span_id, 4, 8);
    otlp_buf_t b = {0};
    otlp_span_t *list[1] = {rec};
    otlp_json_encode(e, list, 1, &b);
    ck_assert(!b.failed);
    ck_assert_msg(outbox_json_valid(b.p, b.len), "%s", b.p);
    const char *want[] = {
        "\"traceId\":\"0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a\"", "\"spanId\":\"0b0b0b0b0b0b0b0b\"",
        "\"parentSpanId\":\"0c0c0c0c0c0c0c0c\"", "\"kind\":4",
        "\"startTimeUnixNano\":\"1764900000000000000\"", "\"endTimeUnixNano\":\"1764900000001234000\"",
        "{\"key\":\"messaging.system\",\"value\":{\"stringValue\":\"rabbitmq\"}}",
        "{\"key\":\"messaging.batch.message_count\",\"value\":{\"intValue\":\"130\"}}",
        "{\"key\":\"messaging.operation.type\",\"value\":{\"stringValue\":\"publish\"}}",
        "{\"key\":\"error.type\",\"value\":{\"stringValue\":\"rejected\"}}",
        "\"droppedLinksCount\":128", "\"flags\":769",
        "{\"key\":\"messaging.message.id\",\"value\":{\"stringValue\":\"e-1\"}}",
        "\"status\":{\"code\":2,\"message\":\"2 rejected, 1 retried of 130 messages: broker said \\\"no\\\"\\n\\ufffd\"}",
        "\"name\":\"publish dest \\ufffd\\ufffd bad utf-8 \\u0001\"",
        "{\"key\":\"service.name\",\"value\":{\"stringValue\":\"outbox-relay\"}}",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(b.p, want[i]) != NULL, "no %s in %s", want[i], b.p);
    free(b.p);
    free(rec);
    otlp_stop(e, NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("otlp");
    TCase *tc = tcase_create("otlp");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, endpoint_checks);
    tcase_add_test(tc, sample_and_service_name_checks);
    tcase_add_test(tc, ratio_sampling_reads_the_trace_id);
    tcase_add_test(tc, traceparent_parsing);
    tcase_add_test(tc, parent_links_and_sampling);
    tcase_add_test(tc, a_full_queue_and_a_missing_collector_drop_spans);
    tcase_add_test(tc, json_is_valid_whatever_the_texts_hold);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
