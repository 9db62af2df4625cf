/* The relay loop of SPEC 5: claim a batch, publish it, settle every row in
 * one round trip.
 *
 * Per-key FIFO inside a batch: the store hands over a key's rows as a
 * contiguous run from the key's head, in claim order. A sink that declares
 * OUTBOX_SINK_CAP_ORDERED gets the whole batch in one call; any other sink
 * gets it in rounds, as the kit's per-key scheduler (outbox_kit_keys_t)
 * hands them to ordered sinks inside a call: the first holds the first row
 * of every key and every row without a key, each next one the next row of
 * every key whose last row came back OK. Once a row of a key fails (RETRY
 * or REJECT), the key's later rows are released uncharged: they go out in
 * a later batch, after the failed row's verdict is stored.
 *
 * A round whose every message came back RETRY means the sink is down: the
 * rest of the batch is released uncharged and the relay backs off (the
 * circuit breaker), so an outage never dead-letters healthy events.
 *
 * Transient failures (a store error worth retrying, or such an outage) are
 * retried for as long as they last, except under until_idle: a drain that
 * makes no progress for RELAY_IDLE_GIVE_UP steps in a row returns the last
 * reason instead of waiting for ever (a full disk is transient, but may
 * never clear by itself). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "outbox_int.h"
#include "pipeline.h"

/* Under until_idle, the number of consecutive failed steps (each a
 * transient store error or a batch the sink turned down whole) after which
 * the run gives up. With the default pauses the store's eight failures take
 * about 6 s (12 s at worst) and the sink's about a minute (2 at worst):
 * long enough to ride out a restart, short enough for a drain job. */
#define RELAY_IDLE_GIVE_UP 8
/* Without until_idle, a run of failures is warned about at its first
 * failure and then at every this many, so a long one cannot flood the log. */
#define RELAY_WARN_EVERY 10
/* Batches up to this size get their arrays whole at the first claim. */
#define RELAY_PRESIZE_MAX 4096
#define RELAY_STR_(x) #x
#define RELAY_STR(x) RELAY_STR_(x)

struct outbox_relay {
    outbox_store_t *store;
    outbox_sink_t *sink;
    outbox_relay_config_t cfg;
    char *route;
    char *source;      /* expanded for route: every claimed row is of this route */
    char *destination; /* likewise */
    atomic_int stop;
    int outage_streak;
    int64_t pause_us; /* set by a step that hit an outage */
    /* The outage being reported: when its first batch was released
     * (monotonic; 0 = none), and how many batches it has released. */
    int64_t outage_since_us;
    uint64_t outage_batches;
    char outage_why[OUTBOX_MESSAGE_MAX]; /* the sink's reason for the last outage batch */
    outbox_relay_counters_t counters;
    outbox_diag_t diag;
    int64_t *lag_us; /* cfg.batch entries, only with an observer */
    outbox_renewer_t *renewer; /* NULL: leases are not renewed */
    /* cfg.pipeline batches, kept from batch to batch; a step uses the first. */
    batch_t *batches;
    size_t *free_slots; /* the pipelined run's batches not in flight */
    /* The pipelined run: the sink looked down, and the publishing thread
     * releases every later batch unpublished until the relay clears it. */
    atomic_int pipe_down;
};

void outbox_relay_config_init(outbox_relay_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->struct_size = sizeof *cfg;
    cfg->batch = 100;
    cfg->max_attempts = 10;
    cfg->lease_us = 0; /* chosen by outbox_relay_new */
    cfg->poll_us = 100 * 1000LL;
    cfg->backoff_base_us = 1000000LL;
    cfg->backoff_cap_us = 300 * 1000000LL;
    cfg->destination = "{route}";
    cfg->pipeline = OUTBOX_RELAY_PIPELINE_DEFAULT;
}

static int rfail(outbox_relay_t *r, int code, const char *fmt, ...) OUTBOX_PRINTF(3, 4);
static int rfail(outbox_relay_t *r, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    outbox_diag_vset(&r->diag, code, fmt, ap);
    va_end(ap);
    return code;
}

/* Lease renewal, when the store can and the config allows: a renewer on a
 * second handle of the store renews every third of the lease. A lease left
 * at 0 is then OUTBOX_RELAY_LEASE_RENEWED_US, short enough that a killed
 * relay's rows go out again within seconds; without renewal it is
 * OUTBOX_RELAY_LEASE_US, long enough for a slow publish. */
static void start_renewer(outbox_relay_t *r)
{
    int want = !r->cfg.no_lease_renewal && outbox_store_can_renew(r->store);
    int64_t lease = r->cfg.lease_us ? r->cfg.lease_us : OUTBOX_RELAY_LEASE_RENEWED_US;
    if (want) {
        outbox_diag_t d = {0};
        if (outbox_renewer_start(r->store, r->route, lease / 3, r->cfg.pipeline, &r->renewer, &d) !=
            OUTBOX_OK) {
            outbox_log(OUTBOX_LOG_WARN, "relay %s: leases will not be renewed: %s", r->route, d.message);
            r->renewer = NULL;
        }
    }
    if (r->cfg.lease_us == 0)
        r->cfg.lease_us = r->renewer ? OUTBOX_RELAY_LEASE_RENEWED_US : OUTBOX_RELAY_LEASE_US;
}

int outbox_relay_new(outbox_store_t *store, outbox_sink_t *sink, const outbox_relay_config_t *cfg,
                     outbox_relay_t **out, outbox_diag_t *d)
{
    outbox_diag_clear(d);
    if (out == NULL)
        return outbox_diag_set(d, OUTBOX_EINVAL, "outbox_relay_new: out is NULL");
    *out = NULL;
    if (store == NULL || sink == NULL || cfg == NULL)
        return outbox_diag_set(d, OUTBOX_EINVAL, "relay needs a store, a sink and a config");
    if (cfg->struct_size < sizeof(uint32_t))
        return outbox_diag_set(d, OUTBOX_EINVAL, "relay config: call outbox_relay_config_init first");
    /* Members the caller's (older) struct lacks keep their defaults. */
    outbox_relay_config_t c;
    outbox_relay_config_init(&c);
    OUTBOX_STRUCT_READ(outbox_relay_config_t, &c, cfg, route);
    OUTBOX_STRUCT_READ(outbox_relay_config_t, &c, cfg, batch);
    OUTBOX_STRUCT_READ(outbox_relay_config_t, &c, cfg, max_attempts);
    OUTBOX_STRUCT_READ(outbox_relay_config_t, &c, cfg, lease_us);
    OUTBOX_STRUCT_READ(outbox_relay_config_t, &c, cfg, poll_us);
    OUTBOX_STRUCT_READ(outbox_relay_config_t, &c, cfg, backoff_base_us);
    OUTBOX_STRUCT_READ(outbox_relay_config_t, &c, cfg, backoff_cap_us);
    OUTBOX_STRUCT_READ(outbox_relay_config_t, &c, cfg, hlc_order);
    OUTBOX_STRUCT_READ(outbox_relay_config_t, &c, cfg, source);
    OUTBOX_STRUCT_READ(outbox_relay_config_t, &c, cfg, destination);
    OUTBOX_STRUCT_READ(outbox_relay_config_t, &c, cfg, until_idle);
    OUTBOX_STRUCT_READ(outbox_relay_config_t, &c, cfg, observe);
    OUTBOX_STRUCT_READ(outbox_relay_config_t, &c, cfg, observe_ctx);
    OUTBOX_STRUCT_READ(outbox_relay_config_t, &c, cfg, no_lease_renewal);
    OUTBOX_STRUCT_READ(outbox_relay_config_t, &c, cfg, pipeline);
    cfg = &c;
    if (cfg->route == NULL || cfg->route[0] == '\0')
        return outbox_diag_set(d, OUTBOX_EINVAL, "relay config: route is required");
    char why[128];
    if (!outbox_text_check("route", cfg->route, 255, why, sizeof why))
        return outbox_diag_set(d, OUTBOX_EINVAL, "relay config: %s", why);
    if (cfg->batch == 0 || cfg->batch > OUTBOX_RELAY_BATCH_MAX)
        return outbox_diag_set(d, OUTBOX_EINVAL, "relay config: batch must be 1..%d, got %zu",
                               OUTBOX_RELAY_BATCH_MAX, cfg->batch);
    if (cfg->pipeline == 0 || cfg->pipeline > OUTBOX_RELAY_PIPELINE_MAX)
        return outbox_diag_set(d, OUTBOX_EINVAL, "relay config: pipeline must be 1..%d, got %zu",
                               OUTBOX_RELAY_PIPELINE_MAX, cfg->pipeline);
    if (cfg->max_attempts < 1)
        return outbox_diag_set(d, OUTBOX_EINVAL, "relay config: max_attempts must be at least 1");
    /* Each is added to a clock reading (poll and pause to the monotonic
     * clock, a retry delay to the wall clock, the lease subtracted from
     * it); bounded, that never overflows. */
    const struct {
        const char *name;
        int64_t us;
    } durations[] = {
        {"lease_us", cfg->lease_us},
        {"poll_us", cfg->poll_us},
        {"backoff_base_us", cfg->backoff_base_us},
        {"backoff_cap_us", cfg->backoff_cap_us},
    };
    for (size_t i = 0; i < sizeof durations / sizeof durations[0]; i++)
        if (durations[i].us > OUTBOX_DURATION_MAX_US)
            return outbox_diag_set(d, OUTBOX_EINVAL,
                                   "relay config: %s is %lld, at most 36500 days (%lld us)",
                                   durations[i].name, (long long)durations[i].us,
                                   (long long)OUTBOX_DURATION_MAX_US);
    if (cfg->lease_us < 0 || cfg->poll_us <= 0)
        return outbox_diag_set(d, OUTBOX_EINVAL,
                               "relay config: lease must not be negative and poll must be above 0");
    if (cfg->backoff_base_us < 0 || cfg->backoff_cap_us < cfg->backoff_base_us)
        return outbox_diag_set(d, OUTBOX_EINVAL,
                               "relay config: backoff base must be >= 0 and cap >= base");
    if (cfg->hlc_order && !(outbox_store_capabilities(store) & OUTBOX_STORE_CAP_HLC))
        return outbox_diag_set(d, OUTBOX_ENOTSUP, "hlc ordering needs the hlc column on %s",
                               outbox_store_relation(store));
    outbox_relay_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return outbox_diag_set(d, OUTBOX_ENOMEM, "out of memory");
    r->store = store;
    r->sink = sink;
    r->cfg = *cfg;
    r->route = strdup(cfg->route);
    r->source = outbox_template_expand(cfg->source ? cfg->source : "/outbox/{route}", cfg->route);
    r->destination = outbox_template_expand(cfg->destination ? cfg->destination : "{route}", cfg->route);
    atomic_init(&r->stop, 0);
    atomic_init(&r->pipe_down, 0);
    if (cfg->observe != NULL)
        r->lag_us = calloc(cfg->batch, sizeof *r->lag_us);
    r->batches = calloc(cfg->pipeline, sizeof *r->batches);
    r->free_slots = calloc(cfg->pipeline, sizeof *r->free_slots);
    if (r->route == NULL || r->source == NULL || r->destination == NULL || r->batches == NULL ||
        r->free_slots == NULL || (cfg->observe != NULL && r->lag_us == NULL)) {
        outbox_relay_free(r);
        return outbox_diag_set(d, OUTBOX_ENOMEM, "out of memory");
    }
    /* A batch's arrays take a full batch at their first growth, so that
     * short claims (keys held by batches in flight) followed by a full one
     * do not allocate again in the steady state; a very large batch grows
     * to the claims it gets. */
    for (size_t i = 0; i < cfg->pipeline; i++)
        r->batches[i].presize = cfg->batch <= RELAY_PRESIZE_MAX ? cfg->batch : 0;
    start_renewer(r);
    *out = r;
    return OUTBOX_OK;
}

void outbox_relay_free(outbox_relay_t *r)
{
    if (r == NULL)
        return;
    outbox_renewer_stop(r->renewer);
    free(r->route);
    free(r->source);
    free(r->destination);
    free(r->lag_us);
    for (size_t i = 0; r->batches != NULL && i < r->cfg.pipeline; i++)
        outbox_batch_free(&r->batches[i]);
    free(r->batches);
    free(r->free_slots);
    free(r);
}

void outbox_relay_stop(outbox_relay_t *r)
{
    if (r != NULL)
        atomic_store(&r->stop, 1);
}

const char *outbox_relay_message(const outbox_relay_t *r)
{
    return r ? r->diag.message : "no relay";
}

void outbox_relay_counters(const outbox_relay_t *r, outbox_relay_counters_t *out)
{
    if (r != NULL && out != NULL)
        *out = r->counters;
}

/* Record a row's outcome; the error text is prefix followed by why. */
static void decide(batch_t *b, size_t i, int kind, int64_t available_at, const char *prefix,
                   const char *why)
{
    b->items[i].kind = kind;
    b->items[i].available_at = available_at;
    if (prefix != NULL) {
        size_t len = strlen(prefix) + (why ? strlen(why) : 0) + 1;
        free(b->errors[i]);
        b->errors[i] = malloc(len);
        if (b->errors[i] != NULL)
            snprintf(b->errors[i], len, "%s%s", prefix, why ? why : "");
        b->items[i].error = b->errors[i];
    }
}

/* FNV-1a: ordering keys are short strings; the table only groups a batch. */
static size_t key_hash(const char *k)
{
    uint64_t h = 14695981039346656037u;
    for (const unsigned char *p = (const unsigned char *)k; *p != '\0'; p++)
        h = (h ^ *p) * 1099511628211u;
    return (size_t)h;
}

/* The index of the first row of the batch with row i's key (i itself when
 * it is the first), found in the batch's key table in expected O(1). */
static size_t key_group(batch_t *b, size_t i)
{
    const char *key = b->rows[i].ordering_key;
    size_t mask = b->n_slots - 1;
    for (size_t h = key_hash(key) & mask;; h = (h + 1) & mask) {
        if (b->slots[h] == 0) {
            b->slots[h] = i + 1;
            return i;
        }
        size_t leader = b->slots[h] - 1;
        if (strcmp(b->rows[leader].ordering_key, key) == 0)
            return leader;
    }
}

/* Messages and key groups; rows out of attempts are dead at once. */
static void batch_prepare(outbox_relay_t *r, batch_t *b)
{
    for (size_t i = 0; i < b->n; i++) {
        const outbox_row_t *row = &b->rows[i];
        b->items[i].id = row->id;
        const char *key = row->ordering_key ? row->ordering_key : row->event_id;
        outbox_ce_build(row, r->source, key, &b->ce[i]);
        b->msgs[i] = (outbox_message_t){
            .route = row->route,
            .destination = r->destination,
            .key = key,
            .event_id = row->event_id,
            .payload = row->payload,
            .payload_len = row->payload_len,
            .headers = b->ce[i].headers,
            .n_headers = b->ce[i].n,
            .row = row,
        };
        b->group[i] = row->ordering_key != NULL ? key_group(b, i) : SIZE_MAX;
        if (row->attempts > r->cfg.max_attempts) {
            /* Claimed again after crashes: its attempts were spent without an outcome. */
            char why[96];
            snprintf(why, sizeof why, "attempts exhausted (%d of %d) without an outcome",
                     row->attempts - 1, r->cfg.max_attempts);
            decide(b, i, OUTBOX_SETTLE_DEAD, 0, "", why);
        }
    }
}

static void release_undecided(batch_t *b)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->items[i].kind == 0)
            decide(b, i, OUTBOX_SETTLE_RELEASE, 0, NULL, NULL);
}

/* Record one published message's outcome. */
static void take_result(outbox_relay_t *r, batch_t *b, size_t i, const outbox_publish_result_t *res)
{
    size_t g = b->group[i];
    if (g != SIZE_MAX && b->blocked[g]) {
        /* An earlier row of the key failed in this same call. */
        if (res->status == OUTBOX_PUBLISH_OK) {
            outbox_log(OUTBOX_LOG_WARN, "relay %s: sink delivered %s after an earlier row of its key failed",
                       r->route, b->rows[i].event_id);
            decide(b, i, OUTBOX_SETTLE_PUBLISHED, 0, NULL, NULL);
        } else {
            decide(b, i, OUTBOX_SETTLE_RELEASE, 0, NULL, NULL);
        }
        return;
    }
    /* Any failure stops the key for the rest of the batch, a REJECT too:
     * its dead verdict is not stored until the settle, and if the process
     * dies first the row is claimed again and may then be accepted. Had a
     * later row of its key gone out meanwhile, the rejected one would reach
     * the broker after it. */
    if (g != SIZE_MAX && res->status != OUTBOX_PUBLISH_OK)
        b->blocked[g] = 1;
    switch (res->status) {
    case OUTBOX_PUBLISH_OK:
        decide(b, i, OUTBOX_SETTLE_PUBLISHED, 0, NULL, NULL);
        break;
    case OUTBOX_PUBLISH_DEFER:
        /* Stuck outside the message (a partition without a leader): back
         * uncharged, and out of the next claims for backoff_base, so that
         * the stuck keys do not fill every batch while the others could go
         * (their later rows wait behind them by the key rule). */
        decide(b, i, OUTBOX_SETTLE_RELEASE,
               r->cfg.backoff_base_us > 0 ? outbox_now_us() + r->cfg.backoff_base_us : 0, NULL, NULL);
        break;
    case OUTBOX_PUBLISH_REJECT:
        decide(b, i, OUTBOX_SETTLE_DEAD, 0, "rejected: ", res->message);
        break;
    default:
        if (b->rows[i].attempts >= r->cfg.max_attempts) {
            decide(b, i, OUTBOX_SETTLE_DEAD, 0, "max attempts reached, last: ", res->message);
        } else {
            int64_t delay = outbox_backoff_us(r->cfg.backoff_base_us, r->cfg.backoff_cap_us,
                                              b->rows[i].attempts);
            decide(b, i, OUTBOX_SETTLE_RESCHEDULE, outbox_now_us() + delay, "retry: ", res->message);
        }
        break;
    }
}

/* One call of m messages, wave_msgs[0..m) for rows wave_idx[0..m); their
 * outcomes recorded. 1 when every one was RETRY: the sink looked down, and
 * the rest of the batch is released. */
static int publish_wave(outbox_relay_t *r, batch_t *b, size_t m)
{
    outbox_sink_publish(r->sink, b->wave_msgs, m, b->results);
    size_t retry = 0;
    for (size_t k = 0; k < m; k++)
        retry += b->results[k].status == OUTBOX_PUBLISH_RETRY;
    if (retry == m) {
        release_undecided(b);
        return 1;
    }
    for (size_t k = 0; k < m; k++)
        take_result(r, b, b->wave_idx[k], &b->results[k]);
    return 0;
}

/* An ordered sink: the whole batch in one call; the sink keeps each key's
 * order and stops a key at its first failure. */
static int publish_ordered(outbox_relay_t *r, batch_t *b)
{
    size_t m = 0;
    for (size_t i = 0; i < b->n; i++)
        if (b->items[i].kind == 0) {
            b->wave_idx[m] = i;
            b->wave_msgs[m++] = b->msgs[i];
        }
    return m > 0 && !atomic_load(&r->stop) ? publish_wave(r, b, m) : 0;
}

/* Any other sink: rounds of one call each, at most one row of a key in a
 * call. The first round holds the first row still to publish of every key
 * and every row without one; the next, the following row of each key
 * whose row came back OK. A key whose row failed gets no next round; its
 * later rows are released with whatever else is left. The chains live in
 * the batch's arrays: nothing is allocated. */
static int publish_rounds(outbox_relay_t *r, batch_t *b)
{
    size_t m = 0;
    for (size_t i = 0; i < b->n; i++) {
        b->next[i] = SIZE_MAX;
        b->last[i] = SIZE_MAX;
    }
    for (size_t i = 0; i < b->n; i++) {
        if (b->items[i].kind != 0)
            continue; /* dead before publishing: not in the chain */
        size_t g = b->group[i];
        if (g != SIZE_MAX && b->last[g] != SIZE_MAX)
            b->next[b->last[g]] = i;
        else
            b->round[m++] = i;
        if (g != SIZE_MAX)
            b->last[g] = i;
    }
    int down = 0;
    while (m > 0 && !down && !atomic_load(&r->stop)) {
        for (size_t k = 0; k < m; k++) {
            b->wave_idx[k] = b->round[k];
            b->wave_msgs[k] = b->msgs[b->round[k]];
        }
        down = publish_wave(r, b, m);
        size_t c = 0;
        for (size_t k = 0; k < m && !down; k++) {
            size_t i = b->wave_idx[k];
            if (b->items[i].kind == OUTBOX_SETTLE_PUBLISHED && b->next[i] != SIZE_MAX) {
                /* In array order: insert it among those found so far. */
                size_t j = c++;
                for (; j > 0 && b->round[j - 1] > b->next[i]; j--)
                    b->round[j] = b->round[j - 1];
                b->round[j] = b->next[i];
            }
        }
        m = c;
    }
    return down;
}

/* Publish the batch; 1 when the sink looked down. What was not published
 * is released. */
static int publish_batch(outbox_relay_t *r, batch_t *b)
{
    int down = outbox_sink_capabilities(r->sink) & OUTBOX_SINK_CAP_ORDERED ? publish_ordered(r, b)
                                                                            : publish_rounds(r, b);
    release_undecided(b);
    return down;
}

static void count_outcomes(outbox_relay_t *r, const batch_t *b)
{
    for (size_t i = 0; i < b->n; i++) {
        if (!b->items[i].applied) {
            r->counters.fence_lost++;
            continue;
        }
        switch (b->items[i].kind) {
        case OUTBOX_SETTLE_PUBLISHED: r->counters.published++; break;
        case OUTBOX_SETTLE_RESCHEDULE: r->counters.retried++; break;
        case OUTBOX_SETTLE_DEAD: r->counters.dead++; break;
        default: r->counters.released++; break;
        }
    }
}

static int settle_batch(outbox_relay_t *r, batch_t *b)
{
    int rc = OUTBOX_ETRANSIENT;
    /* Settling twice is harmless (the fence stops a second change), so a
     * transient failure is retried at once: fewer duplicates later. */
    for (int tries = 0; tries < 3 && rc == OUTBOX_ETRANSIENT; tries++) {
        size_t applied = 0;
        rc = outbox_store_settle(r->store, &b->fence, b->items, b->n, &applied);
        if (rc == OUTBOX_ETRANSIENT)
            outbox_sleep_us(50000 << tries, NULL);
    }
    if (rc == OUTBOX_ECONFLICT) {
        outbox_log(OUTBOX_LOG_WARN, "relay %s: %s (lease expired?)", r->route,
                   outbox_store_message(r->store));
        rc = OUTBOX_OK;
    }
    if (rc != OUTBOX_OK)
        return rfail(r, rc, "settle: %s", outbox_store_message(r->store));
    count_outcomes(r, b);
    return OUTBOX_OK;
}

/* ------------------------------------------------------------- the log
 *
 * What an operator reads: info lines when a relay starts and stops and
 * when the sink comes back, one warning when it goes down (the rest of an
 * outage is debug, so a long one does not flood the log), a debug line per
 * batch. The lines name drivers, never URIs, so no password can slip in. */

/* us in the largest unit that shows it exactly: "30s", "100ms", "1500us". */
static void format_duration(int64_t us, char buf[32])
{
    static const struct {
        const char *unit;
        int64_t us;
    } units[] = {{"d", INT64_C(86400000000)}, {"h", INT64_C(3600000000)}, {"m", INT64_C(60000000)},
                 {"s", 1000000}, {"ms", 1000}};
    const char *unit = us == 0 ? "s" : "us";
    int64_t n = us;
    for (size_t i = 0; i < sizeof units / sizeof units[0] && us != 0; i++)
        if (us % units[i].us == 0) {
            unit = units[i].unit;
            n = us / units[i].us;
            break;
        }
    snprintf(buf, 32, "%lld%s", (long long)n, unit);
}

static void log_start(const outbox_relay_t *r)
{
    char lease[32], poll[32], every[32];
    format_duration(r->cfg.lease_us, lease);
    format_duration(r->cfg.poll_us, poll);
    /* A third of a lease is seldom whole: shown to the millisecond. */
    int64_t third = r->cfg.lease_us / 3;
    format_duration(third >= 1000 ? (third + 500) / 1000 * 1000 : third, every);
    const outbox_driver_t *drv = outbox_store_driver(r->store);
    char pipe[40] = "";
    if (r->cfg.pipeline > 1)
        snprintf(pipe, sizeof pipe, " (pipeline of %zu)", r->cfg.pipeline);
    outbox_log(OUTBOX_LOG_INFO,
               "relay %s: started: store %s (%s), batch %zu%s, max attempts %d, lease %s (%s%s), "
               "poll %s%s",
               r->route, drv && drv->name ? drv->name : "?", outbox_store_relation(r->store),
               r->cfg.batch, pipe, r->cfg.max_attempts, lease,
               r->renewer ? "renewed every " : "not renewed", r->renewer ? every : "", poll,
               r->cfg.hlc_order ? ", hlc order" : "");
}

static void log_stop(const outbox_relay_t *r, const char *why)
{
    const outbox_relay_counters_t *c = &r->counters;
    outbox_log(OUTBOX_LOG_INFO,
               "relay %s: stopped (%s): claimed %llu, published %llu, retried %llu, dead %llu, "
               "released %llu, leases renewed %llu",
               r->route, why, (unsigned long long)c->claimed, (unsigned long long)c->published,
               (unsigned long long)c->retried, (unsigned long long)c->dead,
               (unsigned long long)c->released,
               (unsigned long long)(r->renewer ? outbox_renewer_count(r->renewer) : 0));
}

static size_t count_kind(const batch_t *b, int kind)
{
    size_t n = 0;
    for (size_t i = 0; i < b->n; i++)
        n += b->items[i].kind == kind;
    return n;
}

/* What a run does about a run of transient failures, for the line that
 * reports its first one. */
static const char *retry_policy(const outbox_relay_t *r)
{
    if (r->cfg.until_idle)
        return "; until-idle gives up after " RELAY_STR(RELAY_IDLE_GIVE_UP) " transient failures in a row";
    return ", and for as long as it fails (a warning every " RELAY_STR(RELAY_WARN_EVERY) " failures)";
}

/* The batch the breaker just released: a warning if it starts an outage,
 * and every RELAY_WARN_EVERY batches while it lasts. */
static void log_outage(outbox_relay_t *r, const batch_t *b)
{
    const char *why = b->results[0].message[0] ? b->results[0].message : "every message was retried";
    snprintf(r->outage_why, sizeof r->outage_why, "%s", why);
    long long pause_ms = (long long)((r->pause_us + 999) / 1000);
    size_t released = count_kind(b, OUTBOX_SETTLE_RELEASE);
    if (r->outage_since_us == 0) {
        r->outage_since_us = outbox_monotonic_us();
        r->outage_batches = 1;
        outbox_log(OUTBOX_LOG_WARN,
                   "relay %s: sink unavailable (%s): released %zu rows, pausing %lld ms, then retrying%s",
                   r->route, why, released, pause_ms, retry_policy(r));
        return;
    }
    r->outage_batches++;
    if (!r->cfg.until_idle && r->outage_batches % RELAY_WARN_EVERY == 0)
        outbox_log(OUTBOX_LOG_WARN,
                   "relay %s: sink still unavailable after %llu batches released (%s): pausing %lld ms, "
                   "then retrying",
                   r->route, (unsigned long long)r->outage_batches, why, pause_ms);
    else
        outbox_log(OUTBOX_LOG_DEBUG,
                   "relay %s: sink still unavailable (%s): released %zu rows, pausing %lld ms", r->route,
                   why, released, pause_ms);
}

/* A batch the breaker did not release: if the sink gave a verdict on any
 * row (rows dead-lettered for attempts spent before this claim had none),
 * an outage being reported is over. */
static void log_recovery(outbox_relay_t *r, const batch_t *b)
{
    if (r->outage_since_us == 0)
        return;
    size_t answered = count_kind(b, OUTBOX_SETTLE_PUBLISHED) + count_kind(b, OUTBOX_SETTLE_RESCHEDULE);
    for (size_t i = 0; i < b->n; i++)
        answered += b->items[i].kind == OUTBOX_SETTLE_DEAD && b->rows[i].attempts <= r->cfg.max_attempts;
    if (answered == 0)
        return;
    long long ms = (long long)((outbox_monotonic_us() - r->outage_since_us) / 1000);
    outbox_log(OUTBOX_LOG_INFO, "relay %s: sink recovered after %lld ms (%llu batch%s released)", r->route,
               ms, (unsigned long long)r->outage_batches, r->outage_batches == 1 ? "" : "es");
    r->outage_since_us = 0;
    r->outage_batches = 0;
}

static void log_batch(const outbox_relay_t *r, size_t claimed, const outbox_relay_counters_t *before,
                      int64_t started_us)
{
    const outbox_relay_counters_t *c = &r->counters;
    char fence[48] = "";
    if (c->fence_lost > before->fence_lost)
        snprintf(fence, sizeof fence, ", fence lost %llu",
                 (unsigned long long)(c->fence_lost - before->fence_lost));
    outbox_log(OUTBOX_LOG_DEBUG,
               "relay %s: batch: claimed %zu, published %llu, retried %llu, dead %llu, released %llu%s, "
               "%lld ms",
               r->route, claimed, (unsigned long long)(c->published - before->published),
               (unsigned long long)(c->retried - before->retried),
               (unsigned long long)(c->dead - before->dead),
               (unsigned long long)(c->released - before->released), fence,
               (long long)((outbox_monotonic_us() - started_us) / 1000));
}

/* ------------------------------------------------------------ the loop */

/* Hand the observer what this step did (only called with one). */
static void observe_step(outbox_relay_t *r, outbox_relay_observation_t *o,
                         const outbox_relay_counters_t *before, int rc)
{
    const outbox_relay_counters_t *c = &r->counters;
    o->struct_size = sizeof *o;
    o->route = r->route;
    o->claimed = c->claimed - before->claimed;
    o->published = c->published - before->published;
    o->retried = c->retried - before->retried;
    o->dead = c->dead - before->dead;
    o->released = c->released - before->released;
    o->fence_lost = c->fence_lost - before->fence_lost;
    o->breaker_open = r->outage_streak > 0;
    o->ok = rc == OUTBOX_OK;
    o->error = !o->ok ? r->diag.message : o->outage ? r->outage_why : "";
    if (o->lag_us == NULL)
        o->lag_us = r->lag_us;
    r->cfg.observe(r->cfg.observe_ctx, o);
}

/* ---------------------------------------------------------- the stages
 *
 * A batch goes through three: claim (into one of the relay's batches),
 * publish, settle. A step runs them one after the other; a pipelined run
 * publishes on a thread of its own while its own thread settles and
 * claims. The claim and the settle touch the store and the relay's
 * counters, on the relay's thread only; the publish touches the sink and
 * the batch only. */

/* Claim into batch `slot`; b->n = 0 when nothing was claimable. own: copy
 * the rows, which must outlive the store's next claim. An observed step
 * that ends here (nothing claimed, or a failure) is reported here. */
static int claim_stage(outbox_relay_t *r, size_t slot, int own)
{
    batch_t *b = &r->batches[slot];
    outbox_relay_counters_t before = r->counters;
    b->claimed_us = outbox_monotonic_us();
    outbox_claim_req_t req = {
        .struct_size = sizeof req,
        .route = r->route,
        .limit = r->cfg.batch,
        .lease_us = r->cfg.lease_us,
        .hlc_order = r->cfg.hlc_order,
    };
    int rc = outbox_store_claim(r->store, &req, &b->rows, &b->n, &b->fence);
    b->claim_us = outbox_monotonic_us() - b->claimed_us;
    outbox_relay_observation_t obs = {.claim_us = b->claim_us, .publish_us = -1, .settle_us = -1};
    if (rc != OUTBOX_OK) {
        b->n = 0;
        rc = rfail(r, rc, "claim: %s", outbox_store_message(r->store));
        if (r->cfg.observe != NULL)
            observe_step(r, &obs, &before, rc);
        return rc;
    }
    if (b->n == 0) {
        if (r->cfg.observe != NULL)
            observe_step(r, &obs, &before, OUTBOX_OK);
        return OUTBOX_OK;
    }
    r->counters.claimed += b->n;
    rc = outbox_batch_fit(b);
    if (rc == OUTBOX_OK && own)
        rc = outbox_batch_own(b);
    if (rc != OUTBOX_OK) {
        /* Hand the rows back uncharged rather than sit on them until the
         * lease ends: in the batch's items when it has room for them, else
         * in an array of their own if that much memory is left. */
        outbox_settle_item_t *items = b->n <= b->cap ? b->items : calloc(b->n, sizeof *items);
        for (size_t i = 0; items != NULL && i < b->n; i++)
            items[i] = (outbox_settle_item_t){.id = b->rows[i].id, .kind = OUTBOX_SETTLE_RELEASE};
        if (items != NULL)
            outbox_store_settle(r->store, &b->fence, items, b->n, NULL);
        if (items != b->items)
            free(items);
        b->n = 0;
        rc = rfail(r, rc, "relay: out of memory preparing a batch");
        if (r->cfg.observe != NULL)
            observe_step(r, &obs, &before, rc);
        return rc;
    }
    if (r->renewer != NULL) {
        for (size_t i = 0; i < b->n; i++)
            b->ids[i] = b->rows[i].id;
        outbox_renewer_hold(r->renewer, slot, &b->fence, b->ids, b->n, b->claimed_us);
    }
    batch_prepare(r, b);
    return OUTBOX_OK;
}

/* Publish a claimed batch; what it did is noted in the batch. */
static void publish_stage(outbox_relay_t *r, batch_t *b)
{
    int64_t t0 = outbox_monotonic_us();
    int down = publish_batch(r, b);
    b->publish_us = outbox_monotonic_us() - t0;
    b->published_at = outbox_now_us();
    b->down = down;
}

/* The publishing thread of a pipelined run: a batch that comes after the
 * sink looked down, or after a stop request, goes back unpublished. */
static void pipe_work(void *ctx, void *item)
{
    outbox_relay_t *r = ctx;
    batch_t *b = item;
    if (atomic_load(&r->pipe_down) || atomic_load(&r->stop)) {
        b->skipped = 1;
        release_undecided(b);
        return;
    }
    publish_stage(r, b);
    if (b->down)
        atomic_store(&r->pipe_down, 1);
}

/* The breaker's part of a published batch: an outage opens it (the next
 * claim waits r->pause_us), a batch the sink answered closes it. */
static void breaker(outbox_relay_t *r, batch_t *b)
{
    if (b->down) {
        r->counters.outages++;
        r->outage_streak++;
        int64_t pause = outbox_backoff_us(r->cfg.backoff_base_us, r->cfg.backoff_cap_us, r->outage_streak);
        r->pause_us = pause > r->cfg.poll_us ? pause : r->cfg.poll_us;
        log_outage(r, b);
    } else if (!b->skipped) {
        r->outage_streak = 0;
        log_recovery(r, b);
    }
}

/* Settle batch `slot` with its own (newest) fence, and report the step. */
static int settle_stage(outbox_relay_t *r, size_t slot)
{
    batch_t *b = &r->batches[slot];
    /* The counters this batch changes, as they were before its claim. */
    outbox_relay_counters_t before = r->counters;
    before.claimed -= b->n;
    /* From here on the fence no longer moves: settle with the newest. */
    if (r->renewer != NULL)
        outbox_renewer_release(r->renewer, slot, &b->fence);
    int observed = r->cfg.observe != NULL;
    outbox_relay_observation_t obs = {
        .claim_us = b->claim_us,
        .publish_us = b->publish_us,
        .outage = b->down || (b->skipped && atomic_load(&r->pipe_down)),
    };
    if (observed && b->publish_us >= 0)
        for (size_t i = 0; i < b->n; i++)
            r->lag_us[i] = b->published_at - b->rows[i].created_at;
    breaker(r, b);
    release_undecided(b);
    int64_t t0 = outbox_monotonic_us();
    int rc = settle_batch(r, b);
    if (rc == OUTBOX_OK)
        log_batch(r, b->n, &before, b->claimed_us);
    if (observed) {
        obs.settle_us = outbox_monotonic_us() - t0;
        /* The rows counted as published: applied by the settle. */
        for (size_t i = 0; rc == OUTBOX_OK && b->publish_us >= 0 && i < b->n; i++)
            if (b->items[i].applied && b->items[i].kind == OUTBOX_SETTLE_PUBLISHED)
                r->lag_us[obs.n_lag++] = r->lag_us[i];
        observe_step(r, &obs, &before, rc);
    }
    outbox_batch_clear(b);
    return rc;
}

int outbox_relay_step(outbox_relay_t *r, size_t *claimed)
{
    if (claimed != NULL)
        *claimed = 0;
    if (r == NULL)
        return OUTBOX_EINVAL;
    outbox_diag_clear(&r->diag);
    r->pause_us = 0;
    if (atomic_load(&r->stop))
        return OUTBOX_OK;
    int rc = claim_stage(r, 0, 0);
    if (rc != OUTBOX_OK || r->batches[0].n == 0)
        return rc;
    if (claimed != NULL)
        *claimed = r->batches[0].n;
    publish_stage(r, &r->batches[0]);
    return settle_stage(r, 0);
}

/* Wait for new rows: the store's push wake-up when it has one, in slices
 * short enough to notice a stop request; otherwise an interruptible poll. */
static void idle_wait(outbox_relay_t *r)
{
    if (!(outbox_store_capabilities(r->store) & OUTBOX_STORE_CAP_WAIT)) {
        outbox_sleep_us(r->cfg.poll_us, &r->stop);
        return;
    }
    int64_t us = r->cfg.poll_us;
    us = us < 1000 ? 1000 : us > 250000 ? 250000 : us;
    outbox_store_wait_for(r->store, r->route, us);
}

/* A step that failed with a transient store error, about to pause for
 * pause_us: a warning for the first of a run and every RELAY_WARN_EVERY
 * after it, debug lines between. */
static void log_store_failure(const outbox_relay_t *r, int errors, int64_t pause_us)
{
    long long pause_ms = (long long)((pause_us + 999) / 1000);
    if (errors == 1)
        outbox_log(OUTBOX_LOG_WARN, "relay %s: %s: retrying in %lld ms%s", r->route, r->diag.message,
                   pause_ms, retry_policy(r));
    else if (!r->cfg.until_idle && errors % RELAY_WARN_EVERY == 0)
        outbox_log(OUTBOX_LOG_WARN, "relay %s: still failing after %d attempts in a row: %s: retrying in %lld ms",
                   r->route, errors, r->diag.message, pause_ms);
    else
        outbox_log(OUTBOX_LOG_DEBUG, "relay %s: %s: retrying in %lld ms (failure %d in a row)", r->route,
                   r->diag.message, pause_ms, errors);
}

/* The end of the run under until_idle after failures consecutive failed
 * steps, the last a store error (store) or an outage: the reason is the
 * last failure's. */
static int give_up(outbox_relay_t *r, int failures, int store)
{
    char last[OUTBOX_MESSAGE_MAX]; /* the store's diag is about to be overwritten */
    snprintf(last, sizeof last, "%s", store ? r->diag.message : r->outage_why);
    return rfail(r, OUTBOX_ETRANSIENT,
                 "giving up on route %s after %d consecutive transient failures under until-idle: %s%s",
                 r->route, failures, store ? "" : "sink unavailable: ", last);
}

/* Runs of failures, as both loops count them. */
typedef struct streak {
    int errors;   /* consecutive transient store errors: their backoff and log */
    int failures; /* consecutive failed steps of either kind: the until_idle bound */
    int64_t failing_since_us;
} streak_t;

/* A step or settle that failed with a transient store error (connection
 * trouble, a lock, a full disk): OUTBOX_OK and *pause, how long to back
 * off (the lease protects the rows), or under until_idle the error that
 * ends the run. */
static int store_failed(outbox_relay_t *r, streak_t *s, int64_t *pause)
{
    if (s->errors++ == 0)
        s->failing_since_us = outbox_monotonic_us();
    if (++s->failures >= RELAY_IDLE_GIVE_UP && r->cfg.until_idle)
        return give_up(r, s->failures, 1);
    *pause = outbox_backoff_us(r->cfg.poll_us, 5000000, s->errors) + r->cfg.poll_us;
    log_store_failure(r, s->errors, *pause);
    return OUTBOX_OK;
}

/* The store answered: a run of its failures is over. */
static void store_answered(outbox_relay_t *r, streak_t *s)
{
    if (s->errors > 0)
        outbox_log(OUTBOX_LOG_INFO, "relay %s: store recovered after %d failure%s in a row (%lld ms)",
                   r->route, s->errors, s->errors == 1 ? "" : "s",
                   (long long)((outbox_monotonic_us() - s->failing_since_us) / 1000));
    s->errors = 0;
}

/* A batch the sink turned down (the breaker released it): a failure, or
 * under until_idle the error that ends the run, unless some of it went
 * out first; that is progress, and ends a run of failures like any other
 * delivery. */
static int sink_failed(outbox_relay_t *r, streak_t *s, int progressed)
{
    if (progressed)
        s->failures = 0;
    else if (++s->failures >= RELAY_IDLE_GIVE_UP && r->cfg.until_idle)
        return give_up(r, s->failures, 0);
    return OUTBOX_OK;
}

/* The loop of outbox_relay_run; *why says why it ended well. */
static int run_loop(outbox_relay_t *r, const char **why)
{
    streak_t s = {0};
    while (!atomic_load(&r->stop)) {
        size_t claimed = 0;
        uint64_t published = r->counters.published;
        int rc = outbox_relay_step(r, &claimed);
        if (rc != OUTBOX_OK && rc != OUTBOX_ETRANSIENT)
            return rc;
        if (rc == OUTBOX_ETRANSIENT) {
            int64_t pause = 0;
            if ((rc = store_failed(r, &s, &pause)) != OUTBOX_OK)
                return rc;
            outbox_sleep_us(pause, &r->stop);
            continue;
        }
        if (r->pause_us > 0) {
            if ((rc = sink_failed(r, &s, r->counters.published > published)) != OUTBOX_OK)
                return rc;
        } else {
            s.failures = 0;
        }
        store_answered(r, &s);
        if (r->pause_us > 0) {
            outbox_sleep_us(r->pause_us, &r->stop);
        } else if (claimed == 0) {
            if (r->cfg.until_idle) {
                *why = "nothing left to claim";
                return OUTBOX_OK;
            }
            idle_wait(r);
        }
    }
    return OUTBOX_OK;
}

/* ------------------------------------------------- the pipelined loop
 *
 * Up to cfg.pipeline batches in flight: the publishing thread (pipe_work)
 * publishes them in claim order while this thread settles each one it
 * hands back and claims the next into a free batch. Per-key order needs
 * nothing more: a batch's rows stay in processing until it is settled,
 * and the store never hands out a key that has a row in processing, so a
 * key is in one batch of the pipeline at most, and its next rows are
 * claimed only once that batch's outcomes (a retry's delay, a dead row)
 * are stored. Each batch keeps its own fence, and the renewer holds each
 * from its claim to its settle.
 *
 * When a batch finds the sink down, the publishing thread releases every
 * later batch unpublished; they are settled (uncharged) as they come back.
 * Claims wait for the breaker's pause, then one batch goes alone until the
 * sink answers one. A stop request: no more claims; the batch being
 * published finishes, the later ones go back unpublished, and the run
 * returns once every batch is settled. */

typedef struct pipe_run {
    outbox_pipe_t *pipe;
    size_t in_flight;
    size_t free_head, n_free; /* r->free_slots as a ring: taken in turn, so
                               * every batch is used within the first claims */
    streak_t streak;
    int64_t resume_us; /* monotonic: no claim before (the breaker, a store error) */
    int probing;       /* after an outage: one batch at a time until the sink answers */
    int empty;         /* the last claim found nothing */
    int rc;            /* a failure that ends the run once every batch is settled */
    const char *why;
} pipe_run_t;

static size_t slot_take(outbox_relay_t *r, pipe_run_t *pr)
{
    size_t slot = r->free_slots[pr->free_head];
    pr->free_head = (pr->free_head + 1) % r->cfg.pipeline;
    pr->n_free--;
    return slot;
}

static void slot_give(outbox_relay_t *r, pipe_run_t *pr, size_t slot)
{
    r->free_slots[(pr->free_head + pr->n_free++) % r->cfg.pipeline] = slot;
}

/* A transient store failure: no claim before the pause has passed. */
static void pipe_store_failed(outbox_relay_t *r, pipe_run_t *pr)
{
    int64_t pause = 0;
    int rc = store_failed(r, &pr->streak, &pause);
    if (rc != OUTBOX_OK && pr->rc == OUTBOX_OK)
        pr->rc = rc;
    pr->resume_us = outbox_monotonic_us() + pause;
}

/* Settle a batch the publishing thread handed back, and free it. */
static void pipe_settle(outbox_relay_t *r, pipe_run_t *pr, batch_t *b)
{
    size_t slot = (size_t)(b - r->batches);
    int down = b->down, skipped = b->skipped;
    uint64_t published = r->counters.published;
    r->pause_us = 0;
    int rc = settle_stage(r, slot);
    b->in_flight = 0;
    pr->in_flight--;
    slot_give(r, pr, slot);
    pr->empty = 0; /* its keys are free again, and its retries may be due */
    if (rc != OUTBOX_OK && rc != OUTBOX_ETRANSIENT) {
        if (pr->rc == OUTBOX_OK)
            pr->rc = rc;
        return;
    }
    if (rc == OUTBOX_ETRANSIENT) {
        pipe_store_failed(r, pr);
        return;
    }
    if (down) {
        pr->probing = 1;
        pr->resume_us = outbox_monotonic_us() + r->pause_us;
        rc = sink_failed(r, &pr->streak, r->counters.published > published);
        if (rc != OUTBOX_OK && pr->rc == OUTBOX_OK)
            pr->rc = rc;
    } else if (!skipped) {
        pr->probing = 0;
        pr->streak.failures = 0;
    }
    store_answered(r, &pr->streak);
}

/* 1 when a batch in flight has less than a third of its lease left: a
 * claim now could take its rows again (a claim takes rows whose lease ran
 * out, a relay's own among them), so the relay waits for that batch to be
 * settled or renewed first. With renewal this happens only when renewals
 * fall behind; without, it keeps the pipeline short enough for the lease. */
static int lease_at_risk(outbox_relay_t *r)
{
    int64_t now = outbox_monotonic_us();
    for (size_t i = 0; i < r->cfg.pipeline; i++) {
        const batch_t *b = &r->batches[i];
        if (!b->in_flight)
            continue;
        int64_t leased = r->renewer != NULL ? outbox_renewer_leased_at(r->renewer, i) : b->claimed_us;
        if (now - leased > r->cfg.lease_us - r->cfg.lease_us / 3)
            return 1;
    }
    return 0;
}

/* Claim the next batch and hand it to the publishing thread. */
static void pipe_claim(outbox_relay_t *r, pipe_run_t *pr)
{
    if (pr->in_flight == 0)
        atomic_store(&r->pipe_down, 0); /* every batch the outage caught is settled */
    size_t slot = slot_take(r, pr);
    outbox_diag_clear(&r->diag);
    int rc = claim_stage(r, slot, 1);
    if (rc != OUTBOX_OK || r->batches[slot].n == 0)
        slot_give(r, pr, slot);
    if (rc == OUTBOX_ETRANSIENT) {
        pipe_store_failed(r, pr);
        return;
    }
    if (rc != OUTBOX_OK) {
        pr->rc = rc;
        return;
    }
    store_answered(r, &pr->streak);
    pr->empty = r->batches[slot].n == 0;
    if (pr->empty)
        return;
    r->batches[slot].in_flight = 1;
    outbox_pipe_put(pr->pipe, &r->batches[slot]);
    pr->in_flight++;
}

static int run_pipelined(outbox_relay_t *r, const char **why)
{
    pipe_run_t pr = {.n_free = r->cfg.pipeline};
    for (size_t i = 0; i < r->cfg.pipeline; i++)
        r->free_slots[i] = i;
    if (outbox_pipe_start(r->cfg.pipeline, pipe_work, r, &pr.pipe) != OUTBOX_OK)
        return rfail(r, OUTBOX_ENOMEM, "relay: cannot start the publishing thread");
    /* A stop request is noticed within this. */
    const int64_t slice_us = 100000;
    for (;;) {
        batch_t *b;
        while ((b = outbox_pipe_take(pr.pipe, 0)) != NULL)
            pipe_settle(r, &pr, b);
        int64_t now = outbox_monotonic_us();
        if (atomic_load(&r->stop) || pr.rc != OUTBOX_OK || pr.why != NULL) {
            if (pr.in_flight == 0)
                break;
            if ((b = outbox_pipe_take(pr.pipe, now + slice_us)) != NULL)
                pipe_settle(r, &pr, b);
            continue;
        }
        if (now < pr.resume_us || pr.n_free == 0 ||
            (pr.in_flight > 0 && (pr.probing || pr.empty || lease_at_risk(r)))) {
            /* Wait for a batch to settle (it frees a batch, and its keys),
             * or for the pause to pass, or for a renewal: with batches in
             * flight, in tenths of a short lease (1 ms at least). */
            int64_t step = slice_us;
            if (pr.in_flight > 0 && r->cfg.lease_us / 10 < step)
                step = r->cfg.lease_us / 10 > 1000 ? r->cfg.lease_us / 10 : 1000;
            int64_t until = now + step;
            if (now < pr.resume_us && pr.resume_us < until)
                until = pr.resume_us;
            if ((b = outbox_pipe_take(pr.pipe, until)) != NULL)
                pipe_settle(r, &pr, b);
            continue;
        }
        if (pr.empty) {
            /* Nothing claimable, nothing in flight. */
            if (r->cfg.until_idle) {
                pr.why = "nothing left to claim";
                continue;
            }
            idle_wait(r);
            pr.empty = 0;
            continue;
        }
        pipe_claim(r, &pr);
    }
    outbox_pipe_stop(pr.pipe);
    if (pr.why != NULL)
        *why = pr.why;
    return pr.rc;
}

int outbox_relay_run(outbox_relay_t *r)
{
    if (r == NULL)
        return OUTBOX_EINVAL;
    log_start(r);
    const char *why = "stop requested";
    int rc = r->cfg.pipeline > 1 ? run_pipelined(r, &why) : run_loop(r, &why);
    log_stop(r, rc == OUTBOX_OK ? why : "on an error");
    return rc;
}
