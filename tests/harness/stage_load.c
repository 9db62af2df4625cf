/* Stages COUNT events on ROUTE through the library, the way an application
 * builds a backlog: COUNT/BATCH outbox_stage calls, the keys interleaved
 * event by event (event i gets key "k<i mod KEYS>", none when KEYS is 0).
 * Each payload carries the event's serial number and key,
 * {"n":START+i,"k":"k<...>"}, so a consumer's view can be checked against
 * the staging order without reading the store (tests/harness/delivery.py).
 * Any store: the URI picks the driver.
 *
 *   stage_load URI RELATION|- ROUTE COUNT KEYS BATCH START
 *
 * Prints "staged N". harness.sh's stage_load calls it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox/outbox.h"

int main(int argc, char **argv)
{
    if (argc != 8) {
        fprintf(stderr, "usage: stage_load URI RELATION|- ROUTE COUNT KEYS BATCH START\n");
        return 2;
    }
    long count = atol(argv[4]), keys = atol(argv[5]), batch = atol(argv[6]), start = atol(argv[7]);
    if (count < 0 || keys < 0 || batch < 1 || start < 0) {
        fprintf(stderr, "stage_load: bad numbers\n");
        return 2;
    }
    outbox_store_options_t o = {.struct_size = sizeof o,
                                .relation = strcmp(argv[2], "-") == 0 ? NULL : argv[2]};
    outbox_store_t *s = NULL;
    outbox_diag_t d = {0};
    if (outbox_store_open(argv[1], &o, &s, &d) != OUTBOX_OK) {
        fprintf(stderr, "stage_load: %s\n", d.message);
        return 1;
    }
    outbox_event_t *ev = calloc((size_t)batch, sizeof *ev);
    char (*payload)[64] = calloc((size_t)batch, sizeof *payload);
    char (*key)[24] = calloc((size_t)batch, sizeof *key);
    long done = 0;
    int rc = ev && payload && key ? OUTBOX_OK : OUTBOX_ENOMEM;
    while (rc == OUTBOX_OK && done < count) {
        long m = count - done < batch ? count - done : batch;
        for (long i = 0; i < m; i++) {
            long n = start + done + i;
            if (keys)
                snprintf(key[i], sizeof key[i], "k%ld", n % keys);
            else
                key[i][0] = '\0';
            snprintf(payload[i], sizeof payload[i], "{\"n\":%ld,\"k\":\"%s\"}", n, key[i]);
            ev[i] = (outbox_event_t){.event_type = "load", .payload = payload[i],
                                     .ordering_key = keys ? key[i] : NULL};
        }
        size_t staged = 0;
        rc = outbox_store_stage(s, NULL, argv[3], ev, (size_t)m, &staged);
        done += (long)staged;
    }
    if (rc != OUTBOX_OK)
        fprintf(stderr, "stage_load: %s\n", outbox_store_message(s));
    else
        printf("staged %ld\n", done);
    free(ev);
    free(payload);
    free(key);
    outbox_store_close(s);
    return rc == OUTBOX_OK ? 0 : 1;
}
