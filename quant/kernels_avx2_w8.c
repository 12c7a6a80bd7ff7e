/* kernels_avx2_w8.c - AVX2 int8 x int8 gemm (w8a8, w8a8-dynamic), exact with
 * the sign trick (kernels_avx2.c says how); blocking in kernels_avx2_int.h. */
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

void dsq_avx2_gemm_w8(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1, float *y)
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

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* x86 */
