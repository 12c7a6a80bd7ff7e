/* ds_inspect.c - ds-inspect: list (and with --verify, check) a .dsq file,
 * a .safetensors file, or a safetensors model directory.
 *
 *   ds-inspect [--verify] [--json] [-q|-v] [-T N] [-h] [-V] [--] PATH
 *
 * Exit: 0 ok, 1 bad input (unreadable, malformed, checksum mismatch),
 * 2 usage. Text goes to stdout; --json prints one object on stdout instead
 * (also on failure, with an "error" member). */
#include "cli.h"
#include "cli_opt.h"
#include "container.h"
#include "container_set.h"
#include "dsq_file.h"
#include "dsq_version.h"
#include "model_config.h"
#include "safetensors.h"
#include "scheme.h"
#include "sha256sums.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct inspect_opts {
    int verify;
    const char *path;
} inspect_opts;

enum { O_VERIFY = DSQ_OPT_FIRST };

static const dsq_opt opts[] = {
    { .type = DSQ_OPT_TEXT, .help =
"Usage: ds-inspect [OPTIONS] PATH\n"
"\n"
"List the tensors of a .dsq file, a .safetensors file, a\n"
"*.safetensors.index.json or a model directory: name, dtype or scheme,\n"
"shape, raw and stored bytes, totals, and for .dsq the recipe.\n"
"\n"
"Options:\n" },
    { O_VERIFY, DSQ_OPT_FLAG, "verify", .help = "check every checksum (.dsq: SHA-256 of every payload and\n"
                                               "zero padding; safetensors: full validation including FP8\n"
                                               "scale finiteness)" },
    { DSQ_OPT_JSON, DSQ_OPT_FLAG, "json", .help = "print one JSON object on stdout" },
    { DSQ_OPT_QUIET, DSQ_OPT_FLAG, "quiet", 'q', .left = "-q, -v", .help = "less / more output (repeatable)" },
    { DSQ_OPT_VERBOSE, DSQ_OPT_FLAG, "verbose", 'v' },
    { DSQ_OPT_THREADS, DSQ_OPT_INT, "threads", 'T', "N", 0, DSQ_OPT_THREADS_MAX, "0..4096 (0 = all cores)", .left = "-T N",
      .help = "threads for --verify (0 = all cores, default)" },
    { DSQ_OPT_NO_PROGRESS, DSQ_OPT_FLAG, "no-progress" },
    { DSQ_OPT_HELP, DSQ_OPT_FLAG, "help", 'h', .help = "show this help" },
    { DSQ_OPT_VERSION, DSQ_OPT_FLAG, "version", 'V' },
    { .type = DSQ_OPT_TEXT, .help =
"  -V, --version\n"
"\n"
"Exit status: 0 ok, 1 bad or unreadable input, 2 usage error.\n" },
};
static const dsq_opt_spec spec = { opts, sizeof opts / sizeof opts[0], 12, 0, NULL };

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

static json_object *json_error(int status, const dsq_diag *d)
{
    json_object *e = json_object_new_object();
    json_object_object_add(e, "status", json_object_new_string(dsq_status_name(status)));
    json_object_object_add(e, "code", json_object_new_int(status));
    char msg[2048];
    if (d && d->status < 0) dsq_diag_format(d, msg, sizeof msg);
    else snprintf(msg, sizeof msg, "%s", dsq_strerror(status));
    json_object_object_add(e, "message", json_object_new_string(msg));
    if (d && d->tensor[0]) json_object_object_add(e, "tensor", json_object_new_string(d->tensor));
    if (d && d->offset >= 0) json_object_object_add(e, "offset", json_object_new_int64(d->offset));
    return e;
}

/* Fail: --json gets an object on stdout, text mode a message on stderr. */
static int fail(const dsq_cli *c, json_object *root, int status, const dsq_diag *d)
{
    if (c->json) {
        if (!root) root = json_object_new_object();
        json_object_object_add(root, "ok", json_object_new_boolean(0));
        json_object_object_add(root, "error", json_error(status, d));
        dsq_cli_json_print(root, 1);
        dsq_cli_fail(c, status, d);
        return DSQ_EXIT_ERROR;
    }
    json_object_put(root);
    return dsq_cli_fail(c, status, d);
}

/* ---- .dsq ---- */

static void verify_progress(void *ctx, uint64_t done, uint64_t total)
{
    dsq_progress *p = ctx;
    (void)total;
    dsq_progress_update(p, done);
}

static int inspect_dsq(const dsq_cli *c, const inspect_opts *o)
{
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_ctr_set *set;
    int rc = dsq_ctr_set_open(&set, o->path, &d);
    if (rc < 0) return fail(c, NULL, rc, &d);
    /* A sharded .dsq (index + shards) is listed and verified shard by shard. */
    const size_t ns = dsq_ctr_set_shards(set);
    size_t n = 0;
    uint64_t raw = 0, stored = 0, fsize = 0;
    for (size_t k = 0; k < ns; k++) {
        uint64_t a, b;
        dsq_ctr_totals(dsq_ctr_set_shard(set, k), &a, &b);
        raw += a;
        stored += b;
        n += dsq_ctr_count(dsq_ctr_set_shard(set, k));
        fsize += dsq_ctr_file_size(dsq_ctr_set_shard(set, k));
    }
    dsq_ctr *r = dsq_ctr_set_shard(set, 0);

    /* The recipe (if any) from the metadata JSON (every shard carries it). */
    json_object *meta = json_tokener_parse(dsq_ctr_metadata(r, NULL));
    json_object *recipe = NULL;
    if (meta) json_object_object_get_ex(meta, "recipe", &recipe);

    json_object *root = NULL, *tensors = NULL;
    size_t namew = 4;
    if (c->json) {
        root = json_object_new_object();
        json_object_object_add(root, "path", json_object_new_string(o->path));
        json_object_object_add(root, "format", json_object_new_string("dsq"));
        json_object_object_add(root, "version", json_object_new_int(DSQ_CTR_VERSION));
        json_object_object_add(root, "file_size", json_object_new_int64((int64_t)fsize));
        if (dsq_ctr_set_index_path(set)) {
            json_object *sh = json_object_new_array();
            for (size_t k = 0; k < ns; k++)
                json_object_array_add(sh, json_object_new_string(dsq_ctr_set_shard_path(set, k)));
            json_object_object_add(root, "index", json_object_new_string(dsq_ctr_set_index_path(set)));
            json_object_object_add(root, "shards", sh);
        }
        tensors = json_object_new_array();
        json_object_object_add(root, "tensors", tensors);
    } else {
        for (size_t k = 0; k < ns; k++)
            for (size_t i = 0; i < dsq_ctr_count(dsq_ctr_set_shard(set, k)); i++) {
                size_t l = strlen(dsq_ctr_get(dsq_ctr_set_shard(set, k), i)->name);
                if (l > namew) namew = l;
            }
        if (namew > 64) namew = 64;
        if (c->level >= 2) {
            if (ns > 1)
                printf("%s: dsq v%u, %zu shards, %zu tensors, %llu bytes\n", o->path, DSQ_CTR_VERSION, ns, n,
                       (unsigned long long)fsize);
            else
                printf("%s: dsq v%u, %zu tensors, %llu bytes\n", o->path, DSQ_CTR_VERSION, n,
                       (unsigned long long)fsize);
            if (recipe)
                printf("recipe: %s\n", json_object_to_json_string_ext(recipe, JSON_C_TO_STRING_PLAIN
                                                                   | JSON_C_TO_STRING_NOSLASHESCAPE));
            printf("%-*s  %-14s %-22s %14s %14s\n", (int)namew, "name", "scheme", "shape",
                   "raw", "stored");
        }
    }
    for (size_t k = 0; k < ns; k++)
    for (size_t i = 0; i < dsq_ctr_count(dsq_ctr_set_shard(set, k)); i++) {
        const dsq_ctr_tensor_info *t = dsq_ctr_get(dsq_ctr_set_shard(set, k), i);
        char sb[32], shape[256];
        const char *sn = scheme_name(t->scheme, sb, sizeof sb);
        fmt_shape(shape, sizeof shape, t->ndim, t->shape);
        if (c->json) {
            json_object *e = json_object_new_object();
            char hex[65];
            dsq_sha256_hex(t->sha256, hex);
            json_object_object_add(e, "name", json_object_new_string(t->name));
            json_object_object_add(e, "scheme", json_object_new_string(sn));
            json_object_object_add(e, "scheme_id", json_object_new_int64(t->scheme));
            json_object_object_add(e, "role", json_object_new_string(dsq_role_name(t->role)));
            json_object_object_add(e, "src_dtype", json_object_new_string(t->src_dtype));
            json_object_object_add(e, "shape", json_shape(t->ndim, t->shape));
            json_object_object_add(e, "group_size", json_object_new_int64(t->group_size));
            json_object_object_add(e, "pack_version", json_object_new_int64(t->pack_version));
            json_object_object_add(e, "raw_bytes", json_object_new_int64((int64_t)t->raw_size));
            json_object_object_add(e, "stored_bytes", json_object_new_int64((int64_t)t->stored_size));
            json_object_object_add(e, "compression", json_object_new_string(
                t->compression == DSQ_CTR_COMP_ZSTD ? "zstd" : "none"));
            json_object_object_add(e, "offset", json_object_new_int64((int64_t)t->offset));
            json_object_object_add(e, "sha256", json_object_new_string(hex));
            if (ns > 1) {
                const char *sp = dsq_ctr_set_shard_path(set, k), *b = strrchr(sp, '/');
                json_object_object_add(e, "shard", json_object_new_string(b ? b + 1 : sp));
            }
            json_object_array_add(tensors, e);
        } else if (c->level >= 2) {
            printf("%-*s  %-14s %-22s %14llu %14llu%s\n", (int)namew, t->name, sn, shape,
                   (unsigned long long)t->raw_size, (unsigned long long)t->stored_size,
                   t->compression == DSQ_CTR_COMP_ZSTD ? " zstd" : "");
            if (c->level >= 3) {
                char hex[65];
                dsq_sha256_hex(t->sha256, hex);
                printf("    role %s, src %s, group %u, pack v%u, offset %llu, sha256 %s\n",
                       dsq_role_name(t->role), t->src_dtype[0] ? t->src_dtype : "-", t->group_size,
                       t->pack_version, (unsigned long long)t->offset, hex);
            }
        }
    }
    char rb[32], sb2[32];
    fmt_bytes(rb, sizeof rb, raw);
    fmt_bytes(sb2, sizeof sb2, stored);
    if (c->json) {
        json_object *tot = json_object_new_object();
        json_object_object_add(tot, "count", json_object_new_int64((int64_t)n));
        json_object_object_add(tot, "raw_bytes", json_object_new_int64((int64_t)raw));
        json_object_object_add(tot, "stored_bytes", json_object_new_int64((int64_t)stored));
        json_object_object_add(root, "total", tot);
        if (recipe) json_object_object_add(root, "recipe", json_object_get(recipe));
        json_object *keys = json_object_new_array();
        if (meta && json_object_is_type(meta, json_type_object)) {
            json_object_object_foreach(meta, k, v) {
                (void)v;
                json_object_array_add(keys, json_object_new_string(k));
            }
        }
        json_object_object_add(root, "metadata_keys", keys);
    } else if (c->level >= 1) {
        printf("total: %zu tensors, raw %llu bytes (%s), stored %llu bytes (%s)", n,
               (unsigned long long)raw, rb, (unsigned long long)stored, sb2);
        if (raw) printf(", %.1f%%", 100.0 * (double)stored / (double)raw);
        printf("\n");
        if (c->level >= 3 && meta && json_object_is_type(meta, json_type_object)) {
            printf("metadata keys:");
            json_object_object_foreach(meta, k, v) { (void)v; printf(" %s", k); }
            printf("\n");
        }
    }
    json_object_put(meta);

    if (o->verify) {
        dsq_progress prog;
        dsq_progress_begin(&prog, c, "verify", "B", stored);
        dsq_ctr_verify_opts vo = { .nthreads = c->threads, .cancel = &dsq_cli_interrupted,
                                   .progress = verify_progress, .progress_ctx = &prog };
        size_t bad = SIZE_MAX;
        dsq_diag_clear(&d);
        double t0 = dsq_now();
        for (size_t k = 0; k < ns && rc == DSQ_OK; k++) {
            r = dsq_ctr_set_shard(set, k);
            rc = dsq_ctr_verify_ex(r, &vo, &bad, &d);
        }
        double el = dsq_now() - t0;
        dsq_progress_end(&prog);
        if (c->json) {
            json_object *v = json_object_new_object();
            json_object_object_add(v, "ok", json_object_new_boolean(rc == DSQ_OK));
            json_object_object_add(v, "seconds", json_object_new_double(el));
            if (rc < 0 && bad != SIZE_MAX) {
                json_object_object_add(v, "bad_index", json_object_new_int64((int64_t)bad));
                json_object_object_add(v, "bad_tensor", json_object_new_string(dsq_ctr_get(r, bad)->name));
            }
            json_object_object_add(root, "verify", v);
        } else if (rc == DSQ_OK && c->level >= 1) {
            printf("verify: ok, %zu tensors, %llu stored bytes in %.2f s\n", n,
                   (unsigned long long)stored, el);
        }
    }
    dsq_ctr_set_close(set);
    if (rc < 0) return fail(c, root, rc, &d);
    if (c->json) {
        json_object_object_add(root, "ok", json_object_new_boolean(1));
        dsq_cli_json_print(root, 1);
    }
    return DSQ_EXIT_OK;
}

/* ---- safetensors ---- */

/* An export directory (ds-quant --format / ds-export, or a peer's): its
 * format from its files, and per-tensor types (ascend's description). */
typedef struct export_info {
    const char *format;     /* NULL: not an export directory */
    json_object *desc;      /* ascend quant_model_description.json */
    json_object *cfg;
} export_info;

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

static void export_probe(const char *path, export_info *x)
{
    memset(x, 0, sizeof *x);
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
static const char *export_type(const export_info *x, const dsq_st_tensor *t)
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

static int inspect_st(const dsq_cli *c, const inspect_opts *o)
{
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_st_model *m;
    /* Listing is lenient (FP8 without companions is shown as is, scale
     * values are not scanned); --verify applies every rule. */
    unsigned flags = o->verify ? 0 : (DSQ_ST_OPEN_FP8_UNSCALED | DSQ_ST_OPEN_NO_SCALE_SCAN);
    int rc = dsq_st_open_ex(&m, o->path, flags, &d);
    if (rc < 0) return fail(c, NULL, rc, &d);
    export_info xi;
    export_probe(o->path, &xi);
    size_t nsums = 0;
    int has_sums = 0;
    if (xi.format || dsq_path_is_dir(o->path)) {
        char *sp = dsq_path_join(o->path, DSQ_SUMS_NAME);
        has_sums = sp && dsq_path_exists(sp);
        free(sp);
    }
    if (o->verify && has_sums) {
        rc = dsq_sums_verify(o->path, &nsums, &d);
        if (rc < 0) {
            json_object_put(xi.desc);
            json_object_put(xi.cfg);
            dsq_st_close(m);
            return fail(c, NULL, rc, &d);
        }
    }
    size_t n = dsq_st_count(m);
    int shards = dsq_st_shard_count(m);
    uint64_t total = dsq_st_total_bytes(m);
    json_object *root = NULL, *tensors = NULL;
    size_t namew = 4;
    if (c->json) {
        root = json_object_new_object();
        json_object_object_add(root, "path", json_object_new_string(o->path));
        json_object_object_add(root, "format", json_object_new_string("safetensors"));
        if (xi.format) json_object_object_add(root, "export_format", json_object_new_string(xi.format));
        json_object *sh = json_object_new_array();
        for (int i = 0; i < shards; i++)
            json_object_array_add(sh, json_object_new_string(dsq_st_shard_path(m, i)));
        json_object_object_add(root, "shards", sh);
        json_object *md = json_object_new_object();
        for (size_t i = 0; i < dsq_st_meta_count(m); i++) {
            const char *k, *v;
            if (dsq_st_meta_at(m, i, &k, &v) == 0)
                json_object_object_add(md, k, json_object_new_string(v));
        }
        json_object_object_add(root, "metadata", md);
        tensors = json_object_new_array();
        json_object_object_add(root, "tensors", tensors);
    } else {
        for (size_t i = 0; i < n; i++) {
            size_t l = strlen(dsq_st_get(m, i)->name);
            if (l > namew) namew = l;
        }
        if (namew > 64) namew = 64;
        if (c->level >= 2) {
            printf("%s: safetensors, %d shard%s, %zu tensors", o->path, shards, shards == 1 ? "" : "s", n);
            if (xi.format) printf(", %s export", xi.format);
            dsq_model_config mc;
            char sum[400];
            if (dsq_model_config_load(&mc, dsq_st_dir(m), NULL) == DSQ_OK) {
                dsq_model_config_summary(&mc, sum, sizeof sum);
                printf("\nmodel: %s", sum);
                dsq_model_config_release(&mc);
            }
            printf("\n%-*s  %-8s %-22s %14s%s\n", (int)namew, "name", "dtype", "shape", "bytes",
                   xi.format ? "  type" : "");
        }
    }
    for (size_t i = 0; i < n; i++) {
        const dsq_st_tensor *t = dsq_st_get(m, i);
        int64_t shape[DSQ_ST_MAX_DIMS];
        for (int k = 0; k < DSQ_ST_MAX_DIMS; k++) shape[k] = t->shape[k];
        if (c->json) {
            json_object *e = json_object_new_object();
            json_object_object_add(e, "name", json_object_new_string(t->name));
            json_object_object_add(e, "dtype", json_object_new_string(dsq_dtype_name(t->dtype)));
            json_object_object_add(e, "shape", json_shape((uint32_t)t->ndim, shape));
            json_object_object_add(e, "bytes", json_object_new_int64((int64_t)t->nbytes));
            json_object_object_add(e, "shard", json_object_new_int(t->shard));
            json_object_object_add(e, "offset", json_object_new_int64((int64_t)t->file_offset));
            if (xi.format) json_object_object_add(e, "type", json_object_new_string(export_type(&xi, t)));
            json_object_array_add(tensors, e);
        } else if (c->level >= 2) {
            char sh[256];
            fmt_shape(sh, sizeof sh, (uint32_t)t->ndim, shape);
            printf("%-*s  %-8s %-22s %14llu", (int)namew, t->name, dsq_dtype_name(t->dtype), sh,
                   (unsigned long long)t->nbytes);
            if (xi.format) printf("  %s", export_type(&xi, t));
            if (c->level >= 3)
                printf("  shard %d offset %llu", t->shard, (unsigned long long)t->file_offset);
            printf("\n");
        }
    }
    if (c->json) {
        json_object *tot = json_object_new_object();
        json_object_object_add(tot, "count", json_object_new_int64((int64_t)n));
        json_object_object_add(tot, "bytes", json_object_new_int64((int64_t)total));
        json_object_object_add(root, "total", tot);
        if (o->verify) {
            json_object *v = json_object_new_object();
            json_object_object_add(v, "ok", json_object_new_boolean(1));
            if (has_sums) json_object_object_add(v, "manifest_files", json_object_new_int64((int64_t)nsums));
            json_object_object_add(root, "verify", v);
        }
        json_object_object_add(root, "ok", json_object_new_boolean(1));
        dsq_cli_json_print(root, 1);
    } else if (c->level >= 1) {
        char b[32];
        fmt_bytes(b, sizeof b, total);
        printf("total: %zu tensors, %llu bytes (%s)\n", n, (unsigned long long)total, b);
        if (c->level >= 3) {
            for (size_t i = 0; i < dsq_st_meta_count(m); i++) {
                const char *k, *v;
                if (dsq_st_meta_at(m, i, &k, &v) == 0) printf("metadata: %s = %s\n", k, v);
            }
        }
        if (o->verify) printf("verify: ok (structure, offsets, FP8 scales)\n");
        if (o->verify && has_sums) printf("verify: ok, %zu files match " DSQ_SUMS_NAME "\n", nsums);
    }
    json_object_put(xi.desc);
    json_object_put(xi.cfg);
    dsq_st_close(m);
    return DSQ_EXIT_OK;
}

/* ---- main ---- */

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

int main(int argc, char **argv)
{
    dsq_cli c;
    dsq_cli_init(&c, "ds-inspect");
    inspect_opts o = { 0 };
    dsq_args a;
    int rc = dsq_opt_parse(&c, &spec, argc, argv, &a);
    if (rc >= 0) return rc;
    dsq_args_release(&a);
    if (a.npos > 1) return dsq_cli_usage_error(&c, "only one PATH is accepted");
    if (a.npos < 1) return dsq_cli_usage_error(&c, "missing PATH");
    o.path = a.pos[0];
    o.verify = dsq_opt_given(&a, O_VERIFY);

    if (!dsq_path_exists(o.path)) {
        dsq_diag d;
        dsq_diag_clear(&d);
        dsq_fail(&d, DSQ_ERR_NOT_FOUND, o.path, NULL, -1, "no such file or directory");
        return fail(&c, NULL, DSQ_ERR_NOT_FOUND, &d);
    }
    if (dsq_ctr_file_is_dsq(o.path) || ends_with(o.path, ".dsq") || dsq_ctr_set_is_dsq(o.path)) rc = inspect_dsq(&c, &o);
    else rc = inspect_st(&c, &o);
    if (rc == DSQ_EXIT_OK && dsq_cli_interrupted) rc = DSQ_EXIT_ERROR;
    return rc;
}
