/* Hybrid logical clock: monotonic across wall-clock steps, merges observed
 * stamps, carries logical overflow into the physical part, and hands out
 * distinct increasing stamps under concurrency. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "outbox_int.h"

typedef struct fake_clock {
    int64_t ms;
} fake_clock_t;

static int64_t fake_wall_ms(void *ctx)
{
    return ((fake_clock_t *)ctx)->ms;
}

START_TEST(test_now_follows_wall_clock)
{
    fake_clock_t fc = {1000};
    outbox_hlc_t *c = outbox_hlc_new_with_clock(fake_wall_ms, &fc);
    ck_assert_ptr_nonnull(c);
    int64_t a = outbox_hlc_now(c);
    ck_assert_int_eq(OUTBOX_HLC_PHYSICAL_MS(a), 1000);
    ck_assert_int_eq(OUTBOX_HLC_LOGICAL(a), 0);
    int64_t b = outbox_hlc_now(c);
    ck_assert_int_eq(OUTBOX_HLC_PHYSICAL_MS(b), 1000);
    ck_assert_int_eq(OUTBOX_HLC_LOGICAL(b), 1);
    fc.ms = 1005;
    int64_t e = outbox_hlc_now(c);
    ck_assert_int_eq(OUTBOX_HLC_PHYSICAL_MS(e), 1005);
    ck_assert_int_eq(OUTBOX_HLC_LOGICAL(e), 0);
    outbox_hlc_free(c);
}
END_TEST

START_TEST(test_monotonic_when_wall_clock_steps_back)
{
    fake_clock_t fc = {5000000};
    outbox_hlc_t *c = outbox_hlc_new_with_clock(fake_wall_ms, &fc);
    int64_t prev = outbox_hlc_now(c);
    fc.ms = 4000000; /* NTP stepped the clock back ~17 minutes */
    for (int i = 0; i < 1000; i++) {
        int64_t s = outbox_hlc_now(c);
        ck_assert_int_gt(s, prev);
        ck_assert_int_eq(OUTBOX_HLC_PHYSICAL_MS(s), 5000000);
        prev = s;
    }
    fc.ms = 5000001;
    int64_t s = outbox_hlc_now(c);
    ck_assert_int_gt(s, prev);
    ck_assert_int_eq(OUTBOX_HLC_PHYSICAL_MS(s), 5000001);
    ck_assert_int_eq(OUTBOX_HLC_LOGICAL(s), 0);
    outbox_hlc_free(c);
}
END_TEST

START_TEST(test_observe_future_stamp)
{
    fake_clock_t fc = {1000};
    outbox_hlc_t *c = outbox_hlc_new_with_clock(fake_wall_ms, &fc);
    int64_t local = outbox_hlc_now(c);
    int64_t remote = (INT64_C(9000) << 16) | 42; /* a peer 8 s ahead */
    outbox_hlc_observe(c, remote);
    int64_t s = outbox_hlc_now(c);
    ck_assert_int_gt(s, remote);
    ck_assert_int_gt(s, local);
    ck_assert_int_eq(OUTBOX_HLC_PHYSICAL_MS(s), 9000);
    ck_assert_int_eq(OUTBOX_HLC_LOGICAL(s), 43);
    /* The wall clock catching up takes over again. */
    fc.ms = 9001;
    s = outbox_hlc_now(c);
    ck_assert_int_eq(OUTBOX_HLC_PHYSICAL_MS(s), 9001);
    ck_assert_int_eq(OUTBOX_HLC_LOGICAL(s), 0);
    outbox_hlc_free(c);
}
END_TEST

START_TEST(test_observe_past_stamp_is_harmless)
{
    fake_clock_t fc = {1000};
    outbox_hlc_t *c = outbox_hlc_new_with_clock(fake_wall_ms, &fc);
    int64_t a = outbox_hlc_now(c);
    outbox_hlc_observe(c, INT64_C(10) << 16);
    outbox_hlc_observe(c, -1);
    outbox_hlc_observe(c, a);
    int64_t b = outbox_hlc_now(c);
    ck_assert_int_eq(b, a + 1);
    outbox_hlc_free(c);
}
END_TEST

START_TEST(test_logical_overflow_advances_physical)
{
    fake_clock_t fc = {777};
    outbox_hlc_t *c = outbox_hlc_new_with_clock(fake_wall_ms, &fc);
    int64_t s = 0;
    for (int i = 0; i <= 0xffff; i++)
        s = outbox_hlc_now(c);
    ck_assert_int_eq(OUTBOX_HLC_PHYSICAL_MS(s), 777);
    ck_assert_int_eq(OUTBOX_HLC_LOGICAL(s), 0xffff);
    int64_t next = outbox_hlc_now(c);
    ck_assert_int_gt(next, s);
    ck_assert_int_eq(OUTBOX_HLC_PHYSICAL_MS(next), 778);
    ck_assert_int_eq(OUTBOX_HLC_LOGICAL(next), 0);

    /* The same carry when the overflowing stamp came from a peer. */
    outbox_hlc_observe(c, (INT64_C(2000) << 16) | 0xffff);
    next = outbox_hlc_now(c);
    ck_assert_int_eq(OUTBOX_HLC_PHYSICAL_MS(next), 2001);
    ck_assert_int_eq(OUTBOX_HLC_LOGICAL(next), 0);
    outbox_hlc_free(c);
}
END_TEST

START_TEST(test_saturates_instead_of_wrapping)
{
    fake_clock_t fc = {1};
    outbox_hlc_t *c = outbox_hlc_new_with_clock(fake_wall_ms, &fc);
    outbox_hlc_observe(c, INT64_MAX);
    ck_assert_int_eq(outbox_hlc_now(c), INT64_MAX);
    ck_assert_int_eq(outbox_hlc_now(c), INT64_MAX);
    outbox_hlc_free(c);

    /* A wall clock before 1970 or absurdly far ahead stays in range. */
    fc.ms = -5;
    c = outbox_hlc_new_with_clock(fake_wall_ms, &fc);
    ck_assert_int_ge(outbox_hlc_now(c), 0);
    fc.ms = INT64_MAX;
    ck_assert_int_gt(outbox_hlc_now(c), 0);
    outbox_hlc_free(c);
}
END_TEST

static int64_t wall_ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

START_TEST(test_real_clock_is_close_to_wall_time)
{
    outbox_hlc_t *c = outbox_hlc_new();
    ck_assert_ptr_nonnull(c);
    int64_t before = wall_ms_now();
    int64_t s = outbox_hlc_now(c);
    int64_t after = wall_ms_now();
    ck_assert_int_ge(OUTBOX_HLC_PHYSICAL_MS(s), before);
    ck_assert_int_le(OUTBOX_HLC_PHYSICAL_MS(s), after);
    outbox_hlc_free(c);
}
END_TEST

START_TEST(test_default_is_one_instance)
{
    outbox_hlc_t *a = outbox_hlc_default();
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_eq(a, outbox_hlc_default());
    int64_t s1 = outbox_hlc_now(a);
    outbox_hlc_free(a); /* must be a no-op for the shared instance */
    int64_t s2 = outbox_hlc_now(outbox_hlc_default());
    ck_assert_int_gt(s2, s1);
}
END_TEST

#define THREADS 4
#define PER_THREAD 100000

typedef struct worker {
    outbox_hlc_t *clock;
    int64_t *stamps;
} worker_t;

static void *run_worker(void *arg)
{
    worker_t *w = arg;
    for (int i = 0; i < PER_THREAD; i++)
        w->stamps[i] = outbox_hlc_now(w->clock);
    return NULL;
}

static int compare_stamps(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void check_concurrent(outbox_hlc_t *clock)
{
    int64_t *all = malloc(sizeof(int64_t) * THREADS * PER_THREAD);
    ck_assert_ptr_nonnull(all);
    pthread_t tids[THREADS];
    worker_t workers[THREADS];
    for (int t = 0; t < THREADS; t++) {
        workers[t] = (worker_t){clock, all + (size_t)t * PER_THREAD};
        ck_assert_int_eq(pthread_create(&tids[t], NULL, run_worker, &workers[t]), 0);
    }
    for (int t = 0; t < THREADS; t++)
        ck_assert_int_eq(pthread_join(tids[t], NULL), 0);

    for (int t = 0; t < THREADS; t++)
        for (int i = 1; i < PER_THREAD; i++)
            ck_assert_int_gt(workers[t].stamps[i], workers[t].stamps[i - 1]);

    qsort(all, (size_t)THREADS * PER_THREAD, sizeof(int64_t), compare_stamps);
    for (size_t i = 1; i < (size_t)THREADS * PER_THREAD; i++)
        ck_assert_int_ne(all[i], all[i - 1]);
    free(all);
}

START_TEST(test_threads_get_distinct_increasing_stamps)
{
    outbox_hlc_t *c = outbox_hlc_new();
    check_concurrent(c);
    outbox_hlc_free(c);
}
END_TEST

START_TEST(test_threads_with_a_frozen_clock)
{
    /* A clock that never moves forces every stamp through the logical
     * counter and its carry: the contended path. */
    static fake_clock_t frozen = {123456};
    outbox_hlc_t *c = outbox_hlc_new_with_clock(fake_wall_ms, &frozen);
    check_concurrent(c);
    outbox_hlc_free(c);
}
END_TEST

/* time.c lives beside the clock: RFC 3339 rendering of microsecond instants. */
static void assert_rfc3339(int64_t us, const char *want)
{
    char buf[40];
    memset(buf, 'x', sizeof buf);
    outbox_format_rfc3339(us, buf);
    ck_assert_str_eq(buf, want);
}

START_TEST(test_rfc3339)
{
    assert_rfc3339(0, "1970-01-01T00:00:00.000000Z");
    assert_rfc3339(1795847713123456, "2026-11-28T06:35:13.123456Z");
    assert_rfc3339(951782400000001, "2000-02-29T00:00:00.000001Z");
    assert_rfc3339(-1, "1969-12-31T23:59:59.999999Z");
    assert_rfc3339(-1000000, "1969-12-31T23:59:59.000000Z");
    assert_rfc3339(4107542399999999, "2100-02-28T23:59:59.999999Z"); /* 2100 is no leap year */
    assert_rfc3339(4107542400000000, "2100-03-01T00:00:00.000000Z");
    assert_rfc3339(253402300799999999, "9999-12-31T23:59:59.999999Z");
    assert_rfc3339(-62135596800000000, "0001-01-01T00:00:00.000000Z");
    /* Every day of four centuries agrees with gmtime_r. */
    for (int64_t d = -73000; d < 73000; d += 1) {
        int64_t s = d * 86400 + (d % 86400 + 86400) % 86400;
        time_t t = (time_t)s;
        struct tm tm;
        ck_assert_ptr_nonnull(gmtime_r(&t, &tm));
        char want[96];
        snprintf(want, sizeof want, "%04d-%02d-%02dT%02d:%02d:%02d.000007Z", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
        assert_rfc3339(s * 1000000 + 7, want);
    }
    /* Extremes neither crash nor overrun the buffer. */
    char buf[40];
    outbox_format_rfc3339(INT64_MAX, buf);
    ck_assert_uint_lt(strlen(buf), sizeof buf);
    outbox_format_rfc3339(INT64_MIN, buf);
    ck_assert_uint_lt(strlen(buf), sizeof buf);
}
END_TEST

static Suite *hlc_suite(void)
{
    Suite *s = suite_create("hlc");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_now_follows_wall_clock);
    tcase_add_test(tc, test_monotonic_when_wall_clock_steps_back);
    tcase_add_test(tc, test_observe_future_stamp);
    tcase_add_test(tc, test_observe_past_stamp_is_harmless);
    tcase_add_test(tc, test_logical_overflow_advances_physical);
    tcase_add_test(tc, test_saturates_instead_of_wrapping);
    tcase_add_test(tc, test_real_clock_is_close_to_wall_time);
    tcase_add_test(tc, test_default_is_one_instance);
    tcase_add_test(tc, test_threads_get_distinct_increasing_stamps);
    tcase_add_test(tc, test_threads_with_a_frozen_clock);
    suite_add_tcase(s, tc);

    tc = tcase_create("time");
    tcase_add_test(tc, test_rfc3339);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(hlc_suite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
