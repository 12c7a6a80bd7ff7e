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

/* Idle workers (and the caller waiting for them) spin this many
 * microseconds before sleeping; DSQ_POOL_SPIN_US in the environment at
 * dsq_pool_create sets it, else the default in dsq_thread.c (50, or 0 when
 * the pool has more threads than the CPUs the process may run on). The setter is
 * for benchmarks that compare settings on one pool (bench/bench_pool.c);
 * call it between jobs. -1 if us is outside [0, DSQ_POOL_SPIN_US_MAX]. */
#define DSQ_POOL_SPIN_US_MAX 1000000L
int dsq_pool_set_spin_us(dsq_pool *p, long us);
long dsq_pool_spin_us(const dsq_pool *p);

int dsq_cpu_count(void);

#endif
