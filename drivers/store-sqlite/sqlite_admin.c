/* SQLite store driver, floor 4: the operator's view: stats, replay, purge.
 *
 * These run rarely and take a route or not, so their SQL is built per call
 * instead of cached.
 */
#include <string.h>

#include "sqlite_int.h"

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

int outbox_sqlite_stats(void *handle, const char *route, outbox_stats_t *out, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    if (!out)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL, "stats needs an output");
    memset(out, 0, sizeof *out);
    /* One scan: with a route it reads the ordered index (route, status,
     * created_at, id) alone. */
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_sqlite_host);
    outbox_kit_buf_puts(&b, "SELECT status, count(*), min(created_at) FROM ");
    outbox_kit_buf_relname(&b, &h->rel, '"');
    outbox_kit_buf_printf(&b, "%s GROUP BY status", route ? " WHERE outbox_route = ?1" : "");
    sqlite3_stmt *st;
    int rc = outbox_sqlite_prepare_built(h->db, &b, &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (route)
        sqlite3_bind_text(st, 1, route, -1, SQLITE_STATIC);
    int src;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        const char *status = (const char *)sqlite3_column_text(st, 0);
        uint64_t count = (uint64_t)sqlite3_column_int64(st, 1);
        if (!status)
            continue;
        count_into(out, status, count, sqlite3_column_int64(st, 2));
    }
    if (src != SQLITE_DONE) {
        rc = outbox_sqlite_dbfail(d, h->db, src, "reading stats");
        memset(out, 0, sizeof *out);
    }
    sqlite3_finalize(st);
    return rc;
}

int outbox_sqlite_replay(void *handle, const char *route, const char *event_id, uint64_t *count,
                         outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    if (count)
        *count = 0;
    int rc = outbox_sqlite_no_open_tx(h, "replay", d);
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_sync(h, 1, d);
    if (rc != OUTBOX_OK)
        return rc;
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_sqlite_host);
    outbox_kit_buf_puts(&b, "UPDATE ");
    outbox_kit_buf_relname(&b, &h->rel, '"');
    outbox_kit_buf_printf(&b, " SET status = 'pending', attempts = 0, available_at = NULL, "
                          "processing_at = NULL WHERE status = 'dead'%s%s",
                      route ? " AND outbox_route = ?1" : "", event_id ? " AND event_id = ?2" : "");
    sqlite3_stmt *st;
    rc = outbox_sqlite_prepare_built(h->db, &b, &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (route)
        sqlite3_bind_text(st, 1, route, -1, SQLITE_STATIC);
    if (event_id)
        sqlite3_bind_text(st, 2, event_id, -1, SQLITE_STATIC);
    /* A single statement is its own transaction: all of it or none. */
    int src = sqlite3_step(st);
    if (src == SQLITE_DONE) {
        if (count)
            *count = (uint64_t)sqlite3_changes(h->db);
    } else {
        rc = outbox_sqlite_dbfail(d, h->db, src, "replaying dead rows");
    }
    sqlite3_finalize(st);
    return rc;
}

int outbox_sqlite_purge(void *handle, const char *route, int64_t before, uint64_t *count,
                        outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    uint64_t n = 0;
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_sqlite_host);
    outbox_kit_buf_puts(&b, "DELETE FROM ");
    outbox_kit_buf_relname(&b, &h->rel, '"');
    outbox_kit_buf_puts(&b, " WHERE id IN (SELECT id FROM ");
    outbox_kit_buf_relname(&b, &h->rel, '"');
    outbox_kit_buf_puts(&b, route ? " WHERE status = 'published' AND published_at < ?1 AND "
                                    "outbox_route = ?2"
                                  : " WHERE status = 'published' AND published_at < ?1");
    int rc = outbox_sqlite_delete_batches(h, "purge", &b, before, route, &n, d);
    if (count)
        *count = n;
    return rc;
}

int outbox_sqlite_routes(void *handle, outbox_route_fn fn, void *ctx, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    /* Grouped rows come route by route (the index leads with the route), so
     * one route's counts are complete when the next route starts. */
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_sqlite_host);
    outbox_kit_buf_puts(&b, "SELECT outbox_route, status, count(*), min(created_at) FROM ");
    outbox_kit_buf_relname(&b, &h->rel, '"');
    outbox_kit_buf_puts(&b, " GROUP BY outbox_route, status ORDER BY outbox_route");
    sqlite3_stmt *st;
    int rc = outbox_sqlite_prepare_built(h->db, &b, &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    outbox_kit_buf_t cur;
    outbox_kit_buf_init(&cur, outbox_sqlite_host);
    int have = 0;
    outbox_stats_t stats = {0};
    int src;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        const char *route = (const char *)sqlite3_column_text(st, 0);
        const char *status = (const char *)sqlite3_column_text(st, 1);
        if (!route || !status)
            continue;
        if (have && strcmp(cur.data, route) != 0) {
            rc = fn(ctx, cur.data, &stats);
            if (rc != 0)
                break;
            have = 0;
        }
        if (!have) {
            outbox_kit_buf_reset(&cur);
            outbox_kit_buf_puts(&cur, route);
            if (cur.failed) {
                rc = outbox_sqlite_fail(d, OUTBOX_ENOMEM, "listing routes: out of memory");
                break;
            }
            memset(&stats, 0, sizeof stats);
            have = 1;
        }
        count_into(&stats, status, (uint64_t)sqlite3_column_int64(st, 2),
                   sqlite3_column_int64(st, 3));
    }
    if (rc == OUTBOX_OK && src != SQLITE_DONE)
        rc = outbox_sqlite_dbfail(d, h->db, src, "listing routes");
    else if (rc == OUTBOX_OK && have)
        rc = fn(ctx, cur.data, &stats);
    sqlite3_finalize(st);
    outbox_kit_buf_free(&cur);
    return rc;
}

int outbox_sqlite_dead_list(void *handle, const char *route, const char *after_id, size_t limit,
                            outbox_row_fn fn, void *ctx, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    int rc;
    int64_t after_at = 0;
    if (after_id) {
        outbox_kit_buf_t q;
        outbox_kit_buf_init(&q, outbox_sqlite_host);
        outbox_kit_buf_puts(&q, "SELECT created_at FROM ");
        outbox_kit_buf_relname(&q, &h->rel, '"');
        outbox_kit_buf_puts(&q, " WHERE id = ?1 AND outbox_route = ?2");
        sqlite3_stmt *st;
        rc = outbox_sqlite_prepare_built(h->db, &q, &st, d);
        if (rc != OUTBOX_OK)
            return rc;
        sqlite3_bind_text(st, 1, after_id, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, route, -1, SQLITE_STATIC);
        int src = sqlite3_step(st);
        if (src == SQLITE_ROW)
            after_at = sqlite3_column_int64(st, 0);
        else if (src == SQLITE_DONE)
            rc = outbox_sqlite_fail(d, OUTBOX_ENOTFOUND, "no row with id %s on route %s",
                                    after_id, route);
        else
            rc = outbox_sqlite_dbfail(d, h->db, src, "finding the row to list after");
        sqlite3_finalize(st);
        if (rc != OUTBOX_OK)
            return rc;
    }
    /* Reads the ordered index (route, status, created_at, id) from where
     * the last page ended. */
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_sqlite_host);
    outbox_kit_buf_puts(&b, "SELECT id, event_id, event_type, ordering_key, attempts, created_at, "
                        "last_error FROM ");
    outbox_kit_buf_relname(&b, &h->rel, '"');
    outbox_kit_buf_printf(&b, " WHERE outbox_route = ?1 AND status = 'dead'%s ORDER BY created_at, "
                          "id LIMIT ?4",
                      after_id ? " AND (created_at > ?2 OR (created_at = ?2 AND id > ?3))" : "");
    sqlite3_stmt *st;
    rc = outbox_sqlite_prepare_built(h->db, &b, &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    sqlite3_bind_text(st, 1, route, -1, SQLITE_STATIC);
    if (after_id) {
        sqlite3_bind_int64(st, 2, after_at);
        sqlite3_bind_text(st, 3, after_id, -1, SQLITE_STATIC);
    }
    sqlite3_bind_int64(st, 4, (sqlite3_int64)limit);
    int src;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        outbox_row_t row = {
            .id = (const char *)sqlite3_column_text(st, 0),
            .route = route,
            .event_id = (const char *)sqlite3_column_text(st, 1),
            .event_type = (const char *)sqlite3_column_text(st, 2),
            .ordering_key = (const char *)sqlite3_column_text(st, 3),
            .attempts = (int32_t)sqlite3_column_int(st, 4),
            .created_at = sqlite3_column_int64(st, 5),
            .last_error = (const char *)sqlite3_column_text(st, 6),
        };
        rc = fn(ctx, &row);
        if (rc != 0)
            break;
    }
    if (rc == OUTBOX_OK && src != SQLITE_DONE)
        rc = outbox_sqlite_dbfail(d, h->db, src, "listing dead rows");
    sqlite3_finalize(st);
    return rc;
}
