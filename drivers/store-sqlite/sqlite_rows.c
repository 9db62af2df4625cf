/* SQLite store driver, floor 4: staging, claiming, settling and the clock
 * checkpoint: the statements the relay's hot path runs, cached on the
 * handle's connection.
 *
 * The fence of a claim is the processing_at it writes: settle touches a row
 * only while it is still processing with that exact stamp, so a relay whose
 * lease expired and whose rows were claimed again changes nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sqlite_int.h"

/* Columns read back by claim, in this order; hlc and traceparent follow
 * when the table has them. */
#define SQ_ROW_COLUMNS                                                                      \
    "id, outbox_route, event_id, event_type, tenant_id, execution_id, correlation_id, "    \
    "causation_id, occurred_at, payload, created_at, attempts, available_at, ordering_key, " \
    "last_error"

enum {
    C_ID,
    C_ROUTE,
    C_EVENT_ID,
    C_EVENT_TYPE,
    C_TENANT,
    C_EXECUTION,
    C_CORRELATION,
    C_CAUSATION,
    C_OCCURRED,
    C_PAYLOAD,
    C_CREATED,
    C_ATTEMPTS,
    C_AVAILABLE,
    C_KEY,
    C_LAST_ERROR,
    C_FIXED_COUNT
};

static int checkpoint_missing(const sq_handle_t *h, outbox_diag_t *d)
{
    return outbox_sqlite_fail(d, OUTBOX_ENOTSUP,
                              "checkpoint table \"%s\" not found (create it with schema apply)",
                              h->ckpt.table);
}

/* Replaces *sql with the text built in b. */
static int keep_sql(char **sql, outbox_kit_buf_t *b, outbox_diag_t *d)
{
    char *text = outbox_kit_buf_steal(b);
    if (!text)
        return outbox_sqlite_nomem(d);
    outbox_sqlite_host->free(*sql);
    *sql = text;
    return OUTBOX_OK;
}

int outbox_sqlite_rows_prepare_sql(sq_handle_t *h, outbox_diag_t *d)
{
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_sqlite_host);
    outbox_kit_buf_puts(&b, "INSERT INTO ");
    outbox_kit_buf_relname(&b, &h->rel, '"');
    outbox_kit_buf_puts(&b, " (id, outbox_route, event_id, event_type, tenant_id, execution_id, "
                        "correlation_id, causation_id, occurred_at, payload, status, "
                        "created_at, attempts, available_at, ordering_key");
    outbox_kit_buf_printf(&b, "%s%s) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 'pending', "
                          "?11, 0, ?12, ?13%s%s) ON CONFLICT (outbox_route, event_id) DO NOTHING",
                      h->has_hlc ? ", hlc" : "", h->has_traceparent ? ", traceparent" : "",
                      h->has_hlc ? ", ?14" : "", h->has_traceparent ? ", ?15" : "");
    int rc = keep_sql(&h->insert_sql, &b, d);
    if (rc != OUTBOX_OK)
        return rc;

    /* One statement, so the max is taken by the database under its write
     * lock: a slower writer with a smaller mark can never lower it. */
    outbox_kit_buf_puts(&b, "INSERT INTO ");
    outbox_kit_buf_relname(&b, &h->ckpt, '"');
    outbox_kit_buf_puts(&b, " (node_key, hlc) VALUES (?1, ?2) ON CONFLICT (node_key) DO UPDATE "
                        "SET hlc = max(hlc, excluded.hlc)");
    return keep_sql(&h->ckpt_sql, &b, d);
}

int outbox_sqlite_refresh(sq_handle_t *h, outbox_diag_t *d)
{
    outbox_sqlite_forget_statements(h);
    int rc = outbox_sqlite_detect(h, 0, d);
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_rows_prepare_sql(h, d);
    return rc;
}

/* ------------------------------------------------------------------ stage */

static int check_rows(const sq_handle_t *h, const outbox_row_t *rows, size_t n, outbox_diag_t *d)
{
    for (size_t i = 0; i < n; i++) {
        const outbox_row_t *r = &rows[i];
        const char *missing = !r->id           ? "id"
                              : !r->route      ? "route"
                              : !r->event_id   ? "event_id"
                              : !r->event_type ? "event_type"
                              : !r->payload    ? "payload"
                                               : NULL;
        if (missing)
            return outbox_sqlite_fail(d, OUTBOX_EINVAL, "row %zu has no %s", i, missing);
        if (r->payload_len > (size_t)INT32_MAX)
            return outbox_sqlite_fail(d, OUTBOX_EINVAL, "row %zu: payload of %zu bytes is too large",
                                      i, r->payload_len);
        if (r->hlc != 0 && !h->has_hlc)
            return outbox_sqlite_fail(d, OUTBOX_ENOTSUP,
                                      "row %zu has an hlc but column hlc is missing from \"%s\"",
                                      i, h->rel.table);
        if (r->traceparent && !h->has_traceparent)
            return outbox_sqlite_fail(d, OUTBOX_ENOTSUP,
                                      "row %zu has a traceparent but column traceparent is missing "
                                      "from \"%s\"",
                                      i, h->rel.table);
    }
    return OUTBOX_OK;
}

static void bind_text(sqlite3_stmt *st, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
}

static void bind_stamp(sqlite3_stmt *st, int i, int64_t v)
{
    if (v)
        sqlite3_bind_int64(st, i, v);
    else
        sqlite3_bind_null(st, i);
}

/* Inserts every row with st on db; *count = rows actually inserted.
 * available_at, when not 0, is every row's instead of its own. */
static int insert_rows(sqlite3 *db, sqlite3_stmt *st, const outbox_row_t *rows, size_t n,
                       int64_t available_at, size_t *count, outbox_diag_t *d)
{
    for (size_t i = 0; i < n; i++) {
        const outbox_row_t *r = &rows[i];
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        bind_text(st, 1, r->id);
        bind_text(st, 2, r->route);
        bind_text(st, 3, r->event_id);
        bind_text(st, 4, r->event_type);
        bind_text(st, 5, r->tenant_id);
        bind_text(st, 6, r->execution_id);
        bind_text(st, 7, r->correlation_id);
        bind_text(st, 8, r->causation_id);
        sqlite3_bind_int64(st, 9, r->occurred_at);
        sqlite3_bind_text(st, 10, r->payload, r->payload_len ? (int)r->payload_len : -1,
                          SQLITE_STATIC);
        sqlite3_bind_int64(st, 11, r->created_at);
        bind_stamp(st, 12, available_at ? available_at : r->available_at);
        bind_text(st, 13, r->ordering_key);
        /* Parameters the statement lacks (no hlc / traceparent column) are
         * refused by check_rows before we get here; binding them is a no-op. */
        if (sqlite3_bind_parameter_count(st) >= 14)
            bind_stamp(st, 14, r->hlc);
        if (sqlite3_bind_parameter_count(st) >= 15)
            bind_text(st, 15, r->traceparent);
        int rc = sqlite3_step(st);
        if (rc != SQLITE_DONE) {
            char what[96];
            snprintf(what, sizeof what, "staging row %zu", i);
            int code = outbox_sqlite_dbfail(d, db, rc, what);
            sqlite3_reset(st);
            return code;
        }
        *count += (size_t)sqlite3_changes(db);
    }
    sqlite3_reset(st);
    return OUTBOX_OK;
}

static int advance_on(sqlite3 *db, sqlite3_stmt *st, const char *node_key, int64_t hlc,
                      outbox_diag_t *d)
{
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    sqlite3_bind_text(st, 1, node_key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, hlc);
    int rc = sqlite3_step(st);
    int code = rc == SQLITE_DONE ? OUTBOX_OK
                                 : outbox_sqlite_dbfail(d, db, rc, "advancing the checkpoint");
    sqlite3_reset(st);
    return code;
}

/* The application's connection must be on our database, or its writes
 * would not commit with the application's rows. In-memory databases have
 * no name to compare. */
static int prepare_on(sqlite3 *db, const char *sql, sqlite3_stmt **st, outbox_diag_t *d)
{
    return outbox_sqlite_prepare(db, sql, "preparing on the native connection", st, d);
}

static void sql_insert(const sq_handle_t *h, outbox_kit_buf_t *b)
{
    outbox_kit_buf_puts(b, h->insert_sql);
}

static void sql_ckpt_advance(const sq_handle_t *h, outbox_kit_buf_t *b)
{
    outbox_kit_buf_puts(b, h->ckpt_sql);
}

/* Inserts and advances on db, which is already inside a transaction. */
static int stage_body(sq_handle_t *h, sqlite3 *db, const outbox_stage_ctx_t *ctx,
                      const outbox_row_t *rows, size_t n, size_t *count, outbox_diag_t *d)
{
    int native = db != h->db;
    sqlite3_stmt *ins = NULL, *adv = NULL;
    int rc = OUTBOX_OK;
    if (n)
        rc = native ? prepare_on(db, h->insert_sql, &ins, d)
                    : outbox_sqlite_stmt(h, SQ_INSERT, sql_insert, &ins, d);
    /* A delay counts from the host's clock, the one claims compare with. */
    int64_t delay = ctx && OUTBOX_STRUCT_HAS(outbox_stage_ctx_t, ctx, delay_us) ? ctx->delay_us : 0;
    int64_t available_at = delay > 0 ? outbox_sqlite_host->now_us() + delay : 0;
    if (rc == OUTBOX_OK && n)
        rc = insert_rows(db, ins, rows, n, available_at, count, d);
    const char *key = ctx ? ctx->checkpoint_node_key : NULL;
    if (rc == OUTBOX_OK && key) {
        rc = native ? prepare_on(db, h->ckpt_sql, &adv, d)
                    : outbox_sqlite_stmt(h, SQ_CKPT_ADVANCE, sql_ckpt_advance, &adv, d);
        if (rc == OUTBOX_OK)
            rc = advance_on(db, adv, key, ctx->max_hlc, d);
    }
    if (native) {
        sqlite3_finalize(ins);
        sqlite3_finalize(adv);
    }
    return rc;
}

/* Inside somebody's open transaction, a savepoint undoes a failed stage
 * without undoing the caller's own work. */
static int stage_in_savepoint(sq_handle_t *h, sqlite3 *db, const outbox_stage_ctx_t *ctx,
                              const outbox_row_t *rows, size_t n, size_t *count, outbox_diag_t *d)
{
    int rc = sqlite3_exec(db, "SAVEPOINT outbox_stage", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return outbox_sqlite_dbfail(d, db, rc, "staging");
    rc = stage_body(h, db, ctx, rows, n, count, d);
    if (rc == OUTBOX_OK) {
        int src = sqlite3_exec(db, "RELEASE outbox_stage", NULL, NULL, NULL);
        if (src == SQLITE_OK)
            return OUTBOX_OK;
        rc = outbox_sqlite_dbfail(d, db, src, "staging");
    }
    *count = 0;
    /* Fails harmlessly when SQLite already rolled the whole transaction back. */
    sqlite3_exec(db, "ROLLBACK TO outbox_stage; RELEASE outbox_stage", NULL, NULL, NULL);
    return rc;
}

int outbox_sqlite_stage(void *handle, const outbox_stage_ctx_t *ctx, const outbox_row_t *rows,
                        size_t n, size_t *staged, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    size_t count = 0;
    if (staged)
        *staged = 0;
    if (n && !rows)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL, "no rows given");
    int rc = check_rows(h, rows, n, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (ctx && ctx->checkpoint_node_key && !h->has_ckpt)
        return checkpoint_missing(h, d);
    if (n == 0 && !(ctx && ctx->checkpoint_node_key))
        return OUTBOX_OK;

    sqlite3 *app = ctx ? ctx->native_tx : NULL;
    if (app) {
        rc = outbox_sqlite_check_native(h, app, h->rel.schema, d);
        if (rc == OUTBOX_OK)
            rc = stage_in_savepoint(h, app, ctx, rows, n, &count, d);
    } else if (ctx && ctx->in_own_tx) {
        if (sqlite3_get_autocommit(h->db))
            return outbox_sqlite_fail(d, OUTBOX_EINVAL,
                                      "staging in the handle's transaction, but none is open");
        rc = stage_in_savepoint(h, h->db, ctx, rows, n, &count, d);
    } else {
        rc = outbox_sqlite_no_open_tx(h, "staging outside a transaction", d);
        if (rc == OUTBOX_OK)
            rc = outbox_sqlite_tx_begin(h, d);
        if (rc != OUTBOX_OK)
            return rc;
        rc = stage_body(h, h->db, ctx, rows, n, &count, d);
        if (rc == OUTBOX_OK)
            rc = outbox_sqlite_tx_commit(h, d);
        else
            outbox_sqlite_tx_abort(h);
    }
    if (rc == OUTBOX_OK && staged)
        *staged = count;
    return rc;
}

/* ------------------------------------------------------------------ claim */

/* "e comes before o" in claim order, as one row-value comparison. */
static void claim_earlier(outbox_kit_buf_t *b, int hlc)
{
    if (hlc)
        outbox_kit_buf_puts(b, "(e.hlc IS NULL, coalesce(e.hlc, 0), e.created_at, e.id) < "
                           "(o.hlc IS NULL, coalesce(o.hlc, 0), o.created_at, o.id)");
    else
        outbox_kit_buf_puts(b, "(e.created_at, e.id) < (o.created_at, o.id)");
}

/* The per-key rule: a keyed row is claimable only when no earlier row of its
 * key is pending-or-processing and NOT claimable itself. Such a blocker is
 * either processing under a live lease or pending with a future
 * available_at; each is looked up directly through the key index, so the
 * cost is the key's blockers, not its backlog. An earlier row that is
 * claimable is no obstacle: claim order and LIMIT put it in this batch
 * ahead of o. */
static void add_rel_as(const sq_handle_t *h, outbox_kit_buf_t *b, const char *alias, const char *index)
{
    outbox_kit_buf_relname(b, &h->rel, '"');
    outbox_kit_buf_printf(b, " AS %s", alias);
    if (index) {
        outbox_kit_buf_puts(b, " INDEXED BY ");
        outbox_kit_buf_ident(b, index, '"');
    }
}

static void claim_key_rule(const sq_handle_t *h, outbox_kit_buf_t *b, int hlc)
{
    outbox_kit_buf_puts(b, " AND (o.ordering_key IS NULL OR (NOT EXISTS (SELECT 1 FROM ");
    add_rel_as(h, b, "e", h->idx_key);
    outbox_kit_buf_puts(b, " WHERE e.outbox_route = ?1 AND e.ordering_key = o.ordering_key "
                       "AND e.status = 'processing' AND e.processing_at > ?3 AND ");
    claim_earlier(b, hlc);
    outbox_kit_buf_puts(b, ") AND NOT EXISTS (SELECT 1 FROM ");
    add_rel_as(h, b, "e", h->idx_key);
    outbox_kit_buf_puts(b, " WHERE e.outbox_route = ?1 AND e.ordering_key = o.ordering_key "
                       "AND e.status = 'pending' AND e.available_at > ?2 AND ");
    claim_earlier(b, hlc);
    outbox_kit_buf_puts(b, ")))");
}

/* One arm of the candidate union: the first ?4 claimable rows of one kind,
 * read off an index already in claim order. */
static void claim_arm(const sq_handle_t *h, outbox_kit_buf_t *b, int hlc, const char *index,
                      const char *where, const char *order)
{
    outbox_kit_buf_printf(b, "SELECT * FROM (SELECT o.id AS id, o.created_at AS created_at%s FROM ",
                      hlc ? ", o.hlc AS hlc" : "");
    add_rel_as(h, b, "o", index);
    outbox_kit_buf_printf(b, " WHERE o.outbox_route = ?1 AND %s", where);
    claim_key_rule(h, b, hlc);
    outbox_kit_buf_printf(b, " ORDER BY %s LIMIT ?4)", order);
}

#define SQ_RIPE "(o.available_at IS NULL OR o.available_at <= ?2)"
/* A processing row without a stamp is treated as expired: nothing could
 * ever settle it, so the alternative is a row stuck forever. */
#define SQ_EXPIRED "o.status = 'processing' AND (o.processing_at IS NULL OR o.processing_at <= ?3)"

/* ?1 route, ?2 now, ?3 now - lease, ?4 limit, ?5 the fence stamp.
 *
 * Pending rows and expired leases are separate arms because a single
 * "status IN (...)" scan cannot walk one index in created_at order: each arm
 * reads the first ?4 rows of its own ordered index range and stops, and the
 * union of those (at most 2 or 3 times ?4 rows) is sorted for the final cut.
 * With hlc order the pending rows split once more, because an index stores
 * NULL hlc first and the claim wants them last. */
static void build_claim(const sq_handle_t *h, outbox_kit_buf_t *b, int hlc)
{
    outbox_kit_buf_puts(b, "UPDATE ");
    outbox_kit_buf_relname(b, &h->rel, '"');
    outbox_kit_buf_puts(b, " SET status = 'processing', processing_at = ?5, attempts = attempts "
                       "+ 1 WHERE id IN (SELECT id FROM (");
    if (hlc) {
        claim_arm(h, b, 1, h->idx_hlc, "o.status = 'pending' AND o.hlc IS NOT NULL AND " SQ_RIPE,
                  "o.hlc, o.created_at, o.id");
        outbox_kit_buf_puts(b, " UNION ALL ");
        claim_arm(h, b, 1, h->idx_hlc, "o.status = 'pending' AND o.hlc IS NULL AND " SQ_RIPE,
                  "o.created_at, o.id");
        outbox_kit_buf_puts(b, " UNION ALL ");
        claim_arm(h, b, 1, NULL, SQ_EXPIRED, "o.hlc IS NULL, o.hlc, o.created_at, o.id");
        outbox_kit_buf_puts(b, ") ORDER BY hlc IS NULL, hlc, created_at, id LIMIT ?4)");
    } else {
        claim_arm(h, b, 0, h->idx_order, "o.status = 'pending' AND " SQ_RIPE, "o.created_at, o.id");
        outbox_kit_buf_puts(b, " UNION ALL ");
        claim_arm(h, b, 0, NULL, SQ_EXPIRED, "o.created_at, o.id");
        outbox_kit_buf_puts(b, ") ORDER BY created_at, id LIMIT ?4)");
    }
    outbox_sqlite_add_returning(h, b);
}

static void sql_claim(const sq_handle_t *h, outbox_kit_buf_t *b)
{
    build_claim(h, b, 0);
}

static void sql_claim_hlc(const sq_handle_t *h, outbox_kit_buf_t *b)
{
    build_claim(h, b, 1);
}

static void sql_max_processing(const sq_handle_t *h, outbox_kit_buf_t *b)
{
    outbox_kit_buf_puts(b, "SELECT max(processing_at) FROM ");
    outbox_kit_buf_relname(b, &h->rel, '"');
    outbox_kit_buf_puts(b, " WHERE outbox_route = ?1 AND status = 'processing'");
}

int outbox_sqlite_fence_stamp(sq_handle_t *h, const char *route, int64_t now, int64_t *stamp,
                              outbox_diag_t *d)
{
    sqlite3_stmt *st;
    int rc = outbox_sqlite_stmt(h, SQ_MAX_PROCESSING, sql_max_processing, &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    sqlite3_bind_text(st, 1, route, -1, SQLITE_STATIC);
    int src = sqlite3_step(st);
    if (src != SQLITE_ROW) {
        rc = outbox_sqlite_dbfail(d, h->db, src, "claiming");
        sqlite3_reset(st);
        return rc;
    }
    *stamp = now;
    if (sqlite3_column_type(st, 0) != SQLITE_NULL) {
        int64_t max = sqlite3_column_int64(st, 0);
        if (max >= now && max < INT64_MAX)
            *stamp = max + 1;
    }
    sqlite3_reset(st);
    return OUTBOX_OK;
}

void outbox_sqlite_add_returning(const sq_handle_t *h, outbox_kit_buf_t *b)
{
    outbox_kit_buf_puts(b, " RETURNING " SQ_ROW_COLUMNS);
    if (h->has_hlc)
        outbox_kit_buf_puts(b, ", hlc");
    if (h->has_traceparent)
        outbox_kit_buf_puts(b, ", traceparent");
}

int outbox_sqlite_keep_row(sq_handle_t *h, sqlite3_stmt *st, outbox_diag_t *d)
{
    outbox_row_t *r = outbox_sqlite_arena_row(h);
    if (!r)
        return outbox_sqlite_nomem(d);
    int failed = 0;
    r->id = outbox_sqlite_arena_column(h, st, C_ID, &failed);
    r->route = outbox_sqlite_arena_column(h, st, C_ROUTE, &failed);
    r->event_id = outbox_sqlite_arena_column(h, st, C_EVENT_ID, &failed);
    r->event_type = outbox_sqlite_arena_column(h, st, C_EVENT_TYPE, &failed);
    r->tenant_id = outbox_sqlite_arena_column(h, st, C_TENANT, &failed);
    r->execution_id = outbox_sqlite_arena_column(h, st, C_EXECUTION, &failed);
    r->correlation_id = outbox_sqlite_arena_column(h, st, C_CORRELATION, &failed);
    r->causation_id = outbox_sqlite_arena_column(h, st, C_CAUSATION, &failed);
    r->occurred_at = sqlite3_column_int64(st, C_OCCURRED);
    r->payload = outbox_sqlite_arena_column(h, st, C_PAYLOAD, &failed);
    r->payload_len = r->payload ? (size_t)sqlite3_column_bytes(st, C_PAYLOAD) : 0;
    r->created_at = sqlite3_column_int64(st, C_CREATED);
    r->attempts = (int32_t)sqlite3_column_int(st, C_ATTEMPTS);
    r->available_at = sqlite3_column_int64(st, C_AVAILABLE);
    r->ordering_key = outbox_sqlite_arena_column(h, st, C_KEY, &failed);
    r->last_error = outbox_sqlite_arena_column(h, st, C_LAST_ERROR, &failed);
    int next = C_FIXED_COUNT;
    if (h->has_hlc)
        r->hlc = sqlite3_column_int64(st, next++);
    if (h->has_traceparent)
        r->traceparent = outbox_sqlite_arena_column(h, st, next++, &failed);
    if (failed)
        return outbox_sqlite_nomem(d);
    if (!r->id || !r->route || !r->event_id || !r->event_type || !r->payload)
        return outbox_sqlite_fail(d, OUTBOX_EPERMANENT,
                                  "claimed a row with a NULL id, route, event_id, event_type or "
                                  "payload from \"%s\"",
                                  h->rel.table);
    h->n_rows++;
    return OUTBOX_OK;
}

static int cmp_created(const void *a, const void *b)
{
    const outbox_row_t *x = a, *y = b;
    if (x->created_at != y->created_at)
        return x->created_at < y->created_at ? -1 : 1;
    return strcmp(x->id, y->id);
}

static int cmp_hlc(const void *a, const void *b)
{
    const outbox_row_t *x = a, *y = b;
    if ((x->hlc == 0) != (y->hlc == 0))
        return x->hlc == 0 ? 1 : -1;
    if (x->hlc != y->hlc)
        return x->hlc < y->hlc ? -1 : 1;
    return cmp_created(a, b);
}

int outbox_sqlite_claim_stmt(sq_handle_t *h, const outbox_claim_req_t *req, int64_t now,
                             int64_t stamp, sqlite3_stmt **out, outbox_diag_t *d)
{
    sqlite3_stmt *st;
    int rc = req->hlc_order ? outbox_sqlite_stmt(h, SQ_CLAIM_HLC, sql_claim_hlc, &st, d)
                            : outbox_sqlite_stmt(h, SQ_CLAIM, sql_claim, &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    int64_t limit = req->limit > (size_t)INT32_MAX ? INT32_MAX : (int64_t)req->limit;
    /* now - lease; a lease longer than the epoch simply reclaims nothing. */
    int64_t cut = req->lease_us > now ? INT64_MIN : now - req->lease_us;
    sqlite3_bind_text(st, 1, req->route, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, now);
    sqlite3_bind_int64(st, 3, cut);
    sqlite3_bind_int64(st, 4, limit);
    sqlite3_bind_int64(st, 5, stamp);
    *out = st;
    return OUTBOX_OK;
}

/* Runs the claim statement inside the open transaction and keeps its rows. */
static int claim_rows(sq_handle_t *h, const outbox_claim_req_t *req, int64_t now, int64_t stamp,
                      outbox_diag_t *d)
{
    sqlite3_stmt *st;
    int rc = outbox_sqlite_claim_stmt(h, req, now, stamp, &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    int src;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        rc = outbox_sqlite_keep_row(h, st, d);
        if (rc != OUTBOX_OK) {
            sqlite3_reset(st);
            return rc;
        }
    }
    if (src != SQLITE_DONE)
        rc = outbox_sqlite_dbfail(d, h->db, src, "claiming");
    sqlite3_reset(st);
    return rc;
}

int outbox_sqlite_claim(void *handle, const outbox_claim_req_t *req, const outbox_row_t **rows,
                        size_t *n, outbox_fence_t *fence, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    /* driver.h: the host has checked req and cleared the outputs. */
    int rc = outbox_sqlite_no_open_tx(h, "claim", d);
    if (rc != OUTBOX_OK)
        return rc;
    outbox_sqlite_arena_reset(h);

    int64_t now = outbox_sqlite_host->now_us();
    int64_t stamp = now;
    for (int attempt = 0;; attempt++) {
        rc = outbox_sqlite_tx_begin_relay(h, d);
        if (rc != OUTBOX_OK)
            return rc;
        rc = outbox_sqlite_fence_stamp(h, req->route, now, &stamp, d);
        if (rc == OUTBOX_OK)
            rc = claim_rows(h, req, now, stamp, d);
        if (rc == OUTBOX_OK) {
            rc = outbox_sqlite_tx_commit(h, d);
            if (rc == OUTBOX_OK)
                break;
            outbox_sqlite_arena_reset(h);
            return rc;
        }
        int raw = sqlite3_errcode(h->db) & 0xff;
        outbox_sqlite_tx_abort(h);
        outbox_sqlite_arena_reset(h);
        /* An index the statement names with INDEXED BY was dropped under
         * us: look at the table again and try once more. */
        int hinted = h->idx_order || h->idx_hlc || h->idx_key;
        if (attempt > 0 || !hinted || (raw != SQLITE_ERROR && raw != SQLITE_SCHEMA) ||
            outbox_sqlite_refresh(h, d) != OUTBOX_OK)
            return rc;
    }
    /* RETURNING yields rows in no promised order. */
    if (h->n_rows > 1)
        qsort(h->rows, h->n_rows, sizeof *h->rows, req->hlc_order ? cmp_hlc : cmp_created);
    *rows = h->rows;
    *n = h->n_rows;
    fence->stamp = stamp;
    return OUTBOX_OK;
}

/* ----------------------------------------------------------------- settle */

#define SQ_FENCED " WHERE id = ?1 AND status = 'processing' AND processing_at = ?2"

/* UPDATE ... SET set, for a row that still holds the fence. */
static void fenced_update(const sq_handle_t *h, outbox_kit_buf_t *b, const char *set)
{
    outbox_kit_buf_puts(b, "UPDATE ");
    outbox_kit_buf_relname(b, &h->rel, '"');
    outbox_kit_buf_puts(b, set);
    outbox_kit_buf_puts(b, SQ_FENCED);
}

static void sql_set_published(const sq_handle_t *h, outbox_kit_buf_t *b)
{
    fenced_update(h, b, " SET status = 'published', published_at = ?3");
}

static void sql_set_reschedule(const sq_handle_t *h, outbox_kit_buf_t *b)
{
    fenced_update(h, b, " SET status = 'pending', available_at = ?3, last_error = ?4, "
                        "processing_at = NULL");
}

static void sql_set_dead(const sq_handle_t *h, outbox_kit_buf_t *b)
{
    fenced_update(h, b, " SET status = 'dead', last_error = ?4");
}

/* The attempt claim charged never happened: give it back. A release with
 * an available_at (ABI 1.5) also keeps the row back until then. */
static void sql_set_release(const sq_handle_t *h, outbox_kit_buf_t *b)
{
    fenced_update(h, b, " SET status = 'pending', attempts = max(attempts - 1, 0), "
                        "processing_at = NULL, available_at = coalesce(?3, available_at)");
}

int outbox_sqlite_settle_stmt(sq_handle_t *h, int64_t fence, int64_t now,
                              const outbox_settle_item_t *it, sqlite3_stmt **out, outbox_diag_t *d)
{
    sqlite3_stmt *st;
    int rc;
    switch (it->kind) {
    case OUTBOX_SETTLE_PUBLISHED:
        rc = outbox_sqlite_stmt(h, SQ_SET_PUBLISHED, sql_set_published, &st, d);
        break;
    case OUTBOX_SETTLE_RESCHEDULE:
        rc = outbox_sqlite_stmt(h, SQ_SET_RESCHEDULE, sql_set_reschedule, &st, d);
        break;
    case OUTBOX_SETTLE_DEAD:
        rc = outbox_sqlite_stmt(h, SQ_SET_DEAD, sql_set_dead, &st, d);
        break;
    default:
        rc = outbox_sqlite_stmt(h, SQ_SET_RELEASE, sql_set_release, &st, d);
        break;
    }
    if (rc != OUTBOX_OK)
        return rc;
    sqlite3_bind_text(st, 1, it->id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, fence);
    if (it->kind == OUTBOX_SETTLE_PUBLISHED)
        sqlite3_bind_int64(st, 3, now);
    if (it->kind == OUTBOX_SETTLE_RESCHEDULE || it->kind == OUTBOX_SETTLE_RELEASE)
        bind_stamp(st, 3, it->available_at);
    if (it->kind == OUTBOX_SETTLE_RESCHEDULE || it->kind == OUTBOX_SETTLE_DEAD)
        bind_text(st, 4, it->error);
    *out = st;
    return OUTBOX_OK;
}

static int settle_one(sq_handle_t *h, int64_t fence, int64_t now, outbox_settle_item_t *it,
                      outbox_diag_t *d)
{
    sqlite3_stmt *st;
    int rc = outbox_sqlite_settle_stmt(h, fence, now, it, &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    rc = outbox_sqlite_run(h, st, d, "settling");
    if (rc == OUTBOX_OK)
        it->applied = sqlite3_changes(h->db) > 0;
    return rc;
}

int outbox_sqlite_settle(void *handle, const outbox_fence_t *fence, outbox_settle_item_t *items,
                         size_t n, size_t *applied, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    /* driver.h: the host has checked the fence and the items. */
    int rc = outbox_sqlite_no_open_tx(h, "settle", d);
    if (rc != OUTBOX_OK)
        return rc;

    int64_t now = outbox_sqlite_host->now_us();
    rc = outbox_sqlite_tx_begin_relay(h, d);
    if (rc != OUTBOX_OK)
        return rc;
    size_t count = 0;
    for (size_t i = 0; i < n && rc == OUTBOX_OK; i++) {
        rc = settle_one(h, fence->stamp, now, &items[i], d);
        count += items[i].applied != 0;
    }
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_tx_commit(h, d);
    else
        outbox_sqlite_tx_abort(h);
    if (rc != OUTBOX_OK) {
        for (size_t i = 0; i < n; i++)
            items[i].applied = 0;
        return rc;
    }
    if (applied)
        *applied = count;
    return OUTBOX_OK;
}

/* ------------------------------------------------------------------ renew */

static void sql_renew(const sq_handle_t *h, outbox_kit_buf_t *b)
{
    fenced_update(h, b, " SET processing_at = ?3");
}

/* One transaction: a fresh stamp as a claim would take it (unique among
 * the route's live fences), written on every row still holding the old. */
int outbox_sqlite_renew(void *handle, const outbox_renew_req_t *req, outbox_fence_t *renewed,
                        size_t *count, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    /* driver.h: the host has checked req and cleared the outputs. */
    int rc = outbox_sqlite_no_open_tx(h, "renew", d);
    if (rc != OUTBOX_OK)
        return rc;
    rc = outbox_sqlite_tx_begin_relay(h, d);
    if (rc != OUTBOX_OK)
        return rc;
    int64_t stamp = 0;
    rc = outbox_sqlite_fence_stamp(h, req->route, outbox_sqlite_host->now_us(), &stamp, d);
    sqlite3_stmt *st = NULL;
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_stmt(h, SQ_RENEW, sql_renew, &st, d);
    size_t moved = 0;
    for (size_t i = 0; i < req->n && rc == OUTBOX_OK; i++) {
        sqlite3_bind_text(st, 1, req->ids[i], -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, req->fence->stamp);
        sqlite3_bind_int64(st, 3, stamp);
        rc = outbox_sqlite_run(h, st, d, "renewing the lease");
        if (rc == OUTBOX_OK)
            moved += sqlite3_changes(h->db) > 0;
    }
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_tx_commit(h, d);
    else
        outbox_sqlite_tx_abort(h);
    if (rc != OUTBOX_OK)
        return rc;
    *count = moved;
    if (moved > 0)
        renewed->stamp = stamp;
    return OUTBOX_OK;
}

/* ------------------------------------------------------------- checkpoint */

int outbox_sqlite_checkpoint_advance(void *handle, const outbox_stage_ctx_t *ctx,
                                     const char *node_key, int64_t hlc, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    if (!node_key)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL, "checkpoint advance needs a node key");
    if (!h->has_ckpt)
        return checkpoint_missing(h, d);
    sqlite3 *app = ctx ? ctx->native_tx : NULL;
    if (app) {
        /* A lone upsert is atomic even when the application is between
         * transactions, so only the database is checked here. */
        int rc = outbox_sqlite_same_database(h, app, h->ckpt.schema, d);
        if (rc != OUTBOX_OK)
            return rc;
        sqlite3_stmt *st = NULL;
        rc = prepare_on(app, h->ckpt_sql, &st, d);
        if (rc == OUTBOX_OK)
            rc = advance_on(app, st, node_key, hlc, d);
        sqlite3_finalize(st);
        return rc;
    }
    if (ctx && ctx->in_own_tx && sqlite3_get_autocommit(h->db))
        return outbox_sqlite_fail(d, OUTBOX_EINVAL,
                                  "advancing in the handle's transaction, but none is open");
    if (!(ctx && ctx->in_own_tx)) {
        int rc = outbox_sqlite_no_open_tx(h, "checkpoint advance outside a transaction", d);
        if (rc == OUTBOX_OK)
            rc = outbox_sqlite_sync(h, 1, d);
        if (rc != OUTBOX_OK)
            return rc;
    }
    sqlite3_stmt *st;
    int rc = outbox_sqlite_stmt(h, SQ_CKPT_ADVANCE, sql_ckpt_advance, &st, d);
    if (rc == OUTBOX_OK)
        rc = advance_on(h->db, st, node_key, hlc, d);
    return rc;
}

static void sql_ckpt_recover(const sq_handle_t *h, outbox_kit_buf_t *b)
{
    outbox_kit_buf_puts(b, "SELECT coalesce(max(hlc), 0) FROM ");
    outbox_kit_buf_relname(b, &h->ckpt, '"');
}

int outbox_sqlite_checkpoint_recover(void *handle, int64_t *hlc, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    if (!hlc)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL, "checkpoint recover needs an output");
    *hlc = 0;
    if (!h->has_ckpt)
        return checkpoint_missing(h, d);
    sqlite3_stmt *st;
    int rc = outbox_sqlite_stmt(h, SQ_CKPT_RECOVER, sql_ckpt_recover, &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    int src = sqlite3_step(st);
    if (src == SQLITE_ROW)
        *hlc = sqlite3_column_int64(st, 0);
    else
        rc = outbox_sqlite_dbfail(d, h->db, src, "recovering the checkpoint");
    sqlite3_reset(st);
    return rc;
}
