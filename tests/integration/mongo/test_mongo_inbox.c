/* The MongoDB store's inbox against a real server (OUTBOX_MONGO_URI),
 * through the public API and the real loader (OUTBOX_DRIVER_PATH points
 * at the build tree), with libmongoc on the side to look at and shape the
 * documents as an operator could.
 *
 * Every case works in a database of its own (it_inbox_<pid>, Check forks
 * each case) and drops it afterwards. On a server with transactions (a
 * replica set) the transaction cases run too; on FerretDB they check the
 * refusal instead. */
#include <check.h>
#include <mongoc/mongoc.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "mongot.h"
#include "th_inbox.h"
#include "outbox/outbox.h"

static void setup(void)
{
    mt_setup("it_inbox");
}

static mongoc_collection_t *coll(const char *name)
{
    return mongoc_client_get_collection(client, dbname, name);
}

static outbox_store_t *open_store(uint32_t flags, const char *inbox)
{
    outbox_store_options_t o = {.struct_size = sizeof o, .relation = "outbox", .flags = flags,
                                .inbox_relation = inbox};
    outbox_store_t *s = NULL;
    outbox_diag_t d = {0};
    int rc = outbox_store_open(uri, &o, &s, &d);
    ck_assert_msg(rc == OUTBOX_OK, "open %s: %s", uri, d.message);
    return s;
}

static void apply(outbox_store_t *s, uint32_t flags, const char *inbox)
{
    outbox_schema_opts_t so = {.struct_size = sizeof so, .relation = "outbox", .flags = flags,
                               .inbox_relation = inbox};
    ck_assert_msg(outbox_store_schema_apply(s, &so) == OUTBOX_OK, "schema apply: %s",
                  outbox_store_message(s));
}

/* A store whose outbox and inbox (the default outbox_inbox) exist. */
static outbox_store_t *fresh(void)
{
    outbox_store_t *s = open_store(OUTBOX_OPEN_SCHEMA_ONLY, NULL);
    apply(s, OUTBOX_SCHEMA_INBOX, NULL);
    outbox_store_close(s);
    s = open_store(0, NULL);
    ck_assert(outbox_store_capabilities(s) & OUTBOX_STORE_CAP_INBOX);
    return s;
}

/* is_new (0 or 1), or the error. */
static int accept1(outbox_store_t *s, void *native, const char *consumer, const char *event_id)
{
    int is_new = -1;
    int rc = outbox_inbox_accept(s, native, consumer, event_id, &is_new);
    if (rc != OUTBOX_OK) {
        ck_assert_int_eq(is_new, 0);
        return rc;
    }
    return is_new;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A record as the driver writes it, received at ms. */
static void put_record(const char *consumer, const char *event_id, int64_t ms)
{
    bson_t *doc = BCON_NEW("_id", "{", "c", BCON_UTF8(consumer), "e", BCON_UTF8(event_id), "}",
                           "consumer", BCON_UTF8(consumer), "event_id", BCON_UTF8(event_id),
                           "received_at", BCON_DATE_TIME(ms));
    mongoc_collection_t *c = coll("outbox_inbox");
    bson_error_t e;
    ck_assert_msg(mongoc_collection_insert_one(c, doc, NULL, NULL, &e), "insert: %s", e.message);
    mongoc_collection_destroy(c);
    bson_destroy(doc);
}

static int64_t count_docs(const char *name, const bson_t *filter)
{
    mongoc_collection_t *c = coll(name);
    bson_t empty = BSON_INITIALIZER;
    bson_error_t e;
    int64_t n = mongoc_collection_count_documents(c, filter ? filter : &empty, NULL, NULL, NULL, &e);
    ck_assert_msg(n >= 0, "count: %s", e.message);
    bson_destroy(&empty);
    mongoc_collection_destroy(c);
    return n;
}

/* ------------------------------------------------------------- accept */

START_TEST(test_accept_new_dup)
{
    /* Without the inbox collection the handle has no inbox. */
    outbox_store_t *s = open_store(OUTBOX_OPEN_SCHEMA_ONLY, NULL);
    apply(s, 0, NULL);
    outbox_store_close(s);
    s = open_store(0, NULL);
    ck_assert(!(outbox_store_capabilities(s) & OUTBOX_STORE_CAP_INBOX));
    ck_assert_int_eq(accept1(s, NULL, "billing", "e1"), OUTBOX_EMISSING);
    ck_assert_ptr_nonnull(strstr(outbox_store_message(s), "outbox_inbox"));
    /* The host reads the capabilities at open: open again after apply. */
    apply(s, OUTBOX_SCHEMA_INBOX, NULL);
    outbox_store_close(s);
    s = open_store(0, NULL);
    ck_assert(outbox_store_capabilities(s) & OUTBOX_STORE_CAP_INBOX);

    int64_t before = now_ms();
    ck_assert_int_eq(accept1(s, NULL, "billing", "e1"), 1);
    int64_t after = now_ms();
    ck_assert_int_eq(accept1(s, NULL, "billing", "e1"), 0);
    ck_assert_int_eq(accept1(s, NULL, "billing", "e1"), 0);
    ck_assert_int_eq(accept1(s, NULL, "shipping", "e1"), 1);
    ck_assert_int_eq(accept1(s, NULL, "billing", "e2"), 1);
    ck_assert_int_eq(accept1(s, NULL, "shipping", "e1"), 0);
    ck_assert_int_eq(count_docs("outbox_inbox", NULL), 3);

    /* The document: the pair is the _id, received_at a date of now. */
    bson_t *f = BCON_NEW("_id", "{", "c", BCON_UTF8("billing"), "e", BCON_UTF8("e1"), "}");
    mongoc_collection_t *c = coll("outbox_inbox");
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(c, f, NULL, NULL);
    const bson_t *doc;
    ck_assert(mongoc_cursor_next(cur, &doc));
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, doc, "consumer") && BSON_ITER_HOLDS_UTF8(&it));
    ck_assert_str_eq(bson_iter_utf8(&it, NULL), "billing");
    ck_assert(bson_iter_init_find(&it, doc, "event_id") && BSON_ITER_HOLDS_UTF8(&it));
    ck_assert_str_eq(bson_iter_utf8(&it, NULL), "e1");
    ck_assert(bson_iter_init_find(&it, doc, "received_at") && BSON_ITER_HOLDS_DATE_TIME(&it));
    ck_assert_int_ge(bson_iter_date_time(&it), before - 2000);
    ck_assert_int_le(bson_iter_date_time(&it), after + 2000);
    mongoc_cursor_destroy(cur);
    bson_destroy(f);

    /* A record made by hand with an _id of its own: the unique index on
     * (consumer, event_id) still says it is there. */
    bson_t *doc2 = BCON_NEW("consumer", BCON_UTF8("audit"), "event_id", BCON_UTF8("e9"),
                            "received_at", BCON_DATE_TIME(now_ms()));
    bson_error_t e;
    ck_assert_msg(mongoc_collection_insert_one(c, doc2, NULL, NULL, &e), "%s", e.message);
    bson_destroy(doc2);
    mongoc_collection_destroy(c);
    ck_assert_int_eq(accept1(s, NULL, "audit", "e9"), 0);

    /* Text the host refuses never reaches the driver. */
    ck_assert_int_eq(accept1(s, NULL, "", "e1"), OUTBOX_EINVAL);
    ck_assert_int_eq(accept1(s, NULL, "billing", "a\nb"), OUTBOX_EINVAL);
    outbox_store_close(s);
}
END_TEST

START_TEST(test_accept_transactions)
{
    outbox_store_t *s = fresh();
    uint32_t caps = outbox_store_capabilities(s);
    if (!(caps & OUTBOX_STORE_CAP_TRANSACTIONS)) {
        /* FerretDB, a standalone mongod: no transaction to be part of. */
        ck_assert_int_eq(outbox_store_begin(s), OUTBOX_ENOTSUP);
        int dummy;
        ck_assert_int_eq(accept1(s, &dummy, "billing", "e1"), OUTBOX_ENOTSUP);
        ck_assert_int_eq(accept1(s, NULL, "billing", "e1"), 1);
        outbox_store_close(s);
        return;
    }
    /* The handle's own transaction: gone with a rollback, kept by a commit. */
    ck_assert_int_eq(outbox_store_begin(s), OUTBOX_OK);
    ck_assert_int_eq(accept1(s, NULL, "billing", "t1"), 1);
    ck_assert_int_eq(accept1(s, NULL, "billing", "t1"), 0);
    ck_assert_int_eq(outbox_store_rollback(s), OUTBOX_OK);
    ck_assert_int_eq(count_docs("outbox_inbox", NULL), 0);
    ck_assert_int_eq(outbox_store_begin(s), OUTBOX_OK);
    ck_assert_int_eq(accept1(s, NULL, "billing", "t1"), 1);
    ck_assert_int_eq(outbox_store_commit(s), OUTBOX_OK);
    ck_assert_int_eq(accept1(s, NULL, "billing", "t1"), 0);
    /* A pair recorded before, inside a transaction: 0, and the
     * transaction still commits. */
    ck_assert_int_eq(outbox_store_begin(s), OUTBOX_OK);
    ck_assert_int_eq(accept1(s, NULL, "billing", "t1"), 0);
    ck_assert_int_eq(accept1(s, NULL, "billing", "t2"), 1);
    ck_assert_int_eq(outbox_store_commit(s), OUTBOX_OK);
    ck_assert_int_eq(count_docs("outbox_inbox", NULL), 2);

    /* The application's session. */
    bson_error_t e;
    mongoc_client_session_t *cs = mongoc_client_start_session(client, NULL, &e);
    ck_assert_msg(cs != NULL, "%s", e.message);
    ck_assert(mongoc_client_session_start_transaction(cs, NULL, &e));
    ck_assert_int_eq(accept1(s, cs, "billing", "n1"), 1);
    ck_assert_int_eq(accept1(s, cs, "billing", "t1"), 0);
    mongoc_client_session_abort_transaction(cs, NULL);
    ck_assert_int_eq(count_docs("outbox_inbox", NULL), 2);
    ck_assert(mongoc_client_session_start_transaction(cs, NULL, &e));
    ck_assert_int_eq(accept1(s, cs, "billing", "n1"), 1);
    ck_assert(mongoc_client_session_commit_transaction(cs, NULL, &e));
    ck_assert_int_eq(accept1(s, NULL, "billing", "n1"), 0);
    /* A session outside a transaction is refused. */
    ck_assert_int_eq(accept1(s, cs, "billing", "n2"), OUTBOX_EINVAL);
    mongoc_client_session_destroy(cs);
    outbox_store_close(s);
}
END_TEST

/* Two handles, each on a thread of its own, accept the same pair at the
 * same moment, many times over: exactly one of them gets 1 each time. */
#define RACE_ROUNDS 200

typedef struct racer {
    outbox_store_t *s;
    pthread_barrier_t *go;
    int fresh[RACE_ROUNDS];
    int failed;
    char why[256];
} racer_t;

static void *race(void *arg)
{
    racer_t *r = arg;
    for (int i = 0; i < RACE_ROUNDS; i++) {
        char id[32];
        snprintf(id, sizeof id, "race-%d", i);
        pthread_barrier_wait(r->go);
        int is_new = -1;
        int rc = outbox_inbox_accept(r->s, NULL, "racer", id, &is_new);
        if (rc != OUTBOX_OK && !r->failed) {
            r->failed = 1;
            snprintf(r->why, sizeof r->why, "round %d: %s", i, outbox_store_message(r->s));
        }
        r->fresh[i] = rc == OUTBOX_OK ? is_new : -1;
    }
    return NULL;
}

START_TEST(test_accept_race)
{
    outbox_store_t *s0 = fresh();
    outbox_store_t *s1 = open_store(0, NULL);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 2);
    racer_t r[2] = {{.s = s0, .go = &go}, {.s = s1, .go = &go}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, race, &r[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&go);
    ck_assert_msg(!r[0].failed, "%s", r[0].why);
    ck_assert_msg(!r[1].failed, "%s", r[1].why);
    int wins[2] = {0, 0};
    for (int i = 0; i < RACE_ROUNDS; i++) {
        ck_assert_msg(r[0].fresh[i] + r[1].fresh[i] == 1, "round %d: is_new %d and %d", i,
                      r[0].fresh[i], r[1].fresh[i]);
        wins[r[1].fresh[i]]++;
    }
    ck_assert_int_eq(count_docs("outbox_inbox", NULL), RACE_ROUNDS);
    fprintf(stderr, "accept race: %d rounds, handle 0 won %d, handle 1 won %d\n", RACE_ROUNDS,
            wins[0], wins[1]);
    outbox_store_close(s0);
    outbox_store_close(s1);
}
END_TEST

/* -------------------------------------------------------------- purge */

START_TEST(test_purge)
{
    outbox_store_t *s = fresh();
    int64_t now = now_ms();
    int64_t day = 86400 * INT64_C(1000);
    for (int i = 0; i < 10; i++) {
        char id[16];
        snprintf(id, sizeof id, "e%d", i);
        /* e0..e5 two days old, e6..e9 just now. */
        put_record("a", id, i < 6 ? now - 2 * day : now);
        put_record("b", id, i < 6 ? now - 2 * day : now);
    }
    int64_t day_ago_us = (now - day) * 1000;
    uint64_t count = 99;
    ck_assert_int_eq(outbox_inbox_purge(s, "a", day_ago_us, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 6);
    ck_assert_int_eq(outbox_inbox_purge(s, "a", day_ago_us, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 0);
    ck_assert_int_eq(outbox_inbox_purge(s, NULL, day_ago_us, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 6);
    ck_assert_int_eq(count_docs("outbox_inbox", NULL), 8);
    /* A purged pair is new again; one still kept is not. */
    ck_assert_int_eq(accept1(s, NULL, "a", "e0"), 1);
    ck_assert_int_eq(accept1(s, NULL, "a", "e7"), 0);
    /* The bound is exclusive, at millisecond precision. */
    put_record("c", "edge", now - day);
    ck_assert_int_eq(outbox_inbox_purge(s, "c", day_ago_us, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 0);
    ck_assert_int_eq(outbox_inbox_purge(s, "c", day_ago_us + 1000, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 1);
    /* The ends of the clock. */
    ck_assert_int_eq(outbox_inbox_purge(s, NULL, INT64_MIN, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 0);
    ck_assert_int_eq(outbox_inbox_purge(s, "nobody", INT64_MAX, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 0);
    ck_assert_int_eq(outbox_inbox_purge(s, NULL, INT64_MAX, NULL), OUTBOX_OK);
    ck_assert_int_eq(count_docs("outbox_inbox", NULL), 0);
    outbox_store_close(s);
}
END_TEST

/* -------------------------------------------------------------- stats */

START_TEST(test_stats)
{
    outbox_store_t *s = fresh();
    th_inbox_seen_t seen = {0};
    ck_assert_int_eq(outbox_inbox_stats(s, NULL, th_inbox_collect, &seen), OUTBOX_OK);
    ck_assert_int_eq(seen.n, 0);

    /* Byte order of the UTF-8 names: "B" < "a" < "b" < "\xc3\xa9". */
    int64_t base = INT64_C(1700000000000);
    put_record("b", "1", base + 5);
    put_record("a", "1", base + 30);
    put_record("b", "2", base + 1);
    put_record("\xc3\xa9t\xc3\xa9", "1", base + 7);
    put_record("a", "2", base + 10);
    put_record("B", "1", base + 3);
    put_record("a", "3", base + 20);
    ck_assert_int_eq(accept1(s, NULL, "b", "3"), 1);
    int64_t later = now_ms();

    ck_assert_int_eq(outbox_inbox_stats(s, NULL, th_inbox_collect, &seen), OUTBOX_OK);
    ck_assert_int_eq(seen.n, 4);
    ck_assert_str_eq(seen.consumer[0], "B");
    ck_assert_str_eq(seen.consumer[1], "a");
    ck_assert_str_eq(seen.consumer[2], "b");
    ck_assert_str_eq(seen.consumer[3], "\xc3\xa9t\xc3\xa9");
    ck_assert_uint_eq(seen.records[0], 1);
    ck_assert_uint_eq(seen.records[1], 3);
    ck_assert_uint_eq(seen.records[2], 3);
    ck_assert_uint_eq(seen.records[3], 1);
    ck_assert_int_eq(seen.oldest[0], (base + 3) * 1000);
    ck_assert_int_eq(seen.newest[0], (base + 3) * 1000);
    ck_assert_int_eq(seen.oldest[1], (base + 10) * 1000);
    ck_assert_int_eq(seen.newest[1], (base + 30) * 1000);
    ck_assert_int_eq(seen.oldest[2], (base + 1) * 1000);
    ck_assert_int_ge(seen.newest[2], (later - 5000) * 1000);
    ck_assert_int_le(seen.newest[2], (later + 5000) * 1000);

    /* One consumer. */
    memset(&seen, 0, sizeof seen);
    ck_assert_int_eq(outbox_inbox_stats(s, "a", th_inbox_collect, &seen), OUTBOX_OK);
    ck_assert_int_eq(seen.n, 1);
    ck_assert_str_eq(seen.consumer[0], "a");
    ck_assert_uint_eq(seen.records[0], 3);
    memset(&seen, 0, sizeof seen);
    ck_assert_int_eq(outbox_inbox_stats(s, "nobody", th_inbox_collect, &seen), OUTBOX_OK);
    ck_assert_int_eq(seen.n, 0);

    /* The callback's non-zero return stops the listing and comes back. */
    memset(&seen, 0, sizeof seen);
    seen.stop_at = 2;
    ck_assert_int_eq(outbox_inbox_stats(s, NULL, th_inbox_collect, &seen), TH_INBOX_STOP);
    ck_assert_int_eq(seen.n, 2);
    /* And again on the same handle (it may have learnt how to count). */
    memset(&seen, 0, sizeof seen);
    ck_assert_int_eq(outbox_inbox_stats(s, NULL, th_inbox_collect, &seen), OUTBOX_OK);
    ck_assert_int_eq(seen.n, 4);
    outbox_store_close(s);
}
END_TEST

/* ------------------------------------------------------------- schema */

typedef struct problems {
    char text[2048];
} problems_t;

static void note(void *ctx, const char *problem)
{
    problems_t *p = ctx;
    size_t len = strlen(p->text);
    snprintf(p->text + len, sizeof p->text - len, "%s\n", problem);
}

static size_t check(outbox_store_t *s, uint32_t flags, const char *inbox, problems_t *p)
{
    memset(p, 0, sizeof *p);
    outbox_schema_opts_t so = {.struct_size = sizeof so, .relation = "outbox", .flags = flags,
                               .inbox_relation = inbox};
    size_t n = 99;
    ck_assert_msg(outbox_store_schema_check(s, &so, note, p, &n) == OUTBOX_OK, "schema check: %s",
                  outbox_store_message(s));
    return n;
}

static int has_index(const char *collection, const char *name)
{
    mongoc_collection_t *c = coll(collection);
    mongoc_cursor_t *cur = mongoc_collection_find_indexes_with_opts(c, NULL);
    const bson_t *doc;
    int found = 0;
    while (mongoc_cursor_next(cur, &doc)) {
        bson_iter_t it;
        if (bson_iter_init_find(&it, doc, "name") && BSON_ITER_HOLDS_UTF8(&it) &&
            strcmp(bson_iter_utf8(&it, NULL), name) == 0)
            found = 1;
    }
    mongoc_cursor_destroy(cur);
    mongoc_collection_destroy(c);
    return found;
}

START_TEST(test_schema)
{
    outbox_store_t *s = open_store(OUTBOX_OPEN_SCHEMA_ONLY, NULL);
    problems_t p;
    /* Applied twice and more: it adds only what is missing (FerretDB 1.24
     * drops the connection on a createIndexes of indexes that all exist). */
    apply(s, OUTBOX_SCHEMA_INBOX | OUTBOX_SCHEMA_CHECKPOINT | OUTBOX_SCHEMA_HLC, NULL);
    apply(s, OUTBOX_SCHEMA_INBOX | OUTBOX_SCHEMA_CHECKPOINT | OUTBOX_SCHEMA_HLC, NULL);
    apply(s, OUTBOX_SCHEMA_INBOX, NULL);
    ck_assert(has_index("outbox_inbox", "inbox_event_uq"));
    ck_assert(has_index("outbox_inbox", "inbox_received_idx"));
    ck_assert_uint_eq(check(s, OUTBOX_SCHEMA_INBOX | OUTBOX_SCHEMA_CHECKPOINT | OUTBOX_SCHEMA_HLC,
                            NULL, &p),
                      0);

    /* A dropped unique index is named, and apply puts it back. */
    mongoc_collection_t *c = coll("outbox_inbox");
    bson_error_t e;
    ck_assert_msg(mongoc_collection_drop_index(c, "inbox_event_uq", &e), "%s", e.message);
    mongoc_collection_destroy(c);
    ck_assert_uint_eq(check(s, OUTBOX_SCHEMA_INBOX, NULL, &p), 1);
    ck_assert_msg(strstr(p.text, "inbox_event_uq") && strstr(p.text, "consumer,event_id") &&
                      strstr(p.text, "unique") && strstr(p.text, "outbox_inbox"),
                  "%s", p.text);
    /* Without --inbox the inbox is not looked at. */
    ck_assert_uint_eq(check(s, 0, NULL, &p), 0);
    apply(s, OUTBOX_SCHEMA_INBOX, NULL);
    ck_assert_uint_eq(check(s, OUTBOX_SCHEMA_INBOX, NULL, &p), 0);

    /* A missing collection is named. */
    c = coll("outbox_inbox");
    ck_assert_msg(mongoc_collection_drop(c, &e), "%s", e.message);
    mongoc_collection_destroy(c);
    ck_assert_uint_eq(check(s, OUTBOX_SCHEMA_INBOX, NULL, &p), 1);
    ck_assert_msg(strstr(p.text, "missing inbox collection \"outbox_inbox\""), "%s", p.text);
    outbox_store_close(s);

    /* The script shows the inbox. */
    outbox_schema_opts_t so = {.struct_size = sizeof so, .flags = OUTBOX_SCHEMA_INBOX};
    char *ddl = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_schema_ddl("mongo", &so, &ddl, &d), OUTBOX_OK);
    ck_assert_msg(strstr(ddl, "createCollection(\"outbox_inbox\")") &&
                      strstr(ddl, "{consumer: 1, event_id: 1}, {name: \"inbox_event_uq\", unique: true}") &&
                      strstr(ddl, "{received_at: 1}, {name: \"inbox_received_idx\"}"),
                  "%s", ddl);
    free(ddl);
}
END_TEST

START_TEST(test_named_inbox)
{
    /* An inbox of another name, in another database. */
    char other[96];
    snprintf(other, sizeof other, "%s_x.seen_events", dbname);
    outbox_store_t *s = open_store(OUTBOX_OPEN_SCHEMA_ONLY, other);
    apply(s, OUTBOX_SCHEMA_INBOX, other);
    problems_t p;
    ck_assert_uint_eq(check(s, OUTBOX_SCHEMA_INBOX, other, &p), 0);
    /* The default inbox was not made. */
    ck_assert_uint_eq(check(s, OUTBOX_SCHEMA_INBOX, NULL, &p), 1);
    outbox_store_close(s);
    s = open_store(0, NULL);
    ck_assert(!(outbox_store_capabilities(s) & OUTBOX_STORE_CAP_INBOX));
    outbox_store_close(s);
    s = open_store(0, other);
    ck_assert(outbox_store_capabilities(s) & OUTBOX_STORE_CAP_INBOX);
    ck_assert_int_eq(accept1(s, NULL, "billing", "e1"), 1);
    ck_assert_int_eq(accept1(s, NULL, "billing", "e1"), 0);
    uint64_t count = 0;
    ck_assert_int_eq(outbox_inbox_purge(s, NULL, INT64_MAX, &count), OUTBOX_OK);
    ck_assert_uint_eq(count, 1);
    outbox_store_close(s);
    char xdb[80];
    snprintf(xdb, sizeof xdb, "%s_x", dbname);
    mongoc_database_t *db = mongoc_client_get_database(client, xdb);
    mongoc_database_drop(db, NULL);
    mongoc_database_destroy(db);
}
END_TEST

static Suite *suite(void)
{
    Suite *su = suite_create("mongo_inbox");
    TCase *tc = tcase_create("inbox");
    tcase_add_checked_fixture(tc, setup, mt_teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_accept_new_dup);
    tcase_add_test(tc, test_accept_transactions);
    tcase_add_test(tc, test_accept_race);
    tcase_add_test(tc, test_purge);
    tcase_add_test(tc, test_stats);
    tcase_add_test(tc, test_schema);
    tcase_add_test(tc, test_named_inbox);
    suite_add_tcase(su, tc);
    return su;
}

int main(void)
{
    mt_server_uri(); /* skip or fail here, before Check forks */
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    mt_thread_done();
    return failed ? 1 : 0;
}
