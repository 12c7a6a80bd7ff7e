/* mla.c - DeepSeek multi-head latent attention (docs/checkpoints.md,
 * "Multi-head latent attention").
 *
 *   q    = q_b(q_a_layernorm(q_a(x)))  (or q_proj(x) when q_lora_rank is 0)
 *          [T, H, nope + rope]; RoPE (adjacent pairs) on the rope part
 *   kv_a = kv_a_proj_with_mqa(x) = latent [kv_lora] | k_pe [rope]
 *   cache: kv_a_layernorm(latent) and RoPE(k_pe), one k_pe shared by all heads
 *
 * Naive path (prefill): expand every cached latent through kv_b_proj into
 * k_nope | v per head ([P, H, nope + v]) and attend with
 * scores = (q_nope . k_nope + q_pe . k_pe) * softmax_scale.
 *
 * Absorbed path (decode): never expand the cache. With kv_b viewed as
 * [H, nope + v, kv_lora]:
 *   q'    = q_nope W_UK[h]              (kv_lora values per head)
 *   score = (q' . latent_j + q_pe . k_pe_j) * softmax_scale
 *   ctx   = sum_j p_j latent_j;  out_h = W_UV[h] ctx
 * which is the same function reassociated (agrees with naive to float
 * rounding). softmax_scale = qk_head^-0.5 * mscale^2 under YaRN.
 *
 * DSA (V3.2, dsa.h): the indexer's keys join its cache with the latent's;
 * rows that can see more than index_topk keys attend only to the keys the
 * indexer selected. Those rows take the absorbed path in prefill as in
 * decode, over just their selected latent and k_pe rows (gathered: at most
 * index_topk rows per token, whatever the context), so a prefill chunk
 * costs O(T x index_topk) and never expands the whole cache through
 * kv_b_proj. The rows before them (a prefill from position 0 up to
 * index_topk), which see every visible key, take the naive path over the
 * keys they see, unless they are too few to pay for its expansion
 * (naive_dearer). DeepSeek's sparse kernels use the absorbed (MQA) form for
 * prefill too: a gathered row is one latent shared by every head, where an
 * expanded row is per head. In fp8 mode the normed latent is rounded
 * through e4m3 before it is cached. */
#include "model.h"
#include "dsq_mem.h"
#include "kernels.h"

#include <stdlib.h>
#include <string.h>

/* The absorbed path's q' = q_nope W_UK[h] is a transposed product (rows
 * scaled and summed), which no gemm kernel offers. F32 rows use dsq_axpy;
 * the BF16 loop is compiled for AVX-512 and AVX2 here as dsq_axpy is (ops.c:
 * picked at load time, the same mul and add per lane, the same bits). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define ROW_CLONES __attribute__((target_clones("avx512f", "avx2", "default"), optimize("O3")))
#else
#define ROW_CLONES
#endif

/* y[0..n) += a * row, row stored as BF16 or F32 */
ROW_CLONES static void row_axpy(float *y, float a, const uint8_t *row, int bf16, int64_t n)
{
    if (bf16) {
        const uint16_t *r = (const uint16_t *)(const void *)row;
        for (int64_t i = 0; i < n; i++) y[i] += a * dsq_bf16_to_f32(r[i]);
    } else {
        dsq_axpy(y, a, (const float *)(const void *)row, (size_t)n);
    }
}

/* Jobs below this many multiply-adds run on the caller's thread: waking the
 * pool costs about 10 us, more than a decode step's absorb work on a small
 * model. Each item's result does not depend on the thread, so this changes
 * no value. */
static dsq_pool *pool_for(dsq_pool *pool, double macs)
{
    return macs < (double)(1 << 20) ? NULL : pool;
}

typedef struct mla_job {
    dsq_run *r;
    const dsq_layer *ly;
    int64_t H, nope, rope, vd, R;
    int t0, nt; /* the absorbed path's rows [t0, t0 + nt) */
} mla_job;

/* Absorbed items are head-major (item = h * nt + t): the rows of one head
 * follow each other, so a prefill chunk reads W_UK[h] / W_UV[h] once from
 * memory, not once per row. Each item is its own product: the order
 * changes no value. */
static void abs_item(const mla_job *j, size_t item, int *t, int64_t *h)
{
    *t = j->t0 + (int)(item % (size_t)j->nt);
    *h = (int64_t)(item / (size_t)j->nt);
}

/* A quantized kv_b (its F32 copy in kv_b_run) is read by the absorbed path
 * from its own codes instead: KVB_CHUNK floats of rows at a time are
 * dequantized by the kernel level's dequant_tile (the same values, bit for
 * bit, as the copy holds: both are the scheme's dequantization) into a stack
 * buffer and used from L1 exactly as the copy's rows would be. Decode then
 * streams the int8 / int4 rows instead of 4 bytes per weight (V3: 64 MiB of
 * F32 per layer and token vs 16 MiB int8 / 8 MiB int4). Rows wider than the
 * buffer use the copy. */
#define KVB_CHUNK 4096

/* Levels with gemv_t / gemv_i (kernels.h) skip even that: the absorbed
 * products read the int codes in place, one pass and no buffer (the dequant
 * and store, then reload, cost about as much as streaming the codes). The
 * products agree with the copy's to float rounding, not bit for bit. */
static int kvb_in_place(const dsq_layer *ly, const dsq_kernels *kl)
{
    uint32_t id = ly->kv_b.w.scheme->id;
    return ly->kv_b_run.w.scheme != ly->kv_b.w.scheme && kl->gemv_t && kl->gemv_i &&
           (id == DSQ_SCHEME_W8A8_DYNAMIC || id == DSQ_SCHEME_W8A8 || id == DSQ_SCHEME_W4A8 ||
            id == DSQ_SCHEME_AWQ_W4A16);
}

static int64_t kvb_chunk_rows(const dsq_layer *ly)
{
    if (ly->kv_b_run.w.scheme == ly->kv_b.w.scheme) return 0;   /* BF16 / F32: in place */
    return KVB_CHUNK / (int64_t)(ly->kvb_stride / sizeof(float));
}

/* q' = q_nope W_UK[h] (rows h*hw .. h*hw + nope of kv_b) into qabs[t, h] */
static void absorb_q_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    mla_job *j = ctx;
    const dsq_run *r = j->r;
    const dsq_layer *ly = j->ly;
    int t;
    int64_t h;
    abs_item(j, item, &t, &h);
    const int64_t hw = j->nope + j->vd, R = j->R;
    const float *q = r->sc->q + (size_t)t * r->m->q_dim + h * (j->nope + j->rope);
    float *qp = r->sc->qabs + ((size_t)t * j->H + h) * R;
    memset(qp, 0, (size_t)R * sizeof *qp);
    const int64_t ch = kvb_chunk_rows(ly);
    const dsq_kernels *kl = dsq_kernels_get();
    if (kvb_in_place(ly, kl)) {
        kl->gemv_t(&ly->kv_b.w, h * hw, h * hw + j->nope, q, qp);
        return;
    }
    if (ch > 0) {
        _Alignas(64) float buf[KVB_CHUNK];
        const int64_t ld = (int64_t)(ly->kvb_stride / sizeof(float));
        const dsq_kernels *k = dsq_kernels_get();
        for (int64_t d0 = 0; d0 < j->nope; d0 += ch) {
            int64_t d1 = d0 + ch < j->nope ? d0 + ch : j->nope;
            k->dequant_tile(&ly->kv_b.w, h * hw + d0, h * hw + d1, 0, R, buf, ld);
            for (int64_t d = d0; d < d1; d++) dsq_axpy(qp, q[d], buf + (d - d0) * ld, (size_t)R);
        }
        return;
    }
    const uint8_t *w0 = ly->kvb_rows + (size_t)(h * hw) * ly->kvb_stride;
    for (int64_t d = 0; d < j->nope; d++) row_axpy(qp, q[d], w0 + (size_t)d * ly->kvb_stride, ly->kvb_bf16, R);
}

/* out_h = W_UV[h] ctx (rows h*hw + nope .. h*hw + nope + v of kv_b) */
static void absorb_out_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    mla_job *j = ctx;
    const dsq_run *r = j->r;
    const dsq_layer *ly = j->ly;
    int t;
    int64_t h;
    abs_item(j, item, &t, &h);
    const int64_t hw = j->nope + j->vd, R = j->R;
    const float *cv = r->sc->qabs + ((size_t)t * j->H + h) * R;
    float *out = r->sc->att + (size_t)t * r->m->attn_out_dim + h * j->vd;
    /* the v rows of head h as a view of their own: a [vd x R] matrix
     * times ctx through the scheme's gemm (its SIMD gemv); each output row
     * is its own dot product, so splitting the rows changes no bit.
     * T = 1 needs no scratch up to 8192 columns (kv_lora_rank; V3: 512), so
     * it cannot fail */
    dsq_qview sub = ly->kv_b_run.w;
    sub.bf16_terms = r->m->opts.bf16_terms;
    const int64_t ch = kvb_chunk_rows(ly);
    const dsq_kernels *kl = dsq_kernels_get();
    if (kvb_in_place(ly, kl)) {
        /* the int rows of head h as a view of their own */
        const dsq_qview *qv = &ly->kv_b.w;
        const int64_t r0 = h * hw + j->nope;
        sub = *qv;
        sub.w = qv->w + (size_t)r0 * qv->layout.row_bytes;
        if (qv->scales) sub.scales = qv->scales + (size_t)r0 * (size_t)qv->layout.ngroups;
        if (qv->zeros) sub.zeros = qv->zeros + (size_t)r0 * (size_t)qv->layout.ngroups;
        if (qv->rowsum) sub.rowsum = qv->rowsum + r0;
        sub.shape.rows = j->vd;
        kl->gemv_i(&sub, cv, 1, 0, j->vd, out);
        return;
    }
    if (ch > 0) {
        _Alignas(64) float buf[KVB_CHUNK];
        const int64_t ld = (int64_t)(ly->kvb_stride / sizeof(float));
        const dsq_kernels *k = dsq_kernels_get();
        sub.w = (const uint8_t *)buf;
        for (int64_t v0 = 0; v0 < j->vd; v0 += ch) {
            int64_t v1 = v0 + ch < j->vd ? v0 + ch : j->vd;
            k->dequant_tile(&ly->kv_b.w, h * hw + j->nope + v0, h * hw + j->nope + v1, 0, R, buf, ld);
            sub.shape.rows = v1 - v0;
            (void)sub.scheme->gemm(&sub, cv, 1, out + v0, NULL, NULL, 0);
        }
        return;
    }
    sub.w = ly->kvb_rows + (size_t)(h * hw + j->nope) * ly->kvb_stride;
    sub.shape.rows = j->vd;
    (void)sub.scheme->gemm(&sub, cv, 1, out, NULL, NULL, 0);
}

/* Absorbed attention of one token, ABS_HB heads per pool item: scores =
 * q'.latent + q_pe.k_pe, softmax, context written over q' (the heads are
 * independent rows of the same products). One [H x P] block on the
 * caller's thread would be a serial stretch of every decode step that grows
 * with the context (V3, P = 128: about 40 MFLOP of sgemm per token and
 * layer, while the other threads idle). The blocks are fixed by ABS_HB,
 * never by the pool size, so any thread count gives the same bits
 * (OpenBLAS rounds a 16-row block differently from a 128-row one: a block
 * size that followed the pool would move decode by float rounding). */
#define ABS_HB 16

typedef struct abs_attn_job {
    const mla_job *j;
    int t, n, qdim;
    const float *lat, *pe;      /* keys: latent rows [n][R] and k_pe rows [n][rope] */
} abs_attn_job;

static void abs_attn_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    const abs_attn_job *a = ctx;
    const mla_job *j = a->j;
    const dsq_run *r = j->r;
    dsq_scratch *sc = r->sc;
    const int64_t R = j->R, qk = j->nope + j->rope, h0 = (int64_t)item * ABS_HB;
    const int hb = (int)(j->H - h0 < ABS_HB ? j->H - h0 : ABS_HB);
    const float *lat = a->lat, *pe = a->pe;
    float *qp = sc->qabs + ((size_t)a->t * (size_t)j->H + (size_t)h0) * (size_t)R;
    const float *qpe = sc->q + (size_t)a->t * (size_t)a->qdim + (size_t)(h0 * qk + j->nope);
    dsq_attend_block(hb, a->n, qp, (int)R, lat, (int)R, (int)R, qpe, (int)qk, pe, (int)j->rope, (int)j->rope, lat,
                     (int)R, (int)R, sc->vis + h0, r->m->attn_scale, sc->scores + (size_t)h0 * (size_t)a->n, qp,
                     (int)R, NULL);
}

/* Naive path: one head's attention block over the expanded k_nope | v,
 * for the rows [0, M) (each sees its visible keys, at most P). */
typedef struct naive_job {
    dsq_run *r;
    const mla_job *j;
    const float *lat, *pe;
    int M;
    int64_t P;
    float *S; /* per thread [M, P] scores; NULL: serial heads on sc->scores */
} naive_job;

static void naive_head(const naive_job *nj, int64_t h, float *S, dsq_pool *pool)
{
    const dsq_run *r = nj->r;
    const dsq_model *m = r->m;
    const mla_job *j = nj->j;
    dsq_scratch *sc = r->sc;
    const int64_t qk = j->nope + j->rope, hw = j->nope + j->vd, row = j->H * hw;
    const int qdim = (int)m->q_dim;
    const float *kx = sc->kv_exp + h * hw;
    dsq_attend_block(nj->M, (int)nj->P, sc->q + h * qk, qdim, kx, (int)row, (int)j->nope, sc->q + h * qk + j->nope,
                     qdim, nj->pe, (int)j->rope, (int)j->rope, kx + j->nope, (int)row, (int)j->vd, sc->vis,
                     m->attn_scale, S, sc->att + h * j->vd, (int)m->attn_out_dim, pool);
}

/* Heads are independent and each runs the same calls as on one thread (the
 * softmax rows inline instead of on the pool): the same values. Prefill's
 * 2 x H small sgemms were serial on the caller's thread before. */
static void naive_head_task(void *ctx, size_t item, int tid)
{
    const naive_job *nj = ctx;
    naive_head(nj, (int64_t)item, nj->S + (size_t)tid * (size_t)nj->M * (size_t)nj->P, NULL);
}

/* One token after q and kv_a: norm its latent, RoPE on k_pe and on every
 * head's q_pe, both into the cache at the token's slot. */
static void prep_token_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    const mla_job *j = ctx;
    const dsq_run *r = j->r;
    const dsq_model *m = r->m;
    const dsq_scratch *sc = r->sc;
    const int t = (int)item, half = m->rope.dim / 2;
    const int64_t qk = j->nope + j->rope, R = j->R;
    const float *cs = sc->cs + (size_t)t * m->rope.dim, *sn = cs + half;
    float *kv = sc->kva + (size_t)t * m->kv_width;
    dsq_rmsnorm(kv, kv, j->ly->kv_a_norm, (int)R, m->eps);
    if (m->dsa && m->opts.dsa_mode == DSQ_DSA_FP8) dsq_fp8_roundtrip(kv, (int)R, DSQ_DSA_LATENT_BLOCK);
    dsq_rope_apply(&m->rope, kv + R, cs, sn);
    for (int64_t h = 0; h < j->H; h++) dsq_rope_apply(&m->rope, sc->q + (size_t)t * m->q_dim + h * qk + j->nope, cs, sn);
    float *base = dsq_kv_base(r, t);
    int64_t idx = dsq_kv_index(r, t);
    if (r->kv.qcache) {
        /* the codes to the store, the values they give back to the view */
        int seq = r->kv.seq_of ? r->kv.seq_of[t] : r->kv.seq0;
        uint8_t *row = r->kv.qcache + (size_t)seq * (size_t)r->kv.qseq_stride +
                       (size_t)idx * dsq_kvq_row_bytes(m->opts.kv_cache, R, j->rope);
        dsq_kvq_put(m->opts.kv_cache, kv, R, kv + R, j->rope, row, base + idx * R, base + r->kv.ctx * R + idx * j->rope);
        return;
    }
    memcpy(base + idx * R, kv, (size_t)R * sizeof(float));
    memcpy(base + r->kv.ctx * R + idx * j->rope, kv + R, (size_t)j->rope * sizeof(float));
}

/* Absorbed attention of the rows [t0, T): q' = q_nope W_UK, scores over
 * each row's keys (a DSA row with a selection: only its selected latent and
 * k_pe rows, gathered into sc->gather), softmax, context, out = W_UV ctx. */
static void absorbed_rows(mla_job *j, int t0, int sparse)
{
    dsq_run *r = j->r;
    const dsq_model *m = r->m;
    const dsq_layer *ly = j->ly;
    dsq_scratch *sc = r->sc;
    const int64_t R = j->R;
    const int qdim = (int)m->q_dim;
    j->t0 = t0;
    j->nt = r->T - t0;
    const double items = (double)j->nt * (double)j->H;
    /* kv_b's bytes split between its two reads by rows (nope : v) */
    const double kvb_bytes = (double)ly->kv_b.w.blob_size / (double)(j->nope + j->vd);
    dsq_prof_mark mk;
    dsq_prof_begin(m->prof, &mk);
    dsq_pool_run(pool_for(m->pool, items * (double)(j->nope * R)), (size_t)j->nt * (size_t)j->H, absorb_q_task, j);
    dsq_prof_end_io(m->prof, &mk, "mla: absorbed q (kv_b W_UK)", 2.0 * items * (double)(j->nope * R),
                    kvb_bytes * (double)j->nope);
    for (int t = t0; t < r->T; t++) {
        int n = (int)dsq_kv_index(r, t) + 1;
        const float *lat = dsq_kv_base(r, t), *pe = lat + r->kv.ctx * R;
        if (sparse && sc->nsel[t] >= 0) {
            /* only the selected rows: [n][R] latents, then [n][rope] k_pe */
            dsq_prof_begin(m->prof, &mk);
            const int32_t *sel = sc->sel + (size_t)t * (size_t)sc->cap_sel;
            n = sc->nsel[t];
            float *gl = sc->gather, *gp = sc->gather + (size_t)n * (size_t)R;
            for (int i = 0; i < n; i++) {
                memcpy(gl + (size_t)i * R, lat + (size_t)sel[i] * R, (size_t)R * sizeof(float));
                memcpy(gp + (size_t)i * j->rope, pe + (size_t)sel[i] * j->rope, (size_t)j->rope * sizeof(float));
            }
            lat = gl;
            pe = gp;
            dsq_prof_end(m->prof, &mk, "mla: gather selected rows", 0.0);
        }
        dsq_prof_begin(m->prof, &mk);
        for (int64_t h = 0; h < j->H; h++) sc->vis[h] = n;
        abs_attn_job aj = { j, t, n, qdim, lat, pe };
        const double macs = (double)j->H * (double)n * (double)(2 * R + j->rope);
        dsq_pool_run(pool_for(m->pool, macs), (size_t)((j->H + ABS_HB - 1) / ABS_HB), abs_attn_task, &aj);
        dsq_prof_end(m->prof, &mk, "mla: absorbed attention", 2.0 * macs);
    }
    dsq_prof_begin(m->prof, &mk);
    dsq_pool_run(pool_for(m->pool, items * (double)(j->vd * R)), (size_t)j->nt * (size_t)j->H, absorb_out_task, j);
    dsq_prof_end_io(m->prof, &mk, "mla: absorbed out (kv_b W_UV)", 2.0 * items * (double)(j->vd * R),
                    kvb_bytes * (double)j->vd);
}

/* Whether the dense rows [0, M) of a DSA prefill cost more on the naive
 * path than on the absorbed one. The naive path expands P latents through
 * kv_b_proj for those rows alone: when they are few (a chunk that crosses
 * index_topk keeps only its first rows dense) that expansion outweighs
 * their attention. Per head, in multiply-adds: naive P x R x (nope + v)
 * plus M x P x (nope + rope + v); absorbed, per row, R x (nope + v) for q'
 * and out plus n x (2R + rope), counted twice for its lower throughput
 * (q' and out are gemv-bound, the scores come in 16-head blocks). Either
 * path gives the same values to float rounding. */
static int naive_dearer(const mla_job *j, int M, int64_t P)
{
    const dsq_run *r = j->r;
    const double R = (double)j->R, nv = (double)(j->nope + j->vd);
    const double naive = (double)P * R * nv + (double)M * (double)P * (double)(j->nope + j->rope + j->vd);
    double absorbed = 0.0;
    for (int t = 0; t < M; t++) absorbed += R * nv + (double)(dsq_kv_index(r, t) + 1) * (2.0 * R + (double)j->rope);
    return 2.0 * absorbed < naive;
}

/* Naive attention of the rows [0, M), which see at most P keys: the first
 * P cached latents expanded through kv_b_proj, then one block per head. */
static int naive_rows(mla_job *j, int M, int64_t P)
{
    dsq_run *r = j->r;
    const dsq_model *m = r->m;
    const dsq_layer *ly = j->ly;
    dsq_scratch *sc = r->sc;
    const float *lat = dsq_kv_base(r, 0), *pe = lat + r->kv.ctx * j->R;
    DSQ_TRY(dsq_linear_gemm(r, &ly->kv_b_run, lat, (int)P, sc->kv_exp));
    for (int t = 0; t < M; t++) sc->vis[t] = (int32_t)dsq_kv_index(r, t) + 1;
    dsq_prof_mark mk;
    dsq_prof_begin(m->prof, &mk);
    naive_job nj = { r, j, lat, pe, M, P, NULL };
    /* heads in parallel, each thread with its own score block; without
     * that memory, one head at a time (its softmax rows on the pool) */
    const int nth = dsq_pool_size(m->pool);
    if (nth > 1 && j->H > 1) nj.S = malloc((size_t)nth * (size_t)M * (size_t)P * sizeof(float));
    if (nj.S) {
        dsq_pool_run(m->pool, (size_t)j->H, naive_head_task, &nj);
        free(nj.S);
    } else {
        for (int64_t h = 0; h < j->H; h++) naive_head(&nj, h, sc->scores, m->pool);
    }
    /* nominal: every [M x P] block of scores and context, as llama.cpp forms them */
    dsq_prof_end(m->prof, &mk, "mla: attention (naive heads)",
                 2.0 * (double)j->H * (double)M * (double)P * (double)(j->nope + j->rope + j->vd));
    return DSQ_OK;
}

int dsq_mla_forward(dsq_run *r, const float *x)
{
    const dsq_model *m = r->m;
    const dsq_model_config *c = &m->cfg;
    const dsq_layer *ly = &m->w.layers[r->layer];
    dsq_scratch *sc = r->sc;
    const int T = r->T;
    mla_job j = { r, ly, m->n_heads, c->qk_nope_head_dim, c->qk_rope_head_dim, c->v_head_dim, c->kv_lora_rank, 0, T };

    /* queries and compressed kv. Decode without hooks: the two products of
     * x (q_a or q, and kv_a) are one pool job (dsq_linear_gemm_many: one
     * wake-up and, for the same scheme, one prepared x; the same values);
     * prefill and calibration (hooks) call them in order as before. */
    const int lora = c->q_lora_rank > 0;
    if (!r->hook && T < 4) {
        const dsq_linear *ls[2] = { lora ? &ly->q_a : &ly->q, &ly->kv_a };
        const float *xs[2] = { x, x };
        const int ts[2] = { T, T };
        float *ys[2] = { lora ? sc->qa : sc->q, sc->kva };
        DSQ_TRY(dsq_linear_gemm_many(r, ls, xs, ts, ys, 2, "mla: q_a (or q) + kv_a (one job)"));
        if (lora) {
            dsq_add_rmsnorm_rows(sc->qa, NULL, sc->qa, ly->q_a_norm, T, (int)c->q_lora_rank, m->eps, m->pool);
            DSQ_TRY(dsq_linear_gemm(r, &ly->q_b, sc->qa, T, sc->q));
        }
    } else {
        if (lora) {
            DSQ_TRY(dsq_linear_hook_call(r, &ly->q_a, x, T, NULL));
            DSQ_TRY(dsq_linear_gemm(r, &ly->q_a, x, T, sc->qa));
            dsq_add_rmsnorm_rows(sc->qa, NULL, sc->qa, ly->q_a_norm, T, (int)c->q_lora_rank, m->eps, m->pool);
            DSQ_TRY(dsq_linear_hook_call(r, &ly->q_b, sc->qa, T, NULL));
            DSQ_TRY(dsq_linear_gemm(r, &ly->q_b, sc->qa, T, sc->q));
        } else {
            DSQ_TRY(dsq_linear_hook_call(r, &ly->q, x, T, NULL));
            DSQ_TRY(dsq_linear_gemm(r, &ly->q, x, T, sc->q));
        }
        DSQ_TRY(dsq_linear_hook_call(r, &ly->kv_a, x, T, NULL));
        DSQ_TRY(dsq_linear_gemm(r, &ly->kv_a, x, T, sc->kva));
    }
    if (m->dsa) DSQ_TRY(dsq_dsa_forward(r, x, sc->qa));

    dsq_prof_mark mk;
    dsq_prof_begin(m->prof, &mk);
    int64_t P = 0;
    for (int t = 0; t < T; t++)
        if (dsq_kv_index(r, t) + 1 > P) P = dsq_kv_index(r, t) + 1;
    /* tokens are independent (each writes its own cache slot): on the pool
     * from a few tokens on, the same bits wherever each runs */
    dsq_pool_run(T < 4 ? NULL : m->pool, (size_t)T, prep_token_task, &j);
    dsq_prof_end(m->prof, &mk, "mla: norms, rope, cache writes", 0.0);
    const int sparse = m->dsa ? dsq_dsa_select(r) : 0;

    /* The naive path expands one sequence's latents; several sequences
     * (batched decode) always take the absorbed path, and so do DSA's
     * sparse rows. Those come after the dense ones in a sequence (a row
     * sees one key more than the row before it), so the naive rows are the
     * leading rows [0, Tn) that see every visible key, Pn keys at most. */
    const int forced = r->mla_absorbed || r->kv.seq_of != NULL || !sc->kv_exp;
    int Tn = 0;
    int64_t Pn = 0;
    if (!forced) {
        while (Tn < T && !(sparse && sc->nsel[Tn] >= 0)) {
            if (dsq_kv_index(r, Tn) + 1 > Pn) Pn = dsq_kv_index(r, Tn) + 1;
            Tn++;
        }
        if (Pn > sc->cap_exp) Tn = 0;
        if (m->dsa && Tn > 0 && naive_dearer(&j, Tn, Pn)) Tn = 0;
        /* hooks (calibration) see kv_b_proj's input whichever path runs:
         * every cached latent, as the naive path reads them */
        DSQ_TRY(dsq_linear_hook_call(r, &ly->kv_b, dsq_kv_base(r, 0), (int)P, NULL));
    }
    if (Tn > 0) DSQ_TRY(naive_rows(&j, Tn, Pn));
    if (Tn < T) absorbed_rows(&j, Tn, sparse);

    DSQ_TRY(dsq_linear_hook_call(r, &ly->o, sc->att, T, NULL));
    return dsq_linear_gemm(r, &ly->o, sc->att, T, sc->proj);
}
