/* The tracer: which batches are traced, the publish span's ids, and a
 * finished batch copied into a queue record. Runs on the relays'
 * publishing threads, many at once; it takes a record from the queue and
 * allocates nothing.
 *
 * Parent or links. A batch whose every message carries a traceparent of
 * one and the same trace (one transaction's events, or a batch of one)
 * gets a publish span in that trace, a child of the first message's span:
 * the trace then runs from the application's transaction through the
 * publish to the consumers. Any other batch starts a trace of its own.
 * Either way the span links to every message's own context (up to
 * OTLP_LINKS_MAX), with the event id on the link.
 *
 * Sampling. A parented batch follows its parent's sampled flag (a span
 * under an unsampled parent would be an orphan: the rest of its trace was
 * never recorded) and the ratio on top, so that sample 0 turns tracing off
 * whatever the application does; a batch of its own trace is sampled by the
 * ratio alone. The ratio is read from the trace id (otlp_sample_says). */
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "otlp_int.h"

/* ------------------------------------------------------------- ids */

/* A per-thread xoshiro256** seeded from getrandom(2): ids need to be
 * unique and unpredictable enough to never collide, not secret, and a
 * syscall per span would cost more than the rest of begin(). A forked
 * child seeds again, or it would mint its parent's ids. */
static _Thread_local uint64_t rng[4];
static _Thread_local unsigned long rng_generation; /* 0: not seeded */
static atomic_ulong fork_generation = 1;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void)
{
    atomic_fetch_add(&fork_generation, 1);
}

static void register_atfork(void)
{
    (void)pthread_atfork(NULL, NULL, on_fork_child);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t next_u64(void)
{
    unsigned long generation = atomic_load(&fork_generation);
    if (rng_generation != generation) {
        pthread_once(&atfork_once, register_atfork);
        if (getrandom(rng, sizeof rng, 0) != (ssize_t)sizeof rng) {
            /* No getrandom (an old kernel, a filter): the clock and the
             * thread's address, mixed, still differ between threads. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            uint64_t x = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^ (uint64_t)(uintptr_t)&rng;
            for (int i = 0; i < 4; i++) {
                uint64_t z = (x += 0x9e3779b97f4a7c15u);
                z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
                z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
                rng[i] = z ^ (z >> 31);
            }
        }
        if ((rng[0] | rng[1] | rng[2] | rng[3]) == 0)
            rng[0] = 1;
        rng_generation = generation;
    }
    uint64_t result = rotl(rng[1] * 5, 7) * 9;
    uint64_t t = rng[1] << 17;
    rng[2] ^= rng[0];
    rng[3] ^= rng[1];
    rng[1] ^= rng[2];
    rng[0] ^= rng[3];
    rng[2] ^= t;
    rng[3] = rotl(rng[3], 45);
    return result;
}

/* n random bytes, not all zero (an all-zero id is invalid). */
static void random_id(uint8_t *out, size_t n)
{
    do {
        for (size_t i = 0; i < n; i += 8) {
            uint64_t v = next_u64();
            for (size_t j = 0; j < 8 && i + j < n; j++)
                out[i + j] = (uint8_t)(v >> (8 * j));
        }
    } while (memcmp(out, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", n) == 0);
}

/* 1 + the index of the message whose span is the batch's parent, or 0:
 * every message has a traceparent, all of one trace. The first is parsed;
 * the others need only the same version and trace id (the store checked
 * their form at staging, and end() parses each for its link anyway). */
static size_t parent_of(const outbox_relay_span_t *s)
{
    uint8_t tid[16], sid[8], flags;
    if (s->n_messages == 0 || !otlp_traceparent_parse(s->rows[0]->traceparent, tid, sid, &flags))
        return 0;
    const char *first = s->rows[0]->traceparent;
    for (size_t i = 1; i < s->n_messages; i++) {
        const char *t = s->rows[i]->traceparent;
        if (t == NULL || strlen(t) != OUTBOX_TRACEPARENT_LEN || memcmp(t, first, 36) != 0)
            return 0;
    }
    return 1;
}

/* -------------------------------------------------------- callbacks */

int otlp_span_begin(void *ctx, const outbox_relay_span_t *s, char traceparent[OUTBOX_TRACEPARENT_LEN + 1],
                    void **span)
{
    otlp_exporter_t *e = ctx;
    if (e->sample <= 0)
        return 0;
    uint8_t trace_id[16], span_id[8], parent_span[8], flags = 1;
    size_t parent = parent_of(s);
    if (parent != 0) {
        otlp_traceparent_parse(s->rows[parent - 1]->traceparent, trace_id, parent_span, &flags);
        if (!(flags & 1))
            return 0;
    } else {
        random_id(trace_id, sizeof trace_id);
    }
    if (!otlp_sample_says(e->sample, trace_id))
        return 0;
    random_id(span_id, sizeof span_id);
    char tid[33], sid[17];
    otlp_hex(trace_id, sizeof trace_id, tid);
    otlp_hex(span_id, sizeof span_id, sid);
    snprintf(traceparent, OUTBOX_TRACEPARENT_LEN + 1, "00-%s-%s-01", tid, sid);
    *span = (void *)(uintptr_t)parent;
    return 1;
}

/* The messaging.system value for a sink driver: the conventions' name for
 * the broker where they have one, the driver's own name otherwise. */
static const char *system_of(const char *sink)
{
    static const struct {
        const char *driver, *system;
    } known[] = {{"kafka", "kafka"}, {"amqp", "rabbitmq"}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(sink, known[i].driver) == 0)
            return known[i].system;
    return sink[0] ? sink : "unknown";
}

static void copy_text(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src ? src : "");
}

void otlp_span_end(void *ctx, const outbox_relay_span_t *s, void *span)
{
    otlp_exporter_t *e = ctx;
    uint8_t flags;
    otlp_span_t *rec = otlp_queue_take(e);
    if (rec == NULL)
        return; /* the queue is full: counted there */
    /* begin() wrote it, the relay checked it: it parses. */
    if (!otlp_traceparent_parse(s->traceparent, rec->trace_id, rec->span_id, &flags)) {
        random_id(rec->trace_id, sizeof rec->trace_id);
        random_id(rec->span_id, sizeof rec->span_id);
    }
    size_t parent = (size_t)(uintptr_t)span;
    uint8_t ptid[16];
    rec->has_parent = parent != 0 && parent <= s->n_messages &&
                      otlp_traceparent_parse(s->rows[parent - 1]->traceparent, ptid, rec->parent_id, &flags);
    rec->start_us = s->start_us;
    rec->end_us = s->end_us;
    copy_text(rec->route, sizeof rec->route, s->route);
    copy_text(rec->destination, sizeof rec->destination, s->destination);
    copy_text(rec->system, sizeof rec->system, system_of(s->sink ? s->sink : ""));
    copy_text(rec->error, sizeof rec->error, s->error);
    rec->n_messages = s->n_messages;
    rec->ok = s->ok;
    rec->retried = s->retried;
    rec->rejected = s->rejected;
    rec->deferred = s->deferred;
    rec->unsent = s->unsent;
    rec->outage = s->outage != 0;
    rec->n_links = 0;
    rec->dropped_links = 0;
    for (size_t i = 0; i < s->n_messages; i++) {
        otlp_link_t tmp, *l = rec->n_links < OTLP_LINKS_MAX ? &rec->links[rec->n_links] : &tmp;
        if (!otlp_traceparent_parse(s->rows[i]->traceparent, l->trace_id, l->span_id, &l->flags))
            continue;
        if (l == &tmp) {
            rec->dropped_links++;
            continue;
        }
        const char *id = s->rows[i]->event_id ? s->rows[i]->event_id : "";
        if (strlen(id) < sizeof l->event_id)
            memcpy(l->event_id, id, strlen(id) + 1);
        else
            l->event_id[0] = '\0';
        rec->n_links++;
    }
    otlp_queue_put(e, rec);
}
