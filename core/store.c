/* The store handle: a loaded store driver, one of its connections, and the
 * checks the core makes before anything reaches the driver. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox/kit.h"
#include "outbox_int.h"

/* Read a vtable member only when the driver's vtable is large enough to have it. */
#define VT_HAS(vt, m) OUTBOX_ENTRY_HAS(outbox_store_vtable_t, vt, m)

typedef struct route_cfg {
    char *route;
    int require_transaction;
    int hlc;
    char *node_key;
} route_cfg_t;

struct outbox_store {
    const outbox_driver_t *drv;
    const outbox_store_vtable_t *vt;
    void *h;
    outbox_uri_owned_t uri;
    char *uri_text;    /* as given, for outbox_store_twin */
    char *driver_name; /* opts->driver as given, or NULL */
    uint32_t flags;
    char *relation;
    char *checkpoint_relation;
    char *inbox_relation;
    uint32_t caps;
    int in_tx;
    route_cfg_t *routes;
    size_t n_routes;
    outbox_diag_t diag;
};

static int fail(outbox_store_t *s, int code, const char *fmt, ...) OUTBOX_PRINTF(3, 4);
static int fail(outbox_store_t *s, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    outbox_diag_vset(&s->diag, code, fmt, ap);
    va_end(ap);
    return code;
}

/* Driver calls report into s->diag; make sure a failure always has words. */
static int driver_rc(outbox_store_t *s, int rc, const char *op)
{
    if (rc != OUTBOX_OK && s->diag.message[0] == '\0')
        fail(s, rc, "%s: %s", op, outbox_strerror(rc));
    else if (rc != OUTBOX_OK)
        s->diag.code = rc;
    return rc;
}

static int not_supported(outbox_store_t *s, const char *what)
{
    return fail(s, OUTBOX_ENOTSUP, "the %s store driver does not support %s", s->drv->name, what);
}

/* name in the schema of relation (none when relation has none). */
static char *beside(const char *relation, const char *name)
{
    const char *dot = strchr(relation, '.');
    size_t schema = dot ? (size_t)(dot - relation) + 1 : 0, len = strlen(name) + 1;
    char *out = malloc(schema + len);
    if (out != NULL) {
        memcpy(out, relation, schema);
        memcpy(out + schema, name, len);
    }
    return out;
}

static char *default_checkpoint_relation(const char *relation)
{
    return beside(relation, "hlc_checkpoint");
}

static char *default_inbox_relation(const char *relation)
{
    return beside(relation, "outbox_inbox");
}

static int inbox_relation_ok(outbox_diag_t *d, const char *inbox)
{
    if (inbox != NULL && !outbox_relation_valid(inbox))
        return outbox_diag_set(d, OUTBOX_EINVAL, "invalid inbox relation name \"%s\"", inbox);
    return OUTBOX_OK;
}

/* Relation names given by users: NULL means "the default", anything else
 * must be a plain or schema-qualified identifier. */
static int relations_ok(outbox_diag_t *d, const char *relation, const char *ckpt)
{
    if (relation != NULL && !outbox_relation_valid(relation))
        return outbox_diag_set(d, OUTBOX_EINVAL,
                               "invalid relation name \"%s\": expected name or schema.name of letters, digits and _",
                               relation);
    if (ckpt != NULL && !outbox_relation_valid(ckpt))
        return outbox_diag_set(d, OUTBOX_EINVAL, "invalid checkpoint relation name \"%s\"", ckpt);
    return OUTBOX_OK;
}

int outbox_store_open(const char *uri, const outbox_store_options_t *opts, outbox_store_t **out,
                      outbox_diag_t *d)
{
    outbox_diag_clear(d);
    if (out == NULL)
        return outbox_diag_set(d, OUTBOX_EINVAL, "outbox_store_open: out is NULL");
    *out = NULL;
    if (uri == NULL)
        return outbox_diag_set(d, OUTBOX_EINVAL, "store URI is missing");
    outbox_store_options_t o = {.struct_size = sizeof o};
    if (opts != NULL) {
        if (opts->struct_size < sizeof(uint32_t))
            return outbox_diag_set(d, OUTBOX_EINVAL, "store options: struct_size not set");
        OUTBOX_STRUCT_READ(outbox_store_options_t, &o, opts, relation);
        OUTBOX_STRUCT_READ(outbox_store_options_t, &o, opts, checkpoint_relation);
        OUTBOX_STRUCT_READ(outbox_store_options_t, &o, opts, driver);
        OUTBOX_STRUCT_READ(outbox_store_options_t, &o, opts, flags);
        OUTBOX_STRUCT_READ(outbox_store_options_t, &o, opts, inbox_relation);
    }
    outbox_store_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return outbox_diag_set(d, OUTBOX_ENOMEM, "out of memory");
    const char *relation = o.relation ? o.relation : "outbox";
    const char *ckpt = o.checkpoint_relation;
    int rc = outbox_uri_parse(uri, &s->uri, d);
    if (rc != OUTBOX_OK)
        goto failed;
    rc = relations_ok(d, relation, ckpt);
    if (rc == OUTBOX_OK)
        rc = inbox_relation_ok(d, o.inbox_relation);
    if (rc != OUTBOX_OK)
        goto failed;
    s->relation = strdup(relation);
    s->checkpoint_relation = ckpt ? strdup(ckpt) : default_checkpoint_relation(relation);
    s->inbox_relation = o.inbox_relation ? strdup(o.inbox_relation) : default_inbox_relation(relation);
    s->uri_text = strdup(uri);
    s->driver_name = o.driver ? strdup(o.driver) : NULL;
    s->flags = o.flags;
    if (s->relation == NULL || s->checkpoint_relation == NULL || s->inbox_relation == NULL ||
        s->uri_text == NULL ||
        (o.driver != NULL && s->driver_name == NULL)) {
        rc = outbox_diag_set(d, OUTBOX_ENOMEM, "out of memory");
        goto failed;
    }
    if (o.driver != NULL)
        rc = outbox_loader_load(o.driver, OUTBOX_DRIVER_STORE, &s->drv, d);
    else
        rc = outbox_loader_for_scheme(s->uri.uri.scheme, OUTBOX_DRIVER_STORE, &s->drv, d);
    if (rc == OUTBOX_OK)
        rc = outbox_loader_uri_ok(s->drv, &s->uri.uri, d);
    if (rc != OUTBOX_OK)
        goto failed;
    s->vt = s->drv->store;
    outbox_store_open_t params = {
        .struct_size = sizeof params,
        .uri = &s->uri.uri,
        .relation = s->relation,
        .checkpoint_relation = s->checkpoint_relation,
        .flags = o.flags,
        .inbox_relation = s->inbox_relation,
    };
    outbox_diag_t dd = {0};
    rc = s->vt->open(&params, &s->h, &dd);
    if (rc != OUTBOX_OK) {
        outbox_diag_set(d, rc, "%s", dd.message[0] ? dd.message : outbox_strerror(rc));
        s->h = NULL;
        goto failed;
    }
    s->caps = s->vt->capabilities(s->h);
    *out = s;
    return OUTBOX_OK;
failed:
    outbox_store_close(s);
    return rc;
}

void outbox_store_close(outbox_store_t *s)
{
    if (s == NULL)
        return;
    if (s->h != NULL)
        s->vt->close(s->h);
    for (size_t i = 0; i < s->n_routes; i++) {
        free(s->routes[i].route);
        free(s->routes[i].node_key);
    }
    free(s->routes);
    free(s->relation);
    free(s->checkpoint_relation);
    free(s->inbox_relation);
    free(s->driver_name);
    if (s->uri_text != NULL) {
        /* It may hold a password. */
        memset(s->uri_text, 0, strlen(s->uri_text));
        free(s->uri_text);
    }
    outbox_uri_free(&s->uri);
    free(s);
}

int outbox_store_twin(const outbox_store_t *s, outbox_store_t **out, outbox_diag_t *d)
{
    outbox_store_options_t o = {
        .struct_size = sizeof o,
        .relation = s->relation,
        .checkpoint_relation = s->checkpoint_relation,
        .driver = s->driver_name,
        .flags = s->flags,
        .inbox_relation = s->inbox_relation,
    };
    return outbox_store_open(s->uri_text, &o, out, d);
}

void outbox_store_parts(outbox_store_t *s, outbox_store_parts_t *out)
{
    *out = (outbox_store_parts_t){
        .vt = s->vt,
        .h = s->h,
        .diag = &s->diag,
        .caps = s->caps,
        .in_tx = s->in_tx,
        .driver = s->drv->name,
        .inbox_relation = s->inbox_relation,
    };
}

const char *outbox_store_message(const outbox_store_t *s)
{
    return s ? s->diag.message : "no store";
}

uint32_t outbox_store_capabilities(const outbox_store_t *s)
{
    return s ? s->caps : 0;
}

const outbox_driver_t *outbox_store_driver(const outbox_store_t *s)
{
    return s ? s->drv : NULL;
}

void *outbox_store_driver_handle(const outbox_store_t *s)
{
    return s ? s->h : NULL;
}

const char *outbox_store_relation(const outbox_store_t *s)
{
    return s->relation;
}

static route_cfg_t *find_route(outbox_store_t *s, const char *route)
{
    for (size_t i = 0; i < s->n_routes; i++)
        if (strcmp(s->routes[i].route, route) == 0)
            return &s->routes[i];
    return NULL;
}

/* No event index: the field belongs to the call, not to one event. */
#define NO_EVENT SIZE_MAX

/* Routes, event types and keys end up in headers, topic names and partition
 * keys, on every store alike: 1..max bytes of valid UTF-8 with no control
 * character (C0, DEL or C1). Checked here once, so a store that would take
 * any bytes (SQLite) keeps what one that refuses them (PostgreSQL) keeps,
 * and two distinct keys never turn into one when a sink makes them
 * printable. The message names the field and the event, never the bytes. */
int outbox_text_check(const char *field, const char *t, size_t max, char *why, size_t size)
{
    size_t n = t != NULL ? strlen(t) : 0;
    if (t == NULL) {
        snprintf(why, size, "%s is missing", field);
    } else if (n == 0) {
        snprintf(why, size, "%s is empty", field);
    } else if (n > max) {
        snprintf(why, size, "%s is longer than %zu bytes", field, max);
    } else if (!outbox_kit_utf8_valid(t, n)) {
        snprintf(why, size, "%s is not valid UTF-8", field);
    } else {
        const unsigned char *p = (const unsigned char *)t;
        for (size_t i = 0; i < n; i++) {
            int c1 = p[i] == 0xc2 && i + 1 < n && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f;
            if (p[i] < 0x20 || p[i] == 0x7f || c1) {
                snprintf(why, size, "%s holds a control character at byte %zu", field, i);
                return 0;
            }
        }
        return 1;
    }
    return 0;
}

static int text_check(outbox_store_t *s, size_t event, const char *field, const char *t,
                      size_t max)
{
    char why[128];
    if (outbox_text_check(field, t, max, why, sizeof why))
        return OUTBOX_OK;
    if (event != NO_EVENT)
        return fail(s, OUTBOX_EINVAL, "event %zu: %s", event, why);
    return fail(s, OUTBOX_EINVAL, "%s", why);
}

int outbox_store_configure_route(outbox_store_t *s, const outbox_route_config_t *cfg)
{
    if (s == NULL)
        return OUTBOX_EINVAL;
    outbox_diag_clear(&s->diag);
    if (cfg == NULL || cfg->struct_size < sizeof(uint32_t))
        return fail(s, OUTBOX_EINVAL, "route config: struct_size not set");
    outbox_route_config_t c = {.struct_size = sizeof c};
    OUTBOX_STRUCT_READ(outbox_route_config_t, &c, cfg, route);
    OUTBOX_STRUCT_READ(outbox_route_config_t, &c, cfg, require_transaction);
    OUTBOX_STRUCT_READ(outbox_route_config_t, &c, cfg, hlc);
    OUTBOX_STRUCT_READ(outbox_route_config_t, &c, cfg, checkpoint_node_key);
    cfg = &c;
    int bad = text_check(s, NO_EVENT, "route", cfg->route, 255);
    if (bad != OUTBOX_OK)
        return bad;
    if (cfg->hlc && !(s->caps & OUTBOX_STORE_CAP_HLC))
        return fail(s, OUTBOX_ENOTSUP, "route %s: hlc needs the hlc column on %s", cfg->route,
                    s->relation);
    if (cfg->checkpoint_node_key != NULL) {
        bad = text_check(s, NO_EVENT, "checkpoint node key", cfg->checkpoint_node_key, 255);
        if (bad != OUTBOX_OK)
            return bad;
        if (!(s->caps & OUTBOX_STORE_CAP_CHECKPOINT))
            return fail(s, OUTBOX_ENOTSUP, "route %s: checkpoint node key needs the %s table",
                        cfg->route, s->checkpoint_relation);
        int64_t mark = 0;
        int rc = outbox_store_checkpoint_recover(s, &mark);
        if (rc != OUTBOX_OK)
            return rc;
        outbox_hlc_observe(outbox_hlc_default(), mark);
    }
    route_cfg_t *r = find_route(s, cfg->route);
    if (r == NULL) {
        route_cfg_t *grown = realloc(s->routes, (s->n_routes + 1) * sizeof *grown);
        if (grown == NULL)
            return fail(s, OUTBOX_ENOMEM, "out of memory");
        s->routes = grown;
        r = &s->routes[s->n_routes];
        memset(r, 0, sizeof *r);
        if ((r->route = strdup(cfg->route)) == NULL)
            return fail(s, OUTBOX_ENOMEM, "out of memory");
        s->n_routes++;
    }
    char *key = cfg->checkpoint_node_key ? strdup(cfg->checkpoint_node_key) : NULL;
    if (cfg->checkpoint_node_key != NULL && key == NULL)
        return fail(s, OUTBOX_ENOMEM, "out of memory");
    free(r->node_key);
    r->node_key = key;
    r->require_transaction = cfg->require_transaction;
    r->hlc = cfg->hlc;
    return OUTBOX_OK;
}

int outbox_store_begin(outbox_store_t *s)
{
    if (s == NULL)
        return OUTBOX_EINVAL;
    outbox_diag_clear(&s->diag);
    if (!VT_HAS(s->vt, begin))
        return not_supported(s, "transactions");
    if (s->in_tx)
        return fail(s, OUTBOX_EINVAL, "a transaction is already open on this handle");
    int rc = driver_rc(s, s->vt->begin(s->h, &s->diag), "begin");
    if (rc == OUTBOX_OK)
        s->in_tx = 1;
    return rc;
}

static int end_tx(outbox_store_t *s, int commit)
{
    if (s == NULL)
        return OUTBOX_EINVAL;
    outbox_diag_clear(&s->diag);
    if (!s->in_tx)
        return fail(s, OUTBOX_EINVAL, "no transaction is open on this handle");
    int rc = commit ? s->vt->commit(s->h, &s->diag) : s->vt->rollback(s->h, &s->diag);
    s->in_tx = 0;
    return driver_rc(s, rc, commit ? "commit" : "rollback");
}

int outbox_store_commit(outbox_store_t *s)
{
    return end_tx(s, 1);
}

int outbox_store_rollback(outbox_store_t *s)
{
    return end_tx(s, 0);
}

/* W3C trace context, version 00 layout: 2-32-16-2 lower-case hex digits. */
static int traceparent_ok(const char *t)
{
    static const int group[] = {2, 32, 16, 2};
    const char *p = t;
    for (int g = 0; g < 4; g++) {
        for (int i = 0; i < group[g]; i++, p++)
            if (!isxdigit((unsigned char)*p) || isupper((unsigned char)*p))
                return 0;
        if (*p != (g < 3 ? '-' : '\0'))
            return 0;
        p++;
    }
    return 1;
}

/* Per-call storage for everything the core mints or normalises. */
typedef struct stage_buf {
    outbox_row_t *rows;
    char (*ids)[OUTBOX_UUID_STRLEN + 1];
} stage_buf_t;

static int check_uuid(outbox_store_t *s, size_t i, const char *field, const char *v, char *dst)
{
    if (v == NULL)
        return OUTBOX_OK;
    if (!outbox_uuid_valid(v))
        return fail(s, OUTBOX_EINVAL, "event %zu: %s \"%.64s\" is not a UUID", i, field, v);
    for (size_t k = 0; k <= OUTBOX_UUID_STRLEN; k++)
        dst[k] = (char)tolower((unsigned char)v[k]);
    return OUTBOX_OK;
}

static int prepare_row(outbox_store_t *s, const route_cfg_t *rc, const char *route,
                       const outbox_event_t *e, size_t i, int64_t now, outbox_row_t *row,
                       char (*ids)[OUTBOX_UUID_STRLEN + 1])
{
    int bad = text_check(s, i, "event_type", e->event_type, 255);
    if (bad != OUTBOX_OK)
        return bad;
    if (e->payload == NULL)
        return fail(s, OUTBOX_EINVAL, "event %zu: payload is missing", i);
    size_t len = e->payload_len ? e->payload_len : strlen(e->payload);
    if (!outbox_json_valid(e->payload, len))
        return fail(s, OUTBOX_EINVAL, "event %zu: payload is not valid JSON", i);
    if (e->ordering_key != NULL && (bad = text_check(s, i, "ordering_key", e->ordering_key, 1024)) != OUTBOX_OK)
        return bad;
    if (e->traceparent != NULL && !traceparent_ok(e->traceparent))
        return fail(s, OUTBOX_EINVAL, "event %zu: traceparent \"%.64s\" is not W3C trace context", i,
                    e->traceparent);
    if (e->traceparent != NULL && !(s->caps & OUTBOX_STORE_CAP_TRACEPARENT))
        return fail(s, OUTBOX_ENOTSUP, "event %zu: traceparent needs the traceparent column on %s", i,
                    s->relation);
    if (e->occurred_at < 0)
        return fail(s, OUTBOX_EINVAL, "event %zu: occurred_at is negative", i);
    int err = OUTBOX_OK;
    const char *fields[] = {"event_id", "tenant_id", "execution_id", "correlation_id", "causation_id"};
    const char *vals[] = {e->event_id, e->tenant_id, e->execution_id, e->correlation_id, e->causation_id};
    for (int f = 0; f < 5 && err == OUTBOX_OK; f++)
        err = check_uuid(s, i, fields[f], vals[f], ids[1 + f]);
    if (err != OUTBOX_OK)
        return err;
    outbox_uuid_v7(ids[0]);
    if (e->event_id == NULL)
        outbox_uuid_v7(ids[1]);
    *row = (outbox_row_t){
        .id = ids[0],
        .route = route,
        .event_id = ids[1],
        .event_type = e->event_type,
        .tenant_id = e->tenant_id ? ids[2] : NULL,
        .execution_id = e->execution_id ? ids[3] : NULL,
        .correlation_id = e->correlation_id ? ids[4] : NULL,
        .causation_id = e->causation_id ? ids[5] : NULL,
        .occurred_at = e->occurred_at ? e->occurred_at : now,
        .payload = e->payload,
        .payload_len = len,
        .ordering_key = e->ordering_key,
        .traceparent = e->traceparent,
        .hlc = rc && rc->hlc ? outbox_hlc_now(outbox_hlc_default()) : 0,
        .created_at = now,
    };
    return OUTBOX_OK;
}

enum { IDS_PER_ROW = 6 };

/* The options of a stage call, checked: *when is all zero for none. */
static int stage_when(outbox_store_t *s, const outbox_stage_options_t *opts,
                      outbox_stage_options_t *when)
{
    *when = (outbox_stage_options_t){.struct_size = sizeof *when};
    if (opts == NULL)
        return OUTBOX_OK;
    if (opts->struct_size < sizeof(uint32_t))
        return fail(s, OUTBOX_EINVAL, "stage options: struct_size not set");
    OUTBOX_STRUCT_READ(outbox_stage_options_t, when, opts, not_before);
    OUTBOX_STRUCT_READ(outbox_stage_options_t, when, opts, delay_us);
    if (when->not_before < 0)
        return fail(s, OUTBOX_EINVAL, "stage options: not_before is negative");
    if (when->delay_us < 0 || when->delay_us > OUTBOX_DURATION_MAX_US)
        return fail(s, OUTBOX_EINVAL, "stage options: delay_us must be 0 to %lld",
                    (long long)OUTBOX_DURATION_MAX_US);
    if (when->not_before != 0 && when->delay_us != 0)
        return fail(s, OUTBOX_EINVAL, "stage options: give not_before or delay_us, not both");
    if ((when->not_before != 0 || when->delay_us != 0) && !(s->caps & OUTBOX_STORE_CAP_DELAYED))
        return not_supported(s, "delayed events");
    return OUTBOX_OK;
}

int outbox_store_stage(outbox_store_t *s, void *native_tx, const char *route,
                 const outbox_event_t *events, size_t n, size_t *staged)
{
    return outbox_store_stage_with(s, native_tx, route, events, n, NULL, staged);
}

int outbox_store_stage_with(outbox_store_t *s, void *native_tx, const char *route,
                            const outbox_event_t *events, size_t n,
                            const outbox_stage_options_t *opts, size_t *staged)
{
    if (staged != NULL)
        *staged = 0;
    if (s == NULL)
        return OUTBOX_EINVAL;
    outbox_diag_clear(&s->diag);
    int bad = text_check(s, NO_EVENT, "route", route, 255);
    if (bad != OUTBOX_OK)
        return bad;
    outbox_stage_options_t when;
    if ((bad = stage_when(s, opts, &when)) != OUTBOX_OK)
        return bad;
    if (n == 0)
        return OUTBOX_OK;
    if (events == NULL)
        return fail(s, OUTBOX_EINVAL, "events is NULL");
    const route_cfg_t *rc = find_route(s, route);
    int in_tx = native_tx != NULL || s->in_tx;
    if (native_tx != NULL && !(s->caps & OUTBOX_STORE_CAP_NATIVE_TX))
        return not_supported(s, "staging through a native transaction handle");
    if (rc != NULL && rc->require_transaction && !in_tx)
        return fail(s, OUTBOX_EINVAL, "route %s requires a transaction: call outbox_store_begin or pass the native transaction",
                    route);
    if (n > SIZE_MAX / (sizeof(outbox_row_t) + IDS_PER_ROW * (OUTBOX_UUID_STRLEN + 1)))
        return fail(s, OUTBOX_EINVAL, "too many events in one call");
    outbox_row_t *rows = calloc(n, sizeof *rows);
    char (*ids)[OUTBOX_UUID_STRLEN + 1] = calloc(n * IDS_PER_ROW, sizeof *ids);
    int err = OUTBOX_OK;
    if (rows == NULL || ids == NULL)
        err = fail(s, OUTBOX_ENOMEM, "out of memory");
    int64_t now = outbox_now_us();
    int64_t max_hlc = 0;
    for (size_t i = 0; i < n && err == OUTBOX_OK; i++) {
        err = prepare_row(s, rc, route, &events[i], i, now, &rows[i], &ids[i * IDS_PER_ROW]);
        rows[i].available_at = when.not_before;
        if (err == OUTBOX_OK && rows[i].hlc > max_hlc)
            max_hlc = rows[i].hlc;
    }
    if (err == OUTBOX_OK) {
        /* Standalone staging never advances the mark (SPEC 6). */
        int advance = in_tx && rc != NULL && rc->node_key != NULL && max_hlc > 0;
        outbox_stage_ctx_t ctx = {
            .struct_size = sizeof ctx,
            .native_tx = native_tx,
            .in_own_tx = native_tx == NULL && s->in_tx,
            .checkpoint_node_key = advance ? rc->node_key : NULL,
            .max_hlc = advance ? max_hlc : 0,
            .delay_us = when.delay_us,
        };
        size_t count = 0;
        err = driver_rc(s, s->vt->stage(s->h, &ctx, rows, n, &count, &s->diag), "stage");
        if (err == OUTBOX_OK && staged != NULL)
            *staged = count;
    }
    free(rows);
    free(ids);
    return err;
}

int outbox_store_stats(outbox_store_t *s, const char *route, outbox_stats_t *out)
{
    if (s == NULL || out == NULL)
        return OUTBOX_EINVAL;
    outbox_diag_clear(&s->diag);
    memset(out, 0, sizeof *out);
    if (!VT_HAS(s->vt, stats))
        return not_supported(s, "stats");
    return driver_rc(s, s->vt->stats(s->h, route, out, &s->diag), "stats");
}

int outbox_store_replay(outbox_store_t *s, const char *route, const char *event_id, uint64_t *count)
{
    if (s == NULL || count == NULL)
        return OUTBOX_EINVAL;
    outbox_diag_clear(&s->diag);
    *count = 0;
    if (event_id != NULL && !outbox_uuid_valid(event_id))
        return fail(s, OUTBOX_EINVAL, "event id \"%.64s\" is not a UUID", event_id);
    if (!VT_HAS(s->vt, replay))
        return not_supported(s, "replay");
    char lower[OUTBOX_UUID_STRLEN + 1];
    if (event_id != NULL) {
        for (size_t k = 0; k <= OUTBOX_UUID_STRLEN; k++)
            lower[k] = (char)tolower((unsigned char)event_id[k]);
    }
    return driver_rc(s, s->vt->replay(s->h, route, event_id ? lower : NULL, count, &s->diag),
                     "replay");
}

int outbox_store_purge(outbox_store_t *s, const char *route, int64_t published_before, uint64_t *count)
{
    if (s == NULL || count == NULL)
        return OUTBOX_EINVAL;
    outbox_diag_clear(&s->diag);
    *count = 0;
    if (!VT_HAS(s->vt, purge))
        return not_supported(s, "purge");
    return driver_rc(s, s->vt->purge(s->h, route, published_before, count, &s->diag), "purge");
}

int outbox_store_claim(outbox_store_t *s, const outbox_claim_req_t *req, const outbox_row_t **rows,
                 size_t *n, outbox_fence_t *fence)
{
    if (s == NULL || req == NULL || rows == NULL || n == NULL || fence == NULL)
        return OUTBOX_EINVAL;
    outbox_diag_clear(&s->diag);
    *rows = NULL;
    *n = 0;
    memset(fence, 0, sizeof *fence);
    int bad = text_check(s, NO_EVENT, "route", req->route, 255);
    if (bad != OUTBOX_OK)
        return bad;
    if (req->limit == 0 || req->lease_us <= 0)
        return fail(s, OUTBOX_EINVAL, "claim needs a limit above 0 and a lease above 0");
    if (req->hlc_order && !(s->caps & OUTBOX_STORE_CAP_HLC))
        return fail(s, OUTBOX_ENOTSUP, "hlc ordering needs the hlc column on %s", s->relation);
    return driver_rc(s, s->vt->claim(s->h, req, rows, n, fence, &s->diag), "claim");
}

int outbox_store_settle(outbox_store_t *s, const outbox_fence_t *fence, outbox_settle_item_t *items,
                  size_t n, size_t *applied)
{
    if (applied != NULL)
        *applied = 0;
    if (s == NULL || fence == NULL || (items == NULL && n > 0))
        return OUTBOX_EINVAL;
    outbox_diag_clear(&s->diag);
    if (n == 0)
        return OUTBOX_OK;
    for (size_t i = 0; i < n; i++) {
        items[i].applied = 0;
        if (items[i].id == NULL || items[i].kind < OUTBOX_SETTLE_PUBLISHED ||
            items[i].kind > OUTBOX_SETTLE_RELEASE)
            return fail(s, OUTBOX_EINVAL, "settle item %zu: missing id or unknown kind", i);
    }
    size_t count = 0;
    int rc = driver_rc(s, s->vt->settle(s->h, fence, items, n, &count, &s->diag), "settle");
    if (applied != NULL)
        *applied = count;
    if (rc == OUTBOX_OK && count < n)
        rc = fail(s, OUTBOX_ECONFLICT, "%zu of %zu rows no longer hold this claim's fence", n - count, n);
    return rc;
}

int outbox_store_renew(outbox_store_t *s, const char *route, outbox_fence_t *fence,
                       const char *const *ids, size_t n, size_t *renewed)
{
    if (renewed != NULL)
        *renewed = 0;
    if (s == NULL || fence == NULL || (ids == NULL && n > 0))
        return OUTBOX_EINVAL;
    outbox_diag_clear(&s->diag);
    int bad = text_check(s, NO_EVENT, "route", route, 255);
    if (bad != OUTBOX_OK)
        return bad;
    for (size_t i = 0; i < n; i++)
        if (ids[i] == NULL)
            return fail(s, OUTBOX_EINVAL, "renew: id %zu is missing", i);
    if (!VT_HAS(s->vt, renew))
        return not_supported(s, "lease renewal (an ABI 1.5 entry)");
    if (n == 0)
        return OUTBOX_OK;
    outbox_renew_req_t req = {.struct_size = sizeof req, .route = route, .fence = fence, .ids = ids, .n = n};
    outbox_fence_t next;
    memset(&next, 0, sizeof next);
    size_t count = 0;
    int rc = driver_rc(s, s->vt->renew(s->h, &req, &next, &count, &s->diag), "lease renewal");
    if (rc != OUTBOX_OK)
        return rc;
    if (count > n)
        count = n;
    if (count > 0)
        *fence = next;
    if (renewed != NULL)
        *renewed = count;
    if (count < n)
        return fail(s, OUTBOX_ECONFLICT, "%zu of %zu rows no longer hold this claim's fence", n - count, n);
    return OUTBOX_OK;
}

int outbox_store_can_renew(const outbox_store_t *s)
{
    return s != NULL && VT_HAS(s->vt, renew);
}

int outbox_store_checkpoint_advance(outbox_store_t *s, void *native_tx, const char *node_key, int64_t hlc)
{
    if (s == NULL)
        return OUTBOX_EINVAL;
    outbox_diag_clear(&s->diag);
    int bad = text_check(s, NO_EVENT, "checkpoint node key", node_key, 255);
    if (bad != OUTBOX_OK)
        return bad;
    if (hlc < 0)
        return fail(s, OUTBOX_EINVAL, "checkpoint hlc must not be negative");
    if (!VT_HAS(s->vt, checkpoint_advance) || !(s->caps & OUTBOX_STORE_CAP_CHECKPOINT))
        return not_supported(s, "checkpoints (is the checkpoint table there?)");
    outbox_stage_ctx_t ctx = {.struct_size = sizeof ctx, .native_tx = native_tx,
                              .in_own_tx = native_tx == NULL && s->in_tx};
    return driver_rc(s, s->vt->checkpoint_advance(s->h, &ctx, node_key, hlc, &s->diag),
                     "checkpoint advance");
}

int outbox_store_checkpoint_recover(outbox_store_t *s, int64_t *hlc)
{
    if (s == NULL || hlc == NULL)
        return OUTBOX_EINVAL;
    outbox_diag_clear(&s->diag);
    *hlc = 0;
    if (!VT_HAS(s->vt, checkpoint_recover) || !(s->caps & OUTBOX_STORE_CAP_CHECKPOINT))
        return not_supported(s, "checkpoints (is the checkpoint table there?)");
    return driver_rc(s, s->vt->checkpoint_recover(s->h, hlc, &s->diag), "checkpoint recover");
}

int outbox_store_wait_for(outbox_store_t *s, const char *route, int64_t timeout_us)
{
    if (s == NULL)
        return OUTBOX_EINVAL;
    outbox_diag_clear(&s->diag);
    int ms = outbox_us_to_ms(timeout_us);
    if (!VT_HAS(s->vt, wait)) {
        outbox_sleep_us((int64_t)ms * 1000, NULL);
        return OUTBOX_OK;
    }
    return driver_rc(s, s->vt->wait(s->h, route, ms, &s->diag), "wait");
}

/* The caller's options as a full local copy (see OUTBOX_STRUCT_READ). */
static int schema_opts_read(outbox_diag_t *d, const outbox_schema_opts_t *o, outbox_schema_opts_t *out)
{
    *out = (outbox_schema_opts_t){.struct_size = sizeof *out};
    if (o == NULL || o->struct_size < sizeof(uint32_t))
        return outbox_diag_set(d, OUTBOX_EINVAL, "schema options: struct_size not set");
    OUTBOX_STRUCT_READ(outbox_schema_opts_t, out, o, relation);
    OUTBOX_STRUCT_READ(outbox_schema_opts_t, out, o, checkpoint_relation);
    OUTBOX_STRUCT_READ(outbox_schema_opts_t, out, o, flags);
    OUTBOX_STRUCT_READ(outbox_schema_opts_t, out, o, inbox_relation);
    int rc = relations_ok(d, out->relation, out->checkpoint_relation);
    return rc != OUTBOX_OK ? rc : inbox_relation_ok(d, out->inbox_relation);
}

/* Fill in the relation defaults: the given relations when opts names none
 * (a store's own), else opts' relation with hlc_checkpoint and
 * outbox_inbox beside it. tmp[0] and tmp[1] receive what must be freed. */
static int schema_defaults(const outbox_schema_opts_t *o, const char *relation, const char *ckpt,
                           const char *inbox, outbox_schema_opts_t *full, char *tmp[2],
                           outbox_diag_t *d)
{
    *full = *o;
    full->struct_size = sizeof *full;
    tmp[0] = tmp[1] = NULL;
    if (full->relation == NULL) {
        full->relation = relation ? relation : "outbox";
        if (full->checkpoint_relation == NULL)
            full->checkpoint_relation = ckpt;
        if (full->inbox_relation == NULL)
            full->inbox_relation = inbox;
    }
    if (full->checkpoint_relation == NULL)
        full->checkpoint_relation = tmp[0] = default_checkpoint_relation(full->relation);
    if (full->inbox_relation == NULL)
        full->inbox_relation = tmp[1] = default_inbox_relation(full->relation);
    if (full->checkpoint_relation == NULL || full->inbox_relation == NULL)
        return outbox_diag_set(d, OUTBOX_ENOMEM, "out of memory");
    return OUTBOX_OK;
}

int outbox_schema_ddl(const char *store_kind_or_uri, const outbox_schema_opts_t *opts,
                      char **ddl_out, outbox_diag_t *d)
{
    outbox_diag_clear(d);
    if (ddl_out == NULL || store_kind_or_uri == NULL)
        return outbox_diag_set(d, OUTBOX_EINVAL, "outbox_schema_ddl: missing argument");
    *ddl_out = NULL;
    outbox_schema_opts_t given;
    int rc = schema_opts_read(d, opts, &given);
    if (rc != OUTBOX_OK)
        return rc;
    const outbox_driver_t *drv = NULL;
    if (strchr(store_kind_or_uri, ':') != NULL) {
        outbox_uri_owned_t u = {0};
        rc = outbox_uri_parse(store_kind_or_uri, &u, d);
        if (rc == OUTBOX_OK)
            rc = outbox_loader_for_scheme(u.uri.scheme, OUTBOX_DRIVER_STORE, &drv, d);
        outbox_uri_free(&u);
    } else {
        rc = outbox_loader_load(store_kind_or_uri, OUTBOX_DRIVER_STORE, &drv, d);
    }
    if (rc != OUTBOX_OK)
        return rc;
    if ((given.flags & OUTBOX_SCHEMA_INBOX) && !VT_HAS(drv->store, inbox_accept))
        return outbox_diag_set(d, OUTBOX_ENOTSUP, "the %s store driver does not support the inbox",
                               drv->name);
    char *tmp[2];
    outbox_schema_opts_t full;
    rc = schema_defaults(&given, NULL, NULL, NULL, &full, tmp, d);
    if (rc != OUTBOX_OK) {
        free(tmp[0]);
        free(tmp[1]);
        return rc;
    }
    char *text = NULL;
    outbox_diag_t dd = {0};
    rc = drv->store->schema_ddl(&full, &text, &dd);
    free(tmp[0]);
    free(tmp[1]);
    if (rc != OUTBOX_OK)
        return outbox_diag_set(d, rc, "%s", dd.message[0] ? dd.message : outbox_strerror(rc));
    /* Hand the caller memory it can free() whatever the driver's allocator. */
    *ddl_out = strdup(text ? text : "");
    outbox_host_table()->free(text);
    return *ddl_out ? OUTBOX_OK : outbox_diag_set(d, OUTBOX_ENOMEM, "out of memory");
}

int outbox_store_schema_apply(outbox_store_t *s, const outbox_schema_opts_t *opts)
{
    if (s == NULL)
        return OUTBOX_EINVAL;
    outbox_diag_clear(&s->diag);
    outbox_schema_opts_t given;
    int rc = schema_opts_read(&s->diag, opts, &given);
    if (rc != OUTBOX_OK)
        return rc;
    if (!VT_HAS(s->vt, schema_apply))
        return not_supported(s, "schema apply");
    if ((given.flags & OUTBOX_SCHEMA_INBOX) && !VT_HAS(s->vt, inbox_accept))
        return not_supported(s, "the inbox");
    char *tmp[2];
    outbox_schema_opts_t full;
    rc = schema_defaults(&given, s->relation, s->checkpoint_relation, s->inbox_relation, &full, tmp,
                         &s->diag);
    if (rc != OUTBOX_OK) {
        free(tmp[0]);
        free(tmp[1]);
        return rc;
    }
    rc = driver_rc(s, s->vt->schema_apply(s->h, &full, &s->diag), "schema apply");
    free(tmp[0]);
    free(tmp[1]);
    /* What exists changed: the handle's capabilities follow (the driver
     * looked again). */
    if (rc == OUTBOX_OK)
        s->caps = s->vt->capabilities(s->h);
    return rc;
}

static void ignore_problem(void *ctx, const char *problem)
{
    (void)ctx;
    (void)problem;
}

int outbox_store_schema_check(outbox_store_t *s, const outbox_schema_opts_t *opts,
                        outbox_schema_report_fn report, void *ctx, size_t *problems)
{
    if (s == NULL || problems == NULL)
        return OUTBOX_EINVAL;
    *problems = 0;
    outbox_diag_clear(&s->diag);
    outbox_schema_opts_t given;
    int rc = schema_opts_read(&s->diag, opts, &given);
    if (rc != OUTBOX_OK)
        return rc;
    if (!VT_HAS(s->vt, schema_check))
        return not_supported(s, "schema check");
    if ((given.flags & OUTBOX_SCHEMA_INBOX) && !VT_HAS(s->vt, inbox_accept))
        return not_supported(s, "the inbox");
    char *tmp[2];
    outbox_schema_opts_t full;
    rc = schema_defaults(&given, s->relation, s->checkpoint_relation, s->inbox_relation, &full, tmp,
                         &s->diag);
    if (rc != OUTBOX_OK) {
        free(tmp[0]);
        free(tmp[1]);
        return rc;
    }
    rc = driver_rc(s, s->vt->schema_check(s->h, &full, report ? report : ignore_problem, ctx,
                                          problems, &s->diag),
                   "schema check");
    free(tmp[0]);
    free(tmp[1]);
    return rc;
}

/* ------------------------------------------------- routes and dead rows */

typedef struct route_entry {
    char *route;
    outbox_stats_t stats;
} route_entry_t;

typedef struct route_list {
    route_entry_t *v;
    size_t n, cap;
    int nomem;
} route_list_t;

static int route_collect(void *ctx, const char *route, const outbox_stats_t *stats)
{
    route_list_t *l = ctx;
    if (route == NULL || stats == NULL)
        return OUTBOX_OK;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        route_entry_t *v = realloc(l->v, cap * sizeof *v);
        if (v == NULL) {
            l->nomem = 1;
            return OUTBOX_ENOMEM;
        }
        l->v = v;
        l->cap = cap;
    }
    char *copy = strdup(route);
    if (copy == NULL) {
        l->nomem = 1;
        return OUTBOX_ENOMEM;
    }
    l->v[l->n].route = copy;
    l->v[l->n].stats = *stats;
    l->n++;
    return OUTBOX_OK;
}

static int route_cmp(const void *a, const void *b)
{
    return strcmp(((const route_entry_t *)a)->route, ((const route_entry_t *)b)->route);
}

int outbox_store_routes(outbox_store_t *s, outbox_route_fn fn, void *ctx)
{
    if (s == NULL || fn == NULL)
        return OUTBOX_EINVAL;
    outbox_diag_clear(&s->diag);
    if (!VT_HAS(s->vt, routes))
        return not_supported(s, "listing routes (an ABI 1.3 entry)");
    /* Drivers give routes in any order; users get them sorted, and only
     * after the driver's call is over, so fn may use the handle. */
    route_list_t l = {0};
    int rc = s->vt->routes(s->h, route_collect, &l, &s->diag);
    if (l.nomem)
        rc = fail(s, OUTBOX_ENOMEM, "listing routes: out of memory");
    else
        rc = driver_rc(s, rc, "listing routes");
    if (rc == OUTBOX_OK) {
        if (l.n > 1) /* qsort's array may not be NULL, even with no element */
            qsort(l.v, l.n, sizeof *l.v, route_cmp);
        for (size_t i = 0; i < l.n && rc == OUTBOX_OK; i++)
            rc = fn(ctx, l.v[i].route, &l.v[i].stats);
    }
    for (size_t i = 0; i < l.n; i++)
        free(l.v[i].route);
    free(l.v);
    return rc;
}

typedef struct dead_page {
    outbox_row_fn fn;
    void *ctx;
    size_t limit, seen;
    char last[OUTBOX_UUID_STRLEN + 1];
    int more;
    int stopped; /* the user's fn returned non-zero */
} dead_page_t;

static int dead_forward(void *ctx, const outbox_row_t *row)
{
    dead_page_t *p = ctx;
    if (p->seen == p->limit) {
        p->more = 1; /* the one row past the page: only says there is more */
        return 1;
    }
    p->seen++;
    snprintf(p->last, sizeof p->last, "%s", row->id ? row->id : "");
    int rc = p->fn(p->ctx, row);
    if (rc != 0)
        p->stopped = 1;
    return rc;
}

int outbox_store_dead_list(outbox_store_t *s, const char *route, const char *after_id, size_t limit,
                     outbox_row_fn fn, void *ctx, char next[OUTBOX_UUID_STRLEN + 1])
{
    if (next != NULL)
        next[0] = '\0';
    if (s == NULL || fn == NULL)
        return OUTBOX_EINVAL;
    outbox_diag_clear(&s->diag);
    int bad = text_check(s, NO_EVENT, "route", route, 255);
    if (bad != OUTBOX_OK)
        return bad;
    if (limit < 1 || limit > OUTBOX_DEAD_LIST_MAX)
        return fail(s, OUTBOX_EINVAL, "limit %zu is out of range: 1 to %d", limit,
                    OUTBOX_DEAD_LIST_MAX);
    if (after_id != NULL && !outbox_uuid_valid(after_id))
        return fail(s, OUTBOX_EINVAL, "after id \"%.64s\" is not a UUID", after_id);
    if (!VT_HAS(s->vt, dead_list))
        return not_supported(s, "listing dead rows (an ABI 1.3 entry)");
    char lower[OUTBOX_UUID_STRLEN + 1];
    if (after_id != NULL) {
        for (size_t k = 0; k <= OUTBOX_UUID_STRLEN; k++)
            lower[k] = (char)tolower((unsigned char)after_id[k]);
    }
    dead_page_t p = {.fn = fn, .ctx = ctx, .limit = limit};
    /* One row more than the page tells whether another page follows. */
    int rc = s->vt->dead_list(s->h, route, after_id ? lower : NULL, limit + 1, dead_forward, &p,
                              &s->diag);
    if (p.stopped)
        return rc;
    if (p.more && rc == 1)
        rc = OUTBOX_OK;
    rc = driver_rc(s, rc, "listing dead rows");
    if (rc == OUTBOX_OK && p.more && next != NULL)
        memcpy(next, p.last, sizeof p.last);
    return rc;
}
