/* Broken on purpose: delayed rows are staged without their ordering key
 * ("a delayed event is scheduled on its own"), so the later rows of its
 * key overtake it: each row is still published on time, but out of its
 * key's order. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int stage_keyless_when_delayed(void *handle, const outbox_stage_ctx_t *ctx,
                                      const outbox_row_t *rows, size_t n, size_t *staged,
                                      outbox_diag_t *d)
{
    outbox_row_t *copy = calloc(n ? n : 1, sizeof *copy);
    if (copy == NULL)
        return OUTBOX_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        copy[i] = rows[i];
        if (copy[i].available_at != 0 || ctx->delay_us > 0)
            copy[i].ordering_key = NULL;
    }
    int rc = outbox_driver_entry_sqlite_base()->store->stage(handle, ctx, copy, n, staged, d);
    free(copy);
    return rc;
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-delaykey");
    vtable.stage = stage_keyless_when_delayed;
}

BROKEN_ENTRY(build, descriptor)
