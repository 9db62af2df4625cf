/* Conformance cases: what claim takes, in which order, and when. */
#include <stdio.h>
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

/* Stages rows through the driver's own stage entry, outside any
 * transaction, bypassing the core (which would mint ids and stamps). */
static void driver_stage(void *h, const outbox_row_t *rows, size_t count)
{
    outbox_stage_ctx_t ctx = {.struct_size = sizeof ctx};
    outbox_diag_t d = {0};
    size_t staged = 0;
    int rc = conf_env.driver->store->stage(h, &ctx, rows, count, &staged, &d);
    ck_assert_msg(rc == OUTBOX_OK && staged == count,
                  "the driver's stage entry: %s, %zu of %zu staged (%s)", outbox_strerror(rc), staged,
                  count, d.message);
}

/* Row ids the core mints grow with time, so staged through outbox_store_stage()
 * they always agree with created_at and a claim ordered by id alone would
 * pass claim_order_created_at. Here the rows go through the driver's own
 * stage entry with ids chosen to disagree: a later created_at with a
 * smaller id, and ids descending inside one call. */
static void raw_stage(outbox_store_t *s, void *h, const char *route, int64_t created_at,
                      const unsigned long *ns, const unsigned *id_tails, size_t count)
{
    outbox_row_t rows[4];
    char ids[4][OUTBOX_UUID_STRLEN + 1], eids[4][OUTBOX_UUID_STRLEN + 1], payloads[4][32];
    ck_assert_msg(count <= 4, "internal: raw_stage takes at most 4 rows");
    for (size_t i = 0; i < count; i++) {
        snprintf(ids[i], sizeof ids[i], "01900000-0000-7000-8000-%012x", id_tails[i]);
        conf_event_id(eids[i], ns[i]);
        snprintf(payloads[i], sizeof payloads[i], "{\"n\":%lu}", ns[i]);
        rows[i] = (outbox_row_t){
            .id = ids[i],
            .route = route,
            .event_id = eids[i],
            .event_type = "conformance.test",
            .occurred_at = created_at,
            .payload = payloads[i],
            .payload_len = strlen(payloads[i]),
            .created_at = created_at,
        };
    }
    (void)s;
    driver_stage(h, rows, count);
}

START_TEST(claim_order_ids_disagree)
{
    void *h = NULL;
    outbox_store_t *s = conf_open_raw(&h);
    ck_assert_msg(h != NULL, "internal: no driver handle");
    int64_t t0 = (conf_now_us() / 1000000) * 1000000; /* whole seconds: every store keeps them */
    /* Event 0: the earliest created_at, the largest id. Events 1-3: one
     * call, one later created_at, ids descending, so id order is 3, 2, 1.
     * Event 4: the latest created_at, the smallest id. */
    static const unsigned long first_n[] = {0};
    static const unsigned first_id[] = {0x900};
    static const unsigned long batch_n[] = {3, 2, 1};
    static const unsigned batch_id[] = {0x503, 0x502, 0x501};
    static const unsigned long last_n[] = {4};
    static const unsigned last_id[] = {0x100};
    raw_stage(s, h, ROUTE, t0 - 3000000, first_n, first_id, 1);
    raw_stage(s, h, ROUTE, t0 - 2000000, batch_n, batch_id, 3);
    raw_stage(s, h, ROUTE, t0 - 1000000, last_n, last_id, 1);

    static const unsigned long want[] = {0, 1, 2, 3, 4};
    conf_claim_t c = conf_claim(s, ROUTE, 100, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 5, "claimed %zu of 5 rows", c.n);
    for (size_t i = 0; i < c.n; i++)
        ck_assert_msg(c.rows[i].n == want[i],
                      "claim position %zu holds event %lu (id %s), expected event %lu: claim order "
                      "is created_at first, the id only breaks ties",
                      i, c.rows[i].n, c.rows[i].id, want[i]);
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

/* An expired lease makes rows claimable again, but only on their own route
 * and only within the claim's limit. */
START_TEST(claim_expired_route_limit)
{
    outbox_store_t *s = conf_open();
    conf_stage(s, NULL, ROUTE ".a", 0, 3, NULL);
    conf_claim_t c = conf_claim(s, ROUTE ".a", 100, CONF_LONG_LEASE_US, 0);
    ck_assert_uint_eq(c.n, 3);
    conf_claim_free(&c);
    conf_sleep_ms(60);
    next_created_at();
    conf_stage(s, NULL, ROUTE ".b", 100, 2, NULL);

    /* A 20 ms lease: route a's three rows are expired, but they are a's. */
    c = conf_claim(s, ROUTE ".b", 100, 20000, 0);
    ck_assert_msg(c.n == 2, "route b with route a's leases expired: claimed %zu rows, expected its 2",
                  c.n);
    for (size_t i = 0; i < c.n; i++) {
        ck_assert_msg(c.rows[i].n == 100 + i,
                      "route b: position %zu holds event %lu, expected %zu (events below 100 are "
                      "route a's expired rows)",
                      i, c.rows[i].n, 100 + i);
        ck_assert_str_eq(c.rows[i].route, ROUTE ".b");
    }
    conf_claim_free(&c);

    /* Three expired and three pending rows on route a; a limit of 4 takes
     * the four oldest, whatever their status. */
    next_created_at();
    conf_stage(s, NULL, ROUTE ".a", 3, 3, NULL);
    c = conf_claim(s, ROUTE ".a", 4, 20000, 0);
    ck_assert_msg(c.n == 4, "limit 4 with 3 expired and 3 pending rows: claimed %zu rows", c.n);
    for (size_t i = 0; i < c.n; i++)
        ck_assert_msg(c.rows[i].n == i, "limit 4: position %zu holds event %lu, expected %zu", i,
                      c.rows[i].n, i);
    conf_claim_free(&c);
    c = conf_claim(s, ROUTE ".a", 100, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 2 && c.rows[0].n == 4 && c.rows[1].n == 5,
                  "after the limited claim, %zu rows were left (first: event %lu), expected events "
                  "4 and 5",
                  c.n, c.n ? c.rows[0].n : 0UL);
    conf_claim_free(&c);
    outbox_store_close(s);
}
END_TEST

/* The per-key rule on a crashed relay's rows: a key's head whose lease
 * expired is reclaimed before, or together with, the rows behind it;
 * never is a later row of the key claimed without it. */
START_TEST(claim_key_rule_after_expiry)
{
    outbox_store_t *s = conf_open();
    for (unsigned long i = 0; i < 3; i++) {
        conf_stage(s, NULL, ROUTE, i, 1, "k");
        next_created_at();
    }
    conf_stage(s, NULL, ROUTE, 3, 1, NULL);

    conf_claim_t c = conf_claim(s, ROUTE, 1, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 1 && c.rows[0].n == 0, "the first claim did not take key k's head");
    conf_claim_free(&c);
    conf_sleep_ms(60);

    c = conf_claim(s, ROUTE, 1, 20000, 0); /* the head's lease (20 ms) has expired */
    ck_assert_msg(c.n == 1 && c.rows[0].n == 0,
                  "with key k's head expired and the rows behind it pending, a claim of one took "
                  "%zu rows (event %lu), expected the head, event 0",
                  c.n, c.n ? c.rows[0].n : 0UL);
    ck_assert_msg(c.rows[0].attempts == 2, "the reclaimed head has attempts %d, expected 2",
                  (int)c.rows[0].attempts);
    conf_claim_free(&c);
    conf_sleep_ms(60);

    c = conf_claim(s, ROUTE, 100, 20000, 0);
    ck_assert_msg(c.n == 4, "with the head expired again, claim took %zu of 4 rows", c.n);
    for (size_t i = 0; i < c.n; i++)
        ck_assert_msg(c.rows[i].n == i,
                      "with the head expired again: position %zu holds event %lu, expected %zu "
                      "(the head before the rows of its key)",
                      i, c.rows[i].n, i);
    conf_claim_free(&c);
    outbox_store_close(s);
}
END_TEST

/* The per-key rule on a crashed relay's rows, when both rows of a key were
 * in flight: relay A claims key k's head (event 0), the row behind it
 * (event 1) and a row without a key (event 2), then dies. Once their
 * leases have expired, relay B reclaims only the head (a claim of one).
 * While the head is in flight again, event 1 is as expired as before, but
 * it must wait for the head: the key rule holds for rows whose lease
 * expired as it does for pending ones. Event 2 shows the lease did
 * expire. */
START_TEST(claim_key_rule_reclaimed_rows)
{
    outbox_store_t *a = conf_open();
    outbox_store_t *b = conf_open();
    conf_stage(a, NULL, ROUTE, 0, 1, "k");
    next_created_at();
    conf_stage(a, NULL, ROUTE, 1, 1, "k");
    next_created_at();
    conf_stage(a, NULL, ROUTE, 2, 1, NULL);

    conf_claim_t dead = conf_claim(a, ROUTE, 3, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(dead.n == 3, "relay A claimed %zu of the 3 rows", dead.n);
    conf_claim_free(&dead);
    outbox_store_close(a); /* relay A is gone, its rows still processing */

    /* The lease: long enough that the head, reclaimed just now, is still
     * held by it at the next claim; the rows relay A took are older. */
    int64_t lease_us = (int64_t)(1000000 * conf_timeout_multiplier());
    conf_sleep_ms((int)(lease_us / 1000 + 100));

    int64_t head_at = conf_now_us();
    conf_claim_t head = conf_claim(b, ROUTE, 1, lease_us, 0);
    ck_assert_msg(head.n == 1 && head.rows[0].n == 0,
                  "with relay A's three leases expired, a claim of one took %zu rows (event %lu), "
                  "expected key k's head, event 0",
                  head.n, head.n ? head.rows[0].n : 0UL);
    ck_assert_msg(head.rows[0].attempts == 2, "the reclaimed head has attempts %d, expected 2",
                  (int)head.rows[0].attempts);

    conf_claim_t c = conf_claim(b, ROUTE, 100, lease_us, 0);
    int64_t took = conf_now_us() - head_at;
    int pos_head = -1, pos_1 = -1, has_2 = 0;
    for (size_t i = 0; i < c.n; i++) {
        if (c.rows[i].n == 0)
            pos_head = (int)i;
        else if (c.rows[i].n == 1)
            pos_1 = (int)i;
        else if (c.rows[i].n == 2)
            has_2 = 1;
    }
    int head_again = pos_head >= 0;
    if (head_again) {
        /* The run was slower than the lease: the head expired again, and
         * a claim may carry it with the row behind it, in order. */
        ck_assert_msg(took >= lease_us,
                      "the head, reclaimed at most %lld us earlier under a lease of %lld us, was "
                      "claimed again",
                      (long long)took, (long long)lease_us);
        ck_assert_msg(pos_1 < 0 || pos_head < pos_1,
                      "a claim took key k's event 1 before its head, event 0");
        conf_note("a key's later row held back by its reclaimed head",
                  "the run took longer than the lease between two claims");
    } else {
        ck_assert_msg(pos_1 < 0,
                      "with key k's head reclaimed and in flight again, a claim took event 1 of "
                      "the same key through its expired lease: the per-key rule must hold for "
                      "expired rows too");
        ck_assert_msg(has_2,
                      "event 2 (no key), claimed by the dead relay with the others, was not "
                      "reclaimed after its lease expired (took %zu rows)",
                      c.n);
    }
    conf_claim_free(&c);

    /* Once the head is published, the row behind it follows. */
    if (!head_again) {
        conf_settle_all(b, &head, OUTBOX_SETTLE_PUBLISHED);
        c = conf_claim(b, ROUTE, 100, lease_us, 0);
        ck_assert_msg(c.n == 1 && c.rows[0].n == 1,
                      "with key k's head published, claim took %zu rows (first: event %lu), "
                      "expected event 1",
                      c.n, c.n ? c.rows[0].n : 0UL);
        ck_assert_msg(c.rows[0].attempts == 2, "event 1, reclaimed, has attempts %d, expected 2",
                      (int)c.rows[0].attempts);
        conf_claim_free(&c);
    }
    conf_claim_free(&head);
    outbox_store_close(b);
}
END_TEST

/* JSON text without the whitespace outside strings: stores may keep the
 * payload as a document and write it back spaced their own way. */
static void json_squeeze(const char *in, size_t len, char *out, size_t size)
{
    size_t o = 0;
    int in_str = 0, esc = 0;
    for (size_t i = 0; i < len && o + 1 < size; i++) {
        char ch = in[i];
        if (in_str) {
            if (esc)
                esc = 0;
            else if (ch == '\\')
                esc = 1;
            else if (ch == '"')
                in_str = 0;
        } else if (ch == '"') {
            in_str = 1;
        } else if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
            continue;
        }
        out[o++] = ch;
    }
    out[o] = '\0';
}

static void field_eq(const char *what, unsigned long n, const char *got, const char *want)
{
    if (want == NULL)
        ck_assert_msg(got == NULL, "event %lu: %s came back as \"%s\", staged NULL", n, what, got);
    else
        ck_assert_msg(got != NULL && strcmp(got, want) == 0,
                      "event %lu: %s came back as %s%s%s, staged \"%s\"", n, what,
                      got ? "\"" : "", got ? got : "NULL", got ? "\"" : "", want);
}

/* Every field staged comes back from claim as it went in: event 0 with
 * every optional field set, event 1 with none. Values sit at whole
 * milliseconds, the coarsest precision a store may keep; the payload's
 * keys are in the order a JSON document store writes them back. */
static void read_back(int optional)
{
    void *h = NULL;
    outbox_store_t *s = conf_open_raw(&h);
    ck_assert_msg(h != NULL, "internal: no driver handle");
    uint32_t caps = outbox_store_capabilities(s);
    int has_tp = optional && (caps & OUTBOX_STORE_CAP_TRACEPARENT);
    int has_hlc = optional && (caps & OUTBOX_STORE_CAP_HLC);
    int64_t t0 = (conf_now_us() / 1000) * 1000;
    static const char payload[] = "{\"n\": 7, \"list\": [1, 2.5, null, true], \"name\": \"caf\xc3\xa9 \\\"q\\\"\"}";
    char eid[2][OUTBOX_UUID_STRLEN + 1];
    conf_event_id(eid[0], 0);
    conf_event_id(eid[1], 1);
    outbox_row_t rows[2] = {
        {
            .id = "01900000-0000-7000-8000-00000000f001",
            .route = ROUTE,
            .event_id = eid[0],
            .event_type = "conformance.fields.full",
            .tenant_id = "11111111-1111-4111-8111-111111111111",
            .execution_id = "22222222-2222-4222-8222-222222222222",
            .correlation_id = "33333333-3333-4333-8333-333333333333",
            .causation_id = "44444444-4444-4444-8444-444444444444",
            .occurred_at = t0 - INT64_C(86400123) * 1000,
            .payload = payload,
            .payload_len = sizeof payload - 1,
            .ordering_key = "key-7",
            .traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            .hlc = (t0 / 1000) << 16 | 5,
            .created_at = t0 - 2000,
        },
        {
            .id = "01900000-0000-7000-8000-00000000f002",
            .route = ROUTE,
            .event_id = eid[1],
            .event_type = "conformance.fields.bare",
            .occurred_at = t0 - 7000,
            .payload = "{}",
            .payload_len = 2,
            .created_at = t0 - 1000,
        },
    };
    if (!has_tp)
        rows[0].traceparent = NULL; /* only stored where the column exists */
    if (!has_hlc)
        rows[0].hlc = 0;
    driver_stage(h, &rows[0], 1);
    driver_stage(h, &rows[1], 1);

    outbox_claim_req_t req = {.struct_size = sizeof req, .route = ROUTE, .limit = 10,
                              .lease_us = CONF_LONG_LEASE_US};
    const outbox_row_t *got = NULL;
    size_t n = 0;
    outbox_fence_t fence;
    conf_ok(s, outbox_store_claim(s, &req, &got, &n, &fence));
    ck_assert_msg(n == 2, "claimed %zu of 2 rows", n);
    for (size_t i = 0; i < 2; i++) {
        const outbox_row_t *r = &got[i], *w = &rows[i];
        unsigned long en = conf_row_n(r);
        ck_assert_msg(en == i, "claim position %zu holds event %lu", i, en);
        field_eq("id", en, r->id, w->id);
        field_eq("route", en, r->route, w->route);
        field_eq("event_id", en, r->event_id, w->event_id);
        field_eq("event_type", en, r->event_type, w->event_type);
        field_eq("tenant_id", en, r->tenant_id, w->tenant_id);
        field_eq("execution_id", en, r->execution_id, w->execution_id);
        field_eq("correlation_id", en, r->correlation_id, w->correlation_id);
        field_eq("causation_id", en, r->causation_id, w->causation_id);
        field_eq("ordering_key", en, r->ordering_key, w->ordering_key);
        if (optional)
            field_eq("traceparent", en, r->traceparent, w->traceparent);
        ck_assert_msg(r->occurred_at == w->occurred_at, "event %lu: occurred_at came back as %lld, staged %lld",
                      en, (long long)r->occurred_at, (long long)w->occurred_at);
        ck_assert_msg(r->created_at == w->created_at, "event %lu: created_at came back as %lld, staged %lld",
                      en, (long long)r->created_at, (long long)w->created_at);
        if (optional)
            ck_assert_msg(r->hlc == w->hlc, "event %lu: hlc came back as %lld, staged %lld", en,
                          (long long)r->hlc, (long long)w->hlc);
        ck_assert_msg(r->attempts == 1, "event %lu: attempts %d after one claim", en, (int)r->attempts);
        ck_assert_msg(r->available_at == 0 && r->last_error == NULL,
                      "event %lu: a fresh row came back with available_at %lld / a last_error", en,
                      (long long)r->available_at);
        char a[256], b[256];
        ck_assert_msg(r->payload != NULL, "event %lu: no payload", en);
        json_squeeze(r->payload, r->payload_len, a, sizeof a);
        json_squeeze(w->payload, w->payload_len, b, sizeof b);
        ck_assert_msg(strcmp(a, b) == 0, "event %lu: payload came back as %.*s, staged %s", en,
                      (int)r->payload_len, r->payload, w->payload);
    }
    outbox_store_close(s);
}

START_TEST(claim_reads_back_fields)
{
    read_back(0);
}
END_TEST

START_TEST(claim_reads_back_optional)
{
    read_back(1);
}
END_TEST

void conf_cases_claim(conf_cases_t *c)
{
    conf_add(c, claim_order_created_at, 0, 0, 20);
    conf_add(c, claim_order_ids_disagree, 0, 0, 20);
    conf_add(c, claim_order_hlc, CONF_NEED_HLC, OUTBOX_SCHEMA_HLC, 20);
    conf_add(c, claim_limit, 0, 0, 20);
    conf_add(c, claim_route_isolation, 0, 0, 20);
    conf_add(c, claim_unripe_invisible, 0, 0, 20);
    conf_add(c, claim_attempts_incremented, 0, 0, 20);
    conf_add(c, claim_lease_expiry_reclaim, 0, 0, 20);
    conf_add(c, claim_key_rule, 0, 0, 20);
    conf_add(c, claim_expired_route_limit, 0, 0, 20);
    conf_add(c, claim_key_rule_after_expiry, 0, 0, 20);
    conf_add(c, claim_key_rule_reclaimed_rows, 0, 0, 20);
    conf_add(c, claim_reads_back_fields, 0, 0, 20);
    conf_add(c, claim_reads_back_optional, CONF_NEED_HLC | CONF_NEED_TRACEPARENT,
             OUTBOX_SCHEMA_HLC | OUTBOX_SCHEMA_TRACEPARENT, 20);
}
