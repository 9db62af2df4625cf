/* Helpers shared by the PostgreSQL integration tests. */
#include "pgt.h"

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

const char *pgt_uri(void)
{
    return th_need_env("OUTBOX_PG_URI", TH_START_SERVICE("postgres"));
}

PGconn *pgt_connect(void)
{
    PGconn *c = PQconnectdb(pgt_uri());
    if (PQstatus(c) != CONNECTION_OK)
        ck_abort_msg("cannot connect to %s: %s", pgt_uri(), PQerrorMessage(c));
    PQclear(PQexec(c, "SET client_min_messages = warning"));
    return c;
}

static PGresult *run(PGconn *c, const char *fmt, va_list ap)
{
    char sql[8192];
    vsnprintf(sql, sizeof sql, fmt, ap);
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        ck_abort_msg("SQL failed: %s\n%s", PQerrorMessage(c), sql);
    return r;
}

void pgt_exec(PGconn *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PQclear(run(c, fmt, ap));
    va_end(ap);
}

int64_t pgt_int(PGconn *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PGresult *r = run(c, fmt, ap);
    va_end(ap);
    int64_t v = PQntuples(r) > 0 && !PQgetisnull(r, 0, 0) ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : 0;
    PQclear(r);
    return v;
}

const char *pgt_schema(const char *tag)
{
    static char name[64];
    snprintf(name, sizeof name, "it_%s_%ld", tag, (long)getpid());
    return name;
}

void pgt_spec_table(PGconn *c, const char *schema, const char *table, const char *omit)
{
    static const char *const cols[][2] = {
        {"id", "UUID PRIMARY KEY"},
        {"outbox_route", "TEXT NOT NULL"},
        {"event_id", "UUID NOT NULL"},
        {"event_type", "TEXT NOT NULL"},
        {"tenant_id", "UUID"},
        {"execution_id", "UUID"},
        {"correlation_id", "UUID"},
        {"causation_id", "UUID"},
        {"occurred_at", "TIMESTAMPTZ NOT NULL"},
        {"payload", "JSONB NOT NULL"},
        {"status", "TEXT NOT NULL"},
        {"created_at", "TIMESTAMPTZ NOT NULL"},
        {"published_at", "TIMESTAMPTZ"},
        {"processing_at", "TIMESTAMPTZ"},
        {"last_error", "TEXT"},
        {"attempts", "INT NOT NULL DEFAULT 0"},
        {"available_at", "TIMESTAMPTZ"},
        {"ordering_key", "TEXT"},
    };
    char body[2048] = "";
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) {
        if (omit && strcmp(omit, cols[i][0]) == 0)
            continue;
        strcat(body, cols[i][0]);
        strcat(body, " ");
        strcat(body, cols[i][1]);
        strcat(body, ", ");
    }
    pgt_exec(c, "CREATE SCHEMA IF NOT EXISTS %s", schema);
    pgt_exec(c, "CREATE TABLE %s.%s (%s UNIQUE (outbox_route, event_id))", schema, table, body);
    pgt_exec(c, "CREATE INDEX %s_claim_idx ON %s.%s (outbox_route, status, available_at, created_at)",
             table, schema, table);
}

int64_t pgt_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
