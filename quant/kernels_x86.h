/* kernels_x86.h - the families of the AVX2 and AVX-512 kernel levels, one
 * file each, assembled into their dsq_kernels tables by kernels_avx2.c and
 * kernels_avx512.c. Each function is the table entry of the same name
 * (kernels.h says what it computes); each file is compiled for its ISA by a
 * target pragma, and called only after the CPU check. Not a public API. */
#ifndef DSQ_KERNELS_X86_H
#define DSQ_KERNELS_X86_H

#include "kernels.h"

#if defined(__x86_64__) || defined(__i386__)

/* ---- AVX2 + FMA ---------------------------------------------------------- */

/* kernels_avx2_quant.c */
uint32_t dsq_avx2_absmax_bits(const float *x, int64_t n);
void     dsq_avx2_minmax(const float *x, int64_t n, float *mn, float *mx);
void     dsq_avx2_quant_i8(const float *x, int64_t n, float scale, int32_t add, int32_t lo, int32_t hi, int8_t *q);
int32_t  dsq_avx2_sum_i8(const int8_t *q, int64_t n);
void     dsq_avx2_f32_to_bf16(const float *x, int64_t n, uint16_t *out);
/* kernels_avx2_w8.c, kernels_avx2_w4.c */
void dsq_avx2_gemm_w8(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1, float *y);
void dsq_avx2_gemm_w4(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1, float *y);
/* kernels_avx2_float.c */
void dsq_avx2_gemv_f(const dsq_qview *v, const float *x, int64_t T, int64_t n0, int64_t n1, float *y);
void dsq_avx2_dequant_tile(const dsq_qview *v, int64_t n0, int64_t n1, int64_t k0, int64_t k1, float *out,
                           int64_t ldo);
void dsq_avx2_gemm_bf16(const dsq_qview *v, const dsq_bfact *a, int64_t n0, int64_t n1, float *y);
/* kernels_avx2_awq.c: y[n0..n1) for one token x of an awq-w4a16 matrix;
 * |x| below 2^64 (gemv_f checks). */
void dsq_avx2_awq_decode(const dsq_qview *v, const float *x, int64_t n0, int64_t n1, float *y);

/* ---- AVX-512 (F, BW, VL) + VNNI ------------------------------------------ */

/* kernels_avx512_quant.c */
uint32_t dsq_avx512_absmax_bits(const float *x, int64_t n);
void     dsq_avx512_minmax(const float *x, int64_t n, float *mn, float *mx);
void     dsq_avx512_quant_i8(const float *x, int64_t n, float scale, int32_t add, int32_t lo, int32_t hi,
                             int8_t *q);
void     dsq_avx512_qstats(const float *x, const float *c, int64_t n, float scale, float lo, float hi,
                           double out[4]);
void     dsq_avx512_qtrial(const float *x, const float *c, int64_t n, float inv, float lo, float hi, double out[3]);
void     dsq_avx512_qtrials(const float *x, const float *c, int64_t n, int m, const float *inv, const float *lo,
                            const float *hi, double (*out)[3]);
int32_t  dsq_avx512_sum_i8(const int8_t *q, int64_t n);
void     dsq_avx512_f32_to_bf16(const float *x, int64_t n, uint16_t *out);
void     dsq_avx512_split_bf16(const float *x, int64_t n, uint16_t *hi, uint16_t *lo);
/* kernels_avx512_w8.c, kernels_avx512_w4.c */
void dsq_avx512_gemm_w8(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1, float *y);
void dsq_avx512_gemm_w4(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1, float *y);
/* kernels_avx512_float.c */
void dsq_avx512_gemv_f(const dsq_qview *v, const float *x, int64_t T, int64_t n0, int64_t n1, float *y);
void dsq_avx512_gemv_t(const dsq_qview *v, int64_t n0, int64_t n1, const float *a, float *y);
void dsq_avx512_dequant_tile(const dsq_qview *v, int64_t n0, int64_t n1, int64_t k0, int64_t k1, float *out,
                             int64_t ldo);
void dsq_avx512_gemm_bf16(const dsq_qview *v, const dsq_bfact *a, int64_t n0, int64_t n1, float *y);

#endif /* x86 */
#endif
