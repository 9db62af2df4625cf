/* The file: and stdout: sink.
 *
 * Each message becomes one CloudEvents 1.0 structured-mode JSON object on
 * one line (JSON Lines). A publish call is written with as few write(2)
 * calls as possible and, for file:, fsync'd before any message is reported
 * OK, so OK means "on disk".
 *
 * Several handles (relay workers, other processes) may append to the same
 * file: a batch is written under an exclusive flock(2), and a batch whose
 * write fails half-way is cut back off the file, so a reader never sees a
 * torn line followed by good ones.
 *
 * A writer killed inside write(2) cannot cut anything back: it leaves a
 * partial last line, and the lock dies with it. So whoever takes the lock
 * next first cuts the file back to just after its last '\n' before it
 * appends. Those bytes were never reported OK (OK comes only after the whole
 * write and the fsync succeeded), so their events are still claimable and
 * get written again on a whole line.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "outbox/kit.h"
#include "outbox/version.h"

#define FILE_SINK_NAME "file"

static const outbox_host_t *host;

typedef struct file_sink {
    int fd;
    bool is_file;  /* false: stdout, which is neither locked, truncated nor fsync'd */
    bool can_read; /* opened read-write, so a partial tail can be found */
    char path[256]; /* for log lines; cut when longer */
} file_sink_t;

static int file_init(const outbox_host_t *h, outbox_diag_t *d)
{
    (void)d;
    host = h;
    return OUTBOX_OK;
}

/* ------------------------------------------------------------------ open */

static int file_open(const outbox_sink_open_t *params, void **handle, outbox_diag_t *d)
{
    const outbox_uri_t *uri = params->uri;
    *handle = NULL;

    if (uri->n_params > 0)
        return host->error(d, OUTBOX_EINVAL, "unknown parameter %s in file sink URI",
                           uri->params[0].key);
    char shown[OUTBOX_MESSAGE_MAX / 2];
    outbox_kit_uri_show(host, uri, shown, sizeof shown);
    bool local = !uri->host || !uri->host[0] || strcmp(uri->host, "localhost") == 0;
    if (uri->user || uri->password || !local || uri->port)
        return host->error(d, OUTBOX_EINVAL,
                           "file sink URI %s names a host; use file:///absolute/path or "
                           "file:relative/path",
                           shown);

    bool is_stdout = strcmp(uri->scheme, "stdout") == 0;
    const char *path = uri->path ? uri->path : "";
    if (is_stdout && path[0])
        return host->error(d, OUTBOX_EINVAL, "stdout sink URI takes no path: %s", shown);
    if (!is_stdout && !path[0])
        return host->error(d, OUTBOX_EINVAL, "file sink URI %s has no path", shown);

    int fd = STDOUT_FILENO;
    bool can_read = false;
    if (!is_stdout) {
        /* Read access is only for finding a partial tail; a file we may
         * write but not read is still a sink. */
        fd = open(path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        can_read = fd >= 0;
        if (fd < 0 && errno == EACCES)
            fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
            char eb[128];
            return host->error(d, OUTBOX_EPERMANENT, "cannot open file sink %s: %s", path,
                               strerror_r(errno, eb, sizeof eb));
        }
    }

    file_sink_t *k = host->alloc(sizeof *k);
    if (!k) {
        if (!is_stdout)
            close(fd);
        return host->error(d, OUTBOX_ENOMEM, "out of memory opening file sink");
    }
    k->fd = fd;
    k->is_file = !is_stdout;
    k->can_read = can_read;
    outbox_kit_text_line(path, k->path, sizeof k->path);
    *handle = k;
    return OUTBOX_OK;
}

static void file_close(void *handle)
{
    file_sink_t *k = handle;
    if (!k)
        return;
    if (k->is_file)
        close(k->fd);
    host->free(k);
}

/* --------------------------------------------------------------- publish */

/* Attributes in the order they are written; data goes after the first
 * seven. Headers with other names are not written. */
static const char *const ce_attributes[] = {
    "specversion", "id", "type", "source", "time", "datacontenttype", "partitionkey",
    "traceparent", "tenantid", "correlationid", "causationid", "executionid", "hlc",
};
#define CE_BEFORE_DATA 7

static const char *header_value(const outbox_message_t *m, const char *name)
{
    for (size_t i = 0; i < m->n_headers; i++)
        if (m->headers[i].name && m->headers[i].value && strcmp(m->headers[i].name, name) == 0)
            return m->headers[i].value;
    return NULL;
}

/* Values a message can always supply even if the host left a header out. */
static const char *attribute_value(const outbox_message_t *m, const char *name)
{
    const char *v = header_value(m, name);
    if (v)
        return v;
    if (strcmp(name, "specversion") == 0)
        return "1.0";
    if (strcmp(name, "datacontenttype") == 0)
        return "application/json";
    if (strcmp(name, "id") == 0)
        return m->event_id;
    if (strcmp(name, "partitionkey") == 0)
        return m->key;
    return NULL;
}

/* Headers are C strings; the JSON escaping turns bytes that are not UTF-8
 * into U+FFFD, so the line stays valid JSON whatever a header carries. */
static void buf_attribute(outbox_kit_buf_t *b, const outbox_message_t *m, const char *name,
                          bool *first)
{
    const char *v = attribute_value(m, name);
    if (!v)
        return;
    outbox_kit_buf_puts(b, *first ? "{\"" : ",\"");
    outbox_kit_buf_puts(b, name);
    outbox_kit_buf_puts(b, "\":");
    outbox_kit_buf_json_string(b, v, strlen(v));
    *first = false;
}

/* Appends the event as one line. The payload is JSON already, checked at
 * staging; any CR or LF in it can only be whitespace between tokens (JSON
 * strings cannot hold raw control characters), so they become spaces and
 * the value is unchanged. */
static void buf_event(outbox_kit_buf_t *b, const outbox_message_t *m)
{
    bool first = true;
    size_t i;
    for (i = 0; i < CE_BEFORE_DATA; i++)
        buf_attribute(b, m, ce_attributes[i], &first);
    outbox_kit_buf_puts(b, first ? "{\"data\":" : ",\"data\":");
    size_t at = b->len;
    outbox_kit_buf_put(b, m->payload, m->payload_len);
    if (!b->failed)
        for (size_t j = at; j < b->len; j++)
            if (b->data[j] == '\n' || b->data[j] == '\r')
                b->data[j] = ' ';
    first = false;
    for (; i < sizeof ce_attributes / sizeof ce_attributes[0]; i++)
        buf_attribute(b, m, ce_attributes[i], &first);
    outbox_kit_buf_put(b, "}\n", 2);
}

/* 0, or the errno of the write that failed. */
static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (w == 0)
            return EIO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int lock_file(int fd)
{
    while (flock(fd, LOCK_EX) < 0)
        if (errno != EINTR)
            return -1; /* e.g. ENOLCK: write without the lock rather than not at all */
    return 0;
}

/* Where the whole lines of a regular file of size bytes end: just after its
 * last '\n', 0 when it has none, size when it ends in '\n' (or cannot be
 * read, when nothing is cut). */
static off_t whole_lines_end(int fd, off_t size)
{
    char block[4096];
    off_t end = size;
    while (end > 0) {
        size_t n = end < (off_t)sizeof block ? (size_t)end : sizeof block;
        ssize_t r = pread(fd, block, n, end - (off_t)n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r != (ssize_t)n)
            return size;
        for (size_t i = n; i > 0; i--)
            if (block[i - 1] == '\n')
                return end - (off_t)n + (off_t)i;
        end -= (off_t)n;
    }
    return 0;
}

/* Under the lock: cuts off the partial line a writer killed inside write(2)
 * left, so the next line does not get glued onto it. *size becomes the
 * size after the cut. */
static void repair_tail(file_sink_t *k, off_t *size)
{
    if (!k->can_read || *size == 0)
        return;
    off_t keep = whole_lines_end(k->fd, *size);
    if (keep == *size || ftruncate(k->fd, keep) != 0)
        return;
    host->log(OUTBOX_LOG_WARN, FILE_SINK_NAME,
              "%s: cut %lld bytes of a partial last line left by an interrupted writer", k->path,
              (long long)(*size - keep));
    *size = keep;
}

/* Writes the batch; 0 or an errno. */
static int write_batch(file_sink_t *k, const outbox_kit_buf_t *b)
{
    if (!k->is_file)
        return write_all(k->fd, b->data, b->len);

    int locked = lock_file(k->fd) == 0;
    struct stat st;
    int have_size = fstat(k->fd, &st) == 0 && S_ISREG(st.st_mode);
    /* Without the lock another writer may be mid-line: leave its tail be. */
    if (locked && have_size)
        repair_tail(k, &st.st_size);
    int err = write_all(k->fd, b->data, b->len);
    if (err && locked && have_size && ftruncate(k->fd, st.st_size) != 0) {
        /* Nothing more can be done: the torn tail stays, and the events
         * are retried after it. */
    }
    if (!err && fsync(k->fd) != 0)
        err = errno;
    if (locked)
        flock(k->fd, LOCK_UN);
    return err;
}

/* The message refused earlier in this call with msgs[i]'s key, or NULL. */
static const outbox_message_t *refused_before(const outbox_message_t *msgs,
                                              const outbox_publish_result_t *results, size_t i)
{
    if (!msgs[i].key)
        return NULL;
    for (size_t j = 0; j < i; j++)
        if (results[j].status == OUTBOX_PUBLISH_REJECT && msgs[j].key &&
            strcmp(msgs[j].key, msgs[i].key) == 0)
            return &msgs[j];
    return NULL;
}

static int file_publish(void *handle, const outbox_message_t *msgs, size_t n,
                        outbox_publish_result_t *results, outbox_diag_t *d)
{
    file_sink_t *k = handle;
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, host);
    size_t written = 0, refused = 0;

    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].payload || msgs[i].payload_len == 0) {
            results[i].status = OUTBOX_PUBLISH_REJECT;
            snprintf(results[i].message, sizeof results[i].message, "event %s has no payload",
                     msgs[i].event_id ? msgs[i].event_id : "?");
            refused++;
            continue;
        }
        /* ORDERED: nothing of a key goes out after one of its messages was
         * refused; the refusal is not stored yet, and the refused event may
         * be offered again and accepted, after which it must not follow
         * these. The scan runs only once something was refused. */
        const outbox_message_t *first = refused ? refused_before(msgs, results, i) : NULL;
        if (first) {
            results[i].status = OUTBOX_PUBLISH_RETRY;
            snprintf(results[i].message, sizeof results[i].message,
                     "held back: event %s of the same key was refused in this call",
                     first->event_id ? first->event_id : "?");
            continue;
        }
        buf_event(&b, &msgs[i]);
        results[i].status = OUTBOX_PUBLISH_OK;
        written++;
    }
    if (b.failed) {
        outbox_kit_buf_free(&b);
        return host->error(d, OUTBOX_ENOMEM, "out of memory building a batch of %zu events", n);
    }
    if (written == 0) {
        outbox_kit_buf_free(&b);
        return OUTBOX_OK;
    }

    int err = write_batch(k, &b);
    outbox_kit_buf_free(&b);
    if (err) {
        char eb[128];
        const char *why = strerror_r(err, eb, sizeof eb);
        for (size_t i = 0; i < n; i++) {
            if (results[i].status != OUTBOX_PUBLISH_OK)
                continue;
            results[i].status = OUTBOX_PUBLISH_RETRY;
            snprintf(results[i].message, sizeof results[i].message, "%s: %s",
                     k->is_file ? "file sink write" : "stdout sink write", why);
        }
    }
    return OUTBOX_OK;
}

/* ------------------------------------------------------------ descriptor */

static const char *const file_schemes[] = {"file", "stdout", NULL};

static const outbox_sink_vtable_t file_vtable = {
    .struct_size = sizeof(outbox_sink_vtable_t),
    .open = file_open,
    .close = file_close,
    .publish = file_publish,
};

static const outbox_driver_t file_driver = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = OUTBOX_ABI_MAJOR,
    .abi_minor = 0, /* the lowest it relies on: nothing past 1.0 (the kit is inline) */
    .kind = OUTBOX_DRIVER_SINK,
    .name = FILE_SINK_NAME,
    .version = OUTBOX_VERSION,
    .schemes = file_schemes,
    .capabilities = OUTBOX_SINK_CAP_ORDERED,
    .init = file_init,
    .sink = &file_vtable,
};

OUTBOX_DRIVER_ENTRY(file_driver)
