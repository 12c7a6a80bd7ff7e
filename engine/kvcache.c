/* kvcache.c - run state: KV cache per layer and the scratch buffers, all
 * allocated once (llama2.c malloc_run_state).
 *
 * Cache layout per layer: [max_batch][kv_width * max_ctx] floats, each
 * sequence structure-of-arrays (see dsq_kv_view in model.h). MLA caches
 * only the compressed latent (after kv_a_layernorm) and the roped k_pe:
 * kv_lora + rope floats per position (576 for V3, vs 128 * 2 * 192 for
 * plain MHA). */
#include "model.h"
#include "dsq_mem.h"

#include <stdlib.h>
#include <string.h>

static float *falloc(int64_t n)
{
    return dsq_aligned_alloc((size_t)(n > 0 ? n : 1) * sizeof(float));
}

/* terms: the model's bf16 activation split (dsq_linear_gemm's view has it,
 * and the awq-w4a16 kernel's scratch depends on it) */
static void gemm_need(const dsq_linear *l, int64_t T, int nthreads, int terms, size_t *mx)
{
    if (!l->w.scheme) return;
    dsq_qview w = l->w;
    w.bf16_terms = terms;
    size_t s = l->w.scheme->gemm_scratch(&w, T, nthreads);
    if (s > *mx) *mx = s;
}

static void mlp_need(const dsq_mlp *p, int64_t T, int nt, int tm, size_t *mx)
{
    gemm_need(&p->gate, T, nt, tm, mx);
    gemm_need(&p->up, T, nt, tm, mx);
    gemm_need(&p->down, T, nt, tm, mx);
}

/* Largest gemm scratch over the loaded linears for T rows (MLA naive also
 * runs kv_b_proj over ctx rows). Layers loaded later (lazy) get none and
 * let the gemm allocate. */
static size_t gemm_scratch_size(const dsq_model *m, int64_t T, int64_t ctx)
{
    size_t mx = 0;
    int nt = m->nthreads, tm = m->opts.bf16_terms;
    gemm_need(&m->w.lm_head, T, nt, tm, &mx);
    for (int64_t l = 0; l < m->n_layers; l++) {
        const dsq_layer *ly = &m->w.layers[l];
        if (!ly->loaded) continue;
        const dsq_linear *ls[] = { &ly->q, &ly->k, &ly->v, &ly->o, &ly->q_a, &ly->q_b, &ly->kv_a, &ly->router,
                                   &ly->idx_wq_b, &ly->idx_wk, &ly->idx_wp };
        for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) gemm_need(ls[i], T, nt, tm, &mx);
        gemm_need(&ly->kv_b_run, ctx > T ? ctx : T, nt, tm, &mx);
        mlp_need(&ly->mlp, T, nt, tm, &mx);
        mlp_need(&ly->shared, T, nt, tm, &mx);
        if (ly->experts)
            for (int64_t e = 0; e < m->cfg.n_routed_experts; e++) mlp_need(&ly->experts[e], T, nt, tm, &mx);
    }
    return mx;
}

int dsq_scratch_alloc(dsq_scratch *sc, const dsq_model *m, int64_t T, int64_t ctx)
{
    memset(sc, 0, sizeof *sc);
    const dsq_model_config *c = &m->cfg;
    const int64_t D = m->hidden, nt = m->nthreads;
    const int64_t E = c->n_routed_experts, K = c->num_experts_per_tok;
    sc->cap_T = T;
    sc->cap_ctx = ctx;
    sc->xb = falloc(T * D);
    sc->q = falloc(T * m->q_dim);
    sc->qa = falloc(T * (c->q_lora_rank > 0 ? c->q_lora_rank : 1));
    sc->kva = falloc(T * m->kv_width);
    sc->att = falloc(T * m->attn_out_dim);
    sc->proj = falloc(T * D);
    sc->g = falloc(T * m->max_ffn);
    sc->u = falloc(T * m->max_ffn);
    sc->cs = falloc(T * m->rope.dim);
    const int64_t rows = T > m->n_heads ? T : m->n_heads;
    sc->scores = falloc(rows * ctx);
    sc->vis = malloc((size_t)rows * sizeof(int32_t));
    int ok = sc->xb && sc->q && sc->qa && sc->kva && sc->att && sc->proj && sc->g && sc->u && sc->cs &&
             sc->scores && sc->vis;
    if (E > 0) {
        sc->moe_x = falloc(T * D);
        sc->moe_y = falloc(T * D);
        sc->moe_acc = falloc(T * D);
        sc->logits_r = falloc(T * E);
        sc->route_w = falloc(T * K);
        sc->route_idx = malloc((size_t)(T * K) * sizeof(int));
        sc->tok_list = malloc((size_t)T * sizeof(int32_t));
        sc->tok_w = falloc(T);
        sc->route_tmp = falloc(nt * 2 * E);
        ok = ok && sc->moe_x && sc->moe_y && sc->moe_acc && sc->logits_r && sc->route_w && sc->route_idx &&
             sc->tok_list && sc->tok_w && sc->route_tmp;
    }
    /* the naive path's expanded keys: DSA's naive rows see at most
     * index_topk keys (its sparse rows take the absorbed path, mla.c) */
    sc->cap_exp = m->dsa && c->index_topk < ctx ? c->index_topk : ctx;
    if (m->is_mla) {
        sc->qabs = falloc(T * m->n_heads * c->kv_lora_rank);
        ok = ok && sc->qabs;
        if (m->opts.mla_mode != DSQ_MLA_ABSORBED) {
            sc->kv_exp = falloc(sc->cap_exp * m->n_heads * (c->qk_nope_head_dim + c->v_head_dim));
            ok = ok && sc->kv_exp;
        }
    }
    if (m->dsa) {
        const int64_t Hi = c->index_n_heads, Di = c->index_head_dim;
        sc->cap_sel = c->index_topk < ctx ? c->index_topk : ctx;
        sc->iq = falloc(T * Hi * Di);
        sc->ik = falloc(T * Di);
        sc->iw = falloc(T * Hi);
        sc->sel = malloc((size_t)(T * sc->cap_sel) * sizeof(int32_t));
        sc->nsel = malloc((size_t)T * sizeof(int32_t));
        sc->iscore = falloc(nt * 2 * ctx);
        sc->itile = falloc(nt * 64 * (Di + Hi));
        sc->gather = falloc(sc->cap_sel * m->kv_width);
        ok = ok && sc->iq && sc->ik && sc->iw && sc->sel && sc->nsel && sc->iscore && sc->itile &&
             sc->gather;
    }
    sc->gemm_size = gemm_scratch_size(m, T, sc->cap_exp);
    if (sc->gemm_size) {
        sc->gemm_buf = dsq_aligned_alloc(sc->gemm_size);
        ok = ok && sc->gemm_buf;
    }
    if (!ok) {
        dsq_scratch_free(sc);
        return DSQ_ERR_NOMEM;
    }
    return DSQ_OK;
}

void dsq_scratch_free(dsq_scratch *sc)
{
    void *ps[] = { sc->xb, sc->q, sc->qa, sc->kva, sc->att, sc->proj, sc->g, sc->u, sc->moe_x, sc->moe_y,
                   sc->moe_acc, sc->logits_r, sc->route_w, sc->route_idx, sc->tok_list, sc->tok_w,
                   sc->route_tmp, sc->scores, sc->vis, sc->qabs, sc->kv_exp, sc->cs, sc->gemm_buf,
                   sc->iq, sc->ik, sc->iw, sc->sel, sc->nsel, sc->iscore, sc->itile, sc->gather };
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) free(ps[i]);
    memset(sc, 0, sizeof *sc);
}

dsq_state *dsq_state_create(const dsq_model *m, int max_batch, int64_t max_ctx)
{
    if (!m || max_batch < 1) return NULL;
    if (max_ctx <= 0) max_ctx = m->default_ctx;
    dsq_state *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->m = m;
    s->max_batch = max_batch;
    s->max_ctx = max_ctx;
    int64_t T = m->opts.prefill_chunk > max_batch ? m->opts.prefill_chunk : max_batch;
    if (T > max_ctx && max_ctx >= max_batch) T = max_ctx;
    s->pos = calloc((size_t)max_batch, sizeof *s->pos);
    s->kv = calloc((size_t)m->n_layers, sizeof *s->kv);
    s->x = falloc(T * m->hidden);
    s->positions = malloc((size_t)T * sizeof *s->positions);
    s->seq_of = malloc((size_t)T * sizeof *s->seq_of);
    int ok = s->pos && s->kv && s->x && s->positions && s->seq_of;
    size_t per_layer;
    if (ok && (dsq_mul_size((size_t)max_batch, (size_t)max_ctx, &per_layer) < 0 ||
               dsq_mul_size(per_layer, (size_t)m->kv_width, &per_layer) < 0))
        ok = 0;
    if (ok && m->is_mla && m->opts.kv_cache != DSQ_KV_F32) {
        /* quantized rows per layer, one float view for the layer being run (kvq.c) */
        s->kvq = calloc((size_t)m->n_layers, sizeof *s->kvq);
        size_t qb;
        ok = s->kvq && dsq_mul_size((size_t)max_batch, (size_t)max_ctx, &qb) == 0 &&
             dsq_mul_size(qb, dsq_kvq_row_bytes(m->opts.kv_cache, m->cfg.kv_lora_rank, m->cfg.qk_rope_head_dim),
                          &qb) == 0;
        for (int64_t l = 0; ok && l < m->n_layers; l++) {
            s->kvq[l] = dsq_aligned_alloc(qb ? qb : 1);
            ok = s->kvq[l] != NULL;
        }
        if (ok) ok = (s->kvf = falloc((int64_t)per_layer)) != NULL;
    }
    for (int64_t l = 0; ok && !s->kvq && l < m->n_layers; l++) {
        s->kv[l] = falloc((int64_t)per_layer);
        ok = s->kv[l] != NULL;
    }
    if (ok && m->dsa) {
        /* the indexer's keys: dsa_row bytes per token and layer (dsa.h) */
        s->icache = calloc((size_t)m->n_layers, sizeof *s->icache);
        ok = s->icache != NULL;
        size_t ib;
        if (ok && (dsq_mul_size((size_t)max_batch, (size_t)max_ctx, &ib) < 0 ||
                   dsq_mul_size(ib, m->dsa_row, &ib) < 0))
            ok = 0;
        for (int64_t l = 0; ok && l < m->n_layers; l++) {
            s->icache[l] = dsq_aligned_alloc(ib ? ib : 1);
            ok = s->icache[l] != NULL;
        }
    }
    if (ok) ok = dsq_scratch_alloc(&s->sc, m, T, max_ctx) == DSQ_OK;
    if (!ok) {
        dsq_state_free(s);
        return NULL;
    }
    return s;
}

void dsq_state_free(dsq_state *s)
{
    if (!s) return;
    if (s->kv)
        for (int64_t l = 0; l < s->m->n_layers; l++) free(s->kv[l]);
    free(s->kv);
    if (s->icache)
        for (int64_t l = 0; l < s->m->n_layers; l++) free(s->icache[l]);
    free(s->icache);
    if (s->kvq)
        for (int64_t l = 0; l < s->m->n_layers; l++) free(s->kvq[l]);
    free(s->kvq);
    free(s->kvf);
    free(s->pos);
    free(s->x);
    free(s->positions);
    free(s->seq_of);
    dsq_scratch_free(&s->sc);
    free(s);
}

void dsq_state_reset(dsq_state *s, int seq)
{
    if (s && seq >= 0 && seq < s->max_batch) s->pos[seq] = 0;
}

int dsq_state_truncate(dsq_state *s, int seq, int64_t pos)
{
    if (!s || seq < 0 || seq >= s->max_batch || pos < 0 || pos > s->pos[seq]) return DSQ_ERR_INVALID_ARG;
    s->pos[seq] = pos;   /* entries past pos are simply overwritten later */
    return DSQ_OK;
}

int64_t dsq_state_pos(const dsq_state *s, int seq)
{
    return (s && seq >= 0 && seq < s->max_batch) ? s->pos[seq] : -1;
}

int64_t dsq_state_max_ctx(const dsq_state *s) { return s ? s->max_ctx : 0; }
