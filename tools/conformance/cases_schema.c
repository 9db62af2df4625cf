/* Conformance cases: schema check against what schema apply created. No
 * store-specific SQL: the gap is made by applying fewer parts than are
 * then checked for. */
#include <stdio.h>
#include <string.h>

#include "conf_int.h"

/* Room for every problem of a relation that is no outbox at all: each
 * canonical column, and each index. */
#define MAX_PROBLEMS 64

typedef struct problems {
    char text[MAX_PROBLEMS][256];
    size_t n;
} problems_t;

static void collect(void *ctx, const char *problem)
{
    problems_t *p = ctx;
    if (p->n < sizeof p->text / sizeof p->text[0])
        snprintf(p->text[p->n++], sizeof p->text[0], "%s", problem ? problem : "");
}

static size_t check(outbox_store_t *s, uint32_t flags, problems_t *p)
{
    outbox_schema_opts_t o = {
        .struct_size = sizeof o,
        .relation = conf_env.relation,
        .checkpoint_relation = conf_env.checkpoint_relation,
        .flags = flags,
        .inbox_relation = conf_env.inbox_relation,
    };
    size_t n = 0;
    memset(p, 0, sizeof *p);
    int rc = outbox_store_schema_check(s, &o, collect, p, &n);
    ck_assert_msg(rc == OUTBOX_OK, "schema check: %s (%s); finding problems is not an error",
                  outbox_strerror(rc), outbox_store_message(s));
    ck_assert_msg(n == p->n || (n > p->n && p->n == MAX_PROBLEMS),
                  "schema check counted %zu problems but reported %zu", n, p->n);
    return n;
}

static const char *find(const problems_t *p, const char *word, const char *except)
{
    for (size_t i = 0; i < p->n; i++)
        if (strstr(p->text[i], word) != NULL && (except == NULL || p->text[i] != except))
            return p->text[i];
    return NULL;
}

static void list(const problems_t *p, char *out, size_t size)
{
    size_t off = 0;
    out[0] = '\0';
    for (size_t i = 0; i < p->n && off < size; i++) {
        int w = snprintf(out + off, size - off, "%s\"%s\"", i ? ", " : "", p->text[i]);
        if (w < 0)
            break;
        off += (size_t)w;
    }
}

START_TEST(schema_check_names_missing)
{
    /* The relation was applied without hlc; check it as if hlc were wanted. */
    outbox_store_t *s = conf_open();
    problems_t p;
    size_t n = check(s, OUTBOX_SCHEMA_HLC, &p);
    char all[2048];
    list(&p, all, sizeof all);
    const char *column = find(&p, "hlc", NULL);
    ck_assert_msg(column != NULL, "no problem names the missing hlc column; reported: %s", all);
    const char *index = find(&p, "index", NULL);
    ck_assert_msg(index != NULL, "no problem names the missing hlc claim index; reported: %s", all);
    ck_assert_msg(n >= 2 && find(&p, "hlc", index) != NULL,
                  "the missing column and the missing index are not reported apart; reported: %s",
                  all);
    outbox_store_close(s);
}
END_TEST

static int ident_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_';
}

/* Whether text holds name as a word of its own, not inside a longer
 * identifier (id in event_id, status in a status_x). */
static int names_word(const char *text, const char *name)
{
    size_t len = strlen(name);
    for (const char *at = strstr(text, name); at != NULL; at = strstr(at + 1, name))
        if ((at == text || !ident_char(at[-1])) && !ident_char(at[len]))
            return 1;
    return 0;
}

/* A problem that names column (or, in a document store, field) name as
 * such: a missing index whose key list holds the name does not count, so
 * a check that looks at indexes only names no column. A document store
 * keeps the row's id in _id. */
static const char *names_column(const problems_t *p, const char *name)
{
    for (size_t i = 0; i < p->n; i++) {
        const char *t = p->text[i];
        if ((strstr(t, "column") != NULL || strstr(t, "field") != NULL) &&
            (names_word(t, name) || (strcmp(name, "id") == 0 && names_word(t, "_id"))))
            return t;
    }
    return NULL;
}

START_TEST(schema_check_names_missing_required)
{
    /* A relation that exists but is no outbox table: the checkpoint table
     * (node_key, hlc) checked as if it were one. Every required column is
     * missing, and the check must name each as a missing column, not only
     * inside a missing index's key list. The NOT NULL columns every row
     * has; the nullable ones a document store may leave out of a document
     * whose value is null, so it cannot call one of them missing: a store
     * names all of them, or (a document store) none. */
    outbox_store_t *s = conf_open();
    outbox_schema_opts_t o = {
        .struct_size = sizeof o,
        .relation = conf_env.checkpoint_relation,
        .checkpoint_relation = conf_env.checkpoint_relation,
        .flags = 0,
    };
    problems_t p;
    memset(&p, 0, sizeof p);
    size_t n = 0;
    int rc = outbox_store_schema_check(s, &o, collect, &p, &n);
    ck_assert_msg(rc == OUTBOX_OK, "schema check of %s: %s (%s); finding problems is not an error",
                  conf_env.checkpoint_relation, outbox_strerror(rc), outbox_store_message(s));
    char all[4096];
    list(&p, all, sizeof all);
    ck_assert_msg(n > 0, "schema check found nothing wrong with the checkpoint table as an outbox");
    static const char *const not_null[] = {
        "id", "outbox_route", "event_id", "event_type", "occurred_at",
        "payload", "status", "created_at", "attempts",
    };
    static const char *const nullable[] = {
        "tenant_id", "execution_id", "correlation_id", "causation_id", "published_at",
        "processing_at", "last_error", "available_at", "ordering_key",
    };
    for (size_t i = 0; i < sizeof not_null / sizeof not_null[0]; i++)
        ck_assert_msg(names_column(&p, not_null[i]) != NULL,
                      "no problem names the missing required column %s; reported: %s", not_null[i],
                      all);
    const size_t n_nullable = sizeof nullable / sizeof nullable[0];
    const char *named = NULL, *unnamed = NULL;
    for (size_t i = 0; i < n_nullable; i++) {
        if (names_column(&p, nullable[i]) != NULL)
            named = named ? named : nullable[i];
        else
            unnamed = unnamed ? unnamed : nullable[i];
    }
    ck_assert_msg(named == NULL || unnamed == NULL,
                  "schema check names the missing nullable column %s but not %s: a store that "
                  "requires its nullable columns requires every one; reported: %s",
                  named, unnamed, all);
    outbox_store_close(s);
}
END_TEST

START_TEST(schema_check_clean)
{
    /* Exactly what schema apply created: nothing to report. */
    outbox_store_t *s = conf_open();
    problems_t p;
    size_t n = check(s, conf_env.current->schema_flags, &p);
    char all[2048];
    list(&p, all, sizeof all);
    ck_assert_msg(n == 0, "a freshly applied schema has %zu problems: %s", n, all);
    outbox_store_close(s);
}
END_TEST

START_TEST(schema_check_names_missing_inbox)
{
    /* The relation was applied without the inbox; check it as if the inbox
     * were wanted, then apply the inbox and check again. */
    outbox_store_t *s = conf_open();
    problems_t p;
    size_t n = check(s, OUTBOX_SCHEMA_INBOX, &p);
    char all[2048];
    list(&p, all, sizeof all);
    ck_assert_msg(n >= 1, "schema check for the inbox found nothing wrong, but there is no inbox "
                  "table %s", conf_env.inbox_relation);
    ck_assert_msg(find(&p, conf_env.inbox_relation, NULL) != NULL,
                  "no problem names the missing inbox table %s; reported: %s",
                  conf_env.inbox_relation, all);
    outbox_schema_opts_t o = {
        .struct_size = sizeof o,
        .relation = conf_env.relation,
        .checkpoint_relation = conf_env.checkpoint_relation,
        .flags = OUTBOX_SCHEMA_INBOX,
        .inbox_relation = conf_env.inbox_relation,
    };
    conf_ok(s, outbox_store_schema_apply(s, &o));
    /* What the outbox alone has (nothing, unless the driver under test
     * leaves something out on purpose) is not the inbox's. */
    problems_t base;
    size_t n_base = check(s, 0, &base);
    n = check(s, OUTBOX_SCHEMA_INBOX, &p);
    for (size_t i = 0; i < p.n; i++) {
        int known = 0;
        for (size_t j = 0; j < base.n && !known; j++)
            known = strcmp(p.text[i], base.text[j]) == 0;
        ck_assert_msg(known, "after schema apply made the inbox, schema check for it reports "
                      "\"%s\", which a check of the outbox alone does not", p.text[i]);
    }
    list(&p, all, sizeof all);
    ck_assert_msg(n == n_base, "after schema apply made the inbox, schema check for it has %zu "
                  "problems, %zu without it: %s", n, n_base, all);
    /* The handle that applied it records at once: it looked again. */
    int is_new = 0;
    int rc = outbox_inbox_accept(s, NULL, "conf-consumer", "conf-event", &is_new);
    ck_assert_msg(rc == OUTBOX_OK && is_new == 1,
                  "after schema apply made the inbox, accepting an event on the same handle: %s, "
                  "%s (%s; after applying, the handle reports OUTBOX_STORE_CAP_INBOX as a fresh "
                  "open would)",
                  outbox_strerror(rc), is_new ? "new" : "not new", outbox_store_message(s));
    outbox_store_close(s);
}
END_TEST

void conf_cases_schema(conf_cases_t *c)
{
    conf_add(c, schema_check_names_missing, CONF_NEED_SCHEMA_CHECK | CONF_NEED_HLC, 0, 20);
    conf_add(c, schema_check_names_missing_required, CONF_NEED_SCHEMA_CHECK | CONF_NEED_CHECKPOINT,
             OUTBOX_SCHEMA_CHECKPOINT, 20);
    conf_add(c, schema_check_clean,
             CONF_NEED_SCHEMA_CHECK | CONF_NEED_HLC | CONF_NEED_TRACEPARENT | CONF_NEED_CHECKPOINT,
             OUTBOX_SCHEMA_HLC | OUTBOX_SCHEMA_TRACEPARENT | OUTBOX_SCHEMA_CHECKPOINT, 20);
    /* Made without the inbox, so that the case finds it missing. */
    conf_add(c, schema_check_names_missing_inbox, CONF_NEED_SCHEMA_CHECK | CONF_NEED_INBOX, 0, 20);
}
