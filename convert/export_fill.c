/* export_fill.c - the bytes of one export tensor from a dsq scheme blob
 * (quant/scheme.h layout). Format-independent: the format files choose the
 * kinds, this file knows the packings (formats.md 3.3, 4.3-4.5, 5.2). */
#include "export_internal.h"
#include "dsq_mem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dsq_x_fill(dsq_export *ex, const dsq_xtensor *x, const dsq_qview *v, uint8_t *dst, dsq_diag *d);

/* Signed / raw int4 code of (n, k): int4 blocks of 128 columns, 64 bytes,
 * low nibble column j, high nibble column 64 + j. */
static inline int code4(const dsq_qview *v, int64_t n, int64_t k)
{
    const uint8_t *row = v->w + (size_t)n * v->layout.row_bytes;
    int64_t j = k & 127;
    uint8_t b = row[(k >> 7) * 64 + (j & 63)];
    return j < 64 ? (b & 0xF) : (b >> 4);
}

/* w4a8 stores q + 8; awq stores its 0..15 code. */
static inline int q4_signed(const dsq_qview *v, int64_t n, int64_t k) { return code4(v, n, k) - 8; }

static inline int8_t q8(const dsq_qview *v, int64_t n, int64_t k)
{
    return ((const int8_t *)(v->w + (size_t)n * v->layout.row_bytes))[k];
}

/* All codes of row n (0..15, as stored) into out[0..cols). */
static void row_codes(const dsq_qview *v, int64_t n, uint8_t *out)
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

static inline float scale_at(const dsq_qview *v, int64_t n, int64_t g)
{
    return v->scales[(size_t)n * (size_t)v->layout.ngroups + (size_t)g];
}

static void note_rounding(dsq_export *ex, float s, float r)
{
    if (s > 0) {
        double rel = fabs((double)r - (double)s) / (double)s;
        if (rel > ex->sum.max_scale_rel_rounding) ex->sum.max_scale_rel_rounding = rel;
    }
}

/* One float in dtype dt at dst[i]. F16 overflow is refused by the caller. */
static int put_float(dsq_export *ex, enum dsq_dtype dt, uint8_t *dst, size_t i, float f, int is_scale)
{
    if (dt == DSQ_DTYPE_F32) {
        memcpy(dst + 4 * i, &f, 4);
    } else if (dt == DSQ_DTYPE_BF16) {
        uint16_t h = dsq_f32_to_bf16(f);
        memcpy(dst + 2 * i, &h, 2);
        if (is_scale) note_rounding(ex, f, dsq_bf16_to_f32(h));
    } else {
        uint16_t h = dsq_f32_to_f16(f);
        if (isfinite(f) && (h & 0x7c00u) == 0x7c00u) return -1;
        memcpy(dst + 2 * i, &h, 2);
        if (is_scale) note_rounding(ex, f, dsq_f16_to_f32(h));
    }
    return 0;
}

static int fill_float(dsq_export *ex, const dsq_xtensor *x, const dsq_qview *v, uint8_t *dst, dsq_diag *d)
{
    int64_t rows = v->shape.rows, cols = v->shape.cols;
    int64_t chunk = (int64_t)((1u << 20) / (uint64_t)cols);
    if (chunk < 1) chunk = 1;
    size_t need = (size_t)(chunk < rows ? chunk : rows) * (size_t)cols;
    if (need > ex->fcap) {
        float *nb = realloc(ex->fbuf, need * sizeof *nb);
        if (!nb) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, x->name, -1, "out of memory");
        ex->fbuf = nb;
        ex->fcap = need;
    }
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        int64_t nr = rows - r0 < chunk ? rows - r0 : chunk;
        v->scheme->dequantize(v, r0, nr, ex->fbuf);
        size_t base = (size_t)r0 * (size_t)cols;
        for (size_t e = 0; e < (size_t)nr * (size_t)cols; e++)
            if (put_float(ex, x->dtype, dst, base + e, ex->fbuf[e], 0) < 0)
                return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, x->name, -1,
                                "value %g at row %lld, column %lld is outside float16's range "
                                "(the target stores float tensors as F16)", (double)ex->fbuf[e],
                                (long long)(r0 + (int64_t)e / cols), (long long)((int64_t)e % cols));
    }
    return DSQ_OK;
}

static int scale_overflow(const dsq_xtensor *x, int64_t n, int64_t g, float s, dsq_diag *d)
{
    return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, x->name, -1,
                    "scale %g (row %lld, group %lld) does not fit float16 (max 65504): "
                    "this weight cannot be stored with F16 scales", (double)s, (long long)n, (long long)g);
}

static const int AWQ_REV[8] = { 0, 4, 1, 5, 2, 6, 3, 7 };

/* The int4 layouts, from whole decoded rows (8 at a time). */
static int fill_int4(dsq_export *ex, const dsq_xtensor *x, const dsq_qview *v, uint8_t *dst, dsq_diag *d)
{
    (void)ex;
    const int64_t N = v->shape.rows, K = v->shape.cols;
    uint8_t *c = malloc(8 * ((size_t)K + 128));
    if (!c) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, x->name, -1, "out of memory");
    const size_t st = (size_t)K + 128;
    for (int64_t n0 = 0; n0 < N; n0 += 8) {
        int rows = N - n0 < 8 ? (int)(N - n0) : 8;
        for (int r = 0; r < rows; r++) row_codes(v, n0 + r, c + (size_t)r * st);
        switch (x->kind) {
        case XK_ASC_W4:
            /* byte[j, k] = (q[2j+1, k] << 4) | (q[2j, k] & 0xF), q signed:
             * the stored nibble is q + 8, so XOR 8 gives q's two's
             * complement nibble. Checked against msModelSlim
             * save/utils/pack.py @030d6ea (w4a8_pack_int4: transpose, pair
             * adjacent N values, transpose back). */
            for (int r = 0; r + 1 < rows; r += 2) {
                const uint8_t *lo = c + (size_t)r * st, *hi = lo + st;
                uint8_t *o = dst + (size_t)((n0 + r) / 2) * (size_t)K;
                for (int64_t k = 0; k < K; k++) o[k] = (uint8_t)(((hi[k] ^ 8u) << 4) | (lo[k] ^ 8u));
            }
            break;
        case XK_ASC_SCALE_BIAS: {
            /* scale_bias = 8 * sum_k q[n,k] * s[n], per row ([N,1]) or per
             * sixteenth of K ([N,16]): msModelSlim save/utils/pack.py
             * @030d6ea process_scale reshapes [N, K] to (-1, K / tp_num)
             * with tp_num 16, so part p is columns [p*K/16, (p+1)*K/16) of
             * row n (K % 16 == 0 is checked at plan time). Summed in double
             * and rounded once (torch sums in float32: same to rounding). */
            int64_t parts = x->shape[1], len = K / parts;
            for (int r = 0; r < rows; r++) {
                int64_t n = n0 + r;
                float s = scale_at(v, n, 0);
                const uint8_t *q = c + (size_t)r * st;
                for (int64_t p = 0; p < parts; p++) {
                    double acc = 0;
                    for (int64_t k = p * len; k < (p + 1) * len; k++) acc += (double)((float)((int)q[k] - 8) * s);
                    float f = (float)(8.0 * acc);
                    memcpy(dst + 4 * (size_t)(n * parts + p), &f, 4);
                }
            }
            break;
        }
        case XK_AWQ_QWEIGHT: {
            /* qweight[k, c] nibble i = q[8c + ORDER[i], k] (rows n0..n0+7
             * are one word column c). */
            uint32_t *o = (uint32_t *)dst;
            int64_t W = N / 8, col = n0 / 8;
            for (int64_t k = 0; k < K; k++) {
                uint32_t w = 0;
                for (int r = 0; r < rows; r++) w |= (uint32_t)c[(size_t)r * st + (size_t)k] << (4 * AWQ_REV[r]);
                o[(size_t)k * (size_t)W + (size_t)col] = w;
            }
            break;
        }
        case XK_CT_PACKED: {
            /* packed[n, c] = sum_j (q[n, 8c+j] + 8) << 4j; dsq's awq code
             * is already compressed-tensors' q + 8. */
            uint32_t *o = (uint32_t *)dst;
            int64_t W = K / 8;
            for (int r = 0; r < rows; r++) {
                const uint8_t *q = c + (size_t)r * st;
                uint32_t *orow = o + (size_t)(n0 + r) * (size_t)W;
                for (int64_t cc = 0; cc < W; cc++) {
                    uint32_t w = 0;
                    for (int j = 0; j < 8; j++) w |= (uint32_t)q[8 * cc + j] << (4 * j);
                    orow[cc] = w;
                }
            }
            break;
        }
        default:
            break;
        }
    }
    free(c);
    return DSQ_OK;
}

/* Static W8A8 fused pairs (q_a_proj + kv_a_proj_with_mqa, gate_proj +
 * up_proj) load into ONE input_scale / input_offset slot in vllm-ascend, so
 * both members must carry the same values (formats.md caveats). */
static int pair_check(dsq_export *ex, const dsq_xtensor *x, const dsq_qview *v, dsq_diag *d)
{
    static const char *const from[] = { "kv_a_proj_with_mqa.", "up_proj." };
    static const char *const to[] = { "q_a_proj.", "gate_proj." };
    char key[1200];
    snprintf(key, sizeof key, "%s", x->name);
    int paired = 0;
    for (int p = 0; p < 2 && !paired; p++) {
        char *at = strstr(key, from[p]);
        if (at) {
            char tail[1200];
            snprintf(tail, sizeof tail, "%s", at + strlen(from[p]));
            snprintf(at, sizeof key - (size_t)(at - key), "%s%s", to[p], tail);
            paired = 1;
        } else if (strstr(key, to[p])) {
            paired = 1;
        }
    }
    if (!paired) return DSQ_OK;
    for (size_t i = 0; i < ex->npair; i++) {
        if (strcmp(ex->pair_key[i], key) != 0) continue;
        if (ex->pair_scale[i] != v->act_scale || ex->pair_off[i] != v->act_offset)
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, x->name, -1,
                            "fused pair members have different static activation parameters "
                            "(input_scale %g / offset %d vs %g / %d): vllm-ascend loads one slot for "
                            "both; use --scheme w8a8-dynamic", (double)v->act_scale, (int)v->act_offset,
                            (double)ex->pair_scale[i], (int)ex->pair_off[i]);
        return DSQ_OK;
    }
    size_t n = ex->npair + 1;
    char **k = realloc(ex->pair_key, n * sizeof *k);
    if (k) ex->pair_key = k;
    float *sc = realloc(ex->pair_scale, n * sizeof *sc);
    if (sc) ex->pair_scale = sc;
    int32_t *of = realloc(ex->pair_off, n * sizeof *of);
    if (of) ex->pair_off = of;
    char *dup = strdup(key);
    if (!k || !sc || !of || !dup) {
        free(dup);
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    ex->pair_key[ex->npair] = dup;
    ex->pair_scale[ex->npair] = v->act_scale;
    ex->pair_off[ex->npair] = v->act_offset;
    ex->npair++;
    return DSQ_OK;
}

int dsq_x_fill(dsq_export *ex, const dsq_xtensor *x, const dsq_qview *v, uint8_t *dst, dsq_diag *d)
{
    const int64_t N = v->shape.rows, K = v->shape.cols, G = v->layout.ngroups;
    switch (x->kind) {
    case XK_FLOAT:
        return fill_float(ex, x, v, dst, d);
    case XK_I8:
        for (int64_t n = 0; n < N; n++) memcpy(dst + (size_t)n * (size_t)K, v->w + (size_t)n * v->layout.row_bytes, (size_t)K);
        return DSQ_OK;
    case XK_I8_FROM_I4: {
        uint8_t *c = malloc((size_t)K + 128);
        if (!c) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, x->name, -1, "out of memory");
        for (int64_t n = 0; n < N; n++) {
            row_codes(v, n, c);
            uint8_t *o = dst + (size_t)n * (size_t)K;
            for (int64_t k = 0; k < K; k++) o[k] = (uint8_t)(int8_t)(c[k] - 8);
        }
        free(c);
        return DSQ_OK;
    }
    case XK_SCALE:
        for (int64_t n = 0; n < N; n++)
            for (int64_t g = 0; g < G; g++)
                if (put_float(ex, x->dtype, dst, (size_t)(n * G + g), scale_at(v, n, g), 1) < 0)
                    return scale_overflow(x, n, g, scale_at(v, n, g), d);
        return DSQ_OK;
    case XK_ZEROS_F32:   /* [N, 1]: N from the view (a row piece is shorter) */
        memset(dst, 0, (size_t)N * (size_t)(x->nbytes / (uint64_t)x->shape[0]));
        return DSQ_OK;
    case XK_INPUT_SCALE:
        DSQ_TRY(pair_check(ex, x, v, d));
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
            float f = v->act_scale * scale_at(v, n, 0);
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
    case XK_ASC_W4:
    case XK_ASC_SCALE_BIAS:
    case XK_AWQ_QWEIGHT:
    case XK_CT_PACKED:
        return fill_int4(ex, x, v, dst, d);
    case XK_AWQ_QZEROS: {
        /* Nibble i of word c holds output column 8c + ORDER[i], ORDER =
         * [0,2,4,6,1,3,5,7]; REV[o] is the nibble of column offset o. */
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
                if (put_float(ex, DSQ_DTYPE_F16, dst, (size_t)(g * N + n), scale_at(v, n, g), 1) < 0)
                    return scale_overflow(x, n, g, scale_at(v, n, g), d);
        return DSQ_OK;
    case XK_CT_ZP: {
        /* Signed zero point z - 8, stored + 8 (= dsq's zero), 8 consecutive
         * output rows per int32 (packed along dim 0). */
        memset(dst, 0, x->nbytes);
        uint32_t *o = (uint32_t *)dst;
        for (int64_t n = 0; n < N; n++)
            for (int64_t g = 0; g < G; g++)
                o[(size_t)(n / 8) * (size_t)G + (size_t)g] |= (uint32_t)v->zeros[(size_t)n * (size_t)G + (size_t)g]
                                                           << (4 * (n & 7));
        return DSQ_OK;
    }
    case XK_CT_SHAPE: {
        int64_t s[2] = { N, K };
        memcpy(dst, s, 16);
        return DSQ_OK;
    }
    }
    return dsq_fail(d, DSQ_ERR_INTERNAL, NULL, x->name, -1, "unknown export kind %d", (int)x->kind);
}
