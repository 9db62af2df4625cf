/* Conformance cases: delayed events (ABI 1.8). A row staged with an
 * instant or a delay is not claimed before its time and is claimed after
 * it; until then it holds back the later rows of its ordering key, as a
 * row waiting for its retry does. */
#include <stdio.h>
#include <string.h>

#include "conf_int.h"

#define ROUTE "conf.delay"
/* How far ahead the delayed rows are due: long enough that the claims
 * made right after staging come well before it on a loaded machine. */
#define AHEAD_US INT64_C(800000)

static void wait_until(int64_t us)
{
    while (conf_now_us() < us)
        conf_sleep_ms(20);
}

/* The events a claim took, as "0 2 3". */
static void claimed_list(const conf_claim_t *c, char *out, size_t size)
{
    out[0] = '\0';
    for (size_t i = 0; i < c->n; i++)
        snprintf(out + strlen(out), size - strlen(out), "%s%lu", i ? " " : "", c->rows[i].n);
}

/* Claims everything claimable now and checks which events came, in order. */
static void expect_claim(outbox_store_t *s, const char *want, const char *when)
{
    conf_claim_t c = conf_claim(s, ROUTE, 100, CONF_LONG_LEASE_US, 0);
    char got[128];
    claimed_list(&c, got, sizeof got);
    ck_assert_msg(strcmp(got, want) == 0, "%s: claim took events [%s], expected [%s]", when, got,
                  want);
    conf_settle_all(s, &c, OUTBOX_SETTLE_PUBLISHED);
    conf_claim_free(&c);
}

START_TEST(stage_delayed_not_before)
{
    outbox_store_t *s = conf_open();
    int64_t t0 = conf_now_us();
    outbox_stage_options_t at = {.struct_size = sizeof at, .not_before = t0 + AHEAD_US};
    outbox_stage_options_t in = {.struct_size = sizeof in, .delay_us = AHEAD_US};
    outbox_stage_options_t past = {.struct_size = sizeof past, .not_before = t0 - 1000000};
    /* 0: at an instant ahead; 1: after a delay; 2: not delayed; 3: at an
     * instant already past. */
    conf_stage_with(s, ROUTE, 0, 1, NULL, &at);
    conf_stage_with(s, ROUTE, 1, 1, NULL, &in);
    conf_stage(s, NULL, ROUTE, 2, 1, NULL);
    conf_stage_with(s, ROUTE, 3, 1, NULL, &past);
    int64_t staged = conf_now_us();
    expect_claim(s, "2 3", "right after staging, before the delayed rows were due");
    if (conf_now_us() < t0 + AHEAD_US - 100000)
        expect_claim(s, "", "again before the delayed rows were due");
    else
        conf_note("a claim just before a delayed row is due",
                  "staging and the first claim took most of the delay");
    /* The delay counts from the store's clock at staging, which may be a
     * database server's a little apart from ours. */
    wait_until(staged + AHEAD_US + 200000);
    expect_claim(s, "0 1", "once both delayed rows were due");
    outbox_store_close(s);
}
END_TEST

START_TEST(stage_delayed_holds_key)
{
    outbox_store_t *s = conf_open();
    outbox_stage_options_t in = {.struct_size = sizeof in, .delay_us = AHEAD_US};
    /* Key a: a delayed head, then a row due at once; key b and no key
     * beside them. */
    conf_stage_with(s, ROUTE, 0, 1, "a", &in);
    int64_t staged = conf_now_us();
    conf_stage(s, NULL, ROUTE, 1, 1, "a");
    conf_stage(s, NULL, ROUTE, 2, 1, "b");
    conf_stage(s, NULL, ROUTE, 3, 1, NULL);
    expect_claim(s, "2 3",
                 "with key a's first row delayed (a later row of key a must wait for it)");
    conf_stage(s, NULL, ROUTE, 4, 1, "a");
    expect_claim(s, "", "with key a's first row still delayed");
    wait_until(staged + AHEAD_US + 200000);
    expect_claim(s, "0 1 4", "once key a's delayed row was due (its key's rows in order)");
    outbox_store_close(s);
}
END_TEST

void conf_cases_delay(conf_cases_t *c)
{
    conf_add(c, stage_delayed_not_before, CONF_NEED_DELAYED, 0, 20);
    conf_add(c, stage_delayed_holds_key, CONF_NEED_DELAYED, 0, 20);
}
