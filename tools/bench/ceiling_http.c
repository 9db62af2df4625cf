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

static struct curl_slist *headers_of(const bench_msg_t *m)
{
    struct curl_slist *list = curl_slist_append(NULL, "Expect:");
    char line[600];
    int typed = 0;
    for (size_t k = 0; list && k < m->n_ce; k++) {
        const char *a = m->ce[k].name;
        if (strcmp(a, "datacontenttype") == 0) {
            snprintf(line, sizeof line, "Content-Type: %s", m->ce[k].value);
            typed = 1;
        } else {
            snprintf(line, sizeof line, strcmp(a, "traceparent") == 0 ? "%s: %s" : "ce-%s: %s", a,
                     m->ce[k].value);
        }
        list = curl_slist_append(list, line);
    }
    if (list && !typed)
        list = curl_slist_append(list, "Content-Type: application/json");
    return list;
}

static int http_drain(const bench_sink_uri_t *u, const char *target, const bench_msgs_t *ms,
                      const bench_opts_t *o, bench_drain_t *out, char *err, size_t errlen)
{
    int parallel = 8;
    for (long i = 0; i < u->n_params; i++)
        if (strcmp(u->key[i], "parallel") == 0)
            parallel = atoi(u->value[i]);
    if (parallel < 1 || parallel > 64) {
        snprintf(err, errlen, "http producer ceiling: parallel=%d is not 1 to 64", parallel);
        return BENCH_EXIT_FAIL;
    }
    char url[1024];
    snprintf(url, sizeof url, "%s://%s%s%s%s%.0d/%s", u->scheme, strchr(u->host, ':') ? "[" : "",
             u->host, strchr(u->host, ':') ? "]" : "", u->port ? ":" : "", u->port, target);
    CURLM *multi = curl_multi_init();
    hslot_t slots[64];
    memset(slots, 0, sizeof slots);
    int rc = multi ? 0 : BENCH_EXIT_FAIL;
    for (int k = 0; rc == 0 && k < parallel; k++) {
        slots[k].easy = curl_easy_init();
        if (slots[k].easy == NULL) {
            rc = BENCH_EXIT_FAIL;
            break;
        }
        curl_easy_setopt(slots[k].easy, CURLOPT_URL, url);
        curl_easy_setopt(slots[k].easy, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(slots[k].easy, CURLOPT_WRITEFUNCTION, discard);
        curl_easy_setopt(slots[k].easy, CURLOPT_PRIVATE, &slots[k]);
        curl_easy_setopt(slots[k].easy, CURLOPT_TIMEOUT_MS, 10000L);
    }
    if (rc != 0)
        snprintf(err, errlen, "http producer ceiling: out of memory");
    long ok = 0, failed = 0, status = 0;
    char first_error[256] = "";
    double cpu0 = bench_cpu_s();
    int64_t t0 = bench_mono_us();
    for (long i = 0; rc == 0 && i < ms->n;) {
        long chunk = ms->n - i < o->batch ? ms->n - i : o->batch, next = i, running = 0;
        while (rc == 0 && (next < i + chunk || running > 0)) {
            for (int k = 0; k < parallel && next < i + chunk; k++) {
                if (slots[k].busy)
                    continue;
                const bench_msg_t *m = &ms->m[next++];
                curl_slist_free_all(slots[k].headers);
                slots[k].headers = headers_of(m);
                curl_easy_setopt(slots[k].easy, CURLOPT_HTTPHEADER, slots[k].headers);
                curl_easy_setopt(slots[k].easy, CURLOPT_POSTFIELDSIZE_LARGE,
                                 (curl_off_t)m->payload_len);
                curl_easy_setopt(slots[k].easy, CURLOPT_POSTFIELDS, m->payload);
                curl_multi_add_handle(multi, slots[k].easy);
                slots[k].busy = 1;
                running++;
            }
            int still = 0;
            CURLMcode mc = curl_multi_perform(multi, &still);
            if (mc == CURLM_OK && still > 0)
                mc = curl_multi_poll(multi, NULL, 0, 1000, NULL);
            if (mc != CURLM_OK) {
                snprintf(err, errlen, "http producer ceiling: %s", curl_multi_strerror(mc));
                rc = BENCH_EXIT_FAIL;
                break;
            }
            CURLMsg *info;
            int left;
            while ((info = curl_multi_info_read(multi, &left)) != NULL) {
                if (info->msg != CURLMSG_DONE)
                    continue;
                hslot_t *s = NULL;
                curl_easy_getinfo(info->easy_handle, CURLINFO_PRIVATE, (char **)&s);
                curl_easy_getinfo(info->easy_handle, CURLINFO_RESPONSE_CODE, &status);
                if (info->data.result == CURLE_OK && status >= 200 && status < 300) {
                    ok++;
                } else if (failed++ == 0) {
                    snprintf(first_error, sizeof first_error, "%s (HTTP %ld)",
                             curl_easy_strerror(info->data.result), status);
                }
                curl_multi_remove_handle(multi, info->easy_handle);
                s->busy = 0;
                running--;
            }
        }
        i += chunk;
    }
    out->seconds = (double)(bench_mono_us() - t0) / 1e6;
    out->cpu_s = bench_cpu_s() - cpu0;
    out->published = ok;
    if (rc == 0 && failed > 0) {
        snprintf(err, errlen, "http producer ceiling: %ld of %ld answered 2xx, the first failure: %s",
                 ok, ms->n, first_error);
        rc = BENCH_EXIT_FAIL;
    }
    for (int k = 0; k < parallel; k++) {
        if (slots[k].easy) {
            if (slots[k].busy)
                curl_multi_remove_handle(multi, slots[k].easy);
            curl_easy_cleanup(slots[k].easy);
        }
        curl_slist_free_all(slots[k].headers);
    }
    curl_multi_cleanup(multi);
    return rc;
}

const bench_producer_t bench_http_producer = {
    .scheme = "http",
    .client = "libcurl " LIBCURL_VERSION,
    .drain = http_drain,
};
