/* Helpers shared by the PostgreSQL integration tests: the server to use,
 * a throwaway schema per test, and plain libpq queries to look at the rows
 * from outside the driver. */
#ifndef PGT_H
#define PGT_H

#include <libpq-fe.h>
#include <stdint.h>

/* OUTBOX_PG_URI, or the harness's skip (tests/harness/harness.h,
 * th_need_env): exit 77, or exit 1 under CI=true. */
const char *pgt_uri(void);

/* A new connection to pgt_uri(); aborts the test on failure. */
PGconn *pgt_connect(void);

/* Runs SQL built from fmt; ck_abort()s with the server's message on error. */
void pgt_exec(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The first column of the first row as an integer (0 when NULL). */
int64_t pgt_int(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A schema name unique to this process and tag, e.g. "it_basic_1234". */
const char *pgt_schema(const char *tag);

/* Creates schema.table with exactly the DDL of SPEC section 2 (the table
 * and its two indexes, nothing else); omit names one column to leave out. */
void pgt_spec_table(PGconn *c, const char *schema, const char *table, const char *omit);

/* Microseconds on a monotonic clock. */
int64_t pgt_mono_us(void);

#endif
