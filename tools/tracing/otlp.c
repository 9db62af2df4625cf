/* The exporter's life: its options, the queue of span records, the export
 * thread and its POSTs (libcurl), the counters. The tracer's callbacks are
 * in otlp_span.c, the JSON body in otlp_json.c.
 *
 * The thread posts when OTLP_POST_EARLY spans are waiting or the oldest has
 * waited interval_us, OTLP_POST_MAX spans a POST. A POST that gets no 2xx
 * within timeout_us (connection refused, a timeout, a 4xx or 5xx) is one
 * export failure and its spans are dropped: the collector being down must
 * cost spans, never memory without bound or the relay's time. Records go
 * back to the queue as soon as their JSON is written, before the POST, so
 * a slow collector holds at most one body. */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "otlp_int.h"

#define TIMEOUT_DEFAULT_US 2000000
#define INTERVAL_DEFAULT_US 200000

/* ----------------------------------------------------------- queue */

otlp_span_t *otlp_queue_take(otlp_exporter_t *e)
{
    otlp_span_t *rec = NULL;
    pthread_mutex_lock(&e->mu);
    if (e->n_free > 0 && !e->stopping)
        rec = &e->records[e->free_idx[--e->n_free]];
    pthread_mutex_unlock(&e->mu);
    if (rec == NULL)
        atomic_fetch_add(&e->dropped_queue, 1);
    return rec;
}

void otlp_queue_put(otlp_exporter_t *e, otlp_span_t *rec)
{
    size_t idx = (size_t)(rec - e->records);
    pthread_mutex_lock(&e->mu);
    e->ready_idx[(e->ready_head + e->n_ready++) % e->n_records] = idx;
    if (e->n_ready == OTLP_POST_EARLY)
        pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

/* ------------------------------------------------------------ POST */

static size_t keep_body(char *data, size_t size, size_t n, void *arg)
{
    otlp_buf_t *b = arg;
    if (b->len < 4096) /* only the start matters: the partial success */
        otlp_buf_add(b, data, size * n < 4096 ? size * n : 4096);
    return size * n;
}

/* The spans the collector says it rejected, from an OTLP/JSON
 * partialSuccess answer ("rejectedSpans":"N" or N); 0 when none. */
static uint64_t rejected_in(const char *body)
{
    const char *p = body ? strstr(body, "\"rejectedSpans\"") : NULL;
    if (p == NULL)
        return 0;
    p += strlen("\"rejectedSpans\"");
    while (*p == ' ' || *p == ':' || *p == '"')
        p++;
    return strtoull(p, NULL, 10);
}

/* One POST of body (n spans); the counters tell how it went. */
static void post(otlp_exporter_t *e, CURL *c, struct curl_slist *headers, const otlp_buf_t *body, size_t n)
{
    otlp_buf_t answer = {0};
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, e->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body->p);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body->len);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(e->timeout_us / 1000));
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(e->timeout_us / 1000));
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, keep_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &answer);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "liboutbox-otlp");
    /* Only the collector's own scheme: a redirect is not followed. */
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK || status < 200 || status > 299) {
        atomic_fetch_add(&e->export_failures, 1);
        atomic_fetch_add(&e->dropped_export, n);
    } else {
        uint64_t rejected = rejected_in(answer.p);
        rejected = rejected < n ? rejected : n;
        atomic_fetch_add(&e->dropped_rejected, rejected);
        atomic_fetch_add(&e->exported, n - rejected);
    }
    free(answer.p);
}

/* ---------------------------------------------------------- thread */

static void wait_until(otlp_exporter_t *e, int64_t until_us)
{
    struct timespec ts = {.tv_sec = (time_t)(until_us / 1000000), .tv_nsec = (long)(until_us % 1000000) * 1000};
    pthread_cond_timedwait(&e->cv, &e->mu, &ts);
}

/* Takes up to OTLP_POST_MAX ready records (mu held), encodes them into
 * body and gives them back; the number taken. */
static size_t take_and_encode(otlp_exporter_t *e, otlp_buf_t *body)
{
    otlp_span_t *batch[OTLP_POST_MAX];
    size_t idx[OTLP_POST_MAX];
    size_t n = 0;
    while (n < OTLP_POST_MAX && e->n_ready > 0) {
        idx[n] = e->ready_idx[e->ready_head];
        batch[n] = &e->records[idx[n]];
        e->ready_head = (e->ready_head + 1) % e->n_records;
        e->n_ready--;
        n++;
    }
    if (n == 0)
        return 0;
    pthread_mutex_unlock(&e->mu);
    body->len = 0;
    body->failed = false;
    otlp_json_encode(e, batch, n, body);
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < n; i++)
        e->free_idx[e->n_free++] = idx[i];
    return n;
}

static void *export_main(void *arg)
{
    otlp_exporter_t *e = arg;
    CURL *c = curl_easy_init();
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    otlp_buf_t body = {0};
    pthread_mutex_lock(&e->mu);
    for (;;) {
        int64_t due = tool_mono_us() + e->interval_us;
        while (!e->stopping && e->n_ready < OTLP_POST_EARLY && tool_mono_us() < due)
            wait_until(e, due);
        bool last = e->stopping;
        /* At the stop, one more pass over what is queued: every POST is
         * tried once, each within its timeout. */
        size_t n;
        while ((n = take_and_encode(e, &body)) > 0) {
            pthread_mutex_unlock(&e->mu);
            if (c == NULL || headers == NULL || body.failed) {
                atomic_fetch_add(&e->export_failures, 1);
                atomic_fetch_add(&e->dropped_export, n);
            } else {
                post(e, c, headers, &body, n);
            }
            pthread_mutex_lock(&e->mu);
            if (!last && e->n_ready < OTLP_POST_EARLY)
                break;
        }
        if (last)
            break;
    }
    pthread_mutex_unlock(&e->mu);
    free(body.p);
    curl_slist_free_all(headers);
    if (c != NULL)
        curl_easy_cleanup(c);
    return NULL;
}

/* ------------------------------------------------------------ life */

static void free_exporter(otlp_exporter_t *e)
{
    free(e->endpoint);
    free(e->url);
    free(e->shown);
    free(e->service_name);
    free(e->records);
    free(e->free_idx);
    free(e->ready_idx);
    free(e);
}

/* <endpoint>/v1/traces, or the endpoint itself when it already names it. */
static char *traces_url(const char *endpoint)
{
    size_t len = strlen(endpoint);
    while (len > 0 && endpoint[len - 1] == '/')
        len--;
    static const char suffix[] = "/v1/traces";
    size_t slen = sizeof suffix - 1;
    bool has = len >= slen && memcmp(endpoint + len - slen, suffix, slen) == 0;
    char *url = malloc(len + slen + 1);
    if (url != NULL)
        snprintf(url, len + slen + 1, "%.*s%s", (int)len, endpoint, has ? "" : suffix);
    return url;
}

/* Once per process: libcurl's global state (thread-safe since 7.84). */
static void init_curl(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

int otlp_start(const otlp_options_t *o, otlp_exporter_t **out, char *err, size_t size)
{
    *out = NULL;
    if (o->endpoint == NULL || otlp_endpoint_check(o->endpoint, err, size) != 0)
        return o->endpoint == NULL ? (snprintf(err, size, "no endpoint"), -1) : -1;
    if (!(o->sample >= 0 && o->sample <= 1)) {
        snprintf(err, size, "the sample ratio must be from 0 to 1");
        return -1;
    }
    const char *service = o->service_name ? o->service_name : OTLP_SERVICE_NAME_DEFAULT;
    if (otlp_service_name_check(service, err, size) != 0)
        return -1;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_curl);
    otlp_exporter_t *e = calloc(1, sizeof *e);
    if (e == NULL) {
        snprintf(err, size, "out of memory");
        return -1;
    }
    e->sample = o->sample;
    e->timeout_us = o->timeout_us > 0 ? o->timeout_us : TIMEOUT_DEFAULT_US;
    e->interval_us = o->interval_us > 0 ? o->interval_us : INTERVAL_DEFAULT_US;
    e->n_records = o->queue_max > 0 ? o->queue_max : OTLP_QUEUE_DEFAULT;
    e->endpoint = strdup(o->endpoint);
    e->url = traces_url(o->endpoint);
    e->shown = malloc(strlen(o->endpoint) + 16);
    e->service_name = strdup(service);
    /* Untouched records cost address space only: calloc's large blocks
     * are fresh pages. */
    e->records = calloc(e->n_records, sizeof *e->records);
    e->free_idx = calloc(e->n_records, sizeof *e->free_idx);
    e->ready_idx = calloc(e->n_records, sizeof *e->ready_idx);
    if (!e->endpoint || !e->url || !e->shown || !e->service_name || !e->records || !e->free_idx ||
        !e->ready_idx) {
        free_exporter(e);
        snprintf(err, size, "out of memory");
        return -1;
    }
    outbox_uri_mask(o->endpoint, e->shown, strlen(o->endpoint) + 16);
    for (size_t i = 0; i < e->n_records; i++)
        e->free_idx[i] = e->n_records - 1 - i;
    e->n_free = e->n_records;
    atomic_init(&e->exported, 0);
    atomic_init(&e->dropped_queue, 0);
    atomic_init(&e->dropped_export, 0);
    atomic_init(&e->dropped_rejected, 0);
    atomic_init(&e->export_failures, 0);
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cv, &ca);
    pthread_condattr_destroy(&ca);
    e->tracer = (outbox_relay_tracer_t){
        .struct_size = sizeof e->tracer, .begin = otlp_span_begin, .end = otlp_span_end, .ctx = e};
    int rc = pthread_create(&e->thread, NULL, export_main, e);
    if (rc != 0) {
        pthread_cond_destroy(&e->cv);
        pthread_mutex_destroy(&e->mu);
        free_exporter(e);
        snprintf(err, size, "cannot start the span export thread: %s", strerror(rc));
        return -1;
    }
    e->started = true;
    *out = e;
    return 0;
}

const outbox_relay_tracer_t *otlp_tracer(otlp_exporter_t *e)
{
    return &e->tracer;
}

const char *otlp_endpoint_shown(const otlp_exporter_t *e)
{
    return e->shown;
}

void otlp_counters(otlp_exporter_t *e, otlp_counters_t *out)
{
    out->exported = atomic_load(&e->exported);
    out->dropped_queue = atomic_load(&e->dropped_queue);
    out->dropped_export = atomic_load(&e->dropped_export);
    out->dropped_rejected = atomic_load(&e->dropped_rejected);
    out->export_failures = atomic_load(&e->export_failures);
}

void otlp_stop(otlp_exporter_t *e, otlp_counters_t *final)
{
    if (e == NULL)
        return;
    pthread_mutex_lock(&e->mu);
    e->stopping = true;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->started)
        pthread_join(e->thread, NULL);
    if (final != NULL)
        otlp_counters(e, final);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free_exporter(e);
}
