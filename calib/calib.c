/* calib.c - the calibration driver (see calib.h). */
#include "calib.h"
#include "gptq.h"
#include "sens.h"
#include "dsq_file.h"
#include "dsq_json.h"
#include "smooth.h"
#include "stats.h"
#include "stats_file.h"
#include "model_tokenizer.h"
#include "tokenizer.h"

#include <cblas.h>
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

void dsq_calib_opts_init(dsq_calib_opts *o)
{
    memset(o, 0, sizeof *o);
    dsq_calib_data_opts_init(&o->data);
    o->scheme = "awq-w4a16";
    o->group_size = DSQ_GROUP_DEFAULT;
    o->alpha = DSQ_SMOOTH_ALPHA_DEFAULT;
    o->smooth = 1;
    o->clip = 1;
    o->gptq_damp = DSQ_GPTQ_DAMP;
    o->min_expert_tokens = DSQ_CALIB_MIN_EXPERT_TOKENS;
    o->n_grid = DSQ_AWQ_GRID_DEFAULT;
    o->awq_tokens = DSQ_CALIB_AWQ_TOKENS;
    o->awq_expert_tokens = DSQ_CALIB_AWQ_EXPERT_TOKENS;
    o->awq_attn_seqs = -1;
    o->awq_attn_seqlen = 512;
    o->ram_limit = 2ull << 30;
    o->stop_after_layer = -1;
}

/* ==== result ============================================================= */

struct dsq_calib_result {
    dsq_calib_tensor *e;
    size_t n, cap;
    int64_t *hash;              /* open addressing over e[], -1 empty */
    size_t hcap;
    void **blocks;              /* owned allocations (scales, names) */
    size_t nb, cb;
    char **fb_name, **fb_reason;
    size_t nfb, cfb;
    int n_layers;
    uint64_t **cov;             /* [layer] routed tokens per expert */
    int *cov_n;
    dsq_calib_totals tot;
    char *info;                 /* summary JSON pieces known up front */
    /* AWQ clip choices (one byte per 128 weights, ~5.2 GB at 671B) live in
     * an unlinked temporary file, mapped read-only once the run ends: the
     * pages are file-backed, so the kernel can drop them and RAM stays
     * bounded while the converter reads them tensor by tensor. */
    int clip_fd1;               /* file descriptor + 1 (0: none yet) */
    uint64_t clip_used;
    int64_t *clip_off;          /* [entry] byte offset in the file, -1 none */
    size_t clip_noff;
    uint8_t *clip_map;
    size_t clip_maplen;
    size_t *rb;                 /* --rollback: entry indices, most sensitive first */
    size_t nrb;
    size_t sens_missing;        /* quantized linears whose sensitivity is unknown */
};

static void *own(dsq_calib_result *r, size_t bytes)
{
    if (r->nb == r->cb) {
        size_t nc = r->cb ? r->cb * 2 : 256;
        void **nv = realloc(r->blocks, nc * sizeof *nv);
        if (!nv) return NULL;
        r->blocks = nv;
        r->cb = nc;
    }
    void *p = calloc(1, bytes ? bytes : 1);
    if (p) r->blocks[r->nb++] = p;
    return p;
}

static char *own_str(dsq_calib_result *r, const char *s)
{
    char *p = own(r, strlen(s) + 1);
    if (p) memcpy(p, s, strlen(s) + 1);
    return p;
}

static uint64_t hname(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
    return h;
}

const dsq_calib_tensor *dsq_calib_lookup(const dsq_calib_result *r, const char *name)
{
    if (!r || !r->hcap || !name) return NULL;
    for (uint64_t h = hname(name);; h++) {
        int64_t i = r->hash[h & (r->hcap - 1)];
        if (i < 0) return NULL;
        if (strcmp(r->e[i].name, name) == 0) return &r->e[i];
    }
}

static int rehash(dsq_calib_result *r, size_t ncap)
{
    int64_t *nh = malloc(ncap * sizeof *nh);
    if (!nh) return DSQ_ERR_NOMEM;
    for (size_t i = 0; i < ncap; i++) nh[i] = -1;
    for (size_t k = 0; k < r->n; k++)
        for (uint64_t h = hname(r->e[k].name);; h++)
            if (nh[h & (ncap - 1)] < 0) {
                nh[h & (ncap - 1)] = (int64_t)k;
                break;
            }
    free(r->hash);
    r->hash = nh;
    r->hcap = ncap;
    return DSQ_OK;
}

/* Find or create the entry of name; shapes must agree. */
static int entry(dsq_calib_result *r, const char *name, int64_t rows, int64_t cols, dsq_calib_tensor **out,
                 dsq_diag *d)
{
    dsq_calib_tensor *t = (dsq_calib_tensor *)dsq_calib_lookup(r, name);
    if (t) {
        if (t->rows != rows || t->cols != cols)
            return dsq_fail(d, DSQ_ERR_INTERNAL, NULL, name, -1, "calibration entry shape mismatch");
        *out = t;
        return DSQ_OK;
    }
    if (r->n == r->cap) {
        size_t nc = r->cap ? r->cap * 2 : 256;
        dsq_calib_tensor *nv = realloc(r->e, nc * sizeof *nv);
        if (!nv) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        r->e = nv;
        r->cap = nc;
    }
    if ((r->n + 1) * 2 > r->hcap && rehash(r, r->hcap ? r->hcap * 2 : 512) < 0)
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    t = &r->e[r->n];
    memset(t, 0, sizeof *t);
    t->name = own_str(r, name);
    if (!t->name) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    t->rows = rows;
    t->cols = cols;
    t->status = DSQ_CALIB_CALIBRATED;
    t->sensitivity = -1.0;
    for (uint64_t h = hname(name);; h++)
        if (r->hash[h & (r->hcap - 1)] < 0) {
            r->hash[h & (r->hcap - 1)] = (int64_t)r->n;
            break;
        }
    r->n++;
    *out = t;
    return DSQ_OK;
}

void dsq_calib_result_free(dsq_calib_result *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->nb; i++) free(r->blocks[i]);
    free(r->blocks);
    free(r->e);
    free(r->hash);
    for (size_t i = 0; i < r->nfb; i++) {
        free(r->fb_name[i]);
        free(r->fb_reason[i]);
    }
    free(r->fb_name);
    free(r->fb_reason);
    if (r->clip_map) munmap(r->clip_map, r->clip_maplen);
    if (r->clip_fd1 > 0) close(r->clip_fd1 - 1);
    free(r->clip_off);
    free(r->rb);
    for (int l = 0; l < r->n_layers && r->cov; l++) free(r->cov[l]);
    free(r->cov);
    free(r->cov_n);
    free(r->info);
    free(r);
}

size_t dsq_calib_fallback_count(const dsq_calib_result *r) { return r ? r->nfb : 0; }

const char *dsq_calib_fallback(const dsq_calib_result *r, size_t i, const char **reason)
{
    if (!r || i >= r->nfb) return NULL;
    if (reason) *reason = r->fb_reason[i];
    return r->fb_name[i];
}

size_t dsq_calib_rollback_count(const dsq_calib_result *r) { return r ? r->nrb : 0; }

const char *dsq_calib_rollback(const dsq_calib_result *r, size_t i, double *sensitivity)
{
    if (!r || i >= r->nrb) return NULL;
    if (sensitivity) *sensitivity = r->e[r->rb[i]].sensitivity;
    return r->e[r->rb[i]].name;
}

int dsq_calib_coverage(const dsq_calib_result *r, int layer, const uint64_t **tokens, int *n)
{
    *tokens = NULL;
    *n = 0;
    if (!r || layer < 0 || layer >= r->n_layers) return DSQ_ERR_INVALID_ARG;
    *tokens = r->cov[layer];
    *n = r->cov_n[layer];
    return DSQ_OK;
}

void dsq_calib_get_totals(const dsq_calib_result *r, dsq_calib_totals *t)
{
    *t = r->tot;
    t->tensors = r->n;
    t->fallback_experts = r->nfb;
}

int dsq_calib_apply_rows(const dsq_calib_tensor *t, int64_t row0, int64_t nrows, int64_t cols, float *w)
{
    if (!t || row0 < 0 || nrows < 0 || cols < 1) return DSQ_ERR_INVALID_ARG;
    if (t->cols == 0) {   /* 1-D: flat elements */
        if ((row0 + nrows) * cols > t->rows) return DSQ_ERR_SHAPE;
        if (t->row_scale)
            for (int64_t k = 0; k < nrows * cols; k++) w[k] *= t->row_scale[row0 * cols + k];
        return DSQ_OK;
    }
    if (cols != t->cols || row0 + nrows > t->rows) return DSQ_ERR_SHAPE;
    for (int64_t i = 0; i < nrows; i++) {
        float *row = w + i * cols;
        if (t->row_scale) {
            float rs = t->row_scale[row0 + i];
            if (rs != 1.0f)
                for (int64_t j = 0; j < cols; j++) row[j] *= rs;
        }
        if (t->in_scale)
            for (int64_t j = 0; j < cols; j++) row[j] *= t->in_scale[j];
        if (t->clip_idx) {
            int64_t g = t->clip_gs > 0 && t->clip_gs < cols ? t->clip_gs : cols;
            dsq_awq_clip_apply(row, 1, cols, t->clip_gs, t->clip_idx + (row0 + i) * ((cols + g - 1) / g));
        }
    }
    return DSQ_OK;
}

void dsq_calib_qparams(const dsq_calib_tensor *t, dsq_qparams *qp)
{
    if (!t) return;
    qp->importance = t->importance;
    if (t->clip) qp->clip_search = 1;
    if (!qp->range_search) qp->range_search = t->range_search;
    if (t->has_act_static) {
        qp->has_act_static = 1;
        qp->act_scale = t->act_scale;
        qp->act_offset = t->act_offset;
    }
}

/* The int4 group-parameter search (qsearch.c) of the quantizations that
 * calibration runs and of the calibrated tensors' final one: the user's
 * choice (--search / --no-search), else off with GPTQ and for w4a8, else the
 * quantizer's default (scheme.h dsq_qsearch_mode: off for awq-w4a16).
 * Measured on mid-dsv3 (2026-11-26, README "Searched group parameters"): it
 * raised KLD 1-7% under GPTQ's error feedback and 3-4% after w4a8's
 * smoothing (level on tiny-dsv3), so those stay min/max even if the
 * quantizer's default changes. */
static int calib_search(const dsq_calib_opts *o, const dsq_scheme *sc)
{
    if (o->range_search) return o->range_search;
    return o->gptq || (sc && sc->id == DSQ_SCHEME_W4A8) ? -1 : 0;
}

/* ==== run context ======================================================== */

typedef struct run {
    const dsq_calib_opts *o;
    dsq_calib_result *r;
    dsq_model *m;
    const dsq_model_config *cfg;
    const dsq_scheme *scheme;     /* opts.scheme */
    int flavor;
    int moe_all;                  /* statistics came from every token through every expert */
    dsq_stats_writer *w;          /* fresh statistics go here (save_stats) */
    dsq_stats_reader *rd;         /* --stats */
    dsq_calib_progress_fn progress;
    void *pctx;
    const volatile int *cancel;
    double t0;
    int n_samples;
    /* the data the statistics came from (this run's, or the --stats file's) */
    char *data_file;
    int data_samples, data_seqlen;
    uint64_t data_seed;
    dsq_diag *d;
    dsq_gptq_hset hs;             /* --gptq: this layer's X^T X per non-expert site */
    dsq_gptq_moe moe;             /* --gptq: the layer's MoE input rows + routing */
} run;

/* Whole sequences kept for the attention block loss (calib.h awq_attn_seqs) */
static int attn_seqs(const run *c)
{
    if (c->o->awq_attn_seqs >= 0) return c->o->awq_attn_seqs;
    return c->flavor == DSQ_GROUPS_AWQ ? DSQ_CALIB_AWQ_ATTN_SEQS : 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void report(run *c, int layer, int sample, const char *phase)
{
    if (!c->progress) return;
    dsq_calib_progress p = { layer, c->cfg ? (int)c->cfg->num_hidden_layers : 0, sample, c->n_samples, phase,
                             now_s() - c->t0 };
    c->progress(c->pctx, &p);
}

static int is_float(const dsq_scheme *sc) { return !sc || sc->id == DSQ_SCHEME_F32 || sc->id == DSQ_SCHEME_BF16; }

/* Default target: opts.scheme for every linear but the MoE router. */
static int default_target(void *ctx, const char *t, int64_t rows, int64_t cols, const dsq_scheme **sc,
                          int32_t *gs)
{
    run *c = ctx;
    (void)rows;
    (void)cols;
    size_t n = strlen(t), k = strlen(".mlp.gate.weight");
    *sc = n >= k && strcmp(t + n - k, ".mlp.gate.weight") == 0 ? NULL : c->scheme;
    *gs = c->o->group_size;
    return DSQ_OK;
}

static int target_of(run *c, const dsq_linear *l, const dsq_scheme **sc, int32_t *gs)
{
    *sc = NULL;
    *gs = DSQ_GROUP_DEFAULT;
    int rc = c->o->target ? c->o->target(c->o->target_ctx, l->name, l->out, l->in, sc, gs)
                          : default_target(c, l->name, l->out, l->in, sc, gs);
    if (rc < 0) return dsq_fail(c->d, rc, NULL, l->name, -1, "cannot decide the tensor's scheme");
    if (is_float(*sc)) *sc = NULL;
    return DSQ_OK;
}

static int search_target(void *ctx, const char *t, int64_t rows, int64_t cols, const dsq_scheme **sc, int32_t *gs)
{
    run *c = ctx;
    return c->o->target ? c->o->target(c->o->target_ctx, t, rows, cols, sc, gs)
                        : default_target(c, t, rows, cols, sc, gs);
}

/* ==== per-group decisions ================================================ */

/* M_SMOOTH_SEARCH: w4a8, both grids; M_SMOOTH_SEARCH_W8: w8a8-dynamic, the
 * SmoothQuant alpha grid only (int8 weights leave AWQ's salient-channel
 * scaling little to protect; the activation side is what smoothing fixes). */
enum { M_NONE = 0, M_AWQ = 1, M_SMOOTH_SEARCH = 2, M_SMOOTH_FIXED = 3, M_SMOOTH_SEARCH_W8 = 4 };

static int group_method(run *c, const dsq_scale_group *g, int *method)
{
    int awq = 0, w4a8 = 0, w8s = 0, w8d = 0;
    for (int i = 0; i < g->nlin; i++) {
        const dsq_scheme *sc;
        int32_t gs;
        DSQ_TRY(target_of(c, g->lin[i], &sc, &gs));
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
    if ((*method != M_AWQ || c->o->gptq) && !c->o->smooth) *method = M_NONE;   /* awq: GPTQ alone */
    return DSQ_OK;
}

static int expert_fallback(const run *c, const dsq_layer_stats *ls, int e)
{
    return e >= 0 && e < ls->n_experts && !c->moe_all && ls->expert_tokens[e] < (uint64_t)c->o->min_expert_tokens;
}

static int combine(dsq_calib_result *r, const float **slot, const float *v, int64_t n)
{
    if (!*slot) {
        *slot = v;
        return DSQ_OK;
    }
    float *p = own(r, (size_t)n * sizeof *p);
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
static int apply_group(run *c, const dsq_scale_group *g, const float *s)
{
    dsq_calib_result *r = c->r;
    const int64_t n = g->n;
    float *sv = own(r, (size_t)n * sizeof *sv);
    if (!sv) return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    memcpy(sv, s, (size_t)n * sizeof *sv);
    dsq_calib_tensor *t;
    int rc;
    if (!g->prev_lin) {
        float *inv = own(r, (size_t)n * sizeof *inv);
        if (!inv) return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        for (int64_t j = 0; j < n; j++) inv[j] = 1.0f / sv[j];
        DSQ_TRY(entry(r, g->prev, n, 0, &t, c->d));
        rc = combine(r, &t->row_scale, inv, n);
    } else {
        const dsq_linear *p = g->prev_lin;
        float *rv = own(r, (size_t)p->out * sizeof *rv);
        if (!rv) return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        for (int64_t i = 0; i < p->out; i++) rv[i] = 1.0f;
        for (int64_t j = 0; j < n; j++) rv[(j / g->rb) * g->rs + g->ro + j % g->rb] = 1.0f / sv[j];
        DSQ_TRY(entry(r, p->name, p->out, p->in, &t, c->d));
        rc = combine(r, &t->row_scale, rv, p->out);
        if (rc == DSQ_OK && p->bias) {
            char bn[400];
            bias_name(p->name, bn, sizeof bn);
            DSQ_TRY(entry(r, bn, p->out, 0, &t, c->d));
            rc = combine(r, &t->row_scale, rv, p->out);
        }
    }
    for (int i = 0; i < g->nlin + g->npassive && rc == DSQ_OK; i++) {
        const dsq_linear *l = i < g->nlin ? g->lin[i] : g->passive[i - g->nlin];
        DSQ_TRY(entry(r, l->name, l->out, l->in, &t, c->d));
        rc = combine(r, &t->in_scale, sv, n);
    }
    if (rc < 0) return dsq_fail(c->d, rc, NULL, g->prev, -1, "out of memory");
    return DSQ_OK;
}

/* ==== per-linear entries ================================================= */

typedef void (*lin_fn)(void *ctx, const dsq_linear *l);

static void each_linear(const dsq_layer *ly, int n_experts, lin_fn fn, void *ctx)
{
    const dsq_linear *one[] = { &ly->q, &ly->k, &ly->v, &ly->q_a, &ly->q_b, &ly->kv_a, &ly->kv_b, &ly->o };
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++)
        if (one[i]->name) fn(ctx, one[i]);
    const dsq_mlp *mlps[2] = { &ly->mlp, ly->has_shared ? &ly->shared : NULL };
    if (ly->is_moe && ly->router.name) fn(ctx, &ly->router);
    for (int e = -2; e < (ly->is_moe ? n_experts : 0); e++) {
        const dsq_mlp *x = e == -2 ? mlps[0] : e == -1 ? mlps[1] : &ly->experts[e];
        if (!x) continue;
        if (x->gate.name) fn(ctx, &x->gate);
        if (x->up.name) fn(ctx, &x->up);
        if (x->down.name) fn(ctx, &x->down);
    }
}

/* One GPTQ solve of a fresh run, queued while the layer's entries are made
 * (the scales, clip and importance it uses are final by then). */
typedef struct gjob {
    const dsq_linear *l;
    size_t ti;              /* its entry's index: entries made later in the layer may move r->e */
    dsq_calib_tensor *t;    /* &r->e[ti], set by gptq_phase once the layer's entries are all made */
    const dsq_scheme *sc;
    dsq_qshape sh;
    uint8_t *blob;          /* owned by the result */
    size_t bs;
    const char *name;       /* its statistics-file entry */
    const char *site;       /* its input site */
    int done, rtn;          /* solved (blob valid); factorization fell back to RTN */
} gjob;

typedef struct lin_ctx {
    run *c;
    const dsq_layer_stats *ls;
    const dsq_layer *ly;
    float *dmin, *dmax;     /* union of calibrated expert down ranges (w8a8 fallback) */
    uint8_t *fb_done;       /* [n_experts] fallback already listed */
    int fresh;              /* token samples available: check clipping on outputs */
    uint8_t *clipv;         /* per linear in each_linear order: 0/1 clip decision, 255 n/a */
    size_t nclip, capclip;
    uint8_t decision;       /* of the linear being processed */
    const uint8_t *clip_in; /* decisions read back (statistics file), or NULL */
    size_t nclip_in;
    gjob *jobs;             /* --gptq, fresh: the layer's solves (gptq_phase) */
    size_t njobs, capjobs;
    int rc;
} lin_ctx;

static int add_fallback(run *c, int layer, int e, uint64_t tokens)
{
    dsq_calib_result *r = c->r;
    if (r->nfb == r->cfb) {
        size_t nc = r->cfb ? r->cfb * 2 : 16;
        char **a = realloc(r->fb_name, nc * sizeof *a);
        if (!a) return DSQ_ERR_NOMEM;
        r->fb_name = a;
        char **b = realloc(r->fb_reason, nc * sizeof *b);
        if (!b) return DSQ_ERR_NOMEM;
        r->fb_reason = b;
        r->cfb = nc;
    }
    char nb[96], rb[160];
    snprintf(nb, sizeof nb, "model.layers.%d.mlp.experts.%d", layer, e);
    snprintf(rb, sizeof rb, "%llu calibration tokens (< %d): round-to-nearest", (unsigned long long)tokens,
             c->o->min_expert_tokens);
    r->fb_name[r->nfb] = strdup(nb);
    r->fb_reason[r->nfb] = strdup(rb);
    if (!r->fb_name[r->nfb] || !r->fb_reason[r->nfb]) {
        free(r->fb_name[r->nfb]);
        free(r->fb_reason[r->nfb]);
        return DSQ_ERR_NOMEM;
    }
    r->nfb++;
    return DSQ_OK;
}

/* The w8a8 range of an expert input without its own statistics: the router
 * site (post_attention_layernorm output over all tokens) for gate/up, the
 * union of calibrated experts' down inputs for down. */
static int fallback_range(lin_ctx *x, const dsq_linear *l, const float **mn, const float **mx)
{
    run *c = x->c;
    size_t k = strlen(l->name);
    if (k > 16 && strcmp(l->name + k - 16, "down_proj.weight") == 0) {
        if (!x->dmin) {
            x->dmin = own(c->r, (size_t)l->in * sizeof(float));
            x->dmax = own(c->r, (size_t)l->in * sizeof(float));
            if (!x->dmin || !x->dmax) return DSQ_ERR_NOMEM;
            int any = 0;
            for (int i = 0; i < x->ls->nsites; i++) {
                const dsq_act_stats *s = &x->ls->sites[i];
                int e = dsq_calib_expert_of(s->name);
                size_t sn = strlen(s->name);
                if (s->count == 0 || s->in != l->in || sn < 16 || strcmp(s->name + sn - 16, "down_proj.weight") ||
                    (e >= 0 && expert_fallback(c, x->ls, e)))
                    continue;
                for (int64_t j = 0; j < l->in; j++) {
                    if (!any || s->vmin[j] < x->dmin[j]) x->dmin[j] = s->vmin[j];
                    if (!any || s->vmax[j] > x->dmax[j]) x->dmax[j] = s->vmax[j];
                }
                any = 1;
            }
            if (!any) return DSQ_ERR_DATA;
        }
        *mn = x->dmin;
        *mx = x->dmax;
        return DSQ_OK;
    }
    char rs[400];
    snprintf(rs, sizeof rs, "model.layers.%d.mlp.gate.weight", x->ls->layer);
    const dsq_act_stats *s = dsq_layer_stats_find(x->ls, rs);
    if (!s || s->count == 0 || s->in != l->in) return DSQ_ERR_DATA;
    *mn = s->vmin;
    *mx = s->vmax;
    return DSQ_OK;
}

static int gptq_entry(lin_ctx *x, const dsq_linear *l, dsq_calib_tensor *t, const dsq_scheme *sc, int32_t gs,
                      const char *site);
/* Append a tensor's clip choices to the result's file (see the struct). */
static int clip_store(run *c, const dsq_calib_tensor *t, const uint8_t *idx, size_t n)
{
    dsq_calib_result *r = c->r;
    const size_t k = (size_t)(t - r->e);
    if (r->clip_fd1 <= 0) {
        const char *tmp = getenv("TMPDIR");
        char tpl[4096];
        snprintf(tpl, sizeof tpl, "%s/dsq-clip-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        int fd = mkstemp(tpl);
        if (fd < 0) return dsq_fail_errno(c->d, errno, "$TMPDIR", "cannot create the clip file");
        unlink(tpl);   /* anonymous: gone when closed */
        r->clip_fd1 = fd + 1;
    }
    if (k >= r->clip_noff) {
        size_t nc = r->cap > k + 1 ? r->cap : k + 1;
        int64_t *nv = realloc(r->clip_off, nc * sizeof *nv);
        if (!nv) return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        for (size_t i = r->clip_noff; i < nc; i++) nv[i] = -1;
        r->clip_off = nv;
        r->clip_noff = nc;
    }
    for (size_t done = 0; done < n;) {
        ssize_t w = pwrite(r->clip_fd1 - 1, idx + done, n - done, (off_t)(r->clip_used + done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return dsq_fail_errno(c->d, w < 0 ? errno : ENOSPC, "$TMPDIR", "cannot write the clip file");
        done += (size_t)w;
    }
    r->clip_off[k] = (int64_t)r->clip_used;
    r->clip_used += n;
    return DSQ_OK;
}

/* End of the run: map the clip file and point the entries into it. */
static int clip_map(run *c)
{
    dsq_calib_result *r = c->r;
    if (!r->clip_used) return DSQ_OK;
    void *p = mmap(NULL, (size_t)r->clip_used, PROT_READ, MAP_SHARED, r->clip_fd1 - 1, 0);
    if (p == MAP_FAILED) return dsq_fail_errno(c->d, errno, "$TMPDIR", "cannot map the clip file");
    r->clip_map = p;
    r->clip_maplen = (size_t)r->clip_used;
    close(r->clip_fd1 - 1);
    r->clip_fd1 = 0;
    for (size_t i = 0; i < r->n && i < r->clip_noff; i++)
        if (r->clip_off[i] >= 0) r->e[i].clip_idx = r->clip_map + r->clip_off[i];
    return DSQ_OK;
}

/* An optional statistics entry of this run (--stats file or checkpoint):
 * its error goes to *tmp, so an absent one (DSQ_ERR_NOT_FOUND) is no error. */
static int stats_try(run *c, const char *name, void **buf, size_t *n, dsq_diag *tmp)
{
    dsq_diag_clear(tmp);
    return c->rd ? dsq_stats_reader_get(c->rd, name, buf, n, NULL, tmp)
                 : dsq_stats_writer_get(c->w, name, buf, n, NULL, tmp);
}

/* AWQ clip on X^T X (awq.h): searched now (fresh statistics with X^T X
 * blocks) or read back from the statistics ("clipidx"); *done = 0 leaves the
 * tensor to the older diagonal-proxy path (groups that do not fit a block,
 * statistics without X^T X or without the entry). */
static int clip_cov(lin_ctx *x, const dsq_linear *l, const dsq_scheme *sc, int32_t gs, const dsq_act_stats *site,
                    dsq_calib_tensor *t, int *done)
{
    run *c = x->c;
    *done = 0;
    dsq_qshape sh;
    dsq_qlayout L;
    if (dsq_qshape_init(&sh, sc, l->out, l->in, gs) < 0 || dsq_qlayout_get(sc, &sh, &L) < 0 ||
        !dsq_awq_clip_supported(l->in, (int32_t)L.gsize))
        return DSQ_OK;
    const size_t n = (size_t)l->out * (size_t)L.ngroups;
    char name[512];
    dsq_stats_name(name, sizeof name, x->ls->layer, "clipidx", l->name);
    uint8_t *idx = NULL;
    int rc = DSQ_OK;
    if (x->fresh) {
        if (!site->cov) return DSQ_OK;
        idx = malloc(n);
        float *w = malloc((size_t)l->out * (size_t)l->in * sizeof *w);
        if (!idx || !w) {
            free(w);
            free(idx);
            return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, l->name, -1, "out of memory for the clip search");
        }
        l->w.scheme->dequantize(&l->w, 0, l->out, w);
        rc = dsq_calib_apply_rows(t, 0, l->out, l->in, w);   /* the weights the converter will see */
        if (rc == DSQ_OK) rc = dsq_awq_clip_search(w, l->out, l->in, (int32_t)L.gsize, t->in_scale, site,
                                                   calib_search(c->o, sc), t->importance, idx, NULL, NULL);
        free(w);
        if (rc < 0) rc = dsq_fail(c->d, rc, NULL, l->name, -1, "clip search failed (%s)", dsq_strerror(rc));
        if (rc == DSQ_OK && c->w) rc = dsq_stats_writer_put(c->w, name, idx, n, 1, 0, c->d);
    } else {
        void *buf = NULL;
        size_t nb = 0;
        dsq_diag tmp;   /* an absent entry is no error: that tensor keeps the older clip */
        int g = stats_try(c, name, &buf, &nb, &tmp);
        if (g == DSQ_ERR_NOT_FOUND) return DSQ_OK;
        if (g < 0) {   /* an unreadable file must not turn a resumed run into another result */
            if (c->d) *c->d = tmp;
            return g;
        }
        int bad = nb != n;
        for (size_t i = 0; i < nb && !bad; i++) bad = ((uint8_t *)buf)[i] >= DSQ_AWQ_CLIP_CANDIDATES;
        if (bad) {   /* hostile or foreign file */
            free(buf);
            return dsq_fail(c->d, DSQ_ERR_FORMAT, NULL, name, -1, "clip choices do not fit the tensor");
        }
        idx = buf;
    }
    if (rc == DSQ_OK) rc = clip_store(c, t, idx, n);   /* t->clip_idx points into it after the run */
    free(idx);
    if (rc < 0) return rc;
    t->clip_gs = (int32_t)L.gsize;
    *done = 1;
    return DSQ_OK;
}

/* A GPTQ blob (solved or read back) becomes the tensor's. */
static int gptq_keep(run *c, dsq_calib_tensor *t, const dsq_scheme *sc, const dsq_qshape *sh, uint8_t *blob,
                     size_t bs)
{
    t->gptq_blob = blob;
    t->gptq_blob_size = bs;
    t->gptq_scheme = sc->id;
    t->gptq_group = sh->group_size;
    c->r->tot.gptq_tensors++;
    return DSQ_OK;
}

static int linear_entry(lin_ctx *x, const dsq_linear *l)
{
    run *c = x->c;
    dsq_calib_result *r = c->r;
    const dsq_scheme *sc;
    int32_t gs;
    DSQ_TRY(target_of(c, l, &sc, &gs));
    dsq_calib_tensor *t = (dsq_calib_tensor *)dsq_calib_lookup(r, l->name);
    if (!sc) return DSQ_OK;   /* float: only the folded scales (if any) matter */
    if (!t) DSQ_TRY(entry(r, l->name, l->out, l->in, &t, c->d));
    char sn[400];
    const dsq_act_stats *site = dsq_layer_stats_find(x->ls, dsq_calib_site_of(l->name, c->cfg->q_lora_rank > 0, sn,
                                                                                sizeof sn));
    int e = dsq_calib_expert_of(l->name);
    int fb = expert_fallback(c, x->ls, e);
    int have = site && site->count > 0 && !fb;
    if (fb) {
        t->status = DSQ_CALIB_FALLBACK_RTN;
        t->reason = "expert saw too few calibration tokens";
        if (!x->fb_done[e]) {
            x->fb_done[e] = 1;
            if (add_fallback(c, x->ls->layer, e, x->ls->expert_tokens[e]) < 0)
                return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        }
    }
    if (have) t->range_search = calib_search(c->o, sc);   /* fallbacks keep RTN's default */
    int clip_scheme = sc->id == DSQ_SCHEME_AWQ_W4A16 || sc->id == DSQ_SCHEME_W4A8;
    if (clip_scheme && c->o->clip && have) {
        float *imp = own(r, (size_t)l->in * sizeof *imp);
        if (!imp) return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        for (int64_t j = 0; j < l->in; j++) {
            double v = dsq_act_stats_rms(site, j);
            if (t->in_scale) v /= t->in_scale[j];
            imp[j] = isfinite(v) && v >= 0.0 ? (float)v : 0.0f;
        }
        t->importance = imp;
        int use = sc->id == DSQ_SCHEME_W4A8 || dsq_awq_clip_allowed(l->name);
        int cov = 0;
        if (use && sc->id == DSQ_SCHEME_AWQ_W4A16) DSQ_TRY(clip_cov(x, l, sc, gs, site, t, &cov));
        if (cov) {
            use = 0;   /* the clip is in clip_idx, not a quantizer search */
            x->decision = 2;
        } else if (use && x->fresh) {
            DSQ_TRY(dsq_clip_check(l, sc, gs, t->in_scale, imp, calib_search(c->o, sc), site, dsq_model_pool(c->m), &use,
                                   NULL, NULL, c->d));
        } else if (use && x->clip_in && x->nclip < x->nclip_in && x->clip_in[x->nclip] <= 1) {
            use = x->clip_in[x->nclip];
        }
        t->clip = use;
        if (!cov) x->decision = (uint8_t)use;
    }
    if (sc->act == DSQ_ACT_INT8_STATIC) {
        const float *mn = NULL, *mx = NULL;
        if (have) {
            mn = site->vmin;
            mx = site->vmax;
        } else {
            int rc = fallback_range(x, l, &mn, &mx);
            if (rc == DSQ_ERR_NOMEM) return dsq_fail(c->d, rc, NULL, NULL, -1, "out of memory");
            if (rc < 0)
                return dsq_fail(c->d, DSQ_ERR_DATA, NULL, l->name, -1,
                                "no calibration range for static activation quantization (the input saw no tokens)");
            if (!fb) {
                t->status = DSQ_CALIB_FALLBACK_RTN;
                t->reason = "input saw no tokens: layer-wide activation range";
            }
        }
        if (dsq_smooth_act_static(mn, mx, t->in_scale, l->in, &t->act_scale, &t->act_offset) < 0)
            return dsq_fail(c->d, DSQ_ERR_NONFINITE, NULL, l->name, -1, "activation range is not finite");
        t->has_act_static = 1;
    }
    if (c->o->gptq && have && sc->has_scales && sc->weight_bits <= 8) DSQ_TRY(gptq_entry(x, l, t, sc, gs, sn));
    return DSQ_OK;
}

/* GPTQ of one linear (calib.h): fresh runs queue a job (solved by
 * gptq_phase once the layer's entries are made), later runs read the
 * checkpointed blob back. */
static int gptq_entry(lin_ctx *x, const dsq_linear *l, dsq_calib_tensor *t, const dsq_scheme *sc, int32_t gs,
                      const char *site)
{
    run *c = x->c;
    dsq_qshape sh;
    size_t bs;
    DSQ_TRY(dsq_qshape_init(&sh, sc, l->out, l->in, gs));
    DSQ_TRY(sc->blob_size(&sh, &bs));
    char name[600];
    dsq_stats_name(name, sizeof name, x->ls->layer, "gptq", l->name);
    uint8_t *blob = own(c->r, bs);
    if (!blob) return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    if (x->fresh) {
        if (x->njobs == x->capjobs) {
            size_t nc = x->capjobs ? x->capjobs * 2 : 64;
            gjob *nj = realloc(x->jobs, nc * sizeof *nj);
            if (!nj) return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
            x->jobs = nj;
            x->capjobs = nc;
        }
        gjob *j = &x->jobs[x->njobs];
        memset(j, 0, sizeof *j);
        j->l = l;
        j->ti = (size_t)(t - c->r->e);
        j->sc = sc;
        j->sh = sh;
        j->blob = blob;
        j->bs = bs;
        j->name = own_str(c->r, name);
        j->site = own_str(c->r, site);
        if (!j->name || !j->site) return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        x->njobs++;
        return DSQ_OK;
    }
    void *buf = NULL;
    size_t n = 0;
    int rc = c->rd ? dsq_stats_reader_get(c->rd, name, &buf, &n, NULL, c->d)
                   : dsq_stats_writer_get(c->w, name, &buf, &n, NULL, c->d);
    if (rc == DSQ_ERR_NOT_FOUND || (rc == DSQ_OK && n != bs)) {
        free(buf);
        dsq_diag_clear(c->d);
        return dsq_fail(c->d, DSQ_ERR_STATE, NULL, l->name, -1,
                        "the statistics file has no GPTQ result of this shape for this tensor "
                        "(made without --gptq or for another scheme): recompute it");
    }
    if (rc < 0) return rc;
    memcpy(blob, buf, bs);
    free(buf);
    dsq_qview v;   /* hostile file: the blob must be a valid one of this scheme and shape */
    DSQ_TRY(dsq_qview_init(&v, sc, &sh, blob, bs, c->d));
    return gptq_keep(c, t, sc, &sh, blob, bs);
}

/* ---- the parallel GPTQ phase (fresh runs) ------------------------------ */

/* Consecutive jobs with the same input site, width and folded in_scale share
 * one factor (gate/up of an expert, q_a/kv_a): they form one task, solved in
 * order by one thread. Tasks are independent, so the pool runs them in any
 * order and on any thread with the same bytes. */
static int same_factor(const gjob *a, const gjob *b)
{
    if (a->l->in != b->l->in || strcmp(a->site, b->site) != 0) return 0;
    if (!a->t->in_scale || !b->t->in_scale) return !a->t->in_scale && !b->t->in_scale;
    return !memcmp(a->t->in_scale, b->t->in_scale, (size_t)a->l->in * sizeof(float));
}

typedef struct gphase {
    run *c;
    const dsq_layer *ly;
    gjob *jobs;
    size_t *start;          /* task k: jobs [start[k], start[k + 1]) */
    size_t ntasks;
    _Atomic size_t next;    /* the next task a lane takes */
    _Atomic int stop;       /* a task failed: the lanes take no more */
    int *rc;                /* per task */
    dsq_diag *diag;         /* per task: dsq_diag is not shared between threads */
    uint64_t *bytes;        /* per task: its peak (task_bytes) */
    uint64_t budget, used;  /* ram_limit; held by running tasks (under mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
} gphase;

/* One task: its Hessian (copied from the collected ones, or built from the
 * expert's kept rows), its factor, then each job's solve + pack. The gate/up
 * gemms of a down Hessian run serially (pool NULL): the pool is busy with us. */
static int gptq_task(gphase *p, size_t k)
{
    run *c = p->c;
    dsq_diag *d = &p->diag[k];
    gjob *j0 = &p->jobs[p->start[k]];
    const dsq_linear *l0 = j0->l;
    size_t nh = (size_t)l0->in * (size_t)l0->in;
    int e = dsq_calib_expert_of(l0->name);
    int routed = e >= 0 && c->moe.idx;
    uint64_t rows = 0;
    const double *h0 = routed ? NULL : dsq_gptq_hset_find(&c->hs, j0->site, l0->in, &rows);
    if (!routed && (!h0 || rows == 0)) return DSQ_OK;   /* saw no tokens: RTN */
    double *h = malloc(nh * sizeof *h);
    if (!h) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, l0->name, -1, "out of memory for GPTQ");
    int rc = DSQ_OK;
    if (h0) memcpy(h, h0, nh * sizeof *h);
    else if (l0 == &p->ly->experts[e].down)
        rc = dsq_gptq_moe_hessian_down(&c->moe, e, &p->ly->experts[e].gate, &p->ly->experts[e].up, NULL, h, &rows);
    else rc = dsq_gptq_moe_hessian_in(&c->moe, e, h, &rows);
    if (rc < 0 || rows == 0) {
        free(h);
        return rc < 0 ? dsq_fail(d, rc, NULL, l0->name, -1, "cannot build the GPTQ Hessian") : DSQ_OK;
    }
    dsq_gptq_hess_scale(h, l0->in, j0->t->in_scale);
    dsq_gptq_factor f;
    rc = dsq_gptq_factor_init(&f, h, l0->in, c->o->gptq_damp, d);
    free(h);
    if (rc < 0) return dsq_fail(d, rc, NULL, l0->name, -1, "GPTQ failed");
    for (size_t i = p->start[k]; i < p->start[k + 1] && rc == DSQ_OK; i++) {
        gjob *j = &p->jobs[i];
        const dsq_linear *l = j->l;
        float *w = malloc((size_t)l->out * (size_t)l->in * sizeof *w);
        if (!w) {
            rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, l->name, -1, "out of memory for GPTQ");
            break;
        }
        l->w.scheme->dequantize(&l->w, 0, l->out, w);
        rc = dsq_calib_apply_rows(j->t, 0, l->out, l->in, w);
        dsq_gptq_opts go = { c->o->gptq_damp, 0, j->t->clip, j->t->importance, calib_search(c->o, j->sc) };
        dsq_qparams qp;
        dsq_qparams_init(&qp);
        dsq_calib_qparams(j->t, &qp);
        dsq_gptq_report rep;
        if (rc == DSQ_OK) rc = dsq_gptq_quantize_f(j->sc, &j->sh, w, &f, &go, &qp, j->blob, &rep, d);
        free(w);
        if (rc < 0) rc = dsq_fail(d, rc, NULL, l->name, -1, "GPTQ failed");
        else {
            j->done = 1;
            j->rtn = rep.rtn_fallback;
        }
    }
    dsq_gptq_factor_release(&f);
    return rc;
}

static void gptq_lane(void *ctx, size_t item, int tid)
{
    (void)item;
    (void)tid;
    gphase *p = ctx;
    for (;;) {
        if (atomic_load(&p->stop)) return;
        size_t k = atomic_fetch_add(&p->next, 1);
        if (k >= p->ntasks) return;
        /* memory: wait until the task fits the budget (alone it always runs) */
        pthread_mutex_lock(&p->mu);
        while (p->used > 0 && p->used + p->bytes[k] > p->budget) pthread_cond_wait(&p->cv, &p->mu);
        p->used += p->bytes[k];
        pthread_mutex_unlock(&p->mu);
        dsq_diag_clear(&p->diag[k]);
        p->rc[k] = gptq_task(p, k);
        pthread_mutex_lock(&p->mu);
        p->used -= p->bytes[k];
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        if (p->rc[k] < 0) atomic_store(&p->stop, 1);
    }
}

/* Bytes one task holds at its peak: its H (factored in place) and U (8 + 4
 * bytes per H element), the weights and their rounded copy, and the gather
 * buffers of a routed down Hessian. */
static uint64_t task_bytes(const run *c, const gphase *p, size_t k)
{
    uint64_t b = 0;
    for (size_t i = p->start[k]; i < p->start[k + 1]; i++) {
        const dsq_linear *l = p->jobs[i].l;
        uint64_t in = (uint64_t)l->in, out = (uint64_t)l->out;
        uint64_t v = 12 * in * in + 8 * out * in + DSQ_GPTQ_GATHER * 4 * ((uint64_t)c->moe.in + 2 * in);
        if (v > b) b = v;
    }
    return b;
}

static int gptq_phase(lin_ctx *x)
{
    run *c = x->c;
    gphase p;
    memset(&p, 0, sizeof p);
    p.c = c;
    p.ly = x->ly;
    p.jobs = x->jobs;
    for (size_t i = 0; i < x->njobs; i++) x->jobs[i].t = &c->r->e[x->jobs[i].ti];
    p.start = malloc((x->njobs + 1) * sizeof *p.start);
    if (!p.start) return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    for (size_t i = 0; i < x->njobs; i++)
        if (i == 0 || !same_factor(&x->jobs[i - 1], &x->jobs[i])) p.start[p.ntasks++] = i;
    p.start[p.ntasks] = x->njobs;
    p.rc = calloc(p.ntasks, sizeof *p.rc);
    p.diag = calloc(p.ntasks, sizeof *p.diag);
    p.bytes = calloc(p.ntasks, sizeof *p.bytes);
    if (!p.rc || !p.diag || !p.bytes) {
        free(p.start);
        free(p.rc);
        free(p.diag);
        free(p.bytes);
        return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    /* lanes: the pool's threads; running tasks together stay within
     * ram_limit (gptq_lane waits), so at most ram_limit / the smallest task */
    uint64_t small = UINT64_MAX;
    for (size_t k = 0; k < p.ntasks; k++) {
        p.bytes[k] = task_bytes(c, &p, k);
        if (p.bytes[k] < small) small = p.bytes[k];
    }
    p.budget = c->o->ram_limit;
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    dsq_pool *pool = dsq_model_pool(c->m);
    size_t lanes = (size_t)dsq_pool_size(pool), cap = (size_t)(p.budget / (small ? small : 1));
    if (lanes > cap) lanes = cap;
    if (lanes > p.ntasks) lanes = p.ntasks;
    if (lanes < 1) lanes = 1;
    if ((int)lanes > c->r->tot.gptq_lanes) c->r->tot.gptq_lanes = (int)lanes;
    /* potrf/potri results depend on OpenBLAS' own thread count: one per call */
    int obt = openblas_get_num_threads();
    openblas_set_num_threads(1);
    double t0 = now_s(), c0 = cpu_now_s();
    if (lanes == 1) gptq_lane(&p, 0, 0);
    else dsq_pool_run(pool, lanes, gptq_lane, &p);
    c->r->tot.seconds_gptq_solve += now_s() - t0;
    c->r->tot.cpu_gptq_solve += cpu_now_s() - c0;
    c->r->tot.seconds_gptq += now_s() - t0;
    openblas_set_num_threads(obt);
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv);
    int rc = DSQ_OK;
    for (size_t k = 0; k < p.ntasks && rc == DSQ_OK; k++)
        if (p.rc[k] < 0) {
            *c->d = p.diag[k];
            rc = p.rc[k];
        }
    /* checkpoint and keep in job order, on this thread */
    for (size_t i = 0; i < x->njobs && rc == DSQ_OK; i++) {
        gjob *j = &x->jobs[i];
        if (!j->done) continue;
        c->r->tot.gptq_rtn += (size_t)j->rtn;
        if (c->w) rc = dsq_stats_writer_put(c->w, j->name, j->blob, j->bs, 1, 0, c->d);
        if (rc == DSQ_OK) rc = gptq_keep(c, j->t, j->sc, &j->sh, j->blob, j->bs);
    }
    free(p.start);
    free(p.rc);
    free(p.diag);
    free(p.bytes);
    return rc;
}

static void lin_cb(void *ctx, const dsq_linear *l)
{
    lin_ctx *x = ctx;
    if (x->rc < 0) return;
    x->decision = 255;
    double t0 = now_s();
    x->rc = linear_entry(x, l);
    if (strstr(l->name, ".experts.") || strstr(l->name, ".shared_experts."))   /* the clip checks */
        x->c->r->tot.seconds_search_moe += now_s() - t0;
    if (x->rc == DSQ_OK && x->nclip == x->capclip) {
        size_t nc = x->capclip ? x->capclip * 2 : 256;
        uint8_t *nv = realloc(x->clipv, nc);
        if (!nv) {
            x->rc = dsq_fail(x->c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
            return;
        }
        x->clipv = nv;
        x->capclip = nc;
    }
    if (x->rc == DSQ_OK) x->clipv[x->nclip++] = x->decision;
}

/* --rollback: each quantized linear's sensitivity (sens.h), measured with
 * its final entry (scales, clip, GPTQ blob) on fresh samples and kept in the
 * statistics ("L<l>/sens/<tensor>", one double), or read back from them. */
static int sens_entry(lin_ctx *x, const dsq_linear *l)
{
    run *c = x->c;
    const dsq_scheme *sc;
    int32_t gs;
    DSQ_TRY(target_of(c, l, &sc, &gs));
    dsq_calib_tensor *t = (dsq_calib_tensor *)dsq_calib_lookup(c->r, l->name);
    char unit[512];
    /* routed experts are never rolled back (sens.h): not measured, which
     * would cost ~4x the rest of the layer at 256 experts */
    if (!sc || !t || t->cols == 0 || !sc->has_scales || !dsq_sens_unit(l->name, unit, sizeof unit)) return DSQ_OK;
    char name[512];
    dsq_stats_name(name, sizeof name, x->ls->layer, "sens", l->name);
    if (x->fresh) {
        char sn[400];
        const dsq_act_stats *site =
            dsq_layer_stats_find(x->ls, dsq_calib_site_of(l->name, c->cfg->q_lora_rank > 0, sn, sizeof sn));
        double v = -1.0;
        /* a fallback expert saw too few tokens to rank it */
        if (t->status == DSQ_CALIB_CALIBRATED)
            DSQ_TRY(dsq_linear_sensitivity(l, sc, gs, t, site, dsq_model_pool(c->m), &v, c->d));
        if (v < 0.0 && t->status == DSQ_CALIB_CALIBRATED)
            return dsq_fail(c->d, DSQ_ERR_DATA, NULL, l->name, -1,
                            "no sampled calibration rows to measure the sensitivity on (--calib-rows 0?)");
        t->sensitivity = v;
        return c->w ? dsq_stats_writer_put(c->w, name, &v, sizeof v, 8, 0, c->d) : DSQ_OK;
    }
    void *buf = NULL;
    size_t nb = 0;
    dsq_diag tmp;
    int g = stats_try(c, name, &buf, &nb, &tmp);
    if (g == DSQ_ERR_NOT_FOUND) {
        c->r->sens_missing++;
        return DSQ_OK;
    }
    if (g < 0) {
        if (c->d) *c->d = tmp;
        return g;
    }
    double v;
    int bad = nb != sizeof v;
    if (!bad) {
        memcpy(&v, buf, sizeof v);
        bad = !(v >= -1.0) || v > 1e30;   /* NaN, or not what sens_entry writes */
    }
    free(buf);
    if (bad) return dsq_fail(c->d, DSQ_ERR_FORMAT, NULL, name, -1, "sensitivity is not a finite number >= -1");
    t->sensitivity = v;
    return DSQ_OK;
}

static void sens_cb(void *ctx, const dsq_linear *l)
{
    lin_ctx *x = ctx;
    double t0 = now_s();
    if (x->rc == DSQ_OK) x->rc = sens_entry(x, l);
    double dt = now_s() - t0;
    x->c->r->tot.seconds_sens += dt;
    if (strstr(l->name, ".experts.") || strstr(l->name, ".shared_experts.")) x->c->r->tot.seconds_sens_moe += dt;
}

/* Mark the entries of the o->rollback most sensitive served modules
 * (sens.h dsq_sens_unit; calib.h rolled_back): they keep their folded
 * scales and lose everything that only a quantizer uses. */
static int pick_rollback(run *c)
{
    dsq_calib_result *r = c->r;
    if (r->sens_missing)
        return dsq_fail(c->d, DSQ_ERR_STATE, c->o->load_stats, NULL, -1,
                        "the statistics hold no sensitivities for %zu quantized linears (collected without "
                        "--rollback); calibrate again with --calib and --rollback",
                        r->sens_missing);
    const size_t n = r->n ? r->n : 1;
    double *sens = malloc(n * sizeof *sens);
    char **unit = calloc(n, sizeof *unit);
    size_t *of = malloc(n * sizeof *of), *top = malloc(n * sizeof *top), nu = 0, chosen = 0;
    r->rb = malloc(n * sizeof *r->rb);
    int rc = sens && unit && of && top && r->rb ? DSQ_OK : DSQ_ERR_NOMEM;
    /* units in first-seen order, each with its members' largest sensitivity */
    for (size_t i = 0; i < r->n && rc == DSQ_OK; i++) {
        char key[512];
        of[i] = (size_t)-1;
        if (!(r->e[i].sensitivity >= 0.0) || !dsq_sens_unit(r->e[i].name, key, sizeof key)) continue;
        size_t u = 0;
        while (u < nu && strcmp(unit[u], key)) u++;   /* non-expert modules: a few hundred */
        if (u == nu) {
            if (!(unit[nu] = strdup(key))) {
                rc = DSQ_ERR_NOMEM;
                break;
            }
            sens[nu++] = -1.0;
        }
        if (r->e[i].sensitivity > sens[u]) sens[u] = r->e[i].sensitivity;
        of[i] = u;
    }
    if (rc == DSQ_OK) dsq_sens_top(sens, (const char *const *)unit, nu, (size_t)c->o->rollback, top, &chosen);
    for (size_t k = 0; k < chosen; k++)
        for (size_t i = 0; i < r->n; i++) {
            if (of[i] != top[k]) continue;
            dsq_calib_tensor *t = &r->e[i];
            t->rolled_back = 1;
            t->importance = NULL;
            t->clip = 0;
            t->clip_idx = NULL;
            t->has_act_static = 0;
            if (t->gptq_blob) r->tot.gptq_tensors--;
            t->gptq_blob = NULL;
            t->gptq_blob_size = 0;
            r->rb[r->nrb++] = i;
        }
    for (size_t u = 0; u < nu; u++) free(unit[u]);
    free(unit);
    free(sens);
    free(of);
    free(top);
    if (rc < 0) return dsq_fail(c->d, rc, NULL, NULL, -1, "out of memory");
    return DSQ_OK;
}

/* ==== one layer ========================================================== */

static int read_scale(run *c, int layer, const dsq_scale_group *g, int kind, float *s)
{
    char name[512];
    dsq_stats_name(name, sizeof name, layer, "scale", g->prev);
    void *buf = NULL;
    size_t n = 0;
    uint32_t aux = 0;
    int rc = c->rd ? dsq_stats_reader_get(c->rd, name, &buf, &n, &aux, c->d)
                   : dsq_stats_writer_get(c->w, name, &buf, &n, &aux, c->d);
    if (rc == DSQ_ERR_NOT_FOUND)
        return dsq_fail(c->d, DSQ_ERR_STATE, c->rd ? dsq_stats_reader_path(c->rd) : NULL, name, -1,
                        "the statistics hold no searched scales for this group (they were collected for "
                        "another scheme); calibrate again with --calib");
    if (rc < 0) return rc;
    if (aux != (uint32_t)kind) rc = dsq_fail(c->d, DSQ_ERR_STATE, NULL, name, -1, "searched scales are of another kind");
    if (rc == DSQ_OK) rc = dsq_stats_decode_f32(buf, n, g->n, 1, name, s, c->d);
    free(buf);
    if (rc == DSQ_OK && !dsq_scales_ok(s, g->n))
        rc = dsq_fail(c->d, DSQ_ERR_FORMAT, NULL, name, -1, "scale out of range");
    /* the search's losses, for the summary (optional) */
    dsq_stats_name(name, sizeof name, layer, "loss", g->prev);
    buf = NULL;
    dsq_diag tmp;
    if (rc == DSQ_OK && stats_try(c, name, &buf, &n, &tmp) == DSQ_OK) {
        double loss[2];
        if (n == sizeof loss) {
            memcpy(loss, buf, sizeof loss);
            if (isfinite(loss[0]) && isfinite(loss[1])) {
                c->r->tot.loss_identity += loss[0];
                c->r->tot.loss_best += loss[1];
            }
        }
    }
    free(buf);
    return rc;
}

/* Decide and fold every group of a loaded layer; fresh: ls has token
 * samples and the searches run (results go to the writer), else searched
 * scales are read back. */
static int do_layer(run *c, int layer, const dsq_layer_stats *ls, int fresh)
{
    dsq_group_list gl;
    DSQ_TRY(dsq_groups_build(c->m, layer, c->flavor, &gl, c->d));
    int rc = DSQ_OK;
    float *s = NULL, *wmax = NULL;
    dsq_search_opts so = { 0, c->o->n_grid, search_target, c, dsq_model_pool(c->m), c->cancel,
                           attn_seqs(c) > 0, calib_search(c->o, c->scheme) };
    double ts = now_s();
    for (int i = 0; i < gl.n && rc == DSQ_OK; i++) {
        const dsq_scale_group *g = &gl.v[i];
        double tg = now_s();
        int moe = g->loss == DSQ_LOSS_MOE || g->expert >= 0 || (g->prev_lin && strstr(g->prev, ".shared_experts."));
        int method;
        rc = group_method(c, g, &method);
        if (rc < 0 || method == M_NONE) continue;
        const dsq_act_stats *site = dsq_layer_stats_find(ls, g->site);
        if (expert_fallback(c, ls, g->expert) || !site || site->count == 0) {
            c->r->tot.groups_identity++;
            continue;
        }
        float *ns = realloc(s, (size_t)g->n * sizeof *s), *nw = realloc(wmax, (size_t)g->n * sizeof *wmax);
        if (ns) s = ns;
        if (nw) wmax = nw;
        if (!ns || !nw) {
            rc = dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
            break;
        }
        if (method == M_SMOOTH_FIXED) {
            rc = dsq_group_weight_stats(g, 1, 0, wmax, NULL, so.pool, c->d);
            if (rc == DSQ_OK) dsq_smooth_scales(site->absmax, wmax, g->n, c->o->alpha, s);
            c->r->tot.groups_smoothed++;
        } else {
            int kind = method == M_AWQ ? DSQ_SEARCH_AWQ : method == M_SMOOTH_SEARCH_W8 ? DSQ_SEARCH_SMOOTH
                                                                                     : DSQ_SEARCH_BOTH;
            if (fresh) {
                dsq_search_report rep;
                so.kind = kind;
                report(c, layer, -1, "search");
                rc = dsq_scale_search(g, ls, &so, s, &rep, c->d);
                double loss[2] = { rep.loss_identity, rep.loss_best };
                if (rc == DSQ_OK && c->w) {
                    char name[512];
                    dsq_stats_name(name, sizeof name, layer, "scale", g->prev);
                    rc = dsq_stats_writer_put(c->w, name, s, (size_t)g->n * sizeof *s, 4, (uint32_t)kind, c->d);
                    dsq_stats_name(name, sizeof name, layer, "loss", g->prev);
                    if (rc == DSQ_OK) rc = dsq_stats_writer_put(c->w, name, loss, sizeof loss, 8, 0, c->d);
                }
                c->r->tot.loss_identity += loss[0];
                c->r->tot.loss_best += loss[1];
            } else {
                rc = read_scale(c, layer, g, kind, s);
            }
            c->r->tot.groups_searched++;
        }
        if (rc == DSQ_OK) rc = apply_group(c, g, s);
        if (moe) c->r->tot.seconds_search_moe += now_s() - tg;
    }
    free(s);
    free(wmax);
    if (rc == DSQ_OK) {
        /* per-linear entries; clipping decided on sampled outputs (fresh) or
         * read back with the statistics ("L<l>/clip", one byte per linear) */
        const dsq_layer *ly = &dsq_model_weights(c->m)->layers[layer];
        lin_ctx x;
        memset(&x, 0, sizeof x);
        x.c = c;
        x.ls = ls;
        x.ly = ly;
        x.fresh = fresh;
        x.fb_done = calloc((size_t)(ls->n_experts + 1), 1);
        char name[512];
        dsq_stats_name(name, sizeof name, layer, "clip", NULL);
        void *cin = NULL;
        size_t ncin = 0;
        if (!fresh) {
            dsq_diag tmp;
            if (stats_try(c, name, &cin, &ncin, &tmp) == DSQ_OK) {
                x.clip_in = cin;
                x.nclip_in = ncin;
            }
        }
        if (!x.fb_done) rc = dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        else each_linear(ly, ls->n_experts, lin_cb, &x);
        if (rc == DSQ_OK) rc = x.rc;
        if (rc == DSQ_OK && x.njobs) rc = gptq_phase(&x);
        if (rc == DSQ_OK && c->o->rollback > 0) {
            each_linear(ly, ls->n_experts, sens_cb, &x);
            rc = x.rc;
        }
        if (rc == DSQ_OK && fresh && c->w) rc = dsq_stats_writer_put(c->w, name, x.clipv, x.nclip, 1, 0, c->d);
        free(cin);
        free(x.clipv);
        free(x.fb_done);
        free(x.jobs);
    }
    c->r->tot.seconds_search += now_s() - ts;
    if (rc == DSQ_OK && ls->n_experts > 0) {
        uint64_t *cv = malloc((size_t)ls->n_experts * sizeof *cv);
        if (!cv) rc = dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        else {
            memcpy(cv, ls->expert_tokens, (size_t)ls->n_experts * sizeof *cv);
            free(c->r->cov[layer]);
            c->r->cov[layer] = cv;
            c->r->cov_n[layer] = ls->n_experts;
        }
    }
    c->r->tot.layers++;
    dsq_groups_release(&gl);
    return rc;
}

/* ==== statistics I/O ====================================================== */

static int write_layer_stats(run *c, const dsq_layer_stats *ls)
{
    char name[512];
    for (int i = 0; i < ls->nsites; i++) {
        uint8_t *b;
        size_t n;
        if (dsq_stats_encode_site(&ls->sites[i], &b, &n) < 0)
            return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        dsq_stats_name(name, sizeof name, ls->layer, "site", ls->sites[i].name);
        int rc = dsq_stats_writer_put(c->w, name, b, n, 1, 0, c->d);
        free(b);
        DSQ_TRY(rc);
    }
    if (ls->n_experts > 0) {
        dsq_stats_name(name, sizeof name, ls->layer, "experts", NULL);
        DSQ_TRY(dsq_stats_writer_put(c->w, name, ls->expert_tokens, (size_t)ls->n_experts * sizeof(uint64_t), 8, 0,
                                     c->d));
    }
    return DSQ_OK;
}

static int src_get(run *c, const char *name, void **buf, size_t *n)
{
    return c->rd ? dsq_stats_reader_get(c->rd, name, buf, n, NULL, c->d)
                 : dsq_stats_writer_get(c->w, name, buf, n, NULL, c->d);
}

typedef struct load_ctx {
    run *c;
    dsq_layer_stats *ls;
    int rc;
} load_ctx;

static void load_site_cb(void *ctx, const dsq_linear *l)
{
    load_ctx *x = ctx;
    if (x->rc < 0) return;
    run *c = x->c;
    char site[400], name[512];
    dsq_calib_site_of(l->name, c->cfg->q_lora_rank > 0, site, sizeof site);
    if (dsq_layer_stats_find(x->ls, site)) return;
    dsq_stats_name(name, sizeof name, x->ls->layer, "site", site);
    void *buf = NULL;
    size_t n = 0;
    dsq_diag tmp;
    int rc = stats_try(c, name, &buf, &n, &tmp);
    if (rc == DSQ_ERR_NOT_FOUND && dsq_calib_expert_of(l->name) >= 0) return; /* an expert that saw no token */
    if (rc < 0) {
        x->rc = dsq_fail(c->d, rc, tmp.path, name, tmp.offset, "%s", tmp.msg);
        return;
    }
    dsq_act_stats st;
    rc = dsq_stats_decode_site(buf, n, site, &st, c->d);
    free(buf);
    if (rc < 0) {
        x->rc = rc;
        return;
    }
    if (st.in != l->in) {   /* hostile or foreign file: never index past the model's width */
        x->rc = dsq_fail(c->d, DSQ_ERR_FORMAT, NULL, name, -1, "statistics have %lld channels, the model %lld",
                         (long long)st.in, (long long)l->in);
        dsq_act_stats_release(&st);
        return;
    }
    dsq_act_stats *dst;
    rc = dsq_layer_stats_get(x->ls, site, st.in, 0, 0, &dst);
    if (rc == DSQ_OK) rc = dsq_act_stats_merge(dst, &st);
    if (rc < 0) x->rc = dsq_fail(c->d, rc, NULL, name, -1, "statistics do not fit the model");
    dsq_act_stats_release(&st);
}

static int load_layer_stats(run *c, int layer, dsq_layer_stats *ls)
{
    const dsq_layer *ly = &dsq_model_weights(c->m)->layers[layer];
    load_ctx x = { c, ls, DSQ_OK };
    each_linear(ly, ls->n_experts, load_site_cb, &x);
    if (x.rc < 0) return x.rc;
    if (ls->n_experts > 0) {
        char name[512];
        dsq_stats_name(name, sizeof name, layer, "experts", NULL);
        void *buf = NULL;
        size_t n = 0;
        DSQ_TRY(src_get(c, name, &buf, &n));
        if (n != (size_t)ls->n_experts * sizeof(uint64_t)) {
            free(buf);
            return dsq_fail(c->d, DSQ_ERR_FORMAT, NULL, name, -1, "expert counts do not match the model");
        }
        memcpy(ls->expert_tokens, buf, n);
        free(buf);
    }
    return DSQ_OK;
}

static int n_experts_of(const run *c, int layer)
{
    return dsq_model_config_is_moe_layer(c->cfg, layer) ? (int)c->cfg->n_routed_experts : 0;
}

/* A layer whose statistics come from a file (--stats or the checkpoint). */
static int layer_from_file(run *c, int layer)
{
    report(c, layer, -1, "load");
    dsq_layer_stats ls;
    DSQ_TRY(dsq_layer_stats_init(&ls, layer, n_experts_of(c, layer)));
    int rc = dsq_model_layer_load(c->m, layer, c->d);
    if (rc == DSQ_OK) rc = load_layer_stats(c, layer, &ls);
    if (rc == DSQ_OK) rc = do_layer(c, layer, &ls, 0);
    dsq_model_layer_release(c->m, layer);
    dsq_layer_stats_release(&ls);
    return rc;
}

/* ==== fingerprint and metadata ============================================ */

static void hex(const uint8_t *h, char *out) { dsq_sha256_hex(h, out); }

static int fingerprint(run *c, const dsq_calib_data *cd, char *out)
{
    char cfg_hex[65], tok_hex[65], buf[2048];
    uint8_t h[DSQ_SHA256_LEN];
    DSQ_TRY(dsq_sha256_buf(c->cfg->raw_json ? c->cfg->raw_json : "", c->cfg->raw_len, h));
    hex(h, cfg_hex);
    hex(cd->sha256, tok_hex);
    const dsq_calib_opts *o = c->o;
    snprintf(buf, sizeof buf,
             "dsq-calib-v1|cfg=%s|tok=%s|n=%d|L=%d|all=%d|min=%d|scheme=%s|gs=%d|grid=%d|cap=%d,%d|seed=%llu|"
             "target=%s|smooth=%d|alpha=%.9g|aset=%d",
             cfg_hex, tok_hex, cd->n_samples, cd->seqlen, o->moe_calib_all, o->min_expert_tokens, c->scheme->name,
             (int)o->group_size, o->n_grid, o->awq_tokens, o->awq_expert_tokens, (unsigned long long)o->data.seed,
             o->target_id ? o->target_id : "", o->smooth, (double)o->alpha, o->alpha_set);
    if (attn_seqs(c) > 0) /* likewise: only when the attention block loss is on */
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "|attn=%d,%d", attn_seqs(c), o->awq_attn_seqlen);
    if (o->gptq) /* only then: fingerprints of runs without GPTQ stay as they were */
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "|gptq=%.9g", o->gptq_damp);
    DSQ_TRY(dsq_sha256_buf(buf, strlen(buf), h));
    hex(h, out);
    return DSQ_OK;
}

static char *stats_meta(run *c, const dsq_calib_data *cd)
{
    json_object *root = json_object_new_object(), *mo = json_object_new_object(), *da = json_object_new_object(),
                *se = json_object_new_object();
    char hx[65];
    uint8_t h[DSQ_SHA256_LEN];
    json_object_object_add(root, "format", json_object_new_string(DSQ_STATS_FORMAT));
    json_object_object_add(root, "version", json_object_new_int(DSQ_STATS_VERSION));
    json_object_object_add(mo, "arch", json_object_new_string(dsq_arch_name(c->cfg->arch)));
    json_object_object_add(mo, "layers", json_object_new_int64(c->cfg->num_hidden_layers));
    json_object_object_add(mo, "hidden_size", json_object_new_int64(c->cfg->hidden_size));
    dsq_sha256_buf(c->cfg->raw_json ? c->cfg->raw_json : "", c->cfg->raw_len, h);
    hex(h, hx);
    json_object_object_add(mo, "config_sha256", json_object_new_string(hx));
    json_object_object_add(root, "model", mo);
    json_object_object_add(da, "file", c->o->calib ? json_object_new_string(c->o->calib) : NULL);
    json_object_object_add(da, "samples", json_object_new_int(cd->n_samples));
    json_object_object_add(da, "seqlen", json_object_new_int(cd->seqlen));
    json_object_object_add(da, "seed", json_object_new_int64((int64_t)c->o->data.seed));
    hex(cd->sha256, hx);
    json_object_object_add(da, "tokens_sha256", json_object_new_string(hx));
    json_object_object_add(root, "data", da);
    json_object_object_add(root, "moe_calib_all", json_object_new_boolean(c->o->moe_calib_all));
    json_object_object_add(root, "min_expert_tokens", json_object_new_int(c->o->min_expert_tokens));
    json_object_object_add(se, "scheme", json_object_new_string(c->scheme->name));
    json_object_object_add(se, "group_size", json_object_new_int(c->o->group_size));
    json_object_object_add(se, "grid", json_object_new_int(c->o->n_grid));
    json_object_object_add(root, "search", se);
    char *s = strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
    return s;
}

/* --stats: the file must describe this model. Every field is type-checked:
 * a null or mistyped value is a broken file, never a default. */
static int meta_type_error(run *c, const char *field, const char *want)
{
    return dsq_fail(c->d, DSQ_ERR_JSON, dsq_stats_reader_path(c->rd), NULL, -1,
                    "statistics metadata: \"%s\" must be %s", field, want);
}

static int check_stats_meta(run *c)
{
    json_object *root = json_tokener_parse(dsq_stats_reader_meta(c->rd)), *mo = NULL, *se = NULL, *da = NULL;
    int rc = DSQ_OK;
    const char *p = dsq_stats_reader_path(c->rd);
    const char *sv = NULL;
    uint8_t h[DSQ_SHA256_LEN];
    char hx[65];
    dsq_sha256_buf(c->cfg->raw_json ? c->cfg->raw_json : "", c->cfg->raw_len, h);
    hex(h, hx);
    if (!root || !json_object_is_type(root, json_type_object))
        rc = dsq_fail(c->d, DSQ_ERR_JSON, p, NULL, -1, "statistics metadata is not a JSON object");
    else if (dsq_json_get_obj(root, "model", &mo) != DSQ_JSON_OK)
        rc = meta_type_error(c, "model", "an object");
    else if (dsq_json_get_str(mo, "config_sha256", &sv) != DSQ_JSON_OK)
        rc = meta_type_error(c, "model.config_sha256", "a string");
    else if (strcmp(sv, hx) != 0)
        rc = dsq_fail(c->d, DSQ_ERR_STATE, p, NULL, -1, "statistics were collected on another model (config.json differs)");
    int b = 0;
    int t = rc == DSQ_OK ? dsq_json_get_bool(root, "moe_calib_all", &b) : DSQ_JSON_ABSENT;
    if (t == DSQ_JSON_BADTYPE) rc = meta_type_error(c, "moe_calib_all", "true or false");
    else if (t == DSQ_JSON_OK) c->moe_all = b;
    t = rc == DSQ_OK ? dsq_json_get_obj(root, "data", &da) : DSQ_JSON_ABSENT;
    if (t == DSQ_JSON_BADTYPE) rc = meta_type_error(c, "data", "an object");
    if (rc == DSQ_OK && da) {
        int64_t n = c->data_samples, L = c->data_seqlen, seed = (int64_t)c->data_seed;
        const char *file = NULL;
        json_object *fv = NULL;
        /* "file": null is what the writer records for pre-tokenized data */
        int null_file = json_object_object_get_ex(da, "file", &fv) && fv == NULL;
        if (!null_file && dsq_json_get_str(da, "file", &file) == DSQ_JSON_BADTYPE)
            rc = meta_type_error(c, "data.file", "a string or null");
        else if ((t = dsq_json_get_int(da, "samples", &n)) == DSQ_JSON_BADTYPE || n < 0 || n > INT32_MAX)
            rc = meta_type_error(c, "data.samples", "an integer in [0, 2^31)");
        else if ((t = dsq_json_get_int(da, "seqlen", &L)) == DSQ_JSON_BADTYPE || L < 0 || L > INT32_MAX)
            rc = meta_type_error(c, "data.seqlen", "an integer in [0, 2^31)");
        else if (dsq_json_get_int(da, "seed", &seed) == DSQ_JSON_BADTYPE)
            rc = meta_type_error(c, "data.seed", "an integer");
        if (rc == DSQ_OK) {
            if (file && !(c->data_file = strdup(file)))
                rc = dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
            c->data_samples = (int)n;
            c->data_seqlen = (int)L;
            c->data_seed = (uint64_t)seed;
            c->r->tot.tokens = (uint64_t)c->data_samples * (uint64_t)c->data_seqlen;
        }
    }
    t = rc == DSQ_OK ? dsq_json_get_obj(root, "search", &se) : DSQ_JSON_ABSENT;
    if (t == DSQ_JSON_BADTYPE) rc = meta_type_error(c, "search", "an object");
    if (rc == DSQ_OK && se) {
        t = dsq_json_get_str(se, "scheme", &sv);
        if (t == DSQ_JSON_BADTYPE) rc = meta_type_error(c, "search.scheme", "a string");
        else if (t == DSQ_JSON_OK && c->flavor == DSQ_GROUPS_AWQ && strcmp(sv, c->scheme->name) != 0)
            rc = dsq_fail(c->d, DSQ_ERR_STATE, p, NULL, -1, "statistics were searched for %s, not %s; calibrate again",
                          sv, c->scheme->name);
    }
    json_object_put(root);
    return rc;
}

/* ==== the run ============================================================= */

static int embed_all(run *c, dsq_hstore *h, const dsq_calib_data *cd)
{
    report(c, -1, -1, "embed");
    for (int i = 0; i < cd->n_samples; i++) {
        float *buf;
        DSQ_TRY(dsq_hstore_get(h, i, &buf, c->d));
        DSQ_TRY(dsq_model_embed(c->m, cd->tokens + (size_t)i * (size_t)cd->seqlen, cd->seqlen, buf, c->d));
        DSQ_TRY(dsq_hstore_put(h, i, buf, c->d));
    }
    return dsq_hstore_swap(h, c->d);
}

static int gptq_tap(void *ctx, const char *site, const float *x, int64_t T, int64_t in, const int32_t *token_index)
{
    run *c = ctx;
    double t0 = now_s();
    int rc = DSQ_OK, e = dsq_calib_expert_of(site);
    size_t n = strlen(site);
    if (e >= 0 && c->moe.idx) { /* routed expert: remember which rows (down_proj's input is recomputed) */
        if (n > 16 && !strcmp(site + n - 16, "gate_proj.weight")) rc = dsq_gptq_moe_add_routed(&c->moe, e, token_index, T);
    } else {
        rc = dsq_gptq_hset_add(&c->hs, site, x, T, in, dsq_model_pool(c->m));
        if (rc == DSQ_OK && c->moe.idx && n > 16 && !strcmp(site + n - 16, ".mlp.gate.weight"))
            rc = dsq_gptq_moe_add_rows(&c->moe, x, T);
    }
    c->r->tot.seconds_gptq += now_s() - t0;
    return rc;
}

static void on_sample(void *ctx, int layer, int sample)
{
    report(ctx, layer, sample, "forward");
}

static int get_data(run *c, const char *model_path, dsq_calib_data *cd)
{
    const dsq_calib_opts *o = c->o;
    if (o->tokens) return dsq_calib_data_from_ids(cd, o->tokens, o->n_tokens, &o->data, c->d);
    report(c, -1, -1, "data");
    dsq_tokenizer *tok = NULL;
    int rc = dsq_tokenizer_for_model(&tok, model_path, o->tokenizer, NULL, NULL, 0, c->d);
    if (rc == DSQ_OK) rc = dsq_calib_data_load(cd, o->calib, tok, &o->data, c->d);
    dsq_tokenizer_free(tok);
    return rc;
}

static int forward_run(run *c, const char *model_path, int *interrupted)
{
    const dsq_calib_opts *o = c->o;
    const int L = (int)c->cfg->num_hidden_layers;
    dsq_calib_data cd;
    DSQ_TRY(get_data(c, model_path, &cd));
    c->n_samples = cd.n_samples;
    c->r->tot.tokens = (uint64_t)cd.n_samples * (uint64_t)cd.seqlen;
    c->r->tot.samples = cd.n_samples;
    c->r->tot.seqlen = cd.seqlen;
    c->r->tot.samples_requested = cd.requested_samples;
    c->data_samples = cd.n_samples;
    c->data_seqlen = cd.seqlen;
    c->data_seed = o->data.seed;
    if (o->calib && !(c->data_file = strdup(o->calib))) {
        dsq_calib_data_release(&cd);
        return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    int rc = DSQ_OK;
    char fp[65];
    char *spill = NULL;
    if (o->save_stats) {
        rc = fingerprint(c, &cd, fp);
        if (rc == DSQ_OK)
            rc = dsq_stats_writer_open(&c->w, o->save_stats, fp,
                                       (o->resume ? DSQ_STATS_RESUME : 0) | (o->overwrite ? DSQ_STATS_OVERWRITE : 0),
                                       c->d);
        char *tmp = rc == DSQ_OK ? dsq_outfile_tmp_name(o->save_stats) : NULL;
        if (tmp) {
            spill = malloc(strlen(tmp) + 8);
            if (spill) snprintf(spill, strlen(tmp) + 8, "%s.hidden", tmp);
            free(tmp);
        }
        if (rc == DSQ_OK && !spill) rc = dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    /* layers a previous run completed */
    int done = 0;
    char name[512];
    while (rc == DSQ_OK && c->w && done < L) {
        dsq_stats_name(name, sizeof name, done, "done", NULL);
        if (!dsq_stats_writer_has(c->w, name)) break;
        done++;
    }
    dsq_hstore *h = NULL;
    if (rc == DSQ_OK)
        rc = dsq_hstore_open(&h, cd.n_samples, cd.seqlen, c->cfg->hidden_size, o->ram_limit, spill, spill != NULL,
                             c->d);
    for (int l = 0; l < done && rc == DSQ_OK; l++) rc = layer_from_file(c, l);
    if (rc == DSQ_OK && done > 0 && done < L) {
        dsq_stats_name(name, sizeof name, done - 1, "done", NULL);
        void *buf = NULL;
        size_t n = 0;
        rc = src_get(c, name, &buf, &n);
        dsq_stats_done mk;
        if (rc == DSQ_OK && (n != sizeof mk || (memcpy(&mk, buf, sizeof mk), memcmp(mk.magic, "DSQL", 4) != 0) ||
                             mk.hidden_file > 1 || mk.samples != (uint64_t)cd.n_samples))
            rc = dsq_fail(c->d, DSQ_ERR_FORMAT, NULL, name, -1, "bad layer checkpoint record");
        free(buf);
        if (rc == DSQ_OK) rc = dsq_hstore_adopt(h, (int)mk.hidden_file, mk.hidden_sha256, c->d);
    } else if (rc == DSQ_OK && done == 0) {
        rc = embed_all(c, h, &cd);
    }
    dsq_collect_opts co = { 0 };
    /* token samples: for the searches and the clip check (int4 schemes) */
    int search = c->flavor == DSQ_GROUPS_AWQ || c->scheme->id == DSQ_SCHEME_W4A8 ||
                 c->scheme->id == DSQ_SCHEME_W8A8_DYNAMIC || o->target != NULL;
    /* ... and for the sensitivities of --rollback */
    co.sample_cap_dense = search || o->rollback > 0 ? o->awq_tokens : 0;
    co.sample_cap_expert = search || o->rollback > 0 ? o->awq_expert_tokens : 0;
    co.attn_seqs = search ? attn_seqs(c) : 0;   /* attention block loss (awq.h) */
    co.attn_seq_len = o->awq_attn_seqlen;
    co.seed = o->data.seed;
    co.layer_flags = o->moe_calib_all ? DSQ_LAYER_ALL_EXPERTS : 0;
    /* X^T X blocks for the AWQ clip search (awq.h); other schemes keep the
     * proxy clip and do not pay for them (2.3 GiB per 671B layer) */
    /* with --gptq the clip stays the quantizer's per-group search inside
     * GPTQ (awq-w4a16 g64 on the sample: mean KLD 0.0055 that way, 0.0103
     * with the X^T X clip clamping GPTQ's groups, 0.0076 with no clip) */
    co.cov = o->clip && c->flavor == DSQ_GROUPS_AWQ && !o->gptq;
    co.cancel = c->cancel;
    co.on_sample = on_sample;
    co.ctx = c;
    if (o->gptq) {
        co.tap = gptq_tap;
        co.tap_ctx = c;
    }
    for (int l = done; l < L && rc == DSQ_OK; l++) {
        dsq_layer_stats ls;
        rc = dsq_layer_stats_init(&ls, l, n_experts_of(c, l));
        if (rc < 0) break;
        int last = l == L - 1;
        dsq_stats_done mk;
        memset(&mk, 0, sizeof mk);
        if (o->gptq && ls.n_experts > 0 && dsq_gptq_moe_init(&c->moe, c->cfg->hidden_size, ls.n_experts) < 0)
            rc = dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        double tf = now_s();
        if (rc == DSQ_OK) rc = dsq_collect_layer(c->m, l, h, !last, &co, &ls, mk.hidden_sha256, c->d);
        c->r->tot.seconds_forward += now_s() - tf;
        if (rc == DSQ_OK) rc = do_layer(c, l, &ls, 1);
        if (c->hs.bytes + c->moe.caprows * (uint64_t)c->moe.in * 4 > c->r->tot.gptq_hess_peak)
            c->r->tot.gptq_hess_peak = c->hs.bytes + c->moe.caprows * (uint64_t)c->moe.in * 4;
        dsq_gptq_hset_release(&c->hs);
        dsq_gptq_moe_release(&c->moe);
        if (rc == DSQ_OK && !last) rc = dsq_hstore_swap(h, c->d);
        if (rc == DSQ_OK && c->w) rc = write_layer_stats(c, &ls);
        if (rc == DSQ_OK && c->w) {
            memcpy(mk.magic, "DSQL", 4);
            mk.layer = (uint32_t)l;
            mk.hidden_file = last ? 0 : (uint32_t)dsq_hstore_current(h);
            mk.samples = (uint64_t)cd.n_samples;
            mk.tokens = ls.tokens;
            dsq_stats_name(name, sizeof name, l, "done", NULL);
            rc = dsq_stats_writer_put(c->w, name, &mk, sizeof mk, 1, 0, c->d);
            if (rc == DSQ_OK) rc = dsq_stats_writer_checkpoint(c->w, c->d);
        }
        dsq_model_layer_release(c->m, l);
        dsq_layer_stats_release(&ls);
        if (rc == DSQ_OK && o->stop_after_layer == l && !last)
            rc = dsq_fail(c->d, DSQ_ERR_INTERRUPTED, NULL, NULL, -1, "stopped after layer %d (test)", l);
    }
    *interrupted = rc == DSQ_ERR_INTERRUPTED;
    if (c->w) {
        if (rc == DSQ_OK) {
            char *meta = stats_meta(c, &cd);
            rc = meta ? dsq_stats_writer_finish(c->w, meta, c->d) : DSQ_ERR_NOMEM;
            if (!meta) dsq_stats_writer_abort(c->w);
            free(meta);
        } else if (*interrupted) {
            dsq_stats_writer_detach(c->w);
        } else {
            dsq_stats_writer_abort(c->w);
        }
        c->w = NULL;
    }
    dsq_hstore_free(h, !*interrupted);
    free(spill);
    dsq_calib_data_release(&cd);
    return rc;
}

static char *info_json(run *c)
{
    const dsq_calib_opts *o = c->o;
    json_object *root = json_object_new_object();
    const int dyn = c->scheme->id == DSQ_SCHEME_W8A8_DYNAMIC;   /* no static ranges to record */
    const char *method = c->flavor == DSQ_GROUPS_AWQ ? "awq"
                         : !o->smooth                ? (dyn ? "none" : "static-ranges")
                         : c->scheme->id == DSQ_SCHEME_W4A8 && !o->alpha_set ? "smoothquant+awq-search"
                         : dyn && !o->alpha_set                              ? "smoothquant-search"
                                                                              : "smoothquant";
    json_object_object_add(root, "method", json_object_new_string(method));
    json_object_object_add(root, "scheme", json_object_new_string(c->scheme->name));
    /* the same text whether the statistics were collected now or loaded */
    if (c->data_file) json_object_object_add(root, "calib", json_object_new_string(c->data_file));
    json_object_object_add(root, "samples", json_object_new_int(c->data_samples));
    json_object_object_add(root, "seqlen", json_object_new_int(c->data_seqlen));
    json_object_object_add(root, "seed", json_object_new_int64((int64_t)c->data_seed));
    json_object_object_add(root, "alpha", json_object_new_double(o->alpha));
    json_object_object_add(root, "moe_calib_all", json_object_new_boolean(c->moe_all));
    json_object_object_add(root, "min_expert_tokens", json_object_new_int(o->min_expert_tokens));
    json_object_object_add(root, "grid", json_object_new_int(o->n_grid));
    json_object_object_add(root, "clip", json_object_new_boolean(o->clip));
    char *s = strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
    return s;
}

int dsq_calib_run(const char *model_path, const dsq_calib_opts *o, dsq_calib_result **out,
                  dsq_calib_progress_fn progress, void *progress_ctx, const volatile int *cancel, dsq_diag *d)
{
    *out = NULL;
    if (!o || !model_path) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "no model or options");
    run c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.d = d;
    c.progress = progress;
    c.pctx = progress_ctx;
    c.cancel = cancel;
    c.t0 = now_s();
    c.scheme = dsq_scheme_by_name(o->scheme ? o->scheme : "");
    if (!c.scheme) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "unknown scheme '%s'", o->scheme);
    if (!o->calib && !o->tokens && !o->load_stats)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "calibration needs data (--calib) or statistics (--stats)");
    if (o->load_stats && (o->save_stats || o->resume))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "--stats cannot be combined with --save-stats or --resume");
    if (o->resume && !o->save_stats)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "--resume needs a statistics checkpoint (--save-stats)");
    if (!(o->alpha >= 0.0f && o->alpha <= 1.0f))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "alpha %g is outside [0, 1]", (double)o->alpha);
    if (o->min_expert_tokens < 0 || o->n_grid < 1 || o->n_grid > 1000 || o->awq_tokens < 0 || o->awq_expert_tokens < 0 ||
        o->awq_attn_seqs < -1 || o->awq_attn_seqs > 64 || o->awq_attn_seqlen < 0 || o->rollback < 0)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "bad calibration limits");
    c.flavor = c.scheme->id == DSQ_SCHEME_AWQ_W4A16 ? DSQ_GROUPS_AWQ : DSQ_GROUPS_SMOOTH;
    c.moe_all = o->moe_calib_all;

    dsq_calib_result *r = calloc(1, sizeof *r);
    if (!r) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    c.r = r;
    dsq_model_opts mo;
    dsq_model_opts_default(&mo);
    mo.lazy = 1;
    mo.threads = o->threads;
    mo.fp8_as_f32 = o->gptq != 0;   /* GPTQ rounds the weights the converter reads (exact fp8 * scale) */
    int rc = dsq_model_open(&c.m, model_path, &mo, d);
    if (rc == DSQ_OK) {
        c.cfg = dsq_model_get_config(c.m);
        r->n_layers = (int)c.cfg->num_hidden_layers;
        r->cov = calloc((size_t)r->n_layers + 1, sizeof *r->cov);
        r->cov_n = calloc((size_t)r->n_layers + 1, sizeof *r->cov_n);
        if (!r->cov || !r->cov_n) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    int interrupted = 0;
    if (rc == DSQ_OK && o->load_stats) {
        rc = dsq_stats_reader_open(&c.rd, o->load_stats, d);
        if (rc == DSQ_OK) rc = check_stats_meta(&c);
        for (int l = 0; l < r->n_layers && rc == DSQ_OK; l++) {
            if (cancel && *cancel) rc = dsq_fail(d, DSQ_ERR_INTERRUPTED, NULL, NULL, -1, "calibration interrupted");
            else rc = layer_from_file(&c, l);
        }
        dsq_stats_reader_close(c.rd);
        c.rd = NULL;
    } else if (rc == DSQ_OK) {
        rc = forward_run(&c, model_path, &interrupted);
    }
    if (rc == DSQ_OK) rc = clip_map(&c);
    if (rc == DSQ_OK && o->rollback > 0) rc = pick_rollback(&c);
    if (rc == DSQ_OK) {
        r->info = info_json(&c);
        if (!r->info) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    dsq_model_free(c.m);
    free(c.data_file);
    dsq_gptq_hset_release(&c.hs);
    dsq_gptq_moe_release(&c.moe);
    r->tot.seconds = now_s() - c.t0;
    if (rc < 0) {
        dsq_calib_result_free(r);
        return rc;
    }
    *out = r;
    return DSQ_OK;
}

int dsq_calib_fingerprint(const dsq_calib_result *r, char hex[65])
{
    dsq_sha256 h;
    if (dsq_sha256_init(&h) < 0) return DSQ_ERR_NOMEM;
    for (size_t i = 0; i < r->n; i++) {
        const dsq_calib_tensor *t = &r->e[i];
        int64_t hd[6] = { t->rows, t->cols, t->status, t->clip, t->clip_idx ? t->clip_gs : -1, t->rolled_back };
        dsq_sha256_update(&h, t->name, strlen(t->name) + 1);
        dsq_sha256_update(&h, hd, sizeof hd);
        const float *v[3] = { t->in_scale, t->row_scale, t->importance };
        const int64_t len[3] = { t->cols, t->rows, t->cols };
        for (int k = 0; k < 3; k++) {
            uint8_t present = v[k] != NULL;
            dsq_sha256_update(&h, &present, 1);
            if (present) dsq_sha256_update(&h, v[k], (size_t)len[k] * sizeof(float));
        }
        if (t->clip_idx) {
            int64_t g = t->clip_gs > 0 && t->clip_gs < t->cols ? t->clip_gs : t->cols;
            dsq_sha256_update(&h, t->clip_idx, (size_t)(t->rows * ((t->cols + g - 1) / g)));
        }
        float act[3] = { (float)t->has_act_static, t->act_scale, t->act_offset };
        dsq_sha256_update(&h, act, sizeof act);
        if (t->gptq_blob) dsq_sha256_update(&h, t->gptq_blob, t->gptq_blob_size);
    }
    uint8_t out[DSQ_SHA256_LEN];
    dsq_sha256_final(&h, out);
    dsq_sha256_hex(out, hex);
    return DSQ_OK;
}

int dsq_calib_summary_json(const dsq_calib_result *r, int timing, char **json)
{
    *json = NULL;
    json_object *root = r->info ? json_tokener_parse(r->info) : json_object_new_object();
    if (!root) return DSQ_ERR_NOMEM;
    json_object *g = json_object_new_object();
    json_object_object_add(g, "searched", json_object_new_int(r->tot.groups_searched));
    json_object_object_add(g, "smoothed", json_object_new_int(r->tot.groups_smoothed));
    json_object_object_add(g, "identity", json_object_new_int(r->tot.groups_identity));
    json_object_object_add(g, "loss_rtn", json_object_new_double(r->tot.loss_identity));
    json_object_object_add(g, "loss_searched", json_object_new_double(r->tot.loss_best));
    json_object_object_add(root, "groups", g);
    json_object_object_add(root, "tensors", json_object_new_int64((int64_t)r->n));
    json_object_object_add(root, "tokens", json_object_new_int64((int64_t)r->tot.tokens));
    if (timing && r->tot.samples > 0) { /* a fresh run (not --stats): what it used; not in metadata,
                                          * which must not depend on --stats vs --calib */
        json_object_object_add(root, "samples", json_object_new_int(r->tot.samples));
        json_object_object_add(root, "seqlen", json_object_new_int(r->tot.seqlen));
        json_object_object_add(root, "samples_requested", json_object_new_int(r->tot.samples_requested));
    }
    json_object *fb = json_object_new_array();
    for (size_t i = 0; i < r->nfb; i++) json_object_array_add(fb, json_object_new_string(r->fb_name[i]));
    json_object_object_add(root, "fallback_rtn_experts", fb);
    if (r->tot.gptq_tensors) {
        json_object *gq = json_object_new_object();
        json_object_object_add(gq, "tensors", json_object_new_int64((int64_t)r->tot.gptq_tensors));
        json_object_object_add(gq, "rtn_fallback", json_object_new_int64((int64_t)r->tot.gptq_rtn));
        json_object_object_add(root, "gptq", gq);
    }
    if (r->nrb || r->rb) {   /* --rollback: what stays float, and why */
        json_object *rb = json_object_new_array();
        for (size_t k = 0; k < r->nrb; k++) {
            json_object *o = json_object_new_object();
            json_object_object_add(o, "tensor", json_object_new_string(r->e[r->rb[k]].name));
            json_object_object_add(o, "sensitivity", json_object_new_double(r->e[r->rb[k]].sensitivity));
            json_object_array_add(rb, o);
        }
        json_object_object_add(root, "rollback", rb);
    }
    char hx[65];
    if (dsq_calib_fingerprint(r, hx) == DSQ_OK) json_object_object_add(root, "sha256", json_object_new_string(hx));
    if (timing) {
        json_object *t = json_object_new_object();
        json_object_object_add(t, "total", json_object_new_double(r->tot.seconds));
        json_object_object_add(t, "forward", json_object_new_double(r->tot.seconds_forward));
        json_object_object_add(t, "search", json_object_new_double(r->tot.seconds_search));
        if (r->tot.gptq_tensors) json_object_object_add(t, "gptq", json_object_new_double(r->tot.seconds_gptq));
        json_object_object_add(root, "seconds", t);
    }
    *json = strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
    return *json ? DSQ_OK : DSQ_ERR_NOMEM;
}
