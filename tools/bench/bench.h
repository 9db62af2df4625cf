/* outbox-bench: what its source files share. */
#ifndef OUTBOX_BENCH_H
#define OUTBOX_BENCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <outbox/ceiling.h>
#include <outbox/outbox.h>

/* The route every benchmark stages on and relays. */
#define BENCH_ROUTE "bench"

/* Exit statuses: 0 done, 1 the run failed, 2 bad input. */
enum { BENCH_EXIT_OK = 0, BENCH_EXIT_FAIL = 1, BENCH_EXIT_USAGE = 2 };

typedef struct bench_msgs bench_msgs_t;

/* --table: which indexes the relay's tables have. */
enum bench_table {
    BENCH_TABLE_SHIPPED,   /* the schema the driver's schema apply creates */
    BENCH_TABLE_TWO_INDEX, /* only the canonical table's: the shipped schema without its
                              partial indexes */
    BENCH_TABLE_BOTH,      /* each round drains a copy of each, in turns */
};

typedef struct bench_opts {
    /* The store's ceiling (outbox/ceiling.h, beside its driver), chosen by
     * the store URI's scheme; NULL when none is built in (then no_ceiling
     * is set). */
    const outbox_store_ceiling_t *ceiling;
    const char *store;    /* store URI */
    const char *driver;   /* --driver: store driver name or module path; NULL = by scheme */
    int no_ceiling;       /* throughput without a ceiling, through the public API alone */
    const char *relation; /* the relay's relation; the ceiling uses <relation>_ceiling */
    const char *sink;     /* sink URI (throughput and latency modes) */
    const char *destination; /* the relays' destination template; NULL = the relay's default */
    long events;
    long keys;
    long batch;
    long workers;
    long pipeline; /* --pipeline: batches each relay keeps in flight; 0 = the relay's default */
    long repeat;  /* rounds of relay + ceiling; medians are reported */
    int table;    /* enum bench_table (throughput mode) */
    int quick;
    int pgbench_script; /* print the PostgreSQL ceiling's script and exit */
    int latency;
    double rate;         /* events per second (latency mode) */
    long producers;      /* producer threads sharing the rate (latency mode) */
    int64_t duration_us; /* how long the producer runs (latency mode) */
    int64_t poll_us;     /* the relay's poll interval; also the idle wait of workers */
    int sustain;           /* sustained mode; duration_us is how long it runs */
    int64_t interval_us;   /* sustained mode: one line per interval (default 1 minute) */
    long events_per_round; /* sustained mode: events per producer transaction */
    int pg_autovacuum;     /* sustained mode: apply the recommended per-table autovacuum */
    int64_t purge_after_us; /* sustained mode: purge rows published longer ago (0: never) */
    const char *metrics_listen; /* --metrics: the relays run with outbox relay's metrics */
    const char *otlp_endpoint;  /* --otlp-endpoint: every batch traced, spans sent there */
} bench_opts_t;

/* ------------------------------------------------------------- util.c */

/* CLOCK_MONOTONIC in microseconds. */
int64_t bench_mono_us(void);
/* User + system CPU seconds of the whole process so far. */
double bench_cpu_s(void);
/* Core-seconds the whole machine has been busy (/proc/stat: every CPU's
 * time not idle or waiting on I/O), -1 when unknown. */
double bench_machine_busy_s(void);
/* The machine's online CPUs. */
long bench_ncpu(void);
/* The 1-minute load average (/proc/loadavg), -1 when unknown: the bench
 * reports it because other work on the machine moves every number. */
double bench_loadavg(void);
/* Peak resident set size of the process, in KiB. */
long bench_peak_rss_kb(void);
/* Writes s as a JSON string literal, quotes included, into out. */
void bench_json_str(char *out, size_t size, const char *s);
/* uri fit to print (outbox_uri_mask: passwords as ***), in a buffer of the
 * calling thread's that the next call reuses. */
const char *bench_uri_shown(const char *uri);
/* Fills buf with a JSON payload of about 200 bytes for event seq;
 * returns its length. buf holds at least BENCH_PAYLOAD_MAX bytes. */
#define BENCH_PAYLOAD_MAX 320
size_t bench_payload(char *buf, long seq);
/* A table of ceilings by URI scheme, ended by a NULL scheme, and the
 * entry for uri's scheme (case-insensitive; NULL when none). */
typedef struct bench_scheme {
    const char *scheme;
    const void *entry;
} bench_scheme_t;
const void *bench_scheme_find(const bench_scheme_t *table, const char *uri);
/* One of the bench's in-process sinks: its name, schemes and entries;
 * bench_sink_register makes its descriptor and registers it, once. */
typedef struct bench_sink {
    const char *name;
    const char *const *schemes;
    const outbox_sink_vtable_t *vt;
    outbox_driver_t driver_;
    int registered_;
} bench_sink_t;
int bench_sink_register(bench_sink_t *k, char *err, size_t errlen);
/* Registers (once) an in-process sink, scheme "benchok:", that accepts
 * every message: for runs whose deliveries must go nowhere. */
int bench_register_ok_sink(char *err, size_t errlen);
/* Prints "outbox-bench: <message>" on stderr, on one line, with the
 * secrets of the URIs it was given masked (tools/common/say.h). */
void bench_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ------------------------------------------------------------- json.c */

/* One JSON line, built in memory member by member and printed whole by
 * bench_json_print. Each call writes one member: its key (none for the
 * line's own object) and its value, numbers with the decimals given. */
typedef struct bench_json {
    FILE *f;    /* the line so far: a memory stream over buf and len */
    char *buf;
    size_t len;
    int comma;  /* a member is already in the innermost object */
    int failed; /* out of memory: nothing will be printed */
} bench_json_t;

void bench_json_open(bench_json_t *j, const char *key); /* '{'; key NULL for the line */
void bench_json_close(bench_json_t *j);                 /* '}' */
void bench_json_num(bench_json_t *j, const char *key, double v, int decimals);
void bench_json_int(bench_json_t *j, const char *key, long v);
void bench_json_null(bench_json_t *j, const char *key);
void bench_json_bool(bench_json_t *j, const char *key, int v);
/* s as a JSON string (bench_json_str: at most about 1000 bytes of it). */
void bench_json_text(bench_json_t *j, const char *key, const char *s);
/* json as it is: text that already is a JSON value. */
void bench_json_raw(bench_json_t *j, const char *key, const char *json);
/* An array of the n numbers of v. */
void bench_json_nums(bench_json_t *j, const char *key, const double *v, long n, int decimals);
/* The value when present, else null. */
void bench_json_num_or_null(bench_json_t *j, const char *key, int present, double v, int decimals);
void bench_json_nums_or_null(bench_json_t *j, const char *key, int present, const double *v,
                             long n, int decimals);
/* Prints the line and a newline on stdout, flushes it, and frees the
 * buffer; -1 (nothing printed) when memory ran out while building it. */
int bench_json_print(bench_json_t *j);

/* A starting gate: worker threads get ready (connect, prepare), then the
 * main thread opens the gate and starts the clock. */
typedef struct bench_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long ready;
    int state; /* 0 closed, 1 go, -1 abandon */
} bench_gate_t;

void bench_gate_init(bench_gate_t *g);
void bench_gate_destroy(bench_gate_t *g);
/* Worker side: report ready and wait; 1 = go, 0 = abandon the run. */
int bench_gate_wait(bench_gate_t *g);
/* Main side: wait for n workers to be ready, then let them go (go = 1) or
 * tell them to give up (go = 0). */
void bench_gate_open(bench_gate_t *g, long n, int go);

/* A team of worker threads behind one gate: started (each getting ready
 * before the clock), let go together, timed until the last one is joined.
 * Worker i runs fn(args + i * stride) and calls bench_gate_wait(&team->gate)
 * once ready. */
typedef struct bench_team {
    bench_gate_t gate;
    pthread_t *tid;
    long started;
} bench_team_t;

/* Starts n workers; 0, or BENCH_EXIT_FAIL with err when memory or a thread
 * could not be had (the started ones are still let go, to give up, by
 * bench_team_finish). */
int bench_team_start(bench_team_t *t, long n, void *(*fn)(void *), void *args, size_t stride,
                     char *err, size_t errlen);
/* Opens the gate (go = 0: the workers give up at once), times the run
 * from then until every worker has joined, and frees the team. */
void bench_team_finish(bench_team_t *t, int go, double *seconds, double *cpu_s);

/* What a worker does when its claim finds nothing while other workers still
 * hold the last rows: what a relay does (sleep its poll interval), cut short
 * once every row is published. A run stalls when no row at all has been
 * published for BENCH_STALL_US. */
#define BENCH_STALL_US (120 * 1000000LL)

typedef struct bench_idle {
    long last_total;
    int64_t last_change;
} bench_idle_t;

#define BENCH_IDLE_INIT {-1, 0}
/* Returns 1 when the run has stalled, else 0 after waiting. */
int bench_idle_wait(bench_idle_t *st, atomic_long *published, long events, int64_t poll_us);

/* ------------------------------------------------- the store under test */

/* What one drain took. */
typedef struct bench_drain {
    double seconds;
    double cpu_s; /* this process's CPU; for a ceiling run by a child (pgbench), the child's */
    long published;               /* relay drains: what the relays' counters say they published */
    const outbox_driver_t *driver; /* relay drains: the store driver that served them */
    /* Relay drains: the resident set when the drain started and its
     * high-water mark over the drain, which was reset to it first (KiB; -1
     * when /proc does not tell). */
    long rss_start_kb, rss_hwm_kb;
    /* CPUs the whole machine kept busy, on average, while the drain ran
     * (every process: the servers too); -1 when /proc does not tell. */
    double busy_cores;
} bench_drain_t;

/* The store's own ceiling (outbox/ceiling.h, beside its driver) also
 * serves the bench's own connection: it recreates relations, copies a
 * backlog and counts rows. Safety: the bench drops and recreates its
 * relations, so the ceiling records every relation it creates and refuses
 * to touch an existing table it did not create (ceiling_driver.c). */

/* The ceiling for a store URI, NULL when none is built in for it. */
const outbox_store_ceiling_t *bench_ceiling_for(const char *uri);
/* The bench's connection through c, the driver c was built with
 * registered first, so the relay the bench measures runs the same code. */
int bench_ceiling_open(const outbox_store_ceiling_t *c, const char *uri, void **db, char *err,
                       size_t errlen);
/* The ceiling's drain of relation (reference: the plainer reference claim
 * + mark), o->workers at o->batch until o->events rows are published. */
int bench_ceiling_drain(const bench_opts_t *o, void *db, const char *relation, int reference,
                        bench_drain_t *out, char *err, size_t errlen);
/* Recreates relation empty with the shipped schema (only the canonical
 * table's indexes when two_index) and fills it with a copy of the backlog
 * (relay.c). */
int bench_fresh_copy(const bench_opts_t *o, void *db, const char *backlog, const char *relation,
                     int two_index, char *err, size_t errlen);

/* --------------------------------------- what the relay will publish */

/* The messages the relay handed its sink for one copy of a backlog, in
 * the order it handed them (capture.c): every string points into blocks
 * of the set's own, which never move. */
struct bench_msgs {
    long n;
    outbox_message_t *m; /* without their rows */
    long cap_;
    struct block *blocks_;
};

/* Drains a fresh copy of backlog (in relation, dropped after) with one
 * relay into an in-process sink that keeps every message it is handed. */
int bench_capture_messages(const bench_opts_t *o, void *db, const char *backlog,
                           const char *relation, bench_msgs_t *out, char *err, size_t errlen);
void bench_msgs_free(bench_msgs_t *ms);

/* ----------------------------------------------- the producer ceilings */

/* The producer ceiling (outbox/ceiling.h, beside its sink driver) for a
 * sink URI's scheme, NULL when none is built in for it. */
const outbox_sink_ceiling_t *bench_producer_for(const char *sink_uri);
/* Registers the driver c was compiled with, before the bench opens the
 * sink, so that the relays publish through the same code. */
int bench_producer_register(const outbox_sink_ceiling_t *c, char *err, size_t errlen);
/* Sends every message of ms to destination (which the bench created)
 * through c, opened on o->sink before the clock, o->batch at a time, each
 * chunk acknowledged by the broker before the next, as the relay waits
 * before it marks rows. */
int bench_producer_drain(const bench_opts_t *o, const outbox_sink_ceiling_t *c,
                         bench_msgs_t *ms, const char *destination, bench_drain_t *out,
                         char *err, size_t errlen);

/* The process's resident set now and its high-water mark (KiB, from
 * /proc/self/status; -1 when unknown), and a reset of the mark to the
 * current resident set (/proc/self/clear_refs "5"; 0 when done). */
long bench_rss_kb(void);
long bench_hwm_kb(void);
int bench_hwm_reset(void);
/* The largest high-water mark a reset took away (0 before any). */
long bench_peak_before_resets_kb(void);

/* ----------------------------------------- a throughput run's result */

/* --repeat's upper bound: the rounds a result holds at most. */
#define BENCH_REPEAT_MAX 100

/* One round's numbers: rates in events per second, CPU in seconds. What
 * the round did not measure stays 0. */
typedef struct bench_round {
    double eps, cpu;    /* the relay's rate and CPU */
    double stage_eps;   /* staging's rate */
    double ceps, ccpu;  /* the store ceiling's rate and CPU */
    double ratio;       /* relay / store ceiling */
    double cpu_ratio;   /* ceiling CPU / relay CPU */
    double reps;        /* the reference's rate */
    double rratio;      /* relay / reference */
    double teps;        /* --table both: the relay's rate on the two-index copy */
    double tratio;      /* two-index / shipped */
    double peps, pcpu;  /* the producer ceiling's rate and CPU */
    double lratio;      /* relay / the lesser of the store and producer ceilings */
    double rbusy, cbusy, pbusy; /* CPUs the machine kept busy over the relay's, the store
                                   ceiling's and the producer ceiling's drains (-1 unknown) */
    double cbound;      /* the lesser ceiling's share the CPUs allow (-1 unknown) */
} bench_round_t;

/* A throughput run's result: what ran, its rounds, their medians. */
typedef struct bench_result {
    const bench_opts_t *o;
    const outbox_driver_t *driver; /* the store driver that served the relays */
    int no_ceiling_line;     /* no_ceiling.c's line: without the tables' and resources' keys */
    int has_ceiling;         /* the store ceiling ran (and the ratios to it mean something) */
    int has_reference;       /* the reference claim + mark ran */
    int ceiling_in_process;  /* the ceiling's CPU compares with the relay's */
    int verified;            /* the ceiling's copy of the driver's SQL was checked */
    int traced;              /* the store can observe the driver's SQL at run time */
    const char *producer;    /* the producer ceiling's client; NULL when none ran */
    long relay_hwm_kb, relay_growth_kb; /* the relay drains' resident set (-1 unknown) */
    long n;                  /* rounds in rounds[] */
    bench_round_t *rounds;
    bench_round_t med;       /* each number's median over the rounds */
} bench_result_t;

/* Fills res->med from res->rounds[0..n) and prints the result's JSON
 * line: 0, or BENCH_EXIT_FAIL (said) when memory ran out. */
int bench_result_report(bench_result_t *res);

/* --------------------------------------------------------------- modes */

int bench_throughput(const bench_opts_t *o);
/* Throughput of any store driver: no ceiling, no connection of the bench's
 * own, nothing but the public API (no_ceiling.c). */
int bench_throughput_no_ceiling(const bench_opts_t *o);
int bench_latency(const bench_opts_t *o);
int bench_sustain(const bench_opts_t *o);

/* Shared by both modes: recreate relation with the canonical schema on the
 * store (through outbox_schema_apply). */
int bench_schema_apply(const char *store_uri, const char *relation, char *err, size_t errlen);

/* Throughput mode's staging and relay drain (throughput.c), on route of
 * relation, through o->driver when set. Staging runs in transactions of
 * 10,000 events when the store has them, else each outbox_store_stage() call of
 * 1,000 is its own. */
int bench_stage_backlog(const bench_opts_t *o, const char *relation, const char *route,
                        double *seconds, char *err, size_t errlen);
int bench_relay_drain(const bench_opts_t *o, const char *relation, const char *route,
                      bench_drain_t *out, char *err, size_t errlen);

/* 1 when the store vtable has entry m (covered by its struct_size and set). */
#define BENCH_VT_HAS(vt, m) OUTBOX_ENTRY_HAS(outbox_store_vtable_t, vt, m)
/* The optional entries the throughput modes use that drv lacks, as a JSON
 * array of their names ("[]" when none) into out. */
void bench_missing_entries(const outbox_driver_t *drv, char *out, size_t size);

#endif
