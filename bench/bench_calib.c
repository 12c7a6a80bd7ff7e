/* bench_calib.c - calibration time and peak RSS on one synthetic DeepSeek-V3
 * MoE layer with the real shapes (hidden 7168, MLA q_lora 1536 / kv_lora 512,
 * 128 heads, moe_intermediate 2048, top-8 routing, 1 shared expert).
 *
 *   build/bench/bench_calib [--experts E] [--samples N] [--seqlen L]
 *                           [--scheme S] [-T threads] [--moe-all] [--gptq] [--dir D]
 *   build/bench/bench_calib [--scheme S] --gptq-solve ROWS COLS [GROUP]
 *   build/bench/bench_calib [-T threads] --gptq-hess ROWS COLS
 *
 * Defaults: 32 of the 256 experts and 8 samples x 512 tokens, so it runs in
 * minutes on a small box; --experts 256 --samples 128 is the full case
 * (a 23 GB BF16 checkpoint; the layer is memory-mapped, so RSS includes it).
 * The checkpoint is generated once into D (default bench/out/calib-v3-E<E>).
 * Tokens are random ids (calibration cost does not depend on the text).
 *
 * Output: one JSON line with the measurement, then an extrapolation to the
 * full layer (256 experts, 128 x 512 tokens) and to the 61-layer model:
 *   - forward + statistics cost is per token and, with top-8 routing, does
 *     not depend on the number of experts: it scales with tokens;
 *   - the non-expert search (attention groups) is capped by the token
 *     reservoirs (512 rows), so it is a per-layer constant;
 *   - the MoE search (post_attention_layernorm group over every expert, and
 *     each expert's up -> down) is per expert (64 sampled rows each): it
 *     scales with the number of experts;
 *   - the 3 dense layers of V3 cost about what an MoE layer costs (18432-wide
 *     MLP = 9 x 2048 experts per token), so 61 x one layer is the estimate.
 * cpu_share = CPU seconds / (wall seconds x threads): below 1 when other
 * processes competed for the cores (then wall times overstate the cost).
 * --gptq adds GPTQ (calib/gptq.h): X^T X of every linear input during the
 * forward (non-expert inputs; routed experts keep their rows and build H
 * when quantized), one solve per integer linear; "gptq" seconds are both,
 * also counted inside forward_stats / search. gptq_hessian_bytes: the
 * layer's Hessians + kept MoE rows (calib.h gives the 671B figures).
 * With --gptq, "gptq_solve" is the parallel solve phase (calib.c
 * gptq_phase: one task per routed expert's gate/up, its down, and each
 * non-expert input site; as many at once as threads and ram_limit allow):
 * its wall and process CPU seconds per layer and the lanes used. --dir
 * may name any existing checkpoint (e.g. samples/tiny-dsv3): token ids are
 * then drawn below its config's vocab_size, and the V3 extrapolation is
 * printed only for hidden_size 7168.
 * --gptq-solve ROWS COLS [GROUP] times one GPTQ solve of a random problem of
 * that shape (scheme --scheme, OpenBLAS single-threaded as in calibration):
 * CPU seconds of the factorization and of the column loop, the per-linear
 * cost at scale without the forward (e.g. 2048 7168: an expert's gate;
 * give --scheme before it).
 * --gptq-hess ROWS COLS times the Hessian accumulation of the forward pass
 * (dsq_gptq_hset_add: X^T X of ROWS rows of a COLS-wide input, tiles on the
 * -T pool; give -T before it; H already allocated and touched, as from the
 * second sample on), wall and process CPU seconds, next to the
 * previous method on the same rows in the same run (one double dsyrk per
 * 256 rows on one thread) and the largest difference between the two
 * relative to sqrt(H_ii H_jj). 512 16384 is one sample of o_proj's input;
 * a V3 layer adds 128 such samples for o_proj and for two 7168-wide inputs.
 * Speed only; correctness is tests/test_calib_*.c and tests/test_gptq.c. */
#include "calib.h"
#include <cblas.h>
#include "gptq.h"
#include "cli.h"
#include "dsq_file.h"
#include "synth_ckpt.h"

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct prog { double last; int quiet; } prog;

static void on_progress(void *ctx, const dsq_calib_progress *p)
{
    prog *g = ctx;
    if (g->quiet || p->seconds - g->last < 10.0) return;
    g->last = p->seconds;
    fprintf(stderr, "  [%6.0f s] layer %d %s %d/%d\n", p->seconds, p->layer, p->phase, p->sample + 1, p->n_samples);
}

static int solve_bench(const char *scheme, int64_t rows, int64_t cols, int32_t group)
{
    const dsq_scheme *sc = dsq_scheme_by_name(scheme);
    dsq_qshape sh;
    if (!sc || dsq_qshape_init(&sh, sc, rows, cols, group) < 0) {
        fprintf(stderr, "bench_calib: bad scheme / shape\n");
        return 2;
    }
    openblas_set_num_threads(1);
    const int64_t T = 2048;   /* about an expert's routed rows at 128 x 512 tokens (dampening keeps H definite) */
    float *x = malloc((size_t)(T * cols) * sizeof *x), *w = malloc((size_t)(rows * cols) * sizeof *w);
    double *h = calloc((size_t)(cols * cols), sizeof *h);
    size_t bs = 0;
    sc->blob_size(&sh, &bs);
    uint8_t *blob = malloc(bs);
    if (!x || !w || !h || !blob) return 1;
    uint64_t st = 7;
    for (int64_t i = 0; i < T * cols; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(st >> 11) / 9007199254740992.0 - 0.5);
    }
    for (int64_t i = 0; i < rows * cols; i++) w[i] = x[i] * 0.1f;
    double c0 = cpu_seconds(), t0 = now();
    dsq_gptq_hess_add(h, cols, x, T);
    double ch = cpu_seconds() - c0;
    dsq_gptq_factor f;
    dsq_diag d;
    dsq_diag_clear(&d);
    c0 = cpu_seconds();
    int rc = dsq_gptq_factor_init(&f, h, cols, 0.0, &d);
    double cf = cpu_seconds() - c0;
    dsq_qparams qp;
    dsq_qparams_init(&qp);
    if (sc->act == DSQ_ACT_INT8_STATIC) {
        qp.has_act_static = 1;
        qp.act_scale = 0.01f;
    }
    c0 = cpu_seconds();
    if (rc == DSQ_OK) rc = dsq_gptq_quantize_f(sc, &sh, w, &f, NULL, &qp, blob, NULL, &d);
    double cs = cpu_seconds() - c0;
    if (rc < 0) {
        fprintf(stderr, "bench_calib: %s\n", d.msg);
        return 1;
    }
    printf("{\"bench\": \"gptq_solve\", \"scheme\": \"%s\", \"rows\": %lld, \"cols\": %lld, \"group\": %d, "
           "\"cpu_seconds\": {\"hessian_%lld_rows\": %.2f, \"factor\": %.2f, \"solve_pack\": %.2f}, "
           "\"wall_seconds\": %.2f}\n",
           scheme, (long long)rows, (long long)cols, (int)sh.group_size, (long long)T, ch, cf, cs, now() - t0);
    dsq_gptq_factor_release(&f);
    free(x);
    free(w);
    free(h);
    free(blob);
    return 0;
}

/* The accumulation without tiles (one double dsyrk per 256 rows on the
 * calling thread): the reference the tiled one is timed and checked against. */
static void hess_double_syrk(double *xtx, int64_t in, const float *x, int64_t T)
{
    const int64_t C = 256;
    double *xd = malloc((size_t)C * (size_t)in * sizeof *xd);
    if (!xd) return;
    for (int64_t t0 = 0; t0 < T; t0 += C) {
        int64_t n = T - t0 < C ? T - t0 : C;
        for (int64_t i = 0; i < n * in; i++) xd[i] = (double)x[t0 * in + i];
        cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, (int)in, (int)n, 1.0, xd, (int)in, 1.0, xtx, (int)in);
    }
    free(xd);
}

static int hess_bench(int64_t rows, int64_t cols, int threads)
{
    if (rows < 2 || cols < 1 || cols > 65536) {
        fprintf(stderr, "bench_calib: bad shape\n");
        return 2;
    }
    openblas_set_num_threads(1);   /* as under the engine's pool */
    dsq_pool *pool = dsq_pool_create(threads);
    float *x = malloc((size_t)(rows * cols) * sizeof *x);
    double *ref = calloc((size_t)(cols * cols), sizeof *ref);
    if (!pool || !x || !ref) return 1;
    uint64_t st = 7;
    for (int64_t i = 0; i < rows * cols; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(st >> 11) / 9007199254740992.0 - 0.5);
    }
    /* both Hessians created and touched first (one row each, untimed):
     * calibration adds 128 samples to the same H, so its page faults are
     * paid once per layer, not per sample */
    dsq_gptq_hset hs;
    memset(&hs, 0, sizeof hs);
    int rc = dsq_gptq_hset_add(&hs, "x", x, 1, cols, pool);
    hess_double_syrk(ref, cols, x, 1);
    double c0 = cpu_seconds(), t0 = now();
    if (rc == DSQ_OK) rc = dsq_gptq_hset_add(&hs, "x", x + cols, rows - 1, cols, pool);
    double cn = cpu_seconds() - c0, wn = now() - t0;
    c0 = cpu_seconds();
    t0 = now();
    hess_double_syrk(ref, cols, x + cols, rows - 1);
    double cr = cpu_seconds() - c0, wr = now() - t0;
    const double *h = rc == DSQ_OK ? dsq_gptq_hset_find(&hs, "x", cols, NULL) : NULL;
    if (!h) return 1;
    double err = 0.0;
    for (int64_t i = 0; i < cols; i++)
        for (int64_t j = i; j < cols; j++) {
            double e = fabs(h[i * cols + j] - ref[i * cols + j]) / sqrt(ref[i * cols + i] * ref[j * cols + j]);
            if (e > err) err = e;
        }
    double gf = (double)(rows - 1) * (double)cols * (double)(cols + 1) / 1e9;   /* multiply-adds x 2 over the upper half */
    printf("{\"bench\": \"gptq_hessian\", \"rows\": %lld, \"cols\": %lld, \"threads\": %d, "
           "\"tiled\": {\"wall_seconds\": %.3f, \"cpu_seconds\": %.3f, \"gflop_per_cpu_s\": %.1f}, "
           "\"double_syrk_1_thread\": {\"wall_seconds\": %.3f, \"cpu_seconds\": %.3f, \"gflop_per_cpu_s\": %.1f}, "
           "\"max_rel_diff\": %.2e}\n",
           (long long)rows, (long long)cols, dsq_pool_size(pool), wn, cn, gf / cn, wr, cr, gf / cr, err);
    dsq_gptq_hset_release(&hs);
    dsq_pool_free(pool);
    free(x);
    free(ref);
    return 0;
}

int main(int argc, char **argv)
{
    int experts = 32, samples = 8, seqlen = 512, threads = 0, all = 0, gptq = 0, rollback = 0;
    const char *scheme = "awq-w4a16", *dir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--experts") && v) experts = atoi(argv[++i]);
        else if (!strcmp(a, "--samples") && v) samples = atoi(argv[++i]);
        else if (!strcmp(a, "--seqlen") && v) seqlen = atoi(argv[++i]);
        else if (!strcmp(a, "--scheme") && v) scheme = argv[++i];
        else if (!strcmp(a, "-T") && v) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--dir") && v) dir = argv[++i];
        else if (!strcmp(a, "--moe-all")) all = 1;
        else if (!strcmp(a, "--gptq")) gptq = 1;
        else if (!strcmp(a, "--rollback") && v) rollback = atoi(argv[++i]);
        else if (!strcmp(a, "--gptq-solve") && i + 2 < argc) {
            int64_t r = atoll(argv[i + 1]), c = atoll(argv[i + 2]);
            int32_t g = i + 3 < argc && argv[i + 3][0] != '-' ? atoi(argv[i + 3]) : 0;
            return solve_bench(scheme, r, c, g);
        }
        else if (!strcmp(a, "--gptq-hess") && i + 2 < argc)
            return hess_bench(atoll(argv[i + 1]), atoll(argv[i + 2]), threads);
        else {
            fprintf(stderr, "usage: bench_calib [--experts E] [--samples N] [--seqlen L] [--scheme S] [-T threads] "
                            "[--moe-all] [--gptq] [--rollback N] [--dir D] | --gptq-solve ROWS COLS [GROUP] | --gptq-hess ROWS COLS\n");
            return 2;
        }
    }
    if (experts < 8 || experts % 8 || samples < 1 || seqlen < 16) {
        fprintf(stderr, "bench_calib: experts must be a multiple of 8 (>= 8), samples >= 1, seqlen >= 16\n");
        return 2;
    }
    char dbuf[512];
    if (!dir) {
        snprintf(dbuf, sizeof dbuf, "bench/out/calib-v3-E%d", experts);
        dir = dbuf;
    }
    dsq_diag d;
    dsq_diag_clear(&d);
    char *cfg = dsq_path_join(dir, "config.json");
    if (!dsq_path_exists(cfg)) {
        dsq_synth_opts so;
        dsq_synth_defaults_v3(&so);
        so.experts = experts;
        so.n_group = 8;
        so.topk_group = experts >= 32 ? 4 : 8;
        fprintf(stderr, "bench_calib: writing a %d-expert real-shape V3 layer to %s\n", experts, dir);
        double t0 = now();
        uint64_t bytes = 0;
        if (dsq_synth_write(&so, dir, DSQ_OUT_OVERWRITE, &bytes, &d) < 0) {
            fprintf(stderr, "bench_calib: %s\n", d.msg);
            return 1;
        }
        fprintf(stderr, "  %.2f GB in %.1f s\n", (double)bytes / 1e9, now() - t0);
    }
    int64_t vocab = 129280, hidden = 7168;
    json_object *cj = json_object_from_file(cfg), *v;
    if (cj && json_object_object_get_ex(cj, "vocab_size", &v) && json_object_get_int64(v) > 0)
        vocab = json_object_get_int64(v);
    if (cj && json_object_object_get_ex(cj, "hidden_size", &v)) hidden = json_object_get_int64(v);
    if (cj && json_object_object_get_ex(cj, "n_routed_experts", &v)) experts = json_object_get_int(v);
    json_object_put(cj);
    free(cfg);

    size_t ntok = (size_t)samples * (size_t)seqlen;
    int32_t *tok = malloc(ntok * sizeof *tok);
    uint64_t s = 12345;
    for (size_t i = 0; i < ntok; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((s >> 33) % (uint64_t)vocab);
    }
    dsq_calib_opts o;
    dsq_calib_opts_init(&o);
    o.scheme = scheme;
    o.tokens = tok;
    o.n_tokens = ntok;
    o.data.n_samples = samples;
    o.data.seqlen = seqlen;
    o.threads = threads;
    o.moe_calib_all = all;
    o.gptq = gptq;
    o.rollback = rollback;
    prog g = { 0, 0 };
    dsq_calib_result *r = NULL;
    double t0 = now(), c0 = cpu_seconds();
    int rc = dsq_calib_run(dir, &o, &r, on_progress, &g, NULL, &d);
    double secs = now() - t0, cpu = cpu_seconds() - c0;
    if (rc < 0) {
        char b[1024];
        dsq_diag_format(&d, b, sizeof b);
        fprintf(stderr, "bench_calib: %s\n", b);
        return 1;
    }
    dsq_calib_totals t;
    dsq_calib_get_totals(r, &t);
    uint64_t rss = dsq_peak_rss();
    int nthr = threads > 0 ? threads : dsq_cpu_count();
    double search_fixed = t.seconds_search - t.seconds_search_moe;
    double other = secs - t.seconds_forward - t.seconds_search;
    printf("{\"bench\": \"calib\", \"scheme\": \"%s\", \"experts\": %d, \"samples\": %d, \"seqlen\": %d, "
           "\"tokens\": %zu, \"threads\": %d, \"moe_calib_all\": %s, \"seconds\": {\"total\": %.2f, "
           "\"forward_stats\": %.2f, \"search\": %.2f, \"search_moe\": %.2f, \"other\": %.2f}, "
           "\"cpu_seconds\": %.1f, \"cpu_share\": %.2f, \"groups_searched\": %d, \"peak_rss_bytes\": %llu, "
           "\"gptq\": %s, \"gptq_seconds\": %.2f, \"gptq_tensors\": %zu, \"gptq_hessian_bytes\": %llu, "
           "\"gptq_solve\": {\"layers\": %d, \"lanes\": %d, \"wall_per_layer\": %.3f, \"cpu_per_layer\": %.3f}, "
           "\"rollback\": %d, \"sensitivity_seconds\": {\"total\": %.2f, \"moe\": %.2f}}\n",
           scheme, experts, samples, seqlen, ntok, nthr, all ? "true" : "false", secs, t.seconds_forward,
           t.seconds_search, t.seconds_search_moe, other, cpu, cpu / (secs * nthr), t.groups_searched,
           (unsigned long long)rss, gptq ? "true" : "false", t.seconds_gptq, t.gptq_tensors,
           (unsigned long long)t.gptq_hess_peak, t.layers, t.gptq_lanes,
           t.layers ? t.seconds_gptq_solve / t.layers : 0.0, t.layers ? t.cpu_gptq_solve / t.layers : 0.0, rollback,
           t.seconds_sens, t.seconds_sens_moe);
    if (hidden != 7168) {   /* not the V3 shapes: nothing to extrapolate */
        dsq_calib_result_free(r);
        free(tok);
        return 0;
    }

    /* extrapolation (see the top comment) */
    const double full_tok = 128.0 * 512.0, full_e = 256.0;
    double fwd = t.seconds_forward * full_tok / (double)ntok;
    double moe = t.seconds_search_moe * full_e / experts;
    double layer = fwd + search_fixed + moe + other;
    printf("full layer (256 experts, 128 x 512 tokens) on %d threads: forward+stats %.0f s + search %.0f s "
           "(attention %.0f, MoE %.0f) = %.0f s\n", nthr, fwd, search_fixed + moe, search_fixed, moe, layer);
    double share = cpu / (secs * nthr);
    if (share > 1.0) share = 1.0;
    printf("61 layers on %d threads: %.1f h (%.1f h with the cores to itself: x cpu_share %.2f); "
           "on 192 cores at 50%% parallel efficiency: %.1f h\n", nthr, 61.0 * layer / 3600.0,
           61.0 * layer * share / 3600.0, share, 61.0 * layer * share * nthr / (192.0 * 0.5) / 3600.0);
    dsq_calib_result_free(r);
    free(tok);
    return 0;
}
