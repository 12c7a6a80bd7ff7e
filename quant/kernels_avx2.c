/* kernels_avx2.c - AVX2 + FMA kernels (x86-64, chosen at run time).
 *
 * Built without -march flags: the whole file is compiled for avx2,fma via a
 * target pragma and only called after __builtin_cpu_supports says so.
 *
 * Integer kernels reproduce kernels_ref.c bit for bit:
 *  - w8: AVX2 has no int8 x int8 dot with int32 accumulation. vpmaddubsw
 *    (u8 x s8 -> saturating s16 pairs) would saturate for int8 x int8, so
 *    both operands are sign-extended to s16 and multiplied with vpmaddwd
 *    (exact s32 pair sums). Integer sums are exact, then the float epilogue
 *    performs the reference's float operations in the reference's order.
 *  - w4: weights are unsigned codes u = q + 8 (0..15), so vpmaddubsw(u, x)
 *    is exact (|pair| <= 2*15*127 = 3810, two of them still fit s16) and
 *    sum(q x) = sum(u x) - 8 * sum(x) with the per-group activation sums.
 */
#if defined(__x86_64__) || defined(__i386__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC target("avx2,fma")
#pragma GCC optimize("O3", "fp-contract=off")
#endif

#include "kernels.h"
#include "dsq_mem.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

AI int32_t hsum_epi32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

AI float hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- quantize-side primitives -------------------------------------------- */

static uint32_t avx2_absmax_bits(const float *x, int64_t n)
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

static void avx2_minmax(const float *x, int64_t n, float *mn, float *mx)
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

static void avx2_quant_i8(const float *x, int64_t n, float scale, int32_t add, int32_t lo,
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

static int32_t avx2_sum_i8(const int8_t *q, int64_t n)
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

static void avx2_f32_to_bf16(const float *x, int64_t n, uint16_t *out)
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

/* ---- w8 gemm ------------------------------------------------------------- */

/* Integer dot sums of an R x TT tile: rows w (stride ws bytes) against
 * tokens x (stride xs bytes) over klen (multiple of 16) columns. */
AI void w8_tile(const int8_t *w, size_t ws, const int8_t *x, int64_t xs, int64_t klen, const int R,
                const int TT, int32_t *out)
{
    __m256i acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++) acc[r][t] = _mm256_setzero_si256();
    for (int64_t k = 0; k < klen; k += 16) {
        __m256i wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            wv[r] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + (size_t)r * ws + k)));
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++) {
            __m256i xv = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(x + t * xs + k)));
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                acc[r][t] = _mm256_add_epi32(acc[r][t], _mm256_madd_epi16(wv[r], xv));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++) out[r * TT + t] = hsum_epi32(acc[r][t]);
}

/* The reference's float epilogue (kernels_ref.c ref_gemm_w8), same order. */
AI void w8_store(const dsq_qview *v, const dsq_actbuf *a, int64_t n, int64_t t, int32_t acc,
                 float *y)
{
    float out;
    if (v->scheme->act == DSQ_ACT_INT8_STATIC) {
        uint32_t u = (uint32_t)acc - (uint32_t)v->act_offset * (uint32_t)v->rowsum[n];
        out = (float)(int32_t)u * (v->act_scale * v->scales[n]);
    } else {
        out = ((float)acc * v->scales[n]) * a->scale[t];
    }
    y[t * v->shape.rows + n] = out;
}

AI void w8_block(const dsq_qview *v, const dsq_actbuf *a, int64_t n, int64_t t, const int R,
                 const int TT, float *y)
{
    int32_t acc[16];
    const size_t ws = v->layout.row_bytes;
    w8_tile((const int8_t *)(v->w + (size_t)n * ws), ws, a->q + t * a->kpad, a->kpad,
            (int64_t)ws, R, TT, acc);
    for (int r = 0; r < R; r++)
        for (int tt = 0; tt < TT; tt++) w8_store(v, a, n + r, t + tt, acc[r * TT + tt], y);
}

static void avx2_gemm_w8(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1, float *y)
{
    const int64_t T = a->T;
    int64_t n = n0;
    if (T >= 4) {
        for (; n + 3 <= n1; n += 3) {
            int64_t t = 0;
            for (; t + 4 <= T; t += 4) w8_block(v, a, n, t, 3, 4, y);
            for (; t < T; t++) w8_block(v, a, n, t, 3, 1, y);
        }
        for (; n < n1; n++) {
            int64_t t = 0;
            for (; t + 4 <= T; t += 4) w8_block(v, a, n, t, 1, 4, y);
            for (; t < T; t++) w8_block(v, a, n, t, 1, 1, y);
        }
    } else {
        for (; n + 4 <= n1; n += 4)
            for (int64_t t = 0; t < T; t++) w8_block(v, a, n, t, 4, 1, y);
        for (; n < n1; n++)
            for (int64_t t = 0; t < T; t++) w8_block(v, a, n, t, 1, 1, y);
    }
}

/* ---- w4 gemm ------------------------------------------------------------- */

/* Eight int32 vectors -> one vector of their eight horizontal sums, in
 * order (integer adds: exact, the same sums as hsum_epi32 of each). */
AI __m256i reduce8_epi32(const __m256i A[8])
{
    __m256i h1 = _mm256_hadd_epi32(A[0], A[1]), h2 = _mm256_hadd_epi32(A[2], A[3]);
    __m256i h3 = _mm256_hadd_epi32(A[4], A[5]), h4 = _mm256_hadd_epi32(A[6], A[7]);
    __m256i h5 = _mm256_hadd_epi32(h1, h2), h6 = _mm256_hadd_epi32(h3, h4);
    return _mm256_add_epi32(_mm256_permute2x128_si256(h5, h6, 0x20),
                            _mm256_permute2x128_si256(h5, h6, 0x31));
}

/* Four int32 vectors -> their four horizontal sums. */
AI __m128i reduce4_epi32(const __m256i A[4])
{
    __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(A[0], A[1]), _mm256_hadd_epi32(A[2], A[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* R x TT tile of w4a8 outputs. Per group: exact int sums per (row, token),
 * minus 8 * group sum of x, then fsum = fma((float)acc, scale, fsum): the
 * reference's float steps per output, done lane-wise for the 2x4 and 4x1
 * tiles (vector FMA rounds like fmaf) and scalar for edge tiles. */
AI void w4_block(const dsq_qview *v, const dsq_actbuf *a, int64_t n, int64_t t0, const int R,
                 const int TT, float *y)
{
    const int64_t ng = v->layout.ngroups, gs = v->layout.gsize, kpad = a->kpad, T = a->T;
    const int64_t rows = v->shape.rows;
    const size_t ws = v->layout.row_bytes;
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const int VEC8 = R == 2 && TT == 4, VEC4 = R == 4 && TT == 1;
    const uint8_t *wr = v->w + (size_t)n * ws;
    float fsum[4][4];
    __m256 fs8 = _mm256_setzero_ps();
    __m128 fs4 = _mm_setzero_ps();
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) fsum[r][t] = 0.0f;
    for (int64_t g = 0; g < ng; g++) {
        int64_t k0 = g * gs, k1 = g == ng - 1 ? kpad : k0 + gs;
        __m256i acc[4][4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int t = 0; t < TT; t++) acc[r][t] = _mm256_setzero_si256();
        for (int64_t k = k0; k < k1; k += 64) {
            const int64_t boff = (k >> 7) * 64;
            const int shift = (int)(k & 64) ? 4 : 0;
            __m256i c0[4], c1[4];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const uint8_t *p = wr + (size_t)r * ws + boff;
                __m256i b0 = _mm256_loadu_si256((const __m256i *)p);
                __m256i b1 = _mm256_loadu_si256((const __m256i *)(p + 32));
                c0[r] = _mm256_and_si256(_mm256_srli_epi16(b0, shift), m4);
                c1[r] = _mm256_and_si256(_mm256_srli_epi16(b1, shift), m4);
            }
#pragma GCC unroll 4
            for (int t = 0; t < TT; t++) {
                const int8_t *xp = a->q + (t0 + t) * kpad + k;
                __m256i x0 = _mm256_loadu_si256((const __m256i *)xp);
                __m256i x1 = _mm256_loadu_si256((const __m256i *)(xp + 32));
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(c0[r], x0),
                                                 _mm256_maddubs_epi16(c1[r], x1));
                    acc[r][t] = _mm256_add_epi32(acc[r][t], _mm256_madd_epi16(p, ones));
                }
            }
        }
        const float *sg = v->scales + n * ng + g;
        const int32_t *gsp = a->gsum + g * T + t0;
        if (VEC8) {
            __m256i A[8] = { acc[0][0], acc[0][1], acc[0][2], acc[0][3],
                             acc[1][0], acc[1][1], acc[1][2], acc[1][3] };
            __m256i gs8 = _mm256_slli_epi32(
                _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)gsp)), 3);
            __m256i iacc = _mm256_sub_epi32(reduce8_epi32(A), gs8);
            __m256 sv = _mm256_set_m128(_mm_set1_ps(sg[ng]), _mm_set1_ps(sg[0]));
            fs8 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc), sv, fs8);
        } else if (VEC4) {
            __m256i A[4] = { acc[0][0], acc[1][0], acc[2][0], acc[3][0] };
            __m128i iacc = _mm_sub_epi32(reduce4_epi32(A), _mm_set1_epi32(8 * gsp[0]));
            __m128 sv = _mm_setr_ps(sg[0], sg[ng], sg[2 * ng], sg[3 * ng]);
            fs4 = _mm_fmadd_ps(_mm_cvtepi32_ps(iacc), sv, fs4);
        } else {
            for (int r = 0; r < R; r++)
                for (int t = 0; t < TT; t++) {
                    int32_t iacc = hsum_epi32(acc[r][t]) - 8 * gsp[t];
                    fsum[r][t] = fmaf((float)iacc, sg[r * ng], fsum[r][t]);
                }
        }
    }
    if (VEC8) {
        __m256 sx = _mm256_broadcast_ps((const __m128 *)(a->scale + t0));
        float o[8];
        _mm256_storeu_ps(o, _mm256_mul_ps(fs8, sx));
        for (int r = 0; r < 2; r++)
            for (int t = 0; t < 4; t++) y[(t0 + t) * rows + n + r] = o[r * 4 + t];
    } else if (VEC4) {
        _mm_storeu_ps(y + t0 * rows + n, _mm_mul_ps(fs4, _mm_set1_ps(a->scale[t0])));
    } else {
        for (int r = 0; r < R; r++)
            for (int t = 0; t < TT; t++)
                y[(t0 + t) * rows + n + r] = fsum[r][t] * a->scale[t0 + t];
    }
}

static void avx2_gemm_w4(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1, float *y)
{
    const int64_t T = a->T;
    int64_t n = n0;
    if (T >= 4) {
        for (; n + 2 <= n1; n += 2) {
            int64_t t = 0;
            for (; t + 4 <= T; t += 4) w4_block(v, a, n, t, 2, 4, y);
            for (; t < T; t++) w4_block(v, a, n, t, 2, 1, y);
        }
        for (; n < n1; n++) {
            int64_t t = 0;
            for (; t + 4 <= T; t += 4) w4_block(v, a, n, t, 1, 4, y);
            for (; t < T; t++) w4_block(v, a, n, t, 1, 1, y);
        }
    } else {
        for (; n + 4 <= n1; n += 4)
            for (int64_t t = 0; t < T; t++) w4_block(v, a, n, t, 4, 1, y);
        for (; n < n1; n++)
            for (int64_t t = 0; t < T; t++) w4_block(v, a, n, t, 1, 1, y);
    }
}

/* ---- float schemes ------------------------------------------------------- */

/* 64 dequantized awq weights of one row starting at column k (a multiple of
 * 64, fully inside the row), as 8 vectors. Exact: (q - z) * s, like ref. */
AI void awq_deq64(const uint8_t *row, int64_t k, __m256i zv, __m256 sv, __m256 out[8])
{
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const uint8_t *p = row + (k >> 7) * 64;
    const int shift = (int)(k & 64) ? 4 : 0;
    __m256i c0 = _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)p), shift), m4);
    __m256i c1 = _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(p + 32)), shift), m4);
    c0 = _mm256_sub_epi8(c0, zv);
    c1 = _mm256_sub_epi8(c1, zv);
    __m128i q[4] = { _mm256_castsi256_si128(c0), _mm256_extracti128_si256(c0, 1),
                     _mm256_castsi256_si128(c1), _mm256_extracti128_si256(c1, 1) };
    for (int i = 0; i < 4; i++) {
        out[2 * i] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q[i])), sv);
        out[2 * i + 1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q[i], 8))), sv);
    }
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
        int z = v->zeros ? (int)v->zeros[i] : 8;   /* w4a8: offset-binary codes */
        return (float)(dsq_i4_get(row, k) - z) * v->scales[i];
    }
    }
}

/* 32 weights of a f32 (is_f32, a constant after inlining) or bf16 row
 * starting at column k. */
AI void flt_load32(const int is_f32, const uint8_t *row, int64_t k, __m256 out[4])
{
    if (is_f32) {
        const float *f = (const float *)row + k;
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) out[i] = _mm256_loadu_ps(f + 8 * i);
    } else {
        const uint16_t *h = (const uint16_t *)row + k;
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            out[i] = _mm256_castsi256_ps(_mm256_slli_epi32(
                _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(h + 8 * i))), 16));
    }
}

enum { K_F32, K_BF16, K_AWQ };

/* 8 codes (q - z) of one awq row from packed block bytes p (8 consecutive
 * bytes; HI selects the high nibbles) as floats: exact small integers. */
AI __m256 awq_qz8(const uint8_t *p, const int HI, __m256i zv)
{
    __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    c = HI ? _mm256_srli_epi32(c, 4) : _mm256_and_si256(c, _mm256_set1_epi32(0x0f));
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(c, zv));
}

/* 8 weights of a f32 or bf16 row from column k. */
AI __m256 flt_load8(const int KIND, const uint8_t *row, int64_t k)
{
    if (KIND == K_F32) return _mm256_loadu_ps((const float *)row + k);
    return _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + k))), 16));
}

/* R rows (1 or 4) against NT tokens (1 or 2); R, NT and KIND are constants
 * after inlining. x loads are shared by the R rows; for one token each row
 * has two accumulators (even/odd 8-column runs) to hide the FMA latency.
 * awq sums (q - z) * x per group and applies the group scale once. */
AI void gemv_tile(const dsq_qview *v, int64_t n, const int R, const float *x, const int NT,
                  const int KIND, float *y)
{
    const int A = NT == 1 ? 2 : 1;
    const int64_t cols = v->shape.cols, rows = v->shape.rows;
    const uint8_t *rp[4];
    __m256 acc[4][2][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        rp[r] = v->w + (size_t)(n + r) * v->layout.row_bytes;
#pragma GCC unroll 2
        for (int t = 0; t < NT; t++)
#pragma GCC unroll 2
            for (int a = 0; a < A; a++) acc[r][t][a] = _mm256_setzero_ps();
    }
    int64_t k = 0;
    if (KIND == K_AWQ) {
        const int64_t ng = v->layout.ngroups, gs = v->layout.gsize;
        for (int64_t g = 0; g < ng; g++) {
            int64_t k0 = g * gs, k1 = k0 + gs < cols ? k0 + gs : cols;
            if (k0 != k || k + 64 > k1) break;   /* scalar tail from k on */
            __m256i zv[4];
            __m256 ga[4][2][2];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                zv[r] = _mm256_set1_epi32(v->zeros[(n + r) * ng + g]);
#pragma GCC unroll 2
                for (int t = 0; t < NT; t++)
#pragma GCC unroll 2
                    for (int a = 0; a < A; a++) ga[r][t][a] = _mm256_setzero_ps();
            }
            /* whole 128-column blocks inside the group: one 16-byte load gives
             * 16 low-nibble and 16 high-nibble codes (two pshufb widen bytes
             * to dwords; and / shift pick the nibble) */
            for (; (k & 127) == 0 && k + 128 <= k1; k += 128) {
                const int64_t boff = (k >> 7) * 64;
                const __m256i c0 = _mm256_setr_epi8(0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1, 3, -1, -1, -1,
                                                    4, -1, -1, -1, 5, -1, -1, -1, 6, -1, -1, -1, 7, -1, -1, -1);
                const __m256i c1 = _mm256_setr_epi8(8, -1, -1, -1, 9, -1, -1, -1, 10, -1, -1, -1, 11, -1, -1, -1,
                                                    12, -1, -1, -1, 13, -1, -1, -1, 14, -1, -1, -1, 15, -1, -1, -1);
                const __m256i m4d = _mm256_set1_epi32(0x0f);
#pragma GCC unroll 4
                for (int j = 0; j < 64; j += 16) {
                    __m256 xv[2][4];
#pragma GCC unroll 2
                    for (int t = 0; t < NT; t++) {
                        const float *xp = x + t * cols + k + j;
                        xv[t][0] = _mm256_loadu_ps(xp);
                        xv[t][1] = _mm256_loadu_ps(xp + 8);
                        xv[t][2] = _mm256_loadu_ps(xp + 64);
                        xv[t][3] = _mm256_loadu_ps(xp + 72);
                    }
#pragma GCC unroll 4
                    for (int r = 0; r < R; r++) {
                        __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(rp[r] + boff + j)));
                        __m256i d0 = _mm256_shuffle_epi8(b, c0), d1 = _mm256_shuffle_epi8(b, c1);
                        __m256 w[4];
                        w[0] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(d0, m4d), zv[r]));
                        w[1] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(d1, m4d), zv[r]));
                        w[2] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(d0, 4), zv[r]));
                        w[3] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(d1, 4), zv[r]));
#pragma GCC unroll 2
                        for (int t = 0; t < NT; t++)
#pragma GCC unroll 4
                            for (int i = 0; i < 4; i++)
                                ga[r][t][i % A] = _mm256_fmadd_ps(w[i], xv[t][i], ga[r][t][i % A]);
                    }
                }
            }
            for (; k + 64 <= k1; k += 64) {
                const int64_t boff = (k >> 7) * 64;
#define AWQ_RUN(HI)                                                                        \
    for (int i = 0; i < 8; i++) {                                                          \
        __m256 xv[2];                                                                      \
        for (int t = 0; t < NT; t++) xv[t] = _mm256_loadu_ps(x + t * cols + k + 8 * i);   \
        for (int r = 0; r < R; r++) {                                                      \
            __m256 w = awq_qz8(rp[r] + boff + 8 * i, HI, zv[r]);                           \
            for (int t = 0; t < NT; t++)                                                   \
                ga[r][t][i % A] = _mm256_fmadd_ps(w, xv[t], ga[r][t][i % A]);              \
        }                                                                                  \
    }
                if (k & 64) {
#pragma GCC unroll 8
                    AWQ_RUN(1)
                } else {
#pragma GCC unroll 8
                    AWQ_RUN(0)
                }
#undef AWQ_RUN
            }
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const __m256 sv = _mm256_set1_ps(v->scales[(n + r) * ng + g]);
#pragma GCC unroll 2
                for (int t = 0; t < NT; t++)
#pragma GCC unroll 2
                    for (int a = 0; a < A; a++)
                        acc[r][t][a] = _mm256_fmadd_ps(ga[r][t][a], sv, acc[r][t][a]);
            }
        }
    } else {
        for (; k + 16 <= cols; k += 16) {
#pragma GCC unroll 2
            for (int i = 0; i < 2; i++) {
                __m256 xv[2];
#pragma GCC unroll 2
                for (int t = 0; t < NT; t++) xv[t] = _mm256_loadu_ps(x + t * cols + k + 8 * i);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    __m256 w = flt_load8(KIND, rp[r], k + 8 * i);
#pragma GCC unroll 2
                    for (int t = 0; t < NT; t++)
                        acc[r][t][i % A] = _mm256_fmadd_ps(w, xv[t], acc[r][t][i % A]);
                }
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < NT; t++) {
            __m256 sum = A == 2 ? _mm256_add_ps(acc[r][t][0], acc[r][t][1]) : acc[r][t][0];
            float s = hsum_ps(sum);
            for (int64_t j = k; j < cols; j++) s += deq_scalar(v, rp[r], n + r, j) * x[t * cols + j];
            y[t * rows + n + r] = s;
        }
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
            for (; n + 4 <= n1; n += 4) gemv_tile(v, n, 4, x + t * cols, 1, KIND, y + t * rows); \
            for (; n < n1; n++) gemv_tile(v, n, 1, x + t * cols, 1, KIND, y + t * rows); \
        }                                                                           \
    } while (0)

/* awq keeps 2 rows per tile: its zero points and group accumulators need
 * registers that a 4-row tile would spill */
#define GEMV_KIND_R2(KIND)                                                          \
    do {                                                                            \
        int64_t t = 0;                                                              \
        for (; t + 2 <= T; t += 2) {                                                \
            int64_t n = n0;                                                         \
            for (; n + 2 <= n1; n += 2) gemv_tile(v, n, 2, x + t * cols, 2, KIND, y + t * rows); \
            for (; n < n1; n++) gemv_tile(v, n, 1, x + t * cols, 2, KIND, y + t * rows); \
        }                                                                           \
        if (t < T) {                                                                \
            int64_t n = n0;                                                         \
            for (; n + 2 <= n1; n += 2) gemv_tile(v, n, 2, x + t * cols, 1, KIND, y + t * rows); \
            for (; n < n1; n++) gemv_tile(v, n, 1, x + t * cols, 1, KIND, y + t * rows); \
        }                                                                           \
    } while (0)

static void avx2_gemv_f(const dsq_qview *v, const float *x, int64_t T, int64_t n0, int64_t n1,
                        float *y)
{
    const int64_t rows = v->shape.rows, cols = v->shape.cols;
    switch (v->scheme->id) {
    case DSQ_SCHEME_F32: GEMV_KIND(K_F32); break;
    case DSQ_SCHEME_BF16: GEMV_KIND(K_BF16); break;
    default: GEMV_KIND_R2(K_AWQ); break;
    }
}
#undef GEMV_KIND
#undef GEMV_KIND_R2

static void avx2_dequant_tile(const dsq_qview *v, int64_t n0, int64_t n1, int64_t k0, int64_t k1,
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
                    if ((k + 63) / gs != g) break;   /* never: groups are multiples of 64 */
                    __m256 w[8];
                    awq_deq64(row, k, _mm256_set1_epi8((char)v->zeros[n * ng + g]),
                              _mm256_set1_ps(v->scales[n * ng + g]), w);
                    for (int i = 0; i < 8; i++) _mm256_storeu_ps(o + k + 8 * i, w[i]);
                }
        } else if (v->scheme->id == DSQ_SCHEME_F32 || v->scheme->id == DSQ_SCHEME_BF16) {
            for (; k + 32 <= k1; k += 32) {
                __m256 w[4];
                if (v->scheme->id == DSQ_SCHEME_F32) flt_load32(1, row, k, w);
                else flt_load32(0, row, k, w);
                for (int i = 0; i < 4; i++) _mm256_storeu_ps(o + k + 8 * i, w[i]);
            }
        }
        for (; k < k1; k++) o[k] = deq_scalar(v, row, n, k);
    }
}

const dsq_kernels dsq_kernels_avx2_impl = {
    .name = "avx2",
    .absmax_bits = avx2_absmax_bits,
    .minmax = avx2_minmax,
    .quant_i8 = avx2_quant_i8,
    .sum_i8 = avx2_sum_i8,
    .f32_to_bf16 = avx2_f32_to_bf16,
    .gemm_w8 = avx2_gemm_w8,
    .gemm_w4 = avx2_gemm_w4,
    .gemv_f = avx2_gemv_f,
    .dequant_tile = avx2_dequant_tile,
};

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* x86 */
