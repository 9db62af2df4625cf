/* SQLite store driver, floor 6: its benchmark ceiling (outbox/ceiling.h),
 * compiled with the driver's sources into outbox-bench only.
 *
 * The ceiling's claim and mark are the driver's own: a handle opened by the
 * driver (its PRAGMAs, busy handler and the indexes it names), the fence,
 * claim and settle statements of sqlite_rows.c in the relay transactions of
 * sqlite_conn.c. What it leaves out is what the relay adds: copying the
 * claimed rows, building messages, publishing. tests/unit/test_ceiling.c
 * checks that a step runs the statements a claim and a settle run.
 *
 * Beside them, the bench's own bookkeeping: the relations it creates are
 * recorded in outbox_bench_relations, and an existing table it did not
 * create is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox/ceiling.h"
#include "sqlite_int.h"

/* The descriptor sqlite.c defines when built with
 * -DOUTBOX_DRIVER_STATIC=sqlite_ceiling. */
const outbox_driver_t *outbox_driver_entry_sqlite_ceiling(void);

/* The bench's connection: a schema-only handle of the driver's. */
typedef struct ceil_db {
    char *uri;
    outbox_store_t *store;
    sq_handle_t *h;
} ceil_db_t;

static int fail_db(sqlite3 *db, const char *what, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s: %s", what, db ? sqlite3_errmsg(db) : "out of memory");
    return OUTBOX_CEILING_FAIL;
}

/* Opens uri through the driver this ceiling was built with (registered by
 * the bench), checking that it was: only then is the handle an sq_handle_t. */
static int open_store(const char *uri, const char *relation, uint32_t flags, outbox_store_t **s,
                      sq_handle_t **h, char *err, size_t errlen)
{
    void *handle = NULL;
    int rc = outbox_ceiling_store_open(outbox_driver_entry_sqlite_ceiling(), SQ_NAME, uri, relation, flags, s,
                                       &handle, err, errlen);
    *h = handle;
    return rc;
}

static void ceil_close(void *db)
{
    ceil_db_t *c = db;
    if (!c)
        return;
    outbox_store_close(c->store);
    free(c->uri);
    free(c);
}

static int ceil_open(const char *uri, void **out, char *err, size_t errlen)
{
    *out = NULL;
    ceil_db_t *c = calloc(1, sizeof *c);
    if (!c || !(c->uri = strdup(uri))) {
        free(c);
        snprintf(err, errlen, "out of memory");
        return OUTBOX_CEILING_FAIL;
    }
    int rc = open_store(uri, "outbox_bench_relations", OUTBOX_OPEN_SCHEMA_ONLY, &c->store, &c->h,
                        err, errlen);
    if (rc == 0 && sqlite3_exec(c->h->db,
                                "CREATE TABLE IF NOT EXISTS outbox_bench_relations "
                                "(relation TEXT NOT NULL PRIMARY KEY)",
                                NULL, NULL, NULL) != SQLITE_OK)
        rc = fail_db(c->h->db, "creating outbox_bench_relations", err, errlen);
    if (rc != 0) {
        ceil_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* ------------------------------------------------------ the relations */

/* "schema"."table" or "table"; relation is valid (outbox_relation_valid). */
static void rel_sql(const char *relation, char *out, size_t size)
{
    const char *dot = strchr(relation, '.');
    if (dot)
        snprintf(out, size, "\"%.*s\".\"%s\"", (int)(dot - relation), relation, dot + 1);
    else
        snprintf(out, size, "\"%s\"", relation);
}

/* Runs sql with arg bound as ?1 (with split, arg is a relation: its table
 * as ?1, its schema as ?2), and reads the first column of its row, 0 when
 * it returns none. */
static int query_int(sqlite3 *db, const char *sql, const char *arg, int split, int64_t *v,
                     const char *what, char *err, size_t errlen)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return fail_db(db, what, err, errlen);
    const char *dot = split ? strchr(arg, '.') : NULL;
    if (dot) {
        sqlite3_bind_text(st, 1, dot + 1, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, arg, (int)(dot - arg), SQLITE_STATIC);
    } else {
        sqlite3_bind_text(st, 1, arg, -1, SQLITE_STATIC);
    }
    int rc = sqlite3_step(st);
    *v = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        rc = fail_db(db, what, err, errlen);
    else
        rc = 0;
    sqlite3_finalize(st);
    return rc;
}

static int exec_rel(sqlite3 *db, const char *fmt, const char *relation, const char *what,
                    char *err, size_t errlen)
{
    char rel[300], sql[700];
    rel_sql(relation, rel, sizeof rel);
    snprintf(sql, sizeof sql, fmt, rel);
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
        return fail_db(db, what, err, errlen);
    return 0;
}

static int set_mark(sqlite3 *db, const char *relation, int on, char *err, size_t errlen)
{
    int64_t unused;
    return query_int(db,
                     on ? "INSERT OR IGNORE INTO outbox_bench_relations (relation) VALUES (?1)"
                        : "DELETE FROM outbox_bench_relations WHERE relation = ?1",
                     relation, 0, &unused, "writing outbox_bench_relations", err, errlen);
}

static int marked(sqlite3 *db, const char *relation, int64_t *ours, char *err, size_t errlen)
{
    return query_int(db, "SELECT count(*) FROM outbox_bench_relations WHERE relation = ?1",
                     relation, 0, ours, "reading outbox_bench_relations", err, errlen);
}

static int ceil_claim_relation(void *db, const char *relation, char *err, size_t errlen)
{
    sqlite3 *sq = ((ceil_db_t *)db)->h->db;
    int64_t exists = 0, ours = 0;
    int rc = query_int(sq, "SELECT count(*) FROM pragma_table_info(?1, ?2)", relation, 1, &exists,
                       "reading the schema", err, errlen);
    if (rc == 0)
        rc = marked(sq, relation, &ours, err, errlen);
    if (rc != 0)
        return rc;
    if (exists && !ours) {
        snprintf(err, errlen,
                 "table %s exists in %s and was not created by outbox-bench; choose another "
                 "--relation or database",
                 relation, sqlite3_db_filename(sq, "main"));
        return OUTBOX_CEILING_USAGE;
    }
    if (exists)
        rc = exec_rel(sq, "DROP TABLE IF EXISTS %s", relation, "dropping an old bench table",
                      err, errlen);
    return rc == 0 ? set_mark(sq, relation, 1, err, errlen) : rc;
}

static int ceil_drop_relation(void *db, const char *relation, char *err, size_t errlen)
{
    sqlite3 *sq = ((ceil_db_t *)db)->h->db;
    int64_t ours = 0;
    int rc = marked(sq, relation, &ours, err, errlen);
    if (rc == 0 && ours)
        rc = exec_rel(sq, "DROP TABLE IF EXISTS %s", relation, "dropping a bench table", err,
                      errlen);
    return rc == 0 ? set_mark(sq, relation, 0, err, errlen) : rc;
}

static int ceil_copy(void *db, const char *from, const char *to, char *err, size_t errlen)
{
    sqlite3 *sq = ((ceil_db_t *)db)->h->db;
    char f[300], t[300], sql[700];
    rel_sql(from, f, sizeof f);
    rel_sql(to, t, sizeof t);
    snprintf(sql, sizeof sql, "INSERT INTO %s SELECT * FROM %s ORDER BY rowid", t, f);
    if (sqlite3_exec(sq, sql, NULL, NULL, NULL) != SQLITE_OK)
        return fail_db(sq, "copying the backlog", err, errlen);
    return 0;
}

static int ceil_count(void *db, const char *relation, const char *status, long *count, char *err,
                      size_t errlen)
{
    sqlite3 *sq = ((ceil_db_t *)db)->h->db;
    char rel[300], sql[700];
    rel_sql(relation, rel, sizeof rel);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s WHERE status = ?1", rel);
    int64_t n = 0;
    int rc = query_int(sq, sql, status, 0, &n, "counting rows", err, errlen);
    *count = rc == 0 ? (long)n : -1;
    return rc;
}

static int ceil_quiesce(void *db, const char *relation, char *err, size_t errlen)
{
    (void)relation;
    sqlite3 *sq = ((ceil_db_t *)db)->h->db;
    if (sqlite3_wal_checkpoint_v2(sq, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL) != SQLITE_OK)
        return fail_db(sq, "checkpointing the WAL", err, errlen);
    return 0;
}

/* ----------------------------------------------------------- workers */

typedef struct ceil_worker {
    outbox_store_t *store;
    sq_handle_t *h;
    outbox_ceiling_job_t job;
    /* The reference's two statements (job.reference), on h->db. */
    sqlite3_stmt *plain_claim, *plain_mark;
    char (*ids)[48];
    long n_ids;
} ceil_worker_t;

/* The reference: the plainest claim and mark there is, with no per-key
 * rule, no lease takeover and no fence. The claim returns the columns a
 * relay reads, as the driver's does. Claim: ?1 route, ?2 limit, ?3 now;
 * mark: ?1 id, ?2 now. */
static int plain_prepare(ceil_worker_t *w, char *err, size_t errlen)
{
    char rel[300], claim[1500], mark[600];
    rel_sql(w->job.relation, rel, sizeof rel);
    snprintf(claim, sizeof claim,
             "UPDATE %s SET status = 'processing', processing_at = ?3, attempts = attempts + 1 "
             "WHERE id IN (SELECT id FROM %s WHERE outbox_route = ?1 AND status = 'pending' "
             "ORDER BY created_at, id LIMIT ?2) RETURNING id, outbox_route, event_id, "
             "event_type, tenant_id, execution_id, correlation_id, causation_id, occurred_at, "
             "payload, created_at, attempts, available_at, ordering_key, last_error",
             rel, rel);
    snprintf(mark, sizeof mark,
             "UPDATE %s SET status = 'published', published_at = ?2 WHERE id = ?1", rel);
    if (sqlite3_prepare_v3(w->h->db, claim, -1, SQLITE_PREPARE_PERSISTENT, &w->plain_claim,
                           NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(w->h->db, mark, -1, SQLITE_PREPARE_PERSISTENT, &w->plain_mark,
                           NULL) != SQLITE_OK)
        return fail_db(w->h->db, "preparing the reference's statements", err, errlen);
    return 0;
}

static void ceil_worker_close(void *worker)
{
    ceil_worker_t *w = worker;
    if (!w)
        return;
    sqlite3_finalize(w->plain_claim);
    sqlite3_finalize(w->plain_mark);
    outbox_store_close(w->store);
    free(w->ids);
    free(w);
}

static int ceil_worker_open(void *db, const outbox_ceiling_job_t *job, void **out, char *err,
                            size_t errlen)
{
    *out = NULL;
    ceil_worker_t *w = calloc(1, sizeof *w);
    if (!w || !(w->ids = calloc((size_t)job->batch, sizeof *w->ids))) {
        free(w);
        snprintf(err, errlen, "out of memory");
        return OUTBOX_CEILING_FAIL;
    }
    w->job = *job;
    int rc = open_store(((ceil_db_t *)db)->uri, job->relation, 0, &w->store, &w->h, err, errlen);
    if (rc == 0 && job->reference)
        rc = plain_prepare(w, err, errlen);
    if (rc != 0) {
        ceil_worker_close(w);
        return rc;
    }
    *out = w;
    return 0;
}

static int diag_fail(const outbox_diag_t *d, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s", d->message);
    return OUTBOX_CEILING_FAIL;
}

/* Steps st to its end, keeping the first column (the id) of each row. */
static int keep_ids(ceil_worker_t *w, sqlite3_stmt *st)
{
    int src;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        const char *id = (const char *)sqlite3_column_text(st, 0);
        if (id && w->n_ids < w->job.batch)
            snprintf(w->ids[w->n_ids++], sizeof w->ids[0], "%s", id);
    }
    sqlite3_reset(st);
    return src;
}

/* Commits when rc is OUTBOX_OK, else rolls back; the outcome. */
static int end_tx(sq_handle_t *h, int rc, outbox_diag_t *d)
{
    if (rc == OUTBOX_OK)
        return outbox_sqlite_tx_commit(h, d);
    outbox_sqlite_tx_abort(h);
    return rc;
}

/* The driver's claim: one relay transaction with its fence and claim
 * statement (outbox_sqlite_claim without the copy of the rows). */
static int driver_claim(ceil_worker_t *w, int64_t *stamp, outbox_diag_t *d)
{
    int64_t now = outbox_sqlite_host->now_us();
    outbox_claim_req_t req = {.struct_size = sizeof req, .route = w->job.route,
                              .limit = (size_t)w->job.batch, .lease_us = w->job.lease_us};
    int rc = outbox_sqlite_tx_begin_relay(w->h, d);
    if (rc != OUTBOX_OK)
        return rc;
    sqlite3_stmt *st = NULL;
    rc = outbox_sqlite_fence_stamp(w->h, w->job.route, now, stamp, d);
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_claim_stmt(w->h, &req, now, *stamp, &st, d);
    if (rc == OUTBOX_OK && keep_ids(w, st) != SQLITE_DONE)
        rc = outbox_sqlite_dbfail(d, w->h->db, sqlite3_errcode(w->h->db), "claiming");
    return end_tx(w->h, rc, d);
}

/* The driver's settle of every claimed id as published: one relay
 * transaction of fenced updates (outbox_sqlite_settle). */
static int driver_mark(ceil_worker_t *w, int64_t stamp, long *applied, outbox_diag_t *d)
{
    int64_t now = outbox_sqlite_host->now_us();
    int rc = outbox_sqlite_tx_begin_relay(w->h, d);
    for (long i = 0; i < w->n_ids && rc == OUTBOX_OK; i++) {
        outbox_settle_item_t it = {.id = w->ids[i], .kind = OUTBOX_SETTLE_PUBLISHED};
        sqlite3_stmt *st = NULL;
        rc = outbox_sqlite_settle_stmt(w->h, stamp, now, &it, &st, d);
        if (rc == OUTBOX_OK)
            rc = outbox_sqlite_run(w->h, st, d, "settling");
        if (rc == OUTBOX_OK)
            *applied += sqlite3_changes(w->h->db) > 0;
    }
    if (rc == OUTBOX_OK)
        return outbox_sqlite_tx_commit(w->h, d);
    outbox_sqlite_tx_abort(w->h);
    return rc;
}

static int plain_step(ceil_worker_t *w, long *applied, outbox_diag_t *d)
{
    int64_t now = outbox_sqlite_host->now_us();
    int rc = outbox_sqlite_tx_begin_relay(w->h, d);
    if (rc == OUTBOX_OK) {
        sqlite3_reset(w->plain_claim);
        sqlite3_bind_text(w->plain_claim, 1, w->job.route, -1, SQLITE_STATIC);
        sqlite3_bind_int64(w->plain_claim, 2, w->job.batch);
        sqlite3_bind_int64(w->plain_claim, 3, now);
        if (keep_ids(w, w->plain_claim) != SQLITE_DONE)
            rc = outbox_sqlite_dbfail(d, w->h->db, sqlite3_errcode(w->h->db), "claiming");
        rc = end_tx(w->h, rc, d);
    }
    if (rc != OUTBOX_OK || w->n_ids == 0)
        return rc;
    rc = outbox_sqlite_tx_begin_relay(w->h, d);
    for (long i = 0; i < w->n_ids && rc == OUTBOX_OK; i++) {
        sqlite3_reset(w->plain_mark);
        sqlite3_bind_text(w->plain_mark, 1, w->ids[i], -1, SQLITE_STATIC);
        sqlite3_bind_int64(w->plain_mark, 2, now);
        rc = outbox_sqlite_run(w->h, w->plain_mark, d, "marking");
        if (rc == OUTBOX_OK)
            *applied += sqlite3_changes(w->h->db) > 0;
    }
    return end_tx(w->h, rc, d);
}

static int ceil_worker_step(void *worker, long *published, char *err, size_t errlen)
{
    ceil_worker_t *w = worker;
    outbox_diag_t d = {0};
    *published = 0;
    w->n_ids = 0;
    int rc;
    if (w->job.reference) {
        rc = plain_step(w, published, &d);
    } else {
        int64_t stamp = 0;
        rc = driver_claim(w, &stamp, &d);
        if (rc == OUTBOX_OK && w->n_ids > 0)
            rc = driver_mark(w, stamp, published, &d);
    }
    return rc == OUTBOX_OK ? 0 : diag_fail(&d, err, errlen);
}

const outbox_store_ceiling_t outbox_ceiling_sqlite = {
    .struct_size = sizeof(outbox_store_ceiling_t),
    .name = SQ_NAME,
    .driver = outbox_driver_entry_sqlite_ceiling,
    .in_process = 1,
    .has_reference = 1,
    .open = ceil_open,
    .close = ceil_close,
    .claim_relation = ceil_claim_relation,
    .drop_relation = ceil_drop_relation,
    .copy = ceil_copy,
    .count = ceil_count,
    .quiesce = ceil_quiesce,
    .worker_open = ceil_worker_open,
    .worker_step = ceil_worker_step,
    .worker_close = ceil_worker_close,
};
