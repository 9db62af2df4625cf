/* The core's log goes to one callback the application installs; by
 * default nowhere, since library code never prints. */
#include <pthread.h>
#include <stdio.h>

#include "outbox_int.h"

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static void (*log_fn)(void *ctx, int level, const char *line);
static void *log_ctx;

void outbox_set_logger(void (*fn)(void *ctx, int level, const char *line), void *ctx)
{
    pthread_mutex_lock(&log_lock);
    log_fn = fn;
    log_ctx = ctx;
    pthread_mutex_unlock(&log_lock);
}

void outbox_vlog(int level, const char *prefix, const char *fmt, va_list ap)
{
    char line[1024];
    int off = 0;
    pthread_mutex_lock(&log_lock);
    if (log_fn != NULL) {
        if (prefix != NULL)
            off = snprintf(line, sizeof line, "%s: ", prefix);
        if (off < 0 || (size_t)off >= sizeof line)
            off = 0;
        vsnprintf(line + off, sizeof line - (size_t)off, fmt, ap);
        log_fn(log_ctx, level, line);
    }
    pthread_mutex_unlock(&log_lock);
}

void outbox_log(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    outbox_vlog(level, NULL, fmt, ap);
    va_end(ap);
}
