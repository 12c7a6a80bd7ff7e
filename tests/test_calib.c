/* test_calib.c - calibration on synthetic models and hand-made inputs:
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
 *   - stats file round trip (reuse == original) and corruption detected;
 *   - resume after a layer checkpoint == a straight run; mismatched resume
 *     refused; determinism across thread counts;
 *   - GPTQ through the driver (every integer row): a blob per calibrated
 *     linear, thread-count independent, equal after resume and from --stats,
 *     refused from a file without it, and the converter writes exactly it
 *     (whole and streamed in pieces);
 *   - X^T X blocks equal hand-computed sums; the AWQ clip searched on them
 *     lowers held-out output error of the sample clearly below no clip and
 *     the diagonal-proxy clip. */
#include "dsq_test.h"
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

static char *g_dir;

static int setup(void **state)
{
    (void)state;
    g_dir = dsq_test_tmpdir();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    dsq_test_rmtree(g_dir);
    free(g_dir);
    return 0;
}

static char *path(const char *name) { return dsq_path_join(g_dir, name); }

/* ---- helpers -------------------------------------------------------------- */

/* GPT-2 bytes_to_unicode (independent of the library's). */
static unsigned b2u(unsigned b)
{
    int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    if (printable) return b;
    unsigned k = 0;
    for (unsigned x = 0; x < b; x++) {
        int p = (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE);
        k += !p;
    }
    return 256 + k;
}

/* A byte-level tokenizer.json with no merges: one token per byte (id = byte). */
static void write_byte_tokenizer(const char *dir)
{
    size_t cap = 1 << 16;
    char *j = malloc(cap), *o = j;
    o += sprintf(o, "{\"version\":\"1.0\",\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\","
                    "\"add_prefix_space\":false,\"use_regex\":false},\"added_tokens\":[],\"post_processor\":null,"
                    "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{");
    for (unsigned b = 0; b < 256; b++) {
        unsigned cp = b2u(b);
        if (cp == '"' || cp == '\\') o += sprintf(o, "%s\"\\%c\":%u", b ? "," : "", (char)cp, b);
        else if (cp < 0x80) o += sprintf(o, "%s\"%c\":%u", b ? "," : "", (char)cp, b);
        else o += sprintf(o, "%s\"\\u%04x\":%u", b ? "," : "", cp, b);
    }
    o += sprintf(o, "},\"merges\":[]}}");
    char *p = dsq_path_join(dir, "tokenizer.json");
    dsq_test_write(p, j, strlen(j));
    free(p);
    p = dsq_path_join(dir, "tokenizer_config.json");
    const char *cfg = "{\"add_bos_token\": false, \"add_eos_token\": false}";
    dsq_test_write(p, cfg, strlen(cfg));
    free(p);
    free(j);
}

static void tiny_v3(dsq_synth_opts *o)
{
    dsq_synth_defaults_tiny(o);
    o->mtp = 0;
    o->dtype = DSQ_DTYPE_F32;
    o->seed = 7;
}

static void tiny_llama(dsq_synth_opts *o, int kv_heads)
{
    memset(o, 0, sizeof *o);
    o->arch = DSQ_SYNTH_LLAMA;
    o->hidden = 256;
    o->intermediate = 384;
    o->vocab = 512;
    o->heads = 4;
    o->kv_heads = kv_heads;
    o->layers = 2;
    o->dtype = DSQ_DTYPE_F32;
    o->seed = 11;
}

static char *make_model(const dsq_synth_opts *so, const char *name)
{
    char *dir = path(name);
    dsq_diag d;
    dsq_diag_clear(&d);
    int rc = dsq_synth_write(so, dir, DSQ_OUT_OVERWRITE, NULL, &d);
    if (rc) fprintf(stderr, "synth: %s\n", d.msg);
    assert_int_equal(rc, 0);
    write_byte_tokenizer(dir);
    return dir;
}

static int32_t *rand_tokens(size_t n, int vocab, uint64_t seed)
{
    int32_t *t = malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (int32_t)((seed >> 33) % (uint64_t)vocab);
    }
    return t;
}

static void base_opts(dsq_calib_opts *o, const char *scheme, const int32_t *tok, int n, int L)
{
    dsq_calib_opts_init(o);
    o->scheme = scheme;
    o->tokens = tok;
    o->n_tokens = (size_t)n * (size_t)L;
    o->data.n_samples = n;
    o->data.seqlen = L;
    o->threads = 2;
    o->awq_tokens = 64;
    o->awq_expert_tokens = 16;
    o->n_grid = 10;
}

static dsq_calib_result *calibrate(const char *model, const dsq_calib_opts *o)
{
    dsq_calib_result *r = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    int rc = dsq_calib_run(model, o, &r, NULL, NULL, NULL, &d);
    if (rc) {
        char b[1024];
        dsq_diag_format(&d, b, sizeof b);
        fprintf(stderr, "calib: %s\n", b);
    }
    assert_int_equal(rc, 0);
    assert_non_null(r);
    return r;
}

static int arr_eq(const float *a, const float *b, int64_t n)
{
    if (!a || !b) return a == b;
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* Two results hold identical entries for every tensor of a. */
static void assert_same_result(const dsq_calib_result *a, const dsq_calib_result *b, const char *model)
{
    dsq_st_model *st;
    assert_int_equal(dsq_st_open(&st, model, NULL), 0);
    int nent = 0;
    for (size_t i = 0; i < dsq_st_count(st); i++) {
        const char *nm = dsq_st_get(st, i)->name;
        const dsq_calib_tensor *x = dsq_calib_lookup(a, nm), *y = dsq_calib_lookup(b, nm);
        assert_true((x == NULL) == (y == NULL));
        if (!x) continue;
        nent++;
        assert_int_equal(x->rows, y->rows);
        assert_int_equal(x->cols, y->cols);
        assert_int_equal(x->status, y->status);
        assert_int_equal(x->clip, y->clip);
        assert_true((x->clip_idx == NULL) == (y->clip_idx == NULL));
        if (x->clip_idx) {
            int64_t g = x->clip_gs < x->cols ? x->clip_gs : x->cols;
            assert_int_equal(x->clip_gs, y->clip_gs);
            assert_memory_equal(x->clip_idx, y->clip_idx, (size_t)(x->rows * ((x->cols + g - 1) / g)));
        }
        assert_true(arr_eq(x->in_scale, y->in_scale, x->cols));
        assert_true(arr_eq(x->row_scale, y->row_scale, x->rows));
        assert_true(arr_eq(x->importance, y->importance, x->cols));
        assert_int_equal(x->has_act_static, y->has_act_static);
        assert_true(x->act_scale == y->act_scale && x->act_offset == y->act_offset);
        assert_int_equal(x->rolled_back, y->rolled_back);
        assert_true(x->sensitivity == y->sensitivity);
        assert_true((x->gptq_blob == NULL) == (y->gptq_blob == NULL));
        if (x->gptq_blob) {
            assert_true(x->gptq_blob_size == y->gptq_blob_size && x->gptq_scheme == y->gptq_scheme);
            assert_memory_equal(x->gptq_blob, y->gptq_blob, x->gptq_blob_size);
        }
    }
    assert_true(nent > 0);
    dsq_st_close(st);
}

/* Every scale in the result is finite and in range; returns the number of
 * entries with scales. */
static int check_finite(const dsq_calib_result *r, const char *model)
{
    dsq_st_model *st;
    assert_int_equal(dsq_st_open(&st, model, NULL), 0);
    int n = 0;
    for (size_t i = 0; i < dsq_st_count(st); i++) {
        const dsq_calib_tensor *t = dsq_calib_lookup(r, dsq_st_get(st, i)->name);
        if (!t) continue;
        if (t->in_scale) {
            assert_true(dsq_scales_ok(t->in_scale, t->cols));
            n++;
        }
        if (t->row_scale)
            for (int64_t k = 0; k < t->rows; k++) assert_true(isfinite(t->row_scale[k]) && t->row_scale[k] > 0.0f);
        if (t->importance)
            for (int64_t k = 0; k < t->cols; k++) assert_true(isfinite(t->importance[k]) && t->importance[k] >= 0.0f);
        if (t->has_act_static) {
            assert_true(isfinite(t->act_scale) && t->act_scale > 0.0f);
            assert_true(t->act_offset >= -128.0f && t->act_offset <= 127.0f && t->act_offset == rintf(t->act_offset));
        }
    }
    dsq_st_close(st);
    return n;
}

/* Fold the result into a float32 copy of model at out (config + tokenizer copied). */
static void fold_copy(const char *model, const dsq_calib_result *r, const char *out)
{
    dsq_st_model *st;
    assert_int_equal(dsq_st_open(&st, model, NULL), 0);
    dsq_st_writer *w = dsq_st_writer_create();
    float **bufs = calloc(dsq_st_count(st), sizeof *bufs);
    for (size_t i = 0; i < dsq_st_count(st); i++) {
        const dsq_st_tensor *t = dsq_st_get(st, i);
        int64_t rows = dsq_st_rows(t), cols = dsq_st_cols(t);
        bufs[i] = malloc((size_t)t->numel * sizeof(float));
        assert_int_equal(dsq_st_read_rows_f32(st, t, 0, rows, bufs[i], NULL), 0);
        const dsq_calib_tensor *e = dsq_calib_lookup(r, t->name);
        if (e) assert_int_equal(dsq_calib_apply_rows(e, 0, rows, cols, bufs[i]), 0);
        assert_int_equal(dsq_st_writer_add(w, t->name, DSQ_DTYPE_F32, t->ndim, t->shape, bufs[i],
                                           t->numel * sizeof(float)), 0);
    }
    assert_int_equal(mkdir(out, 0755) == 0 || access(out, F_OK) == 0, 1);
    char *mp = dsq_path_join(out, "model.safetensors");
    assert_int_equal(dsq_st_writer_write(w, mp, 0, DSQ_OUT_OVERWRITE, NULL), 0);
    free(mp);
    dsq_st_writer_free(w);
    for (size_t i = 0; i < dsq_st_count(st); i++) free(bufs[i]);
    free(bufs);
    dsq_st_close(st);
    const char *side[] = { "config.json", "tokenizer.json", "tokenizer_config.json" };
    for (size_t i = 0; i < 3; i++) {
        char *a = dsq_path_join(model, side[i]), *b = dsq_path_join(out, side[i]), *txt;
        size_t len;
        assert_int_equal(dsq_read_file(a, 1 << 24, &txt, &len, NULL), 0);
        dsq_test_write(b, txt, len);
        free(txt);
        free(a);
        free(b);
    }
}

/* DSA mode of the models logits_of opens (V3.2 fold checks run the float
 * indexer: e4m3 round trips turn the fold's float rounding into jumps) */
static int g_dsa_mode = DSQ_DSA_FP8;

static float *logits_of(const char *model, const int32_t *tok, int n, int64_t *vocab)
{
    dsq_model *m;
    dsq_model_opts mo;
    dsq_model_opts_default(&mo);
    mo.threads = 1;
    mo.dsa_mode = g_dsa_mode;
    assert_int_equal(dsq_model_open(&m, model, &mo, NULL), 0);
    *vocab = dsq_model_get_config(m)->vocab_size;
    dsq_state *s = dsq_state_create(m, 1, n);
    float *lg = malloc((size_t)n * (size_t)*vocab * sizeof *lg);
    assert_int_equal(dsq_forward(m, s, 0, tok, n, lg, 0, NULL), 0);
    dsq_state_free(s);
    dsq_model_free(m);
    return lg;
}

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

static int target(void *ctx, const char *name, int64_t r, int64_t c, const dsq_scheme **o, int32_t *gs)
{
    (void)r;
    (void)c;
    size_t n = strlen(name);
    *o = n > 16 && strcmp(name + n - 16, ".mlp.gate.weight") == 0 ? NULL : ctx;
    *gs = ((const dsq_scheme *)ctx)->id == DSQ_SCHEME_AWQ_W4A16 ? 64 : DSQ_GROUP_DEFAULT;
    return 0;
}

/* The model with layers loaded on demand (as calibration opens it), 2 threads. */
static dsq_model *open_lazy(const char *model)
{
    dsq_model *m;
    dsq_model_opts mo;
    dsq_model_opts_default(&mo);
    mo.threads = 2;
    mo.lazy = 1;
    assert_int_equal(dsq_model_open(&m, model, &mo, NULL), 0);
    return m;
}

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

/* ---- data file path through the driver, thread determinism ---------------------------- */

static void test_driver_text_and_threads(void **state)
{
    (void)state;
    dsq_synth_opts so;
    tiny_v3(&so);
    char *m = make_model(&so, "v3");
    char *cp = path("calib.txt");
    FILE *f = fopen(cp, "w");
    for (int i = 0; i < 60; i++) fprintf(f, "paragraph %d: the quick brown fox %d jumps\n\n", i, i * 7);
    fclose(f);
    dsq_calib_opts o;
    dsq_calib_opts_init(&o);
    o.calib = cp;
    o.scheme = "awq-w4a16";
    o.group_size = 64;
    o.data.n_samples = 4;
    o.data.seqlen = 48;
    o.awq_tokens = 32;
    o.awq_expert_tokens = 8;
    o.n_grid = 5;
    o.threads = 1;
    dsq_calib_result *a = calibrate(m, &o);
    o.threads = 3;
    dsq_calib_result *b = calibrate(m, &o);
    assert_same_result(a, b, m);
    dsq_calib_result_free(b);
    /* a small RAM limit forces the hidden states to spill files: same result */
    o.ram_limit = 1;
    b = calibrate(m, &o);
    assert_same_result(a, b, m);
    dsq_calib_result_free(b);
    dsq_calib_result_free(a);
    /* too little text: DSQ_ERR_DATA from the driver */
    o.data.n_samples = 1000;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_calib_run(m, &o, &a, NULL, NULL, NULL, &d), DSQ_ERR_DATA);
    assert_null(a);
    /* bad options */
    o.data.n_samples = 4;
    o.alpha = 2.0f;
    assert_int_equal(dsq_calib_run(m, &o, &a, NULL, NULL, NULL, NULL), DSQ_ERR_INVALID_ARG);
    o.alpha = 0.5f;
    o.scheme = "nope";
    assert_int_equal(dsq_calib_run(m, &o, &a, NULL, NULL, NULL, NULL), DSQ_ERR_INVALID_ARG);
    free(cp);
    free(m);
}

/* ---- stats file round trip and corruption ---------------------------------------------- */

static void flip_byte_in(const char *file, const char *tensor)
{
    dsq_ctr *c;
    assert_int_equal(dsq_ctr_open(&c, file, NULL), 0);
    const dsq_ctr_tensor_info *t = dsq_ctr_find(c, tensor);
    assert_non_null(t);
    uint64_t off = t->offset + t->raw_size / 2;
    dsq_ctr_close(c);
    FILE *f = fopen(file, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, (long)off, SEEK_SET), 0);
    int ch = fgetc(f);
    assert_int_equal(fseek(f, (long)off, SEEK_SET), 0);
    fputc(ch ^ 0x40, f);
    fclose(f);
}

static void test_stats_file(void **state)
{
    (void)state;
    dsq_synth_opts so;
    tiny_v3(&so);
    char *m = make_model(&so, "v3");
    int32_t *tok = rand_tokens(4 * 32, 500, 21);
    char *sp = path("stats.dsq");
    const char *schemes[] = { "awq-w4a16", "w8a8", "w4a8" };
    for (int k = 0; k < 3; k++) {
        dsq_calib_opts o;
        base_opts(&o, schemes[k], tok, 4, 32);
        o.group_size = k == 0 ? 64 : DSQ_GROUP_DEFAULT;
        o.save_stats = sp;
        o.overwrite = 1;
        dsq_calib_result *a = calibrate(m, &o);
        assert_true(dsq_path_exists(sp));
        /* no checkpoint leftovers */
        char *tmp = dsq_outfile_tmp_name(sp);
        char hb[4200];
        snprintf(hb, sizeof hb, "%s.hidden.h0", tmp);
        assert_false(dsq_path_exists(hb));
        free(tmp);
        /* reuse: same result without a forward */
        dsq_calib_opts r;
        base_opts(&r, schemes[k], NULL, 4, 32);
        r.tokens = NULL;
        r.group_size = o.group_size;
        r.load_stats = sp;
        dsq_calib_result *b = calibrate(m, &r);
        assert_same_result(a, b, m);
        /* the summary (output metadata) is the same text: outputs stay byte-identical */
        char *ja, *jb, fa[65], fb[65];
        assert_int_equal(dsq_calib_summary_json(a, 0, &ja), 0);
        assert_int_equal(dsq_calib_summary_json(b, 0, &jb), 0);
        assert_string_equal(ja, jb);
        assert_int_equal(dsq_calib_fingerprint(a, fa), 0);
        assert_int_equal(dsq_calib_fingerprint(b, fb), 0);
        assert_string_equal(fa, fb);
        free(ja);
        free(jb);
        dsq_calib_result_free(b);
        if (k == 1) {
            /* SmoothQuant from saved stats with another alpha: still works */
            r.alpha = 0.8f;
            b = calibrate(m, &r);
            check_finite(b, m);
            dsq_calib_result_free(b);
            /* the stats of an AWQ-less run cannot serve AWQ */
            r.alpha = 0.5f;
            r.scheme = "awq-w4a16";
            r.group_size = 64;
            dsq_diag d;
            dsq_diag_clear(&d);
            assert_int_equal(dsq_calib_run(m, &r, &b, NULL, NULL, NULL, &d), DSQ_ERR_STATE);
        }
        dsq_calib_result_free(a);
    }
    /* a well-formed file whose site has the wrong width is refused, not read past */
    {
        char *bad = path("bad.dsq");
        dsq_ctr *in;
        assert_int_equal(dsq_ctr_open(&in, sp, NULL), 0);
        dsq_stats_writer *w;
        assert_int_equal(dsq_stats_writer_open(&w, bad, "x", DSQ_STATS_OVERWRITE, NULL), 0);
        for (size_t i = 0; i < dsq_ctr_count(in); i++) {
            const dsq_ctr_tensor_info *t = dsq_ctr_get(in, i);
            uint8_t *raw = malloc(t->raw_size);
            assert_int_equal(dsq_ctr_read(in, t, raw, t->raw_size, NULL), 0);
            if (!strcmp(t->name, "L0/site/model.layers.0.self_attn.q_b_proj.weight")) {
                dsq_act_stats st, st2;
                assert_int_equal(dsq_stats_decode_site(raw, t->raw_size, "x", &st, NULL), 0);
                assert_int_equal(dsq_act_stats_init(&st2, "x", st.in - 8, 0, 0), 0);
                uint8_t *enc;
                size_t en;
                assert_int_equal(dsq_stats_encode_site(&st2, &enc, &en), 0);
                assert_int_equal(dsq_stats_writer_put(w, t->name, enc, en, 1, t->aux[0], NULL), 0);
                free(enc);
                dsq_act_stats_release(&st);
                dsq_act_stats_release(&st2);
            } else {
                assert_int_equal(dsq_stats_writer_put(w, t->name, raw, t->raw_size, 1, t->aux[0], NULL), 0);
            }
            free(raw);
        }
        assert_int_equal(dsq_stats_writer_finish(w, dsq_ctr_metadata(in, NULL), NULL), 0);
        dsq_ctr_close(in);
        dsq_calib_opts r;
        base_opts(&r, "w4a8", NULL, 4, 32);
        r.tokens = NULL;
        r.load_stats = bad;
        dsq_calib_result *b = NULL;
        dsq_diag d;
        dsq_diag_clear(&d);
        assert_int_equal(dsq_calib_run(m, &r, &b, NULL, NULL, NULL, &d), DSQ_ERR_FORMAT);
        assert_non_null(strstr(d.msg, "channels"));
        free(bad);
    }
    /* the file verifies as a container; a flipped payload byte is caught */
    dsq_ctr *c;
    assert_int_equal(dsq_ctr_open(&c, sp, NULL), 0);
    assert_int_equal(dsq_ctr_verify(c, 1, NULL, NULL), 0);
    dsq_ctr_close(c);
    flip_byte_in(sp, "L1/site/model.layers.1.mlp.gate.weight");
    dsq_calib_opts r;
    base_opts(&r, "w4a8", NULL, 4, 32);
    r.tokens = NULL;
    r.load_stats = sp;
    dsq_calib_result *b = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_calib_run(m, &r, &b, NULL, NULL, NULL, &d), DSQ_ERR_CHECKSUM);
    assert_null(b);
    /* truncation: the container refuses it */
    FILE *f = fopen(sp, "r+b");
    assert_int_equal(ftruncate(fileno(f), 1000), 0);
    fclose(f);
    assert_int_not_equal(dsq_calib_run(m, &r, &b, NULL, NULL, NULL, NULL), 0);
    /* not a stats file */
    r.load_stats = "/nonexistent.dsq";
    assert_int_not_equal(dsq_calib_run(m, &r, &b, NULL, NULL, NULL, NULL), 0);

    /* hostile payloads */
    dsq_act_stats s, out;
    assert_int_equal(dsq_act_stats_init(&s, "x", 3, 0, 0), 0);
    const float x[3] = { 1, -2, 3 };
    assert_int_equal(dsq_act_stats_add(&s, x, 1, NULL, NULL), 0);
    uint8_t *buf;
    size_t n;
    assert_int_equal(dsq_stats_encode_site(&s, &buf, &n), 0);
    assert_int_equal(dsq_stats_decode_site(buf, n, "x", &out, NULL), 0);
    assert_int_equal((int)out.count, 1);
    assert_true(out.vmin[1] == -2.0f);
    dsq_act_stats_release(&out);
    assert_int_equal(dsq_stats_decode_site(buf, n - 1, "x", &out, NULL), DSQ_ERR_FORMAT);
    float nan = NAN;
    memcpy(buf + n - 4, &nan, 4);
    assert_int_equal(dsq_stats_decode_site(buf, n, "x", &out, NULL), DSQ_ERR_FORMAT);
    buf[0] = 'X';
    assert_int_equal(dsq_stats_decode_site(buf, n, "x", &out, NULL), DSQ_ERR_FORMAT);
    free(buf);
    dsq_act_stats_release(&s);
    free(sp);
    free(tok);
    free(m);
}

/* ---- resume after a layer checkpoint == straight run ----------------------------------- */

static void test_resume(void **state)
{
    (void)state;
    dsq_synth_opts so;
    tiny_v3(&so);
    so.layers = 3;   /* dense, MoE, MoE */
    char *m = make_model(&so, "v3");
    int32_t *tok = rand_tokens(4 * 32, 500, 31);
    const char *schemes[] = { "awq-w4a16", "w8a8" };
    for (int k = 0; k < 2; k++) {
        char name[64];
        snprintf(name, sizeof name, "s%d.dsq", k);
        char *sp = path(name);
        dsq_calib_opts o;
        base_opts(&o, schemes[k], tok, 4, 32);
        o.group_size = k == 0 ? 64 : DSQ_GROUP_DEFAULT;
        o.rollback = k;   /* w8a8: the sensitivities are checkpointed too */
        dsq_calib_result *straight = calibrate(m, &o);
        assert_int_equal(dsq_calib_rollback_count(straight) > 0, k);

        o.save_stats = sp;
        for (int stop = 0; stop < 2; stop++) {
            o.stop_after_layer = stop;
            o.resume = 0;
            o.overwrite = 1;
            unlink(sp);
            dsq_calib_result *r = NULL;
            assert_int_equal(dsq_calib_run(m, &o, &r, NULL, NULL, NULL, NULL), DSQ_ERR_INTERRUPTED);
            assert_null(r);
            assert_false(dsq_path_exists(sp));
            /* a resume with other options is refused */
            o.stop_after_layer = -1;
            o.resume = 1;
            o.data.seed = 77;
            dsq_diag d;
            dsq_diag_clear(&d);
            assert_int_equal(dsq_calib_run(m, &o, &r, NULL, NULL, NULL, &d), DSQ_ERR_STATE);
            o.data.seed = 0;
            /* the refused resume did not destroy the checkpoint */
            dsq_calib_result *res = calibrate(m, &o);
            assert_same_result(straight, res, m);
            assert_true(dsq_path_exists(sp));
            dsq_calib_result_free(res);
        }
        /* cancellation mid-layer keeps the checkpoint too */
        volatile int cancel = 1;
        o.resume = 0;
        dsq_calib_result *r = NULL;
        assert_int_equal(dsq_calib_run(m, &o, &r, NULL, NULL, &cancel, NULL), DSQ_ERR_INTERRUPTED);
        o.resume = 1;
        r = calibrate(m, &o);
        assert_same_result(straight, r, m);
        dsq_calib_result_free(r);
        dsq_calib_result_free(straight);
        free(sp);
    }
    free(tok);
    free(m);
}

/* ---- GPTQ through the driver and the converter -------------------------------------------- */

static int recipe_target_t(void *ctx, const char *name, int64_t rows, int64_t cols, const dsq_scheme **sc, int32_t *gs)
{
    dsq_plan_entry e;
    int64_t shape[2] = { rows, cols };
    DSQ_TRY(dsq_recipe_decide(ctx, name, DSQ_DTYPE_BF16, 2, shape, 0, &e, NULL));
    *sc = e.kept ? NULL : e.scheme;
    *gs = e.qshape.group_size;
    return DSQ_OK;
}

/* Convert with the result; every GPTQ tensor of the .dsq equals its blob. */
static void convert_has_blobs(const char *m, const dsq_calib_result *r, dsq_recipe *rc, const char *out, uint64_t stream)
{
    dsq_convert_opts co;
    dsq_convert_opts_init(&co);
    co.input = m;
    co.output = out;
    co.recipe = rc;
    co.threads = 2;
    co.overwrite = 1;
    co.no_journal = 1;
    co.calib = r;
    co.stream_bytes = stream;
    co.piece_bytes = stream;
    dsq_convert *c = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    int st = dsq_convert_prepare(&c, &co, &d);
    dsq_convert_summary sum;
    if (st == DSQ_OK) st = dsq_convert_run(c, &sum, &d);
    if (st) fprintf(stderr, "convert: %s\n", d.msg);
    assert_int_equal(st, 0);
    dsq_convert_free(c);
    dsq_ctr *rd;
    assert_int_equal(dsq_ctr_open(&rd, out, NULL), 0);
    int seen = 0;
    for (size_t i = 0; dsq_ctr_get(rd, i); i++) {
        const dsq_ctr_tensor_info *t = dsq_ctr_get(rd, i);
        const dsq_calib_tensor *e = dsq_calib_lookup(r, t->name);
        if (!e || !e->gptq_blob) continue;
        assert_true(t->raw_size == e->gptq_blob_size);
        uint8_t *buf = malloc(t->raw_size);
        assert_int_equal(dsq_ctr_read(rd, t, buf, t->raw_size, NULL), 0);
        assert_memory_equal(buf, e->gptq_blob, e->gptq_blob_size);
        free(buf);
        seen++;
    }
    assert_true(seen > 0);
    dsq_ctr_close(rd);
}

/* Over the model's tensors with a calibration entry: how many were
 * calibrated and how many carry a GPTQ blob; only calibrated ones may. */
static void count_blobs(const char *m, const dsq_calib_result *r, size_t *calibrated, size_t *withblob)
{
    dsq_st_model *st;
    assert_int_equal(dsq_st_open(&st, m, NULL), 0);
    *calibrated = *withblob = 0;
    for (size_t i = 0; i < dsq_st_count(st); i++) {
        const dsq_calib_tensor *e = dsq_calib_lookup(r, dsq_st_get(st, i)->name);
        if (!e || e->cols == 0) continue;
        *calibrated += e->status == DSQ_CALIB_CALIBRATED;
        *withblob += e->gptq_blob != NULL;
        if (e->status != DSQ_CALIB_CALIBRATED) assert_null(e->gptq_blob);
    }
    dsq_st_close(st);
}

/* More entries than the result's first allocation (256), made while GPTQ
 * solves are queued (--no-smooth: no scaling group makes the experts'
 * entries beforehand): the queued solves must still land in the final
 * entries (they held pointers into the moved array: ASan use-after-free,
 * and blobs lost in a plain build). */
static void test_gptq_many_entries(void **state)
{
    (void)state;
    dsq_synth_opts so;
    tiny_v3(&so);
    so.layers = 3;
    so.experts = 64;
    dsq_synth_fit_routing(&so);
    char *m = make_model(&so, "v3many");
    int32_t *tok = rand_tokens(8 * 32, 500, 43);
    dsq_calib_opts o;
    base_opts(&o, "w4a8", tok, 8, 32);
    o.gptq = 1;
    o.smooth = 0;
    o.min_expert_tokens = 1;
    o.moe_calib_all = 1;
    o.threads = 2;
    dsq_calib_result *a = calibrate(m, &o);
    dsq_calib_totals tt;
    dsq_calib_get_totals(a, &tt);
    size_t withblob, calibrated;
    count_blobs(m, a, &calibrated, &withblob);
    assert_true(calibrated > 256);
    assert_int_equal(withblob, calibrated);
    assert_int_equal(withblob, tt.gptq_tensors);
    dsq_calib_result_free(a);
    free(tok);
    free(m);
}

static void test_gptq_driver(void **state)
{
    (void)state;
    dsq_synth_opts so;
    tiny_v3(&so);
    so.layers = 3;   /* dense, MoE, MoE */
    char *m = make_model(&so, "v3");
    int32_t *tok = rand_tokens(4 * 32, 500, 41);
    char *sp = path("gptq.stats"), *out = path("gptq.dsq");
    const char *schemes[] = { "w4a8", "awq-w4a16", "w8a8-dynamic", "w8a8" };
    for (int k = 0; k < 4; k++) {
        dsq_recipe rc;
        assert_int_equal(dsq_recipe_init_ex(&rc, schemes[k], 1, NULL), 0);
        rc.group_size = k == 1 ? 64 : DSQ_GROUP_DEFAULT;
        dsq_calib_opts o;
        base_opts(&o, schemes[k], tok, 4, 32);
        o.group_size = rc.group_size;
        o.target = recipe_target_t;
        o.target_ctx = &rc;
        o.target_id = schemes[k];
        o.gptq = 1;
        o.min_expert_tokens = 4;
        o.threads = 1;
        dsq_calib_result *a = calibrate(m, &o);
        dsq_calib_totals tt;
        dsq_calib_get_totals(a, &tt);
        assert_true(tt.gptq_tensors > 0);
        assert_true(tt.gptq_hess_peak > 0);
        size_t withblob, calibrated;
        count_blobs(m, a, &calibrated, &withblob);
        assert_int_equal(withblob, tt.gptq_tensors);
        assert_true(withblob > 0 && withblob <= calibrated);
        /* thread count independent: the solves run on 2 and 4 lanes (one
         * expert's or one input site's Hessian per task, calib.c gptq_phase) */
        assert_int_equal(tt.gptq_lanes, 1);
        dsq_calib_result *b;
        for (int nt = 2; nt <= 4; nt += 2) {
            o.threads = nt;
            b = calibrate(m, &o);
            dsq_calib_totals tb;
            dsq_calib_get_totals(b, &tb);
            assert_int_equal(tb.gptq_lanes, nt);
            assert_same_result(a, b, m);
            dsq_calib_result_free(b);
        }
        /* the converter writes exactly GPTQ's blobs, whole and streamed */
        convert_has_blobs(m, a, &rc, out, 0);
        convert_has_blobs(m, a, &rc, out, 4096);
        /* checkpoint: interrupted after layer 0 and resumed == straight */
        o.save_stats = sp;
        o.overwrite = 1;
        o.stop_after_layer = 0;
        b = NULL;
        assert_int_equal(dsq_calib_run(m, &o, &b, NULL, NULL, NULL, NULL), DSQ_ERR_INTERRUPTED);
        o.stop_after_layer = -1;
        o.resume = 1;
        b = calibrate(m, &o);
        assert_same_result(a, b, m);
        dsq_calib_result_free(b);
        /* --stats reuses the blobs without a forward */
        dsq_calib_opts r;
        base_opts(&r, schemes[k], NULL, 4, 32);
        r.group_size = o.group_size;
        r.target = o.target;
        r.target_ctx = o.target_ctx;
        r.target_id = o.target_id;
        r.min_expert_tokens = o.min_expert_tokens;
        r.gptq = 1;
        r.load_stats = sp;
        b = calibrate(m, &r);
        assert_same_result(a, b, m);
        dsq_calib_result_free(b);
        dsq_calib_result_free(a);
        if (k == 0) {
            /* every token through every expert: each expert is GPTQ'd */
            o.moe_calib_all = 1;
            o.save_stats = NULL;
            o.resume = 0;
            b = calibrate(m, &o);
            dsq_calib_get_totals(b, &tt);
            assert_int_equal(tt.fallback_experts, 0);
            assert_true(tt.gptq_tensors >= withblob);
            dsq_calib_result_free(b);
            o.moe_calib_all = 0;
            o.save_stats = sp;
            /* statistics made without GPTQ cannot give GPTQ results */
            o.gptq = 0;
            o.resume = 0;
            dsq_calib_result_free(calibrate(m, &o));
            dsq_diag d;
            dsq_diag_clear(&d);
            b = NULL;
            assert_int_equal(dsq_calib_run(m, &r, &b, NULL, NULL, NULL, &d), DSQ_ERR_STATE);
            assert_null(b);
        }
        dsq_recipe_release(&rc);
    }
    unlink(sp);
    free(sp);
    free(out);
    free(tok);
    free(m);
}

/* ---- progress callback --------------------------------------------------------------- */

typedef struct prog { int calls, forward, last_layer; } prog;

static void on_progress(void *ctx, const dsq_calib_progress *p)
{
    prog *g = ctx;
    g->calls++;
    if (strcmp(p->phase, "forward") == 0) {
        g->forward++;
        assert_true(p->layer >= g->last_layer);
        g->last_layer = p->layer;
        assert_true(p->sample >= 0 && p->sample < p->n_samples);
    }
}

static void test_progress(void **state)
{
    (void)state;
    dsq_synth_opts so;
    tiny_v3(&so);
    char *m = make_model(&so, "v3");
    int32_t *tok = rand_tokens(3 * 16, 500, 4);
    dsq_calib_opts o;
    base_opts(&o, "w8a8", tok, 3, 16);
    prog g = { 0, 0, 0 };
    dsq_calib_result *r = NULL;
    assert_int_equal(dsq_calib_run(m, &o, &r, on_progress, &g, NULL, NULL), 0);
    assert_int_equal(g.forward, 2 * 3);
    dsq_calib_result_free(r);
    free(tok);
    free(m);
}


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

/* A float32 copy of model with activation outlier channels injected: for each
 * layer, channel c of input_layernorm and post_attention_layernorm is scaled
 * by k (a power of two: exact) and the same input column of every consumer
 * (q_a/kv_a or q/k/v; router, experts' and shared experts' gate/up or the
 * dense gate/up) by 1/k. The function is unchanged. */
static void inject_outliers(const char *model, const char *out, float k)
{
    dsq_st_model *st;
    assert_int_equal(dsq_st_open(&st, model, NULL), 0);
    dsq_st_writer *w = dsq_st_writer_create();
    float **bufs = calloc(dsq_st_count(st), sizeof *bufs);
    for (size_t i = 0; i < dsq_st_count(st); i++) {
        const dsq_st_tensor *t = dsq_st_get(st, i);
        int64_t rows = dsq_st_rows(t), cols = dsq_st_cols(t);
        bufs[i] = malloc((size_t)t->numel * sizeof(float));
        assert_int_equal(dsq_st_read_rows_f32(st, t, 0, rows, bufs[i], NULL), 0);
        int layer = -1;
        if (sscanf(t->name, "model.layers.%d.", &layer) == 1) {
            int c_attn = (layer * 37 + 11) % (int)(t->ndim == 2 ? cols : (int64_t)t->numel);
            int c_ffn = (layer * 53 + 101) % (int)(t->ndim == 2 ? cols : (int64_t)t->numel);
            const char *nm = strchr(t->name + strlen("model.layers."), '.') + 1;
            int attn_in = !strcmp(nm, "self_attn.q_a_proj.weight") || !strcmp(nm, "self_attn.kv_a_proj_with_mqa.weight") ||
                          !strcmp(nm, "self_attn.q_proj.weight") || !strcmp(nm, "self_attn.k_proj.weight") ||
                          !strcmp(nm, "self_attn.v_proj.weight");
            int ffn_in = !strcmp(nm, "mlp.gate.weight") || (strstr(nm, "gate_proj.weight") || strstr(nm, "up_proj.weight"));
            if (!strcmp(nm, "input_layernorm.weight")) bufs[i][c_attn] *= k;
            if (!strcmp(nm, "post_attention_layernorm.weight")) bufs[i][c_ffn] *= k;
            if (attn_in)
                for (int64_t r = 0; r < rows; r++) bufs[i][r * cols + c_attn] /= k;
            if (ffn_in)
                for (int64_t r = 0; r < rows; r++) bufs[i][r * cols + c_ffn] /= k;
        }
        assert_int_equal(dsq_st_writer_add(w, t->name, DSQ_DTYPE_F32, t->ndim, t->shape, bufs[i],
                                           t->numel * sizeof(float)), 0);
    }
    assert_int_equal(mkdir(out, 0755) == 0 || access(out, F_OK) == 0, 1);
    char *mp = dsq_path_join(out, "model.safetensors");
    assert_int_equal(dsq_st_writer_write(w, mp, 0, DSQ_OUT_OVERWRITE, NULL), 0);
    free(mp);
    dsq_st_writer_free(w);
    for (size_t i = 0; i < dsq_st_count(st); i++) free(bufs[i]);
    free(bufs);
    dsq_st_close(st);
    const char *side[] = { "config.json", "tokenizer.json", "tokenizer_config.json" };
    for (size_t i = 0; i < 3; i++) {
        char *a = dsq_path_join(model, side[i]), *b = dsq_path_join(out, side[i]), *txt;
        size_t len;
        assert_int_equal(dsq_read_file(a, 1 << 24, &txt, &len, NULL), 0);
        dsq_test_write(b, txt, len);
        free(txt);
        free(a);
        free(b);
    }
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

/* 1 when the sample MODEL and the data files (a NULL-terminated list) are
 * there; else one skip line and 0 (the sample tests need them all). */
static int sample_present(const char *model, ...)
{
    char *cfg = dsq_path_join(model, "config.json");
    int have = cfg && dsq_path_exists(cfg);
    free(cfg);
    va_list ap;
    va_start(ap, model);
    for (const char *f; have && (f = va_arg(ap, const char *)) != NULL;) have = dsq_path_exists(f);
    va_end(ap);
    if (!have) fprintf(stderr, "skip: %s or samples/data absent (samples/make_samples.sh)\n", model);
    return have;
}

static void test_sample_ordering(void **state)
{
    (void)state;
    const char *model = getenv("DSQ_TEST_SAMPLE_MODEL") ? getenv("DSQ_TEST_SAMPLE_MODEL") : "samples/tiny-dsv3";
#ifdef __SANITIZE_ADDRESS__
    /* 12 calibrate + quantize + KLD runs take minutes under ASan and add no
     * coverage the synthetic tests lack; DSQ_TEST_SAMPLE_MODEL forces them */
    if (!getenv("DSQ_TEST_SAMPLE_MODEL")) {
        fprintf(stderr, "skip: sample measurements under AddressSanitizer\n");
        return;
    }
#endif
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
    const char *model = getenv("DSQ_TEST_SAMPLE_MODEL") ? getenv("DSQ_TEST_SAMPLE_MODEL") : "samples/tiny-dsv3";
#ifdef __SANITIZE_ADDRESS__
    if (!getenv("DSQ_TEST_SAMPLE_MODEL")) {
        fprintf(stderr, "skip: sample measurements under AddressSanitizer\n");
        return;
    }
#endif
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

/* --rollback (calib/sens.h): the most sensitive linears of w8a8-dynamic on
 * the sample stay float. Checked: the choice is the top of the measured
 * sensitivities, every rolled-back entry lost what only a quantizer uses,
 * --stats gives the same choice (and refuses statistics without
 * sensitivities), and keeping the one most sensitive linear lowers the
 * held-out KL divergence at most positions (the sample's dense down_proj:
 * README, "w8a8-dynamic ... dense down_proj BF16"). */
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

/* Hidden states of n_samples windows of T tokens of text, embedded. */
static dsq_hstore *text_states(dsq_model *m, dsq_tokenizer *tk, const char *file, int n_samples, int T)
{
    char *text;
    size_t len;
    assert_int_equal(dsq_read_file(file, 1 << 26, &text, &len, NULL), 0);
    int32_t *ids;
    size_t nids;
    assert_int_equal(dsq_tokenizer_encode(tk, text, len, 1, &ids, &nids, NULL), 0);
    assert_true(nids >= (size_t)n_samples * (size_t)T);
    const int64_t H = dsq_model_get_config(m)->hidden_size;
    dsq_hstore *hs;
    assert_int_equal(dsq_hstore_open(&hs, n_samples, T, H, 1u << 30, NULL, 0, NULL), 0);
    float *h = malloc((size_t)T * (size_t)H * sizeof *h);
    for (int i = 0; i < n_samples; i++) {
        assert_int_equal(dsq_model_embed(m, ids + (size_t)i * (size_t)T, T, h, NULL), 0);
        assert_int_equal(dsq_hstore_put(hs, i, h, NULL), 0);
    }
    assert_int_equal(dsq_hstore_swap(hs, NULL), 0);
    free(h);
    free(ids);
    free(text);
    return hs;
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
    /* measured -36.5% and -26.1% (2026-11-25): a 10% margin cannot flip */
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
        cmocka_unit_test(test_stats_known_input),
        cmocka_unit_test(test_site_names),
        cmocka_unit_test(test_scale_safety),
        cmocka_unit_test_setup_teardown(test_data, setup, teardown),
        cmocka_unit_test_setup_teardown(test_search_never_worse, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fold_preserves_function, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fold_dsa, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expert_without_tokens, setup, teardown),
        cmocka_unit_test_setup_teardown(test_driver_text_and_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gptq_driver, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gptq_many_entries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_progress, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sample_ordering, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sample_dynamic_smoothing, setup, teardown),
        cmocka_unit_test(test_sens_units),
        cmocka_unit_test_setup_teardown(test_sample_rollback, setup, teardown),
        cmocka_unit_test(test_sample_awq_generalises),
        cmocka_unit_test(test_sample_dynamic_down_smoothing),
        cmocka_unit_test(test_attn_block_matches_engine),
        cmocka_unit_test(test_sample_clip_cov),
    };
    /* DSQ_TEST_FILTER=test_sample_* runs only the matching tests (the sample
     * measurements take minutes on 2 cores) */
    if (getenv("DSQ_TEST_FILTER")) cmocka_set_test_filter(getenv("DSQ_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
