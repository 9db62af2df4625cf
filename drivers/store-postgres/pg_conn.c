/* PostgreSQL store driver, second floor: the handle's connection and how
 * statements run on it.
 *
 * One handle owns one libpq connection and is used by one thread at a time.
 * A lost connection fails the call in progress as transient and is
 * re-established (PQreset) by the next call, so a relay outlives a server
 * restart. The statements the handle runs often are prepared once per
 * session under a name per slot (the texts themselves are built above, in
 * pg_rows.c); everything else goes unnamed.
 */
#include <stdio.h>
#include <string.h>

#include "pg_conn.h"

/* Binary timestamps (int64 microseconds) arrived with 8.4 and are the only
 * kind since 10; ON CONFLICT needs 9.5, SKIP LOCKED 9.5, MATERIALIZED CTEs 12. */
#define PG_MIN_SERVER 120000

static const char *const slot_names[PG_SLOT_COUNT] = {
    "outbox_stage", "outbox_stage_ckpt", "outbox_claim", "outbox_claim_hlc",
    "outbox_settle", "outbox_renew", "outbox_ckpt_advance", "outbox_ckpt_recover",
    "outbox_inbox_accept",
};

/* ---------------------------------------------------------- connecting */

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

/* Appends key='value' to a libpq connection string. */
static void conninfo_param(outbox_kit_buf_t *b, const char *key, const char *value)
{
    if (b->len)
        outbox_kit_buf_putc(b, ' ');
    outbox_kit_buf_puts(b, key);
    outbox_kit_buf_puts(b, "='");
    for (const char *p = value; *p; p++) {
        if (*p == '\'' || *p == '\\')
            outbox_kit_buf_putc(b, '\\');
        outbox_kit_buf_putc(b, *p);
    }
    outbox_kit_buf_putc(b, '\'');
}

/* The connection string for libpq. Three spellings reach us:
 *   postgresql://user@host:port/db?sslmode=...  (also postgres://) a libpq
 *     URI, handed over as written but for the scheme's case;
 *   postgresql:host=/run/pg dbname=app  a libpq key=value string after the
 *     scheme (percent-decoded, so '%' is written %25 and '?' %3F);
 *   postgresql:?host=/run/pg&dbname=app  the same as URI parameters.
 * A bare "postgresql:" uses libpq's defaults and PG* environment. */
int outbox_pg_conninfo(const outbox_uri_t *uri, char **out, outbox_diag_t *d)
{
    *out = NULL;
    if (!uri || !uri->raw || !uri->scheme)
        return outbox_pg_fail(d, OUTBOX_EINVAL, "no URI given");
    const char *colon = strchr(uri->raw, ':');
    if (!colon)
        return outbox_pg_fail(d, OUTBOX_EINVAL, "URI without a scheme");
    const char *rest = colon + 1;
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_pg_host);
    if (rest[0] == '/' && rest[1] == '/') {
        /* libpq recognises the URI only by its lower-case prefix. */
        outbox_kit_buf_puts(&b, "postgresql:");
        outbox_kit_buf_puts(&b, rest);
    } else {
        if (uri->path)
            outbox_kit_buf_puts(&b, uri->path);
        for (size_t i = 0; i < uri->n_params; i++) {
            const outbox_uri_param_t *p = &uri->params[i];
            if (!p->key || !outbox_kit_ident_valid(p->key, strlen(p->key))) {
                outbox_kit_buf_free(&b);
                return outbox_pg_fail(d, OUTBOX_EINVAL, "invalid connection parameter name \"%.64s\"",
                                      p->key ? p->key : "");
            }
            conninfo_param(&b, p->key, p->value ? p->value : "");
        }
    }
    char *conninfo = outbox_kit_buf_steal(&b); /* "" for a bare "postgresql:" */
    if (!conninfo)
        return outbox_pg_nomem(d);
    /* Let libpq judge the syntax now, so a typo is "invalid argument" with
     * libpq's reason rather than a failed connection. */
    char *err = NULL;
    PQconninfoOption *opts = PQconninfoParse(conninfo, &err);
    if (!opts) {
        /* libpq's reason may quote the connection string. */
        char line[OUTBOX_MESSAGE_MAX];
        outbox_kit_uri_redact(outbox_pg_host, uri, err ? err : "out of memory", line, sizeof line);
        PQfreemem(err);
        outbox_pg_host->free(conninfo);
        return outbox_pg_fail(d, OUTBOX_EINVAL, "invalid PostgreSQL connection string: %s", line);
    }
    PQconninfoFree(opts);
    *out = conninfo;
    return OUTBOX_OK;
}

/* Server notices (a WARNING as the server shuts down, a NOTICE from a
 * trigger) go to the host's logger: libpq's default prints them on stderr,
 * past the relay's --log-file and --log-format. Warnings are warnings,
 * everything milder is info, on one line. */
static void log_notice(void *arg, const PGresult *r)
{
    (void)arg;
    const char *severity = PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED);
    const char *text = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
    if (!text)
        text = PQresultErrorMessage(r);
    int level = OUTBOX_LOG_INFO;
    if (severity && (!strcmp(severity, "WARNING") || !strcmp(severity, "ERROR") ||
                     !strcmp(severity, "FATAL") || !strcmp(severity, "PANIC")))
        level = OUTBOX_LOG_WARN;
    char line[OUTBOX_MESSAGE_MAX];
    outbox_kit_text_line(text ? text : "", line, sizeof line);
    outbox_pg_host->log(level, PG_NAME, "server %s: %s", severity ? severity : "notice", line);
}

/* A new connection with the driver's settings: UTF8 on the wire, whatever
 * the user's string says, because payloads and keys are UTF-8. */
int outbox_pg_open_conn(const char *conninfo, PGconn **out, outbox_diag_t *d)
{
    const char *const keys[] = {"dbname", "fallback_application_name", "client_encoding", NULL};
    const char *const vals[] = {conninfo, "liboutbox", "UTF8", NULL};
    *out = NULL;
    PGconn *conn = PQconnectdbParams(keys, vals, 1);
    if (!conn)
        return outbox_pg_nomem(d);
    PQsetNoticeReceiver(conn, log_notice, NULL);
    if (PQstatus(conn) != CONNECTION_OK) {
        char line[OUTBOX_MESSAGE_MAX];
        outbox_kit_text_line(PQerrorMessage(conn), line, sizeof line);
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
 * it has run five times (see build_claim in pg_rows.c), with the
 * statistics of that moment. A relay started on an empty or small table
 * would keep a plan that reads the whole table on every claim (claims grew
 * from 0.4 to 5 ms within ten seconds at 1,000 events/s) until
 * autovacuum's next analyze invalidated it. Every statement of the driver
 * has an index made for it, so forbidding sequential scans only ever
 * removes that trap.
 *
 * jit = off: JIT compiles a statement whose estimated cost passes
 * jit_above_cost (100,000), and that estimate is no measure of the work
 * here: a plan that still holds a disabled sequential scan is charged
 * 10^10 for it, and a claim over a large backlog is costed as if it read
 * the backlog although its LIMIT stops it early. On a table without the
 * shipped indexes every claim then spent about a second compiling (42 ms
 * to run). The driver's statements touch a batch of rows each; compiling
 * them never pays back. */
static int session_setup(PGconn *conn, int read_only, outbox_diag_t *d)
{
    PGresult *r = NULL;
    int rc = outbox_pg_exec_on(conn,
                               "SELECT set_config('enable_seqscan', 'off', false), "
                               "set_config('jit', 'off', false)",
                               0, NULL, NULL, NULL, 0, &r, d, "setting up the session");
    PQclear(r);
    /* A read-only caller (stats, schema check) cannot change the data even
     * by mistake; the server refuses any write. */
    if (rc == OUTBOX_OK && read_only)
        rc = outbox_pg_simple(conn, "SET default_transaction_read_only = on", d,
                              "setting up the session read-only");
    return rc;
}

int outbox_pg_connect(pg_handle_t *h, outbox_diag_t *d)
{
    int rc = outbox_pg_open_conn(h->conninfo, &h->conn, d);
    return rc == OUTBOX_OK ? session_setup(h->conn, h->read_only, d) : rc;
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
        outbox_kit_text_line(PQerrorMessage(h->conn), line, sizeof line);
        return outbox_pg_fail(d, OUTBOX_ETRANSIENT, "connection to PostgreSQL lost, reconnecting failed: %s",
                              line);
    }
    int rc = session_setup(h->conn, h->read_only, d);
    if (rc != OUTBOX_OK)
        return rc;
    outbox_pg_host->log(OUTBOX_LOG_INFO, PG_NAME, "reconnected to PostgreSQL");
    return OUTBOX_OK;
}

/* ---------------------------------------------------------- statements */

/* 26000: the session no longer has the prepared statement (DISCARD ALL by
 * a pooler, say). */
static int statement_gone(const PGresult *r)
{
    const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    return state && strcmp(state, "26000") == 0;
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
            if (!outbox_pg_result_ok(p)) {
                rc = outbox_pg_result_fail(h->conn, p, d, what);
                PQclear(p);
                return outbox_pg_tx_note(h, rc);
            }
            PQclear(p);
            h->prepared |= bit;
        }
        PGresult *r = PQexecPrepared(h->conn, slot_names[slot], nparams, values, lengths, formats,
                                     binary_result);
        if (outbox_pg_result_ok(r)) {
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
    if (outbox_pg_result_ok(r)) {
        *res = r;
        return OUTBOX_OK;
    }
    int rc = outbox_pg_result_fail(conn, r, d, what);
    PQclear(r);
    return rc;
}

int outbox_pg_simple(PGconn *conn, const char *sql, outbox_diag_t *d, const char *what)
{
    PGresult *r = PQexec(conn, sql);
    int rc = outbox_pg_result_ok(r) ? OUTBOX_OK : outbox_pg_result_fail(conn, r, d, what);
    PQclear(r);
    return rc;
}

int outbox_pg_command(pg_handle_t *h, const char *sql, outbox_diag_t *d, const char *what)
{
    int rc = outbox_pg_connected(h, d);
    if (rc != OUTBOX_OK)
        return rc;
    return outbox_pg_tx_note(h, outbox_pg_simple(h->conn, sql, d, what));
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
    if (!outbox_pg_result_ok(r) && !statement_gone(r))
        rc = outbox_pg_result_fail(h->conn, r, d, what);
    PQclear(r);
    if (rc == OUTBOX_OK)
        h->prepared &= ~bit;
    return rc;
}

/* -------------------------------------------------------- transactions */

int outbox_pg_no_open_tx(pg_handle_t *h, const char *op, outbox_diag_t *d)
{
    PGTransactionStatusType st = PQtransactionStatus(h->conn);
    if (PQstatus(h->conn) == CONNECTION_OK && (st == PQTRANS_INTRANS || st == PQTRANS_INERROR))
        return outbox_pg_fail(d, OUTBOX_EINVAL,
                              "%s runs its own transaction; commit or roll back the open one first",
                              op);
    return OUTBOX_OK;
}

int outbox_pg_in_own_tx(pg_handle_t *h, const char *op, outbox_diag_t *d)
{
    if (PQstatus(h->conn) != CONNECTION_OK)
        return outbox_pg_fail(d, OUTBOX_ETRANSIENT,
                              "%s: the connection was lost, and the transaction with it", op);
    if (PQtransactionStatus(h->conn) != PQTRANS_INTRANS &&
        PQtransactionStatus(h->conn) != PQTRANS_INERROR)
        return outbox_pg_fail(d, OUTBOX_EINVAL, "%s in the handle's transaction, but none is open",
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

int outbox_pg_tx_note(pg_handle_t *h, int code)
{
    if (code != OUTBOX_OK && h->tx_error == OUTBOX_OK &&
        PQtransactionStatus(h->conn) == PQTRANS_INERROR)
        h->tx_error = code;
    return code;
}
