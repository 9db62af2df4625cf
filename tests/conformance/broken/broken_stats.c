/* Broken on purpose: stats that ignore the route. Every route's rows are
 * counted whichever route was asked about. */
#include <pthread.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int stats_every_route(void *handle, const char *route, outbox_stats_t *out,
                             outbox_diag_t *d)
{
    (void)route;
    return outbox_driver_entry_sqlite_base()->store->stats(handle, NULL, out, d);
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-stats");
    vtable.stats = stats_every_route;
}

BROKEN_ENTRY(build, descriptor)
