/* MongoDB store driver, third floor: the collections and their indexes.
 *
 * A collection has no columns: what the SQL stores keep as the table's
 * shape is here the set of indexes, which one list below describes for the
 * index script (schema_ddl), schema apply and schema check alike. The hlc
 * claim index is also what turns hlc ordering on (OUTBOX_STORE_CAP_HLC);
 * traceparent needs nothing, a document just carries it.
 *
 * Two of the indexes are partial where the server has partial indexes (the
 * pending rows in claim order; the rows that have an ordering key). A
 * server without them (FerretDB) refuses the option, and schema apply then
 * creates the full index with the status in its key instead; schema check
 * accepts either and logs which one it found.
 *
 * Schema apply creates only the indexes that are missing, one command
 * each: FerretDB 1.24 drops the connection on a createIndexes of two or
 * more indexes that all exist already, so sending the whole list again
 * would make a second apply fail.
 *
 * The inbox collection (OUTBOX_SCHEMA_INBOX, mongo_inbox.c) holds
 * {_id: {c: consumer, e: event_id}, consumer, event_id, received_at}: the
 * _id alone makes a pair unique, on any server; the unique index on
 * (consumer, event_id) says so to anyone who looks at the collection and
 * serves the per-consumer reads, the one on received_at the purge.
 */
#include <stdio.h>
#include <string.h>

#include "mongo_ops.h"

enum { P_NONE, P_PENDING, P_KEYED };

typedef struct mongo_index {
    const char *name;
    const char *keys[7]; /* ascending, NULL-terminated */
    int unique;
    int sparse;
    int partial;         /* P_*: the filter of the partial form */
    uint32_t flag;       /* 0: always; else the OUTBOX_SCHEMA_* flag that asks for it */
    const char *full_name;   /* the full fallback of a partial index */
    const char *full_keys[7];
} mongo_index_t;

static const mongo_index_t indexes[] = {
    {"outbox_event_uq", {"outbox_route", "event_id", NULL}, 1, 0, P_NONE, 0, NULL, {NULL}},
    {"outbox_claim_idx", {"outbox_route", "status", "available_at", "created_at", NULL}, 0, 0,
     P_NONE, 0, NULL, {NULL}},
    {"outbox_lease_idx", {"outbox_route", "status", "processing_at", NULL}, 0, 0, P_NONE, 0, NULL,
     {NULL}},
    {"outbox_token_idx", {"claim_token", NULL}, 0, 1, P_NONE, 0, NULL, {NULL}},
    {"outbox_pending_idx", {"outbox_route", "created_at", "_id", NULL}, 0, 0, P_PENDING, 0,
     "outbox_pending_full_idx", {"outbox_route", "status", "created_at", "_id", NULL}},
    {"outbox_key_idx", {"outbox_route", "ordering_key", "created_at", "_id", NULL}, 0, 0, P_KEYED, 0,
     "outbox_key_full_idx", {"outbox_route", "ordering_key", "status", "created_at", "_id", NULL}},
    {"outbox_claim_hlc_idx",
     {"outbox_route", "status", "available_at", "hlc", "created_at", "_id", NULL}, 0, 0, P_NONE,
     OUTBOX_SCHEMA_HLC, NULL, {NULL}},
};
#define N_INDEXES (sizeof indexes / sizeof indexes[0])
#define HLC_INDEX 6

static const mongo_index_t inbox_indexes[] = {
    {"inbox_event_uq", {"consumer", "event_id", NULL}, 1, 0, P_NONE, 0, NULL, {NULL}},
    {"inbox_received_idx", {"received_at", NULL}, 0, 0, P_NONE, 0, NULL, {NULL}},
};
#define N_INBOX_INDEXES (sizeof inbox_indexes / sizeof inbox_indexes[0])

/* Fields every outbox document has. */
static const char *const required_fields[] = {
    "_id", "outbox_route", "event_id", "event_type", "occurred_at",
    "payload", "status", "created_at", "attempts",
};
#define N_REQUIRED (sizeof required_fields / sizeof required_fields[0])

static const char *partial_text(int p)
{
    return p == P_PENDING ? "{status: \"pending\"}" : "{ordering_key: {$exists: true}}";
}

static void append_partial(bson_t *doc, int p)
{
    bson_t f, ex;
    BSON_APPEND_DOCUMENT_BEGIN(doc, "partialFilterExpression", &f);
    if (p == P_PENDING) {
        BSON_APPEND_UTF8(&f, "status", "pending");
    } else {
        BSON_APPEND_DOCUMENT_BEGIN(&f, "ordering_key", &ex);
        BSON_APPEND_BOOL(&ex, "$exists", true);
        bson_append_document_end(&f, &ex);
    }
    bson_append_document_end(doc, &f);
}

static int wanted(const mongo_index_t *ix, uint32_t flags)
{
    return ix->flag == 0 || (flags & ix->flag) != 0;
}

/* The collections opts names. */
typedef struct targets {
    outbox_kit_relname_t rel, ckpt, inbox;
} targets_t;

static int read_targets(const outbox_schema_opts_t *opts, targets_t *t, outbox_diag_t *d)
{
    int rc = outbox_mongo_relname(opts && opts->relation ? opts->relation : "outbox", &t->rel, d);
    if (rc == OUTBOX_OK)
        rc = outbox_mongo_relname_ckpt(opts ? opts->checkpoint_relation : NULL, &t->rel, &t->ckpt,
                                       d);
    /* An older host's options end before the inbox: the default then. */
    const char *inbox = opts && OUTBOX_STRUCT_HAS(outbox_schema_opts_t, opts, inbox_relation)
                            ? opts->inbox_relation
                            : NULL;
    if (rc == OUTBOX_OK)
        rc = outbox_mongo_relname_inbox(inbox, &t->rel, &t->inbox, d);
    return rc;
}

/* ----------------------------------------------------------- schema_ddl */

static void js_coll(outbox_kit_buf_t *b, const outbox_kit_relname_t *r)
{
    if (r->schema[0])
        outbox_kit_buf_printf(b, "db.getSiblingDB(\"%s\").getCollection(\"%s\")", r->schema, r->table);
    else
        outbox_kit_buf_printf(b, "db.getCollection(\"%s\")", r->table);
}

static void js_keys(outbox_kit_buf_t *b, const char *const *keys)
{
    outbox_kit_buf_putc(b, '{');
    for (size_t i = 0; keys[i]; i++)
        outbox_kit_buf_printf(b, "%s%s: 1", i ? ", " : "", keys[i]);
    outbox_kit_buf_putc(b, '}');
}

static void js_create_collection(outbox_kit_buf_t *b, const outbox_kit_relname_t *r)
{
    outbox_kit_buf_puts(b, "db");
    if (r->schema[0])
        outbox_kit_buf_printf(b, ".getSiblingDB(\"%s\")", r->schema);
    outbox_kit_buf_printf(b, ".createCollection(\"%s\");\n", r->table);
}

static void js_index(outbox_kit_buf_t *b, const outbox_kit_relname_t *r, const mongo_index_t *ix)
{
    js_coll(b, r);
    outbox_kit_buf_puts(b, ".createIndex(");
    js_keys(b, ix->keys);
    outbox_kit_buf_printf(b, ", {name: \"%s\"%s%s", ix->name, ix->unique ? ", unique: true" : "",
                          ix->sparse ? ", sparse: true" : "");
    if (ix->partial)
        outbox_kit_buf_printf(b, ", partialFilterExpression: %s", partial_text(ix->partial));
    outbox_kit_buf_puts(b, "});\n");
    if (ix->partial) {
        outbox_kit_buf_puts(b, "// without partial indexes (FerretDB), instead: ");
        js_coll(b, r);
        outbox_kit_buf_puts(b, ".createIndex(");
        js_keys(b, ix->full_keys);
        outbox_kit_buf_printf(b, ", {name: \"%s\"});\n", ix->full_name);
    }
}

int outbox_mongo_schema_ddl(const outbox_schema_opts_t *opts, char **out, outbox_diag_t *d)
{
    if (!out)
        return outbox_mongo_fail(d, OUTBOX_EINVAL, "schema_ddl needs an output");
    *out = NULL;
    targets_t t;
    int rc = read_targets(opts, &t, d);
    if (rc != OUTBOX_OK)
        return rc;
    uint32_t flags = opts ? opts->flags : 0;
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_mongo_host);
    outbox_kit_buf_puts(&b, "// liboutbox: the outbox collection and its indexes (mongosh).\n"
                        "// Documents: {_id: id, outbox_route, event_id, event_type, tenant_id,\n"
                        "// execution_id, correlation_id, causation_id, occurred_at (date), payload,\n"
                        "// status, created_at (date), published_at, processing_at, last_error,\n"
                        "// attempts, available_at, ordering_key, traceparent, hlc (int64), claim_token}.\n");
    js_create_collection(&b, &t.rel);
    for (size_t i = 0; i < N_INDEXES; i++)
        if (wanted(&indexes[i], flags))
            js_index(&b, &t.rel, &indexes[i]);
    if (flags & OUTBOX_SCHEMA_CHECKPOINT) {
        outbox_kit_buf_puts(&b, "// The clock checkpoint: documents {_id: node_key, hlc: int64}.\n");
        js_create_collection(&b, &t.ckpt);
    }
    if (flags & OUTBOX_SCHEMA_INBOX) {
        outbox_kit_buf_puts(&b, "// The inbox: documents {_id: {c: consumer, e: event_id}, consumer,\n"
                                "// event_id, received_at (date)}; the _id keeps a pair unique.\n");
        js_create_collection(&b, &t.inbox);
        for (size_t i = 0; i < N_INBOX_INDEXES; i++)
            js_index(&b, &t.inbox, &inbox_indexes[i]);
    }
    *out = outbox_kit_buf_steal(&b);
    return *out ? OUTBOX_OK : outbox_mongo_nomem(d);
}

/* --------------------------------------------------------- live indexes */

/* The key pattern of an index as "a,b,c" (ascending only), with whether it
 * is unique, sparse and partial. */
typedef struct live_index {
    char keys[256];
    int unique, sparse, partial, ascending;
} live_index_t;

typedef struct live {
    live_index_t v[64];
    size_t n;
} live_t;

static int take_index(const bson_t *doc, void *ctx, outbox_diag_t *d)
{
    (void)d;
    live_t *l = ctx;
    if (l->n >= sizeof l->v / sizeof l->v[0])
        return OUTBOX_OK;
    live_index_t *x = &l->v[l->n];
    memset(x, 0, sizeof *x);
    x->ascending = 1;
    bson_iter_t it, k;
    if (!bson_iter_init_find(&it, doc, "key") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &k))
        return OUTBOX_OK;
    size_t w = 0;
    while (bson_iter_next(&k)) {
        const char *f = bson_iter_key(&k);
        int n = snprintf(x->keys + w, sizeof x->keys - w, "%s%s", w ? "," : "", f);
        if (n < 0 || (size_t)n >= sizeof x->keys - w)
            return OUTBOX_OK;
        w += (size_t)n;
        if (!BSON_ITER_HOLDS_NUMBER(&k) || bson_iter_as_int64(&k) != 1)
            x->ascending = 0;
    }
    x->unique = bson_iter_init_find(&it, doc, "unique") && bson_iter_as_bool(&it);
    x->sparse = bson_iter_init_find(&it, doc, "sparse") && bson_iter_as_bool(&it);
    x->partial = bson_iter_init_find(&it, doc, "partialFilterExpression");
    l->n++;
    return OUTBOX_OK;
}

static int list_indexes(mongoc_collection_t *coll, live_t *l, outbox_diag_t *d)
{
    l->n = 0;
    mongoc_cursor_t *c = mongoc_collection_find_indexes_with_opts(coll, NULL);
    if (!c)
        return outbox_mongo_nomem(d);
    const bson_t *doc;
    int rc = OUTBOX_OK;
    while (mongoc_cursor_next(c, &doc))
        take_index(doc, l, d);
    bson_error_t e;
    const bson_t *reply = NULL;
    if (mongoc_cursor_error_document(c, &e, &reply) &&
        !(e.domain == MONGOC_ERROR_SERVER && e.code == 26)) /* no collection: no indexes */
        rc = outbox_mongo_error(d, &e, reply, "listing indexes");
    mongoc_cursor_destroy(c);
    return rc;
}

static void keys_text(const char *const *keys, char *out, size_t size)
{
    size_t w = 0;
    out[0] = '\0';
    for (size_t i = 0; keys[i] && w < size; i++) {
        int n = snprintf(out + w, size - w, "%s%s", i ? "," : "", keys[i]);
        if (n < 0)
            break;
        w += (size_t)n;
    }
}

/* Whether the live indexes have one with these keys (and unique when
 * asked); an index of the same keys serves whatever its name. */
static int has_keys(const live_t *l, const char *const *keys, int unique)
{
    char want[256];
    keys_text(keys, want, sizeof want);
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].ascending && strcmp(l->v[i].keys, want) == 0 && (!unique || l->v[i].unique))
            return 1;
    return 0;
}

/* 1 when the index is there in its partial form, 2 in its full fallback. */
static int index_found(const live_t *l, const mongo_index_t *ix)
{
    if (has_keys(l, ix->keys, ix->unique))
        return 1;
    if (ix->partial && has_keys(l, ix->full_keys, 0))
        return 2;
    return 0;
}

/* --------------------------------------------------------------- detect */

int outbox_mongo_detect(mongo_handle_t *h, int strict, outbox_diag_t *d)
{
    h->has_hlc = 0;
    h->has_ckpt = 0;
    h->has_inbox = 0;
    int exists = outbox_mongo_coll_exists(h, &h->rel, d);
    if (exists < 0)
        return exists;
    if (!exists && strict)
        return outbox_mongo_fail(d, OUTBOX_EMISSING, "collection \"%s\" not found in database \"%s\"",
                                 h->rel.table, outbox_mongo_db_of(h, &h->rel));
    if (exists) {
        live_t *l = outbox_mongo_host->alloc(sizeof *l);
        if (!l)
            return outbox_mongo_nomem(d);
        int rc = list_indexes(h->coll, l, d);
        if (rc == OUTBOX_OK)
            h->has_hlc = index_found(l, &indexes[HLC_INDEX]) != 0;
        outbox_mongo_host->free(l);
        if (rc != OUTBOX_OK)
            return rc;
    }
    int ck = outbox_mongo_coll_exists(h, &h->ckpt, d);
    if (ck < 0)
        return ck;
    h->has_ckpt = ck;
    /* The inbox needs no index to be right (the _id keeps a pair unique),
     * so the collection is all there is to look for. */
    int ib = outbox_mongo_coll_exists(h, &h->inbox, d);
    if (ib < 0)
        return ib;
    h->has_inbox = ib;
    return OUTBOX_OK;
}

/* ---------------------------------------------------------- schema_apply */

static int create_collection(mongo_handle_t *h, const outbox_kit_relname_t *r, outbox_diag_t *d)
{
    mongoc_database_t *db = mongoc_client_get_database(h->client, outbox_mongo_db_of(h, r));
    if (!db)
        return outbox_mongo_nomem(d);
    bson_error_t e;
    int rc = OUTBOX_OK;
    mongoc_collection_t *c = mongoc_database_create_collection(db, r->table, NULL, &e);
    if (c)
        mongoc_collection_destroy(c);
    else if (!(e.domain == MONGOC_ERROR_SERVER && e.code == 48)) /* NamespaceExists */
        rc = outbox_mongo_error(d, &e, NULL, "creating the collection");
    mongoc_database_destroy(db);
    return rc;
}

static void append_index(bson_t *arr, size_t i, const char *name, const char *const *keys,
                         int unique, int sparse, int partial)
{
    char k[16];
    const char *kp;
    bson_uint32_to_string((uint32_t)i, &kp, k, sizeof k);
    bson_t doc, key;
    BSON_APPEND_DOCUMENT_BEGIN(arr, kp, &doc);
    BSON_APPEND_DOCUMENT_BEGIN(&doc, "key", &key);
    for (size_t j = 0; keys[j]; j++)
        BSON_APPEND_INT32(&key, keys[j], 1);
    bson_append_document_end(&doc, &key);
    BSON_APPEND_UTF8(&doc, "name", name);
    if (unique)
        BSON_APPEND_BOOL(&doc, "unique", true);
    if (sparse)
        BSON_APPEND_BOOL(&doc, "sparse", true);
    if (partial)
        append_partial(&doc, partial);
    bson_append_document_end(arr, &doc);
}

/* One createIndexes command; *refused = the server's code when it said no. */
static int create_indexes(mongoc_collection_t *coll, const bson_t *list, uint32_t *refused,
                          outbox_diag_t *d)
{
    bson_t cmd = BSON_INITIALIZER, reply;
    BSON_APPEND_UTF8(&cmd, "createIndexes", mongoc_collection_get_name(coll));
    BSON_APPEND_ARRAY(&cmd, "indexes", list);
    bson_error_t e;
    int rc = OUTBOX_OK;
    *refused = 0;
    if (!mongoc_collection_write_command_with_opts(coll, &cmd, NULL, &reply, &e)) {
        if (e.domain == MONGOC_ERROR_SERVER)
            *refused = e.code;
        rc = outbox_mongo_error(d, &e, &reply, "creating indexes");
    }
    bson_destroy(&reply);
    bson_destroy(&cmd);
    return rc;
}

/* Creates those of list[0..n) that flags want and coll lacks (an index of
 * the same keys serves whatever its name), one command each. */
static int ensure_indexes(mongoc_collection_t *coll, const mongo_index_t *list, size_t n,
                          uint32_t flags, outbox_diag_t *d)
{
    live_t *l = outbox_mongo_host->alloc(sizeof *l);
    if (!l)
        return outbox_mongo_nomem(d);
    int rc = list_indexes(coll, l, d);
    for (size_t i = 0; rc == OUTBOX_OK && i < n; i++) {
        const mongo_index_t *ix = &list[i];
        if (!wanted(ix, flags) || index_found(l, ix))
            continue;
        bson_t one = BSON_INITIALIZER;
        append_index(&one, 0, ix->name, ix->keys, ix->unique, ix->sparse, ix->partial);
        uint32_t refused = 0;
        rc = create_indexes(coll, &one, &refused, d);
        bson_destroy(&one);
        if (rc != OUTBOX_OK && ix->partial && refused != 0) {
            /* No partial indexes here (FerretDB answers 238, NotImplemented):
             * the full form with the status in its key serves the same
             * queries, at the cost of indexing finished rows too. */
            outbox_mongo_host->log(OUTBOX_LOG_DEBUG, MONGO_NAME,
                                   "the server has no partial indexes: creating %s instead of %s",
                                   ix->full_name, ix->name);
            bson_t full = BSON_INITIALIZER;
            append_index(&full, 0, ix->full_name, ix->full_keys, 0, 0, P_NONE);
            memset(d, 0, sizeof *d);
            rc = create_indexes(coll, &full, &refused, d);
            bson_destroy(&full);
        }
    }
    outbox_mongo_host->free(l);
    return rc;
}

/* A collection and the indexes of list it lacks. */
static int ensure_collection(mongo_handle_t *h, const outbox_kit_relname_t *r,
                             const mongo_index_t *list, size_t n, uint32_t flags, outbox_diag_t *d)
{
    int rc = create_collection(h, r, d);
    if (rc != OUTBOX_OK || n == 0)
        return rc;
    mongoc_collection_t *coll = outbox_mongo_coll(h, h->client, r);
    if (!coll)
        return outbox_mongo_nomem(d);
    rc = ensure_indexes(coll, list, n, flags, d);
    mongoc_collection_destroy(coll);
    return rc;
}

int outbox_mongo_schema_apply(mongo_handle_t *h, const outbox_schema_opts_t *opts,
                              outbox_diag_t *d)
{
    targets_t t;
    int rc = read_targets(opts, &t, d);
    uint32_t flags = opts ? opts->flags : 0;
    if (rc == OUTBOX_OK)
        rc = ensure_collection(h, &t.rel, indexes, N_INDEXES, flags, d);
    if (rc == OUTBOX_OK && (flags & OUTBOX_SCHEMA_CHECKPOINT))
        rc = ensure_collection(h, &t.ckpt, NULL, 0, flags, d);
    if (rc == OUTBOX_OK && (flags & OUTBOX_SCHEMA_INBOX))
        rc = ensure_collection(h, &t.inbox, inbox_indexes, N_INBOX_INDEXES, flags, d);
    return rc;
}

/* ---------------------------------------------------------- schema_check */

typedef struct reporter {
    outbox_schema_report_fn fn;
    void *ctx;
    size_t n;
} reporter_t;

static void problem(reporter_t *r, const char *fmt, ...) OUTBOX_PRINTF(2, 3);
static void problem(reporter_t *r, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (r->fn)
        r->fn(r->ctx, text);
    r->n++;
}

typedef struct sample {
    int found;
    char id[64];
    int has[N_REQUIRED];
} sample_t;

static int take_sample(const bson_t *doc, void *ctx, outbox_diag_t *d)
{
    (void)d;
    sample_t *s = ctx;
    s->found = 1;
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, "_id") && BSON_ITER_HOLDS_UTF8(&it))
        snprintf(s->id, sizeof s->id, "%s", bson_iter_utf8(&it, NULL));
    else
        snprintf(s->id, sizeof s->id, "(not a string)");
    for (size_t i = 0; i < N_REQUIRED; i++)
        s->has[i] = bson_iter_init_find(&it, doc, required_fields[i]);
    return OUTBOX_OK;
}

/* Required fields, looked for where a collection can show them: in a
 * document it holds. An empty collection that has none of the outbox's
 * indexes either cannot show them, and is reported as such. */
static int check_fields(mongoc_collection_t *coll, const live_t *l, const char *shown,
                        reporter_t *r, outbox_diag_t *d)
{
    bson_t f = BSON_INITIALIZER, opts = BSON_INITIALIZER;
    BSON_APPEND_INT64(&opts, "limit", 1);
    sample_t s;
    memset(&s, 0, sizeof s);
    int rc = outbox_mongo_find(coll, &f, &opts, take_sample, &s, d, "schema check");
    bson_destroy(&f);
    bson_destroy(&opts);
    if (rc != OUTBOX_OK)
        return rc;
    if (s.found) {
        for (size_t i = 0; i < N_REQUIRED; i++)
            if (!s.has[i])
                problem(r, "missing required field %s in collection \"%s\" (document %s has none)",
                        required_fields[i], shown, s.id);
        return OUTBOX_OK;
    }
    int outbox_like = has_keys(l, indexes[0].keys, 1) || has_keys(l, indexes[1].keys, 0);
    if (!outbox_like)
        for (size_t i = 0; i < N_REQUIRED; i++)
            problem(r,
                    "missing required field %s: collection \"%s\" is empty and has none of the "
                    "outbox's indexes, so nothing shows it is an outbox",
                    required_fields[i], shown);
    return OUTBOX_OK;
}

/* The inbox collection and its indexes. */
static int check_inbox(mongo_handle_t *h, const outbox_kit_relname_t *inbox, reporter_t *r,
                       outbox_diag_t *d)
{
    char shown[160];
    outbox_kit_relname_show(inbox, shown, sizeof shown);
    int exists = outbox_mongo_coll_exists(h, inbox, d);
    if (exists < 0)
        return exists;
    if (!exists) {
        problem(r, "missing inbox collection \"%s\" (documents {_id: {c: consumer, e: event_id}, "
                   "consumer, event_id, received_at})",
                shown);
        return OUTBOX_OK;
    }
    live_t *l = outbox_mongo_host->alloc(sizeof *l);
    mongoc_collection_t *coll = outbox_mongo_coll(h, h->client, inbox);
    int rc = l && coll ? list_indexes(coll, l, d) : outbox_mongo_nomem(d);
    for (size_t i = 0; rc == OUTBOX_OK && i < N_INBOX_INDEXES; i++) {
        const mongo_index_t *ix = &inbox_indexes[i];
        char keys[256];
        keys_text(ix->keys, keys, sizeof keys);
        if (!index_found(l, ix))
            problem(r, "missing index %s on (%s)%s in inbox collection \"%s\"", ix->name, keys,
                    ix->unique ? " unique" : "", shown);
    }
    if (coll)
        mongoc_collection_destroy(coll);
    outbox_mongo_host->free(l);
    return rc;
}

int outbox_mongo_schema_check(void *handle, const outbox_schema_opts_t *opts,
                              outbox_schema_report_fn report, void *ctx, size_t *problems,
                              outbox_diag_t *d)
{
    mongo_handle_t *h = handle;
    if (problems)
        *problems = 0;
    targets_t t;
    int rc = read_targets(opts, &t, d);
    if (rc != OUTBOX_OK)
        return rc;
    uint32_t flags = opts ? opts->flags : 0;
    reporter_t r = {report, ctx, 0};
    char shown[160], shown_ckpt[160];
    outbox_kit_relname_show(&t.rel, shown, sizeof shown);
    outbox_kit_relname_show(&t.ckpt, shown_ckpt, sizeof shown_ckpt);
    int exists = outbox_mongo_coll_exists(h, &t.rel, d);
    if (exists < 0)
        return exists;
    if (!exists) {
        problem(&r, "missing collection \"%s\" (with required fields outbox_route, event_id, "
                    "event_type, payload, status, created_at)",
                shown);
    } else {
        live_t *l = outbox_mongo_host->alloc(sizeof *l);
        mongoc_collection_t *coll = outbox_mongo_coll(h, h->client, &t.rel);
        if (!l || !coll) {
            outbox_mongo_host->free(l);
            if (coll)
                mongoc_collection_destroy(coll);
            return outbox_mongo_nomem(d);
        }
        rc = list_indexes(coll, l, d);
        if (rc == OUTBOX_OK)
            rc = check_fields(coll, l, shown, &r, d);
        for (size_t i = 0; rc == OUTBOX_OK && i < N_INDEXES; i++) {
            const mongo_index_t *ix = &indexes[i];
            if (!wanted(ix, flags))
                continue;
            int found = index_found(l, ix);
            char keys[256];
            keys_text(ix->keys, keys, sizeof keys);
            if (!found) {
                problem(&r, "missing index %s on (%s)%s%s in collection \"%s\"", ix->name, keys,
                        ix->unique ? " unique" : "", ix->sparse ? " sparse" : "", shown);
                if (i == HLC_INDEX)
                    problem(&r, "field hlc is not in use: hlc ordering is on only where the "
                                "index on (%s) exists",
                            keys);
            } else if (found == 2) {
                /* Not a problem: the full form is what a server without
                 * partial indexes can have. */
                outbox_mongo_host->log(OUTBOX_LOG_INFO, MONGO_NAME,
                                       "schema check: collection \"%s\" has the full index %s in "
                                       "place of the partial %s (the server has no partial "
                                       "indexes, or they were not used)",
                                       shown, ix->full_name, ix->name);
            }
        }
        mongoc_collection_destroy(coll);
        outbox_mongo_host->free(l);
        if (rc != OUTBOX_OK)
            return rc;
    }
    if (flags & OUTBOX_SCHEMA_CHECKPOINT) {
        int ck = outbox_mongo_coll_exists(h, &t.ckpt, d);
        if (ck < 0)
            return ck;
        if (!ck)
            problem(&r, "missing checkpoint collection \"%s\" (documents {_id: node_key, hlc})",
                    shown_ckpt);
    }
    if (flags & OUTBOX_SCHEMA_INBOX) {
        rc = check_inbox(h, &t.inbox, &r, d);
        if (rc != OUTBOX_OK)
            return rc;
    }
    if (problems)
        *problems = r.n;
    return OUTBOX_OK;
}

/* ----------------------------------------------------------- schema_drop */

static int drop_one(mongo_handle_t *h, const outbox_kit_relname_t *r, outbox_diag_t *d)
{
    mongoc_collection_t *c = outbox_mongo_coll(h, h->client, r);
    if (!c)
        return outbox_mongo_nomem(d);
    bson_error_t e;
    int rc = OUTBOX_OK;
    if (!mongoc_collection_drop(c, &e) && !(e.domain == MONGOC_ERROR_SERVER && e.code == 26))
        rc = outbox_mongo_error(d, &e, NULL, "dropping the collection");
    mongoc_collection_destroy(c);
    return rc;
}

int outbox_mongo_schema_drop(mongo_handle_t *h, const outbox_schema_opts_t *opts,
                             outbox_diag_t *d)
{
    targets_t t;
    int rc = read_targets(opts, &t, d);
    if (rc == OUTBOX_OK)
        rc = drop_one(h, &t.rel, d);
    if (rc == OUTBOX_OK && opts && (opts->flags & OUTBOX_SCHEMA_CHECKPOINT))
        rc = drop_one(h, &t.ckpt, d);
    if (rc == OUTBOX_OK && opts && (opts->flags & OUTBOX_SCHEMA_INBOX))
        rc = drop_one(h, &t.inbox, d);
    if (rc == OUTBOX_OK) {
        /* The claim locks of a server without atomic updates. */
        outbox_kit_relname_t locks;
        memcpy(locks.schema, t.rel.schema, sizeof locks.schema);
        snprintf(locks.table, sizeof locks.table, "%.57s_locks", t.rel.table);
        rc = drop_one(h, &locks, d);
    }
    return rc;
}
