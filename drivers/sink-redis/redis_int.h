/* The Redis Streams sink: what its files share.
 *
 * Floors, from the bottom: redis_wire.c (commands in the Redis protocol,
 * sent without SIGPIPE; error replies sorted into RETRY and REJECT),
 * redis_conn.c (a connection from the parsed URI: connect, AUTH, SELECT),
 * redis_publish.c and redis_stream.c (publishing; streams and the reader),
 * and redis.c on top (the URI, open/close and the descriptor), with
 * ceiling.c beside it (the producer ceiling, built into outbox-bench
 * only). */
#ifndef OUTBOX_SINK_REDIS_INT_H
#define OUTBOX_SINK_REDIS_INT_H

#include <stdbool.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "outbox/kit.h"

#define REDIS_SINK_NAME "redis"

extern const outbox_host_t *outbox_redis_host;

typedef struct redis_sink redis_sink_t;

/* What the URI says about connecting, kept so the reader can open a
 * connection of its own like the sink's. */
typedef struct redis_config {
    char *host;           /* host->alloc'ed */
    int port;
    char *user;           /* NULL: AUTH with the password alone (the default user) */
    char *password;       /* NULL when none; never printed */
    long db;              /* SELECT when not 0 */
    int64_t timeout_ms;   /* connect, and each read or write of a command */
    outbox_redactor_t *redactor; /* the secrets, to take out of the server's and hiredis' texts */
    /* Sentinel: master is the name the Sentinels monitor, sentinels their
     * "host:port,host:port" list (the URI's hosts); NULL: host and port
     * are the server itself. */
    char *master;
    char *sentinels;
} redis_config_t;

struct redis_sink {
    redis_config_t cfg;
    redisContext *c;      /* NULL while not connected: the next call connects */
    bool was_connected;   /* a connection was made before: a new one is a reconnect */
    char *stream_tpl;     /* the stream key template; "" = the relay's destination */
    long long maxlen;     /* XADD MAXLEN ~ N; 0 = none */
    char maxlen_text[24];
    size_t max_bytes;     /* an entry larger than this is REJECT, never sent */
    long wait_replicas;   /* WAIT for this many replicas before OK; 0 = none */
    int64_t wait_timeout_ms;
    bool readonly_seen;   /* a READONLY reply: the server is a replica now */
    char shown[OUTBOX_MESSAGE_MAX / 2]; /* the URI without secrets, for messages */
    outbox_kit_buf_t out;     /* the commands of a call, kept between calls */
};

/* redis_wire.c */
/* Appends one command in the Redis protocol: redis_cmd_begin with the
 * number of arguments, then each argument. */
void outbox_redis_cmd_begin(outbox_kit_buf_t *b, size_t argc);
void outbox_redis_cmd_arg(outbox_kit_buf_t *b, const char *s, size_t n);
/* Sends b whole on c's socket (MSG_NOSIGNAL: a server gone away is an
 * error, not a signal). 0, or -1 with c->err and c->errstr set. */
int outbox_redis_send(redisContext *c, const char *data, size_t len);
/* The next reply, or NULL with c->err set. */
redisReply *outbox_redis_reply(redisContext *c);
/* One command with NUL-terminated arguments, its reply (or NULL). */
redisReply *outbox_redis_command(redisContext *c, outbox_kit_buf_t *scratch, size_t argc,
                                 const char *const *argv);
/* Whether an error reply will come back the same way on a retry
 * (WRONGTYPE, ERR ...): 1 REJECT, 0 RETRY. */
int outbox_redis_error_permanent(const char *err);

/* redis_conn.c */
/* Connects, authenticates and selects the database. With Sentinels, asks
 * them in turn for the master's address first, and checks that the server
 * found there is a master (ROLE). On failure, NULL and a negative code:
 * OUTBOX_ETRANSIENT when the server could not be reached or is not ready
 * (or no Sentinel named a master), OUTBOX_EPERMANENT when it refused the
 * password, OUTBOX_EINVAL for a database it does not have. */
int outbox_redis_connect(const redis_config_t *cfg, const char *shown, redisContext **out,
                         outbox_diag_t *d);
/* A copy of from for a reader, which may outlive the sink: its strings,
 * and a redactor of its password. 0, or -1 when memory ran out (to is
 * then freed). */
int outbox_redis_config_copy(const redis_config_t *from, redis_config_t *to);
void outbox_redis_config_free(redis_config_t *cfg);

/* redis_publish.c */
/* Appends the XADD of m to b: to stream (what outbox_kit_destination
 * makes of m through the stream template), MAXLEN ~ N when the URI says
 * so, then the entry's fields: the payload under "data", each CloudEvents
 * attribute under its own name, partitionkey from the key when no header
 * gives it. Shared with the producer ceiling (ceiling.c). */
void outbox_redis_put_xadd(const redis_sink_t *h, outbox_kit_buf_t *b, const outbox_message_t *m,
                           const outbox_kit_buf_t *stream);
int outbox_redis_publish(void *handle, const outbox_message_t *msgs, size_t n,
                         outbox_publish_result_t *results, outbox_diag_t *d);

/* redis_stream.c */
int outbox_redis_destination_create(void *handle, const char *destination, outbox_diag_t *d);
int outbox_redis_destination_drop(void *handle, const char *destination, outbox_diag_t *d);
int outbox_redis_reader_open(void *handle, const char *destination, void **reader,
                             outbox_diag_t *d);
int outbox_redis_reader_next(void *reader, int timeout_ms, outbox_received_t *out,
                             outbox_diag_t *d);
void outbox_redis_reader_close(void *reader);

#endif
