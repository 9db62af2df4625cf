/* Broken on purpose: an inbox accept through the application's native
 * connection that commits the application's transaction, records the pair
 * on its own and begins a new transaction in its place. The record then
 * survives the application's rollback, so the event whose effects were
 * rolled back is never handled. The handle's own transaction is the real
 * driver's. */
#include <pthread.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int accept_committed(void *handle, const outbox_stage_ctx_t *ctx, const char *consumer,
                            const char *event_id, int *is_new, outbox_diag_t *d)
{
    const outbox_store_vtable_t *base = outbox_driver_entry_sqlite_base()->store;
    sq_handle_t *h = handle;
    sqlite3 *app = ctx ? ctx->native_tx : NULL;
    if (app == NULL)
        return base->inbox_accept(handle, ctx, consumer, event_id, is_new, d);
    static const char *const insert[] = {
        "INSERT INTO ",
        " (consumer, event_id, received_at) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING", NULL};
    if (sqlite3_exec(app, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
        return outbox_sqlite_dbfail(d, app, sqlite3_errcode(app), "broken accept: commit");
    int changed = 0;
    int rc = broken_inbox_run(app, &h->inbox, insert, consumer, event_id, &changed, d);
    *is_new = rc == OUTBOX_OK && changed > 0;
    if (sqlite3_exec(app, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK && rc == OUTBOX_OK)
        rc = outbox_sqlite_dbfail(d, app, sqlite3_errcode(app), "broken accept: begin");
    return rc;
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-inboxnative");
    vtable.inbox_accept = accept_committed;
}

BROKEN_ENTRY(build, descriptor)
