/* outbox-bench: the process's resident set and its high-water mark, from
 * /proc, for the relay's share of memory. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench.h"

static long status_kb(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && line[n] == ':') {
            v = strtol(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

long bench_rss_kb(void)
{
    return status_kb("VmRSS");
}

long bench_hwm_kb(void)
{
    return status_kb("VmHWM");
}

/* The high-water marks a reset took away, so that bench_peak_rss_kb()
 * still reports the whole run's peak. */
static atomic_long hwm_before_resets;

long bench_peak_before_resets_kb(void)
{
    return atomic_load(&hwm_before_resets);
}

int bench_hwm_reset(void)
{
    long hwm = bench_hwm_kb();
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0 && ru.ru_maxrss > hwm)
        hwm = ru.ru_maxrss;
    if (hwm > atomic_load(&hwm_before_resets))
        atomic_store(&hwm_before_resets, hwm);
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f)
        return -1;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}
