/* calib_rollback.c - --rollback: each quantized linear's sensitivity
 * (measured or read back) and the choice of the most sensitive served
 * modules, which keep their folded scales and nothing a quantizer uses. */
#include "calib_int.h"

#include <stdlib.h>
#include <string.h>

/* --rollback: each quantized linear's sensitivity (sens.h), measured with
 * its final dsq_calib_entry (scales, clip, GPTQ blob) on fresh samples and kept in the
 * statistics ("L<l>/sens/<tensor>", one double), or read back from them. */
static int sens_entry(lin_ctx *x, const dsq_linear *l)
{
    calib_run *c = x->c;
    const dsq_scheme *sc;
    int32_t gs;
    DSQ_TRY(dsq_calib_target_of(c, l, &sc, &gs));
    dsq_calib_tensor *t = (dsq_calib_tensor *)dsq_calib_lookup(c->r, l->name);
    char unit[512];
    /* routed experts are never rolled back (sens.h): not measured, which
     * would cost ~4x the rest of the layer at 256 experts */
    if (!sc || !t || t->cols == 0 || !sc->has_scales || !dsq_sens_unit(l->name, unit, sizeof unit)) return DSQ_OK;
    char name[512];
    dsq_stats_name(name, sizeof name, x->ls->layer, "sens", l->name);
    if (x->fresh) {
        char sn[400];
        const dsq_act_stats *site =
            dsq_layer_stats_find(x->ls, dsq_calib_site_of(l->name, c->cfg->q_lora_rank > 0, sn, sizeof sn));
        double v = -1.0;
        /* a fallback expert saw too few tokens to rank it */
        if (t->status == DSQ_CALIB_CALIBRATED)
            DSQ_TRY(dsq_linear_sensitivity(l, sc, gs, t, site, dsq_model_pool(c->m), &v, c->d));
        if (v < 0.0 && t->status == DSQ_CALIB_CALIBRATED)
            return dsq_fail(c->d, DSQ_ERR_DATA, NULL, l->name, -1,
                            "no sampled calibration rows to measure the sensitivity on (--calib-rows 0?)");
        t->sensitivity = v;
        return c->w ? dsq_stats_writer_put(c->w, name, &v, sizeof v, 8, 0, c->d) : DSQ_OK;
    }
    void *buf = NULL;
    size_t nb = 0;
    dsq_diag tmp;
    int g = dsq_calib_stats_try(c, name, &buf, &nb, &tmp);
    if (g == DSQ_ERR_NOT_FOUND) {
        c->r->sens_missing++;
        return DSQ_OK;
    }
    if (g < 0) {
        if (c->d) *c->d = tmp;
        return g;
    }
    double v;
    int bad = nb != sizeof v;
    if (!bad) {
        memcpy(&v, buf, sizeof v);
        bad = !(v >= -1.0) || v > 1e30;   /* NaN, or not what sens_entry writes */
    }
    free(buf);
    if (bad) return dsq_fail(c->d, DSQ_ERR_FORMAT, NULL, name, -1, "sensitivity is not a finite number >= -1");
    t->sensitivity = v;
    return DSQ_OK;
}

void dsq_calib_sens_cb(void *ctx, const dsq_linear *l)
{
    lin_ctx *x = ctx;
    double t0 = dsq_calib_now();
    if (x->rc == DSQ_OK) x->rc = sens_entry(x, l);
    double dt = dsq_calib_now() - t0;
    x->c->r->tot.seconds_sens += dt;
    if (strstr(l->name, ".experts.") || strstr(l->name, ".shared_experts.")) x->c->r->tot.seconds_sens_moe += dt;
}

/* Mark the entries of the o->rollback most sensitive served modules
 * (sens.h dsq_sens_unit; calib.h rolled_back): they keep their folded
 * scales and lose everything that only a quantizer uses. */
int dsq_calib_pick_rollback(calib_run *c)
{
    dsq_calib_result *r = c->r;
    if (r->sens_missing)
        return dsq_fail(c->d, DSQ_ERR_STATE, c->o->load_stats, NULL, -1,
                        "the statistics hold no sensitivities for %zu quantized linears (collected without "
                        "--rollback); calibrate again with --calib and --rollback",
                        r->sens_missing);
    const size_t n = r->n ? r->n : 1;
    double *sens = malloc(n * sizeof *sens);
    char **unit = calloc(n, sizeof *unit);
    size_t *of = malloc(n * sizeof *of), *top = malloc(n * sizeof *top), nu = 0, chosen = 0;
    r->rb = malloc(n * sizeof *r->rb);
    int rc = sens && unit && of && top && r->rb ? DSQ_OK : DSQ_ERR_NOMEM;
    /* units in first-seen order, each with its members' largest sensitivity */
    for (size_t i = 0; i < r->n && rc == DSQ_OK; i++) {
        char key[512];
        of[i] = (size_t)-1;
        if (!(r->e[i].sensitivity >= 0.0) || !dsq_sens_unit(r->e[i].name, key, sizeof key)) continue;
        size_t u = 0;
        while (u < nu && strcmp(unit[u], key)) u++;   /* non-expert modules: a few hundred */
        if (u == nu) {
            if (!(unit[nu] = strdup(key))) {
                rc = DSQ_ERR_NOMEM;
                break;
            }
            sens[nu++] = -1.0;
        }
        if (r->e[i].sensitivity > sens[u]) sens[u] = r->e[i].sensitivity;
        of[i] = u;
    }
    if (rc == DSQ_OK) dsq_sens_top(sens, (const char *const *)unit, nu, (size_t)c->o->rollback, top, &chosen);
    for (size_t k = 0; k < chosen; k++)
        for (size_t i = 0; i < r->n; i++) {
            if (of[i] != top[k]) continue;
            dsq_calib_tensor *t = &r->e[i];
            t->rolled_back = 1;
            t->importance = NULL;
            t->clip = 0;
            t->clip_idx = NULL;
            t->has_act_static = 0;
            if (t->gptq_blob) r->tot.gptq_tensors--;
            t->gptq_blob = NULL;
            t->gptq_blob_size = 0;
            r->rb[r->nrb++] = i;
        }
    for (size_t u = 0; u < nu; u++) free(unit[u]);
    free(unit);
    free(sens);
    free(of);
    free(top);
    if (rc < 0) return dsq_fail(c->d, rc, NULL, NULL, -1, "out of memory");
    return DSQ_OK;
}
