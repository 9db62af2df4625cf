/* Streams (destination_create/drop) and the reader: what the sink battery
 * and an operator's tooling use, beside publishing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nats_int.h"

/* The subject a destination publishes to, through the sink's template. */
static int destination_subject(const nats_sink_t *h, const char *destination, outbox_kit_buf_t *b,
                               outbox_diag_t *d)
{
    char why[OUTBOX_MESSAGE_MAX / 2];
    if (destination == NULL ||
        outbox_nats_subject(b, h->subject_tpl, destination, destination, why, sizeof why) != 0)
        return outbox_nats_host->error(d, OUTBOX_EINVAL, "NATS sink: destination %s: %s",
                                       destination ? destination : "(none)",
                                       destination ? why : "none given");
    return OUTBOX_OK;
}

static int js_failure(const nats_sink_t *h, natsStatus s, jsErrCode code, const char *what,
                      const char *name, outbox_diag_t *d)
{
    char text[300];
    outbox_nats_status_text(h, s, nats_GetLastError(NULL), text, sizeof text);
    int rc = s == NATS_TIMEOUT || s == NATS_CONNECTION_CLOSED || s == NATS_NOT_YET_CONNECTED ||
                     s == NATS_CONNECTION_DISCONNECTED || s == NATS_NO_SERVER
                 ? OUTBOX_ETRANSIENT
                 : OUTBOX_EPERMANENT;
    if (code != 0)
        return outbox_nats_host->error(d, rc, "NATS sink: %s %s: %s (JetStream error %d)", what,
                                       name, text, (int)code);
    return outbox_nats_host->error(d, rc, "NATS sink: %s %s: %s", what, name, text);
}

int outbox_nats_destination_create(void *handle, const char *destination, outbox_diag_t *d)
{
    nats_sink_t *h = handle;
    outbox_kit_buf_t subject;
    outbox_kit_buf_init(&subject, outbox_nats_host);
    int rc = destination_subject(h, destination, &subject, d);
    if (rc != OUTBOX_OK) {
        outbox_kit_buf_free(&subject);
        return rc;
    }
    char name[128];
    outbox_nats_stream_name(subject.data, name, sizeof name);
    const char *subjects[] = {subject.data};
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    cfg.Name = name;
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    cfg.Storage = js_FileStorage;
    jsStreamInfo *si = NULL;
    jsErrCode code = 0;
    natsStatus s = js_AddStream(&si, h->js, &cfg, NULL, &code);
    jsStreamInfo_Destroy(si);
    /* One that exists with this name is fine whatever it was made with. */
    if (s != NATS_OK && code == JSStreamNameExistErr)
        s = NATS_OK;
    if (s != NATS_OK)
        rc = js_failure(h, s, code, "creating stream", name, d);
    outbox_kit_buf_free(&subject);
    return rc;
}

int outbox_nats_destination_drop(void *handle, const char *destination, outbox_diag_t *d)
{
    nats_sink_t *h = handle;
    outbox_kit_buf_t subject;
    outbox_kit_buf_init(&subject, outbox_nats_host);
    int rc = destination_subject(h, destination, &subject, d);
    if (rc == OUTBOX_OK) {
        char name[128];
        outbox_nats_stream_name(subject.data, name, sizeof name);
        jsErrCode code = 0;
        natsStatus s = js_DeleteStream(h->js, name, NULL, &code);
        if (s != NATS_OK && code != JSStreamNotFoundErr)
            rc = js_failure(h, s, code, "deleting stream", name, d);
    }
    outbox_kit_buf_free(&subject);
    return rc;
}

/* ---------------------------------------------------------------- reader */

typedef struct nats_reader {
    natsConnection *nc;
    jsCtx *js;
    natsSubscription *sub;
    natsMsg *msg;                /* what *out's payload and subject point into */
    outbox_kit_received_t attrs; /* and its attributes */
    char shown[OUTBOX_MESSAGE_MAX / 2];
} nats_reader_t;

void outbox_nats_reader_close(void *reader)
{
    nats_reader_t *r = reader;
    if (r == NULL)
        return;
    natsMsg_Destroy(r->msg);
    outbox_kit_received_free(&r->attrs);
    natsSubscription_Destroy(r->sub);
    jsCtx_Destroy(r->js);
    natsConnection_Destroy(r->nc);
    outbox_nats_host->free(r);
}

int outbox_nats_reader_open(void *handle, const char *destination, void **reader, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_nats_host;
    nats_sink_t *h = handle;
    *reader = NULL;
    outbox_kit_buf_t subject;
    outbox_kit_buf_init(&subject, host);
    int rc = destination_subject(h, destination, &subject, d);
    if (rc != OUTBOX_OK) {
        outbox_kit_buf_free(&subject);
        return rc;
    }
    nats_reader_t *r = host->alloc(sizeof *r);
    if (r == NULL) {
        outbox_kit_buf_free(&subject);
        return host->error(d, OUTBOX_ENOMEM, "out of memory opening a NATS reader");
    }
    memset(r, 0, sizeof *r);
    outbox_kit_received_init(&r->attrs, host);
    snprintf(r->shown, sizeof r->shown, "%s", h->shown);
    rc = outbox_nats_connect(h, &r->nc, NULL, 0, d);
    if (rc == OUTBOX_OK)
        rc = outbox_nats_jetstream(r->nc, h->timeout_ms, NULL, NULL, &r->js, d);
    if (rc == OUTBOX_OK) {
        /* An ordered consumer: ephemeral, from the first message, and
         * recreated by the library from where it was if the connection
         * drops. The stream is whichever captures the subject, ours or
         * one made by hand. */
        jsSubOptions so;
        jsSubOptions_Init(&so);
        so.Ordered = true;
        so.Config.DeliverPolicy = js_DeliverAll;
        jsErrCode code = 0;
        natsStatus s = js_SubscribeSync(&r->sub, r->js, subject.data, NULL, &so, &code);
        if (s != NATS_OK)
            rc = js_failure(h, s, code, "reading the stream of subject", subject.data, d);
    }
    outbox_kit_buf_free(&subject);
    if (rc != OUTBOX_OK) {
        outbox_nats_reader_close(r);
        return rc;
    }
    *reader = r;
    return OUTBOX_OK;
}

/* The CloudEvents attributes among msg's headers ("ce-<name>", and
 * traceparent) into r->attrs, and every header as it came. */
static int reader_attributes(nats_reader_t *r, natsMsg *msg)
{
    const char **keys = NULL;
    int n_keys = 0;
    outbox_kit_received_reset(&r->attrs);
    if (natsMsgHeader_Keys(msg, &keys, &n_keys) != NATS_OK)
        return OUTBOX_OK; /* no headers */
    int rc = OUTBOX_OK;
    for (int k = 0; k < n_keys; k++) {
        const char *key = keys[k], *value = NULL, *name = NULL;
        if (strncmp(key, "ce-", 3) == 0 && key[3] != '\0')
            name = key + 3;
        else if (strcmp(key, "traceparent") == 0)
            name = key;
        if (natsMsgHeader_Get(msg, key, &value) != NATS_OK)
            continue;
        if (outbox_kit_received_wire(&r->attrs, key, strlen(key), value, strlen(value)) != 0 ||
            (name != NULL &&
             outbox_kit_received_add(&r->attrs, name, strlen(name), value, strlen(value)) != 0)) {
            if (r->attrs.text.failed)
                rc = OUTBOX_ENOMEM;
            break;
        }
    }
    free((void *)keys); /* libnats allocates it with malloc */
    return rc;
}

int outbox_nats_reader_next(void *reader, int timeout_ms, outbox_received_t *out, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_nats_host;
    nats_reader_t *r = reader;
    natsMsg_Destroy(r->msg);
    r->msg = NULL;
    natsMsg *msg = NULL;
    natsStatus s = natsSubscription_NextMsg(&msg, r->sub, timeout_ms > 0 ? timeout_ms : 1);
    if (s == NATS_TIMEOUT)
        return OUTBOX_ENOTFOUND;
    if (s != NATS_OK)
        return host->error(d, OUTBOX_ETRANSIENT, "NATS reader (%s): %s", r->shown,
                           natsStatus_GetText(s));
    r->msg = msg;
    if (reader_attributes(r, msg) != OUTBOX_OK)
        return host->error(d, OUTBOX_ENOMEM, "NATS reader (%s): out of memory", r->shown);
    const char *dedupe = NULL;
    natsMsgHeader_Get(msg, "Nats-Msg-Id", &dedupe);
    outbox_kit_received_fill(&r->attrs, out);
    out->destination = natsMsg_GetSubject(msg);
    out->key = NULL;
    out->dedupe_id = dedupe;
    out->payload = natsMsg_GetData(msg);
    out->payload_len = (size_t)natsMsg_GetDataLength(msg);
    return OUTBOX_OK;
}
