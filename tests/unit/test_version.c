/* The version is written once, in meson.build: the generated header, the
 * library's answer at run time and every driver built with it agree with
 * the project's version (OUTBOX_TEST_VERSION, from meson). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox/outbox.h"

static const char *project_version(void)
{
    const char *v = getenv("OUTBOX_TEST_VERSION");
    ck_assert_msg(v != NULL && *v, "OUTBOX_TEST_VERSION is not set (meson test sets it)");
    return v;
}

START_TEST(test_header_and_library_agree_with_meson)
{
    ck_assert_str_eq(OUTBOX_VERSION, project_version());
    ck_assert_str_eq(outbox_version(), project_version());
    unsigned major = 0, minor = 0, patch = 0;
    ck_assert_int_eq(sscanf(project_version(), "%u.%u.%u", &major, &minor, &patch), 3);
    ck_assert_uint_eq(outbox_version_number(), major << 16 | minor << 8 | patch);
    ck_assert_uint_eq(OUTBOX_VERSION_NUMBER, outbox_version_number());
    ck_assert_uint_eq(OUTBOX_VERSION_MAJOR, major);
}
END_TEST

static int drivers_seen;

static void check_driver(void *ctx, const outbox_driver_info_t *info)
{
    (void)ctx;
    drivers_seen++;
    ck_assert_msg(strcmp(info->version, project_version()) == 0,
                  "the %s driver built here says it is version %s, the project is %s", info->name,
                  info->version, project_version());
}

START_TEST(test_built_drivers_take_the_version_from_the_build)
{
    ck_assert_int_eq(outbox_drivers_list(check_driver, NULL, NULL), OUTBOX_OK);
    ck_assert_msg(drivers_seen > 0, "no driver on OUTBOX_DRIVER_PATH");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("version");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_header_and_library_agree_with_meson);
    tcase_add_test(tc, test_built_drivers_take_the_version_from_the_build);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
