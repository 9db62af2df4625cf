/* The null: sink. Every message is reported OK and goes nowhere.
 *
 * It exists to measure the store side of a relay alone (tools/bench): the
 * relay still builds every message and its CloudEvents headers and settles
 * every row, but publishing costs nothing. It declares
 * OUTBOX_SINK_CAP_ORDERED (nothing ever fails, so nothing is ever delivered
 * out of order), so the relay hands it a whole batch per call.
 *
 * URI: exactly "null:" (or "null://"); a host, path or parameter is refused,
 * since whatever it meant would be silently ignored.
 */
#include <stddef.h>

#include "outbox/kit.h"
#include "outbox/version.h"

static const outbox_host_t *host;

/* Every handle is this one static byte: the sink has no state. */
static char null_handle;

static int null_init(const outbox_host_t *h, outbox_diag_t *d)
{
    (void)d;
    host = h;
    return OUTBOX_OK;
}

static int null_open(const outbox_sink_open_t *params, void **handle, outbox_diag_t *d)
{
    *handle = NULL;
    const outbox_uri_t *uri = params->uri;
    char shown[OUTBOX_MESSAGE_MAX / 2];
    outbox_kit_uri_show(host, uri, shown, sizeof shown);
    if (uri->n_params > 0)
        return host->error(d, OUTBOX_EINVAL, "null sink takes no parameters, got %s in %s",
                           uri->params[0].key ? uri->params[0].key : "?", shown);
    if ((uri->host && uri->host[0]) || uri->user || uri->password || uri->port ||
        (uri->path && uri->path[0]))
        return host->error(d, OUTBOX_EINVAL, "null sink URI takes no host or path: %s (use null:)",
                           shown);
    *handle = &null_handle;
    return OUTBOX_OK;
}

static void null_close(void *handle)
{
    (void)handle;
}

static int null_publish(void *handle, const outbox_message_t *msgs, size_t n,
                        outbox_publish_result_t *results, outbox_diag_t *d)
{
    (void)handle, (void)msgs, (void)d;
    for (size_t i = 0; i < n; i++)
        results[i].status = OUTBOX_PUBLISH_OK;
    return OUTBOX_OK;
}

static const outbox_sink_vtable_t null_vtable = {
    .struct_size = sizeof(outbox_sink_vtable_t),
    .open = null_open,
    .close = null_close,
    .publish = null_publish,
};

static const char *const null_schemes[] = {"null", NULL};

static const outbox_driver_t null_driver = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = OUTBOX_ABI_MAJOR,
    .abi_minor = 0, /* the lowest it relies on: nothing past 1.0 (the kit is inline) */
    .kind = OUTBOX_DRIVER_SINK,
    .name = "null",
    .version = OUTBOX_VERSION,
    .schemes = null_schemes,
    .capabilities = OUTBOX_SINK_CAP_ORDERED,
    .init = null_init,
    .store = NULL,
    .sink = &null_vtable,
};

OUTBOX_DRIVER_ENTRY(null_driver)
