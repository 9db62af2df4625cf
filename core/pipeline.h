/* A stage of a pipeline: one worker thread that takes items in the order
 * they are put, works on each, and hands them back in that order.
 *
 * The pipelined relay publishes on it: its own thread claims and settles,
 * the worker publishes, so the store and the broker work at once. At most
 * `depth` items are in the stage at a time (put in and not yet taken
 * back); the caller keeps that count. */
#ifndef OUTBOX_PIPELINE_H
#define OUTBOX_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

typedef struct outbox_pipe outbox_pipe_t;

/* Start the worker, which calls work(ctx, item) for each item. */
int outbox_pipe_start(size_t depth, void (*work)(void *ctx, void *item), void *ctx,
                      outbox_pipe_t **out);
/* Queue item for the worker; never blocks (at most depth are in). */
void outbox_pipe_put(outbox_pipe_t *p, void *item);
/* The next item the worker finished, waiting until the monotonic time
 * until_us at most (0: not at all); NULL when none was done by then. */
void *outbox_pipe_take(outbox_pipe_t *p, int64_t until_us);
/* Join the worker and free; every item put must have been taken back.
 * NULL is a no-op. */
void outbox_pipe_stop(outbox_pipe_t *p);

#endif
