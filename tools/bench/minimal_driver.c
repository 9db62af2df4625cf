/* store-bench-minimal: the in-tree SQLite driver cut down to the entries
 * every store driver must have (open, close, capabilities, schema_ddl,
 * stage, claim, settle), for outbox-bench's smoke test: it shows how the
 * bench runs on a driver as a third party's first version looks, with no
 * stats, purge, schema_apply or transactions.
 *
 * It links the driver's sources statically (built with
 * -DOUTBOX_DRIVER_STATIC=sqlite_base, so their entry is
 * outbox_driver_entry_sqlite_base()) and exports a copy of the descriptor
 * under its own name, serving no URI scheme: load it by path. */
#include <pthread.h>

#include <outbox/driver.h>

const outbox_driver_t *outbox_driver_entry_sqlite_base(void);

/* What the cut-down driver no longer has a right to claim. */
#define MINIMAL_DROPPED_CAPS                                                                   \
    (OUTBOX_STORE_CAP_TRANSACTIONS | OUTBOX_STORE_CAP_NATIVE_TX | OUTBOX_STORE_CAP_CHECKPOINT | \
     OUTBOX_STORE_CAP_WAIT)

static outbox_driver_t minimal;
static outbox_store_vtable_t minimal_vt;
static const outbox_store_vtable_t *base_vt;

static uint32_t minimal_capabilities(void *handle)
{
    return base_vt->capabilities(handle) & ~MINIMAL_DROPPED_CAPS;
}

static void build(void)
{
    const outbox_driver_t *base = outbox_driver_entry_sqlite_base();
    base_vt = base->store;
    minimal = *base;
    minimal.name = "bench-minimal";
    minimal.schemes = NULL;
    minimal.capabilities &= ~MINIMAL_DROPPED_CAPS;
    minimal_vt = (outbox_store_vtable_t){
        .struct_size = sizeof minimal_vt,
        .open = base_vt->open,
        .close = base_vt->close,
        .capabilities = minimal_capabilities,
        .schema_ddl = base_vt->schema_ddl,
        .stage = base_vt->stage,
        .claim = base_vt->claim,
        .settle = base_vt->settle,
    };
    minimal.store = &minimal_vt;
}

__attribute__((visibility("default"))) const outbox_driver_t *outbox_driver_entry(void);
__attribute__((visibility("default"))) const outbox_driver_t *outbox_driver_entry(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, build);
    return &minimal;
}
