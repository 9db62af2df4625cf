/* PostgreSQL store driver, third floor: the inbox, a consumer's record of
 * the events it handled (consumer, event_id, received_at), unique on
 * (consumer, event_id).
 *
 * Accept is one INSERT .. ON CONFLICT DO NOTHING, so the unique index
 * decides between racing consumers: the second inserter of a pair waits
 * for the first one's transaction, then finds the row (0) or, when it was
 * rolled back, inserts it (1). Under REPEATABLE READ and SERIALIZABLE the
 * server answers a pair committed after the caller's snapshot with a
 * serialization failure instead, which is transient: the consumer's
 * transaction is retried and then sees 0. Purge and stats are the
 * operator's and go unnamed, like pg_admin.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_ops.h"

/* PostgreSQL's timestamp range in its own epoch (END_TIMESTAMP and
 * MIN_TIMESTAMP in its datatype/timestamp.h): a binary value outside it is
 * refused as out of range. */
#define PG_STAMP_END INT64_C(9223371331200000000)
#define PG_STAMP_MIN INT64_C(-211813488000000000)

int outbox_pg_inbox_prepare_sql(pg_handle_t *h, outbox_diag_t *d)
{
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_pg_host);
    /* The conflict target is named: on a table without that unique key the
     * statement fails (42P10) instead of recording a pair twice.
     * received_at is set here so that a table made by hand without the
     * column's default works as well. */
    outbox_kit_buf_printf(&b, "INSERT INTO %s (consumer, event_id, received_at) VALUES ($1::text, "
                              "$2::text, now()) ON CONFLICT (consumer, event_id) DO NOTHING",
                          h->inbox_sql);
    char *sql = outbox_kit_buf_steal(&b);
    if (!sql)
        return outbox_pg_nomem(d);
    outbox_pg_host->free(h->sql[PG_INBOX_ACCEPT]);
    h->sql[PG_INBOX_ACCEPT] = sql;
    return OUTBOX_OK;
}

static int inbox_missing(const pg_handle_t *h, outbox_diag_t *d)
{
    return outbox_pg_fail(d, OUTBOX_EMISSING,
                          "inbox table \"%s\" not found (create it with schema apply)",
                          h->inbox.table[0] ? h->inbox.table : PG_INBOX_TABLE);
}

int outbox_pg_inbox_accept(void *handle, const outbox_stage_ctx_t *ctx, const char *consumer,
                           const char *event_id, int *is_new, outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    if (is_new)
        *is_new = 0;
    if (!consumer || !event_id || !is_new)
        return outbox_pg_fail(d, OUTBOX_EINVAL,
                              "inbox accept needs a consumer, an event id and an output");
    if (!h->has_inbox)
        return inbox_missing(h, d);
    const char *values[2] = {consumer, event_id};
    PGconn *app = ctx ? ctx->native_tx : NULL;
    PGresult *res = NULL;
    int rc;
    if (app) {
        /* The record must commit or roll back with the consumer's own
         * writes: outside BEGIN it would commit at once. */
        rc = outbox_pg_check_native(app, d);
        if (rc == OUTBOX_OK)
            rc = outbox_pg_exec_on(app, h->sql[PG_INBOX_ACCEPT], 2, values, NULL, NULL, 0, &res, d,
                                   "inbox accept");
    } else {
        rc = ctx && ctx->in_own_tx
                 ? outbox_pg_in_own_tx(h, "inbox accept", d)
                 : outbox_pg_no_open_tx(h, "inbox accept outside a transaction", d);
        /* Without a transaction the single statement is atomic on its own. */
        if (rc == OUTBOX_OK)
            rc = outbox_pg_exec_slot(h, PG_INBOX_ACCEPT, 2, values, NULL, NULL, 0, &res, d,
                                     "inbox accept");
    }
    if (rc == OUTBOX_OK)
        *is_new = strcmp(PQcmdTuples(res), "1") == 0;
    PQclear(res);
    return rc;
}

/* Runs sql (freed here) unnamed on the handle's connection. */
static int run(pg_handle_t *h, outbox_kit_buf_t *sql, int nparams, const char *const *values,
               const int *lengths, const int *formats, int binary, PGresult **res,
               outbox_diag_t *d, const char *what)
{
    *res = NULL;
    int rc = sql->failed ? outbox_pg_nomem(d) : outbox_pg_connected(h, d);
    if (rc == OUTBOX_OK)
        rc = outbox_pg_exec_on(h->conn, sql->data, nparams, values, lengths, formats, binary, res,
                               d, what);
    outbox_kit_buf_free(sql);
    return rc;
}

/* us since the Unix epoch as a binary timestamptz, an instant beyond
 * PostgreSQL's range becoming -infinity or infinity (nothing is received
 * before the one, everything before the other). */
static void put_stamp(char out[8], int64_t us)
{
    int64_t v;
    if (us < PG_STAMP_MIN + PG_EPOCH_OFFSET_US)
        v = INT64_MIN;
    else if (us - PG_EPOCH_OFFSET_US >= PG_STAMP_END)
        v = INT64_MAX;
    else
        v = us - PG_EPOCH_OFFSET_US;
    outbox_pg_put_int8(out, v);
}

/* Records one purge statement deletes, committed on its own: a large purge
 * never becomes one long transaction with a burst of WAL. */
#define PG_INBOX_PURGE_BATCH 5000

int outbox_pg_inbox_purge(void *handle, const char *consumer, int64_t before_us, uint64_t *count,
                          outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    if (count)
        *count = 0;
    if (!h->has_inbox)
        return inbox_missing(h, d);
    int rc = outbox_pg_no_open_tx(h, "inbox purge", d);
    if (rc != OUTBOX_OK)
        return rc;
    /* The batch by the received_at index, deleted by ctid; each statement
     * commits on its own, so an interrupted purge keeps what it did. */
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_pg_host);
    outbox_kit_buf_printf(&b, "DELETE FROM %s WHERE ctid = ANY (ARRAY(SELECT ctid FROM %s WHERE "
                              "received_at < $1::timestamptz%s LIMIT %d))",
                          h->inbox_sql, h->inbox_sql, consumer ? " AND consumer = $2::text" : "",
                          PG_INBOX_PURGE_BATCH);
    char stamp[8];
    put_stamp(stamp, before_us);
    const char *values[2] = {stamp, consumer};
    int lengths[2] = {8, 0};
    int formats[2] = {1, 0};
    rc = b.failed ? outbox_pg_nomem(d) : outbox_pg_connected(h, d);
    for (uint64_t n = PG_INBOX_PURGE_BATCH; rc == OUTBOX_OK && n == PG_INBOX_PURGE_BATCH;) {
        PGresult *res = NULL;
        rc = outbox_pg_exec_on(h->conn, b.data, consumer ? 2 : 1, values, lengths, formats, 0,
                               &res, d, "purging inbox records");
        n = rc == OUTBOX_OK ? strtoull(PQcmdTuples(res), NULL, 10) : 0;
        if (count)
            *count += n;
        PQclear(res);
    }
    outbox_kit_buf_free(&b);
    return rc;
}

int outbox_pg_inbox_stats(void *handle, const char *consumer, outbox_inbox_fn fn, void *ctx,
                          outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    if (!fn)
        return outbox_pg_fail(d, OUTBOX_EINVAL, "inbox stats needs a callback");
    if (!h->has_inbox)
        return inbox_missing(h, d);
    /* COLLATE "C": byte order, whatever the database's collation. */
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_pg_host);
    outbox_kit_buf_printf(&b, "SELECT consumer::text COLLATE \"C\", count(*)::int8, "
                              "min(received_at)::timestamptz, max(received_at)::timestamptz FROM "
                              "%s%s GROUP BY 1 ORDER BY 1",
                          h->inbox_sql, consumer ? " WHERE consumer = $1::text" : "");
    const char *values[1] = {consumer};
    PGresult *res = NULL;
    int rc = run(h, &b, consumer ? 1 : 0, values, NULL, NULL, 1, &res, d, "reading inbox stats");
    if (rc != OUTBOX_OK)
        return rc;
    for (int i = 0; i < PQntuples(res) && rc == OUTBOX_OK; i++) {
        if (PQgetisnull(res, i, 0) || PQgetlength(res, i, 1) != 8 || PQgetlength(res, i, 2) != 8 ||
            PQgetlength(res, i, 3) != 8)
            continue;
        /* A binary text value is its bytes, and libpq ends each with NUL. */
        rc = fn(ctx, PQgetvalue(res, i, 0), (uint64_t)outbox_pg_get_int8(PQgetvalue(res, i, 1)),
                outbox_pg_get_stamp(PQgetvalue(res, i, 2)),
                outbox_pg_get_stamp(PQgetvalue(res, i, 3)));
    }
    PQclear(res);
    return rc;
}
