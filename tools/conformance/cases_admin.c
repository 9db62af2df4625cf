/* Conformance cases: what an operator runs: replay, purge and stats. */
#include <string.h>

#include "conf_int.h"

#define ROUTE "conf.admin"

START_TEST(replay_one_event)
{
    outbox_store_t *s = conf_open();
    conf_stage(s, NULL, ROUTE, 0, 3, NULL);
    conf_claim_t c = conf_claim(s, ROUTE, 10, CONF_LONG_LEASE_US, 0);
    ck_assert_uint_eq(c.n, 3);
    conf_settle_all(s, &c, OUTBOX_SETTLE_DEAD);
    conf_claim_free(&c);

    char id[OUTBOX_UUID_STRLEN + 1];
    conf_event_id(id, 1);
    uint64_t count = 0;
    conf_ok(s, outbox_store_replay(s, ROUTE, id, &count));
    ck_assert_msg(count == 1, "replaying event 1 of 3 dead rows reported %llu rows",
                  (unsigned long long)count);
    c = conf_claim(s, ROUTE, 10, 1, 0);
    ck_assert_msg(c.n == 1 && c.rows[0].n == 1,
                  "after replaying event 1, claim took %zu rows (first: event %lu), expected only "
                  "event 1",
                  c.n, c.n ? c.rows[0].n : 0UL);
    ck_assert_msg(c.rows[0].attempts == 1, "the replayed row claimed once has attempts %d",
                  (int)c.rows[0].attempts);
    conf_claim_free(&c);
    outbox_store_close(s);
}
END_TEST

/* Purge deletes published rows older than its bound, of its route, and
 * nothing else. What a purge left is seen through its count and through
 * staging the event again (a row still there makes it a duplicate). */
START_TEST(purge_only_old_published)
{
    outbox_store_t *s = conf_open();
    conf_stage(s, NULL, ROUTE, 0, 4, NULL);
    conf_stage(s, NULL, ROUTE ".other", 100, 1, NULL);
    conf_claim_t c = conf_claim(s, ROUTE, 3, CONF_LONG_LEASE_US, 0);
    ck_assert_uint_eq(c.n, 3);
    outbox_settle_item_t items[3] = {
        {.id = c.rows[0].id, .kind = OUTBOX_SETTLE_PUBLISHED},
        {.id = c.rows[1].id, .kind = OUTBOX_SETTLE_PUBLISHED},
        {.id = c.rows[2].id, .kind = OUTBOX_SETTLE_DEAD, .error = "rejected"},
    };
    size_t applied = 0;
    conf_ok(s, outbox_store_settle(s, &c.fence, items, 3, &applied));
    ck_assert_uint_eq(applied, 3);
    conf_claim_free(&c);
    c = conf_claim(s, ROUTE ".other", 10, CONF_LONG_LEASE_US, 0);
    conf_settle_all(s, &c, OUTBOX_SETTLE_PUBLISHED);
    conf_claim_free(&c);

    conf_sleep_ms(30);
    int64_t bound = conf_now_us();
    conf_sleep_ms(30);
    c = conf_claim(s, ROUTE, 10, CONF_LONG_LEASE_US, 0); /* event 3, published after the bound */
    ck_assert_msg(c.n == 1 && c.rows[0].n == 3, "expected event 3 still pending");
    conf_settle_all(s, &c, OUTBOX_SETTLE_PUBLISHED);
    conf_claim_free(&c);

    uint64_t count = 0;
    conf_ok(s, outbox_store_purge(s, ROUTE, bound, &count));
    ck_assert_msg(count == 2,
                  "purge before the bound deleted %llu rows, expected the 2 published before it "
                  "(not the one published after it, not the dead one, not another route's)",
                  (unsigned long long)count);
    ck_assert_msg(conf_stage(s, NULL, ROUTE, 0, 2, NULL) == 2,
                  "the purged events 0 and 1 are still there");
    ck_assert_msg(conf_stage(s, NULL, ROUTE, 2, 2, NULL) == 0,
                  "purge deleted the dead event 2 or the event 3 published after its bound");
    ck_assert_msg(conf_stage(s, NULL, ROUTE ".other", 100, 1, NULL) == 0,
                  "purge of one route deleted another route's published row");
    outbox_store_close(s);
}
END_TEST

#define ck_assert_counts(st, pend, proc, pub, dd, what)                                           \
    ck_assert_msg((st).pending == (pend) && (st).processing == (proc) && (st).published == (pub) &&  \
                      (st).dead == (dd),                                                          \
                  "stats of %s: %llu pending, %llu processing, %llu published, %llu dead; "       \
                  "expected %d, %d, %d, %d",                                                      \
                  what, (unsigned long long)(st).pending, (unsigned long long)(st).processing,    \
                  (unsigned long long)(st).published, (unsigned long long)(st).dead, pend, proc,  \
                  pub, dd)

START_TEST(stats_per_route)
{
    outbox_store_t *s = conf_open();
    conf_stage(s, NULL, ROUTE ".b", 100, 4, NULL); /* the oldest rows, of another route */
    for (unsigned long i = 0; i < 3; i++) {
        conf_sleep_ms(2);
        conf_stage(s, NULL, ROUTE, i, 1, NULL);
    }
    conf_claim_t c = conf_claim(s, ROUTE, 1, CONF_LONG_LEASE_US, 0); /* event 0: processing */
    ck_assert_uint_eq(c.n, 1);
    conf_claim_free(&c);
    c = conf_claim(s, ROUTE ".b", 1, CONF_LONG_LEASE_US, 0);
    conf_settle_all(s, &c, OUTBOX_SETTLE_PUBLISHED);
    conf_claim_free(&c);

    outbox_stats_t a = conf_stats(s, ROUTE);
    outbox_stats_t b = conf_stats(s, ROUTE ".b");
    outbox_stats_t all = conf_stats(s, NULL);
    ck_assert_counts(a, 2, 1, 0, 0, "route a");
    ck_assert_counts(b, 3, 0, 1, 0, "route b");
    ck_assert_counts(all, 5, 1, 1, 0, "every route");

    /* The oldest pending row of route a is event 1 (event 0 is in flight). */
    c = conf_claim(s, ROUTE, 10, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 2 && c.rows[0].n == 1, "expected events 1 and 2 pending on route a");
    ck_assert_msg(a.oldest_pending_created_at == c.rows[0].created_at,
                  "route a's oldest pending created_at is %lld, expected event 1's %lld",
                  (long long)a.oldest_pending_created_at, (long long)c.rows[0].created_at);
    conf_claim_free(&c);
    c = conf_claim(s, ROUTE ".b", 10, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 3, "expected route b's 3 pending rows");
    ck_assert_msg(b.oldest_pending_created_at == c.rows[0].created_at &&
                      all.oldest_pending_created_at == c.rows[0].created_at,
                  "route b's / every route's oldest pending created_at are %lld / %lld, expected "
                  "%lld",
                  (long long)b.oldest_pending_created_at, (long long)all.oldest_pending_created_at,
                  (long long)c.rows[0].created_at);
    conf_claim_free(&c);
    outbox_store_close(s);
}
END_TEST

void conf_cases_admin(conf_cases_t *c)
{
    conf_add(c, replay_one_event, CONF_NEED_REPLAY, 0, 20);
    conf_add(c, purge_only_old_published, CONF_NEED_PURGE, 0, 20);
    conf_add(c, stats_per_route, CONF_NEED_STATS, 0, 20);
}
