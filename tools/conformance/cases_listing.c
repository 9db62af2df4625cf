/* Conformance cases: what an operator lists (ABI 1.3): every route with
 * its counts, and a route's dead rows page by page. */
#include <stdio.h>
#include <string.h>

#include "conf_int.h"

#define ROUTE "conf.list"

/* ---------------------------------------------------------------- routes */

#define MAX_ROUTES 8

typedef struct seen_routes {
    char name[MAX_ROUTES][64];
    outbox_stats_t st[MAX_ROUTES];
    size_t n, extra;
} seen_routes_t;

static int note_route(void *ctx, const char *route, const outbox_stats_t *st)
{
    seen_routes_t *r = ctx;
    if (r->n == MAX_ROUTES) {
        r->extra++;
        return 0;
    }
    snprintf(r->name[r->n], sizeof r->name[r->n], "%s", route);
    r->st[r->n++] = *st;
    return 0;
}

static void check_route(const seen_routes_t *r, size_t i, const char *name, outbox_store_t *s,
                        uint64_t pend, uint64_t proc, uint64_t pub, uint64_t dead)
{
    ck_assert_msg(strcmp(r->name[i], name) == 0, "route %zu listed is \"%s\", expected \"%s\"", i,
                  r->name[i], name);
    const outbox_stats_t *st = &r->st[i];
    ck_assert_msg(st->pending == pend && st->processing == proc && st->published == pub &&
                      st->dead == dead,
                  "routes lists %s with %llu pending, %llu processing, %llu published, %llu "
                  "dead; expected %llu, %llu, %llu, %llu",
                  name, (unsigned long long)st->pending, (unsigned long long)st->processing,
                  (unsigned long long)st->published, (unsigned long long)st->dead,
                  (unsigned long long)pend, (unsigned long long)proc, (unsigned long long)pub,
                  (unsigned long long)dead);
    outbox_stats_t want = conf_stats(s, name);
    ck_assert_msg(st->oldest_pending_created_at == want.oldest_pending_created_at,
                  "routes gives %s an oldest pending created_at of %lld, stats %lld", name,
                  (long long)st->oldest_pending_created_at,
                  (long long)want.oldest_pending_created_at);
}

START_TEST(routes_counts)
{
    outbox_store_t *s = conf_open();
    seen_routes_t r = {0};
    conf_ok(s, outbox_store_routes(s, note_route, &r));
    ck_assert_msg(r.n == 0 && r.extra == 0, "routes of an empty relation listed %zu routes",
                  r.n + r.extra);

    /* Staged in the order c, a, b: the listing is sorted by route anyway. */
    conf_stage(s, NULL, ROUTE ".c", 200, 3, NULL);
    conf_stage(s, NULL, ROUTE ".a", 0, 4, NULL);
    conf_stage(s, NULL, ROUTE ".b", 100, 2, NULL);

    /* a: one of each status. */
    conf_claim_t c = conf_claim(s, ROUTE ".a", 3, CONF_LONG_LEASE_US, 0);
    ck_assert_uint_eq(c.n, 3);
    int applied = 0;
    conf_ok(s, conf_settle1(s, &c.fence, c.rows[0].id, OUTBOX_SETTLE_PUBLISHED, 0, NULL, &applied));
    conf_ok(s, conf_settle1(s, &c.fence, c.rows[1].id, OUTBOX_SETTLE_DEAD, 0, "no", &applied));
    conf_claim_free(&c);
    /* b: all published. */
    c = conf_claim(s, ROUTE ".b", 10, CONF_LONG_LEASE_US, 0);
    ck_assert_uint_eq(c.n, 2);
    conf_settle_all(s, &c, OUTBOX_SETTLE_PUBLISHED);
    conf_claim_free(&c);
    /* c: one dead, two pending. */
    c = conf_claim(s, ROUTE ".c", 1, CONF_LONG_LEASE_US, 0);
    ck_assert_uint_eq(c.n, 1);
    conf_settle_all(s, &c, OUTBOX_SETTLE_DEAD);
    conf_claim_free(&c);

    memset(&r, 0, sizeof r);
    conf_ok(s, outbox_store_routes(s, note_route, &r));
    ck_assert_msg(r.n == 3 && r.extra == 0, "routes listed %zu routes, expected 3",
                  r.n + r.extra);
    check_route(&r, 0, ROUTE ".a", s, 1, 1, 1, 1);
    check_route(&r, 1, ROUTE ".b", s, 0, 0, 2, 0);
    check_route(&r, 2, ROUTE ".c", s, 2, 0, 0, 1);
    ck_assert_msg(r.st[1].oldest_pending_created_at == 0,
                  "route b has nothing pending, but an oldest pending created_at of %lld",
                  (long long)r.st[1].oldest_pending_created_at);
    outbox_store_close(s);
}
END_TEST

/* ------------------------------------------------------------- dead list */

#define MAX_PAGE 16

typedef struct page {
    conf_row_t row[MAX_PAGE];
    char event_type[MAX_PAGE][32];
    size_t n, extra;
} page_t;

static int note_row(void *ctx, const outbox_row_t *row)
{
    page_t *p = ctx;
    if (p->n == MAX_PAGE) {
        p->extra++;
        return 0;
    }
    conf_row_t *r = &p->row[p->n];
    memset(r, 0, sizeof *r);
    snprintf(r->id, sizeof r->id, "%s", row->id ? row->id : "");
    r->n = conf_event_n(row->event_id);
    snprintf(r->route, sizeof r->route, "%s", row->route ? row->route : "");
    r->has_key = row->ordering_key != NULL;
    snprintf(r->key, sizeof r->key, "%s", row->ordering_key ? row->ordering_key : "");
    r->attempts = row->attempts;
    r->created_at = row->created_at;
    r->has_last_error = row->last_error != NULL;
    snprintf(r->last_error, sizeof r->last_error, "%s", row->last_error ? row->last_error : "");
    snprintf(p->event_type[p->n], sizeof p->event_type[p->n], "%s",
             row->event_type ? row->event_type : "");
    p->n++;
    return 0;
}

static page_t list_page(outbox_store_t *s, const char *after, size_t limit, char *next)
{
    page_t p = {0};
    conf_ok(s, outbox_store_dead_list(s, ROUTE, after, limit, note_row, &p, next));
    ck_assert_msg(p.extra == 0, "a page of at most %zu rows gave more than %d", limit, MAX_PAGE);
    ck_assert_msg(p.n <= limit, "a page of at most %zu rows gave %zu", limit, p.n);
    return p;
}

/* What each dead event should look like. */
typedef struct want {
    unsigned long n;
    char id[OUTBOX_UUID_STRLEN + 1];
    int32_t attempts;
    char error[64];
    int has_key;
    int64_t created_at;
} want_t;

static void error_of(unsigned long n, char *out, size_t size)
{
    /* Plain text: drivers may fold the line breaks of an error when they
     * store it, and the listing gives back what was stored. */
    snprintf(out, size, "event %lu failed for good", n);
}

static void check_rows(const page_t *p, size_t from, const want_t *w, size_t nw, const char *what)
{
    for (size_t i = 0; i < p->n; i++) {
        ck_assert_msg(from + i < nw, "%s: row %zu (event %lu) is past the %zu dead rows", what, i,
                      p->row[i].n, nw);
        const want_t *e = &w[from + i];
        const conf_row_t *r = &p->row[i];
        ck_assert_msg(r->n == e->n && strcmp(r->id, e->id) == 0,
                      "%s: row %zu is event %lu (id %s), expected event %lu (id %s) in claim "
                      "order",
                      what, i, r->n, r->id, e->n, e->id);
        ck_assert_msg(r->attempts == e->attempts, "%s: event %lu has attempts %d, expected %d",
                      what, e->n, (int)r->attempts, (int)e->attempts);
        ck_assert_msg(r->has_last_error && strcmp(r->last_error, e->error) == 0,
                      "%s: event %lu has last_error \"%s\", expected \"%s\"", what, e->n,
                      r->has_last_error ? r->last_error : "(NULL)", e->error);
        ck_assert_msg(r->has_key == e->has_key && (!e->has_key || strcmp(r->key, "k") == 0),
                      "%s: event %lu has ordering key %s, expected %s", what, e->n,
                      r->has_key ? r->key : "(NULL)", e->has_key ? "k" : "none");
        ck_assert_msg(strcmp(r->route, ROUTE) == 0, "%s: event %lu has route \"%s\"", what, e->n,
                      r->route);
        ck_assert_msg(strcmp(p->event_type[i], "conformance.test") == 0,
                      "%s: event %lu has event type \"%s\"", what, e->n, p->event_type[i]);
        ck_assert_msg(r->created_at == e->created_at,
                      "%s: event %lu has created_at %lld, the claim said %lld", what, e->n,
                      (long long)r->created_at, (long long)e->created_at);
    }
}

START_TEST(dead_list_pages)
{
    outbox_store_t *s = conf_open();
    char next[OUTBOX_UUID_STRLEN + 1] = "x";
    page_t p = list_page(s, NULL, 10, next);
    ck_assert_msg(p.n == 0 && next[0] == '\0', "an empty route listed %zu dead rows", p.n);

    /* Events 0..4 in one staging call (one created_at: the id decides),
     * 5..6 with a key in a second; another route's dead rows beside them. */
    conf_stage(s, NULL, ROUTE, 0, 5, NULL);
    conf_sleep_ms(2);
    conf_stage(s, NULL, ROUTE, 5, 2, "k");
    conf_stage(s, NULL, ROUTE ".other", 100, 2, NULL);
    conf_claim_t o = conf_claim(s, ROUTE ".other", 10, CONF_LONG_LEASE_US, 0);
    conf_settle_all(s, &o, OUTBOX_SETTLE_DEAD);
    conf_claim_free(&o);

    conf_claim_t c = conf_claim(s, ROUTE, 10, CONF_LONG_LEASE_US, 0);
    ck_assert_uint_eq(c.n, 7);
    want_t w[7];
    size_t nw = 0;
    char published_id[OUTBOX_UUID_STRLEN + 1] = "";
    for (size_t i = 0; i < c.n; i++) {
        const conf_row_t *r = &c.rows[i];
        int applied = 0;
        if (r->n == 3) { /* published: not listed */
            snprintf(published_id, sizeof published_id, "%s", r->id);
            conf_ok(s, conf_settle1(s, &c.fence, r->id, OUTBOX_SETTLE_PUBLISHED, 0, NULL, &applied));
            continue;
        }
        want_t *e = &w[nw++];
        e->n = r->n;
        snprintf(e->id, sizeof e->id, "%s", r->id);
        e->has_key = r->n >= 5;
        e->created_at = r->created_at;
        error_of(r->n, e->error, sizeof e->error);
        if (r->n <= 1) { /* retried once, then dead at the second attempt */
            e->attempts = 2;
            conf_ok(s, conf_settle1(s, &c.fence, r->id, OUTBOX_SETTLE_RESCHEDULE, 0, "transient",
                                    &applied));
        } else {
            e->attempts = 1;
            conf_ok(s, conf_settle1(s, &c.fence, r->id, OUTBOX_SETTLE_DEAD, 0, e->error, &applied));
        }
        ck_assert_msg(applied == 1, "settling event %lu did not apply", r->n);
    }
    conf_claim_free(&c);
    ck_assert_uint_eq(nw, 6);
    c = conf_claim(s, ROUTE, 10, CONF_LONG_LEASE_US, 0);
    ck_assert_msg(c.n == 2 && c.rows[0].n == 0 && c.rows[1].n == 1,
                  "expected events 0 and 1 back for their second attempt, got %zu rows", c.n);
    for (size_t i = 0; i < c.n; i++) {
        int applied = 0;
        char err[64];
        error_of(c.rows[i].n, err, sizeof err);
        conf_ok(s, conf_settle1(s, &c.fence, c.rows[i].id, OUTBOX_SETTLE_DEAD, 0, err, &applied));
    }
    conf_claim_free(&c);
    conf_stage(s, NULL, ROUTE, 7, 1, NULL); /* pending: not listed */

    /* One page holding all of them. */
    p = list_page(s, NULL, 10, next);
    ck_assert_msg(p.n == nw, "a page of 10 listed %zu dead rows, expected %zu", p.n, nw);
    ck_assert_msg(next[0] == '\0', "the only page gave a next id %s", next);
    check_rows(&p, 0, w, nw, "one page");
    /* Exactly as many as the page holds: still the last page. */
    p = list_page(s, NULL, nw, next);
    ck_assert_msg(p.n == nw && next[0] == '\0',
                  "a page of exactly %zu listed %zu rows, next \"%s\"", nw, p.n, next);

    /* Pages of 4 and of 2, each going on after the last id of the one before. */
    size_t sizes[2] = {4, 2};
    for (size_t k = 0; k < 2; k++) {
        size_t got = 0, pages = 0;
        char after[OUTBOX_UUID_STRLEN + 1] = "";
        for (;;) {
            p = list_page(s, after[0] ? after : NULL, sizes[k], next);
            char what[64];
            snprintf(what, sizeof what, "page %zu of %zu rows", pages + 1, sizes[k]);
            check_rows(&p, got, w, nw, what);
            got += p.n;
            pages++;
            ck_assert_msg(pages <= nw, "paging by %zu does not end", sizes[k]);
            if (next[0] == '\0')
                break;
            ck_assert_msg(p.n == sizes[k] && strcmp(next, p.row[p.n - 1].id) == 0,
                          "%s: next is %s, expected the page's last id %s", what, next,
                          p.n ? p.row[p.n - 1].id : "(none)");
            snprintf(after, sizeof after, "%s", next);
        }
        ck_assert_msg(got == nw, "paging by %zu listed %zu dead rows, expected %zu", sizes[k],
                      got, nw);
    }

    /* After a row that is not dead: the dead rows that follow it in claim order. */
    size_t from = 0;
    while (from < nw && w[from].n < 3)
        from++;
    p = list_page(s, published_id, 10, next);
    ck_assert_msg(p.n == nw - from, "after the published event 3: %zu rows, expected %zu", p.n,
                  nw - from);
    check_rows(&p, from, w, nw, "after event 3");

    /* An id that no row of the route has. */
    page_t none = {0};
    char unknown[OUTBOX_UUID_STRLEN + 1];
    conf_event_id(unknown, 999);
    int rc = outbox_store_dead_list(s, ROUTE, unknown, 10, note_row, &none, next);
    ck_assert_msg(rc == OUTBOX_ENOTFOUND && none.n == 0,
                  "listing after an id no row has: %s, %zu rows (expected OUTBOX_ENOTFOUND)",
                  outbox_strerror(rc), none.n);
    outbox_store_close(s);
}
END_TEST

void conf_cases_listing(conf_cases_t *c)
{
    conf_add(c, routes_counts, CONF_NEED_ROUTES | CONF_NEED_STATS, 0, 30);
    conf_add(c, dead_list_pages, CONF_NEED_DEAD_LIST, 0, 30);
}
