/* MongoDB store driver, second floor: the URI, the client, what the server
 * can do, collection handles, and which session a write joins.
 *
 * One handle is one mongoc_client_t (single-threaded, as the host uses a
 * handle from one thread at a time), so handles never share a socket.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mongo_conn.h"

/* What a command waits for an answer when the URI does not say: a server
 * that never answers (FerretDB stuck on a large command) turns into a
 * transient error instead of a relay hung for good. */
#define MONGO_SOCKET_TIMEOUT_MS 30000

/* ---------------------------------------------------------- connecting */

int outbox_mongo_uri(const outbox_uri_t *uri, mongoc_uri_t **out, char *db, size_t db_size,
                     outbox_diag_t *d)
{
    *out = NULL;
    if (!uri || !uri->raw)
        return outbox_mongo_fail(d, OUTBOX_EINVAL, "no URI given");
    char shown[512];
    outbox_kit_uri_show(outbox_mongo_host, uri, shown, sizeof shown);
    char warning[256];
    bson_error_t e;
    memset(&e, 0, sizeof e);
    /* libmongoc only warns about an option it does not know, and goes on
     * without it; a misspelt timeout must not pass unnoticed. */
    outbox_mongo_uri_warnings_begin(warning, sizeof warning);
    mongoc_uri_t *u = mongoc_uri_new_with_error(uri->raw, &e);
    outbox_mongo_uri_warnings_end();
    if (!u) {
        char why[OUTBOX_MESSAGE_MAX];
        outbox_kit_uri_redact(outbox_mongo_host, uri, e.message, why, sizeof why);
        return outbox_mongo_fail(d, OUTBOX_EINVAL, "invalid MongoDB URI %s: %s", shown, why);
    }
    if (warning[0]) {
        mongoc_uri_destroy(u);
        char why[256];
        outbox_kit_uri_redact(outbox_mongo_host, uri, warning, why, sizeof why);
        return outbox_mongo_fail(d, OUTBOX_EINVAL, "MongoDB URI %s: %s", shown, why);
    }
    const char *name = mongoc_uri_get_database(u);
    if (!name || !name[0]) {
        mongoc_uri_destroy(u);
        return outbox_mongo_fail(d, OUTBOX_EINVAL,
                                 "MongoDB URI %s names no database (mongodb://HOST/DATABASE)",
                                 shown);
    }
    if (strlen(name) >= db_size || strpbrk(name, "/\\. \"$") != NULL) {
        mongoc_uri_destroy(u);
        return outbox_mongo_fail(d, OUTBOX_EINVAL, "MongoDB URI %s: invalid database name", shown);
    }
    snprintf(db, db_size, "%s", name);
    if (!mongoc_uri_has_option(u, MONGOC_URI_SOCKETTIMEOUTMS))
        mongoc_uri_set_option_as_int32(u, MONGOC_URI_SOCKETTIMEOUTMS, MONGO_SOCKET_TIMEOUT_MS);
    if (!mongoc_uri_has_option(u, MONGOC_URI_APPNAME))
        mongoc_uri_set_appname(u, "liboutbox");
    *out = u;
    return OUTBOX_OK;
}

int outbox_mongo_client(const mongoc_uri_t *uri, mongoc_client_t **out, outbox_diag_t *d)
{
    bson_error_t e;
    memset(&e, 0, sizeof e);
    *out = mongoc_client_new_from_uri_with_error(uri, &e);
    if (!*out)
        return outbox_mongo_fail(d, OUTBOX_EINVAL, "MongoDB client: %s", e.message);
    mongoc_client_set_error_api(*out, MONGOC_ERROR_API_VERSION_2);
    return OUTBOX_OK;
}

/* Transactions need a replica set member or a mongos: hello names the set
 * (setName) or says isdbgrid. A standalone server and FerretDB say neither. */
static int hello(mongo_handle_t *h, outbox_diag_t *d)
{
    bson_t cmd = BSON_INITIALIZER, reply;
    BSON_APPEND_INT32(&cmd, "hello", 1);
    bson_error_t e;
    int ok = mongoc_client_command_simple(h->client, "admin", &cmd, NULL, &reply, &e);
    bson_destroy(&cmd);
    if (!ok && e.domain == MONGOC_ERROR_SERVER && e.code == 59) {
        /* Servers before 4.4 (hello's predecessor). */
        bson_destroy(&reply);
        bson_init(&cmd);
        BSON_APPEND_INT32(&cmd, "isMaster", 1);
        ok = mongoc_client_command_simple(h->client, "admin", &cmd, NULL, &reply, &e);
        bson_destroy(&cmd);
    }
    if (!ok) {
        /* A TLS server that wants a client certificate closes the session
         * after the handshake (TLS 1.3), which libmongoc reports only as a
         * missing reply: say what it likely means. */
        const mongoc_uri_t *uri = mongoc_client_get_uri(h->client);
        int tls_no_cert = mongoc_uri_get_tls(uri) &&
                          mongoc_uri_get_option_as_utf8(uri, MONGOC_URI_TLSCERTIFICATEKEYFILE, NULL) == NULL &&
                          (strstr(e.message, "Failed to receive length header") != NULL ||
                           strstr(e.message, "connection closed") != NULL);
        int rc = outbox_mongo_error(d, &e, &reply,
                                    tls_no_cert ? "connecting to MongoDB (the server closed the TLS session: one "
                                                  "that requires a client certificate, tlsCertificateKeyFile, does "
                                                  "this)"
                                                : "connecting to MongoDB");
        bson_destroy(&reply);
        return rc;
    }
    bson_iter_t it;
    h->server_tx = 0;
    if (bson_iter_init_find(&it, &reply, "setName") && BSON_ITER_HOLDS_UTF8(&it))
        h->server_tx = 1;
    if (bson_iter_init_find(&it, &reply, "msg") && BSON_ITER_HOLDS_UTF8(&it) &&
        strcmp(bson_iter_utf8(&it, NULL), "isdbgrid") == 0)
        h->server_tx = 1;
    bson_destroy(&reply);
    return OUTBOX_OK;
}

/* FerretDB names itself in buildInfo; its updates are a query followed by
 * writing each document back whole, so a guarded update decides nothing
 * between two concurrent writers. */
static int build_info(mongo_handle_t *h, outbox_diag_t *d)
{
    bson_t cmd = BSON_INITIALIZER, reply;
    BSON_APPEND_INT32(&cmd, "buildInfo", 1);
    bson_error_t e;
    int ok = mongoc_client_command_simple(h->client, "admin", &cmd, NULL, &reply, &e);
    bson_destroy(&cmd);
    int rc = OUTBOX_OK;
    if (!ok) {
        rc = outbox_mongo_error(d, &e, &reply, "connecting to MongoDB (buildInfo)");
    } else {
        bson_iter_t it;
        h->racy_updates = bson_iter_init_find(&it, &reply, "ferretdbVersion");
    }
    bson_destroy(&reply);
    return rc;
}

/* The test switch (mongo_conn.h): only the exact value 1 turns it on. */
#define MONGO_TEST_SERVER_PATH "OUTBOX_MONGO_TEST_SERVER_PATH"

static void claim_path(mongo_handle_t *h)
{
    const char *v = getenv(MONGO_TEST_SERVER_PATH);
    int forced = v != NULL && strcmp(v, "1") == 0;
    h->racy_claims = h->racy_updates && !forced;
    if (forced && h->racy_updates)
        outbox_mongo_host->log(OUTBOX_LOG_DEBUG, MONGO_NAME,
                               "%s=1, a test switch: claims and settles take the guarded-update "
                               "path of a MongoDB server, which this server does not make atomic "
                               "(one claimer at a time: no OUTBOX_STORE_CAP_CONCURRENT)",
                               MONGO_TEST_SERVER_PATH);
    else if (forced)
        outbox_mongo_host->log(OUTBOX_LOG_DEBUG, MONGO_NAME,
                               "%s=1, a test switch: claims and settles take the guarded-update "
                               "path, as they do on this server anyway",
                               MONGO_TEST_SERVER_PATH);
}

int outbox_mongo_connect(mongo_handle_t *h, outbox_diag_t *d)
{
    int rc = outbox_mongo_client(h->uri, &h->client, d);
    if (rc == OUTBOX_OK)
        rc = hello(h, d);
    /* A refused login at open is a mistake in the URI, not a moment to
     * wait out: fail at once. */
    if (rc == OUTBOX_ETRANSIENT && strstr(d->message, "Authentication failed") != NULL)
        rc = d->code = OUTBOX_EPERMANENT;
    if (rc == OUTBOX_OK)
        rc = build_info(h, d);
    if (rc == OUTBOX_OK)
        claim_path(h);
    if (rc == OUTBOX_OK) {
        memcpy(h->locks.schema, h->rel.schema, sizeof h->locks.schema);
        snprintf(h->locks.table, sizeof h->locks.table, "%.57s_locks", h->rel.table);
        h->coll = outbox_mongo_coll(h, h->client, &h->rel);
        h->ckpt_coll = outbox_mongo_coll(h, h->client, &h->ckpt);
        h->lock_coll = outbox_mongo_coll(h, h->client, &h->locks);
        h->inbox_coll = outbox_mongo_coll(h, h->client, &h->inbox);
        if (!h->coll || !h->ckpt_coll || !h->lock_coll || !h->inbox_coll)
            rc = outbox_mongo_nomem(d);
    }
    return rc;
}

const char *outbox_mongo_db_of(const mongo_handle_t *h, const outbox_kit_relname_t *r)
{
    return r->schema[0] ? r->schema : h->db;
}

mongoc_collection_t *outbox_mongo_coll(const mongo_handle_t *h, mongoc_client_t *client,
                                       const outbox_kit_relname_t *r)
{
    return mongoc_client_get_collection(client, outbox_mongo_db_of(h, r), r->table);
}

int outbox_mongo_coll_exists(mongo_handle_t *h, const outbox_kit_relname_t *r, outbox_diag_t *d)
{
    mongoc_database_t *db = mongoc_client_get_database(h->client, outbox_mongo_db_of(h, r));
    if (!db)
        return outbox_mongo_nomem(d);
    bson_t opts = BSON_INITIALIZER, filter;
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "filter", &filter);
    BSON_APPEND_UTF8(&filter, "name", r->table);
    bson_append_document_end(&opts, &filter);
    mongoc_cursor_t *c = mongoc_database_find_collections_with_opts(db, &opts);
    bson_destroy(&opts);
    const bson_t *doc;
    int found = 0;
    while (mongoc_cursor_next(c, &doc))
        found = 1;
    bson_error_t e;
    const bson_t *reply = NULL;
    int rc = found;
    if (mongoc_cursor_error_document(c, &e, &reply))
        rc = outbox_mongo_error(d, &e, reply, "listing collections");
    mongoc_cursor_destroy(c);
    mongoc_database_destroy(db);
    return rc;
}

/* ----------------------------------------------------------- sessions */

int outbox_mongo_no_tx(const mongo_handle_t *h, const char *op, outbox_diag_t *d)
{
    (void)h;
    return outbox_mongo_fail(d, OUTBOX_ENOTSUP,
                             "%s: this MongoDB server runs no multi-document transactions (they "
                             "need a replica set or a sharded cluster; FerretDB and a standalone "
                             "mongod have none)",
                             op);
}

int outbox_mongo_no_open_tx(mongo_handle_t *h, const char *op, outbox_diag_t *d)
{
    if (h->session)
        return outbox_mongo_fail(d, OUTBOX_EINVAL, "%s cannot run inside the handle's open transaction",
                                 op);
    return OUTBOX_OK;
}

int outbox_mongo_tx_note(mongo_handle_t *h, int code)
{
    if (h->session && code != OUTBOX_OK && h->tx_error == OUTBOX_OK)
        h->tx_error = code;
    return code;
}

int outbox_mongo_write_target(mongo_handle_t *h, const outbox_stage_ctx_t *ctx,
                              mongoc_client_session_t **session, mongoc_client_t **client,
                              const char *op, outbox_diag_t *d)
{
    *session = NULL;
    *client = h->client;
    if (ctx && ctx->native_tx) {
        mongoc_client_session_t *s = ctx->native_tx;
        if (!h->server_tx)
            return outbox_mongo_no_tx(h, op, d);
        if (!mongoc_client_session_in_transaction(s))
            return outbox_mongo_fail(d, OUTBOX_EINVAL,
                                     "%s: the application's mongoc_client_session_t is not in a "
                                     "transaction (call mongoc_client_session_start_transaction)",
                                     op);
        *session = s;
        *client = mongoc_client_session_get_client(s);
        return OUTBOX_OK;
    }
    if (ctx && ctx->in_own_tx) {
        if (!h->session)
            return outbox_mongo_fail(d, OUTBOX_EINVAL, "%s: no transaction is open on the handle", op);
        *session = h->session;
        return OUTBOX_OK;
    }
    return outbox_mongo_no_open_tx(h, op, d);
}

int outbox_mongo_opts_session(mongoc_client_session_t *session, bson_t *opts, outbox_diag_t *d)
{
    if (!session)
        return OUTBOX_OK;
    bson_error_t e;
    if (!mongoc_client_session_append(session, opts, &e))
        return outbox_mongo_error(d, &e, NULL, "joining the session");
    return OUTBOX_OK;
}

/* --------------------------------------------------------------- reads */

int outbox_mongo_swap_by_id(mongoc_collection_t *coll, const char *id, const bson_t *update,
                            mongo_keep_fn keep, void *ctx, outbox_diag_t *d, const char *what)
{
    bson_t q = BSON_INITIALIZER, reply;
    BSON_APPEND_UTF8(&q, "_id", id);
    mongoc_find_and_modify_opts_t *fam = mongoc_find_and_modify_opts_new();
    if (!fam) {
        bson_destroy(&q);
        return outbox_mongo_nomem(d);
    }
    mongoc_find_and_modify_opts_set_update(fam, update);
    bson_error_t e;
    int rc = OUTBOX_OK;
    if (!mongoc_collection_find_and_modify_with_opts(coll, &q, fam, &reply, &e)) {
        rc = outbox_mongo_error(d, &e, &reply, what);
    } else {
        bson_iter_t it;
        bson_t old;
        const uint8_t *data = NULL;
        uint32_t len = 0;
        if (bson_iter_init_find(&it, &reply, "value") && BSON_ITER_HOLDS_DOCUMENT(&it))
            bson_iter_document(&it, &len, &data);
        int stands = 1;
        if (data && bson_init_static(&old, data, len))
            rc = keep(&old, ctx, &stands, d);
        if (data && rc == OUTBOX_OK && !stands) {
            bson_t rreply;
            if (!mongoc_collection_replace_one(coll, &q, &old, NULL, &rreply, &e))
                rc = outbox_mongo_error(d, &e, &rreply, what);
            bson_destroy(&rreply);
        }
    }
    bson_destroy(&reply);
    bson_destroy(&q);
    mongoc_find_and_modify_opts_destroy(fam);
    return rc;
}

int outbox_mongo_find(mongoc_collection_t *coll, const bson_t *filter, const bson_t *opts,
                      mongo_doc_fn row, void *ctx, outbox_diag_t *d, const char *what)
{
    mongoc_cursor_t *c = mongoc_collection_find_with_opts(coll, filter, opts, NULL);
    if (!c)
        return outbox_mongo_nomem(d);
    const bson_t *doc;
    int rc = OUTBOX_OK;
    while (rc == OUTBOX_OK && mongoc_cursor_next(c, &doc))
        rc = row(doc, ctx, d);
    bson_error_t e;
    const bson_t *reply = NULL;
    if (rc == OUTBOX_OK && mongoc_cursor_error_document(c, &e, &reply))
        rc = outbox_mongo_error(d, &e, reply, what);
    mongoc_cursor_destroy(c);
    return rc;
}

const char *outbox_mongo_str(const bson_t *doc, const char *key)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_UTF8(&it))
        return bson_iter_utf8(&it, NULL);
    return NULL;
}

int outbox_mongo_append_ids(bson_t *doc, const char *key, const char *const *ids, size_t n)
{
    bson_t arr;
    if (!bson_append_array_begin(doc, key, -1, &arr))
        return 0;
    char k[16];
    for (size_t i = 0; i < n; i++) {
        const char *kp;
        bson_uint32_to_string((uint32_t)i, &kp, k, sizeof k);
        if (!bson_append_utf8(&arr, kp, -1, ids[i], -1))
            return 0;
    }
    return bson_append_array_end(doc, &arr);
}
