/* bench_engine.c - engine speed: prefill, decode and batched decode tokens/s,
 * next to what the machine can do.
 *
 *   bench_engine [-t threads] [-p prefill_tokens] [-n decode_steps] [-r reps]
 *                [-b bf16_terms] [-1] [-P] [-u] [MODEL ...]
 *
 * -b 1|2|3: dsq_model_opts.bf16_terms (BF16 weights: bf16 terms per f32
 * activation; default the engine's, 3, or DSQ_BF16_TERMS). 1 is llama.cpp's
 * numerics, for prefill comparisons at equal work.
 *
 * -u: the MoE layers' decode runs every expert's gemms as pool jobs of
 * their own (dsq_model_opts.moe_unbatched: the loop before one job per
 * projection; the same values), for A/B runs in one build.
 *
 * -P: after the timed runs, one more prefill and N decode steps with the
 * engine's per-op timers on (engine/prof.h): wall, CPU, GFLOP and weight
 * GB/s per op (run_profile).
 *
 * MODEL is anything dsq_model_open accepts (safetensors dir/file, .dsq).
 * Without models, two synthetic ones are written to a temp dir, a small
 * Llama-like and a small DeepSeek-V3-like (MLA + MoE), as BF16 safetensors
 * and as a .dsq for every scheme that needs no calibration, and each is
 * measured.
 *
 * Machine limits, measured first in the same run with the same thread
 * count: memory read bandwidth (sum over a 512 MB buffer, split over the
 * threads, the faster of one stream and four prefetched ones per thread;
 * and over an 8 MB one, which stays in the last level cache, the
 * limit for models whose weights fit there) and OpenBLAS sgemm GFLOP/s
 * (M = prefill tokens, N = K = 1024).
 * Each model line then gives prefill tok/s with its linear GFLOP/s (2 x the
 * active weights per token; MoE: shared + top-k experts; the last layer's
 * FFN for the last token only, as the engine runs it) as a fraction of
 * sgemm, and decode tok/s with the active weight bytes streamed per token
 * as a fraction of the memory bandwidth. Small models cannot approach
 * either limit (per-token overheads dominate); the fractions say how far.
 *
 * With -1 and more than one thread, prefill is measured again on a
 * 1-thread model (process CPU time), so one run gives the scaling
 * (bench_speed.sh runs -t 1 and -t 2 instead; without -1 prefill_t1_tok_s
 * is 0: not measured).
 *
 * Output: the human-readable lines, then per model one stable line
 *   result: model=NAME threads=N prefill_tokens=P prefill_tok_s=X
 *     prefill_t1_tok_s=X decode_tok_s=X decode_mb_per_tok=X decode_gbs=X
 *     read_bw_gbs=X decode_bw_pct=X batch_tok_s=X decode_cpu_ms_per_tok=X
 * (one line, space-separated key=value; scripts parse these;
 * decode_cpu_ms_per_tok: the least process CPU time of the decode runs per
 * token, every thread counted: on a shared machine a steadier measure of
 * the work than wall time).
 *
 * Timing: best of reps; with one thread, process CPU time (other jobs on a
 * shared machine do not count), else wall time. Speed only: correctness
 * lives in tests/test_engine.c. */
#include "container.h"
#include "dsq_error.h"
#include "dsq_file.h"
#include "dsq_mem.h"
#include "model.h"
#include "scheme.h"
#include "st_writer.h"
#include "dsq_thread.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int g_cpu_clock;   /* 1: process CPU time (one thread) */

static double now(void)
{
    struct timespec ts;
    clock_gettime(g_cpu_clock ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Process CPU seconds (every thread, spinning pool workers included). */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- machine limits ----------------------------------------------------- */

struct bw_job {
    const uint64_t *p;
    size_t n, per;
    int streams;   /* 1: one sequential stream per thread; 4: four, prefetched */
    uint64_t sum[64];
};

static void bw_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    struct bw_job *j = ctx;
    size_t i0 = item * j->per, i1 = i0 + j->per < j->n ? i0 + j->per : j->n;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    if (j->streams == 1) {
        for (size_t i = i0; i + 4 <= i1; i += 4) {
            s0 += j->p[i];
            s1 += j->p[i + 1];
            s2 += j->p[i + 2];
            s3 += j->p[i + 3];
        }
    } else {
        /* four streams a quarter of the slice apart, each line prefetched
         * 16 lines ahead: the access pattern of the decode kernels, which
         * read several rows at once and prefetch */
        const size_t q = (i1 - i0) / 4 / 8 * 8;
        const uint64_t *a = j->p + i0, *b = a + q, *c = b + q, *d = c + q;
        for (size_t i = 0; i + 8 <= q; i += 8) {
            __builtin_prefetch(a + i + 128);
            __builtin_prefetch(b + i + 128);
            __builtin_prefetch(c + i + 128);
            __builtin_prefetch(d + i + 128);
            for (int k = 0; k < 8; k++) {
                s0 += a[i + k];
                s1 += b[i + k];
                s2 += c[i + k];
                s3 += d[i + k];
            }
        }
    }
    j->sum[item] = s0 + s1 + s2 + s3;
}

/* Read bandwidth in GB/s: sum of a buffer (512 MB: DRAM; 8 MB: the last
 * level cache), one slice per thread. The buffer comes from
 * dsq_aligned_alloc, as the engine's weights do (2 MiB pages where the
 * kernel gives them): on 4 KiB pages this probe read 28-35 GB/s where the
 * weights streamed faster, and decode showed 110-119% "of" it. */
/* mode (may be NULL): the best of the one-stream and of the four-stream passes */
static double mem_bandwidth(dsq_pool *pool, size_t bytes, double mode[2])
{
    uint64_t *buf = dsq_aligned_alloc(bytes);
    if (!buf) return 0.0;
    memset(buf, 1, bytes);   /* touch every page first */
    int nt = dsq_pool_size(pool);
    if (nt > 64) nt = 64;
    struct bw_job j = { buf, bytes / 8, (bytes / 8 + (size_t)nt - 1) / (size_t)nt, 1, { 0 } };
    double best = 1e30, bm[2] = { 1e30, 1e30 };
    int saved = g_cpu_clock;
    g_cpu_clock = 0;   /* bandwidth is a wall-clock rate */
    const int reps = bytes > ((size_t)64 << 20) ? 3 : 50;
    /* the faster of one stream and four prefetched ones per thread, so the
     * limit is what the machine gives, not what one access pattern gets */
    for (int r = 0; r < 2 * reps; r++) {
        j.streams = r % 2 ? 4 : 1;
        double t0 = now();
        dsq_pool_run(pool, (size_t)nt, bw_task, &j);
        double dt = now() - t0;
        if (dt < best) best = dt;
        if (dt < bm[r % 2]) bm[r % 2] = dt;
    }
    g_cpu_clock = saved;
    for (int m = 0; mode && m < 2; m++) mode[m] = (double)bytes / bm[m] / 1e9;
    uint64_t s = 0;
    for (int i = 0; i < nt; i++) s += j.sum[i];
    free(buf);
    return s == 42 ? 0.0 : (double)bytes / best / 1e9;   /* use s: the loop is not dead */
}

/* OpenBLAS sgemm GFLOP/s with nt threads: [M x 1024] x [1024 x 1024]. */
static double sgemm_gflops(int nt, int M)
{
    const int N = 1024, K = 1024;
    float *a = malloc((size_t)M * K * sizeof *a), *b = malloc((size_t)N * K * sizeof *b),
          *c = malloc((size_t)M * N * sizeof *c);
    if (!a || !b || !c) { free(a); free(b); free(c); return 0.0; }
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)N * K; i++) b[i] = (float)(i % 5) * 0.1f;
    openblas_set_num_threads(nt);
    double best = 1e30;
    for (int r = 0; r < 4; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
        double dt = now() - t0;
        if (r > 0 && dt < best) best = dt;
    }
    openblas_set_num_threads(1);   /* the engine calls OpenBLAS from its pool */
    free(a); free(b); free(c);
    return 2.0 * M * N * K / best / 1e9;
}

static double g_bw, g_bw_llc, g_gf, g_bw_mode[2];

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

/* Active linear weights per token (elements and blob bytes): every linear
 * of every layer, routed experts weighted by top_k / n_experts (a token
 * visits top_k of them); the lm_head separately. */
static void lin_add(const dsq_linear *l, double frac, double *el, double *by)
{
    if (!l->w.scheme) return;
    *el += frac * (double)l->out * (double)l->in;
    *by += frac * (double)l->w.blob_size;
}

static void mlp_add(const dsq_mlp *p, double frac, double *el, double *by)
{
    lin_add(&p->gate, frac, el, by);
    lin_add(&p->up, frac, el, by);
    lin_add(&p->down, frac, el, by);
}

/* ffn_last: the elements of the last layer's FFN in el, which a prefill
 * with DSQ_FWD_LAST_LOGITS runs for its last token only (forward.c). */
static void active_weights(const dsq_model *m, double *el, double *by, double *head_el, double *head_by,
                           double *ffn_last)
{
    const dsq_weights *w = dsq_model_weights(m);
    const dsq_model_config *c = dsq_model_get_config(m);
    *el = *by = *head_el = *head_by = 0.0;
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        const dsq_layer *ly = &w->layers[l];
        const dsq_linear *ls[] = { &ly->q, &ly->k, &ly->v, &ly->o, &ly->q_a, &ly->q_b, &ly->kv_a, &ly->kv_b,
                                   &ly->router };
        for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) lin_add(ls[i], 1.0, el, by);
        const double el0 = *el;
        mlp_add(&ly->mlp, 1.0, el, by);
        if (ly->has_shared) mlp_add(&ly->shared, 1.0, el, by);
        if (ly->experts)
            for (int64_t e = 0; e < c->n_routed_experts; e++)
                mlp_add(&ly->experts[e], (double)c->num_experts_per_tok / (double)c->n_routed_experts, el, by);
        *ffn_last = *el - el0;
    }
    lin_add(&w->lm_head, 1.0, head_el, head_by);
}

/* Prefill tok/s of P tokens with a 1-thread model (process CPU time: the
 * single-thread figure that multi-core scaling is judged against). */
static int g_t1;   /* -1: also time prefill on one thread */
static int g_prof; /* -P: per-op profile of one more prefill */
static int g_terms; /* -b: dsq_model_opts.bf16_terms (0: default) */
static int g_unbatched; /* -u: dsq_model_opts.moe_unbatched (A/B of the MoE decode jobs) */

static double prefill_1thread(const char *path, int P, int reps)
{
    dsq_model_opts o;
    dsq_model_opts_default(&o);
    o.threads = 1;
    o.bf16_terms = g_terms;
    dsq_model *m;
    if (dsq_model_open(&m, path, &o, NULL) != 0) return 0.0;
    const int V = (int)dsq_model_get_config(m)->vocab_size;
    int32_t *toks = malloc((size_t)P * sizeof *toks);
    float *lg = malloc((size_t)V * sizeof *lg);
    dsq_state *s = dsq_state_create(m, 1, P + 8);
    double best = 1e30;
    int saved = g_cpu_clock, rc = (!toks || !lg || !s) ? -1 : 0;
    g_cpu_clock = 1;
    for (int i = 0; i < P && toks; i++) toks[i] = (int32_t)((i * 7919 + 13) % V);
    for (int r = 0; r < reps && rc == 0; r++) {
        dsq_state_truncate(s, 0, 0);
        double t0 = now();
        rc = dsq_forward(m, s, 0, toks, P, lg, DSQ_FWD_LAST_LOGITS, NULL);
        double dt = now() - t0;
        best = dt < best ? dt : best;
    }
    g_cpu_clock = saved;
    free(toks);
    free(lg);
    dsq_state_free(s);
    dsq_model_free(m);
    return rc == 0 ? P / best : 0.0;
}

/* -P: one more prefill of the same P tokens, then N more decode steps,
 * with the engine's per-op timers on (prof.h), each printed as a table:
 * wall and process CPU seconds per op (CPU / wall near the thread count:
 * both threads busy; near 1: serial; spinning pool workers count as busy),
 * GFLOP counted per linear (2 x rows x cols x tokens) and attention, and
 * for decode the weight bytes each op streamed (linears: their blob) as
 * GB/s of its wall time. Per call figures are totals over the run. */
static void profile_table(const dsq_prof *pf, const char *what, int tokens, double wall)
{
    double sw = 0, sc = 0, sf = 0, sb = 0;
    printf("  profile, %s (%.1f ms wall):\n  %-46s %6s %9s %9s %5s %8s %7s %7s\n", what, wall * 1e3, "op", "calls",
           "wall ms", "cpu ms", "cpu/w", "GFLOP", "GF/s", "GB/s");
    for (int i = 0; i < pf->n; i++) {
        const dsq_prof_op *o = &pf->op[i];
        const char *name = strncmp(o->name, "model.layers.*.", 15) == 0 ? o->name + 15 : o->name;
        printf("  %-46.46s %6ld %9.2f %9.2f %5.2f %8.3f %7.1f %7.1f\n", name, o->calls, o->wall * 1e3, o->cpu * 1e3,
               o->wall > 0 ? o->cpu / o->wall : 0.0, o->flop / 1e9, o->wall > 0 ? o->flop / o->wall / 1e9 : 0.0,
               o->wall > 0 ? o->bytes / o->wall / 1e9 : 0.0);
        sw += o->wall;
        sc += o->cpu;
        sf += o->flop;
        sb += o->bytes;
    }
    printf("  %-46s %6s %9.2f %9.2f %5.2f %8.3f %7.1f %7.1f\n  (untimed: %.2f ms wall; per token: %.3f GFLOP, "
           "%.1f MB, %.3f ms wall)\n",
           "total", "", sw * 1e3, sc * 1e3, sw > 0 ? sc / sw : 0.0, sf / 1e9, sw > 0 ? sf / sw / 1e9 : 0.0,
           sw > 0 ? sb / sw / 1e9 : 0.0, (wall - sw) * 1e3, sf / 1e9 / tokens, sb / 1e6 / tokens,
           wall * 1e3 / tokens);
}

static int run_profile(dsq_model *m, dsq_state *s, const int32_t *toks, int P, int N, float *lg, dsq_diag *d)
{
    dsq_prof *pf = calloc(1, sizeof *pf);
    if (!pf) return DSQ_ERR_NOMEM;
    dsq_state_truncate(s, 0, 0);
    const int saved = g_cpu_clock;
    g_cpu_clock = 0;
    m->prof = pf;
    double t0 = now();
    int rc = dsq_forward(m, s, 0, toks, P, lg, DSQ_FWD_LAST_LOGITS, d);
    double wall = now() - t0;
    char what[96];
    snprintf(what, sizeof what, "one prefill of %d tokens", P);
    profile_table(pf, what, P, wall);
    dsq_prof_reset(pf);
    t0 = now();
    for (int i = 0; i < N && rc == 0; i++) rc = dsq_forward(m, s, 0, toks + P + i, 1, lg, 0, d);
    wall = now() - t0;
    snprintf(what, sizeof what, "%d decode steps", N);
    profile_table(pf, what, N, wall);
    m->prof = NULL;
    g_cpu_clock = saved;
    free(pf);
    return rc;
}

static int bench_one(const char *path, int threads, int P, int N, int reps)
{
    dsq_model_opts o;
    dsq_model_opts_default(&o);
    o.threads = threads;
    o.bf16_terms = g_terms;
    o.moe_unbatched = g_unbatched;
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

    double t_pre = 1e30, t_dec = 1e30, t_bat = 1e30, c_dec = 1e30;
    for (int r = 0; r < reps && rc == 0; r++) {
        dsq_state_truncate(s, 0, 0);
        t0 = now();
        rc = dsq_forward(m, s, 0, toks, P, lg, DSQ_FWD_LAST_LOGITS, &d);
        double dt = now() - t0;
        t_pre = dt < t_pre ? dt : t_pre;
        t0 = now();
        const double c0 = cpu_now();
        for (int i = 0; i < N && rc == 0; i++) rc = dsq_forward(m, s, 0, toks + P + i, 1, lg, 0, &d);
        dt = now() - t0;
        const double dc = cpu_now() - c0;
        t_dec = dt < t_dec ? dt : t_dec;
        c_dec = dc < c_dec ? dc : c_dec;
        /* batched decode: B sequences with a short shared prompt */
        int active[8];
        int32_t bt[8];
        for (int b = 1; b < B && rc == 0; b++) {
            dsq_state_truncate(s, b, 0);
            rc = dsq_forward(m, s, b, toks, 4, NULL, 0, &d);
        }
        for (int b = 0; b < B; b++) { active[b] = b; bt[b] = toks[b]; }
        dsq_state_truncate(s, 0, 4);
        t0 = now();
        for (int i = 0; i < N / 2 && rc == 0; i++) rc = dsq_forward_batch_decode(m, s, bt, active, B, lg, &d);
        dt = now() - t0;
        t_bat = dt < t_bat ? dt : t_bat;
    }
    if (rc) { fprintf(stderr, "bench_engine: %s: forward failed: %s\n", path, d.msg); return 1; }
    if (g_prof && (rc = run_profile(m, s, toks, P, N, lg, &d)) != 0) {
        fprintf(stderr, "bench_engine: %s: profiled forward failed: %s\n", path, d.msg);
        return 1;
    }

    double el, by, hel, hby, ffn_last = 0.0;
    active_weights(m, &el, &by, &hel, &hby, &ffn_last);
    const double pre = P / t_pre, dec = N / t_dec, bat = B * (N / 2) / t_bat;
    /* linear FLOPs per prefill token: every layer for every token except the
     * last layer's FFN, which runs for the last token only; lm_head: the
     * last token only (not counted) */
    const double pre_gf = 2.0 * (el - ffn_last * (P - 1) / P) * pre / 1e9;
    const double dec_gbs = (by + hby) * dec / 1e9;
    /* weights that fit the last level cache are read from it, not DRAM */
    const int in_llc = dsq_model_weight_bytes(m) <= ((uint64_t)16 << 20);
    const double bw = in_llc ? g_bw_llc : g_bw;
    char info[512];
    dsq_model_info(m, info, sizeof info);
    const char *base = strrchr(path, '/');
    printf("%-24s prefill %8.1f tok/s (%6.2f GF/s, %4.1f%% sgemm)  decode %7.1f tok/s (%5.2f MB/tok, %4.1f%% %s BW)"
           "  batch%d %7.1f tok/s\n    [%s; open %.2fs]\n",
           base ? base + 1 : path, pre, pre_gf, 100.0 * pre_gf / g_gf, dec, (by + hby) / 1e6,
           100.0 * dec_gbs / bw, in_llc ? "cache" : "DRAM", B, bat, info, t_open);
    /* one stable, parseable line per model (bench/bench_speed.sh): keys never
     * change meaning; decode_gbs = active weight bytes per token x tok/s,
     * decode_bw_pct = that over the read bandwidth measured in this run */
    const int nt = threads > 0 ? threads : dsq_cpu_count();
    const double pre1 = nt == 1 ? pre : g_t1 ? prefill_1thread(path, P, reps) : 0.0;
    printf("result: model=%s threads=%d prefill_tokens=%d prefill_tok_s=%.2f prefill_t1_tok_s=%.2f "
           "decode_tok_s=%.2f decode_mb_per_tok=%.3f decode_gbs=%.3f read_bw_gbs=%.3f decode_bw_pct=%.1f "
           "batch_tok_s=%.2f decode_cpu_ms_per_tok=%.3f\n",
           base ? base + 1 : path, nt, P, pre, pre1, dec, (by + hby) / 1e6, dec_gbs, bw,
           100.0 * dec_gbs / bw, bat, c_dec * 1e3 / N);
    fflush(stdout);
    free(toks);
    free(lg);
    dsq_state_free(s);
    dsq_model_free(m);
    return 0;
}

int main(int argc, char **argv)
{
    int threads = 0, P = 128, N = 32, reps = 3, opt;
    while ((opt = getopt(argc, argv, "t:p:n:r:b:1Puh")) != -1) {
        switch (opt) {
        case 'u': g_unbatched = 1; break;
        case '1': g_t1 = 1; break;
        case 'P': g_prof = 1; break;
        case 'b':
            g_terms = atoi(optarg);
            if (g_terms < 1 || g_terms > 3) {
                fprintf(stderr, "bench_engine: -b: expected 1..3, got '%s'\n", optarg);
                return 2;
            }
            break;
        case 't': threads = atoi(optarg); break;
        case 'p': P = atoi(optarg); break;
        case 'n': N = atoi(optarg); break;
        case 'r': reps = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: bench_engine [-t threads] [-p prefill] [-n decode] [-r reps] [-b bf16_terms] [-1] [-P] [-u] [MODEL ...]\n");
            return opt == 'h' ? 0 : 2;
        }
    }
    if (P < 1 || N < 2 || reps < 1) {
        fprintf(stderr, "bench_engine: need -p >= 1, -n >= 2 (batched decode runs n / 2 steps), -r >= 1\n");
        return 2;
    }
    const int nt = threads > 0 ? threads : dsq_cpu_count();
    g_cpu_clock = nt == 1;
    dsq_pool *pool = dsq_pool_create(nt);
    g_bw = mem_bandwidth(pool, (size_t)512 << 20, g_bw_mode);
    g_bw_llc = mem_bandwidth(pool, (size_t)8 << 20, NULL);
    dsq_pool_free(pool);
    g_gf = sgemm_gflops(nt, P);
    printf("engine bench: %d thread(s), prefill %d tokens, decode %d steps, best of %d (%s time)%s\n"
           "machine: memory read %.1f GB/s (512 MB; best pass of one stream %.1f, of four streams %.1f), "
           "%.1f GB/s (8 MB, cache), OpenBLAS sgemm %.1f GFLOP/s ([%d x 1024] x [1024 x 1024])\n",
           nt, P, N, reps, g_cpu_clock ? "process CPU" : "wall",
           g_terms == 1 ? ", bf16 terms 1" : g_terms == 2 ? ", bf16 terms 2" : g_terms == 3 ? ", bf16 terms 3" : "",
           g_bw, g_bw_mode[0], g_bw_mode[1], g_bw_llc, g_gf, P);
    int fails = 0;
    if (optind < argc) {
        for (int i = optind; i < argc; i++) fails += bench_one(argv[i], threads, P, N, reps);
        return fails ? 1 : 0;
    }
    char tmpl[] = "/tmp/dsq-bench-XXXXXX";
    char *dir = mkdtemp(tmpl);
    if (!dir) { perror("bench_engine: mkdtemp"); return 1; }
    printf("synthetic models in %s\n", dir);
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
            fails += bench_one(path, threads, P, N, reps);
            free(path);
        }
    }
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_engine: could not remove %s\n", dir);
    return fails ? 1 : 0;
}
