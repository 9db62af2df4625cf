/* outbox-bench: clocks, resource usage, JSON text, payloads. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "say.h"

int64_t bench_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

double bench_cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

double bench_machine_busy_s(void)
{
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[8] = {0};
    int got = 0;
    if (f) {
        got = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                     &v[4], &v[5], &v[6], &v[7]);
        fclose(f);
    }
    long tick = sysconf(_SC_CLK_TCK);
    if (got < 8 || tick <= 0)
        return -1;
    /* user nice system idle iowait irq softirq steal: all but idle and iowait. */
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)tick;
}

long bench_ncpu(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? n : 1;
}

double bench_loadavg(void)
{
    FILE *f = fopen("/proc/loadavg", "r");
    double v = -1;
    if (f) {
        if (fscanf(f, "%lf", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

long bench_peak_rss_kb(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    /* KiB on Linux. A reset of the high-water mark (bench_hwm_reset,
     * before each relay drain) lowers what the kernel reports, so the
     * marks it took away count too. */
    long peak = ru.ru_maxrss, hwm = bench_hwm_kb(), before = bench_peak_before_resets_kb();
    if (hwm > peak)
        peak = hwm;
    return before > peak ? before : peak;
}

void bench_json_str(char *out, size_t size, const char *s)
{
    size_t w = 0;
    if (size < 3) {
        if (size)
            out[0] = '\0';
        return;
    }
    out[w++] = '"';
    for (; s && *s && w + 8 < size; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[w++] = '\\';
            out[w++] = (char)c;
        } else if (c < 0x20) {
            w += (size_t)snprintf(out + w, size - w, "\\u%04x", c);
        } else {
            out[w++] = (char)c;
        }
    }
    out[w++] = '"';
    out[w] = '\0';
}

size_t bench_payload(char *buf, long seq)
{
    /* An order event of the usual shape; the note pads it to about 200 bytes. */
    int n = snprintf(buf, BENCH_PAYLOAD_MAX,
                     "{\"seq\":%ld,\"order_id\":\"ord-%010ld\",\"customer_id\":\"cus-%06ld\","
                     "\"amount_cents\":%ld,\"currency\":\"EUR\",\"status\":\"created\","
                     "\"items\":[{\"sku\":\"SKU-%05ld\",\"qty\":%ld}],\"note\":\"",
                     seq, seq, seq % 100000, 100 + seq % 99900, seq % 5000, 1 + seq % 4);
    while (n < 196 && n < BENCH_PAYLOAD_MAX - 4)
        buf[n++] = 'x';
    buf[n++] = '"';
    buf[n++] = '}';
    buf[n] = '\0';
    return (size_t)n;
}

void bench_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tool_vsay("outbox-bench", fmt, ap);
    va_end(ap);
}

void bench_gate_init(bench_gate_t *g)
{
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->ready = 0;
    g->state = 0;
}

void bench_gate_destroy(bench_gate_t *g)
{
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
}

int bench_gate_wait(bench_gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    g->ready++;
    pthread_cond_broadcast(&g->cv);
    while (g->state == 0)
        pthread_cond_wait(&g->cv, &g->mu);
    int go = g->state > 0;
    pthread_mutex_unlock(&g->mu);
    return go;
}

void bench_gate_open(bench_gate_t *g, long n, int go)
{
    pthread_mutex_lock(&g->mu);
    while (g->ready < n)
        pthread_cond_wait(&g->cv, &g->mu);
    g->state = go ? 1 : -1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

int bench_team_start(bench_team_t *t, long n, void *(*fn)(void *), void *args, size_t stride,
                     char *err, size_t errlen)
{
    bench_gate_init(&t->gate);
    t->started = 0;
    t->tid = calloc((size_t)n, sizeof *t->tid);
    if (!t->tid) {
        snprintf(err, errlen, "out of memory");
        return BENCH_EXIT_FAIL;
    }
    for (long i = 0; i < n; i++) {
        if (pthread_create(&t->tid[i], NULL, fn, (char *)args + (size_t)i * stride) != 0) {
            snprintf(err, errlen, "cannot start %ld threads", n);
            return BENCH_EXIT_FAIL;
        }
        t->started++;
    }
    return 0;
}

void bench_team_finish(bench_team_t *t, int go, double *seconds, double *cpu_s)
{
    bench_gate_open(&t->gate, t->started, go);
    double cpu0 = bench_cpu_s();
    int64_t t0 = bench_mono_us();
    for (long i = 0; i < t->started; i++)
        pthread_join(t->tid[i], NULL);
    *seconds = (double)(bench_mono_us() - t0) / 1e6;
    *cpu_s = bench_cpu_s() - cpu0;
    bench_gate_destroy(&t->gate);
    free(t->tid);
    t->tid = NULL;
}

int bench_idle_wait(bench_idle_t *st, atomic_long *published, long events, int64_t poll_us)
{
    int64_t now = bench_mono_us();
    long total = atomic_load(published);
    if (total != st->last_total) {
        st->last_total = total;
        st->last_change = now;
    } else if (now - st->last_change > BENCH_STALL_US) {
        return 1;
    }
    int64_t end = now + poll_us;
    while (atomic_load(published) < events && bench_mono_us() < end) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static int ok_open(const outbox_sink_open_t *p, void **h, outbox_diag_t *d)
{
    (void)p, (void)d;
    static char handle;
    *h = &handle;
    return OUTBOX_OK;
}

static void ok_close(void *h)
{
    (void)h;
}

static int ok_publish(void *h, const outbox_message_t *msgs, size_t n, outbox_publish_result_t *res,
                      outbox_diag_t *d)
{
    (void)h, (void)msgs, (void)d;
    for (size_t i = 0; i < n; i++)
        res[i].status = OUTBOX_PUBLISH_OK;
    return OUTBOX_OK;
}

static const outbox_sink_vtable_t ok_vt = {
    .struct_size = sizeof ok_vt, .open = ok_open, .close = ok_close, .publish = ok_publish};
static int inproc_init(const outbox_host_t *host, outbox_diag_t *d)
{
    (void)host, (void)d;
    return OUTBOX_OK;
}

int bench_sink_register(bench_sink_t *k, char *err, size_t errlen)
{
    if (k->registered_)
        return 0;
    k->driver_ = (outbox_driver_t){
        .struct_size = sizeof k->driver_,
        .abi_major = OUTBOX_ABI_MAJOR,
        .abi_minor = OUTBOX_ABI_MINOR,
        .kind = OUTBOX_DRIVER_SINK,
        .name = k->name,
        .version = "1",
        .schemes = k->schemes,
        .capabilities = OUTBOX_SINK_CAP_ORDERED,
        .init = inproc_init,
        .sink = k->vt,
    };
    outbox_diag_t d = {0};
    if (outbox_driver_register(&k->driver_, &d) != OUTBOX_OK) {
        snprintf(err, errlen, "registering the in-process sink %s: %s", k->name, d.message);
        return BENCH_EXIT_FAIL;
    }
    k->registered_ = 1;
    return 0;
}

static const char *const ok_schemes[] = {"benchok", NULL};
static bench_sink_t ok_sink = {.name = "bench-ok", .schemes = ok_schemes, .vt = &ok_vt};

int bench_register_ok_sink(char *err, size_t errlen)
{
    return bench_sink_register(&ok_sink, err, errlen);
}

void bench_missing_entries(const outbox_driver_t *drv, char *out, size_t size)
{
    static const char *const names[] = {"schema_apply", "begin", "commit", "rollback", "stats",
                                        "purge"};
    const outbox_store_vtable_t *vt = drv ? drv->store : NULL;
    const int has[] = {
        vt && BENCH_VT_HAS(vt, schema_apply), vt && BENCH_VT_HAS(vt, begin),
        vt && BENCH_VT_HAS(vt, commit),       vt && BENCH_VT_HAS(vt, rollback),
        vt && BENCH_VT_HAS(vt, stats),        vt && BENCH_VT_HAS(vt, purge),
    };
    size_t w = 0;
    if (size < 3) {
        if (size)
            out[0] = '\0';
        return;
    }
    out[w++] = '[';
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!has[i] && w + strlen(names[i]) + 4 < size)
            w += (size_t)snprintf(out + w, size - w, "%s\"%s\"", w > 1 ? "," : "", names[i]);
    out[w++] = ']';
    out[w] = '\0';
}

const char *bench_uri_shown(const char *uri)
{
    static _Thread_local char buf[512];
    return outbox_uri_mask(uri ? uri : "", buf, sizeof buf);
}

const void *bench_scheme_find(const bench_scheme_t *table, const char *uri)
{
    size_t n = strcspn(uri, ":");
    if (uri[n] != ':')
        return NULL;
    for (const bench_scheme_t *t = table; t->scheme; t++)
        if (strlen(t->scheme) == n && strncasecmp(uri, t->scheme, n) == 0)
            return t->entry;
    return NULL;
}
