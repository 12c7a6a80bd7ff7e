/* attn.c - multi-head / grouped-query attention (Llama, Qwen2) with KV cache.
 *
 *   q = x Wq^T (+bq)  [T, H*hd];  k, v = x Wk^T, x Wv^T (+b)  [T, KVH*hd]
 *   RoPE (rotate-half) on every q and k head at the token's position
 *   k, v -> cache at the token's index; head h reads kv head h / (H/KVH)
 *   o = softmax(q k^T / sqrt(hd), causal) v;  proj = o Wo^T
 * Attention runs as GEMM blocks (ops.c dsq_attend_block): for a prefill of
 * one sequence, one block per head (rows = tokens, causal mask); for decode
 * and batched decode, one block per token and kv head (rows = the query
 * heads sharing that kv head), so each cached K/V row is read once per
 * group, not once per head. */
#include "model.h"

#include <string.h>

int dsq_attn_forward(dsq_run *r, const float *x)
{
    const dsq_model *m = r->m;
    const dsq_layer *ly = &m->w.layers[r->layer];
    dsq_scratch *sc = r->sc;
    const int T = r->T;
    const int64_t H = m->n_heads, KVH = m->n_kv_heads, hd = m->head_dim, kvdim = KVH * hd;
    float *kbuf = sc->kva, *vbuf = sc->kva + (size_t)T * kvdim;

    DSQ_TRY(dsq_linear_hook_call(r, &ly->q, x, T, NULL));
    DSQ_TRY(dsq_linear_hook_call(r, &ly->k, x, T, NULL));
    DSQ_TRY(dsq_linear_hook_call(r, &ly->v, x, T, NULL));
    DSQ_TRY(dsq_linear_gemm(r, &ly->q, x, T, sc->q));
    DSQ_TRY(dsq_linear_gemm(r, &ly->k, x, T, kbuf));
    DSQ_TRY(dsq_linear_gemm(r, &ly->v, x, T, vbuf));

    const int half = m->rope.dim / 2;
    for (int t = 0; t < T; t++) {
        const float *c = sc->cs + (size_t)t * m->rope.dim, *s = c + half;
        for (int64_t h = 0; h < H; h++) dsq_rope_apply(&m->rope, sc->q + (size_t)t * m->q_dim + h * hd, c, s);
        for (int64_t h = 0; h < KVH; h++) dsq_rope_apply(&m->rope, kbuf + (size_t)t * kvdim + h * hd, c, s);
        float *base = dsq_kv_base(r, t);
        int64_t idx = dsq_kv_index(r, t);
        memcpy(base + idx * kvdim, kbuf + (size_t)t * kvdim, (size_t)kvdim * sizeof(float));
        memcpy(base + r->kv.ctx * kvdim + idx * kvdim, vbuf + (size_t)t * kvdim, (size_t)kvdim * sizeof(float));
    }

    const int64_t g = H / KVH;
    if (!r->kv.seq_of && T > 1) {
        int P = 0;
        for (int t = 0; t < T; t++) {
            sc->vis[t] = (int32_t)dsq_kv_index(r, t) + 1;
            if (sc->vis[t] > P) P = sc->vis[t];
        }
        const float *K = dsq_kv_base(r, 0), *V = K + r->kv.ctx * kvdim;
        for (int64_t h = 0; h < H; h++) {
            int64_t kvh = h / g;
            dsq_attend_block(T, P, sc->q + h * hd, (int)m->q_dim, K + kvh * hd, (int)kvdim, (int)hd,
                             NULL, 0, NULL, 0, 0, V + kvh * hd, (int)kvdim, (int)hd, sc->vis, m->attn_scale,
                             sc->scores, sc->att + h * hd, (int)m->attn_out_dim, m->pool);
        }
    } else {
        for (int t = 0; t < T; t++) {
            int P = (int)dsq_kv_index(r, t) + 1;
            for (int64_t i = 0; i < g; i++) sc->vis[i] = P;
            const float *K = dsq_kv_base(r, t), *V = K + r->kv.ctx * kvdim;
            for (int64_t kvh = 0; kvh < KVH; kvh++) {
                float *qg = sc->q + (size_t)t * m->q_dim + kvh * g * hd;
                dsq_attend_block((int)g, P, qg, (int)hd, K + kvh * hd, (int)kvdim, (int)hd, NULL, 0, NULL, 0, 0,
                                 V + kvh * hd, (int)kvdim, (int)hd, sc->vis, m->attn_scale, sc->scores,
                                 sc->att + (size_t)t * m->attn_out_dim + kvh * g * hd, (int)hd, m->pool);
            }
        }
    }

    DSQ_TRY(dsq_linear_hook_call(r, &ly->o, sc->att, T, NULL));
    return dsq_linear_gemm(r, &ly->o, sc->att, T, sc->proj);
}
