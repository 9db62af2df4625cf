/* NATS JetStream sink, on top beside nats.c: its producer ceiling
 * (outbox/ceiling.h), compiled with the driver's sources into outbox-bench
 * and its test only.
 *
 * Everything but the pacing is the driver's: the URI is read and the
 * connection made by the driver's own open (its options, credentials, TLS
 * and defaults), each message's subject comes from the driver's subject
 * template, and each message is built by the driver's builder, with its
 * headers and Nats-Msg-Id. What the ceiling leaves out is what the sink
 * adds for the relay: rounds per key, verdicts per message, retries. A
 * chunk is published asynchronously as a whole on a JetStream context of
 * the ceiling's own, then waited on once for all its PubAcks, within the
 * sink's timeout; any refusal fails the chunk.
 *
 * The sink is opened through the host (its one URI parser, then the
 * driver's open), and the ceiling works on the driver's handle behind it
 * (outbox_sink_driver_handle). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nats_int.h"
#include "outbox/ceiling.h"

/* The descriptor nats.c defines when built with
 * -DOUTBOX_DRIVER_STATIC=nats_ceiling. */
const outbox_driver_t *outbox_driver_entry_nats_ceiling(void);

/* ------------------------------------------------------------- the acks */

/* What the PubAck handler (a libnats thread) counts for the chunk in
 * flight. Apart from the producer: when a chunk is abandoned with acks
 * outstanding, a late handler may still run after close, and then this
 * is left allocated rather than freed under it. */
typedef struct acks {
    pthread_mutex_t mu;
    size_t came, refused;
    char first[256]; /* the first refusal, as libnats or JetStream put it */
} acks_t;

static void on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
    (void)js;
    acks_t *a = closure;
    pthread_mutex_lock(&a->mu);
    a->came++;
    if (pa == NULL && a->refused++ == 0) {
        natsStatus s = pae ? pae->Err : NATS_ERR;
        if (pae && pae->ErrCode != 0)
            snprintf(a->first, sizeof a->first, "%s (error %d)",
                     pae->ErrText ? pae->ErrText : natsStatus_GetText(s), (int)pae->ErrCode);
        else
            snprintf(a->first, sizeof a->first, "%s",
                     pae && pae->ErrText ? pae->ErrText : natsStatus_GetText(s));
    }
    pthread_mutex_unlock(&a->mu);
    natsMsg_Destroy(msg);
}

/* ---------------------------------------------------------- the producer */

typedef struct producer {
    outbox_sink_t *sink; /* the driver's sink, opened through the host */
    nats_sink_t *h;      /* its handle: config, connection, redactor */
    jsCtx *js;           /* the ceiling's own context on h's connection */
    acks_t *acks;
    int handler_may_run;
    int sent_any; /* libnats keeps no list of pending acks before the first publish */
} producer_t;

static const outbox_driver_t *ceil_driver(void)
{
    return outbox_driver_entry_nats_ceiling();
}

static const char *ceil_client(void)
{
    static char v[64];
    if (v[0] == '\0')
        snprintf(v, sizeof v, "libnats %s", nats_GetVersion());
    return v;
}

static void ceil_close(void *producer)
{
    producer_t *p = producer;
    if (p == NULL)
        return;
    if (p->js != NULL) {
        if (p->sent_any && outbox_nats_abandon(p->js))
            p->handler_may_run = 1;
        jsCtx_Destroy(p->js);
    }
    outbox_sink_close(p->sink);
    if (p->acks != NULL && !p->handler_may_run) {
        pthread_mutex_destroy(&p->acks->mu);
        free(p->acks);
    }
    free(p);
}

static int ceil_open(const char *sink_uri, void **producer, char *err, size_t errlen)
{
    *producer = NULL;
    outbox_diag_t d = {0};
    producer_t *p = calloc(1, sizeof *p);
    acks_t *a = calloc(1, sizeof *a);
    if (p == NULL || a == NULL) {
        free(p);
        free(a);
        snprintf(err, errlen, "out of memory");
        return OUTBOX_CEILING_FAIL;
    }
    pthread_mutex_init(&a->mu, NULL);
    p->acks = a;

    void *handle = NULL;
    int rc = outbox_ceiling_sink_open(ceil_driver(), NATS_SINK_NAME, sink_uri, &p->sink, &handle,
                                      err, errlen);
    if (rc != 0) {
        ceil_close(p);
        return rc;
    }
    p->h = handle;
    /* The sink goes on connecting in the background when the first
     * attempt failed; a ceiling measures a connected client. */
    char why[OUTBOX_MESSAGE_MAX];
    if (p->h == NULL || outbox_nats_down(p->h, why, sizeof why)) {
        if (p->h == NULL)
            snprintf(why, sizeof why, "the NATS ceiling's driver gave no handle");
        snprintf(err, errlen, "%s", why);
        ceil_close(p);
        return OUTBOX_CEILING_FAIL;
    }
    if (outbox_nats_jetstream(p->h->nc, p->h->timeout_ms, on_ack, a, &p->js, &d) != OUTBOX_OK) {
        snprintf(err, errlen, "%s", d.message);
        ceil_close(p);
        return OUTBOX_CEILING_FAIL;
    }
    *producer = p;
    return 0;
}

/* A message of the chunk that did not leave: its status, in h's words. */
static void not_sent(const producer_t *p, const outbox_message_t *m, natsStatus s, char *err,
                     size_t errlen)
{
    char text[256];
    outbox_nats_status_text(p->h, s, nats_GetLastError(NULL), text, sizeof text);
    snprintf(err, errlen, "event %s not sent: %s", m->event_id ? m->event_id : "?", text);
}

static int ceil_publish(void *producer, const outbox_message_t *msgs, size_t n, char *err,
                        size_t errlen)
{
    producer_t *p = producer;
    nats_sink_t *h = p->h;
    acks_t *a = p->acks;
    if (p->handler_may_run) {
        snprintf(err, errlen, "an earlier chunk's PubAcks never came");
        return OUTBOX_CEILING_FAIL;
    }
    pthread_mutex_lock(&a->mu);
    a->came = a->refused = 0;
    a->first[0] = '\0';
    pthread_mutex_unlock(&a->mu);

    outbox_kit_buf_t subject;
    outbox_kit_buf_init(&subject, outbox_nats_host);
    int rc = 0;
    size_t sent = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const outbox_message_t *m = &msgs[i];
        char why[OUTBOX_MESSAGE_MAX / 2];
        if (m->payload == NULL) {
            snprintf(err, errlen, "event %s has no payload", m->event_id ? m->event_id : "?");
            rc = OUTBOX_CEILING_FAIL;
            break;
        }
        if (outbox_nats_subject(&subject, h->subject_tpl, m->route, m->destination, why,
                                sizeof why) != 0) {
            snprintf(err, errlen, "event %s: %s", m->event_id ? m->event_id : "?", why);
            rc = OUTBOX_CEILING_FAIL;
            break;
        }
        natsMsg *msg = NULL;
        natsStatus s = outbox_nats_build_msg(m, subject.data, &msg);
        if (s == NATS_OK) {
            jsPubOptions po;
            outbox_nats_pub_options(m, &po);
            s = js_PublishMsgAsync(p->js, &msg, &po);
            natsMsg_Destroy(msg); /* NULL once libnats took it */
        }
        if (s != NATS_OK) {
            not_sent(p, m, s, err, errlen);
            rc = OUTBOX_CEILING_FAIL;
        } else {
            sent++;
            p->sent_any = 1;
        }
    }
    outbox_kit_buf_free(&subject);

    /* Every message that left is waited on, also after a failure, so that
     * no ack of this chunk is counted for the next. */
    natsStatus s = NATS_OK;
    if (sent > 0) {
        jsPubOptions po;
        jsPubOptions_Init(&po);
        po.MaxWait = h->timeout_ms;
        s = js_PublishAsyncComplete(p->js, &po);
        if (s != NATS_OK)
            p->handler_may_run = outbox_nats_abandon(p->js);
    }
    pthread_mutex_lock(&a->mu);
    size_t came = a->came, refused = a->refused;
    char first[256];
    snprintf(first, sizeof first, "%s", a->first);
    pthread_mutex_unlock(&a->mu);
    if (rc != 0)
        return rc;
    if (refused > 0) {
        char shown[256];
        outbox_kit_redact(outbox_nats_host, h->redactor, first, shown, sizeof shown);
        snprintf(err, errlen, "JetStream refused %zu of %zu events: %s", refused, n, shown);
        return OUTBOX_CEILING_FAIL;
    }
    if (s != NATS_OK || came < sent) {
        char tmo[32];
        outbox_kit_show_duration(h->timeout_ms * 1000, tmo, sizeof tmo);
        snprintf(err, errlen, "no PubAck for %zu of %zu events within %s", sent - came, n, tmo);
        return OUTBOX_CEILING_FAIL;
    }
    return 0;
}

const outbox_sink_ceiling_t outbox_ceiling_nats = {
    .struct_size = sizeof(outbox_sink_ceiling_t),
    .name = NATS_SINK_NAME,
    .driver = ceil_driver,
    .client = ceil_client,
    .open = ceil_open,
    .publish = ceil_publish,
    .close = ceil_close,
};
