/* UUIDv7 (RFC 9562): 48-bit unix_ts_ms, version 7, 12-bit rand_a, variant
 * 0b10, 62-bit rand_b.
 *
 * rand_a is a counter (RFC 9562 §6.2, method 1) so ids minted by this
 * process are strictly increasing even within one millisecond: the primary
 * key then grows monotonically, which keeps B-tree inserts at the right
 * edge. The process-wide state packs unix_ms << 12 | counter into one
 * atomic so a compare-and-swap loop orders all threads without a lock.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "outbox_int.h"

#define UUID_MS_MAX ((INT64_C(1) << 48) - 1)
#define COUNTER_MASK 0xfff

static _Atomic int64_t last_state; /* unix_ms << 12 | counter */

/* A fresh millisecond starts the counter at a random value below 2048, so
 * ids are not guessable from their neighbours yet at least 2048 more fit in
 * the same millisecond before the counter rolls over. */
static int64_t fresh_state(int64_t ms)
{
    return ms << 12 | (int64_t)(outbox_random_u64() & 0x7ff);
}

/* The (ms, rand_a) of the next id. With exact_ms the timestamp must stay
 * what the caller asked for; when that cannot be ordered after the last id
 * (an older ms, or the counter is exhausted) rand_a falls back to random and
 * the process-wide order is not advanced. Otherwise a counter rollover
 * borrows the next millisecond, as RFC 9562 §6.2 allows. */
static int64_t next_state(int64_t ms, bool exact_ms)
{
    int64_t last = atomic_load_explicit(&last_state, memory_order_relaxed);
    int64_t fresh = fresh_state(ms);
    int64_t next;
    do {
        int64_t last_ms = last >> 12;
        if (ms > last_ms)
            next = fresh;
        else if (!exact_ms && last < (UUID_MS_MAX << 12 | COUNTER_MASK))
            next = last + 1;
        else if (ms == last_ms && (last & COUNTER_MASK) != COUNTER_MASK)
            next = last + 1;
        else
            return ms << 12 | (int64_t)(outbox_random_u64() & COUNTER_MASK);
    } while (!atomic_compare_exchange_weak_explicit(&last_state, &last, next,
                                                    memory_order_relaxed, memory_order_relaxed));
    return next;
}

static void format_uuid(const uint8_t b[16], char buf[OUTBOX_UUID_STRLEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    char *w = buf;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *w++ = '-';
        *w++ = hex[b[i] >> 4];
        *w++ = hex[b[i] & 0xf];
    }
    *w = '\0';
}

static void encode(int64_t state, char buf[OUTBOX_UUID_STRLEN + 1])
{
    uint64_t ms = (uint64_t)(state >> 12);
    unsigned rand_a = (unsigned)(state & COUNTER_MASK);
    uint64_t rand_b = outbox_random_u64();
    uint8_t b[16];
    for (int i = 0; i < 6; i++)
        b[i] = (uint8_t)(ms >> (40 - 8 * i));
    b[6] = (uint8_t)(0x70 | (rand_a >> 8));
    b[7] = (uint8_t)(rand_a & 0xff);
    for (int i = 0; i < 8; i++)
        b[8 + i] = (uint8_t)(rand_b >> (56 - 8 * i));
    b[8] = (uint8_t)(0x80 | (b[8] & 0x3f));
    format_uuid(b, buf);
}

int outbox_uuid_v7_at(int64_t unix_ms, char buf[OUTBOX_UUID_STRLEN + 1])
{
    if (!buf)
        return OUTBOX_EINVAL;
    if (unix_ms < 0 || unix_ms > UUID_MS_MAX) {
        buf[0] = '\0';
        return OUTBOX_EINVAL;
    }
    encode(next_state(unix_ms, true), buf);
    return OUTBOX_OK;
}

int outbox_uuid_v7(char buf[OUTBOX_UUID_STRLEN + 1])
{
    if (!buf)
        return OUTBOX_EINVAL;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    if (ms < 0)
        ms = 0;
    else if (ms > UUID_MS_MAX)
        ms = UUID_MS_MAX;
    encode(next_state(ms, false), buf);
    return OUTBOX_OK;
}

static bool is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

int outbox_uuid_valid(const char *s)
{
    if (!s)
        return 0;
    for (int i = 0; i < OUTBOX_UUID_STRLEN; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : !is_hex(s[i]))
            return 0;
    }
    return s[OUTBOX_UUID_STRLEN] == '\0';
}
