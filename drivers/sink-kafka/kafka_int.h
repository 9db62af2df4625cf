/* Inside the Kafka sink: what its files share. Floors, bottom up:
 * conf.c (the URI into librdkafka configuration), publish.c (producing
 * and delivery reports), admin.c (topics and the reader), kafka.c (the
 * descriptor, open and close). */
#ifndef KAFKA_INT_H
#define KAFKA_INT_H

#include <librdkafka/rdkafka.h>
#include <stdint.h>

#include "outbox/kit.h"

#define KAFKA_SINK_NAME "kafka"

extern const outbox_host_t *kafka_host;

/* One name=value the driver hands to librdkafka as it stands (after a
 * ${NAME} value was read from the environment). */
typedef struct kafka_param {
    char *key;
    char *value;
    int hidden; /* a secret name, or a value from the environment: never shown */
} kafka_param_t;

/* What the URI says, parsed once at open. */
typedef struct kafka_cfg {
    char *brokers;        /* bootstrap.servers */
    char *topic_tpl;      /* the path without its '/'; "" = the relay's destination */
    int64_t timeout_ms;   /* a publish call's bound; message.timeout.ms beyond it */
    int partitions;       /* destination_create */
    int replication;
    kafka_param_t *params;
    size_t n_params;
    int has_creds;        /* a user or password in the URI */
    char shown[256];      /* the URI without secrets, for messages */
} kafka_cfg_t;

int kafka_cfg_parse(const outbox_uri_t *uri, kafka_cfg_t *cfg, outbox_diag_t *d);
void kafka_cfg_free(kafka_cfg_t *cfg);
/* A librdkafka configuration for a producer (the sink) or a consumer (the
 * reader), with opaque set. On error: NULL and the reason, secrets
 * masked, in d. */
rd_kafka_conf_t *kafka_cfg_conf(const kafka_cfg_t *cfg, int producer, void *opaque,
                                outbox_diag_t *d);
/* in with every hidden value of cfg replaced by "***", as one line. */
void kafka_cfg_mask(const kafka_cfg_t *cfg, const char *in, char *out, size_t size);

typedef struct kafka_sink {
    kafka_cfg_t cfg;
    rd_kafka_t *rk;     /* the producer; NULL until (re)made by kafka_producer */
    size_t pending;     /* this call's messages without a delivery report */
    char fatal[256];    /* why the producer was given up, for the next messages */
} kafka_sink_t;

/* Makes k->rk when it is NULL. */
int kafka_producer(kafka_sink_t *k, outbox_diag_t *d);
/* Destroys k->rk (after a purge: nothing is waited for). */
void kafka_producer_drop(kafka_sink_t *k);
/* librdkafka's log and error lines into the host's log, secrets masked. */
void kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf);

int kafka_publish(void *handle, const outbox_message_t *msgs, size_t n,
                  outbox_publish_result_t *results, outbox_diag_t *d);

/* The topic for destination through the URI's template. */
char *kafka_topic_for(const kafka_sink_t *k, const char *destination);
int kafka_destination_create(void *handle, const char *destination, outbox_diag_t *d);
int kafka_destination_drop(void *handle, const char *destination, outbox_diag_t *d);
int kafka_reader_open(void *handle, const char *destination, void **reader, outbox_diag_t *d);
int kafka_reader_next(void *reader, int timeout_ms, outbox_received_t *out, outbox_diag_t *d);
void kafka_reader_close(void *reader);

#endif
