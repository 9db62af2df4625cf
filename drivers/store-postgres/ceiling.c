/* PostgreSQL store driver, top of the house: its benchmark ceiling
 * (outbox/ceiling.h), compiled with the driver's sources into outbox-bench
 * and its test only.
 *
 * The ceiling is the driver's claim and settle(published) statements,
 * built by the driver's own builders (outbox_pg_build_claim/_settle) for
 * a handle the driver opened on the table, and driven by pgbench (-M
 * prepared, one client per relay worker, each statement its own
 * transaction as the driver runs them). Two changes are forced by pgbench,
 * which cannot carry a result set from one command to the next:
 *
 *  - the claim's final UPDATE ... RETURNING becomes a data-modifying CTE
 *    whose ids, count and fence (the processing_at it wrote) one SELECT
 *    hands to \gset, where the driver reads the rows back;
 *  - the bound parameters are pgbench variables: the claim's $1 route and
 *    $2 lease are set with -D, and settle's four arrays and fence are made
 *    from the claim's variables: the ids, and kind 1 (published), NULL
 *    available_at, NULL error for each.
 *
 * tests/integration/postgres/test_ceiling_pg.c checks that the script's
 * statements are, but for those two changes, the ones the driver prepares
 * when it claims and settles.
 *
 * The reference is a third drain on a copy of the same backlog: the
 * plainest claim and mark, for scale. Beside them, the bench's own
 * bookkeeping: the relations it creates are recorded in
 * outbox_bench_relations, and an existing table it did not create is
 * refused. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pg_ceiling.h"
#include "pg_ops.h"

/* The descriptor pg.c defines when built with
 * -DOUTBOX_DRIVER_STATIC=postgres_ceiling. */
const outbox_driver_t *outbox_driver_entry_postgres_ceiling(void);

/* The bench's connection: the driver's connection string for the URI
 * (pgbench gets it too) and a plain session of its own, without the
 * planner settings of the driver's. */
typedef struct ceil_db {
    char *uri;
    char *conninfo;
    PGconn *conn;
} ceil_db_t;

/* ------------------------------------------------------------ strings */

typedef struct sb {
    char *p;
    size_t len, cap;
    int failed;
} sb_t;

static void sb_put(sb_t *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_add(sb_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sb_t *b, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (need < 0) {
        b->failed = 1;
    } else if ((size_t)need < sizeof small) {
        sb_put(b, small, (size_t)need);
    } else {
        char *big = malloc((size_t)need + 1);
        if (!big) {
            b->failed = 1;
            return;
        }
        va_start(ap, fmt);
        vsnprintf(big, (size_t)need + 1, fmt, ap);
        va_end(ap);
        sb_put(b, big, (size_t)need);
        free(big);
    }
}

/* The text, or NULL (freed) when building it failed. */
static char *sb_done(sb_t *b)
{
    if (b->failed || !b->p) {
        free(b->p);
        return NULL;
    }
    return b->p;
}

/* "schema"."table" or "table"; relation is one the bench checked
 * (outbox_relation_valid), so there are no quotes inside. */
static void rel_sql(const char *relation, char *out, size_t size)
{
    const char *dot = strchr(relation, '.');
    if (dot)
        snprintf(out, size, "\"%.*s\".\"%s\"", (int)(dot - relation), relation, dot + 1);
    else
        snprintf(out, size, "\"%s\"", relation);
}

/* ---------------------------------------------------- the driver's store */

/* Opens relation of uri through the driver this ceiling was built with
 * (registered by the bench), checking that it was: only then is the
 * handle a pg_handle_t. */
static int open_store(const char *uri, const char *relation, uint32_t flags, outbox_store_t **s,
                      pg_handle_t **h, char *err, size_t errlen)
{
    void *handle = NULL;
    int rc = outbox_ceiling_store_open(outbox_driver_entry_postgres_ceiling(), PG_NAME, uri, relation, flags, s,
                                       &handle, err, errlen);
    *h = handle;
    return rc;
}

/* --------------------------------------------------------------- libpq */

static int pq_fail(PGconn *c, PGresult *r, const char *what, char *err, size_t errlen)
{
    const char *m = r ? PQresultErrorMessage(r) : c ? PQerrorMessage(c) : "out of memory";
    snprintf(err, errlen, "%s: %s", what, m && *m ? m : "failed");
    /* One line: libpq ends its messages with a newline. */
    for (char *p = err; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = *(p + 1) ? ' ' : '\0';
    PQclear(r);
    return OUTBOX_CEILING_FAIL;
}

/* Runs sql with up to two text parameters; *out gets the result when asked. */
static int exec(ceil_db_t *c, const char *sql, const char *p1, const char *p2, PGresult **out,
                const char *what, char *err, size_t errlen)
{
    const char *params[2] = {p1, p2};
    int n = p2 ? 2 : p1 ? 1 : 0;
    PGresult *r = n ? PQexecParams(c->conn, sql, n, NULL, params, NULL, NULL, 0)
                    : PQexec(c->conn, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        return pq_fail(c->conn, r, what, err, errlen);
    if (out)
        *out = r;
    else
        PQclear(r);
    return 0;
}

static int exec_rel(ceil_db_t *c, const char *fmt, const char *relation, const char *what,
                    char *err, size_t errlen)
{
    char rel[300], sql[1024];
    rel_sql(relation, rel, sizeof rel);
    snprintf(sql, sizeof sql, fmt, rel);
    return exec(c, sql, NULL, NULL, NULL, what, err, errlen);
}

static void ceil_close(void *db)
{
    ceil_db_t *c = db;
    if (!c)
        return;
    PQfinish(c->conn);
    free(c->conninfo);
    free(c->uri);
    free(c);
}

/* The driver's connection string for uri: what its handle connected with. */
static int conninfo_of(ceil_db_t *c, char *err, size_t errlen)
{
    outbox_store_t *s = NULL;
    pg_handle_t *h = NULL;
    int rc = open_store(c->uri, "outbox_bench_relations", OUTBOX_OPEN_SCHEMA_ONLY, &s, &h, err,
                        errlen);
    if (rc != 0)
        return rc;
    c->conninfo = strdup(h->conninfo);
    outbox_store_close(s);
    if (!c->conninfo) {
        snprintf(err, errlen, "out of memory");
        return OUTBOX_CEILING_FAIL;
    }
    return 0;
}

static int ceil_open(const char *uri, void **out, char *err, size_t errlen)
{
    *out = NULL;
    ceil_db_t *c = calloc(1, sizeof *c);
    if (!c || !(c->uri = strdup(uri))) {
        free(c);
        snprintf(err, errlen, "out of memory");
        return OUTBOX_CEILING_FAIL;
    }
    int rc = conninfo_of(c, err, errlen);
    if (rc == 0) {
        c->conn = PQconnectdb(c->conninfo);
        if (PQstatus(c->conn) != CONNECTION_OK)
            rc = pq_fail(c->conn, NULL, "cannot connect", err, errlen);
    }
    if (rc == 0)
        rc = exec(c, "SET client_min_messages = warning", NULL, NULL, NULL, "session", err,
                  errlen);
    if (rc == 0)
        rc = exec(c,
                  "CREATE TABLE IF NOT EXISTS outbox_bench_relations "
                  "(relation TEXT NOT NULL PRIMARY KEY)",
                  NULL, NULL, NULL, "creating outbox_bench_relations", err, errlen);
    if (rc != 0) {
        ceil_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* ------------------------------------------------------ the relations */

static int marked(ceil_db_t *c, const char *relation, int *is_marked, char *err, size_t errlen)
{
    PGresult *r = NULL;
    int rc = exec(c, "SELECT 1 FROM outbox_bench_relations WHERE relation = $1", relation, NULL,
                  &r, "reading outbox_bench_relations", err, errlen);
    if (rc == 0) {
        *is_marked = PQntuples(r) > 0;
        PQclear(r);
    }
    return rc;
}

static int ceil_claim_relation(void *db, const char *relation, char *err, size_t errlen)
{
    ceil_db_t *c = db;
    char rel[300];
    rel_sql(relation, rel, sizeof rel);
    PGresult *r = NULL;
    int rc = exec(c, "SELECT to_regclass($1) IS NOT NULL", rel, NULL, &r, "reading the catalog",
                  err, errlen);
    if (rc != 0)
        return rc;
    int exists = PQntuples(r) == 1 && PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    int ours = 0;
    rc = marked(c, relation, &ours, err, errlen);
    if (rc != 0)
        return rc;
    if (exists && !ours) {
        snprintf(err, errlen,
                 "table %s exists and was not created by outbox-bench; choose another --relation "
                 "or database",
                 relation);
        return OUTBOX_CEILING_USAGE;
    }
    if (exists)
        rc = exec_rel(c, "DROP TABLE IF EXISTS %s", relation, "dropping an old bench table", err,
                      errlen);
    if (rc == 0)
        rc = exec(c,
                  "INSERT INTO outbox_bench_relations (relation) VALUES ($1) ON CONFLICT DO "
                  "NOTHING",
                  relation, NULL, NULL, "writing outbox_bench_relations", err, errlen);
    return rc;
}

static int ceil_drop_relation(void *db, const char *relation, char *err, size_t errlen)
{
    ceil_db_t *c = db;
    int ours = 0;
    int rc = marked(c, relation, &ours, err, errlen);
    if (rc == 0 && ours)
        rc = exec_rel(c, "DROP TABLE IF EXISTS %s", relation, "dropping a bench table", err,
                      errlen);
    if (rc == 0)
        rc = exec(c, "DELETE FROM outbox_bench_relations WHERE relation = $1", relation, NULL,
                  NULL, "writing outbox_bench_relations", err, errlen);
    return rc;
}

static int ceil_copy(void *db, const char *from, const char *to, char *err, size_t errlen)
{
    char f[300], t[300], sql[700];
    rel_sql(from, f, sizeof f);
    rel_sql(to, t, sizeof t);
    snprintf(sql, sizeof sql, "INSERT INTO %s SELECT * FROM %s ORDER BY created_at, id", t, f);
    return exec(db, sql, NULL, NULL, NULL, "copying the backlog", err, errlen);
}

static int ceil_count(void *db, const char *relation, const char *status, long *count,
                      char *err, size_t errlen)
{
    char rel[300], sql[400];
    rel_sql(relation, rel, sizeof rel);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s WHERE status = $1", rel);
    PGresult *r = NULL;
    int rc = exec(db, sql, status, NULL, &r, "counting rows", err, errlen);
    *count = -1;
    if (rc == 0) {
        *count = strtol(PQgetvalue(r, 0, 0), NULL, 10);
        PQclear(r);
    }
    return rc;
}

/* Dead tuples and missing statistics would make one side's plans and
 * scans differ from the other's: VACUUM ANALYZE the table, then CHECKPOINT
 * so neither drain pays for the other's dirty buffers (CHECKPOINT needs
 * superuser or pg_checkpoint; without it, it is skipped). */
static int ceil_quiesce(void *db, const char *relation, char *err, size_t errlen)
{
    ceil_db_t *c = db;
    int rc = 0;
    if (relation)
        rc = exec_rel(c, "VACUUM (ANALYZE) %s", relation, "vacuuming", err, errlen);
    if (rc == 0)
        PQclear(PQexec(c->conn, "CHECKPOINT"));
    return rc;
}

/* Sustained mode: the pending backlog, and dead/live tuples and autovacuum
 * runs from pg_stat_user_tables (the statistics lag by up to a second). */
static int ceil_stats(void *db, const char *relation, long *pending, long *dead, long *live,
                      long *autovacuums, char *err, size_t errlen)
{
    *dead = *live = *autovacuums = -1;
    int rc = ceil_count(db, relation, "pending", pending, err, errlen);
    if (rc != 0)
        return rc;
    char rel[300];
    rel_sql(relation, rel, sizeof rel);
    PGresult *r = NULL;
    rc = exec(db,
              "SELECT n_dead_tup, n_live_tup, autovacuum_count FROM pg_stat_user_tables "
              "WHERE relid = $1::regclass",
              rel, NULL, &r, "reading pg_stat_user_tables", err, errlen);
    if (rc != 0)
        return rc;
    if (PQntuples(r) == 1) {
        *dead = strtol(PQgetvalue(r, 0, 0), NULL, 10);
        *live = strtol(PQgetvalue(r, 0, 1), NULL, 10);
        *autovacuums = strtol(PQgetvalue(r, 0, 2), NULL, 10);
    }
    PQclear(r);
    return 0;
}

/* The per-table autovacuum settings of sql/postgres/autovacuum.sql (keep
 * the two in step), which docs/performance.md measures, for an outbox
 * table: vacuum after a fixed number of dead rows (not a fraction of a
 * table that only grows), without cost-based throttling, and analyze and
 * vacuum the insert-only growth often enough to keep plans and the
 * visibility map current. */
#define CEIL_AUTOVACUUM                                                                    \
    "autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000, "           \
    "autovacuum_vacuum_cost_delay = 0, autovacuum_vacuum_insert_scale_factor = 0, "       \
    "autovacuum_vacuum_insert_threshold = 100000, autovacuum_analyze_scale_factor = 0, "  \
    "autovacuum_analyze_threshold = 100000"

static int ceil_autovacuum(void *db, const char *relation, char *err, size_t errlen)
{
    return exec_rel(db, "ALTER TABLE %s SET (" CEIL_AUTOVACUUM ")", relation,
                    "setting autovacuum", err, errlen);
}

/* The shipped schema's additions to the canonical table are exactly its
 * partial indexes (pending, key, processing and their hlc twins); the
 * canonical table has none, so dropping every partial index leaves it. */
static int ceil_canonical_only(void *db, const char *relation, char *err, size_t errlen)
{
    char rel[300];
    rel_sql(relation, rel, sizeof rel);
    PGresult *r = NULL;
    int rc = exec(db,
                  "SELECT coalesce(string_agg(format('%I.%I', n.nspname, c.relname), ', '), '') "
                  "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n "
                  "ON n.oid = c.relnamespace WHERE i.indrelid = to_regclass($1) AND i.indpred "
                  "IS NOT NULL",
                  rel, NULL, &r, "listing the partial indexes", err, errlen);
    if (rc != 0)
        return rc;
    char sql[1200];
    int n = snprintf(sql, sizeof sql, "DROP INDEX %s", PQgetvalue(r, 0, 0));
    int none = PQgetvalue(r, 0, 0)[0] == '\0';
    PQclear(r);
    if (none)
        return 0;
    if (n < 0 || (size_t)n >= sizeof sql) {
        snprintf(err, errlen, "too many partial indexes on %s", relation);
        return OUTBOX_CEILING_FAIL;
    }
    return exec(db, sql, NULL, NULL, NULL, "dropping the partial indexes", err, errlen);
}

/* ---------------------------------------------------- the pgbench script */

/* The bound parameters as pgbench spells them: pgbench -M prepared turns
 * each :name back into a bound parameter. */
static const char *const claim_vars[] = {":route", ":lease"};
static const char *const settle_vars[] = {
    ":ids",
    "array_fill(1, ARRAY[:n::int4])",                 /* every kind OUTBOX_SETTLE_PUBLISHED */
    "array_fill(NULL::timestamptz, ARRAY[:n::int4])", /* no available_at */
    "array_fill(NULL::text, ARRAY[:n::int4])",        /* no error */
    ":fence",
};

/* n bytes of the driver's sql with each $N (N in 1..nvars, no digit after)
 * replaced by vars[N - 1]. */
static void put_vars(sb_t *out, const char *sql, size_t n, const char *const *vars, int nvars)
{
    size_t from = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        int k = sql[i + 1] - '0';
        if (sql[i] != '$' || k < 1 || k > nvars ||
            (i + 2 < n && sql[i + 2] >= '0' && sql[i + 2] <= '9'))
            continue;
        sb_put(out, sql + from, i - from);
        sb_add(out, "%s", vars[k - 1]);
        from = i + 2;
        i++;
    }
    sb_put(out, sql + from, n - from);
}

/* The driver's claim and settle(published) for h's table at batch, as the
 * file header says pgbench runs them. */
static void driver_script(sb_t *out, const pg_handle_t *h, long batch)
{
    outbox_kit_buf_t claim, settle;
    outbox_kit_buf_init(&claim, outbox_pg_host);
    outbox_kit_buf_init(&settle, outbox_pg_host);
    size_t at = 0;
    outbox_pg_build_claim(h, &claim, 0, batch, &at);
    outbox_pg_build_settle(h, &settle);
    if (claim.failed || settle.failed || at >= claim.len || claim.data[at] != ' ') {
        out->failed = 1;
    } else {
        put_vars(out, claim.data, at, claim_vars, 2);
        sb_add(out, ", claimed AS (");
        put_vars(out, claim.data + at + 1, claim.len - at - 1, claim_vars, 2);
        sb_add(out, ") SELECT coalesce(array_agg(id), '{}')::text AS ids, count(*) AS n, "
                    "coalesce(max(processing_at), 'epoch')::text AS fence FROM claimed\n\\gset\n");
        put_vars(out, settle.data, settle.len, settle_vars, 5);
        sb_add(out, ";\n");
    }
    outbox_kit_buf_free(&claim);
    outbox_kit_buf_free(&settle);
}

/* The reference: issue 5's "bare claim+mark SQL on the canonical table",
 * the plainest claim there is (the first batch of pending rows in claim
 * order, locked with SKIP LOCKED, marked processing) and a mark that sets
 * the claimed ids published. It has none of the driver's per-key rule,
 * expired-lease arm, fence or outcome kinds, so it bounds what any claim
 * on this table can cost; the absolute targets were measured with
 * SQL of this kind, and running it here translates them to this machine. */
static void reference_script(sb_t *out, const char *relation, long batch)
{
    char rel[300];
    rel_sql(relation, rel, sizeof rel);
    sb_add(out,
           "-- The reference claim+mark of outbox-bench for relation %s at batch %ld\n"
           "-- (see reference_script in drivers/store-postgres/ceiling.c).\n"
           "WITH claimed AS (UPDATE %s AS o SET status = 'processing', processing_at = now(), "
           "attempts = o.attempts + 1 WHERE o.id IN (SELECT id FROM %s WHERE outbox_route = "
           ":route AND status = 'pending' ORDER BY created_at, id LIMIT %ld FOR UPDATE SKIP "
           "LOCKED) RETURNING o.*) SELECT coalesce(array_agg(id), '{}')::text AS ids FROM "
           "claimed\n\\gset\n"
           "UPDATE %s SET status = 'published', published_at = now() WHERE id = "
           "ANY (:ids::uuid[]);\n",
           relation, batch, rel, rel, batch, rel);
}

/* A relay's default lease (core/relay.c, outbox_relay_config_init), for
 * the comment that says how to run the script by hand. */
#define CEIL_LEASE_US 30000000LL

static char *script_of(const pg_handle_t *h, const char *relation, long batch, int reference)
{
    sb_t out = {0};
    if (reference) {
        reference_script(&out, relation, batch);
        return sb_done(&out);
    }
    sb_add(&out,
           "-- The PostgreSQL ceiling of outbox-bench for relation %s at batch %ld: the\n"
           "-- claim and settle(published) statements of drivers/store-postgres/pg_rows.c,\n"
           "-- as pgbench runs them (drivers/store-postgres/ceiling.c), printed by\n"
           "-- outbox-bench --pgbench-script. Run against a table holding a backlog on\n"
           "-- route 'bench', e.g.:\n"
           "--   pgbench -n -M prepared -c 1 -j 1 -t 1000 -D route=bench \\\n"
           "--           -D lease=%lld -f postgres_ceiling.sql postgresql://...\n",
           relation, batch, CEIL_LEASE_US);
    driver_script(&out, h, batch);
    return sb_done(&out);
}

char *outbox_pg_ceiling_script(const char *relation, long batch, int reference)
{
    /* The driver's builders allocate through its host table. */
    outbox_diag_t d = {0};
    if (outbox_driver_register(outbox_driver_entry_postgres_ceiling(), &d) != OUTBOX_OK)
        return NULL;
    /* The handle outbox-bench's schema apply makes the driver open: the
     * shipped schema's pending and key indexes, no optional column. */
    pg_handle_t h = {.claim_idx = PG_IDX_PENDING | PG_IDX_KEY};
    if (outbox_pg_relname(relation, &h.rel, &d) != OUTBOX_OK)
        return NULL;
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_pg_host);
    outbox_kit_buf_relname(&b, &h.rel, '"');
    h.rel_sql = outbox_kit_buf_steal(&b);
    char *script = h.rel_sql ? script_of(&h, relation, batch, reference) : NULL;
    outbox_pg_host->free(h.rel_sql);
    return script;
}

char *outbox_pg_ceiling_store_script(const char *uri, const char *relation, long batch,
                                     int reference, char *err, size_t errlen)
{
    outbox_store_t *s = NULL;
    pg_handle_t *h = NULL;
    if (open_store(uri, relation, 0, &s, &h, err, errlen) != 0)
        return NULL;
    char *script = script_of(h, relation, batch, reference);
    outbox_store_close(s);
    if (!script)
        snprintf(err, errlen, "out of memory for the pgbench script");
    return script;
}

/* ------------------------------------------------------------ pgbench */

/* pgbench from PATH, else from the newest /usr/lib/postgresql/N/bin. */
static int find_pgbench(char *out, size_t size)
{
    const char *path = getenv("PATH");
    for (const char *p = path; p && *p;) {
        size_t n = strcspn(p, ":");
        snprintf(out, size, "%.*s/pgbench", (int)n, p);
        if (n && access(out, X_OK) == 0)
            return 1;
        p += n + (p[n] == ':');
    }
    for (int v = 30; v >= 10; v--) {
        snprintf(out, size, "/usr/lib/postgresql/%d/bin/pgbench", v);
        if (access(out, X_OK) == 0)
            return 1;
    }
    return 0;
}

static double children_cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_CHILDREN, &ru) != 0)
        return 0;
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

/* Runs argv with its stdout and stderr into *out; its exit status, or -1
 * when it did not exit. */
static int run_captured(char *const argv[], sb_t *out, char *err, size_t errlen)
{
    int pipefd[2];
    if (pipe(pipefd) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -2;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        close(pipefd[0]);
        close(pipefd[1]);
        snprintf(err, errlen, "fork: %s", strerror(errno));
        return -2;
    }
    if (pid == 0) {
        dup2(pipefd[1], STDOUT_FILENO);
        dup2(pipefd[1], STDERR_FILENO);
        close(pipefd[0]);
        close(pipefd[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(pipefd[1]);
    char buf[4096];
    ssize_t n;
    while ((n = read(pipefd[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
        if (n > 0)
            sb_put(out, buf, (size_t)n);
    close(pipefd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* pgbench's last line, which says why it failed. */
static void last_words(const char *out, int status, char *err, size_t errlen)
{
    const char *text = out ? out : "no output";
    size_t len = strlen(text);
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == ' '))
        len--;
    size_t start = len;
    while (start > 0 && text[start - 1] != '\n')
        start--;
    snprintf(err, errlen, "pgbench failed (status %d): %.*s", status, (int)(len - start),
             text + start);
}

#define PROCESSED "number of transactions actually processed: "

/* Runs pgbench with -t txns per client; *seconds is the time pgbench
 * measured without connection set-up. */
static int run_pgbench(const char *exe, const char *script, const ceil_db_t *c,
                       const outbox_ceiling_job_t *job, long workers, long txns, double *seconds,
                       char *err, size_t errlen)
{
    char clients[24], tx[24], route[300], lease[48];
    snprintf(clients, sizeof clients, "%ld", workers);
    snprintf(tx, sizeof tx, "%ld", txns);
    snprintf(route, sizeof route, "route=%s", job->route);
    snprintf(lease, sizeof lease, "lease=%lld", (long long)job->lease_us);
    char *const argv[] = {(char *)exe, "-n", "-M", "prepared", "-c", clients, "-j", clients,
                          "-t", tx, "-D", route, "-D", lease, "-f", (char *)script,
                          c->conninfo, NULL};
    sb_t out = {0};
    int status = run_captured(argv, &out, err, errlen);
    if (status == -2) {
        free(out.p);
        return OUTBOX_CEILING_FAIL;
    }
    const char *tps = out.p ? strstr(out.p, "tps = ") : NULL;
    const char *done = out.p ? strstr(out.p, PROCESSED) : NULL;
    int rc = 0;
    if (status != 0 || !tps || !done) {
        last_words(out.p, status, err, errlen);
        rc = OUTBOX_CEILING_FAIL;
    } else {
        double t = strtod(tps + strlen("tps = "), NULL);
        long processed = strtol(done + strlen(PROCESSED), NULL, 10);
        *seconds = t > 0 ? (double)processed / t : 0;
    }
    free(out.p);
    return rc;
}

/* script into a file of its own; its path into path. */
static int write_script(const char *script, char *path, char *err, size_t errlen)
{
    int fd = mkstemps(path, 4);
    if (fd < 0) {
        snprintf(err, errlen, "cannot write the pgbench script: %s", strerror(errno));
        return OUTBOX_CEILING_FAIL;
    }
    size_t len = strlen(script);
    int rc = write(fd, script, len) == (ssize_t)len ? 0 : OUTBOX_CEILING_FAIL;
    close(fd);
    if (rc != 0) {
        snprintf(err, errlen, "cannot write the pgbench script %s", path);
        unlink(path);
    }
    return rc;
}

/* Drains job->relation with pgbench, workers clients at job->batch, until
 * events rows are published. */
static int ceil_drain(void *db, const outbox_ceiling_job_t *job, long workers, long events,
                      double *seconds, double *cpu_s, char *err, size_t errlen)
{
    ceil_db_t *c = db;
    *seconds = *cpu_s = 0;
    char exe[512];
    if (!find_pgbench(exe, sizeof exe)) {
        snprintf(err, errlen, "pgbench not found (install postgresql-client); it runs the ceiling");
        return OUTBOX_CEILING_FAIL;
    }
    char *script = outbox_pg_ceiling_store_script(c->uri, job->relation, job->batch,
                                                  job->reference, err, errlen);
    if (!script)
        return OUTBOX_CEILING_FAIL;
    char path[] = "/tmp/outbox-bench-XXXXXX.sql";
    int rc = write_script(script, path, err, errlen);
    free(script);
    if (rc != 0)
        return rc;
    double cpu0 = children_cpu_s();
    long published = 0;
    /* Each client claims up to a batch per transaction; the last rounds of
     * a run may find less, so run again on what is left. */
    for (int round = 0; rc == 0 && published < events && round < 20; round++) {
        long per_round = job->batch * workers;
        long per_client = (events - published + per_round - 1) / per_round;
        double s = 0;
        rc = run_pgbench(exe, path, c, job, workers, per_client, &s, err, errlen);
        *seconds += s;
        if (rc == 0)
            rc = ceil_count(c, job->relation, "published", &published, err, errlen);
    }
    *cpu_s = children_cpu_s() - cpu0;
    unlink(path);
    return rc;
}

const outbox_store_ceiling_t outbox_ceiling_postgres = {
    .struct_size = sizeof(outbox_store_ceiling_t),
    .name = PG_NAME,
    .driver = outbox_driver_entry_postgres_ceiling,
    .in_process = 0,
    .has_reference = 1,
    .open = ceil_open,
    .close = ceil_close,
    .claim_relation = ceil_claim_relation,
    .drop_relation = ceil_drop_relation,
    .copy = ceil_copy,
    .count = ceil_count,
    .quiesce = ceil_quiesce,
    /* pgbench runs the whole drain: no workers in this process. */
    .worker_open = NULL,
    .worker_step = NULL,
    .worker_close = NULL,
    .drain = ceil_drain,
    .trace_start = NULL,
    .trace_check = NULL,
    .stats = ceil_stats,
    .autovacuum = ceil_autovacuum,
    .canonical_only = ceil_canonical_only,
};
