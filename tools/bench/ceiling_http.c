/* outbox-bench: the HTTP webhook producer ceiling. A bare libcurl multi
 * loop POSTs the messages the relay would post (same body bytes, the
 * CloudEvents binary-mode headers ce-<name>, Content-Type from
 * datacontenttype, no Expect) to the URL the sink would use, --batch at a
 * time: the chunk goes out with at most `parallel` requests in flight (the
 * URI's parallel=, default 8, as the sink), then one wait for the chunk's
 * last answer before the next. A bare sender keeps no key order, so it is
 * the ceiling of a sink that does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "bench.h"

static size_t discard(char *data, size_t size, size_t nmemb, void *arg)
{
    (void)data, (void)arg;
    return size * nmemb;
}

typedef struct hslot {
    CURL *easy;
    struct curl_slist *headers;
    int busy;
} hslot_t;

static struct curl_slist *headers_of(const outbox_message_t *m)
{
    struct curl_slist *list = curl_slist_append(NULL, "Expect:");
    char line[600];
    int typed = 0;
    for (size_t k = 0; list && k < m->n_headers; k++) {
        const char *a = m->headers[k].name;
        if (strcmp(a, "datacontenttype") == 0) {
            snprintf(line, sizeof line, "Content-Type: %s", m->headers[k].value);
            typed = 1;
        } else {
            snprintf(line, sizeof line, strcmp(a, "traceparent") == 0 ? "%s: %s" : "ce-%s: %s", a,
                     m->headers[k].value);
        }
        list = curl_slist_append(list, line);
    }
    if (list && !typed)
        list = curl_slist_append(list, "Content-Type: application/json");
    return list;
}

/* A run of the bare sender: the multi handle, one easy handle per request
 * in flight, and the answers so far. */
typedef struct hrun {
    CURLM *multi;
    hslot_t slots[64];
    int parallel; /* requests in flight at most: the URI's parallel=, default 8 */
    long ok, failed;
    long status; /* the last answer's HTTP status */
    char first_error[256];
} hrun_t;

/* The URI's parallel=, as the sink reads it. */
static int parallel_of(const bench_sink_uri_t *u, int *parallel, char *err, size_t errlen)
{
    *parallel = 8;
    for (long i = 0; i < u->n_params; i++)
        if (strcmp(u->key[i], "parallel") == 0)
            *parallel = atoi(u->value[i]);
    if (*parallel < 1 || *parallel > 64) {
        snprintf(err, errlen, "http producer ceiling: parallel=%d is not 1 to 64", *parallel);
        return BENCH_EXIT_FAIL;
    }
    return 0;
}

/* The multi handle and an easy handle per slot, each POSTing to url. */
static int hrun_open(hrun_t *h, const char *url)
{
    h->multi = curl_multi_init();
    if (!h->multi)
        return BENCH_EXIT_FAIL;
    for (int k = 0; k < h->parallel; k++) {
        CURL *e = h->slots[k].easy = curl_easy_init();
        if (e == NULL)
            return BENCH_EXIT_FAIL;
        curl_easy_setopt(e, CURLOPT_URL, url);
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
        curl_easy_setopt(e, CURLOPT_PRIVATE, &h->slots[k]);
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 10000L);
    }
    return 0;
}

static void hrun_close(hrun_t *h)
{
    for (int k = 0; k < h->parallel; k++) {
        if (h->slots[k].easy) {
            if (h->slots[k].busy)
                curl_multi_remove_handle(h->multi, h->slots[k].easy);
            curl_easy_cleanup(h->slots[k].easy);
        }
        curl_slist_free_all(h->slots[k].headers);
    }
    curl_multi_cleanup(h->multi);
}

/* Puts messages *next.. (before end) on every idle slot. */
static void start_requests(hrun_t *h, const bench_msgs_t *ms, long *next, long end, long *running)
{
    for (int k = 0; k < h->parallel && *next < end; k++) {
        hslot_t *s = &h->slots[k];
        if (s->busy)
            continue;
        const outbox_message_t *m = &ms->m[(*next)++];
        curl_slist_free_all(s->headers);
        s->headers = headers_of(m);
        curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, s->headers);
        curl_easy_setopt(s->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)m->payload_len);
        curl_easy_setopt(s->easy, CURLOPT_POSTFIELDS, m->payload);
        curl_multi_add_handle(h->multi, s->easy);
        s->busy = 1;
        (*running)++;
    }
}

/* The answers that came back: a 2xx is a message delivered; each frees
 * its slot. */
static void collect_answers(hrun_t *h, long *running)
{
    CURLMsg *info;
    int left;
    while ((info = curl_multi_info_read(h->multi, &left)) != NULL) {
        if (info->msg != CURLMSG_DONE)
            continue;
        hslot_t *s = NULL;
        curl_easy_getinfo(info->easy_handle, CURLINFO_PRIVATE, (char **)&s);
        curl_easy_getinfo(info->easy_handle, CURLINFO_RESPONSE_CODE, &h->status);
        if (info->data.result == CURLE_OK && h->status >= 200 && h->status < 300) {
            h->ok++;
        } else if (h->failed++ == 0) {
            snprintf(h->first_error, sizeof h->first_error, "%s (HTTP %ld)",
                     curl_easy_strerror(info->data.result), h->status);
        }
        curl_multi_remove_handle(h->multi, info->easy_handle);
        s->busy = 0;
        (*running)--;
    }
}

/* Messages first..first+chunk, at most h->parallel in flight, until the
 * last has its answer. */
static int send_chunk(hrun_t *h, const bench_msgs_t *ms, long first, long chunk, char *err,
                      size_t errlen)
{
    long next = first, running = 0;
    while (next < first + chunk || running > 0) {
        start_requests(h, ms, &next, first + chunk, &running);
        int still = 0;
        CURLMcode mc = curl_multi_perform(h->multi, &still);
        if (mc == CURLM_OK && still > 0)
            mc = curl_multi_poll(h->multi, NULL, 0, 1000, NULL);
        if (mc != CURLM_OK) {
            snprintf(err, errlen, "http producer ceiling: %s", curl_multi_strerror(mc));
            return BENCH_EXIT_FAIL;
        }
        collect_answers(h, &running);
    }
    return 0;
}

static int http_drain(const bench_sink_uri_t *u, const char *target, const bench_msgs_t *ms,
                      const bench_opts_t *o, bench_drain_t *out, char *err, size_t errlen)
{
    hrun_t h = {0};
    if (parallel_of(u, &h.parallel, err, errlen) != 0)
        return BENCH_EXIT_FAIL;
    char url[1024];
    snprintf(url, sizeof url, "%s://%s%s%s%s%.0d/%s", u->scheme, strchr(u->host, ':') ? "[" : "",
             u->host, strchr(u->host, ':') ? "]" : "", u->port ? ":" : "", u->port, target);
    int rc = hrun_open(&h, url);
    if (rc != 0)
        snprintf(err, errlen, "http producer ceiling: out of memory");
    double cpu0 = bench_cpu_s();
    int64_t t0 = bench_mono_us();
    for (long i = 0; rc == 0 && i < ms->n; i += o->batch)
        rc = send_chunk(&h, ms, i, ms->n - i < o->batch ? ms->n - i : o->batch, err, errlen);
    out->seconds = (double)(bench_mono_us() - t0) / 1e6;
    out->cpu_s = bench_cpu_s() - cpu0;
    out->published = h.ok;
    if (rc == 0 && h.failed > 0) {
        snprintf(err, errlen, "http producer ceiling: %ld of %ld answered 2xx, the first failure: %s",
                 h.ok, ms->n, h.first_error);
        rc = BENCH_EXIT_FAIL;
    }
    hrun_close(&h);
    return rc;
}

const bench_producer_t bench_http_producer = {
    .scheme = "http",
    .client = "libcurl " LIBCURL_VERSION,
    .drain = http_drain,
};
