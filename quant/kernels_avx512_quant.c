/* kernels_avx512_quant.c - AVX-512 quantize-side primitives: absmax, min/max,
 * int8 rounding, int4 group statistics and trials, int8 sums, bf16
 * conversion and splitting (the dsq_kernels table in kernels_avx512.c). */
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

/* ---- quantize-side primitives -------------------------------------------- */

uint32_t dsq_avx512_absmax_bits(const float *x, int64_t n)
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

void dsq_avx512_minmax(const float *x, int64_t n, float *mn, float *mx)
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

void dsq_avx512_quant_i8(const float *x, int64_t n, float scale, int32_t add, int32_t lo, int32_t hi,
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
void dsq_avx512_qstats(const float *x, const float *c, int64_t n, float scale, float lo, float hi,
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

void dsq_avx512_qtrial(const float *x, const float *c, int64_t n, float inv, float lo, float hi, double out[3])
{
    qtrials_pass(x, c, n, 1, &inv, &lo, &hi, (double (*)[3])out);
}

void dsq_avx512_qtrials(const float *x, const float *c, int64_t n, int m, const float *inv, const float *lo,
                      const float *hi, double (*out)[3])
{
    switch (m) {
    case 1: qtrials_pass(x, c, n, 1, inv, lo, hi, out); break;
    case 2: qtrials_pass(x, c, n, 2, inv, lo, hi, out); break;
    case 3: qtrials_pass(x, c, n, 3, inv, lo, hi, out); break;
    default: qtrials_pass(x, c, n, 4, inv, lo, hi, out); break;
    }
}

int32_t dsq_avx512_sum_i8(const int8_t *q, int64_t n)
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

void dsq_avx512_f32_to_bf16(const float *x, int64_t n, uint16_t *out)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(out + i), _mm512_cvtepi32_epi16(bf16_rne(_mm512_loadu_si512(x + i))));
    for (; i < n; i++) out[i] = dsq_f32_to_bf16(x[i]);
}

/* dsq_split_bf16_scalar, 16 at a time (same operations). */
void dsq_avx512_split_bf16(const float *x, int64_t n, uint16_t *hi, uint16_t *lo)
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

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* x86 */
