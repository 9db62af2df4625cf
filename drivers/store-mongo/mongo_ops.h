/* MongoDB store driver, third floor: the store operations mongo.c puts in
 * its vtable. The files of this floor stand side by side and never call
 * one another; only mongo.c combines them. Private to this folder; see
 * mongo_int.h for the floors. */
#ifndef OUTBOX_STORE_MONGO_OPS_H
#define OUTBOX_STORE_MONGO_OPS_H

#include "mongo_conn.h"

/* Field names of an outbox document (the columns of the SQL stores). */
#define MF_ID "_id"
#define MF_ROUTE "outbox_route"
#define MF_STATUS "status"
#define MF_TOKEN "claim_token"

/* -------------------------------------------------------- mongo_schema.c */

/* Looks at the collections: the outbox collection must exist when strict
 * (else OUTBOX_ESCHEMA naming it); the hlc claim index turns hlc ordering
 * on, the checkpoint collection the checkpoint, the inbox collection the
 * inbox. */
MONGO_HIDDEN int outbox_mongo_detect(mongo_handle_t *h, int strict, outbox_diag_t *d);
MONGO_HIDDEN int outbox_mongo_schema_ddl(const outbox_schema_opts_t *opts, char **out,
                                         outbox_diag_t *d);
MONGO_HIDDEN int outbox_mongo_schema_apply(mongo_handle_t *h, const outbox_schema_opts_t *opts,
                                           outbox_diag_t *d);
MONGO_HIDDEN int outbox_mongo_schema_check(void *handle, const outbox_schema_opts_t *opts,
                                           outbox_schema_report_fn report, void *ctx,
                                           size_t *problems, outbox_diag_t *d);
MONGO_HIDDEN int outbox_mongo_schema_drop(mongo_handle_t *h, const outbox_schema_opts_t *opts,
                                          outbox_diag_t *d);

/* --------------------------------------------------------- mongo_stage.c */

MONGO_HIDDEN int outbox_mongo_stage(void *handle, const outbox_stage_ctx_t *ctx,
                                    const outbox_row_t *rows, size_t n, size_t *staged,
                                    outbox_diag_t *d);

/* --------------------------------------------------------- mongo_claim.c */

MONGO_HIDDEN int outbox_mongo_claim(void *handle, const outbox_claim_req_t *req,
                                    const outbox_row_t **rows, size_t *n, outbox_fence_t *fence,
                                    outbox_diag_t *d);
/* Frees what the claims of a server without atomic updates keep. */
MONGO_HIDDEN void outbox_mongo_claim_cache_free(mongo_handle_t *h);

/* -------------------------------------------------------- mongo_settle.c */

MONGO_HIDDEN int outbox_mongo_settle(void *handle, const outbox_fence_t *fence,
                                     outbox_settle_item_t *items, size_t n, size_t *applied,
                                     outbox_diag_t *d);

/* --------------------------------------------------------- mongo_renew.c */

MONGO_HIDDEN int outbox_mongo_renew(void *handle, const outbox_renew_req_t *req, outbox_fence_t *renewed,
                                    size_t *count, outbox_diag_t *d);

/* ---------------------------------------------------------- mongo_ckpt.c */

MONGO_HIDDEN int outbox_mongo_checkpoint_advance(void *handle, const outbox_stage_ctx_t *ctx,
                                                 const char *node_key, int64_t hlc,
                                                 outbox_diag_t *d);
MONGO_HIDDEN int outbox_mongo_checkpoint_recover(void *handle, int64_t *hlc, outbox_diag_t *d);

/* --------------------------------------------------------- mongo_inbox.c */

MONGO_HIDDEN int outbox_mongo_inbox_accept(void *handle, const outbox_stage_ctx_t *ctx,
                                           const char *consumer, const char *event_id,
                                           int *is_new, outbox_diag_t *d);
MONGO_HIDDEN int outbox_mongo_inbox_purge(void *handle, const char *consumer, int64_t before_us,
                                          uint64_t *count, outbox_diag_t *d);
MONGO_HIDDEN int outbox_mongo_inbox_stats(void *handle, const char *consumer, outbox_inbox_fn fn,
                                          void *ctx, outbox_diag_t *d);

/* --------------------------------------------------------- mongo_admin.c */

MONGO_HIDDEN int outbox_mongo_stats(void *handle, const char *route, outbox_stats_t *out,
                                    outbox_diag_t *d);
MONGO_HIDDEN int outbox_mongo_replay(void *handle, const char *route, const char *event_id,
                                     uint64_t *count, outbox_diag_t *d);
MONGO_HIDDEN int outbox_mongo_purge(void *handle, const char *route, int64_t before,
                                    uint64_t *count, outbox_diag_t *d);
MONGO_HIDDEN int outbox_mongo_routes(void *handle, outbox_route_fn fn, void *ctx,
                                     outbox_diag_t *d);
MONGO_HIDDEN int outbox_mongo_dead_list(void *handle, const char *route, const char *after_id,
                                        size_t limit, outbox_row_fn fn, void *ctx,
                                        outbox_diag_t *d);

#endif
