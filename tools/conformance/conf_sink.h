/* Sink conformance battery: what the sink fixture gives the sink cases.
 * Private to tools/conformance; every symbol here is hidden in the library. */
#ifndef OUTBOX_CONF_SINK_H
#define OUTBOX_CONF_SINK_H

#include "conf_int.h"

/* What a sink case needs (conf_case_t.needs); bits above the store's. */
enum conf_sink_need {
    CONF_NEED_SINK_ORDERED = 1u << 16, /* OUTBOX_SINK_CAP_ORDERED */
    CONF_NEED_SINK_DEDUPE = 1u << 17,  /* OUTBOX_SINK_CAP_DEDUPE */
    CONF_NEED_BROKER = 1u << 18,       /* broker_stop and broker_start commands */
    CONF_NEED_HOST = 1u << 19,         /* a URI of the form scheme://host:port... */
    CONF_NEED_RELAY_STORE = 1u << 20,  /* the sqlite store driver, for a relay */
    CONF_NEED_PAUSE = 1u << 21,        /* broker_pause and broker_resume commands */
};

/* The headers every message of the battery may carry. */
#define CONF_SINK_HEADERS 13

/* One message the battery publishes, with the storage it points into. */
typedef struct conf_smsg {
    outbox_message_t m;
    outbox_header_t h[CONF_SINK_HEADERS];
    outbox_row_t row;
    char event_id[OUTBOX_UUID_STRLEN + 1];
    char row_id[OUTBOX_UUID_STRLEN + 1]; /* the outbox row's id: never the event id */
    char key[64];
    char destination[80];
    char type[48], source[96], time[40], traceparent[64], hlc[24];
    char tenant[OUTBOX_UUID_STRLEN + 1], correlation[OUTBOX_UUID_STRLEN + 1];
    char causation[OUTBOX_UUID_STRLEN + 1], execution[OUTBOX_UUID_STRLEN + 1];
    char *payload; /* malloc'd */
} conf_smsg_t;

/* Event n to destination, with key (NULL: the event id, as the relay
 * does); every header when all_headers, else only the ones every event has.
 * The payload is a small JSON object that names n. */
void conf_smsg_init(conf_smsg_t *s, unsigned long n, const char *key, const char *destination,
                    int all_headers);
/* Replaces the payload with a JSON string value of exactly size bytes. */
void conf_smsg_big(conf_smsg_t *s, size_t size);
void conf_smsg_free(conf_smsg_t *s);

/* A publish call's worth of messages and results. */
typedef struct conf_batch {
    conf_smsg_t *v;
    outbox_message_t *msgs;
    outbox_publish_result_t *res;
    size_t n;
} conf_batch_t;

conf_batch_t conf_batch_new(size_t n);
/* Publishes v[0..n) in one call; returns outbox_sink_publish's code. */
int conf_batch_publish(outbox_sink_t *k, conf_batch_t *b);
/* How many results have status. */
size_t conf_batch_count(const conf_batch_t *b, int status);
void conf_batch_free(conf_batch_t *b);

/* A handle on the sink under test; fails the case when it cannot open. */
outbox_sink_t *conf_sink_open(void);
/* The same on another URI, without failing: NULL with rc and msg set. */
outbox_sink_t *conf_sink_open_uri(const char *uri, int *rc, char *msg, size_t size);

/* A message read back, copied out of the reader. */
typedef struct conf_got {
    unsigned long n; /* from its id header; ULONG_MAX when it has none of ours */
    char *key, *dedupe_id, *destination, *payload;
    size_t payload_len;
    outbox_header_t *headers;
    size_t n_headers;
    outbox_header_t *wire; /* every header under its name on the wire (ABI 1.6) */
    size_t n_wire;
    int has_wire;          /* the reader reported wire names for this message */
} conf_got_t;

typedef struct conf_read {
    conf_got_t *v;
    size_t n;
} conf_read_t;

/* Reads destination from its start until want messages arrived and a
 * short while more passed without another (so extras show), or until
 * quiet_ms passed without a new one. Fails the case on a reader error. */
conf_read_t conf_sink_read(outbox_sink_t *k, const char *destination, size_t want, int quiet_ms);
void conf_read_free(conf_read_t *r);
const char *conf_got_header(const conf_got_t *g, const char *name);
/* The value of the header named name on the wire (ignoring case when
 * nocase), or NULL. */
const char *conf_got_wire(const conf_got_t *g, const char *name, int nocase);
/* The message's key: the broker's key, else its partitionkey header. */
const char *conf_got_key(const conf_got_t *g);

/* Runs the broker_stop or broker_start command; fails the case when it fails. */
void conf_broker_stop(void);
/* Runs the broker_pause or broker_resume command; fails the case when it fails. */
void conf_broker_pause(void);
void conf_broker_resume(void);
void conf_broker_start(void);

/* uri with its host:port replaced (0), or -1 when it has none; with size
 * 0 (out may be NULL) only whether it has one. */
int conf_uri_with_host(const char *uri, const char *hostport, char *out, size_t size);
/* uri with its user information replaced by userinfo (0), or -1. */
int conf_uri_with_userinfo(const char *uri, const char *userinfo, char *out, size_t size);
/* A loopback port nothing listens on (bound, then closed). */
int conf_closed_port(void);

/* Fails the case unless expr is OUTBOX_OK, with the sink's message. */
#define conf_sink_ok(k, expr)                                                                    \
    do {                                                                                         \
        int conf_rc_ = (expr);                                                                   \
        ck_assert_msg(conf_rc_ == OUTBOX_OK, "%s failed: %s (%s)", #expr, outbox_strerror(conf_rc_), \
                      outbox_sink_message(k));                                                   \
    } while (0)

#endif
