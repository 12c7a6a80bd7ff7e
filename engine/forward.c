/* forward.c - the forward pass: embed, decoder blocks, final norm, lm_head.
 *
 * Block (all architectures):
 *   x = x + attn(rmsnorm(x, input_layernorm))
 *   x = x + ffn(rmsnorm(x, post_attention_layernorm))     (MLP or MoE)
 * then logits = lm_head(rmsnorm(x, model.norm)).
 *
 * dsq_forward processes a sequence's new tokens in chunks of prefill_chunk
 * rows so every linear is one GEMM over the chunk; decode is the same code
 * with T = 1; dsq_forward_batch_decode stacks one token of several
 * sequences into one T = nseq pass (attention reads each token's own
 * sequence cache).
 *
 * Rows whose output is never read skip the last layer's FFN: with
 * DSQ_FWD_LAST_LOGITS all but the call's last row, without logits every
 * row (dsq_run.out0). Earlier layers and the last layer's attention still
 * run on every row: they fill the cache that later tokens read. llama.cpp
 * does the same (its graphs keep only the output rows before the last
 * FFN); on a 1-layer model that is most of a prefill's work (p128 of the
 * e16 V3 layer: 50 of 151 GFLOP), on V3's 61 layers 1/61 of the FFNs. */
#include "model.h"

#include <stdlib.h>
#include <string.h>

void dsq_rope_rows(const dsq_model *m, const int32_t *positions, int T, float *cs)
{
    const int dim = m->rope.dim, half = dim / 2;
    for (int t = 0; t < T; t++) dsq_rope_cos_sin(&m->rope, positions[t], cs + (size_t)t * dim, cs + (size_t)t * dim + half);
}

int dsq_block_forward(dsq_run *r, float *x)
{
    const dsq_model *m = r->m;
    const dsq_layer *ly = &m->w.layers[r->layer];
    dsq_scratch *sc = r->sc;
    dsq_prof_mark mk;
    dsq_prof_begin(m->prof, &mk);
    dsq_add_rmsnorm_rows(x, NULL, sc->xb, ly->attn_norm, r->T, (int)m->hidden, m->eps, m->pool);
    dsq_prof_end(m->prof, &mk, "block: norms + residual adds", 0.0);
    DSQ_TRY(m->is_mla ? dsq_mla_forward(r, sc->xb) : dsq_attn_forward(r, sc->xb));
    /* rows whose output nobody reads (r->out0: the last layer when only
     * later rows' logits are asked for) skip the FFN, as llama.cpp's graphs
     * drop them (ggml_get_rows on the output ids) before the last FFN: the
     * cache entries these rows leave for later tokens are all written above */
    const int T = r->T, out0 = r->out0 < 0 ? 0 : r->out0 < T ? r->out0 : T;
    if (out0 == T) return DSQ_OK;
    const size_t skip = (size_t)out0 * (size_t)m->hidden;
    dsq_prof_begin(m->prof, &mk);
    x += skip;
    r->T = T - out0;
    dsq_add_rmsnorm_rows(x, sc->proj + skip, sc->xb, ly->ffn_norm, r->T, (int)m->hidden, m->eps, m->pool);
    dsq_prof_end(m->prof, &mk, "block: norms + residual adds", 0.0);
    int rc = ly->is_moe ? dsq_moe_forward(r, sc->xb) : dsq_mlp_forward(r, &ly->mlp, sc->xb, r->T, NULL, sc->proj);
    r->T = T;
    if (rc < 0) return rc;
    dsq_prof_begin(m->prof, &mk);
    dsq_add_rmsnorm_rows(x, sc->proj, NULL, NULL, T - out0, (int)m->hidden, m->eps, m->pool);
    dsq_prof_end(m->prof, &mk, "block: norms + residual adds", 0.0);
    return DSQ_OK;
}

int dsq_model_embed(dsq_model *m, const int32_t *tokens, int n, float *out, dsq_diag *d)
{
    const dsq_qview *v = &m->w.embed.w;
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= m->vocab)
            return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "token id %d out of range [0, %lld)",
                            (int)tokens[i], (long long)m->vocab);
        v->scheme->dequantize(v, tokens[i], 1, out + (size_t)i * (size_t)m->hidden);
    }
    return DSQ_OK;
}

/* Final norm of T rows of x into tmp, then lm_head into logits. */
static int head_rows(dsq_run *r, const float *x, int T, float *tmp, float *logits)
{
    dsq_model *m = r->m;
    dsq_prof_mark mk;
    dsq_prof_begin(m->prof, &mk);
    /* add NULL: x is only read */
    dsq_add_rmsnorm_rows((float *)x, NULL, tmp, m->w.final_norm, T, (int)m->hidden, m->eps, m->pool);
    dsq_prof_end(m->prof, &mk, "block: norms + residual adds", 0.0);
    DSQ_TRY(dsq_linear_hook_call(r, &m->w.lm_head, tmp, T, NULL));
    return dsq_linear_gemm(r, &m->w.lm_head, tmp, T, logits);
}

/* First row of a chunk [c0, c0 + T) of an n-token call whose last-layer
 * output is read: none without logits (T), the call's last row with
 * DSQ_FWD_LAST_LOGITS, else every row (0). */
static int last_out0(int c0, int T, int n, const float *logits, unsigned flags)
{
    if (!logits) return T;
    if (flags & DSQ_FWD_LAST_LOGITS) return c0 + T == n ? T - 1 : T;
    return 0;
}

/* Run all layers over s->x [T] with r set up (eager models); out0: the
 * last layer's r->out0. */
static int run_layers(dsq_run *r, dsq_state *s, int out0, dsq_diag *d)
{
    dsq_model *m = r->m;
    for (int l = 0; l < m->n_layers; l++) {
        int loaded_here = 0;
        if (!m->w.layers[l].loaded) {
            DSQ_TRY(dsq_model_layer_load(m, l, d));
            loaded_here = 1;
        }
        r->layer = l;
        r->kv.cache = s->kv[l];
        r->kv.icache = s->icache ? s->icache[l] : NULL;
        if (s->kvq) dsq_kvq_view(s, l, r);
        r->out0 = l == m->n_layers - 1 ? out0 : 0;
        int rc = dsq_block_forward(r, s->x);
        if (loaded_here && m->opts.lazy) dsq_model_layer_release(m, l);
        if (rc < 0) return dsq_fail(d, rc, m->path, NULL, -1, "forward failed in layer %d", l);
    }
    return DSQ_OK;
}

static void run_init(dsq_run *r, dsq_model *m, dsq_state *s, int T, int seq, int absorbed)
{
    memset(r, 0, sizeof *r);
    r->m = m;
    r->sc = &s->sc;
    r->T = T;
    r->positions = s->positions;
    r->kv.ctx = s->max_ctx;
    r->kv.seq_stride = s->max_ctx * m->kv_width;
    r->kv.iseq_stride = s->max_ctx * (int64_t)m->dsa_row;
    r->kv.seq0 = seq;
    r->mla_absorbed = absorbed;
}

/* Logits of rows [0, n) of x (or just the last with DSQ_FWD_LAST_LOGITS),
 * in chunks that fit the scratch. */
static int head_all(dsq_run *r, dsq_state *s, const float *x, int n, float *logits, unsigned flags)
{
    const dsq_model *m = r->m;
    if (flags & DSQ_FWD_LAST_LOGITS) return head_rows(r, x + (size_t)(n - 1) * (size_t)m->hidden, 1, s->sc.xb, logits);
    for (int c0 = 0; c0 < n; c0 += (int)s->sc.cap_T) {
        int T = n - c0 < s->sc.cap_T ? n - c0 : (int)s->sc.cap_T;
        DSQ_TRY(head_rows(r, x + (size_t)c0 * (size_t)m->hidden, T, s->sc.xb, logits + (size_t)c0 * (size_t)m->vocab));
    }
    return DSQ_OK;
}

/* Lazy models: layer-outer, so each layer is materialised once per call.
 * Chunk c of layer l sees the cache entries chunks < c wrote in layer l. */
static int forward_lazy(dsq_model *m, dsq_state *s, int seq, const int32_t *tokens, int n, float *logits,
                        unsigned flags, int absorbed, dsq_diag *d)
{
    const int chunk = (int)s->sc.cap_T;
    const int64_t pos0 = s->pos[seq];
    float *xs = malloc((size_t)n * (size_t)m->hidden * sizeof *xs);
    if (!xs) return DSQ_ERR_NOMEM;
    int rc = dsq_model_embed(m, tokens, n, xs, d);
    dsq_run r;
    for (int l = 0; rc == DSQ_OK && l < m->n_layers; l++) {
        int loaded_here = !m->w.layers[l].loaded;
        if (loaded_here) rc = dsq_model_layer_load(m, l, d);
        for (int c0 = 0; rc == DSQ_OK && c0 < n; c0 += chunk) {
            int T = n - c0 < chunk ? n - c0 : chunk;
            for (int t = 0; t < T; t++) s->positions[t] = (int32_t)(pos0 + c0 + t);
            dsq_rope_rows(m, s->positions, T, s->sc.cs);
            run_init(&r, m, s, T, seq, absorbed);
            r.layer = l;
            r.kv.cache = s->kv[l];
            r.kv.icache = s->icache ? s->icache[l] : NULL;
            if (s->kvq) dsq_kvq_view(s, l, &r);
            r.out0 = l == m->n_layers - 1 ? last_out0(c0, T, n, logits, flags) : 0;
            rc = dsq_block_forward(&r, xs + (size_t)c0 * (size_t)m->hidden);
            if (rc < 0) rc = dsq_fail(d, rc, m->path, NULL, -1, "forward failed in layer %d", l);
        }
        if (loaded_here) dsq_model_layer_release(m, l);
    }
    if (rc == DSQ_OK) {
        s->pos[seq] += n;
        run_init(&r, m, s, 0, seq, absorbed);
        if (logits) rc = head_all(&r, s, xs, n, logits, flags);
    }
    free(xs);
    return rc;
}

int dsq_forward(dsq_model *m, dsq_state *s, int seq, const int32_t *tokens, int n, float *logits,
                unsigned flags, dsq_diag *d)
{
    if (!m || !s || s->m != m || seq < 0 || seq >= s->max_batch || n < 0 || (n > 0 && !tokens))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "bad forward arguments (seq %d, n %d)", seq, n);
    if (n == 0) return DSQ_OK;
    if (s->pos[seq] + n > s->max_ctx)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "context full: %lld + %d tokens > %lld",
                        (long long)s->pos[seq], n, (long long)s->max_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->vocab)
            return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "token id %d out of range [0, %lld)",
                            (int)tokens[i], (long long)m->vocab);
    const int chunk = (int)s->sc.cap_T;
    const int64_t V = m->vocab;
    int absorbed = m->opts.mla_mode == DSQ_MLA_ABSORBED || (m->opts.mla_mode == DSQ_MLA_AUTO && n == 1);
    if (m->opts.lazy) return forward_lazy(m, s, seq, tokens, n, logits, flags, absorbed, d);
    for (int c0 = 0; c0 < n; c0 += chunk) {
        int T = n - c0 < chunk ? n - c0 : chunk;
        DSQ_TRY(dsq_model_embed(m, tokens + c0, T, s->x, d));
        for (int t = 0; t < T; t++) s->positions[t] = (int32_t)(s->pos[seq] + t);
        dsq_rope_rows(m, s->positions, T, s->sc.cs);
        dsq_run r;
        run_init(&r, m, s, T, seq, absorbed);
        DSQ_TRY(run_layers(&r, s, last_out0(c0, T, n, logits, flags), d));
        s->pos[seq] += T;
        if (!logits) continue;
        if (flags & DSQ_FWD_LAST_LOGITS) {
            if (c0 + T == n)
                DSQ_TRY(head_rows(&r, s->x + (size_t)(T - 1) * (size_t)m->hidden, 1, s->sc.xb, logits));
        } else {
            DSQ_TRY(head_rows(&r, s->x, T, s->sc.xb, logits + (size_t)c0 * (size_t)V));
        }
    }
    return DSQ_OK;
}

int dsq_forward_batch_decode(dsq_model *m, dsq_state *s, const int32_t *tok_per_seq, const int *active,
                             int nseq, float *logits, dsq_diag *d)
{
    if (!m || !s || s->m != m || nseq < 0 || nseq > s->sc.cap_T || (nseq > 0 && (!tok_per_seq || !active)))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "bad batch arguments (nseq %d)", nseq);
    if (nseq == 0) return DSQ_OK;
    for (int i = 0; i < nseq; i++) {
        int q = active[i];
        if (q < 0 || q >= s->max_batch)
            return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "sequence %d out of range", q);
        for (int k = 0; k < i; k++)
            if (active[k] == q)
                return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "sequence %d listed twice", q);
        if (s->pos[q] + 1 > s->max_ctx)
            return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "context full for sequence %d", q);
        s->positions[i] = (int32_t)s->pos[q];
        s->seq_of[i] = q;
    }
    DSQ_TRY(dsq_model_embed(m, tok_per_seq, nseq, s->x, d));
    dsq_rope_rows(m, s->positions, nseq, s->sc.cs);
    dsq_run r;
    run_init(&r, m, s, nseq, 0, 1);
    r.kv.seq_of = s->seq_of;
    DSQ_TRY(run_layers(&r, s, logits ? 0 : nseq, d));
    for (int i = 0; i < nseq; i++) s->pos[active[i]]++;
    if (logits) DSQ_TRY(head_rows(&r, s->x, nseq, s->sc.xb, logits));
    return DSQ_OK;
}

/* ---- per-layer API ----------------------------------------------------- */

int dsq_layer_forward(dsq_model *m, int layer, float *hidden, int T, const int32_t *positions,
                      dsq_linear_hook hook, void *hook_ctx, unsigned flags, dsq_diag *d)
{
    if (!m || layer < 0 || layer >= m->n_layers || T <= 0 || !hidden)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "bad layer_forward arguments (layer %d, T %d)",
                        layer, T);
    int loaded_here = 0;
    if (!m->w.layers[layer].loaded) {
        DSQ_TRY(dsq_model_layer_load(m, layer, d));
        loaded_here = 1;
    }
    dsq_scratch sc;
    int32_t *pos = malloc((size_t)T * sizeof *pos);
    float *cache = malloc((size_t)T * (size_t)m->kv_width * sizeof *cache);
    uint8_t *icache = m->dsa ? malloc((size_t)T * m->dsa_row) : NULL;
    /* kv_exp must exist for the naive path whatever mla_mode says */
    int saved_mode = m->opts.mla_mode;
    m->opts.mla_mode = DSQ_MLA_NAIVE;
    int rc = (pos && cache && (icache || !m->dsa)) ? dsq_scratch_alloc(&sc, m, T, T) : DSQ_ERR_NOMEM;
    m->opts.mla_mode = saved_mode;
    if (rc == DSQ_OK) {
        for (int t = 0; t < T; t++) pos[t] = positions ? positions[t] : t;
        dsq_rope_rows(m, pos, T, sc.cs);
        dsq_run r;
        memset(&r, 0, sizeof r);
        r.m = m;
        r.sc = &sc;
        r.layer = layer;
        r.T = T;
        r.positions = pos;
        r.kv.cache = cache;
        r.kv.ctx = T;
        r.kv.seq_stride = 0;
        r.kv.index_is_t = 1;
        r.kv.icache = icache;
        r.mla_absorbed = 0;   /* hooks must see kv_b_proj's input */
        r.hook = hook;
        r.hook_ctx = hook_ctx;
        r.flags = flags;
        rc = dsq_block_forward(&r, hidden);
        dsq_scratch_free(&sc);
    }
    free(pos);
    free(cache);
    free(icache);
    if (loaded_here && m->opts.lazy) dsq_model_layer_release(m, layer);
    if (rc < 0) return dsq_fail(d, rc, m->path, NULL, -1, "layer %d forward failed", layer);
    return DSQ_OK;
}

int dsq_model_head(dsq_model *m, const float *hidden, int T, float *logits, dsq_linear_hook hook, void *hook_ctx,
                   dsq_diag *d)
{
    if (!m || !hidden || !logits || T <= 0)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "bad head arguments");
    float *tmp = malloc((size_t)T * (size_t)m->hidden * sizeof *tmp);
    if (!tmp) return DSQ_ERR_NOMEM;
    dsq_run r;
    memset(&r, 0, sizeof r);
    r.m = m;
    r.layer = (int)m->n_layers;
    r.T = T;
    r.hook = hook;
    r.hook_ctx = hook_ctx;
    int rc = head_rows(&r, hidden, T, tmp, logits);
    free(tmp);
    return rc;
}
