/* moe.c - SwiGLU MLP and the DeepSeek MoE block (formats.md 2.5).
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
    dsq_silu_mul(sc->g, sc->u, (size_t)T * (size_t)mlp->gate.out);
    dsq_prof_end(r->m->prof, &mk, "mlp: silu * up", 0.0);
    DSQ_TRY(dsq_linear_hook_call(r, &mlp->down, sc->g, T, token_index));
    return dsq_linear_gemm(r, &mlp->down, sc->g, T, out);
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
    for (int e = 0; e < E; e++) {
        /* tokens routed to e, in token order, with their weights */
        int n = 0;
        for (int t = 0; t < T; t++) {
            float w = 0.0f;
            int hit = 0;
            for (int k = 0; k < K; k++)
                if (sc->route_idx[(size_t)t * K + k] == e) { w = sc->route_w[(size_t)t * K + k]; hit = 1; }
            if (hit || all) {
                sc->tok_list[n] = t;
                sc->tok_w[n] = hit ? w : 0.0f;
                n++;
            }
        }
        if (n == 0) continue;
        /* calibration "all experts": everyone runs, only routed tokens count */
        dsq_prof_begin(pf, &mk);
        for (int i = 0; i < n; i++)
            memcpy(sc->moe_x + (size_t)i * D, x + (size_t)sc->tok_list[i] * D, (size_t)D * sizeof(float));
        dsq_prof_end(pf, &mk, "moe: gather + scatter", 0.0);
        DSQ_TRY(dsq_mlp_forward(r, &ly->experts[e], sc->moe_x, n, all ? NULL : sc->tok_list, sc->moe_y));
        dsq_prof_begin(pf, &mk);
        for (int i = 0; i < n; i++) {
            int t = sc->tok_list[i];
            int routed = 0;
            for (int k = 0; k < K; k++) routed |= sc->route_idx[(size_t)t * K + k] == e;
            if (routed) dsq_axpy(sc->moe_acc + (size_t)t * D, sc->tok_w[i], sc->moe_y + (size_t)i * D, (size_t)D);
        }
        dsq_prof_end(pf, &mk, "moe: gather + scatter", 0.0);
    }

    if (ly->has_shared) {
        DSQ_TRY(dsq_mlp_forward(r, &ly->shared, x, T, NULL, sc->proj));
        dsq_prof_begin(pf, &mk);
        for (size_t i = 0; i < (size_t)T * (size_t)D; i++) sc->proj[i] += sc->moe_acc[i];
        dsq_prof_end(pf, &mk, "moe: gather + scatter", 0.0);
    } else {
        memcpy(sc->proj, sc->moe_acc, (size_t)T * (size_t)D * sizeof(float));
    }
    return DSQ_OK;
}
