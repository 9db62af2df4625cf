/* liboutbox driver kit: the helpers every driver would otherwise write
 * again. Header-only (every function is static inline), so a driver that
 * includes it still links nothing of the core.
 *
 *  - outbox_buf_t: a growable byte string that allocates through the host
 *    table and stays NUL-terminated;
 *  - identifiers: validation, quoting and the "schema.table" split;
 *  - JSON string escaping;
 *  - UTF-8: sequence checks, and one-line, valid-UTF-8 text for messages;
 *  - URIs: parameter lookup, a check for names the driver does not know,
 *    and the URI or a client library's text for messages without secrets;
 *  - the argument checks every store's settle makes.
 *
 * Nothing here keeps state between calls; the functions are safe from any
 * thread as long as each buffer is used by one thread at a time.
 */
#ifndef OUTBOX_KIT_H
#define OUTBOX_KIT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "outbox/driver.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ buffer */

/* A growable byte string. Once an allocation fails the buffer stays failed
 * and every later append is a no-op, so a caller builds a whole statement
 * and checks `failed` once. While not failed, data[len] is '\0' (data is
 * NULL until the first append). */
typedef struct outbox_buf {
    char *data;
    size_t len;
    size_t cap;
    int failed;
    const outbox_host_t *host; /* allocates and frees data */
} outbox_buf_t;

static inline void outbox_buf_init(outbox_buf_t *b, const outbox_host_t *host)
{
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = 0;
    b->host = host;
}

/* Room for extra more bytes plus the terminator. 0 on success, -1 when the
 * buffer is (now) failed. */
static inline int outbox_buf_reserve(outbox_buf_t *b, size_t extra)
{
    if (b->failed)
        return -1;
    if (extra >= SIZE_MAX / 2 - b->len) {
        b->failed = 1;
        return -1;
    }
    if (b->len + extra + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = (char *)b->host->realloc(b->data, cap);
    if (p == NULL) {
        b->failed = 1;
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

static inline void outbox_buf_put(outbox_buf_t *b, const void *p, size_t n)
{
    if (outbox_buf_reserve(b, n) != 0)
        return;
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static inline void outbox_buf_puts(outbox_buf_t *b, const char *s)
{
    outbox_buf_put(b, s, strlen(s));
}

static inline void outbox_buf_putc(outbox_buf_t *b, char c)
{
    outbox_buf_put(b, &c, 1);
}

static inline void outbox_buf_vprintf(outbox_buf_t *b, const char *fmt, va_list ap)
{
    if (b->failed)
        return;
    /* Measure first, then write in place: no scratch buffer whose size a
     * long format could outgrow. */
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    if (n < 0) {
        b->failed = 1;
    } else if (outbox_buf_reserve(b, (size_t)n) == 0) {
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, again);
        b->len += (size_t)n;
    }
    va_end(again);
}

static inline void outbox_buf_printf(outbox_buf_t *b, const char *fmt, ...) OUTBOX_PRINTF(2, 3);
static inline void outbox_buf_printf(outbox_buf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    outbox_buf_vprintf(b, fmt, ap);
    va_end(ap);
}

/* Empties the buffer and clears a failure; keeps the memory. */
static inline void outbox_buf_reset(outbox_buf_t *b)
{
    b->len = 0;
    b->failed = 0;
    if (b->data != NULL)
        b->data[0] = '\0';
}

/* Hands the text to the caller (free it with host->free) and leaves the
 * buffer empty. NULL when the buffer failed; "" when nothing was added. */
static inline char *outbox_buf_steal(outbox_buf_t *b)
{
    if (b->data == NULL && outbox_buf_reserve(b, 0) == 0)
        b->data[0] = '\0';
    char *p = b->failed ? NULL : b->data;
    if (p == NULL)
        b->host->free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = 0;
    return p;
}

static inline void outbox_buf_free(outbox_buf_t *b)
{
    if (b->host != NULL)
        b->host->free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = 0;
}

/* A copy of s made with host->alloc; NULL when out of memory. */
static inline char *outbox_kit_strndup(const outbox_host_t *host, const char *s, size_t n)
{
    char *p = (char *)host->alloc(n + 1);
    if (p != NULL) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

static inline char *outbox_kit_strdup(const outbox_host_t *host, const char *s)
{
    return outbox_kit_strndup(host, s, strlen(s));
}

/* ------------------------------------------------------- identifiers */

/* The longest identifier part the host accepts (PostgreSQL's limit). */
#define OUTBOX_IDENT_MAX 63

/* 1 when s[0..n) matches [A-Za-z_][A-Za-z0-9_]* and is 1..63 bytes. */
static inline int outbox_ident_valid(const char *s, size_t n)
{
    if (n == 0 || n > OUTBOX_IDENT_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int letter = c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
        int digit = c >= '0' && c <= '9';
        if (!letter && !(digit && i > 0))
            return 0;
    }
    return 1;
}

/* A relation name split into its parts; schema is "" when unqualified. */
typedef struct outbox_relname {
    char schema[OUTBOX_IDENT_MAX + 1];
    char table[OUTBOX_IDENT_MAX + 1];
} outbox_relname_t;

/* Splits and validates "table" or "schema.table". 0 on success, -1 when
 * the name is not one of those (out is then all empty). */
static inline int outbox_relname_parse(const char *name, outbox_relname_t *out)
{
    out->schema[0] = out->table[0] = '\0';
    if (name == NULL)
        return -1;
    const char *dot = strchr(name, '.');
    const char *table = dot ? dot + 1 : name;
    size_t schema_len = dot ? (size_t)(dot - name) : 0;
    if ((dot && !outbox_ident_valid(name, schema_len)) || !outbox_ident_valid(table, strlen(table)))
        return -1;
    memcpy(out->schema, name, schema_len);
    out->schema[schema_len] = '\0';
    memcpy(out->table, table, strlen(table) + 1);
    return 0;
}

/* A relation beside base: same schema, the given table name. */
static inline void outbox_relname_beside(const outbox_relname_t *base, const char *table,
                                         outbox_relname_t *out)
{
    memcpy(out->schema, base->schema, sizeof out->schema);
    snprintf(out->table, sizeof out->table, "%s", table);
}

/* "schema.table" or "table", for messages. */
static inline void outbox_relname_show(const outbox_relname_t *r, char *out, size_t size)
{
    snprintf(out, size, "%s%s%s", r->schema, r->schema[0] ? "." : "", r->table);
}

/* Appends ident quoted with q (SQL: '"', MySQL: '`'), doubling any q inside. */
static inline void outbox_buf_ident(outbox_buf_t *b, const char *ident, char q)
{
    outbox_buf_putc(b, q);
    for (const char *p = ident; *p; p++) {
        if (*p == q)
            outbox_buf_putc(b, q);
        outbox_buf_putc(b, *p);
    }
    outbox_buf_putc(b, q);
}

/* Appends the relation quoted: "schema"."table", or "table". */
static inline void outbox_buf_relname(outbox_buf_t *b, const outbox_relname_t *r, char q)
{
    if (r->schema[0]) {
        outbox_buf_ident(b, r->schema, q);
        outbox_buf_putc(b, '.');
    }
    outbox_buf_ident(b, r->table, q);
}

/* Appends s as a single-quoted SQL literal, doubling quotes (for DDL text
 * only; values travel as bound parameters). */
static inline void outbox_buf_literal(outbox_buf_t *b, const char *s)
{
    outbox_buf_ident(b, s, '\'');
}

/* -------------------------------------------------------------- UTF-8 */

/* Length (1..4) of the well-formed UTF-8 sequence at s, which has avail
 * bytes, or 0 when the bytes there are not one (a stray continuation byte,
 * an overlong form, a surrogate, beyond U+10FFFF, or cut short). */
static inline size_t outbox_utf8_seq(const unsigned char *s, size_t avail)
{
    if (avail == 0)
        return 0;
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t n;
    unsigned char lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
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
    } else {
        return 0;
    }
    if (avail < n || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return n;
}

/* 1 when s[0..n) is valid UTF-8 without NUL bytes. */
static inline int outbox_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = p[i] ? outbox_utf8_seq(p + i, n - i) : 0;
        if (k == 0)
            return 0;
        i += k;
    }
    return 1;
}

/* Copies in to out (size > 0) as one line of valid UTF-8 for a message or
 * a stored error text: line breaks and tabs become one space, other
 * control bytes and bytes that are not UTF-8 become '?', and the text is
 * cut at a character boundary to fit size - 1 bytes. */
static inline void outbox_text_line(const char *in, char *out, size_t size)
{
    const unsigned char *p = (const unsigned char *)(in ? in : "");
    size_t w = 0, avail = strlen((const char *)p);
    int space = 0;
    while (*p && w + 1 < size) {
        unsigned char c = *p;
        if (c == '\n' || c == '\r' || c == '\t') {
            space = w > 0;
            p++, avail--;
            continue;
        }
        if (space) {
            out[w++] = ' ';
            space = 0;
            if (w + 1 >= size)
                break;
        }
        size_t n = outbox_utf8_seq(p, avail);
        if (n == 0 || (n == 1 && (c < 0x20 || c == 0x7f))) {
            out[w++] = '?';
            n = n ? n : 1;
        } else if (w + n < size) {
            memcpy(out + w, p, n);
            w += n;
        } else {
            break;
        }
        p += n, avail -= n;
    }
    out[w] = '\0';
}

/* --------------------------------------------------------------- JSON */

/* Appends s[0..n) as a JSON string literal (with the quotes). Bytes that
 * are not UTF-8 become U+FFFD, so the output is valid JSON whatever the
 * input holds. */
static inline void outbox_buf_json_string(outbox_buf_t *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    outbox_buf_putc(b, '"');
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        size_t k = 1;
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            outbox_buf_put(b, esc, 2);
        } else if (c == '\n') {
            outbox_buf_put(b, "\\n", 2);
        } else if (c == '\r') {
            outbox_buf_put(b, "\\r", 2);
        } else if (c == '\t') {
            outbox_buf_put(b, "\\t", 2);
        } else if (c < 0x20) {
            char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            outbox_buf_put(b, esc, 6);
        } else if ((k = outbox_utf8_seq(p + i, n - i)) != 0) {
            outbox_buf_put(b, p + i, k);
        } else {
            outbox_buf_puts(b, "\\ufffd");
            k = 1;
        }
        i += k;
    }
    outbox_buf_putc(b, '"');
}

/* ------------------------------------------------------------- settle */

/* The checks every store's settle makes before it touches anything: a
 * fence, items when n > 0, an id and a known kind in each. Clears *applied
 * (may be NULL) and every item's applied flag. 0 when the call is sound;
 * otherwise -1 with the reason in why (one line, at most size - 1 bytes),
 * for an OUTBOX_EINVAL. */
static inline int outbox_settle_check(const outbox_fence_t *fence, outbox_settle_item_t *items,
                                      size_t n, size_t *applied, char *why, size_t size)
{
    if (applied != NULL)
        *applied = 0;
    if (fence == NULL || (n > 0 && items == NULL)) {
        snprintf(why, size, "settle needs a fence and items");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        items[i].applied = 0;
        if (items[i].id == NULL) {
            snprintf(why, size, "settle item %zu has no id", i);
            return -1;
        }
        if (items[i].kind < OUTBOX_SETTLE_PUBLISHED || items[i].kind > OUTBOX_SETTLE_RELEASE) {
            snprintf(why, size, "settle item %zu has unknown kind %d", i, items[i].kind);
            return -1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- URI */

/* The value of the first parameter named key, or NULL. */
static inline const char *outbox_uri_get(const outbox_uri_t *uri, const char *key)
{
    for (size_t i = 0; uri != NULL && i < uri->n_params; i++)
        if (strcmp(uri->params[i].key, key) == 0)
            return uri->params[i].value;
    return NULL;
}

/* The first parameter whose name is not in known (NULL-terminated), or
 * NULL when every one is known: a driver refuses a misspelt option
 * instead of ignoring it. */
static inline const char *outbox_uri_unknown(const outbox_uri_t *uri, const char *const *known)
{
    for (size_t i = 0; uri != NULL && i < uri->n_params; i++) {
        const char *const *k = known;
        while (*k != NULL && strcmp(*k, uri->params[i].key) != 0)
            k++;
        if (*k == NULL)
            return uri->params[i].key;
    }
    return NULL;
}

/* Whether a parameter name (n bytes) carries a secret, whatever the case:
 * it contains "password", "passwd", "secret" or "token" (password,
 * sslpassword, sasl_password, client_secret, auth_token, ...), or it is
 * "pass" or "pwd". The core's messages and the outbox CLI mask by this same
 * rule. */
static inline int outbox_uri_secret_name(const char *name, size_t n)
{
    static const char *const words[] = {"password", "passwd", "secret", "token"};
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++) {
        size_t w = strlen(words[k]);
        for (size_t i = 0; i + w <= n; i++) {
            size_t j = 0;
            while (j < w && (name[i + j] >= 'A' && name[i + j] <= 'Z' ? name[i + j] - 'A' + 'a'
                                                                      : name[i + j]) == words[k][j])
                j++;
            if (j == w)
                return 1;
        }
    }
    if (n != 3 && n != 4)
        return 0;
    const char *word = n == 4 ? "pass" : "pwd";
    for (size_t i = 0; i < n; i++)
        if ((name[i] >= 'A' && name[i] <= 'Z' ? name[i] - 'A' + 'a' : name[i]) != word[i])
            return 0;
    return 1;
}

/* The same for a NUL-terminated key; NULL is no secret. */
static inline int outbox_uri_secret_key(const char *key)
{
    return key != NULL && outbox_uri_secret_name(key, strlen(key));
}

static inline void outbox_kit_append_(char *out, size_t size, size_t *w, const char *s)
{
    size_t n = strlen(s);
    if (*w + 1 >= size)
        return;
    if (n > size - 1 - *w)
        n = size - 1 - *w;
    memcpy(out + *w, s, n);
    *w += n;
    out[*w] = '\0';
}

/* The URI for a message (size > 0), rebuilt from its parts with the
 * password and the values of secret parameters (outbox_uri_secret_key)
 * shown as "***", as one line of valid UTF-8: drivers name the URI a
 * problem is about with this, never with uri->raw, which holds the
 * password as the user typed it. The path and parameters appear
 * percent-decoded. */
static inline void outbox_uri_show(const outbox_uri_t *uri, char *out, size_t size)
{
    size_t w = 0;
    out[0] = '\0';
    if (uri == NULL || uri->scheme == NULL)
        return;
    char text[1024];
    text[0] = '\0';
    outbox_kit_append_(text, sizeof text, &w, uri->scheme);
    outbox_kit_append_(text, sizeof text, &w, ":");
    size_t sl = strlen(uri->scheme);
    int authority = uri->raw != NULL && strncmp(uri->raw + sl, "://", 3) == 0;
    if (authority) {
        outbox_kit_append_(text, sizeof text, &w, "//");
        if (uri->user != NULL || uri->password != NULL) {
            outbox_kit_append_(text, sizeof text, &w, uri->user ? uri->user : "");
            if (uri->password != NULL)
                outbox_kit_append_(text, sizeof text, &w, ":***");
            outbox_kit_append_(text, sizeof text, &w, "@");
        }
        int v6 = uri->host != NULL && strchr(uri->host, ':') != NULL;
        outbox_kit_append_(text, sizeof text, &w, v6 ? "[" : "");
        outbox_kit_append_(text, sizeof text, &w, uri->host ? uri->host : "");
        outbox_kit_append_(text, sizeof text, &w, v6 ? "]" : "");
        if (uri->port > 0) {
            char port[16];
            snprintf(port, sizeof port, ":%d", uri->port);
            outbox_kit_append_(text, sizeof text, &w, port);
        }
    }
    outbox_kit_append_(text, sizeof text, &w, uri->path ? uri->path : "");
    for (size_t i = 0; i < uri->n_params; i++) {
        const outbox_uri_param_t *p = &uri->params[i];
        outbox_kit_append_(text, sizeof text, &w, i == 0 ? "?" : "&");
        outbox_kit_append_(text, sizeof text, &w, p->key ? p->key : "");
        outbox_kit_append_(text, sizeof text, &w, "=");
        outbox_kit_append_(text, sizeof text, &w,
                           outbox_uri_secret_key(p->key) ? "***" : (p->value ? p->value : ""));
    }
    outbox_text_line(text, out, size);
}

/* Where the password sits in uri->raw as typed (percent-encoded): the
 * text between the first ':' after "//" and the last '@' of the authority,
 * or of the whole URI when the user wrote a '/' or '?' into the password.
 * 0 when there is none; else its length, its start in *at. */
static inline size_t outbox_uri_raw_password_(const char *raw, const char **at)
{
    const char *a = raw != NULL ? strstr(raw, "//") : NULL;
    if (a == NULL)
        return 0;
    a += 2;
    size_t alen = strcspn(a, "/?");
    const char *end = NULL;
    for (size_t i = 0; i < alen; i++)
        if (a[i] == '@')
            end = a + i;
    if (end == NULL)
        end = strrchr(a, '@');
    if (end == NULL)
        return 0;
    const char *colon = (const char *)memchr(a, ':', (size_t)(end - a));
    if (colon == NULL || colon + 1 >= end)
        return 0;
    *at = colon + 1;
    return (size_t)(end - colon - 1);
}

/* Whether secret (n bytes) occurs at p in text: anywhere for a secret of 4
 * bytes or more; a shorter one only as a whole word (no letter or digit on
 * either side), or every "ab" in "table" would go. */
static inline int outbox_kit_secret_at_(const char *text, const char *p, const char *secret,
                                        size_t n)
{
    if (strncmp(p, secret, n) != 0)
        return 0;
    if (n >= 4)
        return 1;
#define OUTBOX_KIT_ALNUM_(c) \
    (((c) >= '0' && (c) <= '9') || ((c) >= 'A' && (c) <= 'Z') || ((c) >= 'a' && (c) <= 'z'))
    int before = p > text && OUTBOX_KIT_ALNUM_(p[-1]);
    int after = OUTBOX_KIT_ALNUM_(p[n]);
#undef OUTBOX_KIT_ALNUM_
    return !before && !after;
}

/* The length of the secret of uri that occurs at p in text (the password,
 * decoded and as typed in rawpw[0..rawlen), then the values of secret
 * parameters), or 0. Looked up in place, so no secret is left out however
 * many parameters the URI has. */
static inline size_t outbox_uri_secret_at_(const outbox_uri_t *uri, const char *rawpw,
                                           size_t rawlen, const char *text, const char *p)
{
    if (uri == NULL)
        return 0;
    if (uri->password != NULL && uri->password[0] != '\0' &&
        outbox_kit_secret_at_(text, p, uri->password, strlen(uri->password)))
        return strlen(uri->password);
    if (rawlen > 0 && outbox_kit_secret_at_(text, p, rawpw, rawlen))
        return rawlen;
    for (size_t i = 0; i < uri->n_params; i++) {
        const char *v = uri->params[i].value;
        if (outbox_uri_secret_key(uri->params[i].key) && v != NULL && v[0] != '\0' &&
            outbox_kit_secret_at_(text, p, v, strlen(v)))
            return strlen(v);
    }
    return 0;
}

/* Copies in to out (size > 0) as one line with every secret of uri in it
 * (the password, decoded and as typed, and secret parameters' values)
 * replaced by "***": for text a driver did not write itself, such as a
 * client library's error, which may quote the connection string. A secret
 * shorter than 4 bytes is replaced where it stands as a whole word. */
static inline void outbox_uri_redact(const outbox_uri_t *uri, const char *in, char *out,
                                     size_t size)
{
    const char *rawpw = NULL;
    size_t rawlen = uri != NULL ? outbox_uri_raw_password_(uri->raw, &rawpw) : 0;
    const char *src = in != NULL ? in : "";
    char text[2048];
    size_t w = 0;
    text[0] = '\0';
    for (const char *p = src; *p && w + 1 < sizeof text;) {
        size_t hit = outbox_uri_secret_at_(uri, rawpw, rawlen, src, p);
        if (hit > 0) {
            outbox_kit_append_(text, sizeof text, &w, "***");
            p += hit;
        } else {
            text[w++] = *p++;
            text[w] = '\0';
        }
    }
    outbox_text_line(text, out, size);
}

/* ------------------------------------------------------------- sinks */

/* Appends m's destination through a sink's own template, typically its
 * URI's path: "{route}" becomes the route, "{destination}" the relay's
 * destination (its own template, default the route); anything else is
 * copied. NULL or "" is "{destination}". */
static inline void outbox_kit_destination(outbox_buf_t *b, const char *tpl,
                                          const outbox_message_t *m)
{
    if (tpl == NULL || tpl[0] == '\0')
        tpl = "{destination}";
    while (*tpl != '\0') {
        if (strncmp(tpl, "{route}", 7) == 0) {
            outbox_buf_puts(b, m->route ? m->route : "");
            tpl += 7;
        } else if (strncmp(tpl, "{destination}", 13) == 0) {
            outbox_buf_puts(b, m->destination ? m->destination : "");
            tpl += 13;
        } else {
            outbox_buf_putc(b, *tpl++);
        }
    }
}

/* The value of header name in m, or NULL. */
static inline const char *outbox_message_header(const outbox_message_t *m, const char *name)
{
    for (size_t i = 0; i < m->n_headers; i++)
        if (strcmp(m->headers[i].name, name) == 0)
            return m->headers[i].value;
    return NULL;
}

#ifdef __cplusplus
}
#endif
#endif
