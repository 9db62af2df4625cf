/* User-facing text that configures the library: URIs, durations, relation
 * names. Every refusal is one line that names the problem, because these
 * messages end up in front of an operator who typed the input. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox/kit.h"
#include "outbox_int.h"

#define EXAMPLE_URI "sqlite:///path/outbox.db"

/* Echoed input is cut so a message always fits OUTBOX_MESSAGE_MAX with room
 * for its explanation; the buffer also holds "***" and "...". */
#define EXCERPT_MAX 160
#define EXCERPT_BUF (EXCERPT_MAX + 8)

static bool is_alpha(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_control(unsigned char c)
{
    return c < 0x20 || c == 0x7f;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Secrets in echoed input, so error messages, which get logged, never
 * carry them. Masking errs on the side of hiding too much: a message that
 * hides a host is a nuisance, one that shows a password is a leak. */

typedef struct mask {
    size_t from, to; /* [from, to) of src becomes "***" */
} mask_t;

/* The "//user:password@host" password. The parser ends the authority at
 * the first '/' or '?' ('#' is no delimiter to it) and takes the last '@'
 * in it, so a password may hold '#', '@' or escapes. A password written
 * with a raw '/' or '?' moves that '@' past where the parser looks; then
 * the last '@' anywhere in src ends what is hidden. */
static bool find_password(const char *src, mask_t *m)
{
    const char *a = strstr(src, "//");
    if (!a)
        return false;
    a += 2;
    size_t alen = strcspn(a, "/?");
    const char *at = NULL;
    for (size_t i = 0; i < alen; i++)
        if (a[i] == '@')
            at = a + i;
    if (!at)
        at = strrchr(a, '@');
    if (!at)
        return false;
    const char *colon = memchr(a, ':', (size_t)(at - a));
    if (!colon || colon + 1 >= at)
        return false;
    m->from = (size_t)(colon + 1 - src);
    m->to = (size_t)(at - src);
    return true;
}

/* A secret parameter's key (outbox_kit_secret_name) at key, as a URI
 * parameter or a libpq key=value pair: the offset of its value, or 0. */
static size_t password_key(const char *src, size_t key)
{
    if (key > 0 && !strchr("?&; :", src[key - 1]))
        return 0;
    size_t n = 0;
    while (is_alpha(src[key + n]) || is_digit(src[key + n]) || src[key + n] == '_' ||
           src[key + n] == '-' || src[key + n] == '.')
        n++; /* '.' for client properties: sasl.password */
    size_t v = n;
    while (src[key + v] == ' ')
        v++;
    if (n == 0 || src[key + v] != '=' || !outbox_kit_secret_name(src + key, n))
        return 0;
    v++;
    while (src[key + v] == ' ')
        v++;
    return v; /* libpq allows spaces around '=' */
}

/* The end of a secret parameter's value starting at v: up to '&' or a
 * space, or a quoted libpq value up to its closing quote. */
static size_t value_end(const char *src, size_t v)
{
    if (src[v] != '\'')
        return v + strcspn(src + v, "& ");
    size_t e = v + 1;
    for (; src[e] && src[e] != '\''; e++)
        if (src[e] == '\\' && src[e + 1])
            e++;
    return src[e] ? e + 1 : e;
}

/* Finds the secrets of a text as it is read from start to end. */
typedef struct masker {
    const char *src;
    mask_t pw, param;
    bool has_pw;
} masker_t;

static void masker_init(masker_t *m, const char *src)
{
    *m = (masker_t){.src = src};
    m->has_pw = find_password(src, &m->pw);
}

/* The end of the secret that covers offset i, or 0 when none does; i must
 * not go back from one call to the next. */
static size_t masker_until(masker_t *m, size_t i)
{
    if (m->param.to <= i) {
        size_t k = password_key(m->src, i);
        if (k > 0)
            m->param = (mask_t){i + k, value_end(m->src, i + k)};
    }
    size_t until = 0;
    if (m->has_pw && i >= m->pw.from && i < m->pw.to)
        until = m->pw.to;
    if (i >= m->param.from && i < m->param.to && m->param.to > until)
        until = m->param.to;
    /* The callers skip what a secret covers, so the names under it are
     * looked at here: a secret parameter named inside the span whose
     * value goes on past its end ("user:x?token=@abc", where the password
     * stops at the token's '@') makes the span that much longer. */
    for (size_t j = i + 1; j < until; j++) {
        size_t k = password_key(m->src, j);
        if (k > 0 && value_end(m->src, j + k) > until) {
            m->param = (mask_t){j + k, value_end(m->src, j + k)};
            until = m->param.to;
        }
    }
    return until;
}

/* Copies src into dst as one line of at most max bytes of text (then
 * "..." when src goes on; dst holds max + 4): control bytes become '?'
 * and, with mask, every secret becomes "***". Secrets are found as the
 * text is copied, so there is no limit on how many. */
static void copy_masked(char *dst, size_t max, const char *src, bool mask)
{
    masker_t m;
    masker_init(&m, src);
    size_t w = 0, i = 0;
    while (src[i] && w < max) {
        size_t until = mask ? masker_until(&m, i) : 0;
        if (until > 0) {
            if (w + 3 > max)
                break;
            memcpy(dst + w, "***", 3);
            w += 3;
            i = until;
            continue;
        }
        unsigned char c = (unsigned char)src[i++];
        dst[w++] = is_control(c) ? '?' : (char)c;
    }
    if (src[i]) {
        memcpy(dst + w, "...", 3);
        w += 3;
    }
    dst[w] = '\0';
}

/* src made fit for a one-line message: long text is cut with "...". */
static void excerpt(char dst[EXCERPT_BUF], const char *src, bool mask_password)
{
    copy_masked(dst, EXCERPT_MAX, src, mask_password);
}

void outbox_uri_secrets(const char *text, void (*fn)(void *ctx, const char *secret, size_t len),
                        void *ctx)
{
    if (text == NULL || fn == NULL)
        return;
    masker_t m;
    masker_init(&m, text);
    for (size_t i = 0; text[i];) {
        size_t until = masker_until(&m, i);
        if (until > i) {
            fn(ctx, text + i, until - i);
            i = until;
        } else {
            i++;
        }
    }
}

char *outbox_uri_mask(const char *text, char *out, size_t size)
{
    if (out == NULL || size == 0)
        return out;
    if (text == NULL) {
        out[0] = '\0';
        return out;
    }
    if (size < 4) {
        /* No room for "...": all or nothing. */
        copy_masked(out, 0, "", false);
        return out;
    }
    copy_masked(out, size - 4, text, true);
    return out;
}

/* ---------------------------------------------------------------- URIs */

typedef struct builder {
    char *w;          /* next free byte of the storage block */
    char *end;        /* one past the storage block */
    const char *text; /* the URI as given, for messages */
    outbox_diag_t *d;
} builder_t;

/* Whether a secret of text covers any of its bytes [from, to). */
static bool secret_in(const char *text, size_t from, size_t to)
{
    masker_t m;
    masker_init(&m, text);
    for (size_t i = 0; i < to && text[i];) {
        size_t until = masker_until(&m, i);
        if (until > from && until > i)
            return true;
        i = until > i ? until : i + 1;
    }
    return false;
}

/* Whether any of the n bytes of text at p that a message would quote may
 * be part of a password the parser did not see as one (written with a raw
 * '/' or '?', so the '@' after it ends up past the authority), or of the
 * value of a secret parameter: then a problem there is described without
 * quoting it. p points into b->text. */
static bool maybe_secret(const builder_t *b, const char *p, size_t n)
{
    size_t at = (size_t)(p - b->text);
    return secret_in(b->text, at, at + (n > 0 ? n : 1));
}

static int uri_error(builder_t *b, int code, const char *problem)
{
    char shown[EXCERPT_BUF];
    excerpt(shown, b->text, true);
    return outbox_diag_set(b->d, code, "%s in URI \"%s\"", problem, shown);
}

/* Copies src[0..n), percent-decoded when decode is set, into the storage
 * block as a NUL-terminated string and points *dst at it. */
static int put_string(builder_t *b, const char *src, size_t n, bool decode, const char *what,
                      const char **dst)
{
    /* The block is sized so this cannot fail; the check keeps an error in
     * that arithmetic from becoming a heap overflow. */
    if ((size_t)(b->end - b->w) < n + 1)
        return outbox_diag_set(b->d, OUTBOX_ENOMEM, "internal error: URI storage exhausted");
    char *start = b->w;
    for (size_t i = 0; i < n; i++) {
        char c = src[i];
        if (decode && c == '%') {
            int hi = -1, lo = -1;
            if (i + 2 < n) {
                hi = hex_value(src[i + 1]);
                lo = hex_value(src[i + 2]);
            }
            if (hi < 0 || lo < 0) {
                char problem[128];
                size_t shown = n - i < 3 ? n - i : 3;
                if (strcmp(what, "password") == 0 || maybe_secret(b, src + i, shown))
                    snprintf(problem, sizeof problem,
                             "bad percent escape in the password (expected %% and two hex digits)");
                else
                    snprintf(problem, sizeof problem,
                             "bad percent escape \"%.*s\" in the %s (expected %% and two hex digits)",
                             (int)shown, src + i, what);
                return uri_error(b, OUTBOX_EINVAL, problem);
            }
            c = (char)(hi << 4 | lo);
            if (c == '\0') {
                char problem[128];
                snprintf(problem, sizeof problem, "percent escape %%00 (a NUL byte) in the %s", what);
                return uri_error(b, OUTBOX_EINVAL, problem);
            }
            i += 2;
        }
        *b->w++ = c;
    }
    *b->w++ = '\0';
    *dst = start;
    return OUTBOX_OK;
}

/* Like put_string, but an empty part is absent (NULL). */
static int put_optional(builder_t *b, const char *src, size_t n, const char *what,
                        const char **dst)
{
    if (n == 0) {
        *dst = NULL;
        return OUTBOX_OK;
    }
    return put_string(b, src, n, true, what, dst);
}

static size_t scheme_length(const char *s)
{
    if (!is_alpha(s[0]))
        return 0;
    size_t i = 1;
    while (is_alpha(s[i]) || is_digit(s[i]) || s[i] == '+' || s[i] == '-' || s[i] == '.')
        i++;
    return i;
}

static int scheme_error(const char *text, outbox_diag_t *d)
{
    char shown[EXCERPT_BUF];
    excerpt(shown, text, true);
    const char *colon = strchr(text, ':');
    size_t before_path = strcspn(text, "/?");
    if (colon && colon != text && (size_t)(colon - text) < before_path) {
        /* What stands before the ':' is quoted unmasked, so not when a
         * secret is in it (a key=value string: "password=x host=::1"). */
        if (secret_in(text, 0, (size_t)(colon - text)))
            return outbox_diag_set(d, OUTBOX_EINVAL,
                                   "invalid scheme in URI \"%s\": a scheme is a letter "
                                   "followed by letters, digits, '+', '-' or '.'",
                                   shown);
        int n = (int)(colon - text) < 32 ? (int)(colon - text) : 32;
        return outbox_diag_set(d, OUTBOX_EINVAL,
                               "invalid scheme \"%.*s\" in URI \"%s\": a scheme is a letter "
                               "followed by letters, digits, '+', '-' or '.'",
                               n, text, shown);
    }
    return outbox_diag_set(d, OUTBOX_EINVAL, "missing scheme in URI \"%s\": expected e.g. %s",
                           shown, EXAMPLE_URI);
}

static int parse_port(builder_t *b, const char *s, size_t n, int *port)
{
    long v = 0;
    bool ok = n > 0 && n <= 5;
    for (size_t i = 0; ok && i < n; i++) {
        if (!is_digit(s[i]))
            ok = false;
        else
            v = v * 10 + (s[i] - '0');
    }
    if (!ok || v < 1 || v > 65535) {
        if (maybe_secret(b, s, n < 16 ? n : 16))
            return uri_error(b, OUTBOX_EINVAL, "invalid port (expected 1 to 65535)");
        char problem[96];
        snprintf(problem, sizeof problem, "invalid port \"%.*s%s\" (expected 1 to 65535)",
                 (int)(n < 16 ? n : 16), s, n > 16 ? "..." : "");
        return uri_error(b, OUTBOX_EINVAL, problem);
    }
    *port = (int)v;
    return OUTBOX_OK;
}

/* Hex digits, ':' and '.' (embedded IPv4), then an optional "%25zone"
 * (RFC 6874). Full address grammar is left to the resolver. */
static bool valid_ipv6(const char *s, size_t n)
{
    size_t i = 0, colons = 0;
    for (; i < n && s[i] != '%'; i++) {
        if (s[i] == ':')
            colons++;
        else if (hex_value(s[i]) < 0 && s[i] != '.')
            return false;
    }
    if (colons < 2)
        return false;
    if (i == n)
        return true;
    if (n - i < 4 || s[i + 1] != '2' || s[i + 2] != '5')
        return false;
    for (i += 3; i < n; i++)
        if (!is_alpha(s[i]) && !is_digit(s[i]) && !strchr("-._~", s[i]))
            return false;
    return true;
}

/* One "host[:port]" or "[v6][:port]" of s..s+n, checked: the host is
 * host..host+hlen (without brackets), port its number (0 when there is
 * none). */
typedef struct host_part {
    const char *host;
    size_t hlen;
    bool bracketed;
    int port;
} host_part_t;

static int split_host_port(builder_t *b, const char *s, size_t n, host_part_t *out)
{
    const char *port = NULL;
    size_t port_len = 0;
    *out = (host_part_t){.host = s, .hlen = n};
    if (n > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (!close)
            return uri_error(b, OUTBOX_EINVAL, "unterminated '[' in the host");
        size_t hlen = (size_t)(close - s - 1);
        if (!valid_ipv6(s + 1, hlen)) {
            if (maybe_secret(b, s + 1, hlen < 48 ? hlen : 48))
                return uri_error(b, OUTBOX_EINVAL, "invalid IPv6 address in the host");
            char problem[96];
            snprintf(problem, sizeof problem, "invalid IPv6 address \"[%.*s%s]\"",
                     (int)(hlen < 48 ? hlen : 48), s + 1, hlen > 48 ? "..." : "");
            return uri_error(b, OUTBOX_EINVAL, problem);
        }
        size_t after = (size_t)(close + 1 - s);
        if (after < n) {
            if (s[after] != ':')
                return uri_error(b, OUTBOX_EINVAL, "unexpected text after ']' in the host");
            port = s + after + 1;
            port_len = n - after - 1;
        }
        *out = (host_part_t){.host = s + 1, .hlen = hlen, .bracketed = true};
    } else {
        const char *colon = memchr(s, ':', n);
        size_t hlen = colon ? (size_t)(colon - s) : n;
        if (colon) {
            port = colon + 1;
            port_len = n - hlen - 1;
        }
        if (memchr(s, '[', hlen) || memchr(s, ']', hlen))
            return uri_error(b, OUTBOX_EINVAL,
                             "unexpected '[' or ']' in the host (an IPv6 host is written [addr])");
        out->hlen = hlen;
    }
    return port ? parse_port(b, port, port_len, &out->port) : OUTBOX_OK;
}

/* The host and port; or, for a list "h1:p1,h2:p2" (brokers of one
 * cluster), each element checked, the list as written in host and port 0. */
static int parse_host_port(builder_t *b, const char *s, size_t n, outbox_uri_t *uri)
{
    host_part_t part;
    if (memchr(s, ',', n) == NULL) {
        int rc = split_host_port(b, s, n, &part);
        if (rc != OUTBOX_OK)
            return rc;
        rc = part.bracketed ? put_string(b, part.host, part.hlen, true, "host", &uri->host)
                            : put_optional(b, part.host, part.hlen, "host", &uri->host);
        uri->port = part.port;
        return rc;
    }
    for (size_t at = 0; at <= n;) {
        const char *comma = memchr(s + at, ',', n - at);
        size_t len = comma ? (size_t)(comma - (s + at)) : n - at;
        int rc = split_host_port(b, s + at, len, &part);
        if (rc != OUTBOX_OK)
            return rc;
        if (part.hlen == 0)
            return uri_error(b, OUTBOX_EINVAL, "an empty host in the list of hosts");
        at += len + 1;
    }
    uri->port = 0;
    return put_string(b, s, n, true, "host", &uri->host);
}

/* s..s+n is what follows "scheme://": [user[:password]@]host[:port][/path]. */
static int parse_authority_form(builder_t *b, const char *s, size_t n, outbox_uri_t *uri)
{
    size_t alen = 0;
    while (alen < n && s[alen] != '/')
        alen++;
    int rc = put_optional(b, s + alen, n - alen, "path", &uri->path);
    if (rc != OUTBOX_OK)
        return rc;

    /* The last '@' ends the user info, so an unescaped '@' in a password
     * still parses the way the user meant. */
    const char *at = NULL;
    for (size_t i = 0; i < alen; i++)
        if (s[i] == '@')
            at = s + i;
    const char *hostport = s;
    size_t hplen = alen;
    if (at) {
        size_t ulen = (size_t)(at - s);
        const char *colon = memchr(s, ':', ulen);
        if (colon) {
            rc = put_optional(b, s, (size_t)(colon - s), "user name", &uri->user);
            if (rc == OUTBOX_OK)
                rc = put_string(b, colon + 1, (size_t)(at - colon - 1), true, "password",
                                &uri->password);
        } else {
            rc = put_optional(b, s, ulen, "user name", &uri->user);
        }
        if (rc != OUTBOX_OK)
            return rc;
        hostport = at + 1;
        hplen = alen - ulen - 1;
    }
    return parse_host_port(b, hostport, hplen, uri);
}

static int parse_query(builder_t *b, const char *q, outbox_uri_owned_t *out)
{
    size_t count = 0;
    for (const char *p = q; *p;) {
        size_t seg = strcspn(p, "&");
        if (seg > 0)
            count++;
        p += seg + (p[seg] == '&');
    }
    if (count == 0)
        return OUTBOX_OK;
    out->params = calloc(count, sizeof *out->params);
    if (!out->params)
        return outbox_diag_set(b->d, OUTBOX_ENOMEM, "out of memory parsing a URI");

    size_t k = 0;
    for (const char *p = q; *p;) {
        size_t seg = strcspn(p, "&");
        if (seg > 0) {
            const char *eq = memchr(p, '=', seg);
            size_t klen = eq ? (size_t)(eq - p) : seg;
            if (klen == 0)
                return uri_error(b, OUTBOX_EINVAL, "empty parameter name in the query");
            outbox_uri_param_t *param = &out->params[k++];
            int rc = put_string(b, p, klen, true, "query", &param->key);
            /* A bad escape in a secret's value is not echoed. */
            const char *what = rc == OUTBOX_OK && outbox_kit_secret_name(param->key, strlen(param->key))
                                   ? "password"
                                   : "query";
            if (rc == OUTBOX_OK)
                rc = eq ? put_string(b, eq + 1, seg - klen - 1, true, what, &param->value)
                        : put_string(b, "", 0, false, "query", &param->value);
            if (rc != OUTBOX_OK)
                return rc;
        }
        p += seg + (p[seg] == '&');
    }
    out->uri.params = out->params;
    out->uri.n_params = count;
    return OUTBOX_OK;
}

int outbox_uri_parse(const char *text, outbox_uri_owned_t *out, outbox_diag_t *d)
{
    if (!out)
        return outbox_diag_set(d, OUTBOX_EINVAL, "outbox_uri_parse: no output given");
    memset(out, 0, sizeof *out);
    if (!text || !*text)
        return outbox_diag_set(d, OUTBOX_EINVAL, "empty URI: expected e.g. %s", EXAMPLE_URI);

    size_t len = strlen(text);
    for (size_t i = 0; i < len; i++)
        if (is_control((unsigned char)text[i]))
            return outbox_diag_set(d, OUTBOX_EINVAL,
                                   "control character 0x%02x at offset %zu in URI: a URI is one "
                                   "line of printable text",
                                   (unsigned char)text[i], i);

    size_t slen = scheme_length(text);
    if (slen == 0 || text[slen] != ':')
        return scheme_error(text, d);

    /* Decoded parts never outgrow their source; besides the raw copy the
     * block holds at most len bytes of parts plus one NUL per part, and
     * there are at most 5 + 2 * len parts (each parameter spans >= 1 byte). */
    if (len > (SIZE_MAX - 16) / 4)
        return outbox_diag_set(d, OUTBOX_EINVAL, "URI too long");
    size_t cap = (len + 1) + 3 * len + 8;
    out->storage = malloc(cap);
    if (!out->storage)
        return outbox_diag_set(d, OUTBOX_ENOMEM, "out of memory parsing a URI");
    memcpy(out->storage, text, len + 1);
    out->uri.raw = out->storage;

    builder_t b = {out->storage + len + 1, out->storage + cap, text, d};
    char *scheme = b.w;
    for (size_t i = 0; i < slen; i++)
        *b.w++ = text[i] >= 'A' && text[i] <= 'Z' ? (char)(text[i] - 'A' + 'a') : text[i];
    *b.w++ = '\0';
    out->uri.scheme = scheme;

    const char *rest = text + slen + 1;
    const char *query = strchr(rest, '?');
    size_t body = query ? (size_t)(query - rest) : strlen(rest);
    int rc;
    if (body >= 2 && rest[0] == '/' && rest[1] == '/')
        rc = parse_authority_form(&b, rest + 2, body - 2, &out->uri);
    else
        rc = put_optional(&b, rest, body, "path", &out->uri.path);
    if (rc == OUTBOX_OK && query)
        rc = parse_query(&b, query + 1, out);
    if (rc != OUTBOX_OK) {
        outbox_uri_free(out);
        return rc;
    }
    return OUTBOX_OK;
}

void outbox_uri_free(outbox_uri_owned_t *u)
{
    if (!u)
        return;
    free(u->storage);
    free(u->params);
    memset(u, 0, sizeof *u);
}

/* ----------------------------------------------------------- durations */

int outbox_parse_duration(const char *text, int64_t *us, outbox_diag_t *d)
{
    if (!text || !*text)
        return outbox_diag_set(d, OUTBOX_EINVAL,
                               "empty duration: expected a number and a unit, e.g. 500ms or 30s");
    char shown[EXCERPT_BUF];
    excerpt(shown, text, false);
    /* The grammar is the one of every driver's URI options, in the kit. */
    int64_t v = 0;
    switch (outbox_kit_parse_duration(text, &v)) {
    case OUTBOX_KIT_PARSE_OK:
        if (us)
            *us = v;
        return OUTBOX_OK;
    case OUTBOX_KIT_PARSE_NEGATIVE:
        return outbox_diag_set(d, OUTBOX_EINVAL, "negative duration \"%s\": must be 0 or more",
                               shown);
    case OUTBOX_KIT_PARSE_NO_UNIT:
        return outbox_diag_set(d, OUTBOX_EINVAL,
                               "duration \"%s\" needs a unit: us, ms, s, m, h or d", shown);
    case OUTBOX_KIT_PARSE_RANGE:
        return outbox_diag_set(d, OUTBOX_EINVAL,
                               "duration \"%s\" is too large: at most 36500d (100 years)", shown);
    case OUTBOX_KIT_PARSE_UNIT: {
        const char *unit = text + strspn(text, "0123456789");
        if (is_alpha(*unit))
            return outbox_diag_set(d, OUTBOX_EINVAL,
                                   "unknown unit in duration \"%s\": expected us, ms, s, m, h or d",
                                   shown);
    }
        /* fall through */
    default:
        return outbox_diag_set(d, OUTBOX_EINVAL,
                               "invalid duration \"%s\": expected a whole number followed by "
                               "us, ms, s, m, h or d, e.g. 500ms",
                               shown);
    }
}

/* ------------------------------------------------------- relation names */

#define RELATION_PART_MAX 63 /* PostgreSQL's NAMEDATALEN - 1 */

static bool ident_start(char c)
{
    return is_alpha(c) || c == '_';
}

int outbox_relation_valid(const char *name)
{
    if (!name)
        return 0;
    const char *p = name;
    for (int part = 1;; part++) {
        if (!ident_start(*p))
            return 0;
        const char *start = p;
        while (ident_start(*p) || is_digit(*p))
            p++;
        if (p - start > RELATION_PART_MAX)
            return 0;
        if (*p == '\0')
            return 1;
        if (*p != '.' || part == 2)
            return 0;
        p++;
    }
}
