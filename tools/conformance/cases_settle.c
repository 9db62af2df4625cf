/* Conformance cases: settling a claim, and the fence that guards it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf_int.h"

#define ROUTE "conf.settle"

/* Stores keep available_at at their own precision (BSON dates hold
 * milliseconds), so a millisecond either way is the same instant. */
static int same_instant(int64_t a, int64_t b)
{
    return llabs(a - b) < 1000;
}

static const char *kind_name(int kind)
{
    switch (kind) {
    case OUTBOX_SETTLE_PUBLISHED:
        return "PUBLISHED";
    case OUTBOX_SETTLE_RESCHEDULE:
        return "RESCHEDULE";
    case OUTBOX_SETTLE_DEAD:
        return "DEAD";
    default:
        return "RELEASE";
    }
}

START_TEST(fencing_after_reclaim)
{
    outbox_store_t *a = conf_open();
    outbox_store_t *b = conf_open();
    conf_stage(a, NULL, ROUTE, 0, 4, NULL);
    conf_claim_t stale = conf_claim(a, ROUTE, 10, CONF_LONG_LEASE_US, 0);
    ck_assert_uint_eq(stale.n, 4);
    conf_sleep_ms(40);
    conf_claim_t fresh = conf_claim(b, ROUTE, 10, 10000, 0); /* 10 ms lease: a's claim expired */
    ck_assert_msg(fresh.n == 4, "the reclaim took %zu of 4 rows", fresh.n);

    /* Each verdict of the first claimant, one call each, then all at once. */
    static const int kinds[] = {OUTBOX_SETTLE_PUBLISHED, OUTBOX_SETTLE_RESCHEDULE, OUTBOX_SETTLE_DEAD,
                                OUTBOX_SETTLE_RELEASE};
    outbox_settle_item_t items[4];
    for (size_t i = 0; i < 4; i++) {
        int applied = -1;
        int rc = conf_settle1(a, &stale.fence, stale.rows[i].id, kinds[i], conf_now_us() - 1000000,
                              "late verdict", &applied);
        ck_assert_msg(rc == OUTBOX_ECONFLICT,
                      "a stale %s of a reclaimed row returned %s, expected OUTBOX_ECONFLICT",
                      kind_name(kinds[i]), outbox_strerror(rc));
        ck_assert_msg(applied == 0, "a stale %s of a reclaimed row was applied", kind_name(kinds[i]));
        items[i] = (outbox_settle_item_t){.id = stale.rows[i].id, .kind = kinds[i],
                                          .available_at = conf_now_us() - 1000000,
                                          .error = "late verdict", .applied = -1};
    }
    size_t applied = 99;
    int rc = outbox_store_settle(a, &stale.fence, items, 4, &applied);
    ck_assert_msg(rc == OUTBOX_ECONFLICT, "a stale settle of 4 rows returned %s", outbox_strerror(rc));
    ck_assert_msg(applied == 0, "a stale settle applied %zu rows", applied);
    for (size_t i = 0; i < 4; i++)
        ck_assert_msg(items[i].applied == 0, "stale item %zu (%s) says applied", i,
                      kind_name(kinds[i]));

    /* Nothing changed: every row still holds the new claim's fence ... */
    if (CONF_VT_HAS(conf_env.driver->store, stats)) {
        outbox_stats_t st = conf_stats(a, ROUTE);
        ck_assert_msg(st.processing == 4 && st.pending == 0 && st.published == 0 && st.dead == 0,
                      "after stale verdicts: %llu processing, %llu pending, %llu published, %llu "
                      "dead; expected 4 processing",
                      (unsigned long long)st.processing, (unsigned long long)st.pending,
                      (unsigned long long)st.published, (unsigned long long)st.dead);
    }
    outbox_settle_item_t mine[4];
    for (size_t i = 0; i < 4; i++)
        mine[i] = (outbox_settle_item_t){
            .id = fresh.rows[i].id,
            .kind = fresh.rows[i].n == 1 ? OUTBOX_SETTLE_RELEASE : OUTBOX_SETTLE_PUBLISHED};
    rc = outbox_store_settle(b, &fresh.fence, mine, 4, &applied);
    ck_assert_msg(rc == OUTBOX_OK && applied == 4,
                  "the new claimant could settle %zu of 4 rows (%s): the stale verdicts changed them",
                  applied, outbox_strerror(rc));

    /* ... and the stale reschedule left no last_error or available_at. */
    conf_claim_t again = conf_claim(b, ROUTE, 10, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(again.n == 1 && again.rows[0].n == 1, "expected event 1 back after its release");
    ck_assert_msg(!again.rows[0].has_last_error || strcmp(again.rows[0].last_error, "late verdict") != 0,
                  "the stale reschedule's last_error reached the row");
    ck_assert_msg(again.rows[0].attempts == 2,
                  "attempts %d after claim, stale verdicts, reclaim, release and claim; expected 2",
                  (int)again.rows[0].attempts);
    conf_claim_free(&again);
    conf_claim_free(&fresh);
    conf_claim_free(&stale);
    outbox_store_close(b);
    outbox_store_close(a);
}
END_TEST

START_TEST(settle_reschedule)
{
    outbox_store_t *s = conf_open();
    conf_stage(s, NULL, ROUTE, 0, 1, NULL);
    conf_claim_t c = conf_claim(s, ROUTE, 10, CONF_LONG_LEASE_US, 0);
    ck_assert_uint_eq(c.n, 1);
    int64_t due = conf_now_us() + 400000;
    int applied = 0;
    conf_ok(s, conf_settle1(s, &c.fence, c.rows[0].id, OUTBOX_SETTLE_RESCHEDULE, due,
                            "broker timeout", &applied));
    ck_assert_int_eq(applied, 1);
    conf_claim_free(&c);

    /* Without stats, that it is pending shows once it is due: a row still
     * processing under a 10-minute lease would not be claimable then. */
    if (CONF_VT_HAS(conf_env.driver->store, stats)) {
        outbox_stats_t st = conf_stats(s, ROUTE);
        ck_assert_msg(st.pending == 1 && st.processing == 0,
                      "a rescheduled row: %llu pending, %llu processing; expected 1 pending",
                      (unsigned long long)st.pending, (unsigned long long)st.processing);
    }
    c = conf_claim(s, ROUTE, 10, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 0, "a row rescheduled 400 ms ahead was claimed at once");
    conf_claim_free(&c);

    while (conf_now_us() < due + 20000)
        conf_sleep_ms(20);
    c = conf_claim(s, ROUTE, 10, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 1, "a rescheduled row was not claimable once due");
    ck_assert_msg(c.rows[0].attempts == 2, "attempts %d on the second claim, expected 2",
                  (int)c.rows[0].attempts);
    ck_assert_msg(c.rows[0].has_last_error && strcmp(c.rows[0].last_error, "broker timeout") == 0,
                  "last_error is \"%s\", expected \"broker timeout\"",
                  c.rows[0].has_last_error ? c.rows[0].last_error : "(null)");
    ck_assert_msg(same_instant(c.rows[0].available_at, due),
                  "available_at is %lld, expected %lld", (long long)c.rows[0].available_at,
                  (long long)due);
    conf_claim_free(&c);
    outbox_store_close(s);
}
END_TEST

START_TEST(settle_dead)
{
    outbox_store_t *s = conf_open();
    conf_stage(s, NULL, ROUTE, 0, 2, NULL);
    conf_claim_t c = conf_claim(s, ROUTE, 10, CONF_LONG_LEASE_US, 0);
    ck_assert_uint_eq(c.n, 2);
    outbox_settle_item_t items[2] = {
        {.id = c.rows[0].id, .kind = OUTBOX_SETTLE_DEAD, .error = "rejected: too large"},
        {.id = c.rows[1].id, .kind = OUTBOX_SETTLE_PUBLISHED},
    };
    size_t applied = 0;
    conf_ok(s, outbox_store_settle(s, &c.fence, items, 2, &applied));
    ck_assert_msg(applied == 2 && items[0].applied == 1 && items[1].applied == 1,
                  "settle applied %zu of 2", applied);
    conf_claim_free(&c);

    const outbox_store_vtable_t *vt = conf_env.driver->store;
    if (CONF_VT_HAS(vt, stats)) {
        outbox_stats_t st = conf_stats(s, ROUTE);
        ck_assert_msg(st.dead == 1 && st.published == 1 && st.pending == 0 && st.processing == 0,
                      "%llu dead, %llu published, %llu pending, %llu processing; expected 1 dead, 1 "
                      "published",
                      (unsigned long long)st.dead, (unsigned long long)st.published,
                      (unsigned long long)st.pending, (unsigned long long)st.processing);
    }
    c = conf_claim(s, ROUTE, 10, 1, 0); /* even a 1 us lease reclaims nothing settled */
    ck_assert_msg(c.n == 0, "a dead or published row was claimed again");
    conf_claim_free(&c);

    if (!CONF_VT_HAS(vt, replay)) {
        /* Without stats, purge tells dead from published: it deletes only
         * published rows, and a deleted event can be staged again. */
        if (!CONF_VT_HAS(vt, stats) && CONF_VT_HAS(vt, purge)) {
            uint64_t purged = 0;
            conf_ok(s, outbox_store_purge(s, ROUTE, conf_now_us() + 1000000, &purged));
            ck_assert_msg(purged == 1, "purge deleted %llu rows, expected the 1 published",
                          (unsigned long long)purged);
            ck_assert_msg(conf_stage(s, NULL, ROUTE, 0, 1, NULL) == 0,
                          "the DEAD row was deleted by purge: it was published, not dead");
        } else if (!CONF_VT_HAS(vt, stats)) {
            conf_unchecked("that the DEAD row is dead and not published",
                           "no stats, replay or purge entry");
        }
        conf_unchecked("that the dead row keeps its last_error and comes back with replay",
                       "no replay entry");
        outbox_store_close(s);
        return;
    }

    /* The reason survives until an operator replays the row. */
    char id[OUTBOX_UUID_STRLEN + 1];
    conf_event_id(id, 0);
    uint64_t count = 0;
    conf_ok(s, outbox_store_replay(s, ROUTE, id, &count));
    ck_assert_msg(count == 1, "replay of the dead event reported %llu rows", (unsigned long long)count);
    c = conf_claim(s, ROUTE, 10, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 1 && c.rows[0].n == 0, "the replayed dead row was not claimable");
    ck_assert_msg(c.rows[0].has_last_error && strcmp(c.rows[0].last_error, "rejected: too large") == 0,
                  "the dead row's last_error is \"%s\", expected \"rejected: too large\"",
                  c.rows[0].has_last_error ? c.rows[0].last_error : "(null)");
    ck_assert_msg(c.rows[0].attempts == 1, "a replayed row claimed once has attempts %d, expected 1",
                  (int)c.rows[0].attempts);
    conf_claim_free(&c);
    outbox_store_close(s);
}
END_TEST

START_TEST(settle_release)
{
    outbox_store_t *s = conf_open();
    conf_stage(s, NULL, ROUTE, 0, 1, NULL);
    conf_claim_t c = conf_claim(s, ROUTE, 10, CONF_LONG_LEASE_US, 0);
    int applied = 0;
    conf_ok(s, conf_settle1(s, &c.fence, c.rows[0].id, OUTBOX_SETTLE_RESCHEDULE,
                            conf_now_us() - 1000000, "retry", &applied));
    conf_claim_free(&c);
    c = conf_claim(s, ROUTE, 10, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 1 && c.rows[0].attempts == 2, "second claim: %zu rows, attempts %d", c.n,
                  c.n ? (int)c.rows[0].attempts : -1);

    conf_ok(s, conf_settle1(s, &c.fence, c.rows[0].id, OUTBOX_SETTLE_RELEASE, 0, NULL, &applied));
    ck_assert_msg(applied == 1, "release was not applied");
    conf_claim_free(&c);
    /* Without stats, the claim below shows it pending: a row still
     * processing under a 10-minute lease would not be claimable. */
    if (CONF_VT_HAS(conf_env.driver->store, stats)) {
        outbox_stats_t st = conf_stats(s, ROUTE);
        ck_assert_msg(st.pending == 1 && st.processing == 0,
                      "a released row: %llu pending, %llu processing; expected 1 pending",
                      (unsigned long long)st.pending, (unsigned long long)st.processing);
    }

    /* attempts was 2; the release gives one back, this claim charges one. */
    c = conf_claim(s, ROUTE, 10, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 1, "a released row was not claimable at once");
    ck_assert_msg(c.rows[0].attempts == 2,
                  "attempts %d after release and claim, expected 2 (release must give back the "
                  "attempt its claim charged)",
                  (int)c.rows[0].attempts);
    conf_claim_free(&c);
    outbox_store_close(s);
}
END_TEST

/* A fence is spent once its row has left processing: settling the same
 * row again with the same fence, with any verdict, changes nothing. A
 * check of the fence alone, without the status, would let a relay's
 * retried settle round trip reopen a published or dead row. */
START_TEST(settle_again_same_fence)
{
    outbox_store_t *s = conf_open();
    conf_stage(s, NULL, ROUTE, 0, 3, NULL);
    conf_claim_t c = conf_claim(s, ROUTE, 10, CONF_LONG_LEASE_US, 0);
    ck_assert_uint_eq(c.n, 3);
    static const int first[3] = {OUTBOX_SETTLE_PUBLISHED, OUTBOX_SETTLE_DEAD, OUTBOX_SETTLE_RELEASE};
    static const int again[2][3] = {
        {OUTBOX_SETTLE_RELEASE, OUTBOX_SETTLE_RELEASE, OUTBOX_SETTLE_RELEASE},
        {OUTBOX_SETTLE_PUBLISHED, OUTBOX_SETTLE_RESCHEDULE, OUTBOX_SETTLE_DEAD},
    };
    static const char *const state[3] = {"published", "dead", "released"};
    outbox_settle_item_t items[3];
    for (size_t i = 0; i < 3; i++)
        items[i] = (outbox_settle_item_t){.id = c.rows[i].id, .kind = first[i], .error = "first"};
    size_t applied = 0;
    conf_ok(s, outbox_store_settle(s, &c.fence, items, 3, &applied));
    ck_assert_msg(applied == 3, "the first settle applied %zu of 3", applied);

    for (size_t round = 0; round < 2; round++)
        for (size_t i = 0; i < 3; i++) {
            int done = -1;
            int rc = conf_settle1(s, &c.fence, c.rows[i].id, again[round][i],
                                  conf_now_us() - 1000000, "again", &done);
            ck_assert_msg(rc == OUTBOX_OK || rc == OUTBOX_ECONFLICT,
                          "settling a %s row again with its spent fence: %s (%s)", state[i],
                          outbox_strerror(rc), outbox_store_message(s));
            ck_assert_msg(done == 0, "a %s row settled again (%s) with its spent fence was applied",
                          state[i], kind_name(again[round][i]));
        }

    /* Only the released row is claimable, charged its one new attempt. */
    conf_claim_t after = conf_claim(s, ROUTE, 10, 1, 0);
    ck_assert_msg(after.n == 1 && after.rows[0].n == 2,
                  "after settling again with a spent fence, claim took %zu rows (first: event %lu), "
                  "expected only the released event 2",
                  after.n, after.n ? after.rows[0].n : 0UL);
    ck_assert_msg(after.rows[0].attempts == 1,
                  "the released row has attempts %d, expected 1 (a second release took one more)",
                  (int)after.rows[0].attempts);
    ck_assert_msg(!after.rows[0].has_last_error,
                  "the released row came back with last_error \"%s\"", after.rows[0].last_error);
    conf_claim_free(&after);
    conf_claim_free(&c);
    outbox_store_close(s);
}
END_TEST

/* The claimed rows are the driver's until its next claim: the relay
 * settles with the ids the claim returned, in several calls, and reads the
 * rows between them. A settle that frees or reuses them (an arena reset at
 * the wrong time) settles garbage ids or crashes under AddressSanitizer. */
static void same_rows(const conf_claim_t *c, const outbox_row_t *raw, const char *when)
{
    for (size_t i = 0; i < c->n; i++) {
        ck_assert_msg(raw[i].id != NULL && strcmp(raw[i].id, c->rows[i].id) == 0,
                      "%s, claimed row %zu's id reads \"%s\", the claim returned %s", when, i,
                      raw[i].id ? raw[i].id : "(null)", c->rows[i].id);
        ck_assert_msg(conf_event_n(raw[i].event_id) == c->rows[i].n,
                      "%s, claimed row %zu's event_id changed", when, i);
        ck_assert_msg(raw[i].route != NULL && strcmp(raw[i].route, ROUTE) == 0,
                      "%s, claimed row %zu's route changed", when, i);
        ck_assert_msg(raw[i].payload != NULL && strstr(raw[i].payload, "\"n\"") != NULL,
                      "%s, claimed row %zu's payload changed", when, i);
    }
}

START_TEST(settle_with_claimed_rows)
{
    outbox_store_t *s = conf_open();
    conf_stage(s, NULL, ROUTE, 0, 6, NULL);
    conf_claim_t c = conf_claim(s, ROUTE, 10, CONF_LONG_LEASE_US, 0);
    ck_assert_uint_eq(c.n, 6);
    const outbox_row_t *raw = conf_claim_raw(&c);
    ck_assert_msg(raw != NULL, "internal: the claim's own rows are not at hand");
    same_rows(&c, raw, "right after the claim");

    outbox_settle_item_t one = {.id = raw[0].id, .kind = OUTBOX_SETTLE_PUBLISHED};
    size_t applied = 0;
    conf_ok(s, outbox_store_settle(s, &c.fence, &one, 1, &applied));
    ck_assert_msg(applied == 1, "settling claimed row 0 by the id the claim returned applied %zu",
                  applied);
    same_rows(&c, raw, "after a settle of one row");

    int64_t past = conf_now_us() - 1000000;
    outbox_settle_item_t two[2] = {
        {.id = raw[1].id, .kind = OUTBOX_SETTLE_RESCHEDULE, .available_at = past, .error = "again"},
        {.id = raw[2].id, .kind = OUTBOX_SETTLE_RESCHEDULE, .available_at = past, .error = "again"},
    };
    conf_ok(s, outbox_store_settle(s, &c.fence, two, 2, &applied));
    ck_assert_msg(applied == 2, "settling claimed rows 1 and 2 by their own ids applied %zu", applied);
    same_rows(&c, raw, "after a second settle");

    outbox_settle_item_t rest[3];
    for (size_t i = 0; i < 3; i++)
        rest[i] = (outbox_settle_item_t){.id = raw[3 + i].id, .kind = OUTBOX_SETTLE_PUBLISHED};
    conf_ok(s, outbox_store_settle(s, &c.fence, rest, 3, &applied));
    ck_assert_msg(applied == 3, "settling claimed rows 3 to 5 by their own ids applied %zu", applied);
    same_rows(&c, raw, "after a third settle");
    conf_claim_free(&c);

    /* Only the two rescheduled rows come back. */
    c = conf_claim(s, ROUTE, 10, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 2 && c.rows[0].n == 1 && c.rows[1].n == 2,
                  "after the settles, a claim took %zu rows (first: event %lu), expected events 1 "
                  "and 2",
                  c.n, c.n ? c.rows[0].n : 0UL);
    conf_claim_free(&c);
    outbox_store_close(s);
}
END_TEST

/* A release with an available_at (ABI 1.5: the relay's deferred rows)
 * gives the attempt back and keeps the row out of claims until then; a
 * later row of its key stays behind it. Required of a driver that claims
 * 1.5; for an older one the battery only notes what it saw. */
START_TEST(settle_release_delayed)
{
    outbox_store_t *s = conf_open();
    conf_stage(s, NULL, ROUTE, 0, 2, "k");
    conf_claim_t c = conf_claim(s, ROUTE, 1, CONF_LONG_LEASE_US, 0);
    ck_assert_uint_eq(c.n, 1);
    int applied = 0;
    int64_t until = conf_now_us() + 1500000;
    conf_ok(s, conf_settle1(s, &c.fence, c.rows[0].id, OUTBOX_SETTLE_RELEASE, until, NULL, &applied));
    ck_assert_msg(applied == 1, "the delayed release was not applied");
    unsigned long head = c.rows[0].n;
    conf_claim_free(&c);
    int strict = conf_env.driver->abi_minor >= 5;
    c = conf_claim(s, ROUTE, 10, CONF_LONG_LEASE_US, 0);
    if (c.n != 0 && !strict) {
        conf_note("a release with available_at holds the row back",
                  "the driver claims ABI 1.4 or older and ignores it: the row is claimable at once");
        conf_claim_free(&c);
        outbox_store_close(s);
        return;
    } else {
        ck_assert_msg(c.n == 0 || conf_now_us() >= until,
                      "%zu rows claimable before the released head's available_at (the head, or its "
                      "key's later row past it)",
                      c.n);
    }
    conf_claim_free(&c);
    int64_t wait_ms = (until - conf_now_us()) / 1000 + 100;
    if (wait_ms > 0)
        conf_sleep_ms((int)wait_ms);
    c = conf_claim(s, ROUTE, 10, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n >= 1 && c.rows[0].n == head, "after available_at: %zu rows, the first not the head",
                  c.n);
    ck_assert_msg(c.rows[0].attempts == 1,
                  "attempts %d after a delayed release and a new claim, expected 1 (the release gives "
                  "back the attempt its claim charged)",
                  (int)c.rows[0].attempts);
    conf_claim_free(&c);
    outbox_store_close(s);
}
END_TEST

/* The ids of a claim's rows, for renew. */
static const char **ids_of(const conf_claim_t *c)
{
    const char **ids = calloc(c->n ? c->n : 1, sizeof *ids);
    ck_assert(ids != NULL);
    for (size_t i = 0; i < c->n; i++)
        ids[i] = c->rows[i].id;
    return ids;
}

/* A renewal moves the lease on and the fence with it: past the claim's
 * lease but within the renewal's, another claim takes nothing; the claim's
 * first fence is refused from then on and the renewed one settles. */
START_TEST(renew_moves_lease_and_fence)
{
    const int64_t lease = 1500000; /* wide margins: every step may be slow */
    outbox_store_t *a = conf_open();
    outbox_store_t *b = conf_open();
    conf_stage(a, NULL, ROUTE, 0, 3, NULL);
    conf_claim_t c = conf_claim(a, ROUTE, 10, lease, 0);
    ck_assert_uint_eq(c.n, 3);
    int64_t claimed_at = conf_now_us();
    const char **ids = ids_of(&c);
    conf_sleep_ms(1000);
    outbox_fence_t fence = c.fence;
    size_t renewed = 99;
    conf_ok(a, outbox_store_renew(a, ROUTE, &fence, ids, c.n, &renewed));
    int64_t renewed_at = conf_now_us();
    ck_assert_msg(renewed == 3, "a renewal of the 3 rows a claim holds renewed %zu", renewed);
    ck_assert_msg(memcmp(&fence, &c.fence, sizeof fence) != 0, "the renewal left the fence as it was");
    int64_t wait_ms = (claimed_at + lease + 300000 - conf_now_us()) / 1000;
    if (wait_ms > 0)
        conf_sleep_ms((int)wait_ms);
    conf_claim_t other = conf_claim(b, ROUTE, 10, lease, 0);
    if (conf_now_us() - renewed_at < lease)
        ck_assert_msg(other.n == 0,
                      "a claim %lld ms after the first one (lease %lld ms) took %zu renewed rows, "
                      "renewed %lld ms before",
                      (long long)((conf_now_us() - claimed_at) / 1000), (long long)(lease / 1000),
                      other.n, (long long)((conf_now_us() - renewed_at) / 1000));
    else
        conf_note("renewed rows are not taken over", "the steps took longer than the lease");
    int applied = -1;
    int rc = conf_settle1(a, &c.fence, c.rows[0].id, OUTBOX_SETTLE_PUBLISHED, 0, NULL, &applied);
    ck_assert_msg(rc == OUTBOX_ECONFLICT && applied == 0,
                  "a settle with the fence from before the renewal returned %s, applied %d",
                  outbox_strerror(rc), applied);
    if (other.n == 0) {
        outbox_settle_item_t items[3];
        for (size_t i = 0; i < 3; i++)
            items[i] = (outbox_settle_item_t){.id = ids[i], .kind = OUTBOX_SETTLE_PUBLISHED};
        size_t n_applied = 0;
        rc = outbox_store_settle(a, &fence, items, 3, &n_applied);
        ck_assert_msg(rc == OUTBOX_OK && n_applied == 3,
                      "a settle with the renewed fence returned %s and applied %zu of 3",
                      outbox_strerror(rc), n_applied);
    }
    free(ids);
    conf_claim_free(&other);
    conf_claim_free(&c);
}
END_TEST

/* A renewal with a fence the rows no longer hold (they were claimed again
 * after the lease ran out, or the fence is garbage) changes nothing: it
 * renews 0 rows, says OUTBOX_ECONFLICT, leaves the caller's fence alone,
 * and the new holder settles as if it never happened. */
START_TEST(renew_with_stale_fence_fails)
{
    outbox_store_t *a = conf_open();
    outbox_store_t *b = conf_open();
    conf_stage(a, NULL, ROUTE, 0, 2, NULL);
    conf_claim_t stale = conf_claim(a, ROUTE, 10, CONF_LONG_LEASE_US, 0);
    ck_assert_uint_eq(stale.n, 2);
    const char **ids = ids_of(&stale);
    conf_sleep_ms(40);
    conf_claim_t fresh = conf_claim(b, ROUTE, 10, 10000, 0); /* 10 ms lease: a's claim expired */
    ck_assert_msg(fresh.n == 2, "the reclaim took %zu of 2 rows", fresh.n);

    outbox_fence_t fence = stale.fence;
    size_t renewed = 99;
    int rc = outbox_store_renew(a, ROUTE, &fence, ids, 2, &renewed);
    ck_assert_msg(rc == OUTBOX_ECONFLICT, "a renewal with a stale fence returned %s, expected OUTBOX_ECONFLICT",
                  outbox_strerror(rc));
    ck_assert_msg(renewed == 0, "a renewal with a stale fence renewed %zu rows", renewed);
    ck_assert_msg(memcmp(&fence, &stale.fence, sizeof fence) == 0,
                  "a renewal that renewed nothing changed the caller's fence");
    outbox_fence_t garbage;
    memset(&garbage, 0, sizeof garbage);
    garbage.stamp = 1;
    snprintf(garbage.token, sizeof garbage.token, "not-a-token");
    renewed = 99;
    rc = outbox_store_renew(a, ROUTE, &garbage, ids, 2, &renewed);
    ck_assert_msg(rc == OUTBOX_ECONFLICT && renewed == 0,
                  "a renewal with a made-up fence returned %s and renewed %zu", outbox_strerror(rc), renewed);

    outbox_settle_item_t items[2];
    for (size_t i = 0; i < 2; i++)
        items[i] = (outbox_settle_item_t){.id = fresh.rows[i].id, .kind = OUTBOX_SETTLE_PUBLISHED};
    size_t applied = 0;
    rc = outbox_store_settle(b, &fresh.fence, items, 2, &applied);
    ck_assert_msg(rc == OUTBOX_OK && applied == 2,
                  "after stale renewals the new holder's settle returned %s and applied %zu of 2",
                  outbox_strerror(rc), applied);
    free(ids);
    conf_claim_free(&fresh);
    conf_claim_free(&stale);
}
END_TEST

void conf_cases_settle(conf_cases_t *c)
{
    conf_add(c, fencing_after_reclaim, 0, 0, 20);
    conf_add(c, settle_again_same_fence, 0, 0, 20);
    conf_add(c, settle_with_claimed_rows, 0, 0, 20);
    conf_add(c, settle_reschedule, 0, 0, 20);
    conf_add(c, settle_dead, 0, 0, 20);
    conf_add(c, settle_release, 0, 0, 20);
    conf_add(c, settle_release_delayed, 0, 0, 20);
    conf_add(c, renew_moves_lease_and_fence, CONF_NEED_RENEW, 0, 30);
    conf_add(c, renew_with_stale_fence_fails, CONF_NEED_RENEW, 0, 20);
}
