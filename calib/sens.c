/* sens.c - quantization sensitivity of a linear (sens.h). */
#include "sens.h"
#include "awq_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dsq_sens_unit(const char *name, char *buf, size_t n)
{
    if (strstr(name, ".mlp.experts.")) return 0;
    static const struct { const char *leaf, *unit; } fused[] = {
        { "gate_proj", "gate_up_proj" }, { "up_proj", "gate_up_proj" },
        { "q_a_proj", "fused_qkv_a_proj" }, { "kv_a_proj_with_mqa", "fused_qkv_a_proj" },
        { "q_proj", "qkv_proj" }, { "k_proj", "qkv_proj" }, { "v_proj", "qkv_proj" },
    };
    size_t len = strlen(name);
    if (len > 7 && !strcmp(name + len - 7, ".weight")) len -= 7;
    const char *dot = NULL;
    for (size_t i = len; i > 0 && !dot; i--)
        if (name[i - 1] == '.') dot = name + i - 1;
    if (dot) {
        size_t pl = (size_t)(dot - name), ll = len - pl - 1;
        for (size_t k = 0; k < sizeof fused / sizeof fused[0]; k++)
            if (strlen(fused[k].leaf) == ll && !memcmp(dot + 1, fused[k].leaf, ll)) {
                snprintf(buf, n, "%.*s.%s", (int)pl, name, fused[k].unit);
                return 1;
            }
    }
    snprintf(buf, n, "%.*s", (int)len, name);
    return 1;
}

int dsq_linear_sensitivity(const dsq_linear *l, const dsq_scheme *sc, int32_t gs, const dsq_calib_tensor *t,
                           const dsq_act_stats *site, dsq_pool *pool, double *rel, dsq_diag *d)
{
    *rel = -1.0;
    if (!site || site->sample_n <= 0 || site->in != l->in || !sc->has_scales) return DSQ_OK;
    dsq_qshape sh;
    size_t bs;
    int rc = dsq_qshape_init(&sh, sc, l->out, l->in, gs);
    if (rc == DSQ_OK) rc = sc->blob_size(&sh, &bs);
    if (rc < 0) return dsq_fail(d, rc, NULL, l->name, -1, "scheme %s cannot hold this tensor", sc->name);
    const int64_t T = site->sample_n, n = l->in, m = l->out;
    const float *in_scale = t ? t->in_scale : NULL;
    float *w = dsq_awq_deq_f32(l, pool), *wr = malloc((size_t)m * (size_t)n * sizeof *wr);
    float *xs = malloc((size_t)T * (size_t)n * sizeof *xs);
    float *yref = malloc((size_t)T * (size_t)m * sizeof *yref), *y = malloc((size_t)T * (size_t)m * sizeof *y);
    uint8_t *blob = t && t->gptq_blob ? NULL : calloc(1, bs);
    if (!w || !wr || !xs || !yref || !y || (!blob && !(t && t->gptq_blob))) {
        rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, l->name, -1, "out of memory for the sensitivity");
        goto out;
    }
    /* reference: the folded float weights, never clipped */
    memcpy(wr, w, (size_t)m * (size_t)n * sizeof *wr);
    if (t) {
        dsq_calib_tensor ref = *t;
        ref.clip_idx = NULL;
        if ((rc = dsq_calib_apply_rows(&ref, 0, m, n, wr)) < 0) goto shape;
    }
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < n; j++)
            xs[i * n + j] = in_scale ? site->sample[i * n + j] / in_scale[j] : site->sample[i * n + j];
    dsq_awq_sgemm_nt(xs, T, wr, m, n, yref);
    dsq_qview v;
    if (t && t->gptq_blob) {
        if (t->gptq_scheme != sc->id || t->gptq_blob_size != bs) {
            rc = dsq_fail(d, DSQ_ERR_STATE, NULL, l->name, -1, "the GPTQ result was made for another scheme");
            goto out;
        }
        rc = dsq_qview_init(&v, sc, &sh, t->gptq_blob, bs, d);
    } else {
        if (t && (rc = dsq_calib_apply_rows(t, 0, m, n, w)) < 0) goto shape;   /* the weights the converter sees */
        dsq_qparams qp;
        dsq_qparams_init(&qp);
        dsq_calib_qparams(t, &qp);
        rc = dsq_quantize_tensor(sc, w, &sh, &qp, blob, pool, d);
        if (rc == DSQ_OK) rc = dsq_qview_init(&v, sc, &sh, blob, bs, d);
    }
    if (rc == DSQ_OK && (rc = sc->gemm(&v, xs, T, y, pool, NULL, 0)) < 0)
        rc = dsq_fail(d, rc, NULL, l->name, -1, "gemm failed measuring the sensitivity");
    if (rc == DSQ_OK) {
        double e = dsq_awq_sqdiff(y, yref, (size_t)T * (size_t)m), ref = 0.0;
        for (size_t i = 0; i < (size_t)T * (size_t)m; i++) ref += (double)yref[i] * (double)yref[i];
        /* a linear whose output is 0 on every kept row has nothing to lose */
        *rel = ref > 0.0 ? e / ref : 0.0;
    }
    goto out;
shape:
    rc = dsq_fail(d, rc, NULL, l->name, -1, "calibration entry does not fit the tensor");
out:
    free(w);
    free(wr);
    free(xs);
    free(yref);
    free(y);
    free(blob);
    return rc;
}

void dsq_sens_top(const double *sens, const char *const *names, size_t cnt, size_t n, size_t *idx, size_t *chosen)
{
    /* selection by repeated scans: n is a handful of tensors */
    size_t k = 0;
    while (k < n) {
        size_t best = (size_t)-1;
        for (size_t i = 0; i < cnt; i++) {
            if (!(sens[i] >= 0.0)) continue;
            int taken = 0;
            for (size_t j = 0; j < k && !taken; j++) taken = idx[j] == i;
            if (taken) continue;
            if (best == (size_t)-1 || sens[i] > sens[best] ||
                (sens[i] == sens[best] && strcmp(names[i], names[best]) < 0))
                best = i;
        }
        if (best == (size_t)-1) break;
        idx[k++] = best;
    }
    *chosen = k;
}
