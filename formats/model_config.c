/* model_config.c - config.json -> dsq_model_config (see model_config.h).
 *
 * Wrong JSON types are DSQ_ERR_JSON, inconsistent values DSQ_ERR_FORMAT,
 * unknown architectures / activations / rope types DSQ_ERR_UNSUPPORTED;
 * every message names the key. Shape-defining DeepSeek keys are required
 * rather than defaulted to the 671B values, so a small test model with a
 * missing key fails loudly instead of being read as a giant one. */
#include "model_config.h"
#include "st_internal.h"
#include "dsq_file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONFIG_MAX_BYTES (16u << 20)

struct ctx {
    json_object *root;
    const char *path;
    dsq_diag *d;
};

/* ===== typed getters: missing or null -> default ===== */

static json_object *get(struct ctx *c, const char *key)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(c->root, key, &v)) return NULL;
    return v;   /* NULL for JSON null */
}

static int need(struct ctx *c, const char *key)
{
    return dsq_fail(c->d, DSQ_ERR_FORMAT, c->path, NULL, -1, "config is missing '%s'", key);
}

/* integer (an integral double such as 4096.0 is accepted too) */
static int as_int(struct ctx *c, json_object *v, const char *key, int64_t *out)
{
    if (json_object_is_type(v, json_type_int)) {
        if (json_object_get_int64(v) == INT64_MAX && json_object_get_uint64(v) > (uint64_t)INT64_MAX)
            return dsq_fail(c->d, DSQ_ERR_FORMAT, c->path, NULL, -1, "'%s' is too large", key);
        *out = json_object_get_int64(v);
        return DSQ_OK;
    }
    if (json_object_is_type(v, json_type_double)) {
        double x = json_object_get_double(v);
        if (isfinite(x) && x == floor(x) && fabs(x) < 9.0e15) { *out = (int64_t)x; return DSQ_OK; }
    }
    return dsq_fail(c->d, DSQ_ERR_JSON, c->path, NULL, -1, "'%s' is not an integer", key);
}

static int get_int(struct ctx *c, const char *key, int required, int64_t def, int64_t *out)
{
    json_object *v = get(c, key);
    if (!v) {
        if (required) return need(c, key);
        *out = def;
        return DSQ_OK;
    }
    return as_int(c, v, key, out);
}

static int get_double(struct ctx *c, const char *key, double def, double *out)
{
    json_object *v = get(c, key);
    if (!v) { *out = def; return DSQ_OK; }
    if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
        return dsq_fail(c->d, DSQ_ERR_JSON, c->path, NULL, -1, "'%s' is not a number", key);
    *out = json_object_get_double(v);
    if (!isfinite(*out))
        return dsq_fail(c->d, DSQ_ERR_FORMAT, c->path, NULL, -1, "'%s' is not finite", key);
    return DSQ_OK;
}

static int get_bool(struct ctx *c, const char *key, int def, int *out)
{
    json_object *v = get(c, key);
    if (!v) { *out = def; return DSQ_OK; }
    if (!json_object_is_type(v, json_type_boolean))
        return dsq_fail(c->d, DSQ_ERR_JSON, c->path, NULL, -1, "'%s' is not true or false", key);
    *out = json_object_get_boolean(v);
    return DSQ_OK;
}

static int str_of(struct ctx *c, json_object *v, const char *key, char *buf, size_t cap)
{
    if (!json_object_is_type(v, json_type_string))
        return dsq_fail(c->d, DSQ_ERR_JSON, c->path, NULL, -1, "'%s' is not a string", key);
    const char *s = json_object_get_string(v);
    size_t n = (size_t)json_object_get_string_len(v);
    if (n >= cap || strlen(s) != n)
        return dsq_fail(c->d, DSQ_ERR_FORMAT, c->path, NULL, -1, "'%s' value '%.40s' is too long",
                        key, s);
    memcpy(buf, s, n + 1);
    return DSQ_OK;
}

static int get_str(struct ctx *c, const char *key, const char *def, char *buf, size_t cap)
{
    json_object *v = get(c, key);
    if (!v) { snprintf(buf, cap, "%s", def); return DSQ_OK; }
    return str_of(c, v, key, buf, cap);
}

/* ===== names ===== */

static const struct { const char *name; enum dsq_arch arch; } arch_names[] = {
    { "DeepseekV3ForCausalLM", DSQ_ARCH_DEEPSEEK_V3 },
    { "deepseek_v3",           DSQ_ARCH_DEEPSEEK_V3 },
    { "DeepseekV32ForCausalLM", DSQ_ARCH_DEEPSEEK_V32 },
    { "deepseek_v32",          DSQ_ARCH_DEEPSEEK_V32 },
    { "DeepseekV2ForCausalLM", DSQ_ARCH_DEEPSEEK_V2 },
    { "deepseek_v2",           DSQ_ARCH_DEEPSEEK_V2 },
    { "LlamaForCausalLM",      DSQ_ARCH_LLAMA },
    { "llama",                 DSQ_ARCH_LLAMA },
    { "MistralForCausalLM",    DSQ_ARCH_LLAMA },
    { "mistral",               DSQ_ARCH_LLAMA },
    { "Qwen2ForCausalLM",      DSQ_ARCH_QWEN2 },
    { "qwen2",                 DSQ_ARCH_QWEN2 },
};

static enum dsq_arch arch_from(const char *s)
{
    for (size_t i = 0; i < sizeof arch_names / sizeof arch_names[0]; i++)
        if (strcmp(arch_names[i].name, s) == 0) return arch_names[i].arch;
    return DSQ_ARCH_UNKNOWN;
}

/* Every difference between the architectures that is not a config key. */
static const dsq_arch_info arch_table[] = {
    /* arch                  name            mla v3_moe dsa */
    { DSQ_ARCH_UNKNOWN,      "unknown",      0,  0,     0 },
    { DSQ_ARCH_DEEPSEEK_V3,  "deepseek_v3",  1,  1,     0 },
    { DSQ_ARCH_DEEPSEEK_V2,  "deepseek_v2",  1,  0,     0 },
    { DSQ_ARCH_LLAMA,        "llama",        0,  0,     0 },
    { DSQ_ARCH_QWEN2,        "qwen2",        0,  0,     0 },
    { DSQ_ARCH_DEEPSEEK_V32, "deepseek_v32", 1,  1,     1 },
};

const dsq_arch_info *dsq_arch_get(enum dsq_arch a)
{
    for (size_t i = 0; i < sizeof arch_table / sizeof arch_table[0]; i++)
        if (arch_table[i].arch == a) return &arch_table[i];
    return &arch_table[0];
}

const char *dsq_arch_name(enum dsq_arch a)
{
    return dsq_arch_get(a)->name;
}

int dsq_arch_is_deepseek(enum dsq_arch a)
{
    return dsq_arch_get(a)->mla;
}

int dsq_model_config_is_moe_layer(const dsq_model_config *cfg, int64_t layer)
{
    if (!cfg || cfg->n_routed_experts <= 0 || layer < 0) return 0;
    if (layer >= cfg->num_hidden_layers) return 1;     /* MTP */
    return layer >= cfg->first_k_dense_replace &&
           cfg->moe_layer_freq > 0 && layer % cfg->moe_layer_freq == 0;
}

int64_t dsq_model_config_ffn_dim(const dsq_model_config *cfg, int64_t layer)
{
    return dsq_model_config_is_moe_layer(cfg, layer) ? cfg->moe_intermediate_size
                                                     : cfg->intermediate_size;
}

int dsq_model_config_summary(const dsq_model_config *c, char *buf, size_t n)
{
    char dsa[128] = "", moe[96] = "", mtp[48] = "";
    if (dsq_arch_get(c->arch)->dsa)
        snprintf(dsa, sizeof dsa, ", DSA (indexer %lld heads x %lld, index_topk %lld)",
                 (long long)c->index_n_heads, (long long)c->index_head_dim, (long long)c->index_topk);
    if (c->n_routed_experts > 0)
        snprintf(moe, sizeof moe, ", MoE %lld experts (top %lld)", (long long)c->n_routed_experts,
                 (long long)c->num_experts_per_tok);
    if (dsq_arch_is_deepseek(c->arch) && c->num_nextn_predict_layers > 0)
        snprintf(mtp, sizeof mtp, ", %lld MTP layer%s", (long long)c->num_nextn_predict_layers,
                 c->num_nextn_predict_layers == 1 ? "" : "s");
    return snprintf(buf, n, "%s: %lld layers, hidden %lld, %lld heads, vocab %lld, %s%s%s%s%s%s",
                    dsq_arch_name(c->arch), (long long)c->num_hidden_layers, (long long)c->hidden_size,
                    (long long)c->num_attention_heads, (long long)c->vocab_size,
                    dsq_arch_is_deepseek(c->arch) ? "MLA" : "GQA", dsa, moe, mtp,
                    c->quant.scale_fmt[0] ? ", scale_fmt " : "", c->quant.scale_fmt);
}

void dsq_model_config_release(dsq_model_config *cfg)
{
    if (!cfg) return;
    free(cfg->raw_json);
    memset(cfg, 0, sizeof *cfg);
}

/* ===== sections ===== */

static int parse_arch(struct ctx *c, dsq_model_config *cfg)
{
    json_object *a = get(c, "architectures");
    const char *first = NULL;
    if (a) {
        if (!json_object_is_type(a, json_type_array) || json_object_array_length(a) < 1 ||
            !json_object_is_type(json_object_array_get_idx(a, 0), json_type_string))
            return dsq_fail(c->d, DSQ_ERR_JSON, c->path, NULL, -1,
                            "'architectures' is not a list of strings");
        DSQ_TRY(str_of(c, json_object_array_get_idx(a, 0), "architectures",
                       cfg->architecture, sizeof cfg->architecture));
        first = cfg->architecture;
    }
    DSQ_TRY(get_str(c, "model_type", "", cfg->model_type, sizeof cfg->model_type));
    cfg->arch = first ? arch_from(first) : DSQ_ARCH_UNKNOWN;
    if (cfg->arch == DSQ_ARCH_UNKNOWN && cfg->model_type[0]) cfg->arch = arch_from(cfg->model_type);
    if (cfg->arch == DSQ_ARCH_UNKNOWN) {
        if (!first && !cfg->model_type[0])
            return dsq_fail(c->d, DSQ_ERR_FORMAT, c->path, NULL, -1,
                            "config has neither 'architectures' nor 'model_type'");
        return dsq_fail(c->d, DSQ_ERR_UNSUPPORTED, c->path, NULL, -1,
                        "unsupported architecture '%s' (model_type '%s')",
                        first ? first : "", cfg->model_type);
    }
    return DSQ_OK;
}

static int parse_rope(struct ctx *c, dsq_model_config *cfg)
{
    dsq_rope_scaling *r = &cfg->rope_scaling;
    r->type = DSQ_ROPE_NONE;
    r->factor = 1.0;
    r->beta_fast = 32.0;
    r->beta_slow = 1.0;
    r->mscale = 1.0;
    r->mscale_all_dim = 0.0;
    r->low_freq_factor = 1.0;
    r->high_freq_factor = 4.0;
    json_object *v = get(c, "rope_scaling");
    if (!v) return DSQ_OK;
    if (!json_object_is_type(v, json_type_object))
        return dsq_fail(c->d, DSQ_ERR_JSON, c->path, NULL, -1, "'rope_scaling' is not an object");
    struct ctx sub = { v, c->path, c->d };
    char type[DSQ_CFG_STR] = "";
    DSQ_TRY(get_str(&sub, "type", "", type, sizeof type));
    if (!type[0]) DSQ_TRY(get_str(&sub, "rope_type", "", type, sizeof type));
    if (!type[0] || strcmp(type, "default") == 0) r->type = DSQ_ROPE_NONE;
    else if (strcmp(type, "yarn") == 0) r->type = DSQ_ROPE_YARN;
    else if (strcmp(type, "linear") == 0) r->type = DSQ_ROPE_LINEAR;
    else if (strcmp(type, "llama3") == 0) r->type = DSQ_ROPE_LLAMA3;
    else return dsq_fail(c->d, DSQ_ERR_UNSUPPORTED, c->path, NULL, -1,
                         "unsupported rope_scaling type '%s'", type);
    DSQ_TRY(get_double(&sub, "factor", 1.0, &r->factor));
    DSQ_TRY(get_double(&sub, "beta_fast", 32.0, &r->beta_fast));
    DSQ_TRY(get_double(&sub, "beta_slow", 1.0, &r->beta_slow));
    DSQ_TRY(get_double(&sub, "mscale", 1.0, &r->mscale));
    DSQ_TRY(get_double(&sub, "mscale_all_dim", 0.0, &r->mscale_all_dim));
    DSQ_TRY(get_int(&sub, "original_max_position_embeddings", 0, 0,
                    &r->original_max_position_embeddings));
    DSQ_TRY(get_double(&sub, "low_freq_factor", 1.0, &r->low_freq_factor));
    DSQ_TRY(get_double(&sub, "high_freq_factor", 4.0, &r->high_freq_factor));
    if (r->type != DSQ_ROPE_NONE && !(r->factor > 0))
        return dsq_fail(c->d, DSQ_ERR_FORMAT, c->path, NULL, -1,
                        "rope_scaling factor %g is not positive", r->factor);
    if (r->type == DSQ_ROPE_YARN && r->factor < 1.0)
        return dsq_fail(c->d, DSQ_ERR_FORMAT, c->path, NULL, -1,
                        "rope_scaling yarn factor %g is below 1", r->factor);
    if ((r->type == DSQ_ROPE_YARN || r->type == DSQ_ROPE_LLAMA3) &&
        r->original_max_position_embeddings <= 0)
        return dsq_fail(c->d, DSQ_ERR_FORMAT, c->path, NULL, -1,
                        "rope_scaling %s needs a positive original_max_position_embeddings", type);
    if (r->type == DSQ_ROPE_LLAMA3 && !(r->high_freq_factor > r->low_freq_factor))
        return dsq_fail(c->d, DSQ_ERR_FORMAT, c->path, NULL, -1,
                        "rope_scaling llama3 high_freq_factor must exceed low_freq_factor");
    return DSQ_OK;
}

static int parse_quant(struct ctx *c, dsq_model_config *cfg)
{
    json_object *v = get(c, "quantization_config");
    if (!v) return DSQ_OK;
    if (!json_object_is_type(v, json_type_object))
        return dsq_fail(c->d, DSQ_ERR_JSON, c->path, NULL, -1,
                        "'quantization_config' is not an object");
    dsq_quant_config *q = &cfg->quant;
    struct ctx sub = { v, c->path, c->d };
    q->present = 1;
    DSQ_TRY(get_str(&sub, "quant_method", "", q->quant_method, sizeof q->quant_method));
    DSQ_TRY(get_str(&sub, "fmt", "", q->fmt, sizeof q->fmt));
    DSQ_TRY(get_str(&sub, "activation_scheme", "", q->activation_scheme, sizeof q->activation_scheme));
    DSQ_TRY(get_str(&sub, "scale_fmt", "", q->scale_fmt, sizeof q->scale_fmt));
    json_object *b = get(&sub, "weight_block_size");
    if (b) {
        int64_t bm, bn;
        if (!json_object_is_type(b, json_type_array) || json_object_array_length(b) != 2)
            return dsq_fail(c->d, DSQ_ERR_JSON, c->path, NULL, -1,
                            "'weight_block_size' is not a list of two integers");
        DSQ_TRY(as_int(c, json_object_array_get_idx(b, 0), "weight_block_size", &bm));
        DSQ_TRY(as_int(c, json_object_array_get_idx(b, 1), "weight_block_size", &bn));
        if (bm <= 0 || bn <= 0 || bm > 65536 || bn > 65536)
            return dsq_fail(c->d, DSQ_ERR_FORMAT, c->path, NULL, -1,
                            "weight_block_size [%lld, %lld] is not positive",
                            (long long)bm, (long long)bn);
        q->block_m = (int)bm;
        q->block_n = (int)bn;
    }
    return DSQ_OK;
}

static int parse_tokens(struct ctx *c, dsq_model_config *cfg)
{
    DSQ_TRY(get_int(c, "bos_token_id", 0, -1, &cfg->bos_token_id));
    json_object *v = get(c, "eos_token_id");
    cfg->n_eos = 0;
    if (!v) return DSQ_OK;
    if (json_object_is_type(v, json_type_array)) {
        size_t n = json_object_array_length(v);
        if (n > DSQ_CFG_MAX_EOS)
            return dsq_fail(c->d, DSQ_ERR_FORMAT, c->path, NULL, -1,
                            "'eos_token_id' lists %zu ids, at most %d supported", n, DSQ_CFG_MAX_EOS);
        for (size_t i = 0; i < n; i++)
            DSQ_TRY(as_int(c, json_object_array_get_idx(v, i), "eos_token_id",
                           &cfg->eos_token_ids[cfg->n_eos++]));
    } else {
        DSQ_TRY(as_int(c, v, "eos_token_id", &cfg->eos_token_ids[0]));
        cfg->n_eos = 1;
    }
    for (int i = 0; i < cfg->n_eos; i++)
        if (cfg->eos_token_ids[i] < 0)
            return dsq_fail(c->d, DSQ_ERR_FORMAT, c->path, NULL, -1, "'eos_token_id' is negative");
    return DSQ_OK;
}

static int parse_deepseek(struct ctx *c, dsq_model_config *cfg)
{
    int v3 = dsq_arch_get(cfg->arch)->v3_moe;
    DSQ_TRY(get_int(c, "q_lora_rank", 0, 0, &cfg->q_lora_rank));   /* null: no q LoRA */
    DSQ_TRY(get_int(c, "kv_lora_rank", 1, 0, &cfg->kv_lora_rank));
    DSQ_TRY(get_int(c, "qk_nope_head_dim", 1, 0, &cfg->qk_nope_head_dim));
    DSQ_TRY(get_int(c, "qk_rope_head_dim", 1, 0, &cfg->qk_rope_head_dim));
    DSQ_TRY(get_int(c, "v_head_dim", 1, 0, &cfg->v_head_dim));
    cfg->qk_head_dim = cfg->qk_nope_head_dim + cfg->qk_rope_head_dim;
    cfg->head_dim = cfg->qk_head_dim;

    DSQ_TRY(get_int(c, "n_routed_experts", 0, 0, &cfg->n_routed_experts));
    int moe = cfg->n_routed_experts > 0;
    DSQ_TRY(get_int(c, "moe_intermediate_size", moe, 0, &cfg->moe_intermediate_size));
    DSQ_TRY(get_int(c, "n_shared_experts", 0, 0, &cfg->n_shared_experts));
    DSQ_TRY(get_int(c, "num_experts_per_tok", moe, 0, &cfg->num_experts_per_tok));
    DSQ_TRY(get_int(c, "n_group", 0, 1, &cfg->n_group));
    DSQ_TRY(get_int(c, "topk_group", 0, 1, &cfg->topk_group));
    DSQ_TRY(get_double(c, "routed_scaling_factor", 1.0, &cfg->routed_scaling_factor));
    DSQ_TRY(get_bool(c, "norm_topk_prob", v3, &cfg->norm_topk_prob));
    DSQ_TRY(get_int(c, "first_k_dense_replace", 0, 0, &cfg->first_k_dense_replace));
    DSQ_TRY(get_int(c, "moe_layer_freq", 0, 1, &cfg->moe_layer_freq));
    DSQ_TRY(get_int(c, "num_nextn_predict_layers", 0, 0, &cfg->num_nextn_predict_layers));

    if (dsq_arch_get(cfg->arch)->dsa) {
        DSQ_TRY(get_int(c, "index_n_heads", 1, 0, &cfg->index_n_heads));
        DSQ_TRY(get_int(c, "index_head_dim", 1, 0, &cfg->index_head_dim));
        DSQ_TRY(get_int(c, "index_topk", 1, 0, &cfg->index_topk));
    }

    char s[DSQ_CFG_STR];
    DSQ_TRY(get_str(c, "topk_method", v3 ? "noaux_tc" : "greedy", s, sizeof s));
    /* "gready" is the default spelled in DeepSeek-V2's configuration_deepseek.py */
    if (strcmp(s, "greedy") == 0 || strcmp(s, "gready") == 0) cfg->topk_method = DSQ_TOPK_GREEDY;
    else if (strcmp(s, "group_limited_greedy") == 0) cfg->topk_method = DSQ_TOPK_GROUP_LIMITED_GREEDY;
    else if (strcmp(s, "noaux_tc") == 0) cfg->topk_method = DSQ_TOPK_NOAUX_TC;
    else return dsq_fail(c->d, DSQ_ERR_UNSUPPORTED, c->path, NULL, -1,
                         "unsupported topk_method '%s'", s);
    DSQ_TRY(get_str(c, "scoring_func", v3 ? "sigmoid" : "softmax", s, sizeof s));
    if (strcmp(s, "sigmoid") == 0) cfg->scoring_func = DSQ_SCORING_SIGMOID;
    else if (strcmp(s, "softmax") == 0) cfg->scoring_func = DSQ_SCORING_SOFTMAX;
    else return dsq_fail(c->d, DSQ_ERR_UNSUPPORTED, c->path, NULL, -1,
                         "unsupported scoring_func '%s'", s);
    return DSQ_OK;
}

/* ===== consistency ===== */

#define BAD(...) dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, -1, __VA_ARGS__)

static int validate(const dsq_model_config *cfg, const char *path, dsq_diag *d)
{
    const struct { const char *key; int64_t v; } pos[] = {
        { "vocab_size", cfg->vocab_size }, { "hidden_size", cfg->hidden_size },
        { "intermediate_size", cfg->intermediate_size },
        { "num_hidden_layers", cfg->num_hidden_layers },
        { "num_attention_heads", cfg->num_attention_heads },
        { "num_key_value_heads", cfg->num_key_value_heads }, { "head_dim", cfg->head_dim },
        { "max_position_embeddings", cfg->max_position_embeddings },
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0) return BAD("'%s' is %lld, must be positive", pos[i].key, (long long)pos[i].v);
    /* generous caps keep later products (vocab * hidden, heads * dim) far
     * from overflow on hostile configs */
    if (cfg->vocab_size > (1 << 24) || cfg->hidden_size > (1 << 20) ||
        cfg->intermediate_size > (1 << 22) || cfg->num_hidden_layers > 4096 ||
        cfg->num_attention_heads > 4096 || cfg->head_dim > 4096)
        return BAD("model dimensions are implausibly large");
    if (cfg->num_key_value_heads > cfg->num_attention_heads ||
        cfg->num_attention_heads % cfg->num_key_value_heads)
        return BAD("num_attention_heads %lld is not a multiple of num_key_value_heads %lld",
                   (long long)cfg->num_attention_heads, (long long)cfg->num_key_value_heads);
    if (!(cfg->rms_norm_eps > 0) || !(cfg->rope_theta > 0))
        return BAD("rms_norm_eps and rope_theta must be positive");

    if (!dsq_arch_is_deepseek(cfg->arch)) return DSQ_OK;

    if (cfg->q_lora_rank < 0 || cfg->q_lora_rank > (1 << 20))
        return BAD("'q_lora_rank' is %lld", (long long)cfg->q_lora_rank);
    const struct { const char *key; int64_t v; } mla[] = {
        { "kv_lora_rank", cfg->kv_lora_rank }, { "qk_nope_head_dim", cfg->qk_nope_head_dim },
        { "qk_rope_head_dim", cfg->qk_rope_head_dim }, { "v_head_dim", cfg->v_head_dim },
    };
    for (size_t i = 0; i < sizeof mla / sizeof mla[0]; i++)
        if (mla[i].v <= 0 || mla[i].v > (1 << 16))
            return BAD("'%s' is %lld, must be positive", mla[i].key, (long long)mla[i].v);
    if (cfg->qk_rope_head_dim % 2)
        return BAD("'qk_rope_head_dim' %lld is odd (rope rotates pairs)", (long long)cfg->qk_rope_head_dim);
    if (dsq_arch_get(cfg->arch)->dsa) {
        const int64_t hd = cfg->index_head_dim;
        if (cfg->index_n_heads <= 0 || cfg->index_n_heads > 4096)
            return BAD("'index_n_heads' is %lld, must be in [1, 4096]", (long long)cfg->index_n_heads);
        if (hd < cfg->qk_rope_head_dim || hd > 4096 || (hd & (hd - 1)))
            return BAD("'index_head_dim' %lld is not a power of two >= qk_rope_head_dim %lld",
                       (long long)hd, (long long)cfg->qk_rope_head_dim);
        if (cfg->index_topk <= 0 || cfg->index_topk > (1 << 24))
            return BAD("'index_topk' is %lld, must be positive", (long long)cfg->index_topk);
        if (cfg->q_lora_rank <= 0)
            return BAD("the DSA indexer reads the q-LoRA latent: 'q_lora_rank' must be positive");
    }
    if (cfg->num_nextn_predict_layers < 0 || cfg->num_nextn_predict_layers > 64)
        return BAD("'num_nextn_predict_layers' is %lld", (long long)cfg->num_nextn_predict_layers);
    if (cfg->n_routed_experts < 0 || cfg->n_routed_experts > (1 << 16))
        return BAD("'n_routed_experts' is %lld", (long long)cfg->n_routed_experts);
    if (cfg->n_routed_experts == 0) return DSQ_OK;

    if (cfg->moe_intermediate_size <= 0 || cfg->moe_intermediate_size > (1 << 22))
        return BAD("'moe_intermediate_size' is %lld, must be positive",
                   (long long)cfg->moe_intermediate_size);
    if (cfg->n_shared_experts < 0 || cfg->n_shared_experts > 1024)
        return BAD("'n_shared_experts' is %lld", (long long)cfg->n_shared_experts);
    if (cfg->num_experts_per_tok <= 0 || cfg->num_experts_per_tok > cfg->n_routed_experts)
        return BAD("'num_experts_per_tok' %lld is not in [1, n_routed_experts %lld]",
                   (long long)cfg->num_experts_per_tok, (long long)cfg->n_routed_experts);
    if (cfg->n_group <= 0 || cfg->n_routed_experts % cfg->n_group)
        return BAD("'n_group' %lld does not divide n_routed_experts %lld",
                   (long long)cfg->n_group, (long long)cfg->n_routed_experts);
    if (cfg->topk_group <= 0 || cfg->topk_group > cfg->n_group)
        return BAD("'topk_group' %lld is not in [1, n_group %lld]",
                   (long long)cfg->topk_group, (long long)cfg->n_group);
    if (cfg->num_experts_per_tok > cfg->topk_group * (cfg->n_routed_experts / cfg->n_group))
        return BAD("num_experts_per_tok %lld exceeds the %lld experts of topk_group groups",
                   (long long)cfg->num_experts_per_tok,
                   (long long)(cfg->topk_group * (cfg->n_routed_experts / cfg->n_group)));
    if (cfg->first_k_dense_replace < 0 || cfg->first_k_dense_replace > cfg->num_hidden_layers)
        return BAD("'first_k_dense_replace' %lld is not in [0, num_hidden_layers]",
                   (long long)cfg->first_k_dense_replace);
    if (cfg->moe_layer_freq < 1)
        return BAD("'moe_layer_freq' %lld must be at least 1", (long long)cfg->moe_layer_freq);
    if (!(cfg->routed_scaling_factor > 0))
        return BAD("'routed_scaling_factor' %g must be positive", cfg->routed_scaling_factor);
    return DSQ_OK;
}

/* ===== entry points ===== */

static int parse(struct ctx *c, dsq_model_config *cfg)
{
    DSQ_TRY(parse_arch(c, cfg));
    int ds = dsq_arch_is_deepseek(cfg->arch);
    DSQ_TRY(get_int(c, "vocab_size", 1, 0, &cfg->vocab_size));
    DSQ_TRY(get_int(c, "hidden_size", 1, 0, &cfg->hidden_size));
    DSQ_TRY(get_int(c, "intermediate_size", 1, 0, &cfg->intermediate_size));
    DSQ_TRY(get_int(c, "num_hidden_layers", 1, 0, &cfg->num_hidden_layers));
    DSQ_TRY(get_int(c, "num_attention_heads", 1, 0, &cfg->num_attention_heads));
    DSQ_TRY(get_int(c, "num_key_value_heads", 0, cfg->num_attention_heads,
                    &cfg->num_key_value_heads));
    DSQ_TRY(get_int(c, "max_position_embeddings", 0, ds ? 4096 : 2048,
                    &cfg->max_position_embeddings));
    DSQ_TRY(get_double(c, "rms_norm_eps", 1e-6, &cfg->rms_norm_eps));
    DSQ_TRY(get_double(c, "rope_theta", 10000.0, &cfg->rope_theta));
    DSQ_TRY(get_bool(c, "tie_word_embeddings", 0, &cfg->tie_word_embeddings));
    DSQ_TRY(get_bool(c, "attention_bias", 0, &cfg->attention_bias));
    DSQ_TRY(get_bool(c, "mlp_bias", 0, &cfg->mlp_bias));
    if (cfg->arch == DSQ_ARCH_QWEN2) {
        cfg->attention_bias = 1;          /* Qwen2 q/k/v projections have bias */
        int sw = 0;
        DSQ_TRY(get_bool(c, "use_sliding_window", 0, &sw));
        if (sw)
            return dsq_fail(c->d, DSQ_ERR_UNSUPPORTED, c->path, NULL, -1,
                            "sliding window attention (use_sliding_window) is not supported");
    }

    DSQ_TRY(get_str(c, "hidden_act", "silu", cfg->hidden_act_name, sizeof cfg->hidden_act_name));
    if (!strcmp(cfg->hidden_act_name, "silu") || !strcmp(cfg->hidden_act_name, "swish"))
        cfg->hidden_act = DSQ_ACT_SILU;
    else if (!strncmp(cfg->hidden_act_name, "gelu", 4))
        cfg->hidden_act = DSQ_ACT_GELU;
    else
        return dsq_fail(c->d, DSQ_ERR_UNSUPPORTED, c->path, NULL, -1,
                        "unsupported hidden_act '%s'", cfg->hidden_act_name);

    DSQ_TRY(get_str(c, "torch_dtype", "", cfg->torch_dtype, sizeof cfg->torch_dtype));
    if (!cfg->torch_dtype[0]) {            /* newer transformers write "dtype" */
        json_object *dt = get(c, "dtype");
        if (dt && json_object_is_type(dt, json_type_string))
            DSQ_TRY(str_of(c, dt, "dtype", cfg->torch_dtype, sizeof cfg->torch_dtype));
    }
    DSQ_TRY(parse_rope(c, cfg));
    DSQ_TRY(parse_quant(c, cfg));
    DSQ_TRY(parse_tokens(c, cfg));

    if (ds) {
        DSQ_TRY(parse_deepseek(c, cfg));
        cfg->num_key_value_heads = cfg->num_attention_heads;  /* MLA: one latent, per-head k/v */
    } else {
        int64_t hd = 0;
        DSQ_TRY(get_int(c, "head_dim", 0, 0, &hd));
        if (hd == 0) {
            if (cfg->num_attention_heads <= 0 || cfg->hidden_size % cfg->num_attention_heads)
                return dsq_fail(c->d, DSQ_ERR_FORMAT, c->path, NULL, -1,
                                "hidden_size %lld is not a multiple of num_attention_heads %lld",
                                (long long)cfg->hidden_size, (long long)cfg->num_attention_heads);
            hd = cfg->hidden_size / cfg->num_attention_heads;
        }
        cfg->head_dim = hd;
        cfg->qk_head_dim = hd;
        cfg->v_head_dim = hd;
        cfg->n_group = 1;
        cfg->topk_group = 1;
        cfg->moe_layer_freq = 1;
        cfg->routed_scaling_factor = 1.0;
    }
    return validate(cfg, c->path, c->d);
}

int dsq_model_config_from_json_string(dsq_model_config *cfg, const char *json, size_t len,
                                      const char *name, dsq_diag *d)
{
    if (!cfg) return dsq_fail(d, DSQ_ERR_INVALID_ARG, name, NULL, -1, "no config");
    memset(cfg, 0, sizeof *cfg);
    if (!json) return dsq_fail(d, DSQ_ERR_INVALID_ARG, name, NULL, -1, "no json text");
    if (!name) name = "config.json";
    json_object *root = NULL;
    int rc = st_json_parse(json, len, name, 0, &root, d);
    if (rc < 0) return rc;
    if (!json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        return dsq_fail(d, DSQ_ERR_JSON, name, NULL, 0, "config is not a json object");
    }
    struct ctx c = { root, name, d };
    rc = parse(&c, cfg);
    json_object_put(root);
    if (rc == DSQ_OK) {
        cfg->raw_json = malloc(len + 1);
        if (!cfg->raw_json) rc = dsq_fail(d, DSQ_ERR_NOMEM, name, NULL, -1, "out of memory");
        else {
            memcpy(cfg->raw_json, json, len);
            cfg->raw_json[len] = 0;
            cfg->raw_len = len;
        }
    }
    if (rc < 0) dsq_model_config_release(cfg);
    return rc;
}

int dsq_model_config_load(dsq_model_config *cfg, const char *path, dsq_diag *d)
{
    if (!cfg || !path) return dsq_fail(d, DSQ_ERR_INVALID_ARG, path, NULL, -1, "no path");
    memset(cfg, 0, sizeof *cfg);
    char *file = dsq_path_is_dir(path) ? dsq_path_join(path, "config.json") : strdup(path);
    if (!file) return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
    if (!dsq_path_exists(file)) {
        int rc = dsq_fail(d, DSQ_ERR_NOT_FOUND, file, NULL, -1, "no such file");
        free(file);
        return rc;
    }
    char *text = NULL;
    size_t len = 0;
    int rc = dsq_read_file(file, CONFIG_MAX_BYTES, &text, &len, d);
    if (rc == DSQ_OK) rc = dsq_model_config_from_json_string(cfg, text, len, file, d);
    free(text);
    free(file);
    return rc;
}
