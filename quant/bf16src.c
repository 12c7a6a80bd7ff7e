/* bf16src.c - quantize from BF16 source rows (bf16src.h).
 *
 * A scheme's direct path is its table row's quantize_bf16 (so far the bf16
 * scheme's, below: the row points here). A finite BF16 value widened to
 * f32 is exact and rounds back to the same bits (round-to-nearest-even of
 * a representable value is the value; subnormals and signed zeros
 * included), so the blob's W rows are the source bytes plus zero padding.
 * Widening and narrowing each value cost ~11% of a w8a8-dynamic
 * conversion's CPU (perf, the 16-expert layer: the embedding and head stay
 * bf16), and the 4-byte float copy doubled the bytes that went through the
 * cache. Rows holding a NaN or an Inf, and any in_scale, take the reference
 * path: it owns the error message and the allow_nonfinite rewrite. */
#include "bf16src.h"
#include "kernels.h"
#include "dsq_mem.h"

#include <string.h>

/* bf16 -> f32 (exact), 16 at a time through arrays so GCC vectorizes it
 * at -O2 (a plain loop of dsq_load_u16le does not; as formats/st_read.c). */
static void widen(const uint8_t *restrict src, float *restrict dst, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint16_t h[16];
        uint32_t u[16];
        memcpy(h, src + 2 * i, sizeof h);
        for (int k = 0; k < 16; k++) u[k] = (uint32_t)h[k] << 16;
        memcpy(dst + i, u, sizeof u);
    }
    for (; i < n; i++) dst[i] = dsq_bf16_to_f32(dsq_load_u16le(src + 2 * i));
}

int dsq_quantize_bf16src_ref(const dsq_scheme *sc, const uint8_t *src, int64_t row0,
                             int64_t nrows, const dsq_qshape *shape, const dsq_qparams *p,
                             uint8_t *blob, float *fbuf, dsq_diag *diag)
{
    if (!sc || !shape || (!src && nrows > 0) || (!fbuf && nrows > 0))
        return dsq_fail(diag, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "null argument");
    /* The row range is checked before src is read (sc->quantize checks it
     * again, with the same message). */
    dsq_qlayout L;
    int rc = dsq_quantize_check(sc, row0, nrows, shape, p, &L, diag);
    if (rc < 0) return rc;
    widen(src, fbuf, (size_t)nrows * (size_t)shape->cols);
    return sc->quantize(fbuf, row0, nrows, shape, p, blob, diag);
}

/* Nonzero when any of the n BF16 values (exponent all ones) is NaN or Inf.
 * Four values per u64: a lane of (x & 0x7f80) is at most 0x7f80, so adding
 * 0x0080 sets the lane's top bit exactly when it is 0x7f80, without a carry
 * into the next lane. The compiler vectorizes the loop. */
static int any_nonfinite(const uint8_t *src, size_t n)
{
    const uint64_t e = 0x7f807f807f807f80ull, one = 0x0080008000800080ull,
                   top = 0x8000800080008000ull;
    size_t i = 0;
    uint64_t acc = 0;
    for (; i + 4 <= n; i += 4) acc |= ((dsq_load_u64le(src + 2 * i) & e) + one) & top;
    for (; i < n; i++) acc |= (dsq_load_u16le(src + 2 * i) & 0x7f80u) == 0x7f80u;
    return acc != 0;
}

int dsq_bf16_quantize_bf16(const uint8_t *src, int64_t row0, int64_t nrows,
                           const dsq_qshape *shape, const dsq_qparams *p, uint8_t *blob,
                           dsq_diag *diag)
{
    const dsq_scheme *sc = dsq_scheme_by_id(DSQ_SCHEME_BF16);
    dsq_qlayout L;
    int rc = dsq_quantize_check(sc, row0, nrows, shape, p, &L, diag);
    if (rc < 0) return rc;
    if (!blob) return dsq_fail(diag, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "null argument");
    if (row0 == 0) dsq_qblob_write_header(blob, sc, shape, &L, 0, 0.0f, 0);
    const size_t used = (size_t)shape->cols * 2;
    for (int64_t i = 0; i < nrows; i++) {
        uint8_t *o = blob + L.w_off + (size_t)(row0 + i) * L.row_bytes;
        memcpy(o, src + (size_t)i * used, used);
        memset(o + used, 0, L.row_bytes - used);
    }
    return DSQ_OK;
}

/* Rows widened and quantized per run of about this many float bytes: the
 * widened rows are then read back from L1 / L2 by sc->quantize, where a
 * whole block (64 rows of 7168: 1.8 MB) went through L3 and memory between
 * the two passes. */
#define WIDEN_RUN_BYTES (64u << 10)

/* The reference's bytes, status and fbuf, a run of rows at a time: rows
 * are quantized independently (row row0 + i from fbuf row i, the header
 * with row 0), so the pieces give the blob that one call gives, and the
 * first failing row is the one the single call stops at (its message
 * names the tensor row, not the run's). */
static int widen_quantize(const dsq_scheme *sc, const uint8_t *src, int64_t row0, int64_t nrows,
                          const dsq_qshape *shape, const dsq_qparams *p, uint8_t *blob,
                          float *fbuf, dsq_diag *diag)
{
    if (!sc || !shape || (!src && nrows > 0) || (!fbuf && nrows > 0))
        return dsq_fail(diag, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "null argument");
    dsq_qlayout L;
    int rc = dsq_quantize_check(sc, row0, nrows, shape, p, &L, diag);
    if (rc < 0) return rc;
    const size_t cols = (size_t)shape->cols;
    int64_t run = cols ? (int64_t)(WIDEN_RUN_BYTES / (cols * sizeof(float))) : nrows;
    if (run < 1) run = 1;
    if (nrows == 0) return sc->quantize(fbuf, row0, 0, shape, p, blob, diag);
    for (int64_t i = 0; i < nrows; i += run) {
        int64_t m = nrows - i < run ? nrows - i : run;
        widen(src + 2 * (size_t)i * cols, fbuf + (size_t)i * cols, (size_t)m * cols);
        rc = sc->quantize(fbuf + (size_t)i * cols, row0 + i, m, shape, p, blob, diag);
        if (rc < 0) {
            /* callers look for the bad value in all of fbuf */
            size_t done = (size_t)(i + m) * cols;
            widen(src + 2 * done, fbuf + done, (size_t)nrows * cols - done);
            return rc;
        }
    }
    return rc;
}

int dsq_quantize_bf16src(const dsq_scheme *sc, const uint8_t *src, int64_t row0, int64_t nrows,
                         const dsq_qshape *shape, const dsq_qparams *p, uint8_t *blob,
                         float *fbuf, int *widened, dsq_diag *diag)
{
    *widened = 0;
    if (sc && sc->quantize_bf16 && shape && src && !(p && p->in_scale)) {
        /* The row range is checked before src is read (as the reference
         * does): a range outside the shape must fail, not read past src. */
        dsq_qlayout L;
        int rc = dsq_quantize_check(sc, row0, nrows, shape, p, &L, diag);
        if (rc < 0) return rc;
        if (!any_nonfinite(src, (size_t)nrows * (size_t)shape->cols))
            return sc->quantize_bf16(src, row0, nrows, shape, p, blob, diag);
    }
    *widened = 1;
    return widen_quantize(sc, src, row0, nrows, shape, p, blob, fbuf, diag);
}
