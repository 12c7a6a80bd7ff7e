/* test_flex.c - flex smoothing (msModelSlim flex_smooth_quant):
 *   - dsq_flex_scales is max|X|^alpha / max|W|^beta with SmoothQuant's clamps
 *     (beta = 1 - alpha gives dsq_smooth_scales);
 *   - the FLEX search picks what its two-stage rule says on the real
 *     objective: the test scores every (alpha, beta) of both stages itself
 *     with dsq_scale_eval and replays the rule (ties to the later value,
 *     stage 2 kept only when at least as good), on tiny-dsv3's dense and MoE
 *     layers, for W8A8 dynamic targets. */
#include "dsq_test.h"

#include "awq.h"
#include "model.h"
#include "smooth.h"
#include "stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_flex_scales_formula(void **st)
{
    (void)st;
    const float xmax[5] = { 4.0f, 0.0f, 1e-9f, 9.0f, 2.0f };
    const float wmax[5] = { 0.5f, 1.0f, 1.0f, 0.0f, 8.0f };
    float s[5], q[5];
    dsq_flex_scales(xmax, wmax, 5, 0.5f, 0.25f, s);
    assert_true(fabsf(s[0] - (float)(2.0 / pow(0.5, 0.25))) < 1e-6f);
    assert_true(s[1] == 1.0f);                                    /* dead channel */
    assert_true(fabsf(s[2] - (float)(pow(1e-5, 0.5))) < 1e-7f);   /* x clamped to 1e-5 */
    assert_true(fabsf(s[3] - (float)(3.0 / pow(1e-5, 0.25))) < 1e-3f);
    assert_true(fabsf(s[4] - (float)(sqrt(2.0) / pow(8.0, 0.25))) < 1e-6f);
    for (int k = 0; k <= 20; k++) {
        dsq_flex_scales(xmax, wmax, 5, k / 20.0f, 1.0f - k / 20.0f, s);
        dsq_smooth_scales(xmax, wmax, 5, k / 20.0f, q);
        for (int j = 0; j < 5; j++) assert_true(fabsf(s[j] - q[j]) <= 1e-6f * q[j]);
    }
}

static int w8_target(void *ctx, const char *name, int64_t r, int64_t c, const dsq_scheme **o, int32_t *gs)
{
    (void)r;
    (void)c;
    size_t n = strlen(name);
    *o = n > 16 && strcmp(name + n - 16, ".mlp.gate.weight") == 0 ? NULL : ctx;   /* the router stays float */
    *gs = DSQ_GROUP_DEFAULT;
    return 0;
}

/* loss of (alpha, beta) as the search builds its candidates */
static double flex_loss(const dsq_scale_group *g, const dsq_layer_stats *ls, const dsq_search_opts *so,
                        const float *xs, const float *ws, float a, float b, float *s)
{
    dsq_flex_scales(xs, ws, g->n, a, b, s);
    dsq_scales_normalize(s, xs, g->n);
    double l0, l1;
    int64_t rows;
    assert_int_equal(dsq_scale_eval(g, ls, so, s, &l0, &l1, &rows, NULL), 0);
    assert_true(rows > 0);
    return l1;
}

static int check_layer(dsq_model *m, int layer)
{
    const dsq_model_config *cfg = dsq_model_get_config(m);
    const int64_t H = cfg->hidden_size;
    enum { S = 3, T = 24 };
    int32_t tok[S * T];
    uint64_t seed = 77 + (uint64_t)layer;
    for (int i = 0; i < S * T; i++) tok[i] = (int32_t)(dsq_test_xorshift(&seed) % 2000);
    float *h = malloc((size_t)S * T * (size_t)H * sizeof *h);
    assert_int_equal(dsq_model_embed(m, tok, S * T, h, NULL), 0);
    for (int l = 0; l < layer; l++)
        for (int s = 0; s < S; s++)
            assert_int_equal(dsq_layer_forward(m, l, h + (size_t)s * T * H, T, NULL, NULL, NULL, 0, NULL), 0);
    dsq_hstore *hs;
    assert_int_equal(dsq_hstore_open(&hs, S, T, H, 1u << 30, NULL, 0, NULL), 0);
    for (int s = 0; s < S; s++) assert_int_equal(dsq_hstore_put(hs, s, h + (size_t)s * T * H, NULL), 0);
    assert_int_equal(dsq_hstore_swap(hs, NULL), 0);
    dsq_layer_stats ls;
    assert_int_equal(dsq_layer_stats_init(&ls, layer, dsq_model_config_is_moe_layer(cfg, layer) ?
                                                          (int)cfg->n_routed_experts : 0), 0);
    dsq_collect_opts co = { 48, 12, 5, 0, NULL, NULL, NULL, NULL, NULL };
    assert_int_equal(dsq_collect_layer(m, layer, hs, 0, &co, &ls, NULL, NULL), 0);
    dsq_group_list gl;
    assert_int_equal(dsq_groups_build(m, layer, DSQ_GROUPS_SMOOTH, &gl, NULL), 0);
    const dsq_scheme *sc = dsq_scheme_by_name("w8a8-dynamic");
    const int G = 10;
    int checked = 0;
    for (int i = 0; i < gl.n; i++) {
        const dsq_scale_group *g = &gl.v[i];
        dsq_search_opts so = { DSQ_SEARCH_FLEX, G, w8_target, (void *)sc, dsq_model_pool(m), NULL, 0, 0 };
        float *s = malloc((size_t)g->n * sizeof *s), *t = malloc((size_t)g->n * sizeof *t);
        float *xs = malloc((size_t)g->n * sizeof *xs), *ws = malloc((size_t)g->n * sizeof *ws);
        dsq_search_report rep;
        assert_int_equal(dsq_scale_search(g, &ls, &so, s, &rep, NULL), 0);
        assert_true(dsq_scales_ok(s, g->n));
        if (rep.rows == 0) goto next;
        assert_true(rep.loss_best <= rep.loss_identity);
        /* replay the rule */
        const dsq_act_stats *site = dsq_layer_stats_find(&ls, g->site);
        for (int64_t j = 0; j < g->n; j++) xs[j] = site->absmax[j];
        assert_int_equal(dsq_group_weight_stats(g, 1, DSQ_GROUP_DEFAULT, ws, NULL, so.pool, NULL), 0);
        double best1 = INFINITY;
        float a1 = 0;
        for (int k = 0; k <= G; k++) {
            double l = flex_loss(g, &ls, &so, xs, ws, (float)k / G, 1.0f - (float)k / G, t);
            if (l <= best1) best1 = l, a1 = (float)k / G;
        }
        double best2 = INFINITY;
        float b2 = 0;
        for (int k = 0; k <= G; k++) {
            double l = flex_loss(g, &ls, &so, xs, ws, a1, (float)k / G, t);
            if (l <= best2) best2 = l, b2 = (float)k / G;
        }
        double want = best2 <= best1 ? best2 : best1;
        float wa = a1, wb = best2 <= best1 ? b2 : 1.0f - a1;
        if (rep.loss_identity < want) want = rep.loss_identity, wa = wb = 0;
        if (fabs(rep.loss_best - want) > 1e-9 * (want + 1e-30) || rep.alpha != wa || rep.beta != wb)
            fail_msg("%s: search (%g, %g) loss %.9g; rule (%g, %g) loss %.9g", g->prev, rep.alpha, rep.beta,
                     rep.loss_best, wa, wb, want);
        checked++;
    next:
        free(s);
        free(t);
        free(xs);
        free(ws);
    }
    dsq_groups_release(&gl);
    dsq_layer_stats_release(&ls);
    dsq_hstore_free(hs, 1);
    dsq_model_layer_release(m, layer);
    free(h);
    return checked;
}

static void test_flex_search_follows_its_rule(void **st)
{
    (void)st;
    dsq_model *m;
    dsq_model_opts mo;
    dsq_model_opts_default(&mo);
    mo.threads = 2;
    mo.lazy = 1;
    assert_int_equal(dsq_model_open(&m, "samples/tiny-dsv3", &mo, NULL), 0);
    int n0 = check_layer(m, 0), n1 = check_layer(m, 1);
    printf("flex search checked on %d dense-layer and %d MoE-layer groups\n", n0, n1);
    assert_true(n0 >= 3);
    assert_true(n1 >= 3);
    dsq_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flex_scales_formula),
        cmocka_unit_test(test_flex_search_follows_its_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
