/* export_ascend.c - msModelSlim "AscendV1" for vllm-ascend / MindIE
 * (formats.md 4.1-4.6): quant_model_weights*.safetensors,
 * quant_model_description.json with an entry for every tensor, config.json
 * without quantization_config.
 *
 *   w8a8-dynamic           -> W8A8_DYNAMIC (linears and routed experts)
 *   w8a8 (static)          -> W8A8 for linears; routed experts W8A8_DYNAMIC
 *                             (vllm-ascend has no static MoE scheme; the
 *                             weight codes and scales are the same)
 *   w4a8, per channel      -> W4A8_DYNAMIC, routed experts only
 *   kv_b_proj, embeddings, lm_head, router, MTP layer -> "FLOAT" (a
 *                             quantized one is dequantized to the model dtype)
 * Refused: w4a8 elsewhere (use --recipe deepseek-w4a8), w4a8 with a group
 * size, awq-w4a16, fused pairs / a layer's experts of different types. */
#include "export_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static enum dsq_dtype float_model_dtype(const dsq_export *ex) { return ex->model_dtype; }

static int add_w8_dynamic(dsq_export *ex, size_t i, const char *mod, dsq_diag *d)
{
    const dsq_export_src *s = &ex->src[i];
    int64_t N = s->qshape.rows, K = s->qshape.cols, w[2] = { N, K }, c[2] = { N, 1 };
    ex->xs[i].type = "W8A8_DYNAMIC";
    ex->xs[i].quantized = 1;
    DSQ_TRY(dsq_x_add(ex, i, mod, ".weight", DSQ_DTYPE_I8, 2, w, XK_I8, "W8A8_DYNAMIC", d));
    DSQ_TRY(dsq_x_add(ex, i, mod, ".weight_scale", DSQ_DTYPE_F32, 2, c, XK_SCALE, "W8A8_DYNAMIC", d));
    return dsq_x_add(ex, i, mod, ".weight_offset", DSQ_DTYPE_F32, 2, c, XK_ZEROS_F32, "W8A8_DYNAMIC", d);
}

static int add_w8_static(dsq_export *ex, size_t i, const char *mod, dsq_diag *d)
{
    const dsq_export_src *s = &ex->src[i];
    int64_t N = s->qshape.rows, K = s->qshape.cols, w[2] = { N, K }, one[1] = { 1 }, n1[1] = { N };
    enum dsq_dtype dq;
    if (ex->model_dtype == DSQ_DTYPE_BF16) dq = DSQ_DTYPE_F32;
    else if (ex->model_dtype == DSQ_DTYPE_F16) dq = DSQ_DTYPE_I64;
    else
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                        "static W8A8 needs a bfloat16 or float16 model (config torch_dtype): vllm-ascend "
                        "has no deq_scale for other dtypes; use --scheme w8a8-dynamic");
    ex->xs[i].type = "W8A8";
    ex->xs[i].quantized = 1;
    DSQ_TRY(dsq_x_add(ex, i, mod, ".weight", DSQ_DTYPE_I8, 2, w, XK_I8, "W8A8", d));
    DSQ_TRY(dsq_x_add(ex, i, mod, ".input_scale", DSQ_DTYPE_F32, 1, one, XK_INPUT_SCALE, "W8A8", d));
    DSQ_TRY(dsq_x_add(ex, i, mod, ".input_offset", DSQ_DTYPE_F32, 1, one, XK_INPUT_OFFSET, "W8A8", d));
    DSQ_TRY(dsq_x_add(ex, i, mod, ".deq_scale", dq, 1, n1, XK_DEQ_SCALE, "W8A8", d));
    return dsq_x_add(ex, i, mod, ".quant_bias", DSQ_DTYPE_I32, 1, n1, XK_QUANT_BIAS, "W8A8", d);
}

static int add_w4(dsq_export *ex, size_t i, const char *mod, dsq_diag *d)
{
    const dsq_export_src *s = &ex->src[i];
    int64_t N = s->qshape.rows, K = s->qshape.cols;
    if (s->role.role != DSQ_ROLE_EXPERT_LINEAR)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                        "vllm-ascend loads W4A8_DYNAMIC for routed experts only (formats.md 4.6); this "
                        "%s is w4a8: use --recipe deepseek-w4a8 (w8a8-dynamic on attention, dense and "
                        "shared-expert linears, w4a8 on routed experts)", dsq_role_name(s->role.role));
    if (s->qshape.group_size != 0)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                        "vllm-ascend's W4A8_DYNAMIC takes per-channel scales only (group_size 0), this "
                        "tensor has group size %d: convert with --group-size 0", (int)s->qshape.group_size);
    int down = ends_with(mod, "down_proj") || ends_with(mod, "o_proj") || ends_with(mod, ".w2");
    int gu = ends_with(mod, "gate_proj") || ends_with(mod, "up_proj") || ends_with(mod, ".w1") ||
             ends_with(mod, ".w3");
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
    ex->xs[i].type = "W4A8_DYNAMIC";
    ex->xs[i].quantized = 1;
    DSQ_TRY(dsq_x_add(ex, i, mod, ".weight", DSQ_DTYPE_I8, 2, w, XK_ASC_W4, "W4A8_DYNAMIC", d));
    DSQ_TRY(dsq_x_add(ex, i, mod, ".weight_scale", DSQ_DTYPE_F32, 2, c, XK_SCALE, "W4A8_DYNAMIC", d));
    DSQ_TRY(dsq_x_add(ex, i, mod, ".weight_offset", DSQ_DTYPE_F32, 2, c, XK_ZEROS_F32, "W4A8_DYNAMIC", d));
    return dsq_x_add(ex, i, mod, ".scale_bias", DSQ_DTYPE_F32, 2, sb, XK_ASC_SCALE_BIAS, "W4A8_DYNAMIC", d);
}

static int plan(dsq_export *ex, size_t i, dsq_diag *d)
{
    const dsq_export_src *s = &ex->src[i];
    int quant = s->scheme->weight_bits <= 8;
    if (!quant) {
        /* Biases of quantized linears are float32 in the saver. */
        enum dsq_dtype dt = s->role.role == DSQ_ROLE_LINEAR_BIAS ? DSQ_DTYPE_F32 : dsq_x_keep_dtype(s);
        return dsq_x_add_float(ex, i, dt, d);
    }
    /* MTP layer: vllm-ascend wants "FLOAT" entries (modelslim_config.py
     * mc:167-169); kv_b_proj must be unquantized (mla_v1.py:908). */
    if (s->role.mtp || !dsq_x_is_linear(s) || ends_with(s->name, ".kv_b_proj.weight"))
        return dsq_x_add_float(ex, i, float_model_dtype(ex), d);
    char *mod = dsq_x_module(s->name);
    if (!mod) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, s->name, -1, "out of memory");
    int rc;
    switch (s->scheme->id) {
    case DSQ_SCHEME_W8A8_DYNAMIC: rc = add_w8_dynamic(ex, i, mod, d); break;
    case DSQ_SCHEME_W8A8:
        rc = s->role.role == DSQ_ROLE_EXPERT_LINEAR ? add_w8_dynamic(ex, i, mod, d) : add_w8_static(ex, i, mod, d);
        break;
    case DSQ_SCHEME_W4A8: rc = add_w4(ex, i, mod, d); break;
    default:
        rc = dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                      "ascend has no %s scheme (vllm-ascend loads W8A8_DYNAMIC, W8A8 and routed-expert "
                      "W4A8_DYNAMIC): convert with --scheme w8a8-dynamic, --scheme w8a8 --calib, or "
                      "--recipe deepseek-w4a8", s->scheme->name);
    }
    free(mod);
    return rc;
}

static int check(dsq_export *ex, dsq_diag *d)
{
    for (size_t i = 0; i < ex->nsrc; i++) {
        const dsq_export_src *s = &ex->src[i];
        long j = dsq_x_partner(ex, i);
        if (j > (long)i && ex->xs[i].type && ex->xs[j].type && strcmp(ex->xs[i].type, ex->xs[j].type) != 0)
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                            "fused pair differs: %s is %s but %s is %s; vllm-ascend fuses them and wants "
                            "one type (convert both with the same scheme)", s->name, ex->xs[i].type,
                            ex->src[j].name, ex->xs[j].type);
        if (s->role.role == DSQ_ROLE_EXPERT_LINEAR && ex->xs[i].type && !s->role.mtp) {
            for (size_t k = 0; k < i; k++) {
                const dsq_export_src *t = &ex->src[k];
                if (t->role.role != DSQ_ROLE_EXPERT_LINEAR || t->role.layer != s->role.layer || t->role.mtp ||
                    !ex->xs[k].type)
                    continue;
                if (strcmp(ex->xs[k].type, ex->xs[i].type) != 0)
                    return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                                    "experts of layer %lld differ (%s is %s, %s is %s): vllm-ascend reads "
                                    "one MoE type per layer from expert 0", (long long)s->role.layer,
                                    t->name, ex->xs[k].type, s->name, ex->xs[i].type);
                break;
            }
        }
        if (s->role.role == DSQ_ROLE_LINEAR_BIAS && s->scheme->weight_bits > 8) {
            /* A static W8A8 linear folds its bias into quant_bias. */
            char buf[1200];
            size_t n = strlen(s->name);
            if (n > 5 && n < sizeof buf && !strcmp(s->name + n - 5, ".bias")) {
                snprintf(buf, sizeof buf, "%.*s.weight", (int)(n - 5), s->name);
                for (size_t k = 0; k < ex->nsrc; k++)
                    if (!strcmp(ex->src[k].name, buf) && ex->xs[k].type && !strcmp(ex->xs[k].type, "W8A8"))
                        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                                        "static W8A8 linear with a bias is not supported by this "
                                        "exporter; use --scheme w8a8-dynamic");
            }
        }
    }
    return DSQ_OK;
}

static int config(dsq_export *ex, json_object *cfg, dsq_diag *d)
{
    (void)ex;
    (void)d;
    json_object_object_del(cfg, "quantization_config");   /* ascendv1.py:234-235 */
    return DSQ_OK;
}

/* QUANT_TYPE_PRIORITY (ascendv1.py:167-181): the highest type used;
 * W4A8_DYNAMIC is never chosen. */
static const char *model_quant_type(const dsq_export *ex)
{
    static const char *const prio[] = { "W8A8", "W8A8_DYNAMIC" };
    for (size_t p = 0; p < 2; p++)
        for (size_t i = 0; i < ex->nxt; i++)
            if (ex->xt[i].desc && !strcmp(ex->xt[i].desc, prio[p])) return prio[p];
    return "FLOAT";
}

static int extra(dsq_export *ex, dsq_diag *d)
{
    json_object *o = json_object_new_object();
    if (!o) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    for (size_t i = 0; i < ex->nxt; i++)
        json_object_object_add(o, ex->xt[i].name, json_object_new_string(ex->xt[i].desc ? ex->xt[i].desc : "FLOAT"));
    json_object_object_add(o, "version", json_object_new_string("1.0.0"));
    json_object_object_add(o, "model_quant_type", json_object_new_string(model_quant_type(ex)));
    json_object_object_add(o, "metadata", json_object_new_object());
    json_object_object_add(o, "group_size", json_object_new_int(0));
    json_object_object_add(o, "optional", json_object_new_object());
    int rc = dsq_x_write_json(ex, "quant_model_description.json", o, 1, d);
    json_object_put(o);
    return rc;
}

const dsq_export_format dsq_xfmt_ascend = {
    .name = "ascend",
    .weights_base = "quant_model_weights",
    .default_shard = 4000000000ull,   /* part_file_size 4 GB (ascendv1.md) */
    .plan = plan,
    .check = check,
    .config = config,
    .extra = extra,
};
