/* kernels_avx2_quant.c - AVX2 quantize-side primitives: absmax, min/max,
 * int8 rounding, int8 sums, bf16 conversion (the dsq_kernels table in
 * kernels_avx2.c). */
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

/* ---- quantize-side primitives -------------------------------------------- */

uint32_t dsq_avx2_absmax_bits(const float *x, int64_t n)
{
    const __m256i mask = _mm256_set1_epi32(0x7fffffff);
    __m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        m0 = _mm256_max_epu32(m0, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i)), mask));
        m1 = _mm256_max_epu32(m1, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i + 8)), mask));
        m2 = _mm256_max_epu32(m2, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i + 16)), mask));
        m3 = _mm256_max_epu32(m3, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i + 24)), mask));
    }
    for (; i + 8 <= n; i += 8)
        m0 = _mm256_max_epu32(m0, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i)), mask));
    m0 = _mm256_max_epu32(_mm256_max_epu32(m0, m1), _mm256_max_epu32(m2, m3));
    uint32_t lanes[8];
    _mm256_storeu_si256((__m256i *)lanes, m0);
    uint32_t m = 0;
    for (int j = 0; j < 8; j++) m = lanes[j] > m ? lanes[j] : m;
    for (; i < n; i++) {
        uint32_t b = dsq_f32_bits(x[i]) & 0x7fffffffu;
        if (b > m) m = b;
    }
    return m;
}

void dsq_avx2_minmax(const float *x, int64_t n, float *mn, float *mx)
{
    __m256 lo0 = _mm256_set1_ps(x[0]), hi0 = lo0, lo1 = lo0, hi1 = lo0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        lo0 = _mm256_min_ps(lo0, a); hi0 = _mm256_max_ps(hi0, a);
        lo1 = _mm256_min_ps(lo1, b); hi1 = _mm256_max_ps(hi1, b);
    }
    lo0 = _mm256_min_ps(lo0, lo1);
    hi0 = _mm256_max_ps(hi0, hi1);
    float l[8], h[8];
    _mm256_storeu_ps(l, lo0);
    _mm256_storeu_ps(h, hi0);
    float a = l[0], b = h[0];
    /* finite data (contract): compares instead of libm fminf/fmaxf */
    for (int j = 1; j < 8; j++) { a = l[j] < a ? l[j] : a; b = h[j] > b ? h[j] : b; }
    for (; i < n; i++) { a = x[i] < a ? x[i] : a; b = x[i] > b ? x[i] : b; }
    *mn = a;
    *mx = b;
}

AI __m256i quant8(const float *x, __m256 vs, __m256 vlo, __m256 vhi, __m256i vadd)
{
    __m256 r = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x), vs),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_min_ps(_mm256_max_ps(r, vlo), vhi);   /* max(NaN, lo) = lo, as fmaxf */
    return _mm256_add_epi32(_mm256_cvttps_epi32(r), vadd);
}

void dsq_avx2_quant_i8(const float *x, int64_t n, float scale, int32_t add, int32_t lo,
                          int32_t hi, int8_t *q)
{
    const __m256 vs = _mm256_set1_ps(scale);
    const __m256 vlo = _mm256_set1_ps((float)(lo - add)), vhi = _mm256_set1_ps((float)(hi - add));
    const __m256i vadd = _mm256_set1_epi32(add);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i a = quant8(x + i, vs, vlo, vhi, vadd), b = quant8(x + i + 8, vs, vlo, vhi, vadd);
        __m256i c = quant8(x + i + 16, vs, vlo, vhi, vadd), d = quant8(x + i + 24, vs, vlo, vhi, vadd);
        __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
        __m256i abcd = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), perm);
        _mm256_storeu_si256((__m256i *)(q + i), abcd);
    }
    const float flo = (float)(lo - add), fhi = (float)(hi - add);
    for (; i < n; i++) {
        float r = rintf(x[i] / scale);
        r = fminf(fmaxf(r, flo), fhi);
        q[i] = (int8_t)((int32_t)r + add);
    }
}

int32_t dsq_avx2_sum_i8(const int8_t *q, int64_t n)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc = _mm256_setzero_si256();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(q + i));
        __m256i lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v));
        __m256i hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_add_epi16(lo, hi), ones));
    }
    int32_t s = hsum_epi32(acc);
    for (; i < n; i++) s += q[i];
    return s;
}

void dsq_avx2_f32_to_bf16(const float *x, int64_t n, uint16_t *out)
{
    const __m256i absm = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i r7 = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1),
                  qnan = _mm256_set1_epi32(0x40);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i h[2];
        for (int j = 0; j < 2; j++) {
            __m256i u = _mm256_loadu_si256((const __m256i *)(x + i + 8 * j));
            __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absm), inf);
            __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(r7, _mm256_and_si256(_mm256_srli_epi32(u, 16), one)));
            r = _mm256_srli_epi32(r, 16);
            __m256i nanv = _mm256_or_si256(_mm256_srli_epi32(u, 16), qnan);
            h[j] = _mm256_blendv_epi8(r, nanv, isnan);
        }
        /* values fit 16 bits unsigned: packus keeps them, then fix lane order */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(h[0], h[1]), 0xd8);
        _mm256_storeu_si256((__m256i *)(out + i), p);
    }
    for (; i < n; i++) out[i] = dsq_f32_to_bf16(x[i]);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* x86 */
