/* gemm_many.c - several gemms as one pool job (scheme.h, dsq_gemm_many).
 *
 * Why: a decode step of a MoE layer is 3 x (top_k + shared) small gemms.
 * One at a time, each wakes the pool, prepares x on the caller's thread
 * (awq: the permutation; w4a8 / w8a8: int8 quantization) while the other
 * threads spin, and ends when its slowest thread does, so every gemm leaves
 * up to one row block of idle time per thread (a V3 layer runs 24 expert
 * gemms per token). Here the preparations run first (once
 * per distinct x, T and shape), then the row blocks of every task are one
 * list that the pool drains in one job: one wake-up and one tail per list.
 *
 * Each row block runs the scheme's split_rows, the same kernel on the same
 * rows as its gemm, so y is the gemm's bit for bit; tasks without a split
 * call their gemm after the job. */
#include "scheme.h"
#include "kernels.h"
#include "dsq_mem.h"

#include <stdlib.h>
#include <string.h>

/* tasks per pool job; more run in further jobs (same results) */
#define MANY_MAX 64

static size_t split_bytes(const dsq_gemm_task *t)
{
    const dsq_scheme *sc = t->v->scheme;
    if (!sc->split_size || t->T < 1) return 0;
    return dsq_align_up(sc->split_size(t->v, t->T), 64);
}

size_t dsq_gemm_many_scratch(const dsq_gemm_task *t, int n, int nthreads)
{
    size_t split = 0, other = 0;
    for (int i = 0; i < n && t; i++) {
        if (!t[i].v || !t[i].v->scheme) continue;
        size_t b = split_bytes(&t[i]);
        if (b) {
            split += b;
        } else {
            size_t g = t[i].v->scheme->gemm_scratch(t[i].v, t[i].T, nthreads);
            if (g > other) other = g;
        }
    }
    /* the unsplit gemms run after the job and reuse the whole buffer */
    return split > other ? split : other;
}

typedef struct many_job {
    const dsq_gemm_task *t;
    int ns;                       /* split tasks */
    int idx[MANY_MAX];            /* their task index */
    const void *prep[MANY_MAX];
    int64_t rb[MANY_MAX];         /* rows per block */
    size_t first[MANY_MAX + 1];   /* first block of each (prefix sums) */
    dsq_rowsplit split;
} many_job;

static void many_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    const many_job *j = ctx;
    const int64_t b = dsq_rowsplit_block(&j->split, item);
    if (b < 0) return;
    int lo = 0, hi = j->ns - 1;   /* the split task holding block b */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (j->first[mid] <= (size_t)b) lo = mid;
        else hi = mid - 1;
    }
    const dsq_gemm_task *t = &j->t[j->idx[lo]];
    const int64_t rows = t->v->shape.rows;
    int64_t n0 = ((int64_t)b - (int64_t)j->first[lo]) * j->rb[lo], n1 = n0 + j->rb[lo];
    if (n1 > rows) n1 = rows;
    t->v->scheme->split_rows(t->v, j->prep[lo], t->T, n0, n1, t->y);
}

/* Same prepared x: the same input and everything the preparation reads. */
static int same_prep(const dsq_gemm_task *a, const dsq_gemm_task *b)
{
    const dsq_qview *u = a->v, *v = b->v;
    return a->x == b->x && a->T == b->T && u->scheme == v->scheme && u->shape.cols == v->shape.cols &&
           u->layout.gsize == v->layout.gsize && u->layout.ngroups == v->layout.ngroups &&
           u->bf16_terms == v->bf16_terms && u->act_scale == v->act_scale && u->act_offset == v->act_offset;
}

static int many_chunk(const dsq_gemm_task *t, int n, dsq_pool *pool, uint8_t *scratch, size_t scratch_size)
{
    many_job j;
    j.t = t;
    j.ns = 0;
    size_t used = 0, nblocks = 0;
    double macs = 0.0;
    int64_t maxT = 1;
    for (int i = 0; i < n; i++) {
        const size_t b = split_bytes(&t[i]);
        if (!b) continue;
        const dsq_qview *v = t[i].v;
        const void *prep = NULL;
        for (int k = 0; k < j.ns && !prep; k++)
            if (same_prep(&t[j.idx[k]], &t[i])) prep = j.prep[k];
        if (!prep) {
            if (used + b > scratch_size) return DSQ_ERR_INVALID_ARG;   /* sized by dsq_gemm_many_scratch */
            v->scheme->split_prep(v, t[i].x, t[i].T, scratch + used);
            prep = scratch + used;
            used += b;
        }
        const int64_t rb = v->scheme->split_block(v, t[i].T);
        j.idx[j.ns] = i;
        j.prep[j.ns] = prep;
        j.rb[j.ns] = rb;
        j.first[j.ns] = nblocks;
        j.ns++;
        nblocks += (size_t)((v->shape.rows + rb - 1) / rb);
        macs += (double)v->shape.rows * (double)v->shape.cols * (double)t[i].T;
        if (t[i].T > maxT) maxT = t[i].T;
    }
    if (j.ns > 0) {
        j.first[j.ns] = nblocks;
        /* the whole list against the serial threshold of one gemm */
        dsq_pool *use = macs < (double)DSQ_GEMM_SERIAL_MACS ? NULL : pool;
        const size_t items = dsq_rowsplit_init(&j.split, nblocks, maxT, dsq_pool_size(use));
        dsq_pool_run(use, items, many_task, &j);
    }
    for (int i = 0; i < n; i++) {
        if (split_bytes(&t[i])) continue;
        const dsq_qview *v = t[i].v;
        const size_t need = v->scheme->gemm_scratch(v, t[i].T, dsq_pool_size(pool));
        DSQ_TRY(v->scheme->gemm(v, t[i].x, t[i].T, t[i].y, pool, need <= scratch_size ? scratch : NULL,
                                need <= scratch_size ? scratch_size : 0));
    }
    return DSQ_OK;
}

int dsq_gemm_many(const dsq_gemm_task *t, int n, dsq_pool *pool, void *scratch, size_t scratch_size)
{
    if (n < 0 || (n > 0 && !t)) return DSQ_ERR_INVALID_ARG;
    for (int i = 0; i < n; i++)
        if (!t[i].v || !t[i].v->scheme || t[i].T < 0 || (t[i].T > 0 && (!t[i].x || !t[i].y)))
            return DSQ_ERR_INVALID_ARG;
    int rc = DSQ_OK;
    for (int i0 = 0; i0 < n && rc == DSQ_OK; i0 += MANY_MAX) {
        const int m = n - i0 < MANY_MAX ? n - i0 : MANY_MAX;
        const size_t need = dsq_gemm_many_scratch(t + i0, m, dsq_pool_size(pool));
        void *own = NULL, *s = scratch;
        size_t ss = scratch_size;
        if (!s || ss < need) {
            s = own = dsq_aligned_alloc(need ? need : 64);
            ss = need;
            if (!own) return DSQ_ERR_NOMEM;
        }
        rc = many_chunk(t + i0, m, pool, s, ss);
        free(own);
    }
    return rc;
}
