/* export_read.h - turn a quantized linear of a serving export (AscendV1,
 * AutoAWQ GEMM, compressed-tensors; formats/export_detect.h) into a dsq
 * scheme blob (quant/scheme.h), so the engine runs exports exactly like
 * a .dsq.
 *
 * One reader per storage type, in a table (export_read.c):
 *   Ascend W8A8_DYNAMIC  -> w8a8-dynamic   (w = q * weight_scale)
 *   Ascend W8A8 (static) -> w8a8           act_scale = input_scale,
 *        act_offset = input_offset, s_w = deq_scale / input_scale (the f32
 *        value whose product with input_scale rounds back to deq_scale),
 *        bias = (quant_bias + input_offset * sum_k q) * deq_scale
 *   Ascend W4A8_DYNAMIC  -> w4a8 per channel (int4 pairs along N; scale_bias
 *        must equal 8 * sum q*s, which also catches a wrong nibble order)
 *   AutoAWQ GEMM         -> awq-w4a16 (transposed, AWQ_ORDER nibbles, F16 scales)
 *   CT pack-quantized    -> awq-w4a16 (code u = q + 8; zero = zp + 8, or 8
 *        when symmetric)
 *   CT int-quantized     -> w8a8-dynamic (int8) / w4a8 (int4 in int8, with
 *        int8 activations) / awq-w4a16 with zero 8 (int4 weight only)
 * Every tensor is checked (name, dtype, shape, value ranges) as hostile input;
 * errors name the shard file and the tensor. */
#ifndef DSQ_EXPORT_READ_H
#define DSQ_EXPORT_READ_H

#include "dsq_error.h"
#include "export_detect.h"
#include "safetensors.h"

#include <stddef.h>
#include <stdint.h>

/* Read linear `module` ("model.layers.0.self_attn.o_proj") of shape
 * [rows = out_features, cols = in_features].
 * Returns 1 with *blob (dsq_aligned_alloc'd, caller frees) of *blob_size
 * bytes when it is quantized; *bias is set (malloc'd, caller frees) only
 * when a bias is folded into the stored tensors (Ascend W8A8 quant_bias) and
 * is nonzero. Returns 0 when the module is stored as float (the caller reads
 * "<module>.weight" as for any checkpoint). Negative dsq_status on a
 * contract violation. */
int dsq_export_read_linear(const dsq_export_info *x, const dsq_st_model *st, const char *module,
                           int64_t rows, int64_t cols, uint8_t **blob, size_t *blob_size,
                           float **bias, dsq_diag *d);

/* Shape of a quantized linear from its stored tensors (for tools that list
 * an export without a config). Returns 1 and sets rows/cols when module is
 * quantized, 0 when float, negative on error. */
int dsq_export_linear_shape(const dsq_export_info *x, const dsq_st_model *st, const char *module,
                            int64_t *rows, int64_t *cols, dsq_diag *d);

/* If tensor name is the primary tensor of a quantized linear of this export
 * ("<m>.weight" of an int8 linear, "<m>.qweight", "<m>.weight_packed"),
 * copy the module name into buf and return 1; else 0. */
int dsq_export_module_of(const dsq_export_info *x, const dsq_st_tensor *t, char *buf, size_t n);

#endif
