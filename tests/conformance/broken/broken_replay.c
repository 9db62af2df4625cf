/* Broken on purpose: a replay that ignores the event id. Asked to bring
 * back one dead event, it brings back every dead row of the route. */
#include <pthread.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int replay_all(void *handle, const char *route, const char *event_id, uint64_t *count,
                      outbox_diag_t *d)
{
    (void)event_id;
    return outbox_driver_entry_sqlite_base()->store->replay(handle, route, NULL, count, d);
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-replay");
    vtable.replay = replay_all;
}

BROKEN_ENTRY(build, descriptor)
