/* outbox-bench: the result of a throughput run, with or without a
 * ceiling, and the one JSON line that reports it.
 *
 * Both throughput lines have the same keys in the same order up to the
 * sink's part; the line with a ceiling adds the tables' keys before the
 * sink's and the resources' after them. What a run did not measure is
 * null, never missing, so that scripts can read every line alike. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* The per-round numbers that have a median in the line. */
#define AT(name) offsetof(bench_round_t, name)
static const size_t round_fields[] = {
    AT(eps),    AT(cpu),    AT(stage_eps), AT(ceps),  AT(ccpu),  AT(ratio),
    AT(cpu_ratio), AT(reps), AT(rratio),   AT(teps),  AT(tratio), AT(peps),
    AT(pcpu),   AT(lratio), AT(rbusy),     AT(cbusy), AT(pbusy), AT(cbound),
};
#undef AT

static double *field(bench_round_t *r, size_t off)
{
    return (double *)((char *)r + off);
}

/* One number of every round, in round order, into col. */
static void column(const bench_result_t *res, size_t off, double col[BENCH_REPEAT_MAX])
{
    for (long i = 0; i < res->n; i++)
        col[i] = *field(&res->rounds[i], off);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n), which it sorts. */
static double median(double *v, long n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Fills res->med from res->rounds[0..n). */
static void medians(bench_result_t *res)
{
    double col[BENCH_REPEAT_MAX];
    memset(&res->med, 0, sizeof res->med);
    if (res->n < 1)
        return;
    for (size_t k = 0; k < sizeof round_fields / sizeof round_fields[0]; k++) {
        column(res, round_fields[k], col);
        *field(&res->med, round_fields[k]) = median(col, res->n);
    }
}

/* One number of every round as a JSON array, or null when !present. */
static void rounds_or_null(bench_json_t *j, const char *key, const bench_result_t *res,
                           int present, size_t off, int decimals)
{
    double col[BENCH_REPEAT_MAX];
    column(res, off, col);
    bench_json_nums_or_null(j, key, present, col, res->n, decimals);
}

/* What ran and the relay's own numbers. */
static void put_relay(bench_json_t *j, const bench_result_t *res)
{
    const bench_opts_t *o = res->o;
    bench_json_text(j, "store", bench_uri_shown(o->store));
    bench_json_text(j, "driver", res->driver ? res->driver->name : "");
    bench_json_text(j, "sink", o->sink ? bench_uri_shown(o->sink) : NULL);
    bench_json_int(j, "events", o->events);
    bench_json_int(j, "keys", o->keys);
    bench_json_int(j, "batch", o->batch);
    bench_json_int(j, "workers", o->workers);
    bench_json_num(j, "events_per_s", res->med.eps, 0);
    bench_json_num(j, "cpu_s", res->med.cpu, 3);
    bench_json_num(j, "cpu_s_per_1k_events", res->med.cpu * 1000 / (double)o->events, 4);
    bench_json_int(j, "peak_rss_kb", bench_peak_rss_kb());
}

/* The store ceiling's numbers beside the relay's rounds. */
static void put_ceiling(bench_json_t *j, const bench_result_t *res)
{
    const int c = res->has_ceiling;
    bench_json_bool(j, "ceiling", c);
    bench_json_num_or_null(j, "ceiling_events_per_s", c, res->med.ceps, 0);
    bench_json_num_or_null(j, "ratio", c, res->med.ratio, 3);
    bench_json_int(j, "repeat", res->n);
    rounds_or_null(j, "ratios", res, c, offsetof(bench_round_t, ratio), 3);
    rounds_or_null(j, "events_per_s_rounds", res, 1, offsetof(bench_round_t, eps), 0);
    bench_json_num_or_null(j, "ceiling_cpu_s", c, res->med.ccpu, 3);
    /* CPU time compares only when the ceiling runs in this process. */
    bench_json_num_or_null(j, "cpu_ratio", c && res->ceiling_in_process, res->med.cpu_ratio, 3);
}

/* Staging, the reference drain, and what the driver is. */
static void put_reference(bench_json_t *j, const bench_result_t *res)
{
    const int ref = res->has_reference;
    char missing[200];
    bench_json_num(j, "stage_events_per_s", res->med.stage_eps, 0);
    bench_json_num_or_null(j, "reference_events_per_s", ref, res->med.reps, 0);
    bench_json_num_or_null(j, "reference_ratio", ref, res->med.rratio, 3);
    rounds_or_null(j, "reference_ratios", res, ref, offsetof(bench_round_t, rratio), 3);
    if (res->has_ceiling && res->traced)
        bench_json_bool(j, "sql_verified", res->verified);
    else
        bench_json_null(j, "sql_verified");
    bench_missing_entries(res->driver, missing, sizeof missing);
    bench_json_raw(j, "missing_entries", missing);
    bench_json_num(j, "loadavg", bench_loadavg(), 2);
}

/* --table: which indexes the relay's table had, and the two-index copy's
 * numbers with --table both. */
static void put_tables(bench_json_t *j, const bench_result_t *res)
{
    static const char *const table_names[] = {"shipped", "two-index", "both"};
    const int both = res->o->table == BENCH_TABLE_BOTH;
    bench_json_text(j, "table", table_names[res->o->table]);
    bench_json_num_or_null(j, "two_index_events_per_s", both, res->med.teps, 0);
    bench_json_num_or_null(j, "two_index_ratio", both, res->med.tratio, 3);
    rounds_or_null(j, "two_index_rounds", res, both, offsetof(bench_round_t, teps), 0);
    rounds_or_null(j, "two_index_ratios", res, both, offsetof(bench_round_t, tratio), 3);
}

/* The producer ceiling, and the relay against the lesser ceiling. */
static void put_sink(bench_json_t *j, const bench_result_t *res)
{
    const int p = res->producer != NULL;
    if (p)
        bench_json_text(j, "producer_ceiling", res->producer);
    else
        bench_json_null(j, "producer_ceiling");
    bench_json_num_or_null(j, "producer_ceiling_events_per_s", p, res->med.peps, 0);
    rounds_or_null(j, "producer_ceiling_rounds", res, p, offsetof(bench_round_t, peps), 0);
    bench_json_num_or_null(j, "producer_ceiling_cpu_s", p, res->med.pcpu, 3);
    bench_json_num_or_null(j, "ratio_to_lesser", res->has_ceiling, res->med.lratio, 3);
    rounds_or_null(j, "ratios_to_lesser", res, res->has_ceiling, offsetof(bench_round_t, lratio),
                   3);
}

/* The machine's busy CPUs over the drains, the relay's resident set, and
 * how the relays ran. */
static void put_resources(bench_json_t *j, const bench_result_t *res)
{
    const bench_opts_t *o = res->o;
    if (res->has_ceiling && res->producer && res->med.cbound >= 0) {
        bench_json_open(j, "busy_cores");
        bench_json_num(j, "relay", res->med.rbusy, 2);
        bench_json_num(j, "store_ceiling", res->med.cbusy, 2);
        bench_json_num(j, "producer_ceiling", res->med.pbusy, 2);
        bench_json_int(j, "cpus", bench_ncpu());
        bench_json_close(j);
        bench_json_num(j, "cpu_bound_ratio", res->med.cbound, 3);
    } else {
        bench_json_null(j, "busy_cores");
        bench_json_null(j, "cpu_bound_ratio");
    }
    bench_json_int(j, "relay_peak_rss_kb", res->relay_hwm_kb);
    bench_json_int(j, "relay_rss_growth_kb", res->relay_growth_kb);
    if (o->metrics_listen)
        bench_json_text(j, "metrics", o->metrics_listen);
    else
        bench_json_null(j, "metrics");
    outbox_relay_config_t defaults;
    outbox_relay_config_init(&defaults);
    bench_json_int(j, "pipeline", o->pipeline > 0 ? o->pipeline : (long)defaults.pipeline);
}

/* The medians, then the line. */
int bench_result_report(bench_result_t *res)
{
    medians(res);
    bench_json_t j = {0};
    bench_json_open(&j, NULL);
    put_relay(&j, res);
    put_ceiling(&j, res);
    put_reference(&j, res);
    if (!res->no_ceiling_line)
        put_tables(&j, res);
    put_sink(&j, res);
    if (!res->no_ceiling_line)
        put_resources(&j, res);
    bench_json_close(&j);
    if (bench_json_print(&j) != 0) {
        bench_err("out of memory");
        return BENCH_EXIT_FAIL;
    }
    return 0;
}
