/* ops.h - float32 building blocks of the forward pass.
 *
 * Everything here works on plain float arrays and knows nothing about
 * models, files or quantization: RMSNorm, SiLU, softmax, rotary position
 * embeddings (both layouts, with linear / llama3 / YaRN frequency scaling),
 * MoE routing and the per-head attention kernel. The numerics follow the
 * PyTorch references: activations, softmax, norms and the residual stream are
 * float32; reductions accumulate in float (RMSNorm's mean of squares in
 * double, which only removes rounding noise).
 *
 * All functions are pure and thread-safe; none allocates except
 * dsq_rope_init's caller-owned struct (fixed size). */
#ifndef DSQ_OPS_H
#define DSQ_OPS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "model_config.h"

/* ---- elementwise ------------------------------------------------------ */

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]; out may alias x.
 * w == NULL means all-ones (used by tests). */
void dsq_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
/* rows x n version of the above (row stride n). */
void dsq_rmsnorm_rows(float *out, const float *x, const float *w, int rows, int n, float eps);
/* The residual add and the next norm of a block, rows spread over pool
 * (NULL or a small job: the caller's thread): x += add (add NULL: none),
 * then out = rmsnorm(x) (out NULL: none). Each row runs the same scalar
 * loops as dsq_rmsnorm_rows wherever it runs: the same bits. */
struct dsq_pool;
void dsq_add_rmsnorm_rows(float *x, const float *add, float *out, const float *w, int rows, int n, float eps,
                          struct dsq_pool *pool);

/* g[i] = silu(g[i]) * u[i]  (SwiGLU: down(silu(gate x) * up x)). */
void dsq_silu_mul(float *g, const float *u, size_t n);
static inline float dsq_silu(float x) { return x / (1.0f + expf(-x)); }

/* In-place numerically stable softmax over n values (max subtracted). */
void dsq_softmax(float *x, int n);

/* y += a * x */
void dsq_axpy(float *y, float a, const float *x, size_t n);
float dsq_dot(const float *a, const float *b, size_t n);

/* ---- rotary position embeddings -------------------------------------- */

enum dsq_rope_style {
    DSQ_ROPE_PAIRS = 0, /* DeepSeek: rotate (x[2i], x[2i+1]) as a complex number */
    DSQ_ROPE_HALF  = 1  /* HF Llama/Qwen2 rotate_half: pairs (x[i], x[i+d/2]) */
};

/* Frequency scaling: enum dsq_rope_type from model_config.h
 * (DSQ_ROPE_NONE, DSQ_ROPE_LINEAR = position interpolation freq / factor,
 * DSQ_ROPE_LLAMA3 = transformers _compute_llama3_parameters,
 * DSQ_ROPE_YARN = DeepSeek / transformers YaRN). */

#define DSQ_ROPE_MAX_DIM 512

typedef struct dsq_rope_params {
    int dim;                    /* rotated dims per head (even, <= DSQ_ROPE_MAX_DIM) */
    int style;                  /* enum dsq_rope_style */
    double theta;               /* rope_theta (base) */
    int scaling;                /* enum dsq_rope_type */
    double factor;              /* rope_scaling.factor */
    int original_max_pos;       /* original_max_position_embeddings */
    /* yarn */
    double beta_fast, beta_slow;
    double mscale, mscale_all_dim; /* DeepSeek yarn; both 0 = HF generic yarn */
    double attention_factor;    /* HF generic yarn override; 0 = default */
    /* llama3 */
    double low_freq_factor, high_freq_factor;
} dsq_rope_params;

typedef struct dsq_rope {
    int dim, style;
    float cos_sin_scale;        /* YaRN multiplies cos and sin by this (1 if none) */
    int yarn_low, yarn_high;    /* correction range actually used (yarn only) */
    float inv_freq[DSQ_ROPE_MAX_DIM / 2];
} dsq_rope;

/* Defaults: no scaling, theta 10000, pairs. */
void dsq_rope_params_default(dsq_rope_params *p, int dim);
/* Fills r; returns 0 or DSQ_ERR_INVALID_ARG for an odd/oversized dim or bad
 * scaling values. */
int dsq_rope_init(dsq_rope *r, const dsq_rope_params *p);
/* cos[i], sin[i] for i < dim/2 at position pos (already times cos_sin_scale).
 * The angle is (float)pos * inv_freq[i] in float32, as torch.outer does. */
void dsq_rope_cos_sin(const dsq_rope *r, int64_t pos, float *cos_out, float *sin_out);
/* Rotate one head vector x[dim] in place with precomputed cos/sin. */
void dsq_rope_apply(const dsq_rope *r, float *x, const float *cos_v, const float *sin_v);

/* YaRN helpers (docs/checkpoints.md, "RoPE and YaRN"), exposed for tests and
 * the softmax scale. */
/* 0.1 * mscale * ln(factor) + 1 for factor > 1, else 1. */
double dsq_yarn_get_mscale(double factor, double mscale);
/* floor/ceil of find_correction_dim for beta_fast/beta_slow, clamped to
 * [0, dim-1]. */
void dsq_yarn_correction_range(double beta_fast, double beta_slow, int dim, double base,
                               int original_max_pos, int *low, int *high);

/* ---- MoE routing ------------------------------------------------------ */

/* Score functions and top-k methods: enum dsq_scoring_func and enum
 * dsq_topk_method from model_config.h. GREEDY = plain top-k;
 * GROUP_LIMITED_GREEDY (DeepSeek-V2) = group score is the max, other groups
 * masked to 0; NOAUX_TC (DeepSeek-V3) = group score is the top-2 sum when a
 * correction bias exists (else the max), other groups masked to -inf. */

/* Limits checked when a model is loaded (V3: 256 experts in 8 groups). */
#define DSQ_ROUTE_MAX_EXPERTS 1024
#define DSQ_ROUTE_MAX_GROUPS  256

typedef struct dsq_router {
    int n_experts, top_k;
    int n_group, topk_group;   /* n_group <= 1: no group limit */
    int score_func;            /* enum dsq_scoring_func */
    int topk_method;           /* enum dsq_topk_method */
    int norm_topk_prob;        /* divide the k weights by their sum (+1e-20) */
    /* V3 multiplies by routed_scaling_factor always; V2 only when it did not
     * normalise (modeling_deepseek.py of each). */
    int scale_always;
    float routed_scaling_factor;
    const float *bias;         /* [n_experts] e_score_correction_bias: selection only, or NULL */
} dsq_router;

/* Route one token: logits[n_experts] (x @ gate^T) -> idx[top_k] (ordered by
 * selection score, descending; ties go to the lower index) and w[top_k].
 * scratch holds 2 * n_experts floats; 1 <= top_k <= n_experts. The selection uses scores + bias and
 * the group mask; the weights are the unbiased scores (docs/checkpoints.md,
 * "Routing"). */
void dsq_route(const dsq_router *r, const float *logits, float *scratch, int *idx, float *w);

/* ---- attention kernel ------------------------------------------------- */

/* One query head against n keys: s_j = scale * q.k_j, softmax over j, then
 * out[dv] = sum_j p_j v_j. k rows are kstride floats apart, v rows vstride.
 * scores is caller scratch of n floats. */
void dsq_attend_head(const float *q, int dk, const float *k, size_t kstride,
                     const float *v, size_t vstride, int dv, int n, float scale,
                     float *scores, float *out);

/* A block of attention rows against P keys, as three GEMMs (OpenBLAS):
 *   S = scale * (Q1 K1^T + Q2 K2^T)            [M, P]
 *   row r keeps its first visible[r] keys (causal mask), softmax per row
 *   O = S V                                     [M, dv]
 * Q1 [M, d1] rows ldq1 apart, K1 [P, d1] (ldk1), optional Q2/K2 (d2 = 0:
 * none), V [P, dv] (ldv), O rows ldo apart. O may alias Q1 (Q1 is not read
 * after S is formed). S is caller scratch of M * P floats. Rows of the
 * softmax are spread over pool (NULL: caller's thread). Results do not
 * depend on the pool size. */
struct dsq_pool;
void dsq_attend_block(int M, int P, const float *q1, int ldq1, const float *k1, int ldk1, int d1,
                      const float *q2, int ldq2, const float *k2, int ldk2, int d2,
                      const float *v, int ldv, int dv, const int32_t *visible, float scale,
                      float *S, float *o, int ldo, struct dsq_pool *pool);

#endif
