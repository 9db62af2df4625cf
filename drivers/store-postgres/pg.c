/* PostgreSQL store driver, top floor: the descriptor and vtable, open and
 * close, capabilities, the handle's own transactions and the native ones
 * the conformance battery asks for. Nothing in the driver calls this file.
 *
 * Any number of handles, in any number of processes, claim one route at
 * once: the claim statement itself keeps them apart (pg_rows.c).
 */
#include <stdio.h>
#include <string.h>

#include "pg_ops.h"
#include "outbox/version.h"

#define PG_BASE_CAPS                                                                         \
    (OUTBOX_STORE_CAP_TRANSACTIONS | OUTBOX_STORE_CAP_NATIVE_TX | OUTBOX_STORE_CAP_CONCURRENT | \
     OUTBOX_STORE_CAP_WAIT | OUTBOX_STORE_CAP_DELAYED)

/* ------------------------------------------------------------ open/close */

static void pg_close(void *handle)
{
    pg_handle_t *h = handle;
    if (!h)
        return;
    /* PQfinish ends the session; the server rolls back an open transaction
     * and forgets our statements and LISTEN with it. */
    if (h->conn)
        PQfinish(h->conn);
    for (int i = 0; i < PG_SLOT_COUNT; i++)
        outbox_pg_host->free(h->sql[i]);
    for (int i = 0; i < PG_STAGE_ARRAYS; i++)
        outbox_kit_buf_free(&h->params[i]);
    outbox_pg_host->free(h->rows);
    outbox_pg_host->free(h->arena);
    outbox_pg_host->free(h->conninfo);
    outbox_pg_host->free(h->rel_sql);
    outbox_pg_host->free(h->ckpt_sql);
    outbox_pg_host->free(h->inbox_sql);
    outbox_pg_host->free(h);
}

static int build_rel_sql(pg_handle_t *h, int with_inbox, outbox_diag_t *d)
{
    outbox_kit_buf_t a, c, i;
    outbox_kit_buf_init(&a, outbox_pg_host);
    outbox_kit_buf_init(&c, outbox_pg_host);
    outbox_kit_buf_init(&i, outbox_pg_host);
    outbox_kit_buf_relname(&a, &h->rel, '"');
    outbox_kit_buf_relname(&c, &h->ckpt, '"');
    if (with_inbox)
        outbox_kit_buf_relname(&i, &h->inbox, '"');
    h->rel_sql = outbox_kit_buf_steal(&a);
    h->ckpt_sql = outbox_kit_buf_steal(&c);
    h->inbox_sql = with_inbox ? outbox_kit_buf_steal(&i) : NULL;
    outbox_kit_buf_free(&i);
    if (!h->rel_sql || !h->ckpt_sql || (with_inbox && !h->inbox_sql))
        return outbox_pg_nomem(d); /* pg_close frees the ones that were made */
    outbox_kit_relname_show(&h->rel, h->shown, sizeof h->shown);
    return OUTBOX_OK;
}

static int pg_open(const outbox_store_open_t *params, void **handle, outbox_diag_t *d)
{
    if (!handle)
        return outbox_pg_fail(d, OUTBOX_EINVAL, "no handle pointer given");
    *handle = NULL;
    if (!params)
        return outbox_pg_fail(d, OUTBOX_EINVAL, "no open parameters given");
    pg_handle_t *h = outbox_pg_host->alloc(sizeof *h);
    if (!h)
        return outbox_pg_nomem(d);
    memset(h, 0, sizeof *h);
    for (int i = 0; i < PG_STAGE_ARRAYS; i++)
        outbox_kit_buf_init(&h->params[i], outbox_pg_host);

    int schema_only = (params->flags & OUTBOX_OPEN_SCHEMA_ONLY) != 0;
    /* A host older than ABI 1.7 names no inbox: the handle has none. */
    int with_inbox = OUTBOX_STRUCT_HAS(outbox_store_open_t, params, inbox_relation);
    h->read_only = (params->flags & OUTBOX_OPEN_READ_ONLY) != 0;
    int rc = outbox_pg_conninfo(params->uri, &h->conninfo, d);
    if (rc == OUTBOX_OK)
        rc = outbox_pg_relname(params->relation ? params->relation : "outbox", &h->rel, d);
    if (rc == OUTBOX_OK)
        rc = outbox_pg_relname_beside(params->checkpoint_relation, &h->rel, PG_CKPT_TABLE, &h->ckpt,
                                      d);
    if (rc == OUTBOX_OK && with_inbox)
        rc = outbox_pg_relname_beside(params->inbox_relation, &h->rel, PG_INBOX_TABLE, &h->inbox,
                                      d);
    if (rc == OUTBOX_OK)
        rc = build_rel_sql(h, with_inbox, d);
    if (rc == OUTBOX_OK)
        rc = outbox_pg_connect(h, d);
    if (rc == OUTBOX_OK)
        rc = outbox_pg_detect(h, !schema_only, d);
    if (rc == OUTBOX_OK)
        rc = outbox_pg_rows_prepare_sql(h, d);
    if (rc == OUTBOX_OK && with_inbox)
        rc = outbox_pg_inbox_prepare_sql(h, d);
    if (rc != OUTBOX_OK) {
        /* libpq's words (connection failures, bad options) may quote
         * what the user wrote, password included. */
        if (d) {
            char safe[OUTBOX_MESSAGE_MAX];
            outbox_kit_uri_redact(outbox_pg_host, params->uri, d->message, safe, sizeof safe);
            snprintf(d->message, sizeof d->message, "%s", safe);
        }
        pg_close(h);
        return rc;
    }
    *handle = h;
    return OUTBOX_OK;
}

static uint32_t pg_capabilities(void *handle)
{
    const pg_handle_t *h = handle;
    uint32_t caps = PG_BASE_CAPS;
    if (h && h->has_hlc)
        caps |= OUTBOX_STORE_CAP_HLC;
    if (h && h->has_traceparent)
        caps |= OUTBOX_STORE_CAP_TRACEPARENT;
    if (h && h->has_ckpt)
        caps |= OUTBOX_STORE_CAP_CHECKPOINT;
    if (h && h->has_inbox)
        caps |= OUTBOX_STORE_CAP_INBOX;
    return caps;
}

/* Schema apply may add the optional columns, schema drop take the table
 * away: the handle looks again and rebuilds its statements, forgetting the
 * ones prepared for the old shape. */
static int reshape(pg_handle_t *h, outbox_diag_t *d, const char *what)
{
    int rc = h->prepared ? outbox_pg_command(h, "DEALLOCATE ALL", d, what) : OUTBOX_OK;
    if (rc == OUTBOX_OK) {
        h->prepared = 0;
        rc = outbox_pg_detect(h, 0, d);
    }
    if (rc == OUTBOX_OK)
        rc = outbox_pg_rows_prepare_sql(h, d);
    return rc;
}

static int pg_schema_apply(void *handle, const outbox_schema_opts_t *opts, outbox_diag_t *d)
{
    int rc = outbox_pg_schema_apply(handle, opts, d);
    return rc == OUTBOX_OK ? reshape(handle, d, "schema apply") : rc;
}

static int pg_schema_drop(void *handle, const outbox_schema_opts_t *opts, outbox_diag_t *d)
{
    int rc = outbox_pg_schema_drop(handle, opts, d);
    return rc == OUTBOX_OK ? reshape(handle, d, "schema drop") : rc;
}

/* --------------------------------------------------------- transactions */

static int pg_begin(void *handle, outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    int rc = outbox_pg_no_open_tx(h, "begin", d);
    if (rc != OUTBOX_OK)
        return outbox_pg_fail(d, OUTBOX_EINVAL, "a transaction is already open on this handle");
    h->tx_error = OUTBOX_OK;
    return outbox_pg_command(h, "BEGIN", d, "begin");
}

static int pg_commit(void *handle, outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    if (PQstatus(h->conn) != CONNECTION_OK)
        return outbox_pg_fail(d, OUTBOX_ETRANSIENT,
                              "commit: the connection was lost, so the transaction was rolled back");
    switch (PQtransactionStatus(h->conn)) {
    case PQTRANS_INTRANS:
        break;
    case PQTRANS_INERROR: {
        /* COMMIT would only answer ROLLBACK; say why instead. */
        int code = h->tx_error != OUTBOX_OK ? h->tx_error : OUTBOX_EPERMANENT;
        PGresult *r = PQexec(h->conn, "ROLLBACK");
        PQclear(r);
        return outbox_pg_fail(d, code,
                              "commit: a statement in the transaction failed, so it was rolled back");
    }
    default:
        return outbox_pg_fail(d, OUTBOX_ETRANSIENT,
                              "commit: no transaction is open (the connection was reset and the "
                              "transaction rolled back)");
    }
    PGresult *r = PQexec(h->conn, "COMMIT");
    int rc = OUTBOX_OK;
    if (!outbox_pg_result_ok(r))
        rc = outbox_pg_result_fail(h->conn, r, d, "commit");
    else if (strcmp(PQcmdStatus(r), "ROLLBACK") == 0)
        rc = outbox_pg_fail(d, OUTBOX_EPERMANENT, "commit: the server rolled the transaction back");
    PQclear(r);
    return rc;
}

static int pg_rollback(void *handle, outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    if (PQstatus(h->conn) != CONNECTION_OK)
        return OUTBOX_OK; /* the server rolled it back when the session ended */
    PGTransactionStatusType st = PQtransactionStatus(h->conn);
    if (st != PQTRANS_INTRANS && st != PQTRANS_INERROR)
        return OUTBOX_OK;
    return outbox_pg_simple(h->conn, "ROLLBACK", d, "rollback");
}

/* A separate session with BEGIN issued: what an application would hand to
 * outbox_store_stage() as its own transaction. */
static int pg_native_begin(void *handle, void **native_tx, outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    if (!native_tx)
        return outbox_pg_fail(d, OUTBOX_EINVAL, "native_begin needs an output");
    *native_tx = NULL;
    PGconn *conn = NULL;
    int rc = outbox_pg_open_conn(h->conninfo, &conn, d);
    if (rc == OUTBOX_OK)
        rc = outbox_pg_simple(conn, "BEGIN", d, "native begin");
    if (rc != OUTBOX_OK) {
        if (conn)
            PQfinish(conn);
        return rc;
    }
    *native_tx = conn;
    return OUTBOX_OK;
}

static int pg_native_end(void *handle, void *native_tx, int commit, outbox_diag_t *d)
{
    (void)handle;
    PGconn *conn = native_tx;
    if (!conn)
        return outbox_pg_fail(d, OUTBOX_EINVAL, "native_end needs the connection native_begin gave");
    int rc = OUTBOX_OK;
    if (PQstatus(conn) != CONNECTION_OK) {
        if (commit)
            rc = outbox_pg_fail(d, OUTBOX_ETRANSIENT,
                                "native commit: the connection was lost, nothing was committed");
    } else if (commit && PQtransactionStatus(conn) == PQTRANS_INERROR) {
        PQclear(PQexec(conn, "ROLLBACK"));
        rc = outbox_pg_fail(d, OUTBOX_EPERMANENT,
                            "native commit: the transaction had failed and was rolled back");
    } else {
        rc = outbox_pg_simple(conn, commit ? "COMMIT" : "ROLLBACK", d,
                              commit ? "native commit" : "native rollback");
    }
    PQfinish(conn);
    return rc;
}

/* ----------------------------------------------------------- descriptor */

static int pg_init(const outbox_host_t *host, outbox_diag_t *d)
{
    /* ABI 1.1's verror is the last entry the driver uses. */
    if (!host || !OUTBOX_STRUCT_HAS(outbox_host_t, host, verror) || !host->alloc ||
        !host->realloc || !host->free || !host->error || !host->log || !host->now_us ||
        !host->monotonic_us || !host->verror) {
        if (d) {
            d->code = OUTBOX_EABI;
            snprintf(d->message, sizeof d->message,
                     "postgres driver: the host services table is missing or incomplete");
        }
        return OUTBOX_EABI;
    }
    outbox_pg_host = host;
    if (!PQisthreadsafe())
        return outbox_pg_fail(d, OUTBOX_ENOTSUP, "postgres driver needs a thread-safe libpq");
    if (PQlibVersion() < 100000)
        return outbox_pg_fail(d, OUTBOX_ENOTSUP, "postgres driver needs libpq 10 or later, found %d",
                              PQlibVersion());
    return OUTBOX_OK;
}

static const outbox_store_vtable_t pg_vtable = {
    .struct_size = sizeof(outbox_store_vtable_t),
    .open = pg_open,
    .close = pg_close,
    .capabilities = pg_capabilities,
    .schema_ddl = outbox_pg_schema_ddl,
    .schema_apply = pg_schema_apply,
    .schema_check = outbox_pg_schema_check,
    .begin = pg_begin,
    .commit = pg_commit,
    .rollback = pg_rollback,
    .stage = outbox_pg_stage,
    .claim = outbox_pg_claim,
    .settle = outbox_pg_settle,
    .checkpoint_advance = outbox_pg_checkpoint_advance,
    .checkpoint_recover = outbox_pg_checkpoint_recover,
    .wait = outbox_pg_wait,
    .stats = outbox_pg_stats,
    .replay = outbox_pg_replay,
    .purge = outbox_pg_purge,
    .schema_drop = pg_schema_drop,
    .native_begin = pg_native_begin,
    .native_end = pg_native_end,
    .routes = outbox_pg_routes,
    .dead_list = outbox_pg_dead_list,
    .renew = outbox_pg_renew,
    .inbox_accept = outbox_pg_inbox_accept,
    .inbox_purge = outbox_pg_inbox_purge,
    .inbox_stats = outbox_pg_inbox_stats,
};

static const char *const pg_schemes[] = {"postgresql", "postgres", NULL};

static const outbox_driver_t pg_descriptor = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = OUTBOX_ABI_MAJOR,
    .abi_minor = 5, /* the lowest it keeps the promises of: a RELEASE with available_at is 1.5 */
    .kind = OUTBOX_DRIVER_STORE,
    .name = "postgres",
    .version = OUTBOX_VERSION,
    .schemes = pg_schemes,
    .capabilities = PG_BASE_CAPS,
    .init = pg_init,
    .store = &pg_vtable,
    .sink = NULL,
};

OUTBOX_DRIVER_ENTRY(pg_descriptor)
