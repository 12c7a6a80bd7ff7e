/* scheme_w8.c - w8a8-dynamic and w8a8 (static) rows: int8 symmetric
 * per-output-channel weights (msModelSlim W8A8_DYNAMIC / W8A8), plus the
 * symmetric group quantizer shared with w4a8. */
#include "scheme.h"
#include "kernels.h"
#include "actq.h"
#include "dsq_mem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- symmetric group quantizer (shared with w4a8) ------------------------ */

static float sym_scale(float amax, int32_t qmax)
{
    float s = amax / (float)qmax;
    return s < DSQ_QSCALE_MIN ? DSQ_QSCALE_MIN : s;
}

void dsq_qrow_sym(const dsq_kernels *k, const float *w, int64_t cols, int64_t gsize,
                  int32_t qlo, int32_t qmax, int32_t add, int clip_search, int search,
                  const float *importance, const float *given, int8_t *codes, float *scales)
{
    int64_t ng = (cols + gsize - 1) / gsize;
    /* searched scales (qsearch.c): error weights of the largest group; when
     * the allocation fails the groups keep their unsearched scales */
    float *c = search && !given ? malloc((size_t)(gsize < cols ? gsize : cols) * sizeof *c) : NULL;
    for (int64_t g = 0; g < ng; g++) {
        int64_t k0 = g * gsize, n = cols - k0 < gsize ? cols - k0 : gsize;
        const float *wg = w + k0;
        float amax = given ? 0.0f : dsq_bits_f32(k->absmax_bits(wg, n));   /* given: GPTQ's scale */
        float s = given ? given[g] : sym_scale(amax, qmax);
        if (clip_search && !given && amax > 0.0f) {
            /* AutoAWQ _compute_best_clip grid: max_val = amax * (1 - i/20),
             * i < 10; keep the least (importance-weighted) squared error. The
             * codes of the trial land in the output row and are redone below. */
            double best = INFINITY;
            float best_s = s;
            for (int i = 0; i < 10; i++) {
                float si = sym_scale(amax * (1.0f - (float)i / 20.0f), qmax);
                k->quant_i8(wg, n, si, add, qlo + add, qmax + add, codes + k0);
                double err = 0.0;
                for (int64_t j = 0; j < n; j++) {
                    double d = (double)wg[j] - (double)((float)(codes[k0 + j] - add) * si);
                    if (importance) d *= importance[k0 + j];
                    err += d * d;
                }
                if (err < best) {
                    best = err;
                    best_s = si;
                }
            }
            s = best_s;
        }
        if (c && amax > 0.0f) {
            /* from the chosen (clipped) scale; the candidates cover the clip
             * grid's range, so with clip_search the better of both is kept */
            dsq_qsearch_weights(wg, n, importance ? importance + k0 : NULL, c);
            dsq_qsearch_sym(k, wg, n, c, qlo, qmax, amax, &s);
        }
        k->quant_i8(wg, n, s, add, qlo + add, qmax + add, codes + k0);
        scales[g] = s;
    }
    free(c);
}

/* ---- quantize ------------------------------------------------------------ */

int dsq_w8_blob_size(const dsq_qshape *s, size_t *out)
{
    dsq_qlayout L;
    int rc = dsq_qlayout_get(dsq_scheme_by_id(DSQ_SCHEME_W8A8_DYNAMIC), s, &L);
    if (rc == 0) *out = L.total;
    return rc;
}

static int w8_quantize(const dsq_scheme *sc, const float *w, int64_t row0, int64_t nrows,
                       const dsq_qshape *shape, const dsq_qparams *p, uint8_t *blob,
                       dsq_diag *diag, uint32_t flags, float act_scale, int32_t act_offset)
{
    dsq_qparams defaults;
    if (!p) {
        dsq_qparams_init(&defaults);
        p = &defaults;
    }
    dsq_qlayout L;
    int rc = dsq_quantize_check(sc, row0, nrows, shape, p, &L, diag);
    if (rc < 0) return rc;
    if (!w || !blob) return dsq_fail(diag, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "null argument");
    if (row0 == 0) dsq_qblob_write_header(blob, sc, shape, &L, flags, act_scale, act_offset);
    const dsq_kernels *k = dsq_kernels_get();
    const int64_t cols = shape->cols;
    float *tmp = NULL;
    if (p->in_scale || p->allow_nonfinite) {
        tmp = malloc((size_t)cols * sizeof *tmp);
        if (!tmp) return dsq_fail(diag, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    float *scales = (float *)(blob + L.s_off);
    int32_t *rowsum = (int32_t *)(blob + L.r_off);
    for (int64_t i = 0; i < nrows; i++) {
        int64_t n = row0 + i;
        const float *row;
        int64_t bad = -1;
        /* tmp is NULL unless prepare may need it (in_scale / allow_nonfinite) */
        rc = dsq_qrow_prepare(k, w + i * cols, cols, p->in_scale, p->allow_nonfinite, tmp, &row, &bad);
        if (rc < 0) {
            free(tmp);
            return dsq_fail(diag, rc, NULL, NULL, -1, "non-finite weight at row %lld column %lld",
                            (long long)n, (long long)bad);
        }
        int8_t *q = (int8_t *)(blob + L.w_off + (size_t)n * L.row_bytes);
        dsq_qrow_sym(k, row, cols, cols, -127, 127, 0, p->clip_search, 0, p->importance,
                     p->given_scale ? p->given_scale + n : NULL, q, scales + n);
        if (!p->given_scale) {
            /* the codes against the scale as an export stores it */
            float sr = dsq_scale_stored(scales[n], p->scale_dtype);
            if (sr != scales[n]) dsq_qrow_sym(k, row, cols, cols, -127, 127, 0, 0, 0, NULL, &sr, q, scales + n);
        }
        memset(q + cols, 0, L.row_bytes - (size_t)cols);
        rowsum[n] = k->sum_i8(q, cols);
    }
    free(tmp);
    return DSQ_OK;
}

int dsq_w8_quantize(const float *w, int64_t row0, int64_t nrows, const dsq_qshape *shape,
                    const dsq_qparams *p, uint8_t *blob, dsq_diag *diag)
{
    return w8_quantize(dsq_scheme_by_id(DSQ_SCHEME_W8A8_DYNAMIC), w, row0, nrows, shape, p, blob,
                       diag, 0, 0.0f, 0);
}

int dsq_w8s_quantize(const float *w, int64_t row0, int64_t nrows, const dsq_qshape *shape,
                     const dsq_qparams *p, uint8_t *blob, dsq_diag *diag)
{
    const dsq_scheme *sc = dsq_scheme_by_id(DSQ_SCHEME_W8A8);
    float s = 0.0f;
    int32_t o = 0;
    if (p && p->has_act_static) {
        if (!isfinite(p->act_scale) || !(p->act_scale > 0.0f) || p->act_offset != rintf(p->act_offset) ||
            p->act_offset < -128.0f || p->act_offset > 127.0f)
            return dsq_fail(diag, DSQ_ERR_INVALID_ARG, NULL, NULL, -1,
                            "w8a8 static activation scale %g / offset %g out of range",
                            (double)p->act_scale, (double)p->act_offset);
        s = p->act_scale;
        o = (int32_t)p->act_offset;
    } else if (p && ((p->act_min && p->act_max) || p->act_absmax) && shape) {
        const float *div = p->act_stats_smoothed ? NULL : p->in_scale;
        if (dsq_actq_static_params(p->act_min, p->act_max, p->act_absmax, div, shape->cols, &s, &o) < 0)
            return dsq_fail(diag, DSQ_ERR_INVALID_ARG, NULL, NULL, -1,
                            "w8a8 activation statistics are not finite");
    } else {
        return dsq_fail(diag, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "w8a8 needs calibration statistics");
    }
    return w8_quantize(sc, w, row0, nrows, shape, p, blob, diag, DSQ_QBLOB_F_ACT_STATIC, s, o);
}

void dsq_w8_dequantize(const dsq_qview *v, int64_t row0, int64_t nrows, float *out)
{
    const int64_t cols = v->shape.cols;
    for (int64_t i = 0; i < nrows; i++) {
        const int8_t *q = (const int8_t *)(v->w + (size_t)(row0 + i) * v->layout.row_bytes);
        float s = v->scales[row0 + i];
        for (int64_t j = 0; j < cols; j++) out[i * cols + j] = (float)q[j] * s;
    }
}

/* ---- gemm ---------------------------------------------------------------- */

#define W8_ROW_BLOCK 64   /* rows per pool task; a multiple of every tile height */

size_t dsq_w8_gemm_scratch(const dsq_qview *v, int64_t T, int nthreads)
{
    (void)nthreads;
    if (!v || T < 0) return 0;
    size_t kpad = (size_t)dsq_act_kpad(v->shape.cols);
    return dsq_align_up((size_t)T * kpad, 64) + dsq_align_up((size_t)T * 4, 64) + 64;
}

struct w8_job {
    const dsq_kernels *k;
    const dsq_qview *v;
    const dsq_actbuf *a;
    float *y;
    dsq_rowsplit split;
};

static void w8_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    struct w8_job *j = ctx;
    int64_t b = dsq_rowsplit_block(&j->split, item);
    if (b < 0) return;
    int64_t n0 = b * W8_ROW_BLOCK, n1 = n0 + W8_ROW_BLOCK;
    if (n1 > j->v->shape.rows) n1 = j->v->shape.rows;
    j->k->gemm_w8(j->v, j->a, n0, n1, j->y);
}

int dsq_w8_gemm_with(const dsq_kernels *k, const dsq_qview *v, const float *x, int64_t T,
                     float *y, dsq_pool *pool, void *scratch, size_t scratch_size)
{
    if (!v || !v->scheme || (T > 0 && (!x || !y)) || T < 0) return DSQ_ERR_INVALID_ARG;
    if (T == 0) return DSQ_OK;
    size_t need = dsq_w8_gemm_scratch(v, T, dsq_pool_size(pool));
    void *own = NULL;
    if (!scratch) {
        scratch = own = dsq_aligned_alloc(need);
        if (!own) return DSQ_ERR_NOMEM;
    } else if (scratch_size < need) {
        return DSQ_ERR_INVALID_ARG;
    }
    const int64_t cols = v->shape.cols, kpad = dsq_act_kpad(cols);
    int8_t *q = scratch;
    float *s = (float *)((uint8_t *)scratch + dsq_align_up((size_t)T * (size_t)kpad, 64));
    if (v->scheme->act == DSQ_ACT_INT8_STATIC) {
        dsq_actq_static_k(k, x, T, cols, q, kpad, v->act_scale, v->act_offset);
        for (int64_t t = 0; t < T; t++) s[t] = v->act_scale;
    } else {
        dsq_actq_token_k(k, x, T, cols, q, kpad, s);
    }
    dsq_actbuf a = { T, kpad, q, s, NULL };
    struct w8_job j = { k, v, &a, y, { 0, 0, 0 } };
    dsq_pool *use = dsq_gemm_pool(pool, v->shape.rows, cols, T);
    size_t items = dsq_rowsplit_init(&j.split, (size_t)((v->shape.rows + W8_ROW_BLOCK - 1) / W8_ROW_BLOCK), T,
                                     dsq_pool_size(use));
    dsq_pool_run(use, items, w8_task, &j);
    free(own);
    return DSQ_OK;
}

/* The gemm in two steps (scheme.h split_*, dsq_gemm_many): the int8 codes
 * and scales in the gemm's scratch layout, then the same row blocks'
 * gemm_w8. */
size_t dsq_w8_split_size(const dsq_qview *v, int64_t T)
{
    return T >= 1 ? dsq_w8_gemm_scratch(v, T, 1) : 0;
}

static dsq_actbuf w8_actbuf(const dsq_qview *v, int64_t T, const void *prep)
{
    const int64_t kpad = dsq_act_kpad(v->shape.cols);
    const uint8_t *p = prep;
    dsq_actbuf a = { T, kpad, (const int8_t *)p,
                     (const float *)(const void *)(p + dsq_align_up((size_t)T * (size_t)kpad, 64)), NULL };
    return a;
}

void dsq_w8_split_prep(const dsq_qview *v, const float *x, int64_t T, void *prep)
{
    const dsq_kernels *k = dsq_kernels_get();
    dsq_actbuf a = w8_actbuf(v, T, prep);
    int8_t *q = (int8_t *)a.q;
    float *s = (float *)a.scale;
    if (v->scheme->act == DSQ_ACT_INT8_STATIC) {
        dsq_actq_static_k(k, x, T, v->shape.cols, q, a.kpad, v->act_scale, v->act_offset);
        for (int64_t t = 0; t < T; t++) s[t] = v->act_scale;
    } else {
        dsq_actq_token_k(k, x, T, v->shape.cols, q, a.kpad, s);
    }
}

int64_t dsq_w8_split_block(const dsq_qview *v, int64_t T)
{
    (void)v;
    (void)T;
    return W8_ROW_BLOCK;
}

void dsq_w8_split_rows(const dsq_qview *v, const void *prep, int64_t T, int64_t n0, int64_t n1, float *y)
{
    dsq_actbuf a = w8_actbuf(v, T, prep);
    dsq_kernels_get()->gemm_w8(v, &a, n0, n1, y);
}

int dsq_w8_gemm(const dsq_qview *v, const float *x, int64_t T, float *y, dsq_pool *pool,
                void *scratch, size_t scratch_size)
{
    return dsq_w8_gemm_with(dsq_kernels_get(), v, x, T, y, pool, scratch, scratch_size);
}

int dsq_w8_gemm_ref(const dsq_qview *v, const float *x, int64_t T, float *y)
{
    return dsq_w8_gemm_with(dsq_kernels_ref(), v, x, T, y, NULL, NULL, 0);
}
