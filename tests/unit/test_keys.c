/* The kit's per-key scheduler (outbox_kit_keys_*): on random calls with
 * random outcomes, a key's messages go out one per round in array order,
 * none after one failed (each of those held back, RETRY), and every
 * message is either sent or held back. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox/kit.h"
#include "outbox_int.h"

enum { MAXN = 300 };

START_TEST(random_calls_keep_the_promise)
{
    srand(4242);
    for (int call = 0; call < 400; call++) {
        size_t n = (size_t)(rand() % MAXN);
        int keys = 1 + rand() % 12;
        static outbox_message_t msgs[MAXN];
        static char keybuf[MAXN][16], ids[MAXN][24];
        static outbox_publish_result_t results[MAXN];
        for (size_t i = 0; i < n; i++) {
            snprintf(ids[i], sizeof ids[i], "e%zu", i);
            snprintf(keybuf[i], sizeof keybuf[i], "k%d", rand() % keys);
            msgs[i] = (outbox_message_t){.event_id = ids[i],
                                         .key = rand() % 6 == 0 ? NULL : keybuf[i]};
            results[i] = (outbox_publish_result_t){.status = -1};
        }
        outbox_kit_keys_t k;
        ck_assert_int_eq(outbox_kit_keys_init(&k, outbox_host_table(), msgs, n), 0);
        int sent_round[MAXN];
        for (size_t i = 0; i < n; i++)
            sent_round[i] = -1;
        int round = 0;
        /* In round one: every message without a key, and the first of each key. */
        for (size_t i = 0; i < n; i++) {
            int first = 1;
            for (size_t j = 0; j < i && first; j++)
                first = !(msgs[i].key && msgs[j].key && strcmp(msgs[i].key, msgs[j].key) == 0);
            int in_round = 0;
            for (size_t r = 0; r < k.n_round; r++)
                in_round |= k.round[r] == i;
            ck_assert_msg(in_round == first, "call %d: message %zu (key %s) in round one: %d", call,
                          i, msgs[i].key ? msgs[i].key : "-", in_round);
        }
        do {
            for (size_t r = 0; r < k.n_round; r++) {
                size_t i = k.round[r];
                ck_assert_msg(r == 0 || k.round[r - 1] < i, "a round not in array order");
                ck_assert_msg(sent_round[i] == -1, "message %zu sent twice", i);
                ck_assert_msg(results[i].status == -1, "message %zu sent after being held back", i);
                /* Its key's earlier messages all went out in earlier rounds, OK. */
                for (size_t j = 0; j < i; j++)
                    if (msgs[i].key && msgs[j].key && strcmp(msgs[i].key, msgs[j].key) == 0)
                        ck_assert_msg(sent_round[j] >= 0 && sent_round[j] < round &&
                                          results[j].status == OUTBOX_PUBLISH_OK,
                                      "message %zu went out before its key's message %zu was OK",
                                      i, j);
                sent_round[i] = round;
            }
            for (size_t r = 0; r < k.n_round; r++) {
                size_t i = k.round[r];
                if (rand() % 5 == 0) {
                    outbox_kit_result(&results[i], OUTBOX_PUBLISH_REJECT, "refused %zu", i);
                    outbox_kit_keys_hold(&k, i, msgs, results, "was refused");
                } else {
                    results[i].status = OUTBOX_PUBLISH_OK;
                    outbox_kit_keys_ok(&k, i);
                }
            }
            round++;
        } while (outbox_kit_keys_next(&k) > 0);
        outbox_kit_keys_free(&k);
        for (size_t i = 0; i < n; i++) {
            ck_assert_msg(sent_round[i] >= 0 || results[i].status == OUTBOX_PUBLISH_RETRY,
                          "call %d: message %zu neither sent nor held back", call, i);
            if (sent_round[i] < 0)
                ck_assert_msg(strncmp(results[i].message, "held back: event e", 18) == 0,
                              "%s", results[i].message);
        }
    }
}
END_TEST

START_TEST(empty_call)
{
    outbox_kit_keys_t k;
    ck_assert_int_eq(outbox_kit_keys_init(&k, outbox_host_table(), NULL, 0), 0);
    ck_assert_uint_eq(k.n_round, 0);
    ck_assert_uint_eq(outbox_kit_keys_next(&k), 0);
    outbox_kit_keys_free(&k);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("keys");
    TCase *tc = tcase_create("scheduler");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, random_calls_keep_the_promise);
    tcase_add_test(tc, empty_call);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
