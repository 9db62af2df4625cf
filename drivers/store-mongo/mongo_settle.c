/* MongoDB store driver, third floor: settling a claim.
 *
 * The items are grouped by what they write: every PUBLISHED item is one
 * group, every RELEASE item another, DEAD and RESCHEDULE items group by
 * their error text (and retry time). Each group is one updateMany statement
 * on `_id $in` its ids, guarded by the fence (status processing and the
 * claim's claim_token), and the statements travel as unordered bulk writes
 * of at most MONGO_STMT_MAX statements each: a batch whose rows all
 * published is one command.
 *
 * Every update also replaces claim_token with a token of this settle call
 * alone. When the bulk reply's nModified equals the number of distinct
 * ids, every item applied; when it is 0, none did; otherwise one find on
 * `_id $in` the ids and that token says exactly which ones did, even when
 * the same claim was settled before.
 *
 * Without transactions a settle of several commands that fails half-way
 * keeps what the commands before the failure wrote; the relay's retry then
 * finds those rows no longer holding its fence.
 *
 * Where updates are not atomic (FerretDB) a guarded update would not decide
 * who applied; each item is settled on its own instead (settle_each),
 * unless the test switch (mongo_conn.h) asks for the path above.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mongo_ops.h"

/* Longest last_error kept; sink messages are short, a runaway one is cut. */
#define MONGO_ERROR_MAX 8192

typedef struct slot {
    size_t i; /* index into items */
    const outbox_settle_item_t *it;
} slot_t;

static const char *error_of(const outbox_settle_item_t *it)
{
    return it->kind == OUTBOX_SETTLE_RESCHEDULE || it->kind == OUTBOX_SETTLE_DEAD ? it->error
                                                                                  : NULL;
}

static int64_t avail_of(const outbox_settle_item_t *it)
{
    return it->kind == OUTBOX_SETTLE_RESCHEDULE || it->kind == OUTBOX_SETTLE_RELEASE
               ? outbox_mongo_ms(it->available_at)
               : 0;
}

/* Items that write the same thing sort next to each other. */
static int cmp_group(const slot_t *x, const slot_t *y)
{
    if (x->it->kind != y->it->kind)
        return x->it->kind < y->it->kind ? -1 : 1;
    int64_t ax = avail_of(x->it), ay = avail_of(y->it);
    if (ax != ay)
        return ax < ay ? -1 : 1;
    const char *ex = error_of(x->it), *ey = error_of(y->it);
    if (!ex || !ey)
        return ex == ey ? 0 : ex ? 1 : -1;
    return strcmp(ex, ey);
}

static int cmp_slot(const void *a, const void *b)
{
    const slot_t *x = a, *y = b;
    int c = cmp_group(x, y);
    return c ? c : (x->i < y->i ? -1 : x->i > y->i);
}

/* The update of one group. */
static int build_update(bson_t *u, const outbox_settle_item_t *it, const char *mark, int64_t now_ms,
                        char *line)
{
    bson_t set, unset, inc;
    BSON_APPEND_DOCUMENT_BEGIN(u, "$set", &set);
    BSON_APPEND_UTF8(&set, MF_TOKEN, mark);
    const char *err = error_of(it);
    if (err)
        outbox_kit_text_line(err, line, MONGO_ERROR_MAX);
    switch (it->kind) {
    case OUTBOX_SETTLE_PUBLISHED:
        BSON_APPEND_UTF8(&set, MF_STATUS, "published");
        BSON_APPEND_DATE_TIME(&set, "published_at", now_ms);
        break;
    case OUTBOX_SETTLE_DEAD:
        BSON_APPEND_UTF8(&set, MF_STATUS, "dead");
        if (err)
            BSON_APPEND_UTF8(&set, "last_error", line);
        else
            BSON_APPEND_NULL(&set, "last_error");
        break;
    case OUTBOX_SETTLE_RESCHEDULE:
        BSON_APPEND_UTF8(&set, MF_STATUS, "pending");
        if (it->available_at)
            BSON_APPEND_DATE_TIME(&set, "available_at", avail_of(it));
        else
            BSON_APPEND_NULL(&set, "available_at");
        if (err)
            BSON_APPEND_UTF8(&set, "last_error", line);
        else
            BSON_APPEND_NULL(&set, "last_error");
        break;
    default: /* RELEASE, held back until available_at when it has one */
        BSON_APPEND_UTF8(&set, MF_STATUS, "pending");
        if (it->available_at)
            BSON_APPEND_DATE_TIME(&set, "available_at", avail_of(it));
        break;
    }
    bson_append_document_end(u, &set);
    if (it->kind == OUTBOX_SETTLE_RESCHEDULE || it->kind == OUTBOX_SETTLE_RELEASE) {
        BSON_APPEND_DOCUMENT_BEGIN(u, "$unset", &unset);
        BSON_APPEND_UTF8(&unset, "processing_at", "");
        bson_append_document_end(u, &unset);
    }
    if (it->kind == OUTBOX_SETTLE_RELEASE) {
        /* The attempt never happened: give it back. */
        BSON_APPEND_DOCUMENT_BEGIN(u, "$inc", &inc);
        BSON_APPEND_INT32(&inc, "attempts", -1);
        bson_append_document_end(u, &inc);
    }
    return 1;
}

/* A bulk write being filled, and what the ones sent so far changed. */
typedef struct bulk {
    mongo_handle_t *h;
    mongoc_bulk_operation_t *op;
    size_t statements;
    int64_t modified;
} bulk_t;

static int bulk_flush(bulk_t *b, outbox_diag_t *d)
{
    if (!b->op)
        return OUTBOX_OK;
    bson_t reply;
    bson_error_t e;
    int rc = OUTBOX_OK;
    if (!mongoc_bulk_operation_execute(b->op, &reply, &e))
        rc = outbox_mongo_error(d, &e, &reply, "settling");
    bson_iter_t it;
    if (bson_iter_init_find(&it, &reply, "nModified") && BSON_ITER_HOLDS_NUMBER(&it))
        b->modified += bson_iter_as_int64(&it);
    bson_destroy(&reply);
    mongoc_bulk_operation_destroy(b->op);
    b->op = NULL;
    b->statements = 0;
    return rc;
}

static int bulk_add(bulk_t *b, const bson_t *filter, const bson_t *update, outbox_diag_t *d)
{
    if (!b->op) {
        bson_t opts = BSON_INITIALIZER;
        BSON_APPEND_BOOL(&opts, "ordered", false);
        b->op = mongoc_collection_create_bulk_operation_with_opts(b->h->coll, &opts);
        bson_destroy(&opts);
        if (!b->op)
            return outbox_mongo_nomem(d);
    }
    bson_error_t e;
    if (!mongoc_bulk_operation_update_many_with_opts(b->op, filter, update, NULL, &e))
        return outbox_mongo_error(d, &e, NULL, "settling");
    if (++b->statements >= MONGO_STMT_MAX)
        return bulk_flush(b, d);
    return OUTBOX_OK;
}

/* One statement for slots[0..k): their ids, the fence, the group's update. */
static int add_group(bulk_t *b, const slot_t *slots, size_t k, const outbox_fence_t *fence,
                     const char *mark, int64_t now_ms, char *line, outbox_diag_t *d)
{
    const char **ids = outbox_mongo_host->alloc(k * sizeof *ids);
    if (!ids)
        return outbox_mongo_nomem(d);
    for (size_t j = 0; j < k; j++)
        ids[j] = slots[j].it->id;
    bson_t f = BSON_INITIALIZER, in, u = BSON_INITIALIZER;
    BSON_APPEND_DOCUMENT_BEGIN(&f, MF_ID, &in);
    int ok = outbox_mongo_append_ids(&in, "$in", ids, k);
    bson_append_document_end(&f, &in);
    BSON_APPEND_UTF8(&f, MF_STATUS, "processing");
    BSON_APPEND_UTF8(&f, MF_TOKEN, fence->token);
    outbox_mongo_host->free(ids);
    build_update(&u, slots[0].it, mark, now_ms, line);
    int rc = ok ? bulk_add(b, &f, &u, d) : outbox_mongo_nomem(d);
    bson_destroy(&f);
    bson_destroy(&u);
    return rc;
}

/* ----------------------------------------------------------- read back */

typedef struct marked {
    outbox_settle_item_t *items;
    size_t n;
} marked_t;

static int mark_applied(const bson_t *doc, void *ctx, outbox_diag_t *d)
{
    (void)d;
    marked_t *m = ctx;
    const char *id = outbox_mongo_str(doc, MF_ID);
    /* An id given twice changed its row once: count it once. */
    for (size_t i = 0; id && i < m->n; i++)
        if (strcmp(m->items[i].id, id) == 0) {
            m->items[i].applied = 1;
            break;
        }
    return OUTBOX_OK;
}

static int read_applied(mongo_handle_t *h, outbox_settle_item_t *items, size_t n, const char *mark,
                        outbox_diag_t *d)
{
    int rc = OUTBOX_OK;
    for (size_t at = 0; rc == OUTBOX_OK && at < n; at += MONGO_IN_MAX) {
        size_t k = n - at < MONGO_IN_MAX ? n - at : MONGO_IN_MAX;
        const char **ids = outbox_mongo_host->alloc(k * sizeof *ids);
        if (!ids)
            return outbox_mongo_nomem(d);
        for (size_t j = 0; j < k; j++)
            ids[j] = items[at + j].id;
        bson_t f = BSON_INITIALIZER, in, opts = BSON_INITIALIZER, p;
        BSON_APPEND_DOCUMENT_BEGIN(&f, MF_ID, &in);
        int ok = outbox_mongo_append_ids(&in, "$in", ids, k);
        bson_append_document_end(&f, &in);
        BSON_APPEND_UTF8(&f, MF_TOKEN, mark);
        outbox_mongo_host->free(ids);
        BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &p);
        BSON_APPEND_INT32(&p, MF_ID, 1);
        bson_append_document_end(&opts, &p);
        marked_t m = {items, n};
        rc = ok ? outbox_mongo_find(h->coll, &f, &opts, mark_applied, &m, d, "settling (reading back)")
                : outbox_mongo_nomem(d);
        bson_destroy(&f);
        bson_destroy(&opts);
    }
    return rc;
}

typedef struct holding {
    const outbox_fence_t *fence;
    outbox_settle_item_t *item;
} holding_t;

/* The settle stands only on a row that held the claim's fence. */
static int keep_settled(const bson_t *old, void *ctx, int *stands, outbox_diag_t *d)
{
    (void)d;
    holding_t *hold = ctx;
    const char *st = outbox_mongo_str(old, MF_STATUS), *tok = outbox_mongo_str(old, MF_TOKEN);
    *stands = st && tok && strcmp(st, "processing") == 0 && strcmp(tok, hold->fence->token) == 0;
    if (*stands)
        hold->item->applied = 1;
    return OUTBOX_OK;
}

/* The racy path: one findAndModify per item on its _id alone (FerretDB
 * finds a lone _id through its index and reads the whole collection for
 * any other filter). It returns the document as it was: when that did not
 * hold the fence (a settle after the lease ran out and another claim took
 * the row, or the same item settled twice), the document is written back
 * as it was and the item did not apply. Should another claim take the row
 * in the instant between the two, its claim is overwritten: the row is
 * then delivered twice, never lost. */
static int settle_each(mongo_handle_t *h, const outbox_fence_t *fence, outbox_settle_item_t *items,
                       size_t n, const char *mark, int64_t now_ms, char *line, outbox_diag_t *d)
{
    int rc = OUTBOX_OK;
    for (size_t i = 0; rc == OUTBOX_OK && i < n; i++) {
        int again = 0;
        for (size_t j = 0; j < i && !again; j++)
            again = strcmp(items[j].id, items[i].id) == 0;
        if (again)
            continue; /* an id given twice changes its row once: the first item's */
        bson_t u = BSON_INITIALIZER;
        build_update(&u, &items[i], mark, now_ms, line);
        holding_t hold = {fence, &items[i]};
        rc = outbox_mongo_swap_by_id(h->coll, items[i].id, &u, keep_settled, &hold, d, "settling");
        bson_destroy(&u);
    }
    return rc;
}

static size_t distinct_ids(const slot_t *by_id, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (i == 0 || strcmp(by_id[i - 1].it->id, by_id[i].it->id) != 0)
            c++;
    return c;
}

static int cmp_id(const void *a, const void *b)
{
    const slot_t *x = a, *y = b;
    return strcmp(x->it->id, y->it->id);
}

int outbox_mongo_settle(void *handle, const outbox_fence_t *fence, outbox_settle_item_t *items,
                        size_t n, size_t *applied, outbox_diag_t *d)
{
    mongo_handle_t *h = handle;
    /* driver.h: the host has checked the fence and the items. */
    int rc = outbox_mongo_no_open_tx(h, "settle", d);
    if (rc != OUTBOX_OK)
        return rc;
    if (memchr(fence->token, '\0', sizeof fence->token) == NULL || fence->token[0] == '\0')
        return OUTBOX_OK; /* no claim wrote this fence: nothing holds it */

    slot_t *slots = outbox_mongo_host->alloc(n * sizeof *slots);
    char *line = outbox_mongo_host->alloc(MONGO_ERROR_MAX);
    if (!slots || !line) {
        outbox_mongo_host->free(slots);
        outbox_mongo_host->free(line);
        return outbox_mongo_nomem(d);
    }
    size_t ns = 0;
    for (size_t i = 0; i < n; i++)
        slots[ns++] = (slot_t){i, &items[i]};
    qsort(slots, ns, sizeof *slots, cmp_slot);

    char mark[40];
    outbox_mongo_token(mark);
    int64_t now_ms = outbox_mongo_ms(outbox_mongo_host->now_us());
    bulk_t b = {.h = h};
    if (h->racy_claims)
        rc = settle_each(h, fence, items, n, mark, now_ms, line, d);
    for (size_t i = 0; !h->racy_claims && rc == OUTBOX_OK && i < ns;) {
        size_t j = i + 1;
        while (j < ns && j - i < MONGO_IN_MAX && cmp_group(&slots[i], &slots[j]) == 0)
            j++;
        rc = add_group(&b, slots + i, j - i, fence, mark, now_ms, line, d);
        i = j;
    }
    if (rc == OUTBOX_OK)
        rc = bulk_flush(&b, d);
    else if (b.op)
        mongoc_bulk_operation_destroy(b.op);
    outbox_mongo_host->free(line);

    if (h->racy_claims) {
        /* The fence check decided; an error leaves the rows as the
         * statements that ran made them, as anywhere on such a server. */
        if (rc != OUTBOX_OK)
            for (size_t i = 0; i < n; i++)
                items[i].applied = 0;
    } else if (rc == OUTBOX_OK && b.modified > 0) {
        qsort(slots, n, sizeof *slots, cmp_id);
        size_t distinct = distinct_ids(slots, n);
        if ((size_t)b.modified >= distinct) {
            /* Every id changed: the first item of each applied. */
            for (size_t i = 0; i < n; i++)
                if (i == 0 || strcmp(slots[i - 1].it->id, slots[i].it->id) != 0)
                    items[slots[i].i].applied = 1;
        } else {
            rc = read_applied(h, items, n, mark, d);
        }
    }
    outbox_mongo_host->free(slots);
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        if (rc != OUTBOX_OK)
            items[i].applied = 0;
        count += items[i].applied ? 1 : 0;
    }
    if (applied)
        *applied = rc == OUTBOX_OK ? count : 0;
    return rc;
}
