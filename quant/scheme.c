/* scheme.c - THE scheme table, blob layouts, view validation and the
 * tensor-level helpers every scheme shares (see scheme.h for the spec). */
#include "scheme.h"
#include "kernels.h"
#include "actq.h"
#include "bf16src.h"
#include "dsq_mem.h"
#include "dtype.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* =========================== the table =================================== */

/* Indexed by id: scheme ids are pinned file values, so the table position is
 * the id and a reserved id is an all-zero row (name == NULL). */
static const dsq_scheme g_schemes[DSQ_SCHEME_ID_COUNT] = {
    [DSQ_SCHEME_F32] = {
        .name = "f32", .description = "float32 passthrough",
        .id = DSQ_SCHEME_F32, .weight_bits = 32, .act = DSQ_ACT_FLOAT,
        .symmetric = 1,
        .blob_size = dsq_f32_blob_size, .quantize = dsq_f32_quantize,
        .dequantize = dsq_f32_dequantize, .gemm = dsq_float_gemm,
        .gemm_ref = dsq_float_gemm_ref, .gemm_scratch = dsq_float_gemm_scratch,
        .error_bound = dsq_f32_error_bound,
    },
    [DSQ_SCHEME_BF16] = {
        .name = "bf16", .description = "bfloat16 passthrough (round to nearest even)",
        .id = DSQ_SCHEME_BF16, .weight_bits = 16, .act = DSQ_ACT_FLOAT,
        .symmetric = 1,
        .blob_size = dsq_bf16_blob_size, .quantize = dsq_bf16_quantize,
        .dequantize = dsq_bf16_dequantize, .gemm = dsq_float_gemm,
        .gemm_ref = dsq_float_gemm_ref, .gemm_scratch = dsq_float_gemm_scratch,
        .error_bound = dsq_bf16_error_bound, .quantize_bf16 = dsq_bf16_quantize_bf16,
    },
    [DSQ_SCHEME_W8A8_DYNAMIC] = {
        .name = "w8a8-dynamic",
        .description = "int8 per-channel symmetric weights, int8 per-token dynamic activations",
        .id = DSQ_SCHEME_W8A8_DYNAMIC, .weight_bits = 8, .act = DSQ_ACT_INT8_TOKEN,
        .symmetric = 1, .qmin = -127, .qmax = 127,
        .has_scales = 1, .has_rowsum = 1,
        .blob_size = dsq_w8_blob_size, .quantize = dsq_w8_quantize,
        .dequantize = dsq_w8_dequantize, .gemm = dsq_w8_gemm,
        .gemm_ref = dsq_w8_gemm_ref, .gemm_scratch = dsq_w8_gemm_scratch,
        .split_size = dsq_w8_split_size, .split_prep = dsq_w8_split_prep,
        .split_block = dsq_w8_split_block, .split_rows = dsq_w8_split_rows,
        .error_bound = dsq_grid_error_bound,
    },
    [DSQ_SCHEME_W8A8] = {
        .name = "w8a8",
        .description = "int8 per-channel symmetric weights, int8 static per-tensor asymmetric activations",
        .id = DSQ_SCHEME_W8A8, .weight_bits = 8, .act = DSQ_ACT_INT8_STATIC,
        .needs_calibration = 1, .symmetric = 1, .qmin = -127, .qmax = 127,
        .has_scales = 1, .has_rowsum = 1,
        .blob_size = dsq_w8_blob_size, .quantize = dsq_w8s_quantize,
        .dequantize = dsq_w8_dequantize, .gemm = dsq_w8_gemm,
        .gemm_ref = dsq_w8_gemm_ref, .gemm_scratch = dsq_w8_gemm_scratch,
        .split_size = dsq_w8_split_size, .split_prep = dsq_w8_split_prep,
        .split_block = dsq_w8_split_block, .split_rows = dsq_w8_split_rows,
        .error_bound = dsq_grid_error_bound,
    },
    [DSQ_SCHEME_W4A8] = {
        .name = "w4a8",
        .description = "int4 symmetric weights (per channel or group), int8 per-token dynamic activations",
        .id = DSQ_SCHEME_W4A8, .weight_bits = 4, .act = DSQ_ACT_INT8_TOKEN,
        .symmetric = 1, .qmin = -8, .qmax = 7, .has_scales = 1,
        .blob_size = dsq_w4a8_blob_size, .quantize = dsq_w4a8_quantize,
        .dequantize = dsq_w4a8_dequantize, .gemm = dsq_w4a8_gemm,
        .gemm_ref = dsq_w4a8_gemm_ref, .gemm_scratch = dsq_w4a8_gemm_scratch,
        .split_size = dsq_w4a8_split_size, .split_prep = dsq_w4a8_split_prep,
        .split_block = dsq_w4a8_split_block, .split_rows = dsq_w4a8_split_rows,
        .error_bound = dsq_grid_error_bound,
    },
    [DSQ_SCHEME_AWQ_W4A16] = {
        .name = "awq-w4a16", .alias = "w4a16",
        .description = "int4 asymmetric group-wise weights (AutoAWQ zero points), int16 activations per 128 columns",
        .id = DSQ_SCHEME_AWQ_W4A16, .weight_bits = 4, .act = DSQ_ACT_INT16_BLOCK,
        .default_group_size = 128, .symmetric = 0, .qmin = 0, .qmax = 15,
        .has_scales = 1, .has_zeros = 1,
        .blob_size = dsq_awq_blob_size, .quantize = dsq_awq_quantize,
        .dequantize = dsq_awq_dequantize, .gemm = dsq_awq_gemm,
        .gemm_ref = dsq_awq_gemm_ref, .gemm_scratch = dsq_awq_gemm_scratch,
        .split_size = dsq_awq_split_size, .split_prep = dsq_awq_split_prep,
        .split_block = dsq_awq_split_block, .split_rows = dsq_awq_split_rows,
        .error_bound = dsq_grid_error_bound,
    },
    /* [DSQ_SCHEME_F16] reserved: all zero */
};

int dsq_scheme_count(void) { return DSQ_SCHEME_ID_COUNT; }

const dsq_scheme *dsq_scheme_at(int i)
{
    if (i < 0 || i >= DSQ_SCHEME_ID_COUNT || !g_schemes[i].name) return NULL;
    return &g_schemes[i];
}

const dsq_scheme *dsq_scheme_by_id(uint32_t id)
{
    return id < DSQ_SCHEME_ID_COUNT ? dsq_scheme_at((int)id) : NULL;
}

const dsq_scheme *dsq_scheme_by_name(const char *name)
{
    if (!name) return NULL;
    for (int i = 0; i < DSQ_SCHEME_ID_COUNT; i++) {
        const dsq_scheme *s = &g_schemes[i];
        if (!s->name) continue;
        if (!strcasecmp(s->name, name) || (s->alias && !strcasecmp(s->alias, name))) return s;
    }
    return NULL;
}

/* =========================== layout ====================================== */

int64_t dsq_act_kpad(int64_t cols)
{
    return (cols + DSQ_ACTQ_PAD - 1) / DSQ_ACTQ_PAD * DSQ_ACTQ_PAD;
}

int dsq_qlayout_get(const dsq_scheme *sc, const dsq_qshape *sh, dsq_qlayout *L)
{
    if (!sc || !sh || !L) return DSQ_ERR_INVALID_ARG;
    memset(L, 0, sizeof *L);
    if (sh->rows < 1 || sh->cols < 1) return DSQ_ERR_INVALID_ARG;
    if (sh->rows > ((int64_t)1 << 40) || sh->cols > ((int64_t)1 << 32)) return DSQ_ERR_OVERFLOW;
    int32_t g = sh->group_size;
    if (g < 0) return DSQ_ERR_INVALID_ARG;
    if (g) {
        /* int4 groups align with the 64-column half blocks of the layout */
        if (sc->weight_bits != 4 || g % 64 != 0 || g > (1 << 24)) return DSQ_ERR_UNSUPPORTED;
    }
    if (sc->act != DSQ_ACT_FLOAT && sh->cols > DSQ_QMAX_INT_COLS) return DSQ_ERR_UNSUPPORTED;
    L->ngroups = g ? (sh->cols + g - 1) / g : 1;
    L->gsize = g ? g : sh->cols;
    size_t cols = (size_t)sh->cols, rows = (size_t)sh->rows, rb;
    switch (sc->weight_bits) {
    case 32: rb = dsq_align_up(cols * 4, 64); break;
    case 16: rb = dsq_align_up(cols * 2, 64); break;
    case 8:  rb = dsq_align_up(cols, 64); break;
    case 4:  rb = (cols + 127) / 128 * 64; break;
    default: return DSQ_ERR_UNSUPPORTED;
    }
    L->row_bytes = rb;
    size_t off = DSQ_QBLOB_HEADER, sz, n;
    if (dsq_mul_size(rows, rb, &sz)) return DSQ_ERR_OVERFLOW;
    L->w_off = off; L->w_size = sz;
    if (dsq_add_size(off, sz, &off)) return DSQ_ERR_OVERFLOW;
    if (dsq_mul_size(rows, (size_t)L->ngroups, &n)) return DSQ_ERR_OVERFLOW;
    if (sc->has_scales) {
        if (dsq_mul_size(n, 4, &sz) || sz > SIZE_MAX - 64) return DSQ_ERR_OVERFLOW;
        L->s_off = off; L->s_size = dsq_align_up(sz, 64);
        if (dsq_add_size(off, L->s_size, &off)) return DSQ_ERR_OVERFLOW;
    }
    if (sc->has_zeros) {
        if (n > SIZE_MAX - 64) return DSQ_ERR_OVERFLOW;
        L->z_off = off; L->z_size = dsq_align_up(n, 64);
        if (dsq_add_size(off, L->z_size, &off)) return DSQ_ERR_OVERFLOW;
    }
    if (sc->has_rowsum) {
        L->r_off = off; L->r_size = dsq_align_up(rows * 4, 64);
        if (dsq_add_size(off, L->r_size, &off)) return DSQ_ERR_OVERFLOW;
    }
    L->total = off;
    return DSQ_OK;
}

int dsq_qshape_init(dsq_qshape *s, const dsq_scheme *sc, int64_t rows, int64_t cols,
                    int32_t group_size)
{
    if (!s || !sc) return DSQ_ERR_INVALID_ARG;
    s->rows = rows;
    s->cols = cols;
    s->group_size = group_size == DSQ_GROUP_DEFAULT ? sc->default_group_size : group_size;
    size_t n;
    return sc->blob_size(s, &n);
}

void dsq_qparams_init(dsq_qparams *p)
{
    memset(p, 0, sizeof *p);
}

float dsq_scale_stored(float s, int dt)
{
    float r = s;
    if (dt == DSQ_DTYPE_BF16) r = dsq_bf16_to_f32(dsq_f32_to_bf16(s));
    else if (dt == DSQ_DTYPE_F16) r = dsq_f16_to_f32(dsq_f32_to_f16(s));
    return isfinite(r) && r > 0.0f ? r : s;
}

void dsq_qblob_write_header(uint8_t *blob, const dsq_scheme *sc, const dsq_qshape *shape,
                            const dsq_qlayout *lay, uint32_t flags, float act_scale,
                            int32_t act_offset)
{
    dsq_qblob_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, DSQ_QBLOB_MAGIC, 4);
    h.version = DSQ_QBLOB_VERSION;
    h.scheme_id = sc->id;
    h.group_size = shape->group_size;
    h.rows = shape->rows;
    h.cols = shape->cols;
    h.blob_size = lay->total;
    h.ngroups = (uint32_t)lay->ngroups;
    h.flags = flags;
    h.act_scale = act_scale;
    h.act_offset = act_offset;
    memcpy(blob, &h, sizeof h);
    /* Zero the section paddings that no row range owns: the tails of S, Z
     * and R after the last row's entries. Rows' own bytes are written by
     * quantize; W rows include their own padding. */
    size_t n = (size_t)shape->rows * (size_t)lay->ngroups;
    if (lay->s_size) memset(blob + lay->s_off + n * 4, 0, lay->s_size - n * 4);
    if (lay->z_size) memset(blob + lay->z_off + n, 0, lay->z_size - n);
    if (lay->r_size)
        memset(blob + lay->r_off + (size_t)shape->rows * 4, 0,
               lay->r_size - (size_t)shape->rows * 4);
}

int dsq_quantize_check(const dsq_scheme *sc, int64_t row0, int64_t nrows,
                       const dsq_qshape *shape, const dsq_qparams *p, dsq_qlayout *lay,
                       dsq_diag *diag)
{
    if (!shape) return dsq_fail(diag, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "%s: no shape", sc->name);
    int rc = dsq_qlayout_get(sc, shape, lay);
    if (rc < 0)
        return dsq_fail(diag, rc, NULL, NULL, -1,
                        "%s: unsupported shape [%lld, %lld] group %d", sc->name,
                        (long long)shape->rows, (long long)shape->cols, (int)shape->group_size);
    if (row0 < 0 || nrows < 0 || row0 > shape->rows || nrows > shape->rows - row0)
        return dsq_fail(diag, DSQ_ERR_INVALID_ARG, NULL, NULL, -1,
                        "%s: row range [%lld, +%lld) outside %lld rows", sc->name,
                        (long long)row0, (long long)nrows, (long long)shape->rows);
    if (p && p->in_scale) {
        for (int64_t j = 0; j < shape->cols; j++)
            if (!(p->in_scale[j] > 0.0f) || !isfinite(p->in_scale[j]))
                return dsq_fail(diag, DSQ_ERR_INVALID_ARG, NULL, NULL, -1,
                                "%s: in_scale[%lld] = %g is not finite and positive", sc->name,
                                (long long)j, (double)p->in_scale[j]);
    }
    if (p && p->given_scale) {
        if (!sc->has_scales || (sc->has_zeros && !p->given_zero))
            return dsq_fail(diag, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "%s: given scales%s not supported",
                            sc->name, sc->has_scales ? " without zeros" : "");
        for (int64_t i = row0 * lay->ngroups; i < (row0 + nrows) * lay->ngroups; i++)
            if (!(p->given_scale[i] > 0.0f) || !isfinite(p->given_scale[i]) ||
                (sc->has_zeros && p->given_zero[i] > (uint8_t)sc->qmax))
                return dsq_fail(diag, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "%s: given scale/zero %lld out of range",
                                sc->name, (long long)i);
    }
    return DSQ_OK;
}

/* =========================== views ======================================= */

int dsq_qview_init(dsq_qview *v, const dsq_scheme *sc, const dsq_qshape *shape,
                   const void *blob, size_t blob_size, dsq_diag *diag)
{
    if (!v) return DSQ_ERR_INVALID_ARG;
    memset(v, 0, sizeof *v);
    const uint8_t *b = blob;
    if (!b) return dsq_fail(diag, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "no blob");
    if (blob_size < DSQ_QBLOB_HEADER)
        return dsq_fail(diag, DSQ_ERR_TRUNCATED, NULL, NULL, 0,
                        "quantized blob of %zu bytes is shorter than its 64-byte header", blob_size);
    if (((uintptr_t)b & 3) != 0)
        return dsq_fail(diag, DSQ_ERR_FORMAT, NULL, NULL, 0, "quantized blob is not 4-byte aligned");
    dsq_qblob_header h;
    memcpy(&h, b, sizeof h);
    if (memcmp(h.magic, DSQ_QBLOB_MAGIC, 4) != 0)
        return dsq_fail(diag, DSQ_ERR_FORMAT, NULL, NULL, 0, "bad quantized blob magic");
    if (h.version != DSQ_QBLOB_VERSION)
        return dsq_fail(diag, DSQ_ERR_UNSUPPORTED, NULL, NULL, 4,
                        "quantized blob layout version %u (expected %u)", h.version,
                        DSQ_QBLOB_VERSION);
    const dsq_scheme *hs = dsq_scheme_by_id(h.scheme_id);
    if (!hs)
        return dsq_fail(diag, DSQ_ERR_UNSUPPORTED, NULL, NULL, 8, "unknown scheme id %u",
                        h.scheme_id);
    if (sc && sc != hs)
        return dsq_fail(diag, DSQ_ERR_FORMAT, NULL, NULL, 8,
                        "blob holds scheme '%s', expected '%s'", hs->name, sc->name);
    sc = hs;
    dsq_qshape sh = { h.rows, h.cols, h.group_size };
    if (shape && (shape->rows != sh.rows || shape->cols != sh.cols ||
                  shape->group_size != sh.group_size))
        return dsq_fail(diag, DSQ_ERR_SHAPE, NULL, NULL, 12,
                        "blob shape [%lld, %lld] group %d, expected [%lld, %lld] group %d",
                        (long long)sh.rows, (long long)sh.cols, (int)sh.group_size,
                        (long long)shape->rows, (long long)shape->cols, (int)shape->group_size);
    dsq_qlayout L;
    int rc = dsq_qlayout_get(sc, &sh, &L);
    if (rc < 0)
        return dsq_fail(diag, rc == DSQ_ERR_UNSUPPORTED ? rc : DSQ_ERR_FORMAT, NULL, NULL, 12,
                        "bad blob shape [%lld, %lld] group %d for '%s'", (long long)sh.rows,
                        (long long)sh.cols, (int)sh.group_size, sc->name);
    if (h.blob_size != L.total || blob_size != L.total)
        return dsq_fail(diag, blob_size < L.total ? DSQ_ERR_TRUNCATED : DSQ_ERR_FORMAT, NULL, NULL,
                        32, "blob is %zu bytes (header says %llu), layout needs %zu", blob_size,
                        (unsigned long long)h.blob_size, L.total);
    if (h.ngroups != (uint64_t)L.ngroups)
        return dsq_fail(diag, DSQ_ERR_FORMAT, NULL, NULL, 40, "blob says %u groups per row, expected %lld",
                        h.ngroups, (long long)L.ngroups);
    for (int i = 0; i < 8; i++)
        if (h.reserved[i])
            return dsq_fail(diag, DSQ_ERR_FORMAT, NULL, NULL, 56 + i, "reserved header byte is not zero");
    if (sc->act == DSQ_ACT_INT8_STATIC) {
        if (h.flags != DSQ_QBLOB_F_ACT_STATIC)
            return dsq_fail(diag, DSQ_ERR_FORMAT, NULL, NULL, 44, "w8a8 blob lacks static activation params");
        if (!isfinite(h.act_scale) || !(h.act_scale > 0.0f))
            return dsq_fail(diag, DSQ_ERR_NONFINITE, NULL, NULL, 48,
                            "static activation scale %g is not finite and positive", (double)h.act_scale);
        if (h.act_offset < -128 || h.act_offset > 127)
            return dsq_fail(diag, DSQ_ERR_FORMAT, NULL, NULL, 52, "static activation offset %d out of range",
                            (int)h.act_offset);
    } else if (h.flags != 0 || h.act_scale != 0.0f || h.act_offset != 0) {
        return dsq_fail(diag, DSQ_ERR_FORMAT, NULL, NULL, 44, "unexpected static activation params");
    }
    size_t n = (size_t)sh.rows * (size_t)L.ngroups;
    if (sc->has_scales) {
        const float *s = (const float *)(b + L.s_off);
        for (size_t i = 0; i < n; i++) {
            float x = s[i];
            if (!isfinite(x) || !(x > 0.0f))
                return dsq_fail(diag, DSQ_ERR_NONFINITE, NULL, NULL, (int64_t)(L.s_off + 4 * i),
                                "scale %g of row %zu group %zu is not finite and positive",
                                (double)x, i / (size_t)L.ngroups, i % (size_t)L.ngroups);
        }
        v->scales = s;
    }
    if (sc->has_zeros) {
        const uint8_t *z = b + L.z_off;
        for (size_t i = 0; i < n; i++)
            if (z[i] > 15)
                return dsq_fail(diag, DSQ_ERR_FORMAT, NULL, NULL, (int64_t)(L.z_off + i),
                                "zero point %u of row %zu exceeds 15", z[i], i / (size_t)L.ngroups);
        v->zeros = z;
    }
    if (sc->has_rowsum) v->rowsum = (const int32_t *)(b + L.r_off);
    v->scheme = sc;
    v->shape = sh;
    v->layout = L;
    v->blob = b;
    v->blob_size = blob_size;
    v->w = b + L.w_off;
    v->act_scale = h.act_scale;
    v->act_offset = h.act_offset;
    return DSQ_OK;
}

/* =========================== tensor helpers ============================== */

struct qt_job {
    const dsq_scheme *sc;
    const float *w;
    const dsq_qshape *shape;
    const dsq_qparams *p;
    uint8_t *blob;
    int64_t chunk;
    int64_t bad_chunk; /* lowest failing chunk (INT64_MAX: none), atomic */
};

static void qt_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    struct qt_job *j = ctx;
    int64_t r0 = (int64_t)item * j->chunk;
    int64_t n = j->shape->rows - r0 < j->chunk ? j->shape->rows - r0 : j->chunk;
    int rc = j->sc->quantize(j->w + r0 * j->shape->cols, r0, n, j->shape, j->p, j->blob, NULL);
    if (rc >= 0) return;
    /* Keep the lowest failing chunk so the reported error does not depend
     * on thread timing. */
    int64_t cur = __atomic_load_n(&j->bad_chunk, __ATOMIC_ACQUIRE);
    while ((int64_t)item < cur &&
           !__atomic_compare_exchange_n(&j->bad_chunk, &cur, (int64_t)item, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
    }
}

int dsq_quantize_tensor(const dsq_scheme *sc, const float *w, const dsq_qshape *shape,
                        const dsq_qparams *params, uint8_t *blob, dsq_pool *pool,
                        dsq_diag *diag)
{
    if (!sc || !w || !shape || !blob) return dsq_fail(diag, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "null argument");
    dsq_qlayout L;
    int rc = dsq_quantize_check(sc, 0, shape->rows, shape, params, &L, diag);
    if (rc < 0) return rc;
    /* Row 0's chunk writes the header; chunks are independent otherwise. */
    struct qt_job j = { sc, w, shape, params, blob, 0, INT64_MAX };
    int64_t target = 256 * 1024 / (shape->cols > 0 ? shape->cols : 1); /* ~1 MB of f32 */
    j.chunk = target < 1 ? 1 : target;
    if (j.chunk > shape->rows) j.chunk = shape->rows;
    size_t nchunks = (size_t)((shape->rows + j.chunk - 1) / j.chunk);
    dsq_pool_run(pool, nchunks, qt_task, &j);
    if (j.bad_chunk != INT64_MAX) {
        /* Re-run the first failing chunk serially to get its diagnostic. */
        int64_t r0 = j.bad_chunk * j.chunk;
        int64_t n = shape->rows - r0 < j.chunk ? shape->rows - r0 : j.chunk;
        rc = sc->quantize(w + r0 * shape->cols, r0, n, shape, params, blob, diag);
        return rc < 0 ? rc : DSQ_ERR_INTERNAL;
    }
    return DSQ_OK;
}

int dsq_qrel_error(const dsq_qview *v, const float *w, int64_t row0, int64_t nrows,
                   const float *in_scale, double *err2, double *ref2)
{
    if (!v || !v->scheme || !w || !err2 || !ref2) return DSQ_ERR_INVALID_ARG;
    if (row0 < 0 || nrows < 0 || row0 > v->shape.rows || nrows > v->shape.rows - row0)
        return DSQ_ERR_INVALID_ARG;
    int64_t cols = v->shape.cols;
    int64_t chunk = 64;
    float *buf = malloc((size_t)chunk * (size_t)cols * sizeof *buf);
    if (!buf) return DSQ_ERR_NOMEM;
    double e = 0, r = 0;
    for (int64_t r0 = 0; r0 < nrows; r0 += chunk) {
        int64_t n = nrows - r0 < chunk ? nrows - r0 : chunk;
        v->scheme->dequantize(v, row0 + r0, n, buf);
        for (int64_t i = 0; i < n; i++) {
            const float *wr = w + (r0 + i) * cols, *dr = buf + i * cols;
            for (int64_t c = 0; c < cols; c++) {
                double d = dr[c];
                if (in_scale) d /= in_scale[c];
                double diff = (double)wr[c] - d;
                e += diff * diff;
                r += (double)wr[c] * wr[c];
            }
        }
    }
    free(buf);
    *err2 += e;
    *ref2 += r;
    return DSQ_OK;
}

/* RTN onto {(q - z) * s : qmin <= q <= qmax}: within the grid range the
 * error is at most s/2, outside it the distance to the range. The slack
 * covers the float division before rounding and the product in deq. */
double dsq_grid_error_bound(const dsq_qview *v, int64_t row, int64_t col, float w)
{
    const dsq_scheme *sc = v->scheme;
    int64_t g = col / v->layout.gsize;
    size_t i = (size_t)row * (size_t)v->layout.ngroups + (size_t)g;
    double s = v->scales[i];
    double z = v->zeros ? v->zeros[i] : 0.0;
    double lo = (sc->qmin - z) * s, hi = (sc->qmax - z) * s;
    double out = w < lo ? lo - w : (w > hi ? w - hi : 0.0);
    double b = out > 0.5 * s ? out : 0.5 * s;
    return b + 4.0 * 0x1p-24 * (fabs((double)w) + 16.0 * s);
}

int dsq_qrow_prepare(const dsq_kernels *k, const float *w, int64_t cols, const float *in_scale,
                     int allow_nonfinite, float *tmp, const float **row, int64_t *bad_col)
{
    const float *src = w;
    if (in_scale) {
        for (int64_t j = 0; j < cols; j++) tmp[j] = w[j] * in_scale[j];
        src = tmp;
    }
    *row = src;
    if (k->absmax_bits(src, cols) < 0x7f800000u) return DSQ_OK;
    if (!allow_nonfinite) {
        for (int64_t j = 0; j < cols; j++)
            if (!isfinite(src[j])) {
                *bad_col = j;
                break;
            }
        return DSQ_ERR_NONFINITE;
    }
    float m = 0.0f;
    for (int64_t j = 0; j < cols; j++)
        if (isfinite(src[j]) && fabsf(src[j]) > m) m = fabsf(src[j]);
    for (int64_t j = 0; j < cols; j++) {
        float f = src[j];
        tmp[j] = isnan(f) ? 0.0f : isinf(f) ? (f > 0 ? m : -m) : f;
    }
    *row = tmp;
    return DSQ_OK;
}

int dsq_qgemm_with(const dsq_kernels *k, const dsq_qview *v, const float *x, int64_t T, float *y,
                   dsq_pool *pool, void *scratch, size_t scratch_size)
{
    if (!v || !v->scheme) return DSQ_ERR_INVALID_ARG;
    switch (v->scheme->id) {
    case DSQ_SCHEME_W8A8_DYNAMIC:
    case DSQ_SCHEME_W8A8:
        return dsq_w8_gemm_with(k, v, x, T, y, pool, scratch, scratch_size);
    case DSQ_SCHEME_W4A8:
        return dsq_w4a8_gemm_with(k, v, x, T, y, pool, scratch, scratch_size);
    case DSQ_SCHEME_AWQ_W4A16:
        return dsq_awq_gemm_with(k, v, x, T, y, pool, scratch, scratch_size);
    default:
        return dsq_float_gemm_with(k, v, x, T, y, pool, scratch, scratch_size);
    }
}
