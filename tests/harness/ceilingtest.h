/* What the producer ceilings' tests (tests/integration/SINK/
 * test_ceiling_SINK.c) share: the same messages published once through
 * the sink (outbox_sink_publish) and once through the sink's ceiling
 * (outbox/ceiling.h), each to a destination of its own, then both read
 * back with the sink's reader and compared message by message: key, dedupe
 * id, payload bytes and every header under its wire name. A ceiling that
 * builds its messages differently from its driver fails here. Also the
 * ceiling's answers to a URI it must refuse and to a receiver that is not
 * there.
 *
 * The ceiling is compiled with the driver's sources; its driver is
 * registered before anything is opened, so the sink the test opens is the
 * same code. */
#ifndef TH_CEILINGTEST_H
#define TH_CEILINGTEST_H

#include "outbox/ceiling.h"
#include "sinktest.h"

#define TC_N 11      /* messages in the set */
#define TC_CHUNK 3   /* the ceiling's chunk */
#define TC_MAXH 16   /* headers of a message */

/* One message of the set and what it points to. */
typedef struct tc_msg {
    char id[40], key[16], payload[64];
    size_t payload_len;
    outbox_header_t h[TC_MAXH];
} tc_msg_t;

typedef struct tc_set {
    tc_msg_t t[TC_N];
    outbox_message_t a[TC_N]; /* to destination A, through the sink */
    outbox_message_t b[TC_N]; /* the same to destination B, through the ceiling */
} tc_set_t;

/* The set: four keys, header sets that differ (traceparent on most,
 * subject and dataschema on some, datacontenttype not on all), JSON with
 * non-ASCII text, an empty payload, and, when nul_ok, a binary payload
 * with a NUL byte in it. */
static inline void tc_make(tc_set_t *s, const char *route, const char *dest_a, const char *dest_b,
                           int nul_ok)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < TC_N; i++) {
        tc_msg_t *t = &s->t[i];
        outbox_uuid_v7(t->id);
        snprintf(t->key, sizeof t->key, "key-%d", i % 4);
        if (i == 2) {
            t->payload_len = 0;
        } else if (i == 5 && nul_ok) {
            static const char bin[] = {'b', 'i', 'n', '\0', '\x01', '\xff', 'e', 'n', 'd'};
            memcpy(t->payload, bin, sizeof bin);
            t->payload_len = sizeof bin;
        } else {
            t->payload_len = (size_t)snprintf(t->payload, sizeof t->payload,
                                              "{\"n\":%d,\"s\":\"caf\xc3\xa9 \xe2\x82\xac\"}", i);
        }
        size_t n = 0;
        t->h[n++] = (outbox_header_t){"id", t->id};
        t->h[n++] = (outbox_header_t){"type", i % 2 ? "order.created" : "order.shipped"};
        t->h[n++] = (outbox_header_t){"source", "/outbox/ceiling test"};
        t->h[n++] = (outbox_header_t){"specversion", "1.0"};
        t->h[n++] = (outbox_header_t){"time", "2026-12-01T15:00:00.000000Z"};
        if (i % 5 != 4)
            t->h[n++] = (outbox_header_t){"datacontenttype",
                                          i == 5 && nul_ok ? "application/octet-stream"
                                                           : "application/json"};
        t->h[n++] = (outbox_header_t){"partitionkey", t->key};
        if (i % 4 != 3)
            t->h[n++] = (outbox_header_t){
                "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"};
        if (i % 2 == 0)
            t->h[n++] = (outbox_header_t){"subject", "orders/\xc3\xa9t\xc3\xa9"};
        if (i % 3 == 0)
            t->h[n++] = (outbox_header_t){"dataschema", "https://example.com/schema/order.json"};
        t->h[n++] = (outbox_header_t){"tenantid", "0190a0e4-0000-7000-8000-000000000001"};
        if (i % 3 == 1)
            t->h[n++] = (outbox_header_t){"correlationid", "0190a0e4-0000-7000-8000-000000000002"};
        t->h[n++] = (outbox_header_t){"hlc", "123456789"};
        s->a[i] = (outbox_message_t){.route = route, .destination = dest_a, .key = t->key,
                                     .event_id = t->id, .payload = t->payload,
                                     .payload_len = t->payload_len, .headers = t->h,
                                     .n_headers = n};
        s->b[i] = s->a[i];
        s->b[i].destination = dest_b;
    }
}

/* --------------------------------------------------------- reading back */

/* A received message, copied. */
typedef struct tc_got {
    char *key, *dedupe, *payload, *id;
    size_t payload_len;
    outbox_header_t wire[64];
    size_t n_wire;
} tc_got_t;

static inline char *tc_dup(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* Every message of dest, in the order the reader gives them; *n of them. */
static inline tc_got_t *tc_read(outbox_sink_t *k, const char *dest, size_t want, size_t *n)
{
    outbox_sink_reader_t *r = NULL;
    ck_assert_msg(outbox_sink_reader_open(k, dest, &r) == OUTBOX_OK, "reader %s: %s", dest,
                  outbox_sink_message(k));
    tc_got_t *g = calloc(want + 8, sizeof *g);
    *n = 0;
    outbox_received_t m = {.struct_size = sizeof m};
    int rc;
    /* Once all are in, a short wait for any extra. */
    while ((rc = outbox_sink_reader_read(r, *n < want ? 10000000 : 500000, &m)) == OUTBOX_OK) {
        ck_assert_msg(*n < want + 8, "%s: more messages than published", dest);
        tc_got_t *x = &g[(*n)++];
        x->key = tc_dup(m.key);
        x->dedupe = tc_dup(m.dedupe_id);
        x->payload = malloc(m.payload_len + 1);
        memcpy(x->payload, m.payload, m.payload_len);
        x->payload_len = m.payload_len;
        for (size_t h = 0; h < m.n_headers; h++)
            if (strcmp(m.headers[h].name, "id") == 0)
                x->id = tc_dup(m.headers[h].value);
        ck_assert_msg(m.n_wire_headers <= 64, "%zu wire headers", m.n_wire_headers);
        for (size_t h = 0; h < m.n_wire_headers; h++)
            x->wire[x->n_wire++] = (outbox_header_t){tc_dup(m.wire_headers[h].name),
                                                     tc_dup(m.wire_headers[h].value)};
    }
    ck_assert_msg(rc == OUTBOX_ENOTFOUND, "reading %s: %d %s", dest, rc,
                  outbox_sink_reader_message(r));
    outbox_sink_reader_close(r);
    return g;
}

static inline void tc_free(tc_got_t *g, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(g[i].key);
        free(g[i].dedupe);
        free(g[i].payload);
        free(g[i].id);
        for (size_t h = 0; h < g[i].n_wire; h++) {
            free((char *)g[i].wire[h].name);
            free((char *)g[i].wire[h].value);
        }
    }
    free(g);
}

static inline int tc_header_cmp(const void *a, const void *b)
{
    const outbox_header_t *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->value, y->value);
}

static inline int tc_str_eq(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* Message a (from the sink) and b (from the ceiling) carry the same key,
 * dedupe id, payload bytes and wire headers (as sets when !ordered: the
 * protocol does not keep their order). */
static inline void tc_expect_same(tc_got_t *a, tc_got_t *b, int ordered)
{
    const char *id = a->id;
    ck_assert_msg(tc_str_eq(a->key, b->key), "%s: key %s (sink) vs %s (ceiling)", id,
                  a->key ? a->key : "(none)", b->key ? b->key : "(none)");
    ck_assert_msg(tc_str_eq(a->dedupe, b->dedupe), "%s: dedupe id %s (sink) vs %s (ceiling)", id,
                  a->dedupe ? a->dedupe : "(none)", b->dedupe ? b->dedupe : "(none)");
    ck_assert_msg(a->payload_len == b->payload_len &&
                      memcmp(a->payload, b->payload, a->payload_len) == 0,
                  "%s: payloads differ (%zu bytes from the sink, %zu from the ceiling)", id,
                  a->payload_len, b->payload_len);
    ck_assert_msg(a->n_wire > 0, "%s: no wire headers read back: nothing to compare", id);
    if (!ordered) {
        qsort(a->wire, a->n_wire, sizeof a->wire[0], tc_header_cmp);
        qsort(b->wire, b->n_wire, sizeof b->wire[0], tc_header_cmp);
    }
    for (size_t h = 0; h < a->n_wire || h < b->n_wire; h++) {
        ck_assert_msg(h < a->n_wire && h < b->n_wire,
                      "%s: %zu wire headers from the sink, %zu from the ceiling; first extra: %s",
                      id, a->n_wire, b->n_wire,
                      h < a->n_wire ? a->wire[h].name : b->wire[h].name);
        ck_assert_msg(strcmp(a->wire[h].name, b->wire[h].name) == 0 &&
                          strcmp(a->wire[h].value, b->wire[h].value) == 0,
                      "%s: wire header %zu: %s=%s (sink) vs %s=%s (ceiling)", id, h,
                      a->wire[h].name, a->wire[h].value, b->wire[h].name, b->wire[h].value);
    }
}

/* ---------------------------------------------------------------- cases */

/* Registers the ceiling's driver (as the bench does). */
static inline void tc_register(const outbox_sink_ceiling_t *c)
{
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_driver_register(c->driver(), &d) == OUTBOX_OK, "register: %s", d.message);
    ck_assert_msg(c->client() != NULL && c->client()[0] != '\0', "no client named");
}

/* The set through the sink to A and through the ceiling to B (both made
 * by the sink), read back and compared; ordered: the wire keeps the
 * headers' order. */
static inline void tc_expect_sink_equals_ceiling(const outbox_sink_ceiling_t *c, const char *uri,
                                                 int nul_ok, int ordered)
{
    tc_register(c);
    outbox_sink_t *k = th_open_sink(uri);
    ck_assert_ptr_eq(outbox_sink_driver(k), c->driver());
    char dest_a[64], dest_b[64];
    snprintf(dest_a, sizeof dest_a, "%s", th_name("ceil_a"));
    snprintf(dest_b, sizeof dest_b, "%s", th_name("ceil_b"));
    th_create(k, dest_a);
    th_create(k, dest_b);

    static tc_set_t s;
    tc_make(&s, th_name("ceil_route"), dest_a, dest_b, nul_ok);
    outbox_publish_result_t r[TC_N];
    th_publish(k, s.a, TC_N, r);
    th_expect_all(r, TC_N, OUTBOX_PUBLISH_OK, "through the sink");

    void *p = NULL;
    char err[512] = "";
    ck_assert_msg(c->open(uri, &p, err, sizeof err) == 0, "ceiling open: %s", err);
    for (size_t i = 0; i < TC_N; i += TC_CHUNK) {
        size_t n = TC_N - i < TC_CHUNK ? TC_N - i : TC_CHUNK;
        ck_assert_msg(c->publish(p, &s.b[i], n, err, sizeof err) == 0, "ceiling publish: %s", err);
    }
    c->close(p);

    size_t na, nb;
    tc_got_t *ga = tc_read(k, dest_a, TC_N, &na);
    tc_got_t *gb = tc_read(k, dest_b, TC_N, &nb);
    ck_assert_uint_eq(na, TC_N);
    ck_assert_uint_eq(nb, TC_N);
    for (size_t i = 0; i < na; i++) {
        ck_assert_msg(ga[i].id != NULL, "a message from the sink without its id");
        size_t j = 0;
        while (j < nb && !tc_str_eq(ga[i].id, gb[j].id))
            j++;
        ck_assert_msg(j < nb, "%s: sent by the sink, not by the ceiling", ga[i].id);
        tc_expect_same(&ga[i], &gb[j], ordered);
    }
    tc_free(ga, na);
    tc_free(gb, nb);
    th_drop(k, dest_a);
    th_drop(k, dest_b);
    outbox_sink_close(k);
}

/* Nothing listens at uri: open or else publish fails, with a reason. */
static inline void tc_expect_refused(const outbox_sink_ceiling_t *c, const char *uri,
                                     const char *dest)
{
    tc_register(c);
    static tc_set_t s;
    tc_make(&s, dest, dest, dest, 0);
    void *p = NULL;
    char err[512] = "";
    int rc = c->open(uri, &p, err, sizeof err);
    if (rc == 0) {
        rc = c->publish(p, s.b, TC_CHUNK, err, sizeof err);
        c->close(p);
    } else {
        ck_assert_ptr_null(p);
    }
    fprintf(stderr, "failed: %s\n", err);
    ck_assert_msg(rc == OUTBOX_CEILING_FAIL, "nothing listens, yet %d (%s)", rc, err);
    ck_assert_msg(err[0] != '\0' && strchr(err, '\n') == NULL, "reason: \"%s\"", err);
    ck_assert_msg(strstr(err, TH_SECRET) == NULL, "the password shows: %s", err);
}

/* The ceiling opens uri, and a chunk to dest is refused by the broker:
 * OUTBOX_CEILING_FAIL, with want in the reason. */
static inline void tc_expect_chunk_refused(const outbox_sink_ceiling_t *c, const char *uri,
                                           const char *dest, const char *want)
{
    tc_register(c);
    static tc_set_t s;
    tc_make(&s, dest, dest, dest, 0);
    void *p = NULL;
    char err[512] = "";
    ck_assert_msg(c->open(uri, &p, err, sizeof err) == 0, "open: %s", err);
    int rc = c->publish(p, s.b, TC_CHUNK, err, sizeof err);
    c->close(p);
    fprintf(stderr, "refused chunk: %s\n", err);
    ck_assert_msg(rc == OUTBOX_CEILING_FAIL, "a refusal, yet %d (%s)", rc, err);
    ck_assert_msg(strstr(err, want) != NULL && strchr(err, '\n') == NULL,
                  "reason \"%s\" lacks \"%s\"", err, want);
}


/* The ceiling opened on uri, which must succeed. */
static inline void *tc_open(const outbox_sink_ceiling_t *c, const char *uri)
{
    void *p = NULL;
    char err[OUTBOX_MESSAGE_MAX] = "";
    int rc = c->open(uri, &p, err, sizeof err);
    ck_assert_msg(rc == 0 && p != NULL, "ceiling open %s: %d %s", uri, rc, err);
    return p;
}

/* The ceiling's open of uri fails with code and one line without
 * TH_SECRET; the producer stays NULL, and close(NULL) is harmless. */
static inline void tc_expect_open_fails(const outbox_sink_ceiling_t *c, const char *uri, int code)
{
    void *p = (void *)1;
    char err[OUTBOX_MESSAGE_MAX] = "";
    int rc = c->open(uri, &p, err, sizeof err);
    ck_assert_msg(rc == code, "open %s: got %d (%s), expected %d", uri, rc, err, code);
    ck_assert_ptr_null(p);
    ck_assert_msg(err[0] != '\0' && strchr(err, '\n') == NULL, "open %s: \"%s\"", uri, err);
    ck_assert_msg(strstr(err, TH_SECRET) == NULL, "open %s: the password shows: %s", uri, err);
    c->close(p);
}

/* The ceiling refuses bad_uri (which holds TH_SECRET) at open with
 * OUTBOX_CEILING_USAGE and one line without the secret. */
static inline void tc_expect_usage(const outbox_sink_ceiling_t *c, const char *bad_uri)
{
    tc_register(c);
    tc_expect_open_fails(c, bad_uri, OUTBOX_CEILING_USAGE);
}

/* A chunk of the set to dest on an open producer: refused with one line
 * (ok 0), or taken (ok 1). */
static inline void tc_expect_chunk(const outbox_sink_ceiling_t *c, void *p, const char *dest,
                                   int ok)
{
    static tc_set_t s;
    tc_make(&s, dest, dest, dest, 0);
    char err[OUTBOX_MESSAGE_MAX] = "";
    int rc = c->publish(p, s.b, TC_CHUNK, err, sizeof err);
    if (ok)
        ck_assert_msg(rc == 0, "a chunk to %s: %d %s", dest, rc, err);
    else
        ck_assert_msg(rc == OUTBOX_CEILING_FAIL && err[0] != '\0' && strchr(err, '\n') == NULL,
                      "a chunk to %s: %d \"%s\"", dest, rc, err);
}

#endif
