/* kernels_avx2_w4.c - AVX2 int4 x int8 gemm (w4a8) on unsigned codes
 * (kernels_avx2.c says why it is exact); blocking in kernels_avx2_int.h. */
#if defined(__x86_64__) || defined(__i386__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC target("avx2,fma")
#pragma GCC optimize("O3", "fp-contract=off")
#endif

#include "kernels_avx2_int.h"
#include "dsq_mem.h"

#include <math.h>
#include <string.h>

/* Eight int32 vectors -> one vector of their eight horizontal sums, in
 * order (integer adds: exact). Unpack/add rounds instead of vphaddd, which
 * is several uops (0.5 per cycle) on Zen. */
AI __m256i reduce8_epi32(const __m256i A[8])
{
    __m256i t[4], u[2];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        t[i] = _mm256_add_epi32(_mm256_unpacklo_epi32(A[2 * i], A[2 * i + 1]),
                                _mm256_unpackhi_epi32(A[2 * i], A[2 * i + 1]));
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++)
        u[i] = _mm256_add_epi32(_mm256_unpacklo_epi64(t[2 * i], t[2 * i + 1]),
                                _mm256_unpackhi_epi64(t[2 * i], t[2 * i + 1]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(u[0], u[1], 0x20),
                            _mm256_permute2x128_si256(u[0], u[1], 0x31));
}
/* ---- w4 gemm ------------------------------------------------------------- */

/* Weights are unsigned codes u = q + 8 (0..15), so vpmaddubsw(u, x) is exact
 * (|pair| <= 2*15*127 = 3810) and eight of its results still fit s16: the
 * tile accumulates up to 256 columns in s16 (vpaddw), then widens with
 * vpmaddwd(.., 1) and reduces to one int32 per (row, token). At each group
 * end: acc_g = sum(u x) - 8 * (group sum of x), then
 * fsum = fma((float)acc_g, scale, fsum) lane-wise (vector FMA rounds like
 * fmaf): the reference's float steps per output.
 *
 * An R x TT tile keeps its R*TT <= 8 (row, token) sums in the lanes
 * r*TT + t of one vector. Shapes: 2x4 (prefill), 8x1 (decode), edges. */
AI __m256i w4_gsum_lanes(const int32_t *gs, const int R, const int TT)
{
    if (R == 2 && TT == 4) return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)gs));
    if (TT == 1) return _mm256_set1_epi32(gs[0]);
    int32_t b[8] = { 0 };
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) b[r * TT + t] = gs[t];
    return _mm256_loadu_si256((const __m256i *)b);
}

AI __m256 w4_scale_lanes(const float *s, int64_t ng, const int R, const int TT)
{
    if (R == 2 && TT == 4) return _mm256_set_m128(_mm_set1_ps(s[ng]), _mm_set1_ps(s[0]));
    float b[8] = { 0 };
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) b[r * TT + t] = s[r * ng];
    return _mm256_loadu_ps(b);
}

/* One 64-column step (k is a multiple of 64; HI: the high nibbles of the
 * 128-column block) of an R x TT tile into s16 accumulators acc[r*TT + t]. */
AI void w4_step(const uint8_t *wb, size_t ws, const int8_t *xk, int64_t kpad, const int HI,
                const int R, const int TT, __m256i acc[8])
{
    const __m256i m4 = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m256i c[8];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m256i b = _mm256_loadu_si256((const __m256i *)(wb + (size_t)r * ws + 32 * h));
            c[r] = _mm256_and_si256(HI ? _mm256_srli_epi16(b, 4) : b, m4);
        }
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++) {
            __m256i xv = _mm256_loadu_si256((const __m256i *)(xk + t * kpad + 32 * h));
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
                acc[r * TT + t] = _mm256_add_epi16(acc[r * TT + t], _mm256_maddubs_epi16(c[r], xv));
        }
    }
}

/* The 2x4 step in inline asm: GCC spills the accumulators of the C version
 * (codes, activations and eight accumulators need 13 of the 16 registers).
 * Same operations as w4_step. */
#define W4A_HALF(OFF)                                                                    \
    "vpmaddubsw " OFF "(%[x0]), %[c0], %[tp]\n\t vpaddw %[tp], %[a0], %[a0]\n\t"          \
    "vpmaddubsw " OFF "(%[x0]), %[c1], %[tp]\n\t vpaddw %[tp], %[a4], %[a4]\n\t"          \
    "vpmaddubsw " OFF "(%[x1]), %[c0], %[tp]\n\t vpaddw %[tp], %[a1], %[a1]\n\t"          \
    "vpmaddubsw " OFF "(%[x1]), %[c1], %[tp]\n\t vpaddw %[tp], %[a5], %[a5]\n\t"          \
    "vpmaddubsw " OFF "(%[x2]), %[c0], %[tp]\n\t vpaddw %[tp], %[a2], %[a2]\n\t"          \
    "vpmaddubsw " OFF "(%[x2]), %[c1], %[tp]\n\t vpaddw %[tp], %[a6], %[a6]\n\t"          \
    "vpmaddubsw " OFF "(%[x3]), %[c0], %[tp]\n\t vpaddw %[tp], %[a3], %[a3]\n\t"          \
    "vpmaddubsw " OFF "(%[x3]), %[c1], %[tp]\n\t vpaddw %[tp], %[a7], %[a7]\n\t"
#define W4A_LO(OFF)                                                                      \
    "vpand " OFF "(%[w0]), %[m4], %[c0]\n\t vpand " OFF "(%[w1]), %[m4], %[c1]\n\t"
#define W4A_HI(OFF)                                                                      \
    "vmovdqu " OFF "(%[w0]), %[c0]\n\t vmovdqu " OFF "(%[w1]), %[c1]\n\t"                  \
    "vpsrlw $4, %[c0], %[c0]\n\t vpsrlw $4, %[c1], %[c1]\n\t"                              \
    "vpand %[m4], %[c0], %[c0]\n\t vpand %[m4], %[c1], %[c1]\n\t"
#define W4A_OPS                                                                          \
    : [a0] "+x"(acc[0]), [a1] "+x"(acc[1]), [a2] "+x"(acc[2]), [a3] "+x"(acc[3]),        \
      [a4] "+x"(acc[4]), [a5] "+x"(acc[5]), [a6] "+x"(acc[6]), [a7] "+x"(acc[7]),        \
      [c0] "=&x"(c0), [c1] "=&x"(c1), [tp] "=&x"(tp)                                     \
    : [w0] "r"(wb), [w1] "r"(wb + ws), [x0] "r"(xk), [x1] "r"(xk + kpad),                \
      [x2] "r"(xk + 2 * kpad), [x3] "r"(xk + 3 * kpad), [m4] "x"(m4)                     \
    : "memory"

AI void w4_step24(const uint8_t *wb, size_t ws, const int8_t *xk, int64_t kpad, const int HI,
                  __m256i acc[8], __m256i m4)
{
    __m256i c0, c1, tp;
    if (HI)
        __asm__(W4A_HI("") W4A_HALF("") W4A_HI("32") W4A_HALF("32") W4A_OPS);
    else
        __asm__(W4A_LO("") W4A_HALF("") W4A_LO("32") W4A_HALF("32") W4A_OPS);
}
#undef W4A_HALF
#undef W4A_LO
#undef W4A_HI
#undef W4A_OPS

/* Exact int32 sums over columns [k, kstop) (at most 256: eight vpmaddubsw
 * results per s16 lane) of an R x TT tile, in lanes r*TT + t. */
AI __m256i w4_window(const uint8_t *wr, size_t ws, const int8_t *xr, int64_t kpad, int64_t k,
                     int64_t kstop, const int R, const int TT)
{
    __m256i acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_si256();
    if (R == 2 && TT == 4) {
        const __m256i m4 = _mm256_set1_epi8(0x0f);
        for (; k < kstop; k += 64) {
            const uint8_t *wb = wr + (k >> 7) * 64;
            if (k & 64) w4_step24(wb, ws, xr + k, kpad, 1, acc, m4);
            else w4_step24(wb, ws, xr + k, kpad, 0, acc, m4);
        }
    }
#pragma GCC unroll 1
    for (; k < kstop; k += 64) {
        const uint8_t *wb = wr + (k >> 7) * 64;
        if (k & 64) w4_step(wb, ws, xr + k, kpad, 1, R, TT, acc);
        else w4_step(wb, ws, xr + k, kpad, 0, R, TT, acc);
    }
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i A[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) A[i] = i < R * TT ? _mm256_madd_epi16(acc[i], ones) : _mm256_setzero_si256();
    return reduce8_epi32(A);
}

/* Columns [k0, k1) (multiples of 64) of an R x TT tile: rows n.. (weights
 * wr), tokens t0... Lane state between K blocks in st_i / st_f (8 lanes);
 * the first block starts from zero, the last writes y. */
AI void w4_tile(const dsq_qview *v, const dsq_actbuf *a, const uint8_t *wr, int64_t n, int64_t t0,
                int64_t k0, int64_t k1, const int R, const int TT, int32_t *st_i, float *st_f,
                float *y)
{
    const int64_t ng = v->layout.ngroups, gs = v->layout.gsize, kpad = a->kpad, T = a->T;
    const size_t ws = v->layout.row_bytes;
    const int8_t *xr = a->q + t0 * kpad;
    __m256i iacc = _mm256_setzero_si256();
    __m256 fs = _mm256_setzero_ps();
    if (k0 > 0) {
        iacc = _mm256_load_si256((const __m256i *)st_i);
        fs = _mm256_load_ps(st_f);
    }
    int64_t g = k0 / gs < ng - 1 ? k0 / gs : ng - 1;
    int64_t k = k0;
    while (k < k1) {
        const int64_t gend = g == ng - 1 ? kpad : (g + 1) * gs;
        const int64_t kend = gend < k1 ? gend : k1;
        for (; k < kend; k += 256)
            iacc = _mm256_add_epi32(iacc, w4_window(wr, ws, xr, kpad, k, k + 256 < kend ? k + 256 : kend, R, TT));
        k = kend;
        if (k == gend) {   /* group g complete */
            __m256i gsv = _mm256_slli_epi32(w4_gsum_lanes(a->gsum + g * T + t0, R, TT), 3);
            __m256 sv = w4_scale_lanes(v->scales + n * ng + g, ng, R, TT);
            fs = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(iacc, gsv)), sv, fs);
            iacc = _mm256_setzero_si256();
            g++;
        }
    }
    if (k1 < kpad) {
        _mm256_store_si256((__m256i *)st_i, iacc);
        _mm256_store_ps(st_f, fs);
        return;
    }
    /* y = fsum * s_x[t] */
    float f[8];
    _mm256_storeu_ps(f, fs);
    const int64_t rows = v->shape.rows;
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) y[(t0 + t) * rows + n + r] = f[r * TT + t] * a->scale[t0 + t];
}

/* Columns [k0, k1) of rows [nb, nb + nr) x chunk tokens [t0, t0 + tch); the
 * tiles are visited in the same order for every K block, tile i keeping its
 * state in st_i / st_f [8 * i]. Token tiles outer: a tile's activations
 * (TT x K bytes) stay in L1 while the rows' packed weights (half a byte per
 * column) stream from L2. */
static void w4_rows(const dsq_qview *v, const dsq_actbuf *a, int64_t nb, int64_t nr, int64_t t0,
                    int64_t tch, int64_t k0, int64_t k1, int32_t *st_i, float *st_f, float *y)
{
    const size_t ws = v->layout.row_bytes;
    int64_t i = 0;
#define W4T(R, TT) w4_tile(v, a, v->w + (size_t)(nb + r) * ws, nb + r, t0 + t, k0, k1, R, TT, \
                           st_i + 8 * i, st_f + 8 * i, y), i++
    if (tch == 1) {   /* decode: 8 rows share each activation load */
        const int64_t t = 0;
        int64_t r = 0;
        for (; r + 8 <= nr; r += 8) W4T(8, 1);
        for (; r + 2 <= nr; r += 2) W4T(2, 1);
        for (; r < nr; r++) W4T(1, 1);
        return;
    }
    for (int64_t t = 0; t < tch; t += 4) {
        int64_t r = 0;
        switch (tch - t < 4 ? tch - t : 4) {
        case 4: for (; r + 2 <= nr; r += 2) W4T(2, 4); if (r < nr) W4T(1, 4); break;
        case 3: for (; r + 2 <= nr; r += 2) W4T(2, 3); if (r < nr) W4T(1, 3); break;
        case 2: for (; r + 2 <= nr; r += 2) W4T(2, 2); if (r < nr) W4T(1, 2); break;
        default: for (; r + 2 <= nr; r += 2) W4T(2, 1); if (r < nr) W4T(1, 1); break;
        }
    }
#undef W4T
}

void dsq_avx2_gemm_w4(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1, float *y)
{
    const int64_t T = a->T, kpad = a->kpad;
    const int64_t kc = ib_kc(kpad, 16384);   /* 64 rows x 8 KB: L2 */
    /* one 8-lane state per tile: at most 16 token tiles x 32 row pairs */
    int32_t st_i[8 * (IB_TCH / 4) * (IB_ROWS / 2)] __attribute__((aligned(32)));
    float st_f[8 * (IB_TCH / 4) * (IB_ROWS / 2)] __attribute__((aligned(32)));
    for (int64_t nb = n0; nb < n1; nb += IB_ROWS) {
        const int64_t nr = n1 - nb < IB_ROWS ? n1 - nb : IB_ROWS;
        for (int64_t t0 = 0; t0 < T; t0 += IB_TCH) {
            const int64_t tch = T - t0 < IB_TCH ? T - t0 : IB_TCH;
            for (int64_t k0 = 0; k0 < kpad; k0 += kc)
                w4_rows(v, a, nb, nr, t0, tch, k0, kpad - k0 < kc ? kpad : k0 + kc, st_i, st_f, y);
        }
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* x86 */
