/* calib_fixture.c - helpers shared by the calibration tests
 * (test_calib_unit.c, test_calib_driver.c, test_calib_quality.c): a scratch
 * directory per test, synthetic models with a byte-level tokenizer, the
 * driver with test options, result comparison and folding, the trained
 * sample's presence and hidden states. See calib_fixture.h. */
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

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <ctype.h>

char *g_dir;

int setup(void **state)
{
    (void)state;
    g_dir = dsq_test_tmpdir();
    return 0;
}

int teardown(void **state)
{
    (void)state;
    dsq_test_rmtree(g_dir);
    free(g_dir);
    return 0;
}

char *path(const char *name) { return dsq_path_join(g_dir, name); }

/* ---- helpers -------------------------------------------------------------- */

/* A byte-level tokenizer.json with no merges: one token per byte (id = byte). */
void write_byte_tokenizer(const char *dir)
{
    size_t cap = 1 << 16;
    char *j = malloc(cap), *o = j;
    o += sprintf(o, "{\"version\":\"1.0\",\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\","
                    "\"add_prefix_space\":false,\"use_regex\":false},\"added_tokens\":[],\"post_processor\":null,"
                    "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{");
    for (unsigned b = 0; b < 256; b++) {
        unsigned cp = dsq_test_b2u(b);
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

void tiny_v3(dsq_synth_opts *o)
{
    dsq_synth_defaults_tiny(o);
    o->mtp = 0;
    o->dtype = DSQ_DTYPE_F32;
    o->seed = 7;
}

void tiny_llama(dsq_synth_opts *o, int kv_heads)
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

char *make_model(const dsq_synth_opts *so, const char *name)
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

int32_t *rand_tokens(size_t n, int vocab, uint64_t seed)
{
    int32_t *t = malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (int32_t)((seed >> 33) % (uint64_t)vocab);
    }
    return t;
}

void base_opts(dsq_calib_opts *o, const char *scheme, const int32_t *tok, int n, int L)
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

dsq_calib_result *calibrate(const char *model, const dsq_calib_opts *o)
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

int arr_eq(const float *a, const float *b, int64_t n)
{
    if (!a || !b) return a == b;
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* Two results hold identical entries for every tensor of a. */
void assert_same_result(const dsq_calib_result *a, const dsq_calib_result *b, const char *model)
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
int check_finite(const dsq_calib_result *r, const char *model)
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

/* A float32 copy of model at out (config + tokenizer copied), each tensor
 * passed through edit first (NULL: copied unchanged). */
void edit_copy(const char *model, const char *out, tensor_edit edit, void *ctx)
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
        if (edit) edit(ctx, t, bufs[i], rows, cols);
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

static void fold_edit(void *ctx, const dsq_st_tensor *t, float *w, int64_t rows, int64_t cols)
{
    const dsq_calib_tensor *e = dsq_calib_lookup(ctx, t->name);
    if (e) assert_int_equal(dsq_calib_apply_rows(e, 0, rows, cols, w), 0);
}

/* Fold the result into a float32 copy of model at out (config + tokenizer copied). */
void fold_copy(const char *model, const dsq_calib_result *r, const char *out)
{
    edit_copy(model, out, fold_edit, (void *)r);
}

int g_dsa_mode = DSQ_DSA_FP8;

float *logits_of(const char *model, const int32_t *tok, int n, int64_t *vocab)
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

int target(void *ctx, const char *name, int64_t r, int64_t c, const dsq_scheme **o, int32_t *gs)
{
    (void)r;
    (void)c;
    size_t n = strlen(name);
    *o = n > 16 && strcmp(name + n - 16, ".mlp.gate.weight") == 0 ? NULL : ctx;
    *gs = ((const dsq_scheme *)ctx)->id == DSQ_SCHEME_AWQ_W4A16 ? 64 : DSQ_GROUP_DEFAULT;
    return 0;
}

/* The model with layers loaded on demand (as calibration opens it), 2 threads. */
dsq_model *open_lazy(const char *model)
{
    dsq_model *m;
    dsq_model_opts mo;
    dsq_model_opts_default(&mo);
    mo.threads = 2;
    mo.lazy = 1;
    assert_int_equal(dsq_model_open(&m, model, &mo, NULL), 0);
    return m;
}

/* 1 when the sample MODEL and the data files (a NULL-terminated list) are
 * there; else one skip line and 0 (the sample tests need them all). */
int sample_present(const char *model, ...)
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

/* Hidden states of n_samples windows of T tokens of text, embedded. */
dsq_hstore *text_states(dsq_model *m, dsq_tokenizer *tk, const char *file, int n_samples, int T)
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
