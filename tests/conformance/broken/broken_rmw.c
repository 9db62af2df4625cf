/* Broken on purpose: a read-modify-write checkpoint. It reads the mark in
 * one statement and writes max(read, new) in another, so a writer that
 * read before a concurrent transaction committed overwrites it: in the
 * battery's compare-and-set race the mark ends at 50, not 100. */
#include <pthread.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int rmw_advance(void *handle, const outbox_stage_ctx_t *ctx, const char *node_key,
                       int64_t hlc, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    if (!h->has_ckpt)
        return outbox_sqlite_fail(d, OUTBOX_ENOTSUP, "no checkpoint table");
    sqlite3 *db = ctx && ctx->native_tx ? ctx->native_tx : h->db;

    sqlite3_stmt *st;
    int rc = broken_prepare(db, "SELECT hlc FROM ", &h->ckpt, " WHERE node_key = ?1", &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    sqlite3_bind_text(st, 1, node_key, -1, SQLITE_STATIC);
    int64_t current = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    if (hlc <= current)
        return OUTBOX_OK;

    rc = broken_prepare(db, "INSERT OR REPLACE INTO ", &h->ckpt, " (node_key, hlc) VALUES (?1, ?2)",
                        &st, d);
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
