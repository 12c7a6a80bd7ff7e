/* scheme_w4a8.c - w4a8 row: int4 symmetric weights (msModelSlim
 * W4A8_DYNAMIC "ssz" per channel, or group-wise), int8 per-token activations.
 * Also the int4 block packer shared with awq. */
#include "scheme.h"
#include "dtype.h"
#include "kernels.h"
#include "actq.h"
#include "dsq_mem.h"

#include <stdlib.h>
#include <string.h>

void dsq_i4_pack_row(const uint8_t *codes, int64_t cols, uint8_t *row, size_t row_bytes)
{
    int64_t nfull = cols / 128;
    for (int64_t b = 0; b < nfull; b++) {
        const uint8_t *c = codes + b * 128;
        uint8_t *o = row + b * 64;
        /* 8 bytes at a time (SWAR): low nibbles from c[j], high from c[64+j] */
        for (int j = 0; j < 64; j += 8) {
            uint64_t lo = dsq_load_u64le(c + j), hi = dsq_load_u64le(c + 64 + j);
            dsq_store_u64le(o + j, (lo & 0x0f0f0f0f0f0f0f0full) | ((hi & 0x0f0f0f0f0f0f0f0full) << 4));
        }
    }
    if (nfull * 64 < (int64_t)row_bytes) {
        /* ragged last block: columns >= cols are zero nibbles */
        uint8_t *o = row + nfull * 64;
        memset(o, 0, row_bytes - (size_t)nfull * 64);
        for (int64_t c = nfull * 128; c < cols; c++) {
            int64_t j = c - nfull * 128;
            if (j < 64) o[j] |= (uint8_t)(codes[c] & 15);
            else o[j - 64] |= (uint8_t)(codes[c] << 4);
        }
    }
}

int dsq_w4a8_blob_size(const dsq_qshape *s, size_t *out)
{
    dsq_qlayout L;
    int rc = dsq_qlayout_get(dsq_scheme_by_id(DSQ_SCHEME_W4A8), s, &L);
    if (rc == 0) *out = L.total;
    return rc;
}

int dsq_w4a8_quantize(const float *w, int64_t row0, int64_t nrows, const dsq_qshape *shape,
                      const dsq_qparams *p, uint8_t *blob, dsq_diag *diag)
{
    const dsq_scheme *sc = dsq_scheme_by_id(DSQ_SCHEME_W4A8);
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
    uint8_t *codes = malloc((size_t)cols);
    if (!codes) return dsq_fail(diag, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    if (p->in_scale || p->allow_nonfinite) {
        tmp = malloc((size_t)cols * sizeof *tmp);
        if (!tmp) {
            free(codes);
            return dsq_fail(diag, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        }
    }
    float *scales = (float *)(blob + L.s_off);
    float *sr = NULL;
    if (!p->given_scale && (p->scale_dtype == DSQ_DTYPE_BF16 || p->scale_dtype == DSQ_DTYPE_F16) &&
        !(sr = malloc((size_t)L.ngroups * sizeof *sr))) {
        free(tmp);
        free(codes);
        return dsq_fail(diag, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    for (int64_t i = 0; i < nrows && rc == 0; i++) {
        int64_t n = row0 + i, bad = -1;
        const float *row;
        rc = dsq_qrow_prepare(k, w + i * cols, cols, p->in_scale, p->allow_nonfinite, tmp, &row, &bad);
        if (rc < 0) {
            dsq_fail(diag, rc, NULL, NULL, -1, "non-finite weight at row %lld column %lld",
                     (long long)n, (long long)bad);
            break;
        }
        /* codes = q + 8 in 0..15 (offset binary nibbles) */
        dsq_qrow_sym(k, row, cols, L.gsize, -8, 7, 8, p->clip_search, dsq_qsearch_on(p, DSQ_SCHEME_W4A8),
                     p->importance,
                     p->given_scale ? p->given_scale + n * L.ngroups : NULL, (int8_t *)codes,
                     scales + n * L.ngroups);
        if (sr) {
            /* the codes against the scales as an export stores them */
            int redo = 0;
            for (int64_t g = 0; g < L.ngroups; g++) {
                sr[g] = dsq_scale_stored(scales[n * L.ngroups + g], p->scale_dtype);
                redo |= sr[g] != scales[n * L.ngroups + g];
            }
            if (redo)
                dsq_qrow_sym(k, row, cols, L.gsize, -8, 7, 8, 0, 0, NULL, sr, (int8_t *)codes, scales + n * L.ngroups);
        }
        dsq_i4_pack_row(codes, cols, blob + L.w_off + (size_t)n * L.row_bytes, L.row_bytes);
    }
    free(sr);
    free(tmp);
    free(codes);
    return rc;
}

void dsq_w4a8_dequantize(const dsq_qview *v, int64_t row0, int64_t nrows, float *out)
{
    const int64_t cols = v->shape.cols, ng = v->layout.ngroups, gs = v->layout.gsize;
    for (int64_t i = 0; i < nrows; i++) {
        int64_t n = row0 + i;
        const uint8_t *row = v->w + (size_t)n * v->layout.row_bytes;
        float *o = out + i * cols;
        /* group by group: no division per weight (this runs on every
         * converted tensor's sampled rows for the error report) */
        for (int64_t g = 0; g < ng; g++) {
            float s = v->scales[n * ng + g];
            int64_t j1 = (g + 1) * gs < cols ? (g + 1) * gs : cols;
            for (int64_t j = g * gs; j < j1; j++) o[j] = (float)(dsq_i4_get(row, j) - 8) * s;
        }
    }
}

/* ---- gemm ---------------------------------------------------------------- */

#define W4_ROW_BLOCK 64

size_t dsq_w4a8_gemm_scratch(const dsq_qview *v, int64_t T, int nthreads)
{
    (void)nthreads;
    if (!v || T < 0) return 0;
    size_t kpad = (size_t)dsq_act_kpad(v->shape.cols);
    return dsq_align_up((size_t)T * kpad, 64) + dsq_align_up((size_t)T * 4, 64) +
           dsq_align_up((size_t)T * (size_t)v->layout.ngroups * 4, 64) + 64;
}

struct w4_job {
    const dsq_kernels *k;
    const dsq_qview *v;
    const dsq_actbuf *a;
    float *y;
    dsq_rowsplit split;
};

static void w4_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    struct w4_job *j = ctx;
    int64_t b = dsq_rowsplit_block(&j->split, item);
    if (b < 0) return;
    int64_t n0 = b * W4_ROW_BLOCK, n1 = n0 + W4_ROW_BLOCK;
    if (n1 > j->v->shape.rows) n1 = j->v->shape.rows;
    j->k->gemm_w4(j->v, j->a, n0, n1, j->y);
}

int dsq_w4a8_gemm_with(const dsq_kernels *k, const dsq_qview *v, const float *x, int64_t T,
                       float *y, dsq_pool *pool, void *scratch, size_t scratch_size)
{
    if (!v || !v->scheme || T < 0 || (T > 0 && (!x || !y))) return DSQ_ERR_INVALID_ARG;
    if (T == 0) return DSQ_OK;
    size_t need = dsq_w4a8_gemm_scratch(v, T, dsq_pool_size(pool));
    void *own = NULL;
    if (!scratch) {
        scratch = own = dsq_aligned_alloc(need);
        if (!own) return DSQ_ERR_NOMEM;
    } else if (scratch_size < need) {
        return DSQ_ERR_INVALID_ARG;
    }
    const int64_t cols = v->shape.cols, kpad = dsq_act_kpad(cols);
    uint8_t *p = scratch;
    int8_t *q = (int8_t *)p;
    p += dsq_align_up((size_t)T * (size_t)kpad, 64);
    float *s = (float *)p;
    p += dsq_align_up((size_t)T * 4, 64);
    int32_t *gsum = (int32_t *)p;
    dsq_actq_token_k(k, x, T, cols, q, kpad, s);
    dsq_actq_group_sums(q, T, kpad, v->layout.gsize, v->layout.ngroups, gsum, T);
    dsq_actbuf a = { T, kpad, q, s, gsum };
    struct w4_job j = { k, v, &a, y, { 0, 0, 0 } };
    dsq_pool *use = dsq_gemm_pool(pool, v->shape.rows, cols, T);
    size_t items = dsq_rowsplit_init(&j.split, (size_t)((v->shape.rows + W4_ROW_BLOCK - 1) / W4_ROW_BLOCK), T,
                                     dsq_pool_size(use));
    dsq_pool_run(use, items, w4_task, &j);
    free(own);
    return DSQ_OK;
}

/* The gemm in two steps (scheme.h split_*, dsq_gemm_many): the int8 codes,
 * scales and group sums in the gemm's scratch layout, then the same row
 * blocks' gemm_w4. */
size_t dsq_w4a8_split_size(const dsq_qview *v, int64_t T)
{
    return T >= 1 ? dsq_w4a8_gemm_scratch(v, T, 1) : 0;
}

static dsq_actbuf w4_actbuf(const dsq_qview *v, int64_t T, const void *prep)
{
    const int64_t kpad = dsq_act_kpad(v->shape.cols);
    const uint8_t *p = prep;
    const size_t qb = dsq_align_up((size_t)T * (size_t)kpad, 64), sb = dsq_align_up((size_t)T * 4, 64);
    dsq_actbuf a = { T, kpad, (const int8_t *)p, (const float *)(const void *)(p + qb),
                     (const int32_t *)(const void *)(p + qb + sb) };
    return a;
}

void dsq_w4a8_split_prep(const dsq_qview *v, const float *x, int64_t T, void *prep)
{
    const dsq_kernels *k = dsq_kernels_get();
    dsq_actbuf a = w4_actbuf(v, T, prep);
    dsq_actq_token_k(k, x, T, v->shape.cols, (int8_t *)a.q, a.kpad, (float *)a.scale);
    dsq_actq_group_sums(a.q, T, a.kpad, v->layout.gsize, v->layout.ngroups, (int32_t *)a.gsum, T);
}

int64_t dsq_w4a8_split_block(const dsq_qview *v, int64_t T)
{
    (void)v;
    (void)T;
    return W4_ROW_BLOCK;
}

void dsq_w4a8_split_rows(const dsq_qview *v, const void *prep, int64_t T, int64_t n0, int64_t n1, float *y)
{
    dsq_actbuf a = w4_actbuf(v, T, prep);
    dsq_kernels_get()->gemm_w4(v, &a, n0, n1, y);
}

int dsq_w4a8_gemm(const dsq_qview *v, const float *x, int64_t T, float *y, dsq_pool *pool,
                  void *scratch, size_t scratch_size)
{
    return dsq_w4a8_gemm_with(dsq_kernels_get(), v, x, T, y, pool, scratch, scratch_size);
}

int dsq_w4a8_gemm_ref(const dsq_qview *v, const float *x, int64_t T, float *y)
{
    return dsq_w4a8_gemm_with(dsq_kernels_ref(), v, x, T, y, NULL, NULL, 0);
}
