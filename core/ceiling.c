/* What the benchmark ceilings beside the drivers (outbox/ceiling.h) share:
 * opening a store or a sink through the host with the driver a ceiling
 * was compiled with, and reaching that driver's own handle. */
#include <stdio.h>

#include "outbox/ceiling.h"

int outbox_ceiling_store_open(const outbox_driver_t *driver, const char *name, const char *uri,
                              const char *relation, uint32_t flags, outbox_store_t **s,
                              void **handle, char *err, size_t errlen)
{
    outbox_store_options_t so = {.struct_size = sizeof so, .relation = relation,
                                 .driver = name, .flags = flags};
    outbox_diag_t d = {0};
    *handle = NULL;
    if (outbox_store_open(uri, &so, s, &d) != OUTBOX_OK) {
        snprintf(err, errlen, "%s", d.message);
        return d.code == OUTBOX_EINVAL ? OUTBOX_CEILING_USAGE : OUTBOX_CEILING_FAIL;
    }
    if (outbox_store_driver(*s) != driver) {
        outbox_store_close(*s);
        *s = NULL;
        snprintf(err, errlen, "the %s ceiling's driver is not registered", name);
        return OUTBOX_CEILING_FAIL;
    }
    *handle = outbox_store_driver_handle(*s);
    return 0;
}

int outbox_ceiling_sink_open(const outbox_driver_t *driver, const char *name, const char *uri,
                             outbox_sink_t **k, void **handle, char *err, size_t errlen)
{
    outbox_sink_options_t so = {.struct_size = sizeof so, .driver = name};
    outbox_diag_t d = {0};
    *handle = NULL;
    if (outbox_sink_open(uri, &so, k, &d) != OUTBOX_OK) {
        snprintf(err, errlen, "%s", d.message);
        return d.code == OUTBOX_EINVAL ? OUTBOX_CEILING_USAGE : OUTBOX_CEILING_FAIL;
    }
    if (outbox_sink_driver(*k) != driver) {
        outbox_sink_close(*k);
        *k = NULL;
        snprintf(err, errlen, "the %s producer ceiling's driver is not registered", name);
        return OUTBOX_CEILING_FAIL;
    }
    *handle = outbox_sink_driver_handle(*k);
    return 0;
}
