/* Broken on purpose: inside the handle's own transaction ("ours, so no
 * savepoint is needed"), a stage call's rows are inserted one after the
 * other with no savepoint around the call. SQLite undoes only the
 * statement that failed, so when the database refuses a later row of the
 * call, the rows before it stay in the transaction and commit with it.
 * What the real driver refuses before it writes (a column the table lacks)
 * it still refuses whole, and a call in the application's transaction or
 * in none is the real driver's: the bug shows only when the database
 * itself refuses a row of a call in the handle's transaction. */
#include <pthread.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static void bind_text(sqlite3_stmt *st, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
}

static void bind_stamp(sqlite3_stmt *st, int i, int64_t v)
{
    if (v)
        sqlite3_bind_int64(st, i, v);
    else
        sqlite3_bind_null(st, i);
}

/* The real driver's INSERT, one row at a time, nothing around them. */
static int insert_plainly(const sq_handle_t *h, sqlite3 *db, const outbox_row_t *rows, size_t n,
                          size_t *count, outbox_diag_t *d)
{
    sqlite3_stmt *st = NULL;
    int rc = outbox_sqlite_prepare(db, h->insert_sql, "broken stage: preparing", &st, d);
    for (size_t i = 0; rc == OUTBOX_OK && i < n; i++) {
        const outbox_row_t *r = &rows[i];
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        bind_text(st, 1, r->id);
        bind_text(st, 2, r->route);
        bind_text(st, 3, r->event_id);
        bind_text(st, 4, r->event_type);
        bind_text(st, 5, r->tenant_id);
        bind_text(st, 6, r->execution_id);
        bind_text(st, 7, r->correlation_id);
        bind_text(st, 8, r->causation_id);
        sqlite3_bind_int64(st, 9, r->occurred_at);
        sqlite3_bind_text(st, 10, r->payload, r->payload_len ? (int)r->payload_len : -1,
                          SQLITE_STATIC);
        sqlite3_bind_int64(st, 11, r->created_at);
        bind_stamp(st, 12, r->available_at);
        bind_text(st, 13, r->ordering_key);
        if (h->has_hlc)
            bind_stamp(st, 14, r->hlc);
        if (h->has_traceparent)
            bind_text(st, 15, r->traceparent);
        int src = sqlite3_step(st);
        if (src != SQLITE_DONE)
            rc = outbox_sqlite_dbfail(d, db, src, "broken stage: inserting");
        else
            *count += (size_t)sqlite3_changes(db);
    }
    sqlite3_finalize(st);
    return rc;
}

static int stage_without_savepoint(void *handle, const outbox_stage_ctx_t *ctx,
                                   const outbox_row_t *rows, size_t n, size_t *staged,
                                   outbox_diag_t *d)
{
    const outbox_store_vtable_t *base = outbox_driver_entry_sqlite_base()->store;
    sq_handle_t *h = handle;
    sqlite3 *db = ctx != NULL && ctx->in_own_tx && ctx->native_tx == NULL ? h->db : NULL;
    int whole = db == NULL || sqlite3_get_autocommit(db) || h->insert_sql == NULL;
    for (size_t i = 0; i < n && !whole; i++)
        whole = (rows[i].traceparent && !h->has_traceparent) || (rows[i].hlc && !h->has_hlc);
    if (whole)
        return base->stage(handle, ctx, rows, n, staged, d);

    size_t count = 0;
    *staged = 0;
    int rc = insert_plainly(h, db, rows, n, &count, d);
    if (rc == OUTBOX_OK && ctx->checkpoint_node_key)
        rc = base->checkpoint_advance(handle, ctx, ctx->checkpoint_node_key, ctx->max_hlc, d);
    if (rc == OUTBOX_OK)
        *staged = count;
    return rc;
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-nosave");
    vtable.stage = stage_without_savepoint;
}

BROKEN_ENTRY(build, descriptor)
