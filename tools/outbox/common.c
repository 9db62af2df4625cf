/* What every subcommand needs: error lines, the core's log on stderr, the
 * clock, and opening a store. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static atomic_bool verbose;

/* Writes "outbox: " + text + "\n" as one write, with control characters
 * (a newline in a library message or a user's value) made visible, so a
 * message is always exactly one line. */
static void put_line(const char *prefix, const char *text)
{
    size_t n = strlen(text);
    char *line = malloc(strlen(prefix) + 4 * n + 2);
    if (!line) {
        fputs(prefix, stderr);
        fputs("out of memory\n", stderr);
        return;
    }
    char *w = line + strlen(strcpy(line, prefix));
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c < 0x20 || c == 0x7f)
            w += sprintf(w, "\\x%02x", c);
        else
            *w++ = (char)c;
    }
    *w++ = '\n';
    *w = '\0';
    fputs(line, stderr);
    free(line);
}

int cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *msg = NULL;
    int rc = vasprintf(&msg, fmt, ap);
    va_end(ap);
    put_line("outbox: ", rc < 0 ? "out of memory" : msg);
    if (rc >= 0)
        free(msg);
    return CLI_EXIT_ERROR;
}

int cli_diag_error(const char *what, int code, const char *message)
{
    const char *why = message && message[0] ? message : outbox_strerror(code);
    if (what)
        return cli_error("%s: %s", what, why);
    return cli_error("%s", why);
}

/* ---------------------------------------------------------------- log */

static const char *level_name(int level)
{
    switch (level) {
    case OUTBOX_LOG_ERROR: return "error";
    case OUTBOX_LOG_WARN: return "warning";
    case OUTBOX_LOG_INFO: return "info";
    default: return "debug";
    }
}

static void log_to_stderr(void *ctx, int level, const char *line)
{
    (void)ctx;
    if (level >= OUTBOX_LOG_DEBUG && !atomic_load(&verbose))
        return;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "outbox: %s: ", level_name(level));
    put_line(prefix, line);
}

void cli_logging_init(void)
{
    outbox_set_logger(log_to_stderr, NULL);
}

void cli_set_verbose(bool on)
{
    atomic_store(&verbose, on);
}

int64_t cli_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ------------------------------------------------------------- stores */

int cli_open_store(const char *cmd, const cli_store_args_t *a, uint32_t open_flags,
                   outbox_store_t **out)
{
    *out = NULL;
    if (!cli_require(cmd, "--store", a->uri) || !cli_relation_ok(a->relation))
        return CLI_EXIT_ERROR;
    outbox_store_options_t opts = {
        .struct_size = sizeof opts,
        .relation = a->relation,
        .flags = open_flags,
    };
    outbox_diag_t d = {0};
    int rc = outbox_store_open(a->uri, &opts, out, &d);
    if (rc != OUTBOX_OK) {
        *out = NULL;
        return cli_diag_error(cmd, rc, d.message);
    }
    return CLI_EXIT_OK;
}
