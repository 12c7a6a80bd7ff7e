/* scheme_awq.c - awq-w4a16 row: AutoAWQ asymmetric int4 with unsigned zero
 * points per (row, group); activations in int16 per 128-column block
 * (scheme.h, "awq-w4a16 activations"). Math follows AutoAWQ
 * pseudo_quantize_tensor(zero_point=True):
 *   scale = max(max - min, 1e-5) / 15
 *   zero  = clamp(-rint(min / scale), 0, 15)
 *   q     = clamp(rint(w / scale) + zero, 0, 15),   deq = (q - zero) * scale
 * with one deliberate difference: min and max are first widened to include
 * 0 (min = fminf(min, 0), max = fmaxf(max, 0), as compressed-tensors does).
 * That changes nothing when a group holds both signs (any real weight group
 * of 32+ values), but for a one-signed group AutoAWQ's zero clamps to 0 and
 * every value is shifted by up to |min|; widened, the error stays <= scale/2.
 * Optional clip search (AutoAWQ _compute_best_clip): for i < 10 clamp the
 * group to +-amax*(1 - i/20) (which shrinks both max and min), derive scale
 * and zero from the clamped range, and keep the ratio with the least
 * (importance-weighted) squared weight error. AutoAWQ measures the error on
 * X.W over sampled tokens; with only a per-channel importance vector
 * (mean |x_j|) we use sum_j (imp_j * (w_j - deq_j))^2 as the proxy.
 * Searched parameters (params->range_search, qsearch.c): from the min/max
 * (or each clipped) range, a least-squares search of scale and integer zero
 * under a weighted squared error; the format is unchanged. */
#include "scheme.h"
#include "kernels.h"
#include "actq.h"
#include "dsq_mem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int dsq_awq_blob_size(const dsq_qshape *s, size_t *out)
{
    dsq_qlayout L;
    int rc = dsq_qlayout_get(dsq_scheme_by_id(DSQ_SCHEME_AWQ_W4A16), s, &L);
    if (rc == 0) *out = L.total;
    return rc;
}

static void awq_params(float mn, float mx, float *scale, uint8_t *zero)
{
    /* finite inputs: plain compares (fminf/fmaxf are libm calls here) */
    mn = mn < 0.0f ? mn : 0.0f;
    mx = mx > 0.0f ? mx : 0.0f;
    float r = mx - mn;
    float s = (r > 1e-5f ? r : 1e-5f) / 15.0f;
    float z = -rintf(mn / s);
    z = z < 0.0f ? 0.0f : z > 15.0f ? 15.0f : z;
    *scale = s;
    *zero = (uint8_t)z;
}

/* Quantize one group with the given params into codes; returns the squared
 * (importance-weighted) error when err is wanted. */
static double awq_group(const dsq_kernels *k, const float *w, int64_t n, float s, uint8_t z,
                        const float *imp, int8_t *codes, int want_err)
{
    k->quant_i8(w, n, s, z, 0, 15, codes);
    if (!want_err) return 0.0;
    double err = 0.0;
    for (int64_t j = 0; j < n; j++) {
        double d = (double)w[j] - (double)((float)(codes[j] - (int)z) * s);
        if (imp) d *= imp[j];
        err += d * d;
    }
    return err;
}

/* Error weights of one search: on the stack for groups up to QS_STACK, else
 * allocated; when that fails the group keeps its unsearched params (a
 * search only lowers the error, never changes what the blob may hold). */
#define QS_STACK 256

void dsq_qgroup_awq(const dsq_kernels *k, const float *wg, int64_t len, int clip_search, int search,
                    const float *imp, int8_t *codes, float *scale, uint8_t *zero)
{
    float mn, mx, s;
    uint8_t z;
    k->minmax(wg, len, &mn, &mx);
    awq_params(mn, mx, &s, &z);
    float cst[QS_STACK], *c = NULL;
    if (search && len > 1) {
        c = len <= QS_STACK ? cst : malloc((size_t)len * sizeof *c);
        if (c) dsq_qsearch_weights(wg, len, imp, c);
    }
    if (clip_search) {
        float amax = fmaxf(fabsf(mn), fabsf(mx));
        double best = INFINITY;
        float bs = s;
        uint8_t bz = z;
        for (int it = 0; it < 10; it++) {
            float mv = amax * (1.0f - (float)it / 20.0f);
            float cs;
            uint8_t cz;
            awq_params(fmaxf(mn, -mv), fminf(mx, mv), &cs, &cz);
            /* searched: each clipped range seeds a search, scored with its weights */
            double e = c ? dsq_qsearch_awq(k, wg, len, c, fmaxf(mn, -mv), fminf(mx, mv), &cs, &cz)
                         : awq_group(k, wg, len, cs, cz, imp, codes, 1);
            if (e < best) {
                best = e;
                bs = cs;
                bz = cz;
            }
        }
        s = bs;
        z = bz;
    } else if (c) {
        dsq_qsearch_awq(k, wg, len, c, mn, mx, &s, &z);
    }
    if (c != cst) free(c);
    awq_group(k, wg, len, s, z, NULL, codes, 0);
    *scale = s;
    *zero = z;
}

int dsq_awq_quantize(const float *w, int64_t row0, int64_t nrows, const dsq_qshape *shape,
                     const dsq_qparams *p, uint8_t *blob, dsq_diag *diag)
{
    const dsq_scheme *sc = dsq_scheme_by_id(DSQ_SCHEME_AWQ_W4A16);
    dsq_qparams defaults;
    if (!p) {
        dsq_qparams_init(&defaults);
        p = &defaults;
    }
    dsq_qlayout L;
    int rc = dsq_quantize_check(sc, row0, nrows, shape, p, &L, diag);
    if (rc < 0) return rc;
    if (!w || !blob) return dsq_fail(diag, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "null argument");
    if (row0 == 0) dsq_qblob_write_header(blob, sc, shape, &L, 0, 0.0f, 0);
    const dsq_kernels *k = dsq_kernels_get();
    const int64_t cols = shape->cols, gs = L.gsize, ng = L.ngroups;
    int8_t *codes = malloc((size_t)cols);
    float *tmp = NULL;
    if (!codes) return dsq_fail(diag, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    if (p->in_scale || p->allow_nonfinite) {
        tmp = malloc((size_t)cols * sizeof *tmp);
        if (!tmp) {
            free(codes);
            return dsq_fail(diag, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        }
    }
    float *scales = (float *)(blob + L.s_off);
    uint8_t *zeros = blob + L.z_off;
    for (int64_t i = 0; i < nrows; i++) {
        int64_t n = row0 + i, bad = -1;
        const float *row;
        rc = dsq_qrow_prepare(k, w + i * cols, cols, p->in_scale, p->allow_nonfinite, tmp, &row, &bad);
        if (rc < 0) {
            dsq_fail(diag, rc, NULL, NULL, -1, "non-finite weight at row %lld column %lld",
                     (long long)n, (long long)bad);
            break;
        }
        for (int64_t g = 0; g < ng; g++) {
            int64_t k0 = g * gs, len = cols - k0 < gs ? cols - k0 : gs;
            const float *wg = row + k0;
            const float *imp = p->importance ? p->importance + k0 : NULL;
            float s;
            uint8_t z;
            if (p->given_scale) {
                s = p->given_scale[n * ng + g];
                z = p->given_zero[n * ng + g];
                awq_group(k, wg, len, s, z, NULL, codes + k0, 0);
            } else {
                dsq_qgroup_awq(k, wg, len, p->clip_search, dsq_qsearch_on(p, DSQ_SCHEME_AWQ_W4A16), imp,
                               codes + k0, &s, &z);
                /* the codes against the scale as an export stores it */
                float sr = dsq_scale_stored(s, p->scale_dtype);
                if (sr != s) {
                    s = sr;
                    awq_group(k, wg, len, s, z, NULL, codes + k0, 0);
                }
            }
            scales[n * ng + g] = s;
            zeros[n * ng + g] = z;
        }
        dsq_i4_pack_row((const uint8_t *)codes, cols, blob + L.w_off + (size_t)n * L.row_bytes,
                        L.row_bytes);
    }
    free(tmp);
    free(codes);
    return rc;
}

void dsq_awq_dequantize(const dsq_qview *v, int64_t row0, int64_t nrows, float *out)
{
    const int64_t cols = v->shape.cols, ng = v->layout.ngroups, gs = v->layout.gsize;
    for (int64_t i = 0; i < nrows; i++) {
        int64_t n = row0 + i;
        const uint8_t *row = v->w + (size_t)n * v->layout.row_bytes;
        float *o = out + i * cols;
        /* group by group, no division per weight (the converter's error
         * report dequantizes every tensor's sampled rows) */
        for (int64_t g = 0; g < ng; g++) {
            size_t gi = (size_t)(n * ng + g);
            int z = (int)v->zeros[gi];
            float s = v->scales[gi];
            int64_t j1 = (g + 1) * gs < cols ? (g + 1) * gs : cols;
            for (int64_t j = g * gs; j < j1; j++) o[j] = (float)(dsq_i4_get(row, j) - z) * s;
        }
    }
}

/* ---- gemm ------------------------------------------------------------------
 * Three drivers: the f32 kernel (gemv_awq: x as is, each weight the
 * reference's deq; AWQ_DEC1_ROWS-row blocks for one token, in dsq_rowsplit
 * order, AWQ_DEC_ROWS-row blocks for more), the bf16 kernel
 * (gemm_awq, AVX-512 BF16) over x split in bf16 terms as for bf16 prefill
 * (DSQ_BF16_TERMS, scheme.h; AWQ_DEC_ROWS-row blocks for decode,
 * DSQ_AWQ_RB-row blocks with a per-thread unpack buffer for more tokens),
 * and the float one (scheme_float.c: gemv_f, or dequantized tiles and
 * sgemm) where a level has neither. awq_use_f32 picks by the measurements
 * in its comment. Results never depend on the pool size. */

#define AWQ_DEC_ROWS 32
/* One token: a multiple of the f32 kernel's 6-row tiles (the AVX-512
 * gemv_awq's decode tiles), so a block ends in no short tiles; its tiles
 * prefetch past the block, which the same thread reads next (dsq_rowsplit
 * gives each thread a contiguous run of blocks). */
#define AWQ_DEC1_ROWS 48

static int64_t awq_kpad(int64_t cols);
static int awq_fast(const dsq_kernels *k, const dsq_qview *v);

/* The int16 kernel reads whole 128-column blocks and changes group only
 * between them: groups of a multiple of 128 columns, or one per row. Other
 * views (groups of an odd multiple of 64) and levels without it multiply x
 * rounded to the same codes (dsq_actq16_fake) on the float paths below. */
static int awq_int16(const dsq_kernels *k, const dsq_qview *v)
{
    return k && k->gemv_awq16 && k->awq16_prep && v && v->scheme &&
           (v->layout.ngroups == 1 || v->layout.gsize % 128 == 0);
}

/* x rounded to int16 blocks, as floats, for the float paths (64-aligned) */
static size_t xhat_bytes(const dsq_qview *v, int64_t T)
{
    return dsq_align_up((size_t)T * (size_t)v->shape.cols * sizeof(float), 64);
}

/* The f32 kernel unless one bf16 term is asked for and the bf16 kernel runs
 * here. With three or two bf16 terms the f32 kernel (gemv_f at T = 1, sgemm
 * on dequantized tiles above) is as fast or faster at every T (bench_quant
 * 2048 x 7168 shows it), and has no split's 2^-16 error. One term (x
 * rounded to bf16) is the bf16 kernel's alone: 4 vdpbf16ps per 128
 * weights against 8 FMAs. Groups: multiples of 64 columns, or one per row. */
static int awq_use_f32(const dsq_kernels *k, const dsq_qview *v, int64_t T)
{
    if (!(k && k->gemv_awq && v && v->scheme && T >= 1 &&
          (v->layout.ngroups == 1 || v->layout.gsize % 64 == 0)))
        return 0;
    return !awq_fast(k, v) || dsq_bf16_terms(v) >= 2;
}

/* The caller's scratch when it holds need bytes, else the stack buffer
 * local when need fits it, else an allocation the caller frees (*own).
 * NULL: out of memory. */
static void *awq_scratch(void *scratch, size_t scratch_size, size_t need, void *local,
                         size_t local_size, void **own)
{
    if (scratch && scratch_size >= need) return scratch;
    if (need <= local_size) return local;
    return *own = dsq_aligned_alloc(need);
}

static int64_t awq_kpad(int64_t cols)
{
    return (cols + 127) / 128 * 128;
}

/* The kernel unpacks whole 128-column blocks and changes group only between
 * them: groups of a multiple of 128 columns, or one group per row. */
static int awq_fast(const dsq_kernels *k, const dsq_qview *v)
{
    return k && k->gemm_awq && k->bf16_split && v && v->scheme &&
           (v->layout.ngroups == 1 || v->layout.gsize % 128 == 0);
}

static size_t awq_split_bytes(const dsq_qview *v, int64_t T)
{
    return (size_t)T * (size_t)awq_kpad(v->shape.cols) * 3 * sizeof(uint16_t);
}

/* Scratch of the split, then (prefill) one work buffer per thread. */
static size_t awq_need(const dsq_qview *v, int64_t T, int nthreads)
{
    size_t n = dsq_align_up(awq_split_bytes(v, T), 64);
    if (T > DSQ_AWQ_DECODE_T) n += (size_t)(nthreads < 1 ? 1 : nthreads) * DSQ_AWQ_WORK_BYTES;
    return n;
}

static size_t awq_xp_bytes(const dsq_qview *v, int64_t T)
{
    return (size_t)T * (size_t)awq_kpad(v->shape.cols) * sizeof(float);
}

/* The float paths' scratch after x rounded to int16 blocks (xhat_bytes). */
static size_t awq_float_need(const dsq_kernels *k, const dsq_qview *v, int64_t T, int nthreads)
{
    if (awq_use_f32(k, v, T)) return awq_xp_bytes(v, T);
    if (!awq_fast(k, v)) return dsq_float_gemm_scratch(v, T, nthreads);
    return awq_need(v, T, nthreads);
}

size_t dsq_awq_gemm_scratch(const dsq_qview *v, int64_t T, int nthreads)
{
    if (!v || T < 1) return 0;
    const dsq_kernels *k = dsq_kernels_get();
    if (awq_int16(k, v)) return dsq_awq16_act_bytes(T, v->shape.cols);
    return xhat_bytes(v, T) + awq_float_need(k, v, T, nthreads);
}

struct awq_job {
    const dsq_kernels *k;
    const dsq_qview *v;
    dsq_bfact a;
    uint16_t *xh, *xl, *xl2;
    uint8_t *work;   /* DSQ_AWQ_WORK_BYTES per thread (prefill) */
    int64_t rb;      /* rows per task */
    float *y;
};

/* One token's split into the job's terms (scheme.h), in the kernel's order
 * (dsq_awq_perm) and zero padded to kpad, a chunk of blocks at a time: one
 * term rounds; two are (hi, lo) of x; three take hi, then (lo, lo2) of the
 * residual x - hi (exact in f32; 0 where hi is not finite). */
static void awq_split_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    struct awq_job *j = ctx;
    const int64_t cols = j->v->shape.cols, kp = j->a.kpad;
    const float *x = j->a.x + (int64_t)item * cols;
    uint16_t *h = j->xh + (int64_t)item * kp;
    uint16_t *l = j->xl ? j->xl + (int64_t)item * kp : NULL;
    uint16_t *l2 = j->xl2 ? j->xl2 + (int64_t)item * kp : NULL;
    enum { CH = 512 };
    float xp[CH], r[CH];
    for (int64_t c0 = 0; c0 < kp; c0 += CH) {
        const int64_t n = kp - c0 < CH ? kp - c0 : CH;
        for (int64_t i = 0; i < n; i++) {
            int64_t c = c0 + (i & ~(int64_t)127) + dsq_awq_perm((int)(i & 127));
            xp[i] = c < cols ? x[c] : 0.0f;
        }
        if (!l) {
            j->k->f32_to_bf16(xp, n, h + c0);
        } else if (!l2) {
            j->k->split_bf16(xp, n, h + c0, l + c0);
        } else {
            j->k->f32_to_bf16(xp, n, h + c0);
            for (int64_t i = 0; i < n; i++) {
                float hf = dsq_bf16_to_f32(h[c0 + i]);
                r[i] = isfinite(hf) ? xp[i] - hf : 0.0f;
            }
            j->k->split_bf16(r, n, l + c0, l2 + c0);
        }
    }
}

static void awq_gemm_task(void *ctx, size_t item, int tid)
{
    struct awq_job *j = ctx;
    int64_t n0 = (int64_t)item * j->rb, n1 = n0 + j->rb;
    if (n1 > j->v->shape.rows) n1 = j->v->shape.rows;
    j->k->gemm_awq(j->v, &j->a, n0, n1, j->y,
                   j->work ? j->work + (size_t)tid * DSQ_AWQ_WORK_BYTES : NULL);
}

int dsq_awq_gemm_terms(const dsq_kernels *k, const dsq_qview *v, const float *x, int64_t T,
                       float *y, dsq_pool *pool, void *scratch, size_t scratch_size, int terms)
{
    if (!awq_fast(k, v) || terms < 1 || terms > 3) return DSQ_ERR_UNSUPPORTED;
    if (T < 0 || (T > 0 && (!x || !y))) return DSQ_ERR_INVALID_ARG;
    if (T == 0) return DSQ_OK;
    const int64_t rows = v->shape.rows, cols = v->shape.cols;
    dsq_pool *gp = dsq_gemm_pool(pool, rows, cols, T);
    const int nthreads = gp ? dsq_pool_size(gp) : 1;
    const size_t need = awq_need(v, T, nthreads);
    /* decode of sub-views without scratch (mla.c) splits on the stack */
    _Alignas(64) uint16_t local[24576];   /* 48 KB: three terms of 8192 columns */
    void *own = NULL;
    scratch = awq_scratch(scratch, scratch_size, need, local, sizeof local, &own);
    if (!scratch) return DSQ_ERR_NOMEM;
    struct awq_job j = { k, v, { T, x, awq_kpad(cols), NULL, NULL, NULL, 0 }, NULL, NULL, NULL,
                         NULL, AWQ_DEC_ROWS, y };
    const size_t plane = (size_t)T * (size_t)j.a.kpad;
    j.xh = scratch;
    if (terms >= 2) j.xl = j.xh + plane;
    if (terms == 3) j.xl2 = j.xl + plane;
    j.a.xh = j.xh;
    j.a.xl = j.xl;
    j.a.xl2 = j.xl2;
    if (T > DSQ_AWQ_DECODE_T) {
        j.work = (uint8_t *)scratch + dsq_align_up(awq_split_bytes(v, T), 64);
        j.rb = DSQ_AWQ_RB;
    }
    dsq_pool_run(dsq_gemm_pool(pool, 1, cols, T * 64), (size_t)T, awq_split_task, &j);
    dsq_pool_run(gp, (size_t)((rows + j.rb - 1) / j.rb), awq_gemm_task, &j);
    free(own);
    return DSQ_OK;
}

struct awq_dec_job {
    const dsq_kernels *k;
    const dsq_qview *v;
    const float *x;
    float *xp;
    int64_t T, kpad, rb;
    float *y;
    dsq_rowsplit split;
};

/* Rows [*n0, *n1) of pool item `item` (blocks of rb rows in dsq_rowsplit
 * order); 0 when the item has none. */
static int awq_item_rows(const dsq_rowsplit *sp, size_t item, int64_t rb, int64_t rows,
                         int64_t *n0, int64_t *n1)
{
    const int64_t b = dsq_rowsplit_block(sp, item);
    if (b < 0) return 0;
    *n0 = b * rb;
    *n1 = *n0 + rb < rows ? *n0 + rb : rows;
    return 1;
}

/* The two steps of a decode-kernel gemm: prep (one token per item: x into
 * the kernel's form), then blocks of rb rows over the pool in dsq_rowsplit
 * order (split holds the order for rows' awq_item_rows). */
static void awq_run(dsq_pool *pool, const dsq_qview *v, int64_t T, int64_t rb, dsq_rowsplit *split,
                    dsq_task_fn prep, dsq_task_fn rows, void *job)
{
    const int64_t n = v->shape.rows, cols = v->shape.cols;
    dsq_pool_run(dsq_gemm_pool(pool, 1, cols, T * 64), (size_t)T, prep, job);
    dsq_pool *use = dsq_gemm_pool(pool, n, cols, T);
    const size_t items = dsq_rowsplit_init(split, (size_t)((n + rb - 1) / rb), T, dsq_pool_size(use));
    dsq_pool_run(use, items, rows, job);
}

static void awq_dec_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    struct awq_dec_job *j = ctx;
    int64_t n0, n1;
    if (awq_item_rows(&j->split, item, j->rb, j->v->shape.rows, &n0, &n1))
        j->k->gemv_awq(j->v, j->xp, j->T, j->kpad, n0, n1, j->y);
}

/* x into the f32 kernel's order (dsq_awq_perm16), one token per item. */
static void awq_perm_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    const struct awq_dec_job *j = ctx;
    const int64_t cols = j->v->shape.cols, kp = j->kpad;
    const float *xt = j->x + (int64_t)item * cols;
    float *o = j->xp + (int64_t)item * kp;
    int64_t b = 0;
    /* full blocks: dsq_awq_perm16 is a 4 x 16 transpose of each 64-column
     * half (position 32m + 16h + l holds column 64h + 4l + m) */
    for (; b + 128 <= cols; b += 128)
        for (int m = 0; m < 4; m++)
            for (int h = 0; h < 2; h++)
                for (int l = 0; l < 16; l++) o[b + 32 * m + 16 * h + l] = xt[b + 64 * h + 4 * l + m];
    for (int64_t p = b; p < kp; p++) {
        int64_t c = b + dsq_awq_perm16((int)(p - b));
        o[p] = c < cols ? xt[c] : 0.0f;
    }
}

/* The f32 kernel: x permuted once per call (a few microseconds per token
 * against a stream of rows x cols nibbles), then row blocks over the pool. */
static int awq_gemm_f32(const dsq_kernels *k, const dsq_qview *v, const float *x, int64_t T,
                        float *y, dsq_pool *pool, void *scratch, size_t scratch_size)
{
    const int64_t cols = v->shape.cols;
    const size_t need = awq_xp_bytes(v, T);
    _Alignas(64) float local[8192];   /* 32 KB: one token of 8192 columns (mla.c's sub-views) */
    void *own = NULL;
    scratch = awq_scratch(scratch, scratch_size, need, local, sizeof local, &own);
    if (!scratch) return DSQ_ERR_NOMEM;
    struct awq_dec_job j = { k, v, x, scratch, T, awq_kpad(cols),
                             T == 1 ? AWQ_DEC1_ROWS : AWQ_DEC_ROWS, y, { 0, 0, 0 } };
    awq_run(pool, v, T, j.rb, &j.split, awq_perm_task, awq_dec_task, &j);
    free(own);
    return DSQ_OK;
}

/* ---- int16 activations ------------------------------------------------- */

/* dsq_awq16_act's arrays in one buffer: q, xs, sf at off[0..2]; the total */
static size_t awq16_layout(int64_t T, int64_t cols, size_t off[3])
{
    const size_t nb = (size_t)((cols + 127) / 128), t = (size_t)(T < 1 ? 1 : T);
    off[0] = 0;
    off[1] = dsq_align_up(t * nb * 128 * sizeof(int16_t), 64);
    off[2] = off[1] + dsq_align_up(t * nb * sizeof(float), 64);
    return off[2] + t * nb * 16 * sizeof(float);
}

size_t dsq_awq16_act_bytes(int64_t T, int64_t cols)
{
    size_t off[3];
    return awq16_layout(T, cols, off);
}

void dsq_awq16_act_init(dsq_awq16_act *a, void *buf, int64_t T, int64_t cols)
{
    size_t off[3];
    awq16_layout(T, cols, off);
    a->T = T;
    a->nb = (cols + 127) / 128;
    a->kpad = 128 * a->nb;
    a->q = (int16_t *)((uint8_t *)buf + off[0]);
    a->xs = (float *)((uint8_t *)buf + off[1]);
    a->sf = (float *)((uint8_t *)buf + off[2]);
}

struct awq16_job {
    const dsq_kernels *k;
    const dsq_qview *v;
    const float *x;
    dsq_awq16_act a;
    int64_t rb;
    float *y;
    dsq_rowsplit split;
};

static void awq16_prep_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    const struct awq16_job *j = ctx;
    const int64_t cols = j->v->shape.cols;
    j->k->awq16_prep(j->x + (int64_t)item * cols, cols, (int64_t)item, &j->a);
}

static void awq16_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    struct awq16_job *j = ctx;
    int64_t n0, n1;
    if (awq_item_rows(&j->split, item, j->rb, j->v->shape.rows, &n0, &n1))
        j->k->gemv_awq16(j->v, &j->a, n0, n1, j->y);
}

/* x quantized once per call (a few microseconds per token), then row blocks
 * over the pool in dsq_rowsplit order, as the f32 kernel's driver. */
static int awq_gemm_i16(const dsq_kernels *k, const dsq_qview *v, const float *x, int64_t T,
                        float *y, dsq_pool *pool, void *scratch, size_t scratch_size)
{
    const int64_t cols = v->shape.cols;
    _Alignas(64) uint8_t local[24576];   /* one token of up to 8192 columns (mla.c's sub-views) */
    void *own = NULL;
    scratch = awq_scratch(scratch, scratch_size, dsq_awq16_act_bytes(T, cols), local, sizeof local, &own);
    if (!scratch) return DSQ_ERR_NOMEM;
    struct awq16_job j = { k, v, x, { 0 }, T == 1 ? AWQ_DEC1_ROWS : AWQ_DEC_ROWS, y, { 0, 0, 0 } };
    dsq_awq16_act_init(&j.a, scratch, T, cols);
    awq_run(pool, v, T, j.rb, &j.split, awq16_prep_task, awq16_task, &j);
    free(own);
    return DSQ_OK;
}

/* The f32 kernel's gemm in two steps (scheme.h split_*, dsq_gemm_many):
 * the permuted x, then the same row blocks' gemv_awq. Where the gemm takes
 * another kernel (one bf16 term, other levels) there is no split. */
size_t dsq_awq_split_size(const dsq_qview *v, int64_t T)
{
    const dsq_kernels *k = dsq_kernels_get();
    if (T < 1) return 0;
    if (awq_int16(k, v)) return dsq_awq16_act_bytes(T, v->shape.cols);
    return awq_use_f32(k, v, T) ? xhat_bytes(v, T) + awq_xp_bytes(v, T) : 0;
}

/* prep: the int16 codes, or (f32 kernel) x rounded to them, then permuted
 * after it */
void dsq_awq_split_prep(const dsq_qview *v, const float *x, int64_t T, void *prep)
{
    const dsq_kernels *k = dsq_kernels_get();
    if (awq_int16(k, v)) {
        struct awq16_job j = { k, v, x, { 0 }, 0, NULL, { 0, 0, 0 } };
        dsq_awq16_act_init(&j.a, prep, T, v->shape.cols);
        for (int64_t t = 0; t < T; t++) awq16_prep_task(&j, (size_t)t, 0);
        return;
    }
    float *xf = prep;
    dsq_actq16_fake(x, T, v->shape.cols, xf);
    struct awq_dec_job j = { k, v, xf, (float *)((uint8_t *)prep + xhat_bytes(v, T)), T,
                             awq_kpad(v->shape.cols), 0, NULL, { 0, 0, 0 } };
    for (int64_t t = 0; t < T; t++) awq_perm_task(&j, (size_t)t, 0);
}

int64_t dsq_awq_split_block(const dsq_qview *v, int64_t T)
{
    (void)v;
    return T == 1 ? AWQ_DEC1_ROWS : AWQ_DEC_ROWS;
}

void dsq_awq_split_rows(const dsq_qview *v, const void *prep, int64_t T, int64_t n0, int64_t n1, float *y)
{
    const dsq_kernels *k = dsq_kernels_get();
    if (awq_int16(k, v)) {
        dsq_awq16_act a;
        dsq_awq16_act_init(&a, (void *)prep, T, v->shape.cols);
        k->gemv_awq16(v, &a, n0, n1, y);
        return;
    }
    k->gemv_awq(v, (const float *)((const uint8_t *)prep + xhat_bytes(v, T)), T,
                awq_kpad(v->shape.cols), n0, n1, y);
}

/* The specification (gemm_ref): x rounded to the int16 codes, then the
 * float reference's dot (scheme_float.c). */
int dsq_awq_gemm_ref(const dsq_qview *v, const float *x, int64_t T, float *y)
{
    if (T < 1) return DSQ_OK;
    if (!x || !y) return DSQ_ERR_INVALID_ARG;
    float *xf = malloc((size_t)T * (size_t)v->shape.cols * sizeof *xf);
    if (!xf) return DSQ_ERR_NOMEM;
    dsq_actq16_fake(x, T, v->shape.cols, xf);
    int rc = dsq_float_gemm_ref(v, xf, T, y);
    free(xf);
    return rc;
}

/* The float paths on x as given (already rounded by the caller). */
static int awq_gemm_float(const dsq_kernels *k, const dsq_qview *v, const float *x, int64_t T,
                          float *y, dsq_pool *pool, void *scratch, size_t scratch_size)
{
    if (awq_use_f32(k, v, T)) return awq_gemm_f32(k, v, x, T, y, pool, scratch, scratch_size);
    if (awq_fast(k, v))
        return dsq_awq_gemm_terms(k, v, x, T, y, pool, scratch, scratch_size, dsq_bf16_terms(v));
    return dsq_float_gemm_with(k, v, x, T, y, pool, scratch, scratch_size);
}

int dsq_awq_gemm_with(const dsq_kernels *k, const dsq_qview *v, const float *x, int64_t T,
                      float *y, dsq_pool *pool, void *scratch, size_t scratch_size)
{
    if (T >= 1 && (!x || !y)) return DSQ_ERR_INVALID_ARG;
    if (T < 1) return DSQ_OK;
    if (awq_int16(k, v)) return awq_gemm_i16(k, v, x, T, y, pool, scratch, scratch_size);
    /* x rounded to the int16 codes first: in the caller's scratch when it
     * holds the float path's too, else allocated */
    const size_t xb = xhat_bytes(v, T);
    float *xf, *own = NULL;
    if (scratch && scratch_size >= xb + awq_float_need(k, v, T, 1)) {
        xf = scratch;
        scratch = (uint8_t *)scratch + xb;
        scratch_size -= xb;
    } else if (!(xf = own = dsq_aligned_alloc(xb))) {
        return DSQ_ERR_NOMEM;
    }
    dsq_actq16_fake(x, T, v->shape.cols, xf);
    int rc = awq_gemm_float(k, v, xf, T, y, pool, scratch, scratch_size);
    free(own);
    return rc;
}

int dsq_awq_gemm(const dsq_qview *v, const float *x, int64_t T, float *y, dsq_pool *pool,
                 void *scratch, size_t scratch_size)
{
    return dsq_awq_gemm_with(dsq_kernels_get(), v, x, T, y, pool, scratch, scratch_size);
}
