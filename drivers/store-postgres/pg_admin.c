/* PostgreSQL store driver, third floor: the operator's view (stats, replay,
 * purge).
 *
 * These run rarely and take a route or not, so their SQL is built per call
 * and sent unnamed instead of prepared.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_ops.h"

/* Rows deleted per purge statement: each commits on its own, so a relay's
 * updates never wait long behind a purge, and an interrupted purge keeps
 * what it did. */
#define PG_PURGE_BATCH 5000

static int run(pg_handle_t *h, outbox_kit_buf_t *sql, int nparams, const char *const *values,
               const int *lengths, const int *formats, int binary, PGresult **res,
               outbox_diag_t *d, const char *what)
{
    *res = NULL;
    if (sql->failed) {
        outbox_kit_buf_free(sql);
        return outbox_pg_nomem(d);
    }
    int rc = outbox_pg_connected(h, d);
    if (rc == OUTBOX_OK)
        rc = outbox_pg_exec_on(h->conn, sql->data, nparams, values, lengths, formats, binary, res, d,
                               what);
    outbox_kit_buf_free(sql);
    return rc;
}

static void count_into(outbox_stats_t *out, const char *status, uint64_t count, int64_t oldest)
{
    if (strcmp(status, "pending") == 0) {
        out->pending = count;
        out->oldest_pending_created_at = oldest;
    } else if (strcmp(status, "processing") == 0) {
        out->processing = count;
    } else if (strcmp(status, "published") == 0) {
        out->published = count;
    } else if (strcmp(status, "dead") == 0) {
        out->dead = count;
    }
}

int outbox_pg_stats(void *handle, const char *route, outbox_stats_t *out, outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    if (!out)
        return outbox_pg_fail(d, OUTBOX_EINVAL, "stats needs an output");
    memset(out, 0, sizeof *out);
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_pg_host);
    outbox_kit_buf_printf(&b, "SELECT status::text, count(*)::int8, min(created_at)::timestamptz FROM %s%s "
                          "GROUP BY status",
                      h->rel_sql, route ? " WHERE outbox_route = $1::text" : "");
    const char *values[1] = {route};
    PGresult *res = NULL;
    int rc = run(h, &b, route ? 1 : 0, values, NULL, NULL, 1, &res, d, "reading stats");
    if (rc != OUTBOX_OK)
        return rc;
    for (int i = 0; i < PQntuples(res); i++) {
        if (PQgetisnull(res, i, 0) || PQgetlength(res, i, 1) != 8)
            continue;
        char status[16];
        snprintf(status, sizeof status, "%.*s", PQgetlength(res, i, 0), PQgetvalue(res, i, 0));
        uint64_t count = (uint64_t)outbox_pg_get_int8(PQgetvalue(res, i, 1));
        int64_t oldest = !PQgetisnull(res, i, 2) && PQgetlength(res, i, 2) == 8
                             ? outbox_pg_get_stamp(PQgetvalue(res, i, 2))
                             : 0;
        count_into(out, status, count, oldest);
    }
    PQclear(res);
    return OUTBOX_OK;
}

int outbox_pg_replay(void *handle, const char *route, const char *event_id, uint64_t *count,
                     outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    if (count)
        *count = 0;
    int rc = outbox_pg_no_open_tx(h, "replay", d);
    if (rc != OUTBOX_OK)
        return rc;
    const char *values[3];
    int np = 0;
    values[np++] = h->channel;
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_pg_host);
    outbox_kit_buf_printf(&b, "WITH u AS (UPDATE %s SET status = 'pending', attempts = 0, available_at "
                          "= NULL, processing_at = NULL WHERE status = 'dead'",
                      h->rel_sql);
    if (route) {
        values[np++] = route;
        outbox_kit_buf_printf(&b, " AND outbox_route = $%d::text", np);
    }
    if (event_id) {
        values[np++] = event_id;
        outbox_kit_buf_printf(&b, " AND event_id = $%d::uuid", np);
    }
    /* Replayed rows are new work: wake idle relays as staging does. */
    outbox_kit_buf_puts(&b, " RETURNING outbox_route) SELECT (SELECT count(*) FROM u), (SELECT "
                        "count(*) FROM (SELECT pg_notify($1::text, r) FROM (SELECT DISTINCT "
                        "outbox_route AS r FROM u) AS dr) AS n)");
    PGresult *res = NULL;
    rc = run(h, &b, np, values, NULL, NULL, 0, &res, d, "replaying dead rows");
    if (rc == OUTBOX_OK && count && PQntuples(res) == 1)
        *count = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return rc;
}

int outbox_pg_purge(void *handle, const char *route, int64_t before, uint64_t *count,
                    outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    if (count)
        *count = 0;
    int rc = outbox_pg_no_open_tx(h, "purge", d);
    if (rc != OUTBOX_OK)
        return rc;
    /* Batches walk the primary key from where the last one stopped, so
     * each reads on instead of rescanning the dead rows the last one left.
     * UUIDv7 ids are time-ordered: old published rows come first. */
    char last[OUTBOX_UUID_STRLEN + 1] = "00000000-0000-0000-0000-000000000000";
    char stamp[8];
    outbox_pg_put_int8(stamp, before - PG_EPOCH_OFFSET_US);
    for (;;) {
        outbox_kit_buf_t b;
        outbox_kit_buf_init(&b, outbox_pg_host);
        outbox_kit_buf_printf(&b, "WITH c AS (SELECT id FROM %s WHERE id > $1::uuid AND status = "
                              "'published' AND published_at < $2::timestamptz%s ORDER BY id LIMIT "
                              "%d), d AS (DELETE FROM %s AS o USING c WHERE o.id = c.id AND o.status "
                              "= 'published' RETURNING o.id) SELECT (SELECT count(*) FROM d), "
                              "(SELECT count(*) FROM c), (SELECT max(id::text) FROM c)",
                          h->rel_sql, route ? " AND outbox_route = $3::text" : "", PG_PURGE_BATCH,
                          h->rel_sql);
        const char *values[3] = {last, stamp, route};
        int lengths[3] = {0, 8, 0};
        int formats[3] = {0, 1, 0};
        PGresult *res = NULL;
        rc = run(h, &b, route ? 3 : 2, values, lengths, formats, 0, &res, d,
                 "purging published rows");
        if (rc != OUTBOX_OK)
            return rc;
        uint64_t deleted = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
        uint64_t seen = strtoull(PQgetvalue(res, 0, 1), NULL, 10);
        if (count)
            *count += deleted;
        int more = seen == PG_PURGE_BATCH && !PQgetisnull(res, 0, 2) &&
                   PQgetlength(res, 0, 2) == OUTBOX_UUID_STRLEN;
        if (more)
            memcpy(last, PQgetvalue(res, 0, 2), OUTBOX_UUID_STRLEN + 1);
        PQclear(res);
        if (!more)
            return OUTBOX_OK;
    }
}

int outbox_pg_routes(void *handle, outbox_route_fn fn, void *ctx, outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    /* Sorted by route so that one route's groups are adjacent; the host
     * sorts for the user anyway, byte order is not needed here. */
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_pg_host);
    outbox_kit_buf_printf(&b, "SELECT outbox_route, status::text, count(*)::int8, "
                          "min(created_at)::timestamptz FROM %s GROUP BY outbox_route, status "
                          "ORDER BY outbox_route",
                      h->rel_sql);
    PGresult *res = NULL;
    int rc = run(h, &b, 0, NULL, NULL, NULL, 1, &res, d, "listing routes");
    if (rc != OUTBOX_OK)
        return rc;
    outbox_stats_t stats = {0};
    const char *cur = NULL;
    int n = PQntuples(res);
    for (int i = 0; i < n && rc == OUTBOX_OK; i++) {
        if (PQgetisnull(res, i, 0) || PQgetisnull(res, i, 1) || PQgetlength(res, i, 2) != 8)
            continue;
        const char *route = PQgetvalue(res, i, 0);
        if (cur != NULL && strcmp(cur, route) != 0) {
            rc = fn(ctx, cur, &stats);
            memset(&stats, 0, sizeof stats);
        }
        cur = route;
        char status[16];
        snprintf(status, sizeof status, "%.*s", PQgetlength(res, i, 1), PQgetvalue(res, i, 1));
        int64_t oldest = !PQgetisnull(res, i, 3) && PQgetlength(res, i, 3) == 8
                             ? outbox_pg_get_stamp(PQgetvalue(res, i, 3))
                             : 0;
        count_into(&stats, status, (uint64_t)outbox_pg_get_int8(PQgetvalue(res, i, 2)), oldest);
    }
    if (rc == OUTBOX_OK && cur != NULL)
        rc = fn(ctx, cur, &stats);
    PQclear(res);
    return rc;
}

static const char *opt_text(PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? NULL : PQgetvalue(res, row, col);
}

int outbox_pg_dead_list(void *handle, const char *route, const char *after_id, size_t limit,
                        outbox_row_fn fn, void *ctx, outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    char after_at[8];
    PGresult *res = NULL;
    int rc;
    if (after_id) {
        outbox_kit_buf_t q;
        outbox_kit_buf_init(&q, outbox_pg_host);
        outbox_kit_buf_printf(&q, "SELECT created_at FROM %s WHERE id = $1::uuid AND outbox_route = "
                              "$2::text",
                          h->rel_sql);
        const char *v[2] = {after_id, route};
        rc = run(h, &q, 2, v, NULL, NULL, 1, &res, d, "finding the row to list after");
        if (rc != OUTBOX_OK)
            return rc;
        if (PQntuples(res) != 1 || PQgetlength(res, 0, 0) != 8) {
            PQclear(res);
            return outbox_pg_fail(d, OUTBOX_ENOTFOUND, "no row with id %s on route %s", after_id,
                                  route);
        }
        memcpy(after_at, PQgetvalue(res, 0, 0), 8);
        PQclear(res);
    }
    /* Dead rows of one route: outbox_claim_idx (route, status, ...) finds
     * them, and a page is sorted from there. */
    char lim[24];
    snprintf(lim, sizeof lim, "%zu", limit);
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_pg_host);
    outbox_kit_buf_printf(&b, "SELECT id::text, event_id::text, event_type, ordering_key, attempts, "
                          "created_at, last_error FROM %s AS o WHERE outbox_route = $1::text AND "
                          "status = 'dead'%s ORDER BY o.created_at, o.id LIMIT $2::int8",
                      h->rel_sql,
                      after_id ? " AND (o.created_at, o.id) > ($3::timestamptz, $4::uuid)" : "");
    const char *values[4] = {route, lim, after_at, after_id};
    int lengths[4] = {0, 0, 8, 0};
    int formats[4] = {0, 0, 1, 0};
    rc = run(h, &b, after_id ? 4 : 2, values, lengths, formats, 1, &res, d, "listing dead rows");
    if (rc != OUTBOX_OK)
        return rc;
    for (int i = 0; i < PQntuples(res) && rc == OUTBOX_OK; i++) {
        if (PQgetlength(res, i, 4) != 4 || PQgetlength(res, i, 5) != 8)
            continue;
        outbox_row_t row = {
            .id = PQgetvalue(res, i, 0),
            .route = route,
            .event_id = PQgetvalue(res, i, 1),
            .event_type = PQgetvalue(res, i, 2),
            .ordering_key = opt_text(res, i, 3),
            .attempts = outbox_pg_get_int4(PQgetvalue(res, i, 4)),
            .created_at = outbox_pg_get_stamp(PQgetvalue(res, i, 5)),
            .last_error = opt_text(res, i, 6),
        };
        rc = fn(ctx, &row);
    }
    PQclear(res);
    return rc;
}
