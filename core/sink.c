/* The sink handle: a loaded sink driver and one of its connections. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_int.h"

struct outbox_sink {
    const outbox_driver_t *drv;
    void *h;
    outbox_uri_owned_t uri;
    outbox_diag_t diag;
};

int outbox_sink_open(const char *uri, const char *driver, outbox_sink_t **out, outbox_diag_t *d)
{
    outbox_diag_clear(d);
    if (out == NULL)
        return outbox_diag_set(d, OUTBOX_EINVAL, "outbox_sink_open: out is NULL");
    *out = NULL;
    if (uri == NULL)
        return outbox_diag_set(d, OUTBOX_EINVAL, "sink URI is missing");
    outbox_sink_t *k = calloc(1, sizeof *k);
    if (k == NULL)
        return outbox_diag_set(d, OUTBOX_ENOMEM, "out of memory");
    int rc = outbox_uri_parse(uri, &k->uri, d);
    if (rc == OUTBOX_OK)
        rc = driver ? outbox_loader_load(driver, OUTBOX_DRIVER_SINK, &k->drv, d)
                    : outbox_loader_for_scheme(k->uri.uri.scheme, OUTBOX_DRIVER_SINK, &k->drv, d);
    if (rc == OUTBOX_OK) {
        outbox_sink_open_t params = {.struct_size = sizeof params, .uri = &k->uri.uri};
        outbox_diag_t dd = {0};
        rc = k->drv->sink->open(&params, &k->h, &dd);
        if (rc != OUTBOX_OK) {
            k->h = NULL;
            outbox_diag_set(d, rc, "%s", dd.message[0] ? dd.message : outbox_strerror(rc));
        }
    }
    if (rc != OUTBOX_OK) {
        outbox_sink_close(k);
        return rc;
    }
    *out = k;
    return OUTBOX_OK;
}

void outbox_sink_close(outbox_sink_t *k)
{
    if (k == NULL)
        return;
    if (k->h != NULL)
        k->drv->sink->close(k->h);
    outbox_uri_free(&k->uri);
    free(k);
}

const char *outbox_sink_message(const outbox_sink_t *k)
{
    return k ? k->diag.message : "no sink";
}

uint32_t outbox_sink_capabilities(const outbox_sink_t *k)
{
    return k ? k->drv->capabilities : 0;
}

int outbox_sink_publish(outbox_sink_t *k, const outbox_message_t *msgs, size_t n,
                        outbox_publish_result_t *results)
{
    if (k == NULL || (n > 0 && (msgs == NULL || results == NULL)))
        return OUTBOX_EINVAL;
    outbox_diag_clear(&k->diag);
    if (n == 0)
        return OUTBOX_OK;
    memset(results, 0, n * sizeof *results);
    int rc = k->drv->sink->publish(k->h, msgs, n, results, &k->diag);
    if (rc != OUTBOX_OK) {
        /* The call as a whole failed: nothing is known to be delivered. */
        if (k->diag.message[0] == '\0')
            outbox_diag_set(&k->diag, rc, "publish: %s", outbox_strerror(rc));
        for (size_t i = 0; i < n; i++) {
            results[i].status = OUTBOX_PUBLISH_RETRY;
            snprintf(results[i].message, sizeof results[i].message, "%s", k->diag.message);
        }
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        if (results[i].status < OUTBOX_PUBLISH_OK || results[i].status > OUTBOX_PUBLISH_REJECT) {
            results[i].status = OUTBOX_PUBLISH_RETRY;
            snprintf(results[i].message, sizeof results[i].message,
                     "sink %s returned an unknown result", k->drv->name);
        }
    }
    return OUTBOX_OK;
}
