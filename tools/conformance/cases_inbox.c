/* Conformance cases: the inbox (ABI 1.7), a consumer's record of the
 * events it handled, unique on (consumer, event_id). Everything goes
 * through the application API (outbox_inbox_accept, _purge, _stats), as a
 * consumer would call it. Threads never fail the case themselves: each
 * writes down what it saw and the main thread asserts after joining. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "conf_int.h"

#define CONSUMER "conf-consumer"
/* A pair whose byte order ('B' 0x42 < 'a' 0x61) is not the order of a
 * case-insensitive or locale collation. */
#define CONSUMER_A "conf-a"
#define CONSUMER_B "conf-B"
/* A store may report a busy lock or a lost race as transient; callers
 * retry those, as a consumer would, but only so often. */
#define MAX_TRANSIENT 500

/* The verdict of one accept of event n (1: new, 0: recorded before);
 * fails the case unless the call succeeds. */
static int accepted(outbox_store_t *s, void *native, const char *consumer, unsigned long n)
{
    char id[OUTBOX_UUID_STRLEN + 1];
    conf_event_id(id, n);
    int is_new = -1;
    int rc = outbox_inbox_accept(s, native, consumer, id, &is_new);
    ck_assert_msg(rc == OUTBOX_OK, "accepting event %lu for %s%s: %s (%s)", n, consumer,
                  native ? " through the native handle" : "", outbox_strerror(rc),
                  outbox_store_message(s));
    return is_new;
}

#define ck_assert_accept(s, native, consumer, n, want, when)                                      \
    do {                                                                                          \
        int got_ = accepted(s, native, consumer, n);                                              \
        ck_assert_msg(got_ == (want), "%s: accepting event %lu for %s said %s, expected %s",      \
                      when, (unsigned long)(n), consumer, got_ ? "new" : "not new",               \
                      (want) ? "new" : "not new");                                                \
    } while (0)

static uint64_t purged(outbox_store_t *s, const char *consumer, int64_t before)
{
    uint64_t count = UINT64_MAX;
    int rc = outbox_inbox_purge(s, consumer, before, &count);
    ck_assert_msg(rc == OUTBOX_OK, "purging the inbox of %s: %s (%s)",
                  consumer ? consumer : "every consumer", outbox_strerror(rc),
                  outbox_store_message(s));
    return count;
}

/* An hour ahead: later than any record, whoever's clock stamped it. */
static int64_t an_hour_ahead(void)
{
    return conf_now_us() + INT64_C(3600) * 1000000;
}

/* ------------------------------------------------------------- the basics */

START_TEST(inbox_new_once)
{
    outbox_store_t *s = conf_open();
    ck_assert_accept(s, NULL, CONSUMER, 1, 1, "the first accept of an event");
    ck_assert_accept(s, NULL, CONSUMER, 1, 0, "the same event again");
    ck_assert_accept(s, NULL, CONSUMER, 2, 1, "another event");
    ck_assert_accept(s, NULL, CONSUMER, 1, 0, "the first event a third time");

    /* Event ids are text, not UUIDs, compared byte for byte: ids that
     * differ only in case, and the longest allowed (200 bytes of two-byte
     * characters). */
    static const char *const ids[] = {"order-42/Created", "order-42/created"};
    for (size_t i = 0; i < 2; i++) {
        int is_new = -1;
        conf_ok(s, outbox_inbox_accept(s, NULL, CONSUMER, ids[i], &is_new));
        ck_assert_msg(is_new == 1,
                      "event id \"%s\" said not new (\"%s\" and \"%s\" are two events)",
                      ids[i], ids[0], ids[1]);
    }
    char longest[201] = "";
    for (size_t i = 0; i < 100; i++)
        memcpy(longest + 2 * i, "\xc3\xa9", 2);
    for (int round = 0; round < 2; round++) {
        int is_new = -1;
        conf_ok(s, outbox_inbox_accept(s, NULL, longest, longest, &is_new));
        ck_assert_msg(is_new == !round, "a 200-byte consumer and event id, accepted %s, said %s",
                      round ? "again" : "first", is_new ? "new" : "not new");
    }

    /* Another handle sees what this one recorded. */
    outbox_store_t *other = conf_open();
    ck_assert_accept(other, NULL, CONSUMER, 2, 0, "from another handle");
    outbox_store_close(other);
    outbox_store_close(s);
}
END_TEST

/* ----------------------------------------------------------- transactions */

START_TEST(inbox_rollback_new_again)
{
    outbox_store_t *s = conf_open();
    conf_ok(s, outbox_store_begin(s));
    ck_assert_accept(s, NULL, CONSUMER, 1, 1, "in the handle's transaction");
    ck_assert_accept(s, NULL, CONSUMER, 1, 0, "again in the same transaction");
    conf_ok(s, outbox_store_rollback(s));
    ck_assert_accept(s, NULL, CONSUMER, 1, 1,
                     "after the transaction that recorded it rolled back (a rolled-back record "
                     "must be gone)");
    ck_assert_accept(s, NULL, CONSUMER, 1, 0, "once more after recording it again");

    conf_ok(s, outbox_store_begin(s));
    ck_assert_accept(s, NULL, CONSUMER, 2, 1, "in a transaction that then commits");
    conf_ok(s, outbox_store_commit(s));
    ck_assert_accept(s, NULL, CONSUMER, 2, 0, "after the transaction that recorded it committed");
    outbox_store_t *other = conf_open();
    ck_assert_accept(other, NULL, CONSUMER, 2, 0, "from another handle, after the commit");
    outbox_store_close(other);
    outbox_store_close(s);
}
END_TEST

/* Through the application's own transaction: the record rolls back and
 * commits with it. The rollback round records the event first, so the
 * commit round's first accept says whether the rollback removed it. */
START_TEST(inbox_native_rollback)
{
    void *h = NULL;
    outbox_store_t *s = conf_open_raw(&h);
    for (int commit = 0; commit <= 1; commit++) {
        void *native = conf_native_begin(h);
        ck_assert_accept(s, native, CONSUMER, 1, 1,
                         commit ? "through a native handle, after the native transaction that "
                                  "recorded it rolled back (a rolled-back record must be gone)"
                                : "through a native handle");
        ck_assert_accept(s, native, CONSUMER, 1, 0, "again in the same native transaction");
        conf_native_end(h, native, commit);
    }
    ck_assert_accept(s, NULL, CONSUMER, 1, 0, "after the native transaction committed");
    outbox_store_close(s);
}
END_TEST

/* ------------------------------------------------------------------ races */

typedef struct taker {
    outbox_store_t *s;
    char id[OUTBOX_UUID_STRLEN + 1];
    int rc;
    int is_new;
    unsigned transient;
    char message[OUTBOX_MESSAGE_MAX];
    atomic_int done;
} taker_t;

/* Handle B's accept: it may wait for A's transaction, or be told to retry. */
static void *taker_run(void *arg)
{
    taker_t *t = arg;
    do {
        t->is_new = -1;
        t->rc = outbox_inbox_accept(t->s, NULL, CONSUMER, t->id, &t->is_new);
        if (t->rc == OUTBOX_ETRANSIENT)
            conf_sleep_ms(10);
    } while (t->rc == OUTBOX_ETRANSIENT && ++t->transient < MAX_TRANSIENT);
    if (t->rc != OUTBOX_OK)
        snprintf(t->message, sizeof t->message, "%s", outbox_store_message(t->s));
    atomic_store(&t->done, 1);
    return NULL;
}

/* How long A holds its record. SQLite's default busy timeout (5 s) must
 * outlast it, or B gives up waiting for the write lock. */
#define HOLD_MS 200

/* Handle A records event n in an open transaction and holds it while
 * handle B, on another thread, accepts the same pair; then A commits or
 * rolls back. */
static void hold_and_race(outbox_store_t *a, outbox_store_t *b, unsigned long n, int commit)
{
    const char *end = commit ? "committed" : "rolled back";
    conf_ok(a, outbox_store_begin(a));
    ck_assert_accept(a, NULL, CONSUMER, n, 1, "A's accept in its open transaction");

    taker_t t = {.s = b};
    conf_event_id(t.id, n);
    atomic_init(&t.done, 0);
    pthread_t thread;
    ck_assert_msg(pthread_create(&thread, NULL, taker_run, &t) == 0, "cannot start a thread");
    conf_sleep_ms(HOLD_MS); /* long enough for B to be at the store, waiting */
    int early = atomic_load(&t.done);
    int early_new = early && t.rc == OUTBOX_OK && t.is_new == 1;
    int rc = commit ? outbox_store_commit(a) : outbox_store_rollback(a);
    pthread_join(thread, NULL);
    ck_assert_msg(rc == OUTBOX_OK, "A's %s: %s (%s)", commit ? "commit" : "rollback",
                  outbox_strerror(rc), outbox_store_message(a));
    ck_assert_msg(!early_new,
                  "event %lu: while A held its record of it in an open transaction, B's accept "
                  "said new: both consumers would handle the event",
                  n);
    ck_assert_msg(t.rc == OUTBOX_OK, "event %lu: B's accept after A %s: %s (%s; %u transient "
                  "errors retried)",
                  n, end, outbox_strerror(t.rc), t.message, t.transient);
    if (commit)
        ck_assert_msg(t.is_new == 0,
                      "event %lu: A recorded it and committed while B's accept of it waited, "
                      "and B's accept said new: both consumers would handle the event (a check "
                      "that did not see A's uncommitted record, then an insert that found it, is "
                      "not one atomic statement)",
                      n);
    else
        ck_assert_msg(t.is_new == 1,
                      "event %lu: A recorded it and rolled back while B's accept of it waited, "
                      "and B's accept said not new: no consumer would handle the event",
                      n);
    ck_assert_accept(a, NULL, CONSUMER, n, 0, "A, after the race");
}

START_TEST(inbox_race_held)
{
    outbox_store_t *a = conf_open();
    outbox_store_t *b = conf_open();
    hold_and_race(a, b, 1, 1);
    hold_and_race(a, b, 2, 0);
    outbox_store_close(b);
    outbox_store_close(a);
}
END_TEST

#define RACERS 4
#define RACE_EVENTS 50
#define RACE_FIRST 100

typedef struct racer {
    pthread_t thread;
    outbox_store_t *s;
    unsigned index;
    pthread_barrier_t *go;
    atomic_uint *wins; /* per event: how many racers were told new */
    unsigned transient;
    char error[OUTBOX_MESSAGE_MAX];
} racer_t;

static void *racer_run(void *arg)
{
    racer_t *r = arg;
    pthread_barrier_wait(r->go);
    for (unsigned i = 0; i < RACE_EVENTS; i++) {
        char id[OUTBOX_UUID_STRLEN + 1];
        conf_event_id(id, RACE_FIRST + i);
        int rc, is_new;
        do {
            is_new = -1;
            rc = outbox_inbox_accept(r->s, NULL, CONSUMER, id, &is_new);
            if (rc == OUTBOX_ETRANSIENT)
                conf_sleep_ms(1);
        } while (rc == OUTBOX_ETRANSIENT && ++r->transient <= MAX_TRANSIENT);
        if (rc != OUTBOX_OK) {
            snprintf(r->error, sizeof r->error, "racer %u, event %u: %s (%s)", r->index,
                     RACE_FIRST + i, outbox_strerror(rc), outbox_store_message(r->s));
            return NULL;
        }
        if (is_new == 1)
            atomic_fetch_add(&r->wins[i], 1);
    }
    return NULL;
}

/* No transaction to hold here, so this is the race a store without
 * transactions runs: handles accepting the same events at once. */
START_TEST(inbox_race_many)
{
    atomic_uint wins[RACE_EVENTS];
    for (unsigned i = 0; i < RACE_EVENTS; i++)
        atomic_init(&wins[i], 0);
    pthread_barrier_t go;
    ck_assert_msg(pthread_barrier_init(&go, NULL, RACERS) == 0, "cannot make a barrier");
    racer_t r[RACERS];
    for (unsigned i = 0; i < RACERS; i++) {
        outbox_diag_t d = {0};
        memset(&r[i], 0, sizeof r[i]);
        r[i].index = i;
        r[i].go = &go;
        r[i].wins = wins;
        r[i].s = conf_open_quiet(&d);
        ck_assert_msg(r[i].s != NULL, "opening handle %u: %s", i, d.message);
    }
    for (unsigned i = 0; i < RACERS; i++)
        ck_assert_msg(pthread_create(&r[i].thread, NULL, racer_run, &r[i]) == 0,
                      "cannot start a thread");
    for (unsigned i = 0; i < RACERS; i++)
        pthread_join(r[i].thread, NULL);
    pthread_barrier_destroy(&go);
    for (unsigned i = 0; i < RACERS; i++)
        ck_assert_msg(r[i].error[0] == '\0', "%s", r[i].error);
    for (unsigned i = 0; i < RACE_EVENTS; i++) {
        unsigned w = atomic_load(&wins[i]);
        ck_assert_msg(w == 1,
                      "event %u, accepted by %d handles at once, was new to %u of them, "
                      "expected exactly 1%s",
                      RACE_FIRST + i, RACERS, w,
                      w > 1 ? " (several consumers would handle it)" : " (none would handle it)");
    }
    for (unsigned i = 0; i < RACERS; i++)
        outbox_store_close(r[i].s);
}
END_TEST

/* ------------------------------------------------------------ purge, stats */

/* A record received before the cut goes, one received after it stays, and
 * a purge of one consumer leaves the others'. The cut is read from the
 * battery's clock between two records 50 ms apart. */
START_TEST(inbox_purge_old_only)
{
    outbox_store_t *s = conf_open();
    ck_assert_accept(s, NULL, CONSUMER, 1, 1, "the first event");
    ck_assert_accept(s, NULL, CONSUMER_A, 2, 1, "another consumer's event");
    conf_sleep_ms(50);
    int64_t cut = conf_now_us();
    conf_sleep_ms(50);
    ck_assert_accept(s, NULL, CONSUMER, 3, 1, "an event received after the cut");

    uint64_t count = purged(s, CONSUMER_A, cut);
    ck_assert_msg(count == 1,
                  "a purge of %s before the cut deleted %llu records, expected its 1 (not "
                  "another consumer's)",
                  CONSUMER_A, (unsigned long long)count);
    ck_assert_accept(s, NULL, CONSUMER, 1, 0,
                     "after a purge of another consumer (this consumer's record must stay)");

    count = purged(s, CONSUMER, cut);
    ck_assert_msg(count == 1,
                  "a purge before the cut deleted %llu records, expected 1: the one received "
                  "before it, not the one received 50 ms after it",
                  (unsigned long long)count);
    ck_assert_accept(s, NULL, CONSUMER, 3, 0, "the record received after the cut, after the purge");
    ck_assert_accept(s, NULL, CONSUMER, 1, 1, "the purged record, after the purge");

    /* Every consumer at once: this consumer's two records. */
    count = purged(s, NULL, an_hour_ahead());
    ck_assert_msg(count == 2, "a purge of every consumer deleted %llu records, expected 2",
                  (unsigned long long)count);
    ck_assert_accept(s, NULL, CONSUMER, 3, 1, "after purging every consumer");
    outbox_store_close(s);
}
END_TEST

typedef struct listed {
    char consumer[64];
    uint64_t records;
    int64_t oldest, newest;
} listed_t;

typedef struct listing {
    listed_t v[8];
    size_t n; /* every call, also those past v */
    int stop; /* what the callback returns */
} listing_t;

static int collect(void *ctx, const char *consumer, uint64_t records, int64_t oldest_us,
                   int64_t newest_us)
{
    listing_t *l = ctx;
    if (l->n < sizeof l->v / sizeof l->v[0]) {
        listed_t *e = &l->v[l->n];
        snprintf(e->consumer, sizeof e->consumer, "%s", consumer ? consumer : "(null)");
        e->records = records;
        e->oldest = oldest_us;
        e->newest = newest_us;
    }
    l->n++;
    return l->stop;
}

static listing_t list_inbox(outbox_store_t *s, const char *consumer)
{
    listing_t l;
    memset(&l, 0, sizeof l);
    int rc = outbox_inbox_stats(s, consumer, collect, &l);
    ck_assert_msg(rc == OUTBOX_OK, "inbox stats of %s: %s (%s)",
                  consumer ? consumer : "every consumer", outbox_strerror(rc),
                  outbox_store_message(s));
    return l;
}

/* Entry i of the listing is consumer with records records, received
 * between from and to (the battery's clock, give or take a minute for a
 * server's). */
static void ck_listed(const listing_t *l, size_t i, const char *consumer, uint64_t records,
                      int64_t from, int64_t to, const char *when)
{
    const int64_t slack = INT64_C(60) * 1000000;
    ck_assert_msg(l->n > i, "%s: inbox stats listed %zu consumers, expected %s at %zu", when,
                  l->n, consumer, i + 1);
    const listed_t *e = &l->v[i];
    ck_assert_msg(strcmp(e->consumer, consumer) == 0,
                  "%s: inbox stats listed %s in place %zu, expected %s (consumers in byte order)",
                  when, e->consumer, i + 1, consumer);
    ck_assert_msg(e->records == records, "%s: inbox stats gave %s %llu records, expected %llu",
                  when, consumer, (unsigned long long)e->records, (unsigned long long)records);
    ck_assert_msg(e->oldest <= e->newest,
                  "%s: inbox stats gave %s an oldest receipt %lld after its newest %lld", when,
                  consumer, (long long)e->oldest, (long long)e->newest);
    ck_assert_msg(e->oldest >= from - slack && e->newest <= to + slack,
                  "%s: inbox stats gave %s receipts from %lld to %lld, expected microseconds "
                  "since the epoch between %lld and %lld",
                  when, consumer, (long long)e->oldest, (long long)e->newest, (long long)from,
                  (long long)to);
}

START_TEST(inbox_consumers_independent)
{
    outbox_store_t *s = conf_open();
    int64_t start = conf_now_us();
    ck_assert_accept(s, NULL, CONSUMER_A, 1, 1, "the first consumer's event");
    ck_assert_accept(s, NULL, CONSUMER_B, 1, 1,
                     "the same event for another consumer (each consumer has its own record)");
    ck_assert_accept(s, NULL, CONSUMER_A, 2, 1, "the first consumer's second event");
    ck_assert_accept(s, NULL, CONSUMER_A, 1, 0, "the first consumer's event again");
    ck_assert_accept(s, NULL, CONSUMER_B, 1, 0, "the other consumer's event again");
    int64_t end = conf_now_us();

    listing_t l = list_inbox(s, NULL);
    ck_assert_msg(l.n == 2, "inbox stats of every consumer listed %zu consumers, expected 2", l.n);
    ck_listed(&l, 0, CONSUMER_B, 1, start, end, "every consumer");
    ck_listed(&l, 1, CONSUMER_A, 2, start, end, "every consumer");
    ck_assert_msg(l.v[0].oldest == l.v[0].newest,
                  "inbox stats gave %s, with one record, an oldest receipt %lld and a newest %lld",
                  CONSUMER_B, (long long)l.v[0].oldest, (long long)l.v[0].newest);
    l = list_inbox(s, CONSUMER_A);
    ck_assert_msg(l.n == 1, "inbox stats of %s listed %zu consumers, expected 1", CONSUMER_A, l.n);
    ck_listed(&l, 0, CONSUMER_A, 2, start, end, "one consumer");

    /* The callback's non-zero return stops the listing and comes back. */
    memset(&l, 0, sizeof l);
    l.stop = 7;
    int rc = outbox_inbox_stats(s, NULL, collect, &l);
    ck_assert_msg(rc == 7 && l.n == 1,
                  "inbox stats whose callback returned 7 returned %d after %zu calls, expected 7 "
                  "after 1",
                  rc, l.n);

    uint64_t count = purged(s, CONSUMER_B, an_hour_ahead());
    ck_assert_msg(count == 1, "a purge of %s deleted %llu records, expected its 1", CONSUMER_B,
                  (unsigned long long)count);
    l = list_inbox(s, NULL);
    ck_assert_msg(l.n == 1, "after a purge of %s, inbox stats listed %zu consumers, expected 1",
                  CONSUMER_B, l.n);
    ck_listed(&l, 0, CONSUMER_A, 2, start, end, "after the other consumer's purge");
    ck_assert_accept(s, NULL, CONSUMER_A, 1, 0, "after a purge of the other consumer");
    ck_assert_accept(s, NULL, CONSUMER_B, 1, 1, "after a purge of its consumer");
    outbox_store_close(s);
}
END_TEST

void conf_cases_inbox(conf_cases_t *c)
{
    const uint32_t ib = OUTBOX_SCHEMA_INBOX;
    conf_add(c, inbox_new_once, CONF_NEED_INBOX, ib, 20);
    conf_add(c, inbox_rollback_new_again, CONF_NEED_INBOX | CONF_NEED_TX, ib, 20);
    conf_add(c, inbox_native_rollback, CONF_NEED_INBOX | CONF_NEED_NATIVE, ib, 20);
    conf_add(c, inbox_race_held, CONF_NEED_INBOX | CONF_NEED_TX, ib, 30);
    conf_add(c, inbox_race_many, CONF_NEED_INBOX, ib, 60);
    conf_add(c, inbox_purge_old_only, CONF_NEED_INBOX, ib, 20);
    conf_add(c, inbox_consumers_independent, CONF_NEED_INBOX, ib, 20);
}
