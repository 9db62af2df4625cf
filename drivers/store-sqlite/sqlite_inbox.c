/* The inbox of the SQLite store: which events each consumer handled.
 *
 * accept is one INSERT ... ON CONFLICT DO NOTHING on the primary key
 * (consumer, event_id), new when it changed a row. SQLite lets one writer
 * at a time into the file, so of two connections racing on one pair the
 * second waits (the busy timeout) for the first to commit or roll back and
 * then inserts or finds the row: exactly one sees it new. received_at is
 * microseconds since the epoch, the host's clock.
 */
#include <string.h>

#include "sqlite_int.h"

static void sql_accept(const sq_handle_t *h, outbox_kit_buf_t *b)
{
    outbox_kit_buf_puts(b, "INSERT INTO ");
    outbox_kit_buf_relname(b, &h->inbox, '"');
    outbox_kit_buf_puts(b, " (consumer, event_id, received_at) VALUES (?1, ?2, ?3) "
                           "ON CONFLICT (consumer, event_id) DO NOTHING");
}

/* The accept on db: the handle's cached statement on its own connection,
 * one prepared for the call on an application's. */
static int accept_on(sq_handle_t *h, sqlite3 *db, const char *consumer, const char *event_id,
                     int *is_new, outbox_diag_t *d)
{
    int own = db == h->db;
    sqlite3_stmt *st = NULL;
    int rc;
    if (own) {
        rc = outbox_sqlite_stmt(h, SQ_INBOX_ACCEPT, sql_accept, &st, d);
    } else {
        outbox_kit_buf_t b;
        outbox_kit_buf_init(&b, outbox_sqlite_host);
        sql_accept(h, &b);
        rc = outbox_sqlite_prepare_built(db, &b, &st, d);
    }
    if (rc != OUTBOX_OK)
        return rc;
    sqlite3_bind_text(st, 1, consumer, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, event_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, outbox_sqlite_host->now_us());
    int src = sqlite3_step(st);
    if (src == SQLITE_DONE)
        *is_new = sqlite3_changes(db) > 0;
    else
        rc = outbox_sqlite_dbfail(d, db, src, "recording an event in the inbox");
    if (own)
        sqlite3_reset(st);
    else
        sqlite3_finalize(st);
    return rc;
}

int outbox_sqlite_inbox_accept(void *handle, const outbox_stage_ctx_t *ctx, const char *consumer,
                               const char *event_id, int *is_new, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    *is_new = 0;
    sqlite3 *app = ctx ? ctx->native_tx : NULL;
    if (app) {
        int rc = outbox_sqlite_check_native(h, app, h->inbox.schema, d);
        return rc != OUTBOX_OK ? rc : accept_on(h, app, consumer, event_id, is_new, d);
    }
    if (ctx && ctx->in_own_tx) {
        if (sqlite3_get_autocommit(h->db))
            return outbox_sqlite_fail(d, OUTBOX_EINVAL,
                                      "recording in the handle's transaction, but none is open");
        return accept_on(h, h->db, consumer, event_id, is_new, d);
    }
    /* A statement on its own commits as it ends, durably. */
    int rc = outbox_sqlite_no_open_tx(h, "recording in the inbox outside a transaction", d);
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_sync(h, 1, d);
    return rc != OUTBOX_OK ? rc : accept_on(h, h->db, consumer, event_id, is_new, d);
}

int outbox_sqlite_inbox_purge(void *handle, const char *consumer, int64_t before_us,
                              uint64_t *count, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    *count = 0;
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_sqlite_host);
    outbox_kit_buf_puts(&b, "DELETE FROM ");
    outbox_kit_buf_relname(&b, &h->inbox, '"');
    outbox_kit_buf_puts(&b, " WHERE rowid IN (SELECT rowid FROM ");
    outbox_kit_buf_relname(&b, &h->inbox, '"');
    outbox_kit_buf_puts(&b, consumer ? " WHERE received_at < ?1 AND consumer = ?2"
                                     : " WHERE received_at < ?1");
    return outbox_sqlite_delete_batches(h, "inbox purge", &b, before_us, consumer, count, d);
}

int outbox_sqlite_inbox_stats(void *handle, const char *consumer, outbox_inbox_fn fn, void *ctx,
                              outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_sqlite_host);
    outbox_kit_buf_puts(&b, "SELECT consumer, count(*), min(received_at), max(received_at) FROM ");
    outbox_kit_buf_relname(&b, &h->inbox, '"');
    outbox_kit_buf_printf(&b, "%s GROUP BY consumer ORDER BY consumer COLLATE BINARY",
                          consumer ? " WHERE consumer = ?1" : "");
    sqlite3_stmt *st;
    int rc = outbox_sqlite_prepare_built(h->db, &b, &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (consumer)
        sqlite3_bind_text(st, 1, consumer, -1, SQLITE_STATIC);
    int src;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        int stop = fn(ctx, name ? name : "", (uint64_t)sqlite3_column_int64(st, 1),
                      sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3));
        if (stop != 0) {
            sqlite3_finalize(st);
            return stop;
        }
    }
    if (src != SQLITE_DONE)
        rc = outbox_sqlite_dbfail(d, h->db, src, "reading the inbox");
    sqlite3_finalize(st);
    return rc;
}
