/* What the broken SQLite variants share: wrapping the real descriptor, and
 * a plainly written claim whose parts can be switched off one at a time. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "broken.h"

void broken_wrap(outbox_driver_t *desc, outbox_store_vtable_t *vt, const char *name)
{
    const outbox_driver_t *base = outbox_driver_entry_sqlite_base();
    *desc = *base;
    *vt = *base->store;
    desc->name = name;
    desc->schemes = NULL; /* load it by path or name, never for sqlite: URIs */
    desc->store = vt;
}

int broken_prepare(sqlite3 *db, const char *head, const outbox_kit_relname_t *rel, const char *tail,
                   sqlite3_stmt **st, outbox_diag_t *d)
{
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_sqlite_host);
    outbox_kit_buf_puts(&b, head);
    outbox_kit_buf_relname(&b, rel, '"');
    outbox_kit_buf_puts(&b, tail);
    return outbox_sqlite_prepare_built(db, &b, st, d);
}

int broken_inbox_run(sqlite3 *db, const outbox_kit_relname_t *rel, const char *const *parts,
                     const char *consumer, const char *event_id, int *out, outbox_diag_t *d)
{
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_sqlite_host);
    outbox_kit_buf_puts(&b, parts[0]);
    for (size_t i = 1; parts[i] != NULL; i++) {
        outbox_kit_buf_relname(&b, rel, '"');
        outbox_kit_buf_puts(&b, parts[i]);
    }
    sqlite3_stmt *st = NULL;
    int rc = outbox_sqlite_prepare_built(db, &b, &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    int params = sqlite3_bind_parameter_count(st);
    sqlite3_bind_text(st, 1, consumer, -1, SQLITE_STATIC);
    if (params >= 2)
        sqlite3_bind_text(st, 2, event_id, -1, SQLITE_STATIC);
    if (params >= 3)
        sqlite3_bind_int64(st, 3, outbox_sqlite_host->now_us());
    int src = sqlite3_step(st);
    if (src == SQLITE_ROW)
        *out = 1;
    else if (src == SQLITE_DONE)
        *out = sqlite3_stmt_readonly(st) ? 0 : sqlite3_changes(db);
    else
        rc = outbox_sqlite_dbfail(d, db, src, "broken inbox");
    sqlite3_finalize(st);
    return rc;
}

/* "e before o" in claim order. */
static void earlier(outbox_kit_buf_t *b, int hlc)
{
    if (hlc)
        outbox_kit_buf_puts(b, "(e.hlc IS NULL, coalesce(e.hlc, 0), e.created_at, e.id) < "
                           "(o.hlc IS NULL, coalesce(o.hlc, 0), o.created_at, o.id)");
    else
        outbox_kit_buf_puts(b, "(e.created_at, e.id) < (o.created_at, o.id)");
}

/* ?1 route, ?2 now, ?3 now - lease, ?4 limit. */
static void candidates_sql(const sq_handle_t *h, outbox_kit_buf_t *b, int hlc, unsigned flags)
{
    outbox_kit_buf_puts(b, "SELECT o.id FROM ");
    outbox_kit_buf_relname(b, &h->rel, '"');
    outbox_kit_buf_puts(b, flags & BROKEN_EXPIRED_ROUTE
                           ? " AS o WHERE o.outbox_route = ?1 AND ((o.status = 'pending' AND "
                             "(o.available_at IS NULL OR o.available_at <= ?2)) OR (o.status = "
                             "'processing' AND o.processing_at <= ?3))"
                           : " AS o WHERE ((o.outbox_route = ?1 AND o.status = 'pending' AND "
                             "(o.available_at IS NULL OR o.available_at <= ?2)) OR (o.status = "
                             "'processing' AND o.processing_at <= ?3))");
    if (flags & BROKEN_KEY_RULE) {
        outbox_kit_buf_puts(b, flags & BROKEN_EXPIRED_KEY_RULE
                               ? " AND (o.ordering_key IS NULL OR NOT EXISTS (SELECT 1 FROM "
                               : " AND (o.ordering_key IS NULL OR o.status = 'processing' OR "
                                 "NOT EXISTS (SELECT 1 FROM ");
        outbox_kit_buf_relname(b, &h->rel, '"');
        outbox_kit_buf_puts(b, " AS e WHERE e.outbox_route = ?1 AND e.ordering_key = "
                           "o.ordering_key AND ((e.status = 'processing' AND "
                           "e.processing_at > ?3) OR (e.status = 'pending' AND "
                           "e.available_at > ?2)) AND ");
        earlier(b, hlc);
        outbox_kit_buf_puts(b, "))");
    }
    outbox_kit_buf_puts(b, " ORDER BY ");
    if (!(flags & BROKEN_ONE_ORDER))
        outbox_kit_buf_puts(b, "o.status = 'processing', ");
    if (hlc)
        outbox_kit_buf_puts(b, "o.hlc IS NULL, o.hlc, ");
    outbox_kit_buf_puts(b, flags & BROKEN_CREATED_AT ? "o.created_at, o.id LIMIT ?4" : "o.id LIMIT ?4");
}

/* Candidate ids, copied out (the statement is done before any update). */
typedef struct ids {
    char (*v)[OUTBOX_UUID_STRLEN + 1];
    size_t n;
} ids_t;

static int select_candidates(sq_handle_t *h, const outbox_claim_req_t *req, int64_t now,
                             unsigned flags, ids_t *out, outbox_diag_t *d)
{
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_sqlite_host);
    sqlite3_stmt *st = NULL;
    candidates_sql(h, &b, req->hlc_order, flags);
    int rc = outbox_sqlite_prepare_built(h->db, &b, &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    size_t limit = req->limit > 100000 ? 100000 : req->limit;
    out->v = outbox_sqlite_host->alloc(limit * sizeof *out->v);
    out->n = 0;
    if (out->v == NULL) {
        sqlite3_finalize(st);
        return outbox_sqlite_nomem(d);
    }
    sqlite3_bind_text(st, 1, req->route, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, now);
    sqlite3_bind_int64(st, 3, now - req->lease_us);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)limit);
    int src;
    while ((src = sqlite3_step(st)) == SQLITE_ROW && out->n < limit)
        snprintf(out->v[out->n++], sizeof out->v[0], "%s", (const char *)sqlite3_column_text(st, 0));
    if (src != SQLITE_DONE && src != SQLITE_ROW)
        rc = outbox_sqlite_dbfail(d, h->db, src, "broken claim: selecting");
    sqlite3_finalize(st);
    return rc;
}

static int take(sq_handle_t *h, const ids_t *ids, int64_t stamp, outbox_diag_t *d)
{
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_sqlite_host);
    sqlite3_stmt *st = NULL;
    outbox_kit_buf_puts(&b, "UPDATE ");
    outbox_kit_buf_relname(&b, &h->rel, '"');
    outbox_kit_buf_puts(&b, " SET status = 'processing', processing_at = ?2, attempts = attempts "
                        "+ 1 WHERE id = ?1");
    outbox_sqlite_add_returning(h, &b);
    int rc = outbox_sqlite_prepare_built(h->db, &b, &st, d);
    for (size_t i = 0; rc == OUTBOX_OK && i < ids->n; i++) {
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, ids->v[i], -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, stamp);
        int src = sqlite3_step(st);
        if (src == SQLITE_ROW)
            rc = outbox_sqlite_keep_row(h, st, d);
        else if (src != SQLITE_DONE)
            rc = outbox_sqlite_dbfail(d, h->db, src, "broken claim: updating");
        while (rc == OUTBOX_OK && src == SQLITE_ROW)
            src = sqlite3_step(st);
    }
    sqlite3_finalize(st);
    return rc;
}

/* One past the newest fence of the route when that is not in the past, so
 * no two claims share a fence. */
static int fence_stamp(sq_handle_t *h, const char *route, int64_t now, int64_t *stamp,
                       outbox_diag_t *d)
{
    sqlite3_stmt *st;
    int rc = broken_prepare(h->db, "SELECT max(processing_at) FROM ", &h->rel,
                            " WHERE outbox_route = ?1 AND status = 'processing'", &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    sqlite3_bind_text(st, 1, route, -1, SQLITE_STATIC);
    *stamp = now;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL &&
        sqlite3_column_int64(st, 0) >= now)
        *stamp = sqlite3_column_int64(st, 0) + 1;
    sqlite3_finalize(st);
    return OUTBOX_OK;
}

int broken_claim(void *handle, const outbox_claim_req_t *req, const outbox_row_t **rows,
                 size_t *n, outbox_fence_t *fence, outbox_diag_t *d, unsigned flags)
{
    int exclusive = (flags & BROKEN_EXCLUSIVE) != 0;
    sq_handle_t *h = handle;
    *rows = NULL;
    *n = 0;
    memset(fence, 0, sizeof *fence);
    int rc = outbox_sqlite_no_open_tx(h, "claim", d);
    if (rc != OUTBOX_OK)
        return rc;
    outbox_sqlite_arena_reset(h);
    int64_t now = outbox_sqlite_host->now_us();
    int64_t stamp = now;
    ids_t ids = {0};
    if (exclusive && (rc = outbox_sqlite_tx_begin(h, d)) != OUTBOX_OK)
        return rc;
    if (exclusive)
        rc = fence_stamp(h, req->route, now, &stamp, d);
    if (rc == OUTBOX_OK)
        rc = select_candidates(h, req, now, flags, &ids, d);
    if (rc == OUTBOX_OK && !exclusive) {
        /* Long enough for another claimer to pick the same candidates. */
        struct timespec pause = {0, 3 * 1000 * 1000};
        nanosleep(&pause, NULL);
        stamp = outbox_sqlite_host->now_us();
    }
    if (rc == OUTBOX_OK)
        rc = take(h, &ids, stamp, d);
    outbox_sqlite_host->free(ids.v);
    if (exclusive && rc == OUTBOX_OK)
        rc = outbox_sqlite_tx_commit(h, d);
    else if (exclusive)
        outbox_sqlite_tx_abort(h);
    if (rc != OUTBOX_OK) {
        outbox_sqlite_arena_reset(h);
        return rc;
    }
    *rows = h->rows;
    *n = h->n_rows;
    fence->stamp = stamp;
    return OUTBOX_OK;
}

typedef struct hiding {
    outbox_schema_report_fn report;
    void *ctx;
    const char *hidden;
    size_t kept;
} hiding_t;

static void report_unless_hidden(void *ctx, const char *problem)
{
    hiding_t *f = ctx;
    if (strstr(problem, f->hidden) != NULL)
        return;
    f->kept++;
    if (f->report)
        f->report(f->ctx, problem);
}

int broken_check_hiding(void *handle, const outbox_schema_opts_t *opts,
                        outbox_schema_report_fn report, void *ctx, size_t *problems,
                        outbox_diag_t *d, const char *hidden)
{
    hiding_t f = {report, ctx, hidden, 0};
    int rc = outbox_driver_entry_sqlite_base()->store->schema_check(handle, opts,
                                                                    report_unless_hidden, &f,
                                                                    NULL, d);
    if (problems)
        *problems = f.kept;
    return rc;
}
