/* calib_linear.c - per-linear entries: each linear's scheme, fallback,
 * clip decision (searched on X^T X, checked on sampled outputs, or read
 * back), static activation range, and GPTQ job (queued for calib_gptq.c or
 * read back from the statistics). */
#include "calib_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void dsq_calib_each_linear(const dsq_layer *ly, int n_experts, lin_fn fn, void *ctx)
{
    const dsq_linear *one[] = { &ly->q, &ly->k, &ly->v, &ly->q_a, &ly->q_b, &ly->kv_a, &ly->kv_b, &ly->o };
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++)
        if (one[i]->name) fn(ctx, one[i]);
    const dsq_mlp *mlps[2] = { &ly->mlp, ly->has_shared ? &ly->shared : NULL };
    if (ly->is_moe && ly->router.name) fn(ctx, &ly->router);
    for (int e = -2; e < (ly->is_moe ? n_experts : 0); e++) {
        const dsq_mlp *x = e == -2 ? mlps[0] : e == -1 ? mlps[1] : &ly->experts[e];
        if (!x) continue;
        if (x->gate.name) fn(ctx, &x->gate);
        if (x->up.name) fn(ctx, &x->up);
        if (x->down.name) fn(ctx, &x->down);
    }
}

static int add_fallback(calib_run *c, int layer, int e, uint64_t tokens)
{
    dsq_calib_result *r = c->r;
    if (r->nfb == r->cfb) {
        size_t nc = r->cfb ? r->cfb * 2 : 16;
        char **a = realloc(r->fb_name, nc * sizeof *a);
        if (!a) return DSQ_ERR_NOMEM;
        r->fb_name = a;
        char **b = realloc(r->fb_reason, nc * sizeof *b);
        if (!b) return DSQ_ERR_NOMEM;
        r->fb_reason = b;
        r->cfb = nc;
    }
    char nb[96], rb[160];
    snprintf(nb, sizeof nb, "model.layers.%d.mlp.experts.%d", layer, e);
    snprintf(rb, sizeof rb, "%llu calibration tokens (< %d): round-to-nearest", (unsigned long long)tokens,
             c->o->min_expert_tokens);
    r->fb_name[r->nfb] = strdup(nb);
    r->fb_reason[r->nfb] = strdup(rb);
    if (!r->fb_name[r->nfb] || !r->fb_reason[r->nfb]) {
        free(r->fb_name[r->nfb]);
        free(r->fb_reason[r->nfb]);
        return DSQ_ERR_NOMEM;
    }
    r->nfb++;
    return DSQ_OK;
}

/* The w8a8 range of an expert input without its own statistics: the router
 * site (post_attention_layernorm output over all tokens) for gate/up, the
 * union of calibrated experts' down inputs for down. */
static int fallback_range(lin_ctx *x, const dsq_linear *l, const float **mn, const float **mx)
{
    calib_run *c = x->c;
    size_t k = strlen(l->name);
    if (k > 16 && strcmp(l->name + k - 16, "down_proj.weight") == 0) {
        if (!x->dmin) {
            x->dmin = dsq_calib_own(c->r, (size_t)l->in * sizeof(float));
            x->dmax = dsq_calib_own(c->r, (size_t)l->in * sizeof(float));
            if (!x->dmin || !x->dmax) return DSQ_ERR_NOMEM;
            int any = 0;
            for (int i = 0; i < x->ls->nsites; i++) {
                const dsq_act_stats *s = &x->ls->sites[i];
                int e = dsq_calib_expert_of(s->name);
                size_t sn = strlen(s->name);
                if (s->count == 0 || s->in != l->in || sn < 16 || strcmp(s->name + sn - 16, "down_proj.weight") ||
                    (e >= 0 && dsq_calib_expert_fallback(c, x->ls, e)))
                    continue;
                for (int64_t j = 0; j < l->in; j++) {
                    if (!any || s->vmin[j] < x->dmin[j]) x->dmin[j] = s->vmin[j];
                    if (!any || s->vmax[j] > x->dmax[j]) x->dmax[j] = s->vmax[j];
                }
                any = 1;
            }
            if (!any) return DSQ_ERR_DATA;
        }
        *mn = x->dmin;
        *mx = x->dmax;
        return DSQ_OK;
    }
    char rs[400];
    snprintf(rs, sizeof rs, "model.layers.%d.mlp.gate.weight", x->ls->layer);
    const dsq_act_stats *s = dsq_layer_stats_find(x->ls, rs);
    if (!s || s->count == 0 || s->in != l->in) return DSQ_ERR_DATA;
    *mn = s->vmin;
    *mx = s->vmax;
    return DSQ_OK;
}

static int gptq_entry(lin_ctx *x, const dsq_linear *l, dsq_calib_tensor *t, const dsq_scheme *sc, int32_t gs,
                      const char *site);
/* Append a tensor's clip choices to the result's file (see struct dsq_calib_result, calib_int.h). */
static int clip_store(calib_run *c, const dsq_calib_tensor *t, const uint8_t *idx, size_t n)
{
    dsq_calib_result *r = c->r;
    const size_t k = (size_t)(t - r->e);
    if (r->clip_fd1 <= 0) {
        const char *tmp = getenv("TMPDIR");
        char tpl[4096];
        snprintf(tpl, sizeof tpl, "%s/dsq-clip-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        int fd = mkstemp(tpl);
        if (fd < 0) return dsq_fail_errno(c->d, errno, "$TMPDIR", "cannot create the clip file");
        unlink(tpl);   /* anonymous: gone when closed */
        r->clip_fd1 = fd + 1;
    }
    if (k >= r->clip_noff) {
        size_t nc = r->cap > k + 1 ? r->cap : k + 1;
        int64_t *nv = realloc(r->clip_off, nc * sizeof *nv);
        if (!nv) return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        for (size_t i = r->clip_noff; i < nc; i++) nv[i] = -1;
        r->clip_off = nv;
        r->clip_noff = nc;
    }
    for (size_t done = 0; done < n;) {
        ssize_t w = pwrite(r->clip_fd1 - 1, idx + done, n - done, (off_t)(r->clip_used + done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return dsq_fail_errno(c->d, w < 0 ? errno : ENOSPC, "$TMPDIR", "cannot write the clip file");
        done += (size_t)w;
    }
    r->clip_off[k] = (int64_t)r->clip_used;
    r->clip_used += n;
    return DSQ_OK;
}

/* End of the run: map the clip file and point the entries into it. */
int dsq_calib_clip_map(calib_run *c)
{
    dsq_calib_result *r = c->r;
    if (!r->clip_used) return DSQ_OK;
    void *p = mmap(NULL, (size_t)r->clip_used, PROT_READ, MAP_SHARED, r->clip_fd1 - 1, 0);
    if (p == MAP_FAILED) return dsq_fail_errno(c->d, errno, "$TMPDIR", "cannot map the clip file");
    r->clip_map = p;
    r->clip_maplen = (size_t)r->clip_used;
    close(r->clip_fd1 - 1);
    r->clip_fd1 = 0;
    for (size_t i = 0; i < r->n && i < r->clip_noff; i++)
        if (r->clip_off[i] >= 0) r->e[i].clip_idx = r->clip_map + r->clip_off[i];
    return DSQ_OK;
}

/* An optional statistics entry of this run (--stats file or checkpoint):
 * its error goes to *tmp, so an absent one (DSQ_ERR_NOT_FOUND) is no error. */
int dsq_calib_stats_try(calib_run *c, const char *name, void **buf, size_t *n, dsq_diag *tmp)
{
    dsq_diag_clear(tmp);
    return c->rd ? dsq_stats_reader_get(c->rd, name, buf, n, NULL, tmp)
                 : dsq_stats_writer_get(c->w, name, buf, n, NULL, tmp);
}

/* AWQ clip on X^T X (awq.h): searched now (fresh statistics with X^T X
 * blocks) or read back from the statistics ("clipidx"); *done = 0 leaves the
 * tensor to the older diagonal-proxy path (groups that do not fit a block,
 * statistics without X^T X or without the entry). */
static int clip_cov(lin_ctx *x, const dsq_linear *l, const dsq_scheme *sc, int32_t gs, const dsq_act_stats *site,
                    dsq_calib_tensor *t, int *done)
{
    calib_run *c = x->c;
    *done = 0;
    dsq_qshape sh;
    dsq_qlayout L;
    if (dsq_qshape_init(&sh, sc, l->out, l->in, gs) < 0 || dsq_qlayout_get(sc, &sh, &L) < 0 ||
        !dsq_awq_clip_supported(l->in, (int32_t)L.gsize))
        return DSQ_OK;
    const size_t n = (size_t)l->out * (size_t)L.ngroups;
    char name[512];
    dsq_stats_name(name, sizeof name, x->ls->layer, "clipidx", l->name);
    uint8_t *idx = NULL;
    int rc = DSQ_OK;
    if (x->fresh) {
        if (!site->cov) return DSQ_OK;
        idx = malloc(n);
        float *w = malloc((size_t)l->out * (size_t)l->in * sizeof *w);
        if (!idx || !w) {
            free(w);
            free(idx);
            return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, l->name, -1, "out of memory for the clip search");
        }
        l->w.scheme->dequantize(&l->w, 0, l->out, w);
        rc = dsq_calib_apply_rows(t, 0, l->out, l->in, w);   /* the weights the converter will see */
        if (rc == DSQ_OK) rc = dsq_awq_clip_search(w, l->out, l->in, (int32_t)L.gsize, t->in_scale, site,
                                                   dsq_calib_search_mode(c->o, sc), t->importance, idx, NULL, NULL);
        free(w);
        if (rc < 0) rc = dsq_fail(c->d, rc, NULL, l->name, -1, "clip search failed (%s)", dsq_strerror(rc));
        if (rc == DSQ_OK && c->w) rc = dsq_stats_writer_put(c->w, name, idx, n, 1, 0, c->d);
    } else {
        void *buf = NULL;
        size_t nb = 0;
        dsq_diag tmp;   /* an absent entry is no error: that tensor keeps the older clip */
        int g = dsq_calib_stats_try(c, name, &buf, &nb, &tmp);
        if (g == DSQ_ERR_NOT_FOUND) return DSQ_OK;
        if (g < 0) {   /* an unreadable file must not turn a resumed run into another result */
            if (c->d) *c->d = tmp;
            return g;
        }
        int bad = nb != n;
        for (size_t i = 0; i < nb && !bad; i++) bad = ((uint8_t *)buf)[i] >= DSQ_AWQ_CLIP_CANDIDATES;
        if (bad) {   /* hostile or foreign file */
            free(buf);
            return dsq_fail(c->d, DSQ_ERR_FORMAT, NULL, name, -1, "clip choices do not fit the tensor");
        }
        idx = buf;
    }
    if (rc == DSQ_OK) rc = clip_store(c, t, idx, n);   /* t->clip_idx points into it after the calib_run */
    free(idx);
    if (rc < 0) return rc;
    t->clip_gs = (int32_t)L.gsize;
    *done = 1;
    return DSQ_OK;
}

/* A GPTQ blob (solved or read back) becomes the tensor's. */
int dsq_calib_gptq_keep(calib_run *c, dsq_calib_tensor *t, const dsq_scheme *sc, const dsq_qshape *sh, uint8_t *blob,
                     size_t bs)
{
    t->gptq_blob = blob;
    t->gptq_blob_size = bs;
    t->gptq_scheme = sc->id;
    t->gptq_group = sh->group_size;
    c->r->tot.gptq_tensors++;
    return DSQ_OK;
}

static int linear_entry(lin_ctx *x, const dsq_linear *l)
{
    calib_run *c = x->c;
    dsq_calib_result *r = c->r;
    const dsq_scheme *sc;
    int32_t gs;
    DSQ_TRY(dsq_calib_target_of(c, l, &sc, &gs));
    dsq_calib_tensor *t = (dsq_calib_tensor *)dsq_calib_lookup(r, l->name);
    if (!sc) return DSQ_OK;   /* float: only the folded scales (if any) matter */
    if (!t) DSQ_TRY(dsq_calib_entry(r, l->name, l->out, l->in, &t, c->d));
    char sn[400];
    const dsq_act_stats *site = dsq_layer_stats_find(x->ls, dsq_calib_site_of(l->name, c->cfg->q_lora_rank > 0, sn,
                                                                                sizeof sn));
    int e = dsq_calib_expert_of(l->name);
    int fb = dsq_calib_expert_fallback(c, x->ls, e);
    int have = site && site->count > 0 && !fb;
    if (fb) {
        t->status = DSQ_CALIB_FALLBACK_RTN;
        t->reason = "expert saw too few calibration tokens";
        if (!x->fb_done[e]) {
            x->fb_done[e] = 1;
            if (add_fallback(c, x->ls->layer, e, x->ls->expert_tokens[e]) < 0)
                return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        }
    }
    if (have) t->range_search = dsq_calib_search_mode(c->o, sc);   /* fallbacks keep RTN's default */
    int clip_scheme = sc->id == DSQ_SCHEME_AWQ_W4A16 || sc->id == DSQ_SCHEME_W4A8;
    if (clip_scheme && c->o->clip && have) {
        float *imp = dsq_calib_own(r, (size_t)l->in * sizeof *imp);
        if (!imp) return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        for (int64_t j = 0; j < l->in; j++) {
            double v = dsq_act_stats_rms(site, j);
            if (t->in_scale) v /= t->in_scale[j];
            imp[j] = isfinite(v) && v >= 0.0 ? (float)v : 0.0f;
        }
        t->importance = imp;
        int use = sc->id == DSQ_SCHEME_W4A8 || dsq_awq_clip_allowed(l->name);
        int cov = 0;
        if (use && sc->id == DSQ_SCHEME_AWQ_W4A16) DSQ_TRY(clip_cov(x, l, sc, gs, site, t, &cov));
        if (cov) {
            use = 0;   /* the clip is in clip_idx, not a quantizer search */
            x->decision = 2;
        } else if (use && x->fresh) {
            DSQ_TRY(dsq_clip_check(l, sc, gs, t->in_scale, imp, dsq_calib_search_mode(c->o, sc), site, dsq_model_pool(c->m), &use,
                                   NULL, NULL, c->d));
        } else if (use && x->clip_in && x->nclip < x->nclip_in && x->clip_in[x->nclip] <= 1) {
            use = x->clip_in[x->nclip];
        }
        t->clip = use;
        if (!cov) x->decision = (uint8_t)use;
    }
    if (sc->act == DSQ_ACT_INT8_STATIC) {
        const float *mn = NULL, *mx = NULL;
        if (have) {
            mn = site->vmin;
            mx = site->vmax;
        } else {
            int rc = fallback_range(x, l, &mn, &mx);
            if (rc == DSQ_ERR_NOMEM) return dsq_fail(c->d, rc, NULL, NULL, -1, "out of memory");
            if (rc < 0)
                return dsq_fail(c->d, DSQ_ERR_DATA, NULL, l->name, -1,
                                "no calibration range for static activation quantization (the input saw no tokens)");
            if (!fb) {
                t->status = DSQ_CALIB_FALLBACK_RTN;
                t->reason = "input saw no tokens: layer-wide activation range";
            }
        }
        if (dsq_smooth_act_static(mn, mx, t->in_scale, l->in, &t->act_scale, &t->act_offset) < 0)
            return dsq_fail(c->d, DSQ_ERR_NONFINITE, NULL, l->name, -1, "activation range is not finite");
        t->has_act_static = 1;
    }
    if (c->o->gptq && have && sc->has_scales && sc->weight_bits <= 8) DSQ_TRY(gptq_entry(x, l, t, sc, gs, sn));
    return DSQ_OK;
}

/* GPTQ of one linear (calib.h): fresh runs queue a job (solved by
 * dsq_calib_gptq_phase once the layer's entries are made), later runs read the
 * checkpointed blob back. */
static int gptq_entry(lin_ctx *x, const dsq_linear *l, dsq_calib_tensor *t, const dsq_scheme *sc, int32_t gs,
                      const char *site)
{
    calib_run *c = x->c;
    dsq_qshape sh;
    size_t bs;
    DSQ_TRY(dsq_qshape_init(&sh, sc, l->out, l->in, gs));
    DSQ_TRY(sc->blob_size(&sh, &bs));
    char name[600];
    dsq_stats_name(name, sizeof name, x->ls->layer, "gptq", l->name);
    uint8_t *blob = dsq_calib_own(c->r, bs);
    if (!blob) return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    if (x->fresh) {
        if (x->njobs == x->capjobs) {
            size_t nc = x->capjobs ? x->capjobs * 2 : 64;
            gjob *nj = realloc(x->jobs, nc * sizeof *nj);
            if (!nj) return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
            x->jobs = nj;
            x->capjobs = nc;
        }
        gjob *j = &x->jobs[x->njobs];
        memset(j, 0, sizeof *j);
        j->l = l;
        j->ti = (size_t)(t - c->r->e);
        j->sc = sc;
        j->sh = sh;
        j->blob = blob;
        j->bs = bs;
        j->name = dsq_calib_own_str(c->r, name);
        j->site = dsq_calib_own_str(c->r, site);
        if (!j->name || !j->site) return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        x->njobs++;
        return DSQ_OK;
    }
    void *buf = NULL;
    size_t n = 0;
    int rc = c->rd ? dsq_stats_reader_get(c->rd, name, &buf, &n, NULL, c->d)
                   : dsq_stats_writer_get(c->w, name, &buf, &n, NULL, c->d);
    if (rc == DSQ_ERR_NOT_FOUND || (rc == DSQ_OK && n != bs)) {
        free(buf);
        dsq_diag_clear(c->d);
        return dsq_fail(c->d, DSQ_ERR_STATE, NULL, l->name, -1,
                        "the statistics file has no GPTQ result of this shape for this tensor "
                        "(made without --gptq or for another scheme): recompute it");
    }
    if (rc < 0) return rc;
    memcpy(blob, buf, bs);
    free(buf);
    dsq_qview v;   /* hostile file: the blob must be a valid one of this scheme and shape */
    DSQ_TRY(dsq_qview_init(&v, sc, &sh, blob, bs, c->d));
    return dsq_calib_gptq_keep(c, t, sc, &sh, blob, bs);
}

void dsq_calib_lin_cb(void *ctx, const dsq_linear *l)
{
    lin_ctx *x = ctx;
    if (x->rc < 0) return;
    x->decision = 255;
    double t0 = dsq_calib_now();
    x->rc = linear_entry(x, l);
    if (strstr(l->name, ".experts.") || strstr(l->name, ".shared_experts."))   /* the clip checks */
        x->c->r->tot.seconds_search_moe += dsq_calib_now() - t0;
    if (x->rc == DSQ_OK && x->nclip == x->capclip) {
        size_t nc = x->capclip ? x->capclip * 2 : 256;
        uint8_t *nv = realloc(x->clipv, nc);
        if (!nv) {
            x->rc = dsq_fail(x->c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
            return;
        }
        x->clipv = nv;
        x->capclip = nc;
    }
    if (x->rc == DSQ_OK) x->clipv[x->nclip++] = x->decision;
}
