/* test_quarot.c - Hadamard constructions, seeded rotations and the QuaRot
 * transform of a DeepSeek checkpoint:
 *   - every constructed Hadamard matrix has H H^T = n I (Sylvester, Paley I,
 *     Paley II and their Kronecker products; 28 x 256 for DeepSeek's 7168);
 *   - every rotation kind is orthogonal; the fast row transform, its inverse
 *     and the left / right weight rotations agree with the dense matrix;
 *     the block-shifted rotation is B P B with P the half-block shift;
 *   - the rotated float model computes the source's logits to float
 *     rounding in dsq's engine (BF16 and FP8 sources), with unit norms. */
#include "dsq_test.h"

#include "dsq_file.h"
#include "hadamard.h"
#include "model.h"
#include "dsa.h"
#include "model_config.h"
#include "quarot.h"
#include "safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_hadamard_orders(void **st)
{
    (void)st;
    static const int64_t orders[] = { 1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 36, 44, 56, 60, 76, 112, 224 };
    for (size_t k = 0; k < sizeof orders / sizeof orders[0]; k++) {
        int64_t n = orders[k];
        int8_t *h = malloc((size_t)(n * n));
        assert_non_null(h);
        assert_int_equal(dsq_hadamard_fill(n, h, NULL), 0);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) {
                assert_true(h[i * n + j] == 1 || h[i * n + j] == -1);
                long dot = 0;
                for (int64_t t = 0; t < n; t++) dot += h[i * n + t] * h[j * n + t];
                if (dot != (i == j ? n : 0)) fail_msg("order %lld: rows %lld, %lld dot %ld", (long long)n,
                                                      (long long)i, (long long)j, dot);
            }
        free(h);
    }
    /* DeepSeek widths: 7168 = 28 x 256 (Paley II q = 13), 1536 = 12 x 128 */
    assert_int_equal(dsq_hadamard_base_order(7168), 28);
    assert_int_equal(dsq_hadamard_base_order(1536), 12);
    assert_int_equal(dsq_hadamard_base_order(512), 1);
    assert_int_equal(dsq_hadamard_base_order(6), 0);
    assert_int_equal(dsq_hadamard_base_order(100), 0);
    int8_t h6[36];
    assert_int_equal(dsq_hadamard_fill(6, h6, NULL), DSQ_ERR_UNSUPPORTED);
}

/* Dense R of r, and checks R R^T = I. */
static float *dense_orth(const dsq_rotation *r)
{
    int64_t n = r->n;
    float *R = malloc((size_t)(n * n) * sizeof *R);
    assert_non_null(R);
    assert_int_equal(dsq_rot_dense(r, R, NULL), 0);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            double dot = 0;
            for (int64_t t = 0; t < n; t++) dot += (double)R[i * n + t] * R[j * n + t];
            if (fabs(dot - (i == j)) > 1e-5) fail_msg("order %lld kind %d: (R R^T)[%lld][%lld] = %g", (long long)n,
                                                      r->kind, (long long)i, (long long)j, dot);
        }
    return R;
}

static void test_rotations_orthogonal_and_fast(void **st)
{
    (void)st;
    static const struct { int kind; int64_t n, block; int64_t want_b; int fallback; } cases[] = {
        { DSQ_ROT_HADAMARD, 224, 0, 224, 0 },       { DSQ_ROT_HADAMARD, 256, 0, 256, 0 },
        { DSQ_ROT_BLOCK, 96, 32, 32, 0 },            { DSQ_ROT_BLOCK_SHIFTED, 96, 32, 32, 0 },
        { DSQ_ROT_HADAMARD, 100, 0, 20, 1 },         { DSQ_ROT_HADAMARD, 6, 0, 2, 1 },
        { DSQ_ROT_BLOCK_SHIFTED, 48, 12, 12, 0 },
    };
    uint64_t rs = 0x1234;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        dsq_rotation r;
        assert_int_equal(dsq_rot_init(&r, cases[k].kind, cases[k].n, cases[k].block, 7, NULL), 0);
        assert_int_equal(r.b, cases[k].want_b);
        assert_int_equal(r.fallback, cases[k].fallback);
        int64_t n = r.n;
        float *R = dense_orth(&r);
        /* fast row transform and inverse against the dense matrix */
        float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
        double *work = malloc((size_t)(2 * n) * sizeof *work);
        for (int64_t i = 0; i < n; i++) x[i] = y[i] = (float)((int)(dsq_test_xorshift(&rs) % 2001) - 1000) / 100.0f;
        dsq_rot_row(&r, y, work);
        for (int64_t j = 0; j < n; j++) {
            double acc = 0;
            for (int64_t i = 0; i < n; i++) acc += (double)x[i] * R[i * n + j];
            assert_true(fabs(acc - y[j]) < 1e-4 * (1 + fabs(acc)));
        }
        dsq_rot_row_inv(&r, y, work);
        for (int64_t i = 0; i < n; i++) assert_true(fabs(y[i] - x[i]) < 1e-4 * (1 + fabs(x[i])));
        /* right on a column slice, left on a row slice */
        const int64_t rows = 3, cols = n + 5;
        float *w = malloc((size_t)(rows * cols) * sizeof *w), *w0 = malloc((size_t)(rows * cols) * sizeof *w0);
        for (int64_t i = 0; i < rows * cols; i++) w[i] = w0[i] = (float)(dsq_test_xorshift(&rs) % 1000) / 250.0f - 2;
        assert_int_equal(dsq_rot_right(&r, w, rows, cols, 2, NULL), 0);
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) {
                double want = w0[i * cols + j];
                if (j >= 2 && j < 2 + n) {
                    want = 0;
                    for (int64_t t = 0; t < n; t++) want += (double)w0[i * cols + 2 + t] * R[t * n + (j - 2)];
                }
                assert_true(fabs(want - w[i * cols + j]) < 1e-4);
            }
        assert_int_equal(dsq_rot_right(&r, w, rows, cols, 6, NULL), DSQ_ERR_INVALID_ARG);
        free(w);
        free(w0);
        const int64_t lr = n + 2, lc = 4;
        w = malloc((size_t)(lr * lc) * sizeof *w);
        w0 = malloc((size_t)(lr * lc) * sizeof *w0);
        for (int64_t i = 0; i < lr * lc; i++) w[i] = w0[i] = (float)(dsq_test_xorshift(&rs) % 1000) / 250.0f - 2;
        assert_int_equal(dsq_rot_left(&r, w, lr, lc, 1, NULL), 0);
        for (int64_t i = 0; i < lr; i++)
            for (int64_t j = 0; j < lc; j++) {
                double want = w0[i * lc + j];
                if (i >= 1 && i < 1 + n) {   /* (R^T W)[i][j] = sum_t R[t][i] W[t][j] */
                    want = 0;
                    for (int64_t t = 0; t < n; t++) want += (double)R[t * n + (i - 1)] * w0[(1 + t) * lc + j];
                }
                assert_true(fabs(want - w[i * lc + j]) < 1e-4);
            }
        free(w);
        free(w0);
        free(x);
        free(y);
        free(work);
        free(R);
        dsq_rot_free(&r);
    }
}

/* The block-shifted rotation is B P B with (x P)[j] = x[(j - b/2) mod n]. */
static void test_block_shifted_is_bpb(void **st)
{
    (void)st;
    const int64_t n = 96, b = 32;
    dsq_rotation rb, rs;
    assert_int_equal(dsq_rot_init(&rb, DSQ_ROT_BLOCK, n, b, 11, NULL), 0);
    assert_int_equal(dsq_rot_init(&rs, DSQ_ROT_BLOCK_SHIFTED, n, b, 11, NULL), 0);
    float *B = malloc(n * n * sizeof *B), *S = malloc(n * n * sizeof *S);
    assert_int_equal(dsq_rot_dense(&rb, B, NULL), 0);
    assert_int_equal(dsq_rot_dense(&rs, S, NULL), 0);
    /* BP[i][j] = B[i][(j - b/2) mod n] */
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = 0;
            for (int64_t t = 0; t < n; t++) acc += (double)B[i * n + (t - b / 2 + n) % n] * B[t * n + j];
            assert_true(fabs(acc - S[i * n + j]) < 1e-5);
        }
    /* the blocks repeat one random Hadamard: block 0 equals block 2 */
    for (int64_t i = 0; i < b; i++)
        for (int64_t j = 0; j < b; j++) assert_true(B[i * n + j] == B[(i + 2 * b) * n + 2 * b + j]);
    free(B);
    free(S);
    dsq_rot_free(&rb);
    dsq_rot_free(&rs);
}

static void test_rotation_seeded(void **st)
{
    (void)st;
    dsq_rotation a, b, c;
    assert_int_equal(dsq_rot_init(&a, DSQ_ROT_HADAMARD, 64, 0, 1, NULL), 0);
    assert_int_equal(dsq_rot_init(&b, DSQ_ROT_HADAMARD, 64, 0, 1, NULL), 0);
    assert_int_equal(dsq_rot_init(&c, DSQ_ROT_HADAMARD, 64, 0, 2, NULL), 0);
    assert_memory_equal(a.sign, b.sign, 64);
    assert_memory_not_equal(a.sign, c.sign, 64);
    int neg = 0;
    for (int i = 0; i < 64; i++) neg += a.sign[i] < 0;
    assert_true(neg > 8 && neg < 56);
    dsq_rot_free(&c);
    assert_int_equal(dsq_rot_init(&c, DSQ_ROT_BLOCK, 64, 24, 1, NULL), DSQ_ERR_INVALID_ARG);
    dsq_rot_free(&a);
    dsq_rot_free(&b);
    dsq_rot_free(&c);
}

static void test_quarot_plan_rules(void **st)
{
    (void)st;
    dsq_model_config cfg;
    assert_int_equal(dsq_model_config_load(&cfg, "samples/tiny-dsv3/config.json", NULL), 0);
    dsq_st_model *m = NULL;
    assert_int_equal(dsq_st_open(&m, "samples/tiny-dsv3", NULL), 0);
    for (size_t i = 0; i < dsq_st_count(m); i++) {
        dsq_quarot_tensor_plan p;
        dsq_diag d;
        dsq_diag_clear(&d);
        if (dsq_quarot_plan(&cfg, dsq_st_get(m, i)->name, &p, &d)) fail_msg("%s: %s", dsq_st_get(m, i)->name, d.msg);
    }
    dsq_st_close(m);
    dsq_quarot_tensor_plan p;
    assert_int_equal(dsq_quarot_plan(&cfg, "model.layers.1.self_attn.o_proj.weight", &p, NULL), 0);
    assert_int_equal(p.nops, 2);
    assert_int_equal(p.op[0].rot, DSQ_QR_RUV);
    assert_int_equal(p.op[0].count, cfg.num_attention_heads);
    assert_int_equal(p.op[1].left, 1);
    assert_int_equal(dsq_quarot_plan(&cfg, "model.layers.1.self_attn.kv_b_proj.weight", &p, NULL), 0);
    assert_int_equal(p.op[1].off, cfg.qk_nope_head_dim);
    assert_int_equal(p.op[1].stride, cfg.qk_nope_head_dim + cfg.v_head_dim);
    assert_int_equal(dsq_quarot_plan(&cfg, "model.layers.0.input_layernorm.weight", &p, NULL), 0);
    assert_int_equal(p.kind, DSQ_QP_ONES);
    assert_int_equal(dsq_quarot_plan(&cfg, "model.layers.0.self_attn.indexer.wq_b.weight", &p, NULL), 0);
    assert_int_equal(p.op[0].rot, DSQ_QR_RQ);
    assert_int_equal(dsq_quarot_plan(&cfg, "model.layers.0.self_attn.unknown.weight", &p, NULL), DSQ_ERR_UNSUPPORTED);
    assert_int_equal(dsq_quarot_plan(&cfg, "vision.proj.weight", &p, NULL), DSQ_ERR_UNSUPPORTED);
    dsq_model_config_release(&cfg);
}

static int32_t PROMPT[160] = { 3, 17, 42, 5, 63, 0, 8, 8, 21, 34, 55, 13, 200, 1000, 7, 99 };
static int g_prompt_len = 16;   /* past tiny-dsv32's index_topk (64) for the DSA test */

static int g_dsa_mode = 0;   /* DSQ_DSA_FP8 unless a test asks for float */

static float *logits_of(const char *path, int n, int *vocab)
{
    dsq_model_opts o;
    dsq_model_opts_default(&o);
    o.threads = 1;
    o.dsa_mode = g_dsa_mode;
    o.fp8_as_f32 = 1;   /* an FP8 source in exact float, as the rotated copy holds it */
    dsq_model *m = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    if (dsq_model_open(&m, path, &o, &d)) fail_msg("open %s: %s", path, d.msg);
    int V = (int)dsq_model_get_config(m)->vocab_size;
    float *lg = malloc((size_t)n * V * sizeof *lg);
    dsq_state *s = dsq_state_create(m, 1, 192);
    assert_non_null(s);
    assert_int_equal(dsq_forward(m, s, 0, PROMPT, n, lg, 0, NULL), 0);
    dsq_state_free(s);
    dsq_model_free(m);
    *vocab = V;
    return lg;
}

/* The rotated model's logits equal the source's to float rounding. */
static void check_invariance(const char *src, enum dsq_dtype dt, double tol)
{
    char *tmp = dsq_test_tmpdir();
    char out[1024];
    snprintf(out, sizeof out, "%s/rot", tmp);
    dsq_quarot_opts o;
    dsq_quarot_opts_init(&o);
    o.out_dtype = dt;
    o.seed = 99;
    dsq_diag d;
    dsq_diag_clear(&d);
    if (dsq_quarot_write(src, out, &o, &d)) fail_msg("quarot %s: %s (%s)", src, d.msg, d.tensor);
    assert_int_equal(dsq_quarot_write(src, out, &o, NULL), DSQ_ERR_EXISTS);   /* never over an existing output */
    assert_true(dsq_quarot_is_ours(out, 99));
    assert_false(dsq_quarot_is_ours(out, 98));
    assert_false(dsq_quarot_is_ours(src, 99));
    assert_int_equal(dsq_quarot_remove(src, NULL, NULL), DSQ_ERR_STATE);   /* a source is never removed */
    /* unit norms, rotated embedding */
    dsq_st_model *a = NULL, *b = NULL;
    assert_int_equal(dsq_st_open(&a, src, NULL), 0);
    assert_int_equal(dsq_st_open(&b, out, NULL), 0);
    const dsq_st_tensor *nt = dsq_st_find(b, "model.layers.0.input_layernorm.weight");
    assert_non_null(nt);
    float *gv = malloc((size_t)nt->numel * sizeof *gv);
    assert_int_equal(dsq_st_read_rows_f32(b, nt, 0, 1, gv, NULL), 0);
    for (uint64_t i = 0; i < nt->numel; i++) assert_true(gv[i] == 1.0f);
    free(gv);
    float ea[4], eb[4];
    const dsq_st_tensor *e0 = dsq_st_find(a, "model.embed_tokens.weight"), *e1 = dsq_st_find(b, "model.embed_tokens.weight");
    float *ra = malloc((size_t)dsq_st_cols(e0) * sizeof *ra), *rb = malloc((size_t)dsq_st_cols(e1) * sizeof *rb);
    assert_int_equal(dsq_st_read_rows_f32(a, e0, 5, 1, ra, NULL), 0);
    assert_int_equal(dsq_st_read_rows_f32(b, e1, 5, 1, rb, NULL), 0);
    memcpy(ea, ra, sizeof ea);
    memcpy(eb, rb, sizeof eb);
    assert_memory_not_equal(ea, eb, sizeof ea);
    /* the rotation keeps each token vector's length */
    double na = 0, nb = 0;
    for (int64_t i = 0; i < dsq_st_cols(e0); i++) na += (double)ra[i] * ra[i], nb += (double)rb[i] * rb[i];
    assert_true(fabs(na - nb) < 1e-3 * na);
    free(ra);
    free(rb);
    assert_null(dsq_st_find(b, "model.layers.0.self_attn.q_a_proj.weight_scale_inv"));
    dsq_st_close(a);
    dsq_st_close(b);

    const int n = g_prompt_len;
    int V = 0, V2 = 0;
    float *la = logits_of(src, n, &V), *lb = logits_of(out, n, &V2);
    assert_int_equal(V, V2);
    double maxd = 0, maxa = 0;
    for (int64_t i = 0; i < (int64_t)n * V; i++) {
        maxd = fmax(maxd, fabs((double)la[i] - lb[i]));
        maxa = fmax(maxa, fabs((double)la[i]));
    }
    printf("quarot %s -> %s: max |logit| %.3f, max |difference| %.2e\n", src, dt == DSQ_DTYPE_F32 ? "F32" : "BF16",
           maxa, maxd);
    assert_true(maxa > 1.0);
    assert_true(maxd < tol * maxa);
    free(la);
    free(lb);
    /* removal takes the files it wrote and the directory, nothing else */
    char extra[1100];
    snprintf(extra, sizeof extra, "%s/notes.txt", out);
    dsq_test_write(extra, "x", 1);
    assert_int_equal(dsq_quarot_remove(out, src, NULL), DSQ_OK);
    assert_true(dsq_path_exists(extra));
    assert_int_equal(remove(extra), 0);
    assert_int_equal(dsq_quarot_remove(out, src, NULL), DSQ_ERR_STATE);   /* the shards are gone */
    dsq_test_rmtree(tmp);
    free(tmp);
}

static void test_quarot_model_invariance_bf16_source(void **st)
{
    (void)st;
    check_invariance("samples/tiny-dsv3", DSQ_DTYPE_F32, 1e-4);
}

static void test_quarot_model_invariance_fp8_source(void **st)
{
    (void)st;
    check_invariance("samples/tiny-dsv3-fp8", DSQ_DTYPE_F32, 1e-4);
}

/* DeepSeek-V3.2: the indexer's wk / weights_proj (hidden rotation) and
 * wq_b (q-LoRA rotation) are fused too; in float DSA (no e4m3 rounding to
 * flip a key selection) the rotated model selects the same keys and gives
 * the same logits. */
static void test_quarot_model_invariance_dsa(void **st)
{
    (void)st;
    if (!dsq_path_exists("samples/tiny-dsv32/config.json")) {
        printf("skipped: samples/tiny-dsv32 absent\n");
        return;
    }
    uint64_t seed = 5;
    for (int i = 16; i < 160; i++) PROMPT[i] = (int32_t)(dsq_test_xorshift(&seed) % 3000);
    g_dsa_mode = DSQ_DSA_FLOAT;
    g_prompt_len = 160;
    check_invariance("samples/tiny-dsv32", DSQ_DTYPE_F32, 1e-4);
    g_dsa_mode = 0;
    g_prompt_len = 16;
}

/* A killed rotation leaves OUT.partial: a rerun removes it and starts again
 * when it holds the marker and only files a rotation writes; anything else
 * (a foreign file, a link, no marker) is refused and left as it is. */
static void put(const char *dir, const char *name)
{
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    dsq_test_write(p, "x", 1);
}

static void test_quarot_partial_leftovers(void **st)
{
    (void)st;
    const char *src = "samples/tiny-dsv3";
    char *tmp = dsq_test_tmpdir();
    char out[1024], part[1100], p[1200];
    snprintf(out, sizeof out, "%s/rot", tmp);
    snprintf(part, sizeof part, "%s.partial", out);
    dsq_quarot_opts o;
    dsq_quarot_opts_init(&o);
    o.out_dtype = DSQ_DTYPE_BF16;
    dsq_diag d;
    /* not dsq's: a foreign file, a link, no marker */
    for (int k = 0; k < 3; k++) {
        assert_int_equal(mkdir(part, 0755), 0);
        if (k != 2) put(part, ".dsq-rotation");
        put(part, "model-00001-of-00002.safetensors");
        const char *kept = k == 0 ? "notes.txt" : k == 1 ? "config.json" : "model-00001-of-00002.safetensors";
        if (k == 0) put(part, kept);
        snprintf(p, sizeof p, "%s/%s", part, kept);
        if (k == 1) assert_int_equal(symlink("/etc/hostname", p), 0);
        dsq_diag_clear(&d);
        assert_int_equal(dsq_quarot_write(src, out, &o, &d), DSQ_ERR_EXISTS);
        assert_non_null(strstr(d.msg, "nothing was removed"));
        struct stat sb;
        assert_int_equal(lstat(p, &sb), 0);
        assert_false(dsq_path_exists(out));
        dsq_test_rmtree(part);
    }
    /* a killed rotation's leftovers: removed, and the rotation made */
    assert_int_equal(mkdir(part, 0755), 0);
    put(part, ".dsq-rotation");
    put(part, "model-00002-of-00002.safetensors");
    put(part, ".config.json.partial");
    put(part, "tokenizer.json");
    dsq_diag_clear(&d);
    if (dsq_quarot_write(src, out, &o, &d)) fail_msg("rerun over a partial rotation: %s", d.msg);
    assert_false(dsq_path_exists(part));
    assert_true(dsq_quarot_is_ours(out, o.seed));
    /* the finished model keeps the marker; removal takes it too */
    assert_int_equal(dsq_quarot_remove(out, src, NULL), DSQ_OK);
    assert_false(dsq_path_exists(out));
    dsq_test_rmtree(tmp);
    free(tmp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hadamard_orders),
        cmocka_unit_test(test_rotations_orthogonal_and_fast),
        cmocka_unit_test(test_block_shifted_is_bpb),
        cmocka_unit_test(test_rotation_seeded),
        cmocka_unit_test(test_quarot_plan_rules),
        cmocka_unit_test(test_quarot_model_invariance_bf16_source),
        cmocka_unit_test(test_quarot_model_invariance_fp8_source),
        cmocka_unit_test(test_quarot_model_invariance_dsa),
        cmocka_unit_test(test_quarot_partial_leftovers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
