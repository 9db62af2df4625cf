/* Broken on purpose: a claim that takes pending rows first and expired
 * ones after them. Within each group the order is right, but a key whose
 * head crashed (its lease expired) has its later, pending rows claimed
 * before, or without, the head. */
#include <pthread.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int xlast_claim(void *handle, const outbox_claim_req_t *req, const outbox_row_t **rows,
                    size_t *n, outbox_fence_t *fence, outbox_diag_t *d)
{
    return broken_claim(handle, req, rows, n, fence, d, BROKEN_CORRECT & ~BROKEN_ONE_ORDER);
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-xlast");
    vtable.claim = xlast_claim;
}

BROKEN_ENTRY(build, descriptor)
