/* What the sink integration tests (tests/integration/SINK/test_SINK_sink.c)
 * have in common, so that each holds only what is particular to its
 * driver: names of their own, a message with every CloudEvents attribute,
 * the public sink API with a failed check on an unexpected answer, the
 * expected refusals of a URI, the private servers of tools/services, and
 * the run. What every sink must do is the sink battery's
 * (tools/conformance/cases_sink.c), not theirs.
 *
 * Strings returned in static buffers stay valid until the next call of the
 * same function. */
#ifndef TH_SINKTEST_H
#define TH_SINKTEST_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "outbox/outbox.h"

/* ---------------------------------------------------------------- names */

/* The pid of the program's main process, which names its private servers'
 * directories in the forked cases too: th_run() records it before any
 * case runs. */
static inline long th_main_pid(void)
{
    static long pid;
    if (pid == 0)
        pid = (long)getpid();
    return pid;
}

/* "it_<pid>_<tag>": a destination of this case's own, so that cases and
 * programs can share one server (static buffer). */
static inline const char *th_name(const char *tag)
{
    static char name[64];
    snprintf(name, sizeof name, "it_%ld_%s", (long)getpid(), tag);
    return name;
}

/* base with rest appended; a query in rest ("?a=1") joins the one base may
 * already have (static buffer). */
static inline const char *th_uri_with(const char *base, const char *rest)
{
    static char uri[1024];
    int join = rest[0] == '?' && strchr(base, '?') != NULL;
    int n = snprintf(uri, sizeof uri, "%s%s%s", base, join ? "&" : "", join ? rest + 1 : rest);
    ck_assert_msg(n > 0 && (size_t)n < sizeof uri, "a URI of %d bytes: %s...", n, uri);
    return uri;
}

/* The port of a URI's authority ("scheme://host:PORT/..."). */
static inline int th_port_of(const char *uri)
{
    const char *host = strstr(uri, "://");
    host = host ? host + 3 : uri;
    const char *colon = memchr(host, ':', strcspn(host, "/?"));
    ck_assert_msg(colon != NULL, "no port in %s", uri);
    return atoi(colon + 1);
}

/* ---------------------------------------------------------------- open */

static inline outbox_sink_t *th_open_sink(const char *uri)
{
    outbox_sink_t *k = NULL;
    outbox_diag_t d = {0};
    int rc = outbox_sink_open(uri, NULL, &k, &d);
    ck_assert_msg(rc == OUTBOX_OK, "open %s: %d %s", uri, rc, d.message);
    return k;
}

/* Opening uri fails with code and one line that holds want and, when
 * secret is not NULL, not secret. The line (static buffer). */
static inline const char *th_open_error(const char *uri, int code, const char *want,
                                        const char *secret)
{
    static outbox_diag_t d;
    memset(&d, 0, sizeof d);
    outbox_sink_t *k = NULL;
    int rc = outbox_sink_open(uri, NULL, &k, &d);
    ck_assert_msg(rc == code, "open %s: got %d (%s), expected %d", uri, rc, d.message, code);
    ck_assert_msg(strstr(d.message, want) != NULL, "open %s: \"%s\" lacks \"%s\"", uri, d.message,
                  want);
    ck_assert_msg(strchr(d.message, '\n') == NULL, "open %s: more than one line: %s", uri,
                  d.message);
    if (secret != NULL)
        ck_assert_msg(strstr(d.message, secret) == NULL, "open: the secret shows: %s", d.message);
    return d.message;
}

/* The secret of the URIs that hold one: "{secret}" in a URI given to
 * th_with_secret or th_expect_refusals stands for it, and TH_SECRET_VAR
 * holds it (th_expect_refusals sets it). */
#define TH_SECRET "Sup3rSecretPw"
#define TH_SECRET_VAR "OUTBOX_IT_HIDDEN"

/* uri with each "{secret}" replaced by TH_SECRET (static buffer). */
static inline const char *th_with_secret(const char *uri)
{
    static char out[1024];
    size_t n = 0;
    for (const char *p = uri; *p != '\0' && n + sizeof TH_SECRET < sizeof out;) {
        if (strncmp(p, "{secret}", 8) == 0) {
            memcpy(out + n, TH_SECRET, sizeof TH_SECRET - 1);
            n += sizeof TH_SECRET - 1;
            p += 8;
        } else {
            out[n++] = *p++;
        }
    }
    out[n] = '\0';
    return out;
}

/* A URI the sink must refuse with OUTBOX_EINVAL: uri after the test's base
 * URI, or a whole one when it starts with a scheme; what the message must
 * say. */
typedef struct th_refusal {
    const char *uri, *want;
} th_refusal_t;

/* An environment variable no test sets, which th_expect_refusals unsets:
 * a refusal may name it (spelled out, as the rows of a table are data). */
#define TH_UNSET_VAR "OUTBOX_IT_NO_SUCH_VAR"

/* Each of the n refusals, with TH_SECRET in the URI's "{secret}" and in
 * TH_SECRET_VAR: the message says what it must, and never the secret. */
static inline void th_expect_refusals(const char *base, const th_refusal_t *bad, size_t n)
{
    unsetenv(TH_UNSET_VAR);
    setenv(TH_SECRET_VAR, TH_SECRET, 1);
    for (size_t i = 0; i < n; i++) {
        const char *rest = th_with_secret(bad[i].uri);
        const char *uri = rest[strcspn(rest, ":/?")] == ':' ? rest : th_uri_with(base, rest);
        th_open_error(uri, OUTBOX_EINVAL, bad[i].want, TH_SECRET);
    }
}

/* ------------------------------------------------------------- messages */

#define TH_NH 13

/* A message to publish and what it points to. */
typedef struct th_msg {
    char id[40], key[32], payload[256], dest[64];
    outbox_header_t headers[TH_NH];
} th_msg_t;

/* The name of CloudEvents attribute i of a th_msg_t, in its order. */
static inline const char *th_header_name(int i)
{
    static const char *const names[TH_NH] = {
        "id", "type", "source", "specversion", "time", "datacontenttype", "partitionkey",
        "traceparent", "tenantid", "correlationid", "causationid", "executionid", "hlc",
    };
    return names[i];
}

/* Event n to dest (also its route) with key: a fresh UUIDv7, a payload with
 * n in it and a character beyond ASCII, and all 13 attributes, the source
 * with spaces (which a protocol may have to encode). */
static inline void th_make_msg(th_msg_t *t, outbox_message_t *m, const char *dest,
                               const char *key, int n)
{
    memset(t, 0, sizeof *t);
    outbox_uuid_v7(t->id);
    snprintf(t->key, sizeof t->key, "%s", key);
    snprintf(t->dest, sizeof t->dest, "%s", dest);
    snprintf(t->payload, sizeof t->payload, "{\"n\":%d,\"s\":\"caf\xc3\xa9\"}", n);
    const char *values[TH_NH] = {
        t->id, "order.created", "/outbox/it with space", "1.0", "2026-12-01T15:00:00.000000Z",
        "application/json", t->key, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "0190a0e4-0000-7000-8000-000000000001", "0190a0e4-0000-7000-8000-000000000002",
        "0190a0e4-0000-7000-8000-000000000003", "0190a0e4-0000-7000-8000-000000000004",
        "123456789",
    };
    for (int i = 0; i < TH_NH; i++)
        t->headers[i] = (outbox_header_t){th_header_name(i), values[i]};
    *m = (outbox_message_t){.route = t->dest, .destination = t->dest, .key = t->key,
                            .event_id = t->id, .payload = t->payload,
                            .payload_len = strlen(t->payload), .headers = t->headers,
                            .n_headers = TH_NH};
}

/* --------------------------------------------------------- the sink API */

/* Publishes n messages; the call itself must succeed. */
static inline void th_publish(outbox_sink_t *k, outbox_message_t *m, size_t n,
                              outbox_publish_result_t *r)
{
    memset(r, 0, n * sizeof *r);
    int rc = outbox_sink_publish(k, m, n, r);
    ck_assert_msg(rc == OUTBOX_OK, "publish: %d %s", rc, outbox_sink_message(k));
}

#define TH_BATCH_MAX 1024

/* Messages to publish in one call, and their results. */
typedef struct th_batch {
    size_t n;
    th_msg_t t[TH_BATCH_MAX];
    outbox_message_t m[TH_BATCH_MAX];
    outbox_publish_result_t r[TH_BATCH_MAX];
} th_batch_t;

/* n events, event i to dest with key (th_make_msg(&b->t[i], &b->m[i], ...)
 * changes one). One batch at a time: a static buffer, fresh at each call. */
static inline th_batch_t *th_batch(size_t n, const char *dest, const char *key)
{
    static th_batch_t b;
    ck_assert_msg(n <= TH_BATCH_MAX, "a batch of %zu, more than %d", n, TH_BATCH_MAX);
    memset(&b, 0, sizeof b);
    b.n = n;
    for (size_t i = 0; i < n; i++)
        th_make_msg(&b.t[i], &b.m[i], dest, key, (int)i);
    return &b;
}

/* n events of two keys in turn: key a to dest_a (even), key b to dest_b
 * (odd), the interleaving a failure of one key must not disturb. */
static inline th_batch_t *th_batch_ab(size_t n, const char *dest_a, const char *dest_b)
{
    th_batch_t *b = th_batch(n, dest_a, "a");
    for (size_t i = 1; i < n; i += 2)
        th_make_msg(&b->t[i], &b->m[i], dest_b, "b", (int)i);
    return b;
}

static inline void th_batch_publish(outbox_sink_t *k, th_batch_t *b)
{
    th_publish(k, b->m, b->n, b->r);
}

static inline void th_expect_all(const outbox_publish_result_t *r, size_t n, int status,
                                 const char *when)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(r[i].status == status, "%s: message %zu gave %d (%s), expected %d", when, i,
                      r[i].status, r[i].message, status);
}

/* The order promise of an ordered sink after a failure in the middle of a
 * key's run, in b's results: the key's messages before the culprit are
 * OK, the culprit is status, the key's later ones are RETRY, saying they
 * were held back, and every other key's are OK. */
static inline void th_expect_key_stopped(const th_batch_t *b, size_t culprit, int status)
{
    const char *key = b->t[culprit].key;
    for (size_t i = 0; i < b->n; i++) {
        int mine = strcmp(b->t[i].key, key) == 0;
        int want = !mine || i < culprit ? OUTBOX_PUBLISH_OK
                   : i == culprit       ? status
                                        : OUTBOX_PUBLISH_RETRY;
        ck_assert_msg(b->r[i].status == want, "message %zu (key %s): status %d, expected %d: %s",
                      i, b->t[i].key, b->r[i].status, want, b->r[i].message);
        if (mine && i > culprit)
            ck_assert_msg(strstr(b->r[i].message, "held back") != NULL,
                          "message %zu, after the failure of its key: %s", i, b->r[i].message);
    }
}

/* One event to dest through a sink opened on uri for it alone: its result.
 * (It leaves the batch of th_batch alone.) */
static inline outbox_publish_result_t th_publish_one(const char *uri, const char *dest)
{
    th_msg_t t;
    outbox_message_t m;
    outbox_publish_result_t r;
    th_make_msg(&t, &m, dest, "k", 0);
    outbox_sink_t *k = th_open_sink(uri);
    th_publish(k, &m, 1, &r);
    outbox_sink_close(k);
    return r;
}

/* Publishing through uri (with TH_SECRET for its "{secret}") to a server
 * that is not there: RETRY, and the result names the URI masked ("***"),
 * never the secret. */
static inline void th_expect_retry_masked(const char *uri)
{
    outbox_publish_result_t r = th_publish_one(th_with_secret(uri), "s");
    ck_assert_msg(r.status == OUTBOX_PUBLISH_RETRY, "%d %s", r.status, r.message);
    ck_assert_msg(strstr(r.message, TH_SECRET) == NULL, "the secret shows: %s", r.message);
    ck_assert_msg(strstr(r.message, "***") != NULL, "no masked URI: %s", r.message);
}

static inline void th_create(outbox_sink_t *k, const char *dest)
{
    ck_assert_msg(outbox_sink_destination_create(k, dest) == OUTBOX_OK, "create %s: %s", dest,
                  outbox_sink_message(k));
}

static inline void th_drop(outbox_sink_t *k, const char *dest)
{
    ck_assert_msg(outbox_sink_destination_drop(k, dest) == OUTBOX_OK, "drop %s: %s", dest,
                  outbox_sink_message(k));
}

/* A sink on uri, and a destination of the case's own made on it: its name
 * (th_name(tag)) in dest. */
static inline outbox_sink_t *th_open_dest(const char *uri, const char *tag, char dest[64])
{
    snprintf(dest, 64, "%s", th_name(tag));
    outbox_sink_t *k = th_open_sink(uri);
    th_create(k, dest);
    return k;
}

/* The value of attribute name in what a reader gave, or NULL. */
static inline const char *th_header(const outbox_received_t *got, const char *name)
{
    for (size_t i = 0; i < got->n_headers; i++)
        if (strcmp(got->headers[i].name, name) == 0)
            return got->headers[i].value;
    return NULL;
}

/* The id attribute of each message dest holds, in the reader's order,
 * until wait_ms pass without one; how many (at most max). */
static inline int th_read_ids(outbox_sink_t *k, const char *dest, char ids[][40], int max,
                              int wait_ms)
{
    outbox_sink_reader_t *r = NULL;
    ck_assert_msg(outbox_sink_reader_open(k, dest, &r) == OUTBOX_OK, "reader of %s: %s", dest,
                  outbox_sink_message(k));
    int n = 0, rc;
    outbox_received_t got = {.struct_size = sizeof got};
    while ((rc = outbox_sink_reader_read(r, (int64_t)wait_ms * 1000, &got)) == OUTBOX_OK) {
        ck_assert_msg(n < max, "more than %d messages in %s", max, dest);
        const char *id = th_header(&got, "id");
        ck_assert_msg(id != NULL, "a message in %s has no id attribute", dest);
        snprintf(ids[n++], 40, "%s", id);
    }
    ck_assert_msg(rc == OUTBOX_ENOTFOUND, "reader of %s: %s", dest, outbox_sink_reader_message(r));
    outbox_sink_reader_close(r);
    return n;
}

/* What a broker without message keys holds of one call of events over
 * five keys to dest, read back passes times (reading takes nothing away):
 * the call's order across keys, dest as the destination, no key (it is
 * the partitionkey attribute), and the event id as the dedupe id. */
static inline void th_expect_call_read_back(outbox_sink_t *k, const char *dest, int passes)
{
    enum { N = 50 };
    th_batch_t *b = th_batch(N, dest, "");
    for (int i = 0; i < N; i++) {
        char key[8];
        snprintf(key, sizeof key, "k%d", i % 5);
        th_make_msg(&b->t[i], &b->m[i], dest, key, i);
    }
    th_batch_publish(k, b);
    th_expect_all(b->r, N, OUTBOX_PUBLISH_OK, "publishing");
    for (int pass = 0; pass < passes; pass++) {
        outbox_sink_reader_t *rd = NULL;
        ck_assert_msg(outbox_sink_reader_open(k, dest, &rd) == OUTBOX_OK, "reader of %s: %s",
                      dest, outbox_sink_message(k));
        for (int i = 0; i < N; i++) {
            outbox_received_t got = {.struct_size = sizeof got};
            ck_assert_msg(outbox_sink_reader_read(rd, 5000000, &got) == OUTBOX_OK,
                          "pass %d, message %d: %s", pass, i, outbox_sink_reader_message(rd));
            ck_assert_str_eq(got.destination, dest);
            ck_assert_ptr_null(got.key);
            ck_assert_str_eq(got.dedupe_id, b->t[i].id);
        }
        outbox_received_t more = {.struct_size = sizeof more};
        ck_assert_int_eq(outbox_sink_reader_read(rd, 500000, &more), OUTBOX_ENOTFOUND);
        outbox_sink_reader_close(rd);
    }
}

/* dest holds exactly the messages of b to dest that were reported OK:
 * nothing refused or held back (th_expect_key_stopped) got there. */
static inline void th_expect_dest_holds_ok(outbox_sink_t *k, const th_batch_t *b,
                                           const char *dest, int wait_ms)
{
    static char ids[TH_BATCH_MAX + 8][40];
    int ok = 0;
    for (size_t i = 0; i < b->n; i++)
        ok += b->r[i].status == OUTBOX_PUBLISH_OK && strcmp(b->t[i].dest, dest) == 0;
    int n = th_read_ids(k, dest, ids, TH_BATCH_MAX + 8, wait_ms);
    for (int j = 0; j < n; j++) {
        size_t i = 0;
        while (i < b->n && strcmp(b->t[i].id, ids[j]) != 0)
            i++;
        ck_assert_msg(i < b->n, "%s holds event %s, which was not published to it", dest, ids[j]);
        ck_assert_msg(b->r[i].status == OUTBOX_PUBLISH_OK,
                      "%s holds message %zu (key %s), which was reported %d: %s", dest, i,
                      b->t[i].key, b->r[i].status, b->r[i].message);
    }
    ck_assert_msg(n == ok, "%s holds %d messages, %d were reported OK", dest, n, ok);
}

/* disrupt(ctx) happens to the sink's connection between two calls to
 * dest: the call after it is OK at once, not RETRY, and dest holds the
 * messages of both. */
static inline void th_expect_ok_across(outbox_sink_t *k, const char *dest,
                                       void (*disrupt)(void *ctx), void *ctx)
{
    enum { N = 10 };
    th_batch_t *b = th_batch(N, dest, "k");
    th_batch_publish(k, b);
    th_expect_all(b->r, N, OUTBOX_PUBLISH_OK, "before");
    disrupt(ctx);
    th_batch_publish(k, b);
    th_expect_all(b->r, N, OUTBOX_PUBLISH_OK, "the first call after");
    static char ids[2 * N][40];
    ck_assert_int_eq(th_read_ids(k, dest, ids, 2 * N, 2000), 2 * N);
}

/* ------------------------------------------------------ private servers */

/* Where the tools/services script of the test's private servers is kept:
 * meson passes its path as the test's first argument (TH_SINK_MAIN). */
static inline const char **th_script_slot(void)
{
    static const char *script;
    return &script;
}

/* That script, or NULL without one: then the cases that need a private
 * server are left out. */
static inline const char *th_script(void)
{
    return *th_script_slot();
}

/* The directory of this program's private server tag (static buffer):
 * th_run stops whatever server is left in one. */
static inline const char *th_private_dir(const char *tag)
{
    static char dir[256];
    snprintf(dir, sizeof dir, "/tmp/outbox-it-%s.%ld.%s", program_invocation_short_name,
             th_main_pid(), tag);
    return dir;
}

/* The script does cmd (stop, kill, start...) on dir. */
static inline void th_service(const char *cmd, const char *dir)
{
    char line[1024];
    snprintf(line, sizeof line, "'%s' %s '%s' >/dev/null", th_script(), cmd, dir);
    ck_assert_msg(system(line) == 0, "%s failed", line);
}

/* Starts the script's server in dir with env ("NAME=value ..." or "") and
 * gives the value of its export var (its URI, its port) in out. */
static inline void th_service_start(const char *env, const char *dir, const char *var, char *out,
                                    size_t size)
{
    char cmd[2048], line[1024];
    snprintf(cmd, sizeof cmd, "%s '%s' start '%s'", env, th_script(), dir);
    FILE *p = popen(cmd, "r");
    ck_assert_msg(p != NULL, "cannot run %s", cmd);
    size_t len = strlen(var);
    out[0] = '\0';
    while (fgets(line, sizeof line, p) != NULL) {
        if (strncmp(line, "export ", 7) != 0 || strncmp(line + 7, var, len) != 0 ||
            line[7 + len] != '=')
            continue;
        const char *v = line + 8 + len;
        size_t n = strcspn(v, "\n");
        if (n >= 2 && v[0] == '\'' && v[n - 1] == '\'')
            v++, n -= 2;
        snprintf(out, size, "%.*s", (int)n, v);
    }
    int rc = pclose(p);
    ck_assert_msg(rc == 0 && out[0] != '\0', "%s: exit %d, export %s: \"%s\"", cmd, rc, var, out);
}

/* ------------------------------------------------------------------ run */

/* Runs the n cases as one Check suite, each in a process of its own with
 * timeout_s (a NULL case is one this run cannot have); then stops the
 * private servers that a failed case left running. main's exit status. */
static inline int th_run(const char *name, int timeout_s, const TTest *const *cases, size_t n)
{
    th_main_pid();
    Suite *s = suite_create(name);
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, timeout_s);
    for (size_t i = 0; i < n; i++)
        if (cases[i] != NULL)
            tcase_add_test(tc, cases[i]);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (th_script() != NULL) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "for d in /tmp/outbox-it-%s.%ld.*; do [ -d \"$d\" ] || continue; "
                 "'%s' stop \"$d\" >/dev/null 2>&1; rm -rf \"$d\"; done",
                 program_invocation_short_name, th_main_pid(), th_script());
        if (system(cmd) != 0)
            fprintf(stderr, "could not stop the private servers: %s\n", cmd);
    }
    return failed ? 1 : 0;
}

/* The main of a sink test, like GStreamer's GST_CHECK_MAIN: the shared
 * server's URI from the environment variable var into uri, or the skip
 * (th_need_env; kind names its tools/services script); the private
 * servers' script from the first argument (th_script); then the cases
 * (th_run), which may use both. */
#define TH_SINK_MAIN(name, timeout_s, var, kind, uri, ...)                                      \
    int main(int argc, char **argv)                                                            \
    {                                                                                          \
        (uri) = th_need_env(var, TH_START_SERVICE(kind));                                      \
        *th_script_slot() = argc > 1 ? argv[1] : NULL;                                         \
        const TTest *cases_[] = {__VA_ARGS__};                                                 \
        return th_run(name, timeout_s, cases_, sizeof cases_ / sizeof *cases_);                \
    }

#endif
