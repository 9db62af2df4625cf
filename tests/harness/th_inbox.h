/* The C tests' collector for outbox_inbox_stats(): what it reported, row
 * by row, and a stop after stop_at rows (returning TH_INBOX_STOP) to test
 * that a callback's non-zero return ends the listing and comes back as it
 * is: negative, so it could pass for an error code. Header only. */
#ifndef TH_INBOX_H
#define TH_INBOX_H

#include <stdint.h>
#include <stdio.h>

#define TH_INBOX_ROWS 8
#define TH_INBOX_STOP (-42)

typedef struct th_inbox_seen {
    int n, stop_at;
    char consumer[TH_INBOX_ROWS][64];
    uint64_t records[TH_INBOX_ROWS];
    int64_t oldest[TH_INBOX_ROWS], newest[TH_INBOX_ROWS];
} th_inbox_seen_t;

static inline int th_inbox_collect(void *ctx, const char *consumer, uint64_t records,
                                   int64_t oldest_us, int64_t newest_us)
{
    th_inbox_seen_t *v = ctx;
    if (v->n < TH_INBOX_ROWS) {
        snprintf(v->consumer[v->n], sizeof v->consumer[0], "%s", consumer);
        v->records[v->n] = records;
        v->oldest[v->n] = oldest_us;
        v->newest[v->n] = newest_us;
    }
    v->n++;
    return v->stop_at && v->n == v->stop_at ? TH_INBOX_STOP : 0;
}

#endif
