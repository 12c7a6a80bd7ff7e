/* test_model_tokenizer.c - dsq_tokenizer_for_model finds the tokenizer of
 * every kind of model the tools take: a model directory, a file in it (an
 * index), a llama2.c checkpoint (its tokenizer beside it by llama2.c's
 * names, not a tokenizer.json), an explicit path; and names what is
 * missing. ds-eval, ds-serve and calibration all go through it. */
#include "dsq_test.h"
#include "dsq_file.h"
#include "model_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SAMPLE "samples/tiny-dsv3"

static void test_directory_kinds(void **state)
{
    (void)state;
    if (!dsq_path_exists(SAMPLE "/tokenizer.json")) skip();
    static const char *const models[] = { SAMPLE, SAMPLE "/model.safetensors.index.json",
                                          SAMPLE "/model-00001-of-00002.safetensors" };
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        dsq_tokenizer *tok = NULL;
        dsq_tok_origin from;
        char where[256];
        dsq_diag d;
        dsq_diag_clear(&d);
        int rc = dsq_tokenizer_for_model(&tok, models[i], NULL, &from, where, sizeof where, &d);
        if (rc != DSQ_OK) fail_msg("%s: %s", models[i], d.msg);
        assert_int_equal(from, DSQ_TOK_FROM_DIR);
        assert_string_equal(where, SAMPLE);
        assert_true(dsq_tokenizer_vocab_size(tok) > 0);
        dsq_tokenizer_free(tok);
    }
    /* an explicit path wins */
    dsq_tokenizer *tok = NULL;
    dsq_tok_origin from;
    assert_int_equal(dsq_tokenizer_for_model(&tok, "/nonexistent/model", SAMPLE, &from, NULL, 0, NULL), DSQ_OK);
    assert_int_equal(from, DSQ_TOK_FROM_ARG);
    dsq_tokenizer_free(tok);
}

static void test_missing(void **state)
{
    (void)state;
    char *dir = dsq_test_tmpdir();
    char path[512];
    dsq_tokenizer *tok = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_tokenizer_for_model(&tok, "/nonexistent/model", NULL, NULL, NULL, 0, &d), DSQ_ERR_NOT_FOUND);
    /* a directory without any tokenizer */
    dsq_diag_clear(&d);
    assert_int_equal(dsq_tokenizer_for_model(&tok, dir, NULL, NULL, NULL, 0, &d), DSQ_ERR_NOT_FOUND);
    assert_non_null(strstr(d.msg, "no tokenizer.json or tokenizer.bin"));
    /* a llama2.c checkpoint with nothing beside it: named as one, not as a
     * directory without tokenizer.json */
    snprintf(path, sizeof path, "%s/model.bin", dir);
    dsq_test_write(path, "\0\0\0\0", 4);
    dsq_diag_clear(&d);
    dsq_tok_origin from = DSQ_TOK_FROM_ARG;
    assert_int_equal(dsq_tokenizer_for_model(&tok, path, NULL, &from, NULL, 0, &d), DSQ_ERR_NOT_FOUND);
    assert_non_null(strstr(d.msg, "llama2.c checkpoint"));
    assert_int_equal(from, DSQ_TOK_FROM_NONE);
    assert_null(tok);
    dsq_test_rmtree(dir);
    free(dir);
}

static void test_llama2c(void **state)
{
    (void)state;
    char *bin = dsq_test_shared("stories260K/stories260K.bin");
    if (!bin) {
        printf("test_llama2c: skipped (../shared/data/stories260K absent)\n");
        skip();
    }
    dsq_tokenizer *tok = NULL;
    dsq_tok_origin from;
    char where[4096];
    dsq_diag d;
    dsq_diag_clear(&d);
    int rc = dsq_tokenizer_for_model(&tok, bin, NULL, &from, where, sizeof where, &d);
    if (rc != DSQ_OK) fail_msg("%s: %s", bin, d.msg);
    assert_int_equal(from, DSQ_TOK_FROM_FILE);
    size_t wl = strlen(where);
    assert_true(wl > 10 && !strcmp(where + wl - 10, "tok512.bin"));
    assert_int_equal(dsq_tokenizer_vocab_size(tok), 512);
    dsq_tokenizer_free(tok);
    free(bin);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_directory_kinds),
        cmocka_unit_test(test_missing),
        cmocka_unit_test(test_llama2c),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
