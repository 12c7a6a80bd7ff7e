/* test_quantize.c - the conversion workflows as library calls, without a
 * program: dsq_quantize_run reports the stage a run stopped at (a bad
 * scheme is the recipe's, an existing output the output check's), plans
 * without writing on a dry run, converts and calls its hooks; and
 * dsq_export_from_dsq gives the same files as dsq_quantize_run with an
 * export format, but for the linears the target holds in float, which the
 * direct run writes from the source weight (AscendV1's kv_b_proj). On
 * samples/tiny-dsv3 (skipped when absent). */
#include "dsq_test.h"
#include "dsq_file.h"
#include "export.h"
#include "quantize.h"
#include "safetensors.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SAMPLE "samples/tiny-dsv3"

typedef struct hook_log {
    int planned, notes, warnings;
} hook_log;

static void on_note(void *ctx, int level, const char *msg)
{
    hook_log *h = ctx;
    (void)msg;
    h->notes++;
    h->warnings += level == 0;
}

static void on_planned(void *ctx, const dsq_convert *c)
{
    hook_log *h = ctx;
    (void)c;
    h->planned++;
}

static int quantize(const char *scheme, const char *format, const char *out, int dry, int overwrite, hook_log *log,
                    dsq_quantize_result *r, dsq_diag *d)
{
    dsq_quantize_opts o;
    memset(&o, 0, sizeof o);
    o.scheme = scheme;
    o.group_size = DSQ_GROUP_DEFAULT;
    o.dry_run = dry;
    dsq_convert_opts_init(&o.conv);
    o.conv.input = SAMPLE;
    o.conv.output = out;
    o.conv.threads = 1;
    o.conv.overwrite = overwrite;
    o.conv.export_format = format;
    dsq_calib_opts_init(&o.calib);
    dsq_quantize_hooks h = { .note = on_note, .planned = on_planned, .ctx = log };
    dsq_diag_clear(d);
    return dsq_quantize_run(&o, &h, r, d);
}

static char *readall(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long l = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)l + 1);
    *n = b && fread(b, 1, (size_t)l, f) == (size_t)l ? (size_t)l : 0;
    fclose(f);
    return b;
}

static void test_stages(void **state)
{
    (void)state;
    if (!dsq_path_exists(SAMPLE "/config.json")) skip();
    char *dir = dsq_test_tmpdir();
    char out[512];
    snprintf(out, sizeof out, "%s/q.dsq", dir);
    dsq_quantize_result r;
    dsq_diag d;
    hook_log log = { 0 };

    assert_true(quantize("no-such-scheme", NULL, out, 0, 0, &log, &r, &d) < 0);
    assert_int_equal(r.stage, DSQ_QSTAGE_RECIPE);
    dsq_quantize_result_release(&r);

    /* a dry run plans and writes nothing; the planned hook is for runs */
    assert_int_equal(quantize("w8a8-dynamic", NULL, out, 1, 0, &log, &r, &d), DSQ_OK);
    assert_int_equal(r.stage, DSQ_QSTAGE_DONE);
    assert_non_null(r.conv);
    assert_int_equal(dsq_convert_plan(r.conv)->n, 201);
    assert_false(dsq_path_exists(out));
    assert_int_equal(log.planned, 0);
    dsq_quantize_result_release(&r);

    assert_int_equal(quantize("w8a8-dynamic", NULL, out, 0, 0, &log, &r, &d), DSQ_OK);
    assert_int_equal(r.stage, DSQ_QSTAGE_DONE);
    assert_int_equal(r.summary.tensors, 201);
    assert_int_equal(log.planned, 1);
    assert_true(dsq_path_exists(out));
    dsq_quantize_result_release(&r);

    /* the output exists: refused at the output check, before any work */
    int rc = quantize("w8a8-dynamic", NULL, out, 0, 0, &log, &r, &d);
    assert_int_equal(rc, DSQ_ERR_EXISTS);
    assert_int_equal(r.stage, DSQ_QSTAGE_OUTPUT);
    assert_int_equal(log.planned, 1);
    dsq_quantize_result_release(&r);
    dsq_test_rmtree(dir);
    free(dir);
}

static void test_export_equals_direct(void **state)
{
    (void)state;
    if (!dsq_path_exists(SAMPLE "/config.json")) skip();
    char *dir = dsq_test_tmpdir();
    char q[512], direct[512], via[512];
    snprintf(q, sizeof q, "%s/q.dsq", dir);
    snprintf(direct, sizeof direct, "%s/direct", dir);
    snprintf(via, sizeof via, "%s/via", dir);
    dsq_quantize_result r;
    dsq_diag d;
    hook_log log = { 0 };
    assert_int_equal(quantize("w8a8-dynamic", NULL, q, 0, 0, &log, &r, &d), DSQ_OK);
    dsq_quantize_result_release(&r);
    assert_int_equal(quantize("w8a8-dynamic", "ascend", direct, 0, 0, &log, &r, &d), DSQ_OK);
    dsq_quantize_result_release(&r);

    dsq_export_opts eo;
    memset(&eo, 0, sizeof eo);
    eo.format = "ascend";
    eo.output = via;
    eo.tool = "test";
    dsq_export_summary s;
    dsq_diag_clear(&d);
    int rc = dsq_export_from_dsq(q, &eo, NULL, &s, &d);
    if (rc != DSQ_OK) fail_msg("dsq_export_from_dsq: %s", d.msg);
    assert_int_equal(s.src_tensors, 201);
    /* every file of the direct export, byte for byte, but the weights and
     * their sums: there every tensor but kv_b_proj (the direct run has the
     * source weight, the .dsq its int8 codes) */
    dsq_st_model *ma = NULL, *mb = NULL;
    assert_int_equal(dsq_st_open(&ma, direct, &d), DSQ_OK);
    assert_int_equal(dsq_st_open(&mb, via, &d), DSQ_OK);
    assert_int_equal(dsq_st_count(ma), dsq_st_count(mb));
    size_t kept = 0;
    for (size_t i = 0; i < dsq_st_count(ma); i++) {
        const dsq_st_tensor *ta = dsq_st_get(ma, i), *tb = dsq_st_find(mb, ta->name);
        if (!tb || ta->nbytes != tb->nbytes || ta->dtype != tb->dtype) fail_msg("%s differs in kind", ta->name);
        size_t n = strlen(ta->name);
        int from_src = n > 17 && !strcmp(ta->name + n - 17, ".kv_b_proj.weight");
        if (from_src) kept++;
        else if (memcmp(ta->data, tb->data, (size_t)ta->nbytes)) fail_msg("%s differs between the two paths", ta->name);
    }
    assert_true(kept > 0);
    dsq_st_close(ma);
    dsq_st_close(mb);
    DIR *dp = opendir(direct);
    assert_non_null(dp);
    struct dirent *e;
    int files = 0;
    while ((e = readdir(dp))) {
        if (e->d_name[0] == '.' || strstr(e->d_name, ".safetensors") || !strcmp(e->d_name, "SHA256SUMS")) continue;
        char a[1024], b[1024];
        snprintf(a, sizeof a, "%s/%s", direct, e->d_name);
        snprintf(b, sizeof b, "%s/%s", via, e->d_name);
        size_t na = 0, nb = 0;
        char *x = readall(a, &na), *y = readall(b, &nb);
        if (!x || !y || na != nb || memcmp(x, y, na)) fail_msg("%s differs between the two paths", e->d_name);
        free(x);
        free(y);
        files++;
    }
    closedir(dp);
    assert_true(files >= 2);
    /* the same export again: refused, the directory exists */
    dsq_diag_clear(&d);
    assert_int_equal(dsq_export_from_dsq(q, &eo, NULL, &s, &d), DSQ_ERR_EXISTS);
    dsq_test_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stages),
        cmocka_unit_test(test_export_equals_direct),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
