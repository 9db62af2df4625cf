/* The loader refuses what is not a good driver, with the reason, before
 * any driver code runs; and finds real drivers by name, path and scheme. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "outbox_int.h"

static char path_buf[4096];

static const char *module(const char *name)
{
    const char *dir = getenv("OUTBOX_TEST_MODULES");
    ck_assert_msg(dir != NULL, "OUTBOX_TEST_MODULES is not set");
    snprintf(path_buf, sizeof path_buf, "%s/%s.so", dir, name);
    return path_buf;
}

START_TEST(refuses_plain_shared_object)
{
    const outbox_driver_t *drv = (void *)1;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_load(module("not_a_driver"), &drv, &d), OUTBOX_EABI);
    ck_assert_ptr_null(drv);
    ck_assert_msg(strstr(d.message, "not a liboutbox driver: no outbox_driver_entry symbol"), "%s",
                  d.message);
}
END_TEST

START_TEST(refuses_wrong_abi_with_expected_and_found)
{
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_load(module("wrong_abi"), &drv, &d), OUTBOX_EABI);
    ck_assert_msg(strstr(d.message, "ABI mismatch: expected major 1, got 99.0"), "%s", d.message);
}
END_TEST

START_TEST(refuses_short_descriptor)
{
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_load(module("wrong_size"), &drv, &d), OUTBOX_EABI);
    ck_assert_msg(strstr(d.message, "descriptor too small: expected at least"), "%s", d.message);
    ck_assert_msg(strstr(d.message, "got 8"), "%s", d.message);
}
END_TEST

START_TEST(refuses_missing_required_entry_without_running_init)
{
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_load(module("missing_entry"), &drv, &d), OUTBOX_EABI);
    ck_assert_msg(strstr(d.message, "required store entry claim is missing"), "%s", d.message);
    ck_assert_msg(strstr(d.message, "init must not run") == NULL, "%s", d.message);
}
END_TEST

START_TEST(refuses_file_that_is_not_elf)
{
    char tmpl[] = "/tmp/outbox-loader-XXXXXX.so";
    int fd = mkstemps(tmpl, 3);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "hello\n", 6), 6);
    close(fd);
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    int rc = outbox_driver_load(tmpl, &drv, &d);
    unlink(tmpl);
    ck_assert_int_eq(rc, OUTBOX_EABI);
    ck_assert_msg(strstr(d.message, "cannot load"), "%s", d.message);
}
END_TEST

START_TEST(missing_file_and_unknown_name)
{
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_load("/nonexistent/x.so", &drv, &d), OUTBOX_ENOTFOUND);
    ck_assert_msg(strstr(d.message, "/nonexistent/x.so not found"), "%s", d.message);
    ck_assert_int_eq(outbox_driver_load("nosuchdriver", &drv, &d), OUTBOX_ENOTFOUND);
    ck_assert_msg(strstr(d.message, "no driver named nosuchdriver"), "%s", d.message);
}
END_TEST

START_TEST(finds_sqlite_by_name_scheme_and_path)
{
    const outbox_driver_t *a = NULL, *b = NULL, *c = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_load("sqlite", &a, &d), OUTBOX_OK);
    ck_assert_str_eq(a->name, "sqlite");
    ck_assert_int_eq(a->kind, OUTBOX_DRIVER_STORE);
    ck_assert_int_eq(outbox_loader_for_scheme("sqlite", OUTBOX_DRIVER_STORE, &b, &d), OUTBOX_OK);
    ck_assert_ptr_eq(a, b);
    ck_assert_int_eq(outbox_driver_load("store-sqlite", &c, &d), OUTBOX_OK);
    ck_assert_ptr_eq(a, c);
}
END_TEST

START_TEST(wrong_kind_and_unknown_scheme)
{
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_loader_load("store-sqlite", OUTBOX_DRIVER_SINK, &drv, &d), OUTBOX_EINVAL);
    ck_assert_msg(strstr(d.message, "is a store driver, expected a sink driver"), "%s", d.message);
    ck_assert_int_eq(outbox_loader_for_scheme("gopher", OUTBOX_DRIVER_STORE, &drv, &d),
                     OUTBOX_ENOTFOUND);
    ck_assert_msg(strstr(d.message, "unknown URI scheme \"gopher\""), "%s", d.message);
}
END_TEST

START_TEST(installed_directory_is_skipped_in_tests)
{
    /* Only the build tree's drivers: mongodb has no module there in this build. */
    setenv("OUTBOX_DRIVER_PATH", "/nonexistent", 1);
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_load("sqlite", &drv, &d), OUTBOX_ENOTFOUND);
}
END_TEST

typedef struct seen {
    int good_sqlite, good_file, bad_abi, bad_plain, bad_missing;
} seen_t;

static void on_good(void *ctx, const outbox_driver_info_t *info)
{
    seen_t *s = ctx;
    if (strcmp(info->name, "sqlite") == 0 && strcmp(info->kind, "store") == 0 && info->abi_major == 1)
        s->good_sqlite++;
    if (strcmp(info->name, "file") == 0 && strcmp(info->kind, "sink") == 0)
        s->good_file++;
}

static void on_bad(void *ctx, const char *path, const char *reason)
{
    seen_t *s = ctx;
    if (strstr(path, "wrong_abi") && strstr(reason, "ABI mismatch"))
        s->bad_abi++;
    if (strstr(path, "not_a_driver") && strstr(reason, "not a liboutbox driver"))
        s->bad_plain++;
    if (strstr(path, "missing_entry") && strstr(reason, "claim is missing"))
        s->bad_missing++;
}

START_TEST(list_reports_good_and_bad_modules)
{
    char path[8192];
    snprintf(path, sizeof path, "%s:%s", getenv("OUTBOX_DRIVER_PATH"), getenv("OUTBOX_TEST_MODULES"));
    setenv("OUTBOX_DRIVER_PATH", path, 1);
    seen_t s = {0};
    ck_assert_int_eq(outbox_drivers_list(on_good, on_bad, &s), OUTBOX_OK);
    ck_assert_int_eq(s.good_sqlite, 1);
    ck_assert_int_eq(s.good_file, 1);
    ck_assert_int_eq(s.bad_abi, 1);
    ck_assert_int_eq(s.bad_plain, 1);
    ck_assert_int_eq(s.bad_missing, 1);
}
END_TEST

static int noop_init(const outbox_host_t *h, outbox_diag_t *d)
{
    (void)h, (void)d;
    return OUTBOX_OK;
}

START_TEST(register_checks_like_load)
{
    static const outbox_driver_t bad = {.struct_size = sizeof bad, .abi_major = 7,
                                        .kind = OUTBOX_DRIVER_SINK, .name = "x", .init = noop_init};
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_register(&bad, &d), OUTBOX_EABI);
    ck_assert_msg(strstr(d.message, "expected major 1, got 7.0"), "%s", d.message);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("loader");
    TCase *tc = tcase_create("loader");
    tcase_add_test(tc, refuses_plain_shared_object);
    tcase_add_test(tc, refuses_wrong_abi_with_expected_and_found);
    tcase_add_test(tc, refuses_short_descriptor);
    tcase_add_test(tc, refuses_missing_required_entry_without_running_init);
    tcase_add_test(tc, refuses_file_that_is_not_elf);
    tcase_add_test(tc, missing_file_and_unknown_name);
    tcase_add_test(tc, finds_sqlite_by_name_scheme_and_path);
    tcase_add_test(tc, wrong_kind_and_unknown_scheme);
    tcase_add_test(tc, installed_directory_is_skipped_in_tests);
    tcase_add_test(tc, list_reports_good_and_bad_modules);
    tcase_add_test(tc, register_checks_like_load);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
