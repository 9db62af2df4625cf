/* SQLite store driver: descriptor, connection, transactions and the
 * helpers the other files share.
 *
 * One handle owns one connection and is used by one thread at a time, so
 * the connection is opened with SQLITE_OPEN_NOMUTEX. Several handles on one
 * file claim concurrently: every write runs in BEGIN IMMEDIATE, which takes
 * the database's single write lock up front, and busy_timeout makes a
 * second writer wait for it instead of failing at once.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sqlite_int.h"

/* RETURNING (3.35) is what lets claim update and read in one statement. */
#define SQ_MIN_SQLITE 3035000

#define SQ_BASE_CAPS \
    (OUTBOX_STORE_CAP_TRANSACTIONS | OUTBOX_STORE_CAP_NATIVE_TX | OUTBOX_STORE_CAP_CONCURRENT)

#define SQ_DEFAULT_BUSY_MS 5000

SQ_HIDDEN const outbox_host_t *outbox_sqlite_host;

/* --------------------------------------------------------------- errors */

int outbox_sqlite_fail(outbox_diag_t *d, int code, const char *fmt, ...)
                       {
                       va_list ap;
    va_start(ap, fmt);
    int rc = outbox_sqlite_host->verror(d, code, fmt, ap);
    va_end(ap);
    return rc;
}

int outbox_sqlite_code(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE:
        return OUTBOX_OK;
    /* Another writer holds the lock past busy_timeout, a statement went
     * stale under a schema change, or the disk hiccuped: worth a retry. */
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_SCHEMA:
    case SQLITE_INTERRUPT:
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_PROTOCOL:
        return OUTBOX_ETRANSIENT;
    case SQLITE_NOMEM:
        return OUTBOX_ENOMEM;
    case SQLITE_MISUSE:
    case SQLITE_RANGE:
        return OUTBOX_EINVAL;
    default:
        return OUTBOX_EPERMANENT;
    }
}

int outbox_sqlite_dbfail(outbox_diag_t *d, sqlite3 *db, int rc, const char *what)
{
    const char *msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    int code = outbox_sqlite_code(rc);
    if (code == OUTBOX_OK)
        code = OUTBOX_EPERMANENT;
    return outbox_sqlite_fail(d, code, "%s: %s", what, msg);
}

int outbox_sqlite_nomem(outbox_diag_t *d)
{
    return outbox_sqlite_fail(d, OUTBOX_ENOMEM, "out of memory");
}

/* ------------------------------------------------------------ relations */

/* The host validates relation names already; checking again keeps the
 * driver safe when it is driven directly (tests, third-party hosts). */
int outbox_sqlite_rel_parse(const char *name, outbox_relname_t *out, outbox_diag_t *d)
{
    if (outbox_relname_parse(name, out) == 0)
        return OUTBOX_OK;
    if (!name || !*name)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL, "empty relation name");
    return outbox_sqlite_fail(d, OUTBOX_EINVAL,
                              "invalid relation name \"%s\": expected table or schema.table", name);
}

int outbox_sqlite_rel_checkpoint(const char *name, const outbox_relname_t *base,
                                 outbox_relname_t *out, outbox_diag_t *d)
{
    if (name)
        return outbox_sqlite_rel_parse(name, out, d);
    outbox_relname_beside(base, "hlc_checkpoint", out);
    return OUTBOX_OK;
}

/* ----------------------------------------------------------- statements */

int outbox_sqlite_stmt(sq_handle_t *h, int slot, sq_sql_fn build, sqlite3_stmt **out,
                       outbox_diag_t *d)
{
    *out = NULL;
    sqlite3_stmt *st = h->stmt[slot];
    if (!st) {
        outbox_buf_t b;
        outbox_buf_init(&b, outbox_sqlite_host);
        build(h, &b);
        if (b.failed) {
            outbox_buf_free(&b);
            return outbox_sqlite_nomem(d);
        }
        int rc = sqlite3_prepare_v3(h->db, b.data, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL);
        outbox_buf_free(&b);
        if (rc != SQLITE_OK) {
            sqlite3_finalize(st);
            return outbox_sqlite_dbfail(d, h->db, rc, "preparing a statement");
        }
        h->stmt[slot] = st;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    *out = st;
    return OUTBOX_OK;
}

int outbox_sqlite_run(sq_handle_t *h, sqlite3_stmt *st, outbox_diag_t *d, const char *what)
{
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        ;
    if (rc != SQLITE_DONE) {
        int code = outbox_sqlite_dbfail(d, h->db, rc, what);
        sqlite3_reset(st);
        return code;
    }
    sqlite3_reset(st);
    return OUTBOX_OK;
}

static void sql_begin(const sq_handle_t *h, outbox_buf_t *b)
{
    (void)h;
    outbox_buf_puts(b, "BEGIN IMMEDIATE");
}

static void sql_commit(const sq_handle_t *h, outbox_buf_t *b)
{
    (void)h;
    outbox_buf_puts(b, "COMMIT");
}

static void sql_rollback(const sq_handle_t *h, outbox_buf_t *b)
{
    (void)h;
    outbox_buf_puts(b, "ROLLBACK");
}

int outbox_sqlite_tx_begin(sq_handle_t *h, outbox_diag_t *d)
{
    sqlite3_stmt *st;
    int rc = outbox_sqlite_stmt(h, SQ_BEGIN, sql_begin, &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    return outbox_sqlite_run(h, st, d, "begin");
}

int outbox_sqlite_tx_commit(sq_handle_t *h, outbox_diag_t *d)
{
    sqlite3_stmt *st;
    int rc = outbox_sqlite_stmt(h, SQ_COMMIT, sql_commit, &st, d);
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_run(h, st, d, "commit (the transaction was rolled back)");
    if (rc != OUTBOX_OK)
        outbox_sqlite_tx_abort(h);
    return rc;
}

void outbox_sqlite_tx_abort(sq_handle_t *h)
{
    if (sqlite3_get_autocommit(h->db))
        return; /* nothing open, or SQLite already rolled back on the error */
    sqlite3_stmt *st = h->stmt[SQ_ROLLBACK];
    if (!st && sqlite3_prepare_v3(h->db, "ROLLBACK", -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) !=
                   SQLITE_OK) {
        sqlite3_finalize(st);
        sqlite3_exec(h->db, "ROLLBACK", NULL, NULL, NULL);
        return;
    }
    h->stmt[SQ_ROLLBACK] = st;
    sqlite3_reset(st);
    sqlite3_step(st);
    sqlite3_reset(st);
}

int outbox_sqlite_no_open_tx(sq_handle_t *h, const char *op, outbox_diag_t *d)
{
    if (!sqlite3_get_autocommit(h->db))
        return outbox_sqlite_fail(d, OUTBOX_EINVAL,
                                  "%s runs its own transaction; commit or roll back the open "
                                  "one first",
                                  op);
    return OUTBOX_OK;
}

/* ---------------------------------------------------------- claim arena */

struct sq_chunk {
    sq_chunk_t *next;
    size_t used;
    size_t cap;
    char data[];
};

#define SQ_CHUNK_MIN 16384

const char *outbox_sqlite_arena_str(sq_handle_t *h, const char *s, size_t len, int *failed)
{
    if (!s)
        return NULL;
    sq_chunk_t *c = h->chunks;
    if (!c || c->cap - c->used < len + 1) {
        size_t cap = len + 1 > SQ_CHUNK_MIN ? len + 1 : SQ_CHUNK_MIN;
        c = outbox_sqlite_host->alloc(sizeof *c + cap);
        if (!c) {
            *failed = 1;
            return NULL;
        }
        c->used = 0;
        c->cap = cap;
        c->next = h->chunks;
        h->chunks = c;
    }
    char *p = c->data + c->used;
    memcpy(p, s, len);
    p[len] = '\0';
    c->used += len + 1;
    return p;
}

void outbox_sqlite_rows_reset(sq_handle_t *h)
{
    while (h->chunks) {
        sq_chunk_t *next = h->chunks->next;
        outbox_sqlite_host->free(h->chunks);
        h->chunks = next;
    }
    h->n_rows = 0;
}

/* ------------------------------------------------------------ open/close */

static void sq_close(void *handle)
{
    sq_handle_t *h = handle;
    if (!h)
        return;
    /* Closing with a transaction open would roll it back anyway; doing it
     * first lets tx_abort use the cached statement before it is finalized. */
    if (h->db)
        outbox_sqlite_tx_abort(h);
    for (int i = 0; i < SQ_SLOT_COUNT; i++)
        sqlite3_finalize(h->stmt[i]);
    if (h->db)
        sqlite3_close_v2(h->db);
    outbox_sqlite_rows_reset(h);
    outbox_sqlite_host->free(h->rows);
    outbox_sqlite_host->free(h->insert_sql);
    outbox_sqlite_host->free(h->ckpt_sql);
    outbox_sqlite_drop_index_names(h);
    outbox_sqlite_host->free(h);
}

static int parse_params(const outbox_uri_t *uri, int *busy_ms, outbox_diag_t *d)
{
    static const char *const known[] = {"busy_timeout", NULL};
    *busy_ms = SQ_DEFAULT_BUSY_MS;
    const char *unknown = outbox_uri_unknown(uri, known);
    if (unknown)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL,
                                  "unknown sqlite URI parameter \"%s\" (known: busy_timeout)",
                                  unknown);
    const char *v = outbox_uri_get(uri, "busy_timeout");
    if (!v)
        return OUTBOX_OK;
    char *end = NULL;
    errno = 0;
    long ms = strtol(v, &end, 10);
    if (!*v || *end || errno || ms < 0 || ms > INT_MAX)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL,
                                  "busy_timeout must be milliseconds (0..%d), got \"%s\"", INT_MAX,
                                  v);
    *busy_ms = (int)ms;
    return OUTBOX_OK;
}

static int check_uri(const outbox_uri_t *uri, outbox_diag_t *d)
{
    if (!uri)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL, "no URI given");
    if ((uri->host && *uri->host) || uri->user || uri->password || uri->port)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL,
                                  "sqlite URI \"%s\" has a host part; use sqlite:///abs/path.db "
                                  "or sqlite:relative.db",
                                  uri->raw ? uri->raw : "");
    if (!uri->path || !*uri->path)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL,
                                  "sqlite URI \"%s\" has no database path; use "
                                  "sqlite:///abs/path.db or sqlite:relative.db",
                                  uri->raw ? uri->raw : "");
    return OUTBOX_OK;
}

/* Runs a PRAGMA and returns its first value, or "" when it returns none. */
static int pragma(sq_handle_t *h, const char *sql, char *value, size_t size, outbox_diag_t *d)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(h->db, sql, -1, &st, NULL);
    value[0] = '\0';
    if (rc == SQLITE_OK) {
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            const char *v = (const char *)sqlite3_column_text(st, 0);
            if (v && !value[0])
                snprintf(value, size, "%s", v);
        }
    }
    if (rc != SQLITE_DONE && rc != SQLITE_OK) {
        int code = outbox_sqlite_dbfail(d, h->db, rc, sql);
        sqlite3_finalize(st);
        return code;
    }
    sqlite3_finalize(st);
    return OUTBOX_OK;
}

/* Replaces sqlite3_busy_timeout(), whose sleeps grow to 100 ms: the write
 * lock is held for a claim or a settle, about a millisecond, so a claimer
 * that polls every few hundred microseconds gets it soon after it frees up
 * instead of losing every round to a relay that claims in a tight loop. */
static int busy_wait(void *arg, int count)
{
    sq_handle_t *h = arg;
    int64_t now = outbox_sqlite_host->monotonic_us();
    if (count == 0)
        h->busy_start = now;
    if (now - h->busy_start >= (int64_t)h->busy_ms * 1000)
        return 0;
    long step_us = count < 8 ? 50L << (count / 2) : 1000L;
    struct timespec ts = {0, step_us * 1000L};
    nanosleep(&ts, NULL);
    return 1;
}

static int connect_db(sq_handle_t *h, const char *path, int create, int busy_ms, outbox_diag_t *d)
{
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
    /* Only schema apply/check may create the file: any other open needs an
     * existing outbox table, and creating an empty file for a mistyped path
     * would only turn "no such file" into a less helpful "table not found". */
    if (create)
        flags |= SQLITE_OPEN_CREATE;
    int rc = sqlite3_open_v2(path, &h->db, flags, NULL);
    if (rc != SQLITE_OK) {
        char what[OUTBOX_MESSAGE_MAX / 2];
        snprintf(what, sizeof what, "cannot open database \"%s\"", path);
        return outbox_sqlite_dbfail(d, h->db, rc, what);
    }
    sqlite3_extended_result_codes(h->db, 1);
    h->busy_ms = busy_ms;
    sqlite3_busy_handler(h->db, busy_wait, h);

    char mode[32];
    rc = pragma(h, "PRAGMA journal_mode=WAL", mode, sizeof mode, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (strcmp(mode, "wal") != 0 && strcmp(mode, "memory") != 0)
        outbox_sqlite_host->log(OUTBOX_LOG_WARN, SQ_NAME,
                                "%s: journal_mode is %s, not wal: claims and staging will block "
                                "each other's readers",
                                path, mode);
    /* FULL: with WAL, NORMAL may lose the last commits on power loss, and a
     * lost "published" mark means a duplicate, a lost stage a lost event. */
    return pragma(h, "PRAGMA synchronous=FULL", mode, sizeof mode, d);
}

static int has_required_columns(sq_handle_t *h, const sq_columns_t *cols, outbox_diag_t *d)
{
    for (size_t i = 0; outbox_sqlite_required_columns[i]; i++)
        if (!outbox_sqlite_column_find(cols, outbox_sqlite_required_columns[i]))
            return outbox_sqlite_fail(d, OUTBOX_ESCHEMA, "column %s missing from \"%s\"",
                                      outbox_sqlite_required_columns[i], h->rel.table);
    return OUTBOX_OK;
}

/* Detects the optional columns and the checkpoint table. strict: a missing
 * table or required column is an error (a normal open); otherwise they only
 * leave the capabilities off (schema apply/check). */
static int detect(sq_handle_t *h, int strict, outbox_diag_t *d)
{
    sq_columns_t cols = {0};
    int rc = outbox_sqlite_columns(h->db, &h->rel, &cols, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (strict && cols.n == 0)
        rc = outbox_sqlite_fail(d, OUTBOX_ESCHEMA, "table \"%s\" not found%s%s", h->rel.table,
                                h->rel.schema[0] ? " in schema " : "", h->rel.schema);
    else if (strict)
        rc = has_required_columns(h, &cols, d);
    h->has_hlc = outbox_sqlite_column_find(&cols, "hlc") != NULL;
    h->has_traceparent = outbox_sqlite_column_find(&cols, "traceparent") != NULL;
    int exists = cols.n > 0;
    outbox_sqlite_columns_free(&cols);
    if (rc == OUTBOX_OK && exists)
        rc = outbox_sqlite_pick_indexes(h, d);
    if (rc != OUTBOX_OK)
        return rc;

    int attached = 0;
    h->has_ckpt = 0;
    rc = outbox_sqlite_schema_attached(h->db, &h->ckpt, &attached, d);
    if (rc != OUTBOX_OK || !attached)
        return rc;
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
    return OUTBOX_OK;
}

int outbox_sqlite_refresh(sq_handle_t *h, outbox_diag_t *d)
{
    for (int i = SQ_INSERT; i < SQ_SLOT_COUNT; i++) {
        sqlite3_finalize(h->stmt[i]);
        h->stmt[i] = NULL;
    }
    int rc = detect(h, 0, d);
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_rows_prepare_sql(h, d);
    return rc;
}

static int sq_open(const outbox_store_open_t *params, void **handle, outbox_diag_t *d)
{
    if (!handle)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL, "no handle pointer given");
    *handle = NULL;
    if (!params)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL, "no open parameters given");
    int rc = check_uri(params->uri, d);
    int busy_ms = 0;
    if (rc == OUTBOX_OK)
        rc = parse_params(params->uri, &busy_ms, d);
    if (rc != OUTBOX_OK)
        return rc;

    sq_handle_t *h = outbox_sqlite_host->alloc(sizeof *h);
    if (!h)
        return outbox_sqlite_nomem(d);
    memset(h, 0, sizeof *h);

    int schema_only = (params->flags & OUTBOX_OPEN_SCHEMA_ONLY) != 0;
    rc = outbox_sqlite_rel_parse(params->relation ? params->relation : "outbox", &h->rel, d);
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_rel_checkpoint(params->checkpoint_relation, &h->rel, &h->ckpt, d);
    if (rc == OUTBOX_OK)
        rc = connect_db(h, params->uri->path, schema_only, busy_ms, d);
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_require_attached(h->db, &h->rel, d);
    if (rc == OUTBOX_OK)
        rc = detect(h, !schema_only, d);
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_rows_prepare_sql(h, d);
    if (rc != OUTBOX_OK) {
        sq_close(h);
        return rc;
    }
    *handle = h;
    return OUTBOX_OK;
}

static uint32_t sq_capabilities(void *handle)
{
    const sq_handle_t *h = handle;
    uint32_t caps = SQ_BASE_CAPS;
    if (h && h->has_hlc)
        caps |= OUTBOX_STORE_CAP_HLC;
    if (h && h->has_traceparent)
        caps |= OUTBOX_STORE_CAP_TRACEPARENT;
    if (h && h->has_ckpt)
        caps |= OUTBOX_STORE_CAP_CHECKPOINT;
    return caps;
}

/* Schema apply changes which optional columns exist, so the handle looks
 * again afterwards. */
static int sq_schema_apply(void *handle, const outbox_schema_opts_t *opts, outbox_diag_t *d)
{
    int rc = outbox_sqlite_schema_apply(handle, opts, d);
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_refresh(handle, d);
    return rc;
}

/* --------------------------------------------------------- transactions */

static int sq_begin(void *handle, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    if (!sqlite3_get_autocommit(h->db))
        return outbox_sqlite_fail(d, OUTBOX_EINVAL, "a transaction is already open on this handle");
    return outbox_sqlite_tx_begin(h, d);
}

static int sq_commit(void *handle, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    if (sqlite3_get_autocommit(h->db))
        return outbox_sqlite_fail(d, OUTBOX_EINVAL, "commit: no transaction is open on this handle");
    return outbox_sqlite_tx_commit(h, d);
}

static int sq_rollback(void *handle, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    if (sqlite3_get_autocommit(h->db))
        return OUTBOX_OK;
    sqlite3_stmt *st;
    int rc = outbox_sqlite_stmt(h, SQ_ROLLBACK, sql_rollback, &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    return outbox_sqlite_run(h, st, d, "rollback");
}

/* A second connection to the handle's database, as an application would
 * open one, with a write transaction begun on it. */
static int sq_native_begin(void *handle, void **native_tx, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    if (!native_tx)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL, "no native handle pointer given");
    *native_tx = NULL;
    const char *path = sqlite3_db_filename(h->db, "main");
    if (!path || !*path)
        return outbox_sqlite_fail(d, OUTBOX_ENOTSUP,
                                  "an in-memory or temporary database cannot be opened twice");
    sqlite3 *app = NULL;
    int rc = sqlite3_open_v2(path, &app, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(app, h->busy_ms);
        rc = sqlite3_exec(app, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    }
    if (rc != SQLITE_OK) {
        int code = outbox_sqlite_dbfail(d, app, rc, "opening a native transaction");
        sqlite3_close_v2(app);
        return code;
    }
    *native_tx = app;
    return OUTBOX_OK;
}

static int sq_native_end(void *handle, void *native_tx, int commit, outbox_diag_t *d)
{
    (void)handle;
    sqlite3 *app = native_tx;
    if (!app)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL, "no native handle given");
    int code = OUTBOX_OK;
    if (!sqlite3_get_autocommit(app)) {
        int rc = sqlite3_exec(app, commit ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL);
        if (rc != SQLITE_OK) {
            code = outbox_sqlite_dbfail(d, app, rc,
                                        commit ? "committing the native transaction"
                                               : "rolling back the native transaction");
            sqlite3_exec(app, "ROLLBACK", NULL, NULL, NULL);
        }
    } else if (commit) {
        code = outbox_sqlite_fail(d, OUTBOX_EPERMANENT,
                                  "the native transaction was already rolled back");
    }
    sqlite3_close_v2(app);
    return code;
}

static int sq_schema_drop(void *handle, const outbox_schema_opts_t *opts, outbox_diag_t *d)
{
    int rc = outbox_sqlite_schema_drop(handle, opts, d);
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_refresh(handle, d);
    return rc;
}

/* ----------------------------------------------------------- descriptor */

static int sq_init(const outbox_host_t *host, outbox_diag_t *d)
{
    if (!host || !OUTBOX_STRUCT_HAS(outbox_host_t, host, verror) || !host->alloc ||
        !host->realloc || !host->free || !host->error || !host->log || !host->now_us ||
        !host->monotonic_us || !host->verror) {
        if (d) {
            d->code = OUTBOX_EABI;
            snprintf(d->message, sizeof d->message,
                     "sqlite driver: the host services table is missing or incomplete");
        }
        return OUTBOX_EABI;
    }
    outbox_sqlite_host = host;
    if (sqlite3_libversion_number() < SQ_MIN_SQLITE)
        return outbox_sqlite_fail(d, OUTBOX_ENOTSUP, "sqlite driver needs SQLite 3.35 or later, found %s",
                                  sqlite3_libversion());
    if (!sqlite3_threadsafe())
        return outbox_sqlite_fail(d, OUTBOX_ENOTSUP,
                                  "sqlite driver needs a thread-safe SQLite build (SQLITE_THREADSAFE=0 found)");
    return OUTBOX_OK;
}

static const outbox_store_vtable_t sq_vtable = {
    .struct_size = sizeof(outbox_store_vtable_t),
    .open = sq_open,
    .close = sq_close,
    .capabilities = sq_capabilities,
    .schema_ddl = outbox_sqlite_schema_ddl,
    .schema_apply = sq_schema_apply,
    .schema_check = outbox_sqlite_schema_check,
    .begin = sq_begin,
    .commit = sq_commit,
    .rollback = sq_rollback,
    .stage = outbox_sqlite_stage,
    .claim = outbox_sqlite_claim,
    .settle = outbox_sqlite_settle,
    .checkpoint_advance = outbox_sqlite_checkpoint_advance,
    .checkpoint_recover = outbox_sqlite_checkpoint_recover,
    .wait = NULL,
    .stats = outbox_sqlite_stats,
    .replay = outbox_sqlite_replay,
    .purge = outbox_sqlite_purge,
    .schema_drop = sq_schema_drop,
    .native_begin = sq_native_begin,
    .native_end = sq_native_end,
};

static const char *const sq_schemes[] = {"sqlite", NULL};

static const outbox_driver_t sq_descriptor = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = OUTBOX_ABI_MAJOR,
    .abi_minor = OUTBOX_ABI_MINOR,
    .kind = OUTBOX_DRIVER_STORE,
    .name = "sqlite",
    .version = "0.1.0",
    .schemes = sq_schemes,
    .capabilities = SQ_BASE_CAPS,
    .init = sq_init,
    .store = &sq_vtable,
    .sink = NULL,
};

OUTBOX_DRIVER_ENTRY(sq_descriptor)
