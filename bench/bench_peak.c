/* bench_peak.c - the CPU's arithmetic peaks, so bench_speed.sh can put
 * dsq's kernels next to what the cores can do at all: BF16 dot products
 * (AVX-512 BF16 vdpbf16ps: 2 x 32 FLOP per instruction) and int8 dot
 * products (AVX-512 VNNI vpdpbusd: 2 x 64 OP), on registers only (no
 * memory traffic), per thread and with N threads.
 *
 *   bench_peak [-T threads] [-s seconds]
 *
 * Prints "bf16 dot peak: X GFLOP/s" and "int8 dot peak: Y GOPS" lines, or
 * "not available" when the CPU (cpuid) or the compiler lacks the
 * instructions. Timing: each thread's own CPU time (a shared machine's
 * other jobs do not count), summed over the threads, best of 3; so the
 * N-thread figure assumes a core per thread. Speed only. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

/* Twelve independent accumulators in named variables (an array would be
 * spilled at -O2): enough to cover the instruction latency on the two
 * vector ports of current cores, so the loop runs at throughput. The
 * operands go through an empty asm so nothing is folded at compile time. */
#define BODY(OP) do { \
        a0 = OP(a0, x, y); a1 = OP(a1, x, y); a2 = OP(a2, x, y);  a3 = OP(a3, x, y);   \
        a4 = OP(a4, x, y); a5 = OP(a5, x, y); a6 = OP(a6, x, y);  a7 = OP(a7, x, y);   \
        a8 = OP(a8, x, y); a9 = OP(a9, x, y); a10 = OP(a10, x, y); a11 = OP(a11, x, y); \
    } while (0)
#define ACC 12

#if HAVE_X86
__attribute__((target("avx512f,avx512bf16")))
static float loop_bf16(uint64_t iters)
{
    __m512 a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11;
    /* distinct starting values, or the compiler merges identical chains */
    a0 = _mm512_set1_ps(0); a1 = _mm512_set1_ps(1); a2 = _mm512_set1_ps(2); a3 = _mm512_set1_ps(3);
    a4 = _mm512_set1_ps(4); a5 = _mm512_set1_ps(5); a6 = _mm512_set1_ps(6); a7 = _mm512_set1_ps(7);
    a8 = _mm512_set1_ps(8); a9 = _mm512_set1_ps(9); a10 = _mm512_set1_ps(10); a11 = _mm512_set1_ps(11);
    __m512i xi = _mm512_set1_epi16(0x3f80), yi = _mm512_set1_epi16(0x3c00); /* 1.0, 2^-7 */
    __asm__ volatile("" : "+v"(xi), "+v"(yi));
    __m512bh x = (__m512bh)xi, y = (__m512bh)yi;
    for (uint64_t n = 0; n < iters; n++) BODY(_mm512_dpbf16_ps);
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f,avx512vnni")))
static float loop_vnni(uint64_t iters)
{
    __m512i a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11;
    a0 = _mm512_set1_epi32(0); a1 = _mm512_set1_epi32(1); a2 = _mm512_set1_epi32(2);
    a3 = _mm512_set1_epi32(3); a4 = _mm512_set1_epi32(4); a5 = _mm512_set1_epi32(5);
    a6 = _mm512_set1_epi32(6); a7 = _mm512_set1_epi32(7); a8 = _mm512_set1_epi32(8);
    a9 = _mm512_set1_epi32(9); a10 = _mm512_set1_epi32(10); a11 = _mm512_set1_epi32(11);
    __m512i x = _mm512_set1_epi8(1), y = _mm512_set1_epi8(1);
    __asm__ volatile("" : "+v"(x), "+v"(y));
    for (uint64_t n = 0; n < iters; n++) BODY(_mm512_dpbusd_epi32);
    __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                 _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)));
    return (float)_mm512_reduce_add_epi32(s);
}
#endif

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct job {
    int kind;            /* 0 bf16, 1 vnni */
    uint64_t iters;
    float sink;
    double cpu;          /* thread CPU seconds of the loop */
} job;

static void *run(void *arg)
{
    job *j = arg;
    double t0 = cpu_now();
#if HAVE_X86
    j->sink = j->kind == 0 ? loop_bf16(j->iters) : loop_vnni(j->iters);
#endif
    j->cpu = cpu_now() - t0;
    return NULL;
}

/* Operations per inner iteration: ACC instructions x lanes x 2. */
static double ops_per_iter(int kind) { return (double)ACC * (kind == 0 ? 32 * 2 : 64 * 2); }

static double measure(int kind, int threads, double seconds)
{
    /* Calibrate the iteration count on one thread, then run all. */
    job j = { kind, 1u << 16, 0, 0 };
    run(&j);
    double t1 = j.cpu;
    uint64_t iters = (uint64_t)((double)j.iters * seconds / (t1 > 1e-6 ? t1 : 1e-6));
    if (iters < 1000) iters = 1000;
    double best = 0;
    job *js = calloc((size_t)threads, sizeof *js);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    if (!js || !th) { free(js); free(th); return 0; }
    for (int rep = 0; rep < 3; rep++) {
        int started = 0;
        for (int i = 0; i < threads; i++) {
            js[i].kind = kind;
            js[i].iters = iters;
            if (pthread_create(&th[i], NULL, run, &js[i]) != 0) break;
            started++;
        }
        double r = 0;
        for (int i = 0; i < started; i++) {
            pthread_join(th[i], NULL);
            if (js[i].cpu > 0) r += (double)iters * ops_per_iter(kind) / js[i].cpu / 1e9;
        }
        if (r > best) best = r;
    }
    free(js);
    free(th);
    return best;
}

int main(int argc, char **argv)
{
    int threads = 1;
    double seconds = 0.5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-T") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) seconds = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_peak [-T threads] [-s seconds]\n");
            return 2;
        }
    }
    if (threads < 1 || threads > 1024 || !(seconds > 0)) return 2;
    printf("bench_peak: %d thread(s), register-only loops, best of 3, thread CPU time\n", threads);
#if HAVE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512bf16"))
        printf("bf16 dot peak: %.1f GFLOP/s (vdpbf16ps)\n", measure(0, threads, seconds));
    else
        printf("bf16 dot peak: not available (no AVX-512 BF16)\n");
    if (__builtin_cpu_supports("avx512vnni"))
        printf("int8 dot peak: %.1f GOPS (vpdpbusd)\n", measure(1, threads, seconds));
    else
        printf("int8 dot peak: not available (no AVX-512 VNNI)\n");
#else
    printf("bf16 dot peak: not available (not x86-64)\n");
    printf("int8 dot peak: not available (not x86-64)\n");
#endif
    return 0;
}
