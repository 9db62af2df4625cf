/* A good sink driver whose init() appends a line to the file named by
 * $OUTBOX_TEST_INIT_MARKER, so a test can tell whether, and how often,
 * init ran. Built twice under different names (MODULE_NAME) that claim the
 * same URI scheme, marker:. */
#include <outbox/driver.h>
#include <stdio.h>
#include <stdlib.h>

static int init(const outbox_host_t *host, outbox_diag_t *d)
{
    const char *marker = getenv("OUTBOX_TEST_INIT_MARKER");
    if (marker == NULL || marker[0] == '\0')
        return OUTBOX_OK;
    FILE *f = fopen(marker, "a");
    if (f == NULL)
        return host->error(d, OUTBOX_EPERMANENT, "cannot open %s", marker);
    fprintf(f, "%s\n", MODULE_NAME);
    fclose(f);
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

static const char *const schemes[] = {"marker", NULL};

static const outbox_driver_t descriptor = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = OUTBOX_ABI_MAJOR,
    .abi_minor = OUTBOX_ABI_MINOR,
    .kind = OUTBOX_DRIVER_SINK,
    .name = MODULE_NAME,
    .version = "0",
    .schemes = schemes,
    .init = init,
    .sink = &vtable,
};

OUTBOX_DRIVER_ENTRY(descriptor)
