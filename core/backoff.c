/* Retry delays: exponential growth with "full jitter" (uniform in
 * [0, ceiling]), which spreads a thundering herd of retries better than
 * equal or decorrelated jitter for the same mean delay. */
#include "outbox_int.h"

int64_t outbox_backoff_ceiling_us(int64_t base_us, int64_t cap_us, int attempt)
{
    if (base_us <= 0 || cap_us <= 0)
        return 0;
    if (attempt < 1)
        attempt = 1;
    if (base_us >= cap_us)
        return cap_us;
    int shift = attempt - 1;
    /* base << shift would overflow (or exceed any int64 cap): the cap wins. */
    if (shift >= 63 || base_us > (INT64_MAX >> shift))
        return cap_us;
    int64_t v = base_us << shift;
    return v < cap_us ? v : cap_us;
}

int64_t outbox_backoff_us(int64_t base_us, int64_t cap_us, int attempt)
{
    int64_t ceiling = outbox_backoff_ceiling_us(base_us, cap_us, attempt);
    if (ceiling <= 0)
        return 0;
    /* Inclusive range; ceiling <= INT64_MAX so range <= 2^63 and fits. */
    uint64_t range = (uint64_t)ceiling + 1;
    /* Reject the 2^64 mod range lowest draws so the modulo is unbiased. */
    uint64_t reject_below = (0 - range) % range;
    uint64_t r;
    do
        r = outbox_random_u64();
    while (r < reject_below);
    return (int64_t)(r % range);
}
