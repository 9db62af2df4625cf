/* Broken on purpose: an inbox accept in two statements. It looks for the
 * pair, and when it finds none inserts it (INSERT OR IGNORE) and says new.
 * Another connection's record that is not committed yet is invisible to
 * the look, so a consumer racing one that holds the pair in an open
 * transaction is told new once that transaction commits, and so are
 * handles accepting the same event at once. */
#include <pthread.h>
#include <time.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int accept_check_then_insert(void *handle, const outbox_stage_ctx_t *ctx,
                                    const char *consumer, const char *event_id, int *is_new,
                                    outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    sqlite3 *db = ctx && ctx->native_tx ? ctx->native_tx : h->db;
    static const char *const look[] = {"SELECT 1 FROM ",
                                       " WHERE consumer = ?1 AND event_id = ?2", NULL};
    static const char *const insert[] = {
        "INSERT OR IGNORE INTO ", " (consumer, event_id, received_at) VALUES (?1, ?2, ?3)", NULL};
    int found = 0, changed = 0;
    int rc = broken_inbox_run(db, &h->inbox, look, consumer, event_id, &found, d);
    if (rc == OUTBOX_OK && !found) {
        /* Long enough for another handle to look too. */
        struct timespec pause = {0, 3 * 1000 * 1000};
        nanosleep(&pause, NULL);
        rc = broken_inbox_run(db, &h->inbox, insert, consumer, event_id, &changed, d);
    }
    *is_new = rc == OUTBOX_OK && !found;
    return rc;
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-inboxrace");
    vtable.inbox_accept = accept_check_then_insert;
}

BROKEN_ENTRY(build, descriptor)
