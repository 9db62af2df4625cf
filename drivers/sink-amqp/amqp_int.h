/* The AMQP 0-9-1 (RabbitMQ) sink: what its files share.
 *
 * Floors, from the bottom: amqp_conn.c (connections from the parsed URI
 * and the text of librabbitmq's errors), amqp_publish.c and amqp_queue.c
 * (publishing; queues and the reader), and amqp.c on top (the URI,
 * open/close and the descriptor). ceiling.c, the producer ceiling of
 * outbox-bench, sits on top beside amqp.c. */
#ifndef OUTBOX_SINK_AMQP_INT_H
#define OUTBOX_SINK_AMQP_INT_H

#include <stdbool.h>
#include <stdint.h>

#include <amqp.h>

#include "outbox/kit.h"

#define AMQP_SINK_NAME "amqp"
/* The CloudEvents AMQP binding's prefix of application properties; the
 * reader also takes the binding's older "cloudEvents:". */
#define AMQP_CE_PREFIX "cloudEvents_"
#define AMQP_CE_PREFIX_OLD "cloudEvents:"

extern const outbox_host_t *outbox_amqp_host;

/* What the URI says about connecting, kept so the reader and the queue
 * calls can open connections of their own like the sink's. */
typedef struct amqp_config {
    char *host;
    int port;
    char *vhost;
    char *user;
    char *password; /* never printed */
    bool tls;
    bool tls_verify;
    char *tls_ca, *tls_cert, *tls_key;
    int64_t connect_timeout_ms;
    int heartbeat_s;
    outbox_redactor_t *redactor; /* the secrets, to take out of texts the broker or the
                                    library wrote */
} amqp_config_t;

typedef struct amqp_sink {
    amqp_config_t cfg;
    amqp_connection_state_t conn; /* NULL while not connected */
    uint64_t last_tag;            /* the delivery tag of the last publish on the channel */
    int64_t last_used_us;         /* monotonic time the connection was last used */
    char *exchange;               /* "" = the default exchange */
    char *rk_tpl;                 /* routing key template; "" = the relay's destination */
    size_t max_bytes;
    int64_t timeout_ms;           /* the longest a publish call waits for confirms */
    char shown[OUTBOX_MESSAGE_MAX / 2]; /* the URI without secrets, for messages */
} amqp_sink_t;

/* amqp_conn.c */
/* A connection with channel 1 open, in confirm mode when confirm is set.
 * 0, or -1 with why (one line, no secret) filled. */
int outbox_amqp_connect(const amqp_config_t *cfg, bool confirm, amqp_connection_state_t *out,
                        char *why, size_t size);
void outbox_amqp_disconnect(amqp_connection_state_t conn, bool polite);
/* The text of an RPC reply that is not NORMAL, with red's secrets taken
 * out, and whether the broker (rather than the network) gave it. */
bool outbox_amqp_reply_text(const outbox_redactor_t *red, amqp_rpc_reply_t r, char *out,
                            size_t size);
void outbox_amqp_config_free(amqp_config_t *cfg);

/* amqp_publish.c */
enum { AMQP_MAX_HEADERS = 32 };

/* A message's basic properties as the sink sends them, with the
 * application properties they point to (so not to be copied). */
typedef struct amqp_out {
    amqp_basic_properties_t props;
    amqp_table_entry_t entries[AMQP_MAX_HEADERS];
    char names[AMQP_MAX_HEADERS][64];
} amqp_out_t;

/* Message m as h sends it: checked against h's limits (a payload, at most
 * max_bytes, a routing key of at most 255 bytes), its routing key from
 * h's template into rk (reset first), and into out its properties:
 * persistent, message_id the event id, type and content_type from those
 * attributes, the row's time as timestamp, every other attribute as an
 * application property cloudEvents_<name> (traceparent under its own
 * name). 0, or -1 with r saying why it cannot go. The producer ceiling
 * prepares and sends its messages here too. */
int outbox_amqp_prepare(const amqp_sink_t *h, const outbox_message_t *m, outbox_kit_buf_t *rk,
                        amqp_out_t *out, outbox_publish_result_t *r);
/* basic.publish of a prepared m on channel 1 of conn, mandatory, to h's
 * exchange under routing key rk: librabbitmq's status. */
int outbox_amqp_send(const amqp_sink_t *h, amqp_connection_state_t conn,
                     const outbox_message_t *m, const outbox_kit_buf_t *rk, const amqp_out_t *out);
int outbox_amqp_publish(void *handle, const outbox_message_t *msgs, size_t n,
                        outbox_publish_result_t *results, outbox_diag_t *d);

/* amqp_queue.c */
int outbox_amqp_destination_create(void *handle, const char *destination, outbox_diag_t *d);
int outbox_amqp_destination_drop(void *handle, const char *destination, outbox_diag_t *d);
int outbox_amqp_reader_open(void *handle, const char *destination, void **reader, outbox_diag_t *d);
int outbox_amqp_reader_next(void *reader, int timeout_ms, outbox_received_t *out, outbox_diag_t *d);
void outbox_amqp_reader_close(void *reader);

#endif
