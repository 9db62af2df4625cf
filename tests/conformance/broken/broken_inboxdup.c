/* Broken on purpose: an inbox accept that writes INSERT OR REPLACE, which
 * always changes a row, so every accept says new and a redelivered event
 * is handled again. */
#include <pthread.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int accept_replacing(void *handle, const outbox_stage_ctx_t *ctx, const char *consumer,
                            const char *event_id, int *is_new, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    sqlite3 *db = ctx && ctx->native_tx ? ctx->native_tx : h->db;
    static const char *const replace[] = {
        "INSERT OR REPLACE INTO ", " (consumer, event_id, received_at) VALUES (?1, ?2, ?3)", NULL};
    int changed = 0;
    int rc = broken_inbox_run(db, &h->inbox, replace, consumer, event_id, &changed, d);
    *is_new = rc == OUTBOX_OK && changed > 0;
    return rc;
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-inboxdup");
    vtable.inbox_accept = accept_replacing;
}

BROKEN_ENTRY(build, descriptor)
