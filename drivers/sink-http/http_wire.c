/* The bottom floor: what a delivery looks like on the wire (URL, headers,
 * signature) and the text of what came back. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>

#include "http_int.h"

void outbox_http_encode(outbox_kit_buf_t *b, const char *s, bool keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned char c = *p;
        if (isalnum(c) || strchr("-._~", c) != NULL || (keep_slash && c == '/')) {
            outbox_kit_buf_putc(b, (char)c);
        } else {
            char esc[3] = {'%', hex[c >> 4], hex[c & 15]};
            outbox_kit_buf_put(b, esc, 3);
        }
    }
}

void outbox_http_url(outbox_kit_buf_t *b, const http_config_t *c, const outbox_message_t *m)
{
    outbox_kit_buf_t path;
    outbox_kit_buf_init(&path, outbox_http_host);
    outbox_kit_destination(&path, c->path_tpl, m);
    outbox_kit_buf_puts(b, c->base);
    if (path.data == NULL || path.data[0] != '/')
        outbox_kit_buf_putc(b, '/');
    outbox_http_encode(b, path.data ? path.data : "", true);
    if (path.failed)
        b->failed = 1;
    outbox_kit_buf_free(&path);
    if (c->query != NULL) {
        outbox_kit_buf_putc(b, '?');
        outbox_kit_buf_puts(b, c->query);
    }
}

/* The HTTP binding: space, '"', '%' and everything outside printable
 * ASCII are percent-encoded (UTF-8 bytes each). */
void outbox_http_ce_encode(outbox_kit_buf_t *b, const char *value)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)value; *p; p++) {
        if (*p < 0x21 || *p > 0x7e || *p == '"' || *p == '%') {
            char esc[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            outbox_kit_buf_put(b, esc, 3);
        } else {
            outbox_kit_buf_putc(b, (char)*p);
        }
    }
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

void outbox_http_ce_decode(outbox_kit_buf_t *b, const char *value, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int hi, lo;
        if (value[i] == '%' && i + 2 < n &&
            (hi = hexval(value[i + 1])) >= 0 && (lo = hexval(value[i + 2])) >= 0) {
            outbox_kit_buf_putc(b, (char)(hi << 4 | lo));
            i += 2;
        } else {
            outbox_kit_buf_putc(b, value[i]);
        }
    }
}

static void put_header(outbox_kit_buf_t *line, struct curl_slist **list, bool *oom)
{
    if (line->failed) {
        *oom = true;
        return;
    }
    struct curl_slist *grown = curl_slist_append(*list, line->data);
    if (grown == NULL)
        *oom = true;
    else
        *list = grown;
}

/* Standard Webhooks: HMAC-SHA256 over "<webhook-id>.<webhook-timestamp>.<body>",
 * base64, as "v1,<signature>". */
static int sign(const http_config_t *c, const char *id, const char *ts, const outbox_message_t *m,
                char *out, size_t size)
{
    int ok = 0;
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
    char digest_name[] = "SHA256";
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0),
        OSSL_PARAM_construct_end(),
    };
    unsigned char md[EVP_MAX_MD_SIZE];
    size_t md_len = 0;
    if (ctx && EVP_MAC_init(ctx, c->key, c->key_len, params) &&
        EVP_MAC_update(ctx, (const unsigned char *)id, strlen(id)) &&
        EVP_MAC_update(ctx, (const unsigned char *)".", 1) &&
        EVP_MAC_update(ctx, (const unsigned char *)ts, strlen(ts)) &&
        EVP_MAC_update(ctx, (const unsigned char *)".", 1) &&
        EVP_MAC_update(ctx, (const unsigned char *)m->payload, m->payload_len) &&
        EVP_MAC_final(ctx, md, &md_len, sizeof md) && size > 3 + 4 * ((md_len + 2) / 3)) {
        memcpy(out, "v1,", 3);
        EVP_EncodeBlock((unsigned char *)out + 3, md, (int)md_len);
        ok = 1;
    }
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
    return ok ? 0 : -1;
}

struct curl_slist *outbox_http_headers(const http_config_t *c, const outbox_message_t *m,
                                       int64_t now_s, char *why, size_t size, bool *oom)
{
    struct curl_slist *list = NULL;
    outbox_kit_buf_t line;
    outbox_kit_buf_init(&line, outbox_http_host);
    *oom = false;
    const char *type = outbox_kit_header(m, "datacontenttype");
    for (size_t k = 0; k < m->n_headers; k++) {
        const outbox_header_t *hd = &m->headers[k];
        if (hd->name == NULL || hd->value == NULL)
            continue;
        if (strpbrk(hd->value, "\r\n") != NULL && strcmp(hd->name, "datacontenttype") != 0) {
            snprintf(why, size, "header %s holds a line break", hd->name);
            goto refuse;
        }
        outbox_kit_buf_reset(&line);
        if (strcmp(hd->name, "datacontenttype") == 0)
            continue; /* Content-Type, below */
        if (strcmp(hd->name, "traceparent") == 0) {
            outbox_kit_buf_printf(&line, "traceparent: %s", hd->value);
        } else {
            outbox_kit_buf_printf(&line, "ce-%s: ", hd->name);
            outbox_http_ce_encode(&line, hd->value);
        }
        put_header(&line, &list, oom);
    }
    if (type != NULL && strpbrk(type, "\r\n") != NULL) {
        snprintf(why, size, "datacontenttype holds a line break");
        goto refuse;
    }
    outbox_kit_buf_reset(&line);
    outbox_kit_buf_printf(&line, "Content-Type: %s", type && type[0] ? type : "application/json");
    put_header(&line, &list, oom);
    /* No "Expect: 100-continue" round trip before larger bodies. */
    outbox_kit_buf_reset(&line);
    outbox_kit_buf_puts(&line, "Expect:");
    put_header(&line, &list, oom);
    for (size_t k = 0; k < c->n_headers; k++) {
        outbox_kit_buf_reset(&line);
        outbox_kit_buf_puts(&line, c->headers[k]);
        put_header(&line, &list, oom);
    }
    if (c->key != NULL) {
        const char *id = m->event_id ? m->event_id : "";
        char ts[32], sig[128];
        snprintf(ts, sizeof ts, "%lld", (long long)now_s);
        if (sign(c, id, ts, m, sig, sizeof sig) != 0) {
            *oom = true;
        } else {
            outbox_kit_buf_reset(&line);
            outbox_kit_buf_printf(&line, "webhook-id: %s", id);
            put_header(&line, &list, oom);
            outbox_kit_buf_reset(&line);
            outbox_kit_buf_printf(&line, "webhook-timestamp: %s", ts);
            put_header(&line, &list, oom);
            outbox_kit_buf_reset(&line);
            outbox_kit_buf_printf(&line, "webhook-signature: %s", sig);
            put_header(&line, &list, oom);
        }
    }
    outbox_kit_buf_free(&line);
    if (*oom) {
        curl_slist_free_all(list);
        return NULL;
    }
    return list;
refuse:
    outbox_kit_buf_free(&line);
    curl_slist_free_all(list);
    return NULL;
}

long outbox_http_retry_after(const char *value, int64_t now_s)
{
    if (value == NULL)
        return -1;
    while (*value == ' ' || *value == '\t')
        value++;
    long s;
    if (*value >= '0' && *value <= '9') {
        char *end = NULL;
        s = strtol(value, &end, 10);
        while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')
            end++;
        if (*end != '\0')
            return -1;
    } else {
        time_t t = curl_getdate(value, NULL);
        if (t == -1)
            return -1;
        s = (long)((int64_t)t - now_s);
    }
    if (s < 0)
        s = 0;
    return s > HTTP_RETRY_AFTER_MAX_S ? HTTP_RETRY_AFTER_MAX_S : s;
}

int outbox_http_signing_key(const char *secret, unsigned char **key, size_t *len)
{
    const outbox_host_t *host = outbox_http_host;
    *key = NULL;
    *len = 0;
    if (strncmp(secret, "whsec_", 6) != 0) {
        *len = strlen(secret);
        *key = (unsigned char *)outbox_kit_strdup(host, secret);
        return *key ? 0 : -2;
    }
    const char *b64 = secret + 6;
    size_t n = strlen(b64);
    if (n == 0 || n % 4 != 0)
        return -1;
    unsigned char *k = host->alloc(n / 4 * 3 + 1);
    if (k == NULL)
        return -2;
    int got = EVP_DecodeBlock(k, (const unsigned char *)b64, (int)n);
    if (got < 0) {
        host->free(k);
        return -1;
    }
    size_t pad = (b64[n - 1] == '=') + (b64[n - 2] == '=');
    *key = k;
    *len = (size_t)got - pad;
    return 0;
}

CURLcode outbox_http_easy_setup(CURL *e, const http_config_t *c, char *errbuf)
{
    CURLcode rc = CURLE_OK;
#define SET(opt, val)                                       \
    do {                                                    \
        if (rc == CURLE_OK)                                 \
            rc = curl_easy_setopt(e, opt, val);             \
    } while (0)
    SET(CURLOPT_NOSIGNAL, 1L);
    SET(CURLOPT_ERRORBUFFER, errbuf);
    SET(CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms);
    SET(CURLOPT_TIMEOUT_MS, c->timeout_ms);
    SET(CURLOPT_FOLLOWLOCATION, 0L);
    SET(CURLOPT_TCP_KEEPALIVE, 1L);
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
    SET(CURLOPT_USERAGENT, "liboutbox-http-sink/0.1");
    if (c->user != NULL) {
        SET(CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        SET(CURLOPT_USERNAME, c->user);
        SET(CURLOPT_PASSWORD, c->password ? c->password : "");
    }
    if (c->token != NULL) {
        SET(CURLOPT_HTTPAUTH, (long)CURLAUTH_BEARER);
        SET(CURLOPT_XOAUTH2_BEARER, c->token);
    }
    if (c->tls_ca != NULL)
        SET(CURLOPT_CAINFO, c->tls_ca);
    if (c->tls_cert != NULL) {
        SET(CURLOPT_SSLCERT, c->tls_cert);
        SET(CURLOPT_SSLKEY, c->tls_key);
    }
    SET(CURLOPT_SSL_VERIFYPEER, c->insecure ? 0L : 1L);
    SET(CURLOPT_SSL_VERIFYHOST, c->insecure ? 0L : 2L);
#undef SET
    return rc;
}

CURLcode outbox_http_post_setup(CURL *e, const char *url, struct curl_slist *headers,
                                const outbox_message_t *m)
{
    CURLcode rc = curl_easy_setopt(e, CURLOPT_URL, url);
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)m->payload_len);
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(e, CURLOPT_POSTFIELDS, m->payload);
    return rc;
}
