/* scheme_float.c - f32 and bf16 passthrough rows, and the float gemm driver
 * shared by every scheme with float activations (f32, bf16, awq-w4a16).
 *
 * Float gemm: decode-sized T (<= FLT_GEMV_MAX_T) runs the kernel level's
 * gemv_f over row blocks split across the pool (weights are streamed once,
 * which is what decode is bound by). bf16 weights with larger T go to the
 * level's gemm_bf16 (blocked over rows and tokens, weights read once per
 * call; AVX-512 BF16 dot products on split activations where the CPU has
 * them, else weights widened on the fly), row blocks per pool task as
 * bf16_task_rows says.
 * f32 and awq with larger T: each pool task gets a block
 * of FLT_RB output rows: it dequantizes [FLT_RB x FLT_KB] tiles (L2 sized)
 * into its own buffer and accumulates them with OpenBLAS cblas_sgemm (beta
 * = 1 after the first K tile); f32 blobs go to sgemm directly. The calls'
 * shapes are fixed by the matrix, not by the thread count, so results do not
 * depend on the pool size. The summation order is OpenBLAS's, so fast vs
 * reference agree within the float dot bound (tests), not bit for bit.
 *
 * Threads: the pool parallelizes over row blocks, so OpenBLAS should run
 * single-threaded (OPENBLAS_NUM_THREADS=1 or openblas_set_num_threads(1) in
 * the program) or the two thread teams oversubscribe the cores. This library
 * does not change the global OpenBLAS setting itself. */
#include "scheme.h"
#include "kernels.h"
#include "dsq_mem.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FLT_GEMV_MAX_T 4
#define FLT_ROW_BLOCK  48     /* rows per pool task in gemv: 4 of gemv_f's 12-row tiles */
#define FLT_RB         128    /* output rows per pool task (sgemm path) */
#define FLT_KB         512    /* dequantized tile columns (multiple of 128); 256 KB tiles */
#define FLT_BF16_RB    64     /* output rows per pool task (bf16 decode), the unit of a prefill task */
#define FLT_BF16_RB_MAX 512   /* most output rows per pool task (bf16 prefill) */
#define FLT_BF16_BIG_T 8      /* from this many tokens on, prefill-sized tasks */
#define FLT_BF16_TASKS 8      /* fewest prefill tasks per thread (while rows allow) */
/* bf16 decode (T = 1) of rows this long or longer goes to gemv_f (weights
 * widened to f32, exact products; 12-row tiles on AVX-512) instead of the
 * bf16 dot-product kernel (4-row tiles in 2048-column chunks, three
 * activation terms). Long rows are bound by the weight bytes read, and
 * gemv_f's 12-row tiles read each activation chunk once for 12 rows, so
 * they reach a higher share of memory bandwidth than the 4-row tiles
 * (`bench_quant R C 1 9 1` and `bench_engine -P` on q_b_proj's
 * 24576 x 1536 and the experts' 7168 x 2048 show it; short rows go to the
 * tiles in segments, kernels_avx512_float.c gemv_tiles12). Rows under 1024
 * columns (kv_b_proj's 512, in decode read through MLA's absorbed
 * products) keep the dot-product kernel: gemv_f is no faster on W_UV's
 * 512-column rows. */
#define FLT_BF16_GEMV_COLS 1024

/* ---- passthrough rows ---------------------------------------------------- */

int dsq_f32_blob_size(const dsq_qshape *s, size_t *out)
{
    dsq_qlayout L;
    int rc = dsq_qlayout_get(dsq_scheme_by_id(DSQ_SCHEME_F32), s, &L);
    if (rc == 0) *out = L.total;
    return rc;
}

int dsq_bf16_blob_size(const dsq_qshape *s, size_t *out)
{
    dsq_qlayout L;
    int rc = dsq_qlayout_get(dsq_scheme_by_id(DSQ_SCHEME_BF16), s, &L);
    if (rc == 0) *out = L.total;
    return rc;
}

static int pass_quantize(uint32_t id, const float *w, int64_t row0, int64_t nrows,
                         const dsq_qshape *shape, const dsq_qparams *p, uint8_t *blob,
                         dsq_diag *diag)
{
    const dsq_scheme *sc = dsq_scheme_by_id(id);
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
    const int64_t cols = shape->cols;
    float *tmp = NULL;
    if (p->in_scale || p->allow_nonfinite) {
        tmp = malloc((size_t)cols * sizeof *tmp);
        if (!tmp) return dsq_fail(diag, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    for (int64_t i = 0; i < nrows; i++) {
        int64_t n = row0 + i, bad = -1;
        const float *row;
        rc = dsq_qrow_prepare(k, w + i * cols, cols, p->in_scale, p->allow_nonfinite, tmp, &row, &bad);
        if (rc < 0) {
            dsq_fail(diag, rc, NULL, NULL, -1, "non-finite weight at row %lld column %lld",
                     (long long)n, (long long)bad);
            break;
        }
        uint8_t *o = blob + L.w_off + (size_t)n * L.row_bytes;
        size_t used;
        if (id == DSQ_SCHEME_F32) {
            used = (size_t)cols * 4;
            memcpy(o, row, used);
        } else {
            used = (size_t)cols * 2;
            k->f32_to_bf16(row, cols, (uint16_t *)o);
        }
        memset(o + used, 0, L.row_bytes - used);
    }
    free(tmp);
    return rc;
}

int dsq_f32_quantize(const float *w, int64_t row0, int64_t nrows, const dsq_qshape *shape,
                     const dsq_qparams *p, uint8_t *blob, dsq_diag *diag)
{
    return pass_quantize(DSQ_SCHEME_F32, w, row0, nrows, shape, p, blob, diag);
}

int dsq_bf16_quantize(const float *w, int64_t row0, int64_t nrows, const dsq_qshape *shape,
                      const dsq_qparams *p, uint8_t *blob, dsq_diag *diag)
{
    return pass_quantize(DSQ_SCHEME_BF16, w, row0, nrows, shape, p, blob, diag);
}

void dsq_f32_dequantize(const dsq_qview *v, int64_t row0, int64_t nrows, float *out)
{
    const int64_t cols = v->shape.cols;
    for (int64_t i = 0; i < nrows; i++)
        memcpy(out + i * cols, v->w + (size_t)(row0 + i) * v->layout.row_bytes, (size_t)cols * 4);
}

void dsq_bf16_dequantize(const dsq_qview *v, int64_t row0, int64_t nrows, float *out)
{
    const int64_t cols = v->shape.cols;
    for (int64_t i = 0; i < nrows; i++) {
        const uint16_t *h = (const uint16_t *)(v->w + (size_t)(row0 + i) * v->layout.row_bytes);
        for (int64_t j = 0; j < cols; j++) out[i * cols + j] = dsq_bf16_to_f32(h[j]);
    }
}

double dsq_f32_error_bound(const dsq_qview *v, int64_t row, int64_t col, float w)
{
    (void)v; (void)row; (void)col; (void)w;
    return 0.0;
}

/* Round to nearest bf16: half an ulp of the 8-bit significand. */
double dsq_bf16_error_bound(const dsq_qview *v, int64_t row, int64_t col, float w)
{
    (void)v; (void)row; (void)col;
    double a = fabs((double)w);
    if (a < 0x1p-126) return 0x1p-134;   /* subnormal range: bf16 ulp is 2^-133 */
    int e;
    frexp(a, &e);                        /* a in [2^(e-1), 2^e) */
    return ldexp(1.0, e - 1 - 8);
}

/* ---- float gemm driver --------------------------------------------------- */

/* Columns of one split term: cols rounded up to DSQ_BF16_KALIGN, and to an
 * odd multiple of it (dsq_bfact.ld): a 4 KB-multiple token stride would put
 * every row of a kernel tile in the same two L1 sets. */
static int64_t bf16_kpad(const dsq_qview *v)
{
    int64_t kpad = (v->shape.cols + DSQ_BF16_KALIGN - 1) / DSQ_BF16_KALIGN * DSQ_BF16_KALIGN;
    return (kpad / DSQ_BF16_KALIGN) % 2 ? kpad : kpad + DSQ_BF16_KALIGN;
}

/* bf16 prefill: split activations, up to three terms of kpad per token */
static size_t bf16_split_bytes(const dsq_qview *v, int64_t T)
{
    return (size_t)T * (size_t)bf16_kpad(v) * 3 * sizeof(uint16_t);
}

/* Terms of the activation split (scheme.h, "bf16 prefill"): the view's
 * bf16_terms (the engine's --bf16-terms) when set, else DSQ_BF16_TERMS from
 * the environment, else 3, which keeps f32 accuracy; 2 trades 2^-16
 * relative error per activation for 1.5x fewer dot products, 1 rounds
 * activations to bf16 as llama.cpp's and vLLM's bf16 paths do (2^-9, 3x
 * fewer; for speed at llama.cpp's numerics, not for KLD baselines).
 * awq-w4a16's bf16 kernel takes the same choice. */
int dsq_bf16_terms(const dsq_qview *v)
{
    if (v->bf16_terms >= 1 && v->bf16_terms <= 3) return v->bf16_terms;
    static _Atomic int cached;
    int t = cached;
    if (!t) {
        const char *e = getenv("DSQ_BF16_TERMS");
        t = e && e[0] >= '1' && e[0] <= '3' && e[1] == 0 ? e[0] - '0' : 3;
        cached = t;
    }
    return t;
}

size_t dsq_float_gemm_scratch(const dsq_qview *v, int64_t T, int nthreads)
{
    if (!v || T < 1 || v->scheme->id == DSQ_SCHEME_F32) return 0;
    /* bf16 on a native-bf16 level splits activations for every T but the
     * decode of long rows, which runs gemv_f on x itself */
    if (v->scheme->id == DSQ_SCHEME_BF16 && T == 1 && v->shape.cols >= FLT_BF16_GEMV_COLS) return 0;
    if (v->scheme->id == DSQ_SCHEME_BF16 && T <= FLT_GEMV_MAX_T) return bf16_split_bytes(v, T);
    if (T <= FLT_GEMV_MAX_T) return 0;
    if (nthreads < 1) nthreads = 1;
    /* one dequantized [FLT_RB x FLT_KB] tile per thread (sgemm path) */
    size_t tiles = (size_t)nthreads * FLT_RB * FLT_KB * sizeof(float);
    if (v->scheme->id != DSQ_SCHEME_BF16) return tiles;
    size_t split = bf16_split_bytes(v, T);
    return split > tiles ? split : tiles;
}

struct gemv_job {
    const dsq_kernels *k;
    const dsq_qview *v;
    const float *x;
    int64_t T;
    float *y;
};

static void gemv_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    struct gemv_job *j = ctx;
    int64_t n0 = (int64_t)item * FLT_ROW_BLOCK, n1 = n0 + FLT_ROW_BLOCK;
    if (n1 > j->v->shape.rows) n1 = j->v->shape.rows;
    j->k->gemv_f(j->v, j->x, j->T, n0, n1, j->y);
}

struct sgemm_job {
    const dsq_kernels *k;
    const dsq_qview *v;
    const float *x;
    int64_t T;
    float *y;
    float *tiles;   /* FLT_RB * FLT_KB floats per thread */
};

/* One block of FLT_RB output rows: dequantize [FLT_RB x FLT_KB] tiles into
 * this thread's buffer and accumulate x[:, k0:k1] . tile^T into y with
 * sgemm (beta = 1 after the first tile). The call shapes depend only on the
 * matrix, never on the thread count. */
static void sgemm_task(void *ctx, size_t item, int tid)
{
    struct sgemm_job *j = ctx;
    const dsq_qview *v = j->v;
    const int64_t rows = v->shape.rows, cols = v->shape.cols;
    int64_t r0 = (int64_t)item * FLT_RB, r1 = r0 + FLT_RB < rows ? r0 + FLT_RB : rows;
    if (v->scheme->id == DSQ_SCHEME_F32) {
        const float *w = (const float *)(const void *)(v->w + (size_t)r0 * v->layout.row_bytes);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)j->T, (int)(r1 - r0), (int)cols,
                    1.0f, j->x, (int)cols, w, (int)(v->layout.row_bytes / 4), 0.0f, j->y + r0,
                    (int)rows);
        return;
    }
    float *tile = j->tiles + (size_t)tid * FLT_RB * FLT_KB;
    for (int64_t k0 = 0; k0 < cols; k0 += FLT_KB) {
        int64_t k1 = k0 + FLT_KB < cols ? k0 + FLT_KB : cols;
        j->k->dequant_tile(v, r0, r1, k0, k1, tile, FLT_KB);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)j->T, (int)(r1 - r0),
                    (int)(k1 - k0), 1.0f, j->x + k0, (int)cols, tile, FLT_KB,
                    k0 == 0 ? 0.0f : 1.0f, j->y + r0, (int)rows);
    }
}

struct bf16_job {
    const dsq_kernels *k;
    const dsq_qview *v;
    dsq_bfact a;
    uint16_t *xh, *xl, *xl2;
    float *y;
    int64_t rb;   /* output rows per pool task (bf16_task_rows) */
};

/* Output rows per pool task of the bf16 gemm. Decode: FLT_BF16_RB. Prefill:
 * a task walks the columns in chunks and, per chunk, every 64-row block of
 * its rows against all tokens, so the chunk's split activations (T x 256
 * columns x terms: 192 KB at T = 128, three terms) are read from L2 once
 * per block; with one block per task they came from L3 again for every 64
 * rows (12 MB per block for o_proj's 16384 columns). Up to FLT_BF16_RB_MAX
 * rows, keeping >= FLT_BF16_TASKS tasks per thread: on a shared machine one
 * core may run slower, and the pool balances only whole tasks (4 blocks
 * per task already get most of the L2 reuse: o_proj 1 thread 267 -> 241 ms
 * at 256 rows, 240 at 512). Each row's sums do not
 * depend on the task it is in, so this changes no value. */
static int64_t bf16_task_rows(int64_t rows, int64_t T, int nthreads)
{
    if (T < FLT_BF16_BIG_T) return FLT_BF16_RB;
    int64_t per = (rows + FLT_BF16_RB - 1) / FLT_BF16_RB / (FLT_BF16_TASKS * (int64_t)(nthreads > 0 ? nthreads : 1));
    per = per < 1 ? 1 : per > FLT_BF16_RB_MAX / FLT_BF16_RB ? FLT_BF16_RB_MAX / FLT_BF16_RB : per;
    return per * FLT_BF16_RB;
}

/* One token's split. Three terms: split x into (hi, lo), then the residual
 * x - hi (exact in f32; 0 where hi is not finite) into (lo, lo2), in
 * stack-sized chunks; bf16(x - hi) is lo both times. */
static void split_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    struct bf16_job *j = ctx;
    const int64_t cols = j->v->shape.cols, kp = j->a.kpad, ld = j->a.ld;
    const float *x = j->a.x + (int64_t)item * cols;
    uint16_t *h = j->xh + (int64_t)item * ld, *l = j->xl ? j->xl + (int64_t)item * ld : NULL;
    if (!l) {   /* one term: plain rounding */
        j->k->f32_to_bf16(x, cols, h);
        for (int64_t c = cols; c < kp; c++) h[c] = 0;
        return;
    }
    /* three terms: lo comes from the residual's split below, so only hi here */
    if (j->xl2) j->k->f32_to_bf16(x, cols, h);
    else j->k->split_bf16(x, cols, h, l);
    for (int64_t c = cols; c < kp; c++) h[c] = l[c] = 0;
    if (!j->xl2) return;
    uint16_t *l2 = j->xl2 + (int64_t)item * ld;
    enum { CH = 512 };
    float r[CH];
    for (int64_t c0 = 0; c0 < cols; c0 += CH) {
        const int64_t n = cols - c0 < CH ? cols - c0 : CH;
        for (int64_t i = 0; i < n; i++) {
            float hf = dsq_bf16_to_f32(h[c0 + i]);
            r[i] = isfinite(hf) ? x[c0 + i] - hf : 0.0f;
        }
        j->k->split_bf16(r, n, l + c0, l2 + c0);
    }
    for (int64_t c = cols; c < kp; c++) l2[c] = 0;
}

static void bf16_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    struct bf16_job *j = ctx;
    int64_t n0 = (int64_t)item * j->rb, n1 = n0 + j->rb;
    if (n1 > j->v->shape.rows) n1 = j->v->shape.rows;
    j->k->gemm_bf16(j->v, &j->a, n0, n1, j->y);
}

/* bf16 weights, T > FLT_GEMV_MAX_T, a level with gemm_bf16: split the
 * activations once (one token per pool task) when the level uses the
 * split, then row blocks (bf16_task_rows) over the pool. */
static int bf16_gemm(const dsq_kernels *k, const dsq_qview *v, const float *x, int64_t T, float *y,
                     dsq_pool *pool, void *scratch, size_t scratch_size)
{
    const int64_t rows = v->shape.rows, cols = v->shape.cols;
    struct bf16_job j = { k, v, { T, x, 0, NULL, NULL, NULL, 0 }, NULL, NULL, NULL, y, FLT_BF16_RB };
    void *own = NULL;
    /* decode-sized calls without scratch (small sub-views) split on the
     * stack instead of calling malloc per call; declared here, not in the
     * block below, because the gemm tasks read it after that block */
    _Alignas(64) uint16_t local[3 * 8224];   /* 48 KB: one token of up to 8192 columns */
    /* three terms with prefill-sized T: the kernel widens the weights and
     * multiplies x as is (fewer instructions than three dot products, and
     * x exact), so no split; xh stays NULL to say so (kernels.h) */
    const int split = k->bf16_split && !(dsq_bf16_terms(v) == 3 && T >= FLT_BF16_BIG_T);
    if (split) {
        size_t need = bf16_split_bytes(v, T);
        if (!scratch && need <= sizeof local) {
            scratch = local;
        } else if (!scratch) {
            scratch = own = dsq_aligned_alloc(need);
            if (!own) return DSQ_ERR_NOMEM;
        } else if (scratch_size < need) {
            return DSQ_ERR_INVALID_ARG;
        }
        /* a token's terms side by side: xh, xl, xl2 at kpad apart, ld per token */
        j.a.kpad = bf16_kpad(v);
        j.xh = scratch;
        const int terms = dsq_bf16_terms(v);
        j.a.ld = terms * j.a.kpad;
        if (terms >= 2) j.xl = j.xh + j.a.kpad;
        if (terms == 3) j.xl2 = j.xl + j.a.kpad;
        j.a.xh = j.xh;
        j.a.xl = j.xl;
        j.a.xl2 = j.xl2;
        dsq_pool_run(dsq_gemm_pool(pool, 1, cols, T * 64), (size_t)T, split_task, &j);
    }
    dsq_pool *gp = dsq_gemm_pool(pool, rows, cols, T);
    j.rb = bf16_task_rows(rows, T, dsq_pool_size(gp));
    dsq_pool_run(gp, (size_t)((rows + j.rb - 1) / j.rb), bf16_task, &j);
    free(own);
    return DSQ_OK;
}

int dsq_float_gemm_with(const dsq_kernels *k, const dsq_qview *v, const float *x, int64_t T,
                        float *y, dsq_pool *pool, void *scratch, size_t scratch_size)
{
    if (!v || !v->scheme || T < 0 || (T > 0 && (!x || !y))) return DSQ_ERR_INVALID_ARG;
    if (T == 0) return DSQ_OK;
    const int64_t rows = v->shape.rows, cols = v->shape.cols;
    /* bf16 on a level with a bf16 dot product: that kernel for every T
     * but the decode of long rows (FLT_BF16_GEMV_COLS) */
    if (v->scheme->id == DSQ_SCHEME_BF16 && k->gemm_bf16 && k->bf16_split &&
        !(T == 1 && cols >= FLT_BF16_GEMV_COLS))
        return bf16_gemm(k, v, x, T, y, pool, scratch, scratch_size);
    if (T <= FLT_GEMV_MAX_T || k == dsq_kernels_ref()) {
        struct gemv_job j = { k, v, x, T, y };
        dsq_pool_run(dsq_gemm_pool(pool, rows, cols, T), (size_t)((rows + FLT_ROW_BLOCK - 1) / FLT_ROW_BLOCK), gemv_task, &j);
        return DSQ_OK;
    }
    if (v->scheme->id == DSQ_SCHEME_BF16 && k->gemm_bf16)
        return bf16_gemm(k, v, x, T, y, pool, scratch, scratch_size);
    if (T > INT32_MAX || rows > INT32_MAX || cols > INT32_MAX) return DSQ_ERR_UNSUPPORTED;
    size_t need = dsq_float_gemm_scratch(v, T, dsq_pool_size(pool));
    void *own = NULL;
    if (need && !scratch) {
        scratch = own = dsq_aligned_alloc(need);
        if (!own) return DSQ_ERR_NOMEM;
    } else if (need && scratch_size < need) {
        return DSQ_ERR_INVALID_ARG;
    }
    struct sgemm_job j = { k, v, x, T, y, scratch };
    dsq_pool_run(dsq_gemm_pool(pool, rows, cols, T), (size_t)((rows + FLT_RB - 1) / FLT_RB), sgemm_task, &j);
    free(own);
    return DSQ_OK;
}

int dsq_float_gemm(const dsq_qview *v, const float *x, int64_t T, float *y, dsq_pool *pool,
                   void *scratch, size_t scratch_size)
{
    return dsq_float_gemm_with(dsq_kernels_get(), v, x, T, y, pool, scratch, scratch_size);
}

int dsq_float_gemm_ref(const dsq_qview *v, const float *x, int64_t T, float *y)
{
    return dsq_float_gemm_with(dsq_kernels_ref(), v, x, T, y, NULL, NULL, 0);
}
