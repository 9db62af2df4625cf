/* Broken on purpose: schema check looks at indexes only. A table that
 * lacks required columns is reported for its missing indexes, never for
 * the columns themselves. */
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

static void indexes_only(void *ctx, const char *problem)
{
    filter_t *f = ctx;
    if (strstr(problem, "column") != NULL)
        return;
    f->kept++;
    if (f->report)
        f->report(f->ctx, problem);
}

static int check_indexes_only(void *handle, const outbox_schema_opts_t *opts,
                              outbox_schema_report_fn report, void *ctx, size_t *problems,
                              outbox_diag_t *d)
{
    filter_t f = {report, ctx, 0};
    int rc = outbox_driver_entry_sqlite_base()->store->schema_check(handle, opts, indexes_only, &f,
                                                                    NULL, d);
    if (problems)
        *problems = f.kept;
    return rc;
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-nocols");
    vtable.schema_check = check_indexes_only;
}

BROKEN_ENTRY(build, descriptor)
