/* Stages COUNT events on ROUTE through the library, the keys interleaved
 * (event i gets key "k<i mod KEYS>", none when KEYS is 0), in batches of
 * BATCH per outbox_stage call. The shell tests use it to build a backlog
 * the way an application would.
 *
 *   pg_load URI RELATION ROUTE COUNT KEYS [BATCH]
 */
#include <stdio.h>
#include <stdlib.h>

#include "outbox/outbox.h"

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: pg_load URI RELATION ROUTE COUNT KEYS [BATCH]\n");
        return 2;
    }
    long count = atol(argv[4]), keys = atol(argv[5]), batch = argc > 6 ? atol(argv[6]) : 500;
    if (count < 0 || keys < 0 || batch < 1) {
        fprintf(stderr, "pg_load: bad numbers\n");
        return 2;
    }
    outbox_store_options_t o = {.struct_size = sizeof o, .relation = argv[2]};
    outbox_store_t *s = NULL;
    outbox_diag_t d = {0};
    if (outbox_store_open(argv[1], &o, &s, &d) != OUTBOX_OK) {
        fprintf(stderr, "pg_load: %s\n", d.message);
        return 1;
    }
    outbox_event_t *ev = calloc((size_t)batch, sizeof *ev);
    char (*payload)[32] = calloc((size_t)batch, sizeof *payload);
    char (*key)[24] = calloc((size_t)batch, sizeof *key);
    long done = 0;
    int rc = ev && payload && key ? OUTBOX_OK : OUTBOX_ENOMEM;
    while (rc == OUTBOX_OK && done < count) {
        long m = count - done < batch ? count - done : batch;
        for (long i = 0; i < m; i++) {
            snprintf(payload[i], sizeof payload[i], "{\"n\":%ld}", done + i);
            snprintf(key[i], sizeof key[i], "k%ld", keys ? (done + i) % keys : 0);
            ev[i] = (outbox_event_t){.event_type = "load", .payload = payload[i],
                                     .ordering_key = keys ? key[i] : NULL};
        }
        size_t staged = 0;
        rc = outbox_stage(s, NULL, argv[3], ev, (size_t)m, &staged);
        done += (long)staged;
    }
    if (rc != OUTBOX_OK)
        fprintf(stderr, "pg_load: %s\n", outbox_store_message(s));
    else
        printf("staged %ld\n", done);
    free(ev);
    free(payload);
    free(key);
    outbox_store_close(s);
    return rc == OUTBOX_OK ? 0 : 1;
}
