/* The HTTP webhook sink against the project's receiver
 * (tools/services/httprecv.py), through the public sink API and the real
 * loader. OUTBOX_HTTP_URI names the shared receiver; the outage case
 * starts a private one with tools/services/http.sh (its path is argv[1]),
 * so stopping it disturbs no other test.
 *
 * Every case posts to paths of its own (/it_<pid>_<case>...), so cases and
 * programs can share one receiver. Rules that make the receiver misbehave
 * are set on those paths only. */
#include <check.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "outbox/outbox.h"

static const char *recv_uri; /* "http://127.0.0.1:PORT/" */
static const char *service_script;

static void base_uri(void)
{
    const char *uri = getenv("OUTBOX_HTTP_URI");
    if (uri && *uri) {
        recv_uri = uri;
        return;
    }
    const char *ci = getenv("CI");
    if (ci && strcmp(ci, "true") == 0) {
        fprintf(stderr, "FAIL: OUTBOX_HTTP_URI is not set and CI=true: the HTTP sink tests must "
                        "run in CI. Start a receiver with `eval \"$(tools/services/http.sh start "
                        "DIR)\"`.\n");
        exit(1);
    }
    fprintf(stderr, "\n*** SKIPPED: the HTTP sink tests need the test receiver. ***\n"
                    "***   eval \"$(tools/services/http.sh start /tmp/outbox-http)\"\n"
                    "*** then run the tests again.\n\n");
    exit(77);
}

/* The receiver's URI with the path and query given ("it_x?timeout=1s"). */
static char *uri_with(const char *base, const char *rest)
{
    static char buf[1024];
    snprintf(buf, sizeof buf, "%s%s", base, rest);
    return buf;
}

static char *name_of(const char *tag)
{
    static char name[64];
    snprintf(name, sizeof name, "it_%ld_%s", (long)getpid(), tag);
    return name;
}

static outbox_sink_t *open_sink(const char *uri)
{
    outbox_sink_t *k = NULL;
    outbox_diag_t d = {0};
    int rc = outbox_sink_open(uri, NULL, &k, &d);
    ck_assert_msg(rc == OUTBOX_OK, "open %s: %s", uri, d.message);
    return k;
}

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

/* ------------------------------------------------------------ messages */

typedef struct tmsg {
    char id[40], key[32], payload[256], dest[64];
    outbox_header_t headers[13];
} tmsg_t;

static const char *const header_names[] = {
    "id", "type", "source", "specversion", "time", "datacontenttype", "partitionkey",
    "traceparent", "tenantid", "correlationid", "causationid", "executionid", "hlc",
};

static void make_msg(tmsg_t *t, outbox_message_t *m, const char *dest, const char *key, int n)
{
    memset(t, 0, sizeof *t);
    outbox_uuid_v7(t->id);
    snprintf(t->key, sizeof t->key, "%s", key);
    snprintf(t->dest, sizeof t->dest, "%s", dest);
    snprintf(t->payload, sizeof t->payload, "{\"n\":%d,\"s\":\"caf\xc3\xa9\"}", n);
    static const char *const values[13] = {
        NULL, "order.created", "/outbox/it with space", "1.0", "2026-12-01T15:00:00.000000Z",
        "application/json", NULL, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "0190a0e4-0000-7000-8000-000000000001", "0190a0e4-0000-7000-8000-000000000002",
        "0190a0e4-0000-7000-8000-000000000003", "0190a0e4-0000-7000-8000-000000000004",
        "123456789"};
    for (int i = 0; i < 13; i++) {
        t->headers[i].name = header_names[i];
        t->headers[i].value = values[i];
    }
    t->headers[0].value = t->id;
    t->headers[6].value = t->key;
    *m = (outbox_message_t){.route = "it", .destination = t->dest, .key = t->key,
                            .event_id = t->id, .payload = t->payload,
                            .payload_len = strlen(t->payload), .headers = t->headers,
                            .n_headers = 13};
}

static void publish(outbox_sink_t *k, outbox_message_t *m, size_t n, outbox_publish_result_t *r)
{
    memset(r, 0, n * sizeof *r);
    int rc = outbox_sink_publish(k, m, n, r);
    ck_assert_msg(rc == OUTBOX_OK, "publish: %s", outbox_sink_message(k));
}

static void create(outbox_sink_t *k, const char *dest)
{
    ck_assert_msg(outbox_sink_destination_create(k, dest) == OUTBOX_OK, "create %s: %s", dest,
                  outbox_sink_message(k));
}

typedef struct got {
    char id[40], key[40], payload[256];
    char headers[16][2][128];
    size_t n_headers;
} got_t;

/* Reads what dest holds until 1 s passes without a delivery. */
static int read_all(outbox_sink_t *k, const char *dest, got_t *out, int max)
{
    outbox_sink_reader_t *r = NULL;
    ck_assert_msg(outbox_sink_reader_open(k, dest, &r) == OUTBOX_OK, "reader: %s",
                  outbox_sink_message(k));
    int n = 0, rc;
    outbox_received_t got;
    while ((rc = outbox_sink_reader_next(r, 1000, &got)) == OUTBOX_OK) {
        ck_assert_msg(n < max, "more than %d deliveries to %s", max, dest);
        got_t *g = &out[n++];
        memset(g, 0, sizeof *g);
        snprintf(g->key, sizeof g->key, "%s", got.key ? got.key : "");
        snprintf(g->payload, sizeof g->payload, "%.*s", (int)got.payload_len, got.payload);
        for (size_t i = 0; i < got.n_headers && i < 16; i++) {
            snprintf(g->headers[i][0], 128, "%s", got.headers[i].name);
            snprintf(g->headers[i][1], 128, "%s", got.headers[i].value);
            if (strcmp(got.headers[i].name, "id") == 0)
                snprintf(g->id, sizeof g->id, "%s", got.headers[i].value);
        }
        g->n_headers = got.n_headers < 16 ? got.n_headers : 16;
    }
    ck_assert_msg(rc == OUTBOX_ENOTFOUND, "reader: %s", outbox_sink_reader_message(r));
    outbox_sink_reader_close(r);
    return n;
}

static const char *got_header(const got_t *g, const char *name)
{
    for (size_t i = 0; i < g->n_headers; i++)
        if (strcmp(g->headers[i][0], name) == 0)
            return g->headers[i][1];
    return NULL;
}

/* --------------------------------------------------------------- cases */

static void open_fails(const char *uri, const char *expect)
{
    outbox_sink_t *k = NULL;
    outbox_diag_t d = {0};
    int rc = outbox_sink_open(uri, NULL, &k, &d);
    ck_assert_msg(rc == OUTBOX_EINVAL, "%s: expected EINVAL, got %d (%s)", uri, rc, d.message);
    ck_assert_msg(strstr(d.message, expect) != NULL, "%s: message \"%s\" lacks \"%s\"", uri,
                  d.message, expect);
    ck_assert_msg(strchr(d.message, '\n') == NULL, "a message of more than one line: %s",
                  d.message);
}

START_TEST(uri_errors)
{
    open_fails(uri_with(recv_uri, "x?colour=red"), "unknown parameter colour");
    open_fails(uri_with(recv_uri, "x?timeout=soon"), "timeout=soon is not a duration");
    open_fails(uri_with(recv_uri, "x?connect_timeout=0ms"), "connect_timeout=0ms");
    open_fails(uri_with(recv_uri, "x?parallel=0"), "parallel=0");
    open_fails(uri_with(recv_uri, "x?parallel=65"), "parallel=65");
    open_fails(uri_with(recv_uri, "x?tls_ca=/etc/ssl/ca.pem"), "need https://");
    open_fails("https://127.0.0.1:1/x?tls_cert=/c.pem", "tls_cert and tls_key go together");
    open_fails("https://127.0.0.1:1/x?insecure=maybe", "insecure=maybe is not 0 or 1");
    open_fails(uri_with(recv_uri, "x?header=NoColon"), "header=NoColon is not");
    open_fails(uri_with(recv_uri, "x?header=ce-id:%201"), "sets that header itself");
    open_fails(uri_with(recv_uri, "x?header=Content-Type:%20a/b"), "sets that header itself");
    open_fails(uri_with(recv_uri, "x?header=Bad%20Name:%20v"), "is not");
    open_fails(uri_with(recv_uri, "x?password_env=OUTBOX_IT_UNSET_VAR"),
               "OUTBOX_IT_UNSET_VAR, which is not set");
    open_fails(uri_with(recv_uri, "x?token_env=OUTBOX_IT_UNSET_VAR"), "token_env names");
    open_fails(uri_with(recv_uri, "x?hmac_secret_env=OUTBOX_IT_UNSET_VAR"),
               "hmac_secret_env names");
    setenv("OUTBOX_IT_BAD_WHSEC", "whsec_not*base64", 1);
    open_fails(uri_with(recv_uri, "x?hmac_secret_env=OUTBOX_IT_BAD_WHSEC"), "no base64 key");
    setenv("OUTBOX_IT_TOKEN", "tok-abcdef", 1);
    open_fails("http://u:p@127.0.0.1:1/x?token_env=OUTBOX_IT_TOKEN", "not both");
    open_fails("http://:pw@127.0.0.1:1/x", "a password needs a user name");
    open_fails(uri_with(recv_uri, "x?query=a%20b"), "is not a URL query");
    open_fails("http://h1:1,h2:2/x", "several hosts");
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
    int port = atoi(strrchr(recv_uri, ':') + 1);
    char uris[3][512];
    snprintf(uris[0], 512, "http://outbox:%s@127.0.0.1:%d/%s?hmac_secret_env=OUTBOX_IT_HMAC", pw,
             port, name_of("sec"));
    snprintf(uris[1], 512,
             "http://outbox@127.0.0.1:%d/%s?password_env=OUTBOX_IT_PW&hmac_secret_env=OUTBOX_IT_HMAC",
             port, name_of("sec"));
    snprintf(uris[2], 512, "%s%s?token_env=OUTBOX_IT_TOKEN", recv_uri, name_of("sec"));
    char body[200];
    snprintf(body, sizeof body, "\"status\": 400, \"body\": \"bad token %s, password %s\"", token,
             pw);
    rule(name_of("sec"), body);
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
        k = open_sink(uris[v]);
        tmsg_t t;
        outbox_message_t m;
        outbox_publish_result_t r;
        make_msg(&t, &m, name_of("sec"), "k", v);
        publish(k, &m, 1, &r);
        ck_assert_msg(r.status == OUTBOX_PUBLISH_REJECT, "400: %d %s", r.status, r.message);
        ck_assert_msg(strstr(r.message, "HTTP 400") && strstr(r.message, "bad token"),
                      "the REJECT does not quote the answer: %s", r.message);
        for (int s = 0; s < 3; s++) {
            ck_assert_msg(strstr(r.message, secrets[s]) == NULL, "a result printed a secret: %s",
                          r.message);
            ck_assert_msg(strstr(outbox_sink_message(k), secrets[s]) == NULL,
                          "the sink's message printed a secret: %s", outbox_sink_message(k));
        }
        outbox_sink_close(k);
    }
}
END_TEST

START_TEST(round_trip_binary_mode)
{
    /* Every attribute as its ce- header (traceparent under its own name,
     * datacontenttype as Content-Type), the key as ce-partitionkey, the
     * payload as the body; basic auth from the URI. */
    const char *dest = name_of("rt");
    char uri[512];
    snprintf(uri, sizeof uri, "http://hook:s3cr3t-pass@127.0.0.1:%d/",
             atoi(strrchr(recv_uri, ':') + 1));
    outbox_sink_t *k = open_sink(uri);
    create(k, dest);
    enum { N = 3 };
    tmsg_t t[N];
    outbox_message_t m[N];
    outbox_publish_result_t r[N];
    for (int i = 0; i < N; i++)
        make_msg(&t[i], &m[i], dest, i == 2 ? "other" : "key-1", i);
    publish(k, m, N, r);
    for (int i = 0; i < N; i++)
        ck_assert_msg(r[i].status == OUTBOX_PUBLISH_OK, "%d: %d %s", i, r[i].status, r[i].message);
    static got_t g[8];
    ck_assert_int_eq(read_all(k, dest, g, 8), N);
    for (int i = 0; i < N; i++) {
        int j = 0;
        while (j < N && strcmp(g[j].id, t[i].id) != 0)
            j++;
        ck_assert_msg(j < N, "event %s was not read back", t[i].id);
        ck_assert_str_eq(g[j].payload, t[i].payload);
        ck_assert_str_eq(g[j].key, t[i].key);
        ck_assert_int_eq(g[j].n_headers, 13);
        for (int h = 0; h < 13; h++) {
            const char *v = got_header(&g[j], header_names[h]);
            ck_assert_msg(v != NULL, "header %s missing", header_names[h]);
            ck_assert_msg(strcmp(v, t[i].headers[h].value) == 0, "%s: \"%s\" != \"%s\"",
                          header_names[h], v, t[i].headers[h].value);
        }
    }
    /* On the wire: the binding's spellings, the space percent-encoded, and
     * basic auth as user:password in base64 ("hook:s3cr3t-pass"). */
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
    const char *dest = name_of("bearer");
    setenv("OUTBOX_IT_TOKEN", "tok-abcdef", 1);
    outbox_sink_t *k = open_sink(uri_with(
        recv_uri, "?token_env=OUTBOX_IT_TOKEN&header=X-Team:%20payments&query=tenant%3Dacme"));
    create(k, dest);
    tmsg_t t;
    outbox_message_t m;
    outbox_publish_result_t r;
    make_msg(&t, &m, dest, "k", 1);
    publish(k, &m, 1, &r);
    ck_assert_msg(r.status == OUTBOX_PUBLISH_OK, "%s", r.message);
    char *raw = raw_received(dest);
    ck_assert_msg(strstr(raw, "Authorization: Bearer tok-abcdef") && strstr(raw, "X-Team: payments") &&
                      strstr(raw, "?tenant=acme HTTP/1.1"),
                  "bearer token, extra header or query missing:\n%.800s", raw);
    free(raw);
    outbox_sink_close(k);
}
END_TEST

/* One message to path through uri; its result. */
static outbox_publish_result_t one(const char *uri, const char *dest)
{
    outbox_sink_t *k = open_sink(uri);
    tmsg_t t;
    outbox_message_t m;
    outbox_publish_result_t r;
    make_msg(&t, &m, dest, "k", 1);
    publish(k, &m, 1, &r);
    outbox_sink_close(k);
    return r;
}

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
        {"s400", "\"status\": 400, \"body\": \"missing field x\"", OUTBOX_PUBLISH_REJECT,
         "HTTP 400"},
        {"s404", "\"status\": 404", OUTBOX_PUBLISH_REJECT, "HTTP 404"},
        {"s302", "\"status\": 302", OUTBOX_PUBLISH_REJECT, "does not follow redirects"},
        {"drop", "\"drop\": true", OUTBOX_PUBLISH_RETRY, "failed"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char dest[64];
        snprintf(dest, sizeof dest, "%s", name_of(cases[i].tag));
        rule(dest, cases[i].rule);
        outbox_publish_result_t r = one(uri_with(recv_uri, ""), dest);
        ck_assert_msg(r.status == cases[i].status && strstr(r.message, cases[i].says),
                      "%s: got %d (%s)", cases[i].tag, r.status, r.message);
    }
    outbox_publish_result_t r = one(uri_with(recv_uri, ""), name_of("s400"));
    ck_assert_msg(strstr(r.message, "missing field x"), "no excerpt of the answer: %s", r.message);
    /* Retry-After as an HTTP date, one that has passed: no wait at all. */
    rule(name_of("date"), "\"status\": 503, \"retry_after\": \"Wed, 21 Oct 2015 07:28:00 GMT\"");
    r = one(uri_with(recv_uri, ""), name_of("date"));
    ck_assert_msg(r.status == OUTBOX_PUBLISH_RETRY && strstr(r.message, "Retry-After 0 s"),
                  "503 with a past date: %d %s", r.status, r.message);
}
END_TEST

START_TEST(oversize_413_reject)
{
    /* Over the receiver's 1 MiB limit: 413, REJECT; the other key's
     * message in the same call is delivered. */
    const char *dest = name_of("big");
    outbox_sink_t *k = open_sink(uri_with(recv_uri, ""));
    create(k, dest);
    tmsg_t t[2];
    outbox_message_t m[2];
    outbox_publish_result_t r[2];
    make_msg(&t[0], &m[0], dest, "a", 0);
    make_msg(&t[1], &m[1], dest, "b", 1);
    size_t big = (size_t)2 << 20;
    char *p = malloc(big);
    ck_assert(p != NULL);
    memset(p, 'x', big);
    p[0] = p[big - 1] = '"';
    m[0].payload = p;
    m[0].payload_len = big;
    publish(k, m, 2, r);
    ck_assert_msg(r[0].status == OUTBOX_PUBLISH_REJECT && strstr(r[0].message, "HTTP 413"),
                  "2 MiB: %d %s", r[0].status, r[0].message);
    ck_assert_msg(r[1].status == OUTBOX_PUBLISH_OK, "beside it: %s", r[1].message);
    static got_t g[4];
    ck_assert_int_eq(read_all(k, dest, g, 4), 1);
    free(p);
    outbox_sink_close(k);
}
END_TEST

START_TEST(retry_after_honoured)
{
    /* 429 with Retry-After: RETRY saying how long; nothing more is sent in
     * that call; a call within the delay sends nothing and is RETRY; after
     * it the same handle delivers. */
    const char *dest = name_of("ra");
    outbox_sink_t *k = open_sink(uri_with(recv_uri, "?parallel=1"));
    create(k, dest);
    rule(dest, "\"status\": 429, \"retry_after\": 2, \"count\": 1");
    enum { N = 4 };
    tmsg_t t[N];
    outbox_message_t m[N];
    outbox_publish_result_t r[N];
    for (int i = 0; i < N; i++)
        make_msg(&t[i], &m[i], dest, i == 0 ? "first" : "other", i);
    publish(k, m, N, r);
    ck_assert_msg(r[0].status == OUTBOX_PUBLISH_RETRY && strstr(r[0].message, "HTTP 429") &&
                      strstr(r[0].message, "Retry-After 2 s"),
                  "429: %d %s", r[0].status, r[0].message);
    for (int i = 1; i < N; i++)
        ck_assert_msg(r[i].status == OUTBOX_PUBLISH_RETRY && strstr(r[i].message, "not sent"),
                      "after the 429, message %d: %d %s", i, r[i].status, r[i].message);
    publish(k, m, N, r);
    for (int i = 0; i < N; i++)
        ck_assert_msg(r[i].status == OUTBOX_PUBLISH_RETRY && strstr(r[i].message, "asked to wait"),
                      "within the delay, message %d: %d %s", i, r[i].status, r[i].message);
    static got_t g[8];
    ck_assert_msg(read_all(k, dest, g, 8) == 0, "something was delivered during the delay");
    int ok = 0;
    for (int tries = 0; tries < 60 && !ok; tries++) {
        publish(k, m, N, r);
        ok = r[0].status == OUTBOX_PUBLISH_OK;
        if (!ok)
            usleep(250000);
    }
    for (int i = 0; i < N; i++)
        ck_assert_msg(r[i].status == OUTBOX_PUBLISH_OK, "after the delay, %d: %s", i,
                      r[i].message);
    ck_assert_int_eq(read_all(k, dest, g, 8), N);
    outbox_sink_close(k);
}
END_TEST

START_TEST(slow_receiver_timeout)
{
    const char *dest = name_of("slow");
    rule(dest, "\"sleep_ms\": 3000, \"count\": 1");
    outbox_publish_result_t r = one(uri_with(recv_uri, "?timeout=500ms"), dest);
    ck_assert_msg(r.status == OUTBOX_PUBLISH_RETRY && strstr(r.message, "imed out"),
                  "past the timeout: %d %s", r.status, r.message);
}
END_TEST

START_TEST(closed_port_retry)
{
    outbox_sink_t *k = open_sink("http://127.0.0.1:1/x?connect_timeout=1s");
    tmsg_t t[3];
    outbox_message_t m[3];
    outbox_publish_result_t r[3];
    for (int i = 0; i < 3; i++)
        make_msg(&t[i], &m[i], "x", i < 2 ? "k" : "j", i);
    publish(k, m, 3, r);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(r[i].status == OUTBOX_PUBLISH_RETRY, "closed port: %d %s", r[i].status,
                      r[i].message);
    outbox_sink_close(k);
}
END_TEST

START_TEST(parallel_keys_in_order)
{
    /* 8 keys, 40 messages each, interleaved in one call with 4 requests at
     * a time: every message OK, each key's messages stored in array order. */
    const char *dest = name_of("par");
    outbox_sink_t *k = open_sink(uri_with(recv_uri, "?parallel=4"));
    create(k, dest);
    enum { KEYS = 8, N = 320 };
    static tmsg_t t[N];
    static outbox_message_t m[N];
    static outbox_publish_result_t r[N];
    for (int i = 0; i < N; i++) {
        char key[16];
        snprintf(key, sizeof key, "key-%d", (i * 5 + i / 7) % KEYS);
        make_msg(&t[i], &m[i], dest, key, i);
    }
    publish(k, m, N, r);
    for (int i = 0; i < N; i++)
        ck_assert_msg(r[i].status == OUTBOX_PUBLISH_OK, "%d: %s", i, r[i].message);
    static got_t g[N + 8];
    ck_assert_int_eq(read_all(k, dest, g, N + 8), N);
    int last[KEYS];
    for (int i = 0; i < KEYS; i++)
        last[i] = -1;
    for (int j = 0; j < N; j++) {
        int n = -1;
        ck_assert(sscanf(g[j].payload, "{\"n\":%d", &n) == 1 && n >= 0 && n < N);
        int kk = atoi(t[n].key + 4);
        ck_assert_msg(n > last[kk], "%s: message %d arrived after %d", t[n].key, n, last[kk]);
        last[kk] = n;
    }
    outbox_sink_close(k);
}
END_TEST

START_TEST(failure_stops_key)
{
    /* Key a's messages go to path _a, whose first delivery fails with 500;
     * b's to _b: a's later messages in the call are RETRY and never sent,
     * b's are delivered. */
    char da[64], db[64];
    snprintf(da, sizeof da, "%s", name_of("stop_a"));
    snprintf(db, sizeof db, "%s", name_of("stop_b"));
    outbox_sink_t *k = open_sink(uri_with(recv_uri, ""));
    create(k, da);
    create(k, db);
    rule(da, "\"status\": 500, \"count\": 1");
    enum { N = 6 };
    tmsg_t t[N];
    outbox_message_t m[N];
    outbox_publish_result_t r[N];
    for (int i = 0; i < N; i++)
        make_msg(&t[i], &m[i], i % 2 ? db : da, i % 2 ? "b" : "a", i);
    publish(k, m, N, r);
    ck_assert_msg(r[0].status == OUTBOX_PUBLISH_RETRY && strstr(r[0].message, "HTTP 500"), "%s",
                  r[0].message);
    for (int i = 2; i < N; i += 2)
        ck_assert_msg(r[i].status == OUTBOX_PUBLISH_RETRY && strstr(r[i].message, "held back"),
                      "a's message %d: %d %s", i, r[i].status, r[i].message);
    for (int i = 1; i < N; i += 2)
        ck_assert_msg(r[i].status == OUTBOX_PUBLISH_OK, "b's message %d: %s", i, r[i].message);
    static got_t g[8];
    ck_assert_int_eq(read_all(k, da, g, 8), 0);
    ck_assert_int_eq(read_all(k, db, g, 8), 3);
    outbox_sink_close(k);
}
END_TEST

/* The private receivers' directories, named in main() so that main can
 * stop them whatever a case left behind. */
static char down_dir[128], tls_dir[128];
static const char *private_dir = down_dir;

static void service(const char *what)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s' %s '%s' >/dev/null", service_script, what, private_dir);
    ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
}

START_TEST(receiver_down_and_back)
{
    /* A private receiver: stopped, RETRY; back, OK on the same handle and
     * what it acknowledged before is still there; killed, RETRY; back. */
    private_dir = down_dir;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "OUTBOX_HTTP_PORT=%d '%s' start '%s' >%s.env", 29300 + getpid() % 200,
             service_script, private_dir, private_dir);
    ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
    char envfile[160], uri[256] = "";
    snprintf(envfile, sizeof envfile, "%s.env", private_dir);
    FILE *f = fopen(envfile, "r");
    ck_assert(f != NULL);
    char line[256];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "export OUTBOX_HTTP_URI=", 23) == 0)
            snprintf(uri, sizeof uri, "%.*s", (int)strcspn(line + 23, "\n"), line + 23);
    fclose(f);
    unlink(envfile);
    ck_assert(uri[0]);
    outbox_sink_t *k = open_sink(uri);
    enum { N = 5 };
    tmsg_t t[N];
    outbox_message_t m[N];
    outbox_publish_result_t r[N];
    for (int i = 0; i < N; i++)
        make_msg(&t[i], &m[i], "down", i % 2 ? "k" : "j", i);
    create(k, "down");
    publish(k, m, N, r);
    for (int i = 0; i < N; i++)
        ck_assert_msg(r[i].status == OUTBOX_PUBLISH_OK, "up: %s", r[i].message);
    const char *faults[] = {"stop", "kill"};
    for (int fi = 0; fi < 2; fi++) {
        service(faults[fi]);
        publish(k, m, N, r);
        for (int i = 0; i < N; i++)
            ck_assert_msg(r[i].status == OUTBOX_PUBLISH_RETRY, "%s: %d %s", faults[fi],
                          r[i].status, r[i].message);
        service("start");
        publish(k, m, N, r);
        for (int i = 0; i < N; i++)
            ck_assert_msg(r[i].status == OUTBOX_PUBLISH_OK, "after %s: %s", faults[fi],
                          r[i].message);
    }
    static got_t g[32];
    ck_assert_int_eq(read_all(k, "down", g, 32), 3 * N);
    outbox_sink_close(k);
    service("stop");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", private_dir);
    ck_assert(system(cmd) == 0);
}
END_TEST

START_TEST(tls_verified_by_default)
{
    /* A private HTTPS receiver with a self-signed certificate: not trusted
     * by default (RETRY, naming the certificate), trusted with tls_ca (OK,
     * and the reader reads back over TLS too), and insecure=1 skips the
     * check. */
    private_dir = tls_dir;
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && openssl req -x509 -newkey rsa:2048 -nodes -days 2 "
             "-keyout '%s/key.pem' -out '%s/cert.pem' -subj /CN=127.0.0.1 "
             "-addext subjectAltName=IP:127.0.0.1 2>/dev/null",
             private_dir, private_dir, private_dir);
    ck_assert_msg(system(cmd) == 0, "openssl req failed");
    snprintf(cmd, sizeof cmd,
             "OUTBOX_HTTP_TLS_CERT='%s/cert.pem' OUTBOX_HTTP_TLS_KEY='%s/key.pem' "
             "OUTBOX_HTTP_PORT=%d '%s' start '%s/r' | sed -n 's/^export OUTBOX_HTTP_PORT=//p' "
             ">'%s/port'",
             private_dir, private_dir, 29500 + getpid() % 100, service_script, private_dir,
             private_dir);
    ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
    char path[200];
    snprintf(path, sizeof path, "%s/port", private_dir);
    FILE *f = fopen(path, "r");
    int port = 0;
    ck_assert(f != NULL && fscanf(f, "%d", &port) == 1);
    fclose(f);

    char uri[512];
    snprintf(uri, sizeof uri, "https://127.0.0.1:%d/", port);
    outbox_publish_result_t r = one(uri, "tls");
    ck_assert_msg(r.status == OUTBOX_PUBLISH_RETRY && strstr(r.message, "certificate"),
                  "an untrusted certificate: %d %s", r.status, r.message);
    snprintf(uri, sizeof uri, "https://127.0.0.1:%d/?tls_ca=%s/cert.pem", port, private_dir);
    outbox_sink_t *k = open_sink(uri);
    create(k, "tls");
    tmsg_t t;
    outbox_message_t m;
    make_msg(&t, &m, "tls", "k", 7);
    publish(k, &m, 1, &r);
    ck_assert_msg(r.status == OUTBOX_PUBLISH_OK, "with tls_ca: %s", r.message);
    static got_t g[4];
    ck_assert_int_eq(read_all(k, "tls", g, 4), 1);
    ck_assert_str_eq(g[0].id, t.id);
    outbox_sink_close(k);
    snprintf(uri, sizeof uri, "https://127.0.0.1:%d/?insecure=1", port);
    r = one(uri, "tls");
    ck_assert_msg(r.status == OUTBOX_PUBLISH_OK, "insecure=1: %s", r.message);

    snprintf(cmd, sizeof cmd, "'%s' stop '%s/r' && rm -rf '%s'", service_script, private_dir,
             private_dir);
    ck_assert(system(cmd) == 0);
}
END_TEST

int main(int argc, char **argv)
{
    base_uri();
    service_script = argc > 1 ? argv[1] : NULL;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    Suite *s = suite_create("http_sink");
    TCase *tc = tcase_create("http");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, uri_errors);
    tcase_add_test(tc, secrets_not_shown);
    tcase_add_test(tc, round_trip_binary_mode);
    tcase_add_test(tc, bearer_and_extra_headers);
    tcase_add_test(tc, status_mapping);
    tcase_add_test(tc, oversize_413_reject);
    tcase_add_test(tc, retry_after_honoured);
    tcase_add_test(tc, slow_receiver_timeout);
    tcase_add_test(tc, closed_port_retry);
    tcase_add_test(tc, parallel_keys_in_order);
    tcase_add_test(tc, failure_stops_key);
    if (service_script) {
        tcase_add_test(tc, receiver_down_and_back);
        tcase_add_test(tc, tls_verified_by_default);
    }
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    snprintf(down_dir, sizeof down_dir, "/tmp/outbox-it-http-%ld", (long)getpid());
    snprintf(tls_dir, sizeof tls_dir, "/tmp/outbox-it-https-%ld", (long)getpid());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    if (service_script) {
        /* A case that failed half-way left its receiver running. */
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "'%s' stop '%s' >/dev/null 2>&1; '%s' stop '%s/r' >/dev/null 2>&1; "
                 "rm -rf '%s' '%s' '%s.env'",
                 service_script, down_dir, service_script, tls_dir, down_dir, tls_dir, down_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove the private receivers: %s\n", cmd);
    }
    srunner_free(sr);
    curl_global_cleanup();
    return failed ? 1 : 0;
}
