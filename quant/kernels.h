/* kernels.h - quant-internal compute kernels, one table per ISA level.
 *
 * Each ISA level fills one struct dsq_kernels: kernels_ref.c, kernels_neon.c,
 * and kernels_avx2.c / kernels_avx512.c from their families' files
 * (kernels_x86.h). kernels_ref.c is the specification; the fast levels
 * must give bit-identical results for every
 * integer kernel (gemm_w8, gemm_w4, quant_i8, absmax_bits, sum_i8,
 * f32_to_bf16; minmax up to the sign of a zero), the same values for
 * dequant_tile, and agree within float-dot rounding for gemv_f.
 * dsq_kernels_get() picks the best level the CPU supports at run time
 * (__builtin_cpu_supports / HWCAP), so the files build without -march flags;
 * DSQ_SIMD=ref|avx2|avx512|avx512bf16|neon in the environment overrides the choice
 * (debugging, benchmarks; a name the CPU cannot run selects ref).
 *
 * Not a public API: the engine uses scheme.h / actq.h; tests use this file to
 * run every level against the reference.
 */
#ifndef DSQ_KERNELS_H
#define DSQ_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "scheme.h"

/* Activations of one gemm call, quantized (int schemes). */
typedef struct dsq_actbuf {
    int64_t        T;
    int64_t        kpad;     /* codes row stride: align(cols, DSQ_ACTQ_PAD), zero padded */
    const int8_t  *q;        /* [T][kpad] codes */
    const float   *scale;    /* [T] per-token scales (dynamic schemes) */
    const int32_t *gsum;     /* [ngroups][T] code sums per group (w4a8) */
} dsq_actbuf;

/* Activations of one bf16-weight gemm call (prefill, T > 4): x itself and
 * its split into bf16 terms, xh = bf16(x), xl = bf16(x - xh) (split_bf16)
 * and optionally xl2 = bf16(x - xh - xl): xh + xl equals x within
 * 2^-16 |x|, with xl2 within 2^-24 |x| (scheme.h). Levels with a native
 * bf16 dot product (AVX-512 BF16) multiply the bf16 weights by each term;
 * the others widen the weights on the fly and use x. xh == NULL: not split
 * (three terms at T >= 8, scheme_float.c); gemm_bf16 of the native level
 * then widens the weights too and multiplies x itself (f32 FMA). */
typedef struct dsq_bfact {
    int64_t         T;
    const float    *x;       /* [T][cols] */
    int64_t         kpad;    /* xh / xl / xl2 columns: >= align(cols, 32), zero padded */
    const uint16_t *xh, *xl; /* token t at xh + t * ld (kpad columns) */
    const uint16_t *xl2;     /* third term bf16(x - xh - xl), or NULL (two terms) */
    int64_t         ld;      /* token stride of xh / xl / xl2 in elements; 0: kpad. The
                              * driver interleaves a token's terms (xl = xh + kpad, ...)
                              * and keeps kpad / 32 odd, so a tile's rows of terms fall
                              * in distinct L1 sets instead of aliasing at 4 KB strides */
} dsq_bfact;

#define DSQ_BF16_KALIGN 32   /* xh / xl rows are padded to this many columns */

/* gemm_awq: tokens up to DSQ_AWQ_DECODE_T stream the packed weights through
 * registers; more tokens unpack DSQ_AWQ_RB rows x DSQ_AWQ_BK columns at a
 * time into work (bf16, L2 sized) and reuse them for every token. */
#define DSQ_AWQ_DECODE_T   4
#define DSQ_AWQ_RB         64
#define DSQ_AWQ_BK         2048
#define DSQ_AWQ_WORK_BYTES ((size_t)DSQ_AWQ_RB * DSQ_AWQ_BK * 2)

/* gemm_awq's activation order: position p of a 128-column block holds column
 * dsq_awq_perm(p) of that block. One 16-bit lane of a packed block holds the
 * nibbles of columns 2w, 2w + 64, 2w + 1, 2w + 65 (int4 layout, scheme.h), so
 * shifting the 32 lanes by 0, 4, 8, 12 gives the weights of positions
 * 0..31, 32..63, 64..95, 96..127 with no shuffle of the weights. */
static inline int dsq_awq_perm(int p)
{
    int j = p >> 5, w = p & 31;
    return 2 * w + (j >> 1) + 64 * (j & 1);
}

/* gemv_awq's activation order (f32 decode): position p of a 128-column block
 * holds column dsq_awq_perm16(p) of that block. A 32-bit lane L of a packed
 * block holds the nibbles of columns 4L, 4L + 64, 4L + 1, 4L + 65, ..., 4L + 3,
 * 4L + 67 (int4 layout, scheme.h); shifting the 16 lanes by 4s puts column
 * 4L + s / 2 + 64 (s & 1) in the low nibble, and a 16-entry table lookup
 * (vpermps reads 4 index bits) turns it into the weight: positions 16s..16s+15
 * are the lanes of shift s. */
static inline int dsq_awq_perm16(int p)
{
    int s = p >> 4, l = p & 15;
    return 4 * l + (s >> 1) + 64 * (s & 1);
}

/* awq-w4a16's activations (scheme.h, "awq-w4a16 activations"): x in int16
 * per 128-column block. Per token t and block b: xs[b] = the block's
 * absmax / 32767 (at least DSQ_QSCALE_MIN; NaN where the block holds an Inf
 * or NaN), q = rint(x / xs[b]) clamped to +-32767 (0 past cols and in a
 * non-finite block), in the natural column order (dsq_actq16_block), and
 * sf[b][l] = the sum of q over lane l's 8 columns (DSQ_AWQ16_LANE_COL),
 * exact in f32. Lane l of a block is what one 32-bit lane of vpdpwssd
 * accumulates when a packed int4 block (byte j: columns j and j + 64) is
 * zero-extended to words 32 bytes at a time: columns 2l, 2l + 1 of each
 * 32-column quarter. */
#define DSQ_AWQ16_QMAX 32767
#define DSQ_AWQ16_LANE_COL(l, j) (2 * (l) + ((j) & 1) + 32 * ((j) >> 1))   /* j = 0..7 */
typedef struct dsq_awq16_act {
    int64_t  T, kpad, nb;   /* tokens; blocks per token; kpad = 128 nb */
    int16_t *q;             /* [T][kpad] */
    float   *xs;            /* [T][nb] */
    float   *sf;            /* [T][nb][16] */
} dsq_awq16_act;
/* Bytes of a dsq_awq16_act's arrays for T tokens of cols columns, and the
 * arrays carved from buf (64-byte aligned, that many bytes). */
size_t dsq_awq16_act_bytes(int64_t T, int64_t cols);
void   dsq_awq16_act_init(dsq_awq16_act *a, void *buf, int64_t T, int64_t cols);
/* The reference twins of awq16_prep and gemv_awq16 (kernels_ref.c): THE
 * order that the vector levels reproduce bit for bit. */
void dsq_awq16_prep_scalar(const float *x, int64_t cols, int64_t t, const dsq_awq16_act *a);
void dsq_gemv_awq16_scalar(const dsq_qview *v, const dsq_awq16_act *a, int64_t n0, int64_t n1,
                           float *y);

typedef struct dsq_kernels {
    const char *name;        /* "ref", "avx2", "avx512", "avx512bf16", "neon" */
    /* 1: gemm_bf16 reads the split activations a->xh / a->xl (native bf16
     * dot product); 0: it reads a->x and the driver skips the split. */
    int bf16_split;

    /* max over i < n of (bits(x[i]) & 0x7fffffff): the bits of max|x| for
     * finite data; a result >= 0x7f800000 means an Inf/NaN is present. */
    uint32_t (*absmax_bits)(const float *x, int64_t n);
    /* min and max of n >= 1 finite floats. */
    void (*minmax)(const float *x, int64_t n, float *mn, float *mx);
    /* q[i] = (int8)(clamp(rint(x[i] / scale), lo - add, hi - add) + add),
     * clamping in float (fmaxf then fminf: NaN -> lo). -128 <= lo <= hi <= 127. */
    void (*quant_i8)(const float *x, int64_t n, float scale, int32_t add,
                     int32_t lo, int32_t hi, int8_t *q);

    /* Searched group parameters (qsearch.c), one pass over a group for a
     * trial scale: r_j = min(max(rint(x_j / scale), lo), hi) (the
     * quantizer's rounding, as a float, without its add) and
     *   out[0] = sum c_j r_j, out[1] = sum c_j r_j^2, out[2] = sum c_j x_j r_j
     * (in f32, element j in lane j % 16: c_j r_j rounded, then added to
     * out[0]'s lane and fused-multiply-added with r_j and with x_j into
     * out[1]'s and out[2]'s; the 16 lanes then summed in double as a tree:
     * lane l plus lane l + 8, then + 4, + 2, + 1),
     * out[3] = sum c_j d_j^2 with d_j =
     * x_j - r_j * scale in f32 (the dequantizer's value) and c_j d_j d_j in
     * double (same lanes). No byte buffer: the codes stay in registers.
     * Bit-identical across levels (dsq_qstats_scalar is THE order; levels
     * without a vector version use it). */
    void (*qstats)(const float *x, const float *c, int64_t n, float scale, float lo, float hi,
                   double out[4]);
    /* The cheap trial pass ranking a grid of scales: out[0..2] as qstats but
     * with r_j = min(max(rint(x_j * inv), lo), hi) (a multiply: it may
     * differ from the quantizer's code by one where x_j / scale is within an
     * ulp of a half, so callers rescore what they keep with qstats), and no
     * error sum (sum c x^2 - 2 s out[2] + s^2 out[1] estimates it). Same
     * lanes and order as qstats; dsq_qtrial_scalar is THE order. */
    void (*qtrial)(const float *x, const float *c, int64_t n, float inv, float lo, float hi,
                   double out[3]);
    /* m (1..DSQ_QTRIALS_MAX) trial passes in one sweep of x and c: out[i]
     * has the bits of qtrial(x, c, n, inv[i], lo[i], hi[i], out[i]). The
     * grid's trials are independent, so one sweep loads each x_j and c_j
     * once for all of them and pays the call's setup and reductions once:
     * that is what short groups (awq's 128 columns) spent their time on;
     * long rows are compute-bound per trial either way (qsearch.c).
     * dsq_qtrials_scalar: m qtrial calls. */
    void (*qtrials)(const float *x, const float *c, int64_t n, int m, const float *inv, const float *lo,
                    const float *hi, double (*out)[3]);

    /* sum of n int8 values (int32; n < 2^24). */
    int32_t (*sum_i8)(const int8_t *q, int64_t n);
    /* f32 -> bf16 bits, round to nearest even, NaN stays quiet NaN
     * (dsq_f32_to_bf16 of dsq_mem.h). */
    void (*f32_to_bf16)(const float *x, int64_t n, uint16_t *out);

    /* Output rows [n0, n1) for all T tokens of an int8-weight view
     * (w8a8-dynamic or w8a8 static; formulas in scheme.h).
     * y[t*rows + n]. Bit-identical across levels. */
    void (*gemm_w8)(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1, float *y);
    /* Same for w4a8 (codes u = q + 8; needs a->gsum). */
    void (*gemm_w4)(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1, float *y);

    /* hi[i] = bf16(x[i]) (round to nearest even, dsq_f32_to_bf16), lo[i] =
     * bf16(x[i] - hi[i]) (the difference is exact in f32), lo = 0 where hi
     * is not finite. Bit-identical across levels. */
    void (*split_bf16)(const float *x, int64_t n, uint16_t *hi, uint16_t *lo);
    /* bf16 weights, T > 4 tokens: y[t*rows + n] for rows [n0, n1), every
     * token of a. Blocked: a block of rows is read from memory once for all
     * tokens. Within split error (scheme.h) plus the float dot bound of the
     * reference; order not pinned. NULL in the ref level (gemv_f serves). */
    void (*gemm_bf16)(const dsq_qview *v, const dsq_bfact *a, int64_t n0, int64_t n1, float *y);
    /* awq-w4a16 weights on a native bf16 dot product, every T: y[t*rows + n]
     * for rows [n0, n1) against split activations a (as gemm_bf16, but each
     * 128-column block in the order of dsq_awq_perm, kpad a multiple of 128,
     * zero past cols). Groups: a multiple of 128 columns or one per row.
     * work: DSQ_AWQ_WORK_BYTES, 64-byte aligned, when T > DSQ_AWQ_DECODE_T.
     * Within split error plus the float dot bound (scheme.h); order not
     * pinned. NULL where the level has none (gemv_f / dequant_tile serve). */
    void (*gemm_awq)(const dsq_qview *v, const dsq_bfact *a, int64_t n0, int64_t n1, float *y,
                     void *work);

    /* awq-w4a16 with x as is (f32): y[t*rows + n] for rows [n0, n1) and
     * T >= 1 tokens (decode, and prefill where it beats the alternatives:
     * scheme_awq.c); xp[t * kpad + c] holds x in the
     * order of dsq_awq_perm16 within each 128-column block, kpad a multiple
     * of 128, zero past cols. Groups: a multiple of 64 columns or one per
     * row. Each weight is the reference's deq, (q - z) * s rounded to f32,
     * times x, summed in f32: the float dot bound of gemv_f, no split error;
     * order not pinned. NULL where the level has none (gemv_f serves). */
    void (*gemv_awq)(const dsq_qview *v, const float *xp, int64_t T, int64_t kpad, int64_t n0,
                     int64_t n1, float *y);
    /* awq-w4a16 on int16 activations (dsq_awq16_act): awq16_prep fills
     * token t of a from x (cols floats); gemv_awq16 gives y[t*rows + n]
     * for rows [n0, n1) and every token of a, groups of a multiple of 128
     * columns or one per row. Per row and token, in 16 lanes l:
     *   D_b[l] = sum over lane l's columns k of block b of (q_k - z_g) x_k,
     *            exact (integer; |D| < 2^22, so exact in f32 too);
     *   per group g: gacc = 0, then for its blocks in order
     *            gacc = fmaf(D_b, xs[b], gacc); then
     *            facc = fmaf(gacc, s_g, facc)   (facc = 0 at the start);
     *   y = facc summed as a tree (lane l + l + 8, then + 4, + 2, + 1).
     * Bit-identical to dsq_gemv_awq16_scalar on every level that has it, and
     * the same bits for a token whatever T is. NULL where the level has
     * none: scheme_awq.c then rounds x the same way (dsq_actq16_fake) and
     * runs the float paths on it. */
    void (*awq16_prep)(const float *x, int64_t cols, int64_t t, const dsq_awq16_act *a);
    void (*gemv_awq16)(const dsq_qview *v, const dsq_awq16_act *a, int64_t n0, int64_t n1,
                       float *y);
    /* Float schemes (f32, bf16, awq): y[t*rows+n] = dot(deq(W[n,:]), x[t,:])
     * for rows [n0, n1), small T (decode). Order not pinned. */
    void (*gemv_f)(const dsq_qview *v, const float *x, int64_t T, int64_t n0, int64_t n1,
                   float *y);
    /* out[(n-n0)*ldo + (k-k0)] = deq(W)[n][k] for n in [n0,n1), k in [k0,k1)
     * (exact: the same values as scheme->dequantize). For the sgemm path. */
    void (*dequant_tile)(const dsq_qview *v, int64_t n0, int64_t n1, int64_t k0, int64_t k1,
                         float *out, int64_t ldo);
    /* MLA's absorbed decode on a quantized kv_b (engine/mla.c), reading the
     * int codes in place instead of dequantizing them to a buffer first.
     * gemv_i: gemv_f's contract for every scheme, int weights (w8a8,
     * w8a8-dynamic, w4a8) included: y = dot(deq(W[n,:]), x) in f32.
     * gemv_t (w8a8, w8a8-dynamic, w4a8, awq-w4a16 views only; others may take a
     * scalar path): the transposed product of one token, y[c] += sum over n in
     * [n0, n1) of a[n - n0] * deq(W)[n][c] for every column c (y holds
     * cols floats). Both within the float dot bound of the reference
     * (double accumulation of the reference's deq); order not pinned, but
     * fixed for a level: the same call gives the same bits. NULL where the
     * level has none (the engine dequantizes with dequant_tile instead). */
    void (*gemv_i)(const dsq_qview *v, const float *x, int64_t T, int64_t n0, int64_t n1, float *y);
    void (*gemv_t)(const dsq_qview *v, int64_t n0, int64_t n1, const float *a, float *y);
} dsq_kernels;

extern const dsq_kernels dsq_kernels_ref_impl;
#if defined(__x86_64__) || defined(__i386__)
extern const dsq_kernels dsq_kernels_avx2_impl;
extern const dsq_kernels dsq_kernels_avx512_impl;
extern const dsq_kernels dsq_kernels_avx512bf16_impl;  /* avx512 + AVX512_BF16 */
void dsq_avx512bf16_gemm(const dsq_qview *v, const dsq_bfact *a, int64_t n0, int64_t n1, float *y);
/* The packed bf16 prefill block of kernels_avx512bf16.c, for other weight
 * formats that dequantize to bf16 (call only where the avx512bf16 level is
 * the CPU's): 32 rows [n, n + nr) (nr <= 32) times every token of a, over
 * np column pairs starting at column k0 (even; a's terms read from there).
 * wp: 64-byte aligned, u32 wp[2][DSQ_BF16_PACK_KC / 2][16], wp[h][p][i] =
 * the bf16 pair (low half: column k0 + 2p, high: k0 + 2p + 1) of row
 * n + 16h + i; rows >= nr and columns past the matrix must be 0. first:
 * y[t * rows + n + i] = the block's dot, else +=. np <= DSQ_BF16_PACK_KC / 2. */
#define DSQ_BF16_PACK_KC 512
void dsq_avx512bf16_packed_block(const uint32_t *wp, int64_t np, const dsq_bfact *a, int64_t k0,
                                 int first, float *y, int64_t rows, int64_t n, int nr);
void dsq_avx512awq_gemm(const dsq_qview *v, const dsq_bfact *a, int64_t n0, int64_t n1, float *y,
                        void *work);
void dsq_avx512awq_gemv(const dsq_qview *v, const float *xp, int64_t T, int64_t kpad, int64_t n0,
                        int64_t n1, float *y);
void dsq_avx512awq16_prep(const float *x, int64_t cols, int64_t t, const dsq_awq16_act *a);
void dsq_avx512awq16_gemv(const dsq_qview *v, const dsq_awq16_act *a, int64_t n0, int64_t n1,
                          float *y);
#endif
#if defined(__aarch64__)
extern const dsq_kernels dsq_kernels_neon_impl;
#endif

/* Best level for this CPU (honours DSQ_SIMD); never NULL. */
const dsq_kernels *dsq_kernels_get(void);
const dsq_kernels *dsq_kernels_ref(void);
/* Every level this CPU can run, ref first; returns the count (<= max). */
int dsq_kernels_list(const dsq_kernels **out, int max);

/* ---- quant-internal helpers shared by the scheme files -------------------- */

/* Gemms below this many multiply-adds (rows * cols * T) run on the caller's
 * thread even when a pool is given: waking the pool costs about 10 us on a
 * loaded machine, more than such a gemm takes alone (small models, decode).
 * Results do not depend on the split, so this changes no value. */
#define DSQ_GEMM_SERIAL_MACS (1 << 20)

static inline dsq_pool *dsq_gemm_pool(dsq_pool *pool, int64_t rows, int64_t cols, int64_t T)
{
    return (double)rows * (double)cols * (double)T < (double)DSQ_GEMM_SERIAL_MACS ? NULL : pool;
}

/* Decode (T < 4) row blocks in pool order: the gemv tiles prefetch the
 * rows after their block (the fast levels' gemm_w4, gemm_w8 at T 2..3) and
 * gemm_w8's one-token rows are one sequential stream for the hardware
 * prefetcher, which pays only if the same thread reads them next. Threads take items in turn, so
 * item i goes to block (i % nt) * per + i / nt: while they alternate, each
 * thread walks a contiguous run of blocks. nt * per >= nblocks items; an
 * item whose block is >= nblocks has no rows (return -1). Any thread
 * ordering still runs every block once. */
static inline size_t dsq_decode_items(size_t nblocks, int nt, size_t *per)
{
    const size_t n = nt > 1 ? (size_t)nt : 1;
    *per = (nblocks + n - 1) / n;
    return *per * n;
}

static inline int64_t dsq_decode_block(size_t item, int nt, size_t per, size_t nblocks)
{
    const size_t n = nt > 1 ? (size_t)nt : 1, b = (item % n) * per + item / n;
    return b < nblocks ? (int64_t)b : -1;
}

/* A gemm's row blocks as pool items: in order, or for decode (T < 4 on
 * more than one thread) in the order above. Returns the item count. */
typedef struct dsq_rowsplit {
    int nt;          /* 0: item i is block i */
    size_t per, nblocks;
} dsq_rowsplit;

static inline size_t dsq_rowsplit_init(dsq_rowsplit *s, size_t nblocks, int64_t T, int nthreads)
{
    s->nt = 0;
    s->per = 0;
    s->nblocks = nblocks;
    if (T >= 4 || nthreads <= 1) return nblocks;
    s->nt = nthreads;
    return dsq_decode_items(nblocks, nthreads, &s->per);
}

/* The block of an item, or -1 when it has no rows. */
static inline int64_t dsq_rowsplit_block(const dsq_rowsplit *s, size_t item)
{
    return s->nt ? dsq_decode_block(item, s->nt, s->per, s->nblocks) : (int64_t)item;
}

/* The reference split_bf16 (levels without a faster one use it). */
void dsq_split_bf16_scalar(const float *x, int64_t n, uint16_t *hi, uint16_t *lo);
/* The most trials one qtrials sweep takes (its accumulators stay in
 * registers: 3 per trial). */
#define DSQ_QTRIALS_MAX 4

/* The reference qstats and qtrial (contracts in dsq_kernels), shared by
 * levels without a vector version. */
void dsq_qstats_scalar(const float *x, const float *c, int64_t n, float scale, float lo, float hi,
                       double out[4]);
void dsq_qtrial_scalar(const float *x, const float *c, int64_t n, float inv, float lo, float hi,
                       double out[3]);
void dsq_qtrials_scalar(const float *x, const float *c, int64_t n, int m, const float *inv, const float *lo,
                        const float *hi, double (*out)[3]);

/* Codes row stride of activation buffers for a view. */
int64_t dsq_act_kpad(int64_t cols);

/* int4 block layout (scheme.h): nibble of column c within a packed row. */
static inline int dsq_i4_get(const uint8_t *row, int64_t c)
{
    int64_t b = c >> 7, j = c & 127;
    uint8_t byte = row[b * 64 + (j & 63)];
    return j < 64 ? (byte & 15) : (byte >> 4);
}

/* Rows of codes -> packed int4 row (codes already offset to 0..15). */
void dsq_i4_pack_row(const uint8_t *codes, int64_t cols, uint8_t *row, size_t row_bytes);

/* Prepare one row of weights for quantization: *row = w itself when it can be
 * used as is, else tmp ([cols]) holding w * in_scale and/or the sanitized
 * row. Checks finiteness: with allow_nonfinite NaN becomes 0 and +-Inf
 * becomes +-(max finite |w| of the row); otherwise returns DSQ_ERR_NONFINITE
 * with *bad_col set. */
int dsq_qrow_prepare(const dsq_kernels *k, const float *w, int64_t cols, const float *in_scale,
                     int allow_nonfinite, float *tmp, const float **row, int64_t *bad_col);

/* Symmetric group quantization of one prepared row: for each group, find the
 * scale (amax/qmax, with optional clip search, or searched: qsearch.c),
 * write codes[k] = q + add with q = clamp(rint(w/scale), qlo, qmax), and
 * scales[g]. gsize = columns per group. importance may be NULL. given: NULL,
 * or the row's [groups] scales to use as they are (no search; copied to
 * scales). search: nonzero runs dsq_qsearch_sym from the chosen scale. */
void dsq_qrow_sym(const dsq_kernels *k, const float *w, int64_t cols, int64_t gsize,
                  int32_t qlo, int32_t qmax, int32_t add, int clip_search, int search,
                  const float *importance, const float *given, int8_t *codes, float *scales);
/* AutoAWQ asymmetric params + codes (0..15) of one group of n finite values
 * (scheme_awq.c), with the optional clip search and the optional searched
 * parameters (search nonzero: dsq_qsearch_awq from the min/max or clipped
 * ones); used by quantize, GPTQ and the AWQ clip search. */
void dsq_qgroup_awq(const dsq_kernels *k, const float *w, int64_t n, int clip_search, int search,
                    const float *importance, int8_t *codes, float *scale, uint8_t *zero);

/* ---- Searched group parameters (qsearch.c) -------------------------------
 * Per-element error weights c[n] of a group x[n]: with importance (the
 * calibration's per-input rms), imp_j^2 * sqrt(rms(x)^2 + x_j^2); without,
 * rms(x) + |x_j| (llama.cpp's k-quant prior). */
void dsq_qsearch_weights(const float *x, int64_t n, const float *importance, float *c);
/* Improve awq params (*scale, *zero: the starting, e.g. min/max, ones) of a
 * group under sum_j c_j (x_j - (q_j - zero) * scale)^2, q_j the quantizer's
 * codes (k->quant_i8's rounding, scored by k->qstats); mn/mx the group's
 * (clipped) range. Returns the final weighted error (never above the starting
 * one's). Scales are f16-exact unless the start's is kept or f16 cannot
 * hold them. */
double dsq_qsearch_awq(const dsq_kernels *k, const float *x, int64_t n, const float *c, float mn, float mx,
                       float *scale, uint8_t *zero);
/* The same for symmetric codes qlo..qmax, deq = q * scale, amax = max |x|. */
double dsq_qsearch_sym(const dsq_kernels *k, const float *x, int64_t n, const float *c, int qlo, int qmax,
                       float amax, float *scale);

/* Activation quantization with an explicit kernel level (actq.c). */
void dsq_actq_token_k(const dsq_kernels *k, const float *x, int64_t T, int64_t cols, int8_t *q,
                      int64_t ldq, float *scale);
void dsq_actq_static_k(const dsq_kernels *k, const float *x, int64_t T, int64_t cols, int8_t *q,
                       int64_t ldq, float act_scale, int32_t act_offset);

/* Common argument checks for quantize; returns 0 or an error (diag filled). */
int dsq_quantize_check(const dsq_scheme *sc, int64_t row0, int64_t nrows,
                       const dsq_qshape *shape, const dsq_qparams *p, dsq_qlayout *lay,
                       dsq_diag *diag);

/* Float-scheme gemm drivers (scheme_float.c), shared by f32/bf16/awq rows. */
int dsq_float_gemm(const dsq_qview *v, const float *x, int64_t T, float *y, dsq_pool *pool,
                   void *scratch, size_t scratch_size);
int dsq_float_gemm_ref(const dsq_qview *v, const float *x, int64_t T, float *y);
size_t dsq_float_gemm_scratch(const dsq_qview *v, int64_t T, int nthreads);
/* Terms of the bf16 activation split for v (scheme.h, "bf16 prefill"):
 * v->bf16_terms when 1..3, else DSQ_BF16_TERMS from the environment, else 3.
 * bf16 prefill and awq-w4a16's bf16 kernel both follow it. */
int dsq_bf16_terms(const dsq_qview *v);
/* Same drivers with an explicit kernel level (tests, bench). */
int dsq_qgemm_with(const dsq_kernels *k, const dsq_qview *v, const float *x, int64_t T,
                   float *y, dsq_pool *pool, void *scratch, size_t scratch_size);

/* Table rows' functions (one file each). */
int  dsq_f32_blob_size(const dsq_qshape *s, size_t *out);
int  dsq_bf16_blob_size(const dsq_qshape *s, size_t *out);
int  dsq_f32_quantize(const float *, int64_t, int64_t, const dsq_qshape *, const dsq_qparams *,
                      uint8_t *, dsq_diag *);
int  dsq_bf16_quantize(const float *, int64_t, int64_t, const dsq_qshape *, const dsq_qparams *,
                       uint8_t *, dsq_diag *);
void dsq_f32_dequantize(const dsq_qview *, int64_t, int64_t, float *);
void dsq_bf16_dequantize(const dsq_qview *, int64_t, int64_t, float *);
double dsq_f32_error_bound(const dsq_qview *, int64_t, int64_t, float);
double dsq_bf16_error_bound(const dsq_qview *, int64_t, int64_t, float);

int  dsq_w8_blob_size(const dsq_qshape *s, size_t *out);
int  dsq_w8_quantize(const float *, int64_t, int64_t, const dsq_qshape *, const dsq_qparams *,
                     uint8_t *, dsq_diag *);
int  dsq_w8s_quantize(const float *, int64_t, int64_t, const dsq_qshape *, const dsq_qparams *,
                      uint8_t *, dsq_diag *);
void dsq_w8_dequantize(const dsq_qview *, int64_t, int64_t, float *);
int  dsq_w8_gemm(const dsq_qview *, const float *, int64_t, float *, dsq_pool *, void *, size_t);
int  dsq_w8_gemm_ref(const dsq_qview *, const float *, int64_t, float *);
size_t dsq_w8_gemm_scratch(const dsq_qview *, int64_t, int);
int  dsq_float_gemm_with(const dsq_kernels *k, const dsq_qview *v, const float *x, int64_t T,
                         float *y, dsq_pool *pool, void *scratch, size_t scratch_size);
int  dsq_w8_gemm_with(const dsq_kernels *k, const dsq_qview *v, const float *x, int64_t T,
                      float *y, dsq_pool *pool, void *scratch, size_t scratch_size);

/* split_* rows of the table (scheme.h; dsq_gemm_many) */
size_t  dsq_w8_split_size(const dsq_qview *v, int64_t T);
void    dsq_w8_split_prep(const dsq_qview *v, const float *x, int64_t T, void *prep);
int64_t dsq_w8_split_block(const dsq_qview *v, int64_t T);
void    dsq_w8_split_rows(const dsq_qview *v, const void *prep, int64_t T, int64_t n0, int64_t n1, float *y);
size_t  dsq_w4a8_split_size(const dsq_qview *v, int64_t T);
void    dsq_w4a8_split_prep(const dsq_qview *v, const float *x, int64_t T, void *prep);
int64_t dsq_w4a8_split_block(const dsq_qview *v, int64_t T);
void    dsq_w4a8_split_rows(const dsq_qview *v, const void *prep, int64_t T, int64_t n0, int64_t n1, float *y);
size_t  dsq_awq_split_size(const dsq_qview *v, int64_t T);
void    dsq_awq_split_prep(const dsq_qview *v, const float *x, int64_t T, void *prep);
int64_t dsq_awq_split_block(const dsq_qview *v, int64_t T);
void    dsq_awq_split_rows(const dsq_qview *v, const void *prep, int64_t T, int64_t n0, int64_t n1, float *y);

int  dsq_w4a8_blob_size(const dsq_qshape *s, size_t *out);
int  dsq_w4a8_quantize(const float *, int64_t, int64_t, const dsq_qshape *, const dsq_qparams *,
                       uint8_t *, dsq_diag *);
void dsq_w4a8_dequantize(const dsq_qview *, int64_t, int64_t, float *);
int  dsq_w4a8_gemm(const dsq_qview *, const float *, int64_t, float *, dsq_pool *, void *, size_t);
int  dsq_w4a8_gemm_ref(const dsq_qview *, const float *, int64_t, float *);
size_t dsq_w4a8_gemm_scratch(const dsq_qview *, int64_t, int);
int  dsq_w4a8_gemm_with(const dsq_kernels *k, const dsq_qview *v, const float *x, int64_t T,
                        float *y, dsq_pool *pool, void *scratch, size_t scratch_size);

int  dsq_awq_blob_size(const dsq_qshape *s, size_t *out);
int  dsq_awq_quantize(const float *, int64_t, int64_t, const dsq_qshape *, const dsq_qparams *,
                      uint8_t *, dsq_diag *);
void dsq_awq_dequantize(const dsq_qview *, int64_t, int64_t, float *);
int  dsq_awq_gemm_ref(const dsq_qview *, const float *, int64_t, float *);
int  dsq_awq_gemm(const dsq_qview *, const float *, int64_t, float *, dsq_pool *, void *, size_t);
size_t dsq_awq_gemm_scratch(const dsq_qview *, int64_t, int);
int  dsq_awq_gemm_with(const dsq_kernels *k, const dsq_qview *v, const float *x, int64_t T,
                       float *y, dsq_pool *pool, void *scratch, size_t scratch_size);
/* The level's gemm_awq with an explicit number of split terms (1..3), for
 * tests and benchmarks; DSQ_ERR_UNSUPPORTED where the level or the group
 * size has no gemm_awq. */
int  dsq_awq_gemm_terms(const dsq_kernels *k, const dsq_qview *v, const float *x, int64_t T,
                        float *y, dsq_pool *pool, void *scratch, size_t scratch_size, int terms);

/* Grid error bound shared by the int rows (see dsq_scheme.error_bound). */
double dsq_grid_error_bound(const dsq_qview *, int64_t, int64_t, float);

#endif
