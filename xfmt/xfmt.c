/* xfmt.c - the table of serving formats, the plan every format fills, and
 * the packings formats share (float, int8 codes, scales, zero offsets). A
 * format's own packings are in its file (see xfmt.h). */
#include "xfmt_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const dsq_xfmt *const g_table[] = { &dsq_xfmt_ascend, &dsq_xfmt_awq, &dsq_xfmt_ct, NULL };

const dsq_xfmt *const *dsq_xfmt_table(void) { return g_table; }

const dsq_xfmt *dsq_xfmt_find(const char *name)
{
    for (size_t i = 0; name && g_table[i]; i++)
        if (!strcmp(g_table[i]->name, name)) return g_table[i];
    return NULL;
}

const dsq_xfmt *dsq_xfmt_of_kind(enum dsq_export_kind k)
{
    for (size_t i = 0; g_table[i]; i++)
        if (g_table[i]->kind == k) return g_table[i];
    return NULL;
}

/* ================= plan helpers ================= */

int dsq_x_add(dsq_xplan *p, size_t i, const char *base, const char *suffix, enum dsq_dtype dt, int ndim,
              const int64_t *shape, int kind, const char *desc, dsq_diag *d)
{
    if (p->nxt == p->capxt) {
        size_t nc = p->capxt ? p->capxt * 2 : 256;
        dsq_xtensor *nv = realloc(p->xt, nc * sizeof *nv);
        if (!nv) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        p->xt = nv;
        p->capxt = nc;
    }
    dsq_xtensor *x = &p->xt[p->nxt];
    memset(x, 0, sizeof *x);
    size_t n = strlen(base) + strlen(suffix) + 1;
    x->name = malloc(n);
    if (!x->name) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    snprintf(x->name, n, "%s%s", base, suffix);
    x->dtype = dt;
    x->ndim = ndim;
    uint64_t numel = 1;
    for (int k = 0; k < ndim; k++) {
        x->shape[k] = shape[k];
        numel *= (uint64_t)shape[k];
    }
    x->nbytes = numel * dsq_dtype_bits(dt) / 8;
    x->kind = kind;
    x->desc = desc;
    x->src = i;
    if (kind == XK_SCALE) p->xs[i].scale_dtype = dt;
    if (!p->xs[i].count) p->xs[i].first = p->nxt;
    p->xs[i].count++;
    p->nxt++;
    return DSQ_OK;
}

enum dsq_dtype dsq_x_keep_dtype(const dsq_export_src *s)
{
    switch (s->src_dtype) {
    case DSQ_DTYPE_F16: case DSQ_DTYPE_BF16: case DSQ_DTYPE_F32: return s->src_dtype;
    case DSQ_DTYPE_F64: return DSQ_DTYPE_F32;
    default: break;
    }
    /* FP8 (and unknown) sources: what the blob holds (bf16 for FP8). */
    return s->scheme->id == DSQ_SCHEME_F32 ? DSQ_DTYPE_F32 : DSQ_DTYPE_BF16;
}

int dsq_x_add_float(dsq_xplan *p, size_t i, enum dsq_dtype dt, dsq_diag *d)
{
    const dsq_export_src *s = &p->src[i];
    p->xs[i].type = "FLOAT";
    if (s->scheme->weight_bits <= 8) {
        p->xs[i].dequant = 1;
        p->dequantized++;
    }
    return dsq_x_add(p, i, s->name, "", dt, s->ndim, s->shape, XK_FLOAT, "FLOAT", d);
}

char *dsq_x_module(const char *name)
{
    size_t n = strlen(name);
    if (n < 8 || strcmp(name + n - 7, ".weight") != 0) return NULL;
    return strndup(name, n - 7);
}

int dsq_x_is_linear(const dsq_export_src *s)
{
    uint32_t r = s->role.role;
    return s->ndim == 2 && (r == DSQ_ROLE_ATTN_LINEAR || r == DSQ_ROLE_MLP_LINEAR ||
                            r == DSQ_ROLE_EXPERT_LINEAR || r == DSQ_ROLE_SHARED_EXPERT_LINEAR ||
                            r == DSQ_ROLE_INDEXER_LINEAR);
}

int dsq_x_ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* The V3.2 indexer's wk and weights_proj: vLLM fuses them into one linear
 * built without a quantization config (wk_weights_proj, quant_config=None),
 * and vllm-ascend's SFA runs them in bf16, so every target holds them in
 * float; wq_b takes the target's quantization config. */
int dsq_x_indexer_float_only(const char *name)
{
    return dsq_x_ends_with(name, ".indexer.wk.weight") || dsq_x_ends_with(name, ".indexer.weights_proj.weight");
}

int dsq_x_refuse_quantized_indexer(const dsq_export_src *s, dsq_diag *d)
{
    return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                    "vLLM builds the V3.2 indexer's wk / weights_proj unquantized: keep them float "
                    "(the default; drop the --scheme-for that quantizes them)");
}

int dsq_x_target_float(const dsq_xplan *p, size_t i)
{
    for (const char *const *k = p->f->keep_float; k && *k; k++)
        if (dsq_x_ends_with(p->src[i].name, *k)) return 1;
    return 0;
}

long dsq_x_partner(const dsq_xplan *p, size_t i)
{
    static const char *const pairs[][2] = {
        { ".q_a_proj.weight", ".kv_a_proj_with_mqa.weight" },
        { ".gate_proj.weight", ".up_proj.weight" },
    };
    const char *name = p->src[i].name;
    for (size_t k = 0; k < 2; k++)
        for (int side = 0; side < 2; side++) {
            const char *a = pairs[k][side], *b = pairs[k][!side];
            if (!dsq_x_ends_with(name, a)) continue;
            size_t stem = strlen(name) - strlen(a);
            char buf[1200];
            if (stem + strlen(b) + 1 > sizeof buf) return -1;
            memcpy(buf, name, stem);
            strcpy(buf + stem, b);
            for (size_t j = 0; j < p->nsrc; j++)
                if (!strcmp(p->src[j].name, buf)) return (long)j;
            return -1;
        }
    return -1;
}

int dsq_x_check_experts(const dsq_xplan *p, const char *engine, dsq_diag *d)
{
    for (size_t i = 0; i < p->nsrc; i++) {
        const dsq_export_src *s = &p->src[i];
        if (s->role.role != DSQ_ROLE_EXPERT_LINEAR || s->role.mtp || p->xs[i].drop) continue;
        for (size_t k = 0; k < i; k++) {
            const dsq_export_src *t = &p->src[k];
            if (t->role.role != DSQ_ROLE_EXPERT_LINEAR || t->role.mtp || p->xs[k].drop ||
                t->role.layer != s->role.layer)
                continue;
            const char *a = p->xs[k].quantized ? (p->xs[k].type ? p->xs[k].type : "quantized") : "float";
            const char *b = p->xs[i].quantized ? (p->xs[i].type ? p->xs[i].type : "quantized") : "float";
            int ga = p->xs[k].quantized ? t->qshape.group_size : 0;
            int gb = p->xs[i].quantized ? s->qshape.group_size : 0;
            if (strcmp(a, b) != 0 || ga != gb)
                return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, s->name, -1,
                                "routed experts of layer %lld differ (%s is %s, group %d; %s is %s, group %d): "
                                "%s loads a layer's experts as one fused MoE with one scheme; convert or "
                                "--keep all of them alike", (long long)s->role.layer, t->name, a, ga, s->name, b,
                                gb, engine);
            break;
        }
    }
    return DSQ_OK;
}

/* ================= the plan ================= */

int dsq_xplan_make(dsq_xplan *p, const dsq_xfmt *f, const dsq_export_src *src, size_t n, json_object *meta,
                   dsq_diag *d)
{
    memset(p, 0, sizeof *p);
    p->f = f;
    p->src = src;
    p->nsrc = n;
    p->meta = meta;
    p->awq_group = -2;
    p->model_dtype = DSQ_DTYPE_BF16;
    json_object *cfg, *td;
    if (meta && json_object_object_get_ex(meta, "config", &cfg) && json_object_is_type(cfg, json_type_object) &&
        json_object_object_get_ex(cfg, "torch_dtype", &td) && json_object_is_type(td, json_type_string)) {
        const char *s = json_object_get_string(td);
        if (!strcmp(s, "float16")) p->model_dtype = DSQ_DTYPE_F16;
        else if (!strcmp(s, "float32")) p->model_dtype = DSQ_DTYPE_F32;
    }
    p->xs = calloc(n ? n : 1, sizeof *p->xs);
    if (!p->xs) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    for (size_t i = 0; i < n; i++) {
        DSQ_TRY(f->plan(p, i, d));
        if (p->xs[i].drop) p->dropped++;
    }
    return f->check(p, d);
}

void dsq_xplan_free(dsq_xplan *p)
{
    for (size_t i = 0; i < p->nxt; i++) free(p->xt[i].name);
    free(p->xt);
    free(p->xs);
    for (size_t i = 0; i < p->npair; i++) free(p->pair_key[i]);
    free(p->pair_key);
    free(p->pair_scale);
    free(p->pair_off);
    free(p->fbuf);
    memset(p, 0, sizeof *p);
}

int dsq_xplan_rowwise(const dsq_xplan *p, size_t i)
{
    const dsq_xsrc *xs = &p->xs[i];
    for (size_t k = 0; k < xs->count; k++) {
        const dsq_xtensor *x = &p->xt[xs->first + k];
        int local = x->kind < XK_FORMAT ? 1 : p->f->row_local && p->f->row_local(x->kind);
        if (!local) return 0;
        if (x->ndim < 1 || x->shape[0] != p->src[i].qshape.rows) return 0;
    }
    return 1;
}

/* ================= shared packings ================= */

void dsq_x_row_codes(const dsq_qview *v, int64_t n, uint8_t *out)
{
    const uint8_t *row = v->w + (size_t)n * v->layout.row_bytes;
    int64_t K = v->shape.cols;
    for (int64_t b = 0; b * 128 < K; b++) {
        const uint8_t *src = row + b * 64;
        uint8_t *lo = out + b * 128, *hi = lo + 64;
        int64_t left = K - b * 128;
        int nl = left < 64 ? (int)left : 64, nh = left > 64 ? (int)(left - 64 < 64 ? left - 64 : 64) : 0;
        for (int j = 0; j < nl; j++) lo[j] = src[j] & 0xF;
        for (int j = 0; j < nh; j++) hi[j] = src[j] >> 4;
    }
}

static void note_rounding(dsq_xplan *p, float s, float r)
{
    if (s > 0) {
        double rel = fabs((double)r - (double)s) / (double)s;
        if (rel > p->max_scale_rel_rounding) p->max_scale_rel_rounding = rel;
    }
}

int dsq_x_put_float(dsq_xplan *p, enum dsq_dtype dt, uint8_t *dst, size_t i, float f, int is_scale)
{
    if (dt == DSQ_DTYPE_F32) {
        memcpy(dst + 4 * i, &f, 4);
    } else if (dt == DSQ_DTYPE_BF16) {
        uint16_t h = dsq_f32_to_bf16(f);
        memcpy(dst + 2 * i, &h, 2);
        if (is_scale) note_rounding(p, f, dsq_bf16_to_f32(h));
    } else {
        uint16_t h = dsq_f32_to_f16(f);
        if (isfinite(f) && (h & 0x7c00u) == 0x7c00u) return -1;
        memcpy(dst + 2 * i, &h, 2);
        if (is_scale) note_rounding(p, f, dsq_f16_to_f32(h));
    }
    return 0;
}

int dsq_x_scale_overflow(const dsq_xtensor *x, int64_t n, int64_t g, float s, dsq_diag *d)
{
    return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, x->name, -1,
                    "scale %g (row %lld, group %lld) does not fit float16 (max 65504): "
                    "this weight cannot be stored with F16 scales", (double)s, (long long)n, (long long)g);
}

static int pack_float(dsq_xplan *p, const dsq_xtensor *x, const dsq_qview *v, uint8_t *dst, dsq_diag *d)
{
    int64_t rows = v->shape.rows, cols = v->shape.cols;
    int64_t chunk = (int64_t)((1u << 20) / (uint64_t)cols);
    if (chunk < 1) chunk = 1;
    size_t need = (size_t)(chunk < rows ? chunk : rows) * (size_t)cols;
    if (need > p->fcap) {
        float *nb = realloc(p->fbuf, need * sizeof *nb);
        if (!nb) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, x->name, -1, "out of memory");
        p->fbuf = nb;
        p->fcap = need;
    }
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        int64_t nr = rows - r0 < chunk ? rows - r0 : chunk;
        v->scheme->dequantize(v, r0, nr, p->fbuf);
        size_t base = (size_t)r0 * (size_t)cols;
        for (size_t e = 0; e < (size_t)nr * (size_t)cols; e++)
            if (dsq_x_put_float(p, x->dtype, dst, base + e, p->fbuf[e], 0) < 0)
                return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, x->name, -1,
                                "value %g at row %lld, column %lld is outside float16's range "
                                "(the target stores float tensors as F16)", (double)p->fbuf[e],
                                (long long)(r0 + (int64_t)e / cols), (long long)((int64_t)e % cols));
    }
    return DSQ_OK;
}

int dsq_xplan_pack(dsq_xplan *p, const dsq_xtensor *x, const dsq_qview *v, uint8_t *dst, dsq_diag *d)
{
    const int64_t N = v->shape.rows, K = v->shape.cols, G = v->layout.ngroups;
    switch (x->kind) {
    case XK_FLOAT:
        return pack_float(p, x, v, dst, d);
    case XK_I8:
        for (int64_t n = 0; n < N; n++)
            memcpy(dst + (size_t)n * (size_t)K, v->w + (size_t)n * v->layout.row_bytes, (size_t)K);
        return DSQ_OK;
    case XK_SCALE:
        for (int64_t n = 0; n < N; n++)
            for (int64_t g = 0; g < G; g++)
                if (dsq_x_put_float(p, x->dtype, dst, (size_t)(n * G + g), dsq_x_scale_at(v, n, g), 1) < 0)
                    return dsq_x_scale_overflow(x, n, g, dsq_x_scale_at(v, n, g), d);
        return DSQ_OK;
    case XK_ZEROS_F32:   /* [N, 1]: N from the view (a row piece is shorter) */
        memset(dst, 0, (size_t)N * (size_t)(x->nbytes / (uint64_t)x->shape[0]));
        return DSQ_OK;
    default:
        if (x->kind >= XK_FORMAT && p->f->pack) return p->f->pack(p, x, v, dst, d);
        break;
    }
    return dsq_fail(d, DSQ_ERR_INTERNAL, NULL, x->name, -1, "unknown export kind %d", x->kind);
}
