/* Broken on purpose: an inbox accept in the handle's own transaction that
 * commits what is open, records the pair on its own and opens a new
 * transaction in place of the old one ("the record must be durable at
 * once"). The record then survives the caller's rollback, and the event
 * whose effects were rolled back is never handled. */
#include <pthread.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int accept_committed(void *handle, const outbox_stage_ctx_t *ctx, const char *consumer,
                            const char *event_id, int *is_new, outbox_diag_t *d)
{
    const outbox_store_vtable_t *base = outbox_driver_entry_sqlite_base()->store;
    sq_handle_t *h = handle;
    if (ctx == NULL || !ctx->in_own_tx || ctx->native_tx != NULL)
        return base->inbox_accept(handle, ctx, consumer, event_id, is_new, d);
    if (sqlite3_exec(h->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
        return outbox_sqlite_dbfail(d, h->db, sqlite3_errcode(h->db), "broken accept: commit");
    int rc = base->inbox_accept(handle, NULL, consumer, event_id, is_new, d);
    if (sqlite3_exec(h->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK && rc == OUTBOX_OK)
        rc = outbox_sqlite_dbfail(d, h->db, sqlite3_errcode(h->db), "broken accept: begin");
    return rc;
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-inboxtx");
    vtable.inbox_accept = accept_committed;
}

BROKEN_ENTRY(build, descriptor)
