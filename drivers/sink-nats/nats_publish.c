/* Publishing: JetStream async publish, OK only on the PubAck.
 *
 * A call goes out in rounds. A round holds the next message of every key
 * whose messages so far were all acknowledged: they are all published
 * asynchronously (pipelined on the one connection), then the round waits
 * once for all their PubAcks. So a key's message is never sent before the
 * one ahead of it is stored, and after one fails nothing later of its key
 * goes out in this call (those are RETRY, "held back"): the order promise
 * of OUTBOX_SINK_CAP_ORDERED holds for failures the server reports too
 * (a stream's max_msg_size, a full store), not only for local ones. A call
 * whose messages all have different keys is one round; a call takes as
 * many rounds as its longest run of one key. The kit's outbox_kit_keys_*
 * makes the rounds.
 *
 * PubAcks arrive on a libnats thread (outbox_nats_on_ack), which finds the
 * message's slot by its natsMsg pointer in a small hash table of the
 * round, under the handle's mutex. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nats_int.h"

enum { SLOT_IDLE = 0, SLOT_IN_FLIGHT = 1, SLOT_DONE = 2 };

typedef struct slot {
    const natsMsg *msg;
    size_t idx;
} slot_t;

struct nats_call {
    const outbox_message_t *msgs;
    outbox_publish_result_t *results;
    unsigned char *state;
    unsigned char *noresp; /* the server answered "no responders": to be looked into */
    slot_t *table;
    size_t mask; /* table size - 1 for this round (a power of two) */
};

static size_t ptr_hash(const natsMsg *m)
{
    uintptr_t v = (uintptr_t)m;
    v ^= v >> 17;
    v *= (uintptr_t)0x9E3779B97F4A7C15ull;
    return (size_t)(v ^ (v >> 29));
}

/* A natsMsg freed after its ack may come back from malloc as the next
 * message of the round: the same pointer then takes over its entry. */
static void table_put(nats_call_t *c, const natsMsg *m, size_t idx)
{
    size_t i = ptr_hash(m) & c->mask;
    while (c->table[i].msg != NULL && c->table[i].msg != m)
        i = (i + 1) & c->mask;
    c->table[i].msg = m;
    c->table[i].idx = idx;
}

static long table_get(const nats_call_t *c, const natsMsg *m)
{
    size_t i = ptr_hash(m) & c->mask;
    while (c->table[i].msg != NULL) {
        if (c->table[i].msg == m)
            return (long)c->table[i].idx;
        i = (i + 1) & c->mask;
    }
    return -1;
}

/* JetStream API errors that will come back the same way on a retry; every
 * other code (a full store, limits, no leader, ...) may clear up, and is
 * RETRY so that the relay's max_attempts decides. */
static int permanent_js_error(jsErrCode code)
{
    return code == JSStreamMessageExceedsMaximumErr || code == JSBadRequestErr ||
           code == JSStreamInvalidConfig;
}

/* The verdict of a PubAck or its error. */
static void ack_result(const nats_sink_t *h, const outbox_message_t *m, const char *subject,
                       jsPubAck *pa, jsPubAckErr *pae, outbox_publish_result_t *r,
                       unsigned char *noresp)
{
    if (pa != NULL) {
        r->status = OUTBOX_PUBLISH_OK;
        r->message[0] = '\0';
        return;
    }
    const char *id = m->event_id ? m->event_id : "?";
    natsStatus err = pae ? pae->Err : NATS_ERR;
    char what[300];
    outbox_kit_redact(outbox_nats_host, h->redactor,
                      pae && pae->ErrText ? pae->ErrText : natsStatus_GetText(err), what,
                      sizeof what);
    if (err == NATS_NO_RESPONDERS) {
        /* No stream captures the subject, or JetStream is not serving
         * right now (a server shutting down or starting up answers the
         * same way): settled after the round, by asking JetStream. */
        char shown[200];
        outbox_kit_text_line(subject, shown, sizeof shown);
        outbox_kit_result(r, OUTBOX_PUBLISH_RETRY,
                          "no JetStream answer for subject %s (no responders)", shown);
        *noresp = 1;
    } else if (err == NATS_ERR && pae && pae->ErrCode != 0) {
        int permanent = permanent_js_error(pae->ErrCode);
        outbox_kit_result(r, permanent ? OUTBOX_PUBLISH_REJECT : OUTBOX_PUBLISH_RETRY,
                          "JetStream refused event %s: %s (error %d)", id, what, (int)pae->ErrCode);
    } else {
        outbox_kit_result(r, OUTBOX_PUBLISH_RETRY, "no PubAck for event %s: %s", id, what);
    }
}

void outbox_nats_on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
    (void)js;
    nats_sink_t *h = closure;
    pthread_mutex_lock(&h->mu);
    nats_call_t *c = h->call;
    long i = c ? table_get(c, msg) : -1;
    if (i >= 0 && c->state[i] == SLOT_IN_FLIGHT) {
        ack_result(h, &c->msgs[i], natsMsg_GetSubject(msg), pa, pae, &c->results[i],
                   &c->noresp[i]);
        c->state[i] = SLOT_DONE;
    }
    pthread_mutex_unlock(&h->mu);
    natsMsg_Destroy(msg);
}

/* Whether a JetStream stream captures subject: 1 yes, 0 no (JetStream
 * answered, and named none), -1 unknown (JetStream did not answer). */
static int stream_captures(nats_sink_t *h, const char *subject, int64_t timeout_ms)
{
    outbox_kit_buf_t req;
    outbox_kit_buf_init(&req, outbox_nats_host);
    outbox_kit_buf_puts(&req, "{\"subject\":");
    outbox_kit_buf_json_string(&req, subject, strlen(subject));
    outbox_kit_buf_putc(&req, '}');
    if (req.failed)
        return -1;
    natsMsg *reply = NULL;
    natsStatus s = natsConnection_Request(&reply, h->nc, "$JS.API.STREAM.NAMES", req.data,
                                          (int)req.len, timeout_ms < 1 ? 1 : timeout_ms);
    outbox_kit_buf_free(&req);
    if (s != NATS_OK)
        return -1;
    /* {"type":"io.nats.jetstream.api.v1.stream_names_response","total":N,...}
     * or an error object. */
    int answer = -1;
    const char *data = natsMsg_GetData(reply);
    const char *total = data ? strstr(data, "\"total\":") : NULL;
    if (total != NULL && (data == NULL || strstr(data, "\"error\"") == NULL))
        answer = strtol(total + 8, NULL, 10) > 0;
    natsMsg_Destroy(reply);
    return answer;
}

/* Ends a round whose every slot is done: the messages JetStream answered
 * "no responders" for are REJECT where it says no stream captures their
 * subject, else they stay RETRY; then each message lets the next of its
 * key into the next round, or holds the rest of its key back. */
static void settle_round(nats_sink_t *h, nats_call_t *c, outbox_kit_keys_t *k, int64_t deadline_us,
                         outbox_kit_buf_t *subject)
{
    const outbox_host_t *host = outbox_nats_host;
    int known = -2; /* the last subject's answer, while the subject stays the same */
    char last[256] = "";
    for (size_t r = 0; r < k->n_round; r++) {
        size_t i = k->round[r];
        const outbox_message_t *m = &c->msgs[i];
        char why[OUTBOX_MESSAGE_MAX / 2];
        if (c->noresp[i] &&
            outbox_nats_subject(subject, h->subject_tpl, m->route, m->destination, why,
                                sizeof why) == 0) {
            if (known == -2 || strcmp(last, subject->data) != 0) {
                int64_t left = (deadline_us - host->monotonic_us()) / 1000;
                known = stream_captures(h, subject->data, left < 1000 ? 1000 : left);
                snprintf(last, sizeof last, "%s", subject->data);
            }
            char shown[200];
            outbox_kit_text_line(subject->data, shown, sizeof shown);
            if (known == 0)
                outbox_kit_result(&c->results[i], OUTBOX_PUBLISH_REJECT,
                                  "no JetStream stream captures subject %s: create a stream for it",
                                  shown);
            else if (known < 0)
                outbox_kit_result(&c->results[i], OUTBOX_PUBLISH_RETRY,
                                  "JetStream did not answer for subject %s: the server may be "
                                  "starting or stopping",
                                  shown);
        }
        c->noresp[i] = 0;
        int status = c->results[i].status;
        if (status == OUTBOX_PUBLISH_OK)
            outbox_kit_keys_ok(k, i);
        else
            outbox_kit_keys_hold(k, i, c->msgs, c->results,
                                 status == OUTBOX_PUBLISH_REJECT ? "was refused in this call"
                                                                 : "failed in this call");
    }
}

natsStatus outbox_nats_build_msg(const outbox_message_t *m, const char *subject, natsMsg **out)
{
    natsMsg *msg = NULL;
    natsStatus s = natsMsg_Create(&msg, subject, NULL, m->payload, (int)m->payload_len);
    for (size_t k = 0; s == NATS_OK && k < m->n_headers; k++) {
        const outbox_header_t *hd = &m->headers[k];
        if (hd->name == NULL || hd->value == NULL)
            continue;
        /* A line break would end the header block on the wire. */
        if (strpbrk(hd->value, "\r\n") != NULL) {
            s = NATS_INVALID_ARG;
            break;
        }
        char name[80];
        if (strcmp(hd->name, "traceparent") == 0)
            snprintf(name, sizeof name, "%s", hd->name);
        else
            snprintf(name, sizeof name, "ce-%s", hd->name);
        s = natsMsgHeader_Set(msg, name, hd->value);
    }
    if (s != NATS_OK) {
        natsMsg_Destroy(msg);
        msg = NULL;
    }
    *out = msg;
    return s;
}

void outbox_nats_pub_options(const outbox_message_t *m, jsPubOptions *po)
{
    jsPubOptions_Init(po);
    po->MsgId = m->event_id;
}

/* Why a message that did not leave is RETRY or REJECT. */
static void local_failure(const nats_sink_t *h, const outbox_message_t *m, natsStatus s,
                          outbox_publish_result_t *r)
{
    const char *id = m->event_id ? m->event_id : "?";
    if (s == NATS_MAX_PAYLOAD) {
        outbox_kit_result(r, OUTBOX_PUBLISH_REJECT,
                          "event %s is larger than the server's max_payload of %lld bytes "
                          "(%zu bytes of payload plus headers)",
                          id, (long long)natsConnection_GetMaxPayload(h->nc), m->payload_len);
    } else if (s == NATS_INVALID_ARG || s == NATS_INVALID_SUBJECT) {
        outbox_kit_result(r, OUTBOX_PUBLISH_REJECT,
                          "event %s cannot be published: a header holds a line break, or the "
                          "subject or payload is not one NATS takes",
                          id);
    } else {
        char text[256];
        outbox_nats_status_text(h, s, NULL, text, sizeof text);
        outbox_kit_result(r, OUTBOX_PUBLISH_RETRY, "event %s not sent: %s", id, text);
    }
}

/* c's table, states and no-responders marks for n messages, in one
 * block that c->table holds: 0, or -1 when out of memory. */
static int call_alloc(nats_call_t *c, size_t n)
{
    /* The table has room for twice the largest round. */
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    c->table = outbox_nats_host->alloc(cap * sizeof(slot_t) + 2 * n);
    if (c->table == NULL)
        return -1;
    c->state = memset(c->table + cap, SLOT_IDLE, n);
    c->noresp = memset(c->state + n, 0, n);
    return 0;
}

/* Waits for the round's acks until the deadline, in slices, so that a
 * connection lost meanwhile ends the wait early. 1 when all came. */
static int wait_acks(nats_sink_t *h, int64_t deadline_us)
{
    const outbox_host_t *host = outbox_nats_host;
    for (;;) {
        int64_t left_ms = (deadline_us - host->monotonic_us()) / 1000;
        if (left_ms <= 0)
            return 0;
        jsPubOptions po;
        jsPubOptions_Init(&po);
        po.MaxWait = left_ms < 200 ? left_ms : 200;
        natsStatus s = js_PublishAsyncComplete(h->js, &po);
        if (s == NATS_OK)
            return 1;
        if (s != NATS_TIMEOUT || natsConnection_Status(h->nc) != NATS_CONN_STATUS_CONNECTED)
            return 0;
    }
}

bool outbox_nats_abandon(jsCtx *js)
{
    natsMsgList pending = {0};
    if (js_PublishAsyncGetPendingList(&pending, js) == NATS_OK)
        natsMsgList_Destroy(&pending);
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = 5000;
    return js_PublishAsyncComplete(js, &po) != NATS_OK;
}

int outbox_nats_publish(void *handle, const outbox_message_t *msgs, size_t n,
                        outbox_publish_result_t *results, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_nats_host;
    nats_sink_t *h = handle;
    char tmo[32];
    outbox_kit_show_duration(h->timeout_ms * 1000, tmo, sizeof tmo);

    nats_call_t call = {.msgs = msgs, .results = results};
    outbox_kit_keys_t k;
    if (call_alloc(&call, n) != 0 || outbox_kit_keys_init(&k, host, msgs, n) != 0) {
        host->free(call.table);
        return host->error(d, OUTBOX_ENOMEM, "out of memory publishing %zu events", n);
    }
    slot_t *table = call.table;
    unsigned char *state = call.state;
    pthread_mutex_lock(&h->mu);
    h->call = &call;
    pthread_mutex_unlock(&h->mu);

    outbox_kit_buf_t subject;
    outbox_kit_buf_init(&subject, host);
    int64_t deadline = host->monotonic_us() + h->timeout_ms * 1000;
    do {
        char skip[OUTBOX_MESSAGE_MAX] = "";
        if (!outbox_nats_down(h, skip, sizeof skip) && host->monotonic_us() >= deadline)
            snprintf(skip, sizeof skip,
                     "not sent: the call's PubAck timeout of %s was spent on events ahead of it",
                     tmo);
        for (size_t r = 0; skip[0] != '\0' && r < k.n_round; r++) {
            outbox_kit_result(&results[k.round[r]], OUTBOX_PUBLISH_RETRY, "%s", skip);
            outbox_kit_keys_hold(&k, k.round[r], msgs, results, "was not sent");
        }
        if (skip[0] != '\0')
            break;

        size_t tcap = 16;
        while (tcap < 2 * k.n_round)
            tcap *= 2;
        pthread_mutex_lock(&h->mu);
        memset(table, 0, tcap * sizeof *table);
        call.mask = tcap - 1;
        pthread_mutex_unlock(&h->mu);

        size_t sent = 0;
        for (size_t r = 0; r < k.n_round; r++) {
            size_t i = k.round[r];
            const outbox_message_t *m = &msgs[i];
            char why[OUTBOX_MESSAGE_MAX / 2];
            if (m->payload == NULL || m->payload_len > (size_t)INT_MAX) {
                outbox_kit_result(&results[i], OUTBOX_PUBLISH_REJECT, "event %s has %s",
                                  m->event_id ? m->event_id : "?",
                                  m->payload ? "a payload too large for NATS" : "no payload");
                state[i] = SLOT_DONE;
                continue;
            }
            if (outbox_nats_subject(&subject, h->subject_tpl, m->route, m->destination, why,
                                    sizeof why) != 0) {
                outbox_kit_result(&results[i], OUTBOX_PUBLISH_REJECT, "event %s: %s",
                                  m->event_id ? m->event_id : "?", why);
                state[i] = SLOT_DONE;
                continue;
            }
            natsMsg *msg = NULL;
            natsStatus s = outbox_nats_build_msg(m, subject.data, &msg);
            if (s != NATS_OK) {
                local_failure(h, m, s, &results[i]);
                state[i] = SLOT_DONE;
                continue;
            }
            jsPubOptions po;
            outbox_nats_pub_options(m, &po);
            /* In the table before it leaves: its ack may come at once. */
            pthread_mutex_lock(&h->mu);
            table_put(&call, msg, i);
            state[i] = SLOT_IN_FLIGHT;
            pthread_mutex_unlock(&h->mu);
            s = js_PublishMsgAsync(h->js, &msg, &po);
            if (s != NATS_OK) {
                pthread_mutex_lock(&h->mu);
                if (state[i] == SLOT_IN_FLIGHT) {
                    local_failure(h, m, s, &results[i]);
                    state[i] = SLOT_DONE;
                }
                pthread_mutex_unlock(&h->mu);
                natsMsg_Destroy(msg);
                continue;
            }
            sent++;
        }

        if (sent > 0 && !wait_acks(h, deadline)) {
            if (outbox_nats_abandon(h->js))
                h->handler_may_run = true;
            int connected = natsConnection_Status(h->nc) == NATS_CONN_STATUS_CONNECTED;
            pthread_mutex_lock(&h->mu);
            for (size_t r = 0; r < k.n_round; r++) {
                size_t i = k.round[r];
                if (state[i] != SLOT_IN_FLIGHT)
                    continue;
                if (connected)
                    outbox_kit_result(&results[i], OUTBOX_PUBLISH_RETRY,
                                      "no PubAck for event %s within %s",
                                      msgs[i].event_id ? msgs[i].event_id : "?", tmo);
                else
                    outbox_kit_result(&results[i], OUTBOX_PUBLISH_RETRY,
                                      "no PubAck for event %s: the connection to the NATS server "
                                      "(%s) was lost",
                                      msgs[i].event_id ? msgs[i].event_id : "?", h->shown);
                state[i] = SLOT_DONE;
            }
            pthread_mutex_unlock(&h->mu);
        }
        settle_round(h, &call, &k, deadline, &subject);
    } while (outbox_kit_keys_next(&k) > 0);
    outbox_kit_buf_free(&subject);

    pthread_mutex_lock(&h->mu);
    h->call = NULL;
    pthread_mutex_unlock(&h->mu);
    outbox_kit_keys_free(&k);
    host->free(call.table);
    return OUTBOX_OK;
}
