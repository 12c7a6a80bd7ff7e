/* scheme_awq.c - awq-w4a16 row: AutoAWQ asymmetric int4 with unsigned zero
 * points per (row, group); activations stay float (the gemm dequantizes on
 * the fly). Math follows AutoAWQ pseudo_quantize_tensor(zero_point=True):
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
 * (mean |x_j|) we use sum_j (imp_j * (w_j - deq_j))^2 as the proxy. */
#include "scheme.h"
#include "kernels.h"
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

void dsq_qgroup_awq(const dsq_kernels *k, const float *wg, int64_t len, int clip_search,
                    const float *imp, int8_t *codes, float *scale, uint8_t *zero)
{
    float mn, mx, s;
    uint8_t z;
    k->minmax(wg, len, &mn, &mx);
    awq_params(mn, mx, &s, &z);
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
            double e = awq_group(k, wg, len, cs, cz, imp, codes, 1);
            if (e < best) {
                best = e;
                bs = cs;
                bz = cz;
            }
        }
        s = bs;
        z = bz;
    }
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
                dsq_qgroup_awq(k, wg, len, p->clip_search, imp, codes + k0, &s, &z);
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
        for (int64_t j = 0; j < cols; j++) {
            size_t gi = (size_t)(n * ng + j / gs);
            out[i * cols + j] = (float)(dsq_i4_get(row, j) - (int)v->zeros[gi]) * v->scales[gi];
        }
    }
}
