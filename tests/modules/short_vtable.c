/* A store driver whose vtable says it is 24 bytes: it holds open and
 * close but none of the later required entries. */
#include <outbox/driver.h>

static int init(const outbox_host_t *host, outbox_diag_t *d)
{
    return host->error(d, OUTBOX_EPERMANENT, "init must not run for a refused driver");
}

static int s_open(const outbox_store_open_t *p, void **h, outbox_diag_t *d)
{
    (void)p;
    (void)d;
    *h = NULL;
    return OUTBOX_OK;
}

static void s_close(void *h)
{
    (void)h;
}

static const outbox_store_vtable_t vtable = {
    .struct_size = 24,
    .open = s_open,
    .close = s_close,
};

static const outbox_driver_t descriptor = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = OUTBOX_ABI_MAJOR,
    .abi_minor = OUTBOX_ABI_MINOR,
    .kind = OUTBOX_DRIVER_STORE,
    .name = "short_vtable",
    .version = "0",
    .init = init,
    .store = &vtable,
};

OUTBOX_DRIVER_ENTRY(descriptor)
