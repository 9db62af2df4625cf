/* Sink conformance cases: what every sink driver must do, checked by
 * publishing to a real broker and reading back with the driver's reader. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf_sink.h"

/* How long a reader waits for a message that should come. */
#define QUIET_MS 15000
/* Over the default limit of Kafka and NATS (1 MB), not of every broker:
 * a sink for one that takes more has a max_bytes of its own, set under
 * this in the battery's URI (docs/writing-a-sink-driver.md). */
#define OVERSIZE ((size_t)4 << 20)

static const char *result_text(int status)
{
    return status == OUTBOX_PUBLISH_OK ? "OK" : status == OUTBOX_PUBLISH_RETRY ? "RETRY" : "REJECT";
}

static void assert_all(const conf_batch_t *b, int status, const char *when)
{
    for (size_t i = 0; i < b->n; i++)
        ck_assert_msg(b->res[i].status == status, "%s: message %zu of %zu is %s (%s), expected %s",
                      when, i, b->n, result_text(b->res[i].status), b->res[i].message,
                      result_text(status));
}

/* The message read back that is event n, or NULL. */
static const conf_got_t *find(const conf_read_t *r, unsigned long n)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->v[i].n == n)
            return &r->v[i];
    return NULL;
}

static size_t occurrences(const conf_read_t *r, unsigned long n)
{
    size_t c = 0;
    for (size_t i = 0; i < r->n; i++)
        c += r->v[i].n == n;
    return c;
}

/* g is what was read back of s: payload bytes, every header, the key. */
static void assert_same(const conf_smsg_t *s, const conf_got_t *g)
{
    ck_assert_msg(g->payload_len == s->m.payload_len &&
                      memcmp(g->payload, s->m.payload, s->m.payload_len) == 0,
                  "event %s: the payload read back (%zu bytes: %.80s) differs from the one "
                  "published (%zu bytes: %.80s)",
                  s->event_id, g->payload_len, g->payload, s->m.payload_len, s->m.payload);
    for (size_t h = 0; h < s->m.n_headers; h++) {
        const char *got = conf_got_header(g, s->h[h].name);
        ck_assert_msg(got != NULL, "event %s: header %s is missing from what was read back",
                      s->event_id, s->h[h].name);
        ck_assert_msg(strcmp(got, s->h[h].value) == 0,
                      "event %s: header %s reads back as \"%s\", published as \"%s\"",
                      s->event_id, s->h[h].name, got, s->h[h].value);
    }
    const char *key = conf_got_key(g);
    ck_assert_msg(key != NULL && strcmp(key, s->key) == 0,
                  "event %s: its key reads back as %s%s%s, published as \"%s\"", s->event_id,
                  key ? "\"" : "", key ? key : "nothing (no key and no partitionkey header)",
                  key ? "\"" : "", s->key);
}

/* --------------------------------------------------------------- cases */

START_TEST(sink_round_trip)
{
    outbox_sink_t *k = conf_sink_open();
    conf_batch_t b = conf_batch_new(1);
    conf_smsg_init(&b.v[0], 1, "conf-key-1", conf_env.destination, 1);
    conf_sink_ok(k, conf_batch_publish(k, &b));
    assert_all(&b, OUTBOX_PUBLISH_OK, "publishing one message with every header");
    conf_read_t r = conf_sink_read(k, conf_env.destination, 1, QUIET_MS);
    ck_assert_msg(r.n == 1, "published 1 message to %s, read back %zu", conf_env.destination, r.n);
    ck_assert_msg(r.v[0].n == 1, "the message read back is not the one published (id %s)",
                  conf_got_header(&r.v[0], "id") ? conf_got_header(&r.v[0], "id") : "missing");
    assert_same(&b.v[0], &r.v[0]);
    ck_assert_msg(r.v[0].n_headers == b.v[0].m.n_headers,
                  "published %zu CloudEvents headers, read back %zu", b.v[0].m.n_headers,
                  r.v[0].n_headers);
    conf_read_free(&r);
    conf_batch_free(&b);
    outbox_sink_close(k);
}
END_TEST

START_TEST(sink_optional_headers_absent)
{
    /* An event without tenant, trace or hlc carries no such header, not an
     * empty one. */
    outbox_sink_t *k = conf_sink_open();
    conf_batch_t b = conf_batch_new(1);
    conf_smsg_init(&b.v[0], 2, NULL, conf_env.destination, 0);
    conf_sink_ok(k, conf_batch_publish(k, &b));
    assert_all(&b, OUTBOX_PUBLISH_OK, "publishing one message with the required headers only");
    conf_read_t r = conf_sink_read(k, conf_env.destination, 1, QUIET_MS);
    ck_assert_msg(r.n == 1, "published 1 message, read back %zu", r.n);
    assert_same(&b.v[0], &r.v[0]);
    const char *optional[] = {"traceparent", "tenantid", "correlationid", "causationid",
                              "executionid", "hlc"};
    for (size_t i = 0; i < sizeof optional / sizeof *optional; i++)
        ck_assert_msg(conf_got_header(&r.v[0], optional[i]) == NULL,
                      "a message published without %s reads back with %s = \"%s\"", optional[i],
                      optional[i], conf_got_header(&r.v[0], optional[i]));
    conf_read_free(&r);
    conf_batch_free(&b);
    outbox_sink_close(k);
}
END_TEST

/* The header names a consumer that is not the sink's own reader sees, per
 * protocol binding, by the URI's scheme: the binary-mode prefix, where the
 * binding puts datacontenttype, and traceparent under its own name. */
typedef struct binding {
    const char *schemes;      /* space-separated */
    const char *prefix;       /* before each attribute's name */
    const char *alt_prefix;   /* another the binding allows, or NULL */
    const char *content_type; /* datacontenttype's place, or NULL: prefix + name */
    int nocase;               /* names compare ignoring case (HTTP) */
} binding_t;

static const binding_t bindings[] = {
    {"kafka", "ce_", NULL, "content-type", 0},
    {"nats", "ce-", NULL, NULL, 0},
    {"amqp amqps", "cloudEvents_", "cloudEvents:", "content_type", 0},
    {"http https", "ce-", NULL, "Content-Type", 1},
    /* No CloudEvents binding for these: the project's own convention,
     * the attribute names as they are (docs/sinks.md). */
    {"redis rediss", "", NULL, NULL, 0},
    {"file stdout", "", NULL, NULL, 0},
};

static const binding_t *binding_of(const char *uri, char *scheme, size_t size)
{
    size_t n = strcspn(uri, ":");
    snprintf(scheme, size, "%.*s", (int)n, uri);
    for (size_t i = 0; i < sizeof bindings / sizeof *bindings; i++) {
        const char *p = bindings[i].schemes;
        while (*p) {
            size_t w = strcspn(p, " ");
            if (w == n && strncmp(p, uri, n) == 0)
                return &bindings[i];
            p += w + (p[w] == ' ');
        }
    }
    return NULL;
}

START_TEST(sink_header_names)
{
    /* Every CloudEvents attribute, and traceparent, under the exact name its
     * protocol binding gives, as a consumer reading the broker with its own
     * client sees it: the reader's wire_headers, not its mapped names. */
    char scheme[32];
    const binding_t *bd = binding_of(conf_env.uri, scheme, sizeof scheme);
    if (bd == NULL) {
        char why[96];
        snprintf(why, sizeof why, "the battery knows no protocol binding for %s:", scheme);
        conf_note("the header names on the wire", why);
        return;
    }
    outbox_sink_t *k = conf_sink_open();
    conf_batch_t b = conf_batch_new(2);
    conf_smsg_init(&b.v[0], 30, "names", conf_env.destination, 1);
    conf_smsg_init(&b.v[1], 31, "names", conf_env.destination, 0);
    conf_sink_ok(k, conf_batch_publish(k, &b));
    assert_all(&b, OUTBOX_PUBLISH_OK, "publishing two messages");
    conf_read_t r = conf_sink_read(k, conf_env.destination, 2, QUIET_MS);
    ck_assert_msg(r.n == 2, "published 2 messages, read back %zu", r.n);
    for (size_t i = 0; i < r.n; i++) {
        const conf_got_t *g = &r.v[i];
        ck_assert_msg(g->n >= 30 && g->n <= 31, "read back a message that is not ours");
        if (!g->has_wire) {
            conf_unchecked("the header names on the wire",
                           "the reader reports no wire_headers (ABI 1.6)");
            break;
        }
        const conf_smsg_t *sm = &b.v[g->n - 30];
        for (size_t h = 0; h < sm->m.n_headers; h++) {
            const char *attr = sm->h[h].name, *want = sm->h[h].value;
            char name[64], alt[64] = "";
            if (strcmp(attr, "traceparent") == 0)
                snprintf(name, sizeof name, "traceparent");
            else if (strcmp(attr, "datacontenttype") == 0 && bd->content_type != NULL)
                snprintf(name, sizeof name, "%s", bd->content_type);
            else {
                snprintf(name, sizeof name, "%s%s", bd->prefix, attr);
                if (bd->alt_prefix != NULL)
                    snprintf(alt, sizeof alt, "%s%s", bd->alt_prefix, attr);
            }
            const char *got = conf_got_wire(g, name, bd->nocase);
            if (got == NULL && alt[0] != '\0')
                got = conf_got_wire(g, alt, bd->nocase);
            char seen[512] = "";
            for (size_t w = 0; w < g->n_wire && strlen(seen) + 80 < sizeof seen; w++)
                snprintf(seen + strlen(seen), sizeof seen - strlen(seen), "%s%s",
                         w ? ", " : "", g->wire[w].name);
            ck_assert_msg(got != NULL,
                          "event %s: attribute %s is not on the wire as \"%s\" (the %s binding's "
                          "name%s); the message carries: %s",
                          sm->event_id, attr, name, scheme, bd->nocase ? ", any case" : "", seen);
            ck_assert_msg(strcmp(got, want) == 0,
                          "event %s: header %s on the wire is \"%s\", published as \"%s\"",
                          sm->event_id, name, got, want);
        }
    }
    conf_read_free(&r);
    conf_batch_free(&b);
    outbox_sink_close(k);
}
END_TEST

START_TEST(sink_keys_and_destinations)
{
    outbox_sink_t *k = conf_sink_open();
    enum { N = 20 };
    conf_batch_t b = conf_batch_new(N);
    for (unsigned long i = 0; i < N; i++) {
        char key[32];
        snprintf(key, sizeof key, "k%lu", i % 4);
        conf_smsg_init(&b.v[i], i, key, i % 2 ? conf_env.destination_b : conf_env.destination, 1);
    }
    /* One message per key and call, which every sink must take. */
    for (size_t i = 0; i < N; i++) {
        conf_batch_t one = {&b.v[i], &b.msgs[i], &b.res[i], 1};
        conf_sink_ok(k, conf_batch_publish(k, &one));
    }
    assert_all(&b, OUTBOX_PUBLISH_OK, "publishing to two destinations");
    const char *dests[2] = {conf_env.destination, conf_env.destination_b};
    for (int d = 0; d < 2; d++) {
        conf_read_t r = conf_sink_read(k, dests[d], N / 2, QUIET_MS);
        ck_assert_msg(r.n == N / 2, "published %d messages to %s, read back %zu", N / 2, dests[d],
                      r.n);
        for (size_t i = 0; i < r.n; i++) {
            ck_assert_msg(r.v[i].n < N && (int)(r.v[i].n % 2) == d,
                          "%s holds event %lu, which was published to %s", dests[d], r.v[i].n,
                          r.v[i].n < N ? dests[r.v[i].n % 2] : "no destination");
            ck_assert_msg(r.v[i].destination == NULL || strcmp(r.v[i].destination, dests[d]) == 0,
                          "the reader of %s says event %lu came from %s", dests[d], r.v[i].n,
                          r.v[i].destination);
            assert_same(&b.v[r.v[i].n], &r.v[i]);
        }
        conf_read_free(&r);
    }
    conf_batch_free(&b);
    outbox_sink_close(k);
}
END_TEST

START_TEST(sink_key_order)
{
    /* Many messages over a few keys: each key's messages arrive in the
     * order they were published. An ordered sink gets them in one call, as
     * the relay hands it a batch; another gets one message per key per
     * call. */
    outbox_sink_t *k = conf_sink_open();
    enum { N = 2000, KEYS = 8 };
    int ordered = (outbox_sink_capabilities(k) & OUTBOX_SINK_CAP_ORDERED) != 0;
    conf_batch_t b = conf_batch_new(N);
    for (unsigned long i = 0; i < N; i++) {
        char key[32];
        snprintf(key, sizeof key, "key-%lu", (i * 7 + i / 13) % KEYS);
        conf_smsg_init(&b.v[i], i, key, conf_env.destination, i % 3 == 0);
    }
    if (ordered) {
        conf_sink_ok(k, conf_batch_publish(k, &b));
    } else {
        for (size_t i = 0; i < N; i++) {
            conf_batch_t one = {&b.v[i], &b.msgs[i], &b.res[i], 1};
            conf_sink_ok(k, conf_batch_publish(k, &one));
        }
    }
    assert_all(&b, OUTBOX_PUBLISH_OK, "publishing 2000 messages over 8 keys");
    conf_read_t r = conf_sink_read(k, conf_env.destination, N, QUIET_MS);
    ck_assert_msg(r.n == N, "published %d messages, read back %zu", N, r.n);
    long last[KEYS];
    for (int i = 0; i < KEYS; i++)
        last[i] = -1;
    for (size_t i = 0; i < r.n; i++) {
        unsigned long n = r.v[i].n;
        ck_assert_msg(n < N, "read back a message that was not published (id %s)",
                      conf_got_header(&r.v[i], "id") ? conf_got_header(&r.v[i], "id") : "missing");
        ck_assert_msg(occurrences(&r, n) == 1, "event %lu was read back %zu times", n,
                      occurrences(&r, n));
        const char *key = conf_got_key(&r.v[i]);
        ck_assert_msg(key != NULL && strcmp(key, b.v[n].key) == 0,
                      "event %lu reads back with key %s, published with %s", n, key ? key : "none",
                      b.v[n].key);
        int kk = atoi(b.v[n].key + 4);
        ck_assert_msg((long)n > last[kk],
                      "%s: event %lu arrived after event %ld, which was published after it",
                      b.v[n].key, n, last[kk]);
        last[kk] = (long)n;
    }
    conf_read_free(&r);
    conf_batch_free(&b);
    outbox_sink_close(k);
}
END_TEST

START_TEST(sink_dedupe)
{
    /* The broker drops a second message with the same event id, and only
     * that: two events with equal payloads (and rows whose ids are not
     * their event ids) both arrive; its dedupe key is the event id. */
    outbox_sink_t *k = conf_sink_open();
    conf_batch_t b = conf_batch_new(2);
    conf_smsg_init(&b.v[0], 5, NULL, conf_env.destination, 1);
    conf_smsg_init(&b.v[1], 6, NULL, conf_env.destination, 1);
    free(b.v[1].payload);
    b.v[1].payload = strdup(b.v[0].payload);
    ck_assert_msg(b.v[1].payload != NULL, "out of memory");
    b.v[1].m.payload = b.v[1].row.payload = b.v[1].payload;
    b.v[1].m.payload_len = b.v[1].row.payload_len = b.v[0].m.payload_len;
    conf_batch_t first = {&b.v[0], &b.msgs[0], &b.res[0], 1};
    conf_sink_ok(k, conf_batch_publish(k, &first));
    conf_sink_ok(k, conf_batch_publish(k, &first));
    ck_assert_msg(b.res[0].status == OUTBOX_PUBLISH_OK,
                  "publishing a message a second time gave %s (%s): a duplicate the broker "
                  "drops is delivered, so OK",
                  result_text(b.res[0].status), b.res[0].message);
    conf_batch_t second = {&b.v[1], &b.msgs[1], &b.res[1], 1};
    conf_sink_ok(k, conf_batch_publish(k, &second));
    ck_assert_msg(b.res[1].status == OUTBOX_PUBLISH_OK, "publishing event 6: %s (%s)",
                  result_text(b.res[1].status), b.res[1].message);
    conf_read_t r = conf_sink_read(k, conf_env.destination, 2, QUIET_MS);
    ck_assert_msg(occurrences(&r, 5) == 1,
                  "event 5, published twice with one event id, was read back %zu times",
                  occurrences(&r, 5));
    ck_assert_msg(occurrences(&r, 6) == 1,
                  "event 6, another event with the same payload as event 5, was read back %zu "
                  "times",
                  occurrences(&r, 6));
    for (int e = 0; e < 2; e++) {
        const conf_got_t *g = find(&r, 5 + (unsigned long)e);
        if (g->dedupe_id == NULL) {
            conf_unchecked("that the broker's dedupe key is the event id",
                           "the reader reports no dedupe_id");
            break;
        }
        ck_assert_msg(strcmp(g->dedupe_id, b.v[e].event_id) == 0,
                      "event %lu: the broker's dedupe id is \"%s\", not the event id %s%s",
                      5 + (unsigned long)e, g->dedupe_id, b.v[e].event_id,
                      strcmp(g->dedupe_id, b.v[e].row_id) == 0 ? " (it is the row's id)" : "");
    }
    conf_read_free(&r);
    conf_batch_free(&b);
    outbox_sink_close(k);
}
END_TEST

START_TEST(sink_oversize_reject)
{
    /* A message over the broker's size limit can never be delivered:
     * REJECT, and the messages around it (other keys) are delivered. */
    outbox_sink_t *k = conf_sink_open();
    conf_batch_t b = conf_batch_new(3);
    conf_smsg_init(&b.v[0], 10, "a", conf_env.destination, 1);
    conf_smsg_init(&b.v[1], 11, "b", conf_env.destination, 1);
    conf_smsg_big(&b.v[1], OVERSIZE);
    conf_smsg_init(&b.v[2], 12, "c", conf_env.destination, 1);
    conf_sink_ok(k, conf_batch_publish(k, &b));
    ck_assert_msg(b.res[1].status == OUTBOX_PUBLISH_REJECT,
                  "a %zu-byte message gave %s (%s), expected REJECT", OVERSIZE,
                  result_text(b.res[1].status), b.res[1].message);
    ck_assert_msg(b.res[1].message[0] != '\0', "the REJECT of the oversized message says nothing");
    ck_assert_msg(b.res[0].status == OUTBOX_PUBLISH_OK && b.res[2].status == OUTBOX_PUBLISH_OK,
                  "the messages beside the oversized one (other keys) gave %s (%s) and %s (%s)",
                  result_text(b.res[0].status), b.res[0].message, result_text(b.res[2].status),
                  b.res[2].message);
    conf_read_t r = conf_sink_read(k, conf_env.destination, 2, QUIET_MS);
    ck_assert_msg(r.n == 2 && find(&r, 10) && find(&r, 12) && !find(&r, 11),
                  "read back %zu messages; expected events 10 and 12 only", r.n);
    conf_read_free(&r);
    conf_batch_free(&b);
    outbox_sink_close(k);
}
END_TEST

START_TEST(sink_reject_stops_key)
{
    /* An ordered sink delivers nothing of a key after a failure in the same
     * call: k1 is OK, REJECT, then RETRY (not delivered); k2 goes on. */
    outbox_sink_t *k = conf_sink_open();
    conf_batch_t b = conf_batch_new(5);
    conf_smsg_init(&b.v[0], 20, "k1", conf_env.destination, 1);
    conf_smsg_init(&b.v[1], 21, "k1", conf_env.destination, 1);
    conf_smsg_big(&b.v[1], OVERSIZE);
    conf_smsg_init(&b.v[2], 22, "k1", conf_env.destination, 1);
    conf_smsg_init(&b.v[3], 23, "k2", conf_env.destination, 1);
    conf_smsg_init(&b.v[4], 24, "k1", conf_env.destination, 1);
    conf_sink_ok(k, conf_batch_publish(k, &b));
    ck_assert_msg(b.res[0].status == OUTBOX_PUBLISH_OK,
                  "k1's first message gave %s (%s), expected OK", result_text(b.res[0].status),
                  b.res[0].message);
    ck_assert_msg(b.res[1].status == OUTBOX_PUBLISH_REJECT,
                  "k1's oversized message gave %s (%s), expected REJECT",
                  result_text(b.res[1].status), b.res[1].message);
    for (int i = 2; i <= 4; i += 2)
        ck_assert_msg(b.res[i].status == OUTBOX_PUBLISH_RETRY,
                      "k1's message %d, after its REJECT in the same call, gave %s (%s), "
                      "expected RETRY",
                      i, result_text(b.res[i].status), b.res[i].message);
    ck_assert_msg(b.res[3].status == OUTBOX_PUBLISH_OK,
                  "k2's message, between k1's, gave %s (%s), expected OK",
                  result_text(b.res[3].status), b.res[3].message);
    conf_read_t r = conf_sink_read(k, conf_env.destination, 2, QUIET_MS);
    ck_assert_msg(!find(&r, 22) && !find(&r, 24),
                  "k1's messages after its REJECT were delivered (event 22: %s, event 24: %s)",
                  find(&r, 22) ? "yes" : "no", find(&r, 24) ? "yes" : "no");
    ck_assert_msg(find(&r, 20) && find(&r, 23), "events 20 (k1) and 23 (k2) were not read back");
    conf_read_free(&r);
    conf_batch_free(&b);
    outbox_sink_close(k);
}
END_TEST


/* The test URI pointed at a loopback port nothing listens on. */
static void unreachable_uri(char *out, size_t size)
{
    char hostport[32];
    snprintf(hostport, sizeof hostport, "127.0.0.1:%d", conf_closed_port());
    ck_assert(conf_uri_with_host(conf_env.uri, hostport, out, size) == 0);
}

START_TEST(sink_unreachable_retry)
{
    /* No broker: every message is RETRY (the relay keeps them), never
     * REJECT (it would dead-letter them) nor OK. Opening may fail instead,
     * but not as an invalid argument. */
    char uri[1024], msg[OUTBOX_MESSAGE_MAX];
    unreachable_uri(uri, sizeof uri);
    int rc = 0;
    outbox_sink_t *k = conf_sink_open_uri(uri, &rc, msg, sizeof msg);
    if (k == NULL) {
        ck_assert_msg(rc != OUTBOX_EINVAL,
                      "opening the sink on an unreachable broker failed as an invalid argument: %s",
                      msg);
        conf_note("publishing to an unreachable broker",
                  "the sink does not open while its broker is unreachable");
        return;
    }
    conf_batch_t b = conf_batch_new(3);
    for (unsigned long i = 0; i < 3; i++)
        conf_smsg_init(&b.v[i], 30 + i, i == 2 ? "k" : NULL, conf_env.destination, 1);
    conf_batch_publish(k, &b);
    assert_all(&b, OUTBOX_PUBLISH_RETRY, "publishing with no broker listening");
    conf_batch_free(&b);
    outbox_sink_close(k);
}
END_TEST

START_TEST(sink_no_password_printed)
{
    /* A password in the URI appears in no message of the sink: not when
     * opening, not in publish results, not in the sink's own message. */
    char secret[40], userinfo[64], uri[1024], msg[OUTBOX_MESSAGE_MAX];
    snprintf(secret, sizeof secret, "Pw%ldq%lx", (long)getpid(), (unsigned long)conf_now_us());
    snprintf(userinfo, sizeof userinfo, "conformance:%s", secret);
    char down[1024];
    unreachable_uri(down, sizeof down);
    const char *bases[2] = {conf_env.uri, down};
    for (int v = 0; v < 2; v++) {
        ck_assert(conf_uri_with_userinfo(bases[v], userinfo, uri, sizeof uri) == 0);
        int rc = 0;
        outbox_sink_t *k = conf_sink_open_uri(uri, &rc, msg, sizeof msg);
        ck_assert_msg(strstr(msg, secret) == NULL, "opening the sink printed the password: %s", msg);
        if (k == NULL)
            continue;
        conf_batch_t b = conf_batch_new(2);
        conf_smsg_init(&b.v[0], 40, NULL, conf_env.destination, 1);
        conf_smsg_init(&b.v[1], 41, NULL, conf_env.destination, 1);
        conf_smsg_big(&b.v[1], OVERSIZE);
        conf_batch_publish(k, &b);
        for (size_t i = 0; i < b.n; i++)
            ck_assert_msg(strstr(b.res[i].message, secret) == NULL,
                          "a publish result printed the password: %s", b.res[i].message);
        ck_assert_msg(strstr(outbox_sink_message(k), secret) == NULL,
                      "the sink's message printed the password: %s", outbox_sink_message(k));
        conf_batch_free(&b);
        outbox_sink_close(k);
    }
}
END_TEST

static void quiet_log(void *ctx, int level, const char *line)
{
    (void)ctx, (void)level, (void)line;
}

/* No broker took anything: nothing published, dead-lettered or rescheduled. */
static void assert_nothing_decided(const outbox_relay_counters_t *c, const char *relay)
{
    ck_assert_msg(c->published == 0 && c->dead == 0 && c->retried == 0,
                  "with no broker, %s published %llu, dead-lettered %llu and rescheduled %llu "
                  "events: each publish result was not RETRY for all",
                  relay, (unsigned long long)c->published, (unsigned long long)c->dead,
                  (unsigned long long)c->retried);
}

/* The pipelined run's observer: stops the relay at its second outage, or
 * after 20 batches whatever they did. */
static void stop_at_second_outage(void *ctx, const outbox_relay_observation_t *o)
{
    static int outages, batches;
    outbox_relay_t **r = ctx;
    if (o == NULL) { /* reset */
        outages = batches = 0;
        return;
    }
    outages += o->outage;
    if (outages >= 2 || ++batches >= 20)
        outbox_relay_stop(*r);
}

START_TEST(sink_breaker_charges_nothing)
{
    /* A relay on a SQLite store publishing to an unreachable broker:
     * every batch is an outage, released without charging attempts, so an
     * outage never dead-letters anything. */
    char uri[1024], msg[OUTBOX_MESSAGE_MAX];
    unreachable_uri(uri, sizeof uri);
    int rc = 0;
    outbox_sink_t *k = conf_sink_open_uri(uri, &rc, msg, sizeof msg);
    if (k == NULL) {
        conf_note("a relay's breaker on an unreachable broker",
                  "the sink does not open while its broker is unreachable");
        return;
    }
    char dir[] = "/tmp/outbox-conf-sink-XXXXXX";
    ck_assert(mkdtemp(dir) != NULL);
    char store_uri[128];
    snprintf(store_uri, sizeof store_uri, "sqlite:%s/relay.db", dir);
    outbox_store_options_t so = {.struct_size = sizeof so, .driver = "sqlite",
                                 .flags = OUTBOX_OPEN_SCHEMA_ONLY};
    outbox_store_t *s = NULL;
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_store_open(store_uri, &so, &s, &d) == OUTBOX_OK, "sqlite: %s", d.message);
    outbox_schema_opts_t sch = {.struct_size = sizeof sch};
    conf_ok(s, outbox_store_schema_apply(s, &sch));
    outbox_store_close(s);
    so.flags = 0;
    ck_assert_msg(outbox_store_open(store_uri, &so, &s, &d) == OUTBOX_OK, "sqlite: %s", d.message);
    conf_stage(s, NULL, "conf.sink", 0, 5, NULL);
    conf_stage(s, NULL, "conf.sink", 5, 3, "k");

    outbox_relay_config_t cfg;
    outbox_relay_config_init(&cfg);
    cfg.route = "conf.sink";
    cfg.max_attempts = 2;
    cfg.backoff_base_us = 0;
    cfg.destination = conf_env.destination;
    /* The relay's warnings about the outage are expected here. */
    outbox_set_logger(quiet_log, NULL);
    outbox_relay_t *r = NULL;
    ck_assert_msg(outbox_relay_new(s, k, &cfg, &r, &d) == OUTBOX_OK, "relay: %s", d.message);
    for (int i = 0; i < 2; i++) {
        size_t claimed = 0;
        ck_assert_msg(outbox_relay_step(r, &claimed) == OUTBOX_OK, "relay step %d: %s", i,
                      outbox_relay_message(r));
        ck_assert_msg(claimed > 0, "relay step %d claimed nothing: the outage kept the rows", i);
    }
    outbox_relay_counters_t c;
    outbox_relay_counters(r, &c);
    outbox_relay_free(r);
    assert_nothing_decided(&c, "a relay");
    ck_assert_msg(c.outages == 2, "2 steps with no broker counted %llu outages",
                  (unsigned long long)c.outages);
    /* Then a pipelined run (several batches of 2 in flight), stopped at its
     * second outage: the batches behind the one that found the broker
     * down go back unpublished, and nothing is charged either. */
    cfg.batch = 2;
    cfg.pipeline = 4;
    cfg.poll_us = 10000;
    cfg.observe = stop_at_second_outage;
    cfg.observe_ctx = &r;
    stop_at_second_outage(NULL, NULL);
    ck_assert_msg(outbox_relay_new(s, k, &cfg, &r, &d) == OUTBOX_OK, "relay: %s", d.message);
    ck_assert_msg(outbox_relay_run(r) == OUTBOX_OK, "pipelined relay: %s", outbox_relay_message(r));
    outbox_relay_counters(r, &c);
    outbox_relay_free(r);
    assert_nothing_decided(&c, "a pipelined relay");
    ck_assert_msg(c.outages >= 1, "a pipelined relay with no broker counted no outage");
    ck_assert_msg(c.released == c.claimed, "a pipelined relay claimed %llu rows and released %llu",
                  (unsigned long long)c.claimed, (unsigned long long)c.released);
    conf_claim_t cl = conf_claim(s, "conf.sink", 100, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(cl.n == 8, "after the outage %zu of 8 events are claimable", cl.n);
    for (size_t i = 0; i < cl.n; i++)
        ck_assert_msg(cl.rows[i].attempts == 1,
                      "event %lu has attempts %d after the outages and one claim: the outage "
                      "charged attempts",
                      cl.rows[i].n, (int)cl.rows[i].attempts);
    conf_claim_free(&cl);
    outbox_store_close(s);
    outbox_sink_close(k);
    const char *files[] = {"relay.db", "relay.db-wal", "relay.db-shm"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char path[160];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}
END_TEST

START_TEST(sink_broker_stopped_retry)
{
    /* The broker goes away after the sink opened: RETRY, never OK (nothing
     * acknowledged it) nor REJECT; once it is back the same handle
     * delivers again. */
    outbox_sink_t *k = conf_sink_open();
    conf_batch_t b = conf_batch_new(6);
    for (unsigned long i = 0; i < 6; i++)
        conf_smsg_init(&b.v[i], 50 + i, i % 2 ? "k" : NULL, conf_env.destination, 1);
    conf_batch_t first = {&b.v[0], &b.msgs[0], &b.res[0], 1};
    conf_sink_ok(k, conf_batch_publish(k, &first));
    assert_all(&first, OUTBOX_PUBLISH_OK, "publishing before the broker stops");

    conf_broker_stop();
    conf_batch_t down = {&b.v[1], &b.msgs[1], &b.res[1], 4};
    conf_batch_publish(k, &down);
    int bad = -1;
    for (size_t i = 0; i < down.n && bad < 0; i++)
        if (down.res[i].status != OUTBOX_PUBLISH_RETRY)
            bad = (int)i;
    conf_broker_start();
    ck_assert_msg(bad < 0, "with the broker stopped, message %d gave %s (%s), expected RETRY", bad,
                  bad >= 0 ? result_text(down.res[bad].status) : "", bad >= 0 ? down.res[bad].message : "");

    /* Back: the handle reconnects by itself (give it a minute). */
    conf_batch_t last = {&b.v[5], &b.msgs[5], &b.res[5], 1};
    int64_t until = conf_now_us() + INT64_C(60000000);
    do {
        conf_batch_publish(k, &last);
        if (last.res[0].status == OUTBOX_PUBLISH_OK)
            break;
        ck_assert_msg(last.res[0].status == OUTBOX_PUBLISH_RETRY,
                      "after the broker restarted, a message gave %s (%s)",
                      result_text(last.res[0].status), last.res[0].message);
        conf_sleep_ms(500);
    } while (conf_now_us() < until);
    ck_assert_msg(last.res[0].status == OUTBOX_PUBLISH_OK,
                  "a minute after the broker restarted the sink still gives RETRY (%s)",
                  last.res[0].message);
    conf_read_t r = conf_sink_read(k, conf_env.destination, 2, QUIET_MS);
    ck_assert_msg(find(&r, 50) && find(&r, 55),
                  "the messages reported OK before the stop and after the restart were not both "
                  "read back (event 50: %s, event 55: %s)",
                  find(&r, 50) ? "yes" : "no", find(&r, 55) ? "yes" : "no");
    conf_read_free(&r);
    conf_batch_free(&b);
    outbox_sink_close(k);
}
END_TEST

typedef struct publisher {
    outbox_sink_t *k;
    conf_batch_t *b;
    int rc;
} publisher_t;

static void *publish_thread(void *arg)
{
    publisher_t *p = arg;
    p->rc = conf_batch_publish(p->k, p->b);
    return NULL;
}

START_TEST(sink_broker_stops_mid_batch)
{
    /* The broker stops while a large call is under way: whatever the sink
     * reported OK is on the broker once it is back, and nothing is REJECT. */
    outbox_sink_t *k = conf_sink_open();
    int ordered = (outbox_sink_capabilities(k) & OUTBOX_SINK_CAP_ORDERED) != 0;
    enum { N = 20000 };
    conf_batch_t b = conf_batch_new(N);
    for (unsigned long i = 0; i < N; i++) {
        char key[32];
        snprintf(key, sizeof key, "key-%lu", ordered ? i % 16 : i);
        conf_smsg_init(&b.v[i], i, key, conf_env.destination, 1);
    }
    publisher_t p = {k, &b, 0};
    pthread_t t;
    ck_assert(pthread_create(&t, NULL, publish_thread, &p) == 0);
    conf_sleep_ms(30);
    conf_broker_stop();
    pthread_join(t, NULL);
    conf_broker_start();
    size_t ok = conf_batch_count(&b, OUTBOX_PUBLISH_OK);
    for (size_t i = 0; i < N; i++)
        ck_assert_msg(b.res[i].status != OUTBOX_PUBLISH_REJECT,
                      "the broker stopping made message %zu REJECT (%s): it would be dead-lettered",
                      i, b.res[i].message);
    /* The reader's own connection may need the broker a while to be back. */
    conf_read_t r = {0};
    int64_t until = conf_now_us() + INT64_C(20000000);
    for (;;) {
        r = conf_sink_read(k, conf_env.destination, ok, QUIET_MS);
        int missing = 0;
        for (size_t i = 0; i < N && !missing; i++)
            missing = b.res[i].status == OUTBOX_PUBLISH_OK && !find(&r, i);
        if (!missing || conf_now_us() > until)
            break;
        conf_read_free(&r);
        conf_sleep_ms(1000);
    }
    for (size_t i = 0; i < N; i++)
        ck_assert_msg(b.res[i].status != OUTBOX_PUBLISH_OK || find(&r, i),
                      "message %zu was reported OK during the broker's stop but is not on the "
                      "broker after it came back (%zu OK of %d, %zu read back)",
                      i, ok, N, r.n);
    /* Only a case that passed: a failure above already says what it saw. */
    if (ok == N)
        conf_note("that an OK meant a broker's acknowledgement while it stopped",
                  "the whole call was acknowledged before the broker stopped");
    conf_read_free(&r);
    conf_batch_free(&b);
    outbox_sink_close(k);
}
END_TEST

typedef struct resumer {
    int64_t at_us; /* when to let the broker go on */
} resumer_t;

static void *resume_broker_at(void *arg)
{
    const resumer_t *st = arg;
    int64_t left = st->at_us - conf_now_us();
    if (left > 0)
        conf_sleep_ms((int)(left / 1000));
    conf_broker_resume();
    return NULL;
}

START_TEST(sink_retry_stops_key)
{
    /* A transient failure in the middle of a key's run holds the key's
     * later messages of that call back, as a REJECT does. k1's first event
     * goes out; then the broker is paused (it keeps the connection, answers
     * nothing). A probe alone measures how long the sink waits for an
     * answer before it gives up (T). The broker goes on 1.5 T after the
     * next call starts: by then that call has given up on k1's first
     * message in it (RETRY), and a sink that went on publishing the key's
     * later messages would have them acknowledged. */
    outbox_sink_t *k = conf_sink_open();
    conf_batch_t b = conf_batch_new(6);
    conf_smsg_init(&b.v[0], 50, "k1", conf_env.destination, 1);
    conf_smsg_init(&b.v[1], 51, "k1", conf_env.destination, 1);
    conf_smsg_init(&b.v[2], 52, "k1", conf_env.destination, 1);
    conf_smsg_init(&b.v[3], 53, "k1", conf_env.destination, 1);
    conf_smsg_init(&b.v[4], 54, "k2", conf_env.destination, 1);
    conf_smsg_init(&b.v[5], 59, "k3", conf_env.destination, 1);
    conf_batch_t first = {&b.v[0], &b.msgs[0], &b.res[0], 1};
    conf_sink_ok(k, conf_batch_publish(k, &first));
    ck_assert_msg(b.res[0].status == OUTBOX_PUBLISH_OK, "k1's first message gave %s (%s)",
                  result_text(b.res[0].status), b.res[0].message);
    conf_broker_pause();
    int64_t t0 = conf_now_us();
    conf_batch_t probe = {&b.v[5], &b.msgs[5], &b.res[5], 1};
    conf_batch_publish(k, &probe);
    int64_t give_up_us = conf_now_us() - t0;
    if (b.res[5].status == OUTBOX_PUBLISH_OK) {
        conf_broker_resume();
        ck_abort_msg("a message published while the broker was paused gave OK after %lld ms: "
                     "OK before the broker acknowledged (or the pause command does not pause "
                     "the broker: %s)",
                     (long long)(give_up_us / 1000), conf_env.broker_pause);
    }
    resumer_t st = {conf_now_us() + give_up_us * 3 / 2 + 200000};
    pthread_t t;
    ck_assert(pthread_create(&t, NULL, resume_broker_at, &st) == 0);
    conf_batch_t run = {&b.v[1], &b.msgs[1], &b.res[1], 4};
    conf_batch_publish(k, &run);
    pthread_join(t, NULL);
    if (b.res[1].status == OUTBOX_PUBLISH_OK) {
        conf_note("that a RETRY in the middle of a key's run holds the key's later messages",
                  "the sink waited the pause out: k1's message in it was acknowledged");
    } else {
        for (int i = 2; i <= 3; i++)
            ck_assert_msg(b.res[i].status != OUTBOX_PUBLISH_OK,
                          "k1's event %d was acknowledged although k1's event 51 before it in "
                          "the same call gave %s (%s): a key's later messages went out after "
                          "its failure (the sink gave up after %lld ms on the paused broker)",
                          50 + i, result_text(b.res[1].status), b.res[1].message,
                          (long long)(give_up_us / 1000));
    }
    conf_batch_free(&b);
    outbox_sink_close(k);
}
END_TEST

void conf_cases_sink(conf_cases_t *c)
{
    conf_add(c, sink_round_trip, 0, 0, 60);
    conf_add(c, sink_optional_headers_absent, 0, 0, 60);
    conf_add(c, sink_header_names, 0, 0, 60);
    conf_add(c, sink_keys_and_destinations, 0, 0, 90);
    conf_add(c, sink_key_order, 0, 0, 180);
    conf_add(c, sink_dedupe, CONF_NEED_SINK_DEDUPE, 0, 60);
    conf_add(c, sink_oversize_reject, 0, 0, 60);
    conf_add(c, sink_reject_stops_key, CONF_NEED_SINK_ORDERED, 0, 60);
    conf_add(c, sink_unreachable_retry, CONF_NEED_HOST, 0, 120);
    conf_add(c, sink_no_password_printed, CONF_NEED_HOST, 0, 120);
    conf_add(c, sink_breaker_charges_nothing, CONF_NEED_HOST | CONF_NEED_RELAY_STORE, 0, 300);
    conf_add(c, sink_broker_stopped_retry, CONF_NEED_BROKER, 0, 240);
    conf_add(c, sink_broker_stops_mid_batch, CONF_NEED_BROKER, 0, 300);
    conf_add(c, sink_retry_stops_key, CONF_NEED_SINK_ORDERED | CONF_NEED_PAUSE, 0, 240);
}
