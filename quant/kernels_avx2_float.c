/* kernels_avx2_float.c - AVX2 kernels on float weights and on weights
 * dequantized to float: gemv for f32 / bf16 / awq-w4a16 (one-token awq in
 * kernels_avx2_awq.c), dequantized tiles, and the bf16 prefill. */
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
#include "kernels_scalar.h"

#include <math.h>
#include <string.h>

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
            for (int64_t j = k; j < cols; j++) s += dsq_deq_scalar(v, rp[r], n + r, j) * x[t * cols + j];
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

void dsq_avx2_gemv_f(const dsq_qview *v, const float *x, int64_t T, int64_t n0, int64_t n1,
                        float *y)
{
    const int64_t rows = v->shape.rows, cols = v->shape.cols;
    switch (v->scheme->id) {
    case DSQ_SCHEME_F32: GEMV_KIND(K_F32); break;
    case DSQ_SCHEME_BF16: GEMV_KIND(K_BF16); break;
    default:
        if (dsq_avx2_absmax_bits(x, T * cols) < dsq_f32_bits(0x1p64f)) {
            for (int64_t t = 0; t < T; t++) dsq_avx2_awq_decode(v, x + t * cols, n0, n1, y + t * rows);
            break;
        }
        GEMV_KIND_R2(K_AWQ);
        break;
    }
}
#undef GEMV_KIND
#undef GEMV_KIND_R2

void dsq_avx2_dequant_tile(const dsq_qview *v, int64_t n0, int64_t n1, int64_t k0, int64_t k1,
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
        for (; k < k1; k++) o[k] = dsq_deq_scalar(v, row, n, k);
    }
}

/* bf16 prefill: blocks of 8 rows (about 112 KB at 7168 columns, cache
 * resident) through gemv_f, widening the weights on the fly; each block is
 * read from memory once for all tokens. */
void dsq_avx2_gemm_bf16(const dsq_qview *v, const dsq_bfact *a, int64_t n0, int64_t n1, float *y)
{
    for (int64_t n = n0; n < n1; n += 8) dsq_avx2_gemv_f(v, a->x, a->T, n, n + 8 < n1 ? n + 8 : n1, y);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* x86 */
