/* dsq_thread.c - persistent pthread pool (see dsq_thread.h). */
#include "dsq_thread.h"
#include "dsq_mem.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

struct dsq_pool {
    int nthreads;               /* workers + caller */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t start_cv, done_cv;
    unsigned long generation;   /* bumped per job so workers see new work */
    int quit;
    int busy;                   /* workers still inside the current job */
    dsq_task_fn fn;
    void *ctx;
    size_t n;
    atomic_size_t next;
};

void *dsq_aligned_alloc(size_t size)
{
    void *p = NULL;
    if (size == 0) size = 64;
    if (posix_memalign(&p, 64, dsq_align_up(size, 64)) != 0) return NULL;
    return p;
}

int dsq_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void drain(dsq_pool *p, int tid)
{
    for (;;) {
        size_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n) break;
        p->fn(p->ctx, i, tid);
    }
}

struct worker_arg { dsq_pool *p; int tid; };

static void *worker(void *arg)
{
    struct worker_arg *wa = arg;
    dsq_pool *p = wa->p;
    int tid = wa->tid;
    free(wa);
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->generation == seen) pthread_cond_wait(&p->start_cv, &p->mu);
        if (p->quit) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        drain(p, tid);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0) pthread_cond_signal(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

dsq_pool *dsq_pool_create(int nthreads)
{
    if (nthreads <= 0) nthreads = dsq_cpu_count();
    dsq_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->nthreads = nthreads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    if (nthreads > 1) {
        p->threads = calloc((size_t)nthreads - 1, sizeof *p->threads);
        if (!p->threads) { free(p); return NULL; }
        for (int i = 0; i < nthreads - 1; i++) {
            struct worker_arg *wa = malloc(sizeof *wa);
            if (wa) {               /* fill before the thread can read it */
                wa->p = p;
                wa->tid = i + 1;
            }
            if (!wa || pthread_create(&p->threads[i], NULL, worker, wa) != 0) {
                free(wa);
                p->nthreads = i + 1;   /* run with what we got */
                break;
            }
        }
    }
    return p;
}

int dsq_pool_size(const dsq_pool *p) { return p ? p->nthreads : 1; }

void dsq_pool_run(dsq_pool *p, size_t n, dsq_task_fn fn, void *ctx)
{
    if (!p || p->nthreads == 1 || n <= 1) {
        for (size_t i = 0; i < n; i++) fn(ctx, i, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    atomic_store(&p->next, 0);
    p->busy = p->nthreads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);
    drain(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->busy > 0) pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void dsq_pool_free(dsq_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nthreads - 1; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->start_cv);
    pthread_cond_destroy(&p->done_cv);
    free(p);
}
