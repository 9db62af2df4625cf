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

static int run(pg_handle_t *h, outbox_buf_t *sql, int nparams, const char *const *values,
               const int *lengths, const int *formats, int binary, PGresult **res,
               outbox_diag_t *d, const char *what)
{
    *res = NULL;
    if (sql->failed) {
        outbox_buf_free(sql);
        return outbox_pg_nomem(d);
    }
    int rc = outbox_pg_connected(h, d);
    if (rc == OUTBOX_OK)
        rc = outbox_pg_exec_on(h->conn, sql->data, nparams, values, lengths, formats, binary, res, d,
                               what);
    outbox_buf_free(sql);
    return rc;
}

int outbox_pg_stats(void *handle, const char *route, outbox_stats_t *out, outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    if (!out)
        return outbox_pg_fail(d, OUTBOX_EINVAL, "stats needs an output");
    memset(out, 0, sizeof *out);
    outbox_buf_t b;
    outbox_buf_init(&b, outbox_pg_host);
    outbox_buf_printf(&b, "SELECT status::text, count(*)::int8, min(created_at)::timestamptz FROM %s%s "
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
        if (strcmp(status, "pending") == 0) {
            out->pending = count;
            if (!PQgetisnull(res, i, 2) && PQgetlength(res, i, 2) == 8)
                out->oldest_pending_created_at = outbox_pg_get_stamp(PQgetvalue(res, i, 2));
        } else if (strcmp(status, "processing") == 0) {
            out->processing = count;
        } else if (strcmp(status, "published") == 0) {
            out->published = count;
        } else if (strcmp(status, "dead") == 0) {
            out->dead = count;
        }
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
    outbox_buf_t b;
    outbox_buf_init(&b, outbox_pg_host);
    outbox_buf_printf(&b, "WITH u AS (UPDATE %s SET status = 'pending', attempts = 0, available_at "
                          "= NULL, processing_at = NULL WHERE status = 'dead'",
                      h->rel_sql);
    if (route) {
        values[np++] = route;
        outbox_buf_printf(&b, " AND outbox_route = $%d::text", np);
    }
    if (event_id) {
        values[np++] = event_id;
        outbox_buf_printf(&b, " AND event_id = $%d::uuid", np);
    }
    /* Replayed rows are new work: wake idle relays as staging does. */
    outbox_buf_puts(&b, " RETURNING outbox_route) SELECT (SELECT count(*) FROM u), (SELECT "
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
        outbox_buf_t b;
        outbox_buf_init(&b, outbox_pg_host);
        outbox_buf_printf(&b, "WITH c AS (SELECT id FROM %s WHERE id > $1::uuid AND status = "
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
