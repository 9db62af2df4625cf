/* A store driver whose vtable lacks the required claim entry. Its init
 * would fail loudly if the loader ever called it. Built with PARTIAL_TX it
 * has every required entry but only begin of the three transaction
 * entries, which must come together; with PARTIAL_INBOX, every required
 * entry and inbox_accept without inbox_purge and inbox_stats. */
#if defined(PARTIAL_INBOX) && !defined(PARTIAL_TX)
#define PARTIAL_TX
#endif
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

#ifdef PARTIAL_TX
static int s_claim(void *h, const outbox_claim_req_t *req, const outbox_row_t **rows, size_t *n,
                   outbox_fence_t *fence, outbox_diag_t *d)
{
    (void)h, (void)req, (void)fence, (void)d;
    *rows = NULL;
    *n = 0;
    return OUTBOX_OK;
}

static int s_settle(void *h, const outbox_fence_t *fence, outbox_settle_item_t *items, size_t n,
                    size_t *applied, outbox_diag_t *d)
{
    (void)h, (void)fence, (void)items, (void)n, (void)d;
    *applied = 0;
    return OUTBOX_OK;
}

#ifndef PARTIAL_INBOX
static int s_begin(void *h, outbox_diag_t *d)
{
    (void)h, (void)d;
    return OUTBOX_OK;
}
#endif
#endif

#ifdef PARTIAL_INBOX
static int s_inbox_accept(void *h, const outbox_stage_ctx_t *c, const char *consumer,
                          const char *event_id, int *is_new, outbox_diag_t *d)
{
    (void)h, (void)c, (void)consumer, (void)event_id, (void)d;
    *is_new = 0;
    return OUTBOX_OK;
}
#endif

static const outbox_store_vtable_t vtable = {
    .struct_size = sizeof(outbox_store_vtable_t),
    .open = s_open,
    .close = s_close,
    .capabilities = s_caps,
    .schema_ddl = s_ddl,
    .stage = s_stage,
#if defined(PARTIAL_INBOX)
    .claim = s_claim,
    .settle = s_settle,
    .inbox_accept = s_inbox_accept, /* inbox_purge and inbox_stats deliberately missing */
#elif defined(PARTIAL_TX)
    .claim = s_claim,
    .settle = s_settle,
    .begin = s_begin, /* commit and rollback deliberately missing */
#else
    /* .claim and .settle deliberately missing */
#endif
};

static const outbox_driver_t descriptor = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = OUTBOX_ABI_MAJOR,
    .abi_minor = OUTBOX_ABI_MINOR,
    .kind = OUTBOX_DRIVER_STORE,
#if defined(PARTIAL_INBOX)
    .name = "partial_inbox",
#elif defined(PARTIAL_TX)
    .name = "partial_tx",
#else
    .name = "missing_entry",
#endif
    .version = "0",
    .init = init,
    .store = &vtable,
};

OUTBOX_DRIVER_ENTRY(descriptor)
