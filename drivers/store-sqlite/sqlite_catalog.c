/* SQLite store driver, floor 3: the catalog, what the live database
 * holds: a table's columns and indexes, attached schemas, and from them
 * the handle's view of its table (optional columns, the indexes the claim
 * names, the checkpoint table). It only reads; the canonical schema and
 * the changes to reach it are sqlite_schema.c's.
 *
 * Indexes are compared by the columns they cover, never by name: a table an
 * application created by hand with its own index names is just as good.
 */
#include <string.h>
#include <strings.h>

#include "sqlite_int.h"

/* ------------------------------------------------------- tables, indexes */

/* Prepares a query of a pragma function that takes (name, schema), with
 * both bound; an unqualified name leaves the schema unbound (NULL), which
 * searches every database. */
static int pragma_query(sqlite3 *db, const char *sql, const char *name, const char *schema,
                        const char *what, sqlite3_stmt **st, outbox_diag_t *d)
{
    int rc = outbox_sqlite_prepare(db, sql, what, st, d);
    if (rc == OUTBOX_OK) {
        sqlite3_bind_text(*st, 1, name, -1, SQLITE_STATIC);
        if (schema[0])
            sqlite3_bind_text(*st, 2, schema, -1, SQLITE_STATIC);
    }
    return rc;
}

static int step_fail(sqlite3 *db, sqlite3_stmt *st, int rc, outbox_diag_t *d, const char *what)
{
    int code = outbox_sqlite_dbfail(d, db, rc, what);
    sqlite3_finalize(st);
    return code;
}

int outbox_sqlite_schema_attached(sqlite3 *db, const outbox_kit_relname_t *rel, int *attached,
                                  outbox_diag_t *d)
{
    *attached = 1;
    if (!rel->schema[0])
        return OUTBOX_OK;
    sqlite3_stmt *st;
    int rc = pragma_query(db, "SELECT 1 FROM pragma_database_list WHERE name = ?1", rel->schema,
                          "", "listing attached databases", &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return step_fail(db, st, rc, d, "listing attached databases");
    *attached = rc == SQLITE_ROW;
    sqlite3_finalize(st);
    return OUTBOX_OK;
}

void outbox_sqlite_columns_free(sq_columns_t *c)
{
    for (size_t i = 0; i < c->n; i++) {
        outbox_sqlite_host->free(c->v[i].name);
        outbox_sqlite_host->free(c->v[i].type);
    }
    outbox_sqlite_host->free(c->v);
    c->v = NULL;
    c->n = 0;
}

int outbox_sqlite_columns(sqlite3 *db, const outbox_kit_relname_t *rel, sq_columns_t *out,
                          outbox_diag_t *d)
{
    out->v = NULL;
    out->n = 0;
    sqlite3_stmt *st;
    int rc = pragma_query(db, "SELECT name, type, pk FROM pragma_table_info(?1, ?2)", rel->table,
                          rel->schema, "reading table columns", &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    size_t cap = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (out->n == cap) {
            size_t ncap = cap ? cap * 2 : 32;
            sq_column_t *v = outbox_sqlite_host->realloc(out->v, ncap * sizeof *v);
            if (!v)
                goto nomem;
            out->v = v;
            cap = ncap;
        }
        const char *name = (const char *)sqlite3_column_text(st, 0);
        const char *type = (const char *)sqlite3_column_text(st, 1);
        sq_column_t *c = &out->v[out->n];
        c->name = outbox_kit_strdup(outbox_sqlite_host, name ? name : "");
        c->type = outbox_kit_strdup(outbox_sqlite_host, type ? type : "");
        c->pk = sqlite3_column_int(st, 2);
        out->n++;
        if (!c->name || !c->type)
            goto nomem;
    }
    if (rc != SQLITE_DONE) {
        outbox_sqlite_columns_free(out);
        return step_fail(db, st, rc, d, "reading table columns");
    }
    sqlite3_finalize(st);
    return OUTBOX_OK;
nomem:
    sqlite3_finalize(st);
    outbox_sqlite_columns_free(out);
    return outbox_sqlite_nomem(d);
}

const sq_column_t *outbox_sqlite_column_find(const sq_columns_t *c, const char *name)
{
    for (size_t i = 0; i < c->n; i++)
        if (strcasecmp(c->v[i].name, name) == 0)
            return &c->v[i];
    return NULL;
}

void outbox_sqlite_indexes_free(sq_indexes_t *x)
{
    for (size_t i = 0; i < x->n; i++) {
        outbox_sqlite_host->free(x->v[i].name);
        for (size_t j = 0; j < x->v[i].n; j++)
            outbox_sqlite_host->free(x->v[i].cols[j]);
    }
    outbox_sqlite_host->free(x->v);
    x->v = NULL;
    x->n = 0;
}

static int index_columns(sqlite3 *db, const char *schema, const char *index, sq_index_t *ix,
                         outbox_diag_t *d)
{
    sqlite3_stmt *st;
    int rc = pragma_query(db, "SELECT name FROM pragma_index_info(?1, ?2) ORDER BY seqno", index,
                          schema, "reading index columns", &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (ix->n == sizeof ix->cols / sizeof ix->cols[0])
            continue;
        /* An expression column has no name; it matches nothing. */
        const char *name = (const char *)sqlite3_column_text(st, 0);
        if (!(ix->cols[ix->n] = outbox_kit_strdup(outbox_sqlite_host, name ? name : ""))) {
            sqlite3_finalize(st);
            return outbox_sqlite_nomem(d);
        }
        ix->n++;
    }
    if (rc != SQLITE_DONE)
        return step_fail(db, st, rc, d, "reading index columns");
    sqlite3_finalize(st);
    return OUTBOX_OK;
}

int outbox_sqlite_indexes(sqlite3 *db, const outbox_kit_relname_t *rel, sq_indexes_t *out,
                          outbox_diag_t *d)
{
    out->v = NULL;
    out->n = 0;
    sqlite3_stmt *st;
    int rc = pragma_query(db, "SELECT name, \"unique\", partial FROM pragma_index_list(?1, ?2)",
                          rel->table, rel->schema, "listing indexes", &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    size_t cap = 0;
    int code = OUTBOX_OK;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (out->n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            sq_index_t *v = outbox_sqlite_host->realloc(out->v, ncap * sizeof *v);
            if (!v) {
                code = outbox_sqlite_nomem(d);
                break;
            }
            out->v = v;
            cap = ncap;
        }
        sq_index_t *ix = &out->v[out->n++];
        memset(ix, 0, sizeof *ix);
        ix->unique = sqlite3_column_int(st, 1);
        ix->partial = sqlite3_column_int(st, 2);
        const char *name = (const char *)sqlite3_column_text(st, 0);
        if (!(ix->name = outbox_kit_strdup(outbox_sqlite_host, name ? name : ""))) {
            code = outbox_sqlite_nomem(d);
            break;
        }
        code = index_columns(db, rel->schema, ix->name, ix, d);
        if (code != OUTBOX_OK)
            break;
    }
    if (code == OUTBOX_OK && rc != SQLITE_DONE) {
        outbox_sqlite_indexes_free(out);
        return step_fail(db, st, rc, d, "listing indexes");
    }
    sqlite3_finalize(st);
    if (code != OUTBOX_OK)
        outbox_sqlite_indexes_free(out);
    return code;
}

const sq_index_t *outbox_sqlite_index_find(const sq_indexes_t *x, const char *const *cols)
{
    size_t n = 0;
    while (cols[n])
        n++;
    for (size_t i = 0; i < x->n; i++) {
        const sq_index_t *ix = &x->v[i];
        if (ix->partial || ix->n < n)
            continue;
        size_t j = 0;
        while (j < n && strcasecmp(ix->cols[j], cols[j]) == 0)
            j++;
        if (j == n)
            return ix;
    }
    return NULL;
}

int outbox_sqlite_require_attached(sqlite3 *db, const outbox_kit_relname_t *rel, outbox_diag_t *d)
{
    int attached = 0;
    int rc = outbox_sqlite_schema_attached(db, rel, &attached, d);
    if (rc == OUTBOX_OK && !attached)
        rc = outbox_sqlite_fail(d, OUTBOX_EINVAL,
                                "schema \"%s\" is not an attached database; an SQLite relation is "
                                "\"table\" or \"main.table\"",
                                rel->schema);
    return rc;
}

/* -------------------------------------------------------- the handle's view */

/* The columns the driver's statements use: an open refuses a table that
 * lacks one. (The canonical schema in sqlite_schema.c has them all, with
 * their types.) */
static const char *const required_columns[] = {
    "id", "outbox_route", "event_id", "event_type", "tenant_id", "execution_id",
    "correlation_id", "causation_id", "occurred_at", "payload", "status", "created_at",
    "published_at", "processing_at", "last_error", "attempts", "available_at", "ordering_key",
    NULL,
};

void outbox_sqlite_drop_index_names(sq_handle_t *h)
{
    outbox_sqlite_host->free(h->idx_order);
    outbox_sqlite_host->free(h->idx_hlc);
    outbox_sqlite_host->free(h->idx_key);
    h->idx_order = h->idx_hlc = h->idx_key = NULL;
}

static int keep_name(const sq_index_t *ix, char **out)
{
    *out = NULL;
    if (ix && !(*out = outbox_kit_strdup(outbox_sqlite_host, ix->name)))
        return 0;
    return 1;
}

/* Statistics from ANALYZE can talk the planner out of these indexes (a
 * table whose ordering_key was all NULL when analyzed makes a key lookup
 * look like a full scan), and then every claim scans the backlog. The claim
 * therefore names them with INDEXED BY. */
static int pick_indexes(sq_handle_t *h, outbox_diag_t *d)
{
    static const char *const order[] = {"outbox_route", "status", "created_at", "id", NULL};
    static const char *const hlc[] = {"outbox_route", "status", "hlc", "created_at", "id", NULL};
    static const char *const key_avail[] = {"outbox_route", "ordering_key", "status",
                                            "available_at", NULL};
    static const char *const key[] = {"outbox_route", "ordering_key", "status", NULL};
    outbox_sqlite_drop_index_names(h);
    sq_indexes_t x;
    int rc = outbox_sqlite_indexes(h->db, &h->rel, &x, d);
    if (rc != OUTBOX_OK)
        return rc;
    const sq_index_t *k = outbox_sqlite_index_find(&x, key_avail);
    if (!k)
        k = outbox_sqlite_index_find(&x, key);
    int ok = keep_name(outbox_sqlite_index_find(&x, order), &h->idx_order) &&
             keep_name(outbox_sqlite_index_find(&x, hlc), &h->idx_hlc) && keep_name(k, &h->idx_key);
    outbox_sqlite_indexes_free(&x);
    if (!ok) {
        outbox_sqlite_drop_index_names(h);
        return outbox_sqlite_nomem(d);
    }
    return OUTBOX_OK;
}

static int has_required_columns(sq_handle_t *h, const sq_columns_t *cols, outbox_diag_t *d)
{
    for (size_t i = 0; required_columns[i]; i++)
        if (!outbox_sqlite_column_find(cols, required_columns[i]))
            return outbox_sqlite_fail(d, OUTBOX_ESCHEMA, "column %s missing from \"%s\"",
                                      required_columns[i], h->rel.table);
    return OUTBOX_OK;
}

/* The inbox table, when it is there with its three columns. */
static int detect_inbox(sq_handle_t *h, outbox_diag_t *d)
{
    int attached = 0;
    h->has_inbox = 0;
    int rc = outbox_sqlite_schema_attached(h->db, &h->inbox, &attached, d);
    if (rc != OUTBOX_OK || !attached)
        return rc;
    sq_columns_t cols = {0};
    rc = outbox_sqlite_columns(h->db, &h->inbox, &cols, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (cols.n > 0) {
        h->has_inbox = outbox_sqlite_column_find(&cols, "consumer") &&
                       outbox_sqlite_column_find(&cols, "event_id") &&
                       outbox_sqlite_column_find(&cols, "received_at");
        if (!h->has_inbox)
            outbox_sqlite_host->log(OUTBOX_LOG_WARN, SQ_NAME,
                                    "inbox table \"%s\" lacks consumer, event_id or received_at; "
                                    "the inbox is off",
                                    h->inbox.table);
    }
    outbox_sqlite_columns_free(&cols);
    return OUTBOX_OK;
}

int outbox_sqlite_detect(sq_handle_t *h, int strict, outbox_diag_t *d)
{
    sq_columns_t cols = {0};
    int rc = outbox_sqlite_columns(h->db, &h->rel, &cols, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (strict && cols.n == 0)
        rc = outbox_sqlite_fail(d, OUTBOX_EMISSING, "table \"%s\" not found%s%s", h->rel.table,
                                h->rel.schema[0] ? " in schema " : "", h->rel.schema);
    else if (strict)
        rc = has_required_columns(h, &cols, d);
    h->has_hlc = outbox_sqlite_column_find(&cols, "hlc") != NULL;
    h->has_traceparent = outbox_sqlite_column_find(&cols, "traceparent") != NULL;
    int exists = cols.n > 0;
    outbox_sqlite_columns_free(&cols);
    if (rc == OUTBOX_OK && exists)
        rc = pick_indexes(h, d);
    if (rc != OUTBOX_OK)
        return rc;

    int attached = 0;
    h->has_ckpt = 0;
    rc = outbox_sqlite_schema_attached(h->db, &h->ckpt, &attached, d);
    if (rc != OUTBOX_OK || !attached)
        return rc != OUTBOX_OK ? rc : detect_inbox(h, d);
    rc = outbox_sqlite_columns(h->db, &h->ckpt, &cols, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (cols.n > 0) {
        h->has_ckpt = outbox_sqlite_column_find(&cols, "node_key") &&
                      outbox_sqlite_column_find(&cols, "hlc");
        if (!h->has_ckpt)
            outbox_sqlite_host->log(OUTBOX_LOG_WARN, SQ_NAME,
                                    "checkpoint table \"%s\" lacks node_key or hlc; checkpoints "
                                    "are off",
                                    h->ckpt.table);
    }
    outbox_sqlite_columns_free(&cols);
    return detect_inbox(h, d);
}

/* The application's connection is on the store's file for schema (main
 * when empty). */
int outbox_sqlite_same_database(const sq_handle_t *h, sqlite3 *app, const char *schema,
                                outbox_diag_t *d)
{
    const char *name = schema[0] ? schema : "main";
    const char *ours = sqlite3_db_filename(h->db, name);
    const char *theirs = sqlite3_db_filename(app, name);
    if (ours && theirs && *ours && *theirs && strcmp(ours, theirs) != 0)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL,
                                  "the native sqlite3 connection is on \"%s\", the store on \"%s\"",
                                  theirs, ours);
    return OUTBOX_OK;
}

/* The application's connection for staging or an inbox record: inside a
 * transaction (else each statement would commit on its own), and on the
 * store's file. */
int outbox_sqlite_check_native(const sq_handle_t *h, sqlite3 *app, const char *schema,
                               outbox_diag_t *d)
{
    if (sqlite3_get_autocommit(app))
        return outbox_sqlite_fail(d, OUTBOX_EINVAL,
                                  "the native sqlite3 connection is not inside a transaction "
                                  "(BEGIN first)");
    return outbox_sqlite_same_database(h, app, schema, d);
}
