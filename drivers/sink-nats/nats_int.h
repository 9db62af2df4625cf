/* The NATS JetStream sink: what its files share.
 *
 * Floors, from the bottom: nats_subject.c (subjects and stream names),
 * nats_conn.c (connections from the parsed URI), nats_publish.c and
 * nats_stream.c (publishing; streams and the reader), and nats.c on top
 * (the URI, open/close and the descriptor). ceiling.c, the producer
 * ceiling of outbox-bench, sits on top beside nats.c. */
#ifndef OUTBOX_SINK_NATS_INT_H
#define OUTBOX_SINK_NATS_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <nats/nats.h>

#include "outbox/kit.h"

#define NATS_SINK_NAME "nats"

extern const outbox_host_t *outbox_nats_host;

/* What the URI says about connecting, kept so the reader can open a
 * connection of its own like the sink's. */
typedef struct nats_config {
    char **servers;       /* "nats://host:port" (or tls://), host->alloc'ed */
    size_t n_servers;
    char *user;           /* NULL when none */
    char *password;       /* never printed */
    char *token;          /* never printed */
    char *nkey;           /* a user nkey (public, "U..."), NULL when none */
    char *nkey_seed;      /* the file holding its seed; libnats reads it per connect */
    char *name;           /* connection name the server shows */
    bool tls;
    char *tls_ca, *tls_cert, *tls_key;
    int64_t connect_timeout_ms;
    int64_t reconnect_wait_ms;
} nats_config_t;

typedef struct nats_call nats_call_t;

typedef struct nats_sink {
    nats_config_t cfg;
    natsConnection *nc;
    jsCtx *js;
    char *subject_tpl;    /* the URI path without its '/'; "" = the relay's destination */
    int64_t timeout_ms;   /* the longest a publish call waits for PubAcks */
    char shown[OUTBOX_MESSAGE_MAX / 2]; /* the URI without secrets, for messages */
    outbox_redactor_t *redactor; /* the URI's secrets, to take out of libnats' texts */
    /* Why the first attempt to connect at open failed, until the
     * connection is first seen up; "" when it did not fail. */
    char open_error[256];
    /* The publish call in progress, which the PubAck handler (a libnats
     * thread) fills in; NULL between calls. */
    pthread_mutex_t mu;
    nats_call_t *call;
    bool handler_may_run; /* a call ended with acks outstanding: never free the handle */
} nats_sink_t;

/* nats_subject.c */
/* The subject of a route and destination through tpl into b (reset
 * first); 0, or -1 when it is no valid subject to publish to (why says
 * what is wrong). */
int outbox_nats_subject(outbox_kit_buf_t *b, const char *tpl, const char *route,
                        const char *destination, char *why, size_t size);
/* The stream name our destination_create gives a subject: the subject with
 * every character a stream name may not hold turned into '_', and when
 * anything was turned, a hash of the subject appended so that "a.b" and
 * "a_b" get two streams. */
void outbox_nats_stream_name(const char *subject, char *out, size_t size);

/* nats_conn.c */
/* Connects as h's URI says, with retry on a failed connect and
 * reconnects forever: a server that is down at open is not an error (the
 * connection is then pending and comes up by itself). With why non-NULL,
 * the first attempt is made without retries, and why it failed goes to
 * why ("" when it did not). */
int outbox_nats_connect(const nats_sink_t *h, natsConnection **nc, char *why, size_t why_size,
                        outbox_diag_t *d);
/* 0 when h's connection is up; else 1, with a message into out that says
 * so and why (libnats' last error on it, or h->open_error while it never
 * came up). */
int outbox_nats_down(nats_sink_t *h, char *out, size_t size);
/* A JetStream context on nc; ack_handler/closure for async publishing,
 * NULL for one that only makes requests. */
int outbox_nats_jetstream(natsConnection *nc, int64_t wait_ms, jsPubAckHandler ack_handler,
                          void *closure, jsCtx **js, outbox_diag_t *d);
/* The text of a libnats status for a message, with h's secrets taken
 * out. */
void outbox_nats_status_text(const nats_sink_t *h, natsStatus s, const char *extra, char *out,
                             size_t size);
void outbox_nats_config_free(nats_config_t *cfg);

/* nats_publish.c */
int outbox_nats_publish(void *handle, const outbox_message_t *msgs, size_t n,
                        outbox_publish_result_t *results, outbox_diag_t *d);
void outbox_nats_on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure);
/* Message m as the NATS message the sink publishes to subject: the
 * payload, the CloudEvents attributes as headers "ce-<name>" (traceparent
 * under its own name); NATS_INVALID_ARG for a header value holding a line
 * break. The producer ceiling builds its messages here too. */
natsStatus outbox_nats_build_msg(const outbox_message_t *m, const char *subject, natsMsg **out);
/* The JetStream publish options of m: Nats-Msg-Id is its event id, so the
 * stream drops a second copy within its duplicate window. */
void outbox_nats_pub_options(const outbox_message_t *m, jsPubOptions *po);
/* Takes back the messages on js whose acks did not come (after at least
 * one asynchronous publish) and waits a moment for a handler that may
 * still be running on one of them: true when one may still run. */
bool outbox_nats_abandon(jsCtx *js);

/* nats_stream.c */
int outbox_nats_destination_create(void *handle, const char *destination, outbox_diag_t *d);
int outbox_nats_destination_drop(void *handle, const char *destination, outbox_diag_t *d);
int outbox_nats_reader_open(void *handle, const char *destination, void **reader, outbox_diag_t *d);
int outbox_nats_reader_next(void *reader, int timeout_ms, outbox_received_t *out, outbox_diag_t *d);
void outbox_nats_reader_close(void *reader);

#endif
