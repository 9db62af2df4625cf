/* Sink conformance battery: the fixture. Loads the sink, gives each case
 * two destinations of its own (created and dropped around it), and the
 * helpers the cases build and read messages with.
 *
 * Nothing of the driver runs in the runner process beyond loading it:
 * client libraries start threads (librdkafka, libnats), and the runner
 * forks every case. So the probe at start and the per-case create and drop
 * each run in a short-lived child of their own. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "conf_sink.h"

static uint32_t sink_caps;
static int have_destinations;       /* destination_create and destination_drop */
static int have_relay_store;        /* the sqlite store driver loads */
static const conf_case_t *const *sched;
static size_t sched_n, sched_i;
static unsigned leftovers;
static unsigned destination_seq;    /* never reset, as the store's relation_seq */

#define SINK_VT_HAS(vt, m) OUTBOX_ENTRY_HAS(outbox_sink_vtable_t, vt, m)

/* ------------------------------------------------------------ children */

/* Runs fn in a child with a deadline; returns its exit status (0 = it
 * succeeded) and what it wrote to msg. */
static int in_child(int (*fn)(void *ctx, char *msg, size_t size), void *ctx, int deadline_s,
                    char *msg, size_t size)
{
    int fds[2];
    msg[0] = '\0';
    if (pipe(fds) != 0) {
        snprintf(msg, size, "pipe failed");
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        snprintf(msg, size, "fork failed");
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        alarm((unsigned)deadline_s);
        char out[OUTBOX_MESSAGE_MAX] = "";
        int rc = fn(ctx, out, sizeof out);
        ssize_t w = write(fds[1], out, strlen(out));
        (void)w;
        _exit(rc == 0 ? 0 : 1);
    }
    close(fds[1]);
    size_t got = 0;
    for (ssize_t r; got + 1 < size && (r = read(fds[0], msg + got, size - 1 - got)) > 0;)
        got += (size_t)r;
    msg[got] = '\0';
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
    }
    if (WIFSIGNALED(status)) {
        if (msg[0] == '\0')
            snprintf(msg, size, "%s after %d s",
                     WTERMSIG(status) == SIGALRM ? "no answer" : "the child died", deadline_s);
        return -1;
    }
    return WEXITSTATUS(status);
}

static int probe_open(void *ctx, char *msg, size_t size)
{
    (void)ctx;
    int rc = 0;
    outbox_sink_t *k = conf_sink_open_uri(conf_env.uri, &rc, msg, size);
    if (k == NULL)
        return 1;
    outbox_sink_close(k);
    return 0;
}

typedef struct dest_job {
    int drop;
} dest_job_t;

static int destinations(void *ctx, char *msg, size_t size)
{
    const dest_job_t *job = ctx;
    int rc = 0;
    outbox_sink_t *k = conf_sink_open_uri(conf_env.uri, &rc, msg, size);
    if (k == NULL)
        return 1;
    const char *names[2] = {conf_env.destination, conf_env.destination_b};
    int bad = 0;
    for (int i = 0; i < 2 && !bad; i++) {
        rc = job->drop ? outbox_sink_destination_drop(k, names[i])
                       : outbox_sink_destination_create(k, names[i]);
        if (rc != OUTBOX_OK) {
            snprintf(msg, size, "%s %s: %s", job->drop ? "dropping" : "creating", names[i],
                     outbox_sink_message(k));
            bad = 1;
        }
    }
    outbox_sink_close(k);
    return bad;
}

/* ------------------------------------------------------------- fixture */

int conf_sink_init(const outbox_conformance_opts_t *o, outbox_diag_t *d)
{
    const outbox_driver_t *drv = NULL;
    memset(&conf_env, 0, sizeof conf_env);
    conf_env.unchecked_fd = -1;
    conf_env.uri = o->uri;
    conf_env.driver_arg = o->driver;
    conf_env.broker_stop = o->broker_stop && o->broker_stop[0] ? o->broker_stop : NULL;
    conf_env.broker_start = o->broker_start && o->broker_start[0] ? o->broker_start : NULL;
    conf_env.broker_pause = o->broker_pause && o->broker_pause[0] ? o->broker_pause : NULL;
    conf_env.broker_resume = o->broker_resume && o->broker_resume[0] ? o->broker_resume : NULL;
    outbox_uri_mask(o->uri, conf_env.shown_uri, sizeof conf_env.shown_uri);
    int rc = outbox_driver_load(o->driver, &drv, d);
    if (rc != OUTBOX_OK)
        return rc;
    conf_env.driver = drv;
    const outbox_sink_vtable_t *vt = drv->sink;
    if (!SINK_VT_HAS(vt, reader_open) || !SINK_VT_HAS(vt, reader_next)) {
        snprintf(d->message, sizeof d->message,
                 "the %s driver has no reader (reader_open, reader_next): the sink battery "
                 "reads back what it published with it",
                 drv->name);
        return d->code = OUTBOX_ENOTSUP;
    }
    if ((conf_env.broker_stop == NULL) != (conf_env.broker_start == NULL)) {
        snprintf(d->message, sizeof d->message,
                 "give both the broker's stop and start commands, or neither");
        return d->code = OUTBOX_EINVAL;
    }
    if ((conf_env.broker_pause == NULL) != (conf_env.broker_resume == NULL)) {
        snprintf(d->message, sizeof d->message,
                 "give both the broker's pause and resume commands, or neither");
        return d->code = OUTBOX_EINVAL;
    }
    sink_caps = drv->capabilities;
    have_destinations = SINK_VT_HAS(vt, destination_create) && SINK_VT_HAS(vt, destination_drop);
    const outbox_driver_t *sqlite = NULL;
    outbox_diag_t dd = {0};
    have_relay_store = outbox_driver_load("sqlite", &sqlite, &dd) == OUTBOX_OK &&
                       sqlite->kind == OUTBOX_DRIVER_STORE;

    char why[OUTBOX_MESSAGE_MAX];
    if (in_child(probe_open, NULL, 120, why, sizeof why) != 0) {
        snprintf(d->message, sizeof d->message, "cannot open %.120s with driver %.40s: %.300s",
                 conf_env.shown_uri, drv->name, why);
        return d->code = OUTBOX_EPERMANENT;
    }
    conf_unchecked_open();
    memset(d, 0, sizeof *d);
    return OUTBOX_OK;
}

const char *conf_sink_need_reason(unsigned needs)
{
    if ((needs & CONF_NEED_SINK_ORDERED) && !(sink_caps & OUTBOX_SINK_CAP_ORDERED))
        return "the sink does not keep a key's order within one call (no OUTBOX_SINK_CAP_ORDERED)";
    if ((needs & CONF_NEED_SINK_DEDUPE) && !(sink_caps & OUTBOX_SINK_CAP_DEDUPE))
        return "the broker has no dedupe id (no OUTBOX_SINK_CAP_DEDUPE)";
    if ((needs & CONF_NEED_BROKER) && conf_env.broker_stop == NULL)
        return "no commands to stop and start the broker were given (--broker-stop, "
               "--broker-start)";
    if ((needs & CONF_NEED_PAUSE) && conf_env.broker_pause == NULL)
        return "no commands to pause and resume the broker were given (--broker-pause, "
               "--broker-resume)";
    if ((needs & CONF_NEED_HOST) && conf_uri_with_host(conf_env.uri, "h:1", NULL, 0) != 0)
        return "the URI names no host:port to replace with a closed port";
    if ((needs & CONF_NEED_RELAY_STORE) && !have_relay_store)
        return "the sqlite store driver does not load, and the case runs a relay on it";
    return NULL;
}

void conf_sink_schedule(const conf_case_t *const *cases, size_t n)
{
    sched = cases;
    sched_n = n;
    sched_i = 0;
    leftovers = 0;
}

void conf_sink_setup(void)
{
    conf_env.current = sched_i < sched_n ? sched[sched_i++] : NULL;
    conf_env.setup_error[0] = '\0';
    destination_seq++;
    snprintf(conf_env.destination, sizeof conf_env.destination, "conf_%ld_%u", (long)getpid(),
             destination_seq);
    snprintf(conf_env.destination_b, sizeof conf_env.destination_b, "%s_b", conf_env.destination);
    if (conf_env.current == NULL) {
        snprintf(conf_env.setup_error, sizeof conf_env.setup_error,
                 "internal: more cases ran than were scheduled");
        return;
    }
    if (!have_destinations)
        return;
    char msg[OUTBOX_MESSAGE_MAX];
    /* One of that name can only be left from an earlier process with the
     * same pid: start from nothing. */
    dest_job_t drop = {1}, create = {0};
    in_child(destinations, &drop, 120, msg, sizeof msg);
    if (in_child(destinations, &create, 120, msg, sizeof msg) != 0)
        snprintf(conf_env.setup_error, sizeof conf_env.setup_error, "%s", msg);
}

void conf_sink_teardown(void)
{
    if (conf_env.current == NULL)
        return;
    if (!have_destinations) {
        leftovers++;
        return;
    }
    char msg[OUTBOX_MESSAGE_MAX];
    dest_job_t drop = {1};
    if (in_child(destinations, &drop, 120, msg, sizeof msg) != 0) {
        printf("conformance: could not drop the destinations of %s: %s\n",
               conf_env.current->test->name, msg);
        fflush(stdout);
        leftovers++;
    }
}

unsigned conf_sink_leftovers(void)
{
    return leftovers;
}

/* ------------------------------------------------------------ messages */

void conf_smsg_init(conf_smsg_t *s, unsigned long n, const char *key, const char *destination,
                    int all_headers)
{
    memset(s, 0, sizeof *s);
    conf_event_id(s->event_id, n);
    /* A row id that differs from the event id, as in a real outbox: a
     * sink that takes one for the other shows. */
    conf_event_id(s->row_id, n + 5000000);
    snprintf(s->key, sizeof s->key, "%s", key ? key : s->event_id);
    snprintf(s->destination, sizeof s->destination, "%s", destination);
    snprintf(s->type, sizeof s->type, "conformance.event.v%lu", n % 3 + 1);
    snprintf(s->source, sizeof s->source, "/outbox/conformance/%lu", n % 5);
    snprintf(s->time, sizeof s->time, "2026-12-01T10:%02lu:%02lu.%06luZ", n / 60 % 60, n % 60,
             n % 1000000);
    snprintf(s->traceparent, sizeof s->traceparent, "00-%032lx-%016lx-01", n + 1, n + 7);
    snprintf(s->hlc, sizeof s->hlc, "%lld", (long long)((INT64_C(1764583200000) << 16) + (int64_t)n));
    conf_event_id(s->tenant, n + 1000000);
    conf_event_id(s->correlation, n + 2000000);
    conf_event_id(s->causation, n + 3000000);
    conf_event_id(s->execution, n + 4000000);
    size_t h = 0;
    s->h[h++] = (outbox_header_t){"id", s->event_id};
    s->h[h++] = (outbox_header_t){"type", s->type};
    s->h[h++] = (outbox_header_t){"source", s->source};
    s->h[h++] = (outbox_header_t){"specversion", "1.0"};
    s->h[h++] = (outbox_header_t){"time", s->time};
    s->h[h++] = (outbox_header_t){"datacontenttype", "application/json"};
    s->h[h++] = (outbox_header_t){"partitionkey", s->key};
    if (all_headers) {
        s->h[h++] = (outbox_header_t){"traceparent", s->traceparent};
        s->h[h++] = (outbox_header_t){"tenantid", s->tenant};
        s->h[h++] = (outbox_header_t){"correlationid", s->correlation};
        s->h[h++] = (outbox_header_t){"causationid", s->causation};
        s->h[h++] = (outbox_header_t){"executionid", s->execution};
        s->h[h++] = (outbox_header_t){"hlc", s->hlc};
    }
    char payload[160];
    int len = snprintf(payload, sizeof payload,
                       "{\"n\":%lu,\"text\":\"h\\u00e9llo \xe2\x9c\x93\",\"nested\":{\"a\":[1,2.5,"
                       "true,null],\"big\":9007199254740993}}",
                       n);
    s->payload = strdup(payload);
    ck_assert_msg(s->payload != NULL && len > 0, "out of memory");
    s->row = (outbox_row_t){
        .id = s->row_id, .route = "conf.sink", .event_id = s->event_id, .event_type = s->type,
        .payload = s->payload, .payload_len = (size_t)len, .ordering_key = key,
        .traceparent = all_headers ? s->traceparent : NULL, .attempts = 1,
    };
    s->m = (outbox_message_t){
        .route = "conf.sink", .destination = s->destination, .key = s->key,
        .event_id = s->event_id, .payload = s->payload, .payload_len = (size_t)len,
        .headers = s->h, .n_headers = h, .row = &s->row,
    };
}

void conf_smsg_big(conf_smsg_t *s, size_t size)
{
    ck_assert(size >= 2);
    char *p = malloc(size + 1);
    ck_assert_msg(p != NULL, "out of memory");
    memset(p, 'x', size);
    p[0] = p[size - 1] = '"';
    p[size] = '\0';
    free(s->payload);
    s->payload = p;
    s->m.payload = s->row.payload = p;
    s->m.payload_len = s->row.payload_len = size;
}

void conf_smsg_free(conf_smsg_t *s)
{
    free(s->payload);
    s->payload = NULL;
}

conf_batch_t conf_batch_new(size_t n)
{
    conf_batch_t b = {calloc(n, sizeof *b.v), calloc(n, sizeof *b.msgs), calloc(n, sizeof *b.res), n};
    ck_assert_msg(b.v && b.msgs && b.res, "out of memory");
    return b;
}

int conf_batch_publish(outbox_sink_t *k, conf_batch_t *b)
{
    for (size_t i = 0; i < b->n; i++)
        b->msgs[i] = b->v[i].m;
    int rc = outbox_sink_publish(k, b->msgs, b->n, b->res);
    /* DEFER (a slow partition; the sink keeps the message) means "offer it
     * again": as a relay would, the deferred messages go again, in order,
     * until the sink says what became of them (two minutes at most). */
    int64_t until = conf_now_us() + 120 * INT64_C(1000000);
    while (rc == OUTBOX_OK && conf_now_us() < until) {
        size_t m = 0;
        for (size_t i = 0; i < b->n; i++)
            m += b->res[i].status == OUTBOX_PUBLISH_DEFER;
        if (m == 0)
            break;
        outbox_message_t *again = calloc(m, sizeof *again);
        outbox_publish_result_t *res = calloc(m, sizeof *res);
        size_t *at = calloc(m, sizeof *at);
        ck_assert_msg(again && res && at, "out of memory");
        m = 0;
        for (size_t i = 0; i < b->n; i++)
            if (b->res[i].status == OUTBOX_PUBLISH_DEFER) {
                at[m] = i;
                again[m++] = b->msgs[i];
            }
        rc = outbox_sink_publish(k, again, m, res);
        for (size_t j = 0; j < m; j++)
            b->res[at[j]] = res[j];
        free(again);
        free(res);
        free(at);
    }
    return rc;
}

size_t conf_batch_count(const conf_batch_t *b, int status)
{
    size_t c = 0;
    for (size_t i = 0; i < b->n; i++)
        c += b->res[i].status == status;
    return c;
}

void conf_batch_free(conf_batch_t *b)
{
    for (size_t i = 0; i < b->n; i++)
        conf_smsg_free(&b->v[i]);
    free(b->v);
    free(b->msgs);
    free(b->res);
    memset(b, 0, sizeof *b);
}

/* --------------------------------------------------------------- sinks */

outbox_sink_t *conf_sink_open_uri(const char *uri, int *rc, char *msg, size_t size)
{
    outbox_sink_t *k = NULL;
    outbox_diag_t d = {0};
    outbox_sink_options_t opts = {.struct_size = sizeof opts, .driver = conf_env.driver_arg};
    *rc = outbox_sink_open(uri, &opts, &k, &d);
    if (*rc != OUTBOX_OK) {
        snprintf(msg, size, "%s", d.message[0] ? d.message : outbox_strerror(*rc));
        return NULL;
    }
    if (size > 0)
        msg[0] = '\0';
    return k;
}

outbox_sink_t *conf_sink_open(void)
{
    ck_assert_msg(conf_env.current != NULL && strcmp(tcase_name(), conf_env.current->test->name) == 0,
                  "internal: the fixture prepared another case");
    ck_assert_msg(conf_env.setup_error[0] == '\0', "could not create the case's destinations: %s",
                  conf_env.setup_error);
    int rc = 0;
    char msg[OUTBOX_MESSAGE_MAX];
    outbox_sink_t *k = conf_sink_open_uri(conf_env.uri, &rc, msg, sizeof msg);
    ck_assert_msg(k != NULL, "cannot open the sink %s: %s", conf_env.shown_uri, msg);
    return k;
}

/* -------------------------------------------------------------- reading */

static char *dup_or_null(const char *s, size_t n)
{
    if (s == NULL)
        return NULL;
    char *p = malloc(n + 1);
    ck_assert_msg(p != NULL, "out of memory");
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static outbox_header_t *copy_headers(const outbox_header_t *v, size_t n)
{
    outbox_header_t *out = calloc(n ? n : 1, sizeof *out);
    ck_assert_msg(out != NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const char *name = v[i].name ? v[i].name : "";
        const char *value = v[i].value ? v[i].value : "";
        out[i].name = dup_or_null(name, strlen(name));
        out[i].value = dup_or_null(value, strlen(value));
    }
    return out;
}

static void free_headers(outbox_header_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free((char *)v[i].name);
        free((char *)v[i].value);
    }
    free(v);
}

static void copy_got(conf_got_t *g, const outbox_received_t *m)
{
    memset(g, 0, sizeof *g);
    g->key = m->key ? dup_or_null(m->key, strlen(m->key)) : NULL;
    g->dedupe_id = m->dedupe_id ? dup_or_null(m->dedupe_id, strlen(m->dedupe_id)) : NULL;
    g->destination = m->destination ? dup_or_null(m->destination, strlen(m->destination)) : NULL;
    g->payload = dup_or_null(m->payload ? m->payload : "", m->payload ? m->payload_len : 0);
    g->payload_len = m->payload ? m->payload_len : 0;
    g->n_headers = m->n_headers;
    g->headers = copy_headers(m->headers, m->n_headers);
    g->has_wire = m->wire_headers != NULL;
    g->n_wire = m->wire_headers ? m->n_wire_headers : 0;
    g->wire = copy_headers(m->wire_headers, g->n_wire);
    const char *id = conf_got_header(g, "id");
    g->n = id ? conf_event_n(id) : ULONG_MAX;
}

conf_read_t conf_sink_read(outbox_sink_t *k, const char *destination, size_t want, int quiet_ms)
{
    conf_read_t r = {0};
    size_t cap = want + 16;
    r.v = calloc(cap, sizeof *r.v);
    ck_assert_msg(r.v != NULL, "out of memory");
    outbox_sink_reader_t *rd = NULL;
    conf_sink_ok(k, outbox_sink_reader_open(k, destination, &rd));
    for (;;) {
        /* Once all that was expected arrived, wait a little for extras. */
        int wait = r.n >= want ? 500 : quiet_ms;
        outbox_received_t m;
        int rc = outbox_sink_reader_read(rd, (int64_t)wait * 1000, &m);
        if (rc == OUTBOX_ENOTFOUND)
            break;
        if (rc != OUTBOX_OK) {
            char why[OUTBOX_MESSAGE_MAX];
            snprintf(why, sizeof why, "%s", outbox_sink_reader_message(rd));
            outbox_sink_reader_close(rd);
            ck_abort_msg("reading %s back after %zu messages: %s (%s)", destination, r.n,
                         outbox_strerror(rc), why);
        }
        if (r.n == cap) {
            cap *= 2;
            conf_got_t *v = realloc(r.v, cap * sizeof *v);
            ck_assert_msg(v != NULL, "out of memory");
            r.v = v;
        }
        copy_got(&r.v[r.n++], &m);
    }
    outbox_sink_reader_close(rd);
    return r;
}

void conf_read_free(conf_read_t *r)
{
    for (size_t i = 0; i < r->n; i++) {
        conf_got_t *g = &r->v[i];
        free_headers(g->headers, g->n_headers);
        free_headers(g->wire, g->n_wire);
        free(g->key);
        free(g->dedupe_id);
        free(g->destination);
        free(g->payload);
    }
    free(r->v);
    memset(r, 0, sizeof *r);
}

const char *conf_got_header(const conf_got_t *g, const char *name)
{
    for (size_t i = 0; i < g->n_headers; i++)
        if (strcmp(g->headers[i].name, name) == 0)
            return g->headers[i].value;
    return NULL;
}

const char *conf_got_wire(const conf_got_t *g, const char *name, int nocase)
{
    for (size_t i = 0; i < g->n_wire; i++)
        if ((nocase ? strcasecmp(g->wire[i].name, name) : strcmp(g->wire[i].name, name)) == 0)
            return g->wire[i].value;
    return NULL;
}

const char *conf_got_key(const conf_got_t *g)
{
    return g->key ? g->key : conf_got_header(g, "partitionkey");
}

/* --------------------------------------------------------------- broker */

/* The command runs in a session of its own: Check kills the case's whole
 * process group when the case ends, and a broker the case started must
 * outlive it. */
static void run_broker(const char *what, const char *cmd)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    ck_assert_msg(pid >= 0, "fork failed running the broker's %s command", what);
    if (pid == 0) {
        setsid();
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0) {
    }
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "the broker's %s command failed (status %d): %s", what, st, cmd);
}

void conf_broker_stop(void)
{
    run_broker("stop", conf_env.broker_stop);
}

void conf_broker_start(void)
{
    run_broker("start", conf_env.broker_start);
}

void conf_broker_pause(void)
{
    run_broker("pause", conf_env.broker_pause);
}

void conf_broker_resume(void)
{
    run_broker("resume", conf_env.broker_resume);
}

/* ----------------------------------------------------------------- URIs */

/* The authority of uri: [start, end) after "scheme://". */
static int authority(const char *uri, size_t *start, size_t *end)
{
    const char *sep = strstr(uri, "://");
    if (sep == NULL)
        return -1;
    *start = (size_t)(sep + 3 - uri);
    *end = *start + strcspn(uri + *start, "/?#");
    return *end > *start ? 0 : -1;
}

static int splice(const char *uri, size_t from, size_t to, const char *with, char *out, size_t size)
{
    int n = snprintf(out, size, "%.*s%s%s", (int)from, uri, with, uri + to);
    return n < 0 || (size > 0 && (size_t)n >= size) ? -1 : 0;
}

int conf_uri_with_host(const char *uri, const char *hostport, char *out, size_t size)
{
    size_t a, e;
    if (uri == NULL || authority(uri, &a, &e) != 0)
        return -1;
    const char *at = memrchr(uri + a, '@', e - a);
    size_t host = at ? (size_t)(at + 1 - uri) : a;
    if (host == e)
        return -1;
    return size == 0 ? 0 : splice(uri, host, e, hostport, out, size);
}

int conf_uri_with_userinfo(const char *uri, const char *userinfo, char *out, size_t size)
{
    size_t a, e;
    if (uri == NULL || authority(uri, &a, &e) != 0)
        return -1;
    const char *at = memrchr(uri + a, '@', e - a);
    size_t host = at ? (size_t)(at + 1 - uri) : a;
    char with[160];
    snprintf(with, sizeof with, "%s@", userinfo);
    return splice(uri, a, host, with, out, size);
}

int conf_closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_msg(fd >= 0, "socket failed");
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    ck_assert(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    ck_assert(getsockname(fd, (struct sockaddr *)&sa, &len) == 0);
    close(fd);
    return ntohs(sa.sin_port);
}
