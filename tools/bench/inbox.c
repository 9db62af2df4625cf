/* outbox-inbox-bench: what the inbox costs per message handled.
 *
 * Each of --threads threads opens its own store handle and calls
 * outbox_inbox_accept() as fast as it can for --seconds, each call on its
 * own (--mode own) or inside begin/commit of the handle (--mode tx: a
 * consumer's transaction holding one record). --dup-ratio of the calls
 * repeat an id the thread recorded before, as a redelivery would. The
 * result is one line: accepts per second and the latency of each call
 * (or transaction).
 *
 * It uses the application API alone, changes no schema (a store without
 * the inbox table is refused, with the command that makes it), records
 * under a consumer of its own (fresh for each run unless --consumer names
 * one that has no records), checks that exactly the distinct ids it
 * recorded came back new and are in the inbox, and purges them at the end.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <outbox/outbox.h>

#include "clock.h"
#include "say.h"
#include "secrets.h"

#define PROG "outbox-inbox-bench"

/* Exit statuses: 0 done, 1 the run failed, 2 bad input or a store that is
 * not ready (nothing was recorded). */
enum { EXIT_DONE = 0, EXIT_FAILED = 1, EXIT_USAGE = 2, EXIT_INTERRUPTED = 130 };

#define THREADS_MAX 256
#define SECONDS_MAX 3600.0
/* Transient failures in a row (busy, lock or serialization) after which a
 * thread gives up: the store is not merely contended. */
#define RETRIES_MAX 1000

static const char usage_text[] =
    "usage: " PROG " --store URI [options]\n"
    "\n"
    "Records distinct event ids in the store's inbox (outbox_inbox_accept) from\n"
    "--threads threads, each with its own store handle, for --seconds, and prints\n"
    "accepts per second with the latency of each. Then checks that every distinct\n"
    "id came back new exactly once and is in the inbox, and purges this run's\n"
    "records. The store must have the inbox table (outbox schema apply --inbox);\n"
    "the bench changes no schema.\n"
    "\n"
    "  --store URI        store to measure (sqlite:///path.db, postgresql://...,\n"
    "                     mongodb://HOST/DATABASE)\n"
    "  --relation NAME    the store's outbox relation (default outbox); the inbox\n"
    "                     table is the one beside it (outbox_inbox)\n"
    "  --threads N        threads, each with its own handle (default 1)\n"
    "  --seconds S        how long to run, e.g. 5 or 0.5 (default 5)\n"
    "  --mode own|tx      own: each accept is a statement of its own (default);\n"
    "                     tx: each accept inside begin/commit of the handle, a\n"
    "                     consumer's transaction with one record\n"
    "  --dup-ratio R      fraction of accepts, 0 to below 1, that repeat an id\n"
    "                     recorded before (default 0)\n"
    "  --consumer NAME    the consumer to record under; it must have no records\n"
    "                     (default: a fresh name for each run)\n"
    "  --json             one JSON line instead of the human one\n"
    "  --help             this text\n"
    "\n"
    "Exit status: 0 done, 1 the run failed (a store error, or a count that does\n"
    "not add up), 2 bad input or a store without what the run needs.\n";

/* ------------------------------------------------------------- messages */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One line on stderr, prefixed, with the secrets of --store masked (the
 * library's messages mask them already; this holds for any text the bench
 * itself puts together). */
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tool_vsay(PROG, fmt, ap);
    va_end(ap);
}

/* A failed store call: what the user must fix (a malformed URI or relation,
 * no such driver, a broken module) is bad input, the rest (a server that is
 * down, a disk error) a failed run. */
static int exit_for(int rc)
{
    return rc == OUTBOX_EINVAL || rc == OUTBOX_ENOTFOUND || rc == OUTBOX_EABI ? EXIT_USAGE
                                                                               : EXIT_FAILED;
}

/* ------------------------------------------------------------- options */

typedef enum { MODE_OWN, MODE_TX } run_mode_t;

typedef struct opts {
    const char *store;
    const char *relation;
    long threads;
    double seconds;
    run_mode_t mode;
    double dup_ratio;
    const char *consumer;
    int json;
} opts_t;

typedef enum { ARG_TEXT, ARG_THREADS, ARG_SECONDS, ARG_MODE, ARG_RATIO, ARG_FLAG, ARG_HELP } arg_kind_t;

typedef struct option {
    const char *name;
    arg_kind_t kind;
    size_t offset; /* of the member of opts_t it sets */
} option_t;

static const option_t options[] = {
    {"--store", ARG_TEXT, offsetof(opts_t, store)},
    {"--relation", ARG_TEXT, offsetof(opts_t, relation)},
    {"--threads", ARG_THREADS, offsetof(opts_t, threads)},
    {"--seconds", ARG_SECONDS, offsetof(opts_t, seconds)},
    {"--mode", ARG_MODE, offsetof(opts_t, mode)},
    {"--dup-ratio", ARG_RATIO, offsetof(opts_t, dup_ratio)},
    {"--consumer", ARG_TEXT, offsetof(opts_t, consumer)},
    {"--json", ARG_FLAG, offsetof(opts_t, json)},
    {"--help", ARG_HELP, 0},
};

/* A decimal number, all of text, finite. */
static int parse_number(const char *text, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (!*text || *end || errno || !isfinite(v))
        return 0;
    *out = v;
    return 1;
}

/* The value of one option into o; EXIT_DONE or EXIT_USAGE (said). */
static int set_option(const option_t *opt, const char *value, opts_t *o)
{
    void *dest = (char *)o + opt->offset;
    double v;
    switch (opt->kind) {
    case ARG_TEXT:
        if (!*value) {
            say("%s: empty value", opt->name);
            return EXIT_USAGE;
        }
        *(const char **)dest = value;
        return EXIT_DONE;
    case ARG_THREADS: {
        char *end = NULL;
        errno = 0;
        long n = strtol(value, &end, 10);
        if (!*value || *end || errno || n < 1 || n > THREADS_MAX) {
            say("%s: expected a whole number from 1 to %d, got \"%.64s\"", opt->name, THREADS_MAX,
                value);
            return EXIT_USAGE;
        }
        *(long *)dest = n;
        return EXIT_DONE;
    }
    case ARG_SECONDS:
        if (!parse_number(value, &v) || v <= 0 || v > SECONDS_MAX) {
            say("%s: expected a number of seconds above 0 and at most %.0f, got \"%.64s\"",
                opt->name, SECONDS_MAX, value);
            return EXIT_USAGE;
        }
        *(double *)dest = v;
        return EXIT_DONE;
    case ARG_RATIO:
        if (!parse_number(value, &v) || v < 0 || v >= 1) {
            say("%s: expected a fraction from 0 to below 1 (e.g. 0.5), got \"%.64s\"", opt->name,
                value);
            return EXIT_USAGE;
        }
        *(double *)dest = v;
        return EXIT_DONE;
    case ARG_MODE:
        if (strcmp(value, "own") == 0)
            *(run_mode_t *)dest = MODE_OWN;
        else if (strcmp(value, "tx") == 0)
            *(run_mode_t *)dest = MODE_TX;
        else {
            say("%s: expected own or tx, got \"%.64s\"", opt->name, value);
            return EXIT_USAGE;
        }
        return EXIT_DONE;
    case ARG_FLAG:
    case ARG_HELP:
        break;
    }
    return EXIT_DONE;
}

/* argv into o: EXIT_DONE, EXIT_USAGE (said), or -1 after --help. Takes
 * "--name value" and "--name=value". */
static int parse(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.threads = 1, .seconds = 5, .mode = MODE_OWN};
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *eq = strchr(arg, '=');
        size_t name_len = eq && strncmp(arg, "--", 2) == 0 ? (size_t)(eq - arg) : strlen(arg);
        const option_t *opt = NULL;
        for (size_t k = 0; k < sizeof options / sizeof options[0]; k++)
            if (strlen(options[k].name) == name_len && strncmp(options[k].name, arg, name_len) == 0)
                opt = &options[k];
        if (opt == NULL) {
            if (strncmp(arg, "-", 1) == 0)
                say("unknown option %.*s (try --help)", (int)(name_len > 64 ? 64 : name_len), arg);
            else
                say("unexpected argument \"%.64s\" (options start with --; try --help)", arg);
            return EXIT_USAGE;
        }
        if (opt->kind == ARG_HELP || opt->kind == ARG_FLAG) {
            if (arg[name_len] == '=') {
                say("%s takes no value", opt->name);
                return EXIT_USAGE;
            }
            if (opt->kind == ARG_HELP) {
                fputs(usage_text, stdout);
                return -1;
            }
            *(int *)((char *)o + opt->offset) = 1;
            continue;
        }
        const char *value;
        if (arg[name_len] == '=')
            value = arg + name_len + 1;
        else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
            value = argv[++i];
        else {
            say("%s needs a value", opt->name);
            return EXIT_USAGE;
        }
        if (opt->offset == offsetof(opts_t, store))
            tool_note_secrets(value);
        int rc = set_option(opt, value, o);
        if (rc != EXIT_DONE)
            return rc;
    }
    if (o->store == NULL) {
        say("--store is required (e.g. --store sqlite:///tmp/inbox-bench.db)");
        return EXIT_USAGE;
    }
    return EXIT_DONE;
}

/* ------------------------------------------------------------- latency */

/* A histogram of durations in nanoseconds: exact below 64, then 32
 * buckets per power of two (within about 3%). */
#define HIST_LINEAR 64
#define HIST_SUB 32
#define HIST_BUCKETS (HIST_LINEAR + (64 - 6) * HIST_SUB)

typedef struct hist {
    uint64_t n[HIST_BUCKETS];
    uint64_t count;
} hist_t;

static unsigned hist_index(uint64_t ns)
{
    if (ns < HIST_LINEAR)
        return (unsigned)ns;
    unsigned msb = 63u - (unsigned)__builtin_clzll(ns); /* >= 6 */
    unsigned sub = (unsigned)(ns >> (msb - 5)) & (HIST_SUB - 1);
    return HIST_LINEAR + (msb - 6) * HIST_SUB + sub;
}

/* The middle of bucket i. */
static double hist_value(unsigned i)
{
    if (i < HIST_LINEAR)
        return i;
    unsigned msb = (i - HIST_LINEAR) / HIST_SUB + 6, sub = (i - HIST_LINEAR) % HIST_SUB;
    double width = ldexp(1.0, (int)msb - 5);
    return ldexp(1.0, (int)msb) + sub * width + width / 2;
}

static void hist_add(hist_t *h, uint64_t ns)
{
    h->n[hist_index(ns)]++;
    h->count++;
}

static void hist_merge(hist_t *into, const hist_t *h)
{
    for (unsigned i = 0; i < HIST_BUCKETS; i++)
        into->n[i] += h->n[i];
    into->count += h->count;
}

/* The q-quantile (0 < q <= 1) in milliseconds; 0 when empty. */
static double hist_ms(const hist_t *h, double q)
{
    if (h->count == 0)
        return 0;
    uint64_t rank = (uint64_t)ceil(q * (double)h->count), seen = 0;
    if (rank == 0)
        rank = 1;
    for (unsigned i = 0; i < HIST_BUCKETS; i++) {
        seen += h->n[i];
        if (seen >= rank)
            return hist_value(i) / 1e6;
    }
    return hist_value(HIST_BUCKETS - 1) / 1e6;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------- workers */

/* Set by the main thread when the time is up, by a worker that failed, or
 * by SIGINT/SIGTERM; read by every worker between calls. */
static atomic_int g_stop;
static volatile sig_atomic_t g_interrupted;

static void on_signal(int sig)
{
    (void)sig;
    g_interrupted = 1;
    atomic_store(&g_stop, 1);
}

/* The start: every thread opens its handle before the clock starts. A
 * gate rather than a barrier, so that the main thread can open it for the
 * threads that did start when another could not be created. */
typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long arrived;
    int open;
} gate_t;

typedef struct run {
    const opts_t *o;
    const char *consumer;
    uint32_t salt; /* the first group of every id of this run */
    gate_t start;
} run_t;

/* A thread arrives and waits for the gate to open. */
static void gate_pass(gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    g->arrived++;
    pthread_cond_broadcast(&g->cv);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

/* The main thread waits for n arrivals, then opens the gate. */
static void gate_open(gate_t *g, long n)
{
    pthread_mutex_lock(&g->mu);
    while (g->arrived < n)
        pthread_cond_wait(&g->cv, &g->mu);
    g->open = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

typedef struct worker {
    pthread_t tid;
    unsigned index;
    run_t *run;
    /* Results, read by the main thread after the join. */
    int status;         /* EXIT_DONE, or what failed (err says it) */
    char err[OUTBOX_MESSAGE_MAX + 256];
    uint64_t distinct;  /* fresh ids accepted: ids 0..distinct-1 of this thread */
    uint64_t fresh_new; /* accepts of a fresh id that said new */
    uint64_t dup_new;   /* accepts of a repeated id that said new: wrong */
    uint64_t dup_seen;  /* accepts of a repeated id that said recorded before */
    uint64_t retries;
    hist_t lat;
    /* Private to the thread. */
    uint64_t rng;
    double dup_debt;
} worker_t;

/* Ids shaped like the UUIDs the outbox stamps on events (36 characters),
 * increasing within a thread as UUIDv7 do: which run, which thread, which
 * one. */
static void event_id(const worker_t *w, uint64_t n, char out[OUTBOX_UUID_STRLEN + 1])
{
    snprintf(out, OUTBOX_UUID_STRLEN + 1, "%08" PRIx32 "-%04x-7000-8000-%012" PRIx64, w->run->salt,
             w->index & 0xffffu, n & UINT64_C(0xffffffffffff));
}

static uint64_t next_random(worker_t *w)
{
    /* xorshift64*: enough to pick which old id a redelivery repeats. */
    w->rng ^= w->rng >> 12;
    w->rng ^= w->rng << 25;
    w->rng ^= w->rng >> 27;
    return w->rng * UINT64_C(2685821657736338717);
}

static int store_failed(outbox_store_t *s, int rc, char *why, size_t size)
{
    const char *msg = outbox_store_message(s);
    snprintf(why, size, "%s", *msg ? msg : outbox_strerror(rc));
    return rc;
}

/* One message handled: its accept alone, or begin, accept, commit. On a
 * failure why holds the store's message (a rollback's own would replace
 * it on the handle). */
static int handle_one(outbox_store_t *s, run_mode_t mode, const char *consumer, const char *id,
                      int *is_new, char *why, size_t size)
{
    if (mode == MODE_OWN) {
        int rc = outbox_inbox_accept(s, NULL, consumer, id, is_new);
        return rc == OUTBOX_OK ? rc : store_failed(s, rc, why, size);
    }
    int rc = outbox_store_begin(s);
    if (rc != OUTBOX_OK)
        return store_failed(s, rc, why, size);
    rc = outbox_inbox_accept(s, NULL, consumer, id, is_new);
    if (rc != OUTBOX_OK) {
        store_failed(s, rc, why, size);
        outbox_store_rollback(s);
        return rc;
    }
    rc = outbox_store_commit(s);
    return rc == OUTBOX_OK ? rc : store_failed(s, rc, why, size);
}

static void worker_fail(worker_t *w, int status, const char *what, const char *why)
{
    snprintf(w->err, sizeof w->err, "thread %u: %s: %s", w->index, what, why);
    w->status = status;
    atomic_store(&g_stop, 1);
}

static void work(worker_t *w, outbox_store_t *s)
{
    const opts_t *o = w->run->o;
    char id[OUTBOX_UUID_STRLEN + 1], why[OUTBOX_MESSAGE_MAX];
    while (!atomic_load_explicit(&g_stop, memory_order_relaxed)) {
        /* A repeat, dup_ratio of the time, once there is something to repeat. */
        int repeat = 0;
        uint64_t n = w->distinct;
        if (w->distinct > 0 && o->dup_ratio > 0) {
            w->dup_debt += o->dup_ratio;
            if (w->dup_debt >= 1) {
                w->dup_debt -= 1;
                repeat = 1;
                n = next_random(w) % w->distinct;
            }
        }
        event_id(w, n, id);
        unsigned tries = 0;
        /* A message's latency includes its retries. */
        uint64_t t0 = now_ns();
        for (;;) {
            int is_new = 0;
            int rc = handle_one(s, o->mode, w->run->consumer, id, &is_new, why, sizeof why);
            uint64_t t1 = now_ns();
            if (rc == OUTBOX_ETRANSIENT && ++tries < RETRIES_MAX) {
                w->retries++;
                if (atomic_load_explicit(&g_stop, memory_order_relaxed))
                    return;
                continue;
            }
            if (rc != OUTBOX_OK) {
                worker_fail(w, EXIT_FAILED,
                            o->mode == MODE_TX ? "inbox accept in a transaction" : "inbox accept",
                            why);
                return;
            }
            hist_add(&w->lat, t1 - t0);
            if (!repeat) {
                w->distinct++;
                w->fresh_new += is_new != 0;
            } else if (is_new) {
                w->dup_new++;
            } else {
                w->dup_seen++;
            }
            break;
        }
    }
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    const opts_t *o = w->run->o;
    outbox_store_options_t so = {.struct_size = sizeof so, .relation = o->relation};
    outbox_diag_t d = {0};
    outbox_store_t *s = NULL;
    int rc = outbox_store_open(o->store, &so, &s, &d);
    if (rc != OUTBOX_OK) {
        snprintf(w->err, sizeof w->err, "thread %u: cannot open the store: %s", w->index,
                 d.message[0] ? d.message : outbox_strerror(rc));
        w->status = exit_for(rc);
        atomic_store(&g_stop, 1);
    }
    /* Every thread opens before the clock starts; one that could not open
     * has set g_stop, and the others end at once. */
    gate_pass(&w->run->start);
    if (s != NULL) {
        work(w, s);
        outbox_store_close(s);
    }
    return NULL;
}

/* ------------------------------------------------------------- set-up */

/* The masked URI as one shell word for a command to copy. */
static void shell_uri(const char *uri, char *out, size_t size)
{
    char masked[512];
    outbox_uri_mask(uri, masked, sizeof masked);
    size_t n = 0;
    if (n + 1 < size)
        out[n++] = '\'';
    for (const char *c = masked; *c && n + 5 < size; c++) {
        if (*c == '\'') {
            memcpy(out + n, "'\\''", 4);
            n += 4;
        } else {
            out[n++] = *c;
        }
    }
    if (n + 1 < size)
        out[n++] = '\'';
    out[n] = '\0';
}

/* "outbox schema apply --store URI [--relation R] --inbox --yes-i-know" */
static void fix_command(const opts_t *o, char *out, size_t size)
{
    char uri[600];
    shell_uri(o->store, uri, sizeof uri);
    snprintf(out, size, "outbox schema apply --store %s%s%s --inbox --yes-i-know", uri,
             o->relation ? " --relation " : "", o->relation ? o->relation : "");
}

typedef struct consumer_count {
    const char *consumer;
    uint64_t records;
} consumer_count_t;

static int count_records(void *ctx, const char *consumer, uint64_t records, int64_t oldest_us,
                         int64_t newest_us)
{
    (void)oldest_us;
    (void)newest_us;
    consumer_count_t *c = ctx;
    if (strcmp(consumer, c->consumer) == 0)
        c->records += records;
    return 0;
}

/* The records of consumer in the inbox into *records; EXIT_DONE or what
 * failed (said, after what). */
static int records_of(outbox_store_t *s, const char *consumer, uint64_t *records, const char *what)
{
    consumer_count_t c = {.consumer = consumer};
    int rc = outbox_inbox_stats(s, consumer, count_records, &c);
    if (rc != OUTBOX_OK) {
        say("%s: %s", what, outbox_store_message(s));
        return exit_for(rc);
    }
    *records = c.records;
    return EXIT_DONE;
}

/* Opens the store and checks that it can take the run: the inbox table,
 * transactions for --mode tx, a consumer without records. */
static int open_checked(const opts_t *o, const char *consumer, outbox_store_t **out)
{
    outbox_store_options_t so = {.struct_size = sizeof so, .relation = o->relation};
    outbox_diag_t d = {0};
    outbox_store_t *s = NULL;
    char fix[800];
    int rc = outbox_store_open(o->store, &so, &s, &d);
    if (rc == OUTBOX_EMISSING) {
        fix_command(o, fix, sizeof fix);
        say("cannot open the store: %s: create it with `%s`", d.message, fix);
        return EXIT_USAGE;
    }
    if (rc != OUTBOX_OK) {
        say("cannot open the store: %s", d.message[0] ? d.message : outbox_strerror(rc));
        return rc == OUTBOX_ESCHEMA ? EXIT_USAGE : exit_for(rc);
    }
    const char *driver = outbox_store_driver(s)->name;
    uint32_t caps = outbox_store_capabilities(s);
    int ex = EXIT_DONE;
    if (!(caps & OUTBOX_STORE_CAP_INBOX)) {
        /* No table, or a driver without the inbox: the accept says which. */
        int is_new;
        rc = outbox_inbox_accept(s, NULL, consumer, "probe", &is_new);
        if (rc == OUTBOX_EMISSING) {
            fix_command(o, fix, sizeof fix);
            say("the store has no inbox table, and " PROG " changes no schema: create it with `%s`",
                fix);
        } else {
            say("%s", rc == OUTBOX_OK ? "the store does not declare the inbox"
                                      : outbox_store_message(s));
        }
        ex = EXIT_USAGE;
    } else if (o->mode == MODE_TX && !(caps & OUTBOX_STORE_CAP_TRANSACTIONS)) {
        say("--mode tx: the %s store has no transactions on this server; use --mode own", driver);
        ex = EXIT_USAGE;
    } else {
        uint64_t before = 0;
        ex = records_of(s, consumer, &before, "--consumer");
        if (ex == EXIT_DONE && before > 0) {
            say("--consumer %s has records in the inbox (%" PRIu64 "), and the bench purges its "
                "consumer's records at the end: name a consumer with none, or leave --consumer out",
                consumer, before);
            ex = EXIT_USAGE;
        }
    }
    if (ex != EXIT_DONE) {
        outbox_store_close(s);
        return ex;
    }
    *out = s;
    return EXIT_DONE;
}

/* ------------------------------------------------------------- output */

/* text as a JSON string body (the consumer: UTF-8 without control
 * characters, which the library checked). */
static void json_text(FILE *f, const char *text)
{
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(f, "\\u%04x", *c);
        else
            fputc(*c, f);
    }
}

/* A latency for people: three significant digits. */
static void fmt_ms(char *out, size_t size, double ms)
{
    if (ms >= 100)
        snprintf(out, size, "%.0f", ms);
    else
        snprintf(out, size, "%.3g", ms);
}

typedef struct totals {
    uint64_t distinct, fresh_new, dup_new, dup_seen, retries, accepts;
    hist_t lat;
    double seconds;
} totals_t;

static void report(const opts_t *o, const char *driver, const char *consumer, const totals_t *t)
{
    double rate = t->seconds > 0 ? (double)t->accepts / t->seconds : 0;
    double p50 = hist_ms(&t->lat, 0.50), p99 = hist_ms(&t->lat, 0.99);
    const char *mode = o->mode == MODE_TX ? "tx" : "own";
    if (o->json) {
        printf("{\"bench\":\"inbox\",\"store\":\"%s\",\"threads\":%ld,\"mode\":\"%s\","
               "\"dup_ratio\":%g,\"seconds\":%.3f,\"records_per_s\":%.1f,\"accepts\":%" PRIu64
               ",\"new\":%" PRIu64 ",\"duplicate\":%" PRIu64 ",\"retries\":%" PRIu64
               ",\"p50_ms\":%.4f,\"p99_ms\":%.4f,\"consumer\":\"",
               driver, o->threads, mode, o->dup_ratio, t->seconds, rate, t->accepts, t->fresh_new,
               t->dup_seen, t->retries, p50, p99);
        json_text(stdout, consumer);
        printf("\"}\n");
        return;
    }
    char a[32], b[32], dup[48] = "", retried[48] = "";
    fmt_ms(a, sizeof a, p50);
    fmt_ms(b, sizeof b, p99);
    if (o->dup_ratio > 0)
        snprintf(dup, sizeof dup, " dup-ratio=%g", o->dup_ratio);
    if (t->retries > 0)
        snprintf(retried, sizeof retried, ", retried %" PRIu64, t->retries);
    printf("inbox %s threads=%ld mode=%s%s: %.0f records/s (new %" PRIu64 ", duplicate %" PRIu64
           ", p50 %s ms, p99 %s ms%s)\n",
           driver, o->threads, mode, dup, rate, t->fresh_new, t->dup_seen, a, b, retried);
}

/* ------------------------------------------------------------- the run */

/* Sleeps until seconds have passed or g_stop is set. */
static void wait_run(double seconds)
{
    uint64_t end = now_ns() + (uint64_t)(seconds * 1e9);
    for (;;) {
        uint64_t now = now_ns();
        if (now >= end || atomic_load(&g_stop))
            return;
        uint64_t left = end - now, slice = left < 20000000u ? left : 20000000u;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)slice};
        nanosleep(&ts, NULL);
    }
}

/* Runs the workers; their sums into *t. EXIT_DONE or the first failure
 * (said). */
static int run_workers(const opts_t *o, const char *consumer, totals_t *t)
{
    run_t run = {.o = o, .consumer = consumer};
    char salt[OUTBOX_UUID_STRLEN + 1];
    outbox_uuid_v7(salt);
    /* The random tail of a UUIDv7, so that two runs under one --consumer
     * (after a purge) do not share ids either. */
    run.salt = (uint32_t)strtoul(salt + 28, NULL, 16);
    worker_t *w = calloc((size_t)o->threads, sizeof *w);
    if (w == NULL) {
        say("out of memory");
        return EXIT_FAILED;
    }
    pthread_mutex_init(&run.start.mu, NULL);
    pthread_cond_init(&run.start.cv, NULL);
    long started = 0;
    int ex = EXIT_DONE;
    for (; started < o->threads; started++) {
        w[started] = (worker_t){.index = (unsigned)started,
                                .run = &run,
                                .rng = UINT64_C(0x9e3779b97f4a7c15) * (uint64_t)(started + 1)};
        if (pthread_create(&w[started].tid, NULL, worker_main, &w[started]) != 0) {
            say("cannot start thread %ld of %ld", started + 1, o->threads);
            ex = EXIT_FAILED;
            /* The started ones end as soon as they pass the gate. */
            atomic_store(&g_stop, 1);
            break;
        }
    }
    gate_open(&run.start, started);
    uint64_t t0 = now_ns();
    if (ex == EXIT_DONE)
        wait_run(o->seconds);
    atomic_store(&g_stop, 1);
    for (long i = 0; i < started; i++)
        pthread_join(w[i].tid, NULL);
    uint64_t t1 = now_ns();
    pthread_cond_destroy(&run.start.cv);
    pthread_mutex_destroy(&run.start.mu);
    *t = (totals_t){.seconds = (double)(t1 - t0) / 1e9};
    for (long i = 0; i < started; i++) {
        if (w[i].status != EXIT_DONE && ex == EXIT_DONE) {
            say("%s", w[i].err);
            ex = w[i].status;
        }
        t->distinct += w[i].distinct;
        t->fresh_new += w[i].fresh_new;
        t->dup_new += w[i].dup_new;
        t->dup_seen += w[i].dup_seen;
        t->retries += w[i].retries;
        hist_merge(&t->lat, &w[i].lat);
    }
    t->accepts = t->lat.count;
    free(w);
    return ex;
}

/* What the inbox holds for consumer against what the run recorded, then
 * the purge of it. EXIT_DONE, or EXIT_FAILED (said). */
static int check_and_purge(outbox_store_t *s, const char *consumer, const totals_t *t, int check)
{
    int ex = EXIT_DONE;
    if (check) {
        if (t->fresh_new != t->distinct || t->dup_new != 0) {
            say("wrong answers from outbox_inbox_accept: %" PRIu64 " distinct ids recorded, %" PRIu64
                " of them said new (expected all), and %" PRIu64
                " repeats said new (expected none)",
                t->distinct, t->fresh_new, t->dup_new);
            ex = EXIT_FAILED;
        }
        uint64_t records = 0;
        int rex = records_of(s, consumer, &records, "inbox stats after the run");
        if (rex != EXIT_DONE) {
            ex = EXIT_FAILED;
        } else if (records != t->distinct) {
            say("the inbox holds %" PRIu64 " records of consumer %s, expected the %" PRIu64
                " distinct ids recorded",
                records, consumer, t->distinct);
            ex = EXIT_FAILED;
        }
    }
    /* Everything of this consumer, however the store's clock runs: a
     * day ahead of this one. */
    uint64_t purged = 0;
    int rc = outbox_inbox_purge(s, consumer, tool_wall_us() + INT64_C(86400000000), &purged);
    if (rc != OUTBOX_OK) {
        say("inbox purge left the records of consumer %s: %s", consumer, outbox_store_message(s));
        return EXIT_FAILED;
    }
    if (check && ex == EXIT_DONE && purged != t->distinct) {
        say("inbox purge of consumer %s deleted %" PRIu64 " records, expected %" PRIu64, consumer,
            purged, t->distinct);
        ex = EXIT_FAILED;
    }
    return ex;
}

int main(int argc, char **argv)
{
    opts_t o;
    int ex = parse(argc, argv, &o);
    if (ex != EXIT_DONE)
        return ex < 0 ? EXIT_DONE : ex;

    char fresh[64];
    const char *consumer = o.consumer;
    if (consumer == NULL) {
        char uuid[OUTBOX_UUID_STRLEN + 1];
        outbox_uuid_v7(uuid);
        snprintf(fresh, sizeof fresh, "inbox-bench-%s", uuid);
        consumer = fresh;
    }

    outbox_store_t *s = NULL;
    ex = open_checked(&o, consumer, &s);
    if (ex != EXIT_DONE)
        return ex;
    const char *driver = outbox_store_driver(s)->name;

    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    totals_t t;
    ex = run_workers(&o, consumer, &t);
    /* The counts are checked only on a run that ended as planned; the
     * records are purged whatever happened. */
    int cex = check_and_purge(s, consumer, &t, ex == EXIT_DONE && !g_interrupted);
    if (ex == EXIT_DONE)
        ex = cex;
    if (ex == EXIT_DONE && g_interrupted) {
        say("interrupted; this run's records were purged");
        ex = EXIT_INTERRUPTED;
    }
    if (ex == EXIT_DONE)
        report(&o, driver, consumer, &t);
    outbox_store_close(s);
    return ex;
}
