/* bench_quant.c - quantize throughput and gemm speed of every scheme.
 *
 *   build/bench/bench_quant [rows cols threads reps]     (default 2048 7168 0 5)
 *
 * rows = out_features, cols = in_features; threads 0 = all cores. Prints,
 * per scheme: quantize speed in GB/s of f32 input (and of the equivalent
 * bf16 input, the converter's metric), and gemm GFLOP/s (2*rows*cols*T per
 * call) for T = 1 (decode, caches evicted first: weights come from DRAM as
 * in a real model) and T = 64 (prefill), next to OpenBLAS on the same
 * matrix in f32 (cblas_sgemv for T = 1, cblas_sgemm for T = 64). Kernel level: best for the CPU, or
 * DSQ_SIMD=ref|avx2|avx512. Speed only; correctness is tests/test_quant.c. */
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

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
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

int main(int argc, char **argv)
{
    int64_t rows = argc > 1 ? atoll(argv[1]) : 2048;
    int64_t cols = argc > 2 ? atoll(argv[2]) : 7168;
    int threads = argc > 3 ? atoi(argv[3]) : 0;
    int reps = argc > 4 ? atoi(argv[4]) : 5;
    if (rows < 1 || cols < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_quant [rows cols threads reps]\n");
        return 2;
    }
    dsq_pool *pool = dsq_pool_create(threads);
    int nth = dsq_pool_size(pool);
    const int64_t TP = 64;
    float *w = malloc((size_t)(rows * cols) * sizeof *w);
    float *x = malloc((size_t)(TP * cols) * sizeof *x);
    float *y = malloc((size_t)(TP * rows) * sizeof *y);
    if (!w || !x || !y) return 1;
    for (int64_t i = 0; i < rows * cols; i++) w[i] = 0.02f * nrand();
    for (int64_t i = 0; i < TP * cols; i++) x[i] = nrand();
    double gf1 = 2.0 * (double)rows * (double)cols / 1e9, gfp = gf1 * (double)TP;

    printf("bench_quant: W [%lld x %lld] f32, %d thread(s), kernels '%s', best of %d\n",
           (long long)rows, (long long)cols, nth, dsq_kernels_get()->name, reps);

    /* OpenBLAS baselines on f32 with as many OpenBLAS threads as the pool
     * has: sgemv for decode, sgemm for prefill. Afterwards OpenBLAS runs
     * single-threaded: the float schemes call it from the pool's tasks. */
    openblas_set_num_threads(nth);
    double bt1 = 1e30, btp = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        evict();
        double t0 = now();
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)rows, (int)cols, 1.0f, w, (int)cols, x, 1,
                    0.0f, y, 1);
        double t1 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)TP, (int)rows, (int)cols, 1.0f,
                    x, (int)cols, w, (int)cols, 0.0f, y, (int)rows);
        double t2 = now();
        if (r > 0) {
            if (t1 - t0 < bt1) bt1 = t1 - t0;
            if (t2 - t1 < btp) btp = t2 - t1;
        }
    }
    printf("%-14s %10s %10s %10s | %9s %9s | %9s %9s\n", "scheme", "blob MB", "q GB/s", "q bf16GB/s",
           "T=1 ms", "GFLOP/s", "T=64 ms", "GFLOP/s");
    printf("%-14s %10.1f %10s %10s | %9.3f %9.1f | %9.3f %9.1f\n", "openblas f32",
           (double)(rows * cols * 4) / 1e6, "-", "-", bt1 * 1e3, gf1 / bt1, btp * 1e3, gfp / btp);
    openblas_set_num_threads(1);

    for (int i = 0; i < dsq_scheme_count(); i++) {
        const dsq_scheme *sc = dsq_scheme_at(i);
        if (!sc) continue;
        dsq_qshape sh;
        if (dsq_qshape_init(&sh, sc, rows, cols, DSQ_GROUP_DEFAULT) != 0) continue;
        size_t n;
        sc->blob_size(&sh, &n);
        uint8_t *blob = dsq_aligned_alloc(n);
        dsq_qparams p;
        dsq_qparams_init(&p);
        p.has_act_static = 1;     /* w8a8: fixed static params */
        p.act_scale = 4.0f / 127.0f;
        p.act_offset = 0;
        double qbest = 1e30;
        for (int r = 0; r < reps; r++) {
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
        double t1 = time_gemm(sc, &v, x, 1, y, pool, reps * 2, 1);
        double tp = time_gemm(sc, &v, x, TP, y, pool, reps, 0);
        double in = (double)(rows * cols) * 4.0;
        printf("%-14s %10.1f %10.2f %10.2f | %9.3f %9.1f | %9.3f %9.1f\n", sc->name, (double)n / 1e6,
               in / qbest / 1e9, in / 2 / qbest / 1e9, t1 * 1e3, gf1 / t1, tp * 1e3, gfp / tp);
        free(blob);
    }
    dsq_pool_free(pool);
    free(w);
    free(x);
    free(y);
    return 0;
}
