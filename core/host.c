/* The services table lent to drivers, and the clocks the core uses. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "outbox/kit.h"
#include "outbox_int.h"

int64_t outbox_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t outbox_monotonic_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void outbox_cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

void outbox_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until_us)
{
    struct timespec ts = {.tv_sec = (time_t)(until_us / 1000000),
                          .tv_nsec = (long)(until_us % 1000000) * 1000};
    pthread_cond_timedwait(cv, mu, &ts);
}

int outbox_us_to_ms(int64_t us)
{
    if (us <= 0)
        return 0;
    if (us / 1000 >= INT_MAX)
        return INT_MAX;
    return (int)((us + 999) / 1000);
}

void outbox_sleep_us(int64_t us, const atomic_int *stop)
{
    /* Sleep in slices so a stop request is seen within 20 ms. Callers pass
     * bounded durations (OUTBOX_DURATION_MAX_US); the end saturates anyway,
     * so a bad one sleeps long instead of overflowing. */
    const int64_t slice = 20000;
    int64_t start = outbox_monotonic_us();
    int64_t end = us > INT64_MAX - start ? INT64_MAX : start + us;
    for (;;) {
        if (stop != NULL && atomic_load(stop))
            return;
        int64_t left = end - outbox_monotonic_us();
        if (left <= 0)
            return;
        if (left > slice)
            left = slice;
        struct timespec ts = {.tv_sec = left / 1000000, .tv_nsec = (left % 1000000) * 1000};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
            if (stop != NULL && atomic_load(stop))
                return;
        }
    }
}

static int host_error(outbox_diag_t *d, int code, const char *fmt, ...) OUTBOX_PRINTF(3, 4);
static int host_error(outbox_diag_t *d, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    outbox_diag_vset(d, code, fmt, ap);
    va_end(ap);
    return code;
}

static int host_verror(outbox_diag_t *d, int code, const char *fmt, va_list ap) OUTBOX_PRINTF(3, 0);
static int host_verror(outbox_diag_t *d, int code, const char *fmt, va_list ap)
{
    outbox_diag_vset(d, code, fmt, ap);
    return code;
}

static void host_log(int level, const char *driver, const char *fmt, ...) OUTBOX_PRINTF(3, 4);
static void host_log(int level, const char *driver, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    outbox_vlog(level, driver, fmt, ap);
    va_end(ap);
}

/* The redactor the host lends: the kit's rule, in the host's memory. */
static outbox_redactor_t *host_redactor_new(const outbox_uri_t *uri)
{
    return outbox_kit_redactor_new_builtin(malloc, free, uri);
}

/* The policies (ABI 1.4) are the kit's builtins, compiled here: a driver
 * built against older headers, whose own copies may hold an older rule,
 * gets this library's through the table. */
static const outbox_host_t host_table = {
    .struct_size = sizeof(outbox_host_t),
    .alloc = malloc,
    .realloc = realloc,
    .free = free,
    .error = host_error,
    .log = host_log,
    .now_us = outbox_now_us,
    .monotonic_us = outbox_monotonic_us,
    .verror = host_verror,
    .opt_duration = outbox_kit_opt_duration_builtin,
    .opt_int = outbox_kit_opt_int_builtin,
    .opt_bool = outbox_kit_opt_bool_builtin,
    .opt_secret = outbox_kit_opt_secret_builtin,
    .uri_show = outbox_kit_uri_show_builtin,
    .redactor_new = host_redactor_new,
    .redact = outbox_kit_redact_builtin,
    .redactor_free = outbox_kit_redactor_free_builtin,
};

const outbox_host_t *outbox_host_table(void)
{
    return &host_table;
}
