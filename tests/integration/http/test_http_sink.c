/* The HTTP webhook sink against the project's receiver
 * (tools/services/httprecv.py), through the public sink API and the real
 * loader: what is particular to HTTP. What every sink must do (round trip,
 * key order with parallel requests, oversize and unreachable receivers,
 * outages, a password in the URI) is the sink battery's (battery_http).
 *
 * OUTBOX_HTTP_URI names the shared receiver; the TLS case starts a private
 * HTTPS one with tools/services/http.sh (its path is argv[1]). Every case
 * posts to paths of its own (/it_<pid>_<tag>...), so cases and programs can
 * share one receiver. Rules that make the receiver misbehave are set on
 * those paths only. */
#include <curl/curl.h>

#include "sinktest.h"

static const char *recv_uri; /* "http://127.0.0.1:PORT/" */

/* ------------------------------------------------------- the receiver */

static size_t into_text(char *data, size_t size, size_t nmemb, void *arg)
{
    char **text = arg;
    size_t have = *text ? strlen(*text) : 0, n = size * nmemb;
    char *p = realloc(*text, have + n + 1);
    ck_assert(p != NULL);
    memcpy(p + have, data, n);
    p[have + n] = '\0';
    /* Bodies hold no NUL here (JSON), so the text stays one string. */
    *text = p;
    return n;
}

/* A request to the receiver at base; the answer's body (free it) and status. */
static char *request(const char *base, const char *method, const char *path, const char *body,
                     long *status)
{
    /* Reference-counted: the sink's own libcurl use is unaffected. */
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURL *e = curl_easy_init();
    ck_assert(e != NULL);
    char url[1024];
    snprintf(url, sizeof url, "%s%s", base, path);
    char *text = NULL;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    if (body)
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, into_text);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &text);
    curl_easy_setopt(e, CURLOPT_TIMEOUT, 30L);
    CURLcode rc = curl_easy_perform(e);
    ck_assert_msg(rc == CURLE_OK, "%s %s: %s", method, url, curl_easy_strerror(rc));
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, status);
    curl_easy_cleanup(e);
    curl_global_cleanup();
    return text ? text : strdup("");
}

/* A misbehaviour rule for one path (JSON object body without braces). */
static void rule(const char *path, const char *what)
{
    char body[512];
    snprintf(body, sizeof body, "{\"rule\": {\"path\": \"/%s\", %s}}", path, what);
    long status = 0;
    free(request(recv_uri, "POST", "_control", body, &status));
    ck_assert_int_eq(status, 200);
}

/* What the receiver stored for a path, as its raw records. */
static char *raw_received(const char *path)
{
    char q[256];
    snprintf(q, sizeof q, "_received?path=/%s", path);
    long status = 0;
    char *text = request(recv_uri, "GET", q, NULL, &status);
    ck_assert_int_eq(status, 200);
    return text;
}

static size_t count_of(const char *text, const char *needle)
{
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* --------------------------------------------------------------- cases */

START_TEST(uri_errors)
{
    static const th_refusal_t bad[] = {
        {"x?colour=red", "unknown parameter colour"},
        {"x?timeout=soon", "timeout=soon is not a duration"},
        {"x?timeout=2h", "timeout=2h is not a duration from 1ms to 1h"},
        {"x?timeout=30", "timeout=30 is not a duration"},
        {"x?connect_timeout=0ms", "connect_timeout=0ms"},
        {"x?parallel=0", "parallel=0"},
        {"x?parallel=65", "parallel=65"},
        {"x?tls_ca=/etc/ssl/ca.pem", "need https://"},
        {"https://127.0.0.1:1/x?tls_cert=/c.pem", "tls_cert and tls_key go together"},
        {"https://127.0.0.1:1/x?insecure=maybe", "insecure=maybe is not a boolean"},
        {"x?header=NoColon", "header=NoColon is not"},
        {"x?header=ce-id:%201", "sets that header itself"},
        {"x?header=Content-Type:%20a/b", "sets that header itself"},
        {"x?header=Bad%20Name:%20v", "is not"},
        {"x?password_env=OUTBOX_IT_NO_SUCH_VAR", "OUTBOX_IT_NO_SUCH_VAR, which is not set"},
        {"x?token_env=OUTBOX_IT_NO_SUCH_VAR", "token_env names"},
        {"x?hmac_secret_env=OUTBOX_IT_NO_SUCH_VAR", "hmac_secret_env names"},
        {"x?hmac_secret_env=OUTBOX_IT_BAD_WHSEC", "no base64 key"},
        {"http://u:p@127.0.0.1:1/x?token_env=OUTBOX_IT_TOKEN", "not both"},
        {"http://:pw@127.0.0.1:1/x", "a password needs a user name"},
        {"x?query=a%20b", "is not a URL query"},
        {"http://h1:1,h2:2/x", "several hosts"},
    };
    setenv("OUTBOX_IT_BAD_WHSEC", "whsec_not*base64", 1);
    setenv("OUTBOX_IT_TOKEN", "tok-abcdef", 1);
    th_expect_refusals(recv_uri, bad, sizeof bad / sizeof *bad);
    /* Every driver's grammar: an hour is a duration, yes a boolean. */
    outbox_sink_close(th_open_sink(th_uri_with(recv_uri, "x?timeout=1h&connect_timeout=1500ms")));
    outbox_sink_close(th_open_sink("https://127.0.0.1:1/x?insecure=yes"));
}
END_TEST

START_TEST(secrets_not_shown)
{
    /* A password, a token and a signing secret, from the URI and the
     * environment: in no message, whatever goes wrong. The receiver's own
     * refusal quotes the password and the token back, as a careless server
     * may. */
    const char *pw = "Http5ecretPw", *token = "Tok3nSecretValue", *hmac = "Hm4cSecretValue";
    setenv("OUTBOX_IT_PW", pw, 1);
    setenv("OUTBOX_IT_TOKEN", token, 1);
    setenv("OUTBOX_IT_HMAC", hmac, 1);
    int port = th_port_of(recv_uri);
    char uris[3][512];
    snprintf(uris[0], 512, "http://outbox:%s@127.0.0.1:%d/%s?hmac_secret_env=OUTBOX_IT_HMAC", pw,
             port, th_name("sec"));
    snprintf(uris[1], 512,
             "http://outbox@127.0.0.1:%d/%s?password_env=OUTBOX_IT_PW&hmac_secret_env=OUTBOX_IT_HMAC",
             port, th_name("sec"));
    snprintf(uris[2], 512, "%s%s?token_env=OUTBOX_IT_TOKEN", recv_uri, th_name("sec"));
    char body[200];
    snprintf(body, sizeof body, "\"status\": 400, \"body\": \"bad token %s, password %s\"", token,
             pw);
    rule(th_name("sec"), body);
    for (int v = 0; v < 3; v++) {
        /* The secrets this sink was given: only those it can know to hide. */
        const char *secrets[3] = {v < 2 ? pw : token, v < 2 ? hmac : token, v < 2 ? pw : token};
        /* Open fails on a later option: the message names the URI. */
        char bad_uri[2048];
        snprintf(bad_uri, sizeof bad_uri, "%s&colour=red", uris[v]);
        outbox_sink_t *k = NULL;
        outbox_diag_t d = {0};
        ck_assert_int_eq(outbox_sink_open(bad_uri, NULL, &k, &d), OUTBOX_EINVAL);
        for (int s = 0; s < 3; s++)
            ck_assert_msg(strstr(d.message, secrets[s]) == NULL, "open printed a secret: %s",
                          d.message);
        k = th_open_sink(uris[v]);
        th_batch_t *b = th_batch(1, th_name("sec"), "k");
        th_batch_publish(k, b);
        const outbox_publish_result_t *r = &b->r[0];
        ck_assert_msg(r->status == OUTBOX_PUBLISH_REJECT, "400: %d %s", r->status, r->message);
        ck_assert_msg(strstr(r->message, "HTTP 400") && strstr(r->message, "bad token"),
                      "the REJECT does not quote the answer: %s", r->message);
        for (int s = 0; s < 3; s++) {
            ck_assert_msg(strstr(r->message, secrets[s]) == NULL, "a result printed a secret: %s",
                          r->message);
            ck_assert_msg(strstr(outbox_sink_message(k), secrets[s]) == NULL,
                          "the sink's message printed a secret: %s", outbox_sink_message(k));
        }
        outbox_sink_close(k);
    }
}
END_TEST

START_TEST(wire_binding)
{
    /* On the wire, HTTP's binary mode: every attribute as its ce- header
     * (traceparent under its own name, datacontenttype as Content-Type, a
     * space percent-encoded), the key as ce-partitionkey, and basic auth
     * from the URI as user:password in base64 ("hook:s3cr3t-pass"). */
    const char *dest = th_name("rt");
    char uri[512];
    snprintf(uri, sizeof uri, "http://hook:s3cr3t-pass@127.0.0.1:%d/", th_port_of(recv_uri));
    outbox_sink_t *k = th_open_sink(uri);
    th_create(k, dest);
    enum { N = 3 };
    th_batch_t *b = th_batch(N, dest, "key-1");
    th_make_msg(&b->t[2], &b->m[2], dest, "other", 2);
    th_batch_publish(k, b);
    th_expect_all(b->r, N, OUTBOX_PUBLISH_OK, "publishing");
    char *raw = raw_received(dest);
    ck_assert_msg(count_of(raw, "ce-id: ") == N && count_of(raw, "ce-partitionkey: key-1") == 2 &&
                      count_of(raw, "traceparent: 00-0af7") == N &&
                      count_of(raw, "Content-Type: application/json") == N &&
                      count_of(raw, "ce-source: /outbox/it%20with%20space") == N &&
                      count_of(raw, "Authorization: Basic aG9vazpzM2NyM3QtcGFzcw==") == N,
                  "the stored requests lack the expected headers:\n%.1500s", raw);
    ck_assert_msg(strstr(raw, "ce-traceparent") == NULL && strstr(raw, "ce-datacontenttype") == NULL,
                  "traceparent or datacontenttype went out as ce- headers");
    free(raw);
    outbox_sink_close(k);
}
END_TEST

START_TEST(bearer_and_extra_headers)
{
    const char *dest = th_name("bearer");
    setenv("OUTBOX_IT_TOKEN", "tok-abcdef", 1);
    outbox_sink_t *k = th_open_sink(th_uri_with(
        recv_uri, "?token_env=OUTBOX_IT_TOKEN&header=X-Team:%20payments&query=tenant%3Dacme"));
    th_create(k, dest);
    th_batch_t *b = th_batch(1, dest, "k");
    th_batch_publish(k, b);
    ck_assert_msg(b->r[0].status == OUTBOX_PUBLISH_OK, "%s", b->r[0].message);
    char *raw = raw_received(dest);
    ck_assert_msg(strstr(raw, "Authorization: Bearer tok-abcdef") && strstr(raw, "X-Team: payments") &&
                      strstr(raw, "?tenant=acme HTTP/1.1"),
                  "bearer token, extra header or query missing:\n%.800s", raw);
    free(raw);
    outbox_sink_close(k);
}
END_TEST

START_TEST(status_mapping)
{
    struct {
        const char *tag, *rule;
        int status;
        const char *says;
    } cases[] = {
        {"s500", "\"status\": 500, \"body\": \"boom\"", OUTBOX_PUBLISH_RETRY, "HTTP 500"},
        {"s503", "\"status\": 503", OUTBOX_PUBLISH_RETRY, "HTTP 503"},
        {"s408", "\"status\": 408", OUTBOX_PUBLISH_RETRY, "HTTP 408"},
        /* Credentials or permissions: an operator's fix, not the event's. */
        {"s401", "\"status\": 401", OUTBOX_PUBLISH_RETRY, "HTTP 401"},
        {"s403", "\"status\": 403, \"body\": \"forbidden\"", OUTBOX_PUBLISH_RETRY, "HTTP 403"},
        {"s400", "\"status\": 400, \"body\": \"missing field x\"", OUTBOX_PUBLISH_REJECT,
         "HTTP 400"},
        {"s404", "\"status\": 404", OUTBOX_PUBLISH_REJECT, "HTTP 404"},
        /* The receiver's answer to a body over its limit: the battery's
         * oversized message goes through this. */
        {"s413", "\"status\": 413", OUTBOX_PUBLISH_REJECT, "HTTP 413"},
        {"s302", "\"status\": 302", OUTBOX_PUBLISH_REJECT, "does not follow redirects"},
        {"drop", "\"drop\": true", OUTBOX_PUBLISH_RETRY, "failed"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char dest[64];
        snprintf(dest, sizeof dest, "%s", th_name(cases[i].tag));
        rule(dest, cases[i].rule);
        outbox_publish_result_t r = th_publish_one(th_uri_with(recv_uri, ""), dest);
        ck_assert_msg(r.status == cases[i].status && strstr(r.message, cases[i].says),
                      "%s: got %d (%s)", cases[i].tag, r.status, r.message);
    }
    outbox_publish_result_t r = th_publish_one(th_uri_with(recv_uri, ""), th_name("s400"));
    ck_assert_msg(strstr(r.message, "missing field x"), "no excerpt of the answer: %s", r.message);
    /* Retry-After as an HTTP date, one that has passed: no wait at all. */
    rule(th_name("date"), "\"status\": 503, \"retry_after\": \"Wed, 21 Oct 2015 07:28:00 GMT\"");
    r = th_publish_one(th_uri_with(recv_uri, ""), th_name("date"));
    ck_assert_msg(r.status == OUTBOX_PUBLISH_RETRY && strstr(r.message, "Retry-After 0 s"),
                  "503 with a past date: %d %s", r.status, r.message);
}
END_TEST

START_TEST(retry_after_honoured)
{
    /* 429 with Retry-After: RETRY saying how long; nothing more is sent in
     * that call; a call within the delay sends nothing and is RETRY; after
     * it the same handle delivers. */
    char dest[64];
    outbox_sink_t *k = th_open_dest(th_uri_with(recv_uri, "?parallel=1"), "ra", dest);
    rule(dest, "\"status\": 429, \"retry_after\": 2, \"count\": 1");
    enum { N = 4 };
    th_batch_t *b = th_batch(N, dest, "other");
    th_make_msg(&b->t[0], &b->m[0], dest, "first", 0);
    const outbox_publish_result_t *r = b->r;
    th_batch_publish(k, b);
    ck_assert_msg(r[0].status == OUTBOX_PUBLISH_RETRY && strstr(r[0].message, "HTTP 429") &&
                      strstr(r[0].message, "Retry-After 2 s"),
                  "429: %d %s", r[0].status, r[0].message);
    for (int i = 1; i < N; i++)
        ck_assert_msg(r[i].status == OUTBOX_PUBLISH_RETRY && strstr(r[i].message, "not sent"),
                      "after the 429, message %d: %d %s", i, r[i].status, r[i].message);
    th_batch_publish(k, b);
    for (int i = 0; i < N; i++)
        ck_assert_msg(r[i].status == OUTBOX_PUBLISH_RETRY && strstr(r[i].message, "asked to wait"),
                      "within the delay, message %d: %d %s", i, r[i].status, r[i].message);
    static char ids[8][40];
    ck_assert_msg(th_read_ids(k, dest, ids, 8, 1000) == 0,
                  "something was delivered during the delay");
    int ok = 0;
    for (int tries = 0; tries < 60 && !ok; tries++) {
        th_batch_publish(k, b);
        ok = r[0].status == OUTBOX_PUBLISH_OK;
        if (!ok)
            usleep(250000);
    }
    for (int i = 0; i < N; i++)
        ck_assert_msg(r[i].status == OUTBOX_PUBLISH_OK, "after the delay, %d: %s", i,
                      r[i].message);
    ck_assert_int_eq(th_read_ids(k, dest, ids, 8, 1000), N);
    outbox_sink_close(k);
}
END_TEST

START_TEST(slow_receiver_timeout)
{
    const char *dest = th_name("slow");
    rule(dest, "\"sleep_ms\": 3000, \"count\": 1");
    outbox_publish_result_t r = th_publish_one(th_uri_with(recv_uri, "?timeout=500ms"), dest);
    ck_assert_msg(r.status == OUTBOX_PUBLISH_RETRY && strstr(r.message, "imed out"),
                  "past the timeout: %d %s", r.status, r.message);
}
END_TEST

START_TEST(failure_stops_key)
{
    /* Key a's messages go to path _a, whose first delivery fails with 500;
     * b's to _b: a's later messages in the call are RETRY and never sent,
     * b's are delivered. */
    char da[64], db[64];
    snprintf(da, sizeof da, "%s", th_name("stop_a"));
    snprintf(db, sizeof db, "%s", th_name("stop_b"));
    outbox_sink_t *k = th_open_sink(th_uri_with(recv_uri, ""));
    th_create(k, da);
    th_create(k, db);
    rule(da, "\"status\": 500, \"count\": 1");
    th_batch_t *b = th_batch_ab(6, da, db);
    th_batch_publish(k, b);
    th_expect_key_stopped(b, 0, OUTBOX_PUBLISH_RETRY);
    ck_assert_msg(strstr(b->r[0].message, "HTTP 500"), "%s", b->r[0].message);
    th_expect_dest_holds_ok(k, b, da, 1000);
    th_expect_dest_holds_ok(k, b, db, 1000);
    outbox_sink_close(k);
}
END_TEST

START_TEST(tls_verified_by_default)
{
    /* A private HTTPS receiver with a self-signed certificate: not trusted
     * by default (RETRY, naming the certificate), trusted with tls_ca (OK,
     * and the reader reads back over TLS too), and insecure=1 skips the
     * check. */
    char certs[256], dir[256], cmd[1024];
    snprintf(certs, sizeof certs, "%s", th_private_dir("tls-cert"));
    snprintf(dir, sizeof dir, "%s", th_private_dir("tls"));
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && openssl req -x509 -newkey rsa:2048 -nodes -days 2 "
             "-keyout '%s/key.pem' -out '%s/cert.pem' -subj /CN=127.0.0.1 "
             "-addext subjectAltName=IP:127.0.0.1 2>/dev/null",
             certs, certs, certs);
    ck_assert_msg(system(cmd) == 0, "openssl req failed");
    char env[768], port[32];
    snprintf(env, sizeof env,
             "OUTBOX_HTTP_TLS_CERT='%s/cert.pem' OUTBOX_HTTP_TLS_KEY='%s/key.pem' "
             "OUTBOX_HTTP_PORT=%d",
             certs, certs, th_private_port());
    th_service_start(env, dir, "OUTBOX_HTTP_PORT", port, sizeof port);

    char uri[512];
    snprintf(uri, sizeof uri, "https://127.0.0.1:%s/", port);
    outbox_publish_result_t r = th_publish_one(uri, "tls");
    ck_assert_msg(r.status == OUTBOX_PUBLISH_RETRY && strstr(r.message, "certificate"),
                  "an untrusted certificate: %d %s", r.status, r.message);
    snprintf(uri, sizeof uri, "https://127.0.0.1:%s/?tls_ca=%s/cert.pem", port, certs);
    outbox_sink_t *k = th_open_sink(uri);
    th_create(k, "tls");
    th_batch_t *b = th_batch(1, "tls", "k");
    th_batch_publish(k, b);
    ck_assert_msg(b->r[0].status == OUTBOX_PUBLISH_OK, "with tls_ca: %s", b->r[0].message);
    static char ids[4][40];
    ck_assert_int_eq(th_read_ids(k, "tls", ids, 4, 1000), 1);
    ck_assert_str_eq(ids[0], b->t[0].id);
    outbox_sink_close(k);
    snprintf(uri, sizeof uri, "https://127.0.0.1:%s/?insecure=1", port);
    r = th_publish_one(uri, "tls");
    ck_assert_msg(r.status == OUTBOX_PUBLISH_OK, "insecure=1: %s", r.message);
}
END_TEST

TH_SINK_MAIN("http_sink", 120, "OUTBOX_HTTP_URI", "http", recv_uri,
             uri_errors, secrets_not_shown, wire_binding, bearer_and_extra_headers, status_mapping,
             retry_after_honoured, slow_receiver_timeout, failure_stops_key,
             th_script() ? tls_verified_by_default : NULL)
