/* PostgreSQL store driver, third floor: staging, claiming, settling, the clock
 * checkpoint and the LISTEN/NOTIFY wake-up.
 *
 * Each of stage, claim and settle is ONE statement and so one round trip:
 * batches travel as binary arrays that the statement unnests.
 *
 * The fence of a claim is the processing_at it writes, a server clock
 * reading taken once per claim: settle touches a row only while it is still
 * processing with that exact stamp, so a relay whose lease expired and whose
 * rows were claimed again changes nothing. A row is only reclaimable when
 * its old stamp is at least a lease older than the reading, so a new fence
 * never equals the one it replaces.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_ops.h"

/* Columns read back by claim, in this order, each cast to the type the
 * binary decoding below expects (a json payload or varchar key then work
 * as well); hlc and traceparent follow when the table has them. */
#define PG_ROW_COLUMNS                                                                         \
    "o.id::uuid, o.outbox_route::text, o.event_id::uuid, o.event_type::text, "                \
    "o.tenant_id::uuid, o.execution_id::uuid, o.correlation_id::uuid, o.causation_id::uuid, " \
    "o.occurred_at::timestamptz, o.payload::text, o.created_at::timestamptz, "                \
    "o.attempts::int4, o.available_at::timestamptz, o.ordering_key::text, "                   \
    "o.last_error::text, o.processing_at::timestamptz"

enum {
    C_ID,
    C_ROUTE,
    C_EVENT_ID,
    C_EVENT_TYPE,
    C_TENANT,
    C_EXECUTION,
    C_CORRELATION,
    C_CAUSATION,
    C_OCCURRED,
    C_PAYLOAD,
    C_CREATED,
    C_ATTEMPTS,
    C_AVAILABLE,
    C_KEY,
    C_LAST_ERROR,
    C_PROCESSING,
    C_FIXED_COUNT
};

/* Longest last_error kept; sink messages are short, a runaway one is cut. */
#define PG_ERROR_MAX 8192

static int checkpoint_missing(const pg_handle_t *h, outbox_diag_t *d)
{
    return outbox_pg_fail(d, OUTBOX_ENOTSUP,
                          "checkpoint table \"%s\" not found (create it with schema apply)",
                          h->ckpt.table);
}

/* ------------------------------------------------------------- SQL texts */

/* Parameters: $1..$13 arrays of the fixed columns, $14 the NOTIFY channel,
 * then hlc[] and traceparent[] when those columns exist, then the
 * checkpoint node key and mark for the _CKPT variant. */
static void build_stage(const pg_handle_t *h, outbox_kit_buf_t *b, int ckpt)
{
    int next = 15;
    int p_hlc = h->has_hlc ? next++ : 0;
    int p_tp = h->has_traceparent ? next++ : 0;
    outbox_kit_buf_printf(b, "WITH ins AS (INSERT INTO %s AS o (id, outbox_route, event_id, "
                         "event_type, tenant_id, execution_id, correlation_id, causation_id, "
                         "occurred_at, payload, status, created_at, attempts, available_at, "
                         "ordering_key%s%s) SELECT u.id, u.route, u.event_id, u.event_type, "
                         "u.tenant_id, u.execution_id, u.correlation_id, u.causation_id, "
                         "u.occurred_at, u.payload, 'pending', u.created_at, 0, u.available_at, "
                         "u.ordering_key%s%s FROM unnest($1::uuid[], $2::text[], $3::uuid[], "
                         "$4::text[], $5::uuid[], $6::uuid[], $7::uuid[], $8::uuid[], "
                         "$9::timestamptz[], $10::jsonb[], $11::timestamptz[], $12::timestamptz[], "
                         "$13::text[]",
                      h->rel_sql, h->has_hlc ? ", hlc" : "", h->has_traceparent ? ", traceparent" : "",
                      h->has_hlc ? ", u.hlc" : "", h->has_traceparent ? ", u.traceparent" : "");
    if (p_hlc)
        outbox_kit_buf_printf(b, ", $%d::int8[]", p_hlc);
    if (p_tp)
        outbox_kit_buf_printf(b, ", $%d::text[]", p_tp);
    outbox_kit_buf_printf(b, ") AS u(id, route, event_id, event_type, tenant_id, execution_id, "
                         "correlation_id, causation_id, occurred_at, payload, created_at, "
                         "available_at, ordering_key%s%s) ON CONFLICT (outbox_route, event_id) DO "
                         "NOTHING RETURNING o.outbox_route)",
                      p_hlc ? ", hlc" : "", p_tp ? ", traceparent" : "");
    if (ckpt) {
        /* One statement with the insert: the mark moves in the same
         * transaction, and as a server-side max it can never go back. */
        outbox_kit_buf_printf(b, ", ck AS (INSERT INTO %s AS c (node_key, hlc) VALUES ($%d::text, "
                             "$%d::int8) ON CONFLICT (node_key) DO UPDATE SET hlc = "
                             "GREATEST(c.hlc, EXCLUDED.hlc))",
                          h->ckpt_sql, next, next + 1);
    }
    /* NOTIFY is delivered at commit, so a relay never wakes before it can
     * see the rows; one per route, and only when something was inserted. */
    outbox_kit_buf_puts(b, " SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM (SELECT "
                       "pg_notify($14::text, r) FROM (SELECT DISTINCT outbox_route AS r FROM "
                       "ins) AS dr) AS n)");
}

/* "e comes before o" in claim order, written so that an index on
 * (route, key, [hlc,] created_at, id) bounds the scan. For hlc order this
 * is the case of a stamped o; NULL sorts last, so a NULL e is never earlier. */
static void earlier(outbox_kit_buf_t *b, int hlc, const char *o)
{
    if (hlc)
        outbox_kit_buf_printf(b, "(e.hlc, e.created_at, e.id) < (%s.hlc, %s.created_at, %s.id)", o, o, o);
    else
        outbox_kit_buf_printf(b, "(e.created_at, e.id) < (%s.created_at, %s.id)", o, o);
}

/* The unfinished rows of o's key: what the key index covers. */
static void key_rows(const pg_handle_t *h, outbox_kit_buf_t *b, const char *o)
{
    outbox_kit_buf_printf(b, "FROM %s AS e WHERE e.outbox_route = $1 AND e.ordering_key = %s.ordering_key "
                         "AND e.status IN ('pending', 'processing') AND e.ordering_key IS NOT NULL AND ",
                      h->rel_sql, o);
}

/* The keys held back right now: those with an unfinished row that is not
 * claimable (in flight under a live lease, or waiting for a retry). Such
 * rows are few (the rows in flight plus those awaiting a retry) and each
 * arm is one index range; the claim then tests candidates against this set
 * with a hashed lookup, so a backlog whose keys are all held costs one scan
 * per claim rather than one key-index probe per row. */
static void build_held(const pg_handle_t *h, outbox_kit_buf_t *b)
{
    outbox_kit_buf_printf(b, ", held AS MATERIALIZED (SELECT e.ordering_key FROM %s AS e WHERE "
                         "e.outbox_route = $1 AND e.ordering_key IS NOT NULL AND e.status = "
                         "'pending' AND e.available_at > (SELECT ts FROM clk) UNION SELECT "
                         "e.ordering_key FROM %s AS e WHERE e.outbox_route = $1 AND e.ordering_key "
                         "IS NOT NULL AND e.status = 'processing' AND (e.processing_at IS NULL OR "
                         "e.processing_at > (SELECT cut FROM clk)))",
                      h->rel_sql, h->rel_sql);
}

/* The snapshot's per-key rule (SPEC 5), a little stricter: a keyed
 * candidate's key must not be held back at all. Ahead of the candidate,
 * that is the rule itself (an earlier claimable row is no obstacle: claim
 * order puts it in the same arm first). Behind it, a held row can only be
 * there when the candidate was replayed from dead after it; the replayed
 * row then waits until that later row is done, instead of going out first. */
static void key_rule(outbox_kit_buf_t *b)
{
    outbox_kit_buf_puts(b, " AND (o.ordering_key IS NULL OR o.ordering_key NOT IN (SELECT "
                       "ordering_key FROM held))");
}

/* The row just before f among its key's unfinished rows, in claim order, as
 * the snapshot has it: one backward step on the key index. */
static void prev_of(const pg_handle_t *h, outbox_kit_buf_t *b, int hlc)
{
    if (!hlc) {
        outbox_kit_buf_puts(b, "(SELECT e.id ");
        key_rows(h, b, "f");
        earlier(b, 0, "f");
        outbox_kit_buf_puts(b, " ORDER BY e.created_at DESC, e.id DESC LIMIT 1)");
        return;
    }
    outbox_kit_buf_puts(b, "CASE WHEN f.hlc IS NULL THEN coalesce((SELECT e.id ");
    key_rows(h, b, "f");
    outbox_kit_buf_puts(b, "e.hlc IS NULL AND (e.created_at, e.id) < (f.created_at, f.id) ORDER BY "
                       "e.created_at DESC, e.id DESC LIMIT 1), (SELECT e.id ");
    key_rows(h, b, "f");
    outbox_kit_buf_puts(b, "e.hlc IS NOT NULL ORDER BY e.hlc DESC, e.created_at DESC, e.id DESC "
                       "LIMIT 1)) ELSE (SELECT e.id ");
    key_rows(h, b, "f");
    earlier(b, 1, "f");
    outbox_kit_buf_puts(b, " ORDER BY e.hlc DESC, e.created_at DESC, e.id DESC LIMIT 1) END");
}

/* One arm: the first $2 rows of one kind that this claim can lock, in claim
 * order; SKIP LOCKED passes over rows another claim holds right now. lead
 * goes in front of the claim order in ORDER BY ("" or a column that is
 * constant over the arm's rows, so that an index led by it gives the order). */
static void claim_arm(const pg_handle_t *h, outbox_kit_buf_t *b, const char *name, int hlc,
                      const char *where, const char *lead, long limit)
{
    outbox_kit_buf_printf(b, ", %s AS (SELECT o.id, o.ordering_key, o.created_at%s FROM %s AS o "
                         "WHERE o.outbox_route = $1 AND %s",
                      name, hlc ? ", o.hlc" : "", h->rel_sql, where);
    key_rule(b);
    outbox_kit_buf_printf(b, " ORDER BY %s%s LIMIT %ld FOR UPDATE OF o SKIP LOCKED)", lead,
                      hlc ? "o.hlc, o.created_at, o.id" : "o.created_at, o.id", limit);
}

/* The clock reading, the held keys and the arm of expired leases: the same
 * in both shapes of the claim. One clock reading for ripeness, lease expiry
 * and the fence; the commit setting rides on it because clk is always
 * evaluated. */
static void claim_head(const pg_handle_t *h, outbox_kit_buf_t *b)
{
    outbox_kit_buf_puts(b, "WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS ts, "
                       "clock_timestamp() - $2::int8 * interval '1 microsecond' AS cut, "
                       "set_config('synchronous_commit', 'off', true) AS sc)");
    build_held(h, b);
}

static void expired_arm(const pg_handle_t *h, outbox_kit_buf_t *b, int hlc, long limit)
{
    claim_arm(h, b, "expired", hlc,
              "o.status = 'processing' AND o.processing_at <= (SELECT cut FROM clk)", "", limit);
}

/* From the chain check's verdicts (chained.linked) to the rows to claim:
 * a keyed row is kept while every row of its key before it in the batch
 * is linked too. */
static void claim_tail(outbox_kit_buf_t *b, const char *order)
{
    outbox_kit_buf_printf(b, ", keep AS (SELECT id FROM (SELECT id, bool_and(linked) OVER (PARTITION BY "
                         "ordering_key ORDER BY %s ROWS UNBOUNDED PRECEDING) AS ok FROM chained) AS x "
                         "WHERE ok)",
                      order);
}

/* The claim itself, after the last CTE: the kept rows, marked. */
static void claim_update(const pg_handle_t *h, outbox_kit_buf_t *b)
{
    outbox_kit_buf_printf(b, " UPDATE %s AS o SET status = 'processing', processing_at = (SELECT ts FROM "
                         "clk), attempts = o.attempts + 1 WHERE o.id = ANY (ARRAY(SELECT id FROM "
                         "keep)) RETURNING " PG_ROW_COLUMNS "%s%s",
                      h->rel_sql, h->has_hlc ? ", o.hlc::int8" : "",
                      h->has_traceparent ? ", o.traceparent::text" : "");
}

/* $1 route, $2 lease in microseconds; the batch limit is written into the
 * text. With LIMIT $n the planner cannot cost a generic plan (it guesses a
 * tenth of the table), so PostgreSQL kept planning this statement afresh on
 * every execution, about 1 ms per claim; with a literal it settles on the
 * cached plan after five runs. outbox_pg_claim rebuilds the text when a
 * claim asks for another limit.
 *
 * The claim commits with synchronous_commit off, for this transaction only
 * (set_config(..., true) in clk): a claim lost in a server crash leaves its
 * rows pending or leased, so they are delivered again, never lost, and the
 * relay does not wait for a WAL flush before it can publish. Staging keeps
 * the session's setting.
 *
 * Why this is safe with any number of concurrent claimers, each in READ
 * COMMITTED with its own snapshot:
 *
 * 1. The arms pick candidates under the snapshot (ripe pending rows and
 *    expired leases whose key is not held back) and lock them with
 *    FOR UPDATE SKIP LOCKED. Locking re-reads the newest version of each
 *    row and re-checks the arm's condition on it, so a row that another
 *    claim took and committed since our snapshot is dropped, and a row that
 *    another claim holds uncommitted is skipped.
 * 2. The snapshot can still be stale about the rows AHEAD of a candidate:
 *    it may show a key's head as pending while another claim holds it. So
 *    a keyed row survives only when the rows ahead of it in its key, as the
 *    snapshot lists them, are exactly the rows this claim locked ahead of
 *    it: each locked row's predecessor in the batch must be its predecessor
 *    among the key's unfinished rows (prev_of), all the way to the head.
 *    A row whose predecessor was skipped or dropped in step 1 breaks that
 *    chain, and it and every later row of its key are left alone.
 *
 * Together: a claim takes a key's rows only as a run that starts at the
 * key's first unfinished row, every row of which it has locked and seen
 * claimable in its newest version. Two claims cannot both lock that head,
 * and after one commits the head is processing, which blocks the key for
 * every later snapshot (step 1) and fails the re-check for older ones. So
 * no relay ever holds a later row of a key while an earlier one is in
 * flight or waiting for its retry, yet one claim moves a hot key's head
 * together with the rows behind it. */
static void build_claim_shipped(const pg_handle_t *h, outbox_kit_buf_t *b, int hlc, long limit)
{
    const char *order = hlc ? "hlc, created_at, id" : "created_at, id";
    claim_head(h, b);
    claim_arm(h, b, "ripe", hlc,
              "o.status = 'pending' AND (o.available_at IS NULL OR o.available_at <= (SELECT ts "
              "FROM clk))",
              "", limit);
    expired_arm(h, b, hlc, limit);
    outbox_kit_buf_printf(b, ", firstn AS (SELECT * FROM (SELECT * FROM ripe UNION ALL SELECT * FROM "
                         "expired) AS c ORDER BY %s LIMIT %ld)",
                      order, limit);
    outbox_kit_buf_printf(b, ", chained AS (SELECT f.id, f.ordering_key, f.created_at%s, "
                         "f.ordering_key IS NULL OR lag(f.id) OVER w IS NOT DISTINCT FROM ",
                      hlc ? ", f.hlc" : "");
    prev_of(h, b, hlc);
    outbox_kit_buf_printf(b, " AS linked FROM firstn AS f WINDOW w AS (PARTITION BY f.ordering_key "
                         "ORDER BY f.%s, f.id))",
                      hlc ? "hlc, f.created_at" : "created_at");
    claim_tail(b, order);
}

/* "e is not after l" in claim order, l being the batch's last row. In hlc
 * order NULL sorts last: every stamped row is before an unstamped l, and
 * no unstamped row is before a stamped one. */
static void not_after(outbox_kit_buf_t *b, int hlc)
{
    if (hlc)
        outbox_kit_buf_puts(b, "CASE WHEN l.hlc IS NULL THEN e.hlc IS NOT NULL OR (e.created_at, e.id) "
                           "<= (l.created_at, l.id) ELSE (e.hlc, e.created_at, e.id) <= (l.hlc, "
                           "l.created_at, l.id) END");
    else
        outbox_kit_buf_puts(b, "(e.created_at, e.id) <= (l.created_at, l.id)");
}

/* One part of ahead (below): the unfinished rows of the batch's keys in one
 * range of outbox_claim_idx, up to the batch's last row. */
static void ahead_part(const pg_handle_t *h, outbox_kit_buf_t *b, int hlc, int first, const char *range)
{
    outbox_kit_buf_printf(b, "%sSELECT e.id, e.ordering_key, e.created_at%s FROM tail AS l, %s AS e "
                         "WHERE e.outbox_route = $1 AND %s AND e.ordering_key IN (SELECT "
                         "ordering_key FROM firstn) AND ",
                      first ? "" : " UNION ALL ", hlc ? ", e.hlc" : "", h->rel_sql, range);
    not_after(b, hlc);
}

/* The claim for a table with only the canonical indexes: the primary key,
 * UNIQUE (outbox_route, event_id) and outbox_claim_idx (outbox_route,
 * status, available_at, created_at), or outbox_claim_hlc_idx (...,
 * available_at, hlc, created_at, id) for hlc order. It keeps every step of
 * the shipped claim above and its argument for concurrent claimers; only
 * the way each step reaches the rows differs, so that every read is a
 * range of that index whose length does not grow with the backlog:
 *
 * - Ripe pending rows are two arms. Those with available_at NULL (nearly
 *   all) are one range of the index, (route, 'pending', NULL), in
 *   created_at order, as btree sorts NULLs last: ORDER BY available_at
 *   first tells the planner so (it does not treat IS NULL as a constant),
 *   and an incremental sort puts each created_at group (one staging call)
 *   in id order. The scan stops once it has the batch, so a claim reads the
 *   batch, the rows it passes over, and the rest of the last staging call
 *   it entered. Due retries (available_at <= now) are the range before
 *   them, few, and sorted whole.
 * - Expired leases and the held keys read the range (route, 'processing'):
 *   the rows in flight, which are few.
 * - The chain check needs, for each keyed row of the batch, the row right
 *   before it among its key's unfinished rows. Without an index on the key
 *   that is not one probe; but every such row is before the batch's last
 *   keyed row in claim order, and the rows of the pending range before
 *   that point are the ones the ripe arm has just passed over: the batch
 *   itself and the rows skipped as locked or held back. So ahead reads them
 *   once (from the start of the range up to that row's created_at, the row
 *   comparison on (created_at, id) doing the rest), together with the
 *   two short ranges (pending with an available_at, and processing), keeps
 *   the rows of the batch's keys, and lag() over each key gives every
 *   row's predecessor at once. Like prev_of, it reads the statement's
 *   snapshot, in which every row of the batch was unfinished; a batch row
 *   it does not find is treated as unlinked, never as a key's head. */
static void build_claim_canonical(const pg_handle_t *h, outbox_kit_buf_t *b, int hlc, long limit)
{
    const char *order = hlc ? "hlc, created_at, id" : "created_at, id";
    claim_head(h, b);
    claim_arm(h, b, "ripe", hlc, "o.status = 'pending' AND o.available_at IS NULL",
              "o.available_at, ", limit);
    claim_arm(h, b, "due", hlc,
              "o.status = 'pending' AND o.available_at <= (SELECT ts FROM clk)", "", limit);
    expired_arm(h, b, hlc, limit);
    outbox_kit_buf_printf(b, ", firstn AS MATERIALIZED (SELECT * FROM (SELECT * FROM ripe UNION ALL "
                         "SELECT * FROM due UNION ALL SELECT * FROM expired) AS c ORDER BY %s "
                         "LIMIT %ld)",
                      order, limit);
    /* The batch's last keyed row: no predecessor is after it, and a batch
     * without keys reads nothing more. DESC puts NULL first, the reverse
     * of the claim order's NULLS LAST. */
    outbox_kit_buf_printf(b, ", tail AS MATERIALIZED (SELECT created_at, id%s FROM firstn WHERE "
                         "ordering_key IS NOT NULL ORDER BY %screated_at DESC, id DESC LIMIT 1)",
                      hlc ? ", hlc" : "", hlc ? "hlc DESC, " : "");
    outbox_kit_buf_puts(b, ", ahead AS (");
    /* The bounds are uncorrelated subqueries, computed once before the
     * scan, so that the planner makes them index conditions whatever it
     * thinks of joining tail: taken as a join filter instead, the hlc
     * bound let it read every stamped pending row. */
    if (hlc) {
        ahead_part(h, b, 1, 1,
                   "e.status = 'pending' AND e.available_at IS NULL AND e.hlc <= (SELECT "
                   "coalesce(hlc, 9223372036854775807) FROM tail)");
        ahead_part(h, b, 1, 0,
                   "e.status = 'pending' AND e.available_at IS NULL AND e.hlc IS NULL AND "
                   "l.hlc IS NULL AND e.created_at <= (SELECT created_at FROM tail)");
    } else {
        ahead_part(h, b, 0, 1,
                   "e.status = 'pending' AND e.available_at IS NULL AND e.created_at <= (SELECT "
                   "created_at FROM tail)");
    }
    ahead_part(h, b, hlc, 0, "e.status = 'pending' AND e.available_at IS NOT NULL");
    ahead_part(h, b, hlc, 0, "e.status = 'processing'");
    outbox_kit_buf_printf(b, "), prevs AS (SELECT a.id, lag(a.id) OVER (PARTITION BY a.ordering_key "
                         "ORDER BY %s) AS prev FROM ahead AS a)",
                      hlc ? "a.hlc, a.created_at, a.id" : "a.created_at, a.id");
    outbox_kit_buf_printf(b, ", chained AS (SELECT f.id, f.ordering_key, f.created_at%s, "
                         "f.ordering_key IS NULL OR (p.id IS NOT NULL AND lag(f.id) OVER w IS NOT "
                         "DISTINCT FROM p.prev) AS linked FROM firstn AS f LEFT JOIN prevs AS p ON "
                         "p.id = f.id WINDOW w AS (PARTITION BY f.ordering_key ORDER BY f.%s, f.id))",
                      hlc ? ", f.hlc" : "", hlc ? "hlc, f.created_at" : "created_at");
    claim_tail(b, order);
}

/* The shipped shape when the table has the indexes it reads (the pending
 * and key indexes of this order), else the canonical one. A handle keeps
 * the shape it chose at open (or at its last schema apply): both are
 * correct on any table, only their speed depends on the indexes. */
void outbox_pg_build_claim(const pg_handle_t *h, outbox_kit_buf_t *b, int hlc, long limit,
                           size_t *final_at)
{
    unsigned need = hlc ? PG_IDX_PENDING_HLC | PG_IDX_KEY_HLC : PG_IDX_PENDING | PG_IDX_KEY;
    if ((h->claim_idx & need) == need)
        build_claim_shipped(h, b, hlc, limit);
    else
        build_claim_canonical(h, b, hlc, limit);
    if (final_at)
        *final_at = b->len;
    claim_update(h, b);
}

/* $1 ids, $2 kinds, $3 available_at, $4 errors (arrays, one element per
 * item), $5 the fence. RETURNING says which items still held the fence.
 * Like the claim it commits without waiting for the WAL flush: a settle lost
 * in a server crash leaves its rows processing until their lease ends, and
 * they are delivered again. The setting is a one-time filter, evaluated
 * before the first row is touched. */
void outbox_pg_build_settle(const pg_handle_t *h, outbox_kit_buf_t *b)
{
    outbox_kit_buf_printf(b,
                      "WITH sc AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', "
                      "true) AS v) "
                      "UPDATE %s AS o SET "
                      "status = CASE u.kind WHEN 1 THEN 'published' WHEN 3 THEN 'dead' ELSE "
                      "'pending' END, "
                      "published_at = CASE WHEN u.kind = 1 THEN statement_timestamp() ELSE "
                      "o.published_at END, "
                      "available_at = CASE WHEN u.kind = 2 OR (u.kind = 4 AND u.available_at IS NOT "
                      "NULL) THEN u.available_at ELSE o.available_at END, "
                      "last_error = CASE WHEN u.kind IN (2, 3) THEN u.error ELSE o.last_error END, "
                      /* A released row's attempt never happened: give it back. */
                      "attempts = CASE WHEN u.kind = 4 THEN greatest(o.attempts - 1, 0) ELSE "
                      "o.attempts END, "
                      "processing_at = CASE WHEN u.kind IN (2, 4) THEN NULL ELSE o.processing_at END "
                      "FROM unnest($1::uuid[], $2::int4[], $3::timestamptz[], $4::text[]) WITH "
                      "ORDINALITY AS u(id, kind, available_at, error, ord) "
                      "WHERE o.id = u.id AND o.status = 'processing' AND o.processing_at = "
                      "$5::timestamptz AND (SELECT v FROM sc) IS NOT NULL RETURNING u.ord",
                      h->rel_sql);
}

/* $1 ids, $2 the fence they hold. One clock reading, the new fence of every
 * row still holding the old one; RETURNING gives it back once per row. */
static void build_renew(const pg_handle_t *h, outbox_kit_buf_t *b)
{
    outbox_kit_buf_printf(b,
                          "WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS ts) "
                          "UPDATE %s AS o SET processing_at = (SELECT ts FROM clk) "
                          "WHERE o.id = ANY ($1::uuid[]) AND o.status = 'processing' AND "
                          "o.processing_at = $2::timestamptz RETURNING o.processing_at::timestamptz",
                          h->rel_sql);
}

static void build_ckpt_advance(const pg_handle_t *h, outbox_kit_buf_t *b)
{
    /* One statement: the max is taken by the server under the row lock, so
     * a slower writer with a smaller mark can never lower it. */
    outbox_kit_buf_printf(b, "INSERT INTO %s AS c (node_key, hlc) VALUES ($1::text, $2::int8) ON "
                         "CONFLICT (node_key) DO UPDATE SET hlc = GREATEST(c.hlc, EXCLUDED.hlc)",
                      h->ckpt_sql);
}

static void build_ckpt_recover(const pg_handle_t *h, outbox_kit_buf_t *b)
{
    outbox_kit_buf_printf(b, "SELECT coalesce(max(hlc), 0)::int8 FROM %s", h->ckpt_sql);
}

/* Both claim statements for limit, into b[0] (claim order) and b[1] (hlc
 * order, or a placeholder refused before use on a table without hlc). */
static void build_claims(const pg_handle_t *h, outbox_kit_buf_t b[2], long limit)
{
    outbox_pg_build_claim(h, &b[0], 0, limit, NULL);
    if (h->has_hlc)
        outbox_pg_build_claim(h, &b[1], 1, limit, NULL);
    else
        outbox_kit_buf_puts(&b[1], "SELECT 1");
}

int outbox_pg_rows_prepare_sql(pg_handle_t *h, outbox_diag_t *d)
{
    outbox_kit_buf_t b[PG_ROWS_SLOTS];
    for (int i = 0; i < PG_ROWS_SLOTS; i++)
        outbox_kit_buf_init(&b[i], outbox_pg_host);
    build_stage(h, &b[PG_STAGE], 0);
    build_stage(h, &b[PG_STAGE_CKPT], 1);
    if (!h->claim_limit)
        h->claim_limit = PG_CLAIM_LIMIT_FIRST;
    build_claims(h, &b[PG_CLAIM], h->claim_limit);
    outbox_pg_build_settle(h, &b[PG_SETTLE]);
    build_renew(h, &b[PG_RENEW]);
    build_ckpt_advance(h, &b[PG_CKPT_ADVANCE]);
    build_ckpt_recover(h, &b[PG_CKPT_RECOVER]);
    int failed = 0;
    for (int i = 0; i < PG_ROWS_SLOTS; i++)
        failed |= b[i].failed;
    if (failed) {
        for (int i = 0; i < PG_ROWS_SLOTS; i++)
            outbox_kit_buf_free(&b[i]);
        return outbox_pg_nomem(d);
    }
    for (int i = 0; i < PG_ROWS_SLOTS; i++) {
        outbox_pg_host->free(h->sql[i]);
        h->sql[i] = outbox_kit_buf_steal(&b[i]);
    }
    return OUTBOX_OK;
}

/* ------------------------------------------------------------------ stage */

/* Whether the JSON text (valid: the core checked it) holds the escape
 * \u0000, which jsonb refuses. Backslashes occur only in escapes there. */
static int holds_nul_escape(const char *p, size_t len)
{
    for (size_t i = 0; i + 1 < len; i++) {
        if (p[i] != '\\')
            continue;
        if (p[i + 1] == 'u' && i + 5 < len && memcmp(p + i + 2, "0000", 4) == 0)
            return 1;
        i++; /* the escaped character, which may be a backslash */
    }
    return 0;
}

/* Everything the server could refuse in the rows' content is refused here,
 * before anything is sent, so that a refused stage leaves the caller's
 * transaction as it was. */
static int check_rows(const pg_handle_t *h, const outbox_row_t *rows, size_t n, outbox_diag_t *d)
{
    for (size_t i = 0; i < n; i++) {
        const outbox_row_t *r = &rows[i];
        const char *missing = !r->id           ? "id"
                              : !r->route      ? "route"
                              : !r->event_id   ? "event_id"
                              : !r->event_type ? "event_type"
                              : !r->payload    ? "payload"
                                               : NULL;
        if (missing)
            return outbox_pg_fail(d, OUTBOX_EINVAL, "row %zu has no %s", i, missing);
        if (r->payload_len >= (size_t)INT32_MAX)
            return outbox_pg_fail(d, OUTBOX_EINVAL, "row %zu: payload of %zu bytes is too large", i,
                                  r->payload_len);
        if (holds_nul_escape(r->payload, r->payload_len ? r->payload_len : strlen(r->payload)))
            return outbox_pg_fail(d, OUTBOX_EINVAL,
                                  "row %zu: the payload holds \\u0000, which PostgreSQL's jsonb "
                                  "cannot store",
                                  i);
        if (r->hlc != 0 && !h->has_hlc)
            return outbox_pg_fail(d, OUTBOX_ENOTSUP,
                                  "row %zu has an hlc but column hlc is missing from \"%s\"", i,
                                  h->shown);
        if (r->traceparent && !h->has_traceparent)
            return outbox_pg_fail(d, OUTBOX_ENOTSUP,
                                  "row %zu has a traceparent but column traceparent is missing from "
                                  "\"%s\"",
                                  i, h->shown);
    }
    return OUTBOX_OK;
}

static int bad_uuid(outbox_diag_t *d, size_t i, const char *field, const char *v)
{
    return outbox_pg_fail(d, OUTBOX_EINVAL, "row %zu: %s \"%.40s\" is not a UUID", i, field, v);
}

/* The server's clock, microseconds since the epoch: a delay counts from
 * it, since claims compare available_at with it. */
static int server_now(pg_handle_t *h, PGconn *app, int64_t *now, outbox_diag_t *d)
{
    static const char sql[] = "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8";
    PGresult *res = NULL;
    int rc = app ? OUTBOX_OK : outbox_pg_connected(h, d);
    if (rc == OUTBOX_OK)
        rc = outbox_pg_exec_on(app ? app : h->conn, sql, 0, NULL, NULL, NULL, 0, &res, d,
                               "reading the server's clock");
    if (rc == OUTBOX_OK)
        *now = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return app ? rc : outbox_pg_tx_note(h, rc);
}

/* Fills h->params with one binary array per column; available_at, when
 * not 0, is every row's instead of its own. */
static int stage_arrays(pg_handle_t *h, const outbox_row_t *rows, size_t n, int64_t available_at,
                        outbox_diag_t *d)
{
    pg_array_t a[PG_STAGE_ARRAYS];
    static const uint32_t oids[] = {PG_OID_UUID, PG_OID_TEXT, PG_OID_UUID, PG_OID_TEXT,
                                    PG_OID_UUID, PG_OID_UUID, PG_OID_UUID, PG_OID_UUID,
                                    PG_OID_TIMESTAMPTZ, PG_OID_JSONB, PG_OID_TIMESTAMPTZ,
                                    PG_OID_TIMESTAMPTZ, PG_OID_TEXT, PG_OID_INT8, PG_OID_TEXT};
    for (int k = 0; k < PG_STAGE_ARRAYS; k++)
        outbox_pg_array_begin(&a[k], &h->params[k], oids[k], n);
    for (size_t i = 0; i < n; i++) {
        const outbox_row_t *r = &rows[i];
        const char *uuids[] = {r->id, NULL, r->event_id, NULL, r->tenant_id, r->execution_id,
                               r->correlation_id, r->causation_id};
        static const char *const names[] = {"id", "", "event_id", "", "tenant_id", "execution_id",
                                            "correlation_id", "causation_id"};
        for (int k = 0; k < 8; k++)
            if (names[k][0] && !outbox_pg_array_uuid(&a[k], uuids[k]))
                return bad_uuid(d, i, names[k], uuids[k]);
        outbox_pg_array_text0(&a[1], r->route);
        outbox_pg_array_text0(&a[3], r->event_type);
        outbox_pg_array_stamp(&a[8], r->occurred_at, 0);
        outbox_pg_array_jsonb(&a[9], r->payload, r->payload_len ? r->payload_len : strlen(r->payload));
        outbox_pg_array_stamp(&a[10], r->created_at, 0);
        outbox_pg_array_stamp(&a[11], available_at ? available_at : r->available_at, 1);
        outbox_pg_array_text0(&a[12], r->ordering_key);
        outbox_pg_array_int8(&a[13], r->hlc, 1);
        outbox_pg_array_text0(&a[14], r->traceparent);
    }
    for (int k = 0; k < PG_STAGE_ARRAYS; k++)
        if (h->params[k].failed || h->params[k].len > (size_t)INT32_MAX)
            return outbox_pg_fail(d, OUTBOX_ENOMEM, "out of memory (or a batch over 2 GB) staging %zu rows", n);
    return OUTBOX_OK;
}

static uint64_t count_value(const PGresult *res, int col)
{
    if (PQntuples(res) < 1 || PQgetisnull(res, 0, col))
        return 0;
    return strtoull(PQgetvalue(res, 0, col), NULL, 10);
}

static int stage_rows(pg_handle_t *h, const outbox_stage_ctx_t *ctx, const outbox_row_t *rows,
                      size_t n, size_t *count, outbox_diag_t *d)
{
    PGconn *app = ctx ? ctx->native_tx : NULL;
    int64_t delay = ctx && OUTBOX_STRUCT_HAS(outbox_stage_ctx_t, ctx, delay_us) ? ctx->delay_us : 0;
    int64_t available_at = 0;
    int rc = delay > 0 ? server_now(h, app, &available_at, d) : OUTBOX_OK;
    if (rc != OUTBOX_OK)
        return rc;
    if (delay > 0)
        available_at += delay;
    rc = stage_arrays(h, rows, n, available_at, d);
    if (rc != OUTBOX_OK)
        return rc;
    const char *values[18];
    int lengths[18], formats[18];
    int np = 0;
    for (int k = 0; k < 13; k++) {
        values[np] = h->params[k].data;
        lengths[np] = (int)h->params[k].len;
        formats[np++] = 1;
    }
    values[np] = h->channel;
    lengths[np] = 0;
    formats[np++] = 0;
    for (int k = 13; k < 15; k++) {
        if ((k == 13 && !h->has_hlc) || (k == 14 && !h->has_traceparent))
            continue;
        values[np] = h->params[k].data;
        lengths[np] = (int)h->params[k].len;
        formats[np++] = 1;
    }
    const char *key = ctx ? ctx->checkpoint_node_key : NULL;
    char mark[24];
    if (key) {
        snprintf(mark, sizeof mark, "%lld", (long long)ctx->max_hlc);
        values[np] = key;
        lengths[np] = 0;
        formats[np++] = 0;
        values[np] = mark;
        lengths[np] = 0;
        formats[np++] = 0;
    }
    int slot = key ? PG_STAGE_CKPT : PG_STAGE;
    PGresult *res = NULL;
    if (app)
        rc = outbox_pg_exec_on(app, h->sql[slot], np, values, lengths, formats, 0, &res, d, "staging");
    else
        rc = outbox_pg_exec_slot(h, slot, np, values, lengths, formats, 0, &res, d, "staging");
    if (rc == OUTBOX_OK)
        *count = (size_t)count_value(res, 0);
    PQclear(res);
    return rc;
}

int outbox_pg_stage(void *handle, const outbox_stage_ctx_t *ctx, const outbox_row_t *rows,
                    size_t n, size_t *staged, outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    size_t count = 0;
    if (staged)
        *staged = 0;
    if (n && !rows)
        return outbox_pg_fail(d, OUTBOX_EINVAL, "no rows given");
    int rc = check_rows(h, rows, n, d);
    if (rc != OUTBOX_OK)
        return rc;
    const char *key = ctx ? ctx->checkpoint_node_key : NULL;
    if (key && !h->has_ckpt)
        return checkpoint_missing(h, d);
    if (n == 0) {
        if (!key)
            return OUTBOX_OK;
        return outbox_pg_checkpoint_advance(h, ctx, key, ctx->max_hlc, d);
    }
    PGconn *app = ctx ? ctx->native_tx : NULL;
    if (app)
        rc = outbox_pg_check_native(app, d);
    else if (ctx && ctx->in_own_tx)
        rc = outbox_pg_in_own_tx(h, "staging", d);
    else
        rc = outbox_pg_no_open_tx(h, "staging outside a transaction", d);
    /* Without a transaction the single statement is atomic on its own. */
    if (rc == OUTBOX_OK)
        rc = stage_rows(h, ctx, rows, n, &count, d);
    if (rc == OUTBOX_OK && staged)
        *staged = count;
    return rc;
}

/* ------------------------------------------------------------------ claim */

/* Reserves the claim arena (at least size bytes); the previous claim's rows
 * are gone after this. */
static int arena_reserve(pg_handle_t *h, size_t size, outbox_diag_t *d)
{
    h->n_rows = 0;
    if (size <= h->arena_cap)
        return OUTBOX_OK;
    size_t cap = h->arena_cap ? h->arena_cap : 16384;
    while (cap < size)
        cap *= 2;
    char *p = outbox_pg_host->alloc(cap);
    if (!p)
        return outbox_pg_nomem(d);
    outbox_pg_host->free(h->arena);
    h->arena = p;
    h->arena_cap = cap;
    return OUTBOX_OK;
}

static void rows_reset(pg_handle_t *h)
{
    h->n_rows = 0;
}

/* Before a claim of route: LISTENs when the session does not yet, and takes
 * the notifications already received off the connection, so that a wait
 * after the claim only wakes for what the claim could have missed. Those
 * for other routes leave wake_pending set. (With wait, below.) */
static void drain_notifies(pg_handle_t *h, const char *route);

static const char *bin_text(const PGresult *res, int row, int col, char **w)
{
    if (PQgetisnull(res, row, col))
        return NULL;
    int len = PQgetlength(res, row, col);
    char *p = *w;
    memcpy(p, PQgetvalue(res, row, col), (size_t)len);
    p[len] = '\0';
    *w += len + 1;
    return p;
}

static const char *bin_uuid(const PGresult *res, int row, int col, char **w)
{
    if (PQgetisnull(res, row, col) || PQgetlength(res, row, col) != 16)
        return NULL;
    char *p = *w;
    outbox_pg_uuid_text((const unsigned char *)PQgetvalue(res, row, col), p);
    *w += OUTBOX_UUID_STRLEN + 1;
    return p;
}

static int64_t bin_stamp(const PGresult *res, int row, int col)
{
    if (PQgetisnull(res, row, col) || PQgetlength(res, row, col) != 8)
        return 0;
    return outbox_pg_get_stamp(PQgetvalue(res, row, col));
}

static int cmp_created(const void *a, const void *b)
{
    const outbox_row_t *x = a, *y = b;
    if (x->created_at != y->created_at)
        return x->created_at < y->created_at ? -1 : 1;
    return strcmp(x->id, y->id);
}

static int cmp_hlc(const void *a, const void *b)
{
    const outbox_row_t *x = a, *y = b;
    if ((x->hlc == 0) != (y->hlc == 0))
        return x->hlc == 0 ? 1 : -1;
    if (x->hlc != y->hlc)
        return x->hlc < y->hlc ? -1 : 1;
    return cmp_created(a, b);
}

/* Copies the claimed rows out of the result into handle-owned memory. */
static int keep_rows(pg_handle_t *h, const PGresult *res, int64_t *fence, outbox_diag_t *d)
{
    int n = PQntuples(res);
    int cols = C_FIXED_COUNT + (h->has_hlc ? 1 : 0) + (h->has_traceparent ? 1 : 0);
    if (PQnfields(res) != cols)
        return outbox_pg_fail(d, OUTBOX_EPERMANENT, "claim returned %d columns, expected %d",
                              PQnfields(res), cols);
    size_t need = 0;
    for (int i = 0; i < n; i++) {
        need += 6 * (OUTBOX_UUID_STRLEN + 1);
        for (int c = 0; c < cols; c++)
            need += (size_t)PQgetlength(res, i, c) + 1;
    }
    int rc = arena_reserve(h, need, d);
    if (rc != OUTBOX_OK)
        return rc;
    if ((size_t)n > h->cap_rows) {
        size_t cap = h->cap_rows ? h->cap_rows : 64;
        while (cap < (size_t)n)
            cap *= 2;
        outbox_row_t *v = outbox_pg_host->realloc(h->rows, cap * sizeof *v);
        if (!v)
            return outbox_pg_nomem(d);
        h->rows = v;
        h->cap_rows = cap;
    }
    char *w = h->arena;
    *fence = 0;
    for (int i = 0; i < n; i++) {
        outbox_row_t *r = &h->rows[i];
        memset(r, 0, sizeof *r);
        r->id = bin_uuid(res, i, C_ID, &w);
        r->route = bin_text(res, i, C_ROUTE, &w);
        r->event_id = bin_uuid(res, i, C_EVENT_ID, &w);
        r->event_type = bin_text(res, i, C_EVENT_TYPE, &w);
        r->tenant_id = bin_uuid(res, i, C_TENANT, &w);
        r->execution_id = bin_uuid(res, i, C_EXECUTION, &w);
        r->correlation_id = bin_uuid(res, i, C_CORRELATION, &w);
        r->causation_id = bin_uuid(res, i, C_CAUSATION, &w);
        r->occurred_at = bin_stamp(res, i, C_OCCURRED);
        r->payload = bin_text(res, i, C_PAYLOAD, &w);
        r->payload_len = r->payload ? (size_t)PQgetlength(res, i, C_PAYLOAD) : 0;
        r->created_at = bin_stamp(res, i, C_CREATED);
        r->attempts = PQgetlength(res, i, C_ATTEMPTS) == 4
                          ? outbox_pg_get_int4(PQgetvalue(res, i, C_ATTEMPTS))
                          : 0;
        r->available_at = bin_stamp(res, i, C_AVAILABLE);
        r->ordering_key = bin_text(res, i, C_KEY, &w);
        r->last_error = bin_text(res, i, C_LAST_ERROR, &w);
        *fence = bin_stamp(res, i, C_PROCESSING);
        int next = C_FIXED_COUNT;
        if (h->has_hlc) {
            if (!PQgetisnull(res, i, next) && PQgetlength(res, i, next) == 8)
                r->hlc = outbox_pg_get_int8(PQgetvalue(res, i, next));
            next++;
        }
        if (h->has_traceparent)
            r->traceparent = bin_text(res, i, next++, &w);
        if (!r->id || !r->route || !r->event_id || !r->event_type || !r->payload)
            return outbox_pg_fail(d, OUTBOX_EPERMANENT,
                                  "claimed a row with a NULL id, route, event_id, event_type or "
                                  "payload from \"%s\"",
                                  h->shown);
        h->n_rows++;
    }
    return OUTBOX_OK;
}

/* Longest lease that still leaves clock_timestamp() - lease inside
 * timestamptz's range: a century. Longer reclaims nothing either way. */
#define PG_LEASE_MAX (INT64_C(100) * 366 * 86400 * 1000000)

/* Rebuilds both claim statements for another batch limit, and forgets
 * their prepared forms on this connection. A relay claims with one limit,
 * so this happens once per handle. */
static int claim_relimit(pg_handle_t *h, long limit, outbox_diag_t *d)
{
    outbox_kit_buf_t b[2];
    outbox_kit_buf_init(&b[0], outbox_pg_host);
    outbox_kit_buf_init(&b[1], outbox_pg_host);
    build_claims(h, b, limit);
    int rc = b[0].failed || b[1].failed ? outbox_pg_nomem(d) : OUTBOX_OK;
    for (int i = 0; i < 2 && rc == OUTBOX_OK; i++)
        rc = outbox_pg_forget_slot(h, PG_CLAIM + i, d, "claiming");
    if (rc != OUTBOX_OK) {
        outbox_kit_buf_free(&b[0]);
        outbox_kit_buf_free(&b[1]);
        return rc;
    }
    for (int i = 0; i < 2; i++) {
        outbox_pg_host->free(h->sql[PG_CLAIM + i]);
        h->sql[PG_CLAIM + i] = outbox_kit_buf_steal(&b[i]);
    }
    h->claim_limit = limit;
    return OUTBOX_OK;
}

int outbox_pg_claim(void *handle, const outbox_claim_req_t *req, const outbox_row_t **rows,
                    size_t *n, outbox_fence_t *fence, outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    /* driver.h: the host has checked req and cleared the outputs. */
    int rc = outbox_pg_no_open_tx(h, "claim", d);
    if (rc != OUTBOX_OK)
        return rc;
    rows_reset(h);
    rc = outbox_pg_connected(h, d);
    if (rc != OUTBOX_OK)
        return rc;
    /* Wake-ups that arrived before this statement's snapshot are answered
     * by it; the ones that arrive from now on still wake the next wait. */
    drain_notifies(h, req->route);

    long limit = req->limit > (size_t)INT32_MAX ? INT32_MAX : (long)req->limit;
    if (limit != h->claim_limit) {
        rc = claim_relimit(h, limit, d);
        if (rc != OUTBOX_OK)
            return rc;
    }
    char lease[24];
    snprintf(lease, sizeof lease, "%lld",
             (long long)(req->lease_us > PG_LEASE_MAX ? PG_LEASE_MAX : req->lease_us));
    const char *values[2] = {req->route, lease};
    PGresult *res = NULL;
    rc = outbox_pg_exec_slot(h, req->hlc_order ? PG_CLAIM_HLC : PG_CLAIM, 2, values, NULL, NULL, 1,
                             &res, d, "claiming");
    if (rc != OUTBOX_OK)
        return rc;
    int64_t stamp = 0;
    rc = keep_rows(h, res, &stamp, d);
    PQclear(res);
    if (rc != OUTBOX_OK) {
        /* The rows stay processing until their lease ends, then are
         * claimed again: nothing is lost, only delayed. */
        rows_reset(h);
        return rc;
    }
    /* RETURNING yields rows in no promised order. */
    if (h->n_rows > 1)
        qsort(h->rows, h->n_rows, sizeof *h->rows, req->hlc_order ? cmp_hlc : cmp_created);
    *rows = h->rows;
    *n = h->n_rows;
    fence->stamp = stamp;
    return OUTBOX_OK;
}

/* ----------------------------------------------------------------- settle */

int outbox_pg_settle(void *handle, const outbox_fence_t *fence, outbox_settle_item_t *items,
                     size_t n, size_t *applied, outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    /* driver.h: the host has checked the fence and the items. */
    if (n > (size_t)INT32_MAX)
        return outbox_pg_fail(d, OUTBOX_EINVAL, "too many settle items");
    int rc = outbox_pg_no_open_tx(h, "settle", d);
    if (rc != OUTBOX_OK)
        return rc;

    pg_array_t ids, kinds, avail, errs;
    outbox_pg_array_begin(&ids, &h->params[0], PG_OID_UUID, n);
    outbox_pg_array_begin(&kinds, &h->params[1], PG_OID_INT4, n);
    outbox_pg_array_begin(&avail, &h->params[2], PG_OID_TIMESTAMPTZ, n);
    outbox_pg_array_begin(&errs, &h->params[3], PG_OID_TEXT, n);
    for (size_t i = 0; i < n; i++) {
        const outbox_settle_item_t *it = &items[i];
        if (!outbox_pg_array_uuid(&ids, it->id))
            return outbox_pg_fail(d, OUTBOX_EINVAL, "settle item %zu: id \"%.40s\" is not a UUID",
                                  i, it->id);
        outbox_pg_array_int4(&kinds, it->kind);
        outbox_pg_array_stamp(&avail,
                              it->kind == OUTBOX_SETTLE_RESCHEDULE || it->kind == OUTBOX_SETTLE_RELEASE
                                  ? it->available_at
                                  : 0,
                              1);
        if (it->error && (it->kind == OUTBOX_SETTLE_RESCHEDULE || it->kind == OUTBOX_SETTLE_DEAD))
            outbox_pg_array_line(&errs, it->error, PG_ERROR_MAX);
        else
            outbox_pg_array_null(&errs);
    }
    for (int k = 0; k < 4; k++)
        if (h->params[k].failed || h->params[k].len > (size_t)INT32_MAX)
            return outbox_pg_nomem(d);

    char stamp[8];
    outbox_pg_put_int8(stamp, fence->stamp - PG_EPOCH_OFFSET_US);
    const char *values[5] = {h->params[0].data, h->params[1].data, h->params[2].data,
                             h->params[3].data, stamp};
    int lengths[5] = {(int)h->params[0].len, (int)h->params[1].len, (int)h->params[2].len,
                      (int)h->params[3].len, 8};
    int formats[5] = {1, 1, 1, 1, 1};
    PGresult *res = NULL;
    rc = outbox_pg_exec_slot(h, PG_SETTLE, 5, values, lengths, formats, 1, &res, d, "settling");
    if (rc != OUTBOX_OK)
        return rc;
    size_t count = 0;
    for (int r = 0; r < PQntuples(res); r++) {
        if (PQgetlength(res, r, 0) != 8)
            continue;
        int64_t ord = outbox_pg_get_int8(PQgetvalue(res, r, 0));
        /* An id given twice updates its row once; count it once. */
        if (ord >= 1 && (uint64_t)ord <= n && !items[ord - 1].applied) {
            items[ord - 1].applied = 1;
            count++;
        }
    }
    PQclear(res);
    if (applied)
        *applied = count;
    return OUTBOX_OK;
}

/* ------------------------------------------------------------------ renew */

int outbox_pg_renew(void *handle, const outbox_renew_req_t *req, outbox_fence_t *renewed,
                    size_t *count, outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    /* driver.h: the host has checked req and cleared the outputs. */
    if (req->n > (size_t)INT32_MAX)
        return outbox_pg_fail(d, OUTBOX_EINVAL, "too many rows to renew");
    int rc = outbox_pg_no_open_tx(h, "renew", d);
    if (rc != OUTBOX_OK)
        return rc;
    rc = outbox_pg_connected(h, d);
    if (rc != OUTBOX_OK)
        return rc;
    pg_array_t ids;
    outbox_pg_array_begin(&ids, &h->params[0], PG_OID_UUID, req->n);
    for (size_t i = 0; i < req->n; i++)
        if (!outbox_pg_array_uuid(&ids, req->ids[i]))
            return outbox_pg_fail(d, OUTBOX_EINVAL, "renew: id \"%.40s\" is not a UUID", req->ids[i]);
    if (h->params[0].failed || h->params[0].len > (size_t)INT32_MAX)
        return outbox_pg_nomem(d);
    char stamp[8];
    outbox_pg_put_int8(stamp, req->fence->stamp - PG_EPOCH_OFFSET_US);
    const char *values[2] = {h->params[0].data, stamp};
    int lengths[2] = {(int)h->params[0].len, 8};
    int formats[2] = {1, 1};
    PGresult *res = NULL;
    rc = outbox_pg_exec_slot(h, PG_RENEW, 2, values, lengths, formats, 1, &res, d, "renewing the lease");
    if (rc != OUTBOX_OK)
        return rc;
    int rows = PQntuples(res);
    if (rows > 0)
        renewed->stamp = bin_stamp(res, 0, 0);
    PQclear(res);
    *count = (size_t)rows;
    return OUTBOX_OK;
}

/* ------------------------------------------------------------- checkpoint */

int outbox_pg_checkpoint_advance(void *handle, const outbox_stage_ctx_t *ctx, const char *node_key,
                                 int64_t hlc, outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    if (!node_key)
        return outbox_pg_fail(d, OUTBOX_EINVAL, "checkpoint advance needs a node key");
    if (!h->has_ckpt)
        return checkpoint_missing(h, d);
    char mark[24];
    snprintf(mark, sizeof mark, "%lld", (long long)hlc);
    const char *values[2] = {node_key, mark};
    PGconn *app = ctx ? ctx->native_tx : NULL;
    PGresult *res = NULL;
    int rc;
    if (app) {
        /* A lone upsert is atomic even between the application's
         * transactions, so only a broken connection is refused. */
        if (PQstatus(app) != CONNECTION_OK)
            return outbox_pg_fail(d, OUTBOX_ETRANSIENT, "the native PGconn is not connected");
        rc = outbox_pg_exec_on(app, h->sql[PG_CKPT_ADVANCE], 2, values, NULL, NULL, 0, &res, d,
                               "advancing the checkpoint");
    } else {
        rc = ctx && ctx->in_own_tx ? outbox_pg_in_own_tx(h, "advancing the checkpoint", d)
                                   : outbox_pg_no_open_tx(h, "checkpoint advance outside a transaction", d);
        if (rc == OUTBOX_OK)
            rc = outbox_pg_exec_slot(h, PG_CKPT_ADVANCE, 2, values, NULL, NULL, 0, &res, d,
                                     "advancing the checkpoint");
    }
    PQclear(res);
    return rc;
}

int outbox_pg_checkpoint_recover(void *handle, int64_t *hlc, outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    if (!hlc)
        return outbox_pg_fail(d, OUTBOX_EINVAL, "checkpoint recover needs an output");
    *hlc = 0;
    if (!h->has_ckpt)
        return checkpoint_missing(h, d);
    PGresult *res = NULL;
    int rc = outbox_pg_exec_slot(h, PG_CKPT_RECOVER, 0, NULL, NULL, NULL, 0, &res, d,
                                 "recovering the checkpoint");
    if (rc == OUTBOX_OK && PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
        *hlc = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return rc;
}

/* ------------------------------------------------------------------- wait */

/* LISTEN once per session. */
static int listen_once(pg_handle_t *h, outbox_diag_t *d)
{
    if (h->listening)
        return OUTBOX_OK;
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_pg_host);
    outbox_kit_buf_puts(&b, "LISTEN ");
    outbox_kit_buf_ident(&b, h->channel, '"');
    if (b.failed) {
        outbox_kit_buf_free(&b);
        return outbox_pg_nomem(d);
    }
    int rc = outbox_pg_command(h, b.data, d, "listening for new rows");
    outbox_kit_buf_free(&b);
    if (rc == OUTBOX_OK)
        h->listening = 1;
    return rc;
}

static void drain_notifies(pg_handle_t *h, const char *route)
{
    /* A relay claims before it first waits: listening from here on means no
     * row committed between an empty claim and the wait goes unnoticed. A
     * failure is left for wait() to report. */
    if (!h->listening) {
        outbox_diag_t ignored = {0};
        listen_once(h, &ignored);
        return;
    }
    if (!PQconsumeInput(h->conn))
        return;
    PGnotify *n;
    while ((n = PQnotifies(h->conn)) != NULL) {
        /* Not ours to answer: keep the wake-up for the next wait. */
        if (strcmp(n->relname, h->channel) != 0 || !n->extra || strcmp(n->extra, route) != 0)
            h->wake_pending = 1;
        PQfreemem(n);
    }
}

static void sleep_ms(int ms)
{
    if (ms > 0)
        poll(NULL, 0, ms);
}

/* 1 when a notification for route (any, when NULL) was received. */
static int take_notifies(pg_handle_t *h, const char *route)
{
    int woke = 0;
    PGnotify *n;
    while ((n = PQnotifies(h->conn)) != NULL) {
        if (strcmp(n->relname, h->channel) == 0 && (!route || !n->extra || strcmp(n->extra, route) == 0))
            woke = 1;
        PQfreemem(n);
    }
    return woke;
}

int outbox_pg_wait(void *handle, const char *route, int timeout_ms, outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    if (timeout_ms < 0)
        timeout_ms = 0;
    /* LISTEN inside an open transaction would only start at its commit. */
    PGTransactionStatusType st = PQtransactionStatus(h->conn);
    if (PQstatus(h->conn) == CONNECTION_OK && st != PQTRANS_IDLE) {
        sleep_ms(timeout_ms);
        return OUTBOX_OK;
    }
    int rc = outbox_pg_connected(h, d);
    if (rc != OUTBOX_OK) {
        sleep_ms(timeout_ms);
        return rc;
    }
    rc = listen_once(h, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (h->wake_pending) {
        h->wake_pending = 0;
        return OUTBOX_OK;
    }
    int64_t deadline = outbox_pg_host->monotonic_us() + (int64_t)timeout_ms * 1000;
    for (;;) {
        if (!PQconsumeInput(h->conn))
            return outbox_pg_result_fail(h->conn, NULL, d, "waiting for new rows");
        if (take_notifies(h, route))
            return OUTBOX_OK;
        int64_t left_us = deadline - outbox_pg_host->monotonic_us();
        if (left_us <= 0)
            return OUTBOX_OK;
        /* Rounded up: a poll of 0 ms would spin through the last millisecond. */
        int64_t left = (left_us + 999) / 1000;
        struct pollfd pfd = {.fd = PQsocket(h->conn), .events = POLLIN};
        if (pfd.fd < 0)
            return outbox_pg_fail(d, OUTBOX_ETRANSIENT, "waiting for new rows: no connection");
        int pr = poll(&pfd, 1, left > INT32_MAX ? INT32_MAX : (int)left);
        if (pr < 0 && errno != EINTR)
            return outbox_pg_fail(d, OUTBOX_ETRANSIENT, "waiting for new rows: poll: %s",
                                  strerror(errno));
    }
}
