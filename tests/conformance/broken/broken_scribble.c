/* Broken on purpose: settle reuses the memory of the claimed rows before
 * it reads the items, as a driver that resets its row arena at the start
 * of every statement would. Settling with copies of the ids hides it; the
 * relay settles with the claim's own ids. */
#include <pthread.h>
#include <string.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int settle_scribbling(void *handle, const outbox_fence_t *fence, outbox_settle_item_t *items,
                             size_t n, size_t *applied, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    /* The arena's "reuse": every claimed id now reads as another UUID. */
    for (size_t i = 0; i < h->n_rows; i++)
        if (h->rows[i].id != NULL)
            memset((char *)h->rows[i].id, 'f', 8);
    return outbox_driver_entry_sqlite_base()->store->settle(handle, fence, items, n, applied, d);
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-scribble");
    vtable.settle = settle_scribbling;
}

BROKEN_ENTRY(build, descriptor)
