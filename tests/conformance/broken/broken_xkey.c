/* Broken on purpose: a claim that applies the per-key rule to pending rows
 * only. A row whose lease expired is taken back however its key stands, so
 * when a crashed relay held two rows of a key and the head alone was
 * reclaimed, the row behind it is claimed too while the head is in flight
 * again. */
#include <pthread.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int xkey_claim(void *handle, const outbox_claim_req_t *req, const outbox_row_t **rows,
                      size_t *n, outbox_fence_t *fence, outbox_diag_t *d)
{
    return broken_claim(handle, req, rows, n, fence, d, BROKEN_CORRECT & ~BROKEN_EXPIRED_KEY_RULE);
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-xkey");
    vtable.claim = xkey_claim;
}

BROKEN_ENTRY(build, descriptor)
