/* xfmt_ct.c - compressed-tensors for vLLM (docs/serving-exports.md
 * "## compressed-tensors"). Writing:
 *   awq-w4a16    -> pack-quantized W4A16, asymmetric: weight_packed int32
 *                   [N, K/8] (q + 8, sequential nibbles), weight_scale
 *                   [N, K/G], weight_zero_point int32 [ceil(N/8), K/G]
 *                   (signed zp + 8, packed along dim 0), weight_shape [2]
 *   w8a8-dynamic -> int-quantized W8A8: weight int8 [N, K], weight_scale
 *                   [N, 1]; activations int8 per token, dynamic
 *   w4a8         -> int-quantized: one int4 value per int8 byte [N, K],
 *                   weight_scale [N, 1] or [N, K/G]; activations as W8A8
 * Scales are in the model dtype (config torch_dtype); a conversion for
 * this target rounds the codes against them as stored (xs.scale_dtype,
 * dsq_qparams.scale_dtype), as llm-compressor does. scale_dtype /
 * zp_dtype are omitted (older compressed-tensors reject unknown args).
 * Float decoder linears, lm_head and the router go into "ignore"; the MTP
 * layer is dropped (the HF model has no layer n).
 * Checked in vllm-project/compressed-tensors @179cba9
 * compressors/quantized_compressors/pack_quantized.py: pack_to_int32 adds
 * 2^(b-1), pads with 0 AFTER the offset, packs element j of each run of 8 at
 * bits 4j; packed_dim=0 (zero points) transposes first, so word [r, g]
 * holds rows 8r..8r+7 of group g; weight_shape is torch.tensor(shape)
 * (int64); pack-quantized matches only schemes without input activations,
 * hence W4A8 is int-quantized.
 * Reading: pack-quantized -> awq-w4a16 (code u = q + 8; zero = zp + 8, or 8
 * when symmetric); int-quantized -> w8a8-dynamic (int8) / w4a8 (int4 in
 * int8, with int8 activations) / awq-w4a16 with zero 8 (int4 weight only). */
#include "xfmt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CT_VERSION "0.10.2"

/* Kinds of its own. */
enum {
    XK_I8_FROM_I4 = XK_FORMAT,  /* int4 codes, one per int8 byte [N, K] (w4a8) */
    XK_CT_PACKED,               /* i32 [N, K/8] sequential, q + 8 */
    XK_CT_ZP,                   /* i32 [ceil(N/8), K/G], packed along N */
    XK_CT_SHAPE                 /* i64 [2] = [N, K] */
};

/* ================= detection ================= */

static int ct_args(dsq_export_info *x, const char *gname, json_object *w, dsq_xct_group *g, dsq_diag *d)
{
    char key[160];
    snprintf(key, sizeof key, "config_groups.%s.weights", gname);
    if (!json_object_is_type(w, json_type_object))
        return dsq_fail(d, DSQ_ERR_JSON, x->file, key, -1, "must be an object");
    json_object *o;
    g->bits = 8;
    if (json_object_object_get_ex(w, "num_bits", &o)) {
        if (!json_object_is_type(o, json_type_int)) return dsq_fail(d, DSQ_ERR_JSON, x->file, key, -1, "num_bits must be an integer");
        g->bits = (int)json_object_get_int64(o);
    }
    if (json_object_object_get_ex(w, "type", &o)) {
        if (!json_object_is_type(o, json_type_string)) return dsq_fail(d, DSQ_ERR_JSON, x->file, key, -1, "type must be a string");
        g->is_float = strcmp(json_object_get_string(o), "int") != 0;
    }
    g->symmetric = 1;
    if (json_object_object_get_ex(w, "symmetric", &o)) {
        if (!json_object_is_type(o, json_type_boolean)) return dsq_fail(d, DSQ_ERR_JSON, x->file, key, -1, "symmetric must be a boolean");
        g->symmetric = json_object_get_boolean(o);
    }
    const char *strategy = "tensor";
    if (json_object_object_get_ex(w, "strategy", &o) && !json_object_is_type(o, json_type_null)) {
        if (!json_object_is_type(o, json_type_string)) return dsq_fail(d, DSQ_ERR_JSON, x->file, key, -1, "strategy must be a string");
        strategy = json_object_get_string(o);
    }
    g->group_size = 0;
    if (json_object_object_get_ex(w, "group_size", &o) && !json_object_is_type(o, json_type_null)) {
        if (!json_object_is_type(o, json_type_int)) return dsq_fail(d, DSQ_ERR_JSON, x->file, key, -1, "group_size must be an integer");
        g->group_size = (int)json_object_get_int64(o);
    }
    if (json_object_object_get_ex(w, "actorder", &o) && !json_object_is_type(o, json_type_null))
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, key, -1, "actorder (weight_g_idx) is not supported");
    if (json_object_object_get_ex(w, "dynamic", &o) && !(json_object_is_type(o, json_type_boolean) && !json_object_get_boolean(o)))
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, key, -1, "dynamic weights are not supported");
    if (g->is_float || (g->bits != 4 && g->bits != 8))
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, key, -1, "only int4 / int8 weights are supported");
    if (!strcmp(strategy, "channel")) g->group_size = 0;
    else if (!strcmp(strategy, "group")) {
        if (g->group_size <= 0) return dsq_fail(d, DSQ_ERR_FORMAT, x->file, key, -1, "group strategy needs group_size > 0");
    } else
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, key, -1, "weight strategy '%s' is not supported (channel, group)", strategy);
    return DSQ_OK;
}

static int parse(dsq_export_info *x, json_object *q, dsq_diag *d)
{
    json_object *o;
    if (json_object_object_get_ex(q, "format", &o) && !json_object_is_type(o, json_type_null)) {
        if (!json_object_is_type(o, json_type_string))
            return dsq_fail(d, DSQ_ERR_JSON, x->file, "quantization_config.format", -1, "must be a string");
        snprintf(x->ct_format, sizeof x->ct_format, "%s", json_object_get_string(o));
    }
    if (json_object_object_get_ex(q, "quantization_status", &o)) {
        if (!json_object_is_type(o, json_type_string) || strcmp(json_object_get_string(o), "compressed"))
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, "quantization_config.quantization_status", -1,
                            "must be \"compressed\" (weights of other states are not stored as codes)");
    }
    json_object *groups;
    if (!json_object_object_get_ex(q, "config_groups", &groups) || !json_object_is_type(groups, json_type_object))
        return dsq_fail(d, DSQ_ERR_JSON, x->file, "quantization_config.config_groups", -1, "missing or not an object");
    json_object_object_foreach(groups, gname, gv) {
        if (x->n_groups == CT_MAX_GROUPS)
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, gname, -1, "more than %d config groups", CT_MAX_GROUPS);
        dsq_xct_group *g = &x->groups[x->n_groups++];
        if (!json_object_is_type(gv, json_type_object))
            return dsq_fail(d, DSQ_ERR_JSON, x->file, gname, -1, "config group is not an object");
        json_object *t = NULL;
        json_object_object_get_ex(gv, "targets", &t);
        if (!t || !json_object_is_type(t, json_type_array))
            return dsq_fail(d, DSQ_ERR_JSON, x->file, gname, -1, "config group has no \"targets\" list");
        DSQ_TRY(dsq_xm_parse(t, x->file, "targets", 1, &g->targets, &g->n_targets, d));
        json_object *w = NULL;
        if (json_object_object_get_ex(gv, "weights", &w) && !json_object_is_type(w, json_type_null)) {
            g->has_weights = 1;
            DSQ_TRY(ct_args(x, gname, w, g, d));
        }
        json_object *ia = NULL;
        if (json_object_object_get_ex(gv, "input_activations", &ia) && !json_object_is_type(ia, json_type_null)) {
            if (!json_object_is_type(ia, json_type_object))
                return dsq_fail(d, DSQ_ERR_JSON, x->file, gname, -1, "input_activations must be an object or null");
            json_object *dy = NULL;
            g->has_input = 1;
            g->input_dynamic = json_object_object_get_ex(ia, "dynamic", &dy) && json_object_is_type(dy, json_type_boolean) &&
                               json_object_get_boolean(dy);
            if (!g->input_dynamic)
                return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, gname, -1,
                                "static input activations are not supported (dynamic per-token only)");
        }
        const char *fmt = x->ct_format;
        json_object *f = NULL;
        if (json_object_object_get_ex(gv, "format", &f) && !json_object_is_type(f, json_type_null)) {
            if (!json_object_is_type(f, json_type_string))
                return dsq_fail(d, DSQ_ERR_JSON, x->file, gname, -1, "format must be a string");
            fmt = json_object_get_string(f);
        }
        snprintf(g->format, sizeof g->format, "%s", fmt);
        if (g->has_weights && strcmp(g->format, "pack-quantized") && strcmp(g->format, "int-quantized") &&
            strcmp(g->format, "naive-quantized"))
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, gname, -1,
                            "format '%s' is not supported (pack-quantized, int-quantized)", g->format);
        if (g->has_weights && !strcmp(g->format, "pack-quantized") && g->bits != 4)
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, gname, -1, "pack-quantized with %d bits (4 only)", g->bits);
    }
    o = NULL;
    json_object_object_get_ex(q, "ignore", &o);
    return dsq_xm_parse(o, x->file, "ignore", 1, &x->skip, &x->n_skip, d);
}

/* ignore wins, then the first group whose targets match */
static int spec_of(const dsq_export_info *x, const char *module, dsq_export_spec *spec, dsq_diag *d)
{
    if (dsq_x_always_float(module)) return DSQ_OK;
    if (dsq_xm_any(x->skip, x->n_skip, module, 0)) return DSQ_OK;
    for (size_t i = 0; i < x->n_groups; i++) {
        const dsq_xct_group *g = &x->groups[i];
        int hit = 0;
        for (size_t k = 0; k < g->n_targets && !hit; k++)
            hit = g->targets[k].is_linear_class || (g->targets[k].re ? dsq_xm_re_match(g->targets[k].re, module)
                                                                     : !strcmp(g->targets[k].text, module));
        if (!hit) continue;
        if (!g->has_weights) return DSQ_OK;
        spec->bits = g->bits;
        spec->group_size = g->group_size;
        spec->symmetric = g->symmetric;
        spec->act_dynamic = g->has_input && g->input_dynamic;
        spec->type = !strcmp(g->format, "pack-quantized") ? DSQ_EQ_CT_PACK : DSQ_EQ_CT_INT;
        if (spec->type == DSQ_EQ_CT_INT && !spec->symmetric)
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, module, -1, "asymmetric int-quantized weights are not supported");
        if (spec->type == DSQ_EQ_CT_INT && !spec->act_dynamic && spec->bits == 8)
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, module, -1,
                            "int8 weights without int8 activations (W8A16) are not supported");
        return DSQ_OK;
    }
    return DSQ_OK;
}

/* ================= plan ================= */

static int plan(dsq_xplan *p, size_t i, dsq_diag *d)
{
    const dsq_export_src *s = &p->src[i];
    if (s->role.mtp) {
        p->xs[i].drop = 1;
        return DSQ_OK;
    }
    int quant = s->scheme->weight_bits <= 8;
    if (!quant) return dsq_x_add_float(p, i, dsq_x_keep_dtype(s), d);
    if (!dsq_x_is_linear(s)) return dsq_x_add_float(p, i, p->model_dtype, d);
    if (dsq_x_indexer_float_only(s->name)) return dsq_x_refuse_quantized_indexer(s, d);
    int64_t N = s->qshape.rows, K = s->qshape.cols, G = s->qshape.group_size;
    int64_t ng = G ? (K + G - 1) / G : 1;
    if (G && K % G)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                        "in_features %lld is not a multiple of the group size %lld: convert with a "
                        "--group-size that divides it, --group-size 0 (per channel), or keep this "
                        "linear float (--keep)", (long long)K, (long long)G);
    char *mod = dsq_x_module(s->name);
    if (!mod) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, s->name, -1, "out of memory");
    enum dsq_dtype sd = p->model_dtype;
    int64_t w[2] = { N, K }, sc[2] = { N, ng }, two[1] = { 2 };
    int rc;
    p->xs[i].quantized = 1;
    switch (s->scheme->id) {
    case DSQ_SCHEME_AWQ_W4A16: {
        if (K % 8) {
            rc = dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                          "pack-quantized needs in_features %% 8 == 0 (got %lld)", (long long)K);
            break;
        }
        int64_t wp[2] = { N, K / 8 }, zp[2] = { (N + 7) / 8, ng };
        p->xs[i].type = "w4a16";
        rc = dsq_x_add(p, i, mod, ".weight_packed", DSQ_DTYPE_I32, 2, wp, XK_CT_PACKED, NULL, d);
        if (rc == DSQ_OK) rc = dsq_x_add(p, i, mod, ".weight_scale", sd, 2, sc, XK_SCALE, NULL, d);
        if (rc == DSQ_OK) rc = dsq_x_add(p, i, mod, ".weight_zero_point", DSQ_DTYPE_I32, 2, zp, XK_CT_ZP, NULL, d);
        if (rc == DSQ_OK) rc = dsq_x_add(p, i, mod, ".weight_shape", DSQ_DTYPE_I64, 1, two, XK_CT_SHAPE, NULL, d);
        break;
    }
    case DSQ_SCHEME_W8A8_DYNAMIC:
        p->xs[i].type = "w8a8";
        rc = dsq_x_add(p, i, mod, ".weight", DSQ_DTYPE_I8, 2, w, XK_I8, NULL, d);
        if (rc == DSQ_OK) rc = dsq_x_add(p, i, mod, ".weight_scale", sd, 2, sc, XK_SCALE, NULL, d);
        break;
    case DSQ_SCHEME_W4A8:
        p->xs[i].type = "w4a8";
        rc = dsq_x_add(p, i, mod, ".weight", DSQ_DTYPE_I8, 2, w, XK_I8_FROM_I4, NULL, d);
        if (rc == DSQ_OK) rc = dsq_x_add(p, i, mod, ".weight_scale", sd, 2, sc, XK_SCALE, NULL, d);
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

static int group_of(const dsq_xplan *p, size_t i) { return p->src[i].qshape.group_size; }

static int check(dsq_xplan *p, dsq_diag *d)
{
    for (size_t i = 0; i < p->nsrc; i++) {
        long j = dsq_x_partner(p, i);
        if (j <= (long)i || p->xs[i].drop) continue;
        const char *a = p->xs[i].quantized ? p->xs[i].type : "float";
        const char *b = p->xs[j].quantized ? p->xs[j].type : "float";
        if (strcmp(a, b) != 0 || (p->xs[i].quantized && group_of(p, i) != group_of(p, (size_t)j)))
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, p->src[i].name, -1,
                            "fused pair differs: %s is %s but %s is %s; vLLM fuses them and wants one "
                            "scheme", p->src[i].name, a, p->src[j].name, b);
    }
    return dsq_x_check_experts(p, "vLLM", d);
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

static int config(dsq_xplan *p, json_object *cfg, dsq_diag *d)
{
    /* Distinct (label, group) pairs in first-use order. */
    const char *lab[8];
    int grp[8];
    size_t nl = 0;
    for (size_t i = 0; i < p->nsrc; i++) {
        if (!p->xs[i].quantized) continue;
        size_t k = 0;
        while (k < nl && !(strcmp(lab[k], p->xs[i].type) == 0 && grp[k] == group_of(p, i))) k++;
        if (k == nl) {
            if (nl == 8) return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, p->src[i].name, -1, "too many schemes");
            lab[nl] = p->xs[i].type;
            grp[nl++] = group_of(p, i);
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
            for (size_t i = 0; i < p->nsrc; i++) {
                if (!p->xs[i].quantized || strcmp(p->xs[i].type, lab[k]) || group_of(p, i) != grp[k]) continue;
                char *mod = dsq_x_module(p->src[i].name);
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
    for (size_t i = 0; i < p->nsrc; i++) {
        if (p->xs[i].drop || p->xs[i].quantized || !dsq_x_is_linear(&p->src[i])) continue;
        char *mod = dsq_x_module(p->src[i].name);
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

/* ================= pack ================= */

static int pack(dsq_xplan *p, const dsq_xtensor *x, const dsq_qview *v, uint8_t *dst, dsq_diag *d)
{
    (void)p;
    const int64_t N = v->shape.rows, K = v->shape.cols, G = v->layout.ngroups;
    switch (x->kind) {
    case XK_I8_FROM_I4:
    case XK_CT_PACKED: {
        uint8_t *c = malloc((size_t)K + 128);
        if (!c) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, x->name, -1, "out of memory");
        for (int64_t n = 0; n < N; n++) {
            dsq_x_row_codes(v, n, c);
            if (x->kind == XK_I8_FROM_I4) {
                uint8_t *o = dst + (size_t)n * (size_t)K;
                for (int64_t k = 0; k < K; k++) o[k] = (uint8_t)(int8_t)(c[k] - 8);
                continue;
            }
            /* packed[n, c] = sum_j (q[n, 8c+j] + 8) << 4j; dsq's awq code
             * is already compressed-tensors' q + 8. */
            int64_t W = K / 8;
            uint32_t *orow = (uint32_t *)dst + (size_t)n * (size_t)W;
            for (int64_t cc = 0; cc < W; cc++) {
                uint32_t w = 0;
                for (int j = 0; j < 8; j++) w |= (uint32_t)c[8 * cc + j] << (4 * j);
                orow[cc] = w;
            }
        }
        free(c);
        return DSQ_OK;
    }
    case XK_CT_ZP: {
        /* Signed zero point z - 8, stored + 8 (= dsq's zero), 8 consecutive
         * output rows per int32 (packed along dim 0). */
        memset(dst, 0, x->nbytes);
        uint32_t *o = (uint32_t *)dst;
        for (int64_t n = 0; n < N; n++)
            for (int64_t g = 0; g < G; g++)
                o[(size_t)(n / 8) * (size_t)G + (size_t)g] |= (uint32_t)v->zeros[(size_t)n * (size_t)G + (size_t)g]
                                                           << (4 * (n & 7));
        return DSQ_OK;
    }
    case XK_CT_SHAPE: {
        int64_t s[2] = { N, K };
        memcpy(dst, s, 16);
        return DSQ_OK;
    }
    }
    return dsq_fail(d, DSQ_ERR_INTERNAL, NULL, x->name, -1, "unknown export kind %d", x->kind);
}

static int row_local(int kind) { return kind == XK_I8_FROM_I4 || kind == XK_CT_PACKED; }

/* ================= unpack ================= */

/* weight_scale [N, K/G] (group) or [N, 1] (channel) in the model dtype */
static int ct_scales(const rd *r, int64_t ng, float **sv, const dsq_st_tensor **s)
{
    DSQ_TRY(dsq_xr_need(r, "weight_scale", ANY_FLOAT, r->N, ng, 0, s));
    DSQ_TRY(dsq_xr_floats(r, *s, sv));
    int rc = dsq_xr_positive_scales(r, *s, *sv);
    if (rc < 0) { free(*sv); *sv = NULL; }
    return rc;
}

static int ct_groups(const rd *r, int64_t *G, int64_t *ng)
{
    /* scale shape (out, ceil(in / group_size)) (initialize.py): the last
     * group may be ragged, as in the dsq blob */
    *G = r->spec.group_size > 0 ? r->spec.group_size : r->K;
    *ng = (r->K + *G - 1) / *G;
    return DSQ_OK;
}

static int unpack_pack(const rd *r, qb *b, float **bias)
{
    (void)bias;
    int64_t G, ng;
    DSQ_TRY(ct_groups(r, &G, &ng));
    /* [N, ceil(K*4/32)]: pack_to_int32 pads the last word of a row */
    const int64_t words = (r->K + 7) / 8;
    const dsq_st_tensor *wp, *ws, *zp, *s;
    DSQ_TRY(dsq_xr_need(r, "weight_packed", DSQ_DTYPE_I32, r->N, words, 0, &wp));
    DSQ_TRY(dsq_xr_need(r, "weight_shape", DSQ_DTYPE_I64, 2, -1, 0, &ws));
    if ((int64_t)dsq_load_u64le(ws->data) != r->N || (int64_t)dsq_load_u64le(ws->data + 8) != r->K)
        return dsq_fail(r->d, DSQ_ERR_SHAPE, dsq_xr_file_of(r, ws), ws->name, (int64_t)ws->file_offset,
                        "weight_shape is [%lld, %lld], expected [%lld, %lld]", (long long)dsq_load_u64le(ws->data),
                        (long long)dsq_load_u64le(ws->data + 8), (long long)r->N, (long long)r->K);
    DSQ_TRY(dsq_xr_need(r, "weight_zero_point", DSQ_DTYPE_I32, (r->N + 7) / 8, ng, 1, &zp));
    if (!r->spec.symmetric && !zp) return dsq_xr_need(r, "weight_zero_point", DSQ_DTYPE_I32, (r->N + 7) / 8, ng, 0, &zp);
    if (r->spec.symmetric && zp)
        return dsq_fail(r->d, DSQ_ERR_FORMAT, dsq_xr_file_of(r, zp), zp->name, (int64_t)zp->file_offset,
                        "symmetric scheme but a zero point is stored");
    char gi[600];
    snprintf(gi, sizeof gi, "%s.weight_g_idx", r->module);
    if (dsq_st_find(r->st, gi))
        return dsq_fail(r->d, DSQ_ERR_UNSUPPORTED, dsq_export_desc_file(r->x), gi, -1, "activation reordering is not supported");
    float *sv;
    DSQ_TRY(ct_scales(r, ng, &sv, &s));
    int rc = dsq_xr_qb_new(r, DSQ_SCHEME_AWQ_W4A16, (int32_t)G, b);
    if (rc == DSQ_OK) {
        /* u = q + 8 sequential nibbles; w = (q - zp) s = (u - (zp + 8)) s: the awq grid */
        for (int64_t n = 0; n < r->N; n++) {
            for (int64_t c = 0; c < words; c++) {
                uint32_t v = (uint32_t)i32_at(wp, (uint64_t)(n * words + c));
                for (int j = 0; j < 8 && 8 * c + j < r->K; j++) put_u4(b, n, 8 * c + j, (v >> (4 * j)) & 0xFu);
            }
            for (int64_t g = 0; g < ng; g++) {
                unsigned z = 8;
                if (zp) z = ((uint32_t)i32_at(zp, (uint64_t)((n / 8) * ng + g)) >> (4 * (n % 8))) & 0xFu;
                put_zero(b, n, g, z);
                put_scale(b, n, g, sv[n * ng + g]);
            }
        }
    }
    free(sv);
    return rc;
}

static int unpack_int(const rd *r, qb *b, float **bias)
{
    (void)bias;
    int64_t G, ng;
    DSQ_TRY(ct_groups(r, &G, &ng));
    const dsq_st_tensor *w, *s, *is;
    DSQ_TRY(dsq_xr_need(r, "weight", DSQ_DTYPE_I8, r->N, r->K, 0, &w));
    DSQ_TRY(dsq_xr_need(r, "input_scale", ANY_FLOAT, 1, -1, 1, &is));
    if (is)
        return dsq_fail(r->d, DSQ_ERR_FORMAT, dsq_xr_file_of(r, is), is->name, (int64_t)is->file_offset,
                        "dynamic activations store no input_scale");
    uint32_t id;
    if (r->spec.bits == 8) {
        if (ng != 1)
            return dsq_fail(r->d, DSQ_ERR_UNSUPPORTED, dsq_export_desc_file(r->x), r->module, -1,
                            "int8 weights must be per channel");
        id = DSQ_SCHEME_W8A8_DYNAMIC;
    } else
        id = r->spec.act_dynamic ? DSQ_SCHEME_W4A8 : DSQ_SCHEME_AWQ_W4A16;
    float *sv;
    DSQ_TRY(ct_scales(r, ng, &sv, &s));
    int rc = dsq_xr_qb_new(r, id, ng == 1 ? 0 : (int32_t)G, b);
    for (int64_t n = 0; n < r->N && rc == DSQ_OK; n++) {
        for (int64_t k = 0; k < r->K && rc == DSQ_OK; k++) {
            int q = i8_at(w, (uint64_t)(n * r->K + k));
            if (id == DSQ_SCHEME_W8A8_DYNAMIC) put_i8(b, n, k, q);
            else if (q < -8 || q > 7)
                rc = dsq_xr_bad_value(r, w, (uint64_t)(n * r->K + k), "int4 value outside [-8, 7]", q);
            else put_u4(b, n, k, (unsigned)(q + 8));
        }
        for (int64_t g = 0; g < ng; g++) {
            put_scale(b, n, g, sv[n * ng + g]);
            if (id == DSQ_SCHEME_AWQ_W4A16) put_zero(b, n, g, 8);
        }
    }
    if (rc == DSQ_OK) dsq_xr_put_rowsums(b);
    free(sv);
    return rc;
}

/* weight_shape holds [N, K]; K may not fill the last word */
static void shape_pack(const dsq_st_model *st, const char *module, const dsq_st_tensor *t, int64_t *rows,
                       int64_t *cols)
{
    char sn[620];
    snprintf(sn, sizeof sn, "%s.weight_shape", module);
    const dsq_st_tensor *ws = dsq_st_find(st, sn);
    *rows = t->shape[0];
    *cols = 8 * t->shape[1];
    if (ws && ws->dtype == DSQ_DTYPE_I64 && ws->numel == 2) *cols = (int64_t)dsq_load_u64le(ws->data + 8);
}

static const dsq_xreader READERS[] = {
    { DSQ_EQ_CT_PACK, "weight_packed", unpack_pack, shape_pack },
    { DSQ_EQ_CT_INT,  "weight",        unpack_int,  NULL },
    { DSQ_EQ_FLOAT, NULL, NULL, NULL }
};

static const uint32_t SCHEMES[] = { DSQ_SCHEME_AWQ_W4A16, DSQ_SCHEME_W8A8_DYNAMIC, DSQ_SCHEME_W4A8, XFMT_SCHEMES_END };

const dsq_xfmt dsq_xfmt_ct = {
    .name = "compressed-tensors",
    .kind = DSQ_EXPORT_CT,
    .weights_base = "model",
    .default_shard = 5000000000ull,
    .schemes = SCHEMES,
    .desc_file = NULL,
    .quant_method = "compressed-tensors",
    .parse = parse,
    .spec_of = spec_of,
    .readers = READERS,
    .plan = plan,
    .check = check,
    .pack = pack,
    .row_local = row_local,
    .config = config,
    .describe = NULL,
};
