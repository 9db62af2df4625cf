/* SQLite store driver, ground floor: the host table, error reports and
 * relation names. Text only: nothing here touches a connection or a handle,
 * so every other file may call it.
 */
#include <stdarg.h>

#include "sqlite_int.h"

SQ_HIDDEN const outbox_host_t *outbox_sqlite_host;

/* --------------------------------------------------------------- errors */

int outbox_sqlite_fail(outbox_diag_t *d, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = outbox_sqlite_host->verror(d, code, fmt, ap);
    va_end(ap);
    return rc;
}

/* The OUTBOX_E* code for a failed SQLite call's result code (OK, ROW or
 * DONE, which are no failure, land in the default). */
static int outbox_code(int rc)
{
    switch (rc & 0xff) {
    /* Another writer holds the lock past busy_timeout, a statement went
     * stale under a schema change, or the disk hiccuped: worth a retry. */
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_SCHEMA:
    case SQLITE_INTERRUPT:
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_PROTOCOL:
        return OUTBOX_ETRANSIENT;
    case SQLITE_NOMEM:
        return OUTBOX_ENOMEM;
    case SQLITE_MISUSE:
    case SQLITE_RANGE:
        return OUTBOX_EINVAL;
    default:
        return OUTBOX_EPERMANENT;
    }
}

int outbox_sqlite_msgfail(outbox_diag_t *d, int rc, const char *what, const char *msg)
{
    return outbox_sqlite_fail(d, outbox_code(rc), "%s: %s", what, msg ? msg : sqlite3_errstr(rc));
}

int outbox_sqlite_dbfail(outbox_diag_t *d, sqlite3 *db, int rc, const char *what)
{
    return outbox_sqlite_msgfail(d, rc, what, db ? sqlite3_errmsg(db) : NULL);
}

int outbox_sqlite_nomem(outbox_diag_t *d)
{
    return outbox_sqlite_fail(d, OUTBOX_ENOMEM, "out of memory");
}

/* ------------------------------------------------------------ relations */

/* The host validates relation names already; checking again keeps the
 * driver safe when it is driven directly (tests, third-party hosts). */
int outbox_sqlite_rel_parse(const char *name, outbox_kit_relname_t *out, outbox_diag_t *d)
{
    if (outbox_kit_relname_parse(name, out) == 0)
        return OUTBOX_OK;
    if (!name || !*name)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL, "empty relation name");
    return outbox_sqlite_fail(d, OUTBOX_EINVAL,
                              "invalid relation name \"%s\": expected table or schema.table", name);
}

int outbox_sqlite_rel_checkpoint(const char *name, const outbox_kit_relname_t *base,
                                 outbox_kit_relname_t *out, outbox_diag_t *d)
{
    if (name)
        return outbox_sqlite_rel_parse(name, out, d);
    outbox_kit_relname_beside(base, "hlc_checkpoint", out);
    return OUTBOX_OK;
}

int outbox_sqlite_rel_inbox(const char *name, const outbox_kit_relname_t *base,
                            outbox_kit_relname_t *out, outbox_diag_t *d)
{
    if (name)
        return outbox_sqlite_rel_parse(name, out, d);
    outbox_kit_relname_beside(base, "outbox_inbox", out);
    return OUTBOX_OK;
}
