/* PostgreSQL store driver, ground floor: the host table, errors and their
 * SQLSTATE mapping, relation names, and the binary wire format.
 *
 * Batches travel as binary arrays (array_send's format) bound to one
 * prepared statement, so a stage or settle of any size is one round trip
 * with one plan, and no value is ever spliced into SQL text or escaped.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "pg_int.h"

PG_HIDDEN const outbox_host_t *outbox_pg_host;

/* --------------------------------------------------------------- errors */

int outbox_pg_fail(outbox_diag_t *d, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = outbox_pg_host->verror(d, code, fmt, ap);
    va_end(ap);
    return rc;
}

int outbox_pg_nomem(outbox_diag_t *d)
{
    return outbox_pg_fail(d, OUTBOX_ENOMEM, "out of memory");
}

int outbox_pg_sqlstate_code(const char *s)
{
    if (!s || strlen(s) != 5)
        return OUTBOX_EPERMANENT;
    /* Worth a retry: the same call may well succeed in a moment. */
    static const char *const transient[] = {
        "40001", /* serialization_failure */
        "40P01", /* deadlock_detected */
        "55P03", /* lock_not_available */
        "55006", /* object_in_use */
        "57P01", /* admin_shutdown */
        "57P02", /* crash_shutdown */
        "57P03", /* cannot_connect_now */
        "57014", /* query_canceled (statement_timeout) */
        "25006", /* read_only_sql_transaction: a standby, until failover ends */
        NULL,
    };
    for (size_t i = 0; transient[i]; i++)
        if (strcmp(s, transient[i]) == 0)
            return OUTBOX_ETRANSIENT;
    if (strncmp(s, "08", 2) == 0 || /* connection_exception */
        strncmp(s, "53", 2) == 0 || /* insufficient_resources (too many connections, disk full) */
        strncmp(s, "58", 2) == 0)   /* system_error (I/O) */
        return OUTBOX_ETRANSIENT;
    if (strcmp(s, "42P01") == 0 || strcmp(s, "42703") == 0 || strcmp(s, "3F000") == 0 ||
        strcmp(s, "42704") == 0 || strcmp(s, "42P10") == 0)
        return OUTBOX_ESCHEMA; /* undefined table/column/schema/object, no matching unique index */
    if (strncmp(s, "22", 2) == 0) /* data_exception: a value the column cannot take */
        return OUTBOX_EINVAL;
    if (strcmp(s, "53200") == 0)
        return OUTBOX_ENOMEM;
    return OUTBOX_EPERMANENT; /* 23 integrity, 42 syntax/privilege, ... */
}

int outbox_pg_result_ok(const PGresult *res)
{
    ExecStatusType st = PQresultStatus(res);
    return st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
}

int outbox_pg_result_fail(PGconn *conn, const PGresult *res, outbox_diag_t *d, const char *what)
{
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    const char *primary = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    const char *detail = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL) : NULL;
    char msg[OUTBOX_MESSAGE_MAX];
    if (primary)
        snprintf(msg, sizeof msg, "%s%s%s%s", primary, detail ? " (" : "", detail ? detail : "",
                 detail ? ")" : "");
    else
        snprintf(msg, sizeof msg, "%s", conn ? PQerrorMessage(conn) : "no connection");
    /* libpq messages end with a newline and may span lines; a diagnostic is one. */
    char line[OUTBOX_MESSAGE_MAX];
    outbox_kit_text_line(msg, line, sizeof line);
    int code;
    if (!conn || PQstatus(conn) != CONNECTION_OK)
        code = OUTBOX_ETRANSIENT; /* whatever the statement was, the server is gone */
    else if (state)
        code = outbox_pg_sqlstate_code(state);
    else if (res && PQresultStatus(res) == PGRES_FATAL_ERROR && !state)
        code = OUTBOX_ETRANSIENT; /* a client-side failure: lost connection, out of sync */
    else
        code = OUTBOX_EPERMANENT;
    if (state)
        return outbox_pg_fail(d, code, "%s: %s [SQLSTATE %s]", what, line[0] ? line : "failed", state);
    return outbox_pg_fail(d, code, "%s: %s", what, line[0] ? line : "failed");
}

/* ------------------------------------------------------------ relations */

/* The host validates relation names already; checking again keeps the
 * driver safe when it is driven directly (tests, third-party hosts). */
int outbox_pg_relname(const char *name, outbox_kit_relname_t *out, outbox_diag_t *d)
{
    if (!name || !*name) {
        out->schema[0] = out->table[0] = '\0';
        return outbox_pg_fail(d, OUTBOX_EINVAL, "empty relation name");
    }
    if (outbox_kit_relname_parse(name, out) != 0)
        return outbox_pg_fail(d, OUTBOX_EINVAL,
                              "invalid relation name \"%.160s\": expected table or schema.table",
                              name);
    return OUTBOX_OK;
}

int outbox_pg_relname_beside(const char *name, const outbox_kit_relname_t *base, const char *table,
                             outbox_kit_relname_t *out, outbox_diag_t *d)
{
    if (name)
        return outbox_pg_relname(name, out, d);
    outbox_kit_relname_beside(base, table, out);
    return OUTBOX_OK;
}

/* ------------------------------------------------------------ scalars */

static void put_u32(outbox_kit_buf_t *b, uint32_t v)
{
    unsigned char c[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 8), (unsigned char)v};
    outbox_kit_buf_put(b, c, 4);
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

void outbox_pg_array_begin(pg_array_t *a, outbox_kit_buf_t *b, uint32_t elem_oid, size_t n)
{
    a->b = b;
    outbox_kit_buf_reset(b);
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
    outbox_kit_buf_put(a->b, s, len);
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
    outbox_kit_buf_put(a->b, bin, 16);
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
    outbox_kit_buf_put(a->b, c, 8);
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
    outbox_kit_buf_put(a->b, "\1", 1);
    outbox_kit_buf_put(a->b, s, len);
}

void outbox_pg_array_line(pg_array_t *a, const char *s, size_t max)
{
    /* Cleaned straight into the parameter, the length written after. */
    outbox_kit_buf_t *b = a->b;
    size_t at = b->len;
    put_u32(b, 0);
    if (outbox_kit_buf_reserve(b, max) != 0)
        return;
    outbox_kit_text_line(s, b->data + b->len, max + 1);
    size_t n = strlen(b->data + b->len);
    b->len += n;
    for (int i = 0; i < 4; i++)
        b->data[at + (size_t)i] = (char)(n >> (24 - 8 * i));
}
