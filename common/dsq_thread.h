/* dsq_thread.h - a small persistent worker pool.
 *
 * Why persistent: the engine runs hundreds of parallel matmuls per token, and
 * creating threads for each costs more than the work on small models. The pool
 * runs one job at a time: dsq_pool_run(pool, n, fn, ctx) calls fn(ctx, i, tid)
 * for i in [0, n) spread over the workers and the calling thread, and returns
 * when all are done. Items are handed out in order through an atomic counter,
 * so callers that need determinism must make each item's result independent
 * of which thread ran it. */
#ifndef DSQ_THREAD_H
#define DSQ_THREAD_H

#include <stddef.h>

typedef struct dsq_pool dsq_pool;
typedef void (*dsq_task_fn)(void *ctx, size_t item, int tid);

/* nthreads <= 0 means "all online cores". NULL on failure. */
dsq_pool *dsq_pool_create(int nthreads);
void dsq_pool_free(dsq_pool *p);
/* Threads in the pool counting the caller (>= 1). A NULL pool means 1. */
int dsq_pool_size(const dsq_pool *p);
/* Run fn over [0, n). A NULL pool runs serially on the caller. Not reentrant:
 * fn must not call dsq_pool_run on the same pool. */
void dsq_pool_run(dsq_pool *p, size_t n, dsq_task_fn fn, void *ctx);

int dsq_cpu_count(void);

#endif
