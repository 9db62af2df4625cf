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

typedef struct bench_opts {
    const char *store;    /* store URI */
    const char *relation; /* the relay's relation; the ceiling uses <relation>_ceiling */
    const char *sink;     /* sink URI (throughput mode) */
    long events;
    long keys;
    long batch;
    long workers;
    long repeat;  /* rounds of relay + ceiling; medians are reported */
    int quick;
    int latency;
    double rate;         /* events per second (latency mode) */
    int64_t duration_us; /* how long the producer runs (latency mode) */
    int64_t poll_us;     /* the relay's poll interval; also the idle wait of workers */
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

/* What the benchmark needs from a store beyond the application API:
 * recreate a relation, copy a backlog, count, and the bare-SQL ceiling.
 *
 * SQLite (ceiling_sqlite.c). Every function returns 0 or fills err (one
 * line, no prefix) and returns BENCH_EXIT_FAIL or BENCH_EXIT_USAGE. */
typedef struct bsq bsq_t;

int bsq_open(const char *uri, bsq_t **out, char *err, size_t errlen);
void bsq_close(bsq_t *b);
/* Drops relation when an earlier run of outbox-bench created it; refuses a
 * table that it did not create. Then remembers it as the bench's own. */
int bsq_claim_relation(bsq_t *b, const char *relation, char *err, size_t errlen);
/* Drops relation and forgets it. */
int bsq_drop_relation(bsq_t *b, const char *relation, char *err, size_t errlen);
/* Copies every row of from into the empty table to, in rowid order. */
int bsq_copy(bsq_t *b, const char *from, const char *to, char *err, size_t errlen);
/* Rows of relation whose status is st. */
int bsq_count(bsq_t *b, const char *relation, const char *st, long *count, char *err,
              size_t errlen);
/* Empties the WAL into the database so that every drain starts alike. */
int bsq_checkpoint(bsq_t *b, char *err, size_t errlen);

/* Checks that the driver still runs the statements the ceiling copies:
 * bsq_trace_start() before opening the store and running a relay over a
 * few rows of relation, bsq_trace_check() after closing it. *verified = 0
 * when the driver's statements could not be observed (a driver linked to
 * another copy of SQLite); an error when they differ from the copy. */
void bsq_trace_start(void);
int bsq_trace_check(const char *relation, int *verified, char *err, size_t errlen);

/* The bare claim + mark-published loop of the SQLite driver on relation,
 * with workers connections, until events rows are published. */
typedef struct bench_drain {
    double seconds;
    double cpu_s;
} bench_drain_t;

int bsq_ceiling(bsq_t *b, const char *relation, long batch, long workers, long events,
                int64_t poll_us, bench_drain_t *out, char *err, size_t errlen);

/* --------------------------------------------------------------- modes */

int bench_throughput(const bench_opts_t *o);
int bench_latency(const bench_opts_t *o);

/* Shared by both modes: recreate relation with the canonical schema on the
 * store (through outbox_schema_apply). */
int bench_schema_apply(const char *store_uri, const char *relation, char *err, size_t errlen);

#endif
