/* awq.h - scaling groups and the scale search (AWQ, and the SmoothQuant-
 * style alpha search used for w4a8).
 *
 * A scaling group is a producer that can absorb 1/s (a norm weight, or the
 * output rows of a linear) and the linears that read its output (consumers,
 * whose columns get s). Groups follow AutoAWQ get_layers_for_scaling
 * (docs/serving-exports.md, "AWQ scale search"):
 *   DeepSeek-V3/V2 (AWQ flavour):
 *     input_layernorm          -> q_a_proj + kv_a_proj_with_mqa (q_proj without q_lora)
 *     q_a_layernorm            -> q_b_proj
 *     kv_a_layernorm           -> kv_b_proj
 *     post_attention_layernorm -> every expert's gate/up + shared experts' gate/up
 *                                 (dense layers: mlp gate/up)
 *     up_proj                  -> down_proj, per expert, shared experts, dense mlp
 *   Llama/Qwen2 (AWQ flavour): input_layernorm -> q,k,v; v_proj -> o_proj only
 *     when num_key_value_heads == num_attention_heads; post_attention_layernorm
 *     -> gate,up; up_proj -> down_proj.
 *   The SMOOTH flavour adds the "ov" pair (msModelSlim flex_smooth_quant):
 *     MLA kv_b_proj's v rows -> o_proj (attention is linear in v, so o_proj's
 *     input channel h*v_head+e is scaled by kv_b row h*(nope+v_head)+nope+e),
 *     and v_proj -> o_proj as above.
 * The MoE router (mlp.gate) reads post_attention_layernorm too: it is a
 * "passive" consumer, multiplied by s (it stays float) but neither searched
 * nor measured (SmoothQuant's Mixtral recipe counts it in max|W|, so the
 * SMOOTH flavour does too).
 *
 * Search (AutoAWQ _search_best_scale, n_grid = 20, duo_scaling): candidate 0
 * is s = 1 (plain RTN), then for ratio r = i/n_grid, i = 0..n_grid-1:
 *   AWQ:    s = clamp(x_mean^r / (w_mean^(1-r) + 1e-4), min 1e-4)
 *   SMOOTH: s = max|X|^r / max|W|^(1-r)      (r plays alpha)
 *   BOTH:   the SMOOTH grid, then the AWQ grid (2 n_grid + 1 candidates). w4a8
 *           uses it: its error is dominated by the int4 weights, where AWQ's
 *           salient-channel scales often beat activation smoothing; the
 *           simulated W4A8 output decides per group.
 * normalized by sqrt(max*min) and sanitized (smooth.h); x_mean = mean|x_j|
 * over all calibration tokens, w_mean_j = mean over the consumers' rows of
 * |W_ij| / max|W| of (i, j)'s quantization group (AutoAWQ). Each candidate is
 * scored by the MSE of the group's output on a token subsample (the sites'
 * reservoirs, stats.h), with every quantized consumer really quantized by its
 * target scheme (W s through quant's quantize, x / s through its gemm, which
 * also quantizes activations for w8a8/w4a8) and float consumers exact:
 *   LINEARS  the consumers' outputs (q_a/kv_a, or q,k,v);
 *   ATTN     (dsq_search_opts.attn_block; the DeepSeek input_layernorm
 *            group, where its site kept sequences) the whole MLA block's
 *            output, as AutoAWQ inspects self_attn: on the site's kept whole
 *            sequences (stats.h seqs), q_a / kv_a quantized (or q without
 *            q_lora), everything after them in float: q_a_layernorm -> q_b,
 *            kv_a_layernorm -> kv_b, RoPE, causal attention, o_proj (the
 *            engine's naive MLA path, tested equal to it); compared with the
 *            float block. V3 shapes, 4 x 512 tokens: float q_a, kv_a, q_b,
 *            kv_b, o (0.75 GB), all rows' inputs / outputs (0.2 GB), one
 *            sequence's q / expanded kv / context (0.17 GB), about 1.1 GB
 *            while this group is searched; about 210 GFLOP per sequence and
 *            candidate (o_proj 120, q_b 39, attention 22, kv_b 17), 18 TFLOP
 *            per layer with the 21 candidates;
 *   MLP      down(silu(gate x) * up x) with down in float (AutoAWQ: the mlp);
 *   MOE      the MoE block's output, as AutoAWQ inspects mlp: on the sampled
 *            tokens of the router's input (uniform over all calibration
 *            tokens; every token when the reservoir holds them all), each
 *            token routed by the (float) router, out = sum_k w_k
 *            expert_k(x) + shared(x), so experts add up per token with their
 *            router weights, as in the layer. Without a router: the older
 *            unweighted sum over experts of their own sampled rows.
 * FLEX (msModelSlim flex_smooth_quant's automatic search,
 * alpha_beta_search.py:91-180): s = max|X|^alpha / max|W|^beta (smooth.h
 * dsq_flex_scales), normalized like the others. Stage 1 scores alpha = i/G,
 * beta = 1 - alpha for i = 0..G; stage 2 keeps the best alpha and scores
 * beta = j/G, j = 0..G, keeping its best only when it is at least as good as
 * stage 1's. Within a stage ties go to the later grid value, as
 * msModelSlim's `<=` does. msModelSlim scores
 * RMSE(Q(x/s) Q(W s)^T - x W^T) / RMS(x W^T) with int8 per-token and
 * per-channel quantizers; dsq scores the same group output error with each
 * consumer quantized by its real target scheme (for W8A8 dynamic the same
 * quantizers; for static W8A8 the per-tensor activation quantizer the
 * export will run), and RMS(x W^T) is one constant per group, so the
 * argmin is that of the squared error. s = 1 stays candidate 0, so FLEX too
 * never returns a loss above the identity's.
 * The lowest loss wins, ties to the lower index, so the search never returns
 * a loss above the s = 1 loss. Clipping is not part of the search (AutoAWQ
 * searches scales with plain RTN too); see calib.h for the clip step. */
#ifndef DSQ_AWQ_H
#define DSQ_AWQ_H

#include "dsq_error.h"
#include "model.h"
#include "ops.h"
#include "scheme.h"
#include "stats.h"

#include <stddef.h>
#include <stdint.h>

/* Which scheme a tensor will be converted with: *sc = NULL (or a float
 * scheme) means it stays float. *group_size: DSQ_GROUP_DEFAULT for the
 * scheme's default. Return 0 or a negative dsq_status. */
typedef int (*dsq_calib_target_fn)(void *ctx, const char *tensor, int64_t rows, int64_t cols,
                                   const dsq_scheme **sc, int32_t *group_size);

enum dsq_group_flavor { DSQ_GROUPS_AWQ = 0, DSQ_GROUPS_SMOOTH = 1 };
enum dsq_group_loss { DSQ_LOSS_LINEARS = 0, DSQ_LOSS_MLP = 1, DSQ_LOSS_MOE = 2 };
enum dsq_search_kind {
    DSQ_SEARCH_NONE   = 0,
    DSQ_SEARCH_AWQ    = 1,   /* s = 1, then the AWQ duo-scaling grid */
    DSQ_SEARCH_SMOOTH = 2,   /* s = 1, then the SmoothQuant alpha grid */
    DSQ_SEARCH_BOTH   = 3,   /* s = 1, the SmoothQuant grid, then the AWQ grid (w4a8) */
    DSQ_SEARCH_FLEX   = 4    /* flex smoothing: the two-stage alpha / beta grid (below) */
};

#define DSQ_AWQ_GRID_DEFAULT 20

typedef struct dsq_scale_group {
    char prev[320];              /* HF name of the producer tensor (norm or linear weight) */
    const dsq_linear *prev_lin;  /* producer linear, NULL for a norm */
    int64_t rb, rs, ro;          /* channel c -> producer row (c / rb) * rs + ro + c % rb */
    int64_t n;                   /* channels = consumers' in_features */
    const dsq_linear **lin;      /* consumers (quantization targets) */
    int nlin;
    const dsq_linear **passive;  /* consumers that only absorb s (router) */
    int npassive;
    const dsq_mlp **mlp;         /* LOSS_MLP / LOSS_MOE: the MLPs whose gate/up are consumers */
    int *mlp_expert;             /* routed expert index, -1 for dense / shared */
    int nmlp;
    int loss;                    /* enum dsq_group_loss */
    /* LOSS_MOE: the router, to weight each expert's output per token as the
     * layer does (router == NULL: the older unweighted per-expert sum) */
    const dsq_linear *router;
    dsq_router route;
    char site[320];              /* statistics site of the group input */
    /* DeepSeek input_layernorm group: the model and layer whose MLA block
     * the ATTN loss runs (NULL otherwise) */
    const dsq_model *attn_model;
    int layer;
    int expert;                  /* per-expert group (up -> down): its expert, else -1 */
} dsq_scale_group;

typedef struct dsq_group_list {
    dsq_scale_group *v;
    int n, cap;
} dsq_group_list;

/* Groups of one (loaded) layer. */
int  dsq_groups_build(const dsq_model *m, int layer, int flavor, dsq_group_list *out, dsq_diag *d);
void dsq_groups_release(dsq_group_list *l);

/* Weight statistics of a group: wmax[n] = max |W_j| over consumers (and the
 * passive ones when with_passive), wmean[n] (may be NULL) = AutoAWQ w_mean
 * over consumers with quantization groups of awq_group_size columns (0: whole
 * row). Deterministic for any pool size. */
int dsq_group_weight_stats(const dsq_scale_group *g, int with_passive, int32_t awq_group_size, float *wmax,
                           float *wmean, dsq_pool *pool, dsq_diag *d);

/* One candidate of the grid (see top): kind AWQ uses xstat = x_mean and
 * wstat = w_mean, SMOOTH uses max|X| and max|W|; live = xstat. */
void dsq_search_candidate(int kind, const float *xstat, const float *wstat, int64_t n, double ratio, float *s);

typedef struct dsq_search_opts {
    int kind;                    /* enum dsq_search_kind */
    int n_grid;                  /* 0: 20 */
    dsq_calib_target_fn target;  /* consumers' schemes */
    void *target_ctx;
    dsq_pool *pool;
    const volatile int *cancel;
    int attn_block;              /* score the attention-input group on the MLA
                                    block output (ATTN above) where the site
                                    kept sequences; 0: LINEARS */
    int range_search;            /* the candidates' int4 group parameters
                                    (dsq_qparams.range_search) */
} dsq_search_opts;

typedef struct dsq_search_report {
    double loss_identity;        /* mean squared error with s = 1 */
    double loss_best;            /* <= loss_identity */
    int best;                    /* -1: s = 1 kept, else the candidate's grid index
                                    (BOTH: 0..n_grid-1 SmoothQuant, then AWQ;
                                    FLEX: 0..n_grid stage 1, n_grid+1.. stage 2) */
    float alpha, beta;           /* FLEX: the chosen exponents (0, 0 when s = 1 is kept) */
    int64_t rows;                /* sampled rows the loss was measured on */
    int quantized;               /* consumers that were quantized */
} dsq_search_report;

/* Search s[g->n] for group g using ls's reservoirs and statistics. When no
 * consumer is quantized or no rows were sampled, s = 1 (rep->best = -1). */
int dsq_scale_search(const dsq_scale_group *g, const dsq_layer_stats *ls, const dsq_search_opts *o, float *s,
                     dsq_search_report *rep, dsq_diag *d);

/* The loss dsq_scale_search minimises, for given scales s[g->n] against
 * s = 1, on ls's sampled rows (for example statistics of held-out text, to
 * check that searched scales generalise). Mean squared error per output
 * element; both -1 when no consumer is quantized or no rows were sampled. */
int dsq_scale_eval(const dsq_scale_group *g, const dsq_layer_stats *ls, const dsq_search_opts *o, const float *s,
                   double *loss_identity, double *loss_s, int64_t *rows, dsq_diag *d);

/* The float MLA block the ATTN loss compares against: group g (attn_model
 * set) on one sequence x [T][g->n] of normed hidden states at positions
 * 0..T-1, out [T][hidden] = o_proj output. Tests check it against the
 * engine's layer. DSQ_ERR_INVALID_ARG for other groups, DSQ_ERR_SHAPE for
 * shapes the block cannot run. */
int dsq_awq_attn_block(const dsq_scale_group *g, const float *x, int64_t T, float *out, dsq_pool *pool,
                       dsq_diag *d);

/* AutoAWQ does not clip q/k projections ("q_", "k_", "query", "key", "Wqkv"). */
int dsq_awq_clip_allowed(const char *tensor);

/* Clip check: quant's clip search picks, per quantization group, the
 * clipping ratio with the least importance-weighted weight error (a
 * diagonal X^T X stand-in for AutoAWQ's sampled X.W error). Clipping errors
 * are same-signed across a row's extreme weights, so that proxy can pick
 * clips that raise the output error. This measures the output MSE of the
 * linear on the site's sampled rows, quantized by sc (group gs) with
 * in_scale, with and without the clip search, and sets *use_clip to 1 only
 * when clipping is strictly better; *err0 / *err1 (may be NULL) receive the
 * two mean squared errors. No sampled rows: *use_clip = 1 (trust the proxy).
 * search: dsq_qparams.range_search of both quantizations. */
int dsq_clip_check(const dsq_linear *l, const dsq_scheme *sc, int32_t gs, const float *in_scale,
                   const float *importance, int search, const dsq_act_stats *site, dsq_pool *pool, int *use_clip, double *err0,
                   double *err1, dsq_diag *d);

/* ---- Clip search on X^T X (awq_clip.c) --------------------------------
 * AutoAWQ auto_clip: per output row r and quantization group g, the clip
 * max = amax * (1 - i/20), i < 10 (i = 0: none) with the least mean squared
 * partial output error (x_g . (w_g - q(w_g)))^2 over the calibration tokens,
 * x the input the scaled weights see (x / in_scale). Evaluated exactly from
 * the site's X^T X blocks (stats.h, all tokens; AutoAWQ subsamples 512),
 * never from a diagonal proxy. awq-w4a16 rounding (scheme.h); the converter
 * clamps each group to +-max before quantizing (dsq_awq_clip_apply), which
 * is AutoAWQ's own order (clamp, then pseudo-quantize). */
#define DSQ_AWQ_CLIP_GRID       20
#define DSQ_AWQ_CLIP_CANDIDATES 10

/* Groups of gs columns (0: the whole row) each fit one X^T X block. */
int   dsq_awq_clip_supported(int64_t cols, int32_t gs);
float dsq_awq_clip_max(float amax, int idx);
/* w [rows][cols]: weights with every scale folded; idx [rows][ngroups]
 * receives the chosen i per (row, group). *err0 / *err1 (may be NULL): the
 * objective per weight without clipping / with the chosen clips.
 * search (dsq_qparams.range_search mode): each candidate is quantized as the
 * converter will, with searched group parameters weighted by importance
 * ([cols] or NULL) when on, plain min/max when off.
 * DSQ_ERR_INVALID_ARG without X^T X or for unsupported groups. */
int   dsq_awq_clip_search(const float *w, int64_t rows, int64_t cols, int32_t gs, const float *in_scale,
                          const dsq_act_stats *site, int search, const float *importance, uint8_t *idx,
                          double *err0, double *err1);
/* Clamp each (row, group) of rows w [nrows][cols] to +-its clip (idx as
 * above, starting at the first of these rows). */
void  dsq_awq_clip_apply(float *w, int64_t nrows, int64_t cols, int32_t gs, const uint8_t *idx);
/* Mean squared output error of weights wq against w (both [rows][cols],
 * scaled) on inputs x [T][cols] (divided by in_scale when given); -1 when
 * T == 0 or out of memory. Benchmarks and tests. */
double dsq_awq_output_mse(const float *w, const float *wq, int64_t rows, int64_t cols, const float *in_scale,
                          const float *x, int64_t T);

#endif
