/* The tool's log: the core's lines and the tool's own, one line per
 * record, on stderr or in a file, as text, logfmt or JSON.
 *
 *   text    outbox: 2026-11-30T06:35:13.123Z info: relay orders: started ...
 *   logfmt  ts=2026-11-30T06:35:13.123Z level=info route=orders msg="relay orders: started ..."
 *   json    {"ts":"2026-11-30T06:35:13.123Z","level":"info","route":"orders","msg":"..."}
 *
 * route is there when the line is about one route (the relay's lines begin
 * "relay NAME: "). Every record has the URIs' secrets masked (tool_redact)
 * and no control byte unescaped, so it stays one line. A record is written
 * with one write(2); with a log file opened O_APPEND, lines of several
 * threads never interleave, and a rotated file is let go by
 * cli_log_reopen() (the relay calls it on SIGHUP). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static atomic_bool verbose;
static atomic_bool quiet;
static atomic_int format = CLI_LOG_TEXT;

/* The log file: its path, and the descriptor written to (-1: stderr).
 * Swapped under the lock by a reopen; every write holds it too. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char *log_path;
static int log_fd = -1;

static const char *level_name(int level)
{
    switch (level) {
    case OUTBOX_LOG_ERROR: return "error";
    case OUTBOX_LOG_WARN: return "warning";
    case OUTBOX_LOG_INFO: return "info";
    default: return "debug";
    }
}

/* "2026-11-30T06:35:13.123Z" */
static void timestamp(char buf[32])
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, 24, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, 32 - n, ".%03dZ", (int)(ts.tv_nsec / 1000000) % 1000);
}

/* A growing output line; on allocation failure it keeps what it has. */
typedef struct line {
    char *p;
    size_t len, cap;
    bool failed;
} line_t;

static void put_bytes(line_t *l, const char *s, size_t n)
{
    if (l->failed)
        return;
    if (l->len + n + 2 > l->cap) {
        size_t cap = (l->len + n + 2) * 2;
        char *p = realloc(l->p, cap);
        if (!p) {
            l->failed = true;
            return;
        }
        l->p = p;
        l->cap = cap;
    }
    memcpy(l->p + l->len, s, n);
    l->len += n;
    l->p[l->len] = '\0';
}

static void put_str(line_t *l, const char *s)
{
    put_bytes(l, s, strlen(s));
}

/* s with control bytes as \xNN (text), or as a quoted logfmt / JSON string
 * body (quotes and backslashes escaped; JSON control bytes as \u00NN). */
static void put_escaped(line_t *l, const char *s, size_t n, int fmt)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c < 0x20 || c == 0x7f) {
            if (fmt == CLI_LOG_JSON)
                snprintf(esc, sizeof esc, "\\u%04x", c);
            else
                snprintf(esc, sizeof esc, "\\x%02x", c);
            put_str(l, esc);
        } else if (fmt != CLI_LOG_TEXT && (c == '"' || c == '\\')) {
            esc[0] = '\\';
            esc[1] = (char)c;
            put_bytes(l, esc, 2);
        } else {
            put_bytes(l, (const char *)&s[i], 1);
        }
    }
}

/* The route a core line is about: "relay NAME: ..." gives NAME. */
static bool line_route(const char *text, const char **route, size_t *len)
{
    if (strncmp(text, "relay ", 6) != 0)
        return false;
    const char *name = text + 6;
    const char *end = strstr(name, ": ");
    if (!end || end == name)
        return false;
    *route = name;
    *len = (size_t)(end - name);
    return true;
}

/* A logfmt value needs quotes when it is empty or holds a space, a quote,
 * an equals sign or a byte below 0x21. */
static bool logfmt_plain(const char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c == '"' || c == '=' || c == '\\' || c == 0x7f)
            return false;
    }
    return true;
}

static void put_logfmt_pair(line_t *l, const char *key, const char *v, size_t n, bool first)
{
    if (!first)
        put_str(l, " ");
    put_str(l, key);
    put_str(l, "=");
    if (logfmt_plain(v, n)) {
        put_bytes(l, v, n);
    } else {
        put_str(l, "\"");
        put_escaped(l, v, n, CLI_LOG_LOGFMT);
        put_str(l, "\"");
    }
}

static void put_json_pair(line_t *l, const char *key, const char *v, size_t n, bool first)
{
    put_str(l, first ? "{\"" : ",\"");
    put_str(l, key);
    put_str(l, "\":\"");
    put_escaped(l, v, n, CLI_LOG_JSON);
    put_str(l, "\"");
}

static void format_record(line_t *l, int fmt, int level, const char *prefix, const char *text)
{
    char ts[32];
    timestamp(ts);
    const char *lvl = level_name(level);
    const char *route = NULL;
    size_t route_len = 0;
    bool has_route = line_route(text, &route, &route_len);
    switch (fmt) {
    case CLI_LOG_LOGFMT:
        put_logfmt_pair(l, "ts", ts, strlen(ts), true);
        put_logfmt_pair(l, "level", lvl, strlen(lvl), false);
        if (has_route)
            put_logfmt_pair(l, "route", route, route_len, false);
        put_logfmt_pair(l, "msg", text, strlen(text), false);
        break;
    case CLI_LOG_JSON:
        put_json_pair(l, "ts", ts, strlen(ts), true);
        put_json_pair(l, "level", lvl, strlen(lvl), false);
        if (has_route)
            put_json_pair(l, "route", route, route_len, false);
        put_json_pair(l, "msg", text, strlen(text), false);
        put_str(l, "}");
        break;
    default:
        put_str(l, prefix ? prefix : "outbox: ");
        if (!prefix) {
            put_str(l, ts);
            put_str(l, " ");
            put_str(l, lvl);
            put_str(l, ": ");
        }
        put_escaped(l, text, strlen(text), CLI_LOG_TEXT);
        break;
    }
    put_str(l, "\n");
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* nowhere left to say it */
        p += w;
        n -= (size_t)w;
    }
}

void cli_log_record(int level, const char *prefix, const char *text)
{
    char *clean = tool_redact(text);
    line_t l = {0};
    format_record(&l, prefix ? CLI_LOG_TEXT : atomic_load(&format), level, prefix,
                  clean ? clean : "out of memory");
    free(clean);
    pthread_mutex_lock(&log_lock);
    int fd = prefix || log_fd < 0 ? STDERR_FILENO : log_fd;
    if (l.failed || !l.p)
        write_all(fd, "outbox: out of memory\n", 22);
    else
        write_all(fd, l.p, l.len);
    pthread_mutex_unlock(&log_lock);
    free(l.p);
}

static void log_line(void *ctx, int level, const char *line)
{
    (void)ctx;
    if (level >= OUTBOX_LOG_DEBUG && !atomic_load(&verbose))
        return;
    if (level >= OUTBOX_LOG_INFO && atomic_load(&quiet))
        return;
    cli_log_record(level, NULL, line);
}

void cli_log(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *msg = NULL;
    int rc = vasprintf(&msg, fmt, ap);
    va_end(ap);
    log_line(NULL, level, rc < 0 ? "out of memory" : msg);
    if (rc >= 0)
        free(msg);
}

void cli_logging_init(void)
{
    outbox_set_logger(log_line, NULL);
}

void cli_set_verbose(bool on)
{
    atomic_store(&verbose, on);
}

void cli_set_quiet(bool on)
{
    atomic_store(&quiet, on);
}

bool cli_log_set_format(const char *name)
{
    static const char *const names[] = {[CLI_LOG_TEXT] = "text", [CLI_LOG_LOGFMT] = "logfmt",
                                        [CLI_LOG_JSON] = "json"};
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
        if (strcmp(name, names[i]) == 0) {
            atomic_store(&format, i);
            return true;
        }
    return false;
}

int cli_log_format(void)
{
    return atomic_load(&format);
}

static int open_log(const char *path)
{
    return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
}

bool cli_log_open_file(const char *path)
{
    int fd = open_log(path);
    if (fd < 0) {
        cli_error("cannot open the log file %s: %s", path, strerror(errno));
        return false;
    }
    char *copy = strdup(path);
    if (!copy) {
        close(fd);
        cli_error("out of memory");
        return false;
    }
    pthread_mutex_lock(&log_lock);
    if (log_fd >= 0)
        close(log_fd);
    free(log_path);
    log_fd = fd;
    log_path = copy;
    pthread_mutex_unlock(&log_lock);
    return true;
}

void cli_log_reopen(void)
{
    pthread_mutex_lock(&log_lock);
    char *path = log_path ? strdup(log_path) : NULL;
    pthread_mutex_unlock(&log_lock);
    if (!path)
        return;
    int fd = open_log(path);
    if (fd < 0) {
        /* Keep writing to the old file: a line there beats no line. */
        cli_log(OUTBOX_LOG_ERROR, "cannot reopen the log file %s: %s; still writing to the old one",
                path, strerror(errno));
        free(path);
        return;
    }
    pthread_mutex_lock(&log_lock);
    int old = log_fd;
    log_fd = fd;
    pthread_mutex_unlock(&log_lock);
    if (old >= 0)
        close(old);
    cli_log(OUTBOX_LOG_INFO, "log file %s reopened", path);
    free(path);
}

void cli_log_close(void)
{
    pthread_mutex_lock(&log_lock);
    if (log_fd >= 0)
        close(log_fd);
    log_fd = -1;
    free(log_path);
    log_path = NULL;
    pthread_mutex_unlock(&log_lock);
}

/* ------------------------------------------------------ error lines */

/* Writes prefix + text + "\n" on stderr as one write, with the URIs'
 * secrets masked and control characters (a newline in a library message or
 * a user's value) made visible, so a message is always exactly one line. */
static void put_line(const char *prefix, const char *text)
{
    cli_log_record(OUTBOX_LOG_ERROR, prefix, text);
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
