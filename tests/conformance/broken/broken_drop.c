/* Broken on purpose: a claim that loses a field on the way back. It takes
 * the right rows in the right order, but reads causation_id back as NULL,
 * the way a SELECT list that forgot one column does; the sink then sends
 * events without their causation header. */
#include <pthread.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int drop_claim(void *handle, const outbox_claim_req_t *req, const outbox_row_t **rows,
                      size_t *n, outbox_fence_t *fence, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    int rc = outbox_driver_entry_sqlite_base()->store->claim(handle, req, rows, n, fence, d);
    for (size_t i = 0; rc == OUTBOX_OK && i < h->n_rows; i++)
        h->rows[i].causation_id = NULL;
    return rc;
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-drop");
    vtable.claim = drop_claim;
}

BROKEN_ENTRY(build, descriptor)
