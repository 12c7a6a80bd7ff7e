/* kernels_avx512_w4.c - AVX-512 VNNI int4 x int8 gemm (w4a8). Weights are
 * unsigned codes u = q + 8, so vpdpbusd(u, q_x) is used directly and
 * sum(q x) = sum(u x) - 8 * (group sum of q_x): kernels_ref.c bit for bit,
 * the float epilogue the reference's float operations in its order. */
#if defined(__x86_64__) || defined(__i386__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma"))), apply_to = function)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,fma")
#pragma GCC optimize("O3", "fp-contract=off")
#endif

#include "kernels_x86.h"
#include "dsq_mem.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

/* ---- w4 gemm ------------------------------------------------------------- */

/* Per 128-bit lane L: [sum_L(A0), sum_L(A1), sum_L(A2), sum_L(A3)]. */
AI __m512i lane_sums4(__m512i a0, __m512i a1, __m512i a2, __m512i a3)
{
    __m512i t01 = _mm512_add_epi32(_mm512_unpacklo_epi32(a0, a1), _mm512_unpackhi_epi32(a0, a1));
    __m512i t23 = _mm512_add_epi32(_mm512_unpacklo_epi32(a2, a3), _mm512_unpackhi_epi32(a2, a3));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23));
}

/* Two lane_sums4 results -> [A0-3 (L0+L1), A0-3 (L2+L3), A4-7 (L0+L1), A4-7 (L2+L3)]. */
AI __m512i pair_lanes(__m512i u, __m512i w)
{
    return _mm512_add_epi32(_mm512_shuffle_i32x4(u, w, _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i32x4(u, w, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* 16 int32 vectors -> one vector of their horizontal sums, in order
 * (integer adds: exact, the same sums as _mm512_reduce_add_epi32). */
AI __m512i reduce16_epi32(const __m512i A[16])
{
    __m512i w0 = pair_lanes(lane_sums4(A[0], A[1], A[2], A[3]), lane_sums4(A[4], A[5], A[6], A[7]));
    __m512i w1 = pair_lanes(lane_sums4(A[8], A[9], A[10], A[11]),
                            lane_sums4(A[12], A[13], A[14], A[15]));
    return pair_lanes(w0, w1);
}

/* 8 int32 vectors -> their 8 horizontal sums. */
AI __m256i reduce8_epi32(const __m512i A[8])
{
    __m512i w0 = pair_lanes(lane_sums4(A[0], A[1], A[2], A[3]), lane_sums4(A[4], A[5], A[6], A[7]));
    __m512i x = _mm512_add_epi32(w0, _mm512_shuffle_i32x4(w0, w0, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_castsi512_si256(_mm512_shuffle_i32x4(x, x, _MM_SHUFFLE(2, 0, 2, 0)));
}

/* R x TT tile of w4a8 outputs; per group exact int sums minus 8 * group sum
 * of x, then fsum = fma((float)acc, scale, fsum) per output, done lane-wise
 * for the 4x4 and 8x1 tiles (vector FMA rounds like fmaf), scalar for edges. */
AI void w4_block(const dsq_qview *v, const dsq_actbuf *a, int64_t n, int64_t t0, const int R,
                 const int TT, int npf, float *y)   /* npf: as w8_block */
{
    const int64_t ng = v->layout.ngroups, gs = v->layout.gsize, kpad = a->kpad, T = a->T;
    const int64_t rows = v->shape.rows;
    const size_t ws = v->layout.row_bytes;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const int VEC16 = R == 4 && TT == 4, VEC8 = R == 8 && TT == 1;
    const uint8_t *wr = v->w + (size_t)n * ws;
    float fsum[8][4];
    __m512 fs16 = _mm512_setzero_ps();
    __m256 fs8 = _mm256_setzero_ps();
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) fsum[r][t] = 0.0f;
    for (int64_t g = 0; g < ng; g++) {
        int64_t k0 = g * gs, k1 = g == ng - 1 ? kpad : k0 + gs;
        __m512i acc[8][4];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int t = 0; t < TT; t++) acc[r][t] = _mm512_setzero_si512();
        for (int64_t k = k0; k < k1; k += 64) {
            const int64_t boff = (k >> 7) * 64;
            const unsigned shift = (k & 64) ? 4u : 0u;
            __m512i c[8];
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
                c[r] = _mm512_and_si512(
                    _mm512_srl_epi16(_mm512_loadu_si512(wr + (size_t)r * ws + boff),
                                     _mm_cvtsi32_si128((int)shift)), m4);
            if (!shift)
                for (int r = 0; r < npf; r++)
                    _mm_prefetch((const char *)(wr + (size_t)(R + r) * ws + boff), _MM_HINT_T0);
#pragma GCC unroll 4
            for (int t = 0; t < TT; t++) {
                __m512i xv = _mm512_loadu_si512(a->q + (t0 + t) * kpad + k);
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) acc[r][t] = _mm512_dpbusd_epi32(acc[r][t], c[r], xv);
            }
        }
        const float *sg = v->scales + n * ng + g;
        const int32_t *gsp = a->gsum + g * T + t0;
        if (VEC16) {
            __m512i A[16];
            for (int r = 0; r < 4; r++)
                for (int t = 0; t < 4; t++) A[r * 4 + t] = acc[r][t];
            __m512i g16 = _mm512_slli_epi32(
                _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)gsp)), 3);
            __m512i iacc = _mm512_sub_epi32(reduce16_epi32(A), g16);
            __m512 sv = _mm512_permutexvar_ps(
                _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                _mm512_castps128_ps512(_mm_setr_ps(sg[0], sg[ng], sg[2 * ng], sg[3 * ng])));
            fs16 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc), sv, fs16);
        } else if (VEC8) {
            __m512i A[8];
            for (int r = 0; r < 8; r++) A[r] = acc[r][0];
            __m256i iacc = _mm256_sub_epi32(reduce8_epi32(A), _mm256_set1_epi32(8 * gsp[0]));
            __m256 sv = _mm256_setr_ps(sg[0], sg[ng], sg[2 * ng], sg[3 * ng], sg[4 * ng], sg[5 * ng],
                                       sg[6 * ng], sg[7 * ng]);
            fs8 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc), sv, fs8);
        } else {
            for (int r = 0; r < R; r++)
                for (int t = 0; t < TT; t++) {
                    uint32_t u = (uint32_t)_mm512_reduce_add_epi32(acc[r][t]) - 8u * (uint32_t)gsp[t];
                    fsum[r][t] = fmaf((float)(int32_t)u, sg[r * ng], fsum[r][t]);
                }
        }
    }
    if (VEC16) {
        __m512 sx = _mm512_broadcast_f32x4(_mm_loadu_ps(a->scale + t0));
        float o[16];
        _mm512_storeu_ps(o, _mm512_mul_ps(fs16, sx));
        for (int r = 0; r < 4; r++)
            for (int t = 0; t < 4; t++) y[(t0 + t) * rows + n + r] = o[r * 4 + t];
    } else if (VEC8) {
        _mm256_storeu_ps(y + t0 * rows + n, _mm256_mul_ps(fs8, _mm256_set1_ps(a->scale[t0])));
    } else {
        for (int r = 0; r < R; r++)
            for (int t = 0; t < TT; t++)
                y[(t0 + t) * rows + n + r] = fsum[r][t] * a->scale[t0 + t];
    }
}

/* Prefill for one group per row (the per-channel default): tiles of 4 rows
 * x 5 tokens. Each 64-byte load of a row gives the codes of 128 columns
 * (low nibbles: the first 64, high: the next 64), both used while in a
 * register: one load and three ALU ops per 40 dot products (the 4 x 4 tile
 * of w4_block: two loads and four ops per 32); 20 accumulators + 8 code
 * registers + x fit the 32 zmm. Columns go in chunks of W4_KC so that the
 * 5 tokens' codes of a chunk (10 KiB) stay in L1 while up to 64 rows pass
 * over them (without chunks every tile re-reads x from L2, which bounded
 * the tile at half the vpdpbusd rate). Partial int32 sums wait in pv
 * between chunks; they are exact, and the epilogue is w4_block's scalar
 * one, so y is bit for bit what the other tiles give. */
#define W4_KC 2048

AI void w4_pc45_chunk(const uint8_t *wr, size_t ws, const int8_t *x, int64_t kpad, int64_t k0,
                      int64_t k1, __m512i *pv, int first)
{
    enum { R = 4, TT = 5 };
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512i acc[R][TT];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 5
        for (int t = 0; t < TT; t++) acc[r][t] = first ? _mm512_setzero_si512() : pv[r * TT + t];
    for (int64_t k = k0; k < k1; k += 128) {
        __m512i raw[R], c[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            raw[r] = _mm512_loadu_si512(wr + (size_t)r * ws + (k >> 1));
            c[r] = _mm512_and_si512(raw[r], m4);
        }
#pragma GCC unroll 5
        for (int t = 0; t < TT; t++) {
            __m512i xv = _mm512_loadu_si512(x + t * kpad + k);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) acc[r][t] = _mm512_dpbusd_epi32(acc[r][t], c[r], xv);
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) c[r] = _mm512_and_si512(_mm512_srli_epi16(raw[r], 4), m4);
#pragma GCC unroll 5
        for (int t = 0; t < TT; t++) {
            __m512i xv = _mm512_loadu_si512(x + t * kpad + k + 64);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) acc[r][t] = _mm512_dpbusd_epi32(acc[r][t], c[r], xv);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 5
        for (int t = 0; t < TT; t++) pv[r * TT + t] = acc[r][t];
}

/* rows [n0, n1) (n1 - n0 a multiple of 4), tokens [0, T5) (a multiple of 5) */
static void w4_gemm_pc45(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1, int64_t T5,
                         float *y)
{
    enum { NB = 64 };
    const int64_t kpad = a->kpad, rows = v->shape.rows;
    const size_t ws = v->layout.row_bytes;
    _Alignas(64) __m512i pv[NB / 4 * 20];
    for (int64_t nb = n0; nb < n1; nb += NB) {
        const int64_t ne = nb + NB < n1 ? nb + NB : n1;
        for (int64_t t0 = 0; t0 < T5; t0 += 5) {
            const int8_t *x = a->q + t0 * kpad;
            for (int64_t kc = 0; kc < kpad; kc += W4_KC) {
                const int64_t ke = kc + W4_KC < kpad ? kc + W4_KC : kpad;
                for (int64_t n = nb; n < ne; n += 4)
                    w4_pc45_chunk(v->w + (size_t)n * ws, ws, x, kpad, kc, ke, pv + (n - nb) / 4 * 20, kc == 0);
            }
            for (int64_t n = nb; n < ne; n += 4)
                for (int r = 0; r < 4; r++)
                    for (int t = 0; t < 5; t++) {
                        uint32_t u = (uint32_t)_mm512_reduce_add_epi32(pv[(n - nb) / 4 * 20 + r * 5 + t]) -
                                     8u * (uint32_t)a->gsum[t0 + t];
                        float f = fmaf((float)(int32_t)u, v->scales[n + r], 0.0f);
                        y[(t0 + t) * rows + n + r] = f * a->scale[t0 + t];
                    }
        }
    }
}

/* Decode tile: 8 rows x TT tokens (TT 1..3), for groups of whole 128-column
 * blocks (gsize a multiple of 128; at T = 1 only groups under 512 columns,
 * the rest go to w4_dec_rows). Each 64-byte load
 * of a row gives both nibble halves (128 columns), used at once: one load,
 * one shift and two ands per 128 columns instead of w4_block's two loads,
 * two shifts and two ands. The weights are streamed once per step, so the
 * loop must keep memory busy: every row of the next tile (npf of them, up
 * to the end of the matrix, which may lie in the next pool item) is
 * prefetched at the same offset as it is read, one line per row per
 * iteration. Exact int sums; the epilogue is w4_block's VEC8 one per token
 * (lane-wise fma, as fmaf), so y is bit for bit the other tiles'. */
AI void w4_dec8(const dsq_qview *v, const dsq_actbuf *a, int64_t n, const int TT, int npf, float *y)
{
    enum { R = 8 };
    const int64_t ng = v->layout.ngroups, gs = v->layout.gsize, kpad = a->kpad, T = a->T;
    const int64_t rows = v->shape.rows;
    const size_t ws = v->layout.row_bytes;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const uint8_t *wr = v->w + (size_t)n * ws;
    const int8_t *x = a->q;
    __m256 fs[3];
#pragma GCC unroll 3
    for (int t = 0; t < TT; t++) fs[t] = _mm256_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        const int64_t k0 = g * gs, k1 = g == ng - 1 ? kpad : k0 + gs;
        __m512i acc[R][3];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
#pragma GCC unroll 3
            for (int t = 0; t < TT; t++) acc[r][t] = _mm512_setzero_si512();
        for (int64_t k = k0; k < k1; k += 128) {
            const size_t boff = (size_t)(k >> 1);
            __m512i lo[R], hi[R];
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                __m512i raw = _mm512_loadu_si512(wr + (size_t)r * ws + boff);
                lo[r] = _mm512_and_si512(raw, m4);
                hi[r] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
            }
            for (int r = 0; r < npf; r++)
                _mm_prefetch((const char *)(wr + (size_t)(R + r) * ws + boff), _MM_HINT_T0);
#pragma GCC unroll 3
            for (int t = 0; t < TT; t++) {
                const __m512i xl = _mm512_loadu_si512(x + t * kpad + k);
                const __m512i xh = _mm512_loadu_si512(x + t * kpad + k + 64);
#pragma GCC unroll 8
                for (int r = 0; r < R; r++)
                    acc[r][t] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[r][t], lo[r], xl), hi[r], xh);
            }
        }
        const float *sg = v->scales + n * ng + g;
        const __m256 sv = _mm256_setr_ps(sg[0], sg[ng], sg[2 * ng], sg[3 * ng], sg[4 * ng], sg[5 * ng],
                                         sg[6 * ng], sg[7 * ng]);
#pragma GCC unroll 3
        for (int t = 0; t < TT; t++) {
            __m512i A[8];
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) A[r] = acc[r][t];
            __m256i iacc = _mm256_sub_epi32(reduce8_epi32(A), _mm256_set1_epi32(8 * a->gsum[g * T + t]));
            fs[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc), sv, fs[t]);
        }
    }
#pragma GCC unroll 3
    for (int t = 0; t < TT; t++)
        _mm256_storeu_ps(y + t * rows + n, _mm256_mul_ps(fs[t], _mm256_set1_ps(a->scale[t])));
}

/* Decode, T = 1, for groups of whole 128-column blocks: rows [n0, n1) one
 * after another, as w8_dec_rows, so a pool item's rows are one sequential
 * stream. w4_dec8's 8-row tiles read 8 streams one row apart; on rows of
 * 1 KB or less (V3's expert down_proj, q_b_proj) that pattern ran at
 * 10 GB/s against 17 on 3.5 KB rows (bench_quant T=1, one thread). Eight
 * accumulators over 256-byte steps; exact int sums, then per group the
 * epilogue of w4_dec8 one lane at a time (fmaf, as the vector fma), so y is
 * bit for bit the other tiles'. */
static void w4_dec_rows(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1, float *y)
{
    const int64_t ng = v->layout.ngroups, gs = v->layout.gsize, kpad = a->kpad;
    const size_t ws = v->layout.row_bytes;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const int8_t *x = a->q;
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *wr = v->w + (size_t)n * ws;
        float fs = 0.0f;
        for (int64_t g = 0; g < ng; g++) {
            const int64_t k0 = g * gs, k1 = g == ng - 1 ? kpad : k0 + gs;
            __m512i acc[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) acc[i] = _mm512_setzero_si512();
            int64_t k = k0;
            for (; k + 512 <= k1; k += 512) {
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++) {
                    const __m512i raw = _mm512_loadu_si512(wr + (size_t)((k >> 1) + 64 * i));
                    const __m512i lo = _mm512_and_si512(raw, m4);
                    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
                    acc[2 * i] = _mm512_dpbusd_epi32(acc[2 * i], lo, _mm512_loadu_si512(x + k + 128 * i));
                    acc[2 * i + 1] =
                        _mm512_dpbusd_epi32(acc[2 * i + 1], hi, _mm512_loadu_si512(x + k + 128 * i + 64));
                }
            }
            for (int i = 0; k < k1; k += 128, i = (i + 2) & 7) {
                const __m512i raw = _mm512_loadu_si512(wr + (size_t)(k >> 1));
                acc[i] = _mm512_dpbusd_epi32(acc[i], _mm512_and_si512(raw, m4), _mm512_loadu_si512(x + k));
                acc[i + 1] = _mm512_dpbusd_epi32(acc[i + 1], _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4),
                                                 _mm512_loadu_si512(x + k + 64));
            }
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) acc[i] = _mm512_add_epi32(acc[i], acc[i + 4]);
            const __m512i sum =
                _mm512_add_epi32(_mm512_add_epi32(acc[0], acc[1]), _mm512_add_epi32(acc[2], acc[3]));
            const uint32_t u = (uint32_t)_mm512_reduce_add_epi32(sum) - 8u * (uint32_t)a->gsum[g];
            fs = fmaf((float)(int32_t)u, v->scales[n * ng + g], fs);
        }
        y[n] = fs * a->scale[0];
    }
}

void dsq_avx512_gemm_w4(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1, float *y)
{
    const int64_t T = a->T;
    int64_t n = n0;
    if (T >= 4) {
        const int64_t T5 = v->layout.ngroups == 1 ? T / 5 * 5 : 0, n4 = n0 + (n1 - n0) / 4 * 4;
        if (T5 > 0) w4_gemm_pc45(v, a, n0, n4, T5, y);
        for (; n + 4 <= n1; n += 4) {
            int64_t t = T5;
            for (; t + 4 <= T; t += 4) w4_block(v, a, n, t, 4, 4, 0, y);
            for (; t < T; t++) w4_block(v, a, n, t, 4, 1, 0, y);
        }
        for (; n < n1; n++) {
            int64_t t = 0;
            for (; t + 4 <= T; t += 4) w4_block(v, a, n, t, 1, 4, 0, y);
            for (; t < T; t++) w4_block(v, a, n, t, 1, 1, 0, y);
        }
    } else if (v->layout.ngroups == 1 || v->layout.gsize % 128 == 0) {
        /* prefetch reaches past n1 (the next pool item's rows) but not past
         * the matrix */
        if (T == 1 && (v->layout.ngroups == 1 || v->layout.gsize >= 512)) {
            /* (per-group reductions make it slower than w4_dec8 on groups
             * of 128: 0.89 against 0.48 ms on 2048 x 7168) */
            w4_dec_rows(v, a, n0, n1, y);
            return;
        }
        const int64_t rows = v->shape.rows;
        for (; n + 8 <= n1; n += 8) {
            const int npf = rows - (n + 8) < 8 ? (int)(rows - (n + 8)) : 8;
            if (T == 1) w4_dec8(v, a, n, 1, npf, y);
            else if (T == 2) w4_dec8(v, a, n, 2, npf, y);
            else w4_dec8(v, a, n, 3, npf, y);
        }
        for (; n < n1; n++)
            for (int64_t t = 0; t < T; t++) w4_block(v, a, n, t, 1, 1, 0, y);
    } else {
        for (; n + 8 <= n1; n += 8) {
            const int npf = T > 1 ? 0 : n1 - (n + 8) < 8 ? (int)(n1 - (n + 8)) : 8;
            for (int64_t t = 0; t < T; t++) w4_block(v, a, n, t, 8, 1, npf, y);
        }
        for (; n < n1; n++)
            for (int64_t t = 0; t < T; t++) w4_block(v, a, n, t, 1, 1, 0, y);
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* x86 */
