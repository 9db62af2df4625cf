/* outbox-bench: the JSON lines every mode prints, built member by member.
 *
 * Scripts (smoke.py, matrix.sh) and users parse these lines, so a key's
 * place and the way its value is written must not drift: each member is
 * written by one call naming its key and, for a number, its decimals. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static void put(bench_json_t *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(bench_json_t *j, const char *fmt, ...)
{
    /* The line grows in a memory stream, opened at the first member. */
    if (!j->failed && !j->f && !(j->f = open_memstream(&j->buf, &j->len)))
        j->failed = 1;
    if (j->failed)
        return;
    va_list ap;
    va_start(ap, fmt);
    if (vfprintf(j->f, fmt, ap) < 0)
        j->failed = 1;
    va_end(ap);
}

/* The separator and the quoted key of the next member; no key for the
 * line's outer object. */
static void key(bench_json_t *j, const char *k)
{
    if (j->comma)
        put(j, ",");
    if (k)
        put(j, "\"%s\":", k);
    j->comma = 1;
}

void bench_json_open(bench_json_t *j, const char *k)
{
    key(j, k);
    put(j, "{");
    j->comma = 0;
}

void bench_json_close(bench_json_t *j)
{
    put(j, "}");
    j->comma = 1;
}

void bench_json_num(bench_json_t *j, const char *k, double v, int decimals)
{
    key(j, k);
    put(j, "%.*f", decimals, v);
}

void bench_json_num_or_null(bench_json_t *j, const char *k, int present, double v, int decimals)
{
    if (present)
        bench_json_num(j, k, v, decimals);
    else
        bench_json_null(j, k);
}

void bench_json_int(bench_json_t *j, const char *k, long v)
{
    key(j, k);
    put(j, "%ld", v);
}

void bench_json_null(bench_json_t *j, const char *k)
{
    key(j, k);
    put(j, "null");
}

void bench_json_bool(bench_json_t *j, const char *k, int v)
{
    key(j, k);
    put(j, "%s", v ? "true" : "false");
}

void bench_json_text(bench_json_t *j, const char *k, const char *s)
{
    char quoted[1024];
    bench_json_str(quoted, sizeof quoted, s);
    key(j, k);
    put(j, "%s", quoted);
}

void bench_json_raw(bench_json_t *j, const char *k, const char *json)
{
    key(j, k);
    put(j, "%s", json);
}

void bench_json_nums(bench_json_t *j, const char *k, const double *v, long n, int decimals)
{
    key(j, k);
    put(j, "[");
    for (long i = 0; i < n; i++)
        put(j, "%s%.*f", i ? "," : "", decimals, v[i]);
    put(j, "]");
}

void bench_json_nums_or_null(bench_json_t *j, const char *k, int present, const double *v, long n,
                             int decimals)
{
    if (present)
        bench_json_nums(j, k, v, n, decimals);
    else
        bench_json_null(j, k);
}

int bench_json_print(bench_json_t *j)
{
    int rc = j->failed || !j->f ? -1 : 0;
    /* Closing the stream sets buf and len to all that was written. */
    if (j->f && fclose(j->f) != 0)
        rc = -1;
    if (rc == 0) {
        fwrite(j->buf, 1, j->len, stdout);
        fputc('\n', stdout);
        fflush(stdout);
    }
    free(j->buf);
    *j = (bench_json_t){0};
    return rc;
}
