/* kernels_avx2_awq.c - AVX2 awq-w4a16 decode: one token against int4 codes
 * with zero points (the generic float path in kernels_avx2_float.c takes
 * the rest). */
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

/* ---- awq decode ----------------------------------------------------------- */

/* awq with one token: the codes minus the zero point, (q - z) in -15..15, are
 * made as signed bytes (and/shift, vpsubb), vpshufb moves each byte into the
 * top byte of a dword (the other three zero), and vcvtdq2ps turns it into
 * (q - z) * 2^24 exactly: 3 vector ops per 8 weights (pshufb, cvt, fma)
 * instead of widening in two steps. The 2^-24 goes into the group scale
 * (exact: a power of two). A 128-bit lane of a shuffled vector holds the
 * bytes 4i..4i+3 of its source lane, so activations are permuted once per
 * AWQ_CK-column chunk to match (xp). Activations of 2^64 or more in
 * magnitude (or Inf/NaN) take the generic path, so the 2^24 scaling cannot
 * overflow where the reference does not. */
#define AWQ_CK 8192

/* xp[32j + 8i + e] = x[32j + 4i + e] (e < 4), x[32j + 16 + 4i + e - 4] (e >= 4) */
static void awq_perm_x(const float *x, int64_t n, float *xp)
{
    for (int64_t j = 0; j < n; j += 32)
        for (int i = 0; i < 4; i++) {
            __m128 lo = _mm_loadu_ps(x + j + 4 * i), hi = _mm_loadu_ps(x + j + 16 + 4 * i);
            _mm256_store_ps(xp + j + 8 * i, _mm256_set_m128(hi, lo));
        }
}

#define AWQ_Z -128   /* shuffle index with bit 7 set: vpshufb writes 0 */
#define AWQ_SH(i)                                                                                  \
    _mm256_setr_epi8(AWQ_Z, AWQ_Z, AWQ_Z, 4 * i, AWQ_Z, AWQ_Z, AWQ_Z, 4 * i + 1, AWQ_Z, AWQ_Z,       \
                     AWQ_Z, 4 * i + 2, AWQ_Z, AWQ_Z, AWQ_Z, 4 * i + 3, AWQ_Z, AWQ_Z, AWQ_Z, 4 * i,  \
                     AWQ_Z, AWQ_Z, AWQ_Z, 4 * i + 1, AWQ_Z, AWQ_Z, AWQ_Z, 4 * i + 2, AWQ_Z, AWQ_Z,   \
                     AWQ_Z, 4 * i + 3)

/* 32 weights of R rows (q - z as bytes in d[r]) against xp[0..32): each
 * activation vector is loaded once for the R rows; two accumulators per row
 * (with two rows, four FMA chains: enough, the shuffles and conversions
 * bound the loop). */
AI void awq_fma32(const __m256i *d, const int R, const float *xp, const __m256i sh[4], __m256 a[2][2])
{
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const __m256 xv = _mm256_load_ps(xp + 8 * i);
#pragma GCC unroll 2
        for (int r = 0; r < R; r++)
            a[r][i & 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_shuffle_epi8(d[r], sh[i])), xv, a[r][i & 1]);
    }
}

/* Rows n, n+1 (R = 2) or n (R = 1) over 64-column units [u0, u1) of the
 * chunk starting at column c0 (xp holds its permuted activations); adds
 * the row sums to rs[]. */
AI void awq_rows(const dsq_qview *v, int64_t n, const int R, int64_t c0, int64_t u0, int64_t u1,
                 const float *xp, float *rs)
{
    const int64_t ng = v->layout.ngroups, gs = v->layout.gsize;
    const size_t ws = v->layout.row_bytes;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i sh[4] = { AWQ_SH(0), AWQ_SH(1), AWQ_SH(2), AWQ_SH(3) };
    __m256 tot[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };
    const int64_t glast = ng - 1;   /* group size 0: one group of cols columns */
    int64_t u = u0;
    for (int64_t g = (64 * u0) / gs < glast ? (64 * u0) / gs : glast; u < u1; g++) {
        /* groups before the last are multiples of 64 columns; the last one
         * (ragged, or the whole row) takes every remaining unit */
        int64_t ue = g == glast ? u1 : ((g + 1) * gs) >> 6;
        if (ue > u1) ue = u1;
        __m256 a[2][2];
        __m256i zv[2];
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            zv[r] = _mm256_set1_epi8((char)v->zeros[(n + r) * ng + g]);
            a[r][0] = a[r][1] = _mm256_setzero_ps();
        }
        /* whole 128-column blocks: one load gives the low and the high half */
        for (; (u & 1) == 0 && u + 2 <= ue; u += 2) {
            const int64_t k = 64 * u;
            const float *xu = xp + (k - c0);
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                __m256i lo[2], hi[2];
#pragma GCC unroll 2
                for (int r = 0; r < R; r++) {
                    const uint8_t *p = v->w + (size_t)(n + r) * ws + (size_t)(k >> 7) * 64 + 32 * h;
                    __m256i b = _mm256_loadu_si256((const __m256i *)p);
                    lo[r] = _mm256_sub_epi8(_mm256_and_si256(b, m4), zv[r]);
                    hi[r] = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4), zv[r]);
                }
                awq_fma32(lo, R, xu + 32 * h, sh, a);
                awq_fma32(hi, R, xu + 64 + 32 * h, sh, a);
            }
        }
        for (; u < ue; u++) {   /* a lone 64-column half (groups of 64 * odd) */
            const int64_t k = 64 * u;
            const float *xu = xp + (k - c0);
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                __m256i d[2];
#pragma GCC unroll 2
                for (int r = 0; r < R; r++) {
                    const uint8_t *p = v->w + (size_t)(n + r) * ws + (size_t)(k >> 7) * 64 + 32 * h;
                    __m256i b = _mm256_loadu_si256((const __m256i *)p);
                    d[r] = _mm256_sub_epi8(_mm256_and_si256((k & 64) ? _mm256_srli_epi16(b, 4) : b, m4), zv[r]);
                }
                awq_fma32(d, R, xu + 32 * h, sh, a);
            }
        }
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            const __m256 sv = _mm256_set1_ps(v->scales[(n + r) * ng + g] * 0x1p-24f);
            tot[r] = _mm256_fmadd_ps(_mm256_add_ps(a[r][0], a[r][1]), sv, tot[r]);
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) rs[r] += hsum_ps(tot[r]);
}

/* awq_perm_x of a chunk of n columns (a multiple of 64) of which the first
 * n_valid exist: the rest read as 0. The weights there are zero nibbles
 * (the layout pads rows to 128 columns), so a ragged tail is one more unit
 * instead of a scalar loop. */
static void awq_perm_x_pad(const float *x, int64_t n_valid, int64_t n, float *xp)
{
    const int64_t full = n_valid & ~(int64_t)31;
    awq_perm_x(x, full, xp);
    if (full < n) {   /* at most 64 columns left */
        float tmp[64] = { 0 };
        memcpy(tmp, x + full, (size_t)(n_valid - full) * sizeof *tmp);
        awq_perm_x(tmp, n - full, xp + full);
    }
}

void dsq_avx2_awq_decode(const dsq_qview *v, const float *x, int64_t n0, int64_t n1, float *y)
{
    const int64_t cols = v->shape.cols, nu = (cols + 63) / 64;   /* 64-column units */
    float xp[AWQ_CK] __attribute__((aligned(32)));
    float rs[64];
    for (int64_t nb = n0; nb < n1; nb += 64) {
        const int64_t nr = n1 - nb < 64 ? n1 - nb : 64;
        for (int64_t r = 0; r < nr; r++) rs[r] = 0.0f;
        for (int64_t c0 = 0; c0 < nu * 64; c0 += AWQ_CK) {
            const int64_t c1 = c0 + AWQ_CK < nu * 64 ? c0 + AWQ_CK : nu * 64;
            awq_perm_x_pad(x + c0, (c1 < cols ? c1 : cols) - c0, c1 - c0, xp);
            int64_t r = 0;
            for (; r + 2 <= nr; r += 2) awq_rows(v, nb + r, 2, c0, c0 / 64, c1 / 64, xp, rs + r);
            if (r < nr) awq_rows(v, nb + r, 1, c0, c0 / 64, c1 / 64, xp, rs + r);
        }
        for (int64_t r = 0; r < nr; r++) y[nb + r] = rs[r];
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* x86 */
