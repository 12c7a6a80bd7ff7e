/* export_read_util.c - tensor checks and blob writers shared by the export
 * readers (hostile input: every name, dtype, shape and value range is
 * checked; errors name the shard file and the tensor). */
#include "export_read_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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


/* [N, 1] all-zero weight_offset (Ascend: never applied by the kernels). */
int dsq_xr_zero_offsets(const rd *r)
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
