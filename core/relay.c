/* A relay's life outside its run: the config's defaults and checks, the
 * relay's creation (with its lease renewer) and end, the stop request, and
 * what it reports between runs (its last error, its counters). The run is
 * in relay_run.c, the struct and what the relay's files share in
 * relay_int.h. */
#include <stdlib.h>
#include <string.h>

#include "relay_int.h"

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

/* The caller's tracer, as far as its struct_size covers it, into *out. */
static int read_tracer(const outbox_relay_tracer_t *t, outbox_relay_tracer_t *out, outbox_diag_t *d)
{
    if (t->struct_size < sizeof(uint32_t))
        return outbox_diag_set(d, OUTBOX_EINVAL, "relay config: the tracer's struct_size is not set");
    out->struct_size = sizeof *out;
    OUTBOX_STRUCT_READ(outbox_relay_tracer_t, out, t, begin);
    OUTBOX_STRUCT_READ(outbox_relay_tracer_t, out, t, end);
    OUTBOX_STRUCT_READ(outbox_relay_tracer_t, out, t, ctx);
    if (out->begin == NULL || out->end == NULL)
        return outbox_diag_set(d, OUTBOX_EINVAL, "relay config: a tracer needs both begin and end");
    return OUTBOX_OK;
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
    OUTBOX_STRUCT_READ(outbox_relay_config_t, &c, cfg, tracer);
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
    outbox_relay_tracer_t tracer = {0};
    if (cfg->tracer != NULL && read_tracer(cfg->tracer, &tracer, d) != OUTBOX_OK)
        return OUTBOX_EINVAL;
    outbox_relay_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return outbox_diag_set(d, OUTBOX_ENOMEM, "out of memory");
    r->store = store;
    r->sink = sink;
    r->cfg = *cfg;
    r->tracer = tracer;
    const outbox_driver_t *sink_drv = outbox_sink_driver(sink);
    r->sink_name = sink_drv != NULL && sink_drv->name != NULL ? sink_drv->name : "";
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
    for (size_t i = 0; i < cfg->pipeline; i++) {
        r->batches[i].presize = cfg->batch <= RELAY_PRESIZE_MAX ? cfg->batch : 0;
        r->batches[i].want_trace = tracer.begin != NULL;
    }
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
