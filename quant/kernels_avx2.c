/* kernels_avx2.c - AVX2 + FMA kernels (x86-64, chosen at run time).
 *
 * Built without -march flags: the whole file is compiled for avx2,fma via a
 * target pragma and only called after __builtin_cpu_supports says so.
 *
 * Integer kernels reproduce kernels_ref.c bit for bit:
 *  - w8: AVX2 has no int8 x int8 dot with int32 accumulation. vpmaddubsw
 *    (u8 x s8 -> saturating s16 pairs) is made exact with the sign trick:
 *    vpmaddubsw(|w|, sign(x, w)), at most 2*128*127 = 32512 per pair; the
 *    s16 pairs widen with vpmaddwd(.., 1). Static activations holding -128
 *    swap the roles or fall back to s16 x s16 vpmaddwd (see W8_ABS_W).
 *  - w4: weights are unsigned codes u = q + 8 (0..15), so vpmaddubsw(u, x)
 *    is exact (|pair| <= 2*15*127 = 3810; eight results still fit s16, so
 *    256 columns accumulate in s16 before widening) and
 *    sum(q x) = sum(u x) - 8 * sum(x) with the per-group activation sums.
 * Integer sums are exact, so register tiles and blocking change nothing; the
 * float epilogues perform the reference's float operations in its order.
 *
 * Speed on Zen 3 (the development machine, 2048 x 7168, one thread, T = 64):
 * w8 ~130 GOPS (the sign trick needs 4 vector ops per 32 multiply-adds, at
 * about 3.2 vector ops per cycle: ~160 GOPS is the ceiling), w4 per channel
 * ~185 GOPS, OpenBLAS sgemm ~72 GFLOP/s on the same shape.
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

/* ---- int gemms: blocking shared by w8 and w4 ------------------------------ */

/* A call computes output rows [n0, n1) for all T tokens (the drivers hand out
 * 64-row blocks). Register tiles of R rows x TT tokens stream the K columns;
 * token tiles are the outer loop, so a tile's activations stay in L1 while
 * the block's weight rows (at most IB_ROWS rows, a few hundred KB) come from
 * L2. K is cut into blocks only when a block's weights would not fit L2
 * (kmax columns); per (row, token) state between K blocks lives in small
 * stack arrays: exact int32 partial sums, and for w4 the float group
 * accumulator. Integer sums are exact, so the blocking changes no result; the
 * float steps per output stay the reference's. Tokens are processed in
 * chunks of IB_TCH (bounds the state arrays). */
#define IB_ROWS  64
#define IB_TCH   64

/* K block: klen split into equal parts of at most kmax columns, rounded up
 * to 64. */
static int64_t ib_kc(int64_t klen, int64_t kmax)
{
    int64_t nb = (klen + kmax - 1) / kmax;
    int64_t kc = (klen + nb - 1) / nb;
    return (kc + 63) / 64 * 64;
}

/* Eight int32 vectors -> one vector of their eight horizontal sums, in
 * order (integer adds: exact). Unpack/add rounds instead of vphaddd, which
 * is several uops (0.5 per cycle) on Zen. */
AI __m256i reduce8_epi32(const __m256i A[8])
{
    __m256i t[4], u[2];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        t[i] = _mm256_add_epi32(_mm256_unpacklo_epi32(A[2 * i], A[2 * i + 1]),
                                _mm256_unpackhi_epi32(A[2 * i], A[2 * i + 1]));
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++)
        u[i] = _mm256_add_epi32(_mm256_unpacklo_epi64(t[2 * i], t[2 * i + 1]),
                                _mm256_unpackhi_epi64(t[2 * i], t[2 * i + 1]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(u[0], u[1], 0x20),
                            _mm256_permute2x128_si256(u[0], u[1], 0x31));
}

/* Does p[0..n) hold -128? (stops at the first 1 KB chunk that does) */
static int has_i8_min(const int8_t *p, int64_t n)
{
    const __m256i m = _mm256_set1_epi8(-128);
    int64_t i = 0;
    while (i + 32 <= n) {
        __m256i any = _mm256_setzero_si256();
        const int64_t e = i + 1024 < n ? i + 1024 : n;
        for (; i + 32 <= e; i += 32)
            any = _mm256_or_si256(any, _mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)(p + i)), m));
        if (!_mm256_testz_si256(any, any)) return 1;
    }
    for (; i < n; i++)
        if (p[i] == -128) return 1;
    return 0;
}

/* ---- w8 gemm ------------------------------------------------------------- */

/* How a w8 tile multiplies int8 x int8 exactly (AVX2 has no int8 dot with
 * int32 accumulation):
 *  W8_ABS_W: vpmaddubsw(|w|, sign(x, w)): |w| <= 128 as u8, |x| <= 127, so a
 *    pair sum is at most 2*128*127 = 32512 and never saturates. Needs
 *    x != -128 (negating -128 wraps): always true for dynamic activations
 *    (clamped to +-127); static ones are checked per call.
 *  W8_ABS_X: the roles swapped, for static activations holding -128 when the
 *    weight rows hold no -128 (the quantizer never writes it).
 *  W8_I16: both sign-extended to s16 and multiplied with vpmaddwd: any
 *    values, about 0.7x the speed; used when both hold -128.
 * Then vpmaddwd(.., 1) widens the s16 pair sums to s32 lanes. */
enum { W8_ABS_W = 0, W8_ABS_X = 1, W8_I16 = 2 };
#define W8_TT 6   /* tokens per w8 tile: 2 x 6 = 12 accumulators */

/* Integer dot sums of an R x TT tile (R <= 2, TT <= 6; or R = 4, TT = 1) over klen columns (a
 * multiple of 32) of rows w (stride ws) and tokens x (stride xs), added to
 * st[t * IB_ROWS + r]. */
AI void w8_tile(const int8_t *w, size_t ws, const int8_t *x, int64_t xs, int64_t klen, const int R,
                const int TT, const int MODE, int32_t *st)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc[4][6];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 6
        for (int t = 0; t < TT; t++) acc[r][t] = _mm256_setzero_si256();
    if (MODE == W8_I16) {
        for (int64_t k = 0; k < klen; k += 16) {
            __m256i wv[4];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                wv[r] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + (size_t)r * ws + k)));
#pragma GCC unroll 6
            for (int t = 0; t < TT; t++) {
                __m256i xv = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(x + t * xs + k)));
#pragma GCC unroll 4
                for (int r = 0; r < R; r++)
                    acc[r][t] = _mm256_add_epi32(acc[r][t], _mm256_madd_epi16(wv[r], xv));
            }
        }
    } else {
        for (int64_t k = 0; k < klen; k += 32) {
            __m256i wv[4], wa[4];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                wv[r] = _mm256_loadu_si256((const __m256i *)(w + (size_t)r * ws + k));
                wa[r] = _mm256_abs_epi8(wv[r]);
            }
#pragma GCC unroll 6
            for (int t = 0; t < TT; t++) {
                __m256i xv = _mm256_loadu_si256((const __m256i *)(x + t * xs + k));
                if (MODE == W8_ABS_W) {
#pragma GCC unroll 4
                    for (int r = 0; r < R; r++) {
                        __m256i p = _mm256_maddubs_epi16(wa[r], _mm256_sign_epi8(xv, wv[r]));
                        acc[r][t] = _mm256_add_epi32(acc[r][t], _mm256_madd_epi16(p, ones));
                    }
                } else {
                    __m256i xa = _mm256_abs_epi8(xv);
#pragma GCC unroll 4
                    for (int r = 0; r < R; r++) {
                        __m256i p = _mm256_maddubs_epi16(xa, _mm256_sign_epi8(wv[r], xv));
                        acc[r][t] = _mm256_add_epi32(acc[r][t], _mm256_madd_epi16(p, ones));
                    }
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 6
        for (int t = 0; t < TT; t++) st[t * IB_ROWS + r] += hsum_epi32(acc[r][t]);
}

/* One TT-token tile against all row strips: the tile's activations (TT x
 * klen bytes) stay in L1 while the weight rows stream from L2 (weights are
 * 1 byte per row and column, activations TT bytes per column). */
AI void w8_tokens(const int8_t *w, size_t ws, const int8_t *x, int64_t xs, int64_t klen, int64_t nr,
                  const int TT, const int MODE, int32_t *st)
{
    int64_t r = 0;
    if (TT == 1)   /* decode: four row streams in flight */
        for (; r + 4 <= nr; r += 4) w8_tile(w + (size_t)r * ws, ws, x, xs, klen, 4, 1, MODE, st + r);
    for (; r + 2 <= nr; r += 2) w8_tile(w + (size_t)r * ws, ws, x, xs, klen, 2, TT, MODE, st + r);
    if (r < nr) w8_tile(w + (size_t)r * ws, ws, x, xs, klen, 1, TT, MODE, st + r);
}

AI void w8_rows(const int8_t *w, size_t ws, const int8_t *x, int64_t xs, int64_t klen, int64_t nr,
                int64_t tch, const int MODE, int32_t *st)
{
    int64_t t = 0;
    for (; t + W8_TT <= tch; t += W8_TT)
        w8_tokens(w, ws, x + t * xs, xs, klen, nr, W8_TT, MODE, st + t * IB_ROWS);
    x += t * xs;
    st += t * IB_ROWS;
    switch (tch - t) {
    case 5: w8_tokens(w, ws, x, xs, klen, nr, 5, MODE, st); break;
    case 4: w8_tokens(w, ws, x, xs, klen, nr, 4, MODE, st); break;
    case 3: w8_tokens(w, ws, x, xs, klen, nr, 3, MODE, st); break;
    case 2: w8_tokens(w, ws, x, xs, klen, nr, 2, MODE, st); break;
    case 1: w8_tokens(w, ws, x, xs, klen, nr, 1, MODE, st); break;
    default: break;
    }
}

static void w8_rows_absw(const int8_t *w, size_t ws, const int8_t *x, int64_t xs, int64_t klen,
                         int64_t nr, int64_t tch, int32_t *st)
{
    w8_rows(w, ws, x, xs, klen, nr, tch, W8_ABS_W, st);
}

static void w8_rows_absx(const int8_t *w, size_t ws, const int8_t *x, int64_t xs, int64_t klen,
                         int64_t nr, int64_t tch, int32_t *st)
{
    w8_rows(w, ws, x, xs, klen, nr, tch, W8_ABS_X, st);
}

static void w8_rows_i16(const int8_t *w, size_t ws, const int8_t *x, int64_t xs, int64_t klen,
                        int64_t nr, int64_t tch, int32_t *st)
{
    w8_rows(w, ws, x, xs, klen, nr, tch, W8_I16, st);
}

/* The reference's float epilogue (kernels_ref.c ref_gemm_w8), same
 * operations in the same order, 8 rows at a time. */
static void w8_epilogue(const dsq_qview *v, const dsq_actbuf *a, int64_t nb, int64_t nr, int64_t t0,
                        int64_t tch, const int32_t *st, float *y)
{
    const int64_t rows = v->shape.rows;
    const float *sw = v->scales + nb;
    for (int64_t t = 0; t < tch; t++) {
        const int32_t *s = st + t * IB_ROWS;
        float *yo = y + (t0 + t) * rows + nb;
        int64_t i = 0;
        if (v->scheme->act == DSQ_ACT_INT8_STATIC) {
            const int32_t *rs = v->rowsum + nb;
            const __m256i off = _mm256_set1_epi32(v->act_offset);
            const __m256 as = _mm256_set1_ps(v->act_scale);
            for (; i + 8 <= nr; i += 8) {
                __m256i u = _mm256_sub_epi32(_mm256_loadu_si256((const __m256i *)(s + i)),
                                             _mm256_mullo_epi32(off, _mm256_loadu_si256((const __m256i *)(rs + i))));
                __m256 d = _mm256_mul_ps(as, _mm256_loadu_ps(sw + i));
                _mm256_storeu_ps(yo + i, _mm256_mul_ps(_mm256_cvtepi32_ps(u), d));
            }
            for (; i < nr; i++) {
                uint32_t u = (uint32_t)s[i] - (uint32_t)v->act_offset * (uint32_t)rs[i];
                yo[i] = (float)(int32_t)u * (v->act_scale * sw[i]);
            }
        } else {
            const float sx = a->scale[t0 + t];
            const __m256 vsx = _mm256_set1_ps(sx);
            for (; i + 8 <= nr; i += 8) {
                __m256 f = _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(s + i)));
                _mm256_storeu_ps(yo + i, _mm256_mul_ps(_mm256_mul_ps(f, _mm256_loadu_ps(sw + i)), vsx));
            }
            for (; i < nr; i++) yo[i] = ((float)s[i] * sw[i]) * sx;
        }
    }
}

static void avx2_gemm_w8(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1, float *y)
{
    const int64_t T = a->T, xs = a->kpad;
    const size_t ws = v->layout.row_bytes;
    const int64_t klen = (int64_t)ws;   /* zero padded in both operands, multiple of 64 */
    void (*rows_fn)(const int8_t *, size_t, const int8_t *, int64_t, int64_t, int64_t, int64_t,
                    int32_t *) = w8_rows_absw;
    if (v->scheme->act == DSQ_ACT_INT8_STATIC && has_i8_min(a->q, T * xs))
        rows_fn = has_i8_min((const int8_t *)(v->w + (size_t)n0 * ws), (n1 - n0) * (int64_t)ws)
                      ? w8_rows_i16 : w8_rows_absx;
    const int64_t kc = ib_kc(klen, 8192);   /* 64 rows x 8 KB: L2 */
    int32_t st[IB_TCH * IB_ROWS] __attribute__((aligned(32)));
    for (int64_t nb = n0; nb < n1; nb += IB_ROWS) {
        const int64_t nr = n1 - nb < IB_ROWS ? n1 - nb : IB_ROWS;
        const int8_t *wb = (const int8_t *)(v->w + (size_t)nb * ws);
        for (int64_t t0 = 0; t0 < T; t0 += IB_TCH) {
            const int64_t tch = T - t0 < IB_TCH ? T - t0 : IB_TCH;
            memset(st, 0, (size_t)tch * IB_ROWS * sizeof *st);
            for (int64_t k0 = 0; k0 < klen; k0 += kc)
                rows_fn(wb + k0, ws, a->q + t0 * xs + k0, xs, klen - k0 < kc ? klen - k0 : kc, nr, tch, st);
            w8_epilogue(v, a, nb, nr, t0, tch, st, y);
        }
    }
}

/* ---- w4 gemm ------------------------------------------------------------- */

/* Weights are unsigned codes u = q + 8 (0..15), so vpmaddubsw(u, x) is exact
 * (|pair| <= 2*15*127 = 3810) and eight of its results still fit s16: the
 * tile accumulates up to 256 columns in s16 (vpaddw), then widens with
 * vpmaddwd(.., 1) and reduces to one int32 per (row, token). At each group
 * end: acc_g = sum(u x) - 8 * (group sum of x), then
 * fsum = fma((float)acc_g, scale, fsum) lane-wise (vector FMA rounds like
 * fmaf): the reference's float steps per output.
 *
 * An R x TT tile keeps its R*TT <= 8 (row, token) sums in the lanes
 * r*TT + t of one vector. Shapes: 2x4 (prefill), 8x1 (decode), edges. */
AI __m256i w4_gsum_lanes(const int32_t *gs, const int R, const int TT)
{
    if (R == 2 && TT == 4) return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)gs));
    if (TT == 1) return _mm256_set1_epi32(gs[0]);
    int32_t b[8] = { 0 };
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) b[r * TT + t] = gs[t];
    return _mm256_loadu_si256((const __m256i *)b);
}

AI __m256 w4_scale_lanes(const float *s, int64_t ng, const int R, const int TT)
{
    if (R == 2 && TT == 4) return _mm256_set_m128(_mm_set1_ps(s[ng]), _mm_set1_ps(s[0]));
    float b[8] = { 0 };
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) b[r * TT + t] = s[r * ng];
    return _mm256_loadu_ps(b);
}

/* One 64-column step (k is a multiple of 64; HI: the high nibbles of the
 * 128-column block) of an R x TT tile into s16 accumulators acc[r*TT + t]. */
AI void w4_step(const uint8_t *wb, size_t ws, const int8_t *xk, int64_t kpad, const int HI,
                const int R, const int TT, __m256i acc[8])
{
    const __m256i m4 = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m256i c[8];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m256i b = _mm256_loadu_si256((const __m256i *)(wb + (size_t)r * ws + 32 * h));
            c[r] = _mm256_and_si256(HI ? _mm256_srli_epi16(b, 4) : b, m4);
        }
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++) {
            __m256i xv = _mm256_loadu_si256((const __m256i *)(xk + t * kpad + 32 * h));
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
                acc[r * TT + t] = _mm256_add_epi16(acc[r * TT + t], _mm256_maddubs_epi16(c[r], xv));
        }
    }
}

/* The 2x4 step in inline asm: GCC spills the accumulators of the C version
 * (codes, activations and eight accumulators need 13 of the 16 registers).
 * Same operations as w4_step. */
#define W4A_HALF(OFF)                                                                    \
    "vpmaddubsw " OFF "(%[x0]), %[c0], %[tp]\n\t vpaddw %[tp], %[a0], %[a0]\n\t"          \
    "vpmaddubsw " OFF "(%[x0]), %[c1], %[tp]\n\t vpaddw %[tp], %[a4], %[a4]\n\t"          \
    "vpmaddubsw " OFF "(%[x1]), %[c0], %[tp]\n\t vpaddw %[tp], %[a1], %[a1]\n\t"          \
    "vpmaddubsw " OFF "(%[x1]), %[c1], %[tp]\n\t vpaddw %[tp], %[a5], %[a5]\n\t"          \
    "vpmaddubsw " OFF "(%[x2]), %[c0], %[tp]\n\t vpaddw %[tp], %[a2], %[a2]\n\t"          \
    "vpmaddubsw " OFF "(%[x2]), %[c1], %[tp]\n\t vpaddw %[tp], %[a6], %[a6]\n\t"          \
    "vpmaddubsw " OFF "(%[x3]), %[c0], %[tp]\n\t vpaddw %[tp], %[a3], %[a3]\n\t"          \
    "vpmaddubsw " OFF "(%[x3]), %[c1], %[tp]\n\t vpaddw %[tp], %[a7], %[a7]\n\t"
#define W4A_LO(OFF)                                                                      \
    "vpand " OFF "(%[w0]), %[m4], %[c0]\n\t vpand " OFF "(%[w1]), %[m4], %[c1]\n\t"
#define W4A_HI(OFF)                                                                      \
    "vmovdqu " OFF "(%[w0]), %[c0]\n\t vmovdqu " OFF "(%[w1]), %[c1]\n\t"                  \
    "vpsrlw $4, %[c0], %[c0]\n\t vpsrlw $4, %[c1], %[c1]\n\t"                              \
    "vpand %[m4], %[c0], %[c0]\n\t vpand %[m4], %[c1], %[c1]\n\t"
#define W4A_OPS                                                                          \
    : [a0] "+x"(acc[0]), [a1] "+x"(acc[1]), [a2] "+x"(acc[2]), [a3] "+x"(acc[3]),        \
      [a4] "+x"(acc[4]), [a5] "+x"(acc[5]), [a6] "+x"(acc[6]), [a7] "+x"(acc[7]),        \
      [c0] "=&x"(c0), [c1] "=&x"(c1), [tp] "=&x"(tp)                                     \
    : [w0] "r"(wb), [w1] "r"(wb + ws), [x0] "r"(xk), [x1] "r"(xk + kpad),                \
      [x2] "r"(xk + 2 * kpad), [x3] "r"(xk + 3 * kpad), [m4] "x"(m4)                     \
    : "memory"

AI void w4_step24(const uint8_t *wb, size_t ws, const int8_t *xk, int64_t kpad, const int HI,
                  __m256i acc[8], __m256i m4)
{
    __m256i c0, c1, tp;
    if (HI)
        __asm__(W4A_HI("") W4A_HALF("") W4A_HI("32") W4A_HALF("32") W4A_OPS);
    else
        __asm__(W4A_LO("") W4A_HALF("") W4A_LO("32") W4A_HALF("32") W4A_OPS);
}
#undef W4A_HALF
#undef W4A_LO
#undef W4A_HI
#undef W4A_OPS

/* Exact int32 sums over columns [k, kstop) (at most 256: eight vpmaddubsw
 * results per s16 lane) of an R x TT tile, in lanes r*TT + t. */
AI __m256i w4_window(const uint8_t *wr, size_t ws, const int8_t *xr, int64_t kpad, int64_t k,
                     int64_t kstop, const int R, const int TT)
{
    __m256i acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_si256();
    if (R == 2 && TT == 4) {
        const __m256i m4 = _mm256_set1_epi8(0x0f);
        for (; k < kstop; k += 64) {
            const uint8_t *wb = wr + (k >> 7) * 64;
            if (k & 64) w4_step24(wb, ws, xr + k, kpad, 1, acc, m4);
            else w4_step24(wb, ws, xr + k, kpad, 0, acc, m4);
        }
    }
#pragma GCC unroll 1
    for (; k < kstop; k += 64) {
        const uint8_t *wb = wr + (k >> 7) * 64;
        if (k & 64) w4_step(wb, ws, xr + k, kpad, 1, R, TT, acc);
        else w4_step(wb, ws, xr + k, kpad, 0, R, TT, acc);
    }
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i A[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) A[i] = i < R * TT ? _mm256_madd_epi16(acc[i], ones) : _mm256_setzero_si256();
    return reduce8_epi32(A);
}

/* Columns [k0, k1) (multiples of 64) of an R x TT tile: rows n.. (weights
 * wr), tokens t0... Lane state between K blocks in st_i / st_f (8 lanes);
 * the first block starts from zero, the last writes y. */
AI void w4_tile(const dsq_qview *v, const dsq_actbuf *a, const uint8_t *wr, int64_t n, int64_t t0,
                int64_t k0, int64_t k1, const int R, const int TT, int32_t *st_i, float *st_f,
                float *y)
{
    const int64_t ng = v->layout.ngroups, gs = v->layout.gsize, kpad = a->kpad, T = a->T;
    const size_t ws = v->layout.row_bytes;
    const int8_t *xr = a->q + t0 * kpad;
    __m256i iacc = _mm256_setzero_si256();
    __m256 fs = _mm256_setzero_ps();
    if (k0 > 0) {
        iacc = _mm256_load_si256((const __m256i *)st_i);
        fs = _mm256_load_ps(st_f);
    }
    int64_t g = k0 / gs < ng - 1 ? k0 / gs : ng - 1;
    int64_t k = k0;
    while (k < k1) {
        const int64_t gend = g == ng - 1 ? kpad : (g + 1) * gs;
        const int64_t kend = gend < k1 ? gend : k1;
        for (; k < kend; k += 256)
            iacc = _mm256_add_epi32(iacc, w4_window(wr, ws, xr, kpad, k, k + 256 < kend ? k + 256 : kend, R, TT));
        k = kend;
        if (k == gend) {   /* group g complete */
            __m256i gsv = _mm256_slli_epi32(w4_gsum_lanes(a->gsum + g * T + t0, R, TT), 3);
            __m256 sv = w4_scale_lanes(v->scales + n * ng + g, ng, R, TT);
            fs = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(iacc, gsv)), sv, fs);
            iacc = _mm256_setzero_si256();
            g++;
        }
    }
    if (k1 < kpad) {
        _mm256_store_si256((__m256i *)st_i, iacc);
        _mm256_store_ps(st_f, fs);
        return;
    }
    /* y = fsum * s_x[t] */
    float f[8];
    _mm256_storeu_ps(f, fs);
    const int64_t rows = v->shape.rows;
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) y[(t0 + t) * rows + n + r] = f[r * TT + t] * a->scale[t0 + t];
}

/* Columns [k0, k1) of rows [nb, nb + nr) x chunk tokens [t0, t0 + tch); the
 * tiles are visited in the same order for every K block, tile i keeping its
 * state in st_i / st_f [8 * i]. Token tiles outer: a tile's activations
 * (TT x K bytes) stay in L1 while the rows' packed weights (half a byte per
 * column) stream from L2. */
static void w4_rows(const dsq_qview *v, const dsq_actbuf *a, int64_t nb, int64_t nr, int64_t t0,
                    int64_t tch, int64_t k0, int64_t k1, int32_t *st_i, float *st_f, float *y)
{
    const size_t ws = v->layout.row_bytes;
    int64_t i = 0;
#define W4T(R, TT) w4_tile(v, a, v->w + (size_t)(nb + r) * ws, nb + r, t0 + t, k0, k1, R, TT, \
                           st_i + 8 * i, st_f + 8 * i, y), i++
    if (tch == 1) {   /* decode: 8 rows share each activation load */
        const int64_t t = 0;
        int64_t r = 0;
        for (; r + 8 <= nr; r += 8) W4T(8, 1);
        for (; r + 2 <= nr; r += 2) W4T(2, 1);
        for (; r < nr; r++) W4T(1, 1);
        return;
    }
    for (int64_t t = 0; t < tch; t += 4) {
        int64_t r = 0;
        switch (tch - t < 4 ? tch - t : 4) {
        case 4: for (; r + 2 <= nr; r += 2) W4T(2, 4); if (r < nr) W4T(1, 4); break;
        case 3: for (; r + 2 <= nr; r += 2) W4T(2, 3); if (r < nr) W4T(1, 3); break;
        case 2: for (; r + 2 <= nr; r += 2) W4T(2, 2); if (r < nr) W4T(1, 2); break;
        default: for (; r + 2 <= nr; r += 2) W4T(2, 1); if (r < nr) W4T(1, 1); break;
        }
    }
#undef W4T
}

static void avx2_gemm_w4(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1, float *y)
{
    const int64_t T = a->T, kpad = a->kpad;
    const int64_t kc = ib_kc(kpad, 16384);   /* 64 rows x 8 KB: L2 */
    /* one 8-lane state per tile: at most 16 token tiles x 32 row pairs */
    int32_t st_i[8 * (IB_TCH / 4) * (IB_ROWS / 2)] __attribute__((aligned(32)));
    float st_f[8 * (IB_TCH / 4) * (IB_ROWS / 2)] __attribute__((aligned(32)));
    for (int64_t nb = n0; nb < n1; nb += IB_ROWS) {
        const int64_t nr = n1 - nb < IB_ROWS ? n1 - nb : IB_ROWS;
        for (int64_t t0 = 0; t0 < T; t0 += IB_TCH) {
            const int64_t tch = T - t0 < IB_TCH ? T - t0 : IB_TCH;
            for (int64_t k0 = 0; k0 < kpad; k0 += kc)
                w4_rows(v, a, nb, nr, t0, tch, k0, kpad - k0 < kc ? kpad : k0 + kc, st_i, st_f, y);
        }
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

/* ---- awq decode ----------------------------------------------------------- */

/* awq with one token: the codes minus the zero point, (q - z) in -15..15, are
 * made as signed bytes (and/shift, vpsubb), vpshufb moves each byte into the
 * top byte of a dword (the other three zero), and vcvtdq2ps turns it into
 * (q - z) * 2^24 exactly: 3 vector ops per 8 weights (pshufb, cvt, fma)
 * instead of widening in two steps. The 2^-24 goes into the group scale
 * (exact: a power of two). A 128-bit lane of a shuffled vector holds the
 * bytes 4i..4i+3 of its source lane, so activations are permuted once per
 * AWQ_CK-column chunk to match (xp). Activations of 2^64 or more in
 * magnitude (or Inf/NaN) take the generic path, so the 2^24 scaling cannot
 * overflow where the reference does not. */
#define AWQ_CK 8192

/* xp[32j + 8i + e] = x[32j + 4i + e] (e < 4), x[32j + 16 + 4i + e - 4] (e >= 4) */
static void awq_perm_x(const float *x, int64_t n, float *xp)
{
    for (int64_t j = 0; j < n; j += 32)
        for (int i = 0; i < 4; i++) {
            __m128 lo = _mm_loadu_ps(x + j + 4 * i), hi = _mm_loadu_ps(x + j + 16 + 4 * i);
            _mm256_store_ps(xp + j + 8 * i, _mm256_set_m128(hi, lo));
        }
}

#define AWQ_Z -128   /* shuffle index with bit 7 set: vpshufb writes 0 */
#define AWQ_SH(i)                                                                                  \
    _mm256_setr_epi8(AWQ_Z, AWQ_Z, AWQ_Z, 4 * i, AWQ_Z, AWQ_Z, AWQ_Z, 4 * i + 1, AWQ_Z, AWQ_Z,       \
                     AWQ_Z, 4 * i + 2, AWQ_Z, AWQ_Z, AWQ_Z, 4 * i + 3, AWQ_Z, AWQ_Z, AWQ_Z, 4 * i,  \
                     AWQ_Z, AWQ_Z, AWQ_Z, 4 * i + 1, AWQ_Z, AWQ_Z, AWQ_Z, 4 * i + 2, AWQ_Z, AWQ_Z,   \
                     AWQ_Z, 4 * i + 3)

/* 32 weights of R rows (q - z as bytes in d[r]) against xp[0..32): each
 * activation vector is loaded once for the R rows; two accumulators per row
 * (with two rows, four FMA chains: enough, the shuffles and conversions
 * bound the loop). */
AI void awq_fma32(const __m256i *d, const int R, const float *xp, const __m256i sh[4], __m256 a[2][2])
{
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const __m256 xv = _mm256_load_ps(xp + 8 * i);
#pragma GCC unroll 2
        for (int r = 0; r < R; r++)
            a[r][i & 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_shuffle_epi8(d[r], sh[i])), xv, a[r][i & 1]);
    }
}

/* Rows n, n+1 (R = 2) or n (R = 1) over 64-column units [u0, u1) of the
 * chunk starting at column c0 (xp holds its permuted activations); adds
 * the row sums to rs[]. */
AI void awq_rows(const dsq_qview *v, int64_t n, const int R, int64_t c0, int64_t u0, int64_t u1,
                 const float *xp, float *rs)
{
    const int64_t ng = v->layout.ngroups, gs = v->layout.gsize;
    const size_t ws = v->layout.row_bytes;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i sh[4] = { AWQ_SH(0), AWQ_SH(1), AWQ_SH(2), AWQ_SH(3) };
    __m256 tot[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };
    const int64_t glast = ng - 1;   /* group size 0: one group of cols columns */
    int64_t u = u0;
    for (int64_t g = (64 * u0) / gs < glast ? (64 * u0) / gs : glast; u < u1; g++) {
        /* groups before the last are multiples of 64 columns; the last one
         * (ragged, or the whole row) takes every remaining unit */
        int64_t ue = g == glast ? u1 : ((g + 1) * gs) >> 6;
        if (ue > u1) ue = u1;
        __m256 a[2][2];
        __m256i zv[2];
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            zv[r] = _mm256_set1_epi8((char)v->zeros[(n + r) * ng + g]);
            a[r][0] = a[r][1] = _mm256_setzero_ps();
        }
        /* whole 128-column blocks: one load gives the low and the high half */
        for (; (u & 1) == 0 && u + 2 <= ue; u += 2) {
            const int64_t k = 64 * u;
            const float *xu = xp + (k - c0);
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                __m256i lo[2], hi[2];
#pragma GCC unroll 2
                for (int r = 0; r < R; r++) {
                    const uint8_t *p = v->w + (size_t)(n + r) * ws + (size_t)(k >> 7) * 64 + 32 * h;
                    __m256i b = _mm256_loadu_si256((const __m256i *)p);
                    lo[r] = _mm256_sub_epi8(_mm256_and_si256(b, m4), zv[r]);
                    hi[r] = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4), zv[r]);
                }
                awq_fma32(lo, R, xu + 32 * h, sh, a);
                awq_fma32(hi, R, xu + 64 + 32 * h, sh, a);
            }
        }
        for (; u < ue; u++) {   /* a lone 64-column half (groups of 64 * odd) */
            const int64_t k = 64 * u;
            const float *xu = xp + (k - c0);
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                __m256i d[2];
#pragma GCC unroll 2
                for (int r = 0; r < R; r++) {
                    const uint8_t *p = v->w + (size_t)(n + r) * ws + (size_t)(k >> 7) * 64 + 32 * h;
                    __m256i b = _mm256_loadu_si256((const __m256i *)p);
                    d[r] = _mm256_sub_epi8(_mm256_and_si256((k & 64) ? _mm256_srli_epi16(b, 4) : b, m4), zv[r]);
                }
                awq_fma32(d, R, xu + 32 * h, sh, a);
            }
        }
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            const __m256 sv = _mm256_set1_ps(v->scales[(n + r) * ng + g] * 0x1p-24f);
            tot[r] = _mm256_fmadd_ps(_mm256_add_ps(a[r][0], a[r][1]), sv, tot[r]);
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) rs[r] += hsum_ps(tot[r]);
}

/* awq_perm_x of a chunk of n columns (a multiple of 64) of which the first
 * n_valid exist: the rest read as 0. The weights there are zero nibbles
 * (the layout pads rows to 128 columns), so a ragged tail is one more unit
 * instead of a scalar loop. */
static void awq_perm_x_pad(const float *x, int64_t n_valid, int64_t n, float *xp)
{
    const int64_t full = n_valid & ~(int64_t)31;
    awq_perm_x(x, full, xp);
    if (full < n) {   /* at most 64 columns left */
        float tmp[64] = { 0 };
        memcpy(tmp, x + full, (size_t)(n_valid - full) * sizeof *tmp);
        awq_perm_x(tmp, n - full, xp + full);
    }
}

static void awq_decode(const dsq_qview *v, const float *x, int64_t n0, int64_t n1, float *y)
{
    const int64_t cols = v->shape.cols, nu = (cols + 63) / 64;   /* 64-column units */
    float xp[AWQ_CK] __attribute__((aligned(32)));
    float rs[64];
    for (int64_t nb = n0; nb < n1; nb += 64) {
        const int64_t nr = n1 - nb < 64 ? n1 - nb : 64;
        for (int64_t r = 0; r < nr; r++) rs[r] = 0.0f;
        for (int64_t c0 = 0; c0 < nu * 64; c0 += AWQ_CK) {
            const int64_t c1 = c0 + AWQ_CK < nu * 64 ? c0 + AWQ_CK : nu * 64;
            awq_perm_x_pad(x + c0, (c1 < cols ? c1 : cols) - c0, c1 - c0, xp);
            int64_t r = 0;
            for (; r + 2 <= nr; r += 2) awq_rows(v, nb + r, 2, c0, c0 / 64, c1 / 64, xp, rs + r);
            if (r < nr) awq_rows(v, nb + r, 1, c0, c0 / 64, c1 / 64, xp, rs + r);
        }
        for (int64_t r = 0; r < nr; r++) y[nb + r] = rs[r];
    }
}

static void avx2_gemv_f(const dsq_qview *v, const float *x, int64_t T, int64_t n0, int64_t n1,
                        float *y)
{
    const int64_t rows = v->shape.rows, cols = v->shape.cols;
    switch (v->scheme->id) {
    case DSQ_SCHEME_F32: GEMV_KIND(K_F32); break;
    case DSQ_SCHEME_BF16: GEMV_KIND(K_BF16); break;
    default:
        if (avx2_absmax_bits(x, T * cols) < dsq_f32_bits(0x1p64f)) {
            for (int64_t t = 0; t < T; t++) awq_decode(v, x + t * cols, n0, n1, y + t * rows);
            break;
        }
        GEMV_KIND_R2(K_AWQ);
        break;
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
        } else if (v->scheme->id == DSQ_SCHEME_W4A8) {
            /* (u - 8) * s, as awq with every zero point 8 (MLA's absorbed
             * kv_b reads its rows through here at every decode step) */
            if ((k & 63) == 0)
                for (; k + 64 <= k1; k += 64) {
                    __m256 w[8];
                    awq_deq64(row, k, _mm256_set1_epi8(8), _mm256_set1_ps(v->scales[n * ng + k / gs]), w);
                    for (int i = 0; i < 8; i++) _mm256_storeu_ps(o + k + 8 * i, w[i]);
                }
        } else if (v->scheme->id == DSQ_SCHEME_W8A8_DYNAMIC || v->scheme->id == DSQ_SCHEME_W8A8) {
            const __m256 sv = _mm256_set1_ps(v->scales[n]);
            for (; k + 8 <= k1; k += 8)
                _mm256_storeu_ps(o + k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                                          _mm_loadl_epi64((const __m128i *)(row + k)))),
                                                      sv));
        }
        for (; k < k1; k++) o[k] = deq_scalar(v, row, n, k);
    }
}

/* bf16 prefill: blocks of 8 rows (about 112 KB at 7168 columns, cache
 * resident) through gemv_f, widening the weights on the fly; each block is
 * read from memory once for all tokens. */
static void avx2_gemm_bf16(const dsq_qview *v, const dsq_bfact *a, int64_t n0, int64_t n1, float *y)
{
    for (int64_t n = n0; n < n1; n += 8) avx2_gemv_f(v, a->x, a->T, n, n + 8 < n1 ? n + 8 : n1, y);
}

const dsq_kernels dsq_kernels_avx2_impl = {
    .name = "avx2",
    .absmax_bits = avx2_absmax_bits,
    .minmax = avx2_minmax,
    .quant_i8 = avx2_quant_i8,
    .qstats = dsq_qstats_scalar,   /* no vector versions yet */
    .qtrial = dsq_qtrial_scalar,
    .qtrials = dsq_qtrials_scalar,
    .sum_i8 = avx2_sum_i8,
    .f32_to_bf16 = avx2_f32_to_bf16,
    .split_bf16 = dsq_split_bf16_scalar,
    .gemm_bf16 = avx2_gemm_bf16,
    .gemm_w8 = avx2_gemm_w8,
    .gemm_w4 = avx2_gemm_w4,
    .gemv_f = avx2_gemv_f,
    .dequant_tile = avx2_dequant_tile,
};

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* x86 */
