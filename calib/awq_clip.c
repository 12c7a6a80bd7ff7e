/* awq_clip.c - AWQ weight clipping searched on the true per-(row, group)
 * output error (awq.h, "Clip search on X^T X").
 *
 * AutoAWQ's auto_clip scores clip c of group g of output row r by the mean
 * over sampled tokens of (x_g . (w_g - q_c(w_g)))^2, with x the input the
 * (already scaled) weights see, i.e. e^T C_g e / n with e = w_g - q_c(w_g)
 * and C_g = X_g^T X_g. stats.c accumulates the X^T X blocks of every input
 * over all calibration tokens, so the same objective is evaluated here
 * exactly, from all tokens instead of AutoAWQ's 512-token subsample, and in
 * batches through BLAS: for R rows and the 10 candidates the errors are the
 * row sums of E .* (E C_g), E = [R * 10][group] error rows. */
#include "awq.h"
#include "kernels.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CLIP_ROWS 256

int dsq_awq_clip_supported(int64_t cols, int32_t gs)
{
    if (cols <= 0 || gs < 0) return 0;
    int64_t g = gs == 0 || gs >= cols ? cols : gs;
    /* each group must sit inside one X^T X block */
    return g <= DSQ_COV_BLOCK && (DSQ_COV_BLOCK % g == 0 || g == cols);
}

float dsq_awq_clip_max(float amax, int idx) { return amax * (1.0f - (float)idx / (float)DSQ_AWQ_CLIP_GRID); }

/* The awq-w4a16 value of each w clamped to +-mv (scheme.h: asymmetric int4,
 * range widened to include 0, round half to even), into out; with search,
 * the converter's searched parameters for the clamped group (qsearch.c,
 * weighted by imp), so the clip is chosen for the quantizer that runs. */
static void fake_quant(const float *w, int64_t n, float mv, int search, const float *imp, int8_t *codes,
                       float *out)
{
    float mn = 0.0f, mx = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        float v = w[j] < -mv ? -mv : w[j] > mv ? mv : w[j];
        out[j] = v;
        if (v < mn) mn = v;
        if (v > mx) mx = v;
    }
    if (search) {
        float s;
        uint8_t z;
        dsq_qgroup_awq(dsq_kernels_get(), out, n, 0, 1, imp, codes, &s, &z);
        for (int64_t j = 0; j < n; j++) out[j] = (float)(codes[j] - (int)z) * s;
        return;
    }
    float r = mx - mn, s = (r > 1e-5f ? r : 1e-5f) / 15.0f;
    float z = -rintf(mn / s);
    z = z < 0.0f ? 0.0f : z > 15.0f ? 15.0f : z;
    for (int64_t j = 0; j < n; j++) {
        float q = rintf(out[j] / s);
        q = q < -z ? -z : q > 15.0f - z ? 15.0f - z : q;
        out[j] = q * s;
    }
}

static float group_amax(const float *w, int64_t n)
{
    float a = 0.0f;
    for (int64_t j = 0; j < n; j++) a = fabsf(w[j]) > a ? fabsf(w[j]) : a;
    return a;
}

void dsq_awq_clip_apply(float *w, int64_t nrows, int64_t cols, int32_t gs, const uint8_t *idx)
{
    const int64_t g = gs == 0 || gs >= cols ? cols : gs, ng = (cols + g - 1) / g;
    for (int64_t r = 0; r < nrows; r++)
        for (int64_t k = 0; k < ng; k++) {
            uint8_t i = idx[r * ng + k];
            if (i == 0) continue;
            float *wg = w + r * cols + k * g;
            int64_t len = cols - k * g < g ? cols - k * g : g;
            float mv = dsq_awq_clip_max(group_amax(wg, len), i);
            for (int64_t j = 0; j < len; j++) wg[j] = wg[j] < -mv ? -mv : wg[j] > mv ? mv : wg[j];
        }
}

int dsq_awq_clip_search(const float *w, int64_t rows, int64_t cols, int32_t gs, const float *in_scale,
                        const dsq_act_stats *site, int search, const float *importance, uint8_t *idx,
                        double *err0, double *err1)
{
    search = dsq_qsearch_mode(search, DSQ_SCHEME_AWQ_W4A16);
    if (err0) *err0 = -1.0;
    if (err1) *err1 = -1.0;
    if (!site || !site->cov || site->in != cols || !dsq_awq_clip_supported(cols, gs)) return DSQ_ERR_INVALID_ARG;
    const int64_t g = gs == 0 || gs >= cols ? cols : gs, ng = (cols + g - 1) / g, B = DSQ_COV_BLOCK;
    const int NC = DSQ_AWQ_CLIP_CANDIDATES;
    memset(idx, 0, (size_t)(rows * ng));
    if (site->count == 0) return DSQ_OK;
    float *C = malloc((size_t)g * (size_t)g * sizeof *C);
    float *E = malloc((size_t)CLIP_ROWS * NC * (size_t)g * sizeof *E);
    float *F = malloc((size_t)CLIP_ROWS * NC * (size_t)g * sizeof *F);
    float *q = malloc((size_t)g * sizeof *q);
    int8_t *codes = malloc((size_t)g);
    if (!C || !E || !F || !q || !codes) {
        free(codes);
        free(C);
        free(E);
        free(F);
        free(q);
        return DSQ_ERR_NOMEM;
    }
    double e0 = 0.0, e1 = 0.0;
    const double inv_n = 1.0 / (double)site->count;
    for (int64_t k = 0; k < ng; k++) {
        const int64_t c0 = k * g, len = cols - c0 < g ? cols - c0 : g;
        /* the input the scaled weights see is x / in_scale: C'_ij = C_ij / (s_i s_j) / n */
        const double *cb = site->cov + (size_t)(c0 / B) * (size_t)(B * B);
        const int64_t o = c0 % B;
        for (int64_t i = 0; i < len; i++)
            for (int64_t j = 0; j < len; j++) {
                double v = cb[(o + i) * B + o + j] * inv_n;
                if (in_scale) v /= (double)in_scale[c0 + i] * (double)in_scale[c0 + j];
                C[i * len + j] = (float)v;
            }
        for (int64_t r0 = 0; r0 < rows; r0 += CLIP_ROWS) {
            const int64_t R = rows - r0 < CLIP_ROWS ? rows - r0 : CLIP_ROWS;
            for (int64_t r = 0; r < R; r++) {
                const float *wg = w + (r0 + r) * cols + c0;
                float amax = group_amax(wg, len);
                for (int c = 0; c < NC; c++) {
                    float *e = E + ((size_t)r * NC + (size_t)c) * (size_t)len;
                    fake_quant(wg, len, dsq_awq_clip_max(amax, c), search, importance ? importance + c0 : NULL,
                               codes, q);
                    for (int64_t j = 0; j < len; j++) e[j] = wg[j] - q[j];
                }
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(R * NC), (int)len, (int)len, 1.0f, E,
                        (int)len, C, (int)len, 0.0f, F, (int)len);
            for (int64_t r = 0; r < R; r++) {
                double best = INFINITY, first = 0.0;
                int bi = 0;
                for (int c = 0; c < NC; c++) {
                    const float *e = E + ((size_t)r * NC + (size_t)c) * (size_t)len, *f = F + (e - E);
                    double s = 0.0;
                    for (int64_t j = 0; j < len; j++) s += (double)e[j] * (double)f[j];
                    if (c == 0) first = s;
                    if (s < best) {   /* ties keep the milder clip */
                        best = s;
                        bi = c;
                    }
                }
                idx[(r0 + r) * ng + k] = (uint8_t)bi;
                e0 += first;
                e1 += best;
            }
        }
    }
    free(C);
    free(E);
    free(F);
    free(q);
    free(codes);
    if (err0) *err0 = e0 / (double)(rows * cols);
    if (err1) *err1 = e1 / (double)(rows * cols);
    return DSQ_OK;
}

double dsq_awq_output_mse(const float *w, const float *wq, int64_t rows, int64_t cols, const float *in_scale,
                          const float *x, int64_t T)
{
    if (T <= 0 || rows <= 0) return -1.0;
    float *xs = malloc((size_t)T * (size_t)cols * sizeof *xs), *d = malloc((size_t)rows * (size_t)cols * sizeof *d);
    float *y = malloc((size_t)T * (size_t)rows * sizeof *y);
    double e = -1.0;
    if (xs && d && y) {
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < cols; j++)
                xs[t * cols + j] = in_scale ? x[t * cols + j] / in_scale[j] : x[t * cols + j];
        for (size_t i = 0; i < (size_t)(rows * cols); i++) d[i] = w[i] - wq[i];
        /* (W - Wq) x: the output error itself, no cancellation of two outputs */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)rows, (int)cols, 1.0f, xs, (int)cols, d,
                    (int)cols, 0.0f, y, (int)rows);
        e = 0.0;
        for (size_t i = 0; i < (size_t)(T * rows); i++) e += (double)y[i] * (double)y[i];
        e /= (double)T * (double)rows;
    }
    free(xs);
    free(d);
    free(y);
    return e;
}
