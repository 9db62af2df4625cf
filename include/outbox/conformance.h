/* liboutbox conformance battery: the same Check cases against any store
 * driver, or any sink driver, loaded through the real loader. The driver's
 * kind chooses the battery.
 *
 * Link with liboutbox-conformance (pkg-config: liboutbox-conformance).
 * The `outbox conformance` command is a thin front end to this call.
 *
 * Each case runs in its own forked process (Check fork mode) with a
 * timeout, on a fresh relation named conf_<pid>_<n> (and its checkpoint
 * relation conf_<pid>_<n>_ckpt) that the battery creates with the
 * driver's schema_apply and drops afterwards with its schema_drop when it
 * has one. A case that the driver's capabilities exclude is skipped with
 * the reason printed, and counted as skipped, never as passed.
 *
 * A sink driver gets the sink cases (named sink_*): each publishes to
 * destinations of its own, conf_<pid>_<n> and conf_<pid>_<n>_b, created
 * and dropped with the driver's destination_create/destination_drop when
 * it has them, and reads back what arrived with the driver's reader. The
 * cases that stop the broker run only when broker_stop and broker_start
 * are given; the breaker case also needs the sqlite store driver.
 *
 * Not thread-safe: run one battery per process at a time. Output goes to
 * stdout, a line per item, each starting "conformance: ": a header naming
 * the driver and the URI (secrets masked); "SKIP CASE: why" for a case the
 * capabilities exclude; "FAIL CASE: what it checked and saw" as each
 * failed case ends (never a path of the battery's sources), and
 * "PASS CASE" for each passed one when verbosity > 0; then
 * "NOT CHECKED CASE: WHAT (WHY)" for a check left out for want of an
 * optional entry, "note CASE: not exercised: WHAT (WHY)" for one this run
 * could not exercise for another reason (timing, a sink that connects
 * when it opens), and the summary "N passed, N failed, N skipped".
 */
#ifndef OUTBOX_CONFORMANCE_H
#define OUTBOX_CONFORMANCE_H

#include <stddef.h>
#include <stdint.h>

#include "outbox/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(OUTBOX_BUILDING_CONFORMANCE)
#define OUTBOX_CONFORMANCE_API __attribute__((visibility("default")))
#else
#define OUTBOX_CONFORMANCE_API
#endif

/* How many cases passed, failed (a failed assertion, a crash or a
 * timeout) and were skipped. */
typedef struct outbox_conformance_counts {
    unsigned passed;
    unsigned failed;
    unsigned skipped;
} outbox_conformance_counts_t;

typedef struct outbox_conformance_opts {
    uint32_t struct_size;        /* sizeof(outbox_conformance_opts_t) */
    const char *driver;          /* required: driver name ("sqlite", "nats") or module path */
    const char *uri;             /* required: a store the battery may create and drop relations
                                    in, or a broker it may create and drop destinations on */
    const char *tap_file;        /* NULL = none; else TAP 13, one line per case, skips as "# SKIP" */
    const char *case_filter;     /* NULL = every case; else only cases whose name contains it */
    int verbosity;               /* < 0 silent; 0 failed and skipped cases, what was left
                                    out, and the summary (CK_VERBOSITY=verbose in the
                                    environment counts as 1); > 0 also a line per passed
                                    case */
    outbox_diag_t *diag;         /* OUT, may be NULL: why the battery could not start */
    outbox_conformance_counts_t *counts; /* OUT, may be NULL */
    /* Sinks only: shell commands that stop the broker (it must refuse
     * connections once the command returns) and start it again with its
     * data (ready once the command returns). NULL: the cases that need
     * them are skipped. */
    const char *broker_stop;
    const char *broker_start;
    /* Every case's timeout, and the waits inside cases that scale with it,
     * times this, for a slow server: above 0 and at most 1000; 0 (and a
     * caller built before this member) means 1. Check's
     * CK_TIMEOUT_MULTIPLIER still applies on top. */
    double timeout_scale;
    /* Sinks only: shell commands that pause the broker (it keeps its
     * connections but answers nothing, as under SIGSTOP) and resume it
     * (it then answers what it was sent). NULL, or a caller built before
     * these members: the cases that need them are skipped. */
    const char *broker_pause;
    const char *broker_resume;
} outbox_conformance_opts_t;

/* Runs the battery. Returns the number of failed cases (0 = every case
 * that ran passed), or a negative OUTBOX_E* code when it could not start:
 * bad options (a timeout_scale out of range), a driver that does not load, a URI it cannot open, a store
 * driver without schema_apply, a sink driver without a reader, or a filter
 * that matches no case. */
OUTBOX_CONFORMANCE_API int outbox_conformance_run(const outbox_conformance_opts_t *o);

/* The name of case i: the store cases in the order the battery runs
 * them, then the sink cases (sink_*); NULL past the last. Names are
 * static strings, usable as case_filter. */
OUTBOX_CONFORMANCE_API const char *outbox_conformance_case_name(size_t i);

#ifdef __cplusplus
}
#endif
#endif
