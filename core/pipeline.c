/* One stage of a pipeline, on a thread of its own (pipeline.h). */
#include "pipeline.h"

#include <pthread.h>
#include <stdlib.h>

#include "outbox_int.h"

/* A ring of at most depth items. */
typedef struct ring {
    void **v;
    size_t head, n;
} ring_t;

struct outbox_pipe {
    void (*work)(void *ctx, void *item);
    void *ctx;
    size_t depth;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t todo_cv; /* the worker waits on it */
    pthread_cond_t done_cv; /* the caller waits on it, on CLOCK_MONOTONIC */
    /* Under mu. */
    ring_t todo, done;
    int stop;
};

static void ring_push(ring_t *r, size_t depth, void *item)
{
    r->v[(r->head + r->n) % depth] = item;
    r->n++;
}

static void *ring_pop(ring_t *r, size_t depth)
{
    void *item = r->v[r->head];
    r->head = (r->head + 1) % depth;
    r->n--;
    return item;
}

static void *worker(void *arg)
{
    outbox_pipe_t *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->todo.n == 0 && !p->stop)
            pthread_cond_wait(&p->todo_cv, &p->mu);
        if (p->todo.n == 0)
            break;
        void *item = ring_pop(&p->todo, p->depth);
        pthread_mutex_unlock(&p->mu);
        p->work(p->ctx, item);
        pthread_mutex_lock(&p->mu);
        ring_push(&p->done, p->depth, item);
        pthread_cond_signal(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Everything but the thread, once it is joined or was never started. */
static void destroy(outbox_pipe_t *p)
{
    pthread_cond_destroy(&p->done_cv);
    pthread_cond_destroy(&p->todo_cv);
    pthread_mutex_destroy(&p->mu);
    free(p->todo.v);
    free(p->done.v);
    free(p);
}

int outbox_pipe_start(size_t depth, void (*work)(void *ctx, void *item), void *ctx,
                      outbox_pipe_t **out)
{
    *out = NULL;
    outbox_pipe_t *p = calloc(1, sizeof *p);
    if (p == NULL)
        return OUTBOX_ENOMEM;
    p->work = work;
    p->ctx = ctx;
    p->depth = depth;
    p->todo.v = calloc(depth, sizeof *p->todo.v);
    p->done.v = calloc(depth, sizeof *p->done.v);
    if (p->todo.v == NULL || p->done.v == NULL) {
        free(p->todo.v);
        free(p->done.v);
        free(p);
        return OUTBOX_ENOMEM;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->todo_cv, NULL);
    outbox_cond_init_monotonic(&p->done_cv);
    if (pthread_create(&p->thread, NULL, worker, p) != 0) {
        destroy(p);
        return OUTBOX_ENOMEM;
    }
    *out = p;
    return OUTBOX_OK;
}

void outbox_pipe_put(outbox_pipe_t *p, void *item)
{
    pthread_mutex_lock(&p->mu);
    ring_push(&p->todo, p->depth, item);
    pthread_cond_signal(&p->todo_cv);
    pthread_mutex_unlock(&p->mu);
}

void *outbox_pipe_take(outbox_pipe_t *p, int64_t until_us)
{
    void *item = NULL;
    pthread_mutex_lock(&p->mu);
    while (p->done.n == 0 && until_us > 0 && outbox_monotonic_us() < until_us)
        outbox_cond_wait_until(&p->done_cv, &p->mu, until_us);
    if (p->done.n > 0)
        item = ring_pop(&p->done, p->depth);
    pthread_mutex_unlock(&p->mu);
    return item;
}

void outbox_pipe_stop(outbox_pipe_t *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_signal(&p->todo_cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    destroy(p);
}
