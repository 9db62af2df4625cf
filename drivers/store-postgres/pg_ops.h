/* PostgreSQL store driver, third floor: the store operations pg.c puts in
 * its vtable. pg_rows.c, pg_schema.c, pg_inbox.c and pg_admin.c stand side
 * by side on this floor and never call one another; only pg.c combines
 * them (open detects the tables, then builds the statements for what it
 * found).
 * Private to this folder; see pg_int.h for the floors. */
#ifndef OUTBOX_STORE_PG_OPS_H
#define OUTBOX_STORE_PG_OPS_H

#include "pg_conn.h"

/* ---------------------------------------------------------- pg_schema.c */

/* Detects the table, its optional columns and the checkpoint table. strict:
 * a missing table or required column is OUTBOX_ESCHEMA (a normal open);
 * otherwise they only leave the capabilities off (schema apply/check).
 * Also derives the notification channel from the resolved name. */
PG_HIDDEN int outbox_pg_detect(pg_handle_t *h, int strict, outbox_diag_t *d);

PG_HIDDEN int outbox_pg_schema_ddl(const outbox_schema_opts_t *opts, char **out, outbox_diag_t *d);
PG_HIDDEN int outbox_pg_schema_apply(pg_handle_t *h, const outbox_schema_opts_t *opts,
                                     outbox_diag_t *d);
PG_HIDDEN int outbox_pg_schema_check(void *handle, const outbox_schema_opts_t *opts,
                                     outbox_schema_report_fn report, void *ctx, size_t *problems,
                                     outbox_diag_t *d);
PG_HIDDEN int outbox_pg_schema_drop(pg_handle_t *h, const outbox_schema_opts_t *opts,
                                    outbox_diag_t *d);

/* ------------------------------------------------------------ pg_rows.c */

/* Builds the cached statement texts once the optional columns are known. */
PG_HIDDEN int outbox_pg_rows_prepare_sql(pg_handle_t *h, outbox_diag_t *d);

/* The relay's hot path as texts, into b: the ones prepare_sql caches and
 * claim and settle run, shared with the driver's benchmark ceiling
 * (ceiling.c), which hands them to pgbench.
 *  - build_claim: the claim in claim order (hlc 0) or hlc order for h's
 *    table, with the batch limit written in; $1 route, $2 lease in
 *    microseconds. It is CTEs and then one UPDATE ... RETURNING, whose
 *    offset in b goes to *final_at (when not NULL): the RETURNING columns
 *    include id and processing_at, the fence.
 *  - build_settle: the fenced settle; $1 ids, $2 kinds, $3 available_at,
 *    $4 errors (arrays, one element per item), $5 the fence. */
PG_HIDDEN void outbox_pg_build_claim(const pg_handle_t *h, outbox_kit_buf_t *b, int hlc,
                                     long limit, size_t *final_at);
PG_HIDDEN void outbox_pg_build_settle(const pg_handle_t *h, outbox_kit_buf_t *b);

PG_HIDDEN int outbox_pg_stage(void *handle, const outbox_stage_ctx_t *ctx, const outbox_row_t *rows,
                              size_t n, size_t *staged, outbox_diag_t *d);
PG_HIDDEN int outbox_pg_claim(void *handle, const outbox_claim_req_t *req, const outbox_row_t **rows,
                              size_t *n, outbox_fence_t *fence, outbox_diag_t *d);
PG_HIDDEN int outbox_pg_settle(void *handle, const outbox_fence_t *fence,
                               outbox_settle_item_t *items, size_t n, size_t *applied,
                               outbox_diag_t *d);
PG_HIDDEN int outbox_pg_renew(void *handle, const outbox_renew_req_t *req, outbox_fence_t *renewed,
                              size_t *count, outbox_diag_t *d);
PG_HIDDEN int outbox_pg_checkpoint_advance(void *handle, const outbox_stage_ctx_t *ctx,
                                           const char *node_key, int64_t hlc, outbox_diag_t *d);
PG_HIDDEN int outbox_pg_checkpoint_recover(void *handle, int64_t *hlc, outbox_diag_t *d);
PG_HIDDEN int outbox_pg_wait(void *handle, const char *route, int timeout_ms, outbox_diag_t *d);

/* ----------------------------------------------------------- pg_inbox.c */

/* Builds the accept statement's text for h->inbox (once, at open). */
PG_HIDDEN int outbox_pg_inbox_prepare_sql(pg_handle_t *h, outbox_diag_t *d);

PG_HIDDEN int outbox_pg_inbox_accept(void *handle, const outbox_stage_ctx_t *ctx,
                                     const char *consumer, const char *event_id, int *is_new,
                                     outbox_diag_t *d);
PG_HIDDEN int outbox_pg_inbox_purge(void *handle, const char *consumer, int64_t before_us,
                                    uint64_t *count, outbox_diag_t *d);
PG_HIDDEN int outbox_pg_inbox_stats(void *handle, const char *consumer, outbox_inbox_fn fn,
                                    void *ctx, outbox_diag_t *d);

/* ----------------------------------------------------------- pg_admin.c */

PG_HIDDEN int outbox_pg_stats(void *handle, const char *route, outbox_stats_t *out,
                              outbox_diag_t *d);
PG_HIDDEN int outbox_pg_replay(void *handle, const char *route, const char *event_id,
                               uint64_t *count, outbox_diag_t *d);
PG_HIDDEN int outbox_pg_purge(void *handle, const char *route, int64_t before, uint64_t *count,
                              outbox_diag_t *d);

PG_HIDDEN int outbox_pg_routes(void *handle, outbox_route_fn fn, void *ctx, outbox_diag_t *d);
PG_HIDDEN int outbox_pg_dead_list(void *handle, const char *route, const char *after_id,
                                  size_t limit, outbox_row_fn fn, void *ctx, outbox_diag_t *d);

#endif
