/* What the producer ceiling tests (tests/integration/SINK/test_ceiling_SINK.c)
 * have in common: a set of messages that differ in what a wire format must
 * carry, sent once through the sink and once through the ceiling, read back
 * with the sink's reader and compared byte for byte. Each test holds only
 * what is particular to its broker.
 *
 * A test defines tc_ceiling (the ceiling under test) and tc_uri (the shared
 * server's URI) before it includes this file. */
#ifndef TH_CEILINGTEST_H
#define TH_CEILINGTEST_H

#include "outbox/ceiling.h"
#include "sinktest.h"

/* The driver the ceiling was built with, registered as the bench does:
 * the sink opened by scheme is then that same code. */
static inline void tc_register(const outbox_sink_ceiling_t *c, const char *uri)
{
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_driver_register(c->driver(), &d) == OUTBOX_OK, "register: %s",
                  d.message);
    outbox_sink_t *k = th_open_sink(uri);
    ck_assert_msg(outbox_sink_driver(k) == c->driver(),
                  "the sink opened by scheme is not the ceiling's driver");
    outbox_sink_close(k);
}

static inline void *tc_open(const outbox_sink_ceiling_t *c, const char *uri)
{
    void *p = NULL;
    char err[OUTBOX_MESSAGE_MAX] = "";
    int rc = c->open(uri, &p, err, sizeof err);
    ck_assert_msg(rc == 0 && p != NULL, "ceiling open %s: %d %s", uri, rc, err);
    return p;
}

/* ------------------------------------------------------------- messages */

enum { TC_N = 10, TC_CHUNK = 3, TC_MAXH = 16 };

typedef struct tc_set {
    char id[TC_N][40], key[TC_N][16];
    outbox_header_t h[TC_N][TC_MAXH];
    outbox_row_t row[TC_N];
    outbox_message_t m[TC_N];
} tc_set_t;

static const char tc_binary_payload[] = {'b', 'i', 'n', '\0', 'a', 'r', 'y', '\xff', '\x01'};

/* TC_N messages over three keys to dest, with different attribute sets: all
 * of th_make_msg's, a bare CloudEvent, subject and dataschema, with and
 * without traceparent; payloads of JSON, binary bytes with a NUL, none at
 * all, and text beyond ASCII (in attributes too); with and without the
 * row. */
static inline void tc_make_set(tc_set_t *s, const char *dest)
{
    memset(s, 0, sizeof *s);
    static th_msg_t full;
    for (int i = 0; i < TC_N; i++) {
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
            payload = tc_binary_payload;
            len = sizeof tc_binary_payload;
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
        /* Every other message with the row it came from, whose time a
         * sink may carry. */
        if (i % 2 == 1) {
            s->row[i] = (outbox_row_t){.id = s->id[i], .route = dest, .event_id = s->id[i],
                                       .occurred_at = INT64_C(1764600000123456) + i,
                                       .payload = payload, .payload_len = len,
                                       .ordering_key = s->key[i]};
            s->m[i].row = &s->row[i];
        }
    }
}

/* The same set sent to another destination. */
static inline void tc_retarget(tc_set_t *s, const char *dest)
{
    for (int i = 0; i < TC_N; i++)
        s->m[i].route = s->m[i].destination = s->row[i].route = dest;
}

/* ------------------------------------------------------------ read back */

/* One message as a reader gave it, copied. */
typedef struct tc_got {
    char *key, *dedupe, *payload;
    size_t payload_len;
    size_t nw;
    char *wire[TC_MAXH * 2]; /* "name\nvalue", sorted: the protocol keeps no order */
} tc_got_t;

static inline char *tc_dup(const char *s)
{
    char *c = s ? strdup(s) : NULL;
    ck_assert(s == NULL || c != NULL);
    return c;
}

static inline int tc_by_text(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every message dest holds, until a second passes without one. */
static inline int tc_read_all(outbox_sink_t *k, const char *dest, tc_got_t *out, int max)
{
    outbox_sink_reader_t *r = NULL;
    ck_assert_msg(outbox_sink_reader_open(k, dest, &r) == OUTBOX_OK, "reader of %s: %s", dest,
                  outbox_sink_message(k));
    int n = 0, rc;
    outbox_received_t got = {.struct_size = sizeof got};
    while ((rc = outbox_sink_reader_read(r, 1000000, &got)) == OUTBOX_OK) {
        ck_assert_msg(n < max, "more than %d messages in %s", max, dest);
        tc_got_t *g = &out[n++];
        memset(g, 0, sizeof *g);
        g->key = tc_dup(got.key);
        g->dedupe = tc_dup(got.dedupe_id);
        g->payload = malloc(got.payload_len + 1);
        ck_assert(g->payload != NULL);
        memcpy(g->payload, got.payload, got.payload_len);
        g->payload_len = got.payload_len;
        ck_assert_msg(got.n_wire_headers <= TC_MAXH * 2, "%zu wire headers", got.n_wire_headers);
        for (size_t i = 0; i < got.n_wire_headers; i++) {
            const outbox_header_t *w = &got.wire_headers[i];
            size_t len = strlen(w->name) + strlen(w->value) + 2;
            g->wire[i] = malloc(len);
            ck_assert(g->wire[i] != NULL);
            snprintf(g->wire[i], len, "%s\n%s", w->name, w->value);
        }
        g->nw = got.n_wire_headers;
        qsort(g->wire, g->nw, sizeof *g->wire, tc_by_text);
    }
    ck_assert_msg(rc == OUTBOX_ENOTFOUND, "reader of %s: %s", dest, outbox_sink_reader_message(r));
    outbox_sink_reader_close(r);
    return n;
}

static inline void tc_got_free(tc_got_t *g)
{
    free(g->key);
    free(g->dedupe);
    free(g->payload);
    for (size_t i = 0; i < g->nw; i++)
        free(g->wire[i]);
}

static inline int tc_same_text(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* ---------------------------------------------------------- the checks */

/* The messages of tc_make_set through the sink on uri to one fresh
 * destination, and through the ceiling in chunks of TC_CHUNK to another:
 * read back, both hold the same messages in the same order, with the same
 * key, dedupe id, payload bytes and wire headers (names and values, as a
 * set), and the wire headers are not empty. with_dedupe: the protocol
 * carries the event id as its dedupe id. */
static inline void tc_expect_same_wire(const outbox_sink_ceiling_t *c, const char *uri,
                                       int with_dedupe)
{
    tc_register(c, uri);
    char a[64], b[64];
    snprintf(a, sizeof a, "%s", th_name("ceil_sink"));
    snprintf(b, sizeof b, "%s", th_name("ceil_ceiling"));
    outbox_sink_t *k = th_open_sink(uri);
    th_create(k, a);
    th_create(k, b);
    void *p = tc_open(c, uri);

    static tc_set_t s;
    tc_make_set(&s, a);
    static outbox_publish_result_t r[TC_N];
    th_publish(k, s.m, TC_N, r);
    th_expect_all(r, TC_N, OUTBOX_PUBLISH_OK, "through the sink");

    tc_retarget(&s, b);
    for (size_t i = 0; i < TC_N; i += TC_CHUNK) {
        size_t n = TC_N - i < TC_CHUNK ? TC_N - i : TC_CHUNK;
        char err[OUTBOX_MESSAGE_MAX] = "";
        int rc = c->publish(p, s.m + i, n, err, sizeof err);
        ck_assert_msg(rc == 0, "ceiling chunk at %zu: %d %s", i, rc, err);
    }
    c->close(p);

    static tc_got_t ga[TC_N + 4], gb[TC_N + 4];
    int na = tc_read_all(k, a, ga, TC_N + 4), nb = tc_read_all(k, b, gb, TC_N + 4);
    ck_assert_int_eq(na, TC_N);
    ck_assert_int_eq(nb, TC_N);
    for (int i = 0; i < TC_N; i++) {
        const tc_got_t *x = &ga[i], *y = &gb[i];
        ck_assert_msg(tc_same_text(x->key, y->key), "message %d: key %s / %s", i,
                      x->key ? x->key : "(none)", y->key ? y->key : "(none)");
        ck_assert_msg(tc_same_text(x->dedupe, y->dedupe), "message %d: dedupe id %s / %s", i,
                      x->dedupe ? x->dedupe : "(none)", y->dedupe ? y->dedupe : "(none)");
        if (with_dedupe) {
            ck_assert_msg(x->dedupe != NULL, "message %d: no dedupe id", i);
            ck_assert_str_eq(x->dedupe, s.id[i]);
        }
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
    /* The set is what it says: a NUL in a payload, an empty one. */
    ck_assert_uint_eq(ga[2].payload_len, sizeof tc_binary_payload);
    ck_assert_uint_eq(ga[3].payload_len, 0);
    for (int i = 0; i < TC_N; i++) {
        tc_got_free(&ga[i]);
        tc_got_free(&gb[i]);
    }
    th_drop(k, a);
    th_drop(k, b);
    outbox_sink_close(k);
}

/* The ceiling's open of uri fails with code and one line without
 * TH_SECRET; *p stays NULL, and close(NULL) is harmless. */
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

/* A chunk of the set to dest fails with one line. */
static inline void tc_expect_chunk_fails(const outbox_sink_ceiling_t *c, void *p, const char *dest)
{
    static tc_set_t s;
    tc_make_set(&s, dest);
    char err[OUTBOX_MESSAGE_MAX] = "";
    int rc = c->publish(p, s.m, TC_CHUNK, err, sizeof err);
    ck_assert_msg(rc == OUTBOX_CEILING_FAIL, "a chunk to %s: %d %s", dest, rc, err);
    ck_assert_msg(err[0] != '\0' && strchr(err, '\n') == NULL, "\"%s\"", err);
}

/* A chunk of the set to dest succeeds. */
static inline void tc_expect_chunk_ok(const outbox_sink_ceiling_t *c, void *p, const char *dest)
{
    static tc_set_t s;
    tc_make_set(&s, dest);
    char err[OUTBOX_MESSAGE_MAX] = "";
    int rc = c->publish(p, s.m, TC_CHUNK, err, sizeof err);
    ck_assert_msg(rc == 0, "a chunk to %s: %d %s", dest, rc, err);
}

#endif
