/* SQLite store driver, floor 4: the operator's view: stats, replay, purge.
 *
 * These run rarely and take a route or not, so their SQL is built per call
 * instead of cached.
 */
#include <string.h>

#include "sqlite_int.h"

/* Rows deleted per purge transaction: small enough that a relay waiting for
 * the write lock is not held up for long. */
#define SQ_PURGE_BATCH 1000

int outbox_sqlite_stats(void *handle, const char *route, outbox_stats_t *out, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    if (!out)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL, "stats needs an output");
    memset(out, 0, sizeof *out);
    /* One scan: with a route it reads the ordered index (route, status,
     * created_at, id) alone. */
    outbox_buf_t b;
    outbox_buf_init(&b, outbox_sqlite_host);
    outbox_buf_puts(&b, "SELECT status, count(*), min(created_at) FROM ");
    outbox_buf_relname(&b, &h->rel, '"');
    outbox_buf_printf(&b, "%s GROUP BY status", route ? " WHERE outbox_route = ?1" : "");
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
        if (strcmp(status, "pending") == 0) {
            out->pending = count;
            out->oldest_pending_created_at = sqlite3_column_int64(st, 2);
        } else if (strcmp(status, "processing") == 0) {
            out->processing = count;
        } else if (strcmp(status, "published") == 0) {
            out->published = count;
        } else if (strcmp(status, "dead") == 0) {
            out->dead = count;
        }
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
    outbox_buf_t b;
    outbox_buf_init(&b, outbox_sqlite_host);
    outbox_buf_puts(&b, "UPDATE ");
    outbox_buf_relname(&b, &h->rel, '"');
    outbox_buf_printf(&b, " SET status = 'pending', attempts = 0, available_at = NULL, "
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
    if (count)
        *count = 0;
    int rc = outbox_sqlite_no_open_tx(h, "purge", d);
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_sync(h, 1, d);
    if (rc != OUTBOX_OK)
        return rc;
    outbox_buf_t b;
    outbox_buf_init(&b, outbox_sqlite_host);
    outbox_buf_puts(&b, "DELETE FROM ");
    outbox_buf_relname(&b, &h->rel, '"');
    outbox_buf_puts(&b, " WHERE id IN (SELECT id FROM ");
    outbox_buf_relname(&b, &h->rel, '"');
    outbox_buf_printf(&b, " WHERE status = 'published' AND published_at < ?1%s LIMIT %d)",
                      route ? " AND outbox_route = ?2" : "", SQ_PURGE_BATCH);
    sqlite3_stmt *st;
    rc = outbox_sqlite_prepare_built(h->db, &b, &st, d);
    if (rc != OUTBOX_OK)
        return rc;
    sqlite3_bind_int64(st, 1, before);
    if (route)
        sqlite3_bind_text(st, 2, route, -1, SQLITE_STATIC);
    /* Each batch commits on its own, so an interrupted purge keeps what it
     * deleted and a relay waits at most one batch for the write lock. */
    for (;;) {
        int src = sqlite3_step(st);
        if (src != SQLITE_DONE) {
            rc = outbox_sqlite_dbfail(d, h->db, src, "purging published rows");
            break;
        }
        int changed = sqlite3_changes(h->db);
        if (count)
            *count += (uint64_t)changed;
        sqlite3_reset(st);
        if (changed < SQ_PURGE_BATCH)
            break;
    }
    sqlite3_finalize(st);
    return rc;
}
