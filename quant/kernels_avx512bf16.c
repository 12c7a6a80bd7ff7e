/* kernels_avx512bf16.c - bf16-weight prefill gemm on the CPU's bf16 dot
 * product (vdpbf16ps, AVX512_BF16); the gemm_bf16 of the "avx512bf16"
 * level (kernels_avx512.c holds the rest of that level).
 *
 * Numerics (scheme.h, "bf16 prefill"): vdpbf16ps multiplies bf16 pairs
 * exactly and adds in f32 (round to nearest even, subnormals flushed).
 * Rounding the activations to one bf16 would cost 2^-9 relative per
 * element, far from the f32 engine's parity with PyTorch, so each f32
 * activation comes split in three bf16 terms (two with DSQ_BF16_TERMS=2, one with =1;
 * scheme_float.c, kernels.h split_bf16) and every weight pair is
 * multiplied by each: 3x the dot products of a one-term kernel, each 32
 * multiply-adds (an f32 FMA does 16), and no widening of the weights.
 *
 * Blocking: the driver gives a block of rows (scheme_float.c). Columns are
 * walked in BK chunks; within a chunk, tokens in blocks of TT = 6 and rows
 * in blocks of R = 4 make a 4 x 6 tile of 16-lane accumulators (24 zmm,
 * plus 4 weight and up to 3 activation registers): per 32 columns, 4
 * weight loads and 12 (18) activation loads feed 48 (72) dot products. The chunk's rows
 * (64 x 4 KB at BK = 2048) stay in L2 while every token block passes over
 * them, so each weight byte comes from memory once per call. Each tile's
 * lanes are summed at the end of a chunk and added to y (y = partial of the
 * first chunk, then y += next): the order depends on the shape only, never
 * on the thread count.
 */
#if defined(__x86_64__) || defined(__i386__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")
#pragma GCC optimize("O3")
#endif

#include "kernels.h"

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

#define BK 2048   /* columns per chunk (multiple of 32) */
#define TT 6      /* tokens per tile */

/* One R x NT tile over columns [k0, k1) (k1 - k0 a multiple of 32; the
 * weight load of the last 32 is masked to the row's real columns, so the
 * row padding, which is not validated, is never read). first: store, else
 * add to y. */
/* One 32-column step of a tile: weights wv[R] against NT tokens' terms.
 * With few tokens (decode) each term has its own accumulator (S = TERMS),
 * so 4 rows x 1 token still make 12 independent dot chains; with more
 * tokens the 4 x NT tile has enough chains and the registers are full. */
AI void step(__m512 acc[4][TT][3], const __m512bh wv[4], const int R, const uint16_t *xh,
             const uint16_t *xl, const uint16_t *x2, int64_t kp, int64_t k, const int NT,
             const int TERMS, const int S)
{
#pragma GCC unroll 6
    for (int t = 0; t < NT; t++) {
        __m512bh h = (__m512bh)_mm512_loadu_si512(xh + t * kp + k);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) acc[r][t][0] = _mm512_dpbf16_ps(acc[r][t][0], wv[r], h);
        if (TERMS >= 2) {
            __m512bh l = (__m512bh)_mm512_loadu_si512(xl + t * kp + k);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                acc[r][t][S > 1 ? 1 : 0] = _mm512_dpbf16_ps(acc[r][t][S > 1 ? 1 : 0], wv[r], l);
        }
        if (TERMS == 3) {
            __m512bh l2 = (__m512bh)_mm512_loadu_si512(x2 + t * kp + k);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                acc[r][t][S > 2 ? 2 : 0] = _mm512_dpbf16_ps(acc[r][t][S > 2 ? 2 : 0], wv[r], l2);
        }
    }
}

AI void tile(const dsq_qview *v, const dsq_bfact *a, int64_t n, const int R, int64_t t0,
             const int NT, const int TERMS, int64_t k0, int64_t k1, int first, int npf, float *y)
{
    const int S = NT <= 2 ? TERMS : 1;
    const int64_t cols = v->shape.cols, rows = v->shape.rows, kp = a->kpad;
    const size_t ws = v->layout.row_bytes;
    const uint16_t *w = (const uint16_t *)(const void *)(v->w + (size_t)n * ws);
    const uint16_t *xh = a->xh + t0 * kp, *xl = TERMS >= 2 ? a->xl + t0 * kp : NULL;
    const uint16_t *x2 = TERMS == 3 ? a->xl2 + t0 * kp : NULL;
    __m512 acc[4][TT][3];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 6
        for (int t = 0; t < NT; t++)
#pragma GCC unroll 3
            for (int i = 0; i < S; i++) acc[r][t][i] = _mm512_setzero_ps();
    const int64_t kfull = k1 <= cols ? k1 : k1 - 32;   /* last chunk may need a mask */
    int64_t k = k0;
    for (; k < kfull; k += 32) {
        __m512bh wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            wv[r] = (__m512bh)_mm512_loadu_si512(w + (size_t)r * (ws / 2) + k);
        /* decode streams each row once: fetch the next tile's rows (same
         * columns) while this one computes, so a new tile does not start
         * with cold streams that the hardware prefetcher has to learn */
        for (int r = 0; r < npf; r++) _mm_prefetch((const char *)(w + (size_t)(R + r) * (ws / 2) + k), _MM_HINT_T0);
        step(acc, wv, R, xh, xl, x2, kp, k, NT, TERMS, S);
    }
    if (k < k1) {
        const __mmask32 m = (__mmask32)((1ull << (cols - k)) - 1);
        __m512bh wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            wv[r] = (__m512bh)_mm512_maskz_loadu_epi16(m, w + (size_t)r * (ws / 2) + k);
        step(acc, wv, R, xh, xl, x2, kp, k, NT, TERMS, S);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 6
        for (int t = 0; t < NT; t++) {
            __m512 sum = acc[r][t][0];
#pragma GCC unroll 3
            for (int i = 1; i < S; i++) sum = _mm512_add_ps(sum, acc[r][t][i]);
            float s = _mm512_reduce_add_ps(sum);
            float *o = y + (t0 + t) * rows + n + r;
            *o = first ? s : *o + s;
        }
}

/* All rows of [n0, n1) against tokens [t0, t0 + NT) for one chunk. */
AI void rows_tile(const dsq_qview *v, const dsq_bfact *a, int64_t n0, int64_t n1, int64_t t0,
                  const int NT, const int TERMS, int64_t k0, int64_t k1, int first, float *y)
{
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) {
        const int npf = NT > 2 ? 0 : n1 - (n + 4) < 4 ? (int)(n1 - (n + 4)) : 4;
        tile(v, a, n, 4, t0, NT, TERMS, k0, k1, first, npf, y);
    }
    for (; n < n1; n++) tile(v, a, n, 1, t0, NT, TERMS, k0, k1, first, 0, y);
}

AI void gemm_terms(const dsq_qview *v, const dsq_bfact *a, int64_t n0, int64_t n1, const int TERMS,
                   float *y)
{
    const int64_t cols = v->shape.cols, kend = (cols + 31) & ~(int64_t)31;
    for (int64_t k0 = 0; k0 < kend; k0 += BK) {
        const int64_t k1 = k0 + BK < kend ? k0 + BK : kend;
        const int first = k0 == 0;
        int64_t t = 0;
        for (; t + TT <= a->T; t += TT) rows_tile(v, a, n0, n1, t, TT, TERMS, k0, k1, first, y);
        switch (a->T - t) {
        case 5: rows_tile(v, a, n0, n1, t, 5, TERMS, k0, k1, first, y); break;
        case 4: rows_tile(v, a, n0, n1, t, 4, TERMS, k0, k1, first, y); break;
        case 3: rows_tile(v, a, n0, n1, t, 3, TERMS, k0, k1, first, y); break;
        case 2: rows_tile(v, a, n0, n1, t, 2, TERMS, k0, k1, first, y); break;
        case 1: rows_tile(v, a, n0, n1, t, 1, TERMS, k0, k1, first, y); break;
        default: break;
        }
    }
}

void dsq_avx512bf16_gemm(const dsq_qview *v, const dsq_bfact *a, int64_t n0, int64_t n1, float *y)
{
    if (!a->xl) gemm_terms(v, a, n0, n1, 1, y);
    else if (a->xl2) gemm_terms(v, a, n0, n1, 3, y);
    else gemm_terms(v, a, n0, n1, 2, y);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* x86 */
