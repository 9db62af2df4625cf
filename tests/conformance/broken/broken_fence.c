/* Broken on purpose: a settle that ignores the fence. Each item is
 * settled under whatever fence its row holds now, so a relay whose lease
 * expired overwrites the verdict of the claim that replaced it. */
#include <pthread.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

/* The fence each row holds now; the claim's own when the row holds none. */
static int current_fences(sq_handle_t *h, const outbox_fence_t *fence,
                          const outbox_settle_item_t *items, size_t n, int64_t *stamps,
                          outbox_diag_t *d)
{
    sqlite3_stmt *st;
    int rc = broken_prepare(h->db, "SELECT processing_at FROM ", &h->rel, " WHERE id = ?1", &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    for (size_t i = 0; i < n; i++) {
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, items[i].id, -1, SQLITE_STATIC);
        stamps[i] = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL
                        ? sqlite3_column_int64(st, 0)
                        : fence->stamp;
    }
    sqlite3_finalize(st);
    return OUTBOX_OK;
}

/* The real settle, once per fence the rows hold now. */
static int nofence_settle(void *handle, const outbox_fence_t *fence, outbox_settle_item_t *items,
                          size_t n, size_t *applied, outbox_diag_t *d)
{
    const outbox_store_vtable_t *base = outbox_driver_entry_sqlite_base()->store;
    int64_t *stamps = outbox_sqlite_host->alloc((n ? n : 1) * sizeof *stamps);
    outbox_settle_item_t *group = outbox_sqlite_host->alloc((n ? n : 1) * sizeof *group);
    size_t *where = outbox_sqlite_host->alloc((n ? n : 1) * sizeof *where);
    int rc = stamps && group && where ? current_fences(handle, fence, items, n, stamps, d)
                                      : outbox_sqlite_nomem(d);
    size_t total = 0;
    for (size_t i = 0; rc == OUTBOX_OK && i < n; i++) {
        int seen = 0; /* then it was settled with the group of its first occurrence */
        for (size_t k = 0; k < i && !seen; k++)
            seen = stamps[k] == stamps[i];
        if (seen)
            continue;
        size_t m = 0;
        for (size_t k = i; k < n; k++)
            if (stamps[k] == stamps[i]) {
                where[m] = k;
                group[m++] = items[k];
            }
        outbox_fence_t held = *fence;
        held.stamp = stamps[i];
        size_t count = 0;
        rc = base->settle(handle, &held, group, m, &count, d);
        for (size_t k = 0; k < m; k++)
            items[where[k]].applied = group[k].applied;
        total += count;
    }
    outbox_sqlite_host->free(stamps);
    outbox_sqlite_host->free(group);
    outbox_sqlite_host->free(where);
    if (applied != NULL)
        *applied = total;
    return rc;
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-fence");
    vtable.settle = nofence_settle;
}

BROKEN_ENTRY(build, descriptor)
