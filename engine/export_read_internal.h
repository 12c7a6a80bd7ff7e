/* export_read_internal.h - shared pieces of the export readers
 * (engine/export_read*.c): the per-linear context, the blob under
 * construction, tensor checks and blob writers. Not a public header. */
#ifndef DSQ_EXPORT_READ_INTERNAL_H
#define DSQ_EXPORT_READ_INTERNAL_H

#include "dsq_mem.h"
#include "export_read.h"
#include "scheme.h"

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

/* dsq_xr_need: "<module>.<suffix>" must exist with dtype dt (ANY_FLOAT: F32,
 * F16 or BF16) and shape [d0] (d1 < 0) or [d0, d1]; a [1] tensor may be rank
 * 0. optional: absent gives DSQ_OK with *out NULL. Errors name file and tensor. */
const char *dsq_xr_file_of(const rd *r, const dsq_st_tensor *t);
int  dsq_xr_is_float_dt(enum dsq_dtype dt);
int  dsq_xr_need(const rd *r, const char *suffix, enum dsq_dtype dt, int64_t d0, int64_t d1,
                 int optional, const dsq_st_tensor **out);
int  dsq_xr_floats(const rd *r, const dsq_st_tensor *t, float **out);      /* all values as f32, malloc'd */
int  dsq_xr_bad_value(const rd *r, const dsq_st_tensor *t, uint64_t i, const char *what, double v);
int  dsq_xr_positive_scales(const rd *r, const dsq_st_tensor *t, const float *s);
int  dsq_xr_qb_new(const rd *r, uint32_t id, int32_t group, qb *b);       /* zeroed blob of scheme id */
void dsq_xr_put_rowsums(qb *b);
int  dsq_xr_zero_offsets(const rd *r);                                    /* Ascend weight_offset == 0 */

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

static inline int8_t i8_at(const dsq_st_tensor *t, uint64_t i) { return (int8_t)t->data[i]; }
static inline int32_t i32_at(const dsq_st_tensor *t, uint64_t i) { return (int32_t)dsq_load_u32le(t->data + 4 * i); }
/* readers: fill *b from the export's tensors (export_read_ascend.c, export_read_hf.c) */
int dsq_xr_ascend_w8a8_dynamic(const rd *r, qb *b, float **bias);
int dsq_xr_ascend_w8a8(const rd *r, qb *b, float **bias);
int dsq_xr_ascend_w4a8(const rd *r, qb *b, float **bias);
int dsq_xr_awq_gemm(const rd *r, qb *b, float **bias);
int dsq_xr_ct_pack(const rd *r, qb *b, float **bias);
int dsq_xr_ct_int(const rd *r, qb *b, float **bias);

#endif
