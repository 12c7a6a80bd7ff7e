/* convert_preflight.c - what a conversion checks before any work is done.
 *
 * The output (dsq_convert_check_output, dsq_export_check_output; convert.h):
 * a calibration takes hours, and an "output exists" found after it wastes
 * them. So these checks only stat files and list two directories, and the
 * CLI runs them before the first expensive step. dsq_convert_run runs them
 * again, so the library never relies on the caller for them.
 *
 * config.json against the tensor shapes, at plan time (dsq_conv_check_config,
 * convert_preflight.h). Shapes follow the HF modeling code (docs/checkpoints.md,
 * "## DeepSeek-V3 checkpoints"): linear weights are [out, in]. */
#include "convert_preflight.h"
#include "convert.h"
#include "dsq_file.h"
#include "export.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ==== the output ======================================================== */

static int has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static char *input_dir(const char *in)
{
    if (dsq_path_is_dir(in)) return strdup(in);
    const char *slash = strrchr(in, '/');
    if (!slash) return strdup(".");
    if (slash == in) return strdup("/");
    return strndup(in, (size_t)(slash - in));
}

/* out must not be the same file (device + inode: names lie through links,
 * "./" and hard links) as the input or any file conversion reads from the
 * input's directory (shards, index, config, tokenizer files). */
static int check_not_input(const char *out, const char *in, dsq_diag *d)
{
    if (dsq_path_same_file(out, in))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, out, NULL, -1,
                        "output is an input ('%s'); refusing to overwrite the source", in);
    char *dir = input_dir(in);
    if (!dir) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    DIR *dh = opendir(dir);
    struct dirent *de;
    int rc = DSQ_OK;
    while (dh && rc == DSQ_OK && (de = readdir(dh))) {
        if (!has_suffix(de->d_name, ".safetensors") && !has_suffix(de->d_name, ".json")) continue;
        char *p = dsq_path_join(dir, de->d_name);
        if (!p) { rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory"); break; }
        if (dsq_path_same_file(out, p))
            rc = dsq_fail(d, DSQ_ERR_INVALID_ARG, out, NULL, -1,
                          "output is an input ('%s'); refusing to overwrite the source", p);
        free(p);
    }
    if (dh) closedir(dh);
    free(dir);
    return rc;
}

static int check_single(const dsq_convert_opts *o, dsq_diag *d)
{
    const char *out = o->output;
    struct stat st;
    DSQ_TRY(check_not_input(out, o->input, d));
    if (stat(out, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1,
                            "output is a directory (use --shard-size for sharded output)");
        if (!S_ISREG(st.st_mode))
            return dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1,
                            "output is not a regular file: a .dsq is written with seeks and "
                            "renamed into place, so it needs a regular file");
        if (o->resume)
            return dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1,
                            "output exists: the earlier run finished, there is nothing to resume");
        if (!o->overwrite)
            return dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1, "output exists (use -f to overwrite)");
    }
    return DSQ_OK;
}

static int check_sharded(const dsq_convert_opts *o, dsq_diag *d)
{
    const char *out = o->output;
    if (dsq_path_exists(out) && !dsq_path_is_dir(out)) {
        /* An interrupted single-file run left OUT's partial; --shard-size
         * would start over and leave it (and its journal) behind forever. */
        return dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1, "output exists and is not a directory");
    }
    if (o->resume) {
        char *tmp = dsq_outfile_tmp_name(out);
        int single = tmp && dsq_path_exists(tmp);
        free(tmp);
        if (single)
            return dsq_fail(d, DSQ_ERR_STATE, out, NULL, -1,
                            "the interrupted run wrote a single file, not shards: resume it "
                            "without --shard-size, or start over with -f");
    }
    char *idx = dsq_path_join(out, "model.dsq.index.json");
    if (!idx) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    int rc = check_not_input(idx, o->input, d);
    if (rc == DSQ_OK && dsq_path_exists(idx) && o->resume)
        rc = dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1,
                      "output exists: the earlier run finished, there is nothing to resume");
    if (rc == DSQ_OK && dsq_path_exists(idx) && !o->overwrite)
        rc = dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1, "output exists (use -f to overwrite)");
    free(idx);
    /* Shards of any count already in the directory: -f replaces them. */
    DIR *dh = rc == DSQ_OK ? opendir(out) : NULL;
    struct dirent *de;
    while (dh && rc == DSQ_OK && (de = readdir(dh))) {
        int a, b, end = 0;
        if (sscanf(de->d_name, "model-%5d-of-%5d.dsq%n", &a, &b, &end) != 2 || end <= 0 || de->d_name[end])
            continue;
        char *p = dsq_path_join(out, de->d_name);
        rc = p ? check_not_input(p, o->input, d) : dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        free(p);
    }
    if (dh) closedir(dh);
    return rc;
}

/* An export directory replaced with -f loses the files its manifest lists:
 * it must not be, or contain, the input (`ds-quant --format F model/ model/`, or OUT a
 * parent of IN, would delete the source weights). Compared by real path:
 * names lie through links and "./". */
int dsq_export_check_output(const char *out, const char *in, int overwrite, int resume, dsq_diag *d)
{
    if (!out || !*out) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "no output path");
    if (!in) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "no input path");
    DSQ_TRY(check_not_input(out, in, d));
    char *ro = realpath(out, NULL), *ri = realpath(in, NULL);
    int rc = DSQ_OK;
    if (ro && ri) {
        size_t n = strlen(ro);
        if (!strcmp(ro, ri) || (!strncmp(ro, ri, n) && (ri[n] == '/' || !strcmp(ro, "/"))))
            rc = dsq_fail(d, DSQ_ERR_INVALID_ARG, out, NULL, -1,
                          "output is an input: the export directory holds '%s'; refusing to replace the source", in);
    }
    free(ro);
    free(ri);
    /* what may be replaced or continued, and a crash's leftovers (export.h) */
    if (rc == DSQ_OK) rc = dsq_export_prepare_output(out, overwrite, resume, d);
    return rc;
}

int dsq_convert_check_output(const dsq_convert_opts *o, dsq_diag *d)
{
    if (!o || !o->output || !*o->output)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "no output path");
    if (!o->input) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "no input path");
    if (o->export_format && strcmp(o->export_format, "dsq") != 0)   /* a serving export: a directory */
        return dsq_export_check_output(o->output, o->input, o->overwrite, o->resume, d);
    return o->shard_bytes ? check_sharded(o, d) : check_single(o, d);
}

/* ==== config.json against the tensors ===================================== */

typedef struct ck {
    const dsq_model_config *c;
    const dsq_st_model *m;
    const char *path;
    dsq_diag *d;
} ck;

static void shape_str(const dsq_st_tensor *t, char *buf, size_t n)
{
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%" PRId64, i ? ", " : "", t->shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

/* Tensor `name` must exist (if required) with shape [a] (b < 0) or [a, b];
 * ka / kb name the config keys that determine a and b. */
static int want(const ck *k, const char *name, int required, int64_t a, const char *ka, int64_t b,
                const char *kb)
{
    const dsq_st_tensor *t = dsq_st_find(k->m, name);
    if (!t) {
        if (!required) return DSQ_OK;
        return dsq_fail(k->d, DSQ_ERR_SHAPE, k->path, name, -1,
                        "config.json (%s) implies tensor '%s', which the checkpoint does not have", ka, name);
    }
    int nd = b < 0 ? 1 : 2;
    char sh[96];
    shape_str(t, sh, sizeof sh);
    if (t->ndim != nd)
        return dsq_fail(k->d, DSQ_ERR_SHAPE, k->path, name, -1,
                        "tensor '%s' has shape %s, config.json (%s%s%s) implies %d dimensions", name, sh, ka,
                        kb ? ", " : "", kb ? kb : "", nd);
    if (t->shape[0] != a)
        return dsq_fail(k->d, DSQ_ERR_SHAPE, k->path, name, -1,
                        "config.json %s implies %" PRId64 " rows for tensor '%s', which has shape %s", ka, a, name, sh);
    if (nd == 2 && t->shape[1] != b)
        return dsq_fail(k->d, DSQ_ERR_SHAPE, k->path, name, -1,
                        "config.json %s implies %" PRId64 " columns for tensor '%s', which has shape %s", kb, b, name,
                        sh);
    return DSQ_OK;
}

static int absent(const ck *k, const char *name, const char *why)
{
    if (!dsq_st_find(k->m, name)) return DSQ_OK;
    return dsq_fail(k->d, DSQ_ERR_SHAPE, k->path, name, -1, "tensor '%s' exists, but config.json %s", name, why);
}

static int deepseek_layer(const ck *k, int64_t L)
{
    const dsq_model_config *c = k->c;
    const int64_t H = c->hidden_size, nh = c->num_attention_heads;
    char n[256], w[160];
#define NM(fmt, ...) (snprintf(n, sizeof n, "model.layers.%" PRId64 "." fmt, L, ##__VA_ARGS__), n)
    DSQ_TRY(want(k, NM("input_layernorm.weight"), 1, H, "hidden_size / num_hidden_layers", -1, NULL));
    if (c->q_lora_rank > 0) {
        DSQ_TRY(want(k, NM("self_attn.q_a_proj.weight"), 1, c->q_lora_rank, "q_lora_rank", H, "hidden_size"));
        DSQ_TRY(want(k, NM("self_attn.q_b_proj.weight"), 1, nh * c->qk_head_dim,
                     "num_attention_heads x (qk_nope_head_dim + qk_rope_head_dim)", c->q_lora_rank, "q_lora_rank"));
    } else {
        DSQ_TRY(want(k, NM("self_attn.q_proj.weight"), 1, nh * c->qk_head_dim,
                     "num_attention_heads x (qk_nope_head_dim + qk_rope_head_dim)", H, "hidden_size"));
    }
    DSQ_TRY(want(k, NM("self_attn.kv_a_proj_with_mqa.weight"), 1, c->kv_lora_rank + c->qk_rope_head_dim,
                 "kv_lora_rank + qk_rope_head_dim", H, "hidden_size"));
    DSQ_TRY(want(k, NM("self_attn.kv_a_layernorm.weight"), 1, c->kv_lora_rank, "kv_lora_rank", -1, NULL));
    DSQ_TRY(want(k, NM("self_attn.kv_b_proj.weight"), 1, nh * (c->qk_nope_head_dim + c->v_head_dim),
                 "num_attention_heads x (qk_nope_head_dim + v_head_dim)", c->kv_lora_rank, "kv_lora_rank"));
    DSQ_TRY(want(k, NM("self_attn.o_proj.weight"), 1, H, "hidden_size", nh * c->v_head_dim,
                 "num_attention_heads x v_head_dim"));
    if (dsq_arch_get(c->arch)->dsa) {
        const int64_t Hi = c->index_n_heads, Di = c->index_head_dim;
        DSQ_TRY(want(k, NM("self_attn.indexer.wq_b.weight"), 1, Hi * Di, "index_n_heads x index_head_dim",
                     c->q_lora_rank, "q_lora_rank"));
        DSQ_TRY(want(k, NM("self_attn.indexer.wk.weight"), 1, Di, "index_head_dim", H, "hidden_size"));
        DSQ_TRY(want(k, NM("self_attn.indexer.k_norm.weight"), 1, Di, "index_head_dim", -1, NULL));
        DSQ_TRY(want(k, NM("self_attn.indexer.k_norm.bias"), 1, Di, "index_head_dim", -1, NULL));
        DSQ_TRY(want(k, NM("self_attn.indexer.weights_proj.weight"), 1, Hi, "index_n_heads", H, "hidden_size"));
    }
    if (dsq_model_config_is_moe_layer(c, L)) {
        DSQ_TRY(want(k, NM("mlp.gate.weight"), 1, c->n_routed_experts, "n_routed_experts", H, "hidden_size"));
        int64_t E = c->n_routed_experts;
        DSQ_TRY(want(k, NM("mlp.experts.%" PRId64 ".gate_proj.weight", E - 1), 1, c->moe_intermediate_size,
                     "moe_intermediate_size / n_routed_experts", H, "hidden_size"));
        DSQ_TRY(want(k, NM("mlp.experts.0.down_proj.weight"), 1, H, "hidden_size", c->moe_intermediate_size,
                     "moe_intermediate_size"));
        snprintf(w, sizeof w, "says n_routed_experts = %" PRId64, E);
        DSQ_TRY(absent(k, NM("mlp.experts.%" PRId64 ".gate_proj.weight", E), w));
    } else {
        snprintf(w, sizeof w, "makes layer %" PRId64 " dense (n_routed_experts = %" PRId64
                 ", first_k_dense_replace = %" PRId64 ", moe_layer_freq = %" PRId64 ")",
                 L, c->n_routed_experts, c->first_k_dense_replace, c->moe_layer_freq);
        DSQ_TRY(absent(k, NM("mlp.gate.weight"), w));
        DSQ_TRY(want(k, NM("mlp.gate_proj.weight"), 1, c->intermediate_size, "intermediate_size", H, "hidden_size"));
    }
#undef NM
    return DSQ_OK;
}

static int llama_layer(const ck *k, int64_t L)
{
    const dsq_model_config *c = k->c;
    const int64_t H = c->hidden_size, hd = c->head_dim;
    char n[256];
#define NM(fmt) (snprintf(n, sizeof n, "model.layers.%" PRId64 "." fmt, L), n)
    DSQ_TRY(want(k, NM("input_layernorm.weight"), 1, H, "hidden_size / num_hidden_layers", -1, NULL));
    DSQ_TRY(want(k, NM("self_attn.q_proj.weight"), 1, c->num_attention_heads * hd, "num_attention_heads x head_dim",
                 H, "hidden_size"));
    DSQ_TRY(want(k, NM("self_attn.k_proj.weight"), 1, c->num_key_value_heads * hd,
                 "num_key_value_heads x head_dim", H, "hidden_size"));
    DSQ_TRY(want(k, NM("self_attn.v_proj.weight"), 1, c->num_key_value_heads * hd,
                 "num_key_value_heads x head_dim", H, "hidden_size"));
    DSQ_TRY(want(k, NM("self_attn.o_proj.weight"), 1, H, "hidden_size", c->num_attention_heads * hd,
                 "num_attention_heads x head_dim"));
    DSQ_TRY(want(k, NM("mlp.gate_proj.weight"), 1, c->intermediate_size, "intermediate_size", H, "hidden_size"));
    DSQ_TRY(want(k, NM("mlp.down_proj.weight"), 1, H, "hidden_size", c->intermediate_size, "intermediate_size"));
#undef NM
    return DSQ_OK;
}

int dsq_conv_check_config(const dsq_model_config *cfg, const dsq_st_model *m, const char *cfg_path,
                          dsq_diag *d)
{
    int ds = dsq_arch_is_deepseek(cfg->arch);
    if (!ds && cfg->arch != DSQ_ARCH_LLAMA && cfg->arch != DSQ_ARCH_QWEN2) return DSQ_OK;
    ck k = { cfg, m, cfg_path, d };
    DSQ_TRY(want(&k, "model.embed_tokens.weight", 1, cfg->vocab_size, "vocab_size", cfg->hidden_size,
                 "hidden_size"));
    DSQ_TRY(want(&k, "lm_head.weight", !cfg->tie_word_embeddings, cfg->vocab_size, "vocab_size", cfg->hidden_size,
                 "hidden_size"));
    DSQ_TRY(want(&k, "model.norm.weight", 1, cfg->hidden_size, "hidden_size", -1, NULL));
    for (int64_t L = 0; L < cfg->num_hidden_layers; L++)
        DSQ_TRY(ds ? deepseek_layer(&k, L) : llama_layer(&k, L));
    /* More layers than the config says (MTP layers excepted) would be
     * converted and then ignored by every reader. */
    char n[96], w[96];
    snprintf(n, sizeof n, "model.layers.%" PRId64 ".input_layernorm.weight",
             cfg->num_hidden_layers + (ds ? cfg->num_nextn_predict_layers : 0));
    snprintf(w, sizeof w, "says num_hidden_layers = %" PRId64, cfg->num_hidden_layers);
    return absent(&k, n, w);
}
