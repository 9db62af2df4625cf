/* UUIDv7: layout (RFC 9562), canonical text, and the per-process ordering
 * that keeps primary keys growing. */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "outbox_int.h"

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1; /* minted ids are lower case */
}

/* The nibble at position n of the 32 hex digits, skipping dashes. */
static int nibble(const char *u, int n)
{
    int skipped = n >= 20 ? 4 : n >= 16 ? 3 : n >= 12 ? 2 : n >= 8 ? 1 : 0;
    return hex_digit(u[n + skipped]);
}

static int64_t timestamp_ms(const char *u)
{
    int64_t ms = 0;
    for (int i = 0; i < 12; i++)
        ms = ms << 4 | nibble(u, i);
    return ms;
}

static int64_t wall_ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void assert_v7_layout(const char *u)
{
    ck_assert_uint_eq(strlen(u), OUTBOX_UUID_STRLEN);
    ck_assert_int_eq(outbox_uuid_valid(u), 1);
    for (int i = 0; i < 32; i++)
        ck_assert_int_ge(nibble(u, i), 0);
    ck_assert_int_eq(nibble(u, 12), 7);              /* version */
    ck_assert_int_eq(nibble(u, 16) & 0xc, 0x8);      /* variant 0b10 */
    ck_assert(u[8] == '-' && u[13] == '-' && u[18] == '-' && u[23] == '-');
}

START_TEST(test_layout)
{
    char u[OUTBOX_UUID_STRLEN + 1];
    for (int i = 0; i < 1000; i++) {
        ck_assert_int_eq(outbox_uuid_v7(u), OUTBOX_OK);
        assert_v7_layout(u);
    }
}
END_TEST

START_TEST(test_timestamp_is_wall_time)
{
    char u[OUTBOX_UUID_STRLEN + 1];
    int64_t before = wall_ms_now();
    ck_assert_int_eq(outbox_uuid_v7(u), OUTBOX_OK);
    int64_t after = wall_ms_now();
    ck_assert_int_ge(timestamp_ms(u), before);
    ck_assert_int_le(timestamp_ms(u), after);
}
END_TEST

START_TEST(test_strictly_increasing)
{
    enum { N = 10000 };
    char(*ids)[OUTBOX_UUID_STRLEN + 1] = malloc(sizeof *ids * N);
    ck_assert_ptr_nonnull(ids);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(outbox_uuid_v7(ids[i]), OUTBOX_OK);
    for (int i = 1; i < N; i++)
        ck_assert_msg(strcmp(ids[i - 1], ids[i]) < 0, "%s !< %s", ids[i - 1], ids[i]);
    free(ids);
}
END_TEST

START_TEST(test_at_keeps_the_given_ms)
{
    static const int64_t cases[] = {0, 1, 1700000000123, (INT64_C(1) << 48) - 1};
    char u[OUTBOX_UUID_STRLEN + 1];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_int_eq(outbox_uuid_v7_at(cases[i], u), OUTBOX_OK);
        assert_v7_layout(u);
        ck_assert_int_eq(timestamp_ms(u), cases[i]);
    }
    ck_assert_int_eq(outbox_uuid_v7_at(1700000000123, u), OUTBOX_OK);
    ck_assert_msg(strncmp(u, "018bcfe5-687b-7", 15) == 0, "%s", u); /* 0x18bcfe5687b, v7 */
}
END_TEST

START_TEST(test_at_orders_within_one_ms)
{
    /* More ids than the counter's guaranteed headroom: past it, ids keep
     * the requested ms (with random rand_a) instead of borrowing the next. */
    const int64_t ms = 1800000000000;
    char prev[OUTBOX_UUID_STRLEN + 1], u[OUTBOX_UUID_STRLEN + 1];
    ck_assert_int_eq(outbox_uuid_v7_at(ms, prev), OUTBOX_OK);
    for (int i = 0; i < 2047; i++) {
        ck_assert_int_eq(outbox_uuid_v7_at(ms, u), OUTBOX_OK);
        ck_assert_msg(strcmp(prev, u) < 0, "%s !< %s", prev, u);
        strcpy(prev, u);
    }
    for (int i = 0; i < 5000; i++) {
        ck_assert_int_eq(outbox_uuid_v7_at(ms, u), OUTBOX_OK);
        ck_assert_int_eq(timestamp_ms(u), ms);
    }
}
END_TEST

START_TEST(test_at_refuses_out_of_range)
{
    char u[OUTBOX_UUID_STRLEN + 1];
    ck_assert_int_eq(outbox_uuid_v7_at(-1, u), OUTBOX_EINVAL);
    ck_assert_int_eq(outbox_uuid_v7_at(INT64_C(1) << 48, u), OUTBOX_EINVAL);
    ck_assert_int_eq(outbox_uuid_v7(NULL), OUTBOX_EINVAL);
}
END_TEST

START_TEST(test_random_bits_differ)
{
    char a[OUTBOX_UUID_STRLEN + 1], b[OUTBOX_UUID_STRLEN + 1];
    ck_assert_int_eq(outbox_uuid_v7_at(42, a), OUTBOX_OK);
    ck_assert_int_eq(outbox_uuid_v7_at(42, b), OUTBOX_OK);
    /* rand_b (the last 62 bits) is fresh for every id. */
    ck_assert_str_ne(a + 19, b + 19);
}
END_TEST

#define THREADS 4
#define PER_THREAD 20000

static void *mint_many(void *arg)
{
    char(*ids)[OUTBOX_UUID_STRLEN + 1] = arg;
    for (int i = 0; i < PER_THREAD; i++)
        outbox_uuid_v7(ids[i]);
    return NULL;
}

static int compare_ids(const void *a, const void *b)
{
    return strcmp(a, b);
}

START_TEST(test_threads_mint_distinct_increasing_ids)
{
    char(*ids)[OUTBOX_UUID_STRLEN + 1] = malloc(sizeof *ids * THREADS * PER_THREAD);
    ck_assert_ptr_nonnull(ids);
    pthread_t tids[THREADS];
    for (int t = 0; t < THREADS; t++)
        ck_assert_int_eq(pthread_create(&tids[t], NULL, mint_many, ids + t * PER_THREAD), 0);
    for (int t = 0; t < THREADS; t++)
        ck_assert_int_eq(pthread_join(tids[t], NULL), 0);
    for (int t = 0; t < THREADS; t++)
        for (int i = 1; i < PER_THREAD; i++)
            ck_assert(strcmp(ids[t * PER_THREAD + i - 1], ids[t * PER_THREAD + i]) < 0);
    qsort(ids, THREADS * PER_THREAD, sizeof *ids, compare_ids);
    for (int i = 1; i < THREADS * PER_THREAD; i++)
        ck_assert(strcmp(ids[i - 1], ids[i]) != 0);
    free(ids);
}
END_TEST

START_TEST(test_valid)
{
    ck_assert_int_eq(outbox_uuid_valid("01890a5d-ac96-774b-bcce-b302099a8057"), 1);
    ck_assert_int_eq(outbox_uuid_valid("01890A5D-AC96-774B-BCCE-B302099A8057"), 1);
    ck_assert_int_eq(outbox_uuid_valid("00000000-0000-0000-0000-000000000000"), 1);
    ck_assert_int_eq(outbox_uuid_valid("f47ac10b-58cc-4372-a567-0e02b2c3d479"), 1); /* v4 */
}
END_TEST

START_TEST(test_invalid)
{
    static const char *bad[] = {
        "",
        "01890a5d-ac96-774b-bcce-b302099a805",   /* short */
        "01890a5d-ac96-774b-bcce-b302099a80570", /* long */
        "01890a5dac96-774b-bcce-b302099a8057-",  /* dash misplaced */
        "01890a5d-ac96-774b-bcce_b302099a8057",
        "01890a5d-ac96-774b-bcce-b302099a805g",
        "{01890a5d-ac96-774b-bcce-b302099a8057}",
        "01890a5dac96774bbcceb302099a8057",
        " 01890a5d-ac96-774b-bcce-b302099a8057",
        "01890a5d-ac96-774b-bcce-b302099a8057 ",
        "urn:uuid:01890a5d-ac96-774b-bcce-b302099a8057",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(outbox_uuid_valid(bad[i]) == 0, "accepted \"%s\"", bad[i]);
    ck_assert_int_eq(outbox_uuid_valid(NULL), 0);
}
END_TEST

static Suite *uuid_suite(void)
{
    Suite *s = suite_create("uuid");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_layout);
    tcase_add_test(tc, test_timestamp_is_wall_time);
    tcase_add_test(tc, test_strictly_increasing);
    tcase_add_test(tc, test_at_keeps_the_given_ms);
    tcase_add_test(tc, test_at_orders_within_one_ms);
    tcase_add_test(tc, test_at_refuses_out_of_range);
    tcase_add_test(tc, test_random_bits_differ);
    tcase_add_test(tc, test_threads_mint_distinct_increasing_ids);
    tcase_add_test(tc, test_valid);
    tcase_add_test(tc, test_invalid);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(uuid_suite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
