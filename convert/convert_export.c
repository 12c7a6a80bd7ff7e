/* convert_export.c - ds-quant --format ascend|awq|compressed-tensors: the
 * conversion pipeline's finished items go to the export writer (export.h)
 * instead of the container writer. Same plan, same workers, same blobs as a
 * .dsq conversion, so ds-quant --format F and ds-quant + ds-export give the
 * same files, but for one thing: where the target stores the scales in 16
 * bits (AutoAWQ F16, compressed-tensors in the model dtype), the codes are
 * rounded against the scale as stored (dsq_qparams.scale_dtype), which a
 * .dsq's f32-scale codes cannot be afterwards. Streamed tensors (blob > stream_bytes) are gathered into one
 * blob before they are handed over: the export's layouts (AWQ transposes,
 * ascend pairs rows) need whole tensors. */
#include "convert_internal.h"
#include "calib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int build_src(dsq_convert *c, dsq_diag *d)
{
    free(c->xsrc);
    c->xsrc = calloc(c->plan.n ? c->plan.n : 1, sizeof *c->xsrc);
    if (!c->xsrc) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    for (size_t i = 0; i < c->plan.n; i++) {
        const dsq_plan_entry *e = &c->plan.v[i];
        dsq_export_src *x = &c->xsrc[i];
        x->name = e->name;
        x->role = e->role;
        x->scheme = e->scheme;
        x->src_dtype = e->src_dtype;
        x->ndim = e->ndim;
        for (int k = 0; k < e->ndim && k < 8; k++) x->shape[k] = e->shape[k];
        x->qshape = e->qshape;
    }
    return DSQ_OK;
}

static void export_opts(const dsq_convert *c, dsq_export_opts *xo, char *fp, size_t fpn)
{
    memset(xo, 0, sizeof *xo);
    snprintf(fp, fpn, "%s-%s-%llu", c->fingerprint, c->xformat, (unsigned long long)c->xshard);
    xo->format = c->xformat;
    xo->output = c->o.output;
    xo->shard_bytes = c->xshard;
    xo->overwrite = c->o.overwrite;
    xo->resume = c->o.resume;
    xo->meta_json = c->meta;
    xo->fingerprint = fp;
    xo->tool = c->o.tool;
}

int dsq_conv_export_prepare(dsq_convert *c, dsq_diag *d)
{
    DSQ_TRY(build_src(c, d));
    if (!dsq_export_format_known(c->xformat))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1,
                        "unknown output format '%s' (dsq, ascend, awq, compressed-tensors)", c->xformat);
    dsq_export_opts xo;
    char fp[256];
    export_opts(c, &xo, fp, sizeof fp);
    xo.plan_only = 1;
    dsq_export *ex = NULL;
    DSQ_TRY(dsq_export_open(&ex, &xo, c->xsrc, c->plan.n, d));
    /* codes are rounded against the scales as the target stores them */
    for (size_t i = 0; i < c->plan.n; i++) c->plan.v[i].scale_dtype = dsq_export_scale_dtype(ex, i);
    dsq_export_free(ex, 1);
    return DSQ_OK;
}

typedef struct xsink {
    dsq_convert *c;
    dsq_export *ex;
    dsq_convert_summary *s;
    uint8_t *acc;               /* streamed tensor gathered whole */
    double err2, ref2;
    dsq_convert_progress prog;
} xsink;

/* Bookkeeping for a finished tensor (blob == NULL: already written in
 * row pieces). */
static int put_tensor(xsink *k, size_t i, const uint8_t *blob, size_t size, dsq_diag *d)
{
    dsq_convert *c = k->c;
    const dsq_plan_entry *e = &c->plan.v[i];
    if (blob) DSQ_TRY(dsq_export_put(k->ex, i, blob, size, d));
    dsq_tensor_result *res = &c->results[i];
    res->raw_bytes = size;
    res->stored_bytes = size;
    if (c->ct[i].measure) res->rel_error = k->ref2 > 0 ? sqrt(k->err2 / k->ref2) : 0.0;
    dsq_convert_summary *s = k->s;
    s->count_by_scheme[res->scheme]++;
    s->src_by_scheme[res->scheme] += e->src_bytes;
    s->stored_by_scheme[res->scheme] += size;
    s->bytes_raw += size;
    s->bytes_stored += size;
    s->tensors++;
    dsq_st_advise(c->m, e->t, DSQ_ST_DONTNEED);
    k->prog.tensors_done++;
    return DSQ_OK;
}

/* A tensor the target holds in float although the plan quantizes it
 * (dsq_export_from_source): its source rows, with calibration's row scaling
 * applied as to every converted row, in chunks. */
static int put_source(xsink *k, size_t i, dsq_diag *d)
{
    dsq_convert *c = k->c;
    const dsq_plan_entry *e = &c->plan.v[i];
    const int64_t rows = e->qshape.rows, cols = e->qshape.cols;
    int64_t chunk = (int64_t)((4u << 20) / (uint64_t)cols);
    if (chunk < 1) chunk = 1;
    if (chunk > rows) chunk = rows;
    float *w = malloc((size_t)chunk * (size_t)cols * sizeof *w);
    if (!w) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, e->name, -1, "out of memory");
    const dsq_calib_tensor *cal = c->o.calib ? dsq_calib_lookup(c->o.calib, e->name) : NULL;
    int rc = DSQ_OK;
    for (int64_t r0 = 0; rc == DSQ_OK && r0 < rows; r0 += chunk) {
        int64_t n = rows - r0 < chunk ? rows - r0 : chunk;
        rc = dsq_st_read_rows_f32(c->m, e->t, r0, n, w, d);
        if (rc == DSQ_OK && cal && (rc = dsq_calib_apply_rows(cal, r0, n, cols, w)) < 0)
            rc = dsq_fail(d, rc, NULL, e->name, -1, "calibration entry does not fit the tensor");
        if (rc == DSQ_OK) rc = dsq_export_put_float_rows(k->ex, i, r0, n, w, d);
    }
    free(w);
    return rc;
}

static int xsink_item(void *ctx, const dsq_conv_item *it, dsq_conv_result *r, dsq_diag *d)
{
    xsink *k = ctx;
    dsq_convert *c = k->c;
    const dsq_plan_entry *e = &c->plan.v[it->tensor];
    const dsq_conv_tensor *ct = &c->ct[it->tensor];
    if (it->piece == 0) k->err2 = k->ref2 = 0;
    k->err2 += r->err2;
    k->ref2 += r->ref2;
    int rc = DSQ_OK;
    if (dsq_export_from_source(k->ex, it->tensor)) {
        /* held in float by the target: the source weight, not the codes */
        if (it->piece + 1 == ct->npieces) {
            rc = put_source(k, it->tensor, d);
            if (rc == DSQ_OK) rc = put_tensor(k, it->tensor, NULL, ct->layout.total, d);
        }
    } else if (!ct->stream) {
        rc = put_tensor(k, it->tensor, r->piece, r->piece_size, d);   /* raw, whole */
    } else if (dsq_export_rowwise(k->ex, it->tensor)) {
        /* Row-local targets: written piece by piece, never held whole. */
        rc = dsq_export_put_rows(k->ex, it->tensor, it->row0, it->nrows, r->piece, r->piece_size, d);
        if (rc == DSQ_OK && it->piece + 1 == ct->npieces) rc = put_tensor(k, it->tensor, NULL, ct->layout.total, d);
    } else {
        const dsq_qlayout *L = &ct->layout;
        dsq_qshape ps = e->qshape;
        ps.rows = it->nrows;
        dsq_qlayout pl;
        DSQ_TRY(dsq_qlayout_get(e->scheme, &ps, &pl));
        if (it->piece == 0) {
            free(k->acc);
            k->acc = calloc(1, L->total);
            if (!k->acc) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, e->name, -1, "out of memory");
            dsq_qblob_header h;
            memcpy(&h, r->piece, sizeof h);
            h.rows = e->qshape.rows;
            h.blob_size = L->total;
            memcpy(k->acc, &h, sizeof h);
        }
        size_t g = (size_t)L->ngroups, r0 = (size_t)it->row0, nr = (size_t)it->nrows;
        memcpy(k->acc + L->w_off + r0 * L->row_bytes, r->piece + pl.w_off, nr * pl.row_bytes);
        if (L->s_size) memcpy(k->acc + L->s_off + r0 * g * 4, r->piece + pl.s_off, nr * g * 4);
        if (L->z_size) memcpy(k->acc + L->z_off + r0 * g, r->piece + pl.z_off, nr * g);
        if (L->r_size) memcpy(k->acc + L->r_off + r0 * 4, r->piece + pl.r_off, nr * 4);
        if (it->piece + 1 == ct->npieces) {
            rc = put_tensor(k, it->tensor, k->acc, L->total, d);
            free(k->acc);
            k->acc = NULL;
        }
    }
    if (rc < 0) {
        if (d && !d->tensor[0]) snprintf(d->tensor, sizeof d->tensor, "%s", e->name);
        return rc;
    }
    uint64_t share = e->src_bytes * (uint64_t)it->nrows / (uint64_t)e->qshape.rows;
    if (it->piece + 1 == ct->npieces) {
        share = e->src_bytes - e->src_bytes * (uint64_t)it->row0 / (uint64_t)e->qshape.rows;
        const dsq_st_tensor *sct = dsq_st_scale_of(c->m, e->t);
        if (sct) share += sct->nbytes;
    }
    k->s->bytes_converted += share;
    k->prog.bytes_done += share;
    dsq_export_summary xs;
    dsq_export_get_summary(k->ex, &xs);
    k->prog.bytes_out = xs.weight_bytes;
    k->prog.tensor = e->name;
    if (c->o.progress) c->o.progress(c->o.progress_ctx, &k->prog);
    return DSQ_OK;
}

int dsq_conv_export_run(dsq_convert *c, dsq_convert_summary *s, dsq_diag *d)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    dsq_export_opts xo;
    char fp[256];
    export_opts(c, &xo, fp, sizeof fp);
    xsink k;
    memset(&k, 0, sizeof k);
    k.c = c;
    k.s = s;
    s->bytes_in = c->plan.src_bytes;
    s->results = c->results;
    DSQ_TRY(dsq_export_open(&k.ex, &xo, c->xsrc, c->plan.n, d));
    size_t from = dsq_export_resume_from(k.ex);
    s->resumed = from;
    s->tensors = from;
    k.prog.tensors_total = c->plan.n;
    k.prog.tensors_done = from;
    for (size_t i = 0; i < c->plan.n; i++) {
        const dsq_st_tensor *sct = dsq_st_scale_of(c->m, c->plan.v[i].t);
        uint64_t b = c->results[i].src_bytes + (sct ? sct->nbytes : 0);
        k.prog.bytes_total += c->results[i].src_bytes;
        if (i < from) k.prog.bytes_done += b;
    }
    int rc = dsq_conv_run_items(c, from, xsink_item, &k, d);
    free(k.acc);
    if (rc == DSQ_OK) rc = dsq_export_finish(k.ex, &s->export, d);
    if (rc == DSQ_OK) s->bytes_out = s->export.bytes_out;
    /* An interruption or a full disk keeps the committed shards for --resume. */
    rc = dsq_export_end(k.ex, rc, d);
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    s->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    return rc;
}
