/* The names of 0.1 (outbox.h, "names before 0.2") still link and do what
 * the functions that replaced them do: a program written against 0.1
 * keeps working until 1.0, with a compiler warning at each use. The kit's
 * names before 1.4 still compile for a driver written against them. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#undef OUTBOX_KIT_NO_OLD_NAMES

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox/kit.h"
#include "outbox/outbox.h"
#include "outbox_int.h"

static char dir[256];
static char uri[600];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/outbox-deprecated-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(uri, sizeof uri, "sqlite://%s/t.db", dir);
}

static void teardown(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

static outbox_store_t *open_store(uint32_t flags)
{
    outbox_store_options_t o = {.struct_size = sizeof o, .flags = flags};
    outbox_store_t *s = NULL;
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_store_open(uri, &o, &s, &d) == OUTBOX_OK, "%s", d.message);
    return s;
}

static int count_route(void *ctx, const char *route, const outbox_stats_t *st)
{
    (void)route;
    *(uint64_t *)ctx += st->dead;
    return 0;
}

static int count_row(void *ctx, const outbox_row_t *row)
{
    (void)row;
    ++*(int *)ctx;
    return 0;
}

START_TEST(old_names_do_the_new_work)
{
    outbox_schema_opts_t so = {.struct_size = sizeof so, .flags = OUTBOX_SCHEMA_CHECKPOINT};
    outbox_store_t *s = open_store(OUTBOX_OPEN_SCHEMA_ONLY);
    ck_assert_msg(outbox_schema_apply(s, &so) == OUTBOX_OK, "%s", outbox_store_message(s));
    size_t problems = 1;
    ck_assert_int_eq(outbox_schema_check(s, &so, NULL, NULL, &problems), OUTBOX_OK);
    ck_assert_uint_eq(problems, 0);
    outbox_store_close(s);

    s = open_store(0);
    outbox_event_t e[2] = {{.event_type = "t", .payload = "{}", .ordering_key = "k"},
                           {.event_type = "t", .payload = "{}", .ordering_key = "k"}};
    size_t staged = 0;
    ck_assert_int_eq(outbox_begin(s), OUTBOX_OK);
    ck_assert_int_eq(outbox_stage(s, NULL, "r", e, 1, &staged), OUTBOX_OK);
    ck_assert_int_eq(outbox_rollback(s), OUTBOX_OK);
    ck_assert_int_eq(outbox_begin(s), OUTBOX_OK);
    ck_assert_int_eq(outbox_stage(s, NULL, "r", e, 2, &staged), OUTBOX_OK);
    ck_assert_int_eq(outbox_commit(s), OUTBOX_OK);
    outbox_stats_t st;
    ck_assert_int_eq(outbox_stats(s, "r", &st), OUTBOX_OK);
    ck_assert_uint_eq(st.pending, 2); /* the rolled-back one is not there */

    outbox_claim_req_t req = {.struct_size = sizeof req, .route = "r", .limit = 10,
                              .lease_us = 30000000};
    const outbox_row_t *rows = NULL;
    size_t n = 0;
    outbox_fence_t fence;
    ck_assert_int_eq(outbox_claim(s, &req, &rows, &n, &fence), OUTBOX_OK);
    ck_assert_uint_eq(n, 2);
    outbox_settle_item_t items[2] = {{.id = rows[0].id, .kind = OUTBOX_SETTLE_PUBLISHED},
                                     {.id = rows[1].id, .kind = OUTBOX_SETTLE_DEAD, .error = "x"}};
    size_t applied = 0;
    ck_assert_int_eq(outbox_settle(s, &fence, items, 2, &applied), OUTBOX_OK);
    ck_assert_uint_eq(applied, 2);

    uint64_t dead = 0;
    ck_assert_int_eq(outbox_routes(s, count_route, &dead), OUTBOX_OK);
    ck_assert_uint_eq(dead, 1);
    int listed = 0;
    ck_assert_int_eq(outbox_dead_list(s, "r", NULL, 10, count_row, &listed, NULL), OUTBOX_OK);
    ck_assert_int_eq(listed, 1);
    uint64_t count = 0;
    ck_assert_int_eq(outbox_replay(s, "r", NULL, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 1);
    ck_assert_int_eq(outbox_purge(s, "r", INT64_MAX, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 1);

    ck_assert_int_eq(outbox_checkpoint_advance(s, NULL, "node-a", 42), OUTBOX_OK);
    int64_t hlc = 0;
    ck_assert_int_eq(outbox_checkpoint_recover(s, &hlc), OUTBOX_OK);
    ck_assert_int_eq(hlc, 42);
    ck_assert_int_eq(outbox_store_wait(s, "r", 1), OUTBOX_OK);
    outbox_store_close(s);

    /* Forwarded with the timeout converted: a NULL reader is refused the
     * same way by both. */
    outbox_received_t m;
    ck_assert_int_eq(outbox_sink_reader_next(NULL, 10, &m), OUTBOX_EINVAL);
}
END_TEST

START_TEST(kit_old_names_compile)
{
    const outbox_host_t *host = outbox_host_table();
    outbox_buf_t b;
    outbox_buf_init(&b, host);
    outbox_buf_puts(&b, "x");
    outbox_buf_printf(&b, "%d", 1);
    ck_assert_str_eq(b.data, "x1");
    outbox_buf_free(&b);
    outbox_relname_t rel;
    ck_assert_int_eq(outbox_relname_parse("s.t", &rel), 0);
    ck_assert_str_eq(rel.table, "t");
    ck_assert(outbox_ident_valid("abc", 3));
    ck_assert(outbox_utf8_valid("abc", 3));
    ck_assert(outbox_uri_secret_key("sasl.password"));
    outbox_header_t h = {.name = "id", .value = "e1"};
    outbox_message_t m = {.headers = &h, .n_headers = 1};
    ck_assert_str_eq(outbox_message_header(&m, "id"), "e1");
    char line[16];
    outbox_text_line("a\nb", line, sizeof line);
    ck_assert_str_eq(line, "a b");
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("deprecated");
    TCase *tc = tcase_create("old names");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, old_names_do_the_new_work);
    tcase_add_test(tc, kit_old_names_compile);
    suite_add_tcase(suite, tc);
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
