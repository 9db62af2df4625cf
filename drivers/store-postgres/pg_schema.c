/* PostgreSQL store driver, third floor: the canonical schema, finding the
 * table at open, applying the schema, and checking a live table against it.
 *
 * Everything is read from the catalogs (pg_class, pg_attribute, pg_index),
 * and indexes are compared by what they cover, never by name: a table the
 * application created and named by hand is just as good.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_ops.h"

typedef struct col_spec {
    const char *name;
    const char *type;  /* format_type() of the canonical column */
    const char *alt;   /* another type that works as well, or NULL */
    const char *decl;
} col_spec_t;

/* SPEC 2, in its order. */
static const col_spec_t outbox_cols[] = {
    {"id", "uuid", NULL, "UUID PRIMARY KEY"},
    {"outbox_route", "text", "character varying", "TEXT NOT NULL"},
    {"event_id", "uuid", NULL, "UUID NOT NULL"},
    {"event_type", "text", "character varying", "TEXT NOT NULL"},
    {"tenant_id", "uuid", NULL, "UUID"},
    {"execution_id", "uuid", NULL, "UUID"},
    {"correlation_id", "uuid", NULL, "UUID"},
    {"causation_id", "uuid", NULL, "UUID"},
    {"occurred_at", "timestamp with time zone", NULL, "TIMESTAMPTZ NOT NULL"},
    {"payload", "jsonb", "json", "JSONB NOT NULL"},
    {"status", "text", "character varying", "TEXT NOT NULL"},
    {"created_at", "timestamp with time zone", NULL, "TIMESTAMPTZ NOT NULL"},
    {"published_at", "timestamp with time zone", NULL, "TIMESTAMPTZ"},
    {"processing_at", "timestamp with time zone", NULL, "TIMESTAMPTZ"},
    {"last_error", "text", "character varying", "TEXT"},
    {"attempts", "integer", NULL, "INT NOT NULL DEFAULT 0"},
    {"available_at", "timestamp with time zone", NULL, "TIMESTAMPTZ"},
    {"ordering_key", "text", "character varying", "TEXT"},
};
#define N_OUTBOX_COLS (sizeof outbox_cols / sizeof outbox_cols[0])
/* The columns an older table may lack; ALTER TABLE adds them (SPEC 2). */
#define FIRST_MIGRATED_COL 15

static const col_spec_t traceparent_col = {"traceparent", "text", "character varying", "TEXT"};
static const col_spec_t hlc_col = {"hlc", "bigint", NULL, "BIGINT"};

static const col_spec_t ckpt_cols[] = {
    {"node_key", "text", "character varying", "TEXT NOT NULL"},
    {"hlc", "bigint", NULL, "BIGINT NOT NULL"},
};

/* The inbox: one row per event a consumer handled. Event ids are text, not
 * uuid: a consumer records the ids of events from any producer, and
 * CloudEvents ids are free-form strings. */
static const col_spec_t inbox_cols[] = {
    {"consumer", "text", "character varying", "TEXT NOT NULL"},
    {"event_id", "text", "character varying", "TEXT NOT NULL"},
    {"received_at", "timestamp with time zone", NULL, "TIMESTAMPTZ NOT NULL DEFAULT now()"},
};
#define N_INBOX_COLS (sizeof inbox_cols / sizeof inbox_cols[0])

/* The columns every outbox table has, NULL-terminated. */
static const char *const required_columns[] = {
    "id", "outbox_route", "event_id", "event_type", "tenant_id", "execution_id",
    "correlation_id", "causation_id", "occurred_at", "payload", "status", "created_at",
    "published_at", "processing_at", "last_error", "attempts", "available_at", "ordering_key",
    NULL,
};

/* The predicates of the partial indexes, as written in DDL and as
 * pg_get_expr() prints them once squeezed by squeeze() below. */
#define PRED_PENDING "status = 'pending'"
#define PRED_PENDING_N "status='pending'"
#define PRED_PROCESSING "status = 'processing'"
#define PRED_PROCESSING_N "status='processing'"
#define PRED_LIVE "status IN ('pending', 'processing') AND ordering_key IS NOT NULL"
#define PRED_LIVE_N "status=anyarray['pending','processing']andordering_keyisnotnull"
#define PRED_LIVE_ALT_N "status=anyarray['pending','processing']"

/* The indexes of the canonical table and why each is there. A live index
 * serves a spec when it has the spec's leading columns and either the same
 * predicate or none, with full_cols (the status-led equivalent) then. */
typedef struct idx_spec {
    const char *suffix;
    const char *cols;
    const char *where;          /* NULL: a plain index */
    const char *const preds[3]; /* accepted squeezed predicates */
    const char *full_cols;      /* a plain index with these leading columns serves too */
    int hlc;                    /* only with OUTBOX_SCHEMA_HLC */
    const char *why;
    const char *problem;        /* what schema check says when it is missing */
    unsigned claim_bit;         /* PG_IDX_* when the claim's shape depends on it */
} idx_spec_t;

static const idx_spec_t outbox_idx[] = {
    {"claim_idx", "outbox_route, status, available_at, created_at", NULL, {NULL}, NULL, 0,
     "SPEC 2's claim index", NULL, 0},
    {"pending_idx", "outbox_route, created_at, id", PRED_PENDING, {PRED_PENDING_N, NULL},
     "outbox_route, status, created_at, id", 0,
     "pending rows already in claim order: a claim reads its batch off the front instead of "
     "sorting the backlog",
     "claims fall back to outbox_claim_idx and sort each staging call", PG_IDX_PENDING},
    {"key_idx", "outbox_route, ordering_key, created_at, id", PRED_LIVE,
     {PRED_LIVE_N, PRED_LIVE_ALT_N, NULL}, "outbox_route, ordering_key, created_at, id", 0,
     "per-key FIFO: a key's unfinished rows in claim order, so the rows ahead of a claimed row "
     "are found without reading the key's history",
     "per-key order checks read what a claim passed over a second time", PG_IDX_KEY},
    {"processing_idx", "outbox_route, processing_at", PRED_PROCESSING, {PRED_PROCESSING_N, NULL},
     "outbox_route, status, processing_at", 0,
     "claimed rows by age: expired leases of crashed relays",
     "finding expired leases reads every claimed row of the route", 0},
    {"claim_hlc_idx", "outbox_route, status, available_at, hlc, created_at, id", NULL, {NULL},
     NULL, 1, "SPEC 2's hlc claim index", NULL, 0},
    {"pending_hlc_idx", "outbox_route, hlc, created_at, id", PRED_PENDING, {PRED_PENDING_N, NULL},
     "outbox_route, status, hlc, created_at, id", 1,
     "the pending index's twin for hlc claim order (NULL hlc sorts last, as the claim wants)",
     "hlc-ordered claims fall back to outbox_claim_hlc_idx", PG_IDX_PENDING_HLC},
    {"key_hlc_idx", "outbox_route, ordering_key, hlc, created_at, id", PRED_LIVE,
     {PRED_LIVE_N, PRED_LIVE_ALT_N, NULL}, "outbox_route, ordering_key, hlc, created_at, id", 1,
     "the key index's twin for hlc claim order",
     "per-key order checks in hlc order read what a claim passed over a second time", PG_IDX_KEY_HLC},
};
#define N_OUTBOX_IDX (sizeof outbox_idx / sizeof outbox_idx[0])

/* ---------------------------------------------------------------- names */

static uint32_t fnv1a(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* PostgreSQL cuts identifiers at 63 bytes; two long names that share their
 * first 63 would silently become one. Long names keep a prefix and gain a
 * hash of the whole, so they stay distinct and stable. */
static void short_name(const char *full, char out[64])
{
    size_t n = strlen(full);
    if (n <= 63) {
        memcpy(out, full, n + 1);
        return;
    }
    snprintf(out, 64, "%.54s_%08x", full, fnv1a(full));
}

static void index_name(const char *table, const char *suffix, char out[64])
{
    char full[160];
    snprintf(full, sizeof full, "%s_%s", table, suffix);
    short_name(full, out);
}

/* The NOTIFY channel of a table: every process that stages into or relays
 * from schema.table computes the same name, whatever search_path said. */
static void channel_name(const char *schema, const char *table, char out[PG_CHANNEL_MAX + 1])
{
    char full[200];
    snprintf(full, sizeof full, "outbox.%s.%s", schema ? schema : "", table);
    for (char *p = full; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_' && *p != '.')
            *p = '_';
    short_name(full, out);
}

/* -------------------------------------------------------------- detect */

/* The columns of the three relations in one round trip: which (1 outbox,
 * 2 checkpoint, 3 inbox), resolved schema, table, column, type. A NULL
 * name is no relation. */
#define DETECT_SQL                                                                             \
    "SELECT r.which, n.nspname, c.relname, a.attname, format_type(a.atttypid, a.atttypmod) "  \
    "FROM (VALUES (1, to_regclass($1::text)), (2, to_regclass($2::text)), "                   \
    "(3, to_regclass($3::text))) AS r(which, oid) "                                            \
    "JOIN pg_catalog.pg_class c ON c.oid = r.oid "                                             \
    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "                                \
    "JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT "           \
    "a.attisdropped"

static int find_column(const PGresult *res, int which, const char *name, const char **type)
{
    for (int i = 0; i < PQntuples(res); i++) {
        if (atoi(PQgetvalue(res, i, 0)) == which && strcmp(PQgetvalue(res, i, 3), name) == 0) {
            if (type)
                *type = PQgetvalue(res, i, 4);
            return 1;
        }
    }
    return 0;
}

static int relation_row(const PGresult *res, int which)
{
    for (int i = 0; i < PQntuples(res); i++)
        if (atoi(PQgetvalue(res, i, 0)) == which)
            return i;
    return -1;
}

/* Columns of rel, ckpt and inbox (NULL: none) as the server sees them now. */
static int read_columns(pg_handle_t *h, const char *rel_sql, const char *ckpt_sql,
                        const char *inbox_sql, PGresult **res, outbox_diag_t *d)
{
    int rc = outbox_pg_connected(h, d);
    if (rc != OUTBOX_OK)
        return rc;
    const char *vals[3] = {rel_sql, ckpt_sql, inbox_sql};
    return outbox_pg_exec_on(h->conn, DETECT_SQL, 3, vals, NULL, NULL, 0, res, d,
                             "reading the table's columns");
}

/* 1 when every column of specs is in relation which of res. */
static int has_columns(const PGresult *res, int which, const col_spec_t *specs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!find_column(res, which, specs[i].name, NULL))
            return 0;
    return 1;
}

/* Which of the claim's indexes the table has (with the check, below). */
static int read_claim_indexes(pg_handle_t *h, outbox_diag_t *d);

int outbox_pg_detect(pg_handle_t *h, int strict, outbox_diag_t *d)
{
    PGresult *res = NULL;
    int rc = read_columns(h, h->rel_sql, h->ckpt_sql, h->inbox_sql, &res, d);
    if (rc != OUTBOX_OK)
        return rc;
    int row = relation_row(res, 1);
    if (strict && row < 0) {
        PQclear(res);
        return outbox_pg_fail(d, OUTBOX_EMISSING, "table \"%s\" not found%s%s", h->rel.table,
                              h->rel.schema[0] ? " in schema " : "", h->rel.schema);
    }
    for (size_t i = 0; strict && required_columns[i]; i++) {
        if (!find_column(res, 1, required_columns[i], NULL)) {
            rc = outbox_pg_fail(d, OUTBOX_ESCHEMA, "column %s missing from \"%s\"",
                                required_columns[i], h->shown);
            PQclear(res);
            return rc;
        }
    }
    h->has_hlc = find_column(res, 1, "hlc", NULL);
    h->has_traceparent = find_column(res, 1, "traceparent", NULL);
    int ck = relation_row(res, 2);
    h->has_ckpt = find_column(res, 2, "node_key", NULL) && find_column(res, 2, "hlc", NULL);
    if (ck >= 0 && !h->has_ckpt)
        outbox_pg_host->log(OUTBOX_LOG_WARN, PG_NAME,
                            "checkpoint table \"%s\" lacks node_key or hlc; checkpoints are off",
                            h->ckpt.table);
    /* The unique key is not looked for here: accept names it as its
     * conflict target, so a table without it fails loudly, never records
     * an event twice. */
    h->has_inbox = has_columns(res, 3, inbox_cols, N_INBOX_COLS);
    if (relation_row(res, 3) >= 0 && !h->has_inbox)
        outbox_pg_host->log(OUTBOX_LOG_WARN, PG_NAME,
                            "inbox table \"%s\" lacks consumer, event_id or received_at; the inbox "
                            "is off",
                            h->inbox.table);
    if (row >= 0)
        channel_name(PQgetvalue(res, row, 1), PQgetvalue(res, row, 2), h->channel);
    else
        channel_name(h->rel.schema[0] ? h->rel.schema : "public", h->rel.table, h->channel);
    PQclear(res);
    return read_claim_indexes(h, d);
}

/* ----------------------------------------------------------------- DDL */

typedef struct ddl_target {
    outbox_kit_relname_t rel;
    outbox_kit_relname_t ckpt;
    outbox_kit_relname_t inbox;
    uint32_t flags;
} ddl_target_t;

static int target_parse(const outbox_schema_opts_t *opts, const pg_handle_t *h, ddl_target_t *t,
                        outbox_diag_t *d)
{
    memset(t, 0, sizeof *t);
    const char *relation = opts && opts->relation ? opts->relation : NULL;
    const char *ckpt = opts && opts->checkpoint_relation ? opts->checkpoint_relation : NULL;
    const char *inbox = opts && OUTBOX_STRUCT_HAS(outbox_schema_opts_t, opts, inbox_relation)
                            ? opts->inbox_relation
                            : NULL;
    t->flags = opts ? opts->flags : 0;
    int rc = OUTBOX_OK;
    if (relation || !h)
        rc = outbox_pg_relname(relation ? relation : "outbox", &t->rel, d);
    else
        t->rel = h->rel; /* no relation in opts: the handle's own */
    if (rc == OUTBOX_OK)
        rc = outbox_pg_relname_beside(ckpt, &t->rel, PG_CKPT_TABLE, &t->ckpt, d);
    if (rc == OUTBOX_OK)
        rc = outbox_pg_relname_beside(inbox, &t->rel, PG_INBOX_TABLE, &t->inbox, d);
    return rc;
}

static void ddl_table(const ddl_target_t *t, outbox_kit_buf_t *b)
{
    outbox_kit_buf_puts(b, "CREATE TABLE IF NOT EXISTS ");
    outbox_kit_buf_relname(b, &t->rel, '"');
    outbox_kit_buf_puts(b, " (\n");
    for (size_t i = 0; i < N_OUTBOX_COLS; i++)
        outbox_kit_buf_printf(b, "    %-15s %s,\n", outbox_cols[i].name, outbox_cols[i].decl);
    outbox_kit_buf_puts(b, "    UNIQUE (outbox_route, event_id)\n);\n");
}

static void ddl_add_columns(const ddl_target_t *t, outbox_kit_buf_t *b)
{
    outbox_kit_buf_puts(b, "-- Tables made before these columns existed gain them; on a new table "
                       "this does nothing.\nALTER TABLE ");
    outbox_kit_buf_relname(b, &t->rel, '"');
    for (size_t i = FIRST_MIGRATED_COL; i < N_OUTBOX_COLS; i++)
        outbox_kit_buf_printf(b, "%s\n    ADD COLUMN IF NOT EXISTS %s %s", i > FIRST_MIGRATED_COL ? "," : "",
                          outbox_cols[i].name, outbox_cols[i].decl);
    if (t->flags & OUTBOX_SCHEMA_TRACEPARENT)
        outbox_kit_buf_printf(b, ",\n    -- W3C trace context, forwarded as a header\n"
                             "    ADD COLUMN IF NOT EXISTS %s %s",
                          traceparent_col.name, traceparent_col.decl);
    if (t->flags & OUTBOX_SCHEMA_HLC)
        outbox_kit_buf_printf(b, ",\n    -- causal order: physical_ms << 16 | logical (SPEC 6)\n"
                             "    ADD COLUMN IF NOT EXISTS %s %s",
                          hlc_col.name, hlc_col.decl);
    outbox_kit_buf_puts(b, ";\n");
}

static void ddl_indexes(const ddl_target_t *t, outbox_kit_buf_t *b)
{
    for (size_t i = 0; i < N_OUTBOX_IDX; i++) {
        const idx_spec_t *x = &outbox_idx[i];
        if (x->hlc && !(t->flags & OUTBOX_SCHEMA_HLC))
            continue;
        char name[64];
        index_name(t->rel.table, x->suffix, name);
        outbox_kit_buf_printf(b, "-- %s\nCREATE INDEX IF NOT EXISTS ", x->why);
        outbox_kit_buf_ident(b, name, '"');
        outbox_kit_buf_puts(b, " ON ");
        outbox_kit_buf_relname(b, &t->rel, '"');
        outbox_kit_buf_printf(b, " (%s)%s%s;\n", x->cols, x->where ? "\n    WHERE " : "",
                          x->where ? x->where : "");
    }
}

/* A companion table's schema, when it is not the outbox table's (which
 * ddl_all makes). */
static void ddl_schema_of(const ddl_target_t *t, const outbox_kit_relname_t *r,
                          outbox_kit_buf_t *b)
{
    if (r->schema[0] && strcmp(r->schema, t->rel.schema) != 0) {
        outbox_kit_buf_puts(b, "CREATE SCHEMA IF NOT EXISTS ");
        outbox_kit_buf_ident(b, r->schema, '"');
        outbox_kit_buf_puts(b, ";\n");
    }
}

static void ddl_checkpoint(const ddl_target_t *t, outbox_kit_buf_t *b)
{
    outbox_kit_buf_puts(b, "-- The node-global clock high-water mark (SPEC 6).\n");
    ddl_schema_of(t, &t->ckpt, b);
    outbox_kit_buf_puts(b, "CREATE TABLE IF NOT EXISTS ");
    outbox_kit_buf_relname(b, &t->ckpt, '"');
    outbox_kit_buf_puts(b, " (node_key TEXT NOT NULL, hlc BIGINT NOT NULL, PRIMARY KEY (node_key));\n");
}

/* The purge's index: records by age, whatever their consumer. A purge
 * usually covers every consumer, and (consumer, received_at) would make
 * that read the whole index; one consumer's purge reads the old records
 * of all of them instead, which are few where purges run regularly.
 * Stats read the whole table either way. */
static const idx_spec_t inbox_received_idx = {
    "received_idx", "received_at", NULL, {NULL}, NULL, 0,
    "records by age, for the purge",
    "purging old records reads the whole inbox", 0,
};

static void ddl_inbox(const ddl_target_t *t, outbox_kit_buf_t *b)
{
    outbox_kit_buf_puts(b, "-- The inbox: the events each consumer has handled, recorded in the "
                           "consumer's own\n-- transaction so that a redelivered event is "
                           "recognised.\n");
    ddl_schema_of(t, &t->inbox, b);
    outbox_kit_buf_puts(b, "CREATE TABLE IF NOT EXISTS ");
    outbox_kit_buf_relname(b, &t->inbox, '"');
    outbox_kit_buf_puts(b, " (\n");
    for (size_t i = 0; i < N_INBOX_COLS; i++)
        outbox_kit_buf_printf(b, "    %-11s %s,\n", inbox_cols[i].name, inbox_cols[i].decl);
    outbox_kit_buf_puts(b, "    PRIMARY KEY (consumer, event_id)\n);\n");
    char name[64];
    index_name(t->inbox.table, inbox_received_idx.suffix, name);
    outbox_kit_buf_printf(b, "-- %s\nCREATE INDEX IF NOT EXISTS ", inbox_received_idx.why);
    outbox_kit_buf_ident(b, name, '"');
    outbox_kit_buf_puts(b, " ON ");
    outbox_kit_buf_relname(b, &t->inbox, '"');
    outbox_kit_buf_printf(b, " (%s);\n", inbox_received_idx.cols);
}

static void ddl_all(const ddl_target_t *t, outbox_kit_buf_t *b)
{
    outbox_kit_buf_puts(b, "-- liboutbox outbox schema for PostgreSQL. Idempotent: run it again "
                       "to add what is missing.\n-- On a large live table, create the indexes "
                       "by hand with CREATE INDEX CONCURRENTLY first.\n");
    if (t->rel.schema[0]) {
        outbox_kit_buf_puts(b, "CREATE SCHEMA IF NOT EXISTS ");
        outbox_kit_buf_ident(b, t->rel.schema, '"');
        outbox_kit_buf_puts(b, ";\n");
    }
    ddl_table(t, b);
    ddl_add_columns(t, b);
    ddl_indexes(t, b);
    if (t->flags & OUTBOX_SCHEMA_CHECKPOINT)
        ddl_checkpoint(t, b);
    if (t->flags & OUTBOX_SCHEMA_INBOX)
        ddl_inbox(t, b);
}

int outbox_pg_schema_ddl(const outbox_schema_opts_t *opts, char **out, outbox_diag_t *d)
{
    if (!out)
        return outbox_pg_fail(d, OUTBOX_EINVAL, "no output pointer given");
    *out = NULL;
    ddl_target_t t;
    int rc = target_parse(opts, NULL, &t, d);
    if (rc != OUTBOX_OK)
        return rc;
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_pg_host);
    ddl_all(&t, &b);
    *out = outbox_kit_buf_steal(&b);
    return *out ? OUTBOX_OK : outbox_pg_nomem(d);
}

/* ------------------------------------------------------- apply and drop */

/* Runs the script that build writes for opts as one transaction: all of
 * it or, on any error, none. */
static int run_script(pg_handle_t *h, const outbox_schema_opts_t *opts,
                      void (*build)(const ddl_target_t *t, outbox_kit_buf_t *b), const char *what,
                      outbox_diag_t *d)
{
    int rc = outbox_pg_no_open_tx(h, what, d);
    if (rc != OUTBOX_OK)
        return rc;
    ddl_target_t t;
    rc = target_parse(opts, h, &t, d);
    if (rc != OUTBOX_OK)
        return rc;
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_pg_host);
    /* Quiet the NOTICEs of IF [NOT] EXISTS for this transaction only. */
    outbox_kit_buf_puts(&b, "BEGIN;\nSET LOCAL client_min_messages = warning;\n");
    build(&t, &b);
    outbox_kit_buf_puts(&b, "\nCOMMIT;");
    rc = b.failed ? outbox_pg_nomem(d) : outbox_pg_connected(h, d);
    if (rc == OUTBOX_OK) {
        rc = outbox_pg_simple(h->conn, b.data, d, what);
        /* An error skips the rest of the script, COMMIT included. */
        if (PQstatus(h->conn) == CONNECTION_OK && PQtransactionStatus(h->conn) != PQTRANS_IDLE)
            PQclear(PQexec(h->conn, "ROLLBACK"));
    }
    outbox_kit_buf_free(&b);
    return rc;
}

static void ddl_drop(const ddl_target_t *t, outbox_kit_buf_t *b)
{
    outbox_kit_buf_puts(b, "DROP TABLE IF EXISTS ");
    outbox_kit_buf_relname(b, &t->rel, '"');
    outbox_kit_buf_puts(b, ";\n");
    if (t->flags & OUTBOX_SCHEMA_CHECKPOINT) {
        outbox_kit_buf_puts(b, "DROP TABLE IF EXISTS ");
        outbox_kit_buf_relname(b, &t->ckpt, '"');
        outbox_kit_buf_puts(b, ";\n");
    }
    if (t->flags & OUTBOX_SCHEMA_INBOX) {
        outbox_kit_buf_puts(b, "DROP TABLE IF EXISTS ");
        outbox_kit_buf_relname(b, &t->inbox, '"');
        outbox_kit_buf_puts(b, ";\n");
    }
}

int outbox_pg_schema_apply(pg_handle_t *h, const outbox_schema_opts_t *opts, outbox_diag_t *d)
{
    return run_script(h, opts, ddl_all, "schema apply", d);
}

int outbox_pg_schema_drop(pg_handle_t *h, const outbox_schema_opts_t *opts, outbox_diag_t *d)
{
    return run_script(h, opts, ddl_drop, "schema drop", d);
}

/* --------------------------------------------------------------- check */

typedef struct checker {
    outbox_schema_report_fn report;
    void *ctx;
    size_t problems;
    /* Put before each problem: "" for the outbox table, whose problems
     * need no name, "<table>: " for the inbox, where event_id would
     * otherwise read as the outbox's column. */
    char where[176];
} checker_t;

static void problem(checker_t *c, const char *fmt, ...) OUTBOX_PRINTF(2, 3);

static void problem(checker_t *c, const char *fmt, ...)
{
    char msg[OUTBOX_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    size_t at = (size_t)snprintf(msg, sizeof msg, "%s", c->where);
    vsnprintf(msg + at, sizeof msg - at, fmt, ap);
    va_end(ap);
    c->problems++;
    if (c->report)
        c->report(c->ctx, msg);
}

static void check_column(checker_t *c, const PGresult *cols, int which, const col_spec_t *spec)
{
    const char *type = NULL;
    if (!find_column(cols, which, spec->name, &type)) {
        problem(c, "missing column %s", spec->name);
        return;
    }
    if (strcmp(type, spec->type) == 0)
        return;
    /* character varying(n) is as good as text. */
    if (spec->alt && strncmp(type, spec->alt, strlen(spec->alt)) == 0)
        return;
    problem(c, "column %s has type %s, expected %s", spec->name, type, spec->type);
}

/* Every valid index of a table: unique flag, squeezed predicate ("" when
 * none), key columns joined by ", " (expressions show as ""). */
#define INDEX_SQL                                                                            \
    "SELECT i.indisunique, coalesce(pg_get_expr(i.indpred, i.indrelid), ''), "              \
    "array_to_string(ARRAY(SELECT coalesce(a.attname, '') FROM unnest(i.indkey::int2[]) "   \
    "WITH ORDINALITY AS k(attnum, ord) LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = " \
    "i.indrelid AND a.attnum = k.attnum WHERE k.ord <= i.indnkeyatts ORDER BY k.ord), ', ') " \
    "FROM pg_catalog.pg_index i WHERE i.indrelid = to_regclass($1::text) AND i.indisvalid"

/* Lower case without blanks, parentheses or ::text casts, so that equal
 * predicates compare equal however pg_get_expr spaced them. */
static void squeeze(const char *in, char *out, size_t size)
{
    size_t w = 0;
    for (const char *p = in; *p && w + 1 < size; p++) {
        if (strncmp(p, "::text", 6) == 0) {
            p += 5;
            continue;
        }
        if (*p == ' ' || *p == '(' || *p == ')' || *p == '\n' || *p == '\t')
            continue;
        out[w++] = (char)tolower((unsigned char)*p);
    }
    out[w] = '\0';
}

/* 1 when cols are the leading key columns of the index's list. */
static int leads_with(const char *index_cols, const char *cols)
{
    size_t n = strlen(cols);
    return strncmp(index_cols, cols, n) == 0 && (index_cols[n] == '\0' || index_cols[n] == ',');
}

static int serves(const PGresult *idx, const idx_spec_t *x)
{
    for (int i = 0; i < PQntuples(idx); i++) {
        const char *pred = PQgetvalue(idx, i, 1);
        const char *cols = PQgetvalue(idx, i, 2);
        if (!*pred) {
            if (leads_with(cols, x->full_cols ? x->full_cols : x->cols))
                return 1;
            continue;
        }
        char sq[256];
        squeeze(pred, sq, sizeof sq);
        for (size_t k = 0; x->preds[k]; k++)
            if (strcmp(sq, x->preds[k]) == 0 && leads_with(cols, x->cols))
                return 1;
    }
    return 0;
}

/* A unique index on exactly this set of columns, in any order: what
 * PRIMARY KEY or an ON CONFLICT target needs. */
static int has_unique(const PGresult *idx, const char *const *set)
{
    size_t n = 0;
    while (set[n])
        n++;
    for (int i = 0; i < PQntuples(idx); i++) {
        if (strcmp(PQgetvalue(idx, i, 0), "t") != 0 || *PQgetvalue(idx, i, 1))
            continue;
        const char *cols = PQgetvalue(idx, i, 2);
        size_t found = 0, count = 1;
        for (const char *p = cols; *p; p++)
            count += *p == ',';
        for (size_t j = 0; j < n; j++) {
            size_t len = strlen(set[j]);
            for (const char *p = cols; p && *p;) {
                if (strncmp(p, set[j], len) == 0 && (p[len] == ',' || p[len] == '\0')) {
                    found++;
                    break;
                }
                p = strchr(p, ',');
                if (p)
                    p += 2;
            }
        }
        if (found == n && count == n)
            return 1;
    }
    return 0;
}

static void check_unique(checker_t *c, const PGresult *idx, const char *const *set,
                         const char *shown)
{
    if (has_unique(idx, set))
        return;
    problem(c, "missing unique index on (%s%s%s)", shown, set[1] ? ", " : "", set[1] ? set[1] : "");
}

static int read_indexes(pg_handle_t *h, const outbox_kit_relname_t *rel, PGresult **res,
                        outbox_diag_t *d)
{
    outbox_kit_buf_t name;
    outbox_kit_buf_init(&name, outbox_pg_host);
    outbox_kit_buf_relname(&name, rel, '"');
    if (name.failed) {
        outbox_kit_buf_free(&name);
        return outbox_pg_nomem(d);
    }
    const char *vals[1] = {name.data};
    int rc = outbox_pg_exec_on(h->conn, INDEX_SQL, 1, vals, NULL, NULL, 0, res, d,
                               "reading the table's indexes");
    outbox_kit_buf_free(&name);
    return rc;
}

static int read_claim_indexes(pg_handle_t *h, outbox_diag_t *d)
{
    PGresult *idx = NULL;
    int rc = read_indexes(h, &h->rel, &idx, d);
    if (rc != OUTBOX_OK)
        return rc;
    h->claim_idx = 0;
    for (size_t i = 0; i < N_OUTBOX_IDX; i++)
        if (outbox_idx[i].claim_bit && serves(idx, &outbox_idx[i]))
            h->claim_idx |= outbox_idx[i].claim_bit;
    PQclear(idx);
    return OUTBOX_OK;
}

static int check_outbox(pg_handle_t *h, const ddl_target_t *t, const PGresult *cols,
                        checker_t *c, outbox_diag_t *d)
{
    PGresult *idx = NULL;
    int rc = read_indexes(h, &t->rel, &idx, d);
    if (rc != OUTBOX_OK)
        return rc;
    for (size_t i = 0; i < N_OUTBOX_COLS; i++)
        check_column(c, cols, 1, &outbox_cols[i]);
    if (t->flags & OUTBOX_SCHEMA_TRACEPARENT)
        check_column(c, cols, 1, &traceparent_col);
    if (t->flags & OUTBOX_SCHEMA_HLC)
        check_column(c, cols, 1, &hlc_col);

    static const char *const pk[] = {"id", NULL};
    static const char *const dedupe[] = {"outbox_route", "event_id", NULL};
    check_unique(c, idx, pk, "id");
    check_unique(c, idx, dedupe, "outbox_route");
    for (size_t i = 0; i < N_OUTBOX_IDX; i++) {
        const idx_spec_t *x = &outbox_idx[i];
        if ((x->hlc && !(t->flags & OUTBOX_SCHEMA_HLC)) || serves(idx, x))
            continue;
        if (x->where && x->problem)
            problem(c, "missing index on (%s) WHERE %s: %s", x->cols, x->where, x->problem);
        else
            problem(c, "missing index on (%s)", x->cols);
    }
    PQclear(idx);
    return OUTBOX_OK;
}

static int check_checkpoint(pg_handle_t *h, const ddl_target_t *t, const PGresult *cols,
                            checker_t *c, outbox_diag_t *d)
{
    char shown[160];
    outbox_kit_relname_show(&t->ckpt, shown, sizeof shown);
    if (relation_row(cols, 2) < 0) {
        problem(c, "missing table %s", shown);
        return OUTBOX_OK;
    }
    for (size_t i = 0; i < sizeof ckpt_cols / sizeof ckpt_cols[0]; i++)
        check_column(c, cols, 2, &ckpt_cols[i]);
    PGresult *idx = NULL;
    int rc = read_indexes(h, &t->ckpt, &idx, d);
    if (rc != OUTBOX_OK)
        return rc;
    static const char *const key[] = {"node_key", NULL};
    check_unique(c, idx, key, "node_key");
    PQclear(idx);
    return OUTBOX_OK;
}

static int check_inbox(pg_handle_t *h, const ddl_target_t *t, const PGresult *cols, checker_t *c,
                       outbox_diag_t *d)
{
    char shown[160];
    outbox_kit_relname_show(&t->inbox, shown, sizeof shown);
    if (relation_row(cols, 3) < 0) {
        problem(c, "missing table %s", shown);
        return OUTBOX_OK;
    }
    snprintf(c->where, sizeof c->where, "%s: ", shown);
    for (size_t i = 0; i < N_INBOX_COLS; i++)
        check_column(c, cols, 3, &inbox_cols[i]);
    PGresult *idx = NULL;
    int rc = read_indexes(h, &t->inbox, &idx, d);
    if (rc == OUTBOX_OK) {
        static const char *const key[] = {"consumer", "event_id", NULL};
        check_unique(c, idx, key, "consumer");
        if (!serves(idx, &inbox_received_idx))
            problem(c, "missing index on (%s): %s", inbox_received_idx.cols,
                    inbox_received_idx.problem);
        PQclear(idx);
    }
    c->where[0] = '\0';
    return rc;
}

int outbox_pg_schema_check(void *handle, const outbox_schema_opts_t *opts,
                           outbox_schema_report_fn report, void *ctx, size_t *problems,
                           outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    if (problems)
        *problems = 0;
    ddl_target_t t;
    int rc = target_parse(opts, h, &t, d);
    if (rc != OUTBOX_OK)
        return rc;
    outbox_kit_buf_t rel, ck, in;
    outbox_kit_buf_init(&rel, outbox_pg_host);
    outbox_kit_buf_init(&ck, outbox_pg_host);
    outbox_kit_buf_init(&in, outbox_pg_host);
    outbox_kit_buf_relname(&rel, &t.rel, '"');
    outbox_kit_buf_relname(&ck, &t.ckpt, '"');
    outbox_kit_buf_relname(&in, &t.inbox, '"');
    PGresult *cols = NULL;
    if (rel.failed || ck.failed || in.failed)
        rc = outbox_pg_nomem(d);
    else
        rc = read_columns(h, rel.data, ck.data, in.data, &cols, d);
    outbox_kit_buf_free(&rel);
    outbox_kit_buf_free(&ck);
    outbox_kit_buf_free(&in);
    checker_t c = {report, ctx, 0, ""};
    if (rc == OUTBOX_OK) {
        if (relation_row(cols, 1) < 0) {
            char shown[160];
            outbox_kit_relname_show(&t.rel, shown, sizeof shown);
            problem(&c, "missing table %s", shown);
        } else {
            rc = check_outbox(h, &t, cols, &c, d);
        }
    }
    if (rc == OUTBOX_OK && (t.flags & OUTBOX_SCHEMA_CHECKPOINT))
        rc = check_checkpoint(h, &t, cols, &c, d);
    if (rc == OUTBOX_OK && (t.flags & OUTBOX_SCHEMA_INBOX))
        rc = check_inbox(h, &t, cols, &c, d);
    PQclear(cols);
    if (problems)
        *problems = c.problems;
    return rc;
}
