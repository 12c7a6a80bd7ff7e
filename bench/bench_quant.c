/* bench_quant.c - quantize throughput and gemm speed of every scheme.
 *
 *   build/bench/bench_quant [rows cols threads reps Tlist]
 *       defaults: 2048 7168 1 5 1,64,256
 *
 * rows = out_features, cols = in_features; threads 0 = all cores; Tlist =
 * comma-separated token counts. Prints, per scheme (plus w4a8 with group 128
 * next to its per-channel default): quantize speed in GB/s of f32 input,
 * and for each T the best time of one gemm call and GFLOP/s (2*rows*cols*T),
 * with the ratio to OpenBLAS on the same matrix in f32 (cblas_sgemv for
 * T = 1, cblas_sgemm otherwise) in brackets. T = 1 is decode: the cache is
 * evicted before each call so the weights come from DRAM as in a real model;
 * larger T are prefill (warm). "1w" is decode with the cache left warm: on a
 * matrix that fits in cache (e.g. 192 x 7168) it is the kernel's compute
 * ceiling, what a core could stream at most if memory were free. The last
 * lines compare the int paths with sgemm and awq-w4a16 decode with bf16
 * decode.
 *
 * Timing: with one thread, the calling thread's CPU time
 * (CLOCK_THREAD_CPUTIME_ID), so other jobs on a shared machine do not
 * inflate the numbers (cache and memory bandwidth are still shared); with
 * more threads, wall time. Best of reps after one warm-up call. Kernel level:
 * best for the CPU, or DSQ_SIMD=ref|avx2|avx512. Speed only; correctness is
 * tests/test_quant.c. */
#include "scheme.h"
#include "kernels.h"
#include "dsq_mem.h"
#include "dsq_thread.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_T 16

static int g_cpu_clock;   /* 1: thread CPU time (single thread) */

static double now(void)
{
    struct timespec ts;
    clock_gettime(g_cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t g_rng = 88172645463325252ull;
static float nrand(void)
{
    float s = 0;
    for (int i = 0; i < 4; i++) {
        g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
        s += (float)(g_rng >> 40) / 16777216.0f;
    }
    return (s - 2.0f) * 1.7320508f;
}

/* Decode reads weights from DRAM in a real model (they are GBs); evict the
 * last-level cache before each decode timing so the blob is not L3-resident. */
static uint8_t *g_evict;
static size_t g_evict_n = (size_t)96 << 20;
static void evict(void)
{
    if (!g_evict) g_evict = calloc(1, g_evict_n);
    volatile uint8_t *p = g_evict;
    for (size_t i = 0; i < g_evict_n; i += 64) p[i]++;
}

/* best-of-reps seconds of one gemm call; cold = evict caches first */
static double time_gemm(const dsq_scheme *sc, const dsq_qview *v, const float *x, int64_t T,
                        float *y, dsq_pool *pool, int reps, int cold)
{
    size_t need = sc->gemm_scratch(v, T, dsq_pool_size(pool));
    void *scr = need ? dsq_aligned_alloc(need) : NULL;
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        if (cold) evict();
        double t0 = now();
        if (sc->gemm(v, x, T, y, pool, scr, need) != 0) { fprintf(stderr, "gemm failed\n"); exit(1); }
        double dt = now() - t0;
        if (r > 0 && dt < best) best = dt;   /* first call warms caches and pages */
    }
    free(scr);
    return best;
}

static double time_blas(const float *w, const float *x, float *y, int64_t rows, int64_t cols,
                        int64_t T, int reps, int cold)
{
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        if (cold) evict();
        double t0 = now();
        if (T == 1)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)rows, (int)cols, 1.0f, w, (int)cols, x, 1,
                        0.0f, y, 1);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)rows, (int)cols, 1.0f,
                        x, (int)cols, w, (int)cols, 0.0f, y, (int)rows);
        double dt = now() - t0;
        if (r > 0 && dt < best) best = dt;
    }
    return best;
}

int main(int argc, char **argv)
{
    int64_t rows = argc > 1 ? atoll(argv[1]) : 2048;
    int64_t cols = argc > 2 ? atoll(argv[2]) : 7168;
    int threads = argc > 3 ? atoi(argv[3]) : 1;
    int reps = argc > 4 ? atoi(argv[4]) : 5;
    const char *tlist = argc > 5 ? argv[5] : "1,64,256";
    int64_t Ts[MAX_T];
    int hot[MAX_T], nT = 0;
    for (const char *p = tlist; *p && nT < MAX_T;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1) break;
        hot[nT] = *end == 'w';   /* "1w": decode with the cache left warm */
        if (hot[nT]) end++;
        Ts[nT++] = v;
        p = *end == ',' ? end + 1 : end;
    }
    if (rows < 1 || cols < 1 || reps < 1 || nT == 0) {
        fprintf(stderr, "usage: bench_quant [rows cols threads reps T1,T2,...]  (1w: T=1, cache warm)\n");
        return 2;
    }
    int64_t TP = 1;
    for (int i = 0; i < nT; i++) TP = Ts[i] > TP ? Ts[i] : TP;
    dsq_pool *pool = dsq_pool_create(threads);
    int nth = dsq_pool_size(pool);
    g_cpu_clock = nth == 1;
    float *w = malloc((size_t)(rows * cols) * sizeof *w);
    float *x = malloc((size_t)(TP * cols) * sizeof *x);
    float *y = malloc((size_t)(TP * rows) * sizeof *y);
    if (!w || !x || !y) return 1;
    for (int64_t i = 0; i < rows * cols; i++) w[i] = 0.02f * nrand();
    for (int64_t i = 0; i < TP * cols; i++) x[i] = nrand();
    const double gf1 = 2.0 * (double)rows * (double)cols / 1e9;

    printf("bench_quant: W [%lld x %lld] f32, %d thread(s), kernels '%s', best of %d, %s time\n",
           (long long)rows, (long long)cols, nth, dsq_kernels_get()->name, reps,
           g_cpu_clock ? "thread CPU" : "wall");
    printf("%-14s %8s %7s", "scheme", "blob MB", "q GB/s");
    for (int i = 0; i < nT; i++) {
        char tl[24];
        snprintf(tl, sizeof tl, "%lld%s", (long long)Ts[i], hot[i] ? "w" : "");
        printf(" | T=%-5s %7s %6s %6s", tl, "ms", "GF/s", "xBLAS");
    }
    printf("\n");

    /* OpenBLAS baselines on f32 with as many OpenBLAS threads as the pool
     * has. Afterwards OpenBLAS runs single-threaded: the float schemes call
     * it from the pool's tasks. */
    openblas_set_num_threads(nth);
    double blas[MAX_T];
    printf("%-14s %8.1f %7s", "openblas f32", (double)(rows * cols * 4) / 1e6, "-");
    for (int i = 0; i < nT; i++) {
        blas[i] = time_blas(w, x, y, rows, cols, Ts[i], reps, Ts[i] == 1 && !hot[i]);
        printf(" | %6s %8.3f %6.1f %6s", "", blas[i] * 1e3, gf1 * (double)Ts[i] / blas[i], "1.00");
    }
    printf("\n");
    fflush(stdout);
    openblas_set_num_threads(1);

    double t_bf16_1 = 0, t_awq_1 = 0, best_int[MAX_T];
    const char *best_name[MAX_T];
    for (int i = 0; i < nT; i++) { best_int[i] = 1e30; best_name[i] = "-"; }
    for (int i = 0; i <= dsq_scheme_count(); i++) {
        /* one extra row after the table: w4a8 with group 128 */
        const dsq_scheme *sc = i < dsq_scheme_count() ? dsq_scheme_at(i) : dsq_scheme_by_id(DSQ_SCHEME_W4A8);
        if (!sc) continue;
        int32_t group = i < dsq_scheme_count() ? DSQ_GROUP_DEFAULT : 128;
        dsq_qshape sh;
        if (dsq_qshape_init(&sh, sc, rows, cols, group) != 0) continue;
        char name[40];
        if (group == 128) snprintf(name, sizeof name, "%s-g128", sc->name);
        else snprintf(name, sizeof name, "%s", sc->name);
        size_t n;
        sc->blob_size(&sh, &n);
        uint8_t *blob = dsq_aligned_alloc(n);
        dsq_qparams p;
        dsq_qparams_init(&p);
        p.has_act_static = 1;     /* w8a8: fixed static params */
        p.act_scale = 4.0f / 127.0f;
        p.act_offset = 0;
        double qbest = 1e30;
        for (int r = 0; r < (reps < 2 ? reps : 2); r++) {
            double t0 = now();
            if (dsq_quantize_tensor(sc, w, &sh, &p, blob, pool, NULL) != 0) {
                fprintf(stderr, "%s: quantize failed\n", sc->name);
                return 1;
            }
            double dt = now() - t0;
            if (dt < qbest) qbest = dt;
        }
        dsq_qview v;
        if (dsq_qview_init(&v, sc, &sh, blob, n, NULL) != 0) return 1;
        printf("%-14s %8.1f %7.2f", name, (double)n / 1e6, (double)(rows * cols) * 4.0 / qbest / 1e9);
        for (int k = 0; k < nT; k++) {
            const int cold = Ts[k] == 1 && !hot[k];
            double t = time_gemm(sc, &v, x, Ts[k], y, pool, cold ? reps * 2 : reps, cold);
            printf(" | %6s %8.3f %6.1f %6.2f", "", t * 1e3, gf1 * (double)Ts[k] / t, blas[k] / t);
            if (cold && sc->id == DSQ_SCHEME_BF16) t_bf16_1 = t;
            if (cold && sc->id == DSQ_SCHEME_AWQ_W4A16) t_awq_1 = t;
            if (sc->act != DSQ_ACT_FLOAT && t < best_int[k]) { best_int[k] = t; best_name[k] = sc->name; }
        }
        printf("\n");
        fflush(stdout);
        free(blob);
    }
    for (int k = 0; k < nT; k++)
        if (Ts[k] > 1)
            printf("T=%lld: fastest int path %s = %.2fx sgemm\n", (long long)Ts[k], best_name[k],
                   blas[k] / best_int[k]);
    if (t_bf16_1 > 0 && t_awq_1 > 0)
        printf("decode T=1: awq-w4a16 %.3f ms vs bf16 %.3f ms (%.2fx faster)\n", t_awq_1 * 1e3,
               t_bf16_1 * 1e3, t_bf16_1 / t_awq_1);
    dsq_pool_free(pool);
    free(w);
    free(x);
    free(y);
    free(g_evict);
    return 0;
}
