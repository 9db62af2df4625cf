/* SQLite store driver: what its source files share. Private to this folder.
 *
 * The files are floors, and a file calls only the floors below its own:
 *
 *   6  ceiling.c         the benchmark ceiling (outbox/ceiling.h), built into
 *                        outbox-bench only, never into the module
 *   5  sqlite.c          the descriptor and vtable: open/close, capabilities,
 *                        begin/commit/rollback, native handles, init
 *   4  sqlite_rows.c     stage, claim, settle, the clock checkpoint
 *      sqlite_schema.c   the canonical schema: DDL, apply, drop, check
 *      sqlite_admin.c    stats, replay, purge
 *      sqlite_inbox.c    the inbox: accept, purge, stats
 *   3  sqlite_catalog.c  what the live database holds: columns, indexes,
 *                        attached schemas, and the handle's view of them
 *   2  sqlite_conn.c     the connection: open, PRAGMAs, busy handler,
 *                        statements, transactions, the claim arena
 *   1  sqlite_text.c     the host table, error reports, relation names
 *
 * The files of floor 4 never call each other. This header follows the same
 * order, bottom first.
 *
 * Every cross-file function is hidden so that the module exports only
 * outbox_driver_entry() and a static test build links no stray symbols.
 */
#ifndef OUTBOX_STORE_SQLITE_INT_H
#define OUTBOX_STORE_SQLITE_INT_H

#include <sqlite3.h>

#include "outbox/kit.h"

#define SQ_HIDDEN __attribute__((visibility("hidden")))

/* Driver name, as used in log lines. */
#define SQ_NAME "sqlite"

/* ============================================== floor 1: sqlite_text.c */

/* The host table given to init(); the only mutable static of the driver. */
extern SQ_HIDDEN const outbox_host_t *outbox_sqlite_host;

SQ_HIDDEN int outbox_sqlite_fail(outbox_diag_t *d, int code, const char *fmt, ...)
    OUTBOX_PRINTF(3, 4);
/* Reports "<what>: <sqlite3_errmsg(db)>" with rc mapped to an OUTBOX_E*
 * code (busy, locked, I/O: OUTBOX_ETRANSIENT). Call it before anything
 * else touches db, since that replaces the message. */
SQ_HIDDEN int outbox_sqlite_dbfail(outbox_diag_t *d, sqlite3 *db, int rc, const char *what);
/* The same with a message SQLite handed over itself (sqlite3_exec's);
 * NULL says SQLite's text for rc. */
SQ_HIDDEN int outbox_sqlite_msgfail(outbox_diag_t *d, int rc, const char *what, const char *msg);
SQ_HIDDEN int outbox_sqlite_nomem(outbox_diag_t *d);

/* Splits and validates "table" or "schema.table" (schema "" when
 * unqualified), reporting a bad name in d. */
SQ_HIDDEN int outbox_sqlite_rel_parse(const char *name, outbox_kit_relname_t *out, outbox_diag_t *d);
/* The checkpoint relation: name, or hlc_checkpoint in base's schema when NULL. */
SQ_HIDDEN int outbox_sqlite_rel_checkpoint(const char *name, const outbox_kit_relname_t *base,
                                           outbox_kit_relname_t *out, outbox_diag_t *d);
/* The inbox relation: name, or outbox_inbox in base's schema when NULL. */
SQ_HIDDEN int outbox_sqlite_rel_inbox(const char *name, const outbox_kit_relname_t *base,
                                      outbox_kit_relname_t *out, outbox_diag_t *d);

/* ------------------------------------------------------------- the handle */

/* Statements cached on the handle's own connection (never on an
 * application's native connection). */
enum sq_slot {
    SQ_BEGIN,
    SQ_COMMIT,
    SQ_ROLLBACK,
    SQ_INSERT, /* from here on they depend on the table: see forget_statements */
    SQ_CLAIM,
    SQ_CLAIM_HLC,
    SQ_MAX_PROCESSING,
    SQ_SET_PUBLISHED,
    SQ_SET_RESCHEDULE,
    SQ_SET_DEAD,
    SQ_SET_RELEASE,
    SQ_RENEW,
    SQ_CKPT_ADVANCE,
    SQ_CKPT_RECOVER,
    SQ_INBOX_ACCEPT,
    SQ_SLOT_COUNT
};

typedef struct sq_chunk sq_chunk_t;

typedef struct sq_handle {
    sqlite3 *db;
    outbox_kit_relname_t rel;
    outbox_kit_relname_t ckpt;
    outbox_kit_relname_t inbox; /* (consumer, event_id, received_at) */
    int has_inbox;
    int has_hlc;
    int has_traceparent;
    int has_ckpt;
    /* Indexes the claim names with INDEXED BY, found by their columns; NULL
     * when the table has none (the planner then chooses). */
    char *idx_order; /* (outbox_route, status, created_at, id) */
    char *idx_hlc;   /* (outbox_route, status, hlc, created_at, id) */
    char *idx_key;   /* (outbox_route, ordering_key, status, ...) */
    int busy_ms;        /* how long a writer waits for the write lock */
    int sync_full;      /* 1: the connection runs synchronous=FULL now, 0: NORMAL */
    int64_t busy_start; /* monotonic microseconds of the current wait */
    char *insert_sql; /* also prepared on native connections */
    char *ckpt_sql;
    sqlite3_stmt *stmt[SQ_SLOT_COUNT];
    /* The last claim's rows; strings live in chunks. */
    outbox_row_t *rows;
    size_t n_rows;
    size_t cap_rows;
    sq_chunk_t *chunks;
} sq_handle_t;

/* ============================================== floor 2: sqlite_conn.c */

/* How connect opens the file. */
enum sq_open_mode {
    SQ_OPEN_WRITE = 0,     /* an existing file, read-write */
    SQ_OPEN_CREATE = 1,    /* read-write, made when missing (schema apply) */
    SQ_OPEN_READ_ONLY = 2, /* an existing file, read-only, settings untouched */
};

/* Opens path on h->db (mode: enum sq_open_mode) with the driver's busy
 * handler waiting up to busy_ms for the write lock; a read-write open also
 * puts the file in WAL mode with synchronous=FULL. On failure h->db may be
 * set: disconnect closes it. */
SQ_HIDDEN int outbox_sqlite_connect(sq_handle_t *h, const char *path, int mode, int busy_ms,
                                    outbox_diag_t *d);
/* Rolls back what is open, finalizes the statements, closes the
 * connection and frees the claim arena. */
SQ_HIDDEN void outbox_sqlite_disconnect(sq_handle_t *h);

/* Prepares sql on db (any connection, not cached); what names it in d. */
SQ_HIDDEN int outbox_sqlite_prepare(sqlite3 *db, const char *sql, const char *what,
                                    sqlite3_stmt **st, outbox_diag_t *d);
/* Prepares the text built in b and frees b; a build that ran out of memory
 * is OUTBOX_ENOMEM. */
SQ_HIDDEN int outbox_sqlite_prepare_built(sqlite3 *db, outbox_kit_buf_t *b, sqlite3_stmt **st,
                                          outbox_diag_t *d);

/* Builds the SQL text of a cached statement. */
typedef void (*sq_sql_fn)(const sq_handle_t *h, outbox_kit_buf_t *b);

/* The cached statement in slot, prepared from build() on first use, reset
 * and with its bindings cleared. */
SQ_HIDDEN int outbox_sqlite_stmt(sq_handle_t *h, int slot, sq_sql_fn build, sqlite3_stmt **out,
                                 outbox_diag_t *d);
/* Finalizes the cached statements whose text depends on the table, so the
 * next use prepares them again. */
SQ_HIDDEN void outbox_sqlite_forget_statements(sq_handle_t *h);
/* Steps a statement that returns no rows to completion and resets it. */
SQ_HIDDEN int outbox_sqlite_run(sq_handle_t *h, sqlite3_stmt *st, outbox_diag_t *d,
                                const char *what);

/* The connection's synchronous setting for its next commits: full 1 for
 * FULL, 0 for NORMAL (see sqlite_conn.c); a no-op when already so. */
SQ_HIDDEN int outbox_sqlite_sync(sq_handle_t *h, int full, outbox_diag_t *d);
/* BEGIN IMMEDIATE / COMMIT on the handle's connection. commit rolls back
 * when COMMIT itself fails, so a failed call leaves nothing open. begin
 * runs the transaction with synchronous=FULL, begin_relay (claims and
 * settles) with NORMAL. */
SQ_HIDDEN int outbox_sqlite_tx_begin(sq_handle_t *h, outbox_diag_t *d);
SQ_HIDDEN int outbox_sqlite_tx_begin_relay(sq_handle_t *h, outbox_diag_t *d);
SQ_HIDDEN int outbox_sqlite_tx_commit(sq_handle_t *h, outbox_diag_t *d);
/* ROLLBACK, reporting a failure in d. */
SQ_HIDDEN int outbox_sqlite_tx_rollback(sq_handle_t *h, outbox_diag_t *d);
/* Rolls back when a transaction is open; keeps d as it is. */
SQ_HIDDEN void outbox_sqlite_tx_abort(sq_handle_t *h);
/* OUTBOX_EINVAL when the handle's own transaction is open: operations that
 * run their own transactions cannot nest in it. */
SQ_HIDDEN int outbox_sqlite_no_open_tx(sq_handle_t *h, const char *op, outbox_diag_t *d);
/* A purge: the statement built in b (freed here), "DELETE ... WHERE k IN
 * (SELECT k ... WHERE ... ?1" with ?2 as well when name is not NULL, gets
 * " LIMIT n)" appended and runs until a batch deletes fewer than n rows.
 * Each batch commits on its own, durably, so an interrupted purge keeps
 * what it deleted and a writer waits at most one batch for the lock. ?1 is
 * before, ?2 name; *count gains the rows deleted; op names the purge in
 * errors. Refused inside the handle's own transaction. */
SQ_HIDDEN int outbox_sqlite_delete_batches(sq_handle_t *h, const char *op, outbox_kit_buf_t *b,
                                           int64_t before, const char *name, uint64_t *count,
                                           outbox_diag_t *d);

/* The claim arena: the rows of the last claim and their strings, kept
 * until the next claim or close. */
/* A zeroed row after the last one; it counts once the caller increments
 * n_rows. NULL when out of memory. */
SQ_HIDDEN outbox_row_t *outbox_sqlite_arena_row(sq_handle_t *h);
/* Column i of the row st is on, copied into the arena; NULL for SQL NULL.
 * *failed set when out of memory. */
SQ_HIDDEN const char *outbox_sqlite_arena_column(sq_handle_t *h, sqlite3_stmt *st, int i,
                                                 int *failed);
/* Drops the rows of the last claim; keeps memory for the next one. */
SQ_HIDDEN void outbox_sqlite_arena_reset(sq_handle_t *h);
/* Drops the rows and frees every byte they used. */
SQ_HIDDEN void outbox_sqlite_arena_free(sq_handle_t *h);

/* =========================================== floor 3: sqlite_catalog.c */

/* A column as declared. */
typedef struct sq_column {
    char *name;
    char *type;
    int pk;
} sq_column_t;

typedef struct sq_columns {
    sq_column_t *v;
    size_t n;
} sq_columns_t;

/* An index as SQLite reports it: its key columns in order. */
typedef struct sq_index {
    char *name;
    int unique;
    int partial;
    size_t n;
    char *cols[8]; /* the first 8 key columns; enough for every comparison here */
} sq_index_t;

typedef struct sq_indexes {
    sq_index_t *v;
    size_t n;
} sq_indexes_t;

/* The columns of schema.table; n = 0 when it does not exist. */
SQ_HIDDEN int outbox_sqlite_columns(sqlite3 *db, const outbox_kit_relname_t *rel, sq_columns_t *out,
                                    outbox_diag_t *d);
SQ_HIDDEN void outbox_sqlite_columns_free(sq_columns_t *c);
SQ_HIDDEN const sq_column_t *outbox_sqlite_column_find(const sq_columns_t *c, const char *name);

/* The indexes of schema.table with their key columns. */
SQ_HIDDEN int outbox_sqlite_indexes(sqlite3 *db, const outbox_kit_relname_t *rel, sq_indexes_t *out,
                                    outbox_diag_t *d);
SQ_HIDDEN void outbox_sqlite_indexes_free(sq_indexes_t *x);
/* The first ordinary index whose leading key columns are cols
 * (NULL-terminated), or NULL. A partial index serves nothing, since its
 * WHERE may exclude claimable rows. */
SQ_HIDDEN const sq_index_t *outbox_sqlite_index_find(const sq_indexes_t *x,
                                                     const char *const *cols);

/* *attached = 1 when rel is unqualified or its schema names an attached
 * database. */
SQ_HIDDEN int outbox_sqlite_schema_attached(sqlite3 *db, const outbox_kit_relname_t *rel,
                                            int *attached, outbox_diag_t *d);
/* OUTBOX_EINVAL naming the schema when rel's schema is not attached. */
SQ_HIDDEN int outbox_sqlite_require_attached(sqlite3 *db, const outbox_kit_relname_t *rel,
                                             outbox_diag_t *d);

/* Looks at h's table: the optional columns, the claim's indexes and the
 * checkpoint table. strict: a missing table or required column is an error
 * (a normal open); otherwise they only leave the capabilities off (schema
 * apply/check). */
SQ_HIDDEN int outbox_sqlite_detect(sq_handle_t *h, int strict, outbox_diag_t *d);
/* The application's sqlite3* given as native_tx: on the store's file (for
 * schema; "" = main); check_native also wants it inside a transaction. */
SQ_HIDDEN int outbox_sqlite_same_database(const sq_handle_t *h, sqlite3 *app, const char *schema,
                                          outbox_diag_t *d);
SQ_HIDDEN int outbox_sqlite_check_native(const sq_handle_t *h, sqlite3 *app, const char *schema,
                                         outbox_diag_t *d);
SQ_HIDDEN void outbox_sqlite_drop_index_names(sq_handle_t *h);

/* ============ floor 4: sqlite_rows.c, sqlite_schema.c, sqlite_admin.c */

/* rows.c. Builds insert_sql and ckpt_sql once the optional columns are known. */
SQ_HIDDEN int outbox_sqlite_rows_prepare_sql(sq_handle_t *h, outbox_diag_t *d);
/* Forgets the cached statements and looks at the table again: after schema
 * apply or drop, or when a claim finds an index it names gone. */
SQ_HIDDEN int outbox_sqlite_refresh(sq_handle_t *h, outbox_diag_t *d);
/* The claimed rows' format, for claims written elsewhere (the broken
 * variants of tests/conformance): appends " RETURNING" and the
 * columns keep_row reads; keep_row copies the row st is on into the arena. */
SQ_HIDDEN void outbox_sqlite_add_returning(const sq_handle_t *h, outbox_kit_buf_t *b);
SQ_HIDDEN int outbox_sqlite_keep_row(sq_handle_t *h, sqlite3_stmt *st, outbox_diag_t *d);

/* The relay's hot path as statements, shared by claim and settle and by
 * the driver's benchmark ceiling (ceiling.c), which drives them bare.
 * Each runs inside the relay transaction the caller began
 * (outbox_sqlite_tx_begin_relay):
 *  - fence_stamp: the fence a claim of route at now writes: now, unless a
 *    row of the route already holds a stamp >= now (same microsecond,
 *    lease 0, a clock that stepped back), then one past it, so no two live
 *    claims share a fence;
 *  - claim_stmt: the cached claim statement bound for req at now with
 *    fence stamp; stepping it returns the claimed rows (add_returning's
 *    columns, id first);
 *  - settle_stmt: the cached fenced UPDATE for it, bound; stepping it once
 *    settles the row, sqlite3_changes() says whether it still held the
 *    fence. */
SQ_HIDDEN int outbox_sqlite_fence_stamp(sq_handle_t *h, const char *route, int64_t now,
                                        int64_t *stamp, outbox_diag_t *d);
SQ_HIDDEN int outbox_sqlite_claim_stmt(sq_handle_t *h, const outbox_claim_req_t *req, int64_t now,
                                       int64_t stamp, sqlite3_stmt **out, outbox_diag_t *d);
SQ_HIDDEN int outbox_sqlite_settle_stmt(sq_handle_t *h, int64_t fence, int64_t now,
                                        const outbox_settle_item_t *it, sqlite3_stmt **out,
                                        outbox_diag_t *d);

SQ_HIDDEN int outbox_sqlite_stage(void *handle, const outbox_stage_ctx_t *ctx,
                                  const outbox_row_t *rows, size_t n, size_t *staged,
                                  outbox_diag_t *d);
SQ_HIDDEN int outbox_sqlite_claim(void *handle, const outbox_claim_req_t *req,
                                  const outbox_row_t **rows, size_t *n, outbox_fence_t *fence,
                                  outbox_diag_t *d);
SQ_HIDDEN int outbox_sqlite_settle(void *handle, const outbox_fence_t *fence,
                                   outbox_settle_item_t *items, size_t n, size_t *applied,
                                   outbox_diag_t *d);
SQ_HIDDEN int outbox_sqlite_renew(void *handle, const outbox_renew_req_t *req, outbox_fence_t *renewed,
                                  size_t *count, outbox_diag_t *d);
SQ_HIDDEN int outbox_sqlite_checkpoint_advance(void *handle, const outbox_stage_ctx_t *ctx,
                                               const char *node_key, int64_t hlc,
                                               outbox_diag_t *d);
SQ_HIDDEN int outbox_sqlite_checkpoint_recover(void *handle, int64_t *hlc, outbox_diag_t *d);

/* schema.c. apply and drop leave the handle's view of the table stale:
 * the caller refreshes it. */
SQ_HIDDEN int outbox_sqlite_schema_ddl(const outbox_schema_opts_t *opts, char **out,
                                       outbox_diag_t *d);
SQ_HIDDEN int outbox_sqlite_schema_apply(void *handle, const outbox_schema_opts_t *opts,
                                         outbox_diag_t *d);
SQ_HIDDEN int outbox_sqlite_schema_drop(void *handle, const outbox_schema_opts_t *opts,
                                        outbox_diag_t *d);
SQ_HIDDEN int outbox_sqlite_schema_check(void *handle, const outbox_schema_opts_t *opts,
                                         outbox_schema_report_fn report, void *ctx,
                                         size_t *problems, outbox_diag_t *d);

/* admin.c. */
SQ_HIDDEN int outbox_sqlite_stats(void *handle, const char *route, outbox_stats_t *out,
                                  outbox_diag_t *d);
SQ_HIDDEN int outbox_sqlite_replay(void *handle, const char *route, const char *event_id,
                                   uint64_t *count, outbox_diag_t *d);
SQ_HIDDEN int outbox_sqlite_purge(void *handle, const char *route, int64_t before,
                                  uint64_t *count, outbox_diag_t *d);
SQ_HIDDEN int outbox_sqlite_routes(void *handle, outbox_route_fn fn, void *ctx, outbox_diag_t *d);
SQ_HIDDEN int outbox_sqlite_dead_list(void *handle, const char *route, const char *after_id,
                                      size_t limit, outbox_row_fn fn, void *ctx,
                                      outbox_diag_t *d);

/* inbox.c. */
SQ_HIDDEN int outbox_sqlite_inbox_accept(void *handle, const outbox_stage_ctx_t *ctx,
                                         const char *consumer, const char *event_id, int *is_new,
                                         outbox_diag_t *d);
SQ_HIDDEN int outbox_sqlite_inbox_purge(void *handle, const char *consumer, int64_t before_us,
                                        uint64_t *count, outbox_diag_t *d);
SQ_HIDDEN int outbox_sqlite_inbox_stats(void *handle, const char *consumer, outbox_inbox_fn fn,
                                        void *ctx, outbox_diag_t *d);

#endif
