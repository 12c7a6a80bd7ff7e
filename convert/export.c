/* export.c - an export directory from a format's plan (xfmt/xfmt.h): shard
 * layout, tensor bytes at their offsets, resume, the side files and
 * SHA256SUMS, and the finished directory renamed into place (see export.h). */
#include "export_internal.h"
#include "st_writer.h"
#include "dsq_file.h"
#include "dsq_sha256.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *g_names[8];
static pthread_once_t g_names_once = PTHREAD_ONCE_INIT;

static void names_init(void)
{
    const dsq_xfmt *const *t = dsq_xfmt_table();
    for (size_t i = 0; t[i] && i + 1 < sizeof g_names / sizeof *g_names; i++) g_names[i] = t[i]->name;
}

const char *const *dsq_export_formats(void)
{
    pthread_once(&g_names_once, names_init);
    return g_names;
}

int dsq_export_format_known(const char *name) { return dsq_xfmt_find(name) != NULL; }

static int write_json(dsq_export *ex, const char *name, json_object *o, int pretty, dsq_diag *d)
{
    int fl = JSON_C_TO_STRING_NOSLASHESCAPE | (pretty ? JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED
                                                      : JSON_C_TO_STRING_PLAIN);
    const char *txt = json_object_to_json_string_ext(o, fl);
    char *p = dsq_path_join(ex->tmpdir, name);
    if (!txt || !p) {
        free(p);
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    size_t n = strlen(txt);
    char *buf = malloc(n + 2);
    int rc;
    if (!buf) {
        rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    } else {
        memcpy(buf, txt, n);
        buf[n] = '\n';
        rc = dsq_write_file_atomic(p, buf, n + 1, DSQ_OUT_OVERWRITE, d);
    }
    free(buf);
    free(p);
    return rc;
}

/* ================= shards ================= */

static char *shard_name(const dsq_export *ex, int s)
{
    char buf[128];
    if (ex->nshards <= 1)
        snprintf(buf, sizeof buf, "%s.safetensors", ex->p.f->weights_base);
    else
        snprintf(buf, sizeof buf, "%s-%05d-of-%05d.safetensors", ex->p.f->weights_base, s + 1, ex->nshards);
    return strdup(buf);
}

/* The export places every tensor's bytes itself (pwrite at its offset), so
 * the safetensors writer is asked only for the layout, never for data. */
static int no_fill(void *ctx, const char *name, void *dst, uint64_t nbytes, dsq_diag *d)
{
    (void)ctx; (void)dst; (void)nbytes;
    return dsq_fail(d, DSQ_ERR_STATE, NULL, name, -1, "export tensors are written at their offsets");
}

/* Offsets of shard s, and its padded header (safetensors section 1): the
 * layout formats/st_writer.c gives any safetensors file dsq writes. */
static int shard_header(dsq_export *ex, int s, char **out, size_t *len, dsq_diag *d)
{
    size_t n = 0;
    for (size_t i = 0; i < ex->p.nxt; i++) n += ex->p.xt[i].shard == s;
    dsq_st_writer *w = dsq_st_writer_create();
    size_t *idx = malloc((n ? n : 1) * sizeof *idx);
    uint64_t *begin = malloc((n ? n : 1) * sizeof *begin);
    int rc = w && idx && begin ? dsq_st_writer_set_meta(w, "format", "pt") : DSQ_ERR_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < ex->p.nxt && rc == DSQ_OK; i++) {
        dsq_xtensor *x = &ex->p.xt[i];
        if (x->shard != s) continue;
        idx[k++] = i;
        rc = dsq_st_writer_add_lazy(w, x->name, x->dtype, x->ndim, x->shape, no_fill, NULL);
    }
    if (rc == DSQ_OK) rc = dsq_st_writer_layout(w, out, len, begin, d);
    else rc = dsq_fail(d, rc, NULL, NULL, -1, "cannot lay out shard %d", s + 1);
    for (size_t j = 0; rc == DSQ_OK && j < k; j++) ex->p.xt[idx[j]].off = begin[j];
    dsq_st_writer_free(w);
    free(idx);
    free(begin);
    return rc;
}

static char *tmp_file(const dsq_export *ex, const char *name)
{
    size_t n = strlen(name) + 16;
    char *t = malloc(n);
    if (!t) return NULL;
    snprintf(t, n, ".%s.partial", name);
    char *p = dsq_path_join(ex->tmpdir, t);
    free(t);
    return p;
}

static int shard_open(dsq_export *ex, int s, dsq_diag *d)
{
    char *hdr = NULL, *name = shard_name(ex, s), *p = name ? tmp_file(ex, name) : NULL;
    size_t hlen = 0;
    int rc = p ? shard_header(ex, s, &hdr, &hlen, d) : dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    if (rc == DSQ_OK) {
        ex->fd = open(p, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
        if (ex->fd < 0) rc = dsq_fail_errno(d, errno, p, "cannot create");
    }
    if (rc == DSQ_OK) {
        dsq_dpw_open(&ex->dpw, ex->fd, p);
        uint8_t pre[8];
        uint64_t N = hlen;
        for (int k = 0; k < 8; k++) pre[k] = (uint8_t)(N >> (8 * k));
        rc = dsq_dpw_pwrite(&ex->dpw, pre, 8, 0, d);
        if (rc == DSQ_OK) rc = dsq_dpw_pwrite(&ex->dpw, hdr, hlen, 8, d);
        ex->data_start = 8 + hlen;
        ex->cur = s;
    }
    free(hdr);
    free(name);
    free(p);
    return rc;
}

static int state_write(dsq_export *ex, dsq_diag *d);

static int shard_commit(dsq_export *ex, dsq_diag *d)
{
    char *name = shard_name(ex, ex->cur), *p = name ? tmp_file(ex, name) : NULL;
    char *fin = name ? dsq_path_join(ex->tmpdir, name) : NULL;
    int rc = DSQ_OK;
    if (!p || !fin) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    /* Extend to the full size (a shard whose last tensors are empty). */
    uint64_t total = ex->data_start;
    for (size_t i = 0; i < ex->p.nxt; i++)
        if (ex->p.xt[i].shard == ex->cur && ex->data_start + ex->p.xt[i].off + ex->p.xt[i].nbytes > total)
            total = ex->data_start + ex->p.xt[i].off + ex->p.xt[i].nbytes;
    if (rc == DSQ_OK && ftruncate(ex->fd, (off_t)total) != 0) rc = dsq_fail_errno(d, errno, p, "truncate failed");
    if (rc == DSQ_OK) rc = dsq_dpw_sync(&ex->dpw, d);
    dsq_dpw_close(&ex->dpw);
    if (ex->fd >= 0) close(ex->fd);
    ex->fd = -1;
    if (rc == DSQ_OK && rename(p, fin) != 0) rc = dsq_fail_errno(d, errno, fin, "rename failed");
    free(name);
    free(p);
    free(fin);
    if (rc < 0) return rc;
    ex->committed = ex->cur + 1;
    ex->cur = -1;
    return state_write(ex, d);
}

/* ================= resume state ================= */

static int state_write(dsq_export *ex, dsq_diag *d)
{
    char *p = dsq_path_join(ex->tmpdir, DSQ_XDIR_STATE);
    if (!p) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    char buf[256];
    int n = snprintf(buf, sizeof buf, "%s %d\n", ex->o.fingerprint, ex->committed);
    int rc = dsq_write_file_atomic(p, buf, (size_t)n, DSQ_OUT_OVERWRITE, d);
    free(p);
    return rc;
}

/* Shards of dir committed by a run with this fingerprint, or -1. */
static int state_read(dsq_export *ex, const char *dir)
{
    char fp[130];
    int k;
    if (dsq_xdir_state_read(dir, fp, sizeof fp, &k) && !strcmp(fp, ex->o.fingerprint) && k <= ex->nshards)
        return k;
    return -1;
}

/* ================= open ================= */

static void sync_sum(dsq_export *ex)
{
    ex->sum.dequantized = ex->p.dequantized;
    ex->sum.dropped = ex->p.dropped;
    ex->sum.max_scale_rel_rounding = ex->p.max_scale_rel_rounding;
}

static int parse_meta(dsq_export *ex, dsq_diag *d)
{
    const char *m = ex->o.meta_json ? ex->o.meta_json : "{}";
    ex->meta = json_tokener_parse(m);
    if (!ex->meta || !json_object_is_type(ex->meta, json_type_object))
        return dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "model metadata is not a JSON object");
    return DSQ_OK;
}

static int assign_shards(dsq_export *ex)
{
    uint64_t lim = ex->o.shard_bytes ? ex->o.shard_bytes : ex->p.f->default_shard, acc = 0;
    int s = 0;
    for (size_t i = 0; i < ex->p.nsrc; i++) {
        uint64_t b = 0;
        for (size_t k = 0; k < ex->p.xs[i].count; k++) b += ex->p.xt[ex->p.xs[i].first + k].nbytes;
        if (acc > 0 && b > 0 && acc + b > lim) {
            s++;
            acc = 0;
        }
        acc += b;
        for (size_t k = 0; k < ex->p.xs[i].count; k++) ex->p.xt[ex->p.xs[i].first + k].shard = s;
    }
    return s + 1;
}

/* First source index of shard s (sources without targets go with the shard
 * before them). */
static size_t shard_first_src(const dsq_export *ex, int s)
{
    for (size_t i = 0; i < ex->p.nsrc; i++)
        if (ex->p.xs[i].count && ex->p.xt[ex->p.xs[i].first].shard >= s) return i;
    return ex->p.nsrc;
}

int dsq_export_open(dsq_export **out, const dsq_export_opts *o, const dsq_export_src *src, size_t n,
                    dsq_diag *d)
{
    *out = NULL;
    const dsq_xfmt *f = dsq_xfmt_find(o->format);
    if (!f) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1,
                            "unknown export format '%s' (known: dsq, ascend, awq, compressed-tensors)",
                            o->format ? o->format : "");
    if (!o->output || !*o->output) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "no output directory");
    dsq_export *ex = calloc(1, sizeof *ex);
    if (!ex) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    ex->o = *o;
    if (!ex->o.fingerprint) ex->o.fingerprint = "-";
    ex->fd = -1;
    ex->cur = -1;
    ex->sum.format = f->name;
    ex->sum.src_tensors = n;
    int rc = parse_meta(ex, d);
    if (rc == DSQ_OK) rc = dsq_xplan_make(&ex->p, f, src, n, ex->meta, d);
    sync_sum(ex);
    if (rc == DSQ_OK) {
        ex->nshards = assign_shards(ex);
        ex->sum.shards = ex->nshards;
        ex->sum.out_tensors = ex->p.nxt;
        for (int s = 0; rc == DSQ_OK && s < ex->nshards; s++) {
            char *h = NULL;
            size_t hl;
            rc = shard_header(ex, s, &h, &hl, d);   /* fixes offsets */
            free(h);
        }
    }
    if (rc == DSQ_OK && o->plan_only) {
        *out = ex;
        return DSQ_OK;
    }
    if (rc == DSQ_OK) {
        ex->dir = strdup(o->output);
        ex->tmpdir = dsq_xdir_sibling(o->output, ".partial");
        if (!ex->dir || !ex->tmpdir) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    /* OUT, its partial and the leftovers of a crash: what exists must be
     * dsq's to be replaced or continued (export_dir.c). */
    if (rc == DSQ_OK) rc = dsq_export_prepare_output(ex->dir, o->overwrite, o->resume, d);
    if (rc == DSQ_OK) {
        int part = dsq_xdir_kind(ex->tmpdir) == XD_DIR;
        int done = o->resume && part ? state_read(ex, ex->tmpdir) : -1;
        if (o->resume && part && done < 0)
            rc = dsq_fail(d, DSQ_ERR_STATE, ex->tmpdir, NULL, -1,
                          "partial export does not match this run; rerun without --resume");
        /* A crash after the finished export was renamed into place left its
         * resume state in OUT: --resume of the same run writes it again. */
        if (rc == DSQ_OK && o->resume && !part && !o->overwrite && dsq_xdir_kind(ex->dir) == XD_DIR &&
            state_read(ex, ex->dir) < 0)
            rc = dsq_fail(d, DSQ_ERR_STATE, ex->dir, NULL, -1,
                          "output holds the resume state of another run's finish; use -f to replace it");
        if (rc == DSQ_OK && done < 0) {
            if (part && dsq_xdir_remove_partial(ex->tmpdir) != 0)
                rc = dsq_fail(d, DSQ_ERR_EXISTS, ex->tmpdir, NULL, -1,
                              "cannot remove the partial export of an earlier run; move it away");
            if (rc == DSQ_OK && mkdir(ex->tmpdir, 0755) != 0)
                rc = dsq_fail_errno(d, errno, ex->tmpdir, "cannot create directory");
            done = 0;
            if (rc == DSQ_OK) rc = state_write(ex, d);
        }
        if (rc == DSQ_OK) {
            ex->committed = done;
            ex->resume_from = shard_first_src(ex, done);
            ex->next = ex->resume_from;
            for (size_t i = 0; i < ex->resume_from; i++) ex->sum.resumed += !ex->p.xs[i].drop;
        }
    }
    if (rc < 0) {
        dsq_export_free(ex, 1);
        return rc;
    }
    *out = ex;
    return DSQ_OK;
}

size_t dsq_export_resume_from(const dsq_export *ex) { return ex->resume_from; }

int dsq_export_from_source(const dsq_export *ex, size_t i)
{
    return i < ex->p.nsrc && ex->p.xs[i].from_source && ex->p.xs[i].count == 1 &&
           ex->p.xt[ex->p.xs[i].first].kind == XK_FLOAT;
}

int dsq_export_put_float_rows(dsq_export *ex, size_t i, int64_t row0, int64_t nrows, const float *w,
                              dsq_diag *d)
{
    if (i != ex->next || !dsq_export_from_source(ex, i))
        return dsq_fail(d, DSQ_ERR_INTERNAL, NULL, NULL, -1, "export: float rows of tensor %zu out of order", i);
    const dsq_export_src *s = &ex->p.src[i];
    const dsq_xtensor *x = &ex->p.xt[ex->p.xs[i].first];
    const int64_t N = s->qshape.rows, K = s->qshape.cols;
    if (row0 < 0 || nrows < 1 || row0 + nrows > N)
        return dsq_fail(d, DSQ_ERR_INTERNAL, NULL, s->name, -1, "export: bad row piece");
    if (ex->cur != x->shard) {
        if (ex->cur >= 0) DSQ_TRY(shard_commit(ex, d));
        DSQ_TRY(shard_open(ex, x->shard, d));
    }
    uint64_t rb = x->nbytes / (uint64_t)N, nb = rb * (uint64_t)nrows;
    uint8_t *buf = malloc(nb ? nb : 1);
    if (!buf) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, x->name, -1, "out of memory");
    int rc = DSQ_OK;
    for (size_t e = 0; rc == DSQ_OK && e < (size_t)nrows * (size_t)K; e++)
        if (dsq_x_put_float(&ex->p, x->dtype, buf, e, w[e], 0) < 0)
            rc = dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, x->name, -1,
                          "value %g at row %lld is outside float16's range (the target stores float tensors "
                          "as F16)", (double)w[e], (long long)(row0 + (int64_t)e / K));
    if (rc == DSQ_OK) rc = dsq_dpw_pwrite(&ex->dpw, buf, (size_t)nb, ex->data_start + x->off + rb * (uint64_t)row0, d);
    free(buf);
    if (rc < 0) return rc;
    ex->sum.weight_bytes += nb;
    if (row0 + nrows == N) {
        ex->next++;
        ex->p.dequantized--;   /* planned as dequantized; the source it is */
        ex->sum.from_source++;
        if (shard_first_src(ex, x->shard + 1) <= ex->next) DSQ_TRY(shard_commit(ex, d));
    }
    return DSQ_OK;
}

enum dsq_dtype dsq_export_scale_dtype(const dsq_export *ex, size_t i)
{
    return i < ex->p.nsrc && ex->p.xs[i].quantized ? ex->p.xs[i].scale_dtype : DSQ_DTYPE_INVALID;
}

void dsq_export_get_summary(const dsq_export *ex, dsq_export_summary *s)
{
    *s = ex->sum;
    s->dequantized = ex->p.dequantized;
    s->dropped = ex->p.dropped;
    s->max_scale_rel_rounding = ex->p.max_scale_rel_rounding;
}

/* ================= put ================= */

int dsq_export_put(dsq_export *ex, size_t i, const void *blob, size_t size, dsq_diag *d)
{
    if (i != ex->next || i >= ex->p.nsrc)
        return dsq_fail(d, DSQ_ERR_INTERNAL, NULL, NULL, -1, "export: tensor %zu out of order", i);
    const dsq_export_src *s = &ex->p.src[i];
    dsq_xsrc *xs = &ex->p.xs[i];
    ex->next++;
    if (!xs->count) return DSQ_OK;
    dsq_qview v;
    DSQ_TRY(dsq_qview_init(&v, s->scheme, &s->qshape, blob, size, d));
    int shard = ex->p.xt[xs->first].shard;
    if (ex->cur != shard) {
        if (ex->cur >= 0) DSQ_TRY(shard_commit(ex, d));
        DSQ_TRY(shard_open(ex, shard, d));
    }
    for (size_t k = 0; k < xs->count; k++) {
        const dsq_xtensor *x = &ex->p.xt[xs->first + k];
        uint8_t *buf = malloc(x->nbytes ? x->nbytes : 1);
        if (!buf) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, x->name, -1, "out of memory");
        int rc = dsq_xplan_pack(&ex->p, x, &v, buf, d);
        if (rc < 0) {
            if (d && !d->tensor[0]) snprintf(d->tensor, sizeof d->tensor, "%s", x->name);
            free(buf);
            return rc;
        }
        rc = dsq_dpw_pwrite(&ex->dpw, buf, (size_t)x->nbytes, ex->data_start + x->off, d);
        free(buf);
        if (rc < 0) return rc;
        ex->sum.weight_bytes += x->nbytes;
    }
    /* Last source of this shard: commit it. */
    if (shard_first_src(ex, shard + 1) <= ex->next) DSQ_TRY(shard_commit(ex, d));
    return DSQ_OK;
}

int dsq_export_rowwise(const dsq_export *ex, size_t i) { return dsq_xplan_rowwise(&ex->p, i); }

int dsq_export_put_rows(dsq_export *ex, size_t i, int64_t row0, int64_t nrows, const void *blob, size_t size,
                        dsq_diag *d)
{
    if (i != ex->next || i >= ex->p.nsrc || !dsq_export_rowwise(ex, i))
        return dsq_fail(d, DSQ_ERR_INTERNAL, NULL, NULL, -1, "export: row piece of tensor %zu out of order", i);
    const dsq_export_src *s = &ex->p.src[i];
    const dsq_xsrc *xs = &ex->p.xs[i];
    const int64_t N = s->qshape.rows;
    if (row0 < 0 || nrows < 1 || row0 + nrows > N)
        return dsq_fail(d, DSQ_ERR_INTERNAL, NULL, s->name, -1, "export: bad row piece");
    int last = row0 + nrows == N;
    if (!xs->count) {
        if (last) ex->next++;
        return DSQ_OK;
    }
    dsq_qshape ps = s->qshape;
    ps.rows = nrows;
    dsq_qview v;
    DSQ_TRY(dsq_qview_init(&v, s->scheme, &ps, blob, size, d));
    int shard = ex->p.xt[xs->first].shard;
    if (ex->cur != shard) {
        if (ex->cur >= 0) DSQ_TRY(shard_commit(ex, d));
        DSQ_TRY(shard_open(ex, shard, d));
    }
    for (size_t k = 0; k < xs->count; k++) {
        const dsq_xtensor *x = &ex->p.xt[xs->first + k];
        uint64_t rb = x->nbytes / (uint64_t)N, nb = rb * (uint64_t)nrows;
        uint8_t *buf = malloc(nb ? nb : 1);
        if (!buf) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, x->name, -1, "out of memory");
        int rc = dsq_xplan_pack(&ex->p, x, &v, buf, d);
        uint64_t at = ex->data_start + x->off + rb * (uint64_t)row0;
        if (rc == DSQ_OK) rc = dsq_dpw_pwrite(&ex->dpw, buf, (size_t)nb, at, d);
        free(buf);
        if (rc < 0) {
            if (d && !d->tensor[0]) snprintf(d->tensor, sizeof d->tensor, "%s", x->name);
            return rc;
        }
        ex->sum.weight_bytes += nb;
    }
    if (last) {
        ex->next++;
        if (shard_first_src(ex, shard + 1) <= ex->next) DSQ_TRY(shard_commit(ex, d));
    }
    return DSQ_OK;
}

/* ================= finish ================= */

static int write_index(dsq_export *ex, dsq_diag *d)
{
    json_object *root = json_object_new_object(), *meta = json_object_new_object(),
                *wm = json_object_new_object();
    uint64_t total = 0;
    for (size_t i = 0; i < ex->p.nxt; i++) {
        char *sn = shard_name(ex, ex->p.xt[i].shard);
        if (!sn) continue;
        json_object_object_add(wm, ex->p.xt[i].name, json_object_new_string(sn));
        free(sn);
        total += ex->p.xt[i].nbytes;
    }
    json_object_object_add(meta, "total_size", json_object_new_int64((int64_t)total));
    json_object_object_add(root, "metadata", meta);
    json_object_object_add(root, "weight_map", wm);
    char name[128];
    snprintf(name, sizeof name, "%s.safetensors.index.json", ex->p.f->weights_base);
    int rc = write_json(ex, name, root, 1, d);
    json_object_put(root);
    return rc;
}

static int write_side_files(dsq_export *ex, dsq_diag *d)
{
    json_object *cfg, *tok, *gen;
    if (json_object_object_get_ex(ex->meta, "config", &cfg) && json_object_is_type(cfg, json_type_object)) {
        json_object *copy = NULL;
        if (json_object_deep_copy(cfg, &copy, NULL) != 0 || !copy)
            return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        int rc = ex->p.f->config(&ex->p, copy, d);
        if (rc == DSQ_OK) rc = write_json(ex, "config.json", copy, 1, d);
        json_object_put(copy);
        DSQ_TRY(rc);
    }
    if (json_object_object_get_ex(ex->meta, "tokenizer", &tok) && json_object_is_type(tok, json_type_object)) {
        json_object_object_foreach(tok, k, val) {
            if (strchr(k, '/') || k[0] == '.' || !json_object_is_type(val, json_type_object)) continue;
            DSQ_TRY(write_json(ex, k, val, !strcmp(k, "tokenizer_config.json") ||
                                                 !strcmp(k, "special_tokens_map.json"), d));
        }
    }
    if (json_object_object_get_ex(ex->meta, "generation_config", &gen) && json_object_is_type(gen, json_type_object))
        DSQ_TRY(write_json(ex, "generation_config.json", gen, 1, d));
    return DSQ_OK;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Read (not mmap: mapped pages would count toward RSS) in 1 MiB chunks,
 * dropping the pages behind us. */
static int hash_file(const char *p, char hex[2 * DSQ_SHA256_LEN + 1], uint64_t *size, dsq_diag *d)
{
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dsq_fail_errno(d, errno, p, "cannot open");
    dsq_sha256 h;
    uint8_t *buf = malloc(1u << 20);
    if (!buf || dsq_sha256_init(&h) != DSQ_OK) {
        free(buf);
        close(fd);
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    uint64_t total = 0;
    int rc = DSQ_OK;
    for (;;) {
        ssize_t r = read(fd, buf, 1u << 20);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { rc = dsq_fail_errno(d, errno, p, "read failed"); break; }
        if (r == 0) break;
        dsq_sha256_update(&h, buf, (size_t)r);
        total += (uint64_t)r;
        posix_fadvise(fd, 0, (off_t)total, POSIX_FADV_DONTNEED);
    }
    uint8_t dig[DSQ_SHA256_LEN];
    if (rc == DSQ_OK) {
        dsq_sha256_final(&h, dig);
        dsq_sha256_hex(dig, hex);
    } else {
        dsq_sha256_release(&h);
    }
    free(buf);
    close(fd);
    *size = total;
    return rc;
}

static int write_sums(dsq_export *ex, dsq_diag *d)
{
    DIR *dh = opendir(ex->tmpdir);
    if (!dh) return dsq_fail_errno(d, errno, ex->tmpdir, "cannot list");
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    int rc = DSQ_OK;
    while ((de = readdir(dh))) {
        if (de->d_name[0] == '.' || !strcmp(de->d_name, "SHA256SUMS")) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            char **nv = realloc(names, cap * sizeof *nv);
            if (!nv) { rc = DSQ_ERR_NOMEM; break; }
            names = nv;
        }
        names[n++] = strdup(de->d_name);
    }
    closedir(dh);
    if (rc < 0) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    if (n) qsort(names, n, sizeof *names, cmp_str);
    char *txt = NULL;
    size_t tlen = 0;
    FILE *f = rc == DSQ_OK ? open_memstream(&txt, &tlen) : NULL;
    for (size_t i = 0; rc == DSQ_OK && f && i < n; i++) {
        char *p = names[i] ? dsq_path_join(ex->tmpdir, names[i]) : NULL;
        char hex[2 * DSQ_SHA256_LEN + 1];
        uint64_t sz = 0;
        rc = p ? hash_file(p, hex, &sz, d) : dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        if (rc == DSQ_OK) fprintf(f, "%s  %s\n", hex, names[i]);
        if (i == 0) dsq_xdir_kill_point("sums");
        ex->sum.bytes_out += sz;
        free(p);
    }
    if (f) fclose(f);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    if (rc == DSQ_OK) {
        char *p = dsq_path_join(ex->tmpdir, "SHA256SUMS");
        rc = p ? dsq_write_file_atomic(p, txt, tlen, DSQ_OUT_OVERWRITE, d)
               : dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        ex->sum.bytes_out += tlen;
        free(p);
    }
    free(txt);
    return rc;
}

int dsq_export_finish(dsq_export *ex, dsq_export_summary *s, dsq_diag *d)
{
    if (ex->next != ex->p.nsrc)
        return dsq_fail(d, DSQ_ERR_INTERNAL, NULL, NULL, -1, "export: %zu of %zu tensors written",
                        ex->next, ex->p.nsrc);
    if (ex->cur >= 0) DSQ_TRY(shard_commit(ex, d));
    while (ex->committed < ex->nshards) {   /* shards without data (empty model) */
        DSQ_TRY(shard_open(ex, ex->committed, d));
        DSQ_TRY(shard_commit(ex, d));
    }
    /* The steps of finish, each a crash point a test kills at
     * (dsq_xdir_kill_point): until the rename into place the partial
     * directory keeps its resume state, so --resume redoes what follows. */
    dsq_xdir_kill_point("shards");
    if (ex->nshards > 1) DSQ_TRY(write_index(ex, d));
    dsq_xdir_kill_point("index");
    DSQ_TRY(write_side_files(ex, d));
    dsq_xdir_kill_point("side");
    if (ex->p.f->describe) {
        const char *name = NULL;
        json_object *desc = NULL;
        DSQ_TRY(ex->p.f->describe(&ex->p, &name, &desc, d));
        if (desc) {
            int rc = write_json(ex, name, desc, 1, d);
            json_object_put(desc);
            DSQ_TRY(rc);
        }
    }
    dsq_xdir_kill_point("describe");
    DSQ_TRY(write_sums(ex, d));   /* kill point "sums": while hashing */
    int dfd = open(ex->tmpdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    dsq_xdir_kill_point("summed");
    /* An OUT that appeared or changed during the run is checked again: only
     * an export dsq wrote is replaced. Refused, the finished export stays in
     * the partial directory for --resume. */
    char *old = NULL, why[320] = "";
    int k = dsq_xdir_kind(ex->dir);
    if (k != XD_ABSENT) {
        const char *no = NULL;
        int ok = k == XD_DIR ? dsq_xdir_export_ours(ex->dir, why, sizeof why) : 0;
        if (ok < 0) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        if (k != XD_DIR) no = "it is not a directory";
        else if (!ok) no = why;
        else if (!ex->o.overwrite && !ex->o.resume) no = "it appeared during the run and -f was not given";
        if (no) {
            ex->keep_partial = 1;
            return dsq_fail(d, DSQ_ERR_EXISTS, ex->dir, NULL, -1,
                            "output not replaced: %s; the finished export is kept in %s: move the output away "
                            "and run again with --resume", no, ex->tmpdir);
        }
        old = dsq_xdir_sibling(ex->dir, ".old");
        if (!old) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        if (rename(ex->dir, old) != 0) {
            int rc = dsq_fail_errno(d, errno, ex->dir, "cannot move the old output aside");
            ex->keep_partial = 1;
            free(old);
            return rc;
        }
    }
    dsq_xdir_kill_point("moved");
    if (rename(ex->tmpdir, ex->dir) != 0) {
        int e = errno;
        if (old) rename(old, ex->dir);
        free(old);
        ex->keep_partial = 1;
        return dsq_fail_errno(d, e, ex->dir, "cannot rename the finished export into place");
    }
    dsq_xdir_kill_point("renamed");
    /* The replaced export (only the files its manifest lists), then the
     * resume state: the next run finishes either if a crash stops this. */
    if (old) (void)dsq_xdir_remove_export(old, NULL);
    free(old);
    dsq_xdir_kill_point("removed");
    char *sp = dsq_path_join(ex->dir, DSQ_XDIR_STATE);
    if (sp) unlink(sp);
    free(sp);
    free(ex->tmpdir);
    ex->tmpdir = NULL;
    sync_sum(ex);
    *s = ex->sum;
    return DSQ_OK;
}

void dsq_export_free(dsq_export *ex, int keep)
{
    if (!ex) return;
    dsq_dpw_close(&ex->dpw);
    if (ex->fd >= 0) close(ex->fd);
    if (ex->tmpdir && !keep && !ex->keep_partial) (void)dsq_xdir_remove_partial(ex->tmpdir);
    dsq_xplan_free(&ex->p);
    if (ex->meta) json_object_put(ex->meta);
    free(ex->dir);
    free(ex->tmpdir);
    free(ex);
}

int dsq_export_end(dsq_export *ex, int rc, dsq_diag *d)
{
    /* A full disk is not the input's fault: the committed shards and the
     * resume state are what --resume continues from once space is freed. */
    int kept = ex && ex->tmpdir && (rc == DSQ_ERR_NOSPC);
    dsq_export_free(ex, rc == DSQ_ERR_INTERRUPTED || rc == DSQ_ERR_NOSPC);
    if (kept && d && !strstr(d->msg, "--resume")) {
        size_t l = strlen(d->msg);
        snprintf(d->msg + l, sizeof d->msg - l, "; the partial export is kept: "
                 "free some space and run again with --resume to continue");
    }
    return rc;
}
