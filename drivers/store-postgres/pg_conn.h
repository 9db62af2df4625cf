/* PostgreSQL store driver, second floor (pg_conn.c): the handle, its
 * connection and how statements run on it. Private to this folder; see
 * pg_int.h for the floors. */
#ifndef OUTBOX_STORE_PG_CONN_H
#define OUTBOX_STORE_PG_CONN_H

#include "pg_int.h"

/* Statements prepared once per connection of the handle (never on an
 * application's connection, which gets the same text unnamed). */
enum pg_slot {
    PG_STAGE,
    PG_STAGE_CKPT,
    PG_CLAIM,
    PG_CLAIM_HLC, /* right after PG_CLAIM: the two are built and replaced together */
    PG_SETTLE,
    PG_RENEW,
    PG_CKPT_ADVANCE,
    PG_CKPT_RECOVER,
    PG_INBOX_ACCEPT, /* pg_inbox.c's, built once at open; pg_rows.c builds those before it */
    PG_SLOT_COUNT
};
#define PG_ROWS_SLOTS PG_INBOX_ACCEPT

/* Bits of pg_handle_t.claim_idx: which of the shipped schema's claim
 * indexes the table has (or an index that serves as well). */
#define PG_IDX_PENDING 1u     /* (route, created_at, id) WHERE status = 'pending' */
#define PG_IDX_KEY 2u         /* (route, ordering_key, created_at, id) of unfinished rows */
#define PG_IDX_PENDING_HLC 4u /* their twins for hlc claim order */
#define PG_IDX_KEY_HLC 8u

/* The claim's batch limit is part of its text (see build_claim); the
 * statements are first built for the relay's default batch. */
#define PG_CLAIM_LIMIT_FIRST 100

#define PG_STAGE_ARRAYS 15 /* the most array parameters a stage statement takes */

/* LISTEN/NOTIFY channel names are identifiers: at most NAMEDATALEN - 1. */
#define PG_CHANNEL_MAX 63

typedef struct pg_handle {
    PGconn *conn;
    char *conninfo;    /* what PQconnectdb got; native_begin opens another with it */
    outbox_kit_relname_t rel; /* as the user named it */
    outbox_kit_relname_t ckpt;
    outbox_kit_relname_t inbox;
    char *rel_sql;     /* quoted, ready to paste into SQL */
    char *ckpt_sql;
    char *inbox_sql;   /* NULL: the host named no inbox (older than ABI 1.7) */
    char shown[160];   /* rel for messages */
    char channel[PG_CHANNEL_MAX + 1];
    int has_hlc;
    int has_traceparent;
    int has_ckpt;
    int has_inbox;
    /* The indexes beyond the canonical table's that the claim is shaped
     * for (PG_IDX_*), read from the catalogs at open; without them the
     * claim takes the shape the canonical outbox_claim_idx serves. */
    unsigned claim_idx;
    int read_only; /* OUTBOX_OPEN_READ_ONLY: every session is set read-only */
    char *sql[PG_SLOT_COUNT];
    long claim_limit;  /* the batch limit written into the claim statements */
    unsigned prepared; /* bit per slot: prepared on the current connection */
    int listening;     /* LISTEN issued on the current connection */
    int wake_pending;  /* a claim took a notification for another route off the wire */
    int tx_error;      /* code of the first failure inside the handle's own transaction */
    /* The last claim's rows; their strings live in arena. */
    outbox_row_t *rows;
    size_t n_rows;
    size_t cap_rows;
    char *arena;
    size_t arena_cap;
    outbox_kit_buf_t params[PG_STAGE_ARRAYS]; /* scratch for binary parameters, reused */
} pg_handle_t;

/* ---------------------------------------------------------- connecting */

/* The libpq connection string of a postgresql: or postgres: URI, checked
 * by libpq; *out is the caller's (host->free). */
PG_HIDDEN int outbox_pg_conninfo(const outbox_uri_t *uri, char **out, outbox_diag_t *d);
/* A new connection with the driver's client settings, as handed to an
 * application (native_begin): no session settings of the handle's own. */
PG_HIDDEN int outbox_pg_open_conn(const char *conninfo, PGconn **out, outbox_diag_t *d);
/* Connects the handle to h->conninfo and sets its session up. */
PG_HIDDEN int outbox_pg_connect(pg_handle_t *h, outbox_diag_t *d);
/* Makes sure the handle's connection is up, reconnecting (PQreset) when it
 * was lost; after a reconnect nothing is prepared or listened to. */
PG_HIDDEN int outbox_pg_connected(pg_handle_t *h, outbox_diag_t *d);

/* ----------------------------------------------------------- statements */

/* Runs a cached statement on the handle's connection, preparing it first
 * when this connection has not seen it. Binary parameters are those with
 * formats[i] = 1. On success *res is a COMMAND_OK or TUPLES_OK result the
 * caller clears. */
PG_HIDDEN int outbox_pg_exec_slot(pg_handle_t *h, int slot, int nparams, const char *const *values,
                                  const int *lengths, const int *formats, int binary_result,
                                  PGresult **res, outbox_diag_t *d, const char *what);
/* The same statement text, unnamed, on any connection (the application's). */
PG_HIDDEN int outbox_pg_exec_on(PGconn *conn, const char *sql, int nparams,
                                const char *const *values, const int *lengths, const int *formats,
                                int binary_result, PGresult **res, outbox_diag_t *d,
                                const char *what);
/* SQL without parameters by the simple protocol, on any connection: one
 * command, or a script of several run as one (schema apply). */
PG_HIDDEN int outbox_pg_simple(PGconn *conn, const char *sql, outbox_diag_t *d, const char *what);
/* outbox_pg_simple on the handle's connection (reconnects first). */
PG_HIDDEN int outbox_pg_command(pg_handle_t *h, const char *sql, outbox_diag_t *d,
                                const char *what);
/* Drops a slot's prepared statement from the connection (its text is about
 * to change); nothing to do when it was never prepared there. */
PG_HIDDEN int outbox_pg_forget_slot(pg_handle_t *h, int slot, outbox_diag_t *d, const char *what);

/* --------------------------------------------------------- transactions */

/* OUTBOX_EINVAL when the handle's own transaction is open: operations that
 * commit on their own cannot nest in it. */
PG_HIDDEN int outbox_pg_no_open_tx(pg_handle_t *h, const char *op, outbox_diag_t *d);
/* The handle's own transaction must still be there: a reconnect in
 * between would have rolled it back, and autocommit would then quietly
 * take its place. */
PG_HIDDEN int outbox_pg_in_own_tx(pg_handle_t *h, const char *op, outbox_diag_t *d);
/* The application's PGconn must be inside its transaction (BEGIN), or the
 * events would not commit with its rows. */
PG_HIDDEN int outbox_pg_check_native(PGconn *app, outbox_diag_t *d);
/* Inside the handle's own transaction, remembers the first failure so that
 * commit can report it. Returns code. */
PG_HIDDEN int outbox_pg_tx_note(pg_handle_t *h, int code);

#endif
