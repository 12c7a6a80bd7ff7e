/* calib_layer.c - one layer: decide and fold every scaling group (searched
 * now or read back), then the per-linear entries, the GPTQ phase and the
 * sensitivities, and the layer's expert coverage. */
#include "calib_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int read_scale(calib_run *c, int layer, const dsq_scale_group *g, int kind, float *s)
{
    char name[512];
    dsq_stats_name(name, sizeof name, layer, "scale", g->prev);
    void *buf = NULL;
    size_t n = 0;
    uint32_t aux = 0;
    int rc = c->rd ? dsq_stats_reader_get(c->rd, name, &buf, &n, &aux, c->d)
                   : dsq_stats_writer_get(c->w, name, &buf, &n, &aux, c->d);
    if (rc == DSQ_ERR_NOT_FOUND)
        return dsq_fail(c->d, DSQ_ERR_STATE, c->rd ? dsq_stats_reader_path(c->rd) : NULL, name, -1,
                        "the statistics hold no searched scales for this group (they were collected for "
                        "another scheme); calibrate again with --calib");
    if (rc < 0) return rc;
    if (aux != (uint32_t)kind) rc = dsq_fail(c->d, DSQ_ERR_STATE, NULL, name, -1, "searched scales are of another kind");
    if (rc == DSQ_OK) rc = dsq_stats_decode_f32(buf, n, g->n, 1, name, s, c->d);
    free(buf);
    if (rc == DSQ_OK && !dsq_scales_ok(s, g->n))
        rc = dsq_fail(c->d, DSQ_ERR_FORMAT, NULL, name, -1, "scale out of range");
    /* the search's losses, for the summary (optional) */
    dsq_stats_name(name, sizeof name, layer, "loss", g->prev);
    buf = NULL;
    dsq_diag tmp;
    if (rc == DSQ_OK && dsq_calib_stats_try(c, name, &buf, &n, &tmp) == DSQ_OK) {
        double loss[2];
        if (n == sizeof loss) {
            memcpy(loss, buf, sizeof loss);
            if (isfinite(loss[0]) && isfinite(loss[1])) {
                c->r->tot.loss_identity += loss[0];
                c->r->tot.loss_best += loss[1];
            }
        }
    }
    free(buf);
    return rc;
}

/* Decide and fold every group of a loaded layer; fresh: ls has token
 * samples and the searches run (results go to the writer), else searched
 * scales are read back. */
int dsq_calib_do_layer(calib_run *c, int layer, const dsq_layer_stats *ls, int fresh)
{
    dsq_group_list gl;
    DSQ_TRY(dsq_groups_build(c->m, layer, c->flavor, &gl, c->d));
    int rc = DSQ_OK;
    float *s = NULL, *wmax = NULL;
    dsq_search_opts so = { 0, c->o->n_grid, dsq_calib_search_target, c, dsq_model_pool(c->m), c->cancel,
                           dsq_calib_attn_seqs(c) > 0, dsq_calib_search_mode(c->o, c->scheme) };
    double ts = dsq_calib_now();
    for (int i = 0; i < gl.n && rc == DSQ_OK; i++) {
        const dsq_scale_group *g = &gl.v[i];
        double tg = dsq_calib_now();
        int moe = g->loss == DSQ_LOSS_MOE || g->expert >= 0 || (g->prev_lin && strstr(g->prev, ".shared_experts."));
        int method;
        rc = dsq_calib_group_method(c, g, &method);
        if (rc < 0 || method == M_NONE) continue;
        const dsq_act_stats *site = dsq_layer_stats_find(ls, g->site);
        if (dsq_calib_expert_fallback(c, ls, g->expert) || !site || site->count == 0) {
            c->r->tot.groups_identity++;
            continue;
        }
        float *ns = realloc(s, (size_t)g->n * sizeof *s), *nw = realloc(wmax, (size_t)g->n * sizeof *wmax);
        if (ns) s = ns;
        if (nw) wmax = nw;
        if (!ns || !nw) {
            rc = dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
            break;
        }
        if (method == M_SMOOTH_FIXED) {
            rc = dsq_group_weight_stats(g, 1, 0, wmax, NULL, so.pool, c->d);
            if (rc == DSQ_OK) dsq_smooth_scales(site->absmax, wmax, g->n, c->o->alpha, s);
            c->r->tot.groups_smoothed++;
        } else {
            int kind = method == M_AWQ               ? DSQ_SEARCH_AWQ
                       : method == M_SMOOTH_SEARCH_W8 ? DSQ_SEARCH_SMOOTH
                       : method == M_FLEX             ? DSQ_SEARCH_FLEX
                                                      : DSQ_SEARCH_BOTH;
            if (fresh) {
                dsq_search_report rep;
                so.kind = kind;
                dsq_calib_report(c, layer, -1, "search");
                rc = dsq_scale_search(g, ls, &so, s, &rep, c->d);
                double loss[2] = { rep.loss_identity, rep.loss_best };
                if (rc == DSQ_OK && c->w) {
                    char name[512];
                    dsq_stats_name(name, sizeof name, layer, "scale", g->prev);
                    rc = dsq_stats_writer_put(c->w, name, s, (size_t)g->n * sizeof *s, 4, (uint32_t)kind, c->d);
                    dsq_stats_name(name, sizeof name, layer, "loss", g->prev);
                    if (rc == DSQ_OK) rc = dsq_stats_writer_put(c->w, name, loss, sizeof loss, 8, 0, c->d);
                }
                c->r->tot.loss_identity += loss[0];
                c->r->tot.loss_best += loss[1];
            } else {
                rc = read_scale(c, layer, g, kind, s);
            }
            c->r->tot.groups_searched++;
        }
        if (rc == DSQ_OK) rc = dsq_calib_apply_group(c, g, s);
        if (moe) c->r->tot.seconds_search_moe += dsq_calib_now() - tg;
    }
    free(s);
    free(wmax);
    if (rc == DSQ_OK) {
        /* per-linear entries; clipping decided on sampled outputs (fresh) or
         * read back with the statistics ("L<l>/clip", one byte per linear) */
        const dsq_layer *ly = &dsq_model_weights(c->m)->layers[layer];
        lin_ctx x;
        memset(&x, 0, sizeof x);
        x.c = c;
        x.ls = ls;
        x.ly = ly;
        x.fresh = fresh;
        x.fb_done = calloc((size_t)(ls->n_experts + 1), 1);
        char name[512];
        dsq_stats_name(name, sizeof name, layer, "clip", NULL);
        void *cin = NULL;
        size_t ncin = 0;
        if (!fresh) {
            dsq_diag tmp;
            if (dsq_calib_stats_try(c, name, &cin, &ncin, &tmp) == DSQ_OK) {
                x.clip_in = cin;
                x.nclip_in = ncin;
            }
        }
        if (!x.fb_done) rc = dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        else dsq_calib_each_linear(ly, ls->n_experts, dsq_calib_lin_cb, &x);
        if (rc == DSQ_OK) rc = x.rc;
        if (rc == DSQ_OK && x.njobs) rc = dsq_calib_gptq_phase(&x);
        if (rc == DSQ_OK && c->o->rollback > 0) {
            dsq_calib_each_linear(ly, ls->n_experts, dsq_calib_sens_cb, &x);
            rc = x.rc;
        }
        if (rc == DSQ_OK && fresh && c->w) rc = dsq_stats_writer_put(c->w, name, x.clipv, x.nclip, 1, 0, c->d);
        free(cin);
        free(x.clipv);
        free(x.fb_done);
        free(x.jobs);
    }
    c->r->tot.seconds_search += dsq_calib_now() - ts;
    if (rc == DSQ_OK && ls->n_experts > 0) {
        uint64_t *cv = malloc((size_t)ls->n_experts * sizeof *cv);
        if (!cv) rc = dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        else {
            memcpy(cv, ls->expert_tokens, (size_t)ls->n_experts * sizeof *cv);
            free(c->r->cov[layer]);
            c->r->cov[layer] = cv;
            c->r->cov_n[layer] = ls->n_experts;
        }
    }
    c->r->tot.layers++;
    dsq_groups_release(&gl);
    return rc;
}
