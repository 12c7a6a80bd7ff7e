/* convert_pool.c - the conversion workers: read rows, quantize, measure,
 * encode; and the ordered hand-off to the writer (see convert.h). */
#include "convert_internal.h"
#include "convert_ledger.h"
#include "bf16src.h"
#include "dsq_mem.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ================= recycled output buffers ================= */

/* Below this an allocation comes from malloc's arenas anyway. */
#define BUF_MIN (1u << 20)
#define HUGE_PAGE (2u << 20)

/* A large output buffer on 2 MiB pages where the kernel allows them
 * (transparent_hugepage "madvise" is the common default): first writes
 * then fault once per 2 MiB instead of once per 4 KiB. A fault costs
 * microseconds in a VM, and a layer's output buffers are hundreds of MB
 * (tens of thousands of 4 KiB faults, `perf stat -e page-faults`). Freed
 * with free(). */
static void *big_alloc(size_t need, size_t *cap)
{
    if (need < BUF_MIN) {
        *cap = need ? need : 1;
        return malloc(*cap);
    }
    size_t n = (need + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    void *p = NULL;
    if (posix_memalign(&p, HUGE_PAGE, n) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, n, MADV_HUGEPAGE);   /* advice only: 4 KiB pages otherwise */
#endif
    *cap = n;
    return p;
}

void *dsq_conv_buf_get(dsq_conv_bufs *b, size_t need, size_t *cap)
{
    if (need == 0) need = 1;
    if (b && need >= BUF_MIN) {
        pthread_mutex_lock(&b->mu);
        int best = -1;   /* the smallest that fits */
        for (int i = 0; i < b->n; i++)
            if (b->cap[i] >= need && (best < 0 || b->cap[i] < b->cap[best])) best = i;
        if (best >= 0) {
            void *p = b->p[best];
            *cap = b->cap[best];
            b->held -= b->cap[best];
            b->n--;
            b->p[best] = b->p[b->n];
            b->cap[best] = b->cap[b->n];
            pthread_mutex_unlock(&b->mu);
            return p;
        }
        pthread_mutex_unlock(&b->mu);
    }
    return big_alloc(need, cap);
}

void dsq_conv_buf_put(dsq_conv_bufs *b, void *p, size_t cap)
{
    if (!p) return;
    if (b && cap >= BUF_MIN) {
        pthread_mutex_lock(&b->mu);
        /* Full: drop the smallest cached one if this one is larger. */
        if (b->n == DSQ_CONV_BUFS_MAX || b->held + cap > b->limit) {
            int small = -1;
            for (int i = 0; i < b->n; i++)
                if (small < 0 || b->cap[i] < b->cap[small]) small = i;
            if (small >= 0 && b->cap[small] < cap && b->held - b->cap[small] + cap <= b->limit) {
                free(b->p[small]);
                b->held -= b->cap[small];
                b->p[small] = p;
                b->cap[small] = cap;
                b->held += cap;
                p = NULL;
            }
        } else {
            b->p[b->n] = p;
            b->cap[b->n] = cap;
            b->n++;
            b->held += cap;
            p = NULL;
        }
        pthread_mutex_unlock(&b->mu);
    }
    free(p);
}

/* ================= one item ================= */

/* Drop the source pages wholly inside rows [r0, r0+n): mapped file pages
 * count toward RSS, and a model is far larger than RAM. Pages shared with
 * neighbours are dropped when the whole tensor is done (dsq_st_advise). */
static void drop_rows(const dsq_st_tensor *t, int64_t cols, int64_t r0, int64_t n)
{
    if (!t->data) return;
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) pg = 4096;
    uint64_t bits = dsq_dtype_bits(t->dtype);
    uintptr_t a = (uintptr_t)t->data + (uintptr_t)((uint64_t)r0 * (uint64_t)cols * bits / 8);
    uintptr_t b = (uintptr_t)t->data + (uintptr_t)((uint64_t)(r0 + n) * (uint64_t)cols * bits / 8);
    a = (a + (uintptr_t)pg - 1) / (uintptr_t)pg * (uintptr_t)pg;
    b = b / (uintptr_t)pg * (uintptr_t)pg;
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22   /* Linux 5.14; older kernels say EINVAL: ignored */
#endif

/* Map the source pages of rows [r0, r0+n) in one call: touching them one by
 * one takes a page fault per 64 KiB (fault-around), which in a VM cost ~9%
 * of the conversion's CPU. Best effort: a failure leaves the faults. */
static void populate_rows(const dsq_st_tensor *t, int64_t cols, int64_t r0, int64_t n)
{
    if (!t->data || n <= 0) return;
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) pg = 4096;
    uint64_t bits = dsq_dtype_bits(t->dtype);
    uintptr_t a = (uintptr_t)t->data + (uintptr_t)((uint64_t)r0 * (uint64_t)cols * bits / 8);
    uintptr_t b = (uintptr_t)t->data + (uintptr_t)((uint64_t)(r0 + n) * (uint64_t)cols * bits / 8);
    a = a / (uintptr_t)pg * (uintptr_t)pg;
    if (b > a) (void)madvise((void *)a, b - a, MADV_POPULATE_READ);
}

/* Say exactly where the bad value is: row and column in the tensor. */
static int nonfinite_error(const dsq_plan_entry *e, const float *w, int64_t row0, int64_t n,
                           int64_t cols, dsq_diag *d)
{
    for (int64_t i = 0; i < n * cols; i++) {
        if (isfinite(w[i])) continue;
        dsq_diag_clear(d);
        return dsq_fail(d, DSQ_ERR_NONFINITE, NULL, e->name, -1,
                        "non-finite weight (%s) at row %lld, column %lld "
                        "(use --allow-nonfinite to convert it anyway)",
                        isnan(w[i]) ? "nan" : "inf", (long long)(row0 + i / cols),
                        (long long)(i % cols));
    }
    return DSQ_ERR_NONFINITE;
}

/* Zero the bytes of a blob that no row owns: the gap after the header and
 * the tails of the S / Z / R sections. (W rows carry their own padding.) */
static void zero_tails(const dsq_qlayout *L, uint8_t *blob, int64_t rows)
{
    size_t n = (size_t)rows * (size_t)L->ngroups;
    memset(blob + DSQ_QBLOB_HEADER, 0, L->w_off - DSQ_QBLOB_HEADER);
    if (L->s_size) memset(blob + L->s_off + n * 4, 0, L->s_size - n * 4);
    if (L->z_size) memset(blob + L->z_off + n, 0, L->z_size - n);
    if (L->r_size) memset(blob + L->r_off + (size_t)rows * 4, 0, L->r_size - (size_t)rows * 4);
}

/* One item on its way through dsq_conv_process: what its steps share. */
typedef struct item_job {
    dsq_convert *c;
    const dsq_conv_item *it;
    const dsq_plan_entry *e;
    const dsq_conv_tensor *ct;
    const dsq_scheme *sc;
    dsq_diag *d;
    int64_t cols;
    dsq_qparams qp;
    const dsq_calib_tensor *cal;   /* calibration entry, or NULL */
    int gptq;                      /* cal holds the tensor's GPTQ blob (viewed by gq) */
    dsq_qview gq;
    dsq_qshape oshape;             /* a streamed piece's shape: its rows */
    dsq_qlayout ol;                /* of this item's output */
    uint8_t *out;
    size_t out_cap;
    int own;                       /* out is a buffer of its own, handed on with the result */
    int64_t base;                  /* first row of out (a piece's row0, else 0) */
    const dsq_qshape *os;          /* the shape out is quantized as */
    int sample;                    /* error measured on 1 row in sample */
    int use_pread;                 /* source rows by pread (else through the mapping) */
    int direct;                    /* BF16 source rows straight to the quantizer */
    dsq_sha256 lh;                 /* the resume ledger's digest of the source rows */
    /* Source pages are unmapped in runs of DSQ_CONV_DROP_BYTES, not per
     * block: each madvise costs a TLB shootdown on every core running a
     * worker, which on a many-core host outweighs the pages it frees. */
    uint64_t src_row_bytes;
    int64_t drop_from;
    /* Rows mapped ahead by populate_rows, in runs of the same size. */
    int64_t pop_to, pop_rows;
} item_job;

/* Quantizer parameters: the options, then calibration's. Calibration's
 * scales are folded into the float rows (block_quantize); importance, clip
 * search and static activation parameters go to the quantizer. GPTQ:
 * calibration already holds this tensor's blob. Its rows are dequantized
 * and packed again with its own scales/zeros, which gives back exactly its
 * codes (given-scale packing, quant/scheme.h), so the streaming, measuring
 * and export paths stay as they are. */
static int item_params(item_job *j)
{
    const dsq_convert *c = j->c;
    dsq_qparams_init(&j->qp);
    j->qp.allow_nonfinite = c->o.allow_nonfinite;
    j->qp.clip_search = c->o.clip_search;
    j->qp.range_search = c->o.range_search;
    j->qp.scale_dtype = j->e->scale_dtype;   /* codes against the scale as an export stores it */
    j->cal = c->o.calib ? dsq_calib_lookup(c->o.calib, j->e->name) : NULL;
    dsq_calib_qparams(j->cal, &j->qp);
    j->gptq = j->cal && j->cal->gptq_blob;
    if (j->gptq) {
        const dsq_calib_tensor *cal = j->cal;
        int grc = cal->gptq_scheme != j->sc->id || cal->gptq_group != j->e->qshape.group_size
                      ? DSQ_ERR_STATE
                      : dsq_qview_init(&j->gq, j->sc, &j->e->qshape, cal->gptq_blob, cal->gptq_blob_size, j->d);
        if (grc < 0)
            return dsq_fail(j->d, DSQ_ERR_STATE, NULL, j->e->name, -1,
                            "the GPTQ result was made for another scheme or group size");
        j->qp.clip_search = 0;
        j->qp.importance = NULL;
    }
    return DSQ_OK;
}

/* The output of this item: the whole blob, or a blob of the piece's rows,
 * its bytes that no row owns zeroed. Whole tensors are built in the
 * worker's reusable buffer (encode copies them out); streamed pieces go to
 * the writer, so each gets its own, and so does an export, which takes
 * whole raw blobs (no hash, no copy). */
static int item_output(item_job *j, dsq_conv_scratch *ws)
{
    const dsq_plan_entry *e = j->e;
    const dsq_conv_tensor *ct = j->ct;
    j->oshape = e->qshape;
    j->oshape.rows = j->it->nrows;
    int rc = dsq_qlayout_get(j->sc, ct->stream ? &j->oshape : &e->qshape, &j->ol);
    if (rc < 0) return dsq_fail(j->d, rc, NULL, e->name, -1, "layout: %s", dsq_strerror(rc));
    j->own = ct->stream || j->c->xformat;
    if (j->own) {
        j->out = dsq_conv_buf_get(ws->bufs, j->ol.total, &j->out_cap);
    } else {
        if (ws->cap < j->ol.total) {
            free(ws->buf);
            ws->buf = big_alloc(j->ol.total, &ws->cap);
            if (!ws->buf) ws->cap = 0;
        }
        j->out = ws->buf;
    }
    if (!j->out) return dsq_fail(j->d, DSQ_ERR_NOMEM, NULL, e->name, -1, "out of memory (%zu bytes)", j->ol.total);
    zero_tails(&j->ol, j->out, ct->stream ? j->it->nrows : e->qshape.rows);
    return DSQ_OK;
}

/* The source bytes of rows [s, s+n) (*sp, *sl: the ledger's): read by
 * pread into the worker's buffer, or from the mapping (mapped ahead). */
static int block_source(item_job *j, dsq_conv_scratch *ws, int64_t s, int64_t n, const uint8_t **sp, size_t *sl)
{
    const dsq_plan_entry *e = j->e;
    const int64_t end = j->it->row0 + j->it->nrows;
    dsq_ledger_rows(e->t, e->qshape.rows, s, n, sp, sl);
    if (j->use_pread) {
        if (ws->src_cap < *sl) {
            free(ws->src);
            ws->src = malloc(*sl);
            ws->src_cap = ws->src ? *sl : 0;
            if (!ws->src) return dsq_fail(j->d, DSQ_ERR_NOMEM, NULL, e->name, -1, "out of memory (%zu bytes)", *sl);
        }
        int rc = dsq_st_pread_rows(j->c->m, e->t, s, n, ws->src, j->d);
        if (rc == DSQ_ERR_UNSUPPORTED) j->use_pread = 0;
        else if (rc < 0) return rc;
        else *sp = ws->src;
    }
    if (!j->use_pread && s + n > j->pop_to) {
        int64_t to = s + n > j->pop_to + j->pop_rows ? s + n : j->pop_to + j->pop_rows;
        if (to > end) to = end;
        populate_rows(e->t, j->cols, j->pop_to, to - j->pop_to);
        j->pop_to = to;
    }
    return DSQ_OK;
}

/* Rows [s, s+n) as float32 in fbuf: GPTQ's blob dequantized (its scales
 * given to the quantizer), or the source rows; BF16 rows on the direct path
 * are quantized here (and widened only to be measured). */
static int block_read(item_job *j, float *fbuf, const uint8_t *sp, int64_t s, int64_t n)
{
    dsq_convert *c = j->c;
    const dsq_plan_entry *e = j->e;
    int rc = DSQ_OK;
    if (j->gptq) {
        j->sc->dequantize(&j->gq, s, n, fbuf);
        j->qp.given_scale = j->gq.scales + (size_t)j->base * (size_t)j->gq.layout.ngroups;
        j->qp.given_zero = j->gq.zeros ? j->gq.zeros + (size_t)j->base * (size_t)j->gq.layout.ngroups : NULL;
    } else if (j->direct) {
        /* BF16 rows go to the quantizer as they are (quant/bf16src.h):
         * it widens only where the scheme has no direct path. */
        int widened = 0;
        rc = dsq_quantize_bf16src(j->sc, sp, s - j->base, n, j->os, &j->qp, j->out, fbuf, &widened, j->d);
        if (rc == DSQ_OK && j->ct->measure && !widened) rc = dsq_st_rows_f32_from(c->m, e->t, sp, s, n, fbuf, j->d);
        if (rc == DSQ_ERR_NONFINITE) rc = nonfinite_error(e, fbuf, s, n, j->cols, j->d);
    } else if (j->use_pread) {
        rc = dsq_st_rows_f32_from(c->m, e->t, sp, s, n, fbuf, j->d);
    } else {
        rc = dsq_st_read_rows_f32(c->m, e->t, s, n, fbuf, j->d);
    }
    return rc;
}

/* Calibration folded into the float rows, then the rows quantized straight
 * into the output blob; the block starting at its row 0 also writes the
 * header. */
static int block_quantize(item_job *j, float *fbuf, int64_t s, int64_t n)
{
    const dsq_plan_entry *e = j->e;
    const dsq_calib_tensor *cal = j->cal;
    int rc;
    if (cal && !j->gptq && (rc = dsq_calib_apply_rows(cal, s, n, j->cols, fbuf)) < 0)
        return dsq_fail(j->d, rc, NULL, e->name, -1, "calibration entry [%lld, %lld] does not fit the tensor",
                        (long long)cal->rows, (long long)cal->cols);
    if (!j->direct) {
        rc = j->sc->quantize(fbuf, s - j->base, n, j->os, &j->qp, j->out, j->d);
        if (rc == DSQ_ERR_NONFINITE) rc = nonfinite_error(e, fbuf, s, n, j->cols, j->d);
        if (rc < 0) return rc;
    }
    return DSQ_OK;
}

/* Error on the block's first rows, quantized again on their own into a
 * small blob (rows are independent: same codes). */
static int block_measure(item_job *j, float *fbuf, uint8_t *bbuf, int64_t s, int64_t n, dsq_conv_result *r)
{
    const dsq_plan_entry *e = j->e;
    dsq_qshape ks = e->qshape;
    ks.rows = (n + j->sample - 1) / j->sample;
    dsq_qlayout kl;
    dsq_qview v;
    int rc = dsq_qlayout_get(j->sc, &ks, &kl);
    dsq_qparams kp = j->qp;   /* given scales are indexed by row: this piece starts at s */
    if (j->gptq) {
        kp.given_scale = j->gq.scales + (size_t)s * (size_t)j->gq.layout.ngroups;
        kp.given_zero = j->gq.zeros ? j->gq.zeros + (size_t)s * (size_t)j->gq.layout.ngroups : NULL;
    }
    if (rc == DSQ_OK) rc = j->sc->quantize(fbuf, 0, ks.rows, &ks, &kp, bbuf, j->d);
    if (rc == DSQ_OK) rc = dsq_qview_init(&v, j->sc, &ks, bbuf, kl.total, j->d);
    if (rc == DSQ_OK && j->gptq) { /* GPTQ's error is against the source weights */
        rc = dsq_st_read_rows_f32(j->c->m, e->t, s, ks.rows, fbuf, j->d);
        if (rc == DSQ_OK) rc = dsq_calib_apply_rows(j->cal, s, ks.rows, j->cols, fbuf);
    }
    if (rc == DSQ_OK) rc = dsq_qrel_error(&v, fbuf, 0, ks.rows, NULL, &r->err2, &r->ref2);
    if (rc < 0) return dsq_fail(j->d, rc, NULL, e->name, -1, "error measurement failed");
    return DSQ_OK;
}

/* Every row block of the item: source, float rows, resume ledger digest,
 * quantization, error measurement, and the source pages dropped behind. */
static int item_rows(item_job *j, float *fbuf, uint8_t *bbuf, dsq_conv_scratch *ws, dsq_conv_result *r)
{
    dsq_convert *c = j->c;
    const dsq_conv_item *it = j->it;
    const dsq_plan_entry *e = j->e;
    const dsq_conv_tensor *ct = j->ct;
    if (it->piece == 0) dsq_st_advise(c->m, e->t, DSQ_ST_WILLNEED);
    j->base = ct->stream ? it->row0 : 0;
    j->os = ct->stream ? &j->oshape : &e->qshape;
    j->sample = c->o.error_sample > 0 ? c->o.error_sample : 16;
    j->src_row_bytes = (uint64_t)j->cols * dsq_dtype_bits(e->t->dtype) / 8;
    j->drop_from = it->row0;
    j->pop_to = it->row0;
    j->pop_rows = (int64_t)(DSQ_CONV_DROP_BYTES / (j->src_row_bytes ? j->src_row_bytes : 1));
    if (j->pop_rows < 1) j->pop_rows = 1;
    /* The resume ledger's digest of this item's source rows, taken block by
     * block while the bytes are in cache (convert_ledger.h). */
    if (c->ledger_on && dsq_sha256_init(&j->lh) < 0) return dsq_fail(j->d, DSQ_ERR_NOMEM, NULL, e->name, -1, "out of memory");
    /* Source rows come in by pread into a per-worker buffer, not through
     * the mapping (dsq_st_pread_rows says why); GPTQ dequantizes its own
     * blob, and a model over a buffer has no descriptor: the mapping then. */
    j->use_pread = !j->gptq;
    /* BF16 source rows straight to the quantizer: not where calibration
     * rewrites the float rows first, nor for GPTQ's own blob. */
    j->direct = !j->gptq && !j->cal && e->t->dtype == DSQ_DTYPE_BF16 && dsq_st_cols(e->t) == j->cols &&
                !dsq_st_scale_of(c->m, e->t);
    const int64_t end = it->row0 + it->nrows;
    for (int64_t s = it->row0; s < end; s += ct->block_rows) {
        int64_t n = end - s;
        if (n > ct->block_rows) n = ct->block_rows;
        const uint8_t *sp;   /* the block's source bytes (the ledger's) */
        size_t sl;
        int rc = block_source(j, ws, s, n, &sp, &sl);
        if (rc == DSQ_OK) rc = block_read(j, fbuf, sp, s, n);
        if (rc < 0) return rc;
        if (c->ledger_on) {   /* the ledger covers the source rows, GPTQ or not */
            uint8_t brec[DSQ_CRC32C_X4_LEN];
            dsq_ledger_block(sp, sl, brec);
            dsq_sha256_update(&j->lh, brec, sizeof brec);
        }
        rc = block_quantize(j, fbuf, s, n);
        if (rc == DSQ_OK && ct->measure) rc = block_measure(j, fbuf, bbuf, s, n, r);
        if (rc < 0) return rc;
        if (!j->use_pread && (uint64_t)(s + n - j->drop_from) * j->src_row_bytes >= DSQ_CONV_DROP_BYTES) {
            drop_rows(e->t, j->cols, j->drop_from, s + n - j->drop_from);
            j->drop_from = s + n;
        }
    }
    if (!j->use_pread && j->drop_from < end) drop_rows(e->t, j->cols, j->drop_from, end - j->drop_from);
    if (c->ledger_on) dsq_sha256_final(&j->lh, r->src_sha);
    return DSQ_OK;
}

/* An output buffer of its own goes with the result as it is. A streamed
 * piece's W rows are compressed here, on the worker, as a frame of their
 * own (dsq_ctr_writer_frame): one zstd stream per tensor ran on the writer
 * thread alone while the workers waited for their window (perf,
 * w8a8-dynamic -T 2: ~23% of the CPU on the writer and its hash thread, for
 * the ~30% of the output that is streamed). The writer only hashes and
 * writes. */
static int item_hand_on(item_job *j, dsq_conv_scratch *ws, dsq_conv_result *r)
{
    const dsq_convert *c = j->c;
    r->piece = j->out;
    r->piece_size = j->ol.total;
    r->piece_cap = j->out_cap;
    if (j->ct->stream && !c->xformat && c->o.zstd_level > 0) {
        const uint8_t *wr = j->out + j->ol.w_off;
        size_t wn = (size_t)j->it->nrows * j->ol.row_bytes;
        int rc;
        r->zframe = dsq_conv_buf_get(ws->bufs, dsq_ctr_encode_bound(wn), &r->zframe_cap);
        if (!r->zframe)
            rc = dsq_fail(j->d, DSQ_ERR_NOMEM, NULL, j->e->name, -1, "out of memory (%zu bytes)",
                          dsq_ctr_encode_bound(wn));
        else
            rc = dsq_ctr_zstd_frame(wr, wn, c->o.zstd_level, r->zframe, r->zframe_cap, &r->zframe_size, j->d);
        if (rc < 0) {
            dsq_conv_buf_put(ws->bufs, r->zframe, r->zframe_cap);
            r->zframe = NULL;
            r->piece = NULL;
            dsq_conv_buf_put(ws->bufs, j->out, j->out_cap);
            return r->status = rc;
        }
    }
    return DSQ_OK;
}

/* A whole tensor built in the worker's buffer: encoded into a buffer that
 * goes with the result. */
static int item_encode(item_job *j, dsq_conv_scratch *ws, dsq_conv_result *r)
{
    size_t bcap;
    uint8_t *bb = dsq_conv_buf_get(ws->bufs, dsq_ctr_encode_bound(j->ol.total), &bcap);
    if (!bb)
        return r->status = dsq_fail(j->d, DSQ_ERR_NOMEM, NULL, j->e->name, -1, "out of memory (%zu bytes)",
                                    dsq_ctr_encode_bound(j->ol.total));
    int rc = dsq_ctr_encode_into(j->out, j->ol.total, j->c->o.zstd_level, bb, bcap, &r->blob, j->d);
    if (rc < 0) {
        dsq_conv_buf_put(ws->bufs, bb, bcap);
        return r->status = rc;
    }
    r->blob_buf = bb;
    r->blob_cap = bcap;
    return DSQ_OK;
}

/* A row block failed: release what the item holds and name the tensor and
 * its file where the failing step did not. */
static int item_fail(item_job *j, dsq_conv_scratch *ws, dsq_conv_result *r, int rc)
{
    dsq_diag *d = j->d;
    if (j->lh.md_ctx) dsq_sha256_release(&j->lh);
    if (j->own) dsq_conv_buf_put(ws->bufs, j->out, j->out_cap);
    if (!d->tensor[0]) snprintf(d->tensor, sizeof d->tensor, "%s", j->e->name);
    if (!d->path[0]) snprintf(d->path, sizeof d->path, "%s", dsq_st_shard_path(j->c->m, j->e->t->shard));
    return r->status = rc;
}

int dsq_conv_process(dsq_convert *c, const dsq_conv_item *it, float *fbuf, uint8_t *bbuf,
                     dsq_conv_scratch *ws, dsq_conv_result *r)
{
    memset(r, 0, sizeof *r);
    item_job j;
    memset(&j, 0, sizeof j);
    j.c = c;
    j.it = it;
    j.e = &c->plan.v[it->tensor];
    j.ct = &c->ct[it->tensor];
    j.sc = j.e->scheme;
    j.d = &r->diag;
    dsq_diag_clear(j.d);
    j.cols = j.e->qshape.cols;
    int rc = item_params(&j);
    if (rc == DSQ_OK) rc = item_output(&j, ws);
    if (rc < 0) return r->status = rc;
    rc = item_rows(&j, fbuf, bbuf, ws, r);
    if (rc < 0) return item_fail(&j, ws, r, rc);
    return j.own ? item_hand_on(&j, ws, r) : item_encode(&j, ws, r);
}

/* ================= ordered pipeline ================= */

typedef struct slot {
    int ready;
    dsq_conv_result r;
} slot;

typedef struct pipe {
    dsq_convert *c;
    const dsq_conv_item *items;
    size_t nitems;
    slot *slots;
    size_t window;
    pthread_mutex_t mu;
    pthread_cond_t cv_work;   /* workers: a window slot or budget freed */
    pthread_cond_t cv_done;   /* writer: an item finished */
    size_t next;              /* next item to hand out */
    size_t written;           /* items the writer has consumed */
    uint64_t mem_used, mem_budget;
    int stop;
    int active;               /* workers still running */
    int nomem;                /* a worker could not allocate its scratch */
    dsq_conv_bufs bufs;       /* output buffers, recycled by the writer */
} pipe_t;

static int cancelled(const dsq_convert *c)
{
    return c->o.cancel && *c->o.cancel;
}

/* Piece it's turn at its tensor's payload hash (dsq_conv_hash): wait for
 * the pieces before it, hash its bytes in file order (nothing if r is NULL,
 * a failed piece: the tensor is then broken and never committed), pass on. */
static void hash_turn(dsq_convert *c, const dsq_conv_item *it, const dsq_conv_result *r)
{
    dsq_conv_hash *hs = &c->hash[it->tensor];
    pthread_mutex_lock(&c->hash_mu);
    while (hs->next != it->piece) pthread_cond_wait(&c->hash_cv, &c->hash_mu);
    pthread_mutex_unlock(&c->hash_mu);
    if (r && !hs->broken) {
        const dsq_plan_entry *e = &c->plan.v[it->tensor];
        const dsq_qlayout *L = &c->ct[it->tensor].layout;
        dsq_qshape ps = e->qshape;
        ps.rows = it->nrows;
        dsq_qlayout pl;
        if (dsq_qlayout_get(e->scheme, &ps, &pl) < 0) {
            hs->broken = 1;
        } else if (it->piece == 0 && dsq_sha256_init(&hs->h) < 0) {
            hs->broken = 1;
        } else {
            if (it->piece == 0) {   /* the header as the writer stores it, then the gap */
                static const uint8_t zero[256];
                dsq_qblob_header h;
                memcpy(&h, r->piece, sizeof h);
                h.rows = e->qshape.rows;
                h.blob_size = L->total;
                dsq_sha256_update(&hs->h, &h, sizeof h);
                for (size_t g = L->w_off - sizeof h; g; ) {
                    size_t k = g < sizeof zero ? g : sizeof zero;
                    dsq_sha256_update(&hs->h, zero, k);
                    g -= k;
                }
            }
            dsq_sha256_update(&hs->h, r->piece + pl.w_off, (size_t)it->nrows * pl.row_bytes);
        }
    } else {
        hs->broken = 1;
    }
    pthread_mutex_lock(&c->hash_mu);
    hs->next++;
    pthread_cond_broadcast(&c->hash_cv);
    pthread_mutex_unlock(&c->hash_mu);
}

static void *worker(void *arg)
{
    pipe_t *p = arg;
    dsq_convert *c = p->c;
    float *fbuf = dsq_aligned_alloc(c->max_block_floats * sizeof(float));
    uint8_t *bbuf = dsq_aligned_alloc(c->max_block_blob);
    dsq_conv_scratch ws = { NULL, 0, NULL, 0, &p->bufs };
    pthread_mutex_lock(&p->mu);
    if (!fbuf || !bbuf) {
        p->nomem = 1;
        p->stop = 1;
        pthread_cond_broadcast(&p->cv_done);
    }
    for (;;) {
        /* Items are handed out in order; one may start when its window slot
         * is free and the budget allows, and the oldest unwritten item may
         * always start, so the writer can never wait forever. */
        while (!p->stop && p->next < p->nitems &&
               (p->next >= p->written + p->window ||
                (p->next != p->written &&
                 p->mem_used + p->items[p->next].mem > p->mem_budget)))
            pthread_cond_wait(&p->cv_work, &p->mu);
        if (p->stop || p->next >= p->nitems || cancelled(c)) break;
        size_t i = p->next++;
        p->mem_used += p->items[i].mem;
        pthread_mutex_unlock(&p->mu);

        dsq_conv_result r;
        dsq_conv_process(c, &p->items[i], fbuf, bbuf, &ws, &r);
        if (c->hash && c->ct[p->items[i].tensor].stream)
            hash_turn(c, &p->items[i], r.status == DSQ_OK ? &r : NULL);

        pthread_mutex_lock(&p->mu);
        slot *s = &p->slots[i % p->window];
        s->r = r;
        s->ready = 1;
        /* An error ends the hand-out after this item; earlier items still
         * finish so the writer reports the first error in item order. */
        if (r.status < 0 && p->nitems > i + 1) p->nitems = i + 1;
        pthread_cond_broadcast(&p->cv_done);
    }
    p->active--;
    pthread_cond_broadcast(&p->cv_done);
    pthread_mutex_unlock(&p->mu);
    free(fbuf);
    free(bbuf);
    free(ws.buf);
    free(ws.src);
    return NULL;
}

static void result_free(dsq_conv_bufs *b, dsq_conv_result *r)
{
    dsq_ctr_blob_free(&r->blob);
    dsq_conv_buf_put(b, r->blob_buf, r->blob_cap);
    dsq_conv_buf_put(b, r->piece, r->piece_cap);
    dsq_conv_buf_put(b, r->zframe, r->zframe_cap);
    r->blob_buf = NULL;
    r->piece = NULL;
    r->zframe = NULL;
}

int dsq_conv_pipeline_run(dsq_convert *c, const dsq_conv_item *items, size_t nitems,
                          dsq_conv_sink *sink, dsq_diag *d)
{
    if (nitems == 0) return DSQ_OK;
    int nthreads = c->o.threads > 0 ? c->o.threads : dsq_cpu_count();
    pipe_t p;
    memset(&p, 0, sizeof p);
    p.c = c;
    p.items = items;
    p.nitems = nitems;
    p.window = 2 * (size_t)nthreads + 2;
    p.mem_budget = c->o.mem_budget;
    p.slots = calloc(p.window, sizeof *p.slots);
    pthread_t *th = calloc((size_t)nthreads, sizeof *th);
    if (!p.slots || !th) {
        free(p.slots);
        free(th);
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    /* The workers hash streamed payloads whose pieces they compress. */
    if (c->o.zstd_level > 0 && !c->xformat) {
        c->hash = calloc(c->plan.n ? c->plan.n : 1, sizeof *c->hash);
        if (!c->hash) {
            free(p.slots);
            free(th);
            return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        }
        pthread_mutex_init(&c->hash_mu, NULL);
        pthread_cond_init(&c->hash_cv, NULL);
    }
    pthread_mutex_init(&p.mu, NULL);
    pthread_mutex_init(&p.bufs.mu, NULL);
    /* The cache holds buffers between the writer's put and a worker's next
     * get; a quarter of the item budget bounds what it adds to RSS. */
    p.bufs.limit = p.mem_budget;
    pthread_cond_init(&p.cv_work, NULL);
    pthread_cond_init(&p.cv_done, NULL);
    int started = 0, rc = DSQ_OK;
    p.active = nthreads;
    for (; started < nthreads; started++)
        if (pthread_create(&th[started], NULL, worker, &p) != 0) break;
    pthread_mutex_lock(&p.mu);
    p.active -= nthreads - started;
    pthread_mutex_unlock(&p.mu);
    if (started == 0) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "cannot start worker threads");

    for (size_t w = 0; rc == DSQ_OK && w < nitems; w++) {
        slot *s = &p.slots[w % p.window];
        pthread_mutex_lock(&p.mu);
        while (!s->ready && p.active > 0 && !p.nomem) pthread_cond_wait(&p.cv_done, &p.mu);
        if (!s->ready) {
            int nomem = p.nomem;
            pthread_mutex_unlock(&p.mu);
            rc = nomem ? dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory for worker scratch")
                       : dsq_fail(d, DSQ_ERR_INTERRUPTED, NULL, NULL, -1, "interrupted");
            break;
        }
        dsq_conv_result r = s->r;
        s->ready = 0;
        pthread_mutex_unlock(&p.mu);

        if (r.status < 0) {
            rc = r.status;
            if (d) *d = r.diag;
        } else {
            rc = dsq_conv_sink_item(sink, &items[w], &r, d);
        }
        result_free(&p.bufs, &r);
        if (rc == DSQ_OK && cancelled(c))
            rc = dsq_fail(d, DSQ_ERR_INTERRUPTED, NULL, NULL, -1, "interrupted");

        pthread_mutex_lock(&p.mu);
        p.written = w + 1;
        p.mem_used -= items[w].mem;
        if (rc < 0) p.stop = 1;
        pthread_cond_broadcast(&p.cv_work);
        pthread_mutex_unlock(&p.mu);
    }
    pthread_mutex_lock(&p.mu);
    p.stop = 1;
    pthread_cond_broadcast(&p.cv_work);
    pthread_mutex_unlock(&p.mu);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    for (size_t i = 0; i < p.window; i++)
        if (p.slots[i].ready) result_free(&p.bufs, &p.slots[i].r);
    for (int i = 0; i < p.bufs.n; i++) free(p.bufs.p[i]);
    if (c->hash) {   /* tensors left open by an error or an interruption */
        for (size_t i = 0; i < c->plan.n; i++) dsq_sha256_release(&c->hash[i].h);
        free(c->hash);
        c->hash = NULL;
        pthread_mutex_destroy(&c->hash_mu);
        pthread_cond_destroy(&c->hash_cv);
    }
    pthread_mutex_destroy(&p.bufs.mu);
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv_work);
    pthread_cond_destroy(&p.cv_done);
    free(p.slots);
    free(th);
    return rc;
}
