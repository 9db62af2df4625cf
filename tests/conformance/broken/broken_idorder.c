/* Broken on purpose: a claim ordered by id alone. Ids the core mints grow
 * with time, so it passes wherever ids agree with created_at; rows staged
 * with ids that disagree (an application importing old events, a driver
 * minting its own ids) come out in the wrong order. */
#include <pthread.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int idorder_claim(void *handle, const outbox_claim_req_t *req, const outbox_row_t **rows,
                    size_t *n, outbox_fence_t *fence, outbox_diag_t *d)
{
    return broken_claim(handle, req, rows, n, fence, d, BROKEN_CORRECT & ~BROKEN_CREATED_AT);
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-idorder");
    vtable.claim = idorder_claim;
}

BROKEN_ENTRY(build, descriptor)
