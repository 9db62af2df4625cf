/* sink-mem13: an in-memory sink built against the frozen ABI 1.3 headers
 * (tests/abi/v1_3/include) and nothing else, as a third party's sink of
 * that time was: tests/abi checks that the current host still loads it and
 * that it passes the sink conformance battery.
 *
 * URIs: mem13:NAME. Every handle of one process with the same NAME shares
 * its destinations, each a list of the messages published to it, which a
 * reader reads from the first. It is ordered (a key stops at its first
 * failure within a call) and dedupes on the event id; a message of more
 * than 1 MiB is refused, as brokers' default limits refuse one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox/kit.h"

#define MEM13_NAME "mem13"
#define MEM13_MAX_BYTES ((size_t)1 << 20)
#define MEM13_CAPS (OUTBOX_SINK_CAP_ORDERED | OUTBOX_SINK_CAP_DEDUPE)

static const outbox_host_t *H;

/* One message as published: every string in one block after it. */
typedef struct stored {
    struct stored *next;
    const char *event_id, *key, *payload;
    size_t payload_len, n_headers;
    outbox_header_t headers[];
} stored_t;

typedef struct destination {
    struct destination *next;
    char *name;
    stored_t *first, *last;
} destination_t;

/* The process's destinations; the battery runs each case in a process of
 * its own, and a sink handle is used by one thread at a time. */
static destination_t *destinations;

static destination_t *find(const char *name, int create)
{
    for (destination_t *t = destinations; t != NULL; t = t->next)
        if (strcmp(t->name, name) == 0)
            return t;
    if (!create)
        return NULL;
    destination_t *t = H->alloc(sizeof *t);
    char *copy = t ? outbox_kit_strdup(H, name) : NULL;
    if (copy == NULL) {
        H->free(t);
        return NULL;
    }
    *t = (destination_t){.next = destinations, .name = copy};
    destinations = t;
    return t;
}

static int holds(const destination_t *t, const char *event_id)
{
    for (const stored_t *m = t->first; m != NULL; m = m->next)
        if (strcmp(m->event_id, event_id) == 0)
            return 1;
    return 0;
}

static stored_t *copy_message(const outbox_message_t *m)
{
    size_t bytes = strlen(m->event_id) + 1 + (m->key ? strlen(m->key) + 1 : 0) + m->payload_len + 1;
    for (size_t i = 0; i < m->n_headers; i++)
        bytes += strlen(m->headers[i].name) + strlen(m->headers[i].value) + 2;
    stored_t *s = H->alloc(sizeof *s + m->n_headers * sizeof(outbox_header_t) + bytes);
    if (s == NULL)
        return NULL;
    char *w = (char *)(s->headers + m->n_headers);
#define MEM13_PUT(dst, src, len)                                                                 \
    do {                                                                                         \
        memcpy(w, (src), (len));                                                                 \
        w[len] = '\0';                                                                           \
        (dst) = w;                                                                               \
        w += (len) + 1;                                                                          \
    } while (0)
    *s = (stored_t){.payload_len = m->payload_len, .n_headers = m->n_headers};
    MEM13_PUT(s->event_id, m->event_id, strlen(m->event_id));
    if (m->key != NULL)
        MEM13_PUT(s->key, m->key, strlen(m->key));
    MEM13_PUT(s->payload, m->payload, m->payload_len);
    for (size_t i = 0; i < m->n_headers; i++) {
        MEM13_PUT(s->headers[i].name, m->headers[i].name, strlen(m->headers[i].name));
        MEM13_PUT(s->headers[i].value, m->headers[i].value, strlen(m->headers[i].value));
    }
#undef MEM13_PUT
    return s;
}

static void result(outbox_publish_result_t *r, int status, const char *text)
{
    r->status = status;
    snprintf(r->message, sizeof r->message, "%s", text);
}

/* ----------------------------------------------------------------- sink */

typedef struct mem13 {
    char name[64];
} mem13_t;

static int mem13_open(const outbox_sink_open_t *params, void **handle, outbox_diag_t *d)
{
    const outbox_uri_t *u = params->uri;
    if (u->path == NULL || u->path[0] == '\0' || u->path[0] == '/' || strlen(u->path) >= 64 ||
        u->host != NULL || u->n_params > 0)
        return H->error(d, OUTBOX_EINVAL, "mem13: expected mem13:NAME");
    mem13_t *h = H->alloc(sizeof *h);
    if (h == NULL)
        return H->error(d, OUTBOX_ENOMEM, "mem13: out of memory");
    snprintf(h->name, sizeof h->name, "%s", u->path);
    *handle = h;
    return OUTBOX_OK;
}

static void mem13_close(void *handle)
{
    H->free(handle);
}

static int failed_key(const outbox_message_t *msgs, const outbox_publish_result_t *res, size_t i)
{
    for (size_t j = 0; j < i; j++)
        if (res[j].status != OUTBOX_PUBLISH_OK && msgs[j].key != NULL && msgs[i].key != NULL &&
            strcmp(msgs[j].key, msgs[i].key) == 0)
            return 1;
    return 0;
}

static int mem13_publish(void *handle, const outbox_message_t *msgs, size_t n,
                         outbox_publish_result_t *results, outbox_diag_t *d)
{
    (void)handle;
    for (size_t i = 0; i < n; i++) {
        const outbox_message_t *m = &msgs[i];
        if (failed_key(msgs, results, i)) {
            result(&results[i], OUTBOX_PUBLISH_RETRY, "held back: an earlier message of its key failed");
            continue;
        }
        if (m->payload_len > MEM13_MAX_BYTES) {
            result(&results[i], OUTBOX_PUBLISH_REJECT, "mem13: a message holds at most 1 MiB");
            continue;
        }
        destination_t *t = find(m->destination ? m->destination : m->route, 1);
        if (t == NULL)
            return H->error(d, OUTBOX_ENOMEM, "mem13: out of memory");
        if (holds(t, m->event_id)) {
            results[i].status = OUTBOX_PUBLISH_OK; /* a duplicate, dropped */
            continue;
        }
        stored_t *s = copy_message(m);
        if (s == NULL)
            return H->error(d, OUTBOX_ENOMEM, "mem13: out of memory");
        if (t->last != NULL)
            t->last->next = s;
        else
            t->first = s;
        t->last = s;
        results[i].status = OUTBOX_PUBLISH_OK;
    }
    return OUTBOX_OK;
}

static int mem13_destination_create(void *handle, const char *destination, outbox_diag_t *d)
{
    (void)handle;
    return find(destination, 1) ? OUTBOX_OK : H->error(d, OUTBOX_ENOMEM, "mem13: out of memory");
}

static int mem13_destination_drop(void *handle, const char *destination, outbox_diag_t *d)
{
    (void)handle, (void)d;
    destination_t *t = find(destination, 0);
    if (t == NULL)
        return OUTBOX_OK;
    while (t->first != NULL) {
        stored_t *s = t->first;
        t->first = s->next;
        H->free(s);
    }
    t->last = NULL;
    return OUTBOX_OK;
}

typedef struct reader {
    char destination[256];
    const stored_t *last; /* the last message handed out, NULL before the first */
} reader_t;

static int mem13_reader_open(void *handle, const char *destination, void **out, outbox_diag_t *d)
{
    (void)handle;
    reader_t *r = H->alloc(sizeof *r);
    if (r == NULL)
        return H->error(d, OUTBOX_ENOMEM, "mem13: out of memory");
    *r = (reader_t){0};
    snprintf(r->destination, sizeof r->destination, "%s", destination);
    *out = r;
    return OUTBOX_OK;
}

/* What is there is all there is: an in-memory destination never makes a
 * reader wait. */
static int mem13_reader_next(void *reader, int timeout_ms, outbox_received_t *out,
                             outbox_diag_t *d)
{
    (void)timeout_ms, (void)d;
    reader_t *r = reader;
    const destination_t *t = find(r->destination, 0);
    const stored_t *s = r->last != NULL ? r->last->next : t != NULL ? t->first : NULL;
    if (s == NULL)
        return OUTBOX_ENOTFOUND;
    r->last = s;
    out->destination = r->destination;
    out->key = s->key;
    out->dedupe_id = s->event_id;
    out->payload = s->payload;
    out->payload_len = s->payload_len;
    out->headers = s->headers;
    out->n_headers = s->n_headers;
    return OUTBOX_OK;
}

static void mem13_reader_close(void *reader)
{
    H->free(reader);
}

static int mem13_init(const outbox_host_t *host, outbox_diag_t *d)
{
    (void)d;
    H = host;
    return OUTBOX_OK;
}

static const outbox_sink_vtable_t mem13_vtable = {
    .struct_size = sizeof(outbox_sink_vtable_t),
    .open = mem13_open,
    .close = mem13_close,
    .publish = mem13_publish,
    .destination_create = mem13_destination_create,
    .destination_drop = mem13_destination_drop,
    .reader_open = mem13_reader_open,
    .reader_next = mem13_reader_next,
    .reader_close = mem13_reader_close,
};

static const char *const mem13_schemes[] = {MEM13_NAME, NULL};

static const outbox_driver_t mem13_driver = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = OUTBOX_ABI_MAJOR,
    .abi_minor = OUTBOX_ABI_MINOR,
    .kind = OUTBOX_DRIVER_SINK,
    .name = MEM13_NAME,
    .version = "1.3.0",
    .schemes = mem13_schemes,
    .capabilities = MEM13_CAPS,
    .init = mem13_init,
    .sink = &mem13_vtable,
};

OUTBOX_DRIVER_ENTRY(mem13_driver)
