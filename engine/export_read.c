/* export_read.c - export tensors -> dsq scheme blobs (see export_read.h).
 * Contracts: ../shared/docs/formats.md 3.1-3.3 (AWQ), 4.2-4.5 (Ascend),
 * 5.2 (compressed-tensors). The blob layout is quant/scheme.h's; codes are
 * copied, never re-quantized, so the engine computes with exactly the
 * integers the export holds. */
#include "export_read_internal.h"
#include "kernels.h"
#include "scheme.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the table --------------------------------------------------------------- */

typedef struct reader {
    enum dsq_export_qtype type;
    const char *primary;     /* tensor suffix that marks the linear as quantized */
    int (*read)(const rd *r, qb *b, float **bias);
} reader;

static const reader READERS[] = {
    { DSQ_EQ_ASCEND_W8A8_DYNAMIC, "weight",        dsq_xr_ascend_w8a8_dynamic },
    { DSQ_EQ_ASCEND_W8A8,         "weight",        dsq_xr_ascend_w8a8 },
    { DSQ_EQ_ASCEND_W4A8_DYNAMIC, "weight",        dsq_xr_ascend_w4a8 },
    { DSQ_EQ_AWQ_GEMM,            "qweight",       dsq_xr_awq_gemm },
    { DSQ_EQ_CT_PACK,             "weight_packed", dsq_xr_ct_pack },
    { DSQ_EQ_CT_INT,              "weight",        dsq_xr_ct_int },
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
            return dsq_fail(r->d, DSQ_ERR_FORMAT, dsq_xr_file_of(r, t), name, (int64_t)t->file_offset,
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
            return dsq_fail(r->d, DSQ_ERR_FORMAT, dsq_xr_file_of(r, ta), a, (int64_t)ta->file_offset,
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
        if (!dsq_st_find(st, qn) && wt && dsq_xr_is_float_dt(wt->dtype)) r.spec.type = DSQ_EQ_FLOAT;
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
