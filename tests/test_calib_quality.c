/* test_calib_quality.c - calibration measured on the trained sample
 * (samples/tiny-dsv3; each case skips with a message when it is absent):
 *   - calibrated schemes order as they must against round-to-nearest
 *     (KL divergence to the float model), outliers injected or not;
 *   - w8a8-dynamic smoothing and its down_proj error on held-out rows;
 *   - --rollback keeps the most sensitive linears float and lowers KLD;
 *   - AWQ scales searched on the calibration text generalise to held-out text;
 *   - X^T X blocks equal hand-computed sums; the AWQ clip searched on them
 *     lowers held-out output error of the sample clearly below no clip and
 *     the diagonal-proxy clip.
 * Minutes of CPU: these run in the full `make test`, not in `make check`. */
#include "calib_fixture.h"
#include <stdarg.h>
#include "awq.h"
#include "calib.h"
#include "sens.h"
#include "calib_data.h"
#include "container.h"
#include "convert.h"
#include "dsq_file.h"
#include "dsq_mem.h"
#include "eval_metrics.h"
#include "model.h"
#include "safetensors.h"
#include "smooth.h"
#include "st_writer.h"
#include "stats.h"
#include "stats_file.h"
#include "synth_ckpt.h"

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <ctype.h>

/* ---- measurements on the trained sample (skipped when absent) ------------------------- */

/* A .dsq of model where every *_proj linear gets scheme sc (int4 schemes: group
 * gs) with the calibration entry (may be NULL: RTN) folded in, and everything
 * else float32: a minimal stand-in for ds-quant, so this test measures the
 * calibration library on its own. */
static void quantize_dsq(const char *model, const dsq_calib_result *r, const dsq_scheme *sc, int32_t gs,
                         const char *out)
{
    dsq_st_model *st;
    assert_int_equal(dsq_st_open(&st, model, NULL), 0);
    char *cp = dsq_path_join(model, "config.json"), *cfg;
    size_t clen;
    assert_int_equal(dsq_read_file(cp, 1 << 24, &cfg, &clen, NULL), 0);
    char *meta = malloc(clen + 32);
    snprintf(meta, clen + 32, "{\"config\": %s}", cfg);
    dsq_ctr_writer *w;
    assert_int_equal(dsq_ctr_writer_open(&w, out, DSQ_OUT_OVERWRITE, NULL), 0);
    const dsq_scheme *f32 = dsq_scheme_by_id(DSQ_SCHEME_F32);
    for (size_t i = 0; i < dsq_st_count(st); i++) {
        const dsq_st_tensor *t = dsq_st_get(st, i);
        if (dsq_st_is_companion(st, t)) continue;
        int64_t rows = dsq_st_rows(t), cols = dsq_st_cols(t);
        float *buf = malloc((size_t)t->numel * sizeof *buf);
        assert_int_equal(dsq_st_read_rows_f32(st, t, 0, rows, buf, NULL), 0);
        const dsq_calib_tensor *e = r ? dsq_calib_lookup(r, t->name) : NULL;
        if (e) assert_int_equal(dsq_calib_apply_rows(e, 0, rows, cols, buf), 0);
        size_t n = strlen(t->name);
        int lin = t->ndim == 2 && ((n > 12 && !strcmp(t->name + n - 12, "_proj.weight")) ||
                                   (n > 21 && !strcmp(t->name + n - 21, "_proj_with_mqa.weight")));
        const dsq_scheme *use = lin && !(e && e->rolled_back) ? sc : f32;
        dsq_qshape sh;
        assert_int_equal(dsq_qshape_init(&sh, use, rows, cols, use->weight_bits == 4 ? gs : 0), 0);
        size_t bytes;
        assert_int_equal(use->blob_size(&sh, &bytes), 0);
        uint8_t *blob = calloc(1, bytes);
        dsq_qparams qp;
        dsq_qparams_init(&qp);
        if (lin) dsq_calib_qparams(e, &qp);
        dsq_diag d;
        dsq_diag_clear(&d);
        int rc = 0;
        if (lin && e && e->gptq_blob) { /* GPTQ: calibration made the blob */
            assert_true(e->gptq_blob_size == bytes && e->gptq_scheme == use->id);
            memcpy(blob, e->gptq_blob, bytes);
        } else {
            rc = dsq_quantize_tensor(use, buf, &sh, &qp, blob, NULL, &d);
        }
        if (rc) fprintf(stderr, "quantize %s: %s\n", t->name, d.msg);
        assert_int_equal(rc, 0);
        dsq_ctr_tensor_info info;
        memset(&info, 0, sizeof info);
        info.name = t->name;
        info.src_dtype = "F32";
        info.scheme = use->id;
        info.ndim = (uint32_t)t->ndim;
        for (int k = 0; k < t->ndim; k++) info.shape[k] = t->shape[k];
        info.group_size = (uint32_t)sh.group_size;
        assert_int_equal(dsq_ctr_writer_add(w, &info, blob, bytes, 0, NULL), 0);
        free(blob);
        free(buf);
    }
    assert_int_equal(dsq_ctr_writer_set_metadata(w, meta, NULL), 0);
    assert_int_equal(dsq_ctr_writer_finish(w, NULL), 0);
    free(meta);
    free(cfg);
    free(cp);
    dsq_st_close(st);
}

/* KL(base || q) per scored position, windows as ds-eval kld / llama-
 * perplexity (eval/eval_metrics.h): n_ctx tokens with BOS written over the
 * first, only the second half scored; at most max_windows windows. */
typedef struct kl_stats { double mean, median, nll; } kl_stats;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static kl_stats kld_pos(const char *base, const char *q, const int32_t *tok, int n, int n_ctx, int max_windows,
                        float *pos, size_t *npos);

static kl_stats kld(const char *base, const char *q, const int32_t *tok, int n, int n_ctx, int max_windows)
{
    return kld_pos(base, q, tok, n, n_ctx, max_windows, NULL, NULL);
}

/* kld, and with pos != NULL the per-position KLs in position order
 * (room for max_windows * (n_ctx - 1 - n_ctx / 2)), *npos of them. */
static kl_stats kld_pos(const char *base, const char *q, const int32_t *tok, int n, int n_ctx, int max_windows,
                        float *pos, size_t *npos)
{
    dsq_model *mb, *mq;
    dsq_model_opts mo;
    dsq_model_opts_default(&mo);
    mo.threads = 2;
    assert_int_equal(dsq_model_open(&mb, base, &mo, NULL), 0);
    assert_int_equal(dsq_model_open(&mq, q, &mo, NULL), 0);
    const int64_t V = dsq_model_get_config(mb)->vocab_size;
    dsq_ppl_plan plan;
    assert_int_equal(dsq_ppl_plan_init(&plan, (size_t)n, (size_t)n_ctx,
                                       (int32_t)dsq_model_get_config(mb)->bos_token_id, NULL), 0);
    dsq_state *sb = dsq_state_create(mb, 1, n_ctx), *sq = dsq_state_create(mq, 1, n_ctx);
    float *lb = malloc((size_t)n_ctx * (size_t)V * sizeof *lb), *lq = malloc((size_t)n_ctx * (size_t)V * sizeof *lq);
    int32_t *win = malloc((size_t)n_ctx * sizeof *win);
    double *each = malloc((size_t)max_windows * (size_t)n_ctx * sizeof *each);
    double sum = 0.0, nll = 0.0;
    size_t cnt = 0;
    for (size_t w = 0; w < plan.n_chunks && (int)w < max_windows; w++) {
        dsq_ppl_window(&plan, tok, w, win);
        dsq_state_reset(sb, 0);
        dsq_state_reset(sq, 0);
        assert_int_equal(dsq_forward(mb, sb, 0, win, n_ctx, lb, 0, NULL), 0);
        assert_int_equal(dsq_forward(mq, sq, 0, win, n_ctx, lq, 0, NULL), 0);
        for (size_t t = plan.first; t + 1 < (size_t)n_ctx; t++) {
            const float *a = lb + t * (size_t)V, *b = lq + t * (size_t)V;
            double la = dsq_log_sum_exp(a, (size_t)V), lbq = dsq_log_sum_exp(b, (size_t)V), k = 0.0;
            for (int64_t v = 0; v < V; v++) {
                double pa = a[v] - la, pb = b[v] - lbq;
                k += exp(pa) * (pa - pb);
            }
            each[cnt++] = k;
            sum += k;
            nll -= b[win[t + 1]] - lbq;
        }
    }
    if (pos) {
        for (size_t i = 0; i < cnt; i++) pos[i] = (float)each[i];
        *npos = cnt;
    }
    qsort(each, cnt, sizeof *each, cmp_double);
    kl_stats r = { sum / (double)cnt, cnt % 2 ? each[cnt / 2] : 0.5 * (each[cnt / 2 - 1] + each[cnt / 2]),
                   nll / (double)cnt };
    free(each);
    free(win);
    free(lb);
    free(lq);
    dsq_state_free(sb);
    dsq_state_free(sq);
    dsq_model_free(mb);
    dsq_model_free(mq);
    return r;
}

/* inject_outliers' edit of one tensor; ctx holds k. */
static void outlier_edit(void *ctx, const dsq_st_tensor *t, float *w, int64_t rows, int64_t cols)
{
    const float k = *(const float *)ctx;
    int layer = -1;
    if (sscanf(t->name, "model.layers.%d.", &layer) == 1) {
        int c_attn = (layer * 37 + 11) % (int)(t->ndim == 2 ? cols : (int64_t)t->numel);
        int c_ffn = (layer * 53 + 101) % (int)(t->ndim == 2 ? cols : (int64_t)t->numel);
        const char *nm = strchr(t->name + strlen("model.layers."), '.') + 1;
        int attn_in = !strcmp(nm, "self_attn.q_a_proj.weight") || !strcmp(nm, "self_attn.kv_a_proj_with_mqa.weight") ||
                      !strcmp(nm, "self_attn.q_proj.weight") || !strcmp(nm, "self_attn.k_proj.weight") ||
                      !strcmp(nm, "self_attn.v_proj.weight");
        int ffn_in = !strcmp(nm, "mlp.gate.weight") || (strstr(nm, "gate_proj.weight") || strstr(nm, "up_proj.weight"));
        if (!strcmp(nm, "input_layernorm.weight")) w[c_attn] *= k;
        if (!strcmp(nm, "post_attention_layernorm.weight")) w[c_ffn] *= k;
        if (attn_in)
            for (int64_t r = 0; r < rows; r++) w[r * cols + c_attn] /= k;
        if (ffn_in)
            for (int64_t r = 0; r < rows; r++) w[r * cols + c_ffn] /= k;
    }
}

/* A float32 copy of model with activation outlier channels injected: for each
 * layer, channel c of input_layernorm and post_attention_layernorm is scaled
 * by k (a power of two: exact) and the same input column of every consumer
 * (q_a/kv_a or q/k/v; router, experts' and shared experts' gate/up or the
 * dense gate/up) by 1/k. The function is unchanged. */
static void inject_outliers(const char *model, const char *out, float k)
{
    edit_copy(model, out, outlier_edit, &k);
}

typedef struct meas { const char *scheme; int32_t gs; int calib; int smooth; int gptq; } meas;

static kl_stats measure(const char *model, const char *base, const meas *m, const int32_t *tok, int n)
{
    dsq_calib_result *r = NULL;
    if (m->calib) {
        dsq_calib_opts o;
        dsq_calib_opts_init(&o);
        o.calib = "samples/data/calib.txt";
        o.scheme = m->scheme;
        o.group_size = m->gs;
        o.smooth = m->smooth;
        o.gptq = m->gptq;
        o.data.n_samples = 64;   /* about all of samples/data/calib.txt */
        o.data.seqlen = 512;
        o.threads = 2;
        r = calibrate(model, &o);
    }
    char *out = path("q.dsq");
    quantize_dsq(model, r, dsq_scheme_by_name(m->scheme), m->gs, out);
    kl_stats k = kld(base, out, tok, n, 512, 24);
    unlink(out);
    free(out);
    dsq_calib_result_free(r);
    return k;
}

/* The model the KLD measurements run on: DSQ_TEST_SAMPLE_MODEL, else
 * samples/tiny-dsv3; NULL (one skip line) under ASan unless
 * DSQ_TEST_SAMPLE_MODEL is set: the calibrate + quantize + KLD runs take
 * minutes there and add no coverage the synthetic tests lack. */
static const char *measured_model(void)
{
    const char *model = getenv("DSQ_TEST_SAMPLE_MODEL") ? getenv("DSQ_TEST_SAMPLE_MODEL") : "samples/tiny-dsv3";
#ifdef __SANITIZE_ADDRESS__
    if (!getenv("DSQ_TEST_SAMPLE_MODEL")) {
        fprintf(stderr, "skip: sample measurements under AddressSanitizer\n");
        return NULL;
    }
#endif
    return model;
}


static void test_sample_ordering(void **state)
{
    (void)state;
    const char *model = measured_model();
    if (!model) return;
    if (!sample_present(model, "samples/data/calib.txt", "samples/data/heldout.txt", (char *)NULL)) return;
    dsq_tokenizer *tok;
    assert_int_equal(dsq_tokenizer_load(&tok, model, NULL), 0);
    char *text;
    size_t len;
    assert_int_equal(dsq_read_file("samples/data/heldout.txt", 1 << 26, &text, &len, NULL), 0);
    int32_t *ids;
    size_t nids;
    assert_int_equal(dsq_tokenizer_encode(tok, text, len, 1, &ids, &nids, NULL), 0);
    const int n = (int)nids;
    assert_true(n >= 1024);
    /* untrained weights (a sample being regenerated) carry no signal */
    const double nll_base = kld(model, model, ids, n, 512, 2).nll;
    const int trained = nll_base < 6.0;
    if (!trained && !getenv("DSQ_TEST_UNTRAINED")) {
        fprintf(stderr, "skip: samples/tiny-dsv3 is not trained (NLL %.2f)\n", nll_base);
    } else {
        char *outl = path("outlier");
        inject_outliers(model, outl, 32.0f);
        static const meas pairs[][2] = {
            { { "awq-w4a16", 128, 0, 1 }, { "awq-w4a16", 128, 1, 1 } },
            { { "w8a8", DSQ_GROUP_DEFAULT, 1, 0 }, { "w8a8", DSQ_GROUP_DEFAULT, 1, 1 } },
            { { "w4a8", DSQ_GROUP_DEFAULT, 0, 1 }, { "w4a8", DSQ_GROUP_DEFAULT, 1, 1 } },
        };
        const char *names[] = { "AWQ w4a16 g128 (RTN / AWQ)", "w8a8 static (no smoothing / SmoothQuant)",
                                "w4a8 (RTN / calibrated)" };
        kl_stats w4a8_rtn = { 0, 0, 0 };
        for (int i = 0; i < 3; i++) {
            kl_stats a = measure(model, model, &pairs[i][0], ids, n);
            if (i == 2) w4a8_rtn = a;
            kl_stats b = measure(model, model, &pairs[i][1], ids, n);
            kl_stats x = measure(outl, model, &pairs[i][0], ids, n);
            kl_stats y = measure(outl, model, &pairs[i][1], ids, n);
            fprintf(stderr,
                    "  %-42s KLD mean %.5f / %.5f median %.3g / %.3g (NLL %.4f / %.4f)   outliers x32: mean %.5f / %.5f\n",
                    names[i], a.mean, b.mean, a.median, b.median, a.nll, b.nll, x.mean, y.mean);
            if (!trained) continue;
            if (i == 0) {
                /* AWQ w4a16 g128: printed, not asserted. On this sample 1-2%
                 * of the scored tokens (near-tie digits of GSM answers) carry
                 * about 70% of the mean KLD, and function-preserving +-5%
                 * rescalings of the RTN weights, with RTN's error, move it as
                 * much as AWQ does; even RTN's outlier damage is inside that
                 * band. test_sample_awq_generalises checks AWQ where the
                 * sample can show it (docs/calibration.md). */
                continue;
            }
            /* SmoothQuant vs none, calibrated vs RTN w4a8: large effects, on
             * the sample and after outlier injection (0.067 -> 0.013 and
             * 0.030 -> 0.013 measured) */
            assert_true(b.mean < a.mean);
            assert_true(y.mean < x.mean);
        }
        /* GPTQ on the calibrated w4a8 (calib/gptq.h): mean KLD 0.0233 (RTN)
         * -> 0.0079 on the whole held-out text (ds-eval kld), 0.0090 / 0.0109
         * with half the calibration text under seeds 1 / 2: a margin far
         * outside the near-tie noise band (asserted: below 0.75 x RTN) */
        static const meas gq = { "w4a8", DSQ_GROUP_DEFAULT, 1, 1, 1 };
        kl_stats g = measure(model, model, &gq, ids, n);
        fprintf(stderr, "  %-42s KLD mean %.5f / %.5f median %.3g / %.3g\n", "w4a8 (RTN / calibrated + GPTQ)",
                w4a8_rtn.mean, g.mean, w4a8_rtn.median, g.median);
        if (trained) assert_true(g.mean < 0.75 * w4a8_rtn.mean);
        dsq_test_rmtree(outl);
        free(outl);
    }
    free(ids);
    free(text);
    dsq_tokenizer_free(tok);
}

/* The 300 GSM test problems as the sample was trained on them
 * (samples/corpus.py): "Question: Q\nAnswer: A\n\n". */
static char *gsm_text(const char *file, size_t *len)
{
    char *raw;
    size_t n;
    assert_int_equal(dsq_read_file(file, 1 << 26, &raw, &n, NULL), 0);
    size_t cap = 2 * n + 1, used = 0;
    char *out = malloc(cap);
    for (char *line = strtok(raw, "\n"); line; line = strtok(NULL, "\n")) {
        json_object *o = json_tokener_parse(line), *q, *a;
        assert_non_null(o);
        assert_true(json_object_object_get_ex(o, "question", &q) && json_object_object_get_ex(o, "answer", &a));
        used += (size_t)snprintf(out + used, cap - used, "Question: %s\nAnswer: %s\n\n", json_object_get_string(q),
                                 json_object_get_string(a));
        assert_true(used < cap);
        json_object_put(o);
    }
    free(raw);
    *len = used;
    return out;
}

/* w8a8-dynamic, RTN vs smoothed (alpha searched per group), on two held-out
 * texts. The mean KLD of each model alone has a wide band on this sample
 * (a few near-tie tokens carry it, docs/calibration.md), so the test
 * compares the two models position by position: the bootstrap band over
 * windows of the mean of (KL_RTN - KL_smoothed) must lie above 0. Checked
 * with calibration seeds 0-3 before asserting (docs/calibration.md). */
static void test_sample_dynamic_smoothing(void **state)
{
    (void)state;
    const char *model = measured_model();
    if (!model) return;
    if (!sample_present(model, "samples/data/calib.txt", "samples/data/heldout.txt", "samples/data/gsm_test.jsonl",
                        (char *)NULL))
        return;
    dsq_tokenizer *tok;
    assert_int_equal(dsq_tokenizer_load(&tok, model, NULL), 0);
    enum { WIN = 24, PER = 255 };
    const dsq_scheme *sc = dsq_scheme_by_name("w8a8-dynamic");
    const char *seed_env = getenv("DSQ_TEST_SMOOTH_SEED");   /* to check other seeds by hand */
    dsq_calib_opts o;
    dsq_calib_opts_init(&o);
    o.calib = "samples/data/calib.txt";
    o.scheme = "w8a8-dynamic";
    o.data.n_samples = 64;
    o.data.seqlen = 512;
    o.data.seed = seed_env ? strtoull(seed_env, NULL, 10) : 0;
    o.threads = 2;
    dsq_calib_result *r = NULL;
    float *a = malloc(WIN * PER * sizeof *a), *b = malloc(WIN * PER * sizeof *b);
    char *out = path("q.dsq");
    for (int text = 0; text < 2; text++) {
        char *txt;
        size_t len;
        if (text == 0) assert_int_equal(dsq_read_file("samples/data/heldout.txt", 1 << 26, &txt, &len, NULL), 0);
        else txt = gsm_text("samples/data/gsm_test.jsonl", &len);
        int32_t *ids;
        size_t nids;
        assert_int_equal(dsq_tokenizer_encode(tok, txt, len, 1, &ids, &nids, NULL), 0);
        assert_true(nids >= 1024);
        if (text == 0 && kld(model, model, ids, (int)nids, 512, 2).nll >= 6.0 && !getenv("DSQ_TEST_UNTRAINED")) {
            fprintf(stderr, "skip: samples/tiny-dsv3 is not trained\n");
            free(ids);
            free(txt);
            break;
        }
        if (!r) r = calibrate(model, &o);
        size_t na, nb;
        quantize_dsq(model, NULL, sc, 0, out);
        kl_stats x = kld_pos(model, out, ids, (int)nids, 512, WIN, a, &na);
        quantize_dsq(model, r, sc, 0, out);
        kl_stats y = kld_pos(model, out, ids, (int)nids, 512, WIN, b, &nb);
        assert_true(na == nb && na > 0);
        double alo, ahi, blo, bhi, dlo, dhi;
        assert_int_equal(dsq_kld_bootstrap(a, na, PER, DSQ_KLD_BOOT_N, DSQ_KLD_BOOT_SEED, &alo, &ahi), 0);
        assert_int_equal(dsq_kld_bootstrap(b, nb, PER, DSQ_KLD_BOOT_N, DSQ_KLD_BOOT_SEED, &blo, &bhi), 0);
        /* paired: the mean difference, and the share of positions where
         * smoothing lowers KL (ties count half), each with its band */
        double wlo, whi;
        for (size_t i = 0; i < na; i++) {
            float dv = a[i] - b[i];
            b[i] = dv > 0.0f ? 1.0f : dv < 0.0f ? 0.0f : 0.5f;
            a[i] = dv;
        }
        assert_int_equal(dsq_kld_bootstrap(a, na, PER, DSQ_KLD_BOOT_N, DSQ_KLD_BOOT_SEED, &dlo, &dhi), 0);
        assert_int_equal(dsq_kld_bootstrap(b, nb, PER, DSQ_KLD_BOOT_N, DSQ_KLD_BOOT_SEED, &wlo, &whi), 0);
        fprintf(stderr,
                "  w8a8-dynamic %-8s RTN / smoothed: KLD mean %.5f [%.5f, %.5f] / %.5f [%.5f, %.5f], median %.3g / "
                "%.3g; paired: mean difference [%.5f, %.5f], smoothed lower at [%.3f, %.3f] of positions\n",
                text ? "GSM test" : "heldout", x.mean, alo, ahi, y.mean, blo, bhi, x.median, y.median, dlo, dhi, wlo,
                whi);
        assert_true(wlo > 0.5);
        assert_true(y.median < x.median);
        free(ids);
        free(txt);
    }
    unlink(out);
    free(out);
    free(a);
    free(b);
    dsq_calib_result_free(r);
    dsq_tokenizer_free(tok);
}

/* --rollback (calib/sens.h): the most sensitive linears of w8a8-dynamic on
 * the sample stay float. Checked: the choice is the top of the measured
 * sensitivities, every rolled-back entry lost what only a quantizer uses,
 * --stats gives the same choice (and refuses statistics without
 * sensitivities), and keeping the one most sensitive linear lowers the
 * held-out KL divergence at most positions (on the sample that linear is
 * the dense down_proj). */
static void test_sample_rollback(void **state)
{
    (void)state;
    const char *model = "samples/tiny-dsv3";
#ifdef __SANITIZE_ADDRESS__
    fprintf(stderr, "skip: sample measurements under AddressSanitizer\n");
    return;
#endif
    if (!sample_present(model, "samples/data/calib.txt", "samples/data/heldout.txt", (char *)NULL)) return;
    const dsq_scheme *sc = dsq_scheme_by_name("w8a8-dynamic");
    dsq_calib_opts o;
    dsq_calib_opts_init(&o);
    o.calib = "samples/data/calib.txt";
    o.scheme = "w8a8-dynamic";
    o.data.n_samples = 32;
    o.data.seqlen = 512;
    o.threads = 2;
    char *stats = path("rb.stats"), *plain = path("plain.stats"), *out = path("rb.dsq");
    o.save_stats = stats;
    o.overwrite = 1;
    o.rollback = 2;
    dsq_calib_result *r = calibrate(model, &o);
    /* two served modules: 2 or more tensors (gate + up, q_a + kv_a go together) */
    const size_t nrb = dsq_calib_rollback_count(r);
    assert_true(nrb >= 2 && nrb <= 4);
    assert_null(dsq_calib_rollback(r, nrb, NULL));
    char units[4][256];
    double umax[4];
    int nu = 0;
    for (size_t k = 0; k < nrb; k++) {
        double sv;
        char key[256];
        assert_int_equal(dsq_sens_unit(dsq_calib_rollback(r, k, &sv), key, sizeof key), 1);
        int u = 0;
        while (u < nu && strcmp(units[u], key)) u++;
        if (u == nu) {
            snprintf(units[nu], sizeof units[nu], "%s", key);
            umax[nu++] = sv;
        }
        if (sv > umax[u]) umax[u] = sv;
    }
    assert_int_equal(nu, 2);
    assert_true(umax[0] >= umax[1] && umax[1] > 0.0);
    /* only they rolled back; every other candidate is no more sensitive */
    dsq_st_model *st;
    assert_int_equal(dsq_st_open(&st, model, NULL), 0);
    size_t measured = 0, rolled = 0;
    for (size_t i = 0; i < dsq_st_count(st); i++) {
        const dsq_calib_tensor *e = dsq_calib_lookup(r, dsq_st_get(st, i)->name);
        if (!e || e->cols == 0) continue;
        if (e->sensitivity >= 0.0) measured++;
        char key[256];
        int cand = dsq_sens_unit(e->name, key, sizeof key);
        if (!cand) assert_true(e->sensitivity < 0.0);   /* routed experts: not measured */
        if (!e->rolled_back) {
            if (cand) assert_true(e->sensitivity <= umax[1]);
            continue;
        }
        rolled++;
        assert_true(cand);
        assert_true(!strcmp(key, units[0]) || !strcmp(key, units[1]));
        assert_null(e->gptq_blob);
        assert_null(e->clip_idx);
        assert_null(e->importance);
        assert_int_equal(e->has_act_static, 0);
    }
    dsq_st_close(st);
    assert_int_equal(rolled, nrb);
    assert_true(measured > 10);
    const char *n0 = dsq_calib_rollback(r, 0, NULL), *n1 = dsq_calib_rollback(r, 1, NULL);
    char fp[65], fp2[65];
    assert_int_equal(dsq_calib_fingerprint(r, fp), 0);
    /* the same choice from the statistics file */
    dsq_calib_opts o2 = o;
    o2.calib = NULL;
    o2.save_stats = NULL;
    o2.load_stats = stats;
    dsq_calib_result *r2 = calibrate(model, &o2);
    assert_string_equal(dsq_calib_rollback(r2, 0, NULL), n0);
    assert_string_equal(dsq_calib_rollback(r2, 1, NULL), n1);
    assert_int_equal(dsq_calib_fingerprint(r2, fp2), 0);
    assert_string_equal(fp, fp2);
    dsq_calib_result_free(r2);
    /* statistics collected without --rollback hold no sensitivities */
    dsq_calib_opts o3 = o;
    o3.save_stats = plain;
    o3.rollback = 0;
    r2 = calibrate(model, &o3);
    assert_int_equal(dsq_calib_rollback_count(r2), 0);
    dsq_calib_result_free(r2);
    o3.calib = NULL;
    o3.save_stats = NULL;
    o3.load_stats = plain;
    o3.rollback = 1;
    dsq_diag d;
    dsq_diag_clear(&d);
    r2 = NULL;
    assert_int_equal(dsq_calib_run(model, &o3, &r2, NULL, NULL, NULL, &d), DSQ_ERR_STATE);
    assert_null(r2);
    assert_non_null(strstr(d.msg, "no sensitivities"));
    dsq_calib_result_free(r);

    /* one linear kept float against none, same statistics */
    char *txt;
    size_t len;
    assert_int_equal(dsq_read_file("samples/data/heldout.txt", 1 << 26, &txt, &len, NULL), 0);
    dsq_tokenizer *tok;
    assert_int_equal(dsq_tokenizer_load(&tok, model, NULL), 0);
    int32_t *ids;
    size_t nids;
    assert_int_equal(dsq_tokenizer_encode(tok, txt, len, 1, &ids, &nids, NULL), 0);
    if (kld(model, model, ids, (int)nids, 512, 2).nll >= 6.0 && !getenv("DSQ_TEST_UNTRAINED")) {
        fprintf(stderr, "skip: samples/tiny-dsv3 is not trained\n");
    } else {
        enum { WIN = 24, PER = 255 };
        float *a = malloc(WIN * PER * sizeof *a), *b = malloc(WIN * PER * sizeof *b);
        o2.load_stats = stats;
        o2.rollback = 0;
        dsq_calib_result *none = calibrate(model, &o2);
        o2.rollback = 1;
        dsq_calib_result *one = calibrate(model, &o2);
        size_t na, nb;
        quantize_dsq(model, none, sc, 0, out);
        kl_stats x = kld_pos(model, out, ids, (int)nids, 512, WIN, a, &na);
        quantize_dsq(model, one, sc, 0, out);
        kl_stats y = kld_pos(model, out, ids, (int)nids, 512, WIN, b, &nb);
        assert_true(na == nb && na > 0);
        for (size_t i = 0; i < na; i++) b[i] = a[i] > b[i] ? 1.0f : a[i] < b[i] ? 0.0f : 0.5f;
        double wlo, whi;
        assert_int_equal(dsq_kld_bootstrap(b, nb, PER, DSQ_KLD_BOOT_N, DSQ_KLD_BOOT_SEED, &wlo, &whi), 0);
        fprintf(stderr, "  w8a8-dynamic smoothed, rollback 0 / 1 (%s): KLD mean %.5f / %.5f, median %.3g / %.3g; "
                        "rollback lower at [%.3f, %.3f] of positions\n",
                dsq_calib_rollback(one, 0, NULL), x.mean, y.mean, x.median, y.median, wlo, whi);
        assert_true(wlo > 0.5);
        assert_true(y.median < x.median);
        dsq_calib_result_free(none);
        dsq_calib_result_free(one);
        free(a);
        free(b);
    }
    free(ids);
    free(txt);
    dsq_tokenizer_free(tok);
    unlink(stats);
    unlink(plain);
    unlink(out);
    free(stats);
    free(plain);
    free(out);
}

/* Every linear but the router gets the scheme named by ctx: awq-w4a16 at
 * group 128, the integer schemes per row. */
static int sample_target(void *ctx, const char *t, int64_t rows, int64_t cols, const dsq_scheme **sc, int32_t *gs)
{
    (void)rows;
    (void)cols;
    *sc = strstr(t, "mlp.gate.weight") ? NULL : dsq_scheme_by_name((const char *)ctx);
    *gs = *sc && (*sc)->id == DSQ_SCHEME_AWQ_W4A16 ? 128 : DSQ_GROUP_DEFAULT;
    return 0;
}

/* What AWQ optimises, checked where the sample can show it: scales searched
 * on the calibration text lower the groups' output error on held-out text
 * (samples/data/heldout.txt) in every layer. (The end-to-end KL divergence
 * of w4a16 g128 on this sample is too lumpy to rank AWQ against RTN; see
 * docs/calibration.md.) */
static void test_sample_awq_generalises(void **state)
{
    (void)state;
    const char *model = "samples/tiny-dsv3";
    if (!sample_present(model, "samples/data/calib.txt", "samples/data/heldout.txt", (char *)NULL)) return;
    dsq_model *m = open_lazy(model);
    dsq_tokenizer *tk;
    assert_int_equal(dsq_tokenizer_load(&tk, model, NULL), 0);
    const int NS = 8, T = 256;
    dsq_hstore *ha = text_states(m, tk, "samples/data/calib.txt", NS, T);
    dsq_hstore *hb = text_states(m, tk, "samples/data/heldout.txt", NS, T);
    const dsq_model_config *cfg = dsq_model_get_config(m);
    const int L = (int)cfg->num_hidden_layers;
    double sum_id = 0.0, sum_s = 0.0, attn_old = 0.0, attn_blk = 0.0;
    int groups = 0, better = 0;
    for (int l = 0; l < L; l++) {
        const int ne = dsq_model_config_is_moe_layer(cfg, l) ? (int)cfg->n_routed_experts : 0;
        dsq_layer_stats la, lb;
        assert_int_equal(dsq_layer_stats_init(&la, l, ne), 0);
        assert_int_equal(dsq_layer_stats_init(&lb, l, ne), 0);
        /* 4 whole sequences of each text for the attention block loss */
        dsq_collect_opts co = { .sample_cap_dense = 512, .sample_cap_expert = 64, .seed = 7, .attn_seqs = 4 };
        assert_int_equal(dsq_collect_layer(m, l, ha, l + 1 < L, &co, &la, NULL, NULL), 0);
        assert_int_equal(dsq_collect_layer(m, l, hb, l + 1 < L, &co, &lb, NULL, NULL), 0);
        if (l + 1 < L) {
            assert_int_equal(dsq_hstore_swap(ha, NULL), 0);
            assert_int_equal(dsq_hstore_swap(hb, NULL), 0);
        }
        dsq_group_list gl;
        assert_int_equal(dsq_groups_build(m, l, DSQ_GROUPS_AWQ, &gl, NULL), 0);
        double lid = 0.0, ls = 0.0;
        for (int i = 0; i < gl.n; i++) {
            dsq_search_opts so = { DSQ_SEARCH_AWQ, 0, sample_target, (void *)"awq-w4a16", dsq_model_pool(m), NULL, 1 };
            float *s = malloc((size_t)gl.v[i].n * sizeof *s);
            if (gl.v[i].attn_model) {
                /* the attention input on AutoAWQ's objective (the MLA block
                 * output on held-out sequences): scales searched on that
                 * block beat those searched on the q_a / kv_a outputs */
                dsq_search_opts sl = so;
                sl.attn_block = 0;
                dsq_search_report r2;
                double b0, b1, o0, o1;
                int64_t rb, ro;
                assert_int_equal(dsq_scale_search(&gl.v[i], &la, &sl, s, &r2, NULL), 0);
                assert_int_equal(dsq_scale_eval(&gl.v[i], &lb, &so, s, &o0, &o1, &ro, NULL), 0);
                assert_int_equal(dsq_scale_search(&gl.v[i], &la, &so, s, &r2, NULL), 0);
                assert_int_equal(dsq_scale_eval(&gl.v[i], &lb, &so, s, &b0, &b1, &rb, NULL), 0);
                assert_true(rb == 4 * T && ro == rb && b0 == o0);   /* the block, on whole sequences */
                fprintf(stderr, "  layer %d: held-out MLA block MSE, s = 1 / q_a,kv_a loss / block loss: %.4g / "
                        "%.4g / %.4g\n", l, b0, o1, b1);
                attn_old += o1;
                attn_blk += b1;
            }
            dsq_search_report rep;
            assert_int_equal(dsq_scale_search(&gl.v[i], &la, &so, s, &rep, NULL), 0);
            double e0, e1;
            int64_t rows;
            assert_int_equal(dsq_scale_eval(&gl.v[i], &lb, &so, s, &e0, &e1, &rows, NULL), 0);
            if (rows > 0 && rep.rows > 0) {
                groups++;
                better += e1 <= e0;
                lid += e0;
                ls += e1;
            }
            free(s);
        }
        fprintf(stderr, "  layer %d: held-out group MSE, s = 1 / AWQ: %.5g / %.5g (%+.1f%%)\n", l, lid, ls,
                100.0 * (ls - lid) / lid);
        assert_true(ls < lid);
        sum_id += lid;
        sum_s += ls;
        dsq_groups_release(&gl);
        dsq_layer_stats_release(&la);
        dsq_layer_stats_release(&lb);
        dsq_model_layer_release(m, l);
    }
    fprintf(stderr, "  %d of %d groups better on held-out text; total %+.1f%%\n", better, groups,
            100.0 * (sum_s - sum_id) / sum_id);
    assert_true(sum_s < sum_id);
    /* summed over the layers (-38% measured, layer 3 carries most; per layer
     * in docs/calibration.md) */
    fprintf(stderr, "  attention input, held-out block MSE summed: q_a,kv_a loss %.4g, block loss %.4g (%+.1f%%)\n",
            attn_old, attn_blk, 100.0 * (attn_blk - attn_old) / attn_old);
    assert_true(attn_blk < attn_old);
    dsq_hstore_free(ha, 1);
    dsq_hstore_free(hb, 1);
    dsq_tokenizer_free(tk);
    dsq_model_free(m);
}

/* w8a8-dynamic on the tensor that carries its KLD on the sample, the dense
 * layer's down_proj (docs/calibration.md): the up_proj -> down_proj scales
 * searched on the calibration text lower the simulated W8A8_DYNAMIC output
 * error of down_proj (int8 weights, per-token int8 activations) on held-out
 * rows well below round-to-nearest. Measured -37.8% on 2,048 held-out rows
 * (-51% on the calibration rows); the test asks for -20%. It is as far as
 * smoothing goes on that tensor: per-token rounding of its sparse input, not
 * channel outliers, is the error (docs/calibration.md, "Weights or
 * activations?"), so the KLD is not asserted. */
static void test_sample_dynamic_down_smoothing(void **state)
{
    (void)state;
    const char *model = "samples/tiny-dsv3";
    if (!sample_present(model, "samples/data/calib.txt", "samples/data/heldout.txt", (char *)NULL)) return;
    dsq_model *m = open_lazy(model);
    dsq_tokenizer *tk;
    assert_int_equal(dsq_tokenizer_load(&tk, model, NULL), 0);
    const dsq_model_config *cfg = dsq_model_get_config(m);
    const int NS = 8, T = 256;
    dsq_hstore *ha = text_states(m, tk, "samples/data/calib.txt", NS, T);
    dsq_hstore *hb = text_states(m, tk, "samples/data/heldout.txt", NS, T);
    int checked = 0;
    for (int l = 0; l < (int)cfg->num_hidden_layers && !dsq_model_config_is_moe_layer(cfg, l); l++) {
        dsq_layer_stats la, lb;
        assert_int_equal(dsq_layer_stats_init(&la, l, 0), 0);
        assert_int_equal(dsq_layer_stats_init(&lb, l, 0), 0);
        /* every held-out row (NS * T) scored; the search keeps its 512 */
        dsq_collect_opts ca = { .sample_cap_dense = 512, .sample_cap_expert = 64, .seed = 7 };
        dsq_collect_opts cb = { .sample_cap_dense = NS * T, .sample_cap_expert = 64, .seed = 7 };
        const int next = l + 1 < (int)cfg->num_hidden_layers;
        assert_int_equal(dsq_collect_layer(m, l, ha, next, &ca, &la, NULL, NULL), 0);
        assert_int_equal(dsq_collect_layer(m, l, hb, next, &cb, &lb, NULL, NULL), 0);
        if (next) {
            assert_int_equal(dsq_hstore_swap(ha, NULL), 0);
            assert_int_equal(dsq_hstore_swap(hb, NULL), 0);
        }
        dsq_group_list gl;
        assert_int_equal(dsq_groups_build(m, l, DSQ_GROUPS_SMOOTH, &gl, NULL), 0);
        for (int i = 0; i < gl.n; i++) {
            const dsq_scale_group *g = &gl.v[i];
            if (!g->prev_lin || !strstr(g->prev, ".mlp.up_proj.weight")) continue;
            dsq_search_opts so = { DSQ_SEARCH_SMOOTH, 0, sample_target, (void *)"w8a8-dynamic", dsq_model_pool(m), NULL, 0 };
            float *s = malloc((size_t)g->n * sizeof *s);
            dsq_search_report rep;
            assert_int_equal(dsq_scale_search(g, &la, &so, s, &rep, NULL), 0);
            double e0, e1;
            int64_t rows;
            assert_int_equal(dsq_scale_eval(g, &lb, &so, s, &e0, &e1, &rows, NULL), 0);
            fprintf(stderr, "  layer %d down_proj, w8a8-dynamic output MSE on %lld held-out rows, RTN / smoothed: "
                    "%.4g / %.4g (%+.1f%%; calibration rows %.4g / %.4g)\n", l, (long long)rows, e0, e1,
                    100.0 * (e1 - e0) / e0, rep.loss_identity, rep.loss_best);
            assert_true(rows == (int64_t)NS * T);
            assert_true(e1 < 0.8 * e0);
            checked++;
            free(s);
        }
        dsq_groups_release(&gl);
        dsq_layer_stats_release(&la);
        dsq_layer_stats_release(&lb);
        dsq_model_layer_release(m, l);
    }
    assert_true(checked > 0);
    dsq_hstore_free(ha, 1);
    dsq_hstore_free(hb, 1);
    dsq_tokenizer_free(tk);
    dsq_model_free(m);
}

/* ---- AWQ clip on X^T X ----------------------------------------------------------- */

/* w quantized by awq-w4a16 (group gs) and dequantized into out. */
static void quant_deq(const float *w, int64_t rows, int64_t cols, int32_t gs, int clip, const float *imp, float *out)
{
    const dsq_scheme *sc = dsq_scheme_by_name("awq-w4a16");
    dsq_qshape sh;
    assert_int_equal(dsq_qshape_init(&sh, sc, rows, cols, gs), 0);
    size_t bs;
    assert_int_equal(sc->blob_size(&sh, &bs), 0);
    uint8_t *blob = calloc(1, bs);
    dsq_qparams qp;
    dsq_qparams_init(&qp);
    qp.clip_search = clip;
    qp.range_search = -1;   /* the clip methods compared on min/max RTN, as the clip search above */
    qp.importance = imp;
    assert_int_equal(dsq_quantize_tensor(sc, w, &sh, &qp, blob, NULL, NULL), 0);
    dsq_qview v;
    assert_int_equal(dsq_qview_init(&v, sc, &sh, blob, bs, NULL), 0);
    sc->dequantize(&v, 0, rows, out);
    free(blob);
}

/* The clip searched on each group's X^T X (AutoAWQ's objective, all tokens)
 * generalises: summed over every clippable linear of the sample, the output
 * error on held-out text is clearly below both no clipping and the older
 * diagonal-proxy clip (importance-weighted weight error). The same X^T X
 * blocks, accumulated over a known input, equal the hand-computed sums. */
static void test_sample_clip_cov(void **state)
{
    (void)state;
    /* X^T X of a known input, in pieces and with a ragged last block */
    {
        const int64_t in = 130, T = 300;
        float *x = malloc((size_t)(in * T) * sizeof *x);
        for (int64_t i = 0; i < in * T; i++) x[i] = (float)((i * 7919) % 61) / 30.0f - 1.0f;
        dsq_act_stats st;
        assert_int_equal(dsq_act_stats_init(&st, "s", in, 0, 1), 0);
        assert_int_equal(dsq_act_stats_enable_cov(&st), 0);
        assert_int_equal(dsq_act_stats_add(&st, x, 17, NULL, NULL), 0);
        assert_int_equal(dsq_act_stats_add(&st, x + 17 * in, T - 17, NULL, NULL), 0);
        assert_int_equal(dsq_act_stats_enable_cov(&st), 0);
        const int64_t pairs[4][2] = { { 0, 0 }, { 3, 127 }, { 127, 3 }, { 129, 128 } };
        for (int p = 0; p < 4; p++) {
            int64_t i = pairs[p][0], k = pairs[p][1], b = i / 128;
            double ref = 0.0;
            for (int64_t t = 0; t < T; t++) ref += (double)x[t * in + i] * (double)x[t * in + k];
            double got = st.cov[b * 128 * 128 + (i % 128) * 128 + k % 128];
            assert_true(fabs(got - ref) <= 1e-4 * (1.0 + fabs(ref)));
        }
        dsq_act_stats_release(&st);
        free(x);
    }
    const char *model = "samples/tiny-dsv3";
    if (!sample_present(model, "samples/data/calib.txt", "samples/data/heldout.txt", (char *)NULL)) return;
    dsq_model *m = open_lazy(model);
    dsq_tokenizer *tk;
    assert_int_equal(dsq_tokenizer_load(&tk, model, NULL), 0);
    const int NS = 8, T = 256;
    dsq_hstore *ha = text_states(m, tk, "samples/data/calib.txt", NS, T);
    dsq_hstore *hb = text_states(m, tk, "samples/data/heldout.txt", NS, T);
    const dsq_model_config *cfg = dsq_model_get_config(m);
    const int L = (int)cfg->num_hidden_layers;
    double sum[3] = { 0.0, 0.0, 0.0 };   /* held-out output MSE: no clip, diagonal proxy, X^T X */
    int nlin = 0;
    for (int l = 0; l < L; l++) {
        const int ne = dsq_model_config_is_moe_layer(cfg, l) ? (int)cfg->n_routed_experts : 0;
        dsq_layer_stats la, lb;
        assert_int_equal(dsq_layer_stats_init(&la, l, ne), 0);
        assert_int_equal(dsq_layer_stats_init(&lb, l, ne), 0);
        dsq_collect_opts ca = { .seed = 7, .cov = 1 };
        dsq_collect_opts cb = { .sample_cap_dense = 512, .sample_cap_expert = 512, .seed = 7 };
        assert_int_equal(dsq_collect_layer(m, l, ha, l + 1 < L, &ca, &la, NULL, NULL), 0);
        assert_int_equal(dsq_collect_layer(m, l, hb, l + 1 < L, &cb, &lb, NULL, NULL), 0);
        if (l + 1 < L) {
            assert_int_equal(dsq_hstore_swap(ha, NULL), 0);
            assert_int_equal(dsq_hstore_swap(hb, NULL), 0);
        }
        const dsq_layer *ly = &dsq_model_weights(m)->layers[l];
        const dsq_linear *lins[64];
        int n = 0;
        const dsq_linear *attn[] = { &ly->kv_a, &ly->kv_b, &ly->o };
        for (int i = 0; i < 3; i++) lins[n++] = attn[i];
        const dsq_mlp *mlps[20];
        int nm = 0;
        if (!ly->is_moe) mlps[nm++] = &ly->mlp;
        for (int e = 0; e < ne && nm < 18; e++) mlps[nm++] = &ly->experts[e];
        if (ly->is_moe && ly->has_shared) mlps[nm++] = &ly->shared;
        for (int i = 0; i < nm; i++) {
            lins[n++] = &mlps[i]->gate;
            lins[n++] = &mlps[i]->up;
            lins[n++] = &mlps[i]->down;
        }
        double ls[3] = { 0.0, 0.0, 0.0 };
        for (int i = 0; i < n; i++) {
            const dsq_linear *lin = lins[i];
            char sn[400];
            dsq_calib_site_of(lin->name, 1, sn, sizeof sn);
            const dsq_act_stats *sa = dsq_layer_stats_find(&la, sn), *sb = dsq_layer_stats_find(&lb, sn);
            if (!sa || !sb || sa->count < 16 || sb->sample_n < 16) continue;   /* an expert with too few tokens */
            assert_true(dsq_awq_clip_allowed(lin->name));
            const int64_t R = lin->out, C = lin->in;
            float *w = malloc((size_t)(R * C) * sizeof *w), *wc = malloc((size_t)(R * C) * sizeof *wc);
            float *q = malloc((size_t)(R * C) * sizeof *q), *imp = malloc((size_t)C * sizeof *imp);
            uint8_t *idx = malloc((size_t)(R * ((C + 127) / 128)));
            lin->w.scheme->dequantize(&lin->w, 0, R, w);
            for (int64_t j = 0; j < C; j++) imp[j] = (float)dsq_act_stats_rms(sa, j);
            double e0, e1;
            assert_int_equal(dsq_awq_clip_search(w, R, C, 128, NULL, sa, -1, NULL, idx, &e0, &e1), 0);
            assert_true(e1 <= e0);   /* on its own data the search never loses */
            memcpy(wc, w, (size_t)(R * C) * sizeof *wc);
            dsq_awq_clip_apply(wc, R, C, 128, idx);
            for (int v = 0; v < 3; v++) {
                quant_deq(v == 2 ? wc : w, R, C, 128, v == 1, v == 1 ? imp : NULL, q);
                double e = dsq_awq_output_mse(w, q, R, C, NULL, sb->sample, sb->sample_n);
                assert_true(e >= 0.0);
                ls[v] += e;
            }
            nlin++;
            free(w);
            free(wc);
            free(q);
            free(imp);
            free(idx);
        }
        fprintf(stderr, "  layer %d: held-out output MSE, no clip / diagonal proxy / X^T X: %.5g / %.5g / %.5g\n", l,
                ls[0], ls[1], ls[2]);
        assert_true(ls[2] < ls[1] && ls[2] < ls[0]);   /* every layer: -10% .. -27% vs the proxy */
        for (int v = 0; v < 3; v++) sum[v] += ls[v];
        dsq_layer_stats_release(&la);
        dsq_layer_stats_release(&lb);
        dsq_model_layer_release(m, l);
    }
    fprintf(stderr, "  %d linears: X^T X clip %+.1f%% vs no clip, %+.1f%% vs the diagonal proxy\n", nlin,
            100.0 * (sum[2] - sum[0]) / sum[0], 100.0 * (sum[2] - sum[1]) / sum[1]);
    assert_true(nlin > 20);
    /* measured -36.5% and -26.1% on the sample: a 10% margin cannot flip */
    assert_true(sum[2] < 0.9 * sum[0]);
    assert_true(sum[2] < 0.9 * sum[1]);
    dsq_hstore_free(ha, 1);
    dsq_hstore_free(hb, 1);
    dsq_tokenizer_free(tk);
    dsq_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sample_ordering, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sample_dynamic_smoothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sample_rollback, setup, teardown),
        cmocka_unit_test(test_sample_awq_generalises),
        cmocka_unit_test(test_sample_dynamic_down_smoothing),
        cmocka_unit_test(test_sample_clip_cov),
    };
    /* DSQ_TEST_FILTER=test_sample_* runs only the matching tests (the sample
     * measurements take minutes on 2 cores) */
    if (getenv("DSQ_TEST_FILTER")) cmocka_set_test_filter(getenv("DSQ_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
