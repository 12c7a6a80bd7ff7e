/* quantize.c - the ds-quant workflow (see quantize.h). */
#include "quantize.h"
#include "dsq_file.h"
#include "dsq_thread.h"
#include "llama2c.h"
#include "quarot.h"
#include "stats_file.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define notef(h_, level_, ...) dsq_notef((h_)->note, (h_)->ctx, level_, __VA_ARGS__)

/* The scheme the recipe gives a tensor (NULL: kept float). */
static int recipe_target(void *ctx, const char *name, int64_t rows, int64_t cols, const dsq_scheme **sc,
                         int32_t *gs)
{
    const dsq_recipe *r = ctx;
    dsq_plan_entry e;
    int64_t shape[2] = { rows, cols };
    int rc = dsq_recipe_decide(r, name, DSQ_DTYPE_BF16, 2, shape, 0, &e, NULL);
    if (rc < 0) return rc;
    *sc = e.kept ? NULL : e.scheme;
    *gs = e.qshape.group_size;
    return DSQ_OK;
}

/* The recipe, and the text that identifies it in the calibration
 * checkpoint's fingerprint. */
static int make_recipe(const dsq_quantize_opts *o, int calibrating, dsq_quantize_result *r, char *id, size_t idn,
                       dsq_diag *d)
{
    int rc = o->preset ? dsq_recipe_init_preset(&r->recipe, o->preset, d)
                       : dsq_recipe_init_ex(&r->recipe, o->scheme, calibrating, d);
    if (rc < 0) return rc;
    r->have_recipe = 1;
    r->recipe.group_size = o->group_size;
    r->recipe.calibrated = calibrating;
    for (size_t i = 0; rc == DSQ_OK && i < o->n_rules; i++)
        rc = o->rules[i].keep ? dsq_recipe_add_keep(&r->recipe, o->rules[i].s, d)
                              : dsq_recipe_add_rule(&r->recipe, o->rules[i].s, d);
    size_t tl = (size_t)snprintf(id, idn, "scheme=%s preset=%s group=%d", o->scheme ? o->scheme : "",
                                 o->preset ? o->preset : "", o->group_size);
    if (o->rotate && tl < idn)   /* a rotated model's statistics are another model's */
        tl += (size_t)snprintf(id + tl, idn - tl, " rotate=quarot:%llu", (unsigned long long)o->rotate_seed);
    for (size_t i = 0; i < o->n_rules && tl < idn; i++)
        tl += (size_t)snprintf(id + tl, idn - tl, " %s%s", o->rules[i].keep ? "keep:" : "rule:", o->rules[i].s);
    return rc;
}

/* Calibration before the conversion pass; its checkpoint is the statistics
 * file (default OUT.calib.dsq), so resume continues it, and a finished one
 * is reused when its recorded fingerprint is this run's (same data and
 * options; anything else is refused). */
static int calibrate(const dsq_quantize_opts *o, const dsq_convert_opts *conv, const dsq_quantize_hooks *h,
                     const char *target_id, dsq_quantize_result *r, dsq_diag *d)
{
    dsq_calib_opts co = o->calib;
    co.scheme = o->scheme ? o->scheme : dsq_recipe_preset_calib_scheme(o->preset);
    co.group_size = o->group_size;
    co.target = recipe_target;
    co.target_ctx = &r->recipe;
    co.target_id = target_id;
    co.threads = conv->threads;
    co.overwrite = conv->overwrite;
    if (co.calib && !co.save_stats) {
        size_t n = strlen(conv->output) + sizeof ".calib.dsq";
        if (!(r->ckpt = malloc(n))) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        snprintf(r->ckpt, n, "%s.calib.dsq", conv->output);
        co.save_stats = r->ckpt;
        co.overwrite = 1;
        /* replaced or reused only when it is a statistics file: never a
         * file of another kind, a link or a directory under that name */
        struct stat st;
        dsq_stats_reader *sr = NULL;
        if (lstat(r->ckpt, &st) == 0) {
            int ours = S_ISREG(st.st_mode) && dsq_stats_reader_open(&sr, r->ckpt, NULL) == DSQ_OK;
            dsq_stats_reader_close(sr);
            if (!ours)
                return dsq_fail(d, DSQ_ERR_EXISTS, r->ckpt, NULL, -1,
                                "in the way of the calibration checkpoint and not a statistics file dsq wrote "
                                "(move it, or name the checkpoint with --save-stats)");
        }
    }
    if (conv->resume && co.save_stats && dsq_path_exists(co.save_stats)) {
        co.load_stats = co.save_stats;   /* calibration finished before the interruption */
        co.save_stats = NULL;
        co.own_stats = 1;                /* ... with this run's data and options */
    } else {
        co.resume = conv->resume;
    }
    DSQ_TRY(dsq_calib_run(conv->input, &co, &r->calib, h->calib_progress, h->ctx, h->cancel, d));
    return dsq_calib_summary_json(r->calib, 1, &r->calib_json);
}

/* QuaRot: the rotated float model at OUT.rot (BF16 for BF16 and FP8
 * sources, whose weights carry no more precision, F32 otherwise). A
 * finished one with the same seed is reused by --resume; any other file in
 * the way is refused, never removed. */
static int rotate_input(const dsq_quantize_opts *o, const dsq_convert_opts *conv, const dsq_quantize_hooks *h,
                        dsq_quantize_result *r, dsq_diag *d)
{
    if (!conv->output) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "--rotate needs an output");
    size_t n = strlen(conv->output) + sizeof ".rot";
    if (!(r->rot_dir = malloc(n))) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    snprintf(r->rot_dir, n, "%s.rot", conv->output);
    if (dsq_path_exists(r->rot_dir)) {
        if (conv->resume && dsq_quarot_is_ours(r->rot_dir, o->rotate_seed)) {
            notef(h, 2, "reusing the rotated model %s", r->rot_dir);
            return DSQ_OK;
        }
        return dsq_fail(d, DSQ_ERR_EXISTS, r->rot_dir, NULL, -1,
                        "in the way of the rotated model (an interrupted run's? --resume reuses one made with the "
                        "same --rotate-seed; otherwise remove it)");
    }
    dsq_model_config cfg;
    char cp[4096];
    int bf16 = 0;
    if ((size_t)snprintf(cp, sizeof cp, "%s/config.json", conv->input) < sizeof cp &&
        dsq_model_config_load(&cfg, cp, NULL) == DSQ_OK) {
        bf16 = !strcmp(cfg.torch_dtype, "bfloat16") || cfg.quant.present;
        dsq_model_config_release(&cfg);
    }
    dsq_quarot_opts qo;
    dsq_quarot_opts_init(&qo);
    qo.seed = o->rotate_seed;
    qo.out_dtype = bf16 ? DSQ_DTYPE_BF16 : DSQ_DTYPE_F32;
    notef(h, 2, "rotating %s (QuaRot, seed %llu) into %s", conv->input, (unsigned long long)o->rotate_seed,
          r->rot_dir);
    return dsq_quarot_write(conv->input, r->rot_dir, &qo, d);
}

int dsq_quantize_run(const dsq_quantize_opts *o, const dsq_quantize_hooks *hooks, dsq_quantize_result *r,
                     dsq_diag *d)
{
    static const dsq_quantize_hooks none;
    const dsq_quantize_hooks *h = hooks ? hooks : &none;
    memset(r, 0, sizeof *r);
    dsq_convert_opts conv = o->conv;
    const int calibrating = o->calib.calib || o->calib.load_stats, dry = o->dry_run;
    int rc = DSQ_OK;

    r->stage = DSQ_QSTAGE_INPUT;
    if (dsq_llama2c_is_checkpoint(conv.input)) {
        /* a llama2.c .bin: convert from its exact float32 Hugging Face copy
         * (with tokenizer.bin / tok<vocab>.bin beside it, for calibration) */
        DSQ_TRY(dsq_llama2c_to_temp_dir(conv.input, NULL, &r->llama2c_dir, d));
        notef(h, 3, "%s: llama2.c checkpoint, read through %s", conv.input, r->llama2c_dir);
        conv.input = r->llama2c_dir;
    }

    if (o->rotate && !dry) {
        r->stage = DSQ_QSTAGE_OUTPUT;   /* before the rotated copy is written */
        DSQ_TRY(dsq_convert_check_output(&conv, d));
        r->stage = DSQ_QSTAGE_ROTATE;
        DSQ_TRY(rotate_input(o, &conv, h, r, d));
        conv.input = r->rot_dir;
    }

    r->stage = DSQ_QSTAGE_RECIPE;   /* recipe errors are usage errors: unknown scheme, bad regex, w8a8 */
    char target_id[4096];
    DSQ_TRY(make_recipe(o, calibrating, r, target_id, sizeof target_id, d));
    conv.recipe = &r->recipe;
    conv.cancel = h->cancel;
    conv.progress = h->convert_progress;
    conv.progress_ctx = h->ctx;

    r->stage = DSQ_QSTAGE_OUTPUT;   /* every output precondition before the first expensive step */
    if (!dry) DSQ_TRY(dsq_convert_check_output(&conv, d));

    if (!dry && !conv.resume && conv.output) {
        /* a killed calibration's partial checkpoint and hidden-state spill
         * files (the size of every calibration token's hidden state): what
         * --resume would have continued, this run replaces */
        char *ck = malloc(strlen(conv.output) + sizeof ".calib.dsq");
        if (!ck) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        sprintf(ck, "%s.calib.dsq", conv.output);
        if (dsq_stats_remove_partial(ck) > 0)
            notef(h, 0, "removed the calibration checkpoint an interrupted run left (--resume continues one instead)");
        free(ck);
    }
    if (calibrating && !dry) {
        /* Open the input and build the plan before calibrating (which can
         * take hours and writes its checkpoint): a config.json that
         * contradicts the tensors (or is missing), a missing shard and what
         * an export format cannot hold are refused now. */
        r->stage = DSQ_QSTAGE_PREFLIGHT;
        dsq_convert *chk = NULL;
        rc = dsq_convert_prepare(&chk, &conv, d);
        dsq_convert_free(chk);
        if (rc < 0) return rc;
        r->stage = DSQ_QSTAGE_CALIB;
        DSQ_TRY(calibrate(o, &conv, h, target_id, r, d));
        if (h->calibrated) h->calibrated(h->ctx, r->calib);
        /* rolled-back linears stay float: exact-name keep rules ahead of
         * every other rule */
        r->stage = DSQ_QSTAGE_ROLLBACK;
        for (size_t i = 0; rc == DSQ_OK && i < dsq_calib_rollback_count(r->calib); i++)
            rc = dsq_recipe_keep_exact(&r->recipe, dsq_calib_rollback(r->calib, i, NULL), d);
        if (rc < 0) return rc;
        conv.calib = r->calib;
    }
    /* the metadata's calibration summary: without timing, so outputs are reproducible */
    if (r->calib && (rc = dsq_calib_summary_json(r->calib, 0, &r->calib_json_meta)) < 0) return rc;
    conv.calib_json = r->calib_json_meta;

    r->stage = DSQ_QSTAGE_PREPARE;
    rc = dsq_convert_prepare(&r->conv, &conv, d);
    r->threads = conv.threads > 0 ? conv.threads : dsq_cpu_count();
    if (rc < 0 || dry) {
        if (rc == DSQ_OK) r->stage = DSQ_QSTAGE_DONE;
        return rc;
    }
    if (h->planned) h->planned(h->ctx, r->conv);
    if (!conv.resume && !conv.shard_bytes && conv.output) {
        char *tmp = dsq_outfile_tmp_name(conv.output);
        if (tmp && dsq_path_exists(tmp))
            notef(h, 0, "discarding the partial output of an interrupted run (use --resume to continue it)");
        free(tmp);
    }
    r->stage = DSQ_QSTAGE_CONVERT;
    DSQ_TRY(dsq_convert_run(r->conv, &r->summary, d));
    if (r->ckpt) unlink(r->ckpt);   /* the default checkpoint is not kept after success */
    if (r->rot_dir) {
        const char *src = r->llama2c_dir ? r->llama2c_dir : o->conv.input;
        if (dsq_quarot_remove(r->rot_dir, src, d) < 0) notef(h, 0, "%s was left in place", r->rot_dir);
    }
    r->stage = DSQ_QSTAGE_DONE;
    return DSQ_OK;
}

void dsq_quantize_result_release(dsq_quantize_result *r)
{
    dsq_convert_free(r->conv);
    if (r->have_recipe) dsq_recipe_release(&r->recipe);
    dsq_calib_result_free(r->calib);
    free(r->calib_json);
    free(r->calib_json_meta);
    free(r->ckpt);
    free(r->rot_dir);
    if (r->llama2c_dir) dsq_llama2c_temp_dir_remove(r->llama2c_dir);
    memset(r, 0, sizeof *r);
}
