/* test_kvq.c - MLA's cache in 16 or 8 bits (engine/kvq.c):
 *   - one position's row: int8 codes within [-127, 127] with the part's
 *     largest magnitude at +-127 and every value within half a step; e4m3
 *     within its relative step; bf16 the nearest-even rounding; a zero part
 *     stays zero; the row gives back what the writer saw;
 *   - on tiny-dsv3, for every mode: prefill and token-by-token decode give
 *     the same logits (the same cached values), batched decode of several
 *     sequences the same as one at a time, the logits move from the float
 *     cache's (the mode is in effect) but stay close (int8 top-1 agrees);
 *   - bytes per token as the layout says; a GQA model is refused. */
#include "dsq_test.h"

#include "dsa.h"
#include "dsq_mem.h"
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_row_codes(void **st)
{
    (void)st;
    enum { R = 64, P = 16 };
    float lat[R], pe[P], lo[R], po[P], lg[R], pg[P];
    uint64_t s = 7;
    for (int i = 0; i < R; i++) lat[i] = (float)((int)(dsq_test_xorshift(&s) % 20001) - 10000) / 3000.0f;
    for (int i = 0; i < P; i++) pe[i] = (float)((int)(dsq_test_xorshift(&s) % 20001) - 10000) / 70.0f;
    lat[5] = -4.5f;   /* the latent's largest magnitude */
    uint8_t row[R * 4 + P * 4 + 8];
    /* int8 */
    assert_int_equal(dsq_kvq_row_bytes(DSQ_KV_INT8, R, P), R + P + 8);
    dsq_kvq_put(DSQ_KV_INT8, lat, R, pe, P, row, lo, po);
    float sc[2];
    memcpy(sc, row + R + P, sizeof sc);
    assert_true(fabsf(sc[0] - 4.5f / 127.0f) < 1e-7f);
    assert_int_equal((int8_t)row[5], -127);
    for (int i = 0; i < R; i++) {
        assert_true(fabsf(lo[i] - lat[i]) <= sc[0] * 0.5f + 1e-6f);
        assert_true((int8_t)row[i] >= -127);
    }
    float pmax = 0;
    for (int i = 0; i < P; i++) pmax = fmaxf(pmax, fabsf(pe[i]));
    assert_true(fabsf(sc[1] - pmax / 127.0f) < 1e-6f * pmax);
    for (int i = 0; i < P; i++) assert_true(fabsf(po[i] - pe[i]) <= sc[1] * 0.5f + 1e-5f);
    dsq_kvq_get(DSQ_KV_INT8, row, R, P, lg, pg);
    assert_memory_equal(lg, lo, sizeof lg);
    assert_memory_equal(pg, po, sizeof pg);
    /* fp8 (e4m3, scale amax / 448) */
    dsq_kvq_put(DSQ_KV_FP8, lat, R, pe, P, row, lo, po);
    memcpy(sc, row + R + P, sizeof sc);
    assert_true(fabsf(sc[0] - 4.5f / 448.0f) < 1e-7f);
    for (int i = 0; i < R; i++) {
        assert_true(fabsf(lo[i] - lat[i]) <= fabsf(lat[i]) / 16.0f + sc[0] * 0.002f * 2);
        assert_true(lo[i] == dsq_e4m3_decode(dsq_e4m3_encode(lat[i] / sc[0])) * sc[0]);
    }
    dsq_kvq_get(DSQ_KV_FP8, row, R, P, lg, pg);
    assert_memory_equal(lg, lo, sizeof lg);
    assert_memory_equal(pg, po, sizeof pg);
    /* bf16 */
    assert_int_equal(dsq_kvq_row_bytes(DSQ_KV_BF16, R, P), (R + P) * 2);
    dsq_kvq_put(DSQ_KV_BF16, lat, R, pe, P, row, lo, po);
    for (int i = 0; i < R; i++) assert_true(lo[i] == dsq_bf16_to_f32(dsq_f32_to_bf16(lat[i])));
    dsq_kvq_get(DSQ_KV_BF16, row, R, P, lg, pg);
    assert_memory_equal(lg, lo, sizeof lg);
    assert_memory_equal(pg, po, sizeof pg);
    /* a zero part */
    memset(lat, 0, sizeof lat);
    dsq_kvq_put(DSQ_KV_INT8, lat, R, pe, P, row, lo, po);
    for (int i = 0; i < R; i++) assert_true(lo[i] == 0.0f && row[i] == 0);
}

static const int32_t PROMPT[12] = { 3, 17, 42, 5, 63, 0, 8, 8, 21, 34, 55, 13 };

static dsq_model *open_mode(const char *path, int mode)
{
    dsq_model_opts o;
    dsq_model_opts_default(&o);
    o.threads = 2;
    o.kv_cache = mode;
    dsq_model *m = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    if (dsq_model_open(&m, path, &o, &d)) fail_msg("open %s: %s", path, d.msg);
    return m;
}

static void logits(dsq_model *m, int n, int decode, float *lg)
{
    const int V = (int)dsq_model_get_config(m)->vocab_size;
    dsq_state *s = dsq_state_create(m, 1, 64);
    assert_non_null(s);
    if (decode) {
        for (int i = 0; i < n; i++) assert_int_equal(dsq_forward(m, s, 0, PROMPT + i, 1, lg + (size_t)i * V, 0, NULL), 0);
    } else {
        assert_int_equal(dsq_forward(m, s, 0, PROMPT, n, lg, 0, NULL), 0);
    }
    dsq_state_free(s);
}

static double maxdiff(const float *a, const float *b, size_t n)
{
    double mx = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs((double)a[i] - b[i]));
    return mx;
}

static void test_model_modes(void **st)
{
    (void)st;
    const int n = 12;
    dsq_model *m0 = open_mode("samples/tiny-dsv3", DSQ_KV_F32);
    const int V = (int)dsq_model_get_config(m0)->vocab_size;
    float *ref = malloc((size_t)n * V * sizeof *ref), *p = malloc((size_t)n * V * sizeof *p),
          *q = malloc((size_t)n * V * sizeof *q);
    logits(m0, n, 0, ref);
    const int64_t L = dsq_model_get_config(m0)->num_hidden_layers;
    const int64_t R = dsq_model_get_config(m0)->kv_lora_rank, rope = dsq_model_get_config(m0)->qk_rope_head_dim;
    assert_int_equal(dsq_model_kv_bytes_per_token(m0), L * (R + rope) * 4);
    dsq_model_free(m0);
    static const int modes[] = { DSQ_KV_BF16, DSQ_KV_INT8, DSQ_KV_FP8 };
    for (size_t k = 0; k < 3; k++) {
        dsq_model *m = open_mode("samples/tiny-dsv3", modes[k]);
        logits(m, n, 0, p);
        logits(m, n, 1, q);
        double pd = maxdiff(p, q, (size_t)n * V), rd = maxdiff(p, ref, (size_t)n * V);
        printf("kv cache %d: prefill vs decode %.2e, vs the float cache %.2e\n", modes[k], pd, rd);
        assert_true(pd < 2e-3);      /* the same cached values on both paths */
        assert_true(rd > 1e-6);      /* the mode is in effect */
        assert_true(rd < 2.0);
        if (modes[k] != DSQ_KV_FP8) {
            int agree = 0;
            for (int t = 0; t < n; t++) {
                int a = 0, b = 0;
                for (int v = 1; v < V; v++) {
                    if (p[(size_t)t * V + v] > p[(size_t)t * V + a]) a = v;
                    if (ref[(size_t)t * V + v] > ref[(size_t)t * V + b]) b = v;
                }
                agree += a == b;
            }
            assert_true(agree >= n - 1);
        }
        assert_int_equal(dsq_model_kv_bytes_per_token(m),
                         L * (int64_t)dsq_kvq_row_bytes(modes[k], R, rope));
        /* batched decode of two sequences: each as when decoded alone */
        dsq_state *b = dsq_state_create(m, 2, 64);
        assert_non_null(b);
        float *lb = malloc((size_t)2 * V * sizeof *lb);
        int active[2] = { 0, 1 };
        for (int i = 0; i < n; i++) {
            int32_t tok[2] = { PROMPT[i], PROMPT[i] };
            assert_int_equal(dsq_forward_batch_decode(m, b, tok, active, 2, lb, NULL), 0);
            assert_true(maxdiff(lb, q + (size_t)i * V, (size_t)V) < 2e-3);
            assert_true(maxdiff(lb + V, q + (size_t)i * V, (size_t)V) < 2e-3);
        }
        free(lb);
        dsq_state_free(b);
        dsq_model_free(m);
    }
    free(ref);
    free(p);
    free(q);
}

static void test_gqa_refused(void **st)
{
    (void)st;
    dsq_model_opts o;
    dsq_model_opts_default(&o);
    o.kv_cache = DSQ_KV_INT8;
    dsq_model *m = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_model_open(&m, "samples/tiny-llama", &o, &d), DSQ_ERR_UNSUPPORTED);
    assert_non_null(strstr(d.msg, "MLA"));
    o.kv_cache = 9;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_model_open(&m, "samples/tiny-dsv3", &o, &d), DSQ_ERR_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_codes),
        cmocka_unit_test(test_model_modes),
        cmocka_unit_test(test_gqa_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
