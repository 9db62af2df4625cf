/* MongoDB store driver, second floor: a lock made of unique inserts, for
 * servers whose updates are not atomic.
 *
 * FerretDB runs an update as a query, then writes each matching document
 * back whole by its _id: two claimers whose guarded updates overlap both
 * "win" the same row, and two $max upserts can lose the larger mark. What it
 * does make atomic is an insert on a unique _id. So the lock is a sequence
 * of turns, one document per turn, {_id: "<name>/<turn>", name, turn, at,
 * done}: a handle takes turn n + 1 by inserting it, after it saw turn n done
 * (or older than the ttl: its holder died). Two handles racing for the same
 * turn cannot both insert it. A handle whose view of the latest turn was
 * stale may insert a turn number that cleanup removed long ago; it then
 * finds a later turn and lets go again, so only the handle holding the
 * newest turn proceeds.
 *
 * Turns live in the collection <relation>_locks beside the outbox. Every
 * 32nd turn deletes the turns before the previous one.
 */
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "mongo_conn.h"

typedef struct latest {
    int found;
    int64_t turn;
    int done;
    int64_t at_ms;
} latest_t;

static int take_latest(const bson_t *doc, void *ctx, outbox_diag_t *d)
{
    (void)d;
    latest_t *l = ctx;
    bson_iter_t it;
    l->found = 1;
    if (bson_iter_init_find(&it, doc, "turn") && BSON_ITER_HOLDS_NUMBER(&it))
        l->turn = bson_iter_as_int64(&it);
    l->done = bson_iter_init_find(&it, doc, "done") && bson_iter_as_bool(&it);
    if (bson_iter_init_find(&it, doc, "at") && BSON_ITER_HOLDS_DATE_TIME(&it))
        l->at_ms = bson_iter_date_time(&it);
    return OUTBOX_OK;
}

/* The newest turn of name (after > 0: the first turn above it). */
static int find_turn(mongo_handle_t *h, const char *name, int64_t above, latest_t *out,
                     outbox_diag_t *d)
{
    memset(out, 0, sizeof *out);
    bson_t f = BSON_INITIALIZER, opts = BSON_INITIALIZER, s, gt;
    BSON_APPEND_UTF8(&f, "name", name);
    if (above > 0) {
        BSON_APPEND_DOCUMENT_BEGIN(&f, "turn", &gt);
        BSON_APPEND_INT64(&gt, "$gt", above);
        bson_append_document_end(&f, &gt);
    }
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &s);
    BSON_APPEND_INT32(&s, "turn", -1);
    bson_append_document_end(&opts, &s);
    BSON_APPEND_INT64(&opts, "limit", 1);
    int rc = outbox_mongo_find(h->lock_coll, &f, &opts, take_latest, out, d, "taking the lock");
    bson_destroy(&f);
    bson_destroy(&opts);
    return rc;
}

/* 1: inserted; 0: the turn was taken; negative: an error. */
static int insert_turn(mongo_handle_t *h, const char *id, const char *name, int64_t turn,
                       int64_t now_ms, outbox_diag_t *d)
{
    bson_t doc = BSON_INITIALIZER, reply;
    BSON_APPEND_UTF8(&doc, "_id", id);
    BSON_APPEND_UTF8(&doc, "name", name);
    BSON_APPEND_INT64(&doc, "turn", turn);
    BSON_APPEND_DATE_TIME(&doc, "at", now_ms);
    BSON_APPEND_BOOL(&doc, "done", false);
    bson_error_t e;
    int rc = 1;
    if (!mongoc_collection_insert_one(h->lock_coll, &doc, NULL, &reply, &e))
        rc = e.domain == MONGOC_ERROR_SERVER && e.code == 11000
                 ? 0
                 : outbox_mongo_error(d, &e, &reply, "taking the lock");
    bson_destroy(&reply);
    bson_destroy(&doc);
    return rc;
}

static void mark_done(mongo_handle_t *h, const char *id)
{
    bson_t f = BSON_INITIALIZER, u = BSON_INITIALIZER, set;
    BSON_APPEND_UTF8(&f, "_id", id);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
    BSON_APPEND_BOOL(&set, "done", true);
    bson_append_document_end(&u, &set);
    mongoc_collection_update_one(h->lock_coll, &f, &u, NULL, NULL, NULL);
    bson_destroy(&f);
    bson_destroy(&u);
}

static void cleanup(mongo_handle_t *h, const char *name, int64_t turn)
{
    bson_t f = BSON_INITIALIZER, lt;
    BSON_APPEND_UTF8(&f, "name", name);
    BSON_APPEND_DOCUMENT_BEGIN(&f, "turn", &lt);
    BSON_APPEND_INT64(&lt, "$lt", turn - 1);
    bson_append_document_end(&f, &lt);
    mongoc_collection_delete_many(h->lock_coll, &f, NULL, NULL, NULL);
    bson_destroy(&f);
}

int outbox_mongo_lock(mongo_handle_t *h, const char *name, int64_t ttl_ms, int wait_ms,
                      mongo_lock_t *l, outbox_diag_t *d)
{
    memset(l, 0, sizeof *l);
    int64_t deadline = outbox_mongo_host->monotonic_us() + (int64_t)wait_ms * 1000;
    for (unsigned round = 0;; round++) {
        latest_t cur;
        int rc = find_turn(h, name, 0, &cur, d);
        if (rc != OUTBOX_OK)
            return rc;
        int64_t now_ms = outbox_mongo_ms(outbox_mongo_host->now_us());
        if (!cur.found || cur.done || cur.at_ms < now_ms - ttl_ms) {
            int64_t turn = cur.turn + 1;
            snprintf(l->id, sizeof l->id, "%s/%lld", name, (long long)turn);
            int got = insert_turn(h, l->id, name, turn, now_ms, d);
            if (got < 0)
                return got;
            if (got) {
                latest_t later;
                rc = find_turn(h, name, turn, &later, d);
                if (rc != OUTBOX_OK) {
                    mark_done(h, l->id);
                    return rc;
                }
                if (!later.found) {
                    outbox_mongo_host->log(OUTBOX_LOG_DEBUG, MONGO_NAME, "lock %s after %u rounds",
                                           l->id, round);
                    l->held = 1;
                    if (turn % 32 == 0)
                        cleanup(h, name, turn);
                    return OUTBOX_OK;
                }
                mark_done(h, l->id); /* a stale turn number: not the newest */
            }
        }
        if (outbox_mongo_host->monotonic_us() > deadline)
            return outbox_mongo_fail(d, OUTBOX_ETRANSIENT,
                                     "the lock \"%s\" stayed taken for %d ms (another relay holds it)",
                                     name, wait_ms);
        /* Back off a little more each round, up to 20 ms: a turn lasts
         * tens to hundreds of milliseconds, and every look costs the
         * server a read. */
        poll(NULL, 0, round < 10 ? 1 + (int)round * 2 : 20);
    }
}

void outbox_mongo_unlock(mongo_handle_t *h, mongo_lock_t *l)
{
    if (l->held)
        mark_done(h, l->id);
    l->held = 0;
}
