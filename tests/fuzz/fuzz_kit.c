/* The driver kit's text helpers (include/outbox/kit.h, header-only):
 * UTF-8 checks against a decoder written here, the core's JSON validator
 * agreeing with them on string contents, JSON strings that decode back to
 * their input (with U+FFFD for each byte that is not UTF-8), one-line
 * message text, and identifier quoting that unquotes to its input. */
#include <strings.h>

#include "fuzz.h"
#include "outbox/kit.h"
#include "outbox/outbox.h"

static void *fuzz_alloc(size_t n) { return malloc(n); }
static void *fuzz_realloc(void *p, size_t n) { return realloc(p, n); }
static void fuzz_free(void *p) { free(p); }
static const outbox_host_t host = {
    .struct_size = sizeof host, .alloc = fuzz_alloc, .realloc = fuzz_realloc, .free = fuzz_free};

/* Length of the UTF-8 character at p by value (RFC 3629), or 0. */
static size_t ref_seq(const unsigned char *p, size_t avail)
{
    unsigned char c = p[0];
    size_t n;
    unsigned cp;
    if (c < 0x80)
        return 1;
    if ((c & 0xe0) == 0xc0)
        n = 2, cp = c & 0x1f;
    else if ((c & 0xf0) == 0xe0)
        n = 3, cp = c & 0x0f;
    else if ((c & 0xf8) == 0xf0)
        n = 4, cp = c & 0x07;
    else
        return 0;
    if (avail < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    static const unsigned min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

static int ref_valid(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t k = p[i] ? ref_seq(p + i, n - i) : 0;
        if (k == 0)
            return 0;
        i += k;
    }
    return 1;
}

static unsigned hex4(const char *s)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        FUZZ_CHECK((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
        v = v * 16 + (unsigned)(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    return v;
}

/* Decodes the JSON string literal s[0..n) (as the kit writes them: no
 * surrogate escapes, only ASCII and U+FFFD escaped) into out. */
static size_t json_decode(const char *s, size_t n, unsigned char *out)
{
    FUZZ_CHECK(n >= 2 && s[0] == '"' && s[n - 1] == '"');
    size_t w = 0;
    for (size_t i = 1; i < n - 1; i++) {
        unsigned char c = (unsigned char)s[i];
        FUZZ_CHECK(c >= 0x20 && c != '"');
        if (c != '\\') {
            out[w++] = c;
            continue;
        }
        FUZZ_CHECK(i + 1 < n - 1);
        char e = s[++i];
        if (e == 'u') {
            FUZZ_CHECK(i + 4 < n - 1);
            unsigned cp = hex4(s + i + 1);
            i += 4;
            if (cp == 0xfffd) {
                memcpy(out + w, "\xef\xbf\xbd", 3);
                w += 3;
            } else {
                FUZZ_CHECK(cp < 0x20); /* the kit escapes nothing else this way */
                out[w++] = (unsigned char)cp;
            }
            continue;
        }
        const char *from = "\"\\nrt", *to = "\"\\\n\r\t";
        const char *at = strchr(from, e);
        FUZZ_CHECK(e != '\0' && at != NULL);
        out[w++] = (unsigned char)to[at - from];
    }
    return w;
}

static void check_json_string(const unsigned char *p, size_t n)
{
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, &host);
    outbox_kit_buf_json_string(&b, (const char *)p, n);
    FUZZ_CHECK(!b.failed && b.data != NULL);
    FUZZ_CHECK(strlen(b.data) == b.len); /* NUL bytes travel escaped */
    FUZZ_CHECK(outbox_json_valid(b.data, b.len));

    /* What it should decode to: the input, with U+FFFD for each byte that
     * does not start a UTF-8 character. */
    unsigned char *want = malloc(3 * n + 1), *got = malloc(b.len + 1);
    FUZZ_CHECK(want && got);
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        size_t k = ref_seq(p + i, n - i);
        if (k == 0) {
            memcpy(want + w, "\xef\xbf\xbd", 3);
            w += 3;
            i++;
        } else {
            memcpy(want + w, p + i, k);
            w += k;
            i += k;
        }
    }
    size_t g = json_decode(b.data, b.len, got);
    FUZZ_CHECK(g == w && memcmp(got, want, w) == 0);
    free(want);
    free(got);
    outbox_kit_buf_free(&b);
}

static void check_text_line(const char *in)
{
    static const size_t sizes[] = {1, 2, 3, 5, 8, 64, 600};
    size_t big = 4 * strlen(in) + 8;
    char *full = malloc(big);
    FUZZ_CHECK(full != NULL);
    outbox_kit_text_line(in, full, big);
    FUZZ_CHECK(outbox_kit_utf8_valid(full, strlen(full)) && fuzz_one_line(full));
    FUZZ_CHECK(full[0] != ' ' || in[strspn(in, "\r\n\t")] == ' ');
    if (ref_valid((const unsigned char *)in, strlen(in)) && fuzz_one_line(in))
        FUZZ_CHECK(strcmp(full, in) == 0);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char out[600];
        memset(out, 'X', sizeof out);
        outbox_kit_text_line(in, out, sizes[i]);
        size_t len = strlen(out);
        FUZZ_CHECK(len < sizes[i]);
        FUZZ_CHECK(outbox_kit_utf8_valid(out, len) && fuzz_one_line(out));
        /* Cutting short only ever drops the end. */
        FUZZ_CHECK(strncmp(out, full, len) == 0);
    }
    free(full);
}

static void check_ident(const char *s, char q)
{
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, &host);
    outbox_kit_buf_ident(&b, s, q);
    FUZZ_CHECK(!b.failed && b.len >= 2 && b.data[0] == q && b.data[b.len - 1] == q);
    size_t w = 0;
    char *back = malloc(b.len);
    FUZZ_CHECK(back != NULL);
    for (size_t i = 1; i + 1 < b.len; i++) {
        if (b.data[i] == q) {
            FUZZ_CHECK(b.data[i + 1] == q && i + 2 < b.len); /* never a lone quote inside */
            i++;
        }
        back[w++] = b.data[i];
    }
    back[w] = '\0';
    FUZZ_CHECK(strcmp(back, s) == 0);
    free(back);
    outbox_kit_buf_free(&b);
}

static int ref_secret_key(const char *k)
{
    return strcasestr(k, "password") || strcasestr(k, "passwd") || strcasestr(k, "secret") ||
           strcasestr(k, "token") || strcasecmp(k, "pass") == 0 || strcasecmp(k, "pwd") == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char *p = malloc(size ? size : 1); /* exactly size bytes, for ASan */
    FUZZ_CHECK(p != NULL);
    if (size)
        memcpy(p, data, size);

    int valid = outbox_kit_utf8_valid((const char *)p, size);
    FUZZ_CHECK(valid == ref_valid(p, size));
    for (size_t i = 0; i < size; i++)
        FUZZ_CHECK(outbox_kit_utf8_seq(p + i, size - i) == ref_seq(p + i, size - i));
    FUZZ_CHECK(outbox_kit_utf8_seq(p, 0) == 0);

    /* On string contents the core's validator and the kit agree. */
    if (!memchr(p, '"', size) && !memchr(p, '\\', size)) {
        int plain = 1;
        for (size_t i = 0; i < size; i++)
            plain &= p[i] >= 0x20;
        if (plain) {
            char *lit = malloc(size + 2);
            FUZZ_CHECK(lit != NULL);
            lit[0] = '"';
            memcpy(lit + 1, p, size);
            lit[size + 1] = '"';
            FUZZ_CHECK(outbox_json_valid(lit, size + 2) == valid);
            free(lit);
        }
    }
    check_json_string(p, size);

    char *s = fuzz_cstring(data, size);
    if (s) {
        check_text_line(s);
        check_ident(s, '"');
        check_ident(s, '`');
        outbox_kit_buf_t b;
        outbox_kit_buf_init(&b, &host);
        outbox_kit_buf_literal(&b, s);
        outbox_kit_buf_printf(&b, "%s", s);
        size_t quotes = 0;
        for (const char *c = s; *c; c++)
            quotes += *c == '\'';
        FUZZ_CHECK(!b.failed && b.len == 2 * size + 2 + quotes);
        FUZZ_CHECK(strcmp(b.data + b.len - size, s) == 0);
        outbox_kit_buf_free(&b);
        FUZZ_CHECK(outbox_kit_secret_key(s) == ref_secret_key(s));
        char *dup = outbox_kit_strdup(&host, s);
        FUZZ_CHECK(dup && strcmp(dup, s) == 0);
        free(dup);
        free(s);
    }
    free(p);
    return 0;
}
