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

#include "kernels_x86.h"

/* The levels' tables: this file's families (kernels_avx512_quant.c, _w8.c, _w4.c,
 * _float.c) and the awq / awq16 / bf16 files. */
#define Z_LEVEL(NAME, SPLIT, GEMM_BF16, GEMM_AWQ)                                   \
    {                                                                               \
        .name = NAME, .bf16_split = SPLIT, .absmax_bits = dsq_avx512_absmax_bits,            \
        .minmax = dsq_avx512_minmax, .quant_i8 = dsq_avx512_quant_i8, .sum_i8 = dsq_avx512_sum_i8,             \
        .qstats = dsq_avx512_qstats, .qtrial = dsq_avx512_qtrial, .qtrials = dsq_avx512_qtrials,               \
        .f32_to_bf16 = dsq_avx512_f32_to_bf16, .split_bf16 = dsq_avx512_split_bf16,                   \
        .gemm_bf16 = GEMM_BF16, .gemm_awq = GEMM_AWQ, .gemm_w8 = dsq_avx512_gemm_w8,         \
        .gemm_w4 = dsq_avx512_gemm_w4, .gemv_awq = dsq_avx512awq_gemv,                       \
        .gemv_f = dsq_avx512_gemv_f, .dequant_tile = dsq_avx512_dequant_tile, .gemv_i = dsq_avx512_gemv_f,     \
        .gemv_t = dsq_avx512_gemv_t, .awq16_prep = dsq_avx512awq16_prep,                     \
        .gemv_awq16 = dsq_avx512awq16_gemv,                                         \
    }

const dsq_kernels dsq_kernels_avx512_impl = Z_LEVEL("avx512", 0, dsq_avx512_gemm_bf16, NULL);
/* the same level with the vdpbf16ps bf16 prefill (kernels_avx512bf16.c) and
 * awq gemm (kernels_avx512awq.c) */
const dsq_kernels dsq_kernels_avx512bf16_impl =
    Z_LEVEL("avx512bf16", 1, dsq_avx512bf16_gemm, dsq_avx512awq_gemm);
#undef Z_LEVEL

#endif /* x86 */
