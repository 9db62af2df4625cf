/* Deliberately broken SQLite store drivers, to prove the conformance
 * battery fails them.
 *
 * Each variant is a loadable module that links the real SQLite driver's
 * sources statically (built with -DOUTBOX_DRIVER_STATIC=sqlite_base) and
 * exports a copy of its descriptor under its own name, with exactly one
 * vtable entry replaced, the way SQLite's test VFS wraps the real VFS. */
#ifndef OUTBOX_BROKEN_H
#define OUTBOX_BROKEN_H

#include "sqlite_int.h"

/* The real driver, as its statically built entry returns it. */
const outbox_driver_t *outbox_driver_entry_sqlite_base(void);

/* A copy of the real descriptor and vtable renamed to name, never chosen
 * by URI scheme; the caller then replaces one entry of *vt. */
void broken_wrap(outbox_driver_t *desc, outbox_store_vtable_t *vt, const char *name);

/* Prepares head, the quoted relation and tail as one statement on db. */
int broken_prepare(sqlite3 *db, const char *head, const outbox_kit_relname_t *rel, const char *tail,
                   sqlite3_stmt **st, outbox_diag_t *d);

/* Runs one statement on the handle's inbox table rel: parts joined by the
 * quoted relation (NULL-terminated), with ?1 consumer, ?2 event_id and ?3
 * now bound where the statement has them. *out: 1 when it returned a row,
 * else the rows it changed (0 for a query that returned none). */
int broken_inbox_run(sqlite3 *db, const outbox_kit_relname_t *rel, const char *const *parts,
                     const char *consumer, const char *event_id, int *out, outbox_diag_t *d);

/* A claim written plainly: candidates in claim order (hlc order when asked),
 * each then set processing with the fence, attempts + 1, and read back.
 * Each flag keeps one part of the contract; a variant leaves one out. */
enum broken_claim_flags {
    /* Select and update in one write transaction; without it: select,
     * pause, and update without a transaction and without looking at the
     * status again. */
    BROKEN_EXCLUSIVE = 1u << 0,
    BROKEN_KEY_RULE = 1u << 1,      /* honour ordering keys */
    BROKEN_CREATED_AT = 1u << 2,    /* order by created_at before id (else by id alone) */
    BROKEN_EXPIRED_ROUTE = 1u << 3, /* expired rows only of the claim's route */
    /* Expired and pending rows in one claim order (else pending rows
     * first, then the expired ones). */
    BROKEN_ONE_ORDER = 1u << 4,
    /* The key rule for expired processing rows too (else for pending rows
     * only); needs BROKEN_KEY_RULE. */
    BROKEN_EXPIRED_KEY_RULE = 1u << 5,
};
#define BROKEN_CORRECT                                                                         \
    (BROKEN_EXCLUSIVE | BROKEN_KEY_RULE | BROKEN_CREATED_AT | BROKEN_EXPIRED_ROUTE |            \
     BROKEN_ONE_ORDER | BROKEN_EXPIRED_KEY_RULE)
int broken_claim(void *handle, const outbox_claim_req_t *req, const outbox_row_t **rows,
                 size_t *n, outbox_fence_t *fence, outbox_diag_t *d, unsigned flags);

/* The real driver's schema check, with every problem that contains hidden
 * left out (not reported, not counted): a check blind to one part. */
int broken_check_hiding(void *handle, const outbox_schema_opts_t *opts,
                        outbox_schema_report_fn report, void *ctx, size_t *problems,
                        outbox_diag_t *d, const char *hidden);

/* The module's single exported entry, for a descriptor built at first call. */
#define BROKEN_ENTRY(build, descriptor)                                                        \
    __attribute__((visibility("default"))) const outbox_driver_t *outbox_driver_entry(void);   \
    __attribute__((visibility("default"))) const outbox_driver_t *outbox_driver_entry(void)    \
    {                                                                                          \
        static pthread_once_t once = PTHREAD_ONCE_INIT;                                        \
        pthread_once(&once, build);                                                            \
        return &(descriptor);                                                                  \
    }

#endif
