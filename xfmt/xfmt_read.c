/* xfmt_read.c - a stored linear of a serving export back into a dsq scheme
 * blob (quant/scheme.h), through its format's unpacker (the table, xfmt.h),
 * so the engine runs exports exactly like a .dsq. Codes are copied, never
 * re-quantized: the engine computes with exactly the integers the export
 * holds. Shared here: the checks every format needs (a float module carries
 * no quantized tensor; fused modules are stored alike) and the tensor checks
 * and blob writers of the unpackers. */
#include "xfmt_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const dsq_xreader *reader_for(const dsq_export_info *x, enum dsq_export_qtype t)
{
    for (const dsq_xreader *r = x->f ? x->f->readers : NULL; r && r->unpack; r++)
        if (r->type == t) return r;
    return NULL;
}

/* A float module must not carry quantized tensors (a loader would build a
 * quantized layer and the float reading would silently differ). */
static int check_float(const rd *r)
{
    static const char *const q_suffix[] = { "qweight", "weight_packed", "weight_scale", "qzeros", "scales" };
    for (size_t i = 0; i < sizeof q_suffix / sizeof *q_suffix; i++) {
        char name[600];
        snprintf(name, sizeof name, "%s.%s", r->module, q_suffix[i]);
        const dsq_st_tensor *t = dsq_st_find(r->st, name);
        if (t)
            return dsq_fail(r->d, DSQ_ERR_FORMAT, dsq_xr_file_of(r, t), name, (int64_t)t->file_offset,
                            "quantized tensor on a module that %s describes as float", dsq_export_desc_file(r->x));
    }
    return 0;
}

/* Modules the target loaders fuse must be stored alike: q_a_proj + kv_a_proj_with_mqa, gate_proj + up_proj, and (vllm-ascend
 * configures all experts from expert 0) every routed expert like expert 0.
 * Writes the partner of module into buf; 0 when it has none. */
static int fused_partner(const char *module, char *buf, size_t n)
{
    static const char *const pairs[][2] = { { ".self_attn.q_a_proj", ".self_attn.kv_a_proj_with_mqa" },
                                            { ".gate_proj", ".up_proj" } };
    const char *e = strstr(module, ".mlp.experts.");
    if (e) {
        const char *num = e + strlen(".mlp.experts."), *dot = strchr(num, '.');
        if (dot && !(dot - num == 1 && num[0] == '0')) {
            snprintf(buf, n, "%.*s0%s", (int)(num - module), module, dot);
            return 1;
        }
    }
    size_t ml = strlen(module);
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++)
        for (int j = 0; j < 2; j++) {
            size_t sl = strlen(pairs[i][j]);
            if (ml > sl && !strcmp(module + ml - sl, pairs[i][j])) {
                snprintf(buf, n, "%.*s%s", (int)(ml - sl), module, pairs[i][1 - j]);
                return 1;
            }
        }
    return 0;
}

static int check_partner(const rd *r)
{
    char other[600];
    if (!fused_partner(r->module, other, sizeof other)) return DSQ_OK;
    char w[620];
    snprintf(w, sizeof w, "%s.weight", other);
    /* only a partner that exists in this checkpoint (Llama has no q_a_proj) */
    dsq_export_spec ps;
    dsq_diag dd;
    dsq_diag_clear(&dd);
    if (dsq_export_spec_of(r->x, other, &ps, &dd) < 0) return DSQ_OK;   /* reported when it is read */
    if (ps.type == DSQ_EQ_FLOAT && !dsq_st_find(r->st, w)) return DSQ_OK;
    if (ps.type != r->spec.type || ps.bits != r->spec.bits || ps.group_size != r->spec.group_size)
        return dsq_fail(r->d, DSQ_ERR_FORMAT, dsq_export_desc_file(r->x), r->module, -1,
                        "stored unlike %s, which the serving engine fuses with it (or configures it from)", other);
    if (r->spec.type != DSQ_EQ_ASCEND_W8A8) return DSQ_OK;
    /* static W8A8 fused pairs load into one input_scale / input_offset slot */
    static const char *const act[] = { "input_scale", "input_offset" };
    for (int i = 0; i < 2; i++) {
        char a[620], b[620];
        snprintf(a, sizeof a, "%s.%s", r->module, act[i]);
        snprintf(b, sizeof b, "%s.%s", other, act[i]);
        const dsq_st_tensor *ta = dsq_st_find(r->st, a), *tb = dsq_st_find(r->st, b);
        if (ta && tb && (ta->nbytes != tb->nbytes || ta->dtype != tb->dtype || memcmp(ta->data, tb->data, (size_t)ta->nbytes)))
            return dsq_fail(r->d, DSQ_ERR_FORMAT, dsq_xr_file_of(r, ta), a, (int64_t)ta->file_offset,
                            "differs from %s: fused W8A8 linears share one activation scale and offset", b);
    }
    return DSQ_OK;
}

int dsq_xfmt_unpack_linear(const dsq_export_info *x, const dsq_st_model *st, const char *module,
                           int64_t rows, int64_t cols, uint8_t **blob, size_t *blob_size,
                           float **bias, dsq_diag *d)
{
    *blob = NULL;
    *blob_size = 0;
    *bias = NULL;
    rd r = { x, st, module, { 0 }, rows, cols, d };
    DSQ_TRY(dsq_export_spec_of(x, module, &r.spec, d));
    if (r.spec.float_if_absent) {
        char qn[600], wn[600];
        snprintf(qn, sizeof qn, "%s.qweight", module);
        snprintf(wn, sizeof wn, "%s.weight", module);
        const dsq_st_tensor *wt = dsq_st_find(st, wn);
        if (!dsq_st_find(st, qn) && wt && dsq_xr_is_float_dt(wt->dtype)) r.spec.type = DSQ_EQ_FLOAT;
    }
    if (r.spec.type == DSQ_EQ_FLOAT) {
        DSQ_TRY(check_float(&r));
        return check_partner(&r);
    }
    DSQ_TRY(check_partner(&r));
    const dsq_xreader *rdr = reader_for(x, r.spec.type);
    if (!rdr) return dsq_fail(d, DSQ_ERR_INTERNAL, NULL, module, -1, "no reader for storage type %d", (int)r.spec.type);
    qb b;
    memset(&b, 0, sizeof b);
    int rc = rdr->unpack(&r, &b, bias);
    if (rc == DSQ_OK && b.p && !b.lay.total) rc = DSQ_ERR_INTERNAL;
    if (rc == DSQ_OK) {
        /* w8a8 static writes its own header (activation params) */
        const dsq_qblob_header *h = (const dsq_qblob_header *)b.p;
        if (memcmp(h->magic, DSQ_QBLOB_MAGIC, 4) != 0)
            dsq_qblob_write_header(b.p, b.sc, &b.shape, &b.lay, 0, 0.0f, 0);
        *blob = b.p;
        *blob_size = b.lay.total;
        return 1;
    }
    free(b.p);
    free(*bias);
    *bias = NULL;
    return rc;
}

int dsq_xfmt_module_of(const dsq_export_info *x, const dsq_st_tensor *t, char *buf, size_t n)
{
    static const char *const prim[] = { ".qweight", ".weight_packed", ".weight" };
    size_t len = strlen(t->name);
    for (size_t i = 0; i < sizeof prim / sizeof *prim; i++) {
        size_t pl = strlen(prim[i]);
        if (len <= pl || strcmp(t->name + len - pl, prim[i]) || len - pl >= n) continue;
        if (i == 2 && t->dtype != DSQ_DTYPE_I8) return 0;
        memcpy(buf, t->name, len - pl);
        buf[len - pl] = 0;
        dsq_export_spec sp;
        dsq_diag dd;
        dsq_diag_clear(&dd);
        if (dsq_export_spec_of(x, buf, &sp, &dd) < 0) return 1;   /* let the reader report it */
        return sp.type != DSQ_EQ_FLOAT;
    }
    return 0;
}

int dsq_xfmt_linear_shape(const dsq_export_info *x, const dsq_st_model *st, const char *module,
                            int64_t *rows, int64_t *cols, dsq_diag *d)
{
    dsq_export_spec sp;
    DSQ_TRY(dsq_export_spec_of(x, module, &sp, d));
    if (sp.type == DSQ_EQ_FLOAT) return 0;
    const dsq_xreader *rdr = reader_for(x, sp.type);
    char name[600];
    snprintf(name, sizeof name, "%s.%s", module, rdr ? rdr->primary : "weight");
    const dsq_st_tensor *t = dsq_st_find(st, name);
    if (!t || t->ndim != 2)
        return dsq_fail(d, DSQ_ERR_NOT_FOUND, dsq_export_desc_file(x), name, -1, "missing or not a matrix");
    /* both dimensions positive first: the data then bounds them, so the
     * packers' 8 * dim cannot overflow */
    if (t->shape[0] <= 0 || t->shape[1] <= 0)
        return dsq_fail(d, DSQ_ERR_FORMAT, dsq_st_shard_path(st, t->shard), name, (int64_t)t->file_offset,
                        "empty matrix [%lld, %lld]", (long long)t->shape[0], (long long)t->shape[1]);
    if (rdr && rdr->shape) {
        rdr->shape(st, module, t, rows, cols);
    } else {
        *rows = t->shape[0];
        *cols = t->shape[1];
    }
    if (*rows <= 0 || *cols <= 0)
        return dsq_fail(d, DSQ_ERR_FORMAT, dsq_st_shard_path(st, t->shard), module, (int64_t)t->file_offset,
                        "stored shape [%lld, %lld] is not a matrix", (long long)*rows, (long long)*cols);
    return 1;
}

/* ---- tensor checks and blob writers of the unpackers ---- */

const char *dsq_xr_file_of(const rd *r, const dsq_st_tensor *t)
{
    const char *p = t ? dsq_st_shard_path(r->st, t->shard) : NULL;
    return p ? p : dsq_export_desc_file(r->x);
}

int dsq_xr_is_float_dt(enum dsq_dtype dt)
{
    return dt == DSQ_DTYPE_F32 || dt == DSQ_DTYPE_F16 || dt == DSQ_DTYPE_BF16;
}

/* "<module>.<suffix>": must exist with dtype dt (ANY_FLOAT: F32/F16/BF16) and
 * shape [d0] (d1 < 0) or [d0, d1]. A [d0] tensor may also be rank 0 when
 * d0 == 1. optional: absent gives DSQ_OK with *out NULL. */
int dsq_xr_need(const rd *r, const char *suffix, enum dsq_dtype dt, int64_t d0, int64_t d1,
                int optional, const dsq_st_tensor **out)
{
    char name[600];
    snprintf(name, sizeof name, "%s.%s", r->module, suffix);
    const dsq_st_tensor *t = dsq_st_find(r->st, name);
    *out = t;
    if (!t) {
        if (optional) return DSQ_OK;
        return dsq_fail(r->d, DSQ_ERR_NOT_FOUND, dsq_export_desc_file(r->x), name, -1,
                        "missing (%s stores this linear as %s)", dsq_export_kind_name(dsq_export_kind_of(r->x)),
                        suffix);
    }
    if (dt == ANY_FLOAT ? !dsq_xr_is_float_dt(t->dtype) : t->dtype != dt)
        return dsq_fail(r->d, DSQ_ERR_FORMAT, dsq_xr_file_of(r, t), name, (int64_t)t->file_offset,
                        "dtype %s, the format requires %s", dsq_dtype_name(t->dtype),
                        dt == ANY_FLOAT ? "F32, F16 or BF16" : dsq_dtype_name(dt));
    int ok = d1 < 0 ? ((t->ndim == 1 && t->shape[0] == d0) || (t->ndim == 0 && d0 == 1))
                    : (t->ndim == 2 && t->shape[0] == d0 && t->shape[1] == d1);
    if (!ok) {
        char got[128] = "[";
        for (int i = 0; i < t->ndim; i++) {
            size_t k = strlen(got);
            snprintf(got + k, sizeof got - k, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        }
        strncat(got, "]", sizeof got - strlen(got) - 1);
        if (d1 < 0)
            return dsq_fail(r->d, DSQ_ERR_SHAPE, dsq_xr_file_of(r, t), name, (int64_t)t->file_offset,
                            "shape %s, expected [%lld]", got, (long long)d0);
        return dsq_fail(r->d, DSQ_ERR_SHAPE, dsq_xr_file_of(r, t), name, (int64_t)t->file_offset,
                        "shape %s, expected [%lld, %lld]", got, (long long)d0, (long long)d1);
    }
    /* companions of an Ascend linear carry the linear's type when listed */
    const char *ty = dsq_export_ascend_type(r->x, name);
    if (ty && strcmp(suffix, "bias") && strcmp(suffix, "weight")) {
        char wk[600];
        snprintf(wk, sizeof wk, "%s.weight", r->module);
        const char *wt = dsq_export_ascend_type(r->x, wk);
        if (wt && strcmp(ty, wt))
            return dsq_fail(r->d, DSQ_ERR_FORMAT, dsq_export_desc_file(r->x), name, -1,
                            "description says %s but %s is %s", ty, wk, wt);
    }
    return DSQ_OK;
}

/* All values of a float tensor as f32 (malloc'd). */
int dsq_xr_floats(const rd *r, const dsq_st_tensor *t, float **out)
{
    *out = malloc((size_t)(t->numel ? t->numel : 1) * sizeof **out);
    if (!*out) return DSQ_ERR_NOMEM;
    int rc = dsq_st_read_rows_f32(r->st, t, 0, dsq_st_rows(t), *out, r->d);
    if (rc < 0) { free(*out); *out = NULL; }
    return rc;
}

int dsq_xr_bad_value(const rd *r, const dsq_st_tensor *t, uint64_t i, const char *what, double v)
{
    return dsq_fail(r->d, DSQ_ERR_FORMAT, dsq_xr_file_of(r, t), t->name,
                    (int64_t)(t->file_offset + i * (uint64_t)dsq_dtype_bits(t->dtype) / 8),
                    "element %llu is %g: %s", (unsigned long long)i, v, what);
}

int dsq_xr_positive_scales(const rd *r, const dsq_st_tensor *t, const float *s)
{
    for (uint64_t i = 0; i < t->numel; i++)
        if (!isfinite(s[i]) || !(s[i] > 0.0f)) return dsq_xr_bad_value(r, t, i, "scales must be finite and > 0", s[i]);
    return DSQ_OK;
}

int dsq_xr_qb_new(const rd *r, uint32_t id, int32_t group, qb *b)
{
    memset(b, 0, sizeof *b);
    b->sc = dsq_scheme_by_id(id);
    if (group == r->K) group = 0;           /* one group per row */
    if (!b->sc || dsq_qshape_init(&b->shape, b->sc, r->N, r->K, group) < 0 ||
        dsq_qlayout_get(b->sc, &b->shape, &b->lay) < 0)
        return dsq_fail(r->d, DSQ_ERR_UNSUPPORTED, dsq_export_desc_file(r->x), r->module, -1,
                        "[%lld, %lld] with group size %d cannot be held as %s (int4 groups: multiples of 64)",
                        (long long)r->N, (long long)r->K, (int)group, b->sc ? b->sc->name : "?");
    b->p = dsq_aligned_alloc(b->lay.total);
    if (!b->p) return DSQ_ERR_NOMEM;
    memset(b->p, 0, b->lay.total);
    return DSQ_OK;
}

void dsq_xr_put_rowsums(qb *b)
{
    if (!b->lay.r_size) return;
    for (int64_t n = 0; n < b->shape.rows; n++) {
        const int8_t *row = (const int8_t *)(b->p + b->lay.w_off + (size_t)n * b->lay.row_bytes);
        int32_t s = 0;
        for (int64_t k = 0; k < b->shape.cols; k++) s += row[k];
        memcpy(b->p + b->lay.r_off + (size_t)n * 4, &s, 4);
    }
}
