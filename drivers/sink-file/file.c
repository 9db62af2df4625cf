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

#include "outbox/driver.h"

#define FILE_SINK_NAME "file"

static const outbox_host_t *host;

typedef struct file_sink {
    int fd;
    bool is_file; /* false: stdout, which is neither locked, truncated nor fsync'd */
} file_sink_t;

/* A growable byte buffer; failed stays set once an allocation fails. */
typedef struct buf {
    char *data;
    size_t len, cap;
    bool failed;
} buf_t;

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
    bool local = !uri->host || !uri->host[0] || strcmp(uri->host, "localhost") == 0;
    if (uri->user || uri->password || !local || uri->port)
        return host->error(d, OUTBOX_EINVAL,
                           "file sink URI %s names a host; use file:///absolute/path or "
                           "file:relative/path",
                           uri->raw);

    bool is_stdout = strcmp(uri->scheme, "stdout") == 0;
    const char *path = uri->path ? uri->path : "";
    if (is_stdout && path[0])
        return host->error(d, OUTBOX_EINVAL, "stdout sink URI takes no path: %s", uri->raw);
    if (!is_stdout && !path[0])
        return host->error(d, OUTBOX_EINVAL, "file sink URI %s has no path", uri->raw);

    int fd = STDOUT_FILENO;
    if (!is_stdout) {
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

/* --------------------------------------------------------------- buffers */

static void buf_reserve(buf_t *b, size_t extra)
{
    if (b->failed)
        return;
    if (extra > SIZE_MAX / 2 - b->len) {
        b->failed = true;
        return;
    }
    if (b->len + extra <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra)
        cap *= 2;
    char *p = host->realloc(b->data, cap);
    if (!p) {
        b->failed = true;
        return;
    }
    b->data = p;
    b->cap = cap;
}

static void buf_put(buf_t *b, const char *s, size_t n)
{
    buf_reserve(b, n);
    if (b->failed)
        return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
}

static void buf_puts(buf_t *b, const char *s)
{
    buf_put(b, s, strlen(s));
}

/* Length of the well-formed UTF-8 sequence at s (1..4), or 0 when the
 * bytes there are not one (stray continuation, overlong, surrogate,
 * beyond U+10FFFF, truncated). */
static size_t utf8_seq_len(const unsigned char *s, size_t avail)
{
    unsigned char c = s[0];
    size_t n;
    unsigned char lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (c >= 0xc2 && c <= 0xdf)
        n = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else
        return 0;
    if (avail < n || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return n;
}

/* A JSON string literal. Bytes that are not UTF-8 become U+FFFD so the
 * line stays valid JSON whatever a header carries. */
static void buf_json_string(buf_t *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t len = strlen(s);
    buf_put(b, "\"", 1);
    for (size_t i = 0; i < len;) {
        unsigned char c = p[i];
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            buf_put(b, esc, 2);
            i++;
        } else if (c < 0x20) {
            char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            switch (c) {
            case '\n': buf_put(b, "\\n", 2); break;
            case '\r': buf_put(b, "\\r", 2); break;
            case '\t': buf_put(b, "\\t", 2); break;
            default: buf_put(b, esc, 6); break;
            }
            i++;
        } else if (c < 0x80) {
            buf_put(b, (const char *)p + i, 1);
            i++;
        } else {
            size_t n = utf8_seq_len(p + i, len - i);
            if (n) {
                buf_put(b, (const char *)p + i, n);
                i += n;
            } else {
                buf_puts(b, "\\ufffd");
                i++;
            }
        }
    }
    buf_put(b, "\"", 1);
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

static void buf_attribute(buf_t *b, const outbox_message_t *m, const char *name, bool *first)
{
    const char *v = attribute_value(m, name);
    if (!v)
        return;
    buf_puts(b, *first ? "{\"" : ",\"");
    buf_puts(b, name);
    buf_puts(b, "\":");
    buf_json_string(b, v);
    *first = false;
}

/* Appends the event as one line. The payload is JSON already, checked at
 * staging; any CR or LF in it can only be whitespace between tokens (JSON
 * strings cannot hold raw control characters), so they become spaces and
 * the value is unchanged. */
static void buf_event(buf_t *b, const outbox_message_t *m)
{
    bool first = true;
    size_t i;
    for (i = 0; i < CE_BEFORE_DATA; i++)
        buf_attribute(b, m, ce_attributes[i], &first);
    buf_puts(b, first ? "{\"data\":" : ",\"data\":");
    size_t at = b->len;
    buf_put(b, m->payload, m->payload_len);
    if (!b->failed)
        for (size_t j = at; j < b->len; j++)
            if (b->data[j] == '\n' || b->data[j] == '\r')
                b->data[j] = ' ';
    first = false;
    for (; i < sizeof ce_attributes / sizeof ce_attributes[0]; i++)
        buf_attribute(b, m, ce_attributes[i], &first);
    buf_put(b, "}\n", 2);
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

/* Writes the batch; 0 or an errno. */
static int write_batch(file_sink_t *k, const buf_t *b)
{
    if (!k->is_file)
        return write_all(k->fd, b->data, b->len);

    int locked = lock_file(k->fd) == 0;
    struct stat st;
    int have_size = fstat(k->fd, &st) == 0;
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

static int file_publish(void *handle, const outbox_message_t *msgs, size_t n,
                        outbox_publish_result_t *results, outbox_diag_t *d)
{
    file_sink_t *k = handle;
    buf_t b = {0};
    size_t written = 0;

    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].payload || msgs[i].payload_len == 0) {
            results[i].status = OUTBOX_PUBLISH_REJECT;
            snprintf(results[i].message, sizeof results[i].message, "event %s has no payload",
                     msgs[i].event_id ? msgs[i].event_id : "?");
            continue;
        }
        buf_event(&b, &msgs[i]);
        results[i].status = OUTBOX_PUBLISH_OK;
        written++;
    }
    if (b.failed) {
        host->free(b.data);
        return host->error(d, OUTBOX_ENOMEM, "out of memory building a batch of %zu events", n);
    }
    if (written == 0) {
        host->free(b.data);
        return OUTBOX_OK;
    }

    int err = write_batch(k, &b);
    host->free(b.data);
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
    .abi_minor = OUTBOX_ABI_MINOR,
    .kind = OUTBOX_DRIVER_SINK,
    .name = FILE_SINK_NAME,
    .version = "0.1.0",
    .schemes = file_schemes,
    .capabilities = OUTBOX_SINK_CAP_ORDERED,
    .init = file_init,
    .sink = &file_vtable,
};

OUTBOX_DRIVER_ENTRY(file_driver)
