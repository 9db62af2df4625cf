/* Publishing: one POST per message through the libcurl multi interface.
 *
 * The sink keeps `parallel` easy handles and one multi handle for its
 * life, so connections stay open between calls. A call runs the messages
 * of different keys side by side, up to `parallel` at a time, and those of
 * one key one after another in array order: a key's next message is sent
 * only once the one ahead of it was answered 2xx. After a key's message
 * fails (RETRY or REJECT) its later messages in the call are not sent
 * (RETRY, "held back"): the order promise of OUTBOX_SINK_CAP_ORDERED, kept
 * by the kit's per-key scheduler.
 *
 * A Retry-After on a 429 or 503 (or any RETRY status) stops the sink
 * from starting requests for the rest of the call, and for the delay it
 * asks (at most HTTP_RETRY_AFTER_MAX_S) later calls send nothing either
 * and report RETRY at once: the relay counts a call whose every message is
 * RETRY as an outage, which costs the events no attempts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_int.h"

struct http_slot {
    CURL *easy;
    struct curl_slist *headers;
    size_t msg;               /* the message in flight, SIZE_MAX when idle */
    char excerpt[HTTP_EXCERPT + 1];
    size_t excerpt_len;
    char retry_after[64];
    char location[200];
    char errbuf[CURL_ERROR_SIZE];
    outbox_kit_buf_t url;
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    http_slot_t *s = arg;
    size_t n = size * nmemb, room = HTTP_EXCERPT - s->excerpt_len;
    memcpy(s->excerpt + s->excerpt_len, data, n < room ? n : room);
    s->excerpt_len += n < room ? n : room;
    s->excerpt[s->excerpt_len] = '\0';
    return n;
}

/* Keeps the two answer headers a verdict needs. */
static size_t on_header(char *data, size_t size, size_t nmemb, void *arg)
{
    http_slot_t *s = arg;
    size_t n = size * nmemb;
    struct {
        const char *name;
        char *dst;
        size_t cap;
    } wanted[] = {{"retry-after:", s->retry_after, sizeof s->retry_after},
                  {"location:", s->location, sizeof s->location}};
    for (size_t k = 0; k < 2; k++) {
        size_t ln = strlen(wanted[k].name);
        if (n > ln && strncasecmp(data, wanted[k].name, ln) == 0) {
            size_t v = ln;
            while (v < n && (data[v] == ' ' || data[v] == '\t'))
                v++;
            size_t end = n;
            while (end > v && (data[end - 1] == '\r' || data[end - 1] == '\n' || data[end - 1] == ' '))
                end--;
            size_t len = end - v < wanted[k].cap - 1 ? end - v : wanted[k].cap - 1;
            memcpy(wanted[k].dst, data + v, len);
            wanted[k].dst[len] = '\0';
        }
    }
    return n;
}

void outbox_http_slots_free(http_sink_t *h)
{
    for (int i = 0; h->slots != NULL && i < h->cfg.parallel; i++) {
        http_slot_t *s = &h->slots[i];
        if (s->easy != NULL) {
            if (h->multi != NULL && s->msg != SIZE_MAX)
                curl_multi_remove_handle(h->multi, s->easy);
            curl_easy_cleanup(s->easy);
        }
        curl_slist_free_all(s->headers);
        outbox_kit_buf_free(&s->url);
    }
    outbox_http_host->free(h->slots);
    h->slots = NULL;
    if (h->multi != NULL)
        curl_multi_cleanup(h->multi);
    h->multi = NULL;
}

int outbox_http_slots_init(http_sink_t *h, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_http_host;
    h->multi = curl_multi_init();
    h->slots = host->alloc((size_t)h->cfg.parallel * sizeof *h->slots);
    if (h->multi == NULL || h->slots == NULL)
        return host->error(d, OUTBOX_ENOMEM, "out of memory opening the HTTP sink");
    memset(h->slots, 0, (size_t)h->cfg.parallel * sizeof *h->slots);
    curl_multi_setopt(h->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)h->cfg.parallel);
    curl_multi_setopt(h->multi, CURLMOPT_MAXCONNECTS, (long)h->cfg.parallel);
    for (int i = 0; i < h->cfg.parallel; i++) {
        http_slot_t *s = &h->slots[i];
        s->msg = SIZE_MAX;
        outbox_kit_buf_init(&s->url, host);
        s->easy = curl_easy_init();
        if (s->easy == NULL)
            return host->error(d, OUTBOX_ENOMEM, "out of memory opening the HTTP sink");
        CURLcode rc = outbox_http_easy_setup(s->easy, &h->cfg, s->errbuf);
        if (rc == CURLE_OK)
            rc = curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, on_body);
        if (rc == CURLE_OK)
            rc = curl_easy_setopt(s->easy, CURLOPT_WRITEDATA, s);
        if (rc == CURLE_OK)
            rc = curl_easy_setopt(s->easy, CURLOPT_HEADERFUNCTION, on_header);
        if (rc == CURLE_OK)
            rc = curl_easy_setopt(s->easy, CURLOPT_HEADERDATA, s);
        if (rc == CURLE_OK)
            rc = curl_easy_setopt(s->easy, CURLOPT_PRIVATE, s);
        if (rc != CURLE_OK)
            return host->error(d, rc == CURLE_OUT_OF_MEMORY ? OUTBOX_ENOMEM : OUTBOX_EINVAL,
                               "HTTP sink %s: libcurl refuses an option: %s", h->cfg.shown,
                               curl_easy_strerror(rc));
    }
    return OUTBOX_OK;
}

/* Where the URL of a message ends for a message: without the query, which
 * may hold what the user would rather not see in logs. */
static int url_shown_len(const char *url)
{
    return (int)strcspn(url, "?");
}

/* The verdict of a finished request. Returns the Retry-After it carried
 * (seconds), or -1. */
static long verdict(http_sink_t *h, http_slot_t *s, CURLcode code, const outbox_message_t *m,
                    outbox_publish_result_t *r)
{
    const char *id = m->event_id ? m->event_id : "?";
    const char *url = s->url.data ? s->url.data : "";
    int ul = url_shown_len(url);
    char text[OUTBOX_MESSAGE_MAX];
    if (code != CURLE_OK) {
        const char *why = s->errbuf[0] ? s->errbuf : curl_easy_strerror(code);
        outbox_kit_redact(outbox_http_host, h->redactor, why, text, sizeof text / 2);
        /* Every transport failure may clear up: refused, reset, timeout,
         * TLS. A URL libcurl cannot parse never will. */
        int outcome = code == CURLE_URL_MALFORMAT ? OUTBOX_PUBLISH_REJECT : OUTBOX_PUBLISH_RETRY;
        outbox_kit_result(r, outcome, "event %s: POST %.*s failed: %s", id, ul, url, text);
        return -1;
    }
    long status = 0;
    curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 200 && status < 300) {
        r->status = OUTBOX_PUBLISH_OK;
        r->message[0] = '\0';
        return -1;
    }
    char excerpt[HTTP_EXCERPT + 1];
    outbox_kit_redact(outbox_http_host, h->redactor, s->excerpt, excerpt, sizeof excerpt);
    /* 401 and 403: the sink's credentials or the receiver's permissions,
     * which an operator fixes; then the same event goes through. */
    if (status == 401 || status == 403 || status == 408 || status == 429 || status >= 500) {
        long wait = s->retry_after[0] ? outbox_http_retry_after(s->retry_after,
                                                                 outbox_http_host->now_us() / 1000000)
                                      : -1;
        if (wait >= 0)
            outbox_kit_result(r, OUTBOX_PUBLISH_RETRY,
                              "event %s: HTTP %ld from %.*s, Retry-After %ld s: %s", id, status, ul,
                              url, wait, excerpt);
        else
            outbox_kit_result(r, OUTBOX_PUBLISH_RETRY, "event %s: HTTP %ld from %.*s: %s", id,
                              status, ul, url, excerpt);
        return wait;
    }
    if (status >= 300 && status < 400) {
        char where[sizeof s->location];
        outbox_kit_redact(outbox_http_host, h->redactor, s->location, where, sizeof where);
        outbox_kit_result(r, OUTBOX_PUBLISH_REJECT,
                          "event %s: HTTP %ld from %.*s redirects to %s: the sink does not follow "
                          "redirects; point its URI at the final address",
                          id, status, ul, url, where[0] ? where : "(no Location)");
        return -1;
    }
    outbox_kit_result(r, OUTBOX_PUBLISH_REJECT, "event %s: HTTP %ld from %.*s: %s", id, status, ul,
                      url, excerpt);
    return -1;
}

/* Puts message i on slot s. 0 when it went to the multi handle; else its
 * result is filled in. */
static int start(http_sink_t *h, http_slot_t *s, const outbox_message_t *msgs, size_t i,
                 outbox_publish_result_t *results)
{
    const outbox_message_t *m = &msgs[i];
    const char *id = m->event_id ? m->event_id : "?";
    if (m->payload == NULL) {
        outbox_kit_result(&results[i], OUTBOX_PUBLISH_REJECT, "event %s has no payload", id);
        return -1;
    }
    outbox_kit_buf_reset(&s->url);
    outbox_http_url(&s->url, &h->cfg, m);
    char why[200];
    bool oom = false;
    curl_slist_free_all(s->headers);
    s->headers = s->url.failed ? NULL
                               : outbox_http_headers(&h->cfg, m, outbox_http_host->now_us() / 1000000,
                                                     why, sizeof why, &oom);
    if (s->url.failed || oom) {
        outbox_kit_result(&results[i], OUTBOX_PUBLISH_RETRY, "event %s not sent: out of memory",
                          id);
        return -1;
    }
    if (s->headers == NULL) {
        outbox_kit_result(&results[i], OUTBOX_PUBLISH_REJECT, "event %s cannot be sent: %s", id,
                          why);
        return -1;
    }
    s->excerpt[0] = '\0';
    s->excerpt_len = 0;
    s->retry_after[0] = s->location[0] = s->errbuf[0] = '\0';
    CURLcode rc = outbox_http_post_setup(s->easy, s->url.data, s->headers, m);
    if (rc != CURLE_OK) {
        outbox_kit_result(&results[i],
                          rc == CURLE_URL_MALFORMAT ? OUTBOX_PUBLISH_REJECT : OUTBOX_PUBLISH_RETRY,
                          "event %s not sent: %s", id, curl_easy_strerror(rc));
        return -1;
    }
    CURLMcode mc = curl_multi_add_handle(h->multi, s->easy);
    if (mc != CURLM_OK) {
        outbox_kit_result(&results[i], OUTBOX_PUBLISH_RETRY, "event %s not sent: %s", id,
                          curl_multi_strerror(mc));
        return -1;
    }
    s->msg = i;
    return 0;
}

/* The next message that may go, or SIZE_MAX: the rest of the round, then
 * the next round. A round follows as soon as the last one has all gone
 * out, not come back, so a free slot never waits for a slow request of
 * another key: keys side by side, each key's messages one after another. */
static size_t next_ready(outbox_kit_keys_t *keys, size_t *head)
{
    if (*head == keys->n_round && keys->n_coming > 0) {
        outbox_kit_keys_next(keys);
        *head = 0;
    }
    return *head < keys->n_round ? keys->round[(*head)++] : SIZE_MAX;
}

int outbox_http_publish(void *handle, const outbox_message_t *msgs, size_t n,
                        outbox_publish_result_t *results, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_http_host;
    http_sink_t *h = handle;
    int64_t now = host->monotonic_us();
    if (h->hold_until_us > now) {
        long left = (long)((h->hold_until_us - now + 999999) / 1000000);
        for (size_t i = 0; i < n; i++)
            outbox_kit_result(&results[i], OUTBOX_PUBLISH_RETRY,
                              "not sent: %s asked to wait, %ld s left", h->hold_why, left);
        return OUTBOX_OK;
    }

    outbox_kit_keys_t keys;
    if (outbox_kit_keys_init(&keys, host, msgs, n) != 0)
        return host->error(d, OUTBOX_ENOMEM, "out of memory publishing %zu events", n);
    size_t head = 0; /* the next of keys.round to start */
    int running = 0;
    bool stop = false;
    char stop_why[300] = "";
    for (;;) {
        for (int k = 0; k < h->cfg.parallel && !stop; k++) {
            http_slot_t *s = &h->slots[k];
            if (s->msg != SIZE_MAX)
                continue;
            size_t i = next_ready(&keys, &head);
            if (i == SIZE_MAX)
                break;
            if (start(h, s, msgs, i, results) == 0) {
                running++;
            } else {
                outbox_kit_keys_hold(&keys, i, msgs, results,
                                     results[i].status == OUTBOX_PUBLISH_REJECT
                                         ? "was refused in this call"
                                         : "was not sent");
                k--; /* the slot is still free */
            }
        }
        if (running == 0)
            break;
        int still = 0;
        CURLMcode mc = curl_multi_perform(h->multi, &still);
        if (mc == CURLM_OK && still > 0)
            mc = curl_multi_poll(h->multi, NULL, 0, 1000, NULL);
        if (mc != CURLM_OK) {
            /* The multi handle itself failed: what is in flight is unknown. */
            for (int k = 0; k < h->cfg.parallel; k++) {
                http_slot_t *s = &h->slots[k];
                if (s->msg == SIZE_MAX)
                    continue;
                curl_multi_remove_handle(h->multi, s->easy);
                outbox_kit_result(&results[s->msg], OUTBOX_PUBLISH_RETRY, "event %s: libcurl: %s",
                                  msgs[s->msg].event_id ? msgs[s->msg].event_id : "?",
                                  curl_multi_strerror(mc));
                outbox_kit_keys_hold(&keys, s->msg, msgs, results, "failed in this call");
                s->msg = SIZE_MAX;
            }
            running = 0;
            stop = true;
            snprintf(stop_why, sizeof stop_why, "libcurl failed: %s", curl_multi_strerror(mc));
            break;
        }
        CURLMsg *info;
        int left = 0;
        while ((info = curl_multi_info_read(h->multi, &left)) != NULL) {
            if (info->msg != CURLMSG_DONE)
                continue;
            http_slot_t *s = NULL;
            curl_easy_getinfo(info->easy_handle, CURLINFO_PRIVATE, (char **)&s);
            CURLcode code = info->data.result;
            curl_multi_remove_handle(h->multi, info->easy_handle);
            running--;
            size_t i = s->msg;
            s->msg = SIZE_MAX;
            long wait = verdict(h, s, code, &msgs[i], &results[i]);
            if (wait >= 0) {
                /* The receiver asked for a pause: start nothing more. */
                stop = true;
                h->hold_until_us = host->monotonic_us() + (int64_t)wait * 1000000;
                snprintf(h->hold_why, sizeof h->hold_why, "%.*s (HTTP Retry-After %ld s)",
                         url_shown_len(s->url.data), s->url.data, wait);
                snprintf(stop_why, sizeof stop_why, "%s asked to wait", h->hold_why);
            }
            if (results[i].status == OUTBOX_PUBLISH_OK)
                outbox_kit_keys_ok(&keys, i);
            else
                outbox_kit_keys_hold(&keys, i, msgs, results,
                                     results[i].status == OUTBOX_PUBLISH_REJECT
                                         ? "was refused in this call"
                                         : "failed in this call");
        }
    }
    /* What a Retry-After or a failed multi handle kept from going. */
    for (size_t i; (i = next_ready(&keys, &head)) != SIZE_MAX;) {
        outbox_kit_result(&results[i], OUTBOX_PUBLISH_RETRY, "not sent: %s", stop_why);
        outbox_kit_keys_hold(&keys, i, msgs, results, "was not sent");
    }
    outbox_kit_keys_free(&keys);
    return OUTBOX_OK;
}
