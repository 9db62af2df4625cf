/* outbox-bench: the NATS JetStream producer ceiling. A bare libnats
 * client publishes the messages the relay would publish (same payload
 * bytes, CloudEvents headers ce-<name>, Nats-Msg-Id the event id) to the
 * subject of a fresh stream, --batch at a time: js_PublishMsgAsync() for
 * the whole chunk, then js_PublishAsyncComplete() for its PubAcks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nats/nats.h>

#include "bench.h"

typedef struct nstate {
    long failed;
    char first_error[256];
} nstate_t;

static void on_error(jsCtx *js, jsPubAckErr *pae, void *closure)
{
    (void)js;
    nstate_t *st = closure;
    if (st->failed++ == 0)
        snprintf(st->first_error, sizeof st->first_error, "%s",
                 pae->ErrText ? pae->ErrText : natsStatus_GetText(pae->Err));
}

static int nats_fail(const char *what, natsStatus s, char *err, size_t errlen)
{
    const char *last = nats_GetLastError(NULL);
    snprintf(err, errlen, "nats producer ceiling: %s: %s%s%s", what, natsStatus_GetText(s),
             last && *last ? ": " : "", last ? last : "");
    return BENCH_EXIT_FAIL;
}

static int nats_drain(const bench_sink_uri_t *u, const char *target, const bench_msgs_t *ms,
                      const bench_opts_t *o, bench_drain_t *out, char *err, size_t errlen)
{
    char url[320];
    snprintf(url, sizeof url, "nats://%s%s%s:%d", strchr(u->host, ':') ? "[" : "", u->host,
             strchr(u->host, ':') ? "]" : "", u->port ? u->port : 4222);
    nstate_t st = {0};
    natsOptions *opts = NULL;
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    natsStatus s = natsOptions_Create(&opts);
    if (s == NATS_OK)
        s = natsOptions_SetURL(opts, url);
    if (s == NATS_OK)
        s = natsConnection_Connect(&nc, opts);
    int rc = s == NATS_OK ? 0 : nats_fail("connect", s, err, errlen);
    jsOptions jo;
    if (rc == 0) {
        jsOptions_Init(&jo);
        jo.PublishAsync.ErrHandler = on_error;
        jo.PublishAsync.ErrHandlerClosure = &st;
        /* Room for a whole chunk in flight. */
        jo.PublishAsync.MaxPending = o->batch > 4000 ? o->batch : 4000;
        s = natsConnection_JetStream(&js, nc, &jo);
        if (s != NATS_OK)
            rc = nats_fail("JetStream context", s, err, errlen);
    }
    char names[BENCH_CE_MAX][64];
    for (size_t k = 0; ms->n > 0 && k < ms->m[0].n_headers; k++) {
        const char *a = ms->m[0].headers[k].name;
        snprintf(names[k], sizeof names[k], strcmp(a, "traceparent") == 0 ? "%s" : "ce-%s", a);
    }
    long sent = 0;
    double cpu0 = bench_cpu_s();
    int64_t t0 = bench_mono_us();
    for (long i = 0; rc == 0 && i < ms->n;) {
        long chunk = ms->n - i < o->batch ? ms->n - i : o->batch;
        for (long j = i; rc == 0 && j < i + chunk; j++) {
            const outbox_message_t *m = &ms->m[j];
            natsMsg *msg = NULL;
            s = natsMsg_Create(&msg, target, NULL, m->payload, (int)m->payload_len);
            for (size_t k = 0; s == NATS_OK && k < m->n_headers; k++)
                s = natsMsgHeader_Set(msg, names[k], m->headers[k].value);
            jsPubOptions po;
            jsPubOptions_Init(&po);
            po.MsgId = m->event_id;
            if (s == NATS_OK)
                s = js_PublishMsgAsync(js, &msg, &po);
            natsMsg_Destroy(msg); /* NULL once the library took it */
            if (s != NATS_OK)
                rc = nats_fail("publish", s, err, errlen);
            else
                sent++;
        }
        if (rc != 0)
            break;
        jsPubOptions po;
        jsPubOptions_Init(&po);
        po.MaxWait = 60000;
        s = js_PublishAsyncComplete(js, &po);
        if (s != NATS_OK || st.failed) {
            snprintf(err, errlen, "nats producer ceiling: %ld of %ld sent, %ld refused (%s)",
                     sent, ms->n, st.failed,
                     st.first_error[0] ? st.first_error : natsStatus_GetText(s));
            rc = BENCH_EXIT_FAIL;
        }
        i += chunk;
    }
    out->seconds = (double)(bench_mono_us() - t0) / 1e6;
    out->cpu_s = bench_cpu_s() - cpu0;
    out->published = sent - st.failed;
    if (js) {
        natsMsgList pending = {0};
        if (js_PublishAsyncGetPendingList(&pending, js) == NATS_OK)
            natsMsgList_Destroy(&pending);
        jsCtx_Destroy(js);
    }
    natsConnection_Destroy(nc);
    natsOptions_Destroy(opts);
    return rc;
}

const bench_producer_t bench_nats_producer = {
    .scheme = "nats",
    .client = "libnats",
    .drain = nats_drain,
};
