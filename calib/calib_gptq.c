/* calib_gptq.c - the parallel GPTQ phase of a fresh layer: the layer's
 * queued jobs grouped into tasks that share a factor, solved on the pool
 * within the memory budget, then checkpointed and kept in job order. */
#include "calib_int.h"

#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Consecutive jobs with the same input site, width and folded in_scale share
 * one factor (gate/up of an expert, q_a/kv_a): they form one task, solved in
 * order by one thread. Tasks are independent, so the pool runs them in any
 * order and on any thread with the same bytes. */
static int same_factor(const gjob *a, const gjob *b)
{
    if (a->l->in != b->l->in || strcmp(a->site, b->site) != 0) return 0;
    if (!a->t->in_scale || !b->t->in_scale) return !a->t->in_scale && !b->t->in_scale;
    return !memcmp(a->t->in_scale, b->t->in_scale, (size_t)a->l->in * sizeof(float));
}

typedef struct gphase {
    calib_run *c;
    const dsq_layer *ly;
    gjob *jobs;
    size_t *start;          /* task k: jobs [start[k], start[k + 1]) */
    size_t ntasks;
    _Atomic size_t next;    /* the next task a lane takes */
    _Atomic int stop;       /* a task failed: the lanes take no more */
    int *rc;                /* per task */
    dsq_diag *diag;         /* per task: dsq_diag is not shared between threads */
    uint64_t *bytes;        /* per task: its peak (task_bytes) */
    uint64_t budget, used;  /* ram_limit; held by running tasks (under mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
} gphase;

/* One task: its Hessian (copied from the collected ones, or built from the
 * expert's kept rows), its factor, then each job's solve + pack. The gate/up
 * gemms of a down Hessian run serially (pool NULL): the pool is busy with us. */
static int gptq_task(gphase *p, size_t k)
{
    calib_run *c = p->c;
    dsq_diag *d = &p->diag[k];
    gjob *j0 = &p->jobs[p->start[k]];
    const dsq_linear *l0 = j0->l;
    size_t nh = (size_t)l0->in * (size_t)l0->in;
    int e = dsq_calib_expert_of(l0->name);
    int routed = e >= 0 && c->moe.idx;
    uint64_t rows = 0;
    const double *h0 = routed ? NULL : dsq_gptq_hset_find(&c->hs, j0->site, l0->in, &rows);
    if (!routed && (!h0 || rows == 0)) return DSQ_OK;   /* saw no tokens: RTN */
    double *h = malloc(nh * sizeof *h);
    if (!h) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, l0->name, -1, "out of memory for GPTQ");
    int rc = DSQ_OK;
    if (h0) memcpy(h, h0, nh * sizeof *h);
    else if (l0 == &p->ly->experts[e].down)
        rc = dsq_gptq_moe_hessian_down(&c->moe, e, &p->ly->experts[e].gate, &p->ly->experts[e].up, NULL, h, &rows);
    else rc = dsq_gptq_moe_hessian_in(&c->moe, e, h, &rows);
    if (rc < 0 || rows == 0) {
        free(h);
        return rc < 0 ? dsq_fail(d, rc, NULL, l0->name, -1, "cannot build the GPTQ Hessian") : DSQ_OK;
    }
    dsq_gptq_hess_scale(h, l0->in, j0->t->in_scale);
    dsq_gptq_factor f;
    rc = dsq_gptq_factor_init(&f, h, l0->in, c->o->gptq_damp, d);
    free(h);
    if (rc < 0) return dsq_fail(d, rc, NULL, l0->name, -1, "GPTQ failed");
    for (size_t i = p->start[k]; i < p->start[k + 1] && rc == DSQ_OK; i++) {
        gjob *j = &p->jobs[i];
        const dsq_linear *l = j->l;
        float *w = malloc((size_t)l->out * (size_t)l->in * sizeof *w);
        if (!w) {
            rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, l->name, -1, "out of memory for GPTQ");
            break;
        }
        l->w.scheme->dequantize(&l->w, 0, l->out, w);
        rc = dsq_calib_apply_rows(j->t, 0, l->out, l->in, w);
        dsq_gptq_opts go = { c->o->gptq_damp, 0, j->t->clip, j->t->importance, dsq_calib_search_mode(c->o, j->sc) };
        dsq_qparams qp;
        dsq_qparams_init(&qp);
        dsq_calib_qparams(j->t, &qp);
        dsq_gptq_report rep;
        if (rc == DSQ_OK) rc = dsq_gptq_quantize_f(j->sc, &j->sh, w, &f, &go, &qp, j->blob, &rep, d);
        free(w);
        if (rc < 0) rc = dsq_fail(d, rc, NULL, l->name, -1, "GPTQ failed");
        else {
            j->done = 1;
            j->rtn = rep.rtn_fallback;
        }
    }
    dsq_gptq_factor_release(&f);
    return rc;
}

static void gptq_lane(void *ctx, size_t item, int tid)
{
    (void)item;
    (void)tid;
    gphase *p = ctx;
    for (;;) {
        if (atomic_load(&p->stop)) return;
        size_t k = atomic_fetch_add(&p->next, 1);
        if (k >= p->ntasks) return;
        /* memory: wait until the task fits the budget (alone it always runs) */
        pthread_mutex_lock(&p->mu);
        while (p->used > 0 && p->used + p->bytes[k] > p->budget) pthread_cond_wait(&p->cv, &p->mu);
        p->used += p->bytes[k];
        pthread_mutex_unlock(&p->mu);
        dsq_diag_clear(&p->diag[k]);
        p->rc[k] = gptq_task(p, k);
        pthread_mutex_lock(&p->mu);
        p->used -= p->bytes[k];
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        if (p->rc[k] < 0) atomic_store(&p->stop, 1);
    }
}

/* Bytes one task holds at its peak: its H (factored in place) and U (8 + 4
 * bytes per H element), the weights and their rounded copy, and the gather
 * buffers of a routed down Hessian. */
static uint64_t task_bytes(const calib_run *c, const gphase *p, size_t k)
{
    uint64_t b = 0;
    for (size_t i = p->start[k]; i < p->start[k + 1]; i++) {
        const dsq_linear *l = p->jobs[i].l;
        uint64_t in = (uint64_t)l->in, out = (uint64_t)l->out;
        uint64_t v = 12 * in * in + 8 * out * in + DSQ_GPTQ_GATHER * 4 * ((uint64_t)c->moe.in + 2 * in);
        if (v > b) b = v;
    }
    return b;
}

int dsq_calib_gptq_phase(lin_ctx *x)
{
    calib_run *c = x->c;
    gphase p;
    memset(&p, 0, sizeof p);
    p.c = c;
    p.ly = x->ly;
    p.jobs = x->jobs;
    for (size_t i = 0; i < x->njobs; i++) x->jobs[i].t = &c->r->e[x->jobs[i].ti];
    p.start = malloc((x->njobs + 1) * sizeof *p.start);
    if (!p.start) return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    for (size_t i = 0; i < x->njobs; i++)
        if (i == 0 || !same_factor(&x->jobs[i - 1], &x->jobs[i])) p.start[p.ntasks++] = i;
    p.start[p.ntasks] = x->njobs;
    p.rc = calloc(p.ntasks, sizeof *p.rc);
    p.diag = calloc(p.ntasks, sizeof *p.diag);
    p.bytes = calloc(p.ntasks, sizeof *p.bytes);
    if (!p.rc || !p.diag || !p.bytes) {
        free(p.start);
        free(p.rc);
        free(p.diag);
        free(p.bytes);
        return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    /* lanes: the pool's threads; running tasks together stay within
     * ram_limit (gptq_lane waits), so at most ram_limit / the smallest task */
    uint64_t small = UINT64_MAX;
    for (size_t k = 0; k < p.ntasks; k++) {
        p.bytes[k] = task_bytes(c, &p, k);
        if (p.bytes[k] < small) small = p.bytes[k];
    }
    p.budget = c->o->ram_limit;
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    dsq_pool *pool = dsq_model_pool(c->m);
    size_t lanes = (size_t)dsq_pool_size(pool), cap = (size_t)(p.budget / (small ? small : 1));
    if (lanes > cap) lanes = cap;
    if (lanes > p.ntasks) lanes = p.ntasks;
    if (lanes < 1) lanes = 1;
    if ((int)lanes > c->r->tot.gptq_lanes) c->r->tot.gptq_lanes = (int)lanes;
    /* potrf/potri results depend on OpenBLAS' own thread count: one per call */
    int obt = openblas_get_num_threads();
    openblas_set_num_threads(1);
    double t0 = dsq_calib_now(), c0 = dsq_calib_cpu_now();
    if (lanes == 1) gptq_lane(&p, 0, 0);
    else dsq_pool_run(pool, lanes, gptq_lane, &p);
    c->r->tot.seconds_gptq_solve += dsq_calib_now() - t0;
    c->r->tot.cpu_gptq_solve += dsq_calib_cpu_now() - c0;
    c->r->tot.seconds_gptq += dsq_calib_now() - t0;
    openblas_set_num_threads(obt);
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv);
    int rc = DSQ_OK;
    for (size_t k = 0; k < p.ntasks && rc == DSQ_OK; k++)
        if (p.rc[k] < 0) {
            *c->d = p.diag[k];
            rc = p.rc[k];
        }
    /* checkpoint and keep in job order, on this thread */
    for (size_t i = 0; i < x->njobs && rc == DSQ_OK; i++) {
        gjob *j = &x->jobs[i];
        if (!j->done) continue;
        c->r->tot.gptq_rtn += (size_t)j->rtn;
        if (c->w) rc = dsq_stats_writer_put(c->w, j->name, j->blob, j->bs, 1, 0, c->d);
        if (rc == DSQ_OK) rc = dsq_calib_gptq_keep(c, j->t, j->sc, &j->sh, j->blob, j->bs);
    }
    free(p.start);
    free(p.rc);
    free(p.diag);
    free(p.bytes);
    return rc;
}
