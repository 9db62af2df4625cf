/* A relay in its steady state allocates nothing: every call the core
 * (linked from its static archive) and this file make to malloc, calloc,
 * realloc, strdup and strndup is counted (the link wraps them, see
 * meson.build), and the count is read at each step the observer reports.
 * In the second half of a long run the count must not move.
 * The SQLite store is a loaded module: what it allocates with the C
 * library is its own; what it allocates through the host table is the
 * core's and is counted. */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_int.h"
#include "test_sink.h"
#include "test_store.h"

static atomic_size_t allocs;
static atomic_int counting; /* 1 while the relay runs */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);

void *__wrap_malloc(size_t n)
{
    if (atomic_load(&counting))
        atomic_fetch_add(&allocs, 1);
    return __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
    if (atomic_load(&counting))
        atomic_fetch_add(&allocs, 1);
    return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
    if (atomic_load(&counting))
        atomic_fetch_add(&allocs, 1);
    return __real_realloc(p, n);
}

char *__wrap_strdup(const char *s)
{
    if (atomic_load(&counting))
        atomic_fetch_add(&allocs, 1);
    return __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
    if (atomic_load(&counting))
        atomic_fetch_add(&allocs, 1);
    return __real_strndup(s, n);
}

#define EVENTS 6000
#define BATCH 50
#define KEYS 40
#define MAX_STEPS 1000

static char dir[256];
static char uri[600];
static outbox_store_t *store;

typedef struct steps {
    size_t n;
    size_t claimed[MAX_STEPS];
    size_t allocs[MAX_STEPS];
} steps_t;

static steps_t seen;

static void count_step(void *ctx, const outbox_relay_observation_t *o)
{
    steps_t *s = ctx;
    if (s->n < MAX_STEPS) {
        s->claimed[s->n] = (size_t)o->claimed;
        s->allocs[s->n++] = atomic_load(&allocs);
    }
}

static void setup(void)
{
    test_store_make("alloc", dir, uri, 0);
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_store_open(uri, NULL, &store, &d) == OUTBOX_OK, "%s", d.message);
    test_sink_register();
    test_sink_reset(NULL);
    /* Keyed events in runs, so that a batch holds several rows of a key
     * and an unordered sink needs several rounds. */
    static outbox_event_t ev[EVENTS];
    static char ids[EVENTS][OUTBOX_UUID_STRLEN + 1];
    static char keys[KEYS][16];
    for (int k = 0; k < KEYS; k++)
        snprintf(keys[k], sizeof keys[k], "k%d", k);
    for (int i = 0; i < EVENTS; i++) {
        outbox_uuid_v7(ids[i]);
        ev[i] = (outbox_event_t){.event_id = ids[i], .event_type = "t", .payload = "{\"n\":1}",
                                 .ordering_key = keys[(i / 3) % KEYS]};
    }
    size_t n = 0;
    ck_assert_msg(outbox_store_stage(store, NULL, "r", ev, EVENTS, &n) == OUTBOX_OK, "%s",
                  outbox_store_message(store));
    ck_assert_int_eq(n, EVENTS);
}

static void teardown(void)
{
    outbox_store_close(store);
    store = NULL;
    test_store_remove(dir);
}

/* A tracer that allocates nothing: every batch traced, its messages
 * given one fixed traceparent. The relay's side of the hook must not
 * allocate either. */
static atomic_int spans_ended;

static int fixed_begin(void *ctx, const outbox_relay_span_t *s, char tp[OUTBOX_TRACEPARENT_LEN + 1],
                       void **span)
{
    (void)ctx, (void)s, (void)span;
    memcpy(tp, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", OUTBOX_TRACEPARENT_LEN + 1);
    return 1;
}

static void count_end(void *ctx, const outbox_relay_span_t *s, void *span)
{
    (void)ctx, (void)s, (void)span;
    atomic_fetch_add(&spans_ended, 1);
}

static const outbox_relay_tracer_t fixed_tracer = {
    .struct_size = sizeof fixed_tracer, .begin = fixed_begin, .end = count_end};

/* Relay every staged event through sink_uri with the given pipeline (and
 * the tracer above when traced); the steps after the first `warm` full
 * ones allocate nothing. */
static void steady_run(const char *sink_uri, size_t pipeline, int traced)
{
    outbox_diag_t d = {0};
    outbox_sink_t *sink = NULL;
    ck_assert_msg(outbox_sink_open(sink_uri, NULL, &sink, &d) == OUTBOX_OK, "%s", d.message);
    outbox_relay_config_t cfg;
    outbox_relay_config_init(&cfg);
    cfg.route = "r";
    cfg.batch = BATCH;
    cfg.pipeline = pipeline;
    cfg.poll_us = 1000;
    cfg.until_idle = 1;
    cfg.observe = count_step;
    cfg.observe_ctx = &seen;
    cfg.tracer = traced ? &fixed_tracer : NULL;
    atomic_store(&spans_ended, 0);
    outbox_relay_t *r = NULL;
    ck_assert_msg(outbox_relay_new(store, sink, &cfg, &r, &d) == OUTBOX_OK, "%s", d.message);
    memset(&seen, 0, sizeof seen);
    atomic_store(&counting, 1);
    int rc = outbox_relay_run(r);
    atomic_store(&counting, 0);
    ck_assert_int_eq(rc, OUTBOX_OK);
    outbox_relay_free(r);
    outbox_sink_close(sink);

    const test_sink_log_t *log = NULL;
    ck_assert_uint_eq(test_sink_delivered(&log), EVENTS);
    if (traced) {
        ck_assert_int_ge(atomic_load(&spans_ended), EVENTS / BATCH);
        ck_assert_str_eq(log[EVENTS - 1].traceparent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    }
    /* The second half of the run's full steps: by then every batch slot
     * has held a full batch (the first claims of a pipelined relay can be
     * short, their keys held by the batches in flight) and every array
     * has its size. A relay that allocated per step, or per row, would
     * move the count at every one of them. */
    size_t full = 0;
    for (size_t i = 0; i < seen.n; i++)
        full += seen.claimed[i] == BATCH;
    ck_assert_msg(full >= 40, "only %zu full batches of %d in %zu steps", full, BATCH, seen.n);
    size_t k = 0, from = 0, last = 0;
    for (size_t i = 0; i < seen.n; i++) {
        if (seen.claimed[i] != BATCH)
            continue;
        if (++k == full / 2)
            from = i;
        last = i;
    }
    ck_assert_msg(seen.allocs[last] == seen.allocs[from],
                  "%zu allocations in steps %zu to %zu (pipeline %zu, %s)",
                  seen.allocs[last] - seen.allocs[from], from + 1, last, pipeline, sink_uri);
}

static void steady(const char *sink_uri, size_t pipeline)
{
    steady_run(sink_uri, pipeline, 0);
}

START_TEST(steady_traced)
{
    steady_run("test:x", 1, 1);
}
END_TEST

START_TEST(steady_traced_pipelined)
{
    steady_run("testordered:x", 4, 1);
}
END_TEST

START_TEST(steady_unordered_sink)
{
    steady("test:x", 1);
}
END_TEST

START_TEST(steady_ordered_sink)
{
    steady("testordered:x", 1);
}
END_TEST

START_TEST(steady_unordered_sink_pipelined)
{
    steady("test:x", 4);
}
END_TEST

START_TEST(steady_ordered_sink_pipelined)
{
    steady("testordered:x", 4);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("relay_alloc");
    TCase *tc = tcase_create("steady");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, steady_unordered_sink);
    tcase_add_test(tc, steady_ordered_sink);
    tcase_add_test(tc, steady_unordered_sink_pipelined);
    tcase_add_test(tc, steady_ordered_sink_pipelined);
    tcase_add_test(tc, steady_traced);
    tcase_add_test(tc, steady_traced_pipelined);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
