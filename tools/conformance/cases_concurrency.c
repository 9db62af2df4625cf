/* Conformance cases: several claimers at once, each a thread with its own
 * handle. Threads never fail the case themselves (only the case's main
 * thread may): each writes down what went wrong and the main thread
 * asserts after joining them. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf_int.h"

#define ROUTE "conf.concurrent"
#define THREADS 4
#define BATCH 50
/* A store may report a busy lock as transient; a claimer retries those,
 * as a relay would, but only so often. */
#define MAX_TRANSIENT 200

typedef struct worker {
    pthread_t thread;
    outbox_store_t *s;
    unsigned index;
    void *shared;
    size_t claimed;
    unsigned transient;
    char error[OUTBOX_MESSAGE_MAX];
} worker_t;

static void worker_fail(worker_t *w, const char *what, int rc)
{
    if (w->error[0] == '\0')
        snprintf(w->error, sizeof w->error, "claimer %u: %s: %s (%s)", w->index, what,
                 outbox_strerror(rc), outbox_store_message(w->s));
}

/* 0: go on; 1: retry; -1: give up (w->error says why). */
static int transient_or_fail(worker_t *w, const char *what, int rc)
{
    if (rc == OUTBOX_ETRANSIENT && ++w->transient <= MAX_TRANSIENT) {
        conf_sleep_ms(1);
        return 1;
    }
    worker_fail(w, what, rc);
    return -1;
}

static void start_workers(worker_t *w, void *(*fn)(void *), void *shared)
{
    for (unsigned i = 0; i < THREADS; i++) {
        outbox_diag_t d = {0};
        memset(&w[i], 0, sizeof w[i]);
        w[i].index = i;
        w[i].shared = shared;
        w[i].s = conf_open_quiet(&d);
        ck_assert_msg(w[i].s != NULL, "opening handle %u: %s", i, d.message);
    }
    for (unsigned i = 0; i < THREADS; i++)
        ck_assert_msg(pthread_create(&w[i].thread, NULL, fn, &w[i]) == 0, "cannot start a thread");
}

static void join_workers(worker_t *w)
{
    for (unsigned i = 0; i < THREADS; i++)
        pthread_join(w[i].thread, NULL);
}

static void close_workers(worker_t *w)
{
    for (unsigned i = 0; i < THREADS; i++)
        outbox_store_close(w[i].s);
}

/* ------------------------------------------------------ exclusive claims */

#define EXCL_ROWS 5000

static void *exclusive_worker(void *arg)
{
    worker_t *w = arg;
    atomic_uint *seen = w->shared;
    for (;;) {
        conf_claim_t c;
        int rc = conf_claim_quiet(w->s, ROUTE, BATCH, CONF_LONG_LEASE_US, 0, &c);
        if (rc != OUTBOX_OK) {
            if (transient_or_fail(w, "claim", rc) > 0)
                continue;
            break;
        }
        /* Every row is settled right after its claim, so an empty claim
         * means every row is taken. */
        if (c.n == 0)
            break;
        w->claimed += c.n;
        for (size_t i = 0; i < c.n; i++) {
            if (c.rows[i].n >= EXCL_ROWS)
                worker_fail(w, "claimed a row the battery never staged", OUTBOX_EPERMANENT);
            else
                atomic_fetch_add(&seen[c.rows[i].n], 1);
        }
        outbox_settle_item_t *items = calloc(c.n, sizeof *items);
        size_t applied = 0;
        rc = items ? OUTBOX_OK : OUTBOX_ENOMEM;
        for (size_t i = 0; items && i < c.n; i++)
            items[i] = (outbox_settle_item_t){.id = c.rows[i].id, .kind = OUTBOX_SETTLE_PUBLISHED};
        while (rc == OUTBOX_OK) {
            rc = outbox_store_settle(w->s, &c.fence, items, c.n, &applied);
            if (rc == OUTBOX_OK || transient_or_fail(w, "settle", rc) < 0)
                break;
            rc = OUTBOX_OK;
        }
        if (rc == OUTBOX_OK && applied != c.n)
            worker_fail(w, "settle applied fewer rows than claimed", OUTBOX_ECONFLICT);
        free(items);
        conf_claim_free(&c);
        if (w->error[0] != '\0')
            break;
    }
    return NULL;
}

START_TEST(concurrency_claim_exclusive)
{
    outbox_store_t *s = conf_open();
    for (unsigned long first = 0; first < EXCL_ROWS; first += 500)
        ck_assert_uint_eq(conf_stage(s, NULL, ROUTE, first, 500, NULL), 500);

    atomic_uint *seen = calloc(EXCL_ROWS, sizeof *seen);
    ck_assert_msg(seen != NULL, "out of memory");
    worker_t w[THREADS];
    start_workers(w, exclusive_worker, seen);
    join_workers(w);

    size_t twice = 0, never = 0, first_twice = 0, first_never = 0;
    for (size_t n = 0; n < EXCL_ROWS; n++) {
        unsigned k = atomic_load(&seen[n]);
        if (k > 1 && twice++ == 0)
            first_twice = n;
        if (k == 0 && never++ == 0)
            first_never = n;
    }
    ck_assert_msg(twice == 0,
                  "%zu rows were handed to more than one claimer (first: event %zu, %u times)",
                  twice, first_twice, atomic_load(&seen[first_twice]));
    for (unsigned i = 0; i < THREADS; i++)
        ck_assert_msg(w[i].error[0] == '\0', "%s", w[i].error);
    ck_assert_msg(never == 0, "%zu of %d rows were never claimed (first: event %zu)", never,
                  EXCL_ROWS, first_never);
    if (CONF_VT_HAS(conf_env.driver->store, stats)) {
        outbox_stats_t st = conf_stats(s, ROUTE);
        ck_assert_msg(st.published == EXCL_ROWS && st.processing == 0 && st.pending == 0,
                      "%llu published, %llu processing, %llu pending; expected all %d published",
                      (unsigned long long)st.published, (unsigned long long)st.processing,
                      (unsigned long long)st.pending, EXCL_ROWS);
    } else {
        /* Nothing pending, nothing processing: a 1 us lease would take it. */
        conf_claim_t left = conf_claim(s, ROUTE, EXCL_ROWS, 1, 0);
        ck_assert_msg(left.n == 0, "%zu rows were still pending or processing after every claimer "
                                   "published its rows",
                      left.n);
        conf_claim_free(&left);
    }
    free(seen);
    close_workers(w);
    outbox_store_close(s);
}
END_TEST

/* ---------------------------------------------------------- per-key FIFO */

#define KEYS 20
#define PER_KEY 200
#define FIFO_ROWS (KEYS * PER_KEY)

/* Event n is row n / KEYS of key n % KEYS: staging interleaves the keys. */
typedef struct fifo {
    pthread_mutex_t mu;
    unsigned next[KEYS];          /* the row of each key due to be published next */
    unsigned violations;
    char first_violation[256];
    atomic_uint published;        /* settled as published */
    int64_t deadline_us;
} fifo_t;

static uint32_t xorshift(uint32_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

/* A sink that the claimer is: it "publishes" each row in claim order,
 * records the successful ones, and fails about one in ten. */
static void publish(fifo_t *f, const conf_row_t *r)
{
    unsigned key = (unsigned)(r->n % KEYS), row = (unsigned)(r->n / KEYS);
    pthread_mutex_lock(&f->mu);
    if (row == f->next[key]) {
        f->next[key]++;
    } else if (f->violations++ == 0) {
        snprintf(f->first_violation, sizeof f->first_violation,
                 "key k%02u: row %u was published while row %u was due", key, row, f->next[key]);
    }
    pthread_mutex_unlock(&f->mu);
}

/* One relay step by hand: claim, publish in claim order, and settle the
 * batch in one call: published, rescheduled (due at once) after a failure,
 * and released for the later rows of a key that just failed. */
static int fifo_step(worker_t *w, fifo_t *f, uint32_t *rng)
{
    conf_claim_t c;
    int rc = conf_claim_quiet(w->s, ROUTE, BATCH, CONF_LONG_LEASE_US, 0, &c);
    if (rc != OUTBOX_OK)
        return transient_or_fail(w, "claim", rc);
    if (c.n == 0) {
        conf_sleep_ms(2);
        return 0;
    }
    w->claimed += c.n;
    outbox_settle_item_t *items = calloc(c.n, sizeof *items);
    if (items == NULL) {
        conf_claim_free(&c);
        worker_fail(w, "out of memory", OUTBOX_ENOMEM);
        return -1;
    }
    int failed[KEYS] = {0};
    unsigned ok = 0;
    int64_t now = conf_now_us();
    for (size_t i = 0; i < c.n; i++) {
        const conf_row_t *r = &c.rows[i];
        unsigned key = (unsigned)(r->n % KEYS);
        char want[8];
        snprintf(want, sizeof want, "k%02u", key);
        if (r->n >= FIFO_ROWS || !r->has_key || strcmp(r->key, want) != 0)
            worker_fail(w, "claimed a row with an unexpected event id or ordering key",
                        OUTBOX_EPERMANENT);
        items[i].id = r->id;
        if (failed[key]) {
            items[i].kind = OUTBOX_SETTLE_RELEASE;
        } else if (xorshift(rng) % 10 == 0) {
            items[i].kind = OUTBOX_SETTLE_RESCHEDULE;
            items[i].available_at = now;
            items[i].error = "conformance: scripted publish failure";
            failed[key] = 1;
        } else {
            publish(f, r);
            items[i].kind = OUTBOX_SETTLE_PUBLISHED;
            ok++;
        }
    }
    size_t applied = 0;
    for (;;) {
        rc = outbox_store_settle(w->s, &c.fence, items, c.n, &applied);
        if (rc == OUTBOX_OK || transient_or_fail(w, "settle", rc) < 0)
            break;
    }
    if (rc == OUTBOX_OK && applied != c.n)
        worker_fail(w, "settle applied fewer rows than claimed", OUTBOX_ECONFLICT);
    if (rc == OUTBOX_OK)
        atomic_fetch_add(&f->published, ok);
    free(items);
    conf_claim_free(&c);
    return w->error[0] ? -1 : 0;
}

static void *fifo_worker(void *arg)
{
    worker_t *w = arg;
    fifo_t *f = w->shared;
    uint32_t rng = 2654435761u * (w->index + 1);
    while (atomic_load(&f->published) < FIFO_ROWS) {
        if (conf_now_us() > f->deadline_us) {
            worker_fail(w, "gave up: the rows stopped flowing", OUTBOX_ETRANSIENT);
            break;
        }
        if (fifo_step(w, f, &rng) < 0)
            break;
    }
    return NULL;
}

static void stage_fifo(outbox_store_t *s)
{
    /* 400 events per call: 20 rows of every key, interleaved. */
    enum { CHUNK = 400 };
    outbox_event_t ev[CHUNK];
    char ids[CHUNK][OUTBOX_UUID_STRLEN + 1];
    char keys[KEYS][8];
    for (unsigned k = 0; k < KEYS; k++)
        snprintf(keys[k], sizeof keys[k], "k%02u", k);
    for (unsigned long first = 0; first < FIFO_ROWS; first += CHUNK) {
        for (unsigned i = 0; i < CHUNK; i++) {
            conf_event_id(ids[i], first + i);
            ev[i] = (outbox_event_t){
                .event_id = ids[i],
                .event_type = "conformance.fifo",
                .payload = "{}",
                .ordering_key = keys[(first + i) % KEYS],
            };
        }
        size_t staged = 0;
        conf_ok(s, outbox_store_stage(s, NULL, ROUTE, ev, CHUNK, &staged));
        ck_assert_uint_eq(staged, CHUNK);
    }
}

START_TEST(per_key_fifo)
{
    outbox_store_t *s = conf_open();
    stage_fifo(s);
    fifo_t f;
    memset(&f, 0, sizeof f);
    pthread_mutex_init(&f.mu, NULL);
    atomic_init(&f.published, 0);
    f.deadline_us = conf_now_us() + (int64_t)(45e6 * conf_timeout_multiplier());

    worker_t w[THREADS];
    start_workers(w, fifo_worker, &f);
    join_workers(w);

    ck_assert_msg(f.violations == 0, "%u publishes out of staging order; first: %s", f.violations,
                  f.first_violation);
    for (unsigned i = 0; i < THREADS; i++)
        ck_assert_msg(w[i].error[0] == '\0', "%s", w[i].error);
    for (unsigned k = 0; k < KEYS; k++)
        ck_assert_msg(f.next[k] == PER_KEY, "key k%02u: %u of %d rows published in order", k,
                      f.next[k], PER_KEY);
    pthread_mutex_destroy(&f.mu);
    close_workers(w);
    outbox_store_close(s);
}
END_TEST

void conf_cases_concurrency(conf_cases_t *c)
{
    conf_add(c, concurrency_claim_exclusive, CONF_NEED_CONCURRENT, 0, 60);
    conf_add(c, per_key_fifo, CONF_NEED_CONCURRENT, 0, 60);
}
