/* actq.h - int8 activation quantization (per-token dynamic and static), and
 * awq-w4a16's int16 one (per 128-column block).
 *
 * The gemm of an int scheme quantizes its float activations with these; the
 * engine may also call them directly (e.g. to quantize one input once and
 * feed it to several matrices, or to report activation quantization error).
 *
 * Per token t (dynamic, symmetric; msModelSlim W8A8_DYNAMIC / compressed-
 * tensors "token" strategy):
 *     amax = max_k |x[t,k]|
 *     s[t] = amax/127, raised to DSQ_QSCALE_MIN when smaller (NaN stays NaN,
 *            so non-finite activations give NaN outputs instead of garbage)
 *     q[t,k] = clamp(rint(x[t,k] / s[t]), -127, 127)
 * Static (msModelSlim W8A8 input_scale / input_offset):
 *     q[t,k] = clamp(rint(x[t,k] / act_scale) + act_offset, -128, 127)
 * Clamping happens in float before the integer conversion, so +-Inf saturate
 * and NaN maps to the low end (never undefined behaviour). Every kernel level
 * (ref/avx2/avx512/neon) produces identical codes.
 */
#ifndef DSQ_ACTQ_H
#define DSQ_ACTQ_H

#include <stddef.h>
#include <stdint.h>

#define DSQ_ACTQ_PAD 128   /* codes rows are padded with zeros to a multiple of this */

/* Quantize T tokens of x ([T][cols] floats) per token. q is [T][ldq] int8
 * (ldq >= cols; columns [cols, ldq) are set to 0); scale is [T]. */
void dsq_actq_token(const float *x, int64_t T, int64_t cols, int8_t *q, int64_t ldq,
                    float *scale);

/* Static per-tensor quantization with a given scale (> 0) and integer offset. */
void dsq_actq_static(const float *x, int64_t T, int64_t cols, int8_t *q, int64_t ldq,
                     float act_scale, int32_t act_offset);

/* Group sums of codes: gsum[g*ldg + t] = sum of q[t, k] over group g of
 * gsize columns (g < ngroups; the last group runs to ldq, which is zero
 * padded). Used by int4 kernels that store weights as unsigned codes. */
void dsq_actq_group_sums(const int8_t *q, int64_t T, int64_t ldq, int64_t gsize,
                         int64_t ngroups, int32_t *gsum, int64_t ldg);

/* int16 activations per 128-column block (awq-w4a16; kernels.h
 * dsq_awq16_act): n (1..128) floats of x -> q[0..128) and *xs:
 *     amax = max_k |x_k|;  xs = amax / 32767, raised to DSQ_QSCALE_MIN when
 *     smaller, NaN when amax is Inf or NaN (the outputs then are NaN, as
 *     for int8 activations);  q_k = clamp(rint(x_k / xs), -32767, 32767),
 *     0 for k >= n and in a non-finite block.
 * Every level's awq16_prep gives the same codes. */
void dsq_actq16_block(const float *x, int64_t n, int16_t q[128], float *xs);

/* x rounded to those codes, as floats: out[t][k] = q_k * xs_b (f32
 * product) for T tokens of cols columns; out may be x. The float paths of
 * awq-w4a16 multiply this. */
void dsq_actq16_fake(const float *x, int64_t T, int64_t cols, float *out);

/* Derive per-tensor static params from per-input-channel statistics (see
 * dsq_qparams in scheme.h). mn/mx: [cols] min and max, or absmax: [cols]
 * (then symmetric, offset 0). div: optional [cols] divisors (in_scale).
 * Returns 0, or -1 when nothing usable was given or a value is non-finite. */
int dsq_actq_static_params(const float *mn, const float *mx, const float *absmax,
                           const float *div, int64_t cols, float *scale, int32_t *offset);

#endif
