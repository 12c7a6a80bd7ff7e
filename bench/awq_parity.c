/* awq_parity.c - dsq's AWQ clip against AutoAWQ's auto_clip on identical
 * layer inputs of the trained sample, scored on held-out text.
 *
 *   build/bench/awq_parity [--model M] [--calib F] [--heldout F]
 *                          [--samples N] [--seqlen T] [--group-size G]
 *                          [--attn-seqs S]
 *
 * Defaults: samples/tiny-dsv3, samples/data/calib.txt and heldout.txt, 8
 * windows of 256 tokens each (the first N*T tokens of each file), g128.
 * Per linear, the output MSE on held-out inputs (up to 512 sampled rows per
 * input, all of an expert's routed tokens up to 512) of the awq-w4a16
 * weights against the float ones, for:
 *   rtn     round to nearest, no scales
 *   scales  AWQ scales from dsq's search (dsq_calib_run on the same
 *           calibration windows), no clip
 *   proxy   + the older dsq clip: quant's importance-weighted search
 *           (diagonal of X^T X), kept only when it lowers the output error on
 *           the sampled calibration rows
 *   autoawq + AutoAWQ auto_clip: per (row, group) the clip among
 *           amax * (1 - i/20), i < 10, with the least mean (x_g . dw_g)^2 over
 *           at most 512 calibration tokens (AutoAWQ n_sample_token; here the
 *           512-row reservoir of each input, all routed tokens for experts
 *           up to 512), evaluated through that subsample's X^T X, which is
 *           the same number
 *   dsq     + the X^T X clip: the same objective over every calibration token
 * q_a/q_b are never clipped (AutoAWQ), so their rows show scales only.
 * Printed per linear type: geometric mean over the linears, and dsq/autoawq.
 * Then per scaling-group type (groups_layer says what each column is), and
 * for the routed experts' up -> down groups the held-out error of scales
 * searched on each expert's rows sampled at dsq's default cap (64), at 512,
 * and on all its routed rows, as AutoAWQ's search takes them.
 * Measurement, not a test (tests/test_calib_quality.c test_sample_clip_cov asserts
 * the ordering that matters). */
#include "awq.h"
#include "calib.h"
#include "dsq_file.h"
#include "model.h"
#include "stats.h"
#include "tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NV 5
static const char *const vname[NV] = { "rtn", "scales", "proxy", "autoawq", "dsq" };

enum { T_QA, T_KVA, T_QB, T_KVB, T_O, T_GU, T_DOWN, NT };
static const char *const tname[NT] = { "q_a_proj (attention input)", "kv_a_proj (attention input)",
                                       "q_b_proj", "kv_b_proj", "o_proj", "gate/up (MLP/MoE input)",
                                       "down_proj" };

static void die(const char *what, const dsq_diag *d)
{
    fprintf(stderr, "awq_parity: %s%s%s\n", what, d && d->msg[0] ? ": " : "", d ? d->msg : "");
    exit(1);
}

static int32_t *read_ids(dsq_tokenizer *tk, const char *file, size_t need)
{
    char *text;
    size_t len, n;
    int32_t *ids;
    dsq_diag d;
    dsq_diag_clear(&d);
    if (dsq_read_file(file, 1 << 26, &text, &len, &d) < 0) die(file, &d);
    if (dsq_tokenizer_encode(tk, text, len, 1, &ids, &n, &d) < 0) die("tokenize", &d);
    free(text);
    if (n < need) die("text too short for --samples x --seqlen", NULL);
    return ids;
}

static dsq_hstore *states(dsq_model *m, const int32_t *ids, int N, int T)
{
    const int64_t H = dsq_model_get_config(m)->hidden_size;
    dsq_hstore *hs;
    float *h = malloc((size_t)T * (size_t)H * sizeof *h);
    if (!h || dsq_hstore_open(&hs, N, T, H, 1u << 30, NULL, 0, NULL) < 0) die("hidden states", NULL);
    for (int i = 0; i < N; i++)
        if (dsq_model_embed(m, ids + (size_t)i * (size_t)T, T, h, NULL) < 0 || dsq_hstore_put(hs, i, h, NULL) < 0)
            die("embed", NULL);
    if (dsq_hstore_swap(hs, NULL) < 0) die("hidden states", NULL);
    free(h);
    return hs;
}

static const dsq_scheme *g_awq;
static int32_t g_gs = 128;

static int target(void *ctx, const char *t, int64_t rows, int64_t cols, const dsq_scheme **sc, int32_t *gs)
{
    (void)ctx;
    (void)rows;
    (void)cols;
    *sc = strstr(t, "mlp.gate.weight") ? NULL : g_awq;
    *gs = g_gs;
    return 0;
}

/* awq-w4a16 round trip of w [R][C] into out. */
static void quant_deq(const float *w, int64_t R, int64_t C, int clip, const float *imp, float *out)
{
    dsq_qshape sh;
    size_t bs;
    dsq_qview v;
    dsq_qparams qp;
    dsq_qparams_init(&qp);
    qp.clip_search = clip;
    qp.importance = imp;
    if (dsq_qshape_init(&sh, g_awq, R, C, g_gs) < 0 || g_awq->blob_size(&sh, &bs) < 0) die("shape", NULL);
    uint8_t *blob = calloc(1, bs);
    if (!blob || dsq_quantize_tensor(g_awq, w, &sh, &qp, blob, NULL, NULL) < 0 ||
        dsq_qview_init(&v, g_awq, &sh, blob, bs, NULL) < 0)
        die("quantize", NULL);
    g_awq->dequantize(&v, 0, R, out);
    free(blob);
}

typedef struct acc {
    double logsum[NT][NV];
    int n[NT];
} acc;

static void one_linear(const dsq_linear *l, int type, const dsq_calib_result *r, const dsq_layer_stats *la,
                       const dsq_layer_stats *lb, acc *A)
{
    char sn[400];
    dsq_calib_site_of(l->name, 1, sn, sizeof sn);
    const dsq_act_stats *sa = dsq_layer_stats_find(la, sn), *sb = dsq_layer_stats_find(lb, sn);
    if (!sa || !sb || sa->count < 16 || sb->sample_n < 16) return;   /* an expert with too few tokens */
    const int64_t R = l->out, C = l->in, gw = g_gs > 0 && g_gs < C ? g_gs : C, ng = (C + gw - 1) / gw;
    const dsq_calib_tensor *t = dsq_calib_lookup(r, l->name);
    dsq_calib_tensor ts;   /* the result's scales, without its clip */
    memset(&ts, 0, sizeof ts);
    if (t) {
        ts = *t;
        ts.clip_idx = NULL;
    }
    const float *s = t ? t->in_scale : NULL;
    size_t nw = (size_t)(R * C);
    float *w = malloc(nw * sizeof *w), *ws = malloc(nw * sizeof *ws), *wc = malloc(nw * sizeof *wc);
    float *q = malloc(nw * sizeof *q), *imp = malloc((size_t)C * sizeof *imp);
    uint8_t *idx = malloc((size_t)(R * ng));
    if (!w || !ws || !wc || !q || !imp || !idx) die("out of memory", NULL);
    l->w.scheme->dequantize(&l->w, 0, R, w);
    memcpy(ws, w, nw * sizeof *ws);
    if (t && dsq_calib_apply_rows(&ts, 0, R, C, ws) < 0) die("apply", NULL);
    for (int64_t j = 0; j < C; j++) imp[j] = (float)(dsq_act_stats_rms(sa, j) / (s ? s[j] : 1.0));
    const int clip = dsq_awq_clip_allowed(l->name) && dsq_awq_clip_supported(C, g_gs);
    double e[NV];
    quant_deq(w, R, C, 0, NULL, q);
    e[0] = dsq_awq_output_mse(w, q, R, C, NULL, sb->sample, sb->sample_n);
    quant_deq(ws, R, C, 0, NULL, q);
    e[1] = dsq_awq_output_mse(ws, q, R, C, s, sb->sample, sb->sample_n);
    for (int v = 2; v < NV; v++) e[v] = e[1];
    if (clip) {
        /* proxy: kept only when better on the calibration rows (dsq_clip_check) */
        double c0 = dsq_awq_output_mse(ws, q, R, C, s, sa->sample, sa->sample_n);
        quant_deq(ws, R, C, 1, imp, q);
        double c1 = dsq_awq_output_mse(ws, q, R, C, s, sa->sample, sa->sample_n);
        if (c1 < c0) e[2] = dsq_awq_output_mse(ws, q, R, C, s, sb->sample, sb->sample_n);
        /* AutoAWQ: X^T X of the <= 512 sampled calibration rows */
        dsq_act_stats sub;
        if (dsq_act_stats_init(&sub, "sub", C, 0, 0) < 0 || dsq_act_stats_enable_cov(&sub) < 0 ||
            dsq_act_stats_add(&sub, sa->sample, sa->sample_n, NULL, NULL) < 0)
            die("subsample", NULL);
        for (int v = 3; v < NV; v++) {
            if (dsq_awq_clip_search(ws, R, C, g_gs, s, v == 3 ? &sub : sa, -1, NULL, idx, NULL, NULL) < 0) die("clip", NULL);
            memcpy(wc, ws, nw * sizeof *wc);
            dsq_awq_clip_apply(wc, R, C, g_gs, idx);
            quant_deq(wc, R, C, 0, NULL, q);
            e[v] = dsq_awq_output_mse(ws, q, R, C, s, sb->sample, sb->sample_n);
        }
        dsq_act_stats_release(&sub);
    }
    for (int v = 0; v < NV; v++) A->logsum[type][v] += log(e[v] > 1e-30 ? e[v] : 1e-30);
    A->n[type]++;
    free(w);
    free(ws);
    free(wc);
    free(q);
    free(imp);
    free(idx);
}

/* ---- scaling groups: the block objective ---------------------------------- */

static int g_seqs = 4;   /* whole sequences per text for the attention block loss */

enum { G_ATTN, G_QB, G_KVB, G_MLP, G_MOE, G_DOWN, NG };
static const char *const gname[NG] = { "input_layernorm -> q_a, kv_a", "q_a_layernorm -> q_b",
                                        "kv_a_layernorm -> kv_b", "dense MLP input (gate/up)",
                                        "MoE input (experts + shared)", "up -> down" };
#define NGV 4
static const char *const gvname[NGV] = { "s = 1", "old loss", "block loss", "all seqs" };

/* routed experts' up -> down groups, scales searched on the expert's
 * rows sampled at dsq's default cap, at 512, and on all its routed rows
 * (AutoAWQ's scale search takes every token routed to the expert) */
#define NER 3
static const char *const ername[NER] = { "default", "512 rows", "all rows" };

typedef struct gacc {
    double logsum[NG][NGV];
    int n[NG];
    double er_logsum[NER];
    int er_n;
} gacc;

static int group_type(const dsq_scale_group *g)
{
    if (g->loss == DSQ_LOSS_MOE) return G_MOE;
    if (g->loss == DSQ_LOSS_MLP) return G_MLP;
    if (strstr(g->prev, "input_layernorm")) return G_ATTN;
    if (strstr(g->prev, "q_a_layernorm")) return G_QB;
    if (strstr(g->prev, "kv_a_layernorm")) return G_KVB;
    return G_DOWN;
}

/* Held-out loss of each group on AutoAWQ's objective (dsq_scale_eval with
 * the block losses: the MoE group on the MoE block output, the attention
 * input group on the MLA block output over whole held-out sequences) for
 * s = 1, scales searched with the older loss (MoE: unweighted per-expert
 * sum; attention input: q_a / kv_a outputs), with the block loss as
 * calibration runs it (the attention block over the first g_seqs
 * calibration sequences), and ("all seqs") the attention block over every
 * calibration sequence, which is AutoAWQ's approach (it runs self_attn on
 * all its samples). Groups with one loss show it in every searched column.
 * Held-out: every held-out sequence. Scales only, RTN: what the scale
 * search decides. */
static void groups_layer(dsq_model *m, int l, dsq_layer_stats *la, const dsq_layer_stats *lb,
                         const dsq_layer_stats *ler[NER], gacc *G)
{
    dsq_group_list gl;
    dsq_diag d;
    dsq_diag_clear(&d);
    if (dsq_groups_build(m, l, DSQ_GROUPS_AWQ, &gl, &d) < 0) die("groups", &d);
    for (int i = 0; i < gl.n; i++) {
        dsq_scale_group g = gl.v[i];
        dsq_search_opts so = { DSQ_SEARCH_AWQ, 0, target, NULL, dsq_model_pool(m), NULL, 1 };
        float *s = malloc((size_t)g.n * sizeof *s);
        double e[NGV], e0;
        int64_t rows;
        dsq_search_report rep;
        int ok = 1;
        for (int v = 1; v < NGV && ok; v++) {
            dsq_scale_group gv = g;
            dsq_search_opts sv = so;
            if (v == 1) {   /* the older losses */
                gv.router = NULL;
                sv.attn_block = 0;
            }
            /* the kept sequences are the first ones in order: dsq's g_seqs
             * are a prefix of all of them */
            dsq_act_stats *st = dsq_layer_stats_find(la, g.site);
            int keep = st ? st->seq_n : 0;
            if (st && v == 2 && st->seq_n > g_seqs) st->seq_n = g_seqs;
            if (dsq_scale_search(&gv, la, &sv, s, &rep, &d) < 0) die("search", &d);
            if (st) st->seq_n = keep;
            if (dsq_scale_eval(&g, lb, &so, s, &e0, &e[v], &rows, &d) < 0) die("eval", &d);
            e[0] = e0;
            ok = rows > 0 && rep.rows > 0 && e0 > 0;
        }
        int k = group_type(&g);
        double er[NER];
        /* a routed expert's down_proj input (the rows differ only there) */
        int routed = ok && ler && k == G_DOWN && strstr(g.site, ".experts.") && !strstr(g.site, "shared_experts");
        for (int c = 0; routed && c < NER; c++) {
            double e0c;
            if (dsq_scale_search(&g, ler[c], &so, s, &rep, &d) < 0) die("search", &d);
            if (dsq_scale_eval(&g, lb, &so, s, &e0c, &er[c], &rows, &d) < 0) die("eval", &d);
            routed = rep.rows > 0 && rows > 0;
        }
        free(s);
        if (!ok) continue;
        for (int v = 0; v < NGV; v++) G->logsum[k][v] += log(e[v]);
        G->n[k]++;
        if (routed) {
            for (int c = 0; c < NER; c++) G->er_logsum[c] += log(er[c]);
            G->er_n++;
        }
    }
    dsq_groups_release(&gl);
}

static void print_groups(const gacc *G)
{
    printf("\nscaling groups, held-out block output MSE (RTN with the searched scales), geometric mean per type\n");
    printf("| %-30s | %3s |", "group", "n");
    for (int v = 0; v < NGV; v++) printf(" %10s |", gvname[v]);
    printf(" block/old | block/all |\n|--------------------------------|-----|");
    for (int v = 0; v < NGV; v++) printf("------------|");
    printf("-----------|-----------|\n");
    for (int k = 0; k < NG; k++) {
        if (!G->n[k]) continue;
        printf("| %-30s | %3d |", gname[k], G->n[k]);
        for (int v = 0; v < NGV; v++) printf(" %10.4g |", exp(G->logsum[k][v] / G->n[k]));
        printf(" %9.3f | %9.3f |\n", exp((G->logsum[k][2] - G->logsum[k][1]) / G->n[k]),
               exp((G->logsum[k][2] - G->logsum[k][3]) / G->n[k]));
    }
    if (!G->er_n) return;
    printf("\nrouted experts' up -> down, held-out output MSE with scales searched on each expert's rows\n"
           "sampled at dsq's default cap (--calib-expert-rows %d), at 512, and on all its routed rows\n"
           "(AutoAWQ's search); geometric mean\n| %-20s | %3s |", DSQ_CALIB_AWQ_EXPERT_TOKENS, "group", "n");
    for (int i = 0; i < NER; i++) printf(" %10s |", ername[i]);
    printf(" def/all | 512/all |\n|----------------------|-----|");
    for (int i = 0; i < NER; i++) printf("------------|");
    printf("---------|---------|\n| %-20s | %3d |", "up -> down (routed)", G->er_n);
    for (int i = 0; i < NER; i++) printf(" %10.4g |", exp(G->er_logsum[i] / G->er_n));
    printf(" %7.3f | %7.3f |\n", exp((G->er_logsum[0] - G->er_logsum[2]) / G->er_n),
           exp((G->er_logsum[1] - G->er_logsum[2]) / G->er_n));
}

int main(int argc, char **argv)
{
    const char *model = "samples/tiny-dsv3", *calib = "samples/data/calib.txt", *held = "samples/data/heldout.txt";
    int N = 8, T = 256;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--model") && v) model = argv[++i];
        else if (!strcmp(a, "--calib") && v) calib = argv[++i];
        else if (!strcmp(a, "--heldout") && v) held = argv[++i];
        else if (!strcmp(a, "--samples") && v) N = atoi(argv[++i]);
        else if (!strcmp(a, "--seqlen") && v) T = atoi(argv[++i]);
        else if (!strcmp(a, "--group-size") && v) g_gs = atoi(argv[++i]);
        else if (!strcmp(a, "--attn-seqs") && v) g_seqs = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: awq_parity [--model M] [--calib F] [--heldout F] [--samples N] [--seqlen T] "
                            "[--group-size G] [--attn-seqs S]\n");
            return 2;
        }
    }
    if (N < 1 || T < 16 || g_gs < 0 || g_seqs < 1 || g_seqs > 64)
        die("bad --samples / --seqlen / --group-size / --attn-seqs", NULL);
    g_awq = dsq_scheme_by_name("awq-w4a16");
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_model *m;
    dsq_model_opts mo;
    dsq_model_opts_default(&mo);
    mo.lazy = 1;
    if (dsq_model_open(&m, model, &mo, &d) < 0) die(model, &d);
    dsq_tokenizer *tk;
    if (dsq_tokenizer_load(&tk, model, &d) < 0) die("tokenizer", &d);
    size_t need = (size_t)N * (size_t)T;
    int32_t *ca = read_ids(tk, calib, need), *hb = read_ids(tk, held, need);

    /* dsq's scales (and its own clip, unused here) from the same windows */
    dsq_calib_opts o;
    dsq_calib_opts_init(&o);
    o.scheme = "awq-w4a16";
    o.group_size = g_gs;
    o.target = target;
    o.target_id = "awq_parity";
    o.tokens = ca;
    o.n_tokens = need;
    o.data.n_samples = N;
    o.data.seqlen = T;
    dsq_calib_result *r;
    if (dsq_calib_run(model, &o, &r, NULL, NULL, NULL, &d) < 0) die("calibration", &d);

    dsq_hstore *sa = states(m, ca, N, T), *sb = states(m, hb, N, T);
    const dsq_model_config *cfg = dsq_model_get_config(m);
    const int L = (int)cfg->num_hidden_layers;
    acc A;
    memset(&A, 0, sizeof A);
    gacc G;
    memset(&G, 0, sizeof G);
    for (int l = 0; l < L; l++) {
        const int ne = dsq_model_config_is_moe_layer(cfg, l) ? (int)cfg->n_routed_experts : 0;
        dsq_layer_stats la, lb;
        /* the routed experts' rows at three caps, statistics only (no next
         * state), before the collection below moves sa on to the next layer */
        dsq_layer_stats ler[NER];
        const dsq_layer_stats *lerp[NER];
        const int ercap[NER] = { DSQ_CALIB_AWQ_EXPERT_TOKENS, 512, N * T };   /* N * T: every row */
        for (int i = 0; i < NER && ne > 0; i++) {
            dsq_collect_opts c3 = { .sample_cap_dense = 512, .sample_cap_expert = ercap[i], .seed = 7 };
            if (dsq_layer_stats_init(&ler[i], l, ne) < 0 || dsq_collect_layer(m, l, sa, 0, &c3, &ler[i], NULL, &d) < 0)
                die("forward", &d);
            lerp[i] = &ler[i];
        }
        /* every sequence of both texts whole, for the attention block */
        dsq_collect_opts c1 = { .sample_cap_dense = 512, .sample_cap_expert = 512, .seed = 7, .cov = 1,
                                .attn_seqs = N },
                         c2 = { .sample_cap_dense = 512, .sample_cap_expert = 512, .seed = 7, .attn_seqs = N };
        if (dsq_layer_stats_init(&la, l, ne) < 0 || dsq_layer_stats_init(&lb, l, ne) < 0 ||
            dsq_collect_layer(m, l, sa, l + 1 < L, &c1, &la, NULL, &d) < 0 ||
            dsq_collect_layer(m, l, sb, l + 1 < L, &c2, &lb, NULL, &d) < 0)
            die("forward", &d);
        if (l + 1 < L && (dsq_hstore_swap(sa, NULL) < 0 || dsq_hstore_swap(sb, NULL) < 0)) die("swap", NULL);
        groups_layer(m, l, &la, &lb, ne > 0 ? lerp : NULL, &G);
        for (int i = 0; i < NER && ne > 0; i++) dsq_layer_stats_release(&ler[i]);
        const dsq_layer *ly = &dsq_model_weights(m)->layers[l];
        one_linear(&ly->q_a, T_QA, r, &la, &lb, &A);
        one_linear(&ly->kv_a, T_KVA, r, &la, &lb, &A);
        one_linear(&ly->q_b, T_QB, r, &la, &lb, &A);
        one_linear(&ly->kv_b, T_KVB, r, &la, &lb, &A);
        one_linear(&ly->o, T_O, r, &la, &lb, &A);
        for (int e = -2; e < ne; e++) {
            const dsq_mlp *x = e == -2 ? (ly->is_moe ? NULL : &ly->mlp)
                               : e == -1 ? (ly->is_moe && ly->has_shared ? &ly->shared : NULL)
                                         : &ly->experts[e];
            if (!x) continue;
            one_linear(&x->gate, T_GU, r, &la, &lb, &A);
            one_linear(&x->up, T_GU, r, &la, &lb, &A);
            one_linear(&x->down, T_DOWN, r, &la, &lb, &A);
        }
        dsq_layer_stats_release(&la);
        dsq_layer_stats_release(&lb);
        dsq_model_layer_release(m, l);
    }
    printf("awq-w4a16 g%d, %s: %d x %d calibration / held-out tokens; held-out output MSE, geometric mean "
           "per linear type\n",
           g_gs, model, N, T);
    printf("| %-28s | %3s |", "linear", "n");
    for (int v = 0; v < NV; v++) printf(" %9s |", vname[v]);
    printf(" dsq/autoawq |\n|------------------------------|-----|");
    for (int v = 0; v < NV; v++) printf("-----------|");
    printf("-------------|\n");
    double all[NV] = { 0 };
    int nall = 0;
    for (int k = 0; k < NT; k++) {
        if (!A.n[k]) continue;
        printf("| %-28s | %3d |", tname[k], A.n[k]);
        for (int v = 0; v < NV; v++) {
            printf(" %9.3g |", exp(A.logsum[k][v] / A.n[k]));
            all[v] += A.logsum[k][v];
        }
        nall += A.n[k];
        printf(" %11.3f |\n", exp((A.logsum[k][4] - A.logsum[k][3]) / A.n[k]));
    }
    printf("| %-28s | %3d |", "all linears", nall);
    for (int v = 0; v < NV; v++) printf(" %9.3g |", exp(all[v] / nall));
    printf(" %11.3f |\n", exp((all[4] - all[3]) / nall));
    print_groups(&G);
    dsq_calib_result_free(r);
    dsq_hstore_free(sa, 1);
    dsq_hstore_free(sb, 1);
    free(ca);
    free(hb);
    dsq_tokenizer_free(tk);
    dsq_model_free(m);
    return 0;
}
