/* test_dsa.c - DeepSeek-V3.2 sparse attention (engine/dsa.h): e4m3 and
 * ue8m0 against known bit patterns, the Hadamard transform, the top-k
 * boundary, and the engine's logits against the PyTorch reference
 * (samples/dsv32_ref.py) on a tiny random V3.2 model made by
 * tests/ref/dsv32_fixture.py: prefill (in one call and in chunks continuing
 * at a context) and token-by-token decode, fp8 and float DSA, sequences
 * longer than index_topk so the sparse path is what is compared. The reference tests skip with a message when torch is absent. */
#include "dsq_test.h"
#include "dsa.h"
#include "dsq_file.h"
#include "model.h"
#include "convert.h"
#include "recipe.h"
#include "fixtures/synth_ckpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- e4m3 / ue8m0 -------------------------------------------------------- */

static void test_e4m3_bits(void **st)
{
    (void)st;
    static const struct { float x; uint8_t b; } c[] = {
        { 448.0f, 0x7e }, { 1.0f, 0x38 }, { 0x1p-9f, 0x01 }, { 0x1p-6f, 0x08 }, { -2.0f, 0xc0 },
        { 240.0f, 0x77 }, { 0x1p-10f, 0x00 },          /* tie 0 | 2^-9: even 0 */
        { 1.5f * 0x1p-9f, 0x02 },                       /* tie 1 | 2 (x 2^-9): even 2 */
        { 1.0625f, 0x38 },                              /* tie 1.0 | 1.125: 1.0 */
        { 1.1875f, 0x3a },                              /* tie 1.125 | 1.25: 1.25 */
        { 500.0f, 0x7e }, { -1e9f, 0xfe }, { 7.0f * 0x1p-9f, 0x07 }, { 0.0f, 0x00 }, { -0.0f, 0x80 },
        { 0.3f, 0x2a },                                 /* 0.3 -> 0.3125 = 1.25 * 2^-2 */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        if (dsq_e4m3_encode(c[i].x) != c[i].b) fail_msg("e4m3(%g) = 0x%02x, want 0x%02x", (double)c[i].x,
                                                        dsq_e4m3_encode(c[i].x), c[i].b);
    }
    /* every finite code is a fixed point; decode(encode) is the rounding */
    for (int b = 0; b < 256; b++) {
        float v = dsq_e4m3_decode((uint8_t)b);
        if (isnan(v)) {
            assert_true((b & 0x7f) == 0x7f);
            continue;
        }
        assert_int_equal(dsq_e4m3_encode(v), b);
        assert_true(dsq_e4m3_round(v) == v);
    }
    /* rounding is to the nearest code (brute force over the table) */
    uint64_t s = 99;
    for (int i = 0; i < 20000; i++) {
        float x = ((float)dsq_test_xorshift(&s) / 4294967296.0f - 0.5f) * ldexpf(1.0f, (int)(dsq_test_xorshift(&s) % 22) - 12);
        float r = dsq_e4m3_round(x), best = INFINITY;
        for (int b = 0; b < 256; b++) {
            float v = dsq_e4m3_decode((uint8_t)b);
            if (!isnan(v) && fabsf(v - x) < best) best = fabsf(v - x);
        }
        if (fabsf(r - x) != best) fail_msg("e4m3_round(%a) = %a is not nearest (err %a vs %a)", (double)x, (double)r,
                                           (double)fabsf(r - x), (double)best);
    }
}

static void test_ue8m0(void **st)
{
    (void)st;
    static const struct { float amax, s; } c[] = {
        { 448.0f, 1.0f }, { 448.0001f, 2.0f }, { 224.0f, 0.5f }, { 300.0f, 1.0f }, { 0.0f, 0x1p-22f },
        { 1.0f, 0x1p-8f }, { 896.0f, 2.0f }, { 897.0f, 4.0f },
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        if (dsq_ue8m0_scale(c[i].amax) != c[i].s)
            fail_msg("ue8m0(%g) = %g, want %g", (double)c[i].amax, (double)dsq_ue8m0_scale(c[i].amax), (double)c[i].s);
    /* a block: codes within +-448, dequantized values within half a step */
    float x[160], y[160];
    uint64_t s = 5;
    for (int i = 0; i < 160; i++) x[i] = y[i] = ((float)dsq_test_xorshift(&s) / 4294967296.0f - 0.5f) * 37.0f;
    uint8_t codes[128];
    float sc = dsq_fp8_block_quant(x, 128, codes);
    float amax = 0;
    for (int i = 0; i < 128; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    assert_true(sc == dsq_ue8m0_scale(amax));
    assert_true(amax / sc <= 448.0f && amax / sc > 224.0f);
    dsq_fp8_roundtrip(y, 160, 128);
    for (int i = 0; i < 128; i++) assert_true(y[i] == dsq_e4m3_decode(codes[i]) * sc);
    /* the last block (32 values) has its own scale */
    float amax2 = 0;
    for (int i = 128; i < 160; i++) amax2 = fabsf(x[i]) > amax2 ? fabsf(x[i]) : amax2;
    float s2 = dsq_ue8m0_scale(amax2);
    for (int i = 128; i < 160; i++) assert_true(y[i] == dsq_e4m3_round(x[i] / s2) * s2);
}

/* ---- Hadamard, LayerNorm, top-k ---------------------------------------------- */

static void test_hadamard(void **st)
{
    (void)st;
    float e[4] = { 0, 1, 0, 0 };
    dsq_hadamard(e, 4);                  /* column 1 of Sylvester H4 / 2 */
    const float want[4] = { 0.5f, -0.5f, 0.5f, -0.5f };
    for (int i = 0; i < 4; i++) assert_true(fabsf(e[i] - want[i]) < 1e-7f);
    float x[128], y[128];
    uint64_t s = 11;
    double n0 = 0, n1 = 0;
    for (int i = 0; i < 128; i++) { x[i] = y[i] = (float)dsq_test_xorshift(&s) / 4294967296.0f - 0.5f; n0 += x[i] * x[i]; }
    dsq_hadamard(y, 128);
    for (int i = 0; i < 128; i++) n1 += y[i] * y[i];
    assert_true(fabs(n0 - n1) < 1e-5 * n0);               /* orthonormal */
    /* row j of H128 / sqrt(128) applied to x is y[j]: check a few directly */
    for (int j = 0; j < 128; j += 37) {
        double acc = 0;
        for (int i = 0; i < 128; i++) acc += (__builtin_popcount((unsigned)(i & j)) & 1 ? -1.0 : 1.0) * x[i];
        assert_true(fabs(acc / sqrt(128.0) - y[j]) < 1e-5);
    }
    dsq_hadamard(y, 128);                                 /* an involution */
    for (int i = 0; i < 128; i++) assert_true(fabsf(x[i] - y[i]) < 1e-5f);
}

static void test_layernorm(void **st)
{
    (void)st;
    const float x[4] = { 1, 2, 3, 4 }, w[4] = { 1, 2, 1, 1 }, b[4] = { 0, 0, 1, 0 };
    float y[4];
    dsq_layernorm(y, x, w, b, 4, 0.0f);
    /* mean 2.5, var 1.25 */
    const double inv = 1.0 / sqrt(1.25);
    assert_true(fabs(y[0] - (-1.5 * inv)) < 1e-6);
    assert_true(fabs(y[1] - 2 * (-0.5 * inv)) < 1e-6);
    assert_true(fabs(y[2] - (0.5 * inv + 1)) < 1e-6);
}

static void test_topk(void **st)
{
    (void)st;
    const float sc[10] = { 0.5f, -1.0f, 3.0f, 2.0f, 2.0f, 7.0f, -INFINITY, 0.0f, 2.0f, 1.0f };
    int32_t idx[10];
    float tmp[10];
    /* k equal to the keys: all, in order */
    assert_int_equal(dsq_dsa_topk(sc, 10, 10, idx, tmp), 10);
    for (int i = 0; i < 10; i++) assert_int_equal(idx[i], i);
    assert_int_equal(dsq_dsa_topk(sc, 10, 2048, idx, tmp), 10);
    /* one less: the lowest score goes */
    assert_int_equal(dsq_dsa_topk(sc, 10, 9, idx, tmp), 9);
    for (int i = 0; i < 9; i++) assert_int_equal(idx[i], i < 6 ? i : i + 1);
    /* ties at the cut go to the lower keys: top 4 = 7, 3, then two of the three 2s */
    assert_int_equal(dsq_dsa_topk(sc, 10, 4, idx, tmp), 4);
    const int32_t want[4] = { 2, 3, 4, 5 };
    assert_memory_equal(idx, want, sizeof want);
    assert_int_equal(dsq_dsa_topk(sc, 10, 1, idx, tmp), 1);
    assert_int_equal(idx[0], 5);
    /* random: the kept set is exactly the k largest */
    uint64_t s = 3;
    float v[300], t2[300];
    int32_t id[300];
    for (int rep = 0; rep < 50; rep++) {
        int n = 1 + (int)(dsq_test_xorshift(&s) % 300), k = 1 + (int)(dsq_test_xorshift(&s) % 300);
        for (int i = 0; i < n; i++) v[i] = (float)(dsq_test_xorshift(&s) % 1000);
        int c = dsq_dsa_topk(v, n, k, id, t2);
        assert_int_equal(c, k < n ? k : n);
        float minsel = INFINITY;
        uint8_t in[300] = { 0 };
        for (int i = 0; i < c; i++) {
            if (i) assert_true(id[i] > id[i - 1]);
            in[id[i]] = 1;
            minsel = v[id[i]] < minsel ? v[id[i]] : minsel;
        }
        for (int i = 0; i < n; i++) if (!in[i]) assert_true(v[i] <= minsel);
    }
}

/* ---- the engine against the reference --------------------------------------- */

static const char *torch_python(void)
{
    static const char *py;
    static int done;
    if (done) return py;
    done = 1;
    const char *cands[] = { "/usr/bin/python3", "python3" };
    for (size_t i = 0; i < 2; i++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "%s -c 'import torch, numpy' >/dev/null 2>&1", cands[i]);
        if (system(cmd) == 0) return py = cands[i];
    }
    return NULL;
}

#define NSEQ 32
#define SLEN 20

/* The fixture directory (made once per run), or NULL (skip). */
static const char *fixture(void)
{
    static char *dir;
    static int done;
    if (done) return dir;
    done = 1;
    const char *py = torch_python();
    if (!py) {
        fprintf(stderr, "skip: python3 with torch and numpy not found (the reference is samples/dsv32_ref.py)\n");
        return NULL;
    }
    char *d = dsq_test_tmpdir();
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s tests/ref/dsv32_fixture.py %s %d %d >/dev/null", py, d, NSEQ, SLEN);
    if (system(cmd) != 0) fail_msg("tests/ref/dsv32_fixture.py failed");
    return dir = d;
}

/* A copy of the fixture's config with index_topk = topk (weights linked). */
static char *with_topk(const char *fx, int topk)
{
    char *d = dsq_test_tmpdir();
    char p[600], q[600];
    snprintf(p, sizeof p, "%s/config.json", fx);
    char *txt = NULL;
    size_t len = 0;
    assert_int_equal(dsq_read_file(p, 1 << 20, &txt, &len, NULL), 0);
    char *k = strstr(txt, "\"index_topk\": 8");
    assert_non_null(k);
    char *out = malloc(len + 32);
    int pre = (int)(k - txt);
    int n = snprintf(out, len + 32, "%.*s\"index_topk\": %d%s", pre, txt, topk, k + strlen("\"index_topk\": 8"));
    snprintf(q, sizeof q, "%s/config.json", d);
    dsq_test_write(q, out, (size_t)n);
    snprintf(p, sizeof p, "%s/model.safetensors", fx);
    snprintf(q, sizeof q, "%s/model.safetensors", d);
    assert_int_equal(symlink(p, q), 0);
    free(out);
    free(txt);
    return d;
}

static dsq_model *open_dsa(const char *dir, int mode)
{
    dsq_model_opts o;
    dsq_model_opts_default(&o);
    o.threads = 2;
    o.dsa_mode = mode;
    dsq_model *m = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    int rc = dsq_model_open(&m, dir, &o, &d);
    if (rc) fail_msg("open %s: %s", dir, d.msg);
    return m;
}

/* logits of seq [SLEN] by one prefill call (decode 0) or token by token */
static void run_seq(dsq_model *m, const int32_t *ids, int decode, float *out)
{
    const int V = (int)dsq_model_get_config(m)->vocab_size;
    dsq_state *s = dsq_state_create(m, 1, SLEN);
    assert_non_null(s);
    if (!decode) assert_int_equal(dsq_forward(m, s, 0, ids, SLEN, out, 0, NULL), 0);
    else
        for (int t = 0; t < SLEN; t++) assert_int_equal(dsq_forward(m, s, 0, ids + t, 1, out + (size_t)t * V, 0, NULL), 0);
    dsq_state_free(s);
}

typedef struct agree {
    int seqs, full;              /* sequences, and those matching at every position */
    long checked, total, sparse; /* positions before the first divergence; of them sparse */
    double max_rel;              /* over the checked positions */
} agree;

/* a position diverges when max |dlogit| / (1 + max |ref|) > 1e-3 */
static void compare(const float *ref, const float *x, int V, int topk, agree *a)
{
    a->seqs++;
    a->total += SLEN;
    int t = 0;
    for (; t < SLEN; t++) {
        double d = 0, mx = 0;
        for (int v = 0; v < V; v++) {
            double e = fabs((double)ref[(size_t)t * V + v] - x[(size_t)t * V + v]);
            d = e > d ? e : d;
            mx = fabs(ref[(size_t)t * V + v]) > mx ? fabs(ref[(size_t)t * V + v]) : mx;
        }
        double rel = d / (1 + mx);
        if (rel > 1e-3) {
            if (getenv("DSQ_TEST_VERBOSE")) fprintf(stderr, "  diverges at %d: rel %.3g\n", t, rel);
            break;
        }
        a->max_rel = rel > a->max_rel ? rel : a->max_rel;
        a->checked++;
        a->sparse += t + 1 > topk;
    }
    a->full += t == SLEN;
}

static void test_reference_parity(void **st)
{
    (void)st;
    const char *fx = fixture();
    if (!fx) skip();
    char p[600];
    snprintf(p, sizeof p, "%s/ids.bin", fx);
    char *idb = NULL;
    size_t len = 0;
    assert_int_equal(dsq_read_file(p, 1 << 20, &idb, &len, NULL), 0);
    assert_int_equal(len, (size_t)NSEQ * SLEN * 4);
    const int32_t *ids = (const int32_t *)(const void *)idb;
    for (int mi = 0; mi < 2; mi++) {
        const int mode = mi ? DSQ_DSA_FP8 : DSQ_DSA_FLOAT;
        snprintf(p, sizeof p, "%s/ref_%s.bin", fx, mode == DSQ_DSA_FP8 ? "fp8" : "float");
        char *rb = NULL;
        assert_int_equal(dsq_read_file(p, 1 << 26, &rb, &len, NULL), 0);
        dsq_model *m = open_dsa(fx, mode);
        const int V = (int)dsq_model_get_config(m)->vocab_size, topk = (int)dsq_model_get_config(m)->index_topk;
        assert_true(topk < SLEN);
        assert_int_equal(len, (size_t)NSEQ * 2 * SLEN * V * 4);
        float *x = malloc((size_t)SLEN * V * sizeof *x), *y = malloc((size_t)SLEN * V * sizeof *y);
        agree pre = { 0 }, dec = { 0 }, self = { 0 };
        for (int i = 0; i < NSEQ; i++) {
            const float *ref = (const float *)(const void *)rb + (size_t)i * 2 * SLEN * V;
            run_seq(m, ids + i * SLEN, 0, x);
            compare(ref, x, V, topk, &pre);
            run_seq(m, ids + i * SLEN, 1, y);
            compare(ref + (size_t)SLEN * V, y, V, topk, &dec);
            compare(x, y, V, topk, &self);
        }
        const char *name = mode == DSQ_DSA_FP8 ? "fp8" : "float";
        const agree *as[3] = { &pre, &dec, &self };
        const char *what[3] = { "prefill vs reference", "decode vs reference", "decode vs prefill" };
        for (int k = 0; k < 3; k++)
            fprintf(stderr,
                    "dsa %s, %s: %d/%d sequences agree at every position; %ld/%ld positions before the first "
                    "divergence (%ld sparse); max rel |dlogit| there %.2g\n",
                    name, what[k], as[k]->full, as[k]->seqs, as[k]->checked, as[k]->total, as[k]->sparse,
                    as[k]->max_rel);
        for (int k = 0; k < 3; k++) {
            /* most sequences agree throughout; divergences are the rare
             * e4m3 / top-k boundary crossings float rounding can cause */
            assert_true(as[k]->full * 4 >= as[k]->seqs * 3);
            assert_true(as[k]->sparse * 4 >= (long)NSEQ * (SLEN - topk) * 3);
            /* float DSA: float rounding only; fp8: an e4m3 code flipped by
             * float rounding moves a logit by up to the divergence bound */
            if (mode == DSQ_DSA_FLOAT) assert_true(as[k]->max_rel < 1e-5);
        }
        free(x);
        free(y);
        free(rb);
        dsq_model_free(m);
    }
    free(idb);
}

/* logits of seq [SLEN] prefilled in chunks: one call per [cut[i], cut[i+1]) */
static void run_chunks(dsq_model *m, const int32_t *ids, const int *cut, int ncut, float *out)
{
    const int V = (int)dsq_model_get_config(m)->vocab_size;
    dsq_state *s = dsq_state_create(m, 1, SLEN);
    assert_non_null(s);
    for (int i = 0; i + 1 < ncut; i++)
        assert_int_equal(dsq_forward(m, s, 0, ids + cut[i], cut[i + 1] - cut[i], out + (size_t)cut[i] * V, 0, NULL),
                         0);
    dsq_state_free(s);
}

/* Prefill continuing at a context (chunks after the first, as a long
 * prompt is prefilled and as bench_dsa times it), chunks longer than
 * index_topk: the sparse rows of a chunk, each gathering its own selected
 * keys, and the dense rows before them, against the reference. */
static void test_chunked_prefill(void **st)
{
    (void)st;
    const char *fx = fixture();
    if (!fx) skip();
    char p[600];
    snprintf(p, sizeof p, "%s/ids.bin", fx);
    char *idb = NULL;
    size_t len = 0;
    assert_int_equal(dsq_read_file(p, 1 << 20, &idb, &len, NULL), 0);
    const int32_t *ids = (const int32_t *)(const void *)idb;
    /* chunks of 9 at offset 1 (dense rows, then sparse ones), 10 at 10 (all
     * sparse), 13 at 7 (one dense row, on the absorbed path with the sparse
     * ones: too few to pay for the naive path's expansion), 9 at 4 then 7
     * at 13 */
    static const int cuts[3][4] = { { 0, 1, 10, SLEN }, { 0, 7, SLEN, SLEN }, { 0, 4, 13, SLEN } };
    static const int ncuts[3] = { 4, 3, 4 };
    for (int mi = 0; mi < 2; mi++) {
        const int mode = mi ? DSQ_DSA_FP8 : DSQ_DSA_FLOAT;
        snprintf(p, sizeof p, "%s/ref_%s.bin", fx, mode == DSQ_DSA_FP8 ? "fp8" : "float");
        char *rb = NULL;
        assert_int_equal(dsq_read_file(p, 1 << 26, &rb, &len, NULL), 0);
        dsq_model *m = open_dsa(fx, mode);
        const int V = (int)dsq_model_get_config(m)->vocab_size, topk = (int)dsq_model_get_config(m)->index_topk;
        assert_true(topk == 8);
        float *x = malloc((size_t)SLEN * V * sizeof *x);
        for (int c = 0; c < 3; c++) {
            agree a = { 0 };
            for (int i = 0; i < NSEQ; i++) {
                const float *ref = (const float *)(const void *)rb + (size_t)i * 2 * SLEN * V;
                run_chunks(m, ids + i * SLEN, cuts[c], ncuts[c], x);
                compare(ref, x, V, topk, &a);
            }
            fprintf(stderr,
                    "dsa %s, prefill in chunks from %d, %d: %d/%d sequences agree at every position; %ld/%ld "
                    "positions before the first divergence (%ld sparse); max rel |dlogit| there %.2g\n",
                    mode == DSQ_DSA_FP8 ? "fp8" : "float", cuts[c][1], cuts[c][2], a.full, a.seqs, a.checked, a.total,
                    a.sparse, a.max_rel);
            assert_true(a.full * 4 >= a.seqs * 3);
            assert_true(a.sparse * 4 >= (long)NSEQ * (SLEN - topk) * 3);
            if (mode == DSQ_DSA_FLOAT) assert_true(a.max_rel < 1e-5);
        }
        free(x);
        free(rb);
        dsq_model_free(m);
    }
    free(idb);
}

/* index_topk equal to the context selects every key (the dense model's
 * bits); one less changes only the last row, in prefill and in decode. */
static void test_topk_boundary(void **st)
{
    (void)st;
    const char *fx = fixture();
    if (!fx) skip();
    char *dd = with_topk(fx, 1000), *de = with_topk(fx, SLEN), *dl = with_topk(fx, SLEN - 1);
    for (int mode = 0; mode < 2; mode++) {
        dsq_model *md = open_dsa(dd, mode), *me = open_dsa(de, mode), *ml = open_dsa(dl, mode);
        const int V = (int)dsq_model_get_config(md)->vocab_size;
        float *a = malloc((size_t)SLEN * V * 4), *b = malloc((size_t)SLEN * V * 4),
              *c = malloc((size_t)SLEN * V * 4), *e = malloc((size_t)SLEN * V * 4);
        int32_t ids[SLEN];
        uint64_t s = 17;
        double last = 0, dec_vs_pre = 0;
        for (int rep = 0; rep < 6; rep++) {
            for (int t = 0; t < SLEN; t++) ids[t] = (int32_t)(dsq_test_xorshift(&s) % (uint32_t)V);
            run_seq(md, ids, 0, a);
            run_seq(me, ids, 0, b);
            run_seq(ml, ids, 0, c);
            run_seq(ml, ids, 1, e);
            assert_memory_equal(a, b, (size_t)SLEN * V * 4);
            assert_memory_equal(a, c, (size_t)(SLEN - 1) * V * 4);
            for (int v = 0; v < V; v++) {
                size_t i = (size_t)(SLEN - 1) * V + v;
                double d = fabs(a[i] - c[i]), d2 = fabs(e[i] - c[i]);
                last = d > last ? d : last;
                dec_vs_pre = d2 > dec_vs_pre ? d2 : dec_vs_pre;
            }
        }
        fprintf(stderr, "dsa %s, index_topk = context - 1: the last row moves by up to %.3g; decode vs prefill %.2g\n",
                mode == DSQ_DSA_FP8 ? "fp8" : "float", last, dec_vs_pre);
        assert_true(last > 1e-3);
        if (mode == DSQ_DSA_FLOAT) assert_true(dec_vs_pre < 1e-4);
        free(a);
        free(b);
        free(c);
        free(e);
        dsq_model_free(md);
        dsq_model_free(me);
        dsq_model_free(ml);
    }
    const char *ds[3] = { dd, de, dl };
    for (int i = 0; i < 3; i++) {
        dsq_test_rmtree(ds[i]);
        free((void *)ds[i]);
    }
}

/* fp8 and float DSA are different models: the latent round trip alone moves
 * every logit, also where no row is sparse */
static void test_fp8_vs_float(void **st)
{
    (void)st;
    const char *fx = fixture();
    if (!fx) skip();
    dsq_model *a = open_dsa(fx, DSQ_DSA_FP8), *b = open_dsa(fx, DSQ_DSA_FLOAT);
    const int V = (int)dsq_model_get_config(a)->vocab_size;
    float *x = malloc((size_t)SLEN * V * 4), *y = malloc((size_t)SLEN * V * 4);
    int32_t ids[SLEN];
    for (int t = 0; t < SLEN; t++) ids[t] = t * 7 % V;
    run_seq(a, ids, 0, x);
    run_seq(b, ids, 0, y);
    double d0 = 0;
    for (int v = 0; v < V; v++) d0 = fabs(x[v] - y[v]) > d0 ? fabs(x[v] - y[v]) : d0;
    fprintf(stderr, "fp8 vs float DSA, first token: max |dlogit| %.3g\n", d0);
    assert_true(d0 > 1e-4);
    char info[512];
    dsq_model_info(a, info, sizeof info);
    assert_non_null(strstr(info, "DSA (indexer 4 heads x 32, top 8 keys, fp8)"));
    free(x);
    free(y);
    dsq_model_free(a);
    dsq_model_free(b);
}

/* batched decode (one token of several sequences per call, each reading
 * its own caches) and lazy layers give single-sequence decode's logits */
static void test_batch_and_lazy(void **st)
{
    (void)st;
    const char *fx = fixture();
    if (!fx) skip();
    dsq_model *m = open_dsa(fx, DSQ_DSA_FLOAT);
    const int V = (int)dsq_model_get_config(m)->vocab_size, NS = 3;
    float *one = malloc((size_t)NS * SLEN * V * 4), *bat = malloc((size_t)NS * SLEN * V * 4);
    int32_t ids[3][SLEN];
    for (int q = 0; q < NS; q++)
        for (int t = 0; t < SLEN; t++) ids[q][t] = (int32_t)((q * 31 + t * 7 + t * t) % V);
    for (int q = 0; q < NS; q++) run_seq(m, ids[q], 1, one + (size_t)q * SLEN * V);
    dsq_state *s = dsq_state_create(m, NS, SLEN);
    assert_non_null(s);
    const int active[3] = { 0, 1, 2 };
    float *lg = malloc((size_t)NS * V * 4);
    for (int t = 0; t < SLEN; t++) {
        int32_t tok[3] = { ids[0][t], ids[1][t], ids[2][t] };
        assert_int_equal(dsq_forward_batch_decode(m, s, tok, active, NS, lg, NULL), 0);
        for (int q = 0; q < NS; q++) memcpy(bat + ((size_t)q * SLEN + t) * V, lg + (size_t)q * V, (size_t)V * 4);
    }
    double d = 0;
    for (size_t i = 0; i < (size_t)NS * SLEN * V; i++) d = fabs(one[i] - bat[i]) > d ? fabs(one[i] - bat[i]) : d;
    fprintf(stderr, "batched vs single decode (float DSA): max |dlogit| %.3g\n", d);
    assert_true(d < 1e-4);
    dsq_state_free(s);
    dsq_model_free(m);
    /* lazy layers: the same prefill */
    dsq_model_opts o;
    dsq_model_opts_default(&o);
    o.threads = 2;
    o.lazy = 1;
    o.dsa_mode = DSQ_DSA_FLOAT;
    assert_int_equal(dsq_model_open(&m, fx, &o, NULL), 0);
    float *lz = malloc((size_t)SLEN * V * 4), *ref = malloc((size_t)SLEN * V * 4);
    run_seq(m, ids[0], 0, lz);
    dsq_model_free(m);
    m = open_dsa(fx, DSQ_DSA_FLOAT);
    run_seq(m, ids[0], 0, ref);
    assert_memory_equal(lz, ref, (size_t)SLEN * V * 4);
    dsq_model_free(m);
    free(lz);
    free(ref);
    free(lg);
    free(one);
    free(bat);
}

/* ds-quant on V3.2 checkpoints, BF16 and FP8 (wq_b / wk FP8 with block
 * scales, weights_proj BF16), MTP layer included: the indexer's linears are
 * kept float, everything else gets the scheme; the engine runs source and
 * .dsq alike. */
static void test_convert_v32(void **st)
{
    (void)st;
    for (int fp8 = 0; fp8 < 2; fp8++) {
        dsq_synth_opts so;
        dsq_synth_defaults_tiny(&so);
        so.index_heads = 4;
        so.index_dim = 32;
        so.index_topk = 1000;   /* dense: the quantization error alone, no top-k flips */
        so.fp8 = fp8;
        so.seed = 31;
        char *dir = dsq_test_tmpdir();
        dsq_diag d;
        dsq_diag_clear(&d);
        assert_int_equal(dsq_synth_write(&so, dir, DSQ_OUT_OVERWRITE, NULL, &d), 0);
        char out[600];
        snprintf(out, sizeof out, "%s/model.dsq", dir);
        dsq_recipe r;
        assert_int_equal(dsq_recipe_init(&r, "w8a8-dynamic", &d), 0);
        dsq_convert_opts o;
        dsq_convert_opts_init(&o);
        o.input = dir;
        o.output = out;
        o.recipe = &r;
        o.threads = 2;
        dsq_convert *c = NULL;
        int rc = dsq_convert_prepare(&c, &o, &d);
        if (rc) fail_msg("prepare: %s", d.msg);
        const dsq_plan *pl = dsq_convert_plan(c);
        int indexer = 0, mtp_indexer = 0, quantized = 0;
        for (size_t i = 0; i < pl->n; i++) {
            const dsq_plan_entry *e = &pl->v[i];
            if (strstr(e->name, ".indexer.") && e->role.role == DSQ_ROLE_INDEXER_LINEAR) {
                indexer++;
                mtp_indexer += e->role.mtp;
                if (e->scheme->id != DSQ_SCHEME_BF16) fail_msg("%s planned as %s", e->name, e->scheme->name);
            }
            quantized += e->scheme->id == DSQ_SCHEME_W8A8_DYNAMIC;
        }
        assert_int_equal(indexer, 3 * 3);      /* 2 layers + MTP, 3 linears each */
        assert_int_equal(mtp_indexer, 3);
        assert_true(quantized > 10);
        dsq_convert_summary sum;
        rc = dsq_convert_run(c, &sum, &d);
        if (rc) fail_msg("convert: %s", d.msg);
        dsq_convert_free(c);
        dsq_recipe_release(&r);
        dsq_model *ms = open_dsa(dir, DSQ_DSA_FLOAT), *mq = open_dsa(out, DSQ_DSA_FLOAT);
        const int V = (int)dsq_model_get_config(ms)->vocab_size;
        float *a = malloc((size_t)SLEN * V * 4), *b = malloc((size_t)SLEN * V * 4);
        int32_t ids[SLEN];
        for (int t = 0; t < SLEN; t++) ids[t] = (t * 37 + 5) % V;
        run_seq(ms, ids, 0, a);
        run_seq(mq, ids, 0, b);
        double dmax = 0, amax = 0;
        for (size_t i = 0; i < (size_t)SLEN * V; i++) {
            assert_true(isfinite(a[i]) && isfinite(b[i]));
            dmax = fabs(a[i] - b[i]) > dmax ? fabs(a[i] - b[i]) : dmax;
            amax = fabs(a[i]) > amax ? fabs(a[i]) : amax;
        }
        fprintf(stderr, "V3.2 %s source vs w8a8-dynamic .dsq: max |dlogit| %.3g of %.3g\n", fp8 ? "FP8" : "BF16",
                dmax, amax);
        assert_true(dmax > 0 && dmax < 0.25 * (1 + amax));
        free(a);
        free(b);
        dsq_model_free(ms);
        dsq_model_free(mq);
        dsq_test_rmtree(dir);
        free(dir);
    }
}

static int teardown(void **st)
{
    (void)st;
    const char *fx = fixture();
    if (fx) dsq_test_rmtree(fx);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_e4m3_bits),
        cmocka_unit_test(test_ue8m0),
        cmocka_unit_test(test_hadamard),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_topk),
        cmocka_unit_test(test_reference_parity),
        cmocka_unit_test(test_chunked_prefill),
        cmocka_unit_test(test_topk_boundary),
        cmocka_unit_test(test_fp8_vs_float),
        cmocka_unit_test(test_batch_and_lazy),
        cmocka_unit_test(test_convert_v32),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
