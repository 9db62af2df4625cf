/* Broken on purpose: schema check never looks at the ordering_key column.
 * A table without it is reported for everything else that is missing,
 * indexes on ordering_key included, but never for the column itself, so
 * the relay's open is the first to say it is missing. */
#include <pthread.h>
#include <string.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

typedef struct filter {
    outbox_schema_report_fn report;
    void *ctx;
    size_t kept;
} filter_t;

static void without_ordering_key(void *ctx, const char *problem)
{
    filter_t *f = ctx;
    if (strstr(problem, "column ordering_key") != NULL)
        return;
    f->kept++;
    if (f->report)
        f->report(f->ctx, problem);
}

static int check_without_ordering_key(void *handle, const outbox_schema_opts_t *opts,
                                      outbox_schema_report_fn report, void *ctx, size_t *problems,
                                      outbox_diag_t *d)
{
    filter_t f = {report, ctx, 0};
    int rc = outbox_driver_entry_sqlite_base()->store->schema_check(handle, opts,
                                                                    without_ordering_key, &f, NULL, d);
    if (problems)
        *problems = f.kept;
    return rc;
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-nokey");
    vtable.schema_check = check_without_ordering_key;
}

BROKEN_ENTRY(build, descriptor)
