/* test_model_config.c - config.json parsing: the real DeepSeek-V3 671B
 * config (docs/checkpoints.md, "config.json"), DeepSeek-V3.2's (its indexer keys),
 * DeepSeek-V2-Lite, Llama 3, Qwen2, and the
 * errors: unknown architecture, inconsistent MoE / head settings, wrong
 * types, invalid JSON. */
#include "dsq_test.h"
#include "dsq_file.h"
#include "model_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *ds_v3 =
    "{\n"
    "  \"architectures\": [\"DeepseekV3ForCausalLM\"],\n"
    "  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n"
    "  \"auto_map\": {\n"
    "    \"AutoConfig\": \"configuration_deepseek.DeepseekV3Config\",\n"
    "    \"AutoModel\": \"modeling_deepseek.DeepseekV3Model\",\n"
    "    \"AutoModelForCausalLM\": \"modeling_deepseek.DeepseekV3ForCausalLM\"\n"
    "  },\n"
    "  \"aux_loss_alpha\": 0.001,\n"
    "  \"bos_token_id\": 0,\n"
    "  \"eos_token_id\": 1,\n"
    "  \"ep_size\": 1,\n"
    "  \"first_k_dense_replace\": 3,\n"
    "  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 7168,\n"
    "  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 18432,\n"
    "  \"kv_lora_rank\": 512,\n"
    "  \"max_position_embeddings\": 163840,\n"
    "  \"model_type\": \"deepseek_v3\",\n"
    "  \"moe_intermediate_size\": 2048,\n"
    "  \"moe_layer_freq\": 1,\n"
    "  \"n_group\": 8,\n"
    "  \"n_routed_experts\": 256,\n"
    "  \"n_shared_experts\": 1,\n"
    "  \"norm_topk_prob\": true,\n"
    "  \"num_attention_heads\": 128,\n"
    "  \"num_experts_per_tok\": 8,\n"
    "  \"num_hidden_layers\": 61,\n"
    "  \"num_key_value_heads\": 128,\n"
    "  \"num_nextn_predict_layers\": 1,\n"
    "  \"q_lora_rank\": 1536,\n"
    "  \"qk_nope_head_dim\": 128,\n"
    "  \"qk_rope_head_dim\": 64,\n"
    "  \"quantization_config\": {\n"
    "    \"activation_scheme\": \"dynamic\",\n"
    "    \"fmt\": \"e4m3\",\n"
    "    \"quant_method\": \"fp8\",\n"
    "    \"weight_block_size\": [128, 128]\n"
    "  },\n"
    "  \"rms_norm_eps\": 1e-06,\n"
    "  \"rope_scaling\": {\n"
    "    \"beta_fast\": 32,\n"
    "    \"beta_slow\": 1,\n"
    "    \"factor\": 40,\n"
    "    \"mscale\": 1.0,\n"
    "    \"mscale_all_dim\": 1.0,\n"
    "    \"original_max_position_embeddings\": 4096,\n"
    "    \"type\": \"yarn\"\n"
    "  },\n"
    "  \"rope_theta\": 10000,\n"
    "  \"routed_scaling_factor\": 2.5,\n"
    "  \"scoring_func\": \"sigmoid\",\n"
    "  \"seq_aux\": true,\n"
    "  \"tie_word_embeddings\": false,\n"
    "  \"topk_group\": 4,\n"
    "  \"topk_method\": \"noaux_tc\",\n"
    "  \"torch_dtype\": \"bfloat16\",\n"
    "  \"transformers_version\": \"4.33.1\",\n"
    "  \"use_cache\": true,\n"
    "  \"v_head_dim\": 128,\n"
    "  \"vocab_size\": 129280\n"
    "}\n";

static int parse(const char *json, dsq_model_config *c, dsq_diag *d)
{
    dsq_diag_clear(d);
    return dsq_model_config_from_json_string(c, json, strlen(json), "config.json", d);
}

/* ds_v3 with one "key": value replaced (from must occur exactly once) */
static char *variant(const char *from, const char *to)
{
    const char *p = strstr(ds_v3, from);
    assert_non_null(p);
    size_t n = strlen(ds_v3) - strlen(from) + strlen(to);
    char *s = malloc(n + 1);
    size_t pre = (size_t)(p - ds_v3);
    memcpy(s, ds_v3, pre);
    strcpy(s + pre, to);
    strcat(s, p + strlen(from));
    return s;
}

static int parse_variant(const char *from, const char *to, dsq_diag *d)
{
    char *s = variant(from, to);
    dsq_model_config c;
    int rc = parse(s, &c, d);
    dsq_model_config_release(&c);
    free(s);
    return rc;
}

static void test_deepseek_v3(void **state)
{
    (void)state;
    dsq_model_config c;
    dsq_diag d;
    assert_int_equal(parse(ds_v3, &c, &d), DSQ_OK);
    assert_int_equal(c.arch, DSQ_ARCH_DEEPSEEK_V3);
    assert_string_equal(dsq_arch_name(c.arch), "deepseek_v3");
    assert_true(dsq_arch_is_deepseek(c.arch));
    assert_string_equal(c.architecture, "DeepseekV3ForCausalLM");
    assert_string_equal(c.model_type, "deepseek_v3");
    assert_int_equal(c.vocab_size, 129280);
    assert_int_equal(c.hidden_size, 7168);
    assert_int_equal(c.intermediate_size, 18432);
    assert_int_equal(c.moe_intermediate_size, 2048);
    assert_int_equal(c.num_hidden_layers, 61);
    assert_int_equal(c.num_attention_heads, 128);
    assert_int_equal(c.num_key_value_heads, 128);
    assert_int_equal(c.q_lora_rank, 1536);
    assert_int_equal(c.kv_lora_rank, 512);
    assert_int_equal(c.qk_nope_head_dim, 128);
    assert_int_equal(c.qk_rope_head_dim, 64);
    assert_int_equal(c.qk_head_dim, 192);
    assert_int_equal(c.head_dim, 192);
    assert_int_equal(c.v_head_dim, 128);
    assert_int_equal(c.n_routed_experts, 256);
    assert_int_equal(c.n_shared_experts, 1);
    assert_int_equal(c.num_experts_per_tok, 8);
    assert_int_equal(c.n_group, 8);
    assert_int_equal(c.topk_group, 4);
    assert_int_equal(c.topk_method, DSQ_TOPK_NOAUX_TC);
    assert_int_equal(c.scoring_func, DSQ_SCORING_SIGMOID);
    assert_true(c.routed_scaling_factor == 2.5);
    assert_true(c.norm_topk_prob);
    assert_int_equal(c.first_k_dense_replace, 3);
    assert_int_equal(c.moe_layer_freq, 1);
    assert_int_equal(c.num_nextn_predict_layers, 1);
    assert_int_equal(c.hidden_act, DSQ_ACT_SILU);
    assert_string_equal(c.hidden_act_name, "silu");
    assert_true(c.rms_norm_eps == 1e-6);
    assert_int_equal(c.max_position_embeddings, 163840);
    assert_true(c.rope_theta == 10000.0);
    assert_int_equal(c.rope_scaling.type, DSQ_ROPE_YARN);
    assert_true(c.rope_scaling.factor == 40.0);
    assert_true(c.rope_scaling.beta_fast == 32.0);
    assert_true(c.rope_scaling.beta_slow == 1.0);
    assert_true(c.rope_scaling.mscale == 1.0);
    assert_true(c.rope_scaling.mscale_all_dim == 1.0);
    assert_int_equal(c.rope_scaling.original_max_position_embeddings, 4096);
    assert_false(c.tie_word_embeddings);
    assert_false(c.attention_bias);
    assert_int_equal(c.bos_token_id, 0);
    assert_int_equal(c.n_eos, 1);
    assert_int_equal(c.eos_token_ids[0], 1);
    assert_string_equal(c.torch_dtype, "bfloat16");
    assert_true(c.quant.present);
    assert_string_equal(c.quant.quant_method, "fp8");
    assert_string_equal(c.quant.fmt, "e4m3");
    assert_string_equal(c.quant.activation_scheme, "dynamic");
    assert_string_equal(c.quant.scale_fmt, "");
    assert_int_equal(c.quant.block_m, 128);
    assert_int_equal(c.quant.block_n, 128);
    assert_int_equal(c.raw_len, strlen(ds_v3));
    assert_string_equal(c.raw_json, ds_v3);
    /* dense layers 0..2, MoE from 3, MTP layer 61 is MoE */
    assert_false(dsq_model_config_is_moe_layer(&c, 2));
    assert_true(dsq_model_config_is_moe_layer(&c, 3));
    assert_true(dsq_model_config_is_moe_layer(&c, 60));
    assert_true(dsq_model_config_is_moe_layer(&c, 61));
    assert_int_equal(dsq_model_config_ffn_dim(&c, 0), 18432);
    assert_int_equal(dsq_model_config_ffn_dim(&c, 10), 2048);
    dsq_model_config_release(&c);
    assert_null(c.raw_json);
    dsq_model_config_release(&c);            /* twice is safe */

    /* V3.1: scale_fmt ue8m0 */
    char *v31 = variant("\"fmt\": \"e4m3\",", "\"fmt\": \"e4m3\", \"scale_fmt\": \"ue8m0\",");
    assert_int_equal(parse(v31, &c, &d), DSQ_OK);
    assert_string_equal(c.quant.scale_fmt, "ue8m0");
    dsq_model_config_release(&c);
    free(v31);
}

static void test_deepseek_errors(void **state)
{
    (void)state;
    dsq_diag d;
    /* n_group must divide n_routed_experts */
    assert_int_equal(parse_variant("\"n_group\": 8", "\"n_group\": 7", &d), DSQ_ERR_FORMAT);
    assert_non_null(strstr(d.msg, "n_group"));
    assert_string_equal(d.path, "config.json");
    assert_int_equal(parse_variant("\"topk_group\": 4", "\"topk_group\": 9", &d), DSQ_ERR_FORMAT);
    assert_non_null(strstr(d.msg, "topk_group"));
    assert_int_equal(parse_variant("\"topk_group\": 4", "\"topk_group\": 0", &d), DSQ_ERR_FORMAT);
    assert_int_equal(parse_variant("\"num_experts_per_tok\": 8", "\"num_experts_per_tok\": 257", &d),
                     DSQ_ERR_FORMAT);
    /* 8 experts from 1 group of 32 is fine; 40 is not */
    assert_int_equal(parse_variant("\"topk_group\": 4", "\"topk_group\": 1", &d), DSQ_OK);
    assert_int_equal(parse_variant("\"num_experts_per_tok\": 8", "\"num_experts_per_tok\": 129", &d),
                     DSQ_ERR_FORMAT);
    assert_int_equal(parse_variant("\"first_k_dense_replace\": 3", "\"first_k_dense_replace\": 62", &d),
                     DSQ_ERR_FORMAT);
    assert_int_equal(parse_variant("\"moe_layer_freq\": 1", "\"moe_layer_freq\": 0", &d), DSQ_ERR_FORMAT);
    assert_int_equal(parse_variant("\"kv_lora_rank\": 512", "\"kv_lora_rank\": 0", &d), DSQ_ERR_FORMAT);
    assert_int_equal(parse_variant("\"qk_rope_head_dim\": 64", "\"qk_rope_head_dim\": 63", &d), DSQ_ERR_FORMAT);
    assert_int_equal(parse_variant("\"hidden_size\": 7168", "\"hidden_size\": -1", &d), DSQ_ERR_FORMAT);
    assert_int_equal(parse_variant("\"vocab_size\": 129280", "\"vocab_size\": 0", &d), DSQ_ERR_FORMAT);
    assert_int_equal(parse_variant("\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": 0", &d), DSQ_ERR_FORMAT);
    assert_int_equal(parse_variant("\"factor\": 40", "\"factor\": 0.5", &d), DSQ_ERR_FORMAT);
    assert_int_equal(parse_variant("\"original_max_position_embeddings\": 4096,", "", &d), DSQ_ERR_FORMAT);
    assert_int_equal(parse_variant("\"weight_block_size\": [128, 128]", "\"weight_block_size\": [128]", &d),
                     DSQ_ERR_JSON);
    assert_int_equal(parse_variant("\"weight_block_size\": [128, 128]", "\"weight_block_size\": [0, 128]", &d),
                     DSQ_ERR_FORMAT);
    assert_int_equal(parse_variant("\"num_attention_heads\": 128", "\"num_attention_heads\": 0", &d),
                     DSQ_ERR_FORMAT);
    /* missing required key */
    assert_int_equal(parse_variant("\"kv_lora_rank\": 512,", "", &d), DSQ_ERR_FORMAT);
    assert_non_null(strstr(d.msg, "kv_lora_rank"));
    assert_int_equal(parse_variant("\"vocab_size\": 129280", "\"x\": 1", &d), DSQ_ERR_FORMAT);
    /* wrong JSON types */
    assert_int_equal(parse_variant("\"hidden_size\": 7168", "\"hidden_size\": \"7168\"", &d), DSQ_ERR_JSON);
    assert_non_null(strstr(d.msg, "hidden_size"));
    assert_int_equal(parse_variant("\"norm_topk_prob\": true", "\"norm_topk_prob\": 1", &d), DSQ_ERR_JSON);
    assert_int_equal(parse_variant("\"n_group\": 8", "\"n_group\": 8.5", &d), DSQ_ERR_JSON);
    assert_int_equal(parse_variant("\"rope_scaling\": {", "\"rope_scaling\": 1, \"x\": {", &d), DSQ_ERR_JSON);
    /* integral doubles are accepted */
    assert_int_equal(parse_variant("\"n_group\": 8", "\"n_group\": 8.0", &d), DSQ_OK);
    /* unknown values */
    assert_int_equal(parse_variant("\"scoring_func\": \"sigmoid\"", "\"scoring_func\": \"relu\"", &d),
                     DSQ_ERR_UNSUPPORTED);
    assert_int_equal(parse_variant("\"topk_method\": \"noaux_tc\"", "\"topk_method\": \"x\"", &d),
                     DSQ_ERR_UNSUPPORTED);
    assert_int_equal(parse_variant("\"hidden_act\": \"silu\"", "\"hidden_act\": \"relu2\"", &d),
                     DSQ_ERR_UNSUPPORTED);
    assert_int_equal(parse_variant("\"type\": \"yarn\"", "\"type\": \"dynamic\"", &d), DSQ_ERR_UNSUPPORTED);
    /* null q_lora_rank means no q LoRA (V2-Lite style) */
    dsq_model_config c;
    char *s = variant("\"q_lora_rank\": 1536", "\"q_lora_rank\": null");
    assert_int_equal(parse(s, &c, &d), DSQ_OK);
    assert_int_equal(c.q_lora_rank, 0);
    dsq_model_config_release(&c);
    free(s);
}

/* ds_v3 turned into DeepSeek-V3.2's config.json (docs/deepseek-v32.md):
 * the architecture, model_type, the indexer keys and scale_fmt ue8m0;
 * extra (a "key": value pair) replaces index_topk when not NULL */
static char *v32_json(const char *topk)
{
    char *a = variant("\"DeepseekV3ForCausalLM\"", "\"DeepseekV32ForCausalLM\"");
    const char *from = "\"model_type\": \"deepseek_v3\",";
    char to[256];
    snprintf(to, sizeof to, "\"model_type\": \"deepseek_v32\", \"index_n_heads\": 64, \"index_head_dim\": 128, %s,",
             topk ? topk : "\"index_topk\": 2048");
    char *p = strstr(a, from);
    assert_non_null(p);
    char *s = malloc(strlen(a) + strlen(to) + 64);
    memcpy(s, a, (size_t)(p - a));
    strcpy(s + (p - a), to);
    strcat(s, p + strlen(from));
    free(a);
    char *q = strstr(s, "\"fmt\": \"e4m3\",");
    assert_non_null(q);
    char *t = malloc(strlen(s) + 64);
    memcpy(t, s, (size_t)(q - s));
    strcpy(t + (q - s), "\"fmt\": \"e4m3\", \"scale_fmt\": \"ue8m0\",");
    strcat(t, q + strlen("\"fmt\": \"e4m3\","));
    free(s);
    return t;
}

static void test_deepseek_v32(void **state)
{
    (void)state;
    dsq_model_config c;
    dsq_diag d;
    char *s = v32_json(NULL);
    assert_int_equal(parse(s, &c, &d), DSQ_OK);
    assert_int_equal(c.arch, DSQ_ARCH_DEEPSEEK_V32);
    assert_string_equal(dsq_arch_name(c.arch), "deepseek_v32");
    assert_true(dsq_arch_is_deepseek(c.arch));
    assert_true(dsq_arch_get(c.arch)->dsa);
    assert_true(dsq_arch_get(c.arch)->v3_moe);
    assert_false(dsq_arch_get(DSQ_ARCH_DEEPSEEK_V3)->dsa);
    assert_int_equal(c.index_n_heads, 64);
    assert_int_equal(c.index_head_dim, 128);
    assert_int_equal(c.index_topk, 2048);
    assert_string_equal(c.quant.scale_fmt, "ue8m0");
    /* V3 router defaults */
    assert_int_equal(c.topk_method, DSQ_TOPK_NOAUX_TC);
    assert_int_equal(c.scoring_func, DSQ_SCORING_SIGMOID);
    assert_int_equal(c.num_nextn_predict_layers, 1);
    assert_true(dsq_model_config_is_moe_layer(&c, 61));
    char sum[400];
    dsq_model_config_summary(&c, sum, sizeof sum);
    assert_string_equal(sum, "deepseek_v32: 61 layers, hidden 7168, 128 heads, vocab 129280, MLA, DSA (indexer 64 "
                             "heads x 128, index_topk 2048), MoE 256 experts (top 8), 1 MTP layer, scale_fmt ue8m0");
    dsq_model_config_release(&c);
    free(s);
    /* the indexer keys are required and checked */
    const char *bad[] = { "\"index_topk\": 0", "\"index_topk\": -5", "\"x_index_topk\": 1",
                          "\"index_topk\": \"2048\"" };
    const int want[] = { DSQ_ERR_FORMAT, DSQ_ERR_FORMAT, DSQ_ERR_FORMAT, DSQ_ERR_JSON };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s = v32_json(bad[i]);
        assert_int_equal(parse(s, &c, &d), want[i]);
        assert_non_null(strstr(d.msg, "index_topk"));
        dsq_model_config_release(&c);
        free(s);
    }
    /* index_head_dim: a power of two no smaller than qk_rope_head_dim */
    s = v32_json(NULL);
    char *h = strstr(s, "\"index_head_dim\": 128");
    memcpy(h, "\"index_head_dim\": 96 ", 21);
    assert_int_equal(parse(s, &c, &d), DSQ_ERR_FORMAT);
    assert_non_null(strstr(d.msg, "index_head_dim"));
    memcpy(h, "\"index_head_dim\": 32 ", 21);
    assert_int_equal(parse(s, &c, &d), DSQ_ERR_FORMAT);
    free(s);
    /* the indexer reads the q-LoRA latent */
    s = v32_json(NULL);
    char *ql = strstr(s, "\"q_lora_rank\": 1536");
    memcpy(ql, "\"q_lora_rank\": null", 19);
    assert_int_equal(parse(s, &c, &d), DSQ_ERR_FORMAT);
    assert_non_null(strstr(d.msg, "q_lora_rank"));
    free(s);
}

static void test_deepseek_v2_lite(void **state)
{
    (void)state;
    const char *js =
        "{\"architectures\": [\"DeepseekV2ForCausalLM\"], \"model_type\": \"deepseek_v2\","
        " \"vocab_size\": 102400, \"hidden_size\": 2048, \"intermediate_size\": 10944,"
        " \"moe_intermediate_size\": 1408, \"num_hidden_layers\": 27, \"num_attention_heads\": 16,"
        " \"num_key_value_heads\": 16, \"n_shared_experts\": 2, \"n_routed_experts\": 64,"
        " \"routed_scaling_factor\": 1.0, \"kv_lora_rank\": 512, \"q_lora_rank\": null,"
        " \"qk_rope_head_dim\": 64, \"v_head_dim\": 128, \"qk_nope_head_dim\": 128,"
        " \"topk_method\": \"greedy\", \"n_group\": 1, \"topk_group\": 1, \"num_experts_per_tok\": 6,"
        " \"moe_layer_freq\": 1, \"first_k_dense_replace\": 1, \"norm_topk_prob\": false,"
        " \"scoring_func\": \"softmax\", \"aux_loss_alpha\": 0.001, \"seq_aux\": true,"
        " \"hidden_act\": \"silu\", \"max_position_embeddings\": 163840, \"rms_norm_eps\": 1e-06,"
        " \"rope_theta\": 10000, \"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1,"
        " \"factor\": 40, \"mscale\": 0.707, \"mscale_all_dim\": 0.707,"
        " \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"},"
        " \"bos_token_id\": 100000, \"eos_token_id\": 100001, \"tie_word_embeddings\": false,"
        " \"torch_dtype\": \"bfloat16\"}";
    dsq_model_config c;
    dsq_diag d;
    assert_int_equal(parse(js, &c, &d), DSQ_OK);
    assert_int_equal(c.arch, DSQ_ARCH_DEEPSEEK_V2);
    assert_int_equal(c.q_lora_rank, 0);
    assert_int_equal(c.topk_method, DSQ_TOPK_GREEDY);
    assert_int_equal(c.scoring_func, DSQ_SCORING_SOFTMAX);
    assert_false(c.norm_topk_prob);
    assert_int_equal(c.num_experts_per_tok, 6);
    assert_true(fabs(c.rope_scaling.mscale - 0.707) < 1e-12);
    assert_false(c.quant.present);
    assert_false(dsq_model_config_is_moe_layer(&c, 0));
    assert_true(dsq_model_config_is_moe_layer(&c, 1));
    dsq_model_config_release(&c);
}

static void test_llama_qwen2(void **state)
{
    (void)state;
    /* Llama-3.1-8B-Instruct */
    const char *llama =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false,"
        " \"attention_dropout\": 0.0, \"bos_token_id\": 128000,"
        " \"eos_token_id\": [128001, 128008, 128009], \"hidden_act\": \"silu\","
        " \"hidden_size\": 4096, \"initializer_range\": 0.02, \"intermediate_size\": 14336,"
        " \"max_position_embeddings\": 131072, \"mlp_bias\": false, \"model_type\": \"llama\","
        " \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8,"
        " \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 8.0,"
        " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
        " \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"},"
        " \"rope_theta\": 500000.0, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\","
        " \"transformers_version\": \"4.42.3\", \"use_cache\": true, \"vocab_size\": 128256}";
    dsq_model_config c;
    dsq_diag d;
    assert_int_equal(parse(llama, &c, &d), DSQ_OK);
    assert_int_equal(c.arch, DSQ_ARCH_LLAMA);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.num_key_value_heads, 8);
    assert_int_equal(c.n_eos, 3);
    assert_int_equal(c.eos_token_ids[2], 128009);
    assert_int_equal(c.bos_token_id, 128000);
    assert_int_equal(c.rope_scaling.type, DSQ_ROPE_LLAMA3);
    assert_true(c.rope_scaling.factor == 8.0);
    assert_int_equal(c.rope_scaling.original_max_position_embeddings, 8192);
    assert_true(c.rope_theta == 500000.0);
    assert_int_equal(c.n_routed_experts, 0);
    assert_false(c.attention_bias);
    assert_false(dsq_model_config_is_moe_layer(&c, 5));
    assert_int_equal(dsq_model_config_ffn_dim(&c, 5), 14336);
    dsq_model_config_release(&c);

    /* TinyLlama-style: no rope_scaling, explicit head_dim, heads not dividing hidden */
    const char *tiny =
        "{\"model_type\": \"llama\", \"vocab_size\": 32000, \"hidden_size\": 96,"
        " \"intermediate_size\": 256, \"num_hidden_layers\": 2, \"num_attention_heads\": 5,"
        " \"num_key_value_heads\": 1, \"head_dim\": 16, \"rope_scaling\": null, \"eos_token_id\": 2}";
    assert_int_equal(parse(tiny, &c, &d), DSQ_OK);
    assert_int_equal(c.arch, DSQ_ARCH_LLAMA);
    assert_int_equal(c.head_dim, 16);
    assert_int_equal(c.rope_scaling.type, DSQ_ROPE_NONE);
    assert_int_equal(c.bos_token_id, -1);
    assert_true(c.rms_norm_eps == 1e-6);
    dsq_model_config_release(&c);
    /* without head_dim, 5 heads cannot split 96 */
    const char *bad =
        "{\"model_type\": \"llama\", \"vocab_size\": 32000, \"hidden_size\": 96,"
        " \"intermediate_size\": 256, \"num_hidden_layers\": 2, \"num_attention_heads\": 5}";
    assert_int_equal(parse(bad, &c, &d), DSQ_ERR_FORMAT);
    assert_non_null(strstr(d.msg, "num_attention_heads"));
    const char *badkv =
        "{\"model_type\": \"llama\", \"vocab_size\": 32000, \"hidden_size\": 96,"
        " \"intermediate_size\": 256, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
        " \"num_key_value_heads\": 3}";
    assert_int_equal(parse(badkv, &c, &d), DSQ_ERR_FORMAT);

    /* Qwen2-0.5B-Instruct */
    const char *qwen =
        "{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0,"
        " \"bos_token_id\": 151643, \"eos_token_id\": 151645, \"hidden_act\": \"silu\","
        " \"hidden_size\": 896, \"initializer_range\": 0.02, \"intermediate_size\": 4864,"
        " \"max_position_embeddings\": 32768, \"max_window_layers\": 21, \"model_type\": \"qwen2\","
        " \"num_attention_heads\": 14, \"num_hidden_layers\": 24, \"num_key_value_heads\": 2,"
        " \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"sliding_window\": 32768,"
        " \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\","
        " \"transformers_version\": \"4.40.1\", \"use_cache\": true,"
        " \"use_sliding_window\": false, \"vocab_size\": 151936}";
    assert_int_equal(parse(qwen, &c, &d), DSQ_OK);
    assert_int_equal(c.arch, DSQ_ARCH_QWEN2);
    assert_string_equal(dsq_arch_name(c.arch), "qwen2");
    assert_true(c.attention_bias);            /* qkv bias */
    assert_true(c.tie_word_embeddings);
    assert_int_equal(c.head_dim, 64);
    assert_int_equal(c.num_key_value_heads, 2);
    assert_true(c.rope_theta == 1000000.0);
    assert_int_equal(c.max_position_embeddings, 32768);
    dsq_model_config_release(&c);
}

static void test_unknown_and_invalid(void **state)
{
    (void)state;
    dsq_model_config c;
    dsq_diag d;
    const char *mix = "{\"architectures\": [\"MixtralForCausalLM\"], \"model_type\": \"mixtral\","
                      " \"vocab_size\": 32000}";
    assert_int_equal(parse(mix, &c, &d), DSQ_ERR_UNSUPPORTED);
    assert_non_null(strstr(d.msg, "MixtralForCausalLM"));
    assert_null(c.raw_json);
    assert_int_equal(parse("{\"model_type\": \"gpt2\"}", &c, &d), DSQ_ERR_UNSUPPORTED);
    assert_non_null(strstr(d.msg, "gpt2"));
    assert_int_equal(parse("{\"vocab_size\": 5}", &c, &d), DSQ_ERR_FORMAT);
    assert_int_equal(parse("{\"architectures\": \"LlamaForCausalLM\"}", &c, &d), DSQ_ERR_JSON);
    assert_int_equal(parse("{\"architectures\": []}", &c, &d), DSQ_ERR_JSON);
    assert_int_equal(parse("{\"model_type\": ", &c, &d), DSQ_ERR_JSON);
    assert_int_equal(parse("[1, 2]", &c, &d), DSQ_ERR_JSON);
    assert_int_equal(parse("", &c, &d), DSQ_ERR_JSON);
    assert_int_equal(parse("{\"model_type\": \"llama\"} trailing", &c, &d), DSQ_ERR_JSON);
    assert_int_equal(parse("{\"model_type\": \"qwen2\", \"use_sliding_window\": true, \"vocab_size\": 8,"
                           " \"hidden_size\": 8, \"intermediate_size\": 8, \"num_hidden_layers\": 1,"
                           " \"num_attention_heads\": 2}", &c, &d), DSQ_ERR_UNSUPPORTED);
    /* not NUL-terminated input: only len bytes are read */
    char buf[64];
    memset(buf, 'x', sizeof buf);
    memcpy(buf, "{\"model_type\": \"gpt2\"}", 22);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_model_config_from_json_string(&c, buf, 22, NULL, &d), DSQ_ERR_UNSUPPORTED);
}

static void test_load_from_dir(void **state)
{
    (void)state;
    char *dir = dsq_test_tmpdir();
    char *p = dsq_path_join(dir, "config.json");
    dsq_model_config c;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_model_config_load(&c, dir, &d), DSQ_ERR_NOT_FOUND);
    dsq_test_write(p, ds_v3, strlen(ds_v3));
    dsq_diag_clear(&d);
    assert_int_equal(dsq_model_config_load(&c, dir, &d), DSQ_OK);
    assert_int_equal(c.arch, DSQ_ARCH_DEEPSEEK_V3);
    assert_string_equal(c.raw_json, ds_v3);
    dsq_model_config_release(&c);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_model_config_load(&c, p, &d), DSQ_OK);
    dsq_model_config_release(&c);
    dsq_test_write(p, "{\"n_group\": 8", 13);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_model_config_load(&c, p, &d), DSQ_ERR_JSON);
    assert_string_equal(d.path, p);
    free(p);
    dsq_test_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deepseek_v3),
        cmocka_unit_test(test_deepseek_errors),
        cmocka_unit_test(test_deepseek_v32),
        cmocka_unit_test(test_deepseek_v2_lite),
        cmocka_unit_test(test_llama_qwen2),
        cmocka_unit_test(test_unknown_and_invalid),
        cmocka_unit_test(test_load_from_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
