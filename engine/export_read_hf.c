/* export_read_hf.c - vLLM-side linears -> dsq scheme blobs: AutoAWQ GEMM
 * (formats.md 3.1-3.3) and compressed-tensors pack-quantized / int-quantized
 * (5.2). */
#include "export_read_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- AutoAWQ GEMM -------------------------------------------------------- */

static const int AWQ_REVERSE[8] = { 0, 4, 1, 5, 2, 6, 3, 7 };  /* column 8c+j is nibble AWQ_REVERSE[j] */

int dsq_xr_awq_gemm(const rd *r, qb *b, float **bias)
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
                for (int j = 0; j < 8; j++) put_u4(b, 8 * c + j, k, (v >> (4 * AWQ_REVERSE[j])) & 0xFu);
            }
        for (int64_t g = 0; g < ng; g++)
            for (int64_t c = 0; c < nc; c++) {
                uint32_t v = (uint32_t)i32_at(qz, (uint64_t)(g * nc + c));
                for (int j = 0; j < 8; j++) put_zero(b, 8 * c + j, g, (v >> (4 * AWQ_REVERSE[j])) & 0xFu);
            }
        for (int64_t g = 0; g < ng; g++)
            for (int64_t n = 0; n < r->N; n++) put_scale(b, n, g, sv[g * r->N + n]);
    }
    free(sv);
    return rc;
}

/* ---- compressed-tensors ---------------------------------------------------- */

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

int dsq_xr_ct_pack(const rd *r, qb *b, float **bias)
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

int dsq_xr_ct_int(const rd *r, qb *b, float **bias)
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
