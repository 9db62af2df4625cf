/* MongoDB store driver, ground floor (mongo_err.c, mongo_json.c): what every
 * source file of this folder shares. Private to this folder.
 *
 * The driver's files call only downward:
 *   mongo.c                                  descriptor, vtable, open/close, transactions
 *   ceiling.c                                outbox-bench's ceiling (beside mongo.c, bench only)
 *   mongo_stage.c mongo_claim.c mongo_settle.c
 *   mongo_ckpt.c mongo_schema.c mongo_admin.c
 *   mongo_inbox.c                            the store operations (mongo_ops.h)
 *   mongo_conn.c                             the handle, URI, client, commands (mongo_conn.h)
 *   mongo_err.c  mongo_json.c                host table, errors, payload JSON<->BSON (this header)
 * A file uses the headers of the floors below it and never one of its own
 * floor's neighbours.
 *
 * Every cross-file function is hidden so that the module exports only
 * outbox_driver_entry() and a static test build links no stray symbols.
 */
#ifndef OUTBOX_STORE_MONGO_INT_H
#define OUTBOX_STORE_MONGO_INT_H

#include <mongoc/mongoc.h>

#include "outbox/driver.h"
#include "outbox/kit.h"

#define MONGO_HIDDEN __attribute__((visibility("hidden")))

/* Driver name, as used in log lines. */
#define MONGO_NAME "mongo"

/* The most statements (documents of an insert, updates of a bulk write) one
 * command carries. FerretDB hangs on an update or bulk command of 100 or
 * more statements; everything the driver sends stays well below. */
#define MONGO_STMT_MAX 50
/* The most ids one `_id: {$in: [...]}` list carries (one statement). */
#define MONGO_IN_MAX 1000

/* The host table given to init(); the only mutable static of the driver. */
extern MONGO_HIDDEN const outbox_host_t *outbox_mongo_host;

/* --------------------------------------------------------------- errors */

MONGO_HIDDEN int outbox_mongo_fail(outbox_diag_t *d, int code, const char *fmt, ...)
    OUTBOX_PRINTF(3, 4);
MONGO_HIDDEN int outbox_mongo_nomem(outbox_diag_t *d);
/* The OUTBOX_E* code of a libmongoc error (and the server's reply, which may
 * carry error labels; NULL when there is none). */
MONGO_HIDDEN int outbox_mongo_code(const bson_error_t *e, const bson_t *reply);
/* Reports "<what>: <libmongoc or server message>" with the mapped code. */
MONGO_HIDDEN int outbox_mongo_error(outbox_diag_t *d, const bson_error_t *e, const bson_t *reply,
                                    const char *what);
/* libmongoc's log lines go to the host's log (never to stderr); during a URI
 * parse on this thread, warnings about unknown options are kept instead, so
 * open can refuse a misspelt option. */
MONGO_HIDDEN void outbox_mongo_log_install(void);
MONGO_HIDDEN void outbox_mongo_uri_warnings_begin(char *buf, size_t size);
MONGO_HIDDEN void outbox_mongo_uri_warnings_end(void);

/* ------------------------------------------------------------ relations */

/* Splits and validates "collection" or "database.collection", saying what is
 * wrong with a name it refuses. */
MONGO_HIDDEN int outbox_mongo_relname(const char *name, outbox_kit_relname_t *out, outbox_diag_t *d);
/* The checkpoint collection: name, or hlc_checkpoint beside base when NULL. */
MONGO_HIDDEN int outbox_mongo_relname_ckpt(const char *name, const outbox_kit_relname_t *base,
                                           outbox_kit_relname_t *out, outbox_diag_t *d);
/* The inbox collection: name, or outbox_inbox beside base when NULL. */
MONGO_HIDDEN int outbox_mongo_relname_inbox(const char *name, const outbox_kit_relname_t *base,
                                            outbox_kit_relname_t *out, outbox_diag_t *d);

/* ------------------------------------------------------------- payloads */

/* Appends the JSON text s[0..n) to doc as field key: an object becomes an
 * embedded document; any other JSON value (array, string, number, true,
 * false, null) is stored as that BSON value itself. 0 on success; -1 when
 * libbson refuses the text (why says so). */
MONGO_HIDDEN int outbox_mongo_json_append(bson_t *doc, const char *key, const char *s, size_t n,
                                          char *why, size_t why_size);
/* The value at it as relaxed extended JSON text, appended to b. */
MONGO_HIDDEN void outbox_mongo_json_value(const bson_iter_t *it, outbox_kit_buf_t *b);

/* ---------------------------------------------------------- BSON values */

/* Microseconds since the epoch to a BSON date (milliseconds, floored) and
 * back. */
MONGO_HIDDEN int64_t outbox_mongo_ms(int64_t us);
/* A fresh random fence token (24 hex digits of an ObjectId) into out. */
MONGO_HIDDEN void outbox_mongo_token(char out[40]);

#endif
