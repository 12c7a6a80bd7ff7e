/* kernels_scalar.h - one weight of a quantized (or f32 / bf16) matrix as
 * float: the element access of the vector kernels' scalar tails (columns
 * past the last full vector) in kernels_avx2_float.c, kernels_avx512_float.c
 * and kernels_neon.c. kernels_ref.c keeps its own (ref_deq), so the
 * reference the levels are tested against does not share their code.
 * Internal to quant/; include it after the file's target pragma. */
#ifndef DSQ_KERNELS_SCALAR_H
#define DSQ_KERNELS_SCALAR_H

#include "kernels.h"
#include "dsq_mem.h"

#include <string.h>

/* Weight k of row n; row: that row's bytes. int4 codes: (q - z) * scale of
 * the group, z the stored zero point (awq-w4a16) or 8 (w4a8: offset-binary
 * codes); int8: q * the row's scale. */
static inline __attribute__((always_inline)) float dsq_deq_scalar(const dsq_qview *v, const uint8_t *row, int64_t n,
                                                                  int64_t k)
{
    switch (v->scheme->id) {
    case DSQ_SCHEME_F32: { float f; memcpy(&f, row + 4 * k, 4); return f; }
    case DSQ_SCHEME_BF16: return dsq_bf16_to_f32(dsq_load_u16le(row + 2 * k));
    case DSQ_SCHEME_W8A8_DYNAMIC:
    case DSQ_SCHEME_W8A8: return (float)(int8_t)row[k] * v->scales[n];
    default: {
        size_t i = (size_t)n * (size_t)v->layout.ngroups + (size_t)(k / v->layout.gsize);
        int z = v->zeros ? (int)v->zeros[i] : 8;
        return (float)(dsq_i4_get(row, k) - z) * v->scales[i];
    }
    }
}

#endif
