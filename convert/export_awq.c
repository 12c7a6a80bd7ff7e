/* export_awq.c - AutoAWQ "GEMM" W4A16 for vLLM (formats.md 3.1-3.6):
 * qweight int32 [K, N/8] / qzeros int32 [K/G, N/8] in AWQ_ORDER, scales
 * float16 [K/G, N]; every float tensor float16 (the model loads as float16);
 * config.json quantization_config {"quant_method": "awq", ...}.
 *
 * Only awq-w4a16 linears map (RTN or calibrated); other int schemes are
 * refused. Quantized tensors outside the decoder linears (embeddings,
 * lm_head, router) are dequantized to float16. The MTP layer is dropped, as
 * AutoAWQ does (the HF model has layers 0..n-1 only). Linears kept float
 * go into modules_to_not_convert; AutoAWQ and vLLM skip a linear when an
 * entry is a SUBSTRING of its name, so entries are checked not to match any
 * quantized linear. */
#include "export_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int plan(dsq_export *ex, size_t i, dsq_diag *d)
{
    const dsq_export_src *s = &ex->src[i];
    if (s->role.mtp) {
        ex->xs[i].drop = 1;
        return DSQ_OK;
    }
    int quant = s->scheme->weight_bits <= 8;
    if (!quant || !dsq_x_is_linear(s)) return dsq_x_add_float(ex, i, DSQ_DTYPE_F16, d);
    if (s->scheme->id != DSQ_SCHEME_AWQ_W4A16)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                        "AutoAWQ GEMM holds W4A16 weights only; this linear is %s: convert with "
                        "--scheme awq-w4a16 (or --format ascend / compressed-tensors)", s->scheme->name);
    /* group_size -1 (per channel) is legal AutoAWQ (formats.md 3.1), but
     * vLLM's AWQ loaders size their scales as in_features // group_size
     * without mapping -1 (awq.py, awq_marlin.py AWQMoEMethod at
     * vllm-project/vllm@0322f292): such an export would not load there. */
    if (!s->qshape.group_size)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                        "per-channel AWQ (group_size -1) does not load in vLLM, whose AWQ loaders divide by "
                        "the group size: convert with --group-size 64 or 128 (keep float, with --keep, a "
                        "linear whose in_features it does not divide)");
    int64_t N = s->qshape.rows, K = s->qshape.cols, G = s->qshape.group_size;
    if (K % G || N % 8)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                        "AutoAWQ GEMM needs in_features %% group_size == 0 and out_features %% 8 == 0 "
                        "(gemm.py:132-133); [%lld, %lld] with group size %lld does not fit: convert with a "
                        "--group-size that divides %lld, or keep this linear float (--keep)", (long long)N, (long long)K, (long long)G, (long long)K);
    int32_t cfg_g = s->qshape.group_size ? s->qshape.group_size : -1;
    if (ex->awq_group != -2 && ex->awq_group != cfg_g)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                        "AutoAWQ has one group_size per model: this linear has %d, an earlier one %d",
                        (int)cfg_g, (int)ex->awq_group);
    ex->awq_group = cfg_g;
    char *mod = dsq_x_module(s->name);
    if (!mod) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, s->name, -1, "out of memory");
    int64_t qw[2] = { K, N / 8 }, qz[2] = { K / G, N / 8 }, sc[2] = { K / G, N };
    ex->xs[i].quantized = 1;
    ex->xs[i].type = "awq";
    int rc = dsq_x_add(ex, i, mod, ".qweight", DSQ_DTYPE_I32, 2, qw, XK_AWQ_QWEIGHT, NULL, d);
    if (rc == DSQ_OK) rc = dsq_x_add(ex, i, mod, ".qzeros", DSQ_DTYPE_I32, 2, qz, XK_AWQ_QZEROS, NULL, d);
    if (rc == DSQ_OK) rc = dsq_x_add(ex, i, mod, ".scales", DSQ_DTYPE_F16, 2, sc, XK_AWQ_SCALES, NULL, d);
    free(mod);
    return rc;
}

/* Float linears of the decoder layers; "FLOAT" pairs also by fused name. */
static int check(dsq_export *ex, dsq_diag *d)
{
    for (size_t i = 0; i < ex->nsrc; i++) {
        long j = dsq_x_partner(ex, i);
        if (j > (long)i && !ex->xs[i].drop && ex->xs[i].quantized != ex->xs[j].quantized)
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, ex->src[i].name, -1,
                            "fused pair differs: %s is %s but %s is %s; vLLM fuses them and wants both "
                            "quantized or both float", ex->src[i].name,
                            ex->xs[i].quantized ? "quantized" : "float", ex->src[j].name,
                            ex->xs[j].quantized ? "quantized" : "float");
    }
    return dsq_x_check_experts(ex, "vLLM", d);
}

static int quantized_contains(const dsq_export *ex, const char *entry)
{
    for (size_t i = 0; i < ex->nsrc; i++)
        if (ex->xs[i].quantized && strstr(ex->src[i].name, entry)) return 1;
    return 0;
}

static int in_list(json_object *a, const char *s)
{
    for (size_t k = 0; k < json_object_array_length(a); k++)
        if (!strcmp(json_object_get_string(json_object_array_get_idx(a, k)), s)) return 1;
    return 0;
}

static int add_entry(dsq_export *ex, json_object *a, const char *e, dsq_diag *d)
{
    if (quantized_contains(ex, e))
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, e, -1,
                        "modules_to_not_convert entry '%s' would also match a quantized linear "
                        "(AutoAWQ / vLLM match by substring)", e);
    if (!in_list(a, e)) json_object_array_add(a, json_object_new_string(e));
    return DSQ_OK;
}

/* The leaf ("kv_b_proj") when every linear with that leaf is float and it
 * matches no quantized name, else the full module name. */
static int not_convert_list(dsq_export *ex, json_object *a, dsq_diag *d)
{
    for (size_t i = 0; i < ex->nsrc; i++) {
        const dsq_export_src *s = &ex->src[i];
        if (ex->xs[i].drop || ex->xs[i].quantized || !dsq_x_is_linear(s)) continue;
        char *mod = dsq_x_module(s->name);
        if (!mod) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        const char *dot = strrchr(mod, '.');
        const char *leaf = dot ? dot + 1 : mod;
        char pat[256];
        snprintf(pat, sizeof pat, ".%s", leaf);
        int rc = quantized_contains(ex, pat) ? add_entry(ex, a, mod, d) : add_entry(ex, a, leaf, d);
        /* vLLM builds a layer's routed experts into one FusedMoE and skips
         * it only when an entry is a substring of "model.layers.L.mlp.experts"
         * (awq_marlin.py get_quant_method); dsq_x_check_experts makes the
         * layer's experts all float here. */
        const char *ex_at = strstr(mod, ".mlp.experts.");
        if (rc == DSQ_OK && s->role.role == DSQ_ROLE_EXPERT_LINEAR && ex_at) {
            char moe[1200];
            snprintf(moe, sizeof moe, "%.*s", (int)(ex_at - mod) + (int)strlen(".mlp.experts"), mod);
            if (!quantized_contains(ex, moe)) rc = add_entry(ex, a, moe, d);
        }
        /* vLLM checks a fused layer by its fused name. */
        long j = dsq_x_partner(ex, i);
        if (rc == DSQ_OK && j >= 0 && dot) {
            const char *fused = !strcmp(leaf, "gate_proj") || !strcmp(leaf, "up_proj") ? "gate_up_proj"
                                                                                      : "fused_qkv_a_proj";
            char full[1200];
            snprintf(full, sizeof full, "%.*s.%s", (int)(dot - mod), mod, fused);
            rc = add_entry(ex, a, full, d);
        }
        free(mod);
        DSQ_TRY(rc);
    }
    return DSQ_OK;
}

static int config(dsq_export *ex, json_object *cfg, dsq_diag *d)
{
    json_object *q = json_object_new_object(), *nc = json_object_new_array();
    if (!q || !nc) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    int rc = not_convert_list(ex, nc, d);
    if (rc < 0) {
        json_object_put(q);
        json_object_put(nc);
        return rc;
    }
    /* AwqConfig.to_transformers_dict (_config.py:84-92), key order kept. */
    json_object_object_add(q, "quant_method", json_object_new_string("awq"));
    json_object_object_add(q, "zero_point", json_object_new_boolean(1));
    json_object_object_add(q, "group_size", json_object_new_int(ex->awq_group == -2 ? 128 : ex->awq_group));
    json_object_object_add(q, "bits", json_object_new_int(4));
    json_object_object_add(q, "version", json_object_new_string("gemm"));
    if (json_object_array_length(nc)) {
        json_object_object_add(q, "modules_to_not_convert", nc);
    } else {
        json_object_put(nc);
        json_object_object_add(q, "modules_to_not_convert", NULL);
    }
    json_object_object_del(cfg, "quantization_config");
    json_object_object_add(cfg, "quantization_config", q);
    /* Every float tensor is float16 (base.py:326-331). */
    json_object_object_add(cfg, "torch_dtype", json_object_new_string("float16"));
    return DSQ_OK;
}

const dsq_export_format dsq_xfmt_awq = {
    .name = "awq",
    .weights_base = "model",
    .default_shard = 5000000000ull,   /* huggingface_hub MAX_SHARD_SIZE */
    .plan = plan,
    .check = check,
    .config = config,
    .extra = NULL,
};
