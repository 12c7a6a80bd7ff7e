/* kernels_avx512bf16.c - bf16-weight prefill gemm on the CPU's bf16 dot
 * product (vdpbf16ps, AVX512_BF16); the gemm_bf16 of the "avx512bf16"
 * level (kernels_avx512.c assembles the rest of that level).
 *
 * Numerics (scheme.h, "bf16 prefill"): vdpbf16ps multiplies bf16 pairs
 * exactly and adds in f32 (round to nearest even, subnormals flushed).
 * Rounding the activations to one bf16 would cost 2^-9 relative per
 * element, far from the f32 engine's parity with PyTorch, so each f32
 * activation comes split in three bf16 terms (two with DSQ_BF16_TERMS=2, one with =1;
 * scheme_float.c, kernels.h split_bf16) and every weight pair is
 * multiplied by each: 3x the dot products of a one-term kernel, each 32
 * multiply-adds (an f32 FMA does 16), and no widening of the weights.
 * Except for prefill with three terms: there the driver does not split
 * (xh NULL) and the f32 packed path below widens the weights and uses
 * FMAs, which run at vdpbf16ps's rate here (1.5x fewer instructions).
 *
 * Two paths. T >= BFP_MIN_T (prefill): the packed path at the end of this
 * file (weights repacked per call so that no horizontal sum is needed).
 * Fewer tokens (decode): the dot-layout tile below. Blocking of the latter:
 * the driver gives a block of rows (scheme_float.c). Columns are
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
#ifndef BFP_MIN_T
#define BFP_MIN_T 8   /* from this many tokens on, the packed path (below) */
#endif

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
    const int64_t cols = v->shape.cols, rows = v->shape.rows, kp = a->ld ? a->ld : a->kpad;
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

/* ---- packed path (T >= BFP_MIN_T) -----------------------------------------
 *
 * The dot-layout tile above leaves 16 lanes per (row, token) to be summed
 * horizontally and feeds each multiply from two streams. With more tokens
 * the weights are worth repacking: a block of 64 rows x 256 columns
 * (BFP_H halves of 16 rows x BFP_KC) is rewritten (per call, into a 32 KB
 * buffer that stays in L1) so that one zmm holds one column pair of 16
 * rows, wp[half][pair][16] (u32 = two bf16). vdpbf16ps of that zmm with a
 * broadcast activation pair (one token's two columns) adds to 16 rows of
 * that token at once: the accumulators are y's own layout, no horizontal
 * sum. A 64-row x 6-token tile is 24 accumulators, fed per column pair by
 * 4 weight loads (L1) and 6 (12, 18) broadcasts for 24 (48, 72) dot
 * products: 10 loads per 24, where the 32 x 12 tile of awq's entry point
 * (dsq_avx512bf16_packed_block) needs 14; one-term T = 64 on one core:
 * 330-340 GFLOP/s vs 295-324 (bench_quant 2048 7168 1 20 64, machine
 * shared). The repack (a 16x16 u32 transpose per 32 columns of 16 rows, 64
 * shuffles) is paid once per weight for all T tokens. Chunks of BFP_KC
 * columns add to y in column order, so the sum order depends on the shape
 * only. */

#define BFP_PT_MAX 12   /* most tokens per packed tile */

typedef uint32_t u32a __attribute__((may_alias));

/* In-place transpose of a 16 x 16 block of u32: r[i] lane j <- r[j] lane i. */
AI void tr16(__m512i r[16])
{
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* r[4q + j] now holds, in each 128-bit lane L, rows 4q..4q+3 of column 4L + j */
    for (int q = 0; q < 16; q += 8)
        for (int j = 0; j < 4; j++) {
            t[q + j] = _mm512_shuffle_i32x4(r[q + j], r[q + 4 + j], 0x88);
            t[q + 4 + j] = _mm512_shuffle_i32x4(r[q + j], r[q + 4 + j], 0xdd);
        }
    for (int j = 0; j < 8; j++) {
        r[j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0x88);
        r[8 + j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0xdd);
    }
}

/* Rows [n, n + nr) (nr <= 16 H), columns [k0, k1) (k0, k1 multiples of 32)
 * into wp[h][(k - k0) / 2][16] (h < H, half h = rows n + 16h .., KC / 2
 * pairs per half), zeros for rows >= nr and columns >= cols (the row
 * padding is never read). */
AI void bfp_pack(const dsq_qview *v, int64_t n, int nr, int64_t k0, int64_t k1, u32a *wp,
                 const int H, const int KC)
{
    const int64_t cols = v->shape.cols;
    const size_t ws = v->layout.row_bytes / 2;
    const uint16_t *w = (const uint16_t *)(const void *)(v->w) + (size_t)n * ws;
    for (int h = 0; h < H; h++)
        for (int64_t k = k0; k < k1; k += 32) {
            const __mmask32 m = cols - k >= 32 ? (__mmask32)~0u : (__mmask32)((1u << (cols - k)) - 1);
            __m512i r[16];
            for (int i = 0; i < 16; i++) {
                const int row = 16 * h + i;
                r[i] = row < nr ? _mm512_maskz_loadu_epi16(m, w + (size_t)row * ws + k)
                                : _mm512_setzero_si512();
            }
            tr16(r);
            u32a *o = wp + ((size_t)h * (size_t)(KC / 2) + (size_t)(k - k0) / 2) * 16;
            for (int i = 0; i < 16; i++) _mm512_store_si512((void *)(o + 16 * i), r[i]);
        }
}

/* The next block's weights, fetched into L2 while a tile computes: the
 * pack reads 16 H rows x 2 KC bytes, too short a run per row for the
 * hardware prefetcher, and would otherwise wait on memory at every block. */
typedef struct bfp_pf {
    const char *base;   /* row 0, first column of the next block; NULL: none */
    size_t stride;      /* bytes per row */
    int rows, lines;    /* rows, 64-byte lines per row */
    int r, l;           /* next line to fetch */
} bfp_pf;

AI void bfp_prefetch(bfp_pf *f)
{
    if (f->r >= f->rows) return;
    _mm_prefetch(f->base + (size_t)f->r * f->stride + 64 * (size_t)f->l, _MM_HINT_T1);
    if (++f->l == f->lines) {
        f->l = 0;
        f->r++;
    }
}

/* Row masks of a block of nr rows: m[h] has the rows of half h that exist. */
AI void bfp_masks(int nr, const int H, __mmask16 m[4])
{
    for (int h = 0; h < H; h++) {
        const int left = nr - 16 * h;
        m[h] = left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
    }
}

/* One 16 H-row x NT-token tile over np column pairs of the packed chunk;
 * first: store into y, else add. m: the rows of each half that exist.
 * pf: the next block, one line fetched per pmask + 1 column pairs until it
 * is all asked for. */
/* A tile's H x NT accumulators into y (rows wide, from row n of token
 * t0): stored on the first column chunk, added to what is there after. */
AI void tile_out(__m512 acc[4][BFP_PT_MAX], const int NT, const int H, int64_t t0, int first,
                 float *y, int64_t rows, int64_t n, const __mmask16 m[4])
{
#pragma GCC unroll 12
    for (int t = 0; t < NT; t++) {
        float *o = y + (t0 + t) * rows + n;
#pragma GCC unroll 4
        for (int h = 0; h < H; h++) {
            if (first) _mm512_mask_storeu_ps(o + 16 * h, m[h], acc[h][t]);
            else _mm512_mask_storeu_ps(o + 16 * h, m[h],
                                       _mm512_add_ps(_mm512_maskz_loadu_ps(m[h], o + 16 * h), acc[h][t]));
        }
    }
}

AI void bfp_tile(const u32a *wp, int64_t np, const dsq_bfact *a, int64_t t0, const int NT,
                 const int TERMS, const int H, const int KC, int64_t k0, int first, float *y,
                 int64_t rows, int64_t n, const __mmask16 m[4], bfp_pf *pf, int64_t pmask)
{
    const int64_t ld = a->ld ? a->ld : a->kpad, kq = ld / 2;   /* u32 pairs per token */
    const u32a *xh = (const u32a *)(const void *)(a->xh + t0 * ld + k0);
    const u32a *xl = TERMS >= 2 ? (const u32a *)(const void *)(a->xl + t0 * ld + k0) : NULL;
    const u32a *x2 = TERMS == 3 ? (const u32a *)(const void *)(a->xl2 + t0 * ld + k0) : NULL;
    __m512 acc[4][BFP_PT_MAX];
#pragma GCC unroll 4
    for (int h = 0; h < H; h++)
#pragma GCC unroll 12
        for (int t = 0; t < NT; t++) acc[h][t] = _mm512_setzero_ps();
    for (int64_t p = 0; p < np; p++) {
        __m512bh w[4];
#pragma GCC unroll 4
        for (int h = 0; h < H; h++)
            w[h] = (__m512bh)_mm512_load_si512((const void *)(wp + 16 * ((size_t)h * (KC / 2) + p)));
        if (!(p & pmask)) bfp_prefetch(pf);
#pragma GCC unroll 12
        for (int t = 0; t < NT; t++) {
            __m512bh b = (__m512bh)_mm512_set1_epi32((int)xh[t * kq + p]);
#pragma GCC unroll 4
            for (int h = 0; h < H; h++) acc[h][t] = _mm512_dpbf16_ps(acc[h][t], w[h], b);
            if (TERMS >= 2) {
                b = (__m512bh)_mm512_set1_epi32((int)xl[t * kq + p]);
#pragma GCC unroll 4
                for (int h = 0; h < H; h++) acc[h][t] = _mm512_dpbf16_ps(acc[h][t], w[h], b);
            }
            if (TERMS == 3) {
                b = (__m512bh)_mm512_set1_epi32((int)x2[t * kq + p]);
#pragma GCC unroll 4
                for (int h = 0; h < H; h++) acc[h][t] = _mm512_dpbf16_ps(acc[h][t], w[h], b);
            }
        }
    }
    tile_out(acc, NT, H, t0, first, y, rows, n, m);
}

/* Prefetch spacing for a block of `steps` pair / column steps: a mask
 * 2^s - 1, 2^s the largest power of two with 2^s x lines <= steps. */
AI int64_t bfp_pmask(const bfp_pf *pf, int64_t steps)
{
    int64_t pmask = 0;
    const int64_t lines = (int64_t)pf->rows * pf->lines;
    if (lines > 0)
        while (2 * (pmask + 1) * lines <= steps) pmask = 2 * pmask + 1;
    return pmask;
}

/* Every token of a against one packed block (16 H rows, np pairs from
 * column k0). The next block's lines are spread over all of this block's
 * pair steps: one prefetch per 2^s steps, 2^s the largest power of two with
 * 2^s x lines <= steps (a line per step asks for them all within the first
 * tiles, a burst that queues on memory when both cores do it). */
AI void bfp_block(const u32a *wp, int64_t np, const dsq_bfact *a, const int TERMS, const int H,
                  const int KC, const int PT, int64_t k0, int first, float *y, int64_t rows,
                  int64_t n, const __mmask16 m[4], bfp_pf *pf)
{
    const int64_t pmask = bfp_pmask(pf, (a->T + PT - 1) / PT * np);
    int64_t t = 0;
    for (; t + PT <= a->T; t += PT) bfp_tile(wp, np, a, t, PT, TERMS, H, KC, k0, first, y, rows, n, m, pf, pmask);
    switch (a->T - t) {
#define BFP_CASE(K) case K: if (K < PT) bfp_tile(wp, np, a, t, K < PT ? K : 1, TERMS, H, KC, k0, first, y, rows, n, m, pf, pmask); break;
    BFP_CASE(11) BFP_CASE(10) BFP_CASE(9) BFP_CASE(8) BFP_CASE(7) BFP_CASE(6)
    BFP_CASE(5) BFP_CASE(4) BFP_CASE(3) BFP_CASE(2) BFP_CASE(1)
#undef BFP_CASE
    default: break;
    }
}

/* The gemm's block shape: BFP_H halves of 16 rows (BFP_H x 16 rows x
 * BFP_KC columns of packed weights, 32 KB or less so they stay in L1) and
 * tiles of BFP_PT tokens (BFP_H x BFP_PT accumulators). */
#ifndef BFP_H
#define BFP_H 4
#endif
#ifndef BFP_PT
#define BFP_PT 6
#endif
#ifndef BFP_KC
#define BFP_KC 256
#endif

AI void bfp_gemm(const dsq_qview *v, const dsq_bfact *a, int64_t n0, int64_t n1, const int TERMS,
                 float *y)
{
    enum { H = BFP_H, KC = BFP_KC, RB = 16 * BFP_H };
    _Alignas(64) u32a wp[H * (KC / 2) * 16];
    const int64_t cols = v->shape.cols, rows = v->shape.rows, kend = (cols + 31) & ~(int64_t)31;
    const size_t ws = v->layout.row_bytes;
    for (int64_t k0 = 0; k0 < kend; k0 += KC) {
        const int64_t k1 = k0 + KC < kend ? k0 + KC : kend;
        const int64_t np = ((k1 < cols ? k1 : cols) - k0 + 1) / 2;   /* pairs past cols are 0 */
        for (int64_t n = n0; n < n1; n += RB) {
            const int nr = n1 - n < RB ? (int)(n1 - n) : RB;
            __mmask16 m[4];
            bfp_masks(nr, H, m);
            bfp_pack(v, n, nr, k0, k1, wp, H, KC);
            /* next block: the next rows of this chunk, else the first of the next chunk */
            int64_t pn = n + RB, pk = k0;
            if (pn >= n1) {
                pn = n0;
                pk = k1;
            }
            bfp_pf pf = { NULL, ws, 0, 0, 0, 0 };   /* rows = 0: nothing to fetch */
            if (pk < kend) {
                const int64_t pk1 = pk + KC < kend ? pk + KC : kend;
                pf.base = (const char *)v->w + (size_t)pn * ws + (size_t)pk * 2;
                pf.rows = n1 - pn < RB ? (int)(n1 - pn) : RB;
                pf.lines = (int)((pk1 - pk) / 32);
            }
            bfp_block(wp, np, a, TERMS, H, KC, BFP_PT, k0, k0 == 0, y, rows, n, m, &pf);
        }
    }
}

/* ---- f32 packed path (three terms, xh == NULL) ---------------------------
 *
 * Three split terms cost three vdpbf16ps per weight pair: 32 multiply-adds
 * each, 10.7 of them useful. An f32 FMA does 16 at the same rate on a
 * Zen 5 core (both 2 per cycle), so for f32-accurate activations the
 * weights are widened instead (bf16 -> f32 is exact: a 16-bit shift, done
 * in the repack) and multiplied by x as is: 1.5x fewer instructions, no
 * split, and x exact where the three terms leave up to 2^-24 |x| (scheme.h).
 * Same blocking as above with f32 weights: a block of 64 rows x
 * BFF_KC columns (32 KB) as wf[half][column][16], a 64-row x 6-token tile
 * of 24 accumulators fed per column by 4 weight loads and 6 broadcast x
 * operands. Per row the columns are added in order, chunk after chunk: the
 * order depends on the shape only. */

#ifndef BFF_KC
#define BFF_KC 128
#endif

/* Rows [n, n + nr) (nr <= 16 H), columns [k0, k1) (multiples of 32) widened
 * into wf[h][k - k0][16]; zeros for rows >= nr and columns >= cols. */
AI void bff_pack(const dsq_qview *v, int64_t n, int nr, int64_t k0, int64_t k1, float *wf,
                 const int H, const int KC)
{
    const int64_t cols = v->shape.cols;
    const size_t ws = v->layout.row_bytes / 2;
    const uint16_t *w = (const uint16_t *)(const void *)(v->w) + (size_t)n * ws;
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    for (int h = 0; h < H; h++)
        for (int64_t k = k0; k < k1; k += 32) {
            const __mmask32 m = cols - k >= 32 ? (__mmask32)~0u : (__mmask32)((1u << (cols - k)) - 1);
            __m512i r[16];
            for (int i = 0; i < 16; i++) {
                const int row = 16 * h + i;
                r[i] = row < nr ? _mm512_maskz_loadu_epi16(m, w + (size_t)row * ws + k)
                                : _mm512_setzero_si512();
            }
            tr16(r);   /* r[i]: columns k + 2i (low half) and k + 2i + 1 of 16 rows */
            float *o = wf + ((size_t)h * (size_t)KC + (size_t)(k - k0)) * 16;
            for (int i = 0; i < 16; i++) {
                _mm512_store_si512((void *)(o + 32 * i), _mm512_slli_epi32(r[i], 16));
                _mm512_store_si512((void *)(o + 32 * i + 16), _mm512_and_si512(r[i], hi));
            }
        }
}

/* One 16 H-row x NT-token tile over nc columns of the widened chunk from
 * column k0 (x read at [t][k0 .. k0 + nc), never past cols); first: store
 * into y, else add. pf: the next block, one line per pmask + 1 columns. */
AI void bff_tile(const float *wf, int64_t nc, const dsq_bfact *a, int64_t t0, const int NT,
                 const int H, const int KC, int64_t k0, int first, float *y, int64_t rows,
                 int64_t n, const __mmask16 m[4], bfp_pf *pf, int64_t pmask, int64_t ldx)
{
    const float *x = a->x + t0 * ldx + k0;
    __m512 acc[4][BFP_PT_MAX];
#pragma GCC unroll 4
    for (int h = 0; h < H; h++)
#pragma GCC unroll 12
        for (int t = 0; t < NT; t++) acc[h][t] = _mm512_setzero_ps();
    for (int64_t c = 0; c < nc; c++) {
        __m512 w[4];
#pragma GCC unroll 4
        for (int h = 0; h < H; h++) w[h] = _mm512_load_ps(wf + 16 * ((size_t)h * KC + c));
        if (!(c & pmask)) bfp_prefetch(pf);
#pragma GCC unroll 12
        for (int t = 0; t < NT; t++) {
            const __m512 b = _mm512_set1_ps(x[t * ldx + c]);
#pragma GCC unroll 4
            for (int h = 0; h < H; h++) acc[h][t] = _mm512_fmadd_ps(w[h], b, acc[h][t]);
        }
    }
    tile_out(acc, NT, H, t0, first, y, rows, n, m);
}

AI void bff_block(const float *wf, int64_t nc, const dsq_bfact *a, const int H, const int KC,
                  const int PT, int64_t k0, int first, float *y, int64_t rows, int64_t n,
                  const __mmask16 m[4], bfp_pf *pf, int64_t ldx)
{
    const int64_t pmask = bfp_pmask(pf, (a->T + PT - 1) / PT * nc);
    int64_t t = 0;
    for (; t + PT <= a->T; t += PT) bff_tile(wf, nc, a, t, PT, H, KC, k0, first, y, rows, n, m, pf, pmask, ldx);
    switch (a->T - t) {
#define BFF_CASE(K) case K: if (K < PT) bff_tile(wf, nc, a, t, K < PT ? K : 1, H, KC, k0, first, y, rows, n, m, pf, pmask, ldx); break;
    BFF_CASE(11) BFF_CASE(10) BFF_CASE(9) BFF_CASE(8) BFF_CASE(7) BFF_CASE(6)
    BFF_CASE(5) BFF_CASE(4) BFF_CASE(3) BFF_CASE(2) BFF_CASE(1)
#undef BFF_CASE
    default: break;
    }
}

static void bff_gemm(const dsq_qview *v, const dsq_bfact *a, int64_t n0, int64_t n1, float *y)
{
    enum { H = BFP_H, KC = BFF_KC, RB = 16 * BFP_H };
    _Alignas(64) float wf[H * KC * 16];
    const int64_t cols = v->shape.cols, rows = v->shape.rows, kend = (cols + 31) & ~(int64_t)31;
    const size_t ws = v->layout.row_bytes;
    for (int64_t k0 = 0; k0 < kend; k0 += KC) {
        const int64_t k1 = k0 + KC < kend ? k0 + KC : kend;
        const int64_t nc = (k1 < cols ? k1 : cols) - k0;
        for (int64_t n = n0; n < n1; n += RB) {
            const int nr = n1 - n < RB ? (int)(n1 - n) : RB;
            __mmask16 m[4];
            bfp_masks(nr, H, m);
            bff_pack(v, n, nr, k0, k1, wf, H, KC);
            int64_t pn = n + RB, pk = k0;
            if (pn >= n1) {
                pn = n0;
                pk = k1;
            }
            bfp_pf pf = { NULL, ws, 0, 0, 0, 0 };
            if (pk < kend) {
                const int64_t pk1 = pk + KC < kend ? pk + KC : kend;
                pf.base = (const char *)v->w + (size_t)pn * ws + (size_t)pk * 2;
                pf.rows = n1 - pn < RB ? (int)(n1 - pn) : RB;
                pf.lines = (int)((pk1 - pk) / 32);
            }
            bff_block(wf, nc, a, H, KC, BFP_PT, k0, k0 == 0, y, rows, n, m, &pf, cols);
        }
    }
}

void dsq_avx512bf16_packed_block(const uint32_t *wp, int64_t np, const dsq_bfact *a, int64_t k0,
                                 int first, float *y, int64_t rows, int64_t n, int nr)
{
    enum { KC = DSQ_BF16_PACK_KC };
    __mmask16 m[4];
    bfp_masks(nr, 2, m);
    bfp_pf pf = { NULL, 0, 0, 0, 0, 0 };
    const u32a *w = (const u32a *)wp;
    if (!a->xl) bfp_block(w, np, a, 1, 2, KC, 12, k0, first, y, rows, n, m, &pf);
    else if (a->xl2) bfp_block(w, np, a, 3, 2, KC, 12, k0, first, y, rows, n, m, &pf);
    else bfp_block(w, np, a, 2, 2, KC, 12, k0, first, y, rows, n, m, &pf);
}

void dsq_avx512bf16_gemm(const dsq_qview *v, const dsq_bfact *a, int64_t n0, int64_t n1, float *y)
{
    if (!a->xh) {   /* not split: f32 weights against x (three terms' accuracy) */
        bff_gemm(v, a, n0, n1, y);
        return;
    }
    const int terms = !a->xl ? 1 : a->xl2 ? 3 : 2;
    if (a->T >= BFP_MIN_T) {
        if (terms == 1) bfp_gemm(v, a, n0, n1, 1, y);
        else if (terms == 3) bfp_gemm(v, a, n0, n1, 3, y);
        else bfp_gemm(v, a, n0, n1, 2, y);
        return;
    }
    if (terms == 1) gemm_terms(v, a, n0, n1, 1, y);
    else if (terms == 3) gemm_terms(v, a, n0, n1, 3, y);
    else gemm_terms(v, a, n0, n1, 2, y);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* x86 */
