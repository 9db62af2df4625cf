/* What the conformance battery does not reach on store-mem10, the ABI 1.0
 * driver: its URI forms and errors, the real relay draining it into the
 * file sink, purge, replay of every dead row, the traceparent column, and
 * an event key held by another handle's open transaction.
 *
 * This program is an application: it links liboutbox and loads the module
 * by path (argv[1]) through the real loader. Each case runs in its own
 * process, so each starts with no mem10 store in memory. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "outbox/outbox.h"

static const char *module;

static outbox_store_t *open_store(const char *uri, const char *relation, uint32_t flags,
                                  outbox_diag_t *d)
{
    outbox_store_options_t o = {
        .struct_size = sizeof o, .relation = relation, .driver = module, .flags = flags};
    outbox_store_t *s = NULL;
    memset(d, 0, sizeof *d);
    return outbox_store_open(uri, &o, &s, d) == OUTBOX_OK ? s : NULL;
}

/* Creates relation outbox in store uri with the schema flags, then opens it. */
static outbox_store_t *fresh(const char *uri, uint32_t schema_flags)
{
    outbox_diag_t d;
    outbox_store_t *s = open_store(uri, NULL, OUTBOX_OPEN_SCHEMA_ONLY, &d);
    ck_assert_msg(s != NULL, "opening %s for schema apply: %s", uri, d.message);
    outbox_schema_opts_t so = {.struct_size = sizeof so, .flags = schema_flags};
    ck_assert_msg(outbox_store_schema_apply(s, &so) == OUTBOX_OK, "%s", outbox_store_message(s));
    outbox_store_close(s);
    s = open_store(uri, NULL, 0, &d);
    ck_assert_msg(s != NULL, "opening %s: %s", uri, d.message);
    return s;
}

static size_t stage(outbox_store_t *s, const char *route, const char *event_id, const char *key,
                    int want_rc)
{
    outbox_event_t e = {
        .event_id = event_id, .event_type = "abi10.test", .payload = "{}", .ordering_key = key};
    size_t n = 99;
    int rc = outbox_store_stage(s, NULL, route, &e, 1, &n);
    ck_assert_msg(rc == want_rc, "staging on %s gave %s, expected %s (%s)", route,
                  outbox_strerror(rc), outbox_strerror(want_rc), outbox_store_message(s));
    return n;
}

static outbox_stats_t stats(outbox_store_t *s, const char *route)
{
    outbox_stats_t st;
    ck_assert_msg(outbox_store_stats(s, route, &st) == OUTBOX_OK, "%s", outbox_store_message(s));
    return st;
}

START_TEST(uri_forms_share_one_store)
{
    outbox_store_t *a = fresh("mem10:shared", 0);
    outbox_diag_t d;
    outbox_store_t *b = open_store("mem10://shared", NULL, 0, &d);
    ck_assert_msg(b != NULL, "mem10://shared does not open what mem10:shared created: %s", d.message);
    ck_assert_uint_eq(stage(a, "r", NULL, NULL, OUTBOX_OK), 1);
    ck_assert_uint_eq(stats(b, "r").pending, 1);
    outbox_store_close(b);
    outbox_store_close(a);

    /* Another name is another store, where the table does not exist. */
    outbox_store_t *c = open_store("mem10:other", NULL, 0, &d);
    ck_assert_msg(c == NULL && d.code == OUTBOX_ESCHEMA && strstr(d.message, "outbox") != NULL,
                  "opening a missing table: %s (%s)", outbox_strerror(d.code), d.message);
    static const char *const bad[] = {"mem10:", "mem10://u:secret@x", "mem10:x?cache=1",
                                      "mem10://x/y", "mem10:a/b"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(open_store(bad[i], NULL, OUTBOX_OPEN_SCHEMA_ONLY, &d) == NULL &&
                          d.code == OUTBOX_EINVAL,
                      "%s was not refused as invalid: %s", bad[i], d.message);
        ck_assert_msg(strstr(d.message, "secret") == NULL, "the password is in \"%s\"", d.message);
    }
}
END_TEST

/* A driver built for ABI 1.0 was promised a single host: a URI listing
 * several (which reach drivers of 1.2 and later) is refused by the host
 * before the driver sees it, with no password shown. */
START_TEST(host_list_refused_for_abi_1_0)
{
    outbox_diag_t d;
    ck_assert(open_store("mem10://u:secret@h1:1,h2:2/x", NULL, OUTBOX_OPEN_SCHEMA_ONLY, &d) == NULL);
    ck_assert_msg(d.code == OUTBOX_EINVAL, "%s: %s", outbox_strerror(d.code), d.message);
    ck_assert_msg(strstr(d.message, "takes one host") != NULL &&
                      strstr(d.message, "ABI 1.0") != NULL,
                  "the refusal does not say why: %s", d.message);
    ck_assert_msg(strstr(d.message, "secret") == NULL, "the password is in \"%s\"", d.message);
}
END_TEST

START_TEST(relay_drains_into_the_file_sink)
{
    outbox_store_t *s = fresh("mem10:relay", 0);
    enum { EVENTS = 120 };
    for (int i = 0; i < EVENTS; i++) {
        char key[8];
        snprintf(key, sizeof key, "k%d", i % 6);
        ck_assert_uint_eq(stage(s, "orders", NULL, i % 4 ? key : NULL, OUTBOX_OK), 1);
    }
    char dir[] = "/tmp/outbox-abi10-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[64], uri[80];
    snprintf(path, sizeof path, "%s/out.jsonl", dir);
    snprintf(uri, sizeof uri, "file://%s", path);
    outbox_diag_t d = {0};
    outbox_sink_t *k = NULL;
    ck_assert_msg(outbox_sink_open(uri, NULL, &k, &d) == OUTBOX_OK, "%s", d.message);
    outbox_relay_config_t cfg;
    outbox_relay_config_init(&cfg);
    cfg.route = "orders";
    cfg.batch = 25;
    cfg.until_idle = 1;
    outbox_relay_t *r = NULL;
    ck_assert_msg(outbox_relay_new(s, k, &cfg, &r, &d) == OUTBOX_OK, "%s", d.message);
    ck_assert_msg(outbox_relay_run(r) == OUTBOX_OK, "%s", outbox_relay_message(r));
    outbox_relay_counters_t c;
    outbox_relay_counters(r, &c);
    ck_assert_msg(c.published == EVENTS, "the relay published %llu of %d",
                  (unsigned long long)c.published, EVENTS);
    outbox_stats_t st = stats(s, "orders");
    ck_assert_msg(st.published == EVENTS && st.pending == 0 && st.processing == 0,
                  "after the relay: %llu published, %llu pending, %llu processing",
                  (unsigned long long)st.published, (unsigned long long)st.pending,
                  (unsigned long long)st.processing);
    outbox_relay_free(r);
    outbox_sink_close(k);

    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    int lines = 0, ch;
    while ((ch = fgetc(f)) != EOF)
        lines += ch == '\n';
    fclose(f);
    unlink(path);
    rmdir(dir);
    ck_assert_int_eq(lines, EVENTS);
    outbox_store_close(s);
}
END_TEST

START_TEST(purge_deletes_old_published_rows)
{
    outbox_store_t *s = fresh("mem10:purge", 0);
    static const char *const ids[] = {"00000000-0000-7000-8000-000000000001",
                                      "00000000-0000-7000-8000-000000000002",
                                      "00000000-0000-7000-8000-000000000003"};
    for (int i = 0; i < 3; i++)
        stage(s, "r", ids[i], NULL, OUTBOX_OK);
    outbox_claim_req_t req = {.struct_size = sizeof req, .route = "r", .limit = 10,
                              .lease_us = 60000000};
    const outbox_row_t *rows = NULL;
    size_t n = 0;
    outbox_fence_t fence;
    ck_assert_int_eq(outbox_store_claim(s, &req, &rows, &n, &fence), OUTBOX_OK);
    ck_assert_uint_eq(n, 3);
    outbox_settle_item_t items[3] = {{.id = rows[0].id, .kind = OUTBOX_SETTLE_PUBLISHED},
                                     {.id = rows[1].id, .kind = OUTBOX_SETTLE_PUBLISHED},
                                     {.id = rows[2].id, .kind = OUTBOX_SETTLE_RELEASE}};
    size_t applied = 0;
    ck_assert_int_eq(outbox_store_settle(s, &fence, items, 3, &applied), OUTBOX_OK);

    uint64_t count = 99;
    ck_assert_int_eq(outbox_store_purge(s, "r", 1, &count), OUTBOX_OK); /* before anything published */
    ck_assert_uint_eq(count, 0);
    ck_assert_int_eq(outbox_store_purge(s, "other", INT64_MAX, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 0);
    ck_assert_int_eq(outbox_store_purge(s, NULL, INT64_MAX, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 2);
    outbox_stats_t st = stats(s, NULL);
    ck_assert_msg(st.published == 0 && st.pending == 1 && st.oldest_pending_created_at > 0,
                  "after purge: %llu published, %llu pending",
                  (unsigned long long)st.published, (unsigned long long)st.pending);
    /* The pending row is still there to claim, its key still taken; the
     * purged ones are gone with their keys. */
    ck_assert_int_eq(outbox_store_claim(s, &req, &rows, &n, &fence), OUTBOX_OK);
    ck_assert_msg(n == 1 && strcmp(rows[0].event_id, ids[2]) == 0, "claimed %zu rows after purge", n);
    ck_assert_uint_eq(stage(s, "r", ids[2], NULL, OUTBOX_OK), 0);
    ck_assert_uint_eq(stage(s, "r", ids[0], NULL, OUTBOX_OK), 1);
    outbox_store_close(s);
}
END_TEST

START_TEST(replay_all_and_traceparent)
{
    outbox_store_t *s = fresh("mem10:replay", OUTBOX_SCHEMA_TRACEPARENT);
    ck_assert(outbox_store_capabilities(s) & OUTBOX_STORE_CAP_TRACEPARENT);
    static const char tp[] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    outbox_event_t ev[2] = {{.event_type = "t", .payload = "[1]", .traceparent = tp},
                            {.event_type = "t", .payload = "[2]"}};
    size_t n = 0;
    ck_assert_int_eq(outbox_store_stage(s, NULL, "a", &ev[0], 1, &n), OUTBOX_OK);
    ck_assert_int_eq(outbox_store_stage(s, NULL, "b", &ev[1], 1, &n), OUTBOX_OK);
    const char *routes[] = {"a", "b"};
    for (int i = 0; i < 2; i++) {
        outbox_claim_req_t req = {.struct_size = sizeof req, .route = routes[i], .limit = 10,
                                  .lease_us = 60000000};
        const outbox_row_t *rows = NULL;
        outbox_fence_t fence;
        ck_assert_int_eq(outbox_store_claim(s, &req, &rows, &n, &fence), OUTBOX_OK);
        ck_assert_uint_eq(n, 1);
        ck_assert_msg(i == 0 ? rows[0].traceparent && strcmp(rows[0].traceparent, tp) == 0
                             : rows[0].traceparent == NULL,
                      "route %s: traceparent %s", routes[i],
                      rows[0].traceparent ? rows[0].traceparent : "(null)");
        ck_assert_msg(strncmp(rows[0].payload, i ? "[2]" : "[1]", 3) == 0 && rows[0].payload_len == 3,
                      "payload %.*s", (int)rows[0].payload_len, rows[0].payload);
        outbox_settle_item_t it = {.id = rows[0].id, .kind = OUTBOX_SETTLE_DEAD, .error = "no"};
        ck_assert_int_eq(outbox_store_settle(s, &fence, &it, 1, &n), OUTBOX_OK);
    }
    ck_assert_uint_eq(stats(s, NULL).dead, 2);
    uint64_t count = 0;
    ck_assert_int_eq(outbox_store_replay(s, NULL, NULL, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 2);
    ck_assert_uint_eq(stats(s, NULL).pending, 2);
    outbox_store_close(s);
}
END_TEST

START_TEST(open_transaction_holds_its_event_keys)
{
    outbox_store_t *a = fresh("mem10:tx", 0);
    outbox_diag_t d;
    outbox_store_t *b = open_store("mem10:tx", NULL, 0, &d);
    ck_assert_ptr_nonnull(b);
    static const char id[] = "00000000-0000-7000-8000-0000000000aa";
    ck_assert_int_eq(outbox_store_begin(a), OUTBOX_OK);
    ck_assert_uint_eq(stage(a, "r", id, NULL, OUTBOX_OK), 1);
    ck_assert_uint_eq(stage(a, "r", id, NULL, OUTBOX_OK), 0); /* its own duplicate */
    /* B may neither skip it (A may roll back) nor insert it (A may commit). */
    ck_assert_uint_eq(stage(b, "r", id, NULL, OUTBOX_ETRANSIENT), 0);
    ck_assert_uint_eq(stats(b, "r").pending, 0);
    outbox_claim_req_t req = {.struct_size = sizeof req, .route = "r", .limit = 1,
                              .lease_us = 1000000};
    const outbox_row_t *rows = NULL;
    size_t n = 0;
    outbox_fence_t fence;
    ck_assert_int_eq(outbox_store_claim(a, &req, &rows, &n, &fence), OUTBOX_EINVAL); /* not in a tx */
    ck_assert_int_eq(outbox_store_rollback(a), OUTBOX_OK);
    ck_assert_uint_eq(stage(b, "r", id, NULL, OUTBOX_OK), 1);

    ck_assert_int_eq(outbox_store_begin(a), OUTBOX_OK);
    ck_assert_uint_eq(stage(a, "r", NULL, NULL, OUTBOX_OK), 1);
    ck_assert_int_eq(outbox_store_commit(a), OUTBOX_OK);
    ck_assert_uint_eq(stats(b, "r").pending, 2);
    /* Closing with a transaction open rolls it back. */
    ck_assert_int_eq(outbox_store_begin(b), OUTBOX_OK);
    ck_assert_uint_eq(stage(b, "r", NULL, NULL, OUTBOX_OK), 1);
    outbox_store_close(b);
    ck_assert_uint_eq(stats(a, "r").pending, 2);
    outbox_store_close(a);
}
END_TEST

/* A 1.0 store never said it writes a staged row's available_at: a
 * delayed event is refused rather than published at once. */
START_TEST(delayed_staging_refused_for_abi_1_0)
{
    outbox_store_t *s = fresh("mem10:delay", 0);
    outbox_event_t e = {.event_type = "abi10.test", .payload = "{}"};
    outbox_stage_options_t later = {.struct_size = sizeof later, .delay_us = 60000000};
    size_t n = 99;
    ck_assert_int_eq(outbox_store_stage_with(s, NULL, "r", &e, 1, &later, &n), OUTBOX_ENOTSUP);
    ck_assert_uint_eq(n, 0);
    ck_assert_msg(strstr(outbox_store_message(s), "does not support delayed events"), "%s",
                  outbox_store_message(s));
    later = (outbox_stage_options_t){.struct_size = sizeof later, .not_before = 1};
    ck_assert_int_eq(outbox_store_stage_with(s, NULL, "r", &e, 1, &later, &n), OUTBOX_ENOTSUP);
    ck_assert_uint_eq(stats(s, "r").pending, 0);
    /* Options that delay nothing are staging as before. */
    later = (outbox_stage_options_t){.struct_size = sizeof later};
    ck_assert_int_eq(outbox_store_stage_with(s, NULL, "r", &e, 1, &later, &n), OUTBOX_OK);
    ck_assert_uint_eq(n, 1);
    outbox_store_close(s);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_STORE_MEM10_MODULE\n", argv[0]);
        return 2;
    }
    module = argv[1];
    Suite *suite = suite_create("mem10");
    TCase *tc = tcase_create("mem10");
    tcase_add_test(tc, uri_forms_share_one_store);
    tcase_add_test(tc, host_list_refused_for_abi_1_0);
    tcase_add_test(tc, relay_drains_into_the_file_sink);
    tcase_add_test(tc, purge_deletes_old_published_rows);
    tcase_add_test(tc, replay_all_and_traceparent);
    tcase_add_test(tc, open_transaction_holds_its_event_keys);
    tcase_add_test(tc, delayed_staging_refused_for_abi_1_0);
    suite_add_tcase(suite, tc);
    SRunner *sr = srunner_create(suite);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
