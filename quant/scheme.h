/* scheme.h - quantization schemes: one scheme = one table row.
 *
 * A scheme turns a float32 weight matrix W [rows = out_features, cols =
 * in_features] into ONE contiguous, position-independent, little-endian
 * blob (what the .dsq container stores and the engine mmaps), and knows how
 * to dequantize it and multiply it with activations. Every fast kernel has a
 * scalar reference twin (gemm_ref) that is the specification; tests loop over
 * the table (tests/test_quant.c), so a new scheme is one new row.
 *
 * ===================================================================
 * Scheme ids (PINNED: stored in .dsq files; never renumber or reuse)
 * ===================================================================
 *   0 f32           float32 passthrough
 *   1 bf16          bfloat16 passthrough (round to nearest even from f32)
 *   2 w8a8-dynamic  int8 sym per-output-channel W, int8 per-token dynamic act
 *   3 w8a8          int8 sym per-output-channel W, int8 STATIC per-tensor
 *                   asymmetric act (msModelSlim W8A8)
 *   4 w4a8          int4 sym W (per channel or group-wise), int8 per-token act
 *   5 awq-w4a16     int4 ASYMMETRIC W, uint4 zero points, groups (AutoAWQ),
 *                   16-bit activations: int16 per 128 columns (alias "w4a16")
 *   6 (reserved for f16)
 *
 * ===================================================================
 * Quantization math (all rounding is round-half-to-even, i.e. rintf / torch.round;
 * divisions are true IEEE divisions, as in the reference tools)
 * ===================================================================
 * Notation: a "group" is a run of input columns of one output row that shares
 * a scale. group_size 0 = one group per row (per output channel). Otherwise
 * group g of row n covers columns [g*G, min((g+1)*G, cols)); the LAST GROUP
 * IS RAGGED when cols % G != 0: it covers only the remaining real columns and
 * its scale/zero are computed over those columns only.
 *
 * Symmetric (w8a8*, w4a8), QMAX = 127 (int8) or 7 (int4):
 *     amax  = max |w| over the group        (after in_scale, after clipping)
 *     scale = max(amax / QMAX, DSQ_QSCALE_MIN)    never 0, never NaN
 *     q     = clamp(rint(w / scale), QLO, QMAX)   QLO = -127 (int8), -8 (int4)
 *     deq   = q * scale
 *   (int8 codes stay symmetric, -128 unused; kernels still compute exactly if a
 *   file holds -128.)
 * Asymmetric AutoAWQ (awq-w4a16), codes 0..15, min/max over the group
 * widened to include 0 (min <= 0 <= max; identical to AutoAWQ whenever a group
 * has both signs, and keeps one-signed groups within scale/2):
 *     scale = max(max - min, 1e-5) / 15
 *     zero  = clamp(-rint(min / scale), 0, 15)
 *     q     = clamp(rint(w / scale) + zero, 0, 15)
 *     deq   = (q - zero) * scale
 * Searched int4 parameters (dsq_qparams.range_search, --search; the
 * default for w4a8, opt-in for awq-w4a16: dsq_qsearch_mode): scale (and
 * zero) come from a weighted least-squares search started at the values
 * above (quant/qsearch.c) instead; codes are still
 * clamp(rint(w / scale) (+ zero)) and deq as above, so nothing below changes.
 * Per-token int8 activations (w8a8-dynamic, w4a8):
 *     s_x = max(amax_t / 127, DSQ_QSCALE_MIN);  q_x = clamp(rint(x / s_x), -127, 127)
 * awq-w4a16 activations (every level, every T; actq.h dsq_actq16_block):
 *     per token and 128-column block b (the last one ragged):
 *     s_b = max(amax_b / 32767, DSQ_QSCALE_MIN) (NaN when the block holds an
 *     Inf or NaN);  q_x = clamp(rint(x / s_b), -32767, 32767)
 *   15 bits against the block's largest |x|: finer than the fp16 that the
 *   serving engines' AWQ kernels multiply, wherever an element is within
 *   1/16 of its block's maximum, and never coarser than 2^-16 of it. Why
 *   not f32: the int16 codes multiply the int4 codes exactly on VNNI
 *   (vpdpwssd, 32 products per instruction), about half the vector work of
 *   widening every weight to f32 (kernels_avx512awq16.c).
 * Static int8 activations (w8a8, msModelSlim):
 *     q_x = clamp(rint(x / act_scale) + act_offset, -128, 127)
 *   (act_offset is an integer; rint(x/s + o) == rint(x/s) + o for integer o.)
 *
 * Outputs (integer sums are exact; the float steps below are THE order, the
 * fast kernels perform exactly these float operations, so int paths are bit
 * identical to gemm_ref on every ISA):
 *   w8a8-dynamic: acc = sum_k q_x[t,k] q_w[n,k]            (int32)
 *                 y   = ((float)acc * s_w[n]) * s_x[t]
 *   w8a8 static : acc = sum_k q_x[t,k] q_w[n,k] - act_offset * rowsum[n]
 *                 y   = (float)acc * (act_scale * s_w[n])   (deq_scale, one f32 mul)
 *   w4a8        : acc_g = sum_{k in g} q_x[t,k] q_w[n,k]    (int32 per group)
 *                 sum = 0; for g in order: sum = fmaf((float)acc_g, s_w[n,g], sum)
 *                 y   = sum * s_x[t]
 *   awq-w4a16 (int16 kernel: AVX-512 VNNI, and the ref level's twin; the
 *                 order in kernels.h gemv_awq16, bit-identical between them):
 *                 per 16 lanes, D_b = sum (q_w - z_g) q_x (exact), then
 *                 gacc = fmaf(D_b, s_b, gacc) over a group's blocks,
 *                 facc = fmaf(gacc, s_w[n,g], facc), y = the lanes' tree sum.
 *                 Other levels multiply the float x_b = q_x * s_b (f32) on
 *                 the float paths below: agree within the float dot bound.
 *   awq-w4a16 (float paths), bf16, f32: float dot of deq(W) row with x (for
 *     awq the rounded x above). Summation order is
 *     NOT pinned (prefill uses OpenBLAS sgemm or the blocked bf16 kernel);
 *     fast vs ref agree within the float dot error bound
 *     2*cols*2^-24*sum|w x| (tested).
 *   bf16 gemm (prefill and decode) on a CPU with a bf16 dot product (AVX-512 BF16,
 *     kernel level "avx512bf16"): each activation is split into bf16 terms,
 *     xh = bf16(x), xl = bf16(x - xh), xl2 = bf16(x - xh - xl) (each
 *     difference exact in f32), and the kernel adds w*xh + w*xl (+ w*xl2),
 *     each product exact, in f32 (vdpbf16ps: round to nearest even,
 *     subnormal inputs and results flushed to zero). Three terms (the
 *     default) leave |x - xh - xl - xl2| <= 2^-24 |x|: the f32 dot bound
 *     holds as for the other levels, and the engine's parity with PyTorch
 *     is unchanged (tiny-dsv3 max |dlogit| 7.6e-6 with three terms, 3.9e-5
 *     with two). The number of terms is the user's choice: dsq_qview.
 *     bf16_terms, set by the engine from dsq_model_opts.bf16_terms
 *     (--bf16-terms of ds-eval / ds-serve, -b of bench_engine); unset, the
 *     environment's DSQ_BF16_TERMS, else 3. Two terms drop xl2: 2^-16 |x|
 *     per element (bound: float dot bound + 2^-16 sum|w x|) for 1.5x fewer
 *     dot products. One term is what llama.cpp's and vLLM's bf16 gemms do:
 *     2^-9 |x| per element (bound: float dot bound + 2^-8 sum|w x|; on the
 *     tiny-dsv3 sample KL 1e-5 against PyTorch, logits 0.7% off; about 2.5x
 *     faster prefill; never the default, never a KLD baseline).
 *     Three terms at T >= 8 (prefill) skip the split: the kernel widens the
 *     bf16 weights to f32 (exact) and multiplies x as is with f32 FMAs (16
 *     multiply-adds per instruction vs 10.7 useful of three vdpbf16ps, at
 *     the same rate on Zen 5): the float dot bound, no split error at all.
 *     A bf16 x that overflows (|x| >= 2^128 (1 - 2^-9)) gives Inf. The other
 *     levels widen the bf16 weights to f32 and use x as is (terms ignored).
 *   awq-w4a16 views that the int16 kernel does not take (groups of an odd
 *     multiple of 64 columns) on the AVX-512 levels with two or three terms
 *     (or without AVX512_BF16): the f32 kernel gemv_awq, every T; each
 *     weight is the reference's deq times the rounded x: the float dot
 *     bound above, no split error.
 *   awq-w4a16 on the "avx512bf16" level with one term, the bf16 kernel
 *     (dsq_awq_gemm_terms runs it with any number of terms): y = sum_g s_g * sum_{k in g} (q_k - z_g)
 *     * (xh + xl + xl2)_k with x split as for bf16 prefill (the same terms choice): (q - z) is an
 *     integer in -15..15, exact in bf16, each product exact, the group sums
 *     added in f32 (vdpbf16ps, subnormals flushed), one f32 FMA by s_g per
 *     group. Error: the float dot bound plus the split's (none more for
 *     three terms, 2^-16 sum|w x| for two, 2^-9 sum|w x| for one; tested).
 * Int accumulators cannot overflow: int schemes require cols <= 65536
 * (DSQ_QMAX_INT_COLS); 65536*255*127 < 2^31 (awq too: its per-row
 * zero-point buffer is sized for 512 blocks).
 *
 * in_scale (SmoothQuant / AWQ per-input-channel factors): quantize encodes
 * W'[:,j] = W[:,j] * in_scale[j]. The caller must feed x[j] / in_scale[j] to
 * the gemm (normally folded into the previous norm/linear upstream). Nothing
 * about in_scale is stored in the blob.
 *
 * ===================================================================
 * Blob layout, layout version 1 (every offset is from the blob start; every
 * section starts at a multiple of 64; all padding bytes are zero and are
 * never read as data; all integers and floats little-endian)
 * ===================================================================
 *   [0, 64)   header, struct dsq_qblob_header below:
 *               0 magic "DSQW"            4 u32 layout version (1)
 *               8 u32 scheme id          12 i32 group_size (0 = per row)
 *              16 i64 rows               24 i64 cols
 *              32 u64 blob size (bytes)  40 u32 groups per row
 *              44 u32 flags (bit 0: static activation params valid)
 *              48 f32 act_scale          52 i32 act_offset   (w8a8 only, else 0)
 *              56 8 zero bytes
 *   W   at 64: rows x row_bytes, row-major by output row. row_bytes is a
 *             multiple of 64:
 *               f32  : align64(4*cols)       little-endian float32
 *               bf16 : align64(2*cols)       bf16 bits (u16)
 *               int8 : align64(cols)         int8 two's complement, q in [-127,127]
 *               int4 : 64 * ceil(cols/128)   see "int4 blocks" below
 *   S   scales: f32 [rows][groups]              (int and awq schemes)
 *   Z   zeros : u8  [rows][groups], 0..15        (awq only; one code per byte)
 *   R   rowsum: i32 [rows] = sum_k q_w[n,k]      (w8a8-dynamic and w8a8; used by the
 *             static offset correction and the AVX-512 unsigned-activation trick;
 *             not re-verified on load: a wrong sum gives wrong numbers, never an
 *             out-of-bounds access)
 *   Sections follow in the order W, S, Z, R; each absent section has size 0;
 *   each present section's size is rounded up to 64. dsq_qlayout_get() gives
 *   the offsets; blob size = end of the last section.
 *
 *   int4 blocks: a row is cut into blocks of 128 columns, 64 bytes each.
 *   Byte j (0..63) of block b holds column 128b+j in its LOW nibble and
 *   column 128b+64+j in its HIGH nibble. (This lets one 64/32/16-byte SIMD
 *   load unpack into runs of consecutive columns with just and/shift.)
 *   Nibble value: w4a8 stores u = q + 8 (offset binary, 0..15, as
 *   compressed-tensors pack-quantized; XOR 0x88 converts a byte to/from
 *   msModelSlim's two's-complement nibbles); awq stores q (0..15) directly.
 *   Columns >= cols are zero nibbles. int4 groups must be multiples of 64.
 *
 * ===================================================================
 * Threading and determinism
 * ===================================================================
 * quantize() writes only its row range's parts of W, S, Z, R, so threads or a
 * streaming converter may quantize disjoint row ranges of one blob in any
 * order. The call whose row range starts at row 0 also writes the header
 * (and static activation params); exactly one call must cover row 0.
 * gemm() splits output rows into fixed blocks over a dsq_pool; every output
 * element is computed by one thread with a fixed reduction order, so results
 * are bit identical for any thread count. Float schemes with T > 4 call
 * OpenBLAS sgemm from the pool's tasks: run OpenBLAS single-threaded
 * (OPENBLAS_NUM_THREADS=1 / openblas_set_num_threads(1)) when a pool is used,
 * or the two thread teams oversubscribe the cores. A call with pool == NULL
 * runs on the caller's thread (OpenBLAS may still use its own threads).
 *
 * Kernels: the gemm picks the best level the CPU supports at run time (ref,
 * avx2, avx512 = AVX-512 F/BW/VL + VNNI, avx512bf16 = avx512 + AVX512_BF16,
 * neon = AArch64 + dotprod); the environment variable
 * DSQ_SIMD=ref|avx2|avx512|avx512bf16|neon forces one (debugging,
 * benchmarks). quant/kernels.h documents the kernel contract.
 */
#ifndef DSQ_SCHEME_H
#define DSQ_SCHEME_H

#include <stddef.h>
#include <stdint.h>

#include "dsq_error.h"
#include "dsq_thread.h"

/* ---- pinned ids ---------------------------------------------------------- */
enum dsq_scheme_id {
    DSQ_SCHEME_F32          = 0,
    DSQ_SCHEME_BF16         = 1,
    DSQ_SCHEME_W8A8_DYNAMIC = 2,
    DSQ_SCHEME_W8A8         = 3,
    DSQ_SCHEME_W4A8         = 4,
    DSQ_SCHEME_AWQ_W4A16    = 5,
    DSQ_SCHEME_F16          = 6,   /* reserved, not implemented */
    DSQ_SCHEME_ID_COUNT     = 7    /* sentinel: ids are < this */
};

/* How a scheme's gemm consumes activations (the caller always passes f32). */
enum dsq_act_format {
    DSQ_ACT_FLOAT       = 0,  /* x used as float32 */
    DSQ_ACT_INT8_TOKEN  = 1,  /* int8 symmetric, one scale per token, at run time */
    DSQ_ACT_INT8_STATIC = 2,  /* int8 asymmetric, per-tensor scale+offset from calibration */
    DSQ_ACT_INT16_BLOCK = 3   /* int16 symmetric, one scale per 128 columns of a token (awq) */
};

#define DSQ_QBLOB_MAGIC      "DSQW"
#define DSQ_QBLOB_VERSION    1u
#define DSQ_QBLOB_ALIGN      64
#define DSQ_QBLOB_HEADER     64
#define DSQ_QBLOB_F_ACT_STATIC 1u
#define DSQ_QSCALE_MIN       7.8886090522101181e-31f /* 2^-100: floor for scales */
#define DSQ_QMAX_INT_COLS    65536   /* int schemes: cols limit (int32 accumulators) */
#define DSQ_GROUP_DEFAULT    (-1)    /* dsq_qshape_init: use the scheme's default */

/* On-blob header (exactly 64 bytes; the blob is little-endian, as is every
 * host dsq supports, so this struct is read in place). */
typedef struct dsq_qblob_header {
    char     magic[4];     /* "DSQW" */
    uint32_t version;      /* DSQ_QBLOB_VERSION */
    uint32_t scheme_id;    /* enum dsq_scheme_id */
    int32_t  group_size;   /* 0 = one group per row */
    int64_t  rows;         /* out_features */
    int64_t  cols;         /* in_features */
    uint64_t blob_size;    /* total bytes, header included */
    uint32_t ngroups;      /* groups per row */
    uint32_t flags;        /* DSQ_QBLOB_F_* */
    float    act_scale;    /* static activation scale (w8a8), else 0 */
    int32_t  act_offset;   /* static activation offset, -128..127 (w8a8), else 0 */
    uint8_t  reserved[8];  /* zero */
} dsq_qblob_header;
_Static_assert(sizeof(dsq_qblob_header) == DSQ_QBLOB_HEADER, "dsq_qblob_header must be 64 bytes");

/* Matrix shape. rows = out_features (y has `rows` values per token), cols =
 * in_features. group_size: 0 = per output row; int4 schemes accept 0 or a
 * positive multiple of 64; w8/float schemes accept only 0. */
typedef struct dsq_qshape {
    int64_t rows;
    int64_t cols;
    int32_t group_size;
} dsq_qshape;

/* Section offsets and sizes of a blob (derived from scheme + shape only). */
typedef struct dsq_qlayout {
    int64_t ngroups;       /* groups per row (1 when group_size == 0) */
    int64_t gsize;         /* columns per full group (cols when group_size == 0) */
    size_t  row_bytes;     /* stride of W rows, multiple of 64 */
    size_t  w_off, w_size;
    size_t  s_off, s_size; /* size 0 when absent */
    size_t  z_off, z_size;
    size_t  r_off, r_size;
    size_t  total;         /* blob size */
} dsq_qlayout;

/* Quantization parameters. Zero-initialise (or dsq_qparams_init) for defaults. */
typedef struct dsq_qparams {
    /* optional [cols]: SmoothQuant / AWQ per-input-channel factors; quantize
     * encodes W[:,j] * in_scale[j] (see top comment). Must be finite and > 0. */
    const float *in_scale;
    /* optional [cols]: activation importance, e.g. mean |x_j| from
     * calibration; weights the clip-search error (sum_j (imp_j * err_j)^2). */
    const float *importance;
    /* nonzero: per group, try clipping the range to amax*(1 - i/20), i < 10,
     * and keep the ratio with the least (importance-weighted) squared error
     * (AutoAWQ _compute_best_clip, with a weight-space proxy for X.W). */
    int clip_search;
    /* int4 schemes (awq-w4a16, w4a8): searched group parameters (qsearch.c,
     * kernels.h): from the min/max (or clipped) range, a weighted
     * least-squares search of scale (and integer zero), the weights from
     * importance when given, else a weight-magnitude prior. Same format.
     * 0: the scheme's default (dsq_qsearch_mode: w4a8 on, awq-w4a16 off),
     * > 0: on, < 0: plain min/max (or clip grid). */
    int range_search;
    /* nonzero: NaN/Inf weights are tolerated: the scale is computed over
     * finite values, NaN encodes as 0, +-Inf saturate. Default: refuse with
     * DSQ_ERR_NONFINITE. */
    int allow_nonfinite;
    /* optional, int schemes: the scales [rows][groups] (and, awq-w4a16, the
     * zeros [rows][groups]) of the WHOLE tensor, indexed by absolute row, used
     * instead of computing them (clip_search is then ignored). Codes are still
     * clamp(rint(w / scale) (+ zero)); a weight that already equals
     * (q - zero) * scale in float packs back to exactly q, which is how GPTQ
     * (calib/gptq.h) hands its codes to the blob. Scales must be finite and
     * > 0, zeros <= 15 (DSQ_ERR_INVALID_ARG). */
    const float *given_scale;
    const uint8_t *given_zero;
    /* int schemes: the dtype a serving export stores the scales in
     * (DSQ_DTYPE_BF16 or DSQ_DTYPE_F16, formats/dtype.h; anything else: f32).
     * Each computed scale is rounded to it (dsq_scale_stored) and the codes
     * are rounded against the rounded scale, so that the export's weights,
     * (q - zero) * stored scale, stay within half a step of w. Given scales
     * are used as they are. */
    int scale_dtype;

    /* ---- static activation quantization (w8a8 only; one of these) ------ */
    /* (a) explicit per-tensor params (msModelSlim input_scale/input_offset) */
    int   has_act_static;
    float act_scale;       /* > 0, finite */
    float act_offset;      /* integer-valued, -128..127 */
    /* (b) per-input-channel calibration statistics [cols]: min and max of
     * x_j, or (c) absmax of x_j (gives a symmetric scale, offset 0). They
     * describe x BEFORE in_scale division unless act_stats_smoothed is set;
     * with in_scale given and act_stats_smoothed == 0, quantize divides them
     * by in_scale[j]. The tensor range is widened to include 0, then
     * scale = (max - min)/255, offset = clamp(rint(-128 - min/scale), -128, 127). */
    const float *act_min;
    const float *act_max;
    const float *act_absmax;
    int act_stats_smoothed;
} dsq_qparams;

/* A validated, read-only view of one blob (the blob is borrowed). */
typedef struct dsq_qview {
    const struct dsq_scheme *scheme;
    dsq_qshape     shape;
    dsq_qlayout    layout;
    const uint8_t *blob;
    size_t         blob_size;
    const uint8_t *w;          /* W section; row n at w + n * layout.row_bytes */
    const float   *scales;     /* [rows][ngroups] or NULL */
    const uint8_t *zeros;      /* [rows][ngroups] (awq) or NULL */
    const int32_t *rowsum;     /* [rows] (w8 schemes) or NULL */
    float          act_scale;  /* static activation params (w8a8) */
    int32_t        act_offset;
    int            bf16_terms; /* bf16 weights on a native-bf16 level: activations
                                  split in this many bf16 terms (1, 2, 3; "bf16
                                  prefill" above); 0: DSQ_BF16_TERMS or 3 */
} dsq_qview;

/* One table row. All function pointers are non-NULL for implemented rows. */
typedef struct dsq_scheme {
    const char *name;            /* canonical, e.g. "w8a8-dynamic" */
    const char *alias;           /* or NULL, e.g. "w4a16" */
    const char *description;     /* one line for --help / inspect */
    uint32_t    id;              /* enum dsq_scheme_id */
    int         weight_bits;     /* bits per stored weight code: 32, 16, 8, 4 */
    enum dsq_act_format act;
    int         needs_calibration; /* quantize refuses without activation stats */
    int32_t     default_group_size;
    int         symmetric;       /* 1: zero point is 0 */
    int         qmin, qmax;      /* code grid: deq = (q - zero) * scale (int schemes) */
    int         has_scales, has_zeros, has_rowsum; /* sections present */

    /* Blob size for a shape. DSQ_ERR_INVALID_ARG (rows/cols < 1),
     * DSQ_ERR_UNSUPPORTED (group size, cols limit), DSQ_ERR_OVERFLOW. */
    int (*blob_size)(const dsq_qshape *shape, size_t *out);

    /* Quantize rows [row0, row0+nrows) of W. w points at row row0 (nrows x
     * cols floats, contiguous). blob is the WHOLE blob (blob_size bytes, any
     * 4-byte aligned buffer); only this row range's parts are written, plus
     * the header when row0 == 0. params may be NULL (defaults). Errors:
     * DSQ_ERR_NONFINITE (NaN/Inf weight, diag names row and column),
     * DSQ_ERR_INVALID_ARG (bad params; "w8a8 needs calibration statistics"). */
    int (*quantize)(const float *w, int64_t row0, int64_t nrows,
                    const dsq_qshape *shape, const dsq_qparams *params,
                    uint8_t *blob, dsq_diag *diag);

    /* out[(r - row0) * cols + c] = deq(W)[r][c] for r in [row0, row0+nrows). */
    void (*dequantize)(const dsq_qview *v, int64_t row0, int64_t nrows, float *out);

    /* y[t*rows + n] = sum_k W[n,k] x[t*cols + k], t < T (x, y contiguous,
     * must not overlap). Fast: best kernel for this CPU, rows split over pool
     * (NULL = caller's thread only). scratch: NULL (allocated inside) or at
     * least gemm_scratch(v, T, dsq_pool_size(pool)) bytes, 64-byte aligned.
     * Returns 0, DSQ_ERR_NOMEM or DSQ_ERR_INVALID_ARG. */
    int (*gemm)(const dsq_qview *v, const float *x, int64_t T, float *y,
                dsq_pool *pool, void *scratch, size_t scratch_size);
    /* Scalar reference: the specification. Serial, allocates its own scratch. */
    int (*gemm_ref)(const dsq_qview *v, const float *x, int64_t T, float *y);
    size_t (*gemm_scratch)(const dsq_qview *v, int64_t T, int nthreads);

    /* Analytic bound on |w - deq| for one element, given the stored scale and
     * zero: RTN onto the grid {(q - zero) * scale : qmin <= q <= qmax} errs by
     * at most scale/2 inside the grid range and by the distance to the range
     * outside it (clipping), plus float rounding slack. w is the value that
     * was quantized (after in_scale). 0-ish for f32; bf16 half-ulp for bf16. */
    double (*error_bound)(const dsq_qview *v, int64_t row, int64_t col, float w);

    /* Optional direct path from BF16 source rows (bf16src.h): same contract
     * and same bytes as widening to f32 and calling quantize, for rows whose
     * values are all finite and params without in_scale (the caller,
     * dsq_quantize_bf16src, checks both). NULL: no direct path. */
    int (*quantize_bf16)(const uint8_t *src, int64_t row0, int64_t nrows,
                         const dsq_qshape *shape, const dsq_qparams *params,
                         uint8_t *blob, dsq_diag *diag);

    /* Optional (NULL: none): gemm in two steps, so that several gemms run
     * as one pool job (dsq_gemm_many: a decode step's experts, which would
     * otherwise each wake the pool, wait for its slowest thread and prepare
     * x on one thread while the others idle). split_size: bytes of x
     * prepared for this view, T and the kernel level the gemm picks; 0 when
     * the gemm does not split there (dsq_gemm_many then calls gemm).
     * split_prep writes them (prep 64-byte aligned); split_rows computes rows
     * [n0, n1) of y from them, any thread, bit for bit what gemm gives (the
     * same kernel on the same rows); split_block: rows per pool item. */
    size_t (*split_size)(const dsq_qview *v, int64_t T);
    void (*split_prep)(const dsq_qview *v, const float *x, int64_t T, void *prep);
    int64_t (*split_block)(const dsq_qview *v, int64_t T);
    void (*split_rows)(const dsq_qview *v, const void *prep, int64_t T, int64_t n0, int64_t n1, float *y);
} dsq_scheme;

/* ---- the table ----------------------------------------------------------- */
int dsq_scheme_count(void);                        /* rows in the table */
const dsq_scheme *dsq_scheme_at(int i);            /* NULL when out of range */
const dsq_scheme *dsq_scheme_by_id(uint32_t id);   /* NULL when unknown/reserved */
const dsq_scheme *dsq_scheme_by_name(const char *name); /* name or alias, case-insensitive */

/* ---- shapes, layouts, params --------------------------------------------- */
/* Fill *s, resolving DSQ_GROUP_DEFAULT to the scheme default; validates via
 * blob_size. */
int dsq_qshape_init(dsq_qshape *s, const dsq_scheme *sc, int64_t rows, int64_t cols,
                    int32_t group_size);
/* Section offsets for scheme + shape (validates like blob_size). */
int dsq_qlayout_get(const dsq_scheme *sc, const dsq_qshape *shape, dsq_qlayout *out);
/* Write the blob header (rows/cols/group from shape) at blob[0..64). */
void dsq_qblob_write_header(uint8_t *blob, const dsq_scheme *sc, const dsq_qshape *shape,
                            const dsq_qlayout *lay, uint32_t flags, float act_scale,
                            int32_t act_offset);
void dsq_qparams_init(dsq_qparams *p);
/* s as a scale stored in dtype dt (dsq_qparams.scale_dtype): rounded to
 * nearest BF16 / F16; s itself for other dtypes, or when dt cannot hold it
 * as a positive finite value. */
float dsq_scale_stored(float s, int dt);
/* Whether range_search value v searches for scheme id: > 0 on, < 0 off, 0
 * the default: on for w4a8, off for awq-w4a16. For w4a8 the search cuts
 * RTN's KLD by roughly 15-30% on the samples for about 1.5 CPU-s per GB
 * of BF16 (bench/bench_qsearch.sh measures the cost on a real-shape
 * layer); for awq-w4a16 the gain is a few percent at best and its
 * 128-weight groups make the search several times dearer per weight, so it
 * stays opt-in (--search). Calibrated paths choose their
 * own (calib.c calib_search). */
static inline int dsq_qsearch_mode(int v, uint32_t scheme_id)
{
    return v > 0 || (v == 0 && scheme_id == DSQ_SCHEME_W4A8);
}
static inline int dsq_qsearch_on(const dsq_qparams *p, uint32_t scheme_id)
{
    return dsq_qsearch_mode(p ? p->range_search : 0, scheme_id);
}

/* ---- views --------------------------------------------------------------- */
/* Validate a blob (hostile input: from a file) and fill *v. sc may be NULL
 * (taken from the header); otherwise header id, shape and group size must
 * match sc and *shape (shape may be NULL: taken from the header). Checks:
 * size == layout total, 4-byte alignment, magic/version/flags, reserved bytes
 * zero, every scale finite and > 0, zeros <= 15, static act params sane.
 * Cost: one pass over S and Z (not W). DSQ_ERR_FORMAT / DSQ_ERR_TRUNCATED /
 * DSQ_ERR_NONFINITE / DSQ_ERR_SHAPE / DSQ_ERR_UNSUPPORTED. */
int dsq_qview_init(dsq_qview *v, const dsq_scheme *sc, const dsq_qshape *shape,
                   const void *blob, size_t blob_size, dsq_diag *diag);

/* ---- several gemms in one pool job ---------------------------------------- */
/* y = W x for each task (x [T][cols], y [T][rows], as gemm). */
typedef struct dsq_gemm_task {
    const dsq_qview *v;
    const float *x;
    int64_t T;
    float *y;
} dsq_gemm_task;

/* Run n gemms: those whose scheme splits (split_size > 0) prepare x on the
 * caller's thread (once for tasks of the same x, T, scheme and shape:
 * a MoE layer's gates and ups of one token), then ALL their row blocks go
 * to the pool as ONE job; the others run their gemm after it, one by one.
 * Every y is bit for bit what its gemm alone gives, on any pool. scratch:
 * NULL (allocated inside) or dsq_gemm_many_scratch bytes, 64-byte aligned.
 * Outputs must not overlap each other or any x. 0, DSQ_ERR_NOMEM or
 * DSQ_ERR_INVALID_ARG. */
size_t dsq_gemm_many_scratch(const dsq_gemm_task *t, int n, int nthreads);
int dsq_gemm_many(const dsq_gemm_task *t, int n, dsq_pool *pool, void *scratch, size_t scratch_size);

/* ---- whole-tensor helpers ------------------------------------------------- */
/* Quantize a whole tensor, rows split over pool (NULL = serial). */
int dsq_quantize_tensor(const dsq_scheme *sc, const float *w, const dsq_qshape *shape,
                        const dsq_qparams *params, uint8_t *blob, dsq_pool *pool,
                        dsq_diag *diag);
/* Relative error over rows [row0, row0+nrows): adds sum (w - weff)^2 to *err2
 * and sum w^2 to *ref2 (accumulate over chunks; rel = sqrt(err2/ref2)), where
 * weff = deq(W)[n,j] / in_scale[j] (in_scale may be NULL), i.e. the weight the
 * model effectively uses. w points at row row0. */
int dsq_qrel_error(const dsq_qview *v, const float *w, int64_t row0, int64_t nrows,
                   const float *in_scale, double *err2, double *ref2);

#endif
