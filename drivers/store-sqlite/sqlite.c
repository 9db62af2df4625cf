/* SQLite store driver, top floor: the descriptor and the vtable. Opening
 * and closing a handle, its capabilities, the application-facing
 * transaction calls, native handles for the conformance battery, and init.
 * Everything else the vtable points at lives on the floors below (see
 * sqlite_int.h); nothing calls into this file.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sqlite_int.h"
#include "outbox/version.h"

/* RETURNING (3.35) is what lets claim update and read in one statement. */
#define SQ_MIN_SQLITE 3035000

#define SQ_BASE_CAPS \
    (OUTBOX_STORE_CAP_TRANSACTIONS | OUTBOX_STORE_CAP_NATIVE_TX | OUTBOX_STORE_CAP_CONCURRENT | \
     OUTBOX_STORE_CAP_DELAYED)

#define SQ_DEFAULT_BUSY_MS 5000

/* ------------------------------------------------------------ open/close */

static void sq_close(void *handle)
{
    sq_handle_t *h = handle;
    if (!h)
        return;
    outbox_sqlite_disconnect(h);
    outbox_sqlite_host->free(h->insert_sql);
    outbox_sqlite_host->free(h->ckpt_sql);
    outbox_sqlite_drop_index_names(h);
    outbox_sqlite_host->free(h);
}

static int parse_params(const outbox_uri_t *uri, int *busy_ms, outbox_diag_t *d)
{
    static const char *const known[] = {"busy_timeout", NULL};
    *busy_ms = SQ_DEFAULT_BUSY_MS;
    const char *unknown = outbox_kit_uri_unknown(uri, known);
    if (unknown)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL,
                                  "unknown sqlite URI parameter \"%s\" (known: busy_timeout)",
                                  unknown);
    /* The one option grammar: busy_timeout=10s, 500ms, 0ms. */
    int64_t us = (int64_t)*busy_ms * 1000;
    int rc = outbox_kit_opt_duration(outbox_sqlite_host, uri, "sqlite store", "busy_timeout", 0,
                                     (int64_t)INT_MAX * 1000, &us, d);
    if (rc == OUTBOX_OK)
        *busy_ms = (int)((us + 999) / 1000);
    return rc;
}

static int check_uri(const outbox_uri_t *uri, outbox_diag_t *d)
{
    if (!uri)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL, "no URI given");
    char shown[OUTBOX_MESSAGE_MAX / 2];
    outbox_kit_uri_show(outbox_sqlite_host, uri, shown, sizeof shown);
    if ((uri->host && *uri->host) || uri->user || uri->password || uri->port)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL,
                                  "sqlite URI \"%s\" has a host part; use sqlite:///abs/path.db "
                                  "or sqlite:relative.db",
                                  shown);
    if (!uri->path || !*uri->path)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL,
                                  "sqlite URI \"%s\" has no database path; use "
                                  "sqlite:///abs/path.db or sqlite:relative.db",
                                  shown);
    return OUTBOX_OK;
}

static int sq_open(const outbox_store_open_t *params, void **handle, outbox_diag_t *d)
{
    if (!handle)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL, "no handle pointer given");
    *handle = NULL;
    if (!params)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL, "no open parameters given");
    int rc = check_uri(params->uri, d);
    int busy_ms = 0;
    if (rc == OUTBOX_OK)
        rc = parse_params(params->uri, &busy_ms, d);
    if (rc != OUTBOX_OK)
        return rc;

    sq_handle_t *h = outbox_sqlite_host->alloc(sizeof *h);
    if (!h)
        return outbox_sqlite_nomem(d);
    memset(h, 0, sizeof *h);

    int schema_only = (params->flags & OUTBOX_OPEN_SCHEMA_ONLY) != 0;
    int create = schema_only && !(params->flags & OUTBOX_OPEN_MUST_EXIST);
    int mode = (params->flags & OUTBOX_OPEN_READ_ONLY) ? SQ_OPEN_READ_ONLY
               : create                                 ? SQ_OPEN_CREATE
                                                        : SQ_OPEN_WRITE;
    rc = outbox_sqlite_rel_parse(params->relation ? params->relation : "outbox", &h->rel, d);
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_rel_checkpoint(params->checkpoint_relation, &h->rel, &h->ckpt, d);
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_rel_inbox(OUTBOX_STRUCT_HAS(outbox_store_open_t, params, inbox_relation)
                                         ? params->inbox_relation
                                         : NULL,
                                     &h->rel, &h->inbox, d);
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_connect(h, params->uri->path, mode, busy_ms, d);
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_require_attached(h->db, &h->rel, d);
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_detect(h, !schema_only, d);
    if (rc == OUTBOX_OK)
        rc = outbox_sqlite_rows_prepare_sql(h, d);
    if (rc != OUTBOX_OK) {
        sq_close(h);
        return rc;
    }
    *handle = h;
    return OUTBOX_OK;
}

static uint32_t sq_capabilities(void *handle)
{
    const sq_handle_t *h = handle;
    uint32_t caps = SQ_BASE_CAPS;
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

/* Schema apply and drop change which columns and tables exist, so the
 * handle looks at its table again afterwards. */
static int refreshed(void *handle, int rc, outbox_diag_t *d)
{
    return rc == OUTBOX_OK ? outbox_sqlite_refresh(handle, d) : rc;
}

static int sq_schema_apply(void *handle, const outbox_schema_opts_t *opts, outbox_diag_t *d)
{
    return refreshed(handle, outbox_sqlite_schema_apply(handle, opts, d), d);
}

static int sq_schema_drop(void *handle, const outbox_schema_opts_t *opts, outbox_diag_t *d)
{
    return refreshed(handle, outbox_sqlite_schema_drop(handle, opts, d), d);
}

/* --------------------------------------------------------- transactions */

static int sq_begin(void *handle, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    if (!sqlite3_get_autocommit(h->db))
        return outbox_sqlite_fail(d, OUTBOX_EINVAL, "a transaction is already open on this handle");
    return outbox_sqlite_tx_begin(h, d);
}

static int sq_commit(void *handle, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    if (sqlite3_get_autocommit(h->db))
        return outbox_sqlite_fail(d, OUTBOX_EINVAL, "commit: no transaction is open on this handle");
    return outbox_sqlite_tx_commit(h, d);
}

static int sq_rollback(void *handle, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    if (sqlite3_get_autocommit(h->db))
        return OUTBOX_OK;
    return outbox_sqlite_tx_rollback(h, d);
}

/* A second connection to the handle's database, as an application would
 * open one, with a write transaction begun on it. */
static int sq_native_begin(void *handle, void **native_tx, outbox_diag_t *d)
{
    sq_handle_t *h = handle;
    if (!native_tx)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL, "no native handle pointer given");
    *native_tx = NULL;
    const char *path = sqlite3_db_filename(h->db, "main");
    if (!path || !*path)
        return outbox_sqlite_fail(d, OUTBOX_ENOTSUP,
                                  "an in-memory or temporary database cannot be opened twice");
    sqlite3 *app = NULL;
    int rc = sqlite3_open_v2(path, &app, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(app, h->busy_ms);
        rc = sqlite3_exec(app, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    }
    if (rc != SQLITE_OK) {
        int code = outbox_sqlite_dbfail(d, app, rc, "opening a native transaction");
        sqlite3_close_v2(app);
        return code;
    }
    *native_tx = app;
    return OUTBOX_OK;
}

static int sq_native_end(void *handle, void *native_tx, int commit, outbox_diag_t *d)
{
    (void)handle;
    sqlite3 *app = native_tx;
    if (!app)
        return outbox_sqlite_fail(d, OUTBOX_EINVAL, "no native handle given");
    int code = OUTBOX_OK;
    if (!sqlite3_get_autocommit(app)) {
        int rc = sqlite3_exec(app, commit ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL);
        if (rc != SQLITE_OK) {
            code = outbox_sqlite_dbfail(d, app, rc,
                                        commit ? "committing the native transaction"
                                               : "rolling back the native transaction");
            sqlite3_exec(app, "ROLLBACK", NULL, NULL, NULL);
        }
    } else if (commit) {
        code = outbox_sqlite_fail(d, OUTBOX_EPERMANENT,
                                  "the native transaction was already rolled back");
    }
    sqlite3_close_v2(app);
    return code;
}

/* ----------------------------------------------------------- descriptor */

static int sq_init(const outbox_host_t *host, outbox_diag_t *d)
{
    if (!host || !OUTBOX_STRUCT_HAS(outbox_host_t, host, verror) || !host->alloc ||
        !host->realloc || !host->free || !host->error || !host->log || !host->now_us ||
        !host->monotonic_us || !host->verror) {
        if (d) {
            d->code = OUTBOX_EABI;
            snprintf(d->message, sizeof d->message,
                     "sqlite driver: the host services table is missing or incomplete (it needs "
                     "ABI 1.1 with every entry set)");
        }
        return OUTBOX_EABI;
    }
    outbox_sqlite_host = host;
    if (sqlite3_libversion_number() < SQ_MIN_SQLITE)
        return outbox_sqlite_fail(d, OUTBOX_ENOTSUP, "sqlite driver needs SQLite 3.35 or later, found %s",
                                  sqlite3_libversion());
    if (!sqlite3_threadsafe())
        return outbox_sqlite_fail(d, OUTBOX_ENOTSUP,
                                  "sqlite driver needs a thread-safe SQLite build (SQLITE_THREADSAFE=0 found)");
    return OUTBOX_OK;
}

static const outbox_store_vtable_t sq_vtable = {
    .struct_size = sizeof(outbox_store_vtable_t),
    .open = sq_open,
    .close = sq_close,
    .capabilities = sq_capabilities,
    .schema_ddl = outbox_sqlite_schema_ddl,
    .schema_apply = sq_schema_apply,
    .schema_check = outbox_sqlite_schema_check,
    .begin = sq_begin,
    .commit = sq_commit,
    .rollback = sq_rollback,
    .stage = outbox_sqlite_stage,
    .claim = outbox_sqlite_claim,
    .settle = outbox_sqlite_settle,
    .checkpoint_advance = outbox_sqlite_checkpoint_advance,
    .checkpoint_recover = outbox_sqlite_checkpoint_recover,
    .inbox_accept = outbox_sqlite_inbox_accept,
    .inbox_purge = outbox_sqlite_inbox_purge,
    .inbox_stats = outbox_sqlite_inbox_stats,
    .wait = NULL,
    .stats = outbox_sqlite_stats,
    .replay = outbox_sqlite_replay,
    .purge = outbox_sqlite_purge,
    .schema_drop = sq_schema_drop,
    .native_begin = sq_native_begin,
    .native_end = sq_native_end,
    .routes = outbox_sqlite_routes,
    .dead_list = outbox_sqlite_dead_list,
    .renew = outbox_sqlite_renew,
};

static const char *const sq_schemes[] = {"sqlite", NULL};

static const outbox_driver_t sq_descriptor = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = OUTBOX_ABI_MAJOR,
    .abi_minor = 5, /* the lowest it keeps the promises of: a RELEASE with available_at is 1.5 */
    .kind = OUTBOX_DRIVER_STORE,
    .name = "sqlite",
    .version = OUTBOX_VERSION,
    .schemes = sq_schemes,
    .capabilities = SQ_BASE_CAPS,
    .init = sq_init,
    .store = &sq_vtable,
    .sink = NULL,
};

OUTBOX_DRIVER_ENTRY(sq_descriptor)
