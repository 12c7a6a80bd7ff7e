/* export_read.h - the engine's reader of serving exports (AscendV1, AutoAWQ
 * GEMM, compressed-tensors): a quantized linear becomes a dsq scheme blob
 * (quant/scheme.h) by its format's unpacker (xfmt/xfmt.h), so the engine runs
 * exports exactly like a .dsq. Every tensor is checked (name, dtype, shape,
 * value ranges) as hostile input; errors name the shard file and the
 * tensor. */
#ifndef DSQ_EXPORT_READ_H
#define DSQ_EXPORT_READ_H

#include "dsq_error.h"
#include "safetensors.h"
#include "xfmt.h"

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
