/* xfmt_ascend.c - msModelSlim "AscendV1" for vllm-ascend / MindIE
 * (docs/serving-exports.md "## AscendV1"): quant_model_weights*.safetensors,
 * quant_model_description.json with an entry for every tensor, config.json
 * without quantization_config.
 *
 * Writing:
 *   w8a8-dynamic           -> W8A8_DYNAMIC (linears and routed experts)
 *   w8a8 (static)          -> W8A8 for linears; routed experts W8A8_DYNAMIC
 *                             (vllm-ascend has no static MoE scheme; the
 *                             weight codes and scales are the same)
 *   w4a8, per channel      -> W4A8_DYNAMIC, routed experts only
 *   kv_b_proj, embeddings, lm_head, router, MTP layer -> "FLOAT" (a
 *                             quantized one is dequantized to the model dtype)
 * Refused: w4a8 elsewhere (use --recipe deepseek-w4a8), w4a8 with a group
 * size, awq-w4a16, fused pairs / a layer's experts of different types.
 * Reading: W8A8_DYNAMIC -> w8a8-dynamic, W8A8 -> w8a8 (static activations,
 * bias from quant_bias), W4A8_DYNAMIC -> w4a8 per channel. */
#include "xfmt_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Kinds of its own. */
enum {
    XK_ASC_W4 = XK_FORMAT,  /* int8 [N/2, K], int4 pairs along N */
    XK_ASC_SCALE_BIAS,      /* f32 [N, 1] or [N, 16] */
    XK_INPUT_SCALE,         /* [1] f32 act_scale */
    XK_INPUT_OFFSET,        /* [1] f32 act_offset */
    XK_DEQ_SCALE,           /* [N] f32 or i64 (f32 bits) act_scale * s_w */
    XK_QUANT_BIAS           /* [N] i32 -act_offset * rowsum */
};

/* ================= detection ================= */

static int desc_cmp(const void *a, const void *b)
{
    return strcmp(((const dsq_xdesc_entry *)a)->name, ((const dsq_xdesc_entry *)b)->name);
}

static const char *const ASCEND_GLOBAL_STR[] = { "version", "model_quant_type", "kv_quant_type", "kv_cache_type",
                                                 "fa_quant_type", "reduce_quant_type" };

static int parse(dsq_export_info *x, json_object *root, dsq_diag *d)
{
    if (!json_object_is_type(root, json_type_object))
        return dsq_fail(d, DSQ_ERR_JSON, x->file, NULL, -1, "top level is not an object");
    size_t cap = (size_t)json_object_object_length(root);
    x->desc = calloc(cap ? cap : 1, sizeof *x->desc);
    if (!x->desc) return DSQ_ERR_NOMEM;
    json_object_object_foreach(root, key, val) {
        int global = 0;
        for (size_t i = 0; i < sizeof ASCEND_GLOBAL_STR / sizeof *ASCEND_GLOBAL_STR; i++)
            if (strcmp(key, ASCEND_GLOBAL_STR[i]) == 0) global = 1;
        if (global) {
            if (!json_object_is_type(val, json_type_string))
                return dsq_fail(d, DSQ_ERR_JSON, x->file, key, -1, "\"%s\" must be a string", key);
            continue;
        }
        if (!strcmp(key, "metadata") || !strcmp(key, "optional")) {
            if (!json_object_is_type(val, json_type_object))
                return dsq_fail(d, DSQ_ERR_JSON, x->file, key, -1, "\"%s\" must be an object", key);
            continue;
        }
        if (!strcmp(key, "group_size")) {
            if (!json_object_is_type(val, json_type_int) || json_object_get_int64(val) < 0 ||
                json_object_get_int64(val) > (1 << 20))
                return dsq_fail(d, DSQ_ERR_JSON, x->file, key, -1, "\"group_size\" must be a non-negative integer");
            x->ascend_group_size = (int)json_object_get_int64(val);
            continue;
        }
        if (!json_object_is_type(val, json_type_string))
            return dsq_fail(d, DSQ_ERR_JSON, x->file, key, -1, "entry must be a type string such as \"W8A8_DYNAMIC\"");
        dsq_xdesc_entry *e = &x->desc[x->n_desc++];
        e->name = strdup(key);
        e->type = strdup(json_object_get_string(val));
        if (!e->name || !e->type) return DSQ_ERR_NOMEM;
    }
    qsort(x->desc, x->n_desc, sizeof *x->desc, desc_cmp);
    for (size_t i = 1; i < x->n_desc; i++)
        if (!strcmp(x->desc[i].name, x->desc[i - 1].name))
            return dsq_fail(d, DSQ_ERR_FORMAT, x->file, x->desc[i].name, -1, "duplicate entry");
    return DSQ_OK;
}

const char *dsq_export_ascend_type(const dsq_export_info *x, const char *tensor)
{
    if (!x || x->kind != DSQ_EXPORT_ASCEND) return NULL;
    dsq_xdesc_entry key = { (char *)tensor, NULL };
    const dsq_xdesc_entry *e = bsearch(&key, x->desc, x->n_desc, sizeof *x->desc, desc_cmp);
    return e ? e->type : NULL;
}

/* The "<module>.weight" description entry is required (vllm-ascend raises
 * KeyError without it). */
static int spec_of(const dsq_export_info *x, const char *module, dsq_export_spec *spec, dsq_diag *d)
{
    char key[600];
    snprintf(key, sizeof key, "%s.weight", module);
    const char *t = dsq_export_ascend_type(x, key);
    if (!t) {
        if (dsq_x_ends_with(module, ".mlp.gate")) return DSQ_OK;   /* router: built without quant_config */
        return dsq_fail(d, DSQ_ERR_FORMAT, x->file, key, -1,
                        "no description entry (vllm-ascend raises KeyError; float tensors need \"FLOAT\")");
    }
    if (!strcmp(t, "FLOAT")) return DSQ_OK;
    if (dsq_x_always_float(module))
        return dsq_fail(d, DSQ_ERR_FORMAT, x->file, key, -1, "type %s, but this module must be \"FLOAT\"", t);
    if (!strcmp(t, "W8A8_DYNAMIC")) spec->type = DSQ_EQ_ASCEND_W8A8_DYNAMIC;
    else if (!strcmp(t, "W8A8")) spec->type = DSQ_EQ_ASCEND_W8A8;
    else if (!strcmp(t, "W4A8_DYNAMIC")) {
        if (x->ascend_group_size != 0)
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, "group_size", -1,
                            "W4A8_DYNAMIC needs \"group_size\": 0 (per-channel)");
        spec->type = DSQ_EQ_ASCEND_W4A8_DYNAMIC;
    } else
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, key, -1,
                        "quantization type '%s' is not supported (FLOAT, W8A8, W8A8_DYNAMIC, W4A8_DYNAMIC)", t);
    return DSQ_OK;
}

/* ================= plan ================= */

static enum dsq_dtype float_model_dtype(const dsq_xplan *p) { return p->model_dtype; }

static int add_w8_dynamic(dsq_xplan *p, size_t i, const char *mod, dsq_diag *d)
{
    const dsq_export_src *s = &p->src[i];
    int64_t N = s->qshape.rows, K = s->qshape.cols, w[2] = { N, K }, c[2] = { N, 1 };
    p->xs[i].type = "W8A8_DYNAMIC";
    p->xs[i].quantized = 1;
    DSQ_TRY(dsq_x_add(p, i, mod, ".weight", DSQ_DTYPE_I8, 2, w, XK_I8, "W8A8_DYNAMIC", d));
    DSQ_TRY(dsq_x_add(p, i, mod, ".weight_scale", DSQ_DTYPE_F32, 2, c, XK_SCALE, "W8A8_DYNAMIC", d));
    return dsq_x_add(p, i, mod, ".weight_offset", DSQ_DTYPE_F32, 2, c, XK_ZEROS_F32, "W8A8_DYNAMIC", d);
}

static int add_w8_static(dsq_xplan *p, size_t i, const char *mod, dsq_diag *d)
{
    const dsq_export_src *s = &p->src[i];
    int64_t N = s->qshape.rows, K = s->qshape.cols, w[2] = { N, K }, one[1] = { 1 }, n1[1] = { N };
    enum dsq_dtype dq;
    if (p->model_dtype == DSQ_DTYPE_BF16) dq = DSQ_DTYPE_F32;
    else if (p->model_dtype == DSQ_DTYPE_F16) dq = DSQ_DTYPE_I64;
    else
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                        "static W8A8 needs a bfloat16 or float16 model (config torch_dtype): vllm-ascend "
                        "has no deq_scale for other dtypes; use --scheme w8a8-dynamic");
    p->xs[i].type = "W8A8";
    p->xs[i].quantized = 1;
    DSQ_TRY(dsq_x_add(p, i, mod, ".weight", DSQ_DTYPE_I8, 2, w, XK_I8, "W8A8", d));
    DSQ_TRY(dsq_x_add(p, i, mod, ".input_scale", DSQ_DTYPE_F32, 1, one, XK_INPUT_SCALE, "W8A8", d));
    DSQ_TRY(dsq_x_add(p, i, mod, ".input_offset", DSQ_DTYPE_F32, 1, one, XK_INPUT_OFFSET, "W8A8", d));
    DSQ_TRY(dsq_x_add(p, i, mod, ".deq_scale", dq, 1, n1, XK_DEQ_SCALE, "W8A8", d));
    return dsq_x_add(p, i, mod, ".quant_bias", DSQ_DTYPE_I32, 1, n1, XK_QUANT_BIAS, "W8A8", d);
}

static int add_w4(dsq_xplan *p, size_t i, const char *mod, dsq_diag *d)
{
    const dsq_export_src *s = &p->src[i];
    int64_t N = s->qshape.rows, K = s->qshape.cols;
    if (s->role.role != DSQ_ROLE_EXPERT_LINEAR)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                        "vllm-ascend loads W4A8_DYNAMIC for routed experts only; this "
                        "%s is w4a8: use --recipe deepseek-w4a8 (w8a8-dynamic on attention, dense and "
                        "shared-expert linears, w4a8 on routed experts)", dsq_role_name(s->role.role));
    if (s->qshape.group_size != 0)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                        "vllm-ascend's W4A8_DYNAMIC takes per-channel scales only (group_size 0), this "
                        "tensor has group size %d: convert with --group-size 0", (int)s->qshape.group_size);
    int down = dsq_x_ends_with(mod, "down_proj") || dsq_x_ends_with(mod, "o_proj") || dsq_x_ends_with(mod, ".w2");
    int gu = dsq_x_ends_with(mod, "gate_proj") || dsq_x_ends_with(mod, "up_proj") || dsq_x_ends_with(mod, ".w1") ||
             dsq_x_ends_with(mod, ".w3");
    if (!down && !gu)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                        "W4A8_DYNAMIC scale_bias is defined for gate/up/down projections only");
    if (N % 2)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                        "W4A8_DYNAMIC packs int4 pairs along the output dimension: %lld rows is odd",
                        (long long)N);
    if (down && K % 16)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                        "W4A8_DYNAMIC down_proj scale_bias splits K into 16 parts: K = %lld is not a "
                        "multiple of 16", (long long)K);
    int64_t w[2] = { N / 2, K }, c[2] = { N, 1 }, sb[2] = { N, down ? 16 : 1 };
    p->xs[i].type = "W4A8_DYNAMIC";
    p->xs[i].quantized = 1;
    DSQ_TRY(dsq_x_add(p, i, mod, ".weight", DSQ_DTYPE_I8, 2, w, XK_ASC_W4, "W4A8_DYNAMIC", d));
    DSQ_TRY(dsq_x_add(p, i, mod, ".weight_scale", DSQ_DTYPE_F32, 2, c, XK_SCALE, "W4A8_DYNAMIC", d));
    DSQ_TRY(dsq_x_add(p, i, mod, ".weight_offset", DSQ_DTYPE_F32, 2, c, XK_ZEROS_F32, "W4A8_DYNAMIC", d));
    return dsq_x_add(p, i, mod, ".scale_bias", DSQ_DTYPE_F32, 2, sb, XK_ASC_SCALE_BIAS, "W4A8_DYNAMIC", d);
}

static int plan(dsq_xplan *p, size_t i, dsq_diag *d)
{
    const dsq_export_src *s = &p->src[i];
    int quant = s->scheme->weight_bits <= 8;
    if (!quant) {
        /* Biases of quantized linears are float32 in the saver. */
        enum dsq_dtype dt = s->role.role == DSQ_ROLE_LINEAR_BIAS ? DSQ_DTYPE_F32 : dsq_x_keep_dtype(s);
        return dsq_x_add_float(p, i, dt, d);
    }
    /* MTP layer: vllm-ascend wants "FLOAT" entries (modelslim_config.py
     * mc:167-169); KEEP_FLOAT: modules its MLA runs unquantized. */
    if (s->role.mtp || !dsq_x_is_linear(s) || dsq_x_target_float(p, i)) {
        p->xs[i].from_source = !s->role.mtp && dsq_x_is_linear(s);   /* kept, not dequantized */
        return dsq_x_add_float(p, i, float_model_dtype(p), d);
    }
    char *mod = dsq_x_module(s->name);
    if (!mod) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, s->name, -1, "out of memory");
    int rc;
    switch (s->scheme->id) {
    case DSQ_SCHEME_W8A8_DYNAMIC: rc = add_w8_dynamic(p, i, mod, d); break;
    case DSQ_SCHEME_W8A8:
        rc = s->role.role == DSQ_ROLE_EXPERT_LINEAR ? add_w8_dynamic(p, i, mod, d) : add_w8_static(p, i, mod, d);
        break;
    case DSQ_SCHEME_W4A8: rc = add_w4(p, i, mod, d); break;
    default:
        rc = dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                      "ascend has no %s scheme (vllm-ascend loads W8A8_DYNAMIC, W8A8 and routed-expert "
                      "W4A8_DYNAMIC): convert with --scheme w8a8-dynamic, --scheme w8a8 --calib, or "
                      "--recipe deepseek-w4a8", s->scheme->name);
    }
    free(mod);
    return rc;
}

static int check(dsq_xplan *p, dsq_diag *d)
{
    for (size_t i = 0; i < p->nsrc; i++) {
        const dsq_export_src *s = &p->src[i];
        long j = dsq_x_partner(p, i);
        if (j > (long)i && p->xs[i].type && p->xs[j].type && strcmp(p->xs[i].type, p->xs[j].type) != 0)
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                            "fused pair differs: %s is %s but %s is %s; vllm-ascend fuses them and wants "
                            "one type (convert both with the same scheme)", s->name, p->xs[i].type,
                            p->src[j].name, p->xs[j].type);
        if (s->role.role == DSQ_ROLE_EXPERT_LINEAR && p->xs[i].type && !s->role.mtp) {
            for (size_t k = 0; k < i; k++) {
                const dsq_export_src *t = &p->src[k];
                if (t->role.role != DSQ_ROLE_EXPERT_LINEAR || t->role.layer != s->role.layer || t->role.mtp ||
                    !p->xs[k].type)
                    continue;
                if (strcmp(p->xs[k].type, p->xs[i].type) != 0)
                    return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                                    "experts of layer %lld differ (%s is %s, %s is %s): vllm-ascend reads "
                                    "one MoE type per layer from expert 0", (long long)s->role.layer,
                                    t->name, p->xs[k].type, s->name, p->xs[i].type);
                break;
            }
        }
        if (s->role.role == DSQ_ROLE_LINEAR_BIAS && s->scheme->weight_bits > 8) {
            /* A static W8A8 linear folds its bias into quant_bias. */
            char buf[1200];
            size_t n = strlen(s->name);
            if (n > 5 && n < sizeof buf && !strcmp(s->name + n - 5, ".bias")) {
                snprintf(buf, sizeof buf, "%.*s.weight", (int)(n - 5), s->name);
                for (size_t k = 0; k < p->nsrc; k++)
                    if (!strcmp(p->src[k].name, buf) && p->xs[k].type && !strcmp(p->xs[k].type, "W8A8"))
                        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                                        "static W8A8 linear with a bias is not supported by this "
                                        "exporter; use --scheme w8a8-dynamic");
            }
        }
    }
    return DSQ_OK;
}

static int config(dsq_xplan *p, json_object *cfg, dsq_diag *d)
{
    (void)p;
    (void)d;
    json_object_object_del(cfg, "quantization_config");   /* ascendv1.py:234-235 */
    return DSQ_OK;
}

/* QUANT_TYPE_PRIORITY (ascendv1.py:167-181): the highest type used;
 * W4A8_DYNAMIC is never chosen. */
static const char *model_quant_type(const dsq_xplan *p)
{
    static const char *const prio[] = { "W8A8", "W8A8_DYNAMIC" };
    for (size_t k = 0; k < 2; k++)
        for (size_t i = 0; i < p->nxt; i++)
            if (p->xt[i].desc && !strcmp(p->xt[i].desc, prio[k])) return prio[k];
    return "FLOAT";
}

/* quant_model_description.json: every tensor's type, and the model's. */
static int describe(const dsq_xplan *p, const char **name, json_object **out, dsq_diag *d)
{
    *out = NULL;
    json_object *o = json_object_new_object();
    if (!o) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    for (size_t i = 0; i < p->nxt; i++)
        json_object_object_add(o, p->xt[i].name, json_object_new_string(p->xt[i].desc ? p->xt[i].desc : "FLOAT"));
    json_object_object_add(o, "version", json_object_new_string("1.0.0"));
    json_object_object_add(o, "model_quant_type", json_object_new_string(model_quant_type(p)));
    json_object_object_add(o, "metadata", json_object_new_object());
    json_object_object_add(o, "group_size", json_object_new_int(0));
    json_object_object_add(o, "optional", json_object_new_object());
    *name = DSQ_EXPORT_ASCEND_DESC;
    *out = o;
    return DSQ_OK;
}


/* ================= pack ================= */

/* Static W8A8 fused pairs (q_a_proj + kv_a_proj_with_mqa, gate_proj +
 * up_proj) load into ONE input_scale / input_offset slot in vllm-ascend, so
 * both members must carry the same values. */
static int pair_check(dsq_xplan *p, const dsq_xtensor *x, const dsq_qview *v, dsq_diag *d)
{
    static const char *const from[] = { "kv_a_proj_with_mqa.", "up_proj." };
    static const char *const to[] = { "q_a_proj.", "gate_proj." };
    char key[1200];
    snprintf(key, sizeof key, "%s", x->name);
    int paired = 0;
    for (int k = 0; k < 2 && !paired; k++) {
        char *at = strstr(key, from[k]);
        if (at) {
            char tail[1200];
            snprintf(tail, sizeof tail, "%s", at + strlen(from[k]));
            snprintf(at, sizeof key - (size_t)(at - key), "%s%s", to[k], tail);
            paired = 1;
        } else if (strstr(key, to[k])) {
            paired = 1;
        }
    }
    if (!paired) return DSQ_OK;
    for (size_t i = 0; i < p->npair; i++) {
        if (strcmp(p->pair_key[i], key) != 0) continue;
        if (p->pair_scale[i] != v->act_scale || p->pair_off[i] != v->act_offset)
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, x->name, -1,
                            "fused pair members have different static activation parameters "
                            "(input_scale %g / offset %d vs %g / %d): vllm-ascend loads one slot for "
                            "both; use --scheme w8a8-dynamic", (double)v->act_scale, (int)v->act_offset,
                            (double)p->pair_scale[i], (int)p->pair_off[i]);
        return DSQ_OK;
    }
    size_t n = p->npair + 1;
    char **k = realloc(p->pair_key, n * sizeof *k);
    if (k) p->pair_key = k;
    float *sc = realloc(p->pair_scale, n * sizeof *sc);
    if (sc) p->pair_scale = sc;
    int32_t *of = realloc(p->pair_off, n * sizeof *of);
    if (of) p->pair_off = of;
    char *dup = strdup(key);
    if (!k || !sc || !of || !dup) {
        free(dup);
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    p->pair_key[p->npair] = dup;
    p->pair_scale[p->npair] = v->act_scale;
    p->pair_off[p->npair] = v->act_offset;
    p->npair++;
    return DSQ_OK;
}

static int pack(dsq_xplan *p, const dsq_xtensor *x, const dsq_qview *v, uint8_t *dst, dsq_diag *d)
{
    const int64_t N = v->shape.rows, K = v->shape.cols;
    switch (x->kind) {
    case XK_ASC_W4:
    case XK_ASC_SCALE_BIAS: {
        uint8_t *c = malloc(2 * ((size_t)K + 128));
        if (!c) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, x->name, -1, "out of memory");
        const size_t st = (size_t)K + 128;
        for (int64_t n0 = 0; n0 < N; n0 += 2) {
            int rows = N - n0 < 2 ? (int)(N - n0) : 2;
            for (int r = 0; r < rows; r++) dsq_x_row_codes(v, n0 + r, c + (size_t)r * st);
            if (x->kind == XK_ASC_W4) {
                /* byte[j, k] = (q[2j+1, k] << 4) | (q[2j, k] & 0xF), q signed:
                 * the stored nibble is q + 8, so XOR 8 gives q's two's
                 * complement nibble. Checked against msModelSlim
                 * save/utils/pack.py @030d6ea (w4a8_pack_int4: transpose, pair
                 * adjacent N values, transpose back). */
                if (rows == 2) {
                    const uint8_t *lo = c, *hi = lo + st;
                    uint8_t *o = dst + (size_t)(n0 / 2) * (size_t)K;
                    for (int64_t k = 0; k < K; k++) o[k] = (uint8_t)(((hi[k] ^ 8u) << 4) | (lo[k] ^ 8u));
                }
                continue;
            }
            /* scale_bias = 8 * sum_k q[n,k] * s[n], per row ([N,1]) or per
             * sixteenth of K ([N,16]): msModelSlim save/utils/pack.py
             * @030d6ea process_scale reshapes [N, K] to (-1, K / tp_num)
             * with tp_num 16, so part j is columns [j*K/16, (j+1)*K/16) of
             * row n (K % 16 == 0 is checked at plan time). Summed in double
             * and rounded once (torch sums in float32: same to rounding). */
            int64_t parts = x->shape[1], len = K / parts;
            for (int r = 0; r < rows; r++) {
                int64_t n = n0 + r;
                float s = dsq_x_scale_at(v, n, 0);
                const uint8_t *q = c + (size_t)r * st;
                for (int64_t j = 0; j < parts; j++) {
                    double acc = 0;
                    for (int64_t k = j * len; k < (j + 1) * len; k++) acc += (double)((float)((int)q[k] - 8) * s);
                    float f = (float)(8.0 * acc);
                    memcpy(dst + 4 * (size_t)(n * parts + j), &f, 4);
                }
            }
        }
        free(c);
        return DSQ_OK;
    }
    case XK_INPUT_SCALE:
        DSQ_TRY(pair_check(p, x, v, d));
        memcpy(dst, &v->act_scale, 4);
        return DSQ_OK;
    case XK_INPUT_OFFSET: {
        float o = (float)v->act_offset;
        memcpy(dst, &o, 4);
        return DSQ_OK;
    }
    case XK_DEQ_SCALE:
        /* The engine's (act_scale * s_w[n]), one float multiply; for an fp16
         * model vllm-ascend wants the float32 bits widened to int64. */
        for (int64_t n = 0; n < N; n++) {
            float f = v->act_scale * dsq_x_scale_at(v, n, 0);
            if (x->dtype == DSQ_DTYPE_I64) {
                int32_t b;
                memcpy(&b, &f, 4);
                int64_t w = b;
                memcpy(dst + 8 * n, &w, 8);
            } else {
                memcpy(dst + 4 * n, &f, 4);
            }
        }
        return DSQ_OK;
    case XK_QUANT_BIAS:
        for (int64_t n = 0; n < N; n++) {
            int32_t b = -v->act_offset * v->rowsum[n];
            memcpy(dst + 4 * n, &b, 4);
        }
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

/* [N, 1] all-zero weight_offset (Ascend: never applied by the kernels). */
static int zero_offsets(const rd *r)
{
    const dsq_st_tensor *t;
    DSQ_TRY(dsq_xr_need(r, "weight_offset", DSQ_DTYPE_F32, r->N, 1, 0, &t));
    float *v;
    DSQ_TRY(dsq_xr_floats(r, t, &v));
    for (uint64_t i = 0; i < t->numel; i++)
        if (v[i] != 0.0f) {
            double x = v[i];
            free(v);
            return dsq_xr_bad_value(r, t, i, "weight_offset must be 0 (symmetric; vllm-ascend never applies it)", x);
        }
    free(v);
    return DSQ_OK;
}
static int unpack_w8a8_dynamic(const rd *r, qb *b, float **bias)
{
    (void)bias;
    const dsq_st_tensor *w, *s;
    DSQ_TRY(dsq_xr_need(r, "weight", DSQ_DTYPE_I8, r->N, r->K, 0, &w));
    DSQ_TRY(dsq_xr_need(r, "weight_scale", DSQ_DTYPE_F32, r->N, 1, 0, &s));
    DSQ_TRY(zero_offsets(r));
    float *sv;
    DSQ_TRY(dsq_xr_floats(r, s, &sv));
    int rc = dsq_xr_positive_scales(r, s, sv);
    if (rc == DSQ_OK) rc = dsq_xr_qb_new(r, DSQ_SCHEME_W8A8_DYNAMIC, 0, b);
    if (rc == DSQ_OK) {
        for (int64_t n = 0; n < r->N; n++) {
            memcpy(b->p + b->lay.w_off + (size_t)n * b->lay.row_bytes, w->data + (size_t)n * (size_t)r->K, (size_t)r->K);
            put_scale(b, n, 0, sv[n]);
        }
        dsq_xr_put_rowsums(b);
    }
    free(sv);
    return rc;
}

/* The f32 s with fl(a * s) == target nearest target / a (AscendV1 W8A8:
 * deq_scale = input_scale * weight_scale was rounded to f32 by the saver). */
static float unfold_scale(float a, float target)
{
    float s = target / a, best = s;
    for (int i = 0; i < 4; i++) {
        float up = s, dn = s;
        for (int k = 0; k < i; k++) { up = nextafterf(up, INFINITY); dn = nextafterf(dn, 0.0f); }
        if (a * up == target) return up;
        if (a * dn == target) return dn;
    }
    return best;
}

static int unpack_w8a8(const rd *r, qb *b, float **bias)
{
    const dsq_st_tensor *w, *is, *io, *dq, *qbias;
    DSQ_TRY(dsq_xr_need(r, "weight", DSQ_DTYPE_I8, r->N, r->K, 0, &w));
    DSQ_TRY(dsq_xr_need(r, "input_scale", ANY_FLOAT, 1, -1, 0, &is));
    DSQ_TRY(dsq_xr_need(r, "input_offset", ANY_FLOAT, 1, -1, 0, &io));
    DSQ_TRY(dsq_xr_need(r, "quant_bias", DSQ_DTYPE_I32, r->N, -1, 0, &qbias));
    char dn[600];
    snprintf(dn, sizeof dn, "%s.deq_scale", r->module);
    dq = dsq_st_find(r->st, dn);
    /* float32 for bf16 models, int64 holding the f32 bits widened from int32
     * for fp16 models (utils/deqscale.py); vllm-ascend allocates the one of
     * the model's torch_dtype (m/w8a8_static.py:80-83) and would convert the
     * other by value, so with a known torch_dtype only that one is read */
    const char *tdt = dsq_export_torch_dtype(r->x);
    enum dsq_dtype want = dq && dq->dtype == DSQ_DTYPE_I64 ? DSQ_DTYPE_I64 : DSQ_DTYPE_F32;
    if (!strcmp(tdt, "bfloat16")) want = DSQ_DTYPE_F32;
    else if (!strcmp(tdt, "float16")) want = DSQ_DTYPE_I64;
    if (dq && dq->dtype != want)
        return dsq_fail(r->d, DSQ_ERR_FORMAT, dsq_xr_file_of(r, dq), dn, (int64_t)dq->file_offset,
                        "deq_scale is %s but config.json torch_dtype %s needs %s (float32 for bfloat16, int64 "
                        "for float16 models)", dsq_dtype_name(dq->dtype), tdt,
                        want == DSQ_DTYPE_I64 ? "int64" : "float32");
    DSQ_TRY(dsq_xr_need(r, "deq_scale", want, r->N, -1, 0, &dq));
    float in_s, in_o;
    float *tmp;
    DSQ_TRY(dsq_xr_floats(r, is, &tmp)); in_s = tmp[0]; free(tmp);
    DSQ_TRY(dsq_xr_floats(r, io, &tmp)); in_o = tmp[0]; free(tmp);
    if (!isfinite(in_s) || !(in_s > 0.0f)) return dsq_xr_bad_value(r, is, 0, "input_scale must be finite and > 0", in_s);
    if (!(in_o == rintf(in_o)) || in_o < -128.0f || in_o > 127.0f)
        return dsq_xr_bad_value(r, io, 0, "input_offset must be a whole number in [-128, 127] (loaded as int8)", in_o);
    float *deq = malloc((size_t)r->N * sizeof *deq);
    if (!deq) return DSQ_ERR_NOMEM;
    int rc = DSQ_OK;
    for (int64_t n = 0; n < r->N && rc == DSQ_OK; n++) {
        if (dq->dtype == DSQ_DTYPE_I64) {
            uint64_t v = dsq_load_u64le(dq->data + 8 * (size_t)n);
            if ((int64_t)v != (int64_t)(int32_t)(uint32_t)v)
                rc = dsq_xr_bad_value(r, dq, (uint64_t)n, "int64 deq_scale must be an int32 f32 bit pattern, sign extended",
                               (double)(int64_t)v);
            deq[n] = dsq_bits_f32((uint32_t)v);
        } else
            deq[n] = dsq_bits_f32(dsq_load_u32le(dq->data + 4 * (size_t)n));
        if (rc == DSQ_OK && (!isfinite(deq[n]) || !(deq[n] > 0.0f)))
            rc = dsq_xr_bad_value(r, dq, (uint64_t)n, "deq_scale must be finite and > 0", deq[n]);
    }
    if (rc == DSQ_OK) rc = dsq_xr_qb_new(r, DSQ_SCHEME_W8A8, 0, b);
    if (rc < 0) { free(deq); return rc; }
    int any = 0;
    float *bv = malloc((size_t)r->N * sizeof *bv);
    if (!bv) { free(deq); return DSQ_ERR_NOMEM; }
    for (int64_t n = 0; n < r->N; n++) {
        memcpy(b->p + b->lay.w_off + (size_t)n * b->lay.row_bytes, w->data + (size_t)n * (size_t)r->K, (size_t)r->K);
        put_scale(b, n, 0, unfold_scale(in_s, deq[n]));
        int64_t rs = 0;
        for (int64_t k = 0; k < r->K; k++) rs += i8_at(w, (uint64_t)(n * r->K + k));
        /* quant_bias = round(bias/deq) - input_offset * sum_k q  (ascendv1.py:292-298) */
        int64_t bi = (int64_t)i32_at(qbias, (uint64_t)n) + (int64_t)in_o * rs;
        bv[n] = (float)((double)bi * (double)deq[n]);
        any |= bi != 0;
    }
    dsq_xr_put_rowsums(b);
    dsq_qblob_write_header(b->p, b->sc, &b->shape, &b->lay, DSQ_QBLOB_F_ACT_STATIC, in_s, (int32_t)in_o);
    free(deq);
    if (any) *bias = bv;
    else free(bv);
    return DSQ_OK;
}

/* scale_bias layout by module name (msModelSlim utils/pack.py process_scale) */
static int sb_chunks(const char *m)
{
    static const char *const per_row[] = { "up_proj", "gate_proj", "q_proj", "k_proj", "v_proj", "w1", "w3" };
    static const char *const split[] = { "down_proj", "o_proj", "w2" };
    const char *leaf = strrchr(m, '.');
    leaf = leaf ? leaf + 1 : m;
    for (size_t i = 0; i < sizeof per_row / sizeof *per_row; i++) if (strstr(leaf, per_row[i])) return 1;
    for (size_t i = 0; i < sizeof split / sizeof *split; i++) if (strstr(leaf, split[i])) return 16;
    return 0;
}

static int unpack_w4a8(const rd *r, qb *b, float **bias)
{
    (void)bias;
    const dsq_st_tensor *w, *s, *sb;
    int chunks = sb_chunks(r->module);
    if (!chunks)
        return dsq_fail(r->d, DSQ_ERR_UNSUPPORTED, dsq_export_desc_file(r->x), r->module, -1,
                        "W4A8_DYNAMIC is for MoE experts (gate/up/down_proj) only");
    if (r->N % 2 || (chunks == 16 && r->K % 16))
        return dsq_fail(r->d, DSQ_ERR_SHAPE, dsq_export_desc_file(r->x), r->module, -1,
                        "W4A8 needs an even out_features (and in_features %% 16 == 0 for down_proj)");
    DSQ_TRY(dsq_xr_need(r, "weight", DSQ_DTYPE_I8, r->N / 2, r->K, 0, &w));
    DSQ_TRY(dsq_xr_need(r, "weight_scale", DSQ_DTYPE_F32, r->N, 1, 0, &s));
    DSQ_TRY(dsq_xr_need(r, "scale_bias", DSQ_DTYPE_F32, r->N, chunks, 0, &sb));
    DSQ_TRY(zero_offsets(r));
    float *sv = NULL, *sbv = NULL;
    int rc = dsq_xr_floats(r, s, &sv);
    if (rc == DSQ_OK) rc = dsq_xr_positive_scales(r, s, sv);
    if (rc == DSQ_OK) rc = dsq_xr_floats(r, sb, &sbv);
    if (rc == DSQ_OK) rc = dsq_xr_qb_new(r, DSQ_SCHEME_W4A8, 0, b);
    const int64_t csz = r->K / chunks;
    for (int64_t n = 0; n < r->N && rc == DSQ_OK; n++) {
        put_scale(b, n, 0, sv[n]);
        double sum = 0, mag = 0;
        for (int64_t k = 0; k < r->K && rc == DSQ_OK; k++) {
            uint8_t byte = w->data[(size_t)(n / 2) * (size_t)r->K + (size_t)k];
            /* low nibble = even row, high nibble = odd row, two's complement */
            int q = (n & 1) ? ((int8_t)byte >> 4) : ((int8_t)(uint8_t)(byte << 4) >> 4);
            put_u4(b, n, k, (unsigned)(q + 8));
            sum += (double)q * sv[n];
            mag += fabs((double)q * sv[n]);
            if ((k + 1) % csz == 0) {
                double want = 8.0 * sum, got = sbv[n * chunks + k / csz];
                /* the saver sums q*s in float32: allow its rounding */
                if (!(fabs(got - want) <= 8.0 * mag * 1e-5 + 1e-30))
                    rc = dsq_fail(r->d, DSQ_ERR_FORMAT, dsq_xr_file_of(r, sb), sb->name,
                                  (int64_t)(sb->file_offset + (uint64_t)(n * chunks + k / csz) * 4),
                                  "scale_bias[%lld][%lld] = %g but 8*sum(q*s) of the unpacked weight is %g "
                                  "(wrong nibble order or weight/scale mismatch)",
                                  (long long)n, (long long)(k / csz), got, want);
                sum = mag = 0;
            }
        }
    }
    free(sv);
    free(sbv);
    return rc;
}

/* W4A8_DYNAMIC weight: int4 pairs along N, [N/2, K] */
static void shape_w4(const dsq_st_model *st, const char *module, const dsq_st_tensor *t, int64_t *rows,
                     int64_t *cols)
{
    (void)st;
    (void)module;
    *rows = 2 * t->shape[0];
    *cols = t->shape[1];
}

/* kv_b_proj must be unquantized (vllm-ascend mla_v1.py:908); the V3.2
 * indexer's wk and weights_proj are built without a quantization config
 * (dsq_x_indexer_float_only). */
static const char *const KEEP_FLOAT[] = { ".kv_b_proj.weight", ".indexer.wk.weight", ".indexer.weights_proj.weight",
                                          NULL };

static const dsq_xreader READERS[] = {
    { DSQ_EQ_ASCEND_W8A8_DYNAMIC, "weight", unpack_w8a8_dynamic, NULL },
    { DSQ_EQ_ASCEND_W8A8,         "weight", unpack_w8a8,         NULL },
    { DSQ_EQ_ASCEND_W4A8_DYNAMIC, "weight", unpack_w4a8,         shape_w4 },
    { DSQ_EQ_FLOAT, NULL, NULL, NULL }
};

static const uint32_t SCHEMES[] = { DSQ_SCHEME_W8A8_DYNAMIC, DSQ_SCHEME_W8A8, DSQ_SCHEME_W4A8, XFMT_SCHEMES_END };

const dsq_xfmt dsq_xfmt_ascend = {
    .name = "ascend",
    .kind = DSQ_EXPORT_ASCEND,
    .weights_base = "quant_model_weights",
    .default_shard = 4000000000ull,   /* part_file_size 4 GB (ascendv1.md) */
    .schemes = SCHEMES,
    .desc_file = DSQ_EXPORT_ASCEND_DESC,
    .quant_method = NULL,
    .parse = parse,
    .spec_of = spec_of,
    .readers = READERS,
    .keep_float = KEEP_FLOAT,
    .plan = plan,
    .check = check,
    .pack = pack,
    .row_local = row_local,
    .config = config,
    .describe = describe,
};
