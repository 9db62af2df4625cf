/* Broken on purpose: inbox stats that list the consumers in case-blind
 * order, not in byte order, so "conf-a" comes before "conf-B". The real
 * driver's stats are gathered and then handed on re-sorted. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "broken.h"

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

#define MAX_CONSUMERS 64

typedef struct seen {
    char name[256];
    uint64_t records;
    int64_t oldest_us;
    int64_t newest_us;
} seen_t;

typedef struct gathered {
    seen_t rows[MAX_CONSUMERS];
    size_t n;
} gathered_t;

static int gather(void *ctx, const char *consumer, uint64_t records, int64_t oldest_us,
                  int64_t newest_us)
{
    gathered_t *g = ctx;
    if (g->n == MAX_CONSUMERS)
        return 1;
    seen_t *r = &g->rows[g->n++];
    snprintf(r->name, sizeof r->name, "%s", consumer);
    r->records = records;
    r->oldest_us = oldest_us;
    r->newest_us = newest_us;
    return 0;
}

static int case_blind(const void *a, const void *b)
{
    return strcasecmp(((const seen_t *)a)->name, ((const seen_t *)b)->name);
}

static int stats_nocase(void *handle, const char *consumer, outbox_inbox_fn fn, void *ctx,
                        outbox_diag_t *d)
{
    gathered_t *g = calloc(1, sizeof *g);
    if (g == NULL)
        return OUTBOX_ENOMEM;
    int rc = outbox_driver_entry_sqlite_base()->store->inbox_stats(handle, consumer, gather, g, d);
    if (rc == OUTBOX_OK) {
        qsort(g->rows, g->n, sizeof g->rows[0], case_blind);
        for (size_t i = 0; i < g->n && rc == OUTBOX_OK; i++)
            rc = fn(ctx, g->rows[i].name, g->rows[i].records, g->rows[i].oldest_us,
                    g->rows[i].newest_us);
    }
    free(g);
    return rc;
}

static void build(void)
{
    broken_wrap(&descriptor, &vtable, "sqlite-broken-inboxorder");
    vtable.inbox_stats = stats_nocase;
}

BROKEN_ENTRY(build, descriptor)
