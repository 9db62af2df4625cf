/* Broken on purpose: a claim whose expired-lease branch forgets the route.
 * Pending rows are taken per route as they should be, but a processing row
 * of ANY route whose lease expired is reclaimed too, so one route's relay
 * steals another's crashed rows. */
#include <pthread.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int xroute_claim(void *handle, const outbox_claim_req_t *req, const outbox_row_t **rows,
                    size_t *n, outbox_fence_t *fence, outbox_diag_t *d)
{
    return broken_claim(handle, req, rows, n, fence, d, BROKEN_CORRECT & ~BROKEN_EXPIRED_ROUTE);
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-xroute");
    vtable.claim = xroute_claim;
}

BROKEN_ENTRY(build, descriptor)
