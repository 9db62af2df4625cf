/* outbox-bench: the messages a producer ceiling sends are the ones the
 * relay itself hands a sink. Before a producer ceiling's drain, a relay
 * drains a copy of the backlog into an in-process sink ("benchcapture:")
 * that keeps a copy of every message (key, id, payload, every header, the
 * destination) in the order it was handed over. Nothing here knows the
 * CloudEvents attributes or how a store reads its rows back: a change to
 * either changes what the producer ceilings send. */
#include <pthread.h>
#include <stdalign.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* ------------------------------------------------------ the messages */

/* Blocks of copied bytes that never move, so messages point into them. */
typedef struct block {
    struct block *next;
    size_t len, cap;
    alignas(max_align_t) char data[];
} block_t;

#define BLOCK_MIN ((size_t)1 << 20)

static void *arena_take(bench_msgs_t *ms, size_t size)
{
    size = (size + alignof(max_align_t) - 1) & ~(alignof(max_align_t) - 1);
    block_t *b = ms->blocks_;
    if (!b || b->cap - b->len < size) {
        size_t cap = size > BLOCK_MIN ? size : BLOCK_MIN;
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        *b = (block_t){.next = ms->blocks_, .cap = cap};
        ms->blocks_ = b;
    }
    void *p = b->data + b->len;
    b->len += size;
    return p;
}

static const char *arena_copy(bench_msgs_t *ms, const char *s, size_t len, int *oom)
{
    if (!s)
        return NULL;
    char *p = arena_take(ms, len + 1);
    if (!p) {
        *oom = 1;
        return NULL;
    }
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

static const char *copy_str(bench_msgs_t *ms, const char *s, int *oom)
{
    return arena_copy(ms, s, s ? strlen(s) : 0, oom);
}

/* Appends a copy of m (without its row); 0 or -1 (memory). */
static int msgs_push(bench_msgs_t *ms, const outbox_message_t *m)
{
    if (ms->n == ms->cap_) {
        long cap = ms->cap_ ? ms->cap_ * 2 : 4096;
        outbox_message_t *grown = realloc(ms->m, (size_t)cap * sizeof *grown);
        if (!grown)
            return -1;
        ms->m = grown;
        ms->cap_ = cap;
    }
    int oom = 0;
    outbox_header_t *h = m->n_headers ? arena_take(ms, m->n_headers * sizeof *h) : NULL;
    if (m->n_headers && !h)
        return -1;
    for (size_t i = 0; i < m->n_headers; i++)
        h[i] = (outbox_header_t){.name = copy_str(ms, m->headers[i].name, &oom),
                                 .value = copy_str(ms, m->headers[i].value, &oom)};
    outbox_message_t c = {
        .route = copy_str(ms, m->route, &oom),
        .destination = copy_str(ms, m->destination, &oom),
        .key = copy_str(ms, m->key, &oom),
        .event_id = copy_str(ms, m->event_id, &oom),
        .payload = arena_copy(ms, m->payload ? m->payload : "", m->payload_len, &oom),
        .payload_len = m->payload_len,
        .headers = h,
        .n_headers = m->n_headers,
    };
    if (oom)
        return -1;
    ms->m[ms->n++] = c;
    return 0;
}

void bench_msgs_free(bench_msgs_t *ms)
{
    for (block_t *b = ms->blocks_, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(ms->m);
    memset(ms, 0, sizeof *ms);
}

/* ------------------------------------------------- the capturing sink */

static pthread_mutex_t capture_mu = PTHREAD_MUTEX_INITIALIZER;
static bench_msgs_t *capture_into; /* under capture_mu */
static int capture_failed;         /* under capture_mu */

static int cap_open(const outbox_sink_open_t *args, void **h, outbox_diag_t *d)
{
    (void)args, (void)d;
    *h = &capture_into;
    return OUTBOX_OK;
}

static void cap_close(void *h)
{
    (void)h;
}

static int cap_publish(void *h, const outbox_message_t *msgs, size_t n,
                       outbox_publish_result_t *res, outbox_diag_t *d)
{
    (void)h, (void)d;
    pthread_mutex_lock(&capture_mu);
    for (size_t i = 0; i < n; i++) {
        int ok = capture_into && msgs_push(capture_into, &msgs[i]) == 0;
        if (!ok)
            capture_failed = 1;
        res[i].status = ok ? OUTBOX_PUBLISH_OK : OUTBOX_PUBLISH_REJECT;
        if (!ok)
            snprintf(res[i].message, sizeof res[i].message, "out of memory");
    }
    pthread_mutex_unlock(&capture_mu);
    return OUTBOX_OK;
}

static const outbox_sink_vtable_t cap_vt = {.struct_size = sizeof cap_vt,
                                             .open = cap_open,
                                             .close = cap_close,
                                             .publish = cap_publish};
static const char *const cap_schemes[] = {"benchcapture", NULL};
static bench_sink_t cap_sink = {.name = "bench-capture", .schemes = cap_schemes, .vt = &cap_vt};

/* ------------------------------------------------------- the capture */

int bench_capture_messages(const bench_opts_t *o, void *db, const char *backlog,
                           const char *relation, bench_msgs_t *out, char *err, size_t errlen)
{
    int rc = bench_sink_register(&cap_sink, err, errlen);
    if (rc == 0)
        rc = bench_fresh_copy(o, db, backlog, relation, 0, err, errlen);
    /* One relay, as the relay side runs it but for its sink: no metrics,
     * no tracing, no warm-up message. */
    bench_opts_t co = *o;
    co.sink = "benchcapture:";
    co.workers = 1;
    co.destination = NULL;
    co.metrics_listen = NULL;
    co.otlp_endpoint = NULL;
    pthread_mutex_lock(&capture_mu);
    capture_into = out;
    capture_failed = 0;
    pthread_mutex_unlock(&capture_mu);
    bench_drain_t drain = {0};
    if (rc == 0)
        rc = bench_relay_drain(&co, relation, BENCH_ROUTE, &drain, err, errlen);
    pthread_mutex_lock(&capture_mu);
    capture_into = NULL;
    int failed = capture_failed;
    pthread_mutex_unlock(&capture_mu);
    if (rc == 0 && failed) {
        snprintf(err, errlen, "out of memory for the backlog's messages");
        rc = BENCH_EXIT_FAIL;
    }
    if (rc == 0 && out->n != o->events) {
        snprintf(err, errlen, "the relay handed its sink %ld messages, not %ld", out->n,
                 o->events);
        rc = BENCH_EXIT_FAIL;
    }
    char err2[512];
    o->ceiling->drop_relation(db, relation, err2, sizeof err2);
    return rc;
}
