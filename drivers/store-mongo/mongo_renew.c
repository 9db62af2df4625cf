/* MongoDB store driver, third floor: renewing a claim's lease.
 *
 * One updateMany per MONGO_IN_MAX ids, guarded like settle (status
 * processing and the claim's claim_token), writes a fresh token and
 * processing_at: the token is the new fence, and the rows' nModified
 * says how many still held the old one. A renewal of more than
 * MONGO_IN_MAX rows that fails half-way leaves the first part on the new
 * token; the relay keeps the old one, so those rows' settle is refused
 * and they are delivered again once their lease ends, never lost.
 *
 * Where updates are not atomic (FerretDB), a renewal racing a claim of the
 * same expired row may overwrite that claim's token; one of the two
 * relays' settles is then refused, and the row was published by both.
 */
#include <stdio.h>

#include "mongo_ops.h"

int outbox_mongo_renew(void *handle, const outbox_renew_req_t *req, outbox_fence_t *renewed,
                       size_t *count, outbox_diag_t *d)
{
    mongo_handle_t *h = handle;
    /* driver.h: the host has checked req and cleared the outputs. */
    int rc = outbox_mongo_no_open_tx(h, "renew", d);
    if (rc != OUTBOX_OK)
        return rc;
    char token[40];
    outbox_mongo_token(token);
    int64_t now_ms = outbox_mongo_ms(outbox_mongo_host->now_us());
    int64_t moved = 0;
    for (size_t at = 0; rc == OUTBOX_OK && at < req->n; at += MONGO_IN_MAX) {
        size_t k = req->n - at < MONGO_IN_MAX ? req->n - at : MONGO_IN_MAX;
        bson_t f = BSON_INITIALIZER, in, u = BSON_INITIALIZER, set, reply;
        BSON_APPEND_UTF8(&f, MF_ROUTE, req->route);
        BSON_APPEND_DOCUMENT_BEGIN(&f, MF_ID, &in);
        int ok = outbox_mongo_append_ids(&in, "$in", req->ids + at, k);
        bson_append_document_end(&f, &in);
        BSON_APPEND_UTF8(&f, MF_STATUS, "processing");
        BSON_APPEND_UTF8(&f, MF_TOKEN, req->fence->token);
        BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
        BSON_APPEND_UTF8(&set, MF_TOKEN, token);
        BSON_APPEND_DATE_TIME(&set, "processing_at", now_ms);
        bson_append_document_end(&u, &set);
        bson_error_t e;
        if (!ok) {
            rc = outbox_mongo_nomem(d);
        } else if (!mongoc_collection_update_many(h->coll, &f, &u, NULL, &reply, &e)) {
            rc = outbox_mongo_error(d, &e, &reply, "renewing the lease");
            bson_destroy(&reply);
        } else {
            bson_iter_t it;
            if (bson_iter_init_find(&it, &reply, "modifiedCount") && BSON_ITER_HOLDS_NUMBER(&it))
                moved += bson_iter_as_int64(&it);
            bson_destroy(&reply);
        }
        bson_destroy(&f);
        bson_destroy(&u);
    }
    if (rc != OUTBOX_OK)
        return rc;
    *count = (size_t)moved;
    if (moved > 0)
        snprintf(renewed->token, sizeof renewed->token, "%s", token);
    return OUTBOX_OK;
}
