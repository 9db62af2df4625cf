/* store-mem10: what the driver's three files share. Private to this folder.
 *
 * mem10 is an in-memory store driver built ONLY against the frozen ABI 1.0
 * SDK headers in tests/abi/v1_0/include. It exists to prove that a 1.0
 * driver keeps loading into the current host and passes the conformance
 * battery, so it implements the whole store contract for real, in memory.
 *
 * The files call only downward:
 *   mem10_kit.c    text helpers and the in-memory database: rows, the hash
 *                  index, claim orders, key sets, tables, named stores
 *   mem10_store.c  the contract on rows: transactions, stage, claim,
 *                  settle, checkpoints, stats/replay/purge
 *   mem10.c        descriptor, vtable, URI, open/close, and the schema
 *                  entries (which tables exist is what open checks)
 *
 * Locking: every named store has one mutex that guards all of its tables
 * and rows; every entry that touches them holds it for the whole call, which
 * is what makes each call atomic and lets handles of one store run on
 * different threads at once. A handle itself is used by one thread at a time.
 */
#ifndef OUTBOX_STORE_MEM10_INT_H
#define OUTBOX_STORE_MEM10_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox/driver.h"

/* The 1.0 headers say 1.0; a newer SDK on the include path would say
 * otherwise and stop the build here. (tests/abi/meson.build also checks,
 * from the compiler's dependency output, which header files were read.) */
#if OUTBOX_ABI_MAJOR != 1 || OUTBOX_ABI_MINOR != 0
#error "store-mem10 must be built against the frozen ABI 1.0 headers (tests/abi/v1_0/include)"
#endif

#define MEM10_HIDDEN __attribute__((visibility("hidden")))
#define MEM10_NAME "mem10"

/* The host table given to init(); the only mutable static besides the
 * registry of named stores. */
extern MEM10_HIDDEN const outbox_host_t *outbox_mem10_host;

/* ------------------------------------------------------------------ text */

MEM10_HIDDEN char *outbox_mem10_strdup(const char *s);
/* `[A-Za-z_][A-Za-z0-9_]*`, optionally `schema.table` of two of them. */
MEM10_HIDDEN int outbox_mem10_ident_valid(const char *s);

/* A growable string; after a failed allocation every append is a no-op
 * and failed stays set, so callers check once at the end. */
typedef struct mem10_buf {
    char *p;
    size_t len;
    size_t cap;
    int failed;
} mem10_buf_t;

MEM10_HIDDEN void outbox_mem10_buf_add(mem10_buf_t *b, const char *fmt, ...) OUTBOX_PRINTF(2, 3);

/* ------------------------------------------------------------------ rows */

enum mem10_status {
    MEM10_PENDING = 0,
    MEM10_PROCESSING,
    MEM10_PUBLISHED,
    MEM10_DEAD,
    MEM10_GONE, /* purged: about to be unlinked and freed */
};

struct mem10_route;

/* One outbox row. The immutable strings live in text[] and v points into
 * it; what settle changes (status, attempts, available_at, last_error)
 * is kept beside. v.last_error is never used: error is the row's. */
typedef struct mem10_row {
    outbox_row_t v;
    char *error;
    int status;
    int64_t processing_at;     /* written by claim; the claim's fence */
    int64_t published_at;
    uint64_t tx;               /* 0: committed; else the open transaction that staged it */
    struct mem10_route *route; /* the partition of its route */
    struct mem10_row *next_id, *next_event; /* hash chains */
    char text[];
} mem10_row_t;

/* A deep copy of in, status pending, attempts 0; NULL without memory. */
MEM10_HIDDEN mem10_row_t *outbox_mem10_row_new(const outbox_row_t *in);
MEM10_HIDDEN void outbox_mem10_row_free(mem10_row_t *r);
/* A claimed row handed out: *out gets the row with its last_error, every
 * text copied to *w, which must have export_size bytes. */
MEM10_HIDDEN size_t outbox_mem10_row_export_size(const mem10_row_t *r);
MEM10_HIDDEN void outbox_mem10_row_export(const mem10_row_t *r, outbox_row_t *out, char **w);

/* ---------------------------------------------------------- hash index */

/* Rows by id (chained through next_id) or by (route, event_id) (through
 * next_event). The chains are intrusive, so adding never allocates:
 * growing the slot array is an optimisation that may fail harmlessly. */
typedef struct mem10_index {
    mem10_row_t **slots;
    size_t n_slots;
    size_t count;
    int by_event;
} mem10_index_t;

MEM10_HIDDEN int outbox_mem10_index_init(mem10_index_t *ix, int by_event);
/* Frees the slots, not the rows. */
MEM10_HIDDEN void outbox_mem10_index_fini(mem10_index_t *ix);
/* b is the event_id for a by_event index, ignored otherwise. */
MEM10_HIDDEN mem10_row_t *outbox_mem10_index_find(const mem10_index_t *ix, const char *a,
                                                  const char *b);
MEM10_HIDDEN void outbox_mem10_index_add(mem10_index_t *ix, mem10_row_t *r);
MEM10_HIDDEN void outbox_mem10_index_remove(mem10_index_t *ix, mem10_row_t *r);

/* --------------------------------------------------------- claim orders */

/* The committed rows of one route sorted in one claim order: created_at,
 * id; or with hlc: hlc NULLS LAST, created_at, id. This is the store's
 * claim index. The first `settled` rows are published or dead, so a claim
 * starts after them; anything that may put an unsettled row inside that
 * prefix lowers it. */
typedef struct mem10_order {
    mem10_row_t **v;
    size_t n;
    size_t cap;
    size_t settled;
    int hlc;
} mem10_order_t;

/* Makes room for need rows in all (cap >= need). */
MEM10_HIDDEN int outbox_mem10_order_reserve(mem10_order_t *o, size_t need);
/* Needs room reserved. */
MEM10_HIDDEN void outbox_mem10_order_insert(mem10_order_t *o, mem10_row_t *r);
/* Drops the MEM10_GONE rows, and frees them with free_gone (the last
 * order a row is in does that). */
MEM10_HIDDEN void outbox_mem10_order_compact(mem10_order_t *o, int free_gone);

/* ------------------------------------------------------------- key sets */

/* The ordering keys a claim found blocked; keys are borrowed from rows. */
typedef struct mem10_keyset {
    const char **slots;
    size_t cap;
    size_t n;
} mem10_keyset_t;

MEM10_HIDDEN int outbox_mem10_keyset_has(const mem10_keyset_t *s, const char *key);
MEM10_HIDDEN int outbox_mem10_keyset_add(mem10_keyset_t *s, const char *key);
MEM10_HIDDEN void outbox_mem10_keyset_fini(mem10_keyset_t *s);

/* ------------------------------------------------------------- tables */

/* The rows of one route within a table. Both orders always have room for
 * the route's committed rows plus its rows waiting in open transactions
 * (uncommitted), so a commit never allocates and so never fails halfway. */
typedef struct mem10_route {
    struct mem10_route *next;
    mem10_order_t by_created;
    mem10_order_t by_hlc; /* kept only while the table has the hlc column */
    size_t uncommitted;
    char name[];
} mem10_route_t;

typedef struct mem10_mark {
    char *node_key;
    int64_t hlc;
} mem10_mark_t;

/* A relation of a named store: an outbox table or a checkpoint table.
 * generation is unique within the store, so a transaction can tell the
 * table it wrote to from one dropped and created again under its name. */
typedef struct mem10_table {
    struct mem10_table *next;
    uint64_t generation;
    int checkpoint;
    /* outbox table */
    int has_hlc;
    int has_traceparent;
    mem10_route_t *routes;
    mem10_index_t ids;    /* committed rows */
    mem10_index_t events; /* every row, committed or not: (route, event_id) is unique */
    int64_t last_stamp;   /* the newest claim fence */
    /* checkpoint table: one max-only mark per node key; cap_marks also
     * covers the keys that open transactions may add (reserved_marks) */
    mem10_mark_t *marks;
    size_t n_marks;
    size_t cap_marks;
    size_t reserved_marks;
    char name[];
} mem10_table_t;

MEM10_HIDDEN mem10_table_t *outbox_mem10_table_new(const char *name, int checkpoint,
                                                   uint64_t generation);
/* Frees the table with every row, committed or not. */
MEM10_HIDDEN void outbox_mem10_table_free(mem10_table_t *t);
/* Adds the hlc column and its claim order (existing rows have hlc NULL). */
MEM10_HIDDEN int outbox_mem10_table_add_hlc(mem10_table_t *t);
MEM10_HIDDEN mem10_route_t *outbox_mem10_route_find(const mem10_table_t *t, const char *route);
/* Finds or creates the route's partition; NULL without memory. */
MEM10_HIDDEN mem10_route_t *outbox_mem10_route_get(mem10_table_t *t, const char *route);
/* Makes room in the route's orders for extra more rows beyond its
 * committed and uncommitted ones. */
MEM10_HIDDEN int outbox_mem10_route_reserve(const mem10_table_t *t, mem10_route_t *r,
                                            size_t extra);
/* Puts a committed row into the id index and its route's orders (room
 * reserved). */
MEM10_HIDDEN void outbox_mem10_table_link(mem10_table_t *t, mem10_row_t *r);
MEM10_HIDDEN mem10_mark_t *outbox_mem10_mark_find(mem10_mark_t *marks, size_t n,
                                                  const char *node_key);

/* ------------------------------------------------------------- store */

/* A named store: its tables, all guarded by mu. */
typedef struct mem10_store {
    struct mem10_store *next;
    pthread_mutex_t mu;
    unsigned handles;      /* under the registry's lock */
    mem10_table_t *tables;
    uint64_t generations;  /* the last table generation handed out */
    uint64_t transactions; /* the last transaction id handed out */
    char name[];
} mem10_store_t;

/* What one handle's open transaction holds back until commit. */
typedef struct mem10_tx {
    uint64_t id;          /* 0: no transaction is open */
    uint64_t table_gen;   /* the table its rows wait in (0: none staged yet) */
    mem10_row_t **rows;   /* staged, in the table's event index with tx = id */
    size_t n_rows;
    size_t cap_rows;
    uint64_t ckpt_gen;    /* the checkpoint table its advances are for */
    mem10_mark_t *marks;  /* advances, max per node key; each new key holds a
                             reserved slot in the checkpoint table */
    size_t n_marks;
    size_t cap_marks;
} mem10_tx_t;

typedef struct mem10_handle {
    mem10_store_t *store;
    char *relation;
    char *checkpoint_relation;
    uint32_t caps; /* detected: OUTBOX_STORE_CAP_HLC, _TRACEPARENT, _CHECKPOINT */
    mem10_tx_t tx;
    void *claimed; /* the rows of the last claim, one allocation */
} mem10_handle_t;

/* Named stores: attach finds or creates one; a store lives while a handle
 * is attached or it holds a table, so tables outlive the handles that
 * created them, as in a database. */
MEM10_HIDDEN int outbox_mem10_store_attach(const char *name, mem10_store_t **out,
                                           outbox_diag_t *d);
MEM10_HIDDEN void outbox_mem10_store_detach(mem10_store_t *s);

/* The rest needs the store's mutex held, except detect, which takes it. */
MEM10_HIDDEN mem10_table_t *outbox_mem10_table_find(const mem10_store_t *s, const char *name);
/* Unlinks and frees t. */
MEM10_HIDDEN void outbox_mem10_table_drop(mem10_store_t *s, mem10_table_t *t);
/* The handle's outbox table, or OUTBOX_ESCHEMA naming it. */
MEM10_HIDDEN int outbox_mem10_outbox_table(const mem10_handle_t *h, mem10_table_t **t,
                                           outbox_diag_t *d);
/* The handle's checkpoint table, or OUTBOX_ENOTSUP (it is optional). */
MEM10_HIDDEN int outbox_mem10_checkpoint_table(const mem10_handle_t *h, mem10_table_t **c,
                                               outbox_diag_t *d);
/* Fills h->caps from the live tables; with require_table a missing outbox
 * table is OUTBOX_ESCHEMA naming it. */
MEM10_HIDDEN int outbox_mem10_detect(mem10_handle_t *h, int require_table, outbox_diag_t *d);

/* ---------------------------------------------------- the contract on rows */

/* Rolls back an open transaction and frees the last claim's rows. */
MEM10_HIDDEN void outbox_mem10_handle_reset(mem10_handle_t *h);

/* The vtable entries, with the vtable's own signatures. */
MEM10_HIDDEN int outbox_mem10_begin(void *handle, outbox_diag_t *d);
MEM10_HIDDEN int outbox_mem10_commit(void *handle, outbox_diag_t *d);
MEM10_HIDDEN int outbox_mem10_rollback(void *handle, outbox_diag_t *d);
MEM10_HIDDEN int outbox_mem10_stage(void *handle, const outbox_stage_ctx_t *ctx,
                                    const outbox_row_t *rows, size_t n, size_t *staged,
                                    outbox_diag_t *d);
MEM10_HIDDEN int outbox_mem10_claim(void *handle, const outbox_claim_req_t *req,
                                    const outbox_row_t **rows, size_t *n, outbox_fence_t *fence,
                                    outbox_diag_t *d);
MEM10_HIDDEN int outbox_mem10_settle(void *handle, const outbox_fence_t *fence,
                                     outbox_settle_item_t *items, size_t n, size_t *applied,
                                     outbox_diag_t *d);
MEM10_HIDDEN int outbox_mem10_checkpoint_advance(void *handle, const outbox_stage_ctx_t *ctx,
                                                 const char *node_key, int64_t hlc,
                                                 outbox_diag_t *d);
MEM10_HIDDEN int outbox_mem10_checkpoint_recover(void *handle, int64_t *hlc, outbox_diag_t *d);
MEM10_HIDDEN int outbox_mem10_stats(void *handle, const char *route, outbox_stats_t *out,
                                    outbox_diag_t *d);
MEM10_HIDDEN int outbox_mem10_replay(void *handle, const char *route, const char *event_id,
                                     uint64_t *count, outbox_diag_t *d);
MEM10_HIDDEN int outbox_mem10_purge(void *handle, const char *route, int64_t before,
                                    uint64_t *count, outbox_diag_t *d);

#endif
