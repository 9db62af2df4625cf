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

/* The largest struct_size taken for outbox_sink_options_t: far above any
 * version's, far below the first bytes of a driver name read as a number
 * (what a caller of 0.1's outbox_sink_open(uri, "name", ...) passes). */
#define SINK_OPTIONS_SIZE_MAX 4096

int outbox_sink_open(const char *uri, const outbox_sink_options_t *opts, outbox_sink_t **out,
                     outbox_diag_t *d)
{
    outbox_diag_clear(d);
    if (out == NULL)
        return outbox_diag_set(d, OUTBOX_EINVAL, "outbox_sink_open: out is NULL");
    *out = NULL;
    if (uri == NULL)
        return outbox_diag_set(d, OUTBOX_EINVAL, "sink URI is missing");
    outbox_sink_options_t o = {.struct_size = sizeof o};
    if (opts != NULL) {
        if (opts->struct_size < sizeof(uint32_t) || opts->struct_size > SINK_OPTIONS_SIZE_MAX)
            return outbox_diag_set(d, OUTBOX_EINVAL,
                                   "sink options: struct_size %u is not that of an "
                                   "outbox_sink_options_t (set it to sizeof; since 0.2 the "
                                   "second argument is options, not a driver name)",
                                   (unsigned)opts->struct_size);
        OUTBOX_STRUCT_READ(outbox_sink_options_t, &o, opts, driver);
    }
    const char *driver = o.driver;
    outbox_sink_t *k = calloc(1, sizeof *k);
    if (k == NULL)
        return outbox_diag_set(d, OUTBOX_ENOMEM, "out of memory");
    int rc = outbox_uri_parse(uri, &k->uri, d);
    if (rc == OUTBOX_OK)
        rc = driver ? outbox_loader_load(driver, OUTBOX_DRIVER_SINK, &k->drv, d)
                    : outbox_loader_for_scheme(k->uri.uri.scheme, OUTBOX_DRIVER_SINK, &k->drv, d);
    if (rc == OUTBOX_OK)
        rc = outbox_loader_uri_ok(k->drv, &k->uri.uri, d);
    if (rc == OUTBOX_OK) {
        outbox_sink_open_t params = {.struct_size = sizeof params, .uri = &k->uri.uri, .defer_ok = 1};
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
        if (results[i].status < OUTBOX_PUBLISH_OK || results[i].status > OUTBOX_PUBLISH_DEFER) {
            results[i].status = OUTBOX_PUBLISH_RETRY;
            snprintf(results[i].message, sizeof results[i].message,
                     "sink %s returned an unknown result", k->drv->name);
        }
    }
    return OUTBOX_OK;
}

const outbox_driver_t *outbox_sink_driver(const outbox_sink_t *k)
{
    return k ? k->drv : NULL;
}

void *outbox_sink_driver_handle(const outbox_sink_t *k)
{
    return k ? k->h : NULL;
}

/* The optional entry m of the driver's sink vtable vt, or NULL when the
 * vtable is too old or leaves it out. */
#define SINK_ENTRY(vt, m) (OUTBOX_STRUCT_HAS(outbox_sink_vtable_t, (vt), m) ? (vt)->m : NULL)

static int unsupported(outbox_diag_t *d, const outbox_sink_t *k, const char *what)
{
    return outbox_diag_set(d, OUTBOX_ENOTSUP, "sink %s has no %s", k->drv->name, what);
}

static int destination_call(outbox_sink_t *k, const char *destination, int drop)
{
    if (k == NULL)
        return OUTBOX_EINVAL;
    outbox_diag_clear(&k->diag);
    if (destination == NULL || destination[0] == '\0')
        return outbox_diag_set(&k->diag, OUTBOX_EINVAL, "the destination is empty");
    int (*fn)(void *, const char *, outbox_diag_t *) =
        drop ? SINK_ENTRY(k->drv->sink, destination_drop)
             : SINK_ENTRY(k->drv->sink, destination_create);
    if (fn == NULL)
        return unsupported(&k->diag, k, drop ? "destination_drop" : "destination_create");
    int rc = fn(k->h, destination, &k->diag);
    if (rc != OUTBOX_OK && k->diag.message[0] == '\0')
        outbox_diag_set(&k->diag, rc, "%s %s: %s", drop ? "dropping" : "creating", destination,
                        outbox_strerror(rc));
    return rc;
}

int outbox_sink_destination_create(outbox_sink_t *k, const char *destination)
{
    return destination_call(k, destination, 0);
}

int outbox_sink_destination_drop(outbox_sink_t *k, const char *destination)
{
    return destination_call(k, destination, 1);
}

struct outbox_sink_reader {
    const outbox_driver_t *drv;
    void *h;
    outbox_diag_t diag;
};

int outbox_sink_reader_open(outbox_sink_t *k, const char *destination, outbox_sink_reader_t **out)
{
    if (k == NULL || out == NULL)
        return OUTBOX_EINVAL;
    *out = NULL;
    outbox_diag_clear(&k->diag);
    if (destination == NULL || destination[0] == '\0')
        return outbox_diag_set(&k->diag, OUTBOX_EINVAL, "the destination is empty");
    if (SINK_ENTRY(k->drv->sink, reader_open) == NULL ||
        SINK_ENTRY(k->drv->sink, reader_next) == NULL)
        return unsupported(&k->diag, k, "reader");
    outbox_sink_reader_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return outbox_diag_set(&k->diag, OUTBOX_ENOMEM, "out of memory");
    r->drv = k->drv;
    int rc = k->drv->sink->reader_open(k->h, destination, &r->h, &k->diag);
    if (rc != OUTBOX_OK) {
        if (k->diag.message[0] == '\0')
            outbox_diag_set(&k->diag, rc, "reading %s: %s", destination, outbox_strerror(rc));
        free(r);
        return rc;
    }
    *out = r;
    return OUTBOX_OK;
}

int outbox_sink_reader_read(outbox_sink_reader_t *r, int64_t timeout_us, outbox_received_t *out)
{
    int timeout_ms = outbox_us_to_ms(timeout_us);
    if (r == NULL || out == NULL)
        return OUTBOX_EINVAL;
    outbox_diag_clear(&r->diag);
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    int rc = r->drv->sink->reader_next(r->h, timeout_ms, out, &r->diag);
    if (rc != OUTBOX_OK && rc != OUTBOX_ENOTFOUND && r->diag.message[0] == '\0')
        outbox_diag_set(&r->diag, rc, "reading: %s", outbox_strerror(rc));
    return rc;
}

const char *outbox_sink_reader_message(const outbox_sink_reader_t *r)
{
    return r ? r->diag.message : "no reader";
}

void outbox_sink_reader_close(outbox_sink_reader_t *r)
{
    if (r == NULL)
        return;
    void (*close_fn)(void *) = SINK_ENTRY(r->drv->sink, reader_close);
    if (close_fn != NULL)
        close_fn(r->h);
    free(r);
}
