/* kernels_avx2_int.h - what the AVX2 kernel files share: horizontal sums
 * and the int gemms' blocking. Include it after the file's target pragma
 * (kernels_avx2_quant.c shows the block); not a public API. */
#ifndef DSQ_KERNELS_AVX2_INT_H
#define DSQ_KERNELS_AVX2_INT_H

#include "kernels_x86.h"

#include <immintrin.h>

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
static inline int64_t ib_kc(int64_t klen, int64_t kmax)
{
    int64_t nb = (klen + kmax - 1) / kmax;
    int64_t kc = (klen + nb - 1) / nb;
    return (kc + 63) / 64 * 64;
}


#endif
