/* stats_file.c - calibration statistics in a .dsq container (see stats_file.h). */
#include "stats_file.h"
#include "dsq_json.h"
#include "dsq_file.h"
#include "dsq_mem.h"
#include "dsq_sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void dsq_stats_name(char *buf, size_t n, int layer, const char *kind, const char *what)
{
    if (what) snprintf(buf, n, "L%d/%s/%s", layer, kind, what);
    else snprintf(buf, n, "L%d/%s", layer, kind);
}

/* ---- payloads ---------------------------------------------------------- */

#define SITE_HDR 32

int dsq_stats_encode_site(const dsq_act_stats *s, uint8_t **buf, size_t *n)
{
    size_t in = (size_t)s->in;
    size_t total = SITE_HDR + in * (2 * sizeof(double) + 3 * sizeof(float));
    uint8_t *b = calloc(1, total);
    if (!b) return DSQ_ERR_NOMEM;
    memcpy(b, "DSQS", 4);
    dsq_store_u32le(b + 4, 1);
    dsq_store_u64le(b + 8, s->count);
    dsq_store_u64le(b + 16, (uint64_t)s->in);
    uint8_t *p = b + SITE_HDR;
    memcpy(p, s->sum_abs, in * sizeof(double)); p += in * sizeof(double);
    memcpy(p, s->sum_sq, in * sizeof(double));  p += in * sizeof(double);
    memcpy(p, s->absmax, in * sizeof(float));   p += in * sizeof(float);
    memcpy(p, s->vmin, in * sizeof(float));     p += in * sizeof(float);
    memcpy(p, s->vmax, in * sizeof(float));
    *buf = b;
    *n = total;
    return DSQ_OK;
}

int dsq_stats_decode_site(const void *buf, size_t n, const char *name, dsq_act_stats *out, dsq_diag *d)
{
    memset(out, 0, sizeof *out);
    const uint8_t *b = buf;
    if (n < SITE_HDR || memcmp(b, "DSQS", 4) != 0 || dsq_load_u32le(b + 4) != 1 || dsq_load_u32le(b + 24) != 0 ||
        dsq_load_u32le(b + 28) != 0)
        return dsq_fail(d, DSQ_ERR_FORMAT, NULL, name, 0, "bad statistics header");
    uint64_t count = dsq_load_u64le(b + 8), in = dsq_load_u64le(b + 16);
    if (in == 0 || in > (1u << 26) || n != SITE_HDR + in * (2 * sizeof(double) + 3 * sizeof(float)))
        return dsq_fail(d, DSQ_ERR_FORMAT, NULL, name, 16, "statistics size does not match %llu channels",
                        (unsigned long long)in);
    DSQ_TRY(dsq_act_stats_init(out, name, (int64_t)in, 0, 0));
    const uint8_t *p = b + SITE_HDR;
    memcpy(out->sum_abs, p, in * sizeof(double)); p += in * sizeof(double);
    memcpy(out->sum_sq, p, in * sizeof(double));  p += in * sizeof(double);
    memcpy(out->absmax, p, in * sizeof(float));   p += in * sizeof(float);
    memcpy(out->vmin, p, in * sizeof(float));     p += in * sizeof(float);
    memcpy(out->vmax, p, in * sizeof(float));
    out->count = count;
    for (uint64_t j = 0; j < in; j++) {
        double sa = out->sum_abs[j], sq = out->sum_sq[j];
        float am = out->absmax[j], lo = out->vmin[j], hi = out->vmax[j];
        int ok = isfinite(sa) && isfinite(sq) && isfinite(am) && isfinite(lo) && isfinite(hi) && sa >= 0.0 &&
                 sq >= 0.0 && lo <= hi && am == fmaxf(fabsf(lo), fabsf(hi));
        if (ok && count == 0) ok = sa == 0.0 && sq == 0.0 && am == 0.0;
        if (!ok) {
            dsq_act_stats_release(out);
            return dsq_fail(d, DSQ_ERR_FORMAT, NULL, name, (int64_t)(SITE_HDR + j * sizeof(double)),
                            "inconsistent statistics for channel %llu", (unsigned long long)j);
        }
    }
    return DSQ_OK;
}

int dsq_stats_decode_f32(const void *buf, size_t bytes, int64_t n, int positive, const char *name, float *out,
                         dsq_diag *d)
{
    if (n < 0 || bytes != (size_t)n * sizeof(float))
        return dsq_fail(d, DSQ_ERR_FORMAT, NULL, name, -1, "vector has %zu bytes, expected %lld floats", bytes,
                        (long long)n);
    memcpy(out, buf, bytes);
    for (int64_t j = 0; j < n; j++)
        if (!isfinite(out[j]) || out[j] < 0.0f || (positive && !(out[j] > 0.0f)))
            return dsq_fail(d, DSQ_ERR_FORMAT, NULL, name, (int64_t)(j * 4), "bad value %g at %lld",
                            (double)out[j], (long long)j);
    return DSQ_OK;
}

/* ---- writer ------------------------------------------------------------- */

struct dsq_stats_writer {
    dsq_ctr_writer *w;
    size_t recovered;     /* tensors recovered from an earlier run */
    int fd;               /* read descriptor on the partial file (recovered reads) */
};

char *dsq_stats_spill_base(const char *path)
{
    char *tmp = dsq_outfile_tmp_name(path);
    if (!tmp) return NULL;
    size_t n = strlen(tmp) + sizeof ".hidden";
    char *b = malloc(n);
    if (b) snprintf(b, n, "%s.hidden", tmp);
    free(tmp);
    return b;
}

/* base + suffix removed when it is a regular file or a link (unlink never
 * follows one); 1 when something was removed. */
static int remove_named(const char *base, const char *suffix)
{
    size_t n = strlen(base) + strlen(suffix) + 1;
    char *p = malloc(n);
    if (!p) return 0;
    snprintf(p, n, "%s%s", base, suffix);
    struct stat st;
    int gone = lstat(p, &st) == 0 && (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) && unlink(p) == 0;
    free(p);
    return gone;
}

int dsq_stats_remove_partial(const char *path)
{
    char *tmp = dsq_outfile_tmp_name(path), *spill = dsq_stats_spill_base(path);
    int n = 0;
    if (tmp && spill) {
        n += remove_named(tmp, ".journal");
        n += remove_named(tmp, "");
        n += remove_named(spill, ".h0");
        n += remove_named(spill, ".h1");
    }
    free(tmp);
    free(spill);
    return n;
}

int dsq_stats_writer_open(dsq_stats_writer **out, const char *path, const char *fingerprint, unsigned flags,
                          dsq_diag *d)
{
    *out = NULL;
    if (!(flags & DSQ_STATS_OVERWRITE) && dsq_path_exists(path))
        return dsq_fail(d, DSQ_ERR_EXISTS, path, NULL, -1, "statistics file exists (use -f to overwrite)");
    if (!(flags & DSQ_STATS_RESUME)) dsq_stats_remove_partial(path);
    dsq_stats_writer *w = calloc(1, sizeof *w);
    if (!w) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    w->fd = -1;
    unsigned cf = DSQ_CTR_RESUME | ((flags & DSQ_STATS_OVERWRITE) ? DSQ_OUT_OVERWRITE : 0);
    int rc = dsq_ctr_writer_open_ex(&w->w, path, cf, fingerprint, d);
    if (rc < 0) {
        free(w);
        return rc;
    }
    /* only explicit checkpoints (layer ends) */
    dsq_ctr_writer_set_checkpoint_interval(w->w, 1e18);
    w->recovered = dsq_ctr_writer_count(w->w);
    if (w->recovered) {
        w->fd = open(dsq_ctr_writer_tmp_path(w->w), O_RDONLY | O_CLOEXEC);
        if (w->fd < 0) {
            rc = dsq_fail_errno(d, errno, dsq_ctr_writer_tmp_path(w->w), "cannot read the partial statistics");
            dsq_stats_writer_detach(w);
            return rc;
        }
    }
    *out = w;
    return DSQ_OK;
}

int dsq_stats_writer_has(const dsq_stats_writer *w, const char *name)
{
    int64_t i = dsq_ctr_writer_find(w->w, name);
    return i >= 0 && (size_t)i < w->recovered;
}

const char *dsq_stats_writer_tmp_path(const dsq_stats_writer *w) { return dsq_ctr_writer_tmp_path(w->w); }

int dsq_stats_writer_put(dsq_stats_writer *w, const char *name, const void *data, size_t n, int elem,
                         uint32_t aux0, dsq_diag *d)
{
    int64_t i = dsq_ctr_writer_find(w->w, name);
    if (i >= 0) {
        const dsq_ctr_tensor_info *t = dsq_ctr_writer_get(w->w, (size_t)i);
        uint8_t sha[DSQ_SHA256_LEN];
        if (dsq_sha256_buf(data, n, sha) < 0) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        if ((size_t)i >= w->recovered || t->raw_size != n || memcmp(sha, t->sha256, DSQ_SHA256_LEN) != 0 ||
            t->aux[0] != aux0)
            return dsq_fail(d, DSQ_ERR_STATE, dsq_ctr_writer_tmp_path(w->w), name, -1,
                            "resumed statistics differ from this run's (start again without --resume)");
        return DSQ_OK;
    }
    dsq_ctr_tensor_info info;
    memset(&info, 0, sizeof info);
    info.name = name;
    info.src_dtype = elem == 8 ? "U64" : elem == 4 ? "F32" : "U8";
    info.role = DSQ_ROLE_CALIB_STATS;
    info.ndim = 1;
    info.shape[0] = (int64_t)(n / (size_t)(elem > 0 ? elem : 1));
    info.aux[0] = aux0;
    return dsq_ctr_writer_add(w->w, &info, data, n, DSQ_CTR_LEVEL_NONE, d);
}

int dsq_stats_writer_get(dsq_stats_writer *w, const char *name, void **data, size_t *n, uint32_t *aux0,
                         dsq_diag *d)
{
    *data = NULL;
    *n = 0;
    int64_t i = dsq_ctr_writer_find(w->w, name);
    if (i < 0 || (size_t)i >= w->recovered)
        return dsq_fail(d, DSQ_ERR_NOT_FOUND, dsq_ctr_writer_tmp_path(w->w), name, -1, "not in the checkpoint");
    const dsq_ctr_tensor_info *t = dsq_ctr_writer_get(w->w, (size_t)i);
    const char *tp = dsq_ctr_writer_tmp_path(w->w);
    if (t->compression != DSQ_CTR_COMP_NONE || t->stored_size != t->raw_size)
        return dsq_fail(d, DSQ_ERR_FORMAT, tp, name, (int64_t)t->offset, "compressed statistics are not expected");
    uint8_t *b = malloc(t->raw_size ? (size_t)t->raw_size : 1);
    if (!b) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    size_t got = 0;
    while (got < t->raw_size) {
        ssize_t k = pread(w->fd, b + got, (size_t)t->raw_size - got, (off_t)(t->offset + got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            free(b);
            return k == 0 ? dsq_fail(d, DSQ_ERR_TRUNCATED, tp, name, (int64_t)t->offset, "partial file is short")
                          : dsq_fail_errno(d, errno, tp, "read failed");
        }
        got += (size_t)k;
    }
    uint8_t sha[DSQ_SHA256_LEN];
    if (dsq_sha256_buf(b, got, sha) < 0 || memcmp(sha, t->sha256, DSQ_SHA256_LEN) != 0) {
        free(b);
        return dsq_fail(d, DSQ_ERR_CHECKSUM, tp, name, (int64_t)t->offset, "checkpointed statistics are corrupt");
    }
    *data = b;
    *n = got;
    if (aux0) *aux0 = t->aux[0];
    return DSQ_OK;
}

int dsq_stats_writer_checkpoint(dsq_stats_writer *w, dsq_diag *d) { return dsq_ctr_writer_checkpoint(w->w, d); }

static void writer_free(dsq_stats_writer *w)
{
    if (w->fd >= 0) close(w->fd);
    free(w);
}

int dsq_stats_writer_finish(dsq_stats_writer *w, const char *meta_json, dsq_diag *d)
{
    int rc = dsq_ctr_writer_set_metadata(w->w, meta_json ? meta_json : "{}", d);
    if (rc < 0) {
        dsq_ctr_writer_abort(w->w);
        writer_free(w);
        return rc;
    }
    rc = dsq_ctr_writer_finish(w->w, d);
    writer_free(w);
    return rc;
}

void dsq_stats_writer_detach(dsq_stats_writer *w)
{
    if (!w) return;
    dsq_ctr_writer_detach(w->w, NULL);
    writer_free(w);
}

void dsq_stats_writer_abort(dsq_stats_writer *w)
{
    if (!w) return;
    dsq_ctr_writer_abort(w->w);
    writer_free(w);
}

/* ---- reader ------------------------------------------------------------- */

struct dsq_stats_reader {
    dsq_ctr *c;
    char *path;
};

int dsq_stats_reader_open(dsq_stats_reader **out, const char *path, dsq_diag *d)
{
    *out = NULL;
    dsq_stats_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        free(r);
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    int rc = dsq_ctr_open(&r->c, path, d);
    if (rc == DSQ_OK) {
        json_object *root = json_tokener_parse(dsq_ctr_metadata(r->c, NULL));
        const char *f = NULL;
        int64_t v = 0;
        if (dsq_json_get_str(root, "format", &f) != DSQ_JSON_OK || strcmp(f, DSQ_STATS_FORMAT) != 0)
            rc = dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, -1,
                          "not a calibration statistics file (metadata \"format\" is not \"%s\")",
                          DSQ_STATS_FORMAT);
        else if (dsq_json_get_int(root, "version", &v) != DSQ_JSON_OK || v != DSQ_STATS_VERSION)
            rc = dsq_fail(d, DSQ_ERR_UNSUPPORTED, path, NULL, -1,
                          "unsupported statistics version (metadata \"version\" must be the integer %d)",
                          DSQ_STATS_VERSION);
        json_object_put(root);
    }
    if (rc < 0) {
        dsq_stats_reader_close(r);
        return rc;
    }
    *out = r;
    return DSQ_OK;
}

const char *dsq_stats_reader_meta(const dsq_stats_reader *r) { return dsq_ctr_metadata(r->c, NULL); }
const char *dsq_stats_reader_path(const dsq_stats_reader *r) { return r->path; }

int dsq_stats_reader_get(const dsq_stats_reader *r, const char *name, void **data, size_t *n, uint32_t *aux0,
                         dsq_diag *d)
{
    *data = NULL;
    *n = 0;
    const dsq_ctr_tensor_info *t = dsq_ctr_find(r->c, name);
    if (!t) return dsq_fail(d, DSQ_ERR_NOT_FOUND, r->path, name, -1, "missing from the statistics file");
    if (t->raw_size > (1ull << 34)) return dsq_fail(d, DSQ_ERR_FORMAT, r->path, name, -1, "tensor too large");
    void *b = malloc(t->raw_size ? (size_t)t->raw_size : 1);
    if (!b) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    int rc = dsq_ctr_read(r->c, t, b, (size_t)t->raw_size, d);
    if (rc < 0) {
        free(b);
        return rc;
    }
    *data = b;
    *n = (size_t)t->raw_size;
    if (aux0) *aux0 = t->aux[0];
    return DSQ_OK;
}

void dsq_stats_reader_close(dsq_stats_reader *r)
{
    if (!r) return;
    if (r->c) dsq_ctr_close(r->c);
    free(r->path);
    free(r);
}
