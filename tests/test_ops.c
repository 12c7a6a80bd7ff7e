/* test_ops.c - engine building blocks: norms, softmax, RoPE (both layouts,
 * YaRN / llama3 frequencies), MoE routing, the attention kernel. Expected
 * numbers come from docs/checkpoints.md ("Routing", "Multi-head latent
 * attention", "RoPE and YaRN") or were computed with the reference
 * PyTorch code (inference/model.py precompute_freqs_cis) in float32. */
#include "dsq_test.h"
#include "dsq_error.h"
#include "ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_rmsnorm(void **state)
{
    (void)state;
    float x[4] = { 1, -2, 3, -4 }, w[4] = { 1, 2, 0.5f, 1 }, out[4];
    dsq_rmsnorm(out, x, w, 4, 1e-6f);
    double rms = sqrt((1 + 4 + 9 + 16) / 4.0 + 1e-6);
    for (int i = 0; i < 4; i++) assert_float_equal(out[i], x[i] / rms * w[i], 1e-6);
    dsq_rmsnorm(x, x, NULL, 4, 1e-6f);   /* in place, unit weight */
    assert_float_equal(x[3], -4 / rms, 1e-6);
}

static void test_softmax_silu(void **state)
{
    (void)state;
    float x[3] = { 1000.0f, 1001.0f, -INFINITY };
    dsq_softmax(x, 3);
    assert_float_equal(x[0], 1.0 / (1.0 + exp(1.0)), 1e-6);
    assert_float_equal(x[1], exp(1.0) / (1.0 + exp(1.0)), 1e-6);
    assert_float_equal(x[2], 0.0, 0.0);
    float g[2] = { 2.0f, -1.0f }, u[2] = { 3.0f, 2.0f };
    dsq_silu_mul(g, u, 2);
    assert_float_equal(g[0], 2.0 / (1.0 + exp(-2.0)) * 3.0, 1e-5);
    assert_float_equal(g[1], -1.0 / (1.0 + exp(1.0)) * 2.0, 1e-5);
}

/* DeepSeek-V3 rope_scaling: low/high 10 and 23, mscale 1.36889, softmax
 * scale 0.135234 (docs/checkpoints.md, "Multi-head latent attention"),
 * frequencies from the torch reference. */
static void test_yarn_v3(void **state)
{
    (void)state;
    int low, high;
    dsq_yarn_correction_range(32, 1, 64, 10000, 4096, &low, &high);
    assert_int_equal(low, 10);
    assert_int_equal(high, 23);
    double m = dsq_yarn_get_mscale(40, 1.0);
    assert_float_equal(m, 1.36889, 1e-5);
    assert_float_equal(pow(192, -0.5) * m * m, 0.135234, 1e-6);
    assert_float_equal(dsq_yarn_get_mscale(1.0, 1.0), 1.0, 0);

    dsq_rope_params p;
    dsq_rope_params_default(&p, 64);
    p.scaling = DSQ_ROPE_YARN;
    p.factor = 40;
    p.mscale = 1;
    p.mscale_all_dim = 1;
    dsq_rope r;
    assert_int_equal(dsq_rope_init(&r, &p), 0);
    assert_int_equal(r.yarn_low, 10);
    assert_int_equal(r.yarn_high, 23);
    assert_float_equal(r.cos_sin_scale, 1.0, 1e-7);    /* mscale / mscale_all_dim */
    static const struct { int i; double f; } want[] = {
        { 0, 1.0 }, { 5, 0.23713736236095428 }, { 10, 0.05623412877321243 },
        { 11, 0.039006926119327545 }, { 16, 0.005500000435858965 },
        { 22, 0.00017782794020604342 }, { 23, 3.333803761051968e-05 },
        { 31, 3.3338037610519677e-06 },
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        assert_float_equal(r.inv_freq[want[k].i], want[k].f, want[k].f * 2e-6);
    float c[32], s[32];
    dsq_rope_cos_sin(&r, 1000, c, s);
    assert_float_equal(c[0], 0.5623790621757507, 1e-5);
    assert_float_equal(s[0], 0.8268795609474182, 1e-5);
    assert_float_equal(c[16], 0.7086700797080994, 1e-5);
    assert_float_equal(s[16], -0.7055400013923645, 1e-5);
    assert_float_equal(s[31], 0.0033337974455207586, 1e-7);

    /* generic HF yarn (no mscale_all_dim): cos/sin carry 0.1 ln f + 1 */
    p.mscale_all_dim = 0;
    assert_int_equal(dsq_rope_init(&r, &p), 0);
    assert_float_equal(r.cos_sin_scale, 1.36889, 1e-5);
}

static void test_llama3_linear_freqs(void **state)
{
    (void)state;
    dsq_rope_params p;
    dsq_rope_params_default(&p, 128);
    p.theta = 500000;
    p.scaling = DSQ_ROPE_LLAMA3;
    p.factor = 8;
    p.low_freq_factor = 1;
    p.high_freq_factor = 4;
    p.original_max_pos = 8192;
    dsq_rope r, plain;
    assert_int_equal(dsq_rope_init(&r, &p), 0);
    dsq_rope_params q = p;
    q.scaling = DSQ_ROPE_NONE;
    assert_int_equal(dsq_rope_init(&plain, &q), 0);
    /* high frequencies unchanged, the lowest divided by the factor */
    assert_float_equal(r.inv_freq[0], plain.inv_freq[0], 0);
    assert_float_equal(r.inv_freq[63], plain.inv_freq[63] / 8, plain.inv_freq[63] * 1e-6);
    for (int i = 0; i < 64; i++) {
        assert_true(r.inv_freq[i] <= plain.inv_freq[i]);
        assert_true(r.inv_freq[i] >= plain.inv_freq[i] / 8 * (1 - 1e-6));
    }
    q.scaling = DSQ_ROPE_LINEAR;
    q.factor = 4;
    assert_int_equal(dsq_rope_init(&r, &q), 0);
    assert_float_equal(r.inv_freq[7], plain.inv_freq[7] / 4, 1e-9);
    q.dim = 7;
    assert_int_equal(dsq_rope_init(&r, &q), DSQ_ERR_INVALID_ARG);
}

/* Adjacent pairs on x equal rotate-half on the de-interleaved x (HF
 * rope_interleave), and q(m).k(n) depends only on m - n in both layouts. */
static void test_rope_layouts(void **state)
{
    (void)state;
    enum { D = 16 };
    dsq_rope_params p;
    dsq_rope_params_default(&p, D);
    dsq_rope pr, hr;
    assert_int_equal(dsq_rope_init(&pr, &p), 0);
    p.style = DSQ_ROPE_HALF;
    assert_int_equal(dsq_rope_init(&hr, &p), 0);
    float x[D], y[D], c[D / 2], s[D / 2];
    for (int i = 0; i < D; i++) x[i] = sinf(1.0f + i * 0.7f);
    for (int i = 0; i < D / 2; i++) { y[i] = x[2 * i]; y[i + D / 2] = x[2 * i + 1]; }
    dsq_rope_cos_sin(&pr, 37, c, s);
    dsq_rope_apply(&pr, x, c, s);
    dsq_rope_apply(&hr, y, c, s);
    for (int i = 0; i < D / 2; i++) {
        assert_float_equal(x[2 * i], y[i], 1e-6);
        assert_float_equal(x[2 * i + 1], y[i + D / 2], 1e-6);
    }
    /* position 0 is the identity */
    float z[D], z0[D];
    for (int i = 0; i < D; i++) z[i] = z0[i] = cosf(i * 1.3f);
    dsq_rope_cos_sin(&hr, 0, c, s);
    dsq_rope_apply(&hr, z, c, s);
    for (int i = 0; i < D; i++) assert_float_equal(z[i], z0[i], 1e-7);
    /* relative: <R(m)q, R(n)k> == <R(m+5)q, R(n+5)k> */
    const dsq_rope *rs[2] = { &pr, &hr };
    for (int l = 0; l < 2; l++) {
        float q[D], k[D], q2[D], k2[D];
        for (int i = 0; i < D; i++) { q[i] = q2[i] = sinf(i * 0.3f); k[i] = k2[i] = cosf(i * 0.9f); }
        dsq_rope_cos_sin(rs[l], 11, c, s); dsq_rope_apply(rs[l], q, c, s);
        dsq_rope_cos_sin(rs[l], 4, c, s);  dsq_rope_apply(rs[l], k, c, s);
        dsq_rope_cos_sin(rs[l], 16, c, s); dsq_rope_apply(rs[l], q2, c, s);
        dsq_rope_cos_sin(rs[l], 9, c, s);  dsq_rope_apply(rs[l], k2, c, s);
        assert_float_equal(dsq_dot(q, k, D), dsq_dot(q2, k2, D), 1e-5);
    }
}

static float logit(float p) { return logf(p / (1 - p)); }

/* V3 noaux_tc, hand computed. Sigmoid scores
 *   [0.9 0.1 | 0.2 0.3 | 0.8 0.7 | 0.4 0.5], bias +0.65 on expert 6.
 * Group scores (top-2 sums with bias): 1.0, 0.5, 1.5, 1.55 -> groups 3, 2.
 * Candidates 4 (0.8), 5 (0.7), 6 (0.4+0.65), 7 (0.5) -> experts 6, 4.
 * Expert 0 has the best score but its group lost. Weights use the unbiased
 * scores: 0.4, 0.8 -> /1.2 -> x2.5 = 0.8333, 1.6667. */
static void test_route_v3(void **state)
{
    (void)state;
    const float sc[8] = { 0.9f, 0.1f, 0.2f, 0.3f, 0.8f, 0.7f, 0.4f, 0.5f };
    float lg[8], bias[8] = { 0, 0, 0, 0, 0, 0, 0.65f, 0 }, scratch[16], w[2];
    int idx[2];
    for (int i = 0; i < 8; i++) lg[i] = logit(sc[i]);
    dsq_router r = { .n_experts = 8, .top_k = 2, .n_group = 4, .topk_group = 2,
                     .score_func = DSQ_SCORING_SIGMOID, .topk_method = DSQ_TOPK_NOAUX_TC,
                     .norm_topk_prob = 1, .scale_always = 1,
                     .routed_scaling_factor = 2.5f, .bias = bias };
    dsq_route(&r, lg, scratch, idx, w);
    assert_int_equal(idx[0], 6);
    assert_int_equal(idx[1], 4);
    assert_float_equal(w[0], 2.5 / 3, 1e-5);
    assert_float_equal(w[1], 5.0 / 3, 1e-5);

    /* no bias: group score is the max -> groups 0 (0.9), 2 (0.8): experts 0, 4 */
    r.bias = NULL;
    dsq_route(&r, lg, scratch, idx, w);
    assert_int_equal(idx[0], 0);
    assert_int_equal(idx[1], 4);
    assert_float_equal(w[0] + w[1], 2.5, 1e-5);
    assert_float_equal(w[0], 2.5 * 0.9 / 1.7, 1e-5);

    /* no group limit: plain top-2 over biased scores -> 6 (1.05), 0 (0.9) */
    r.bias = bias;
    r.n_group = 1;
    r.topk_group = 1;
    dsq_route(&r, lg, scratch, idx, w);
    assert_int_equal(idx[0], 6);
    assert_int_equal(idx[1], 0);
    assert_float_equal(w[0], 2.5 * 0.4 / 1.3, 1e-5);
}

/* V2 softmax: scores [1 2 3 1]/7. group_limited_greedy with 2 groups,
 * topk_group 1 -> group 1 (max 3/7): experts 2, 3. V2 does not normalise
 * (norm_topk_prob false) and then scales by routed_scaling_factor. */
static void test_route_v2(void **state)
{
    (void)state;
    float lg[4] = { 0, logf(2), logf(3), 0 }, scratch[8], w[2];
    int idx[2];
    dsq_router r = { .n_experts = 4, .top_k = 2, .n_group = 2, .topk_group = 1,
                     .score_func = DSQ_SCORING_SOFTMAX,
                     .topk_method = DSQ_TOPK_GROUP_LIMITED_GREEDY,
                     .norm_topk_prob = 0, .scale_always = 0,
                     .routed_scaling_factor = 2.0f };
    dsq_route(&r, lg, scratch, idx, w);
    assert_int_equal(idx[0], 2);
    assert_int_equal(idx[1], 3);
    assert_float_equal(w[0], 6.0 / 7, 1e-6);
    assert_float_equal(w[1], 2.0 / 7, 1e-6);
    r.topk_method = DSQ_TOPK_GREEDY;
    dsq_route(&r, lg, scratch, idx, w);
    assert_int_equal(idx[0], 2);
    assert_int_equal(idx[1], 1);
    assert_float_equal(w[1], 4.0 / 7, 1e-6);
    /* normalised V2: no routed scaling */
    r.norm_topk_prob = 1;
    dsq_route(&r, lg, scratch, idx, w);
    assert_float_equal(w[0], 0.6, 1e-6);
    assert_float_equal(w[1], 0.4, 1e-6);
    /* ties go to the lower index */
    float flat[4] = { 1, 1, 1, 1 };
    dsq_route(&r, flat, scratch, idx, w);
    assert_int_equal(idx[0], 0);
    assert_int_equal(idx[1], 1);
}

static void test_attend_head(void **state)
{
    (void)state;
    /* two keys; q.k = 0 and 2; scale 0.5 -> p = softmax(0, 1) */
    float q[2] = { 1, 1 }, k[4] = { 0, 0, 1, 1 }, v[6] = { 1, 0, 0, 0, 1, 2 };
    float scores[2], out[3];
    dsq_attend_head(q, 2, k, 2, v, 3, 3, 2, 0.5f, scores, out);
    double p1 = exp(1.0) / (1 + exp(1.0));
    assert_float_equal(out[0], 1 - p1, 1e-6);
    assert_float_equal(out[1], p1, 1e-6);
    assert_float_equal(out[2], 2 * p1, 1e-6);
}

/* GEMM attention block == per-row kernel with the causal mask, including a
 * split query (q1.k1 + q2.k2) and an output that overwrites q1. */
static void test_attend_block(void **state)
{
    (void)state;
    enum { M = 5, P = 7, D1 = 6, D2 = 4, DV = 6 };
    float q[M][D1 + D2], k[P][D1 + D2], v[P][DV], S[M * P], out[M][DV], ref[DV], sc[P];
    int32_t vis[M] = { 3, 4, 5, 6, 7 };
    for (int i = 0; i < M; i++) for (int d = 0; d < D1 + D2; d++) q[i][d] = sinf(i * 1.7f + d);
    for (int j = 0; j < P; j++) for (int d = 0; d < D1 + D2; d++) k[j][d] = cosf(j * 0.9f + d * 1.3f);
    for (int j = 0; j < P; j++) for (int d = 0; d < DV; d++) v[j][d] = sinf(j + d * 0.5f);
    dsq_attend_block(M, P, &q[0][0], D1 + D2, &k[0][0], D1 + D2, D1, &q[0][D1], D1 + D2, &k[0][D1], D1 + D2, D2,
                     &v[0][0], DV, DV, vis, 0.4f, S, &out[0][0], DV, NULL);
    for (int i = 0; i < M; i++) {
        dsq_attend_head(q[i], D1 + D2, &k[0][0], D1 + D2, &v[0][0], DV, DV, vis[i], 0.4f, sc, ref);
        for (int d = 0; d < DV; d++) assert_float_equal(out[i][d], ref[d], 1e-5);
    }
    /* in place: output over q (row stride D1 + D2) */
    dsq_attend_block(M, P, &q[0][0], D1 + D2, &k[0][0], D1 + D2, D1 + D2, NULL, 0, NULL, 0, 0,
                     &v[0][0], DV, DV, vis, 0.4f, S, &q[0][0], D1 + D2, NULL);
    for (int d = 0; d < DV; d++) assert_true(isfinite(q[M - 1][d]));
}

/* More rows than one causal block (ops.c ATT_MB = 32): rows in blocks that
 * read fewer keys than P still equal the per-row kernel, and the output
 * over q1 equals the output elsewhere bit for bit (all of S is formed
 * before O is written). */
static void test_attend_block_causal(void **state)
{
    (void)state;
    enum { M = 70, P = 75, D1 = 12, D2 = 5, DV = 12 };
    static float q[M][D1 + D2], k[P][D1 + D2], v[P][DV], S[M * P], out[M][DV];
    float ref[DV], sc[P];
    int32_t vis[M];
    for (int i = 0; i < M; i++) vis[i] = i + 1 + (P - M);   /* a prefill of M tokens after P - M cached */
    vis[3] = 0;                                            /* a row that sees nothing: all zeros */
    for (int i = 0; i < M; i++) for (int d = 0; d < D1 + D2; d++) q[i][d] = sinf(i * 1.7f + d);
    for (int j = 0; j < P; j++) for (int d = 0; d < D1 + D2; d++) k[j][d] = cosf(j * 0.9f + d * 1.3f);
    for (int j = 0; j < P; j++) for (int d = 0; d < DV; d++) v[j][d] = sinf(j + d * 0.5f);
    memset(S, 0x7f, sizeof S);   /* garbage where nothing is written */
    dsq_attend_block(M, P, &q[0][0], D1 + D2, &k[0][0], D1 + D2, D1, &q[0][D1], D1 + D2, &k[0][D1], D1 + D2, D2,
                     &v[0][0], DV, DV, vis, 0.3f, S, &out[0][0], DV, NULL);
    for (int i = 0; i < M; i++) {
        if (vis[i] == 0) {
            for (int d = 0; d < DV; d++) assert_true(out[i][d] == 0.0f);
            continue;
        }
        dsq_attend_head(q[i], D1 + D2, &k[0][0], D1 + D2, &v[0][0], DV, DV, vis[i], 0.3f, sc, ref);
        for (int d = 0; d < DV; d++) assert_float_equal(out[i][d], ref[d], 1e-5);
    }
    dsq_attend_block(M, P, &q[0][0], D1 + D2, &k[0][0], D1 + D2, D1, &q[0][D1], D1 + D2, &k[0][D1], D1 + D2, D2,
                     &v[0][0], DV, DV, vis, 0.3f, S, &q[0][0], D1 + D2, NULL);
    for (int i = 0; i < M; i++) assert_memory_equal(q[i], out[i], sizeof out[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_softmax_silu),
        cmocka_unit_test(test_yarn_v3),
        cmocka_unit_test(test_llama3_linear_freqs),
        cmocka_unit_test(test_rope_layouts),
        cmocka_unit_test(test_route_v3),
        cmocka_unit_test(test_route_v2),
        cmocka_unit_test(test_attend_head),
        cmocka_unit_test(test_attend_block),
        cmocka_unit_test(test_attend_block_causal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
