/* The relay of SPEC 5 on the SQLite store and the scriptable test sink:
 * retries, dead-lettering, per-key FIFO, fencing, the outage breaker,
 * graceful stop, and a relay killed with SIGKILL. */
#include <check.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "outbox_int.h"
#include "test_sink.h"
#include "test_store.h"

static char dir[256];
static char db_path[512];
static char uri[600];
static outbox_store_t *store;

static void setup(void)
{
    test_store_make("relay", dir, uri, 0);
    snprintf(db_path, sizeof db_path, "%s/t.db", dir);
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_store_open(uri, NULL, &store, &d) == OUTBOX_OK, "%s", d.message);
    test_sink_register();
    test_sink_reset(NULL);
}

static void teardown(void)
{
    outbox_store_close(store);
    store = NULL;
    test_store_remove(dir);
}

/* Stage one event; returns its event id in out. */
static void stage(const char *route, const char *key, char out[OUTBOX_UUID_STRLEN + 1])
{
    char id[OUTBOX_UUID_STRLEN + 1];
    outbox_uuid_v7(id);
    outbox_event_t e = {.event_id = id, .event_type = "t", .payload = "{\"n\":1}", .ordering_key = key};
    size_t n = 0;
    ck_assert_msg(outbox_store_stage(store, NULL, route, &e, 1, &n) == OUTBOX_OK, "%s",
                  outbox_store_message(store));
    ck_assert_int_eq(n, 1);
    if (out != NULL)
        memcpy(out, id, sizeof id);
}

typedef struct row_state {
    char status[16];
    int attempts;
    long long available_at;
    char last_error[256];
} row_state_t;

static row_state_t state_of(const char *event_id)
{
    row_state_t st = {0};
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    ck_assert_int_eq(sqlite3_open(db_path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db,
                         "SELECT status, attempts, coalesce(available_at, 0), coalesce(last_error, '') "
                         "FROM outbox WHERE event_id = ?", -1, &q, NULL), SQLITE_OK);
    sqlite3_bind_text(q, 1, event_id, -1, SQLITE_STATIC);
    ck_assert_int_eq(sqlite3_step(q), SQLITE_ROW);
    snprintf(st.status, sizeof st.status, "%s", sqlite3_column_text(q, 0));
    st.attempts = sqlite3_column_int(q, 1);
    st.available_at = sqlite3_column_int64(q, 2);
    snprintf(st.last_error, sizeof st.last_error, "%s", sqlite3_column_text(q, 3));
    sqlite3_finalize(q);
    sqlite3_close(db);
    return st;
}

/* The first row of a query on the test's database: its first n columns. */
static void query_ints(const char *sql, int *out, int n)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    ck_assert_int_eq(sqlite3_open(db_path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(q), SQLITE_ROW);
    for (int i = 0; i < n; i++)
        out[i] = sqlite3_column_int(q, i);
    sqlite3_finalize(q);
    sqlite3_close(db);
}

static outbox_relay_t *relay_on(const char *sink_uri, outbox_sink_t **sink, outbox_relay_config_t *cfg)
{
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_sink_open(sink_uri, NULL, sink, &d) == OUTBOX_OK, "%s", d.message);
    outbox_relay_t *r = NULL;
    ck_assert_msg(outbox_relay_new(store, *sink, cfg, &r, &d) == OUTBOX_OK, "%s", d.message);
    return r;
}

/* OUTBOX_TEST_PIPELINE=N runs every test's relay with a pipeline of N
 * batches (the suite runs this file with 1 and with 4). */
static size_t test_pipeline(void)
{
    const char *v = getenv("OUTBOX_TEST_PIPELINE");
    return v != NULL && atoi(v) > 0 ? (size_t)atoi(v) : 1;
}

static outbox_relay_config_t quick_config(const char *route)
{
    outbox_relay_config_t cfg;
    outbox_relay_config_init(&cfg);
    cfg.pipeline = test_pipeline();
    cfg.route = route;
    cfg.backoff_base_us = 0;
    cfg.poll_us = 1000;
    cfg.until_idle = 1;
    return cfg;
}

static const char *target;

static int fail_target_once(const outbox_message_t *m, int call)
{
    (void)call;
    static int failed;
    if (strcmp(m->event_id, target) == 0 && !failed) {
        failed = 1;
        return OUTBOX_PUBLISH_RETRY;
    }
    return OUTBOX_PUBLISH_OK;
}

START_TEST(retry_then_success)
{
    char x[37];
    stage("r", NULL, x);
    for (int i = 0; i < 3; i++)
        stage("r", NULL, NULL);
    target = x;
    test_sink_reset(fail_target_once);
    outbox_relay_config_t cfg = quick_config("r");
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("test:", &sink, &cfg);
    size_t claimed = 0;
    ck_assert_int_eq(outbox_relay_step(r, &claimed), OUTBOX_OK);
    ck_assert_int_eq(claimed, 4);
    row_state_t st = state_of(x);
    ck_assert_str_eq(st.status, "pending");
    ck_assert_int_eq(st.attempts, 1);
    ck_assert_msg(strstr(st.last_error, "retry: test sink says 1"), "%s", st.last_error);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    st = state_of(x);
    ck_assert_str_eq(st.status, "published");
    ck_assert_int_eq(st.attempts, 2);
    outbox_stats_t stats;
    ck_assert_int_eq(outbox_store_stats(store, "r", &stats), OUTBOX_OK);
    ck_assert_int_eq(stats.published, 4);
    ck_assert_int_eq(stats.pending + stats.processing + stats.dead, 0);
    outbox_relay_counters_t c;
    outbox_relay_counters(r, &c);
    ck_assert_int_eq(c.retried, 1);
    ck_assert_int_eq(c.published, 4);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

static int always_fail_target(const outbox_message_t *m, int call)
{
    (void)call;
    return strcmp(m->event_id, target) == 0 ? OUTBOX_PUBLISH_RETRY : OUTBOX_PUBLISH_OK;
}

START_TEST(dead_after_max_attempts)
{
    char x[37];
    stage("r", NULL, x);
    /* x must never be alone in a batch (a batch whose every row is RETRY
     * is an outage, released uncharged): a pipeline takes the others
     * faster while x is in flight. */
    int others = 10 * (int)test_pipeline();
    for (int i = 0; i < others; i++)
        stage("r", NULL, NULL);
    target = x;
    test_sink_reset(always_fail_target);
    outbox_relay_config_t cfg = quick_config("r");
    cfg.max_attempts = 3;
    cfg.batch = 2;
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("test:", &sink, &cfg);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    row_state_t st = state_of(x);
    ck_assert_str_eq(st.status, "dead");
    ck_assert_int_eq(st.attempts, 3);
    ck_assert_msg(strstr(st.last_error, "max attempts reached"), "%s", st.last_error);
    outbox_stats_t stats;
    ck_assert_int_eq(outbox_store_stats(store, "r", &stats), OUTBOX_OK);
    ck_assert_int_eq(stats.published, others);
    ck_assert_int_eq(stats.dead, 1);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

static int reject_target(const outbox_message_t *m, int call)
{
    (void)call;
    return strcmp(m->event_id, target) == 0 ? OUTBOX_PUBLISH_REJECT : OUTBOX_PUBLISH_OK;
}

START_TEST(reject_is_dead_at_once)
{
    char x[37];
    stage("r", NULL, x);
    stage("r", NULL, NULL);
    target = x;
    test_sink_reset(reject_target);
    outbox_relay_config_t cfg = quick_config("r");
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("test:", &sink, &cfg);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    row_state_t st = state_of(x);
    ck_assert_str_eq(st.status, "dead");
    ck_assert_int_eq(st.attempts, 1);
    ck_assert_msg(strstr(st.last_error, "rejected: test sink says 2"), "%s", st.last_error);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

/* Order of delivery of the given key's rows, checked against staging order. */
static void assert_key_order(const char *key, char ids[][37], int n)
{
    const test_sink_log_t *log;
    size_t m = test_sink_delivered(&log);
    int next = 0;
    for (size_t i = 0; i < m; i++) {
        if (strcmp(log[i].key, key) != 0)
            continue;
        ck_assert_msg(next < n, "key %s delivered more than staged", key);
        ck_assert_msg(strcmp(log[i].event_id, ids[next]) == 0,
                      "key %s: delivery %d was %s, expected %s", key, next, log[i].event_id, ids[next]);
        next++;
    }
    ck_assert_int_eq(next, n);
}

static void fifo_when_head_fails(const char *sink_uri)
{
    char k[3][37], free_row[37];
    for (int i = 0; i < 3; i++)
        stage("r", "k", k[i]);
    stage("r", NULL, free_row);
    target = k[0];
    test_sink_reset(fail_target_once);
    outbox_relay_config_t cfg = quick_config("r");
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on(sink_uri, &sink, &cfg);
    size_t claimed = 0;
    ck_assert_int_eq(outbox_relay_step(r, &claimed), OUTBOX_OK);
    ck_assert_int_eq(claimed, 4);
    /* The head failed: it is charged and rescheduled; its followers are released uncharged. */
    row_state_t st = state_of(k[0]);
    ck_assert_str_eq(st.status, "pending");
    ck_assert_int_eq(st.attempts, 1);
    for (int i = 1; i < 3; i++) {
        st = state_of(k[i]);
        ck_assert_str_eq(st.status, "pending");
        ck_assert_int_eq(st.attempts, 0);
    }
    ck_assert_str_eq(state_of(free_row).status, "published");
    const test_sink_log_t *log;
    ck_assert_int_eq(test_sink_delivered(&log), 1);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    assert_key_order("k", k, 3);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}

/* A key's head claimed with its attempts already spent (its relays kept
 * dying) is dead-lettered unpublished; the rest of its key, interleaved
 * with a second key, still goes out one row per key per publish call and
 * in order, the first of them in the first call. */
START_TEST(exhausted_head_leaves_key_in_order)
{
    char a[4][37], b[3][37];
    for (int i = 0; i < 4; i++) {
        stage("r", "a", a[i]);
        if (i < 3)
            stage("r", "b", b[i]);
    }
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open(db_path, &db), SQLITE_OK);
    char sql[200];
    snprintf(sql, sizeof sql, "UPDATE outbox SET attempts = 7 WHERE event_id = '%s'", a[0]);
    ck_assert_int_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    test_sink_reset(NULL);
    outbox_relay_config_t cfg = quick_config("r");
    cfg.max_attempts = 3;
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("test:", &sink, &cfg);
    size_t claimed = 0;
    ck_assert_int_eq(outbox_relay_step(r, &claimed), OUTBOX_OK);
    ck_assert_uint_eq(claimed, 7);
    row_state_t st = state_of(a[0]);
    ck_assert_str_eq(st.status, "dead");
    ck_assert_msg(strstr(st.last_error, "attempts exhausted"), "%s", st.last_error);
    assert_key_order("a", a + 1, 3);
    assert_key_order("b", b, 3);
    ck_assert_int_le(test_sink_max_per_key(), 1);
    ck_assert_int_eq(test_sink_calls(), 3); /* three rows per key left: three waves */
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

START_TEST(fifo_head_failure_unordered_sink)
{
    fifo_when_head_fails("test:");
    ck_assert_int_le(test_sink_max_per_key(), 1);
}
END_TEST

START_TEST(fifo_head_failure_ordered_sink)
{
    fifo_when_head_fails("testordered:");
}
END_TEST

START_TEST(fifo_key_blocked_while_head_waits)
{
    char k[3][37];
    for (int i = 0; i < 3; i++)
        stage("r", "k", k[i]);
    stage("r", "other", NULL);
    target = k[0];
    test_sink_reset(fail_target_once);
    outbox_relay_config_t cfg = quick_config("r");
    cfg.backoff_base_us = 3600LL * 1000000; /* the head waits for up to an hour */
    cfg.backoff_cap_us = cfg.backoff_base_us;
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("test:", &sink, &cfg);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    const test_sink_log_t *log;
    size_t m = test_sink_delivered(&log);
    for (size_t i = 0; i < m; i++)
        ck_assert_msg(strcmp(log[i].key, "k") != 0, "a later row of k was published before its head");
    ck_assert_int_eq(m, 1);
    ck_assert_str_eq(state_of(k[1]).status, "pending");
    ck_assert_str_eq(state_of(k[2]).status, "pending");
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

/* Fails about one delivery in five, deterministically by call and id. */
static int flaky(const outbox_message_t *m, int call)
{
    unsigned h = (unsigned)call * 2654435761u;
    for (const char *p = m->event_id; *p; p++)
        h = h * 31u + (unsigned char)*p;
    return h % 5 == 0 ? OUTBOX_PUBLISH_RETRY : OUTBOX_PUBLISH_OK;
}

START_TEST(fifo_many_keys_random_failures)
{
    enum { KEYS = 5, PER = 40 };
    char ids[KEYS][PER][37];
    char key[KEYS][8];
    for (int j = 0; j < PER; j++)
        for (int kk = 0; kk < KEYS; kk++) {
            snprintf(key[kk], sizeof key[kk], "k%d", kk);
            stage("r", key[kk], ids[kk][j]);
        }
    test_sink_reset(flaky);
    outbox_relay_config_t cfg = quick_config("r");
    cfg.batch = 37;
    cfg.max_attempts = 1000;
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("test:", &sink, &cfg);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    for (int kk = 0; kk < KEYS; kk++)
        assert_key_order(key[kk], ids[kk], PER);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

/* REJECT stops the key like RETRY: the rejected row is dead-lettered at
 * once, the later rows of its key are released uncharged and go out only
 * in a later batch, once the dead verdict is stored. */
static void fifo_when_head_rejected(const char *sink_uri)
{
    char k[3][37], free_row[37];
    for (int i = 0; i < 3; i++)
        stage("r", "k", k[i]);
    stage("r", NULL, free_row);
    target = k[0];
    test_sink_reset(reject_target);
    outbox_relay_config_t cfg = quick_config("r");
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on(sink_uri, &sink, &cfg);
    size_t claimed = 0;
    ck_assert_int_eq(outbox_relay_step(r, &claimed), OUTBOX_OK);
    ck_assert_int_eq(claimed, 4);
    row_state_t st = state_of(k[0]);
    ck_assert_str_eq(st.status, "dead");
    ck_assert_int_eq(st.attempts, 1);
    for (int i = 1; i < 3; i++) {
        st = state_of(k[i]);
        ck_assert_str_eq(st.status, "pending");
        ck_assert_int_eq(st.attempts, 0);
    }
    ck_assert_str_eq(state_of(free_row).status, "published");
    const test_sink_log_t *log;
    ck_assert_int_eq(test_sink_delivered(&log), 1);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    assert_key_order("k", k + 1, 2);
    for (int i = 1; i < 3; i++) {
        st = state_of(k[i]);
        ck_assert_str_eq(st.status, "published");
        ck_assert_int_eq(st.attempts, 1);
    }
    ck_assert_str_eq(state_of(k[0]).status, "dead");
    outbox_relay_free(r);
    outbox_sink_close(sink);
}

START_TEST(fifo_head_reject_unordered_sink)
{
    fifo_when_head_rejected("test:");
    ck_assert_int_le(test_sink_max_per_key(), 1);
}
END_TEST

START_TEST(fifo_head_reject_ordered_sink)
{
    fifo_when_head_rejected("testordered:");
}
END_TEST

/* Each event of the key counted at its first delivery only (redeliveries
 * after a crash are allowed): that order must be staging order. */
static void assert_first_delivery_order(const char *key, char ids[][37], int n)
{
    const test_sink_log_t *log;
    size_t m = test_sink_delivered(&log);
    int next = 0;
    for (size_t i = 0; i < m; i++) {
        if (strcmp(log[i].key, key) != 0)
            continue;
        int seen = 0;
        for (int j = 0; j < next; j++)
            seen |= strcmp(log[i].event_id, ids[j]) == 0;
        if (seen)
            continue;
        ck_assert_msg(next < n, "key %s: %s delivered but never staged", key, log[i].event_id);
        ck_assert_msg(strcmp(log[i].event_id, ids[next]) == 0,
                      "key %s: event %d to reach the sink first was %s, expected %s", key, next,
                      log[i].event_id, ids[next]);
        next++;
    }
    ck_assert_int_eq(next, n);
}

static int first_call_status;

/* The sink fails the target (first_call_status) in the first publish call
 * only; calls are counted across the fork, so the relay started after the
 * crash sees the target accepted. */
static int fail_target_in_first_call(const outbox_message_t *m, int call)
{
    return call == 0 && strcmp(m->event_id, target) == 0 ? first_call_status : OUTBOX_PUBLISH_OK;
}

static const char *last_row;

/* The relay in the child dies once the call that handed over the batch's
 * last row is done: every publish of the batch has happened, no settle. */
static void die_after_last_row(int call, void *ctx)
{
    (void)call, (void)ctx;
    const test_sink_log_t *log;
    size_t n = test_sink_delivered(&log);
    if (n > 0 && strcmp(log[n - 1].event_id, last_row) == 0)
        _exit(42);
}

/* A failure (a REJECT: the dead verdict; a RETRY: the reschedule) lost in
 * a crash: the row is claimed again, and this time the sink takes it. It
 * must still reach the sink before the later rows of its key. */
static void failure_lost_in_crash(const char *sink_uri, int fail_status)
{
    char k[3][37], o[4][37];
    for (int i = 0; i < 3; i++)
        stage("r", "k", k[i]);
    /* A second key with more rows keeps the batch going for more waves
     * than k has rows, so the child dies after k's whole share went out. */
    for (int i = 0; i < 4; i++)
        stage("r", "o", o[i]);
    target = k[0];
    last_row = o[3];
    first_call_status = fail_status;
    test_sink_reset(fail_target_in_first_call);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        outbox_store_t *s = NULL;
        outbox_sink_t *sk = NULL;
        outbox_relay_t *r = NULL;
        outbox_diag_t d;
        outbox_relay_config_t cfg = quick_config("r");
        test_sink_after_publish(die_after_last_row, NULL);
        if (outbox_store_open(uri, NULL, &s, &d) || outbox_sink_open(sink_uri, NULL, &sk, &d) ||
            outbox_relay_new(s, sk, &cfg, &r, &d))
            _exit(3);
        outbox_relay_run(r);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 42,
                  "the relay in the child did not die between publish and settle (status %d)", status);
    row_state_t st = state_of(k[0]);
    ck_assert_str_eq(st.status, "processing"); /* the verdict was never stored */
    /* A relay started past the lease takes the batch over. */
    usleep(60000);
    outbox_relay_config_t cfg = quick_config("r");
    cfg.lease_us = 50000;
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on(sink_uri, &sink, &cfg);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    assert_first_delivery_order("k", k, 3);
    assert_first_delivery_order("o", o, 4);
    outbox_stats_t stats;
    ck_assert_int_eq(outbox_store_stats(store, "r", &stats), OUTBOX_OK);
    ck_assert_int_eq(stats.published, 7);
    ck_assert_int_eq(stats.pending + stats.processing + stats.dead, 0);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}

START_TEST(reject_lost_in_crash_unordered_sink)
{
    failure_lost_in_crash("test:", OUTBOX_PUBLISH_REJECT);
}
END_TEST

START_TEST(reject_lost_in_crash_ordered_sink)
{
    failure_lost_in_crash("testordered:", OUTBOX_PUBLISH_REJECT);
}
END_TEST

START_TEST(retry_lost_in_crash_unordered_sink)
{
    failure_lost_in_crash("test:", OUTBOX_PUBLISH_RETRY);
}
END_TEST

START_TEST(retry_lost_in_crash_ordered_sink)
{
    failure_lost_in_crash("testordered:", OUTBOX_PUBLISH_RETRY);
}
END_TEST

/* An ORDERED sink that breaks its promise and delivers a row after a
 * rejected one of its key: the row is out in the world, so it is marked
 * published (releasing it would only publish it a second time). */
START_TEST(ordered_sink_breaking_promise_row_is_published)
{
    char k[2][37];
    for (int i = 0; i < 2; i++)
        stage("r", "k", k[i]);
    target = k[0];
    test_sink_reset(reject_target);
    outbox_relay_config_t cfg = quick_config("r");
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("testloose:", &sink, &cfg);
    size_t claimed = 0;
    ck_assert_int_eq(outbox_relay_step(r, &claimed), OUTBOX_OK);
    ck_assert_int_eq(claimed, 2);
    ck_assert_int_eq(test_sink_calls(), 1);
    ck_assert_str_eq(state_of(k[0]).status, "dead");
    row_state_t st = state_of(k[1]);
    ck_assert_str_eq(st.status, "published");
    ck_assert_int_eq(st.attempts, 1);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

START_TEST(fencing_after_lease_expiry)
{
    char x[37];
    stage("r", NULL, x);
    /* A slow relay claims with a short lease and stalls past it. */
    outbox_claim_req_t req = {.struct_size = sizeof req, .route = "r", .limit = 10, .lease_us = 1000};
    const outbox_row_t *rows;
    size_t n;
    outbox_fence_t slow;
    ck_assert_int_eq(outbox_store_claim(store, &req, &rows, &n, &slow), OUTBOX_OK);
    ck_assert_int_eq(n, 1);
    usleep(5000);
    /* Another relay takes the row over and publishes it. */
    outbox_store_t *other = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_store_open(uri, NULL, &other, &d), OUTBOX_OK);
    outbox_sink_t *sink;
    outbox_relay_config_t cfg = quick_config("r");
    cfg.lease_us = 1000;
    ck_assert_int_eq(outbox_sink_open("test:", NULL, &sink, &d), OUTBOX_OK);
    outbox_relay_t *r = NULL;
    ck_assert_int_eq(outbox_relay_new(other, sink, &cfg, &r, &d), OUTBOX_OK);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    ck_assert_str_eq(state_of(x).status, "published");
    /* A pipelined relay may also take over its own batch, whose 1 ms lease
     * runs out while it waits to be published: a third attempt. */
    if (test_pipeline() == 1)
        ck_assert_int_eq(state_of(x).attempts, 2);
    else
        ck_assert_int_ge(state_of(x).attempts, 2);
    /* The slow relay's verdict arrives late and must change nothing. */
    outbox_settle_item_t it = {.id = rows[0].id, .kind = OUTBOX_SETTLE_DEAD, .error = "late"};
    size_t applied = 99;
    ck_assert_int_eq(outbox_store_settle(store, &slow, &it, 1, &applied), OUTBOX_ECONFLICT);
    ck_assert_int_eq(applied, 0);
    ck_assert_int_eq(it.applied, 0);
    ck_assert_str_eq(state_of(x).status, "published");
    outbox_relay_free(r);
    outbox_sink_close(sink);
    outbox_store_close(other);
}
END_TEST

static int calls_down;
static int down_then_up(const outbox_message_t *m, int call)
{
    (void)m;
    return call < calls_down ? OUTBOX_PUBLISH_RETRY : OUTBOX_PUBLISH_OK;
}

START_TEST(outage_never_charges_attempts)
{
    char ids[5][37];
    for (int i = 0; i < 5; i++)
        stage("r", NULL, ids[i]);
    calls_down = 4;
    test_sink_reset(down_then_up);
    outbox_relay_config_t cfg = quick_config("r");
    cfg.max_attempts = 2; /* four outage rounds would dead-letter everything if charged */
    cfg.backoff_base_us = 1000;
    cfg.backoff_cap_us = 2000;
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("test:", &sink, &cfg);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    for (int i = 0; i < 5; i++) {
        row_state_t st = state_of(ids[i]);
        ck_assert_str_eq(st.status, "published");
        ck_assert_int_eq(st.attempts, 1);
    }
    outbox_relay_counters_t c;
    outbox_relay_counters(r, &c);
    ck_assert_int_eq(c.outages, 4);
    ck_assert_int_eq(c.dead, 0);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

static void stop_on_second_call(void *ctx)
{
    if (test_sink_calls() == 1)
        outbox_relay_stop(ctx);
}

START_TEST(graceful_stop_leaves_nothing_processing)
{
    /* One key, so the batch needs many waves; stop arrives during the second. */
    for (int i = 0; i < 20; i++)
        stage("r", "k", NULL);
    test_sink_reset(NULL);
    outbox_relay_config_t cfg = quick_config("r");
    cfg.until_idle = 0;
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("test:", &sink, &cfg);
    test_sink_on_publish(stop_on_second_call, r);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    outbox_stats_t st;
    ck_assert_int_eq(outbox_store_stats(store, "r", &st), OUTBOX_OK);
    ck_assert_int_eq(st.processing, 0);
    ck_assert_int_eq(st.published, 2);
    ck_assert_int_eq(st.pending, 18);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

static void count_ids_in_file(const char *path, char ids[][37], int n, int *seen)
{
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char line[4096];
    while (fgets(line, sizeof line, f) != NULL) {
        const char *p = strstr(line, "\"id\":\"");
        if (p == NULL)
            continue;
        p += 6;
        for (int i = 0; i < n; i++)
            if (strncmp(p, ids[i], 36) == 0)
                seen[i]++;
    }
    fclose(f);
}

#define KILLED_BATCH 20
START_TEST(sigkill_mid_run_loses_nothing)
{
    enum { N = 3000 };
    static char ids[N][37];
    static int seen[N];
    outbox_event_t *ev = calloc(N, sizeof *ev);
    for (int i = 0; i < N; i++) {
        outbox_uuid_v7(ids[i]);
        ev[i] = (outbox_event_t){.event_id = ids[i], .event_type = "t", .payload = "{}",
                                 .ordering_key = i % 3 ? NULL : "k"};
    }
    size_t staged = 0;
    ck_assert_int_eq(outbox_store_stage(store, NULL, "r", ev, N, &staged), OUTBOX_OK);
    ck_assert_int_eq(staged, N);
    free(ev);
    char out[600], sink_uri[700];
    snprintf(out, sizeof out, "%s/out.jsonl", dir);
    snprintf(sink_uri, sizeof sink_uri, "file://%s", out);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        outbox_store_t *s = NULL;
        outbox_sink_t *k = NULL;
        outbox_relay_t *r = NULL;
        outbox_diag_t d;
        outbox_relay_config_t cfg;
        outbox_relay_config_init(&cfg);
        cfg.route = "r";
        cfg.batch = KILLED_BATCH;
        if (outbox_store_open(uri, NULL, &s, &d) || outbox_sink_open(sink_uri, NULL, &k, &d) ||
            outbox_relay_new(s, k, &cfg, &r, &d))
            _exit(3);
        outbox_relay_run(r);
        _exit(0);
    }
    /* Let it get going, then kill it without warning. */
    outbox_stats_t st = {0};
    for (int i = 0; i < 500 && st.published < N / 4; i++) {
        usleep(2000);
        ck_assert_int_eq(outbox_store_stats(store, "r", &st), OUTBOX_OK);
    }
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ck_assert(WIFSIGNALED(status));
    ck_assert_int_eq(outbox_store_stats(store, "r", &st), OUTBOX_OK);
    ck_assert_msg(st.published > 0 && st.published < N, "kill landed outside the run: %llu published",
                  (unsigned long long)st.published);
    /* A second relay runs past the lease and finishes the job. */
    usleep(60000);
    outbox_sink_t *k = NULL;
    outbox_relay_t *r = NULL;
    outbox_diag_t d;
    outbox_relay_config_t cfg;
    outbox_relay_config_init(&cfg);
    cfg.route = "r";
    cfg.lease_us = 50000;
    cfg.until_idle = 1;
    ck_assert_int_eq(outbox_sink_open(sink_uri, NULL, &k, &d), OUTBOX_OK);
    ck_assert_int_eq(outbox_relay_new(store, k, &cfg, &r, &d), OUTBOX_OK);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    ck_assert_int_eq(outbox_store_stats(store, "r", &st), OUTBOX_OK);
    ck_assert_int_eq(st.published, N);
    ck_assert_int_eq(st.pending + st.processing + st.dead, 0);
    count_ids_in_file(out, ids, N, seen);
    int dups = 0;
    for (int i = 0; i < N; i++) {
        ck_assert_msg(seen[i] >= 1, "event %s never reached the sink", ids[i]);
        dups += seen[i] - 1;
    }
    /* What the killed relay had published and not settled: at most its
     * batches in flight (the default pipeline, like this relay's). */
    ck_assert_msg(dups <= KILLED_BATCH * (int)cfg.pipeline, "%d duplicates, more than %zu batches of %d",
                  dups, cfg.pipeline, KILLED_BATCH);
    outbox_relay_free(r);
    outbox_sink_close(k);
}
END_TEST

/* The file sink declares ORDERED, so a message it refuses stops its key
 * for the rest of the call: later messages of that key are not written and
 * come back RETRY; other keys are written. */
START_TEST(file_sink_stops_key_after_reject)
{
    char path[600], sink_uri[700];
    snprintf(path, sizeof path, "%s/refuse.jsonl", dir);
    snprintf(sink_uri, sizeof sink_uri, "file://%s", path);
    outbox_sink_t *sink;
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_sink_open(sink_uri, NULL, &sink, &d) == OUTBOX_OK, "%s", d.message);
    ck_assert(outbox_sink_capabilities(sink) & OUTBOX_SINK_CAP_ORDERED);
    static const char *const keys[] = {"a", "a", "b", "a", "c"};
    char ids[5][37];
    outbox_message_t m[5];
    for (int i = 0; i < 5; i++) {
        outbox_uuid_v7(ids[i]);
        m[i] = (outbox_message_t){.route = "r", .destination = "r", .key = keys[i],
                                  .event_id = ids[i], .payload = i == 0 ? NULL : "{}",
                                  .payload_len = i == 0 ? 0 : 2};
    }
    outbox_publish_result_t res[5];
    ck_assert_int_eq(outbox_sink_publish(sink, m, 5, res), OUTBOX_OK);
    ck_assert_int_eq(res[0].status, OUTBOX_PUBLISH_REJECT);
    ck_assert_int_eq(res[1].status, OUTBOX_PUBLISH_RETRY);
    ck_assert_int_eq(res[2].status, OUTBOX_PUBLISH_OK);
    ck_assert_int_eq(res[3].status, OUTBOX_PUBLISH_RETRY);
    ck_assert_int_eq(res[4].status, OUTBOX_PUBLISH_OK);
    ck_assert_msg(strstr(res[1].message, ids[0]), "%s", res[1].message);
    outbox_sink_close(sink);
    int seen[5] = {0};
    count_ids_in_file(path, ids, 5, seen);
    ck_assert_int_eq(seen[0] + seen[1] + seen[3], 0);
    ck_assert_int_eq(seen[2], 1);
    ck_assert_int_eq(seen[4], 1);
}
END_TEST

START_TEST(bad_config_refused)
{
    outbox_sink_t *sink;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_sink_open("test:", NULL, &sink, &d), OUTBOX_OK);
    outbox_relay_t *r = NULL;
    outbox_relay_config_t cfg;
    outbox_relay_config_init(&cfg);
    ck_assert_int_eq(outbox_relay_new(store, sink, &cfg, &r, &d), OUTBOX_EINVAL);
    ck_assert_msg(strstr(d.message, "route is required"), "%s", d.message);
    cfg.route = "r";
    cfg.batch = 0;
    ck_assert_int_eq(outbox_relay_new(store, sink, &cfg, &r, &d), OUTBOX_EINVAL);
    cfg.batch = 10;
    cfg.hlc_order = 1;
    ck_assert_int_eq(outbox_relay_new(store, sink, &cfg, &r, &d), OUTBOX_ENOTSUP);
    ck_assert_msg(strstr(d.message, "hlc ordering needs the hlc column"), "%s", d.message);
    ck_assert_ptr_null(r);
    outbox_sink_close(sink);
}
END_TEST

/* The relay's log: what an operator reads. */
typedef struct logged {
    int level;
    char line[512];
} logged_t;

static logged_t log_lines[256];
static int n_log_lines;

static void capture_log(void *ctx, int level, const char *line)
{
    (void)ctx;
    if (n_log_lines < (int)(sizeof log_lines / sizeof log_lines[0])) {
        log_lines[n_log_lines].level = level;
        snprintf(log_lines[n_log_lines].line, sizeof log_lines[0].line, "%s", line);
        n_log_lines++;
    }
}

/* How many captured lines of level start with prefix; the last in *last. */
static int logged_count(int level, const char *prefix, const char **last)
{
    int n = 0;
    for (int i = 0; i < n_log_lines; i++)
        if (log_lines[i].level == level && strncmp(log_lines[i].line, prefix, strlen(prefix)) == 0) {
            n++;
            if (last != NULL)
                *last = log_lines[i].line;
        }
    return n;
}

static void dump_log(void)
{
    for (int i = 0; i < n_log_lines; i++)
        fprintf(stderr, "log %d: %s\n", log_lines[i].level, log_lines[i].line);
}

START_TEST(log_tells_start_outage_recovery_batches_and_stop)
{
    for (int i = 0; i < 5; i++)
        stage("r", NULL, NULL);
    calls_down = 3;
    test_sink_reset(down_then_up);
    outbox_relay_config_t cfg = quick_config("r");
    cfg.batch = 7;
    cfg.backoff_base_us = 1000;
    cfg.backoff_cap_us = 2000;
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("test:", &sink, &cfg);
    n_log_lines = 0;
    outbox_set_logger(capture_log, NULL);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    outbox_set_logger(NULL, NULL);
    dump_log();

    const char *line = NULL;
    ck_assert_int_eq(logged_count(OUTBOX_LOG_INFO, "relay r: started: ", &line), 1);
    char pipe[32] = "", want[160];
    if (test_pipeline() > 1)
        snprintf(pipe, sizeof pipe, " (pipeline of %zu)", test_pipeline());
    snprintf(want, sizeof want,
             "relay r: started: store sqlite (outbox), batch 7%s, max attempts 10, lease 3s "
             "(renewed every 1s), poll 1ms",
             pipe);
    ck_assert_str_eq(line, want);
    /* One warning when the outage begins, debug lines while it lasts, one
     * info line when it ends. */
    ck_assert_int_eq(logged_count(OUTBOX_LOG_WARN, "relay r: sink unavailable (test sink says ", &line), 1);
    ck_assert_msg(strstr(line, "): released 5 rows, pausing "), "%s", line);
    ck_assert_int_eq(logged_count(OUTBOX_LOG_DEBUG, "relay r: sink still unavailable (", NULL), 2);
    ck_assert_int_eq(logged_count(OUTBOX_LOG_INFO, "relay r: sink recovered after ", &line), 1);
    ck_assert_msg(strstr(line, " ms (3 batches released)"), "%s", line);
    /* A debug line per batch, outage rounds included. */
    ck_assert_int_eq(logged_count(OUTBOX_LOG_DEBUG, "relay r: batch: claimed 5, published 0, retried 0, "
                                                    "dead 0, released 5, ", NULL), 3);
    ck_assert_int_eq(logged_count(OUTBOX_LOG_DEBUG, "relay r: batch: claimed 5, published 5, retried 0, "
                                                    "dead 0, released 0, ", &line), 1);
    ck_assert_msg(strlen(line) > 3 && strcmp(line + strlen(line) - 3, " ms") == 0, "%s", line);
    ck_assert_int_eq(logged_count(OUTBOX_LOG_INFO, "relay r: stopped ", &line), 1);
    ck_assert_str_eq(line, "relay r: stopped (nothing left to claim): claimed 20, published 5, retried 0, "
                           "dead 0, released 15, leases renewed 0");
    ck_assert_int_eq(logged_count(OUTBOX_LOG_ERROR, "", NULL), 0);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

static void stop_now(void *ctx)
{
    outbox_relay_stop(ctx);
}

START_TEST(log_says_why_the_relay_stopped)
{
    stage("r", NULL, NULL);
    test_sink_reset(NULL);
    outbox_relay_config_t cfg = quick_config("r");
    cfg.until_idle = 0;
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("test:", &sink, &cfg);
    test_sink_on_publish(stop_now, r);
    n_log_lines = 0;
    outbox_set_logger(capture_log, NULL);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    outbox_set_logger(NULL, NULL);
    test_sink_on_publish(NULL, NULL);
    dump_log();
    const char *line = NULL;
    ck_assert_int_eq(logged_count(OUTBOX_LOG_INFO, "relay r: stopped ", &line), 1);
    ck_assert_str_eq(line, "relay r: stopped (stop requested): claimed 1, published 1, retried 0, dead 0, "
                           "released 0, leases renewed 0");
    /* A relay stopped before it runs starts and stops at once, and says so. */
    n_log_lines = 0;
    outbox_set_logger(capture_log, NULL);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    outbox_set_logger(NULL, NULL);
    ck_assert_int_eq(logged_count(OUTBOX_LOG_INFO, "relay r: started: ", NULL), 1);
    ck_assert_int_eq(logged_count(OUTBOX_LOG_INFO, "relay r: stopped (stop requested): ", NULL), 1);
    ck_assert_int_eq(n_log_lines, 2);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

/* ------------------------------------------- transient failures in a row
 *
 * A store that fails transiently: another connection holds SQLite's write
 * lock, and the relay's store handle waits only 1 ms for it, so every claim
 * fails with "database is locked" (OUTBOX_ETRANSIENT) until it lets go. */

static sqlite3 *locker;

static void lock_database(void)
{
    ck_assert_int_eq(sqlite3_open(db_path, &locker), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(locker, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
}

static void unlock_database(void)
{
    if (locker == NULL)
        return;
    ck_assert_int_eq(sqlite3_exec(locker, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(locker);
    locker = NULL;
}

static outbox_store_t *impatient_store(void)
{
    char u[700];
    snprintf(u, sizeof u, "%s?busy_timeout=1ms", uri);
    outbox_diag_t d = {0};
    outbox_store_t *s = NULL;
    ck_assert_msg(outbox_store_open(u, NULL, &s, &d) == OUTBOX_OK, "%s", d.message);
    return s;
}

static void assert_all_pending_uncharged(int n)
{
    outbox_stats_t st;
    ck_assert_int_eq(outbox_store_stats(store, "r", &st), OUTBOX_OK);
    ck_assert_int_eq(st.pending, n);
    ck_assert_int_eq(st.processing + st.published + st.dead, 0);
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open(db_path, &db), SQLITE_OK);
    sqlite3_stmt *q = NULL;
    ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT count(*) FROM outbox WHERE attempts <> 0", -1, &q, NULL),
                     SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(q), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_column_int(q, 0), 0);
    sqlite3_finalize(q);
    sqlite3_close(db);
}

/* Lines of level that start with prefix and contain part. */
static int logged_with(int level, const char *prefix, const char *part)
{
    int n = 0;
    for (int i = 0; i < n_log_lines; i++)
        n += log_lines[i].level == level && strncmp(log_lines[i].line, prefix, strlen(prefix)) == 0 &&
             strstr(log_lines[i].line, part) != NULL;
    return n;
}

START_TEST(until_idle_gives_up_on_a_failing_store)
{
    for (int i = 0; i < 3; i++)
        stage("r", NULL, NULL);
    outbox_store_t *s = impatient_store();
    lock_database();
    test_sink_reset(NULL);
    outbox_relay_config_t cfg = quick_config("r");
    outbox_sink_t *sink;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_sink_open("test:", NULL, &sink, &d), OUTBOX_OK);
    outbox_relay_t *r = NULL;
    ck_assert_msg(outbox_relay_new(s, sink, &cfg, &r, &d) == OUTBOX_OK, "%s", d.message);
    n_log_lines = 0;
    outbox_set_logger(capture_log, NULL);
    int64_t t0 = outbox_monotonic_us();
    int rc = outbox_relay_run(r);
    int64_t took_ms = (outbox_monotonic_us() - t0) / 1000;
    outbox_set_logger(NULL, NULL);
    dump_log();
    ck_assert_int_eq(rc, OUTBOX_ETRANSIENT);
    const char *m = outbox_relay_message(r);
    const char *want = "giving up on route r after 8 consecutive transient failures under until-idle: claim: ";
    ck_assert_msg(strncmp(m, want, strlen(want)) == 0 && strstr(m, "locked"), "%s", m);
    ck_assert_msg(took_ms < 10000, "gave up after %lld ms", (long long)took_ms);
    /* One warning (it says what comes next), debug lines for the rest; the
     * eighth failure ends the run instead of being retried. */
    ck_assert_int_eq(logged_with(OUTBOX_LOG_WARN, "relay r: claim: ",
                                 "retrying in "), 1);
    ck_assert_int_eq(logged_with(OUTBOX_LOG_WARN, "relay r: claim: ",
                                 "; until-idle gives up after 8 transient failures in a row"), 1);
    ck_assert_int_eq(logged_with(OUTBOX_LOG_DEBUG, "relay r: claim: ", " in a row)"), 6);
    ck_assert_int_eq(logged_count(OUTBOX_LOG_WARN, "", NULL), 1);
    ck_assert_int_eq(logged_count(OUTBOX_LOG_INFO, "relay r: stopped (on an error): ", NULL), 1);
    assert_all_pending_uncharged(3);

    /* The lock gone, the same relay drains the route. */
    unlock_database();
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    outbox_stats_t st;
    ck_assert_int_eq(outbox_store_stats(store, "r", &st), OUTBOX_OK);
    ck_assert_int_eq(st.published, 3);
    outbox_relay_free(r);
    outbox_sink_close(sink);
    outbox_store_close(s);
}
END_TEST

START_TEST(until_idle_gives_up_on_a_sink_outage)
{
    for (int i = 0; i < 5; i++)
        stage("r", NULL, NULL);
    outbox_relay_config_t cfg = quick_config("r");
    cfg.backoff_base_us = 1000;
    cfg.backoff_cap_us = 2000;
    outbox_sink_t *sink;

    /* Seven outages in a row are ridden out... */
    calls_down = 7;
    test_sink_reset(down_then_up);
    outbox_relay_t *r = relay_on("test:", &sink, &cfg);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    outbox_relay_counters_t c;
    outbox_relay_counters(r, &c);
    ck_assert_int_eq(c.outages, 7);
    ck_assert_int_eq(c.published, 5);
    outbox_relay_free(r);
    outbox_sink_close(sink);

    /* ...the eighth ends the run, with the batch released uncharged. */
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open(db_path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, "DELETE FROM outbox", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    for (int i = 0; i < 5; i++)
        stage("r", NULL, NULL);
    calls_down = 1000;
    test_sink_reset(down_then_up);
    r = relay_on("test:", &sink, &cfg);
    n_log_lines = 0;
    outbox_set_logger(capture_log, NULL);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_ETRANSIENT);
    outbox_set_logger(NULL, NULL);
    dump_log();
    ck_assert_str_eq(outbox_relay_message(r), "giving up on route r after 8 consecutive transient failures "
                                              "under until-idle: sink unavailable: test sink says 1");
    outbox_relay_counters(r, &c);
    ck_assert_int_eq(c.outages, 8);
    ck_assert_int_eq(test_sink_calls(), 8);
    ck_assert_int_eq(logged_with(OUTBOX_LOG_WARN, "relay r: sink unavailable (test sink says 1): released 5 rows, "
                                                  "pausing ",
                                 " ms, then retrying; until-idle gives up after 8 transient failures in a row"),
                     1);
    ck_assert_int_eq(logged_count(OUTBOX_LOG_WARN, "", NULL), 1);
    assert_all_pending_uncharged(5);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

/* Down for seven calls, up for one, and so on. */
static int down_seven_of_eight(const outbox_message_t *m, int call)
{
    (void)m;
    return call % 8 != 7 ? OUTBOX_PUBLISH_RETRY : OUTBOX_PUBLISH_OK;
}

START_TEST(until_idle_counts_only_failures_in_a_row)
{
    for (int i = 0; i < 3; i++)
        stage("r", NULL, NULL);
    test_sink_reset(down_seven_of_eight);
    outbox_relay_config_t cfg = quick_config("r");
    cfg.batch = 1;
    cfg.backoff_base_us = 1000;
    cfg.backoff_cap_us = 2000;
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("test:", &sink, &cfg);
    /* 21 outages in all, but never 8 without a delivery between. */
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    outbox_relay_counters_t c;
    outbox_relay_counters(r, &c);
    ck_assert_int_eq(c.outages, 21);
    ck_assert_int_eq(c.published, 3);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

/* Every other call fails: the first wave of each batch goes out, the next
 * finds the sink down. */
static int odd_calls_down(const outbox_message_t *m, int call)
{
    (void)m;
    return call % 2 ? OUTBOX_PUBLISH_RETRY : OUTBOX_PUBLISH_OK;
}

START_TEST(until_idle_takes_a_partly_published_batch_as_progress)
{
    /* One key on an unordered sink: a wave per row. */
    for (int i = 0; i < 10; i++)
        stage("r", "k", NULL);
    test_sink_reset(odd_calls_down);
    outbox_relay_config_t cfg = quick_config("r");
    cfg.backoff_base_us = 1000;
    cfg.backoff_cap_us = 2000;
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("test:", &sink, &cfg);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    outbox_relay_counters_t c;
    outbox_relay_counters(r, &c);
    ck_assert_int_eq(c.outages, 9);
    ck_assert_int_eq(c.published, 10);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

/* Without until_idle: the logger lets the database go at the twelfth failed
 * claim, and stops the relay once it says the store is back. */
static outbox_relay_t *watched;
static int store_failures_seen;

static void unlock_at_twelfth_failure(void *ctx, int level, const char *line)
{
    capture_log(ctx, level, line);
    if (strncmp(line, "relay r: ", 9) == 0 && strstr(line, ": retrying in ") != NULL &&
        ++store_failures_seen == 12)
        unlock_database();
    if (strncmp(line, "relay r: store recovered after ", 31) == 0)
        outbox_relay_stop(watched);
}

START_TEST(store_failures_are_retried_and_warned_sparingly)
{
    for (int i = 0; i < 3; i++)
        stage("r", NULL, NULL);
    outbox_store_t *s = impatient_store();
    lock_database();
    test_sink_reset(NULL);
    outbox_relay_config_t cfg = quick_config("r");
    cfg.until_idle = 0;
    cfg.poll_us = 100; /* the store's retry pauses grow from this */
    outbox_sink_t *sink;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_sink_open("test:", NULL, &sink, &d), OUTBOX_OK);
    ck_assert_msg(outbox_relay_new(s, sink, &cfg, &watched, &d) == OUTBOX_OK, "%s", d.message);
    n_log_lines = 0;
    store_failures_seen = 0;
    outbox_set_logger(unlock_at_twelfth_failure, NULL);
    ck_assert_int_eq(outbox_relay_run(watched), OUTBOX_OK);
    outbox_set_logger(NULL, NULL);
    dump_log();
    ck_assert_int_eq(store_failures_seen, 12);
    /* Warned at the first failure, saying it keeps trying, and at the tenth. */
    ck_assert_int_eq(logged_with(OUTBOX_LOG_WARN, "relay r: claim: ",
                                 ": retrying in "), 1);
    ck_assert_int_eq(logged_with(OUTBOX_LOG_WARN, "relay r: claim: ",
                                 " ms, and for as long as it fails (a warning every 10 failures)"), 1);
    ck_assert_int_eq(logged_with(OUTBOX_LOG_WARN, "relay r: still failing after 10 attempts in a row: claim: ",
                                 ": retrying in "), 1);
    ck_assert_int_eq(logged_count(OUTBOX_LOG_WARN, "", NULL), 2);
    ck_assert_int_eq(logged_with(OUTBOX_LOG_DEBUG, "relay r: claim: ", " in a row)"), 10);
    ck_assert_int_eq(logged_count(OUTBOX_LOG_INFO, "relay r: store recovered after 12 failures in a row (", NULL),
                     1);
    outbox_stats_t st;
    ck_assert_int_eq(outbox_store_stats(store, "r", &st), OUTBOX_OK);
    if (test_pipeline() == 1) {
        ck_assert_int_eq(st.published, 3);
    } else {
        /* The stop came with the claim that succeeded, before its batch
         * was published: released, uncharged. */
        ck_assert_int_eq(st.published + st.pending, 3);
        ck_assert_int_eq(st.processing, 0);
    }
    outbox_relay_free(watched);
    watched = NULL;
    outbox_sink_close(sink);
    outbox_store_close(s);
}
END_TEST

static void stop_at_call_20(void *ctx)
{
    if (test_sink_calls() == 20)
        outbox_relay_stop(ctx);
}

START_TEST(sink_outage_is_retried_and_warned_sparingly)
{
    for (int i = 0; i < 5; i++)
        stage("r", NULL, NULL);
    calls_down = 1000;
    test_sink_reset(down_then_up);
    outbox_relay_config_t cfg = quick_config("r");
    cfg.until_idle = 0;
    cfg.backoff_base_us = 1000;
    cfg.backoff_cap_us = 2000;
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("test:", &sink, &cfg);
    test_sink_on_publish(stop_at_call_20, r);
    n_log_lines = 0;
    outbox_set_logger(capture_log, NULL);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    outbox_set_logger(NULL, NULL);
    test_sink_on_publish(NULL, NULL);
    dump_log();
    outbox_relay_counters_t c;
    outbox_relay_counters(r, &c);
    ck_assert_int_eq(c.outages, 21);
    ck_assert_int_eq(logged_with(OUTBOX_LOG_WARN, "relay r: sink unavailable (test sink says 1): released 5 rows, ",
                                 ", then retrying, and for as long as it fails (a warning every 10 failures)"),
                     1);
    ck_assert_int_eq(logged_with(OUTBOX_LOG_WARN, "relay r: sink still unavailable after 10 batches released ",
                                 ", then retrying"), 1);
    ck_assert_int_eq(logged_with(OUTBOX_LOG_WARN, "relay r: sink still unavailable after 20 batches released ",
                                 ", then retrying"), 1);
    ck_assert_int_eq(logged_count(OUTBOX_LOG_WARN, "", NULL), 3);
    ck_assert_int_eq(logged_count(OUTBOX_LOG_DEBUG, "relay r: sink still unavailable (", NULL), 18);
    assert_all_pending_uncharged(5);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

/* Every duration of the config is added to a clock somewhere (poll and
 * pause to the monotonic clock, a retry delay to the wall clock, the lease
 * subtracted from it), so each is bounded like a parsed duration. */
START_TEST(durations_above_limit_refused)
{
    outbox_sink_t *sink;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_sink_open("test:", NULL, &sink, &d), OUTBOX_OK);
    static const char *const names[] = {"lease_us", "poll_us", "backoff_base_us", "backoff_cap_us"};
    for (int m = 0; m < 4; m++) {
        for (int over = 0; over < 2; over++) {
            outbox_relay_config_t cfg;
            outbox_relay_config_init(&cfg);
            cfg.route = "r";
            cfg.until_idle = 1;
            int64_t v = over ? OUTBOX_DURATION_MAX_US + 1 : OUTBOX_DURATION_MAX_US;
            if (m == 0)
                cfg.lease_us = v;
            else if (m == 1)
                cfg.poll_us = v;
            else if (m == 2)
                cfg.backoff_base_us = cfg.backoff_cap_us = v;
            else
                cfg.backoff_cap_us = v;
            outbox_relay_t *r = NULL;
            int rc = outbox_relay_new(store, sink, &cfg, &r, &d);
            if (!over) {
                ck_assert_msg(rc == OUTBOX_OK, "%s at the limit: %s", names[m], d.message);
                ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
                outbox_relay_free(r);
                continue;
            }
            ck_assert_msg(rc == OUTBOX_EINVAL, "%s above the limit accepted", names[m]);
            ck_assert_ptr_null(r);
            ck_assert_msg(strstr(d.message, names[m]) && strstr(d.message, "at most 36500 days"),
                          "%s", d.message);
        }
    }
    outbox_relay_config_t cfg;
    outbox_relay_config_init(&cfg);
    cfg.route = "r";
    cfg.poll_us = INT64_MAX;
    outbox_relay_t *r = NULL;
    ck_assert_int_eq(outbox_relay_new(store, sink, &cfg, &r, &d), OUTBOX_EINVAL);
    ck_assert_msg(strstr(d.message, "poll_us"), "%s", d.message);

    /* The route is checked as staging and claiming check it, when the
     * relay is made, not at its first claim. */
    static const struct {
        const char *route, *problem;
    } routes[] = {
        {"bad\xff", "route is not valid UTF-8"},
        {"a\x01b", "route holds a control character at byte 1"},
        {"c1\xc2\x85", "route holds a control character at byte 2"},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        outbox_relay_config_init(&cfg);
        cfg.route = routes[i].route;
        r = NULL;
        ck_assert_int_eq(outbox_relay_new(store, sink, &cfg, &r, &d), OUTBOX_EINVAL);
        ck_assert_ptr_null(r);
        ck_assert_msg(strstr(d.message, routes[i].problem) && strstr(d.message, "relay config"), "%s",
                      d.message);
    }
    char long_route[300];
    memset(long_route, 'r', sizeof long_route - 1);
    long_route[sizeof long_route - 1] = '\0';
    cfg.route = long_route;
    ck_assert_int_eq(outbox_relay_new(store, sink, &cfg, &r, &d), OUTBOX_EINVAL);
    ck_assert_msg(strstr(d.message, "longer than 255 bytes"), "%s", d.message);
    cfg.route = "caf\xc3\xa9";
    ck_assert_int_eq(outbox_relay_new(store, sink, &cfg, &r, &d), OUTBOX_OK);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

/* ------------------------------------------------------------ observer */

typedef struct seen {
    outbox_relay_observation_t o;
    char route[32];
    char error[OUTBOX_MESSAGE_MAX];
    int64_t lag_us[16];
} seen_t;

static seen_t seen[16];
static int n_seen;

static void record(void *ctx, const outbox_relay_observation_t *o)
{
    ck_assert_ptr_eq(ctx, &n_seen);
    ck_assert_int_lt(n_seen, 16);
    seen_t *s = &seen[n_seen++];
    s->o = *o;
    snprintf(s->route, sizeof s->route, "%s", o->route);
    snprintf(s->error, sizeof s->error, "%s", o->error ? o->error : "(null)");
    ck_assert_uint_le(o->n_lag, 16);
    if (o->n_lag > 0)
        memcpy(s->lag_us, o->lag_us, o->n_lag * sizeof *o->lag_us);
    s->o.route = s->route;
    s->o.error = s->error;
    s->o.lag_us = s->lag_us;
}

static outbox_relay_config_t observed_config(const char *route)
{
    outbox_relay_config_t cfg = quick_config(route);
    cfg.observe = record;
    cfg.observe_ctx = &n_seen;
    n_seen = 0;
    return cfg;
}

static const char *reject_this, *retry_this;
static int reject_one_retry_one(const outbox_message_t *m, int call)
{
    (void)call;
    if (strcmp(m->event_id, reject_this) == 0)
        return OUTBOX_PUBLISH_REJECT;
    if (strcmp(m->event_id, retry_this) == 0 && call == 0)
        return OUTBOX_PUBLISH_RETRY;
    return OUTBOX_PUBLISH_OK;
}

START_TEST(observer_sees_each_step)
{
    char a[37], b[37];
    int64_t before = outbox_now_us();
    stage("r", NULL, a);
    stage("r", NULL, b);
    stage("r", NULL, NULL);
    stage("r", NULL, NULL);
    int64_t staged = outbox_now_us();
    reject_this = a;
    retry_this = b;
    test_sink_reset(reject_one_retry_one);
    outbox_relay_config_t cfg = observed_config("r");
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("test:", &sink, &cfg);
    size_t claimed = 0;
    /* 1: four claimed, two published, one retried, one dead. */
    ck_assert_int_eq(outbox_relay_step(r, &claimed), OUTBOX_OK);
    int64_t after = outbox_now_us();
    ck_assert_int_eq(n_seen, 1);
    const outbox_relay_observation_t *o = &seen[0].o;
    ck_assert_uint_eq(o->struct_size, sizeof *o);
    ck_assert_str_eq(o->route, "r");
    ck_assert_uint_eq(o->claimed, 4);
    ck_assert_uint_eq(o->published, 2);
    ck_assert_uint_eq(o->retried, 1);
    ck_assert_uint_eq(o->dead, 1);
    ck_assert_uint_eq(o->released, 0);
    ck_assert_uint_eq(o->fence_lost, 0);
    ck_assert_int_ge(o->claim_us, 0);
    ck_assert_int_ge(o->publish_us, 0);
    ck_assert_int_ge(o->settle_us, 0);
    ck_assert_int_le(o->claim_us + o->publish_us + o->settle_us, after - before);
    ck_assert_int_eq(o->outage, 0);
    ck_assert_int_eq(o->breaker_open, 0);
    ck_assert_int_eq(o->ok, 1);
    ck_assert_str_eq(o->error, "");
    ck_assert_uint_eq(o->n_lag, 2);
    for (size_t i = 0; i < 2; i++) {
        /* published after staging ended, staged after before */
        ck_assert_int_ge(o->lag_us[i], 0);
        ck_assert_int_le(o->lag_us[i], after - before);
    }
    (void)staged;
    /* 2: the retried row again (no backoff), published. */
    ck_assert_int_eq(outbox_relay_step(r, &claimed), OUTBOX_OK);
    ck_assert_int_eq(n_seen, 2);
    o = &seen[1].o;
    ck_assert_uint_eq(o->claimed, 1);
    ck_assert_uint_eq(o->published, 1);
    ck_assert_uint_eq(o->retried + o->dead + o->released, 0);
    ck_assert_uint_eq(o->n_lag, 1);
    /* 3: an empty claim: only the claim ran. */
    ck_assert_int_eq(outbox_relay_step(r, &claimed), OUTBOX_OK);
    ck_assert_int_eq(claimed, 0);
    ck_assert_int_eq(n_seen, 3);
    o = &seen[2].o;
    ck_assert_uint_eq(o->claimed + o->published + o->retried + o->dead + o->released, 0);
    ck_assert_int_ge(o->claim_us, 0);
    ck_assert_int_eq(o->publish_us, -1);
    ck_assert_int_eq(o->settle_us, -1);
    ck_assert_int_eq(o->ok, 1);
    ck_assert_uint_eq(o->n_lag, 0);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

START_TEST(observer_sees_outage_and_recovery)
{
    for (int i = 0; i < 3; i++)
        stage("r", NULL, NULL);
    calls_down = 1;
    test_sink_reset(down_then_up);
    outbox_relay_config_t cfg = observed_config("r");
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("test:", &sink, &cfg);
    size_t claimed;
    ck_assert_int_eq(outbox_relay_step(r, &claimed), OUTBOX_OK);
    ck_assert_int_eq(n_seen, 1);
    const outbox_relay_observation_t *o = &seen[0].o;
    ck_assert_uint_eq(o->claimed, 3);
    ck_assert_uint_eq(o->released, 3);
    ck_assert_uint_eq(o->published, 0);
    ck_assert_int_eq(o->outage, 1);
    ck_assert_int_eq(o->breaker_open, 1);
    ck_assert_int_eq(o->ok, 1);
    ck_assert_msg(strstr(o->error, "test sink") != NULL, "%s", o->error);
    ck_assert_uint_eq(o->n_lag, 0);
    ck_assert_int_eq(outbox_relay_step(r, &claimed), OUTBOX_OK);
    o = &seen[1].o;
    ck_assert_uint_eq(o->published, 3);
    ck_assert_int_eq(o->outage, 0);
    ck_assert_int_eq(o->breaker_open, 0);
    ck_assert_str_eq(o->error, "");
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

START_TEST(observer_sees_failed_claim)
{
    stage("r", NULL, NULL);
    test_sink_reset(NULL);
    outbox_store_t *s = impatient_store();
    outbox_relay_config_t cfg = observed_config("r");
    outbox_sink_t *sink;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_sink_open("test:", NULL, &sink, &d), OUTBOX_OK);
    outbox_relay_t *r = NULL;
    ck_assert_int_eq(outbox_relay_new(s, sink, &cfg, &r, &d), OUTBOX_OK);
    lock_database();
    size_t claimed;
    ck_assert_int_eq(outbox_relay_step(r, &claimed), OUTBOX_ETRANSIENT);
    unlock_database();
    ck_assert_int_eq(n_seen, 1);
    const outbox_relay_observation_t *o = &seen[0].o;
    ck_assert_int_eq(o->ok, 0);
    ck_assert_msg(strncmp(o->error, "claim: ", 7) == 0, "%s", o->error);
    ck_assert_str_eq(o->error, outbox_relay_message(r));
    ck_assert_int_ge(o->claim_us, 0);
    ck_assert_int_eq(o->publish_us, -1);
    ck_assert_int_eq(o->settle_us, -1);
    ck_assert_uint_eq(o->claimed, 0);
    outbox_relay_free(r);
    outbox_sink_close(sink);
    outbox_store_close(s);
}
END_TEST

/* While the relay publishes, its lease runs out and another handle claims the row. */
static void steal_rows(void *ctx)
{
    (void)ctx;
    usleep(5000);
    outbox_store_t *other = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_store_open(uri, NULL, &other, &d), OUTBOX_OK);
    outbox_claim_req_t req = {.struct_size = sizeof req, .route = "r", .limit = 10, .lease_us = 1000};
    const outbox_row_t *rows;
    size_t n;
    outbox_fence_t f;
    ck_assert_int_eq(outbox_store_claim(other, &req, &rows, &n, &f), OUTBOX_OK);
    ck_assert_int_eq(n, 1);
    outbox_store_close(other);
}

START_TEST(observer_sees_fence_lost)
{
    stage("r", NULL, NULL);
    test_sink_reset(NULL);
    outbox_relay_config_t cfg = observed_config("r");
    cfg.lease_us = 1000;
    cfg.no_lease_renewal = 1; /* else the lease would not run out */
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("test:", &sink, &cfg);
    test_sink_on_publish(steal_rows, NULL);
    size_t claimed;
    ck_assert_int_eq(outbox_relay_step(r, &claimed), OUTBOX_OK);
    test_sink_on_publish(NULL, NULL);
    ck_assert_int_eq(n_seen, 1);
    const outbox_relay_observation_t *o = &seen[0].o;
    ck_assert_uint_eq(o->claimed, 1);
    ck_assert_uint_eq(o->fence_lost, 1);
    ck_assert_uint_eq(o->published, 0);
    ck_assert_uint_eq(o->n_lag, 0);
    ck_assert_int_eq(o->ok, 1);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

/* While the relay publishes slowly, another handle tries to claim the
 * route after the lease has run out since the claim: *(size_t *)ctx gets
 * what it took. */
static void slow_publish_then_try_claim(void *ctx)
{
    usleep(450000); /* past the 150 ms lease three times over */
    outbox_store_t *other = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_store_open(uri, NULL, &other, &d), OUTBOX_OK);
    outbox_claim_req_t req = {.struct_size = sizeof req, .route = "r", .limit = 10, .lease_us = 150000};
    const outbox_row_t *rows;
    outbox_fence_t f;
    ck_assert_int_eq(outbox_store_claim(other, &req, &rows, (size_t *)ctx, &f), OUTBOX_OK);
    outbox_store_close(other);
}

/* A live relay keeps its rows through a publish three leases long: the
 * renewer moves the lease on, another claim takes nothing, and the relay's
 * settle (with the renewed fence) is applied. Without renewal (the
 * control) the other claim takes the row over and the settle is refused. */
static void slow_publish(int renew)
{
    char x[37];
    stage("r", NULL, x);
    test_sink_reset(NULL);
    outbox_relay_config_t cfg = observed_config("r");
    cfg.lease_us = 150000;
    cfg.no_lease_renewal = !renew;
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("test:", &sink, &cfg);
    size_t taken = 99, claimed = 0;
    test_sink_on_publish(slow_publish_then_try_claim, &taken);
    ck_assert_int_eq(outbox_relay_step(r, &claimed), OUTBOX_OK);
    test_sink_on_publish(NULL, NULL);
    ck_assert_int_eq(claimed, 1);
    ck_assert_int_eq(n_seen, 1);
    row_state_t st = state_of(x);
    if (renew) {
        ck_assert_msg(taken == 0, "another claim took %zu rows of a live relay", taken);
        ck_assert_uint_eq(seen[0].o.fence_lost, 0);
        ck_assert_uint_eq(seen[0].o.published, 1);
        ck_assert_str_eq(st.status, "published");
        ck_assert_int_eq(st.attempts, 1);
    } else {
        ck_assert_int_eq(taken, 1);
        ck_assert_uint_eq(seen[0].o.fence_lost, 1);
        ck_assert_str_eq(st.status, "processing");
        ck_assert_int_eq(st.attempts, 2);
    }
    outbox_relay_free(r);
    outbox_sink_close(sink);
}

START_TEST(renewal_keeps_rows_through_slow_publish)
{
    slow_publish(1);
}
END_TEST

START_TEST(without_renewal_slow_publish_loses_rows)
{
    slow_publish(0);
}
END_TEST

/* Key "stuck" is deferred for the first three calls (its partition has no
 * leader), everything else goes through. */
static int defer_stuck_key(const outbox_message_t *m, int call)
{
    return strcmp(m->key, "stuck") == 0 && call < 3 ? OUTBOX_PUBLISH_DEFER : OUTBOX_PUBLISH_OK;
}

/* DEFER hands a row back uncharged and holds back the later rows of its key
 * in the batch, without tripping the breaker: the other keys of the batch
 * are published in the same step, and once the sink stops deferring, the
 * stuck key's rows go out in order with one attempt each. */
START_TEST(defer_releases_uncharged_and_holds_key)
{
    char stuck[3][37], free_[3][37];
    for (int i = 0; i < 3; i++) {
        stage("r", "stuck", stuck[i]);
        stage("r", "free", free_[i]);
    }
    test_sink_reset(defer_stuck_key);
    outbox_relay_config_t cfg = quick_config("r");
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("testordered:", &sink, &cfg);
    size_t claimed = 0;
    ck_assert_int_eq(outbox_relay_step(r, &claimed), OUTBOX_OK);
    ck_assert_int_eq(claimed, 6);
    for (int i = 0; i < 3; i++) {
        ck_assert_str_eq(state_of(free_[i]).status, "published");
        row_state_t st = state_of(stuck[i]);
        ck_assert_str_eq(st.status, "pending");
        ck_assert_int_eq(st.attempts, 0);
    }
    outbox_relay_counters_t c;
    outbox_relay_counters(r, &c);
    ck_assert_uint_eq(c.outages, 0);
    ck_assert_uint_eq(c.retried, 0);
    ck_assert_uint_eq(c.released, 3);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    for (int i = 0; i < 3; i++) {
        row_state_t st = state_of(stuck[i]);
        ck_assert_str_eq(st.status, "published");
        ck_assert_int_eq(st.attempts, 1);
    }
    assert_first_delivery_order("stuck", stuck, 3);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

/* With a backoff base, a deferred row is kept out of the next claims for
 * that long (uncharged), so the stuck keys do not fill every batch. */
START_TEST(defer_holds_row_back_for_backoff_base)
{
    char stuck[37];
    stage("r", "stuck", stuck);
    test_sink_reset(defer_stuck_key);
    outbox_relay_config_t cfg = quick_config("r");
    cfg.backoff_base_us = 400000;
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("testordered:", &sink, &cfg);
    size_t claimed = 0;
    long long before = (long long)outbox_now_us();
    ck_assert_int_eq(outbox_relay_step(r, &claimed), OUTBOX_OK);
    ck_assert_int_eq(claimed, 1);
    row_state_t st = state_of(stuck);
    ck_assert_str_eq(st.status, "pending");
    ck_assert_int_eq(st.attempts, 0);
    ck_assert_msg(st.available_at >= before + 400000, "available_at %lld, deferred at %lld", st.available_at,
                  before);
    ck_assert_int_eq(outbox_relay_step(r, &claimed), OUTBOX_OK);
    ck_assert_int_eq(claimed, 0);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

/* Lease 0 picks the default: the short one when the store renews, the long
 * one when renewal is off. */
START_TEST(default_lease_follows_renewal)
{
    for (int off = 0; off < 2; off++) {
        outbox_relay_config_t cfg = quick_config("r");
        ck_assert_int_eq(cfg.lease_us, 0);
        cfg.no_lease_renewal = off;
        outbox_sink_t *sink;
        outbox_relay_t *r = relay_on("test:", &sink, &cfg);
        n_log_lines = 0;
        outbox_set_logger(capture_log, NULL);
        ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
        outbox_set_logger(NULL, NULL);
        const char *line = NULL;
        ck_assert_int_eq(logged_count(OUTBOX_LOG_INFO, "relay r: started: ", &line), 1);
        ck_assert_msg(strstr(line, off ? "lease 30s (not renewed)" : "lease 3s (renewed every 1s)"), "%s",
                      line);
        outbox_relay_free(r);
        outbox_sink_close(sink);
    }
}
END_TEST

/* ------------------------------------------------ the pipelined relay */

/* What a pipelined relay's sink saw, checked against the store as each
 * message is published (on the relay's publishing thread). */
static struct {
    int violations;      /* an earlier row of the key had no stored verdict */
    char first[200];     /* the first violation */
    int most_in_flight;  /* most claims holding rows in processing at once */
    int64_t slow_us;     /* each publish call sleeps this long */
    int down_from, down_calls; /* calls from down_from RETRY everything, three of them */
} pipe_seen;

/* Each earlier row of m's key must have its verdict stored (published or
 * dead) before m goes out, unless it is in m's own batch (processing under
 * the same claim: the same processing_at). Also counts the claims that
 * hold rows at this moment. */
static void check_key_free(const outbox_message_t *m)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    if (sqlite3_open(db_path, &db) != SQLITE_OK)
        goto done;
    sqlite3_busy_timeout(db, 5000);
    if (m->row->ordering_key != NULL &&
        sqlite3_prepare_v2(db,
                           "SELECT count(*) FROM outbox o WHERE o.ordering_key = ?1 AND o.id < ?2 "
                           "AND o.status NOT IN ('published', 'dead') AND NOT (o.status = 'processing' "
                           "AND o.processing_at = (SELECT processing_at FROM outbox WHERE id = ?2))",
                           -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_text(q, 1, m->row->ordering_key, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 2, m->row->id, -1, SQLITE_STATIC);
        if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_int(q, 0) > 0 && pipe_seen.violations++ == 0)
            snprintf(pipe_seen.first, sizeof pipe_seen.first, "%s of key %s went out with %d earlier rows undecided",
                     m->event_id, m->row->ordering_key, sqlite3_column_int(q, 0));
        sqlite3_finalize(q);
    }
    if (sqlite3_prepare_v2(db, "SELECT count(DISTINCT processing_at) FROM outbox WHERE status = 'processing'",
                           -1, &q, NULL) == SQLITE_OK) {
        if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_int(q, 0) > pipe_seen.most_in_flight)
            pipe_seen.most_in_flight = sqlite3_column_int(q, 0);
        sqlite3_finalize(q);
    }
done:
    sqlite3_close(db);
}

static unsigned id_hash(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* Times each event reached the sink (the breaker may hand a row back
 * without charging it, so the row's attempts do not count them). */
static struct {
    char id[37];
    int n;
} tries[128];

static int tries_of(const char *event_id)
{
    for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
        if (tries[i].id[0] == '\0')
            snprintf(tries[i].id, sizeof tries[i].id, "%s", event_id);
        if (strcmp(tries[i].id, event_id) == 0)
            return ++tries[i].n;
    }
    return 99;
}

/* One row that is always REJECTed, whatever the ids' hashes: with random
 * ids none of them may fall on h % 13 == 1 (about once in 250 runs). */
static char forced_reject[37];

/* Some rows RETRY on their first two tries, some are REJECTed, the rest OK. */
static int pipelined_failures(const outbox_message_t *m, int call)
{
    (void)call;
    check_key_free(m);
    usleep(500);
    unsigned h = id_hash(m->event_id) >> 4;
    if (tries_of(m->event_id) <= 2 && h % 4 == 0)
        return OUTBOX_PUBLISH_RETRY;
    if (h % 13 == 1 || strcmp(m->event_id, forced_reject) == 0)
        return OUTBOX_PUBLISH_REJECT;
    return OUTBOX_PUBLISH_OK;
}

/* Several batches in flight, retries and rejects among them: no key's row
 * goes out while an earlier row of the key waits for its verdict, and the
 * consumers see each key in staging order. */
START_TEST(pipeline_holds_a_key_until_its_verdict_is_stored)
{
    enum { KEYS = 6, PER = 12 };
    char ids[KEYS][PER][37], key[KEYS][8];
    for (int j = 0; j < PER; j++)
        for (int kk = 0; kk < KEYS; kk++) {
            snprintf(key[kk], sizeof key[kk], "k%d", kk);
            stage("r", key[kk], ids[kk][j]);
        }
    memset(&pipe_seen, 0, sizeof pipe_seen);
    memset(tries, 0, sizeof tries);
    snprintf(forced_reject, sizeof forced_reject, "%s", ids[KEYS / 2][PER / 2]);
    test_sink_reset(pipelined_failures);
    outbox_relay_config_t cfg = quick_config("r");
    cfg.pipeline = 4;
    cfg.batch = 4;
    cfg.max_attempts = 10;
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("test:", &sink, &cfg);
    /* A round of a single row that RETRYs looks like an outage, and eight
     * in a row end an until_idle run: run again, it is not what is tested. */
    int rc = OUTBOX_ETRANSIENT;
    for (int i = 0; i < 20 && rc == OUTBOX_ETRANSIENT; i++)
        rc = outbox_relay_run(r);
    ck_assert_int_eq(rc, OUTBOX_OK);
    ck_assert_msg(pipe_seen.violations == 0, "%d violations, first: %s", pipe_seen.violations,
                  pipe_seen.first);
    ck_assert_int_ge(pipe_seen.most_in_flight, 2);
    outbox_relay_counters_t c;
    outbox_relay_counters(r, &c);
    ck_assert_int_gt(c.retried, 0);
    ck_assert_int_gt(c.dead, 0);
    ck_assert_int_eq(c.published + c.dead, KEYS * PER);
    for (int kk = 0; kk < KEYS; kk++) {
        char published[PER][37];
        int n = 0;
        for (int j = 0; j < PER; j++)
            if (strcmp(state_of(ids[kk][j]).status, "published") == 0)
                memcpy(published[n++], ids[kk][j], 37);
        assert_first_delivery_order(key[kk], published, n);
    }
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

static int slow_ok(const outbox_message_t *m, int call)
{
    (void)m;
    (void)call;
    return OUTBOX_PUBLISH_OK;
}

static void sleep_per_call(void *ctx)
{
    (void)ctx;
    usleep((useconds_t)pipe_seen.slow_us);
}

/* Batches wait in the pipeline longer than their lease: the renewer keeps
 * every one of them, each settles with its own (renewed) fence, and the
 * relay never claims its own batches again. */
START_TEST(pipeline_renews_and_fences_each_batch)
{
    enum { N = 40 };
    for (int i = 0; i < N; i++)
        stage("r", NULL, NULL);
    memset(&pipe_seen, 0, sizeof pipe_seen);
    pipe_seen.slow_us = 120000;
    test_sink_reset(slow_ok);
    test_sink_on_publish(sleep_per_call, NULL);
    outbox_relay_config_t cfg = quick_config("r");
    cfg.pipeline = 4;
    cfg.batch = 5;
    cfg.lease_us = 300000; /* the fourth batch waits 3 x 120 ms for its turn */
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("test:", &sink, &cfg);
    n_log_lines = 0;
    outbox_set_logger(capture_log, NULL);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    outbox_set_logger(NULL, NULL);
    test_sink_on_publish(NULL, NULL);
    outbox_relay_counters_t c;
    outbox_relay_counters(r, &c);
    ck_assert_int_eq(c.published, N);
    ck_assert_int_eq(c.claimed, N);
    ck_assert_int_eq(c.fence_lost, 0);
    const char *line = NULL;
    ck_assert_int_eq(logged_count(OUTBOX_LOG_INFO, "relay r: stopped (", &line), 1);
    const char *renewed = strstr(line, "leases renewed ");
    ck_assert_ptr_nonnull(renewed);
    ck_assert_msg(atoi(renewed + 15) > 0, "%s", line);
    int attempts = 0;
    query_ints("SELECT max(attempts) FROM outbox", &attempts, 1);
    ck_assert_int_eq(attempts, 1);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

/* Calls down_from to down_from + 2 RETRY everything (decided per call:
 * a call is down or up as a whole); three outages in a row stay below
 * until_idle's eight. */
static int down_for_a_while(const outbox_message_t *m, int call)
{
    (void)m;
    static int decided_call = -1, decided;
    usleep(2000);
    if (call == decided_call)
        return decided;
    decided_call = call;
    decided = OUTBOX_PUBLISH_OK;
    if (call >= pipe_seen.down_from && call < pipe_seen.down_from + 3) {
        decided = OUTBOX_PUBLISH_RETRY;
        pipe_seen.down_calls++;
    }
    return decided;
}

/* The sink goes down with batches in the pipeline: they go back
 * unpublished and uncharged, and while it is down only one batch at a time
 * tries it (each try is one outage: no other batch reaches the sink). */
START_TEST(pipeline_outage_releases_the_pipeline_uncharged)
{
    enum { N = 60 };
    for (int i = 0; i < N; i++)
        stage("r", NULL, NULL);
    memset(&pipe_seen, 0, sizeof pipe_seen);
    pipe_seen.down_from = 2;
    test_sink_reset(down_for_a_while);
    outbox_relay_config_t cfg = quick_config("r");
    cfg.pipeline = 4;
    cfg.batch = 5;
    cfg.max_attempts = 2; /* would dead-letter rows if the outage charged them */
    cfg.backoff_base_us = 10000;
    cfg.backoff_cap_us = 40000;
    outbox_sink_t *sink;
    outbox_relay_t *r = relay_on("test:", &sink, &cfg);
    ck_assert_int_eq(outbox_relay_run(r), OUTBOX_OK);
    outbox_relay_counters_t c;
    outbox_relay_counters(r, &c);
    ck_assert_int_eq(c.published, N);
    ck_assert_int_eq(c.dead, 0);
    ck_assert_int_eq(pipe_seen.down_calls, 3);
    ck_assert_int_eq(c.outages, 3);
    /* The batches behind the first one the outage caught went back unpublished. */
    ck_assert_int_gt(c.released, 5);
    int published[2] = {0};
    query_ints("SELECT max(attempts), count(*) FROM outbox WHERE status = 'published'", published, 2);
    ck_assert_int_eq(published[0], 1);
    ck_assert_int_eq(published[1], N);
    outbox_relay_free(r);
    outbox_sink_close(sink);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("relay");
    TCase *tc = tcase_create("relay");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, retry_then_success);
    tcase_add_test(tc, renewal_keeps_rows_through_slow_publish);
    tcase_add_test(tc, without_renewal_slow_publish_loses_rows);
    tcase_add_test(tc, default_lease_follows_renewal);
    tcase_add_test(tc, pipeline_holds_a_key_until_its_verdict_is_stored);
    tcase_add_test(tc, pipeline_renews_and_fences_each_batch);
    tcase_add_test(tc, pipeline_outage_releases_the_pipeline_uncharged);
    tcase_add_test(tc, defer_releases_uncharged_and_holds_key);
    tcase_add_test(tc, defer_holds_row_back_for_backoff_base);
    tcase_add_test(tc, dead_after_max_attempts);
    tcase_add_test(tc, reject_is_dead_at_once);
    tcase_add_test(tc, exhausted_head_leaves_key_in_order);
    tcase_add_test(tc, fifo_head_failure_unordered_sink);
    tcase_add_test(tc, fifo_head_failure_ordered_sink);
    tcase_add_test(tc, fifo_key_blocked_while_head_waits);
    tcase_add_test(tc, fifo_head_reject_unordered_sink);
    tcase_add_test(tc, fifo_head_reject_ordered_sink);
    tcase_add_test(tc, reject_lost_in_crash_unordered_sink);
    tcase_add_test(tc, reject_lost_in_crash_ordered_sink);
    tcase_add_test(tc, retry_lost_in_crash_unordered_sink);
    tcase_add_test(tc, retry_lost_in_crash_ordered_sink);
    tcase_add_test(tc, ordered_sink_breaking_promise_row_is_published);
    tcase_add_test(tc, fifo_many_keys_random_failures);
    tcase_add_test(tc, fencing_after_lease_expiry);
    tcase_add_test(tc, outage_never_charges_attempts);
    tcase_add_test(tc, graceful_stop_leaves_nothing_processing);
    tcase_add_test(tc, sigkill_mid_run_loses_nothing);
    tcase_add_test(tc, file_sink_stops_key_after_reject);
    tcase_add_test(tc, bad_config_refused);
    tcase_add_test(tc, durations_above_limit_refused);
    tcase_add_test(tc, log_tells_start_outage_recovery_batches_and_stop);
    tcase_add_test(tc, log_says_why_the_relay_stopped);
    tcase_add_test(tc, until_idle_gives_up_on_a_failing_store);
    tcase_add_test(tc, until_idle_gives_up_on_a_sink_outage);
    tcase_add_test(tc, until_idle_counts_only_failures_in_a_row);
    tcase_add_test(tc, until_idle_takes_a_partly_published_batch_as_progress);
    tcase_add_test(tc, store_failures_are_retried_and_warned_sparingly);
    tcase_add_test(tc, sink_outage_is_retried_and_warned_sparingly);
    tcase_add_test(tc, observer_sees_each_step);
    tcase_add_test(tc, observer_sees_outage_and_recovery);
    tcase_add_test(tc, observer_sees_failed_claim);
    tcase_add_test(tc, observer_sees_fence_lost);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
