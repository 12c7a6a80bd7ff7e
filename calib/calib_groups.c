/* calib_groups.c - per-group decisions: which method a scaling group gets
 * (AWQ search, SmoothQuant fixed or searched, none), and folding its scales
 * into the result (producers absorb 1/s, consumers get s). */
#include "calib_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dsq_calib_group_method(calib_run *c, const dsq_scale_group *g, int *method)
{
    int awq = 0, w4a8 = 0, w8s = 0, w8d = 0;
    for (int i = 0; i < g->nlin; i++) {
        const dsq_scheme *sc;
        int32_t gs;
        DSQ_TRY(dsq_calib_target_of(c, g->lin[i], &sc, &gs));
        if (!sc) continue;
        awq |= sc->id == DSQ_SCHEME_AWQ_W4A16;
        w4a8 |= sc->id == DSQ_SCHEME_W4A8;
        w8s |= sc->act == DSQ_ACT_INT8_STATIC;
        w8d |= sc->act == DSQ_ACT_INT8_TOKEN;
    }
    /* w4a8 searches both grids; w8a8-dynamic searches the SmoothQuant alpha
     * (s = 1 included): per-token int8 activations need no static range, so
     * without a search a fixed alpha can only make the int8 weights worse
     * where the activations had no outlier channels to tame. */
    int fixed = c->o->alpha_set;
    *method = awq    ? M_AWQ
              : w4a8 ? (fixed ? M_SMOOTH_FIXED : M_SMOOTH_SEARCH)
              : w8s  ? M_SMOOTH_FIXED
              : w8d  ? (fixed ? M_SMOOTH_FIXED : M_SMOOTH_SEARCH_W8)
                     : M_NONE;
    if (c->o->smooth_method == DSQ_SMOOTH_FLEX && !fixed && !w4a8 && (w8s || w8d) && !awq) *method = M_FLEX;
    if ((*method != M_AWQ || c->o->gptq) && !c->o->smooth) *method = M_NONE;   /* awq: GPTQ alone */
    return DSQ_OK;
}

int dsq_calib_expert_fallback(const calib_run *c, const dsq_layer_stats *ls, int e)
{
    return e >= 0 && e < ls->n_experts && !c->moe_all && ls->expert_tokens[e] < (uint64_t)c->o->min_expert_tokens;
}

static int combine(dsq_calib_result *r, const float **slot, const float *v, int64_t n)
{
    if (!*slot) {
        *slot = v;
        return DSQ_OK;
    }
    float *p = dsq_calib_own(r, (size_t)n * sizeof *p);
    if (!p) return DSQ_ERR_NOMEM;
    for (int64_t i = 0; i < n; i++) p[i] = (*slot)[i] * v[i];
    *slot = p;
    return DSQ_OK;
}

static void bias_name(const char *w, char *buf, size_t n)
{
    size_t k = strlen(w);
    if (k > 7 && strcmp(w + k - 7, ".weight") == 0) snprintf(buf, n, "%.*s.bias", (int)(k - 7), w);
    else snprintf(buf, n, "%s.bias", w);
}

/* Fold s into the result: producer rows absorb 1/s, consumers get s. */
int dsq_calib_apply_group(calib_run *c, const dsq_scale_group *g, const float *s)
{
    dsq_calib_result *r = c->r;
    const int64_t n = g->n;
    float *sv = dsq_calib_own(r, (size_t)n * sizeof *sv);
    if (!sv) return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    memcpy(sv, s, (size_t)n * sizeof *sv);
    dsq_calib_tensor *t;
    int rc;
    if (!g->prev_lin) {
        float *inv = dsq_calib_own(r, (size_t)n * sizeof *inv);
        if (!inv) return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        for (int64_t j = 0; j < n; j++) inv[j] = 1.0f / sv[j];
        DSQ_TRY(dsq_calib_entry(r, g->prev, n, 0, &t, c->d));
        rc = combine(r, &t->row_scale, inv, n);
    } else {
        const dsq_linear *p = g->prev_lin;
        float *rv = dsq_calib_own(r, (size_t)p->out * sizeof *rv);
        if (!rv) return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        for (int64_t i = 0; i < p->out; i++) rv[i] = 1.0f;
        for (int64_t j = 0; j < n; j++) rv[(j / g->rb) * g->rs + g->ro + j % g->rb] = 1.0f / sv[j];
        DSQ_TRY(dsq_calib_entry(r, p->name, p->out, p->in, &t, c->d));
        rc = combine(r, &t->row_scale, rv, p->out);
        if (rc == DSQ_OK && p->bias) {
            char bn[400];
            bias_name(p->name, bn, sizeof bn);
            DSQ_TRY(dsq_calib_entry(r, bn, p->out, 0, &t, c->d));
            rc = combine(r, &t->row_scale, rv, p->out);
        }
    }
    for (int i = 0; i < g->nlin + g->npassive && rc == DSQ_OK; i++) {
        const dsq_linear *l = i < g->nlin ? g->lin[i] : g->passive[i - g->nlin];
        DSQ_TRY(dsq_calib_entry(r, l->name, l->out, l->in, &t, c->d));
        rc = combine(r, &t->in_scale, sv, n);
    }
    if (rc < 0) return dsq_fail(c->d, rc, NULL, g->prev, -1, "out of memory");
    return DSQ_OK;
}
