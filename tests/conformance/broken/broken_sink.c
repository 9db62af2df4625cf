/* Deliberately broken sink drivers, to prove the sink battery fails them.
 *
 * Each is a loadable module that links a real sink driver's sources
 * statically (built with -DOUTBOX_DRIVER_STATIC=sink_base, so its entry is
 * outbox_driver_entry_sink_base()) and exports a copy of its descriptor
 * whose publish breaks one promise, chosen at build time:
 *
 *   BROKEN_SINK_DROP     leaves the tenantid header out of every message;
 *   BROKEN_SINK_EARLY    reports OK whatever the broker said, as a sink
 *                        that answers before the broker acknowledged;
 *   BROKEN_SINK_REORDER  hands the broker each key's first two messages of
 *                        a call swapped;
 *   BROKEN_SINK_MSGID    gives the broker the outbox row's id as the dedupe
 *                        key (Nats-Msg-Id) instead of the event id;
 *   BROKEN_SINK_CETRACE  writes traceparent as "ce-traceparent", a name its
 *                        own reader maps back but other consumers miss;
 *   BROKEN_SINK_GOESON   holds a key's later messages after a REJECT but not
 *                        after a RETRY: it publishes them again on their own.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "outbox/driver.h"

const outbox_driver_t *outbox_driver_entry_sink_base(void);

static outbox_driver_t descriptor;
static outbox_sink_vtable_t vtable;
static const outbox_sink_vtable_t *real;

#if defined(BROKEN_SINK_DROP)
#define BROKEN_NAME "sink-broken-drop"

static int broken_publish(void *handle, const outbox_message_t *msgs, size_t n,
                          outbox_publish_result_t *results, outbox_diag_t *d)
{
    outbox_message_t *copy = calloc(n ? n : 1, sizeof *copy);
    outbox_header_t *headers = calloc(n ? n : 1, sizeof(outbox_header_t) * 16);
    int rc = OUTBOX_ENOMEM;
    if (copy != NULL && headers != NULL) {
        for (size_t i = 0; i < n; i++) {
            copy[i] = msgs[i];
            outbox_header_t *h = headers + i * 16;
            size_t k = 0;
            for (size_t j = 0; j < msgs[i].n_headers && k < 16; j++)
                if (strcmp(msgs[i].headers[j].name, "tenantid") != 0)
                    h[k++] = msgs[i].headers[j];
            copy[i].headers = h;
            copy[i].n_headers = k;
        }
        rc = real->publish(handle, copy, n, results, d);
    }
    free(copy);
    free(headers);
    return rc;
}

#elif defined(BROKEN_SINK_EARLY)
#define BROKEN_NAME "sink-broken-early"

static int broken_publish(void *handle, const outbox_message_t *msgs, size_t n,
                          outbox_publish_result_t *results, outbox_diag_t *d)
{
    real->publish(handle, msgs, n, results, d);
    for (size_t i = 0; i < n; i++) {
        results[i].status = OUTBOX_PUBLISH_OK;
        results[i].message[0] = '\0';
    }
    return OUTBOX_OK;
}

#elif defined(BROKEN_SINK_REORDER)
#define BROKEN_NAME "sink-broken-reorder"

static int same_key(const outbox_message_t *a, const outbox_message_t *b)
{
    return a->key != NULL && b->key != NULL && strcmp(a->key, b->key) == 0;
}

static int broken_publish(void *handle, const outbox_message_t *msgs, size_t n,
                          outbox_publish_result_t *results, outbox_diag_t *d)
{
    size_t *order = calloc(n ? n : 1, sizeof *order);
    outbox_message_t *copy = calloc(n ? n : 1, sizeof *copy);
    outbox_publish_result_t *res = calloc(n ? n : 1, sizeof *res);
    char *swapped = calloc(n ? n : 1, 1);
    int rc = OUTBOX_ENOMEM;
    if (order != NULL && copy != NULL && res != NULL && swapped != NULL) {
        for (size_t i = 0; i < n; i++)
            order[i] = i;
        /* The first message of each key trades places with the key's next. */
        for (size_t i = 0; i < n; i++) {
            int first = !swapped[i];
            for (size_t j = 0; j < i && first; j++)
                first = !same_key(&msgs[j], &msgs[i]);
            for (size_t j = i + 1; j < n && first; j++)
                if (same_key(&msgs[j], &msgs[i])) {
                    order[i] = j;
                    order[j] = i;
                    swapped[i] = swapped[j] = 1;
                    break;
                }
        }
        for (size_t i = 0; i < n; i++)
            copy[i] = msgs[order[i]];
        rc = real->publish(handle, copy, n, res, d);
        for (size_t i = 0; i < n; i++)
            results[order[i]] = res[i];
    }
    free(order);
    free(copy);
    free(res);
    free(swapped);
    return rc;
}

#elif defined(BROKEN_SINK_MSGID)
#define BROKEN_NAME "sink-broken-msgid"

/* The sink takes the dedupe key from event_id: hand it the row's id. */
static int broken_publish(void *handle, const outbox_message_t *msgs, size_t n,
                          outbox_publish_result_t *results, outbox_diag_t *d)
{
    outbox_message_t *copy = calloc(n ? n : 1, sizeof *copy);
    if (copy == NULL)
        return OUTBOX_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        copy[i] = msgs[i];
        if (msgs[i].row != NULL && msgs[i].row->id != NULL)
            copy[i].event_id = msgs[i].row->id;
    }
    int rc = real->publish(handle, copy, n, results, d);
    free(copy);
    return rc;
}

#elif defined(BROKEN_SINK_CETRACE)
#define BROKEN_NAME "sink-broken-cetrace"
#include <dlfcn.h>
#include <nats/nats.h>

/* The sink's sources, linked into this module, call this one (hidden
 * symbols bind inside the module); it renames traceparent on the way to
 * libnats' own. */
natsStatus natsMsgHeader_Set(natsMsg *msg, const char *key, const char *value)
{
    natsStatus (*set)(natsMsg *, const char *, const char *);
    *(void **)&set = dlsym(RTLD_NEXT, "natsMsgHeader_Set");
    if (set == NULL)
        return NATS_ERR;
    return set(msg, strcmp(key, "traceparent") == 0 ? "ce-traceparent" : key, value);
}

static int broken_publish(void *handle, const outbox_message_t *msgs, size_t n,
                          outbox_publish_result_t *results, outbox_diag_t *d)
{
    return real->publish(handle, msgs, n, results, d);
}

#elif defined(BROKEN_SINK_GOESON)
#define BROKEN_NAME "sink-broken-goeson"

/* After the real call, a message held back only because an earlier one of
 * its key was RETRY goes out again on its own, as a sink would that keeps
 * publishing a key after a transient failure. */
static int broken_publish(void *handle, const outbox_message_t *msgs, size_t n,
                          outbox_publish_result_t *results, outbox_diag_t *d)
{
    int rc = real->publish(handle, msgs, n, results, d);
    if (rc != OUTBOX_OK)
        return rc;
    for (size_t i = 0; i < n; i++) {
        if (results[i].status != OUTBOX_PUBLISH_RETRY || msgs[i].key == NULL)
            continue;
        int after_retry = 0, after_reject = 0;
        for (size_t j = 0; j < i; j++)
            if (msgs[j].key != NULL && strcmp(msgs[j].key, msgs[i].key) == 0) {
                after_retry |= results[j].status == OUTBOX_PUBLISH_RETRY;
                after_reject |= results[j].status == OUTBOX_PUBLISH_REJECT;
            }
        if (after_retry && !after_reject) {
            outbox_publish_result_t one;
            memset(&one, 0, sizeof one);
            if (real->publish(handle, &msgs[i], 1, &one, d) == OUTBOX_OK)
                results[i] = one;
        }
    }
    return OUTBOX_OK;
}

#else
#error "define BROKEN_SINK_DROP, _EARLY, _REORDER, _MSGID, _CETRACE or _GOESON"
#endif

static void build(void)
{
    const outbox_driver_t *base = outbox_driver_entry_sink_base();
    real = base->sink;
    descriptor = *base;
    size_t size = real->struct_size < sizeof vtable ? real->struct_size : sizeof vtable;
    memcpy(&vtable, real, size);
    vtable.struct_size = (uint32_t)size;
    vtable.publish = broken_publish;
    descriptor.name = BROKEN_NAME;
    descriptor.schemes = NULL; /* load it by path, never for the real driver's URIs */
    descriptor.sink = &vtable;
}

__attribute__((visibility("default"))) const outbox_driver_t *outbox_driver_entry(void);
__attribute__((visibility("default"))) const outbox_driver_t *outbox_driver_entry(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, build);
    return &descriptor;
}
