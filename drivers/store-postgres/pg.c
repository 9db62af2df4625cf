/* PostgreSQL store driver: descriptor, connection, errors, transactions and
 * the helpers the other files share.
 *
 * One handle owns one libpq connection and is used by one thread at a time.
 * Any number of handles, in any number of processes, claim one route at
 * once: the claim statement itself keeps them apart (pg_rows.c). A lost
 * connection fails the call in progress as transient and is re-established
 * (PQreset) by the next call, so a relay outlives a server restart.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_int.h"

#define PG_BASE_CAPS                                                                         \
    (OUTBOX_STORE_CAP_TRANSACTIONS | OUTBOX_STORE_CAP_NATIVE_TX | OUTBOX_STORE_CAP_CONCURRENT | \
     OUTBOX_STORE_CAP_WAIT)

/* Binary timestamps (int64 microseconds) arrived with 8.4 and are the only
 * kind since 10; ON CONFLICT needs 9.5, SKIP LOCKED 9.5, MATERIALIZED CTEs 12. */
#define PG_MIN_SERVER 120000

PG_HIDDEN const outbox_host_t *outbox_pg_host;

static const char *const slot_names[PG_SLOT_COUNT] = {
    "outbox_stage", "outbox_stage_ckpt", "outbox_claim", "outbox_claim_hlc",
    "outbox_settle", "outbox_ckpt_advance", "outbox_ckpt_recover",
};

/* --------------------------------------------------------------- errors */

int outbox_pg_fail(outbox_diag_t *d, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = outbox_pg_host->verror(d, code, fmt, ap);
    va_end(ap);
    return rc;
}

int outbox_pg_nomem(outbox_diag_t *d)
{
    return outbox_pg_fail(d, OUTBOX_ENOMEM, "out of memory");
}

int outbox_pg_sqlstate_code(const char *s)
{
    if (!s || strlen(s) != 5)
        return OUTBOX_EPERMANENT;
    /* Worth a retry: the same call may well succeed in a moment. */
    static const char *const transient[] = {
        "40001", /* serialization_failure */
        "40P01", /* deadlock_detected */
        "55P03", /* lock_not_available */
        "55006", /* object_in_use */
        "57P01", /* admin_shutdown */
        "57P02", /* crash_shutdown */
        "57P03", /* cannot_connect_now */
        "57014", /* query_canceled (statement_timeout) */
        "25006", /* read_only_sql_transaction: a standby, until failover ends */
        NULL,
    };
    for (size_t i = 0; transient[i]; i++)
        if (strcmp(s, transient[i]) == 0)
            return OUTBOX_ETRANSIENT;
    if (strncmp(s, "08", 2) == 0 || /* connection_exception */
        strncmp(s, "53", 2) == 0 || /* insufficient_resources (too many connections, disk full) */
        strncmp(s, "58", 2) == 0)   /* system_error (I/O) */
        return OUTBOX_ETRANSIENT;
    if (strcmp(s, "42P01") == 0 || strcmp(s, "42703") == 0 || strcmp(s, "3F000") == 0 ||
        strcmp(s, "42704") == 0 || strcmp(s, "42P10") == 0)
        return OUTBOX_ESCHEMA; /* undefined table/column/schema/object, no matching unique index */
    if (strncmp(s, "22", 2) == 0) /* data_exception: a value the column cannot take */
        return OUTBOX_EINVAL;
    if (strcmp(s, "53200") == 0)
        return OUTBOX_ENOMEM;
    return OUTBOX_EPERMANENT; /* 23 integrity, 42 syntax/privilege, ... */
}

int outbox_pg_result_fail(PGconn *conn, const PGresult *res, outbox_diag_t *d, const char *what)
{
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    const char *primary = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    const char *detail = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL) : NULL;
    char msg[OUTBOX_MESSAGE_MAX];
    if (primary)
        snprintf(msg, sizeof msg, "%s%s%s%s", primary, detail ? " (" : "", detail ? detail : "",
                 detail ? ")" : "");
    else
        snprintf(msg, sizeof msg, "%s", conn ? PQerrorMessage(conn) : "no connection");
    /* libpq messages end with a newline and may span lines; a diagnostic is one. */
    char line[OUTBOX_MESSAGE_MAX];
    outbox_text_line(msg, line, sizeof line);
    int code;
    if (!conn || PQstatus(conn) != CONNECTION_OK)
        code = OUTBOX_ETRANSIENT; /* whatever the statement was, the server is gone */
    else if (state)
        code = outbox_pg_sqlstate_code(state);
    else if (res && PQresultStatus(res) == PGRES_FATAL_ERROR && !state)
        code = OUTBOX_ETRANSIENT; /* a client-side failure: lost connection, out of sync */
    else
        code = OUTBOX_EPERMANENT;
    if (state)
        return outbox_pg_fail(d, code, "%s: %s [SQLSTATE %s]", what, line[0] ? line : "failed", state);
    return outbox_pg_fail(d, code, "%s: %s", what, line[0] ? line : "failed");
}

/* ------------------------------------------------------------ relations */

/* The host validates relation names already; checking again keeps the
 * driver safe when it is driven directly (tests, third-party hosts). */
int outbox_pg_relname(const char *name, outbox_relname_t *out, outbox_diag_t *d)
{
    if (!name || !*name) {
        out->schema[0] = out->table[0] = '\0';
        return outbox_pg_fail(d, OUTBOX_EINVAL, "empty relation name");
    }
    if (outbox_relname_parse(name, out) != 0)
        return outbox_pg_fail(d, OUTBOX_EINVAL,
                              "invalid relation name \"%.160s\": expected table or schema.table",
                              name);
    return OUTBOX_OK;
}

int outbox_pg_relname_ckpt(const char *name, const outbox_relname_t *base, outbox_relname_t *out,
                           outbox_diag_t *d)
{
    if (name)
        return outbox_pg_relname(name, out, d);
    outbox_relname_beside(base, "hlc_checkpoint", out);
    return OUTBOX_OK;
}

/* ---------------------------------------------------------- connection */

static int connect_code(PGconn *conn)
{
    /* libpq gives no SQLSTATE for a failed connection, only text. Bad
     * credentials, an unknown database or a refused role will not fix
     * themselves; anything else (refused, timed out, starting up) may. */
    if (PQconnectionNeedsPassword(conn))
        return OUTBOX_EPERMANENT;
    const char *m = PQerrorMessage(conn);
    static const char *const permanent[] = {
        "does not exist", "authentication failed", "no pg_hba.conf entry", "permission denied",
        "password", "invalid", "unsupported", "certificate", NULL,
    };
    for (size_t i = 0; permanent[i]; i++)
        if (strstr(m, permanent[i]))
            return OUTBOX_EPERMANENT;
    return OUTBOX_ETRANSIENT;
}

/* A new connection with the driver's settings: UTF8 on the wire, whatever
 * the user's string says, because payloads and keys are UTF-8. */
static int open_conn(const char *conninfo, PGconn **out, outbox_diag_t *d)
{
    const char *const keys[] = {"dbname", "fallback_application_name", "client_encoding", NULL};
    const char *const vals[] = {conninfo, "liboutbox", "UTF8", NULL};
    *out = NULL;
    PGconn *conn = PQconnectdbParams(keys, vals, 1);
    if (!conn)
        return outbox_pg_nomem(d);
    if (PQstatus(conn) != CONNECTION_OK) {
        char line[OUTBOX_MESSAGE_MAX];
        outbox_text_line(PQerrorMessage(conn), line, sizeof line);
        int code = connect_code(conn);
        PQfinish(conn);
        return outbox_pg_fail(d, code, "cannot connect to PostgreSQL: %s", line);
    }
    if (PQserverVersion(conn) < PG_MIN_SERVER) {
        int v = PQserverVersion(conn);
        PQfinish(conn);
        return outbox_pg_fail(d, OUTBOX_ENOTSUP,
                              "the postgres driver needs PostgreSQL 12 or later, the server is %d.%d",
                              v / 10000, v % 10000);
    }
    *out = conn;
    return OUTBOX_OK;
}

/* Settings of the handle's own session (never of a connection handed to
 * the application). enable_seqscan = off: the claim's plan is cached once
 * it has run five times (see build_claim), with the statistics of that
 * moment. A relay started on an empty or small table would keep a plan
 * that reads the whole table on every claim (claims grew from 0.4 to 5 ms
 * within ten seconds at 1,000 events/s) until autovacuum's next analyze
 * invalidated it. Every statement of the driver has an index made for it,
 * so forbidding sequential scans only ever removes that trap. */
static int session_setup(PGconn *conn, outbox_diag_t *d)
{
    PGresult *r = NULL;
    int rc = outbox_pg_exec_on(conn, "SET enable_seqscan = off", 0, NULL, NULL, NULL, 0, &r, d,
                               "setting up the session");
    PQclear(r);
    return rc;
}

int outbox_pg_connected(pg_handle_t *h, outbox_diag_t *d)
{
    if (PQstatus(h->conn) == CONNECTION_OK)
        return OUTBOX_OK;
    /* Statements and LISTEN belong to the old session. */
    h->prepared = 0;
    h->listening = 0;
    PQreset(h->conn);
    if (PQstatus(h->conn) != CONNECTION_OK) {
        char line[OUTBOX_MESSAGE_MAX];
        outbox_text_line(PQerrorMessage(h->conn), line, sizeof line);
        return outbox_pg_fail(d, OUTBOX_ETRANSIENT, "connection to PostgreSQL lost, reconnecting failed: %s",
                              line);
    }
    int rc = session_setup(h->conn, d);
    if (rc != OUTBOX_OK)
        return rc;
    outbox_pg_host->log(OUTBOX_LOG_INFO, PG_NAME, "reconnected to PostgreSQL");
    return OUTBOX_OK;
}

static int exec_ok(const PGresult *r)
{
    ExecStatusType st = PQresultStatus(r);
    return st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
}

/* 26000: the session no longer has the prepared statement (DISCARD ALL by
 * a pooler, say). */
static int statement_gone(const PGresult *r)
{
    const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    return state && strcmp(state, "26000") == 0;
}

int outbox_pg_tx_note(pg_handle_t *h, int code)
{
    if (code != OUTBOX_OK && h->tx_error == OUTBOX_OK &&
        PQtransactionStatus(h->conn) == PQTRANS_INERROR)
        h->tx_error = code;
    return code;
}

int outbox_pg_exec_slot(pg_handle_t *h, int slot, int nparams, const char *const *values,
                        const int *lengths, const int *formats, int binary_result, PGresult **res,
                        outbox_diag_t *d, const char *what)
{
    *res = NULL;
    int rc = outbox_pg_connected(h, d);
    if (rc != OUTBOX_OK)
        return rc;
    unsigned bit = 1u << slot;
    for (int attempt = 0;; attempt++) {
        if (!(h->prepared & bit)) {
            PGresult *p = PQprepare(h->conn, slot_names[slot], h->sql[slot], nparams, NULL);
            if (!exec_ok(p)) {
                rc = outbox_pg_result_fail(h->conn, p, d, what);
                PQclear(p);
                return outbox_pg_tx_note(h, rc);
            }
            PQclear(p);
            h->prepared |= bit;
        }
        PGresult *r = PQexecPrepared(h->conn, slot_names[slot], nparams, values, lengths, formats,
                                     binary_result);
        if (exec_ok(r)) {
            *res = r;
            return OUTBOX_OK;
        }
        /* The session lost our statement: prepare it again, unless a
         * transaction was aborted by the miss. */
        if (attempt == 0 && statement_gone(r) && PQtransactionStatus(h->conn) == PQTRANS_IDLE) {
            PQclear(r);
            h->prepared &= ~bit;
            continue;
        }
        rc = outbox_pg_result_fail(h->conn, r, d, what);
        PQclear(r);
        return outbox_pg_tx_note(h, rc);
    }
}

int outbox_pg_exec_on(PGconn *conn, const char *sql, int nparams, const char *const *values,
                      const int *lengths, const int *formats, int binary_result, PGresult **res,
                      outbox_diag_t *d, const char *what)
{
    *res = NULL;
    PGresult *r = PQexecParams(conn, sql, nparams, NULL, values, lengths, formats, binary_result);
    if (exec_ok(r)) {
        *res = r;
        return OUTBOX_OK;
    }
    int rc = outbox_pg_result_fail(conn, r, d, what);
    PQclear(r);
    return rc;
}

int outbox_pg_command(pg_handle_t *h, const char *sql, outbox_diag_t *d, const char *what)
{
    int rc = outbox_pg_connected(h, d);
    if (rc != OUTBOX_OK)
        return rc;
    PGresult *r = PQexec(h->conn, sql);
    if (!exec_ok(r))
        rc = outbox_pg_tx_note(h, outbox_pg_result_fail(h->conn, r, d, what));
    PQclear(r);
    return rc;
}

int outbox_pg_forget_slot(pg_handle_t *h, int slot, outbox_diag_t *d, const char *what)
{
    unsigned bit = 1u << slot;
    if (!(h->prepared & bit) || PQstatus(h->conn) != CONNECTION_OK) {
        h->prepared &= ~bit; /* a lost session took its statements with it */
        return OUTBOX_OK;
    }
    char sql[64];
    snprintf(sql, sizeof sql, "DEALLOCATE %s", slot_names[slot]);
    PGresult *r = PQexec(h->conn, sql);
    int rc = OUTBOX_OK;
    if (!exec_ok(r) && !statement_gone(r))
        rc = outbox_pg_result_fail(h->conn, r, d, what);
    PQclear(r);
    if (rc == OUTBOX_OK)
        h->prepared &= ~bit;
    return rc;
}

int outbox_pg_no_open_tx(pg_handle_t *h, const char *op, outbox_diag_t *d)
{
    PGTransactionStatusType st = PQtransactionStatus(h->conn);
    if (PQstatus(h->conn) == CONNECTION_OK && (st == PQTRANS_INTRANS || st == PQTRANS_INERROR))
        return outbox_pg_fail(d, OUTBOX_EINVAL,
                              "%s runs its own transaction; commit or roll back the open one first",
                              op);
    return OUTBOX_OK;
}

int outbox_pg_check_native(PGconn *app, outbox_diag_t *d)
{
    if (PQstatus(app) != CONNECTION_OK)
        return outbox_pg_fail(d, OUTBOX_ETRANSIENT, "the native PGconn is not connected");
    switch (PQtransactionStatus(app)) {
    case PQTRANS_INTRANS:
        return OUTBOX_OK;
    case PQTRANS_IDLE:
        return outbox_pg_fail(d, OUTBOX_EINVAL,
                              "the native PGconn is not inside a transaction (BEGIN first)");
    case PQTRANS_INERROR:
        return outbox_pg_fail(d, OUTBOX_EINVAL,
                              "the native PGconn's transaction has already failed; roll it back");
    default:
        return outbox_pg_fail(d, OUTBOX_EINVAL,
                              "the native PGconn is busy with another command");
    }
}

/* ---------------------------------------------------------- claim arena */

int outbox_pg_arena_reserve(pg_handle_t *h, size_t size, outbox_diag_t *d)
{
    h->n_rows = 0;
    if (size <= h->arena_cap)
        return OUTBOX_OK;
    size_t cap = h->arena_cap ? h->arena_cap : 16384;
    while (cap < size)
        cap *= 2;
    char *p = outbox_pg_host->alloc(cap);
    if (!p)
        return outbox_pg_nomem(d);
    outbox_pg_host->free(h->arena);
    h->arena = p;
    h->arena_cap = cap;
    return OUTBOX_OK;
}

void outbox_pg_rows_reset(pg_handle_t *h)
{
    h->n_rows = 0;
}

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
        outbox_buf_free(&h->params[i]);
    outbox_pg_host->free(h->rows);
    outbox_pg_host->free(h->arena);
    outbox_pg_host->free(h->conninfo);
    outbox_pg_host->free(h->rel_sql);
    outbox_pg_host->free(h->ckpt_sql);
    outbox_pg_host->free(h);
}

/* Appends key='value' to a libpq connection string. */
static void conninfo_param(outbox_buf_t *b, const char *key, const char *value)
{
    if (b->len)
        outbox_buf_putc(b, ' ');
    outbox_buf_puts(b, key);
    outbox_buf_puts(b, "='");
    for (const char *p = value; *p; p++) {
        if (*p == '\'' || *p == '\\')
            outbox_buf_putc(b, '\\');
        outbox_buf_putc(b, *p);
    }
    outbox_buf_putc(b, '\'');
}

/* The connection string for libpq. Three spellings reach us:
 *   postgresql://user@host:port/db?sslmode=...  (also postgres://) a libpq
 *     URI, handed over as written but for the scheme's case;
 *   postgresql:host=/run/pg dbname=app  a libpq key=value string after the
 *     scheme (percent-decoded, so '%' is written %25 and '?' %3F);
 *   postgresql:?host=/run/pg&dbname=app  the same as URI parameters.
 * A bare "postgresql:" uses libpq's defaults and PG* environment. */
static int build_conninfo(const outbox_uri_t *uri, char **out, outbox_diag_t *d)
{
    *out = NULL;
    if (!uri || !uri->raw || !uri->scheme)
        return outbox_pg_fail(d, OUTBOX_EINVAL, "no URI given");
    const char *colon = strchr(uri->raw, ':');
    if (!colon)
        return outbox_pg_fail(d, OUTBOX_EINVAL, "URI without a scheme");
    const char *rest = colon + 1;
    outbox_buf_t b;
    outbox_buf_init(&b, outbox_pg_host);
    if (rest[0] == '/' && rest[1] == '/') {
        /* libpq recognises the URI only by its lower-case prefix. */
        outbox_buf_puts(&b, "postgresql:");
        outbox_buf_puts(&b, rest);
    } else {
        if (uri->path)
            outbox_buf_puts(&b, uri->path);
        for (size_t i = 0; i < uri->n_params; i++) {
            const outbox_uri_param_t *p = &uri->params[i];
            if (!p->key || !outbox_ident_valid(p->key, strlen(p->key))) {
                outbox_buf_free(&b);
                return outbox_pg_fail(d, OUTBOX_EINVAL, "invalid connection parameter name \"%.64s\"",
                                      p->key ? p->key : "");
            }
            conninfo_param(&b, p->key, p->value ? p->value : "");
        }
    }
    char *conninfo = outbox_buf_steal(&b); /* "" for a bare "postgresql:" */
    if (!conninfo)
        return outbox_pg_nomem(d);
    /* Let libpq judge the syntax now, so a typo is "invalid argument" with
     * libpq's reason rather than a failed connection. */
    char *err = NULL;
    PQconninfoOption *opts = PQconninfoParse(conninfo, &err);
    if (!opts) {
        char line[OUTBOX_MESSAGE_MAX];
        outbox_text_line(err ? err : "out of memory", line, sizeof line);
        PQfreemem(err);
        outbox_pg_host->free(conninfo);
        return outbox_pg_fail(d, OUTBOX_EINVAL, "invalid PostgreSQL connection string: %s", line);
    }
    PQconninfoFree(opts);
    *out = conninfo;
    return OUTBOX_OK;
}

static int build_rel_sql(pg_handle_t *h, outbox_diag_t *d)
{
    outbox_buf_t a, c;
    outbox_buf_init(&a, outbox_pg_host);
    outbox_buf_init(&c, outbox_pg_host);
    outbox_buf_relname(&a, &h->rel, '"');
    outbox_buf_relname(&c, &h->ckpt, '"');
    h->rel_sql = outbox_buf_steal(&a);
    h->ckpt_sql = outbox_buf_steal(&c);
    if (!h->rel_sql || !h->ckpt_sql)
        return outbox_pg_nomem(d); /* pg_close frees the one that was made */
    outbox_relname_show(&h->rel, h->shown, sizeof h->shown);
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
        outbox_buf_init(&h->params[i], outbox_pg_host);

    int schema_only = (params->flags & OUTBOX_OPEN_SCHEMA_ONLY) != 0;
    int rc = build_conninfo(params->uri, &h->conninfo, d);
    if (rc == OUTBOX_OK)
        rc = outbox_pg_relname(params->relation ? params->relation : "outbox", &h->rel, d);
    if (rc == OUTBOX_OK)
        rc = outbox_pg_relname_ckpt(params->checkpoint_relation, &h->rel, &h->ckpt, d);
    if (rc == OUTBOX_OK)
        rc = build_rel_sql(h, d);
    if (rc == OUTBOX_OK)
        rc = open_conn(h->conninfo, &h->conn, d);
    if (rc == OUTBOX_OK)
        rc = session_setup(h->conn, d);
    if (rc == OUTBOX_OK)
        rc = outbox_pg_detect(h, !schema_only, d);
    if (rc == OUTBOX_OK)
        rc = outbox_pg_rows_prepare_sql(h, d);
    if (rc != OUTBOX_OK) {
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
    return caps;
}

/* Schema apply may add the optional columns; the handle looks again and
 * rebuilds its statements, forgetting the ones prepared for the old shape. */
static int pg_schema_apply(void *handle, const outbox_schema_opts_t *opts, outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    int rc = outbox_pg_schema_apply(h, opts, d);
    if (rc == OUTBOX_OK && h->prepared)
        rc = outbox_pg_command(h, "DEALLOCATE ALL", d, "schema apply");
    if (rc == OUTBOX_OK) {
        h->prepared = 0;
        rc = outbox_pg_detect(h, 0, d);
    }
    if (rc == OUTBOX_OK)
        rc = outbox_pg_rows_prepare_sql(h, d);
    return rc;
}

static int pg_schema_drop(void *handle, const outbox_schema_opts_t *opts, outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    int rc = outbox_pg_schema_drop(h, opts, d);
    if (rc == OUTBOX_OK && h->prepared)
        rc = outbox_pg_command(h, "DEALLOCATE ALL", d, "schema drop");
    if (rc == OUTBOX_OK) {
        h->prepared = 0;
        rc = outbox_pg_detect(h, 0, d);
    }
    if (rc == OUTBOX_OK)
        rc = outbox_pg_rows_prepare_sql(h, d);
    return rc;
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
    if (!exec_ok(r))
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
    PGresult *r = PQexec(h->conn, "ROLLBACK");
    int rc = exec_ok(r) ? OUTBOX_OK : outbox_pg_result_fail(h->conn, r, d, "rollback");
    PQclear(r);
    return rc;
}

/* A separate session with BEGIN issued: what an application would hand to
 * outbox_stage() as its own transaction. */
static int pg_native_begin(void *handle, void **native_tx, outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    if (!native_tx)
        return outbox_pg_fail(d, OUTBOX_EINVAL, "native_begin needs an output");
    *native_tx = NULL;
    PGconn *conn = NULL;
    int rc = open_conn(h->conninfo, &conn, d);
    if (rc != OUTBOX_OK)
        return rc;
    PGresult *r = PQexec(conn, "BEGIN");
    if (!exec_ok(r)) {
        rc = outbox_pg_result_fail(conn, r, d, "native begin");
        PQclear(r);
        PQfinish(conn);
        return rc;
    }
    PQclear(r);
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
        PGresult *r = PQexec(conn, commit ? "COMMIT" : "ROLLBACK");
        if (!exec_ok(r))
            rc = outbox_pg_result_fail(conn, r, d, commit ? "native commit" : "native rollback");
        PQclear(r);
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
};

static const char *const pg_schemes[] = {"postgresql", "postgres", NULL};

static const outbox_driver_t pg_descriptor = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = OUTBOX_ABI_MAJOR,
    .abi_minor = OUTBOX_ABI_MINOR,
    .kind = OUTBOX_DRIVER_STORE,
    .name = "postgres",
    .version = "0.1.0",
    .schemes = pg_schemes,
    .capabilities = PG_BASE_CAPS,
    .init = pg_init,
    .store = &pg_vtable,
    .sink = NULL,
};

OUTBOX_DRIVER_ENTRY(pg_descriptor)
