/* The names of 0.1, kept until 1.0 of the library: each calls the function
 * that replaced it (outbox.h, "names before 0.2"). */
#include "outbox_int.h"

int outbox_begin(outbox_store_t *s)
{
    return outbox_store_begin(s);
}

int outbox_commit(outbox_store_t *s)
{
    return outbox_store_commit(s);
}

int outbox_rollback(outbox_store_t *s)
{
    return outbox_store_rollback(s);
}

int outbox_stage(outbox_store_t *s, void *native_tx, const char *route,
                 const outbox_event_t *events, size_t n, size_t *staged)
{
    return outbox_store_stage(s, native_tx, route, events, n, staged);
}

int outbox_stats(outbox_store_t *s, const char *route, outbox_stats_t *out)
{
    return outbox_store_stats(s, route, out);
}

int outbox_replay(outbox_store_t *s, const char *route, const char *event_id, uint64_t *count)
{
    return outbox_store_replay(s, route, event_id, count);
}

int outbox_purge(outbox_store_t *s, const char *route, int64_t published_before, uint64_t *count)
{
    return outbox_store_purge(s, route, published_before, count);
}

int outbox_claim(outbox_store_t *s, const outbox_claim_req_t *req, const outbox_row_t **rows,
                 size_t *n, outbox_fence_t *fence)
{
    return outbox_store_claim(s, req, rows, n, fence);
}

int outbox_settle(outbox_store_t *s, const outbox_fence_t *fence, outbox_settle_item_t *items,
                  size_t n, size_t *applied)
{
    return outbox_store_settle(s, fence, items, n, applied);
}

int outbox_checkpoint_advance(outbox_store_t *s, void *native_tx, const char *node_key, int64_t hlc)
{
    return outbox_store_checkpoint_advance(s, native_tx, node_key, hlc);
}

int outbox_checkpoint_recover(outbox_store_t *s, int64_t *hlc)
{
    return outbox_store_checkpoint_recover(s, hlc);
}

int outbox_store_wait(outbox_store_t *s, const char *route, int timeout_ms)
{
    return outbox_store_wait_for(s, route, (int64_t)timeout_ms * 1000);
}

int outbox_schema_apply(outbox_store_t *s, const outbox_schema_opts_t *opts)
{
    return outbox_store_schema_apply(s, opts);
}

int outbox_schema_check(outbox_store_t *s, const outbox_schema_opts_t *opts,
                        outbox_schema_report_fn report, void *ctx, size_t *problems)
{
    return outbox_store_schema_check(s, opts, report, ctx, problems);
}

int outbox_routes(outbox_store_t *s, outbox_route_fn fn, void *ctx)
{
    return outbox_store_routes(s, fn, ctx);
}

int outbox_dead_list(outbox_store_t *s, const char *route, const char *after_id, size_t limit,
                     outbox_row_fn fn, void *ctx, char next[OUTBOX_UUID_STRLEN + 1])
{
    return outbox_store_dead_list(s, route, after_id, limit, fn, ctx, next);
}

int outbox_sink_reader_next(outbox_sink_reader_t *r, int timeout_ms, outbox_received_t *out)
{
    return outbox_sink_reader_read(r, (int64_t)timeout_ms * 1000, out);
}
