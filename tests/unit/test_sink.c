/* See test_sink.h. State is global: Check runs each test in its own process.
 * It lives in a shared mapping so that what a relay in a forked child
 * delivers (and how many calls it made) is seen by the parent, and by a
 * relay the parent starts after the child died. */
#include "test_sink.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef struct sink_state {
    size_t n_delivered;
    int calls;
    int max_per_key;
    test_sink_log_t delivered[100000];
} sink_state_t;

static sink_state_t *st;
static test_sink_rule_fn rule;
static void (*hook)(void *);
static void *hook_ctx;
static void (*after_hook)(int call, void *ctx);
static void *after_ctx;

static int init(const outbox_host_t *host, outbox_diag_t *d)
{
    (void)host, (void)d;
    return OUTBOX_OK;
}

static int k_open(const outbox_sink_open_t *p, void **h, outbox_diag_t *d)
{
    (void)p, (void)d;
    *h = st;
    return OUTBOX_OK;
}

static void k_close(void *h)
{
    (void)h;
}

static int same_key_count(const outbox_message_t *msgs, size_t n, size_t i)
{
    int c = 0;
    for (size_t j = 0; j < n; j++)
        c += strcmp(msgs[j].key, msgs[i].key) == 0;
    return c;
}

enum { UNORDERED, ORDERED, LOOSE };

static int publish_common(const outbox_message_t *msgs, size_t n, outbox_publish_result_t *res,
                          int mode)
{
    if (hook != NULL)
        hook(hook_ctx);
    int call = st->calls++;
    for (size_t i = 0; i < n; i++) {
        int c = same_key_count(msgs, n, i);
        if (mode == UNORDERED && c > st->max_per_key)
            st->max_per_key = c;
        int st_i = rule ? rule(&msgs[i], call) : OUTBOX_PUBLISH_OK;
        if (mode == ORDERED) {
            /* Honour the ORDERED contract: nothing after a failure (RETRY or
             * REJECT) of the same key. */
            for (size_t j = 0; j < i; j++)
                if (strcmp(msgs[j].key, msgs[i].key) == 0 && res[j].status != OUTBOX_PUBLISH_OK)
                    st_i = OUTBOX_PUBLISH_RETRY;
        }
        res[i].status = st_i;
        snprintf(res[i].message, sizeof res[i].message, "test sink says %d", st_i);
        if (st_i == OUTBOX_PUBLISH_OK && st->n_delivered < sizeof st->delivered / sizeof st->delivered[0]) {
            test_sink_log_t *l = &st->delivered[st->n_delivered++];
            snprintf(l->event_id, sizeof l->event_id, "%s", msgs[i].event_id);
            snprintf(l->key, sizeof l->key, "%s", msgs[i].key);
            l->call = call;
            l->traceparent[0] = '\0';
            for (size_t h = 0; h < msgs[i].n_headers; h++)
                if (strcmp(msgs[i].headers[h].name, "traceparent") == 0)
                    snprintf(l->traceparent, sizeof l->traceparent, "%s", msgs[i].headers[h].value);
        }
    }
    if (after_hook != NULL)
        after_hook(call, after_ctx);
    return OUTBOX_OK;
}

static int k_publish(void *h, const outbox_message_t *msgs, size_t n, outbox_publish_result_t *res,
                     outbox_diag_t *d)
{
    (void)h, (void)d;
    return publish_common(msgs, n, res, UNORDERED);
}

static int k_publish_ordered(void *h, const outbox_message_t *msgs, size_t n,
                             outbox_publish_result_t *res, outbox_diag_t *d)
{
    (void)h, (void)d;
    return publish_common(msgs, n, res, ORDERED);
}

static int k_publish_loose(void *h, const outbox_message_t *msgs, size_t n,
                           outbox_publish_result_t *res, outbox_diag_t *d)
{
    (void)h, (void)d;
    return publish_common(msgs, n, res, LOOSE);
}

static const outbox_sink_vtable_t vt = {
    .struct_size = sizeof vt, .open = k_open, .close = k_close, .publish = k_publish};
static const outbox_sink_vtable_t vt_ordered = {
    .struct_size = sizeof vt, .open = k_open, .close = k_close, .publish = k_publish_ordered};
static const outbox_sink_vtable_t vt_loose = {
    .struct_size = sizeof vt, .open = k_open, .close = k_close, .publish = k_publish_loose};
static const char *const schemes[] = {"test", NULL};
static const char *const schemes_ordered[] = {"testordered", NULL};
static const char *const schemes_loose[] = {"testloose", NULL};

static const outbox_driver_t drv = {
    .struct_size = sizeof drv, .abi_major = OUTBOX_ABI_MAJOR, .abi_minor = OUTBOX_ABI_MINOR,
    .kind = OUTBOX_DRIVER_SINK, .name = "test", .version = "1", .schemes = schemes,
    .init = init, .sink = &vt};
static const outbox_driver_t drv_ordered = {
    .struct_size = sizeof drv, .abi_major = OUTBOX_ABI_MAJOR, .abi_minor = OUTBOX_ABI_MINOR,
    .kind = OUTBOX_DRIVER_SINK, .name = "testordered", .version = "1", .schemes = schemes_ordered,
    .capabilities = OUTBOX_SINK_CAP_ORDERED, .init = init, .sink = &vt_ordered};
static const outbox_driver_t drv_loose = {
    .struct_size = sizeof drv, .abi_major = OUTBOX_ABI_MAJOR, .abi_minor = OUTBOX_ABI_MINOR,
    .kind = OUTBOX_DRIVER_SINK, .name = "testloose", .version = "1", .schemes = schemes_loose,
    .capabilities = OUTBOX_SINK_CAP_ORDERED, .init = init, .sink = &vt_loose};

void test_sink_register(void)
{
    if (st == NULL) {
        void *p = mmap(NULL, sizeof *st, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("test sink: mmap");
            abort();
        }
        st = p;
    }
    outbox_diag_t d;
    if (outbox_driver_register(&drv, &d) != OUTBOX_OK ||
        outbox_driver_register(&drv_ordered, &d) != OUTBOX_OK ||
        outbox_driver_register(&drv_loose, &d) != OUTBOX_OK) {
        fprintf(stderr, "test sink: %s\n", d.message);
        abort();
    }
}

void test_sink_reset(test_sink_rule_fn r)
{
    rule = r;
    st->n_delivered = 0;
    st->calls = 0;
    st->max_per_key = 0;
    hook = NULL;
    after_hook = NULL;
}

size_t test_sink_delivered(const test_sink_log_t **log)
{
    *log = st->delivered;
    return st->n_delivered;
}

int test_sink_calls(void)
{
    return st->calls;
}

int test_sink_max_per_key(void)
{
    return st->max_per_key;
}

void test_sink_on_publish(void (*fn)(void *ctx), void *ctx)
{
    hook = fn;
    hook_ctx = ctx;
}

void test_sink_after_publish(void (*fn)(int call, void *ctx), void *ctx)
{
    after_hook = fn;
    after_ctx = ctx;
}
