/* test_public_header.c - the public API (include/dsq/dsq.h) on its own: it
 * compiles without the library's internal headers, the version macros
 * agree with the library, and the facade's contracts hold on the bundled
 * sample (open, info, forward, rewind, encode / decode, perplexity, the
 * errors it promises). tests/cli/install.sh checks the installed copy and
 * that libdsq.so exports nothing else. */
#include "dsq/dsq.h"
#include "dsq_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The internal headers stay out: a type or macro of theirs here would mean
 * the public header reaches them. */
#if defined(DSQ_ERROR_H) || defined(DSQ_MODEL_H) || defined(DSQ_TOKENIZER_H) || defined(DSQ_SCHEME_H)
#error "include/dsq/dsq.h pulls in internal headers"
#endif

#define SAMPLE "samples/tiny-dsv3"

static void test_version(void **state)
{
    (void)state;
    assert_int_equal(dsq_version_number(), DSQ_VERSION_NUMBER);
    assert_string_equal(dsq_version_string(), DSQ_VERSION_STRING);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", DSQ_VERSION_MAJOR, DSQ_VERSION_MINOR, DSQ_VERSION_PATCH);
    assert_string_equal(dsq_version_string(), want);
}

static void test_status_and_diag(void **state)
{
    (void)state;
    assert_string_equal(dsq_strerror(DSQ_OK), "success");
    assert_string_equal(dsq_status_name(DSQ_ERR_FORMAT), "DSQ_ERR_FORMAT");
    for (int s = DSQ_STATUS_MIN; s <= 0; s++) assert_non_null(dsq_strerror(s));
    dsq_diag d;
    memset(&d, 0x5a, sizeof d);
    dsq_diag_clear(&d);
    assert_int_equal(d.status, DSQ_OK);
    assert_true(d.offset < 0);
    assert_string_equal(d.path, "");
    char line[256];
    dsq_diag_format(&d, line, sizeof line);
    assert_true(strlen(line) < sizeof line);
}

static void test_schemes(void **state)
{
    (void)state;
    int n = 0, w4a8 = 0, awq = 0;
    for (; dsq_scheme_name(n); n++) {
        assert_non_null(dsq_scheme_description(n));
        w4a8 += !strcmp(dsq_scheme_name(n), "w4a8");
        awq += !strcmp(dsq_scheme_name(n), "awq-w4a16");
    }
    assert_true(n >= 6);
    assert_int_equal(w4a8, 1);
    assert_int_equal(awq, 1);
    assert_null(dsq_scheme_name(-1));
    assert_null(dsq_scheme_description(n));
}

static void test_open_errors(void **state)
{
    (void)state;
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_lm *lm = (dsq_lm *)&d; /* must come back NULL */
    assert_int_equal(dsq_lm_open(&lm, "no/such/model", NULL, &d), DSQ_ERR_NOT_FOUND);
    assert_null(lm);
    assert_string_equal(d.path, "no/such/model");
    dsq_lm_free(NULL);
    assert_int_equal(dsq_lm_position(NULL), -1);
    dsq_lm_info info;
    assert_int_equal(dsq_lm_get_info(NULL, &info), DSQ_ERR_INVALID_ARG);
}

static dsq_lm *open_sample(int64_t context)
{
    dsq_lm_options o;
    dsq_lm_options_default(&o);
    o.threads = 2;
    o.context = context;
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_lm *lm = NULL;
    int rc = dsq_lm_open(&lm, SAMPLE, &o, &d);
    if (rc != DSQ_OK) {
        char line[1024];
        dsq_diag_format(&d, line, sizeof line);
        fprintf(stderr, "dsq_lm_open: %s\n", line);
    }
    assert_int_equal(rc, DSQ_OK);
    return lm;
}

static int have_sample(void)
{
    FILE *f = fopen(SAMPLE "/config.json", "rb");
    if (!f) fprintf(stderr, "skip: " SAMPLE " absent\n");
    else fclose(f);
    return f != NULL;
}

static void test_model(void **state)
{
    (void)state;
    if (!have_sample()) { skip(); return; }
    dsq_lm *lm = open_sample(64);
    dsq_lm_info info;
    assert_int_equal(dsq_lm_get_info(lm, &info), DSQ_OK);
    assert_string_equal(info.architecture, "DeepseekV3ForCausalLM");
    assert_true(info.vocab_size > 0 && info.hidden_size > 0 && info.num_layers > 0);
    assert_int_equal(info.context, 64);
    assert_int_equal(info.has_tokenizer, 1);
    assert_true(info.weight_bytes > 0);
    char desc[16];
    int len = dsq_lm_describe(lm, desc, sizeof desc);
    assert_true(len > (int)sizeof desc - 1 && strlen(desc) == sizeof desc - 1);

    /* tokenizer: round trip, BOS by flag */
    dsq_diag d;
    dsq_diag_clear(&d);
    const char *text = "The little cat sat on the mat.";
    int32_t *ids = NULL, *ids_bos = NULL;
    size_t n = 0, n_bos = 0;
    assert_int_equal(dsq_lm_encode(lm, text, strlen(text), 0, &ids, &n, &d), DSQ_OK);
    assert_true(n > 3);
    assert_int_equal(dsq_lm_encode(lm, text, strlen(text), DSQ_LM_ADD_SPECIAL, &ids_bos, &n_bos, &d), DSQ_OK);
    if (dsq_lm_bos(lm) >= 0 && n_bos == n + 1) assert_int_equal(ids_bos[0], dsq_lm_bos(lm));
    char *back = NULL;
    size_t back_len = 0;
    assert_int_equal(dsq_lm_decode(lm, ids, n, 0, &back, &back_len, &d), DSQ_OK);
    assert_string_equal(back, text);
    assert_int_equal(back_len, strlen(text));
    dsq_free(back);
    int32_t bad = (int32_t)info.vocab_size + 1000;
    assert_int_equal(dsq_lm_decode(lm, &bad, 1, 0, &back, NULL, &d), DSQ_ERR_INVALID_ARG);

    /* forward: all rows at once == one token at a time (prefill vs decode
     * paths: float rounding apart), and rewind replays exactly */
    size_t V = (size_t)info.vocab_size;
    float *all = malloc(sizeof(float) * V * n), *one = malloc(sizeof(float) * V), *again = malloc(sizeof(float) * V);
    assert_non_null(all);
    assert_non_null(one);
    assert_non_null(again);
    assert_int_equal(dsq_lm_forward(lm, ids, n, all, DSQ_LM_ALL_LOGITS, &d), DSQ_OK);
    assert_int_equal(dsq_lm_position(lm), (int64_t)n);
    assert_int_equal(dsq_lm_rewind(lm, 0), DSQ_OK);
    for (size_t t = 0; t < n; t++) {
        assert_int_equal(dsq_lm_forward(lm, &ids[t], 1, one, 0, &d), DSQ_OK);
        double maxd = 0, maxa = 0;
        for (size_t v = 0; v < V; v++) {
            double e = fabs((double)one[v] - all[t * V + v]);
            if (e > maxd) maxd = e;
            if (fabs(one[v]) > maxa) maxa = fabs(one[v]);
        }
        assert_true(maxa > 0 && maxd <= 1e-3 * (1 + maxa));
    }
    assert_int_equal(dsq_lm_rewind(lm, (int64_t)n - 1), DSQ_OK);
    assert_int_equal(dsq_lm_forward(lm, &ids[n - 1], 1, again, 0, &d), DSQ_OK);
    assert_memory_equal(again, one, sizeof(float) * V);
    assert_int_equal(dsq_lm_rewind(lm, (int64_t)n + 1), DSQ_ERR_INVALID_ARG);

    /* the errors the header promises, the position unchanged */
    int64_t pos = dsq_lm_position(lm);
    int32_t *many = calloc(64, sizeof *many);
    assert_non_null(many);
    assert_int_equal(dsq_lm_forward(lm, many, 64, NULL, 0, &d), DSQ_ERR_INVALID_ARG);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_lm_forward(lm, &bad, 1, NULL, 0, &d), DSQ_ERR_INVALID_ARG);
    assert_int_equal(dsq_lm_forward(lm, ids, 0, NULL, 0, NULL), DSQ_ERR_INVALID_ARG);
    assert_int_equal(dsq_lm_position(lm), pos);
    dsq_perplexity p;
    assert_int_equal(dsq_lm_perplexity(lm, text, strlen(text), 128, 0, &p, NULL), DSQ_ERR_INVALID_ARG);
    free(many);
    free(all);
    free(one);
    free(again);
    dsq_free(ids);
    dsq_free(ids_bos);
    dsq_lm_free(lm);
}

/* Perplexity over a text long enough for two windows: finite, above 1,
 * the cache left empty; the same figure twice (windows start from an
 * empty cache whatever ran before). tests/cli/install.sh compares it with
 * ds-eval ppl's. */
static void test_perplexity(void **state)
{
    (void)state;
    if (!have_sample()) { skip(); return; }
    FILE *f = fopen("samples/data/heldout.txt", "rb");
    if (!f) { fprintf(stderr, "skip: samples/data/heldout.txt absent\n"); skip(); return; }
    char *text = malloc(1 << 16);
    assert_non_null(text);
    size_t len = fread(text, 1, 1 << 16, f);
    fclose(f);
    dsq_lm *lm = open_sample(0);
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_perplexity a, b;
    assert_int_equal(dsq_lm_perplexity(lm, text, len, 128, 300, &a, &d), DSQ_OK);
    assert_int_equal(a.windows, 2);
    assert_int_equal(a.tokens, 2 * (128 - 1 - 64));
    assert_true(isfinite(a.ppl) && a.ppl > 1 && a.ppl_error > 0);
    assert_int_equal(dsq_lm_position(lm), 0);
    int32_t tok = 1;
    assert_int_equal(dsq_lm_forward(lm, &tok, 1, NULL, 0, &d), DSQ_OK);
    assert_int_equal(dsq_lm_perplexity(lm, text, len, 128, 300, &b, &d), DSQ_OK);
    assert_true(a.ppl == b.ppl);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_lm_perplexity(lm, text, 40, 128, 0, &b, &d), DSQ_ERR_DATA);
    dsq_lm_free(lm);
    free(text);
}

/* A checkpoint with no tokenizer beside it opens, says so, runs, and the
 * tokenizer functions fail as promised; a tokenizer named in the options
 * is used. */
static void test_no_tokenizer(void **state)
{
    (void)state;
    if (!have_sample()) { skip(); return; }
    char *dir = dsq_test_tmpdir(), src[4096], dst[4096], cwd[2048];
    assert_non_null(getcwd(cwd, sizeof cwd));
    const char *files[] = { "config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                            "model-00002-of-00002.safetensors" };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(src, sizeof src, "%s/" SAMPLE "/%s", cwd, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        assert_int_equal(symlink(src, dst), 0);
    }
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_lm *lm = NULL;
    dsq_lm_options o;
    dsq_lm_options_default(&o);
    o.context = 16;
    assert_int_equal(dsq_lm_open(&lm, dir, &o, &d), DSQ_OK);
    dsq_lm_info info;
    assert_int_equal(dsq_lm_get_info(lm, &info), DSQ_OK);
    assert_int_equal(info.has_tokenizer, 0);
    assert_int_equal(dsq_lm_bos(lm), -1);
    int32_t *ids = NULL, tok = 1;
    size_t n = 0;
    assert_int_equal(dsq_lm_encode(lm, "a", 1, 0, &ids, &n, &d), DSQ_ERR_NOT_FOUND);
    assert_int_equal(dsq_lm_forward(lm, &tok, 1, NULL, 0, NULL), DSQ_OK);
    dsq_lm_free(lm);
    o.tokenizer = SAMPLE;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_lm_open(&lm, dir, &o, &d), DSQ_OK);
    assert_int_equal(dsq_lm_get_info(lm, &info), DSQ_OK);
    assert_int_equal(info.has_tokenizer, 1);
    dsq_lm_free(lm);
    o.tokenizer = "no/such/tokenizer.json";
    assert_int_equal(dsq_lm_open(&lm, dir, &o, &d), DSQ_ERR_NOT_FOUND);
    assert_null(lm);
    dsq_test_rmtree(dir);
    free(dir);
}

/* A llama2.c checkpoint opens with its tokenizer found beside it, as
 * ds-eval and ds-serve open it (when ../shared has stories260K). */
static void test_llama2c(void **state)
{
    (void)state;
    char *bin = dsq_test_shared("stories260K/stories260K.bin");
    if (!bin) { fprintf(stderr, "skip: ../shared/data/stories260K/stories260K.bin absent\n"); skip(); return; }
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_lm *lm = NULL;
    assert_int_equal(dsq_lm_open(&lm, bin, NULL, &d), DSQ_OK);
    dsq_lm_info info;
    assert_int_equal(dsq_lm_get_info(lm, &info), DSQ_OK);
    assert_int_equal(info.has_tokenizer, 1);
    assert_int_equal(info.vocab_size, 512);
    int32_t *ids = NULL;
    size_t n = 0;
    char *back = NULL;
    assert_int_equal(dsq_lm_encode(lm, "Once upon a time", 16, DSQ_LM_ADD_SPECIAL, &ids, &n, &d), DSQ_OK);
    assert_int_equal(ids[0], dsq_lm_bos(lm));
    float *logits = malloc(sizeof(float) * 512);
    assert_non_null(logits);
    assert_int_equal(dsq_lm_forward(lm, ids, n, logits, 0, &d), DSQ_OK);
    assert_int_equal(dsq_lm_decode(lm, ids + 1, n - 1, 0, &back, NULL, &d), DSQ_OK);
    assert_string_equal(back, "Once upon a time");
    free(logits);
    dsq_free(back);
    dsq_free(ids);
    dsq_lm_free(lm);
    free(bin);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),     cmocka_unit_test(test_status_and_diag), cmocka_unit_test(test_schemes),
        cmocka_unit_test(test_open_errors), cmocka_unit_test(test_model),           cmocka_unit_test(test_perplexity),
        cmocka_unit_test(test_no_tokenizer), cmocka_unit_test(test_llama2c),
    };
    return cmocka_run_group_tests_name("public_header", tests, NULL, NULL);
}
