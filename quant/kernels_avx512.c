/* kernels_avx512.c - AVX-512 (F, BW, VL) + VNNI kernels (x86-64, chosen at
 * run time; the file builds without -march flags via a target pragma).
 *
 * Integer kernels reproduce kernels_ref.c bit for bit:
 *  - w8: vpdpbusd multiplies UNSIGNED bytes by SIGNED bytes. Activations are
 *    made unsigned, xu = q_x + 128 (q_x ^ 0x80), so the lanes accumulate
 *    sum(xu * q_w) = sum(q_x * q_w) + 128 * rowsum[n]; the stored per-row
 *    sum removes the offset. int32 lanes wrap, but the true result fits, so
 *    the wrapped arithmetic gives it exactly.
 *  - w4: weights are unsigned codes u = q + 8, so vpdpbusd(u, q_x) is used
 *    directly and sum(q x) = sum(u x) - 8 * (group sum of q_x).
 * The float epilogues are the reference's float operations in its order.
 */
#if defined(__x86_64__) || defined(__i386__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma"))), apply_to = function)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,fma")
#pragma GCC optimize("O3", "fp-contract=off")
#endif

#include "kernels.h"
#include "dsq_mem.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))


/* ---- quantize-side primitives -------------------------------------------- */

static uint32_t z_absmax_bits(const float *x, int64_t n)
{
    const __m512i mask = _mm512_set1_epi32(0x7fffffff);
    __m512i m0 = _mm512_setzero_si512(), m1 = m0, m2 = m0, m3 = m0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_loadu_si512(x + i), mask));
        m1 = _mm512_max_epu32(m1, _mm512_and_si512(_mm512_loadu_si512(x + i + 16), mask));
        m2 = _mm512_max_epu32(m2, _mm512_and_si512(_mm512_loadu_si512(x + i + 32), mask));
        m3 = _mm512_max_epu32(m3, _mm512_and_si512(_mm512_loadu_si512(x + i + 48), mask));
    }
    for (; i + 16 <= n; i += 16)
        m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_loadu_si512(x + i), mask));
    m0 = _mm512_max_epu32(_mm512_max_epu32(m0, m1), _mm512_max_epu32(m2, m3));
    uint32_t m = _mm512_reduce_max_epu32(m0);
    for (; i < n; i++) {
        uint32_t b = dsq_f32_bits(x[i]) & 0x7fffffffu;
        if (b > m) m = b;
    }
    return m;
}

static void z_minmax(const float *x, int64_t n, float *mn, float *mx)
{
    __m512 lo = _mm512_set1_ps(x[0]), hi = lo, lo1 = lo, hi1 = lo;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
        lo = _mm512_min_ps(lo, a); hi = _mm512_max_ps(hi, a);
        lo1 = _mm512_min_ps(lo1, b); hi1 = _mm512_max_ps(hi1, b);
    }
    lo = _mm512_min_ps(lo, lo1);
    hi = _mm512_max_ps(hi, hi1);
    float l[16], h[16];
    _mm512_storeu_ps(l, lo);
    _mm512_storeu_ps(h, hi);
    float a = l[0], b = h[0];
    for (int j = 1; j < 16; j++) { a = l[j] < a ? l[j] : a; b = h[j] > b ? h[j] : b; }
    for (; i < n; i++) { a = x[i] < a ? x[i] : a; b = x[i] > b ? x[i] : b; }
    *mn = a;
    *mx = b;
}

static void z_quant_i8(const float *x, int64_t n, float scale, int32_t add, int32_t lo, int32_t hi,
                       int8_t *q)
{
    const __m512 vs = _mm512_set1_ps(scale);
    const __m512 vlo = _mm512_set1_ps((float)(lo - add)), vhi = _mm512_set1_ps((float)(hi - add));
    const __m512i vadd = _mm512_set1_epi32(add);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 r = _mm512_roundscale_ps(_mm512_div_ps(_mm512_loadu_ps(x + i), vs),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r = _mm512_min_ps(_mm512_max_ps(r, vlo), vhi);   /* max(NaN, lo) = lo, as fmaxf */
        __m512i v = _mm512_add_epi32(_mm512_cvttps_epi32(r), vadd);
        _mm_storeu_si128((__m128i *)(q + i), _mm512_cvtepi32_epi8(v));
    }
    const float flo = (float)(lo - add), fhi = (float)(hi - add);
    for (; i < n; i++) {
        float r = rintf(x[i] / scale);
        r = fminf(fmaxf(r, flo), fhi);
        q[i] = (int8_t)((int32_t)r + add);
    }
}

/* lanes16 of kernels_ref.c: 8 lanes l + (l + 8), then + 4, + 2, + 1 */
AI double z_tree_pd(__m512d s8)
{
    const __m256d s4 = _mm256_add_pd(_mm512_castpd512_pd256(s8), _mm512_extractf64x4_pd(s8, 1));
    const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
    return _mm_cvtsd_f64(s2) + _mm_cvtsd_f64(_mm_unpackhi_pd(s2, s2));
}

/* lanes 0-7 (H 0) or 8-15 (H 1) of a, widened to double */
AI __m512d z_half_pd(__m512 a, const int H)
{
    return _mm512_cvtps_pd(H ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1))
                             : _mm512_castps512_ps256(a));
}

AI double z_tree_ps(__m512 a)
{
    return z_tree_pd(_mm512_add_pd(z_half_pd(a, 0), z_half_pd(a, 1)));
}

/* One 16-element step of dsq_qstats_scalar (ERR: r from x / scale, plus
 * the error in double, two halves of 8) or dsq_qtrial_scalar (r from
 * x * inv): the reference's operations per lane (its fmaf as an FMA, every
 * other mul and add apart: fp-contract is off). TAIL: the last, partial
 * vector, masked so the lanes past n keep their partials as the reference
 * does; whole vectors run unmasked (masked adds in every step made both
 * passes ~20% slower: each waits on the mask and the old accumulator). */
AI void qpass_step(const float *x, const float *c, __mmask16 m, const int TAIL, const int ERR, __m512 vsi,
                   __m512 vlo, __m512 vhi, __m512 acc[3], __m512d e[2])
{
    const __m512 xv = TAIL ? _mm512_maskz_loadu_ps(m, x) : _mm512_loadu_ps(x);
    const __m512 cv = TAIL ? _mm512_maskz_loadu_ps(m, c) : _mm512_loadu_ps(c);
    __m512 r = _mm512_roundscale_ps(ERR ? _mm512_div_ps(xv, vsi) : _mm512_mul_ps(xv, vsi),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_min_ps(_mm512_max_ps(r, vlo), vhi);
    const __m512 cr = _mm512_mul_ps(cv, r);
    if (TAIL) {
        acc[0] = _mm512_mask_add_ps(acc[0], m, acc[0], cr);
        acc[1] = _mm512_mask3_fmadd_ps(cr, r, acc[1], m);
        acc[2] = _mm512_mask3_fmadd_ps(cr, xv, acc[2], m);
    } else {
        acc[0] = _mm512_add_ps(acc[0], cr);
        acc[1] = _mm512_fmadd_ps(cr, r, acc[1]);
        acc[2] = _mm512_fmadd_ps(cr, xv, acc[2]);
    }
    if (ERR) {
        const __m512 d = _mm512_sub_ps(xv, _mm512_mul_ps(r, vsi));
        const __m512d dl = z_half_pd(d, 0), dh = z_half_pd(d, 1), cl = z_half_pd(cv, 0), ch = z_half_pd(cv, 1);
        const __m512d tl = _mm512_mul_pd(_mm512_mul_pd(cl, dl), dl), th = _mm512_mul_pd(_mm512_mul_pd(ch, dh), dh);
        e[0] = TAIL ? _mm512_mask_add_pd(e[0], (__mmask8)m, e[0], tl) : _mm512_add_pd(e[0], tl);
        e[1] = TAIL ? _mm512_mask_add_pd(e[1], (__mmask8)(m >> 8), e[1], th) : _mm512_add_pd(e[1], th);
    }
}

/* qstats: whole vectors, then the masked tail */
static void z_qstats(const float *x, const float *c, int64_t n, float scale, float lo, float hi,
                     double out[4])
{
    const __m512 vsi = _mm512_set1_ps(scale), vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    __m512 acc[3] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps() };
    __m512d e[2] = { _mm512_setzero_pd(), _mm512_setzero_pd() };
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) qpass_step(x + i, c + i, 0xffff, 0, 1, vsi, vlo, vhi, acc, e);
    if (i < n)
        qpass_step(x + i, c + i, (__mmask16)((1u << (n - i)) - 1u), 1, 1, vsi, vlo, vhi, acc, e);
    for (int k = 0; k < 3; k++) out[k] = z_tree_ps(acc[k]);
    out[3] = z_tree_pd(_mm512_add_pd(e[0], e[1]));
}

/* qtrials (and qtrial, M = 1): M trials (a constant after inlining) per
 * sweep, each with qpass_step's operations and lanes for its own inverse
 * scale and clamp, so each trial's sums have the reference qtrial's bits. */
AI void qtrials_pass(const float *x, const float *c, int64_t n, const int M, const float *inv, const float *lo,
                     const float *hi, double (*out)[3])
{
    __m512 vsi[DSQ_QTRIALS_MAX], vlo[DSQ_QTRIALS_MAX], vhi[DSQ_QTRIALS_MAX], acc[DSQ_QTRIALS_MAX][3];
    __m512d e[2] = { _mm512_setzero_pd(), _mm512_setzero_pd() };   /* qpass_step's error sums: unused without ERR */
#pragma GCC unroll 4
    for (int i = 0; i < M; i++) {
        vsi[i] = _mm512_set1_ps(inv[i]);
        vlo[i] = _mm512_set1_ps(lo[i]);
        vhi[i] = _mm512_set1_ps(hi[i]);
        acc[i][0] = acc[i][1] = acc[i][2] = _mm512_setzero_ps();
    }
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
#pragma GCC unroll 4
        for (int i = 0; i < M; i++) qpass_step(x + j, c + j, 0xffff, 0, 0, vsi[i], vlo[i], vhi[i], acc[i], e);
    if (j < n) {
        const __mmask16 m = (__mmask16)((1u << (n - j)) - 1u);
#pragma GCC unroll 4
        for (int i = 0; i < M; i++) qpass_step(x + j, c + j, m, 1, 0, vsi[i], vlo[i], vhi[i], acc[i], e);
    }
    for (int i = 0; i < M; i++)
        for (int k = 0; k < 3; k++) out[i][k] = z_tree_ps(acc[i][k]);
}

static void z_qtrial(const float *x, const float *c, int64_t n, float inv, float lo, float hi, double out[3])
{
    qtrials_pass(x, c, n, 1, &inv, &lo, &hi, (double (*)[3])out);
}

static void z_qtrials(const float *x, const float *c, int64_t n, int m, const float *inv, const float *lo,
                      const float *hi, double (*out)[3])
{
    switch (m) {
    case 1: qtrials_pass(x, c, n, 1, inv, lo, hi, out); break;
    case 2: qtrials_pass(x, c, n, 2, inv, lo, hi, out); break;
    case 3: qtrials_pass(x, c, n, 3, inv, lo, hi, out); break;
    default: qtrials_pass(x, c, n, 4, inv, lo, hi, out); break;
    }
}

static int32_t z_sum_i8(const int8_t *q, int64_t n)
{
    __m512i acc = _mm512_setzero_si512();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        acc = _mm512_add_epi32(acc, _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + i))));
    int32_t s = _mm512_reduce_add_epi32(acc);
    for (; i < n; i++) s += q[i];
    return s;
}

/* dsq_f32_to_bf16 of 16 floats (as bits), result in the low half of each
 * 32-bit lane. Integer rounding, not vcvtneps2bf16: that one flushes
 * subnormals, the reference does not. */
AI __m512i bf16_rne(__m512i u)
{
    const __m512i absm = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i r7 = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1),
                  qnan = _mm512_set1_epi32(0x40);
    __mmask16 isnan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, absm), inf);
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(r7, _mm512_and_si512(_mm512_srli_epi32(u, 16), one)));
    r = _mm512_srli_epi32(r, 16);
    __m512i nanv = _mm512_or_si512(_mm512_srli_epi32(u, 16), qnan);
    return _mm512_mask_blend_epi32(isnan, r, nanv);
}

static void z_f32_to_bf16(const float *x, int64_t n, uint16_t *out)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(out + i), _mm512_cvtepi32_epi16(bf16_rne(_mm512_loadu_si512(x + i))));
    for (; i < n; i++) out[i] = dsq_f32_to_bf16(x[i]);
}

/* dsq_split_bf16_scalar, 16 at a time (same operations). */
static void z_split_bf16(const float *x, int64_t n, uint16_t *hi, uint16_t *lo)
{
    const __m512i absm = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 xv = _mm512_loadu_ps(x + i);
        __m512i h = bf16_rne(_mm512_castps_si512(xv));
        __m512i hb = _mm512_slli_epi32(h, 16);
        __mmask16 fin = _mm512_cmplt_epi32_mask(_mm512_and_si512(hb, absm), inf);
        __m512 r = _mm512_sub_ps(xv, _mm512_castsi512_ps(hb));
        __m512i l = _mm512_maskz_mov_epi32(fin, bf16_rne(_mm512_castps_si512(r)));
        _mm256_storeu_si256((__m256i *)(hi + i), _mm512_cvtepi32_epi16(h));
        _mm256_storeu_si256((__m256i *)(lo + i), _mm512_cvtepi32_epi16(l));
    }
    dsq_split_bf16_scalar(x + i, n - i, hi + i, lo + i);
}

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

static void z_gemm_w8(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1, float *y)
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

static void z_gemm_w4(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1, float *y)
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

/* ---- float schemes ------------------------------------------------------- */

/* 64 dequantized awq weights of one row from column k (multiple of 64, fully
 * inside the row) as 4 vectors; exact (q - z) * s as the reference. */
AI void awq_deq64(const uint8_t *row, int64_t k, __m512i zv, __m512 sv, __m512 out[4])
{
    const uint8_t *p = row + (k >> 7) * 64;
    const unsigned shift = (k & 64) ? 4u : 0u;
    __m512i c = _mm512_and_si512(_mm512_srl_epi16(_mm512_loadu_si512(p), _mm_cvtsi32_si128((int)shift)),
                                 _mm512_set1_epi8(0x0f));
    c = _mm512_sub_epi8(c, zv);
    out[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_castsi512_si128(c))), sv);
    out[1] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(c, 1))), sv);
    out[2] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(c, 2))), sv);
    out[3] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(c, 3))), sv);
}

AI float deq_scalar(const dsq_qview *v, const uint8_t *row, int64_t n, int64_t k)
{
    switch (v->scheme->id) {
    case DSQ_SCHEME_F32: { float f; memcpy(&f, row + 4 * k, 4); return f; }
    case DSQ_SCHEME_BF16: return dsq_bf16_to_f32(dsq_load_u16le(row + 2 * k));
    case DSQ_SCHEME_W8A8_DYNAMIC:
    case DSQ_SCHEME_W8A8: return (float)(int8_t)row[k] * v->scales[n];
    default: {
        size_t i = (size_t)n * (size_t)v->layout.ngroups + (size_t)(k / v->layout.gsize);
        int z = v->zeros ? (int)v->zeros[i] : 8;
        return (float)(dsq_i4_get(row, k) - z) * v->scales[i];
    }
    }
}

/* 64 weights of a f32/bf16 row from column k. */
AI void flt_load64(const dsq_qview *v, const uint8_t *row, int64_t k, __m512 out[4])
{
    if (v->scheme->id == DSQ_SCHEME_F32) {
        const float *f = (const float *)row + k;
        for (int i = 0; i < 4; i++) out[i] = _mm512_loadu_ps(f + 16 * i);
    } else {
        const uint16_t *h = (const uint16_t *)row + k;
        for (int i = 0; i < 4; i++)
            out[i] = _mm512_castsi512_ps(_mm512_slli_epi32(
                _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(h + 16 * i))), 16));
    }
}

enum { K_F32, K_BF16, K_AWQ, K_I8 };

/* 16 codes (q - z) of one awq row from 16 packed block bytes (HI: high
 * nibbles) as floats: exact small integers. */
AI __m512 awq_qz16(const uint8_t *p, const int HI, __m512i zv)
{
    __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    c = HI ? _mm512_srli_epi32(c, 4) : _mm512_and_si512(c, _mm512_set1_epi32(0x0f));
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(c, zv));
}

AI __m512 flt_load16(const int KIND, const uint8_t *row, int64_t k)
{
    if (KIND == K_F32) return _mm512_loadu_ps((const float *)row + k);
    if (KIND == K_I8)   /* int8 codes: exact small integers; the row scale comes last */
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(row + k))));
    return _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + k))), 16));
}

/* R rows (1 or 4) against NT tokens (1 or 2), constants after inlining; see
 * kernels_avx2.c gemv_tile (same structure, 16-wide). */
AI void gemv_tile(const dsq_qview *v, int64_t n, const int R, const float *x, const int NT,
                  const int KIND, float *y)
{
    const int A = NT == 1 ? 2 : 1;
    const int64_t cols = v->shape.cols, rows = v->shape.rows;
    const uint8_t *rp[4];
    __m512 acc[4][2][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        rp[r] = v->w + (size_t)(n + r) * v->layout.row_bytes;
#pragma GCC unroll 2
        for (int t = 0; t < NT; t++)
#pragma GCC unroll 2
            for (int a = 0; a < A; a++) acc[r][t][a] = _mm512_setzero_ps();
    }
    int64_t k = 0;
    if (KIND == K_AWQ) {
        const int64_t ng = v->layout.ngroups, gs = v->layout.gsize;
        for (int64_t g = 0; g < ng; g++) {
            int64_t k0 = g * gs, k1 = k0 + gs < cols ? k0 + gs : cols;
            if (k0 != k || k + 64 > k1) break;   /* scalar tail from k on */
            __m512i zv[4];
            __m512 ga[4][2][2];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                zv[r] = _mm512_set1_epi32(v->zeros ? v->zeros[(n + r) * ng + g] : 8);   /* w4a8: u - 8 */
#pragma GCC unroll 2
                for (int t = 0; t < NT; t++)
#pragma GCC unroll 2
                    for (int a = 0; a < A; a++) ga[r][t][a] = _mm512_setzero_ps();
            }
            /* whole 128-column blocks inside the group: one 16-byte load gives
             * 16 low-nibble and 16 high-nibble codes */
            for (; (k & 127) == 0 && k + 128 <= k1; k += 128) {
                const int64_t boff = (k >> 7) * 64;
                const __m512i m4d = _mm512_set1_epi32(0x0f);
#pragma GCC unroll 4
                for (int j = 0; j < 64; j += 16) {
                    __m512 xv[2][2];
#pragma GCC unroll 2
                    for (int t = 0; t < NT; t++) {
                        xv[t][0] = _mm512_loadu_ps(x + t * cols + k + j);
                        xv[t][1] = _mm512_loadu_ps(x + t * cols + k + 64 + j);
                    }
#pragma GCC unroll 4
                    for (int r = 0; r < R; r++) {
                        __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(rp[r] + boff + j)));
                        __m512 w[2];
                        w[0] = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(d, m4d), zv[r]));
                        w[1] = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(d, 4), zv[r]));
#pragma GCC unroll 2
                        for (int t = 0; t < NT; t++)
#pragma GCC unroll 2
                            for (int i = 0; i < 2; i++)
                                ga[r][t][i % A] = _mm512_fmadd_ps(w[i], xv[t][i], ga[r][t][i % A]);
                    }
                }
            }
            for (; k + 64 <= k1; k += 64) {
                const int64_t boff = (k >> 7) * 64;
#define AWQ_RUN(HI)                                                                        \
    for (int i = 0; i < 4; i++) {                                                          \
        __m512 xv[2];                                                                      \
        for (int t = 0; t < NT; t++) xv[t] = _mm512_loadu_ps(x + t * cols + k + 16 * i);  \
        for (int r = 0; r < R; r++) {                                                      \
            __m512 w = awq_qz16(rp[r] + boff + 16 * i, HI, zv[r]);                         \
            for (int t = 0; t < NT; t++)                                                   \
                ga[r][t][i % A] = _mm512_fmadd_ps(w, xv[t], ga[r][t][i % A]);              \
        }                                                                                  \
    }
                if (k & 64) {
#pragma GCC unroll 4
                    AWQ_RUN(1)
                } else {
#pragma GCC unroll 4
                    AWQ_RUN(0)
                }
#undef AWQ_RUN
            }
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const __m512 sv = _mm512_set1_ps(v->scales[(n + r) * ng + g]);
#pragma GCC unroll 2
                for (int t = 0; t < NT; t++)
#pragma GCC unroll 2
                    for (int a = 0; a < A; a++)
                        acc[r][t][a] = _mm512_fmadd_ps(ga[r][t][a], sv, acc[r][t][a]);
            }
        }
    } else {
        for (; k + 32 <= cols; k += 32) {
#pragma GCC unroll 2
            for (int i = 0; i < 2; i++) {
                __m512 xv[2];
#pragma GCC unroll 2
                for (int t = 0; t < NT; t++) xv[t] = _mm512_loadu_ps(x + t * cols + k + 16 * i);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    __m512 w = flt_load16(KIND, rp[r], k + 16 * i);
#pragma GCC unroll 2
                    for (int t = 0; t < NT; t++)
                        acc[r][t][i % A] = _mm512_fmadd_ps(w, xv[t], acc[r][t][i % A]);
                }
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < NT; t++) {
            __m512 sum = A == 2 ? _mm512_add_ps(acc[r][t][0], acc[r][t][1]) : acc[r][t][0];
            float s = _mm512_reduce_add_ps(sum);
            if (KIND == K_I8) s *= v->scales[n + r];
            for (int64_t j = k; j < cols; j++) s += deq_scalar(v, rp[r], n + r, j) * x[t * cols + j];
            y[t * rows + n + r] = s;
        }
}

/* One token against 12 float rows (f32 or bf16 widened), one accumulator
 * per row. Decode reads the matrix once, so its speed is how many lines
 * the core has in flight: a 12-row tile keeps 12 row streams open where
 * the 4-row tile kept 4. `build/bench/bench_quant R C 1 9 1` (one thread,
 * cache evicted), bf16, the 4-row build against this one, 2026-11-26:
 * 8192 x 7168 7.6-7.8 -> 4.8-5.2 ms per call; 24576 x 1536 (through the
 * dot-product kernel before, scheme_float.c) 5.8-6.3 -> 4.0-4.1, before
 * the segments of gemv_tiles12 (below). In a
 * standalone loop 6, 8, 10, 14 and 16 rows, two accumulators per row,
 * 64-column steps and software prefetch (every variant slower with it on
 * this VM) were no better than 12 rows with one accumulator. int8 rows
 * (gemv_i: MLA's absorbed W_UV product on w8a8 kv_b) take the tile too:
 * bench_engine -P, e16 w8a8-dynamic, one thread, interleaved: 16.1-16.7 ->
 * 14.8-16.1 ms per 16 tokens. */
#define GEMV_R12 12
AI void gemv_rows12(const dsq_qview *v, int64_t n, int64_t stride, const float *x, const int KIND, float *y)
{
    const int64_t cols = v->shape.cols;
    const uint8_t *rp[GEMV_R12];
    __m512 acc[GEMV_R12];
#pragma GCC unroll 12
    for (int r = 0; r < GEMV_R12; r++) {
        rp[r] = v->w + (size_t)(n + r * stride) * v->layout.row_bytes;
        acc[r] = _mm512_setzero_ps();
    }
    int64_t k = 0;
    for (; k + 32 <= cols; k += 32) {
        const __m512 x0 = _mm512_loadu_ps(x + k), x1 = _mm512_loadu_ps(x + k + 16);
#pragma GCC unroll 12
        for (int r = 0; r < GEMV_R12; r++) {
            acc[r] = _mm512_fmadd_ps(flt_load16(KIND, rp[r], k), x0, acc[r]);
            acc[r] = _mm512_fmadd_ps(flt_load16(KIND, rp[r], k + 16), x1, acc[r]);
        }
    }
    for (int r = 0; r < GEMV_R12; r++) {
        const int64_t nr = n + r * stride;
        float s = _mm512_reduce_add_ps(acc[r]);
        if (KIND == K_I8) s *= v->scales[nr];   /* as gemv_tile */
        for (int64_t j = k; j < cols; j++) s += deq_scalar(v, rp[r], nr, j) * x[j];
        y[nr] = s;
    }
}

/* The 12-row tiles of rows [n0, n1), 12 m of them; returns the first row
 * left. Rows of fewer than GEMV_SEG_COLS columns: tile i takes rows
 * n0 + i + m r (r < 12), twelve segments of m consecutive rows, so each of
 * the 12 streams runs on through m rows instead of ending with its row (a
 * few KB); longer rows are streams long enough by themselves and take
 * consecutive rows. bench_engine -P, e16 BF16 layer, one thread, the two
 * builds interleaved, 2026-11-26: q_b_proj (1536 columns) 17.6-18.7 ->
 * 21.6-22.0 GB/s, the experts' down (2048) 19.1-19.4 -> 22.4-22.7; o_proj
 * (16384) read 3-5% slower in segments, so long rows keep the tiles. */
#define GEMV_SEG_COLS 4096
AI int64_t gemv_tiles12(const dsq_qview *v, int64_t n0, int64_t n1, const float *x, const int KIND, float *y)
{
    const int64_t m = (n1 - n0) / GEMV_R12;
    const int seg = v->shape.cols < GEMV_SEG_COLS;
    for (int64_t i = 0; i < m; i++) gemv_rows12(v, seg ? n0 + i : n0 + GEMV_R12 * i, seg ? m : 1, x, KIND, y);
    return n0 + m * GEMV_R12;
}

#define GEMV_KIND(KIND)                                                             \
    do {                                                                            \
        int64_t t = 0;                                                              \
        for (; t + 2 <= T; t += 2) {                                                \
            int64_t n = n0;                                                         \
            for (; n + 4 <= n1; n += 4) gemv_tile(v, n, 4, x + t * cols, 2, KIND, y + t * rows); \
            for (; n < n1; n++) gemv_tile(v, n, 1, x + t * cols, 2, KIND, y + t * rows); \
        }                                                                           \
        if (t < T) {                                                                \
            int64_t n = n0;                                                         \
            if (KIND == K_F32 || KIND == K_BF16 || KIND == K_I8)                    \
                n = gemv_tiles12(v, n0, n1, x + t * cols, KIND, y + t * rows);      \
            for (; n + 4 <= n1; n += 4) gemv_tile(v, n, 4, x + t * cols, 1, KIND, y + t * rows); \
            for (; n < n1; n++) gemv_tile(v, n, 1, x + t * cols, 1, KIND, y + t * rows); \
        }                                                                           \
    } while (0)

static void z_gemv_f(const dsq_qview *v, const float *x, int64_t T, int64_t n0, int64_t n1, float *y)
{
    const int64_t rows = v->shape.rows, cols = v->shape.cols;
    switch (v->scheme->id) {
    case DSQ_SCHEME_F32: GEMV_KIND(K_F32); break;
    case DSQ_SCHEME_BF16: GEMV_KIND(K_BF16); break;
    case DSQ_SCHEME_W8A8_DYNAMIC:
    case DSQ_SCHEME_W8A8: GEMV_KIND(K_I8); break;
    default: GEMV_KIND(K_AWQ); break;   /* awq-w4a16, w4a8 (zero point 8) */
    }
}
#undef GEMV_KIND

/* gemv_t: 16 int8 codes (lane q of c) as floats. The lane index is spelled
 * out as literals: clang wants the extract's immediate constant before
 * inlining (make fuzz builds this file with clang). */
AI __m512 i8x16_ps(__m512i c, const int q)
{
    __m128i l = q == 0   ? _mm512_castsi512_si128(c)
                : q == 1 ? _mm512_extracti32x4_epi32(c, 1)
                : q == 2 ? _mm512_extracti32x4_epi32(c, 2)
                         : _mm512_extracti32x4_epi32(c, 3);
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(l));
}

#define T128_PFD 16   /* rows ahead to prefetch in gemv_t128_i8 / _w4 */

/* gemv_t's sweeps read rows 64-128 bytes at a time, rows apart (a row's
 * other blocks come in the next calls): without prefetch every load waited
 * on DRAM (perf: half the w4 kernel's samples on the instruction after
 * it). Row n + T128_PFD is fetched whole in the first sweep (c0 == 0), and
 * its `lines` lines at byte off in the later ones. */
AI void t128_prefetch(const dsq_qview *v, int64_t n, int64_t c0, size_t off, const int lines)
{
    if (n >= v->shape.rows - T128_PFD) return;
    const size_t ws = v->layout.row_bytes;
    const char *pf = (const char *)(v->w + (size_t)(n + T128_PFD) * ws);
    if (c0 == 0)
        for (size_t o = 0; o < ws; o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);
    else
        for (int i = 0; i < lines; i++) _mm_prefetch(pf + off + 64 * (size_t)i, _MM_HINT_T0);
}

/* Columns [c0, c0 + 128) of rows [n0, n1) of an int8 view: 8 accumulators
 * stay in registers while the rows pass (two 64-byte loads per row); weight
 * q times the row's coefficient a * s. */
AI void gemv_t128_i8(const dsq_qview *v, int64_t n0, int64_t n1, const float *a, int64_t c0, float *y)
{
    const size_t ws = v->layout.row_bytes;
    __m512 acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) acc[i] = _mm512_loadu_ps(y + c0 + 16 * i);
    for (int64_t n = n0; n < n1; n++) {
        t128_prefetch(v, n, c0, (size_t)c0, 2);
        const uint8_t *row = v->w + (size_t)n * ws;
        const __m512 cf = _mm512_set1_ps(a[n - n0] * v->scales[n]);
        const __m512i c[2] = { _mm512_loadu_si512(row + c0), _mm512_loadu_si512(row + c0 + 64) };
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) acc[h * 4 + q] = _mm512_fmadd_ps(i8x16_ps(c[h], q), cf, acc[h * 4 + q]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) _mm512_storeu_ps(y + c0 + 16 * i, acc[i]);
}

/* The same for int4 views (W4: 1 w4a8, codes u - 8; 2 awq, u - z with the
 * group's zero point). A code becomes its float (u - z) by a 16-entry table
 * lookup (vpermps reads the low 4 bits of each 32-bit lane), as in
 * kernels_avx512awq.c's decode: per row 7 shifts, 8 vpermps and 8 FMAs for
 * 128 weights, against 8 sign extensions, 6 lane extracts and 8 int -> float
 * conversions when the codes are widened, which made the absorbed kv_b
 * products shuffle-bound (~9% of a w4a8 decode step). Shift s of 32-bit lane
 * L holds column 4L + s / 2 + 64 (s & 1) (dsq_awq_perm16), so the
 * accumulators hold the columns in that order: y is gathered into them and
 * gathered back. Each column sees the same FMAs in the same row order as
 * with widened codes: the result is bit-identical. */

AI void gemv_t128_w4(const dsq_qview *v, int64_t n0, int64_t n1, const float *a, int64_t c0, int64_t g,
                     const int W4, float *y)
{
    const size_t ws = v->layout.row_bytes;
    const int64_t ng = v->layout.ngroups;
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i l4 = _mm512_slli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 2);
    __m512 tab = _mm512_sub_ps(iota, _mm512_set1_ps(8.0f));
    __m512 acc[8];
#pragma GCC unroll 8
    for (int s = 0; s < 8; s++)
        acc[s] = _mm512_i32gather_ps(_mm512_add_epi32(l4, _mm512_set1_epi32((s >> 1) + 64 * (s & 1))), y + c0, 4);
    for (int64_t n = n0; n < n1; n++) {
        t128_prefetch(v, n, c0, (size_t)(c0 >> 1), 1);
        const __m512i d = _mm512_loadu_si512(v->w + (size_t)n * ws + (c0 >> 1));
        const __m512 cf = _mm512_set1_ps(a[n - n0] * v->scales[W4 ? n * ng + g : n]);
        if (W4 == 2) tab = _mm512_sub_ps(iota, _mm512_set1_ps((float)v->zeros[n * ng + g]));
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++)
            acc[s] = _mm512_fmadd_ps(_mm512_permutexvar_ps(s ? _mm512_srli_epi32(d, 4 * s) : d, tab), cf, acc[s]);
    }
    /* back to column order: column c (j = c & 63, h = c >> 6) is lane j / 4
     * of shift 2 (j & 3) + h */
    _Alignas(64) float t[128];
#pragma GCC unroll 8
    for (int s = 0; s < 8; s++) _mm512_store_ps(t + 16 * s, acc[s]);
    const __m512i c16 = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        const __m512i j = _mm512_add_epi32(c16, _mm512_set1_epi32((16 * i) & 63));
        const __m512i sh = _mm512_add_epi32(_mm512_slli_epi32(_mm512_and_si512(j, _mm512_set1_epi32(3)), 1),
                                            _mm512_set1_epi32(i >> 2));
        const __m512i p = _mm512_add_epi32(_mm512_slli_epi32(sh, 4), _mm512_srli_epi32(j, 2));
        _mm512_storeu_ps(y + c0 + 16 * i, _mm512_i32gather_ps(p, t, 4));
    }
}

static void z_gemv_t(const dsq_qview *v, int64_t n0, int64_t n1, const float *a, float *y)
{
    const int64_t cols = v->shape.cols, gs = v->layout.gsize;
    const int w4 = v->scheme->id == DSQ_SCHEME_W4A8 ? 1 : v->scheme->id == DSQ_SCHEME_AWQ_W4A16 ? 2 : 0;
    int64_t c0 = 0;
    /* whole 128-column blocks inside one group (w8: one per row) */
    if (!w4 || v->layout.ngroups == 1 || gs % 128 == 0)
        for (; c0 + 128 <= cols; c0 += 128) {
            const int64_t g = w4 ? c0 / gs : 0;
            if (w4 == 2) gemv_t128_w4(v, n0, n1, a, c0, g, 2, y);
            else if (w4) gemv_t128_w4(v, n0, n1, a, c0, g, 1, y);
            else gemv_t128_i8(v, n0, n1, a, c0, y);
        }
    for (int64_t c = c0; c < cols; c++) {
        float s = y[c];
        for (int64_t n = n0; n < n1; n++) s += a[n - n0] * deq_scalar(v, v->w + (size_t)n * v->layout.row_bytes, n, c);
        y[c] = s;
    }
}

static void z_dequant_tile(const dsq_qview *v, int64_t n0, int64_t n1, int64_t k0, int64_t k1,
                           float *out, int64_t ldo)
{
    const int64_t ng = v->layout.ngroups, gs = v->layout.gsize;
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *row = v->w + (size_t)n * v->layout.row_bytes;
        float *o = out + (n - n0) * ldo - k0;
        int64_t k = k0;
        if (v->scheme->id == DSQ_SCHEME_AWQ_W4A16) {
            if ((k & 63) == 0)
                for (; k + 64 <= k1; k += 64) {
                    int64_t g = k / gs;
                    __m512 w[4];
                    awq_deq64(row, k, _mm512_set1_epi8((char)v->zeros[n * ng + g]),
                              _mm512_set1_ps(v->scales[n * ng + g]), w);
                    for (int i = 0; i < 4; i++) _mm512_storeu_ps(o + k + 16 * i, w[i]);
                }
        } else if (v->scheme->id == DSQ_SCHEME_F32 || v->scheme->id == DSQ_SCHEME_BF16) {
            for (; k + 64 <= k1; k += 64) {
                __m512 w[4];
                flt_load64(v, row, k, w);
                for (int i = 0; i < 4; i++) _mm512_storeu_ps(o + k + 16 * i, w[i]);
            }
        } else if (v->scheme->id == DSQ_SCHEME_W4A8) {
            /* (u - 8) * s, as awq with every zero point 8 (MLA's absorbed
             * kv_b reads its rows through here at every decode step) */
            if ((k & 63) == 0 && k + 64 <= k1) {
                /* groups are whole 64-column chunks: step to the next group
                 * at its boundary instead of a 64-bit division per chunk
                 * (decode dequantizes every kv_b row per token) */
                int64_t g = k / gs, ge = (g + 1) * gs;
                __m512 sv = _mm512_set1_ps(v->scales[n * ng + g]);
                const __m512i z8 = _mm512_set1_epi8(8);
                for (; k + 64 <= k1; k += 64) {
                    if (k >= ge) {
                        g++;
                        ge += gs;
                        sv = _mm512_set1_ps(v->scales[n * ng + g]);
                    }
                    __m512 w[4];
                    awq_deq64(row, k, z8, sv, w);
                    for (int i = 0; i < 4; i++) _mm512_storeu_ps(o + k + 16 * i, w[i]);
                }
            }
        } else if (v->scheme->id == DSQ_SCHEME_W8A8_DYNAMIC || v->scheme->id == DSQ_SCHEME_W8A8) {
            const __m512 sv = _mm512_set1_ps(v->scales[n]);
            for (; k + 16 <= k1; k += 16)
                _mm512_storeu_ps(o + k, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                                          _mm_loadu_si128((const __m128i *)(row + k)))),
                                                      sv));
        }
        for (; k < k1; k++) o[k] = deq_scalar(v, row, n, k);
    }
}

/* bf16 prefill without a bf16 dot product: blocks of 8 rows (about 112 KB
 * at 7168 columns, L2 resident) through gemv_f's 4-row x 2-token tiles,
 * widening the weights on the fly; the block is read from memory once for
 * all tokens. */
static void z_gemm_bf16(const dsq_qview *v, const dsq_bfact *a, int64_t n0, int64_t n1, float *y)
{
    for (int64_t n = n0; n < n1; n += 8) z_gemv_f(v, a->x, a->T, n, n + 8 < n1 ? n + 8 : n1, y);
}

#define Z_LEVEL(NAME, SPLIT, GEMM_BF16, GEMM_AWQ)                                   \
    {                                                                               \
        .name = NAME, .bf16_split = SPLIT, .absmax_bits = z_absmax_bits,            \
        .minmax = z_minmax, .quant_i8 = z_quant_i8, .sum_i8 = z_sum_i8,             \
        .qstats = z_qstats, .qtrial = z_qtrial, .qtrials = z_qtrials,               \
        .f32_to_bf16 = z_f32_to_bf16, .split_bf16 = z_split_bf16,                   \
        .gemm_bf16 = GEMM_BF16, .gemm_awq = GEMM_AWQ, .gemm_w8 = z_gemm_w8,         \
        .gemm_w4 = z_gemm_w4, .gemv_awq = dsq_avx512awq_gemv,                       \
        .gemv_f = z_gemv_f, .dequant_tile = z_dequant_tile, .gemv_i = z_gemv_f,     \
        .gemv_t = z_gemv_t, .awq16_prep = dsq_avx512awq16_prep,                     \
        .gemv_awq16 = dsq_avx512awq16_gemv,                                         \
    }

const dsq_kernels dsq_kernels_avx512_impl = Z_LEVEL("avx512", 0, z_gemm_bf16, NULL);
/* the same level with the vdpbf16ps bf16 prefill (kernels_avx512bf16.c) and
 * awq gemm (kernels_avx512awq.c) */
const dsq_kernels dsq_kernels_avx512bf16_impl =
    Z_LEVEL("avx512bf16", 1, dsq_avx512bf16_gemm, dsq_avx512awq_gemm);
#undef Z_LEVEL

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* x86 */
