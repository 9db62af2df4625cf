/* Broken on purpose: a purge that ignores its bound. Every published row
 * of the route goes, however recently it was published. */
#include <pthread.h>
#include <stdint.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int purge_unbounded(void *handle, const char *route, int64_t before, uint64_t *count,
                           outbox_diag_t *d)
{
    (void)before;
    return outbox_driver_entry_sqlite_base()->store->purge(handle, route, INT64_MAX, count, d);
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-purge");
    vtable.purge = purge_unbounded;
}

BROKEN_ENTRY(build, descriptor)
