/* A driver built for a future ABI major the host does not know. */
#include <outbox/driver.h>

static int init(const outbox_host_t *host, outbox_diag_t *d)
{
    (void)host;
    (void)d;
    return OUTBOX_OK;
}

static const outbox_driver_t descriptor = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = OUTBOX_ABI_MAJOR + 98,
    .abi_minor = 0,
    .kind = OUTBOX_DRIVER_SINK,
    .name = "wrong_abi",
    .version = "0",
    .init = init,
};

OUTBOX_DRIVER_ENTRY(descriptor)
