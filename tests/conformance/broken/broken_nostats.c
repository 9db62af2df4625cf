/* Broken on purpose, and without the optional entries that would show it:
 * no stats, replay, purge, routes or dead list (dead_list_pages catches it
 * otherwise), and a DEAD verdict stored as published. The
 * battery cannot catch this through the required entries alone; it must
 * say which check it could not run instead of passing in silence. */
#include <pthread.h>
#include <stdlib.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int settle_dead_as_published(void *handle, const outbox_fence_t *fence,
                                    outbox_settle_item_t *items, size_t n, size_t *applied,
                                    outbox_diag_t *d)
{
    for (size_t i = 0; i < n; i++)
        if (items[i].kind == OUTBOX_SETTLE_DEAD)
            items[i].kind = OUTBOX_SETTLE_PUBLISHED;
    return outbox_driver_entry_sqlite_base()->store->settle(handle, fence, items, n, applied, d);
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-nostats");
    vtable.stats = NULL;
    vtable.replay = NULL;
    vtable.purge = NULL;
    vtable.routes = NULL;
    vtable.dead_list = NULL;
    vtable.settle = settle_dead_as_published;
}

BROKEN_ENTRY(build, descriptor)
