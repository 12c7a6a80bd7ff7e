/* bench_dsa.c - DeepSeek-V3.2 sparse attention against dense V3 MLA at long
 * contexts: decode and prefill tokens/s of one real-shape attention layer,
 * and the cache bytes per token.
 *
 *   bench_dsa [-t threads (1)] [-n decode_steps] [-p prefill_tokens] [CTX ...]
 *
 * Two synthetic one-layer checkpoints are written to a temp dir with
 * DeepSeek-V3's attention dimensions (hidden 7168, 128 heads, q_lora 1536,
 * kv_lora 512, rope 64, nope / v 128), a small dense FFN (the attention is
 * what differs) and vocab 1024: V3, and V3.2 with the indexer (64 heads x
 * 128, index_topk 2048), BF16. For each context (default 1024 4096 16384)
 * the caches are filled with random entries up to that position (latents,
 * k_pe and, for V3.2, e4m3 indexer keys with unit scales: the cost of a
 * step does not depend on the values), then timed: decode steps one token
 * at a time, and one prefill chunk of -p tokens continuing at that
 * position. Timing: best of 2; with one thread process CPU time, else wall
 * clock.
 *
 * Then the same steps once more with the engine's per-op timers on
 * (engine/prof.h), split into the parts that read the cache: the indexer's
 * scores over every cached key, its top-k, the attention over the keys a
 * row reads (gathering the selected rows, the scores, softmax and context,
 * and the naive path's kv_b_proj expansion of the cached latents), and the
 * rest of the layer (the linears, the absorbed q / out products, norms,
 * FFN, logits), whose cost does not depend on the context. In prefill the
 * indexer's scores and top-k run in one pool job per chunk and are timed
 * together.
 *
 * Output: a markdown table (model, context, decode tok/s, prefill tok/s,
 * cache bytes per token and layer), the breakdown table (ms per token of
 * each part, decode and prefill), then one "result:" line per row. */
#include "dsq_error.h"
#include "dsq_file.h"
#include "model.h"
#include "synth_ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* one thread: process CPU time (other jobs on a shared machine do not
 * count); more: wall time */
static int g_threads = 1;
static double now(void)
{
    struct timespec ts;
    clock_gettime(g_threads == 1 ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ms per token of each part of one profiled pass (prof.h ops, see above) */
typedef struct parts {
    double total, scores, topk, attn, rest;
    int split; /* scores and top-k timed apart */
} parts;

static parts split_parts(const dsq_prof *pf, double total, int tokens)
{
    parts p = { 0 };
    for (int i = 0; i < pf->n; i++) {
        const dsq_prof_op *o = &pf->op[i];
        const double t = g_threads == 1 ? o->cpu : o->wall;
        if (!strcmp(o->name, "dsa: indexer scores") || !strcmp(o->name, "dsa: indexer scores + top-k"))
            p.scores += t;
        else if (!strcmp(o->name, "dsa: top-k")) {
            p.topk += t;
            p.split = 1;
        } else if (!strcmp(o->name, "mla: gather selected rows") || !strcmp(o->name, "mla: absorbed attention") ||
                   !strcmp(o->name, "mla: attention (naive heads)") || strstr(o->name, "kv_b_proj"))
            p.attn += t;
    }
    p.rest = total - p.scores - p.topk - p.attn;
    const double k = 1e3 / tokens;
    p.total = total * k;
    p.scores *= k;
    p.topk *= k;
    p.attn *= k;
    p.rest *= k;
    return p;
}

static uint64_t rng = 88172645463325252ull;
static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)(rng >> 40) / (float)(1 << 24) - 0.5f;
}

/* cache entries [0, ctx) of sequence 0, every layer */
static void fill(dsq_model *m, dsq_state *s, int64_t ctx)
{
    const dsq_model_config *c = dsq_model_get_config(m);
    const int64_t R = c->kv_lora_rank, rope = c->qk_rope_head_dim;
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        float *lat = s->kv[l], *pe = lat + s->max_ctx * R;
        for (int64_t i = 0; i < ctx * R; i++) lat[i] = frand();
        for (int64_t i = 0; i < ctx * rope; i++) pe[i] = frand();
        if (s->icache) {
            const int64_t D = c->index_head_dim;
            for (int64_t t = 0; t < ctx; t++) {
                uint8_t *row = s->icache[l] + (size_t)t * m->dsa_row;
                for (int64_t d = 0; d < D; d++) row[d] = (uint8_t)(((rng = rng * 6364136223846793005ull + 1) >> 33) % 0x7e);
                float one = 1.0f;
                memcpy(row + D, &one, sizeof one);
            }
        }
    }
    s->pos[0] = ctx;
}

int main(int argc, char **argv)
{
    int threads = 1, steps = 8, pre = 128, opt;
    while ((opt = getopt(argc, argv, "t:n:p:")) != -1) {
        if (opt == 't') threads = atoi(optarg);
        else if (opt == 'n') steps = atoi(optarg);
        else if (opt == 'p') pre = atoi(optarg);
        else {
            fprintf(stderr, "usage: bench_dsa [-t threads] [-n decode_steps] [-p prefill_tokens] [CTX ...]\n");
            return 2;
        }
    }
    g_threads = threads;
    int64_t ctxs[16] = { 1024, 4096, 16384 };
    int nctx = 3;
    if (optind < argc) {
        nctx = 0;
        for (int i = optind; i < argc && nctx < 16; i++) ctxs[nctx++] = atoll(argv[i]);
    }
    int64_t maxc = 0;
    for (int i = 0; i < nctx; i++) maxc = ctxs[i] > maxc ? ctxs[i] : maxc;
    char tmpl[] = "/tmp/bench_dsa_XXXXXX";
    char *dir = mkdtemp(tmpl);
    if (!dir) return 1;
    printf("| model | context | decode tok/s | prefill tok/s (%d tokens at the context) | cache bytes / token / layer |\n"
           "|---|---|---|---|---|\n", pre);
    char lines[2][8][256];
    int nl[2] = { 0, 0 };
    /* the breakdown table's rows, printed after the first table */
    static char brk[2][16][256];
    int nb[2] = { 0, 0 };
    dsq_prof *pf = calloc(1, sizeof *pf);
    if (!pf) return 1;
    for (int v32 = 0; v32 < 2; v32++) {
        dsq_synth_opts so;
        dsq_synth_defaults_v3(&so);
        so.layers = 1;
        so.dense_layers = 1;
        so.intermediate = 256;
        so.vocab = 1024;
        so.mtp = 0;
        so.seed = 5;
        if (v32) {
            so.index_heads = 64;
            so.index_dim = 128;
            so.index_topk = 2048;
        }
        char path[300];
        snprintf(path, sizeof path, "%s/%s", dir, v32 ? "v32" : "v3");
        dsq_diag d;
        dsq_diag_clear(&d);
        if (dsq_synth_write(&so, path, DSQ_OUT_OVERWRITE, NULL, &d) < 0) {
            fprintf(stderr, "synth: %s\n", d.msg);
            return 1;
        }
        dsq_model_opts o;
        dsq_model_opts_default(&o);
        o.threads = threads;
        dsq_model *m = NULL;
        if (dsq_model_open(&m, path, &o, &d) < 0) {
            fprintf(stderr, "open: %s\n", d.msg);
            return 1;
        }
        dsq_state *s = dsq_state_create(m, 1, maxc + (pre > steps ? pre : steps) + 1);
        if (!s) return 1;
        const size_t cache_bytes = (size_t)m->kv_width * sizeof(float) + (m->dsa ? m->dsa_row : 0);
        int32_t *tok = malloc((size_t)pre * sizeof *tok);
        for (int i = 0; i < pre; i++) tok[i] = (int32_t)(i * 37 % 1024);
        float *lg = malloc((size_t)1024 * sizeof *lg);
        for (int ci = 0; ci < nctx; ci++) {
            double best_d = 1e30, best_p = 1e30;
            for (int rep = 0; rep < 2; rep++) {
                fill(m, s, ctxs[ci]);
                double t0 = now();
                for (int k = 0; k < steps; k++)
                    if (dsq_forward(m, s, 0, &tok[k], 1, lg, DSQ_FWD_LAST_LOGITS, &d) < 0) return 1;
                double td = (now() - t0) / steps;
                best_d = td < best_d ? td : best_d;
                s->pos[0] = ctxs[ci];
                t0 = now();
                if (dsq_forward(m, s, 0, tok, pre, lg, DSQ_FWD_LAST_LOGITS, &d) < 0) return 1;
                double tp = (now() - t0) / pre;
                best_p = tp < best_p ? tp : best_p;
            }
            /* the breakdown: the same steps, profiled */
            dsq_prof_reset(pf);
            m->prof = pf;
            fill(m, s, ctxs[ci]);
            double t0 = now();
            for (int k = 0; k < steps; k++)
                if (dsq_forward(m, s, 0, &tok[k], 1, lg, DSQ_FWD_LAST_LOGITS, &d) < 0) return 1;
            const parts pd = split_parts(pf, now() - t0, steps);
            dsq_prof_reset(pf);
            s->pos[0] = ctxs[ci];
            t0 = now();
            if (dsq_forward(m, s, 0, tok, pre, lg, DSQ_FWD_LAST_LOGITS, &d) < 0) return 1;
            const parts pp = split_parts(pf, now() - t0, pre);
            m->prof = NULL;
            const char *name = v32 ? "V3.2 (DSA, top 2048)" : "V3 (dense MLA)";
            for (int w = 0; w < 2; w++) {
                const parts *q = w ? &pp : &pd;
                char sc[32] = "-", tk[32] = "-";
                if (v32) {
                    snprintf(sc, sizeof sc, "%.2f", q->scores);
                    if (q->split) snprintf(tk, sizeof tk, "%.2f", q->topk);
                    else if (q->scores > 0) snprintf(tk, sizeof tk, "(with scores)");
                }
                snprintf(brk[v32][nb[v32]++ % 16], 256, "| %s | %lld | %s | %.2f | %s | %s | %.2f | %.2f |", name,
                         (long long)ctxs[ci], w ? "prefill" : "decode", q->total, sc, tk, q->attn, q->rest);
            }
            printf("| %s | %lld | %.2f | %.1f | %zu |\n", name, (long long)ctxs[ci], 1.0 / best_d, 1.0 / best_p,
                   cache_bytes);
            fflush(stdout);
            snprintf(lines[v32][nl[v32]++ % 8], 256,
                     "result: model=%s threads=%d ctx=%lld decode_tok_s=%.3f prefill_tok_s=%.2f cache_bytes_per_token=%zu",
                     v32 ? "v32" : "v3", threads, (long long)ctxs[ci], 1.0 / best_d, 1.0 / best_p, cache_bytes);
        }
        free(tok);
        free(lg);
        dsq_state_free(s);
        dsq_model_free(m);
    }
    printf("\nWhere the time goes (one more pass of the same steps with the engine's per-op timers on; ms per "
           "token):\n\n"
           "| model | context | step | total | indexer scores | indexer top-k | attention over the keys read | "
           "rest of the layer |\n"
           "|---|---|---|---|---|---|---|---|\n");
    for (int v = 0; v < 2; v++)
        for (int i = 0; i < nb[v] && i < 16; i++) printf("%s\n", brk[v][i]);
    free(pf);
    for (int v = 0; v < 2; v++)
        for (int i = 0; i < nl[v] && i < 8; i++) printf("%s\n", lines[v][i]);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return 0;
}
