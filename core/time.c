#include <stdio.h>
#include <time.h>

#include "outbox_int.h"

void outbox_format_rfc3339(int64_t us, char buf[40])
{
    /* Floor division, so instants before the epoch get a positive fraction. */
    int64_t sec = us / 1000000;
    int64_t frac = us % 1000000;
    if (frac < 0) {
        frac += 1000000;
        sec -= 1;
    }
    time_t t = (time_t)sec;
    struct tm tm;
    if (!gmtime_r(&t, &tm)) {
        /* Unreachable for int64 microseconds on a 64-bit time_t; an empty
         * string is safer for callers than an uninitialised buffer. */
        buf[0] = '\0';
        return;
    }
    int n = snprintf(buf, 40, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)frac);
    if (n < 0)
        buf[0] = '\0';
}
