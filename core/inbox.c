/* The inbox: the consumer's record of the events it handled, written in
 * its own transaction (outbox_inbox_accept), purged by age, counted per
 * consumer. The driver does the work (store vtable, ABI 1.7); this file
 * checks what the caller gave and which handle can take it. */
#include <stdio.h>
#include <string.h>

#include "outbox/outbox.h"
#include "outbox_int.h"

#define INBOX_TEXT_MAX 200
#define VT_HAS_(vt, e) OUTBOX_ENTRY_HAS(outbox_store_vtable_t, vt, e)

enum inbox_entry { INBOX_ACCEPT, INBOX_PURGE, INBOX_STATS };

static int has_entry(const outbox_store_vtable_t *vt, enum inbox_entry e)
{
    switch (e) {
    case INBOX_ACCEPT: return VT_HAS_(vt, inbox_accept);
    case INBOX_PURGE: return VT_HAS_(vt, inbox_purge);
    case INBOX_STATS: return VT_HAS_(vt, inbox_stats);
    }
    return 0;
}

/* The handle's parts, once the driver has the entry and the table exists;
 * else the reason, set on the handle. */
static int inbox_ready(outbox_store_t *s, outbox_store_parts_t *p, enum inbox_entry e)
{
    outbox_store_parts(s, p);
    outbox_diag_clear(p->diag);
    if (!has_entry(p->vt, e))
        return outbox_diag_set(p->diag, OUTBOX_ENOTSUP,
                               "the %s store driver does not support the inbox", p->driver);
    if (!(p->caps & OUTBOX_STORE_CAP_INBOX))
        return outbox_diag_set(p->diag, OUTBOX_EMISSING,
                               "no inbox table %s: create it with `outbox schema apply --inbox`",
                               p->inbox_relation);
    return OUTBOX_OK;
}

static int text_ok(outbox_diag_t *d, const char *field, const char *t)
{
    char why[128];
    if (outbox_text_check(field, t, INBOX_TEXT_MAX, why, sizeof why))
        return OUTBOX_OK;
    return outbox_diag_set(d, OUTBOX_EINVAL, "%s", why);
}

/* A driver's failure always has words. */
static int driver_said(outbox_diag_t *d, int rc, const char *op)
{
    if (rc != OUTBOX_OK && d->message[0] == '\0')
        outbox_diag_set(d, rc, "%s: %s", op, outbox_strerror(rc));
    else if (rc != OUTBOX_OK)
        d->code = rc;
    return rc;
}

int outbox_inbox_accept(outbox_store_t *s, void *native_tx, const char *consumer,
                        const char *event_id, int *is_new)
{
    if (is_new != NULL)
        *is_new = 0;
    if (s == NULL || is_new == NULL)
        return OUTBOX_EINVAL;
    outbox_store_parts_t p;
    int rc = inbox_ready(s, &p, INBOX_ACCEPT);
    if (rc == OUTBOX_OK)
        rc = text_ok(p.diag, "consumer", consumer);
    if (rc == OUTBOX_OK)
        rc = text_ok(p.diag, "event id", event_id);
    if (rc == OUTBOX_OK && native_tx != NULL && !(p.caps & OUTBOX_STORE_CAP_NATIVE_TX))
        rc = outbox_diag_set(p.diag, OUTBOX_ENOTSUP,
                             "the %s store driver does not support a native transaction handle",
                             p.driver);
    if (rc != OUTBOX_OK)
        return rc;
    outbox_stage_ctx_t ctx = {
        .struct_size = sizeof ctx,
        .native_tx = native_tx,
        .in_own_tx = native_tx == NULL && p.in_tx,
    };
    int fresh = 0;
    rc = driver_said(p.diag, p.vt->inbox_accept(p.h, &ctx, consumer, event_id, &fresh, p.diag),
                     "inbox accept");
    if (rc == OUTBOX_OK)
        *is_new = fresh != 0;
    return rc;
}

int outbox_inbox_purge(outbox_store_t *s, const char *consumer, int64_t received_before,
                       uint64_t *count)
{
    if (count != NULL)
        *count = 0;
    if (s == NULL)
        return OUTBOX_EINVAL;
    outbox_store_parts_t p;
    int rc = inbox_ready(s, &p, INBOX_PURGE);
    if (rc == OUTBOX_OK && consumer != NULL)
        rc = text_ok(p.diag, "consumer", consumer);
    if (rc != OUTBOX_OK)
        return rc;
    uint64_t n = 0;
    rc = driver_said(p.diag, p.vt->inbox_purge(p.h, consumer, received_before, &n, p.diag),
                     "inbox purge");
    if (rc == OUTBOX_OK && count != NULL)
        *count = n;
    return rc;
}

/* The caller's callback, and whether its own return stopped the listing:
 * that value comes back as it is, whatever its sign, and is no error. */
typedef struct stats_call {
    outbox_inbox_fn fn;
    void *ctx;
    int stopped;
} stats_call_t;

static int stats_row(void *ctx, const char *consumer, uint64_t records, int64_t oldest_us,
                     int64_t newest_us)
{
    stats_call_t *c = ctx;
    int rc = c->fn(c->ctx, consumer, records, oldest_us, newest_us);
    c->stopped = rc != 0;
    return rc;
}

int outbox_inbox_stats(outbox_store_t *s, const char *consumer, outbox_inbox_fn fn, void *ctx)
{
    if (s == NULL || fn == NULL)
        return OUTBOX_EINVAL;
    outbox_store_parts_t p;
    int rc = inbox_ready(s, &p, INBOX_STATS);
    if (rc == OUTBOX_OK && consumer != NULL)
        rc = text_ok(p.diag, "consumer", consumer);
    if (rc != OUTBOX_OK)
        return rc;
    stats_call_t call = {.fn = fn, .ctx = ctx};
    rc = p.vt->inbox_stats(p.h, consumer, stats_row, &call, p.diag);
    return call.stopped ? rc : driver_said(p.diag, rc, "inbox stats");
}
