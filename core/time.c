/* RFC 3339 rendering of microsecond instants. This runs once per published
 * event, so it converts days to a civil date with integer arithmetic (the
 * days-from-civil inverse) instead of gmtime_r, which takes glibc's
 * timezone lock on every call. */
#include <stdio.h>
#include <string.h>

#include "outbox_int.h"

static char *digits(char *p, int64_t v, int width)
{
    for (int i = width - 1; i >= 0; i--) {
        p[i] = (char)('0' + v % 10);
        v /= 10;
    }
    return p + width;
}

void outbox_format_rfc3339(int64_t us, char buf[40])
{
    /* Floor division, so instants before the epoch get a positive fraction. */
    int64_t sec = us / 1000000;
    int64_t frac = us % 1000000;
    if (frac < 0) {
        frac += 1000000;
        sec -= 1;
    }
    int64_t days = sec / 86400;
    int64_t sod = sec % 86400;
    if (sod < 0) {
        sod += 86400;
        days -= 1;
    }
    /* Civil date of a day count, with March-based years of 400-year eras. */
    int64_t z = days + 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int64_t day = doy - (153 * mp + 2) / 5 + 1;
    int64_t month = mp < 10 ? mp + 3 : mp - 9;
    int64_t year = yoe + era * 400 + (month <= 2);
    if (year < 0 || year > 9999) {
        /* Outside RFC 3339's four-digit years: still a bounded, readable string. */
        char wide[96];
        int n = snprintf(wide, sizeof wide, "%lld-%02d-%02dT%02d:%02d:%02d.%06dZ", (long long)year,
                         (int)month, (int)day, (int)(sod / 3600), (int)(sod / 60 % 60),
                         (int)(sod % 60), (int)frac);
        size_t len = n < 0 ? 0 : (size_t)n < 39 ? (size_t)n : 39;
        memcpy(buf, wide, len);
        buf[len] = '\0';
        return;
    }
    char *p = digits(buf, year, 4);
    *p++ = '-';
    p = digits(p, month, 2);
    *p++ = '-';
    p = digits(p, day, 2);
    *p++ = 'T';
    p = digits(p, sod / 3600, 2);
    *p++ = ':';
    p = digits(p, sod / 60 % 60, 2);
    *p++ = ':';
    p = digits(p, sod % 60, 2);
    *p++ = '.';
    p = digits(p, frac, 6);
    *p++ = 'Z';
    *p = '\0';
}
