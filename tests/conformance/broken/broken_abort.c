/* Broken on purpose: a stage the store refuses takes the caller's whole
 * transaction with it, as a failed statement does in PostgreSQL without a
 * savepoint. Here the refusal is of payloads holding \u0000. */
#include <pthread.h>
#include <string.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int stage_aborting(void *handle, const outbox_stage_ctx_t *ctx, const outbox_row_t *rows,
                          size_t n, size_t *staged, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    for (size_t i = 0; i < n; i++) {
        if (rows[i].payload == NULL || strstr(rows[i].payload, "\\u0000") == NULL)
            continue;
        sqlite3 *db = ctx && ctx->native_tx ? ctx->native_tx : h->db;
        if (!sqlite3_get_autocommit(db))
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        if (staged)
            *staged = 0;
        return outbox_sqlite_fail(d, OUTBOX_EPERMANENT, "row %zu: the payload holds \\u0000", i);
    }
    return outbox_driver_entry_sqlite_base()->store->stage(handle, ctx, rows, n, staged, d);
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-abort");
    vtable.stage = stage_aborting;
}

BROKEN_ENTRY(build, descriptor)
