/* Broken on purpose: schema check looks at indexes only. A table that
 * lacks required columns is reported for its missing indexes, never for
 * the columns themselves. */
#include <pthread.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int check_indexes_only(void *handle, const outbox_schema_opts_t *opts,
                              outbox_schema_report_fn report, void *ctx, size_t *problems,
                              outbox_diag_t *d)
{
    return broken_check_hiding(handle, opts, report, ctx, problems, d, "column");
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-nocols");
    vtable.schema_check = check_indexes_only;
}

BROKEN_ENTRY(build, descriptor)
