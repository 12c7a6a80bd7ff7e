/* export_ct.c - compressed-tensors for vLLM (formats.md 5.1-5.3):
 *   awq-w4a16    -> pack-quantized W4A16, asymmetric: weight_packed int32
 *                   [N, K/8] (q + 8, sequential nibbles), weight_scale
 *                   [N, K/G], weight_zero_point int32 [ceil(N/8), K/G]
 *                   (signed zp + 8, packed along dim 0), weight_shape [2]
 *   w8a8-dynamic -> int-quantized W8A8: weight int8 [N, K], weight_scale
 *                   [N, 1]; activations int8 per token, dynamic
 *   w4a8         -> int-quantized: one int4 value per int8 byte [N, K],
 *                   weight_scale [N, 1] or [N, K/G]; activations as W8A8
 * Scales are in the model dtype (config torch_dtype). scale_dtype /
 * zp_dtype are omitted (older compressed-tensors reject unknown args).
 * Float decoder linears, lm_head and the router go into "ignore"; the MTP
 * layer is dropped (the HF model has no layer n).
 * Checked in vllm-project/compressed-tensors @179cba9
 * compressors/quantized_compressors/pack_quantized.py: pack_to_int32 adds
 * 2^(b-1), pads with 0 AFTER the offset, packs element j of each run of 8 at
 * bits 4j; packed_dim=0 (zero points) transposes first, so word [r, g]
 * holds rows 8r..8r+7 of group g; weight_shape is torch.tensor(shape)
 * (int64); pack-quantized matches only schemes without input activations,
 * hence W4A8 is int-quantized. */
#include "export_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CT_VERSION "0.10.2"

static int plan(dsq_export *ex, size_t i, dsq_diag *d)
{
    const dsq_export_src *s = &ex->src[i];
    if (s->role.mtp) {
        ex->xs[i].drop = 1;
        return DSQ_OK;
    }
    int quant = s->scheme->weight_bits <= 8;
    if (!quant) return dsq_x_add_float(ex, i, dsq_x_keep_dtype(s), d);
    if (!dsq_x_is_linear(s)) return dsq_x_add_float(ex, i, ex->model_dtype, d);
    int64_t N = s->qshape.rows, K = s->qshape.cols, G = s->qshape.group_size;
    int64_t ng = G ? (K + G - 1) / G : 1;
    if (G && K % G)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                        "in_features %lld is not a multiple of the group size %lld: convert with a "
                        "--group-size that divides it, --group-size 0 (per channel), or keep this "
                        "linear float (--keep)", (long long)K, (long long)G);
    char *mod = dsq_x_module(s->name);
    if (!mod) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, s->name, -1, "out of memory");
    enum dsq_dtype sd = ex->model_dtype;
    int64_t w[2] = { N, K }, sc[2] = { N, ng }, two[1] = { 2 };
    int rc;
    ex->xs[i].quantized = 1;
    switch (s->scheme->id) {
    case DSQ_SCHEME_AWQ_W4A16: {
        if (K % 8) {
            rc = dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                          "pack-quantized needs in_features %% 8 == 0 (got %lld)", (long long)K);
            break;
        }
        int64_t wp[2] = { N, K / 8 }, zp[2] = { (N + 7) / 8, ng };
        ex->xs[i].type = "w4a16";
        rc = dsq_x_add(ex, i, mod, ".weight_packed", DSQ_DTYPE_I32, 2, wp, XK_CT_PACKED, NULL, d);
        if (rc == DSQ_OK) rc = dsq_x_add(ex, i, mod, ".weight_scale", sd, 2, sc, XK_SCALE, NULL, d);
        if (rc == DSQ_OK) rc = dsq_x_add(ex, i, mod, ".weight_zero_point", DSQ_DTYPE_I32, 2, zp, XK_CT_ZP, NULL, d);
        if (rc == DSQ_OK) rc = dsq_x_add(ex, i, mod, ".weight_shape", DSQ_DTYPE_I64, 1, two, XK_CT_SHAPE, NULL, d);
        break;
    }
    case DSQ_SCHEME_W8A8_DYNAMIC:
        ex->xs[i].type = "w8a8";
        rc = dsq_x_add(ex, i, mod, ".weight", DSQ_DTYPE_I8, 2, w, XK_I8, NULL, d);
        if (rc == DSQ_OK) rc = dsq_x_add(ex, i, mod, ".weight_scale", sd, 2, sc, XK_SCALE, NULL, d);
        break;
    case DSQ_SCHEME_W4A8:
        ex->xs[i].type = "w4a8";
        rc = dsq_x_add(ex, i, mod, ".weight", DSQ_DTYPE_I8, 2, w, XK_I8_FROM_I4, NULL, d);
        if (rc == DSQ_OK) rc = dsq_x_add(ex, i, mod, ".weight_scale", sd, 2, sc, XK_SCALE, NULL, d);
        break;
    default:
        rc = dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                      "compressed-tensors export maps awq-w4a16, w8a8-dynamic and w4a8; %s (static "
                      "activation scales) is not exported: convert with --scheme w8a8-dynamic",
                      s->scheme->name);
    }
    free(mod);
    return rc;
}

static int group_of(const dsq_export *ex, size_t i) { return ex->src[i].qshape.group_size; }

static int check(dsq_export *ex, dsq_diag *d)
{
    for (size_t i = 0; i < ex->nsrc; i++) {
        long j = dsq_x_partner(ex, i);
        if (j <= (long)i || ex->xs[i].drop) continue;
        const char *a = ex->xs[i].quantized ? ex->xs[i].type : "float";
        const char *b = ex->xs[j].quantized ? ex->xs[j].type : "float";
        if (strcmp(a, b) != 0 || (ex->xs[i].quantized && group_of(ex, i) != group_of(ex, (size_t)j)))
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, ex->src[i].name, -1,
                            "fused pair differs: %s is %s but %s is %s; vLLM fuses them and wants one "
                            "scheme", ex->src[i].name, a, ex->src[j].name, b);
    }
    return dsq_x_check_experts(ex, "vLLM", d);
}

static json_object *args(int bits, int sym, const char *strategy, int group, int dynamic, int act)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "num_bits", json_object_new_int(bits));
    json_object_object_add(o, "type", json_object_new_string("int"));
    json_object_object_add(o, "symmetric", json_object_new_boolean(sym));
    json_object_object_add(o, "group_size", group > 0 ? json_object_new_int(group) : NULL);
    json_object_object_add(o, "strategy", json_object_new_string(strategy));
    json_object_object_add(o, "block_structure", NULL);
    json_object_object_add(o, "dynamic", json_object_new_boolean(dynamic));
    json_object_object_add(o, "actorder", NULL);
    json_object_object_add(o, "observer", act ? NULL : json_object_new_string("minmax"));
    json_object_object_add(o, "observer_kwargs", json_object_new_object());
    return o;
}

/* One scheme entry for (label, group size). */
static json_object *scheme_obj(const char *label, int group)
{
    json_object *s = json_object_new_object();
    int w4 = !strcmp(label, "w4a16");
    const char *strat = group > 0 ? "group" : "channel";
    json_object_object_add(s, "targets", json_object_new_array());
    if (w4) {
        json_object_object_add(s, "weights", args(4, 0, strat, group, 0, 0));
        json_object_object_add(s, "input_activations", NULL);
    } else {
        json_object_object_add(s, "weights", args(!strcmp(label, "w8a8") ? 8 : 4, 1, strat, group, 0, 0));
        json_object_object_add(s, "input_activations", args(8, 1, "token", 0, 1, 1));
    }
    json_object_object_add(s, "output_activations", NULL);
    json_object_object_add(s, "format", json_object_new_string(w4 ? "pack-quantized" : "int-quantized"));
    return s;
}

static int config(dsq_export *ex, json_object *cfg, dsq_diag *d)
{
    /* Distinct (label, group) pairs in first-use order. */
    const char *lab[8];
    int grp[8];
    size_t nl = 0;
    for (size_t i = 0; i < ex->nsrc; i++) {
        if (!ex->xs[i].quantized) continue;
        size_t k = 0;
        while (k < nl && !(strcmp(lab[k], ex->xs[i].type) == 0 && grp[k] == group_of(ex, i))) k++;
        if (k == nl) {
            if (nl == 8) return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, ex->src[i].name, -1, "too many schemes");
            lab[nl] = ex->xs[i].type;
            grp[nl++] = group_of(ex, i);
        }
    }
    json_object *groups = json_object_new_object(), *ignore = json_object_new_array();
    const char *fmt = NULL;
    int mixed = 0;
    for (size_t k = 0; k < nl; k++) {
        json_object *s = scheme_obj(lab[k], grp[k]);
        json_object *t;
        json_object_object_get_ex(s, "targets", &t);
        if (nl == 1) {
            json_object_array_add(t, json_object_new_string("Linear"));
        } else {
            /* Several schemes: each group lists its layers by exact name. */
            for (size_t i = 0; i < ex->nsrc; i++) {
                if (!ex->xs[i].quantized || strcmp(ex->xs[i].type, lab[k]) || group_of(ex, i) != grp[k]) continue;
                char *mod = dsq_x_module(ex->src[i].name);
                if (mod) json_object_array_add(t, json_object_new_string(mod));
                free(mod);
            }
        }
        const char *f = !strcmp(lab[k], "w4a16") ? "pack-quantized" : "int-quantized";
        if (fmt && strcmp(fmt, f)) mixed = 1;
        fmt = f;
        char name[32];
        snprintf(name, sizeof name, "group_%zu", k);
        json_object_object_add(groups, name, s);
    }
    for (size_t i = 0; i < ex->nsrc; i++) {
        if (ex->xs[i].drop || ex->xs[i].quantized || !dsq_x_is_linear(&ex->src[i])) continue;
        char *mod = dsq_x_module(ex->src[i].name);
        if (mod) json_object_array_add(ignore, json_object_new_string(mod));
        free(mod);
    }
    json_object_array_add(ignore, json_object_new_string("lm_head"));
    json_object_array_add(ignore, json_object_new_string("re:.*mlp.gate$"));
    /* ModelCompressor writes the keys sorted (model_compressor.py:236-241). */
    json_object *q = json_object_new_object();
    json_object_object_add(q, "config_groups", groups);
    json_object_object_add(q, "format", json_object_new_string(mixed ? "mixed-precision" : fmt ? fmt : "dense"));
    json_object_object_add(q, "global_compression_ratio", NULL);
    json_object_object_add(q, "ignore", ignore);
    json_object_object_add(q, "kv_cache_scheme", NULL);
    json_object_object_add(q, "quant_method", json_object_new_string("compressed-tensors"));
    json_object_object_add(q, "quantization_status", json_object_new_string("compressed"));
    json_object_object_add(q, "sparsity_config", json_object_new_object());
    json_object_object_add(q, "transform_config", json_object_new_object());
    json_object_object_add(q, "version", json_object_new_string(CT_VERSION));
    json_object_object_del(cfg, "quantization_config");
    json_object_object_add(cfg, "quantization_config", q);
    return DSQ_OK;
}

const dsq_export_format dsq_xfmt_ct = {
    .name = "compressed-tensors",
    .weights_base = "model",
    .default_shard = 5000000000ull,
    .plan = plan,
    .check = check,
    .config = config,
    .extra = NULL,
};
