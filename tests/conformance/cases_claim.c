/* Conformance cases: what claim takes, in which order, and when. */
#include <string.h>

#include "conf_int.h"

#define ROUTE "conf.claim"

/* Rows of one created_at must differ from the next call's: the clock the
 * core stamps created_at with has microseconds, so a millisecond is plenty. */
static void next_created_at(void)
{
    conf_sleep_ms(2);
}

/* claim order: created_at, then id. */
static int before(const conf_row_t *a, const conf_row_t *b)
{
    if (a->created_at != b->created_at)
        return a->created_at < b->created_at;
    return strcmp(a->id, b->id) < 0;
}

START_TEST(claim_order_created_at)
{
    outbox_store_t *s = conf_open();
    /* Three single-row calls, one call of five rows (one created_at, so
     * the id breaks the ties), one more single row. */
    conf_stage(s, NULL, ROUTE, 0, 1, NULL);
    next_created_at();
    conf_stage(s, NULL, ROUTE, 1, 1, NULL);
    next_created_at();
    conf_stage(s, NULL, ROUTE, 2, 5, NULL);
    next_created_at();
    conf_stage(s, NULL, ROUTE, 7, 1, NULL);

    conf_claim_t c = conf_claim(s, ROUTE, 100, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 8, "claimed %zu of 8 rows", c.n);
    for (size_t i = 0; i < c.n; i++)
        ck_assert_msg(c.rows[i].n == i, "claim position %zu holds event %lu, expected %zu", i,
                      c.rows[i].n, i);
    for (size_t i = 1; i < c.n; i++)
        ck_assert_msg(before(&c.rows[i - 1], &c.rows[i]),
                      "rows %zu and %zu are not in (created_at, id) order: (%lld, %s) then (%lld, %s)",
                      i - 1, i, (long long)c.rows[i - 1].created_at, c.rows[i - 1].id,
                      (long long)c.rows[i].created_at, c.rows[i].id);
    ck_assert_msg(c.rows[0].created_at < c.rows[1].created_at &&
                      c.rows[1].created_at < c.rows[2].created_at &&
                      c.rows[6].created_at < c.rows[7].created_at,
                  "separate stage calls share a created_at");
    ck_assert_msg(c.rows[2].created_at == c.rows[6].created_at,
                  "the rows of one stage call have different created_at");
    conf_claim_free(&c);
    outbox_store_close(s);
}
END_TEST

static void set_hlc(outbox_store_t *s, const char *route, int on)
{
    outbox_route_config_t cfg = {.struct_size = sizeof cfg, .route = route, .hlc = on};
    conf_ok(s, outbox_store_configure_route(s, &cfg));
}

/* Events base+0, +1 without hlc; +2, then +3 and +4 (one call) with hlc;
 * +5 without, staged last. */
static void stage_mixed(outbox_store_t *s, const char *route, unsigned long base)
{
    set_hlc(s, route, 0);
    conf_stage(s, NULL, route, base + 0, 2, NULL);
    next_created_at();
    set_hlc(s, route, 1);
    conf_stage(s, NULL, route, base + 2, 1, NULL);
    next_created_at();
    conf_stage(s, NULL, route, base + 3, 2, NULL);
    next_created_at();
    set_hlc(s, route, 0);
    conf_stage(s, NULL, route, base + 5, 1, NULL);
}

START_TEST(claim_order_hlc)
{
    outbox_store_t *s = conf_open();
    stage_mixed(s, ROUTE ".hlc", 0);
    stage_mixed(s, ROUTE ".plain", 100);

    int nulls_first = (outbox_store_capabilities(s) & OUTBOX_STORE_CAP_HLC_NULLS_FIRST) != 0;
    static const unsigned long nulls_last_order[] = {2, 3, 4, 0, 1, 5};
    static const unsigned long nulls_first_order[] = {0, 1, 5, 2, 3, 4};
    const unsigned long *want = nulls_first ? nulls_first_order : nulls_last_order;

    conf_claim_t c = conf_claim(s, ROUTE ".hlc", 100, CONF_LONG_LEASE_US, 1);
    ck_assert_msg(c.n == 6, "claimed %zu of 6 rows in hlc order", c.n);
    for (size_t i = 0; i < c.n; i++) {
        ck_assert_msg(c.rows[i].n == want[i],
                      "hlc order (%s): position %zu holds event %lu, expected %lu",
                      nulls_first ? "rows without hlc first, as the driver declares"
                                  : "hlc NULLS LAST, created_at, id",
                      i, c.rows[i].n, want[i]);
        int stamped = c.rows[i].n >= 2 && c.rows[i].n <= 4;
        ck_assert_msg(stamped ? c.rows[i].hlc > 0 : c.rows[i].hlc == 0,
                      "event %lu came back with hlc %lld", c.rows[i].n, (long long)c.rows[i].hlc);
    }
    size_t first = nulls_first ? 3 : 0;
    ck_assert_msg(c.rows[first].hlc < c.rows[first + 1].hlc &&
                      c.rows[first + 1].hlc < c.rows[first + 2].hlc,
                  "hlc stamps do not increase in staging order");
    conf_claim_free(&c);

    /* The same rows without hlc ordering: plain created_at, id. */
    c = conf_claim(s, ROUTE ".plain", 100, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 6, "claimed %zu of 6 rows in created_at order", c.n);
    for (size_t i = 0; i < c.n; i++)
        ck_assert_msg(c.rows[i].n == 100 + i, "created_at order: position %zu holds event %lu",
                      i, c.rows[i].n);
    conf_claim_free(&c);
    outbox_store_close(s);
}
END_TEST

START_TEST(claim_limit)
{
    outbox_store_t *s = conf_open();
    conf_stage(s, NULL, ROUTE, 0, 10, NULL);
    static const size_t limits[] = {3, 4, 100, 100};
    static const size_t expect[] = {3, 4, 3, 0};
    unsigned long next = 0;
    for (size_t k = 0; k < 4; k++) {
        conf_claim_t c = conf_claim(s, ROUTE, limits[k], CONF_LONG_LEASE_US, 0);
        ck_assert_msg(c.n == expect[k], "claim %zu with limit %zu took %zu rows, expected %zu", k,
                      limits[k], c.n, expect[k]);
        for (size_t i = 0; i < c.n; i++, next++)
            ck_assert_msg(c.rows[i].n == next, "claim %zu took event %lu, expected %lu", k,
                          c.rows[i].n, next);
        conf_claim_free(&c);
    }
    outbox_store_close(s);
}
END_TEST

START_TEST(claim_route_isolation)
{
    outbox_store_t *s = conf_open();
    conf_stage(s, NULL, ROUTE ".a", 0, 5, NULL);
    conf_stage(s, NULL, ROUTE ".b", 100, 3, NULL);
    conf_stage(s, NULL, ROUTE ".a.b", 200, 2, NULL); /* a prefix is not the route */

    conf_claim_t c = conf_claim(s, ROUTE ".a", 100, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 5, "route a: claimed %zu rows, expected its 5", c.n);
    for (size_t i = 0; i < c.n; i++) {
        ck_assert_msg(c.rows[i].n < 100, "route a: claimed event %lu of another route", c.rows[i].n);
        ck_assert_str_eq(c.rows[i].route, ROUTE ".a");
    }
    conf_claim_free(&c);

    c = conf_claim(s, ROUTE ".b", 100, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 3, "route b: claimed %zu rows, expected its 3", c.n);
    for (size_t i = 0; i < c.n; i++) {
        ck_assert_msg(c.rows[i].n >= 100 && c.rows[i].n < 200,
                      "route b: claimed event %lu of another route", c.rows[i].n);
        ck_assert_str_eq(c.rows[i].route, ROUTE ".b");
    }
    conf_claim_free(&c);

    c = conf_claim(s, ROUTE ".c", 100, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 0, "a route with no rows gave %zu rows", c.n);
    conf_claim_free(&c);
    c = conf_claim(s, ROUTE ".a.b", 100, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 2, "route a.b: claimed %zu rows, expected its 2", c.n);
    conf_claim_free(&c);
    outbox_store_close(s);
}
END_TEST

START_TEST(claim_unripe_invisible)
{
    outbox_store_t *s = conf_open();
    conf_stage(s, NULL, ROUTE, 0, 3, NULL);
    conf_claim_t c = conf_claim(s, ROUTE, 100, CONF_LONG_LEASE_US, 0);
    ck_assert_uint_eq(c.n, 3);
    int64_t now = conf_now_us();
    const int64_t hour = INT64_C(3600) * 1000000;
    int64_t at[3] = {now + hour, now - 1000000, now + hour};
    for (size_t i = 0; i < 3; i++) {
        int applied = 0;
        conf_ok(s, conf_settle1(s, &c.fence, c.rows[i].id, OUTBOX_SETTLE_RESCHEDULE, at[i], "later",
                                &applied));
        ck_assert_int_eq(applied, 1);
    }
    conf_claim_free(&c);

    /* A tiny lease reclaims expired processing rows, never unripe pending ones. */
    c = conf_claim(s, ROUTE, 100, 1, 0);
    ck_assert_msg(c.n == 1 && c.rows[0].n == 1,
                  "with events 0 and 2 due in an hour and 1 due a second ago, claim took %zu rows "
                  "(first: event %lu), expected only event 1",
                  c.n, c.n ? c.rows[0].n : 0UL);
    conf_claim_free(&c);
    c = conf_claim(s, ROUTE, 100, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 0, "%zu rows due in an hour were claimed now", c.n);
    conf_claim_free(&c);
    outbox_store_close(s);
}
END_TEST

START_TEST(claim_attempts_incremented)
{
    outbox_store_t *s = conf_open();
    conf_stage(s, NULL, ROUTE, 0, 1, NULL);
    for (int32_t want = 1; want <= 4; want++) {
        conf_claim_t c = conf_claim(s, ROUTE, 10, CONF_LONG_LEASE_US, 0);
        ck_assert_msg(c.n == 1, "claim %d took %zu rows, expected 1", (int)want, c.n);
        ck_assert_msg(c.rows[0].attempts == want, "claim number %d returned attempts %d", (int)want,
                      (int)c.rows[0].attempts);
        int applied = 0;
        conf_ok(s, conf_settle1(s, &c.fence, c.rows[0].id, OUTBOX_SETTLE_RESCHEDULE,
                                conf_now_us() - 1000000, "retry", &applied));
        ck_assert_int_eq(applied, 1);
        conf_claim_free(&c);
    }
    outbox_store_close(s);
}
END_TEST

START_TEST(claim_lease_expiry_reclaim)
{
    outbox_store_t *a = conf_open();
    outbox_store_t *b = conf_open();
    conf_stage(a, NULL, ROUTE, 0, 2, NULL);
    conf_claim_t first = conf_claim(a, ROUTE, 10, CONF_LONG_LEASE_US, 0);
    ck_assert_uint_eq(first.n, 2);

    conf_claim_t c = conf_claim(b, ROUTE, 10, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 0, "%zu rows under a live lease were claimed again", c.n);
    conf_claim_free(&c);

    conf_sleep_ms(60);
    c = conf_claim(b, ROUTE, 10, 20000, 0); /* a 20 ms lease: 60 ms old claims are expired */
    ck_assert_msg(c.n == 2, "after the lease expired, %zu of 2 processing rows were reclaimed", c.n);
    for (size_t i = 0; i < c.n; i++) {
        ck_assert_msg(c.rows[i].n == i, "reclaim position %zu holds event %lu", i, c.rows[i].n);
        ck_assert_msg(c.rows[i].attempts == 2, "a reclaimed row has attempts %d, expected 2",
                      (int)c.rows[i].attempts);
    }
    ck_assert_msg(memcmp(&c.fence, &first.fence, sizeof c.fence) != 0,
                  "the reclaim has the same fence as the claim it replaced");
    conf_settle_all(b, &c, OUTBOX_SETTLE_PUBLISHED);
    conf_claim_free(&c);
    conf_claim_free(&first);
    outbox_store_close(b);
    outbox_store_close(a);
}
END_TEST

/* The per-key rule, one handle, no timing: a keyed row waits for every
 * earlier row of its key, unless the same claim takes them too. */
START_TEST(claim_key_rule)
{
    outbox_store_t *s = conf_open();
    static const char *const keys[] = {"a", "a", "b", NULL, "a"};
    for (unsigned long i = 0; i < 5; i++)
        conf_stage(s, NULL, ROUTE, i, 1, keys[i]);

    conf_claim_t head = conf_claim(s, ROUTE, 1, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(head.n == 1 && head.rows[0].n == 0, "the first claim did not take event 0");
    ck_assert_msg(head.rows[0].has_key && strcmp(head.rows[0].key, "a") == 0,
                  "event 0 came back without its ordering key \"a\"");

    conf_claim_t c = conf_claim(s, ROUTE, 100, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 2 && c.rows[0].n == 2 && c.rows[1].n == 3,
                  "with key a's head in flight, claim took %zu rows (first: event %lu); expected "
                  "only event 2 (key b) and event 3 (no key)",
                  c.n, c.n ? c.rows[0].n : 0UL);
    conf_settle_all(s, &c, OUTBOX_SETTLE_PUBLISHED);
    conf_claim_free(&c);

    /* Waiting for its retry, the head still holds the key. */
    int64_t due = conf_now_us() + 400000;
    int applied = 0;
    conf_ok(s, conf_settle1(s, &head.fence, head.rows[0].id, OUTBOX_SETTLE_RESCHEDULE, due,
                            "retry later", &applied));
    ck_assert_int_eq(applied, 1);
    conf_claim_free(&head);
    c = conf_claim(s, ROUTE, 100, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 0, "with key a's head waiting for its retry, claim took %zu rows (first: event %lu)",
                  c.n, c.n ? c.rows[0].n : 0UL);
    conf_claim_free(&c);

    /* Once it is due, one claim carries the head and the rows behind it. */
    while (conf_now_us() < due + 20000)
        conf_sleep_ms(20);
    c = conf_claim(s, ROUTE, 100, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 3 && c.rows[0].n == 0 && c.rows[1].n == 1 && c.rows[2].n == 4,
                  "once the head was due, claim took %zu rows, expected events 0, 1, 4 in order", c.n);
    conf_settle_all(s, &c, OUTBOX_SETTLE_PUBLISHED);
    conf_claim_free(&c);
    outbox_store_close(s);
}
END_TEST

void conf_cases_claim(conf_cases_t *c)
{
    conf_add(c, claim_order_created_at, 0, 0, 20);
    conf_add(c, claim_order_hlc, CONF_NEED_HLC, OUTBOX_SCHEMA_HLC, 20);
    conf_add(c, claim_limit, 0, 0, 20);
    conf_add(c, claim_route_isolation, 0, 0, 20);
    conf_add(c, claim_unripe_invisible, 0, 0, 20);
    conf_add(c, claim_attempts_incremented, 0, 0, 20);
    conf_add(c, claim_lease_expiry_reclaim, 0, 0, 20);
    conf_add(c, claim_key_rule, 0, 0, 20);
}
