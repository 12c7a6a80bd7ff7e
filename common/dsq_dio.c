/* dsq_dio.c - O_DIRECT appends from a ring of stages on a second thread
 * (dsq_dio.h says why). */
#include "dsq_dio.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

struct dsq_dio {
    int dio_fd, fd;
    uint8_t *mem;                      /* DSQ_DIO_STAGES stages */
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;                 /* queued / written / quit */
    size_t n[DSQ_DIO_STAGES];          /* bytes of each queued stage */
    uint64_t off[DSQ_DIO_STAGES];
    unsigned head, queued;             /* oldest queued stage, how many */
    unsigned fill;                     /* the stage being filled */
    uint64_t done;                     /* end of the written prefix */
    int err;                           /* errno of the first failure */
    int refused;                       /* EINVAL seen: buffered from then on */
    int quit;
};

static uint8_t *stage_at(dsq_dio *a, unsigned i)
{
    return a->mem + (size_t)i * DSQ_DIO_STAGE_BYTES;
}

static int pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t off)
{
    while (n) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return errno;
        if (w == 0) return ENOSPC;
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

static void *run(void *arg)
{
    dsq_dio *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->quit && !a->queued) pthread_cond_wait(&a->cv, &a->mu);
        if (!a->queued) break;   /* quit with nothing left */
        unsigned i = a->head;
        size_t n = a->n[i];
        uint64_t off = a->off[i];
        int refused = a->refused, failed = a->err != 0;
        pthread_mutex_unlock(&a->mu);
        int e = 0;
        if (failed) {
            /* nothing after a failed write: the file stays a prefix */
        } else if (!refused) e = pwrite_all(a->dio_fd, stage_at(a, i), n, off);
        if (!failed && (refused || e == EINVAL)) {
            refused = 1;
            e = pwrite_all(a->fd, stage_at(a, i), n, off);
        }
        pthread_mutex_lock(&a->mu);
        a->refused = refused;
        if (e && !a->err) a->err = e;
        if (!e && !a->err) a->done = off + n;
        a->head = (a->head + 1) % DSQ_DIO_STAGES;
        a->queued--;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

dsq_dio *dsq_dio_start(int dio_fd, int fd)
{
    dsq_dio *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    /* On 2 MiB pages where the kernel allows (advice only): a first touch
     * (page zeroing plus one fault per page) costs about three times less
     * per byte on 2 MiB pages than on 4 KiB ones, most of all in a VM. */
    const size_t bytes = (size_t)DSQ_DIO_STAGES * DSQ_DIO_STAGE_BYTES;
    void *mem = NULL;
    if (posix_memalign(&mem, 2u << 20, bytes) != 0) {
        free(a);
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(mem, bytes, MADV_HUGEPAGE);
#endif
    a->mem = mem;
    a->dio_fd = dio_fd;
    a->fd = fd;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    if (pthread_create(&a->th, NULL, run, a) != 0) {
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->cv);
        free(a->mem);
        free(a);
        return NULL;
    }
    return a;
}

uint8_t *dsq_dio_stage(dsq_dio *a) { return stage_at(a, a->fill); }

int dsq_dio_next(dsq_dio *a, size_t n, uint64_t off)
{
    pthread_mutex_lock(&a->mu);
    if (a->err) {
        int e = a->err;
        pthread_mutex_unlock(&a->mu);
        return -e;
    }
    a->n[a->fill] = n;
    a->off[a->fill] = off;
    a->queued++;
    pthread_cond_broadcast(&a->cv);
    /* The next stage to fill is free once every older one is written. */
    while (a->queued == DSQ_DIO_STAGES && !a->err) pthread_cond_wait(&a->cv, &a->mu);
    int e = a->err;
    a->fill = (a->fill + 1) % DSQ_DIO_STAGES;
    pthread_mutex_unlock(&a->mu);
    return e ? -e : 0;
}

int dsq_dio_drain(dsq_dio *a)
{
    pthread_mutex_lock(&a->mu);
    while (a->queued) pthread_cond_wait(&a->cv, &a->mu);
    int e = a->err;
    pthread_mutex_unlock(&a->mu);
    return e ? -e : 0;
}

uint64_t dsq_dio_done(dsq_dio *a)
{
    pthread_mutex_lock(&a->mu);
    uint64_t d = a->done;
    pthread_mutex_unlock(&a->mu);
    return d;
}

int dsq_dio_refused(dsq_dio *a)
{
    pthread_mutex_lock(&a->mu);
    int r = a->refused;
    pthread_mutex_unlock(&a->mu);
    return r;
}

int dsq_dio_stop(dsq_dio *a)
{
    if (!a) return 0;
    pthread_mutex_lock(&a->mu);
    a->quit = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->th, NULL);   /* writes what is queued first */
    int e = a->err;
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a->mem);
    free(a);
    return e ? -e : 0;
}
