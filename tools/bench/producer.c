/* outbox-bench: the producer ceilings (outbox/ceiling.h, beside their
 * sink drivers: drivers/sink-NAME/ceiling.c), which one serves a sink URI
 * and the one loop that drives any of them.
 *
 * A producer ceiling was compiled with its sink driver's sources; that
 * driver is registered before the bench opens the sink, so the relays it
 * measures publish through the same code as the bare client. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <outbox/ceiling.h>

#include "bench.h"

/* ------------------------------------------------- the producer ceilings */

#ifdef OUTBOX_BENCH_KAFKA
extern const outbox_sink_ceiling_t outbox_ceiling_kafka;
#endif
#ifdef OUTBOX_BENCH_NATS
extern const outbox_sink_ceiling_t outbox_ceiling_nats;
#endif
#ifdef OUTBOX_BENCH_REDIS
extern const outbox_sink_ceiling_t outbox_ceiling_redis;
#endif
#ifdef OUTBOX_BENCH_HTTP
extern const outbox_sink_ceiling_t outbox_ceiling_http;
#endif
#ifdef OUTBOX_BENCH_AMQP
extern const outbox_sink_ceiling_t outbox_ceiling_amqp;
#endif

/* By URI scheme. */
static const bench_scheme_t producers[] = {
#ifdef OUTBOX_BENCH_KAFKA
    {"kafka", &outbox_ceiling_kafka},
#endif
#ifdef OUTBOX_BENCH_NATS
    {"nats", &outbox_ceiling_nats},
#endif
#ifdef OUTBOX_BENCH_REDIS
    {"redis", &outbox_ceiling_redis},
    {"rediss", &outbox_ceiling_redis},
#endif
#ifdef OUTBOX_BENCH_HTTP
    {"http", &outbox_ceiling_http},
    {"https", &outbox_ceiling_http},
#endif
#ifdef OUTBOX_BENCH_AMQP
    {"amqp", &outbox_ceiling_amqp},
    {"amqps", &outbox_ceiling_amqp},
#endif
    {NULL, NULL},
};

const outbox_sink_ceiling_t *bench_producer_for(const char *sink_uri)
{
    return bench_scheme_find(producers, sink_uri);
}

int bench_producer_register(const outbox_sink_ceiling_t *c, char *err, size_t errlen)
{
    outbox_diag_t d = {0};
    if (c->driver && outbox_driver_register(c->driver(), &d) != OUTBOX_OK) {
        snprintf(err, errlen, "the %s producer ceiling's driver: %s", c->name, d.message);
        return BENCH_EXIT_FAIL;
    }
    return 0;
}

/* The first message of ms, to destination, before the clock starts: the
 * client learns the destination (a topic's metadata, a stream) as the
 * relays' sinks do with their warm-up message. */
static int producer_warm(const outbox_sink_ceiling_t *c, void *p, const bench_msgs_t *ms,
                         char *err, size_t errlen)
{
    if (ms->n == 0)
        return 0;
    outbox_message_t m = ms->m[0];
    m.key = "warm-up";
    m.event_id = "outbox-bench-warm-up";
    return c->publish(p, &m, 1, err, errlen);
}

int bench_producer_drain(const bench_opts_t *o, const outbox_sink_ceiling_t *c,
                         bench_msgs_t *ms, const char *destination, bench_drain_t *out,
                         char *err, size_t errlen)
{
    for (long i = 0; i < ms->n; i++)
        ms->m[i].destination = destination;
    void *p = NULL;
    int rc = c->open(o->sink, &p, err, errlen);
    if (rc == 0)
        rc = producer_warm(c, p, ms, err, errlen);
    double cpu0 = bench_cpu_s();
    int64_t t0 = bench_mono_us();
    out->published = 0;
    for (long i = 0; rc == 0 && i < ms->n;) {
        long chunk = ms->n - i < o->batch ? ms->n - i : o->batch;
        rc = c->publish(p, &ms->m[i], (size_t)chunk, err, errlen);
        if (rc == 0)
            out->published += chunk;
        i += chunk;
    }
    out->seconds = (double)(bench_mono_us() - t0) / 1e6;
    out->cpu_s = bench_cpu_s() - cpu0;
    if (p)
        c->close(p);
    return rc;
}
