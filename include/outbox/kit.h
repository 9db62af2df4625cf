/* liboutbox driver kit: the helpers every driver would otherwise write
 * again. Header-only (every function is static inline), so a driver that
 * includes it still links nothing of the core.
 *
 *  - outbox_kit_buf_t: a growable byte string that allocates through the host
 *    table and stays NUL-terminated;
 *  - identifiers: validation, quoting and the "schema.table" split;
 *  - JSON string escaping;
 *  - UTF-8: sequence checks, and one-line, valid-UTF-8 text for messages;
 *  - URIs: parameter lookup, a check for names the driver does not know,
 *    the one option grammar (durations, numbers, booleans, secrets), and
 *    the URI or a client library's text for messages without secrets;
 *  - sinks: publish results, destination templates, per-key rounds, and a
 *    holder for what a reader hands out.
 *
 * Every name starts with outbox_kit_ (OUTBOX_KIT_ for macros), so a reader
 * can tell the kit, compiled into the driver, from the library; names
 * ending in _ are internal, and _builtin ones are the rules the host
 * applies, for a host older than 1.4.
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
#include <stdlib.h>
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
typedef struct outbox_kit_buf {
    char *data;
    size_t len;
    size_t cap;
    int failed;
    const outbox_host_t *host; /* allocates and frees data */
} outbox_kit_buf_t;

static inline void outbox_kit_buf_init(outbox_kit_buf_t *b, const outbox_host_t *host)
{
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = 0;
    b->host = host;
}

/* Room for extra more bytes plus the terminator. 0 on success, -1 when the
 * buffer is (now) failed. */
static inline int outbox_kit_buf_reserve(outbox_kit_buf_t *b, size_t extra)
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

static inline void outbox_kit_buf_put(outbox_kit_buf_t *b, const void *p, size_t n)
{
    if (outbox_kit_buf_reserve(b, n) != 0)
        return;
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static inline void outbox_kit_buf_puts(outbox_kit_buf_t *b, const char *s)
{
    outbox_kit_buf_put(b, s, strlen(s));
}

static inline void outbox_kit_buf_putc(outbox_kit_buf_t *b, char c)
{
    outbox_kit_buf_put(b, &c, 1);
}

static inline void outbox_kit_buf_vprintf(outbox_kit_buf_t *b, const char *fmt, va_list ap)
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
    } else if (outbox_kit_buf_reserve(b, (size_t)n) == 0) {
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, again);
        b->len += (size_t)n;
    }
    va_end(again);
}

static inline void outbox_kit_buf_printf(outbox_kit_buf_t *b, const char *fmt, ...) OUTBOX_PRINTF(2, 3);
static inline void outbox_kit_buf_printf(outbox_kit_buf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    outbox_kit_buf_vprintf(b, fmt, ap);
    va_end(ap);
}

/* Empties the buffer and clears a failure; keeps the memory. */
static inline void outbox_kit_buf_reset(outbox_kit_buf_t *b)
{
    b->len = 0;
    b->failed = 0;
    if (b->data != NULL)
        b->data[0] = '\0';
}

/* Hands the text to the caller (free it with host->free) and leaves the
 * buffer empty. NULL when the buffer failed; "" when nothing was added. */
static inline char *outbox_kit_buf_steal(outbox_kit_buf_t *b)
{
    if (b->data == NULL && outbox_kit_buf_reserve(b, 0) == 0)
        b->data[0] = '\0';
    char *p = b->failed ? NULL : b->data;
    if (p == NULL)
        b->host->free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = 0;
    return p;
}

static inline void outbox_kit_buf_free(outbox_kit_buf_t *b)
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
#define OUTBOX_KIT_IDENT_MAX 63

/* 1 when s[0..n) matches [A-Za-z_][A-Za-z0-9_]* and is 1..63 bytes. */
static inline int outbox_kit_ident_valid(const char *s, size_t n)
{
    if (n == 0 || n > OUTBOX_KIT_IDENT_MAX)
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
typedef struct outbox_kit_relname {
    char schema[OUTBOX_KIT_IDENT_MAX + 1];
    char table[OUTBOX_KIT_IDENT_MAX + 1];
} outbox_kit_relname_t;

/* Splits and validates "table" or "schema.table". 0 on success, -1 when
 * the name is not one of those (out is then all empty). */
static inline int outbox_kit_relname_parse(const char *name, outbox_kit_relname_t *out)
{
    out->schema[0] = out->table[0] = '\0';
    if (name == NULL)
        return -1;
    const char *dot = strchr(name, '.');
    const char *table = dot ? dot + 1 : name;
    size_t schema_len = dot ? (size_t)(dot - name) : 0;
    if ((dot && !outbox_kit_ident_valid(name, schema_len)) || !outbox_kit_ident_valid(table, strlen(table)))
        return -1;
    memcpy(out->schema, name, schema_len);
    out->schema[schema_len] = '\0';
    memcpy(out->table, table, strlen(table) + 1);
    return 0;
}

/* A relation beside base: same schema, the given table name. */
static inline void outbox_kit_relname_beside(const outbox_kit_relname_t *base, const char *table,
                                         outbox_kit_relname_t *out)
{
    memcpy(out->schema, base->schema, sizeof out->schema);
    snprintf(out->table, sizeof out->table, "%s", table);
}

/* "schema.table" or "table", for messages. */
static inline void outbox_kit_relname_show(const outbox_kit_relname_t *r, char *out, size_t size)
{
    snprintf(out, size, "%s%s%s", r->schema, r->schema[0] ? "." : "", r->table);
}

/* Appends ident quoted with q (SQL: '"', MySQL: '`'), doubling any q inside. */
static inline void outbox_kit_buf_ident(outbox_kit_buf_t *b, const char *ident, char q)
{
    outbox_kit_buf_putc(b, q);
    for (const char *p = ident; *p; p++) {
        if (*p == q)
            outbox_kit_buf_putc(b, q);
        outbox_kit_buf_putc(b, *p);
    }
    outbox_kit_buf_putc(b, q);
}

/* Appends the relation quoted: "schema"."table", or "table". */
static inline void outbox_kit_buf_relname(outbox_kit_buf_t *b, const outbox_kit_relname_t *r, char q)
{
    if (r->schema[0]) {
        outbox_kit_buf_ident(b, r->schema, q);
        outbox_kit_buf_putc(b, '.');
    }
    outbox_kit_buf_ident(b, r->table, q);
}

/* Appends s as a single-quoted SQL literal, doubling quotes (for DDL text
 * only; values travel as bound parameters). */
static inline void outbox_kit_buf_literal(outbox_kit_buf_t *b, const char *s)
{
    outbox_kit_buf_ident(b, s, '\'');
}

/* -------------------------------------------------------------- UTF-8 */

/* Length (1..4) of the well-formed UTF-8 sequence at s, which has avail
 * bytes, or 0 when the bytes there are not one (a stray continuation byte,
 * an overlong form, a surrogate, beyond U+10FFFF, or cut short). */
static inline size_t outbox_kit_utf8_seq(const unsigned char *s, size_t avail)
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
static inline int outbox_kit_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = p[i] ? outbox_kit_utf8_seq(p + i, n - i) : 0;
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
static inline void outbox_kit_text_line(const char *in, char *out, size_t size)
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
        size_t n = outbox_kit_utf8_seq(p, avail);
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
static inline void outbox_kit_buf_json_string(outbox_kit_buf_t *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    outbox_kit_buf_putc(b, '"');
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        size_t k = 1;
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            outbox_kit_buf_put(b, esc, 2);
        } else if (c == '\n') {
            outbox_kit_buf_put(b, "\\n", 2);
        } else if (c == '\r') {
            outbox_kit_buf_put(b, "\\r", 2);
        } else if (c == '\t') {
            outbox_kit_buf_put(b, "\\t", 2);
        } else if (c < 0x20) {
            char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            outbox_kit_buf_put(b, esc, 6);
        } else if ((k = outbox_kit_utf8_seq(p + i, n - i)) != 0) {
            outbox_kit_buf_put(b, p + i, k);
        } else {
            outbox_kit_buf_puts(b, "\\ufffd");
            k = 1;
        }
        i += k;
    }
    outbox_kit_buf_putc(b, '"');
}

/* ---------------------------------------------------------------- URI */

/* The value of the first parameter named key, or NULL. */
static inline const char *outbox_kit_uri_get(const outbox_uri_t *uri, const char *key)
{
    for (size_t i = 0; uri != NULL && i < uri->n_params; i++)
        if (strcmp(uri->params[i].key, key) == 0)
            return uri->params[i].value;
    return NULL;
}

/* The first parameter whose name is not in known (NULL-terminated), or
 * NULL when every one is known: a driver refuses a misspelt option
 * instead of ignoring it. */
static inline const char *outbox_kit_uri_unknown(const outbox_uri_t *uri, const char *const *known)
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
static inline int outbox_kit_secret_name(const char *name, size_t n)
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
static inline int outbox_kit_secret_key(const char *key)
{
    return key != NULL && outbox_kit_secret_name(key, strlen(key));
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
 * password and the values of secret parameters (outbox_kit_secret_key)
 * shown as "***", as one line of valid UTF-8: drivers name the URI a
 * problem is about with this, never with uri->raw, which holds the
 * password as the user typed it. The path and parameters appear
 * percent-decoded. */
static inline void outbox_kit_uri_show_builtin(const outbox_uri_t *uri, char *out, size_t size)
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
                           outbox_kit_secret_key(p->key) ? "***" : (p->value ? p->value : ""));
    }
    outbox_kit_text_line(text, out, size);
}

/* Where the password sits in uri->raw as typed (percent-encoded): the
 * text between the first ':' after "//" and the last '@' of the authority,
 * or of the whole URI when the user wrote a '/' or '?' into the password.
 * 0 when there is none; else its length, its start in *at. */
static inline size_t outbox_kit_raw_password_(const char *raw, const char **at)
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
static inline size_t outbox_kit_uri_secret_at_(const outbox_uri_t *uri, const char *rawpw,
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
        if (outbox_kit_secret_key(uri->params[i].key) && v != NULL && v[0] != '\0' &&
            outbox_kit_secret_at_(text, p, v, strlen(v)))
            return strlen(v);
    }
    return 0;
}

/* in to out (size > 0) with uri's secrets and the password as typed,
 * rawpw[0..rawlen), replaced: outbox_kit_uri_redact_builtin and the redactor share it. */
static inline void outbox_kit_redact_(const outbox_uri_t *uri, const char *rawpw, size_t rawlen,
                                      const char *in, char *out, size_t size)
{
    const char *src = in != NULL ? in : "";
    char text[2048];
    size_t w = 0;
    text[0] = '\0';
    for (const char *p = src; *p && w + 1 < sizeof text;) {
        size_t hit = outbox_kit_uri_secret_at_(uri, rawpw, rawlen, src, p);
        if (hit > 0) {
            outbox_kit_append_(text, sizeof text, &w, "***");
            p += hit;
        } else {
            text[w++] = *p++;
            text[w] = '\0';
        }
    }
    outbox_kit_text_line(text, out, size);
}

/* Copies in to out (size > 0) as one line with every secret of uri in it
 * (the password, decoded and as typed, and secret parameters' values)
 * replaced by "***": for text a driver did not write itself, such as a
 * client library's error, which may quote the connection string. A secret
 * shorter than 4 bytes is replaced where it stands as a whole word. */
static inline void outbox_kit_uri_redact_builtin(const outbox_uri_t *uri, const char *in, char *out,
                                     size_t size)
{
    const char *rawpw = NULL;
    size_t rawlen = uri != NULL ? outbox_kit_raw_password_(uri->raw, &rawpw) : 0;
    outbox_kit_redact_(uri, rawpw, rawlen, in, out, size);
}

/* -------------------------------------------- URI options (ABI 1.4) */

/* The one grammar of every driver's URI options, the same in every URI:
 *  - a duration: a whole number and one of the units us, ms, s, m, h, d
 *    ("500ms", "30s", "2m", "1h"), at most OUTBOX_DURATION_MAX_US;
 *  - a whole number: decimal digits, optionally followed by KiB, MiB or
 *    GiB ("1048576", "512KiB", "1MiB");
 *  - a boolean: 1, true, yes or on; 0, false, no or off;
 *  - a secret: NAME=value, or NAME_env=VARIABLE, the name of an
 *    environment variable that holds it (not both).
 * A driver reads each option with outbox_kit_opt_*, which go through the
 * host (ABI 1.4) so that the grammar stays one for every driver built,
 * and use the same rules built in when the host is older. */

/* What outbox_kit_parse_* found wrong (0: nothing). */
enum outbox_kit_parse_status {
    OUTBOX_KIT_PARSE_OK = 0,
    OUTBOX_KIT_PARSE_SYNTAX = -1,   /* not a number where one belongs */
    OUTBOX_KIT_PARSE_NO_UNIT = -2,  /* a duration without its unit */
    OUTBOX_KIT_PARSE_UNIT = -3,     /* an unknown unit or suffix */
    OUTBOX_KIT_PARSE_RANGE = -4,    /* too large for the type */
    OUTBOX_KIT_PARSE_NEGATIVE = -5, /* a minus sign */
};

/* Whole decimal digits at *p (advanced past them) into *v; 1 when they
 * overflowed int64_t (*v then meaningless). */
static inline int outbox_kit_digits_(const char **p, int64_t *v)
{
    int over = 0;
    *v = 0;
    for (; **p >= '0' && **p <= '9'; (*p)++) {
        int digit = **p - '0';
        if (*v > (INT64_MAX - digit) / 10)
            over = 1;
        else
            *v = *v * 10 + digit;
    }
    return over;
}

/* A duration in the options' grammar -> microseconds (OUTBOX_KIT_PARSE_*). */
static inline int outbox_kit_parse_duration(const char *text, int64_t *us)
{
    static const struct {
        const char *name;
        int64_t us;
    } units[] = {{"us", 1},
                 {"ms", 1000},
                 {"s", 1000000},
                 {"m", INT64_C(60) * 1000000},
                 {"h", INT64_C(3600) * 1000000},
                 {"d", INT64_C(86400) * 1000000}};
    const char *p = text != NULL ? text : "";
    if (*p == '-')
        return OUTBOX_KIT_PARSE_NEGATIVE;
    if (*p < '0' || *p > '9')
        return OUTBOX_KIT_PARSE_SYNTAX;
    int64_t n;
    int over = outbox_kit_digits_(&p, &n);
    if (*p == '\0')
        return OUTBOX_KIT_PARSE_NO_UNIT;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(p, units[i].name) == 0) {
            if (over || n > OUTBOX_DURATION_MAX_US / units[i].us)
                return OUTBOX_KIT_PARSE_RANGE;
            *us = n * units[i].us;
            return OUTBOX_KIT_PARSE_OK;
        }
    return OUTBOX_KIT_PARSE_UNIT;
}

/* A whole number in the options' grammar (OUTBOX_KIT_PARSE_*). */
static inline int outbox_kit_parse_int(const char *text, int64_t *v)
{
    static const struct {
        const char *name;
        int shift;
    } suffixes[] = {{"", 0}, {"KiB", 10}, {"MiB", 20}, {"GiB", 30}};
    const char *p = text != NULL ? text : "";
    if (*p == '-')
        return OUTBOX_KIT_PARSE_NEGATIVE;
    if (*p < '0' || *p > '9')
        return OUTBOX_KIT_PARSE_SYNTAX;
    int64_t n;
    int over = outbox_kit_digits_(&p, &n);
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++)
        if (strcmp(p, suffixes[i].name) == 0) {
            if (over || n > (INT64_MAX >> suffixes[i].shift))
                return OUTBOX_KIT_PARSE_RANGE;
            *v = n << suffixes[i].shift;
            return OUTBOX_KIT_PARSE_OK;
        }
    return OUTBOX_KIT_PARSE_UNIT;
}

/* A boolean in the options' grammar (OUTBOX_KIT_PARSE_*). */
static inline int outbox_kit_parse_bool(const char *text, int *b)
{
    static const char *const words[] = {"0", "false", "no", "off", "1", "true", "yes", "on"};
    for (size_t i = 0; text != NULL && i < sizeof words / sizeof words[0]; i++)
        if (strcmp(text, words[i]) == 0) {
            *b = i >= 4;
            return OUTBOX_KIT_PARSE_OK;
        }
    return OUTBOX_KIT_PARSE_SYNTAX;
}

/* us for a message, in the largest unit that shows it whole: "24h",
 * "1500ms". */
static inline void outbox_kit_show_duration(int64_t us, char *out, size_t size)
{
    static const struct {
        const char *name;
        int64_t us;
    } units[] = {{"d", INT64_C(86400) * 1000000},
                 {"h", INT64_C(3600) * 1000000},
                 {"m", INT64_C(60) * 1000000},
                 {"s", 1000000},
                 {"ms", 1000}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (us != 0 && us % units[i].us == 0) {
            snprintf(out, size, "%lld%s", (long long)(us / units[i].us), units[i].name);
            return;
        }
    snprintf(out, size, "%lldus", (long long)us);
}

/* Fails an option: OUTBOX_EINVAL, and in d one line "LABEL URI: what". */
static inline int outbox_kit_opt_fail_(outbox_diag_t *d, const outbox_uri_t *uri,
                                       const char *label, const char *fmt, ...) OUTBOX_PRINTF(4, 5);
static inline int outbox_kit_opt_fail_(outbox_diag_t *d, const outbox_uri_t *uri,
                                       const char *label, const char *fmt, ...)
{
    char shown[256], what[OUTBOX_MESSAGE_MAX], text[OUTBOX_MESSAGE_MAX + 300];
    outbox_kit_uri_show_builtin(uri, shown, sizeof shown);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(text, sizeof text, "%s %s: %s", label != NULL ? label : "driver", shown, what);
    d->code = OUTBOX_EINVAL;
    outbox_kit_text_line(text, d->message, sizeof d->message);
    return OUTBOX_EINVAL;
}

/* The host's opt_duration (and the fallback for a host without one). */
static inline int outbox_kit_opt_duration_builtin(const outbox_uri_t *uri, const char *label,
                                                  const char *key, int64_t min_us,
                                                  int64_t max_us, int64_t *out, outbox_diag_t *d)
{
    const char *v = outbox_kit_uri_get(uri, key);
    int64_t us = 0;
    if (v == NULL)
        return OUTBOX_OK;
    if (outbox_kit_parse_duration(v, &us) != OUTBOX_KIT_PARSE_OK || us < min_us || us > max_us) {
        char lo[32], hi[32];
        outbox_kit_show_duration(min_us, lo, sizeof lo);
        outbox_kit_show_duration(max_us, hi, sizeof hi);
        return outbox_kit_opt_fail_(d, uri, label,
                                    "%s=%.80s is not a duration from %s to %s (a whole number "
                                    "and us, ms, s, m, h or d, e.g. 500ms, 30s, 2m)",
                                    key, v, lo, hi);
    }
    *out = us;
    return OUTBOX_OK;
}

static inline int outbox_kit_opt_int_builtin(const outbox_uri_t *uri, const char *label,
                                             const char *key, int64_t min, int64_t max,
                                             int64_t *out, outbox_diag_t *d)
{
    const char *v = outbox_kit_uri_get(uri, key);
    int64_t n = 0;
    if (v == NULL)
        return OUTBOX_OK;
    if (outbox_kit_parse_int(v, &n) != OUTBOX_KIT_PARSE_OK || n < min || n > max)
        return outbox_kit_opt_fail_(d, uri, label,
                                    "%s=%.80s is not a whole number from %lld to %lld (digits, "
                                    "optionally followed by KiB, MiB or GiB)",
                                    key, v, (long long)min, (long long)max);
    *out = n;
    return OUTBOX_OK;
}

static inline int outbox_kit_opt_bool_builtin(const outbox_uri_t *uri, const char *label,
                                              const char *key, int *out, outbox_diag_t *d)
{
    const char *v = outbox_kit_uri_get(uri, key);
    int b = 0;
    if (v == NULL)
        return OUTBOX_OK;
    if (outbox_kit_parse_bool(v, &b) != OUTBOX_KIT_PARSE_OK)
        return outbox_kit_opt_fail_(d, uri, label,
                                    "%s=%.80s is not a boolean (1, true, yes, on, or 0, false, "
                                    "no, off)",
                                    key, v);
    *out = b;
    return OUTBOX_OK;
}

static inline int outbox_kit_opt_secret_builtin(const outbox_uri_t *uri, const char *label,
                                                const char *key, const char **out,
                                                outbox_diag_t *d)
{
    char env_key[128];
    if (strlen(key) > sizeof env_key - sizeof "_env")
        return outbox_kit_opt_fail_(d, uri, label, "option name %.40s... is too long", key);
    snprintf(env_key, sizeof env_key, "%s_env", key);
    const char *v = outbox_kit_uri_get(uri, key), *var = outbox_kit_uri_get(uri, env_key);
    if (v != NULL && var != NULL)
        return outbox_kit_opt_fail_(d, uri, label, "give %s or %s, not both", key, env_key);
    if (var != NULL) {
        const char *e = getenv(var);
        if (e == NULL || e[0] == '\0')
            return outbox_kit_opt_fail_(d, uri, label,
                                        "%s names environment variable %.80s, which is not set "
                                        "or empty",
                                        env_key, var);
        *out = e;
    } else if (v != NULL) {
        *out = v;
    }
    return OUTBOX_OK;
}

/* The host's entry when it has one (ABI 1.4), else the builtin: the one
 * way a driver reads each kind of option. */
#define OUTBOX_KIT_HOST_HAS_(host, member)                                                     \
    ((host) != NULL && OUTBOX_ENTRY_HAS(outbox_host_t, host, member))

/* Option key of uri as a duration in [min_us, max_us], into *out
 * (microseconds). Absent: OUTBOX_OK, *out unchanged. label names the
 * driver in the message ("NATS sink"). */
static inline int outbox_kit_opt_duration(const outbox_host_t *host, const outbox_uri_t *uri,
                                          const char *label, const char *key, int64_t min_us,
                                          int64_t max_us, int64_t *out, outbox_diag_t *d)
{
    if (OUTBOX_KIT_HOST_HAS_(host, opt_duration))
        return host->opt_duration(uri, label, key, min_us, max_us, out, d);
    return outbox_kit_opt_duration_builtin(uri, label, key, min_us, max_us, out, d);
}

/* Option key of uri as a whole number in [min, max]. */
static inline int outbox_kit_opt_int(const outbox_host_t *host, const outbox_uri_t *uri,
                                     const char *label, const char *key, int64_t min, int64_t max,
                                     int64_t *out, outbox_diag_t *d)
{
    if (OUTBOX_KIT_HOST_HAS_(host, opt_int))
        return host->opt_int(uri, label, key, min, max, out, d);
    return outbox_kit_opt_int_builtin(uri, label, key, min, max, out, d);
}

/* Option key of uri as a boolean, 1 or 0. */
static inline int outbox_kit_opt_bool(const outbox_host_t *host, const outbox_uri_t *uri,
                                      const char *label, const char *key, int *out,
                                      outbox_diag_t *d)
{
    if (OUTBOX_KIT_HOST_HAS_(host, opt_bool))
        return host->opt_bool(uri, label, key, out, d);
    return outbox_kit_opt_bool_builtin(uri, label, key, out, d);
}

/* Secret option key of uri: key=value or key_env=VARIABLE. *out points
 * into uri or the environment: copy it. */
static inline int outbox_kit_opt_secret(const outbox_host_t *host, const outbox_uri_t *uri,
                                        const char *label, const char *key, const char **out,
                                        outbox_diag_t *d)
{
    if (OUTBOX_KIT_HOST_HAS_(host, opt_secret))
        return host->opt_secret(uri, label, key, out, d);
    return outbox_kit_opt_secret_builtin(uri, label, key, out, d);
}

/* uri for a message, its secrets "***": the one masking rule. */
static inline void outbox_kit_uri_show(const outbox_host_t *host, const outbox_uri_t *uri,
                                       char *out, size_t size)
{
    if (OUTBOX_KIT_HOST_HAS_(host, uri_show))
        host->uri_show(uri, out, size);
    else
        outbox_kit_uri_show_builtin(uri, out, size);
}

/* ---------------------------------------------- redactor (ABI 1.4) */

/* The builtin redactor (the host's, and a driver's on an older host):
 * copies of a URI's secrets, as a URI of their own that
 * outbox_kit_redact_ reads, in one block. */
struct outbox_redactor {
    void (*free_fn)(void *);
    outbox_uri_t secrets;       /* password and secret parameters only */
    const char *rawpw;          /* the password as typed */
    size_t rawlen;
};

/* The value an *_env parameter names when it stands for a secret
 * ("password_env", "token_env"), or NULL. */
static inline const char *outbox_kit_env_secret_(const outbox_uri_param_t *p)
{
    size_t n = p->key != NULL ? strlen(p->key) : 0;
    if (n < 5 || strcmp(p->key + n - 4, "_env") != 0 || !outbox_kit_secret_name(p->key, n - 4) ||
        p->value == NULL)
        return NULL;
    const char *e = getenv(p->value);
    return e != NULL && e[0] != '\0' ? e : NULL;
}

static inline outbox_redactor_t *outbox_kit_redactor_new_builtin(void *(*alloc)(size_t),
                                                                 void (*free_fn)(void *),
                                                                 const outbox_uri_t *uri)
{
    const char *rawpw = NULL;
    size_t rawlen = uri != NULL ? outbox_kit_raw_password_(uri->raw, &rawpw) : 0;
    size_t n_params = 0, bytes = rawlen + 1;
    if (uri != NULL && uri->password != NULL)
        bytes += strlen(uri->password) + 1;
    for (size_t i = 0; uri != NULL && i < uri->n_params; i++) {
        const outbox_uri_param_t *p = &uri->params[i];
        const char *e = outbox_kit_env_secret_(p);
        if (e != NULL) {
            n_params++;
            bytes += strlen(e) + 1;
        } else if (outbox_kit_secret_key(p->key) && p->value != NULL) {
            n_params++;
            bytes += strlen(p->value) + 1;
        }
    }
    size_t head = sizeof(outbox_redactor_t) + n_params * sizeof(outbox_uri_param_t);
    outbox_redactor_t *r = (outbox_redactor_t *)alloc(head + bytes);
    if (r == NULL)
        return NULL;
    memset(r, 0, head);
    r->free_fn = free_fn;
    outbox_uri_param_t *params = (outbox_uri_param_t *)(r + 1);
    char *w = (char *)r + head;
    memcpy(w, rawpw != NULL ? rawpw : "", rawlen);
    w[rawlen] = '\0';
    r->rawpw = w;
    r->rawlen = rawlen;
    w += rawlen + 1;
    if (uri != NULL && uri->password != NULL) {
        size_t n = strlen(uri->password) + 1;
        memcpy(w, uri->password, n);
        r->secrets.password = w;
        w += n;
    }
    for (size_t i = 0; uri != NULL && i < uri->n_params; i++) {
        const outbox_uri_param_t *p = &uri->params[i];
        const char *v = outbox_kit_env_secret_(p);
        if (v == NULL && outbox_kit_secret_key(p->key))
            v = p->value;
        if (v == NULL)
            continue;
        size_t n = strlen(v) + 1;
        memcpy(w, v, n);
        /* Every one under a secret name, which is all the redaction asks. */
        params[r->secrets.n_params++] = (outbox_uri_param_t){.key = "password", .value = w};
        w += n;
    }
    r->secrets.params = params;
    return r;
}

static inline void outbox_kit_redact_builtin(const outbox_redactor_t *r, const char *in, char *out,
                                             size_t size)
{
    outbox_kit_redact_(&r->secrets, r->rawpw, r->rawlen, in, out, size);
}

static inline void outbox_kit_redactor_free_builtin(outbox_redactor_t *r)
{
    if (r != NULL)
        r->free_fn(r);
}

/* A redactor of uri's secrets for the life of a handle (uri is borrowed
 * only during open): keep it in the handle, redact a client library's
 * text with it, free it at close. NULL when out of memory (fail the open). */
static inline outbox_redactor_t *outbox_kit_redactor_new(const outbox_host_t *host,
                                                         const outbox_uri_t *uri)
{
    if (OUTBOX_KIT_HOST_HAS_(host, redactor_new))
        return host->redactor_new(uri);
    return outbox_kit_redactor_new_builtin(host->alloc, host->free, uri);
}

/* in to out (size > 0) as one line, with every secret r keeps "***". */
static inline void outbox_kit_redact(const outbox_host_t *host, const outbox_redactor_t *r,
                                     const char *in, char *out, size_t size)
{
    if (r == NULL)
        snprintf(out, size, "(text withheld: no redactor)");
    else if (OUTBOX_KIT_HOST_HAS_(host, redact))
        host->redact(r, in, out, size);
    else
        outbox_kit_redact_builtin(r, in, out, size);
}

static inline void outbox_kit_redactor_free(const outbox_host_t *host, outbox_redactor_t *r)
{
    if (r == NULL)
        return;
    if (OUTBOX_KIT_HOST_HAS_(host, redactor_free))
        host->redactor_free(r);
    else
        outbox_kit_redactor_free_builtin(r);
}

/* in to out (size > 0) with uri's secrets "***", while uri is at hand (in
 * open): a redactor made and freed for the one text. Out of memory, the
 * builtin rule without the *_env values. */
static inline void outbox_kit_uri_redact(const outbox_host_t *host, const outbox_uri_t *uri,
                                         const char *in, char *out, size_t size)
{
    outbox_redactor_t *r = outbox_kit_redactor_new(host, uri);
    if (r != NULL)
        outbox_kit_redact(host, r, in, out, size);
    else
        outbox_kit_uri_redact_builtin(uri, in, out, size);
    outbox_kit_redactor_free(host, r);
}

/* ------------------------------------------------------------- sinks */

/* Appends what a sink's own template (typically its URI's path) makes of
 * a route and a destination: "{route}" becomes route, "{destination}"
 * destination; anything else is copied. NULL or "" is "{destination}".
 * For a message, outbox_kit_destination; without one (destination_create,
 * a reader, where the destination is also the route), this. */
static inline void outbox_kit_template(outbox_kit_buf_t *b, const char *tpl, const char *route,
                                       const char *destination)
{
    if (tpl == NULL || tpl[0] == '\0')
        tpl = "{destination}";
    while (*tpl != '\0') {
        if (strncmp(tpl, "{route}", 7) == 0) {
            outbox_kit_buf_puts(b, route ? route : "");
            tpl += 7;
        } else if (strncmp(tpl, "{destination}", 13) == 0) {
            outbox_kit_buf_puts(b, destination ? destination : "");
            tpl += 13;
        } else {
            outbox_kit_buf_putc(b, *tpl++);
        }
    }
}

/* Appends m's destination through a sink's own template: "{route}" is
 * the event's route, "{destination}" the relay's destination (its own
 * template, default the route). */
static inline void outbox_kit_destination(outbox_kit_buf_t *b, const char *tpl,
                                          const outbox_message_t *m)
{
    outbox_kit_template(b, tpl, m->route, m->destination);
}

/* A publish result: status, and the message as one line of valid UTF-8
 * (printf-style; what does not fit is cut at a character). */
static inline void outbox_kit_result(outbox_publish_result_t *r, int status, const char *fmt, ...)
    OUTBOX_PRINTF(3, 4);
static inline void outbox_kit_result(outbox_publish_result_t *r, int status, const char *fmt, ...)
{
    char text[OUTBOX_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    r->status = status;
    outbox_kit_text_line(text, r->message, sizeof r->message);
}

/* ------------------------------------------------- per-key scheduling */

/* The order promise of a sink (OUTBOX_SINK_CAP_ORDERED) or of the relay
 * for one that is not: the messages of one key go to the broker in array
 * order, at most one of them in flight at a time, and none after one of
 * them failed. Messages go in rounds: the first holds the first message of
 * every key and every message without a key; each next round, the next
 * message of every key whose last one was OK.
 *
 *   outbox_kit_keys_t k;
 *   if (outbox_kit_keys_init(&k, host, msgs, n) != 0) ... out of memory
 *   do {
 *       for (size_t r = 0; r < k.n_round; r++) send msgs[k.round[r]];
 *       for each answer i: OK -> outbox_kit_keys_ok(&k, i);
 *                         else -> its result, outbox_kit_keys_hold(&k, i, msgs, results, why)
 *   } while (outbox_kit_keys_next(&k) > 0);
 *   outbox_kit_keys_free(&k);
 *
 * A sink that sends a key's messages together (one command for a run)
 * walks next[] from each message of the first round instead. */
#define OUTBOX_KIT_NONE SIZE_MAX

typedef struct outbox_kit_keys {
    const outbox_host_t *host;
    size_t n;
    size_t *next;    /* next[i]: the following message of i's key, or OUTBOX_KIT_NONE */
    size_t *round;   /* the current round's messages, in array order */
    size_t n_round;
    size_t *coming;  /* the next round, as outbox_kit_keys_ok adds to it */
    size_t n_coming;
} outbox_kit_keys_t;

/* Whether keyed message a comes before b: by key, then by position. */
static inline int outbox_kit_keys_less_(const outbox_message_t *msgs, size_t a, size_t b)
{
    int c = strcmp(msgs[a].key, msgs[b].key);
    return c < 0 || (c == 0 && a < b);
}

static inline void outbox_kit_keys_sift_(size_t *idx, size_t root, size_t end,
                                         const outbox_message_t *msgs)
{
    for (;;) {
        size_t child = 2 * root + 1;
        if (child >= end)
            return;
        if (child + 1 < end && outbox_kit_keys_less_(msgs, idx[child], idx[child + 1]))
            child++;
        if (!outbox_kit_keys_less_(msgs, idx[root], idx[child]))
            return;
        size_t t = idx[root];
        idx[root] = idx[child];
        idx[child] = t;
        root = child;
    }
}

/* idx[0..n) (keyed messages) in key order, then position: a heap sort,
 * n log n on a large call without qsort_r, which is not standard C. */
static inline void outbox_kit_keys_sort_(size_t *idx, size_t n, const outbox_message_t *msgs)
{
    for (size_t start = n / 2; start > 0; start--)
        outbox_kit_keys_sift_(idx, start - 1, n, msgs);
    for (size_t end = n; end > 1; end--) {
        size_t t = idx[0];
        idx[0] = idx[end - 1];
        idx[end - 1] = t;
        outbox_kit_keys_sift_(idx, 0, end - 1, msgs);
    }
}

/* The first round of msgs[0..n). 0, or -1 when out of memory (nothing to
 * free then). A message without a key (NULL) is a key of its own. */
static inline int outbox_kit_keys_init(outbox_kit_keys_t *k, const outbox_host_t *host,
                                       const outbox_message_t *msgs, size_t n)
{
    *k = (outbox_kit_keys_t){.host = host, .n = n};
    if (n == 0)
        return 0;
    if (n > SIZE_MAX / (3 * sizeof(size_t)))
        return -1;
    size_t *mem = (size_t *)host->alloc(3 * n * sizeof(size_t));
    if (mem == NULL)
        return -1;
    k->next = mem;
    k->round = mem + n;
    k->coming = mem + 2 * n;
    /* coming serves as scratch: the keyed messages sorted by key. */
    size_t keyed = 0;
    for (size_t i = 0; i < n; i++) {
        k->next[i] = OUTBOX_KIT_NONE;
        if (msgs[i].key != NULL)
            k->coming[keyed++] = i;
    }
    outbox_kit_keys_sort_(k->coming, keyed, msgs);
    for (size_t j = 0; j + 1 < keyed; j++)
        if (strcmp(msgs[k->coming[j]].key, msgs[k->coming[j + 1]].key) == 0)
            k->next[k->coming[j]] = k->coming[j + 1];
    /* round marks, then holds, the messages no other one of their key
     * precedes. */
    for (size_t i = 0; i < n; i++)
        k->round[i] = 0;
    for (size_t i = 0; i < n; i++)
        if (k->next[i] != OUTBOX_KIT_NONE)
            k->round[k->next[i]] = 1;
    for (size_t i = 0; i < n; i++)
        if (k->round[i] == 0)
            k->round[k->n_round++] = i;
    return 0;
}

/* Message i was OK: the next of its key goes in the next round. */
static inline void outbox_kit_keys_ok(outbox_kit_keys_t *k, size_t i)
{
    if (k->next[i] != OUTBOX_KIT_NONE)
        k->coming[k->n_coming++] = k->next[i];
}

/* Message i failed (its own result is the caller's): every later message
 * of its key is RETRY, "held back: event ID of the same key WHY". */
static inline void outbox_kit_keys_hold(outbox_kit_keys_t *k, size_t i, const outbox_message_t *msgs,
                                        outbox_publish_result_t *results, const char *why)
{
    const char *id = msgs[i].event_id ? msgs[i].event_id : "?";
    for (size_t j = k->next[i]; j != OUTBOX_KIT_NONE; j = k->next[j])
        outbox_kit_result(&results[j], OUTBOX_PUBLISH_RETRY, "held back: event %s of the same key %s",
                          id, why);
}

/* Moves to the next round, in array order; its size (0: the call is done). */
static inline size_t outbox_kit_keys_next(outbox_kit_keys_t *k)
{
    size_t *t = k->round;
    k->round = k->coming;
    k->coming = t;
    k->n_round = k->n_coming;
    k->n_coming = 0;
    /* Few per round, mostly in order already: an insertion sort. */
    for (size_t a = 1; a < k->n_round; a++)
        for (size_t b = a; b > 0 && k->round[b - 1] > k->round[b]; b--) {
            size_t x = k->round[b];
            k->round[b] = k->round[b - 1];
            k->round[b - 1] = x;
        }
    return k->n_round;
}

static inline void outbox_kit_keys_free(outbox_kit_keys_t *k)
{
    if (k->next != NULL)
        k->host->free(k->next);
    *k = (outbox_kit_keys_t){0};
}

/* ------------------------------------------------- reading back */

/* What a sink's reader hands out for one message (outbox_received_t):
 * copies of the attribute names and values, and of every header as the
 * wire names it, kept until the next message.
 *
 *   outbox_kit_received_reset(&h);
 *   outbox_kit_received_add(&h, "id", 2, value, len);      for each attribute
 *   outbox_kit_received_wire(&h, "ce-id", 5, value, len);  for each header as it came
 *   outbox_kit_received_fill(&h, out);                     then set out's other fields */
#define OUTBOX_KIT_RECEIVED_MAX 32

typedef struct outbox_kit_received {
    outbox_kit_buf_t text;                        /* "name\0value\0" pairs */
    size_t at[OUTBOX_KIT_RECEIVED_MAX][2];    /* offsets of each name and value in text */
    outbox_header_t headers[OUTBOX_KIT_RECEIVED_MAX];
    size_t n;
    size_t wire_at[OUTBOX_KIT_RECEIVED_MAX][2]; /* the same for the wire's headers */
    outbox_header_t wire[OUTBOX_KIT_RECEIVED_MAX];
    size_t n_wire;
} outbox_kit_received_t;

static inline void outbox_kit_received_init(outbox_kit_received_t *h, const outbox_host_t *host)
{
    outbox_kit_buf_init(&h->text, host);
    h->n = 0;
    h->n_wire = 0;
}

static inline void outbox_kit_received_reset(outbox_kit_received_t *h)
{
    outbox_kit_buf_reset(&h->text);
    h->n = 0;
    h->n_wire = 0;
}

static inline int outbox_kit_received_put_(outbox_kit_received_t *h, size_t at[2], const char *name,
                                           size_t nlen, const char *value, size_t vlen)
{
    at[0] = h->text.len;
    outbox_kit_buf_put(&h->text, name, nlen);
    outbox_kit_buf_putc(&h->text, '\0');
    at[1] = h->text.len;
    outbox_kit_buf_put(&h->text, value, vlen);
    outbox_kit_buf_putc(&h->text, '\0');
    return h->text.failed ? -1 : 0;
}

/* Adds one attribute (name without the binding's prefix). 0, or -1 when
 * there are more than OUTBOX_KIT_RECEIVED_MAX (the rest are left out) or
 * memory ran out (text.failed). */
static inline int outbox_kit_received_add(outbox_kit_received_t *h, const char *name, size_t nlen,
                                          const char *value, size_t vlen)
{
    if (h->n >= OUTBOX_KIT_RECEIVED_MAX || outbox_kit_received_put_(h, h->at[h->n], name, nlen,
                                                                    value, vlen) != 0)
        return -1;
    h->n++;
    return 0;
}

/* Adds one header exactly as the message carries it (ABI 1.6
 * wire_headers): its name on the wire, prefix and case as they came,
 * whether or not it is a CloudEvents attribute. 0 or -1 as above. */
static inline int outbox_kit_received_wire(outbox_kit_received_t *h, const char *name,
                                           size_t nlen, const char *value, size_t vlen)
{
    if (h->n_wire >= OUTBOX_KIT_RECEIVED_MAX ||
        outbox_kit_received_put_(h, h->wire_at[h->n_wire], name, nlen, value, vlen) != 0)
        return -1;
    h->n_wire++;
    return 0;
}

/* Points out's headers (and, where out has them, its wire_headers) at
 * what was added (valid until the next reset); out's other fields are
 * the reader's to set. */
static inline void outbox_kit_received_fill(outbox_kit_received_t *h, outbox_received_t *out)
{
    for (size_t i = 0; i < h->n; i++)
        h->headers[i] = (outbox_header_t){h->text.data + h->at[i][0], h->text.data + h->at[i][1]};
    out->headers = h->headers;
    out->n_headers = h->n;
    if (!OUTBOX_STRUCT_HAS(outbox_received_t, out, n_wire_headers))
        return;
    for (size_t i = 0; i < h->n_wire; i++)
        h->wire[i] = (outbox_header_t){h->text.data + h->wire_at[i][0],
                                       h->text.data + h->wire_at[i][1]};
    out->wire_headers = h->n_wire > 0 ? h->wire : NULL;
    out->n_wire_headers = h->n_wire;
}

static inline void outbox_kit_received_free(outbox_kit_received_t *h)
{
    outbox_kit_buf_free(&h->text);
    h->n = 0;
    h->n_wire = 0;
}

/* The value of header name in m, or NULL. */
static inline const char *outbox_kit_header(const outbox_message_t *m, const char *name)
{
    for (size_t i = 0; i < m->n_headers; i++)
        if (strcmp(m->headers[i].name, name) == 0)
            return m->headers[i].value;
    return NULL;
}

/* ------------------------------------------------ names before 1.4
 *
 * Until 1.4 the kit's names shared the library's outbox_ prefix. The old
 * names still compile, as these aliases, until ABI 2; define
 * OUTBOX_KIT_NO_OLD_NAMES before including this header to make sure a
 * driver uses the new ones only. */
#ifndef OUTBOX_KIT_NO_OLD_NAMES
#define outbox_buf_t outbox_kit_buf_t
#define outbox_buf_init outbox_kit_buf_init
#define outbox_buf_reserve outbox_kit_buf_reserve
#define outbox_buf_put outbox_kit_buf_put
#define outbox_buf_puts outbox_kit_buf_puts
#define outbox_buf_putc outbox_kit_buf_putc
#define outbox_buf_vprintf outbox_kit_buf_vprintf
#define outbox_buf_printf outbox_kit_buf_printf
#define outbox_buf_reset outbox_kit_buf_reset
#define outbox_buf_steal outbox_kit_buf_steal
#define outbox_buf_free outbox_kit_buf_free
#define outbox_buf_ident outbox_kit_buf_ident
#define outbox_buf_relname outbox_kit_buf_relname
#define outbox_buf_literal outbox_kit_buf_literal
#define outbox_buf_json_string outbox_kit_buf_json_string
#define outbox_relname_t outbox_kit_relname_t
#define outbox_relname_parse outbox_kit_relname_parse
#define outbox_relname_beside outbox_kit_relname_beside
#define outbox_relname_show outbox_kit_relname_show
#define OUTBOX_IDENT_MAX OUTBOX_KIT_IDENT_MAX
#define outbox_ident_valid outbox_kit_ident_valid
#define outbox_utf8_seq outbox_kit_utf8_seq
#define outbox_utf8_valid outbox_kit_utf8_valid
#define outbox_text_line outbox_kit_text_line
#define outbox_uri_get outbox_kit_uri_get
#define outbox_uri_unknown outbox_kit_uri_unknown
#define outbox_uri_secret_key outbox_kit_secret_key
#define outbox_uri_secret_name outbox_kit_secret_name
#define outbox_uri_show outbox_kit_uri_show_builtin
#define outbox_uri_redact outbox_kit_uri_redact_builtin
#define outbox_message_header outbox_kit_header
#endif

#ifdef __cplusplus
}
#endif
#endif
