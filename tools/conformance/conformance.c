/* Conformance battery: choosing the cases, running them with Check, and
 * reporting in lines of its own (a case each, what was left out, a
 * summary) and TAP. Check itself runs silent: its report names the
 * battery's source files, which a driver's author does not have. */
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
        conf_cases_inbox(&store_cases);
        conf_cases_delay(&store_cases);
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
    char detail[OUTBOX_MESSAGE_MAX]; /* why it failed, on one line */
} outcome_t;

/* The run under way. The teardown around each case reports what Check
 * gathered since the last one, so a long battery shows every case as it
 * ends; one battery per process, as the header says. */
typedef struct live_run {
    SRunner *sr;
    const battery_t *b;
    outcome_t *out;
    size_t n;
    int verbosity;
    int reported; /* Check's results already reported */
} live_run_t;
static live_run_t live;

static int set_error(outbox_diag_t *d, int code, const char *fmt, const char *arg)
{
    d->code = code;
    snprintf(d->message, sizeof d->message, fmt, arg);
    return code;
}

/* Why a case failed, on one line: its own message, not Check's
 * file:line, which points into the battery's sources (for every case
 * that fails in a shared helper, the same line of that helper). */
static void result_detail(TestResult *tr, const conf_case_t *c, char *out, size_t size)
{
    const char *msg = tr_msg(tr) != NULL && tr_msg(tr)[0] != '\0' ? tr_msg(tr) : "no message";
    /* Check's words when its timer fires; which timeout it was helps more. */
    if (tr_rtype(tr) == CK_ERROR && strcmp(msg, "Test timeout expired") == 0)
        snprintf(out, size,
                 "did not finish within its timeout of %g s (a hang, or a server too slow for "
                 "it: scale the timeouts)",
                 c->timeout_s * conf_timeout_multiplier());
    else
        snprintf(out, size, "%s", msg);
    for (char *p = out; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
}

static outcome_t *outcome_named(const char *name)
{
    for (size_t i = 0; i < live.n; i++)
        if (live.out[i].skip == NULL && strcmp(live.out[i].c->test->name, name) == 0)
            return &live.out[i];
    return NULL;
}

static void report_new_results(void)
{
    int count = srunner_ntests_run(live.sr);
    if (count <= live.reported)
        return;
    TestResult **results = srunner_results(live.sr);
    for (int r = live.reported; results != NULL && r < count; r++) {
        outcome_t *o = outcome_named(tr_tcname(results[r]));
        if (o == NULL)
            continue;
        o->ran = 1;
        o->passed = tr_rtype(results[r]) == CK_PASS;
        if (!o->passed) {
            result_detail(results[r], o->c, o->detail, sizeof o->detail);
            if (live.verbosity >= 0)
                printf("conformance: FAIL %s: %s\n", o->c->test->name, o->detail);
        } else if (live.verbosity > 0) {
            printf("conformance: PASS %s\n", o->c->test->name);
        }
    }
    live.reported = results != NULL ? count : live.reported;
    free(results);
    /* The next case forks: what stdio holds would be written twice. */
    fflush(stdout);
}

/* Check has the case's result by the time it runs the unchecked teardown
 * (in this process, after the fork); the fixture's own teardown follows,
 * so its messages come after the case's line. */
static void case_teardown(void)
{
    report_new_results();
    live.b->teardown();
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

/* Check's timer takes seconds as a double and casts them to time_t; the
 * bound keeps every case's timeout far inside that. */
#define MAX_TIMEOUT_SCALE 1000.0

static int check_opts(const outbox_conformance_opts_t *o, outbox_diag_t *d)
{
    if (o->driver == NULL || o->driver[0] == '\0')
        return set_error(d, OUTBOX_EINVAL, "%s", "no driver given");
    if (o->uri == NULL || o->uri[0] == '\0')
        return set_error(d, OUTBOX_EINVAL, "%s", "no URI given");
    /* Written so that NaN fails too. */
    if (!(o->timeout_scale >= 0 && o->timeout_scale <= MAX_TIMEOUT_SCALE))
        return set_error(d, OUTBOX_EINVAL, "%s",
                         "timeout_scale must be above 0 and at most 1000 (0 means 1)");
    return OUTBOX_OK;
}

/* Builds one TCase per case that runs: each gets its own relation (the
 * unchecked fixtures run in this process, around the fork), its own
 * timeout and its own line in the results. */
static Suite *build_suite(const battery_t *b, outcome_t *out, size_t n, const conf_case_t **run,
                          size_t *n_run, int verbosity, double scale)
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
        tcase_add_unchecked_fixture(tc, b->setup, case_teardown);
        /* Check multiplies by CK_TIMEOUT_MULTIPLIER itself. */
        tcase_set_timeout(tc, out[i].c->timeout_s * scale);
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
    OPT(timeout_scale);
    OPT(broker_pause);
    OPT(broker_resume);
}
#undef OPT

/* The verbosity asked for; Check's own variable still asks for every case,
 * as it did when Check printed the report. */
static int verbosity_of(const outbox_conformance_opts_t *o)
{
    const char *env = getenv("CK_VERBOSITY");
    if (o->verbosity == 0 && env != NULL && strcmp(env, "verbose") == 0)
        return 1;
    return o->verbosity;
}

/* What the cases left out, after the cases: first the checks an optional
 * entry would have allowed, then the notes that blame no entry. */
static void print_left_out(FILE *f, const char *prefix, const conf_left_out_t *left, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (left[i].entry_missing)
            fprintf(f, "%sNOT CHECKED %s\n", prefix, left[i].line);
    for (size_t i = 0; i < n; i++)
        if (!left[i].entry_missing)
            fprintf(f, "%snote %s\n", prefix, left[i].line);
}

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
    const double scale = o->timeout_scale > 0 ? o->timeout_scale : 1.0;
    const int verbosity = verbosity_of(o);

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
    /* The fixtures' init starts conf_env afresh; the children read it. */
    conf_env.timeout_scale = scale;

    const outbox_driver_t *drv = conf_env.driver;
    if (verbosity >= 0)
        printf("conformance: %s driver %s %s (ABI %u.%u) on %s: %zu cases\n", b->kind, drv->name,
               drv->version ? drv->version : "", (unsigned)drv->abi_major,
               (unsigned)drv->abi_minor, conf_env.shown_uri, n);
    size_t n_run = 0;
    live.b = b;
    Suite *suite = build_suite(b, out, n, run, &n_run, verbosity, scale);
    b->schedule(run, n_run);
    SRunner *sr = srunner_create(suite);
    /* Isolation is the point: never let CK_FORK=no share one process. */
    srunner_set_fork_status(sr, CK_FORK);
    live.sr = sr;
    live.out = out;
    live.n = n;
    live.verbosity = verbosity;
    live.reported = 0;
    /* Whatever stdio holds now would be flushed again by every child. */
    fflush(stdout);
    fflush(stderr);
    srunner_run_all(sr, CK_SILENT);
    /* Results no teardown reported (none, as Check runs today). */
    report_new_results();
    srunner_free(sr);
    live.sr = NULL;
    for (size_t i = 0; i < n; i++)
        if (out[i].skip == NULL && !out[i].ran)
            snprintf(out[i].detail, sizeof out[i].detail,
                     "the case did not run (is CK_RUN_CASE or CK_RUN_SUITE set?)");

    conf_left_out_t *left = NULL;
    size_t n_left = conf_unchecked_collect(&left);
    size_t n_unchecked = 0;
    for (size_t i = 0; i < n_left; i++)
        n_unchecked += left[i].entry_missing != 0;
    outbox_conformance_counts_t counts = {0};
    for (size_t i = 0; i < n; i++) {
        if (out[i].skip != NULL)
            counts.skipped++;
        else if (out[i].passed)
            counts.passed++;
        else
            counts.failed++;
    }
    if (verbosity >= 0) {
        for (size_t i = 0; i < n; i++)
            if (out[i].skip == NULL && !out[i].ran)
                printf("conformance: FAIL %s: %s\n", out[i].c->test->name, out[i].detail);
        if (b->leftovers() > 0)
            printf("conformance: %u %s\n", b->leftovers(), b->leftover_text);
        print_left_out(stdout, "conformance: ", left, n_left);
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
        print_left_out(tap, "# ", left, n_left);
        if (fclose(tap) != 0)
            rc = set_error(d, OUTBOX_EINVAL, "cannot write the TAP file %s", o->tap_file);
    }
    conf_unchecked_free(left, n_left);
    live = (live_run_t){0};
    free(out);
    free(run);
    return rc != OUTBOX_OK ? rc : (int)counts.failed;
}
