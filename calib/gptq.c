/* gptq.c - GPTQ solver and per-layer Hessians (see gptq.h). */
#include "gptq.h"
#include "kernels.h"
#include "model.h"
#include "ops.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* OpenBLAS ships LAPACK; its potrf/potri are native C entry points taking
 * Fortran-style pointer arguments (no hidden string lengths needed). */
extern void dpotrf_(const char *uplo, const int *n, double *a, const int *lda, int *info);
extern void dpotri_(const char *uplo, const int *n, double *a, const int *lda, int *info);

/* ---- U = upper Cholesky factor of (H + damp I)^-1 ------------------------ */

/* Row-major H is its own column-major transpose (symmetric). Column-major
 * 'L' factors give, read row-major, the upper factor: potrf('L') H = L L^T,
 * potri('L') the inverse's lower half, potrf('L') again H^-1 = L2 L2^T, and
 * row-major that memory holds U = L2^T with H^-1 = U^T U (upper part).
 * LAPACK does not reference the other triangle, so the row-major strictly
 * lower part is left as it was (factor_init keeps H there for retries).
 * Returns 0, or the LAPACK info (> 0: not positive definite). */
static int inv_chol_upper(double *a, int n)
{
    int info = 0;
    dpotrf_("L", &n, a, &n, &info);
    if (info != 0) return info;
    dpotri_("L", &n, a, &n, &info);
    if (info != 0) return info;
    dpotrf_("L", &n, a, &n, &info);
    return info;
}

/* ---- one weight, the scheme's grid ------------------------------------- */

typedef struct grid {
    int asym;        /* awq: zero points */
    float qlo, qhi;  /* code range */
} grid;

/* q as the scheme's quant_i8 computes it (clamp in float), then the value
 * the blob dequantizes to. */
static inline float quant1(const grid *g, float w, float s, uint8_t z)
{
    float q = rintf(w / s) + 0.0f;   /* -0 -> +0: the blob stores integer codes */
    if (g->asym) {
        q += (float)z;
        q = fmaxf(q, g->qlo);
        q = fminf(q, g->qhi);
        return (q - (float)z) * s;
    }
    q = fmaxf(q, g->qlo);
    q = fminf(q, g->qhi);
    return q * s;
}

/* Scale (and zero) of n weights, with the scheme's own function. */
static void group_params(const dsq_kernels *k, const dsq_scheme *sc, const float *w, int64_t n, int clip,
                         int search, const float *imp, int8_t *codes, float *s, uint8_t *z)
{
    /* searched params only for int4 (qsearch.c); int8's grid is fine enough */
    search = search && sc->weight_bits == 4;
    if (!sc->symmetric) {
        dsq_qgroup_awq(k, w, n, clip, search, imp, codes, s, z);
    } else {
        dsq_qrow_sym(k, w, n, n, sc->qmin, sc->qmax, 0, clip, search, imp, NULL, codes, s);
        *z = 0;
    }
}

/* ---- the factor ----------------------------------------------------------- */

int dsq_gptq_factor_init(dsq_gptq_factor *f, double *h, int64_t cols, double damp, dsq_diag *d)
{
    memset(f, 0, sizeof *f);
    if (!h || cols <= 0) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "gptq: null argument");
    if (cols > 65536) return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, NULL, -1, "gptq: %lld columns", (long long)cols);
    if (!(damp > 0.0)) damp = DSQ_GPTQ_DAMP;
    for (int64_t j = 0; j < cols; j++)
        if (!isfinite(h[j * cols + j]) || h[j * cols + j] < 0.0)
            return dsq_fail(d, DSQ_ERR_NONFINITE, NULL, NULL, -1, "gptq: bad Hessian diagonal at %lld", (long long)j);
    f->cols = cols;
    f->u = malloc((size_t)cols * (size_t)cols * sizeof *f->u);
    f->dead = calloc((size_t)cols, 1);
    double *dg = malloc((size_t)cols * sizeof *dg);
    if (!f->u || !f->dead || !dg) {
        free(dg);
        dsq_gptq_factor_release(f);
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "gptq: out of memory (%lld columns)", (long long)cols);
    }
    /* dead inputs: H_jj = 1 (their weights are zeroed by the solve) */
    double mean = 0.0;
    for (int64_t j = 0; j < cols; j++) {
        if (h[j * cols + j] == 0.0) {
            f->dead[j] = 1;
            f->ndead++;
            h[j * cols + j] = 1.0;
        }
        mean += h[j * cols + j];
    }
    mean /= (double)cols;
    /* In place, no second cols^2 copy (the parallel solves hold one H each):
     * LAPACK works on the row-major upper triangle, so H's upper half is
     * mirrored into the strictly lower one, which keeps it for the retries. */
    for (int64_t j = 0; j < cols; j++) dg[j] = h[j * cols + j];
    for (int64_t i = 0; i < cols; i++)
        for (int64_t j = i + 1; j < cols; j++) h[j * cols + i] = h[i * cols + j];
    int ok = 0;
    for (int t = 0; t < 4 && !ok; t++) {
        if (t > 0)
            for (int64_t i = 0; i < cols; i++)
                for (int64_t j = i + 1; j < cols; j++) h[i * cols + j] = h[j * cols + i];
        double lambda = damp * mean;
        for (int64_t j = 0; j < cols; j++) h[j * cols + j] = dg[j] + lambda;
        if (inv_chol_upper(h, (int)cols) == 0) {
            ok = 1;
            for (int64_t i = 0; i < cols && ok; i++)
                for (int64_t j = i; j < cols && ok; j++) ok = isfinite(h[i * cols + j]);
        }
        if (!ok && t < 3) {
            damp *= 10.0;
            f->damp_raised++;
        }
    }
    if (ok) {
        for (int64_t i = 0; i < cols; i++)
            for (int64_t j = 0; j < cols; j++) f->u[i * cols + j] = j >= i ? (float)h[i * cols + j] : 0.0f;
    } else {
        /* U = I: no error feedback, i.e. round-to-nearest */
        f->rtn_fallback = 1;
        memset(f->u, 0, (size_t)cols * (size_t)cols * sizeof *f->u);
        for (int64_t j = 0; j < cols; j++) f->u[j * cols + j] = 1.0f;
    }
    free(dg);
    return DSQ_OK;
}

void dsq_gptq_factor_release(dsq_gptq_factor *f)
{
    free(f->u);
    free(f->dead);
    memset(f, 0, sizeof *f);
}

/* ---- the solver ----------------------------------------------------------- */

int dsq_gptq_solve_f(const dsq_scheme *sc, const dsq_qshape *shape, float *w, const dsq_gptq_factor *f,
                     const dsq_gptq_opts *o, float *scales, uint8_t *zeros, dsq_gptq_report *rep, dsq_diag *d)
{
    dsq_gptq_report rdummy;
    if (!rep) rep = &rdummy;
    memset(rep, 0, sizeof *rep);
    if (!sc || !shape || !w || !f || !f->u || !scales)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "gptq: null argument");
    if (!sc->has_scales || sc->weight_bits > 8)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, NULL, -1, "gptq: %s is not an integer scheme", sc->name);
    if (sc->has_zeros && !zeros) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "gptq: zeros needed");
    dsq_qlayout L;
    int rc = dsq_qlayout_get(sc, shape, &L);
    if (rc < 0) return dsq_fail(d, rc, NULL, NULL, -1, "gptq: unsupported shape for %s", sc->name);
    const int64_t rows = shape->rows, cols = shape->cols, gs = L.gsize, ng = L.ngroups;
    if (f->cols != cols) return dsq_fail(d, DSQ_ERR_SHAPE, NULL, NULL, -1, "gptq: factor of another width");
    int64_t B = o && o->block > 0 ? o->block : (shape->group_size > 0 ? gs : 128);
    if (shape->group_size > 0 && B % gs != 0)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "gptq: block %lld not a multiple of group %lld",
                        (long long)B, (long long)gs);
    const int clip = o ? o->clip : 0;
    const int search = o && o->search > 0;
    const float *imp = o ? o->importance : NULL;
    const grid gr = { !sc->symmetric, (float)sc->qmin, (float)sc->qmax };
    const dsq_kernels *k = dsq_kernels_get();
    const float *u = f->u;
    rep->dead = f->ndead;
    rep->damp_raised = f->damp_raised;
    rep->rtn_fallback = f->rtn_fallback;

    for (int64_t i = 0; i < rows * cols; i++)
        if (!isfinite(w[i])) return dsq_fail(d, DSQ_ERR_NONFINITE, NULL, NULL, -1, "gptq: non-finite weight");
    int8_t *codes = malloc((size_t)cols);
    float *err = malloc((size_t)rows * (size_t)B * sizeof *err);
    if (!codes || !err) {
        free(codes);
        free(err);
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "gptq: out of memory");
    }
    /* per channel: the scale comes from the whole original row (before the
     * dead columns are zeroed, as GPTQ does) */
    if (shape->group_size <= 0)
        for (int64_t r = 0; r < rows; r++) {
            uint8_t z0 = 0;
            group_params(k, sc, w + r * cols, cols, clip, search, imp, codes, &scales[r], zeros ? &zeros[r] : &z0);
        }
    for (int64_t j = 0; j < cols; j++)
        if (f->dead[j])
            for (int64_t r = 0; r < rows; r++) w[r * cols + j] = 0.0f;

    for (int64_t i1 = 0; i1 < cols; i1 += B) {
        int64_t i2 = i1 + B < cols ? i1 + B : cols, cnt = i2 - i1;
        for (int64_t r = 0; r < rows; r++) {
            float *wr = w + r * cols, *er = err + r * B;
            float s = 0.0f;
            uint8_t z = 0;
            if (shape->group_size <= 0) {
                s = scales[r];
                z = zeros ? zeros[r] : 0;
            }
            for (int64_t i = i1; i < i2; i++) {
                if (shape->group_size > 0 && i % gs == 0) {
                    int64_t g = i / gs, n = cols - i < gs ? cols - i : gs;
                    group_params(k, sc, wr + i, n, clip, search, imp ? imp + i : NULL, codes, &s, &z);
                    scales[r * ng + g] = s;
                    if (zeros) zeros[r * ng + g] = z;
                }
                const float *ui = u + i * cols;
                float x = wr[i], q = quant1(&gr, x, s, z), dii = ui[i];
                float e = (x - q) / dii;
                rep->loss += (double)(x - q) * (double)(x - q) / ((double)dii * dii) / 2.0;
                wr[i] = q;
                er[i - i1] = e;
                for (int64_t j = i + 1; j < i2; j++) wr[j] -= e * ui[j];
            }
        }
        if (i2 < cols)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)(cols - i2), (int)cnt, -1.0f, err,
                        (int)B, u + i1 * cols + i2, (int)cols, 1.0f, w + i2, (int)cols);
    }
    free(codes);
    free(err);
    return DSQ_OK;
}

int dsq_gptq_solve(const dsq_scheme *sc, const dsq_qshape *shape, float *w, double *h,
                   const dsq_gptq_opts *o, float *scales, uint8_t *zeros, dsq_gptq_report *rep,
                   dsq_diag *d)
{
    if (!sc || !shape || !w || !h || !scales)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "gptq: null argument");
    if (!sc->has_scales || sc->weight_bits > 8)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, NULL, -1, "gptq: %s is not an integer scheme", sc->name);
    dsq_gptq_factor f;
    DSQ_TRY(dsq_gptq_factor_init(&f, h, shape->cols, o ? o->damp : 0.0, d));
    int rc = dsq_gptq_solve_f(sc, shape, w, &f, o, scales, zeros, rep, d);
    dsq_gptq_factor_release(&f);
    return rc;
}

int dsq_gptq_quantize_f(const dsq_scheme *sc, const dsq_qshape *shape, const float *w, const dsq_gptq_factor *f,
                        const dsq_gptq_opts *o, const dsq_qparams *base, uint8_t *blob, dsq_gptq_report *rep,
                        dsq_diag *d)
{
    if (!sc || !shape || !w || !f || !blob)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "gptq: null argument");
    if (base && base->in_scale)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "gptq: fold in_scale into the weights first");
    dsq_qlayout L;
    int rc = dsq_qlayout_get(sc, shape, &L);
    if (rc < 0) return dsq_fail(d, rc, NULL, NULL, -1, "gptq: unsupported shape for %s", sc->name);
    size_t nw = (size_t)shape->rows * (size_t)shape->cols, ns = (size_t)shape->rows * (size_t)L.ngroups;
    float *q = malloc(nw * sizeof *q), *s = malloc(ns * sizeof *s);
    uint8_t *z = sc->has_zeros ? malloc(ns) : NULL;
    if (!q || !s || (sc->has_zeros && !z)) {
        rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "gptq: out of memory");
    } else {
        memcpy(q, w, nw * sizeof *q);
        rc = dsq_gptq_solve_f(sc, shape, q, f, o, s, z, rep, d);
    }
    if (rc == DSQ_OK) {
        dsq_qparams qp;
        if (base) qp = *base;
        else dsq_qparams_init(&qp);
        qp.given_scale = s;
        qp.given_zero = z;
        qp.clip_search = 0;
        qp.importance = NULL;
        rc = sc->quantize(q, 0, shape->rows, shape, &qp, blob, d);
    }
    free(q);
    free(s);
    free(z);
    return rc;
}

int dsq_gptq_quantize(const dsq_scheme *sc, const dsq_qshape *shape, const float *w, const double *xtx,
                      const dsq_gptq_opts *o, const dsq_qparams *base, uint8_t *blob,
                      dsq_gptq_report *rep, dsq_diag *d)
{
    if (!sc || !shape || !w || !xtx || !blob)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "gptq: null argument");
    if (!sc->has_scales || sc->weight_bits > 8)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, NULL, -1, "gptq: %s is not an integer scheme", sc->name);
    size_t nh = (size_t)shape->cols * (size_t)shape->cols;
    double *h = malloc(nh * sizeof *h);
    if (!h) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "gptq: out of memory");
    memcpy(h, xtx, nh * sizeof *h);
    dsq_gptq_factor f;
    int rc = dsq_gptq_factor_init(&f, h, shape->cols, o ? o->damp : 0.0, d);
    free(h);
    if (rc < 0) return rc;
    rc = dsq_gptq_quantize_f(sc, shape, w, &f, o, base, blob, rep, d);
    dsq_gptq_factor_release(&f);
    return rc;
}

/* ---- Hessians ------------------------------------------------------------ */

/* xtx's upper half += X^T X (the lower half is left alone). The layer's
 * Hessians stay upper-only while they accumulate: dsq_gptq_factor_init
 * reads the diagonal and upper half and mirrors it once itself, so a mirror
 * per added chunk (a cache-hostile cols^2 pass) is work done for nothing.
 *
 * This is a SYRK of 2.5e13 flops per DeepSeek-V3 layer over 128 x 512
 * tokens (o_proj's 16384-wide input alone 1.8e13), so it is cut into square
 * tiles of HESS_TILE columns of the upper triangle, one pool item each, and
 * a tile is built in single precision (sgemm, ssyrk on the diagonal: 1.8x
 * the double syrk's flops per CPU second here, bench_calib --gptq-hess) over
 * runs of up to HESS_RUN rows, each run's float tile added into the double
 * Hessian. The float rounding is that of a sum of at most 1024 terms however
 * many tokens calibration has (GPTQModel keeps the whole H in float): 3.5e-7
 * of sqrt(H_ii H_jj) at most on 2048 x 7168 rows, far below the 1%
 * dampening. Runs of 256 rows cost 1.4x as much (49 vs 69 GFLOP per CPU-s):
 * the float-to-double add of a 512 KiB tile is memory-bound.
 * Determinism: a tile's value is the same sequence of calls whichever thread
 * runs it and however many threads there are (OpenBLAS runs single-threaded
 * under the pool, model.c), so the Hessian, and every blob after it, is the
 * same bytes for any -T. A calibration sample (512 tokens) is one run. */
#define HESS_TILE 256
#define HESS_RUN  1024

typedef struct hess_job {
    double *xtx;
    int64_t in, T, nb;     /* nb tiles per side */
    const float *x;
    float *tmp;            /* [threads][HESS_TILE^2] */
} hess_job;

/* Item -> tile (bi, bj), bj >= bi, in row order of the upper triangle. */
static void tile_of(int64_t item, int64_t nb, int64_t *bi, int64_t *bj)
{
    int64_t i = 0;
    while (item >= nb - i) {
        item -= nb - i;
        i++;
    }
    *bi = i;
    *bj = i + item;
}

static void hess_tile(void *ctx, size_t item, int tid)
{
    const hess_job *j = ctx;
    int64_t bi, bj;
    tile_of((int64_t)item, j->nb, &bi, &bj);
    const int64_t in = j->in, i0 = bi * HESS_TILE, j0 = bj * HESS_TILE;
    const int64_t wi = in - i0 < HESS_TILE ? in - i0 : HESS_TILE, wj = in - j0 < HESS_TILE ? in - j0 : HESS_TILE;
    float *tmp = j->tmp + (size_t)tid * HESS_TILE * HESS_TILE;
    for (int64_t t0 = 0; t0 < j->T; t0 += HESS_RUN) {
        const int64_t n = j->T - t0 < HESS_RUN ? j->T - t0 : HESS_RUN;
        const float *a = j->x + (size_t)t0 * (size_t)in;
        if (bi == bj)
            cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, (int)wi, (int)n, 1.0f, a + i0, (int)in, 0.0f, tmp,
                        HESS_TILE);
        else
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)wi, (int)wj, (int)n, 1.0f, a + i0, (int)in,
                        a + j0, (int)in, 0.0f, tmp, HESS_TILE);
        for (int64_t r = 0; r < wi; r++) {
            double *h = j->xtx + (size_t)(i0 + r) * (size_t)in + (size_t)j0;
            const float *s = tmp + (size_t)r * HESS_TILE;
            for (int64_t k = bi == bj ? r : 0; k < wj; k++) h[k] += (double)s[k];
        }
    }
}

static int hess_add_upper(double *xtx, int64_t in, const float *x, int64_t T, dsq_pool *pool)
{
    if (!xtx || (!x && T > 0) || in <= 0 || in > INT32_MAX || T < 0) return DSQ_ERR_INVALID_ARG;
    if (T == 0) return DSQ_OK;
    hess_job j = { xtx, in, T, (in + HESS_TILE - 1) / HESS_TILE, x, NULL };
    const int64_t tiles = j.nb * (j.nb + 1) / 2;
    if (tiles == 1) pool = NULL;
    j.tmp = malloc((size_t)dsq_pool_size(pool) * HESS_TILE * HESS_TILE * sizeof *j.tmp);   /* one per tid */
    if (!j.tmp) return DSQ_ERR_NOMEM;
    dsq_pool_run(pool, (size_t)tiles, hess_tile, &j);
    free(j.tmp);
    return DSQ_OK;
}

int dsq_gptq_hess_add(double *xtx, int64_t in, const float *x, int64_t T)
{
    int rc = hess_add_upper(xtx, in, x, T, NULL);
    if (rc < 0) return rc;
    for (int64_t i = 0; i < in; i++)   /* the whole symmetric matrix */
        for (int64_t j = 0; j < i; j++) xtx[i * in + j] = xtx[j * in + i];
    return DSQ_OK;
}

void dsq_gptq_hess_scale(double *h, int64_t n, const float *s)
{
    if (!s) return;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) h[i * n + j] /= (double)s[i] * (double)s[j];
}

int dsq_gptq_hset_add(dsq_gptq_hset *hs, const char *site, const float *x, int64_t T, int64_t in, dsq_pool *pool)
{
    int i = 0;
    while (i < hs->n && strcmp(hs->name[i], site) != 0) i++;
    if (i == hs->n) {
        if (hs->n == hs->cap) {
            int nc = hs->cap ? hs->cap * 2 : 16;
            char **a = realloc(hs->name, (size_t)nc * sizeof *a);
            if (!a) return DSQ_ERR_NOMEM;
            hs->name = a;
            int64_t *b = realloc(hs->in, (size_t)nc * sizeof *b);
            if (!b) return DSQ_ERR_NOMEM;
            hs->in = b;
            double **c = realloc(hs->xtx, (size_t)nc * sizeof *c);
            if (!c) return DSQ_ERR_NOMEM;
            hs->xtx = c;
            uint64_t *r = realloc(hs->rows, (size_t)nc * sizeof *r);
            if (!r) return DSQ_ERR_NOMEM;
            hs->rows = r;
            hs->cap = nc;
        }
        hs->name[i] = strdup(site);
        hs->xtx[i] = calloc((size_t)in * (size_t)in, sizeof(double));
        if (!hs->name[i] || !hs->xtx[i]) {
            free(hs->name[i]);
            free(hs->xtx[i]);
            return DSQ_ERR_NOMEM;
        }
        hs->in[i] = in;
        hs->rows[i] = 0;
        hs->bytes += (uint64_t)in * (uint64_t)in * sizeof(double);
        hs->n++;
    }
    if (hs->in[i] != in) return DSQ_ERR_SHAPE;
    int rc = hess_add_upper(hs->xtx[i], in, x, T, pool);
    if (rc == DSQ_OK) hs->rows[i] += (uint64_t)T;
    return rc;
}

const double *dsq_gptq_hset_find(const dsq_gptq_hset *hs, const char *site, int64_t in, uint64_t *rows)
{
    for (int i = 0; i < hs->n; i++)
        if (strcmp(hs->name[i], site) == 0 && hs->in[i] == in) {
            if (rows) *rows = hs->rows[i];
            return hs->xtx[i];
        }
    return NULL;
}

void dsq_gptq_hset_release(dsq_gptq_hset *hs)
{
    for (int i = 0; i < hs->n; i++) {
        free(hs->name[i]);
        free(hs->xtx[i]);
    }
    free(hs->name);
    free(hs->in);
    free(hs->xtx);
    free(hs->rows);
    memset(hs, 0, sizeof *hs);
}

/* ---- routed experts --------------------------------------------------------- */

int dsq_gptq_moe_init(dsq_gptq_moe *m, int64_t in, int n_experts)
{
    memset(m, 0, sizeof *m);
    if (in <= 0 || n_experts <= 0) return DSQ_ERR_INVALID_ARG;
    m->in = in;
    m->n_experts = n_experts;
    m->idx = calloc((size_t)n_experts, sizeof *m->idx);
    m->n = calloc((size_t)n_experts, sizeof *m->n);
    m->cap = calloc((size_t)n_experts, sizeof *m->cap);
    if (!m->idx || !m->n || !m->cap) {
        dsq_gptq_moe_release(m);
        return DSQ_ERR_NOMEM;
    }
    return DSQ_OK;
}

void dsq_gptq_moe_release(dsq_gptq_moe *m)
{
    if (m->idx)
        for (int e = 0; e < m->n_experts; e++) free(m->idx[e]);
    free(m->idx);
    free(m->n);
    free(m->cap);
    free(m->rows);
    memset(m, 0, sizeof *m);
}

int dsq_gptq_moe_add_rows(dsq_gptq_moe *m, const float *x, int64_t T)
{
    if (T < 0 || m->nrows + (uint64_t)T > UINT32_MAX) return DSQ_ERR_OVERFLOW;
    if (m->nrows + (uint64_t)T > m->caprows) {
        uint64_t nc = m->caprows ? m->caprows : 1024;
        while (nc < m->nrows + (uint64_t)T) nc *= 2;
        float *nr = realloc(m->rows, (size_t)nc * (size_t)m->in * sizeof *nr);
        if (!nr) return DSQ_ERR_NOMEM;
        m->rows = nr;
        m->caprows = nc;
    }
    memcpy(m->rows + (size_t)m->nrows * (size_t)m->in, x, (size_t)T * (size_t)m->in * sizeof *x);
    m->base = m->nrows;
    m->nrows += (uint64_t)T;
    return DSQ_OK;
}

int dsq_gptq_moe_add_routed(dsq_gptq_moe *m, int e, const int32_t *token_index, int64_t T)
{
    if (e < 0 || e >= m->n_experts || T < 0) return DSQ_ERR_INVALID_ARG;
    if (m->n[e] + (uint64_t)T > m->cap[e]) {
        uint64_t nc = m->cap[e] ? m->cap[e] : 64;
        while (nc < m->n[e] + (uint64_t)T) nc *= 2;
        uint32_t *ni = realloc(m->idx[e], (size_t)nc * sizeof *ni);
        if (!ni) return DSQ_ERR_NOMEM;
        m->idx[e] = ni;
        m->cap[e] = nc;
    }
    for (int64_t t = 0; t < T; t++) {
        uint64_t r = m->base + (uint64_t)(token_index ? token_index[t] : t);
        if (r >= m->nrows) return DSQ_ERR_INVALID_ARG;   /* routed rows come from this sample */
        m->idx[e][m->n[e]++] = (uint32_t)r;
    }
    return DSQ_OK;
}

/* Gather up to C rows of e starting at its k-th into buf [C][in]. */
static int64_t gather(const dsq_gptq_moe *m, int e, uint64_t k, int64_t C, float *buf)
{
    int64_t n = 0;
    for (; n < C && k + (uint64_t)n < m->n[e]; n++)
        memcpy(buf + (size_t)n * (size_t)m->in, m->rows + (size_t)m->idx[e][k + (uint64_t)n] * (size_t)m->in,
               (size_t)m->in * sizeof *buf);
    return n;
}

int dsq_gptq_moe_hessian_in(const dsq_gptq_moe *m, int e, double *h, uint64_t *rows)
{
    if (e < 0 || e >= m->n_experts) return DSQ_ERR_INVALID_ARG;
    const int64_t C = DSQ_GPTQ_GATHER;
    memset(h, 0, (size_t)m->in * (size_t)m->in * sizeof *h);
    float *buf = malloc((size_t)C * (size_t)m->in * sizeof *buf);
    if (!buf) return DSQ_ERR_NOMEM;
    int rc = DSQ_OK;
    for (uint64_t k = 0; k < m->n[e] && rc == DSQ_OK; k += (uint64_t)C)
        rc = hess_add_upper(h, m->in, buf, gather(m, e, k, C, buf), NULL);
    free(buf);
    *rows = m->n[e];
    return rc;
}

int dsq_gptq_moe_hessian_down(const dsq_gptq_moe *m, int e, const dsq_linear *gate, const dsq_linear *up,
                              dsq_pool *pool, double *h, uint64_t *rows)
{
    if (e < 0 || e >= m->n_experts || gate->in != m->in || up->in != m->in || up->out != gate->out)
        return DSQ_ERR_INVALID_ARG;
    const int64_t C = DSQ_GPTQ_GATHER, F = gate->out;
    memset(h, 0, (size_t)F * (size_t)F * sizeof *h);
    float *buf = malloc((size_t)C * (size_t)m->in * sizeof *buf), *g = malloc((size_t)C * (size_t)F * sizeof *g),
          *u = malloc((size_t)C * (size_t)F * sizeof *u);
    int rc = buf && g && u ? DSQ_OK : DSQ_ERR_NOMEM;
    for (uint64_t k = 0; k < m->n[e] && rc == DSQ_OK; k += (uint64_t)C) {
        int64_t n = gather(m, e, k, C, buf);
        rc = gate->w.scheme->gemm(&gate->w, buf, n, g, pool, NULL, 0);
        if (rc == DSQ_OK) rc = up->w.scheme->gemm(&up->w, buf, n, u, pool, NULL, 0);
        if (rc == DSQ_OK) {
            dsq_silu_mul(g, u, (size_t)n * (size_t)F);   /* as engine/moe.c */
            rc = hess_add_upper(h, F, g, n, NULL);
        }
    }
    free(buf);
    free(g);
    free(u);
    *rows = m->n[e];
    return rc;
}
