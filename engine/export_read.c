/* export_read.c - export tensors -> dsq scheme blobs (see export_read.h).
 * Contracts: ../shared/docs/formats.md 3.1-3.3 (AWQ), 4.2-4.5 (Ascend),
 * 5.2 (compressed-tensors). The blob layout is quant/scheme.h's; codes are
 * copied, never re-quantized, so the engine computes with exactly the
 * integers the export holds. */
#include "export_read.h"
#include "dsq_mem.h"
#include "kernels.h"
#include "scheme.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rd {
    const dsq_export_info *x;
    const dsq_st_model *st;
    const char *module;
    dsq_export_spec spec;
    int64_t N, K;             /* out_features, in_features */
    dsq_diag *d;
} rd;

/* blob under construction */
typedef struct qb {
    const dsq_scheme *sc;
    dsq_qshape shape;
    dsq_qlayout lay;
    uint8_t *p;
} qb;

#define ANY_FLOAT DSQ_DTYPE_INVALID   /* F32, F16 or BF16 */

static const char *file_of(const rd *r, const dsq_st_tensor *t)
{
    const char *p = t ? dsq_st_shard_path(r->st, t->shard) : NULL;
    return p ? p : dsq_export_desc_file(r->x);
}

static int is_float_dt(enum dsq_dtype dt)
{
    return dt == DSQ_DTYPE_F32 || dt == DSQ_DTYPE_F16 || dt == DSQ_DTYPE_BF16;
}

/* "<module>.<suffix>": must exist with dtype dt (ANY_FLOAT: F32/F16/BF16) and
 * shape [d0] (d1 < 0) or [d0, d1]. A [d0] tensor may also be rank 0 when
 * d0 == 1. optional: absent gives DSQ_OK with *out NULL. */
static int need(const rd *r, const char *suffix, enum dsq_dtype dt, int64_t d0, int64_t d1,
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
    if (dt == ANY_FLOAT ? !is_float_dt(t->dtype) : t->dtype != dt)
        return dsq_fail(r->d, DSQ_ERR_FORMAT, file_of(r, t), name, (int64_t)t->file_offset,
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
            return dsq_fail(r->d, DSQ_ERR_SHAPE, file_of(r, t), name, (int64_t)t->file_offset,
                            "shape %s, expected [%lld]", got, (long long)d0);
        return dsq_fail(r->d, DSQ_ERR_SHAPE, file_of(r, t), name, (int64_t)t->file_offset,
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
static int floats(const rd *r, const dsq_st_tensor *t, float **out)
{
    *out = malloc((size_t)(t->numel ? t->numel : 1) * sizeof **out);
    if (!*out) return DSQ_ERR_NOMEM;
    int rc = dsq_st_read_rows_f32(r->st, t, 0, dsq_st_rows(t), *out, r->d);
    if (rc < 0) { free(*out); *out = NULL; }
    return rc;
}

static int bad_value(const rd *r, const dsq_st_tensor *t, uint64_t i, const char *what, double v)
{
    return dsq_fail(r->d, DSQ_ERR_FORMAT, file_of(r, t), t->name,
                    (int64_t)(t->file_offset + i * (uint64_t)dsq_dtype_bits(t->dtype) / 8),
                    "element %llu is %g: %s", (unsigned long long)i, v, what);
}

static int positive_scales(const rd *r, const dsq_st_tensor *t, const float *s)
{
    for (uint64_t i = 0; i < t->numel; i++)
        if (!isfinite(s[i]) || !(s[i] > 0.0f)) return bad_value(r, t, i, "scales must be finite and > 0", s[i]);
    return DSQ_OK;
}

static int qb_new(const rd *r, uint32_t id, int32_t group, qb *b)
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

static inline void put_i8(qb *b, int64_t n, int64_t k, int v)
{
    b->p[b->lay.w_off + (size_t)n * b->lay.row_bytes + (size_t)k] = (uint8_t)(int8_t)v;
}

/* int4 block layout: byte j of 128-column block c/128 holds column j (low
 * nibble) and column j + 64 (high nibble). */
static inline void put_u4(qb *b, int64_t n, int64_t k, unsigned u)
{
    uint8_t *row = b->p + b->lay.w_off + (size_t)n * b->lay.row_bytes + (size_t)(k / 128) * 64;
    int64_t j = k % 128;
    if (j < 64) row[j] = (uint8_t)((row[j] & 0xF0u) | (u & 0xFu));
    else row[j - 64] = (uint8_t)((row[j - 64] & 0x0Fu) | ((u & 0xFu) << 4));
}

static inline void put_scale(qb *b, int64_t n, int64_t g, float s)
{
    memcpy(b->p + b->lay.s_off + ((size_t)n * (size_t)b->lay.ngroups + (size_t)g) * 4, &s, 4);
}

static inline void put_zero(qb *b, int64_t n, int64_t g, unsigned z)
{
    b->p[b->lay.z_off + (size_t)n * (size_t)b->lay.ngroups + (size_t)g] = (uint8_t)z;
}

static void put_rowsums(qb *b)
{
    if (!b->lay.r_size) return;
    for (int64_t n = 0; n < b->shape.rows; n++) {
        const int8_t *row = (const int8_t *)(b->p + b->lay.w_off + (size_t)n * b->lay.row_bytes);
        int32_t s = 0;
        for (int64_t k = 0; k < b->shape.cols; k++) s += row[k];
        memcpy(b->p + b->lay.r_off + (size_t)n * 4, &s, 4);
    }
}

static inline int8_t i8_at(const dsq_st_tensor *t, uint64_t i) { return (int8_t)t->data[i]; }
static inline int32_t i32_at(const dsq_st_tensor *t, uint64_t i) { return (int32_t)dsq_load_u32le(t->data + 4 * i); }

/* [N, 1] all-zero weight_offset (Ascend: never applied by the kernels). */
static int zero_offsets(const rd *r)
{
    const dsq_st_tensor *t;
    DSQ_TRY(need(r, "weight_offset", DSQ_DTYPE_F32, r->N, 1, 0, &t));
    float *v;
    DSQ_TRY(floats(r, t, &v));
    for (uint64_t i = 0; i < t->numel; i++)
        if (v[i] != 0.0f) {
            double x = v[i];
            free(v);
            return bad_value(r, t, i, "weight_offset must be 0 (symmetric; vllm-ascend never applies it)", x);
        }
    free(v);
    return DSQ_OK;
}

/* ---- Ascend ---------------------------------------------------------------- */

static int rd_ascend_w8a8_dynamic(const rd *r, qb *b, float **bias)
{
    (void)bias;
    const dsq_st_tensor *w, *s;
    DSQ_TRY(need(r, "weight", DSQ_DTYPE_I8, r->N, r->K, 0, &w));
    DSQ_TRY(need(r, "weight_scale", DSQ_DTYPE_F32, r->N, 1, 0, &s));
    DSQ_TRY(zero_offsets(r));
    float *sv;
    DSQ_TRY(floats(r, s, &sv));
    int rc = positive_scales(r, s, sv);
    if (rc == DSQ_OK) rc = qb_new(r, DSQ_SCHEME_W8A8_DYNAMIC, 0, b);
    if (rc == DSQ_OK) {
        for (int64_t n = 0; n < r->N; n++) {
            memcpy(b->p + b->lay.w_off + (size_t)n * b->lay.row_bytes, w->data + (size_t)n * (size_t)r->K, (size_t)r->K);
            put_scale(b, n, 0, sv[n]);
        }
        put_rowsums(b);
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

static int rd_ascend_w8a8(const rd *r, qb *b, float **bias)
{
    const dsq_st_tensor *w, *is, *io, *dq, *qbias;
    DSQ_TRY(need(r, "weight", DSQ_DTYPE_I8, r->N, r->K, 0, &w));
    DSQ_TRY(need(r, "input_scale", ANY_FLOAT, 1, -1, 0, &is));
    DSQ_TRY(need(r, "input_offset", ANY_FLOAT, 1, -1, 0, &io));
    DSQ_TRY(need(r, "quant_bias", DSQ_DTYPE_I32, r->N, -1, 0, &qbias));
    char dn[600];
    snprintf(dn, sizeof dn, "%s.deq_scale", r->module);
    dq = dsq_st_find(r->st, dn);
    /* float32 for bf16 models, int64 holding the f32 bits widened from int32
     * for fp16 models (utils/deqscale.py) */
    DSQ_TRY(need(r, "deq_scale", dq && dq->dtype == DSQ_DTYPE_I64 ? DSQ_DTYPE_I64 : DSQ_DTYPE_F32, r->N, -1, 0, &dq));
    float in_s, in_o;
    float *tmp;
    DSQ_TRY(floats(r, is, &tmp)); in_s = tmp[0]; free(tmp);
    DSQ_TRY(floats(r, io, &tmp)); in_o = tmp[0]; free(tmp);
    if (!isfinite(in_s) || !(in_s > 0.0f)) return bad_value(r, is, 0, "input_scale must be finite and > 0", in_s);
    if (!(in_o == rintf(in_o)) || in_o < -128.0f || in_o > 127.0f)
        return bad_value(r, io, 0, "input_offset must be a whole number in [-128, 127] (loaded as int8)", in_o);
    float *deq = malloc((size_t)r->N * sizeof *deq);
    if (!deq) return DSQ_ERR_NOMEM;
    int rc = DSQ_OK;
    for (int64_t n = 0; n < r->N && rc == DSQ_OK; n++) {
        if (dq->dtype == DSQ_DTYPE_I64) {
            uint64_t v = dsq_load_u64le(dq->data + 8 * (size_t)n);
            if ((int64_t)v != (int64_t)(int32_t)(uint32_t)v)
                rc = bad_value(r, dq, (uint64_t)n, "int64 deq_scale must be an int32 f32 bit pattern, sign extended",
                               (double)(int64_t)v);
            deq[n] = dsq_bits_f32((uint32_t)v);
        } else
            deq[n] = dsq_bits_f32(dsq_load_u32le(dq->data + 4 * (size_t)n));
        if (rc == DSQ_OK && (!isfinite(deq[n]) || !(deq[n] > 0.0f)))
            rc = bad_value(r, dq, (uint64_t)n, "deq_scale must be finite and > 0", deq[n]);
    }
    if (rc == DSQ_OK) rc = qb_new(r, DSQ_SCHEME_W8A8, 0, b);
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
    put_rowsums(b);
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

static int rd_ascend_w4a8(const rd *r, qb *b, float **bias)
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
    DSQ_TRY(need(r, "weight", DSQ_DTYPE_I8, r->N / 2, r->K, 0, &w));
    DSQ_TRY(need(r, "weight_scale", DSQ_DTYPE_F32, r->N, 1, 0, &s));
    DSQ_TRY(need(r, "scale_bias", DSQ_DTYPE_F32, r->N, chunks, 0, &sb));
    DSQ_TRY(zero_offsets(r));
    float *sv = NULL, *sbv = NULL;
    int rc = floats(r, s, &sv);
    if (rc == DSQ_OK) rc = positive_scales(r, s, sv);
    if (rc == DSQ_OK) rc = floats(r, sb, &sbv);
    if (rc == DSQ_OK) rc = qb_new(r, DSQ_SCHEME_W4A8, 0, b);
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
                    rc = dsq_fail(r->d, DSQ_ERR_FORMAT, file_of(r, sb), sb->name,
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

/* ---- AutoAWQ GEMM -------------------------------------------------------- */

static const int AWQ_REVERSE[8] = { 0, 4, 1, 5, 2, 6, 3, 7 };  /* column 8c+j is nibble AWQ_REVERSE[j] */

static int rd_awq_gemm(const rd *r, qb *b, float **bias)
{
    (void)bias;
    const int64_t G = r->spec.group_size > 0 ? r->spec.group_size : r->K;
    if (r->K % G || r->N % 8)
        return dsq_fail(r->d, DSQ_ERR_SHAPE, dsq_export_desc_file(r->x), r->module, -1,
                        "AWQ needs in_features %% group_size == 0 and out_features %% 8 == 0 ([%lld, %lld], G %lld)",
                        (long long)r->N, (long long)r->K, (long long)G);
    const int64_t ng = r->K / G, nc = r->N / 8;
    const dsq_st_tensor *qw, *qz, *sc;
    DSQ_TRY(need(r, "qweight", DSQ_DTYPE_I32, r->K, nc, 0, &qw));
    DSQ_TRY(need(r, "qzeros", DSQ_DTYPE_I32, ng, nc, 0, &qz));
    DSQ_TRY(need(r, "scales", DSQ_DTYPE_F16, ng, r->N, 0, &sc));
    float *sv;
    DSQ_TRY(floats(r, sc, &sv));
    int rc = positive_scales(r, sc, sv);
    if (rc == DSQ_OK) rc = qb_new(r, DSQ_SCHEME_AWQ_W4A16, (int32_t)G, b);
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
    DSQ_TRY(need(r, "weight_scale", ANY_FLOAT, r->N, ng, 0, s));
    DSQ_TRY(floats(r, *s, sv));
    int rc = positive_scales(r, *s, *sv);
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

static int rd_ct_pack(const rd *r, qb *b, float **bias)
{
    (void)bias;
    int64_t G, ng;
    DSQ_TRY(ct_groups(r, &G, &ng));
    /* [N, ceil(K*4/32)]: pack_to_int32 pads the last word of a row */
    const int64_t words = (r->K + 7) / 8;
    const dsq_st_tensor *wp, *ws, *zp, *s;
    DSQ_TRY(need(r, "weight_packed", DSQ_DTYPE_I32, r->N, words, 0, &wp));
    DSQ_TRY(need(r, "weight_shape", DSQ_DTYPE_I64, 2, -1, 0, &ws));
    if ((int64_t)dsq_load_u64le(ws->data) != r->N || (int64_t)dsq_load_u64le(ws->data + 8) != r->K)
        return dsq_fail(r->d, DSQ_ERR_SHAPE, file_of(r, ws), ws->name, (int64_t)ws->file_offset,
                        "weight_shape is [%lld, %lld], expected [%lld, %lld]", (long long)dsq_load_u64le(ws->data),
                        (long long)dsq_load_u64le(ws->data + 8), (long long)r->N, (long long)r->K);
    DSQ_TRY(need(r, "weight_zero_point", DSQ_DTYPE_I32, (r->N + 7) / 8, ng, 1, &zp));
    if (!r->spec.symmetric && !zp) return need(r, "weight_zero_point", DSQ_DTYPE_I32, (r->N + 7) / 8, ng, 0, &zp);
    if (r->spec.symmetric && zp)
        return dsq_fail(r->d, DSQ_ERR_FORMAT, file_of(r, zp), zp->name, (int64_t)zp->file_offset,
                        "symmetric scheme but a zero point is stored");
    char gi[600];
    snprintf(gi, sizeof gi, "%s.weight_g_idx", r->module);
    if (dsq_st_find(r->st, gi))
        return dsq_fail(r->d, DSQ_ERR_UNSUPPORTED, dsq_export_desc_file(r->x), gi, -1, "activation reordering is not supported");
    float *sv;
    DSQ_TRY(ct_scales(r, ng, &sv, &s));
    int rc = qb_new(r, DSQ_SCHEME_AWQ_W4A16, (int32_t)G, b);
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

static int rd_ct_int(const rd *r, qb *b, float **bias)
{
    (void)bias;
    int64_t G, ng;
    DSQ_TRY(ct_groups(r, &G, &ng));
    const dsq_st_tensor *w, *s, *is;
    DSQ_TRY(need(r, "weight", DSQ_DTYPE_I8, r->N, r->K, 0, &w));
    DSQ_TRY(need(r, "input_scale", ANY_FLOAT, 1, -1, 1, &is));
    if (is)
        return dsq_fail(r->d, DSQ_ERR_FORMAT, file_of(r, is), is->name, (int64_t)is->file_offset,
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
    int rc = qb_new(r, id, ng == 1 ? 0 : (int32_t)G, b);
    for (int64_t n = 0; n < r->N && rc == DSQ_OK; n++) {
        for (int64_t k = 0; k < r->K && rc == DSQ_OK; k++) {
            int q = i8_at(w, (uint64_t)(n * r->K + k));
            if (id == DSQ_SCHEME_W8A8_DYNAMIC) put_i8(b, n, k, q);
            else if (q < -8 || q > 7)
                rc = bad_value(r, w, (uint64_t)(n * r->K + k), "int4 value outside [-8, 7]", q);
            else put_u4(b, n, k, (unsigned)(q + 8));
        }
        for (int64_t g = 0; g < ng; g++) {
            put_scale(b, n, g, sv[n * ng + g]);
            if (id == DSQ_SCHEME_AWQ_W4A16) put_zero(b, n, g, 8);
        }
    }
    if (rc == DSQ_OK) put_rowsums(b);
    free(sv);
    return rc;
}

/* ---- the table --------------------------------------------------------------- */

typedef struct reader {
    enum dsq_export_qtype type;
    const char *primary;     /* tensor suffix that marks the linear as quantized */
    int (*read)(const rd *r, qb *b, float **bias);
} reader;

static const reader READERS[] = {
    { DSQ_EQ_ASCEND_W8A8_DYNAMIC, "weight",        rd_ascend_w8a8_dynamic },
    { DSQ_EQ_ASCEND_W8A8,         "weight",        rd_ascend_w8a8 },
    { DSQ_EQ_ASCEND_W4A8_DYNAMIC, "weight",        rd_ascend_w4a8 },
    { DSQ_EQ_AWQ_GEMM,            "qweight",       rd_awq_gemm },
    { DSQ_EQ_CT_PACK,             "weight_packed", rd_ct_pack },
    { DSQ_EQ_CT_INT,              "weight",        rd_ct_int },
};

static const reader *reader_for(enum dsq_export_qtype t)
{
    for (size_t i = 0; i < sizeof READERS / sizeof *READERS; i++)
        if (READERS[i].type == t) return &READERS[i];
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
            return dsq_fail(r->d, DSQ_ERR_FORMAT, file_of(r, t), name, (int64_t)t->file_offset,
                            "quantized tensor on a module that %s describes as float", dsq_export_desc_file(r->x));
    }
    return 0;
}

/* Modules the target loaders fuse must be stored alike (formats.md 3.4, 4.1,
 * 4.6): q_a_proj + kv_a_proj_with_mqa, gate_proj + up_proj, and (vllm-ascend
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
            return dsq_fail(r->d, DSQ_ERR_FORMAT, file_of(r, ta), a, (int64_t)ta->file_offset,
                            "differs from %s: fused W8A8 linears share one activation scale and offset", b);
    }
    return DSQ_OK;
}

int dsq_export_read_linear(const dsq_export_info *x, const dsq_st_model *st, const char *module,
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
        if (!dsq_st_find(st, qn) && wt && is_float_dt(wt->dtype)) r.spec.type = DSQ_EQ_FLOAT;
    }
    if (r.spec.type == DSQ_EQ_FLOAT) {
        DSQ_TRY(check_float(&r));
        return check_partner(&r);
    }
    DSQ_TRY(check_partner(&r));
    const reader *rdr = reader_for(r.spec.type);
    if (!rdr) return dsq_fail(d, DSQ_ERR_INTERNAL, NULL, module, -1, "no reader for storage type %d", (int)r.spec.type);
    qb b;
    memset(&b, 0, sizeof b);
    int rc = rdr->read(&r, &b, bias);
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

int dsq_export_module_of(const dsq_export_info *x, const dsq_st_tensor *t, char *buf, size_t n)
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

int dsq_export_linear_shape(const dsq_export_info *x, const dsq_st_model *st, const char *module,
                            int64_t *rows, int64_t *cols, dsq_diag *d)
{
    dsq_export_spec sp;
    DSQ_TRY(dsq_export_spec_of(x, module, &sp, d));
    if (sp.type == DSQ_EQ_FLOAT) return 0;
    const reader *rdr = reader_for(sp.type);
    char name[600];
    snprintf(name, sizeof name, "%s.%s", module, rdr ? rdr->primary : "weight");
    const dsq_st_tensor *t = dsq_st_find(st, name);
    if (!t || t->ndim != 2)
        return dsq_fail(d, DSQ_ERR_NOT_FOUND, dsq_export_desc_file(x), name, -1, "missing or not a matrix");
    switch (sp.type) {
    case DSQ_EQ_ASCEND_W4A8_DYNAMIC: *rows = 2 * t->shape[0]; *cols = t->shape[1]; break;
    case DSQ_EQ_AWQ_GEMM:            *rows = 8 * t->shape[1]; *cols = t->shape[0]; break;
    case DSQ_EQ_CT_PACK: {           /* weight_shape holds [N, K]; K may not fill the last word */
        char sn[620];
        snprintf(sn, sizeof sn, "%s.weight_shape", module);
        const dsq_st_tensor *ws = dsq_st_find(st, sn);
        *rows = t->shape[0];
        *cols = 8 * t->shape[1];
        if (ws && ws->dtype == DSQ_DTYPE_I64 && ws->numel == 2) *cols = (int64_t)dsq_load_u64le(ws->data + 8);
        break;
    }
    default:                         *rows = t->shape[0]; *cols = t->shape[1]; break;
    }
    return 1;
}
