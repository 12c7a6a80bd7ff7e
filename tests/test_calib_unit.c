/* test_calib_unit.c - calibration parts on synthetic models and hand-made inputs:
 *   - statistics of a known linear input equal hand-computed max/mean/min/max;
 *     merge == one pass; non-finite input refused; reservoir holds real rows;
 *   - site aliasing and expert names;
 *   - calibration data: text and JSONL, deterministic seeded sampling, clear
 *     DSQ_ERR_DATA for empty / binary / malformed / too-short data;
 *   - scale safety: dead, zero, NaN, Inf statistics give finite scales;
 *   - AWQ (and the w4a8 alpha search) never increases a group's loss over s=1;
 *   - folding the result into a float32 checkpoint leaves the forward
 *     unchanged (AWQ and SmoothQuant), DeepSeek-V3 and Llama shapes;
 *   - an expert that never receives a token: finite scales, RTN fallback
 *     named in the report; with moe_calib_all it is calibrated;
 *   - w8a8 static activation params are finite and sane;
 *   - rollback units (sens.h) and their ranking;
 *   - the attention block loss sees the engine's attention inputs.
 * The driver's runs are in test_calib_driver.c, the measurements on the
 * trained sample in test_calib_quality.c. */
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

/* ---- statistics of a known input ----------------------------------------- */

static void test_stats_known_input(void **state)
{
    (void)state;
    /* 3 rows x 4 channels; channel 3 is dead */
    const float x[12] = { 1.0f, -2.0f, 0.5f, 0.0f, -3.0f, 4.0f, 0.5f, 0.0f, 2.0f, 1.0f, -0.5f, 0.0f };
    dsq_act_stats s;
    assert_int_equal(dsq_act_stats_init(&s, "l.weight", 4, 2, 1), 0);
    assert_int_equal(dsq_act_stats_add(&s, x, 3, NULL, NULL), 0);
    assert_int_equal((int)s.count, 3);
    const float amax[4] = { 3.0f, 4.0f, 0.5f, 0.0f }, mn[4] = { -3.0f, -2.0f, -0.5f, 0.0f },
                mx[4] = { 2.0f, 4.0f, 0.5f, 0.0f };
    const double mean[4] = { 2.0, 7.0 / 3.0, 0.5, 0.0 }, sq[4] = { 14.0, 21.0, 0.75, 0.0 };
    for (int j = 0; j < 4; j++) {
        assert_true(s.absmax[j] == amax[j]);
        assert_true(s.vmin[j] == mn[j] && s.vmax[j] == mx[j]);
        assert_true(fabs(dsq_act_stats_mean_abs(&s, j) - mean[j]) < 1e-12);
        assert_true(fabs(s.sum_sq[j] - sq[j]) < 1e-12);
    }
    /* reservoir: 2 of the 3 rows, each a real row */
    assert_int_equal(s.sample_n, 2);
    for (int r = 0; r < 2; r++) {
        int found = 0;
        for (int k = 0; k < 3; k++) found |= memcmp(s.sample + r * 4, x + k * 4, 16) == 0;
        assert_true(found);
    }
    /* merge of two halves == one pass */
    dsq_act_stats a, b;
    assert_int_equal(dsq_act_stats_init(&a, "l.weight", 4, 0, 1), 0);
    assert_int_equal(dsq_act_stats_init(&b, "l.weight", 4, 0, 1), 0);
    assert_int_equal(dsq_act_stats_add(&a, x, 1, NULL, NULL), 0);
    assert_int_equal(dsq_act_stats_add(&b, x + 4, 2, NULL, NULL), 0);
    assert_int_equal(dsq_act_stats_merge(&a, &b), 0);
    for (int j = 0; j < 4; j++) {
        assert_true(a.absmax[j] == s.absmax[j] && a.vmin[j] == s.vmin[j] && a.vmax[j] == s.vmax[j]);
        assert_true(a.sum_abs[j] == s.sum_abs[j] && a.sum_sq[j] == s.sum_sq[j]);
    }
    assert_int_equal((int)a.count, 3);
    /* non-finite input: refused, nothing added */
    float bad[4] = { 1.0f, NAN, 0.0f, 0.0f };
    int64_t where = -1;
    assert_int_equal(dsq_act_stats_add(&s, bad, 1, NULL, &where), DSQ_ERR_NONFINITE);
    assert_int_equal((int)where, 1);
    assert_int_equal((int)s.count, 3);
    bad[1] = INFINITY;
    assert_int_equal(dsq_act_stats_add(&s, bad, 1, NULL, NULL), DSQ_ERR_NONFINITE);
    /* large input through the pool gives the same numbers as serial */
    dsq_pool *pool = dsq_pool_create(3);
    int64_t T = 300, C = 700;
    float *big = malloc((size_t)(T * C) * sizeof *big);
    for (int64_t i = 0; i < T * C; i++) big[i] = (float)sin((double)i * 0.37) * (float)(1 + i % 13);
    dsq_act_stats p1, p2;
    assert_int_equal(dsq_act_stats_init(&p1, "x", C, 5, 3), 0);
    assert_int_equal(dsq_act_stats_init(&p2, "x", C, 5, 3), 0);
    assert_int_equal(dsq_act_stats_add(&p1, big, T, pool, NULL), 0);
    assert_int_equal(dsq_act_stats_add(&p2, big, T, NULL, NULL), 0);
    assert_memory_equal(p1.sum_abs, p2.sum_abs, (size_t)C * sizeof(double));
    assert_memory_equal(p1.sum_sq, p2.sum_sq, (size_t)C * sizeof(double));
    assert_memory_equal(p1.vmin, p2.vmin, (size_t)C * sizeof(float));
    assert_memory_equal(p1.sample, p2.sample, (size_t)(5 * C) * sizeof(float));
    /* layer merge: sites by name (created when missing), expert counts summed */
    dsq_layer_stats la, lb;
    assert_int_equal(dsq_layer_stats_init(&la, 3, 4), 0);
    assert_int_equal(dsq_layer_stats_init(&lb, 3, 4), 0);
    dsq_act_stats *sa, *sb;
    assert_int_equal(dsq_layer_stats_get(&la, "a.weight", 4, 0, 0, &sa), 0);
    assert_int_equal(dsq_act_stats_add(sa, x, 1, NULL, NULL), 0);
    assert_int_equal(dsq_layer_stats_get(&lb, "a.weight", 4, 0, 0, &sb), 0);
    assert_int_equal(dsq_act_stats_add(sb, x + 4, 2, NULL, NULL), 0);
    assert_int_equal(dsq_layer_stats_get(&lb, "b.weight", 2, 0, 0, &sb), 0);
    assert_int_equal(dsq_layer_stats_get(&lb, "b.weight", 3, 0, 0, &sb), DSQ_ERR_SHAPE);
    la.expert_tokens[1] = 5;
    lb.expert_tokens[1] = 7;
    assert_int_equal(dsq_layer_stats_merge(&la, &lb), 0);
    assert_int_equal(la.nsites, 2);
    assert_int_equal((int)la.expert_tokens[1], 12);
    sa = dsq_layer_stats_find(&la, "a.weight");
    assert_int_equal((int)sa->count, 3);
    assert_true(sa->sum_sq[1] == s.sum_sq[1]);
    assert_non_null(dsq_layer_stats_find(&la, "b.weight"));
    assert_null(dsq_layer_stats_find(&la, "c.weight"));
    dsq_layer_stats_release(&la);
    dsq_layer_stats_release(&lb);
    free(big);
    dsq_pool_free(pool);
    dsq_act_stats_release(&p1);
    dsq_act_stats_release(&p2);
    dsq_act_stats_release(&a);
    dsq_act_stats_release(&b);
    dsq_act_stats_release(&s);
}

static void test_site_names(void **state)
{
    (void)state;
    char b[256];
    assert_string_equal(dsq_calib_site_of("model.layers.2.self_attn.k_proj.weight", 0, b, sizeof b),
                        "model.layers.2.self_attn.q_proj.weight");
    assert_string_equal(dsq_calib_site_of("model.layers.2.self_attn.kv_a_proj_with_mqa.weight", 1, b, sizeof b),
                        "model.layers.2.self_attn.q_a_proj.weight");
    assert_string_equal(dsq_calib_site_of("model.layers.2.self_attn.kv_a_proj_with_mqa.weight", 0, b, sizeof b),
                        "model.layers.2.self_attn.q_proj.weight");
    assert_string_equal(dsq_calib_site_of("model.layers.3.mlp.experts.5.up_proj.weight", 1, b, sizeof b),
                        "model.layers.3.mlp.experts.5.gate_proj.weight");
    assert_string_equal(dsq_calib_site_of("model.layers.3.mlp.shared_experts.up_proj.weight", 1, b, sizeof b),
                        "model.layers.3.mlp.gate.weight");
    assert_string_equal(dsq_calib_site_of("model.layers.3.mlp.down_proj.weight", 1, b, sizeof b),
                        "model.layers.3.mlp.down_proj.weight");
    assert_int_equal(dsq_calib_expert_of("model.layers.3.mlp.experts.17.down_proj.weight"), 17);
    assert_int_equal(dsq_calib_expert_of("model.layers.3.mlp.shared_experts.down_proj.weight"), -1);
    assert_int_equal(dsq_calib_expert_of("model.layers.3.mlp.experts.x.down_proj.weight"), -1);
    assert_true(dsq_awq_clip_allowed("model.layers.0.mlp.up_proj.weight"));
    assert_false(dsq_awq_clip_allowed("model.layers.0.self_attn.q_b_proj.weight"));
    assert_false(dsq_awq_clip_allowed("model.layers.0.self_attn.k_proj.weight"));
    assert_true(dsq_awq_clip_allowed("model.layers.0.self_attn.kv_b_proj.weight"));
}

/* ---- scales safety ---------------------------------------------------------- */

static void test_scale_safety(void **state)
{
    (void)state;
    const float xmax[6] = { 0.0f, 1e-30f, 1e30f, NAN, INFINITY, 2.0f };
    const float wmax[6] = { 1.0f, 0.0f, 1e-30f, 1.0f, 1.0f, NAN };
    float s[6];
    dsq_smooth_scales(xmax, wmax, 6, 0.5f, s);
    assert_true(dsq_scales_ok(s, 6));
    assert_true(s[0] == 1.0f);   /* dead channel */
    assert_true(s[3] == 1.0f && s[4] == 1.0f);
    for (int k = 0; k <= 20; k++) {
        dsq_search_candidate(DSQ_SEARCH_AWQ, xmax, wmax, 6, k / 20.0, s);
        assert_true(dsq_scales_ok(s, 6));
        assert_true(s[0] == 1.0f);
        dsq_search_candidate(DSQ_SEARCH_SMOOTH, xmax, wmax, 6, k / 20.0, s);
        assert_true(dsq_scales_ok(s, 6));
    }
    float t[3] = { NAN, -1.0f, 1e30f };
    assert_int_equal((int)dsq_scales_sanitize(t, 3), 2);
    assert_true(dsq_scales_ok(t, 3));
    /* static activation params: range [-2, 6] -> scale 8/255, offset rint(-128 + 2*255/8) */
    const float mn[2] = { -2.0f, 0.5f }, mx[2] = { 1.0f, 6.0f };
    float sc, of;
    assert_int_equal(dsq_smooth_act_static(mn, mx, NULL, 2, &sc, &of), 0);
    assert_true(fabsf(sc - 8.0f / 255.0f) < 1e-7f);
    assert_true(of == rintf(-128.0f + 2.0f / sc));
    const float sdiv[2] = { 2.0f, 2.0f };
    assert_int_equal(dsq_smooth_act_static(mn, mx, sdiv, 2, &sc, &of), 0);
    assert_true(fabsf(sc - 4.0f / 255.0f) < 1e-7f);
}

/* ---- calibration data ----------------------------------------------------------- */

static void test_data(void **state)
{
    (void)state;
    write_byte_tokenizer(g_dir);
    dsq_tokenizer *tok;
    assert_int_equal(dsq_tokenizer_load(&tok, g_dir, NULL), 0);
    dsq_calib_data_opts o;
    dsq_calib_data_opts_init(&o);
    assert_int_equal(o.n_samples, 128);
    assert_int_equal(o.seqlen, 512);
    o.n_samples = 3;
    o.seqlen = 8;

    /* text: 4 paragraphs of 10 bytes (+ newline inside) */
    char *tp = path("c.txt");
    const char *txt = "aaaaaaaaa\n\nbbbbbbbbb\n   \ncccccccc\nc\n\n\n dddddddd\n";
    dsq_test_write(tp, txt, strlen(txt));
    dsq_calib_data a, b, c;
    dsq_diag d;
    assert_int_equal(dsq_calib_data_load(&a, tp, tok, &o, NULL), 0);
    assert_int_equal((int)a.n_docs, 4);
    assert_int_equal(dsq_calib_data_load(&b, tp, tok, &o, NULL), 0);
    assert_memory_equal(a.tokens, b.tokens, 24 * sizeof(int32_t));
    assert_memory_equal(a.sha256, b.sha256, 32);
    /* every token is one of the text's bytes */
    for (int i = 0; i < 24; i++) assert_non_null(strchr("abcd\n ", a.tokens[i]));
    int differs = 0;
    for (uint64_t seed = 1; seed < 20 && !differs; seed++) {
        o.seed = seed;
        assert_int_equal(dsq_calib_data_load(&c, tp, tok, &o, NULL), 0);
        differs = memcmp(a.tokens, c.tokens, 24 * sizeof(int32_t)) != 0;
        dsq_calib_data_release(&c);
    }
    assert_true(differs);
    o.seed = 0;

    /* JSONL with a text field (other fields ignored, blank lines skipped) */
    char *jp = path("c.jsonl");
    const char *jl = "{\"text\": \"0123456789\", \"meta\": 1}\n\n{\"text\": \"abcdefghij\"}\n"
                     "{\"text\": \"\"}\n{\"id\": 3, \"text\": \"ABCDEFGHIJ\"}\n";
    dsq_test_write(jp, jl, strlen(jl));
    assert_int_equal(dsq_calib_data_load(&c, jp, tok, &o, NULL), 0);
    assert_int_equal((int)c.n_docs, 3);
    for (int i = 0; i < 24; i++) assert_true(isalnum(c.tokens[i]));
    dsq_calib_data_release(&c);

    /* too short: clear error naming the numbers */
    o.n_samples = 100;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_calib_data_load(&c, jp, tok, &o, &d), DSQ_ERR_DATA);
    assert_non_null(strstr(d.msg, "30 tokens"));
    assert_non_null(strstr(d.msg, "--calib-samples"));
    o.n_samples = 3;
    /* take_available (ds-quant): short data gives fewer whole samples, down
     * to the DSQ_CALIB_MIN_TOKENS floor; the library default refuses */
    {
        char *lp = path("long.txt");
        char *big = malloc(5001);
        assert_non_null(big);
        for (int i = 0; i < 5000; i++) big[i] = (i % 50 == 49) ? '\n' : "abcd "[i % 5];
        big[5000] = 0;
        dsq_test_write(lp, big, 5000);
        dsq_calib_data_opts lo = o;
        lo.n_samples = 1000;   /* x 8 = 8000 tokens asked, ~5000 there */
        assert_int_equal(dsq_calib_data_load(&c, lp, tok, &lo, NULL), DSQ_ERR_DATA);
        lo.take_available = 1;
        assert_int_equal(dsq_calib_data_load(&c, lp, tok, &lo, NULL), 0);
        assert_int_equal(c.requested_samples, 1000);
        assert_true(c.n_samples < 1000 && c.n_samples * c.seqlen >= DSQ_CALIB_MIN_TOKENS);
        assert_true(c.n_samples * c.seqlen <= 5000);
        dsq_calib_data_release(&c);
        dsq_test_write(lp, big, 3000);   /* below the floor: refused, saying so */
        dsq_diag_clear(&d);
        assert_int_equal(dsq_calib_data_load(&c, lp, tok, &lo, &d), DSQ_ERR_DATA);
        assert_non_null(strstr(d.msg, "floor of 4096"));
        free(big);
        free(lp);
    }
    /* malformed JSONL: line and offset named */
    const char *bad = "{\"text\": \"0123456789\"}\n{\"txt\": \"x\"}\n";
    dsq_test_write(jp, bad, strlen(bad));
    dsq_diag_clear(&d);
    assert_int_equal(dsq_calib_data_load(&c, jp, tok, &o, &d), DSQ_ERR_DATA);
    assert_non_null(strstr(d.msg, "line 2"));
    assert_int_equal((int)d.offset, 23);
    const char *bad2 = "{\"text\": \"0123456789\"}\n{\"text\": 3\n";
    dsq_test_write(jp, bad2, strlen(bad2));
    assert_int_equal(dsq_calib_data_load(&c, jp, tok, &o, NULL), DSQ_ERR_DATA);
    /* empty, blank, binary */
    dsq_test_write(tp, "", 0);
    assert_int_equal(dsq_calib_data_load(&c, tp, tok, &o, NULL), DSQ_ERR_DATA);
    dsq_test_write(tp, " \n\n \n", 5);
    assert_int_equal(dsq_calib_data_load(&c, tp, tok, &o, NULL), DSQ_ERR_DATA);
    dsq_test_write(tp, "abc\0def", 7);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_calib_data_load(&c, tp, tok, &o, &d), DSQ_ERR_DATA);
    assert_int_equal((int)d.offset, 3);
    /* missing file, bad options */
    assert_int_equal(dsq_calib_data_load(&c, "/nonexistent/x.txt", tok, &o, NULL), DSQ_ERR_NOT_FOUND);
    o.seqlen = 1;
    assert_int_equal(dsq_calib_data_load(&c, tp, tok, &o, NULL), DSQ_ERR_INVALID_ARG);
    /* pre-tokenized */
    o.seqlen = 4;
    int32_t ids[9] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 };
    o.n_samples = 2;
    assert_int_equal(dsq_calib_data_from_ids(&c, ids, 9, &o, NULL), 0);
    assert_int_equal(c.tokens[7], 8);
    dsq_calib_data_release(&c);
    o.n_samples = 3;
    assert_int_equal(dsq_calib_data_from_ids(&c, ids, 9, &o, NULL), DSQ_ERR_DATA);

    dsq_calib_data_release(&a);
    dsq_calib_data_release(&b);
    dsq_tokenizer_free(tok);
    free(tp);
    free(jp);
}

/* ---- AWQ search never worse than s = 1 ----------------------------------------- */

static int search_layer_groups(const char *model, int layer, int kind, const char *scheme, int flavor)
{
    dsq_model *m = open_lazy(model);
    const int64_t H = dsq_model_get_config(m)->hidden_size;
    /* hidden states of layer `layer` from 3 samples of 24 tokens */
    int32_t *tok = rand_tokens(72, 500, 99);
    float *h = malloc((size_t)72 * (size_t)H * sizeof *h);
    assert_int_equal(dsq_model_embed(m, tok, 72, h, NULL), 0);
    for (int l = 0; l < layer; l++)
        for (int s = 0; s < 3; s++)
            assert_int_equal(dsq_layer_forward(m, l, h + (size_t)s * 24 * H, 24, NULL, NULL, NULL, 0, NULL), 0);
    dsq_hstore *hs;
    assert_int_equal(dsq_hstore_open(&hs, 3, 24, H, 1u << 30, NULL, 0, NULL), 0);
    for (int s = 0; s < 3; s++) assert_int_equal(dsq_hstore_put(hs, s, h + (size_t)s * 24 * H, NULL), 0);
    assert_int_equal(dsq_hstore_swap(hs, NULL), 0);
    dsq_layer_stats ls;
    const dsq_model_config *cfg = dsq_model_get_config(m);
    assert_int_equal(dsq_layer_stats_init(&ls, layer, dsq_model_config_is_moe_layer(cfg, layer) ?
                                                          (int)cfg->n_routed_experts : 0), 0);
    dsq_collect_opts co = { 48, 12, 5, 0, NULL, NULL, NULL };
    assert_int_equal(dsq_collect_layer(m, layer, hs, 0, &co, &ls, NULL, NULL), 0);
    assert_int_equal((int)ls.tokens, 72);
    /* statistics only: the (RAM) store still holds the layer's inputs */
    for (int s = 0; s < 3; s++) {
        float *cur;
        assert_int_equal(dsq_hstore_get(hs, s, &cur, NULL), 0);
        assert_memory_equal(cur, h + (size_t)s * 24 * H, (size_t)24 * (size_t)H * sizeof *cur);
    }
    dsq_group_list gl;
    assert_int_equal(dsq_groups_build(m, layer, flavor, &gl, NULL), 0);
    const dsq_scheme *sc = dsq_scheme_by_name(scheme);
    int searched = 0;
    for (int i = 0; i < gl.n; i++) {
        dsq_search_opts so = { kind, 8, NULL, NULL, dsq_model_pool(m), NULL };
        float *s = malloc((size_t)gl.v[i].n * sizeof *s);
        dsq_search_report rep;
        dsq_diag d;
        dsq_diag_clear(&d);
        so.target = target;   /* every linear gets the scheme except the router */
        so.target_ctx = (void *)sc;
        int rc = dsq_scale_search(&gl.v[i], &ls, &so, s, &rep, &d);
        if (rc) fprintf(stderr, "search %s: %s\n", gl.v[i].prev, d.msg);
        assert_int_equal(rc, 0);
        assert_true(dsq_scales_ok(s, gl.v[i].n));
        if (rep.rows > 0) {
            searched++;
            assert_true(rep.loss_best <= rep.loss_identity);
            assert_true(rep.loss_identity > 0.0);
        }
        free(s);
    }
    dsq_groups_release(&gl);
    dsq_layer_stats_release(&ls);
    dsq_hstore_free(hs, 1);
    dsq_model_layer_release(m, layer);
    dsq_model_free(m);
    free(h);
    free(tok);
    return searched;
}

static void test_search_never_worse(void **state)
{
    (void)state;
    dsq_synth_opts so;
    tiny_v3(&so);
    char *m = make_model(&so, "v3");
    /* layer 0 dense, layer 1 MoE (groups: norms, MoE, per-expert up->down) */
    assert_true(search_layer_groups(m, 0, DSQ_SEARCH_AWQ, "awq-w4a16", DSQ_GROUPS_AWQ) >= 4);
    assert_true(search_layer_groups(m, 1, DSQ_SEARCH_AWQ, "awq-w4a16", DSQ_GROUPS_AWQ) >= 4);
    assert_true(search_layer_groups(m, 1, DSQ_SEARCH_SMOOTH, "w4a8", DSQ_GROUPS_SMOOTH) >= 4);
    assert_true(search_layer_groups(m, 0, DSQ_SEARCH_BOTH, "w4a8", DSQ_GROUPS_SMOOTH) >= 4);
    tiny_llama(&so, 4);
    char *l = make_model(&so, "llama");
    assert_true(search_layer_groups(l, 1, DSQ_SEARCH_AWQ, "awq-w4a16", DSQ_GROUPS_AWQ) >= 4);
    free(m);
    free(l);
}

/* ---- folding leaves the function unchanged ------------------------------------------ */

static void fold_check(const char *model, const dsq_calib_result *r, const char *outname)
{
    char *out = path(outname);
    fold_copy(model, r, out);
    int32_t *tok = rand_tokens(40, 500, 5);
    int64_t V;
    float *a = logits_of(model, tok, 40, &V), *b = logits_of(out, tok, 40, &V);
    double md = 0.0, ma = 0.0;
    for (int64_t i = 0; i < 40 * V; i++) {
        md = fmax(md, fabs((double)a[i] - (double)b[i]));
        ma = fmax(ma, fabs((double)a[i]));
    }
    fprintf(stderr, "  fold %s: max |logit diff| %.3g (max |logit| %.3g)\n", outname, md, ma);
    assert_true(md <= 1e-5 * (1.0 + ma) * 10);
    free(a);
    free(b);
    free(tok);
    free(out);
}

static void test_fold_preserves_function(void **state)
{
    (void)state;
    dsq_synth_opts so;
    tiny_v3(&so);
    char *m = make_model(&so, "v3");
    int32_t *tok = rand_tokens(8 * 32, 500, 3);
    dsq_calib_opts o;
    base_opts(&o, "w8a8", tok, 8, 32);
    o.min_expert_tokens = 1;
    dsq_calib_result *r = calibrate(m, &o);
    dsq_calib_totals t;
    dsq_calib_get_totals(r, &t);
    assert_true(t.groups_smoothed >= 6);
    assert_true(check_finite(r, m) > 10);
    /* the router absorbs the norm's scale too, and the norm is scaled */
    const dsq_calib_tensor *e = dsq_calib_lookup(r, "model.layers.1.mlp.gate.weight");
    assert_non_null(e);
    assert_non_null(e->in_scale);
    e = dsq_calib_lookup(r, "model.layers.1.post_attention_layernorm.weight");
    assert_non_null(e);
    assert_non_null(e->row_scale);
    assert_int_equal(e->cols, 0);
    /* MLA ov: kv_b v rows absorb o_proj's scale, the k_nope rows stay 1 */
    e = dsq_calib_lookup(r, "model.layers.0.self_attn.kv_b_proj.weight");
    assert_non_null(e);
    assert_non_null(e->row_scale);
    assert_true(e->row_scale[0] == 1.0f);
    assert_non_null(e->in_scale);
    e = dsq_calib_lookup(r, "model.layers.0.self_attn.o_proj.weight");
    assert_true(e && e->in_scale && e->has_act_static);
    fold_check(m, r, "fold-w8a8");
    dsq_calib_result_free(r);

    base_opts(&o, "awq-w4a16", tok, 8, 32);
    o.group_size = 64;
    o.min_expert_tokens = 1;
    r = calibrate(m, &o);
    dsq_calib_get_totals(r, &t);
    assert_true(t.groups_searched >= 6);
    assert_true(t.loss_best <= t.loss_identity);
    check_finite(r, m);
    e = dsq_calib_lookup(r, "model.layers.1.mlp.experts.0.up_proj.weight");
    assert_true(e && e->in_scale && e->row_scale && e->importance);
    /* clipped per (row, group) on X^T X, not by the quantizer's proxy search */
    assert_true(e->clip_idx && e->clip_gs == 64 && !e->clip);
    e = dsq_calib_lookup(r, "model.layers.0.self_attn.q_b_proj.weight");
    assert_true(e && e->importance && !e->clip && !e->clip_idx);   /* AutoAWQ does not clip q */
    dsq_calib_result_free(r);
    /* clipping changes the weights on purpose: the fold check is about scales */
    o.clip = 0;
    r = calibrate(m, &o);
    fold_check(m, r, "fold-awq");
    dsq_calib_result_free(r);

    /* Llama without GQA: v -> o is a group */
    tiny_llama(&so, 4);
    char *l = make_model(&so, "llama");
    base_opts(&o, "awq-w4a16", tok, 8, 32);
    o.group_size = 64;
    o.clip = 0;
    r = calibrate(l, &o);
    e = dsq_calib_lookup(r, "model.layers.0.self_attn.v_proj.weight");
    assert_true(e && e->row_scale && e->in_scale);
    fold_check(l, r, "fold-llama");
    dsq_calib_result_free(r);
    /* with GQA there is no v -> o group */
    tiny_llama(&so, 2);
    char *g = make_model(&so, "llama-gqa");
    base_opts(&o, "w4a8", tok, 8, 32);
    r = calibrate(g, &o);
    e = dsq_calib_lookup(r, "model.layers.0.self_attn.v_proj.weight");
    assert_true(e && !e->row_scale && e->in_scale);
    fold_check(g, r, "fold-gqa");
    dsq_calib_result_free(r);
    free(tok);
    free(m);
    free(l);
    free(g);
}

/* ---- experts without tokens -------------------------------------------------------- */

/* Make expert 0 of layer 1 unreachable: its selection bias -> -1e4. */
static void starve_expert0(const char *model)
{
    dsq_st_model *st;
    assert_int_equal(dsq_st_open(&st, model, NULL), 0);
    const dsq_st_tensor *t = dsq_st_find(st, "model.layers.1.mlp.gate.e_score_correction_bias");
    assert_non_null(t);
    assert_int_equal(t->dtype, DSQ_DTYPE_F32);
    uint64_t off = t->file_offset;
    char *p = strdup(dsq_st_shard_path(st, t->shard));
    dsq_st_close(st);
    FILE *f = fopen(p, "r+b");
    assert_non_null(f);
    float v = -1e4f;
    assert_int_equal(fseek(f, (long)off, SEEK_SET), 0);
    assert_int_equal(fwrite(&v, 4, 1, f), 1);
    fclose(f);
    free(p);
}

/* DeepSeek-V3.2: calibration runs the sparse forward (index_topk 8 of 32
 * tokens); SmoothQuant's norm scales reach the float indexer linears that
 * read the same norms, so the folded model computes the same function */
static void test_fold_dsa(void **state)
{
    (void)state;
    dsq_synth_opts so;
    tiny_v3(&so);
    so.index_heads = 4;
    so.index_dim = 32;
    so.index_topk = 8;
    char *m = make_model(&so, "v32");
    int32_t *tok = rand_tokens(8 * 32, 500, 3);
    dsq_calib_opts o;
    base_opts(&o, "w8a8", tok, 8, 32);
    o.min_expert_tokens = 1;
    dsq_calib_result *r = calibrate(m, &o);
    static const char *const passive[] = { "model.layers.0.self_attn.indexer.wk.weight",
                                           "model.layers.1.self_attn.indexer.weights_proj.weight",
                                           "model.layers.1.self_attn.indexer.wq_b.weight" };
    for (size_t i = 0; i < sizeof passive / sizeof passive[0]; i++) {
        const dsq_calib_tensor *e = dsq_calib_lookup(r, passive[i]);
        if (!e || !e->in_scale) fail_msg("%s does not absorb its norm's smoothing scale", passive[i]);
    }
    g_dsa_mode = DSQ_DSA_FLOAT;
    fold_check(m, r, "fold-v32");
    g_dsa_mode = DSQ_DSA_FP8;
    dsq_calib_result_free(r);
    free(tok);
    free(m);
}

static void test_expert_without_tokens(void **state)
{
    (void)state;
    dsq_synth_opts so;
    tiny_v3(&so);
    char *m = make_model(&so, "v3");
    starve_expert0(m);
    int32_t *tok = rand_tokens(4 * 32, 500, 8);
    const char *schemes[] = { "awq-w4a16", "w8a8", "w4a8" };
    for (int k = 0; k < 3; k++) {
        dsq_calib_opts o;
        base_opts(&o, schemes[k], tok, 4, 32);
        o.group_size = k == 0 ? 64 : DSQ_GROUP_DEFAULT;
        dsq_calib_result *r = calibrate(m, &o);
        const uint64_t *cov;
        int ne;
        assert_int_equal(dsq_calib_coverage(r, 1, &cov, &ne), 0);
        assert_int_equal(ne, 8);
        assert_int_equal((int)cov[0], 0);
        uint64_t sum = 0;
        for (int e = 0; e < ne; e++) sum += cov[e];
        assert_int_equal((int)sum, 4 * 32 * 2);   /* top-2 routing */
        assert_true(dsq_calib_fallback_count(r) >= 1);
        const char *why;
        assert_string_equal(dsq_calib_fallback(r, 0, &why), "model.layers.1.mlp.experts.0");
        assert_non_null(strstr(why, "0 calibration tokens"));
        const dsq_calib_tensor *e = dsq_calib_lookup(r, "model.layers.1.mlp.experts.0.down_proj.weight");
        assert_non_null(e);
        assert_int_equal(e->status, DSQ_CALIB_FALLBACK_RTN);
        assert_null(e->importance);
        assert_int_equal(e->clip, 0);
        if (k == 1) assert_true(e->has_act_static);   /* layer-wide range */
        e = dsq_calib_lookup(r, "model.layers.1.mlp.experts.0.gate_proj.weight");
        assert_int_equal(e->status, DSQ_CALIB_FALLBACK_RTN);
        assert_non_null(e->in_scale);   /* the shared norm's scale still applies */
        check_finite(r, m);
        char *js;
        assert_int_equal(dsq_calib_summary_json(r, 1, &js), 0);
        assert_non_null(strstr(js, "model.layers.1.mlp.experts.0"));
        free(js);
        dsq_calib_result_free(r);

        /* moe_calib_all: every expert gets statistics; coverage still counts routing */
        o.moe_calib_all = 1;
        r = calibrate(m, &o);
        assert_int_equal(dsq_calib_coverage(r, 1, &cov, &ne), 0);
        assert_int_equal((int)cov[0], 0);
        assert_int_equal((int)dsq_calib_fallback_count(r), 0);
        e = dsq_calib_lookup(r, "model.layers.1.mlp.experts.0.down_proj.weight");
        assert_int_equal(e->status, DSQ_CALIB_CALIBRATED);
        if (k != 1) assert_non_null(e->importance);
        check_finite(r, m);
        dsq_calib_result_free(r);
    }
    /* a minimum above every expert's count: everything falls back, still finite */
    dsq_calib_opts o;
    base_opts(&o, "awq-w4a16", tok, 4, 32);
    o.min_expert_tokens = 1000000;
    dsq_calib_result *r = calibrate(m, &o);
    assert_int_equal((int)dsq_calib_fallback_count(r), 8);
    check_finite(r, m);
    dsq_calib_result_free(r);
    free(tok);
    free(m);
}

/* Rollback candidates are served modules: fused pairs share a unit, routed
 * experts are none; the top-n choice orders by sensitivity, then name. */
static void test_sens_units(void **state)
{
    (void)state;
    static const struct { const char *name, *unit; } cases[] = {
        { "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.gate_up_proj" },
        { "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.gate_up_proj" },
        { "model.layers.0.mlp.down_proj.weight", "model.layers.0.mlp.down_proj" },
        { "model.layers.1.self_attn.q_a_proj.weight", "model.layers.1.self_attn.fused_qkv_a_proj" },
        { "model.layers.1.self_attn.kv_a_proj_with_mqa.weight", "model.layers.1.self_attn.fused_qkv_a_proj" },
        { "model.layers.1.self_attn.kv_b_proj.weight", "model.layers.1.self_attn.kv_b_proj" },
        { "model.layers.2.self_attn.v_proj.weight", "model.layers.2.self_attn.qkv_proj" },
        { "model.layers.3.mlp.shared_experts.up_proj.weight", "model.layers.3.mlp.shared_experts.gate_up_proj" },
        { "model.layers.3.mlp.experts.7.down_proj.weight", NULL },   /* routed: never a candidate */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char u[128];
        assert_int_equal(dsq_sens_unit(cases[i].name, u, sizeof u), cases[i].unit != NULL);
        if (cases[i].unit) assert_string_equal(u, cases[i].unit);
    }
    const double sens[] = { 0.5, -1.0, 0.9, 0.5, 0.1 };
    const char *const names[] = { "c", "a", "z", "b", "d" };
    size_t idx[5], k;
    dsq_sens_top(sens, names, 5, 3, idx, &k);
    assert_int_equal(k, 3);
    assert_int_equal(idx[0], 2);
    assert_int_equal(idx[1], 3);   /* tie at 0.5: "b" before "c" */
    assert_int_equal(idx[2], 0);
    dsq_sens_top(sens, names, 5, 9, idx, &k);
    assert_int_equal(k, 4);        /* unknown (-1) never chosen */
    assert_int_equal(idx[3], 4);
}

/* ---- attention block loss (awq.h ATTN) --------------------------------------- */

/* the engine's attention input (q_a / q_proj) and context (o_proj input) */
typedef struct attn_cap {
    float *x, *att;
    int64_t nx, natt;
} attn_cap;

static int attn_cap_hook(void *ctx, int layer, const char *name, const float *x, int T, int in, const int32_t *ti)
{
    (void)layer;
    (void)ti;
    attn_cap *c = ctx;
    float **dst = strstr(name, "self_attn.q_a_proj.weight") || strstr(name, "self_attn.q_proj.weight") ? &c->x
                  : strstr(name, "self_attn.o_proj.weight")                                          ? &c->att
                                                                                                     : NULL;
    if (!dst) return 0;
    free(*dst);
    *dst = malloc((size_t)T * (size_t)in * sizeof **dst);
    assert_non_null(*dst);
    memcpy(*dst, x, (size_t)T * (size_t)in * sizeof **dst);
    *(dst == &c->x ? &c->nx : &c->natt) = in;
    return 0;
}

/* The float MLA block the attention-input group is scored on equals the
 * engine's own attention (its o_proj input times float o_proj) in every
 * layer of the sample: the loss measures the real block, not a stand-in. */
static void test_attn_block_matches_engine(void **state)
{
    (void)state;
    const char *model = "samples/tiny-dsv3";
    if (!sample_present(model, "samples/data/heldout.txt", (char *)NULL)) return;
    dsq_model *m = open_lazy(model);
    dsq_tokenizer *tk;
    assert_int_equal(dsq_tokenizer_load(&tk, model, NULL), 0);
    const int T = 96;
    dsq_hstore *hs = text_states(m, tk, "samples/data/heldout.txt", 1, T);
    float *h;
    assert_int_equal(dsq_hstore_get(hs, 0, &h, NULL), 0);
    const dsq_model_config *cfg = dsq_model_get_config(m);
    for (int l = 0; l < (int)cfg->num_hidden_layers; l++) {
        attn_cap c = { 0 };
        assert_int_equal(dsq_model_layer_load(m, l, NULL), 0);   /* stays loaded for the groups */
        assert_int_equal(dsq_layer_forward(m, l, h, T, NULL, attn_cap_hook, &c, 0, NULL), 0);
        assert_non_null(c.x);
        assert_non_null(c.att);
        dsq_group_list gl;
        assert_int_equal(dsq_groups_build(m, l, DSQ_GROUPS_AWQ, &gl, NULL), 0);
        const dsq_scale_group *g = &gl.v[0];
        assert_non_null(strstr(g->prev, "input_layernorm"));
        assert_non_null(g->attn_model);
        const dsq_linear *o = &dsq_model_weights(m)->layers[l].o;
        assert_int_equal(c.natt, o->in);
        float *wo = malloc((size_t)o->out * (size_t)o->in * sizeof *wo);
        float *ref = calloc((size_t)T * (size_t)o->out, sizeof *ref);
        float *out = malloc((size_t)T * (size_t)o->out * sizeof *out);
        o->w.scheme->dequantize(&o->w, 0, o->out, wo);
        for (int t = 0; t < T; t++)
            for (int64_t r = 0; r < o->out; r++) {
                double a = 0.0;
                for (int64_t k = 0; k < o->in; k++) a += (double)c.att[(size_t)t * o->in + k] * wo[r * o->in + k];
                ref[(size_t)t * o->out + r] = (float)a;
            }
        assert_int_equal(dsq_awq_attn_block(g, c.x, T, out, dsq_model_pool(m), NULL), 0);
        double num = 0.0, den = 0.0;
        for (size_t i = 0; i < (size_t)T * (size_t)o->out; i++) {
            num += ((double)out[i] - ref[i]) * ((double)out[i] - ref[i]);
            den += (double)ref[i] * ref[i];
        }
        fprintf(stderr, "  layer %d: block vs engine relative error %.3g\n", l, sqrt(num / den));
        assert_true(den > 0.0);
        assert_true(sqrt(num / den) < 1e-4);
        free(wo);
        free(ref);
        free(out);
        free(c.x);
        free(c.att);
        dsq_groups_release(&gl);
        dsq_model_layer_release(m, l);
    }
    dsq_hstore_free(hs, 1);
    dsq_tokenizer_free(tk);
    dsq_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_known_input),
        cmocka_unit_test(test_site_names),
        cmocka_unit_test(test_scale_safety),
        cmocka_unit_test_setup_teardown(test_data, setup, teardown),
        cmocka_unit_test_setup_teardown(test_search_never_worse, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fold_preserves_function, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fold_dsa, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expert_without_tokens, setup, teardown),
        cmocka_unit_test(test_sens_units),
        cmocka_unit_test(test_attn_block_matches_engine),
    };
    /* DSQ_TEST_FILTER=PATTERN runs only the matching tests */
    if (getenv("DSQ_TEST_FILTER")) cmocka_set_test_filter(getenv("DSQ_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
