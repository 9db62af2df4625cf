/* Broken on purpose: an inbox purge that ignores its bound. Every record
 * of the consumer goes, however recently it was received, and a redelivery
 * of an event handled a moment ago is handled again. */
#include <pthread.h>
#include <stdint.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static int purge_unbounded(void *handle, const char *consumer, int64_t before_us,
                           uint64_t *count, outbox_diag_t *d)
{
    (void)before_us;
    return outbox_driver_entry_sqlite_base()->store->inbox_purge(handle, consumer, INT64_MAX,
                                                                 count, d);
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-inboxpurge");
    vtable.inbox_purge = purge_unbounded;
}

BROKEN_ENTRY(build, descriptor)
