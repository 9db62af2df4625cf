/* Broken on purpose: a store that says it stages delayed events
 * (OUTBOX_STORE_CAP_DELAYED) but writes every row as due at once: the
 * instant and the delay are dropped on the way in, and a delayed event is
 * published early. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int stage_now(void *handle, const outbox_stage_ctx_t *ctx, const outbox_row_t *rows,
                     size_t n, size_t *staged, outbox_diag_t *d)
{
    outbox_row_t *due = calloc(n ? n : 1, sizeof *due);
    if (due == NULL)
        return OUTBOX_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        due[i] = rows[i];
        due[i].available_at = 0;
    }
    outbox_stage_ctx_t now = *ctx;
    now.delay_us = 0;
    int rc = outbox_driver_entry_sqlite_base()->store->stage(handle, &now, due, n, staged, d);
    free(due);
    return rc;
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-delaylost");
    vtable.stage = stage_now;
}

BROKEN_ENTRY(build, descriptor)
