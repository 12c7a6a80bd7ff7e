/* inspect.c - what a model file holds, as JSON or text (see inspect.h). */
#include "inspect.h"

#include "dsq_file.h"
#include "dsq_sha256.h"
#include "model_config.h"
#include "safetensors.h"
#include "scheme.h"
#include "sha256sums.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- small formatting helpers ---- */

static void fmt_shape(char *buf, size_t n, uint32_t ndim, const int64_t *shape)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (uint32_t i = 0; i < ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

static void fmt_bytes(char *buf, size_t n, uint64_t b)
{
    if (b >= (1ull << 30)) snprintf(buf, n, "%.2f GiB", (double)b / (1ull << 30));
    else if (b >= (1ull << 20)) snprintf(buf, n, "%.2f MiB", (double)b / (1ull << 20));
    else if (b >= (1ull << 10)) snprintf(buf, n, "%.2f KiB", (double)b / (1ull << 10));
    else snprintf(buf, n, "%llu B", (unsigned long long)b);
}

static const char *scheme_name(uint32_t id, char *buf, size_t n)
{
    const dsq_scheme *s = dsq_scheme_by_id(id);
    if (s && s->name) return s->name;
    snprintf(buf, n, "scheme-%u", id);
    return buf;
}

static json_object *json_shape(uint32_t ndim, const int64_t *shape)
{
    json_object *a = json_object_new_array();
    for (uint32_t i = 0; i < ndim; i++) json_object_array_add(a, json_object_new_int64(shape[i]));
    return a;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- .dsq ---- */

typedef struct dsq_totals {
    size_t ns, n;
    uint64_t raw, stored, fsize;
} dsq_totals;

/* Totals over the shards of a set (a sharded .dsq is listed shard by shard). */
static void dsq_set_totals(const dsq_ctr_set *set, dsq_totals *t)
{
    memset(t, 0, sizeof *t);
    t->ns = dsq_ctr_set_shards(set);
    for (size_t k = 0; k < t->ns; k++) {
        uint64_t a, b;
        dsq_ctr_totals(dsq_ctr_set_shard(set, k), &a, &b);
        t->raw += a;
        t->stored += b;
        t->n += dsq_ctr_count(dsq_ctr_set_shard(set, k));
        t->fsize += dsq_ctr_file_size(dsq_ctr_set_shard(set, k));
    }
}

/* The metadata JSON (every shard carries it) and its recipe, if any. */
static json_object *dsq_set_meta(const dsq_ctr_set *set, json_object **recipe)
{
    json_object *meta = json_tokener_parse(dsq_ctr_metadata(dsq_ctr_set_shard(set, 0), NULL));
    *recipe = NULL;
    if (meta) json_object_object_get_ex(meta, "recipe", recipe);
    return meta;
}

json_object *dsq_inspect_dsq_json(const dsq_ctr_set *set, const char *path)
{
    dsq_totals tt;
    dsq_set_totals(set, &tt);
    json_object *recipe, *meta = dsq_set_meta(set, &recipe);
    json_object *root = json_object_new_object();
    json_object_object_add(root, "path", json_object_new_string(path));
    json_object_object_add(root, "format", json_object_new_string("dsq"));
    json_object_object_add(root, "version", json_object_new_int(DSQ_CTR_VERSION));
    json_object_object_add(root, "file_size", json_object_new_int64((int64_t)tt.fsize));
    if (dsq_ctr_set_index_path(set)) {
        json_object *sh = json_object_new_array();
        for (size_t k = 0; k < tt.ns; k++) json_object_array_add(sh, json_object_new_string(dsq_ctr_set_shard_path(set, k)));
        json_object_object_add(root, "index", json_object_new_string(dsq_ctr_set_index_path(set)));
        json_object_object_add(root, "shards", sh);
    }
    json_object *tensors = json_object_new_array();
    json_object_object_add(root, "tensors", tensors);
    for (size_t k = 0; k < tt.ns; k++)
        for (size_t i = 0; i < dsq_ctr_count(dsq_ctr_set_shard(set, k)); i++) {
            const dsq_ctr_tensor_info *t = dsq_ctr_get(dsq_ctr_set_shard(set, k), i);
            char sb[32], hex[65];
            dsq_sha256_hex(t->sha256, hex);
            json_object *e = json_object_new_object();
            json_object_object_add(e, "name", json_object_new_string(t->name));
            json_object_object_add(e, "scheme", json_object_new_string(scheme_name(t->scheme, sb, sizeof sb)));
            json_object_object_add(e, "scheme_id", json_object_new_int64(t->scheme));
            json_object_object_add(e, "role", json_object_new_string(dsq_role_name(t->role)));
            json_object_object_add(e, "src_dtype", json_object_new_string(t->src_dtype));
            json_object_object_add(e, "shape", json_shape(t->ndim, t->shape));
            json_object_object_add(e, "group_size", json_object_new_int64(t->group_size));
            json_object_object_add(e, "pack_version", json_object_new_int64(t->pack_version));
            json_object_object_add(e, "raw_bytes", json_object_new_int64((int64_t)t->raw_size));
            json_object_object_add(e, "stored_bytes", json_object_new_int64((int64_t)t->stored_size));
            json_object_object_add(e, "compression",
                                   json_object_new_string(t->compression == DSQ_CTR_COMP_ZSTD ? "zstd" : "none"));
            json_object_object_add(e, "offset", json_object_new_int64((int64_t)t->offset));
            json_object_object_add(e, "sha256", json_object_new_string(hex));
            if (tt.ns > 1) {
                const char *sp = dsq_ctr_set_shard_path(set, k), *b = strrchr(sp, '/');
                json_object_object_add(e, "shard", json_object_new_string(b ? b + 1 : sp));
            }
            json_object_array_add(tensors, e);
        }
    json_object *tot = json_object_new_object();
    json_object_object_add(tot, "count", json_object_new_int64((int64_t)tt.n));
    json_object_object_add(tot, "raw_bytes", json_object_new_int64((int64_t)tt.raw));
    json_object_object_add(tot, "stored_bytes", json_object_new_int64((int64_t)tt.stored));
    json_object_object_add(root, "total", tot);
    if (recipe) json_object_object_add(root, "recipe", json_object_get(recipe));
    json_object *keys = json_object_new_array();
    if (meta && json_object_is_type(meta, json_type_object)) {
        json_object_object_foreach(meta, k, v)
        {
            (void)v;
            json_object_array_add(keys, json_object_new_string(k));
        }
    }
    json_object_object_add(root, "metadata_keys", keys);
    json_object_put(meta);
    return root;
}

void dsq_inspect_dsq_text(FILE *f, const dsq_ctr_set *set, const char *path, int level)
{
    dsq_totals tt;
    dsq_set_totals(set, &tt);
    json_object *recipe, *meta = dsq_set_meta(set, &recipe);
    size_t namew = 4;
    for (size_t k = 0; k < tt.ns; k++)
        for (size_t i = 0; i < dsq_ctr_count(dsq_ctr_set_shard(set, k)); i++) {
            size_t l = strlen(dsq_ctr_get(dsq_ctr_set_shard(set, k), i)->name);
            if (l > namew) namew = l;
        }
    if (namew > 64) namew = 64;
    if (level >= 2) {
        if (tt.ns > 1)
            fprintf(f, "%s: dsq v%u, %zu shards, %zu tensors, %llu bytes\n", path, DSQ_CTR_VERSION, tt.ns, tt.n,
                    (unsigned long long)tt.fsize);
        else
            fprintf(f, "%s: dsq v%u, %zu tensors, %llu bytes\n", path, DSQ_CTR_VERSION, tt.n,
                    (unsigned long long)tt.fsize);
        if (recipe)
            fprintf(f, "recipe: %s\n",
                    json_object_to_json_string_ext(recipe, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
        fprintf(f, "%-*s  %-14s %-22s %14s %14s\n", (int)namew, "name", "scheme", "shape", "raw", "stored");
        for (size_t k = 0; k < tt.ns; k++)
            for (size_t i = 0; i < dsq_ctr_count(dsq_ctr_set_shard(set, k)); i++) {
                const dsq_ctr_tensor_info *t = dsq_ctr_get(dsq_ctr_set_shard(set, k), i);
                char sb[32], shape[256];
                fmt_shape(shape, sizeof shape, t->ndim, t->shape);
                fprintf(f, "%-*s  %-14s %-22s %14llu %14llu%s\n", (int)namew, t->name,
                        scheme_name(t->scheme, sb, sizeof sb), shape, (unsigned long long)t->raw_size,
                        (unsigned long long)t->stored_size, t->compression == DSQ_CTR_COMP_ZSTD ? " zstd" : "");
                if (level >= 3) {
                    char hex[65];
                    dsq_sha256_hex(t->sha256, hex);
                    fprintf(f, "    role %s, src %s, group %u, pack v%u, offset %llu, sha256 %s\n",
                            dsq_role_name(t->role), t->src_dtype[0] ? t->src_dtype : "-", t->group_size,
                            t->pack_version, (unsigned long long)t->offset, hex);
                }
            }
    }
    if (level >= 1) {
        char rb[32], sb[32];
        fmt_bytes(rb, sizeof rb, tt.raw);
        fmt_bytes(sb, sizeof sb, tt.stored);
        fprintf(f, "total: %zu tensors, raw %llu bytes (%s), stored %llu bytes (%s)", tt.n,
                (unsigned long long)tt.raw, rb, (unsigned long long)tt.stored, sb);
        if (tt.raw) fprintf(f, ", %.1f%%", 100.0 * (double)tt.stored / (double)tt.raw);
        fprintf(f, "\n");
        if (level >= 3 && meta && json_object_is_type(meta, json_type_object)) {
            fprintf(f, "metadata keys:");
            json_object_object_foreach(meta, k, v)
            {
                (void)v;
                fprintf(f, " %s", k);
            }
            fprintf(f, "\n");
        }
    }
    json_object_put(meta);
}

int dsq_inspect_dsq_verify(const dsq_ctr_set *set, const dsq_ctr_verify_opts *vo, dsq_inspect_verify *v,
                           dsq_diag *d)
{
    const size_t ns = dsq_ctr_set_shards(set);
    int rc = DSQ_OK;
    v->bad_index = SIZE_MAX;
    v->bad_shard = 0;
    double t0 = now_s();
    for (size_t k = 0; k < ns && rc == DSQ_OK; k++) {
        v->bad_shard = k;
        rc = dsq_ctr_verify_ex(dsq_ctr_set_shard(set, k), vo, &v->bad_index, d);
    }
    v->seconds = now_s() - t0;
    return v->status = rc;
}

json_object *dsq_inspect_dsq_verify_json(const dsq_ctr_set *set, const dsq_inspect_verify *v)
{
    json_object *j = json_object_new_object();
    json_object_object_add(j, "ok", json_object_new_boolean(v->status == DSQ_OK));
    json_object_object_add(j, "seconds", json_object_new_double(v->seconds));
    if (v->status < 0 && v->bad_index != SIZE_MAX) {
        json_object_object_add(j, "bad_index", json_object_new_int64((int64_t)v->bad_index));
        json_object_object_add(j, "bad_tensor",
                               json_object_new_string(dsq_ctr_get(dsq_ctr_set_shard(set, v->bad_shard), v->bad_index)->name));
    }
    return j;
}

void dsq_inspect_dsq_verify_text(FILE *f, const dsq_ctr_set *set, const dsq_inspect_verify *v, int level)
{
    if (v->status != DSQ_OK || level < 1) return;
    dsq_totals tt;
    dsq_set_totals(set, &tt);
    fprintf(f, "verify: ok, %zu tensors, %llu stored bytes in %.2f s\n", tt.n, (unsigned long long)tt.stored,
            v->seconds);
}

/* ---- safetensors ---- */

struct dsq_inspect_st {
    dsq_st_model *m;
    char *path;
    int verify, has_sums;
    size_t nsums;
    /* an export directory (ds-quant --format / ds-export, or a peer's) */
    const char *format; /* NULL: not an export directory */
    json_object *desc;  /* ascend quant_model_description.json */
    json_object *cfg;
};

/* A JSON file's object, or NULL; special files are refused unopened. */
static json_object *read_json(const char *path)
{
    char *txt = NULL;
    size_t len = 0;
    if (dsq_read_file(path, (size_t)64 << 20, &txt, &len, NULL) != DSQ_OK) return NULL;
    json_object *o = json_tokener_parse(txt);
    free(txt);
    return o;
}

/* An export directory's format from its files. */
static void export_probe(const char *path, dsq_inspect_st *x)
{
    if (!dsq_path_is_dir(path)) return;
    char *p = dsq_path_join(path, "quant_model_description.json");
    if (p && dsq_path_exists(p)) {
        x->desc = read_json(p);
        if (x->desc && json_object_is_type(x->desc, json_type_object)) x->format = "ascend";
    }
    free(p);
    p = dsq_path_join(path, "config.json");
    json_object *q, *m;
    if (!x->format && p && dsq_path_exists(p) && (x->cfg = read_json(p)) &&
        json_object_is_type(x->cfg, json_type_object) &&
        json_object_object_get_ex(x->cfg, "quantization_config", &q) && json_object_is_type(q, json_type_object) &&
        json_object_object_get_ex(q, "quant_method", &m) && json_object_is_type(m, json_type_string)) {
        const char *qm = json_object_get_string(m);
        if (!strcmp(qm, "awq")) x->format = "awq";
        else if (!strcmp(qm, "compressed-tensors")) x->format = "compressed-tensors";
    }
    free(p);
}

/* Type of a tensor in an export: the description entry (ascend), else
 * quantized (integer tensors and their scales / zero points) or FLOAT. */
static const char *export_type(const dsq_inspect_st *x, const dsq_st_tensor *t)
{
    json_object *v;
    if (x->desc) {
        if (json_object_object_get_ex(x->desc, t->name, &v) && json_object_is_type(v, json_type_string))
            return json_object_get_string(v);
        return "(no entry)";
    }
    static const char *const qs[] = { ".qweight", ".qzeros", ".scales", ".weight_packed", ".weight_scale",
                                      ".weight_zero_point", ".weight_shape", ".weight_g_idx", ".input_scale" };
    size_t n = strlen(t->name);
    for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
        size_t l = strlen(qs[i]);
        if (n > l && !strcmp(t->name + n - l, qs[i])) return x->format;
    }
    if (t->dtype == DSQ_DTYPE_I8) return x->format;
    return "FLOAT";
}

void dsq_inspect_st_close(dsq_inspect_st *s)
{
    if (!s) return;
    json_object_put(s->desc);
    json_object_put(s->cfg);
    dsq_st_close(s->m);
    free(s->path);
    free(s);
}

int dsq_inspect_st_open(dsq_inspect_st **out, const char *path, int verify, dsq_diag *d)
{
    *out = NULL;
    dsq_inspect_st *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
    }
    s->verify = verify;
    unsigned flags = verify ? 0 : (DSQ_ST_OPEN_FP8_UNSCALED | DSQ_ST_OPEN_NO_SCALE_SCAN);
    int rc = dsq_st_open_ex(&s->m, path, flags, d);
    if (rc < 0) {
        s->m = NULL;
        dsq_inspect_st_close(s);
        return rc;
    }
    export_probe(path, s);
    if (s->format || dsq_path_is_dir(path)) {
        char *sp = dsq_path_join(path, DSQ_SUMS_NAME);
        s->has_sums = sp && dsq_path_exists(sp);
        free(sp);
    }
    if (verify && s->has_sums && (rc = dsq_sums_verify(path, &s->nsums, d)) < 0) {
        dsq_inspect_st_close(s);
        return rc;
    }
    *out = s;
    return DSQ_OK;
}

json_object *dsq_inspect_st_json(const dsq_inspect_st *s)
{
    const dsq_st_model *m = s->m;
    size_t n = dsq_st_count(m);
    int shards = dsq_st_shard_count(m);
    json_object *root = json_object_new_object();
    json_object_object_add(root, "path", json_object_new_string(s->path));
    json_object_object_add(root, "format", json_object_new_string("safetensors"));
    if (s->format) json_object_object_add(root, "export_format", json_object_new_string(s->format));
    json_object *sh = json_object_new_array();
    for (int i = 0; i < shards; i++) json_object_array_add(sh, json_object_new_string(dsq_st_shard_path(m, i)));
    json_object_object_add(root, "shards", sh);
    json_object *md = json_object_new_object();
    for (size_t i = 0; i < dsq_st_meta_count(m); i++) {
        const char *k, *v;
        if (dsq_st_meta_at(m, i, &k, &v) == 0) json_object_object_add(md, k, json_object_new_string(v));
    }
    json_object_object_add(root, "metadata", md);
    json_object *tensors = json_object_new_array();
    json_object_object_add(root, "tensors", tensors);
    for (size_t i = 0; i < n; i++) {
        const dsq_st_tensor *t = dsq_st_get(m, i);
        int64_t shape[DSQ_ST_MAX_DIMS];
        for (int k = 0; k < DSQ_ST_MAX_DIMS; k++) shape[k] = t->shape[k];
        json_object *e = json_object_new_object();
        json_object_object_add(e, "name", json_object_new_string(t->name));
        json_object_object_add(e, "dtype", json_object_new_string(dsq_dtype_name(t->dtype)));
        json_object_object_add(e, "shape", json_shape((uint32_t)t->ndim, shape));
        json_object_object_add(e, "bytes", json_object_new_int64((int64_t)t->nbytes));
        json_object_object_add(e, "shard", json_object_new_int(t->shard));
        json_object_object_add(e, "offset", json_object_new_int64((int64_t)t->file_offset));
        if (s->format) json_object_object_add(e, "type", json_object_new_string(export_type(s, t)));
        json_object_array_add(tensors, e);
    }
    json_object *tot = json_object_new_object();
    json_object_object_add(tot, "count", json_object_new_int64((int64_t)n));
    json_object_object_add(tot, "bytes", json_object_new_int64((int64_t)dsq_st_total_bytes(m)));
    json_object_object_add(root, "total", tot);
    if (s->verify) {
        json_object *v = json_object_new_object();
        json_object_object_add(v, "ok", json_object_new_boolean(1));
        if (s->has_sums) json_object_object_add(v, "manifest_files", json_object_new_int64((int64_t)s->nsums));
        json_object_object_add(root, "verify", v);
    }
    return root;
}

void dsq_inspect_st_text(FILE *f, const dsq_inspect_st *s, int level)
{
    const dsq_st_model *m = s->m;
    size_t n = dsq_st_count(m), namew = 4;
    int shards = dsq_st_shard_count(m);
    uint64_t total = dsq_st_total_bytes(m);
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(dsq_st_get(m, i)->name);
        if (l > namew) namew = l;
    }
    if (namew > 64) namew = 64;
    if (level >= 2) {
        fprintf(f, "%s: safetensors, %d shard%s, %zu tensors", s->path, shards, shards == 1 ? "" : "s", n);
        if (s->format) fprintf(f, ", %s export", s->format);
        dsq_model_config mc;
        char sum[400];
        if (dsq_model_config_load(&mc, dsq_st_dir(m), NULL) == DSQ_OK) {
            dsq_model_config_summary(&mc, sum, sizeof sum);
            fprintf(f, "\nmodel: %s", sum);
            dsq_model_config_release(&mc);
        }
        fprintf(f, "\n%-*s  %-8s %-22s %14s%s\n", (int)namew, "name", "dtype", "shape", "bytes",
                s->format ? "  type" : "");
        for (size_t i = 0; i < n; i++) {
            const dsq_st_tensor *t = dsq_st_get(m, i);
            int64_t shape[DSQ_ST_MAX_DIMS];
            char sh[256];
            for (int k = 0; k < DSQ_ST_MAX_DIMS; k++) shape[k] = t->shape[k];
            fmt_shape(sh, sizeof sh, (uint32_t)t->ndim, shape);
            fprintf(f, "%-*s  %-8s %-22s %14llu", (int)namew, t->name, dsq_dtype_name(t->dtype), sh,
                    (unsigned long long)t->nbytes);
            if (s->format) fprintf(f, "  %s", export_type(s, t));
            if (level >= 3) fprintf(f, "  shard %d offset %llu", t->shard, (unsigned long long)t->file_offset);
            fprintf(f, "\n");
        }
    }
    if (level < 1) return;
    char b[32];
    fmt_bytes(b, sizeof b, total);
    fprintf(f, "total: %zu tensors, %llu bytes (%s)\n", n, (unsigned long long)total, b);
    if (level >= 3) {
        for (size_t i = 0; i < dsq_st_meta_count(m); i++) {
            const char *k, *v;
            if (dsq_st_meta_at(m, i, &k, &v) == 0) fprintf(f, "metadata: %s = %s\n", k, v);
        }
    }
    if (s->verify) fprintf(f, "verify: ok (structure, offsets, FP8 scales)\n");
    if (s->verify && s->has_sums) fprintf(f, "verify: ok, %zu files match " DSQ_SUMS_NAME "\n", s->nsums);
}
