/* test_reliability.c - output safety: output files never replace what is not a
 * regular file, an output that is an input is refused (device + inode),
 * hostile JSON in the stats file. */
#include "dsq_test.h"
#include "dsq_error.h"
#include "dsq_file.h"
#include "calib.h"
#include "calib_data.h"
#include "tokenizer.h"
#include "stats_file.h"
#include "dsq_sha256.h"
#include "convert.h"
#include "recipe.h"
#include "synth_ckpt.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* A FIFO as output is written directly and stays a FIFO. */
static void test_fifo_output_written_directly(void **state)
{
    (void)state;
    char *dir = dsq_test_tmpdir();
    char *path = dsq_path_join(dir, "fifo");
    assert_int_equal(mkfifo(path, 0600), 0);
    /* A reader first, so the writer's open does not block. */
    int rfd = open(path, O_RDONLY | O_NONBLOCK);
    assert_true(rfd >= 0);
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_outfile f;
    assert_int_equal(dsq_outfile_open(&f, path, DSQ_OUT_OVERWRITE, &d), DSQ_OK);
    assert_int_equal(dsq_outfile_write(&f, "hello", 5, &d), DSQ_OK);
    assert_int_equal(dsq_outfile_commit(&f, &d), DSQ_OK);
    char buf[16] = {0};
    assert_int_equal(read(rfd, buf, sizeof buf), 5);
    assert_memory_equal(buf, "hello", 5);
    close(rfd);
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    /* Without -f too: writing into a FIFO replaces nothing. */
    rfd = open(path, O_RDONLY | O_NONBLOCK);
    assert_int_equal(dsq_outfile_open(&f, path, 0, &d), DSQ_OK);
    dsq_outfile_abort(&f);
    close(rfd);
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    free(path);
    dsq_test_rmtree(dir);
    free(dir);
}

/* A character device is written in place, never replaced (as root,
 * replacing /dev/null would break the whole system). The test makes its own
 * null device in a temporary directory, so a regression can never touch the
 * real one; skipped where mknod is not allowed. */
static void test_char_device_output(void **state)
{
    (void)state;
    char *dir = dsq_test_tmpdir();
    char *path = dsq_path_join(dir, "null");
    if (mknod(path, S_IFCHR | 0666, makedev(1, 3)) != 0) {
        free(path);
        dsq_test_rmtree(dir);
        free(dir);
        skip();
    }
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_write_file_atomic(path, "x", 1, DSQ_OUT_OVERWRITE, &d), DSQ_OK);
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISCHR(st.st_mode));
    free(path);
    dsq_test_rmtree(dir);
    free(dir);
}

/* A directory is refused; a symlink keeps being a symlink and its target is
 * what gets replaced. */
static void test_dir_and_symlink_outputs(void **state)
{
    (void)state;
    char *dir = dsq_test_tmpdir();
    char *sub = dsq_path_join(dir, "sub");
    char *target = dsq_path_join(dir, "target.bin");
    char *link = dsq_path_join(dir, "link.bin");
    assert_int_equal(mkdir(sub, 0755), 0);
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_true(dsq_write_file_atomic(sub, "x", 1, DSQ_OUT_OVERWRITE, &d) < 0);
    assert_true(strstr(d.msg, "not a regular file") != NULL);
    assert_true(dsq_path_is_dir(sub));

    dsq_test_write(target, "old", 3);
    assert_int_equal(symlink("target.bin", link), 0);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_write_file_atomic(link, "new!", 4, DSQ_OUT_OVERWRITE, &d), DSQ_OK);
    struct stat st;
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    char *buf;
    size_t n;
    assert_int_equal(dsq_read_file(target, 64, &buf, &n, &d), DSQ_OK);
    assert_int_equal(n, 4);
    assert_memory_equal(buf, "new!", 4);
    free(buf);
    /* without -f the symlinked file still counts as existing */
    dsq_diag_clear(&d);
    assert_int_equal(dsq_write_file_atomic(link, "x", 1, 0, &d), DSQ_ERR_EXISTS);
    free(sub); free(target); free(link);
    dsq_test_rmtree(dir);
    free(dir);
}

/* ---- hostile JSON in a --stats file ---- */

/* Write a statistics file with no tensors and the given metadata, then run a
 * --stats calibration of the bundled sample on it. */
static int calib_with_meta(const char *model, const char *dir, const char *meta, dsq_diag *d)
{
    char *p = dsq_path_join(dir, "stats.dsq");
    dsq_stats_writer *w;
    assert_int_equal(dsq_stats_writer_open(&w, p, "x", DSQ_STATS_OVERWRITE, NULL), DSQ_OK);
    assert_int_equal(dsq_stats_writer_finish(w, meta, NULL), DSQ_OK);
    dsq_calib_opts o;
    dsq_calib_opts_init(&o);
    o.scheme = "awq-w4a16";
    o.group_size = 32;
    o.threads = 1;
    o.load_stats = p;
    dsq_calib_result *r = NULL;
    dsq_diag_clear(d);
    int rc = dsq_calib_run(model, &o, &r, NULL, NULL, NULL, d);
    dsq_calib_result_free(r);
    free(p);
    return rc;
}

static void test_stats_meta_types(void **state)
{
    (void)state;
    const char *model = "samples/tiny-dsv3";
    char *cfgp = dsq_path_join(model, "config.json");
    char *cfg = NULL;
    size_t cl = 0;
    if (dsq_read_file(cfgp, 1 << 20, &cfg, &cl, NULL) != DSQ_OK) {
        free(cfgp);
        skip();
    }
    uint8_t h[DSQ_SHA256_LEN];
    char hx[2 * DSQ_SHA256_LEN + 1];
    dsq_sha256_buf(cfg, cl, h);
    for (int i = 0; i < DSQ_SHA256_LEN; i++) snprintf(hx + 2 * i, 3, "%02x", h[i]);
    char *dir = dsq_test_tmpdir();
    dsq_diag d;
    char meta[1024];
    static const char *const bad[] = {
        "{\"format\": null, \"version\": 1}",
        "{\"format\": 7, \"version\": 1}",
        "{\"format\": \"dsq-calib-stats\", \"version\": \"1\"}",
        "{\"format\": \"dsq-calib-stats\", \"version\": null}",
        "{\"format\": \"dsq-calib-stats\", \"version\": 1, \"model\": {\"config_sha256\": null}}",
        "{\"format\": \"dsq-calib-stats\", \"version\": 1, \"model\": null}",
        "{\"format\": \"dsq-calib-stats\", \"version\": 1, \"model\": [1]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = calib_with_meta(model, dir, bad[i], &d);
        if (rc >= 0) fprintf(stderr, "accepted: %s\n", bad[i]);
        assert_true(rc < 0);
    }
    /* the right model, but mistyped fields further in */
    static const char *const tail[] = {
        "\"search\": {\"scheme\": null}",
        "\"search\": {\"scheme\": 3}",
        "\"search\": \"awq\"",
        "\"moe_calib_all\": \"yes\"",
        "\"data\": {\"samples\": \"8\"}",
        "\"data\": {\"seqlen\": null}",
        "\"data\": {\"seed\": 1.5}",
        "\"data\": 5",
    };
    for (size_t i = 0; i < sizeof tail / sizeof tail[0]; i++) {
        snprintf(meta, sizeof meta,
                 "{\"format\": \"dsq-calib-stats\", \"version\": 1, \"model\": {\"config_sha256\": \"%s\"}, %s}",
                 hx, tail[i]);
        int rc = calib_with_meta(model, dir, meta, &d);
        if (rc != DSQ_ERR_JSON) fprintf(stderr, "rc %d for: %s (%s)\n", rc, tail[i], d.msg);
        assert_int_equal(rc, DSQ_ERR_JSON);
    }
    free(cfg);
    free(cfgp);
    dsq_test_rmtree(dir);
    free(dir);
}

/* ---- a long calibration document is tokenized only as far as
 * needed, with the same tokens as tokenizing it whole ---- */
static void test_calib_long_document_prefix(void **state)
{
    (void)state;
    dsq_tokenizer *tok = NULL;
    char *text = NULL;
    size_t tl = 0;
    if (dsq_tokenizer_load(&tok, "samples/tiny-llama/tokenizer.json", NULL) != DSQ_OK ||
        dsq_read_file("samples/data/heldout.txt", 1 << 24, &text, &tl, NULL) != DSQ_OK) {
        dsq_tokenizer_free(tok);
        free(text);
        skip();
    }
    /* ~4 MB: heldout.txt 64 times */
    size_t n = tl * 64;
    char *doc = malloc(n);
    assert_non_null(doc);
    for (int i = 0; i < 64; i++) memcpy(doc + (size_t)i * tl, text, tl);
    int32_t *all = NULL;
    size_t na = 0;
    assert_int_equal(dsq_tokenizer_encode(tok, doc, n, 1, &all, &na, NULL), DSQ_OK);
    dsq_calib_data_opts o;
    dsq_calib_data_opts_init(&o);
    o.n_samples = 8;
    o.seqlen = 128;
    const char *docs[1] = { doc };
    size_t lens[1] = { n };
    dsq_calib_data cd;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_calib_data_from_docs(&cd, docs, lens, 1, tok, &o, "long", &d), DSQ_OK);
    assert_true(na >= 8 * 128);
    assert_memory_equal(cd.tokens, all, 8 * 128 * sizeof(int32_t));
    dsq_calib_data_release(&cd);
    free(all);
    free(doc);
    free(text);
    dsq_tokenizer_free(tok);
}

/* gen_synth --experts E (E = 8 is the hard case: 8 groups, top-4 groups) writes a
 * routing config ds-quant accepts: the plan (config.json checked against the
 * tensors, dsq_model_config_load's routing checks) builds. Tiny dimensions
 * with the real DeepSeek-V3 routing (n_group 8, topk_group 4, top-8), as
 * gen_synth has before its --experts is applied; without the fit, E = 8 is
 * refused, so the check can fail. */
static int plan_synth(const char *dir, int64_t experts, int fit, dsq_diag *d)
{
    dsq_synth_opts o, t;
    dsq_synth_defaults_v3(&o);
    dsq_synth_defaults_tiny(&t);
    t.experts_per_tok = o.experts_per_tok;
    t.n_group = o.n_group;
    t.topk_group = o.topk_group;
    t.mtp = 0;
    t.layers = 1;
    t.dense_layers = 0;
    t.experts = experts;
    if (fit) dsq_synth_fit_routing(&t);
    int rc = dsq_synth_write(&t, dir, DSQ_OUT_OVERWRITE, NULL, d);
    if (rc < 0) return rc;
    dsq_recipe r;
    rc = dsq_recipe_init(&r, "w8a8-dynamic", d);
    if (rc < 0) return rc;
    dsq_convert_opts co;
    dsq_convert_opts_init(&co);
    co.input = dir;
    co.recipe = &r;
    co.threads = 1;
    dsq_convert *c = NULL;
    rc = dsq_convert_prepare(&c, &co, d);
    dsq_convert_free(c);
    dsq_recipe_release(&r);
    return rc;
}

static void test_synth_routing_any_experts(void **state)
{
    (void)state;
    char *dir = dsq_test_tmpdir();
    dsq_diag d;
    static const int64_t counts[] = { 1, 2, 3, 6, 8, 12, 16, 20, 64 };
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        dsq_diag_clear(&d);
        int rc = plan_synth(dir, counts[i], 1, &d);
        if (rc != DSQ_OK) fail_msg("--experts %lld: %s", (long long)counts[i], d.msg);
    }
    dsq_diag_clear(&d);
    assert_true(plan_synth(dir, 8, 0, &d) < 0);   /* the unfitted config is refused */
    assert_non_null(strstr(d.msg, "group"));
    dsq_test_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo_output_written_directly),
        cmocka_unit_test(test_char_device_output),
        cmocka_unit_test(test_dir_and_symlink_outputs),
        cmocka_unit_test(test_stats_meta_types),
        cmocka_unit_test(test_calib_long_document_prefix),
        cmocka_unit_test(test_synth_routing_any_experts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
