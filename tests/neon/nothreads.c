/* nothreads.c - linked into tests/neon/neon_check.sh's cross-built test with
 * -Wl,--wrap=pthread_create: qemu-user on some hosts cannot start guest
 * threads (clone hangs), so thread creation fails at once and dsq_pool runs
 * every job on the caller, which it already does when threads are short.
 * The kernels under test are the same either way. */
#include <errno.h>
#include <pthread.h>

int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg);

int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
    (void)t;
    (void)a;
    (void)fn;
    (void)arg;
    return EAGAIN;
}
