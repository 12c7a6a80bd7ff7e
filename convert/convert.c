/* convert.c - planning, metadata, output files, shards and resume for the
 * conversion pipeline (see convert.h; the workers are in convert_pool.c). */
#include "convert_internal.h"
#include "convert_meta.h"
#include "convert_ledger.h"
#include "dsq_file.h"
#include "dsq_mem.h"
#include "dsq_version.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void dsq_convert_opts_init(dsq_convert_opts *o)
{
    memset(o, 0, sizeof *o);
    o->zstd_level = 1;
    o->error_sample = 16;
    o->checkpoint_seconds = -1.0;
    o->tool = "ds-quant " DSQ_VERSION_STRING;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ================= prepare ================= */

static int plan_tensors(dsq_convert *c, dsq_diag *d)
{
    size_t n = c->plan.n;
    c->ct = calloc(n ? n : 1, sizeof *c->ct);
    c->results = calloc(n ? n : 1, sizeof *c->results);
    if (!c->ct || !c->results) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    uint64_t shard_acc = 0;
    int shard = 0;
    for (size_t i = 0; i < n; i++) {
        const dsq_plan_entry *e = &c->plan.v[i];
        dsq_conv_tensor *ct = &c->ct[i];
        const dsq_scheme *sc = e->scheme;
        int64_t rows = e->qshape.rows, cols = e->qshape.cols;
        int rc = dsq_qlayout_get(sc, &e->qshape, &ct->layout);
        if (rc < 0) return dsq_fail(d, rc, NULL, e->name, -1, "no layout for %s", sc->name);
        ct->stream = ct->layout.total > c->o.stream_bytes;
        ct->measure = sc->weight_bits <= 8 || (sc->id == DSQ_SCHEME_BF16 && e->src_dtype != DSQ_DTYPE_BF16);
        int64_t br = (int64_t)(DSQ_CONV_BLOCK_BYTES / ((uint64_t)cols * 4));
        ct->block_rows = br < 1 ? 1 : br;
        if (ct->stream) {
            uint64_t per_row = ct->layout.total / (uint64_t)rows + 1;
            uint64_t src_row = e->src_bytes / (uint64_t)rows + 1;
            if (src_row > per_row) per_row = src_row;
            int64_t pr = (int64_t)(c->o.piece_bytes / per_row);
            ct->piece_rows = pr < 1 ? 1 : pr > rows ? rows : pr;
        } else {
            ct->piece_rows = rows;
        }
        ct->npieces = (size_t)((rows + ct->piece_rows - 1) / ct->piece_rows);
        /* Per-thread scratch: one row block of floats and its blob. */
        int64_t brows = ct->block_rows < rows ? ct->block_rows : rows;
        size_t fl = (size_t)brows * (size_t)cols;
        if (fl > c->max_block_floats) c->max_block_floats = fl;
        dsq_qshape bs = e->qshape;
        bs.rows = brows;
        dsq_qlayout bl;
        rc = dsq_qlayout_get(sc, &bs, &bl);
        if (rc < 0) return dsq_fail(d, rc, NULL, e->name, -1, "no block layout for %s", sc->name);
        if (bl.total > c->max_block_blob) c->max_block_blob = bl.total;
        if (c->o.shard_bytes) {
            if (shard_acc > 0 && shard_acc + e->est_bytes > c->o.shard_bytes) {
                shard++;
                shard_acc = 0;
            }
            shard_acc += e->est_bytes;
            ct->shard = shard;
        }
        dsq_tensor_result *res = &c->results[i];
        res->name = e->name;
        res->scheme = sc->id;
        res->role = e->role.role;
        res->src_bytes = e->src_bytes;
        res->rel_error = -1;
    }
    c->nshards = c->o.shard_bytes ? shard + 1 : 0;
    return DSQ_OK;
}

int dsq_convert_prepare(dsq_convert **out, const dsq_convert_opts *o, dsq_diag *d)
{
    *out = NULL;
    if (!o || !o->input || !o->recipe)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "no input or recipe");
    if (o->zstd_level < 0 || o->zstd_level > DSQ_CTR_LEVEL_MAX)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "zstd level %d outside 0..%d",
                        o->zstd_level, DSQ_CTR_LEVEL_MAX);
    dsq_convert *c = calloc(1, sizeof *c);
    if (!c) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    c->o = *o;
    if (!c->o.mem_budget) {
        /* The budget counts every item in flight, so it also caps how many
         * workers can be busy: 512 MiB is ~17 expert-sized items (2 x 15 MB
         * each for V3 int8), which would idle most of a 192-core host. Give
         * each worker room for two such items beyond the floor. */
        int t = o->threads > 0 ? o->threads : dsq_cpu_count();
        uint64_t per = 64ull << 20;
        c->o.mem_budget = (uint64_t)t * per > (512ull << 20) ? (uint64_t)t * per : 512ull << 20;
    }
    /* .dsq output: blobs above 4 MiB (the piece size) go through the
     * streamed pieces, whose buffers are recycled, and whose zstd runs on
     * the workers. A whole tensor needs a buffer of its size on the worker
     * and one more (the encoded copy) while it waits for the writer: with
     * the 64 MiB threshold the e16 layer's buffers grew to 275-300 MB in
     * ~20 sizes, memory first touched in each run (page zeroing at
     * ~0.25-0.7 GB/s in this VM, 10-30% of the CPU, `perf record`); now
     * ~65 MB (peak RSS 250-300 -> 56-99 MB, -T 2). Exports keep
     * 64 MiB: most export targets gather a streamed tensor whole again
     * (convert_export.c), so streaming would only add a copy there. */
    if (!c->o.stream_bytes)
        c->o.stream_bytes = o->export_format && strcmp(o->export_format, "dsq") != 0 ? 64ull << 20
                                                                                  : 4ull << 20;
    /* 4 MiB: the window holds up to 2 x threads + 2 pieces, and each piece
     * buffer is memory first touched in this run (~0.2-0.3 GB/s of page
     * zeroing in this VM): 16 MiB pieces were 96 MiB of the 16-expert
     * w4a8 -T 2 run's 275 MB peak RSS. With zstd a streamed payload has
     * one frame per piece (compressed on the workers), so the piece size is
     * part of the output bytes: 4 MiB frames change the size by -0.01% to
     * +0.004% on the e16 layer against one frame per tensor. */
    if (!c->o.piece_bytes) c->o.piece_bytes = 4ull << 20;
    if (c->o.error_sample <= 0) c->o.error_sample = 16;
    if (!c->o.tool) c->o.tool = "ds-quant " DSQ_VERSION_STRING;
    if (o->export_format && strcmp(o->export_format, "dsq") != 0) {
        /* Blobs go to the export raw; shards are the export's. */
        c->xformat = o->export_format;
        c->xshard = o->shard_bytes;
        c->o.shard_bytes = 0;
        c->o.zstd_level = 0;
    }

    int rc = dsq_st_open(&c->m, o->input, d);
    if (rc == DSQ_OK) rc = dsq_conv_build_metadata(c, d);
    if (rc == DSQ_OK) rc = dsq_plan_build(&c->plan, o->recipe, c->m, c->num_hidden_layers, d);
    if (rc == DSQ_OK) rc = plan_tensors(c, d);
    if (rc == DSQ_OK) rc = dsq_conv_fingerprint(c, d);
    if (rc == DSQ_OK && c->xformat) rc = dsq_conv_export_prepare(c, d);
    if (rc < 0) {
        dsq_convert_free(c);
        return rc;
    }
    *out = c;
    return DSQ_OK;
}

const dsq_plan *dsq_convert_plan(const dsq_convert *c) { return &c->plan; }
int dsq_convert_have_config(const dsq_convert *c) { return c->have_config; }
const char *dsq_convert_metadata(const dsq_convert *c) { return c->meta; }

uint64_t dsq_convert_peak_estimate(const dsq_convert *c)
{
    int t = c->o.threads > 0 ? c->o.threads : dsq_cpu_count();
    uint64_t item_max = 0, acc_max = 0;
    for (size_t i = 0; i < c->plan.n; i++) {
        const dsq_conv_tensor *ct = &c->ct[i];
        uint64_t m;
        if (ct->stream) {
            m = (uint64_t)ct->piece_rows * (ct->layout.total / (uint64_t)c->plan.v[i].qshape.rows + 1);
            if (c->o.zstd_level > 0 && !c->xformat) m *= 2;   /* and its zstd frame */
            uint64_t acc = ct->layout.s_size + ct->layout.z_size + ct->layout.r_size;
            if (acc > acc_max) acc_max = acc;
        } else {
            m = 2 * ct->layout.total;
        }
        if (m > item_max) item_max = m;
    }
    uint64_t window = 2 * (uint64_t)t + 2;
    uint64_t inflight = window * item_max;
    /* The budget caps what waits for the writer, but each worker may hold
     * one item beyond it. */
    uint64_t cap = c->o.mem_budget + (uint64_t)t * item_max;
    if (inflight > cap) inflight = cap;
    uint64_t scratch = (uint64_t)t * (c->max_block_floats * 4 + c->max_block_blob + (4u << 20));
    uint64_t fixed = (32ull << 20) + (uint64_t)c->plan.n * 512 + strlen(c->meta) * 2;
    return fixed + scratch + inflight + acc_max;
}

void dsq_convert_free(dsq_convert *c)
{
    if (!c) return;
    dsq_plan_release(&c->plan);
    if (c->m) dsq_st_close(c->m);
    free(c->ct);
    free(c->results);
    free(c->xsrc);
    free(c->meta);
    free(c);
}

/* ================= output files ================= */

static char *shard_path(const dsq_convert *c, int s)
{
    if (!c->nshards) return strdup(c->o.output);
    char name[64];
    snprintf(name, sizeof name, "model-%05d-of-%05d.dsq", s + 1, c->nshards);
    return dsq_path_join(c->o.output, name);
}

/* Remove a stale partial file and journal left by an interrupted run, so a
 * fresh run starts clean. */
static void remove_partial(const char *path)
{
    char *tmp = dsq_outfile_tmp_name(path);
    if (!tmp) return;
    size_t n = strlen(tmp) + sizeof ".journal";
    char *j = malloc(n);
    if (j) {
        snprintf(j, n, "%s.journal", tmp);
        unlink(j);
        free(j);
    }
    unlink(tmp);
    free(tmp);
}

/* Sharded output keeps "<dir>/.dsq-resume" = "<fingerprint> <committed>"
 * between shard commits, so --resume knows which shards are done. */
static char *state_path(const dsq_convert *c)
{
    return dsq_path_join(c->o.output, ".dsq-resume");
}

/* The resume ledger (convert_ledger.h): beside the single file's journal, or
 * in the output directory of a sharded run. */
static char *ledger_path(const dsq_convert *c)
{
    if (c->nshards) return dsq_path_join(c->o.output, ".dsq-sources");
    char *tmp = dsq_outfile_tmp_name(c->o.output);
    char *p = tmp ? malloc(strlen(tmp) + sizeof ".sources") : NULL;
    if (p) { strcpy(p, tmp); strcat(p, ".sources"); }
    free(tmp);
    return p;
}

static int state_read(const dsq_convert *c)
{
    char *p = state_path(c), *txt = NULL;
    size_t len;
    int done = 0;
    if (p && dsq_read_file(p, 4096, &txt, &len, NULL) == DSQ_OK) {
        char fp[2 * DSQ_SHA256_LEN + 1];
        int k;
        if (sscanf(txt, "%64s %d", fp, &k) == 2 && !strcmp(fp, c->fingerprint) && k >= 0 &&
            k <= c->nshards)
            done = k;
    }
    free(txt);
    free(p);
    return done;
}

static int state_write(const dsq_convert *c, int committed, dsq_diag *d)
{
    char *p = state_path(c);
    if (!p) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    char buf[128];
    int n = snprintf(buf, sizeof buf, "%s %d\n", c->fingerprint, committed);
    int rc = dsq_write_file_atomic(p, buf, (size_t)n, DSQ_OUT_OVERWRITE, d);
    free(p);
    return rc;
}

/* ================= the sink (writer thread) ================= */

struct dsq_conv_sink {
    dsq_convert *c;
    dsq_convert_summary *sum;
    dsq_ctr_writer *w;
    int shard;                  /* shard of w, -1 if none open */
    int committed;              /* shards finished (sharded output) */
    unsigned open_flags;
    dsq_ledger *ledger;         /* source hashes for --resume; NULL with --no-journal */
    uint8_t *dig;               /* the current tensor's piece digests (ledger) */
    size_t dig_cap;             /* in digests */
    /* streamed tensor in progress */
    uint8_t *acc;               /* S, Z, R sections of the whole blob */
    size_t acc_size;
    size_t stream_tensor;
    /* per-tensor error accumulation */
    double err2, ref2;
    dsq_convert_progress prog;
    /* another output kind (export): items go to fn instead */
    dsq_conv_item_fn fn;
    void *fn_ctx;
};

static int ledger_presync(void *ledger, dsq_diag *d) { return dsq_ledger_sync(ledger, d); }

static int sink_open(dsq_conv_sink *k, int shard, dsq_diag *d)
{
    dsq_convert *c = k->c;
    char *path = shard_path(c, shard);
    if (!path) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    int rc = dsq_ctr_writer_open_ex(&k->w, path, k->open_flags, c->fingerprint, d);
    free(path);
    if (rc < 0) return rc;
    if (c->o.checkpoint_seconds >= 0)
        dsq_ctr_writer_set_checkpoint_interval(k->w, c->o.checkpoint_seconds);
    if (k->ledger) dsq_ctr_writer_set_presync(k->w, ledger_presync, k->ledger);
    rc = dsq_ctr_writer_set_metadata(k->w, c->meta, d);
    if (rc < 0) return rc;
    k->shard = shard;
    return DSQ_OK;
}

static int sink_finish(dsq_conv_sink *k, dsq_diag *d)
{
    if (!k->w) return DSQ_OK;
    /* A committed shard is reused by --resume without a journal: its
     * tensors' records must be durable before it becomes visible. */
    int rc = dsq_ledger_sync(k->ledger, d);
    if (rc < 0) return rc;
    rc = dsq_ctr_writer_finish(k->w, d);
    k->w = NULL;
    if (rc < 0) return rc;
    k->committed = k->shard + 1;
    if (k->c->nshards) DSQ_TRY(state_write(k->c, k->committed, d));
    return DSQ_OK;
}

static void fill_info(const dsq_convert *c, size_t i, dsq_ctr_tensor_info *info)
{
    const dsq_plan_entry *e = &c->plan.v[i];
    memset(info, 0, sizeof *info);
    info->name = e->name;
    info->src_dtype = dsq_dtype_name(e->src_dtype);
    info->role = e->role.role;
    info->scheme = e->scheme->id;
    info->ndim = (uint32_t)e->ndim;
    for (int j = 0; j < e->ndim; j++) info->shape[j] = e->shape[j];
    info->group_size = (uint32_t)e->qshape.group_size;
    info->pack_version = DSQ_QBLOB_VERSION;
}

static int write_zeros(dsq_ctr_writer *w, size_t n, dsq_diag *d)
{
    static const uint8_t z[256];
    while (n) {
        size_t k = n < sizeof z ? n : sizeof z;
        DSQ_TRY(dsq_ctr_writer_chunk(w, z, k, d));
        n -= k;
    }
    return DSQ_OK;
}

/* A streamed tensor's blob, emitted in file order: header, W rows piece by
 * piece, then the S / Z / R sections gathered from all pieces. */
static int sink_stream(dsq_conv_sink *k, const dsq_conv_item *it, dsq_conv_result *r, dsq_diag *d)
{
    dsq_convert *c = k->c;
    const dsq_plan_entry *e = &c->plan.v[it->tensor];
    const dsq_conv_tensor *ct = &c->ct[it->tensor];
    const dsq_qlayout *L = &ct->layout;
    dsq_qshape ps = e->qshape;
    ps.rows = it->nrows;
    dsq_qlayout pl;
    DSQ_TRY(dsq_qlayout_get(e->scheme, &ps, &pl));
    if (it->piece == 0) {
        dsq_ctr_tensor_info info;
        fill_info(c, it->tensor, &info);
        info.raw_size = L->total;
        /* With zstd, the workers compressed each piece's rows as a frame
         * of its own (convert_pool.c): the payload is a sequence of frames. */
        if (r->zframe && c->hash) DSQ_TRY(dsq_ctr_writer_begin_frames_hashed(k->w, &info, c->o.zstd_level, d));
        else if (r->zframe) DSQ_TRY(dsq_ctr_writer_begin_frames(k->w, &info, c->o.zstd_level, d));
        else DSQ_TRY(dsq_ctr_writer_begin(k->w, &info, c->o.zstd_level, d));
        dsq_qblob_header h;
        memcpy(&h, r->piece, sizeof h);
        h.rows = e->qshape.rows;
        h.blob_size = L->total;
        if (r->zframe) {
            /* header and the gap before W: one small frame, not one per call */
            uint8_t *hb = calloc(1, L->w_off);
            if (!hb) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, e->name, -1, "out of memory");
            memcpy(hb, &h, sizeof h);
            int hrc = dsq_ctr_writer_chunk(k->w, hb, L->w_off, d);
            free(hb);
            DSQ_TRY(hrc);
        } else {
            DSQ_TRY(dsq_ctr_writer_chunk(k->w, &h, sizeof h, d));
            DSQ_TRY(write_zeros(k->w, L->w_off - sizeof h, d));
        }
        free(k->acc);
        k->acc_size = L->total - L->w_off - L->w_size;
        k->acc = calloc(1, k->acc_size ? k->acc_size : 1);
        if (!k->acc) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, e->name, -1, "out of memory");
        k->stream_tensor = it->tensor;
    }
    if (r->zframe)   /* raw rows for the writer's hash, unless the workers took it */
        DSQ_TRY(dsq_ctr_writer_frame(k->w, c->hash ? NULL : r->piece + pl.w_off,
                                     (size_t)it->nrows * pl.row_bytes, r->zframe, r->zframe_size, d));
    else
        DSQ_TRY(dsq_ctr_writer_chunk(k->w, r->piece + pl.w_off, (size_t)it->nrows * pl.row_bytes, d));
    /* Sections after W, addressed relative to the end of W. */
    size_t base = L->w_off + L->w_size, g = (size_t)L->ngroups, r0 = (size_t)it->row0;
    size_t nr = (size_t)it->nrows;
    if (L->s_size) memcpy(k->acc + (L->s_off - base) + r0 * g * 4, r->piece + pl.s_off, nr * g * 4);
    if (L->z_size) memcpy(k->acc + (L->z_off - base) + r0 * g, r->piece + pl.z_off, nr * g);
    if (L->r_size) memcpy(k->acc + (L->r_off - base) + r0 * 4, r->piece + pl.r_off, nr * 4);
    if (it->piece + 1 == ct->npieces) {
        if (k->acc_size) DSQ_TRY(dsq_ctr_writer_chunk(k->w, k->acc, k->acc_size, d));
        if (r->zframe && c->hash) {
            /* The workers hashed header and rows (hash_turn, convert_pool.c);
             * every piece was hashed before it reached this thread. */
            dsq_conv_hash *hs = &c->hash[it->tensor];
            if (hs->broken || !hs->h.md_ctx)
                return dsq_fail(d, DSQ_ERR_NOMEM, NULL, e->name, -1, "out of memory for the payload hash");
            uint8_t dig[DSQ_SHA256_LEN];
            dsq_sha256_update(&hs->h, k->acc, k->acc_size);
            dsq_sha256_final(&hs->h, dig);
            free(k->acc);
            k->acc = NULL;
            DSQ_TRY(dsq_ctr_writer_end_digest(k->w, dig, d));
            return DSQ_OK;
        }
        free(k->acc);
        k->acc = NULL;
        DSQ_TRY(dsq_ctr_writer_end(k->w, d));
    }
    return DSQ_OK;
}

int dsq_conv_sink_item(dsq_conv_sink *k, const dsq_conv_item *it, dsq_conv_result *r, dsq_diag *d)
{
    if (k->fn) return k->fn(k->fn_ctx, it, r, d);
    dsq_convert *c = k->c;
    const dsq_plan_entry *e = &c->plan.v[it->tensor];
    const dsq_conv_tensor *ct = &c->ct[it->tensor];
    if (!k->w || ct->shard != k->shard) {
        DSQ_TRY(sink_finish(k, d));
        DSQ_TRY(sink_open(k, ct->shard, d));
    }
    int rc;
    if (k->ledger) {
        /* The workers hashed each piece's source rows; the record is added
         * before the last piece commits the tensor (and so before any
         * checkpoint can name it). */
        if (ct->npieces > k->dig_cap) {
            uint8_t *nd = realloc(k->dig, ct->npieces * DSQ_SHA256_LEN);
            if (!nd) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, e->name, -1, "out of memory");
            k->dig = nd;
            k->dig_cap = ct->npieces;
        }
        memcpy(k->dig + it->piece * DSQ_SHA256_LEN, r->src_sha, DSQ_SHA256_LEN);
        if (it->piece + 1 == ct->npieces) {
            uint8_t h[DSQ_SHA256_LEN];
            if (dsq_ledger_combine(c->m, e->t, k->dig, ct->npieces, h) < 0)
                return dsq_fail(d, DSQ_ERR_NOMEM, NULL, e->name, -1, "out of memory");
            DSQ_TRY(dsq_ledger_add(k->ledger, e->name, h, d));
        }
    }
    if (ct->stream) {
        rc = sink_stream(k, it, r, d);
    } else {
        dsq_ctr_tensor_info info;
        fill_info(c, it->tensor, &info);
        rc = dsq_ctr_writer_add_blob(k->w, &info, &r->blob, d);
    }
    if (rc < 0) {
        if (d && !d->tensor[0]) snprintf(d->tensor, sizeof d->tensor, "%s", e->name);
        return rc;
    }
    if (it->piece == 0) k->err2 = k->ref2 = 0;
    k->err2 += r->err2;
    k->ref2 += r->ref2;
    uint64_t share = e->src_bytes * (uint64_t)it->nrows / (uint64_t)e->qshape.rows;
    const dsq_st_tensor *sct = dsq_st_scale_of(c->m, e->t);
    if (it->piece + 1 == ct->npieces) {
        /* Last piece: make the byte count exact and record the tensor. */
        share = e->src_bytes - e->src_bytes * (uint64_t)it->row0 / (uint64_t)e->qshape.rows;
        if (sct) share += sct->nbytes;
        dsq_tensor_result *res = &c->results[it->tensor];
        const dsq_ctr_tensor_info *wi = dsq_ctr_writer_get(k->w, dsq_ctr_writer_count(k->w) - 1);
        res->raw_bytes = wi->raw_size;
        res->stored_bytes = wi->stored_size;
        if (ct->measure) res->rel_error = k->ref2 > 0 ? sqrt(k->err2 / k->ref2) : 0.0;
        dsq_convert_summary *s = k->sum;
        s->count_by_scheme[res->scheme]++;
        s->src_by_scheme[res->scheme] += e->src_bytes;
        s->stored_by_scheme[res->scheme] += wi->stored_size;
        s->bytes_raw += wi->raw_size;
        s->bytes_stored += wi->stored_size;
        s->tensors++;
        dsq_st_advise(c->m, e->t, DSQ_ST_DONTNEED);
        k->prog.tensors_done++;
    }
    k->sum->bytes_converted += share;
    k->prog.bytes_done += share;
    k->prog.bytes_out = dsq_ctr_writer_bytes(k->w);
    k->prog.tensor = e->name;
    if (c->o.progress) c->o.progress(c->o.progress_ctx, &k->prog);
    return DSQ_OK;
}

/* ================= run ================= */

/* Tensors an earlier run already wrote: committed shards (sharded output)
 * and the prefix recovered from the journal of the current file. They must
 * be exactly the plan's first tensors. */
static int account_resumed(dsq_conv_sink *k, size_t from, size_t to, const dsq_ctr_tensor_info *(*get)(const void *, size_t),
                           const void *src, const char *path, dsq_diag *d)
{
    dsq_convert *c = k->c;
    for (size_t i = from; i < to; i++) {
        const dsq_ctr_tensor_info *wi = get(src, i - from);
        const dsq_plan_entry *e = &c->plan.v[i];
        if (!wi || strcmp(wi->name, e->name) != 0 || wi->scheme != e->scheme->id)
            return dsq_fail(d, DSQ_ERR_STATE, path, e->name, -1,
                            "partial output does not match this conversion (tensor %zu is '%s'); "
                            "rerun without --resume", i, wi ? wi->name : "?");
        if (k->ledger) {
            /* name, size and mtime can all survive a change of the bytes */
            uint8_t h[DSQ_SHA256_LEN];
            if (dsq_ledger_hash(c->m, e->t, e->qshape.rows, c->ct[i].piece_rows, c->ct[i].block_rows, h) < 0)
                return dsq_fail(d, DSQ_ERR_NOMEM, NULL, e->name, -1, "out of memory");
            DSQ_TRY(dsq_ledger_check(k->ledger, e->name, h, d));
        }
        dsq_tensor_result *res = &c->results[i];
        res->raw_bytes = wi->raw_size;
        res->stored_bytes = wi->stored_size;
        dsq_convert_summary *s = k->sum;
        s->count_by_scheme[res->scheme]++;
        s->src_by_scheme[res->scheme] += e->src_bytes;
        s->stored_by_scheme[res->scheme] += wi->stored_size;
        s->bytes_raw += wi->raw_size;
        s->bytes_stored += wi->stored_size;
        s->tensors++;
        s->resumed++;
        k->prog.tensors_done++;
    }
    return DSQ_OK;
}

static const dsq_ctr_tensor_info *get_writer(const void *w, size_t i) { return dsq_ctr_writer_get(w, i); }
static const dsq_ctr_tensor_info *get_reader(const void *r, size_t i) { return dsq_ctr_get(r, i); }

static size_t shard_begin(const dsq_convert *c, int s)
{
    size_t i = 0;
    while (i < c->plan.n && c->ct[i].shard < s) i++;
    return i;
}

static int build_items(dsq_convert *c, size_t from, dsq_conv_item **out, size_t *count, dsq_diag *d)
{
    size_t n = 0;
    for (size_t i = from; i < c->plan.n; i++) n += c->ct[i].npieces;
    dsq_conv_item *v = calloc(n ? n : 1, sizeof *v);
    if (!v) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    size_t k = 0;
    for (size_t i = from; i < c->plan.n; i++) {
        dsq_conv_tensor *ct = &c->ct[i];
        int64_t rows = c->plan.v[i].qshape.rows;
        ct->first_item = k;
        for (size_t p = 0; p < ct->npieces; p++, k++) {
            v[k].tensor = i;
            v[k].piece = p;
            v[k].row0 = (int64_t)p * ct->piece_rows;
            v[k].nrows = rows - v[k].row0 < ct->piece_rows ? rows - v[k].row0 : ct->piece_rows;
            if (ct->stream)   /* with zstd, the piece's frame too (up to its size) */
                v[k].mem = (uint64_t)v[k].nrows * (ct->layout.total / (uint64_t)rows + 1) *
                           (c->o.zstd_level > 0 && !c->xformat ? 2 : 1);
            else
                v[k].mem = 2 * ct->layout.total;
        }
    }
    *out = v;
    *count = n;
    return DSQ_OK;
}

static int write_index(dsq_convert *c, dsq_diag *d)
{
    char *json = dsq_conv_index_json(c);
    char *p = dsq_path_join(c->o.output, "model.dsq.index.json");
    int rc = json && p ? dsq_write_file_atomic(p, json, strlen(json), DSQ_OUT_OVERWRITE, d)
                       : dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    free(json);
    free(p);
    return rc;
}

static int prepare_output(dsq_convert *c, dsq_diag *d)
{
    const char *out = c->o.output;
    DSQ_TRY(dsq_convert_check_output(&c->o, d));
    if (!c->nshards) {
        if (dsq_path_is_dir(out))
            return dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1,
                            "output is a directory (use --shard-size for sharded output)");
        if (dsq_path_exists(out) && !c->o.overwrite)
            return dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1, "output exists (use -f to overwrite)");
        if (!c->o.resume) remove_partial(out);
        return DSQ_OK;
    }
    char *idx = dsq_path_join(out, "model.dsq.index.json");
    if (!idx) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    int exists = dsq_path_exists(idx);
    free(idx);
    if (exists && !c->o.overwrite)
        return dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1, "output exists (use -f to overwrite)");
    if (dsq_path_exists(out) && !dsq_path_is_dir(out))
        return dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1, "output exists and is not a directory");
    if (mkdir(out, 0755) != 0 && errno != EEXIST) return dsq_fail_errno(d, errno, out, "cannot create directory");
    if (c->o.overwrite && !c->o.resume) {
        /* The index goes first: a directory must never hold an index that
         * describes a mix of old and new shards. Then every shard of an
         * older set (any shard count), so none outlives the new one. */
        char *ix = dsq_path_join(out, "model.dsq.index.json");
        if (ix) unlink(ix);
        free(ix);
        DIR *dh = opendir(out);
        struct dirent *de;
        while (dh && (de = readdir(dh))) {
            int a, b, end = 0;
            if (sscanf(de->d_name, "model-%5d-of-%5d.dsq%n", &a, &b, &end) == 2 && end > 0 &&
                de->d_name[end] == 0) {
                char *old = dsq_path_join(out, de->d_name);
                if (old) unlink(old);
                free(old);
            }
        }
        if (dh) closedir(dh);
    }
    for (int s = 0; s < c->nshards; s++) {
        char *p = shard_path(c, s);
        if (!p) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        int ex = dsq_path_exists(p);
        if (!c->o.resume) remove_partial(p);
        if (ex && !c->o.overwrite && !c->o.resume) {
            int rc = dsq_fail(d, DSQ_ERR_EXISTS, p, NULL, -1, "output shard exists (use -f to overwrite)");
            free(p);
            return rc;
        }
        free(p);
    }
    if (!c->o.resume) {
        char *sp = state_path(c);
        if (sp) unlink(sp);
        free(sp);
    }
    return DSQ_OK;
}

/* A fatal (non-resumable) error: leave nothing behind. */
static void cleanup_failed(dsq_convert *c, dsq_conv_sink *k)
{
    /* The ledger goes with the partial file: a writer that failed to open
     * (wrong recipe for the partial, say) keeps its resumable state, and so
     * must the ledger, or the right --resume later could not reuse it. */
    dsq_ledger_close(k->ledger, k->w != NULL || c->nshards || !c->o.resume);
    k->ledger = NULL;
    if (k->w) dsq_ctr_writer_abort(k->w);
    k->w = NULL;
    if (!c->nshards) return;
    for (int s = 0; s < k->committed; s++) {
        char *p = shard_path(c, s);
        if (p) unlink(p);
        free(p);
    }
    char *sp = state_path(c);
    if (sp) unlink(sp);
    free(sp);
}

static uint64_t file_size(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? (uint64_t)st.st_size : 0;
}

int dsq_conv_run_items(dsq_convert *c, size_t from, dsq_conv_item_fn fn, void *ctx, dsq_diag *d)
{
    dsq_conv_sink k;
    memset(&k, 0, sizeof k);
    k.c = c;
    k.shard = -1;
    k.fn = fn;
    k.fn_ctx = ctx;
    dsq_conv_item *items = NULL;
    size_t nitems = 0;
    int rc = build_items(c, from, &items, &nitems, d);
    if (rc == DSQ_OK) rc = dsq_conv_pipeline_run(c, items, nitems, &k, d);
    free(items);
    return rc;
}

/* A full disk is not the input's fault: the partial file, its journal, the
 * ledger and the committed shards are what --resume continues from once
 * space is freed, so keep them and say so. */
static int keep_for_resume(dsq_conv_sink *k, int rc, dsq_diag *d)
{
    if (k->w) dsq_ctr_writer_detach(k->w, NULL);
    k->w = NULL;
    dsq_ledger_close(k->ledger, 0);
    k->ledger = NULL;
    if (d) {
        size_t l = strlen(d->msg);
        snprintf(d->msg + l, sizeof d->msg - l, "; the partial output and its journal are kept: "
                 "free some space and run again with --resume to continue");
    }
    return rc;
}

int dsq_convert_run(dsq_convert *c, dsq_convert_summary *s, dsq_diag *d)
{
    memset(s, 0, sizeof *s);
    if (c->ran) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "converter already ran");
    if (c->xformat) {
        c->ran = 1;
        return dsq_conv_export_run(c, s, d);
    }
    if (c->o.resume && c->o.no_journal)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "resume needs the journal");
    c->ran = 1;
    double t0 = now_s();
    DSQ_TRY(prepare_output(c, d));

    dsq_conv_sink k;
    memset(&k, 0, sizeof k);
    k.c = c;
    k.sum = s;
    k.shard = -1;
    k.open_flags = (c->o.no_journal ? 0 : DSQ_CTR_RESUME) | (c->o.overwrite ? DSQ_OUT_OVERWRITE : 0);
    if (!c->o.no_journal) {
        char *lp = ledger_path(c);
        int lrc = lp ? dsq_ledger_open(&k.ledger, lp, c->o.resume, d)
                     : dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        free(lp);
        if (lrc < 0) return lrc;
        c->ledger_on = 1;
    }
    k.prog.tensors_total = c->plan.n;
    for (size_t i = 0; i < c->plan.n; i++) k.prog.bytes_total += c->results[i].src_bytes;
    s->bytes_in = c->plan.src_bytes;
    s->shards = c->nshards;
    s->results = c->results;

    int rc = DSQ_OK;
    size_t from = 0;
    int first_shard = 0;
    if (c->o.resume && c->nshards) {
        /* Shards committed by the earlier run are complete files. */
        int done = state_read(c);
        if (done < c->nshards) {
            /* The disk filled between renaming the next shard into place and
             * recording it in the state file: a complete shard with no
             * partial beside it, checked below like the others. */
            char *p = shard_path(c, done);
            char *tmp = p ? dsq_outfile_tmp_name(p) : NULL;
            if (p && tmp && dsq_path_exists(p) && !dsq_path_exists(tmp)) done++;
            free(tmp);
            free(p);
        }
        for (int sh = 0; sh < done && rc == DSQ_OK; sh++) {
            char *p = shard_path(c, sh);
            dsq_ctr *r = NULL;
            rc = p ? dsq_ctr_open(&r, p, d) : DSQ_ERR_NOMEM;
            size_t a = shard_begin(c, sh), b = shard_begin(c, sh + 1);
            if (rc == DSQ_OK && dsq_ctr_count(r) != b - a)
                rc = dsq_fail(d, DSQ_ERR_STATE, p, NULL, -1, "committed shard does not match this conversion");
            if (rc == DSQ_OK) rc = account_resumed(&k, a, b, get_reader, r, p, d);
            if (r) dsq_ctr_close(r);
            free(p);
            from = b;
        }
        first_shard = done;
        k.committed = done;
    }
    if (rc == DSQ_OK && from < c->plan.n) {
        rc = sink_open(&k, c->nshards ? first_shard : 0, d);
        if (rc == DSQ_OK && c->o.resume) {
            size_t got = dsq_ctr_writer_count(k.w);
            if (from + got > c->plan.n)
                rc = dsq_fail(d, DSQ_ERR_STATE, dsq_ctr_writer_tmp_path(k.w), NULL, -1,
                              "partial output holds more tensors than this conversion");
            else
                rc = account_resumed(&k, from, from + got, get_writer, k.w,
                                     dsq_ctr_writer_tmp_path(k.w), d);
            from += got;
        }
    }
    k.prog.bytes_done = 0;
    for (size_t i = 0; i < from; i++) {
        const dsq_st_tensor *sct = dsq_st_scale_of(c->m, c->plan.v[i].t);
        k.prog.bytes_done += c->results[i].src_bytes + (sct ? sct->nbytes : 0);
    }
    dsq_conv_item *items = NULL;
    size_t nitems = 0;
    if (rc == DSQ_OK) rc = build_items(c, from, &items, &nitems, d);
    if (rc == DSQ_OK) rc = dsq_conv_pipeline_run(c, items, nitems, &k, d);
    free(items);
    free(k.acc);
    k.acc = NULL;
    free(k.dig);
    k.dig = NULL;

    if (rc == DSQ_ERR_NOSPC && !c->o.no_journal && k.w) return keep_for_resume(&k, rc, d);
    if (rc == DSQ_ERR_INTERRUPTED) {
        if (c->o.no_journal) {          /* nothing could resume it: leave nothing */
            cleanup_failed(c, &k);
            return rc;
        }
        if (k.w) dsq_ctr_writer_detach(k.w, NULL);   /* keep partial + journal */
        k.w = NULL;
        dsq_ledger_close(k.ledger, 0);
        return rc;
    }
    if (rc == DSQ_OK && !k.w && c->plan.n == 0) rc = sink_open(&k, 0, d); /* empty model */
    if (rc == DSQ_OK) rc = sink_finish(&k, d);
    /* Sharded output whose last shards were all resumed: nothing to finish. */
    if (rc == DSQ_OK && c->nshards) rc = write_index(c, d);
    /* The disk filled while the last tensors' index / metadata (the writer
     * kept its temporary and journal then), the resume state or the shard
     * index were written: every committed shard stays too. */
    if (rc == DSQ_ERR_NOSPC && !c->o.no_journal) return keep_for_resume(&k, rc, d);
    if (rc < 0) {
        cleanup_failed(c, &k);
        return rc;
    }
    dsq_ledger_close(k.ledger, 1);
    k.ledger = NULL;
    if (c->nshards) {
        char *sp = state_path(c);
        if (sp) unlink(sp);
        free(sp);
        for (int sh = 0; sh < c->nshards; sh++) {
            char *p = shard_path(c, sh);
            if (p) s->bytes_out += file_size(p);
            free(p);
        }
    } else {
        s->bytes_out = file_size(c->o.output);
    }
    s->seconds = now_s() - t0;
    return DSQ_OK;
}
