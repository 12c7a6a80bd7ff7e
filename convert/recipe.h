/* recipe.h - which tensor gets which quantization scheme.
 *
 * Decisions are made by tensor ROLE, derived from the Hugging Face name
 * (DeepSeek-V3/V2, Llama/Mistral, Qwen2 naming), never by accident of a
 * substring. Roles are the container's pinned enum dsq_role.
 *
 * Default recipe (--scheme S):
 *   attn_linear, mlp_linear, expert_linear, shared_expert_linear   -> S
 *   embed, norm (all), router (mlp.gate.weight), router_bias
 *   (e_score_correction_bias), lm_head, linear_bias, mtp (eh_proj),
 *   indexer_linear (V3.2 self_attn.indexer.wq_b / wk / weights_proj: float
 *   in msModelSlim's W8A8 / W4A8 recipes and in vllm-ascend's bf16 indexer;
 *   --scheme-for can still quantize them), other                   -> keep
 * "keep" means: stay in the source float type. F32 -> f32, BF16 -> bf16,
 * F16 -> f32 (lossless; dsq has no f16 scheme), F64 -> f32, FP8-block ->
 * bf16 (what DeepSeek's fp8_cast_bf16.py produces). Integer source tensors
 * are refused (an already-quantized checkpoint is not an input).
 *
 * MTP layer: the layer whose index equals config num_hidden_layers (61 for
 * V3). Its decoder tensors (self_attn, mlp, experts, norms) follow the same
 * rules as any layer; its own tensors map to embed (embed_tokens), norm
 * (enorm, hnorm, shared_head.norm), lm_head (shared_head.head) and mtp
 * (eh_proj, kept by default: it is small and feeds every MTP token).
 * Entries carry an `mtp` flag so presets can treat MTP experts differently.
 *
 * User rules (--keep REGEX, --scheme-for REGEX=SCHEME) are tried in the order
 * given; the first whose regex matches the tensor name (PCRE2, unanchored
 * search, like Python re.search) decides. Then preset rules, then the role
 * table. A rule that asks for an integer scheme on a tensor that cannot hold
 * one (rank < 2, a bias, an FP8 scale) is skipped for that tensor.
 *
 * Presets (--recipe NAME):
 *   deepseek-w4a8  msModelSlim lab_practice/deepseek_v3/
 *                  deepseek_w4a8_per_channel.yaml (docs/serving-exports.md,
 *                  "The deepseek-w4a8 recipe"): attention
 *                  and dense/shared MLP w8a8-dynamic, routed experts w4a8
 *                  (per channel unless --group-size), MTP-layer experts
 *                  w8a8-dynamic, kv_b_proj kept.
 *   deepseek-w8a8  msModelSlim lab_practice/deepseek_v3_2/deepseek_w8a8.yaml
 *                  and the DeepSeek W8A8 script's mix_cfg: attention w8a8
 *                  (static, calibrated), kv_b_proj kept, dense / shared /
 *                  routed MLP w8a8-dynamic, router kept. The MTP layer's
 *                  attention gets w8a8-dynamic (below: calibration does not
 *                  run the MTP layer; msModelSlim's V3.2 adapter calibrates
 *                  it through its own MTP input).
 *
 * w8a8 (static activation scales) needs calibration statistics and is
 * refused with a message pointing to w8a8-dynamic, unless the recipe is
 * marked calibrated (ds-quant --calib / --stats: calib/calib.h supplies the
 * static activation parameters). The MTP layer, which calibration does not
 * run, then gets w8a8-dynamic wherever the recipe says w8a8. */
#ifndef DSQ_RECIPE_H
#define DSQ_RECIPE_H

#include "container.h"     /* enum dsq_role */
#include "dsq_error.h"
#include "dtype.h"
#include "safetensors.h"
#include "scheme.h"

#include <stddef.h>
#include <stdint.h>

/* ---- roles ---- */

/* dsq_role_info: formats/container.h */
/* Classify a Hugging Face tensor name. num_hidden_layers (<= 0: unknown)
 * marks layers with index >= it as MTP; names only MTP layers have (eh_proj,
 * enorm, hnorm, shared_head.*) are MTP regardless. Never fails: unknown
 * names get DSQ_ROLE_OTHER. */
void dsq_role_classify(const char *name, int64_t num_hidden_layers, dsq_role_info *out);

/* 1 for the linear roles that get the recipe's scheme by default. */
int dsq_role_is_quantized_by_default(uint32_t role);

/* ---- recipe ---- */

typedef struct dsq_recipe_rule {
    char *pattern;              /* as given */
    void *code;                 /* pcre2_code_8 * */
    void *match;                /* pcre2_match_data_8 * */
    const dsq_scheme *scheme;   /* NULL = keep */
} dsq_recipe_rule;

typedef struct dsq_recipe {
    const dsq_scheme *role_scheme[DSQ_ROLE_COUNT]; /* NULL = keep */
    const dsq_scheme *mtp_expert_scheme;           /* NULL = as role_scheme */
    int32_t group_size;          /* DSQ_GROUP_DEFAULT: each scheme's default */
    const char *preset;          /* static name or NULL */
    dsq_recipe_rule *rules;      /* user rules, then preset rules */
    size_t nrules, nuser;
    int calibrated;              /* calibration scales exist: schemes that need them are allowed */
} dsq_recipe;

/* Scheme by name for the CLI: canonical names, aliases and "keep" (*out =
 * NULL). Unknown names: DSQ_ERR_NOT_FOUND with the list of schemes in the
 * message. w8a8 (static) and other calibration schemes: DSQ_ERR_UNSUPPORTED
 * "w8a8 (static) needs calibration statistics (--calib); use w8a8-dynamic". */
int dsq_recipe_scheme(const char *name, const dsq_scheme **out, dsq_diag *d);
/* Same; calibrated != 0 also accepts schemes that need calibration (w8a8). */
int dsq_recipe_scheme_ex(const char *name, int calibrated, const dsq_scheme **out, dsq_diag *d);

/* Start a recipe whose linear roles get `scheme` (a name as above; "keep"
 * keeps everything). */
int dsq_recipe_init(dsq_recipe *r, const char *scheme, dsq_diag *d);
/* Same with r->calibrated set first (ds-quant --calib / --stats). */
int dsq_recipe_init_ex(dsq_recipe *r, const char *scheme, int calibrated, dsq_diag *d);
/* Start from a named preset instead. DSQ_ERR_NOT_FOUND for unknown names. */
int dsq_recipe_init_preset(dsq_recipe *r, const char *preset, dsq_diag *d);
/* Names of presets, NULL-terminated. */
const char *const *dsq_recipe_presets(void);
/* 1 when the preset puts a scheme that needs calibration statistics (static
 * W8A8) on some role: ds-quant then requires --calib or --stats. */
int dsq_recipe_preset_needs_calibration(const char *preset);
/* The scheme calibration prepares a preset for (its statistics, searches and
 * static activation parameters: "w4a8" for deepseek-w4a8, "w8a8" for
 * deepseek-w8a8); NULL for an unknown preset. */
const char *dsq_recipe_preset_calib_scheme(const char *preset);
/* Keep exactly the tensor `name` (no regex meaning), ahead of every other
 * rule: for choices made after calibration (ds-quant --rollback). */
int dsq_recipe_keep_exact(dsq_recipe *r, const char *name, dsq_diag *d);
/* --keep REGEX. DSQ_ERR_INVALID_ARG (regex error with its offset). */
int dsq_recipe_add_keep(dsq_recipe *r, const char *regex, dsq_diag *d);
/* --scheme-for REGEX=SCHEME (split at the LAST '='). */
int dsq_recipe_add_rule(dsq_recipe *r, const char *spec, dsq_diag *d);
void dsq_recipe_release(dsq_recipe *r);

/* ---- plan ---- */

enum dsq_plan_source {
    DSQ_PLAN_BY_ROLE   = -1,   /* role table */
    DSQ_PLAN_BY_PRESET = -2,   /* preset rule (MTP expert override etc.) */
    DSQ_PLAN_BY_DTYPE  = -3    /* rule skipped: tensor cannot hold an int scheme */
};

typedef struct dsq_plan_entry {
    const char *name;            /* borrowed (safetensors model or caller) */
    const dsq_st_tensor *t;      /* source tensor; NULL from dsq_recipe_decide */
    dsq_role_info role;
    const dsq_scheme *scheme;    /* resolved, never NULL */
    int kept;                    /* float passthrough chosen by "keep" */
    int rule;                    /* index of the deciding rule, or enum dsq_plan_source */
    enum dsq_dtype src_dtype;
    int ndim;
    int64_t shape[DSQ_ST_MAX_DIMS];
    dsq_qshape qshape;           /* row view + resolved group size */
    uint64_t src_bytes;
    uint64_t est_bytes;          /* raw blob bytes (output before zstd) */
    enum dsq_dtype scale_dtype;  /* an export's stored scale dtype (dsq_qparams.scale_dtype),
                                    DSQ_DTYPE_INVALID for a .dsq */
} dsq_plan_entry;

/* Decide one tensor. shape has ndim entries. Fails with DSQ_ERR_UNSUPPORTED
 * (integer source dtype, shape the scheme cannot pack, e.g. an int scheme with
 * more than 65536 input columns), naming the tensor. */
int dsq_recipe_decide(const dsq_recipe *r, const char *name, enum dsq_dtype dtype,
                      int ndim, const int64_t *shape, int64_t num_hidden_layers,
                      dsq_plan_entry *out, dsq_diag *d);

typedef struct dsq_plan {
    dsq_plan_entry *v;
    size_t n;
    int64_t num_hidden_layers;   /* as used (config, or inferred from MTP names) */
    uint64_t src_bytes;          /* incl. FP8 scale companions */
    uint64_t est_bytes;
    size_t   count_by_scheme[DSQ_SCHEME_ID_COUNT];
    uint64_t bytes_by_scheme[DSQ_SCHEME_ID_COUNT];  /* estimated raw out */
} dsq_plan;

/* Plan every tensor of m except FP8 scale companions, in the deterministic
 * output order: source order (shard index, then file offset), so the
 * conversion reads each file front to back. num_hidden_layers <= 0: inferred
 * from MTP-only names if any. */
int  dsq_plan_build(dsq_plan *p, const dsq_recipe *r, const dsq_st_model *m,
                    int64_t num_hidden_layers, dsq_diag *d);
void dsq_plan_release(dsq_plan *p);

/* Human-readable deciding rule ("role", "preset", "--keep 'x'", ...). */
void dsq_plan_reason(const dsq_recipe *r, const dsq_plan_entry *e, char *buf, size_t n);

#endif
