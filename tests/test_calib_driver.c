/* test_calib_driver.c - the calibration driver (dsq_calib_run) end to end on
 * synthetic models:
 *   - the data file path, and determinism across thread counts;
 *   - stats file round trip (reuse == original) and corruption detected;
 *   - resume after a layer checkpoint == a straight run; mismatched resume
 *     refused; a finished checkpoint reused as the run's own only with the
 *     same data and options (and never one without a fingerprint);
 *   - GPTQ through the driver (every integer row): a blob per calibrated
 *     linear, thread-count independent, equal after resume and from --stats,
 *     refused from a file without it, and the converter writes exactly it
 *     (whole and streamed in pieces);
 *   - the progress callback. */
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
#include "dsq_sha256.h"
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
        /* the finished checkpoint, reused as this run's own (--resume of a
         * run killed after calibrating): the same data and options give the
         * straight result; other data or options are refused */
        dsq_calib_opts fo = o;
        fo.save_stats = NULL;
        fo.resume = 0;
        fo.load_stats = sp;
        fo.own_stats = 1;
        r = calibrate(m, &fo);
        assert_same_result(straight, r, m);
        dsq_calib_result_free(r);
        int32_t *tok2 = rand_tokens(4 * 32, 500, 32);
        for (int v = 0; v < 4; v++) {
            dsq_calib_opts bad = fo;
            if (v == 0) bad.data.n_samples = 3;
            if (v == 1) bad.tokens = tok2;
            if (v == 2) bad.n_grid = fo.n_grid + 1;
            if (v == 3) bad.data.seed = 5;
            dsq_diag d;
            dsq_diag_clear(&d);
            r = NULL;
            assert_int_equal(dsq_calib_run(m, &bad, &r, NULL, NULL, NULL, &d), DSQ_ERR_STATE);
            assert_null(r);
            assert_non_null(strstr(d.msg, "other calibration data or options"));
            /* as --stats (not the run's own checkpoint) the file is used */
            if (v == 2) {
                bad.own_stats = 0;
                r = calibrate(m, &bad);
                dsq_calib_result_free(r);
            }
        }
        free(tok2);
        /* a finished file that records no fingerprint cannot be told apart */
        char *np = path("nofp.dsq");
        {
            char cfgp[4096];
            snprintf(cfgp, sizeof cfgp, "%s/config.json", m);
            size_t cn = 0;
            char *cfg = NULL;
            FILE *cf = fopen(cfgp, "rb");
            assert_non_null(cf);
            fseek(cf, 0, SEEK_END);
            cn = (size_t)ftell(cf);
            rewind(cf);
            cfg = malloc(cn + 1);
            assert_int_equal(fread(cfg, 1, cn, cf), cn);
            fclose(cf);
            uint8_t h[DSQ_SHA256_LEN];
            char hx[65], meta[512];
            dsq_sha256_buf(cfg, cn, h);
            dsq_sha256_hex(h, hx);
            free(cfg);
            snprintf(meta, sizeof meta,
                     "{\"format\":\"" DSQ_STATS_FORMAT "\",\"version\":%d,\"model\":{\"config_sha256\":\"%s\"}}",
                     DSQ_STATS_VERSION, hx);
            dsq_stats_writer *w = NULL;
            assert_int_equal(dsq_stats_writer_open(&w, np, "", DSQ_STATS_OVERWRITE, NULL), DSQ_OK);
            assert_int_equal(dsq_stats_writer_finish(w, meta, NULL), DSQ_OK);
        }
        fo.load_stats = np;
        dsq_diag d;
        dsq_diag_clear(&d);
        r = NULL;
        assert_int_equal(dsq_calib_run(m, &fo, &r, NULL, NULL, NULL, &d), DSQ_ERR_STATE);
        assert_non_null(strstr(d.msg, "records no fingerprint"));
        free(np);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_driver_text_and_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gptq_driver, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gptq_many_entries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_progress, setup, teardown),
    };
    /* DSQ_TEST_FILTER=PATTERN runs only the matching tests */
    if (getenv("DSQ_TEST_FILTER")) cmocka_set_test_filter(getenv("DSQ_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
