/* Broken on purpose: schema check never looks at the ordering_key column.
 * A table without it is reported for everything else that is missing,
 * indexes on ordering_key included, but never for the column itself, so
 * the relay's open is the first to say it is missing. */
#include <pthread.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int check_without_ordering_key(void *handle, const outbox_schema_opts_t *opts,
                                      outbox_schema_report_fn report, void *ctx, size_t *problems,
                                      outbox_diag_t *d)
{
    return broken_check_hiding(handle, opts, report, ctx, problems, d, "column ordering_key");
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-nokey");
    vtable.schema_check = check_without_ordering_key;
}

BROKEN_ENTRY(build, descriptor)
