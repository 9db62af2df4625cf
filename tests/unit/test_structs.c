/* Versioned application structs with a smaller struct_size, as a program
 * built against older headers passes them: members past the end read as
 * their defaults, nothing is read past it. Each struct below has poison
 * in the members its struct_size does not cover; reading any of them
 * would change the outcome. The exactly-sized copies let ASan catch a
 * read past the end as well. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_int.h"
#include "test_sink.h"
#include "test_store.h"

static char dir[256];
static char uri[600];

static void setup(void)
{
    test_store_make("structs", dir, uri, 0);
    test_sink_register();
    test_sink_reset(NULL);
}

static void teardown(void)
{
    test_store_remove(dir);
}

/* A heap copy of exactly size bytes of *full, so that ASan reports any
 * read past the caller's struct. */
static void *exact_copy(const void *full, size_t size)
{
    void *p = malloc(size);
    ck_assert_ptr_nonnull(p);
    memcpy(p, full, size);
    return p;
}

/* The destination and source of the last message the test sink saw. */
static char seen_destination[64];
static char seen_source[64];
static int remember(const outbox_message_t *m, int call)
{
    (void)call;
    snprintf(seen_destination, sizeof seen_destination, "%s", m->destination);
    for (size_t i = 0; i < m->n_headers; i++)
        if (strcmp(m->headers[i].name, "source") == 0)
            snprintf(seen_source, sizeof seen_source, "%s", m->headers[i].value);
    return OUTBOX_PUBLISH_OK;
}

#define UPTO(T, m) (offsetof(T, m) + sizeof(((T *)0)->m))

START_TEST(store_options_only_struct_size)
{
    /* Every member is poison: a driver that does not exist, a relation
     * that is not there, flags that no open accepts. */
    outbox_store_options_t full = {.struct_size = sizeof(uint32_t), .relation = "missing_table",
                                   .checkpoint_relation = "missing_ckpt",
                                   .driver = "no-such-driver", .flags = 0xffffffffu};
    outbox_store_options_t *o = exact_copy(&full, sizeof(uint32_t));
    outbox_store_t *s = NULL;
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_store_open(uri, o, &s, &d) == OUTBOX_OK, "%s", d.message);
    ck_assert_str_eq(outbox_store_driver(s)->name, "sqlite");
    outbox_store_close(s);
    free(o);
}
END_TEST

START_TEST(store_options_up_to_relation)
{
    outbox_store_options_t full = {.relation = "missing_table", .driver = "no-such-driver"};
    full.struct_size = UPTO(outbox_store_options_t, relation);
    outbox_store_options_t *o = exact_copy(&full, full.struct_size);
    outbox_store_t *s = NULL;
    outbox_diag_t d = {0};
    /* The relation is read (the open fails on it), the driver is not. */
    ck_assert_int_eq(outbox_store_open(uri, o, &s, &d), OUTBOX_EMISSING);
    ck_assert_ptr_nonnull(strstr(d.message, "missing_table"));
    ck_assert_ptr_null(strstr(d.message, "no-such-driver"));
    ck_assert_ptr_null(s);
    free(o);
}
END_TEST

START_TEST(store_options_struct_size_zero)
{
    outbox_store_options_t o = {.struct_size = 0};
    outbox_store_t *s = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_store_open(uri, &o, &s, &d), OUTBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(d.message, "struct_size"));
}
END_TEST

START_TEST(route_config_up_to_route)
{
    outbox_store_t *s = NULL;
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_store_open(uri, NULL, &s, &d) == OUTBOX_OK, "%s", d.message);
    /* hlc = 1 on a table without the hlc column would be refused. */
    outbox_route_config_t full = {.route = "r", .require_transaction = 1, .hlc = 1,
                                  .checkpoint_node_key = "n"};
    full.struct_size = UPTO(outbox_route_config_t, route);
    outbox_route_config_t *c = exact_copy(&full, full.struct_size);
    ck_assert_msg(outbox_store_configure_route(s, c) == OUTBOX_OK, "%s", outbox_store_message(s));
    /* require_transaction was not read either: staging alone works. */
    outbox_event_t e = {.event_type = "t", .payload = "{}"};
    size_t n = 0;
    ck_assert_msg(outbox_store_stage(s, NULL, "r", &e, 1, &n) == OUTBOX_OK, "%s", outbox_store_message(s));
    ck_assert_int_eq(n, 1);
    free(c);
    outbox_store_close(s);
}
END_TEST

START_TEST(schema_opts_only_struct_size)
{
    outbox_store_t *s = NULL;
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_store_open(uri, NULL, &s, &d) == OUTBOX_OK, "%s", d.message);
    outbox_schema_opts_t full = {.struct_size = sizeof(uint32_t), .relation = "not a name!",
                                 .flags = 0xffffffffu};
    outbox_schema_opts_t *o = exact_copy(&full, sizeof(uint32_t));
    size_t problems = 99;
    ck_assert_msg(outbox_store_schema_check(s, o, NULL, NULL, &problems) == OUTBOX_OK, "%s",
                  outbox_store_message(s));
    ck_assert_uint_eq(problems, 0);
    char *ddl = NULL;
    ck_assert_msg(outbox_schema_ddl("sqlite", o, &ddl, &d) == OUTBOX_OK, "%s", d.message);
    ck_assert_ptr_nonnull(strstr(ddl, "\"outbox\""));
    free(ddl);
    free(o);
    outbox_store_close(s);
}
END_TEST

START_TEST(sink_options_driver_by_name)
{
    /* The URI's scheme names no driver; the options' driver does. */
    outbox_sink_t *k = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_sink_open("nosuchscheme:", NULL, &k, &d), OUTBOX_ENOTFOUND);
    outbox_sink_options_t o = {.struct_size = sizeof o, .driver = "test"};
    ck_assert_msg(outbox_sink_open("nosuchscheme:", &o, &k, &d) == OUTBOX_OK, "%s", d.message);
    ck_assert_str_eq(outbox_sink_driver(k)->name, "test");
    outbox_sink_close(k);
    /* Only struct_size: the driver is chosen by the scheme. */
    o.struct_size = UPTO(outbox_sink_options_t, struct_size);
    outbox_sink_options_t *only = exact_copy(&o, o.struct_size);
    ck_assert_int_eq(outbox_sink_open("nosuchscheme:", only, &k, &d), OUTBOX_ENOTFOUND);
    ck_assert_msg(outbox_sink_open("test:", only, &k, &d) == OUTBOX_OK, "%s", d.message);
    outbox_sink_close(k);
    free(only);
}
END_TEST

START_TEST(sink_options_bad_struct_size)
{
    outbox_sink_t *k = (outbox_sink_t *)&k;
    outbox_diag_t d = {0};
    outbox_sink_options_t o = {.struct_size = 0, .driver = "test"};
    ck_assert_int_eq(outbox_sink_open("test:", &o, &k, &d), OUTBOX_EINVAL);
    ck_assert_ptr_null(k);
    ck_assert_ptr_nonnull(strstr(d.message, "struct_size 0"));
    /* A caller of 0.1 passing a driver name where the options go: its
     * first bytes read as a struct_size far too large. */
    const char *name = "test";
    ck_assert_int_eq(outbox_sink_open("test:", (const outbox_sink_options_t *)(const void *)name,
                                      &k, &d),
                     OUTBOX_EINVAL);
    ck_assert_ptr_null(k);
    ck_assert_ptr_nonnull(strstr(d.message, "not a driver name"));
}
END_TEST

START_TEST(relay_config_up_to_route)
{
    outbox_store_t *s = NULL;
    outbox_sink_t *k = NULL;
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_store_open(uri, NULL, &s, &d) == OUTBOX_OK, "%s", d.message);
    ck_assert_msg(outbox_sink_open("test:", NULL, &k, &d) == OUTBOX_OK, "%s", d.message);
    /* batch 0 and max_attempts 0 would be refused; until_idle is needed
     * below and so is given in a second, longer struct. */
    outbox_relay_config_t full;
    memset(&full, 0, sizeof full);
    full.route = "r";
    full.struct_size = UPTO(outbox_relay_config_t, route);
    outbox_relay_config_t *c = exact_copy(&full, full.struct_size);
    outbox_relay_t *r = NULL;
    ck_assert_msg(outbox_relay_new(s, k, c, &r, &d) == OUTBOX_OK, "%s", d.message);
    test_sink_reset(remember);
    /* The defaults are in force: one event goes out with the default
     * destination ({route}) and source. */
    outbox_event_t e = {.event_type = "t", .payload = "{}"};
    ck_assert_int_eq(outbox_store_stage(s, NULL, "r", &e, 1, NULL), OUTBOX_OK);
    size_t claimed = 0;
    ck_assert_msg(outbox_relay_step(r, &claimed) == OUTBOX_OK, "%s", outbox_relay_message(r));
    ck_assert_uint_eq(claimed, 1);
    outbox_relay_counters_t cnt;
    outbox_relay_counters(r, &cnt);
    ck_assert_uint_eq(cnt.published, 1);
    ck_assert_str_eq(seen_destination, "r");
    ck_assert_str_eq(seen_source, "/outbox/r");
    outbox_relay_free(r);
    free(c);
    outbox_sink_close(k);
    outbox_store_close(s);
}
END_TEST

START_TEST(relay_config_struct_size_zero)
{
    outbox_store_t *s = NULL;
    outbox_sink_t *k = NULL;
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_store_open(uri, NULL, &s, &d) == OUTBOX_OK, "%s", d.message);
    ck_assert_msg(outbox_sink_open("test:", NULL, &k, &d) == OUTBOX_OK, "%s", d.message);
    outbox_relay_config_t c = {.struct_size = 0, .route = "r"};
    outbox_relay_t *r = NULL;
    ck_assert_int_eq(outbox_relay_new(s, k, &c, &r, &d), OUTBOX_EINVAL);
    ck_assert_ptr_null(r);
    outbox_sink_close(k);
    outbox_store_close(s);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("structs");
    TCase *tc = tcase_create("short struct_size");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, store_options_only_struct_size);
    tcase_add_test(tc, store_options_up_to_relation);
    tcase_add_test(tc, store_options_struct_size_zero);
    tcase_add_test(tc, route_config_up_to_route);
    tcase_add_test(tc, schema_opts_only_struct_size);
    tcase_add_test(tc, sink_options_driver_by_name);
    tcase_add_test(tc, sink_options_bad_struct_size);
    tcase_add_test(tc, relay_config_up_to_route);
    tcase_add_test(tc, relay_config_struct_size_zero);
    suite_add_tcase(suite, tc);
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
