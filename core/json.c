/* A strict RFC 8259 validator for staged payloads.
 *
 * Iterative, with an explicit container stack of bounded depth, so hostile
 * input ("[[[[...") can neither exhaust the C stack nor make us allocate.
 *
 * Decisions beyond the RFC's grammar, chosen to match what the stores
 * accept (PostgreSQL jsonb refuses the same documents):
 *  - strings must be valid UTF-8 (RFC 3629: no overlongs, no encoded
 *    surrogates, nothing above U+10FFFF);
 *  - \u escapes must not leave a lone surrogate: a high surrogate must be
 *    followed by an escaped low one, and a low one must not stand alone;
 *  - no byte-order mark (RFC 8259 §8.1 lets parsers ignore it, not require);
 *  - nesting deeper than JSON_MAX_DEPTH is refused.
 */
#include <stdbool.h>

#include "outbox_int.h"

#define JSON_MAX_DEPTH 512

typedef struct cursor {
    const unsigned char *p;
    const unsigned char *end;
} cursor_t;

static void skip_ws(cursor_t *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool is_digit(unsigned char ch)
{
    return ch >= '0' && ch <= '9';
}

static bool in_range(const unsigned char *p, const unsigned char *end, size_t i, unsigned lo,
                     unsigned hi)
{
    return (size_t)(end - p) > i && p[i] >= lo && p[i] <= hi;
}

/* Length of the well-formed UTF-8 sequence at p (lead byte >= 0x80), or 0.
 * The table is RFC 3629 §4. */
static size_t utf8_sequence(const unsigned char *p, const unsigned char *end)
{
    unsigned b = p[0];
    if (b >= 0xc2 && b <= 0xdf)
        return in_range(p, end, 1, 0x80, 0xbf) ? 2 : 0;
    if (b == 0xe0)
        return in_range(p, end, 1, 0xa0, 0xbf) && in_range(p, end, 2, 0x80, 0xbf) ? 3 : 0;
    if ((b >= 0xe1 && b <= 0xec) || b == 0xee || b == 0xef)
        return in_range(p, end, 1, 0x80, 0xbf) && in_range(p, end, 2, 0x80, 0xbf) ? 3 : 0;
    if (b == 0xed) /* excludes U+D800..U+DFFF */
        return in_range(p, end, 1, 0x80, 0x9f) && in_range(p, end, 2, 0x80, 0xbf) ? 3 : 0;
    if (b == 0xf0)
        return in_range(p, end, 1, 0x90, 0xbf) && in_range(p, end, 2, 0x80, 0xbf) &&
                       in_range(p, end, 3, 0x80, 0xbf)
                   ? 4
                   : 0;
    if (b >= 0xf1 && b <= 0xf3)
        return in_range(p, end, 1, 0x80, 0xbf) && in_range(p, end, 2, 0x80, 0xbf) &&
                       in_range(p, end, 3, 0x80, 0xbf)
                   ? 4
                   : 0;
    if (b == 0xf4) /* caps at U+10FFFF */
        return in_range(p, end, 1, 0x80, 0x8f) && in_range(p, end, 2, 0x80, 0xbf) &&
                       in_range(p, end, 3, 0x80, 0xbf)
                   ? 4
                   : 0;
    return 0;
}

static int hex_value(unsigned char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Reads "uXXXX" (c->p at the 'u'). */
static bool read_u_escape(cursor_t *c, unsigned *cp)
{
    if (c->end - c->p < 5 || *c->p != 'u')
        return false;
    unsigned v = 0;
    for (int i = 1; i <= 4; i++) {
        int h = hex_value(c->p[i]);
        if (h < 0)
            return false;
        v = v << 4 | (unsigned)h;
    }
    c->p += 5;
    *cp = v;
    return true;
}

static bool parse_escape(cursor_t *c)
{
    if (c->p == c->end)
        return false;
    switch (*c->p) {
    case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
        c->p++;
        return true;
    case 'u': {
        unsigned cp;
        if (!read_u_escape(c, &cp))
            return false;
        if (cp >= 0xdc00 && cp <= 0xdfff)
            return false;
        if (cp >= 0xd800 && cp <= 0xdbff) {
            unsigned low;
            if (c->end - c->p < 2 || c->p[0] != '\\')
                return false;
            c->p++;
            if (!read_u_escape(c, &low) || low < 0xdc00 || low > 0xdfff)
                return false;
        }
        return true;
    }
    default:
        return false;
    }
}

/* c->p at the opening quote. */
static bool parse_string(cursor_t *c)
{
    c->p++;
    while (c->p < c->end) {
        unsigned char ch = *c->p;
        if (ch == '"') {
            c->p++;
            return true;
        }
        if (ch < 0x20) /* includes NUL */
            return false;
        if (ch == '\\') {
            c->p++;
            if (!parse_escape(c))
                return false;
        } else if (ch < 0x80) {
            c->p++;
        } else {
            size_t n = utf8_sequence(c->p, c->end);
            if (n == 0)
                return false;
            c->p += n;
        }
    }
    return false;
}

static bool parse_digits(cursor_t *c)
{
    if (c->p == c->end || !is_digit(*c->p))
        return false;
    while (c->p < c->end && is_digit(*c->p))
        c->p++;
    return true;
}

/* number = [ "-" ] ( "0" / 1-9 *DIGIT ) [ "." 1*DIGIT ] [ ("e"/"E") ["+"/"-"] 1*DIGIT ] */
static bool parse_number(cursor_t *c)
{
    if (*c->p == '-')
        c->p++;
    if (c->p == c->end)
        return false;
    if (*c->p == '0')
        c->p++;
    else if (!parse_digits(c))
        return false;
    if (c->p < c->end && *c->p == '.') {
        c->p++;
        if (!parse_digits(c))
            return false;
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        c->p++;
        if (c->p < c->end && (*c->p == '+' || *c->p == '-'))
            c->p++;
        if (!parse_digits(c))
            return false;
    }
    return true;
}

static bool parse_literal(cursor_t *c, const char *word)
{
    for (; *word; word++, c->p++)
        if (c->p == c->end || *c->p != (unsigned char)*word)
            return false;
    return true;
}

enum expect { EXPECT_VALUE, EXPECT_KEY, EXPECT_AFTER_VALUE };

int outbox_json_valid(const char *text, size_t len)
{
    if (!text)
        return 0;
    cursor_t c = {(const unsigned char *)text, (const unsigned char *)text + len};
    bool in_object[JSON_MAX_DEPTH]; /* per open container: object or array */
    size_t depth = 0;
    enum expect state = EXPECT_VALUE;

    skip_ws(&c);
    for (;;) {
        switch (state) {
        case EXPECT_VALUE:
            if (c.p == c.end)
                return 0;
            switch (*c.p) {
            case '{':
            case '[':
                if (depth == JSON_MAX_DEPTH)
                    return 0;
                in_object[depth++] = *c.p == '{';
                c.p++;
                skip_ws(&c);
                if (c.p < c.end && *c.p == (in_object[depth - 1] ? '}' : ']')) {
                    c.p++;
                    depth--;
                    state = EXPECT_AFTER_VALUE;
                } else {
                    state = in_object[depth - 1] ? EXPECT_KEY : EXPECT_VALUE;
                }
                continue;
            case '"':
                if (!parse_string(&c))
                    return 0;
                break;
            case 't':
                if (!parse_literal(&c, "true"))
                    return 0;
                break;
            case 'f':
                if (!parse_literal(&c, "false"))
                    return 0;
                break;
            case 'n':
                if (!parse_literal(&c, "null"))
                    return 0;
                break;
            default:
                if (*c.p != '-' && !is_digit(*c.p))
                    return 0;
                if (!parse_number(&c))
                    return 0;
                break;
            }
            state = EXPECT_AFTER_VALUE;
            continue;

        case EXPECT_KEY:
            if (c.p == c.end || *c.p != '"' || !parse_string(&c))
                return 0;
            skip_ws(&c);
            if (c.p == c.end || *c.p != ':')
                return 0;
            c.p++;
            skip_ws(&c);
            state = EXPECT_VALUE;
            continue;

        case EXPECT_AFTER_VALUE:
            skip_ws(&c);
            if (depth == 0)
                return c.p == c.end;
            if (c.p == c.end)
                return 0;
            if (*c.p == ',') {
                c.p++;
                skip_ws(&c);
                state = in_object[depth - 1] ? EXPECT_KEY : EXPECT_VALUE;
            } else if (*c.p == (in_object[depth - 1] ? '}' : ']')) {
                c.p++;
                depth--;
            } else {
                return 0;
            }
            continue;
        }
    }
}
