/* liboutbox driver SDK: what a store or sink driver implements, and the
 * rules of its ABI, stated here once (the docs point here).
 *
 * A driver is a loadable module that exports ONE function,
 * outbox_driver_entry(), returning a pointer to a static const
 * outbox_driver_t (OUTBOX_DRIVER_ENTRY emits it). The host checks
 * struct_size and the ABI version before it calls anything else, then
 * calls init() once with the host-services table. Drivers build against
 * these headers alone and never link the core; outbox/kit.h adds
 * header-only helpers (buffers, identifiers, JSON, UTF-8, URI options,
 * secrets, publish results, per-key rounds).
 *
 * ABI versions
 *  - The host loads a driver whose abi_major equals OUTBOX_ABI_MAJOR and
 *    whose abi_minor is at most its own OUTBOX_ABI_MINOR; a driver that
 *    claims a newer minor is refused, naming both versions. A minor only
 *    appends: members at the end of versioned structs, entries at the end
 *    of the host table and the vtables, capability bits, status codes,
 *    open flags. Nothing is renumbered, moved or removed within a major.
 *  - Which minor to claim: the lowest one whose entries or guarantees the
 *    driver relies on, not the newest headers' OUTBOX_ABI_MINOR; it then
 *    loads into every host from that minor on, whatever headers it was
 *    built with. A sink with a reader claims 2; a store with routes and
 *    dead_list claims 3; a driver that needs a 1.4 host's entries only
 *    through outbox/kit.h (which falls back on an older host) need not
 *    claim 4. Read a member of the host table or of any versioned struct
 *    from the host only when OUTBOX_STRUCT_HAS says it is there.
 *  - What each minor added:
 *      1.1  host monotonic_us and verror; outbox/kit.h; OUTBOX_STRUCT_HAS.
 *      1.2  sink destination_create/drop and reader_open/next/close,
 *           outbox_received_t, OUTBOX_SINK_CAP_DEDUPE; a URI listing several
 *           hosts reaches the driver (in uri->host, port 0) only from 1.2 on.
 *      1.3  store routes and dead_list, outbox_route_fn and outbox_row_fn.
 *      1.4  host opt_duration/opt_int/opt_bool/opt_secret (the one option
 *           grammar), uri_show and the redactor (the one masking rule);
 *           OUTBOX_EMISSING and OUTBOX_OPEN_MUST_EXIST; what the host checks
 *           before each entry, stated at the entry.
 *      1.5  store renew and outbox_renew_req_t (lease renewal). A store
 *           need not claim 5 to offer it: an older host never calls it.
 *           OUTBOX_PUBLISH_DEFER and outbox_sink_open_t.defer_ok: a sink
 *           returns DEFER only when defer_ok says the host takes it.
 *           A RELEASE item's available_at, when not 0, holds the row back
 *           until then (the relay's deferred rows); a store that honours
 *           it claims 5.
 *      1.6  outbox_received_t.wire_headers: a reader reports every header
 *           as the protocol carries it, so the sink battery checks the
 *           names other consumers see. A sink need not claim 6 for it: an
 *           older host's struct_size leaves it out.
 *      1.7  the inbox: store inbox_accept, inbox_purge and inbox_stats,
 *           outbox_inbox_fn, OUTBOX_STORE_CAP_INBOX, OUTBOX_SCHEMA_INBOX,
 *           and inbox_relation in outbox_store_open_t and
 *           outbox_schema_opts_t. Optional: an older host never calls
 *           them, so a store offering them need not claim 7.
 *      1.8  delayed staging: OUTBOX_STORE_CAP_DELAYED and
 *           outbox_stage_ctx_t.delay_us. A store that reports the
 *           capability writes a staged row's available_at and honours
 *           delay_us; the host stages delayed events only then, so a store
 *           offering it need not claim 8.
 *
 * Structures
 *  - Versioned: they start with uint32_t struct_size and only ever grow at
 *    the end: outbox_host_t, outbox_driver_t, outbox_store_vtable_t,
 *    outbox_sink_vtable_t, outbox_store_open_t, outbox_schema_opts_t,
 *    outbox_stage_ctx_t, outbox_claim_req_t, outbox_sink_open_t,
 *    outbox_received_t, outbox_renew_req_t. Each side writes struct_size = sizeof of its own
 *    definition; the reader reads a member only when struct_size covers it
 *    (OUTBOX_STRUCT_HAS in outbox/common.h), and a member past the end has
 *    its default (NULL, 0). The host calls an optional entry only when the
 *    vtable covers it and it is not NULL.
 *  - Frozen: one layout for the whole of major 1, so arrays of them are
 *    indexed with sizeof on both sides: outbox_uri_t, outbox_uri_param_t,
 *    outbox_row_t, outbox_fence_t, outbox_settle_item_t, outbox_stats_t,
 *    outbox_header_t, outbox_message_t, outbox_publish_result_t and
 *    outbox_diag_t. What they lack arrives in a new versioned struct
 *    through a new entry.
 *
 * Entries
 *  - Required, checked at load (a module missing one is refused, naming
 *    it): init; a store's open, close, capabilities, schema_ddl, stage,
 *    claim, settle; a sink's open, close, publish. Every other entry is
 *    optional: NULL means "not supported", and the host answers
 *    OUTBOX_ENOTSUP naming the driver. Some optional entries come
 *    together or not at all (a module with part of a group is refused):
 *    begin, commit and rollback; native_begin and native_end.
 *  - Each entry's comment below says what the host has already checked
 *    before it calls it: the driver trusts that and checks it no more.
 *
 * Rules every driver follows
 *  - Inputs are borrowed for the duration of the call; copy what you keep.
 *  - Rows returned by claim, and the strings they point to, stay valid
 *    until the next claim on that handle or its close. settle receives
 *    the ids of those rows, so settle must not free or reuse them.
 *  - One handle is used by one thread at a time. init() runs once, under
 *    the loader's lock: it must not load drivers or open stores itself.
 *  - Strings in the descriptor (name, version, schemes) have static
 *    storage: modules are never unloaded.
 *  - Errors: return a negative OUTBOX_E* code and describe the problem in
 *    the outbox_diag_t given to the call (host->error()), one line, no
 *    secret (outbox_kit_uri_show, outbox_kit_redact). Never print, never
 *    exit or abort.
 *  - Timestamps are microseconds since the Unix epoch (UTC); 0 means NULL.
 */
#ifndef OUTBOX_DRIVER_H
#define OUTBOX_DRIVER_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OUTBOX_ABI_MAJOR 1
#define OUTBOX_ABI_MINOR 8

#define OUTBOX_DRIVER_ENTRY_SYMBOL "outbox_driver_entry"

/* ----------------------------------------------------------------- URIs */

typedef struct outbox_uri_param {
    const char *key;
    const char *value; /* percent-decoded */
} outbox_uri_param_t;

/* A URI split by the host (frozen, like its params). Absent parts are
 * NULL (port 0). The password is never to be printed. */
typedef struct outbox_uri {
    const char *raw;      /* the URI exactly as the user gave it */
    const char *scheme;   /* lower-case */
    const char *user;
    const char *password;
    const char *host;     /* an authority listing several hosts ("k1:9092,k2:9092", each
                             checked) gives the list as written here, and port 0; the host
                             hands such a URI only to drivers of ABI 1.2 and later (an older
                             one was promised a single host, and the host refuses it) */
    int port;
    const char *path;     /* percent-decoded; "/abs" for scheme:///abs, "rel" for scheme:rel */
    const outbox_uri_param_t *params;
    size_t n_params;
} outbox_uri_t;

/* ---------------------------------------------------------------- host */

enum outbox_log_level {
    OUTBOX_LOG_ERROR = 0,
    OUTBOX_LOG_WARN = 1,
    OUTBOX_LOG_INFO = 2,
    OUTBOX_LOG_DEBUG = 3,
};

/* A driver's copy of the secrets of one URI, kept for the life of a
 * handle (ABI 1.4; outbox/kit.h's outbox_kit_redactor_*). Opaque. */
typedef struct outbox_redactor outbox_redactor_t;

/* Services the host lends to drivers; valid for the life of the process
 * and safe to call from any thread. The log callback the application
 * installed runs inside log(): keep driver locks out of it. */
typedef struct outbox_host {
    uint32_t struct_size;
    /* ABI 1.0 */
    void *(*alloc)(size_t size);
    void *(*realloc)(void *ptr, size_t size);
    void (*free)(void *ptr);
    /* Sets d->code and d->message, returns code (so `return host->error(...)`). */
    int (*error)(outbox_diag_t *d, int code, const char *fmt, ...) OUTBOX_PRINTF(3, 4);
    void (*log)(int level, const char *driver, const char *fmt, ...) OUTBOX_PRINTF(3, 4);
    /* Wall clock, microseconds since the epoch. */
    int64_t (*now_us)(void);
    /* ABI 1.1 */
    /* A clock that never goes back, in microseconds from an arbitrary
     * start: for timeouts and durations (a wall clock jumps). */
    int64_t (*monotonic_us)(void);
    /* error() for a driver's own variadic wrappers. */
    int (*verror)(outbox_diag_t *d, int code, const char *fmt, va_list ap) OUTBOX_PRINTF(3, 0);
    /* ABI 1.4: the policies every driver must share, kept in the host so
     * that a fix to one reaches drivers already built. Call them through
     * outbox/kit.h (outbox_kit_opt_*, outbox_kit_uri_show,
     * outbox_kit_redactor_*), which applies the same rules built in when
     * the host predates them.
     *
     * The options of a URI, in the one grammar every driver's URI has
     * (kit.h states it). Each reads parameter key of uri: absent, it
     * returns OUTBOX_OK and leaves *out as it was (set the default
     * first); bad, OUTBOX_EINVAL with one line in d that names label (the
     * driver, e.g. "NATS sink"), the URI with its secrets masked, the
     * option and what it takes. opt_secret gives key's value, or the value
     * of the environment variable key_env names; it points into uri or the
     * environment, so copy it. */
    int (*opt_duration)(const outbox_uri_t *uri, const char *label, const char *key,
                        int64_t min_us, int64_t max_us, int64_t *out, outbox_diag_t *d);
    int (*opt_int)(const outbox_uri_t *uri, const char *label, const char *key, int64_t min,
                   int64_t max, int64_t *out, outbox_diag_t *d);
    int (*opt_bool)(const outbox_uri_t *uri, const char *label, const char *key, int *out,
                    outbox_diag_t *d);
    int (*opt_secret)(const outbox_uri_t *uri, const char *label, const char *key,
                      const char **out, outbox_diag_t *d);
    /* uri for a message: one line, the password and secret parameters'
     * values "***" (size > 0). */
    void (*uri_show)(const outbox_uri_t *uri, char *out, size_t size);
    /* A redactor keeps copies of uri's secrets (the password as decoded
     * and as typed, secret parameters' values, and the values of the
     * environment variables their *_env parameters name), since uri is
     * borrowed only during open; NULL when out of memory. redact copies
     * in to out (size > 0) as one line with each of them "***", for text
     * the driver did not write itself (a client library's error). */
    outbox_redactor_t *(*redactor_new)(const outbox_uri_t *uri);
    void (*redact)(const outbox_redactor_t *r, const char *in, char *out, size_t size);
    void (*redactor_free)(outbox_redactor_t *r);
} outbox_host_t;

/* ------------------------------------------------------------- the row */

/* One outbox row (frozen). Strings are NUL-terminated; optional ones are
 * NULL when absent. UUIDs are canonical 36-char lower-case text. */
typedef struct outbox_row {
    const char *id;            /* UUIDv7 minted by the host at staging */
    const char *route;
    const char *event_id;
    const char *event_type;
    const char *tenant_id;
    const char *execution_id;
    const char *correlation_id;
    const char *causation_id;
    int64_t occurred_at;
    const char *payload;       /* JSON text, validated by the host */
    size_t payload_len;
    const char *ordering_key;
    const char *traceparent;   /* only stored when the column exists */
    int64_t hlc;               /* 0 = NULL; only stored when the column exists */
    int32_t attempts;
    int64_t created_at;
    int64_t available_at;      /* 0 = NULL = claimable now */
    const char *last_error;
} outbox_row_t;

/* ---------------------------------------------------------------- store */

/* Capabilities: declared statically in the descriptor, and detected per
 * handle at open (outbox_store_vtable.capabilities). */
#define OUTBOX_STORE_CAP_TRANSACTIONS (1u << 0) /* begin/commit/rollback, stage in a tx */
#define OUTBOX_STORE_CAP_NATIVE_TX    (1u << 1) /* stage/advance through the app's native handle */
#define OUTBOX_STORE_CAP_HLC          (1u << 2) /* the hlc column exists */
#define OUTBOX_STORE_CAP_TRACEPARENT  (1u << 3) /* the traceparent column exists */
#define OUTBOX_STORE_CAP_CHECKPOINT   (1u << 4) /* the checkpoint table exists */
#define OUTBOX_STORE_CAP_WAIT         (1u << 5) /* push wake-up (wait() does not just sleep) */
#define OUTBOX_STORE_CAP_CONCURRENT   (1u << 6) /* several handles may claim one route at once */
/* Under hlc ordering, rows without an hlc come FIRST instead of last
 * (MongoDB sorts a missing field before any value). A store that declares
 * it documents the deviation; the conformance battery then expects it. */
#define OUTBOX_STORE_CAP_HLC_NULLS_FIRST (1u << 7)
/* The inbox table exists (ABI 1.7): inbox_accept, inbox_purge and
 * inbox_stats work on this handle. */
#define OUTBOX_STORE_CAP_INBOX (1u << 8)
/* Delayed staging (ABI 1.8): stage writes each row's available_at, and a
 * ctx->delay_us above 0 holds every row of the call back until the
 * store's clock at the write plus delay_us. Without it the host refuses
 * to stage an event that is not to be published at once. */
#define OUTBOX_STORE_CAP_DELAYED (1u << 9)

/* Open flags. */
#define OUTBOX_OPEN_SCHEMA_ONLY (1u << 0) /* connect only: no table detection (schema apply/check) */
/* The caller will only read (stats, schema check): open so that nothing in
 * the store changes, not even settings that opening would otherwise make
 * (SQLite: SQLITE_OPEN_READONLY and no journal-mode switch, so a file the
 * user may only read can be inspected; PostgreSQL: a read-only session).
 * Writing calls on such a handle fail. A driver that predates the flag
 * ignores it and opens as before. */
#define OUTBOX_OPEN_READ_ONLY (1u << 1)
/* Create nothing (ABI 1.4): a schema-only open that would make a missing
 * database (SQLite's file) fails with OUTBOX_EMISSING instead, so that
 * `schema check` of a mistyped path says so rather than making an empty
 * database to check. A driver that predates the flag ignores it. */
#define OUTBOX_OPEN_MUST_EXIST (1u << 2)

typedef struct outbox_store_open {
    uint32_t struct_size;
    const outbox_uri_t *uri;
    const char *relation;            /* validated identifier, "table" or "schema.table" */
    const char *checkpoint_relation; /* validated; the host defaults it to hlc_checkpoint beside relation */
    uint32_t flags;
    /* ABI 1.7: validated; the host defaults it to outbox_inbox beside
     * relation. Open detects it as it detects the checkpoint table. */
    const char *inbox_relation;
} outbox_store_open_t;

#define OUTBOX_SCHEMA_HLC         (1u << 0)
#define OUTBOX_SCHEMA_TRACEPARENT (1u << 1)
#define OUTBOX_SCHEMA_CHECKPOINT  (1u << 2)
#define OUTBOX_SCHEMA_INBOX       (1u << 3) /* ABI 1.7: the inbox table too */

typedef struct outbox_schema_opts {
    uint32_t struct_size;
    const char *relation;
    const char *checkpoint_relation;
    uint32_t flags; /* OUTBOX_SCHEMA_* */
    const char *inbox_relation; /* ABI 1.7; the host sets it (its default) with OUTBOX_SCHEMA_INBOX */
} outbox_schema_opts_t;

/* Called once per problem found by schema_check, e.g. "missing column ordering_key". */
typedef void (*outbox_schema_report_fn)(void *ctx, const char *problem);

/* How a stage call relates to transactions. */
typedef struct outbox_stage_ctx {
    uint32_t struct_size;
    void *native_tx;  /* the application's native handle (PGconn*, sqlite3*,
                         mongoc_client_session_t*) inside its open transaction, or NULL */
    int in_own_tx;    /* 1: the handle's own transaction (begin) is open */
    /* When non-NULL: advance this checkpoint node key to max_hlc in the same
     * transaction (the host sets it only when staging inside a transaction). */
    const char *checkpoint_node_key;
    int64_t max_hlc;
    /* ABI 1.8, only for a store with OUTBOX_STORE_CAP_DELAYED: when above 0,
     * every row is claimable only from the store's clock (the one its
     * claims compare available_at with: the database server's, or the
     * host's now_us for a store without one) at the write plus delay_us;
     * the rows' own available_at are then 0. At most
     * OUTBOX_DURATION_MAX_US. */
    int64_t delay_us;
} outbox_stage_ctx_t;

typedef struct outbox_claim_req {
    uint32_t struct_size;
    const char *route;
    size_t limit;
    int64_t lease_us;   /* processing rows older than this may be claimed again */
    int hlc_order;      /* order by hlc NULLS LAST, created_at, id */
} outbox_claim_req_t;

/* The fence of one claim (frozen). SQL stores put the processing_at value
 * the claim wrote in stamp; stores with a token put it in token. The host
 * treats it as opaque and hands it back to settle unchanged: compare it for
 * equality with what the claim wrote, never with a fresh clock reading. */
typedef struct outbox_fence {
    int64_t stamp;
    char token[40];
} outbox_fence_t;

enum outbox_settle_kind {
    OUTBOX_SETTLE_PUBLISHED = 1, /* published, published_at = now */
    OUTBOX_SETTLE_RESCHEDULE = 2,/* pending, available_at, last_error */
    OUTBOX_SETTLE_DEAD = 3,      /* dead, last_error */
    OUTBOX_SETTLE_RELEASE = 4,   /* pending, attempts - 1; ABI 1.5: available_at when
                                    not 0 (the row is not claimable before it) */
};

/* One outcome for settle (frozen). */
typedef struct outbox_settle_item {
    const char *id;
    int kind;                /* enum outbox_settle_kind */
    int64_t available_at;    /* RESCHEDULE (0 = NULL); RELEASE (0 = unchanged; ABI 1.5) */
    const char *error;       /* RESCHEDULE, DEAD; may be NULL */
    int applied;             /* OUT: 1 when the row still held the fence and changed */
} outbox_settle_item_t;

/* Filled by stats (frozen). */
typedef struct outbox_stats {
    uint64_t pending;
    uint64_t processing;
    uint64_t published;
    uint64_t dead;
    int64_t oldest_pending_created_at; /* 0 when nothing is pending */
} outbox_stats_t;

/* What renew is asked (versioned; ABI 1.5). */
typedef struct outbox_renew_req {
    uint32_t struct_size;
    const char *route;           /* the route the rows were claimed on */
    const outbox_fence_t *fence; /* the fence they hold now: a claim's, or a renewal's */
    const char *const *ids;      /* the rows to renew */
    size_t n;
} outbox_renew_req_t;

/* Callbacks of the ABI 1.3 listing entries (routes, dead_list). */
typedef int (*outbox_route_fn)(void *ctx, const char *route, const outbox_stats_t *stats);
typedef int (*outbox_row_fn)(void *ctx, const outbox_row_t *row);
/* One consumer's inbox records (ABI 1.7): how many, and when the oldest
 * and newest were received (microseconds since the epoch). Non-zero stops
 * the listing. */
typedef int (*outbox_inbox_fn)(void *ctx, const char *consumer, uint64_t records,
                               int64_t oldest_us, int64_t newest_us);

typedef struct outbox_store_vtable {
    uint32_t struct_size;

    /* Required. Connect and detect the optional columns and tables. A
     * missing table (collection, database file) is OUTBOX_EMISSING naming
     * it, a missing required column OUTBOX_ESCHEMA naming it (neither under
     * OUTBOX_OPEN_SCHEMA_ONLY, except a database OUTBOX_OPEN_MUST_EXIST
     * forbids creating). Drivers before ABI 1.4 say OUTBOX_ESCHEMA for a
     * missing table as well. The host has checked: params->uri is parsed
     * (a list of hosts only for drivers of ABI 1.2 and later), relation and
     * checkpoint_relation are valid identifiers ("table" or
     * "schema.table"), handle and d are not NULL. */
    int (*open)(const outbox_store_open_t *params, void **handle, outbox_diag_t *d);
    /* Required. Never fails; NULL is a no-op. */
    void (*close)(void *handle);
    /* Required. Capabilities of this handle (descriptor caps + detected). */
    uint32_t (*capabilities)(void *handle);
    /* Required. The canonical DDL; *out allocated with host->alloc, the host frees it. */
    int (*schema_ddl)(const outbox_schema_opts_t *opts, char **out, outbox_diag_t *d);
    /* Optional. Create what schema_ddl describes (idempotent). */
    int (*schema_apply)(void *handle, const outbox_schema_opts_t *opts, outbox_diag_t *d);
    /* Optional. Compare the live schema with the canonical one and report each
     * problem; *problems = their number. Never changes anything. */
    int (*schema_check)(void *handle, const outbox_schema_opts_t *opts,
                        outbox_schema_report_fn report, void *ctx, size_t *problems,
                        outbox_diag_t *d);

    /* Optional (OUTBOX_STORE_CAP_TRANSACTIONS). */
    int (*begin)(void *handle, outbox_diag_t *d);
    int (*commit)(void *handle, outbox_diag_t *d);
    int (*rollback)(void *handle, outbox_diag_t *d);

    /* Required. Insert rows (status pending, attempts 0, one created_at for
     * the call, which the host has put in every row). A duplicate
     * (route, event_id) is skipped; *staged = rows actually inserted. When
     * neither native_tx nor in_own_tx is set, the call is atomic on its own.
     * The host has checked: n >= 1 and rows and staged are not NULL. In
     * every row: id is a fresh UUIDv7 and event_id and the other ids, when
     * set, canonical lower-case UUIDs; route and event_type are 1 to 255
     * bytes and ordering_key (when set) 1 to 1024 bytes of UTF-8 without a
     * control character; payload is valid JSON of payload_len bytes;
     * traceparent (when set) is W3C trace context, and set only when the
     * handle's capabilities have OUTBOX_STORE_CAP_TRACEPARENT; occurred_at
     * and created_at are set. native_tx is set only when they have
     * OUTBOX_STORE_CAP_NATIVE_TX; a route marked require_transaction is
     * staged only inside a transaction. */
    int (*stage)(void *handle, const outbox_stage_ctx_t *ctx, const outbox_row_t *rows, size_t n,
                 size_t *staged, outbox_diag_t *d);

    /* Required. Take up to limit claimable rows of the route atomically, in
     * claim order, obeying the per-key rule: a row with an ordering key is
     * claimable only when every earlier row of that key (by claim order) is
     * published or dead, or is claimed by this same call. Sets processing,
     * processing_at, the fence, attempts + 1. *rows belongs to the handle.
     * The host has checked: req, rows, n and fence are not NULL, *rows is
     * NULL, *n is 0 and the fence is zeroed; req->route is 1 to 255 bytes of
     * UTF-8 without a control character; req->limit >= 1; req->lease_us > 0;
     * hlc_order is set only when the handle's capabilities have
     * OUTBOX_STORE_CAP_HLC. */
    int (*claim)(void *handle, const outbox_claim_req_t *req, const outbox_row_t **rows, size_t *n,
                 outbox_fence_t *fence, outbox_diag_t *d);

    /* Required. Apply every item in one round trip, each only to a row that
     * still holds the fence (status processing, same fence). Sets
     * items[i].applied and *applied = their number. The host has checked:
     * fence, items and applied are not NULL, *applied is 0, n >= 1, and
     * every item has an id and a kind from OUTBOX_SETTLE_PUBLISHED to
     * OUTBOX_SETTLE_RELEASE with applied 0. The fence is what a claim on
     * some handle gave, or garbage from a confused caller: match it, never
     * trust it. */
    int (*settle)(void *handle, const outbox_fence_t *fence, outbox_settle_item_t *items, size_t n,
                  size_t *applied, outbox_diag_t *d);

    /* Optional (OUTBOX_STORE_CAP_CHECKPOINT). One atomic server-side
     * max-upsert; in native_tx or the own open tx when given. */
    int (*checkpoint_advance)(void *handle, const outbox_stage_ctx_t *ctx, const char *node_key,
                              int64_t hlc, outbox_diag_t *d);
    /* Optional. The max hlc across node keys, 0 when none. */
    int (*checkpoint_recover)(void *handle, int64_t *hlc, outbox_diag_t *d);

    /* Optional. Block up to timeout_ms or until rows may have been staged.
     * Returns OK in both cases. NULL: the host polls. */
    int (*wait)(void *handle, const char *route, int timeout_ms, outbox_diag_t *d);

    /* Optional. route NULL = every route. */
    int (*stats)(void *handle, const char *route, outbox_stats_t *out, outbox_diag_t *d);
    /* Optional. dead -> pending, attempts 0, available_at NULL. event_id NULL
     * = every dead row (of the route, or of every route when route is NULL). */
    int (*replay)(void *handle, const char *route, const char *event_id, uint64_t *count,
                  outbox_diag_t *d);
    /* Optional. Delete published rows with published_at < before, in batches. */
    int (*purge)(void *handle, const char *route, int64_t before, uint64_t *count, outbox_diag_t *d);

    /* Optional. Drop what schema_apply created for opts (the conformance
     * battery cleans up its per-case relations with it). */
    int (*schema_drop)(void *handle, const outbox_schema_opts_t *opts, outbox_diag_t *d);
    /* Optional. Open a SEPARATE native connection to the same store with a
     * transaction begun on it, and return the handle an application would
     * pass as native_tx (sqlite3*, PGconn*, mongoc_client_session_t*).
     * native_end commits (commit = 1) or rolls back, then closes it. Used by
     * the conformance battery to stage as an application would. */
    int (*native_begin)(void *handle, void **native_tx, outbox_diag_t *d);
    int (*native_end)(void *handle, void *native_tx, int commit, outbox_diag_t *d);

    /* ABI 1.3, optional: what an operator lists (outbox routes, outbox dead
     * list). Both read only; neither changes a row.
     *
     * routes: call fn once per route the relation holds a row of, in any
     * order, with the same counts stats gives for that route (borrowed for
     * the call). fn returning non-zero stops the listing; routes then
     * returns that value unchanged, without touching d. */
    int (*routes)(void *handle, outbox_route_fn fn, void *ctx, outbox_diag_t *d);
    /* dead_list: call fn for up to limit dead rows of route in claim order
     * (created_at, id), starting after the row whose id is after_id (NULL:
     * from the first). The after row may have any status now, but must be
     * a row of the route: when none has that id, OUTBOX_ENOTFOUND. Each
     * row has at least id, route, event_id, event_type, ordering_key,
     * attempts, created_at and last_error set; the others may be NULL/0
     * (payload too). The row and its strings live only for the callback.
     * fn returning non-zero stops as in routes. The host validates route,
     * after_id (a canonical lower-case UUID) and limit (1..10001). */
    int (*dead_list)(void *handle, const char *route, const char *after_id, size_t limit,
                     outbox_row_fn fn, void *ctx, outbox_diag_t *d);

    /* ABI 1.5, optional: lease renewal. In one atomic step, every listed
     * row that still holds req->fence (status processing, same fence) gets
     * processing_at = now, the store's clock as claim reads it, and a new
     * fence, the same for all of them and never one a live claim of the
     * route holds; rows that no longer hold it are left alone. Sets
     * *renewed to the new fence and *count to the rows that moved (0:
     * *renewed stays zeroed). A relay renews what it holds while it
     * publishes, so a short lease does not expire under a slow publish,
     * and settles with the newest fence. The host has checked: req,
     * renewed and count are not NULL, *renewed is zeroed and *count 0,
     * req->route as for claim, req->fence not NULL, n >= 1 and every id
     * not NULL. Like settle's, the fence may be garbage: match it. */
    int (*renew)(void *handle, const outbox_renew_req_t *req, outbox_fence_t *renewed, size_t *count,
                 outbox_diag_t *d);

    /* ABI 1.7, optional, all three or none: the inbox, a table of
     * (consumer, event_id, received_at) unique on (consumer, event_id).
     * The host calls them only on a handle whose capabilities have
     * OUTBOX_STORE_CAP_INBOX, and has checked: consumer and event_id are
     * non-empty UTF-8 of at most 200 bytes without control characters.
     *
     * inbox_accept records (consumer, event_id) received now, in ONE
     * atomic statement, and sets *is_new to 1 when this call added it, 0
     * when it was there (of two calls racing on one pair, exactly one
     * sees 1, whatever the isolation level). Transactions as for stage:
     * ctx->native_tx inside the application's transaction, else the
     * handle's own when ctx->in_own_tx, else a statement of its own. A
     * rolled-back record is gone, so its event counts as new again. */
    int (*inbox_accept)(void *handle, const outbox_stage_ctx_t *ctx, const char *consumer,
                        const char *event_id, int *is_new, outbox_diag_t *d);
    /* Deletes the records received before before_us, of consumer (NULL:
     * every consumer); *count: how many. */
    int (*inbox_purge)(void *handle, const char *consumer, int64_t before_us, uint64_t *count,
                       outbox_diag_t *d);
    /* Calls fn once per consumer (only consumer's when not NULL) in byte
     * order, with its counts; fn's non-zero return stops and is returned. */
    int (*inbox_stats)(void *handle, const char *consumer, outbox_inbox_fn fn, void *ctx,
                       outbox_diag_t *d);
} outbox_store_vtable_t;

/* ----------------------------------------------------------------- sink */

#define OUTBOX_SINK_CAP_ORDERED (1u << 0)
/* OUTBOX_SINK_CAP_ORDERED: within one publish call, messages that share a
 * key reach the broker in array order, and after a message fails (RETRY or
 * REJECT), no later message with the same key in that call is delivered
 * (each is reported RETRY). The relay then hands a whole batch to one call;
 * without the capability it sends at most one message per key per call.
 * REJECT counts as a failure because the relay stores its verdict only
 * after the call: if it dies first, the rejected message is offered again
 * and may be accepted, and it must not then arrive after its successors. */

#define OUTBOX_SINK_CAP_DEDUPE (1u << 1)
/* OUTBOX_SINK_CAP_DEDUPE: the sink hands event_id to the broker as its
 * dedupe id, and the broker drops a second message with the same id
 * (within its dedupe window), so a message published twice is read once.
 * The sink battery checks it. */

/* One header (frozen). name is the CloudEvents attribute name without any binding
 * prefix ("id", "type", "source", "specversion", "time", "datacontenttype",
 * "partitionkey", "traceparent", "tenantid", "correlationid",
 * "causationid", "executionid", "hlc"); each sink spells it for its
 * protocol ("ce-id", "ce_id", "cloudEvents:id"), except traceparent,
 * which keeps its W3C name everywhere. */
typedef struct outbox_header {
    const char *name;
    const char *value;
} outbox_header_t;

/* One message to publish (frozen). */
typedef struct outbox_message {
    const char *route;
    const char *destination;   /* the route passed through the destination template */
    const char *key;           /* ordering_key, falling back to event_id */
    const char *event_id;      /* broker dedupe id where the broker has one */
    const char *payload;
    size_t payload_len;
    const outbox_header_t *headers;
    size_t n_headers;
    const outbox_row_t *row;   /* the row itself, for sinks that want more */
} outbox_message_t;

enum outbox_publish_status {
    OUTBOX_PUBLISH_OK = 0,     /* durably accepted by the broker */
    OUTBOX_PUBLISH_RETRY = 1,  /* transient */
    OUTBOX_PUBLISH_REJECT = 2, /* permanent */
    /* ABI 1.5: not delivered yet for a reason outside the message and
     * outside this call's reach (its partition has no leader while the
     * broker's others take messages), and the sink still holds it: the
     * relay hands the row back uncharged, holds back its key's later rows,
     * and offers it again at once; the sink then reports the outcome of
     * the copy it holds rather than sending it twice. Returned only when
     * outbox_sink_open_t.defer_ok was set; never trips the relay's breaker. */
    OUTBOX_PUBLISH_DEFER = 3,
};

/* Filled by publish (frozen). */
typedef struct outbox_publish_result {
    int status;                       /* enum outbox_publish_status */
    char message[OUTBOX_MESSAGE_MAX]; /* why, when not OK */
} outbox_publish_result_t;

typedef struct outbox_sink_open {
    uint32_t struct_size;
    const outbox_uri_t *uri;
    int defer_ok; /* ABI 1.5: the caller takes OUTBOX_PUBLISH_DEFER */
} outbox_sink_open_t;

/* One message read back from the broker by a sink's reader (versioned;
 * ABI 1.2). The reader fills it; everything it points to belongs to the
 * reader and stays valid until the next reader_next or reader_close. */
typedef struct outbox_received {
    uint32_t struct_size;       /* set by the caller */
    const char *destination;    /* where it was read from */
    const char *key;            /* the broker's message key; NULL when the protocol has none */
    const char *dedupe_id;      /* the broker's dedupe id (Nats-Msg-Id, message_id); NULL if none */
    const char *payload;        /* the bytes as the broker holds them */
    size_t payload_len;
    /* The CloudEvents attributes the message carries, named as in
     * outbox_header_t (the binding's prefix taken off again: "id", not
     * "ce_id"; "datacontenttype" also for Kafka's content-type), in any
     * order. Headers that are not CloudEvents attributes are left out. */
    const outbox_header_t *headers;
    size_t n_headers;
    /* ABI 1.6: every header (or application property, stream-entry
     * field, JSON member) the message carries, under the exact name the
     * protocol puts on the wire, nothing mapped or left out; NULL and 0
     * when the reader does not report them. Set only when struct_size
     * covers these members (OUTBOX_STRUCT_HAS). */
    const outbox_header_t *wire_headers;
    size_t n_wire_headers;
} outbox_received_t;

typedef struct outbox_sink_vtable {
    uint32_t struct_size;
    /* Required. */
    int (*open)(const outbox_sink_open_t *params, void **handle, outbox_diag_t *d);
    /* Required; NULL is a no-op. */
    void (*close)(void *handle);
    /* Required. Fill results[0..n) (the host zeroes them first). Return
     * OUTBOX_OK when every result is filled in; a negative code means the
     * call as a whole failed and the host treats every message as RETRY.
     * The host has checked: n >= 1, msgs and results are not NULL, and
     * results are zeroed; a status outside OK, RETRY and REJECT is turned
     * into RETRY afterwards. */
    int (*publish)(void *handle, const outbox_message_t *msgs, size_t n,
                   outbox_publish_result_t *results, outbox_diag_t *d);

    /* ABI 1.2, optional: what the sink conformance battery (and an
     * operator's tooling) uses. The battery publishes to destinations
     * of its own, conf_<pid>_<n>, reads back what arrived, and removes
     * them afterwards.
     *
     * destination_create: make publishing to destination work: a Kafka
     * topic, a JetStream stream that captures the subject. Creating one
     * that exists is not an error. destination_drop removes it and what
     * it holds. A sink whose destinations need no creating leaves both
     * NULL. */
    int (*destination_create)(void *handle, const char *destination, outbox_diag_t *d);
    int (*destination_drop)(void *handle, const char *destination, outbox_diag_t *d);
    /* A reader of destination from its first message, on its own
     * connection (the sink handle may be closed or used for publishing
     * while the reader lives; the reader does not use it after
     * reader_open returns). reader_next returns OUTBOX_OK with *out
     * filled, or OUTBOX_ENOTFOUND when no further message arrived within
     * timeout_ms, or another negative code on an error. */
    int (*reader_open)(void *handle, const char *destination, void **reader, outbox_diag_t *d);
    int (*reader_next)(void *reader, int timeout_ms, outbox_received_t *out, outbox_diag_t *d);
    /* NULL is a no-op. */
    void (*reader_close)(void *reader);
} outbox_sink_vtable_t;

/* ------------------------------------------------------------ descriptor */

enum outbox_driver_kind {
    OUTBOX_DRIVER_STORE = 1,
    OUTBOX_DRIVER_SINK = 2,
};

typedef struct outbox_driver {
    uint32_t struct_size;
    uint16_t abi_major;
    uint16_t abi_minor;
    uint32_t kind;                /* enum outbox_driver_kind */
    const char *name;             /* e.g. "sqlite" */
    const char *version;          /* the driver's own version */
    const char *const *schemes;   /* NULL-terminated URI schemes it serves */
    uint32_t capabilities;        /* OUTBOX_STORE_CAP_* or OUTBOX_SINK_CAP_* */
    /* Required. Called once, before anything else, with the host table. */
    int (*init)(const outbox_host_t *host, outbox_diag_t *d);
    const outbox_store_vtable_t *store; /* kind == STORE */
    const outbox_sink_vtable_t *sink;   /* kind == SINK */
} outbox_driver_t;

typedef const outbox_driver_t *(*outbox_driver_entry_fn)(void);

/* Emits the driver's single exported entry function. Built with
 * -DOUTBOX_DRIVER_STATIC=name the same source instead defines
 * outbox_driver_entry_<name>, so drivers can be linked into one test. */
#define OUTBOX_DRIVER_CONCAT_(a, b) a##b
#define OUTBOX_DRIVER_CONCAT(a, b) OUTBOX_DRIVER_CONCAT_(a, b)
#ifdef OUTBOX_DRIVER_STATIC
#define OUTBOX_DRIVER_ENTRY(descriptor)                                                          \
    const outbox_driver_t *OUTBOX_DRIVER_CONCAT(outbox_driver_entry_, OUTBOX_DRIVER_STATIC)(void); \
    const outbox_driver_t *OUTBOX_DRIVER_CONCAT(outbox_driver_entry_, OUTBOX_DRIVER_STATIC)(void)  \
    {                                                                                            \
        return &(descriptor);                                                                    \
    }
#else
#define OUTBOX_DRIVER_ENTRY(descriptor)                                                    \
    __attribute__((visibility("default"))) const outbox_driver_t *outbox_driver_entry(void); \
    __attribute__((visibility("default"))) const outbox_driver_t *outbox_driver_entry(void)  \
    {                                                                                      \
        return &(descriptor);                                                              \
    }
#endif

#ifdef __cplusplus
}
#endif
#endif
