/* The HTTP webhook sink: what its files share.
 *
 * Floors, from the bottom: http_wire.c (URLs, CloudEvents headers, the
 * signature, status and Retry-After text), http_publish.c (the libcurl
 * multi loop) and http_inspect.c (destination_create/drop and the reader,
 * through the receiver's inspection protocol), and http.c on top (the
 * URI, open/close and the descriptor), with ceiling.c beside it (the
 * producer ceiling, built into outbox-bench only). */
#ifndef OUTBOX_SINK_HTTP_INT_H
#define OUTBOX_SINK_HTTP_INT_H

#include <stdbool.h>
#include <stdint.h>

#include <curl/curl.h>

#include "outbox/kit.h"

#define HTTP_SINK_NAME "http"
/* The longest Retry-After the sink honours: a receiver asking for a day
 * gets ten minutes, then is tried again. */
#define HTTP_RETRY_AFTER_MAX_S 600
/* How much of a refusing receiver's answer goes into a result's message. */
#define HTTP_EXCERPT 160

extern const outbox_host_t *outbox_http_host;

typedef struct http_sink http_sink_t;

/* What the URI says, kept so the reader can make requests of its own. */
typedef struct http_config {
    char *base;           /* "http://host:port" (or https), no userinfo */
    char *path_tpl;       /* the URL path template, "/{destination}" by default */
    char *query;          /* sent after '?' on every delivery, or NULL */
    char *user;           /* basic auth, NULL when none */
    char *password;       /* never printed */
    char *token;          /* bearer token, never printed */
    char *secret;         /* the signing secret as given, never printed */
    unsigned char *key;   /* the HMAC key (secret, or its whsec_ base64 decoded) */
    size_t key_len;
    char *tls_ca, *tls_cert, *tls_key;
    bool insecure;
    long connect_timeout_ms;
    long timeout_ms;
    int parallel;
    char **headers;       /* extra "Name: value" lines */
    size_t n_headers;
    char shown[OUTBOX_MESSAGE_MAX / 2]; /* the URI without secrets */
} http_config_t;

typedef struct http_slot http_slot_t;

struct http_sink {
    http_config_t cfg;
    CURLM *multi;         /* its connection cache keeps the connections alive */
    http_slot_t *slots;   /* cfg.parallel of them, easy handles reused */
    outbox_redactor_t *redactor; /* the URI's secrets, taken out of text the sink quotes */
    int64_t hold_until_us; /* a Retry-After: send nothing before (monotonic) */
    char hold_why[200];
};

/* http_wire.c */
/* The URL of m's delivery: base, the template with "{route}" and
 * "{destination}" filled in and percent-encoded, then the query. */
void outbox_http_url(outbox_kit_buf_t *b, const http_config_t *c, const outbox_message_t *m);
/* Appends s percent-encoded for a URL path (keep_slash) or a query value. */
void outbox_http_encode(outbox_kit_buf_t *b, const char *s, bool keep_slash);
/* The request headers of m: Content-Type, ce-*, traceparent, the extra
 * ones and the signature. NULL with why filled in when m cannot be sent
 * as given (a line break in a value: REJECT); *oom set when memory ran out. */
struct curl_slist *outbox_http_headers(const http_config_t *c, const outbox_message_t *m,
                                       int64_t now_s, char *why, size_t size, bool *oom);
/* The CloudEvents HTTP binding's header value encoding, and back. */
void outbox_http_ce_encode(outbox_kit_buf_t *b, const char *value);
void outbox_http_ce_decode(outbox_kit_buf_t *b, const char *value, size_t n);
/* Seconds to wait from a Retry-After value (delta-seconds or an HTTP
 * date), at most HTTP_RETRY_AFTER_MAX_S; -1 when it is neither. */
long outbox_http_retry_after(const char *value, int64_t now_s);
/* The key from a signing secret: "whsec_" + base64 is decoded (the
 * Standard Webhooks form), anything else is the key as it is. -1 when the
 * whsec_ part is no base64. *key is host->alloc'ed. */
int outbox_http_signing_key(const char *secret, unsigned char **key, size_t *len);
/* The persistent options of an easy handle from c: timeouts, TLS, auth. */
CURLcode outbox_http_easy_setup(CURL *e, const http_config_t *c, char *errbuf);

/* The POST of m on e (set up by outbox_http_easy_setup): url and headers
 * from outbox_http_url and outbox_http_headers, the payload as the body,
 * which e reads from m until the request is done. */
CURLcode outbox_http_post_setup(CURL *e, const char *url, struct curl_slist *headers,
                                const outbox_message_t *m);

/* http_publish.c */
int outbox_http_slots_init(http_sink_t *h, outbox_diag_t *d);
void outbox_http_slots_free(http_sink_t *h);
int outbox_http_publish(void *handle, const outbox_message_t *msgs, size_t n,
                        outbox_publish_result_t *results, outbox_diag_t *d);

/* http_inspect.c */
int outbox_http_destination_create(void *handle, const char *destination, outbox_diag_t *d);
int outbox_http_destination_drop(void *handle, const char *destination, outbox_diag_t *d);
int outbox_http_reader_open(void *handle, const char *destination, void **reader, outbox_diag_t *d);
int outbox_http_reader_next(void *reader, int timeout_ms, outbox_received_t *out, outbox_diag_t *d);
void outbox_http_reader_close(void *reader);

#endif
