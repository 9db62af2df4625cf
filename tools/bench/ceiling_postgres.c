/* outbox-bench, PostgreSQL: the bench's own tables and the pgbench ceiling.
 *
 * The ceiling is the PostgreSQL driver's claim and settle(published)
 * statements driven by pgbench (-M prepared, one client per relay worker,
 * each statement its own transaction as the driver runs them). The texts
 * are copied from drivers/store-postgres/pg_rows.c by hand, never linked;
 * each copy names the function it comes from. Two changes are forced by
 * pgbench, which cannot carry a result set from one command to the next:
 *
 *  - the claim's final UPDATE ... RETURNING becomes a data-modifying CTE
 *    whose ids, count and fence (the processing_at it wrote) one SELECT
 *    hands to \gset, where the driver reads the rows back;
 *  - settle's four bound arrays are built from those variables: the ids,
 *    and kind 1 (published), NULL available_at, NULL error for each.
 *
 * tools/bench/postgres_ceiling.sql is this script for the default relation
 * and batch (outbox-bench --pgbench-script prints it for any relation and
 * --batch), to run by hand.
 *
 * The reference (bench_pg_reference_script) is a third drain on a copy of
 * the same backlog: the plainest claim and mark, for scale.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "bench.h"

/* relay default lease (core/relay.c, outbox_relay_config_init). */
#define BPG_LEASE_US 30000000LL

typedef struct bpg {
    char *conninfo;
    PGconn *conn;
} bpg_t;

/* ------------------------------------------------------------ strings */

typedef struct sb {
    char *p;
    size_t len, cap;
    int failed;
} sb_t;

static void sb_add(sb_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sb_t *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (need < 0) {
        b->failed = 1;
        return;
    }
    if (b->len + (size_t)need + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + (size_t)need + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)need;
}

/* "schema"."table" or "table": outbox_kit_buf_relname() of include/outbox/kit.h,
 * as the driver quotes them; names are valid identifiers (no quotes inside). */
static void rel_sql(const char *relation, char *out, size_t size)
{
    const char *dot = strchr(relation, '.');
    if (dot)
        snprintf(out, size, "\"%.*s\".\"%s\"", (int)(dot - relation), relation, dot + 1);
    else
        snprintf(out, size, "\"%s\"", relation);
}

/* -------------------------------------------------- the URI, libpq */

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

static void decode_into(sb_t *b, const char *s, size_t n, int quote)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%' && i + 2 < n && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
            c = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
            i += 2;
        }
        if (quote && (c == '\'' || c == '\\'))
            sb_add(b, "\\");
        sb_add(b, "%c", c);
    }
}

/* The three spellings the driver takes (drivers/store-postgres/pg_conn.c,
 * outbox_pg_conninfo): a libpq URI, a key=value string after the scheme, or
 * URI parameters each becoming a keyword. */
static char *conninfo_of(const char *uri)
{
    const char *rest = strchr(uri, ':') + 1;
    sb_t b = {0};
    if (rest[0] == '/' && rest[1] == '/') {
        sb_add(&b, "postgresql:%s", rest);
    } else {
        const char *q = strchr(rest, '?');
        size_t body = q ? (size_t)(q - rest) : strlen(rest);
        decode_into(&b, rest, body, 0);
        for (const char *p = q ? q + 1 : NULL; p && *p;) {
            size_t seg = strcspn(p, "&");
            const char *eq = memchr(p, '=', seg);
            if (eq) {
                sb_add(&b, "%s", b.len ? " " : "");
                decode_into(&b, p, (size_t)(eq - p), 0);
                sb_add(&b, "='");
                decode_into(&b, eq + 1, seg - (size_t)(eq - p) - 1, 1);
                sb_add(&b, "'");
            }
            p += seg + (p[seg] == '&');
        }
        if (!b.p)
            sb_add(&b, "%s", "");
    }
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

static int pq_fail(PGconn *c, PGresult *r, const char *what, char *err, size_t errlen)
{
    const char *m = r ? PQresultErrorMessage(r) : c ? PQerrorMessage(c) : "out of memory";
    snprintf(err, errlen, "%s: %s", what, m && *m ? m : "failed");
    /* One line: libpq ends its messages with a newline. */
    for (char *p = err; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = *(p + 1) ? ' ' : '\0';
    PQclear(r);
    return BENCH_EXIT_FAIL;
}

/* Runs sql with up to two text parameters; *out gets the result when asked. */
static int exec(bpg_t *b, const char *sql, const char *p1, const char *p2, PGresult **out,
                const char *what, char *err, size_t errlen)
{
    const char *params[2] = {p1, p2};
    int n = p2 ? 2 : p1 ? 1 : 0;
    PGresult *r = n ? PQexecParams(b->conn, sql, n, NULL, params, NULL, NULL, 0)
                    : PQexec(b->conn, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        return pq_fail(b->conn, r, what, err, errlen);
    if (out)
        *out = r;
    else
        PQclear(r);
    return 0;
}

static void bpg_close(void *db)
{
    bpg_t *b = db;
    if (!b)
        return;
    PQfinish(b->conn);
    free(b->conninfo);
    free(b);
}

static int bpg_open(const char *uri, void **out, char *err, size_t errlen)
{
    *out = NULL;
    bpg_t *b = calloc(1, sizeof *b);
    if (!b || !(b->conninfo = conninfo_of(uri))) {
        free(b);
        snprintf(err, errlen, "out of memory");
        return BENCH_EXIT_FAIL;
    }
    char *perr = NULL;
    PQconninfoOption *opts = PQconninfoParse(b->conninfo, &perr);
    if (!opts) {
        snprintf(err, errlen, "invalid PostgreSQL connection string in %s: %s", uri,
                 perr ? perr : "out of memory");
        for (char *p = err; *p; p++)
            if (*p == '\n')
                *p = ' ';
        PQfreemem(perr);
        bpg_close(b);
        return BENCH_EXIT_USAGE;
    }
    PQconninfoFree(opts);
    b->conn = PQconnectdb(b->conninfo);
    int rc = 0;
    if (PQstatus(b->conn) != CONNECTION_OK)
        rc = pq_fail(b->conn, NULL, "cannot connect", err, errlen);
    if (rc == 0)
        rc = exec(b, "SET client_min_messages = warning", NULL, NULL, NULL, "session", err, errlen);
    if (rc == 0)
        rc = exec(b,
                  "CREATE TABLE IF NOT EXISTS outbox_bench_relations "
                  "(relation text NOT NULL PRIMARY KEY)",
                  NULL, NULL, NULL, "creating outbox_bench_relations", err, errlen);
    if (rc != 0) {
        bpg_close(b);
        return rc;
    }
    *out = b;
    return 0;
}

/* ------------------------------------------------------ the relations */

static int marked(bpg_t *b, const char *relation, int *is_marked, char *err, size_t errlen)
{
    PGresult *r = NULL;
    int rc = exec(b, "SELECT 1 FROM outbox_bench_relations WHERE relation = $1", relation, NULL,
                  &r, "reading outbox_bench_relations", err, errlen);
    if (rc == 0) {
        *is_marked = PQntuples(r) > 0;
        PQclear(r);
    }
    return rc;
}

static int bpg_claim_relation(void *db, const char *relation, char *err, size_t errlen)
{
    bpg_t *b = db;
    char rel[300];
    rel_sql(relation, rel, sizeof rel);
    PGresult *r = NULL;
    int rc = exec(b, "SELECT to_regclass($1) IS NOT NULL", rel, NULL, &r, "reading the catalog",
                  err, errlen);
    if (rc != 0)
        return rc;
    int exists = PQntuples(r) == 1 && PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    int ours = 0;
    rc = marked(b, relation, &ours, err, errlen);
    if (rc != 0)
        return rc;
    if (exists && !ours) {
        snprintf(err, errlen,
                 "table %s exists and was not created by outbox-bench; choose another --relation "
                 "or database",
                 relation);
        return BENCH_EXIT_USAGE;
    }
    char sql[400];
    if (exists) {
        snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS %s", rel);
        rc = exec(b, sql, NULL, NULL, NULL, "dropping an old bench table", err, errlen);
    }
    if (rc == 0)
        rc = exec(b,
                  "INSERT INTO outbox_bench_relations (relation) VALUES ($1) ON CONFLICT DO "
                  "NOTHING",
                  relation, NULL, NULL, "writing outbox_bench_relations", err, errlen);
    return rc;
}

static int bpg_drop_relation(void *db, const char *relation, char *err, size_t errlen)
{
    bpg_t *b = db;
    int ours = 0;
    int rc = marked(b, relation, &ours, err, errlen);
    if (rc == 0 && ours) {
        char rel[300], sql[400];
        rel_sql(relation, rel, sizeof rel);
        snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS %s", rel);
        rc = exec(b, sql, NULL, NULL, NULL, "dropping a bench table", err, errlen);
    }
    if (rc == 0)
        rc = exec(b, "DELETE FROM outbox_bench_relations WHERE relation = $1", relation, NULL,
                  NULL, "writing outbox_bench_relations", err, errlen);
    return rc;
}

static int bpg_copy(void *db, const char *from, const char *to, char *err, size_t errlen)
{
    char f[300], t[300], sql[700];
    rel_sql(from, f, sizeof f);
    rel_sql(to, t, sizeof t);
    snprintf(sql, sizeof sql, "INSERT INTO %s SELECT * FROM %s ORDER BY created_at, id", t, f);
    return exec(db, sql, NULL, NULL, NULL, "copying the backlog", err, errlen);
}

static int bpg_count(void *db, const char *relation, const char *status, long *count, char *err,
                     size_t errlen)
{
    char rel[300], sql[400];
    rel_sql(relation, rel, sizeof rel);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s WHERE status = $1", rel);
    PGresult *r = NULL;
    int rc = exec(db, sql, status, NULL, &r, "counting rows", err, errlen);
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
static int bpg_quiesce(void *db, const char *relation, char *err, size_t errlen)
{
    bpg_t *b = db;
    int rc = 0;
    if (relation) {
        char rel[300], sql[400];
        rel_sql(relation, rel, sizeof rel);
        snprintf(sql, sizeof sql, "VACUUM (ANALYZE) %s", rel);
        rc = exec(b, sql, NULL, NULL, NULL, "vacuuming", err, errlen);
    }
    if (rc == 0)
        PQclear(PQexec(b->conn, "CHECKPOINT"));
    return rc;
}

/* ---------------------------------------------- the pgbench script */

/* drivers/store-postgres/pg_rows.c, PG_ROW_COLUMNS. */
#define BPG_ROW_COLUMNS                                                                        \
    "o.id::uuid, o.outbox_route::text, o.event_id::uuid, o.event_type::text, "                \
    "o.tenant_id::uuid, o.execution_id::uuid, o.correlation_id::uuid, o.causation_id::uuid, " \
    "o.occurred_at::timestamptz, o.payload::text, o.created_at::timestamptz, "                \
    "o.attempts::int4, o.available_at::timestamptz, o.ordering_key::text, "                   \
    "o.last_error::text, o.processing_at::timestamptz"

/* pg_rows.c, key_rows(). */
static void key_rows(sb_t *b, const char *rel, const char *o)
{
    sb_add(b, "FROM %s AS e WHERE e.outbox_route = $1 AND e.ordering_key = %s.ordering_key "
              "AND e.status IN ('pending', 'processing') AND e.ordering_key IS NOT NULL AND ",
           rel, o);
}

/* pg_rows.c, earlier() without hlc. */
static void earlier(sb_t *b, const char *o)
{
    sb_add(b, "(e.created_at, e.id) < (%s.created_at, %s.id)", o, o);
}

/* pg_rows.c, build_held(). */
static void build_held(sb_t *b, const char *rel)
{
    sb_add(b, ", held AS MATERIALIZED (SELECT e.ordering_key FROM %s AS e WHERE "
              "e.outbox_route = $1 AND e.ordering_key IS NOT NULL AND e.status = "
              "'pending' AND e.available_at > (SELECT ts FROM clk) UNION SELECT "
              "e.ordering_key FROM %s AS e WHERE e.outbox_route = $1 AND e.ordering_key "
              "IS NOT NULL AND e.status = 'processing' AND (e.processing_at IS NULL OR "
              "e.processing_at > (SELECT cut FROM clk)))",
           rel, rel);
}

/* pg_rows.c, key_rule(). */
static void key_rule(sb_t *b)
{
    sb_add(b, " AND (o.ordering_key IS NULL OR o.ordering_key NOT IN (SELECT "
              "ordering_key FROM held))");
}

/* pg_rows.c, claim_arm() without hlc. */
static void claim_arm(sb_t *b, const char *rel, const char *name, const char *where, long limit)
{
    sb_add(b, ", %s AS (SELECT o.id, o.ordering_key, o.created_at%s FROM %s AS o "
              "WHERE o.outbox_route = $1 AND %s",
           name, "", rel, where);
    key_rule(b);
    sb_add(b, " ORDER BY %s LIMIT %ld FOR UPDATE OF o SKIP LOCKED)", "o.created_at, o.id", limit);
}

/* pg_rows.c, prev_of() without hlc. */
static void prev_of(sb_t *b, const char *rel)
{
    sb_add(b, "(SELECT e.id ");
    key_rows(b, rel, "f");
    earlier(b, "f");
    sb_add(b, " ORDER BY e.created_at DESC, e.id DESC LIMIT 1)");
}

/* pg_rows.c, build_claim(hlc = 0) on a table without hlc and traceparent,
 * with $1 route, $2 lease in microseconds and the batch limit written into
 * the text. The last clause differs as the file header says: "UPDATE ...
 * RETURNING cols" there is "claimed AS (UPDATE ... RETURNING cols) SELECT
 * ..." here. */
static void claim_sql(sb_t *b, const char *rel, long limit)
{
    const char *order = "created_at, id";
    sb_add(b, "WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS ts, "
              "clock_timestamp() - $2::int8 * interval '1 microsecond' AS cut, "
              "set_config('synchronous_commit', 'off', true) AS sc)");
    build_held(b, rel);
    claim_arm(b, rel, "ripe",
              "o.status = 'pending' AND (o.available_at IS NULL OR o.available_at <= (SELECT ts "
              "FROM clk))",
              limit);
    claim_arm(b, rel, "expired",
              "o.status = 'processing' AND o.processing_at <= (SELECT cut FROM clk)", limit);
    sb_add(b, ", firstn AS (SELECT * FROM (SELECT * FROM ripe UNION ALL SELECT * FROM "
              "expired) AS c ORDER BY %s LIMIT %ld)",
           order, limit);
    sb_add(b, ", chained AS (SELECT f.id, f.ordering_key, f.created_at%s, "
              "f.ordering_key IS NULL OR lag(f.id) OVER w IS NOT DISTINCT FROM ",
           "");
    prev_of(b, rel);
    sb_add(b, " AS linked FROM firstn AS f WINDOW w AS (PARTITION BY f.ordering_key "
              "ORDER BY f.%s, f.id))",
           "created_at");
    sb_add(b, ", keep AS (SELECT id FROM (SELECT id, bool_and(linked) OVER (PARTITION BY "
              "ordering_key ORDER BY %s ROWS UNBOUNDED PRECEDING) AS ok FROM chained) AS x "
              "WHERE ok)",
           order);
    sb_add(b, ", claimed AS (");
    sb_add(b, "UPDATE %s AS o SET status = 'processing', processing_at = (SELECT ts FROM "
              "clk), attempts = o.attempts + 1 WHERE o.id = ANY (ARRAY(SELECT id FROM "
              "keep)) RETURNING " BPG_ROW_COLUMNS,
           rel);
    sb_add(b, ") SELECT coalesce(array_agg(id), '{}')::text AS ids, count(*) AS n, "
              "coalesce(max(processing_at), 'epoch')::text AS fence FROM claimed");
}

/* pg_rows.c, build_settle(), with its bound arrays $1..$4 and fence $5
 * made from the claim's \gset variables. */
static void settle_sql(sb_t *b, const char *rel)
{
    sb_add(b,
           "WITH sc AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', "
           "true) AS v) "
           "UPDATE %s AS o SET "
           "status = CASE u.kind WHEN 1 THEN 'published' WHEN 3 THEN 'dead' ELSE "
           "'pending' END, "
           "published_at = CASE WHEN u.kind = 1 THEN statement_timestamp() ELSE "
           "o.published_at END, "
           "available_at = CASE WHEN u.kind = 2 THEN u.available_at ELSE o.available_at END, "
           "last_error = CASE WHEN u.kind IN (2, 3) THEN u.error ELSE o.last_error END, "
           "attempts = CASE WHEN u.kind = 4 THEN greatest(o.attempts - 1, 0) ELSE "
           "o.attempts END, "
           "processing_at = CASE WHEN u.kind IN (2, 4) THEN NULL ELSE o.processing_at END "
           "FROM unnest(%s, %s, %s, %s) WITH "
           "ORDINALITY AS u(id, kind, available_at, error, ord) "
           "WHERE o.id = u.id AND o.status = 'processing' AND o.processing_at = "
           "%s AND (SELECT v FROM sc) IS NOT NULL RETURNING u.ord",
           rel, ":ids::uuid[]", "array_fill(1, ARRAY[:n::int4])::int4[]",
           "array_fill(NULL::timestamptz, ARRAY[:n::int4])::timestamptz[]",
           "array_fill(NULL::text, ARRAY[:n::int4])::text[]", ":fence::timestamptz");
}

/* pgbench -M prepared turns each :name into a bound parameter; the claim's
 * $1 and $2 are spelled as pgbench variables, set with -D. */
static void replace_params(sb_t *out, const char *sql)
{
    static const char *const names[] = {":route", ":lease"};
    for (const char *p = sql; *p; p++) {
        if (p[0] == '$' && p[1] >= '1' && p[1] <= '2' && !(p[2] >= '0' && p[2] <= '9')) {
            sb_add(out, "%s", names[p[1] - '1']);
            p++;
        } else {
            sb_add(out, "%c", *p);
        }
    }
}

char *bench_pg_script(const char *relation, long batch)
{
    char rel[300];
    rel_sql(relation, rel, sizeof rel);
    sb_t claim = {0}, out = {0};
    claim_sql(&claim, rel, batch);
    sb_add(&out,
           "-- The PostgreSQL ceiling of outbox-bench for relation %s at batch %ld: the\n"
           "-- claim and settle(published) statements of drivers/store-postgres/pg_rows.c,\n"
           "-- as pgbench runs them (see tools/bench/ceiling_postgres.c). Generated by\n"
           "--   outbox-bench --pgbench-script --relation %s --batch %ld\n"
           "-- Run against a table holding a backlog on route 'bench', e.g.:\n"
           "--   pgbench -n -M prepared -c 1 -j 1 -t 1000 -D route=bench \\\n"
           "--           -D lease=%lld -f postgres_ceiling.sql postgresql://...\n",
           relation, batch, relation, batch, BPG_LEASE_US);
    if (!claim.failed)
        replace_params(&out, claim.p);
    sb_add(&out, "\n\\gset\n");
    settle_sql(&out, rel);
    sb_add(&out, ";\n");
    free(claim.p);
    if (claim.failed || out.failed) {
        free(out.p);
        return NULL;
    }
    return out.p;
}

/* The reference: issue 5's "bare claim+mark SQL on the canonical table",
 * the plainest claim there is (the first batch of pending rows in claim
 * order, locked with SKIP LOCKED, marked processing) and a mark that sets
 * the claimed ids published. It has none of the driver's per-key rule,
 * expired-lease arm, fence or outcome kinds, so it bounds what any claim
 * on this table can cost; the absolute targets were measured with
 * SQL of this kind, and running it here translates them to this machine. */
char *bench_pg_reference_script(const char *relation, long batch)
{
    char rel[300];
    rel_sql(relation, rel, sizeof rel);
    sb_t out = {0};
    sb_add(&out,
           "-- The reference claim+mark of outbox-bench for relation %s at batch %ld\n"
           "-- (see bench_pg_reference_script in tools/bench/ceiling_postgres.c).\n"
           "WITH claimed AS (UPDATE %s AS o SET status = 'processing', processing_at = now(), "
           "attempts = o.attempts + 1 WHERE o.id IN (SELECT id FROM %s WHERE outbox_route = "
           ":route AND status = 'pending' ORDER BY created_at, id LIMIT %ld FOR UPDATE SKIP "
           "LOCKED) RETURNING o.*) SELECT coalesce(array_agg(id), '{}')::text AS ids FROM "
           "claimed\n\\gset\n"
           "UPDATE %s SET status = 'published', published_at = now() WHERE id = "
           "ANY (:ids::uuid[]);\n",
           relation, batch, rel, rel, batch, rel);
    if (out.failed) {
        free(out.p);
        return NULL;
    }
    return out.p;
}

/* ---------------------------------------------------------- pgbench */

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

/* Runs pgbench with -t txns per client; *seconds is the time pgbench
 * measured without connection set-up. */
static int run_pgbench(const char *exe, const char *script, const bpg_t *b, const bench_opts_t *o,
                       long txns, double *seconds, char *err, size_t errlen)
{
    char clients[24], tx[24], route[64], lease[48];
    snprintf(clients, sizeof clients, "%ld", o->workers);
    snprintf(tx, sizeof tx, "%ld", txns);
    snprintf(route, sizeof route, "route=%s", BENCH_ROUTE);
    snprintf(lease, sizeof lease, "lease=%lld", BPG_LEASE_US);
    char *const argv[] = {(char *)exe, "-n", "-M", "prepared", "-c", clients, "-j", clients, "-t",
                          tx, "-D", route, "-D", lease, "-f", (char *)script, b->conninfo, NULL};
    int pipefd[2];
    if (pipe(pipefd) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return BENCH_EXIT_FAIL;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        close(pipefd[0]);
        close(pipefd[1]);
        snprintf(err, errlen, "fork: %s", strerror(errno));
        return BENCH_EXIT_FAIL;
    }
    if (pid == 0) {
        dup2(pipefd[1], STDOUT_FILENO);
        dup2(pipefd[1], STDERR_FILENO);
        close(pipefd[0]);
        close(pipefd[1]);
        execv(exe, argv);
        _exit(127);
    }
    close(pipefd[1]);
    sb_t out = {0};
    char buf[4096];
    ssize_t n;
    while ((n = read(pipefd[0], buf, sizeof buf - 1)) > 0 || (n < 0 && errno == EINTR)) {
        if (n > 0) {
            buf[n] = '\0';
            sb_add(&out, "%s", buf);
        }
    }
    close(pipefd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    int rc = 0;
    const char *tps = out.p ? strstr(out.p, "tps = ") : NULL;
    const char *done = out.p ? strstr(out.p, "number of transactions actually processed: ") : NULL;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !tps || !done) {
        /* pgbench's last words say why. */
        const char *last = out.p ? out.p : "no output";
        size_t len = out.p ? strlen(out.p) : strlen(last);
        while (len > 0 && (last[len - 1] == '\n' || last[len - 1] == ' '))
            len--;
        size_t start = len;
        while (start > 0 && last[start - 1] != '\n')
            start--;
        snprintf(err, errlen, "pgbench failed (status %d): %.*s", WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                 (int)(len - start), last + start);
        rc = BENCH_EXIT_FAIL;
    } else {
        double t = strtod(tps + strlen("tps = "), NULL);
        long processed = strtol(done + strlen("number of transactions actually processed: "),
                                NULL, 10);
        *seconds = t > 0 ? (double)processed / t : 0;
    }
    free(out.p);
    return rc;
}

/* Drains relation with a pgbench script (the ceiling's or the reference's). */
static int drain_pgbench(bpg_t *b, const bench_opts_t *o, const char *relation, char *script,
                         bench_drain_t *out, char *err, size_t errlen)
{
    char exe[512];
    if (!find_pgbench(exe, sizeof exe)) {
        free(script);
        snprintf(err, errlen, "pgbench not found (install postgresql-client); it runs the ceiling");
        return BENCH_EXIT_FAIL;
    }
    char path[] = "/tmp/outbox-bench-XXXXXX.sql";
    int fd = script ? mkstemps(path, 4) : -1;
    if (fd < 0) {
        free(script);
        snprintf(err, errlen, "cannot write the pgbench script: %s", strerror(errno));
        return BENCH_EXIT_FAIL;
    }
    size_t len = strlen(script);
    int rc = write(fd, script, len) == (ssize_t)len ? 0 : BENCH_EXIT_FAIL;
    close(fd);
    free(script);
    if (rc != 0)
        snprintf(err, errlen, "cannot write the pgbench script %s", path);
    out->seconds = 0;
    double cpu0 = children_cpu_s();
    long published = 0;
    /* Each client claims up to a batch per transaction; the last rounds of
     * a run may find less, so run again on what is left. */
    for (int round = 0; rc == 0 && published < o->events && round < 20; round++) {
        long left = o->events - published;
        long per_client = (left + o->batch * o->workers - 1) / (o->batch * o->workers);
        double s = 0;
        rc = run_pgbench(exe, path, b, o, per_client, &s, err, errlen);
        out->seconds += s;
        if (rc == 0)
            rc = bpg_count(b, relation, "published", &published, err, errlen);
    }
    out->cpu_s = children_cpu_s() - cpu0;
    unlink(path);
    return rc;
}

static int bpg_drain(void *db, const outbox_ceiling_job_t *job, long workers, long events,
                     double *seconds, double *cpu_s, char *err, size_t errlen)
{
    const bench_opts_t o = {.workers = workers, .batch = job->batch, .events = events};
    char *script = job->reference ? bench_pg_reference_script(job->relation, job->batch)
                                  : bench_pg_script(job->relation, job->batch);
    bench_drain_t out = {0};
    int rc = drain_pgbench(db, &o, job->relation, script, &out, err, errlen);
    *seconds = out.seconds;
    *cpu_s = out.cpu_s;
    return rc;
}

/* Sustained mode: the pending backlog, and dead/live tuples and autovacuum
 * runs from pg_stat_user_tables (the statistics lag by up to a second). */
static int bpg_stats(void *db, const char *relation, long *pending, long *dead, long *live,
                     long *autovacuums, char *err, size_t errlen)
{
    int rc = bpg_count(db, relation, "pending", pending, err, errlen);
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
    *dead = *live = *autovacuums = -1;
    if (PQntuples(r) == 1) {
        *dead = strtol(PQgetvalue(r, 0, 0), NULL, 10);
        *live = strtol(PQgetvalue(r, 0, 1), NULL, 10);
        *autovacuums = strtol(PQgetvalue(r, 0, 2), NULL, 10);
    }
    PQclear(r);
    return 0;
}

/* The per-table autovacuum settings of sql/postgres/autovacuum.sql (keep
 * the two in step), which docs/performance.md measures, for an outbox table: vacuum after a fixed number of dead rows (not a fraction of
 * a table that only grows), without cost-based throttling, and analyze and
 * vacuum the insert-only growth often enough to keep plans and the
 * visibility map current. */
#define BPG_AUTOVACUUM                                                                         \
    "autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000, "               \
    "autovacuum_vacuum_cost_delay = 0, autovacuum_vacuum_insert_scale_factor = 0, "           \
    "autovacuum_vacuum_insert_threshold = 100000, autovacuum_analyze_scale_factor = 0, "      \
    "autovacuum_analyze_threshold = 100000"

static int bpg_autovacuum(void *db, const char *relation, char *err, size_t errlen)
{
    char rel[300], sql[1024];
    rel_sql(relation, rel, sizeof rel);
    snprintf(sql, sizeof sql, "ALTER TABLE %s SET (" BPG_AUTOVACUUM ")", rel);
    return exec(db, sql, NULL, NULL, NULL, "setting autovacuum", err, errlen);
}

/* The shipped schema's additions to the canonical table are exactly its
 * partial indexes (pending, key, processing and their hlc twins); the
 * canonical table has none, so dropping every partial index leaves it. */
static int bpg_canonical_only(void *db, const char *relation, char *err, size_t errlen)
{
    char rel[300];
    rel_sql(relation, rel, sizeof rel);
    PGresult *r = NULL;
    int rc = exec(db, "SELECT coalesce(string_agg(format('%I.%I', n.nspname, c.relname), ', '), '') "
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
        return BENCH_EXIT_FAIL;
    }
    return exec(db, sql, NULL, NULL, NULL, "dropping the partial indexes", err, errlen);
}

const outbox_store_ceiling_t outbox_ceiling_postgres = {
    .struct_size = sizeof(outbox_store_ceiling_t),
    .name = "postgres",
    .in_process = 0,
    .has_reference = 1,
    .open = bpg_open,
    .close = bpg_close,
    .claim_relation = bpg_claim_relation,
    .drop_relation = bpg_drop_relation,
    .copy = bpg_copy,
    .count = bpg_count,
    .quiesce = bpg_quiesce,
    .drain = bpg_drain,
    .trace_start = NULL,
    .trace_check = NULL,
    .stats = bpg_stats,
    .autovacuum = bpg_autovacuum,
    .canonical_only = bpg_canonical_only,
};
