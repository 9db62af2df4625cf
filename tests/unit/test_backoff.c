/* Retry backoff: exponential ceiling with a cap, full jitter under it. */
#include <check.h>

#include "outbox_int.h"

#define SECOND INT64_C(1000000)
#define MINUTE (60 * SECOND)

START_TEST(test_ceiling_doubles_then_caps)
{
    ck_assert_int_eq(outbox_backoff_ceiling_us(SECOND, 5 * MINUTE, 1), SECOND);
    ck_assert_int_eq(outbox_backoff_ceiling_us(SECOND, 5 * MINUTE, 2), 2 * SECOND);
    ck_assert_int_eq(outbox_backoff_ceiling_us(SECOND, 5 * MINUTE, 3), 4 * SECOND);
    ck_assert_int_eq(outbox_backoff_ceiling_us(SECOND, 5 * MINUTE, 9), 256 * SECOND);
    ck_assert_int_eq(outbox_backoff_ceiling_us(SECOND, 5 * MINUTE, 10), 5 * MINUTE);
    ck_assert_int_eq(outbox_backoff_ceiling_us(SECOND, 5 * MINUTE, 11), 5 * MINUTE);
    /* Exactly at the cap. */
    ck_assert_int_eq(outbox_backoff_ceiling_us(SECOND, 4 * SECOND, 3), 4 * SECOND);
    /* A base above the cap is capped from the first attempt. */
    ck_assert_int_eq(outbox_backoff_ceiling_us(10 * SECOND, SECOND, 1), SECOND);
}
END_TEST

START_TEST(test_attempt_below_one_is_one)
{
    ck_assert_int_eq(outbox_backoff_ceiling_us(SECOND, MINUTE, 0), SECOND);
    ck_assert_int_eq(outbox_backoff_ceiling_us(SECOND, MINUTE, -7), SECOND);
    ck_assert_int_eq(outbox_backoff_ceiling_us(SECOND, MINUTE, INT32_MIN), SECOND);
}
END_TEST

START_TEST(test_no_overflow)
{
    ck_assert_int_eq(outbox_backoff_ceiling_us(SECOND, 5 * MINUTE, 100), 5 * MINUTE);
    ck_assert_int_eq(outbox_backoff_ceiling_us(SECOND, 5 * MINUTE, 63), 5 * MINUTE);
    ck_assert_int_eq(outbox_backoff_ceiling_us(SECOND, 5 * MINUTE, 64), 5 * MINUTE);
    ck_assert_int_eq(outbox_backoff_ceiling_us(SECOND, 5 * MINUTE, INT32_MAX), 5 * MINUTE);
    ck_assert_int_eq(outbox_backoff_ceiling_us(INT64_MAX / 2, INT64_MAX, 2), INT64_MAX - 1);
    ck_assert_int_eq(outbox_backoff_ceiling_us(INT64_MAX / 2, INT64_MAX, 3), INT64_MAX);
    ck_assert_int_eq(outbox_backoff_ceiling_us(INT64_MAX, INT64_MAX, 100), INT64_MAX);
    ck_assert_int_eq(outbox_backoff_ceiling_us(1, INT64_MAX, 63), INT64_C(1) << 62);
    ck_assert_int_eq(outbox_backoff_ceiling_us(1, INT64_MAX, 64), INT64_MAX);
    ck_assert_int_eq(outbox_backoff_ceiling_us(3, INT64_MAX, 63), INT64_MAX);
    int64_t v = outbox_backoff_us(INT64_MAX, INT64_MAX, 100);
    ck_assert_int_ge(v, 0);
}
END_TEST

START_TEST(test_zero_and_negative_inputs)
{
    ck_assert_int_eq(outbox_backoff_ceiling_us(0, MINUTE, 5), 0);
    ck_assert_int_eq(outbox_backoff_us(0, MINUTE, 5), 0);
    ck_assert_int_eq(outbox_backoff_us(0, MINUTE, 1000), 0);
    ck_assert_int_eq(outbox_backoff_ceiling_us(-SECOND, MINUTE, 5), 0);
    ck_assert_int_eq(outbox_backoff_ceiling_us(SECOND, 0, 5), 0);
    ck_assert_int_eq(outbox_backoff_us(SECOND, 0, 5), 0);
}
END_TEST

START_TEST(test_samples_within_ceiling)
{
    for (int attempt = 1; attempt <= 20; attempt++) {
        int64_t ceiling = outbox_backoff_ceiling_us(SECOND, 5 * MINUTE, attempt);
        for (int i = 0; i < 2000; i++) {
            int64_t v = outbox_backoff_us(SECOND, 5 * MINUTE, attempt);
            ck_assert_int_ge(v, 0);
            ck_assert_int_le(v, ceiling);
        }
    }
}
END_TEST

START_TEST(test_samples_vary_and_cover_the_range)
{
    /* A ceiling of 3 has four outcomes; all should appear, and nothing else. */
    int seen[4] = {0};
    for (int i = 0; i < 4000; i++) {
        int64_t v = outbox_backoff_us(3, 100, 1);
        ck_assert(v >= 0 && v <= 3);
        seen[v]++;
    }
    for (int i = 0; i < 4; i++)
        ck_assert_msg(seen[i] > 500, "value %d drawn %d times of 4000", i, seen[i]);

    /* Large ceilings: draws differ and their mean is near ceiling / 2. */
    int64_t first = outbox_backoff_us(SECOND, MINUTE, 5);
    int distinct = 0;
    double sum = 0;
    for (int i = 0; i < 10000; i++) {
        int64_t v = outbox_backoff_us(SECOND, MINUTE, 5); /* ceiling 16 s */
        distinct += v != first;
        sum += (double)v;
    }
    ck_assert_int_gt(distinct, 9990);
    double mean = sum / 10000;
    ck_assert_msg(mean > 7.0 * SECOND && mean < 9.0 * SECOND, "mean %f", mean);
}
END_TEST

static Suite *backoff_suite(void)
{
    Suite *s = suite_create("backoff");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_ceiling_doubles_then_caps);
    tcase_add_test(tc, test_attempt_below_one_is_one);
    tcase_add_test(tc, test_no_overflow);
    tcase_add_test(tc, test_zero_and_negative_inputs);
    tcase_add_test(tc, test_samples_within_ceiling);
    tcase_add_test(tc, test_samples_vary_and_cover_the_range);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(backoff_suite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
