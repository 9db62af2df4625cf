/* Conformance battery: choosing the cases, running them with Check, and
 * reporting (Check's own output, skips, a summary line and TAP). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf_int.h"

static conf_cases_t store_cases, sink_cases;

static const conf_cases_t *cases_of(int kind)
{
    if (store_cases.n == 0) {
        conf_cases_stage(&store_cases);
        conf_cases_claim(&store_cases);
        conf_cases_settle(&store_cases);
        conf_cases_concurrency(&store_cases);
        conf_cases_checkpoint(&store_cases);
        conf_cases_admin(&store_cases);
        conf_cases_listing(&store_cases);
        conf_cases_schema(&store_cases);
        conf_cases_sink(&sink_cases);
    }
    return kind == OUTBOX_DRIVER_SINK ? &sink_cases : &store_cases;
}

const char *outbox_conformance_case_name(size_t i)
{
    const conf_cases_t *st = cases_of(OUTBOX_DRIVER_STORE);
    const conf_cases_t *sk = cases_of(OUTBOX_DRIVER_SINK);
    if (i < st->n)
        return st->v[i].test->name;
    return i - st->n < sk->n ? sk->v[i - st->n].test->name : NULL;
}

/* The two batteries differ only in their cases and their fixture. */
typedef struct battery {
    const char *kind;
    int (*init)(const outbox_conformance_opts_t *o, outbox_diag_t *d);
    const char *(*need_reason)(unsigned needs);
    void (*schedule)(const conf_case_t *const *cases, size_t n);
    void (*setup)(void);
    void (*teardown)(void);
    unsigned (*leftovers)(void);
    const char *leftover_text;
} battery_t;

static int store_init(const outbox_conformance_opts_t *o, outbox_diag_t *d)
{
    return conf_fixture_init(o->driver, o->uri, d);
}

static const battery_t store_battery = {
    "store", store_init, conf_need_reason, conf_fixture_schedule, conf_fixture_setup,
    conf_fixture_teardown, conf_fixture_leftovers,
    "relations conf_* were left behind (the driver has no schema_drop, or it failed)",
};

static const battery_t sink_battery = {
    "sink", conf_sink_init, conf_sink_need_reason, conf_sink_schedule, conf_sink_setup,
    conf_sink_teardown, conf_sink_leftovers,
    "destinations conf_* were left behind (the driver has no destination_drop, or it failed)",
};

/* What happened to one selected case. */
typedef struct outcome {
    const conf_case_t *c;
    const char *skip;      /* non-NULL: skipped, and why */
    int ran;
    int passed;
    char detail[OUTBOX_MESSAGE_MAX]; /* file:line: message of a failure */
} outcome_t;

static int set_error(outbox_diag_t *d, int code, const char *fmt, const char *arg)
{
    d->code = code;
    snprintf(d->message, sizeof d->message, fmt, arg);
    return code;
}

/* Check's message of a case, on one line. */
static void result_detail(TestResult *tr, char *out, size_t size)
{
    /* __FILE__ holds the build's relative path; the file name says enough. */
    const char *file = tr_lfile(tr) ? tr_lfile(tr) : "?";
    const char *slash = strrchr(file, '/');
    snprintf(out, size, "%s:%d: %s", slash ? slash + 1 : file, tr_lno(tr),
             tr_msg(tr) ? tr_msg(tr) : "");
    for (char *p = out; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
}

static void collect_results(SRunner *sr, outcome_t *out, size_t n)
{
    TestResult **results = srunner_results(sr);
    int count = srunner_ntests_run(sr);
    for (size_t i = 0; i < n; i++) {
        if (out[i].skip != NULL)
            continue;
        for (int r = 0; results != NULL && r < count; r++) {
            if (strcmp(tr_tcname(results[r]), out[i].c->test->name) != 0)
                continue;
            out[i].ran = 1;
            out[i].passed = tr_rtype(results[r]) == CK_PASS;
            if (!out[i].passed)
                result_detail(results[r], out[i].detail, sizeof out[i].detail);
        }
        if (!out[i].ran)
            snprintf(out[i].detail, sizeof out[i].detail,
                     "the case did not run (is CK_RUN_CASE or CK_RUN_SUITE set?)");
    }
    free(results);
}

static void write_tap(FILE *f, const outcome_t *out, size_t n)
{
    fprintf(f, "TAP version 13\n1..%zu\n", n);
    for (size_t i = 0; i < n; i++) {
        const char *name = out[i].c->test->name;
        if (out[i].skip != NULL)
            fprintf(f, "ok %zu - %s # SKIP %s\n", i + 1, name, out[i].skip);
        else if (out[i].passed)
            fprintf(f, "ok %zu - %s\n", i + 1, name);
        else
            fprintf(f, "not ok %zu - %s\n# %s\n", i + 1, name, out[i].detail);
    }
}

static int check_opts(const outbox_conformance_opts_t *o, outbox_diag_t *d)
{
    if (o->driver == NULL || o->driver[0] == '\0')
        return set_error(d, OUTBOX_EINVAL, "%s", "no driver given");
    if (o->uri == NULL || o->uri[0] == '\0')
        return set_error(d, OUTBOX_EINVAL, "%s", "no URI given");
    return OUTBOX_OK;
}

/* Builds one TCase per case that runs: each gets its own relation (the
 * unchecked fixtures run in this process, around the fork), its own
 * timeout and its own line in the results. */
static Suite *build_suite(const battery_t *b, outcome_t *out, size_t n, const conf_case_t **run,
                          size_t *n_run, int verbosity)
{
    Suite *suite = suite_create("conformance");
    *n_run = 0;
    for (size_t i = 0; i < n; i++) {
        out[i].skip = b->need_reason(out[i].c->needs);
        if (out[i].skip != NULL) {
            if (verbosity >= 0)
                printf("conformance: SKIP %s: %s\n", out[i].c->test->name, out[i].skip);
            continue;
        }
        TCase *tc = tcase_create(out[i].c->test->name);
        tcase_add_unchecked_fixture(tc, b->setup, b->teardown);
        tcase_set_timeout(tc, out[i].c->timeout_s);
        tcase_add_test(tc, out[i].c->test);
        suite_add_tcase(suite, tc);
        run[(*n_run)++] = out[i].c;
    }
    return suite;
}

/* The caller's options as a full copy: members its struct_size does not
 * cover (built against older headers) keep their defaults. */
#define OPT(m)                                                                                   \
    do {                                                                                         \
        if (OUTBOX_STRUCT_HAS(outbox_conformance_opts_t, given, m))                              \
            o->m = given->m;                                                                     \
    } while (0)
static void read_opts(const outbox_conformance_opts_t *given, outbox_conformance_opts_t *o)
{
    *o = (outbox_conformance_opts_t){.struct_size = sizeof *o};
    if (given == NULL || given->struct_size < sizeof(uint32_t))
        return;
    OPT(driver);
    OPT(uri);
    OPT(tap_file);
    OPT(case_filter);
    OPT(verbosity);
    OPT(diag);
    OPT(counts);
    OPT(broker_stop);
    OPT(broker_start);
}
#undef OPT

int outbox_conformance_run(const outbox_conformance_opts_t *given)
{
    outbox_conformance_opts_t full;
    const outbox_conformance_opts_t *o = &full;
    read_opts(given, &full);
    outbox_diag_t local = {0};
    outbox_diag_t *d = o->diag ? o->diag : &local;
    memset(d, 0, sizeof *d);
    if (given == NULL || given->struct_size < sizeof(uint32_t))
        return set_error(d, OUTBOX_EINVAL, "%s", "conformance options: struct_size not set");
    int rc = check_opts(o, d);
    if (rc != OUTBOX_OK)
        return rc;

    /* The driver's kind chooses the battery. */
    const outbox_driver_t *loaded = NULL;
    rc = outbox_driver_load(o->driver, &loaded, d);
    if (rc != OUTBOX_OK)
        return rc;
    const battery_t *b = loaded->kind == OUTBOX_DRIVER_SINK ? &sink_battery : &store_battery;
    const conf_cases_t *all = cases_of((int)loaded->kind);
    outcome_t *out = calloc(all->n, sizeof *out);
    const conf_case_t **run = calloc(all->n, sizeof *run);
    if (out == NULL || run == NULL) {
        free(out);
        free(run);
        return set_error(d, OUTBOX_ENOMEM, "%s", "out of memory");
    }
    size_t n = 0;
    for (size_t i = 0; i < all->n; i++)
        if (o->case_filter == NULL || strstr(all->v[i].test->name, o->case_filter) != NULL)
            out[n++].c = &all->v[i];
    FILE *tap = NULL;
    if (n == 0)
        rc = set_error(d, OUTBOX_EINVAL, "no case name contains \"%s\"", o->case_filter);
    /* Opened first, so a bad path costs nothing but the message. */
    else if (o->tap_file != NULL && (tap = fopen(o->tap_file, "w")) == NULL)
        rc = set_error(d, OUTBOX_EINVAL, "cannot write the TAP file %s", o->tap_file);
    else
        rc = b->init(o, d);
    if (rc != OUTBOX_OK) {
        if (tap != NULL)
            fclose(tap);
        free(out);
        free(run);
        return rc;
    }

    const outbox_driver_t *drv = conf_env.driver;
    if (o->verbosity >= 0)
        printf("conformance: %s driver %s %s (ABI %u.%u) on %s: %zu cases\n", b->kind, drv->name,
               drv->version ? drv->version : "", (unsigned)drv->abi_major,
               (unsigned)drv->abi_minor, conf_env.shown_uri, n);
    size_t n_run = 0;
    Suite *suite = build_suite(b, out, n, run, &n_run, o->verbosity);
    b->schedule(run, n_run);
    SRunner *sr = srunner_create(suite);
    /* Isolation is the point: never let CK_FORK=no share one process. */
    srunner_set_fork_status(sr, CK_FORK);
    /* Whatever stdio holds now would be flushed again by every child. */
    fflush(stdout);
    fflush(stderr);
    srunner_run_all(sr, o->verbosity < 0 ? CK_SILENT : o->verbosity > 0 ? CK_VERBOSE : CK_ENV);
    collect_results(sr, out, n);
    srunner_free(sr);

    char **unchecked = NULL;
    size_t n_unchecked = conf_unchecked_collect(&unchecked);
    outbox_conformance_counts_t counts = {0};
    for (size_t i = 0; i < n; i++) {
        if (out[i].skip != NULL)
            counts.skipped++;
        else if (out[i].passed)
            counts.passed++;
        else
            counts.failed++;
    }
    if (o->verbosity >= 0) {
        for (size_t i = 0; i < n; i++)
            if (out[i].skip == NULL && !out[i].ran)
                printf("conformance: %s: %s\n", out[i].c->test->name, out[i].detail);
        if (b->leftovers() > 0)
            printf("conformance: %u %s\n", b->leftovers(), b->leftover_text);
        for (size_t i = 0; i < n_unchecked; i++)
            printf("conformance: NOT CHECKED %s\n", unchecked[i]);
        printf("conformance: %u passed, %u failed, %u skipped\n", counts.passed, counts.failed,
               counts.skipped);
        if (n_unchecked > 0)
            printf("conformance: %zu checks inside the cases that ran could not run, for want of "
                   "the optional entries named above\n",
                   n_unchecked);
        fflush(stdout);
    }
    if (o->counts != NULL)
        *o->counts = counts;
    rc = OUTBOX_OK;
    if (tap != NULL) {
        write_tap(tap, out, n);
        for (size_t i = 0; i < n_unchecked; i++)
            fprintf(tap, "# NOT CHECKED %s\n", unchecked[i]);
        if (fclose(tap) != 0)
            rc = set_error(d, OUTBOX_EINVAL, "cannot write the TAP file %s", o->tap_file);
    }
    conf_unchecked_free(unchecked, n_unchecked);
    free(out);
    free(run);
    return rc != OUTBOX_OK ? rc : (int)counts.failed;
}
