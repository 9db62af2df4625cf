/* Broken on purpose: staging that advances the checkpoint outside the
 * transaction. The rows go in the transaction; the mark the stage call
 * asked for is written on its own once the transaction has ended, whether
 * it committed or rolled back, so a rolled-back batch still raises the
 * mark, and a crash between commit and the write loses it. */
#include <pthread.h>
#include <stdio.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

/* The one deferred advance (the battery drives one handle at a time here). */
static struct {
    void *handle;
    char key[256];
    int64_t hlc;
} deferred;

static const outbox_store_vtable_t *base(void)
{
    return outbox_driver_entry_sqlite_base()->store;
}

static int late_stage(void *handle, const outbox_stage_ctx_t *ctx, const outbox_row_t *rows,
                      size_t n, size_t *staged, outbox_diag_t *d)
{
    if (ctx == NULL || ctx->checkpoint_node_key == NULL)
        return base()->stage(handle, ctx, rows, n, staged, d);
    outbox_stage_ctx_t plain = *ctx;
    plain.checkpoint_node_key = NULL;
    plain.max_hlc = 0;
    int rc = base()->stage(handle, &plain, rows, n, staged, d);
    if (rc == OUTBOX_OK) {
        deferred.handle = handle;
        snprintf(deferred.key, sizeof deferred.key, "%s", ctx->checkpoint_node_key);
        deferred.hlc = ctx->max_hlc;
    }
    return rc;
}

static void flush(void *handle)
{
    if (deferred.handle != handle)
        return;
    outbox_stage_ctx_t none = {.struct_size = sizeof none};
    outbox_diag_t d = {0};
    base()->checkpoint_advance(handle, &none, deferred.key, deferred.hlc, &d);
    deferred.handle = NULL;
}

static int late_commit(void *handle, outbox_diag_t *d)
{
    int rc = base()->commit(handle, d);
    flush(handle);
    return rc;
}

static int late_rollback(void *handle, outbox_diag_t *d)
{
    int rc = base()->rollback(handle, d);
    flush(handle);
    return rc;
}

static int late_native_end(void *handle, void *native_tx, int commit, outbox_diag_t *d)
{
    int rc = base()->native_end(handle, native_tx, commit, d);
    flush(handle);
    return rc;
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-ckpt");
    vtable.stage = late_stage;
    vtable.commit = late_commit;
    vtable.rollback = late_rollback;
    vtable.native_end = late_native_end;
}

BROKEN_ENTRY(build, descriptor)
