/* awq.c - scaling groups per layer and the grid search over scales (awq.h). */
#include "awq.h"
#include "awq_int.h"
#include "dsq_mem.h"
#include "ops.h"
#include "smooth.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- groups ------------------------------------------------------------ */

static dsq_scale_group *grp_new(dsq_group_list *l)
{
    if (l->n == l->cap) {
        int nc = l->cap ? l->cap * 2 : 16;
        dsq_scale_group *nv = realloc(l->v, (size_t)nc * sizeof *nv);
        if (!nv) return NULL;
        l->v = nv;
        l->cap = nc;
    }
    dsq_scale_group *g = &l->v[l->n++];
    memset(g, 0, sizeof *g);
    g->expert = -1;
    return g;
}

static int push_ptr(const void ***v, int *n, const void *p)
{
    if ((*n & (*n - 1)) == 0) {   /* grow at powers of two */
        int nc = *n ? *n * 2 : 4;
        const void **nv = realloc((void *)*v, (size_t)nc * sizeof *nv);
        if (!nv) return DSQ_ERR_NOMEM;
        *v = nv;
    }
    (*v)[(*n)++] = p;
    return DSQ_OK;
}

static int add_lin(dsq_scale_group *g, const dsq_linear *l)
{
    if (!l || !l->name) return DSQ_OK;
    if (g->n == 0) g->n = l->in;
    if (l->in != g->n) return DSQ_ERR_SHAPE;
    return push_ptr((const void ***)&g->lin, &g->nlin, l);
}

static int add_passive(dsq_scale_group *g, const dsq_linear *l)
{
    if (!l || !l->name) return DSQ_OK;
    if (l->in != g->n) return DSQ_ERR_SHAPE;
    return push_ptr((const void ***)&g->passive, &g->npassive, l);
}

static int add_mlp(dsq_scale_group *g, const dsq_mlp *m, int expert)
{
    DSQ_TRY(add_lin(g, &m->gate));
    DSQ_TRY(add_lin(g, &m->up));
    int n = g->nmlp;
    DSQ_TRY(push_ptr((const void ***)&g->mlp, &g->nmlp, m));
    if ((n & (n - 1)) == 0) {
        int nc = n ? n * 2 : 4;
        int *nv = realloc(g->mlp_expert, (size_t)nc * sizeof *nv);
        if (!nv) return DSQ_ERR_NOMEM;
        g->mlp_expert = nv;
    }
    g->mlp_expert[n] = expert;
    return DSQ_OK;
}

static void set_site(dsq_scale_group *g, const dsq_linear *first, int q_lora)
{
    dsq_calib_site_of(first->name, q_lora, g->site, sizeof g->site);
}

void dsq_groups_release(dsq_group_list *l)
{
    if (!l) return;
    for (int i = 0; i < l->n; i++) {
        free((void *)l->v[i].lin);
        free((void *)l->v[i].passive);
        free((void *)l->v[i].mlp);
        free(l->v[i].mlp_expert);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* norm -> consumers */
static int norm_group(dsq_group_list *L, const char *prefix, const char *norm, const dsq_linear *const *cons,
                      int ncons, int q_lora, dsq_scale_group **out)
{
    *out = NULL;
    if (ncons == 0 || !cons[0] || !cons[0]->name) return DSQ_OK;
    dsq_scale_group *g = grp_new(L);
    if (!g) return DSQ_ERR_NOMEM;
    snprintf(g->prev, sizeof g->prev, "%s.%s", prefix, norm);
    for (int i = 0; i < ncons; i++) DSQ_TRY(add_lin(g, cons[i]));
    g->rb = g->n;
    set_site(g, cons[0], q_lora);
    g->loss = DSQ_LOSS_LINEARS;
    *out = g;
    return DSQ_OK;
}

/* producer linear rows -> consumer */
static int fc_group(dsq_group_list *L, const dsq_linear *prev, const dsq_linear *cons, int64_t rb, int64_t rs,
                    int64_t ro, int expert, int q_lora)
{
    if (!prev->name || !cons->name) return DSQ_OK;
    dsq_scale_group *g = grp_new(L);
    if (!g) return DSQ_ERR_NOMEM;
    snprintf(g->prev, sizeof g->prev, "%s", prev->name);
    g->prev_lin = prev;
    DSQ_TRY(add_lin(g, cons));
    g->rb = rb;
    g->rs = rs;
    g->ro = ro;
    /* the mapped rows must exist in the producer */
    int64_t last = ((g->n - 1) / rb) * rs + ro + (g->n - 1) % rb;
    if (last >= prev->out || rb <= 0) return DSQ_ERR_SHAPE;
    g->expert = expert;
    set_site(g, cons, q_lora);
    g->loss = DSQ_LOSS_LINEARS;
    return DSQ_OK;
}

static int ffn_groups(dsq_group_list *L, const dsq_layer *ly, const char *prefix, int q_lora,
                      const dsq_model_config *cfg)
{
    dsq_scale_group *g = NULL;
    if (!ly->is_moe) {
        const dsq_linear *c[2] = { &ly->mlp.gate, &ly->mlp.up };
        DSQ_TRY(norm_group(L, prefix, "post_attention_layernorm.weight", c, 2, q_lora, &g));
        if (g) {
            g->nlin = 0;   /* re-add through add_mlp to record the MLP */
            DSQ_TRY(add_mlp(g, &ly->mlp, -1));
            g->loss = DSQ_LOSS_MLP;
        }
        return fc_group(L, &ly->mlp.up, &ly->mlp.down, ly->mlp.up.out, 0, 0, -1, q_lora);
    }
    g = grp_new(L);
    if (!g) return DSQ_ERR_NOMEM;
    snprintf(g->prev, sizeof g->prev, "%s.post_attention_layernorm.weight", prefix);
    g->n = ly->router.in;
    const int E = (int)ly->router.out;
    for (int e = 0; e < E; e++) DSQ_TRY(add_mlp(g, &ly->experts[e], e));
    if (ly->has_shared) DSQ_TRY(add_mlp(g, &ly->shared, -1));
    DSQ_TRY(add_passive(g, &ly->router));
    g->rb = g->n;
    set_site(g, &ly->router, q_lora);
    g->loss = DSQ_LOSS_MOE;
    if (ly->router.name && E <= DSQ_ROUTE_MAX_EXPERTS) {   /* routing as model.c sets it up */
        g->router = &ly->router;
        dsq_router_from_config(cfg, &g->route);
        g->route.n_experts = E;
        g->route.bias = ly->router_bias;
        if (g->route.top_k < 1 || g->route.top_k > E) g->router = NULL;
    }
    for (int e = 0; e < E; e++) {
        const dsq_mlp *x = &ly->experts[e];
        DSQ_TRY(fc_group(L, &x->up, &x->down, x->up.out, 0, 0, e, q_lora));
    }
    if (ly->has_shared) DSQ_TRY(fc_group(L, &ly->shared.up, &ly->shared.down, ly->shared.up.out, 0, 0, -1, q_lora));
    return DSQ_OK;
}

int dsq_groups_build(const dsq_model *m, int layer, int flavor, dsq_group_list *out, dsq_diag *d)
{
    memset(out, 0, sizeof *out);
    const dsq_model_config *c = dsq_model_get_config(m);
    if (layer < 0 || layer >= c->num_hidden_layers)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "layer %d out of range", layer);
    const dsq_layer *ly = &dsq_model_weights(m)->layers[layer];
    if (!ly->loaded) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "layer %d is not loaded", layer);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "model.layers.%d", layer);
    const int q_lora = c->q_lora_rank > 0;
    dsq_scale_group *g;
    int rc;
    if (dsq_arch_is_deepseek(c->arch)) {
        const dsq_linear *c1[2] = { q_lora ? &ly->q_a : &ly->q, &ly->kv_a };
        rc = norm_group(out, prefix, "input_layernorm.weight", c1, 2, q_lora, &g);
        if (rc == DSQ_OK && g && g->nlin == 2) {
            g->attn_model = m;
            g->layer = layer;
        }
        /* V3.2's indexer reads the same normed inputs: its float linears
         * absorb the scales with the quantized ones (msModelSlim's flex
         * smoothing puts wk, weights_proj with q_a / kv_a and wq_b with q_b) */
        if (rc == DSQ_OK && g && ly->idx_wk.name) rc = add_passive(g, &ly->idx_wk);
        if (rc == DSQ_OK && g && ly->idx_wp.name) rc = add_passive(g, &ly->idx_wp);
        if (rc == DSQ_OK && q_lora) {
            const dsq_linear *c2[1] = { &ly->q_b };
            rc = norm_group(out, prefix, "self_attn.q_a_layernorm.weight", c2, 1, q_lora, &g);
            if (rc == DSQ_OK && g && ly->idx_wq_b.name) rc = add_passive(g, &ly->idx_wq_b);
        }
        if (rc == DSQ_OK) {
            const dsq_linear *c3[1] = { &ly->kv_b };
            rc = norm_group(out, prefix, "self_attn.kv_a_layernorm.weight", c3, 1, q_lora, &g);
        }
        if (rc == DSQ_OK && flavor == DSQ_GROUPS_SMOOTH) {
            int64_t nope = c->qk_nope_head_dim, vd = c->v_head_dim;
            rc = fc_group(out, &ly->kv_b, &ly->o, vd, nope + vd, nope, -1, q_lora);
        }
    } else {
        const dsq_linear *c1[3] = { &ly->q, &ly->k, &ly->v };
        rc = norm_group(out, prefix, "input_layernorm.weight", c1, 3, q_lora, &g);
        /* v -> o only without GQA: a shared v row cannot absorb several scales */
        if (rc == DSQ_OK && c->num_key_value_heads == c->num_attention_heads && ly->v.out == ly->o.in)
            rc = fc_group(out, &ly->v, &ly->o, ly->v.out, 0, 0, -1, q_lora);
    }
    if (rc == DSQ_OK) rc = ffn_groups(out, ly, prefix, q_lora, c);
    if (rc < 0) {
        dsq_groups_release(out);
        return dsq_fail(d, rc, NULL, NULL, -1, "layer %d: cannot build scaling groups (%s)", layer,
                        dsq_strerror(rc));
    }
    return DSQ_OK;
}

/* ---- weights as float --------------------------------------------------- */

#define ROW_BLOCK 64

typedef struct deq_job {
    const dsq_linear *l;
    float *out;
} deq_job;

static void deq_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    deq_job *j = ctx;
    int64_t r0 = (int64_t)item * ROW_BLOCK, n = j->l->out - r0 < ROW_BLOCK ? j->l->out - r0 : ROW_BLOCK;
    j->l->w.scheme->dequantize(&j->l->w, r0, n, j->out + r0 * j->l->in);
}

/* W [out][in] as float32 (caller frees). */
float *dsq_awq_deq_f32(const dsq_linear *l, dsq_pool *pool)
{
    float *w = malloc((size_t)l->out * (size_t)l->in * sizeof *w);
    if (!w) return NULL;
    deq_job j = { l, w };
    dsq_pool_run(pool, (size_t)((l->out + ROW_BLOCK - 1) / ROW_BLOCK), deq_task, &j);
    return w;
}

/* ---- weight statistics -------------------------------------------------- */

typedef struct wstat_job {
    const dsq_linear *l;
    int64_t gs;           /* columns per AWQ group */
    int want_mean;
    float *maxp;          /* [nblocks][n] */
    double *sump;         /* [nblocks][n] */
    int nomem;
} wstat_job;

static void wstat_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    wstat_job *j = ctx;
    const int64_t n = j->l->in, r0 = (int64_t)item * ROW_BLOCK;
    const int64_t nr = j->l->out - r0 < ROW_BLOCK ? j->l->out - r0 : ROW_BLOCK;
    float *buf = malloc((size_t)nr * (size_t)n * sizeof *buf);
    if (!buf) {
        j->nomem = 1;
        return;
    }
    j->l->w.scheme->dequantize(&j->l->w, r0, nr, buf);
    float *mx = j->maxp + item * (size_t)n;
    double *sm = j->want_mean ? j->sump + item * (size_t)n : NULL;
    for (int64_t c = 0; c < n; c++) mx[c] = 0.0f;
    if (sm)
        for (int64_t c = 0; c < n; c++) sm[c] = 0.0;
    for (int64_t r = 0; r < nr; r++) {
        const float *w = buf + r * n;
        for (int64_t k0 = 0; k0 < n; k0 += j->gs) {
            int64_t k1 = k0 + j->gs < n ? k0 + j->gs : n;
            float am = 0.0f;
            for (int64_t c = k0; c < k1; c++) {
                float a = fabsf(w[c]);
                if (a > am) am = a;
                if (a > mx[c]) mx[c] = a;
            }
            if (sm) {
                double inv = 1.0 / ((double)am + 1e-6);
                for (int64_t c = k0; c < k1; c++) sm[c] += (double)fabsf(w[c]) * inv;
            }
        }
    }
    free(buf);
}

static int lin_stats(const dsq_linear *l, int64_t gs, float *wmax, double *wsum, dsq_pool *pool)
{
    const int64_t n = l->in;
    size_t nb = (size_t)((l->out + ROW_BLOCK - 1) / ROW_BLOCK);
    wstat_job j = { l, gs > 0 ? gs : n, wsum != NULL, malloc(nb * (size_t)n * sizeof(float)),
                    wsum ? malloc(nb * (size_t)n * sizeof(double)) : NULL, 0 };
    if (!j.maxp || (wsum && !j.sump)) {
        free(j.maxp);
        free(j.sump);
        return DSQ_ERR_NOMEM;
    }
    dsq_pool_run(pool, nb, wstat_task, &j);
    if (!j.nomem)
        for (size_t b = 0; b < nb; b++)   /* fixed block order: deterministic */
            for (int64_t c = 0; c < n; c++) {
                float v = j.maxp[b * (size_t)n + c];
                if (v > wmax[c]) wmax[c] = v;
                if (wsum) wsum[c] += j.sump[b * (size_t)n + c];
            }
    free(j.maxp);
    free(j.sump);
    return j.nomem ? DSQ_ERR_NOMEM : DSQ_OK;
}

int dsq_group_weight_stats(const dsq_scale_group *g, int with_passive, int32_t awq_group_size, float *wmax,
                           float *wmean, dsq_pool *pool, dsq_diag *d)
{
    const int64_t n = g->n;
    double *sum = wmean ? calloc((size_t)n, sizeof *sum) : NULL;
    if (wmean && !sum) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, g->prev, -1, "out of memory");
    for (int64_t c = 0; c < n; c++) wmax[c] = 0.0f;
    int64_t rows = 0;
    int rc = DSQ_OK;
    for (int i = 0; i < g->nlin && rc == DSQ_OK; i++) {
        rc = lin_stats(g->lin[i], awq_group_size, wmax, sum, pool);
        rows += g->lin[i]->out;
    }
    for (int i = 0; with_passive && i < g->npassive && rc == DSQ_OK; i++)
        rc = lin_stats(g->passive[i], 0, wmax, NULL, pool);
    if (rc == DSQ_OK && wmean)
        for (int64_t c = 0; c < n; c++) wmean[c] = rows ? (float)(sum[c] / (double)rows) : 0.0f;
    free(sum);
    if (rc < 0) return dsq_fail(d, rc, NULL, g->prev, -1, "out of memory for weight statistics");
    for (int64_t c = 0; c < n; c++)
        if (!isfinite(wmax[c]) || (wmean && !isfinite(wmean[c])))
            return dsq_fail(d, DSQ_ERR_NONFINITE, NULL, g->prev, -1, "group weights hold non-finite values");
    return DSQ_OK;
}

/* ---- candidates ------------------------------------------------------------ */

void dsq_search_candidate(int kind, const float *xstat, const float *wstat, int64_t n, double ratio, float *s)
{
    if (kind == DSQ_SEARCH_SMOOTH) {
        dsq_smooth_scales(xstat, wstat, n, (float)ratio, s);
    } else {
        for (int64_t j = 0; j < n; j++) {
            double v = pow((double)xstat[j], ratio) / (pow((double)wstat[j], 1.0 - ratio) + 1e-4);
            s[j] = (float)(v > 1e-4 ? v : 1e-4);
        }
    }
    dsq_scales_normalize(s, xstat, n);
}

int dsq_awq_clip_allowed(const char *t)
{
    static const char *const no[] = { "q_", "k_", "query", "key", "Wqkv" };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        if (strstr(t, no[i])) return 0;
    return 1;
}

/* ---- search ------------------------------------------------------------------ */

typedef dsq_awq_cons cons;

static int is_float(const dsq_scheme *sc)
{
    return !sc || sc->id == DSQ_SCHEME_F32 || sc->id == DSQ_SCHEME_BF16;
}

static int resolve(const dsq_search_opts *o, const dsq_linear *l, const dsq_act_stats *site, cons *c, dsq_diag *d)
{
    memset(c, 0, sizeof *c);
    c->l = l;
    c->site = site;
    const dsq_scheme *sc = NULL;
    int32_t gs = DSQ_GROUP_DEFAULT;
    if (o->target) DSQ_TRY(o->target(o->target_ctx, l->name, l->out, l->in, &sc, &gs));
    if (is_float(sc)) return DSQ_OK;
    int rc = dsq_qshape_init(&c->shape, sc, l->out, l->in, gs);
    if (rc == DSQ_OK) rc = sc->blob_size(&c->shape, &c->blob_size);
    if (rc < 0) return dsq_fail(d, rc, NULL, l->name, -1, "scheme %s cannot hold this tensor", sc->name);
    c->sc = sc;
    c->range_search = o->range_search;
    return DSQ_OK;
}

/* y [T][rows] = x [T][cols] * W^T for float W */
void dsq_awq_sgemm_nt(const float *x, int64_t T, const float *w, int64_t rows, int64_t cols, float *y)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)rows, (int)cols, 1.0f, x, (int)cols, w,
                (int)cols, 0.0f, y, (int)rows);
}

/* The consumer's output for candidate s (NULL = 1): quantize W s, run the
 * scheme's gemm on xs = x / s. */
int dsq_awq_run_quant(const cons *c, const float *w, const float *s, const float *xs, int64_t T, uint8_t *blob,
                     float *y, dsq_pool *pool, dsq_diag *d)
{
    dsq_qparams qp;
    dsq_qparams_init(&qp);
    qp.in_scale = s;
    qp.range_search = c->range_search;
    if (c->sc->act == DSQ_ACT_INT8_STATIC) {
        if (!c->site || c->site->count == 0)
            return dsq_fail(d, DSQ_ERR_DATA, NULL, c->l->name, -1, "no activation range for static quantization");
        qp.act_min = c->site->vmin;
        qp.act_max = c->site->vmax;
    }
    memset(blob, 0, c->blob_size);
    DSQ_TRY(dsq_quantize_tensor(c->sc, w, &c->shape, &qp, blob, pool, d));
    dsq_qview v;
    DSQ_TRY(dsq_qview_init(&v, c->sc, &c->shape, blob, c->blob_size, d));
    int rc = c->sc->gemm(&v, xs, T, y, pool, NULL, 0);
    if (rc < 0) return dsq_fail(d, rc, NULL, c->l->name, -1, "gemm failed in the scale search");
    return DSQ_OK;
}


int dsq_clip_check(const dsq_linear *l, const dsq_scheme *sc, int32_t gs, const float *in_scale,
                   const float *importance, int search, const dsq_act_stats *site, dsq_pool *pool, int *use_clip, double *err0,
                   double *err1, dsq_diag *d)
{
    *use_clip = 1;
    if (err0) *err0 = -1.0;
    if (err1) *err1 = -1.0;
    if (!site || site->sample_n == 0 || site->in != l->in || is_float(sc)) return DSQ_OK;
    cons c;
    memset(&c, 0, sizeof c);
    c.l = l;
    c.sc = sc;
    c.site = site;
    int rc = dsq_qshape_init(&c.shape, sc, l->out, l->in, gs);
    if (rc == DSQ_OK) rc = sc->blob_size(&c.shape, &c.blob_size);
    if (rc < 0) return dsq_fail(d, rc, NULL, l->name, -1, "scheme %s cannot hold this tensor", sc->name);
    const int64_t T = site->sample_n, n = l->in;
    float *w = dsq_awq_deq_f32(l, pool), *xs = malloc((size_t)T * (size_t)n * sizeof *xs);
    float *yref = malloc((size_t)T * (size_t)l->out * sizeof *yref), *y = malloc((size_t)T * (size_t)l->out * sizeof *y);
    uint8_t *blob = malloc(c.blob_size);
    double e[2] = { 0.0, 0.0 };
    if (!w || !xs || !yref || !y || !blob) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, l->name, -1, "out of memory");
    if (rc == DSQ_OK) {
        dsq_awq_sgemm_nt(site->sample, T, w, l->out, n, yref);
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < n; j++)
                xs[t * n + j] = in_scale ? site->sample[t * n + j] / in_scale[j] : site->sample[t * n + j];
    }
    for (int clip = 0; clip < 2 && rc == DSQ_OK; clip++) {
        dsq_qparams qp;
        dsq_qparams_init(&qp);
        qp.in_scale = in_scale;
        qp.importance = importance;
        qp.clip_search = clip;
        qp.range_search = search;
        memset(blob, 0, c.blob_size);
        rc = dsq_quantize_tensor(sc, w, &c.shape, &qp, blob, pool, d);
        dsq_qview v;
        if (rc == DSQ_OK) rc = dsq_qview_init(&v, sc, &c.shape, blob, c.blob_size, d);
        if (rc == DSQ_OK) rc = sc->gemm(&v, xs, T, y, pool, NULL, 0);
        if (rc == DSQ_OK) e[clip] = dsq_awq_sqdiff(y, yref, (size_t)T * (size_t)l->out) / ((double)T * (double)l->out);
    }
    if (rc == DSQ_OK) {
        *use_clip = e[1] < e[0];
        if (err0) *err0 = e[0];
        if (err1) *err1 = e[1];
    }
    free(w);
    free(xs);
    free(yref);
    free(y);
    free(blob);
    return rc;
}

double dsq_awq_sqdiff(const float *a, const float *b, size_t n)
{
    double e = 0.0;
    for (size_t i = 0; i < n; i++) {
        double t = (double)a[i] - (double)b[i];
        e += t * t;
    }
    return e;
}

typedef struct unit {
    const float *x;        /* [T][n] sampled rows */
    int64_t T;
    cons *c;               /* consumers of this unit */
    int nc;
    const dsq_linear *down;/* MLP units: the float down projection */
    /* MoE block units: row t's output, times tw[t] (NULL: 1), is added to
     * row tok[t] of the block outputs instead of being scored alone */
    const int64_t *tok;
    const float *tw;
} unit;

/* ydst[tok[t]] += tw[t] * y[t] over T rows of H */
static void scatter_add(const unit *u, const float *y, int64_t H, float *ydst)
{
    for (int64_t t = 0; t < u->T; t++) {
        float a = u->tw ? u->tw[t] : 1.0f;
        float *d = ydst + u->tok[t] * H;
        const float *x = y + t * H;
        for (int64_t j = 0; j < H; j++) d[j] += a * x[j];
    }
}

/* Accumulate loss[cand] over one unit; *elems += output elements per candidate. */
static int unit_losses(const unit *u, int64_t n, float *const *cand, int C, double *loss, double *elems,
                       float *const *yacc, float *yacc_ref, dsq_pool *pool, dsq_diag *d)
{
    const int64_t T = u->T;
    int rc = DSQ_OK;
    float **w = calloc((size_t)u->nc, sizeof *w), **yref = calloc((size_t)u->nc, sizeof *yref);
    float *xs = malloc((size_t)T * (size_t)n * sizeof *xs), *wd = NULL, *yd = NULL, *ydref = NULL, *y = NULL;
    uint8_t *blob = NULL;
    size_t maxblob = 0;
    int64_t maxout = 0;
    if (!w || !yref || !xs) rc = DSQ_ERR_NOMEM;
    for (int i = 0; i < u->nc && rc == DSQ_OK; i++) {
        const dsq_linear *l = u->c[i].l;
        if (u->c[i].blob_size > maxblob) maxblob = u->c[i].blob_size;
        if (l->out > maxout) maxout = l->out;
        w[i] = dsq_awq_deq_f32(l, pool);
        yref[i] = malloc((size_t)T * (size_t)l->out * sizeof(float));
        if (!w[i] || !yref[i]) rc = DSQ_ERR_NOMEM;
        else dsq_awq_sgemm_nt(u->x, T, w[i], l->out, n, yref[i]);
    }
    if (rc == DSQ_OK) {
        blob = maxblob ? malloc(maxblob) : NULL;
        y = malloc((size_t)T * (size_t)maxout * sizeof *y);
        if ((maxblob && !blob) || !y) rc = DSQ_ERR_NOMEM;
    }
    if (rc == DSQ_OK && u->down) {
        /* reference MLP output: down(silu(g) * u) */
        const int64_t F = u->down->in, H = u->down->out;
        wd = dsq_awq_deq_f32(u->down, pool);
        yd = malloc((size_t)T * (size_t)H * sizeof *yd);
        ydref = malloc((size_t)T * (size_t)H * sizeof *ydref);
        float *h = malloc((size_t)T * (size_t)F * sizeof *h);
        if (!wd || !yd || !ydref || !h) rc = DSQ_ERR_NOMEM;
        if (rc == DSQ_OK) {
            memcpy(h, yref[0], (size_t)T * (size_t)F * sizeof *h);
            dsq_silu_mul(h, yref[1], (size_t)T * (size_t)F);
            dsq_awq_sgemm_nt(h, T, wd, H, F, ydref);
            if (u->tok) scatter_add(u, ydref, H, yacc_ref);
        }
        free(h);
    }
    if (rc < 0) rc = dsq_fail(d, rc, NULL, u->c[0].l->name, -1, "out of memory in the scale search");
    /* MLP units need both gate and up outputs per candidate */
    float *yg = NULL, *yu = NULL;
    if (rc == DSQ_OK && u->down) {
        yg = malloc((size_t)T * (size_t)u->c[0].l->out * sizeof *yg);
        yu = malloc((size_t)T * (size_t)u->c[1].l->out * sizeof *yu);
        if (!yg || !yu) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory in the scale search");
    }
    for (int c = 0; c < C && rc == DSQ_OK; c++) {
        const float *s = c == 0 ? NULL : cand[c];
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < n; j++) xs[t * n + j] = s ? u->x[t * n + j] / s[j] : u->x[t * n + j];
        if (!u->down) {
            for (int i = 0; i < u->nc && rc == DSQ_OK; i++) {
                if (!u->c[i].sc) continue;   /* float consumer: exact */
                rc = dsq_awq_run_quant(&u->c[i], w[i], s, xs, T, blob, y, pool, d);
                if (rc == DSQ_OK) loss[c] += dsq_awq_sqdiff(y, yref[i], (size_t)T * (size_t)u->c[i].l->out);
                if (c == 0 && rc == DSQ_OK) *elems += (double)T * (double)u->c[i].l->out;
            }
            continue;
        }
        const int64_t F = u->c[0].l->out, H = u->down->out;
        for (int i = 0; i < 2 && rc == DSQ_OK; i++) {
            float *dst = i == 0 ? yg : yu;
            if (u->c[i].sc) rc = dsq_awq_run_quant(&u->c[i], w[i], s, xs, T, blob, dst, pool, d);
            else memcpy(dst, yref[i], (size_t)T * (size_t)F * sizeof *dst);
        }
        if (rc < 0) break;
        dsq_silu_mul(yg, yu, (size_t)T * (size_t)F);
        dsq_awq_sgemm_nt(yg, T, wd, H, F, yd);
        if (u->tok) {   /* scored on the whole block by the caller */
            scatter_add(u, yd, H, yacc[c]);
            continue;
        }
        loss[c] += dsq_awq_sqdiff(yd, ydref, (size_t)T * (size_t)H);
        if (c == 0) *elems += (double)T * (double)H;
    }
    for (int i = 0; i < u->nc; i++) {
        if (w) free(w[i]);
        if (yref) free(yref[i]);
    }
    free(w);
    free(yref);
    free(xs);
    free(wd);
    free(yd);
    free(ydref);
    free(y);
    free(yg);
    free(yu);
    free(blob);
    return rc;
}

/* Consumers of g with their target schemes; *nq = how many are quantized,
 * *awq_gs = the first quantized one's group size (w_mean's groups). */
static int resolve_group(const dsq_scale_group *g, const dsq_layer_stats *ls, const dsq_act_stats *site,
                         const dsq_search_opts *o, cons **out, int *nq, int32_t *awq_gs, dsq_diag *d)
{
    *nq = 0;
    *awq_gs = 0;
    cons *cs = calloc((size_t)g->nlin, sizeof *cs);
    if (!cs) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, g->prev, -1, "out of memory");
    int rc = DSQ_OK;
    for (int i = 0; i < g->nlin && rc == DSQ_OK; i++) {
        const dsq_act_stats *st = site;
        if (g->loss != DSQ_LOSS_LINEARS) {   /* consumers are gate/up pairs of g->mlp[i / 2] */
            char sn[512];
            st = dsq_layer_stats_find(ls, dsq_calib_site_of(g->mlp[i / 2]->gate.name, 1, sn, sizeof sn));
        }
        rc = resolve(o, g->lin[i], st, &cs[i], d);
        if (rc == DSQ_OK && cs[i].sc) {
            if (!*nq) *awq_gs = cs[i].shape.group_size;
            (*nq)++;
        }
    }
    if (rc < 0) {
        free(cs);
        return rc;
    }
    *out = cs;
    return DSQ_OK;
}

/* The MoE block's output error per candidate (awq.h, MOE): the router
 * site's sampled tokens X [T][n], routed by the float router (the passive
 * consumer: it reads x / s with weights * s, so routing does not depend on
 * the candidate); each routed expert is a unit over its tokens with their
 * router weights, the shared experts over all tokens; outputs are summed
 * into [T][H] per candidate and compared with the float block. Memory: the
 * C + 1 block outputs, (C + 1) x T x H floats (21 x 512 x 7168 x 4 bytes =
 * 308 MB at 671B with the default 512 tokens). */
static int moe_losses(const dsq_scale_group *g, const dsq_act_stats *site, cons *cs, const dsq_search_opts *o,
                      float *const *cand, int C, double *loss, double *elems, int64_t *rows, dsq_diag *d)
{
    const int64_t T = site->sample_n, n = g->n, E = g->route.n_experts, K = g->route.top_k;
    const int64_t H = g->mlp[0]->down.out;
    int rc = DSQ_OK;
    float *lg = malloc((size_t)(T * E) * sizeof *lg), *scratch = malloc(2 * (size_t)E * sizeof *scratch);
    int *idx = malloc((size_t)(T * K) * sizeof *idx);
    float *wt = malloc((size_t)(T * K) * sizeof *wt), *xe = malloc((size_t)(T * n) * sizeof *xe);
    float *ew = malloc((size_t)T * sizeof *ew), *yref = calloc((size_t)(T * H), sizeof *yref);
    float *ybuf = calloc((size_t)C * (size_t)(T * H), sizeof *ybuf);
    float **yc = malloc((size_t)C * sizeof *yc);
    int64_t *tok = malloc((size_t)T * sizeof *tok), *all = malloc((size_t)T * sizeof *all);
    if (!lg || !scratch || !idx || !wt || !xe || !ew || !yref || !ybuf || !yc || !tok || !all)
        rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, g->prev, -1, "out of memory for the MoE block loss");
    if (rc == DSQ_OK) {
        for (int c = 0; c < C; c++) yc[c] = ybuf + (size_t)c * (size_t)(T * H);
        for (int64_t t = 0; t < T; t++) all[t] = t;
        rc = g->router->w.scheme->gemm(&g->router->w, site->sample, T, lg, o->pool, NULL, 0);
        if (rc < 0) rc = dsq_fail(d, rc, NULL, g->router->name, -1, "router gemm failed in the scale search");
    }
    for (int64_t t = 0; t < T && rc == DSQ_OK; t++) dsq_route(&g->route, lg + t * E, scratch, idx + t * K, wt + t * K);
    for (int k = 0; k < g->nmlp && rc == DSQ_OK; k++) {
        if (o->cancel && *o->cancel) {
            rc = dsq_fail(d, DSQ_ERR_INTERRUPTED, NULL, g->prev, -1, "scale search interrupted");
            break;
        }
        const int e = g->mlp_expert[k];
        unit u = { site->sample, T, &cs[2 * k], 2, &g->mlp[k]->down, all, NULL };
        if (g->mlp[k]->down.out != H) rc = dsq_fail(d, DSQ_ERR_SHAPE, NULL, g->prev, -1, "MoE widths differ");
        if (e >= 0 && rc == DSQ_OK) {   /* a routed expert: its tokens, weighted */
            int64_t te = 0;
            for (int64_t t = 0; t < T; t++)
                for (int64_t j = 0; j < K; j++)
                    if (idx[t * K + j] == e) {
                        memcpy(xe + te * n, site->sample + t * n, (size_t)n * sizeof *xe);
                        tok[te] = t;
                        ew[te++] = wt[t * K + j];
                    }
            if (te == 0) continue;
            u = (unit){ xe, te, &cs[2 * k], 2, &g->mlp[k]->down, tok, ew };
        }
        double el = 0.0;
        if (rc == DSQ_OK) rc = unit_losses(&u, n, cand, C, loss, &el, yc, yref, o->pool, d);
    }
    if (rc == DSQ_OK) {
        for (int c = 0; c < C; c++) loss[c] += dsq_awq_sqdiff(yc[c], yref, (size_t)(T * H));
        *elems = (double)T * (double)H;
        *rows = T;
    }
    free(lg);
    free(scratch);
    free(idx);
    free(wt);
    free(xe);
    free(ew);
    free(yref);
    free(ybuf);
    free(yc);
    free(tok);
    free(all);
    return rc;
}

/* loss[c] = summed squared error of candidate c over the group's units (the
 * whole group, or one per MLP with its own sampled rows); *elems = output
 * elements per candidate, *rows = sampled rows used. */
static int group_losses(const dsq_scale_group *g, const dsq_act_stats *site, cons *cs,
                        const dsq_search_opts *o, float *const *cand, int C, double *loss, double *elems,
                        int64_t *rows, dsq_diag *d)
{
    if (g->loss == DSQ_LOSS_MOE && g->router && site->sample_n > 0)
        return moe_losses(g, site, cs, o, cand, C, loss, elems, rows, d);
    if (o->attn_block && g->attn_model && g->nlin == 2 && site->seq_n > 0 && site->seq_len > 0)
        return dsq_awq_attn_losses(g, site, cs, o, cand, C, loss, elems, rows, d);
    unit *units = calloc((size_t)(g->nmlp > 0 ? g->nmlp : 1), sizeof *units);
    if (!units) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, g->prev, -1, "out of memory");
    int nu = 0, rc = DSQ_OK;
    *rows = 0;
    *elems = 0.0;
    if (g->loss == DSQ_LOSS_LINEARS) {
        if (site->sample_n > 0) {
            units[0] = (unit){ site->sample, site->sample_n, cs, g->nlin, NULL };
            nu = 1;
            *rows = site->sample_n;
        }
    } else {
        for (int k = 0; k < g->nmlp; k++) {
            const dsq_act_stats *st = cs[2 * k].site;
            if (!st || st->sample_n == 0) continue;
            units[nu++] = (unit){ st->sample, st->sample_n, &cs[2 * k], 2, &g->mlp[k]->down };
            *rows += st->sample_n;
        }
    }
    for (int u = 0; u < nu && rc == DSQ_OK; u++) {
        if (o->cancel && *o->cancel) {
            rc = dsq_fail(d, DSQ_ERR_INTERRUPTED, NULL, g->prev, -1, "scale search interrupted");
            break;
        }
        rc = unit_losses(&units[u], g->n, cand, C, loss, elems, NULL, NULL, o->pool, d);
    }
    free(units);
    return rc;
}

int dsq_scale_eval(const dsq_scale_group *g, const dsq_layer_stats *ls, const dsq_search_opts *o, const float *s,
                   double *loss_identity, double *loss_s, int64_t *rows, dsq_diag *d)
{
    *loss_identity = *loss_s = -1.0;
    *rows = 0;
    const dsq_act_stats *site = dsq_layer_stats_find(ls, g->site);
    if (!site || site->count == 0) return DSQ_OK;
    cons *cs = NULL;
    int nq;
    int32_t awq_gs;
    int rc = resolve_group(g, ls, site, o, &cs, &nq, &awq_gs, d);
    if (rc < 0 || nq == 0) {
        free(cs);
        return rc;
    }
    float *one = malloc((size_t)g->n * sizeof *one);
    if (!one) {
        free(cs);
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, g->prev, -1, "out of memory");
    }
    for (int64_t j = 0; j < g->n; j++) one[j] = 1.0f;
    float *cand[2] = { one, (float *)s };
    double loss[2] = { 0.0, 0.0 }, elems = 0.0;
    rc = group_losses(g, site, cs, o, cand, 2, loss, &elems, rows, d);
    if (rc == DSQ_OK && elems > 0) {
        *loss_identity = loss[0] / elems;
        *loss_s = loss[1] / elems;
    }
    free(one);
    free(cs);
    return rc;
}

/* FLEX: stage 1 over alpha (beta = 1 - alpha), stage 2 over beta at the best
 * alpha (awq.h). */
static int flex_search(const dsq_scale_group *g, const dsq_layer_stats *ls, const dsq_act_stats *site,
                       const dsq_search_opts *o, float *s, dsq_search_report *rep, dsq_diag *d)
{
    const int64_t n = g->n;
    cons *cs = NULL;
    int nq;
    int32_t awq_gs;
    int rc = resolve_group(g, ls, site, o, &cs, &nq, &awq_gs, d);
    rep->quantized = nq;
    if (rc < 0 || nq == 0) {
        free(cs);
        return rc;
    }
    const int G = o->n_grid > 0 ? o->n_grid : DSQ_AWQ_GRID_DEFAULT;
    const int C = G + 2;   /* s = 1, then G + 1 grid points per stage */
    float *xs = malloc((size_t)n * sizeof *xs), *ws = malloc((size_t)n * sizeof *ws);
    float *cbuf = malloc((size_t)C * (size_t)n * sizeof *cbuf), *best_s = malloc((size_t)n * sizeof *best_s);
    float **cand = malloc((size_t)C * sizeof *cand);
    double *loss = calloc((size_t)C, sizeof *loss);
    if (!xs || !ws || !cbuf || !best_s || !cand || !loss)
        rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, g->prev, -1, "out of memory");
    if (rc == DSQ_OK) rc = dsq_group_weight_stats(g, 1, awq_gs, ws, NULL, o->pool, d);
    double elems = 0.0, loss_id = 0.0, loss_best = 0.0;
    int64_t rows = 0;
    int best_idx = -1;
    float alpha = 0.0f, beta = 0.0f;
    for (int stage = 0; stage < 2 && rc == DSQ_OK; stage++) {
        for (int64_t j = 0; j < n; j++) xs[j] = site->absmax[j];
        for (int c = 0; c < C; c++) {
            cand[c] = cbuf + (size_t)c * (size_t)n;
            if (c == 0) {
                for (int64_t j = 0; j < n; j++) cand[c][j] = 1.0f;
                continue;
            }
            float a = stage == 0 ? (float)(c - 1) / (float)G : alpha;
            float b = stage == 0 ? 1.0f - a : (float)(c - 1) / (float)G;
            dsq_flex_scales(xs, ws, n, a, b, cand[c]);
            dsq_scales_normalize(cand[c], xs, n);
        }
        memset(loss, 0, (size_t)C * sizeof *loss);   /* group_losses accumulates */
        elems = 0.0;
        rows = 0;
        rc = group_losses(g, site, cs, o, cand, C, loss, &elems, &rows, d);
        if (rc != DSQ_OK || rows <= 0 || !(elems > 0)) break;
        int b = 1;
        for (int c = 2; c < C; c++)
            if (loss[c] <= loss[b]) b = c;   /* ties to the later grid value */
        if (stage == 0) {
            loss_id = loss[0];
            alpha = (float)(b - 1) / (float)G;
            beta = 1.0f - alpha;
            loss_best = loss[b];
            best_idx = b - 1;
            memcpy(best_s, cand[b], (size_t)n * sizeof *best_s);
        } else if (loss[b] <= loss_best) {
            beta = (float)(b - 1) / (float)G;
            loss_best = loss[b];
            best_idx = G + 1 + (b - 1);
            memcpy(best_s, cand[b], (size_t)n * sizeof *best_s);
        }
    }
    if (rc == DSQ_OK && rows > 0 && elems > 0) {
        if (loss_id < loss_best) {   /* s = 1 beats every grid point */
            loss_best = loss_id;
            best_idx = -1;
            alpha = beta = 0.0f;
            for (int64_t j = 0; j < n; j++) best_s[j] = 1.0f;
        }
        rep->loss_identity = loss_id / elems;
        rep->loss_best = loss_best / elems;
        rep->best = best_idx;
        rep->alpha = alpha;
        rep->beta = beta;
        rep->rows = rows;
        memcpy(s, best_s, (size_t)n * sizeof *s);
        if (!dsq_scales_ok(s, n)) rc = dsq_fail(d, DSQ_ERR_INTERNAL, NULL, g->prev, -1, "search produced a bad scale");
    }
    free(cs);
    free(xs);
    free(ws);
    free(cbuf);
    free(best_s);
    free(cand);
    free(loss);
    return rc;
}

int dsq_scale_search(const dsq_scale_group *g, const dsq_layer_stats *ls, const dsq_search_opts *o, float *s,
                     dsq_search_report *rep, dsq_diag *d)
{
    const int64_t n = g->n;
    memset(rep, 0, sizeof *rep);
    rep->best = -1;
    for (int64_t j = 0; j < n; j++) s[j] = 1.0f;
    const dsq_act_stats *site = dsq_layer_stats_find(ls, g->site);
    if (!site || site->count == 0 || (o->kind != DSQ_SEARCH_AWQ && o->kind != DSQ_SEARCH_SMOOTH &&
                                      o->kind != DSQ_SEARCH_BOTH && o->kind != DSQ_SEARCH_FLEX))
        return DSQ_OK;
    if (o->kind == DSQ_SEARCH_FLEX) return flex_search(g, ls, site, o, s, rep, d);

    /* consumers with their target schemes */
    cons *cs = NULL;
    int nq;
    int32_t awq_gs;   /* w_mean's groups: the first target's */
    int rc = resolve_group(g, ls, site, o, &cs, &nq, &awq_gs, d);
    rep->quantized = nq;
    if (rc < 0 || nq == 0) {
        free(cs);
        return rc;
    }

    /* candidates: 0 is s = 1, then the grid(s) */
    const int G = o->n_grid > 0 ? o->n_grid : DSQ_AWQ_GRID_DEFAULT;
    const int both = o->kind == DSQ_SEARCH_BOTH, C = (both ? 2 * G : G) + 1;
    float *xs = malloc((size_t)n * sizeof *xs), *ws = malloc((size_t)n * sizeof *ws);
    float *xm = malloc((size_t)n * sizeof *xm);
    float *wm = malloc((size_t)n * sizeof *wm), *cbuf = malloc((size_t)C * (size_t)n * sizeof *cbuf);
    float **cand = malloc((size_t)C * sizeof *cand);
    double *loss = calloc((size_t)C, sizeof *loss);
    if (!xs || !ws || !wm || !xm || !cbuf || !cand || !loss)
        rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, g->prev, -1, "out of memory");
    /* max|W| (SmoothQuant, with the passive router) / w_mean (AWQ, consumers only) */
    if (rc == DSQ_OK)
        rc = dsq_group_weight_stats(g, o->kind != DSQ_SEARCH_AWQ, awq_gs, ws, o->kind != DSQ_SEARCH_SMOOTH ? wm : NULL,
                                    o->pool, d);
    if (rc == DSQ_OK) {
        for (int64_t j = 0; j < n; j++) {
            xs[j] = site->absmax[j];
            xm[j] = (float)dsq_act_stats_mean_abs(site, j);
        }
        for (int c = 0; c < C; c++) {
            cand[c] = cbuf + (size_t)c * (size_t)n;
            int k = c - 1, smooth = o->kind == DSQ_SEARCH_SMOOTH || (both && k < G);
            if (c == 0) {
                for (int64_t j = 0; j < n; j++) cand[c][j] = 1.0f;
            } else if (smooth) {
                dsq_search_candidate(DSQ_SEARCH_SMOOTH, xs, ws, n, (double)(k % G) / G, cand[c]);
            } else {
                dsq_search_candidate(DSQ_SEARCH_AWQ, xm, wm, n, (double)(k % G) / G, cand[c]);
            }
        }
    }
    double elems = 0.0;
    int64_t rows = 0;
    if (rc == DSQ_OK) rc = group_losses(g, site, cs, o, cand, C, loss, &elems, &rows, d);
    if (rc == DSQ_OK && rows > 0 && elems > 0) {
        int best = 0;
        for (int c = 1; c < C; c++)
            if (loss[c] < loss[best]) best = c;
        rep->loss_identity = loss[0] / elems;
        rep->loss_best = loss[best] / elems;
        rep->best = best - 1;
        rep->rows = rows;
        memcpy(s, cand[best], (size_t)n * sizeof *s);
        if (!dsq_scales_ok(s, n)) rc = dsq_fail(d, DSQ_ERR_INTERNAL, NULL, g->prev, -1, "search produced a bad scale");
    }
    free(cs);
    free(xs);
    free(xm);
    free(ws);
    free(wm);
    free(cbuf);
    free(cand);
    free(loss);
    return rc;
}
