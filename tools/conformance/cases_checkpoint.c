/* Conformance cases: the clock checkpoint, a max-upsert per node key. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "conf_int.h"

static int64_t recover(outbox_store_t *s)
{
    int64_t mark = -1;
    conf_ok(s, outbox_store_checkpoint_recover(s, &mark));
    return mark;
}

static void advance(outbox_store_t *s, const char *key, int64_t hlc)
{
    int rc = outbox_store_checkpoint_advance(s, NULL, key, hlc);
    ck_assert_msg(rc == OUTBOX_OK, "advancing %s to %lld: %s (%s)", key, (long long)hlc,
                  outbox_strerror(rc), outbox_store_message(s));
}

#define ck_assert_mark(s, want, when)                                                             \
    do {                                                                                          \
        int64_t got_ = recover(s);                                                                \
        ck_assert_msg(got_ == (want), "%s: recover gave %lld, expected %lld", when,               \
                      (long long)got_, (long long)(want));                                        \
    } while (0)

START_TEST(checkpoint_recover_empty)
{
    outbox_store_t *s = conf_open();
    ck_assert_mark(s, 0, "no mark written yet");
    outbox_store_close(s);
}
END_TEST

START_TEST(checkpoint_advance_recover)
{
    outbox_store_t *s = conf_open();
    advance(s, "node-a", 1000);
    ck_assert_mark(s, 1000, "after advancing node-a to 1000");
    advance(s, "node-a", 2000);
    ck_assert_mark(s, 2000, "after advancing node-a to 2000");
    /* Another handle reads what this one wrote. */
    outbox_store_t *other = conf_open();
    ck_assert_mark(other, 2000, "from another handle");
    outbox_store_close(other);
    outbox_store_close(s);
}
END_TEST

START_TEST(checkpoint_max_across_keys)
{
    outbox_store_t *s = conf_open();
    advance(s, "node-a", 500);
    advance(s, "node-b", 1500);
    advance(s, "node-c", 700);
    ck_assert_mark(s, 1500, "marks 500, 1500, 700");
    advance(s, "node-c", 1600);
    ck_assert_mark(s, 1600, "after node-c moved to 1600");
    outbox_store_close(s);
}
END_TEST

START_TEST(checkpoint_never_lowered)
{
    outbox_store_t *s = conf_open();
    advance(s, "node-a", 1000);
    advance(s, "node-b", 900);
    /* Were node-a lowered to 10, the max across keys would drop to 900. */
    advance(s, "node-a", 10);
    ck_assert_mark(s, 1000, "after advancing node-a from 1000 to 10");
    advance(s, "node-a", 1000);
    ck_assert_mark(s, 1000, "after advancing node-a to its own value");
    advance(s, "node-a", 0);
    ck_assert_mark(s, 1000, "after advancing node-a to 0");
    outbox_store_close(s);
}
END_TEST

START_TEST(checkpoint_rollback_no_trace)
{
    outbox_store_t *s = conf_open();
    advance(s, "node-a", 100);
    conf_ok(s, outbox_store_begin(s));
    advance(s, "node-a", 5000);
    advance(s, "node-new", 9000);
    conf_ok(s, outbox_store_rollback(s));
    ck_assert_mark(s, 100, "after advances in a rolled-back transaction");
    conf_ok(s, outbox_store_begin(s));
    advance(s, "node-a", 200);
    conf_ok(s, outbox_store_commit(s));
    ck_assert_mark(s, 200, "after an advance in a committed transaction");
    outbox_store_close(s);
}
END_TEST

/* ------------------------------------------------------- compare-and-set */

typedef struct racer {
    outbox_store_t *s;
    const char *key;
    int64_t hlc;
    int rc;
    unsigned transient;
    char message[OUTBOX_MESSAGE_MAX];
    atomic_int done;
} racer_t;

/* Handle B's advance: it may wait on A's lock, or be told to retry. */
static void *racer_run(void *arg)
{
    racer_t *r = arg;
    do {
        r->rc = outbox_store_checkpoint_advance(r->s, NULL, r->key, r->hlc);
        if (r->rc == OUTBOX_ETRANSIENT)
            conf_sleep_ms(10);
    } while (r->rc == OUTBOX_ETRANSIENT && ++r->transient < 500);
    if (r->rc != OUTBOX_OK)
        snprintf(r->message, sizeof r->message, "%s", outbox_store_message(r->s));
    atomic_store(&r->done, 1);
    return NULL;
}

/* Handle A holds an advance to held in an open transaction while handle B,
 * on another thread, advances the same key to racing; then A commits. */
static void race(const char *key, int64_t held, int64_t racing)
{
    outbox_store_t *a = conf_open();
    outbox_store_t *b = conf_open();
    conf_ok(a, outbox_store_begin(a));
    advance(a, key, held);

    racer_t r = {.s = b, .key = key, .hlc = racing};
    atomic_init(&r.done, 0);
    pthread_t t;
    ck_assert_msg(pthread_create(&t, NULL, racer_run, &r) == 0, "cannot start a thread");
    conf_sleep_ms(200); /* long enough for B to be at the store, waiting */
    int rc = outbox_store_commit(a);
    pthread_join(t, NULL);
    ck_assert_msg(rc == OUTBOX_OK, "committing A's advance: %s (%s)", outbox_strerror(rc),
                  outbox_store_message(a));
    ck_assert_msg(r.rc == OUTBOX_OK, "B's advance to %lld: %s (%s)", (long long)racing,
                  outbox_strerror(r.rc), r.message);

    int64_t want = held > racing ? held : racing;
    int64_t got = recover(a);
    ck_assert_msg(got == want,
                  "%s: A held %lld in a transaction while B advanced to %lld; after A committed "
                  "the mark is %lld, expected %lld%s",
                  key, (long long)held, (long long)racing, (long long)got, (long long)want,
                  got == racing ? " (B's write replaced A's: a read-modify-write, not a max-upsert)"
                                : "");
    outbox_store_close(b);
    outbox_store_close(a);
}

START_TEST(compare_and_set_hold_100)
{
    race("node-fresh", 100, 50); /* no row yet: both insert */
    outbox_store_t *s = conf_open();
    advance(s, "node-seeded", 10);
    outbox_store_close(s);
    race("node-seeded", 100, 50); /* a row already: both update */
}
END_TEST

START_TEST(compare_and_set_hold_50)
{
    race("node-fresh", 50, 100);
    outbox_store_t *s = conf_open();
    advance(s, "node-seeded", 10);
    outbox_store_close(s);
    race("node-seeded", 50, 100);
}
END_TEST

/* A store without transactions has nothing to hold, so this is its
 * compare-and-set race: random advances from two handles at once, many
 * times. Stores with transactions run it too; it costs little. */
#define RANDOM_ADVANCES 2000

typedef struct advancer {
    outbox_store_t *s;
    uint32_t seed;
    int64_t max;
    int rc;
    char message[OUTBOX_MESSAGE_MAX];
} advancer_t;

static void *advancer_run(void *arg)
{
    advancer_t *a = arg;
    uint32_t x = a->seed;
    unsigned transient = 0;
    for (int i = 0; i < RANDOM_ADVANCES; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        int64_t hlc = (int64_t)(x % 1000000000u) + 1;
        a->rc = outbox_store_checkpoint_advance(a->s, NULL, "node-random", hlc);
        if (a->rc == OUTBOX_ETRANSIENT && ++transient < 1000) {
            i--;
            continue;
        }
        if (a->rc != OUTBOX_OK) {
            snprintf(a->message, sizeof a->message, "%s", outbox_store_message(a->s));
            break;
        }
        if (hlc > a->max)
            a->max = hlc;
    }
    return NULL;
}

START_TEST(compare_and_set_concurrent)
{
    advancer_t a[2] = {{.seed = 0x9e3779b9u}, {.seed = 0x7f4a7c15u}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        outbox_diag_t d = {0};
        a[i].s = conf_open_quiet(&d);
        ck_assert_msg(a[i].s != NULL, "opening handle %d: %s", i, d.message);
    }
    for (int i = 0; i < 2; i++)
        ck_assert_msg(pthread_create(&t[i], NULL, advancer_run, &a[i]) == 0, "cannot start a thread");
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++)
        ck_assert_msg(a[i].rc == OUTBOX_OK, "advancer %d: %s (%s)", i, outbox_strerror(a[i].rc),
                      a[i].message);
    int64_t want = a[0].max > a[1].max ? a[0].max : a[1].max;
    ck_assert_mark(a[0].s, want, "after 2 x 2000 concurrent random advances");
    for (int i = 0; i < 2; i++)
        outbox_store_close(a[i].s);
}
END_TEST

#define CK_ROUTE "conf.ckpt"
#define CK_NODE "node-stage"

/* The route stamps hlc and advances CK_NODE's mark when staged in a
 * transaction. */
static void ck_route(outbox_store_t *s)
{
    outbox_route_config_t cfg = {.struct_size = sizeof cfg, .route = CK_ROUTE, .hlc = 1,
                                 .checkpoint_node_key = CK_NODE};
    conf_ok(s, outbox_store_configure_route(s, &cfg));
}

/* The highest hlc among the route's claimable rows (claiming them). */
static int64_t claimed_max_hlc(outbox_store_t *s, size_t want)
{
    conf_claim_t c = conf_claim(s, CK_ROUTE, 100, CONF_LONG_LEASE_US, 1);
    ck_assert_msg(c.n == want, "claimed %zu rows, expected %zu", c.n, want);
    int64_t max = 0;
    for (size_t i = 0; i < c.n; i++)
        if (c.rows[i].hlc > max)
            max = c.rows[i].hlc;
    conf_claim_free(&c);
    return max;
}

/* Staging in a transaction advances the mark in that same transaction:
 * committed, the mark is the batch's highest hlc; rolled back, nothing;
 * staging outside a transaction never advances it. */
START_TEST(stage_advances_checkpoint)
{
    outbox_store_t *s = conf_open();
    outbox_store_t *other = conf_open();
    ck_route(s);
    conf_stage(s, NULL, CK_ROUTE, 0, 2, NULL);
    ck_assert_mark(s, 0, "after staging outside a transaction");
    claimed_max_hlc(s, 2);

    conf_ok(s, outbox_store_begin(s));
    conf_stage(s, NULL, CK_ROUTE, 10, 2, NULL);
    conf_ok(s, outbox_store_rollback(s));
    ck_assert_mark(s, 0, "after staging in a transaction that rolled back");
    ck_assert_mark(other, 0, "from another handle, after the rollback");

    conf_ok(s, outbox_store_begin(s));
    conf_stage(s, NULL, CK_ROUTE, 20, 3, NULL);
    ck_assert_mark(other, 0, "from another handle, before the staging transaction committed");
    conf_ok(s, outbox_store_commit(s));
    int64_t max = claimed_max_hlc(s, 3);
    ck_assert_msg(max > 0, "rows staged with hlc on came back without hlc");
    ck_assert_mark(other, max, "after staging in a transaction that committed (the batch's max hlc)");
    outbox_store_close(other);
    outbox_store_close(s);
}
END_TEST

/* Through an application's native handle, both a stage and an explicit
 * advance ride that handle's transaction. */
START_TEST(checkpoint_native_tx)
{
    void *h = NULL;
    outbox_store_t *s = conf_open_raw(&h);
    ck_route(s);
    for (int commit = 0; commit <= 1; commit++) {
        void *native = conf_native_begin(h);
        conf_stage(s, native, CK_ROUTE, 10 * (unsigned long)commit, 2, NULL);
        int rc = outbox_store_checkpoint_advance(s, native, "node-native", 1000 + commit);
        ck_assert_msg(rc == OUTBOX_OK, "advancing through the native handle: %s (%s)",
                      outbox_strerror(rc), outbox_store_message(s));
        ck_assert_mark(s, 0, "before the native transaction ended");
        conf_native_end(h, native, commit);
        if (!commit)
            ck_assert_mark(s, 0, "after the native transaction rolled back");
    }
    int64_t max = claimed_max_hlc(s, 2);
    int64_t want = max > 1001 ? max : 1001;
    ck_assert_mark(s, want, "after the native transaction committed");
    outbox_store_close(s);
}
END_TEST

void conf_cases_checkpoint(conf_cases_t *c)
{
    const uint32_t ck = OUTBOX_SCHEMA_CHECKPOINT;
    conf_add(c, checkpoint_recover_empty, CONF_NEED_CHECKPOINT, ck, 20);
    conf_add(c, checkpoint_advance_recover, CONF_NEED_CHECKPOINT, ck, 20);
    conf_add(c, checkpoint_max_across_keys, CONF_NEED_CHECKPOINT, ck, 20);
    conf_add(c, checkpoint_never_lowered, CONF_NEED_CHECKPOINT, ck, 20);
    conf_add(c, checkpoint_rollback_no_trace, CONF_NEED_CHECKPOINT | CONF_NEED_TX, ck, 20);
    conf_add(c, compare_and_set_hold_100, CONF_NEED_CHECKPOINT | CONF_NEED_TX, ck, 30);
    conf_add(c, compare_and_set_hold_50, CONF_NEED_CHECKPOINT | CONF_NEED_TX, ck, 30);
    conf_add(c, compare_and_set_concurrent, CONF_NEED_CHECKPOINT, ck, 60);
    conf_add(c, stage_advances_checkpoint, CONF_NEED_CHECKPOINT | CONF_NEED_TX | CONF_NEED_HLC,
             ck | OUTBOX_SCHEMA_HLC, 20);
    conf_add(c, checkpoint_native_tx, CONF_NEED_CHECKPOINT | CONF_NEED_NATIVE | CONF_NEED_HLC,
             ck | OUTBOX_SCHEMA_HLC, 20);
}
