/* The one grammar of URI options and the redactor (ABI 1.4): the kit's
 * wrappers give the same answers through this library's host table and,
 * for a host older than 1.4, through the builtin rules; and they call the
 * host when it has the entries, so a fix made there reaches drivers
 * already built. */
#include <check.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "outbox/kit.h"
#include "outbox_int.h"

/* The two ways a driver gets the rules: from this host, or built in
 * because its host predates them (struct_size of ABI 1.3). */
static outbox_host_t old_host;

static const outbox_host_t *host_of(int i)
{
    if (i == 0)
        return outbox_host_table();
    old_host = *outbox_host_table();
    old_host.struct_size = (uint32_t)offsetof(outbox_host_t, opt_duration);
    return &old_host;
}

/* A URI of a sink with the given query (parsed by the core). */
static outbox_uri_owned_t parsed;
static const outbox_uri_t *uri_of(const char *text)
{
    outbox_uri_free(&parsed);
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_uri_parse(text, &parsed, &d) == OUTBOX_OK, "%s: %s", text, d.message);
    return &parsed.uri;
}

#define MS INT64_C(1000)
#define DAY (INT64_C(86400) * 1000000)

START_TEST(durations)
{
    const outbox_host_t *h = host_of(_i);
    outbox_diag_t d = {0};
    int64_t v = 7;
    ck_assert_int_eq(outbox_kit_opt_duration(h, uri_of("x://h/s?t=500ms"), "X sink", "t", MS, DAY, &v, &d), OUTBOX_OK);
    ck_assert_int_eq(v, 500 * MS);
    ck_assert_int_eq(outbox_kit_opt_duration(h, uri_of("x://h/s?t=1h"), "X sink", "t", MS, DAY, &v, &d), OUTBOX_OK);
    ck_assert_int_eq(v, INT64_C(3600) * 1000000);
    v = 7;
    ck_assert_int_eq(outbox_kit_opt_duration(h, uri_of("x://h/s?other=1"), "X sink", "t", MS, DAY, &v, &d), OUTBOX_OK);
    ck_assert_int_eq(v, 7); /* absent: the default stays */
    static const char *const bad[] = {"30", "ten", "-1s", "0s", "2d", "5ms5", "1.5s", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[80];
        snprintf(text, sizeof text, "x://u:pw123456@h/s?t=%s", bad[i]);
        memset(&d, 0, sizeof d);
        ck_assert_msg(outbox_kit_opt_duration(h, uri_of(text), "X sink", "t", MS, DAY, &v, &d) == OUTBOX_EINVAL,
                      "t=%s was taken", bad[i]);
        ck_assert_int_eq(d.code, OUTBOX_EINVAL);
        char want[80];
        snprintf(want, sizeof want, "t=%s is not a duration from 1ms to 1d", bad[i]);
        ck_assert_msg(strstr(d.message, want) != NULL, "\"%s\" lacks \"%s\"", d.message, want);
        ck_assert_msg(strncmp(d.message, "X sink x://u:***@h/s", 20) == 0, "%s", d.message);
        ck_assert_msg(strstr(d.message, "pw123456") == NULL, "the password shows: %s", d.message);
    }
}
END_TEST

START_TEST(whole_numbers)
{
    const outbox_host_t *h = host_of(_i);
    outbox_diag_t d = {0};
    int64_t v = 0;
    ck_assert_int_eq(outbox_kit_opt_int(h, uri_of("x://h/s?n=512KiB"), "X sink", "n", 1, INT64_C(1) << 40, &v, &d), OUTBOX_OK);
    ck_assert_int_eq(v, 512 * 1024);
    ck_assert_int_eq(outbox_kit_opt_int(h, uri_of("x://h/s?n=2GiB"), "X sink", "n", 1, INT64_C(1) << 40, &v, &d), OUTBOX_OK);
    ck_assert_int_eq(v, INT64_C(2) << 30);
    ck_assert_int_eq(outbox_kit_opt_int(h, uri_of("x://h/s?n=42"), "X sink", "n", 1, 100, &v, &d), OUTBOX_OK);
    ck_assert_int_eq(v, 42);
    static const char *const bad[] = {"101", "0", "-3", "x", "1KB", "99999999999999999999", "1.5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[80];
        snprintf(text, sizeof text, "x://h/s?n=%s", bad[i]);
        ck_assert_msg(outbox_kit_opt_int(h, uri_of(text), "X sink", "n", 1, 100, &v, &d) == OUTBOX_EINVAL,
                      "n=%s was taken", bad[i]);
        ck_assert_msg(strstr(d.message, "is not a whole number from 1 to 100") != NULL, "%s", d.message);
    }
}
END_TEST

START_TEST(booleans)
{
    const outbox_host_t *h = host_of(_i);
    outbox_diag_t d = {0};
    static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        char text[40];
        int b = 0;
        snprintf(text, sizeof text, "x://h/s?b=%s", yes[i]);
        ck_assert_int_eq(outbox_kit_opt_bool(h, uri_of(text), "X sink", "b", &b, &d), OUTBOX_OK);
        ck_assert_int_eq(b, 1);
        snprintf(text, sizeof text, "x://h/s?b=%s", no[i]);
        ck_assert_int_eq(outbox_kit_opt_bool(h, uri_of(text), "X sink", "b", &b, &d), OUTBOX_OK);
        ck_assert_int_eq(b, 0);
    }
    int b = 5;
    ck_assert_int_eq(outbox_kit_opt_bool(h, uri_of("x://h/s?b=maybe"), "X sink", "b", &b, &d), OUTBOX_EINVAL);
    ck_assert_msg(strstr(d.message, "b=maybe is not a boolean") != NULL, "%s", d.message);
    ck_assert_int_eq(b, 5);
}
END_TEST

START_TEST(secrets)
{
    const outbox_host_t *h = host_of(_i);
    outbox_diag_t d = {0};
    const char *v = NULL;
    ck_assert_int_eq(outbox_kit_opt_secret(h, uri_of("x://h/s?token=abc123"), "X sink", "token", &v, &d), OUTBOX_OK);
    ck_assert_str_eq(v, "abc123");
    setenv("OUTBOX_TEST_TOKEN", "fromenv99", 1);
    ck_assert_int_eq(outbox_kit_opt_secret(h, uri_of("x://h/s?token_env=OUTBOX_TEST_TOKEN"), "X sink", "token", &v, &d), OUTBOX_OK);
    ck_assert_str_eq(v, "fromenv99");
    v = NULL;
    ck_assert_int_eq(outbox_kit_opt_secret(h, uri_of("x://h/s"), "X sink", "token", &v, &d), OUTBOX_OK);
    ck_assert_ptr_null(v);
    unsetenv("OUTBOX_TEST_NO_SUCH");
    ck_assert_int_eq(outbox_kit_opt_secret(h, uri_of("x://h/s?token_env=OUTBOX_TEST_NO_SUCH"), "X sink", "token", &v, &d), OUTBOX_EINVAL);
    ck_assert_msg(strstr(d.message, "token_env names environment variable OUTBOX_TEST_NO_SUCH, which is not set or empty") != NULL, "%s", d.message);
    ck_assert_int_eq(outbox_kit_opt_secret(h, uri_of("x://h/s?token=abc123&token_env=OUTBOX_TEST_TOKEN"), "X sink", "token", &v, &d), OUTBOX_EINVAL);
    ck_assert_msg(strstr(d.message, "give token or token_env, not both") != NULL, "%s", d.message);
    ck_assert_msg(strstr(d.message, "abc123") == NULL, "the secret shows: %s", d.message);
    /* A name too long to add _env to is refused, not cut. */
    char longkey[200];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    ck_assert_int_eq(outbox_kit_opt_secret(h, uri_of("x://h/s"), "X sink", longkey, &v, &d), OUTBOX_EINVAL);
    ck_assert_msg(strstr(d.message, "is too long") != NULL, "%s", d.message);
}
END_TEST

START_TEST(redactor_keeps_the_secrets)
{
    const outbox_host_t *h = host_of(_i);
    setenv("OUTBOX_TEST_PW", "envSecret77", 1);
    outbox_redactor_t *r = outbox_kit_redactor_new(
        h, uri_of("x://app:p%40ssw0rd@h/s?token=tok3n99&password_env=OUTBOX_TEST_PW&name=app"));
    ck_assert_ptr_nonnull(r);
    /* The URI is gone once the driver's open returns. */
    outbox_uri_free(&parsed);
    char out[256];
    outbox_kit_redact(h, r, "login app:p@ssw0rd (as typed p%40ssw0rd) token tok3n99 env envSecret77\nname app",
                      out, sizeof out);
    ck_assert_str_eq(out, "login app:*** (as typed ***) token *** env *** name app");
    outbox_kit_redactor_free(h, r);
    outbox_kit_redact(h, NULL, "tok3n99", out, sizeof out);
    ck_assert_msg(strstr(out, "tok3n99") == NULL, "%s", out);
}
END_TEST

/* The host's entry, when it has one, is what answers. */
static int spied;
static int spy_duration(const outbox_uri_t *uri, const char *label, const char *key,
                        int64_t min_us, int64_t max_us, int64_t *out, outbox_diag_t *d)
{
    spied++;
    *out = 1234;
    return OUTBOX_OK;
}

START_TEST(the_host_answers_when_it_can)
{
    outbox_host_t spy = *outbox_host_table();
    spy.opt_duration = spy_duration;
    int64_t v = 0;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_kit_opt_duration(&spy, uri_of("x://h/s?t=5s"), "X sink", "t", MS, DAY, &v, &d), OUTBOX_OK);
    ck_assert_int_eq(spied, 1);
    ck_assert_int_eq(v, 1234);
    spy.struct_size = (uint32_t)offsetof(outbox_host_t, opt_duration);
    ck_assert_int_eq(outbox_kit_opt_duration(&spy, uri_of("x://h/s?t=5s"), "X sink", "t", MS, DAY, &v, &d), OUTBOX_OK);
    ck_assert_int_eq(spied, 1);
    ck_assert_int_eq(v, 5000000);
}
END_TEST

START_TEST(durations_show_in_their_largest_unit)
{
    char b[32];
    outbox_kit_show_duration(DAY, b, sizeof b);
    ck_assert_str_eq(b, "1d");
    outbox_kit_show_duration(1500 * MS, b, sizeof b);
    ck_assert_str_eq(b, "1500ms");
    outbox_kit_show_duration(250, b, sizeof b);
    ck_assert_str_eq(b, "250us");
    outbox_kit_show_duration(0, b, sizeof b);
    ck_assert_str_eq(b, "0us");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("options");
    TCase *tc = tcase_create("grammar");
    /* _i: 0 through this host's table, 1 through the builtin rules. */
    tcase_add_loop_test(tc, durations, 0, 2);
    tcase_add_loop_test(tc, whole_numbers, 0, 2);
    tcase_add_loop_test(tc, booleans, 0, 2);
    tcase_add_loop_test(tc, secrets, 0, 2);
    tcase_add_loop_test(tc, redactor_keeps_the_secrets, 0, 2);
    tcase_add_test(tc, the_host_answers_when_it_can);
    tcase_add_test(tc, durations_show_in_their_largest_unit);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    outbox_uri_free(&parsed);
    return failed == 0 ? 0 : 1;
}
