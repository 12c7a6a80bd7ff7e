/* dsq_thread.c - persistent pthread pool (see dsq_thread.h). */
#include "dsq_thread.h"
#include "dsq_mem.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

struct dsq_pool {
    int nthreads;               /* workers + caller */
    pthread_t *threads;
    pthread_mutex_t mu;         /* only for sleeping and waking */
    pthread_cond_t start_cv, done_cv;
    atomic_ulong generation;    /* bumped per job so workers see new work */
    atomic_int quit;
    atomic_int busy;            /* workers still inside the current job */
    atomic_int sleepers;        /* workers blocked on start_cv */
    atomic_int caller_sleeps;   /* the caller is blocked on done_cv */
    atomic_long spin_ns;        /* how long to spin before sleeping (set between jobs) */
    dsq_task_fn fn;
    void *ctx;
    size_t n;
    atomic_size_t next;
};

/* Waits spin before they sleep. A decode step runs dozens of pool jobs per
 * layer with a few microseconds of serial work between them (norms, the
 * router, activation quantization); a worker that went to sleep after each
 * costs a futex wake-up on the caller's side and a scheduler wake-up (tens
 * of microseconds on a loaded machine) before it helps with the next job.
 * Spinning ~50 us covers those gaps; an idle pool (between requests) still
 * sleeps. With more threads than the CPUs this process may run on, a
 * spinning thread holds a CPU that a thread with work needs: there the
 * default is 0 (bench/bench_pool.c, 4 threads on 2 cores, e16 w4a8 decode:
 * spinning cost 41% more CPU time per token and was slower in wall time
 * too). DSQ_POOL_SPIN_US overrides either default (0: sleep at once). */
#define DSQ_POOL_SPIN_NS_DEFAULT 50000L

/* CPUs the process may run on (its affinity mask), else the online count. */
static int usable_cpus(void)
{
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
#endif
    return dsq_cpu_count();
}

static long mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Spin until *a != v or the budget runs out; returns the last value seen. */
static unsigned long spin_while_ul(atomic_ulong *a, unsigned long v, long budget_ns)
{
    unsigned long g = atomic_load_explicit(a, memory_order_acquire);
    if (g != v || budget_ns <= 0) return g;
    long t0 = mono_ns();
    for (unsigned i = 1;; i++) {
        cpu_relax();
        g = atomic_load_explicit(a, memory_order_acquire);
        if (g != v) return g;
        if ((i & 63) == 0 && mono_ns() - t0 > budget_ns) return g;
    }
}

static int spin_while_nonzero(atomic_int *a, long budget_ns)
{
    int b = atomic_load_explicit(a, memory_order_acquire);
    if (b == 0 || budget_ns <= 0) return b;
    long t0 = mono_ns();
    for (unsigned i = 1;; i++) {
        cpu_relax();
        b = atomic_load_explicit(a, memory_order_acquire);
        if (b == 0) return b;
        if ((i & 63) == 0 && mono_ns() - t0 > budget_ns) return b;
    }
}

/* Buffers of DSQ_HUGE_MIN bytes or more (weights, decompressed payloads,
 * big scratch) start on a 2 MiB boundary and ask for transparent huge pages
 * (advice; the kernel's "madvise" THP mode, the common default, gives none
 * without it). Streaming weights through 4 KiB pages costs TLB misses, and
 * in a VM each one is a two-level walk: a read loop over 2 MiB pages runs
 * steadily faster, where 4 KiB pages vary by 2x. The leading slack is virtual only and the partial last huge
 * page stays on 4 KiB pages, so RSS does not grow. */
#define DSQ_HUGE_MIN ((size_t)4 << 20)

void *dsq_aligned_alloc(size_t size)
{
    void *p = NULL;
    if (size == 0) size = 64;
    size_t align = size >= DSQ_HUGE_MIN ? DSQ_HUGE_PAGE : 64;
    if (posix_memalign(&p, align, dsq_align_up(size, 64)) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    if (align == DSQ_HUGE_PAGE) (void)madvise(p, size / DSQ_HUGE_PAGE * DSQ_HUGE_PAGE, MADV_HUGEPAGE);
#endif
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

/* Sleeping and waking pair up as in Dekker's algorithm: each side stores its
 * flag, then loads the other's (sequentially consistent atomics), so either
 * the sleeper sees the new value or the waker sees the sleeper and signals
 * under the mutex. */
static void *worker(void *arg)
{
    struct worker_arg *wa = arg;
    dsq_pool *p = wa->p;
    int tid = wa->tid;
    free(wa);
    unsigned long seen = 0;
    for (;;) {
        unsigned long g = spin_while_ul(&p->generation, seen, atomic_load_explicit(&p->spin_ns, memory_order_relaxed));
        if (g == seen && !atomic_load(&p->quit)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (!atomic_load(&p->quit) && atomic_load(&p->generation) == seen)
                pthread_cond_wait(&p->start_cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->quit)) break;
        seen = atomic_load(&p->generation);
        drain(p, tid);
        if (atomic_fetch_sub(&p->busy, 1) == 1 && atomic_load(&p->caller_sleeps)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

dsq_pool *dsq_pool_create(int nthreads)
{
    if (nthreads <= 0) nthreads = dsq_cpu_count();
    dsq_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->nthreads = nthreads;
    long spin = nthreads > usable_cpus() ? 0 : DSQ_POOL_SPIN_NS_DEFAULT;
    const char *e = getenv("DSQ_POOL_SPIN_US");
    if (e && *e) {
        char *end;
        long us = strtol(e, &end, 10);
        if (*end == 0 && us >= 0 && us <= DSQ_POOL_SPIN_US_MAX) spin = us * 1000L;
    }
    atomic_init(&p->spin_ns, spin);
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

int dsq_pool_set_spin_us(dsq_pool *p, long us)
{
    if (!p || us < 0 || us > DSQ_POOL_SPIN_US_MAX) return -1;
    atomic_store_explicit(&p->spin_ns, us * 1000L, memory_order_relaxed);
    return 0;
}

long dsq_pool_spin_us(const dsq_pool *p)
{
    return p ? atomic_load_explicit(&p->spin_ns, memory_order_relaxed) / 1000L : 0;
}

void dsq_pool_run(dsq_pool *p, size_t n, dsq_task_fn fn, void *ctx)
{
    if (!p || p->nthreads == 1 || n <= 1) {
        for (size_t i = 0; i < n; i++) fn(ctx, i, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    atomic_store(&p->next, 0);
    atomic_store(&p->busy, p->nthreads - 1);
    atomic_fetch_add(&p->generation, 1);   /* publishes fn, ctx, n (seq_cst) */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->start_cv);
        pthread_mutex_unlock(&p->mu);
    }
    drain(p, 0);
    /* the workers finish their last items: usually a few microseconds */
    if (spin_while_nonzero(&p->busy, atomic_load_explicit(&p->spin_ns, memory_order_relaxed)) != 0) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->caller_sleeps, 1);
        while (atomic_load(&p->busy) > 0) pthread_cond_wait(&p->done_cv, &p->mu);
        atomic_store(&p->caller_sleeps, 0);
        pthread_mutex_unlock(&p->mu);
    }
}

void dsq_pool_free(dsq_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, 1);
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nthreads - 1; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->start_cv);
    pthread_cond_destroy(&p->done_cv);
    free(p);
}
