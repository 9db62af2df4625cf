/* MongoDB store driver, second floor (mongo_conn.c): the handle, its URI and
 * client, the server's abilities, and how commands join a session. Private
 * to this folder; see mongo_int.h for the floors. */
#ifndef OUTBOX_STORE_MONGO_CONN_H
#define OUTBOX_STORE_MONGO_CONN_H

#include "mongo_int.h"

typedef struct mongo_handle {
    mongoc_uri_t *uri;
    mongoc_client_t *client;
    char db[OUTBOX_KIT_IDENT_MAX + 1];   /* the URI's database: collections without one live there */
    outbox_kit_relname_t rel;            /* as the user named it ("db.coll" or "coll") */
    outbox_kit_relname_t ckpt;
    outbox_kit_relname_t inbox;
    char shown[160];                 /* rel for messages */
    char shown_ckpt[160];
    char shown_inbox[160];
    mongoc_collection_t *coll;
    mongoc_collection_t *ckpt_coll;
    mongoc_collection_t *inbox_coll;
    int server_tx;       /* the server runs multi-document transactions (replica set, mongos) */
    /* The server's updates are not atomic read-check-writes (FerretDB reads
     * the matching documents, then writes them back whole): claims then
     * take a lock of their own (mongo_lock.c), checkpoint advances insert
     * marks (mongo_ckpt.c). */
    int racy_updates;
    /* Claims and settles take turns and go row by row (mongo_claim.c,
     * mongo_settle.c): racy_updates, unless the test switch (see
     * outbox_mongo_connect) forces the guarded updates of a MongoDB
     * server. Checkpoint advances follow racy_updates alone. */
    int racy_claims;
    outbox_kit_relname_t locks;          /* <relation>_locks, beside the outbox collection */
    mongoc_collection_t *lock_coll;
    unsigned long ckpt_writes;       /* checkpoint marks written (racy servers' cleanup) */
    int has_hlc;         /* the hlc claim index exists */
    int has_ckpt;        /* the checkpoint collection exists */
    int has_inbox;       /* the inbox collection exists */
    /* The server refused the inbox stats' $group ($min and $max are not
     * in FerretDB 1.24): count client-side from then on (mongo_inbox.c). */
    int inbox_no_group;
    int read_only;       /* OUTBOX_OPEN_READ_ONLY */
    mongoc_client_session_t *session; /* the handle's own transaction, while one is open */
    int tx_error;        /* code of the first failure inside it */
    /* The last claim's rows; their strings live in arena. */
    outbox_row_t *rows;
    size_t n_rows;
    size_t cap_rows;
    outbox_kit_buf_t arena;
    /* Where updates are not atomic: the route's unfinished rows as the
     * last claim read them (mongo_claim.c). */
    struct mongo_claim_cache *claim_cache;
} mongo_handle_t;

/* ---------------------------------------------------------- connecting */

/* libmongoc's URI for a mongodb: or mongodb+srv: URI, with the driver's
 * defaults for what the user left out (a socket timeout). Refuses options
 * libmongoc does not know, and a URI without a database. */
MONGO_HIDDEN int outbox_mongo_uri(const outbox_uri_t *uri, mongoc_uri_t **out, char *db,
                                  size_t db_size, outbox_diag_t *d);
/* A client for uri (error API 2, the driver's appname). */
MONGO_HIDDEN int outbox_mongo_client(const mongoc_uri_t *uri, mongoc_client_t **out,
                                     outbox_diag_t *d);
/* Connects the handle and asks the server what it is (hello): whether it
 * runs transactions; and (buildInfo) whether its updates are atomic.
 *
 * OUTBOX_MONGO_TEST_SERVER_PATH=1 in the environment at open makes claims
 * and settles take the guarded-update path of a MongoDB server even where
 * updates are not atomic (racy_updates set, racy_claims clear), so that the
 * project's tests run that path on FerretDB. It is for those tests only:
 * such a handle cannot keep concurrent claimers apart, and says so by
 * leaving OUTBOX_STORE_CAP_CONCURRENT out of its capabilities. */
MONGO_HIDDEN int outbox_mongo_connect(mongo_handle_t *h, outbox_diag_t *d);
/* The database a relation lives in: its own part, else the URI's. */
MONGO_HIDDEN const char *outbox_mongo_db_of(const mongo_handle_t *h, const outbox_kit_relname_t *r);
/* A collection handle of client for relation r (NULL when out of memory). */
MONGO_HIDDEN mongoc_collection_t *outbox_mongo_coll(const mongo_handle_t *h,
                                                   mongoc_client_t *client,
                                                   const outbox_kit_relname_t *r);
/* 1 when the collection exists, 0 when not; negative on error. */
MONGO_HIDDEN int outbox_mongo_coll_exists(mongo_handle_t *h, const outbox_kit_relname_t *r,
                                          outbox_diag_t *d);

/* --------------------------------------------------------------- locks */

/* A lock that only one handle (of any process) holds at a time, made of
 * inserts on a unique _id, the one write FerretDB makes atomic. */
typedef struct mongo_lock {
    char id[160]; /* the turn document this holder inserted */
    int held;
} mongo_lock_t;

/* Takes the lock named name, waiting up to wait_ms; a holder that did not
 * let go within ttl_ms is taken to have died. OUTBOX_ETRANSIENT when the
 * wait ran out. */
MONGO_HIDDEN int outbox_mongo_lock(mongo_handle_t *h, const char *name, int64_t ttl_ms,
                                   int wait_ms, mongo_lock_t *l, outbox_diag_t *d);
/* Lets go (nothing when not held); never fails: a turn not marked done
 * expires after its ttl. */
MONGO_HIDDEN void outbox_mongo_unlock(mongo_handle_t *h, mongo_lock_t *l);

/* ----------------------------------------------------------- sessions */

/* Where a write of stage or checkpoint advance goes: the application's
 * session (native_tx), the handle's own open transaction, or neither. On
 * success *session is the session to append to the command's options (or
 * NULL) and *client the client whose collections it may use. */
MONGO_HIDDEN int outbox_mongo_write_target(mongo_handle_t *h, const outbox_stage_ctx_t *ctx,
                                           mongoc_client_session_t **session,
                                           mongoc_client_t **client, const char *op,
                                           outbox_diag_t *d);
/* Appends the session (when not NULL) to opts. */
MONGO_HIDDEN int outbox_mongo_opts_session(mongoc_client_session_t *session, bson_t *opts,
                                           outbox_diag_t *d);
/* OUTBOX_EINVAL when the handle's own transaction is open: operations that
 * are not part of it cannot run while it is. */
MONGO_HIDDEN int outbox_mongo_no_open_tx(mongo_handle_t *h, const char *op, outbox_diag_t *d);
/* Inside the handle's own transaction, remembers the first failure so that
 * commit can report it. Returns code. */
MONGO_HIDDEN int outbox_mongo_tx_note(mongo_handle_t *h, int code);
/* OUTBOX_ENOTSUP, saying why: the server runs no transactions. */
MONGO_HIDDEN int outbox_mongo_no_tx(const mongo_handle_t *h, const char *op, outbox_diag_t *d);

/* --------------------------------------------------------------- reads */

/* Runs find on coll and calls row(doc, ctx) for each document, stopping at
 * the first nonzero return (which is returned). */
typedef int (*mongo_doc_fn)(const bson_t *doc, void *ctx, outbox_diag_t *d);
MONGO_HIDDEN int outbox_mongo_find(mongoc_collection_t *coll, const bson_t *filter,
                                   const bson_t *opts, mongo_doc_fn row, void *ctx,
                                   outbox_diag_t *d, const char *what);
/* A read-check-write of one document where updates are not atomic: a
 * findAndModify on {_id: id} alone applies update and returns the document
 * as it was; keep(old, ctx, &stands, d) says whether the write stands, and
 * when it does not the document is written back as it was. A document that
 * is gone calls nothing. what names the operation in messages. */
typedef int (*mongo_keep_fn)(const bson_t *old, void *ctx, int *stands, outbox_diag_t *d);
MONGO_HIDDEN int outbox_mongo_swap_by_id(mongoc_collection_t *coll, const char *id,
                                         const bson_t *update, mongo_keep_fn keep, void *ctx,
                                         outbox_diag_t *d, const char *what);
/* The string at key in doc, or NULL. */
MONGO_HIDDEN const char *outbox_mongo_str(const bson_t *doc, const char *key);
/* Appends an array of the strings ids[0..n) to doc as key. */
MONGO_HIDDEN int outbox_mongo_append_ids(bson_t *doc, const char *key, const char *const *ids,
                                         size_t n);

#endif
