/* PostgreSQL store driver: text and binary buffers.
 *
 * Batches travel as binary arrays (array_send's format) bound to one
 * prepared statement, so a stage or settle of any size is one round trip
 * with one plan, and no value is ever spliced into SQL text or escaped.
 */
#include <string.h>

#include "pg_int.h"

/* ------------------------------------------------------------ scalars */

static void put_u32(outbox_buf_t *b, uint32_t v)
{
    unsigned char c[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 8), (unsigned char)v};
    outbox_buf_put(b, c, 4);
}

void outbox_pg_put_int8(char out[8], int64_t v)
{
    uint64_t u = (uint64_t)v;
    for (int i = 7; i >= 0; i--) {
        out[i] = (char)(u & 0xff);
        u >>= 8;
    }
}

int64_t outbox_pg_get_int8(const char *p)
{
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
        u = u << 8 | (unsigned char)p[i];
    return (int64_t)u;
}

int32_t outbox_pg_get_int4(const char *p)
{
    uint32_t u = 0;
    for (int i = 0; i < 4; i++)
        u = u << 8 | (unsigned char)p[i];
    return (int32_t)u;
}

int64_t outbox_pg_get_stamp(const char *p)
{
    return outbox_pg_get_int8(p) + PG_EPOCH_OFFSET_US;
}

void outbox_pg_uuid_text(const unsigned char *bin, char out[OUTBOX_UUID_STRLEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    size_t w = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[w++] = '-';
        out[w++] = hex[bin[i] >> 4];
        out[w++] = hex[bin[i] & 15];
    }
    out[w] = '\0';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int uuid_parse(const char *s, unsigned char out[16])
{
    size_t r = 0;
    for (int i = 0; i < 16; i++) {
        if (r == 8 || r == 13 || r == 18 || r == 23) {
            if (s[r] != '-')
                return 0;
            r++;
        }
        int hi = hexval(s[r]);
        int lo = hi < 0 ? -1 : hexval(s[r + 1]);
        if (lo < 0)
            return 0;
        out[i] = (unsigned char)(hi << 4 | lo);
        r += 2;
    }
    return s[r] == '\0';
}

/* ------------------------------------------------------------- arrays */

void outbox_pg_array_begin(pg_array_t *a, outbox_buf_t *b, uint32_t elem_oid, size_t n)
{
    a->b = b;
    outbox_buf_reset(b);
    put_u32(b, 1); /* dimensions */
    a->flags_at = b->len;
    put_u32(b, 0); /* has nulls, patched by the first NULL */
    put_u32(b, elem_oid);
    put_u32(b, (uint32_t)n);
    put_u32(b, 1); /* lower bound */
}

void outbox_pg_array_null(pg_array_t *a)
{
    put_u32(a->b, UINT32_MAX); /* length -1 */
    if (!a->b->failed)
        a->b->data[a->flags_at + 3] = 1;
}

void outbox_pg_array_text(pg_array_t *a, const char *s, size_t len)
{
    put_u32(a->b, (uint32_t)len);
    outbox_buf_put(a->b, s, len);
}

void outbox_pg_array_text0(pg_array_t *a, const char *s)
{
    if (s)
        outbox_pg_array_text(a, s, strlen(s));
    else
        outbox_pg_array_null(a);
}

int outbox_pg_array_uuid(pg_array_t *a, const char *s)
{
    if (!s) {
        outbox_pg_array_null(a);
        return 1;
    }
    unsigned char bin[16];
    if (!uuid_parse(s, bin))
        return 0;
    put_u32(a->b, 16);
    outbox_buf_put(a->b, bin, 16);
    return 1;
}

void outbox_pg_array_int8(pg_array_t *a, int64_t v, int zero_is_null)
{
    if (v == 0 && zero_is_null) {
        outbox_pg_array_null(a);
        return;
    }
    char c[8];
    outbox_pg_put_int8(c, v);
    put_u32(a->b, 8);
    outbox_buf_put(a->b, c, 8);
}

void outbox_pg_array_stamp(pg_array_t *a, int64_t us, int zero_is_null)
{
    if (us == 0 && zero_is_null)
        outbox_pg_array_null(a);
    else
        outbox_pg_array_int8(a, us - PG_EPOCH_OFFSET_US, 0);
}

void outbox_pg_array_int4(pg_array_t *a, int32_t v)
{
    put_u32(a->b, 4);
    put_u32(a->b, (uint32_t)v);
}

void outbox_pg_array_jsonb(pg_array_t *a, const char *s, size_t len)
{
    /* jsonb's binary form is a version byte (1) and the JSON text. */
    put_u32(a->b, (uint32_t)(len + 1));
    outbox_buf_put(a->b, "\1", 1);
    outbox_buf_put(a->b, s, len);
}

void outbox_pg_array_line(pg_array_t *a, const char *s, size_t max)
{
    /* Cleaned straight into the parameter, the length written after. */
    outbox_buf_t *b = a->b;
    size_t at = b->len;
    put_u32(b, 0);
    if (outbox_buf_reserve(b, max) != 0)
        return;
    outbox_text_line(s, b->data + b->len, max + 1);
    size_t n = strlen(b->data + b->len);
    b->len += n;
    for (int i = 0; i < 4; i++)
        b->data[at + (size_t)i] = (char)(n >> (24 - 8 * i));
}
