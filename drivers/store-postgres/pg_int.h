/* PostgreSQL store driver: what its source files share. Private to this folder.
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

/* ------------------------------------------- binary wire format (pg_wire.c) */

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
    outbox_buf_t *b;
    size_t flags_at; /* where the has-nulls flag sits */
} pg_array_t;

PG_HIDDEN void outbox_pg_array_begin(pg_array_t *a, outbox_buf_t *b, uint32_t elem_oid, size_t n);
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
/* s as one line of valid UTF-8 of at most max bytes (outbox_text_line),
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

/* ------------------------------------------------------------ relations */

/* Splits and validates "table" or "schema.table" (outbox_relname_parse),
 * saying what is wrong with a name it refuses. */
PG_HIDDEN int outbox_pg_relname(const char *name, outbox_relname_t *out, outbox_diag_t *d);
/* The checkpoint relation: name, or hlc_checkpoint beside base when NULL. */
PG_HIDDEN int outbox_pg_relname_ckpt(const char *name, const outbox_relname_t *base,
                                     outbox_relname_t *out, outbox_diag_t *d);

/* --------------------------------------------------------------- errors */

PG_HIDDEN int outbox_pg_fail(outbox_diag_t *d, int code, const char *fmt, ...) OUTBOX_PRINTF(3, 4);
PG_HIDDEN int outbox_pg_nomem(outbox_diag_t *d);
/* The OUTBOX_E* code of an SQLSTATE (NULL: no server error). */
PG_HIDDEN int outbox_pg_sqlstate_code(const char *sqlstate);
/* Reports "<what>: <server or libpq message>" with the mapped code, for a
 * failed result (res may be NULL when libpq could not even send). */
PG_HIDDEN int outbox_pg_result_fail(PGconn *conn, const PGresult *res, outbox_diag_t *d,
                                    const char *what);

/* --------------------------------------------------------------- handle */

/* Statements prepared once per connection of the handle (never on an
 * application's connection, which gets the same text unnamed). */
enum pg_slot {
    PG_STAGE,
    PG_STAGE_CKPT,
    PG_CLAIM,
    PG_CLAIM_HLC, /* right after PG_CLAIM: the two are built and replaced together */
    PG_SETTLE,
    PG_CKPT_ADVANCE,
    PG_CKPT_RECOVER,
    PG_SLOT_COUNT
};

/* The claim's batch limit is part of its text (see build_claim); the
 * statements are first built for the relay's default batch. */
#define PG_CLAIM_LIMIT_FIRST 100

#define PG_STAGE_ARRAYS 15 /* the most array parameters a stage statement takes */

/* LISTEN/NOTIFY channel names are identifiers: at most NAMEDATALEN - 1. */
#define PG_CHANNEL_MAX 63

typedef struct pg_handle {
    PGconn *conn;
    char *conninfo;    /* what PQconnectdb got; native_begin opens another with it */
    outbox_relname_t rel; /* as the user named it */
    outbox_relname_t ckpt;
    char *rel_sql;     /* quoted, ready to paste into SQL */
    char *ckpt_sql;
    char shown[160];   /* rel for messages */
    char channel[PG_CHANNEL_MAX + 1];
    int has_hlc;
    int has_traceparent;
    int has_ckpt;
    char *sql[PG_SLOT_COUNT];
    long claim_limit;  /* the batch limit written into the claim statements */
    unsigned prepared; /* bit per slot: prepared on the current connection */
    int listening;     /* LISTEN issued on the current connection */
    int wake_pending;  /* a claim took a notification for another route off the wire */
    int tx_error;      /* code of the first failure inside the handle's own transaction */
    /* The last claim's rows; their strings live in arena. */
    outbox_row_t *rows;
    size_t n_rows;
    size_t cap_rows;
    char *arena;
    size_t arena_cap;
    outbox_buf_t params[PG_STAGE_ARRAYS]; /* scratch for binary parameters, reused */
} pg_handle_t;

/* Makes sure the handle's connection is up, reconnecting (PQreset) when it
 * was lost; after a reconnect nothing is prepared or listened to. */
PG_HIDDEN int outbox_pg_connected(pg_handle_t *h, outbox_diag_t *d);

/* Runs a cached statement on the handle's connection, preparing it first
 * when this connection has not seen it. Binary parameters are those with
 * formats[i] = 1. On success *res is a COMMAND_OK or TUPLES_OK result the
 * caller clears. */
PG_HIDDEN int outbox_pg_exec_slot(pg_handle_t *h, int slot, int nparams, const char *const *values,
                                  const int *lengths, const int *formats, int binary_result,
                                  PGresult **res, outbox_diag_t *d, const char *what);
/* The same statement text, unnamed, on any connection (the application's). */
PG_HIDDEN int outbox_pg_exec_on(PGconn *conn, const char *sql, int nparams,
                                const char *const *values, const int *lengths, const int *formats,
                                int binary_result, PGresult **res, outbox_diag_t *d,
                                const char *what);
/* Drops a slot's prepared statement from the connection (its text is about
 * to change); nothing to do when it was never prepared there. */
PG_HIDDEN int outbox_pg_forget_slot(pg_handle_t *h, int slot, outbox_diag_t *d, const char *what);
/* A parameterless command on the handle's connection (reconnects first). */
PG_HIDDEN int outbox_pg_command(pg_handle_t *h, const char *sql, outbox_diag_t *d,
                                const char *what);

/* OUTBOX_EINVAL when the handle's own transaction is open: operations that
 * commit on their own cannot nest in it. */
PG_HIDDEN int outbox_pg_no_open_tx(pg_handle_t *h, const char *op, outbox_diag_t *d);
/* Inside the handle's own transaction, remembers the first failure so that
 * commit can report it. Returns code. */
PG_HIDDEN int outbox_pg_tx_note(pg_handle_t *h, int code);

/* The application's PGconn must be inside its transaction (BEGIN), or the
 * events would not commit with its rows. */
PG_HIDDEN int outbox_pg_check_native(PGconn *app, outbox_diag_t *d);

/* Reserves the claim arena (at least size bytes); the previous claim's rows
 * are gone after this. */
PG_HIDDEN int outbox_pg_arena_reserve(pg_handle_t *h, size_t size, outbox_diag_t *d);
PG_HIDDEN void outbox_pg_rows_reset(pg_handle_t *h);

/* ------------------------------------------------------ schema (pg_schema.c) */

/* The columns every outbox table has, NULL-terminated. */
extern PG_HIDDEN const char *const outbox_pg_required_columns[];

/* Detects the table, its optional columns and the checkpoint table. strict:
 * a missing table or required column is OUTBOX_ESCHEMA (a normal open);
 * otherwise they only leave the capabilities off (schema apply/check).
 * Also derives the notification channel from the resolved name. */
PG_HIDDEN int outbox_pg_detect(pg_handle_t *h, int strict, outbox_diag_t *d);

PG_HIDDEN int outbox_pg_schema_ddl(const outbox_schema_opts_t *opts, char **out, outbox_diag_t *d);
PG_HIDDEN int outbox_pg_schema_apply(void *handle, const outbox_schema_opts_t *opts,
                                     outbox_diag_t *d);
PG_HIDDEN int outbox_pg_schema_check(void *handle, const outbox_schema_opts_t *opts,
                                     outbox_schema_report_fn report, void *ctx, size_t *problems,
                                     outbox_diag_t *d);
PG_HIDDEN int outbox_pg_schema_drop(void *handle, const outbox_schema_opts_t *opts,
                                    outbox_diag_t *d);

/* ---------------------------------------------------------- rows (pg_rows.c) */

/* Builds the cached statement texts once the optional columns are known. */
PG_HIDDEN int outbox_pg_rows_prepare_sql(pg_handle_t *h, outbox_diag_t *d);
/* Before a claim of route: LISTENs when the session does not yet, and takes
 * the notifications already received off the connection, so that a wait
 * after the claim only wakes for what the claim could have missed. Those
 * for other routes leave wake_pending set. */
PG_HIDDEN void outbox_pg_drain_notifies(pg_handle_t *h, const char *route);

PG_HIDDEN int outbox_pg_stage(void *handle, const outbox_stage_ctx_t *ctx, const outbox_row_t *rows,
                              size_t n, size_t *staged, outbox_diag_t *d);
PG_HIDDEN int outbox_pg_claim(void *handle, const outbox_claim_req_t *req, const outbox_row_t **rows,
                              size_t *n, outbox_fence_t *fence, outbox_diag_t *d);
PG_HIDDEN int outbox_pg_settle(void *handle, const outbox_fence_t *fence,
                               outbox_settle_item_t *items, size_t n, size_t *applied,
                               outbox_diag_t *d);
PG_HIDDEN int outbox_pg_checkpoint_advance(void *handle, const outbox_stage_ctx_t *ctx,
                                           const char *node_key, int64_t hlc, outbox_diag_t *d);
PG_HIDDEN int outbox_pg_checkpoint_recover(void *handle, int64_t *hlc, outbox_diag_t *d);
PG_HIDDEN int outbox_pg_wait(void *handle, const char *route, int timeout_ms, outbox_diag_t *d);

/* -------------------------------------------------------- admin (pg_admin.c) */

PG_HIDDEN int outbox_pg_stats(void *handle, const char *route, outbox_stats_t *out,
                              outbox_diag_t *d);
PG_HIDDEN int outbox_pg_replay(void *handle, const char *route, const char *event_id,
                               uint64_t *count, outbox_diag_t *d);
PG_HIDDEN int outbox_pg_purge(void *handle, const char *route, int64_t before, uint64_t *count,
                              outbox_diag_t *d);

#endif
