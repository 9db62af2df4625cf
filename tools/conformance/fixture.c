/* Conformance battery: loading the driver, one fresh relation per case, and
 * the helpers every case uses.
 *
 * Cases open their stores as an application would: outbox_store_open() with
 * the driver's name or path as the user gave it, through the real loader
 * and every check the core makes. But the application API does not wrap
 * the driver's optional schema_drop and native_begin/native_end, and the
 * store handle does not expose the driver's own handle they take. For
 * those two needs only, the battery registers a "spy": a copy of the
 * driver's descriptor and vtable, identical except that open() also
 * remembers the handle it returned, in a thread-local. A store opened
 * through the spy still runs the driver's own entries on the driver's own
 * handle; only the battery can reach that handle. */
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#include "conf_int.h"

conf_env_t conf_env;

#define SPY_NAME "conformance-spy"

static const outbox_store_vtable_t *spy_real;
static outbox_store_vtable_t spy_vt;
static outbox_driver_t spy_desc;
static _Thread_local void *spy_handle;

static int spy_open(const outbox_store_open_t *params, void **handle, outbox_diag_t *d)
{
    int rc = spy_real->open(params, handle, d);
    spy_handle = rc == OUTBOX_OK ? *handle : NULL;
    return rc;
}

/* The real driver was initialised when the loader admitted it. */
static int spy_init(const outbox_host_t *host, outbox_diag_t *d)
{
    (void)host;
    (void)d;
    return OUTBOX_OK;
}

static int spy_register(const outbox_driver_t *drv, outbox_diag_t *d)
{
    /* Copy only what the driver has; the rest stays NULL, which the core
     * reads as "not supported", exactly as it would for the driver. */
    size_t dsize = drv->struct_size < sizeof spy_desc ? drv->struct_size : sizeof spy_desc;
    size_t vsize = drv->store->struct_size < sizeof spy_vt ? drv->store->struct_size : sizeof spy_vt;
    memset(&spy_desc, 0, sizeof spy_desc);
    memset(&spy_vt, 0, sizeof spy_vt);
    memcpy(&spy_desc, drv, dsize);
    memcpy(&spy_vt, drv->store, vsize);
    spy_real = drv->store;
    spy_vt.struct_size = sizeof spy_vt;
    spy_vt.open = spy_open;
    spy_desc.struct_size = sizeof spy_desc;
    spy_desc.name = SPY_NAME;
    spy_desc.schemes = NULL; /* never chosen by URI scheme */
    spy_desc.init = spy_init;
    spy_desc.store = &spy_vt;
    spy_desc.sink = NULL;
    return outbox_driver_register(&spy_desc, d);
}

/* ---------------------------------------------------------------- opens */

static outbox_store_t *open_as(const char *driver, const char *relation, const char *ckpt,
                               const char *inbox, uint32_t flags, void **raw, outbox_diag_t *d)
{
    outbox_store_options_t o = {
        .struct_size = sizeof o,
        .relation = relation,
        .checkpoint_relation = ckpt,
        .driver = driver,
        .flags = flags,
        .inbox_relation = inbox,
    };
    outbox_store_t *s = NULL;
    spy_handle = NULL;
    int rc = outbox_store_open(conf_env.uri, &o, &s, d);
    if (raw != NULL)
        *raw = rc == OUTBOX_OK ? spy_handle : NULL;
    spy_handle = NULL;
    return rc == OUTBOX_OK ? s : NULL;
}

static outbox_schema_opts_t schema_opts(const char *relation, const char *ckpt,
                                        const char *inbox, uint32_t flags)
{
    outbox_schema_opts_t o = {
        .struct_size = sizeof o,
        .relation = relation,
        .checkpoint_relation = ckpt,
        .flags = flags,
        .inbox_relation = inbox,
    };
    return o;
}

/* The driver has the inbox entries (ABI 1.7); the core refuses
 * OUTBOX_SCHEMA_INBOX to a driver without them, and an older driver was
 * never told what the flag means. */
static int driver_has_inbox(void)
{
    return CONF_VT_HAS(spy_real, inbox_accept) && CONF_VT_HAS(spy_real, inbox_purge) &&
           CONF_VT_HAS(spy_real, inbox_stats);
}

/* Dropping takes the inbox too whenever the driver has one: a case may
 * have made the inbox table itself (schema apply in the case). */
static uint32_t drop_flags(uint32_t flags)
{
    return driver_has_inbox() ? flags | OUTBOX_SCHEMA_INBOX : flags;
}

static int create_relation(const char *driver, const char *relation, const char *ckpt,
                           const char *inbox, uint32_t flags, outbox_diag_t *d)
{
    outbox_store_t *s = open_as(driver, relation, ckpt, inbox, OUTBOX_OPEN_SCHEMA_ONLY, NULL, d);
    if (s == NULL)
        return d->code ? d->code : OUTBOX_EPERMANENT;
    outbox_schema_opts_t o = schema_opts(relation, ckpt, inbox, flags);
    int rc = outbox_store_schema_apply(s, &o);
    if (rc != OUTBOX_OK)
        snprintf(d->message, sizeof d->message, "schema apply on %s: %s", relation,
                 outbox_store_message(s));
    d->code = rc;
    outbox_store_close(s);
    return rc;
}

static int drop_relation(const char *relation, const char *ckpt, const char *inbox, uint32_t flags,
                         outbox_diag_t *d)
{
    void *h = NULL;
    outbox_store_t *s = open_as(SPY_NAME, relation, ckpt, inbox, OUTBOX_OPEN_SCHEMA_ONLY, &h, d);
    if (s == NULL)
        return d->code ? d->code : OUTBOX_EPERMANENT;
    outbox_schema_opts_t o = schema_opts(relation, ckpt, inbox, drop_flags(flags));
    int rc = spy_real->schema_drop(h, &o, d);
    outbox_store_close(s);
    return rc;
}

static void relation_names(const char *suffix, char *rel, size_t rel_size, char *ckpt,
                           size_t ckpt_size, char *inbox, size_t inbox_size)
{
    snprintf(rel, rel_size, "conf_%ld_%s", (long)getpid(), suffix);
    snprintf(ckpt, ckpt_size, "%s_ckpt", rel);
    snprintf(inbox, inbox_size, "%s_inbox", rel);
}

/* --------------------------------------------------------------- probe */

/* Creates a relation with flags, opens it as an application would (by the
 * name or path the user gave) and reads the handle's capabilities. */
static int probe(const char *driver, uint32_t flags, uint32_t *caps, outbox_diag_t *d)
{
    char rel[64], ckpt[80], inbox[80];
    relation_names("probe", rel, sizeof rel, ckpt, sizeof ckpt, inbox, sizeof inbox);
    if (CONF_VT_HAS(spy_real, schema_drop)) {
        outbox_diag_t dd = {0};
        drop_relation(rel, ckpt, inbox, flags, &dd);
    }
    int rc = create_relation(driver, rel, ckpt, inbox, flags, d);
    if (rc == OUTBOX_OK) {
        outbox_store_t *s = open_as(driver, rel, ckpt, inbox, 0, NULL, d);
        if (s == NULL) {
            rc = d->code ? d->code : OUTBOX_EPERMANENT;
        } else {
            *caps = outbox_store_capabilities(s);
            outbox_store_close(s);
        }
    }
    if (CONF_VT_HAS(spy_real, schema_drop)) {
        outbox_diag_t dd = {0};
        drop_relation(rel, ckpt, inbox, flags, &dd);
    }
    return rc;
}

/* ------------------------------------------------------ unchecked checks */

/* Cases run in forked children; what they could not check reaches the
 * runner through an unlinked temporary file opened for appending, a line
 * each, its first character saying which kind it is. */
void conf_unchecked_open(void)
{
    char path[] = "/tmp/outbox-conformance-XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) {
        unlink(path);
        int flags = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, flags | O_APPEND);
        fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    conf_env.unchecked_fd = fd;
}

#define LEFT_OUT_ENTRY 'U'
#define LEFT_OUT_NOTE 'N'

static void left_out(char kind, const char *what, const char *why)
{
    char line[512];
    const char *name = conf_env.current ? conf_env.current->test->name : "?";
    int n = snprintf(line, sizeof line, "%c%s: %s%s (%s)\n", kind, name,
                     kind == LEFT_OUT_NOTE ? "not exercised: " : "", what, why);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof line) {
        n = (int)sizeof line - 1;
        line[n - 1] = '\n';
    }
    if (conf_env.unchecked_fd < 0 || write(conf_env.unchecked_fd, line, (size_t)n) != n) {
        printf("conformance: %s %s", kind == LEFT_OUT_NOTE ? "note" : "NOT CHECKED", line + 1);
        fflush(stdout);
    }
}

void conf_unchecked(const char *what, const char *why)
{
    left_out(LEFT_OUT_ENTRY, what, why);
}

void conf_note(const char *what, const char *why)
{
    left_out(LEFT_OUT_NOTE, what, why);
}

size_t conf_unchecked_collect(conf_left_out_t **out)
{
    *out = NULL;
    if (conf_env.unchecked_fd < 0)
        return 0;
    FILE *f = fdopen(dup(conf_env.unchecked_fd), "r");
    if (f == NULL)
        return 0;
    rewind(f);
    size_t n = 0;
    char buf[512];
    while (fgets(buf, sizeof buf, f) != NULL) {
        buf[strcspn(buf, "\n")] = '\0';
        if (buf[0] != LEFT_OUT_ENTRY && buf[0] != LEFT_OUT_NOTE)
            continue;
        conf_left_out_t *grown = realloc(*out, (n + 1) * sizeof **out);
        char *copy = strdup(buf + 1);
        if (grown == NULL || copy == NULL) {
            free(copy);
            if (grown != NULL)
                *out = grown;
            break;
        }
        *out = grown;
        (*out)[n++] = (conf_left_out_t){buf[0] == LEFT_OUT_ENTRY, copy};
    }
    fclose(f);
    close(conf_env.unchecked_fd);
    conf_env.unchecked_fd = -1;
    return n;
}

void conf_unchecked_free(conf_left_out_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].line);
    free(v);
}

int conf_fixture_init(const char *driver, const char *uri, outbox_diag_t *d)
{
    const outbox_driver_t *drv = NULL;
    memset(&conf_env, 0, sizeof conf_env);
    conf_env.unchecked_fd = -1;
    conf_env.uri = uri;
    outbox_uri_mask(uri, conf_env.shown_uri, sizeof conf_env.shown_uri);
    int rc = outbox_driver_load(driver, &drv, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (drv->kind != OUTBOX_DRIVER_STORE) {
        snprintf(d->message, sizeof d->message, "%s is not a store driver", driver);
        return d->code = OUTBOX_EINVAL;
    }
    conf_env.driver = drv;
    rc = spy_register(drv, d);
    if (rc != OUTBOX_OK)
        return rc;
    conf_env.driver_arg = driver;

    /* The store must at least open for schema work and create a relation. */
    outbox_store_t *s = open_as(driver, "conf_probe_open", NULL, NULL, OUTBOX_OPEN_SCHEMA_ONLY,
                                NULL, d);
    if (s == NULL) {
        char why[OUTBOX_MESSAGE_MAX];
        snprintf(why, sizeof why, "%s", d->message);
        snprintf(d->message, sizeof d->message, "cannot open %.120s with driver %.40s: %.300s", conf_env.shown_uri,
                 drv->name, why);
        return d->code ? d->code : OUTBOX_EPERMANENT;
    }
    outbox_store_close(s);
    if (!CONF_VT_HAS(drv->store, schema_apply)) {
        snprintf(d->message, sizeof d->message,
                 "the %s driver has no schema_apply: the battery creates a fresh relation per "
                 "case with it",
                 drv->name);
        return d->code = OUTBOX_ENOTSUP;
    }

    /* Every optional part at once; when the driver refuses that, learn
     * which parts it can create one by one. The inbox only from a driver
     * with its entries. */
    const uint32_t last = driver_has_inbox() ? OUTBOX_SCHEMA_INBOX : OUTBOX_SCHEMA_CHECKPOINT;
    const uint32_t all = (last << 1) - 1;
    uint32_t caps = 0;
    rc = probe(driver, all, &caps, d);
    if (rc != OUTBOX_OK) {
        rc = probe(driver, 0, &caps, d);
        if (rc != OUTBOX_OK)
            return rc;
        for (uint32_t f = 1; f <= last; f <<= 1) {
            uint32_t more = 0;
            outbox_diag_t dd = {0};
            if (probe(driver, f, &more, &dd) == OUTBOX_OK)
                caps |= more;
        }
    }
    conf_env.caps = caps;
    conf_unchecked_open();
    memset(d, 0, sizeof *d);
    return OUTBOX_OK;
}

const char *conf_need_reason(unsigned needs)
{
    const outbox_store_vtable_t *vt = conf_env.driver->store;
    uint32_t caps = conf_env.caps;
    /* First: without the inbox, what else an inbox case needs is beside the point. */
    if ((needs & CONF_NEED_INBOX) && !driver_has_inbox())
        return "the driver has no inbox entries (ABI 1.7)";
    if ((needs & CONF_NEED_INBOX) && !(caps & OUTBOX_STORE_CAP_INBOX))
        return "schema apply with OUTBOX_SCHEMA_INBOX gives no inbox table (no "
               "OUTBOX_STORE_CAP_INBOX)";
    if ((needs & CONF_NEED_TX) && !(caps & OUTBOX_STORE_CAP_TRANSACTIONS))
        return "the store has no transactions (no OUTBOX_STORE_CAP_TRANSACTIONS)";
    if ((needs & CONF_NEED_NATIVE) && !(caps & OUTBOX_STORE_CAP_NATIVE_TX))
        return "the store cannot stage through a native handle (no OUTBOX_STORE_CAP_NATIVE_TX)";
    if ((needs & CONF_NEED_NATIVE) && !(CONF_VT_HAS(vt, native_begin) && CONF_VT_HAS(vt, native_end)))
        return "the driver has no native_begin/native_end to open an application transaction with";
    if ((needs & CONF_NEED_HLC) && !(caps & OUTBOX_STORE_CAP_HLC))
        return "schema apply with OUTBOX_SCHEMA_HLC gives no hlc column (no OUTBOX_STORE_CAP_HLC)";
    if ((needs & CONF_NEED_TRACEPARENT) && !(caps & OUTBOX_STORE_CAP_TRACEPARENT))
        return "schema apply with OUTBOX_SCHEMA_TRACEPARENT gives no traceparent column (no "
               "OUTBOX_STORE_CAP_TRACEPARENT)";
    if ((needs & CONF_NEED_CHECKPOINT) && !(caps & OUTBOX_STORE_CAP_CHECKPOINT))
        return "schema apply with OUTBOX_SCHEMA_CHECKPOINT gives no checkpoint table (no "
               "OUTBOX_STORE_CAP_CHECKPOINT)";
    if ((needs & CONF_NEED_CHECKPOINT) &&
        !(CONF_VT_HAS(vt, checkpoint_advance) && CONF_VT_HAS(vt, checkpoint_recover)))
        return "the driver has no checkpoint_advance/checkpoint_recover";
    if ((needs & CONF_NEED_CONCURRENT) && !(caps & OUTBOX_STORE_CAP_CONCURRENT))
        return "the store does not let several handles claim one route (no "
               "OUTBOX_STORE_CAP_CONCURRENT)";
    if ((needs & CONF_NEED_STATS) && !CONF_VT_HAS(vt, stats))
        return "the driver has no stats entry to count rows per status with";
    if ((needs & CONF_NEED_REPLAY) && !CONF_VT_HAS(vt, replay))
        return "the driver has no replay entry to bring a dead row back with";
    if ((needs & CONF_NEED_PURGE) && !CONF_VT_HAS(vt, purge))
        return "the driver has no purge entry";
    if ((needs & CONF_NEED_ROUTES) && !CONF_VT_HAS(vt, routes))
        return "the driver has no routes entry (ABI 1.3) to list routes with";
    if ((needs & CONF_NEED_DEAD_LIST) && !CONF_VT_HAS(vt, dead_list))
        return "the driver has no dead_list entry (ABI 1.3) to list dead rows with";
    if ((needs & CONF_NEED_RENEW) && !CONF_VT_HAS(vt, renew))
        return "the driver has no renew entry (ABI 1.5): its leases are never renewed";
    if ((needs & CONF_NEED_SCHEMA_CHECK) && !CONF_VT_HAS(vt, schema_check))
        return "the driver has no schema_check";
    if ((needs & CONF_NEED_DELAYED) && !(caps & OUTBOX_STORE_CAP_DELAYED))
        return "the store does not stage delayed events (no OUTBOX_STORE_CAP_DELAYED, ABI 1.8)";
    return NULL;
}

/* ------------------------------------------------------- per-case relation */

static const conf_case_t *const *sched;
static size_t sched_n, sched_i;
static unsigned leftovers;
/* Never reset: a second run in this process must not meet the first's
 * relations, which stay when the driver has no schema_drop. */
static unsigned relation_seq;

void conf_fixture_schedule(const conf_case_t *const *cases, size_t n)
{
    sched = cases;
    sched_n = n;
    sched_i = 0;
    leftovers = 0;
}

void conf_fixture_setup(void)
{
    conf_env.current = sched_i < sched_n ? sched[sched_i++] : NULL;
    conf_env.setup_error[0] = '\0';
    char suffix[32];
    snprintf(suffix, sizeof suffix, "%u", ++relation_seq);
    relation_names(suffix, conf_env.relation, sizeof conf_env.relation,
                   conf_env.checkpoint_relation, sizeof conf_env.checkpoint_relation,
                   conf_env.inbox_relation, sizeof conf_env.inbox_relation);
    if (conf_env.current == NULL) {
        snprintf(conf_env.setup_error, sizeof conf_env.setup_error,
                 "internal: more cases ran than were scheduled");
        return;
    }
    outbox_diag_t d = {0};
    /* A relation of that name can only be a leftover of an earlier process
     * with the same pid: start from nothing. */
    if (CONF_VT_HAS(spy_real, schema_drop))
        drop_relation(conf_env.relation, conf_env.checkpoint_relation, conf_env.inbox_relation,
                      OUTBOX_SCHEMA_HLC | OUTBOX_SCHEMA_TRACEPARENT | OUTBOX_SCHEMA_CHECKPOINT, &d);
    memset(&d, 0, sizeof d);
    if (create_relation(conf_env.driver_arg, conf_env.relation, conf_env.checkpoint_relation,
                        conf_env.inbox_relation, conf_env.current->schema_flags, &d) != OUTBOX_OK)
        snprintf(conf_env.setup_error, sizeof conf_env.setup_error, "%s", d.message);
}

void conf_fixture_teardown(void)
{
    if (conf_env.current == NULL)
        return;
    if (!CONF_VT_HAS(spy_real, schema_drop)) {
        leftovers++;
        return;
    }
    outbox_diag_t d = {0};
    if (drop_relation(conf_env.relation, conf_env.checkpoint_relation, conf_env.inbox_relation,
                      conf_env.current->schema_flags, &d) != OUTBOX_OK) {
        printf("conformance: could not drop %s after %s: %s\n", conf_env.relation,
               conf_env.current->test->name, d.message);
        fflush(stdout);
        leftovers++;
    }
}

unsigned conf_fixture_leftovers(void)
{
    return leftovers;
}

static void check_setup(void)
{
    ck_assert_msg(conf_env.current != NULL && strcmp(tcase_name(), conf_env.current->test->name) == 0,
                  "internal: the relation was set up for another case");
    ck_assert_msg(conf_env.setup_error[0] == '\0', "creating relation %s: %s", conf_env.relation,
                  conf_env.setup_error);
}

static outbox_store_t *open_checked(const char *driver, void **driver_handle)
{
    check_setup();
    outbox_diag_t d = {0};
    outbox_store_t *s = open_as(driver, conf_env.relation, conf_env.checkpoint_relation,
                                conf_env.inbox_relation, 0, driver_handle, &d);
    ck_assert_msg(s != NULL, "opening %s on %s: %s", conf_env.relation, conf_env.shown_uri,
                  d.message);
    return s;
}

outbox_store_t *conf_open_raw(void **driver_handle)
{
    return open_checked(SPY_NAME, driver_handle);
}

outbox_store_t *conf_open(void)
{
    return open_checked(conf_env.driver_arg, NULL);
}

void *conf_native_begin(void *h)
{
    ck_assert_msg(h != NULL, "internal: no driver handle");
    outbox_diag_t d = {0};
    void *native = NULL;
    int rc = conf_env.driver->store->native_begin(h, &native, &d);
    ck_assert_msg(rc == OUTBOX_OK && native != NULL, "native_begin: %s (%s)", outbox_strerror(rc),
                  d.message);
    return native;
}

void conf_native_end(void *h, void *native, int commit)
{
    outbox_diag_t d = {0};
    int rc = conf_env.driver->store->native_end(h, native, commit, &d);
    ck_assert_msg(rc == OUTBOX_OK, "native_end(%s): %s (%s)", commit ? "commit" : "rollback",
                  outbox_strerror(rc), d.message);
}

outbox_store_t *conf_open_quiet(outbox_diag_t *d)
{
    return open_as(conf_env.driver_arg, conf_env.relation, conf_env.checkpoint_relation,
                   conf_env.inbox_relation, 0, NULL, d);
}

/* --------------------------------------------------------------- helpers */

int64_t conf_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

double conf_timeout_multiplier(void)
{
    const char *v = getenv("CK_TIMEOUT_MULTIPLIER");
    char *end = NULL;
    double m = v ? strtod(v, &end) : 0;
    double scale = conf_env.timeout_scale > 0 ? conf_env.timeout_scale : 1.0;
    return (v && end != v && *end == '\0' && m > 0 ? m : 1.0) * scale;
}

void conf_sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

#define EVENT_PREFIX "00000000-0000-7000-8000-"

void conf_event_id(char buf[OUTBOX_UUID_STRLEN + 1], unsigned long n)
{
    snprintf(buf, OUTBOX_UUID_STRLEN + 1, EVENT_PREFIX "%012lx", n & 0xffffffffffffUL);
}

unsigned long conf_event_n(const char *event_id)
{
    size_t plen = sizeof EVENT_PREFIX - 1;
    if (event_id == NULL || strlen(event_id) != OUTBOX_UUID_STRLEN ||
        strncmp(event_id, EVENT_PREFIX, plen) != 0)
        return ULONG_MAX;
    char *end = NULL;
    unsigned long n = strtoul(event_id + plen, &end, 16);
    return end != NULL && *end == '\0' ? n : ULONG_MAX;
}

unsigned long conf_row_n(const outbox_row_t *r)
{
    unsigned long n = conf_event_n(r->event_id);
    ck_assert_msg(n != ULONG_MAX, "claimed a row whose event_id %s the battery never staged",
                  r->event_id ? r->event_id : "(null)");
    return n;
}

static size_t stage_events(outbox_store_t *s, void *native_tx, const char *route,
                           unsigned long first, size_t count, const char *key,
                           const outbox_stage_options_t *when)
{
    outbox_event_t *ev = calloc(count, sizeof *ev);
    char(*ids)[OUTBOX_UUID_STRLEN + 1] = calloc(count, sizeof *ids);
    char(*payloads)[48] = calloc(count, sizeof *payloads);
    ck_assert_msg(ev != NULL && ids != NULL && payloads != NULL, "out of memory");
    for (size_t i = 0; i < count; i++) {
        conf_event_id(ids[i], first + i);
        snprintf(payloads[i], sizeof payloads[i], "{\"n\":%lu}", first + i);
        ev[i] = (outbox_event_t){
            .event_id = ids[i],
            .event_type = "conformance.test",
            .payload = payloads[i],
            .ordering_key = key,
        };
    }
    size_t staged = 0;
    int rc = outbox_store_stage_with(s, native_tx, route, ev, count, when, &staged);
    free(ev);
    free(ids);
    free(payloads);
    ck_assert_msg(rc == OUTBOX_OK, "staging %zu events on %s: %s (%s)", count, route,
                  outbox_strerror(rc), outbox_store_message(s));
    return staged;
}

size_t conf_stage(outbox_store_t *s, void *native_tx, const char *route, unsigned long first,
                  size_t count, const char *key)
{
    return stage_events(s, native_tx, route, first, count, key, NULL);
}

size_t conf_stage_with(outbox_store_t *s, const char *route, unsigned long first, size_t count,
                       const char *key, const outbox_stage_options_t *when)
{
    return stage_events(s, NULL, route, first, count, key, when);
}

static void copy_text(char *dst, size_t size, const char *src, int *present)
{
    if (present != NULL)
        *present = src != NULL;
    snprintf(dst, size, "%s", src ? src : "");
}

/* The last claim on each handle of this process (a case opens a few). */
static struct {
    _Atomic(outbox_store_t *) store;
    _Atomic unsigned long serial;
} last_claims[32];
static _Atomic unsigned long claim_serial;

static void note_claim(outbox_store_t *s, unsigned long serial)
{
    for (size_t i = 0; i < sizeof last_claims / sizeof last_claims[0]; i++) {
        outbox_store_t *expected = NULL;
        if (atomic_load(&last_claims[i].store) == s ||
            atomic_compare_exchange_strong(&last_claims[i].store, &expected, s)) {
            atomic_store(&last_claims[i].serial, serial);
            return;
        }
    }
}

const outbox_row_t *conf_claim_raw(const conf_claim_t *c)
{
    if (c->raw == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof last_claims / sizeof last_claims[0]; i++)
        if (atomic_load(&last_claims[i].store) == c->store)
            return atomic_load(&last_claims[i].serial) == c->serial ? c->raw : NULL;
    return NULL;
}

int conf_claim_quiet(outbox_store_t *s, const char *route, size_t limit, int64_t lease_us,
                     int hlc_order, conf_claim_t *out)
{
    memset(out, 0, sizeof *out);
    outbox_claim_req_t req = {
        .struct_size = sizeof req,
        .route = route,
        .limit = limit,
        .lease_us = lease_us,
        .hlc_order = hlc_order,
    };
    const outbox_row_t *rows = NULL;
    size_t n = 0;
    int rc = outbox_store_claim(s, &req, &rows, &n, &out->fence);
    /* Any claim, even a failed or empty one, ends the last one's rows. */
    unsigned long serial = atomic_fetch_add(&claim_serial, 1) + 1;
    note_claim(s, serial);
    if (rc != OUTBOX_OK || n == 0)
        return rc;
    out->raw = rows;
    out->store = s;
    out->serial = serial;
    out->rows = calloc(n, sizeof *out->rows);
    if (out->rows == NULL)
        return OUTBOX_ENOMEM;
    out->n = n;
    for (size_t i = 0; i < n; i++) {
        conf_row_t *c = &out->rows[i];
        copy_text(c->id, sizeof c->id, rows[i].id, NULL);
        c->n = conf_event_n(rows[i].event_id);
        copy_text(c->route, sizeof c->route, rows[i].route, NULL);
        copy_text(c->key, sizeof c->key, rows[i].ordering_key, &c->has_key);
        copy_text(c->last_error, sizeof c->last_error, rows[i].last_error, &c->has_last_error);
        c->attempts = rows[i].attempts;
        c->created_at = rows[i].created_at;
        c->available_at = rows[i].available_at;
        c->hlc = rows[i].hlc;
    }
    return OUTBOX_OK;
}

conf_claim_t conf_claim(outbox_store_t *s, const char *route, size_t limit, int64_t lease_us,
                        int hlc_order)
{
    conf_claim_t c;
    int rc = conf_claim_quiet(s, route, limit, lease_us, hlc_order, &c);
    ck_assert_msg(rc == OUTBOX_OK, "claiming up to %zu rows of %s: %s (%s)", limit, route,
                  outbox_strerror(rc), outbox_store_message(s));
    for (size_t i = 0; i < c.n; i++)
        ck_assert_msg(c.rows[i].n != ULONG_MAX, "claimed row %s that the battery never staged",
                      c.rows[i].id);
    return c;
}

void conf_claim_free(conf_claim_t *c)
{
    free(c->rows);
    c->rows = NULL;
    c->raw = NULL;
    c->n = 0;
}

int conf_settle1(outbox_store_t *s, const outbox_fence_t *fence, const char *id, int kind,
                 int64_t available_at, const char *error, int *applied)
{
    outbox_settle_item_t it = {
        .id = id,
        .kind = kind,
        .available_at = available_at,
        .error = error,
    };
    size_t count = 0;
    int rc = outbox_store_settle(s, fence, &it, 1, &count);
    if (applied != NULL)
        *applied = it.applied;
    return rc;
}

void conf_settle_all(outbox_store_t *s, const conf_claim_t *c, int kind)
{
    if (c->n == 0)
        return;
    outbox_settle_item_t *items = calloc(c->n, sizeof *items);
    ck_assert_msg(items != NULL, "out of memory");
    const outbox_row_t *raw = conf_claim_raw(c);
    for (size_t i = 0; i < c->n; i++)
        items[i] = (outbox_settle_item_t){.id = raw ? raw[i].id : c->rows[i].id, .kind = kind};
    size_t applied = 0;
    int rc = outbox_store_settle(s, &c->fence, items, c->n, &applied);
    free(items);
    ck_assert_msg(rc == OUTBOX_OK && applied == c->n, "settling %zu rows: %s, %zu applied (%s)",
                  c->n, outbox_strerror(rc), applied, outbox_store_message(s));
}

outbox_stats_t conf_stats(outbox_store_t *s, const char *route)
{
    outbox_stats_t st;
    int rc = outbox_store_stats(s, route, &st);
    ck_assert_msg(rc == OUTBOX_OK, "stats of %s: %s (%s)", route ? route : "every route",
                  outbox_strerror(rc), outbox_store_message(s));
    return st;
}

void conf_add(conf_cases_t *c, const TTest *test, unsigned needs, uint32_t schema_flags,
              double timeout_s)
{
    if (c->n < CONF_MAX_CASES)
        c->v[c->n++] = (conf_case_t){test, needs, schema_flags, timeout_s};
}
