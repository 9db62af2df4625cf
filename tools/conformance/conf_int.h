/* Conformance battery: what the runner and the case files share. Private
 * to tools/conformance; every symbol here is hidden in the library. */
#ifndef OUTBOX_CONF_INT_H
#define OUTBOX_CONF_INT_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox/conformance.h"
#include "outbox/outbox.h"

/* What a case needs from the driver; a case whose needs are not met is
 * skipped with the reason conf_need_reason() gives. */
enum conf_need {
    CONF_NEED_TX = 1u << 0,           /* OUTBOX_STORE_CAP_TRANSACTIONS */
    CONF_NEED_NATIVE = 1u << 1,       /* OUTBOX_STORE_CAP_NATIVE_TX + native_begin/native_end */
    CONF_NEED_HLC = 1u << 2,          /* the hlc column after schema apply */
    CONF_NEED_CHECKPOINT = 1u << 3,   /* the checkpoint table after schema apply */
    CONF_NEED_CONCURRENT = 1u << 4,   /* OUTBOX_STORE_CAP_CONCURRENT */
    CONF_NEED_STATS = 1u << 5,        /* the stats entry */
    CONF_NEED_REPLAY = 1u << 6,       /* the replay entry */
    CONF_NEED_SCHEMA_CHECK = 1u << 7, /* the schema_check entry */
    CONF_NEED_TRACEPARENT = 1u << 8,  /* the traceparent column after schema apply */
    CONF_NEED_PURGE = 1u << 9,        /* the purge entry */
    CONF_NEED_ROUTES = 1u << 10,      /* the routes entry (ABI 1.3) */
    CONF_NEED_DEAD_LIST = 1u << 11,   /* the dead_list entry (ABI 1.3) */
    CONF_NEED_RENEW = 1u << 12,       /* the renew entry (ABI 1.5) */
    CONF_NEED_INBOX = 1u << 13,       /* the inbox entries (ABI 1.7) and table after schema apply */
    CONF_NEED_DELAYED = 1u << 14,     /* OUTBOX_STORE_CAP_DELAYED (ABI 1.8) */
};

typedef struct conf_case {
    const TTest *test;     /* its name is the case name */
    unsigned needs;        /* enum conf_need */
    uint32_t schema_flags; /* OUTBOX_SCHEMA_* for the case's relation */
    double timeout_s;
} conf_case_t;

#define CONF_MAX_CASES 128

typedef struct conf_cases {
    conf_case_t v[CONF_MAX_CASES];
    size_t n;
} conf_cases_t;

void conf_add(conf_cases_t *c, const TTest *test, unsigned needs, uint32_t schema_flags,
              double timeout_s);

/* Each case file registers its cases, in the order they run. */
void conf_cases_stage(conf_cases_t *c);
void conf_cases_claim(conf_cases_t *c);
void conf_cases_settle(conf_cases_t *c);
void conf_cases_concurrency(conf_cases_t *c);
void conf_cases_checkpoint(conf_cases_t *c);
void conf_cases_admin(conf_cases_t *c);
void conf_cases_listing(conf_cases_t *c);
void conf_cases_inbox(conf_cases_t *c);
void conf_cases_delay(conf_cases_t *c);
void conf_cases_schema(conf_cases_t *c);
void conf_cases_sink(conf_cases_t *c);

/* The sink battery's fixture (sink_fixture.c); its cases' helpers are in
 * conf_sink.h. */
int conf_sink_init(const outbox_conformance_opts_t *o, outbox_diag_t *d);
const char *conf_sink_need_reason(unsigned needs);
void conf_sink_schedule(const conf_case_t *const *cases, size_t n);
void conf_sink_setup(void);
void conf_sink_teardown(void);
unsigned conf_sink_leftovers(void);

/* ------------------------------------------------- the run, set before fork */

typedef struct conf_env {
    const char *uri;
    char shown_uri[256];                 /* uri with its secrets masked, for messages */
    const char *driver_arg;              /* the driver's name or path as the user gave it */
    const outbox_driver_t *driver;       /* the driver under test, as the loader admitted it */
    uint32_t caps;                       /* per-handle capabilities with every schema flag applied */
    const conf_case_t *current;          /* the case whose relation is set up */
    char relation[64];                   /* conf_<pid>_<n> */
    char checkpoint_relation[80];        /* conf_<pid>_<n>_ckpt */
    char inbox_relation[80];             /* conf_<pid>_<n>_inbox */
    char setup_error[OUTBOX_MESSAGE_MAX]; /* non-empty: the relation could not be created */
    int unchecked_fd;                    /* where conf_unchecked() and conf_note() write, or -1 */
    double timeout_scale;                /* the run's timeout_scale, 1 when not given */
    /* Sinks: the case's destinations, and the broker's stop/start commands. */
    char destination[64];                /* conf_<pid>_<n> */
    char destination_b[72];              /* conf_<pid>_<n>_b */
    const char *broker_stop;
    const char *broker_start;
    const char *broker_pause;
    const char *broker_resume;
} conf_env_t;

extern conf_env_t conf_env;

/* 1 when the driver's vtable has the optional entry (and is large enough
 * to hold it). */
#define CONF_VT_HAS(vt, m) OUTBOX_ENTRY_HAS(outbox_store_vtable_t, vt, m)

/* --------------------------------------------------------------- fixture */

/* Loads the driver, registers the spy, probes capabilities. */
int conf_fixture_init(const char *driver, const char *uri, outbox_diag_t *d);
/* The cases about to run, in Check's order: each conf_fixture_setup()
 * takes the next one. */
void conf_fixture_schedule(const conf_case_t *const *cases, size_t n);
/* Check's unchecked fixtures, run in the runner process around each case
 * (one test per TCase): create the case's relation, then drop it, even
 * when the case crashed or timed out. */
void conf_fixture_setup(void);
void conf_fixture_teardown(void);
/* Relations left behind because the driver has no schema_drop. */
unsigned conf_fixture_leftovers(void);
/* Why the needs are not met, or NULL when they are. */
const char *conf_need_reason(unsigned needs);

/* A handle on the case's relation; fails the case when it cannot open. */
outbox_store_t *conf_open(void);
/* The same, also returning the driver's own handle (for the optional
 * entries the application API does not wrap: native_begin/native_end). */
outbox_store_t *conf_open_raw(void **driver_handle);
/* The application's transaction through the driver's own handle h (from
 * conf_open_raw): native_begin's native handle, and native_end committing
 * or rolling it back; either fails the case when the driver refuses. */
void *conf_native_begin(void *h);
void conf_native_end(void *h, void *native, int commit);
/* A handle for another thread: returns NULL and fills d instead of
 * failing the case (only the main thread may fail it). */
outbox_store_t *conf_open_quiet(outbox_diag_t *d);

/* ------------------------------------------------------------- helpers */

int64_t conf_now_us(void);
/* The run's timeout_scale times Check's CK_TIMEOUT_MULTIPLIER (1 when
 * unset or not a number above 0): a case that gives up after a time of its
 * own scales it by the same factor as the case's timeout, for servers that
 * answer slowly. */
double conf_timeout_multiplier(void);
void conf_sleep_ms(int ms);

/* Event n's event_id: a valid UUID that encodes n, so rows read back say
 * which event they are. */
void conf_event_id(char buf[OUTBOX_UUID_STRLEN + 1], unsigned long n);
/* The n encoded in a row's event_id; fails the case when it has none. */
unsigned long conf_row_n(const outbox_row_t *r);
/* The same without failing: ULONG_MAX when the id was not ours. */
unsigned long conf_event_n(const char *event_id);

/* Stages events first .. first+count-1 in ONE call (one created_at),
 * optionally with an ordering key; returns the number staged. Fails the
 * case unless the call returns OUTBOX_OK. */
size_t conf_stage(outbox_store_t *s, void *native_tx, const char *route, unsigned long first,
                  size_t count, const char *key);
/* The same with stage options (delayed events). */
size_t conf_stage_with(outbox_store_t *s, const char *route, unsigned long first, size_t count,
                       const char *key, const outbox_stage_options_t *when);

/* A claimed row, copied out of the handle. */
typedef struct conf_row {
    char id[OUTBOX_UUID_STRLEN + 1];
    unsigned long n;
    char route[64];
    char key[64];
    int has_key;
    int32_t attempts;
    int64_t created_at;
    int64_t available_at;
    int64_t hlc;
    char last_error[128];
    int has_last_error;
} conf_row_t;

typedef struct conf_claim {
    conf_row_t *rows;
    size_t n;
    outbox_fence_t fence;
    /* The rows as the claim returned them, in the driver's memory: valid
     * until the next claim on the same handle (conf_claim_raw says whether
     * they still are). */
    const outbox_row_t *raw;
    outbox_store_t *store;
    unsigned long serial;
} conf_claim_t;

#define CONF_LONG_LEASE_US (INT64_C(600) * 1000000)

/* Claims and copies; fails the case unless OUTBOX_OK. Free with conf_claim_free. */
conf_claim_t conf_claim(outbox_store_t *s, const char *route, size_t limit, int64_t lease_us,
                        int hlc_order);
/* The same without failing: returns the code (threads use it). */
int conf_claim_quiet(outbox_store_t *s, const char *route, size_t limit, int64_t lease_us,
                     int hlc_order, conf_claim_t *out);
void conf_claim_free(conf_claim_t *c);
/* The claim's rows in the driver's memory while they are still valid (no
 * claim on its handle since), else NULL. */
const outbox_row_t *conf_claim_raw(const conf_claim_t *c);

/* Settles one row; returns outbox_store_settle's code, *applied = the item's applied. */
int conf_settle1(outbox_store_t *s, const outbox_fence_t *fence, const char *id, int kind,
                 int64_t available_at, const char *error, int *applied);
/* Settles every row of the claim with kind; fails the case unless all apply.
 * While the claim is the handle's last, the items point at the ids the
 * driver returned, as the relay's do, not at copies. */
void conf_settle_all(outbox_store_t *s, const conf_claim_t *c, int kind);

/* A check of the current case that could not run because the driver
 * lacks an optional entry (why says which): the case still passes on what
 * it did check, and the battery lists every such check at the end as NOT
 * CHECKED. Cases read states back another way first, and call this only
 * when no way is left. */
void conf_unchecked(const char *what, const char *why);
/* A check of the current case that this run could not exercise for any
 * other reason (why: the timing of the run, a sink that connects when it
 * opens): the battery lists it at the end as a note, which claims nothing
 * about the driver's entries. */
void conf_note(const char *what, const char *why);
/* Opens the channel both write to (the fixtures' init). */
void conf_unchecked_open(void);

/* One check a case left out, as the runner collects them. */
typedef struct conf_left_out {
    int entry_missing; /* 1: conf_unchecked(), 0: conf_note() */
    char *line;        /* "CASE: WHAT (WHY)", or "CASE: not exercised: WHAT (WHY)" */
} conf_left_out_t;

/* In the runner: the checks the cases left out, in the order they said
 * so; how many; and the channel's cleanup. */
size_t conf_unchecked_collect(conf_left_out_t **out);
void conf_unchecked_free(conf_left_out_t *v, size_t n);

/* Counts of route; fails the case unless OUTBOX_OK. */
outbox_stats_t conf_stats(outbox_store_t *s, const char *route);

/* outbox_store_stage/settle/... return code check with the store's message. */
#define conf_ok(s, expr)                                                                          \
    do {                                                                                          \
        int conf_rc_ = (expr);                                                                    \
        ck_assert_msg(conf_rc_ == OUTBOX_OK, "%s failed: %s (%s)", #expr,                          \
                      outbox_strerror(conf_rc_), outbox_store_message(s));                        \
    } while (0)

#endif
