/* The payload validator (core/json.c) against a second, recursive
 * validator written from RFC 8259 and RFC 3629 for this harness, plus
 * properties any validator must have: whitespace around a document keeps
 * it valid, trailing garbage does not, an array of one valid document is
 * valid unless that exceeds the nesting limit, and the kit's JSON string
 * of any bytes is valid. */
#include "fuzz.h"
#include "outbox/kit.h"
#include "outbox/outbox.h"

#define REF_MAX_DEPTH 512 /* containers open at once, as the validator documents */

typedef struct ref {
    const unsigned char *p, *end;
    int depth, max_depth;
} ref_t;

static int ref_value(ref_t *r);

static void ref_ws(ref_t *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static int ref_hex4(ref_t *r, unsigned *out)
{
    if (r->end - r->p < 4)
        return 0;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = r->p[i];
        unsigned h = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? c - 'a' + 10u
                     : c >= 'A' && c <= 'F' ? c - 'A' + 10u
                                            : 16u;
        if (h == 16)
            return 0;
        v = v * 16 + h;
    }
    r->p += 4;
    *out = v;
    return 1;
}

/* One UTF-8 character decoded by its bit pattern, then judged by value:
 * overlong forms, surrogates and values past U+10FFFF are refused. */
static int ref_utf8(ref_t *r)
{
    unsigned char c = *r->p;
    size_t n;
    unsigned cp;
    if ((c & 0xe0) == 0xc0)
        n = 2, cp = c & 0x1f;
    else if ((c & 0xf0) == 0xe0)
        n = 3, cp = c & 0x0f;
    else if ((c & 0xf8) == 0xf0)
        n = 4, cp = c & 0x07;
    else
        return 0;
    if ((size_t)(r->end - r->p) < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((r->p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (r->p[i] & 0x3f);
    }
    static const unsigned min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    r->p += n;
    return 1;
}

static int ref_string(ref_t *r)
{
    r->p++; /* the opening quote */
    for (;;) {
        if (r->p == r->end)
            return 0;
        unsigned char c = *r->p;
        if (c == '"') {
            r->p++;
            return 1;
        }
        if (c < 0x20)
            return 0;
        if (c >= 0x80) {
            if (!ref_utf8(r))
                return 0;
            continue;
        }
        r->p++;
        if (c != '\\')
            continue;
        if (r->p == r->end)
            return 0;
        c = *r->p++;
        if (strchr("\"\\/bfnrt", c) && c != '\0')
            continue;
        unsigned cp, low;
        if (c != 'u' || !ref_hex4(r, &cp))
            return 0;
        if (cp >= 0xdc00 && cp <= 0xdfff)
            return 0;
        if (cp >= 0xd800 && cp <= 0xdbff) {
            if (r->end - r->p < 2 || r->p[0] != '\\' || r->p[1] != 'u')
                return 0;
            r->p += 2;
            if (!ref_hex4(r, &low) || low < 0xdc00 || low > 0xdfff)
                return 0;
        }
    }
}

static int ref_digits(ref_t *r)
{
    const unsigned char *start = r->p;
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9')
        r->p++;
    return r->p > start;
}

static int ref_number(ref_t *r)
{
    if (*r->p == '-')
        r->p++;
    if (r->p < r->end && *r->p == '0')
        r->p++;
    else if (r->p == r->end || *r->p < '1' || *r->p > '9' || !ref_digits(r))
        return 0;
    if (r->p < r->end && *r->p == '.') {
        r->p++;
        if (!ref_digits(r))
            return 0;
    }
    if (r->p < r->end && (*r->p | 0x20) == 'e') {
        r->p++;
        if (r->p < r->end && (*r->p == '+' || *r->p == '-'))
            r->p++;
        if (!ref_digits(r))
            return 0;
    }
    return 1;
}

static int ref_word(ref_t *r, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, w, n) != 0)
        return 0;
    r->p += n;
    return 1;
}

/* An array or object; r->p at its opening bracket. */
static int ref_container(ref_t *r)
{
    int object = *r->p == '{';
    unsigned char close = object ? '}' : ']';
    if (r->depth == REF_MAX_DEPTH)
        return 0;
    if (++r->depth > r->max_depth)
        r->max_depth = r->depth;
    r->p++;
    ref_ws(r);
    if (r->p < r->end && *r->p == close) {
        r->p++;
        r->depth--;
        return 1;
    }
    for (;;) {
        if (object) {
            if (r->p == r->end || *r->p != '"' || !ref_string(r))
                return 0;
            ref_ws(r);
            if (r->p == r->end || *r->p++ != ':')
                return 0;
        }
        if (!ref_value(r))
            return 0;
        if (r->p == r->end)
            return 0;
        if (*r->p == close) {
            r->p++;
            r->depth--;
            return 1;
        }
        if (*r->p++ != ',')
            return 0;
        ref_ws(r);
    }
}

/* A value with the whitespace around it. */
static int ref_value(ref_t *r)
{
    ref_ws(r);
    if (r->p == r->end)
        return 0;
    int ok;
    switch (*r->p) {
    case '{': case '[': ok = ref_container(r); break;
    case '"': ok = ref_string(r); break;
    case 't': ok = ref_word(r, "true"); break;
    case 'f': ok = ref_word(r, "false"); break;
    case 'n': ok = ref_word(r, "null"); break;
    default: ok = (*r->p == '-' || (*r->p >= '0' && *r->p <= '9')) && ref_number(r); break;
    }
    ref_ws(r);
    return ok;
}

static int ref_valid(const uint8_t *data, size_t size, int *max_depth)
{
    ref_t r = {data, data + size, 0, 0};
    int ok = ref_value(&r) && r.p == r.end;
    *max_depth = r.max_depth;
    return ok;
}

static int valid_wrapped(const char *before, const uint8_t *data, size_t size, const char *after)
{
    size_t a = strlen(before), b = strlen(after);
    char *s = malloc(a + size + b);
    if (!s)
        abort();
    memcpy(s, before, a);
    if (size)
        memcpy(s + a, data, size);
    memcpy(s + a + size, after, b);
    int ok = outbox_json_valid(s, a + size + b);
    free(s);
    return ok;
}

static void *fuzz_alloc(size_t n) { return malloc(n); }
static void *fuzz_realloc(void *p, size_t n) { return realloc(p, n); }
static void fuzz_free(void *p) { free(p); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The validator keeps its own copy of nothing: a heap copy of exactly
     * size bytes lets ASan catch a read one past the end. */
    char *copy = malloc(size ? size : 1);
    if (!copy)
        abort();
    if (size)
        memcpy(copy, data, size);
    int depth = 0;
    int valid = outbox_json_valid(copy, size);
    FUZZ_CHECK(valid == 0 || valid == 1);
    FUZZ_CHECK(valid == ref_valid(data, size, &depth));
    FUZZ_CHECK(outbox_json_valid(copy, size) == valid);

    if (valid) {
        FUZZ_CHECK(valid_wrapped(" \n\t\r", data, size, "\r\n "));
        FUZZ_CHECK(!valid_wrapped("", data, size, "x"));
        FUZZ_CHECK(!valid_wrapped("", data, size, ","));
        FUZZ_CHECK(valid_wrapped("[", data, size, "]") == (depth < REF_MAX_DEPTH));
        FUZZ_CHECK(valid_wrapped("{\"k\":", data, size, "}") == (depth < REF_MAX_DEPTH));
        FUZZ_CHECK(!valid_wrapped("{", data, size, "}"));
    }
    FUZZ_CHECK(!outbox_json_valid(NULL, size));

    /* Whatever the bytes, the kit makes them one valid JSON string. */
    static const outbox_host_t host = {
        .struct_size = sizeof host, .alloc = fuzz_alloc, .realloc = fuzz_realloc, .free = fuzz_free};
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, &host);
    outbox_kit_buf_json_string(&b, copy, size);
    FUZZ_CHECK(!b.failed);
    FUZZ_CHECK(outbox_json_valid(b.data, b.len));
    FUZZ_CHECK(outbox_kit_utf8_valid(b.data, b.len));
    outbox_kit_buf_free(&b);
    free(copy);
    return 0;
}
