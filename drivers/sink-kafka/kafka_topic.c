/* Topics (CreateTopics, DeleteTopics through the producer's connection)
 * and the reader: a consumer of its own assigned to every partition of a
 * topic from its first offset, without a group's commits. It reports each
 * record's CloudEvents attributes and, as wire headers, every record
 * header under its own name. */
#include <string.h>

#include "kafka_int.h"

static const outbox_host_t **host = &outbox_kafka_host;
#define H (*host)

#define ADMIN_TIMEOUT_MS 30000

/* The topic for destination through the URI's template. */
static char *topic_for(const kafka_sink_t *k, const char *destination)
{
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, H);
    outbox_kit_template(&b, k->cfg.topic_tpl, destination, destination);
    return outbox_kit_buf_steal(&b);
}

/* Runs an admin request queued on q and waits for its result event. */
static rd_kafka_event_t *admin_wait(rd_kafka_queue_t *q, rd_kafka_event_type_t type)
{
    for (;;) {
        rd_kafka_event_t *ev = rd_kafka_queue_poll(q, ADMIN_TIMEOUT_MS + 5000);
        if (ev == NULL || rd_kafka_event_type(ev) == type)
            return ev;
        rd_kafka_event_destroy(ev);
    }
}

static int admin_error(kafka_sink_t *k, outbox_diag_t *d, const char *what, const char *topic,
                       rd_kafka_resp_err_t e, const char *text)
{
    char shown[300];
    outbox_kit_redact(H, k->cfg.secrets->redactor, text ? text : rd_kafka_err2str(e), shown,
                      sizeof shown);
    int code = e == RD_KAFKA_RESP_ERR__TIMED_OUT || e == RD_KAFKA_RESP_ERR__TRANSPORT ||
                       e == RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT
                   ? OUTBOX_ETRANSIENT
                   : OUTBOX_EPERMANENT;
    return H->error(d, code, "kafka: %s topic %s: %s", what, topic, shown);
}

static int topic_admin(kafka_sink_t *k, const char *destination, int create, outbox_diag_t *d)
{
    int rc = outbox_kafka_producer(k, d);
    if (rc != OUTBOX_OK)
        return rc;
    char *topic = topic_for(k, destination ? destination : "");
    if (topic == NULL)
        return H->error(d, OUTBOX_ENOMEM, "out of memory naming a topic");
    if (topic[0] == '\0') {
        H->free(topic);
        return H->error(d, OUTBOX_EINVAL, "kafka: no topic name for destination \"%s\"",
                        destination ? destination : "");
    }
    char err[256];
    rd_kafka_queue_t *q = rd_kafka_queue_new(k->rk);
    rd_kafka_AdminOptions_t *opt = rd_kafka_AdminOptions_new(
        k->rk, create ? RD_KAFKA_ADMIN_OP_CREATETOPICS : RD_KAFKA_ADMIN_OP_DELETETOPICS);
    rd_kafka_AdminOptions_set_request_timeout(opt, ADMIN_TIMEOUT_MS, err, sizeof err);
    rd_kafka_AdminOptions_set_operation_timeout(opt, ADMIN_TIMEOUT_MS, err, sizeof err);
    rd_kafka_event_t *ev = NULL;
    const rd_kafka_topic_result_t **res = NULL;
    size_t nres = 0;
    if (create) {
        rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(topic, k->cfg.partitions, k->cfg.replication,
                                                        err, sizeof err);
        if (nt == NULL) {
            rc = admin_error(k, d, "creating", topic, RD_KAFKA_RESP_ERR__INVALID_ARG, err);
        } else {
            rd_kafka_CreateTopics(k->rk, &nt, 1, opt, q);
            rd_kafka_NewTopic_destroy(nt);
            ev = admin_wait(q, RD_KAFKA_EVENT_CREATETOPICS_RESULT);
            if (ev != NULL)
                res = rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &nres);
        }
    } else {
        rd_kafka_DeleteTopic_t *dt = rd_kafka_DeleteTopic_new(topic);
        rd_kafka_DeleteTopics(k->rk, &dt, 1, opt, q);
        rd_kafka_DeleteTopic_destroy(dt);
        ev = admin_wait(q, RD_KAFKA_EVENT_DELETETOPICS_RESULT);
        if (ev != NULL)
            res = rd_kafka_DeleteTopics_result_topics(rd_kafka_event_DeleteTopics_result(ev), &nres);
    }
    const char *what = create ? "creating" : "deleting";
    if (rc == OUTBOX_OK) {
        if (ev == NULL) {
            rc = admin_error(k, d, what, topic, RD_KAFKA_RESP_ERR__TIMED_OUT, "no answer from the broker");
        } else if (rd_kafka_event_error(ev) != RD_KAFKA_RESP_ERR_NO_ERROR) {
            rc = admin_error(k, d, what, topic, rd_kafka_event_error(ev), rd_kafka_event_error_string(ev));
        } else {
            for (size_t i = 0; i < nres && rc == OUTBOX_OK; i++) {
                rd_kafka_resp_err_t e = rd_kafka_topic_result_error(res[i]);
                /* Creating one that exists, or dropping one that does not,
                 * leaves what was asked for. */
                if (e == RD_KAFKA_RESP_ERR_NO_ERROR ||
                    (create && e == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) ||
                    (!create && e == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART))
                    continue;
                rc = admin_error(k, d, what, topic, e, rd_kafka_topic_result_error_string(res[i]));
            }
        }
    }
    if (ev != NULL)
        rd_kafka_event_destroy(ev);
    rd_kafka_AdminOptions_destroy(opt);
    rd_kafka_queue_destroy(q);
    H->free(topic);
    return rc;
}

int outbox_kafka_destination_create(void *handle, const char *destination, outbox_diag_t *d)
{
    return topic_admin(handle, destination, 1, d);
}

int outbox_kafka_destination_drop(void *handle, const char *destination, outbox_diag_t *d)
{
    return topic_admin(handle, destination, 0, d);
}

/* ------------------------------------------------------------- reader */

typedef struct kafka_reader {
    rd_kafka_t *rk;
    kafka_secrets_t *secrets; /* rk's log lines mask them */
    rd_kafka_message_t *msg;  /* the last one handed out */
    char *topic;
    outbox_kit_buf_t key;         /* msg's key, NUL-terminated */
    outbox_kit_received_t received; /* msg's attributes, and its headers as they came */
} kafka_reader_t;

void outbox_kafka_reader_close(void *reader)
{
    kafka_reader_t *r = reader;
    if (r == NULL)
        return;
    if (r->msg != NULL)
        rd_kafka_message_destroy(r->msg);
    if (r->rk != NULL) {
        rd_kafka_consumer_close(r->rk);
        rd_kafka_destroy(r->rk);
    }
    outbox_kafka_secrets_drop(r->secrets);
    outbox_kit_buf_free(&r->key);
    outbox_kit_received_free(&r->received);
    H->free(r->topic);
    H->free(r);
}

int outbox_kafka_reader_open(void *handle, const char *destination, void **reader,
                             outbox_diag_t *d)
{
    kafka_sink_t *k = handle;
    *reader = NULL;
    kafka_reader_t *r = H->alloc(sizeof *r);
    if (r == NULL)
        return H->error(d, OUTBOX_ENOMEM, "out of memory opening a kafka reader");
    memset(r, 0, sizeof *r);
    outbox_kit_buf_init(&r->key, H);
    outbox_kit_received_init(&r->received, H);
    /* The reader may outlive the handle: its consumer logs with secrets of
     * its own keeping. */
    r->secrets = outbox_kafka_secrets_keep(k->cfg.secrets);
    r->topic = topic_for(k, destination ? destination : "");
    rd_kafka_conf_t *conf = r->topic ? outbox_kafka_conf_new(&k->cfg, 0, d) : NULL;
    if (conf == NULL) {
        /* The conf's own error is in d; without a topic, memory ran out. */
        int named = r->topic != NULL;
        outbox_kafka_reader_close(r);
        return named ? d->code : H->error(d, OUTBOX_ENOMEM, "out of memory");
    }
    char err[512];
    r->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (r->rk == NULL) {
        rd_kafka_conf_destroy(conf);
        outbox_kafka_reader_close(r);
        char shown[400];
        outbox_kit_redact(H, k->cfg.secrets->redactor, err, shown, sizeof shown);
        return H->error(d, OUTBOX_EINVAL, "kafka reader: %s", shown);
    }
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(r->rk, r->topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(r->rk, 0, rkt, &md, ADMIN_TIMEOUT_MS);
    int rc = OUTBOX_OK;
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rc = H->error(d, OUTBOX_ETRANSIENT, "kafka reader: metadata of topic %s: %s", r->topic,
                      rd_kafka_err2str(e));
    } else if (md->topic_cnt != 1 || md->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rc = H->error(d, OUTBOX_ENOTFOUND, "kafka reader: topic %s: %s", r->topic,
                      rd_kafka_err2str(md->topic_cnt ? md->topics[0].err : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC));
    } else {
        rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(md->topics[0].partition_cnt);
        for (int i = 0; i < md->topics[0].partition_cnt; i++)
            rd_kafka_topic_partition_list_add(parts, r->topic, md->topics[0].partitions[i].id)->offset =
                RD_KAFKA_OFFSET_BEGINNING;
        e = rd_kafka_assign(r->rk, parts);
        rd_kafka_topic_partition_list_destroy(parts);
        if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
            rc = H->error(d, OUTBOX_EPERMANENT, "kafka reader: assigning topic %s: %s", r->topic,
                          rd_kafka_err2str(e));
    }
    if (md != NULL)
        rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    if (rc != OUTBOX_OK) {
        outbox_kafka_reader_close(r);
        return rc;
    }
    *reader = r;
    return OUTBOX_OK;
}

/* The outbox_header_t name of a Kafka header, or NULL when it is not a
 * CloudEvents attribute. */
static const char *ce_name(const char *kafka)
{
    if (strcmp(kafka, "content-type") == 0)
        return "datacontenttype";
    if (strcmp(kafka, "traceparent") == 0)
        return "traceparent";
    if (strncmp(kafka, "ce_", 3) == 0 && kafka[3] != '\0')
        return kafka + 3;
    return NULL;
}

int outbox_kafka_reader_next(void *reader, int timeout_ms, outbox_received_t *out,
                             outbox_diag_t *d)
{
    kafka_reader_t *r = reader;
    if (r->msg != NULL) {
        rd_kafka_message_destroy(r->msg);
        r->msg = NULL;
    }
    int64_t deadline = H->monotonic_us() + (int64_t)timeout_ms * 1000;
    rd_kafka_message_t *m = NULL;
    for (;;) {
        int64_t left = (deadline - H->monotonic_us()) / 1000;
        m = rd_kafka_consumer_poll(r->rk, left > 0 ? (int)left : 0);
        if (m == NULL)
            return OUTBOX_ENOTFOUND;
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR)
            break;
        rd_kafka_resp_err_t e = m->err;
        rd_kafka_message_destroy(m);
        if (e != RD_KAFKA_RESP_ERR__PARTITION_EOF && e != RD_KAFKA_RESP_ERR__TRANSPORT &&
            e != RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
            return H->error(d, OUTBOX_ETRANSIENT, "kafka reader: topic %s: %s", r->topic,
                            rd_kafka_err2str(e));
        if (left <= 0)
            return OUTBOX_ENOTFOUND;
    }
    r->msg = m;

    outbox_kit_buf_reset(&r->key);
    outbox_kit_buf_put(&r->key, m->key ? m->key : "", m->key ? m->key_len : 0);
    outbox_kit_received_reset(&r->received);
    rd_kafka_headers_t *hs = NULL;
    if (rd_kafka_message_headers(m, &hs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        const char *name;
        const void *value;
        size_t size;
        for (size_t i = 0; rd_kafka_header_get_all(hs, i, &name, &value, &size) ==
                           RD_KAFKA_RESP_ERR_NO_ERROR;
             i++) {
            const char *v = value ? value : "";
            size_t vlen = value ? size : 0;
            const char *ce = ce_name(name);
            /* Past OUTBOX_KIT_RECEIVED_MAX of either kind, the rest of that
             * kind is left out; the other still fills. */
            outbox_kit_received_wire(&r->received, name, strlen(name), v, vlen);
            if (ce != NULL)
                outbox_kit_received_add(&r->received, ce, strlen(ce), v, vlen);
            if (r->received.text.failed)
                break;
        }
    }
    if (r->key.failed || r->received.text.failed)
        return H->error(d, OUTBOX_ENOMEM, "out of memory reading a kafka message");
    outbox_kit_received_fill(&r->received, out);
    out->destination = r->topic;
    out->key = m->key ? r->key.data : NULL;
    out->dedupe_id = NULL;
    out->payload = m->payload ? m->payload : "";
    out->payload_len = m->len;
    return OUTBOX_OK;
}
