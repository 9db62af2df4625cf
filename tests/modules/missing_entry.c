/* A store driver whose vtable lacks the required claim entry. Its init
 * would fail loudly if the loader ever called it. */
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

static uint32_t s_caps(void *h)
{
    (void)h;
    return 0;
}

static int s_ddl(const outbox_schema_opts_t *o, char **out, outbox_diag_t *d)
{
    (void)o;
    (void)d;
    *out = NULL;
    return OUTBOX_OK;
}

static int s_stage(void *h, const outbox_stage_ctx_t *c, const outbox_row_t *r, size_t n,
                   size_t *staged, outbox_diag_t *d)
{
    (void)h, (void)c, (void)r, (void)n, (void)d;
    *staged = 0;
    return OUTBOX_OK;
}

static const outbox_store_vtable_t vtable = {
    .struct_size = sizeof(outbox_store_vtable_t),
    .open = s_open,
    .close = s_close,
    .capabilities = s_caps,
    .schema_ddl = s_ddl,
    .stage = s_stage,
    /* .claim and .settle deliberately missing */
};

static const outbox_driver_t descriptor = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = OUTBOX_ABI_MAJOR,
    .abi_minor = OUTBOX_ABI_MINOR,
    .kind = OUTBOX_DRIVER_STORE,
    .name = "missing_entry",
    .version = "0",
    .init = init,
    .store = &vtable,
};

OUTBOX_DRIVER_ENTRY(descriptor)
