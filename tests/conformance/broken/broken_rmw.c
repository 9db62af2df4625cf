/* Broken on purpose: a read-modify-write checkpoint. It reads the mark in
 * one statement and writes max(read, new) in another, so a writer that
 * read before a concurrent transaction committed overwrites it: in the
 * battery's compare-and-set race the mark ends at 50, not 100. */
#include <pthread.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int prepare_on(sqlite3 *db, outbox_buf_t *b, sqlite3_stmt **st, outbox_diag_t *d)
{
    if (b->failed) {
        outbox_buf_free(b);
        return outbox_sqlite_nomem(d);
    }
    int rc = sqlite3_prepare_v2(db, b->data, -1, st, NULL);
    outbox_buf_free(b);
    return rc == SQLITE_OK ? OUTBOX_OK : outbox_sqlite_dbfail(d, db, rc, "rmw checkpoint");
}

static int rmw_advance(void *handle, const outbox_stage_ctx_t *ctx, const char *node_key,
                       int64_t hlc, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    if (!h->has_ckpt)
        return outbox_sqlite_fail(d, OUTBOX_ENOTSUP, "no checkpoint table");
    sqlite3 *db = ctx && ctx->native_tx ? ctx->native_tx : h->db;

    outbox_buf_t b;
    outbox_buf_init(&b, outbox_sqlite_host);
    sqlite3_stmt *st = NULL;
    outbox_buf_puts(&b, "SELECT hlc FROM ");
    outbox_buf_relname(&b, &h->ckpt, '"');
    outbox_buf_puts(&b, " WHERE node_key = ?1");
    int rc = prepare_on(db, &b, &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    sqlite3_bind_text(st, 1, node_key, -1, SQLITE_STATIC);
    int64_t current = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    if (hlc <= current)
        return OUTBOX_OK;

    outbox_buf_puts(&b, "INSERT OR REPLACE INTO ");
    outbox_buf_relname(&b, &h->ckpt, '"');
    outbox_buf_puts(&b, " (node_key, hlc) VALUES (?1, ?2)");
    rc = prepare_on(db, &b, &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    sqlite3_bind_text(st, 1, node_key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, hlc);
    int src = sqlite3_step(st);
    sqlite3_finalize(st);
    return src == SQLITE_DONE ? OUTBOX_OK : outbox_sqlite_dbfail(d, db, src, "rmw checkpoint");
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-rmw");
    vtable.checkpoint_advance = rmw_advance;
}

BROKEN_ENTRY(build, descriptor)
