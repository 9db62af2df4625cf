/* The Kafka sink: what its files share.
 *
 * Floors, from the bottom: kafka_conf.c (the URI into librdkafka
 * configuration, and librdkafka's log lines with secrets masked),
 * kafka_publish.c (the producer, producing and delivery reports),
 * kafka_topic.c (topics, through the producer, and the reader), and
 * kafka.c on top (open/close and the descriptor), with ceiling.c beside
 * it (the producer ceiling, built into outbox-bench only). */
#ifndef OUTBOX_SINK_KAFKA_INT_H
#define OUTBOX_SINK_KAFKA_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "outbox/kit.h"

#define KAFKA_SINK_NAME "kafka"
/* The shortest sink timeout that outlasts a partition leader election
 * after a broker dies; a shorter one is warned about at open. */
#define KAFKA_ELECTION_MS 15000

extern const outbox_host_t *outbox_kafka_host;

typedef struct kafka_sink kafka_sink_t;

/* One name=value the driver hands to librdkafka as it stands (after a
 * NAME_env value was read from the environment). */
typedef struct kafka_param {
    char *key;
    char *value;
    int hidden; /* a secret name, or a value from the environment: never shown */
} kafka_param_t;

/* The URI's secrets, for every text of librdkafka's the sink passes on,
 * shared by the sink and its readers and freed with the last of them: a
 * client's log lines come from librdkafka's threads for as long as it
 * lives, and a reader outlives the handle that opened it. */
typedef struct kafka_secrets {
    outbox_redactor_t *redactor;
    atomic_uint refs;
    /* librdkafka's last error on the client (its error callback runs on
     * librdkafka's threads), secrets masked: why a connection or a login
     * failed, which a purged message's own report does not say. */
    pthread_mutex_t mu;
    char last_error[256];
} kafka_secrets_t;

/* What the URI says, parsed once at open. */
typedef struct kafka_config {
    char *brokers;        /* bootstrap.servers */
    char *topic_tpl;      /* the path without its '/'; "" = the relay's destination */
    int64_t timeout_ms;   /* a publish call's bound; message.timeout.ms beyond it */
    int64_t partition_timeout_ms; /* how long a call waits for a slow partition before DEFER */
    int partitions;       /* destination_create */
    int replication;
    kafka_param_t *params;
    size_t n_params;
    int has_creds;        /* a user or password in the URI */
    kafka_secrets_t *secrets;
    char shown[256];      /* the URI without secrets, for messages */
} kafka_config_t;

struct kafka_sink {
    kafka_config_t cfg;
    rd_kafka_t *rk;     /* the producer; NULL until (re)made by outbox_kafka_producer */
    size_t pending;     /* messages in librdkafka's hands without a delivery report */
    size_t waiting;     /* those of them the current call waits for */
    unsigned call;      /* the current call's number */
    int defer_ok;       /* the host takes OUTBOX_PUBLISH_DEFER */
    struct kafka_block *kept; /* earlier calls' slots holding messages still in hand */
    char fatal[256];    /* why the producer was given up, for the next messages */
};

/* kafka_conf.c */
int outbox_kafka_config_parse(const outbox_uri_t *uri, kafka_config_t *cfg, outbox_diag_t *d);
void outbox_kafka_config_free(kafka_config_t *cfg);
/* One more holder of s (a reader): s until outbox_kafka_secrets_drop. */
kafka_secrets_t *outbox_kafka_secrets_keep(kafka_secrets_t *s);
void outbox_kafka_secrets_drop(kafka_secrets_t *s);
/* librdkafka's last error on s's clients into out ("" when none since the
 * last clear). */
void outbox_kafka_last_error(kafka_secrets_t *s, char *out, size_t size);
/* A delivery went through: the last error is history. */
void outbox_kafka_clear_error(kafka_secrets_t *s);
/* A librdkafka configuration for a producer (the sink) or a consumer (the
 * reader), whose log lines go to the host's log with cfg's secrets masked
 * (the client must not outlive cfg->secrets). On error: NULL and the
 * reason, secrets masked, in d. */
rd_kafka_conf_t *outbox_kafka_conf_new(const kafka_config_t *cfg, int producer, outbox_diag_t *d);

/* kafka_publish.c */
/* A producer's delivery report callback. */
typedef void (*kafka_dr_fn)(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque);
/* A producer on cfg whose delivery reports go to dr (the client must not
 * outlive cfg->secrets); NULL and the reason, secrets masked, in d. */
rd_kafka_t *outbox_kafka_producer_new(const kafka_config_t *cfg, kafka_dr_fn dr, outbox_diag_t *d);
/* Makes k->rk when it is NULL. */
int outbox_kafka_producer(kafka_sink_t *k, outbox_diag_t *d);
/* Destroys k->rk (after a purge: nothing is waited for). */
void outbox_kafka_producer_drop(kafka_sink_t *k);
/* Frees what earlier calls kept (at close, after the producer is gone). */
void outbox_kafka_kept_free(kafka_sink_t *k);
/* Hands m to librdkafka for topic, as the sink sends every message: key,
 * payload and the CloudEvents attributes as headers in the Kafka binding's
 * binary mode (ce_NAME, content-type, traceparent); opaque is the message's
 * delivery report opaque. The error of rd_kafka_producev (nothing is
 * queued then). Shared with the producer ceiling (ceiling.c). */
rd_kafka_resp_err_t outbox_kafka_produce(rd_kafka_t *rk, const char *topic,
                                         const outbox_message_t *m, void *opaque);
int outbox_kafka_publish(void *handle, const outbox_message_t *msgs, size_t n,
                         outbox_publish_result_t *results, outbox_diag_t *d);

/* kafka_topic.c */
int outbox_kafka_destination_create(void *handle, const char *destination, outbox_diag_t *d);
int outbox_kafka_destination_drop(void *handle, const char *destination, outbox_diag_t *d);
int outbox_kafka_reader_open(void *handle, const char *destination, void **reader,
                             outbox_diag_t *d);
int outbox_kafka_reader_next(void *reader, int timeout_ms, outbox_received_t *out,
                             outbox_diag_t *d);
void outbox_kafka_reader_close(void *reader);

#endif
