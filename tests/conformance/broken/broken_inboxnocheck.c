/* Broken on purpose: a schema check that never looks at the inbox. Asked
 * about the inbox too, it checks the outbox alone, and a missing inbox
 * table goes unreported until the first accept fails. */
#include <pthread.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int check_without_inbox(void *handle, const outbox_schema_opts_t *opts,
                               outbox_schema_report_fn report, void *ctx, size_t *problems,
                               outbox_diag_t *d)
{
    outbox_schema_opts_t o = *opts;
    o.flags &= ~OUTBOX_SCHEMA_INBOX;
    return outbox_driver_entry_sqlite_base()->store->schema_check(handle, &o, report, ctx,
                                                                  problems, d);
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-inboxnocheck");
    vtable.schema_check = check_without_inbox;
}

BROKEN_ENTRY(build, descriptor)
