/* The NATS producer ceiling (drivers/sink-nats/ceiling.c) against a real
 * nats-server: it must send exactly what the sink sends. The same messages
 * go once through the sink (outbox_sink_publish) to one stream and once
 * through the ceiling, in chunks, to another; read back with the sink's
 * reader, both streams must hold the same messages, byte for byte: key,
 * Nats-Msg-Id, payload and every header under its wire name. Then the
 * ceiling's refusals: a bad URI (one line, no password), a server that is
 * not there, a chunk JetStream refuses, a server killed under it, each
 * followed by a close that must not crash.
 *
 * OUTBOX_NATS_URI names the shared server (the skip rule of
 * tests/harness); the case with a server killed starts a private one with
 * tools/services/nats.sh (argv[1]). */
#include <nats/nats.h>

#include "outbox/ceiling.h"
#include "sinktest.h"

extern const outbox_sink_ceiling_t outbox_ceiling_nats;

static const char *nats_uri;
static const outbox_sink_ceiling_t *const ceiling = &outbox_ceiling_nats;

/* The driver the ceiling was built with, registered as the bench does:
 * the sink opened by scheme is then that same code. */
static void register_driver(void)
{
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_driver_register(ceiling->driver(), &d) == OUTBOX_OK, "register: %s",
                  d.message);
    outbox_sink_t *k = th_open_sink(nats_uri);
    ck_assert_msg(outbox_sink_driver(k) == ceiling->driver(),
                  "the sink opened by scheme is not the ceiling's driver");
    outbox_sink_close(k);
}

static void *open_ceiling(const char *uri)
{
    void *p = NULL;
    char err[OUTBOX_MESSAGE_MAX] = "";
    int rc = ceiling->open(uri, &p, err, sizeof err);
    ck_assert_msg(rc == 0 && p != NULL, "ceiling open %s: %d %s", uri, rc, err);
    return p;
}

/* ------------------------------------------------------------ messages */

enum { N = 10, CHUNK = 3, MAXH = 16 };

typedef struct msgset {
    char id[N][40], key[N][16];
    outbox_header_t h[N][MAXH];
    outbox_message_t m[N];
} msgset_t;

static const char binary_payload[] = {'b', 'i', 'n', '\0', 'a', 'r', 'y', '\xff', '\x01'};

/* N messages over three keys to dest, with different attribute sets: all
 * of th_make_msg's, a bare CloudEvent, subject and dataschema, with and
 * without traceparent; payloads of JSON, binary bytes with a NUL, none at
 * all, and text beyond ASCII (in attributes too). */
static void make_set(msgset_t *s, const char *dest)
{
    memset(s, 0, sizeof *s);
    static th_msg_t full;
    for (int i = 0; i < N; i++) {
        outbox_uuid_v7(s->id[i]);
        snprintf(s->key[i], sizeof s->key[i], "k%d", i % 3);
        outbox_header_t *h = s->h[i];
        size_t nh = 0;
        if (i == 0) {
            /* Every attribute the relay may set. */
            outbox_message_t fm;
            th_make_msg(&full, &fm, dest, s->key[i], i);
            snprintf(s->id[i], sizeof s->id[i], "%s", full.id);
            for (size_t k = 0; k < fm.n_headers; k++)
                h[nh++] = fm.headers[k];
        } else {
            h[nh++] = (outbox_header_t){"id", s->id[i]};
            h[nh++] = (outbox_header_t){"source", i % 2 ? "/outbox/ceiling" : "/caf\xc3\xa9/\xc3\xbc"};
            h[nh++] = (outbox_header_t){"type", "order.shipped"};
            h[nh++] = (outbox_header_t){"specversion", "1.0"};
            if (i % 2 == 0)
                h[nh++] = (outbox_header_t){
                    "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"};
            if (i % 3 == 0) {
                h[nh++] = (outbox_header_t){"subject", "na\xc3\xafve/\xe2\x82\xac"};
                h[nh++] = (outbox_header_t){"dataschema", "https://example.com/schema/v2"};
            }
            if (i % 4 == 1)
                h[nh++] = (outbox_header_t){"datacontenttype", "application/octet-stream"};
        }
        const char *payload = "{\"n\":1}";
        size_t len = strlen(payload);
        if (i == 0) {
            payload = full.payload;
            len = strlen(full.payload);
        } else if (i == 2) {
            payload = binary_payload;
            len = sizeof binary_payload;
        } else if (i == 3) {
            payload = "";
            len = 0;
        } else if (i == 4) {
            payload = "\xce\xba\xce\xb1\xce\xbb\xce\xb7\xce\xbc\xce\xad\xcf\x81\xce\xb1 \xe4\xb8\x96\xe7\x95\x8c";
            len = strlen(payload);
        }
        s->m[i] = (outbox_message_t){.route = dest, .destination = dest, .key = s->key[i],
                                     .event_id = s->id[i], .payload = payload, .payload_len = len,
                                     .headers = h, .n_headers = nh};
    }
}

/* The same set sent to another destination. */
static void retarget(msgset_t *s, const char *dest)
{
    for (int i = 0; i < N; i++)
        s->m[i].route = s->m[i].destination = dest;
}

/* ------------------------------------------------------------ read back */

/* One message as a reader gave it, copied. */
typedef struct got {
    char *key, *dedupe, *payload;
    size_t payload_len;
    size_t nw;
    char *wire[MAXH * 2]; /* "name\nvalue", sorted: the protocol keeps no order */
} got_t;

static char *dup_or_null(const char *s)
{
    char *c = s ? strdup(s) : NULL;
    ck_assert(s == NULL || c != NULL);
    return c;
}

static int by_text(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every message dest holds, until a second passes without one. */
static int read_all(outbox_sink_t *k, const char *dest, got_t *out, int max)
{
    outbox_sink_reader_t *r = NULL;
    ck_assert_msg(outbox_sink_reader_open(k, dest, &r) == OUTBOX_OK, "reader of %s: %s", dest,
                  outbox_sink_message(k));
    int n = 0, rc;
    outbox_received_t got = {.struct_size = sizeof got};
    while ((rc = outbox_sink_reader_read(r, 1000000, &got)) == OUTBOX_OK) {
        ck_assert_msg(n < max, "more than %d messages in %s", max, dest);
        got_t *g = &out[n++];
        memset(g, 0, sizeof *g);
        g->key = dup_or_null(got.key);
        g->dedupe = dup_or_null(got.dedupe_id);
        g->payload = malloc(got.payload_len + 1);
        ck_assert(g->payload != NULL);
        memcpy(g->payload, got.payload, got.payload_len);
        g->payload_len = got.payload_len;
        ck_assert_msg(got.n_wire_headers <= MAXH * 2, "%zu wire headers", got.n_wire_headers);
        for (size_t i = 0; i < got.n_wire_headers; i++) {
            const outbox_header_t *w = &got.wire_headers[i];
            size_t len = strlen(w->name) + strlen(w->value) + 2;
            g->wire[i] = malloc(len);
            ck_assert(g->wire[i] != NULL);
            snprintf(g->wire[i], len, "%s\n%s", w->name, w->value);
        }
        g->nw = got.n_wire_headers;
        qsort(g->wire, g->nw, sizeof *g->wire, by_text);
    }
    ck_assert_msg(rc == OUTBOX_ENOTFOUND, "reader of %s: %s", dest, outbox_sink_reader_message(r));
    outbox_sink_reader_close(r);
    return n;
}

static void got_free(got_t *g)
{
    free(g->key);
    free(g->dedupe);
    free(g->payload);
    for (size_t i = 0; i < g->nw; i++)
        free(g->wire[i]);
}

static int same_text(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* -------------------------------------------------------------- cases */

START_TEST(same_wire_as_sink)
{
    register_driver();
    char a[64], b[64];
    snprintf(a, sizeof a, "%s", th_name("ceil_sink"));
    snprintf(b, sizeof b, "%s", th_name("ceil_ceiling"));
    outbox_sink_t *k = th_open_sink(nats_uri);
    th_create(k, a);
    th_create(k, b);
    void *p = open_ceiling(nats_uri);

    static msgset_t s;
    make_set(&s, a);
    static outbox_publish_result_t r[N];
    th_publish(k, s.m, N, r);
    th_expect_all(r, N, OUTBOX_PUBLISH_OK, "through the sink");

    retarget(&s, b);
    for (size_t i = 0; i < N; i += CHUNK) {
        size_t n = N - i < CHUNK ? N - i : CHUNK;
        char err[OUTBOX_MESSAGE_MAX] = "";
        int rc = ceiling->publish(p, s.m + i, n, err, sizeof err);
        ck_assert_msg(rc == 0, "ceiling chunk at %zu: %d %s", i, rc, err);
    }
    ceiling->close(p);

    static got_t ga[N + 4], gb[N + 4];
    int na = read_all(k, a, ga, N + 4), nb = read_all(k, b, gb, N + 4);
    ck_assert_int_eq(na, N);
    ck_assert_int_eq(nb, N);
    for (int i = 0; i < N; i++) {
        const got_t *x = &ga[i], *y = &gb[i];
        ck_assert_msg(same_text(x->key, y->key), "message %d: key %s / %s", i,
                      x->key ? x->key : "(none)", y->key ? y->key : "(none)");
        ck_assert_msg(x->dedupe != NULL && same_text(x->dedupe, y->dedupe),
                      "message %d: dedupe id %s / %s", i, x->dedupe ? x->dedupe : "(none)",
                      y->dedupe ? y->dedupe : "(none)");
        ck_assert_str_eq(x->dedupe, s.id[i]);
        ck_assert_msg(x->payload_len == y->payload_len &&
                          memcmp(x->payload, y->payload, x->payload_len) == 0,
                      "message %d: payloads differ (%zu / %zu bytes)", i, x->payload_len,
                      y->payload_len);
        ck_assert_msg(x->nw > 0, "message %d: the sink's copy has no wire headers", i);
        for (size_t j = 0; j < x->nw || j < y->nw; j++)
            ck_assert_msg(j < x->nw && j < y->nw && strcmp(x->wire[j], y->wire[j]) == 0,
                          "message %d, wire header %zu: sink \"%s\", ceiling \"%s\"", i, j,
                          j < x->nw ? x->wire[j] : "(none)", j < y->nw ? y->wire[j] : "(none)");
    }
    /* The set itself is what it says: a NUL in a payload, an empty one. */
    ck_assert_uint_eq(ga[2].payload_len, sizeof binary_payload);
    ck_assert_uint_eq(ga[3].payload_len, 0);
    for (int i = 0; i < N; i++) {
        got_free(&ga[i]);
        got_free(&gb[i]);
    }
    th_drop(k, a);
    th_drop(k, b);
    outbox_sink_close(k);
}
END_TEST

START_TEST(bad_uri_is_usage)
{
    register_driver();
    /* Refused by the driver's own parser, the password masked. */
    static const char *const bad[] = {
        "nats://alice:" TH_SECRET "@127.0.0.1:4222/s?timeout=ten",
        "nats://alice:" TH_SECRET "@127.0.0.1:4222/s?bogus=1",
        "nats://alice:" TH_SECRET "@127.0.0.1:99999/s",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        void *p = (void *)1;
        char err[OUTBOX_MESSAGE_MAX] = "";
        int rc = ceiling->open(bad[i], &p, err, sizeof err);
        ck_assert_msg(rc == OUTBOX_CEILING_USAGE, "%zu: %d %s", i, rc, err);
        ck_assert_ptr_null(p);
        ck_assert_msg(err[0] != '\0' && strchr(err, '\n') == NULL, "%zu: \"%s\"", i, err);
        ck_assert_msg(strstr(err, TH_SECRET) == NULL, "%zu: the password shows: %s", i, err);
        ceiling->close(p);
    }
}
END_TEST

START_TEST(refused_port_fails)
{
    register_driver();
    void *p = (void *)1;
    char err[OUTBOX_MESSAGE_MAX] = "";
    int rc = ceiling->open("nats://alice:" TH_SECRET "@127.0.0.1:1/s?connect_timeout=500ms", &p,
                           err, sizeof err);
    ck_assert_msg(rc == OUTBOX_CEILING_FAIL, "%d %s", rc, err);
    ck_assert_ptr_null(p);
    ck_assert_msg(err[0] != '\0' && strchr(err, '\n') == NULL, "\"%s\"", err);
    ck_assert_msg(strstr(err, TH_SECRET) == NULL, "the password shows: %s", err);
    ceiling->close(p);
}
END_TEST

START_TEST(refused_chunk_fails)
{
    /* No stream captures the subject: JetStream has no responder; the
     * chunk fails, and the producer still publishes and closes. */
    register_driver();
    char nostream[64], dest[64];
    snprintf(nostream, sizeof nostream, "%s", th_name("ceil_nostream"));
    outbox_sink_t *k = th_open_dest(nats_uri, "ceil_after", dest);
    void *p = open_ceiling(nats_uri);
    static msgset_t s;
    make_set(&s, nostream);
    char err[OUTBOX_MESSAGE_MAX] = "";
    int rc = ceiling->publish(p, s.m, CHUNK, err, sizeof err);
    ck_assert_msg(rc == OUTBOX_CEILING_FAIL, "%d %s", rc, err);
    ck_assert_msg(err[0] != '\0' && strchr(err, '\n') == NULL, "\"%s\"", err);
    retarget(&s, dest);
    rc = ceiling->publish(p, s.m, CHUNK, err, sizeof err);
    ck_assert_msg(rc == 0, "after a refused chunk: %d %s", rc, err);
    ceiling->close(p);
    th_drop(k, dest);
    outbox_sink_close(k);
}
END_TEST

START_TEST(server_killed_fails)
{
    /* A private server killed after open: the chunk fails within the
     * sink's timeout, and close after it does not crash. */
    register_driver();
    char uri[256], dir[256];
    snprintf(dir, sizeof dir, "%s", th_private_dir("killed"));
    th_service_start("", dir, "OUTBOX_NATS_URI", uri, sizeof uri);
    snprintf(uri + strlen(uri), sizeof uri - strlen(uri), "?timeout=2s&reconnect_wait=100ms");
    outbox_sink_t *k = th_open_sink(uri);
    th_create(k, "ceil_killed");
    void *p = open_ceiling(uri);
    static msgset_t s;
    make_set(&s, "ceil_killed");
    char err[OUTBOX_MESSAGE_MAX] = "";
    ck_assert_msg(ceiling->publish(p, s.m, CHUNK, err, sizeof err) == 0, "%s", err);
    th_service("kill", dir);
    int rc = ceiling->publish(p, s.m + CHUNK, CHUNK, err, sizeof err);
    ck_assert_msg(rc == OUTBOX_CEILING_FAIL, "%d %s", rc, err);
    ck_assert_msg(err[0] != '\0' && strchr(err, '\n') == NULL, "\"%s\"", err);
    ceiling->close(p);
    outbox_sink_close(k);
}
END_TEST

START_TEST(names_client)
{
    ck_assert_str_eq(ceiling->name, "nats");
    ck_assert_uint_eq(ceiling->struct_size, sizeof(outbox_sink_ceiling_t));
    ck_assert_msg(strncmp(ceiling->client(), "libnats ", 8) == 0, "%s", ceiling->client());
}
END_TEST

TH_SINK_MAIN("ceiling_nats", 120, "OUTBOX_NATS_URI", "nats", nats_uri, names_client,
             same_wire_as_sink, bad_uri_is_usage, refused_port_fails, refused_chunk_fails,
             th_script() ? server_killed_fails : NULL)
