/* model.c - open a model: config, weight views, lazy layers, linear calls.
 *
 * Weights come from a safetensors checkpoint (dsq_st_*) or a .dsq container
 * (dsq_ctr_*). Every matrix becomes a dsq_qview so the forward pass calls
 * scheme->gemm without caring where the bytes live:
 *   - safetensors BF16 / F32 whose rows already have the blob stride
 *     (row_bytes == element size * cols, true for any cols % 32 == 0) are
 *     viewed in place in the mapping: zero copies;
 *   - other BF16 / F32, F16 (-> F32) and FP8-block (-> BF16, the
 *     fp8_cast_bf16.py result) are converted once into an owned blob;
 *   - .dsq payloads holding a scheme blob ("DSQW" header) are validated with
 *     dsq_qview_init, in place when stored raw, else decompressed once; a
 *     payload of plain BF16/F16/F32 values (src_dtype) is handled like a
 *     safetensors tensor.
 * Norm weights and biases are small float32 copies. */
#include "model.h"
#include "llama2c.h"
#include "container.h"
#include "container_set.h"
#include "model_verify.h"
#include "dsq_mem.h"
#include "dsq_file.h"
#include "export_read.h"
#include "safetensors.h"

#include <cblas.h>
#include <json-c/json.h>
#include <pthread.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dsq_router_from_config(const dsq_model_config *c, dsq_router *r)
{
    memset(r, 0, sizeof *r);
    r->n_experts = (int)c->n_routed_experts;
    r->top_k = (int)c->num_experts_per_tok;
    r->n_group = (int)c->n_group;
    r->topk_group = (int)c->topk_group;
    r->score_func = c->scoring_func;
    r->topk_method = c->topk_method;
    r->norm_topk_prob = c->norm_topk_prob;
    /* V3 (HF and inference/model.py) scales after normalising; V2 scales
     * only the unnormalised weights. */
    r->scale_always = dsq_arch_get(c->arch)->v3_moe;
    r->routed_scaling_factor = (float)c->routed_scaling_factor;
}

/* ---- ownership lists ---------------------------------------------------- */

typedef struct loader {
    dsq_model *m;
    void ***owned;
    int *n_owned, *cap_owned;
    dsq_diag *d;
} loader;

static int own(loader *L, void *p)
{
    if (!p) return DSQ_ERR_NOMEM;
    if (*L->n_owned == *L->cap_owned) {
        int cap = *L->cap_owned ? *L->cap_owned * 2 : 16;
        void **n = realloc(*L->owned, (size_t)cap * sizeof *n);
        if (!n) { free(p); return DSQ_ERR_NOMEM; }
        *L->owned = n;
        *L->cap_owned = cap;
    }
    (*L->owned)[(*L->n_owned)++] = p;
    return DSQ_OK;
}

static void free_owned(void ***owned, int *n, int *cap)
{
    for (int i = 0; i < *n; i++) free((*owned)[i]);
    free(*owned);
    *owned = NULL;
    *n = *cap = 0;
}

void dsq_model_opts_default(dsq_model_opts *o)
{
    memset(o, 0, sizeof *o);
    o->threads = 0;
    o->mla_mode = DSQ_MLA_AUTO;
}

/* ---- source tensors -------------------------------------------------- */

typedef struct src_tensor {
    const char *name;
    int ndim;
    int64_t shape[8];
    const dsq_st_tensor *st;
    const dsq_ctr_tensor_info *ct;
    dsq_ctr *shard;            /* the .dsq holding ct */
} src_tensor;

static int src_find(const dsq_model *m, const char *name, src_tensor *t)
{
    memset(t, 0, sizeof *t);
    t->name = name;
    if (m->st) {
        t->st = dsq_st_find(m->st, name);
        if (!t->st) return DSQ_ERR_NOT_FOUND;
        t->ndim = t->st->ndim;
        for (int i = 0; i < t->ndim && i < 8; i++) t->shape[i] = t->st->shape[i];
    } else {
        t->ct = dsq_ctr_set_find(m->ctr, name, &t->shard);
        if (!t->ct) return DSQ_ERR_NOT_FOUND;
        t->ndim = (int)t->ct->ndim;
        for (int i = 0; i < t->ndim && i < 8; i++) t->shape[i] = t->ct->shape[i];
    }
    return DSQ_OK;
}

static int64_t src_numel(const src_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

static int missing(loader *L, const char *name)
{
    return dsq_fail(L->d, DSQ_ERR_NOT_FOUND, L->m->path, name, -1, "tensor missing from checkpoint");
}

/* Container payload bytes: in place when stored raw, else decompressed
 * into an owned 64-byte aligned buffer. */
static int ctr_bytes(loader *L, const src_tensor *t, const uint8_t **out)
{
    const dsq_ctr_tensor_info *ct = t->ct;
    const void *p = dsq_ctr_raw_ptr(t->shard, ct);
    if (p) { *out = p; return DSQ_OK; }
    uint8_t *buf = dsq_aligned_alloc((size_t)ct->raw_size);
    if (!buf) return dsq_fail(L->d, DSQ_ERR_NOMEM, L->m->path, ct->name, -1, "cannot allocate %llu bytes",
                              (unsigned long long)ct->raw_size);
    int rc = dsq_ctr_read(t->shard, ct, buf, (size_t)ct->raw_size, L->d);
    if (rc < 0) { free(buf); return rc; }
    DSQ_TRY(own(L, buf));
    *out = buf;
    return DSQ_OK;
}

static int is_blob(const uint8_t *p, uint64_t n)
{
    return n >= DSQ_QBLOB_HEADER && memcmp(p, DSQ_QBLOB_MAGIC, 4) == 0;
}

/* float value i of a plain little-endian array of dtype dt */
static float plain_at(const uint8_t *p, enum dsq_dtype dt, int64_t i)
{
    switch (dt) {
    case DSQ_DTYPE_BF16: return dsq_bf16_to_f32(dsq_load_u16le(p + 2 * i));
    case DSQ_DTYPE_F16:  return dsq_f16_to_f32(dsq_load_u16le(p + 2 * i));
    default:             return dsq_bits_f32(dsq_load_u32le(p + 4 * i));
    }
}

static enum dsq_dtype plain_dtype(const dsq_ctr_tensor_info *ct)
{
    enum dsq_dtype dt = dsq_dtype_from_name(ct->src_dtype);
    if (dt != DSQ_DTYPE_BF16 && dt != DSQ_DTYPE_F16 && dt != DSQ_DTYPE_F32) {
        /* no usable source dtype: trust the scheme id of a passthrough row */
        if (ct->scheme == DSQ_SCHEME_BF16) dt = DSQ_DTYPE_BF16;
        else if (ct->scheme == DSQ_SCHEME_F32) dt = DSQ_DTYPE_F32;
        else return DSQ_DTYPE_INVALID;
    }
    return dt;
}

/* ---- float vectors (norms, biases, router bias) ---------------------- */

static int load_vec(loader *L, const char *name, int64_t n, float **out, int optional)
{
    *out = NULL;
    src_tensor t;
    if (src_find(L->m, name, &t) < 0) return optional ? DSQ_OK : missing(L, name);
    if (src_numel(&t) != n)
        return dsq_fail(L->d, DSQ_ERR_SHAPE, L->m->path, name, -1,
                        "has %lld values, config.json implies %lld", (long long)src_numel(&t), (long long)n);
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) return DSQ_ERR_NOMEM;
    int rc = DSQ_OK;
    if (t.st) {
        rc = dsq_st_read_rows_f32(L->m->st, t.st, 0, dsq_st_rows(t.st), v, L->d);
    } else {
        const uint8_t *p;
        rc = ctr_bytes(L, &t, &p);
        if (rc == DSQ_OK) {
            if (is_blob(p, t.ct->raw_size)) {
                dsq_qview qv;
                rc = dsq_qview_init(&qv, NULL, NULL, p, (size_t)t.ct->raw_size, L->d);
                if (rc == DSQ_OK && qv.shape.rows * qv.shape.cols != n)
                    rc = dsq_fail(L->d, DSQ_ERR_SHAPE, L->m->path, name, -1, "blob shape disagrees");
                if (rc == DSQ_OK) qv.scheme->dequantize(&qv, 0, qv.shape.rows, v);
            } else {
                enum dsq_dtype dt = plain_dtype(t.ct);
                if (dt == DSQ_DTYPE_INVALID || t.ct->raw_size != (uint64_t)n * dsq_dtype_bits(dt) / 8)
                    rc = dsq_fail(L->d, DSQ_ERR_UNSUPPORTED, L->m->path, name, (int64_t)t.ct->offset,
                                  "payload is neither a scheme blob nor plain %s values",
                                  t.ct->src_dtype ? t.ct->src_dtype : "?");
                else
                    for (int64_t i = 0; i < n; i++) v[i] = plain_at(p, dt, i);
            }
        }
    }
    if (rc < 0) { free(v); return rc; }
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i])) {
            free(v);
            return dsq_fail(L->d, DSQ_ERR_NONFINITE, L->m->path, name, -1, "value %lld is not finite", (long long)i);
        }
    DSQ_TRY(own(L, v));
    *out = v;
    return DSQ_OK;
}

/* ---- matrices ---------------------------------------------------------- */

/* View rows of plain BF16/F32 values in place when their stride is the
 * scheme's row stride. Returns 1 if it could, 0 if a copy is needed. */
static int view_in_place(const dsq_scheme *sc, int64_t rows, int64_t cols, const uint8_t *data,
                         size_t elem, dsq_qview *v)
{
    dsq_qshape shape;
    dsq_qlayout lay;
    if (dsq_qshape_init(&shape, sc, rows, cols, 0) < 0) return 0;
    if (dsq_qlayout_get(sc, &shape, &lay) < 0) return 0;
    if (lay.row_bytes != elem * (size_t)cols || ((uintptr_t)data & 3u)) return 0;
    memset(v, 0, sizeof *v);
    v->scheme = sc;
    v->shape = shape;
    v->layout = lay;
    v->blob = data;
    v->blob_size = (size_t)rows * lay.row_bytes;
    v->w = data;
    return 1;
}

/* Rows of a source tensor as float32, for the conversion path. */
typedef struct conv_job {
    loader *L;
    const src_tensor *t;
    const uint8_t *plain;        /* container plain payload, else NULL */
    enum dsq_dtype plain_dt;
    const dsq_scheme *sc;
    dsq_qshape shape;
    uint8_t *blob;
    int64_t rows_per_task;
    pthread_mutex_t mu;          /* guards rc and diag */
    int rc;                      /* first failure */
    dsq_diag diag;
} conv_job;

static void conv_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    conv_job *j = ctx;
    int64_t r0 = (int64_t)item * j->rows_per_task;
    int64_t nr = j->shape.rows - r0 < j->rows_per_task ? j->shape.rows - r0 : j->rows_per_task;
    pthread_mutex_lock(&j->mu);
    int failed = j->rc < 0;
    pthread_mutex_unlock(&j->mu);
    if (nr <= 0 || failed) return;
    int64_t cols = j->shape.cols;
    float *tmp = malloc((size_t)nr * (size_t)cols * sizeof *tmp);
    dsq_diag d;
    dsq_diag_clear(&d);
    int rc = DSQ_OK;
    if (!tmp) rc = DSQ_ERR_NOMEM;
    else if (j->t->st) rc = dsq_st_read_rows_f32(j->L->m->st, j->t->st, r0, nr, tmp, &d);
    else
        for (int64_t i = 0; i < nr * cols; i++) tmp[i] = plain_at(j->plain, j->plain_dt, r0 * cols + i);
    if (rc == DSQ_OK) rc = j->sc->quantize(tmp, r0, nr, &j->shape, NULL, j->blob, &d);
    free(tmp);
    pthread_mutex_lock(&j->mu);
    if (rc < 0 && j->rc == 0) { j->rc = rc; j->diag = d; }
    pthread_mutex_unlock(&j->mu);
}

/* Convert a whole source matrix into an owned blob of scheme sc. */
static int convert_matrix(loader *L, const src_tensor *t, const uint8_t *plain, enum dsq_dtype plain_dt,
                          const dsq_scheme *sc, int64_t rows, int64_t cols, dsq_qview *v)
{
    conv_job j;
    memset(&j, 0, sizeof j);
    j.L = L;
    j.t = t;
    j.plain = plain;
    j.plain_dt = plain_dt;
    j.sc = sc;
    DSQ_TRY(dsq_qshape_init(&j.shape, sc, rows, cols, 0));
    size_t size;
    DSQ_TRY(sc->blob_size(&j.shape, &size));
    j.blob = dsq_aligned_alloc(size);
    if (!j.blob) return dsq_fail(L->d, DSQ_ERR_NOMEM, L->m->path, t->name, -1, "cannot allocate %zu bytes", size);
    memset(j.blob, 0, size);
    /* ~4 MiB of float rows per task */
    j.rows_per_task = (int64_t)(((size_t)4 << 20) / ((size_t)cols * 4));
    if (j.rows_per_task < 1) j.rows_per_task = 1;
    size_t tasks = (size_t)((rows + j.rows_per_task - 1) / j.rows_per_task);
    pthread_mutex_init(&j.mu, NULL);
    dsq_pool_run(L->m->pool, tasks, conv_task, &j);
    pthread_mutex_destroy(&j.mu);
    if (j.rc < 0) {
        free(j.blob);
        if (L->d && L->d->status == 0) *L->d = j.diag;
        return dsq_fail(L->d, j.rc, L->m->path, t->name, -1, "cannot convert tensor");
    }
    DSQ_TRY(own(L, j.blob));
    int rc = dsq_qview_init(v, sc, &j.shape, j.blob, size, L->d);
    if (rc < 0) return dsq_fail(L->d, rc, L->m->path, t->name, -1, "converted blob does not validate");
    if (t->st) dsq_st_advise(L->m->st, t->st, DSQ_ST_DONTNEED);   /* drop the source pages */
    return DSQ_OK;
}

static int load_matrix(loader *L, const src_tensor *t, int64_t rows, int64_t cols, dsq_qview *v)
{
    dsq_model *m = L->m;
    if (t->st) {
        const dsq_st_tensor *s = t->st;
        if (s->ndim != 2 || s->shape[0] != rows || s->shape[1] != cols)
            return dsq_fail(L->d, DSQ_ERR_SHAPE, m->path, t->name, (int64_t)s->file_offset,
                            "shape is not [%lld, %lld] as config.json implies", (long long)rows, (long long)cols);
        switch (s->dtype) {
        case DSQ_DTYPE_BF16:
            if (view_in_place(dsq_scheme_by_id(DSQ_SCHEME_BF16), rows, cols, s->data, 2, v)) return DSQ_OK;
            return convert_matrix(L, t, NULL, 0, dsq_scheme_by_id(DSQ_SCHEME_BF16), rows, cols, v);
        case DSQ_DTYPE_F32:
            if (view_in_place(dsq_scheme_by_id(DSQ_SCHEME_F32), rows, cols, s->data, 4, v)) return DSQ_OK;
            return convert_matrix(L, t, NULL, 0, dsq_scheme_by_id(DSQ_SCHEME_F32), rows, cols, v);
        case DSQ_DTYPE_F16:      /* f16 -> bf16 would drop 3 mantissa bits: keep f32 */
            return convert_matrix(L, t, NULL, 0, dsq_scheme_by_id(DSQ_SCHEME_F32), rows, cols, v);
        case DSQ_DTYPE_F8_E4M3:
        case DSQ_DTYPE_F8_E5M2:  /* DeepSeek fp8_cast_bf16: W * scale rounded to bf16 */
            return convert_matrix(L, t, NULL, 0,
                                  dsq_scheme_by_id(m->opts.fp8_as_f32 ? DSQ_SCHEME_F32 : DSQ_SCHEME_BF16),
                                  rows, cols, v);
        default:
            return dsq_fail(L->d, DSQ_ERR_UNSUPPORTED, m->path, t->name, (int64_t)s->file_offset,
                            "dtype %s is not supported for weights", dsq_dtype_name(s->dtype));
        }
    }
    const dsq_ctr_tensor_info *ct = t->ct;
    if (ct->ndim != 2 || ct->shape[0] != rows || ct->shape[1] != cols)
        return dsq_fail(L->d, DSQ_ERR_SHAPE, m->path, t->name, (int64_t)ct->offset,
                        "shape is not [%lld, %lld] as config.json implies", (long long)rows, (long long)cols);
    const uint8_t *p;
    DSQ_TRY(ctr_bytes(L, t, &p));
    if (is_blob(p, ct->raw_size)) {
        const dsq_scheme *sc = dsq_scheme_by_id(ct->scheme);
        if (!sc)
            return dsq_fail(L->d, DSQ_ERR_UNSUPPORTED, m->path, t->name, (int64_t)ct->offset,
                            "unknown quantization scheme id %u", (unsigned)ct->scheme);
        int rc = dsq_qview_init(v, sc, NULL, p, (size_t)ct->raw_size, L->d);
        if (rc < 0) return dsq_fail(L->d, rc, m->path, t->name, (int64_t)ct->offset, "bad scheme blob");
        if (v->shape.rows != rows || v->shape.cols != cols)
            return dsq_fail(L->d, DSQ_ERR_SHAPE, m->path, t->name, (int64_t)ct->offset,
                            "blob is [%lld, %lld], expected [%lld, %lld]", (long long)v->shape.rows,
                            (long long)v->shape.cols, (long long)rows, (long long)cols);
        return DSQ_OK;
    }
    enum dsq_dtype dt = plain_dtype(ct);
    if (dt == DSQ_DTYPE_INVALID || ct->raw_size != (uint64_t)rows * (uint64_t)cols * dsq_dtype_bits(dt) / 8)
        return dsq_fail(L->d, DSQ_ERR_UNSUPPORTED, m->path, t->name, (int64_t)ct->offset,
                        "payload is neither a scheme blob nor plain BF16/F16/F32 values");
    if (dt == DSQ_DTYPE_BF16 && view_in_place(dsq_scheme_by_id(DSQ_SCHEME_BF16), rows, cols, p, 2, v))
        return DSQ_OK;
    if (dt == DSQ_DTYPE_F32 && view_in_place(dsq_scheme_by_id(DSQ_SCHEME_F32), rows, cols, p, 4, v))
        return DSQ_OK;
    return convert_matrix(L, t, p, dt, dsq_scheme_by_id(dt == DSQ_DTYPE_BF16 ? DSQ_SCHEME_BF16 : DSQ_SCHEME_F32),
                          rows, cols, v);
}

/* prefix.weight [out, in] plus an optional prefix.bias [out]. */
static int load_linear(loader *L, const char *prefix, int64_t out, int64_t in, dsq_linear *l)
{
    char name[512];
    memset(l, 0, sizeof *l);
    snprintf(name, sizeof name, "%s.weight", prefix);
    if (L->m->exp) {
        /* serving export: quantized linears arrive as a ready scheme blob */
        uint8_t *blob;
        size_t size;
        float *qbias;
        int q = dsq_export_read_linear(L->m->exp, L->m->st, prefix, out, in, &blob, &size, &qbias, L->d);
        if (q < 0) return q;
        if (q == 1) {
            DSQ_TRY(own(L, blob));
            if (qbias) DSQ_TRY(own(L, qbias));
            int rc = dsq_qview_init(&l->w, NULL, NULL, blob, size, L->d);
            if (rc < 0) return dsq_fail(L->d, rc, L->m->path, name, -1, "export tensors give an invalid blob");
            l->out = out;
            l->in = in;
            l->name = strdup(name);
            DSQ_TRY(own(L, l->name));
            snprintf(name, sizeof name, "%s.bias", prefix);
            float *b;
            DSQ_TRY(load_vec(L, name, out, &b, 1));
            l->bias = b ? b : qbias;   /* an explicit bias tensor wins over quant_bias */
            return DSQ_OK;
        }
    }
    src_tensor t;
    if (src_find(L->m, name, &t) < 0) return missing(L, name);
    DSQ_TRY(load_matrix(L, &t, out, in, &l->w));
    l->out = out;
    l->in = in;
    l->name = strdup(name);
    DSQ_TRY(own(L, l->name));
    snprintf(name, sizeof name, "%s.bias", prefix);
    float *b;
    DSQ_TRY(load_vec(L, name, out, &b, 1));
    l->bias = b;
    return DSQ_OK;
}

static int load_mlp(loader *L, const char *prefix, int64_t hidden, int64_t ffn, dsq_mlp *mlp)
{
    char p[400];
    snprintf(p, sizeof p, "%s.gate_proj", prefix);
    DSQ_TRY(load_linear(L, p, ffn, hidden, &mlp->gate));
    snprintf(p, sizeof p, "%s.up_proj", prefix);
    DSQ_TRY(load_linear(L, p, ffn, hidden, &mlp->up));
    snprintf(p, sizeof p, "%s.down_proj", prefix);
    DSQ_TRY(load_linear(L, p, hidden, ffn, &mlp->down));
    return DSQ_OK;
}

/* ---- layers -------------------------------------------------------------- */

/* kv_b_proj for the MLA paths: in place for BF16/F32, else an F32
 * dequantization (the one documented duplicate, see model.h). */
static int setup_kvb(loader *L, dsq_layer *ly)
{
    const dsq_qview *v = &ly->kv_b.w;
    uint32_t id = v->scheme->id;
    if (ly->kv_b.bias)
        return dsq_fail(L->d, DSQ_ERR_UNSUPPORTED, L->m->path, ly->kv_b.name, -1,
                        "kv_b_proj with a bias cannot be absorbed");
    ly->kv_b_run = ly->kv_b;
    if (id != DSQ_SCHEME_BF16 && id != DSQ_SCHEME_F32) {
        const dsq_scheme *f32 = dsq_scheme_by_id(DSQ_SCHEME_F32);
        dsq_qshape shape;
        size_t size;
        DSQ_TRY(dsq_qshape_init(&shape, f32, v->shape.rows, v->shape.cols, 0));
        DSQ_TRY(f32->blob_size(&shape, &size));
        uint8_t *blob = dsq_aligned_alloc(size);
        float *tmp = malloc((size_t)v->shape.cols * sizeof *tmp);
        if (!blob || !tmp) { free(blob); free(tmp); return DSQ_ERR_NOMEM; }
        memset(blob, 0, size);
        int rc = DSQ_OK;
        for (int64_t r = 0; r < v->shape.rows && rc == DSQ_OK; r++) {
            v->scheme->dequantize(v, r, 1, tmp);
            rc = f32->quantize(tmp, r, 1, &shape, NULL, blob, L->d);
        }
        free(tmp);
        if (rc < 0) { free(blob); return rc; }
        DSQ_TRY(own(L, blob));
        DSQ_TRY(dsq_qview_init(&ly->kv_b_run.w, f32, &shape, blob, size, L->d));
    }
    ly->kvb_rows = ly->kv_b_run.w.w;
    ly->kvb_stride = ly->kv_b_run.w.layout.row_bytes;
    ly->kvb_bf16 = ly->kv_b_run.w.scheme->id == DSQ_SCHEME_BF16;
    return DSQ_OK;
}

static int load_layer(dsq_model *m, int li, dsq_diag *d)
{
    const dsq_model_config *c = &m->cfg;
    dsq_layer *ly = &m->w.layers[li];
    loader L = { m, &ly->owned, &ly->n_owned, &ly->cap_owned, d };
    char p[256], name[300];
    const int64_t D = m->hidden, H = m->n_heads;

    snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", li);
    DSQ_TRY(load_vec(&L, name, D, &ly->attn_norm, 0));
    snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", li);
    DSQ_TRY(load_vec(&L, name, D, &ly->ffn_norm, 0));

    if (m->is_mla) {
        const int64_t qk = c->qk_head_dim, R = c->kv_lora_rank, rope = c->qk_rope_head_dim;
        if (c->q_lora_rank > 0) {
            snprintf(p, sizeof p, "model.layers.%d.self_attn.q_a_proj", li);
            DSQ_TRY(load_linear(&L, p, c->q_lora_rank, D, &ly->q_a));
            snprintf(name, sizeof name, "model.layers.%d.self_attn.q_a_layernorm.weight", li);
            DSQ_TRY(load_vec(&L, name, c->q_lora_rank, &ly->q_a_norm, 0));
            snprintf(p, sizeof p, "model.layers.%d.self_attn.q_b_proj", li);
            DSQ_TRY(load_linear(&L, p, H * qk, c->q_lora_rank, &ly->q_b));
        } else {
            snprintf(p, sizeof p, "model.layers.%d.self_attn.q_proj", li);
            DSQ_TRY(load_linear(&L, p, H * qk, D, &ly->q));
        }
        snprintf(p, sizeof p, "model.layers.%d.self_attn.kv_a_proj_with_mqa", li);
        DSQ_TRY(load_linear(&L, p, R + rope, D, &ly->kv_a));
        snprintf(name, sizeof name, "model.layers.%d.self_attn.kv_a_layernorm.weight", li);
        DSQ_TRY(load_vec(&L, name, R, &ly->kv_a_norm, 0));
        snprintf(p, sizeof p, "model.layers.%d.self_attn.kv_b_proj", li);
        DSQ_TRY(load_linear(&L, p, H * (c->qk_nope_head_dim + c->v_head_dim), R, &ly->kv_b));
        DSQ_TRY(setup_kvb(&L, ly));
        snprintf(p, sizeof p, "model.layers.%d.self_attn.o_proj", li);
        DSQ_TRY(load_linear(&L, p, D, H * c->v_head_dim, &ly->o));
        if (m->dsa) {
            const int64_t Hi = c->index_n_heads, Di = c->index_head_dim;
            snprintf(p, sizeof p, "model.layers.%d.self_attn.indexer.wq_b", li);
            DSQ_TRY(load_linear(&L, p, Hi * Di, c->q_lora_rank, &ly->idx_wq_b));
            snprintf(p, sizeof p, "model.layers.%d.self_attn.indexer.wk", li);
            DSQ_TRY(load_linear(&L, p, Di, D, &ly->idx_wk));
            snprintf(p, sizeof p, "model.layers.%d.self_attn.indexer.weights_proj", li);
            DSQ_TRY(load_linear(&L, p, Hi, D, &ly->idx_wp));
            snprintf(name, sizeof name, "model.layers.%d.self_attn.indexer.k_norm.weight", li);
            DSQ_TRY(load_vec(&L, name, Di, &ly->idx_knorm_w, 0));
            snprintf(name, sizeof name, "model.layers.%d.self_attn.indexer.k_norm.bias", li);
            DSQ_TRY(load_vec(&L, name, Di, &ly->idx_knorm_b, 0));
        }
    } else {
        const int64_t hd = m->head_dim, KVH = m->n_kv_heads;
        snprintf(p, sizeof p, "model.layers.%d.self_attn.q_proj", li);
        DSQ_TRY(load_linear(&L, p, H * hd, D, &ly->q));
        snprintf(p, sizeof p, "model.layers.%d.self_attn.k_proj", li);
        DSQ_TRY(load_linear(&L, p, KVH * hd, D, &ly->k));
        snprintf(p, sizeof p, "model.layers.%d.self_attn.v_proj", li);
        DSQ_TRY(load_linear(&L, p, KVH * hd, D, &ly->v));
        snprintf(p, sizeof p, "model.layers.%d.self_attn.o_proj", li);
        DSQ_TRY(load_linear(&L, p, D, H * hd, &ly->o));
    }

    ly->is_moe = dsq_model_config_is_moe_layer(c, li);
    if (ly->is_moe) {
        const int64_t E = c->n_routed_experts, F = c->moe_intermediate_size;
        snprintf(p, sizeof p, "model.layers.%d.mlp.gate", li);
        DSQ_TRY(load_linear(&L, p, E, D, &ly->router));
        snprintf(name, sizeof name, "model.layers.%d.mlp.gate.e_score_correction_bias", li);
        DSQ_TRY(load_vec(&L, name, E, &ly->router_bias, c->topk_method != DSQ_TOPK_NOAUX_TC));
        ly->experts = calloc((size_t)E, sizeof *ly->experts);
        DSQ_TRY(own(&L, ly->experts));
        for (int64_t e = 0; e < E; e++) {
            snprintf(p, sizeof p, "model.layers.%d.mlp.experts.%lld", li, (long long)e);
            DSQ_TRY(load_mlp(&L, p, D, F, &ly->experts[e]));
        }
        if (c->n_shared_experts > 0) {
            snprintf(p, sizeof p, "model.layers.%d.mlp.shared_experts", li);
            DSQ_TRY(load_mlp(&L, p, D, F * c->n_shared_experts, &ly->shared));
            ly->has_shared = 1;
        }
    } else {
        snprintf(p, sizeof p, "model.layers.%d.mlp", li);
        DSQ_TRY(load_mlp(&L, p, D, c->intermediate_size, &ly->mlp));
    }
    ly->loaded = 1;
    return DSQ_OK;
}

void dsq_model_layer_release(dsq_model *m, int li)
{
    if (!m || li < 0 || li >= m->n_layers) return;
    dsq_layer *ly = &m->w.layers[li];
    free_owned(&ly->owned, &ly->n_owned, &ly->cap_owned);
    memset(ly, 0, sizeof *ly);
}

int dsq_model_layer_load(dsq_model *m, int li, dsq_diag *d)
{
    if (!m || li < 0 || li >= m->n_layers)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "layer %d out of range", li);
    if (m->w.layers[li].loaded) return DSQ_OK;
    int rc = load_layer(m, li, d);
    if (rc < 0) dsq_model_layer_release(m, li);
    return rc;
}

/* ---- config and derived values ---------------------------------------- */

static int config_from_ctr(dsq_model *m, dsq_diag *d)
{
    size_t len;
    const char *meta = dsq_ctr_metadata(dsq_ctr_set_shard(m->ctr, 0), &len);
    json_tokener *tok = json_tokener_new();
    if (!tok) return DSQ_ERR_NOMEM;
    json_object *root = json_tokener_parse_ex(tok, meta, (int)len);
    json_tokener_free(tok);
    json_object *cfg = NULL;
    if (!root || !json_object_object_get_ex(root, "config", &cfg) ||
        !json_object_is_type(cfg, json_type_object)) {
        json_object_put(root);
        return dsq_fail(d, DSQ_ERR_NOT_FOUND, m->path, NULL, -1,
                        "metadata has no \"config\" object (the source config.json)");
    }
    const char *txt = json_object_to_json_string_ext(cfg, JSON_C_TO_STRING_PLAIN);
    int rc = dsq_model_config_from_json_string(&m->cfg, txt, strlen(txt), m->path, d);
    json_object_put(root);
    return rc;
}

static int setup_derived(dsq_model *m, dsq_diag *d)
{
    const dsq_model_config *c = &m->cfg;
    m->is_mla = dsq_arch_is_deepseek(c->arch);
    m->dsa = dsq_arch_get(c->arch)->dsa && c->index_topk > 0;
    if (m->opts.dsa_mode != DSQ_DSA_FP8 && m->opts.dsa_mode != DSQ_DSA_FLOAT)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, m->path, NULL, -1, "dsa mode %d: expected fp8 or float",
                        m->opts.dsa_mode);
    if (c->arch == DSQ_ARCH_UNKNOWN)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, m->path, NULL, -1, "unsupported architecture");
    if (m->opts.kv_cache < DSQ_KV_F32 || m->opts.kv_cache > DSQ_KV_FP8)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, m->path, NULL, -1, "kv cache mode %d: expected f32, bf16, int8 or fp8",
                        m->opts.kv_cache);
    if (m->opts.kv_cache != DSQ_KV_F32 && !m->is_mla)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, m->path, NULL, -1,
                        "a 16- or 8-bit KV cache is for MLA models (DeepSeek); this one caches K and V in float");
    if (c->hidden_act != DSQ_ACT_SILU)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, m->path, NULL, -1, "hidden_act '%s' is not supported (silu only)",
                        c->hidden_act_name);
    m->hidden = c->hidden_size;
    m->vocab = c->vocab_size;
    m->n_layers = c->num_hidden_layers;
    m->n_heads = c->num_attention_heads;
    m->n_kv_heads = c->num_key_value_heads;
    m->eps = (float)c->rms_norm_eps;
    if (m->hidden <= 0 || m->vocab <= 0 || m->n_layers <= 0 || m->n_heads <= 0 || m->vocab > INT32_MAX)
        return dsq_fail(d, DSQ_ERR_FORMAT, m->path, NULL, -1, "config.json has non-positive dimensions");

    dsq_rope_params rp;
    if (m->is_mla) {
        m->head_dim = c->qk_head_dim;
        m->q_dim = m->n_heads * c->qk_head_dim;
        m->kv_width = c->kv_lora_rank + c->qk_rope_head_dim;
        m->attn_out_dim = m->n_heads * c->v_head_dim;
        dsq_rope_params_default(&rp, (int)c->qk_rope_head_dim);
        rp.style = DSQ_ROPE_PAIRS;
    } else {
        m->head_dim = c->head_dim;
        m->q_dim = m->n_heads * c->head_dim;
        m->kv_width = 2 * m->n_kv_heads * c->head_dim;
        m->attn_out_dim = m->q_dim;
        dsq_rope_params_default(&rp, (int)c->head_dim);
        rp.style = DSQ_ROPE_HALF;
        if (m->n_kv_heads <= 0 || m->n_heads % m->n_kv_heads)
            return dsq_fail(d, DSQ_ERR_FORMAT, m->path, NULL, -1, "num_key_value_heads must divide num_attention_heads");
    }
    rp.theta = c->rope_theta;
    const dsq_rope_scaling *rs = &c->rope_scaling;
    rp.scaling = (int)rs->type;
    rp.factor = rs->factor;
    if (rs->original_max_position_embeddings > 0) rp.original_max_pos = (int)rs->original_max_position_embeddings;
    else if (c->max_position_embeddings > 0) rp.original_max_pos = (int)c->max_position_embeddings;
    rp.beta_fast = rs->beta_fast;
    rp.beta_slow = rs->beta_slow;
    rp.mscale = rs->mscale;
    rp.mscale_all_dim = rs->mscale_all_dim;
    rp.low_freq_factor = rs->low_freq_factor;
    rp.high_freq_factor = rs->high_freq_factor;
    /* DeepSeek follows inference/model.py (docs/checkpoints.md, "RoPE and
     * YaRN"): YaRN blending and
     * the mscale^2 softmax factor apply only when the context is longer than
     * original_seq_len (here max_position_embeddings vs
     * original_max_position_embeddings, as samples/dsv3_ref.py does), and
     * cos/sin are never scaled. For V3 / V2 configs (163840 > 4096, mscale ==
     * mscale_all_dim) this equals HF modeling_deepseek. */
    int yarn_on = rs->type == DSQ_ROPE_YARN;
    if (m->is_mla && yarn_on) {
        yarn_on = c->max_position_embeddings > rp.original_max_pos;
        if (!yarn_on) rp.scaling = DSQ_ROPE_NONE;
        rp.attention_factor = 1.0;
    }
    if (dsq_rope_init(&m->rope, &rp) < 0)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, m->path, NULL, -1, "rope settings not supported (dim %d)", rp.dim);
    if (m->dsa) {
        /* the indexer rotates the same frequencies in rotate-half pairs */
        m->index_rope = m->rope;
        m->index_rope.style = DSQ_ROPE_HALF;
        m->dsa_row = dsq_dsa_row_bytes(m);
    }

    double scale = 1.0 / sqrt((double)m->head_dim);
    if (m->is_mla && yarn_on) {
        /* softmax_scale *= (0.1 * mscale * ln(factor) + 1)^2
         * (docs/checkpoints.md, "Multi-head latent attention":
         * 192^-0.5 * 1.36889^2 = 0.135234 for V3) */
        double ms = dsq_yarn_get_mscale(rs->factor, rs->mscale);
        scale *= ms * ms;
    }
    m->attn_scale = (float)scale;

    m->max_ffn = 0;
    for (int64_t l = 0; l < m->n_layers; l++) {
        int64_t f = dsq_model_config_ffn_dim(c, l);
        if (dsq_model_config_is_moe_layer(c, l) && c->n_shared_experts > 0)
            f = c->moe_intermediate_size * c->n_shared_experts > f ? c->moe_intermediate_size * c->n_shared_experts : f;
        if (f > m->max_ffn) m->max_ffn = f;
    }
    if (c->n_routed_experts > 0) {
        if (c->n_routed_experts > DSQ_ROUTE_MAX_EXPERTS || c->n_group > DSQ_ROUTE_MAX_GROUPS)
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, m->path, NULL, -1, "too many experts or groups");
        dsq_router_from_config(c, &m->router);
    }
    int64_t ctx = c->max_position_embeddings > 0 ? c->max_position_embeddings : 4096;
    if (ctx > 4096) ctx = 4096;
    m->default_ctx = m->opts.max_ctx > 0 ? m->opts.max_ctx : ctx;
    if (m->opts.prefill_chunk <= 0) m->opts.prefill_chunk = 256;
    return DSQ_OK;
}

/* ---- open / free --------------------------------------------------------- */

/* A checkpoint with more decoder layers than config.json declares (its MTP
 * layers, DeepSeek's num_nextn_predict_layers, excepted) is another model's
 * config: the extra layers would silently be skipped or taken for MTP. The
 * converter refuses the same at plan time (convert_check.c). */
static int check_layer_count(const dsq_model *m, dsq_diag *d)
{
    int64_t first_absent = m->cfg.num_hidden_layers +
                           (dsq_arch_is_deepseek(m->cfg.arch) ? m->cfg.num_nextn_predict_layers : 0);
    char name[96];
    snprintf(name, sizeof name, "model.layers.%lld.input_layernorm.weight", (long long)first_absent);
    src_tensor t;
    if (src_find(m, name, &t) == DSQ_OK)
        return dsq_fail(d, DSQ_ERR_SHAPE, NULL, name, -1,
                        "config.json says num_hidden_layers = %lld (+%lld MTP) but the weights have layer %lld",
                        (long long)m->cfg.num_hidden_layers,
                        (long long)(dsq_arch_is_deepseek(m->cfg.arch) ? m->cfg.num_nextn_predict_layers : 0),
                        (long long)first_absent);
    return DSQ_OK;
}

int dsq_model_open(dsq_model **out, const char *path, const dsq_model_opts *opts, dsq_diag *d)
{
    *out = NULL;
    if (opts && (opts->bf16_terms < 0 || opts->bf16_terms > 3))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, path, NULL, -1, "bf16_terms %d: expected 0..3",
                        opts->bf16_terms);
    dsq_model_verify *vj = NULL;
    dsq_model *m = calloc(1, sizeof *m);
    if (!m) return DSQ_ERR_NOMEM;
    if (opts) m->opts = *opts;
    else dsq_model_opts_default(&m->opts);
    m->path = strdup(path);
    int rc = m->path ? DSQ_OK : DSQ_ERR_NOMEM;
    if (rc == DSQ_OK) {
        if (m->opts.pool) m->pool = m->opts.pool;
        else {
            m->pool = dsq_pool_create(m->opts.threads);
            m->own_pool = 1;
            if (!m->pool) rc = DSQ_ERR_NOMEM;
        }
        m->nthreads = dsq_pool_size(m->pool);
        /* The engine parallelises with its own pool and calls sgemm from
         * inside pool tasks; OpenBLAS's own threads on top would oversubscribe
         * the cores (and spin in the kernel), so keep it single-threaded. */
        openblas_set_num_threads(1);
    }
    if (rc == DSQ_OK) {
        if (dsq_ctr_set_is_dsq(path)) {
            rc = dsq_ctr_set_open(&m->ctr, path, d);
            /* Raw payloads are hashed while the weights load, so a corrupt
             * byte is never computed with (model_verify.h). */
            if (rc == DSQ_OK && !m->opts.no_verify) rc = dsq_model_verify_start(&vj, m->ctr, NULL, d);
            if (rc == DSQ_OK) rc = config_from_ctr(m, d);
        } else if (dsq_llama2c_is_checkpoint(path)) {
            /* a llama2.c .bin: read through an exact float32 Hugging Face
             * copy (llama2c.h); the files go as soon as they are mapped */
            char *tmp = NULL;
            rc = dsq_llama2c_to_temp_dir(path, NULL, &tmp, d);
            if (rc == DSQ_OK) rc = dsq_st_open(&m->st, tmp, d);
            if (rc == DSQ_OK) rc = dsq_model_config_load(&m->cfg, dsq_st_dir(m->st), d);
            dsq_llama2c_temp_dir_remove(tmp);
        } else {
            /* a serving export (xfmt/xfmt.h) is a safetensors
             * directory plus a description of its quantized linears */
            rc = dsq_st_open(&m->st, path, d);
            /* an export's SHA256SUMS is checked while the weights load */
            if (rc == DSQ_OK && !m->opts.no_verify) rc = dsq_model_verify_dir_start(&vj, dsq_st_dir(m->st), d);
            if (rc == DSQ_OK) rc = dsq_export_detect(dsq_st_dir(m->st), &m->exp, d);
            if (rc == DSQ_OK) rc = dsq_model_config_load(&m->cfg, dsq_st_dir(m->st), d);
        }
    }
    if (rc == DSQ_OK) rc = setup_derived(m, d);
    if (rc == DSQ_OK) rc = check_layer_count(m, d);
    if (rc == DSQ_OK) {
        m->w.layers = calloc((size_t)m->n_layers, sizeof *m->w.layers);
        if (!m->w.layers) rc = DSQ_ERR_NOMEM;
    }
    loader L = { m, &m->owned, &m->n_owned, &m->cap_owned, d };
    if (rc == DSQ_OK) {
        src_tensor t;
        if (src_find(m, "model.embed_tokens.weight", &t) < 0) rc = missing(&L, "model.embed_tokens.weight");
        else rc = load_linear(&L, "model.embed_tokens", m->vocab, m->hidden, &m->w.embed);
    }
    if (rc == DSQ_OK) rc = load_vec(&L, "model.norm.weight", m->hidden, &m->w.final_norm, 0);
    if (rc == DSQ_OK) {
        src_tensor t;
        if (src_find(m, "lm_head.weight", &t) == DSQ_OK) rc = load_linear(&L, "lm_head", m->vocab, m->hidden, &m->w.lm_head);
        else if (m->cfg.tie_word_embeddings) m->w.lm_head = m->w.embed;
        else rc = missing(&L, "lm_head.weight");
    }
    /* Layers 0 .. num_hidden_layers-1 only: model.layers.<num_hidden_layers>
     * is DeepSeek's MTP module, never used for next-token evaluation. */
    for (int64_t l = 0; rc == DSQ_OK && !m->opts.lazy && l < m->n_layers; l++)
        rc = dsq_model_layer_load(m, (int)l, d);
    int vrc = dsq_model_verify_join(vj, rc == DSQ_OK ? d : NULL);
    if (rc == DSQ_OK) rc = vrc;
    if (rc < 0) {
        dsq_model_free(m);
        return rc;
    }
    *out = m;
    return DSQ_OK;
}

void dsq_model_free(dsq_model *m)
{
    if (!m) return;
    if (m->w.layers)
        for (int64_t l = 0; l < m->n_layers; l++) dsq_model_layer_release(m, (int)l);
    free(m->w.layers);
    free_owned(&m->owned, &m->n_owned, &m->cap_owned);
    if (m->st) dsq_st_close(m->st);
    dsq_export_info_free(m->exp);
    if (m->ctr) dsq_ctr_set_close(m->ctr);
    if (m->own_pool) dsq_pool_free(m->pool);
    dsq_model_config_release(&m->cfg);
    free(m->path);
    free(m);
}

const dsq_model_config *dsq_model_get_config(const dsq_model *m) { return &m->cfg; }
const dsq_weights *dsq_model_weights(const dsq_model *m) { return &m->w; }
dsq_pool *dsq_model_pool(const dsq_model *m) { return m->pool; }

static void lin_bytes(const dsq_linear *l, uint64_t *sum, unsigned *schemes)
{
    if (!l->w.scheme) return;
    *sum += l->w.blob_size;
    if (l->w.scheme->id < 32) *schemes |= 1u << l->w.scheme->id;
}

static void layer_bytes(const dsq_model *m, const dsq_layer *ly, uint64_t *s, unsigned *sch)
{
    const dsq_linear *ls[] = { &ly->q, &ly->k, &ly->v, &ly->o, &ly->q_a, &ly->q_b, &ly->kv_a, &ly->kv_b,
                               &ly->mlp.gate, &ly->mlp.up, &ly->mlp.down, &ly->router,
                               &ly->shared.gate, &ly->shared.up, &ly->shared.down,
                               &ly->idx_wq_b, &ly->idx_wk, &ly->idx_wp };
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) lin_bytes(ls[i], s, sch);
    if (ly->kv_b_run.w.blob && ly->kv_b_run.w.blob != ly->kv_b.w.blob) lin_bytes(&ly->kv_b_run, s, sch);
    if (ly->experts)
        for (int64_t e = 0; e < m->cfg.n_routed_experts; e++) {
            lin_bytes(&ly->experts[e].gate, s, sch);
            lin_bytes(&ly->experts[e].up, s, sch);
            lin_bytes(&ly->experts[e].down, s, sch);
        }
}

uint64_t dsq_model_weight_bytes(const dsq_model *m)
{
    uint64_t s = 0;
    unsigned sch = 0;
    lin_bytes(&m->w.embed, &s, &sch);
    if (m->w.lm_head.w.blob != m->w.embed.w.blob) lin_bytes(&m->w.lm_head, &s, &sch);
    for (int64_t l = 0; l < m->n_layers; l++) layer_bytes(m, &m->w.layers[l], &s, &sch);
    return s;
}

int dsq_model_info(const dsq_model *m, char *buf, size_t n)
{
    uint64_t s = 0;
    unsigned sch = 0;
    lin_bytes(&m->w.embed, &s, &sch);
    if (m->w.lm_head.w.blob != m->w.embed.w.blob) lin_bytes(&m->w.lm_head, &s, &sch);
    int loaded = 0;
    for (int64_t l = 0; l < m->n_layers; l++) {
        layer_bytes(m, &m->w.layers[l], &s, &sch);
        loaded += m->w.layers[l].loaded;
    }
    char schemes[128] = "";
    for (int id = 0; id < 32; id++)
        if (sch & (1u << id)) {
            const dsq_scheme *sc = dsq_scheme_by_id((uint32_t)id);
            size_t k = strlen(schemes);
            snprintf(schemes + k, sizeof schemes - k, "%s%s", k ? "," : "", sc ? sc->name : "?");
        }
    const dsq_model_config *c = &m->cfg;
    char dsa_desc[160] = "";
    if (m->dsa)
        snprintf(dsa_desc, sizeof dsa_desc, " + DSA (indexer %lld heads x %lld, top %lld keys, %s)",
                 (long long)c->index_n_heads, (long long)c->index_head_dim, (long long)c->index_topk,
                 dsq_dsa_mode_name(m->opts.dsa_mode));
    return snprintf(buf, n,
                    "%s: %lld layers (%d loaded%s), hidden %lld, heads %lld/%lld, vocab %lld, %s%s%s; "
                    "weights %s, %.1f MiB in use%s%s%s",
                    dsq_arch_name(c->arch), (long long)m->n_layers, loaded, m->opts.lazy ? ", lazy" : "",
                    (long long)m->hidden, (long long)m->n_heads, (long long)m->n_kv_heads, (long long)m->vocab,
                    m->is_mla ? "MLA" : "GQA", m->dsa ? dsa_desc : "",
                    c->n_routed_experts > 0 ? " + MoE" : "", schemes, (double)s / (1024.0 * 1024.0),
                    c->num_nextn_predict_layers > 0 ? "; MTP layer skipped (not used for evaluation)" : "",
                    m->exp ? "; read from a serving export: " : "",
                    m->exp ? dsq_export_kind_name(dsq_export_kind_of(m->exp)) : "");
}

/* ---- linear calls ------------------------------------------------------ */

int dsq_linear_gemm(dsq_run *r, const dsq_linear *l, const float *x, int T, float *y)
{
    if (T <= 0) return DSQ_OK;
    const dsq_scheme *sc = l->w.scheme;
    void *scratch = NULL;
    size_t ssize = 0;
    dsq_pool *pool = r->m->pool;
    /* the view with the model's activation split for bf16 weights (a copy:
     * the loaded view is shared by every run); the scratch depends on it */
    dsq_qview w = l->w;
    w.bf16_terms = r->m->opts.bf16_terms;
    if (r->sc && r->sc->gemm_buf) {
        size_t need = sc->gemm_scratch(&w, T, dsq_pool_size(pool));
        if (need <= r->sc->gemm_size) { scratch = r->sc->gemm_buf; ssize = r->sc->gemm_size; }
    }
    dsq_prof_mark mk;
    dsq_prof_begin(r->m->prof, &mk);
    int rc = sc->gemm(&w, x, T, y, pool, scratch, ssize);
    dsq_prof_end_io(r->m->prof, &mk, l->name, 2.0 * (double)l->out * (double)l->in * (double)T,
                    (double)l->w.blob_size);
    if (rc < 0) return rc;
    if (l->bias)
        for (int t = 0; t < T; t++) {
            float *row = y + (size_t)t * (size_t)l->out;
            for (int64_t i = 0; i < l->out; i++) row[i] += l->bias[i];
        }
    return DSQ_OK;
}

int dsq_linear_gemm_many(dsq_run *r, const dsq_linear *const *l, const float *const *x, const int *T,
                         float *const *y, int n, const char *prof)
{
    if (n < 0 || n > DSQ_LINEAR_MANY_MAX) return DSQ_ERR_INVALID_ARG;
    dsq_qview w[DSQ_LINEAR_MANY_MAX];
    dsq_gemm_task t[DSQ_LINEAR_MANY_MAX];
    double flop = 0.0, bytes = 0.0;
    for (int i = 0; i < n; i++) {
        w[i] = l[i]->w;   /* with the model's bf16 split, as dsq_linear_gemm */
        w[i].bf16_terms = r->m->opts.bf16_terms;
        t[i].v = &w[i];
        t[i].x = x[i];
        t[i].T = T[i] > 0 ? T[i] : 0;
        t[i].y = y[i];
        flop += 2.0 * (double)l[i]->out * (double)l[i]->in * (double)t[i].T;
        bytes += t[i].T > 0 ? (double)l[i]->w.blob_size : 0.0;
    }
    dsq_pool *pool = r->m->pool;
    void *scratch = NULL;
    size_t ssize = 0;
    if (r->sc && r->sc->gemm_buf && dsq_gemm_many_scratch(t, n, dsq_pool_size(pool)) <= r->sc->gemm_size) {
        scratch = r->sc->gemm_buf;
        ssize = r->sc->gemm_size;
    }
    dsq_prof_mark mk;
    dsq_prof_begin(r->m->prof, &mk);
    int rc = dsq_gemm_many(t, n, pool, scratch, ssize);
    dsq_prof_end_io(r->m->prof, &mk, prof, flop, bytes);
    if (rc < 0) return rc;
    for (int i = 0; i < n; i++)
        if (l[i]->bias)
            for (int tt = 0; tt < T[i]; tt++) {
                float *row = y[i] + (size_t)tt * (size_t)l[i]->out;
                for (int64_t k = 0; k < l[i]->out; k++) row[k] += l[i]->bias[k];
            }
    return DSQ_OK;
}

int dsq_linear_hook_call(dsq_run *r, const dsq_linear *l, const float *x, int T, const int32_t *token_index)
{
    if (!r->hook || T <= 0) return DSQ_OK;
    return r->hook(r->hook_ctx, r->layer, l->name, x, T, (int)l->in, token_index);
}
