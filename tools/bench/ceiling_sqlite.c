/* outbox-bench, SQLite: the bench's own tables and the bare-SQL ceiling.
 *
 * The ceiling is what the SQLite driver's claim and settle(published) SQL
 * costs by itself: the same statements, the same PRAGMAs and busy handler,
 * the same transactions, driven by a bare sqlite3 loop that does nothing
 * else (it reads back only the ids it must mark). The statement texts are
 * copied from drivers/store-sqlite/ by hand, never linked, so the bench
 * measures the driver from the outside; keep them in step with it (each
 * copy names the function it comes from).
 *
 * Safety: the bench drops and recreates its relations, so it records every
 * relation it creates in a table of its own (outbox_bench_relations) and
 * refuses to touch an existing table it did not create.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include "bench.h"

typedef struct bsq bsq_t;

/* drivers/store-sqlite/sqlite.c: SQ_DEFAULT_BUSY_MS. */
#define BSQ_DEFAULT_BUSY_MS 5000
/* relay default lease (core/relay.c, outbox_relay_config_init). */
#define BSQ_LEASE_US (30 * 1000000LL)

struct bsq {
    char *path;
    int busy_ms;
    sqlite3 *db;
};

/* ------------------------------------------------------------ the URI */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decodes s[0..n) into a fresh string; NULL when malformed. */
static char *decode(const char *s, size_t n)
{
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%') {
            int hi = i + 2 < n ? hexval(s[i + 1]) : -1;
            int lo = i + 2 < n ? hexval(s[i + 2]) : -1;
            if (hi < 0 || lo < 0) {
                free(out);
                return NULL;
            }
            out[w++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            out[w++] = s[i];
        }
    }
    out[w] = '\0';
    return out;
}

/* sqlite:///abs/path.db, sqlite:relative.db, each with ?busy_timeout=DURATION
 * allowed: the forms the driver takes (drivers/store-sqlite/sqlite.c,
 * check_uri and parse_params). */
static int parse_uri(const char *uri, char **path, int *busy_ms, char *err, size_t errlen)
{
    *path = NULL;
    *busy_ms = BSQ_DEFAULT_BUSY_MS;
    const char *rest = uri + strlen("sqlite:");
    const char *q = strchr(rest, '?');
    size_t body = q ? (size_t)(q - rest) : strlen(rest);
    const char *p = rest;
    if (body >= 2 && rest[0] == '/' && rest[1] == '/') {
        p = rest + 2;
        if (*p != '/') {
            snprintf(err, errlen,
                     "sqlite URI \"%s\" has a host part; use sqlite:///abs/path.db or "
                     "sqlite:relative.db",
                     uri);
            return BENCH_EXIT_USAGE;
        }
        body -= 2;
    }
    if (body == 0) {
        snprintf(err, errlen, "sqlite URI \"%s\" has no database path", uri);
        return BENCH_EXIT_USAGE;
    }
    *path = decode(p, body);
    if (!*path) {
        snprintf(err, errlen, "sqlite URI \"%s\": bad percent-encoding in the path", uri);
        return BENCH_EXIT_USAGE;
    }
    for (const char *s = q ? q + 1 : NULL; s && *s;) {
        size_t seg = strcspn(s, "&");
        if (seg > 13 && strncmp(s, "busy_timeout=", 13) == 0) {
            char num[32];
            size_t nl = seg - 13 < sizeof num - 1 ? seg - 13 : sizeof num - 1;
            memcpy(num, s + 13, nl);
            num[nl] = '\0';
            int64_t us = 0;
            if (seg - 13 >= sizeof num || outbox_parse_duration(num, &us, NULL) != OUTBOX_OK ||
                us > (int64_t)INT_MAX * 1000) {
                snprintf(err, errlen,
                         "sqlite URI \"%s\": busy_timeout must be a duration (5s, 500ms)", uri);
                free(*path);
                *path = NULL;
                return BENCH_EXIT_USAGE;
            }
            *busy_ms = (int)((us + 999) / 1000);
        } else if (seg > 0) {
            /* The driver refuses it too; say so before anything is created. */
            snprintf(err, errlen, "sqlite URI \"%s\": unknown parameter (known: busy_timeout)", uri);
            free(*path);
            *path = NULL;
            return BENCH_EXIT_USAGE;
        }
        s += seg + (s[seg] == '&');
    }
    return 0;
}

/* ------------------------------------------------------- connections */

typedef struct busy_state {
    int busy_ms;
    int64_t start;
} busy_state_t;

/* drivers/store-sqlite/sqlite_conn.c: busy_wait(), the driver's busy handler. */
static int busy_wait(void *arg, int count)
{
    busy_state_t *b = arg;
    int64_t now = bench_mono_us();
    if (count == 0)
        b->start = now;
    if (now - b->start >= (int64_t)b->busy_ms * 1000)
        return 0;
    long step_us = count < 8 ? 50L << (count / 2) : 1000L;
    struct timespec ts = {0, step_us * 1000L};
    nanosleep(&ts, NULL);
    return 1;
}

static int db_fail(sqlite3 *db, const char *what, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s: %s", what, db ? sqlite3_errmsg(db) : "out of memory");
    return BENCH_EXIT_FAIL;
}

/* drivers/store-sqlite/sqlite_conn.c: outbox_sqlite_connect(): flags, WAL,
 * and the synchronous=NORMAL the driver's claims and settles commit with
 * (outbox_sqlite_tx_begin_relay); the bench's own set-up writes need no
 * more. */
static int connect(const char *path, int create, busy_state_t *busy, sqlite3 **out, char *err,
                   size_t errlen)
{
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, flags, NULL) != SQLITE_OK) {
        char what[256];
        snprintf(what, sizeof what, "cannot open database \"%s\"", path);
        db_fail(db, what, err, errlen);
        sqlite3_close_v2(db);
        return BENCH_EXIT_FAIL;
    }
    sqlite3_extended_result_codes(db, 1);
    if (busy)
        sqlite3_busy_handler(db, busy_wait, busy);
    else
        sqlite3_busy_timeout(db, BSQ_DEFAULT_BUSY_MS);
    if (sqlite3_exec(db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_exec(db, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL) != SQLITE_OK) {
        db_fail(db, path, err, errlen);
        sqlite3_close_v2(db);
        return BENCH_EXIT_FAIL;
    }
    *out = db;
    return 0;
}

static void bsq_close(void *db);

static int bsq_open(const char *uri, void **out, char *err, size_t errlen)
{
    *out = NULL;
    bsq_t *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(err, errlen, "out of memory");
        return BENCH_EXIT_FAIL;
    }
    int rc = parse_uri(uri, &b->path, &b->busy_ms, err, errlen);
    if (rc == 0)
        rc = connect(b->path, 1, NULL, &b->db, err, errlen);
    if (rc == 0 && sqlite3_exec(b->db,
                                "CREATE TABLE IF NOT EXISTS outbox_bench_relations "
                                "(relation TEXT NOT NULL PRIMARY KEY)",
                                NULL, NULL, NULL) != SQLITE_OK)
        rc = db_fail(b->db, "creating outbox_bench_relations", err, errlen);
    if (rc != 0) {
        bsq_close(b);
        return rc;
    }
    *out = b;
    return 0;
}

static void bsq_close(void *db)
{
    bsq_t *b = db;
    if (!b)
        return;
    sqlite3_close_v2(b->db);
    free(b->path);
    free(b);
}

/* ------------------------------------------------------ the relations */

/* "schema"."table" or "table"; relation is valid (outbox_relation_valid). */
static void rel_sql(const char *relation, char *out, size_t size)
{
    const char *dot = strchr(relation, '.');
    if (dot)
        snprintf(out, size, "\"%.*s\".\"%s\"", (int)(dot - relation), relation, dot + 1);
    else
        snprintf(out, size, "\"%s\"", relation);
}

static int table_exists(bsq_t *b, const char *relation, int *exists, char *err, size_t errlen)
{
    const char *dot = strchr(relation, '.');
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(b->db, "SELECT count(*) FROM pragma_table_info(?1, ?2)", -1, &st,
                           NULL) != SQLITE_OK)
        return db_fail(b->db, "reading the schema", err, errlen);
    if (dot) {
        sqlite3_bind_text(st, 1, dot + 1, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, relation, (int)(dot - relation), SQLITE_STATIC);
    } else {
        sqlite3_bind_text(st, 1, relation, -1, SQLITE_STATIC);
    }
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        db_fail(b->db, "reading the schema", err, errlen);
        sqlite3_finalize(st);
        return BENCH_EXIT_FAIL;
    }
    *exists = sqlite3_column_int(st, 0) > 0;
    sqlite3_finalize(st);
    return 0;
}

static int marked(bsq_t *b, const char *relation, int *is_marked, char *err, size_t errlen)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(b->db, "SELECT 1 FROM outbox_bench_relations WHERE relation = ?1", -1,
                           &st, NULL) != SQLITE_OK)
        return db_fail(b->db, "reading outbox_bench_relations", err, errlen);
    sqlite3_bind_text(st, 1, relation, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    *is_marked = rc == SQLITE_ROW;
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return db_fail(b->db, "reading outbox_bench_relations", err, errlen);
    return 0;
}

static int exec_rel(bsq_t *b, const char *fmt, const char *relation, const char *what, char *err,
                    size_t errlen)
{
    char rel[300], sql[700];
    rel_sql(relation, rel, sizeof rel);
    snprintf(sql, sizeof sql, fmt, rel);
    if (sqlite3_exec(b->db, sql, NULL, NULL, NULL) != SQLITE_OK)
        return db_fail(b->db, what, err, errlen);
    return 0;
}

static int set_mark(bsq_t *b, const char *relation, int on, char *err, size_t errlen)
{
    sqlite3_stmt *st = NULL;
    const char *sql = on ? "INSERT OR IGNORE INTO outbox_bench_relations (relation) VALUES (?1)"
                         : "DELETE FROM outbox_bench_relations WHERE relation = ?1";
    if (sqlite3_prepare_v2(b->db, sql, -1, &st, NULL) != SQLITE_OK)
        return db_fail(b->db, "writing outbox_bench_relations", err, errlen);
    sqlite3_bind_text(st, 1, relation, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return db_fail(b->db, "writing outbox_bench_relations", err, errlen);
    return 0;
}

static int bsq_claim_relation(void *db, const char *relation, char *err, size_t errlen)
{
    bsq_t *b = db;
    int exists = 0, ours = 0;
    int rc = table_exists(b, relation, &exists, err, errlen);
    if (rc == 0)
        rc = marked(b, relation, &ours, err, errlen);
    if (rc != 0)
        return rc;
    if (exists && !ours) {
        snprintf(err, errlen,
                 "table %s exists in %s and was not created by outbox-bench; choose another "
                 "--relation or database",
                 relation, b->path);
        return BENCH_EXIT_USAGE;
    }
    if (exists)
        rc = exec_rel(b, "DROP TABLE IF EXISTS %s", relation, "dropping an old bench table", err,
                      errlen);
    if (rc == 0)
        rc = set_mark(b, relation, 1, err, errlen);
    return rc;
}

static int bsq_drop_relation(void *db, const char *relation, char *err, size_t errlen)
{
    bsq_t *b = db;
    int ours = 0;
    int rc = marked(b, relation, &ours, err, errlen);
    if (rc == 0 && ours)
        rc = exec_rel(b, "DROP TABLE IF EXISTS %s", relation, "dropping a bench table", err,
                      errlen);
    if (rc == 0)
        rc = set_mark(b, relation, 0, err, errlen);
    return rc;
}

static int bsq_copy(void *db, const char *from, const char *to, char *err, size_t errlen)
{
    bsq_t *b = db;
    char f[300], t[300], sql[700];
    rel_sql(from, f, sizeof f);
    rel_sql(to, t, sizeof t);
    snprintf(sql, sizeof sql, "INSERT INTO %s SELECT * FROM %s ORDER BY rowid", t, f);
    if (sqlite3_exec(b->db, sql, NULL, NULL, NULL) != SQLITE_OK)
        return db_fail(b->db, "copying the backlog", err, errlen);
    return 0;
}

static int bsq_count(void *db, const char *relation, const char *status, long *count, char *err,
                     size_t errlen)
{
    bsq_t *b = db;
    char rel[300], sql[700];
    rel_sql(relation, rel, sizeof rel);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s WHERE status = ?1", rel);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(b->db, sql, -1, &st, NULL) != SQLITE_OK)
        return db_fail(b->db, "counting rows", err, errlen);
    sqlite3_bind_text(st, 1, status, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    *count = rc == SQLITE_ROW ? (long)sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW)
        return db_fail(b->db, "counting rows", err, errlen);
    return 0;
}

static int bsq_quiesce(void *db, const char *relation, char *err, size_t errlen)
{
    (void)relation;
    bsq_t *b = db;
    if (sqlite3_wal_checkpoint_v2(b->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL) != SQLITE_OK)
        return db_fail(b->db, "checkpointing the WAL", err, errlen);
    return 0;
}

/* ----------------------------------------------------------- the SQL */

/* Appends to a fixed buffer; the texts below are far shorter than it. */
typedef struct sbuf {
    char p[8192];
    size_t len;
} sbuf_t;

static void add(sbuf_t *b, const char *s)
{
    size_t n = strlen(s);
    if (b->len + n < sizeof b->p) {
        memcpy(b->p + b->len, s, n + 1);
        b->len += n;
    }
}

/* The indexes the driver names with INDEXED BY: it finds them by their
 * columns (sqlite_catalog.c, pick_indexes()); on a table made
 * by schema apply they are <table>_order_idx and <table>_key_idx
 * (sqlite_schema.c, outbox_idx[]). */
typedef struct claim_names {
    const char *rel;       /* "schema"."table" */
    char order_idx[300];   /* "<table>_order_idx", quoted */
    char key_idx[300];     /* "<table>_key_idx", quoted */
} claim_names_t;

/* drivers/store-sqlite/sqlite_rows.c, add_rel_as(). */
static void rel_as(sbuf_t *b, const claim_names_t *n, const char *alias, const char *index)
{
    add(b, n->rel);
    add(b, " AS ");
    add(b, alias);
    if (index) {
        add(b, " INDEXED BY ");
        add(b, index);
    }
}

/* drivers/store-sqlite/sqlite_rows.c, claim_key_rule() with claim_earlier()
 * for created_at order. */
static void claim_key_rule(sbuf_t *b, const claim_names_t *n)
{
    add(b, " AND (o.ordering_key IS NULL OR (NOT EXISTS (SELECT 1 FROM ");
    rel_as(b, n, "e", n->key_idx);
    add(b, " WHERE e.outbox_route = ?1 AND e.ordering_key = o.ordering_key "
           "AND e.status = 'processing' AND e.processing_at > ?3 AND ");
    add(b, "(e.created_at, e.id) < (o.created_at, o.id)");
    add(b, ") AND NOT EXISTS (SELECT 1 FROM ");
    rel_as(b, n, "e", n->key_idx);
    add(b, " WHERE e.outbox_route = ?1 AND e.ordering_key = o.ordering_key "
           "AND e.status = 'pending' AND e.available_at > ?2 AND ");
    add(b, "(e.created_at, e.id) < (o.created_at, o.id)");
    add(b, ")))");
}

/* drivers/store-sqlite/sqlite_rows.c, claim_arm() without hlc. */
static void claim_arm(sbuf_t *b, const claim_names_t *n, const char *index, const char *where,
                      const char *order)
{
    add(b, "SELECT * FROM (SELECT o.id AS id, o.created_at AS created_at FROM ");
    rel_as(b, n, "o", index);
    add(b, " WHERE o.outbox_route = ?1 AND ");
    add(b, where);
    claim_key_rule(b, n);
    add(b, " ORDER BY ");
    add(b, order);
    add(b, " LIMIT ?4)");
}

/* drivers/store-sqlite/sqlite_rows.c, build_claim(hlc = 0) with SQ_RIPE and
 * SQ_EXPIRED, on a table without the hlc and traceparent columns (what
 * schema apply makes with no flags). ?1 route, ?2 now, ?3 now - lease,
 * ?4 limit, ?5 the fence stamp. */
static void sql_claim(sbuf_t *b, const claim_names_t *n)
{
    add(b, "UPDATE ");
    add(b, n->rel);
    add(b, " SET status = 'processing', processing_at = ?5, attempts = attempts "
           "+ 1 WHERE id IN (SELECT id FROM (");
    claim_arm(b, n, n->order_idx,
              "o.status = 'pending' AND (o.available_at IS NULL OR o.available_at <= ?2)",
              "o.created_at, o.id");
    add(b, " UNION ALL ");
    claim_arm(b, n, NULL,
              "o.status = 'processing' AND (o.processing_at IS NULL OR o.processing_at <= ?3)",
              "o.created_at, o.id");
    add(b, ") ORDER BY created_at, id LIMIT ?4)");
    add(b, " RETURNING id, outbox_route, event_id, event_type, tenant_id, execution_id, "
           "correlation_id, causation_id, occurred_at, payload, created_at, attempts, "
           "available_at, ordering_key, last_error");
}

static void claim_names(const char *relation, char *rel, size_t size, claim_names_t *n)
{
    rel_sql(relation, rel, size);
    n->rel = rel;
    const char *dot = strchr(relation, '.');
    const char *table = dot ? dot + 1 : relation;
    snprintf(n->order_idx, sizeof n->order_idx, "\"%s_order_idx\"", table);
    snprintf(n->key_idx, sizeof n->key_idx, "\"%s_key_idx\"", table);
}

/* drivers/store-sqlite/sqlite_rows.c, sql_max_processing(): the fence. */
static void sql_fence(sbuf_t *b, const char *rel)
{
    add(b, "SELECT max(processing_at) FROM ");
    add(b, rel);
    add(b, " WHERE outbox_route = ?1 AND status = 'processing'");
}

/* drivers/store-sqlite/sqlite_rows.c, sql_set_published(): fenced_update() with
 * SQ_FENCED. */
static void sql_published(sbuf_t *b, const char *rel)
{
    add(b, "UPDATE ");
    add(b, rel);
    add(b, " SET status = 'published', published_at = ?3"
           " WHERE id = ?1 AND status = 'processing' AND processing_at = ?2");
}

/* The reference: the plainest claim and mark there is, with no per-key
 * rule, no lease takeover and no fence; the claim returns the rows a relay
 * must read, as the driver's does. ?1 route, ?2 limit, ?3 now. */
static void sql_plain_claim(sbuf_t *b, const char *rel)
{
    add(b, "UPDATE ");
    add(b, rel);
    add(b, " SET status = 'processing', processing_at = ?3, attempts = attempts + 1 WHERE id IN "
           "(SELECT id FROM ");
    add(b, rel);
    add(b, " WHERE outbox_route = ?1 AND status = 'pending' ORDER BY created_at, id LIMIT ?2)");
    add(b, " RETURNING id, outbox_route, event_id, event_type, tenant_id, execution_id, "
           "correlation_id, causation_id, occurred_at, payload, created_at, attempts, "
           "available_at, ordering_key, last_error");
}

/* ?1 id, ?2 now. */
static void sql_plain_mark(sbuf_t *b, const char *rel)
{
    add(b, "UPDATE ");
    add(b, rel);
    add(b, " SET status = 'published', published_at = ?2 WHERE id = ?1");
}

/* ------------------------------------------- is the copy still exact? */

/* Every connection opened while tracing is on (the driver's too: it uses
 * the same libsqlite3 in this process) reports the text of each statement
 * it runs; bsq_trace_check() then looks for the ceiling's three statements
 * among them. */
static atomic_int trace_on;
static pthread_mutex_t trace_mu = PTHREAD_MUTEX_INITIALIZER;
static char **traced;
static size_t n_traced, cap_traced;

static int trace_stmt(unsigned type, void *ctx, void *p, void *x)
{
    (void)ctx, (void)x;
    if (type != SQLITE_TRACE_STMT || !atomic_load(&trace_on))
        return 0;
    const char *sql = sqlite3_sql((sqlite3_stmt *)p);
    if (!sql)
        return 0;
    pthread_mutex_lock(&trace_mu);
    size_t i = 0;
    while (i < n_traced && strcmp(traced[i], sql) != 0)
        i++;
    if (i == n_traced) {
        if (n_traced == cap_traced) {
            size_t cap = cap_traced ? 2 * cap_traced : 32;
            char **v = realloc(traced, cap * sizeof *v);
            if (v) {
                traced = v;
                cap_traced = cap;
            }
        }
        if (n_traced < cap_traced && (traced[n_traced] = strdup(sql)) != NULL)
            n_traced++;
    }
    pthread_mutex_unlock(&trace_mu);
    return 0;
}

static int trace_hook(sqlite3 *db, char **err, const struct sqlite3_api_routines *api)
{
    (void)err, (void)api;
    if (atomic_load(&trace_on))
        sqlite3_trace_v2(db, SQLITE_TRACE_STMT, trace_stmt, NULL);
    return SQLITE_OK;
}

static void bsq_trace_start(void)
{
    static int hooked;
    if (!hooked)
        sqlite3_auto_extension((void (*)(void))trace_hook);
    hooked = 1;
    atomic_store(&trace_on, 1);
}

static void trace_clear(void)
{
    atomic_store(&trace_on, 0);
    pthread_mutex_lock(&trace_mu);
    for (size_t i = 0; i < n_traced; i++)
        free(traced[i]);
    free(traced);
    traced = NULL;
    n_traced = cap_traced = 0;
    pthread_mutex_unlock(&trace_mu);
}

static int seen(const char *sql)
{
    pthread_mutex_lock(&trace_mu);
    int found = 0;
    for (size_t i = 0; i < n_traced && !found; i++)
        found = strcmp(traced[i], sql) == 0;
    pthread_mutex_unlock(&trace_mu);
    return found;
}

static int bsq_trace_check(const char *relation, int *verified, char *err, size_t errlen)
{
    atomic_store(&trace_on, 0);
    *verified = 0;
    char rel[300];
    claim_names_t names;
    claim_names(relation, rel, sizeof rel, &names);
    sbuf_t *b = malloc(sizeof *b);
    if (!b) {
        trace_clear();
        snprintf(err, errlen, "out of memory");
        return BENCH_EXIT_FAIL;
    }
    int rc = 0;
    if (n_traced > 0) {
        static const char *const what[] = {"fence", "claim", "mark-published"};
        for (int i = 0; i < 3 && rc == 0; i++) {
            b->len = 0;
            b->p[0] = '\0';
            if (i == 0)
                sql_fence(b, rel);
            else if (i == 1)
                sql_claim(b, &names);
            else
                sql_published(b, rel);
            if (!seen(b->p)) {
                snprintf(err, errlen,
                         "the SQLite driver no longer runs the ceiling's %s statement; update "
                         "the copy in tools/bench/ceiling_sqlite.c from drivers/store-sqlite/",
                         what[i]);
                rc = BENCH_EXIT_FAIL;
            }
        }
        *verified = rc == 0;
    }
    free(b);
    trace_clear();
    return rc;
}

/* ------------------------------------------------------ the bare loop */

enum { S_BEGIN, S_COMMIT, S_ROLLBACK, S_FENCE, S_CLAIM, S_MARK, S_COUNT };

typedef struct cworker {
    const char *path;
    int plain; /* 1: the reference's SQL, 0: the driver's */
    const claim_names_t *names;
    long batch;
    long events;
    int64_t poll_us;
    atomic_long *published;
    bench_gate_t *start;
    busy_state_t busy;
    sqlite3 *db;
    sqlite3_stmt *st[S_COUNT];
    char (*ids)[48];
    int rc;
    char err[512];
} cworker_t;

static int64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Like the driver's outbox_sqlite_stmt() (sqlite_conn.c): reset and clear
 * before each use. */
static sqlite3_stmt *use(cworker_t *w, int i)
{
    sqlite3_reset(w->st[i]);
    sqlite3_clear_bindings(w->st[i]);
    return w->st[i];
}

static int run_done(cworker_t *w, int i, const char *what)
{
    sqlite3_stmt *st = use(w, i);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        ;
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return db_fail(w->db, what, w->err, sizeof w->err);
    return 0;
}

static void rollback(cworker_t *w)
{
    if (!sqlite3_get_autocommit(w->db)) {
        sqlite3_reset(w->st[S_ROLLBACK]);
        sqlite3_step(w->st[S_ROLLBACK]);
        sqlite3_reset(w->st[S_ROLLBACK]);
    }
}

static int cworker_prepare(cworker_t *w)
{
    int rc = connect(w->path, 0, &w->busy, &w->db, w->err, sizeof w->err);
    if (rc != 0)
        return rc;
    sbuf_t *b = malloc(sizeof *b);
    w->ids = calloc((size_t)w->batch, sizeof *w->ids);
    if (!b || !w->ids) {
        free(b);
        snprintf(w->err, sizeof w->err, "out of memory");
        return BENCH_EXIT_FAIL;
    }
    for (int i = 0; i < S_COUNT && rc == 0; i++) {
        b->len = 0;
        b->p[0] = '\0';
        switch (i) {
        case S_BEGIN: add(b, "BEGIN IMMEDIATE"); break;
        case S_COMMIT: add(b, "COMMIT"); break;
        case S_ROLLBACK: add(b, "ROLLBACK"); break;
        case S_FENCE: sql_fence(b, w->names->rel); break;
        case S_CLAIM: w->plain ? sql_plain_claim(b, w->names->rel) : sql_claim(b, w->names); break;
        default: w->plain ? sql_plain_mark(b, w->names->rel) : sql_published(b, w->names->rel); break;
        }
        if (sqlite3_prepare_v3(w->db, b->p, -1, SQLITE_PREPARE_PERSISTENT, &w->st[i], NULL) !=
            SQLITE_OK)
            rc = db_fail(w->db, "preparing the ceiling's statements", w->err, sizeof w->err);
    }
    free(b);
    return rc;
}

/* The driver's fence (sqlite_rows.c fence_stamp()) and claim
 * (claim_rows()) bound, or the reference's plain claim; *stamp the fence. */
static int bind_claim(cworker_t *w, int64_t now, int64_t *stamp, sqlite3_stmt **out)
{
    *stamp = now;
    sqlite3_stmt *st;
    if (w->plain) {
        st = use(w, S_CLAIM);
        sqlite3_bind_text(st, 1, BENCH_ROUTE, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, w->batch);
        sqlite3_bind_int64(st, 3, now);
        *out = st;
        return 0;
    }
    st = use(w, S_FENCE);
    sqlite3_bind_text(st, 1, BENCH_ROUTE, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_ROW) {
        int rc = db_fail(w->db, "fence", w->err, sizeof w->err);
        sqlite3_reset(st);
        return rc;
    }
    if (sqlite3_column_type(st, 0) != SQLITE_NULL) {
        int64_t max = sqlite3_column_int64(st, 0);
        if (max >= now && max < INT64_MAX)
            *stamp = max + 1;
    }
    sqlite3_reset(st);
    st = use(w, S_CLAIM);
    sqlite3_bind_text(st, 1, BENCH_ROUTE, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, now);
    sqlite3_bind_int64(st, 3, now - BSQ_LEASE_US);
    sqlite3_bind_int64(st, 4, w->batch);
    sqlite3_bind_int64(st, 5, *stamp);
    *out = st;
    return 0;
}

/* One claim transaction; *n ids kept in w->ids, *stamp the fence. */
static int claim_once(cworker_t *w, int64_t *stamp, long *n)
{
    *n = 0;
    int64_t now = wall_us();
    int rc = run_done(w, S_BEGIN, "begin");
    if (rc != 0)
        return rc;
    sqlite3_stmt *st = NULL;
    rc = bind_claim(w, now, stamp, &st);
    if (rc != 0) {
        rollback(w);
        return rc;
    }
    int src;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        const char *id = (const char *)sqlite3_column_text(st, 0);
        if (id && *n < w->batch)
            snprintf(w->ids[(*n)++], sizeof w->ids[0], "%s", id);
    }
    if (src != SQLITE_DONE) {
        rc = db_fail(w->db, "claim", w->err, sizeof w->err);
        sqlite3_reset(st);
        rollback(w);
        return rc;
    }
    sqlite3_reset(st);
    rc = run_done(w, S_COMMIT, "commit");
    if (rc != 0)
        rollback(w);
    return rc;
}

/* One settle(published) transaction: one fenced UPDATE per id. */
static int mark_once(cworker_t *w, int64_t stamp, long n, long *applied)
{
    *applied = 0;
    int64_t now = wall_us();
    int rc = run_done(w, S_BEGIN, "begin");
    for (long i = 0; i < n && rc == 0; i++) {
        sqlite3_stmt *st = use(w, S_MARK);
        sqlite3_bind_text(st, 1, w->ids[i], -1, SQLITE_STATIC);
        if (w->plain) {
            sqlite3_bind_int64(st, 2, now);
        } else {
            sqlite3_bind_int64(st, 2, stamp);
            sqlite3_bind_int64(st, 3, now);
        }
        int src = sqlite3_step(st);
        sqlite3_reset(st);
        if (src != SQLITE_DONE)
            rc = db_fail(w->db, "mark published", w->err, sizeof w->err);
        else
            *applied += sqlite3_changes(w->db) > 0;
    }
    if (rc == 0)
        rc = run_done(w, S_COMMIT, "commit");
    if (rc != 0)
        rollback(w);
    return rc;
}

static void *cworker_main(void *arg)
{
    cworker_t *w = arg;
    pthread_setname_np(pthread_self(), "bench-ceiling"); /* for perf and top */
    w->rc = cworker_prepare(w);
    if (!bench_gate_wait(w->start))
        return NULL;
    bench_idle_t idle = BENCH_IDLE_INIT;
    while (w->rc == 0 && atomic_load(w->published) < w->events) {
        int64_t stamp = 0;
        long n = 0, applied = 0;
        w->rc = claim_once(w, &stamp, &n);
        if (w->rc == 0 && n > 0) {
            w->rc = mark_once(w, stamp, n, &applied);
            atomic_fetch_add(w->published, applied);
        } else if (w->rc == 0 && bench_idle_wait(&idle, w->published, w->events, w->poll_us)) {
            snprintf(w->err, sizeof w->err,
                     "ceiling stalled: nothing published for %lld s, %ld of %ld published",
                     BENCH_STALL_US / 1000000, atomic_load(w->published), w->events);
            w->rc = BENCH_EXIT_FAIL;
        }
    }
    return NULL;
}

static int bare_drain(void *db, const bench_opts_t *o, const char *relation, int plain,
                      bench_drain_t *out, char *err, size_t errlen)
{
    bsq_t *b = db;
    long batch = o->batch, workers = o->workers, events = o->events;
    int64_t poll_us = o->poll_us;
    char rel[300];
    claim_names_t names;
    claim_names(relation, rel, sizeof rel, &names);
    cworker_t *w = calloc((size_t)workers, sizeof *w);
    pthread_t *tid = calloc((size_t)workers, sizeof *tid);
    if (!w || !tid) {
        free(w);
        free(tid);
        snprintf(err, errlen, "out of memory");
        return BENCH_EXIT_FAIL;
    }
    atomic_long published;
    atomic_init(&published, 0);
    bench_gate_t start;
    bench_gate_init(&start);
    long started = 0;
    for (long i = 0; i < workers; i++) {
        w[i] = (cworker_t){.path = b->path, .plain = plain, .names = &names, .batch = batch, .events = events, .poll_us = poll_us,
                           .published = &published, .start = &start,
                           .busy = {.busy_ms = b->busy_ms}};
        if (pthread_create(&tid[i], NULL, cworker_main, &w[i]) != 0)
            break;
        started++;
    }
    int rc = 0;
    if (started < workers) {
        snprintf(err, errlen, "cannot start %ld threads", workers);
        rc = BENCH_EXIT_FAIL;
    }
    /* Every connection is open and its statements prepared before the clock starts. */
    bench_gate_open(&start, started, rc == 0);
    double cpu0 = bench_cpu_s();
    int64_t t0 = bench_mono_us();
    for (long i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    out->seconds = (double)(bench_mono_us() - t0) / 1e6;
    out->cpu_s = bench_cpu_s() - cpu0;
    for (long i = 0; i < started; i++) {
        if (w[i].rc != 0 && rc == 0) {
            snprintf(err, errlen, "%s: %s", plain ? "reference" : "ceiling", w[i].err);
            rc = w[i].rc;
        }
        for (int s = 0; s < S_COUNT; s++)
            sqlite3_finalize(w[i].st[s]);
        sqlite3_close_v2(w[i].db);
        free(w[i].ids);
    }
    bench_gate_destroy(&start);
    free(w);
    free(tid);
    return rc;
}

static int bsq_ceiling(void *db, const bench_opts_t *o, const char *relation, bench_drain_t *out,
                       char *err, size_t errlen)
{
    return bare_drain(db, o, relation, 0, out, err, errlen);
}

static int bsq_reference(void *db, const bench_opts_t *o, const char *relation,
                         bench_drain_t *out, char *err, size_t errlen)
{
    return bare_drain(db, o, relation, 1, out, err, errlen);
}

static int bsq_messages(void *db, const char *relation, bench_msgs_t *out, char *err,
                        size_t errlen)
{
    bsq_t *b = db;
    char rel[300], sql[700];
    rel_sql(relation, rel, sizeof rel);
    snprintf(sql, sizeof sql,
             "SELECT event_id, ordering_key, occurred_at, payload FROM %s "
             "ORDER BY created_at, id",
             rel);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(b->db, sql, -1, &st, NULL) != SQLITE_OK)
        return db_fail(b->db, "reading the backlog's messages", err, errlen);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *payload = (const char *)sqlite3_column_text(st, 3);
        size_t len = (size_t)sqlite3_column_bytes(st, 3);
        if (bench_msgs_add(out, (const char *)sqlite3_column_text(st, 0),
                           (const char *)sqlite3_column_text(st, 1), sqlite3_column_int64(st, 2),
                           payload ? payload : "", len) != 0) {
            sqlite3_finalize(st);
            snprintf(err, errlen, "out of memory for the backlog's messages");
            return BENCH_EXIT_FAIL;
        }
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return db_fail(b->db, "reading the backlog's messages", err, errlen);
    bench_msgs_seal(out);
    return 0;
}

const bench_backend_t bench_sqlite_backend = {
    .name = "sqlite",
    .ceiling_in_process = 1,
    .open = bsq_open,
    .close = bsq_close,
    .claim_relation = bsq_claim_relation,
    .drop_relation = bsq_drop_relation,
    .copy = bsq_copy,
    .count = bsq_count,
    .quiesce = bsq_quiesce,
    .ceiling = bsq_ceiling,
    .reference = bsq_reference,
    .trace_start = bsq_trace_start,
    .trace_check = bsq_trace_check,
    .messages = bsq_messages,
};
