/* What the relay tells: the error text of a failed call (outbox_relay_fail),
 * the lines it logs (a relay's start and stop, an outage and its end, each
 * batch, a store that fails) and what it hands the observer after each
 * step. It reads the relay and its batches and calls none of the relay's
 * other files. */
#include <stdio.h>

#include "relay_int.h"

#define RELAY_STR_(x) #x
#define RELAY_STR(x) RELAY_STR_(x)

int outbox_relay_fail(outbox_relay_t *r, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    outbox_diag_vset(&r->diag, code, fmt, ap);
    va_end(ap);
    return code;
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

void outbox_relay_log_start(const outbox_relay_t *r)
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

void outbox_relay_log_stop(const outbox_relay_t *r, const char *why)
{
    const outbox_relay_counters_t *c = &r->counters;
    /* Rows whose lease ran out under this relay: another relay may have
     * published them too. */
    char lost[48] = "";
    if (c->fence_lost)
        snprintf(lost, sizeof lost, ", fence lost %llu", (unsigned long long)c->fence_lost);
    outbox_log(OUTBOX_LOG_INFO,
               "relay %s: stopped (%s): claimed %llu, published %llu, retried %llu, dead %llu, "
               "released %llu, leases renewed %llu%s",
               r->route, why, (unsigned long long)c->claimed, (unsigned long long)c->published,
               (unsigned long long)c->retried, (unsigned long long)c->dead,
               (unsigned long long)c->released,
               (unsigned long long)(r->renewer ? outbox_renewer_count(r->renewer) : 0), lost);
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
void outbox_relay_log_outage(outbox_relay_t *r, const batch_t *b)
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
void outbox_relay_log_recovery(outbox_relay_t *r, const batch_t *b)
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

void outbox_relay_log_batch(const outbox_relay_t *r, size_t claimed,
                            const outbox_relay_counters_t *before, int64_t started_us)
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

/* A step that failed with a transient store error, about to pause for
 * pause_us: a warning for the first of a run and every RELAY_WARN_EVERY
 * after it, debug lines between. */
void outbox_relay_log_store_failure(const outbox_relay_t *r, int errors, int64_t pause_us)
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

/* Hand the observer what this step did (only called with one). */
void outbox_relay_observe_step(outbox_relay_t *r, outbox_relay_observation_t *o,
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
