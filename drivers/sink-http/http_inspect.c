/* destination_create/drop and the reader. A webhook has no read-back of
 * its own, so these speak a small inspection protocol that the project's
 * test receiver (tools/services/httprecv.py) implements, and any receiver
 * may:
 *
 *   GET    /_received?path=P&from=N&limit=M&wait=MS   the deliveries to P
 *   DELETE /_received?path=P                          forget them
 *
 * A GET answers 200 with records one after another, each
 * "<head_len> <body_len>\n", then the request's head as it came (request
 * line, header lines, an empty line, all CRLF-ended), then its body.
 *
 * The reader reports a request's CloudEvents attributes and, as wire
 * headers, every header line of it under its name as recorded (a ce-
 * header's value percent-decoded, as for its attribute). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_int.h"

/* The path deliveries to destination go to, through the template. */
static void destination_path(const http_sink_t *h, const char *destination, outbox_kit_buf_t *b)
{
    outbox_kit_buf_t raw;
    outbox_kit_buf_init(&raw, outbox_http_host);
    outbox_kit_template(&raw, h->cfg.path_tpl, destination, destination);
    if (raw.data == NULL || raw.data[0] != '/')
        outbox_kit_buf_putc(b, '/');
    /* As the receiver sees it: encoded as publishing encodes it. */
    outbox_http_encode(b, raw.data ? raw.data : "", true);
    if (raw.failed)
        b->failed = 1;
    outbox_kit_buf_free(&raw);
}

static size_t into_buf(char *data, size_t size, size_t nmemb, void *arg)
{
    outbox_kit_buf_t *b = arg;
    outbox_kit_buf_put(b, data, size * nmemb);
    return b->failed ? 0 : size * nmemb;
}

/* One inspection request on e; the answer's body into body. */
static int inspect(const char *shown, CURL *e, const char *method, const char *url,
                   long timeout_ms, outbox_kit_buf_t *body, long *status, char *errbuf,
                   outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_http_host;
    outbox_kit_buf_reset(body);
    errbuf[0] = '\0';
    CURLcode rc = curl_easy_setopt(e, CURLOPT_URL, url);
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, into_buf);
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(e, CURLOPT_WRITEDATA, body);
    if (rc == CURLE_OK)
        rc = curl_easy_perform(e);
    if (body->failed)
        return host->error(d, OUTBOX_ENOMEM, "HTTP sink %s: out of memory reading %s", shown,
                           method);
    if (rc != CURLE_OK)
        return host->error(d, OUTBOX_ETRANSIENT, "HTTP sink %s: %s /_received: %s", shown, method,
                           errbuf[0] ? errbuf : curl_easy_strerror(rc));
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, status);
    if (*status < 200 || *status >= 300)
        return host->error(d, *status >= 500 ? OUTBOX_ETRANSIENT : OUTBOX_EPERMANENT,
                           "HTTP sink %s: %s /_received answered HTTP %ld: the receiver does not "
                           "speak the sink's inspection protocol",
                           shown, method, *status);
    return OUTBOX_OK;
}

/* "base/_received?path=<P>" plus more. */
static void received_url(const http_config_t *c, const char *path, outbox_kit_buf_t *b)
{
    outbox_kit_buf_puts(b, c->base);
    outbox_kit_buf_puts(b, "/_received?path=");
    outbox_http_encode(b, path, false);
}

static int clear_destination(void *handle, const char *destination, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_http_host;
    http_sink_t *h = handle;
    if (destination == NULL)
        return host->error(d, OUTBOX_EINVAL, "HTTP sink: no destination given");
    outbox_kit_buf_t path, url, body;
    outbox_kit_buf_init(&path, host);
    outbox_kit_buf_init(&url, host);
    outbox_kit_buf_init(&body, host);
    destination_path(h, destination, &path);
    received_url(&h->cfg, path.data ? path.data : "/", &url);
    char errbuf[CURL_ERROR_SIZE];
    CURL *e = curl_easy_init();
    int rc;
    long status = 0;
    if (e == NULL || path.failed || url.failed)
        rc = host->error(d, OUTBOX_ENOMEM, "HTTP sink: out of memory");
    else if (outbox_http_easy_setup(e, &h->cfg, errbuf) != CURLE_OK)
        rc = host->error(d, OUTBOX_EINVAL, "HTTP sink %s: libcurl refuses an option",
                         h->cfg.shown);
    else
        rc = inspect(h->cfg.shown, e, "DELETE", url.data, h->cfg.timeout_ms, &body, &status,
                     errbuf, d);
    curl_easy_cleanup(e);
    outbox_kit_buf_free(&path);
    outbox_kit_buf_free(&url);
    outbox_kit_buf_free(&body);
    return rc;
}

int outbox_http_destination_create(void *handle, const char *destination, outbox_diag_t *d)
{
    /* A webhook path needs no creating; a fresh destination starts empty. */
    return clear_destination(handle, destination, d);
}

int outbox_http_destination_drop(void *handle, const char *destination, outbox_diag_t *d)
{
    return clear_destination(handle, destination, d);
}

/* ---------------------------------------------------------------- reader */

#define READER_PAGE 1000

typedef struct http_reader {
    CURL *easy;           /* its own connection */
    char *url;            /* base/_received?path=P */
    char *destination;
    char shown[OUTBOX_MESSAGE_MAX / 2];
    char errbuf[CURL_ERROR_SIZE];
    long timeout_ms;
    size_t seen;          /* records taken so far */
    outbox_kit_buf_t page;    /* the last answer */
    size_t pos;           /* the next record in page */
    outbox_kit_buf_t attr;    /* one header's value decoded, then its attribute's name */
    outbox_kit_received_t received; /* the current record's attributes and headers */
} http_reader_t;

void outbox_http_reader_close(void *reader)
{
    http_reader_t *r = reader;
    if (r == NULL)
        return;
    curl_easy_cleanup(r->easy);
    outbox_http_host->free(r->url);
    outbox_http_host->free(r->destination);
    outbox_kit_buf_free(&r->page);
    outbox_kit_buf_free(&r->attr);
    outbox_kit_received_free(&r->received);
    outbox_http_host->free(r);
}

int outbox_http_reader_open(void *handle, const char *destination, void **reader, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_http_host;
    http_sink_t *h = handle;
    *reader = NULL;
    if (destination == NULL)
        return host->error(d, OUTBOX_EINVAL, "HTTP sink: no destination given");
    http_reader_t *r = host->alloc(sizeof *r);
    if (r == NULL)
        return host->error(d, OUTBOX_ENOMEM, "out of memory opening an HTTP reader");
    memset(r, 0, sizeof *r);
    outbox_kit_buf_init(&r->page, host);
    outbox_kit_buf_init(&r->attr, host);
    outbox_kit_received_init(&r->received, host);
    snprintf(r->shown, sizeof r->shown, "%s", h->cfg.shown);
    r->timeout_ms = h->cfg.timeout_ms;
    outbox_kit_buf_t path, url;
    outbox_kit_buf_init(&path, host);
    outbox_kit_buf_init(&url, host);
    destination_path(h, destination, &path);
    received_url(&h->cfg, path.data ? path.data : "/", &url);
    outbox_kit_buf_free(&path);
    r->url = outbox_kit_buf_steal(&url);
    r->destination = outbox_kit_strdup(host, destination);
    r->easy = curl_easy_init();
    if (r->url == NULL || r->destination == NULL || r->easy == NULL) {
        outbox_http_reader_close(r);
        return host->error(d, OUTBOX_ENOMEM, "out of memory opening an HTTP reader");
    }
    if (outbox_http_easy_setup(r->easy, &h->cfg, r->errbuf) != CURLE_OK) {
        outbox_http_reader_close(r);
        return host->error(d, OUTBOX_EINVAL, "HTTP sink %s: libcurl refuses an option",
                           h->cfg.shown);
    }
    *reader = r;
    return OUTBOX_OK;
}

/* The next page of records after what was seen, waiting up to wait_ms
 * for one. */
static int fetch(http_reader_t *r, int wait_ms, outbox_diag_t *d)
{
    outbox_kit_buf_t url;
    outbox_kit_buf_init(&url, outbox_http_host);
    outbox_kit_buf_printf(&url, "%s&from=%zu&limit=%d&wait=%d", r->url, r->seen, READER_PAGE,
                          wait_ms);
    if (url.failed)
        return outbox_http_host->error(d, OUTBOX_ENOMEM, "HTTP reader: out of memory");
    long status = 0;
    int rc = inspect(r->shown, r->easy, "GET", url.data, r->timeout_ms + wait_ms, &r->page,
                     &status, r->errbuf, d);
    outbox_kit_buf_free(&url);
    r->pos = 0;
    return rc;
}

static int malformed(const http_reader_t *r, outbox_diag_t *d)
{
    return outbox_http_host->error(d, OUTBOX_EPERMANENT,
                                   "HTTP reader %s: the receiver's record %zu is not "
                                   "\"<head_len> <body_len>\\n\" HEAD BODY",
                                   r->shown, r->seen);
}

/* The CloudEvents attribute a request header carries, or NULL. */
static const char *attribute(const char *name, size_t n)
{
    if (n > 3 && strncasecmp(name, "ce-", 3) == 0)
        return name + 3;
    if (n == 11 && strncasecmp(name, "traceparent", 11) == 0)
        return "traceparent";
    if (n == 12 && strncasecmp(name, "content-type", 12) == 0)
        return "datacontenttype";
    return NULL;
}

int outbox_http_reader_next(void *reader, int timeout_ms, outbox_received_t *out, outbox_diag_t *d)
{
    http_reader_t *r = reader;
    if (r->pos >= r->page.len) {
        int rc = fetch(r, timeout_ms > 0 ? timeout_ms : 1, d);
        if (rc != OUTBOX_OK)
            return rc;
        if (r->page.len == 0)
            return OUTBOX_ENOTFOUND;
    }
    const char *p = r->page.data + r->pos, *end = r->page.data + r->page.len;
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    unsigned long long head_len = 0, body_len = 0;
    char line[64];
    if (nl == NULL || (size_t)(nl - p) >= sizeof line)
        return malformed(r, d);
    memcpy(line, p, (size_t)(nl - p));
    line[nl - p] = '\0';
    if (sscanf(line, "%llu %llu", &head_len, &body_len) != 2 ||
        head_len > (unsigned long long)(end - nl - 1) ||
        body_len > (unsigned long long)(end - nl - 1) - head_len)
        return malformed(r, d);
    const char *head = nl + 1, *body = head + head_len;
    r->pos = (size_t)(body + body_len - r->page.data);
    r->seen++;

    /* Header lines after the request line, up to the empty one. */
    outbox_kit_received_reset(&r->received);
    const char *q = memchr(head, '\n', head_len);
    while (q != NULL && q + 1 < body) {
        const char *ls = q + 1;
        const char *le = memchr(ls, '\n', (size_t)(body - ls));
        if (le == NULL)
            break;
        size_t ll = (size_t)(le - ls);
        if (ll > 0 && ls[ll - 1] == '\r')
            ll--;
        q = le;
        if (ll == 0)
            break;
        const char *colon = memchr(ls, ':', ll);
        if (colon == NULL)
            continue;
        size_t nn = (size_t)(colon - ls);
        const char *v = colon + 1;
        while (v < ls + ll && (*v == ' ' || *v == '\t'))
            v++;
        /* r->attr: the value (a ce- header's percent-decoded, as the
         * binding means it), then the attribute's name in lower case. */
        outbox_kit_buf_reset(&r->attr);
        if (nn > 3 && strncasecmp(ls, "ce-", 3) == 0)
            outbox_http_ce_decode(&r->attr, v, (size_t)(ls + ll - v));
        else
            outbox_kit_buf_put(&r->attr, v, (size_t)(ls + ll - v));
        size_t vn = r->attr.len;
        const char *attr = attribute(ls, nn);
        size_t an = attr ? strcspn(attr, ":") : 0;
        for (size_t k = 0; k < an; k++)
            outbox_kit_buf_putc(&r->attr, (char)tolower((unsigned char)attr[k]));
        if (r->attr.failed)
            break;
        /* Past OUTBOX_KIT_RECEIVED_MAX of either kind, the rest of that
         * kind is left out; the other still fills. */
        outbox_kit_received_wire(&r->received, ls, nn, r->attr.data, vn);
        if (attr != NULL)
            outbox_kit_received_add(&r->received, r->attr.data + vn, an, r->attr.data, vn);
        if (r->received.text.failed)
            break;
    }
    if (r->attr.failed || r->received.text.failed)
        return outbox_http_host->error(d, OUTBOX_ENOMEM, "HTTP reader: out of memory");
    outbox_kit_received_fill(&r->received, out);
    const char *key = NULL;
    for (size_t k = 0; k < out->n_headers; k++)
        if (strcmp(out->headers[k].name, "partitionkey") == 0)
            key = out->headers[k].value;
    out->destination = r->destination;
    out->key = key;
    out->dedupe_id = NULL;
    out->payload = body;
    out->payload_len = (size_t)body_len;
    return OUTBOX_OK;
}
