/* st_read.c - dsq_st_read_rows_f32: dtype -> float32 row conversion.
 *
 * Hot paths (BF16 for DeepSeek/Llama checkpoints, FP8 for DeepSeek) are
 * written as fixed-width inner blocks over restrict pointers so GCC at -O2
 * vectorizes them without -O3; source bytes are loaded with memcpy because
 * safetensors does not guarantee alignment. No state is shared, so any
 * number of threads may convert at once. */
#include "st_internal.h"
#include "dsq_mem.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#define BLK 16

static void cvt_bf16(const uint8_t *restrict src, float *restrict dst, size_t n)
{
    size_t i = 0;
    for (; i + BLK <= n; i += BLK) {
        uint16_t h[BLK];
        uint32_t u[BLK];
        memcpy(h, src + 2 * i, sizeof h);
        for (int k = 0; k < BLK; k++) u[k] = (uint32_t)h[k] << 16;
        memcpy(dst + i, u, sizeof u);
    }
    for (; i < n; i++) dst[i] = dsq_bf16_to_f32(dsq_load_u16le(src + 2 * i));
}

/* Branch-free half -> float (F. Giesen's half_to_float): move exponent and
 * mantissa into place and rebias; inf/NaN get the float max exponent, and
 * subnormals are renormalised by one float subtraction on normal operands
 * (no slow denormal arithmetic). Only selects, so GCC vectorizes it.
 * Bit-identical to dsq_f16_to_f32 (tested on all 65536 values). */
static inline uint32_t f16_bits(uint16_t h)
{
    uint32_t o = (uint32_t)(h & 0x7fffu) << 13;
    uint32_t e = o & 0x0f800000u;
    o += 0x38000000u;                                   /* (127 - 15) << 23 */
    uint32_t infnan = o + 0x38000000u;                  /* (128 - 16) << 23 */
    uint32_t sub = dsq_f32_bits(dsq_bits_f32(o + 0x00800000u) - dsq_bits_f32(0x38800000u));
    uint32_t r = e == 0x0f800000u ? infnan : e == 0 ? sub : o;
    return r | (uint32_t)(h & 0x8000u) << 16;
}

/* The same on four lanes with GCC/clang vector extensions (SSE2 / NEON);
 * plain loops over f16_bits do not vectorize at -O2. */
typedef uint32_t v4u __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));
typedef float v4f __attribute__((vector_size(16)));

static void cvt_f16(const uint8_t *restrict src, float *restrict dst, size_t n)
{
    size_t i = 0;
    const v4f magic = { 0x1p-14f, 0x1p-14f, 0x1p-14f, 0x1p-14f };   /* bits 0x38800000 */
    for (; i + 4 <= n; i += 4) {
        uint16_t h[4];
        memcpy(h, src + 2 * i, sizeof h);
        v4u x = { h[0], h[1], h[2], h[3] };
        v4u o = (x & 0x7fffu) << 13;
        v4u e = o & 0x0f800000u;
        o += 0x38000000u;
        v4u infnan = o + 0x38000000u;
        v4f sf = (v4f)(o + 0x00800000u) - magic;
        v4u sub = (v4u)sf;
        v4u is_inf = (v4u)(v4i)(e == 0x0f800000u);
        v4u is_sub = (v4u)(v4i)(e == 0u);
        v4u r = (infnan & is_inf) | (sub & is_sub) | (o & ~(is_inf | is_sub));
        r |= (x & 0x8000u) << 16;
        memcpy(dst + i, &r, sizeof r);
    }
    for (; i < n; i++) {
        uint32_t u = f16_bits(dsq_load_u16le(src + 2 * i));
        memcpy(dst + i, &u, 4);
    }
}

/* 8-bit table formats, times a scale (1.0f when unscaled) */
static void cvt_tab(const uint8_t *restrict src, float *restrict dst, size_t n,
                    const float *restrict tab, float s)
{
    for (size_t i = 0; i < n; i++) dst[i] = tab[src[i]] * s;
}

static void cvt_row(enum dsq_dtype dt, const uint8_t *restrict src, float *restrict dst, size_t n)
{
    size_t i;
    switch (dt) {
    case DSQ_DTYPE_F32:  memcpy(dst, src, n * 4); break;
    case DSQ_DTYPE_BF16: cvt_bf16(src, dst, n); break;
    case DSQ_DTYPE_F16:  cvt_f16(src, dst, n); break;
    case DSQ_DTYPE_F64:
        for (i = 0; i < n; i++) { double v; memcpy(&v, src + 8 * i, 8); dst[i] = (float)v; }
        break;
    case DSQ_DTYPE_F8_E4M3: cvt_tab(src, dst, n, dsq_fp8_e4m3_table, 1.0f); break;
    case DSQ_DTYPE_F8_E5M2: cvt_tab(src, dst, n, dsq_fp8_e5m2_table, 1.0f); break;
    case DSQ_DTYPE_F8_E8M0: for (i = 0; i < n; i++) dst[i] = dsq_fp8_e8m0_to_f32(src[i]); break;
    case DSQ_DTYPE_BOOL: for (i = 0; i < n; i++) dst[i] = src[i] ? 1.0f : 0.0f; break;
    case DSQ_DTYPE_U8:   for (i = 0; i < n; i++) dst[i] = (float)src[i]; break;
    case DSQ_DTYPE_I8:   for (i = 0; i < n; i++) dst[i] = (float)(int8_t)src[i]; break;
    case DSQ_DTYPE_I16:
        for (i = 0; i < n; i++) { int16_t v; memcpy(&v, src + 2 * i, 2); dst[i] = (float)v; }
        break;
    case DSQ_DTYPE_U16:
        for (i = 0; i < n; i++) { uint16_t v; memcpy(&v, src + 2 * i, 2); dst[i] = (float)v; }
        break;
    case DSQ_DTYPE_I32:
        for (i = 0; i < n; i++) { int32_t v; memcpy(&v, src + 4 * i, 4); dst[i] = (float)v; }
        break;
    case DSQ_DTYPE_U32:
        for (i = 0; i < n; i++) { uint32_t v; memcpy(&v, src + 4 * i, 4); dst[i] = (float)v; }
        break;
    case DSQ_DTYPE_I64:
        for (i = 0; i < n; i++) { int64_t v; memcpy(&v, src + 8 * i, 8); dst[i] = (float)v; }
        break;
    case DSQ_DTYPE_U64:
        for (i = 0; i < n; i++) { uint64_t v; memcpy(&v, src + 8 * i, 8); dst[i] = (float)v; }
        break;
    default: break;   /* excluded by the caller */
    }
}

static int rows_f32(const dsq_st_model *m, const dsq_st_tensor *t, const uint8_t *src_rows,
                    int64_t row0, int64_t nrows, float *out, dsq_diag *d)
{
    const struct st_entry *e = st_entry_checked(m, t);
    if (!e)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, t ? t->name : NULL, -1,
                        "tensor does not belong to this model");
    const char *path = m->shards[t->shard].path;
    if (!dsq_dtype_to_f32_supported(t->dtype))
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, path, t->name, (int64_t)t->file_offset,
                        "cannot convert %s to float32", dsq_dtype_name(t->dtype));
    int64_t rows = dsq_st_rows(t), cols = dsq_st_cols(t);
    if (row0 < 0 || nrows < 0 || row0 > rows || nrows > rows - row0)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, path, t->name, -1,
                        "rows [%lld, %lld) outside [0, %lld)", (long long)row0,
                        (long long)(row0 + nrows), (long long)rows);
    if (nrows == 0 || cols == 0) return DSQ_OK;
    if (!out) return dsq_fail(d, DSQ_ERR_INVALID_ARG, path, t->name, -1, "no output buffer");

    size_t esz = dsq_dtype_bits(t->dtype) / 8;
    size_t ncols = (size_t)cols;
    const dsq_st_tensor *sc = e->scale >= 0 ? &m->ents[e->scale].t : NULL;

    if (!sc) {
        /* rows are contiguous: convert the whole range in one pass */
        cvt_row(t->dtype, src_rows ? src_rows : t->data + (size_t)row0 * ncols * esz, out,
                (size_t)nrows * ncols);
        return DSQ_OK;
    }

    /* block-scaled fp8: W[i,j] = fp8[i,j] * s[i/128][j/128] (DeepSeek
     * weight_dequant); the last row/column block may be partial */
    const float *tab = t->dtype == DSQ_DTYPE_F8_E4M3 ? dsq_fp8_e4m3_table : dsq_fp8_e5m2_table;
    size_t ncb = (size_t)sc->shape[1];
    for (int64_t r = 0; r < nrows; r++) {
        size_t i = (size_t)(row0 + r);
        const uint8_t *src = src_rows ? src_rows + (size_t)r * ncols : t->data + i * ncols;
        const uint8_t *srow = sc->data + (i / DSQ_ST_FP8_BLOCK) * ncb * 4;
        float *dst = out + (size_t)r * ncols;
        for (size_t jb = 0; jb < ncb; jb++) {
            size_t j0 = jb * DSQ_ST_FP8_BLOCK;
            size_t n = ncols - j0 < DSQ_ST_FP8_BLOCK ? ncols - j0 : DSQ_ST_FP8_BLOCK;
            float s;
            memcpy(&s, srow + 4 * jb, 4);
            cvt_tab(src + j0, dst + j0, n, tab, s);
        }
    }
    return DSQ_OK;
}

int dsq_st_read_rows_f32(const dsq_st_model *m, const dsq_st_tensor *t,
                         int64_t row0, int64_t nrows, float *out, dsq_diag *d)
{
    return rows_f32(m, t, NULL, row0, nrows, out, d);
}

int dsq_st_rows_f32_from(const dsq_st_model *m, const dsq_st_tensor *t, const void *src,
                         int64_t row0, int64_t nrows, float *out, dsq_diag *d)
{
    if (!src && nrows > 0)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, t ? t->name : NULL, -1, "no source rows");
    return rows_f32(m, t, src, row0, nrows, out, d);
}

int dsq_st_pread_rows(const dsq_st_model *m, const dsq_st_tensor *t, int64_t row0, int64_t nrows,
                      void *dst, dsq_diag *d)
{
    const struct st_entry *e = st_entry_checked(m, t);
    if (!e)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, t ? t->name : NULL, -1,
                        "tensor does not belong to this model");
    const struct st_shard *sh = &m->shards[t->shard];
    int64_t rows = dsq_st_rows(t);
    if (row0 < 0 || nrows < 0 || row0 > rows || nrows > rows - row0)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, sh->path, t->name, -1,
                        "rows [%lld, %lld) outside [0, %lld)", (long long)row0,
                        (long long)(row0 + nrows), (long long)rows);
    if (!sh->mapped || sh->map.fd < 0) return DSQ_ERR_UNSUPPORTED;
    /* offsets scale with the row index: nbytes is a whole number of rows */
    uint64_t a = rows > 0 ? t->nbytes * (uint64_t)row0 / (uint64_t)rows : 0;
    uint64_t b = rows > 0 ? t->nbytes * (uint64_t)(row0 + nrows) / (uint64_t)rows : 0;
    uint8_t *p = dst;
    uint64_t off = t->file_offset + a, left = b - a;
    while (left) {
        ssize_t r = pread(sh->map.fd, p, (size_t)left, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return dsq_fail_errno(d, errno, sh->path, "read failed at byte %llu", (unsigned long long)off);
        if (r == 0)   /* the file shrank under us */
            return dsq_fail(d, DSQ_ERR_TRUNCATED, sh->path, t->name, (int64_t)off, "file ends early");
        p += r;
        off += (uint64_t)r;
        left -= (uint64_t)r;
    }
    return DSQ_OK;
}
