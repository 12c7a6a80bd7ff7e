/* synth_ckpt.c - synthetic checkpoints with real names and shapes (see synth_ckpt.h). */
#include "synth_ckpt.h"
#include "dsq_file.h"
#include "dsq_mem.h"
#include "st_writer.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum kind { K_LINEAR, K_NORM, K_EMBED, K_ROUTER_BIAS, K_BIAS, K_SCALE };

typedef struct entry {
    char name[256];
    enum kind kind;
    enum dsq_dtype dtype;
    int ndim;
    int64_t shape[2];
    const dsq_synth_opts *o;
} entry;

typedef struct list {
    entry *v;
    size_t n, cap;
    int oom;
} list;

/* ---- deterministic randomness: splitmix64 seeded by (seed, name) ---- */

static uint64_t mix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t name_seed(uint64_t seed, const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull ^ seed;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
    return h;
}

static float unif(uint64_t *s) { return (float)(mix64(s) >> 40) * (1.0f / 16777216.0f); }

/* Irwin-Hall(4) from one 64-bit draw: close enough to a unit Gaussian for
 * weights, bounded by +-3.46 (no absurd outliers by accident), and cheap. */
static float gauss(uint64_t *s)
{
    uint64_t r = mix64(s);
    uint32_t t = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) +
                 (uint32_t)((r >> 32) & 0xffff) + (uint32_t)(r >> 48);
    return ((float)t - 131070.0f) * (1.0f / 37837.0f);
}

/* ---- tensor list ---- */

static void add(list *l, const dsq_synth_opts *o, enum kind k, enum dsq_dtype dt,
                int ndim, int64_t d0, int64_t d1, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));

static void add(list *l, const dsq_synth_opts *o, enum kind k, enum dsq_dtype dt,
                int ndim, int64_t d0, int64_t d1, const char *fmt, ...)
{
    if (l->oom) return;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 256;
        entry *nv = realloc(l->v, nc * sizeof *nv);
        if (!nv) { l->oom = 1; return; }
        l->v = nv;
        l->cap = nc;
    }
    entry *e = &l->v[l->n++];
    memset(e, 0, sizeof *e);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->name, sizeof e->name, fmt, ap);
    va_end(ap);
    e->kind = k;
    e->dtype = dt;
    e->ndim = ndim;
    e->shape[0] = d0;
    e->shape[1] = d1;
    e->o = o;
}

/* A linear weight [out, in]: FP8 plus its block-scale grid when fp8 is set
 * and DeepSeek ships this linear in FP8, else the float dtype. */
static void linear(list *l, const dsq_synth_opts *o, int fp8, int64_t out, int64_t in,
                   const char *prefix)
{
    if (o->fp8 && fp8) {
        add(l, o, K_LINEAR, DSQ_DTYPE_F8_E4M3, 2, out, in, "%s.weight", prefix);
        add(l, o, K_SCALE, DSQ_DTYPE_F32, 2, (out + 127) / 128, (in + 127) / 128,
            "%s.weight_scale_inv", prefix);
    } else {
        add(l, o, K_LINEAR, o->dtype, 2, out, in, "%s.weight", prefix);
    }
}

static void norm(list *l, const dsq_synth_opts *o, int64_t n, const char *name)
{
    add(l, o, K_NORM, o->dtype, 1, n, 0, "%s", name);
}

static void mlp3(list *l, const dsq_synth_opts *o, const char *p, int64_t inter)
{
    char b[256];
    snprintf(b, sizeof b, "%s.gate_proj", p); linear(l, o, 1, inter, o->hidden, b);
    snprintf(b, sizeof b, "%s.up_proj", p);   linear(l, o, 1, inter, o->hidden, b);
    snprintf(b, sizeof b, "%s.down_proj", p); linear(l, o, 1, o->hidden, inter, b);
}

static void ds_layer(list *l, const dsq_synth_opts *o, int64_t li)
{
    char p[128], b[256];
    snprintf(p, sizeof p, "model.layers.%lld", (long long)li);
    int64_t H = o->hidden, qk = o->qk_nope + o->qk_rope;
    snprintf(b, sizeof b, "%s.input_layernorm.weight", p); norm(l, o, H, b);
    snprintf(b, sizeof b, "%s.post_attention_layernorm.weight", p); norm(l, o, H, b);
    if (o->q_lora_rank > 0) {
        snprintf(b, sizeof b, "%s.self_attn.q_a_proj", p); linear(l, o, 1, o->q_lora_rank, H, b);
        snprintf(b, sizeof b, "%s.self_attn.q_a_layernorm.weight", p); norm(l, o, o->q_lora_rank, b);
        snprintf(b, sizeof b, "%s.self_attn.q_b_proj", p);
        linear(l, o, 1, o->heads * qk, o->q_lora_rank, b);
    } else {
        snprintf(b, sizeof b, "%s.self_attn.q_proj", p); linear(l, o, 1, o->heads * qk, H, b);
    }
    snprintf(b, sizeof b, "%s.self_attn.kv_a_proj_with_mqa", p);
    linear(l, o, 1, o->kv_lora_rank + o->qk_rope, H, b);
    snprintf(b, sizeof b, "%s.self_attn.kv_a_layernorm.weight", p); norm(l, o, o->kv_lora_rank, b);
    snprintf(b, sizeof b, "%s.self_attn.kv_b_proj", p);
    linear(l, o, 1, o->heads * (o->qk_nope + o->v_head), o->kv_lora_rank, b);
    snprintf(b, sizeof b, "%s.self_attn.o_proj", p); linear(l, o, 1, H, o->heads * o->v_head, b);
    if (li < o->dense_layers || o->experts == 0) {
        snprintf(b, sizeof b, "%s.mlp", p); mlp3(l, o, b, o->intermediate);
        return;
    }
    add(l, o, K_LINEAR, o->dtype, 2, o->experts, H, "%s.mlp.gate.weight", p);
    add(l, o, K_ROUTER_BIAS, DSQ_DTYPE_F32, 1, o->experts, 0, "%s.mlp.gate.e_score_correction_bias", p);
    for (int64_t e = 0; e < o->experts; e++) {
        snprintf(b, sizeof b, "%s.mlp.experts.%lld", p, (long long)e);
        mlp3(l, o, b, o->moe_intermediate);
    }
    if (o->shared_experts > 0) {
        snprintf(b, sizeof b, "%s.mlp.shared_experts", p);
        mlp3(l, o, b, o->shared_experts * o->moe_intermediate);
    }
}

static void dense_layer(list *l, const dsq_synth_opts *o, int64_t li)
{
    char p[128], b[256];
    snprintf(p, sizeof p, "model.layers.%lld", (long long)li);
    int64_t H = o->hidden, hd = o->hidden / o->heads;
    snprintf(b, sizeof b, "%s.input_layernorm.weight", p); norm(l, o, H, b);
    snprintf(b, sizeof b, "%s.post_attention_layernorm.weight", p); norm(l, o, H, b);
    static const char *proj[] = { "q_proj", "k_proj", "v_proj" };
    for (int i = 0; i < 3; i++) {
        int64_t out = i == 0 ? o->heads * hd : o->kv_heads * hd;
        snprintf(b, sizeof b, "%s.self_attn.%s", p, proj[i]); linear(l, o, 0, out, H, b);
        if (o->arch == DSQ_SYNTH_QWEN2)
            add(l, o, K_BIAS, o->dtype, 1, out, 0, "%s.self_attn.%s.bias", p, proj[i]);
    }
    snprintf(b, sizeof b, "%s.self_attn.o_proj", p); linear(l, o, 0, H, o->heads * hd, b);
    snprintf(b, sizeof b, "%s.mlp", p); mlp3(l, o, b, o->intermediate);
}

static void build(list *l, const dsq_synth_opts *o)
{
    add(l, o, K_EMBED, o->dtype, 2, o->vocab, o->hidden, "model.embed_tokens.weight");
    for (int64_t li = 0; li < o->layers; li++) {
        if (o->arch == DSQ_SYNTH_DEEPSEEK_V3) ds_layer(l, o, li);
        else dense_layer(l, o, li);
    }
    if (o->arch == DSQ_SYNTH_DEEPSEEK_V3 && o->mtp) {
        int64_t m = o->layers;
        char b[256];
        add(l, o, K_EMBED, o->dtype, 2, o->vocab, o->hidden, "model.layers.%lld.embed_tokens.weight", (long long)m);
        snprintf(b, sizeof b, "model.layers.%lld.enorm.weight", (long long)m); norm(l, o, o->hidden, b);
        snprintf(b, sizeof b, "model.layers.%lld.hnorm.weight", (long long)m); norm(l, o, o->hidden, b);
        /* eh_proj being FP8 is unconfirmed (formats.md s.2.4): keep it float. */
        snprintf(b, sizeof b, "model.layers.%lld.eh_proj", (long long)m);
        linear(l, o, 0, o->hidden, 2 * o->hidden, b);
        ds_layer(l, o, m);
        snprintf(b, sizeof b, "model.layers.%lld.shared_head.norm.weight", (long long)m); norm(l, o, o->hidden, b);
        add(l, o, K_EMBED, o->dtype, 2, o->vocab, o->hidden, "model.layers.%lld.shared_head.head.weight", (long long)m);
    }
    norm(l, o, o->hidden, "model.norm.weight");
    add(l, o, K_EMBED, o->dtype, 2, o->vocab, o->hidden, "lm_head.weight");
}

/* ---- values ---- */

static void store(enum dsq_dtype dt, void *dst, size_t i, float v)
{
    switch (dt) {
    case DSQ_DTYPE_BF16: { uint16_t h = dsq_f32_to_bf16(v); memcpy((uint8_t *)dst + 2 * i, &h, 2); break; }
    case DSQ_DTYPE_F16:  { uint16_t h = dsq_f32_to_f16(v);  memcpy((uint8_t *)dst + 2 * i, &h, 2); break; }
    case DSQ_DTYPE_F32:  memcpy((uint8_t *)dst + 4 * i, &v, 4); break;
    case DSQ_DTYPE_F8_E4M3: ((uint8_t *)dst)[i] = dsq_f32_to_fp8_e4m3(v); break;
    default: break;
    }
}

/* FP8 codes are drawn at this spread so they use most of e4m3's range
 * (|g| <= 3.46 -> 346 < 448) while the block scale carries the magnitude. */
#define FP8_SPREAD 100.0f

static int fill(void *ctx, const char *name, void *dst, uint64_t nbytes, dsq_diag *d)
{
    const entry *e = ctx;
    const dsq_synth_opts *o = e->o;
    (void)nbytes;
    (void)d;
    uint64_t s = name_seed(o->seed, name);
    int64_t rows = e->ndim == 2 ? e->shape[0] : 1;
    int64_t cols = e->ndim == 2 ? e->shape[1] : e->shape[0];
    size_t k = 0;
    switch (e->kind) {
    case K_NORM:
        for (int64_t i = 0; i < cols; i++) store(e->dtype, dst, k++, 1.0f + 0.05f * gauss(&s));
        break;
    case K_ROUTER_BIAS:
        for (int64_t i = 0; i < cols; i++) store(e->dtype, dst, k++, 0.01f * gauss(&s));
        break;
    case K_BIAS:
        for (int64_t i = 0; i < cols; i++) store(e->dtype, dst, k++, 0.1f * gauss(&s));
        break;
    case K_EMBED:
        for (int64_t i = 0; i < rows * cols; i++) store(e->dtype, dst, k++, 0.02f * gauss(&s));
        break;
    case K_SCALE: {
        /* The weight's values have spread FP8_SPREAD; a scale of
         * base/FP8_SPREAD gives it a per-row std of about base. */
        float base = 1.0f / sqrtf((float)(e->shape[1] * 128));
        for (int64_t i = 0; i < rows * cols; i++)
            store(DSQ_DTYPE_F32, dst, k++, base * 3.5f / FP8_SPREAD * (0.6f + 0.8f * unif(&s)));
        break;
    }
    case K_LINEAR: {
        /* A few input channels (1 in 256) carry 3x larger weights, so a row's
         * max is ~10 sigma as in trained LLM weights (the outliers that make
         * per-channel int4 hard); each row has its own spread. */
        float *colm = malloc((size_t)cols * sizeof *colm);
        if (!colm) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, name, -1, "out of memory");
        uint64_t cs = s ^ 0x5bd1e995u;
        for (int64_t c = 0; c < cols; c++) colm[c] = (mix64(&cs) & 255) == 0 ? 3.0f : 1.0f;
        int fp8 = e->dtype == DSQ_DTYPE_F8_E4M3;
        float base = fp8 ? FP8_SPREAD / 3.5f : 1.0f / sqrtf((float)cols);
        for (int64_t r = 0; r < rows; r++) {
            float rs = base * (0.6f + 0.8f * unif(&s));
            for (int64_t c = 0; c < cols; c++) store(e->dtype, dst, k++, rs * colm[c] * gauss(&s));
        }
        free(colm);
        break;
    }
    }
    if (o->poison && !strcmp(o->poison, name) && k > 0) {
        if (e->dtype == DSQ_DTYPE_F8_E4M3) ((uint8_t *)dst)[0] = 0x7f;
        else store(e->dtype, dst, 0, NAN);
    }
    return DSQ_OK;
}

/* ---- side files ---- */

static int write_text(const char *dir, const char *name, const char *text, unsigned fl, dsq_diag *d)
{
    char *p = dsq_path_join(dir, name);
    if (!p) return dsq_fail(d, DSQ_ERR_NOMEM, dir, NULL, -1, "out of memory");
    int rc = dsq_write_file_atomic(p, text, strlen(text), fl, d);
    free(p);
    return rc;
}

static int write_config(const dsq_synth_opts *o, const char *dir, unsigned fl, dsq_diag *d)
{
    char buf[4096];
    int n;
    if (o->arch == DSQ_SYNTH_DEEPSEEK_V3) {
        char ql[32], qc[256] = "";
        if (o->q_lora_rank > 0) snprintf(ql, sizeof ql, "%lld", (long long)o->q_lora_rank);
        else snprintf(ql, sizeof ql, "null");
        if (o->fp8)
            snprintf(qc, sizeof qc, ",\n  \"quantization_config\": {\"activation_scheme\": \"dynamic\", "
                     "\"fmt\": \"e4m3\", \"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}");
        n = snprintf(buf, sizeof buf,
            "{\n  \"architectures\": [\"DeepseekV3ForCausalLM\"],\n  \"model_type\": \"deepseek_v3\",\n"
            "  \"vocab_size\": %lld,\n  \"hidden_size\": %lld,\n  \"intermediate_size\": %lld,\n"
            "  \"moe_intermediate_size\": %lld,\n  \"num_hidden_layers\": %lld,\n"
            "  \"num_nextn_predict_layers\": %d,\n  \"num_attention_heads\": %lld,\n"
            "  \"num_key_value_heads\": %lld,\n  \"q_lora_rank\": %s,\n  \"kv_lora_rank\": %lld,\n"
            "  \"qk_nope_head_dim\": %lld,\n  \"qk_rope_head_dim\": %lld,\n  \"v_head_dim\": %lld,\n"
            "  \"n_routed_experts\": %lld,\n  \"n_shared_experts\": %lld,\n  \"num_experts_per_tok\": %lld,\n"
            "  \"n_group\": %lld,\n  \"topk_group\": %lld,\n  \"topk_method\": \"noaux_tc\",\n"
            "  \"scoring_func\": \"sigmoid\",\n  \"routed_scaling_factor\": 2.5,\n  \"norm_topk_prob\": true,\n"
            "  \"first_k_dense_replace\": %lld,\n  \"moe_layer_freq\": 1,\n  \"hidden_act\": \"silu\",\n"
            "  \"rms_norm_eps\": 1e-06,\n  \"max_position_embeddings\": 163840,\n  \"rope_theta\": 10000,\n"
            "  \"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1, \"factor\": 40, \"mscale\": 1.0, "
            "\"mscale_all_dim\": 1.0, \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"},\n"
            "  \"tie_word_embeddings\": false,\n  \"torch_dtype\": \"bfloat16\",\n"
            "  \"bos_token_id\": 0,\n  \"eos_token_id\": 1%s\n}\n",
            (long long)o->vocab, (long long)o->hidden, (long long)o->intermediate,
            (long long)o->moe_intermediate, (long long)o->layers, o->mtp ? 1 : 0,
            (long long)o->heads, (long long)o->heads, ql, (long long)o->kv_lora_rank,
            (long long)o->qk_nope, (long long)o->qk_rope, (long long)o->v_head,
            (long long)(o->experts > 0 ? o->experts : 1), (long long)o->shared_experts,
            (long long)o->experts_per_tok, (long long)o->n_group, (long long)o->topk_group,
            (long long)o->dense_layers, qc);
    } else {
        int q = o->arch == DSQ_SYNTH_QWEN2;
        n = snprintf(buf, sizeof buf,
            "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n"
            "  \"vocab_size\": %lld,\n  \"hidden_size\": %lld,\n  \"intermediate_size\": %lld,\n"
            "  \"num_hidden_layers\": %lld,\n  \"num_attention_heads\": %lld,\n"
            "  \"num_key_value_heads\": %lld,\n  \"hidden_act\": \"silu\",\n  \"rms_norm_eps\": 1e-06,\n"
            "  \"max_position_embeddings\": 4096,\n  \"rope_theta\": 10000,\n"
            "  \"tie_word_embeddings\": false,\n  \"torch_dtype\": \"bfloat16\",\n"
            "  \"bos_token_id\": 0,\n  \"eos_token_id\": 1\n}\n",
            q ? "Qwen2ForCausalLM" : "LlamaForCausalLM", q ? "qwen2" : "llama",
            (long long)o->vocab, (long long)o->hidden, (long long)o->intermediate,
            (long long)o->layers, (long long)o->heads, (long long)o->kv_heads);
    }
    if (n < 0 || (size_t)n >= sizeof buf)
        return dsq_fail(d, DSQ_ERR_INTERNAL, dir, NULL, -1, "config.json text too long");
    DSQ_TRY(write_text(dir, "config.json", buf, fl, d));
    DSQ_TRY(write_text(dir, "tokenizer.json",
        "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 0, \"content\": \"<s>\", \"special\": true}, "
        "{\"id\": 1, \"content\": \"</s>\", \"special\": true}], "
        "\"model\": {\"type\": \"BPE\", \"vocab\": {\"<s>\": 0, \"</s>\": 1, \"a\": 2, \"b\": 3}, "
        "\"merges\": [\"a b\"]}}\n", fl, d));
    DSQ_TRY(write_text(dir, "tokenizer_config.json",
        "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"model_max_length\": 4096, "
        "\"tokenizer_class\": \"LlamaTokenizerFast\"}\n", fl, d));
    DSQ_TRY(write_text(dir, "generation_config.json",
        "{\"bos_token_id\": 0, \"eos_token_id\": 1, \"do_sample\": true, \"temperature\": 0.6, "
        "\"top_p\": 0.95}\n", fl, d));
    return DSQ_OK;
}

/* ---- public ---- */

void dsq_synth_defaults_v3(dsq_synth_opts *o)
{
    memset(o, 0, sizeof *o);
    o->arch = DSQ_SYNTH_DEEPSEEK_V3;
    o->hidden = 7168;
    o->intermediate = 18432;
    o->moe_intermediate = 2048;
    o->vocab = 129280;
    o->heads = o->kv_heads = 128;
    o->q_lora_rank = 1536;
    o->kv_lora_rank = 512;
    o->qk_nope = 128;
    o->qk_rope = 64;
    o->v_head = 128;
    o->layers = 1;
    o->dense_layers = 0;
    o->experts = 256;
    o->shared_experts = 1;
    o->experts_per_tok = 8;
    o->n_group = 8;
    o->topk_group = 4;
    o->dtype = DSQ_DTYPE_BF16;
    o->seed = 1;
}

void dsq_synth_defaults_tiny(dsq_synth_opts *o)
{
    dsq_synth_defaults_v3(o);
    o->hidden = 256;
    o->intermediate = 512;
    o->moe_intermediate = 128;
    o->vocab = 512;
    o->heads = o->kv_heads = 4;
    o->q_lora_rank = 96;
    o->kv_lora_rank = 64;
    o->qk_nope = 32;
    o->qk_rope = 16;
    o->v_head = 32;
    o->layers = 2;
    o->dense_layers = 1;
    o->experts = 8;
    o->experts_per_tok = 2;
    o->n_group = 2;
    o->topk_group = 1;
    o->mtp = 1;
}

static int check_opts(const dsq_synth_opts *o, dsq_diag *d)
{
    if (o->dtype != DSQ_DTYPE_BF16 && o->dtype != DSQ_DTYPE_F16 && o->dtype != DSQ_DTYPE_F32)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "synthetic dtype must be BF16, F16 or F32");
    if (o->hidden <= 0 || o->vocab <= 0 || o->heads <= 0 || o->layers < 0 || o->intermediate <= 0)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "synthetic dims must be positive");
    if (o->arch == DSQ_SYNTH_DEEPSEEK_V3) {
        if (o->kv_lora_rank <= 0 || o->qk_nope <= 0 || o->qk_rope <= 0 || o->v_head <= 0 ||
            o->experts < 0 || o->moe_intermediate <= 0 || o->dense_layers < 0 ||
            o->dense_layers > o->layers)
            return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "bad synthetic DeepSeek dims");
    } else if (o->kv_heads <= 0 || o->hidden % o->heads || o->heads % o->kv_heads) {
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "bad synthetic head counts");
    }
    return DSQ_OK;
}

/* Write tensors [a, b) of the list into one file. */
static int write_file(list *l, size_t a, size_t b, const char *path, unsigned fl, dsq_diag *d)
{
    dsq_st_writer *w = dsq_st_writer_create();
    if (!w) return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
    int rc = dsq_st_writer_set_meta(w, "format", "pt");
    for (size_t i = a; i < b && rc == DSQ_OK; i++) {
        entry *e = &l->v[i];
        rc = dsq_st_writer_add_lazy(w, e->name, e->dtype, e->ndim, e->shape, fill, e);
        if (rc < 0) dsq_fail(d, rc, path, e->name, -1, "cannot add synthetic tensor");
    }
    if (rc == DSQ_OK) rc = dsq_st_writer_write(w, path, 0, fl, d);
    dsq_st_writer_free(w);
    return rc;
}

static uint64_t entry_bytes(const entry *e)
{
    uint64_t n = (uint64_t)(e->ndim == 2 ? e->shape[0] * e->shape[1] : e->shape[0]);
    return n * dsq_dtype_bits(e->dtype) / 8;
}

int dsq_synth_write(const dsq_synth_opts *o, const char *dir, unsigned out_flags,
                    uint64_t *total_bytes, dsq_diag *d)
{
    DSQ_TRY(check_opts(o, d));
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return dsq_fail_errno(d, errno, dir, "cannot create directory");
    DSQ_TRY(write_config(o, dir, out_flags, d));

    list l = { 0 };
    build(&l, o);
    if (l.oom) { free(l.v); return dsq_fail(d, DSQ_ERR_NOMEM, dir, NULL, -1, "out of memory"); }
    uint64_t total = 0;
    for (size_t i = 0; i < l.n; i++) total += entry_bytes(&l.v[i]);
    int rc = DSQ_OK;
    if (!o->shard_bytes) {
        char *p = dsq_path_join(dir, "model.safetensors");
        rc = p ? write_file(&l, 0, l.n, p, out_flags, d)
               : dsq_fail(d, DSQ_ERR_NOMEM, dir, NULL, -1, "out of memory");
        free(p);
    } else {
        /* Like huggingface_hub: state-dict order, greedy, a tensor larger
         * than the limit gets a shard of its own; then the index. An FP8
         * weight and its scale stay in one shard. */
        size_t *first = calloc(l.n + 1, sizeof *first);
        int *shard_of = calloc(l.n + 1, sizeof *shard_of);
        int ns = 0;
        uint64_t acc = 0;
        if (!first || !shard_of) rc = dsq_fail(d, DSQ_ERR_NOMEM, dir, NULL, -1, "out of memory");
        for (size_t i = 0; rc == DSQ_OK && i < l.n; i++) {
            uint64_t sz = entry_bytes(&l.v[i]);
            int companion = l.v[i].kind == K_SCALE;
            if (i == 0 || (!companion && acc > 0 && acc + sz > o->shard_bytes)) {
                first[ns++] = i;
                acc = 0;
            }
            acc += sz;
            shard_of[i] = ns - 1;
        }
        if (first) first[ns] = l.n;
        char *idx = NULL;
        size_t cap = 256 + l.n * 256, len = 0;
        if (rc == DSQ_OK && !(idx = malloc(cap))) rc = dsq_fail(d, DSQ_ERR_NOMEM, dir, NULL, -1, "out of memory");
        if (rc == DSQ_OK)
            len += (size_t)snprintf(idx + len, cap - len,
                                    "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {",
                                    (unsigned long long)total);
        for (int s = 0; rc == DSQ_OK && s < ns; s++) {
            char name[64];
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, ns);
            char *p = dsq_path_join(dir, name);
            rc = p ? write_file(&l, first[s], first[s + 1], p, out_flags, d)
                   : dsq_fail(d, DSQ_ERR_NOMEM, dir, NULL, -1, "out of memory");
            free(p);
        }
        for (size_t i = 0; rc == DSQ_OK && i < l.n; i++)
            len += (size_t)snprintf(idx + len, cap - len, "%s\n    \"%s\": \"model-%05d-of-%05d.safetensors\"",
                                    i ? "," : "", l.v[i].name, shard_of[i] + 1, ns);
        if (rc == DSQ_OK) {
            len += (size_t)snprintf(idx + len, cap - len, "\n  }\n}\n");
            rc = write_text(dir, "model.safetensors.index.json", idx, out_flags, d);
        }
        free(idx);
        free(first);
        free(shard_of);
    }
    free(l.v);
    if (rc == DSQ_OK && total_bytes) *total_bytes = total;
    return rc;
}
