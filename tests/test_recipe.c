/* test_recipe.c - tensor roles from real DeepSeek-V3 / Llama / Qwen2 names,
 * scheme decisions, rule precedence, presets, the plan. */
#include "dsq_test.h"
#include "recipe.h"
#include "synth_ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct role_case {
    const char *name;
    uint32_t role;
    int64_t layer, expert;
    int mtp;
} role_case;

static void check_roles(const role_case *v, size_t n, int64_t nhl)
{
    for (size_t i = 0; i < n; i++) {
        dsq_role_info ri;
        dsq_role_classify(v[i].name, nhl, &ri);
        if (ri.role != v[i].role || ri.layer != v[i].layer || ri.expert != v[i].expert ||
            ri.mtp != v[i].mtp)
            fail_msg("%s: role %s layer %lld expert %lld mtp %d, want %s %lld %lld %d", v[i].name,
                     dsq_role_name(ri.role), (long long)ri.layer, (long long)ri.expert, ri.mtp,
                     dsq_role_name(v[i].role), (long long)v[i].layer, (long long)v[i].expert, v[i].mtp);
    }
}

/* Every HF leaf name of DeepSeek-V3 (inference/convert.py mapping; docs/checkpoints.md,
 * "Tensor names and shapes" and "MTP layer"). */
static void test_roles_deepseek_v3(void **state)
{
    (void)state;
    static const role_case v[] = {
        { "model.embed_tokens.weight", DSQ_ROLE_EMBED, -1, -1, 0 },
        { "model.norm.weight", DSQ_ROLE_NORM, -1, -1, 0 },
        { "lm_head.weight", DSQ_ROLE_LM_HEAD, -1, -1, 0 },
        { "model.layers.0.input_layernorm.weight", DSQ_ROLE_NORM, 0, -1, 0 },
        { "model.layers.0.post_attention_layernorm.weight", DSQ_ROLE_NORM, 0, -1, 0 },
        { "model.layers.0.self_attn.q_a_proj.weight", DSQ_ROLE_ATTN_LINEAR, 0, -1, 0 },
        { "model.layers.0.self_attn.q_a_layernorm.weight", DSQ_ROLE_NORM, 0, -1, 0 },
        { "model.layers.0.self_attn.q_b_proj.weight", DSQ_ROLE_ATTN_LINEAR, 0, -1, 0 },
        { "model.layers.0.self_attn.kv_a_proj_with_mqa.weight", DSQ_ROLE_ATTN_LINEAR, 0, -1, 0 },
        { "model.layers.0.self_attn.kv_a_layernorm.weight", DSQ_ROLE_NORM, 0, -1, 0 },
        { "model.layers.0.self_attn.kv_b_proj.weight", DSQ_ROLE_ATTN_LINEAR, 0, -1, 0 },
        { "model.layers.0.self_attn.o_proj.weight", DSQ_ROLE_ATTN_LINEAR, 0, -1, 0 },
        { "model.layers.0.mlp.gate_proj.weight", DSQ_ROLE_MLP_LINEAR, 0, -1, 0 },
        { "model.layers.2.mlp.up_proj.weight", DSQ_ROLE_MLP_LINEAR, 2, -1, 0 },
        { "model.layers.2.mlp.down_proj.weight", DSQ_ROLE_MLP_LINEAR, 2, -1, 0 },
        { "model.layers.3.mlp.gate.weight", DSQ_ROLE_ROUTER, 3, -1, 0 },
        { "model.layers.3.mlp.gate.e_score_correction_bias", DSQ_ROLE_ROUTER_BIAS, 3, -1, 0 },
        { "model.layers.3.mlp.experts.0.gate_proj.weight", DSQ_ROLE_EXPERT_LINEAR, 3, 0, 0 },
        { "model.layers.60.mlp.experts.255.down_proj.weight", DSQ_ROLE_EXPERT_LINEAR, 60, 255, 0 },
        { "model.layers.3.mlp.experts.17.up_proj.weight", DSQ_ROLE_EXPERT_LINEAR, 3, 17, 0 },
        { "model.layers.3.mlp.shared_experts.gate_proj.weight", DSQ_ROLE_SHARED_EXPERT_LINEAR, 3, -1, 0 },
        { "model.layers.3.mlp.shared_experts.down_proj.weight", DSQ_ROLE_SHARED_EXPERT_LINEAR, 3, -1, 0 },
        { "model.layers.3.mlp.experts.0.down_proj.weight_scale_inv", DSQ_ROLE_QUANT_AUX, 3, -1, 0 },
        { "model.layers.0.self_attn.kv_b_proj.weight_scale_inv", DSQ_ROLE_QUANT_AUX, 0, -1, 0 },
        /* V3.2's lightning indexer: its linears are a role of their own,
         * its LayerNorm (weight and bias) a norm */
        { "model.layers.0.self_attn.indexer.wq_b.weight", DSQ_ROLE_INDEXER_LINEAR, 0, -1, 0 },
        { "model.layers.0.self_attn.indexer.wk.weight", DSQ_ROLE_INDEXER_LINEAR, 0, -1, 0 },
        { "model.layers.5.self_attn.indexer.weights_proj.weight", DSQ_ROLE_INDEXER_LINEAR, 5, -1, 0 },
        { "model.layers.0.self_attn.indexer.k_norm.weight", DSQ_ROLE_NORM, 0, -1, 0 },
        { "model.layers.0.self_attn.indexer.k_norm.bias", DSQ_ROLE_NORM, 0, -1, 0 },
        { "model.layers.0.self_attn.indexer.wq_b.weight_scale_inv", DSQ_ROLE_QUANT_AUX, 0, -1, 0 },
        { "model.layers.61.self_attn.indexer.wk.weight", DSQ_ROLE_INDEXER_LINEAR, 61, -1, 1 },
        /* MTP layer 61 */
        { "model.layers.61.embed_tokens.weight", DSQ_ROLE_EMBED, 61, -1, 1 },
        { "model.layers.61.enorm.weight", DSQ_ROLE_NORM, 61, -1, 1 },
        { "model.layers.61.hnorm.weight", DSQ_ROLE_NORM, 61, -1, 1 },
        { "model.layers.61.eh_proj.weight", DSQ_ROLE_MTP, 61, -1, 1 },
        { "model.layers.61.shared_head.norm.weight", DSQ_ROLE_NORM, 61, -1, 1 },
        { "model.layers.61.shared_head.head.weight", DSQ_ROLE_LM_HEAD, 61, -1, 1 },
        { "model.layers.61.input_layernorm.weight", DSQ_ROLE_NORM, 61, -1, 1 },
        { "model.layers.61.self_attn.kv_b_proj.weight", DSQ_ROLE_ATTN_LINEAR, 61, -1, 1 },
        { "model.layers.61.mlp.gate.weight", DSQ_ROLE_ROUTER, 61, -1, 1 },
        { "model.layers.61.mlp.gate.e_score_correction_bias", DSQ_ROLE_ROUTER_BIAS, 61, -1, 1 },
        { "model.layers.61.mlp.experts.200.down_proj.weight", DSQ_ROLE_EXPERT_LINEAR, 61, 200, 1 },
        { "model.layers.61.mlp.shared_experts.up_proj.weight", DSQ_ROLE_SHARED_EXPERT_LINEAR, 61, -1, 1 },
    };
    check_roles(v, sizeof v / sizeof v[0], 61);

    /* Without a config only MTP-only names reveal the MTP layer. */
    dsq_role_info ri;
    dsq_role_classify("model.layers.61.mlp.experts.3.up_proj.weight", 0, &ri);
    assert_int_equal(ri.mtp, 0);
    dsq_role_classify("model.layers.61.eh_proj.weight", 0, &ri);
    assert_int_equal(ri.mtp, 1);
    dsq_role_classify("model.layers.0.self_attn.kv_b_proj.weight_scale_inv", 61, &ri);
    assert_int_equal(ri.fp8_scale, 1);
}

static void test_roles_llama_qwen2(void **state)
{
    (void)state;
    static const role_case v[] = {
        { "model.embed_tokens.weight", DSQ_ROLE_EMBED, -1, -1, 0 },
        { "model.layers.0.self_attn.q_proj.weight", DSQ_ROLE_ATTN_LINEAR, 0, -1, 0 },
        { "model.layers.0.self_attn.k_proj.weight", DSQ_ROLE_ATTN_LINEAR, 0, -1, 0 },
        { "model.layers.0.self_attn.v_proj.weight", DSQ_ROLE_ATTN_LINEAR, 0, -1, 0 },
        { "model.layers.31.self_attn.o_proj.weight", DSQ_ROLE_ATTN_LINEAR, 31, -1, 0 },
        { "model.layers.0.mlp.gate_proj.weight", DSQ_ROLE_MLP_LINEAR, 0, -1, 0 },
        { "model.layers.0.mlp.up_proj.weight", DSQ_ROLE_MLP_LINEAR, 0, -1, 0 },
        { "model.layers.0.mlp.down_proj.weight", DSQ_ROLE_MLP_LINEAR, 0, -1, 0 },
        { "model.layers.0.input_layernorm.weight", DSQ_ROLE_NORM, 0, -1, 0 },
        { "model.layers.0.post_attention_layernorm.weight", DSQ_ROLE_NORM, 0, -1, 0 },
        { "model.layers.0.self_attn.rotary_emb.inv_freq", DSQ_ROLE_OTHER, 0, -1, 0 },
        { "model.norm.weight", DSQ_ROLE_NORM, -1, -1, 0 },
        { "lm_head.weight", DSQ_ROLE_LM_HEAD, -1, -1, 0 },
        /* Qwen2: q/k/v biases */
        { "model.layers.5.self_attn.q_proj.bias", DSQ_ROLE_LINEAR_BIAS, 5, -1, 0 },
        { "model.layers.5.self_attn.k_proj.bias", DSQ_ROLE_LINEAR_BIAS, 5, -1, 0 },
        { "model.layers.5.self_attn.v_proj.bias", DSQ_ROLE_LINEAR_BIAS, 5, -1, 0 },
        /* Qwen2-MoE and Mixtral spellings */
        { "model.layers.1.mlp.shared_expert.gate_proj.weight", DSQ_ROLE_SHARED_EXPERT_LINEAR, 1, -1, 0 },
        { "model.layers.1.mlp.shared_expert_gate.weight", DSQ_ROLE_ROUTER, 1, -1, 0 },
        { "model.layers.1.mlp.experts.59.up_proj.weight", DSQ_ROLE_EXPERT_LINEAR, 1, 59, 0 },
        { "model.layers.1.block_sparse_moe.gate.weight", DSQ_ROLE_ROUTER, 1, -1, 0 },
        { "model.layers.1.block_sparse_moe.experts.7.w2.weight", DSQ_ROLE_EXPERT_LINEAR, 1, 7, 0 },
        { "something.else", DSQ_ROLE_OTHER, -1, -1, 0 },
        { "", DSQ_ROLE_OTHER, -1, -1, 0 },
    };
    check_roles(v, sizeof v / sizeof v[0], 32);
}

/* ---- decisions ---- */

static const int64_t SH_EXPERT[2] = { 2048, 7168 };
static const int64_t SH_VEC[1] = { 7168 };

static const char *decide(const dsq_recipe *r, const char *name, enum dsq_dtype dt, int ndim,
                          const int64_t *shape, dsq_plan_entry *e)
{
    dsq_diag d;
    dsq_diag_clear(&d);
    int rc = dsq_recipe_decide(r, name, dt, ndim, shape, 61, e, &d);
    if (rc < 0) fail_msg("%s: %s", name, d.msg);
    return e->scheme->name;
}

static void test_default_recipe(void **state)
{
    (void)state;
    dsq_recipe r;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_recipe_init(&r, "w4a8", &d), DSQ_OK);
    dsq_plan_entry e;
    const int64_t emb[2] = { 129280, 7168 }, router[2] = { 256, 7168 }, rb[1] = { 256 };
    assert_string_equal(decide(&r, "model.embed_tokens.weight", DSQ_DTYPE_BF16, 2, emb, &e), "bf16");
    assert_int_equal(e.kept, 1);
    assert_string_equal(decide(&r, "lm_head.weight", DSQ_DTYPE_BF16, 2, emb, &e), "bf16");
    assert_string_equal(decide(&r, "model.layers.3.mlp.gate.weight", DSQ_DTYPE_BF16, 2, router, &e), "bf16");
    assert_string_equal(decide(&r, "model.layers.3.mlp.gate.e_score_correction_bias", DSQ_DTYPE_F32, 1, rb, &e), "f32");
    assert_string_equal(decide(&r, "model.layers.3.input_layernorm.weight", DSQ_DTYPE_BF16, 1, SH_VEC, &e), "bf16");
    assert_string_equal(decide(&r, "model.layers.3.input_layernorm.weight", DSQ_DTYPE_F16, 1, SH_VEC, &e), "f32");
    assert_string_equal(decide(&r, "model.layers.3.mlp.experts.5.up_proj.weight", DSQ_DTYPE_BF16, 2, SH_EXPERT, &e), "w4a8");
    assert_int_equal(e.kept, 0);
    assert_int_equal(e.qshape.rows, 2048);
    assert_int_equal(e.qshape.cols, 7168);
    assert_int_equal(e.qshape.group_size, 0);          /* w4a8 default: per channel */
    assert_true(e.est_bytes >= 2048ull * 7168 / 2);
    assert_int_equal(e.src_bytes, 2048ull * 7168 * 2);
    assert_string_equal(decide(&r, "model.layers.3.mlp.experts.5.up_proj.weight", DSQ_DTYPE_F8_E4M3, 2, SH_EXPERT, &e), "w4a8");
    assert_string_equal(decide(&r, "model.layers.3.mlp.shared_experts.up_proj.weight", DSQ_DTYPE_BF16, 2, SH_EXPERT, &e), "w4a8");
    const int64_t kvb[2] = { 32768, 512 }, eh[2] = { 7168, 14336 };
    assert_string_equal(decide(&r, "model.layers.3.self_attn.kv_b_proj.weight", DSQ_DTYPE_BF16, 2, kvb, &e), "w4a8");
    assert_string_equal(decide(&r, "model.layers.61.eh_proj.weight", DSQ_DTYPE_BF16, 2, eh, &e), "bf16");
    assert_string_equal(decide(&r, "model.layers.61.mlp.experts.5.up_proj.weight", DSQ_DTYPE_BF16, 2, SH_EXPERT, &e), "w4a8");
    assert_int_equal(e.role.mtp, 1);
    /* Qwen2 bias stays float; FP8-kept tensors become bf16. */
    const int64_t qb[1] = { 3584 };
    assert_string_equal(decide(&r, "model.layers.0.self_attn.q_proj.bias", DSQ_DTYPE_BF16, 1, qb, &e), "bf16");
    /* V3.2's indexer linears stay float (FP8 -> bf16) unless a rule asks */
    const int64_t iwq[2] = { 8192, 1536 }, iwp[2] = { 64, 7168 };
    assert_string_equal(decide(&r, "model.layers.3.self_attn.indexer.wq_b.weight", DSQ_DTYPE_F8_E4M3, 2, iwq, &e),
                        "bf16");
    assert_int_equal(e.kept, 1);
    assert_string_equal(decide(&r, "model.layers.3.self_attn.indexer.weights_proj.weight", DSQ_DTYPE_BF16, 2, iwp,
                               &e), "bf16");
    assert_int_equal(dsq_recipe_add_rule(&r, "indexer\\.wq_b=w8a8-dynamic", &d), DSQ_OK);
    assert_string_equal(decide(&r, "model.layers.3.self_attn.indexer.wq_b.weight", DSQ_DTYPE_F8_E4M3, 2, iwq, &e),
                        "w8a8-dynamic");
    assert_string_equal(decide(&r, "model.layers.3.self_attn.indexer.wk.weight", DSQ_DTYPE_F8_E4M3, 2, SH_EXPERT,
                               &e), "bf16");
    dsq_recipe_release(&r);

    /* --group-size reaches int4 schemes only; awq defaults to 128. */
    assert_int_equal(dsq_recipe_init(&r, "w4a16", &d), DSQ_OK);
    assert_string_equal(decide(&r, "model.layers.3.mlp.experts.5.up_proj.weight", DSQ_DTYPE_BF16, 2, SH_EXPERT, &e), "awq-w4a16");
    assert_int_equal(e.qshape.group_size, 128);
    r.group_size = 64;
    decide(&r, "model.layers.3.mlp.experts.5.up_proj.weight", DSQ_DTYPE_BF16, 2, SH_EXPERT, &e);
    assert_int_equal(e.qshape.group_size, 64);
    dsq_recipe_release(&r);
    assert_int_equal(dsq_recipe_init(&r, "w8a8-dynamic", &d), DSQ_OK);
    r.group_size = 64;
    decide(&r, "model.layers.3.mlp.experts.5.up_proj.weight", DSQ_DTYPE_BF16, 2, SH_EXPERT, &e);
    assert_int_equal(e.qshape.group_size, 0);
    dsq_recipe_release(&r);

    /* "keep" everything. */
    assert_int_equal(dsq_recipe_init(&r, "keep", &d), DSQ_OK);
    assert_string_equal(decide(&r, "model.layers.3.mlp.experts.5.up_proj.weight", DSQ_DTYPE_F8_E4M3, 2, SH_EXPERT, &e), "bf16");
    assert_string_equal(decide(&r, "model.layers.3.mlp.experts.5.up_proj.weight", DSQ_DTYPE_F32, 2, SH_EXPERT, &e), "f32");
    dsq_recipe_release(&r);
}

static void test_rule_precedence(void **state)
{
    (void)state;
    dsq_recipe r;
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_plan_entry e;
    assert_int_equal(dsq_recipe_init(&r, "w4a8", &d), DSQ_OK);
    assert_int_equal(dsq_recipe_add_keep(&r, "experts\\.0\\.", &d), DSQ_OK);
    assert_int_equal(dsq_recipe_add_rule(&r, "mlp\\.experts\\.=w8a8-dynamic", &d), DSQ_OK);
    assert_int_equal(dsq_recipe_add_rule(&r, "norm=f32", &d), DSQ_OK);
    assert_int_equal(dsq_recipe_add_rule(&r, "layernorm=w8a8-dynamic", &d), DSQ_OK);
    assert_string_equal(decide(&r, "model.layers.3.mlp.experts.0.up_proj.weight", DSQ_DTYPE_BF16, 2, SH_EXPERT, &e), "bf16");
    assert_int_equal(e.rule, 0);
    assert_string_equal(decide(&r, "model.layers.3.mlp.experts.10.up_proj.weight", DSQ_DTYPE_BF16, 2, SH_EXPERT, &e), "w8a8-dynamic");
    assert_int_equal(e.rule, 1);
    assert_string_equal(decide(&r, "model.layers.3.self_attn.o_proj.weight", DSQ_DTYPE_BF16, 2, SH_EXPERT, &e), "w4a8");
    assert_int_equal(e.rule, DSQ_PLAN_BY_ROLE);
    /* a float scheme may go anywhere; the int rule after it is never reached */
    assert_string_equal(decide(&r, "model.layers.3.input_layernorm.weight", DSQ_DTYPE_BF16, 1, SH_VEC, &e), "f32");
    assert_int_equal(e.rule, 2);
    char buf[256];
    dsq_plan_reason(&r, &e, buf, sizeof buf);
    assert_string_equal(buf, "--scheme-for 'norm=f32'");
    dsq_recipe_release(&r);

    /* An int scheme rule on a 1-D tensor is skipped, never applied. */
    assert_int_equal(dsq_recipe_init(&r, "w4a8", &d), DSQ_OK);
    assert_int_equal(dsq_recipe_add_rule(&r, ".*=w8a8-dynamic", &d), DSQ_OK);
    assert_string_equal(decide(&r, "model.layers.3.input_layernorm.weight", DSQ_DTYPE_BF16, 1, SH_VEC, &e), "bf16");
    assert_string_equal(decide(&r, "model.layers.3.mlp.gate.e_score_correction_bias", DSQ_DTYPE_F32, 1, SH_VEC, &e), "f32");
    /* ... but a matrix role the user names explicitly does get it. */
    const int64_t emb[2] = { 1000, 7168 };
    assert_string_equal(decide(&r, "model.embed_tokens.weight", DSQ_DTYPE_BF16, 2, emb, &e), "w8a8-dynamic");
    dsq_recipe_release(&r);

    /* Reversed order: the first match wins. */
    assert_int_equal(dsq_recipe_init(&r, "w4a8", &d), DSQ_OK);
    assert_int_equal(dsq_recipe_add_rule(&r, "mlp\\.experts\\.=w8a8-dynamic", &d), DSQ_OK);
    assert_int_equal(dsq_recipe_add_keep(&r, "experts\\.0\\.", &d), DSQ_OK);
    assert_string_equal(decide(&r, "model.layers.3.mlp.experts.0.up_proj.weight", DSQ_DTYPE_BF16, 2, SH_EXPERT, &e), "w8a8-dynamic");
    /* keep_exact (--rollback) goes ahead of every rule and matches the whole
     * name only, its dots literal */
    assert_int_equal(dsq_recipe_keep_exact(&r, "model.layers.3.mlp.experts.0.up_proj.weight", &d), DSQ_OK);
    assert_string_equal(decide(&r, "model.layers.3.mlp.experts.0.up_proj.weight", DSQ_DTYPE_BF16, 2, SH_EXPERT, &e), "bf16");
    assert_int_equal(e.rule, 0);
    assert_string_equal(decide(&r, "model.layers.3.mlp.experts.0.up_proj.weight_x", DSQ_DTYPE_BF16, 2, SH_EXPERT, &e), "w8a8-dynamic");
    assert_string_equal(decide(&r, "xmodel.layers.3.mlp.experts.0.up_proj.weight", DSQ_DTYPE_BF16, 2, SH_EXPERT, &e), "w8a8-dynamic");
    assert_string_equal(decide(&r, "model.layers.3.mlp.experts.0.up_projXweight", DSQ_DTYPE_BF16, 2, SH_EXPERT, &e), "w8a8-dynamic");
    assert_int_equal(dsq_recipe_keep_exact(&r, "a\\Eb", &d), DSQ_ERR_INVALID_ARG);
    dsq_recipe_release(&r);
}

static void test_bad_recipes(void **state)
{
    (void)state;
    dsq_recipe r;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_recipe_init(&r, "int3", &d), DSQ_ERR_NOT_FOUND);
    assert_non_null(strstr(d.msg, "unknown scheme 'int3'"));
    dsq_diag_clear(&d);
    assert_int_equal(dsq_recipe_init(&r, "w8a8", &d), DSQ_ERR_UNSUPPORTED);
    assert_string_equal(d.msg, "w8a8 (static) needs calibration statistics (--calib); use w8a8-dynamic");
    dsq_diag_clear(&d);
    assert_int_equal(dsq_recipe_init(&r, "W8A8-DYNAMIC", &d), DSQ_OK);  /* names are case-insensitive */
    assert_int_equal(dsq_recipe_add_keep(&r, "experts\\.(", &d), DSQ_ERR_INVALID_ARG);
    assert_non_null(strstr(d.msg, "bad regex"));
    dsq_diag_clear(&d);
    assert_int_equal(dsq_recipe_add_rule(&r, "noequals", &d), DSQ_ERR_INVALID_ARG);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_recipe_add_rule(&r, "x=w8a8", &d), DSQ_ERR_UNSUPPORTED);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_recipe_add_rule(&r, "x=nope", &d), DSQ_ERR_NOT_FOUND);
    dsq_diag_clear(&d);
    /* a regex containing '=' splits at the last one */
    assert_int_equal(dsq_recipe_add_rule(&r, "a=b=keep", &d), DSQ_OK);
    assert_string_equal(r.rules[0].pattern, "a=b");

    dsq_plan_entry e;
    assert_int_equal(dsq_recipe_decide(&r, "model.layers.0.mlp.up_proj.qweight", DSQ_DTYPE_I32, 2, SH_EXPERT, 61, &e, &d),
                     DSQ_ERR_UNSUPPORTED);
    assert_string_equal(d.tensor, "model.layers.0.mlp.up_proj.qweight");
    dsq_diag_clear(&d);
    const int64_t empty[2] = { 0, 16 };
    assert_int_equal(dsq_recipe_decide(&r, "model.layers.0.mlp.up_proj.weight", DSQ_DTYPE_BF16, 2, empty, 61, &e, &d),
                     DSQ_ERR_UNSUPPORTED);
    dsq_diag_clear(&d);
    const int64_t wide[2] = { 8, 70000 };   /* int schemes: at most 65536 columns */
    assert_int_equal(dsq_recipe_decide(&r, "model.layers.0.mlp.down_proj.weight", DSQ_DTYPE_BF16, 2, wide, 61, &e, &d),
                     DSQ_ERR_UNSUPPORTED);
    assert_string_equal(d.tensor, "model.layers.0.mlp.down_proj.weight");
    dsq_recipe_release(&r);
    assert_int_equal(dsq_recipe_init_preset(&r, "nope", &d), DSQ_ERR_NOT_FOUND);
}

static void test_preset_deepseek(void **state)
{
    (void)state;
    dsq_recipe r;
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_plan_entry e;
    assert_int_equal(dsq_recipe_init_preset(&r, "deepseek-w4a8", &d), DSQ_OK);
    const int64_t kvb[2] = { 32768, 512 }, dense[2] = { 18432, 7168 };
    assert_string_equal(decide(&r, "model.layers.3.mlp.experts.5.up_proj.weight", DSQ_DTYPE_F8_E4M3, 2, SH_EXPERT, &e), "w4a8");
    assert_string_equal(decide(&r, "model.layers.61.mlp.experts.5.up_proj.weight", DSQ_DTYPE_F8_E4M3, 2, SH_EXPERT, &e), "w8a8-dynamic");
    assert_int_equal(e.rule, DSQ_PLAN_BY_PRESET);
    assert_string_equal(decide(&r, "model.layers.3.mlp.shared_experts.up_proj.weight", DSQ_DTYPE_F8_E4M3, 2, SH_EXPERT, &e), "w8a8-dynamic");
    assert_string_equal(decide(&r, "model.layers.0.mlp.gate_proj.weight", DSQ_DTYPE_F8_E4M3, 2, dense, &e), "w8a8-dynamic");
    assert_string_equal(decide(&r, "model.layers.3.self_attn.o_proj.weight", DSQ_DTYPE_F8_E4M3, 2, SH_EXPERT, &e), "w8a8-dynamic");
    assert_string_equal(decide(&r, "model.layers.3.self_attn.kv_b_proj.weight", DSQ_DTYPE_F8_E4M3, 2, kvb, &e), "bf16");
    char buf[256];
    dsq_plan_reason(&r, &e, buf, sizeof buf);
    assert_non_null(strstr(buf, "recipe deepseek-w4a8"));
    assert_string_equal(decide(&r, "model.layers.3.mlp.gate.weight", DSQ_DTYPE_BF16, 2, SH_EXPERT, &e), "bf16");
    /* msModelSlim's W4A8 recipe leaves the V3.2 indexer float */
    const int64_t iwq[2] = { 8192, 1536 };
    assert_string_equal(decide(&r, "model.layers.3.self_attn.indexer.wq_b.weight", DSQ_DTYPE_F8_E4M3, 2, iwq, &e),
                        "bf16");
    /* User rules come before the preset's rules. */
    assert_int_equal(dsq_recipe_add_rule(&r, "kv_b_proj=w8a8-dynamic", &d), DSQ_OK);
    assert_string_equal(decide(&r, "model.layers.3.self_attn.kv_b_proj.weight", DSQ_DTYPE_F8_E4M3, 2, kvb, &e), "w8a8-dynamic");
    assert_int_equal(e.rule, 0);
    dsq_recipe_release(&r);
    assert_string_equal(dsq_recipe_presets()[0], "deepseek-w4a8");
}

/* deepseek-w8a8: attention static W8A8 (calibrated) except kv_b_proj, every
 * MLP W8A8 dynamic, the router and the MTP layer's attention as msModelSlim
 * exports them; refused without calibration. */
static void test_preset_deepseek_w8a8(void **state)
{
    (void)state;
    dsq_recipe r;
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_plan_entry e;
    const int64_t kvb[2] = { 32768, 512 }, dense[2] = { 18432, 7168 }, qa[2] = { 1536, 7168 };
    assert_true(dsq_recipe_preset_needs_calibration("deepseek-w8a8"));
    assert_false(dsq_recipe_preset_needs_calibration("deepseek-w4a8"));
    assert_int_equal(dsq_recipe_init_preset(&r, "deepseek-w8a8", &d), DSQ_OK);
    /* uncalibrated: the static attention scheme is refused, naming the tensor */
    assert_int_equal(dsq_recipe_decide(&r, "model.layers.3.self_attn.q_a_proj.weight", DSQ_DTYPE_BF16, 2, qa, 61, &e, &d),
                     DSQ_ERR_UNSUPPORTED);
    assert_string_equal(d.tensor, "model.layers.3.self_attn.q_a_proj.weight");
    r.calibrated = 1;
    static const char *const attn[] = { "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "o_proj" };
    for (size_t i = 0; i < 4; i++) {
        char name[128];
        snprintf(name, sizeof name, "model.layers.3.self_attn.%s.weight", attn[i]);
        assert_string_equal(decide(&r, name, DSQ_DTYPE_F8_E4M3, 2, qa, &e), "w8a8");
    }
    assert_string_equal(decide(&r, "model.layers.3.self_attn.kv_b_proj.weight", DSQ_DTYPE_F8_E4M3, 2, kvb, &e), "bf16");
    assert_string_equal(decide(&r, "model.layers.0.mlp.gate_proj.weight", DSQ_DTYPE_F8_E4M3, 2, dense, &e), "w8a8-dynamic");
    assert_string_equal(decide(&r, "model.layers.3.mlp.experts.5.down_proj.weight", DSQ_DTYPE_F8_E4M3, 2, SH_EXPERT, &e),
                        "w8a8-dynamic");
    assert_string_equal(decide(&r, "model.layers.3.mlp.shared_experts.up_proj.weight", DSQ_DTYPE_F8_E4M3, 2, SH_EXPERT, &e),
                        "w8a8-dynamic");
    assert_string_equal(decide(&r, "model.layers.61.mlp.experts.5.up_proj.weight", DSQ_DTYPE_F8_E4M3, 2, SH_EXPERT, &e),
                        "w8a8-dynamic");
    assert_string_equal(decide(&r, "model.layers.61.self_attn.o_proj.weight", DSQ_DTYPE_F8_E4M3, 2, qa, &e), "w8a8-dynamic");
    assert_string_equal(decide(&r, "model.layers.3.mlp.gate.weight", DSQ_DTYPE_BF16, 2, SH_EXPERT, &e), "bf16");
    assert_string_equal(decide(&r, "lm_head.weight", DSQ_DTYPE_BF16, 2, dense, &e), "bf16");
    dsq_recipe_release(&r);
    assert_string_equal(dsq_recipe_presets()[1], "deepseek-w8a8");
}

/* The plan over a real (tiny) checkpoint: companions skipped, source order,
 * MTP layer inferred from names when no config is given. */
static void test_plan_build(void **state)
{
    (void)state;
    char *dir = dsq_test_tmpdir();
    dsq_synth_opts o;
    dsq_synth_defaults_tiny(&o);
    o.fp8 = 1;
    o.experts = 4;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_synth_write(&o, dir, 0, NULL, &d), DSQ_OK);
    dsq_st_model *m;
    assert_int_equal(dsq_st_open(&m, dir, &d), DSQ_OK);
    dsq_recipe r;
    assert_int_equal(dsq_recipe_init(&r, "w8a8-dynamic", &d), DSQ_OK);
    dsq_plan p;
    assert_int_equal(dsq_plan_build(&p, &r, m, 0, &d), DSQ_OK);
    assert_int_equal(p.num_hidden_layers, 2);   /* inferred from eh_proj in layer 2 */
    size_t companions = 0;
    for (size_t i = 0; i < dsq_st_count(m); i++) companions += dsq_st_is_companion(m, dsq_st_get(m, i));
    assert_true(companions > 0);
    assert_int_equal(p.n + companions, dsq_st_count(m));
    assert_int_equal(p.src_bytes, dsq_st_total_bytes(m));
    size_t mtp_experts = 0;
    for (size_t i = 0; i < p.n; i++) {
        const dsq_plan_entry *e = &p.v[i];
        assert_false(e->role.fp8_scale);
        if (i) {
            const dsq_st_tensor *a = p.v[i - 1].t, *b = e->t;
            assert_true(a->shard < b->shard || (a->shard == b->shard && a->file_offset <= b->file_offset));
        }
        if (e->role.mtp && e->role.role == DSQ_ROLE_EXPERT_LINEAR) mtp_experts++;
        if (e->src_dtype == DSQ_DTYPE_F8_E4M3) assert_int_equal(e->scheme->id, DSQ_SCHEME_W8A8_DYNAMIC);
    }
    assert_int_equal(mtp_experts, 3 * 4);
    size_t total = 0;
    for (int s = 0; s < DSQ_SCHEME_ID_COUNT; s++) total += p.count_by_scheme[s];
    assert_int_equal(total, p.n);
    dsq_plan_release(&p);
    dsq_recipe_release(&r);
    dsq_st_close(m);
    dsq_test_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roles_deepseek_v3),
        cmocka_unit_test(test_roles_llama_qwen2),
        cmocka_unit_test(test_default_recipe),
        cmocka_unit_test(test_rule_precedence),
        cmocka_unit_test(test_bad_recipes),
        cmocka_unit_test(test_preset_deepseek),
        cmocka_unit_test(test_preset_deepseek_w8a8),
        cmocka_unit_test(test_plan_build),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
