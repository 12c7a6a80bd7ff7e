/* st_writer.c - safetensors writer (see st_writer.h for the format rules
 * it follows and why). */
#include "st_writer.h"
#include "dsq_sbuf.h"
#include "dsq_file.h"
#include "dsq_mem.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_DIMS 8

struct w_ent {
    char *name;
    enum dsq_dtype dtype;
    int ndim;
    int64_t shape[MAX_DIMS];
    uint64_t nbytes;
    const void *data;     /* borrowed, or == owned */
    void *owned;          /* add_copy */
    dsq_st_fill_fn fill;  /* add_lazy */
    void *ctx;
    uint64_t begin;       /* offset in its shard's buffer (set per write) */
    int shard;
};

struct dsq_st_writer {
    struct w_ent *e;
    size_t n, cap;
    char **mk, **mv;
    size_t nmeta;
    int err;              /* first add/set_meta error, reported by write */
    char errname[DSQ_DIAG_NAME];
    char errmsg[DSQ_DIAG_MSG];
};


/* ===== building up ===== */

dsq_st_writer *dsq_st_writer_create(void)
{
    return calloc(1, sizeof(dsq_st_writer));
}

void dsq_st_writer_free(dsq_st_writer *w)
{
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) { free(w->e[i].name); free(w->e[i].owned); }
    free(w->e);
    for (size_t i = 0; i < w->nmeta; i++) { free(w->mk[i]); free(w->mv[i]); }
    free(w->mk);
    free(w->mv);
    free(w);
}

size_t dsq_st_writer_count(const dsq_st_writer *w) { return w ? w->n : 0; }

__attribute__((format(printf, 4, 5)))
static int w_err(dsq_st_writer *w, int status, const char *name, const char *fmt, ...)
{
    if (w && !w->err) {
        w->err = status;
        snprintf(w->errname, sizeof w->errname, "%s", name ? name : "");
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->errmsg, sizeof w->errmsg, fmt, ap);
        va_end(ap);
    }
    return status;
}

static int utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p, n;
        uint32_t cp;
        if (c < 0x80) { p++; continue; }
        if ((c & 0xe0) == 0xc0) { n = 1; cp = c & 0x1f; }
        else if ((c & 0xf0) == 0xe0) { n = 2; cp = c & 0x0f; }
        else if ((c & 0xf8) == 0xf0) { n = 3; cp = c & 0x07; }
        else return 0;
        for (unsigned k = 1; k <= n; k++) {
            if ((p[k] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (p[k] & 0x3f);
        }
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        p += n + 1;
    }
    return 1;
}

static int add_common(dsq_st_writer *w, const char *name, enum dsq_dtype dtype, int ndim,
                      const int64_t *shape, uint64_t *nbytes_out, struct w_ent **out)
{
    if (!w) return DSQ_ERR_INVALID_ARG;
    if (!name || !*name || strcmp(name, "__metadata__") == 0 || !utf8_valid(name))
        return w_err(w, DSQ_ERR_INVALID_ARG, name, "invalid tensor name");
    if (!dsq_dtype_valid(dtype))
        return w_err(w, DSQ_ERR_INVALID_ARG, name, "invalid dtype %d", (int)dtype);
    if (ndim < 0 || ndim > MAX_DIMS || (ndim > 0 && !shape))
        return w_err(w, DSQ_ERR_INVALID_ARG, name, "invalid rank %d", ndim);
    uint64_t numel = 1, bits;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return w_err(w, DSQ_ERR_INVALID_ARG, name, "negative shape[%d]", i);
        if (dsq_mul_u64(numel, (uint64_t)shape[i], &numel) < 0)
            return w_err(w, DSQ_ERR_OVERFLOW, name, "shape element count overflows");
    }
    if (dsq_mul_u64(numel, dsq_dtype_bits(dtype), &bits) < 0)
        return w_err(w, DSQ_ERR_OVERFLOW, name, "byte size overflows");
    if (bits % 8)
        return w_err(w, DSQ_ERR_INVALID_ARG, name, "%llu %s elements are not whole bytes",
                     (unsigned long long)numel, dsq_dtype_name(dtype));
    if (w->n == w->cap) {
        size_t nc = w->cap ? w->cap * 2 : 64;
        struct w_ent *ne = realloc(w->e, nc * sizeof *ne);
        if (!ne) return w_err(w, DSQ_ERR_NOMEM, name, "out of memory");
        w->e = ne;
        w->cap = nc;
    }
    struct w_ent *e = &w->e[w->n];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    if (!e->name) return w_err(w, DSQ_ERR_NOMEM, name, "out of memory");
    e->dtype = dtype;
    e->ndim = ndim;
    for (int i = 0; i < ndim; i++) e->shape[i] = shape[i];
    e->nbytes = bits / 8;
    *nbytes_out = e->nbytes;
    *out = e;
    return DSQ_OK;
}

int dsq_st_writer_add(dsq_st_writer *w, const char *name, enum dsq_dtype dtype, int ndim,
                      const int64_t *shape, const void *data, uint64_t nbytes)
{
    struct w_ent *e;
    uint64_t need;
    DSQ_TRY(add_common(w, name, dtype, ndim, shape, &need, &e));
    if (need != nbytes || (!data && nbytes)) {
        free(e->name);
        return w_err(w, DSQ_ERR_INVALID_ARG, name, "%llu data bytes given, shape needs %llu",
                     (unsigned long long)nbytes, (unsigned long long)need);
    }
    e->data = data;
    w->n++;
    return DSQ_OK;
}

int dsq_st_writer_add_copy(dsq_st_writer *w, const char *name, enum dsq_dtype dtype, int ndim,
                           const int64_t *shape, const void *data, uint64_t nbytes)
{
    struct w_ent *e;
    uint64_t need;
    DSQ_TRY(add_common(w, name, dtype, ndim, shape, &need, &e));
    if (need != nbytes || (!data && nbytes) || nbytes > SIZE_MAX) {
        free(e->name);
        return w_err(w, DSQ_ERR_INVALID_ARG, name, "%llu data bytes given, shape needs %llu",
                     (unsigned long long)nbytes, (unsigned long long)need);
    }
    if (nbytes) {
        e->owned = malloc((size_t)nbytes);
        if (!e->owned) { free(e->name); return w_err(w, DSQ_ERR_NOMEM, name, "out of memory"); }
        memcpy(e->owned, data, (size_t)nbytes);
        e->data = e->owned;
    }
    w->n++;
    return DSQ_OK;
}

int dsq_st_writer_add_lazy(dsq_st_writer *w, const char *name, enum dsq_dtype dtype, int ndim,
                           const int64_t *shape, dsq_st_fill_fn fill, void *ctx)
{
    struct w_ent *e;
    uint64_t need;
    DSQ_TRY(add_common(w, name, dtype, ndim, shape, &need, &e));
    if (!fill) { free(e->name); return w_err(w, DSQ_ERR_INVALID_ARG, name, "no fill function"); }
    e->fill = fill;
    e->ctx = ctx;
    w->n++;
    return DSQ_OK;
}

int dsq_st_writer_set_meta(dsq_st_writer *w, const char *key, const char *value)
{
    if (!w) return DSQ_ERR_INVALID_ARG;
    if (!key || !value || !utf8_valid(key) || !utf8_valid(value))
        return w_err(w, DSQ_ERR_INVALID_ARG, "__metadata__", "invalid metadata key or value");
    for (size_t i = 0; i < w->nmeta; i++) {
        if (strcmp(w->mk[i], key) == 0) {
            char *v = strdup(value);
            if (!v) return w_err(w, DSQ_ERR_NOMEM, "__metadata__", "out of memory");
            free(w->mv[i]);
            w->mv[i] = v;
            return DSQ_OK;
        }
    }
    char **nk = realloc(w->mk, (w->nmeta + 1) * sizeof *nk);
    if (nk) w->mk = nk;
    char **nv = realloc(w->mv, (w->nmeta + 1) * sizeof *nv);
    if (nv) w->mv = nv;
    if (!nk || !nv) return w_err(w, DSQ_ERR_NOMEM, "__metadata__", "out of memory");
    w->mk[w->nmeta] = strdup(key);
    w->mv[w->nmeta] = strdup(value);
    if (!w->mk[w->nmeta] || !w->mv[w->nmeta]) {
        free(w->mk[w->nmeta]);
        free(w->mv[w->nmeta]);
        return w_err(w, DSQ_ERR_NOMEM, "__metadata__", "out of memory");
    }
    w->nmeta++;
    return DSQ_OK;
}

/* ===== layout ===== */

static int by_name(const void *a, const void *b)
{
    return strcmp((*(struct w_ent *const *)a)->name, (*(struct w_ent *const *)b)->name);
}

/* safetensors prepare(): descending dtype (alignment order), then name */
static int by_layout(const void *a, const void *b)
{
    const struct w_ent *x = *(struct w_ent *const *)a, *y = *(struct w_ent *const *)b;
    if (x->dtype != y->dtype) return x->dtype > y->dtype ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Put v under key in o, or note the failure: json-c returns NULL or -1 on
 * allocation failure, and one flag checked at the end keeps the builders
 * below straight-line. */
static void put(json_object *o, const char *key, json_object *v, int *oom)
{
    if (!o || !v || json_object_object_add(o, key, v) != 0) { json_object_put(v); *oom = 1; }
}

static void push(json_object *a, json_object *v, int *oom)
{
    if (!a || !v || json_object_array_add(a, v) != 0) { json_object_put(v); *oom = 1; }
}

/* Serialise o (consumed) into b with json-c's flags; '/' is not escaped. */
static void emit(json_object *o, int flags, int oom, dsq_sbuf *b)
{
    const char *txt = !oom && o ? json_object_to_json_string_ext(o, flags | JSON_C_TO_STRING_NOSLASHESCAPE)
                                : NULL;
    if (txt) dsq_sb_puts(b, txt);
    else b->oom = 1;
    json_object_put(o);
}

/* Header of the tensors in v[0..n) (already in layout order, begin set),
 * compact as the reference writer's, padded with spaces to a multiple of 8.
 * json-c keeps keys in insertion order, so the bytes are deterministic. */
static int build_header(const dsq_st_writer *w, struct w_ent **v, size_t n, dsq_sbuf *b)
{
    int oom = 0;
    json_object *root = json_object_new_object();
    if (w->nmeta) {
        /* keys sorted so the output is deterministic */
        size_t *ord = malloc(w->nmeta * sizeof *ord);
        if (!ord) { json_object_put(root); return DSQ_ERR_NOMEM; }
        for (size_t i = 0; i < w->nmeta; i++) ord[i] = i;
        for (size_t i = 1; i < w->nmeta; i++)
            for (size_t j = i; j > 0 && strcmp(w->mk[ord[j - 1]], w->mk[ord[j]]) > 0; j--) {
                size_t t = ord[j]; ord[j] = ord[j - 1]; ord[j - 1] = t;
            }
        json_object *meta = json_object_new_object();
        for (size_t i = 0; i < w->nmeta; i++)
            put(meta, w->mk[ord[i]], json_object_new_string(w->mv[ord[i]]), &oom);
        put(root, "__metadata__", meta, &oom);
        free(ord);
    }
    for (size_t i = 0; i < n && !oom; i++) {
        const struct w_ent *e = v[i];
        json_object *t = json_object_new_object(), *shape = json_object_new_array(),
                    *offs = json_object_new_array();
        put(t, "dtype", json_object_new_string(dsq_dtype_name(e->dtype)), &oom);
        for (int k = 0; k < e->ndim; k++) push(shape, json_object_new_int64(e->shape[k]), &oom);
        put(t, "shape", shape, &oom);
        /* offsets are bounded by the shard size, far below INT64_MAX */
        push(offs, json_object_new_int64((int64_t)e->begin), &oom);
        push(offs, json_object_new_int64((int64_t)(e->begin + e->nbytes)), &oom);
        put(t, "data_offsets", offs, &oom);
        put(root, e->name, t, &oom);
    }
    emit(root, JSON_C_TO_STRING_PLAIN, oom, b);
    while (!b->oom && b->n % 8) dsq_sb_add(b, " ", 1);
    return b->oom ? DSQ_ERR_NOMEM : DSQ_OK;
}

static void assign_offsets(struct w_ent **v, size_t n)
{
    qsort(v, n, sizeof *v, by_layout);
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) { v[i]->begin = off; off += v[i]->nbytes; }
}

/* sorted by name (in place) and no duplicates */
static int check_names(dsq_st_writer *w, struct w_ent **v, dsq_diag *d, const char *path)
{
    if (w->err)
        return dsq_fail(d, w->err, path, w->errname, -1, "%s", w->errmsg);
    qsort(v, w->n, sizeof *v, by_name);
    for (size_t i = 1; i < w->n; i++)
        if (strcmp(v[i - 1]->name, v[i]->name) == 0)
            return dsq_fail(d, DSQ_ERR_INVALID_ARG, path, v[i]->name, -1,
                            "tensor '%s' was added twice", v[i]->name);
    return DSQ_OK;
}

int dsq_st_writer_header(dsq_st_writer *w, char **out, size_t *len, dsq_diag *d)
{
    return dsq_st_writer_layout(w, out, len, NULL, d);
}

int dsq_st_writer_layout(dsq_st_writer *w, char **out, size_t *len, uint64_t *begin, dsq_diag *d)
{
    if (!w || !out || !len) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "bad arguments");
    *out = NULL;
    *len = 0;
    struct w_ent **v = malloc((w->n ? w->n : 1) * sizeof *v);
    if (!v) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    for (size_t i = 0; i < w->n; i++) v[i] = &w->e[i];
    int rc = check_names(w, v, d, NULL);
    dsq_sbuf b = {0};
    if (rc == DSQ_OK) {
        assign_offsets(v, w->n);
        rc = build_header(w, v, w->n, &b);
        if (rc < 0) rc = dsq_fail(d, rc, NULL, NULL, -1, "out of memory");
        for (size_t i = 0; begin && rc == DSQ_OK && i < w->n; i++) begin[i] = w->e[i].begin;
    }
    free(v);
    if (rc < 0) { free(b.p); return rc; }
    *out = b.p;
    *len = b.n;
    return DSQ_OK;
}

/* ===== writing ===== */

static int write_shard(const dsq_st_writer *w, struct w_ent **v, size_t n, const char *path,
                       unsigned flags, void **scratch, size_t *scratch_cap, dsq_diag *d)
{
    assign_offsets(v, n);
    dsq_sbuf b = {0};
    int rc = build_header(w, v, n, &b);
    if (rc < 0) { free(b.p); return dsq_fail(d, rc, path, NULL, -1, "out of memory"); }
    dsq_outfile f;
    rc = dsq_outfile_open(&f, path, flags, d);
    if (rc < 0) { free(b.p); return rc; }
    uint8_t len8[8];
    dsq_store_u64le(len8, (uint64_t)b.n);
    rc = dsq_outfile_write(&f, len8, 8, d);
    if (rc == DSQ_OK) rc = dsq_outfile_write(&f, b.p, b.n, d);
    free(b.p);
    for (size_t i = 0; i < n && rc == DSQ_OK; i++) {
        const struct w_ent *e = v[i];
        if (e->nbytes == 0) continue;
        if (e->nbytes > SIZE_MAX) {
            rc = dsq_fail(d, DSQ_ERR_OVERFLOW, path, e->name, -1, "tensor too large");
            break;
        }
        const void *src = e->data;
        if (e->fill) {
            if (*scratch_cap < e->nbytes) {
                free(*scratch);
                *scratch = malloc((size_t)e->nbytes);
                *scratch_cap = *scratch ? (size_t)e->nbytes : 0;
                if (!*scratch) {
                    rc = dsq_fail(d, DSQ_ERR_NOMEM, path, e->name, -1, "out of memory");
                    break;
                }
            }
            rc = e->fill(e->ctx, e->name, *scratch, e->nbytes, d);
            if (rc < 0) {
                rc = dsq_fail(d, rc, path, e->name, -1, "producing tensor data failed");
                break;
            }
            src = *scratch;
        }
        rc = dsq_outfile_write(&f, src, (size_t)e->nbytes, d);
    }
    if (rc == DSQ_OK) return dsq_outfile_commit(&f, d);
    dsq_outfile_abort(&f);
    return rc;
}

static int write_index(const dsq_st_writer *w, struct w_ent **v, char **names, const char *path,
                       unsigned flags, dsq_diag *d)
{
    dsq_sbuf b = {0};
    uint64_t total = 0;
    int oom = 0;
    for (size_t i = 0; i < w->n; i++) total += v[i]->nbytes;
    json_object *root = json_object_new_object(), *meta = json_object_new_object(),
                *map = json_object_new_object();
    put(meta, "total_size", json_object_new_int64((int64_t)total), &oom);
    put(root, "metadata", meta, &oom);
    for (size_t i = 0; i < w->n && !oom; i++)     /* v is in name order */
        put(map, v[i]->name, json_object_new_string(names[v[i]->shard]), &oom);
    put(root, "weight_map", map, &oom);
    emit(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED, oom, &b);
    dsq_sb_puts(&b, "\n");
    if (b.oom) { free(b.p); return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory"); }
    int rc = dsq_write_file_atomic(path, b.p, b.n, flags, d);
    free(b.p);
    return rc;
}

int dsq_st_writer_write(dsq_st_writer *w, const char *path_or_dir, uint64_t max_shard_bytes,
                        unsigned out_flags, dsq_diag *d)
{
    if (!w || !path_or_dir)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, path_or_dir, NULL, -1, "no writer or path");
    struct w_ent **v = malloc((w->n ? w->n : 1) * sizeof *v);
    struct w_ent **tmp = malloc((w->n ? w->n : 1) * sizeof *tmp);
    char **names = NULL, **paths = NULL;
    void *scratch = NULL;
    size_t scratch_cap = 0;
    int nsh = 0, done = 0, rc;
    if (!v || !tmp) { rc = dsq_fail(d, DSQ_ERR_NOMEM, path_or_dir, NULL, -1, "out of memory"); goto out; }
    for (size_t i = 0; i < w->n; i++) v[i] = &w->e[i];
    rc = check_names(w, v, d, path_or_dir);
    if (rc < 0) goto out;

    if (max_shard_bytes == 0) {
        for (size_t i = 0; i < w->n; i++) tmp[i] = v[i];
        rc = write_shard(w, tmp, w->n, path_or_dir, out_flags, &scratch, &scratch_cap, d);
        goto out;
    }

    /* greedy split in name order, as huggingface_hub does */
    uint64_t cur = 0;
    for (size_t i = 0; i < w->n; i++) {
        if (i == 0 || (cur > 0 && cur + v[i]->nbytes > max_shard_bytes)) { nsh++; cur = 0; }
        v[i]->shard = nsh - 1;
        cur += v[i]->nbytes;
    }
    if (nsh == 0) nsh = 1;
    if (nsh > 99999) { rc = dsq_fail(d, DSQ_ERR_INVALID_ARG, path_or_dir, NULL, -1, "too many shards"); goto out; }
    if (!dsq_path_is_dir(path_or_dir) && mkdir(path_or_dir, 0755) != 0 && errno != EEXIST) {
        rc = dsq_fail_errno(d, errno, path_or_dir, "cannot create directory");
        goto out;
    }
    names = calloc((size_t)nsh, sizeof *names);
    paths = calloc((size_t)nsh, sizeof *paths);
    if (!names || !paths) { rc = dsq_fail(d, DSQ_ERR_NOMEM, path_or_dir, NULL, -1, "out of memory"); goto out; }
    for (int s = 0; s < nsh; s++) {
        char nm[64];
        if (nsh == 1) snprintf(nm, sizeof nm, "model.safetensors");
        else snprintf(nm, sizeof nm, "model-%05d-of-%05d.safetensors", s + 1, nsh);
        names[s] = strdup(nm);
        paths[s] = names[s] ? dsq_path_join(path_or_dir, nm) : NULL;
        if (!paths[s]) { rc = dsq_fail(d, DSQ_ERR_NOMEM, path_or_dir, NULL, -1, "out of memory"); goto out; }
    }
    for (int s = 0; s < nsh && rc == DSQ_OK; s++) {
        size_t k = 0;
        for (size_t i = 0; i < w->n; i++) if (v[i]->shard == s) tmp[k++] = v[i];
        rc = write_shard(w, tmp, k, paths[s], out_flags, &scratch, &scratch_cap, d);
        if (rc == DSQ_OK) done = s + 1;
    }
    if (rc == DSQ_OK && nsh > 1) {
        char *ip = dsq_path_join(path_or_dir, "model.safetensors.index.json");
        if (!ip) rc = dsq_fail(d, DSQ_ERR_NOMEM, path_or_dir, NULL, -1, "out of memory");
        else {
            rc = write_index(w, v, names, ip, out_flags, d);
            free(ip);
        }
    }
    if (rc < 0) {
        /* no half checkpoints: remove the shards this call committed */
        for (int s = 0; s < done; s++) unlink(paths[s]);
    }
out:
    if (names) for (int s = 0; s < nsh; s++) free(names[s]);
    if (paths) for (int s = 0; s < nsh; s++) free(paths[s]);
    free(names);
    free(paths);
    free(scratch);
    free(tmp);
    free(v);
    return rc;
}
