/* store-template: the skeleton of a liboutbox store driver. Copy this
 * folder, rename "template" everywhere, and fill the entries in one by one
 * until `outbox conformance --driver ./store-NAME.so --uri ...` passes.
 * docs/writing-a-store-driver.md describes what each entry must do.
 *
 * It builds against the installed SDK headers alone (pkg-config --cflags
 * liboutbox) and never links liboutbox: everything it needs from the host
 * (allocation, error messages, logging, the clock) comes through the
 * outbox_host_t table handed to init(). */
#include <string.h>

#include <outbox/driver.h>
#include <outbox/kit.h> /* buffers, identifier quoting, UTF-8 text, URI parameters */

#define TPL_NAME "template"

/* The host's services; set once by init(), before anything else runs. */
static const outbox_host_t *host;

/* One handle = one connection, used by one thread at a time. */
typedef struct tpl_handle {
    outbox_kit_relname_t relation; /* copied: inputs are only borrowed for the call */
    outbox_kit_relname_t checkpoint_relation;
    /* the connection, cached statements, and the rows of the last claim:
     * they stay valid until the next claim or close; settle must not free
     * them, since the settle items point into them */
} tpl_handle_t;

static int not_implemented(outbox_diag_t *d, const char *what)
{
    return host->error(d, OUTBOX_ENOTSUP, TPL_NAME " driver: %s is not implemented yet", what);
}

static int tpl_init(const outbox_host_t *h, outbox_diag_t *d)
{
    (void)d;
    host = h;
    return OUTBOX_OK;
}

static void tpl_close(void *handle)
{
    tpl_handle_t *h = handle;
    if (h == NULL)
        return;
    host->free(h);
}

/* Connect (params->uri is already split by the host), then detect the
 * optional columns and the checkpoint table. Without
 * OUTBOX_OPEN_SCHEMA_ONLY, a missing table or required column is
 * OUTBOX_ESCHEMA naming it. */
static int tpl_open(const outbox_store_open_t *params, void **handle, outbox_diag_t *d)
{
    *handle = NULL;
    tpl_handle_t *h = host->alloc(sizeof *h);
    if (h == NULL)
        return host->error(d, OUTBOX_ENOMEM, "out of memory");
    memset(h, 0, sizeof *h);
    /* The host has validated both names already; a driver driven directly
     * (a test, another host) gets the same check here. */
    if (outbox_kit_relname_parse(params->relation, &h->relation) != 0 ||
        outbox_kit_relname_parse(params->checkpoint_relation, &h->checkpoint_relation) != 0) {
        tpl_close(h);
        return host->error(d, OUTBOX_EINVAL, TPL_NAME ": invalid relation name");
    }
    *handle = h;
    return OUTBOX_OK;
}

/* The descriptor's static capabilities plus what open detected
 * (OUTBOX_STORE_CAP_HLC, _TRACEPARENT, _CHECKPOINT). */
static uint32_t tpl_capabilities(void *handle)
{
    (void)handle;
    return 0;
}

/* The canonical DDL for opts, allocated with host->alloc (the host frees it). */
static int tpl_schema_ddl(const outbox_schema_opts_t *opts, char **out, outbox_diag_t *d)
{
    (void)opts;
    *out = NULL;
    return not_implemented(d, "schema_ddl");
}

/* Insert rows as pending with attempts 0, skipping duplicates of
 * (route, event_id); *staged = rows inserted. In ctx->native_tx, in the own
 * open transaction (ctx->in_own_tx), or else atomically on its own. */
static int tpl_stage(void *handle, const outbox_stage_ctx_t *ctx, const outbox_row_t *rows,
                     size_t n, size_t *staged, outbox_diag_t *d)
{
    (void)handle;
    (void)ctx;
    (void)rows;
    (void)n;
    *staged = 0;
    return not_implemented(d, "stage");
}

/* Atomically take up to req->limit claimable rows in claim order, obeying
 * the per-key rule; set processing, the fence, attempts + 1. */
static int tpl_claim(void *handle, const outbox_claim_req_t *req, const outbox_row_t **rows,
                     size_t *n, outbox_fence_t *fence, outbox_diag_t *d)
{
    (void)handle;
    (void)req;
    *rows = NULL;
    *n = 0;
    memset(fence, 0, sizeof *fence);
    return not_implemented(d, "claim");
}

/* Apply every item in one round trip, each only to a row that still holds
 * the fence; set items[i].applied and *applied. */
static int tpl_settle(void *handle, const outbox_fence_t *fence, outbox_settle_item_t *items,
                      size_t n, size_t *applied, outbox_diag_t *d)
{
    (void)handle;
    (void)fence;
    for (size_t i = 0; i < n; i++)
        items[i].applied = 0;
    *applied = 0;
    return not_implemented(d, "settle");
}

static const outbox_store_vtable_t tpl_vtable = {
    .struct_size = sizeof(outbox_store_vtable_t),
    /* required */
    .open = tpl_open,
    .close = tpl_close,
    .capabilities = tpl_capabilities,
    .schema_ddl = tpl_schema_ddl,
    .stage = tpl_stage,
    .claim = tpl_claim,
    .settle = tpl_settle,
    /* optional: NULL means "not supported"; fill them in as you go */
    .schema_apply = NULL,       /* the battery needs it: it creates a relation per case */
    .schema_check = NULL,
    .begin = NULL,              /* with commit and rollback: OUTBOX_STORE_CAP_TRANSACTIONS */
    .commit = NULL,
    .rollback = NULL,
    .checkpoint_advance = NULL, /* with checkpoint_recover: OUTBOX_STORE_CAP_CHECKPOINT */
    .checkpoint_recover = NULL,
    .wait = NULL,               /* NULL: the relay polls */
    .stats = NULL,
    .replay = NULL,
    .purge = NULL,
    .schema_drop = NULL,        /* lets the battery clean up after itself */
    .native_begin = NULL,       /* with native_end: the battery stages as an application */
    .native_end = NULL,
};

static const char *const tpl_schemes[] = {TPL_NAME, NULL};

static const outbox_driver_t tpl_descriptor = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = OUTBOX_ABI_MAJOR,
    /* The lowest minor whose entries the driver relies on, not
     * OUTBOX_ABI_MINOR: 1 (the kit, monotonic_us); 3 once routes and
     * dead_list are filled in; 4 if open answers OUTBOX_EMISSING. */
    .abi_minor = 1,
    .kind = OUTBOX_DRIVER_STORE,
    .name = TPL_NAME,
    .version = "0.0.1",
    .schemes = tpl_schemes,
    .capabilities = 0,
    .init = tpl_init,
    .store = &tpl_vtable,
    .sink = NULL,
};

OUTBOX_DRIVER_ENTRY(tpl_descriptor)
