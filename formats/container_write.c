/* container_write.c - the streaming .dsq writer: payloads appended as they
 * come, index + metadata + footer at the end, atomic commit, and resumable
 * checkpoints (docs/dsq-format.md §1, §9). */
#include "container_layout.h"

#include "dsq_mem.h"
#include "dsq_thread.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

struct dsq_ctr_writer {
    dsq_outfile f;
    unsigned flags;
    int failed;                /* sticky status after a failed write */
    char *fingerprint;
    char *journal;             /* "<tmp>.journal" */
    dsq_ctr_wentry *e;
    size_t n, cap;
    dsq_ctr_nameset names;
    char *meta;
    size_t meta_len;
    uint8_t header_sha[DSQ_SHA256_LEN];

    /* streamed tensor in progress */
    int streaming;
    dsq_ctr_wentry cur;
    int cur_level;
    int cur_frames;            /* payload as a sequence of frames (begin_frames);
                                * 2: the caller hashes it (end_digest) */
    uint64_t cur_raw, cur_pledged;
    dsq_sha256 raw_h;
    ZSTD_CCtx *cctx;
    uint8_t *zbuf;
    size_t zcap;
    dsq_pool *pair;            /* hash beside compress (dsq_ctr_writer_chunk) */

    /* SHA-256 of stored bytes while a payload is written (resume only) */
    dsq_sha256 st_h;
    int st_on;

    /* checkpoints */
    double ckpt_interval, ckpt_last, ckpt_cost;
    /* A checkpoint waiting for the background flush of its bytes: the
     * first ckpt_n entries, ending at ckpt_end, durable once the flush of
     * [0, ckpt_upto) is done (dsq_outfile_sync_begin). */
    int ckpt_pending;
    size_t ckpt_n;
    uint64_t ckpt_end, ckpt_upto;
    dsq_ctr_presync_fn presync;
    void *presync_ctx;
};

static const char *writer_name(const void *ctx, size_t i)
{
    return ((const struct dsq_ctr_writer *)ctx)->e[i].name;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int resuming(const dsq_ctr_writer *w) { return (w->flags & DSQ_CTR_RESUME) != 0; }

/* ---- low-level output ---- */

static int w_write(dsq_ctr_writer *w, const void *p, size_t n, dsq_diag *d)
{
    if (!n) return DSQ_OK;
    int rc = dsq_outfile_write(&w->f, p, n, d);
    if (rc < 0) { w->failed = rc; return rc; }
    if (w->st_on) dsq_sha256_update(&w->st_h, p, n);
    return DSQ_OK;
}

static int w_pad(dsq_ctr_writer *w, size_t align, dsq_diag *d)
{
    int rc = dsq_outfile_pad(&w->f, align, d);
    if (rc < 0) w->failed = rc;
    return rc;
}

static int w_usable(dsq_ctr_writer *w, dsq_diag *d)
{
    if (w->failed)
        return dsq_fail(d, w->failed, w->f.tmp_path, NULL, -1,
                        "writer failed earlier; abort or detach it");
    if (w->streaming)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, w->f.tmp_path, w->cur.name, -1,
                        "a streamed tensor is still open");
    return DSQ_OK;
}

/* Cut the file back to len (roll back a payload, resume truncation). */
static int w_truncate(dsq_ctr_writer *w, uint64_t len, dsq_diag *d)
{
    int rc = dsq_outfile_truncate(&w->f, len, d);
    if (rc < 0) w->failed = rc;
    return rc;
}

/* ---- entries ---- */

/* Validate caller info and fill a fresh entry (strings copied). */
static int entry_prepare(dsq_ctr_writer *w, const dsq_ctr_tensor_info *info,
                         dsq_ctr_wentry *out, dsq_diag *d)
{
    memset(out, 0, sizeof *out);
    const char *p = w->f.path;
    if (!info) return dsq_fail(d, DSQ_ERR_INVALID_ARG, p, NULL, -1, "no tensor info");
    const char *dt = info->src_dtype ? info->src_dtype : "";
    size_t nlen = info->name ? strlen(info->name) : 0;
    DSQ_TRY(dsq_ctr_check_info(info, nlen, strlen(dt), DSQ_ERR_INVALID_ARG, p, -1, d));
    if (dsq_ctr_nameset_find(&w->names, info->name, writer_name, w) >= 0)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, p, info->name, -1, "duplicate tensor name");
    out->t = *info;
    out->name = strdup(info->name);
    out->dtype = strdup(dt);
    if (!out->name || !out->dtype) {
        free(out->name); free(out->dtype);
        memset(out, 0, sizeof *out);
        return dsq_fail(d, DSQ_ERR_NOMEM, p, NULL, -1, "out of memory");
    }
    out->t.name = out->name;
    out->t.src_dtype = out->dtype;
    return DSQ_OK;
}

static int entry_commit(dsq_ctr_writer *w, dsq_ctr_wentry *e, dsq_diag *d)
{
    if (w->n == w->cap) {
        size_t ncap = w->cap ? w->cap * 2 : 256;
        dsq_ctr_wentry *ne = realloc(w->e, ncap * sizeof *ne);
        if (!ne) return dsq_fail(d, DSQ_ERR_NOMEM, w->f.path, NULL, -1, "out of memory");
        /* Entries moved: re-point their string fields. */
        for (size_t i = 0; i < w->n; i++) { ne[i].t.name = ne[i].name; ne[i].t.src_dtype = ne[i].dtype; }
        w->e = ne;
        w->cap = ncap;
    }
    e->t.index = (uint32_t)w->n;
    w->e[w->n] = *e;
    if (dsq_ctr_nameset_add(&w->names, w->n, e->name, writer_name, w) < 0)
        return dsq_fail(d, DSQ_ERR_NOMEM, w->f.path, NULL, -1, "out of memory");
    w->n++;
    memset(e, 0, sizeof *e);
    return DSQ_OK;
}

static void entry_drop(dsq_ctr_wentry *e)
{
    free(e->name);
    free(e->dtype);
    memset(e, 0, sizeof *e);
}

static uint64_t entries_end(const dsq_ctr_writer *w)
{
    if (!w->n) return DSQ_CTR_HEADER_SIZE;
    return w->e[w->n - 1].t.offset + w->e[w->n - 1].t.stored_size;
}

/* ---- checkpoints ---- */

void dsq_ctr_writer_set_checkpoint_interval(dsq_ctr_writer *w, double seconds)
{
    w->ckpt_interval = seconds > 0 ? seconds : 0;
}

void dsq_ctr_writer_set_presync(dsq_ctr_writer *w, dsq_ctr_presync_fn fn, void *ctx)
{
    w->presync = fn;
    w->presync_ctx = ctx;
}

int dsq_ctr_writer_checkpoint(dsq_ctr_writer *w, dsq_diag *d)
{
    if (!resuming(w)) return DSQ_OK;
    if (w->failed) return w->failed;
    w->ckpt_pending = 0;   /* this one covers more */
    double t0 = now_s();
    /* Data first: the journal must never describe bytes not yet durable. */
    DSQ_TRY(dsq_outfile_sync(&w->f, d));
    if (w->presync) DSQ_TRY(w->presync(w->presync_ctx, d));
    DSQ_TRY(dsq_ctr_journal_save(w->journal, w->fingerprint, w->header_sha, w->e, w->n,
                                 entries_end(w), d));
    w->ckpt_last = now_s();
    w->ckpt_cost = w->ckpt_last - t0;
    return DSQ_OK;
}

/* The pending checkpoint's journal, its bytes being durable. t0: when the
 * writer's own part of it began (its cost counts toward the interval). */
static int ckpt_save(dsq_ctr_writer *w, double t0, dsq_diag *d)
{
    w->ckpt_pending = 0;
    int rc = w->presync ? w->presync(w->presync_ctx, d) : DSQ_OK;
    if (rc == DSQ_OK)
        rc = dsq_ctr_journal_save(w->journal, w->fingerprint, w->header_sha, w->e, w->ckpt_n,
                                  w->ckpt_end, d);
    if (rc < 0) return w->failed = rc;
    w->ckpt_cost = now_s() - t0;
    return DSQ_OK;
}

/* Checkpoints in two steps, so the writer never waits for the disk: at the
 * interval the entries so far are noted and a flush of their bytes is
 * asked of the output's background syncer (dsq_syncer.h); at a later call,
 * once that flush is done, the journal naming exactly those entries is
 * saved. The journal still never describes a byte that is not durable.
 * (Without the syncer the flush happens in place and the journal at once.)
 * An interval of 0 asks for every tensor to be journaled before the next
 * begins: that stays a checkpoint in place. */
static int maybe_checkpoint(dsq_ctr_writer *w, dsq_diag *d)
{
    if (!resuming(w)) return DSQ_OK;
    if (w->ckpt_interval <= 0) return dsq_ctr_writer_checkpoint(w, d);
    if (w->ckpt_pending) {
        int r = dsq_outfile_synced(&w->f, w->ckpt_upto, d);
        if (r < 0) return w->failed = r;
        return r ? ckpt_save(w, now_s(), d) : DSQ_OK;
    }
    double wait = w->ckpt_interval;
    /* Rewriting the journal is O(tensors): keep it under ~5% of the time. */
    if (wait > 0 && wait < 20 * w->ckpt_cost) wait = 20 * w->ckpt_cost;
    if (wait > 0 && now_s() - w->ckpt_last < wait) return DSQ_OK;
    double t0 = now_s();
    w->ckpt_n = w->n;
    w->ckpt_end = entries_end(w);
    int rc = dsq_outfile_sync_begin(&w->f, &w->ckpt_upto, d);
    if (rc < 0) return w->failed = rc;
    w->ckpt_pending = 1;
    w->ckpt_last = t0;
    int r = dsq_outfile_synced(&w->f, w->ckpt_upto, d);
    if (r < 0) return w->failed = r;
    return r ? ckpt_save(w, t0, d) : DSQ_OK;
}

/* ---- open / resume ---- */

static void writer_free(dsq_ctr_writer *w)
{
    if (!w) return;
    dsq_ctr_wentries_free(w->e, w->n);
    entry_drop(&w->cur);
    dsq_ctr_nameset_free(&w->names);
    if (w->cctx) ZSTD_freeCCtx(w->cctx);
    dsq_pool_free(w->pair);
    if (w->streaming) dsq_sha256_release(&w->raw_h);
    if (w->st_on) dsq_sha256_release(&w->st_h);
    free(w->zbuf);
    free(w->meta);
    free(w->fingerprint);
    free(w->journal);
    free(w);
}

/* Hash [off, off + len) of the partial file. */
static int hash_range(int fd, uint64_t off, uint64_t len, uint8_t out[32], uint8_t *buf, size_t bufsz)
{
    dsq_sha256 h;
    if (dsq_sha256_init(&h) < 0) return DSQ_ERR_NOMEM;
    while (len) {
        size_t k = len < bufsz ? (size_t)len : bufsz;
        ssize_t r = pread(fd, buf, k, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) { dsq_sha256_release(&h); return DSQ_ERR_TRUNCATED; }
        dsq_sha256_update(&h, buf, (size_t)r);
        off += (uint64_t)r;
        len -= (uint64_t)r;
    }
    dsq_sha256_final(&h, out);
    return DSQ_OK;
}

/* SHA-256 of the RAW bytes of a zstd frame stored at [off, off + len): resume
 * checks compressed payloads against their raw hash, so normal runs never hash
 * the compressed bytes a second time on the (serial) writer thread. */
static int hash_range_zstd(int fd, uint64_t off, uint64_t len, uint64_t raw_size,
                           uint8_t out[32], uint8_t *buf, size_t bufsz)
{
    ZSTD_DStream *ds = ZSTD_createDStream();
    size_t outsz = ZSTD_DStreamOutSize();
    uint8_t *ob = malloc(outsz);
    dsq_sha256 h;
    int rc = (ds && ob && dsq_sha256_init(&h) == DSQ_OK) ? DSQ_OK : DSQ_ERR_NOMEM;
    if (rc < 0) { ZSTD_freeDStream(ds); free(ob); return rc; }
    ZSTD_initDStream(ds);
    uint64_t produced = 0;
    size_t last = 1;
    while (rc == DSQ_OK && len) {
        size_t k = len < bufsz ? (size_t)len : bufsz;
        ssize_t r = pread(fd, buf, k, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) { rc = DSQ_ERR_TRUNCATED; break; }
        off += (uint64_t)r;
        len -= (uint64_t)r;
        ZSTD_inBuffer in = { buf, (size_t)r, 0 };
        while (in.pos < in.size) {
            ZSTD_outBuffer o = { ob, outsz, 0 };
            last = ZSTD_decompressStream(ds, &o, &in);
            if (ZSTD_isError(last)) { rc = DSQ_ERR_FORMAT; break; }
            dsq_sha256_update(&h, ob, o.pos);
            produced += o.pos;
        }
    }
    /* flush what the decoder still holds */
    while (rc == DSQ_OK && last != 0) {
        ZSTD_inBuffer in = { NULL, 0, 0 };
        ZSTD_outBuffer o = { ob, outsz, 0 };
        last = ZSTD_decompressStream(ds, &o, &in);
        if (ZSTD_isError(last) || o.pos == 0) { rc = DSQ_ERR_FORMAT; break; }
        dsq_sha256_update(&h, ob, o.pos);
        produced += o.pos;
    }
    if (rc == DSQ_OK && produced != raw_size) rc = DSQ_ERR_FORMAT;
    if (rc == DSQ_OK) dsq_sha256_final(&h, out);
    else dsq_sha256_release(&h);
    ZSTD_freeDStream(ds);
    free(ob);
    return rc;
}

/* Keep the longest prefix of journaled entries whose bytes check out in the
 * partial file; adopt them and truncate after the last one. */
static int recover(dsq_ctr_writer *w, dsq_ctr_wentry *je, size_t jn,
                   const uint8_t jheader[32], dsq_diag *d)
{
    size_t bufsz = 4u << 20;
    uint8_t *buf = malloc(bufsz);
    if (!buf) return dsq_fail(d, DSQ_ERR_NOMEM, w->f.path, NULL, -1, "out of memory");
    /* dsq_outfile's descriptor is write-only: read through a second one. */
    int rfd = open(w->f.tmp_path, O_RDONLY | O_CLOEXEC);
    if (rfd < 0) {
        free(buf);
        return dsq_fail_errno(d, errno, w->f.tmp_path, "cannot read the partial file");
    }
    uint8_t hdr[DSQ_CTR_HEADER_SIZE], want[DSQ_CTR_HEADER_SIZE];
    dsq_ctr_header_build(want);
    int header_ok = memcmp(jheader, w->header_sha, 32) == 0
        && pread(rfd, hdr, sizeof hdr, 0) == (ssize_t)sizeof hdr
        && memcmp(hdr, want, sizeof hdr) == 0;
    uint64_t expect = DSQ_CTR_HEADER_SIZE;
    for (size_t i = 0; header_ok && i < jn; i++) {
        const dsq_ctr_tensor_info *t = &je[i].t;
        uint8_t got[32];
        if (t->offset != expect) break;
        if (dsq_ctr_nameset_find(&w->names, je[i].name, writer_name, w) >= 0) break;
        if (t->compression == DSQ_CTR_COMP_ZSTD) {
            if (hash_range_zstd(rfd, t->offset, t->stored_size, t->raw_size, got, buf, bufsz) != DSQ_OK) break;
            if (memcmp(got, t->sha256, 32) != 0) break;
        } else {
            if (hash_range(rfd, t->offset, t->stored_size, got, buf, bufsz) != DSQ_OK) break;
            if (memcmp(got, je[i].stored_sha256, 32) != 0) break;
        }
        expect = dsq_ctr_align_u64(t->offset + t->stored_size, DSQ_CTR_ALIGN);
        dsq_ctr_wentry moved = je[i];
        memset(&je[i], 0, sizeof je[i]);
        moved.t.name = moved.name;
        moved.t.src_dtype = moved.dtype;
        int rc = entry_commit(w, &moved, d);
        if (rc < 0) { entry_drop(&moved); free(buf); close(rfd); return rc; }
    }
    free(buf);
    close(rfd);
    if (!header_ok) {
        DSQ_TRY(w_truncate(w, 0, d));
        uint8_t h[DSQ_CTR_HEADER_SIZE];
        dsq_ctr_header_build(h);
        return w_write(w, h, sizeof h, d);
    }
    return w_truncate(w, entries_end(w), d);
}

int dsq_ctr_writer_open_ex(dsq_ctr_writer **out, const char *path, unsigned flags,
                           const char *fingerprint, dsq_diag *d)
{
    *out = NULL;
    if (!path) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "no output path");
    dsq_ctr_writer *w = calloc(1, sizeof *w);
    if (!w) return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
    w->f.fd = -1;
    w->f.slot = -1;
    w->flags = flags;
    w->ckpt_interval = 1.0;
    w->fingerprint = strdup(fingerprint ? fingerprint : "");
    char *tmp = dsq_outfile_tmp_name(path);
    w->journal = tmp ? malloc(strlen(tmp) + sizeof ".journal") : NULL;
    if (w->journal) { strcpy(w->journal, tmp); strcat(w->journal, ".journal"); }
    free(tmp);
    uint8_t hdr[DSQ_CTR_HEADER_SIZE];
    dsq_ctr_header_build(hdr);
    int rc = DSQ_OK;
    if (!w->fingerprint || !w->journal || dsq_sha256_buf(hdr, sizeof hdr, w->header_sha) < 0)
        rc = dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
    /* Containers are written once, appended in large pieces and rarely read
     * back soon: past the page cache (dsq_file.h says why). */
    unsigned oflags = (flags & (DSQ_OUT_OVERWRITE | DSQ_OUT_KEEP_TMP)) | DSQ_OUT_DIRECT_IO |
                      DSQ_OUT_SYNC_BEHIND;
    if (resuming(w)) oflags |= DSQ_OUT_KEEP_TMP;

    if (rc == DSQ_OK && resuming(w) && dsq_path_exists(w->journal)) {
        char *jfp = NULL;
        dsq_ctr_wentry *je = NULL;
        size_t jn = 0;
        uint8_t jheader[32];
        rc = dsq_ctr_journal_load(w->journal, &jfp, jheader, &je, &jn, d);
        if (rc == DSQ_OK && strcmp(jfp, w->fingerprint) != 0)
            rc = dsq_fail(d, DSQ_ERR_STATE, w->journal, NULL, -1,
                          "partial output was made with different inputs or options "
                          "(fingerprint '%s', this run '%s')", jfp, w->fingerprint);
        if (rc == DSQ_OK) rc = dsq_outfile_open(&w->f, path, oflags | DSQ_OUT_REOPEN, d);
        if (rc == DSQ_OK) rc = recover(w, je, jn, jheader, d);
        free(jfp);
        dsq_ctr_wentries_free(je, jn);
    } else if (rc == DSQ_OK) {
        if (!resuming(w)) unlink(w->journal);  /* stale state of an older run */
        rc = dsq_outfile_open(&w->f, path, oflags, d);
        if (rc == DSQ_OK) rc = w_write(w, hdr, sizeof hdr, d);
    }
    if (rc < 0) {
        /* Never destroy resumable state because this open failed. */
        if (resuming(w)) dsq_outfile_detach(&w->f); else dsq_outfile_abort(&w->f);
        writer_free(w);
        return rc;
    }
    w->ckpt_last = now_s();
    *out = w;
    return DSQ_OK;
}

int dsq_ctr_writer_open(dsq_ctr_writer **w, const char *path, unsigned flags, dsq_diag *d)
{
    return dsq_ctr_writer_open_ex(w, path, flags, "", d);
}

/* ---- queries ---- */

size_t dsq_ctr_writer_count(const dsq_ctr_writer *w) { return w->n; }

const char *dsq_ctr_writer_name(const dsq_ctr_writer *w, size_t i)
{
    return i < w->n ? w->e[i].name : NULL;
}

const dsq_ctr_tensor_info *dsq_ctr_writer_get(const dsq_ctr_writer *w, size_t i)
{
    return i < w->n ? &w->e[i].t : NULL;
}

int64_t dsq_ctr_writer_find(const dsq_ctr_writer *w, const char *name)
{
    return name ? dsq_ctr_nameset_find(&w->names, name, writer_name, w) : -1;
}

const char *dsq_ctr_writer_path(const dsq_ctr_writer *w) { return w->f.path; }
const char *dsq_ctr_writer_tmp_path(const dsq_ctr_writer *w) { return w->f.tmp_path; }
uint64_t dsq_ctr_writer_bytes(const dsq_ctr_writer *w) { return w->f.written; }

/* ---- payloads ---- */

int dsq_ctr_writer_add_blob(dsq_ctr_writer *w, const dsq_ctr_tensor_info *info,
                            const dsq_ctr_blob *blob, dsq_diag *d)
{
    DSQ_TRY(w_usable(w, d));
    const char *p = w->f.path;
    const char *nm = info ? info->name : NULL;
    if (!blob || (blob->compression != DSQ_CTR_COMP_NONE && blob->compression != DSQ_CTR_COMP_ZSTD)
        || (blob->compression == DSQ_CTR_COMP_NONE && blob->stored_size != blob->raw_size)
        || (blob->compression == DSQ_CTR_COMP_ZSTD && blob->stored_size == 0)
        || (!blob->data && blob->stored_size))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, p, nm, -1, "blob is not a dsq_ctr_encode result");
    dsq_ctr_wentry e;
    DSQ_TRY(entry_prepare(w, info, &e, d));
    int rc = w_pad(w, DSQ_CTR_ALIGN, d);
    e.t.offset = w->f.written;
    e.t.raw_size = blob->raw_size;
    e.t.stored_size = blob->stored_size;
    e.t.compression = blob->compression;
    memcpy(e.t.sha256, blob->sha256, 32);
    if (rc == DSQ_OK) {
        /* Resume checks zstd payloads by their raw hash (hash_range_zstd), so
         * no second pass over the stored bytes is needed here. */
        memcpy(e.stored_sha256, blob->sha256, 32);
    }
    if (rc == DSQ_OK) rc = w_write(w, blob->data, (size_t)blob->stored_size, d);
    if (rc == DSQ_OK) rc = entry_commit(w, &e, d);
    if (rc < 0) { entry_drop(&e); return rc; }
    return maybe_checkpoint(w, d);
}

int dsq_ctr_writer_add(dsq_ctr_writer *w, const dsq_ctr_tensor_info *info,
                       const void *raw, size_t n, int zstd_level, dsq_diag *d)
{
    DSQ_TRY(w_usable(w, d));
    dsq_ctr_blob b;
    int rc = dsq_ctr_encode(raw, n, zstd_level, &b, d);
    if (rc < 0) return rc;
    rc = dsq_ctr_writer_add_blob(w, info, &b, d);
    dsq_ctr_blob_free(&b);
    return rc;
}

static int begin_stream(dsq_ctr_writer *w, const dsq_ctr_tensor_info *info, int zstd_level,
                        int frames, dsq_diag *d)
{
    DSQ_TRY(w_usable(w, d));
    const char *p = w->f.path;
    if (zstd_level < 0 || zstd_level > DSQ_CTR_LEVEL_MAX)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, p, info ? info->name : NULL, -1,
                        "zstd level %d outside 0..%d", zstd_level, DSQ_CTR_LEVEL_MAX);
    DSQ_TRY(entry_prepare(w, info, &w->cur, d));
    int rc = DSQ_OK;
    if (frames && zstd_level < 1) {
        rc = dsq_fail(d, DSQ_ERR_INVALID_ARG, p, info->name, -1, "a framed payload needs zstd level >= 1");
    } else if (zstd_level > 0 && !frames) {
        if (!w->cctx) w->cctx = ZSTD_createCCtx();
        if (!w->zbuf) { w->zcap = ZSTD_CStreamOutSize(); w->zbuf = malloc(w->zcap); }
        if (!w->cctx || !w->zbuf || dsq_ctr_cctx_setup(w->cctx, zstd_level) != 0)
            rc = dsq_fail(d, DSQ_ERR_NOMEM, p, info->name, -1, "cannot set up zstd");
        else if (info->raw_size
                 && ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(w->cctx, info->raw_size)))
            rc = dsq_fail(d, DSQ_ERR_INTERNAL, p, info->name, -1, "zstd refused the size");
    }
    if (rc == DSQ_OK && dsq_sha256_init(&w->raw_h) < 0)
        rc = dsq_fail(d, DSQ_ERR_NOMEM, p, info->name, -1, "out of memory");
    if (rc < 0) { entry_drop(&w->cur); return rc; }
    w->streaming = 1;
    w->cur_level = zstd_level;
    w->cur_frames = frames;
    w->cur_raw = 0;
    w->cur_pledged = info->raw_size;
    rc = w_pad(w, DSQ_CTR_ALIGN, d);
    w->cur.t.offset = w->f.written;
    return rc;
}

int dsq_ctr_writer_begin(dsq_ctr_writer *w, const dsq_ctr_tensor_info *info,
                         int zstd_level, dsq_diag *d)
{
    return begin_stream(w, info, zstd_level, 0, d);
}

int dsq_ctr_writer_begin_frames(dsq_ctr_writer *w, const dsq_ctr_tensor_info *info,
                                int zstd_level, dsq_diag *d)
{
    return begin_stream(w, info, zstd_level, 1, d);
}

int dsq_ctr_writer_begin_frames_hashed(dsq_ctr_writer *w, const dsq_ctr_tensor_info *info,
                                       int zstd_level, dsq_diag *d)
{
    return begin_stream(w, info, zstd_level, 2, d);
}

/* Drop the open stream and cut its bytes off the file. */
static int stream_rollback(dsq_ctr_writer *w, int rc, dsq_diag *d)
{
    uint64_t off = w->cur.t.offset;
    dsq_sha256_release(&w->raw_h);
    if (w->st_on) { dsq_sha256_release(&w->st_h); w->st_on = 0; }
    entry_drop(&w->cur);
    w->streaming = 0;
    if (!w->failed && w_truncate(w, off, NULL) < 0)
        return dsq_fail(d, w->failed, w->f.tmp_path, NULL, -1, "cannot roll back a payload");
    return rc;
}

static int stream_compress(dsq_ctr_writer *w, const void *raw, size_t n, ZSTD_EndDirective mode,
                           dsq_diag *d)
{
    ZSTD_inBuffer in = { raw, n, 0 };
    for (;;) {
        ZSTD_outBuffer out = { w->zbuf, w->zcap, 0 };
        size_t left = ZSTD_compressStream2(w->cctx, &out, &in, mode);
        if (ZSTD_isError(left))
            return dsq_fail(d, DSQ_ERR_INTERNAL, w->f.path, w->cur.name, -1,
                            "zstd streaming failed: %s", ZSTD_getErrorName(left));
        DSQ_TRY(w_write(w, w->zbuf, out.pos, d));
        if (mode == ZSTD_e_end ? left == 0 : in.pos == in.size) return DSQ_OK;
    }
}

/* Below this a chunk is not worth a hand-off to the second thread. */
#define PAIR_MIN ((size_t)1 << 20)

struct chunk_job {
    dsq_ctr_writer *w;
    const void *raw;
    size_t n;
    const void *frame;      /* framed payload: the caller's frame of raw, or NULL */
    size_t frame_size;
    dsq_diag *d;
    int rc;
};

/* A framed payload's chunk: raw compressed into a frame of its own here. */
static int frame_compress(dsq_ctr_writer *w, const void *raw, size_t n, dsq_diag *d)
{
    size_t need = dsq_ctr_encode_bound(n), z;
    if (w->zcap < need) {
        uint8_t *nb = realloc(w->zbuf, need);
        if (!nb) return dsq_fail(d, DSQ_ERR_NOMEM, w->f.path, w->cur.name, -1, "out of memory");
        w->zbuf = nb;
        w->zcap = need;
    }
    DSQ_TRY(dsq_ctr_zstd_frame(raw, n, w->cur_level, w->zbuf, w->zcap, &z, d));
    return w_write(w, w->zbuf, z, d);
}

/* item 0: the raw hash; item 1: compress (or copy) and write */
static void chunk_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    struct chunk_job *j = ctx;
    dsq_ctr_writer *w = j->w;
    if (item == 0) {
        if (w->cur_frames != 2) dsq_sha256_update(&w->raw_h, j->raw, j->n);
        return;
    }
    if (j->frame)
        j->rc = w_write(w, j->frame, j->frame_size, j->d);
    else if (w->cur_frames)
        j->rc = frame_compress(w, j->raw, j->n, j->d);
    else
        j->rc = w->cur_level > 0 ? stream_compress(w, j->raw, j->n, ZSTD_e_continue, j->d)
                                 : w_write(w, j->raw, j->n, j->d);
}

static int chunk_run(dsq_ctr_writer *w, const void *raw, size_t n, const void *frame,
                     size_t frame_size, dsq_diag *d);

int dsq_ctr_writer_chunk(dsq_ctr_writer *w, const void *raw, size_t n, dsq_diag *d)
{
    return chunk_run(w, raw, n, NULL, 0, d);
}

int dsq_ctr_writer_frame(dsq_ctr_writer *w, const void *raw, size_t n, const void *frame,
                         size_t frame_size, dsq_diag *d)
{
    if (w->streaming && !w->cur_frames)
        return stream_rollback(w, dsq_fail(d, DSQ_ERR_INVALID_ARG, w->f.path, w->cur.name, -1,
                                           "frame on a payload not begun with begin_frames"), d);
    /* One regular frame of exactly n bytes: a skippable frame, trailing
     * bytes or another size would make a payload no reader accepts. */
    if (w->streaming && (!frame || frame_size < 4 || dsq_load_u32le(frame) != ZSTD_MAGICNUMBER ||
                         ZSTD_findFrameCompressedSize(frame, frame_size) != frame_size ||
                         ZSTD_getFrameContentSize(frame, frame_size) != (unsigned long long)n))
        return stream_rollback(w, dsq_fail(d, DSQ_ERR_INVALID_ARG, w->f.path, w->cur.name, -1,
                                           "not one zstd frame of the %zu bytes", n), d);
    return chunk_run(w, raw, n, frame, frame_size, d);
}

static int chunk_run(dsq_ctr_writer *w, const void *raw, size_t n, const void *frame,
                     size_t frame_size, dsq_diag *d)
{
    if (w->failed) return dsq_fail(d, w->failed, w->f.tmp_path, NULL, -1, "writer failed earlier");
    if (!w->streaming)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, w->f.path, NULL, -1, "no streamed tensor is open");
    if (!raw && n && !(frame && w->cur_frames == 2))
        return stream_rollback(w, dsq_fail(d, DSQ_ERR_INVALID_ARG, w->f.path, w->cur.name, -1,
                                           "NULL chunk of %zu bytes", n), d);
    if (w->cur_pledged && n > w->cur_pledged - w->cur_raw)
        return stream_rollback(w, dsq_fail(d, DSQ_ERR_INVALID_ARG, w->f.path, w->cur.name, -1,
                                           "more bytes than the promised %llu",
                                           (unsigned long long)w->cur_pledged), d);
    w->cur_raw += n;
    struct chunk_job j = { w, raw, n, frame, frame_size, d, DSQ_OK };
    /* A large chunk is hashed on a second thread while this one compresses
     * and writes it: the stream's SHA-256 and zstd are both sequential
     * over the tensor, and for the streamed tensors (the embedding and the
     * head, written by the one writer thread while the workers wait) they
     * were the conversion's longest serial stretch (perf, -T 2: the writer
     * thread held 23% of the CPU samples, SHA-256 a quarter of it). Same
     * bytes: each of the two runs over the chunk in order, as before. */
    if (n >= PAIR_MIN && !w->pair && w->cur_frames != 2) {
        w->pair = dsq_pool_create(2);
        if (w->pair) (void)dsq_pool_set_spin_us(w->pair, 0);   /* sleeps between chunks */
    }
    /* (a payload the caller hashes has nothing to pair with the write) */
    dsq_pool_run(n >= PAIR_MIN && w->cur_frames != 2 ? w->pair : NULL, 2, chunk_task, &j);
    return j.rc < 0 ? stream_rollback(w, j.rc, d) : DSQ_OK;
}

static int stream_end(dsq_ctr_writer *w, const uint8_t *digest, dsq_diag *d);

int dsq_ctr_writer_end(dsq_ctr_writer *w, dsq_diag *d)
{
    if (w->failed) return dsq_fail(d, w->failed, w->f.tmp_path, NULL, -1, "writer failed earlier");
    if (!w->streaming)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, w->f.path, NULL, -1, "no streamed tensor is open");
    if (w->cur_pledged && w->cur_raw != w->cur_pledged)
        return stream_rollback(w, dsq_fail(d, DSQ_ERR_INVALID_ARG, w->f.path, w->cur.name, -1,
                                           "got %llu bytes but %llu were promised",
                                           (unsigned long long)w->cur_raw,
                                           (unsigned long long)w->cur_pledged), d);
    if (w->cur_frames == 2)
        return stream_rollback(w, dsq_fail(d, DSQ_ERR_INVALID_ARG, w->f.path, w->cur.name, -1,
                                           "a payload hashed by the caller ends with end_digest"), d);
    return stream_end(w, NULL, d);
}

int dsq_ctr_writer_end_digest(dsq_ctr_writer *w, const uint8_t digest[DSQ_SHA256_LEN], dsq_diag *d)
{
    if (w->failed) return dsq_fail(d, w->failed, w->f.tmp_path, NULL, -1, "writer failed earlier");
    if (!w->streaming || w->cur_frames != 2)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, w->f.path, NULL, -1,
                        "no streamed tensor begun with begin_frames_hashed is open");
    if (w->cur_pledged && w->cur_raw != w->cur_pledged)
        return stream_rollback(w, dsq_fail(d, DSQ_ERR_INVALID_ARG, w->f.path, w->cur.name, -1,
                                           "got %llu bytes but %llu were promised",
                                           (unsigned long long)w->cur_raw,
                                           (unsigned long long)w->cur_pledged), d);
    return stream_end(w, digest, d);
}

static int stream_end(dsq_ctr_writer *w, const uint8_t *digest, dsq_diag *d)
{
    int rc = DSQ_OK;
    if (w->cur_frames) {
        /* No frame at all (an empty tensor): one empty frame, since a zstd
         * payload is never empty. */
        if (w->f.written == w->cur.t.offset) rc = frame_compress(w, NULL, 0, d);
    } else if (w->cur_level > 0) {
        rc = stream_compress(w, NULL, 0, ZSTD_e_end, d);
    }
    if (rc < 0) return stream_rollback(w, rc, d);
    dsq_ctr_tensor_info *t = &w->cur.t;
    t->raw_size = w->cur_raw;
    t->stored_size = w->f.written - t->offset;
    t->compression = w->cur_level > 0 ? DSQ_CTR_COMP_ZSTD : DSQ_CTR_COMP_NONE;
    dsq_sha256_final(&w->raw_h, t->sha256);
    if (digest) memcpy(t->sha256, digest, 32);
    if (w->st_on) { dsq_sha256_release(&w->st_h); w->st_on = 0; }
    memcpy(w->cur.stored_sha256, t->sha256, 32);
    w->streaming = 0;
    rc = entry_commit(w, &w->cur, d);
    if (rc < 0) { entry_drop(&w->cur); w->failed = rc; return rc; }
    return maybe_checkpoint(w, d);
}

/* ---- metadata, finish ---- */

int dsq_ctr_writer_set_metadata(dsq_ctr_writer *w, const char *json, dsq_diag *d)
{
    if (!json) return dsq_fail(d, DSQ_ERR_INVALID_ARG, w->f.path, NULL, -1, "NULL metadata");
    size_t len = strlen(json);
    DSQ_TRY(dsq_ctr_check_metadata(json, len, w->f.path, -1, d));
    char *copy = malloc(len + 1);
    if (!copy) return dsq_fail(d, DSQ_ERR_NOMEM, w->f.path, NULL, -1, "out of memory");
    memcpy(copy, json, len + 1);
    free(w->meta);
    w->meta = copy;
    w->meta_len = len;
    return DSQ_OK;
}

/* Serialise the index (§4) into one buffer. */
static int build_index(dsq_ctr_writer *w, uint8_t **out, size_t *len, dsq_diag *d)
{
    uint64_t strtab = 0;
    for (size_t i = 0; i < w->n; i++)
        strtab += strlen(w->e[i].name) + 1 + strlen(w->e[i].dtype) + 1;
    if (strtab >= UINT32_MAX)
        return dsq_fail(d, DSQ_ERR_OVERFLOW, w->f.path, NULL, -1, "string table exceeds 4 GiB");
    size_t n = DSQ_CTR_INDEX_HDR_SIZE + w->n * (size_t)DSQ_CTR_ENTRY_SIZE + (size_t)strtab;
    uint8_t *b = calloc(1, n);
    if (!b) return dsq_fail(d, DSQ_ERR_NOMEM, w->f.path, NULL, -1, "out of memory for the index");
    memcpy(b, DSQ_CTR_INDEX_MAGIC, 8);
    dsq_store_u32le(b + 8, DSQ_CTR_ENTRY_SIZE);
    dsq_store_u64le(b + 16, w->n);
    dsq_store_u64le(b + 24, strtab);
    uint8_t *st = b + DSQ_CTR_INDEX_HDR_SIZE + w->n * (size_t)DSQ_CTR_ENTRY_SIZE;
    uint32_t so = 0;
    for (size_t i = 0; i < w->n; i++) {
        uint32_t nl = (uint32_t)strlen(w->e[i].name), dl = (uint32_t)strlen(w->e[i].dtype);
        uint32_t no = so;
        memcpy(st + so, w->e[i].name, nl + 1);
        so += nl + 1;
        uint32_t dof = so;
        memcpy(st + so, w->e[i].dtype, dl + 1);
        so += dl + 1;
        dsq_ctr_record_build(&w->e[i].t, no, nl, dof, dl,
                             b + DSQ_CTR_INDEX_HDR_SIZE + i * (size_t)DSQ_CTR_ENTRY_SIZE);
    }
    *out = b;
    *len = n;
    return DSQ_OK;
}

static int write_tail(dsq_ctr_writer *w, dsq_diag *d)
{
    dsq_ctr_footer f = { .version = DSQ_CTR_VERSION, .tensor_count = w->n };
    memcpy(f.header_sha256, w->header_sha, 32);
    const char *meta = w->meta ? w->meta : "{}";
    size_t meta_len = w->meta ? w->meta_len : 2;
    uint8_t *idx = NULL;
    size_t idx_len = 0;
    DSQ_TRY(w_pad(w, DSQ_CTR_ALIGN, d));
    DSQ_TRY(build_index(w, &idx, &idx_len, d));
    f.index_offset = w->f.written;
    f.index_length = idx_len;
    int rc = dsq_sha256_buf(idx, idx_len, f.index_sha256);
    if (rc == DSQ_OK) rc = w_write(w, idx, idx_len, d);
    free(idx);
    if (rc == DSQ_OK) rc = w_pad(w, 8, d);
    f.meta_offset = w->f.written;
    f.meta_length = meta_len;
    if (rc == DSQ_OK) rc = dsq_sha256_buf(meta, meta_len, f.meta_sha256);
    if (rc == DSQ_OK) rc = w_write(w, meta, meta_len, d);
    if (rc == DSQ_OK) rc = w_pad(w, 8, d);
    f.file_size = w->f.written + DSQ_CTR_FOOTER_SIZE;
    uint8_t fb[DSQ_CTR_FOOTER_SIZE];
    if (rc == DSQ_OK) rc = dsq_ctr_footer_build(&f, fb);
    if (rc == DSQ_OK) rc = w_write(w, fb, sizeof fb, d);
    if (rc < 0 && !d) return rc;
    return rc < 0 ? dsq_fail(d, rc, w->f.tmp_path, NULL, -1, "cannot write the index") : rc;
}

int dsq_ctr_writer_finish(dsq_ctr_writer *w, dsq_diag *d)
{
    if (!w) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "no writer");
    int rc = w_usable(w, d);
    if (rc == DSQ_OK) rc = write_tail(w, d);
    if (rc == DSQ_ERR_NOSPC && resuming(w)) {
        /* The disk filled while the index / metadata were written: every
         * tensor is in the temporary, so keep it for --resume:
         * cut the tail off (which frees the space the journal needs), record
         * every tensor in the journal (best effort: the previous journal
         * stays valid if even that does not fit), keep both. */
        w->failed = 0;
        if (w_truncate(w, entries_end(w), NULL) == DSQ_OK) (void)dsq_ctr_writer_checkpoint(w, NULL);
        dsq_outfile_detach(&w->f);
        writer_free(w);
        return rc;
    }
    if (rc == DSQ_OK) rc = dsq_outfile_commit(&w->f, d);  /* removes tmp on failure */
    else dsq_outfile_abort(&w->f);
    unlink(w->journal);
    writer_free(w);
    return rc;
}

void dsq_ctr_writer_abort(dsq_ctr_writer *w)
{
    if (!w) return;
    dsq_outfile_abort(&w->f);
    if (w->journal) unlink(w->journal);
    writer_free(w);
}

int dsq_ctr_writer_detach(dsq_ctr_writer *w, dsq_diag *d)
{
    if (!w) return DSQ_OK;
    int rc = DSQ_OK;
    if (w->streaming) {
        dsq_sha256_release(&w->raw_h);
        if (w->st_on) { dsq_sha256_release(&w->st_h); w->st_on = 0; }
        entry_drop(&w->cur);
        w->streaming = 0;
    }
    if (resuming(w) && !w->failed) rc = dsq_ctr_writer_checkpoint(w, d);
    dsq_outfile_detach(&w->f);
    writer_free(w);
    return rc;
}
