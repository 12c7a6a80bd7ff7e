/* bench_engine.c - engine speed: prefill, decode and batched decode tokens/s.
 *
 *   bench_engine [-t threads] [-p prefill_tokens] [-n decode_steps] [MODEL ...]
 *
 * MODEL is anything dsq_model_open accepts (safetensors dir/file, .dsq).
 * Without models, two synthetic ones are written to a temp dir, a small
 * Llama-like and a small DeepSeek-V3-like (MLA + MoE), as BF16 safetensors
 * and as a .dsq for every scheme that needs no calibration, and each is
 * measured. Speed only: correctness lives in tests/test_engine.c. */
#include "container.h"
#include "dsq_error.h"
#include "dsq_file.h"
#include "dsq_mem.h"
#include "model.h"
#include "scheme.h"
#include "st_writer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- synthetic models ------------------------------------------------- */

typedef struct synth {
    dsq_st_writer *st;
    dsq_ctr_writer *ctr;
    const dsq_scheme *sc;   /* scheme for layer linears (ctr only) */
    uint64_t rng;
    int failed;
} synth;

static float frand(synth *s)
{
    s->rng = s->rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((s->rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static void put(synth *s, const char *name, int64_t rows, int64_t cols, float scale, float base, int linear)
{
    int64_t n = rows * (cols ? cols : 1);
    float *f = malloc((size_t)n * sizeof *f);
    for (int64_t i = 0; i < n; i++) f[i] = base + scale * frand(s);
    int64_t shape[2] = { rows, cols };
    int ndim = cols ? 2 : 1;
    if (s->st) {
        uint16_t *b = malloc((size_t)n * 2);
        for (int64_t i = 0; i < n; i++) b[i] = dsq_f32_to_bf16(f[i]);
        s->failed |= dsq_st_writer_add_copy(s->st, name, DSQ_DTYPE_BF16, ndim, shape, b, (uint64_t)n * 2) != 0;
        free(b);
    } else {
        dsq_ctr_tensor_info info;
        memset(&info, 0, sizeof info);
        info.name = name;
        info.ndim = (uint32_t)ndim;
        info.shape[0] = rows;
        info.shape[1] = cols;
        info.src_dtype = "BF16";
        if (ndim == 2) {
            const dsq_scheme *sc = linear ? s->sc : dsq_scheme_by_id(DSQ_SCHEME_BF16);
            dsq_qshape qs;
            size_t size = 0;
            uint8_t *blob = NULL;
            int rc = dsq_qshape_init(&qs, sc, rows, cols, DSQ_GROUP_DEFAULT);
            if (rc == 0) rc = sc->blob_size(&qs, &size);
            if (rc == 0 && !(blob = dsq_aligned_alloc(size))) rc = DSQ_ERR_NOMEM;
            if (rc == 0) {
                memset(blob, 0, size);
                rc = dsq_quantize_tensor(sc, f, &qs, NULL, blob, NULL, NULL);
            }
            info.scheme = sc->id;
            if (rc == 0) rc = dsq_ctr_writer_add(s->ctr, &info, blob, size, 0, NULL);
            s->failed |= rc != 0;
            free(blob);
        } else {
            info.scheme = DSQ_SCHEME_F32;
            info.src_dtype = "F32";
            s->failed |= dsq_ctr_writer_add(s->ctr, &info, f, (size_t)n * 4, 0, NULL) != 0;
        }
    }
    free(f);
}

static void putf(synth *s, int64_t r, int64_t c, float sc, float base, int lin, const char *fmt, int l, int e)
{
    char name[160];
    snprintf(name, sizeof name, fmt, l, e);
    put(s, name, r, c, sc, base, lin);
}

enum { LL_D = 512, LL_L = 4, LL_H = 8, LL_KVH = 2, LL_F = 1536, VOCAB = 4096 };
enum { DS_D = 512, DS_L = 4, DS_H = 8, DS_QL = 256, DS_R = 128, DS_NOPE = 64, DS_ROPE = 32, DS_V = 64,
       DS_E = 16, DS_K = 4, DS_F = 256, DS_FD = 1024 };

static void mlp(synth *s, int l, const char *p, int e, int D, int F)
{
    char fmt[160];
    snprintf(fmt, sizeof fmt, "%s.gate_proj.weight", p);
    putf(s, F, D, 1.0f / sqrtf((float)D), 0, 1, fmt, l, e);
    snprintf(fmt, sizeof fmt, "%s.up_proj.weight", p);
    putf(s, F, D, 1.0f / sqrtf((float)D), 0, 1, fmt, l, e);
    snprintf(fmt, sizeof fmt, "%s.down_proj.weight", p);
    putf(s, D, F, 1.0f / sqrtf((float)F), 0, 1, fmt, l, e);
}

static const char *synth_model(synth *s, int deepseek, char *config, size_t csz)
{
    const int D = deepseek ? DS_D : LL_D, L = deepseek ? DS_L : LL_L;
    put(s, "model.embed_tokens.weight", VOCAB, D, 1.0f, 0, 0);
    put(s, "model.norm.weight", D, 0, 0.1f, 1.0f, 0);
    put(s, "lm_head.weight", VOCAB, D, 0.1f, 0, 0);
    for (int l = 0; l < L; l++) {
        putf(s, D, 0, 0.1f, 1.0f, 0, "model.layers.%d.input_layernorm.weight", l, 0);
        putf(s, D, 0, 0.1f, 1.0f, 0, "model.layers.%d.post_attention_layernorm.weight", l, 0);
        float a = 1.0f / sqrtf((float)D);
        if (deepseek) {
            putf(s, DS_QL, D, a, 0, 1, "model.layers.%d.self_attn.q_a_proj.weight", l, 0);
            putf(s, DS_QL, 0, 0.1f, 1.0f, 0, "model.layers.%d.self_attn.q_a_layernorm.weight", l, 0);
            putf(s, DS_H * (DS_NOPE + DS_ROPE), DS_QL, 0.06f, 0, 1, "model.layers.%d.self_attn.q_b_proj.weight", l, 0);
            putf(s, DS_R + DS_ROPE, D, a, 0, 1, "model.layers.%d.self_attn.kv_a_proj_with_mqa.weight", l, 0);
            putf(s, DS_R, 0, 0.1f, 1.0f, 0, "model.layers.%d.self_attn.kv_a_layernorm.weight", l, 0);
            putf(s, DS_H * (DS_NOPE + DS_V), DS_R, 0.09f, 0, 1, "model.layers.%d.self_attn.kv_b_proj.weight", l, 0);
            putf(s, D, DS_H * DS_V, 0.04f, 0, 1, "model.layers.%d.self_attn.o_proj.weight", l, 0);
            if (l == 0) {
                mlp(s, l, "model.layers.%d.mlp", 0, D, DS_FD);
            } else {
                putf(s, DS_E, D, a, 0, 0, "model.layers.%d.mlp.gate.weight", l, 0);
                putf(s, DS_E, 0, 0.1f, 0, 0, "model.layers.%d.mlp.gate.e_score_correction_bias", l, 0);
                for (int e = 0; e < DS_E; e++) mlp(s, l, "model.layers.%d.mlp.experts.%d", e, D, DS_F);
                mlp(s, l, "model.layers.%d.mlp.shared_experts", 0, D, DS_F);
            }
        } else {
            putf(s, LL_H * 64, D, a, 0, 1, "model.layers.%d.self_attn.q_proj.weight", l, 0);
            putf(s, LL_KVH * 64, D, a, 0, 1, "model.layers.%d.self_attn.k_proj.weight", l, 0);
            putf(s, LL_KVH * 64, D, a, 0, 1, "model.layers.%d.self_attn.v_proj.weight", l, 0);
            putf(s, D, LL_H * 64, a, 0, 1, "model.layers.%d.self_attn.o_proj.weight", l, 0);
            mlp(s, l, "model.layers.%d.mlp", 0, D, LL_F);
        }
    }
    if (deepseek)
        snprintf(config, csz,
                 "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"vocab_size\": %d, \"hidden_size\": %d,"
                 "\"intermediate_size\": %d, \"moe_intermediate_size\": %d, \"num_hidden_layers\": %d,"
                 "\"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"q_lora_rank\": %d, \"kv_lora_rank\": %d,"
                 "\"qk_nope_head_dim\": %d, \"qk_rope_head_dim\": %d, \"v_head_dim\": %d, \"n_routed_experts\": %d,"
                 "\"n_shared_experts\": 1, \"num_experts_per_tok\": %d, \"n_group\": 4, \"topk_group\": 2,"
                 "\"topk_method\": \"noaux_tc\", \"scoring_func\": \"sigmoid\", \"routed_scaling_factor\": 2.5,"
                 "\"norm_topk_prob\": true, \"first_k_dense_replace\": 1, \"moe_layer_freq\": 1,"
                 "\"hidden_act\": \"silu\", \"rms_norm_eps\": 1e-6, \"max_position_embeddings\": 4096,"
                 "\"rope_theta\": 10000, \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4, \"beta_fast\": 32,"
                 "\"beta_slow\": 1, \"mscale\": 1, \"mscale_all_dim\": 1, \"original_max_position_embeddings\": 1024}}",
                 VOCAB, D, DS_FD, DS_F, L, DS_H, DS_H, DS_QL, DS_R, DS_NOPE, DS_ROPE, DS_V, DS_E, DS_K);
    else
        snprintf(config, csz,
                 "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": %d, \"hidden_size\": %d,"
                 "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d,"
                 "\"num_key_value_heads\": %d, \"hidden_act\": \"silu\", \"rms_norm_eps\": 1e-5,"
                 "\"max_position_embeddings\": 4096, \"rope_theta\": 10000.0}",
                 VOCAB, D, LL_F, L, LL_H, LL_KVH);
    return s->failed ? NULL : config;
}

/* Writes <dir>/<name>/ (safetensors) or <dir>/<name>.dsq; returns the path. */
static char *write_synth(const char *dir, int deepseek, const dsq_scheme *sc)
{
    char path[4200], config[4096];
    synth s;
    memset(&s, 0, sizeof s);
    s.rng = 42;
    s.sc = sc;
    const char *arch = deepseek ? "dsv3" : "llama";
    if (!sc) {
        snprintf(path, sizeof path, "%s/%s-bf16", dir, arch);
        if (mkdir(path, 0755) != 0) return NULL;
        s.st = dsq_st_writer_create();
        if (!synth_model(&s, deepseek, config, sizeof config)) return NULL;
        char p[4300];
        snprintf(p, sizeof p, "%s/config.json", path);
        if (dsq_write_file_atomic(p, config, strlen(config), DSQ_OUT_OVERWRITE, NULL) != 0) return NULL;
        snprintf(p, sizeof p, "%s/model.safetensors", path);
        int rc = dsq_st_writer_write(s.st, p, 0, DSQ_OUT_OVERWRITE, NULL);
        dsq_st_writer_free(s.st);
        return rc == 0 ? strdup(path) : NULL;
    }
    snprintf(path, sizeof path, "%s/%s-%s.dsq", dir, arch, sc->name);
    if (dsq_ctr_writer_open(&s.ctr, path, DSQ_OUT_OVERWRITE, NULL) != 0) return NULL;
    if (!synth_model(&s, deepseek, config, sizeof config)) { dsq_ctr_writer_abort(s.ctr); return NULL; }
    char *meta = malloc(strlen(config) + 32);
    sprintf(meta, "{\"config\": %s}", config);
    int rc = dsq_ctr_writer_set_metadata(s.ctr, meta, NULL);
    free(meta);
    if (rc != 0) { dsq_ctr_writer_abort(s.ctr); return NULL; }
    return dsq_ctr_writer_finish(s.ctr, NULL) == 0 ? strdup(path) : NULL;
}

/* ---- measurement ------------------------------------------------------ */

static int bench_one(const char *path, int threads, int P, int N)
{
    dsq_model_opts o;
    dsq_model_opts_default(&o);
    o.threads = threads;
    dsq_model *m;
    dsq_diag d;
    dsq_diag_clear(&d);
    double t0 = now();
    int rc = dsq_model_open(&m, path, &o, &d);
    if (rc) {
        char buf[1200];
        dsq_diag_format(&d, buf, sizeof buf);
        fprintf(stderr, "bench_engine: %s: %s\n", path, buf);
        return 1;
    }
    double t_open = now() - t0;
    const int V = (int)dsq_model_get_config(m)->vocab_size, B = 8;
    int32_t *toks = malloc((size_t)(P + N) * sizeof *toks);
    for (int i = 0; i < P + N; i++) toks[i] = (int32_t)((i * 7919 + 13) % V);
    float *lg = malloc((size_t)V * B * sizeof *lg);
    dsq_state *s = dsq_state_create(m, B, P + N + 8);
    if (!s || !toks || !lg) { fprintf(stderr, "bench_engine: out of memory\n"); return 1; }

    t0 = now();
    rc = dsq_forward(m, s, 0, toks, P, lg, DSQ_FWD_LAST_LOGITS, &d);
    double t_pre = now() - t0;
    t0 = now();
    for (int i = 0; i < N && rc == 0; i++) rc = dsq_forward(m, s, 0, toks + P + i, 1, lg, 0, &d);
    double t_dec = now() - t0;
    /* batched decode: B sequences with a short shared prompt */
    int active[8];
    int32_t bt[8];
    for (int b = 1; b < B && rc == 0; b++) rc = dsq_forward(m, s, b, toks, 4, NULL, 0, &d);
    for (int b = 0; b < B; b++) { active[b] = b; bt[b] = toks[b]; }
    dsq_state_truncate(s, 0, 4);
    t0 = now();
    for (int i = 0; i < N / 2 && rc == 0; i++) rc = dsq_forward_batch_decode(m, s, bt, active, B, lg, &d);
    double t_bat = now() - t0;
    if (rc) { fprintf(stderr, "bench_engine: %s: forward failed: %s\n", path, d.msg); return 1; }

    char info[512];
    dsq_model_info(m, info, sizeof info);
    const char *base = strrchr(path, '/');
    printf("%-28s open %6.2fs  prefill %8.1f tok/s  decode %7.1f tok/s  batch%d %7.1f tok/s  [%s]\n",
           base ? base + 1 : path, t_open, P / t_pre, N / t_dec, B, B * (N / 2) / t_bat, info);
    fflush(stdout);
    free(toks);
    free(lg);
    dsq_state_free(s);
    dsq_model_free(m);
    return 0;
}

int main(int argc, char **argv)
{
    int threads = 0, P = 128, N = 32, opt;
    while ((opt = getopt(argc, argv, "t:p:n:h")) != -1) {
        switch (opt) {
        case 't': threads = atoi(optarg); break;
        case 'p': P = atoi(optarg); break;
        case 'n': N = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: bench_engine [-t threads] [-p prefill] [-n decode] [MODEL ...]\n");
            return opt == 'h' ? 0 : 2;
        }
    }
    if (P < 1 || N < 2) return 2;
    int fails = 0;
    if (optind < argc) {
        for (int i = optind; i < argc; i++) fails += bench_one(argv[i], threads, P, N);
        return fails ? 1 : 0;
    }
    char tmpl[] = "/tmp/dsq-bench-XXXXXX";
    char *dir = mkdtemp(tmpl);
    if (!dir) { perror("bench_engine: mkdtemp"); return 1; }
    printf("engine bench: %d threads, prefill %d tokens, decode %d steps (synthetic models in %s)\n",
           threads > 0 ? threads : dsq_cpu_count(), P, N, dir);
    for (int deepseek = 0; deepseek < 2; deepseek++) {
        for (int i = -1; i < dsq_scheme_count(); i++) {
            const dsq_scheme *sc = i < 0 ? NULL : dsq_scheme_at(i);
            if (i >= 0 && !sc) continue;
            if (sc && (sc->needs_calibration || sc->id == DSQ_SCHEME_F32)) continue;
            char *path = write_synth(dir, deepseek, sc);
            if (!path) {
                fprintf(stderr, "bench_engine: cannot write synthetic %s model (%s)\n",
                        deepseek ? "dsv3" : "llama", sc ? sc->name : "bf16");
                fails++;
                continue;
            }
            fails += bench_one(path, threads, P, N);
            free(path);
        }
    }
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_engine: could not remove %s\n", dir);
    return fails ? 1 : 0;
}
