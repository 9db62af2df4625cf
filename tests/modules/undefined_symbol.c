/* A module that needs a data symbol nothing defines. A data reference is
 * bound when the module is loaded, even lazily, so the dynamic loader
 * refuses it with "undefined symbol". */
#include <outbox/driver.h>

extern const char outbox_test_symbol_nobody_defines[];

static const outbox_driver_t descriptor = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = OUTBOX_ABI_MAJOR,
    .abi_minor = OUTBOX_ABI_MINOR,
    .kind = OUTBOX_DRIVER_SINK,
    .name = "undefined_symbol",
    .version = outbox_test_symbol_nobody_defines,
};

OUTBOX_DRIVER_ENTRY(descriptor)
