/* outbox-bench: what its source files share. */
#ifndef OUTBOX_BENCH_H
#define OUTBOX_BENCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <outbox/outbox.h>

/* The route every benchmark stages on and relays. */
#define BENCH_ROUTE "bench"

/* Exit statuses: 0 done, 1 the run failed, 2 bad input. */
enum { BENCH_EXIT_OK = 0, BENCH_EXIT_FAIL = 1, BENCH_EXIT_USAGE = 2 };

struct bench_backend;

/* --table: which indexes the relay's tables have. */
enum bench_table {
    BENCH_TABLE_SHIPPED,   /* the schema the driver's schema apply creates */
    BENCH_TABLE_TWO_INDEX, /* only the canonical table's: the shipped schema without its
                              partial indexes */
    BENCH_TABLE_BOTH,      /* each round drains a copy of each, in turns */
};

typedef struct bench_opts {
    /* Chosen by the store URI's scheme; NULL when the bench has none for it
     * (then no_ceiling is set). */
    const struct bench_backend *backend;
    const char *store;    /* store URI */
    const char *driver;   /* --driver: store driver name or module path; NULL = by scheme */
    int no_ceiling;       /* throughput without a ceiling, through the public API alone */
    const char *relation; /* the relay's relation; the ceiling uses <relation>_ceiling */
    const char *sink;     /* sink URI (throughput mode) */
    long events;
    long keys;
    long batch;
    long workers;
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
} bench_opts_t;

/* ------------------------------------------------------------- util.c */

/* CLOCK_MONOTONIC in microseconds. */
int64_t bench_mono_us(void);
/* User + system CPU seconds of the whole process so far. */
double bench_cpu_s(void);
/* The 1-minute load average (/proc/loadavg), -1 when unknown: the bench
 * reports it because other work on the machine moves every number. */
double bench_loadavg(void);
/* Peak resident set size of the process, in KiB. */
long bench_peak_rss_kb(void);
/* Writes s as a JSON string literal, quotes included, into out. */
void bench_json_str(char *out, size_t size, const char *s);
/* Fills buf with a JSON payload of about 200 bytes for event seq;
 * returns its length. buf holds at least BENCH_PAYLOAD_MAX bytes. */
#define BENCH_PAYLOAD_MAX 320
size_t bench_payload(char *buf, long seq);
/* Registers (once) an in-process sink, scheme "benchok:", that accepts
 * every message: for runs whose deliveries must go nowhere. */
int bench_register_ok_sink(char *err, size_t errlen);
/* Prints "outbox-bench: <message>" on stderr. */
void bench_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

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
} bench_drain_t;

/* What the benchmark needs from a store beyond the application API: its
 * own connection to recreate relations, copy a backlog and count rows, and
 * the bare-SQL ceiling. Every function returns 0, or fills err (one line,
 * no prefix) and returns BENCH_EXIT_FAIL or BENCH_EXIT_USAGE.
 *
 * Safety: the bench drops and recreates its relations, so it records every
 * relation it creates in a table of its own (outbox_bench_relations) and
 * refuses to touch an existing table it did not create. */
typedef struct bench_backend {
    const char *name;
    /* 1 when the ceiling runs in this process, so its CPU time compares
     * with the relay's (SQLite); 0 when a server does the work (pgbench). */
    int ceiling_in_process;
    int (*open)(const char *uri, void **db, char *err, size_t errlen);
    void (*close)(void *db);
    /* Drops relation when an earlier run of outbox-bench created it;
     * refuses a table it did not create; remembers it as the bench's own. */
    int (*claim_relation)(void *db, const char *relation, char *err, size_t errlen);
    /* Drops relation (when the bench's own) and forgets it. */
    int (*drop_relation)(void *db, const char *relation, char *err, size_t errlen);
    /* Copies every row of from into the empty table to. */
    int (*copy)(void *db, const char *from, const char *to, char *err, size_t errlen);
    /* Rows of relation whose status is st. */
    int (*count)(void *db, const char *relation, const char *st, long *count, char *err,
                 size_t errlen);
    /* Brings the store to the same quiet state before every drain of
     * relation (SQLite: empty WAL; PostgreSQL: VACUUM ANALYZE, CHECKPOINT).
     * relation NULL: the whole store, after the run. */
    int (*quiesce)(void *db, const char *relation, char *err, size_t errlen);
    /* The driver's claim + mark-published SQL, driven bare on relation
     * with o->workers connections at o->batch, until o->events rows are
     * published. */
    int (*ceiling)(void *db, const bench_opts_t *o, const char *relation, bench_drain_t *out,
                   char *err, size_t errlen);
    /* Optional (NULL): a reference claim + mark, plainer than the driver's
     * (no per-key rule, lease takeover or fence), driven like the ceiling
     * on relation, for scale against numbers measured elsewhere. */
    int (*reference)(void *db, const bench_opts_t *o, const char *relation, bench_drain_t *out,
                     char *err, size_t errlen);
    /* Optional (NULL): check that the driver still runs the statements the
     * ceiling copies. trace_start() before opening a store and running a
     * relay over a few rows of relation, trace_check() after closing it.
     * *verified = 0 when the driver's statements could not be observed; an
     * error when they differ from the copy. */
    void (*trace_start)(void);
    int (*trace_check)(const char *relation, int *verified, char *err, size_t errlen);
    /* Optional (NULL: count() of pending rows, the rest -1): the pending
     * backlog and, from the server's statistics, dead and live tuples and
     * how often autovacuum has run on relation (sustained mode). */
    int (*stats)(void *db, const char *relation, long *pending, long *dead, long *live,
                 long *autovacuums, char *err, size_t errlen);
    /* Optional (NULL: --pg-autovacuum is refused): apply the per-table
     * autovacuum settings docs/performance.md recommends to relation. */
    int (*autovacuum)(void *db, const char *relation, char *err, size_t errlen);
    /* Optional (NULL: --table other than shipped is refused): drops the
     * indexes the shipped schema adds to the canonical table, leaving the
     * primary key, the unique (route, event_id) and the claim index. */
    int (*canonical_only)(void *db, const char *relation, char *err, size_t errlen);
} bench_backend_t;

/* The backend for a store URI, NULL when the bench has none for it. */
const bench_backend_t *bench_backend_for(const char *uri);

extern const bench_backend_t bench_sqlite_backend;
#ifdef OUTBOX_BENCH_POSTGRES
extern const bench_backend_t bench_postgres_backend;
/* The pgbench script of the PostgreSQL ceiling for relation and batch,
 * malloc'd; and of the reference claim + mark. */
char *bench_pg_script(const char *relation, long batch);
char *bench_pg_reference_script(const char *relation, long batch);
#endif

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
 * 10,000 events when the store has them, else each outbox_stage() call of
 * 1,000 is its own. */
int bench_stage_backlog(const bench_opts_t *o, const char *relation, const char *route,
                        double *seconds, char *err, size_t errlen);
int bench_relay_drain(const bench_opts_t *o, const char *relation, const char *route,
                      bench_drain_t *out, char *err, size_t errlen);

/* 1 when the store vtable has entry m (covered by its struct_size and set). */
#define BENCH_VT_HAS(vt, m)                                                                      \
    ((vt)->struct_size >= offsetof(outbox_store_vtable_t, m) + sizeof((vt)->m) && (vt)->m != NULL)
/* The optional entries the throughput modes use that drv lacks, as a JSON
 * array of their names ("[]" when none) into out. */
void bench_missing_entries(const outbox_driver_t *drv, char *out, size_t size);

#endif
