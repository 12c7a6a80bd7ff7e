/* kernels_avx512_w8.c - AVX-512 VNNI int8 x int8 gemm (w8a8, w8a8-dynamic).
 * vpdpbusd multiplies UNSIGNED bytes by SIGNED bytes. Activations are made
 * unsigned, xu = q_x + 128 (q_x ^ 0x80), so the lanes accumulate
 * sum(xu * q_w) = sum(q_x * q_w) + 128 * rowsum[n]; the stored per-row sum
 * removes the offset. int32 lanes wrap, but the true result fits, so the
 * wrapped arithmetic gives it exactly: kernels_ref.c bit for bit, the float
 * epilogue the reference's float operations in its order. */
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

/* ---- w8 gemm ------------------------------------------------------------- */

/* The reference's float epilogue (kernels_ref.c ref_gemm_w8), same order.
 * acc is sum(xu * w) with xu = x + 128 (wrapping). */
AI void w8_store(const dsq_qview *v, const dsq_actbuf *a, int64_t n, int64_t t, uint32_t acc,
                 float *y)
{
    float out;
    uint32_t rs = (uint32_t)v->rowsum[n];
    if (v->scheme->act == DSQ_ACT_INT8_STATIC) {
        uint32_t u = acc - (uint32_t)(128 + v->act_offset) * rs;
        out = (float)(int32_t)u * (v->act_scale * v->scales[n]);
    } else {
        uint32_t u = acc - 128u * rs;
        out = ((float)(int32_t)u * v->scales[n]) * a->scale[t];
    }
    y[t * v->shape.rows + n] = out;
}

/* npf: rows after this tile whose same columns are prefetched as it runs
 * (decode: every row is streamed once, and a tile of short int rows would
 * otherwise start on streams the hardware prefetcher has not yet learnt). */
AI void w8_block(const dsq_qview *v, const dsq_actbuf *a, int64_t n, int64_t t0, const int R,
                 const int TT, int npf, float *y)
{
    const size_t ws = v->layout.row_bytes;
    const int64_t klen = (int64_t)ws, kpad = a->kpad;
    const int8_t *w = (const int8_t *)(v->w + (size_t)n * ws);
    const int8_t *x = a->q + t0 * kpad;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512i acc[8][4];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++) acc[r][t] = _mm512_setzero_si512();
    for (int64_t k = 0; k < klen; k += 64) {
        __m512i wv[8];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) wv[r] = _mm512_loadu_si512(w + (size_t)r * ws + k);
        for (int r = 0; r < npf; r++) _mm_prefetch((const char *)(w + (size_t)(R + r) * ws + k), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++) {
            __m512i xu = _mm512_xor_si512(_mm512_loadu_si512(x + t * kpad + k), flip);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) acc[r][t] = _mm512_dpbusd_epi32(acc[r][t], xu, wv[r]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++)
            w8_store(v, a, n + r, t0 + t, (uint32_t)_mm512_reduce_add_epi32(acc[r][t]), y);
}

/* Prefill tiles of 4 rows x 6 tokens (24 accumulators + 4 weight vectors +
 * x), over column chunks of W8_KC, for the same reason as w4_gemm_pc45:
 * the 6 tokens' codes of a chunk (12 KiB) are flipped to unsigned once
 * into xu and then stay in L1 while up to 64 rows pass over them, instead
 * of every 4 x 4 tile flipping and re-reading x from L2. Partial sums wait
 * in pv between chunks (wrapping int32, as one pass would wrap), and the
 * epilogue is w8_store: bits unchanged. */
#define W8_KC 2048

AI void w8_46_chunk(const int8_t *w, size_t ws, const uint8_t *xu, int64_t k0, int64_t k1,
                    __m512i *pv, int first)
{
    enum { R = 4, TT = 6 };
    __m512i acc[R][TT];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 6
        for (int t = 0; t < TT; t++) acc[r][t] = first ? _mm512_setzero_si512() : pv[r * TT + t];
    for (int64_t k = k0; k < k1; k += 64) {
        __m512i wv[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) wv[r] = _mm512_loadu_si512(w + (size_t)r * ws + k);
#pragma GCC unroll 6
        for (int t = 0; t < TT; t++) {
            __m512i xv = _mm512_load_si512(xu + t * W8_KC + (k - k0));
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) acc[r][t] = _mm512_dpbusd_epi32(acc[r][t], xv, wv[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 6
        for (int t = 0; t < TT; t++) pv[r * TT + t] = acc[r][t];
}

/* rows [n0, n1) (n1 - n0 a multiple of 4), tokens [0, T6) (a multiple of 6) */
static void w8_gemm_46(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1, int64_t T6,
                       float *y)
{
    enum { NB = 64 };
    const int64_t kpad = a->kpad, klen = (int64_t)v->layout.row_bytes;   /* klen <= kpad */
    const size_t ws = v->layout.row_bytes;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    _Alignas(64) __m512i pv[NB / 4 * 24];
    _Alignas(64) uint8_t xu[6 * W8_KC];
    for (int64_t nb = n0; nb < n1; nb += NB) {
        const int64_t ne = nb + NB < n1 ? nb + NB : n1;
        for (int64_t t0 = 0; t0 < T6; t0 += 6) {
            for (int64_t kc = 0; kc < klen; kc += W8_KC) {
                const int64_t ke = kc + W8_KC < klen ? kc + W8_KC : klen;
                for (int t = 0; t < 6; t++)
                    for (int64_t k = kc; k < ke; k += 64)
                        _mm512_store_si512(xu + t * W8_KC + (k - kc),
                                           _mm512_xor_si512(_mm512_loadu_si512(a->q + (t0 + t) * kpad + k), flip));
                for (int64_t n = nb; n < ne; n += 4)
                    w8_46_chunk((const int8_t *)(v->w + (size_t)n * ws), ws, xu, kc, ke, pv + (n - nb) / 4 * 24,
                                kc == 0);
            }
            for (int64_t n = nb; n < ne; n += 4)
                for (int r = 0; r < 4; r++)
                    for (int t = 0; t < 6; t++)
                        w8_store(v, a, n + r, t0 + t,
                                 (uint32_t)_mm512_reduce_add_epi32(pv[(n - nb) / 4 * 24 + r * 6 + t]), y);
        }
    }
}

/* Decode, T = 1: rows [n0, n1) one after another. The rows of a matrix lie
 * end to end, so a pool item's rows are one sequential stream, which the
 * hardware prefetcher follows on its own; the 8-row tiles (w8_block) read 8
 * streams 7 KB apart and prefetch 8 more, and were 4-8% slower per token
 * (e16 w8a8-dynamic, one thread; software prefetch in this stream, 512 bytes
 * ahead, was slower still). Eight accumulators over 512-byte steps. Exact
 * wrapping int sums, so the order changes no bit; the epilogue is w8_store. */
static void w8_dec_rows(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1, float *y)
{
    const size_t ws = v->layout.row_bytes;
    const int64_t klen = (int64_t)ws;   /* a multiple of 64, <= kpad */
    const int8_t *x = a->q;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    for (int64_t n = n0; n < n1; n++) {
        const int8_t *w = (const int8_t *)(v->w + (size_t)n * ws);
        __m512i acc[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) acc[i] = _mm512_setzero_si512();
        int64_t k = 0;
        for (; k + 512 <= klen; k += 512) {
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                __m512i xu = _mm512_xor_si512(_mm512_loadu_si512(x + k + 64 * i), flip);
                acc[i] = _mm512_dpbusd_epi32(acc[i], xu, _mm512_loadu_si512(w + k + 64 * i));
            }
        }
        for (int i = 0; k < klen; k += 64, i = (i + 1) & 7) {
            __m512i xu = _mm512_xor_si512(_mm512_loadu_si512(x + k), flip);
            acc[i] = _mm512_dpbusd_epi32(acc[i], xu, _mm512_loadu_si512(w + k));
        }
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) acc[i] = _mm512_add_epi32(acc[i], acc[i + 4]);
        __m512i sum = _mm512_add_epi32(_mm512_add_epi32(acc[0], acc[1]), _mm512_add_epi32(acc[2], acc[3]));
        w8_store(v, a, n, 0, (uint32_t)_mm512_reduce_add_epi32(sum), y);
    }
}

void dsq_avx512_gemm_w8(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1, float *y)
{
    const int64_t T = a->T;
    int64_t n = n0;
    if (T >= 4) {
        const int64_t T6 = T / 6 * 6, n4 = n0 + (n1 - n0) / 4 * 4;
        if (T6 > 0) w8_gemm_46(v, a, n0, n4, T6, y);
        for (; n + 4 <= n1; n += 4) {
            int64_t t = T6;
            for (; t + 4 <= T; t += 4) w8_block(v, a, n, t, 4, 4, 0, y);
            for (; t < T; t++) w8_block(v, a, n, t, 4, 1, 0, y);
        }
        for (; n < n1; n++) {
            int64_t t = 0;
            for (; t + 4 <= T; t += 4) w8_block(v, a, n, t, 1, 4, 0, y);
            for (; t < T; t++) w8_block(v, a, n, t, 1, 1, 0, y);
        }
    } else if (T == 1) {
        w8_dec_rows(v, a, n0, n1, y);
    } else {
        /* T 2..3: each token's 8 rows again from L1 / L2, no prefetch */
        for (; n + 8 <= n1; n += 8)
            for (int64_t t = 0; t < T; t++) w8_block(v, a, n, t, 8, 1, 0, y);
        for (; n < n1; n++)
            for (int64_t t = 0; t < T; t++) w8_block(v, a, n, t, 1, 1, 0, y);
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* x86 */
