/* test_convert.c - the conversion pipeline end to end on small synthetic
 * DeepSeek-shaped checkpoints: every scheme read back and dequantized within
 * the scheme's bound, FP8 source, streaming pieces, NaN weights, existing
 * output, thread-count determinism, resume after SIGKILL and after
 * cancellation (byte-identical), sharded output, bad inputs, disk full. */
#include "dsq_test.h"
#include "container.h"
#include "convert.h"
#include "dsq_file.h"
#include "recipe.h"
#include "safetensors.h"
#include "synth_ckpt.h"

#include <fcntl.h>
#include <glob.h>
#include <json-c/json.h>
#include <math.h>
#include <sys/stat.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static char *g_dir;       /* per-test temp dir */

static char *path(const char *name)
{
    return dsq_path_join(g_dir, name);
}

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

/* Tiny DeepSeek-V3-shaped model: 2 layers (1 dense) + MTP, 4 experts. */
static char *make_model(const char *name, int fp8, const char *poison, uint64_t shard)
{
    char *dir = path(name);
    dsq_synth_opts o;
    dsq_synth_defaults_tiny(&o);
    o.experts = 4;
    o.fp8 = fp8;
    o.poison = poison;
    o.shard_bytes = shard;
    dsq_diag d;
    dsq_diag_clear(&d);
    int rc = dsq_synth_write(&o, dir, 0, NULL, &d);
    if (rc < 0) fail_msg("synth: %s", d.msg);
    return dir;
}

typedef struct conv_args {
    const char *scheme;       /* NULL: "w8a8-dynamic" */
    const char *keep;         /* optional --keep */
    int threads;
    uint64_t stream_bytes, piece_bytes, shard_bytes;
    int resume, overwrite, allow_nonfinite, no_journal, clip;
    int journal_each;         /* resume journal after every tensor */
    int stop_after;           /* >0: cancel after this many progress calls */
    int kill_after;           /* >0: SIGKILL self after this many progress calls */
} conv_args;

typedef struct cb_ctx { int calls, stop_after, kill_after; volatile int cancel; } cb_ctx;

static void on_progress(void *ctx, const dsq_convert_progress *p)
{
    (void)p;
    cb_ctx *c = ctx;
    c->calls++;
    if (c->kill_after && c->calls >= c->kill_after) kill(getpid(), SIGKILL);
    if (c->stop_after && c->calls >= c->stop_after) c->cancel = 1;
}

static int convert(const char *in, const char *out, const conv_args *a, dsq_convert_summary *sum_out,
                   dsq_diag *d)
{
    dsq_recipe r;
    dsq_diag_clear(d);
    int rc = dsq_recipe_init(&r, a->scheme ? a->scheme : "w8a8-dynamic", d);
    if (rc < 0) return rc;
    if (a->keep) assert_int_equal(dsq_recipe_add_keep(&r, a->keep, d), DSQ_OK);
    dsq_convert_opts o;
    dsq_convert_opts_init(&o);
    o.input = in;
    o.output = out;
    o.recipe = &r;
    o.threads = a->threads ? a->threads : 2;
    o.stream_bytes = a->stream_bytes;
    o.piece_bytes = a->piece_bytes;
    o.shard_bytes = a->shard_bytes;
    o.resume = a->resume;
    o.overwrite = a->overwrite;
    o.allow_nonfinite = a->allow_nonfinite;
    o.no_journal = a->no_journal;
    o.clip_search = a->clip;
    if (a->journal_each || a->resume) o.checkpoint_seconds = 0;
    o.error_sample = 1;
    cb_ctx cb = { 0, a->stop_after, a->kill_after, 0 };
    o.progress = on_progress;
    o.progress_ctx = &cb;
    o.cancel = &cb.cancel;
    dsq_convert *c = NULL;
    rc = dsq_convert_prepare(&c, &o, d);
    if (rc == DSQ_OK) {
        dsq_convert_summary s;
        rc = dsq_convert_run(c, &s, d);
        if (rc == DSQ_OK && sum_out) {
            *sum_out = s;
            sum_out->results = NULL;   /* owned by c */
        }
        if (rc == DSQ_OK) {
            /* summary sanity */
            assert_int_equal(s.tensors, dsq_convert_plan(c)->n);
            for (size_t i = 0; i < s.tensors; i++) {
                assert_true(s.results[i].stored_bytes > 0);
                if (s.results[i].scheme >= DSQ_SCHEME_W8A8_DYNAMIC && i >= s.resumed)
                    assert_true(s.results[i].rel_error >= 0 || s.resumed);
            }
        }
    }
    dsq_convert_free(c);
    dsq_recipe_release(&r);
    return rc;
}

static void convert_ok(const char *in, const char *out, const conv_args *a, dsq_convert_summary *s)
{
    dsq_diag d;
    int rc = convert(in, out, a, s, &d);
    if (rc < 0) {
        char buf[2048];
        dsq_diag_format(&d, buf, sizeof buf);
        fail_msg("convert %s -> %s: %s: %s", in, out, dsq_status_name(rc), buf);
    }
}

static void *slurp(const char *p, size_t *n)
{
    char *t = NULL;
    dsq_diag d;
    if (dsq_read_file(p, 1u << 30, &t, n, &d) < 0) fail_msg("cannot read %s: %s", p, d.msg);
    return t;
}

static void assert_same_file(const char *a, const char *b)
{
    size_t na, nb;
    void *x = slurp(a, &na), *y = slurp(b, &nb);
    if (na != nb || memcmp(x, y, na) != 0) fail_msg("%s and %s differ (%zu vs %zu bytes)", a, b, na, nb);
    free(x);
    free(y);
}

static int partial_exists(const char *out)
{
    char *t = dsq_outfile_tmp_name(out);
    int e = dsq_path_exists(t);
    free(t);
    return e;
}

/* Read every tensor of the .dsq back, check hashes, dequantize and compare
 * with the source within the scheme's per-element bound. Returns the count. */
static size_t check_output(const char *out, const char *model)
{
    dsq_ctr *r;
    dsq_diag d;
    dsq_diag_clear(&d);
    if (dsq_ctr_open(&r, out, &d) < 0) fail_msg("open %s: %s", out, d.msg);
    size_t bad = 0;
    if (dsq_ctr_verify(r, 1, &bad, &d) < 0) fail_msg("verify %s: %s", out, d.msg);
    dsq_st_model *m;
    assert_int_equal(dsq_st_open(&m, model, &d), DSQ_OK);
    size_t n = dsq_ctr_count(r);
    for (size_t i = 0; i < n; i++) {
        const dsq_ctr_tensor_info *t = dsq_ctr_get(r, i);
        const dsq_st_tensor *st = dsq_st_find(m, t->name);
        assert_non_null(st);
        assert_false(dsq_st_is_companion(m, st));
        assert_int_equal(t->ndim, st->ndim);
        for (int k = 0; k < st->ndim; k++) assert_int_equal(t->shape[k], st->shape[k]);
        assert_string_equal(t->src_dtype, dsq_dtype_name(st->dtype));
        const dsq_scheme *sc = dsq_scheme_by_id(t->scheme);
        assert_non_null(sc);
        uint8_t *raw = malloc(t->raw_size);
        assert_int_equal(dsq_ctr_read(r, t, raw, t->raw_size, &d), DSQ_OK);
        dsq_qview v;
        if (dsq_qview_init(&v, sc, NULL, raw, t->raw_size, &d) < 0) fail_msg("%s: %s", t->name, d.msg);
        int64_t rows = dsq_st_rows(st), cols = dsq_st_cols(st);
        assert_int_equal(v.shape.rows, rows);
        assert_int_equal(v.shape.cols, cols);
        assert_int_equal(v.shape.group_size, (int32_t)t->group_size);
        float *src = malloc((size_t)(rows * cols) * 4), *deq = malloc((size_t)(rows * cols) * 4);
        assert_int_equal(dsq_st_read_rows_f32(m, st, 0, rows, src, &d), DSQ_OK);
        sc->dequantize(&v, 0, rows, deq);
        int exact = (sc->id == DSQ_SCHEME_BF16 && st->dtype == DSQ_DTYPE_BF16) || sc->id == DSQ_SCHEME_F32;
        for (int64_t k = 0; k < rows * cols; k++) {
            float w = src[k];
            if (exact) {
                if (deq[k] != w) fail_msg("%s[%lld]: %g != %g", t->name, (long long)k, deq[k], w);
                continue;
            }
            double b = sc->error_bound(&v, k / cols, k % cols, w);
            if (!(fabs((double)deq[k] - w) <= b))
                fail_msg("%s (%s) [%lld,%lld]: |%g - %g| > %g", t->name, sc->name, (long long)(k / cols),
                         (long long)(k % cols), deq[k], w, b);
        }
        free(src);
        free(deq);
        free(raw);
    }
    size_t companions = 0;
    for (size_t i = 0; i < dsq_st_count(m); i++) companions += dsq_st_is_companion(m, dsq_st_get(m, i));
    assert_int_equal(n + companions, dsq_st_count(m));
    dsq_st_close(m);
    dsq_ctr_close(r);
    return n;
}

/* ---- tests ---- */

static void test_every_scheme(void **state)
{
    (void)state;
    char *model = make_model("m", 0, NULL, 0);
    for (int i = 0; i < dsq_scheme_count(); i++) {
        const dsq_scheme *sc = dsq_scheme_at(i);
        if (!sc || sc->needs_calibration) continue;
        char name[64];
        snprintf(name, sizeof name, "%s.dsq", sc->name);
        char *out = path(name);
        conv_args a = { .scheme = sc->name };
        convert_ok(model, out, &a, NULL);
        check_output(out, model);
        /* The streamed path (pieces, sections gathered by the writer) must
         * give the same raw payloads as the whole-tensor path. */
        snprintf(name, sizeof name, "%s-stream.dsq", sc->name);
        char *out2 = path(name);
        conv_args b = { .scheme = sc->name, .stream_bytes = 4096, .piece_bytes = 3000 };
        convert_ok(model, out2, &b, NULL);
        check_output(out2, model);
        dsq_ctr *r1, *r2;
        dsq_diag d;
        assert_int_equal(dsq_ctr_open(&r1, out, &d), DSQ_OK);
        assert_int_equal(dsq_ctr_open(&r2, out2, &d), DSQ_OK);
        assert_int_equal(dsq_ctr_count(r1), dsq_ctr_count(r2));
        for (size_t k = 0; k < dsq_ctr_count(r1); k++) {
            const dsq_ctr_tensor_info *t1 = dsq_ctr_get(r1, k), *t2 = dsq_ctr_get(r2, k);
            assert_string_equal(t1->name, t2->name);
            assert_int_equal(t1->raw_size, t2->raw_size);
            assert_memory_equal(t1->sha256, t2->sha256, DSQ_SHA256_LEN);
        }
        dsq_ctr_close(r1);
        dsq_ctr_close(r2);
        free(out);
        free(out2);
    }
    /* MSE clip search: still within the bound (which covers clipping). */
    char *out3 = path("clip.dsq");
    conv_args c = { .scheme = "awq-w4a16", .clip = 1 };
    convert_ok(model, out3, &c, NULL);
    check_output(out3, model);
    free(out3);
    free(model);
}

static void test_metadata(void **state)
{
    (void)state;
    char *model = make_model("m", 0, NULL, 0);
    char *out = path("o.dsq");
    conv_args a = { .scheme = "w4a8" };
    convert_ok(model, out, &a, NULL);
    dsq_ctr *r;
    dsq_diag d;
    assert_int_equal(dsq_ctr_open(&r, out, &d), DSQ_OK);
    json_object *m = json_tokener_parse(dsq_ctr_metadata(r, NULL)), *v, *w;
    assert_non_null(m);
    assert_true(json_object_object_get_ex(m, "format", &v));
    assert_string_equal(json_object_get_string(v), "dsq");
    assert_true(json_object_object_get_ex(m, "tool", &v));
    assert_non_null(strstr(json_object_get_string(v), "ds-quant"));
    assert_true(json_object_object_get_ex(m, "config", &v));
    assert_true(json_object_object_get_ex(v, "num_hidden_layers", &w));
    assert_int_equal(json_object_get_int(w), 2);
    assert_true(json_object_object_get_ex(m, "tokenizer", &v));
    assert_true(json_object_object_get_ex(v, "tokenizer.json", &w));
    assert_true(json_object_object_get_ex(v, "tokenizer_config.json", &w));
    assert_true(json_object_object_get_ex(m, "generation_config", &v));
    assert_true(json_object_object_get_ex(m, "source", &v));
    assert_true(json_object_object_get_ex(v, "files", &w));
    assert_int_equal(json_object_array_length(w), 1);
    assert_true(json_object_object_get_ex(m, "recipe", &v));
    assert_true(json_object_object_get_ex(v, "scheme", &w));
    assert_string_equal(json_object_get_string(w), "w4a8");
    assert_true(json_object_object_get_ex(v, "calibration", &w));
    json_object_put(m);
    /* roles are recorded per tensor */
    const dsq_ctr_tensor_info *t = dsq_ctr_find(r, "model.layers.1.mlp.experts.3.down_proj.weight");
    assert_non_null(t);
    assert_int_equal(t->role, DSQ_ROLE_EXPERT_LINEAR);
    assert_int_equal(t->scheme, DSQ_SCHEME_W4A8);
    t = dsq_ctr_find(r, "model.layers.2.eh_proj.weight");
    assert_non_null(t);
    assert_int_equal(t->role, DSQ_ROLE_MTP);
    assert_int_equal(t->scheme, DSQ_SCHEME_BF16);
    dsq_ctr_close(r);
    free(out);
    free(model);
}

static void test_fp8_source(void **state)
{
    (void)state;
    char *model = make_model("fp8", 1, NULL, 0);
    char *out = path("fp8.dsq");
    conv_args a = { .scheme = "w8a8-dynamic", .keep = "experts\\.0\\." };
    convert_ok(model, out, &a, NULL);
    assert_true(check_output(out, model) > 0);
    dsq_ctr *r;
    dsq_diag d;
    assert_int_equal(dsq_ctr_open(&r, out, &d), DSQ_OK);
    const dsq_ctr_tensor_info *t = dsq_ctr_find(r, "model.layers.1.mlp.experts.0.up_proj.weight");
    assert_non_null(t);
    assert_int_equal(t->scheme, DSQ_SCHEME_BF16);       /* kept FP8 -> bf16 */
    assert_string_equal(t->src_dtype, "F8_E4M3");
    assert_null(dsq_ctr_find(r, "model.layers.1.mlp.experts.0.up_proj.weight_scale_inv"));
    dsq_ctr_close(r);
    char *out2 = path("fp8-w4.dsq");
    conv_args b = { .scheme = "awq-w4a16", .stream_bytes = 4096, .piece_bytes = 2000 };
    convert_ok(model, out2, &b, NULL);
    check_output(out2, model);
    free(out);
    free(out2);
    free(model);
}

static void test_nonfinite(void **state)
{
    (void)state;
    const char *bad = "model.layers.1.mlp.experts.2.up_proj.weight";
    for (int fp8 = 0; fp8 <= 1; fp8++) {
        char *model = make_model(fp8 ? "nan8" : "nan", fp8, bad, 0);
        char *out = path("nan.dsq");
        conv_args a = { .scheme = "w4a8" };
        dsq_diag d;
        assert_int_equal(convert(model, out, &a, NULL, &d), DSQ_ERR_NONFINITE);
        assert_string_equal(d.tensor, bad);
        assert_non_null(strstr(d.msg, "row 0, column 0"));
        assert_non_null(strstr(d.msg, "--allow-nonfinite"));
        assert_false(dsq_path_exists(out));
        assert_false(partial_exists(out));
        conv_args b = { .scheme = "w4a8", .allow_nonfinite = 1 };
        convert_ok(model, out, &b, NULL);
        assert_true(dsq_path_exists(out));
        unlink(out);
        free(out);
        free(model);
    }
}

static void test_output_exists(void **state)
{
    (void)state;
    char *model = make_model("m", 0, NULL, 0);
    char *out = path("exists.dsq");
    dsq_test_write(out, "keep me", 7);
    conv_args a = { 0 };
    dsq_diag d;
    assert_int_equal(convert(model, out, &a, NULL, &d), DSQ_ERR_EXISTS);
    assert_non_null(strstr(d.msg, "-f"));
    size_t n;
    char *t = slurp(out, &n);
    assert_int_equal(n, 7);
    free(t);
    a.overwrite = 1;
    convert_ok(model, out, &a, NULL);
    check_output(out, model);
    /* a directory where a file is expected */
    char *dirout = path("adir");
    assert_int_equal(mkdir(dirout, 0755), 0);
    conv_args b = { 0 };
    assert_int_equal(convert(model, dirout, &b, NULL, &d), DSQ_ERR_EXISTS);
    free(dirout);
    free(out);
    free(model);
}

static void test_thread_determinism(void **state)
{
    (void)state;
    char *model = make_model("m", 0, NULL, 0);
    const char *schemes[] = { "w8a8-dynamic", "w4a8", "awq-w4a16" };
    for (size_t i = 0; i < 3; i++) {
        char *o1 = path("t1.dsq"), *o3 = path("t3.dsq");
        conv_args a = { .scheme = schemes[i], .threads = 1, .stream_bytes = 20000, .piece_bytes = 5000 };
        convert_ok(model, o1, &a, NULL);
        a.threads = 3;
        convert_ok(model, o3, &a, NULL);
        assert_same_file(o1, o3);
        unlink(o1);
        unlink(o3);
        free(o1);
        free(o3);
    }
    free(model);
}

/* A child process converts and SIGKILLs itself after `kill_after` progress
 * calls (mid-run, possibly mid-way through a streamed tensor); --resume must
 * then produce exactly the bytes of an uninterrupted run. */
static void test_resume_after_kill(void **state)
{
    (void)state;
    char *model = make_model("m", 0, NULL, 0);
    for (int streamed = 0; streamed <= 1; streamed++) {
        char *clean = path("clean.dsq"), *out = path("resumed.dsq");
        conv_args a = { .scheme = "w4a8" };
        if (streamed) { a.stream_bytes = 20000; a.piece_bytes = 5000; }
        convert_ok(model, clean, &a, NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            conv_args k = a;
            k.journal_each = 1;
            k.kill_after = streamed ? 150 : 40;
            dsq_diag d;
            convert(model, out, &k, NULL, &d);
            _exit(3);   /* not reached: killed */
        }
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        assert_false(dsq_path_exists(out));
        assert_true(partial_exists(out));
        /* Without --resume the output does not exist yet either. */
        conv_args r = a;
        r.resume = 1;
        dsq_convert_summary s;
        convert_ok(model, out, &r, &s);
        if (s.resumed < (streamed ? 2u : 10u))
            fail_msg("streamed %d: resumed %zu of %zu", streamed, s.resumed, s.tensors);
        assert_true(s.resumed < s.tensors);
        assert_same_file(clean, out);
        assert_false(partial_exists(out));
        unlink(clean);
        unlink(out);
        free(clean);
        free(out);
    }
    free(model);
}

/* XOR one byte at an absolute offset of a file and put its mtime back, so
 * size, mtime and header (the resume fingerprint) all stay the same. */
static void flip_keep_mtime(const char *file, uint64_t off, uint8_t mask)
{
    struct stat st;
    assert_int_equal(stat(file, &st), 0);
    int fd = open(file, O_RDWR);
    assert_true(fd >= 0);
    uint8_t b;
    assert_int_equal(pread(fd, &b, 1, (off_t)off), 1);
    b ^= mask;
    assert_int_equal(pwrite(fd, &b, 1, (off_t)off), 1);
    close(fd);
    struct timespec ts[2] = { st.st_atim, st.st_mtim };
    assert_int_equal(utimensat(AT_FDCWD, file, ts, 0), 0);
}

/* The resume ledger is a CRC-32C digest of the source, not its SHA-256
 * (convert_ledger.h), and must be as sensitive: one flipped mantissa bit in a tensor the
 * interrupted run already wrote - a change that may not even alter its
 * quantized codes - must still stop --resume (test_cancel_then_resume
 * resumes the same interruption over unchanged sources). */
static void test_resume_refuses_changed_source(void **state)
{
    (void)state;
    char *model = make_model("m", 0, NULL, 0);
    char *clean = path("clean.dsq"), *out = path("c.dsq");
    conv_args a = { .scheme = "w8a8-dynamic" };
    convert_ok(model, clean, &a, NULL);
    conv_args c = a;
    c.journal_each = 1;
    c.stop_after = 25;
    dsq_diag d;
    assert_int_equal(convert(model, out, &c, NULL, &d), DSQ_ERR_INTERRUPTED);
    assert_true(partial_exists(out));

    /* the plan's first tensor is among those written before the cancel */
    dsq_recipe r;
    assert_int_equal(dsq_recipe_init(&r, "w8a8-dynamic", &d), DSQ_OK);
    dsq_convert_opts o;
    dsq_convert_opts_init(&o);
    o.input = model;
    o.output = path("plan-only.dsq");
    o.recipe = &r;
    dsq_convert *cv = NULL;
    assert_int_equal(dsq_convert_prepare(&cv, &o, &d), DSQ_OK);
    char *name = strdup(dsq_convert_plan(cv)->v[0].name);
    dsq_convert_free(cv);
    dsq_recipe_release(&r);
    free((char *)o.output);
    dsq_st_model *m = NULL;
    assert_int_equal(dsq_st_open(&m, model, &d), DSQ_OK);
    const dsq_st_tensor *t = dsq_st_find(m, name);
    assert_non_null(t);
    uint64_t esz = dsq_dtype_bits(t->dtype) / 8;
    assert_true(esz >= 2 && t->nbytes >= 2 * esz);
    char *file = strdup(dsq_st_shard_path(m, t->shard));
    /* the lowest mantissa byte of the middle element (little-endian) */
    uint64_t off = t->file_offset + t->nbytes / 2 / esz * esz;
    dsq_st_close(m);
    free(name);

    flip_keep_mtime(file, off, 0x01);
    conv_args rs = a;
    rs.resume = 1;
    assert_int_equal(convert(model, out, &rs, NULL, &d), DSQ_ERR_STATE);
    if (!strstr(d.msg, "changed")) fail_msg("changed source: message was: %s", d.msg);
    free(file);
    free(clean);
    free(out);
    free(model);
}

static void test_cancel_then_resume(void **state)
{
    (void)state;
    char *model = make_model("m", 0, NULL, 0);
    char *clean = path("clean.dsq"), *out = path("c.dsq");
    conv_args a = { .scheme = "awq-w4a16" };
    convert_ok(model, clean, &a, NULL);
    conv_args c = a;
    c.journal_each = 1;
    c.stop_after = 25;
    dsq_diag d;
    assert_int_equal(convert(model, out, &c, NULL, &d), DSQ_ERR_INTERRUPTED);
    assert_false(dsq_path_exists(out));
    assert_true(partial_exists(out));
    /* A different recipe refuses the partial file. */
    conv_args w = { .scheme = "w8a8-dynamic", .resume = 1 };
    assert_int_equal(convert(model, out, &w, NULL, &d), DSQ_ERR_STATE);
    conv_args r = a;
    r.resume = 1;
    r.threads = 1;
    dsq_convert_summary s;
    convert_ok(model, out, &r, &s);
    assert_true(s.resumed > 0);
    assert_same_file(clean, out);
    /* Without the journal the bytes are the same. */
    char *out3 = path("nojournal.dsq");
    conv_args nj = a;
    nj.no_journal = 1;
    convert_ok(model, out3, &nj, NULL);
    assert_same_file(clean, out3);
    free(out3);
    /* --resume with nothing to resume is a fresh run. */
    char *out2 = path("fresh.dsq");
    convert_ok(model, out2, &r, &s);
    assert_int_equal(s.resumed, 0);
    assert_same_file(clean, out2);
    free(out2);
    free(clean);
    free(out);
    free(model);
}

static void list_names(const char *dsq, json_object *seen)
{
    dsq_ctr *r;
    dsq_diag d;
    assert_int_equal(dsq_ctr_open(&r, dsq, &d), DSQ_OK);
    assert_int_equal(dsq_ctr_verify(r, 1, NULL, &d), DSQ_OK);
    for (size_t i = 0; i < dsq_ctr_count(r); i++)
        json_object_object_add(seen, dsq_ctr_get(r, i)->name, json_object_new_string(dsq));
    dsq_ctr_close(r);
}

static void test_sharded_output(void **state)
{
    (void)state;
    char *model = make_model("sh", 1, NULL, 400000);   /* sharded FP8 input too */
    char *clean = path("out-clean"), *out = path("out");
    conv_args a = { .scheme = "w4a8", .shard_bytes = 300000 };
    convert_ok(model, clean, &a, NULL);
    char *idx = dsq_path_join(clean, "model.dsq.index.json");
    size_t n;
    char *txt = slurp(idx, &n);
    json_object *j = json_tokener_parse(txt), *wm, *meta, *v;
    assert_non_null(j);
    assert_true(json_object_object_get_ex(j, "weight_map", &wm));
    assert_true(json_object_object_get_ex(j, "metadata", &meta));
    assert_true(json_object_object_get_ex(meta, "shards", &v));
    int nsh = json_object_get_int(v);
    assert_true(nsh >= 3);
    json_object *seen = json_object_new_object();
    for (int s = 0; s < nsh; s++) {
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.dsq", s + 1, nsh);
        char *p = dsq_path_join(clean, name);
        list_names(p, seen);
        free(p);
    }
    assert_int_equal(json_object_object_length(seen), json_object_object_length(wm));
    json_object_object_foreach(wm, key, val) {
        json_object *got;
        assert_true(json_object_object_get_ex(seen, key, &got));
        assert_non_null(strstr(json_object_get_string(got), json_object_get_string(val)));
    }
    json_object_put(seen);
    json_object_put(j);
    free(txt);

    /* Interrupt in a later shard, resume, compare every file. */
    conv_args c = a;
    c.journal_each = 1;
    c.stop_after = 60;
    dsq_diag d;
    assert_int_equal(convert(model, out, &c, NULL, &d), DSQ_ERR_INTERRUPTED);
    conv_args r = a;
    r.resume = 1;
    dsq_convert_summary s;
    convert_ok(model, out, &r, &s);
    assert_true(s.resumed > 0);
    assert_int_equal(s.shards, nsh);
    for (int k = 0; k < nsh; k++) {
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.dsq", k + 1, nsh);
        char *p1 = dsq_path_join(clean, name), *p2 = dsq_path_join(out, name);
        assert_same_file(p1, p2);
        free(p1);
        free(p2);
    }
    char *idx2 = dsq_path_join(out, "model.dsq.index.json");
    assert_same_file(idx, idx2);
    char *state_file = dsq_path_join(out, ".dsq-resume");
    assert_false(dsq_path_exists(state_file));
    free(state_file);
    /* Existing sharded output is refused without -f. */
    conv_args e = a;
    assert_int_equal(convert(model, out, &e, NULL, &d), DSQ_ERR_EXISTS);
    free(idx);
    free(idx2);
    free(clean);
    free(out);
    free(model);
}

static void test_bad_inputs(void **state)
{
    (void)state;
    dsq_diag d;
    conv_args a = { 0 };
    char *out = path("x.dsq");
    /* missing shard */
    char *model = make_model("sh", 0, NULL, 300000);
    char pat[4200];
    snprintf(pat, sizeof pat, "%s/model-00002-of-*.safetensors", model);
    glob_t g;
    assert_int_equal(glob(pat, 0, NULL, &g), 0);
    assert_int_equal(unlink(g.gl_pathv[0]), 0);
    assert_int_equal(convert(model, out, &a, NULL, &d), DSQ_ERR_NOT_FOUND);
    globfree(&g);
    free(model);
    /* malformed config.json and tokenizer.json */
    model = make_model("m", 0, NULL, 0);
    char *cfg = dsq_path_join(model, "config.json");
    size_t n;
    char *good = slurp(cfg, &n);
    dsq_test_write(cfg, "{\"num_hidden_layers\": ", 22);
    assert_int_equal(convert(model, out, &a, NULL, &d), DSQ_ERR_JSON);
    assert_non_null(strstr(d.path, "config.json"));
    dsq_test_write(cfg, good, n);
    char *tok = dsq_path_join(model, "tokenizer.json");
    dsq_test_write(tok, "[1, 2", 5);
    assert_int_equal(convert(model, out, &a, NULL, &d), DSQ_ERR_JSON);
    assert_non_null(strstr(d.path, "tokenizer.json"));
    assert_false(dsq_path_exists(out));
    /* no input at all */
    char *none = path("nothing-here");
    assert_true(convert(none, out, &a, NULL, &d) < 0);
    /* w8a8 static is refused with a pointer to w8a8-dynamic */
    conv_args s = { .scheme = "w8a8" };
    assert_int_equal(convert(model, out, &s, NULL, &d), DSQ_ERR_UNSUPPORTED);
    assert_non_null(strstr(d.msg, "w8a8-dynamic"));
    free(none);
    free(tok);
    free(good);
    free(cfg);
    free(model);
    free(out);
}

/* Disk full stand-in: a child with a small RLIMIT_FSIZE. The conversion must
 * fail cleanly and leave neither the output nor a temporary behind. */
static void test_write_failure(void **state)
{
    (void)state;
    char *model = make_model("m", 0, NULL, 0);
    char *out = path("full.dsq");
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = { 200000, 200000 };
        setrlimit(RLIMIT_FSIZE, &rl);
        conv_args a = { .scheme = "bf16" };
        dsq_diag d;
        int rc = convert(model, out, &a, NULL, &d);
        _exit(rc == DSQ_ERR_IO || rc == DSQ_ERR_NOSPC ? 0 : 10 + (rc < 0 ? -rc : 0));
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_false(dsq_path_exists(out));
    assert_false(partial_exists(out));
    free(out);
    free(model);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_every_scheme, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metadata, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fp8_source, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nonfinite, setup, teardown),
        cmocka_unit_test_setup_teardown(test_output_exists, setup, teardown),
        cmocka_unit_test_setup_teardown(test_thread_determinism, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_after_kill, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_then_resume, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_refuses_changed_source, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sharded_output, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_inputs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_failure, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
