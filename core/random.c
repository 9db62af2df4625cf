/* A per-thread xoshiro256** generator seeded from the OS.
 *
 * Not for secrets: it feeds UUID randomness and backoff jitter, where speed
 * and freedom from locks matter more than unpredictability. Each thread seeds
 * itself once from getrandom(2); a forked child reseeds, because otherwise
 * parent and child would mint the same "random" UUID bits.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "outbox_int.h"

typedef struct rng_state {
    uint64_t s[4];
    unsigned long generation;
    bool seeded;
} rng_state_t;

static _Thread_local rng_state_t tls_rng;

/* Bumped in the child after fork(), so every inherited state is stale. */
static atomic_ulong fork_generation;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void)
{
    atomic_fetch_add_explicit(&fork_generation, 1, memory_order_relaxed);
}

static void register_atfork(void)
{
    (void)pthread_atfork(NULL, NULL, on_fork_child);
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static bool fill_from_os(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t got = getrandom(p, n, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return false;
        }
        p += got;
        n -= (size_t)got;
    }
    return true;
}

/* Only reached when getrandom(2) is unavailable (old kernel, seccomp): mix
 * what differs between threads and processes so streams do not coincide. */
static void fill_fallback(uint64_t s[4])
{
    struct timespec rt, mono;
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    uint64_t x = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
    x ^= ((uint64_t)mono.tv_nsec << 32) ^ (uint64_t)mono.tv_sec;
    x ^= (uint64_t)getpid() << 40;
    x ^= (uint64_t)(uintptr_t)&tls_rng;
    for (int i = 0; i < 4; i++)
        s[i] = splitmix64(&x);
}

static void seed(rng_state_t *r, unsigned long generation)
{
    pthread_once(&atfork_once, register_atfork);
    if (!fill_from_os(r->s, sizeof r->s))
        fill_fallback(r->s);
    /* xoshiro's one forbidden state. */
    if ((r->s[0] | r->s[1] | r->s[2] | r->s[3]) == 0)
        r->s[0] = 0x9e3779b97f4a7c15ull;
    r->generation = generation;
    r->seeded = true;
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t outbox_random_u64(void)
{
    rng_state_t *r = &tls_rng;
    unsigned long generation = atomic_load_explicit(&fork_generation, memory_order_relaxed);
    if (!r->seeded || r->generation != generation)
        seed(r, generation);

    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}
