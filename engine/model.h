/* model.h - the inference engine: load a model, run it.
 *
 * Architectures (formats/model_config.h): DeepseekV3ForCausalLM (MLA + MoE,
 * sigmoid router with selection-only bias, noaux_tc group-limited top-k),
 * DeepseekV2ForCausalLM (MLA + MoE, softmax router, greedy or
 * group_limited_greedy), LlamaForCausalLM (and Mistral), Qwen2ForCausalLM
 * (q/k/v bias). Any linear may carry a "<name>.bias" tensor.
 *
 * Sources: a safetensors checkpoint (file, index or directory; BF16, F16,
 * F32 or DeepSeek FP8-block weights), a serving export directory (AscendV1,
 * AutoAWQ GEMM, compressed-tensors; detected from its files, its quantized
 * linears repacked once into scheme blobs by engine/export_read.h) or a .dsq
 * container of any scheme (quant/scheme.h). The engine holds ONE copy of the weights: BF16 / F32
 * tensors are used in place from the mapping when their rows line up with
 * the scheme layout; FP8 is dequantized to BF16 once at load (as DeepSeek's
 * fp8_cast_bf16.py does); F16 becomes F32; .dsq payloads are used in place
 * when stored raw, else decompressed once. Norm weights and biases are
 * small float32 copies. The one exception is MLA's kv_b_proj when it is
 * quantized (not BF16/F32): the naive (prefill) path multiplies by an F32
 * dequantized copy (kv_b_proj is about 0.15% of V3's parameters); the
 * absorbed decode path dequantizes the stored int rows on the fly into L1
 * instead of streaming that copy (the same values: mla.c).
 *
 * MTP: DeepSeek-V3 stores a multi-token-prediction layer as layer index
 * num_hidden_layers ("model.layers.61.*"). It is not part of next-token
 * evaluation, so the engine never loads those tensors (dsq_model_info says
 * so).
 *
 * Numerics: float32 activations, residual stream, norms and softmax; every
 * linear goes through its scheme's gemm (quant/scheme.h), which quantizes
 * activations itself where the scheme says so. Results do not depend on the
 * thread count (each gemm output and each attention head is computed by one
 * thread in a fixed order; MoE expert outputs are summed in expert order).
 *
 * Layout follows llama2.c: a config, weights whose pointers carry shape
 * comments, a run state allocated once (dsq_state), and forward functions.
 * Library rules: nothing prints or exits; errors are negative dsq_status
 * values with an optional dsq_diag naming file and tensor. */
#ifndef DSQ_MODEL_H
#define DSQ_MODEL_H

#include "dsq_error.h"
#include "dsq_thread.h"
#include "model_config.h"
#include "scheme.h"
#include "ops.h"
#include "prof.h"
#include "dsa.h"

#include <stddef.h>
#include <stdint.h>

/* ---- options ---------------------------------------------------------- */

/* The MLA cache's storage per position and layer (kvq.c): f32 as computed;
 * bf16; int8 or fp8 (e4m3) codes with one float scale for the latent and
 * one for k_pe (per token, amax / 127 or amax / 448). */
enum dsq_kv_cache { DSQ_KV_F32 = 0, DSQ_KV_BF16 = 1, DSQ_KV_INT8 = 2, DSQ_KV_FP8 = 3 };

enum dsq_mla_mode {
    DSQ_MLA_AUTO     = 0, /* naive (expanded K/V) for n > 1 tokens, absorbed for n == 1 */
    DSQ_MLA_NAIVE    = 1, /* always expand kv_b_proj (the naive path, docs/checkpoints.md) */
    DSQ_MLA_ABSORBED = 2  /* always the compressed-KV path */
};

typedef struct dsq_model_opts {
    int threads;          /* pool size when pool is NULL; <= 0: all cores */
    dsq_pool *pool;       /* borrowed; NULL: the model creates its own */
    int lazy;             /* layer weights are loaded on demand and released after
                             dsq_layer_forward (calibration of huge models) */
    int mla_mode;         /* enum dsq_mla_mode */
    int64_t max_ctx;      /* default context for dsq_state_create(.., 0);
                             0: min(max_position_embeddings, 4096) */
    int prefill_chunk;    /* tokens per internal prefill step; 0: 256 */
    int fp8_as_f32;       /* FP8-block sources dequantize to F32 instead of BF16
                             (exact fp8 * scale; twice the memory). Default BF16,
                             as DeepSeek's fp8_cast_bf16.py. */
    int no_verify;        /* skip the SHA-256 check of .dsq payloads stored raw
                             and of an export directory's files against its
                             SHA256SUMS (model_verify.h); compressed .dsq
                             payloads are always checked */
    int bf16_terms;       /* BF16 weights on a CPU with a bf16 dot product: split
                             each f32 activation in 1, 2 or 3 bf16 terms (3: f32
                             accuracy, the KLD baseline; 1: activations rounded to
                             bf16 as llama.cpp does, about 2.5x faster prefill;
                             quant/scheme.h "bf16 prefill"). 0: DSQ_BF16_TERMS
                             from the environment, else 3 */
    int dsa_mode;         /* enum dsq_dsa_mode (dsa.h): V3.2's indexer and latent
                             with DeepSeek's e4m3 round trips (0, the default) or
                             in float */
    int kv_cache;         /* enum dsq_kv_cache: how MLA's cache stores each position's
                             latent and k_pe (kvq.c); 0: float32 (the reference) */
    int moe_unbatched;    /* 1: decode runs every expert's gemms as pool jobs of their
                             own, as calibration and large batches do (moe.c); the
                             same values; for tests and bench_engine's A/B */
} dsq_model_opts;

void dsq_model_opts_default(dsq_model_opts *o);

/* ---- weights ---------------------------------------------------------- */

/* A linear layer y = x W^T (+ b). W is [out, in] in the scheme's blob
 * layout; a BF16 / F32 source is viewed with a hand-made dsq_qview. */
typedef struct dsq_linear {
    dsq_qview w;          /* [out, in] */
    const float *bias;    /* [out] or NULL */
    char *name;           /* HF name of the weight ("model.layers.0.mlp.up_proj.weight") */
    int64_t out, in;
} dsq_linear;

/* SwiGLU MLP: down(silu(gate x) * up x). */
typedef struct dsq_mlp {
    dsq_linear gate;      /* [ffn, hidden] */
    dsq_linear up;        /* [ffn, hidden] */
    dsq_linear down;      /* [hidden, ffn] */
} dsq_mlp;

typedef struct dsq_layer {
    int loaded;
    int is_moe;
    float *attn_norm;     /* [hidden] input_layernorm */
    float *ffn_norm;      /* [hidden] post_attention_layernorm */

    /* llama / qwen2: q [H*hd, hidden], k/v [KVH*hd, hidden], o [hidden, H*hd].
     * MLA without q_lora_rank uses q as q_proj [H*qk_head, hidden]. */
    dsq_linear q, k, v, o;

    /* MLA (o is o_proj [hidden, H*v_head]) */
    dsq_linear q_a;       /* [q_lora, hidden] */
    float *q_a_norm;      /* [q_lora] */
    dsq_linear q_b;       /* [H*qk_head, q_lora] */
    dsq_linear kv_a;      /* [kv_lora + rope, hidden] kv_a_proj_with_mqa */
    float *kv_a_norm;     /* [kv_lora] */
    dsq_linear kv_b;      /* [H*(nope + v), kv_lora] as stored */
    /* kv_b_proj as both MLA paths apply it: kv_b itself when BF16/F32, else
     * an F32 dequantization (owned). The absorbed decode path folds kv_b
     * into q and the output with float activations, so a quantized kv_b is
     * used weight-only in BOTH paths: prefill and decode then compute the
     * same function (decode reads the same values from kv_b's own rows
     * through dequant_tile, mla.c). (Recipes keep kv_b_proj BF16 anyway:
     * docs/serving-exports.md, "DeepSeek-V3 placement rules".) */
    dsq_linear kv_b_run;
    /* rows of kv_b_run for the absorbed path: row r at kvb_rows + r * kvb_stride */
    const uint8_t *kvb_rows;
    size_t kvb_stride;
    int kvb_bf16;         /* 1: BF16 rows, 0: F32 rows */

    /* DSA lightning indexer (V3.2, dsa.h): self_attn.indexer.* */
    dsq_linear idx_wq_b;  /* [Hi*D, q_lora] */
    dsq_linear idx_wk;    /* [D, hidden] */
    dsq_linear idx_wp;    /* [Hi, hidden] weights_proj */
    float *idx_knorm_w;   /* [D] k_norm (LayerNorm) weight */
    float *idx_knorm_b;   /* [D] k_norm bias */

    /* FFN: dense layers */
    dsq_mlp mlp;
    /* FFN: MoE layers */
    dsq_linear router;    /* [E, hidden] mlp.gate.weight */
    float *router_bias;   /* [E] e_score_correction_bias (V3) or NULL */
    dsq_mlp *experts;     /* [E] mlp.experts.N */
    dsq_mlp shared;       /* mlp.shared_experts, ffn = n_shared * moe_inter; absent if n_shared == 0 */
    int has_shared;

    /* Buffers this layer owns (weight copies, decompressed payloads). */
    void **owned;
    int n_owned, cap_owned;
} dsq_layer;

typedef struct dsq_weights {
    dsq_linear embed;     /* [vocab, hidden] model.embed_tokens.weight (rows looked up) */
    float *final_norm;    /* [hidden] model.norm.weight */
    dsq_linear lm_head;   /* [vocab, hidden] lm_head.weight, or the embedding when tied */
    dsq_layer *layers;    /* [num_hidden_layers] */
} dsq_weights;

typedef struct dsq_model dsq_model;
typedef struct dsq_state dsq_state;

/* ---- model ------------------------------------------------------------ */

/* Open path: a .dsq container, a safetensors file, a *.safetensors.index.json
 * or a directory holding a checkpoint (config.json next to it; a .dsq
 * carries it in its metadata "config"). opts may be NULL (defaults).
 * @return DSQ_OK; DSQ_ERR_NOT_FOUND (missing tensor, named in d);
 *         DSQ_ERR_SHAPE (tensor shape disagrees with config.json);
 *         DSQ_ERR_UNSUPPORTED (architecture, dtype, scheme, activation);
 *         errors of the format readers. */
int  dsq_model_open(dsq_model **out, const char *path, const dsq_model_opts *opts, dsq_diag *d);
void dsq_model_free(dsq_model *m);
const dsq_model_config *dsq_model_get_config(const dsq_model *m);
/* The routing config.json describes (bias NULL: it is per layer). One place,
 * for the engine, the calibration's --moe-calib all pass and AWQ's MoE loss. */
void dsq_router_from_config(const dsq_model_config *c, dsq_router *r);
const dsq_weights *dsq_model_weights(const dsq_model *m);
dsq_pool *dsq_model_pool(const dsq_model *m);
/* One paragraph describing the model: arch, dims, schemes used, bytes of
 * weights, MTP skipped. Returns snprintf's length. */
int  dsq_model_info(const dsq_model *m, char *buf, size_t n);
/* Sum over loaded linears of their blob bytes (the weights actually used). */
uint64_t dsq_model_weight_bytes(const dsq_model *m);

/* Lazy mode: materialise / drop one layer's weights. Loading a loaded
 * layer is a no-op; releasing a layer in eager mode is allowed too. */
int  dsq_model_layer_load(dsq_model *m, int layer, dsq_diag *d);
void dsq_model_layer_release(dsq_model *m, int layer);

/* ---- run state -------------------------------------------------------- */

/* KV cache and scratch for max_batch independent sequences of up to
 * max_ctx tokens (0: the model's default). NULL on allocation failure. */
dsq_state *dsq_state_create(const dsq_model *m, int max_batch, int64_t max_ctx);
void dsq_state_free(dsq_state *s);
/* Forget sequence seq (position 0). */
void dsq_state_reset(dsq_state *s, int seq);
/* Keep the first pos tokens of seq (pos <= current position). */
int  dsq_state_truncate(dsq_state *s, int seq, int64_t pos);
int64_t dsq_state_pos(const dsq_state *s, int seq);
int64_t dsq_state_max_ctx(const dsq_state *s);

/* ---- forward ---------------------------------------------------------- */

enum dsq_forward_flags {
    DSQ_FWD_LAST_LOGITS = 1u << 0  /* logits is [vocab]: the last token's only */
};

/* Append n tokens to sequence seq (at its current position) and compute
 * logits: [n, vocab] rows, or [vocab] with DSQ_FWD_LAST_LOGITS; logits may
 * be NULL (only fill the cache). n > 1 runs the prefill path (GEMMs over
 * up to prefill_chunk tokens at once; MLA: naive expanded K/V); n == 1 the
 * decode path (MLA: absorbed), unless mla_mode forces one. Lazy models run
 * layer-outer so each layer is loaded once per call. A model runs one
 * forward at a time (its pool is not reentrant); use one state per caller.
 * Rows whose logits are not asked for skip the last layer's FFN (their
 * cache entries are complete without it), so the last row's logits may
 * differ from a full-logits call's in float rounding (other gemm shapes).
 * @return DSQ_OK; DSQ_ERR_INVALID_ARG (bad seq, token id out of range,
 *         context full: diag says which); DSQ_ERR_NOMEM. */
int dsq_forward(dsq_model *m, dsq_state *s, int seq, const int32_t *tokens, int n,
                float *logits, unsigned flags, dsq_diag *d);

/* One decode step for several sequences at once: active[i] (i < nseq) names
 * a sequence, tok_per_seq[i] is its next token; logits is [nseq, vocab]
 * (row i for active[i]). Linears run as one GEMM over the nseq tokens;
 * MLA attention always takes the absorbed path here. */
int dsq_forward_batch_decode(dsq_model *m, dsq_state *s, const int32_t *tok_per_seq,
                             const int *active, int nseq, float *logits, dsq_diag *d);

/* ---- per-layer API (calibration) ------------------------------------- */

/* Called with the input of each linear before it runs: x is [T_in,
 * in_features] (row t is the t-th routed token for experts, see
 * token_index; NULL = all T tokens in order). name is the HF tensor name of
 * the weight. Return 0 to continue, a negative dsq_status to stop (the
 * forward returns it). */
typedef int (*dsq_linear_hook)(void *ctx, int layer, const char *linear_name,
                               const float *x, int T_in, int in_features,
                               const int32_t *token_index);

enum dsq_layer_flags {
    /* Run every routed expert on every token (hooks see all T tokens), while
     * the layer output still uses only the router's choice. */
    DSQ_LAYER_ALL_EXPERTS = 1u << 0
};

/* Token embedding rows: out [n, hidden]. */
int dsq_model_embed(dsq_model *m, const int32_t *tokens, int n, float *out, dsq_diag *d);
/* Run decoder layer `layer` on hidden [T, hidden] in place: causal
 * self-attention among these T tokens only (no cache), RoPE at positions[t]
 * (NULL: 0..T-1). hook may be NULL. MLA always takes the naive path here,
 * so kv_b_proj's hook sees its real input (the normed latents, [T,
 * kv_lora]). In lazy mode the layer is loaded if needed and released
 * afterwards when this call loaded it. */
int dsq_layer_forward(dsq_model *m, int layer, float *hidden, int T, const int32_t *positions,
                      dsq_linear_hook hook, void *hook_ctx, unsigned flags, dsq_diag *d);
/* Final norm + lm_head: hidden [T, hidden] (not modified) -> logits [T, vocab].
 * The hook (may be NULL) sees the lm_head input, with layer =
 * num_hidden_layers and name "lm_head.weight" (the embedding's name when
 * tied). */
int dsq_model_head(dsq_model *m, const float *hidden, int T, float *logits,
                   dsq_linear_hook hook, void *hook_ctx, dsq_diag *d);

/* ======================================================================
 * Engine internals shared between the engine .c files (not for callers).
 * ====================================================================== */

struct dsq_model {
    dsq_model_config cfg;
    dsq_weights w;
    dsq_model_opts opts;
    dsq_pool *pool;
    int own_pool;
    int nthreads;

    /* source: exactly one of st / ctr */
    struct dsq_st_model *st;
    struct dsq_ctr_set *ctr;   /* one .dsq file, or index + shards */
    struct dsq_export_info *exp; /* with st: a serving export's description, else NULL */
    char *path;

    /* derived */
    int is_mla;
    int64_t hidden, vocab, n_layers, n_heads, n_kv_heads, head_dim;
    int64_t q_dim;        /* H * head_dim (llama) or H * qk_head (MLA) */
    int64_t kv_width;     /* cache floats per position per layer */
    int64_t attn_out_dim; /* H * head_dim or H * v_head */
    int64_t max_ffn;      /* widest gate/up output over layers */
    int64_t default_ctx;
    float attn_scale;     /* softmax scale (MLA: includes YaRN mscale^2) */
    float eps;
    dsq_rope rope;
    dsq_router router;    /* bias filled per layer */
    int dsa;              /* the architecture has the DSA indexer (V3.2) */
    dsq_rope index_rope;  /* MLA's frequencies, rotate-half pairs (dsa.h) */
    size_t dsa_row;       /* bytes per token in the indexer cache */

    void **owned;         /* global buffers (embed / head / final norm copies) */
    int n_owned, cap_owned;
    struct dsq_prof *prof; /* per-op timers (prof.h); NULL: off (the default) */
};

/* Scratch for a batch of T tokens through one layer. */
typedef struct dsq_scratch {
    int64_t cap_T;        /* rows every buffer below can hold */
    float *xb;            /* [T, hidden] normed input */
    float *q;             /* [T, q_dim] */
    float *qa;            /* [T, q_lora] MLA q low-rank temp */
    float *kva;           /* [T, kv_width]: MLA kv_a output; GQA k rows then v rows */
    float *att;           /* [T, attn_out_dim] */
    float *proj;          /* [T, hidden] linear output before the residual add */
    float *g, *u;         /* [T, max_ffn] */
    float *moe_x;         /* [T, hidden] gathered tokens of one expert */
    float *moe_y;         /* [T, hidden] expert output */
    float *moe_acc;       /* [T, hidden] routed sum */
    float *logits_r;      /* [T, E] router logits */
    float *route_w;       /* [T, top_k] */
    int *route_idx;       /* [T, top_k] */
    int32_t *tok_list;    /* [T] tokens of one expert */
    float *tok_w;         /* [T] their weights */
    float *route_tmp;     /* [nthreads, 2 * E] */
    /* attention */
    int64_t cap_ctx;
    float *scores;        /* [max(T, H), cap_ctx] one attention block's scores */
    int32_t *vis;         /* [max(T, H)] keys visible to each row of a block */
    float *qabs;          /* [T, H, kv_lora] MLA absorbed q', then the attention context */
    int64_t cap_exp;      /* rows of kv_exp: cap_ctx, DSA: min(index_topk, cap_ctx) */
    float *kv_exp;        /* [cap_exp, H * (nope + v)] MLA naive expanded k_nope|v */
    float *cs;            /* [T, rope_dim] cos (first half) | sin per token */
    /* DSA (dsa.h) */
    float *iq;            /* [T, Hi, D] indexer queries (fp8: e4m3 code values) */
    float *ik;            /* [T, D] indexer keys before the cache */
    float *iw;            /* [T, Hi] per-head weights */
    int64_t cap_sel;      /* min(index_topk, cap_ctx): columns of sel */
    int32_t *sel;         /* [T, cap_sel] selected keys, ascending */
    int32_t *nsel;        /* [T] their count; -1: every visible key */
    float *iscore;        /* [nthreads, 2 * cap_ctx] scores and top-k scratch */
    float *itile;         /* [nthreads, 64 * (D + Hi)] decoded keys and products */
    float *gather;        /* [cap_sel, kv_lora + rope] one row's selected latent and k_pe rows */
    void *gemm_buf;       /* gemm scratch */
    size_t gemm_size;
} dsq_scratch;

struct dsq_state {
    const dsq_model *m;
    int max_batch;
    int64_t max_ctx;
    int64_t *pos;         /* [max_batch] tokens cached per sequence */
    float **kv;           /* [layer] -> [max_batch][max_ctx][kv_width] */
    uint8_t **icache;     /* DSA: [layer] -> [max_batch][max_ctx][dsa_row], else NULL */
    uint8_t **kvq;        /* opts.kv_cache != f32: [layer] -> [max_batch][max_ctx][kvq_row]
                             (kv is NULL then), else NULL */
    float *kvf;           /* with kvq: one layer's float view [max_batch][max_ctx][kv_width] */
    float *x;             /* [chunk, hidden] residual stream */
    int32_t *positions;   /* [chunk] */
    int *seq_of;          /* [chunk] sequence of each row (batch decode) */
    dsq_scratch sc;
};

/* How one layer call sees its keys and values. Each sequence's cache is
 * structure-of-arrays over ctx positions:
 *   MLA : latent [ctx][kv_lora] (after kv_a_layernorm), then k_pe [ctx][rope] (after RoPE)
 *   GQA : K [ctx][KVH*hd] (after RoPE), then V [ctx][KVH*hd]
 * dsq_layer_forward uses a temporary cache of ctx = T for one sequence. */
typedef struct dsq_kv_view {
    float *cache;         /* layer cache base */
    int64_t ctx;          /* positions per sequence */
    int64_t seq_stride;   /* floats between sequences (ctx * kv_width) */
    const int *seq_of;    /* [T] sequence of each token, NULL = all seq0 */
    int seq0;
    int index_is_t;       /* 1: token t sits at index t (no cache); 0: at positions[t] */
    uint8_t *icache;      /* DSA indexer cache of the layer (NULL without DSA) */
    uint8_t *qcache;      /* quantized MLA cache of the layer (kvq.c), NULL: cache is the store */
    int64_t qseq_stride;  /* its bytes between sequences */
    int64_t iseq_stride;  /* its bytes between sequences (ctx * dsa_row) */
} dsq_kv_view;

/* Per-call context handed down the layer functions. */
typedef struct dsq_run {
    dsq_model *m;
    dsq_scratch *sc;
    int layer;
    int T;
    const int32_t *positions;   /* [T] absolute positions */
    dsq_kv_view kv;
    int mla_absorbed;           /* choose the compressed-KV path */
    dsq_linear_hook hook;
    void *hook_ctx;
    unsigned flags;             /* enum dsq_layer_flags */
    int out0;                   /* rows [0, out0) of this block's output are never read
                                   (last layer, logits of later rows only): the FFN
                                   skips them (0: every row; T: the FFN is skipped) */
} dsq_run;

/* model.c */
int  dsq_linear_gemm(dsq_run *r, const dsq_linear *l, const float *x, int T, float *y);
int  dsq_linear_hook_call(dsq_run *r, const dsq_linear *l, const float *x, int T,
                          const int32_t *token_index);
/* n linears y[i] = l[i] x[i] (T[i] rows each) as one dsq_gemm_many job: the
 * values of n dsq_linear_gemm calls (bias added the same way), one pool
 * wake-up; prof: the op name the whole job is timed under. n <= 64. */
#define DSQ_LINEAR_MANY_MAX 64
int  dsq_linear_gemm_many(dsq_run *r, const dsq_linear *const *l, const float *const *x, const int *T,
                          float *const *y, int n, const char *prof);
/* kvq.c: the quantized MLA cache */
size_t dsq_kvq_row_bytes(int mode, int64_t R, int64_t rope);
/* Quantize one position (lat [R], pe [rope]) into row; lat_out / pe_out get
 * the values a read of the row gives back (may alias lat / pe). */
void dsq_kvq_put(int mode, const float *lat, int64_t R, const float *pe, int64_t rope, uint8_t *row,
                 float *lat_out, float *pe_out);
void dsq_kvq_get(int mode, const uint8_t *row, int64_t R, int64_t rope, float *lat, float *pe);
/* Point r at layer l's quantized cache and fill the float view with every
 * cached row of the sequences r's tokens belong to, before those tokens. */
void dsq_kvq_view(dsq_state *s, int l, dsq_run *r);
/* Cache bytes per token (all layers; the DSA indexer's keys included). */
int64_t dsq_model_kv_bytes_per_token(const dsq_model *m);
/* kvcache.c */
int  dsq_scratch_alloc(dsq_scratch *sc, const dsq_model *m, int64_t T, int64_t ctx);
void dsq_scratch_free(dsq_scratch *sc);
/* attn.c (llama / qwen2) and mla.c: x [T, hidden] normed -> sc->proj [T, hidden] */
int  dsq_attn_forward(dsq_run *r, const float *x);
int  dsq_mla_forward(dsq_run *r, const float *x);
/* moe.c: x [T, hidden] normed -> sc->proj [T, hidden] */
/* x [T, hidden] -> out [T, hidden]; token_index goes to the hooks (experts). */
int  dsq_mlp_forward(dsq_run *r, const dsq_mlp *mlp, const float *x, int T,
                     const int32_t *token_index, float *out);
int  dsq_moe_forward(dsq_run *r, const float *x);
/* forward.c */
int  dsq_block_forward(dsq_run *r, float *x);
/* cache rows of token t: base of its sequence, and its index in there */
static inline float *dsq_kv_base(const dsq_run *r, int t)
{
    int seq = r->kv.seq_of ? r->kv.seq_of[t] : r->kv.seq0;
    return r->kv.cache + (size_t)seq * (size_t)r->kv.seq_stride;
}
static inline int64_t dsq_kv_index(const dsq_run *r, int t)
{
    return r->kv.index_is_t ? t : r->positions[t];
}
void dsq_rope_rows(const dsq_model *m, const int32_t *positions, int T, float *cs);
/* dsa.c: indexer q / k / weights of the T tokens, their keys into the
 * indexer cache (x: normed hidden, qr: normed q-LoRA latent) */
int  dsq_dsa_forward(dsq_run *r, const float *x, const float *qr);
/* dsa.c: after the cache holds every key of the T tokens: sc->sel / nsel;
 * returns 1 if some row is sparse (fewer keys than it can see) */
int  dsq_dsa_select(dsq_run *r);
size_t dsq_dsa_row_bytes(const dsq_model *m);
static inline uint8_t *dsq_dsa_base(const dsq_run *r, int t)
{
    int seq = r->kv.seq_of ? r->kv.seq_of[t] : r->kv.seq0;
    return r->kv.icache + (size_t)seq * (size_t)r->kv.iseq_stride;
}

#endif
