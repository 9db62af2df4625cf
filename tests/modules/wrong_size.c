/* A descriptor that claims to be smaller than ABI 1.0's. */
#include <outbox/driver.h>

static const outbox_driver_t descriptor = {
    .struct_size = 8,
    .abi_major = OUTBOX_ABI_MAJOR,
    .kind = OUTBOX_DRIVER_SINK,
    .name = "wrong_size",
};

OUTBOX_DRIVER_ENTRY(descriptor)
