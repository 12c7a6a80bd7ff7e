/* awq_attn.c - the attention-input group's loss on the whole MLA block
 * output (awq.h, ATTN): AutoAWQ inspects self_attn for this group, and the
 * q_a / kv_a output error picks different scales from the block's. */
#include "awq.h"
#include "awq_int.h"
#include "dsq_mem.h"
#include "ops.h"

#include <cblas.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>


/* The MLA block after q_a / kv_a, in float (engine/mla.c's naive prefill
 * path: the same norms, RoPE and attention kernel, without the KV cache). */
typedef struct mla_blk {
    const dsq_model *m;
    const dsq_layer *ly;
    int64_t H, nope, rope, vd, R, qk, qr, kvw, hidden;
    float *wqb, *wkvb, *wo;        /* float weights; wqb NULL without q_lora */
    float *qa, *q, *kva, *kvx, *att, *S, *cs;   /* scratch for T rows */
    int32_t *vis;
} mla_blk;

static void mla_blk_free(mla_blk *b)
{
    free(b->wqb);
    free(b->wkvb);
    free(b->wo);
    free(b->qa);
    free(b->q);
    free(b->kva);
    free(b->kvx);
    free(b->att);
    free(b->S);
    free(b->cs);
    free(b->vis);
}

static int mla_blk_init(mla_blk *b, const dsq_scale_group *g, int64_t T, dsq_pool *pool)
{
    memset(b, 0, sizeof *b);
    const dsq_model *m = g->attn_model;
    const dsq_model_config *c = dsq_model_get_config(m);
    const dsq_layer *ly = &dsq_model_weights(m)->layers[g->layer];
    b->m = m;
    b->ly = ly;
    b->H = m->n_heads;
    b->nope = c->qk_nope_head_dim;
    b->rope = c->qk_rope_head_dim;
    b->vd = c->v_head_dim;
    b->R = c->kv_lora_rank;
    b->qk = b->nope + b->rope;
    b->qr = c->q_lora_rank;
    b->kvw = g->lin[1]->out;
    b->hidden = ly->o.out;
    /* the shapes the block relies on (hostile configs must not index past) */
    if (b->kvw != b->R + b->rope || ly->kv_b.in != b->R || ly->kv_b.out != b->H * (b->nope + b->vd) ||
        ly->o.in != b->H * b->vd || m->rope.dim != b->rope || T > INT32_MAX / 2 ||
        (b->qr > 0 ? (g->lin[0]->out != b->qr || ly->q_b.in != b->qr || ly->q_b.out != b->H * b->qk)
                   : g->lin[0]->out != b->H * b->qk))
        return DSQ_ERR_SHAPE;
    if (b->qr > 0) b->wqb = dsq_awq_deq_f32(&ly->q_b, pool);
    b->wkvb = dsq_awq_deq_f32(&ly->kv_b, pool);
    b->wo = dsq_awq_deq_f32(&ly->o, pool);
    const size_t t = (size_t)T;
    b->qa = malloc(t * (size_t)(b->qr > 0 ? b->qr : 1) * sizeof(float));
    b->q = malloc(t * (size_t)(b->H * b->qk) * sizeof(float));
    b->kva = malloc(t * (size_t)b->kvw * sizeof(float));
    b->kvx = malloc(t * (size_t)(b->H * (b->nope + b->vd)) * sizeof(float));
    b->att = malloc(t * (size_t)(b->H * b->vd) * sizeof(float));
    b->S = malloc(t * t * sizeof(float));
    b->cs = malloc(t * (size_t)b->rope * sizeof(float));
    b->vis = malloc(t * sizeof(int32_t));
    if ((b->qr > 0 && !b->wqb) || !b->wkvb || !b->wo || !b->qa || !b->q || !b->kva || !b->kvx || !b->att || !b->S ||
        !b->cs || !b->vis)
        return DSQ_ERR_NOMEM;
    const int half = (int)b->rope / 2;
    for (int64_t i = 0; i < T; i++) {
        dsq_rope_cos_sin(&m->rope, i, b->cs + i * b->rope, b->cs + i * b->rope + half);
        b->vis[i] = (int32_t)(i + 1);   /* causal: positions 0..T-1 of one sequence */
    }
    return DSQ_OK;
}

/* out [T][hidden] = the block on one sequence's q_a (or q) output yq
 * [T][qr | H*qk] and kv_a output ykv [T][R + rope] */
static void mla_blk_run(mla_blk *b, const float *yq, const float *ykv, int64_t T, float *out, dsq_pool *pool)
{
    const dsq_model *m = b->m;
    const int64_t H = b->H, qk = b->qk, hw = b->nope + b->vd, half = b->rope / 2;
    if (b->qr > 0) {
        dsq_rmsnorm_rows(b->qa, yq, b->ly->q_a_norm, (int)T, (int)b->qr, m->eps);
        dsq_awq_sgemm_nt(b->qa, T, b->wqb, H * qk, b->qr, b->q);
    } else {
        memcpy(b->q, yq, (size_t)T * (size_t)(H * qk) * sizeof(float));
    }
    memcpy(b->kva, ykv, (size_t)T * (size_t)b->kvw * sizeof(float));
    for (int64_t t = 0; t < T; t++) {
        const float *c = b->cs + t * b->rope, *s = c + half;
        float *kv = b->kva + t * b->kvw;
        dsq_rmsnorm(kv, kv, b->ly->kv_a_norm, (int)b->R, m->eps);
        dsq_rope_apply(&m->rope, kv + b->R, c, s);
        for (int64_t h = 0; h < H; h++) dsq_rope_apply(&m->rope, b->q + t * H * qk + h * qk + b->nope, c, s);
    }
    /* expanded k_nope | v per head from the normed latents (rows kvw apart) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)(H * hw), (int)b->R, 1.0f, b->kva, (int)b->kvw,
                b->wkvb, (int)b->R, 0.0f, b->kvx, (int)(H * hw));
    for (int64_t h = 0; h < H; h++) {
        const float *kx = b->kvx + h * hw;
        dsq_attend_block((int)T, (int)T, b->q + h * qk, (int)(H * qk), kx, (int)(H * hw), (int)b->nope,
                         b->q + h * qk + b->nope, (int)(H * qk), b->kva + b->R, (int)b->kvw, (int)b->rope, kx + b->nope,
                         (int)(H * hw), (int)b->vd, b->vis, m->attn_scale, b->S, b->att + h * b->vd, (int)(H * b->vd),
                         pool);
    }
    dsq_awq_sgemm_nt(b->att, T, b->wo, b->hidden, H * b->vd, out);
}

int dsq_awq_attn_block(const dsq_scale_group *g, const float *x, int64_t T, float *out, dsq_pool *pool,
                       dsq_diag *d)
{
    if (!g || !g->attn_model || g->nlin != 2 || !x || !out || T <= 0)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, g ? g->prev : NULL, -1, "not an attention-input group");
    mla_blk b;
    int rc = mla_blk_init(&b, g, T, pool);
    float *w[2] = { NULL, NULL }, *y[2] = { NULL, NULL };
    for (int i = 0; i < 2 && rc == DSQ_OK; i++) {
        w[i] = dsq_awq_deq_f32(g->lin[i], pool);
        y[i] = malloc((size_t)T * (size_t)g->lin[i]->out * sizeof(float));
        if (!w[i] || !y[i]) rc = DSQ_ERR_NOMEM;
        else dsq_awq_sgemm_nt(x, T, w[i], g->lin[i]->out, g->n, y[i]);
    }
    if (rc == DSQ_OK) mla_blk_run(&b, y[0], y[1], T, out, pool);
    mla_blk_free(&b);
    for (int i = 0; i < 2; i++) {
        free(w[i]);
        free(y[i]);
    }
    if (rc < 0) return dsq_fail(d, rc, NULL, g->prev, -1, "cannot run the attention block (%s)", dsq_strerror(rc));
    return DSQ_OK;
}

/* loss[c] = squared error of the block output for candidate c over the
 * site's kept sequences: the consumers run once per candidate on all N x T
 * rows (one quantization each), the block per sequence. */
int dsq_awq_attn_losses(const dsq_scale_group *g, const dsq_act_stats *site, dsq_awq_cons *cs, const dsq_search_opts *o,
                       float *const *cand, int C, double *loss, double *elems, int64_t *rows, dsq_diag *d)
{
    const int64_t N = site->seq_n, T = site->seq_len, NT = N * T, n = g->n;
    mla_blk b;
    int rc = mla_blk_init(&b, g, T, o->pool);
    float *w[2] = { NULL, NULL }, *yref[2] = { NULL, NULL }, *y[2] = { NULL, NULL };
    float *xs = NULL, *ref = NULL, *out = NULL;
    uint8_t *blob = NULL;
    if (rc == DSQ_OK) {
        size_t maxblob = cs[0].blob_size > cs[1].blob_size ? cs[0].blob_size : cs[1].blob_size;
        for (int i = 0; i < 2; i++) {
            w[i] = dsq_awq_deq_f32(cs[i].l, o->pool);
            yref[i] = malloc((size_t)NT * (size_t)cs[i].l->out * sizeof(float));
            y[i] = malloc((size_t)NT * (size_t)cs[i].l->out * sizeof(float));
            if (!w[i] || !yref[i] || !y[i]) rc = DSQ_ERR_NOMEM;
        }
        xs = malloc((size_t)NT * (size_t)n * sizeof *xs);
        ref = malloc((size_t)NT * (size_t)b.hidden * sizeof *ref);
        out = malloc((size_t)T * (size_t)b.hidden * sizeof *out);
        blob = maxblob ? malloc(maxblob) : NULL;
        if (!xs || !ref || !out || (maxblob && !blob)) rc = DSQ_ERR_NOMEM;
    }
    if (rc < 0) rc = dsq_fail(d, rc, NULL, g->prev, -1, "cannot set up the attention block loss (%s)",
                             dsq_strerror(rc));
    /* the float block on every kept sequence */
    for (int i = 0; i < 2 && rc == DSQ_OK; i++) dsq_awq_sgemm_nt(site->seqs, NT, w[i], cs[i].l->out, n, yref[i]);
    for (int64_t k = 0; k < N && rc == DSQ_OK; k++)
        mla_blk_run(&b, yref[0] + k * T * cs[0].l->out, yref[1] + k * T * cs[1].l->out, T,
                    ref + k * T * b.hidden, o->pool);
    for (int c = 0; c < C && rc == DSQ_OK; c++) {
        if (o->cancel && *o->cancel) {
            rc = dsq_fail(d, DSQ_ERR_INTERRUPTED, NULL, g->prev, -1, "scale search interrupted");
            break;
        }
        const float *s = c == 0 ? NULL : cand[c];
        for (int64_t r = 0; r < NT; r++)
            for (int64_t j = 0; j < n; j++) xs[r * n + j] = s ? site->seqs[r * n + j] / s[j] : site->seqs[r * n + j];
        const float *yy[2];
        for (int i = 0; i < 2 && rc == DSQ_OK; i++) {
            yy[i] = yref[i];   /* float consumer: exact under any s */
            if (cs[i].sc) {
                rc = dsq_awq_run_quant(&cs[i], w[i], s, xs, NT, blob, y[i], o->pool, d);
                yy[i] = y[i];
            }
        }
        for (int64_t k = 0; k < N && rc == DSQ_OK; k++) {
            mla_blk_run(&b, yy[0] + k * T * cs[0].l->out, yy[1] + k * T * cs[1].l->out, T, out, o->pool);
            loss[c] += dsq_awq_sqdiff(out, ref + k * T * b.hidden, (size_t)T * (size_t)b.hidden);
        }
    }
    if (rc == DSQ_OK) {
        *elems = (double)NT * (double)b.hidden;
        *rows = NT;
    }
    mla_blk_free(&b);
    for (int i = 0; i < 2; i++) {
        free(w[i]);
        free(yref[i]);
        free(y[i]);
    }
    free(xs);
    free(ref);
    free(out);
    free(blob);
    return rc;
}
