/* moe.c - SwiGLU MLP and the DeepSeek MoE block (docs/checkpoints.md,
 * "Routing").
 *
 *   y = sum_k w_k Expert_{idx_k}(x) + shared_experts(x)
 *   Expert(x) = down(silu(gate x) * up x)
 *
 * Routing (ops.c dsq_route) runs per token; then tokens are grouped by
 * expert so each expert's weights stream through the cache once per batch
 * (one GEMM over its tokens) instead of once per token. Routed outputs are
 * summed in ascending expert order, as inference/model.py loops over
 * experts, so the result is independent of thread count and batch
 * composition. */
#include "model.h"

#include <string.h>

/* The glue between the gemms (silu * up, the gather of an expert's tokens,
 * the weighted scatter back, the shared add) runs one token row per pool
 * item from GLUE_MIN floats on: the same scalar loops per row as serially,
 * so the same bits on any pool; serial, they were 5% of a p128 prefill's
 * wall time at -t 2 (engine/prof.h). */
#define GLUE_MIN 65536

typedef struct glue_job {
    const dsq_run *r;
    const float *src;
    float *dst;
    const float *x;         /* gather source / scatter: the expert's outputs */
    int64_t n;              /* floats per row */
    int e;                  /* expert (scatter) */
} glue_job;

static dsq_pool *glue_pool(const dsq_run *r, int rows, int64_t n)
{
    return (double)rows * (double)n < (double)GLUE_MIN ? NULL : r->m->pool;
}

static void silu_task(void *ctx, size_t t, int tid)
{
    (void)tid;
    const glue_job *j = ctx;
    dsq_silu_mul(j->dst + t * (size_t)j->n, j->src + t * (size_t)j->n, (size_t)j->n);
}

static void gather_task(void *ctx, size_t i, int tid)
{
    (void)tid;
    const glue_job *j = ctx;
    const dsq_scratch *sc = j->r->sc;
    memcpy(j->dst + i * (size_t)j->n, j->x + (size_t)sc->tok_list[i] * (size_t)j->n, (size_t)j->n * sizeof(float));
}

/* token i of expert e: acc[t] += w_i y_i if the router chose e for t (the
 * calibration "all experts" mode runs the others without counting them);
 * the tokens of one expert are distinct, so rows never collide */
static void scatter_task(void *ctx, size_t i, int tid)
{
    (void)tid;
    const glue_job *j = ctx;
    const dsq_scratch *sc = j->r->sc;
    const int K = j->r->m->router.top_k, t = sc->tok_list[i];
    int routed = 0;
    for (int k = 0; k < K; k++) routed |= sc->route_idx[(size_t)t * K + k] == j->e;
    if (routed) dsq_axpy(j->dst + (size_t)t * (size_t)j->n, sc->tok_w[i], j->x + i * (size_t)j->n, (size_t)j->n);
}

static void add_task(void *ctx, size_t t, int tid)
{
    (void)tid;
    const glue_job *j = ctx;
    float *d = j->dst + t * (size_t)j->n;
    const float *a = j->src + t * (size_t)j->n;
    for (int64_t i = 0; i < j->n; i++) d[i] += a[i];
}

int dsq_mlp_forward(dsq_run *r, const dsq_mlp *mlp, const float *x, int T, const int32_t *token_index,
                    float *out)
{
    dsq_scratch *sc = r->sc;
    DSQ_TRY(dsq_linear_hook_call(r, &mlp->gate, x, T, token_index));
    DSQ_TRY(dsq_linear_hook_call(r, &mlp->up, x, T, token_index));
    DSQ_TRY(dsq_linear_gemm(r, &mlp->gate, x, T, sc->g));
    DSQ_TRY(dsq_linear_gemm(r, &mlp->up, x, T, sc->u));
    dsq_prof_mark mk;
    dsq_prof_begin(r->m->prof, &mk);
    glue_job gj = { r, sc->u, sc->g, NULL, mlp->gate.out, 0 };
    dsq_pool_run(glue_pool(r, T, mlp->gate.out), (size_t)T, silu_task, &gj);
    dsq_prof_end(r->m->prof, &mk, "mlp: silu * up", 0.0);
    DSQ_TRY(dsq_linear_hook_call(r, &mlp->down, sc->g, T, token_index));
    return dsq_linear_gemm(r, &mlp->down, sc->g, T, out);
}

/* silu * up of several experts' [rows, ffn] blocks, one per pool item
 * (moe_batched: outputs 2i and 2i + 1 are expert i's gate and up), on the
 * pool from SILU_MIN elements */
#define SILU_MIN 8192

typedef struct silu_many {
    const dsq_linear *const *l;
    float *const *out;
    const int *nt;
} silu_many;

static void silu_many_task(void *ctx, size_t i, int tid)
{
    (void)tid;
    const silu_many *s = ctx;
    dsq_silu_mul(s->out[2 * i], s->out[2 * i + 1], (size_t)s->nt[2 * i] * (size_t)s->l[2 * i]->out);
}

/* Decode batching: up to this many routed (expert, token-run) pairs per
 * step take moe_batched (T * top_k of them at most; V3 decode: 8). */
#define MOE_BATCH_MAX 24

/* The tokens routed to expert e, in token order, into list / w (weight 0
 * for a token that was not routed there but runs anyway: all != 0, the
 * calibration's "all experts"). Returns how many. */
static int routed_tokens(const dsq_scratch *sc, int T, int K, int e, int all, int32_t *list, float *wts)
{
    int n = 0;
    for (int t = 0; t < T; t++) {
        float w = 0.0f;
        int hit = 0;
        for (int k = 0; k < K; k++)
            if (sc->route_idx[(size_t)t * K + k] == e) { w = sc->route_w[(size_t)t * K + k]; hit = 1; }
        if (hit || all) {
            list[n] = t;
            wts[n] = hit ? w : 0.0f;
            n++;
        }
    }
    return n;
}

/* Every selected expert's gate and up, with the shared expert's, as ONE
 * pool job (dsq_linear_gemm_many), then all their downs as another: a V3
 * decode step wakes the pool 2 times instead of 27 and prepares x (awq's
 * permutation, int8 quantization) once for the 18 gates and ups instead of
 * 18 times, on one thread while the others wait. The same gemms on the same rows, silu * up per element, and the
 * routed sum in ascending expert order as in the loop below: the same bits.
 * Expert i's rows sit at row off[i] of g / u / moe_y (moe_x too when T > 1:
 * the gather), the shared expert's after the routed ones; the caller checks
 * that they fit cap_T. */
static int moe_batched(dsq_run *r, const dsq_layer *ly, const float *x)
{
    const dsq_model *m = r->m;
    dsq_scratch *sc = r->sc;
    const int T = r->T, E = m->router.n_experts, K = m->router.top_k;
    const int64_t D = m->hidden, F = m->max_ffn;
    int ex[MOE_BATCH_MAX], off[MOE_BATCH_MAX + 1], ne = 0, rows = 0;
    for (int e = 0; e < E; e++) {
        int n = routed_tokens(sc, T, K, e, 0, sc->tok_list + rows, sc->tok_w + rows);
        if (n == 0) continue;
        ex[ne] = e;
        off[ne++] = rows;
        rows += n;
    }
    off[ne] = rows;
    dsq_prof_mark mk;
    dsq_prof_begin(m->prof, &mk);
    if (T > 1) {
        glue_job gj = { r, NULL, sc->moe_x, x, D, 0 };
        dsq_pool_run(glue_pool(r, rows, D), (size_t)rows, gather_task, &gj);
    }
    dsq_prof_end(m->prof, &mk, "moe: gather + scatter", 0.0);
    const dsq_linear *l[2 * MOE_BATCH_MAX + 2];
    const float *in[2 * MOE_BATCH_MAX + 2];
    float *out[2 * MOE_BATCH_MAX + 2];
    int nt[2 * MOE_BATCH_MAX + 2], n = 0;
    for (int i = 0; i <= ne; i++) {
        const int sh = i == ne;   /* the shared expert last */
        if (sh && !ly->has_shared) break;
        const dsq_mlp *p = sh ? &ly->shared : &ly->experts[ex[i]];
        const float *xi = sh || T == 1 ? x : sc->moe_x + (size_t)off[i] * (size_t)D;
        const int ti = sh ? T : off[i + 1] - off[i];
        l[n] = &p->gate, in[n] = xi, nt[n] = ti, out[n++] = sc->g + (size_t)off[i] * (size_t)F;
        l[n] = &p->up, in[n] = xi, nt[n] = ti, out[n++] = sc->u + (size_t)off[i] * (size_t)F;
    }
    DSQ_TRY(dsq_linear_gemm_many(r, l, in, nt, out, n, "moe: experts gate + up (one job)"));
    dsq_prof_begin(m->prof, &mk);
    /* g, u of each expert are contiguous [rows, ffn]: one pool item per
     * expert, the same per-element op as per row (V3 decode: 9 x 2048
     * expf, ~70 us on one thread) */
    silu_many sm = { l, out, nt };
    int64_t total = 0;
    for (int i = 0; i < n; i += 2) total += (int64_t)nt[i] * l[i]->out;
    dsq_pool_run(total < SILU_MIN ? NULL : m->pool, (size_t)(n / 2), silu_many_task, &sm);
    dsq_prof_end(m->prof, &mk, "mlp: silu * up", 0.0);
    const int nd = n / 2;
    for (int i = 0; i < nd; i++) {
        const int sh = i == ne;
        const dsq_mlp *p = sh ? &ly->shared : &ly->experts[ex[i]];
        l[i] = &p->down;
        in[i] = out[2 * i];
        nt[i] = nt[2 * i];
        out[i] = sh ? sc->proj : sc->moe_y + (size_t)off[i] * (size_t)D;
    }
    DSQ_TRY(dsq_linear_gemm_many(r, l, in, nt, out, nd, "moe: experts down (one job)"));
    dsq_prof_begin(m->prof, &mk);
    /* routed sum in ascending expert order, then shared + routed, as the
     * loop in dsq_moe_forward and add_task */
    for (int i = 0; i < ne; i++)
        for (int j = off[i]; j < off[i + 1]; j++)
            dsq_axpy(sc->moe_acc + (size_t)sc->tok_list[j] * (size_t)D, sc->tok_w[j],
                     sc->moe_y + (size_t)j * (size_t)D, (size_t)D);
    if (ly->has_shared) {
        glue_job gj = { r, sc->moe_acc, sc->proj, NULL, D, 0 };
        dsq_pool_run(glue_pool(r, T, D), (size_t)T, add_task, &gj);
    } else {
        memcpy(sc->proj, sc->moe_acc, (size_t)T * (size_t)D * sizeof(float));
    }
    dsq_prof_end(m->prof, &mk, "moe: gather + scatter", 0.0);
    return DSQ_OK;
}

int dsq_moe_forward(dsq_run *r, const float *x)
{
    const dsq_model *m = r->m;
    const dsq_layer *ly = &m->w.layers[r->layer];
    dsq_scratch *sc = r->sc;
    const int T = r->T;
    const int64_t D = m->hidden;
    const int E = m->router.n_experts, K = m->router.top_k;

    DSQ_TRY(dsq_linear_hook_call(r, &ly->router, x, T, NULL));
    DSQ_TRY(dsq_linear_gemm(r, &ly->router, x, T, sc->logits_r));
    dsq_prof *pf = r->m->prof;
    dsq_prof_mark mk;
    dsq_prof_begin(pf, &mk);
    dsq_router rt = m->router;
    rt.bias = ly->router_bias;
    for (int t = 0; t < T; t++)
        dsq_route(&rt, sc->logits_r + (size_t)t * E, sc->route_tmp, sc->route_idx + (size_t)t * K,
                  sc->route_w + (size_t)t * K);

    memset(sc->moe_acc, 0, (size_t)T * (size_t)D * sizeof(float));
    dsq_prof_end(pf, &mk, "moe: routing", 0.0);
    const int all = (r->flags & DSQ_LAYER_ALL_EXPERTS) != 0;
    /* decode: one job per projection (moe_batched); calibration (hooks,
     * all experts) and larger batches take the loop */
    if (!all && !r->hook && !m->opts.moe_unbatched && (int64_t)T * K <= MOE_BATCH_MAX &&
        (int64_t)T * (K + 1) <= sc->cap_T)
        return moe_batched(r, ly, x);
    for (int e = 0; e < E; e++) {
        int n = routed_tokens(sc, T, K, e, all, sc->tok_list, sc->tok_w);
        if (n == 0) continue;
        /* calibration "all experts": everyone runs, only routed tokens count */
        dsq_prof_begin(pf, &mk);
        glue_job gj = { r, NULL, sc->moe_x, x, D, e };
        dsq_pool_run(glue_pool(r, n, D), (size_t)n, gather_task, &gj);
        dsq_prof_end(pf, &mk, "moe: gather + scatter", 0.0);
        DSQ_TRY(dsq_mlp_forward(r, &ly->experts[e], sc->moe_x, n, all ? NULL : sc->tok_list, sc->moe_y));
        dsq_prof_begin(pf, &mk);
        gj.dst = sc->moe_acc;
        gj.x = sc->moe_y;
        dsq_pool_run(glue_pool(r, n, D), (size_t)n, scatter_task, &gj);
        dsq_prof_end(pf, &mk, "moe: gather + scatter", 0.0);
    }

    if (ly->has_shared) {
        DSQ_TRY(dsq_mlp_forward(r, &ly->shared, x, T, NULL, sc->proj));
        dsq_prof_begin(pf, &mk);
        glue_job gj = { r, sc->moe_acc, sc->proj, NULL, D, 0 };
        dsq_pool_run(glue_pool(r, T, D), (size_t)T, add_task, &gj);
        dsq_prof_end(pf, &mk, "moe: gather + scatter", 0.0);
    } else {
        memcpy(sc->proj, sc->moe_acc, (size_t)T * (size_t)D * sizeof(float));
    }
    return DSQ_OK;
}
