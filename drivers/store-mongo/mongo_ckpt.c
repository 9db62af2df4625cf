/* MongoDB store driver, third floor: the clock checkpoint.
 *
 * Documents {_id: node_key, hlc: int64}. An advance is ONE update with
 * $max and upsert: the server takes the maximum under the document's lock,
 * so a slower writer with a smaller mark never lowers it, and a first
 * advance creates the document. Recovery reads every key and keeps the
 * largest mark.
 */
#include <stdio.h>
#include <string.h>

#include "mongo_ops.h"

/* Where the $max upsert is not atomic: every how many advances a handle
 * deletes the marks below its own. */
#define MONGO_CKPT_CLEANUP_EVERY 32

static int checkpoint_missing(const mongo_handle_t *h, outbox_diag_t *d)
{
    return outbox_mongo_fail(d, OUTBOX_ENOTSUP,
                             "checkpoint collection \"%s\" not found (create it with schema apply)",
                             h->shown_ckpt);
}

static int is_duplicate(const bson_error_t *e)
{
    return e->domain == MONGOC_ERROR_SERVER && e->code == 11000;
}

static int upsert(mongo_handle_t *h, mongoc_client_t *client, mongoc_client_session_t *session,
                  const char *node_key, int64_t hlc, outbox_diag_t *d)
{
    mongoc_collection_t *coll =
        client == h->client ? h->ckpt_coll : outbox_mongo_coll(h, client, &h->ckpt);
    if (!coll)
        return outbox_mongo_nomem(d);
    bson_t f = BSON_INITIALIZER, u = BSON_INITIALIZER, max, opts = BSON_INITIALIZER, reply;
    BSON_APPEND_UTF8(&f, "_id", node_key);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "$max", &max);
    BSON_APPEND_INT64(&max, "hlc", hlc);
    bson_append_document_end(&u, &max);
    BSON_APPEND_BOOL(&opts, "upsert", true);
    int rc = outbox_mongo_opts_session(session, &opts, d);
    for (int attempt = 0; rc == OUTBOX_OK; attempt++) {
        bson_error_t e;
        if (mongoc_collection_update_one(coll, &f, &u, &opts, &reply, &e)) {
            bson_destroy(&reply);
            break;
        }
        /* Two first advances of one key race to insert it: the loser's
         * upsert fails on the _id, and run again it finds the document
         * and applies $max to it. In a transaction the failure aborted it. */
        if (is_duplicate(&e) && attempt == 0 && !session) {
            bson_destroy(&reply);
            continue;
        }
        rc = outbox_mongo_error(d, &e, &reply, "advancing the checkpoint");
        bson_destroy(&reply);
    }
    bson_destroy(&f);
    bson_destroy(&u);
    bson_destroy(&opts);
    if (coll != h->ckpt_coll)
        mongoc_collection_destroy(coll);
    return rc;
}

/* Where a $max upsert is not atomic (FerretDB writes back the document it
 * read, so of two concurrent advances the smaller may land last), every
 * advance inserts a mark of its own instead, {_id: "<node_key>/<hlc>",
 * node_key, hlc}: an insert never loses another, recovery takes the
 * maximum over all documents either way, and now and then a handle deletes
 * the marks of its key below the one it just wrote (never the largest). */
static int insert_mark(mongo_handle_t *h, const char *node_key, int64_t hlc, outbox_diag_t *d)
{
    char id[300];
    snprintf(id, sizeof id, "%.200s/%020lld", node_key, (long long)hlc);
    bson_t doc = BSON_INITIALIZER, reply;
    BSON_APPEND_UTF8(&doc, "_id", id);
    BSON_APPEND_UTF8(&doc, "node_key", node_key);
    BSON_APPEND_INT64(&doc, "hlc", hlc);
    bson_error_t e;
    int rc = OUTBOX_OK;
    if (!mongoc_collection_insert_one(h->ckpt_coll, &doc, NULL, &reply, &e) &&
        !(e.domain == MONGOC_ERROR_SERVER && e.code == 11000)) /* that mark is there already */
        rc = outbox_mongo_error(d, &e, &reply, "advancing the checkpoint");
    bson_destroy(&reply);
    bson_destroy(&doc);
    if (rc == OUTBOX_OK && ++h->ckpt_writes % MONGO_CKPT_CLEANUP_EVERY == 0) {
        bson_t f = BSON_INITIALIZER, lt;
        BSON_APPEND_UTF8(&f, "node_key", node_key);
        BSON_APPEND_DOCUMENT_BEGIN(&f, "hlc", &lt);
        BSON_APPEND_INT64(&lt, "$lt", hlc);
        bson_append_document_end(&f, &lt);
        mongoc_collection_delete_many(h->ckpt_coll, &f, NULL, NULL, NULL);
        bson_destroy(&f);
    }
    return rc;
}

int outbox_mongo_checkpoint_advance(void *handle, const outbox_stage_ctx_t *ctx,
                                    const char *node_key, int64_t hlc, outbox_diag_t *d)
{
    mongo_handle_t *h = handle;
    if (!node_key)
        return outbox_mongo_fail(d, OUTBOX_EINVAL, "checkpoint advance needs a node key");
    if (!h->has_ckpt)
        return checkpoint_missing(h, d);
    mongoc_client_session_t *session = NULL;
    mongoc_client_t *client = NULL;
    int rc = outbox_mongo_write_target(h, ctx, &session, &client, "advancing the checkpoint", d);
    if (rc == OUTBOX_OK && h->racy_updates && !session)
        rc = insert_mark(h, node_key, hlc, d);
    else if (rc == OUTBOX_OK)
        rc = upsert(h, client, session, node_key, hlc, d);
    return ctx && ctx->in_own_tx ? outbox_mongo_tx_note(h, rc) : rc;
}

static int take_max(const bson_t *doc, void *ctx, outbox_diag_t *d)
{
    (void)d;
    int64_t *best = ctx;
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, "hlc") && BSON_ITER_HOLDS_NUMBER(&it)) {
        int64_t v = bson_iter_as_int64(&it);
        if (v > *best)
            *best = v;
    }
    return OUTBOX_OK;
}

int outbox_mongo_checkpoint_recover(void *handle, int64_t *hlc, outbox_diag_t *d)
{
    mongo_handle_t *h = handle;
    if (!hlc)
        return outbox_mongo_fail(d, OUTBOX_EINVAL, "checkpoint recover needs an output");
    *hlc = 0;
    if (!h->has_ckpt)
        return checkpoint_missing(h, d);
    bson_t f = BSON_INITIALIZER, opts = BSON_INITIALIZER, p;
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &p);
    BSON_APPEND_INT32(&p, "hlc", 1);
    bson_append_document_end(&opts, &p);
    int64_t best = 0;
    int rc = outbox_mongo_find(h->ckpt_coll, &f, &opts, take_max, &best, d,
                               "recovering the checkpoint");
    bson_destroy(&f);
    bson_destroy(&opts);
    if (rc == OUTBOX_OK)
        *hlc = best;
    return rc;
}
