/* liboutbox: the application API.
 *
 * Open a store by URI, stage events in the same transaction as business
 * rows, and run a relay that publishes them to a sink. The relay and the
 * store operations it is built from are in outbox/relay.h (included at the
 * end of this header); the conformance battery is in outbox/conformance.h.
 *
 * Names: every function on a store handle is outbox_store_<verb>, on a sink
 * handle outbox_sink_<verb>, on a relay outbox_relay_<verb>. The names of
 * 0.1 (outbox_stage, outbox_begin, outbox_claim, ...) remain, deprecated,
 * until 1.0 of the library (see the end of this header).
 *
 * Durations are int64_t microseconds everywhere (names end in _us).
 *
 * Errors: a function returning int returns OUTBOX_OK (0) or a negative
 * OUTBOX_E* code (outbox/common.h, outbox_strerror()). A NULL handle or a
 * NULL required pointer is OUTBOX_EINVAL. On a handle, the handle's
 * message (outbox_store_message(), outbox_sink_message(),
 * outbox_relay_message()) then says why in one line, with secrets masked;
 * an open function says it in the outbox_diag_t it is given (may be NULL).
 * Any call that reaches a driver may also return what the driver returned:
 * OUTBOX_ETRANSIENT (connection lost, lock or statement timeout, busy:
 * worth retrying), OUTBOX_EPERMANENT, OUTBOX_ENOMEM. A function below
 * lists the codes it has beyond those.
 *
 * Thread safety: a store, sink or relay handle is used by one thread at a
 * time. outbox_hlc_* and outbox_relay_stop() are safe from any thread (and
 * outbox_relay_stop() from a signal handler). The loader is internally
 * serialised.
 *
 * Ownership: inputs are borrowed for the call. Strings returned by
 * outbox_*_message() belong to the handle and stay valid until its next call.
 */
#ifndef OUTBOX_OUTBOX_H
#define OUTBOX_OUTBOX_H

#include <stddef.h>
#include <stdint.h>

#include "outbox/common.h"
#include "outbox/driver.h"
#include "outbox/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------- version */

/* The version of the library this program runs with, "MAJOR.MINOR.PATCH"
 * (static storage). OUTBOX_VERSION is the one it was built against. */
OUTBOX_API const char *outbox_version(void);
/* The same as one number, 0xMMmmpp (OUTBOX_VERSION_NUMBER's form), for
 * comparisons: outbox_version_number() >= 0x000200. */
OUTBOX_API unsigned outbox_version_number(void);

/* ------------------------------------------------------------- drivers */

typedef struct outbox_driver_info {
    const char *name;
    const char *kind;      /* "store" or "sink" */
    unsigned abi_major, abi_minor;
    const char *version;
    const char *path;
    const char *schemes;   /* comma-separated */
} outbox_driver_info_t;

/* Visit every loadable driver module on the search path (OUTBOX_DRIVER_PATH,
 * then the installed driver directory) without running any driver's init().
 * Every problem goes to bad (may be NULL) with the reason, which starts with
 * "refused: " (not a driver, wrong ABI, missing entries), "skipped: " (not
 * a regular file) or "warning: " (a duplicate name or scheme; the first on
 * the path wins). The strings passed to both callbacks live only for the
 * call. OUTBOX_OK, or OUTBOX_ENOMEM. */
OUTBOX_API int outbox_drivers_list(void (*good)(void *ctx, const outbox_driver_info_t *info),
                                   void (*bad)(void *ctx, const char *path, const char *reason),
                                   void *ctx);

/* Load a driver by name ("sqlite", "store-sqlite") or file path and check
 * it. On failure *out is NULL and d says why: OUTBOX_ENOTFOUND (no such
 * driver or file), OUTBOX_EABI (refused: not a driver, wrong ABI, missing
 * entries), or what the driver's init returned. Drivers stay loaded. */
OUTBOX_API int outbox_driver_load(const char *name_or_path, const outbox_driver_t **out,
                                  outbox_diag_t *d);

/* Register a driver linked into the program (the same source a module is
 * built from, compiled with -DOUTBOX_DRIVER_STATIC=name). It is checked like
 * a loaded module and then chosen by name or URI scheme before the search
 * path is consulted. OUTBOX_EABI (refused, d says why), OUTBOX_EINVAL
 * (NULL), or what the driver's init returned. */
OUTBOX_API int outbox_driver_register(const outbox_driver_t *driver, outbox_diag_t *d);

/* ------------------------------------------------------------- store */

typedef struct outbox_store outbox_store_t;

typedef struct outbox_store_options {
    uint32_t struct_size;            /* sizeof(outbox_store_options_t) */
    const char *relation;            /* default "outbox" */
    const char *checkpoint_relation; /* default hlc_checkpoint beside relation */
    const char *driver;              /* name or path; default chosen by URI scheme */
    uint32_t flags;                  /* OUTBOX_OPEN_* */
    const char *inbox_relation;      /* (1.7) default outbox_inbox beside relation */
} outbox_store_options_t;

/* Open a store: load the driver for the URI's scheme (or opts->driver),
 * connect, and find the relation. opts may be NULL (defaults). On failure
 * *out is NULL and d (may be NULL) says why.
 * Errors: OUTBOX_EINVAL (a malformed URI, an invalid relation name, opts
 * with struct_size not set, an option the driver refuses), OUTBOX_ENOTFOUND
 * (no driver serves the scheme or has the name), OUTBOX_EABI (the driver
 * was refused), OUTBOX_EMISSING (the table, collection or database file
 * does not exist: outbox_store_schema_apply() makes it), OUTBOX_ESCHEMA
 * (a required column is missing), OUTBOX_ETRANSIENT (cannot connect). */
OUTBOX_API int outbox_store_open(const char *uri, const outbox_store_options_t *opts,
                                 outbox_store_t **out, outbox_diag_t *d);
/* Close and free; NULL is a no-op. An open transaction is rolled back. */
OUTBOX_API void outbox_store_close(outbox_store_t *s);
/* The message of the last failed call on this handle ("" after a call
 * that succeeded). */
OUTBOX_API const char *outbox_store_message(const outbox_store_t *s);
/* OUTBOX_STORE_CAP_* of the handle: the driver's, and what open found
 * (the hlc and traceparent columns, the checkpoint table). 0 for NULL. */
OUTBOX_API uint32_t outbox_store_capabilities(const outbox_store_t *s);
/* The driver behind the handle; NULL for NULL. */
OUTBOX_API const outbox_driver_t *outbox_store_driver(const outbox_store_t *s);
/* The driver's own handle behind s, what its open returned: for code built
 * together with that driver and knowing its layout (the driver's benchmark
 * ceiling, its tests). Compare outbox_store_driver(s) with the driver you
 * were built with first; any other use breaks with the next driver
 * release. NULL for NULL. */
OUTBOX_API void *outbox_store_driver_handle(const outbox_store_t *s);

/* Per-route settings for staging. */
typedef struct outbox_route_config {
    uint32_t struct_size;
    const char *route;
    int require_transaction; /* refuse to stage outside a transaction */
    int hlc;                 /* stamp each staged row with the HLC (needs the hlc column) */
    /* When set and the checkpoint table exists: staging inside a transaction
     * advances this node key's mark in that transaction, and the HLC is
     * moved above the recovered mark now. */
    const char *checkpoint_node_key;
} outbox_route_config_t;

/* Set how the handle stages on cfg->route (again: replaces).
 * Errors: OUTBOX_EINVAL (struct_size not set; a route or node key that is
 * empty, too long or not UTF-8), OUTBOX_ENOTSUP (hlc without the hlc
 * column, a node key without the checkpoint table). */
OUTBOX_API int outbox_store_configure_route(outbox_store_t *s, const outbox_route_config_t *cfg);

/* The handle's own transaction, for stores with OUTBOX_STORE_CAP_TRANSACTIONS:
 * every outbox_store_stage() between begin and commit is in it.
 * Errors: OUTBOX_ENOTSUP (the driver has no transactions), OUTBOX_EINVAL
 * (begin with one open; commit or rollback with none open). After a failed
 * commit the transaction is over. */
OUTBOX_API int outbox_store_begin(outbox_store_t *s);
OUTBOX_API int outbox_store_commit(outbox_store_t *s);
OUTBOX_API int outbox_store_rollback(outbox_store_t *s);

typedef struct outbox_event {
    const char *event_id;       /* UUID; NULL = a fresh UUIDv7 */
    const char *event_type;     /* required */
    const char *payload;        /* JSON, required */
    size_t payload_len;         /* 0 = strlen(payload) */
    const char *ordering_key;   /* NULL = no ordering */
    const char *tenant_id;      /* UUIDs, each NULL when absent */
    const char *execution_id;
    const char *correlation_id;
    const char *causation_id;
    const char *traceparent;    /* W3C trace context; NULL when absent */
    int64_t occurred_at;        /* microseconds since the epoch; 0 = now */
} outbox_event_t;

/* Stage n events on route in one go. native_tx: the application's own
 * transaction handle (PGconn*, sqlite3*, mongoc_client_session_t*) inside
 * an open transaction, or NULL to use the handle's own transaction when
 * outbox_store_begin() is open, or else a transaction of its own. *staged
 * (may be NULL) is the number inserted; duplicates of (route, event_id)
 * are skipped. Every event is checked before anything is written, so a
 * refused call writes nothing. n = 0 stages nothing and succeeds.
 * Errors: OUTBOX_EINVAL (the message names the event and the field: a
 * route, type or key that is empty, too long or not UTF-8, a payload that
 * is missing or not JSON, an id that is not a UUID, a malformed
 * traceparent, a route that requires a transaction staged outside one),
 * OUTBOX_ENOTSUP (native_tx on a driver without OUTBOX_STORE_CAP_NATIVE_TX,
 * a traceparent without the traceparent column). */
OUTBOX_API int outbox_store_stage(outbox_store_t *s, void *native_tx, const char *route,
                                  const outbox_event_t *events, size_t n, size_t *staged);

/* When the events of one outbox_store_stage_with() call may be published
 * (1.8); versioned: set struct_size = sizeof(outbox_stage_options_t). At
 * most one of the two; both 0 is outbox_store_stage(). */
typedef struct outbox_stage_options {
    uint32_t struct_size;
    /* Not before this instant, microseconds since the epoch (an instant
     * already past: at once). */
    int64_t not_before;
    /* Not before this long after staging, by the store's clock (the
     * database server's, where the store compares times on the server),
     * at most OUTBOX_DURATION_MAX_US. */
    int64_t delay_us;
} outbox_stage_options_t;

/* outbox_store_stage() with options (NULL: none). A delayed event waits as
 * pending until its time, and, like a retry waiting for its backoff, holds
 * back the later events of its ordering key until it is published or
 * dead: per-key order is kept. Errors as outbox_store_stage(), and
 * OUTBOX_EINVAL (both not_before and delay_us, a negative one, a delay
 * above the maximum), OUTBOX_ENOTSUP (a delay on a store driver without
 * OUTBOX_STORE_CAP_DELAYED). */
OUTBOX_API int outbox_store_stage_with(outbox_store_t *s, void *native_tx, const char *route,
                                       const outbox_event_t *events, size_t n,
                                       const outbox_stage_options_t *opts, size_t *staged);

/* Counts of route's rows by status (route NULL: every route), into *out.
 * Errors: OUTBOX_ENOTSUP (the driver has no stats). */
OUTBOX_API int outbox_store_stats(outbox_store_t *s, const char *route, outbox_stats_t *out);
/* Dead rows back to pending, attempts 0: of route (NULL: every route),
 * only the one with event_id when it is not NULL. *count: rows changed.
 * Errors: OUTBOX_EINVAL (event_id not a UUID), OUTBOX_ENOTSUP. */
OUTBOX_API int outbox_store_replay(outbox_store_t *s, const char *route, const char *event_id,
                                   uint64_t *count);
/* Delete published rows of route (NULL: every route) published before the
 * time given (microseconds since the epoch). *count: rows deleted.
 * Errors: OUTBOX_ENOTSUP. */
OUTBOX_API int outbox_store_purge(outbox_store_t *s, const char *route, int64_t published_before,
                                  uint64_t *count);

/* Schema. outbox_schema_ddl needs no store: the DDL that the driver named
 * by store_kind_or_uri ("sqlite", "postgres", or a URI) would apply, into
 * *ddl_out (malloc'd; free() it). opts may be NULL (the required parts
 * only). Errors: OUTBOX_ENOTFOUND (no such driver), OUTBOX_EINVAL. */
OUTBOX_API int outbox_schema_ddl(const char *store_kind_or_uri, const outbox_schema_opts_t *opts,
                                 char **ddl_out, outbox_diag_t *d);
/* Create what the DDL describes and is missing (idempotent). Open the
 * store with OUTBOX_OPEN_SCHEMA_ONLY to apply to an empty database.
 * Errors: OUTBOX_ENOTSUP (the driver cannot apply a schema). */
OUTBOX_API int outbox_store_schema_apply(outbox_store_t *s, const outbox_schema_opts_t *opts);
/* Compare the live schema with the DDL's: OUTBOX_OK, with *problems
 * the number of differences (0: it matches), each also given to report
 * (may be NULL) as one line. problems is required.
 * Errors: OUTBOX_ENOTSUP (the driver cannot check). */
OUTBOX_API int outbox_store_schema_check(outbox_store_t *s, const outbox_schema_opts_t *opts,
                                         outbox_schema_report_fn report, void *ctx,
                                         size_t *problems);

/* ------------------------------------------------------- the inbox (1.7) */

/* The consumer's side: record that consumer handled event_id (the
 * CloudEvents id of a message it received) in the same transaction as its
 * own writes, so that a redelivered event is recognised and skipped and
 * an event's effects commit together with the record of it. Transactions
 * as for outbox_store_stage: native_tx (the application's PGconn*,
 * sqlite3*, mongoc_client_session_t* inside its open transaction), else
 * the handle's own when outbox_store_begin() is open, else a statement of
 * its own. *is_new is 1 when this call recorded the pair, 0 when it was
 * recorded before (skip the event); of two calls racing on one pair
 * exactly one gets 1. A rolled-back record is gone: the event is new
 * again. consumer and event_id: non-empty UTF-8, at most 200 bytes, no
 * control characters.
 * Errors: OUTBOX_EINVAL (a bad consumer or event id), OUTBOX_ENOTSUP (the
 * driver has no inbox, or native_tx without OUTBOX_STORE_CAP_NATIVE_TX),
 * OUTBOX_EMISSING (no inbox table: outbox_store_schema_apply() with
 * OUTBOX_SCHEMA_INBOX makes it). */
OUTBOX_API int outbox_inbox_accept(outbox_store_t *s, void *native_tx, const char *consumer,
                                   const char *event_id, int *is_new);
/* Delete the inbox records of consumer (NULL: every consumer) received
 * before received_before (microseconds since the epoch); *count (may be
 * NULL): how many. Errors as above. */
OUTBOX_API int outbox_inbox_purge(outbox_store_t *s, const char *consumer, int64_t received_before,
                                  uint64_t *count);
/* Calls fn once per consumer with records (only consumer when not NULL),
 * in byte order of the name, with its count and the oldest and newest
 * receipt. fn's non-zero return stops the listing and is returned. */
OUTBOX_API int outbox_inbox_stats(outbox_store_t *s, const char *consumer, outbox_inbox_fn fn,
                                  void *ctx);

/* ------------------------------------------- routes and dead rows (1.3) */

/* The most rows one outbox_store_dead_list call returns. */
#define OUTBOX_DEAD_LIST_MAX 10000

/* Calls fn once per route the relation holds rows of, in byte order of the
 * route, with its counts (as outbox_store_stats gives them). fn returning
 * non-zero stops the listing and outbox_store_routes returns that value.
 * Errors: OUTBOX_ENOTSUP when the driver lacks the entry (a driver built
 * for ABI 1.2 or older); the store's message names the driver. */
OUTBOX_API int outbox_store_routes(outbox_store_t *s, outbox_route_fn fn, void *ctx);

/* Calls fn for up to limit (1..OUTBOX_DEAD_LIST_MAX) dead rows of route in
 * claim order (created_at, id), after the row whose id is after_id (NULL:
 * from the first; else a UUID of a row of the route). Each row has id,
 * route, event_id, event_type, ordering_key, attempts, created_at and
 * last_error; it lives only for the call of fn. next (may be NULL)
 * receives the id to pass as after_id for the next page, or "" when this
 * page is the last. fn returning non-zero stops the listing and
 * outbox_store_dead_list returns that value.
 * Errors: OUTBOX_EINVAL (limit out of range, after_id not a UUID),
 * OUTBOX_ENOTFOUND (no row of the route has after_id), OUTBOX_ENOTSUP. */
OUTBOX_API int outbox_store_dead_list(outbox_store_t *s, const char *route, const char *after_id,
                                      size_t limit, outbox_row_fn fn, void *ctx,
                                      char next[OUTBOX_UUID_STRLEN + 1]);

/* --------------------------------------------------------------- sink */

typedef struct outbox_sink outbox_sink_t;

typedef struct outbox_sink_options {
    uint32_t struct_size; /* sizeof(outbox_sink_options_t) */
    const char *driver;   /* name or path; default chosen by URI scheme */
} outbox_sink_options_t;

/* Open a sink: load the driver for the URI's scheme (or opts->driver) and
 * open it. opts may be NULL (defaults). Sinks connect lazily: a broker
 * that is down shows in outbox_sink_publish(), not here. On failure *out
 * is NULL and d (may be NULL) says why.
 * Errors: OUTBOX_EINVAL (a malformed URI, an option the driver refuses;
 * opts whose struct_size is not set or implausible, as when a driver name
 * is passed where 0.1 took one), OUTBOX_ENOTFOUND (no driver), OUTBOX_EABI
 * (the driver was refused). */
OUTBOX_API int outbox_sink_open(const char *uri, const outbox_sink_options_t *opts,
                                outbox_sink_t **out, outbox_diag_t *d);
/* Close and free; NULL is a no-op. */
OUTBOX_API void outbox_sink_close(outbox_sink_t *k);
/* The message of the last failed call on this handle. */
OUTBOX_API const char *outbox_sink_message(const outbox_sink_t *k);
/* OUTBOX_SINK_CAP_* of the driver; 0 for NULL. */
OUTBOX_API uint32_t outbox_sink_capabilities(const outbox_sink_t *k);
/* Publish msgs[0..n), one result each: OK (the broker holds it), RETRY or
 * REJECT, with a reason, or DEFER: not delivered yet, for a reason outside
 * the message (a Kafka partition without a leader), and the sink keeps it
 * in hand; hand the row back without charging an attempt, hold back its
 * key's later rows, and publish it again soon: the sink then reports on
 * the copy it holds. Returns OUTBOX_OK when every result is filled in; a
 * negative code when the call as a whole failed, every result then RETRY
 * with the handle's message. A result the driver left outside the four
 * statuses reads RETRY. n = 0 succeeds at once. */
OUTBOX_API int outbox_sink_publish(outbox_sink_t *k, const outbox_message_t *msgs, size_t n,
                                   outbox_publish_result_t *results);
/* The driver behind the handle. */
OUTBOX_API const outbox_driver_t *outbox_sink_driver(const outbox_sink_t *k);
/* The driver's own handle behind k, what its open returned: for code built
 * together with that driver and knowing its layout (the driver's producer
 * ceiling, its tests), as outbox_store_driver_handle is for stores.
 * Compare outbox_sink_driver(k) with the driver you were built with first.
 * NULL for NULL. */
OUTBOX_API void *outbox_sink_driver_handle(const outbox_sink_t *k);

/* Destinations and reading back, for tests, the sink conformance battery
 * and tooling; the relay needs none of it. Each returns OUTBOX_ENOTSUP
 * when the driver lacks the entry (a driver built for ABI 1.1, or a sink
 * with nothing to create), and says why in outbox_sink_message(). */
OUTBOX_API int outbox_sink_destination_create(outbox_sink_t *k, const char *destination);
OUTBOX_API int outbox_sink_destination_drop(outbox_sink_t *k, const char *destination);

typedef struct outbox_sink_reader outbox_sink_reader_t;

/* A reader of what was published to destination, from its first message,
 * on a connection of its own. Errors: OUTBOX_ENOTSUP (no reader). */
OUTBOX_API int outbox_sink_reader_open(outbox_sink_t *k, const char *destination,
                                       outbox_sink_reader_t **out);
/* Wait up to timeout_us for the next message. OUTBOX_OK: *out holds it
 * (valid until the next call or close; out->struct_size is set by this
 * call); OUTBOX_ENOTFOUND: none arrived in time. */
OUTBOX_API int outbox_sink_reader_read(outbox_sink_reader_t *r, int64_t timeout_us,
                                       outbox_received_t *out);
/* The message of the reader's last failed call. */
OUTBOX_API const char *outbox_sink_reader_message(const outbox_sink_reader_t *r);
/* Close and free; NULL is a no-op. */
OUTBOX_API void outbox_sink_reader_close(outbox_sink_reader_t *r);

/* ---------------------------------------------------------------- log */

/* Where the core's log lines go (default: nowhere). fn gets one line at a
 * time, without a newline or timestamp, and an OUTBOX_LOG_* level; calls are
 * serialised. A relay logs at info when it starts and stops (with its
 * counters) and when its sink answers again after an outage, a warning
 * when the sink goes down, and at debug each batch (claimed, published,
 * retried, dead, released, milliseconds) and each further batch an outage
 * releases. Its lines name drivers and relations, never URIs. */
OUTBOX_API void outbox_set_logger(void (*fn)(void *ctx, int level, const char *line), void *ctx);

/* ---------------------------------------------------------------- HLC */

/* Hybrid logical clock: physical_ms << 16 | logical. */
typedef struct outbox_hlc outbox_hlc_t;

/* A new clock on the wall time; NULL when out of memory. */
OUTBOX_API outbox_hlc_t *outbox_hlc_new(void);
/* For tests: a clock reading wall time from fn (milliseconds); NULL when
 * out of memory. */
OUTBOX_API outbox_hlc_t *outbox_hlc_new_with_clock(int64_t (*wall_ms)(void *ctx), void *ctx);
/* Free a clock from outbox_hlc_new*; NULL is a no-op. */
OUTBOX_API void outbox_hlc_free(outbox_hlc_t *c);
/* The process-wide clock that staging uses (never NULL, never freed). */
OUTBOX_API outbox_hlc_t *outbox_hlc_default(void);
/* The next stamp: above every stamp this clock gave or observed. */
OUTBOX_API int64_t outbox_hlc_now(outbox_hlc_t *c);
/* Move the clock above stamp (one seen elsewhere, a recovered checkpoint),
 * so the next outbox_hlc_now() is greater. */
OUTBOX_API void outbox_hlc_observe(outbox_hlc_t *c, int64_t stamp);
#define OUTBOX_HLC_PHYSICAL_MS(h) ((int64_t)((uint64_t)(h) >> 16))
#define OUTBOX_HLC_LOGICAL(h) ((int64_t)((uint64_t)(h) & 0xffff))

/* --------------------------------------------------------------- util */

/* A fresh UUIDv7 in canonical text into buf (at least 37 bytes):
 * OUTBOX_OK, or OUTBOX_EINVAL for a NULL buf. */
OUTBOX_API int outbox_uuid_v7(char buf[OUTBOX_UUID_STRLEN + 1]);
/* 1 when s is a canonical UUID (any version), 0 otherwise. */
OUTBOX_API int outbox_uuid_valid(const char *s);

/* "500ms", "30s", "5m", "2h", "7d", "250us" -> microseconds into *us, at
 * most OUTBOX_DURATION_MAX_US (the grammar of every URI's durations).
 * OUTBOX_EINVAL, with d (may be NULL) saying why, for anything else. */
OUTBOX_API int outbox_parse_duration(const char *text, int64_t *us, outbox_diag_t *d);

/* 1 when text[0..len) is one valid JSON value (RFC 8259), 0 otherwise. */
OUTBOX_API int outbox_json_valid(const char *text, size_t len);

/* 1 when name matches ^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$ */
OUTBOX_API int outbox_relation_valid(const char *name);

/* A store or sink URI (or a libpq "key=value" string) fit to show: copied
 * into out (size bytes, always NUL-terminated) as one line, with the
 * password of "scheme://user:password@host" and the value of every
 * parameter whose name contains password, passwd, secret or token (or is
 * pass or pwd) replaced by "***"; control bytes become '?', and text that
 * does not fit ends in "...". The library's own messages mask the same
 * way. Returns out. */
OUTBOX_API char *outbox_uri_mask(const char *text, char *out, size_t size);

/* Calls fn once for each secret of text that outbox_uri_mask() would hide,
 * in text order, with the secret as it is written there (len bytes at
 * secret, inside text; a quoted libpq value keeps its quotes). */
OUTBOX_API void outbox_uri_secrets(const char *text,
                                   void (*fn)(void *ctx, const char *secret, size_t len),
                                   void *ctx);

#include "outbox/relay.h"

/* ------------------------------------------------------ names before 0.2
 *
 * The names of 0.1, kept until 1.0 of the library: each does what the
 * function it names does. Compilers warn where they are used. */
#define OUTBOX_OLD_NAME_(new_name) OUTBOX_DEPRECATED("use " #new_name)
OUTBOX_API int outbox_begin(outbox_store_t *s) OUTBOX_OLD_NAME_(outbox_store_begin);
OUTBOX_API int outbox_commit(outbox_store_t *s) OUTBOX_OLD_NAME_(outbox_store_commit);
OUTBOX_API int outbox_rollback(outbox_store_t *s) OUTBOX_OLD_NAME_(outbox_store_rollback);
OUTBOX_API int outbox_stage(outbox_store_t *s, void *native_tx, const char *route,
                            const outbox_event_t *events, size_t n, size_t *staged)
    OUTBOX_OLD_NAME_(outbox_store_stage);
OUTBOX_API int outbox_stats(outbox_store_t *s, const char *route, outbox_stats_t *out)
    OUTBOX_OLD_NAME_(outbox_store_stats);
OUTBOX_API int outbox_replay(outbox_store_t *s, const char *route, const char *event_id,
                             uint64_t *count) OUTBOX_OLD_NAME_(outbox_store_replay);
OUTBOX_API int outbox_purge(outbox_store_t *s, const char *route, int64_t published_before,
                            uint64_t *count) OUTBOX_OLD_NAME_(outbox_store_purge);
OUTBOX_API int outbox_claim(outbox_store_t *s, const outbox_claim_req_t *req,
                            const outbox_row_t **rows, size_t *n, outbox_fence_t *fence)
    OUTBOX_OLD_NAME_(outbox_store_claim);
OUTBOX_API int outbox_settle(outbox_store_t *s, const outbox_fence_t *fence,
                             outbox_settle_item_t *items, size_t n, size_t *applied)
    OUTBOX_OLD_NAME_(outbox_store_settle);
OUTBOX_API int outbox_checkpoint_advance(outbox_store_t *s, void *native_tx, const char *node_key,
                                         int64_t hlc) OUTBOX_OLD_NAME_(outbox_store_checkpoint_advance);
OUTBOX_API int outbox_checkpoint_recover(outbox_store_t *s, int64_t *hlc)
    OUTBOX_OLD_NAME_(outbox_store_checkpoint_recover);
/* timeout in milliseconds */
OUTBOX_API int outbox_store_wait(outbox_store_t *s, const char *route, int timeout_ms)
    OUTBOX_OLD_NAME_(outbox_store_wait_for);
OUTBOX_API int outbox_schema_apply(outbox_store_t *s, const outbox_schema_opts_t *opts)
    OUTBOX_OLD_NAME_(outbox_store_schema_apply);
OUTBOX_API int outbox_schema_check(outbox_store_t *s, const outbox_schema_opts_t *opts,
                                   outbox_schema_report_fn report, void *ctx, size_t *problems)
    OUTBOX_OLD_NAME_(outbox_store_schema_check);
OUTBOX_API int outbox_routes(outbox_store_t *s, outbox_route_fn fn, void *ctx)
    OUTBOX_OLD_NAME_(outbox_store_routes);
OUTBOX_API int outbox_dead_list(outbox_store_t *s, const char *route, const char *after_id,
                                size_t limit, outbox_row_fn fn, void *ctx,
                                char next[OUTBOX_UUID_STRLEN + 1])
    OUTBOX_OLD_NAME_(outbox_store_dead_list);
/* timeout in milliseconds */
OUTBOX_API int outbox_sink_reader_next(outbox_sink_reader_t *r, int timeout_ms,
                                       outbox_received_t *out)
    OUTBOX_OLD_NAME_(outbox_sink_reader_read);

#ifdef __cplusplus
}
#endif
#endif
