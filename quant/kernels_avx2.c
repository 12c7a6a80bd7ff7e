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

#include "kernels_x86.h"

/* The level's table: kernels_avx2_quant.c, _w8.c, _w4.c, _float.c (and _awq.c
 * under gemv_f). */
const dsq_kernels dsq_kernels_avx2_impl = {
    .name = "avx2",
    .absmax_bits = dsq_avx2_absmax_bits,
    .minmax = dsq_avx2_minmax,
    .quant_i8 = dsq_avx2_quant_i8,
    .qstats = dsq_qstats_scalar,   /* no vector versions yet */
    .qtrial = dsq_qtrial_scalar,
    .qtrials = dsq_qtrials_scalar,
    .sum_i8 = dsq_avx2_sum_i8,
    .f32_to_bf16 = dsq_avx2_f32_to_bf16,
    .split_bf16 = dsq_split_bf16_scalar,
    .gemm_bf16 = dsq_avx2_gemm_bf16,
    .gemm_w8 = dsq_avx2_gemm_w8,
    .gemm_w4 = dsq_avx2_gemm_w4,
    .gemv_f = dsq_avx2_gemv_f,
    .dequant_tile = dsq_avx2_dequant_tile,
};

#endif /* x86 */
