/* Producing one publish call: every message handed to librdkafka at once,
 * then one wait for all their delivery reports.
 *
 * Order. With enable.idempotence the broker appends a partition's batches
 * only in sequence, so a message is never written after a later one of its
 * partition. What idempotence alone does not stop: when the broker refuses
 * a batch for good (too large for the topic, an invalid record), librdkafka
 * renumbers the batches behind it and sends them anyway, so a key's later
 * messages arrive after the refused one. enable.gapless.guarantee turns
 * that refusal into a fatal error of the producer instead: nothing behind
 * the gap is written. The sink then purges what is left, reports it RETRY,
 * and makes a new producer for the next call. The same happens when the
 * call's time is up: the sink purges everything left at once, before
 * librdkafka's own message timeout could fail some messages of a partition
 * and send the later ones after them.
 *
 * The broker refuses a whole batch when it exceeds the topic's
 * max.message.bytes, so the messages that shared a batch with the culprit
 * come back with the same error. Those are sent again one at a time within
 * the call, in order, to tell the culprit from its neighbours.
 *
 * The kit's per-key scheduler sends in rounds, a key's next message once
 * the one before it came back OK: a round trip per message of a key, where
 * the whole call here costs about one. The sink keeps its own flow and
 * takes the scheduler's chain of each key's messages (next[]) and its
 * held-back results: after a message fails for good, no later one of its
 * key is sent (outbox_kit_keys_hold).
 *
 * A partition without a leader (its broker died, the election is under
 * way) must not hold up the other partitions' keys. When the host takes
 * OUTBOX_PUBLISH_DEFER, a call waits for its reports only partition_timeout
 * (1 s by default) once some of them went through (or one of them is a copy
 * an earlier such call kept); a message still without
 * one then stays in librdkafka's queue, its slot is kept, and the message is
 * reported DEFER. (When nothing went through, the whole cluster looks down:
 * the call waits its timeout as before, and the relay's breaker pauses.)
 * The relay hands its row back uncharged
 * and offers it again; a later call that is given a message the sink still
 * holds (the same event id) sends nothing and waits for the kept slot's
 * report instead, so the message reaches the broker once, ahead of any
 * later message of its key, which that later call produces behind it in the
 * partition's queue. A kept message still without a report after timeout
 * is taken back, with everything else in hand, at the start of the next
 * call, before librdkafka's own message timeout could fail it and let a
 * later one through. */
#include <string.h>

#include "kafka_int.h"

static const outbox_host_t **host = &outbox_kafka_host;
#define H (*host)

/* SLOT_PROXY: this call's message is one an earlier call's kept slot
 * (ref) holds; SLOT_GONE: a kept slot whose outcome was handed on. */
enum { SLOT_NONE, SLOT_SENT, SLOT_DONE, SLOT_HELD, SLOT_PROXY, SLOT_GONE };

typedef struct slot slot_t;
struct slot {
    kafka_sink_t *k;
    struct kafka_block *blk;
    int state;
    rd_kafka_resp_err_t err;
    int32_t partition;
    int again;       /* refused as too large beside others of its batch: to be sent alone */
    unsigned call;   /* the call that waits for its report */
    int64_t sent_us; /* when it was handed to librdkafka */
    char *kept_id;   /* its event id while kept for a later call */
    slot_t *ref;     /* SLOT_PROXY: the kept slot */
};

/* One call's slots: librdkafka holds pointers to them until each report
 * is served, so a block outlives its call while any slot is kept. */
typedef struct kafka_block {
    struct kafka_block *next;
    size_t n;
    size_t kept;
    slot_t slots[];
} block_t;

static void dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    (void)opaque;
    slot_t *s = m->_private;
    if (s == NULL || s->state != SLOT_SENT)
        return;
    s->state = SLOT_DONE;
    s->err = m->err;
    s->partition = m->partition;
    s->k->pending--;
    if (s->call == s->k->call)
        s->k->waiting--;
}

/* ------------------------------------------------------------ kept slots */

static void unkeep(slot_t *s)
{
    H->free(s->kept_id);
    s->kept_id = NULL;
    s->blk->kept--;
    s->state = SLOT_GONE;
}

/* The kept slot holding event_id, or NULL. */
static slot_t *find_kept(kafka_sink_t *k, const char *event_id)
{
    if (event_id == NULL)
        return NULL;
    for (block_t *b = k->kept; b != NULL; b = b->next)
        for (size_t i = 0; i < b->n && b->kept > 0; i++)
            if (b->slots[i].kept_id != NULL && strcmp(b->slots[i].kept_id, event_id) == 0)
                return &b->slots[i];
    return NULL;
}

/* Frees the kept blocks none of whose slots is kept any more. */
static void sweep(kafka_sink_t *k)
{
    block_t **at = &k->kept;
    while (*at != NULL) {
        block_t *b = *at;
        if (b->kept == 0) {
            *at = b->next;
            H->free(b);
        } else {
            at = &b->next;
        }
    }
}

void outbox_kafka_kept_free(kafka_sink_t *k)
{
    while (k->kept != NULL) {
        block_t *b = k->kept;
        k->kept = b->next;
        for (size_t i = 0; i < b->n; i++)
            H->free(b->slots[i].kept_id);
        H->free(b);
    }
}

rd_kafka_t *outbox_kafka_producer_new(const kafka_config_t *cfg, kafka_dr_fn dr, outbox_diag_t *d)
{
    rd_kafka_conf_t *conf = outbox_kafka_conf_new(cfg, 1, d);
    if (conf == NULL)
        return NULL;
    rd_kafka_conf_set_dr_msg_cb(conf, dr);
    char err[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (rk == NULL) {
        rd_kafka_conf_destroy(conf);
        char shown[400];
        outbox_kit_redact(H, cfg->secrets->redactor, err, shown, sizeof shown);
        H->error(d, OUTBOX_EINVAL, "kafka sink URI %s: %s", cfg->shown, shown);
    }
    return rk;
}

int outbox_kafka_producer(kafka_sink_t *k, outbox_diag_t *d)
{
    if (k->rk != NULL)
        return OUTBOX_OK;
    k->rk = outbox_kafka_producer_new(&k->cfg, dr_msg_cb, d);
    if (k->rk == NULL)
        return d->code;
    k->fatal[0] = '\0';
    return OUTBOX_OK;
}

void outbox_kafka_producer_drop(kafka_sink_t *k)
{
    if (k->rk == NULL)
        return;
    rd_kafka_purge(k->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_destroy(k->rk);
    k->rk = NULL;
}

/* ------------------------------------------------------------ verdicts */

static int verdict(rd_kafka_resp_err_t e)
{
    switch (e) {
    case RD_KAFKA_RESP_ERR_NO_ERROR:
        return OUTBOX_PUBLISH_OK;
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP:
    case RD_KAFKA_RESP_ERR_POLICY_VIOLATION:
    case RD_KAFKA_RESP_ERR__INVALID_ARG:
        return OUTBOX_PUBLISH_REJECT;
    default:
        /* Transport, timeouts, brokers down, full queues, purges after a
         * fatal error, authorisation refused (granting it is an operator's
         * fix, after which the same record goes through), and whatever is
         * not known to be permanent. */
        return OUTBOX_PUBLISH_RETRY;
    }
}

/* Message i failed for good in this call: the later ones of its key are
 * RETRY, held back, and not sent. */
static void stop_key(outbox_kit_keys_t *keys, const outbox_message_t *msgs,
                     outbox_publish_result_t *res, slot_t *slots, size_t i)
{
    outbox_kit_keys_hold(keys, i, msgs, res, "failed in this call");
    for (size_t j = keys->next[i]; j != OUTBOX_KIT_NONE; j = keys->next[j]) {
        slots[j].state = SLOT_HELD;
        slots[j].again = 0;
    }
}

/* ------------------------------------------------------------- produce */

static const char *kafka_header_name(const char *ce, char *buf, size_t size)
{
    if (strcmp(ce, "datacontenttype") == 0)
        return "content-type";
    if (strcmp(ce, "traceparent") == 0)
        return "traceparent";
    snprintf(buf, size, "ce_%s", ce);
    return buf;
}

rd_kafka_resp_err_t outbox_kafka_produce(rd_kafka_t *rk, const char *topic,
                                         const outbox_message_t *m, void *opaque)
{
    rd_kafka_headers_t *hs = rd_kafka_headers_new(m->n_headers);
    for (size_t h = 0; h < m->n_headers; h++) {
        char name[80];
        if (m->headers[h].name == NULL || m->headers[h].value == NULL)
            continue;
        rd_kafka_header_add(hs, kafka_header_name(m->headers[h].name, name, sizeof name), -1,
                            m->headers[h].value, -1);
    }
    rd_kafka_resp_err_t e = rd_kafka_producev(
        rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(m->key, m->key ? strlen(m->key) : 0),
        RD_KAFKA_V_VALUE((void *)m->payload, m->payload_len),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(hs),
        RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        rd_kafka_headers_destroy(hs);
    return e;
}

/* Hands msgs[i] to librdkafka; RD_KAFKA_RESP_ERR_NO_ERROR once it is queued. */
static rd_kafka_resp_err_t produce_one(kafka_sink_t *k, const outbox_message_t *m, slot_t *s,
                                       outbox_kit_buf_t *topic, int64_t deadline)
{
    outbox_kit_buf_reset(topic);
    outbox_kit_destination(topic, k->cfg.topic_tpl, m);
    if (topic->failed)
        return RD_KAFKA_RESP_ERR__CRIT_SYS_RESOURCE;
    for (;;) {
        s->state = SLOT_SENT;
        s->call = k->call;
        s->sent_us = H->monotonic_us();
        k->pending++;
        k->waiting++;
        rd_kafka_resp_err_t e = outbox_kafka_produce(k->rk, topic->data, m, s);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
            return e;
        s->state = SLOT_NONE;
        k->pending--;
        k->waiting--;
        /* A full local queue drains as reports come in. */
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL || H->monotonic_us() >= deadline)
            return e;
        rd_kafka_poll(k->rk, 10);
    }
}

/* Serves delivery reports until none the call waits for is pending, the
 * producer failed fatally, or deadline. 1 when all came in. */
static int wait_reports(kafka_sink_t *k, int64_t deadline)
{
    while (k->waiting > 0) {
        char why[256];
        if (rd_kafka_fatal_error(k->rk, why, sizeof why) != RD_KAFKA_RESP_ERR_NO_ERROR) {
            outbox_kit_redact(H, k->cfg.secrets->redactor, why, k->fatal, sizeof k->fatal);
            /* The refused batch's own reports (the real verdict: too
             * large, invalid) are queued just after the fatal error is
             * raised: serve them before the purge turns them into RETRY. */
            size_t before;
            int64_t until = H->monotonic_us() + 1000000;
            do {
                before = k->pending;
                rd_kafka_poll(k->rk, 100);
            } while (k->pending > 0 && (k->pending != before || before == 0) &&
                     H->monotonic_us() < until);
            return 0;
        }
        int64_t left = (deadline - H->monotonic_us()) / 1000;
        if (left <= 0)
            return 0;
        /* Short slices: one long flush returns only in steps of up to
         * 10 ms, which a call would wait out after its last report. */
        rd_kafka_flush(k->rk, 1);
    }
    return 1;
}

/* What is still in librdkafka's hands is taken back (each one reported
 * _PURGE_QUEUE or _PURGE_INFLIGHT, so RETRY) and the producer is dropped:
 * the next call starts with a new one, a new producer id and no gap. Kept
 * slots go with it (at the end of the call: this call's proxies may still
 * read them). */
static void abandon(kafka_sink_t *k)
{
    rd_kafka_purge(k->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    int64_t until = H->monotonic_us() + 2000000;
    while (k->pending > 0 && H->monotonic_us() < until)
        rd_kafka_poll(k->rk, 20);
    outbox_kafka_producer_drop(k);
    k->pending = 0;
    k->waiting = 0;
}

/* At a call's start: a kept message without a report for timeout is taken
 * back with everything in hand before librdkafka's message timeout (10 s
 * later) could fail it alone; a kept outcome nobody asked for in that time
 * (its row went to another relay) is forgotten. */
static void expire_kept(kafka_sink_t *k)
{
    int64_t old = H->monotonic_us() - k->cfg.timeout_ms * 1000;
    int stale = 0;
    for (block_t *b = k->kept; b != NULL; b = b->next)
        for (size_t i = 0; i < b->n; i++) {
            slot_t *s = &b->slots[i];
            if (s->kept_id == NULL || s->sent_us > old)
                continue;
            if (s->state == SLOT_SENT)
                stale = 1;
            else
                unkeep(s);
        }
    if (stale && k->rk != NULL) {
        abandon(k);
        outbox_kafka_kept_free(k);
    }
    sweep(k);
}

/* A message still without a report when the call's wait for slow
 * partitions ended while others went through: kept, and DEFER. */
static void report_kept(kafka_sink_t *k, const outbox_message_t *m, outbox_publish_result_t *r)
{
    outbox_kit_buf_t t;
    outbox_kit_buf_init(&t, H);
    outbox_kit_destination(&t, k->cfg.topic_tpl, m);
    outbox_kit_result(r, OUTBOX_PUBLISH_DEFER,
                      "kafka topic %s: no delivery report within partition_timeout=%lldms (its "
                      "partition may have no leader); the sink keeps the message queued",
                      t.data ? t.data : "?", (long long)k->cfg.partition_timeout_ms);
    outbox_kit_buf_free(&t);
}

/* Why messages went without a report: the producer's fatal error, or
 * else librdkafka's last error on the client (a TLS handshake or a login
 * refused); "" when neither. */
static const char *why_unreported(kafka_sink_t *k, char *buf, size_t size)
{
    if (k->fatal[0])
        return k->fatal;
    char last[256];
    outbox_kafka_last_error(k->cfg.secrets, last, sizeof last);
    snprintf(buf, size, "%s%s", last[0] ? "librdkafka's last error: " : "", last);
    return buf;
}

static void report(kafka_sink_t *k, const outbox_message_t *m, const slot_t *s,
                   outbox_publish_result_t *r)
{
    char why[300];
    if (s->state != SLOT_DONE) {
        const char *w = why_unreported(k, why, sizeof why);
        outbox_kit_result(r, OUTBOX_PUBLISH_RETRY,
                          "kafka: no delivery report within timeout=%lldms%s%s",
                          (long long)k->cfg.timeout_ms, w[0] ? "; " : "", w);
        return;
    }
    int v = verdict(s->err);
    if (v == OUTBOX_PUBLISH_OK) {
        r->status = OUTBOX_PUBLISH_OK;
        r->message[0] = '\0';
        outbox_kafka_clear_error(k->cfg.secrets);
        return;
    }
    outbox_kit_buf_t t;
    outbox_kit_buf_init(&t, H);
    outbox_kit_destination(&t, k->cfg.topic_tpl, m);
    int purged = s->err == RD_KAFKA_RESP_ERR__PURGE_QUEUE || s->err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT;
    const char *w = purged ? why_unreported(k, why, sizeof why) : "";
    outbox_kit_result(r, v, "kafka topic %s: %s%s%s", t.data ? t.data : "?",
                      rd_kafka_err2str(s->err), w[0] ? " after: " : "", w);
    outbox_kit_buf_free(&t);
}

/* m alone on the producer, and its report. */
static void send_alone(kafka_sink_t *k, const outbox_message_t *m, slot_t *s,
                       outbox_publish_result_t *r, outbox_kit_buf_t *topic, int64_t deadline)
{
    rd_kafka_resp_err_t e = produce_one(k, m, s, topic, deadline);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        s->state = SLOT_DONE;
        s->err = e;
    } else if (!wait_reports(k, deadline)) {
        /* Refused, and the guarantee stopped the producer again: the
         * report, when it came before the purge, names the reason; alone
         * in its batch, the refusal is this message's own. */
        if (s->state != SLOT_DONE) {
            s->state = SLOT_DONE;
            s->err = RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE;
            if (strstr(k->fatal, "too large") == NULL)
                s->err = RD_KAFKA_RESP_ERR__FATAL;
        }
        abandon(k);
    } else if (rd_kafka_fatal_error(k->rk, NULL, 0) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        abandon(k);
    }
    report(k, m, s, r);
}

/* After the gapless guarantee stopped the producer, the reports of the
 * refused batch are lost in the purge, and the broker refuses a whole
 * batch for one message that is too large for the topic: which message it
 * was is not known. So every message of the call that did not go out is
 * sent again alone, in array order, on a new producer, within the call's
 * time; only the message the broker refuses on its own is REJECT. A key
 * stops at its first failure; what the time does not cover keeps its
 * result. This costs a round trip per message, and happens only after a
 * refusal. */
static void isolate(kafka_sink_t *k, const outbox_message_t *msgs, size_t n,
                    outbox_publish_result_t *res, slot_t *slots, outbox_kit_keys_t *keys,
                    int64_t deadline)
{
    size_t any = 0;
    for (size_t i = 0; i < n; i++) {
        slots[i].again = (slots[i].state == SLOT_SENT || slots[i].state == SLOT_DONE) &&
                         res[i].status != OUTBOX_PUBLISH_OK;
        any += (size_t)slots[i].again;
    }
    if (any == 0)
        return;
    outbox_kit_buf_t topic;
    outbox_kit_buf_init(&topic, H);
    int sending = 1;
    for (size_t i = 0; i < n; i++) {
        if (!slots[i].again)
            continue;
        slots[i].again = 0;
        outbox_diag_t d = {0};
        if (sending && (H->monotonic_us() >= deadline || outbox_kafka_producer(k, &d) != OUTBOX_OK))
            sending = 0;
        if (sending)
            send_alone(k, &msgs[i], &slots[i], &res[i], &topic, deadline);
        if (res[i].status != OUTBOX_PUBLISH_OK)
            stop_key(keys, msgs, res, slots, i);
    }
    outbox_kit_buf_free(&topic);
}

/* Message i's slot: a proxy of the kept slot holding its event id, if an
 * earlier call kept one, else a message sent now. */
static void send_or_attach(kafka_sink_t *k, const outbox_message_t *msgs, size_t i, slot_t *slots,
                           outbox_publish_result_t *results, outbox_kit_keys_t *keys,
                           outbox_kit_buf_t *topic, int64_t deadline)
{
    slot_t *kept = k->kept != NULL ? find_kept(k, msgs[i].event_id) : NULL;
    if (kept != NULL) {
        slots[i].state = SLOT_PROXY;
        slots[i].ref = kept;
        if (kept->state == SLOT_SENT) {
            kept->call = k->call;
            k->waiting++;
        }
        return;
    }
    rd_kafka_resp_err_t e = produce_one(k, &msgs[i], &slots[i], topic, deadline);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        slots[i].state = SLOT_DONE;
        slots[i].err = e;
        report(k, &msgs[i], &slots[i], &results[i]);
        slots[i].state = SLOT_NONE;
        stop_key(keys, msgs, results, slots, i);
    }
}

int outbox_kafka_publish(void *handle, const outbox_message_t *msgs, size_t n,
                         outbox_publish_result_t *results, outbox_diag_t *d)
{
    kafka_sink_t *k = handle;
    k->call++;
    expire_kept(k);
    int rc = outbox_kafka_producer(k, d);
    if (rc != OUTBOX_OK)
        return rc;
    outbox_kit_keys_t keys;
    block_t *blk = H->alloc(sizeof *blk + n * sizeof(slot_t));
    if (blk == NULL || outbox_kit_keys_init(&keys, H, msgs, n) != 0) {
        H->free(blk);
        return H->error(d, OUTBOX_ENOMEM, "out of memory for %zu delivery slots", n);
    }
    blk->next = NULL;
    blk->n = n;
    blk->kept = 0;
    slot_t *slots = blk->slots;
    for (size_t i = 0; i < n; i++)
        slots[i] = (slot_t){.k = k, .blk = blk, .state = SLOT_NONE, .partition = -1};
    int64_t start = H->monotonic_us();
    int64_t deadline = start + k->cfg.timeout_ms * 1000;
    /* With DEFER, the wait for slow partitions ends sooner. */
    int64_t until = deadline;
    if (k->defer_ok && k->cfg.partition_timeout_ms < k->cfg.timeout_ms)
        until = start + k->cfg.partition_timeout_ms * 1000;
    outbox_kit_buf_t topic;
    outbox_kit_buf_init(&topic, H);
    k->waiting = 0;
    k->fatal[0] = '\0';

    for (size_t i = 0; i < n; i++)
        if (slots[i].state != SLOT_HELD)
            send_or_attach(k, msgs, i, slots, results, &keys, &topic, deadline);
    outbox_kit_buf_free(&topic);

    int complete = wait_reports(k, until);
    /* Slow partitions are left behind only while others work: when nothing
     * of the call went through, the call waits its whole timeout, as for a
     * cluster that is down (or a verdict still to come, as the broker's
     * refusal of a batch). */
    int partial = 0;
    if (!complete && until < deadline && k->fatal[0] == '\0') {
        /* A copy kept from an earlier call is proof enough: that call saw
         * others go through while it waited. */
        for (size_t i = 0; i < n && !partial; i++) {
            const slot_t *s = slots[i].state == SLOT_PROXY ? slots[i].ref : &slots[i];
            partial = slots[i].state == SLOT_PROXY ||
                      (s->state == SLOT_DONE && s->err == RD_KAFKA_RESP_ERR_NO_ERROR);
        }
        if (!partial) {
            until = deadline;
            complete = wait_reports(k, until);
        }
    }
    char why[256];
    if (k->fatal[0] == '\0' && rd_kafka_fatal_error(k->rk, why, sizeof why) != RD_KAFKA_RESP_ERR_NO_ERROR)
        outbox_kit_redact(H, k->cfg.secrets->redactor, why, k->fatal, sizeof k->fatal);
    int refused = k->fatal[0] != '\0';
    if (refused || (!complete && until == deadline))
        abandon(k);
    /* Kept only while the producer that holds them lives. */
    int alive = k->rk != NULL;
    for (size_t i = 0; i < n; i++) {
        slot_t *s = &slots[i];
        if (s->state == SLOT_PROXY) {
            s = s->ref;
            if (s->state == SLOT_DONE) {
                report(k, &msgs[i], s, &results[i]);
                unkeep(s);
            } else if (s->state == SLOT_SENT && alive) {
                report_kept(k, &msgs[i], &results[i]);
            } else {
                outbox_kit_result(&results[i], OUTBOX_PUBLISH_RETRY,
                                  "kafka: the copy kept from an earlier call was taken back%s%s",
                                  k->fatal[0] ? ": " : "", k->fatal);
            }
        } else if (s->state == SLOT_SENT && alive) {
            /* Still in librdkafka's hands: keep the slot for a later call. */
            s->kept_id = outbox_kit_strdup(H, msgs[i].event_id ? msgs[i].event_id : "");
            blk->kept++;
            report_kept(k, &msgs[i], &results[i]);
        } else if (s->state == SLOT_SENT || s->state == SLOT_DONE) {
            report(k, &msgs[i], s, &results[i]);
        }
    }
    if (refused)
        isolate(k, msgs, n, results, slots, &keys, deadline);
    outbox_kit_keys_free(&keys);
    if (k->rk == NULL) {
        /* The producer was dropped: nothing of it is kept. */
        for (size_t i = 0; i < n; i++)
            if (slots[i].kept_id != NULL)
                unkeep(&slots[i]);
        outbox_kafka_kept_free(k);
    }
    if (blk->kept > 0) {
        blk->next = k->kept;
        k->kept = blk;
    } else {
        H->free(blk);
    }
    sweep(k);
    return OUTBOX_OK;
}
