/* dsq_syncer.c - background fdatasync behind a writer (dsq_syncer.h). */
#include "dsq_syncer.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

struct dsq_syncer {
    int fd;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;    /* the thread: asked moved; waiters: a flush ended */
    uint64_t asked;       /* [0, asked) written and to be made durable */
    uint64_t durable;     /* [0, durable) made durable by a finished flush */
    int busy;             /* a flush is in flight */
    int err;              /* errno of the first failed flush, else 0 */
    int quit;
};

static void *run(void *arg)
{
    dsq_syncer *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->quit && s->asked <= s->durable) pthread_cond_wait(&s->cv, &s->mu);
        if (s->quit) break;
        /* Everything below 'upto' was written before this flush starts,
         * so the flush covers it. */
        uint64_t upto = s->asked;
        s->busy = 1;
        pthread_mutex_unlock(&s->mu);
        int r = fdatasync(s->fd);
        int e = r != 0 ? errno : 0;
        pthread_mutex_lock(&s->mu);
        s->busy = 0;
        if (e && !s->err) s->err = e;
        if (!e && upto > s->durable) s->durable = upto;
        if (e) s->durable = s->asked;   /* failed: stop retrying; err is sticky */
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

dsq_syncer *dsq_syncer_start(int fd)
{
    if (fd < 0) return NULL;
    dsq_syncer *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->fd = fd;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->th, NULL, run, s) != 0) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
        return NULL;
    }
    return s;
}

void dsq_syncer_ask(dsq_syncer *s, uint64_t upto)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    if (upto > s->asked) {
        s->asked = upto;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

uint64_t dsq_syncer_asked(const dsq_syncer *s)
{
    if (!s) return 0;
    pthread_mutex_lock((pthread_mutex_t *)&s->mu);
    uint64_t a = s->asked;
    pthread_mutex_unlock((pthread_mutex_t *)&s->mu);
    return a;
}

int dsq_syncer_done(dsq_syncer *s, uint64_t upto)
{
    if (!s) return 0;
    pthread_mutex_lock(&s->mu);
    int r = s->err ? -s->err : s->durable >= upto;
    pthread_mutex_unlock(&s->mu);
    return r;
}

void dsq_syncer_truncated(dsq_syncer *s, uint64_t len)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    /* a flush in flight would record its 'upto', which may lie past len */
    while (s->busy) pthread_cond_wait(&s->cv, &s->mu);
    if (s->asked > len) s->asked = len;
    if (s->durable > len) s->durable = len;
    pthread_mutex_unlock(&s->mu);
}

int dsq_syncer_stop(dsq_syncer *s)
{
    if (!s) return 0;
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    int e = s->err;
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    return e ? -e : 0;
}
