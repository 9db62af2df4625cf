/* PostgreSQL store driver, ground floor (pg_wire.c): what every source file
 * of this folder shares. Private to this folder.
 *
 * The driver's files call only downward:
 *   ceiling.c                         the benchmark ceiling (outbox/ceiling.h),
 *                                     built into outbox-bench only, never the module
 *   pg.c                              descriptor, vtable, open/close, transactions
 *   pg_rows.c  pg_schema.c  pg_inbox.c  pg_admin.c
 *                                     the store operations (pg_ops.h)
 *   pg_conn.c                         the handle, its connection, statements (pg_conn.h)
 *   pg_wire.c                         host table, errors, binary format (this header)
 * A file uses the headers of the floors below it and never one of its own
 * floor's neighbours.
 *
 * Every cross-file function is hidden so that the module exports only
 * outbox_driver_entry() and a static test build links no stray symbols.
 */
#ifndef OUTBOX_STORE_PG_INT_H
#define OUTBOX_STORE_PG_INT_H

#include <libpq-fe.h>

#include "outbox/driver.h"
#include "outbox/kit.h"

#define PG_HIDDEN __attribute__((visibility("hidden")))

/* Driver name, as used in log lines. */
#define PG_NAME "postgres"

/* The host table given to init(); the only mutable static of the driver. */
extern PG_HIDDEN const outbox_host_t *outbox_pg_host;

/* --------------------------------------------------------------- errors */

PG_HIDDEN int outbox_pg_fail(outbox_diag_t *d, int code, const char *fmt, ...) OUTBOX_PRINTF(3, 4);
PG_HIDDEN int outbox_pg_nomem(outbox_diag_t *d);
/* The OUTBOX_E* code of an SQLSTATE (NULL: no server error). */
PG_HIDDEN int outbox_pg_sqlstate_code(const char *sqlstate);
/* 1 for a COMMAND_OK or TUPLES_OK result. */
PG_HIDDEN int outbox_pg_result_ok(const PGresult *res);
/* Reports "<what>: <server or libpq message>" with the mapped code, for a
 * failed result (res may be NULL when libpq could not even send). */
PG_HIDDEN int outbox_pg_result_fail(PGconn *conn, const PGresult *res, outbox_diag_t *d,
                                    const char *what);

/* ------------------------------------------------------------ relations */

/* Splits and validates "table" or "schema.table" (outbox_kit_relname_parse),
 * saying what is wrong with a name it refuses. */
PG_HIDDEN int outbox_pg_relname(const char *name, outbox_kit_relname_t *out, outbox_diag_t *d);
/* A companion relation (checkpoint, inbox): name, or table beside base
 * (in its schema) when name is NULL. */
PG_HIDDEN int outbox_pg_relname_beside(const char *name, const outbox_kit_relname_t *base,
                                       const char *table, outbox_kit_relname_t *out,
                                       outbox_diag_t *d);

/* The default companion tables, as the host names them. */
#define PG_CKPT_TABLE "hlc_checkpoint"
#define PG_INBOX_TABLE "outbox_inbox"

/* --------------------------------------------------- binary wire format */

/* Microseconds between the Unix epoch and PostgreSQL's (2000-01-01). */
#define PG_EPOCH_OFFSET_US INT64_C(946684800000000)

#define PG_OID_INT4 23
#define PG_OID_INT8 20
#define PG_OID_TEXT 25
#define PG_OID_UUID 2950
#define PG_OID_TIMESTAMPTZ 1184
#define PG_OID_JSONB 3802

/* A one-dimensional array in array_send's format, built element by element. */
typedef struct pg_array {
    outbox_kit_buf_t *b;
    size_t flags_at; /* where the has-nulls flag sits */
} pg_array_t;

PG_HIDDEN void outbox_pg_array_begin(pg_array_t *a, outbox_kit_buf_t *b, uint32_t elem_oid, size_t n);
PG_HIDDEN void outbox_pg_array_null(pg_array_t *a);
PG_HIDDEN void outbox_pg_array_text(pg_array_t *a, const char *s, size_t len);
/* NULL s is a NULL element. */
PG_HIDDEN void outbox_pg_array_text0(pg_array_t *a, const char *s);
/* 0 = invalid UUID text (the element is not written). NULL s is NULL. */
PG_HIDDEN int outbox_pg_array_uuid(pg_array_t *a, const char *s);
/* us since the Unix epoch; 0 is NULL when zero_is_null. */
PG_HIDDEN void outbox_pg_array_stamp(pg_array_t *a, int64_t us, int zero_is_null);
PG_HIDDEN void outbox_pg_array_int8(pg_array_t *a, int64_t v, int zero_is_null);
PG_HIDDEN void outbox_pg_array_int4(pg_array_t *a, int32_t v);
PG_HIDDEN void outbox_pg_array_jsonb(pg_array_t *a, const char *s, size_t len);
/* s as one line of valid UTF-8 of at most max bytes (outbox_kit_text_line),
 * cleaned in place: messages from sinks are arbitrary bytes, and a text
 * parameter that is not UTF-8 would fail the whole statement. */
PG_HIDDEN void outbox_pg_array_line(pg_array_t *a, const char *s, size_t max);

/* Scalars in network byte order. */
PG_HIDDEN void outbox_pg_put_int8(char out[8], int64_t v);
PG_HIDDEN int64_t outbox_pg_get_int8(const char *p);
PG_HIDDEN int32_t outbox_pg_get_int4(const char *p);
/* A timestamptz in binary as microseconds since the Unix epoch. */
PG_HIDDEN int64_t outbox_pg_get_stamp(const char *p);
/* 16 bytes to 36 characters plus NUL. */
PG_HIDDEN void outbox_pg_uuid_text(const unsigned char *bin, char out[OUTBOX_UUID_STRLEN + 1]);

#endif
