/* Cross-file internals of the core. Hidden from the shared library's ABI
 * (gnu_symbol_visibility: hidden); only OUTBOX_API symbols are exported. */
#ifndef OUTBOX_INT_H
#define OUTBOX_INT_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "outbox/outbox.h"

/* errors.c */
int outbox_diag_set(outbox_diag_t *d, int code, const char *fmt, ...) OUTBOX_PRINTF(3, 4);
int outbox_diag_vset(outbox_diag_t *d, int code, const char *fmt, va_list ap);

/* Reading an application's or a driver's versioned struct: copy member m
 * from src into the full local copy dst only when src's struct_size covers
 * it, so a caller built against older headers gets the defaults already in
 * dst for the members it does not know, and nothing is read past its end. */
#define OUTBOX_STRUCT_READ(T, dst, src, m)                                                  \
    do {                                                                                   \
        if (OUTBOX_STRUCT_HAS(T, src, m))                                                  \
            (dst)->m = (src)->m;                                                           \
    } while (0)
void outbox_diag_clear(outbox_diag_t *d);

/* log.c */
void outbox_log(int level, const char *fmt, ...) OUTBOX_PRINTF(2, 3);
void outbox_vlog(int level, const char *prefix, const char *fmt, va_list ap);

/* host.c: the services table lent to drivers. */
const outbox_host_t *outbox_host_table(void);
int64_t outbox_now_us(void);
/* Monotonic clock in microseconds. */
int64_t outbox_monotonic_us(void);
/* A condition variable on that clock, and a wait on it (mu held) until
 * the monotonic time until_us at most, or a signal. */
void outbox_cond_init_monotonic(pthread_cond_t *cv);
void outbox_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until_us);
/* Sleep up to us microseconds; returns early when *stop becomes non-zero. */
void outbox_sleep_us(int64_t us, const atomic_int *stop);
/* A timeout in microseconds as the whole milliseconds a driver entry
 * takes: rounded up, negative as 0, at most INT_MAX. */
int outbox_us_to_ms(int64_t us);

/* uri.c: a URI split into an outbox_uri_t that owns its storage. */
typedef struct outbox_uri_owned {
    outbox_uri_t uri;
    char *storage;                 /* every string of uri points in here */
    outbox_uri_param_t *params;
} outbox_uri_owned_t;

/* Accepts scheme:rest, scheme://[user[:pass]@]host[:port][/path][?k=v&..],
 * scheme:///abs/path[?..]. Refuses anything else with a one-line reason. */
int outbox_uri_parse(const char *text, outbox_uri_owned_t *out, outbox_diag_t *d);
void outbox_uri_free(outbox_uri_owned_t *u);

/* uuid.c */
int outbox_uuid_v7_at(int64_t unix_ms, char buf[OUTBOX_UUID_STRLEN + 1]);

/* random.c: a per-thread generator seeded from the OS. */
uint64_t outbox_random_u64(void);

/* backoff.c: exponential with full jitter: uniform in [0, min(cap, base * 2^(attempt-1))].
 * attempt starts at 1. base 0 gives 0. */
int64_t outbox_backoff_us(int64_t base_us, int64_t cap_us, int attempt);
/* The ceiling the jitter is drawn under (exposed for tests). */
int64_t outbox_backoff_ceiling_us(int64_t base_us, int64_t cap_us, int attempt);

/* time.c: RFC 3339 UTC with microseconds, e.g. 2026-11-30T06:35:13.123456Z. */
void outbox_format_rfc3339(int64_t us, char buf[40]);

/* loader.c */
/* Load by name or path and require the given kind (0 = any). */
int outbox_loader_load(const char *name_or_path, uint32_t kind, const outbox_driver_t **out,
                       outbox_diag_t *d);
/* Pick the driver for a URI scheme and kind. */
int outbox_loader_for_scheme(const char *scheme, uint32_t kind, const outbox_driver_t **out,
                             outbox_diag_t *d);
/* What drv was promised of a URI it is handed: a list of hosts in the
 * authority reaches only drivers of ABI 1.2 and later; an older one was
 * promised a single host and gets the refusal it had then. */
int outbox_loader_uri_ok(const outbox_driver_t *drv, const outbox_uri_t *uri, outbox_diag_t *d);

/* store.c: for the relay. */
const char *outbox_store_relation(const outbox_store_t *s);
/* A second handle on the same store, opened as s was (URI, relation,
 * driver, flags): for a thread of its own, as the lease renewer's. */
int outbox_store_twin(const outbox_store_t *s, outbox_store_t **out, outbox_diag_t *d);
/* 1 when the driver has the renew entry. */
int outbox_store_can_renew(const outbox_store_t *s);
/* What inbox.c calls the driver through: the handle's parts, borrowed. */
typedef struct outbox_store_parts {
    const outbox_store_vtable_t *vt;
    void *h;
    outbox_diag_t *diag;
    uint32_t caps;
    int in_tx;
    const char *driver;
    const char *inbox_relation;
} outbox_store_parts_t;
void outbox_store_parts(outbox_store_t *s, outbox_store_parts_t *out);

/* renew.c: the relay's lease renewer thread, on a twin of store. */
typedef struct outbox_renewer outbox_renewer_t;
/* A renewer that can hold `slots` batches at once. */
int outbox_renewer_start(const outbox_store_t *store, const char *route, int64_t every_us,
                         size_t slots, outbox_renewer_t **out, outbox_diag_t *d);
/* Renew ids[0..n) (borrowed until release) in slot from fence on, every
 * every_us counted from claimed_us (monotonic: when their claim was asked
 * for). */
void outbox_renewer_hold(outbox_renewer_t *rn, size_t slot, const outbox_fence_t *fence,
                         const char *const *ids, size_t n, int64_t claimed_us);
/* When the lease of the batch in slot last began (monotonic): its claim
 * was asked for, or its last renewal that moved rows. */
int64_t outbox_renewer_leased_at(outbox_renewer_t *rn, size_t slot);
/* Stop renewing them; *fence = their newest fence (unchanged if none). */
void outbox_renewer_release(outbox_renewer_t *rn, size_t slot, outbox_fence_t *fence);
/* Renewals that moved at least one row, since start. */
uint64_t outbox_renewer_count(outbox_renewer_t *rn);
/* Join the thread, close the twin, free; NULL is a no-op. */
void outbox_renewer_stop(outbox_renewer_t *rn);

/* cloudevents.c: the CloudEvents attributes of one row, in a buffer the
 * caller owns; the headers point into it, the row and source (already
 * expanded for the row's route). */
typedef struct outbox_ce_headers {
    outbox_header_t headers[16];
    size_t n;
    char time[40];
    char hlc[24];
} outbox_ce_headers_t;

void outbox_ce_build(const outbox_row_t *row, const char *source, const char *key,
                     outbox_ce_headers_t *out);
/* Point the traceparent header at traceparent (borrowed), adding it when
 * the row had none. */
void outbox_ce_set_traceparent(outbox_ce_headers_t *h, const char *traceparent);
/* 1 when t is W3C trace context of version 00 with a non-zero trace id and
 * parent id (what a tracer may hand the relay to propagate). */
int outbox_traceparent_valid(const char *t);

/* Replace every "{route}" in template; malloc'd, NULL on ENOMEM. */
char *outbox_template_expand(const char *tmpl, const char *route);

/* Whether t is text fit for a route, type, key or node key: 1..max bytes
 * of valid UTF-8 without control characters (C0, DEL, C1). When not,
 * fills why with one line naming field and the problem (never the bytes),
 * and returns 0. */
int outbox_text_check(const char *field, const char *t, size_t max, char *why, size_t size);

#endif
