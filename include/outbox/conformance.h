/* liboutbox conformance battery: the same Check cases against any store
 * driver, loaded through the real loader.
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
 * Not thread-safe: run one battery per process at a time. Output (Check's
 * report, one line per skipped case and a summary) goes to stdout.
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
    const char *driver;          /* required: store driver name ("sqlite") or module path */
    const char *uri;             /* required: a store the battery may create and drop relations in */
    const char *tap_file;        /* NULL = none; else TAP 13, one line per case, skips as "# SKIP" */
    const char *case_filter;     /* NULL = every case; else only cases whose name contains it */
    int verbosity;               /* < 0 silent; 0 failures and summary (Check's CK_VERBOSITY
                                    may ask for more); > 0 every case */
    outbox_diag_t *diag;         /* OUT, may be NULL: why the battery could not start */
    outbox_conformance_counts_t *counts; /* OUT, may be NULL */
} outbox_conformance_opts_t;

/* Runs the battery. Returns the number of failed cases (0 = every case
 * that ran passed), or a negative OUTBOX_E* code when it could not start:
 * bad options, a driver that does not load or is not a store driver, a URI
 * it cannot open, a driver without schema_apply, or a filter that matches
 * no case. */
OUTBOX_CONFORMANCE_API int outbox_conformance_run(const outbox_conformance_opts_t *o);

/* The name of case i, in the order the battery runs them; NULL past the
 * last. Names are static strings, usable as case_filter. */
OUTBOX_CONFORMANCE_API const char *outbox_conformance_case_name(size_t i);

#ifdef __cplusplus
}
#endif
#endif
