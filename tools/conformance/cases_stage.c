/* Conformance cases: staging, in and out of transactions. Rows are looked
 * at through claim, the one read every store must have. */
#include <stdio.h>
#include <string.h>

#include "conf_int.h"

#define ROUTE "conf.stage"

/* Every row of route, claimed and left processing; fails the case on error. */
static size_t count_claimable(outbox_store_t *s, const char *route)
{
    conf_claim_t c = conf_claim(s, route, 1000, CONF_LONG_LEASE_US, 0);
    size_t n = c.n;
    conf_claim_free(&c);
    return n;
}

START_TEST(stage_rollback_leaves_nothing)
{
    outbox_store_t *s = conf_open();
    conf_ok(s, outbox_store_begin(s));
    ck_assert_uint_eq(conf_stage(s, NULL, ROUTE, 0, 3, NULL), 3);
    conf_ok(s, outbox_store_rollback(s));
    size_t n = count_claimable(s, ROUTE);
    ck_assert_msg(n == 0, "a rolled-back transaction left %zu of its 3 rows claimable", n);
    /* Not even their (route, event_id) keys may survive. */
    size_t staged = conf_stage(s, NULL, ROUTE, 0, 3, NULL);
    ck_assert_msg(staged == 3,
                  "after the rollback, staging the same event ids inserted %zu of 3: rolled-back "
                  "rows left duplicates behind",
                  staged);
    outbox_store_close(s);
}
END_TEST

START_TEST(stage_commit_visible)
{
    outbox_store_t *s = conf_open();
    outbox_store_t *other = conf_open();
    conf_ok(s, outbox_store_begin(s));
    ck_assert_uint_eq(conf_stage(s, NULL, ROUTE, 0, 3, NULL), 3);
    conf_ok(s, outbox_store_commit(s));
    /* Outside a transaction the call is atomic on its own. */
    ck_assert_uint_eq(conf_stage(s, NULL, ROUTE, 3, 2, NULL), 2);

    conf_claim_t c = conf_claim(other, ROUTE, 100, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 5, "another handle sees %zu of the 5 committed rows", c.n);
    for (size_t i = 0; i < c.n; i++) {
        ck_assert_msg(c.rows[i].n == i, "row %zu is event %lu, expected %zu", i, c.rows[i].n, i);
        ck_assert_str_eq(c.rows[i].route, ROUTE);
        ck_assert_msg(c.rows[i].attempts == 1, "a fresh row claimed once has attempts %d, expected 1",
                      (int)c.rows[i].attempts);
        ck_assert_msg(c.rows[i].available_at == 0, "a fresh row has available_at %lld, expected NULL",
                      (long long)c.rows[i].available_at);
        ck_assert_msg(!c.rows[i].has_last_error, "a fresh row has last_error \"%s\"",
                      c.rows[i].last_error);
    }
    /* One created_at per stage call. */
    ck_assert_msg(c.rows[0].created_at == c.rows[2].created_at &&
                      c.rows[3].created_at == c.rows[4].created_at,
                  "rows staged in one call have different created_at");
    conf_claim_free(&c);
    outbox_store_close(other);
    outbox_store_close(s);
}
END_TEST

START_TEST(stage_duplicate_skipped)
{
    outbox_store_t *s = conf_open();
    ck_assert_uint_eq(conf_stage(s, NULL, ROUTE, 0, 2, NULL), 2);
    size_t staged = conf_stage(s, NULL, ROUTE, 1, 2, NULL); /* events 1 (again) and 2 */
    ck_assert_msg(staged == 1, "staging events 1 and 2 after 1 reported %zu staged, expected 1",
                  staged);

    /* A duplicate inside one call is skipped too. */
    char id[OUTBOX_UUID_STRLEN + 1];
    conf_event_id(id, 3);
    outbox_event_t twice[2] = {
        {.event_id = id, .event_type = "conformance.test", .payload = "{\"n\":3}"},
        {.event_id = id, .event_type = "conformance.test", .payload = "{\"n\":3}"},
    };
    conf_ok(s, outbox_store_stage(s, NULL, ROUTE, twice, 2, &staged));
    ck_assert_msg(staged == 1, "one call with event 3 twice reported %zu staged, expected 1", staged);

    /* Uniqueness is per route: the same event id on another route is new. */
    staged = conf_stage(s, NULL, ROUTE ".other", 0, 1, NULL);
    ck_assert_msg(staged == 1, "event 0 on a second route reported %zu staged, expected 1", staged);

    conf_claim_t c = conf_claim(s, ROUTE, 100, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 4, "%zu rows on the route, expected 4 (events 0-3 once each)", c.n);
    for (size_t i = 0; i < c.n; i++)
        ck_assert_msg(c.rows[i].n == i, "row %zu is event %lu, expected %zu", i, c.rows[i].n, i);
    conf_claim_free(&c);
    ck_assert_uint_eq(count_claimable(s, ROUTE ".other"), 1);
    outbox_store_close(s);
}
END_TEST

START_TEST(stage_require_transaction)
{
    outbox_store_t *s = conf_open();
    outbox_route_config_t cfg = {.struct_size = sizeof cfg, .route = ROUTE, .require_transaction = 1};
    conf_ok(s, outbox_store_configure_route(s, &cfg));
    char id[OUTBOX_UUID_STRLEN + 1];
    conf_event_id(id, 0);
    outbox_event_t ev = {.event_id = id, .event_type = "conformance.test", .payload = "{}"};
    size_t staged = 99;
    int rc = outbox_store_stage(s, NULL, ROUTE, &ev, 1, &staged);
    ck_assert_msg(rc != OUTBOX_OK, "a require_transaction route staged outside a transaction");
    ck_assert_msg(staged == 0, "a refused stage reported %zu staged", staged);
    ck_assert_msg(count_claimable(s, ROUTE) == 0, "a refused stage left a row behind");

    if (outbox_store_capabilities(s) & OUTBOX_STORE_CAP_TRANSACTIONS) {
        conf_ok(s, outbox_store_begin(s));
        ck_assert_uint_eq(conf_stage(s, NULL, ROUTE, 1, 1, NULL), 1);
        conf_ok(s, outbox_store_commit(s));
        ck_assert_msg(count_claimable(s, ROUTE) == 1,
                      "staging inside a transaction on a require_transaction route left no row");
    }
    outbox_store_close(s);
}
END_TEST

START_TEST(stage_payload_not_json)
{
    static const char *const bad[] = {"{not json", "", "{\"a\":1} trailing", "[1,2", "nul"};
    outbox_store_t *s = conf_open();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char id0[OUTBOX_UUID_STRLEN + 1], id1[OUTBOX_UUID_STRLEN + 1];
        conf_event_id(id0, 2 * i);
        conf_event_id(id1, 2 * i + 1);
        /* The good event first: nothing of a refused call may be written. */
        outbox_event_t ev[2] = {
            {.event_id = id0, .event_type = "conformance.test", .payload = "{\"ok\":true}"},
            {.event_id = id1, .event_type = "conformance.test", .payload = bad[i],
             .payload_len = strlen(bad[i])},
        };
        size_t staged = 99;
        int rc = outbox_store_stage(s, NULL, ROUTE, ev, 2, &staged);
        ck_assert_msg(rc == OUTBOX_EINVAL, "payload \"%s\" gave %s, expected OUTBOX_EINVAL", bad[i],
                      outbox_strerror(rc));
        ck_assert_msg(staged == 0, "payload \"%s\": %zu reported staged", bad[i], staged);
    }
    ck_assert_msg(count_claimable(s, ROUTE) == 0, "a refused stage wrote rows");
    ck_assert_uint_eq(conf_stage(s, NULL, ROUTE, 100, 1, NULL), 1);
    outbox_store_close(s);
}
END_TEST

/* Stages through the native handle native_begin gives, as an application
 * would inside its own transaction, then ends that transaction. */
static void stage_native(int commit)
{
    void *h = NULL;
    outbox_store_t *s = conf_open_raw(&h);
    void *native = conf_native_begin(h);
    ck_assert_uint_eq(conf_stage(s, native, ROUTE, 0, 3, NULL), 3);
    conf_native_end(h, native, commit);
    size_t n = count_claimable(s, ROUTE);
    if (commit) {
        ck_assert_msg(n == 3, "after the native transaction committed, %zu of 3 rows are visible", n);
    } else {
        ck_assert_msg(n == 0, "after the native transaction rolled back, %zu rows are visible", n);
        ck_assert_uint_eq(conf_stage(s, NULL, ROUTE, 0, 3, NULL), 3);
    }
    outbox_store_close(s);
}

START_TEST(stage_native_commit)
{
    stage_native(1);
}
END_TEST

START_TEST(stage_native_rollback)
{
    stage_native(0);
}
END_TEST

/* Events a store may refuse after the core has let them through: JSON that
 * holds \u0000 (PostgreSQL's jsonb cannot), and a traceparent on a table
 * without the column. Whatever the store does with each, a refusal
 * inside a transaction must leave the transaction as it was: the events
 * staged before it stay, later stages work, and commit keeps them all. */
static void stage_refused_in_tx(int native_tx)
{
    void *h = NULL;
    outbox_store_t *s = native_tx ? conf_open_raw(&h) : conf_open();
    const outbox_store_vtable_t *vt = conf_env.driver->store;
    outbox_diag_t d = {0};
    void *native = NULL;
    if (native_tx)
        native = conf_native_begin(h);
    else
        conf_ok(s, outbox_store_begin(s));
    ck_assert_uint_eq(conf_stage(s, native, ROUTE, 0, 2, NULL), 2);

    static const char *const payloads[] = {"{\"text\":\"a\\u0000b\"}", "\"\\u0000\"", "{}"};
    static const char *const traceparents[] = {NULL, NULL,
                                               "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"};
    int accepted[3] = {0};
    for (size_t k = 0; k < 3; k++) {
        char id[OUTBOX_UUID_STRLEN + 1];
        conf_event_id(id, 10 + k);
        /* A good event first in the same call: a refused call writes none of it. */
        char id0[OUTBOX_UUID_STRLEN + 1];
        conf_event_id(id0, 20 + k);
        outbox_event_t ev[2] = {
            {.event_id = id0, .event_type = "conformance.test", .payload = "{}"},
            {.event_id = id, .event_type = "conformance.test", .payload = payloads[k],
             .traceparent = traceparents[k]},
        };
        size_t staged = 99;
        int rc = outbox_store_stage(s, native, ROUTE, ev, 2, &staged);
        accepted[k] = rc == OUTBOX_OK;
        ck_assert_msg(rc == OUTBOX_OK || staged == 0, "refused stage %zu (%s) reported %zu staged", k,
                      outbox_strerror(rc), staged);
    }
    size_t later = 0;
    char id[OUTBOX_UUID_STRLEN + 1];
    conf_event_id(id, 2);
    outbox_event_t ev = {.event_id = id, .event_type = "conformance.test", .payload = "{}"};
    int rc = outbox_store_stage(s, native, ROUTE, &ev, 1, &later);
    ck_assert_msg(rc == OUTBOX_OK && later == 1,
                  "after a refused stage, staging in the same transaction gave %s (%s): the refusal "
                  "spoiled the transaction",
                  outbox_strerror(rc), outbox_store_message(s));
    if (native_tx) {
        rc = vt->native_end(h, native, 1, &d);
        ck_assert_msg(rc == OUTBOX_OK, "committing the native transaction after a refused stage: %s (%s)",
                      outbox_strerror(rc), d.message);
    } else {
        rc = outbox_store_commit(s);
        ck_assert_msg(rc == OUTBOX_OK, "commit after a refused stage: %s (%s)", outbox_strerror(rc),
                      outbox_store_message(s));
    }

    /* Events 0, 1 and 2, and each refused call's pair only when accepted. */
    int want[32] = {0};
    size_t n_want = 3;
    want[0] = want[1] = want[2] = 1;
    for (size_t k = 0; k < 3; k++)
        if (accepted[k]) {
            want[10 + k] = want[20 + k] = 1;
            n_want += 2;
        }
    conf_claim_t c = conf_claim(s, ROUTE, 100, CONF_LONG_LEASE_US, 0);
    for (size_t i = 0; i < c.n; i++)
        ck_assert_msg(c.rows[i].n < 32 && want[c.rows[i].n],
                      "event %lu is in the table after the commit, but its stage was refused",
                      c.rows[i].n);
    ck_assert_msg(c.n == n_want,
                  "after the commit %zu events are in the table, expected %zu: the events staged "
                  "before the refusal were lost with it",
                  c.n, n_want);
    conf_claim_free(&c);
    outbox_store_close(s);
}

START_TEST(stage_refused_keeps_tx)
{
    stage_refused_in_tx(0);
}
END_TEST

START_TEST(stage_refused_keeps_native_tx)
{
    stage_refused_in_tx(1);
}
END_TEST

/* A stage call that fails while it writes, not in a check before: its
 * last row reuses the id of a row committed earlier (the host never does
 * that: it mints a fresh id for every row, and every store keeps ids
 * unique), so only the database finds the clash, after the rows before it
 * in the call are written. Those rows must go with the call (all or
 * nothing), and the caller's transaction either goes on with its own
 * earlier work intact, or says it failed: every later stage and the commit
 * fail and nothing of it is committed. What a store may never do is
 * commit a part of the failed call, or quietly drop the caller's work. */
#define TAKEN_ID "01900000-0000-7000-8000-00000000e000"

/* Events ns[] with row ids ids[], in one call of the driver's own stage
 * entry (the core would mint the ids); ctx says which transaction. */
static int stage_rows_raw(void *h, const outbox_stage_ctx_t *ctx, const char *const *ids,
                          const unsigned long *ns, size_t count, size_t *staged, outbox_diag_t *d)
{
    outbox_row_t rows[4];
    char eids[4][OUTBOX_UUID_STRLEN + 1], payloads[4][32];
    ck_assert_msg(count <= 4, "internal: stage_rows_raw takes at most 4 rows");
    int64_t now = conf_now_us();
    for (size_t i = 0; i < count; i++) {
        conf_event_id(eids[i], ns[i]);
        snprintf(payloads[i], sizeof payloads[i], "{\"n\":%lu}", ns[i]);
        rows[i] = (outbox_row_t){
            .id = ids[i],
            .route = ROUTE,
            .event_id = eids[i],
            .event_type = "conformance.test",
            .occurred_at = now,
            .payload = payloads[i],
            .payload_len = strlen(payloads[i]),
            .created_at = now,
        };
    }
    *staged = 0;
    return conf_env.driver->store->stage(h, ctx, rows, count, staged, d);
}

static void stage_fails_midway(int native_tx)
{
    void *h = NULL;
    outbox_store_t *s = conf_open_raw(&h);
    ck_assert_msg(h != NULL, "internal: no driver handle");
    const outbox_store_vtable_t *vt = conf_env.driver->store;
    outbox_diag_t d = {0};

    /* Event 0, committed on its own, holds the id the failing call reuses. */
    static const char *const taken[] = {TAKEN_ID};
    static const unsigned long taken_n[] = {0};
    outbox_stage_ctx_t alone = {.struct_size = sizeof alone};
    size_t staged = 0;
    int rc = stage_rows_raw(h, &alone, taken, taken_n, 1, &staged, &d);
    ck_assert_msg(rc == OUTBOX_OK && staged == 1, "staging event 0 on its own: %s, %zu staged (%s)",
                  outbox_strerror(rc), staged, d.message);

    void *native = NULL;
    if (native_tx)
        native = conf_native_begin(h);
    else
        conf_ok(s, outbox_store_begin(s));
    /* The caller's own work in the transaction: events 1 and 2. */
    ck_assert_uint_eq(conf_stage(s, native, ROUTE, 1, 2, NULL), 2);

    /* Events 10 and 11 are new; event 12 is new too, but its row id is
     * event 0's. */
    static const char *const ids[] = {"01900000-0000-7000-8000-00000000e010",
                                      "01900000-0000-7000-8000-00000000e011", TAKEN_ID};
    static const unsigned long ns[] = {10, 11, 12};
    outbox_stage_ctx_t ctx = {.struct_size = sizeof ctx, .native_tx = native, .in_own_tx = !native_tx};
    memset(&d, 0, sizeof d);
    int call_rc = stage_rows_raw(h, &ctx, ids, ns, 3, &staged, &d);
    char call_msg[OUTBOX_MESSAGE_MAX];
    snprintf(call_msg, sizeof call_msg, "%s", d.message);
    int failed = call_rc != OUTBOX_OK;
    if (failed)
        ck_assert_msg(staged == 0, "a stage that failed (%s: %s) reported %zu staged",
                      outbox_strerror(call_rc), call_msg, staged);
    else
        conf_note("a stage that fails while it writes",
                  "the store took a row whose id another row has, so no stage call failed midway");

    /* Event 3, staged after the failure in the same transaction. */
    char id3[OUTBOX_UUID_STRLEN + 1];
    conf_event_id(id3, 3);
    outbox_event_t ev = {.event_id = id3, .event_type = "conformance.test", .payload = "{}"};
    size_t later = 0;
    int later_rc = outbox_store_stage(s, native, ROUTE, &ev, 1, &later);
    int usable = later_rc == OUTBOX_OK;
    char later_msg[OUTBOX_MESSAGE_MAX];
    snprintf(later_msg, sizeof later_msg, "%s", outbox_store_message(s));
    ck_assert_msg(!usable || later == 1, "staging event 3 after the failed call staged %zu of 1", later);
    if (native_tx) {
        memset(&d, 0, sizeof d);
        rc = vt->native_end(h, native, 1, &d);
    } else {
        rc = outbox_store_commit(s);
        snprintf(d.message, sizeof d.message, "%s", outbox_store_message(s));
    }
    if (usable)
        ck_assert_msg(rc == OUTBOX_OK,
                      "after the failed stage the transaction took event 3, but its commit failed: "
                      "%s (%s)",
                      outbox_strerror(rc), d.message);
    else
        ck_assert_msg(rc != OUTBOX_OK,
                      "after the failed stage, staging event 3 in the same transaction failed "
                      "(%s: %s), yet the commit reported success: the caller's events 1 and 2 "
                      "were dropped without a word",
                      outbox_strerror(later_rc), later_msg);

    /* Event 0 always; events 1, 2 and 3 when the transaction went on;
     * 10 and 11 only when their call did not fail, and then 12 may be
     * there or skipped, but never in place of event 0. */
    int must[16] = {0}, may[16] = {0};
    must[0] = 1;
    if (usable)
        must[1] = must[2] = must[3] = 1;
    if (!failed) {
        must[10] = must[11] = 1;
        may[12] = 1;
    }
    int seen[16] = {0};
    conf_claim_t c = conf_claim(s, ROUTE, 100, CONF_LONG_LEASE_US, 0);
    for (size_t i = 0; i < c.n; i++) {
        unsigned long n = c.rows[i].n;
        ck_assert_msg(n < 16 && !seen[n], "event %lu is in the table twice, or is not ours", n);
        seen[n] = 1;
        if (n == 0)
            ck_assert_msg(strcmp(c.rows[i].id, TAKEN_ID) == 0,
                          "event 0's row has id %s, staged with %s: the failing call overwrote it",
                          c.rows[i].id, TAKEN_ID);
        else if (n >= 10)
            ck_assert_msg(must[n] || may[n],
                          "event %lu is in the table after the commit, but the stage call that "
                          "carried it failed (%s: %s): a failed call left its earlier events "
                          "behind",
                          n, outbox_strerror(call_rc), call_msg);
        else
            ck_assert_msg(must[n],
                          "event %lu is in the table, but the transaction that staged it reported "
                          "that its commit failed",
                          n);
    }
    for (unsigned long n = 0; n < 16; n++)
        ck_assert_msg(!must[n] || seen[n], "event %lu is missing after the commit%s", n,
                      n == 0   ? ": the call that reused its id took it away"
                      : n < 10 ? ": the failed stage undid the caller's own work in the transaction"
                               : "");
    conf_claim_free(&c);
    outbox_store_close(s);
}

START_TEST(stage_fails_midway_leaves_nothing)
{
    stage_fails_midway(0);
}
END_TEST

START_TEST(stage_fails_midway_leaves_nothing_native)
{
    stage_fails_midway(1);
}
END_TEST

void conf_cases_stage(conf_cases_t *c)
{
    conf_add(c, stage_rollback_leaves_nothing, CONF_NEED_TX, 0, 20);
    conf_add(c, stage_commit_visible, CONF_NEED_TX, 0, 20);
    conf_add(c, stage_duplicate_skipped, 0, 0, 20);
    conf_add(c, stage_require_transaction, 0, 0, 20);
    conf_add(c, stage_payload_not_json, 0, 0, 20);
    conf_add(c, stage_native_commit, CONF_NEED_NATIVE, 0, 20);
    conf_add(c, stage_native_rollback, CONF_NEED_NATIVE, 0, 20);
    conf_add(c, stage_refused_keeps_tx, CONF_NEED_TX, 0, 20);
    conf_add(c, stage_refused_keeps_native_tx, CONF_NEED_NATIVE, 0, 20);
    conf_add(c, stage_fails_midway_leaves_nothing, CONF_NEED_TX, 0, 20);
    conf_add(c, stage_fails_midway_leaves_nothing_native, CONF_NEED_NATIVE, 0, 20);
}
