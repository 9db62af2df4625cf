/* MongoDB store driver, top floor: the descriptor and vtable, open and
 * close, capabilities, the handle's own transactions and the native ones
 * the conformance battery asks for. Nothing in the driver calls this file.
 *
 * Transactions are a capability of the server, read from its hello at
 * open: a replica set member or a mongos runs them, a standalone mongod and
 * FerretDB do not. Without them begin, and staging through a native
 * session, refuse with OUTBOX_ENOTSUP, and every other operation is
 * written so that it needs none (mongo_claim.c, mongo_settle.c).
 */
#include <stdio.h>
#include <string.h>

#include "mongo_ops.h"
#include "outbox/version.h"

/* What every handle can do, whatever the server: concurrent claimers are
 * kept apart by the guarded update, or on FerretDB by the route's lock (but
 * see the test switch in mongo_conn.h); a document carries traceparent
 * without any schema; MongoDB sorts a missing hlc first. */
#define MONGO_BASE_CAPS                                                                  \
    (OUTBOX_STORE_CAP_CONCURRENT | OUTBOX_STORE_CAP_TRACEPARENT |                        \
     OUTBOX_STORE_CAP_HLC_NULLS_FIRST | OUTBOX_STORE_CAP_DELAYED)

/* ------------------------------------------------------------ open/close */

static void mongo_close(void *handle)
{
    mongo_handle_t *h = handle;
    if (!h)
        return;
    if (h->session) {
        /* Ending the session aborts its open transaction. */
        mongoc_client_session_destroy(h->session);
    }
    if (h->coll)
        mongoc_collection_destroy(h->coll);
    if (h->ckpt_coll)
        mongoc_collection_destroy(h->ckpt_coll);
    if (h->inbox_coll)
        mongoc_collection_destroy(h->inbox_coll);
    if (h->lock_coll)
        mongoc_collection_destroy(h->lock_coll);
    if (h->client)
        mongoc_client_destroy(h->client);
    if (h->uri)
        mongoc_uri_destroy(h->uri);
    outbox_mongo_claim_cache_free(h);
    outbox_mongo_host->free(h->rows);
    outbox_kit_buf_free(&h->arena);
    outbox_mongo_host->free(h);
}

static int mongo_open(const outbox_store_open_t *params, void **handle, outbox_diag_t *d)
{
    if (!handle)
        return outbox_mongo_fail(d, OUTBOX_EINVAL, "no handle pointer given");
    *handle = NULL;
    if (!params)
        return outbox_mongo_fail(d, OUTBOX_EINVAL, "no open parameters given");
    mongo_handle_t *h = outbox_mongo_host->alloc(sizeof *h);
    if (!h)
        return outbox_mongo_nomem(d);
    memset(h, 0, sizeof *h);
    outbox_kit_buf_init(&h->arena, outbox_mongo_host);
    h->read_only = (params->flags & OUTBOX_OPEN_READ_ONLY) != 0;
    int schema_only = (params->flags & OUTBOX_OPEN_SCHEMA_ONLY) != 0;

    int rc = outbox_mongo_uri(params->uri, &h->uri, h->db, sizeof h->db, d);
    if (rc == OUTBOX_OK)
        rc = outbox_mongo_relname(params->relation ? params->relation : "outbox", &h->rel, d);
    if (rc == OUTBOX_OK)
        rc = outbox_mongo_relname_ckpt(params->checkpoint_relation, &h->rel, &h->ckpt, d);
    /* An older host's parameters end before the inbox: the default then. */
    const char *inbox = OUTBOX_STRUCT_HAS(outbox_store_open_t, params, inbox_relation)
                            ? params->inbox_relation
                            : NULL;
    if (rc == OUTBOX_OK)
        rc = outbox_mongo_relname_inbox(inbox, &h->rel, &h->inbox, d);
    if (rc == OUTBOX_OK) {
        outbox_kit_relname_show(&h->rel, h->shown, sizeof h->shown);
        outbox_kit_relname_show(&h->ckpt, h->shown_ckpt, sizeof h->shown_ckpt);
        outbox_kit_relname_show(&h->inbox, h->shown_inbox, sizeof h->shown_inbox);
        rc = outbox_mongo_connect(h, d);
    }
    if (rc == OUTBOX_OK)
        rc = outbox_mongo_detect(h, !schema_only, d);
    if (rc != OUTBOX_OK) {
        /* libmongoc's words may quote what the user wrote, password included. */
        if (d) {
            char safe[OUTBOX_MESSAGE_MAX];
            outbox_kit_uri_redact(outbox_mongo_host, params->uri, d->message, safe, sizeof safe);
            snprintf(d->message, sizeof d->message, "%s", safe);
        }
        mongo_close(h);
        return rc;
    }
    *handle = h;
    return OUTBOX_OK;
}

static uint32_t mongo_capabilities(void *handle)
{
    const mongo_handle_t *h = handle;
    uint32_t caps = MONGO_BASE_CAPS;
    /* The test switch put claims on guarded updates that this server does
     * not make atomic (mongo_conn.h): one claimer at a time. */
    if (h && h->racy_updates && !h->racy_claims)
        caps &= ~(uint32_t)OUTBOX_STORE_CAP_CONCURRENT;
    if (h && h->server_tx)
        caps |= OUTBOX_STORE_CAP_TRANSACTIONS | OUTBOX_STORE_CAP_NATIVE_TX;
    if (h && h->has_hlc)
        caps |= OUTBOX_STORE_CAP_HLC;
    if (h && h->has_ckpt)
        caps |= OUTBOX_STORE_CAP_CHECKPOINT;
    if (h && h->has_inbox)
        caps |= OUTBOX_STORE_CAP_INBOX;
    return caps;
}

/* Schema apply may add the hlc index, the checkpoint or the inbox
 * collection, schema drop take them away: the handle looks again. */
static int mongo_schema_apply(void *handle, const outbox_schema_opts_t *opts, outbox_diag_t *d)
{
    int rc = outbox_mongo_schema_apply(handle, opts, d);
    return rc == OUTBOX_OK ? outbox_mongo_detect(handle, 0, d) : rc;
}

static int mongo_schema_drop(void *handle, const outbox_schema_opts_t *opts, outbox_diag_t *d)
{
    int rc = outbox_mongo_schema_drop(handle, opts, d);
    return rc == OUTBOX_OK ? outbox_mongo_detect(handle, 0, d) : rc;
}

/* ----------------------------------------------------------------- stage */

/* The rows, then the checkpoint mark in the same transaction when the host
 * asks for one (it does so only inside a transaction). */
static int mongo_stage(void *handle, const outbox_stage_ctx_t *ctx, const outbox_row_t *rows,
                       size_t n, size_t *staged, outbox_diag_t *d)
{
    int rc = outbox_mongo_stage(handle, ctx, rows, n, staged, d);
    const char *key = ctx ? ctx->checkpoint_node_key : NULL;
    if (rc == OUTBOX_OK && key)
        rc = outbox_mongo_checkpoint_advance(handle, ctx, key, ctx->max_hlc, d);
    if (rc != OUTBOX_OK && staged)
        *staged = 0;
    return rc;
}

/* --------------------------------------------------------- transactions */

static int start_tx(mongoc_client_t *client, mongoc_client_session_t **out, outbox_diag_t *d,
                    const char *what)
{
    bson_error_t e;
    mongoc_client_session_t *s = mongoc_client_start_session(client, NULL, &e);
    if (!s)
        return outbox_mongo_error(d, &e, NULL, what);
    if (!mongoc_client_session_start_transaction(s, NULL, &e)) {
        mongoc_client_session_destroy(s);
        return outbox_mongo_error(d, &e, NULL, what);
    }
    *out = s;
    return OUTBOX_OK;
}

static int mongo_begin(void *handle, outbox_diag_t *d)
{
    mongo_handle_t *h = handle;
    if (!h->server_tx)
        return outbox_mongo_no_tx(h, "begin", d);
    if (h->session)
        return outbox_mongo_fail(d, OUTBOX_EINVAL, "a transaction is already open on this handle");
    h->tx_error = OUTBOX_OK;
    return start_tx(h->client, &h->session, d, "begin");
}

static int mongo_commit(void *handle, outbox_diag_t *d)
{
    mongo_handle_t *h = handle;
    if (!h->session)
        return outbox_mongo_fail(d, OUTBOX_EINVAL, "commit: no transaction is open");
    int rc = OUTBOX_OK;
    if (h->tx_error != OUTBOX_OK) {
        mongoc_client_session_abort_transaction(h->session, NULL);
        rc = outbox_mongo_fail(d, h->tx_error,
                               "commit: a write in the transaction failed, so it was rolled back");
    } else {
        bson_t reply;
        bson_error_t e;
        if (!mongoc_client_session_commit_transaction(h->session, &reply, &e))
            rc = outbox_mongo_error(d, &e, &reply, "commit");
        bson_destroy(&reply);
    }
    mongoc_client_session_destroy(h->session);
    h->session = NULL;
    return rc;
}

static int mongo_rollback(void *handle, outbox_diag_t *d)
{
    (void)d;
    mongo_handle_t *h = handle;
    if (!h->session)
        return OUTBOX_OK;
    mongoc_client_session_abort_transaction(h->session, NULL);
    mongoc_client_session_destroy(h->session);
    h->session = NULL;
    return OUTBOX_OK;
}

/* A session of a client of its own with a transaction started: what an
 * application would hand to outbox_store_stage() as native_tx. */
static int mongo_native_begin(void *handle, void **native_tx, outbox_diag_t *d)
{
    mongo_handle_t *h = handle;
    if (!native_tx)
        return outbox_mongo_fail(d, OUTBOX_EINVAL, "native_begin needs an output");
    *native_tx = NULL;
    if (!h->server_tx)
        return outbox_mongo_no_tx(h, "native begin", d);
    mongoc_client_t *client = NULL;
    int rc = outbox_mongo_client(h->uri, &client, d);
    mongoc_client_session_t *s = NULL;
    if (rc == OUTBOX_OK)
        rc = start_tx(client, &s, d, "native begin");
    if (rc != OUTBOX_OK) {
        if (client)
            mongoc_client_destroy(client);
        return rc;
    }
    *native_tx = s;
    return OUTBOX_OK;
}

static int mongo_native_end(void *handle, void *native_tx, int commit, outbox_diag_t *d)
{
    (void)handle;
    mongoc_client_session_t *s = native_tx;
    if (!s)
        return outbox_mongo_fail(d, OUTBOX_EINVAL, "native_end needs the session native_begin gave");
    mongoc_client_t *client = mongoc_client_session_get_client(s);
    int rc = OUTBOX_OK;
    bson_error_t e;
    if (commit) {
        bson_t reply;
        if (!mongoc_client_session_commit_transaction(s, &reply, &e))
            rc = outbox_mongo_error(d, &e, &reply, "native commit");
        bson_destroy(&reply);
    } else {
        mongoc_client_session_abort_transaction(s, NULL);
    }
    mongoc_client_session_destroy(s);
    mongoc_client_destroy(client);
    return rc;
}

/* ----------------------------------------------------------- descriptor */

static int mongo_init(const outbox_host_t *host, outbox_diag_t *d)
{
    /* ABI 1.1's verror is the last entry the driver uses. */
    if (!host || !OUTBOX_STRUCT_HAS(outbox_host_t, host, verror) || !host->alloc ||
        !host->realloc || !host->free || !host->error || !host->log || !host->now_us ||
        !host->monotonic_us || !host->verror) {
        if (d) {
            d->code = OUTBOX_EABI;
            snprintf(d->message, sizeof d->message,
                     "mongo driver: the host services table is missing or incomplete");
        }
        return OUTBOX_EABI;
    }
    outbox_mongo_host = host;
    /* Before mongoc_init, so that nothing it says reaches stderr. */
    outbox_mongo_log_install();
    mongoc_init();
    return OUTBOX_OK;
}

static const outbox_store_vtable_t mongo_vtable = {
    .struct_size = sizeof(outbox_store_vtable_t),
    .open = mongo_open,
    .close = mongo_close,
    .capabilities = mongo_capabilities,
    .schema_ddl = outbox_mongo_schema_ddl,
    .schema_apply = mongo_schema_apply,
    .schema_check = outbox_mongo_schema_check,
    .begin = mongo_begin,
    .commit = mongo_commit,
    .rollback = mongo_rollback,
    .stage = mongo_stage,
    .claim = outbox_mongo_claim,
    .settle = outbox_mongo_settle,
    .checkpoint_advance = outbox_mongo_checkpoint_advance,
    .checkpoint_recover = outbox_mongo_checkpoint_recover,
    .wait = NULL, /* change streams are not there on FerretDB: the relay polls */
    .stats = outbox_mongo_stats,
    .replay = outbox_mongo_replay,
    .purge = outbox_mongo_purge,
    .schema_drop = mongo_schema_drop,
    .native_begin = mongo_native_begin,
    .native_end = mongo_native_end,
    .routes = outbox_mongo_routes,
    .dead_list = outbox_mongo_dead_list,
    .renew = outbox_mongo_renew,
    .inbox_accept = outbox_mongo_inbox_accept,
    .inbox_purge = outbox_mongo_inbox_purge,
    .inbox_stats = outbox_mongo_inbox_stats,
};

static const char *const mongo_schemes[] = {"mongodb", "mongodb+srv", NULL};

static const outbox_driver_t mongo_descriptor = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = OUTBOX_ABI_MAJOR,
    .abi_minor = 5, /* the lowest it keeps the promises of: a RELEASE with available_at is 1.5 */
    .kind = OUTBOX_DRIVER_STORE,
    .name = "mongo",
    .version = OUTBOX_VERSION,
    .schemes = mongo_schemes,
    .capabilities = MONGO_BASE_CAPS,
    .init = mongo_init,
    .store = &mongo_vtable,
    .sink = NULL,
};

OUTBOX_DRIVER_ENTRY(mongo_descriptor)
