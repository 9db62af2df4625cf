/* SQLite store driver, floor 4: the canonical schema, applying it,
 * dropping it, and checking a live table against it (which it reads
 * through sqlite_catalog.c).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "sqlite_int.h"

typedef struct col_spec {
    const char *name;
    const char *type; /* expected type affinity: TEXT or INTEGER */
    const char *decl;
    int addable;      /* ALTER TABLE ADD COLUMN can create it on an old table */
} col_spec_t;

static const col_spec_t outbox_cols[] = {
    {"id", "TEXT", "TEXT NOT NULL PRIMARY KEY", 0},
    {"outbox_route", "TEXT", "TEXT NOT NULL", 0},
    {"event_id", "TEXT", "TEXT NOT NULL", 0},
    {"event_type", "TEXT", "TEXT NOT NULL", 0},
    {"tenant_id", "TEXT", "TEXT", 0},
    {"execution_id", "TEXT", "TEXT", 0},
    {"correlation_id", "TEXT", "TEXT", 0},
    {"causation_id", "TEXT", "TEXT", 0},
    {"occurred_at", "INTEGER", "INTEGER NOT NULL", 0},
    {"payload", "TEXT", "TEXT NOT NULL", 0},
    {"status", "TEXT", "TEXT NOT NULL", 0},
    {"created_at", "INTEGER", "INTEGER NOT NULL", 0},
    {"published_at", "INTEGER", "INTEGER", 0},
    {"processing_at", "INTEGER", "INTEGER", 0},
    {"last_error", "TEXT", "TEXT", 0},
    {"attempts", "INTEGER", "INTEGER NOT NULL DEFAULT 0", 1},
    {"available_at", "INTEGER", "INTEGER", 1},
    {"ordering_key", "TEXT", "TEXT", 1},
};
#define N_OUTBOX_COLS (sizeof outbox_cols / sizeof outbox_cols[0])

static const col_spec_t traceparent_col = {"traceparent", "TEXT", "TEXT", 1};
static const col_spec_t hlc_col = {"hlc", "INTEGER", "INTEGER", 1};

static const col_spec_t ckpt_cols[] = {
    {"node_key", "TEXT", "TEXT NOT NULL PRIMARY KEY", 0},
    {"hlc", "INTEGER", "INTEGER NOT NULL", 0},
};

/* The inbox: one row per event a consumer handled. */
static const col_spec_t inbox_cols[] = {
    {"consumer", "TEXT", "TEXT NOT NULL", 0},
    {"event_id", "TEXT", "TEXT NOT NULL", 0},
    {"received_at", "INTEGER", "INTEGER NOT NULL", 0},
};

/* The indexes of the canonical table and why each is there. */
typedef struct idx_spec {
    const char *suffix;
    const char *const cols[7];
    int hlc; /* only with OUTBOX_SCHEMA_HLC */
} idx_spec_t;

static const idx_spec_t outbox_idx[] = {
    /* The SPEC's claim index: route + status + ripeness. */
    {"claim_idx", {"outbox_route", "status", "available_at", "created_at", NULL}, 0},
    /* Walks pending rows already in claim order, so a claim reads its batch
     * off the front instead of sorting the whole backlog. */
    {"order_idx", {"outbox_route", "status", "created_at", "id", NULL}, 0},
    /* Per-key FIFO: finds a key's blocking rows (future pending, leased
     * processing) directly instead of walking the key's backlog. */
    {"key_idx", {"outbox_route", "ordering_key", "status", "available_at", NULL}, 0},
    /* Expired leases, and the newest fence of a route. */
    {"processing_idx", {"outbox_route", "status", "processing_at", NULL}, 0},
    /* The ordered index's twin for hlc claim order. */
    {"hlc_order_idx", {"outbox_route", "status", "hlc", "created_at", "id", NULL}, 1},
};
#define N_OUTBOX_IDX (sizeof outbox_idx / sizeof outbox_idx[0])

/* --------------------------------------------------------------------- DDL */

typedef struct ddl_target {
    outbox_kit_relname_t rel;
    outbox_kit_relname_t ckpt;
    outbox_kit_relname_t inbox;
    uint32_t flags;
} ddl_target_t;

static int target_parse(const outbox_schema_opts_t *opts, const sq_handle_t *h, ddl_target_t *t,
                        outbox_diag_t *d)
{
    memset(t, 0, sizeof *t);
    const char *relation = opts && opts->relation ? opts->relation : NULL;
    const char *ckpt = opts && opts->checkpoint_relation ? opts->checkpoint_relation : NULL;
    t->flags = opts ? opts->flags : 0;
    int rc = OUTBOX_OK;
    if (relation || !h)
        rc = outbox_sqlite_rel_parse(relation ? relation : "outbox", &t->rel, d);
    else
        t->rel = h->rel; /* no relation in opts: the handle's own */
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_rel_checkpoint(ckpt, &t->rel, &t->ckpt, d);
    /* The inbox: opts' (the host sets it with OUTBOX_SCHEMA_INBOX), else
     * the handle's when opts names no relation, else beside it. */
    const char *inbox = opts && OUTBOX_STRUCT_HAS(outbox_schema_opts_t, opts, inbox_relation)
                            ? opts->inbox_relation
                            : NULL;
    if (rc == OUTBOX_OK && !inbox && !relation && h)
        t->inbox = h->inbox;
    else if (rc == OUTBOX_OK)
        rc = outbox_sqlite_rel_inbox(inbox, &t->rel, &t->inbox, d);
    return rc;
}

static void ddl_table(const ddl_target_t *t, outbox_kit_buf_t *b)
{
    outbox_kit_buf_puts(b, "CREATE TABLE IF NOT EXISTS ");
    outbox_kit_buf_relname(b, &t->rel, '"');
    outbox_kit_buf_puts(b, " (\n");
    for (size_t i = 0; i < N_OUTBOX_COLS; i++)
        outbox_kit_buf_printf(b, "    %-14s %s,\n", outbox_cols[i].name, outbox_cols[i].decl);
    if (t->flags & OUTBOX_SCHEMA_TRACEPARENT)
        outbox_kit_buf_printf(b, "    %-14s %s,\n", traceparent_col.name, traceparent_col.decl);
    if (t->flags & OUTBOX_SCHEMA_HLC)
        outbox_kit_buf_printf(b, "    %-14s %s,\n", hlc_col.name, hlc_col.decl);
    outbox_kit_buf_puts(b, "    UNIQUE (outbox_route, event_id)\n);\n");
}

/* CREATE INDEX IF NOT EXISTS table_suffix ON table (cols); SQLite
 * qualifies the index name, never the table it is on. */
static void ddl_index(const outbox_kit_relname_t *rel, const char *suffix, const char *const *cols,
                      outbox_kit_buf_t *b)
{
    char name[256];
    snprintf(name, sizeof name, "%s_%s", rel->table, suffix);
    outbox_kit_buf_puts(b, "CREATE INDEX IF NOT EXISTS ");
    if (rel->schema[0]) {
        outbox_kit_buf_ident(b, rel->schema, '"');
        outbox_kit_buf_putc(b, '.');
    }
    outbox_kit_buf_ident(b, name, '"');
    outbox_kit_buf_puts(b, " ON ");
    outbox_kit_buf_ident(b, rel->table, '"');
    outbox_kit_buf_puts(b, " (");
    for (size_t j = 0; cols[j]; j++)
        outbox_kit_buf_printf(b, "%s%s", j ? ", " : "", cols[j]);
    outbox_kit_buf_puts(b, ");\n");
}

static void ddl_indexes(const ddl_target_t *t, outbox_kit_buf_t *b)
{
    for (size_t i = 0; i < N_OUTBOX_IDX; i++) {
        const idx_spec_t *x = &outbox_idx[i];
        if (!x->hlc || (t->flags & OUTBOX_SCHEMA_HLC))
            ddl_index(&t->rel, x->suffix, x->cols, b);
    }
}

static void ddl_checkpoint(const ddl_target_t *t, outbox_kit_buf_t *b)
{
    outbox_kit_buf_puts(b, "CREATE TABLE IF NOT EXISTS ");
    outbox_kit_buf_relname(b, &t->ckpt, '"');
    outbox_kit_buf_puts(b, " (\n    node_key TEXT NOT NULL PRIMARY KEY,\n"
                       "    hlc      INTEGER NOT NULL -- physical_ms << 16 | logical\n);\n");
}

static void ddl_inbox(const ddl_target_t *t, outbox_kit_buf_t *b)
{
    outbox_kit_buf_puts(b, "-- The inbox: the events each consumer handled, recorded in its own\n"
                           "-- transaction; received_at in microseconds since the Unix epoch.\n");
    outbox_kit_buf_puts(b, "CREATE TABLE IF NOT EXISTS ");
    outbox_kit_buf_relname(b, &t->inbox, '"');
    outbox_kit_buf_puts(b, " (\n");
    for (size_t i = 0; i < sizeof inbox_cols / sizeof inbox_cols[0]; i++)
        outbox_kit_buf_printf(b, "    %-11s %s,\n", inbox_cols[i].name, inbox_cols[i].decl);
    outbox_kit_buf_puts(b, "    PRIMARY KEY (consumer, event_id)\n);\n");
    static const char *const by_age[] = {"received_at", NULL};
    ddl_index(&t->inbox, "received_idx", by_age, b);
}

static void ddl_alter_hint(const ddl_target_t *t, const col_spec_t *c, outbox_kit_buf_t *b)
{
    outbox_kit_buf_puts(b, "--   ALTER TABLE ");
    outbox_kit_buf_relname(b, &t->rel, '"');
    outbox_kit_buf_printf(b, " ADD COLUMN %s %s;\n", c->name, c->decl);
}

static void ddl_all(const ddl_target_t *t, outbox_kit_buf_t *b)
{
    outbox_kit_buf_puts(b, "-- liboutbox outbox schema for SQLite: UUIDs as TEXT, timestamps as "
                       "INTEGER microseconds\n-- since the Unix epoch, payload as TEXT "
                       "holding JSON. Use it in WAL mode.\n");
    ddl_table(t, b);
    if (t->flags & (OUTBOX_SCHEMA_HLC | OUTBOX_SCHEMA_TRACEPARENT)) {
        outbox_kit_buf_puts(b, "-- On a table created without them, add the optional columns "
                           "first (schema apply does):\n");
        if (t->flags & OUTBOX_SCHEMA_TRACEPARENT)
            ddl_alter_hint(t, &traceparent_col, b);
        if (t->flags & OUTBOX_SCHEMA_HLC)
            ddl_alter_hint(t, &hlc_col, b);
    }
    ddl_indexes(t, b);
    if (t->flags & OUTBOX_SCHEMA_CHECKPOINT)
        ddl_checkpoint(t, b);
    if (t->flags & OUTBOX_SCHEMA_INBOX)
        ddl_inbox(t, b);
}

int outbox_sqlite_schema_ddl(const outbox_schema_opts_t *opts, char **out, outbox_diag_t *d)
{
    if (!out)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL, "no output pointer given");
    *out = NULL;
    ddl_target_t t;
    int rc = target_parse(opts, NULL, &t, d);
    if (rc != OUTBOX_OK)
        return rc;
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_sqlite_host);
    ddl_all(&t, &b);
    if (!(*out = outbox_kit_buf_steal(&b)))
        return outbox_sqlite_nomem(d);
    return OUTBOX_OK;
}

/* ------------------------------------------------------------------- apply */

/* Runs the DDL built in b (one statement or several) and frees b. */
static int exec_built(sqlite3 *db, outbox_kit_buf_t *b, const char *what, outbox_diag_t *d)
{
    int rc = OUTBOX_OK;
    if (b->failed) {
        rc = outbox_sqlite_nomem(d);
    } else {
        char *err = NULL;
        int src = sqlite3_exec(db, b->data, NULL, NULL, &err);
        if (src != SQLITE_OK)
            rc = outbox_sqlite_msgfail(d, src, what, err);
        sqlite3_free(err);
    }
    outbox_kit_buf_free(b);
    return rc;
}

/* ALTER TABLE ADD COLUMN for what an older table lacks. SQLite has no
 * ADD COLUMN IF NOT EXISTS, hence the look first. */
static int add_missing_columns(sq_handle_t *h, const ddl_target_t *t, outbox_diag_t *d)
{
    sq_columns_t cols = {0};
    int rc = outbox_sqlite_columns(h->db, &t->rel, &cols, d);
    if (rc != OUTBOX_OK)
        return rc;
    const col_spec_t *want[N_OUTBOX_COLS + 2];
    size_t n = 0;
    for (size_t i = 0; i < N_OUTBOX_COLS; i++)
        want[n++] = &outbox_cols[i];
    if (t->flags & OUTBOX_SCHEMA_TRACEPARENT)
        want[n++] = &traceparent_col;
    if (t->flags & OUTBOX_SCHEMA_HLC)
        want[n++] = &hlc_col;
    for (size_t i = 0; i < n && rc == OUTBOX_OK; i++) {
        if (outbox_sqlite_column_find(&cols, want[i]->name))
            continue;
        if (!want[i]->addable) {
            rc = outbox_sqlite_fail(d, OUTBOX_ESCHEMA,
                                    "column %s missing from \"%s\" and schema apply cannot add it",
                                    want[i]->name, t->rel.table);
            break;
        }
        outbox_kit_buf_t b;
        outbox_kit_buf_init(&b, outbox_sqlite_host);
        outbox_kit_buf_puts(&b, "ALTER TABLE ");
        outbox_kit_buf_relname(&b, &t->rel, '"');
        outbox_kit_buf_printf(&b, " ADD COLUMN %s %s", want[i]->name, want[i]->decl);
        rc = exec_built(h->db, &b, "adding a column", d);
    }
    outbox_sqlite_columns_free(&cols);
    return rc;
}

typedef int (*ddl_body_fn)(sq_handle_t *h, const ddl_target_t *t, outbox_diag_t *d);

/* Runs body on the target of opts in one write transaction, committed when
 * body succeeds and rolled back otherwise, so a failed apply or drop
 * leaves nothing half-done. Refused inside the handle's own open
 * transaction, and for a schema that is not attached. */
static int ddl_run(sq_handle_t *h, const outbox_schema_opts_t *opts, const char *what,
                   ddl_body_fn body, outbox_diag_t *d)
{
    ddl_target_t t;
    int rc = outbox_sqlite_no_open_tx(h, what, d);
    if (rc == OUTBOX_OK)
        rc = target_parse(opts, h, &t, d);
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_require_attached(h->db, &t.rel, d);
    if (rc == OUTBOX_OK && (t.flags & OUTBOX_SCHEMA_CHECKPOINT))
        rc = outbox_sqlite_require_attached(h->db, &t.ckpt, d);
    if (rc == OUTBOX_OK && (t.flags & OUTBOX_SCHEMA_INBOX))
        rc = outbox_sqlite_require_attached(h->db, &t.inbox, d);
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_tx_begin(h, d);
    if (rc != OUTBOX_OK)
        return rc;
    rc = body(h, &t, d);
    if (rc == OUTBOX_OK)
        return outbox_sqlite_tx_commit(h, d);
    outbox_sqlite_tx_abort(h);
    return rc;
}

static int apply_body(sq_handle_t *h, const ddl_target_t *t, outbox_diag_t *d)
{
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_sqlite_host);
    ddl_table(t, &b);
    int rc = exec_built(h->db, &b, "creating the outbox table", d);
    if (rc == OUTBOX_OK)
        rc = add_missing_columns(h, t, d);
    if (rc == OUTBOX_OK) {
        ddl_indexes(t, &b);
        rc = exec_built(h->db, &b, "creating the outbox indexes", d);
    }
    if (rc == OUTBOX_OK && (t->flags & OUTBOX_SCHEMA_CHECKPOINT)) {
        ddl_checkpoint(t, &b);
        rc = exec_built(h->db, &b, "creating the checkpoint table", d);
    }
    if (rc == OUTBOX_OK && (t->flags & OUTBOX_SCHEMA_INBOX)) {
        ddl_inbox(t, &b);
        rc = exec_built(h->db, &b, "creating the inbox table", d);
    }
    return rc;
}

/* Dropping the table drops its indexes with it. */
static int drop_body(sq_handle_t *h, const ddl_target_t *t, outbox_diag_t *d)
{
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_sqlite_host);
    outbox_kit_buf_puts(&b, "DROP TABLE IF EXISTS ");
    outbox_kit_buf_relname(&b, &t->rel, '"');
    if (t->flags & OUTBOX_SCHEMA_CHECKPOINT) {
        outbox_kit_buf_puts(&b, "; DROP TABLE IF EXISTS ");
        outbox_kit_buf_relname(&b, &t->ckpt, '"');
    }
    if (t->flags & OUTBOX_SCHEMA_INBOX) {
        outbox_kit_buf_puts(&b, "; DROP TABLE IF EXISTS ");
        outbox_kit_buf_relname(&b, &t->inbox, '"');
    }
    return exec_built(h->db, &b, "dropping the outbox schema", d);
}

int outbox_sqlite_schema_apply(void *handle, const outbox_schema_opts_t *opts, outbox_diag_t *d)
{
    return ddl_run(handle, opts, "schema apply", apply_body, d);
}

int outbox_sqlite_schema_drop(void *handle, const outbox_schema_opts_t *opts, outbox_diag_t *d)
{
    return ddl_run(handle, opts, "schema drop", drop_body, d);
}

/* ------------------------------------------------------------------- check */

/* Indexes are checked by the columns they cover, never by name: a table an
 * application created by hand with its own index names is just as good. */

/* A unique index on exactly this set of columns, in any order: what an ON
 * CONFLICT target needs. */
static int has_unique_set(const sq_indexes_t *x, const char *const *cols)
{
    size_t n = 0;
    while (cols[n])
        n++;
    for (size_t i = 0; i < x->n; i++) {
        const sq_index_t *ix = &x->v[i];
        if (!ix->unique || ix->partial || ix->n != n)
            continue;
        size_t found = 0;
        for (size_t j = 0; j < n; j++)
            for (size_t k = 0; k < ix->n; k++)
                if (strcasecmp(ix->cols[k], cols[j]) == 0) {
                    found++;
                    break;
                }
        if (found == n)
            return 1;
    }
    return 0;
}

/* SQLite's type affinity rules (datatype3.html, 3.1), reduced to the two
 * the schema uses. */
static const char *affinity(const char *decl)
{
    char up[64];
    size_t i = 0;
    for (; decl[i] && i + 1 < sizeof up; i++)
        up[i] = (char)((decl[i] >= 'a' && decl[i] <= 'z') ? decl[i] - 32 : decl[i]);
    up[i] = '\0';
    if (strstr(up, "INT"))
        return "INTEGER";
    if (strstr(up, "CHAR") || strstr(up, "CLOB") || strstr(up, "TEXT"))
        return "TEXT";
    return "OTHER";
}

typedef struct checker {
    outbox_schema_report_fn report;
    void *ctx;
    size_t problems;
} checker_t;

static void problem(checker_t *c, const char *fmt, ...) OUTBOX_PRINTF(2, 3);

static void problem(checker_t *c, const char *fmt, ...)
{
    char msg[OUTBOX_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->problems++;
    if (c->report)
        c->report(c->ctx, msg);
}

static void check_column(checker_t *c, const sq_columns_t *cols, const col_spec_t *spec)
{
    const sq_column_t *col = outbox_sqlite_column_find(cols, spec->name);
    if (!col) {
        problem(c, "missing column %s", spec->name);
        return;
    }
    if (strcmp(affinity(col->type), spec->type) != 0)
        problem(c, "column %s has type %s, expected %s", spec->name,
                col->type[0] ? col->type : "(none)", spec->type);
}

static void list_cols(char *out, size_t size, const char *const *cols)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; cols[i] && used < size; i++) {
        int w = snprintf(out + used, size - used, "%s%s", i ? ", " : "", cols[i]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

static void check_index(checker_t *c, const sq_indexes_t *x, const char *const *cols)
{
    if (outbox_sqlite_index_find(x, cols))
        return;
    char list[256];
    list_cols(list, sizeof list, cols);
    problem(c, "missing index on (%s)", list);
}

static void check_unique(checker_t *c, const sq_indexes_t *x, const sq_columns_t *cols,
                         const char *const *set)
{
    /* A rowid table's "INTEGER PRIMARY KEY" has no index; a one-column
     * primary key is unique all the same. */
    if (!set[1]) {
        const sq_column_t *col = outbox_sqlite_column_find(cols, set[0]);
        if (col && col->pk == 1) {
            size_t pks = 0;
            for (size_t i = 0; i < cols->n; i++)
                pks += cols->v[i].pk != 0;
            if (pks == 1)
                return;
        }
    }
    if (has_unique_set(x, set))
        return;
    char list[256];
    list_cols(list, sizeof list, set);
    problem(c, "missing unique index on (%s)", list);
}

static int check_outbox(sq_handle_t *h, const ddl_target_t *t, const char *shown, checker_t *c,
                        outbox_diag_t *d)
{
    sq_columns_t cols = {0};
    sq_indexes_t idx = {0};
    int rc = outbox_sqlite_columns(h->db, &t->rel, &cols, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (cols.n == 0) {
        problem(c, "missing table %s", shown);
        return OUTBOX_OK;
    }
    rc = outbox_sqlite_indexes(h->db, &t->rel, &idx, d);
    if (rc != OUTBOX_OK) {
        outbox_sqlite_columns_free(&cols);
        return rc;
    }
    for (size_t i = 0; i < N_OUTBOX_COLS; i++)
        check_column(c, &cols, &outbox_cols[i]);
    if (t->flags & OUTBOX_SCHEMA_TRACEPARENT)
        check_column(c, &cols, &traceparent_col);
    if (t->flags & OUTBOX_SCHEMA_HLC)
        check_column(c, &cols, &hlc_col);

    static const char *const pk[] = {"id", NULL};
    static const char *const dedupe[] = {"outbox_route", "event_id", NULL};
    check_unique(c, &idx, &cols, pk);
    check_unique(c, &idx, &cols, dedupe);
    for (size_t i = 0; i < N_OUTBOX_IDX; i++)
        if (!outbox_idx[i].hlc || (t->flags & OUTBOX_SCHEMA_HLC))
            check_index(c, &idx, outbox_idx[i].cols);
    outbox_sqlite_indexes_free(&idx);
    outbox_sqlite_columns_free(&cols);
    return OUTBOX_OK;
}

static int check_checkpoint(sq_handle_t *h, const ddl_target_t *t, checker_t *c, outbox_diag_t *d)
{
    int attached = 0;
    int rc = outbox_sqlite_schema_attached(h->db, &t->ckpt, &attached, d);
    if (rc != OUTBOX_OK)
        return rc;
    sq_columns_t cols = {0};
    if (attached && (rc = outbox_sqlite_columns(h->db, &t->ckpt, &cols, d)) != OUTBOX_OK)
        return rc;
    if (cols.n == 0) {
        char shown[2 * OUTBOX_KIT_IDENT_MAX + 2];
        outbox_kit_relname_show(&t->ckpt, shown, sizeof shown);
        problem(c, "missing table %s", shown);
        return OUTBOX_OK;
    }
    sq_indexes_t idx = {0};
    rc = outbox_sqlite_indexes(h->db, &t->ckpt, &idx, d);
    if (rc == OUTBOX_OK) {
        for (size_t i = 0; i < sizeof ckpt_cols / sizeof ckpt_cols[0]; i++)
            check_column(c, &cols, &ckpt_cols[i]);
        static const char *const key[] = {"node_key", NULL};
        check_unique(c, &idx, &cols, key);
        outbox_sqlite_indexes_free(&idx);
    }
    outbox_sqlite_columns_free(&cols);
    return rc;
}

static int check_inbox(sq_handle_t *h, const ddl_target_t *t, checker_t *c, outbox_diag_t *d)
{
    int attached = 0;
    int rc = outbox_sqlite_schema_attached(h->db, &t->inbox, &attached, d);
    if (rc != OUTBOX_OK)
        return rc;
    sq_columns_t cols = {0};
    if (attached && (rc = outbox_sqlite_columns(h->db, &t->inbox, &cols, d)) != OUTBOX_OK)
        return rc;
    char shown[2 * OUTBOX_KIT_IDENT_MAX + 2];
    outbox_kit_relname_show(&t->inbox, shown, sizeof shown);
    if (cols.n == 0) {
        problem(c, "missing table %s", shown);
        return OUTBOX_OK;
    }
    sq_indexes_t idx = {0};
    rc = outbox_sqlite_indexes(h->db, &t->inbox, &idx, d);
    if (rc == OUTBOX_OK) {
        checker_t on = *c;
        for (size_t i = 0; i < sizeof inbox_cols / sizeof inbox_cols[0]; i++) {
            const sq_column_t *col = outbox_sqlite_column_find(&cols, inbox_cols[i].name);
            if (!col)
                problem(&on, "%s: missing column %s", shown, inbox_cols[i].name);
            else if (strcmp(affinity(col->type), inbox_cols[i].type) != 0)
                problem(&on, "%s: column %s has type %s, expected %s", shown, inbox_cols[i].name,
                        col->type[0] ? col->type : "(none)", inbox_cols[i].type);
        }
        static const char *const key[] = {"consumer", "event_id", NULL};
        static const char *const by_age[] = {"received_at", NULL};
        if (!has_unique_set(&idx, key))
            problem(&on, "%s: missing unique index on (consumer, event_id)", shown);
        if (!outbox_sqlite_index_find(&idx, by_age))
            problem(&on, "%s: missing index on (received_at)", shown);
        *c = on;
        outbox_sqlite_indexes_free(&idx);
    }
    outbox_sqlite_columns_free(&cols);
    return rc;
}

int outbox_sqlite_schema_check(void *handle, const outbox_schema_opts_t *opts,
                               outbox_schema_report_fn report, void *ctx, size_t *problems,
                               outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    if (problems)
        *problems = 0;
    ddl_target_t t;
    int rc = target_parse(opts, h, &t, d);
    if (rc != OUTBOX_OK)
        return rc;
    checker_t c = {report, ctx, 0};
    char shown[2 * OUTBOX_KIT_IDENT_MAX + 2];
    outbox_kit_relname_show(&t.rel, shown, sizeof shown);

    int attached = 0;
    rc = outbox_sqlite_schema_attached(h->db, &t.rel, &attached, d);
    if (rc == OUTBOX_OK) {
        if (attached)
            rc = check_outbox(h, &t, shown, &c, d);
        else
            problem(&c, "missing table %s (schema %s is not attached)", shown, t.rel.schema);
    }
    if (rc == OUTBOX_OK && (t.flags & OUTBOX_SCHEMA_CHECKPOINT))
        rc = check_checkpoint(h, &t, &c, d);
    if (rc == OUTBOX_OK && (t.flags & OUTBOX_SCHEMA_INBOX))
        rc = check_inbox(h, &t, &c, d);
    if (problems)
        *problems = c.problems;
    return rc;
}
