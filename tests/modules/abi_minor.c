/* A sink driver built for the ABI minor MODULE_ABI_MINOR (the meson file
 * builds it as minor 0, the host's minor and the next one). */
#include <outbox/driver.h>

static int init(const outbox_host_t *host, outbox_diag_t *d)
{
    (void)host;
    (void)d;
    return OUTBOX_OK;
}

static int k_open(const outbox_sink_open_t *p, void **h, outbox_diag_t *d)
{
    (void)p;
    (void)d;
    *h = NULL;
    return OUTBOX_OK;
}

static void k_close(void *h)
{
    (void)h;
}

static int k_publish(void *h, const outbox_message_t *msgs, size_t n,
                     outbox_publish_result_t *results, outbox_diag_t *d)
{
    (void)h, (void)msgs, (void)n, (void)results, (void)d;
    return OUTBOX_OK;
}

static const outbox_sink_vtable_t vtable = {
    .struct_size = sizeof(outbox_sink_vtable_t),
    .open = k_open,
    .close = k_close,
    .publish = k_publish,
};

static const outbox_driver_t descriptor = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = OUTBOX_ABI_MAJOR,
    .abi_minor = MODULE_ABI_MINOR,
    .kind = OUTBOX_DRIVER_SINK,
    .name = MODULE_NAME,
    .version = "0",
    .init = init,
    .sink = &vtable,
};

OUTBOX_DRIVER_ENTRY(descriptor)
