/* bf16src.h - quantize rows given as BF16 source bits (the dtype of nearly
 * every DeepSeek-V3-class checkpoint) without a float32 copy where a scheme
 * has a direct path.
 *
 * The specification is "widen every value to f32 (exact) and call
 * sc->quantize"; dsq_quantize_bf16src gives the same blob bytes and the same
 * status for every scheme, parameter set and value (NaN, Inf, subnormals),
 * and falls back to exactly that where it has no direct path or the rows
 * hold a value the direct path does not take (tests/test_quant.c compares
 * the two over the scheme table). */
#ifndef DSQ_QUANT_BF16SRC_H
#define DSQ_QUANT_BF16SRC_H

#include "scheme.h"

#include <stdint.h>

/* src: nrows x shape->cols BF16 values (little-endian u16, any alignment),
 * rows row0.. of the tensor; blob, row0, nrows, shape, p, diag as for
 * sc->quantize. fbuf: nrows x cols floats of scratch for the fallback.
 * *widened is set to 1 when fbuf now holds the widened rows (the fallback
 * ran: callers that need the float rows, e.g. to name a non-finite value,
 * look there), else 0. Returns what sc->quantize returns. */
int dsq_quantize_bf16src(const dsq_scheme *sc, const uint8_t *src, int64_t row0, int64_t nrows,
                         const dsq_qshape *shape, const dsq_qparams *p, uint8_t *blob,
                         float *fbuf, int *widened, dsq_diag *diag);

/* The bf16 scheme's direct path (its row's quantize_bf16): the source rows
 * copied into the blob's W rows, padded with zeros. */
int dsq_bf16_quantize_bf16(const uint8_t *src, int64_t row0, int64_t nrows,
                           const dsq_qshape *shape, const dsq_qparams *p, uint8_t *blob,
                           dsq_diag *diag);

/* The reference: widen src into fbuf, then sc->quantize. */
int dsq_quantize_bf16src_ref(const dsq_scheme *sc, const uint8_t *src, int64_t row0,
                             int64_t nrows, const dsq_qshape *shape, const dsq_qparams *p,
                             uint8_t *blob, float *fbuf, dsq_diag *diag);

#endif
