/* Broken on purpose: a claim that ignores ordering keys. It is exclusive
 * and takes rows oldest first, but never holds a key's later rows back
 * while an earlier one is in flight or waiting for its retry, so
 * concurrent relays publish a key's rows out of order. */
#include <pthread.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int unordered_claim(void *handle, const outbox_claim_req_t *req, const outbox_row_t **rows,
                           size_t *n, outbox_fence_t *fence, outbox_diag_t *d)
{
    return broken_claim(handle, req, rows, n, fence, d, BROKEN_CORRECT & ~BROKEN_KEY_RULE);
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-order");
    vtable.claim = unordered_claim;
}

BROKEN_ENTRY(build, descriptor)
