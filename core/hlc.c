/* Hybrid logical clock: stamp = physical_ms << 16 | logical.
 *
 * The whole state is the last stamp handed out or observed, one atomic
 * int64, so now() and observe() are a compare-and-swap loop with no lock.
 * Stamps are totally ordered integers, which makes the merge rule simple:
 * the next stamp is max(wall_ms << 16, last + 1). "last + 1" bumps the
 * logical part, and when the logical part is 0xffff the carry advances the
 * physical part by one millisecond with logical 0, as SPEC §6 requires.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "outbox_int.h"

/* Largest physical part that still fits the stamp's 48 high bits. */
#define HLC_PHYSICAL_MAX (INT64_MAX >> 16)

struct outbox_hlc {
    _Atomic int64_t last;
    int64_t (*wall_ms)(void *ctx);
    void *ctx;
};

static int64_t realtime_ms(void *ctx)
{
    (void)ctx;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Statically initialised, so no once-guard is needed and it is never freed. */
static outbox_hlc_t default_clock = {.last = 0, .wall_ms = realtime_ms, .ctx = NULL};

outbox_hlc_t *outbox_hlc_new_with_clock(int64_t (*wall_ms)(void *ctx), void *ctx)
{
    outbox_hlc_t *c = malloc(sizeof *c);
    if (!c)
        return NULL;
    atomic_init(&c->last, 0);
    c->wall_ms = wall_ms ? wall_ms : realtime_ms;
    c->ctx = wall_ms ? ctx : NULL;
    return c;
}

outbox_hlc_t *outbox_hlc_new(void)
{
    return outbox_hlc_new_with_clock(NULL, NULL);
}

void outbox_hlc_free(outbox_hlc_t *c)
{
    if (c && c != &default_clock)
        free(c);
}

outbox_hlc_t *outbox_hlc_default(void)
{
    return &default_clock;
}

int64_t outbox_hlc_now(outbox_hlc_t *c)
{
    if (!c)
        c = &default_clock;
    int64_t wall = c->wall_ms(c->ctx);
    /* A clock before 1970 or beyond year 10889 must not shift into UB. */
    if (wall < 0)
        wall = 0;
    else if (wall > HLC_PHYSICAL_MAX)
        wall = HLC_PHYSICAL_MAX;
    int64_t from_wall = wall << 16;

    int64_t last = atomic_load_explicit(&c->last, memory_order_relaxed);
    int64_t next;
    do {
        if (from_wall > last)
            next = from_wall;
        else if (last < INT64_MAX)
            next = last + 1;
        else
            /* Only reachable after observing INT64_MAX: saturate rather
             * than wrap to negative stamps. */
            return INT64_MAX;
    } while (!atomic_compare_exchange_weak_explicit(&c->last, &last, next, memory_order_relaxed,
                                                    memory_order_relaxed));
    return next;
}

void outbox_hlc_observe(outbox_hlc_t *c, int64_t stamp)
{
    if (!c)
        c = &default_clock;
    /* Raising last to the stamp is enough: now() returns at least last + 1.
     * Negative stamps are never below last (last >= 0) and are ignored. */
    int64_t last = atomic_load_explicit(&c->last, memory_order_relaxed);
    while (stamp > last &&
           !atomic_compare_exchange_weak_explicit(&c->last, &last, stamp, memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
}
