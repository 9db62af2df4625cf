/* The relay's side of a tracer (outbox_relay_tracer_t): a batch's span
 * description, begin() before its first publish call with the publish
 * span's traceparent put into every message, the sink's answers counted
 * as they come, and end() after the last call. Everything lives in the
 * batch (its span, buffers and the trace_rows array that grows with its
 * other arrays), so tracing allocates nothing per batch. Only called when
 * the relay has a tracer; runs on the publishing thread and touches the
 * batch and the relay's read-only fields only. */
#include <stdio.h>
#include <string.h>

#include "relay_int.h"

void outbox_relay_trace_begin(outbox_relay_t *r, batch_t *b)
{
    b->traced = 0;
    size_t m = 0;
    for (size_t i = 0; i < b->n; i++)
        if (b->items[i].kind == 0)
            b->trace_rows[m++] = &b->rows[i];
    if (m == 0)
        return; /* every row was dead before publishing: nothing to trace */
    b->span_tp[0] = '\0';
    b->span_error[0] = '\0';
    b->span_handle = NULL;
    b->span = (outbox_relay_span_t){
        .struct_size = sizeof b->span,
        .route = r->route,
        .destination = r->destination,
        .sink = r->sink_name,
        .n_messages = m,
        .rows = b->trace_rows,
        .start_us = outbox_now_us(),
        .error = "",
        .traceparent = "",
    };
    if (!r->tracer.begin(r->tracer.ctx, &b->span, b->span_tp, &b->span_handle))
        return;
    b->traced = 1;
    b->span_tp[OUTBOX_TRACEPARENT_LEN] = '\0';
    if (b->span_tp[0] == '\0')
        return;
    /* A malformed context would reach every consumer: keep the rows' own. */
    if (!outbox_traceparent_valid(b->span_tp)) {
        b->span_tp[0] = '\0';
        return;
    }
    b->span.traceparent = b->span_tp;
    for (size_t i = 0; i < b->n; i++)
        if (b->items[i].kind == 0) {
            outbox_ce_set_traceparent(&b->ce[i], b->span_tp);
            b->msgs[i].n_headers = b->ce[i].n;
        }
}

/* One publish call's answers, res[0..m). */
void outbox_relay_trace_results(batch_t *b, const outbox_publish_result_t *res, size_t m)
{
    if (!b->traced)
        return;
    outbox_relay_span_t *s = &b->span;
    for (size_t k = 0; k < m; k++) {
        switch (res[k].status) {
        case OUTBOX_PUBLISH_OK: s->ok++; continue;
        case OUTBOX_PUBLISH_REJECT: s->rejected++; break;
        case OUTBOX_PUBLISH_DEFER: s->deferred++; break;
        default: s->retried++; break;
        }
        if (b->span_error[0] == '\0')
            snprintf(b->span_error, sizeof b->span_error, "%s",
                     res[k].message[0] ? res[k].message
                     : res[k].status == OUTBOX_PUBLISH_REJECT ? "rejected"
                     : res[k].status == OUTBOX_PUBLISH_DEFER ? "deferred"
                                                              : "retry");
    }
}

void outbox_relay_trace_end(outbox_relay_t *r, batch_t *b, int down)
{
    if (!b->traced)
        return;
    outbox_relay_span_t *s = &b->span;
    s->end_us = outbox_now_us();
    uint64_t answered = s->ok + s->retried + s->rejected + s->deferred;
    s->unsent = s->n_messages > answered ? s->n_messages - answered : 0;
    s->outage = down;
    s->error = b->span_error;
    r->tracer.end(r->tracer.ctx, s, b->span_handle);
    b->traced = 0;
}
