/* Broken on purpose: a claim without exclusivity. It selects its
 * candidates, pauses a few milliseconds and then takes them without a
 * write transaction and without looking at their status again, so
 * concurrent claimers are handed the same rows. */
#include <pthread.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int share_claim(void *handle, const outbox_claim_req_t *req, const outbox_row_t **rows,
                       size_t *n, outbox_fence_t *fence, outbox_diag_t *d)
{
    return broken_claim(handle, req, rows, n, fence, d, BROKEN_CORRECT & ~BROKEN_EXCLUSIVE);
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-share");
    vtable.claim = share_claim;
}

BROKEN_ENTRY(build, descriptor)
