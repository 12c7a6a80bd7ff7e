/* calib.c - the calibration driver (see calib.h): options, the run
 * context, and the run (data, embeddings, the forward pass layer by layer
 * with its checkpoints, or the layers of a --stats file). The driver's
 * other parts are listed in calib_int.h. */
#include "calib_int.h"
#include "model_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <json-c/json.h>

void dsq_calib_opts_init(dsq_calib_opts *o)
{
    memset(o, 0, sizeof *o);
    dsq_calib_data_opts_init(&o->data);
    o->scheme = "awq-w4a16";
    o->group_size = DSQ_GROUP_DEFAULT;
    o->alpha = DSQ_SMOOTH_ALPHA_DEFAULT;
    o->smooth = 1;
    o->clip = 1;
    o->gptq_damp = DSQ_GPTQ_DAMP;
    o->min_expert_tokens = DSQ_CALIB_MIN_EXPERT_TOKENS;
    o->n_grid = DSQ_AWQ_GRID_DEFAULT;
    o->awq_tokens = DSQ_CALIB_AWQ_TOKENS;
    o->awq_expert_tokens = DSQ_CALIB_AWQ_EXPERT_TOKENS;
    o->awq_attn_seqs = -1;
    o->awq_attn_seqlen = 512;
    o->ram_limit = 2ull << 30;
    o->stop_after_layer = -1;
}

/* The int4 group-parameter search (qsearch.c) of the quantizations that
 * calibration runs and of the calibrated tensors' final one: the user's
 * choice (--search / --no-search), else off with GPTQ and for w4a8, else the
 * quantizer's default (scheme.h dsq_qsearch_mode: off for awq-w4a16).
 * On mid-dsv3 the search raised KLD 1-7% under GPTQ's error feedback and
 * 3-4% after w4a8's smoothing (level on tiny-dsv3), so those stay min/max
 * even if the quantizer's default changes. */
int dsq_calib_search_mode(const dsq_calib_opts *o, const dsq_scheme *sc)
{
    if (o->range_search) return o->range_search;
    return o->gptq || (sc && sc->id == DSQ_SCHEME_W4A8) ? -1 : 0;
}

/* ==== run context ======================================================== */

/* Whole sequences kept for the attention block loss (calib.h awq_attn_seqs) */
int dsq_calib_attn_seqs(const calib_run *c)
{
    if (c->o->awq_attn_seqs >= 0) return c->o->awq_attn_seqs;
    return c->flavor == DSQ_GROUPS_AWQ ? DSQ_CALIB_AWQ_ATTN_SEQS : 0;
}

double dsq_calib_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double dsq_calib_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void dsq_calib_report(calib_run *c, int layer, int sample, const char *phase)
{
    if (!c->progress) return;
    dsq_calib_progress p = { layer, c->cfg ? (int)c->cfg->num_hidden_layers : 0, sample, c->n_samples, phase,
                             dsq_calib_now() - c->t0 };
    c->progress(c->pctx, &p);
}

static int is_float(const dsq_scheme *sc) { return !sc || sc->id == DSQ_SCHEME_F32 || sc->id == DSQ_SCHEME_BF16; }

/* Default target: opts.scheme for every linear but the MoE router. */
static int default_target(void *ctx, const char *t, int64_t rows, int64_t cols, const dsq_scheme **sc,
                          int32_t *gs)
{
    calib_run *c = ctx;
    (void)rows;
    (void)cols;
    size_t n = strlen(t), k = strlen(".mlp.gate.weight");
    *sc = n >= k && strcmp(t + n - k, ".mlp.gate.weight") == 0 ? NULL : c->scheme;
    *gs = c->o->group_size;
    return DSQ_OK;
}

int dsq_calib_target_of(calib_run *c, const dsq_linear *l, const dsq_scheme **sc, int32_t *gs)
{
    *sc = NULL;
    *gs = DSQ_GROUP_DEFAULT;
    int rc = c->o->target ? c->o->target(c->o->target_ctx, l->name, l->out, l->in, sc, gs)
                          : default_target(c, l->name, l->out, l->in, sc, gs);
    if (rc < 0) return dsq_fail(c->d, rc, NULL, l->name, -1, "cannot decide the tensor's scheme");
    if (is_float(*sc)) *sc = NULL;
    return DSQ_OK;
}

int dsq_calib_search_target(void *ctx, const char *t, int64_t rows, int64_t cols, const dsq_scheme **sc, int32_t *gs)
{
    calib_run *c = ctx;
    return c->o->target ? c->o->target(c->o->target_ctx, t, rows, cols, sc, gs)
                        : default_target(c, t, rows, cols, sc, gs);
}

/* ==== the run ============================================================= */

static int embed_all(calib_run *c, dsq_hstore *h, const dsq_calib_data *cd)
{
    dsq_calib_report(c, -1, -1, "embed");
    for (int i = 0; i < cd->n_samples; i++) {
        float *buf;
        DSQ_TRY(dsq_hstore_get(h, i, &buf, c->d));
        DSQ_TRY(dsq_model_embed(c->m, cd->tokens + (size_t)i * (size_t)cd->seqlen, cd->seqlen, buf, c->d));
        DSQ_TRY(dsq_hstore_put(h, i, buf, c->d));
    }
    return dsq_hstore_swap(h, c->d);
}

static int gptq_tap(void *ctx, const char *site, const float *x, int64_t T, int64_t in, const int32_t *token_index)
{
    calib_run *c = ctx;
    double t0 = dsq_calib_now();
    int rc = DSQ_OK, e = dsq_calib_expert_of(site);
    size_t n = strlen(site);
    if (e >= 0 && c->moe.idx) { /* routed expert: remember which rows (down_proj's input is recomputed) */
        if (n > 16 && !strcmp(site + n - 16, "gate_proj.weight")) rc = dsq_gptq_moe_add_routed(&c->moe, e, token_index, T);
    } else {
        rc = dsq_gptq_hset_add(&c->hs, site, x, T, in, dsq_model_pool(c->m));
        if (rc == DSQ_OK && c->moe.idx && n > 16 && !strcmp(site + n - 16, ".mlp.gate.weight"))
            rc = dsq_gptq_moe_add_rows(&c->moe, x, T);
    }
    c->r->tot.seconds_gptq += dsq_calib_now() - t0;
    return rc;
}

static void on_sample(void *ctx, int layer, int sample)
{
    dsq_calib_report(ctx, layer, sample, "forward");
}

static int get_data(calib_run *c, const char *model_path, dsq_calib_data *cd)
{
    const dsq_calib_opts *o = c->o;
    if (o->tokens) return dsq_calib_data_from_ids(cd, o->tokens, o->n_tokens, &o->data, c->d);
    dsq_calib_report(c, -1, -1, "data");
    dsq_tokenizer *tok = NULL;
    int rc = dsq_tokenizer_for_model(&tok, model_path, o->tokenizer, NULL, NULL, 0, c->d);
    if (rc == DSQ_OK) rc = dsq_calib_data_load(cd, o->calib, tok, &o->data, c->d);
    dsq_tokenizer_free(tok);
    return rc;
}

static int forward_run(calib_run *c, const char *model_path, int *interrupted)
{
    const dsq_calib_opts *o = c->o;
    const int L = (int)c->cfg->num_hidden_layers;
    dsq_calib_data cd;
    DSQ_TRY(get_data(c, model_path, &cd));
    c->n_samples = cd.n_samples;
    c->r->tot.tokens = (uint64_t)cd.n_samples * (uint64_t)cd.seqlen;
    c->r->tot.samples = cd.n_samples;
    c->r->tot.seqlen = cd.seqlen;
    c->r->tot.samples_requested = cd.requested_samples;
    c->data_samples = cd.n_samples;
    c->data_seqlen = cd.seqlen;
    c->data_seed = o->data.seed;
    if (o->calib && !(c->data_file = strdup(o->calib))) {
        dsq_calib_data_release(&cd);
        return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    int rc = DSQ_OK;
    char fp[65];
    char *spill = NULL;
    if (o->save_stats) {
        rc = dsq_calib_stats_fingerprint(c, &cd, fp);
        if (rc == DSQ_OK)
            rc = dsq_stats_writer_open(&c->w, o->save_stats, fp,
                                       (o->resume ? DSQ_STATS_RESUME : 0) | (o->overwrite ? DSQ_STATS_OVERWRITE : 0),
                                       c->d);
        if (rc == DSQ_OK) spill = dsq_stats_spill_base(o->save_stats);
        if (rc == DSQ_OK && !spill) rc = dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    /* layers a previous run completed */
    int done = 0;
    char name[512];
    while (rc == DSQ_OK && c->w && done < L) {
        dsq_stats_name(name, sizeof name, done, "done", NULL);
        if (!dsq_stats_writer_has(c->w, name)) break;
        done++;
    }
    dsq_hstore *h = NULL;
    if (rc == DSQ_OK)
        rc = dsq_hstore_open(&h, cd.n_samples, cd.seqlen, c->cfg->hidden_size, o->ram_limit, spill, spill != NULL,
                             c->d);
    for (int l = 0; l < done && rc == DSQ_OK; l++) rc = dsq_calib_layer_from_file(c, l);
    if (rc == DSQ_OK && done > 0 && done < L) {
        dsq_stats_name(name, sizeof name, done - 1, "done", NULL);
        void *buf = NULL;
        size_t n = 0;
        rc = dsq_calib_src_get(c, name, &buf, &n);
        dsq_stats_done mk;
        if (rc == DSQ_OK && (n != sizeof mk || (memcpy(&mk, buf, sizeof mk), memcmp(mk.magic, "DSQL", 4) != 0) ||
                             mk.hidden_file > 1 || mk.samples != (uint64_t)cd.n_samples))
            rc = dsq_fail(c->d, DSQ_ERR_FORMAT, NULL, name, -1, "bad layer checkpoint record");
        free(buf);
        if (rc == DSQ_OK) rc = dsq_hstore_adopt(h, (int)mk.hidden_file, mk.hidden_sha256, c->d);
    } else if (rc == DSQ_OK && done == 0) {
        rc = embed_all(c, h, &cd);
    }
    dsq_collect_opts co = { 0 };
    /* token samples: for the searches and the clip check (int4 schemes) */
    int search = c->flavor == DSQ_GROUPS_AWQ || c->scheme->id == DSQ_SCHEME_W4A8 ||
                 c->scheme->id == DSQ_SCHEME_W8A8_DYNAMIC || o->target != NULL;
    /* ... and for the sensitivities of --rollback */
    co.sample_cap_dense = search || o->rollback > 0 ? o->awq_tokens : 0;
    co.sample_cap_expert = search || o->rollback > 0 ? o->awq_expert_tokens : 0;
    co.attn_seqs = search ? dsq_calib_attn_seqs(c) : 0;   /* attention block loss (awq.h) */
    co.attn_seq_len = o->awq_attn_seqlen;
    co.seed = o->data.seed;
    co.layer_flags = o->moe_calib_all ? DSQ_LAYER_ALL_EXPERTS : 0;
    /* X^T X blocks for the AWQ clip search (awq.h); other schemes keep the
     * proxy clip and do not pay for them (2.3 GiB per 671B layer) */
    /* with --gptq the clip stays the quantizer's per-group search inside
     * GPTQ (awq-w4a16 g64 on the sample: mean KLD 0.0055 that way, 0.0103
     * with the X^T X clip clamping GPTQ's groups, 0.0076 with no clip) */
    co.cov = o->clip && c->flavor == DSQ_GROUPS_AWQ && !o->gptq;
    co.cancel = c->cancel;
    co.on_sample = on_sample;
    co.ctx = c;
    if (o->gptq) {
        co.tap = gptq_tap;
        co.tap_ctx = c;
    }
    for (int l = done; l < L && rc == DSQ_OK; l++) {
        dsq_layer_stats ls;
        rc = dsq_layer_stats_init(&ls, l, dsq_calib_n_experts(c, l));
        if (rc < 0) break;
        int last = l == L - 1;
        dsq_stats_done mk;
        memset(&mk, 0, sizeof mk);
        if (o->gptq && ls.n_experts > 0 && dsq_gptq_moe_init(&c->moe, c->cfg->hidden_size, ls.n_experts) < 0)
            rc = dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        double tf = dsq_calib_now();
        if (rc == DSQ_OK) rc = dsq_collect_layer(c->m, l, h, !last, &co, &ls, mk.hidden_sha256, c->d);
        c->r->tot.seconds_forward += dsq_calib_now() - tf;
        if (rc == DSQ_OK) rc = dsq_calib_do_layer(c, l, &ls, 1);
        if (c->hs.bytes + c->moe.caprows * (uint64_t)c->moe.in * 4 > c->r->tot.gptq_hess_peak)
            c->r->tot.gptq_hess_peak = c->hs.bytes + c->moe.caprows * (uint64_t)c->moe.in * 4;
        dsq_gptq_hset_release(&c->hs);
        dsq_gptq_moe_release(&c->moe);
        if (rc == DSQ_OK && !last) rc = dsq_hstore_swap(h, c->d);
        if (rc == DSQ_OK && c->w) rc = dsq_calib_write_layer_stats(c, &ls);
        if (rc == DSQ_OK && c->w) {
            memcpy(mk.magic, "DSQL", 4);
            mk.layer = (uint32_t)l;
            mk.hidden_file = last ? 0 : (uint32_t)dsq_hstore_current(h);
            mk.samples = (uint64_t)cd.n_samples;
            mk.tokens = ls.tokens;
            dsq_stats_name(name, sizeof name, l, "done", NULL);
            rc = dsq_stats_writer_put(c->w, name, &mk, sizeof mk, 1, 0, c->d);
            if (rc == DSQ_OK) rc = dsq_stats_writer_checkpoint(c->w, c->d);
        }
        dsq_model_layer_release(c->m, l);
        dsq_layer_stats_release(&ls);
        if (rc == DSQ_OK && o->stop_after_layer == l && !last)
            rc = dsq_fail(c->d, DSQ_ERR_INTERRUPTED, NULL, NULL, -1, "stopped after layer %d (test)", l);
    }
    *interrupted = rc == DSQ_ERR_INTERRUPTED;
    if (c->w) {
        if (rc == DSQ_OK) {
            char *meta = dsq_calib_stats_meta(c, &cd);
            rc = meta ? dsq_stats_writer_finish(c->w, meta, c->d) : DSQ_ERR_NOMEM;
            if (!meta) dsq_stats_writer_abort(c->w);
            free(meta);
        } else if (*interrupted) {
            dsq_stats_writer_detach(c->w);
        } else {
            dsq_stats_writer_abort(c->w);
        }
        c->w = NULL;
    }
    dsq_hstore_free(h, !*interrupted);
    free(spill);
    dsq_calib_data_release(&cd);
    return rc;
}

static char *info_json(calib_run *c)
{
    const dsq_calib_opts *o = c->o;
    json_object *root = json_object_new_object();
    const int dyn = c->scheme->id == DSQ_SCHEME_W8A8_DYNAMIC;   /* no static ranges to record */
    const char *method = c->flavor == DSQ_GROUPS_AWQ ? "awq"
                         : !o->smooth                ? (dyn ? "none" : "static-ranges")
                         : o->smooth_method == DSQ_SMOOTH_FLEX && !o->alpha_set &&
                                   c->scheme->id != DSQ_SCHEME_W4A8 ? "flex-smooth-search"
                         : c->scheme->id == DSQ_SCHEME_W4A8 && !o->alpha_set ? "smoothquant+awq-search"
                         : dyn && !o->alpha_set                              ? "smoothquant-search"
                                                                              : "smoothquant";
    json_object_object_add(root, "method", json_object_new_string(method));
    json_object_object_add(root, "scheme", json_object_new_string(c->scheme->name));
    /* the same text whether the statistics were collected now or loaded */
    if (c->data_file) json_object_object_add(root, "calib", json_object_new_string(c->data_file));
    json_object_object_add(root, "samples", json_object_new_int(c->data_samples));
    json_object_object_add(root, "seqlen", json_object_new_int(c->data_seqlen));
    json_object_object_add(root, "seed", json_object_new_int64((int64_t)c->data_seed));
    json_object_object_add(root, "alpha", json_object_new_double(o->alpha));
    json_object_object_add(root, "moe_calib_all", json_object_new_boolean(c->moe_all));
    json_object_object_add(root, "min_expert_tokens", json_object_new_int(o->min_expert_tokens));
    json_object_object_add(root, "grid", json_object_new_int(o->n_grid));
    json_object_object_add(root, "clip", json_object_new_boolean(o->clip));
    char *s = strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
    return s;
}

int dsq_calib_run(const char *model_path, const dsq_calib_opts *o, dsq_calib_result **out,
                  dsq_calib_progress_fn progress, void *progress_ctx, const volatile int *cancel, dsq_diag *d)
{
    *out = NULL;
    if (!o || !model_path) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "no model or options");
    calib_run c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.d = d;
    c.progress = progress;
    c.pctx = progress_ctx;
    c.cancel = cancel;
    c.t0 = dsq_calib_now();
    c.scheme = dsq_scheme_by_name(o->scheme ? o->scheme : "");
    if (!c.scheme) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "unknown scheme '%s'", o->scheme);
    if (!o->calib && !o->tokens && !o->load_stats)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "calibration needs data (--calib) or statistics (--stats)");
    if (o->load_stats && (o->save_stats || o->resume))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "--stats cannot be combined with --save-stats or --resume");
    if (o->resume && !o->save_stats)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "--resume needs a statistics checkpoint (--save-stats)");
    if (!(o->alpha >= 0.0f && o->alpha <= 1.0f))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "alpha %g is outside [0, 1]", (double)o->alpha);
    if (o->min_expert_tokens < 0 || o->n_grid < 1 || o->n_grid > 1000 || o->awq_tokens < 0 || o->awq_expert_tokens < 0 ||
        o->awq_attn_seqs < -1 || o->awq_attn_seqs > 64 || o->awq_attn_seqlen < 0 || o->rollback < 0)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "bad calibration limits");
    c.flavor = c.scheme->id == DSQ_SCHEME_AWQ_W4A16 ? DSQ_GROUPS_AWQ : DSQ_GROUPS_SMOOTH;
    c.moe_all = o->moe_calib_all;

    dsq_calib_result *r = calloc(1, sizeof *r);
    if (!r) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    c.r = r;
    dsq_model_opts mo;
    dsq_model_opts_default(&mo);
    mo.lazy = 1;
    mo.threads = o->threads;
    mo.fp8_as_f32 = o->gptq != 0;   /* GPTQ rounds the weights the converter reads (exact fp8 * scale) */
    int rc = dsq_model_open(&c.m, model_path, &mo, d);
    if (rc == DSQ_OK) {
        c.cfg = dsq_model_get_config(c.m);
        r->n_layers = (int)c.cfg->num_hidden_layers;
        r->cov = calloc((size_t)r->n_layers + 1, sizeof *r->cov);
        r->cov_n = calloc((size_t)r->n_layers + 1, sizeof *r->cov_n);
        if (!r->cov || !r->cov_n) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    int interrupted = 0;
    if (rc == DSQ_OK && o->load_stats) {
        rc = dsq_stats_reader_open(&c.rd, o->load_stats, d);
        if (rc == DSQ_OK) rc = dsq_calib_check_stats_meta(&c);
        if (rc == DSQ_OK && o->own_stats) {   /* --resume of a finished checkpoint: same data and options */
            dsq_calib_data cd;
            rc = get_data(&c, model_path, &cd);
            if (rc == DSQ_OK) {
                rc = dsq_calib_check_own_stats(&c, &cd);
                dsq_calib_data_release(&cd);
            }
        }
        for (int l = 0; l < r->n_layers && rc == DSQ_OK; l++) {
            if (cancel && *cancel) rc = dsq_fail(d, DSQ_ERR_INTERRUPTED, NULL, NULL, -1, "calibration interrupted");
            else rc = dsq_calib_layer_from_file(&c, l);
        }
        dsq_stats_reader_close(c.rd);
        c.rd = NULL;
    } else if (rc == DSQ_OK) {
        rc = forward_run(&c, model_path, &interrupted);
    }
    if (rc == DSQ_OK) rc = dsq_calib_clip_map(&c);
    if (rc == DSQ_OK && o->rollback > 0) rc = dsq_calib_pick_rollback(&c);
    if (rc == DSQ_OK) {
        r->info = info_json(&c);
        if (!r->info) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    dsq_model_free(c.m);
    free(c.data_file);
    dsq_gptq_hset_release(&c.hs);
    dsq_gptq_moe_release(&c.moe);
    r->tot.seconds = dsq_calib_now() - c.t0;
    if (rc < 0) {
        dsq_calib_result_free(r);
        return rc;
    }
    *out = r;
    return DSQ_OK;
}
