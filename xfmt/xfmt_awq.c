/* xfmt_awq.c - AutoAWQ "GEMM" W4A16 for vLLM (docs/serving-exports.md
 * "## AutoAWQ GEMM"): qweight int32 [K, N/8] / qzeros int32 [K/G, N/8] in
 * AWQ_ORDER, scales float16 [K/G, N] (a conversion for this target rounds
 * the codes against the F16 scale: xs.scale_dtype); every float tensor
 * float16 (the model loads as float16); config.json quantization_config
 * {"quant_method": "awq", ...}.
 *
 * Only awq-w4a16 linears map (RTN or calibrated); other int schemes are
 * refused. Quantized tensors outside the decoder linears (embeddings,
 * lm_head, router) are dequantized to float16. The MTP layer is dropped, as
 * AutoAWQ does (the HF model has layers 0..n-1 only). Linears kept float
 * go into modules_to_not_convert; AutoAWQ and vLLM skip a linear when an
 * entry is a SUBSTRING of its name, so entries are checked not to match any
 * quantized linear. Reading takes the same layout back to awq-w4a16. */
#include "xfmt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Kinds of its own. */
enum {
    XK_AWQ_QWEIGHT = XK_FORMAT,  /* i32 [K, N/8] AWQ order */
    XK_AWQ_QZEROS,               /* i32 [K/G, N/8] */
    XK_AWQ_SCALES                /* f16 [K/G, N] */
};

/* Nibble i of word c holds output column 8c + ORDER[i], ORDER =
 * [0,2,4,6,1,3,5,7]; REV[o] is the nibble of column offset o. */
static const int AWQ_REV[8] = { 0, 4, 1, 5, 2, 6, 3, 7 };

/* ================= detection ================= */

static int get_int_alias(json_object *q, const char *a, const char *b, int64_t *v, int *found)
{
    json_object *o = NULL;
    *found = 0;
    if (!json_object_object_get_ex(q, a, &o) && !json_object_object_get_ex(q, b, &o)) return DSQ_OK;
    if (!json_object_is_type(o, json_type_int)) return DSQ_ERR_JSON;
    *v = json_object_get_int64(o);
    *found = 1;
    return DSQ_OK;
}

static int parse(dsq_export_info *x, json_object *q, dsq_diag *d)
{
    int64_t bits = 4, g = 128;
    int found;
    if (get_int_alias(q, "bits", "w_bit", &bits, &found) < 0)
        return dsq_fail(d, DSQ_ERR_JSON, x->file, "quantization_config.bits", -1, "must be an integer");
    if (bits != 4)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, "quantization_config.bits", -1,
                        "AWQ with %lld bits is not supported (4 only)", (long long)bits);
    if (get_int_alias(q, "group_size", "q_group_size", &g, &found) < 0)
        return dsq_fail(d, DSQ_ERR_JSON, x->file, "quantization_config.group_size", -1, "must be an integer");
    if (g != -1 && (g <= 0 || g > (1 << 20)))
        return dsq_fail(d, DSQ_ERR_FORMAT, x->file, "quantization_config.group_size", -1,
                        "group_size %lld must be positive or -1", (long long)g);
    x->awq_group = (int)g;   /* -1: whole input dimension */
    json_object *o;
    if (json_object_object_get_ex(q, "version", &o)) {
        if (!json_object_is_type(o, json_type_string))
            return dsq_fail(d, DSQ_ERR_JSON, x->file, "quantization_config.version", -1, "must be a string");
        if (strcasecmp(json_object_get_string(o), "gemm") != 0)
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, "quantization_config.version", -1,
                            "AWQ version '%s' is not supported (GEMM only)", json_object_get_string(o));
    }
    x->awq_zero_point = 1;
    if (json_object_object_get_ex(q, "zero_point", &o)) {
        if (!json_object_is_type(o, json_type_boolean))
            return dsq_fail(d, DSQ_ERR_JSON, x->file, "quantization_config.zero_point", -1, "must be true or false");
        x->awq_zero_point = json_object_get_boolean(o);
    }
    if (!x->awq_zero_point)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, "quantization_config.zero_point", -1,
                        "symmetric AWQ (zero_point false) is not supported");
    o = NULL;
    json_object_object_get_ex(q, "modules_to_not_convert", &o);
    return dsq_xm_parse(o, x->file, "modules_to_not_convert", 0, &x->skip, &x->n_skip, d);
}

static int spec_of(const dsq_export_info *x, const char *module, dsq_export_spec *spec, dsq_diag *d)
{
    (void)d;
    if (dsq_x_always_float(module)) return DSQ_OK;
    if (dsq_xm_any(x->skip, x->n_skip, module, 1)) return DSQ_OK;   /* AutoAWQ module.py:62 substring rule */
    spec->type = DSQ_EQ_AWQ_GEMM;
    spec->float_if_absent = x->n_skip == 0;
    spec->bits = 4;
    spec->group_size = x->awq_group;
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
    if (!quant || !dsq_x_is_linear(s)) return dsq_x_add_float(p, i, DSQ_DTYPE_F16, d);
    if (dsq_x_indexer_float_only(s->name)) return dsq_x_refuse_quantized_indexer(s, d);
    if (s->scheme->id != DSQ_SCHEME_AWQ_W4A16)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                        "AutoAWQ GEMM holds W4A16 weights only; this linear is %s: convert with "
                        "--scheme awq-w4a16 (or --format ascend / compressed-tensors)", s->scheme->name);
    /* group_size -1 (per channel) is legal AutoAWQ, but
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
    if (p->awq_group != -2 && p->awq_group != cfg_g)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                        "AutoAWQ has one group_size per model: this linear has %d, an earlier one %d",
                        (int)cfg_g, (int)p->awq_group);
    p->awq_group = cfg_g;
    char *mod = dsq_x_module(s->name);
    if (!mod) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, s->name, -1, "out of memory");
    int64_t qw[2] = { K, N / 8 }, qz[2] = { K / G, N / 8 }, sc[2] = { K / G, N };
    p->xs[i].quantized = 1;
    p->xs[i].type = "awq";
    int rc = dsq_x_add(p, i, mod, ".qweight", DSQ_DTYPE_I32, 2, qw, XK_AWQ_QWEIGHT, NULL, d);
    if (rc == DSQ_OK) rc = dsq_x_add(p, i, mod, ".qzeros", DSQ_DTYPE_I32, 2, qz, XK_AWQ_QZEROS, NULL, d);
    if (rc == DSQ_OK) rc = dsq_x_add(p, i, mod, ".scales", DSQ_DTYPE_F16, 2, sc, XK_AWQ_SCALES, NULL, d);
    p->xs[i].scale_dtype = DSQ_DTYPE_F16;
    free(mod);
    return rc;
}

/* Float linears of the decoder layers; "FLOAT" pairs also by fused name. */
static int check(dsq_xplan *p, dsq_diag *d)
{
    for (size_t i = 0; i < p->nsrc; i++) {
        long j = dsq_x_partner(p, i);
        if (j > (long)i && !p->xs[i].drop && p->xs[i].quantized != p->xs[j].quantized)
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, p->src[i].name, -1,
                            "fused pair differs: %s is %s but %s is %s; vLLM fuses them and wants both "
                            "quantized or both float", p->src[i].name,
                            p->xs[i].quantized ? "quantized" : "float", p->src[j].name,
                            p->xs[j].quantized ? "quantized" : "float");
    }
    return dsq_x_check_experts(p, "vLLM", d);
}

static int quantized_contains(const dsq_xplan *p, const char *entry)
{
    for (size_t i = 0; i < p->nsrc; i++)
        if (p->xs[i].quantized && strstr(p->src[i].name, entry)) return 1;
    return 0;
}

static int in_list(json_object *a, const char *s)
{
    for (size_t k = 0; k < json_object_array_length(a); k++)
        if (!strcmp(json_object_get_string(json_object_array_get_idx(a, k)), s)) return 1;
    return 0;
}

static int add_entry(dsq_xplan *p, json_object *a, const char *e, dsq_diag *d)
{
    if (quantized_contains(p, e))
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, e, -1,
                        "modules_to_not_convert entry '%s' would also match a quantized linear "
                        "(AutoAWQ / vLLM match by substring)", e);
    if (!in_list(a, e)) json_object_array_add(a, json_object_new_string(e));
    return DSQ_OK;
}

/* The leaf ("kv_b_proj") when every linear with that leaf is float and it
 * matches no quantized name, else the full module name. */
static int not_convert_list(dsq_xplan *p, json_object *a, dsq_diag *d)
{
    for (size_t i = 0; i < p->nsrc; i++) {
        const dsq_export_src *s = &p->src[i];
        if (p->xs[i].drop || p->xs[i].quantized || !dsq_x_is_linear(s)) continue;
        char *mod = dsq_x_module(s->name);
        if (!mod) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        const char *dot = strrchr(mod, '.');
        const char *leaf = dot ? dot + 1 : mod;
        char pat[256];
        snprintf(pat, sizeof pat, ".%s", leaf);
        int rc = quantized_contains(p, pat) ? add_entry(p, a, mod, d) : add_entry(p, a, leaf, d);
        /* vLLM builds a layer's routed experts into one FusedMoE and skips
         * it only when an entry is a substring of "model.layers.L.mlp.experts"
         * (awq_marlin.py get_quant_method); dsq_x_check_experts makes the
         * layer's experts all float here. */
        const char *ex_at = strstr(mod, ".mlp.experts.");
        if (rc == DSQ_OK && s->role.role == DSQ_ROLE_EXPERT_LINEAR && ex_at) {
            char moe[1200];
            snprintf(moe, sizeof moe, "%.*s", (int)(ex_at - mod) + (int)strlen(".mlp.experts"), mod);
            if (!quantized_contains(p, moe)) rc = add_entry(p, a, moe, d);
        }
        /* vLLM checks a fused layer by its fused name. */
        long j = dsq_x_partner(p, i);
        if (rc == DSQ_OK && j >= 0 && dot) {
            const char *fused = !strcmp(leaf, "gate_proj") || !strcmp(leaf, "up_proj") ? "gate_up_proj"
                                                                                      : "fused_qkv_a_proj";
            char full[1200];
            snprintf(full, sizeof full, "%.*s.%s", (int)(dot - mod), mod, fused);
            rc = add_entry(p, a, full, d);
        }
        free(mod);
        DSQ_TRY(rc);
    }
    return DSQ_OK;
}

static int config(dsq_xplan *p, json_object *cfg, dsq_diag *d)
{
    json_object *q = json_object_new_object(), *nc = json_object_new_array();
    if (!q || !nc) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    int rc = not_convert_list(p, nc, d);
    if (rc < 0) {
        json_object_put(q);
        json_object_put(nc);
        return rc;
    }
    /* AwqConfig.to_transformers_dict (_config.py:84-92), key order kept. */
    json_object_object_add(q, "quant_method", json_object_new_string("awq"));
    json_object_object_add(q, "zero_point", json_object_new_boolean(1));
    json_object_object_add(q, "group_size", json_object_new_int(p->awq_group == -2 ? 128 : p->awq_group));
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

/* ================= pack ================= */

static int pack(dsq_xplan *p, const dsq_xtensor *x, const dsq_qview *v, uint8_t *dst, dsq_diag *d)
{
    const int64_t N = v->shape.rows, K = v->shape.cols, G = v->layout.ngroups;
    switch (x->kind) {
    case XK_AWQ_QWEIGHT: {
        /* qweight[k, c] nibble i = q[8c + ORDER[i], k] (rows n0..n0+7 are
         * one word column c). */
        uint8_t *c = malloc(8 * ((size_t)K + 128));
        if (!c) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, x->name, -1, "out of memory");
        const size_t st = (size_t)K + 128;
        uint32_t *o = (uint32_t *)dst;
        int64_t W = N / 8;
        for (int64_t n0 = 0; n0 < N; n0 += 8) {
            int rows = N - n0 < 8 ? (int)(N - n0) : 8;
            for (int r = 0; r < rows; r++) dsq_x_row_codes(v, n0 + r, c + (size_t)r * st);
            int64_t col = n0 / 8;
            for (int64_t k = 0; k < K; k++) {
                uint32_t w = 0;
                for (int r = 0; r < rows; r++) w |= (uint32_t)c[(size_t)r * st + (size_t)k] << (4 * AWQ_REV[r]);
                o[(size_t)k * (size_t)W + (size_t)col] = w;
            }
        }
        free(c);
        return DSQ_OK;
    }
    case XK_AWQ_QZEROS: {
        memset(dst, 0, x->nbytes);
        uint32_t *o = (uint32_t *)dst;
        int64_t W = N / 8;
        for (int64_t n = 0; n < N; n++)
            for (int64_t g = 0; g < G; g++)
                o[(size_t)g * (size_t)W + (size_t)(n / 8)] |= (uint32_t)v->zeros[(size_t)n * (size_t)G + (size_t)g]
                                                          << (4u * (unsigned)AWQ_REV[n & 7]);
        return DSQ_OK;
    }
    case XK_AWQ_SCALES:
        for (int64_t n = 0; n < N; n++)
            for (int64_t g = 0; g < G; g++)
                if (dsq_x_put_float(p, DSQ_DTYPE_F16, dst, (size_t)(g * N + n), dsq_x_scale_at(v, n, g), 1) < 0)
                    return dsq_x_scale_overflow(x, n, g, dsq_x_scale_at(v, n, g), d);
        return DSQ_OK;
    }
    return dsq_fail(d, DSQ_ERR_INTERNAL, NULL, x->name, -1, "unknown export kind %d", x->kind);
}

static int row_local(int kind)
{
    (void)kind;
    return 0;
}

/* ================= unpack ================= */

static int unpack_gemm(const rd *r, qb *b, float **bias)
{
    (void)bias;
    const int64_t G = r->spec.group_size > 0 ? r->spec.group_size : r->K;
    if (r->K % G || r->N % 8)
        return dsq_fail(r->d, DSQ_ERR_SHAPE, dsq_export_desc_file(r->x), r->module, -1,
                        "AWQ needs in_features %% group_size == 0 and out_features %% 8 == 0 ([%lld, %lld], G %lld)",
                        (long long)r->N, (long long)r->K, (long long)G);
    const int64_t ng = r->K / G, nc = r->N / 8;
    const dsq_st_tensor *qw, *qz, *sc;
    DSQ_TRY(dsq_xr_need(r, "qweight", DSQ_DTYPE_I32, r->K, nc, 0, &qw));
    DSQ_TRY(dsq_xr_need(r, "qzeros", DSQ_DTYPE_I32, ng, nc, 0, &qz));
    DSQ_TRY(dsq_xr_need(r, "scales", DSQ_DTYPE_F16, ng, r->N, 0, &sc));
    float *sv;
    DSQ_TRY(dsq_xr_floats(r, sc, &sv));
    int rc = dsq_xr_positive_scales(r, sc, sv);
    if (rc == DSQ_OK) rc = dsq_xr_qb_new(r, DSQ_SCHEME_AWQ_W4A16, (int32_t)G, b);
    if (rc == DSQ_OK) {
        for (int64_t k = 0; k < r->K; k++)
            for (int64_t c = 0; c < nc; c++) {
                uint32_t v = (uint32_t)i32_at(qw, (uint64_t)(k * nc + c));
                for (int j = 0; j < 8; j++) put_u4(b, 8 * c + j, k, (v >> (4 * AWQ_REV[j])) & 0xFu);
            }
        for (int64_t g = 0; g < ng; g++)
            for (int64_t c = 0; c < nc; c++) {
                uint32_t v = (uint32_t)i32_at(qz, (uint64_t)(g * nc + c));
                for (int j = 0; j < 8; j++) put_zero(b, 8 * c + j, g, (v >> (4 * AWQ_REV[j])) & 0xFu);
            }
        for (int64_t g = 0; g < ng; g++)
            for (int64_t n = 0; n < r->N; n++) put_scale(b, n, g, sv[g * r->N + n]);
    }
    free(sv);
    return rc;
}

static void shape_gemm(const dsq_st_model *st, const char *module, const dsq_st_tensor *t, int64_t *rows,
                       int64_t *cols)
{
    (void)st;
    (void)module;
    *rows = 8 * t->shape[1];
    *cols = t->shape[0];
}

static const dsq_xreader READERS[] = {
    { DSQ_EQ_AWQ_GEMM, "qweight", unpack_gemm, shape_gemm },
    { DSQ_EQ_FLOAT, NULL, NULL, NULL }
};

static const uint32_t SCHEMES[] = { DSQ_SCHEME_AWQ_W4A16, XFMT_SCHEMES_END };

const dsq_xfmt dsq_xfmt_awq = {
    .name = "awq",
    .kind = DSQ_EXPORT_AWQ,
    .weights_base = "model",
    .default_shard = 5000000000ull,   /* huggingface_hub MAX_SHARD_SIZE */
    .schemes = SCHEMES,
    .desc_file = NULL,
    .quant_method = "awq",
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
