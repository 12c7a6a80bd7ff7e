/* export_read_ascend.c - msModelSlim AscendV1 linears -> dsq scheme blobs
 * (formats.md 4.2-4.5): W8A8_DYNAMIC -> w8a8-dynamic, W8A8 -> w8a8 (static
 * activations, bias from quant_bias), W4A8_DYNAMIC -> w4a8 per channel. */
#include "export_read_internal.h"
#include "dtype.h"
#include "kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int dsq_xr_ascend_w8a8_dynamic(const rd *r, qb *b, float **bias)
{
    (void)bias;
    const dsq_st_tensor *w, *s;
    DSQ_TRY(dsq_xr_need(r, "weight", DSQ_DTYPE_I8, r->N, r->K, 0, &w));
    DSQ_TRY(dsq_xr_need(r, "weight_scale", DSQ_DTYPE_F32, r->N, 1, 0, &s));
    DSQ_TRY(dsq_xr_zero_offsets(r));
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

/* The f32 s with fl(a * s) == target nearest target / a (formats.md 4.3:
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

int dsq_xr_ascend_w8a8(const rd *r, qb *b, float **bias)
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
                        "for float16 models; formats.md 4.3)", dsq_dtype_name(dq->dtype), tdt,
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

int dsq_xr_ascend_w4a8(const rd *r, qb *b, float **bias)
{
    (void)bias;
    const dsq_st_tensor *w, *s, *sb;
    int chunks = sb_chunks(r->module);
    if (!chunks)
        return dsq_fail(r->d, DSQ_ERR_UNSUPPORTED, dsq_export_desc_file(r->x), r->module, -1,
                        "W4A8_DYNAMIC is for MoE experts (gate/up/down_proj) only (formats.md 4.5)");
    if (r->N % 2 || (chunks == 16 && r->K % 16))
        return dsq_fail(r->d, DSQ_ERR_SHAPE, dsq_export_desc_file(r->x), r->module, -1,
                        "W4A8 needs an even out_features (and in_features %% 16 == 0 for down_proj)");
    DSQ_TRY(dsq_xr_need(r, "weight", DSQ_DTYPE_I8, r->N / 2, r->K, 0, &w));
    DSQ_TRY(dsq_xr_need(r, "weight_scale", DSQ_DTYPE_F32, r->N, 1, 0, &s));
    DSQ_TRY(dsq_xr_need(r, "scale_bias", DSQ_DTYPE_F32, r->N, chunks, 0, &sb));
    DSQ_TRY(dsq_xr_zero_offsets(r));
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
