/* model_config.h - Hugging Face config.json as one typed struct.
 *
 * Supported architectures (from "architectures"[0], else "model_type"):
 *   DeepseekV3ForCausalLM / deepseek_v3   -> DSQ_ARCH_DEEPSEEK_V3 (MLA + MoE)
 *   DeepseekV32ForCausalLM / deepseek_v32 -> DSQ_ARCH_DEEPSEEK_V32 (MLA with
 *                                            DSA: a lightning indexer picks
 *                                            index_topk keys per query; MoE)
 *   DeepseekV2ForCausalLM / deepseek_v2   -> DSQ_ARCH_DEEPSEEK_V2 (MLA + MoE)
 *   LlamaForCausalLM, MistralForCausalLM / llama, mistral -> DSQ_ARCH_LLAMA
 *   Qwen2ForCausalLM / qwen2              -> DSQ_ARCH_QWEN2 (llama + qkv bias)
 * Anything else is DSQ_ERR_UNSUPPORTED naming the value. What differs
 * between the architectures lives in one table (dsq_arch_get): callers ask
 * for a trait, never compare arch values.
 *
 * Missing optional keys take the transformers defaults of that
 * architecture (e.g. DeepSeek-V3 configuration_deepseek_v3.py); a key present
 * with the wrong JSON type is DSQ_ERR_JSON naming the key. After parsing the
 * config is checked for consistency (DSQ_ERR_FORMAT naming the keys):
 * positive dims; num_attention_heads % num_key_value_heads == 0; for
 * llama/qwen2 without head_dim, hidden_size % num_attention_heads == 0; for
 * DeepSeek: kv_lora_rank, qk_*_head_dim, v_head_dim > 0, n_routed_experts > 0
 * with 0 < num_experts_per_tok <= n_routed_experts, n_group divides
 * n_routed_experts, 0 < topk_group <= n_group, num_experts_per_tok <=
 * topk_group * (n_routed_experts / n_group), 0 <= first_k_dense_replace <=
 * num_hidden_layers, moe_layer_freq >= 1; rope yarn factor >= 1, etc. */
#ifndef DSQ_MODEL_CONFIG_H
#define DSQ_MODEL_CONFIG_H

#include "dsq_error.h"

#include <stddef.h>
#include <stdint.h>

enum dsq_arch {              /* pinned values */
    DSQ_ARCH_UNKNOWN     = 0,
    DSQ_ARCH_DEEPSEEK_V3 = 1,
    DSQ_ARCH_DEEPSEEK_V2 = 2,
    DSQ_ARCH_LLAMA       = 3,
    DSQ_ARCH_QWEN2       = 4,
    DSQ_ARCH_DEEPSEEK_V32 = 5
};

/* The traits of one architecture (one row of model_config.c's table). */
typedef struct dsq_arch_info {
    enum dsq_arch arch;
    const char *name;        /* "deepseek_v3", ... */
    int mla;                 /* MLA attention + DeepSeek MoE keys */
    int v3_moe;              /* V3 router defaults (sigmoid, noaux_tc,
                                norm_topk_prob) and routed_scaling_factor
                                applied after normalising */
    int dsa;                 /* DeepSeek sparse attention: the lightning
                                indexer keys (index_n_heads, index_head_dim,
                                index_topk) are required */
} dsq_arch_info;

enum dsq_scoring_func {      /* MoE router score function */
    DSQ_SCORING_SOFTMAX = 0,
    DSQ_SCORING_SIGMOID = 1
};

enum dsq_topk_method {
    DSQ_TOPK_GREEDY               = 0, /* "greedy" */
    DSQ_TOPK_GROUP_LIMITED_GREEDY = 1, /* "group_limited_greedy" (V2) */
    DSQ_TOPK_NOAUX_TC             = 2  /* "noaux_tc" (V3: bias for selection) */
};

enum dsq_rope_type {
    DSQ_ROPE_NONE   = 0,     /* rope_scaling null or absent */
    DSQ_ROPE_YARN   = 1,
    DSQ_ROPE_LINEAR = 2,
    DSQ_ROPE_LLAMA3 = 3
};

enum dsq_act {               /* hidden_act */
    DSQ_ACT_SILU = 0,        /* "silu", "swish" */
    DSQ_ACT_GELU = 1         /* "gelu", "gelu_new", "gelu_pytorch_tanh" */
};

#define DSQ_CFG_MAX_EOS 8
#define DSQ_CFG_STR     48

typedef struct dsq_rope_scaling {
    enum dsq_rope_type type;
    double factor;                          /* 1.0 if absent */
    double beta_fast, beta_slow;            /* yarn: defaults 32, 1 */
    double mscale, mscale_all_dim;          /* yarn: defaults 1, 0 */
    int64_t original_max_position_embeddings; /* 0 if absent */
    double low_freq_factor, high_freq_factor; /* llama3: defaults 1, 4 */
} dsq_rope_scaling;

typedef struct dsq_quant_config {
    int  present;                           /* quantization_config exists */
    char quant_method[DSQ_CFG_STR];         /* "fp8", ... ("" if absent) */
    char fmt[DSQ_CFG_STR];                  /* "e4m3" */
    int  block_m, block_n;                  /* weight_block_size, 0 if absent */
    char activation_scheme[DSQ_CFG_STR];    /* "dynamic" */
    char scale_fmt[DSQ_CFG_STR];            /* "ue8m0" (V3.1) or "" */
} dsq_quant_config;

typedef struct dsq_model_config {
    enum dsq_arch arch;
    char architecture[96];       /* architectures[0] or "" */
    char model_type[DSQ_CFG_STR];/* "" if absent */

    int64_t vocab_size;
    int64_t hidden_size;
    int64_t intermediate_size;   /* dense MLP */
    int64_t num_hidden_layers;   /* main layers (not counting MTP) */
    int64_t num_attention_heads;
    int64_t num_key_value_heads; /* defaults to num_attention_heads */
    int64_t head_dim;            /* llama/qwen2: hidden/heads if absent;
                                    DeepSeek: qk_nope + qk_rope */
    int64_t max_position_embeddings;
    double  rms_norm_eps;
    double  rope_theta;          /* 10000 if absent */
    dsq_rope_scaling rope_scaling;
    enum dsq_act hidden_act;
    char hidden_act_name[DSQ_CFG_STR];
    int  tie_word_embeddings;    /* default 0 */
    int  attention_bias;         /* q/k/v(/o) bias; 1 for qwen2 */
    int  mlp_bias;

    /* MLA (DeepSeek; 0 for others) */
    int64_t q_lora_rank;         /* 0 if null: q_proj instead of q_a/q_b */
    int64_t kv_lora_rank;
    int64_t qk_nope_head_dim;
    int64_t qk_rope_head_dim;
    int64_t v_head_dim;
    int64_t qk_head_dim;         /* qk_nope + qk_rope */

    /* MoE (DeepSeek; 0 for dense) */
    int64_t moe_intermediate_size;
    int64_t n_routed_experts;
    int64_t n_shared_experts;
    int64_t num_experts_per_tok;
    int64_t n_group;             /* 1 if absent */
    int64_t topk_group;          /* 1 if absent */
    enum dsq_topk_method topk_method;
    enum dsq_scoring_func scoring_func;
    double  routed_scaling_factor; /* 1.0 if absent */
    int     norm_topk_prob;
    int64_t first_k_dense_replace;
    int64_t moe_layer_freq;        /* 1 if absent */
    int64_t num_nextn_predict_layers; /* MTP layers, 0 if absent */

    /* DSA lightning indexer (V3.2; 0 for others): per layer
     * self_attn.indexer.{wq_b, wk, k_norm, weights_proj}. index_head_dim
     * is a power of two >= qk_rope_head_dim (its first qk_rope_head_dim
     * values are rotated); index_topk keys are attended per query. */
    int64_t index_n_heads;       /* 64 in V3.2 */
    int64_t index_head_dim;      /* 128 */
    int64_t index_topk;          /* 2048 */

    int64_t bos_token_id;        /* -1 if absent/null */
    int64_t eos_token_ids[DSQ_CFG_MAX_EOS]; /* int or list in config.json */
    int     n_eos;
    char    torch_dtype[DSQ_CFG_STR]; /* "bfloat16", "" if absent */
    dsq_quant_config quant;

    char   *raw_json;            /* the config.json text, NUL-terminated */
    size_t  raw_len;
} dsq_model_config;

/* Read path (a config.json file, or a directory holding config.json).
 * On failure cfg is released (safe to release again). */
int  dsq_model_config_load(dsq_model_config *cfg, const char *path, dsq_diag *d);
/* Parse JSON text of len bytes (need not be NUL-terminated); name is used in
 * messages (e.g. the file path). */
int  dsq_model_config_from_json_string(dsq_model_config *cfg, const char *json,
                                       size_t len, const char *name, dsq_diag *d);
/* Free raw_json and zero the struct. */
void dsq_model_config_release(dsq_model_config *cfg);

/* The traits of arch (an all-zero "unknown" row for unknown values). */
const dsq_arch_info *dsq_arch_get(enum dsq_arch a);
/* "deepseek_v3", "deepseek_v32", "deepseek_v2", "llama", "qwen2", "unknown". */
const char *dsq_arch_name(enum dsq_arch a);
/* 1 for the MLA + MoE architectures. */
int dsq_arch_is_deepseek(enum dsq_arch a);
/* 1 if decoder layer `layer` has a routed-expert MoE MLP:
 * n_routed_experts > 0, layer >= first_k_dense_replace and
 * layer % moe_layer_freq == 0. MTP layers (layer >= num_hidden_layers) are
 * MoE in DeepSeek-V3 and answer 1. */
int dsq_model_config_is_moe_layer(const dsq_model_config *cfg, int64_t layer);
/* One line for people: architecture, layers, dims, attention (MLA / GQA,
 * DSA's indexer heads x dim and index_topk), MoE, MTP layers. Returns
 * snprintf's length. */
int dsq_model_config_summary(const dsq_model_config *cfg, char *buf, size_t n);
/* MLP width of a layer: moe_intermediate_size for MoE layers, else
 * intermediate_size. */
int64_t dsq_model_config_ffn_dim(const dsq_model_config *cfg, int64_t layer);

#endif
