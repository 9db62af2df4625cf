/* outbox-bench, throughput mode without a ceiling: for any store driver,
 * including one built outside this tree and given with --driver.
 *
 * The ceiling needs the store's own SQL replayed by a client of its own,
 * which the bench has only for SQLite and PostgreSQL. This mode needs
 * nothing but the public API, the way an application drives the driver:
 *
 *  - the relation is created with outbox_store_schema_apply() when it does not
 *    exist yet (and used as it is when it does);
 *  - each round stages the backlog on a route of its own, "bench-" and 12
 *    random hex digits, so no row of any other route is ever claimed,
 *    published or purged;
 *  - the relays drain it to the sink (null: by default); the relays' own
 *    counters, and the driver's stats when it has them, must agree that
 *    every row was published exactly once;
 *  - the round's rows are then purged with outbox_store_purge() when the driver
 *    has it, leaving the relation as it was.
 *
 * Nothing is ever dropped: the bench has no connection of its own to the
 * store, and a relation it created stays (empty when the driver purges).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

/* The route prefix of every round; the rest is the random last group of a
 * fresh UUIDv7 (48 bits), short like a real route. */
#define ROUTE_PREFIX "bench-"
#define ROUTE_RANDOM 12

/* Exit status for a failed store call: what the user must fix (no such
 * driver, a malformed URI, a broken module) is bad input, the rest (a
 * server that is down, a disk error) a failed run. */
static int exit_for(int rc)
{
    return rc == OUTBOX_EINVAL || rc == OUTBOX_ENOTFOUND || rc == OUTBOX_EABI ? BENCH_EXIT_USAGE
                                                                               : BENCH_EXIT_FAIL;
}

static int64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Opens the store on relation through o->driver; flags are OUTBOX_OPEN_*. */
static int open_store(const bench_opts_t *o, uint32_t flags, outbox_store_t **s, outbox_diag_t *d)
{
    outbox_store_options_t so = {.struct_size = sizeof so,
                                 .relation = o->relation,
                                 .driver = o->driver,
                                 .flags = flags};
    *d = (outbox_diag_t){0};
    return outbox_store_open(o->store, &so, s, d);
}

/* Opens the relation for staging and the bench's checks into *admin,
 * creating it first with the driver's schema apply when it does not exist. */
static int open_relation(const bench_opts_t *o, outbox_store_t **admin, int *created, char *err,
                         size_t errlen)
{
    outbox_store_t *probe = NULL;
    outbox_diag_t d;
    *admin = NULL;
    *created = 0;
    int rc = open_store(o, OUTBOX_OPEN_SCHEMA_ONLY, &probe, &d);
    if (rc != OUTBOX_OK) {
        snprintf(err, errlen, "cannot open store %s: %s", bench_uri_shown(o->store), d.message);
        return exit_for(rc);
    }
    const outbox_driver_t *drv = outbox_store_driver(probe);
    if (o->workers > 1 && !(outbox_store_capabilities(probe) & OUTBOX_STORE_CAP_CONCURRENT)) {
        snprintf(err, errlen,
                 "--workers %ld: the %s store driver does not declare concurrent claimers "
                 "(OUTBOX_STORE_CAP_CONCURRENT); run one worker",
                 o->workers, drv->name);
        outbox_store_close(probe);
        return BENCH_EXIT_USAGE;
    }
    rc = open_store(o, 0, admin, &d);
    if (rc == OUTBOX_EMISSING || rc == OUTBOX_ESCHEMA || rc == OUTBOX_ENOTFOUND) {
        /* No such relation (OUTBOX_EMISSING; a driver before ABI 1.4 says
         * ESCHEMA or ENOTFOUND), or not a usable one: create it, when the
         * driver can. */
        if (!BENCH_VT_HAS(drv->store, schema_apply)) {
            snprintf(err, errlen,
                     "the %s store driver has no schema_apply entry, so outbox-bench cannot "
                     "create relation %s (%s): create it first, or give --relation an existing one",
                     drv->name, o->relation, d.message);
            outbox_store_close(probe);
            return BENCH_EXIT_USAGE;
        }
        /* Schema apply is idempotent; the in-tree drivers refuse a foreign
         * table of that name, which they cannot make canonical, unchanged. */
        outbox_schema_opts_t so = {.struct_size = sizeof so, .relation = o->relation};
        int arc = outbox_store_schema_apply(probe, &so);
        if (arc != OUTBOX_OK) {
            snprintf(err, errlen, "schema apply on %s: %s", o->relation,
                     outbox_store_message(probe));
            outbox_store_close(probe);
            return arc == OUTBOX_ESCHEMA ? BENCH_EXIT_USAGE : exit_for(arc);
        }
        *created = 1;
        rc = open_store(o, 0, admin, &d);
    }
    outbox_store_close(probe);
    if (rc != OUTBOX_OK) {
        snprintf(err, errlen, "cannot open relation %s of store %s: %s", o->relation,
                 bench_uri_shown(o->store), d.message);
        return rc == OUTBOX_ESCHEMA ? BENCH_EXIT_USAGE : exit_for(rc);
    }
    return 0;
}

/* One line on stderr naming the optional entries the driver lacks and what
 * the run does without each. */
static void note_missing(const outbox_driver_t *drv, int created)
{
    const outbox_store_vtable_t *vt = drv->store;
    char line[900] = "";
    size_t n = 0;
    const char *what[4];
    int k = 0;
    if (!BENCH_VT_HAS(vt, stats))
        what[k++] = "stats (each drain is checked by the relays' counts alone)";
    if (!BENCH_VT_HAS(vt, purge))
        what[k++] = "purge (the published rows of every round stay in the relation)";
    if (!BENCH_VT_HAS(vt, schema_apply) && !created)
        what[k++] = "schema_apply (not needed: the relation exists)";
    if (!(BENCH_VT_HAS(vt, begin) && BENCH_VT_HAS(vt, commit) && BENCH_VT_HAS(vt, rollback)))
        what[k++] = "begin/commit/rollback (staging commits every outbox_store_stage() call of 1,000 "
                    "events on its own)";
    if (k == 0)
        return;
    for (int i = 0; i < k && n < sizeof line; i++)
        n += (size_t)snprintf(line + n, sizeof line - n, "%s%s", i ? "; " : "", what[i]);
    bench_err("note: the %s store driver has no %s", drv->name, line);
}

/* After a drain: the driver's own count agrees with the relays'. */
static int check_stats(outbox_store_t *admin, const char *route, long events, char *err,
                       size_t errlen)
{
    outbox_stats_t st;
    if (outbox_store_stats(admin, route, &st) != OUTBOX_OK) {
        snprintf(err, errlen, "stats: %s", outbox_store_message(admin));
        return BENCH_EXIT_FAIL;
    }
    if (st.published != (uint64_t)events || st.pending || st.processing || st.dead) {
        snprintf(err, errlen,
                 "after the drain the driver's stats of route %s say %llu published, %llu "
                 "pending, %llu processing, %llu dead; %ld were staged",
                 route, (unsigned long long)st.published, (unsigned long long)st.pending,
                 (unsigned long long)st.processing, (unsigned long long)st.dead, events);
        return BENCH_EXIT_FAIL;
    }
    return 0;
}

/* One round on a fresh route: stage, drain, check, purge. */
static int round_once(const bench_opts_t *o, outbox_store_t *admin, double *stage_s,
                      bench_drain_t *drain, int *purge_short, char *err, size_t errlen)
{
    char route[sizeof ROUTE_PREFIX + ROUTE_RANDOM];
    char uuid[OUTBOX_UUID_STRLEN + 1];
    if (outbox_uuid_v7(uuid) != OUTBOX_OK) {
        snprintf(err, errlen, "cannot make a route name: no UUID");
        return BENCH_EXIT_FAIL;
    }
    snprintf(route, sizeof route, ROUTE_PREFIX "%s", uuid + OUTBOX_UUID_STRLEN - ROUTE_RANDOM);
    const outbox_store_vtable_t *vt = outbox_store_driver(admin)->store;
    int rc = bench_stage_backlog(o, o->relation, route, stage_s, err, errlen);
    if (rc == 0)
        rc = bench_relay_drain(o, o->relation, route, drain, err, errlen);
    if (rc == 0 && drain->published != o->events) {
        snprintf(err, errlen,
                 "the relays published %ld events of route %s, %ld were staged%s", drain->published,
                 route, o->events,
                 drain->published > o->events ? ": the driver handed some rows out twice" : "");
        rc = BENCH_EXIT_FAIL;
    }
    if (rc == 0 && BENCH_VT_HAS(vt, stats))
        rc = check_stats(admin, route, o->events, err, errlen);
    if (rc == 0 && BENCH_VT_HAS(vt, purge)) {
        uint64_t purged = 0;
        /* Every row of the route is published by now; a second of margin
         * for a store whose clock runs a little ahead. */
        if (outbox_store_purge(admin, route, wall_us() + 1000000, &purged) != OUTBOX_OK) {
            snprintf(err, errlen, "purge of route %s: %s", route, outbox_store_message(admin));
            rc = BENCH_EXIT_FAIL;
        } else if (purged != (uint64_t)o->events) {
            *purge_short = 1;
        }
    }
    return rc;
}

int bench_throughput_no_ceiling(const bench_opts_t *o)
{
    char err[1024] = "";
    /* A sink that cannot open is bad input: say so before staging anything. */
    outbox_sink_t *probe = NULL;
    outbox_diag_t d;
    if (outbox_sink_open(o->sink, NULL, &probe, &d) != OUTBOX_OK) {
        bench_err("cannot open sink %s: %s", bench_uri_shown(o->sink), d.message);
        return BENCH_EXIT_USAGE;
    }
    outbox_sink_close(probe);

    outbox_store_t *admin = NULL;
    int created = 0;
    int rc = open_relation(o, &admin, &created, err, sizeof err);
    if (rc != 0) {
        bench_err("%s", err);
        return rc;
    }
    const outbox_driver_t *drv = outbox_store_driver(admin);
    note_missing(drv, created);
    if (BENCH_VT_HAS(drv->store, stats)) {
        outbox_stats_t st;
        if (outbox_store_stats(admin, NULL, &st) == OUTBOX_OK) {
            unsigned long long rows = st.pending + st.processing + st.published + st.dead;
            if (rows > 0)
                bench_err("note: relation %s already holds %llu rows of other routes (they are "
                          "left alone, but may slow the claims)",
                          o->relation, rows);
        }
    }

    /* What only a ceiling or a reference drain measures is null. */
    bench_result_t res = {.o = o, .driver = drv, .no_ceiling_line = 1};
    res.rounds = calloc((size_t)o->repeat, sizeof *res.rounds);
    if (!res.rounds) {
        snprintf(err, sizeof err, "out of memory");
        rc = BENCH_EXIT_FAIL;
    }
    int purge_short = 0;
    for (long r = 0; r < o->repeat && rc == 0; r++) {
        double stage_s = 0;
        bench_drain_t drain = {0};
        rc = round_once(o, admin, &stage_s, &drain, &purge_short, err, sizeof err);
        if (rc != 0)
            break;
        res.rounds[r].eps = drain.seconds > 0 ? (double)o->events / drain.seconds : 0;
        res.rounds[r].cpu = drain.cpu_s;
        res.rounds[r].stage_eps = stage_s > 0 ? (double)o->events / stage_s : 0;
        res.n = r + 1;
    }
    if (rc == 0 && purge_short)
        bench_err("warning: the %s driver's purge removed fewer rows than each round published",
                  drv->name);
    if (rc == 0)
        rc = bench_result_report(&res);
    else
        bench_err("%s", err);
    outbox_store_close(admin);
    free(res.rounds);
    return rc;
}
