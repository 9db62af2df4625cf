/* MongoDB store driver, ground floor: the host table, errors and how
 * libmongoc's are mapped, libmongoc's log, collection names, dates and
 * fence tokens. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mongo_int.h"

MONGO_HIDDEN const outbox_host_t *outbox_mongo_host;

/* --------------------------------------------------------------- errors */

int outbox_mongo_fail(outbox_diag_t *d, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = outbox_mongo_host->verror(d, code, fmt, ap);
    va_end(ap);
    return rc;
}

int outbox_mongo_nomem(outbox_diag_t *d)
{
    return outbox_mongo_fail(d, OUTBOX_ENOMEM, "out of memory");
}

/* Server error codes worth a retry: the same call may well succeed in a
 * moment (a failover, a shutdown, a timeout, a write conflict). */
static int transient_server_code(uint32_t code)
{
    static const uint32_t codes[] = {
        6,     /* HostUnreachable */
        7,     /* HostNotFound */
        50,    /* MaxTimeMSExpired */
        89,    /* NetworkTimeout */
        91,    /* ShutdownInProgress */
        112,   /* WriteConflict */
        189,   /* PrimarySteppedDown */
        251,   /* NoSuchTransaction (aborted under us) */
        262,   /* ExceededTimeLimit */
        9001,  /* SocketException */
        10107, /* NotWritablePrimary */
        11600, /* InterruptedAtShutdown */
        11602, /* InterruptedDueToReplStateChange */
        13435, /* NotPrimaryNoSecondaryOk */
        13436, /* NotPrimaryOrSecondary */
    };
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (codes[i] == code)
            return 1;
    return 0;
}

int outbox_mongo_code(const bson_error_t *e, const bson_t *reply)
{
    if (reply && (mongoc_error_has_label(reply, "TransientTransactionError") ||
                  mongoc_error_has_label(reply, "RetryableWriteError")))
        return OUTBOX_ETRANSIENT;
    if (!e)
        return OUTBOX_EPERMANENT;
    switch (e->domain) {
    case MONGOC_ERROR_STREAM:           /* connection refused, reset, socket timeout */
    case MONGOC_ERROR_SERVER_SELECTION: /* no server reachable (yet) */
        return OUTBOX_ETRANSIENT;
    case MONGOC_ERROR_CLIENT:
        /* An authentication that fails on an open handle (a password
         * changed on the server, a user disabled for a while) is waited
         * out, as a store that is down is: the relay warns and keeps its
         * rows. At open it is the user's to fix (outbox_mongo_connect). */
        return OUTBOX_ETRANSIENT;
    case MONGOC_ERROR_COMMAND:
        return e->code == MONGOC_ERROR_COMMAND_INVALID_ARG ? OUTBOX_EINVAL : OUTBOX_EPERMANENT;
    case MONGOC_ERROR_BSON:
        return OUTBOX_EINVAL;
    default:
        break;
    }
    if (transient_server_code(e->code))
        return OUTBOX_ETRANSIENT;
    /* FerretDB passes SQLite's busy database on as an internal error. */
    if (strstr(e->message, "SQLITE_BUSY") || strstr(e->message, "database is locked"))
        return OUTBOX_ETRANSIENT;
    if (e->code == 26) /* NamespaceNotFound */
        return OUTBOX_ESCHEMA;
    return OUTBOX_EPERMANENT;
}

int outbox_mongo_error(outbox_diag_t *d, const bson_error_t *e, const bson_t *reply,
                       const char *what)
{
    char line[OUTBOX_MESSAGE_MAX];
    outbox_kit_text_line(e && e->message[0] ? e->message : "unknown error", line, sizeof line);
    if (e && e->domain == MONGOC_ERROR_SERVER)
        return outbox_mongo_fail(d, outbox_mongo_code(e, reply), "%s: %s (server code %u)", what,
                                 line, (unsigned)e->code);
    return outbox_mongo_fail(d, outbox_mongo_code(e, reply), "%s: %s", what, line);
}

/* ------------------------------------------------------- libmongoc's log */

/* Where this thread's URI parse keeps libmongoc's warnings, or NULL. */
static _Thread_local char *uri_warnings;
static _Thread_local size_t uri_warnings_size;

static void log_handler(mongoc_log_level_t level, const char *domain, const char *message,
                        void *data)
{
    (void)data;
    if (uri_warnings && level <= MONGOC_LOG_LEVEL_WARNING) {
        if (uri_warnings[0] == '\0')
            outbox_kit_text_line(message, uri_warnings, uri_warnings_size);
        return;
    }
    if (!outbox_mongo_host)
        return;
    /* Servers without sessions (FerretDB) refuse the endSessions that
     * libmongoc sends as a client goes away: nothing is wrong. */
    if (level == MONGOC_LOG_LEVEL_WARNING && message && strstr(message, "endSessions"))
        level = MONGOC_LOG_LEVEL_DEBUG;
    int to = level <= MONGOC_LOG_LEVEL_WARNING ? OUTBOX_LOG_WARN
             : level <= MONGOC_LOG_LEVEL_INFO  ? OUTBOX_LOG_DEBUG
                                               : -1;
    if (to < 0)
        return; /* debug and trace: far too chatty */
    char line[512];
    outbox_kit_text_line(message, line, sizeof line);
    outbox_mongo_host->log(to, MONGO_NAME, "libmongoc %s: %s", domain ? domain : "", line);
}

void outbox_mongo_log_install(void)
{
    mongoc_log_set_handler(log_handler, NULL);
    /* Tracing compiled into a debug build of the library would otherwise
     * write to stderr on its own. */
    mongoc_log_trace_disable();
}

void outbox_mongo_uri_warnings_begin(char *buf, size_t size)
{
    buf[0] = '\0';
    uri_warnings = buf;
    uri_warnings_size = size;
}

void outbox_mongo_uri_warnings_end(void)
{
    uri_warnings = NULL;
    uri_warnings_size = 0;
}

/* ------------------------------------------------------------ relations */

int outbox_mongo_relname(const char *name, outbox_kit_relname_t *out, outbox_diag_t *d)
{
    if (outbox_kit_relname_parse(name, out) != 0)
        return outbox_mongo_fail(d, OUTBOX_EINVAL,
                                 "invalid collection name \"%.80s\" (expected collection or "
                                 "database.collection, each [A-Za-z_][A-Za-z0-9_]*)",
                                 name ? name : "");
    return OUTBOX_OK;
}

int outbox_mongo_relname_ckpt(const char *name, const outbox_kit_relname_t *base,
                              outbox_kit_relname_t *out, outbox_diag_t *d)
{
    if (name)
        return outbox_mongo_relname(name, out, d);
    outbox_kit_relname_beside(base, "hlc_checkpoint", out);
    return OUTBOX_OK;
}

int outbox_mongo_relname_inbox(const char *name, const outbox_kit_relname_t *base,
                               outbox_kit_relname_t *out, outbox_diag_t *d)
{
    if (name)
        return outbox_mongo_relname(name, out, d);
    outbox_kit_relname_beside(base, "outbox_inbox", out);
    return OUTBOX_OK;
}

/* ------------------------------------------------------------ values */

int64_t outbox_mongo_ms(int64_t us)
{
    /* Floored, so that a stamp before the epoch rounds the same way. */
    return us >= 0 ? us / 1000 : -((-us + 999) / 1000);
}

void outbox_mongo_token(char out[40])
{
    /* An ObjectId is unique per process (time, a per-process random value,
     * a counter); the pid makes sure a forked child never repeats its
     * parent's sequence. */
    bson_oid_t oid;
    bson_oid_init(&oid, NULL);
    char hex[25];
    bson_oid_to_string(&oid, hex);
    snprintf(out, 40, "%s-%08x", hex, (unsigned)getpid());
}
