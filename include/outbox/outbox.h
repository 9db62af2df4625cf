/* liboutbox: the application API.
 *
 * Open a store by URI, stage events in the same transaction as business
 * rows, and run a relay that publishes them to a sink.
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
 * call. */
OUTBOX_API int outbox_drivers_list(void (*good)(void *ctx, const outbox_driver_info_t *info),
                                   void (*bad)(void *ctx, const char *path, const char *reason),
                                   void *ctx);

/* Load a driver by name ("sqlite", "store-sqlite") or file path and check
 * it. On failure *out is NULL and d says why. Drivers stay loaded. */
OUTBOX_API int outbox_driver_load(const char *name_or_path, const outbox_driver_t **out,
                                  outbox_diag_t *d);

/* Register a driver linked into the program (the same source a module is
 * built from, compiled with -DOUTBOX_DRIVER_STATIC=name). It is checked like
 * a loaded module and then chosen by name or URI scheme before the search
 * path is consulted. */
OUTBOX_API int outbox_driver_register(const outbox_driver_t *driver, outbox_diag_t *d);

/* ------------------------------------------------------------- store */

typedef struct outbox_store outbox_store_t;

typedef struct outbox_store_options {
    uint32_t struct_size;            /* sizeof(outbox_store_options_t) */
    const char *relation;            /* default "outbox" */
    const char *checkpoint_relation; /* default hlc_checkpoint beside relation */
    const char *driver;              /* name or path; default chosen by URI scheme */
    uint32_t flags;                  /* OUTBOX_OPEN_* */
} outbox_store_options_t;

/* Open a store. opts may be NULL. On failure returns a negative code, *out
 * is NULL and, when d is non-NULL, d says why. */
OUTBOX_API int outbox_store_open(const char *uri, const outbox_store_options_t *opts,
                                 outbox_store_t **out, outbox_diag_t *d);
OUTBOX_API void outbox_store_close(outbox_store_t *s);
/* The message of the last failed call on this handle. */
OUTBOX_API const char *outbox_store_message(const outbox_store_t *s);
OUTBOX_API uint32_t outbox_store_capabilities(const outbox_store_t *s);
OUTBOX_API const outbox_driver_t *outbox_store_driver(const outbox_store_t *s);

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

OUTBOX_API int outbox_store_configure_route(outbox_store_t *s, const outbox_route_config_t *cfg);

OUTBOX_API int outbox_begin(outbox_store_t *s);
OUTBOX_API int outbox_commit(outbox_store_t *s);
OUTBOX_API int outbox_rollback(outbox_store_t *s);

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
 * outbox_begin() is open, or else a transaction of its own. *staged (may be
 * NULL) is the number inserted; duplicates of (route, event_id) are skipped.
 * Every event is checked before anything is written. */
OUTBOX_API int outbox_stage(outbox_store_t *s, void *native_tx, const char *route,
                            const outbox_event_t *events, size_t n, size_t *staged);

OUTBOX_API int outbox_stats(outbox_store_t *s, const char *route, outbox_stats_t *out);
OUTBOX_API int outbox_replay(outbox_store_t *s, const char *route, const char *event_id,
                             uint64_t *count);
OUTBOX_API int outbox_purge(outbox_store_t *s, const char *route, int64_t published_before,
                            uint64_t *count);

/* Store-level operations, mostly for relays and tests. */
OUTBOX_API int outbox_claim(outbox_store_t *s, const outbox_claim_req_t *req,
                            const outbox_row_t **rows, size_t *n, outbox_fence_t *fence);
/* settle: OUTBOX_ECONFLICT when some item did not hold the fence any more
 * (the others are applied; see items[i].applied). */
OUTBOX_API int outbox_settle(outbox_store_t *s, const outbox_fence_t *fence,
                             outbox_settle_item_t *items, size_t n, size_t *applied);
OUTBOX_API int outbox_checkpoint_advance(outbox_store_t *s, void *native_tx, const char *node_key,
                                         int64_t hlc);
OUTBOX_API int outbox_checkpoint_recover(outbox_store_t *s, int64_t *hlc);
OUTBOX_API int outbox_store_wait(outbox_store_t *s, const char *route, int timeout_ms);

/* Schema. ddl_out is malloc'd; free() it. report may be NULL. */
OUTBOX_API int outbox_schema_ddl(const char *store_kind_or_uri, const outbox_schema_opts_t *opts,
                                 char **ddl_out, outbox_diag_t *d);
OUTBOX_API int outbox_schema_apply(outbox_store_t *s, const outbox_schema_opts_t *opts);
OUTBOX_API int outbox_schema_check(outbox_store_t *s, const outbox_schema_opts_t *opts,
                                   outbox_schema_report_fn report, void *ctx, size_t *problems);

/* ------------------------------------------- routes and dead rows (1.3) */

/* The most rows one outbox_dead_list call returns. */
#define OUTBOX_DEAD_LIST_MAX 10000

/* Calls fn once per route the relation holds rows of, in byte order of the
 * route, with its counts (as outbox_stats gives them). fn returning
 * non-zero stops the listing and outbox_routes returns that value.
 * OUTBOX_ENOTSUP when the driver lacks the entry (a driver built for ABI
 * 1.2 or older); the store's message names the driver. */
OUTBOX_API int outbox_routes(outbox_store_t *s, outbox_route_fn fn, void *ctx);

/* Calls fn for up to limit (1..OUTBOX_DEAD_LIST_MAX) dead rows of route in
 * claim order (created_at, id), after the row whose id is after_id (NULL:
 * from the first; else a UUID of a row of the route, OUTBOX_ENOTFOUND when
 * there is none). Each row has id, route, event_id, event_type,
 * ordering_key, attempts, created_at and last_error; it lives only for the
 * call of fn. next (may be NULL) receives the id to pass as after_id for
 * the next page, or "" when this page is the last. fn returning non-zero
 * stops the listing and outbox_dead_list returns that value. */
OUTBOX_API int outbox_dead_list(outbox_store_t *s, const char *route, const char *after_id,
                                size_t limit, outbox_row_fn fn, void *ctx,
                                char next[OUTBOX_UUID_STRLEN + 1]);

/* --------------------------------------------------------------- sink */

typedef struct outbox_sink outbox_sink_t;

OUTBOX_API int outbox_sink_open(const char *uri, const char *driver, outbox_sink_t **out,
                                outbox_diag_t *d);
OUTBOX_API void outbox_sink_close(outbox_sink_t *k);
OUTBOX_API const char *outbox_sink_message(const outbox_sink_t *k);
OUTBOX_API uint32_t outbox_sink_capabilities(const outbox_sink_t *k);
OUTBOX_API int outbox_sink_publish(outbox_sink_t *k, const outbox_message_t *msgs, size_t n,
                                   outbox_publish_result_t *results);
/* The driver behind the handle. */
OUTBOX_API const outbox_driver_t *outbox_sink_driver(const outbox_sink_t *k);

/* Destinations and reading back, for tests, the sink conformance battery
 * and tooling; the relay needs none of it. Each returns OUTBOX_ENOTSUP
 * when the driver lacks the entry (a driver built for ABI 1.1, or a sink
 * with nothing to create), and says why in outbox_sink_message(). */
OUTBOX_API int outbox_sink_destination_create(outbox_sink_t *k, const char *destination);
OUTBOX_API int outbox_sink_destination_drop(outbox_sink_t *k, const char *destination);

typedef struct outbox_sink_reader outbox_sink_reader_t;

/* A reader of what was published to destination, from its first message,
 * on a connection of its own. */
OUTBOX_API int outbox_sink_reader_open(outbox_sink_t *k, const char *destination,
                                       outbox_sink_reader_t **out);
/* OUTBOX_OK: *out holds the next message (valid until the next call or
 * close); OUTBOX_ENOTFOUND: none arrived within timeout_ms. out->struct_size
 * is set by this call. */
OUTBOX_API int outbox_sink_reader_next(outbox_sink_reader_t *r, int timeout_ms,
                                       outbox_received_t *out);
OUTBOX_API const char *outbox_sink_reader_message(const outbox_sink_reader_t *r);
OUTBOX_API void outbox_sink_reader_close(outbox_sink_reader_t *r);

/* -------------------------------------------------------------- relay */

typedef struct outbox_relay outbox_relay_t;

struct outbox_relay_observation;

typedef struct outbox_relay_config {
    uint32_t struct_size;     /* sizeof(outbox_relay_config_t) */
    const char *route;        /* required */
    size_t batch;             /* default 100 */
    int max_attempts;         /* default 10 */
    /* Durations: each at most OUTBOX_DURATION_MAX_US. */
    int64_t lease_us;         /* default 30 s */
    int64_t poll_us;          /* default 100 ms */
    int64_t backoff_base_us;  /* default 1 s; 0 = retry at once */
    int64_t backoff_cap_us;   /* default 5 min */
    int hlc_order;            /* claim in hlc order */
    const char *source;       /* CloudEvents source; default "/outbox/<route>" */
    const char *destination;  /* template; "{route}" is replaced; default "{route}" */
    int until_idle;           /* outbox_relay_run returns once nothing is claimable, or
                                 after 8 transient failures in a row */
    /* Observer (NULL = none, and nothing is measured for it): called on the
     * relay's thread once per step that claimed, including an empty claim
     * and a failed one, with what the step did. See
     * outbox_relay_observation_t. */
    void (*observe)(void *ctx, const struct outbox_relay_observation *o);
    void *observe_ctx;
} outbox_relay_config_t;

/* What one relay step did, for outbox_relay_config_t.observe. Valid only
 * during the call (copy what you keep). Counts are of this step only and
 * follow the same rules as outbox_relay_counters_t. */
typedef struct outbox_relay_observation {
    uint32_t struct_size;    /* sizeof(outbox_relay_observation_t) of the library */
    const char *route;
    uint64_t claimed, published, retried, dead, released, fence_lost;
    /* Phase durations, microseconds on the monotonic clock; -1 when the
     * phase did not run (publish and settle after an empty or failed claim,
     * settle after an out-of-memory batch). publish_us covers every wave. */
    int64_t claim_us, publish_us, settle_us;
    int outage;              /* 1: the breaker released this batch (the sink looked down) */
    int breaker_open;        /* 1: the last batch published was released by the breaker */
    int ok;                  /* 0: the claim or the settle failed */
    /* When !ok, the relay's message (outbox_relay_message()); on an outage,
     * the sink's reason; "" otherwise. Masked like every library message. */
    const char *error;
    /* Commit-to-publish lag of each row published in this step: the wall
     * clock at the end of publishing minus the row's created_at, in us. */
    const int64_t *lag_us;
    size_t n_lag;
} outbox_relay_observation_t;

/* The largest batch a relay claims at once (outbox_relay_config_t.batch). */
#define OUTBOX_RELAY_BATCH_MAX 100000

/* Fill cfg with the defaults (route NULL). */
OUTBOX_API void outbox_relay_config_init(outbox_relay_config_t *cfg);

typedef struct outbox_relay_counters {
    uint64_t claimed, published, retried, dead, released, fence_lost, outages;
} outbox_relay_counters_t;

/* The relay borrows store and sink; both must outlive it. */
OUTBOX_API int outbox_relay_new(outbox_store_t *store, outbox_sink_t *sink,
                                const outbox_relay_config_t *cfg, outbox_relay_t **out,
                                outbox_diag_t *d);
OUTBOX_API void outbox_relay_free(outbox_relay_t *r);
/* One cycle: claim a batch, publish it, settle it. *claimed = rows claimed
 * (0 = nothing was claimable). */
OUTBOX_API int outbox_relay_step(outbox_relay_t *r, size_t *claimed);
/* Loop until outbox_relay_stop() (or, with until_idle, until idle). Returns
 * OUTBOX_OK after a graceful stop with nothing left in processing by it.
 * Transient failures (store errors, a sink that retries every message) are
 * retried for as long as they last; with until_idle, 8 in a row end the run
 * with OUTBOX_ETRANSIENT and outbox_relay_message() naming the last one. */
OUTBOX_API int outbox_relay_run(outbox_relay_t *r);
/* Async-signal-safe. */
OUTBOX_API void outbox_relay_stop(outbox_relay_t *r);
OUTBOX_API const char *outbox_relay_message(const outbox_relay_t *r);
OUTBOX_API void outbox_relay_counters(const outbox_relay_t *r, outbox_relay_counters_t *out);

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

OUTBOX_API outbox_hlc_t *outbox_hlc_new(void);
/* For tests: a clock reading wall time from fn (milliseconds). */
OUTBOX_API outbox_hlc_t *outbox_hlc_new_with_clock(int64_t (*wall_ms)(void *ctx), void *ctx);
OUTBOX_API void outbox_hlc_free(outbox_hlc_t *c);
/* The process-wide clock that staging uses. */
OUTBOX_API outbox_hlc_t *outbox_hlc_default(void);
OUTBOX_API int64_t outbox_hlc_now(outbox_hlc_t *c);
OUTBOX_API void outbox_hlc_observe(outbox_hlc_t *c, int64_t stamp);
#define OUTBOX_HLC_PHYSICAL_MS(h) ((int64_t)((uint64_t)(h) >> 16))
#define OUTBOX_HLC_LOGICAL(h) ((int64_t)((uint64_t)(h) & 0xffff))

/* --------------------------------------------------------------- util */

/* A fresh UUIDv7 in canonical text; buf holds at least 37 bytes. */
OUTBOX_API int outbox_uuid_v7(char buf[OUTBOX_UUID_STRLEN + 1]);
/* 1 when s is a canonical UUID (any version), 0 otherwise. */
OUTBOX_API int outbox_uuid_valid(const char *s);

/* "500ms", "30s", "5m", "2h", "7d", "250us" -> microseconds, at most
 * OUTBOX_DURATION_MAX_US. */
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

#ifdef __cplusplus
}
#endif
#endif
