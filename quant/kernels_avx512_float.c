/* kernels_avx512_float.c - AVX-512 kernels on float weights and on weights
 * dequantized to float: gemv for f32 / bf16 / awq-w4a16 / int8 codes,
 * the transposed gemv, dequantized tiles, and the bf16 prefill without a
 * bf16 dot product. */
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
#include "kernels_scalar.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

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
 * kernels_avx2_float.c gemv_tile (same structure, 16-wide). */
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
            for (int64_t j = k; j < cols; j++) s += dsq_deq_scalar(v, rp[r], n + r, j) * x[t * cols + j];
            y[t * rows + n + r] = s;
        }
}

/* One token against 12 float rows (f32 or bf16 widened), one accumulator
 * per row. Decode reads the matrix once, so its speed is how many lines
 * the core has in flight: a 12-row tile keeps 12 row streams open where
 * the 4-row tile kept 4. `build/bench/bench_quant R C 1 9 1` (one thread,
 * cache evicted), bf16, the 4-row build against this one:
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
        for (int64_t j = k; j < cols; j++) s += dsq_deq_scalar(v, rp[r], nr, j) * x[j];
        y[nr] = s;
    }
}

/* The 12-row tiles of rows [n0, n1), 12 m of them; returns the first row
 * left. Rows of fewer than GEMV_SEG_COLS columns: tile i takes rows
 * n0 + i + m r (r < 12), twelve segments of m consecutive rows, so each of
 * the 12 streams runs on through m rows instead of ending with its row (a
 * few KB); longer rows are streams long enough by themselves and take
 * consecutive rows. bench_engine -P, e16 BF16 layer, one thread, the two
 * builds interleaved: q_b_proj (1536 columns) 17.6-18.7 ->
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

void dsq_avx512_gemv_f(const dsq_qview *v, const float *x, int64_t T, int64_t n0, int64_t n1, float *y)
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

void dsq_avx512_gemv_t(const dsq_qview *v, int64_t n0, int64_t n1, const float *a, float *y)
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
        for (int64_t n = n0; n < n1; n++) s += a[n - n0] * dsq_deq_scalar(v, v->w + (size_t)n * v->layout.row_bytes, n, c);
        y[c] = s;
    }
}

void dsq_avx512_dequant_tile(const dsq_qview *v, int64_t n0, int64_t n1, int64_t k0, int64_t k1,
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
        for (; k < k1; k++) o[k] = dsq_deq_scalar(v, row, n, k);
    }
}

/* bf16 prefill without a bf16 dot product: blocks of 8 rows (about 112 KB
 * at 7168 columns, L2 resident) through gemv_f's 4-row x 2-token tiles,
 * widening the weights on the fly; the block is read from memory once for
 * all tokens. */
void dsq_avx512_gemm_bf16(const dsq_qview *v, const dsq_bfact *a, int64_t n0, int64_t n1, float *y)
{
    for (int64_t n = n0; n < n1; n += 8) dsq_avx512_gemv_f(v, a->x, a->T, n, n + 8 < n1 ? n + 8 : n1, y);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* x86 */
