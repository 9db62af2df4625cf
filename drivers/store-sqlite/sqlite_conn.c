/* SQLite store driver, floor 2: the handle's connection and what runs on
 * it: opening it, the statement cache, transactions, and the arena the
 * claimed rows live in.
 *
 * One handle owns one connection and is used by one thread at a time, so
 * the connection is opened with SQLITE_OPEN_NOMUTEX. Several handles on one
 * file claim concurrently: every write runs in BEGIN IMMEDIATE, which takes
 * the database's single write lock up front, and the busy handler makes a
 * second writer wait for it instead of failing at once.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "sqlite_int.h"

/* ----------------------------------------------------------- connection */

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

/* A database in WAL mode whose -shm file is missing and cannot be made (a
 * directory the user may only read) cannot be read the ordinary way:
 * SQLite needs the shared-memory file even to read. Reading it as
 * immutable needs none, and is sound here only because the user cannot
 * write the file and the handle never writes. */
static int reopen_immutable(sq_handle_t *h, const char *path, outbox_diag_t *d)
{
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_sqlite_host);
    outbox_kit_buf_puts(&b, "file:");
    for (const char *p = path; *p; p++) {
        if (*p == '%' || *p == '?' || *p == '#')
            outbox_kit_buf_printf(&b, "%%%02X", (unsigned char)*p);
        else
            outbox_kit_buf_putc(&b, *p);
    }
    outbox_kit_buf_puts(&b, "?immutable=1");
    if (b.failed) {
        outbox_kit_buf_free(&b);
        return outbox_sqlite_nomem(d);
    }
    sqlite3_close_v2(h->db);
    h->db = NULL;
    int rc = sqlite3_open_v2(b.data, &h->db,
                             SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL);
    outbox_kit_buf_free(&b);
    if (rc != SQLITE_OK) {
        char what[OUTBOX_MESSAGE_MAX / 2];
        snprintf(what, sizeof what, "cannot open database \"%s\" read-only", path);
        return outbox_sqlite_dbfail(d, h->db, rc, what);
    }
    sqlite3_extended_result_codes(h->db, 1);
    outbox_sqlite_host->log(OUTBOX_LOG_INFO, SQ_NAME,
                            "%s: in WAL mode without a -shm file that could be made; read as "
                            "an immutable file",
                            path);
    return OUTBOX_OK;
}

/* Read-only: no journal-mode switch and no other setting that writes; the
 * first read shows whether the file can be read at all. */
static int connect_read_only(sq_handle_t *h, const char *path, outbox_diag_t *d)
{
    char version[32];
    sqlite3_exec(h->db, "PRAGMA query_only=1", NULL, NULL, NULL);
    int rc = pragma(h, "PRAGMA schema_version", version, sizeof version, d);
    if (rc == OUTBOX_OK)
        return OUTBOX_OK;
    /* CANTOPEN, or READONLY (with _DIRECTORY, _CANTINIT, ... by version)
     * for the -shm file it could not make. */
    int code = sqlite3_extended_errcode(h->db) & 0xff;
    if (code != SQLITE_CANTOPEN && code != SQLITE_READONLY)
        return rc;
    d->code = OUTBOX_OK;
    d->message[0] = '\0';
    rc = reopen_immutable(h, path, d);
    if (rc == OUTBOX_OK)
        rc = pragma(h, "PRAGMA schema_version", version, sizeof version, d);
    return rc;
}

int outbox_sqlite_connect(sq_handle_t *h, const char *path, int mode, int busy_ms,
                          outbox_diag_t *d)
{
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
    /* Only schema apply may create the file: any other open needs an
     * existing outbox table, and creating an empty file for a mistyped path
     * would only turn "no such file" into a less helpful "table not found". */
    if (mode == SQ_OPEN_CREATE)
        flags |= SQLITE_OPEN_CREATE;
    else if (mode == SQ_OPEN_READ_ONLY)
        flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX;
    /* SQLite opens whatever the path names: a FIFO blocks the open until a
     * writer comes, which may be never, and a directory gives "disk I/O
     * error" at the first statement. Only a regular file, or nothing yet,
     * can be a database. */
    struct stat st;
    int on_disk = path[0] != '\0' && strcmp(path, ":memory:") != 0;
    if (on_disk && stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return outbox_sqlite_fail(d, OUTBOX_EINVAL,
                                  "cannot open database \"%s\": not a regular file (%s)", path,
                                  S_ISDIR(st.st_mode)    ? "a directory"
                                  : S_ISFIFO(st.st_mode) ? "a FIFO"
                                                         : "a device or socket");
    if (on_disk && mode != SQ_OPEN_CREATE && stat(path, &st) != 0 && errno == ENOENT)
        return outbox_sqlite_fail(d, OUTBOX_EMISSING, "database file %s does not exist", path);
    if (on_disk && mode == SQ_OPEN_CREATE) {
        /* SQLite would say only "unable to open database file". */
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash == dir)
            slash[1] = '\0';
        else if (slash != NULL)
            *slash = '\0';
        else
            snprintf(dir, sizeof dir, ".");
        if (stat(dir, &st) != 0 && errno == ENOENT)
            return outbox_sqlite_fail(d, OUTBOX_ENOTFOUND, "directory %s does not exist", dir);
    }
    int rc = sqlite3_open_v2(path, &h->db, flags, NULL);
    if (rc != SQLITE_OK) {
        char what[OUTBOX_MESSAGE_MAX / 2];
        snprintf(what, sizeof what, "cannot open database \"%s\"", path);
        return outbox_sqlite_dbfail(d, h->db, rc, what);
    }
    sqlite3_extended_result_codes(h->db, 1);
    h->busy_ms = busy_ms;
    sqlite3_busy_handler(h->db, busy_wait, h);
    if (mode == SQ_OPEN_READ_ONLY) {
        rc = connect_read_only(h, path, d);
        if (rc == OUTBOX_OK) /* h->db may be a new connection now */
            sqlite3_busy_handler(h->db, busy_wait, h);
        return rc;
    }

    char mode_name[32];
    rc = pragma(h, "PRAGMA journal_mode=WAL", mode_name, sizeof mode_name, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (strcmp(mode_name, "wal") != 0 && strcmp(mode_name, "memory") != 0)
        outbox_sqlite_host->log(OUTBOX_LOG_WARN, SQ_NAME,
                                "%s: journal_mode is %s, not wal: claims and staging will block "
                                "each other's readers",
                                path, mode_name);
    /* FULL: with WAL, NORMAL may lose the last commits on power loss, and a
     * lost stage would be a lost event. Claims and settles switch to NORMAL
     * (outbox_sqlite_tx_begin_relay). */
    rc = pragma(h, "PRAGMA synchronous=FULL", mode_name, sizeof mode_name, d);
    h->sync_full = 1;
    return rc;
}

void outbox_sqlite_disconnect(sq_handle_t *h)
{
    /* Closing with a transaction open would roll it back anyway; doing it
     * first lets tx_abort use the cached statement before it is finalized. */
    if (h->db)
        outbox_sqlite_tx_abort(h);
    for (int i = 0; i < SQ_SLOT_COUNT; i++) {
        sqlite3_finalize(h->stmt[i]);
        h->stmt[i] = NULL;
    }
    if (h->db)
        sqlite3_close_v2(h->db);
    h->db = NULL;
    outbox_sqlite_arena_free(h);
}

/* ----------------------------------------------------------- statements */

static int prepare_flags(sqlite3 *db, const char *sql, unsigned flags, const char *what,
                         sqlite3_stmt **st, outbox_diag_t *d)
{
    *st = NULL;
    int rc = sqlite3_prepare_v3(db, sql, -1, flags, st, NULL);
    if (rc != SQLITE_OK) {
        int code = outbox_sqlite_dbfail(d, db, rc, what);
        sqlite3_finalize(*st);
        *st = NULL;
        return code;
    }
    return OUTBOX_OK;
}

static int prepare_built(sqlite3 *db, outbox_kit_buf_t *b, unsigned flags, sqlite3_stmt **st,
                         outbox_diag_t *d)
{
    *st = NULL;
    int rc = b->failed ? outbox_sqlite_nomem(d)
                       : prepare_flags(db, b->data, flags, "preparing a statement", st, d);
    outbox_kit_buf_free(b);
    return rc;
}

int outbox_sqlite_prepare(sqlite3 *db, const char *sql, const char *what, sqlite3_stmt **st,
                          outbox_diag_t *d)
{
    return prepare_flags(db, sql, 0, what, st, d);
}

int outbox_sqlite_prepare_built(sqlite3 *db, outbox_kit_buf_t *b, sqlite3_stmt **st, outbox_diag_t *d)
{
    return prepare_built(db, b, 0, st, d);
}

int outbox_sqlite_stmt(sq_handle_t *h, int slot, sq_sql_fn build, sqlite3_stmt **out,
                       outbox_diag_t *d)
{
    *out = NULL;
    sqlite3_stmt *st = h->stmt[slot];
    if (!st) {
        outbox_kit_buf_t b;
        outbox_kit_buf_init(&b, outbox_sqlite_host);
        build(h, &b);
        int rc = prepare_built(h->db, &b, SQLITE_PREPARE_PERSISTENT, &st, d);
        if (rc != OUTBOX_OK)
            return rc;
        h->stmt[slot] = st;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    *out = st;
    return OUTBOX_OK;
}

void outbox_sqlite_forget_statements(sq_handle_t *h)
{
    for (int i = SQ_INSERT; i < SQ_SLOT_COUNT; i++) {
        sqlite3_finalize(h->stmt[i]);
        h->stmt[i] = NULL;
    }
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

/* --------------------------------------------------------- transactions */

static void sql_begin(const sq_handle_t *h, outbox_kit_buf_t *b)
{
    (void)h;
    outbox_kit_buf_puts(b, "BEGIN IMMEDIATE");
}

static void sql_commit(const sq_handle_t *h, outbox_kit_buf_t *b)
{
    (void)h;
    outbox_kit_buf_puts(b, "COMMIT");
}

static void sql_rollback(const sq_handle_t *h, outbox_kit_buf_t *b)
{
    (void)h;
    outbox_kit_buf_puts(b, "ROLLBACK");
}

/* Prepares (on first use) and runs the statement cached in slot. */
static int run_cached(sq_handle_t *h, int slot, sq_sql_fn build, const char *what,
                      outbox_diag_t *d)
{
    sqlite3_stmt *st;
    int rc = outbox_sqlite_stmt(h, slot, build, &st, d);
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_run(h, st, d, what);
    return rc;
}

/* Durability of the connection's next commits. With WAL, synchronous=NORMAL
 * syncs the log only at checkpoints, so a power loss may undo the last
 * commits; FULL syncs it at every commit. Staging, schema and admin writes
 * run FULL: an undone stage is a lost event. Claims and settles run NORMAL:
 * an undone claim leaves its rows pending, an undone settle leaves them in
 * processing until their lease ends, and either way they are delivered
 * again, never lost. The log is sequential, so a FULL commit also makes
 * every NORMAL commit before it durable. Set only outside a transaction,
 * and only when it changes: a relay's connection switches once. */
int outbox_sqlite_sync(sq_handle_t *h, int full, outbox_diag_t *d)
{
    if (h->sync_full == full)
        return OUTBOX_OK;
    int rc = sqlite3_exec(h->db, full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL",
                          NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return outbox_sqlite_dbfail(d, h->db, rc, "setting synchronous");
    h->sync_full = full;
    return OUTBOX_OK;
}

int outbox_sqlite_tx_begin(sq_handle_t *h, outbox_diag_t *d)
{
    int rc = outbox_sqlite_sync(h, 1, d);
    return rc == OUTBOX_OK ? run_cached(h, SQ_BEGIN, sql_begin, "begin", d) : rc;
}

int outbox_sqlite_tx_begin_relay(sq_handle_t *h, outbox_diag_t *d)
{
    int rc = outbox_sqlite_sync(h, 0, d);
    return rc == OUTBOX_OK ? run_cached(h, SQ_BEGIN, sql_begin, "begin", d) : rc;
}

int outbox_sqlite_tx_commit(sq_handle_t *h, outbox_diag_t *d)
{
    int rc = run_cached(h, SQ_COMMIT, sql_commit, "commit (the transaction was rolled back)", d);
    if (rc != OUTBOX_OK)
        outbox_sqlite_tx_abort(h);
    return rc;
}

int outbox_sqlite_tx_rollback(sq_handle_t *h, outbox_diag_t *d)
{
    return run_cached(h, SQ_ROLLBACK, sql_rollback, "rollback", d);
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

/* Rows one purge batch deletes: small enough that a relay waiting for the
 * write lock is not held up for long. */
#define SQ_DELETE_BATCH 1000

int outbox_sqlite_delete_batches(sq_handle_t *h, const char *op, outbox_kit_buf_t *b,
                                 int64_t before, const char *name, uint64_t *count,
                                 outbox_diag_t *d)
{
    int rc = outbox_sqlite_no_open_tx(h, op, d);
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_sync(h, 1, d);
    if (rc != OUTBOX_OK) {
        outbox_kit_buf_free(b);
        return rc;
    }
    outbox_kit_buf_printf(b, " LIMIT %d)", SQ_DELETE_BATCH);
    sqlite3_stmt *st;
    rc = outbox_sqlite_prepare_built(h->db, b, &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    sqlite3_bind_int64(st, 1, before);
    if (name != NULL)
        sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
    for (;;) {
        int src = sqlite3_step(st);
        if (src != SQLITE_DONE) {
            rc = outbox_sqlite_dbfail(d, h->db, src, op);
            break;
        }
        int changed = sqlite3_changes(h->db);
        *count += (uint64_t)changed;
        sqlite3_reset(st);
        if (changed < SQ_DELETE_BATCH)
            break;
    }
    sqlite3_finalize(st);
    return rc;
}

/* ---------------------------------------------------------- claim arena */

struct sq_chunk {
    sq_chunk_t *next;
    size_t used;
    size_t cap;
    char data[];
};

#define SQ_CHUNK_MIN 16384

static const char *arena_str(sq_handle_t *h, const char *s, size_t len, int *failed)
{
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

const char *outbox_sqlite_arena_column(sq_handle_t *h, sqlite3_stmt *st, int i, int *failed)
{
    if (sqlite3_column_type(st, i) == SQLITE_NULL)
        return NULL;
    const char *s = (const char *)sqlite3_column_text(st, i);
    if (!s) {
        *failed = 1; /* out of memory converting to text */
        return NULL;
    }
    return arena_str(h, s, (size_t)sqlite3_column_bytes(st, i), failed);
}

outbox_row_t *outbox_sqlite_arena_row(sq_handle_t *h)
{
    if (h->n_rows == h->cap_rows) {
        size_t cap = h->cap_rows ? h->cap_rows * 2 : 64;
        outbox_row_t *v = outbox_sqlite_host->realloc(h->rows, cap * sizeof *v);
        if (!v)
            return NULL;
        h->rows = v;
        h->cap_rows = cap;
    }
    outbox_row_t *r = &h->rows[h->n_rows];
    memset(r, 0, sizeof *r);
    return r;
}

void outbox_sqlite_arena_reset(sq_handle_t *h)
{
    /* The largest chunk stays, emptied, for the next claim: a relay
     * claiming batches of one size allocates nothing after the first. */
    sq_chunk_t *keep = NULL;
    while (h->chunks) {
        sq_chunk_t *c = h->chunks;
        h->chunks = c->next;
        if (keep == NULL || c->cap > keep->cap) {
            if (keep != NULL)
                outbox_sqlite_host->free(keep);
            keep = c;
        } else {
            outbox_sqlite_host->free(c);
        }
    }
    if (keep != NULL) {
        keep->used = 0;
        keep->next = NULL;
    }
    h->chunks = keep;
    h->n_rows = 0;
}

void outbox_sqlite_arena_free(sq_handle_t *h)
{
    outbox_sqlite_arena_reset(h);
    outbox_sqlite_host->free(h->chunks);
    h->chunks = NULL;
    outbox_sqlite_host->free(h->rows);
    h->rows = NULL;
    h->cap_rows = 0;
}
