/* kernels_avx512awq.c - awq-w4a16 gemm on the CPU's bf16 dot product
 * (vdpbf16ps, AVX512_BF16), the gemm_awq of the "avx512bf16" level; and the
 * f32 kernel gemv_awq of both AVX-512 levels (AVX512F/BW only; section
 * "f32" below).
 *
 * Numerics (scheme.h, "awq-w4a16 on a bf16 dot product"): the reference is
 * y = sum_k (q_k - z_g) s_g x_k. Here y = sum_g s_g * sum_{k in g} (q_k - z_g)
 * x_k: (q - z) is an integer in -15..15, exact in bf16, and x comes split in
 * bf16 terms (scheme_awq.c, as for bf16 prefill), so every product is exact
 * and only the f32 additions round; one FMA per group applies the scale.
 *
 * Unpacking (dsq_awq_perm, kernels.h): a 128-column block is 64 bytes, 32
 * 16-bit lanes; lane w holds the nibbles of columns 2w, 2w + 64, 2w + 1 and
 * 2w + 65. Shifting the lanes by 0, 4, 8, 12 and one vpermw each through a
 * table of bf16(i - z) (the group's zero point; vpermw reads 5 index bits,
 * so the table is written twice and no mask is needed) gives 4 vectors of
 * 32 bf16 weights; the activations come in the same order. Per 128 weights:
 * 1 load, 3 shifts, 4 vpermw. Past cols the weights are whatever the
 * padding nibbles say (finite) and the activations are 0.
 *
 * Decode (T <= 4): 4 rows at a time are unpacked and multiplied in
 * registers as they stream, the next 4 rows prefetched.
 * Prefill (T > 4): per BK-column chunk the block's rows are unpacked once
 * into work (RB x BK bf16, 256 KB, L2 resident), and 4-row x 6-token tiles
 * of the bf16 weights run over it, so the unpack is paid once per call. The
 * 24 group sums live in registers (with 4 weights and one activation term);
 * the totals are touched once per group and live in L1.
 * Each tile's lanes are summed at the end of a chunk and added to y (y =
 * partial of the first chunk, then y += next): the order depends on the
 * shape only, never on the thread count.
 *
 * The dispatch now prefers the int16 kernel (kernels_avx512awq16.c) for
 * every view this kernel takes; dsq_awq_gemm_terms still runs it (tests,
 * and any caller that asks for a number of bf16 terms).
 * Speed: with one term it beats every f32 path at every T (4 vdpbf16ps per
 * 128 weights); with two or three terms the f32 kernel of this file
 * (dsq_avx512awq_gemv, gemv_awq: 8 FMAs per 128 weights, x as is) is as
 * fast or faster at every T and has no split error. scheme_awq.c
 * (awq_use_f32) picks.
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

#define BK DSQ_AWQ_BK   /* columns per prefill chunk (multiple of 128) */
#define TT 6            /* tokens per prefill tile */

/* bf16(i - z) for i = 0..15, twice (words 0..15 and 16..31): the vpermw
 * table of a group. vpermw reads 5 index bits, so the fifth bit (the next
 * nibble's lowest) needs no masking. */
AI __m512i awq_table(int z)
{
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m256bh t = _mm512_cvtneps_pbh(_mm512_sub_ps(iota, _mm512_set1_ps((float)z)));
    return _mm512_broadcast_i64x4((__m256i)t);
}

/* Weights j = 0..3 of a 128-column block d (64 bytes, 32 words) in the
 * kernel's order (kernels.h, DSQ_AWQ_PERM): word w holds columns 2w
 * (bits 0-3), 2w + 64 (4-7), 2w + 1 (8-11) and 2w + 65 (12-15). */
AI __m512i awq_w(__m512i d, const int j, __m512i tab)
{
    return _mm512_permutexvar_epi16(j ? _mm512_srli_epi16(d, 4 * j) : d, tab);
}

/* acc + w . x over bf16 pairs. The operands stay __m512i until here: GCC 12
 * keeps arrays of __m512bh in memory, which costs a load per dot product. */
AI __m512 dp(__m512 acc, __m512i w, __m512i x)
{
    return _mm512_dpbf16_ps(acc, (__m512bh)w, (__m512bh)x);
}

/* Group of the 128-column block b: groups are multiples of 128 columns here
 * (the driver checks), the last one also holds the padding. */
AI int64_t blk_group(int64_t b, int64_t ng, int64_t gs)
{
    int64_t g = b * 128 / gs;
    return g < ng ? g : ng - 1;
}

/* ---- decode: unpack in registers ----------------------------------------- */

/* R rows (4 or 1) from n against NT tokens (1 or 2) from t0, every column.
 * One token: each term has its own group sum (S = TERMS chains per row). */
AI void dec_tile(const dsq_qview *v, const dsq_bfact *a, int64_t n, const int R, int64_t t0,
                 const int NT, const int TERMS, int npf, float *y)
{
    const int S = NT == 1 ? TERMS : 1;
    const int64_t rows = v->shape.rows, kp = a->kpad, nb = (v->shape.cols + 127) >> 7;
    const int64_t ng = v->layout.ngroups, gs = v->layout.gsize;
    const size_t rb = v->layout.row_bytes;
    const uint8_t *w = v->w + (size_t)n * rb;
    const uint16_t *xt[3] = { a->xh + t0 * kp, TERMS >= 2 ? a->xl + t0 * kp : NULL,
                              TERMS == 3 ? a->xl2 + t0 * kp : NULL };
    __m512 acc[4][2], gacc[4][2][3];
    __m512i tab[4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        tab[r] = _mm512_setzero_si512();   /* set at the first block; quiets -Wmaybe-uninitialized */
#pragma GCC unroll 2
        for (int t = 0; t < NT; t++) {
            acc[r][t] = _mm512_setzero_ps();
#pragma GCC unroll 3
            for (int i = 0; i < S; i++) gacc[r][t][i] = acc[r][t];
        }
    }
    for (int64_t b = 0, g = -1; b <= nb; b++) {
        const int64_t gb = b < nb ? blk_group(b, ng, gs) : -2;
        if (gb != g) {   /* close group g, open gb */
            if (g >= 0)
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    const __m512 sv = _mm512_set1_ps(v->scales[(n + r) * ng + g]);
#pragma GCC unroll 2
                    for (int t = 0; t < NT; t++) {
                        __m512 s = gacc[r][t][0];
#pragma GCC unroll 3
                        for (int i = 1; i < S; i++) s = _mm512_add_ps(s, gacc[r][t][i]);
                        acc[r][t] = _mm512_fmadd_ps(s, sv, acc[r][t]);
                    }
                }
            if (b == nb) break;
            g = gb;
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                tab[r] = awq_table(v->zeros[(n + r) * ng + g]);
#pragma GCC unroll 2
                for (int t = 0; t < NT; t++)
#pragma GCC unroll 3
                    for (int i = 0; i < S; i++) gacc[r][t][i] = _mm512_setzero_ps();
            }
        }
        /* decode streams each row once: fetch the next tile's rows while this
         * one computes, so a new tile does not start on cold streams */
        for (int r = 0; r < npf; r++) _mm_prefetch((const char *)(w + (size_t)(R + r) * rb + b * 64), _MM_HINT_T0);
        __m512i d[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) d[r] = _mm512_loadu_si512(w + (size_t)r * rb + b * 64);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m512i wv[4];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) wv[r] = awq_w(d[r], j, tab[r]);
#pragma GCC unroll 2
            for (int t = 0; t < NT; t++)
#pragma GCC unroll 3
                for (int i = 0; i < TERMS; i++) {
                    __m512i xv = _mm512_loadu_si512(xt[i] + t * kp + b * 128 + 32 * j);
#pragma GCC unroll 4
                    for (int r = 0; r < R; r++) gacc[r][t][i % S] = dp(gacc[r][t][i % S], wv[r], xv);
                }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int t = 0; t < NT; t++) y[(t0 + t) * rows + n + r] = _mm512_reduce_add_ps(acc[r][t]);
}

AI void dec_terms(const dsq_qview *v, const dsq_bfact *a, int64_t n0, int64_t n1, const int TERMS,
                  float *y)
{
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) {
        const int npf = n1 - (n + 4) < 4 ? (int)(n1 - (n + 4)) : 4;
        int64_t t = 0;
        for (; t + 2 <= a->T; t += 2) dec_tile(v, a, n, 4, t, 2, TERMS, t ? 0 : npf, y);
        if (t < a->T) dec_tile(v, a, n, 4, t, 1, TERMS, t ? 0 : npf, y);
    }
    for (; n < n1; n++) {
        int64_t t = 0;
        for (; t + 2 <= a->T; t += 2) dec_tile(v, a, n, 1, t, 2, TERMS, 0, y);
        if (t < a->T) dec_tile(v, a, n, 1, t, 1, TERMS, 0, y);
    }
}

/* ---- decode in f32: x as is (gemv_awq) ------------------------------------
 * The three-term split costs 12 vdpbf16ps per 128 weights; with x in f32 the
 * same products take 8 FMAs. A 64-byte block is 16 dword lanes of 8 nibbles
 * (dsq_awq_perm16): per 128 weights and row, 7 shifts, 8 vpermps through the
 * group's table deq[i] = (i - z) * s (the reference's dequantized value of
 * code i, so each product is the reference's, rounded once by the FMA) and
 * 8 FMAs, x read in the matching order (the driver permutes it once per
 * call). vpermps reads the low 4 index bits only: no masking. R = 4 rows
 * share each x load; up to 4 tokens share each unpacked weight vector.
 * Since awq's activations are int16 (scheme.h), the dispatch runs this
 * kernel only on the views the int16 kernel (kernels_avx512awq16.c) does
 * not take: groups of an odd multiple of 64 columns. */

#define F(z) { 0 - (z), 1 - (z), 2 - (z), 3 - (z), 4 - (z), 5 - (z), 6 - (z), 7 - (z),     \
               8 - (z), 9 - (z), 10 - (z), 11 - (z), 12 - (z), 13 - (z), 14 - (z), 15 - (z) }
/* (i - z) for i = 0..15, one row per zero point (checked <= 15 by qview_init) */
static const float awq_iz[16][16] __attribute__((aligned(64))) = {
    F(0), F(1), F(2), F(3), F(4), F(5), F(6), F(7),
    F(8), F(9), F(10), F(11), F(12), F(13), F(14), F(15),
};
#undef F

/* One 128-column block b of R rows against NT tokens. MASK: the last,
 * partial block, where lanes past cols are zeroed (their nibbles are
 * padding, and a huge scale times a padding code could be Inf, Inf * 0 NaN). */
AI void gv_block(const uint8_t *w, size_t rb, const int R, const float *xt, int64_t kp,
                 const int NT, int64_t b, const __m512 *ta, const __m512 *tb, const int MASK,
                 const __mmask16 *tm, __m512 acc[4][4][2])
{
    const int A = NT == 1 ? 2 : 1;
    __m512i d[4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) d[r] = _mm512_loadu_si512(w + (size_t)r * rb + b * 64);
#pragma GCC unroll 8
    for (int s = 0; s < 8; s++) {
        __m512 xv[4];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) xv[t] = _mm512_loadu_ps(xt + t * kp + b * 128 + 16 * s);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512i idx = s ? _mm512_srli_epi32(d[r], 4 * s) : d[r];
            const __m512 tv = s & 1 ? tb[r] : ta[r];   /* odd shifts: columns 64..127 */
            const __m512 wv = MASK ? _mm512_maskz_permutexvar_ps(tm[s], idx, tv)
                                   : _mm512_permutexvar_ps(idx, tv);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) acc[r][t][s % A] = _mm512_fmadd_ps(wv, xv[t], acc[r][t][s % A]);
        }
    }
}

/* R rows (4 or 1) from n against NT (1..4) tokens from t0; npf rows after
 * the tile are prefetched block by block, so the next tile does not start
 * on cold streams. */
AI void gv_tile(const dsq_qview *v, const float *xp, int64_t kp, int64_t n, const int R,
                int64_t t0, const int NT, const int npf, const __mmask16 *tm, float *y)
{
    const int A = NT == 1 ? 2 : 1;
    const int64_t rows = v->shape.rows, cols = v->shape.cols;
    const int64_t ng = v->layout.ngroups, gs = v->layout.gsize;
    const int64_t nfull = cols >> 7, nb = (cols + 127) >> 7;
    const size_t rb = v->layout.row_bytes;
    const uint8_t *w = v->w + (size_t)n * rb;
    const float *xt = xp + t0 * kp;
    __m512 acc[4][4][2], tab[4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        tab[r] = _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++)
#pragma GCC unroll 2
            for (int a = 0; a < A; a++) acc[r][t][a] = _mm512_setzero_ps();
    }
    /* one base pointer each and the row stride (fewer live registers than 4
     * row pointers: the group setup runs every block at g128) */
    const uint8_t *zp = v->zeros + n * ng;
    const float *sp = v->scales + n * ng;
#define GV_TAB(r, g)                                                                               \
    _mm512_mul_ps(_mm512_load_ps(awq_iz[zp[(g) + (r) * ng] & 15]), _mm512_set1_ps(sp[(g) + (r) * ng]))
#define GV_PF(b)                                                                                   \
    _Pragma("GCC unroll 4") for (int r = 0; r < npf; r++) _mm_prefetch((const char *)(w + (size_t)(R + r) * rb + (b) * 64), _MM_HINT_T0)
    if (ng == 1 || gs % 128 == 0) {
        /* blocks per group (the last group also holds the padding); no division per block */
        const int64_t gpb = ng == 1 ? nb : gs >> 7;
        for (int64_t g = 0, b0 = 0; g < ng; g++, b0 += gpb) {
            const int64_t b1 = g == ng - 1 ? nb : b0 + gpb;
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) tab[r] = GV_TAB(r, g);
            for (int64_t b = b0; b < b1; b++) {
                GV_PF(b);
                if (b < nfull) gv_block(w, rb, R, xt, kp, NT, b, tab, tab, 0, tm, acc);
                else gv_block(w, rb, R, xt, kp, NT, b, tab, tab, 1, tm, acc);
            }
        }
    } else {
        /* groups of an odd multiple of 64 columns: a block's two 64-column
         * halves (even / odd shifts) may lie in different groups */
        const int64_t hpg = gs >> 6;   /* halves per group */
        __m512 tb[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                         _mm512_setzero_ps() };
        int64_t gh = 0, left = hpg, ga = -1, gb = -1;
        for (int64_t b = 0; b < nb; b++) {
            int64_t g0 = gh, g1;
            if (--left == 0) { gh += gh + 1 < ng; left = hpg; }
            g1 = gh;
            if (--left == 0) { gh += gh + 1 < ng; left = hpg; }
            if (g0 != ga) {
                ga = g0;
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) tab[r] = g0 == gb ? tb[r] : GV_TAB(r, g0);
            }
            if (g1 != gb) {
                gb = g1;
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) tb[r] = g1 == ga ? tab[r] : GV_TAB(r, g1);
            }
            GV_PF(b);
            if (b < nfull) gv_block(w, rb, R, xt, kp, NT, b, tab, tb, 0, tm, acc);
            else gv_block(w, rb, R, xt, kp, NT, b, tab, tb, 1, tm, acc);
        }
    }
#undef GV_PF
#undef GV_TAB
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            __m512 sum = A == 2 ? _mm512_add_ps(acc[r][t][0], acc[r][t][1]) : acc[r][t][0];
            y[(t0 + t) * rows + n + r] = _mm512_reduce_add_ps(sum);
        }
}

AI void gv_rows(const dsq_qview *v, const float *xp, int64_t kp, int64_t n0, int64_t n1,
                int64_t t0, const int NT, const __mmask16 *tm, float *y)
{
    int64_t n = n0;
    /* a constant prefetch count (4 rows, none on the last tiles): the
     * block loop keeps no loop for it */
    for (; n + 8 <= n1; n += 4) gv_tile(v, xp, kp, n, 4, t0, NT, 4, tm, y);
    for (; n + 4 <= n1; n += 4) gv_tile(v, xp, kp, n, 4, t0, NT, 0, tm, y);
    for (; n < n1; n++) gv_tile(v, xp, kp, n, 1, t0, NT, 0, tm, y);
}

void dsq_avx512awq_gemv(const dsq_qview *v, const float *xp, int64_t T, int64_t kpad, int64_t n0,
                        int64_t n1, float *y)
{
    /* lanes of the last block that hold columns < cols, per shift */
    const int64_t rem = v->shape.cols & 127;
    __mmask16 tm[8];
    for (int s = 0; s < 8; s++) {
        unsigned m = 0;
        for (int l = 0; l < 16; l++)
            if (dsq_awq_perm16(16 * s + l) < rem) m |= 1u << l;
        tm[s] = (__mmask16)m;
    }
    /* four tokens per pass; more (not the decode case) re-read the rows from cache */
    for (int64_t t = 0; t < T; t += 4) {
        switch (T - t < 4 ? T - t : 4) {
        case 1: gv_rows(v, xp, kpad, n0, n1, t, 1, tm, y); break;
        case 2: gv_rows(v, xp, kpad, n0, n1, t, 2, tm, y); break;
        case 3: gv_rows(v, xp, kpad, n0, n1, t, 3, tm, y); break;
        default: gv_rows(v, xp, kpad, n0, n1, t, 4, tm, y); break;
        }
    }
}

/* ---- prefill: unpack a chunk once, tiles over tokens --------------------- */

/* Rows [n0, n1), columns [k0, k1) (multiples of 128) as bf16 (q - z) into
 * work[(n - n0) * BK + (k - k0)], in the kernel's column order. */
static void unpack_chunk(const dsq_qview *v, int64_t n0, int64_t n1, int64_t k0, int64_t k1,
                         uint16_t *work)
{
    const int64_t ng = v->layout.ngroups, gs = v->layout.gsize;
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *row = v->w + (size_t)n * v->layout.row_bytes;
        uint16_t *o = work + (n - n0) * BK - k0;
        int64_t g = -1;
        __m512i tab = _mm512_setzero_si512();
        for (int64_t k = k0; k < k1; k += 128) {
            const int64_t gb = blk_group(k >> 7, ng, gs);
            if (gb != g) tab = awq_table(v->zeros[n * ng + (g = gb)]);
            const __m512i d = _mm512_loadu_si512(row + (k >> 7) * 64);
            _mm512_storeu_si512(o + k, awq_w(d, 0, tab));
            _mm512_storeu_si512(o + k + 32, awq_w(d, 1, tab));
            _mm512_storeu_si512(o + k + 64, awq_w(d, 2, tab));
            _mm512_storeu_si512(o + k + 96, awq_w(d, 3, tab));
        }
    }
}

/* R x NT tile of rows n.. and tokens t0.. over the chunk [k0, k1) of work.
 * The group sums live in registers (4 x 6 of them, plus 4 weights and one
 * activation term); the totals are touched once per group and live in
 * memory (L1), which leaves the registers to the group sums. */
AI void pre_tile(const dsq_qview *v, const dsq_bfact *a, const uint16_t *work, int64_t n0,
                 int64_t n, const int R, int64_t t0, const int NT, const int TERMS, int64_t k0,
                 int64_t k1, int first, float *y)
{
    const int64_t rows = v->shape.rows, kp = a->kpad, ng = v->layout.ngroups, gs = v->layout.gsize;
    const uint16_t *wb = work + (n - n0) * BK - k0;
    const uint16_t *xt[3] = { a->xh + t0 * kp, TERMS >= 2 ? a->xl + t0 * kp : NULL,
                              TERMS == 3 ? a->xl2 + t0 * kp : NULL };
    _Alignas(64) float acc[4][TT][16];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 6
        for (int t = 0; t < NT; t++) _mm512_store_ps(acc[r][t], _mm512_setzero_ps());
    for (int64_t g = blk_group(k0 >> 7, ng, gs), k = k0; k < k1; g++) {
        const int64_t ke = g == ng - 1 || (g + 1) * gs > k1 ? k1 : (g + 1) * gs;
        __m512 gacc[4][TT];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 6
            for (int t = 0; t < NT; t++) gacc[r][t] = _mm512_setzero_ps();
        for (; k < ke; k += 32) {
            __m512i wv[4];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) wv[r] = _mm512_loadu_si512(wb + r * BK + k);
#pragma GCC unroll 6
            for (int t = 0; t < NT; t++)
#pragma GCC unroll 3
                for (int i = 0; i < TERMS; i++) {
                    __m512i xv = _mm512_loadu_si512(xt[i] + t * kp + k);
#pragma GCC unroll 4
                    for (int r = 0; r < R; r++) gacc[r][t] = dp(gacc[r][t], wv[r], xv);
                }
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512 sv = _mm512_set1_ps(v->scales[(n + r) * ng + g]);
#pragma GCC unroll 6
            for (int t = 0; t < NT; t++)
                _mm512_store_ps(acc[r][t], _mm512_fmadd_ps(gacc[r][t], sv, _mm512_load_ps(acc[r][t])));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 6
        for (int t = 0; t < NT; t++) {
            float s = _mm512_reduce_add_ps(_mm512_load_ps(acc[r][t]));
            float *o = y + (t0 + t) * rows + n + r;
            *o = first ? s : *o + s;
        }
}

AI void pre_rows(const dsq_qview *v, const dsq_bfact *a, const uint16_t *work, int64_t n0,
                 int64_t n1, int64_t t0, const int NT, const int TERMS, int64_t k0, int64_t k1,
                 int first, float *y)
{
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) pre_tile(v, a, work, n0, n, 4, t0, NT, TERMS, k0, k1, first, y);
    for (; n < n1; n++) pre_tile(v, a, work, n0, n, 1, t0, NT, TERMS, k0, k1, first, y);
}

AI void pre_terms(const dsq_qview *v, const dsq_bfact *a, int64_t n0, int64_t n1, const int TERMS,
                  uint16_t *work, float *y)
{
    const int64_t kend = (v->shape.cols + 127) & ~(int64_t)127;
    for (int64_t k0 = 0; k0 < kend; k0 += BK) {
        const int64_t k1 = k0 + BK < kend ? k0 + BK : kend;
        const int first = k0 == 0;
        unpack_chunk(v, n0, n1, k0, k1, work);
        int64_t t = 0;
        for (; t + TT <= a->T; t += TT) pre_rows(v, a, work, n0, n1, t, TT, TERMS, k0, k1, first, y);
        switch (a->T - t) {
        case 5: pre_rows(v, a, work, n0, n1, t, 5, TERMS, k0, k1, first, y); break;
        case 4: pre_rows(v, a, work, n0, n1, t, 4, TERMS, k0, k1, first, y); break;
        case 3: pre_rows(v, a, work, n0, n1, t, 3, TERMS, k0, k1, first, y); break;
        case 2: pre_rows(v, a, work, n0, n1, t, 2, TERMS, k0, k1, first, y); break;
        case 1: pre_rows(v, a, work, n0, n1, t, 1, TERMS, k0, k1, first, y); break;
        default: break;
        }
    }
}

void dsq_avx512awq_gemm(const dsq_qview *v, const dsq_bfact *a, int64_t n0, int64_t n1, float *y,
                        void *work)
{
    const int terms = !a->xl ? 1 : a->xl2 ? 3 : 2;
    if (a->T <= DSQ_AWQ_DECODE_T) {
        if (terms == 1) dec_terms(v, a, n0, n1, 1, y);
        else if (terms == 2) dec_terms(v, a, n0, n1, 2, y);
        else dec_terms(v, a, n0, n1, 3, y);
        return;
    }
    /* rows beyond DSQ_AWQ_RB per call go in DSQ_AWQ_RB blocks (work's size) */
    for (int64_t b = n0; b < n1; b += DSQ_AWQ_RB) {
        const int64_t e = b + DSQ_AWQ_RB < n1 ? b + DSQ_AWQ_RB : n1;
        if (terms == 1) pre_terms(v, a, b, e, 1, work, y);
        else if (terms == 2) pre_terms(v, a, b, e, 2, work, y);
        else pre_terms(v, a, b, e, 3, work, y);
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* x86 */
