/* MongoDB store driver, third floor: staging.
 *
 * One document per row, inserted with insertMany ordered:false, in commands
 * of at most MONGO_STMT_MAX documents. A duplicate (outbox_route, event_id)
 * fails its own insert on the unique index (E11000) and the others go in:
 * that is the skip the contract asks for, counted from insertedCount.
 *
 * Inside a transaction a duplicate-key error would abort the whole
 * transaction, so there the rows whose event already exists are looked up
 * first (in the same session) and left out.
 *
 * Without a transaction, a call of more than one command is atomic only on
 * a server with transactions (the driver then opens one of its own); on
 * FerretDB a failure half-way leaves the commands that went through, and
 * the caller's retry skips them as duplicates.
 */
#include <stdio.h>
#include <string.h>

#include "mongo_ops.h"

static int bad_row(outbox_diag_t *d, size_t i, const char *what)
{
    return outbox_mongo_fail(d, OUTBOX_EINVAL, "row %zu has no %s", i, what);
}

static int check_rows(const outbox_row_t *rows, size_t n, outbox_diag_t *d)
{
    for (size_t i = 0; i < n; i++) {
        const outbox_row_t *r = &rows[i];
        if (!r->id)
            return bad_row(d, i, "id");
        if (!r->route)
            return bad_row(d, i, "route");
        if (!r->event_id)
            return bad_row(d, i, "event_id");
        if (!r->event_type)
            return bad_row(d, i, "event_type");
        if (!r->payload)
            return bad_row(d, i, "payload");
    }
    return OUTBOX_OK;
}

static void put_str(bson_t *doc, const char *key, const char *v)
{
    if (v)
        bson_append_utf8(doc, key, -1, v, -1);
}

/* The document of one row; available_at, when not 0, instead of the
 * row's own. */
static int build_doc(bson_t *doc, const outbox_row_t *r, size_t i, int64_t available_at,
                     outbox_diag_t *d)
{
    if (available_at == 0)
        available_at = r->available_at;
    bson_init(doc);
    bson_append_utf8(doc, MF_ID, -1, r->id, -1);
    bson_append_utf8(doc, MF_ROUTE, -1, r->route, -1);
    bson_append_utf8(doc, "event_id", -1, r->event_id, -1);
    bson_append_utf8(doc, "event_type", -1, r->event_type, -1);
    put_str(doc, "tenant_id", r->tenant_id);
    put_str(doc, "execution_id", r->execution_id);
    put_str(doc, "correlation_id", r->correlation_id);
    put_str(doc, "causation_id", r->causation_id);
    bson_append_date_time(doc, "occurred_at", -1, outbox_mongo_ms(r->occurred_at));
    char why[256];
    size_t len = r->payload_len ? r->payload_len : strlen(r->payload);
    if (outbox_mongo_json_append(doc, "payload", r->payload, len, why, sizeof why) != 0) {
        bson_destroy(doc);
        return outbox_mongo_fail(d, OUTBOX_EINVAL, "row %zu: the payload cannot be stored as BSON: %s",
                                 i, why);
    }
    bson_append_utf8(doc, MF_STATUS, -1, "pending", -1);
    bson_append_date_time(doc, "created_at", -1, outbox_mongo_ms(r->created_at));
    bson_append_int32(doc, "attempts", -1, 0);
    if (available_at)
        bson_append_date_time(doc, "available_at", -1, outbox_mongo_ms(available_at));
    else
        bson_append_null(doc, "available_at", -1);
    put_str(doc, "ordering_key", r->ordering_key);
    put_str(doc, "traceparent", r->traceparent);
    if (r->hlc)
        bson_append_int64(doc, "hlc", -1, r->hlc);
    return OUTBOX_OK;
}

/* ------------------------------------------------- duplicates in a session */

typedef struct seen {
    const outbox_row_t *rows;
    size_t n;
    unsigned char *skip;
} seen_t;

static int mark_existing(const bson_t *doc, void *ctx, outbox_diag_t *d)
{
    (void)d;
    seen_t *s = ctx;
    const char *route = outbox_mongo_str(doc, MF_ROUTE), *eid = outbox_mongo_str(doc, "event_id");
    for (size_t i = 0; route && eid && i < s->n; i++)
        if (strcmp(s->rows[i].route, route) == 0 && strcmp(s->rows[i].event_id, eid) == 0)
            s->skip[i] = 1;
    return OUTBOX_OK;
}

/* skip[i] = 1 for the rows of rows[0..n) whose (route, event_id) exists or
 * comes earlier in the same call. */
static int find_duplicates(mongoc_collection_t *coll, mongoc_client_session_t *session,
                           const outbox_row_t *rows, size_t n, unsigned char *skip,
                           outbox_diag_t *d)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < i && !skip[i]; j++)
            if (!skip[j] && strcmp(rows[i].route, rows[j].route) == 0 &&
                strcmp(rows[i].event_id, rows[j].event_id) == 0)
                skip[i] = 1;
    const char **eids = outbox_mongo_host->alloc(n * sizeof *eids);
    if (!eids)
        return outbox_mongo_nomem(d);
    for (size_t i = 0; i < n; i++)
        eids[i] = rows[i].event_id;
    bson_t filter = BSON_INITIALIZER, in, opts = BSON_INITIALIZER, proj;
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "event_id", &in);
    int ok = outbox_mongo_append_ids(&in, "$in", eids, n);
    bson_append_document_end(&filter, &in);
    outbox_mongo_host->free(eids);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &proj);
    BSON_APPEND_INT32(&proj, MF_ROUTE, 1);
    BSON_APPEND_INT32(&proj, "event_id", 1);
    bson_append_document_end(&opts, &proj);
    int rc = ok ? outbox_mongo_opts_session(session, &opts, d) : outbox_mongo_nomem(d);
    seen_t s = {rows, n, skip};
    if (rc == OUTBOX_OK)
        rc = outbox_mongo_find(coll, &filter, &opts, mark_existing, &s, d, "staging");
    bson_destroy(&filter);
    bson_destroy(&opts);
    return rc;
}

/* ---------------------------------------------------------------- insert */

static int32_t reply_int(const bson_t *reply, const char *key)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, reply, key) && BSON_ITER_HOLDS_NUMBER(&it))
        return (int32_t)bson_iter_as_int64(&it);
    return 0;
}

/* 1 when every write error of the reply is a duplicate key and there is no
 * write concern error: the rows that went in are in, the others were
 * duplicates. */
static int only_duplicates(const bson_t *reply)
{
    bson_iter_t it, errs;
    if (bson_iter_init_find(&it, reply, "writeConcernErrors") && BSON_ITER_HOLDS_ARRAY(&it)) {
        bson_iter_recurse(&it, &errs);
        if (bson_iter_next(&errs))
            return 0;
    }
    if (!bson_iter_init_find(&it, reply, "writeErrors") || !BSON_ITER_HOLDS_ARRAY(&it))
        return 0;
    bson_iter_recurse(&it, &errs);
    int any = 0;
    while (bson_iter_next(&errs)) {
        bson_iter_t e;
        if (!BSON_ITER_HOLDS_DOCUMENT(&errs) || !bson_iter_recurse(&errs, &e) ||
            !bson_iter_find(&e, "code") || bson_iter_as_int64(&e) != 11000)
            return 0;
        any = 1;
    }
    return any;
}

static int insert_chunk(mongoc_collection_t *coll, mongoc_client_session_t *session,
                        const bson_t **docs, size_t k, size_t *count, outbox_diag_t *d)
{
    bson_t opts = BSON_INITIALIZER, reply;
    BSON_APPEND_BOOL(&opts, "ordered", false);
    int rc = outbox_mongo_opts_session(session, &opts, d);
    if (rc != OUTBOX_OK) {
        bson_destroy(&opts);
        return rc;
    }
    bson_error_t e;
    int ok = mongoc_collection_insert_many(coll, docs, k, &opts, &reply, &e);
    bson_destroy(&opts);
    if (ok || only_duplicates(&reply))
        *count += (size_t)reply_int(&reply, "insertedCount");
    else
        rc = outbox_mongo_error(d, &e, &reply, "staging");
    bson_destroy(&reply);
    return rc;
}

static int insert_rows(mongoc_collection_t *coll, mongoc_client_session_t *session,
                       const outbox_row_t *rows, size_t n, const unsigned char *skip,
                       int64_t available_at, size_t *count, outbox_diag_t *d)
{
    bson_t docs[MONGO_STMT_MAX];
    const bson_t *ptrs[MONGO_STMT_MAX];
    size_t i = 0;
    int rc = OUTBOX_OK;
    while (rc == OUTBOX_OK && i < n) {
        size_t k = 0;
        for (; i < n && k < MONGO_STMT_MAX && rc == OUTBOX_OK; i++) {
            if (skip && skip[i])
                continue;
            rc = build_doc(&docs[k], &rows[i], i, available_at, d);
            if (rc == OUTBOX_OK) {
                ptrs[k] = &docs[k];
                k++;
            }
        }
        if (rc == OUTBOX_OK && k > 0)
            rc = insert_chunk(coll, session, ptrs, k, count, d);
        for (size_t j = 0; j < k; j++)
            bson_destroy(&docs[j]);
    }
    return rc;
}

/* Every payload is converted once before anything is sent, so that a
 * payload libbson refuses fails the call before it wrote a row. */
static int check_payloads(const outbox_row_t *rows, size_t n, outbox_diag_t *d)
{
    for (size_t i = 0; i < n; i++) {
        bson_t doc;
        int rc = build_doc(&doc, &rows[i], i, 0, d);
        if (rc != OUTBOX_OK)
            return rc;
        bson_destroy(&doc);
    }
    return OUTBOX_OK;
}

int outbox_mongo_stage(void *handle, const outbox_stage_ctx_t *ctx, const outbox_row_t *rows,
                       size_t n, size_t *staged, outbox_diag_t *d)
{
    mongo_handle_t *h = handle;
    if (staged)
        *staged = 0;
    if (n && !rows)
        return outbox_mongo_fail(d, OUTBOX_EINVAL, "no rows given");
    int rc = check_rows(rows, n, d);
    if (rc == OUTBOX_OK)
        rc = check_payloads(rows, n, d);
    mongoc_client_session_t *session = NULL;
    mongoc_client_t *client = NULL;
    if (rc == OUTBOX_OK)
        rc = outbox_mongo_write_target(h, ctx, &session, &client, "staging", d);
    if (rc != OUTBOX_OK || n == 0)
        return rc;

    /* A standalone call of several commands: atomic in a transaction of its
     * own where the server has them. */
    mongoc_client_session_t *own = NULL;
    bson_error_t e;
    if (!session && h->server_tx && n > MONGO_STMT_MAX) {
        own = mongoc_client_start_session(h->client, NULL, &e);
        if (!own)
            return outbox_mongo_error(d, &e, NULL, "staging: starting a session");
        if (!mongoc_client_session_start_transaction(own, NULL, &e)) {
            mongoc_client_session_destroy(own);
            return outbox_mongo_error(d, &e, NULL, "staging: starting a transaction");
        }
        session = own;
    }
    mongoc_collection_t *coll = client == h->client ? h->coll : outbox_mongo_coll(h, client, &h->rel);
    unsigned char *skip = NULL;
    if (!coll)
        rc = outbox_mongo_nomem(d);
    if (rc == OUTBOX_OK && session) {
        skip = outbox_mongo_host->alloc(n);
        if (!skip)
            rc = outbox_mongo_nomem(d);
        else {
            memset(skip, 0, n);
            rc = find_duplicates(coll, session, rows, n, skip, d);
        }
    }
    /* A delay counts from the host's clock, the one claims compare with. */
    int64_t delay = ctx && OUTBOX_STRUCT_HAS(outbox_stage_ctx_t, ctx, delay_us) ? ctx->delay_us : 0;
    int64_t available_at = delay > 0 ? outbox_mongo_host->now_us() + delay : 0;
    size_t count = 0;
    if (rc == OUTBOX_OK)
        rc = insert_rows(coll, session, rows, n, skip, available_at, &count, d);
    if (own) {
        if (rc == OUTBOX_OK) {
            bson_t reply;
            if (!mongoc_client_session_commit_transaction(own, &reply, &e))
                rc = outbox_mongo_error(d, &e, &reply, "staging: commit");
            bson_destroy(&reply);
        } else {
            mongoc_client_session_abort_transaction(own, NULL);
        }
        mongoc_client_session_destroy(own);
    }
    outbox_mongo_host->free(skip);
    if (coll && coll != h->coll)
        mongoc_collection_destroy(coll);
    if (rc == OUTBOX_OK && staged)
        *staged = count;
    return ctx && ctx->in_own_tx ? outbox_mongo_tx_note(h, rc) : rc;
}
