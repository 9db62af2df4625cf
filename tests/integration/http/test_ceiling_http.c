/* The HTTP webhook producer ceiling (drivers/sink-http/ceiling.c) against
 * the project's receiver (OUTBOX_HTTP_URI): what it sends is what the sink
 * sends, request for request (path, body, every header line under its
 * name), and it refuses a bad URI and a receiver that is not there. */
#include <curl/curl.h>

#include "ceilingtest.h"

extern const outbox_sink_ceiling_t outbox_ceiling_http;

static const char *base_uri;

START_TEST(ceiling_sends_what_the_sink_sends)
{
    /* The request's header lines come in the order libcurl writes them,
     * the same for both. */
    tc_expect_sink_equals_ceiling(&outbox_ceiling_http, base_uri, 1, 1);
}
END_TEST

START_TEST(ceiling_refuses_a_bad_uri)
{
    char uri[512];
    snprintf(uri, sizeof uri, "http://outbox:%s@127.0.0.1:%d/?parallel=lots", TH_SECRET,
             th_port_of(base_uri));
    tc_expect_usage(&outbox_ceiling_http, uri);
    snprintf(uri, sizeof uri, "http://outbox:%s@127.0.0.1:%d/?tls_ca=/nowhere", TH_SECRET,
             th_port_of(base_uri));
    tc_expect_usage(&outbox_ceiling_http, uri);
}
END_TEST

START_TEST(ceiling_fails_without_a_receiver)
{
    /* Port 1: nothing listens; the password must not show. */
    tc_expect_refused(&outbox_ceiling_http, th_with_secret("http://outbox:{secret}@127.0.0.1:1/"),
                      "nowhere");
}
END_TEST

static size_t discard(char *data, size_t size, size_t nmemb, void *arg)
{
    (void)data;
    (void)arg;
    return size * nmemb;
}

/* Makes the receiver answer the next delivery to /path with status. */
static void refuse_next(const char *path, int status)
{
    char url[512], body[256];
    snprintf(url, sizeof url, "%s%s_control", base_uri,
             base_uri[strlen(base_uri) - 1] == '/' ? "" : "/");
    snprintf(body, sizeof body, "{\"rule\": {\"path\": \"/%s\", \"status\": %d, \"count\": 1}}",
             path, status);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURL *e = curl_easy_init();
    ck_assert(e != NULL);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(e, CURLOPT_TIMEOUT, 30L);
    CURLcode rc = curl_easy_perform(e);
    long code = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(e);
    curl_global_cleanup();
    ck_assert_msg(rc == CURLE_OK && code == 200, "POST %s: %s, HTTP %ld", url,
                  curl_easy_strerror(rc), code);
}

START_TEST(ceiling_fails_on_a_refusal)
{
    /* One answer that is not a 2xx fails the chunk: no retries. */
    char dest[64];
    snprintf(dest, sizeof dest, "%s", th_name("ceil_refused"));
    refuse_next(dest, 503);
    tc_expect_chunk_refused(&outbox_ceiling_http, base_uri, dest, "HTTP 503");
}
END_TEST

TH_SINK_MAIN("ceiling_http", 120, "OUTBOX_HTTP_URI", "http", base_uri,
             ceiling_sends_what_the_sink_sends, ceiling_refuses_a_bad_uri,
             ceiling_fails_without_a_receiver, ceiling_fails_on_a_refusal)
