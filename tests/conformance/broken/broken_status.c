/* Broken on purpose: a settle whose fence check forgets the status. It
 * matches a row by id and processing_at alone, and published and dead rows
 * keep the processing_at of their claim, so settling one again with the
 * same fence (a relay retrying its settle round trip) reopens it. */
#include <pthread.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static const char *set_clause(int kind)
{
    switch (kind) {
    case OUTBOX_SETTLE_PUBLISHED:
        return " SET status = 'published', published_at = ?3";
    case OUTBOX_SETTLE_RESCHEDULE:
        return " SET status = 'pending', available_at = nullif(?3, 0), last_error = ?4, "
               "processing_at = NULL";
    case OUTBOX_SETTLE_DEAD:
        return " SET status = 'dead', last_error = ?4";
    default:
        return " SET status = 'pending', attempts = max(attempts - 1, 0), processing_at = NULL";
    }
}

static int status_blind_settle(void *handle, const outbox_fence_t *fence,
                               outbox_settle_item_t *items, size_t n, size_t *applied,
                               outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    int64_t now = outbox_sqlite_host->now_us();
    size_t count = 0;
    int rc = OUTBOX_OK;
    for (size_t i = 0; rc == OUTBOX_OK && i < n; i++) {
        outbox_kit_buf_t b;
        outbox_kit_buf_init(&b, outbox_sqlite_host);
        outbox_kit_buf_puts(&b, "UPDATE ");
        outbox_kit_buf_relname(&b, &h->rel, '"');
        outbox_kit_buf_puts(&b, set_clause(items[i].kind));
        outbox_kit_buf_puts(&b, " WHERE id = ?1 AND processing_at = ?2");
        sqlite3_stmt *st = NULL;
        rc = outbox_sqlite_prepare_built(h->db, &b, &st, d);
        if (rc != OUTBOX_OK)
            break;
        sqlite3_bind_text(st, 1, items[i].id, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, fence->stamp);
        sqlite3_bind_int64(st, 3, items[i].kind == OUTBOX_SETTLE_PUBLISHED ? now
                                                                           : items[i].available_at);
        if (items[i].error != NULL)
            sqlite3_bind_text(st, 4, items[i].error, -1, SQLITE_STATIC);
        int src = sqlite3_step(st);
        sqlite3_finalize(st);
        if (src != SQLITE_DONE)
            rc = outbox_sqlite_dbfail(d, h->db, src, "status-blind settle");
        items[i].applied = rc == OUTBOX_OK && sqlite3_changes(h->db) > 0;
        count += items[i].applied != 0;
    }
    if (applied != NULL)
        *applied = count;
    return rc;
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-status");
    vtable.settle = status_blind_settle;
}

BROKEN_ENTRY(build, descriptor)
