/* quarot.c - QuaRot offline rotation of a DeepSeek checkpoint (quarot.h). */
#include "quarot.h"

#include "dsq_file.h"
#include "dsq_mem.h"
#include "hadamard.h"
#include "safetensors.h"
#include "st_writer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void dsq_quarot_opts_init(dsq_quarot_opts *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 1234;
    o->out_dtype = DSQ_DTYPE_F32;
}

static void add_fold(dsq_quarot_tensor_plan *p, const char *norm, int64_t off)
{
    snprintf(p->fold_norm[p->nfold], sizeof p->fold_norm[0], "%s", norm);
    p->fold_off[p->nfold++] = off;
}

static void add_op(dsq_quarot_tensor_plan *p, int left, int rot, int64_t off, int64_t stride, int64_t count)
{
    p->op[p->nops].left = left;
    p->op[p->nops].rot = rot;
    p->op[p->nops].off = off;
    p->op[p->nops].stride = stride;
    p->op[p->nops].count = count;
    p->nops++;
}

/* Does name end with suffix? */
static int ends(const char *name, const char *suffix)
{
    size_t n = strlen(name), s = strlen(suffix);
    return n >= s && strcmp(name + n - s, suffix) == 0;
}

int dsq_quarot_plan(const dsq_model_config *cfg, const char *name, dsq_quarot_tensor_plan *p, dsq_diag *d)
{
    memset(p, 0, sizeof *p);
    if (!dsq_arch_is_deepseek(cfg->arch))
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, name, -1, "QuaRot is built for the DeepSeek MLA architectures, not %s",
                        dsq_arch_name(cfg->arch));
    if (cfg->tie_word_embeddings)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, name, -1, "QuaRot needs untied embeddings (lm_head takes the final norm)");
    const int64_t H = cfg->hidden_size;
    const int64_t heads = cfg->num_attention_heads;
    const int64_t nope = cfg->qk_nope_head_dim, v = cfg->v_head_dim;
    p->kind = DSQ_QP_ROTATE;
    if (!strcmp(name, "model.embed_tokens.weight")) {
        add_op(p, 0, DSQ_QR_R1, 0, 0, 1);
        return DSQ_OK;
    }
    if (!strcmp(name, "model.norm.weight")) { p->kind = DSQ_QP_ONES; return DSQ_OK; }
    if (!strcmp(name, "lm_head.weight")) {
        add_fold(p, "model.norm.weight", 0);
        add_op(p, 0, DSQ_QR_R1, 0, 0, 1);
        return DSQ_OK;
    }
    long long layer = -1;
    int used = 0;
    if (sscanf(name, "model.layers.%lld.%n", &layer, &used) != 1 || used == 0 || layer < 0)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, name, -1, "no QuaRot rule for this tensor");
    const char *rest = name + used;
    char pre[96];
    snprintf(pre, sizeof pre, "model.layers.%lld.", layer);
    char in_ln[160], post_ln[160], qa_ln[160], kva_ln[160];
    snprintf(in_ln, sizeof in_ln, "%sinput_layernorm.weight", pre);
    snprintf(post_ln, sizeof post_ln, "%spost_attention_layernorm.weight", pre);
    snprintf(qa_ln, sizeof qa_ln, "%sself_attn.q_a_layernorm.weight", pre);
    snprintf(kva_ln, sizeof kva_ln, "%sself_attn.kv_a_layernorm.weight", pre);
    const int mtp = layer >= cfg->num_hidden_layers;

    if (!strcmp(rest, "input_layernorm.weight") || !strcmp(rest, "post_attention_layernorm.weight") ||
        !strcmp(rest, "self_attn.q_a_layernorm.weight") || !strcmp(rest, "self_attn.kv_a_layernorm.weight")) {
        p->kind = DSQ_QP_ONES;
        return DSQ_OK;
    }
    if (!strcmp(rest, "self_attn.q_a_proj.weight")) {
        add_fold(p, in_ln, 0);
        add_op(p, 0, DSQ_QR_R1, 0, 0, 1);
        add_op(p, 1, DSQ_QR_RQ, 0, 0, 1);
        return DSQ_OK;
    }
    if (!strcmp(rest, "self_attn.q_b_proj.weight") || !strcmp(rest, "self_attn.indexer.wq_b.weight")) {
        add_fold(p, qa_ln, 0);
        add_op(p, 0, DSQ_QR_RQ, 0, 0, 1);
        return DSQ_OK;
    }
    if (!strcmp(rest, "self_attn.q_proj.weight") || !strcmp(rest, "self_attn.indexer.wk.weight") ||
        !strcmp(rest, "self_attn.indexer.weights_proj.weight")) {
        add_fold(p, in_ln, 0);
        add_op(p, 0, DSQ_QR_R1, 0, 0, 1);
        return DSQ_OK;
    }
    if (!strcmp(rest, "self_attn.indexer.k_norm.weight") || !strcmp(rest, "self_attn.indexer.k_norm.bias")) {
        p->kind = DSQ_QP_COPY;   /* the indexer's LayerNorm sees wk's unrotated output */
        return DSQ_OK;
    }
    if (!strcmp(rest, "self_attn.kv_a_proj_with_mqa.weight")) {
        add_fold(p, in_ln, 0);
        add_op(p, 0, DSQ_QR_R1, 0, 0, 1);
        add_op(p, 1, DSQ_QR_RKV, 0, 0, 1);       /* the latent rows; rope rows untouched */
        return DSQ_OK;
    }
    if (!strcmp(rest, "self_attn.kv_b_proj.weight")) {
        add_fold(p, kva_ln, 0);
        add_op(p, 0, DSQ_QR_RKV, 0, 0, 1);
        add_op(p, 1, DSQ_QR_RUV, nope, nope + v, heads);   /* each head's V rows */
        return DSQ_OK;
    }
    if (!strcmp(rest, "self_attn.o_proj.weight")) {
        add_op(p, 0, DSQ_QR_RUV, 0, v, heads);
        add_op(p, 1, DSQ_QR_R1, 0, 0, 1);
        return DSQ_OK;
    }
    if (!strcmp(rest, "mlp.gate.weight")) {
        add_fold(p, post_ln, 0);
        add_op(p, 0, DSQ_QR_R1, 0, 0, 1);
        return DSQ_OK;
    }
    if (!strcmp(rest, "mlp.gate.e_score_correction_bias")) { p->kind = DSQ_QP_COPY; return DSQ_OK; }
    if (!strncmp(rest, "mlp.", 4) && (ends(rest, ".gate_proj.weight") || ends(rest, ".up_proj.weight"))) {
        add_fold(p, post_ln, 0);
        add_op(p, 0, DSQ_QR_R1, 0, 0, 1);
        return DSQ_OK;
    }
    if (!strncmp(rest, "mlp.", 4) && ends(rest, ".down_proj.weight")) {
        add_op(p, 1, DSQ_QR_R1, 0, 0, 1);
        return DSQ_OK;
    }
    if (mtp) {
        char enorm[160], hnorm[160], shn[160];
        snprintf(enorm, sizeof enorm, "%senorm.weight", pre);
        snprintf(hnorm, sizeof hnorm, "%shnorm.weight", pre);
        snprintf(shn, sizeof shn, "%sshared_head.norm.weight", pre);
        if (!strcmp(rest, "enorm.weight") || !strcmp(rest, "hnorm.weight") || !strcmp(rest, "shared_head.norm.weight")) {
            p->kind = DSQ_QP_ONES;
            return DSQ_OK;
        }
        if (!strcmp(rest, "embed_tokens.weight")) {
            add_op(p, 0, DSQ_QR_R1, 0, 0, 1);
            return DSQ_OK;
        }
        if (!strcmp(rest, "eh_proj.weight")) {
            add_fold(p, enorm, 0);
            add_fold(p, hnorm, H);
            add_op(p, 0, DSQ_QR_R1, 0, H, 2);
            add_op(p, 1, DSQ_QR_R1, 0, 0, 1);
            return DSQ_OK;
        }
        if (!strcmp(rest, "shared_head.head.weight")) {
            add_fold(p, shn, 0);
            add_op(p, 0, DSQ_QR_R1, 0, 0, 1);
            return DSQ_OK;
        }
    }
    return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, name, -1, "no QuaRot rule for this tensor");
}

/* ------------------------------------------------------------------------ */

typedef struct qr_ctx {
    const dsq_model_config *cfg;
    dsq_st_model *st;
    dsq_rotation rot[DSQ_QR_NROT];
    enum dsq_dtype out_dtype;
} qr_ctx;

/* Apply one tensor's plan to its float rows w (rows x cols). */
static int apply_plan(qr_ctx *c, const char *name, const dsq_quarot_tensor_plan *p, float *w, int64_t rows,
                      int64_t cols, dsq_diag *d)
{
    for (int f = 0; f < p->nfold; f++) {
        const dsq_st_tensor *nt = dsq_st_find(c->st, p->fold_norm[f]);
        if (!nt)
            return dsq_fail(d, DSQ_ERR_NOT_FOUND, dsq_st_dir(c->st), p->fold_norm[f], -1,
                            "norm weight that %s reads is missing", name);
        int64_t n = dsq_st_rows(nt) * dsq_st_cols(nt);
        if (p->fold_off[f] + n > cols)
            return dsq_fail(d, DSQ_ERR_SHAPE, dsq_st_dir(c->st), name, -1, "%lld columns cannot take norm %s of %lld",
                            (long long)cols, p->fold_norm[f], (long long)n);
        float *g = malloc((size_t)n * sizeof *g);
        if (!g) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, p->fold_norm[f], -1, "norm weight");
        int rc = dsq_st_read_rows_f32(c->st, nt, 0, dsq_st_rows(nt), g, d);
        if (rc == DSQ_OK)
            for (int64_t i = 0; i < rows; i++)
                for (int64_t j = 0; j < n; j++) w[i * cols + p->fold_off[f] + j] *= g[j];
        free(g);
        if (rc) return rc;
    }
    for (int k = 0; k < p->nops; k++) {
        const dsq_rotation *r = &c->rot[p->op[k].rot];
        for (int64_t t = 0; t < p->op[k].count; t++) {
            int64_t off = p->op[k].off + t * p->op[k].stride;
            int rc = p->op[k].left ? dsq_rot_left(r, w, rows, cols, off, d) : dsq_rot_right(r, w, rows, cols, off, d);
            if (rc) {
                if (d && !d->tensor[0]) snprintf(d->tensor, sizeof d->tensor, "%s", name);
                return rc;
            }
        }
    }
    return DSQ_OK;
}

static int fill_tensor(void *ctx, const char *name, void *dst, uint64_t nbytes, dsq_diag *d)
{
    qr_ctx *c = ctx;
    const dsq_st_tensor *t = dsq_st_find(c->st, name);
    if (!t) return dsq_fail(d, DSQ_ERR_INTERNAL, NULL, name, -1, "tensor vanished");
    int64_t rows = dsq_st_rows(t), cols = dsq_st_cols(t);
    size_t esz = c->out_dtype == DSQ_DTYPE_F32 ? 4 : 2;
    if ((uint64_t)(rows * cols) * esz != nbytes) return dsq_fail(d, DSQ_ERR_INTERNAL, NULL, name, -1, "size mismatch");
    dsq_quarot_tensor_plan p;
    DSQ_TRY(dsq_quarot_plan(c->cfg, name, &p, d));
    float *w = malloc((size_t)(rows * cols) * sizeof *w + 1);
    if (!w) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, name, -1, "%lld x %lld floats", (long long)rows, (long long)cols);
    int rc = DSQ_OK;
    if (p.kind == DSQ_QP_ONES) {
        for (int64_t i = 0; i < rows * cols; i++) w[i] = 1.0f;
    } else {
        rc = dsq_st_read_rows_f32(c->st, t, 0, rows, w, d);
        if (rc == DSQ_OK && p.kind == DSQ_QP_ROTATE) rc = apply_plan(c, name, &p, w, rows, cols, d);
    }
    if (rc == DSQ_OK) {
        if (c->out_dtype == DSQ_DTYPE_F32) {
            memcpy(dst, w, nbytes);
        } else {
            uint16_t *o = dst;
            for (int64_t i = 0; i < rows * cols; i++) o[i] = dsq_f32_to_bf16(w[i]);
        }
    }
    free(w);
    return rc;
}

/* config.json of the rotated model: no quantization_config (the weights are
 * plain floats now), torch_dtype of the output. */
static int write_config(const dsq_model_config *cfg, const char *dir, enum dsq_dtype dt, dsq_diag *d)
{
    json_object *root = json_tokener_parse(cfg->raw_json);
    if (!root || !json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        return dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "config.json does not parse");
    }
    json_object_object_del(root, "quantization_config");
    json_object_object_add(root, "torch_dtype", json_object_new_string(dt == DSQ_DTYPE_F32 ? "float32" : "bfloat16"));
    const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED);
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/config.json", dir) >= sizeof path) {
        json_object_put(root);
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, dir, NULL, -1, "path too long");
    }
    int rc = dsq_write_file_atomic(path, text, strlen(text), 0, d);
    json_object_put(root);
    return rc;
}

static int is_weight_file(const char *n)
{
    return ends(n, ".safetensors") || ends(n, ".safetensors.index.json") || !strcmp(n, "config.json");
}

/* Copy the small regular files of src (tokenizer, generation config). */
static int copy_side_files(const char *src, const char *dir, dsq_diag *d)
{
    DIR *dp = opendir(src);
    if (!dp) return dsq_fail_errno(d, errno, src, "cannot list the model directory");
    struct dirent *e;
    int rc = DSQ_OK;
    while (rc == DSQ_OK && (e = readdir(dp))) {
        if (e->d_name[0] == '.' || is_weight_file(e->d_name)) continue;
        char in[4096], out[4096];
        if ((size_t)snprintf(in, sizeof in, "%s/%s", src, e->d_name) >= sizeof in ||
            (size_t)snprintf(out, sizeof out, "%s/%s", dir, e->d_name) >= sizeof out) {
            rc = dsq_fail(d, DSQ_ERR_INVALID_ARG, src, NULL, -1, "path too long: %s", e->d_name);
            break;
        }
        struct stat sb;
        if (lstat(in, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;  /* links, FIFOs, directories: not ours to copy */
        char *buf = NULL;
        size_t len = 0;
        rc = dsq_read_file(in, (size_t)64 << 20, &buf, &len, d);
        if (rc == DSQ_OK) rc = dsq_write_file_atomic(out, buf, len, 0, d);
        free(buf);
    }
    closedir(dp);
    return rc;
}

/* The marker a rotation writes first into its .partial directory: a
 * directory without it was not begun by dsq and is never removed. */
#define QR_MARKER ".dsq-rotation"

/* May name n in a partial rotation of src be removed? The names a rotation
 * writes: the marker, weights and config, temporaries of atomic writes
 * (".<name>.partial"), and the side files copied from src. */
static int partial_name_ours(const char *src, const char *n)
{
    size_t l = strlen(n);
    if (!strcmp(n, QR_MARKER) || is_weight_file(n)) return 1;
    if (n[0] == '.' && l > 9 && !strcmp(n + l - 8, ".partial")) return 1;
    char in[4096];
    struct stat sb;
    return (size_t)snprintf(in, sizeof in, "%s/%s", src, n) < sizeof in && lstat(in, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* A killed rotation's .partial directory is dsq's when it holds the marker
 * and only regular files with names a rotation of src writes. 1: ours
 * (why untouched), 0: not (why names what is in the way). Links are never
 * followed: entries are examined with fstatat(AT_SYMLINK_NOFOLLOW). */
static int partial_ours(const char *dir, const char *src, char *why, size_t wn)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *dp = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!dp) {
        if (dfd >= 0) close(dfd);
        snprintf(why, wn, "it is not a directory dsq can list");
        return 0;
    }
    int ok = 1, marker = 0;
    struct dirent *e;
    while (ok && (e = readdir(dp))) {
        const char *n = e->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..")) continue;
        struct stat sb;
        if (fstatat(dirfd(dp), n, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode)) {
            snprintf(why, wn, "its '%.200s' is not a regular file", n);
            ok = 0;
        } else if (!partial_name_ours(src, n)) {
            snprintf(why, wn, "its '%.200s' is not a file a rotation writes", n);
            ok = 0;
        }
        if (!strcmp(n, QR_MARKER)) marker = 1;
    }
    closedir(dp);
    if (ok && !marker) {
        snprintf(why, wn, "it has no %s marker", QR_MARKER);
        ok = 0;
    }
    return ok;
}

/* Remove a partial rotation directory that partial_ours() accepts: its
 * regular files (never a link's target), then the directory. */
static void remove_partial(const char *dir)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *dp = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!dp) {
        if (dfd >= 0) close(dfd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(dp))) {
        struct stat sb;
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
        if (fstatat(dirfd(dp), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode))
            unlinkat(dirfd(dp), e->d_name, 0);
    }
    closedir(dp);
    rmdir(dir);
}

int dsq_quarot_write(const char *src, const char *out, const dsq_quarot_opts *o, dsq_diag *d)
{
    dsq_quarot_opts def;
    if (!o) { dsq_quarot_opts_init(&def); o = &def; }
    if (o->out_dtype != DSQ_DTYPE_F32 && o->out_dtype != DSQ_DTYPE_BF16)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, out, NULL, -1, "QuaRot writes F32 or BF16");
    if (dsq_path_exists(out)) return dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1, "output exists");
    char partial[4096];
    if ((size_t)snprintf(partial, sizeof partial, "%s.partial", out) >= sizeof partial)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, out, NULL, -1, "path too long");
    /* a killed rotation's leftovers are removed and the rotation starts
     * again (it is deterministic); anything else in the way is refused */
    if (dsq_path_exists(partial)) {
        char why[320];
        if (!partial_ours(partial, src, why, sizeof why))
            return dsq_fail(d, DSQ_ERR_EXISTS, partial, NULL, -1,
                            "in the way of the rotated model and not a partial rotation dsq began (%s): nothing "
                            "was removed",
                            why);
        remove_partial(partial);
        if (dsq_path_exists(partial))
            return dsq_fail(d, DSQ_ERR_EXISTS, partial, NULL, -1, "the interrupted rotation's directory could not be removed");
    }

    char cfgpath[4096];
    if ((size_t)snprintf(cfgpath, sizeof cfgpath, "%s/config.json", src) >= sizeof cfgpath)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, src, NULL, -1, "path too long");
    dsq_model_config cfg;
    DSQ_TRY(dsq_model_config_load(&cfg, cfgpath, d));
    qr_ctx c;
    memset(&c, 0, sizeof c);
    c.cfg = &cfg;
    c.out_dtype = o->out_dtype;
    dsq_st_writer *w = NULL;
    int rc = dsq_st_open(&c.st, src, d);
    if (rc) goto done;
    /* the rotations (each its own seed stream) */
    int64_t ql = cfg.q_lora_rank > 0 ? cfg.q_lora_rank : 1;
    int64_t qblock = ql % 32 == 0 && ql >= 64 ? 32 : 0;
    rc = dsq_rot_init(&c.rot[DSQ_QR_R1], DSQ_ROT_HADAMARD, cfg.hidden_size, 0, o->seed, d);
    if (!rc)
        rc = qblock ? dsq_rot_init(&c.rot[DSQ_QR_RQ], DSQ_ROT_BLOCK_SHIFTED, ql, qblock, o->seed + 1, d)
                    : dsq_rot_init(&c.rot[DSQ_QR_RQ], DSQ_ROT_HADAMARD, ql, 0, o->seed + 1, d);
    if (!rc) rc = dsq_rot_init(&c.rot[DSQ_QR_RKV], DSQ_ROT_HADAMARD, cfg.kv_lora_rank, 0, o->seed + 2, d);
    if (!rc) rc = dsq_rot_init(&c.rot[DSQ_QR_RUV], DSQ_ROT_HADAMARD, cfg.v_head_dim, 0, o->seed + 3, d);
    if (rc) goto done;
    w = dsq_st_writer_create();
    if (!w) { rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "writer"); goto done; }
    for (size_t i = 0; i < dsq_st_count(c.st) && rc == DSQ_OK; i++) {
        const dsq_st_tensor *t = dsq_st_get(c.st, i);
        if (dsq_st_is_companion(c.st, t)) continue;   /* FP8 scales: applied on read */
        dsq_quarot_tensor_plan p;
        rc = dsq_quarot_plan(&cfg, t->name, &p, d);   /* refuse unknown tensors before any work */
        if (rc) break;
        rc = dsq_st_writer_add_lazy(w, t->name, o->out_dtype, t->ndim, t->shape, fill_tensor, &c);
    }
    if (rc) goto done;
    char meta[128];
    snprintf(meta, sizeof meta, "quarot seed=%llu", (unsigned long long)o->seed);
    rc = dsq_st_writer_set_meta(w, "dsq.rotation", meta);
    if (!rc) rc = dsq_st_writer_set_meta(w, "format", "pt");
    if (!rc && mkdir(partial, 0755) != 0) rc = dsq_fail_errno(d, errno, partial, "cannot create");
    if (rc) goto done;
    {
        char mk[4096];
        if ((size_t)snprintf(mk, sizeof mk, "%s/%s", partial, QR_MARKER) >= sizeof mk)
            rc = dsq_fail(d, DSQ_ERR_INVALID_ARG, partial, NULL, -1, "path too long");
        else rc = dsq_write_file_atomic(mk, meta, strlen(meta), 0, d);
    }
    if (rc) {
        rmdir(partial);
        goto done;
    }
    rc = dsq_st_writer_write(w, partial, o->shard_bytes ? o->shard_bytes : (uint64_t)4 << 30, 0, d);
    if (!rc) rc = write_config(&cfg, partial, o->out_dtype, d);
    if (!rc) rc = copy_side_files(src, partial, d);
    if (!rc && rename(partial, out) != 0) rc = dsq_fail_errno(d, errno, out, "cannot rename %s", partial);
    if (rc) remove_partial(partial);
done:
    dsq_st_writer_free(w);
    for (int k = 0; k < DSQ_QR_NROT; k++) dsq_rot_free(&c.rot[k]);
    dsq_st_close(c.st);
    dsq_model_config_release(&cfg);
    return rc;
}

static int rotation_meta(const char *dir, char *out, size_t n)
{
    dsq_st_model *st = NULL;
    if (dsq_st_open(&st, dir, NULL) != DSQ_OK) return 0;
    const char *v = dsq_st_meta_get(st, "dsq.rotation");
    int ok = v && snprintf(out, n, "%s", v) < (int)n;
    dsq_st_close(st);
    return ok;
}

int dsq_quarot_is_ours(const char *dir, uint64_t seed)
{
    char v[128], want[128];
    snprintf(want, sizeof want, "quarot seed=%llu", (unsigned long long)seed);
    char cfg[4096];
    if ((size_t)snprintf(cfg, sizeof cfg, "%s/config.json", dir) >= sizeof cfg || !dsq_path_exists(cfg)) return 0;
    return rotation_meta(dir, v, sizeof v) && !strcmp(v, want);
}

int dsq_quarot_remove(const char *dir, const char *src, dsq_diag *d)
{
    char v[128];
    if (!rotation_meta(dir, v, sizeof v) || strncmp(v, "quarot seed=", 12) != 0)
        return dsq_fail(d, DSQ_ERR_STATE, dir, NULL, -1, "not a rotated model dsq wrote: left as it is");
    dsq_st_model *st = NULL;
    DSQ_TRY(dsq_st_open(&st, dir, d));
    int n = dsq_st_shard_count(st);
    char **paths = calloc((size_t)n + 1, sizeof *paths);
    for (int i = 0; paths && i < n; i++) paths[i] = strdup(dsq_st_shard_path(st, i));
    dsq_st_close(st);
    if (!paths) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    for (int i = 0; i < n; i++) {
        if (paths[i]) unlink(paths[i]);
        free(paths[i]);
    }
    free(paths);
    static const char *const own[] = { "model.safetensors.index.json", "config.json", QR_MARKER };
    char p[4096];
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, own[i]) < sizeof p) unlink(p);
    /* the side files copied from src, by name */
    DIR *dp = src ? opendir(src) : NULL;
    struct dirent *e;
    while (dp && (e = readdir(dp))) {
        if (e->d_name[0] == '.' || is_weight_file(e->d_name)) continue;
        struct stat sb;
        if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < sizeof p && lstat(p, &sb) == 0 &&
            S_ISREG(sb.st_mode))
            unlink(p);
    }
    if (dp) closedir(dp);
    rmdir(dir);   /* fails, leaving it, when anything else is inside */
    return DSQ_OK;
}
