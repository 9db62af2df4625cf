/* Broken on purpose: an inbox accept keyed on the event id alone. It is
 * one atomic statement, but it finds the pair when ANY consumer recorded
 * the event, so the second consumer of an event is told it saw it. */
#include <pthread.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int accept_by_event(void *handle, const outbox_stage_ctx_t *ctx, const char *consumer,
                           const char *event_id, int *is_new, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    sqlite3 *db = ctx && ctx->native_tx ? ctx->native_tx : h->db;
    static const char *const insert[] = {
        "INSERT OR IGNORE INTO ",
        " (consumer, event_id, received_at) SELECT ?1, ?2, ?3 WHERE NOT EXISTS (SELECT 1 FROM ",
        " WHERE event_id = ?2)", NULL};
    int changed = 0;
    int rc = broken_inbox_run(db, &h->inbox, insert, consumer, event_id, &changed, d);
    *is_new = rc == OUTBOX_OK && changed > 0;
    return rc;
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-inboxkey");
    vtable.inbox_accept = accept_by_event;
}

BROKEN_ENTRY(build, descriptor)
