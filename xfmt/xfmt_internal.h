/* xfmt_internal.h - what the format files (xfmt_ascend.c, xfmt_awq.c,
 * xfmt_ct.c) share with xfmt.c, xfmt_detect.c and xfmt_read.c: the parsed
 * description, module matchers, the per-linear reading context and the blob
 * under construction. Not a public header. */
#ifndef DSQ_XFMT_INTERNAL_H
#define DSQ_XFMT_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include "dsq_mem.h"
#include "xfmt.h"

#include <json-c/json.h>
#include <pcre2.h>
#include <string.h>

#define CT_MAX_GROUPS 64
#define XFMT_SCHEMES_END 0xFFFFFFFFu

/* ---- the parsed description ---- */

/* A module matcher: exact name, substring (AWQ), or anchored regex ("re:").
 * compressed-tensors semantics, read from vllm-project/compressed-tensors
 * @0186d7ae src/compressed_tensors/utils/match.py (match_name / is_match):
 * "re:P" is re.match(P, name) (anchored at the start only), anything else is
 * name equality; "Linear" matches every linear class (LinearBase); a module
 * is quantized when a target matches and no ignore entry does. */
typedef struct dsq_xmatcher {
    char *text;
    pcre2_code *re;          /* "re:" patterns */
    int is_linear_class;     /* CT target "Linear" */
} dsq_xmatcher;

typedef struct dsq_xct_group {
    dsq_xmatcher *targets;
    size_t n_targets;
    int has_weights, bits, group_size, symmetric, is_float;
    int has_input, input_dynamic;
    char format[32];
} dsq_xct_group;

typedef struct dsq_xdesc_entry { char *name; char *type; } dsq_xdesc_entry;

struct dsq_export_info {
    enum dsq_export_kind kind;
    const dsq_xfmt *f;
    char file[512];
    char torch_dtype[32];    /* config.json torch_dtype (or dtype), "" if absent */
    /* ascend */
    dsq_xdesc_entry *desc;
    size_t n_desc;
    int ascend_group_size;
    /* awq */
    int awq_group, awq_zero_point;
    dsq_xmatcher *skip;      /* AWQ modules_to_not_convert (substrings) / CT ignore */
    size_t n_skip;
    /* ct */
    dsq_xct_group groups[CT_MAX_GROUPS];
    size_t n_groups;
    char ct_format[32];
};

/* JSON list of strings -> matchers ("re:" compiled when regex_ok). */
int  dsq_xm_parse(json_object *arr, const char *file, const char *key, int regex_ok,
                  dsq_xmatcher **out, size_t *n, dsq_diag *d);
void dsq_xm_free(dsq_xmatcher *m, size_t n);
int  dsq_xm_re_match(const pcre2_code *re, const char *s);
/* Any matcher matches module (substring: plain entries match as substrings). */
int  dsq_xm_any(const dsq_xmatcher *m, size_t n, const char *module, int substring);
/* Modules no target loader quantizes (embedding, lm_head, router, outside
 * the decoder layers). */
int  dsq_x_always_float(const char *module);

/* ---- reading one linear ---- */

typedef struct dsq_xrd {
    const dsq_export_info *x;
    const dsq_st_model *st;
    const char *module;
    dsq_export_spec spec;
    int64_t N, K;             /* out_features, in_features */
    dsq_diag *d;
} rd;

/* blob under construction */
typedef struct dsq_xqb {
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

#endif
