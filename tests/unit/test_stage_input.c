/* Text fields that reach headers, topic names and keys: route, event type,
 * ordering key and checkpoint node key. The core refuses bytes that are not
 * UTF-8 and control characters before any store sees them, so every store
 * behaves alike (PostgreSQL would refuse them itself, SQLite would store
 * them, and distinct invalid keys would come out as the same key once made
 * printable). Run on the SQLite store, which would otherwise take them. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "outbox_int.h"
#include "test_store.h"

static char dir[256];
static char uri[600];
static outbox_store_t *s;

static void setup(void)
{
    test_store_make("stage-input", dir, uri, OUTBOX_SCHEMA_CHECKPOINT);
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_store_open(uri, NULL, &s, &d) == OUTBOX_OK, "%s", d.message);
}

static void teardown(void)
{
    outbox_store_close(s);
    s = NULL;
    test_store_remove(dir);
}

static size_t rows_in_store(void)
{
    outbox_stats_t st;
    ck_assert_msg(outbox_store_stats(s, NULL, &st) == OUTBOX_OK, "%s", outbox_store_message(s));
    return (size_t)(st.pending + st.processing + st.published + st.dead);
}

/* Byte strings that are not UTF-8, each in a different way. */
static const char *const bad_utf8[] = {
    "key-\xff",          /* never in UTF-8 */
    "key-\xc3",          /* cut short */
    "key-\xc0\xaf",      /* overlong '/' */
    "key-\xed\xa0\x80",  /* a surrogate */
    "key-\xf4\x90\x80\x80", /* beyond U+10FFFF */
    "\x80key",           /* a stray continuation byte */
};
#define N_BAD (sizeof bad_utf8 / sizeof bad_utf8[0])

static void expect_refused(int rc, const char *field, const char *where)
{
    const char *m = outbox_store_message(s);
    ck_assert_int_eq(rc, OUTBOX_EINVAL);
    ck_assert_msg(strstr(m, field) != NULL, "message does not name %s: %s", field, m);
    ck_assert_msg(strstr(m, "UTF-8") != NULL || strstr(m, "control") != NULL,
                  "message does not say what is wrong: %s", m);
    if (where)
        ck_assert_msg(strstr(m, where) != NULL, "message does not name %s: %s", where, m);
    ck_assert_msg(strchr(m, '\n') == NULL, "message is not one line: %s", m);
    for (const unsigned char *p = (const unsigned char *)m; *p; p++)
        ck_assert_msg(*p < 0x80, "message echoes the bad bytes: %s", m);
}

START_TEST(ordering_key_not_utf8)
{
    outbox_event_t ev[2] = {
        {.event_type = "t", .payload = "{}", .ordering_key = "fine"},
        {.event_type = "t", .payload = "{}", .ordering_key = bad_utf8[_i]},
    };
    size_t staged = 99;
    expect_refused(outbox_store_stage(s, NULL, "r", ev, 2, &staged), "ordering_key", "event 1");
    ck_assert_uint_eq(staged, 0);
    ck_assert_uint_eq(rows_in_store(), 0);
}
END_TEST

START_TEST(event_type_not_utf8)
{
    outbox_event_t ev[3] = {
        {.event_type = "a", .payload = "{}"},
        {.event_type = "b", .payload = "{}"},
        {.event_type = bad_utf8[_i], .payload = "{}"},
    };
    expect_refused(outbox_store_stage(s, NULL, "r", ev, 3, NULL), "event_type", "event 2");
    ck_assert_uint_eq(rows_in_store(), 0);
}
END_TEST

START_TEST(route_not_utf8)
{
    outbox_event_t ev = {.event_type = "t", .payload = "{}"};
    expect_refused(outbox_store_stage(s, NULL, bad_utf8[_i], &ev, 1, NULL), "route", NULL);
    ck_assert_uint_eq(rows_in_store(), 0);

    outbox_route_config_t rc = {.struct_size = sizeof rc, .route = bad_utf8[_i]};
    expect_refused(outbox_store_configure_route(s, &rc), "route", NULL);

    outbox_claim_req_t req = {.struct_size = sizeof req, .route = bad_utf8[_i], .limit = 1,
                              .lease_us = 1000000};
    const outbox_row_t *rows;
    size_t n;
    outbox_fence_t fence;
    expect_refused(outbox_store_claim(s, &req, &rows, &n, &fence), "route", NULL);
}
END_TEST

START_TEST(node_key_not_utf8)
{
    outbox_route_config_t rc = {.struct_size = sizeof rc, .route = "r",
                                .checkpoint_node_key = bad_utf8[_i]};
    expect_refused(outbox_store_configure_route(s, &rc), "node key", NULL);
    expect_refused(outbox_store_checkpoint_advance(s, NULL, bad_utf8[_i], 5), "node key", NULL);
}
END_TEST

/* Control characters, including ones only UTF-8 can spell (C1, U+0085). */
START_TEST(control_characters)
{
    static const char *const ctl[] = {"a\tb", "a\nb", "a\x7f" "b", "a\xc2\x85" "b",
                                      "a\xc2\x9b" "b"};
    for (size_t k = 0; k < sizeof ctl / sizeof ctl[0]; k++) {
        outbox_event_t ev = {.event_type = "t", .payload = "{}", .ordering_key = ctl[k]};
        expect_refused(outbox_store_stage(s, NULL, "r", &ev, 1, NULL), "ordering_key", "event 0");
        outbox_event_t ev2 = {.event_type = ctl[k], .payload = "{}"};
        expect_refused(outbox_store_stage(s, NULL, "r", &ev2, 1, NULL), "event_type", "event 0");
        expect_refused(outbox_store_stage(s, NULL, ctl[k], &ev2, 1, NULL), "route", NULL);
    }
    ck_assert_uint_eq(rows_in_store(), 0);
}
END_TEST

/* Valid UTF-8 of every length goes through untouched. */
START_TEST(valid_utf8_staged)
{
    const char *key = "cl\xc3\xa9-\xe2\x82\xac-\xf0\x9f\x93\xa6";
    outbox_event_t ev = {.event_type = "commande.cr\xc3\xa9\xc3\xa9" "e", .payload = "{}",
                         .ordering_key = key};
    size_t staged = 0;
    ck_assert_msg(outbox_store_stage(s, NULL, "r\xc3\xa9seau", &ev, 1, &staged) == OUTBOX_OK, "%s",
                  outbox_store_message(s));
    ck_assert_uint_eq(staged, 1);
    outbox_claim_req_t req = {.struct_size = sizeof req, .route = "r\xc3\xa9seau", .limit = 5,
                              .lease_us = 1000000};
    const outbox_row_t *rows;
    size_t n;
    outbox_fence_t fence;
    ck_assert_msg(outbox_store_claim(s, &req, &rows, &n, &fence) == OUTBOX_OK, "%s",
                  outbox_store_message(s));
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(rows[0].ordering_key, key);
}
END_TEST

/* Stage options: what is refused before anything is written, and where a
 * delay or an instant lands (the SQLite store's clock is this process's). */
START_TEST(stage_options_checked)
{
    outbox_event_t ev = {.event_type = "t", .payload = "{}"};
    size_t staged = 99;
    static const struct {
        outbox_stage_options_t o;
        const char *says;
    } bad[] = {
        {{.struct_size = 0}, "struct_size not set"},
        {{.struct_size = sizeof(outbox_stage_options_t), .not_before = -1}, "not_before is negative"},
        {{.struct_size = sizeof(outbox_stage_options_t), .delay_us = -1}, "delay_us must be 0 to"},
        {{.struct_size = sizeof(outbox_stage_options_t), .delay_us = OUTBOX_DURATION_MAX_US + 1},
         "delay_us must be 0 to"},
        {{.struct_size = sizeof(outbox_stage_options_t), .not_before = 1, .delay_us = 1},
         "not both"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(outbox_store_stage_with(s, NULL, "r", &ev, 1, &bad[i].o, &staged),
                         OUTBOX_EINVAL);
        ck_assert_uint_eq(staged, 0);
        ck_assert_msg(strstr(outbox_store_message(s), bad[i].says), "case %zu: %s", i,
                      outbox_store_message(s));
    }
    ck_assert_uint_eq(rows_in_store(), 0);

    int64_t before = outbox_now_us();
    outbox_stage_options_t in_a_minute = {.struct_size = sizeof in_a_minute, .delay_us = 60000000};
    ck_assert_int_eq(outbox_store_stage_with(s, NULL, "r", &ev, 1, &in_a_minute, &staged), OUTBOX_OK);
    int64_t after = outbox_now_us();
    outbox_stage_options_t at = {.struct_size = sizeof at, .not_before = INT64_C(4102444800000000)};
    ck_assert_int_eq(outbox_store_stage_with(s, NULL, "r", &ev, 1, &at, &staged), OUTBOX_OK);
    ck_assert_int_eq(outbox_store_stage_with(s, NULL, "r", &ev, 1, NULL, &staged), OUTBOX_OK);

    /* Only the undelayed row is claimable. */
    outbox_claim_req_t req = {.struct_size = sizeof req, .route = "r", .limit = 5,
                              .lease_us = 1000000};
    const outbox_row_t *rows;
    size_t n;
    outbox_fence_t fence;
    ck_assert_int_eq(outbox_store_claim(s, &req, &rows, &n, &fence), OUTBOX_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(rows[0].available_at, 0);
    outbox_stats_t st;
    ck_assert_int_eq(outbox_store_stats(s, "r", &st), OUTBOX_OK);
    ck_assert_uint_eq(st.pending, 2);

    /* The rows as stored: the delay from the clock at staging, the instant as given. */
    sqlite3 *db = NULL;
    char path[300];
    snprintf(path, sizeof path, "%s/t.db", dir);
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *q = NULL;
    ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT available_at FROM outbox WHERE available_at IS "
                                            "NOT NULL ORDER BY available_at", -1, &q, NULL),
                     SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(q), SQLITE_ROW);
    int64_t delayed = sqlite3_column_int64(q, 0);
    ck_assert_msg(delayed >= before + 60000000 && delayed <= after + 60000000,
                  "a delay of 60 s gave available_at %lld, staged between %lld and %lld",
                  (long long)delayed, (long long)before, (long long)after);
    ck_assert_int_eq(sqlite3_step(q), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_column_int64(q, 0), INT64_C(4102444800000000));
    ck_assert_int_eq(sqlite3_step(q), SQLITE_DONE);
    sqlite3_finalize(q);
    sqlite3_close(db);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("stage_input");
    TCase *tc = tcase_create("text fields");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, ordering_key_not_utf8, 0, (int)N_BAD);
    tcase_add_loop_test(tc, event_type_not_utf8, 0, (int)N_BAD);
    tcase_add_loop_test(tc, route_not_utf8, 0, (int)N_BAD);
    tcase_add_loop_test(tc, node_key_not_utf8, 0, (int)N_BAD);
    tcase_add_test(tc, control_characters);
    tcase_add_test(tc, valid_utf8_staged);
    tcase_add_test(tc, stage_options_checked);
    suite_add_tcase(suite, tc);
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
