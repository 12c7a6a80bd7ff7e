/* kernels_ref.c - the scalar reference kernels (the specification every fast
 * level is tested against) and the run-time dispatch between levels. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")   /* the float order below is the spec */
#endif

#include "kernels.h"
#include "dsq_mem.h"
#include "actq.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#endif

/* ---- element access (shared by dequantize, dequant_tile and gemv) -------- */

static inline float ref_deq(const dsq_qview *v, int64_t n, int64_t k)
{
    const uint8_t *row = v->w + (size_t)n * v->layout.row_bytes;
    switch (v->scheme->id) {
    case DSQ_SCHEME_F32: {
        float f;
        memcpy(&f, row + 4 * k, 4);
        return f;
    }
    case DSQ_SCHEME_BF16: return dsq_bf16_to_f32(dsq_load_u16le(row + 2 * k));
    case DSQ_SCHEME_W8A8_DYNAMIC:
    case DSQ_SCHEME_W8A8:
        return (float)(int8_t)row[k] * v->scales[n];
    case DSQ_SCHEME_W4A8: {
        size_t i = (size_t)n * (size_t)v->layout.ngroups + (size_t)(k / v->layout.gsize);
        return (float)(dsq_i4_get(row, k) - 8) * v->scales[i];
    }
    case DSQ_SCHEME_AWQ_W4A16: {
        size_t i = (size_t)n * (size_t)v->layout.ngroups + (size_t)(k / v->layout.gsize);
        return (float)(dsq_i4_get(row, k) - (int)v->zeros[i]) * v->scales[i];
    }
    default: return 0.0f;
    }
}

/* ---- quantize-side primitives -------------------------------------------- */

static uint32_t ref_absmax_bits(const float *x, int64_t n)
{
    uint32_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t b = dsq_f32_bits(x[i]) & 0x7fffffffu;
        if (b > m) m = b;
    }
    return m;
}

static void ref_minmax(const float *x, int64_t n, float *mn, float *mx)
{
    float lo = x[0], hi = x[0];
    for (int64_t i = 1; i < n; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
    }
    *mn = lo;
    *mx = hi;
}

static void ref_quant_i8(const float *x, int64_t n, float scale, int32_t add, int32_t lo,
                         int32_t hi, int8_t *q)
{
    const float flo = (float)(lo - add), fhi = (float)(hi - add);
    for (int64_t i = 0; i < n; i++) {
        float r = rintf(x[i] / scale);
        r = fmaxf(r, flo);  /* NaN -> flo */
        r = fminf(r, fhi);
        q[i] = (int8_t)((int32_t)r + add);
    }
}

/* qstats / qtrial's reduction of 16 lanes, in double, as a tree (lane l
 * plus lane l + 8, then + 4, + 2, + 1): the order of the vector levels'
 * halving adds, and 4 dependent adds instead of 16. */
static double lanes16(const double v[16])
{
    double a[8];
    for (int l = 0; l < 8; l++) a[l] = v[l] + v[l + 8];
    for (int l = 0; l < 4; l++) a[l] = a[l] + a[l + 4];
    for (int l = 0; l < 2; l++) a[l] = a[l] + a[l + 2];
    return a[0] + a[1];
}

static double lanes16f(const float f[16])
{
    double v[16];
    for (int l = 0; l < 16; l++) v[l] = (double)f[l];
    return lanes16(v);
}

/* The levels without vector passes of their own (AVX2, NEON) run these,
 * so they are written to vectorize: blocks of 16 elements, lane l of each
 * block in accumulator l, which is the vector levels' lane j % 16, so the
 * bits are the same vectorized or not. The clamp is spelled as compares
 * (r > lo ? r : lo: a NaN gives lo, as fmaxf and the vector max do), which
 * the compiler vectorizes where fmaxf's NaN rule would stop it. On x86 an
 * x86-64-v3 clone (AVX2, FMA: rintf and fmaf become one instruction each);
 * on aarch64 both are one instruction anyway. Before this, the scalar loop
 * made the w4a8 search ~50 CPU-s per GB of BF16 on the AVX2 level. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define QPASS_CLONES __attribute__((target_clones("arch=x86-64-v3", "default"), optimize("O3")))
#elif defined(__GNUC__) && !defined(__clang__)
#define QPASS_CLONES __attribute__((optimize("O3")))
#else
#define QPASS_CLONES
#endif

/* element j into lane l: its clamped code r (kept in rr[l] for qstats'
 * error) and the three fit sums */
#define QPASS_LANE(R_OF_X, l, j)                                                       \
    do {                                                                               \
        float r = R_OF_X;                                                              \
        r = r > lo ? r : lo;                                                           \
        r = r < hi ? r : hi;                                                           \
        const float cr = c[j] * r;                                                     \
        a0[l] = a0[l] + cr;                                                            \
        a1[l] = fmaf(cr, r, a1[l]);                                                    \
        a2[l] = fmaf(cr, x[j], a2[l]);                                                 \
        rr[l] = r;                                                                     \
    } while (0)

QPASS_CLONES void dsq_qstats_scalar(const float *x, const float *c, int64_t n, float scale, float lo, float hi,
                                    double out[4])
{
    /* f32 partials for the fit sums, double for the error (two halves of 8
     * in the vector code, the same lanes here) */
    float a0[16] = { 0 }, a1[16] = { 0 }, a2[16] = { 0 }, rr[16];
    double e[16] = { 0 };
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        for (int l = 0; l < 16; l++) QPASS_LANE(rintf(x[j + l] / scale), l, j + l);
        for (int l = 0; l < 16; l++) {
            const double dd = (double)(x[j + l] - rr[l] * scale);
            e[l] = e[l] + (double)c[j + l] * dd * dd;
        }
    }
    for (int l = 0; j < n; j++, l++) {
        QPASS_LANE(rintf(x[j] / scale), l, j);
        const double dd = (double)(x[j] - rr[l] * scale);
        e[l] = e[l] + (double)c[j] * dd * dd;
    }
    out[0] = lanes16f(a0);
    out[1] = lanes16f(a1);
    out[2] = lanes16f(a2);
    out[3] = lanes16(e);
}

QPASS_CLONES void dsq_qtrial_scalar(const float *x, const float *c, int64_t n, float inv, float lo, float hi,
                                    double out[3])
{
    float a0[16] = { 0 }, a1[16] = { 0 }, a2[16] = { 0 }, rr[16];
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int l = 0; l < 16; l++) QPASS_LANE(rintf(x[j + l] * inv), l, j + l);
    for (int l = 0; j < n; j++, l++) QPASS_LANE(rintf(x[j] * inv), l, j);
    (void)rr;
    out[0] = lanes16f(a0);
    out[1] = lanes16f(a1);
    out[2] = lanes16f(a2);
}
#undef QPASS_LANE

void dsq_qtrials_scalar(const float *x, const float *c, int64_t n, int m, const float *inv, const float *lo,
                        const float *hi, double (*out)[3])
{
    for (int i = 0; i < m; i++) dsq_qtrial_scalar(x, c, n, inv[i], lo[i], hi[i], out[i]);
}

static int32_t ref_sum_i8(const int8_t *q, int64_t n)
{
    int32_t s = 0;
    for (int64_t i = 0; i < n; i++) s += q[i];
    return s;
}

static void ref_f32_to_bf16(const float *x, int64_t n, uint16_t *out)
{
    for (int64_t i = 0; i < n; i++) out[i] = dsq_f32_to_bf16(x[i]);
}

/* ---- int gemms ----------------------------------------------------------- */

static void ref_gemm_w8(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1,
                        float *y)
{
    const int64_t rows = v->shape.rows, cols = v->shape.cols;
    const int is_static = v->scheme->act == DSQ_ACT_INT8_STATIC;
    for (int64_t n = n0; n < n1; n++) {
        const int8_t *wr = (const int8_t *)(v->w + (size_t)n * v->layout.row_bytes);
        for (int64_t t = 0; t < a->T; t++) {
            const int8_t *xr = a->q + t * a->kpad;
            uint32_t acc = 0; /* wraps like the SIMD lanes; the true value fits */
            for (int64_t k = 0; k < cols; k++) acc += (uint32_t)((int32_t)xr[k] * (int32_t)wr[k]);
            float out;
            if (is_static) {
                acc -= (uint32_t)v->act_offset * (uint32_t)v->rowsum[n];
                out = (float)(int32_t)acc * (v->act_scale * v->scales[n]);
            } else {
                out = ((float)(int32_t)acc * v->scales[n]) * a->scale[t];
            }
            y[t * rows + n] = out;
        }
    }
}

static void ref_gemm_w4(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1,
                        float *y)
{
    const int64_t rows = v->shape.rows, cols = v->shape.cols;
    const int64_t ng = v->layout.ngroups, gs = v->layout.gsize;
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *wr = v->w + (size_t)n * v->layout.row_bytes;
        const float *sc = v->scales + n * ng;
        for (int64_t t = 0; t < a->T; t++) {
            const int8_t *xr = a->q + t * a->kpad;
            float sum = 0.0f;
            for (int64_t g = 0; g < ng; g++) {
                int64_t k0 = g * gs, k1 = k0 + gs < cols ? k0 + gs : cols;
                int32_t acc = 0;
                for (int64_t k = k0; k < k1; k++) acc += (int32_t)xr[k] * (dsq_i4_get(wr, k) - 8);
                sum = fmaf((float)acc, sc[g], sum);
            }
            y[t * rows + n] = sum * a->scale[t];
        }
    }
}

/* ---- float schemes -------------------------------------------------------- */

void dsq_split_bf16_scalar(const float *x, int64_t n, uint16_t *hi, uint16_t *lo)
{
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = dsq_f32_to_bf16(x[i]);
        float hf = dsq_bf16_to_f32(h);
        hi[i] = h;
        /* x - hf is exact in f32 (hf is x rounded to 8 significant bits,
         * so the difference lies on x's own grid and has at most 16
         * significant bits); a non-finite hi (NaN, Inf, or a finite x past
         * the bf16 range) keeps its value alone */
        lo[i] = isfinite(hf) ? dsq_f32_to_bf16(x[i] - hf) : 0;
    }
}

/* Reference dot: double accumulation, so it is (nearly) the exact dot of the
 * dequantized row with x; fast kernels are tested against it with the float
 * dot error bound. */
static void ref_gemv_f(const dsq_qview *v, const float *x, int64_t T, int64_t n0, int64_t n1,
                       float *y)
{
    const int64_t rows = v->shape.rows, cols = v->shape.cols;
    for (int64_t n = n0; n < n1; n++)
        for (int64_t t = 0; t < T; t++) {
            const float *xr = x + t * cols;
            double acc = 0.0;
            for (int64_t k = 0; k < cols; k++) acc += (double)ref_deq(v, n, k) * xr[k];
            y[t * rows + n] = (float)acc;
        }
}

/* gemv_awq's contract on the reference: x in the order of dsq_awq_perm16
 * (kernels.h), the reference's deq of each weight, double accumulation. */
static void ref_gemv_awq(const dsq_qview *v, const float *xp, int64_t T, int64_t kpad, int64_t n0,
                         int64_t n1, float *y)
{
    const int64_t rows = v->shape.rows, cols = v->shape.cols;
    for (int64_t n = n0; n < n1; n++)
        for (int64_t t = 0; t < T; t++) {
            double acc = 0.0;
            for (int64_t p = 0; p < kpad; p++) {
                int64_t k = (p & ~(int64_t)127) + dsq_awq_perm16((int)(p & 127));
                if (k < cols) acc += (double)ref_deq(v, n, k) * xp[t * kpad + p];
            }
            y[t * rows + n] = (float)acc;
        }
}

/* ---- awq-w4a16 on int16 activations (kernels.h, gemv_awq16) -------------- */

void dsq_awq16_prep_scalar(const float *x, int64_t cols, int64_t t, const dsq_awq16_act *a)
{
    int16_t *q = a->q + t * a->kpad;
    float *xs = a->xs + t * a->nb, *sf = a->sf + t * a->nb * 16;
    for (int64_t b = 0; b < a->nb; b++) {
        const int64_t c0 = 128 * b, n = cols - c0 < 128 ? cols - c0 : 128;   /* >= 1: nb from cols */
        int16_t *qb = q + c0;
        dsq_actq16_block(x + c0, n, qb, &xs[b]);
        for (int l = 0; l < 16; l++) {
            int32_t acc = 0;
            for (int j = 0; j < 8; j++) acc += qb[DSQ_AWQ16_LANE_COL(l, j)];
            sf[16 * b + l] = (float)acc;
        }
    }
}

/* 16 lanes summed as a tree: l + l + 8, then + 4, + 2, + 1 (the vector
 * levels' halving adds). */
static float awq16_lanes(const float v[16])
{
    float a[8];
    for (int l = 0; l < 8; l++) a[l] = v[l] + v[l + 8];
    for (int l = 0; l < 4; l++) a[l] = a[l] + a[l + 4];
    for (int l = 0; l < 2; l++) a[l] = a[l] + a[l + 2];
    return a[0] + a[1];
}

void dsq_gemv_awq16_scalar(const dsq_qview *v, const dsq_awq16_act *a, int64_t n0, int64_t n1,
                           float *y)
{
    const int64_t rows = v->shape.rows, ng = v->layout.ngroups, nb = a->nb;
    const int64_t gpb = ng == 1 ? nb : v->layout.gsize / 128;
    for (int64_t t = 0; t < a->T; t++) {
        const int16_t *q = a->q + t * a->kpad;
        const float *xs = a->xs + t * nb;
        for (int64_t n = n0; n < n1; n++) {
            const uint8_t *row = v->w + (size_t)n * v->layout.row_bytes;
            float facc[16] = { 0 };
            for (int64_t g = 0; g < ng; g++) {
                const int z = v->zeros[n * ng + g];
                const int64_t b0 = g * gpb, b1 = g == ng - 1 ? nb : b0 + gpb;
                float gacc[16] = { 0 };
                for (int64_t b = b0; b < b1; b++)
                    for (int l = 0; l < 16; l++) {
                        int32_t d = 0;
                        for (int j = 0; j < 8; j++) {
                            const int64_t c = 128 * b + DSQ_AWQ16_LANE_COL(l, j);
                            const uint8_t byte = row[64 * b + (c & 63)];
                            const int nib = (c & 127) < 64 ? byte & 15 : byte >> 4;
                            d += (nib - z) * q[c];
                        }
                        gacc[l] = fmaf((float)d, xs[b], gacc[l]);
                    }
                for (int l = 0; l < 16; l++) facc[l] = fmaf(gacc[l], v->scales[n * ng + g], facc[l]);
            }
            y[t * rows + n] = awq16_lanes(facc);
        }
    }
}

static void ref_dequant_tile(const dsq_qview *v, int64_t n0, int64_t n1, int64_t k0, int64_t k1,
                             float *out, int64_t ldo)
{
    for (int64_t n = n0; n < n1; n++)
        for (int64_t k = k0; k < k1; k++) out[(n - n0) * ldo + (k - k0)] = ref_deq(v, n, k);
}

/* gemv_t's contract: per column, the rows in order, double accumulation
 * of the reference's deq, added to y. */
static void ref_gemv_t(const dsq_qview *v, int64_t n0, int64_t n1, const float *a, float *y)
{
    for (int64_t c = 0; c < v->shape.cols; c++) {
        double acc = y[c];
        for (int64_t n = n0; n < n1; n++) acc += (double)a[n - n0] * ref_deq(v, n, c);
        y[c] = (float)acc;
    }
}

const dsq_kernels dsq_kernels_ref_impl = {
    .name = "ref",
    .absmax_bits = ref_absmax_bits,
    .minmax = ref_minmax,
    .quant_i8 = ref_quant_i8,
    .qstats = dsq_qstats_scalar,
    .qtrial = dsq_qtrial_scalar,
    .qtrials = dsq_qtrials_scalar,
    .sum_i8 = ref_sum_i8,
    .f32_to_bf16 = ref_f32_to_bf16,
    .split_bf16 = dsq_split_bf16_scalar,
    .gemm_bf16 = NULL,
    .gemm_w8 = ref_gemm_w8,
    .gemm_w4 = ref_gemm_w4,
    .gemv_f = ref_gemv_f,
    .gemv_i = ref_gemv_f,   /* ref_deq covers every scheme */
    .gemv_t = ref_gemv_t,
    .gemv_awq = ref_gemv_awq,
    .awq16_prep = dsq_awq16_prep_scalar,
    .gemv_awq16 = dsq_gemv_awq16_scalar,
    .dequant_tile = ref_dequant_tile,
};

/* ---- dispatch ------------------------------------------------------------ */

static int level_supported(const dsq_kernels *k)
{
#if defined(__x86_64__) || defined(__i386__)
    if (k == &dsq_kernels_avx2_impl)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (k == &dsq_kernels_avx512_impl)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
               __builtin_cpu_supports("fma");
    if (k == &dsq_kernels_avx512bf16_impl)
        return level_supported(&dsq_kernels_avx512_impl) && __builtin_cpu_supports("avx512bf16");
#endif
#if defined(__aarch64__)
    if (k == &dsq_kernels_neon_impl) {
#if defined(__linux__)
        return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;   /* SDOT */
#elif defined(__APPLE__)
        return 1;   /* every Apple arm64 CPU has dotprod */
#else
        return 0;
#endif
    }
#endif
    return k == &dsq_kernels_ref_impl;
}

static const dsq_kernels *const g_levels[] = {
    &dsq_kernels_ref_impl,
#if defined(__x86_64__) || defined(__i386__)
    &dsq_kernels_avx2_impl,
    &dsq_kernels_avx512_impl,
    &dsq_kernels_avx512bf16_impl,
#endif
#if defined(__aarch64__)
    &dsq_kernels_neon_impl,
#endif
};
#define N_LEVELS ((int)(sizeof g_levels / sizeof g_levels[0]))

int dsq_kernels_list(const dsq_kernels **out, int max)
{
    int n = 0;
    for (int i = 0; i < N_LEVELS && n < max; i++)
        if (level_supported(g_levels[i])) out[n++] = g_levels[i];
    return n;
}

const dsq_kernels *dsq_kernels_ref(void) { return &dsq_kernels_ref_impl; }

static const dsq_kernels *pick(void)
{
    const char *env = getenv("DSQ_SIMD");
    const dsq_kernels *best = &dsq_kernels_ref_impl;
    for (int i = 0; i < N_LEVELS; i++) {
        if (!level_supported(g_levels[i])) continue;
        if (env && *env) {
            if (!strcmp(env, g_levels[i]->name)) return g_levels[i];
        } else {
            best = g_levels[i];  /* levels are listed slowest first */
        }
    }
    return best;
}

const dsq_kernels *dsq_kernels_get(void)
{
    static const dsq_kernels *_Atomic cached;
    const dsq_kernels *k = cached;
    if (!k) {
        k = pick();   /* idempotent: a race only computes it twice */
        cached = k;
    }
    return k;
}
