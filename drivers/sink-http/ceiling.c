/* The HTTP webhook sink, on top: its producer ceiling (outbox/ceiling.h),
 * compiled with the driver's sources into outbox-bench only.
 *
 * Everything but the loop is the driver's: the sink is opened through the
 * host as the relay opens it (the host splits the URI, http.c reads every
 * option), each easy handle is set up by outbox_http_easy_setup (timeouts,
 * TLS, authentication), and each request's URL, headers (Content-Type,
 * ce-*, traceparent, the URI's extra headers, the signature) and body come
 * from the driver's outbox_http_url, outbox_http_headers and
 * outbox_http_post_setup. What is left out is the sink's bookkeeping: no
 * per-key order, no Retry-After hold, no verdicts. A chunk goes out with
 * at most the URI's parallel requests in flight and returns once every
 * request has been answered; anything but a 2xx fails the chunk. */
#include <stdio.h>
#include <string.h>

#include "http_int.h"
#include "outbox/ceiling.h"

/* The descriptor http.c defines when built with
 * -DOUTBOX_DRIVER_STATIC=http_ceiling. */
const outbox_driver_t *outbox_driver_entry_http_ceiling(void);

typedef struct hc_slot {
    CURL *easy;
    struct curl_slist *headers;
    outbox_kit_buf_t url;
    int busy;
    char errbuf[CURL_ERROR_SIZE];
} hc_slot_t;

typedef struct hceil {
    outbox_sink_t *sink;  /* the driver's handle, for its configuration */
    http_sink_t *h;
    CURLM *multi;
    hc_slot_t *slots;     /* h->cfg.parallel of them */
    int n_slots;
    char failure[300];    /* the chunk's first failure */
} hceil_t;

static const char *hceil_client(void)
{
    static char v[64];
    snprintf(v, sizeof v, "libcurl %s", curl_version_info(CURLVERSION_NOW)->version);
    return v;
}

static size_t discard(char *data, size_t size, size_t nmemb, void *arg)
{
    (void)data;
    (void)arg;
    return size * nmemb;
}

static void hceil_close(void *producer)
{
    hceil_t *c = producer;
    if (c == NULL)
        return;
    for (int i = 0; c->slots != NULL && i < c->n_slots; i++) {
        hc_slot_t *s = &c->slots[i];
        if (s->easy != NULL) {
            if (s->busy)
                curl_multi_remove_handle(c->multi, s->easy);
            curl_easy_cleanup(s->easy);
        }
        curl_slist_free_all(s->headers);
        outbox_kit_buf_free(&s->url);
    }
    outbox_http_host->free(c->slots);
    if (c->multi != NULL)
        curl_multi_cleanup(c->multi);
    outbox_sink_close(c->sink);
    outbox_http_host->free(c);
}

/* The sink through the host, with the driver this ceiling was built with;
 * its handle in *h. */
static int open_sink(const char *uri, outbox_sink_t **sink, http_sink_t **h, char *err,
                     size_t errlen)
{
    void *handle = NULL;
    int rc = outbox_ceiling_sink_open(outbox_driver_entry_http_ceiling(), HTTP_SINK_NAME, uri, sink, &handle, err,
                                      errlen);
    *h = handle;
    return rc;
}

/* The multi handle and one easy handle per request in flight, set up as
 * the sink sets up its own. */
static int make_slots(hceil_t *c, char *err, size_t errlen)
{
    const outbox_host_t *host = outbox_http_host;
    c->n_slots = c->h->cfg.parallel;
    c->multi = curl_multi_init();
    c->slots = host->alloc((size_t)c->n_slots * sizeof *c->slots);
    if (c->multi == NULL || c->slots == NULL) {
        snprintf(err, errlen, "out of memory");
        return OUTBOX_CEILING_FAIL;
    }
    memset(c->slots, 0, (size_t)c->n_slots * sizeof *c->slots);
    curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)c->n_slots);
    curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, (long)c->n_slots);
    for (int i = 0; i < c->n_slots; i++) {
        hc_slot_t *s = &c->slots[i];
        outbox_kit_buf_init(&s->url, host);
        s->easy = curl_easy_init();
        CURLcode rc = s->easy ? outbox_http_easy_setup(s->easy, &c->h->cfg, s->errbuf)
                              : CURLE_OUT_OF_MEMORY;
        if (rc == CURLE_OK)
            rc = curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, discard);
        if (rc == CURLE_OK)
            rc = curl_easy_setopt(s->easy, CURLOPT_PRIVATE, s);
        if (rc != CURLE_OK) {
            snprintf(err, errlen, "http ceiling %s: %s", c->h->cfg.shown, curl_easy_strerror(rc));
            return OUTBOX_CEILING_FAIL;
        }
    }
    return 0;
}

static int hceil_open(const char *sink_uri, void **producer, char *err, size_t errlen)
{
    *producer = NULL;
    hceil_t *c = outbox_http_host ? outbox_http_host->alloc(sizeof *c) : NULL;
    if (c == NULL) {
        snprintf(err, errlen, outbox_http_host ? "out of memory"
                                               : "the HTTP ceiling's driver is not registered");
        return OUTBOX_CEILING_FAIL;
    }
    memset(c, 0, sizeof *c);
    int rc = open_sink(sink_uri, &c->sink, &c->h, err, errlen);
    if (rc == 0)
        rc = make_slots(c, err, errlen);
    if (rc != 0) {
        hceil_close(c);
        return rc;
    }
    *producer = c;
    return 0;
}

/* Puts m on slot s, as the sink builds its request. */
static int start(hceil_t *c, hc_slot_t *s, const outbox_message_t *m, char *err, size_t errlen)
{
    outbox_kit_buf_reset(&s->url);
    outbox_http_url(&s->url, &c->h->cfg, m);
    char why[200] = "";
    bool oom = false;
    curl_slist_free_all(s->headers);
    s->headers = s->url.failed ? NULL
                               : outbox_http_headers(&c->h->cfg, m,
                                                     outbox_http_host->now_us() / 1000000, why,
                                                     sizeof why, &oom);
    if (s->headers == NULL) {
        snprintf(err, errlen, "http ceiling: event %s cannot be sent: %s",
                 m->event_id ? m->event_id : "?", oom || s->url.failed ? "out of memory" : why);
        return OUTBOX_CEILING_FAIL;
    }
    s->errbuf[0] = '\0';
    CURLcode rc = outbox_http_post_setup(s->easy, s->url.data, s->headers, m);
    CURLMcode mc = rc == CURLE_OK ? curl_multi_add_handle(c->multi, s->easy) : CURLM_OK;
    if (rc != CURLE_OK || mc != CURLM_OK) {
        snprintf(err, errlen, "http ceiling: event %s not sent: %s",
                 m->event_id ? m->event_id : "?",
                 rc != CURLE_OK ? curl_easy_strerror(rc) : curl_multi_strerror(mc));
        return OUTBOX_CEILING_FAIL;
    }
    s->busy = 1;
    return 0;
}

/* The answers that came back; each frees its slot. The first that is not
 * a 2xx is kept, secrets and the URL's query left out. */
static void collect(hceil_t *c, int *running)
{
    CURLMsg *info;
    int left;
    while ((info = curl_multi_info_read(c->multi, &left)) != NULL) {
        if (info->msg != CURLMSG_DONE)
            continue;
        hc_slot_t *s = NULL;
        long status = 0;
        curl_easy_getinfo(info->easy_handle, CURLINFO_PRIVATE, (char **)&s);
        curl_easy_getinfo(info->easy_handle, CURLINFO_RESPONSE_CODE, &status);
        CURLcode code = info->data.result;
        if ((code != CURLE_OK || status < 200 || status >= 300) && c->failure[0] == '\0') {
            const char *url = s->url.data ? s->url.data : "";
            int ul = (int)strcspn(url, "?");
            if (code != CURLE_OK) {
                char why[CURL_ERROR_SIZE];
                outbox_kit_redact(outbox_http_host, c->h->redactor,
                                  s->errbuf[0] ? s->errbuf : curl_easy_strerror(code), why,
                                  sizeof why);
                snprintf(c->failure, sizeof c->failure, "POST %.*s failed: %s", ul, url, why);
            } else {
                snprintf(c->failure, sizeof c->failure, "POST %.*s: HTTP %ld", ul, url, status);
            }
        }
        curl_multi_remove_handle(c->multi, info->easy_handle);
        s->busy = 0;
        (*running)--;
    }
}

static int hceil_publish(void *producer, const outbox_message_t *msgs, size_t n, char *err,
                         size_t errlen)
{
    hceil_t *c = producer;
    c->failure[0] = '\0';
    size_t next = 0;
    int running = 0, rc = 0;
    while (rc == 0 && (next < n || running > 0)) {
        for (int i = 0; rc == 0 && i < c->n_slots && next < n; i++) {
            if (c->slots[i].busy)
                continue;
            rc = start(c, &c->slots[i], &msgs[next++], err, errlen);
            running += rc == 0;
        }
        int still = 0;
        CURLMcode mc = curl_multi_perform(c->multi, &still);
        if (mc == CURLM_OK && still > 0)
            mc = curl_multi_poll(c->multi, NULL, 0, 1000, NULL);
        if (mc != CURLM_OK && rc == 0) {
            snprintf(err, errlen, "http ceiling: %s", curl_multi_strerror(mc));
            rc = OUTBOX_CEILING_FAIL;
        }
        collect(c, &running);
    }
    /* A failure to start leaves the requests in flight to finish. */
    while (running > 0) {
        int still = 0;
        if (curl_multi_perform(c->multi, &still) != CURLM_OK)
            break;
        if (still > 0)
            curl_multi_poll(c->multi, NULL, 0, 1000, NULL);
        collect(c, &running);
    }
    if (rc == 0 && c->failure[0] != '\0') {
        snprintf(err, errlen, "http ceiling: %s", c->failure);
        rc = OUTBOX_CEILING_FAIL;
    }
    return rc;
}

static const outbox_driver_t *hceil_driver(void)
{
    return outbox_driver_entry_http_ceiling();
}

const outbox_sink_ceiling_t outbox_ceiling_http = {
    .struct_size = sizeof(outbox_sink_ceiling_t),
    .name = HTTP_SINK_NAME,
    .driver = hceil_driver,
    .client = hceil_client,
    .open = hceil_open,
    .publish = hceil_publish,
    .close = hceil_close,
};
