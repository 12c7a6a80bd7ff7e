/* kernels_avx512awq16.c - awq-w4a16 on int16 activations (AVX-512 VNNI):
 * awq16_prep and gemv_awq16 of both AVX-512 levels (contracts in kernels.h;
 * dsq_awq16_prep_scalar / dsq_gemv_awq16_scalar in kernels_ref.c are the
 * order, reproduced bit for bit).
 *
 * Why int16: the f32 kernel (kernels_avx512awq.c, gemv_awq) spends 24 vector
 * ops per 128 weights of a row (7 shifts, 8 vpermps, 8 FMAs, the table) and
 * reads 10-14 GB/s in decode at one thread, half what w4a8's int8 kernel
 * reads. With x in int16 (15 bits per 128-column block: finer than the fp16
 * activations vLLM's and vllm-ascend's AWQ kernels multiply), a block of a
 * row is 2 zero-extending loads, 2 ands, 2 shifts, 4 vpdpwssd (32 products
 * each, exact in int32), then in f32 one convert, one FNMA that takes the
 * zero point out (z * sf, the lane sums of x: exact, |D| < 2^22) and one
 * FMA by the block's x scale; one FMA per group by the weight scale.
 *
 * Word w of a zero-extended 32-byte half is byte w: its low nibble is column
 * w (+ 32 for the second half), its high nibble column w + 64, so the codes
 * multiply x in its natural order and lane l of vpdpwssd collects columns
 * 2l, 2l + 1 of each 32-column quarter (DSQ_AWQ16_LANE_COL).
 *
 * Tiles: one token, 6 rows (each x load shared six ways, the rows 8 ahead
 * prefetched as in gemv_awq's decode tiles); more tokens, 2 rows x up to 4
 * tokens, each unpacked block shared by the tokens, the next tile's rows
 * prefetched during the first tokens. A token's bits do not depend on T or
 * on the tile: every tile runs the same per-lane operations. */
#if defined(__x86_64__) || defined(__i386__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,fma")
#pragma GCC optimize("O3")
#endif

#include "kernels.h"
#include "dsq_mem.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

#define A16_PFD 8   /* one token: rows ahead to prefetch (past the next 6-row tile's start) */
/* One token, rows of up to this many columns stream one after another
 * (x's codes and lane sums, 2.5 bytes a column, stay in L1 for every row,
 * and the matrix is one sequential stream); longer rows go in 6-row tiles
 * that share each x load six ways. The cut is where the two cross in
 * bench_quant (one thread, cache cold): rows win clearly on 2048-column
 * rows (7168 x 2048), tiles on 7168- and 16384-column rows. */
#define A16_ROW_COLS 4096
/* ... and of at least this many: a row of a few blocks is one short
 * dependent chain, which six rows side by side hide (the 5M-parameter
 * sample's 256-column rows decode about a third faster in tiles). */
#define A16_ROW_MIN 1024

/* ---- prep ------------------------------------------------------------------ */

/* dsq_actq16_block, 16 lanes at a time: the same max, division, rounding
 * (vcvtps2dq rounds to nearest even, as rintf) and clamps. */
void dsq_avx512awq16_prep(const float *x, int64_t cols, int64_t t, const dsq_awq16_act *a)
{
    int16_t *q = a->q + t * a->kpad;
    float *xs = a->xs + t * a->nb, *sf = a->sf + t * a->nb * 16;
    const __m512i ones = _mm512_set1_epi16(1);
    const __m512 lo = _mm512_set1_ps((float)-DSQ_AWQ16_QMAX), hi = _mm512_set1_ps((float)DSQ_AWQ16_QMAX);
    for (int64_t b = 0; b < a->nb; b++) {
        const int64_t c0 = 128 * b, n = cols - c0 < 128 ? cols - c0 : 128;   /* >= 1: nb from cols */
        __m512 xv[8];
        __m512i m = _mm512_setzero_si512();
        for (int i = 0; i < 8; i++) {
            const int64_t left = n - 16 * i;
            const __mmask16 k = left >= 16 ? 0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
            xv[i] = _mm512_maskz_loadu_ps(k, x + c0 + 16 * i);
            m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_castps_si512(xv[i]), _mm512_set1_epi32(0x7fffffff)));
        }
        const uint32_t mb = (uint32_t)_mm512_reduce_max_epu32(m);
        int16_t *qb = q + c0;
        if (mb >= 0x7f800000u) {   /* Inf or NaN in the block */
            xs[b] = NAN;
            memset(qb, 0, 128 * sizeof *qb);
            memset(sf + 16 * b, 0, 16 * sizeof *sf);
            continue;
        }
        float s = dsq_bits_f32(mb) / (float)DSQ_AWQ16_QMAX;
        if (s < DSQ_QSCALE_MIN) s = DSQ_QSCALE_MIN;
        xs[b] = s;
        const __m512 sv = _mm512_set1_ps(s);
        for (int i = 0; i < 8; i++) {
            __m512 r = _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(xv[i], sv), lo), hi);
            _mm256_storeu_si256((__m256i *)(qb + 16 * i), _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(r)));
        }
        __m512i acc = _mm512_setzero_si512();
        for (int i = 0; i < 4; i++) acc = _mm512_dpwssd_epi32(acc, _mm512_loadu_si512(qb + 32 * i), ones);
        _mm512_storeu_ps(sf + 16 * b, _mm512_cvtepi32_ps(acc));
    }
}

/* ---- gemv ------------------------------------------------------------------- */

/* The four weight vectors of a packed 64-byte block (32 words each):
 * columns 0..31, 64..95, 32..63, 96..127 in word order. */
AI void a16_unpack(const uint8_t *p, __m512i w[4])
{
    const __m512i m = _mm512_set1_epi16(15);
    const __m512i a = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)p));
    const __m512i b = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(p + 32)));
    w[0] = _mm512_and_si512(a, m);
    w[1] = _mm512_srli_epi16(a, 4);
    w[2] = _mm512_and_si512(b, m);
    w[3] = _mm512_srli_epi16(b, 4);
}

/* D of one block against one token's codes xq (the block's 128 words):
 * sum of codes times x per lane (exact), less z times the lane sums. */
AI __m512 a16_d(const __m512i w[4], const int16_t *xq, __m512 zf, const float *sf)
{
    __m512i q = _mm512_madd_epi16(w[0], _mm512_loadu_si512(xq));
    q = _mm512_dpwssd_epi32(q, w[1], _mm512_loadu_si512(xq + 64));
    q = _mm512_dpwssd_epi32(q, w[2], _mm512_loadu_si512(xq + 32));
    q = _mm512_dpwssd_epi32(q, w[3], _mm512_loadu_si512(xq + 96));
    return _mm512_fnmadd_ps(zf, _mm512_loadu_ps(sf), _mm512_cvtepi32_ps(q));
}

/* The scalar twin's tree: lane l + l + 8, then + 4, + 2, + 1. */
AI float a16_sum(__m512 v)
{
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

/* The zero points of rows [n, n + R) as floats, zf[r * ng + g] (read as
 * broadcast operands: no per-block convert and broadcast). */
AI void a16_zeros(const dsq_qview *v, int64_t n, const int R, float *zf)
{
    const int64_t ng = v->layout.ngroups;
    const uint8_t *zp = v->zeros + n * ng;
    for (int64_t i = 0; i < R * ng; i += 16) {
        const __mmask16 k = R * ng - i >= 16 ? 0xffff : (__mmask16)((1u << (R * ng - i)) - 1);
        const __m128i b = _mm_maskz_loadu_epi8(k, zp + i);
        _mm512_mask_storeu_ps(zf + i, k, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b)));
    }
}

/* R rows from n against NT tokens from t0; npf rows after the tile
 * prefetched block by block (from pfd rows ahead). G1: one group per block
 * (groups of 128 columns). zf: a16_zeros of the tile. */
AI void a16_tile(const dsq_qview *v, const dsq_awq16_act *a, int64_t n, const int R, int64_t t0,
                 const int NT, const int G1, int npf, int64_t pfd, const float *zf, float *y)
{
    const int64_t rows = v->shape.rows, ng = v->layout.ngroups, nb = a->nb, kp = a->kpad;
    const int64_t gpb = G1 ? 1 : ng == 1 ? nb : v->layout.gsize >> 7;
    const size_t rb = v->layout.row_bytes;
    const uint8_t *w = v->w + (size_t)n * rb, *pf = w + (size_t)pfd * rb;
    const float *sp = v->scales + n * ng;
    const int16_t *xq = a->q + t0 * kp;
    const float *xs = a->xs + t0 * nb, *sf = a->sf + t0 * nb * 16;
    __m512 facc[6][4], gacc[6][4];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) facc[r][t] = gacc[r][t] = _mm512_setzero_ps();
    for (int64_t g = 0, b0 = 0; g < ng; g++, b0 += gpb) {
        const int64_t b1 = G1 ? b0 + 1 : g == ng - 1 ? nb : b0 + gpb;
        for (int64_t b = b0; b < b1; b++) {
#pragma GCC unroll 6
            for (int r = 0; r < npf; r++) _mm_prefetch((const char *)(pf + (size_t)r * rb + b * 64), _MM_HINT_T0);
#pragma GCC unroll 6
            for (int r = 0; r < R; r++) {
                __m512i wv[4];
                a16_unpack(w + (size_t)r * rb + b * 64, wv);
                const __m512 z = _mm512_set1_ps(zf[r * ng + g]);
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++) {
                    const __m512 d = a16_d(wv, xq + t * kp + b * 128, z, sf + (t * nb + b) * 16);
                    const __m512 x = _mm512_set1_ps(xs[t * nb + b]);
                    /* the first block: a product (fmaf(d, xs, 0) but for
                     * the sign of a zero, which facc's sum cannot keep) */
                    gacc[r][t] = G1 || b == b0 ? _mm512_mul_ps(d, x) : _mm512_fmadd_ps(d, x, gacc[r][t]);
                }
            }
        }
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            const __m512 sv = _mm512_set1_ps(sp[r * ng + g]);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) facc[r][t] = _mm512_fmadd_ps(gacc[r][t], sv, facc[r][t]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) y[(t0 + t) * rows + n + r] = a16_sum(facc[r][t]);
}

/* Rows [n0, n1), tokens from t0 (NT at a time), 2-row tiles. The first
 * token chunk streams each tile's rows from memory: it prefetches the next
 * tile's (2 rows ahead). zf: a16_zeros of rows [n0, n1). */
AI void a16_rows_nt(const dsq_qview *v, const dsq_awq16_act *a, int64_t n0, int64_t n1, int64_t t,
                    const int NT, int first, const float *zf, float *y)
{
    const int64_t ng = v->layout.ngroups;
    int64_t n = n0;
    for (; n + 2 <= n1; n += 2) {
        const int npf = !first ? 0 : n1 - (n + 2) < 2 ? (int)(n1 - (n + 2)) : 2;
        a16_tile(v, a, n, 2, t, NT, 0, npf, 2, zf + (n - n0) * ng, y);
    }
    if (n < n1) a16_tile(v, a, n, 1, t, NT, 0, 0, 0, zf + (n - n0) * ng, y);
}

/* One token, one row, its blocks two at a time in program order (the
 * integer chain of a block is 4 dependent vpdpwssd: two blocks side by side
 * keep the pipes busy while the row streams from memory). The same per-lane
 * operations and order as a16_tile. zf: a16_zeros of the row. */
AI void a16_row(const dsq_qview *v, const dsq_awq16_act *a, int64_t n, const float *zf, float *y)
{
    const int64_t ng = v->layout.ngroups, nb = a->nb;
    const int64_t gpb = ng == 1 ? nb : v->layout.gsize >> 7;
    const uint8_t *w = v->w + (size_t)n * v->layout.row_bytes;
    const float *sp = v->scales + n * ng;
    const int16_t *xq = a->q;
    const float *xs = a->xs, *sf = a->sf;
    __m512 facc = _mm512_setzero_ps();
    for (int64_t g = 0, b0 = 0; g < ng; g++, b0 += gpb) {
        const int64_t b1 = g == ng - 1 ? nb : b0 + gpb;
        const __m512 z = _mm512_set1_ps(zf[g]);
        int64_t b = b0;
        __m512 gacc;
        {   /* the first block: a product (as a16_tile) */
            __m512i wv[4];
            a16_unpack(w + b * 64, wv);
            gacc = _mm512_mul_ps(a16_d(wv, xq + b * 128, z, sf + b * 16), _mm512_set1_ps(xs[b]));
            b++;
        }
        for (; b + 2 <= b1; b += 2) {
            __m512i w0[4], w1[4];
            a16_unpack(w + b * 64, w0);
            a16_unpack(w + b * 64 + 64, w1);
            const __m512 d0 = a16_d(w0, xq + b * 128, z, sf + b * 16);
            const __m512 d1 = a16_d(w1, xq + b * 128 + 128, z, sf + b * 16 + 16);
            gacc = _mm512_fmadd_ps(d0, _mm512_set1_ps(xs[b]), gacc);
            gacc = _mm512_fmadd_ps(d1, _mm512_set1_ps(xs[b + 1]), gacc);
        }
        if (b < b1) {
            __m512i wv[4];
            a16_unpack(w + b * 64, wv);
            gacc = _mm512_fmadd_ps(a16_d(wv, xq + b * 128, z, sf + b * 16), _mm512_set1_ps(xs[b]), gacc);
        }
        facc = _mm512_fmadd_ps(gacc, _mm512_set1_ps(sp[g]), facc);
    }
    y[n] = a16_sum(facc);
}

/* g128, one token, one row: a block per group, two groups at a time. */
AI void a16_row_g1(const dsq_qview *v, const dsq_awq16_act *a, int64_t n, const float *zf, float *y)
{
    const int64_t nb = a->nb;
    const uint8_t *w = v->w + (size_t)n * v->layout.row_bytes;
    const float *sp = v->scales + n * nb;
    const int16_t *xq = a->q;
    const float *xs = a->xs, *sf = a->sf;
    __m512 facc = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        __m512i w0[4], w1[4];
        a16_unpack(w + b * 64, w0);
        a16_unpack(w + b * 64 + 64, w1);
        const __m512 d0 = a16_d(w0, xq + b * 128, _mm512_set1_ps(zf[b]), sf + b * 16);
        const __m512 d1 = a16_d(w1, xq + b * 128 + 128, _mm512_set1_ps(zf[b + 1]), sf + b * 16 + 16);
        const __m512 g0 = _mm512_mul_ps(d0, _mm512_set1_ps(xs[b]));
        const __m512 g1 = _mm512_mul_ps(d1, _mm512_set1_ps(xs[b + 1]));
        facc = _mm512_fmadd_ps(g0, _mm512_set1_ps(sp[b]), facc);
        facc = _mm512_fmadd_ps(g1, _mm512_set1_ps(sp[b + 1]), facc);
    }
    if (b < nb) {
        __m512i wv[4];
        a16_unpack(w + b * 64, wv);
        const __m512 d = a16_d(wv, xq + b * 128, _mm512_set1_ps(zf[b]), sf + b * 16);
        facc = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(xs[b])), _mm512_set1_ps(sp[b]), facc);
    }
    y[n] = a16_sum(facc);
}

/* One token, rows [n0, n1): 6-row tiles, the rows A16_PFD ahead prefetched. */
AI void a16_one(const dsq_qview *v, const dsq_awq16_act *a, int64_t n0, int64_t n1, const int G1,
                float *zf, float *y)
{
    const int64_t rows = v->shape.rows;
    int64_t n = n0;
    if (a->kpad >= A16_ROW_MIN && a->kpad <= A16_ROW_COLS) {
        for (; n < n1; n++) {
            a16_zeros(v, n, 1, zf);
            if (G1) a16_row_g1(v, a, n, zf, y);
            else a16_row(v, a, n, zf, y);
        }
        return;
    }
    for (; n + 6 <= n1; n += 6) {
        const int pf = n + A16_PFD + 6 <= rows;
        a16_zeros(v, n, 6, zf);
        a16_tile(v, a, n, 6, 0, 1, G1, pf ? 6 : 0, pf ? A16_PFD : 0, zf, y);
    }
    for (; n < n1; n++) {
        a16_zeros(v, n, 1, zf);
        a16_tile(v, a, n, 1, 0, 1, G1, 0, 0, zf, y);
    }
}

void dsq_avx512awq16_gemv(const dsq_qview *v, const dsq_awq16_act *a, int64_t n0, int64_t n1,
                          float *y)
{
    const int64_t ng = v->layout.ngroups;
    /* zero points as floats, 16 rows' worth: ng <= 512, as int-activation
     * views have at most DSQ_QMAX_INT_COLS columns (dsq_qlayout_init) */
    float zbuf[16 * (DSQ_QMAX_INT_COLS / 128)];
    if (a->T == 1) {
        if (ng == a->nb && ng > 1) a16_one(v, a, n0, n1, 1, zbuf, y);
        else a16_one(v, a, n0, n1, 0, zbuf, y);
    } else {
    /* row blocks of 16 (L1/L2-resident across the token chunks) */
    for (int64_t r0 = n0; r0 < n1; r0 += 16) {
        const int64_t r1 = r0 + 16 < n1 ? r0 + 16 : n1;
        a16_zeros(v, r0, (int)(r1 - r0), zbuf);
        int64_t t = 0;
        for (; t + 4 <= a->T; t += 4) a16_rows_nt(v, a, r0, r1, t, 4, t == 0, zbuf, y);
        if (t + 2 <= a->T) {
            a16_rows_nt(v, a, r0, r1, t, 2, t == 0, zbuf, y);
            t += 2;
        }
        if (t < a->T) a16_rows_nt(v, a, r0, r1, t, 1, t == 0, zbuf, y);
    }
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* x86 */
