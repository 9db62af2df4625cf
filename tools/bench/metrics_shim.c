/* outbox-bench runs its relays with outbox relay's metrics module
 * (tools/outbox/metrics.c, for --metrics), which reports a failed start
 * with cli_error(). Here the message is kept for the bench's own one-line
 * error (bench_metrics_error), not printed; the module's debug log lines
 * (cli_log) are dropped. */
#include <stdarg.h>
#include <stdio.h>

#include "bench.h"
#include "cli.h"

char bench_metrics_error[1024];

int cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(bench_metrics_error, sizeof bench_metrics_error, fmt, ap);
    va_end(ap);
    return CLI_EXIT_ERROR;
}

void cli_log(int level, const char *fmt, ...)
{
    (void)level;
    (void)fmt;
}
