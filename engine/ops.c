/* ops.c - elementwise ops, MoE routing and the attention kernel (ops.h).
 * RoPE lives in rope.c. */
#include "ops.h"
#include "dsq_thread.h"

#include <cblas.h>

#include <float.h>
#include <math.h>
#include <string.h>

/* ---- elementwise ------------------------------------------------------ */

void dsq_rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
    /* torch: x.float() * rsqrt(mean(x^2) + eps) * weight. The sum runs in
     * double so the result does not depend on summation order. */
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / n + (double)eps));
    if (w) {
        for (int i = 0; i < n; i++) out[i] = x[i] * inv * w[i];
    } else {
        for (int i = 0; i < n; i++) out[i] = x[i] * inv;
    }
}

void dsq_rmsnorm_rows(float *out, const float *x, const float *w, int rows, int n, float eps)
{
    for (int r = 0; r < rows; r++)
        dsq_rmsnorm(out + (size_t)r * n, x + (size_t)r * n, w, n, eps);
}

typedef struct addnorm_job {
    float *x, *out;
    const float *add, *w;
    int n;
    float eps;
} addnorm_job;

static void addnorm_task(void *ctx, size_t r, int tid)
{
    (void)tid;
    const addnorm_job *j = ctx;
    float *x = j->x + r * (size_t)j->n;
    if (j->add) {
        const float *a = j->add + r * (size_t)j->n;
        for (int i = 0; i < j->n; i++) x[i] += a[i];
    }
    if (j->out) dsq_rmsnorm(j->out + r * (size_t)j->n, x, j->w, j->n, j->eps);
}

void dsq_add_rmsnorm_rows(float *x, const float *add, float *out, const float *w, int rows, int n, float eps,
                          struct dsq_pool *pool)
{
    addnorm_job j = { x, out, add, w, n, eps };
    /* a few rows (decode) cost less than waking the pool (about 10 us) */
    dsq_pool_run((size_t)rows * (size_t)n < 65536 ? NULL : pool, (size_t)rows, addnorm_task, &j);
}

void dsq_silu_mul(float *g, const float *u, size_t n)
{
    for (size_t i = 0; i < n; i++) g[i] = dsq_silu(g[i]) * u[i];
}

void dsq_softmax(float *x, int n)
{
    if (n <= 0) return;
    float m = x[0];
    for (int i = 1; i < n; i++) if (x[i] > m) m = x[i];
    if (m == -INFINITY) {          /* everything masked: torch gives NaN; stay defined */
        for (int i = 0; i < n; i++) x[i] = 1.0f / n;
        return;
    }
    double s = 0.0;
    for (int i = 0; i < n; i++) { x[i] = expf(x[i] - m); s += x[i]; }
    float inv = (float)(1.0 / s);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

/* The library builds without -march flags; y += a x is the inner loop of
 * attention, the MoE combine and MLA's absorbed q, so it is compiled for
 * AVX-512 and AVX2 as well and picked at load time (ifunc). Each lane does
 * the scalar loop's mul and add (no contraction under -std=c11): every clone
 * gives the same bits. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
__attribute__((target_clones("avx512f", "avx2", "default"), optimize("O3")))
#endif
void dsq_axpy(float *y, float a, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] += a * x[i];
}

float dsq_dot(const float *a, const float *b, size_t n)
{
    /* four partial sums: lets the compiler vectorise without -ffast-math and
     * keeps the order fixed (same result for any thread count). */
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

/* ---- MoE routing ------------------------------------------------------ */

/* Index of the largest not-yet-taken value; ties go to the lower index.
 * taken[] marks used entries with 1. */
static int argmax_free(const float *v, const unsigned char *taken, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (taken[i]) continue;
        if (best < 0 || v[i] > v[best] || (isnan(v[best]) && !isnan(v[i]))) best = i;
    }
    return best;
}

void dsq_route(const dsq_router *r, const float *logits, float *scratch, int *idx, float *w)
{
    const int E = r->n_experts;
    float *orig = scratch;          /* scores without bias: the weights come from here */
    float *sel = scratch + E;       /* selection scores: + bias, group-masked */
    unsigned char tk[DSQ_ROUTE_MAX_EXPERTS]; /* experts already picked */

    if (r->score_func == DSQ_SCORING_SIGMOID) {
        for (int e = 0; e < E; e++) orig[e] = 1.0f / (1.0f + expf(-logits[e]));
    } else {
        memcpy(orig, logits, (size_t)E * sizeof *orig);
        dsq_softmax(orig, E);
    }
    for (int e = 0; e < E; e++) sel[e] = orig[e] + (r->bias ? r->bias[e] : 0.0f);

    int G = r->n_group;
    if (G > 1 && r->topk_method != DSQ_TOPK_GREEDY && E % G == 0 && r->topk_group < G) {
        const int per = E / G;
        float gscore[DSQ_ROUTE_MAX_GROUPS];
        for (int g = 0; g < G; g++) {
            const float *s = sel + (size_t)g * per;
            if (r->topk_method == DSQ_TOPK_NOAUX_TC && r->bias) {
                /* V3 with the correction bias: sum of the two best in the group */
                float a = -INFINITY, b = -INFINITY;
                for (int i = 0; i < per; i++) {
                    if (s[i] > a) { b = a; a = s[i]; }
                    else if (s[i] > b) b = s[i];
                }
                gscore[g] = per >= 2 ? a + b : a;
            } else {
                float a = -INFINITY;
                for (int i = 0; i < per; i++) if (s[i] > a) a = s[i];
                gscore[g] = a;
            }
        }
        unsigned char gtaken[DSQ_ROUTE_MAX_GROUPS] = {0}, keep[DSQ_ROUTE_MAX_GROUPS] = {0};
        for (int k = 0; k < r->topk_group; k++) {
            int g = argmax_free(gscore, gtaken, G);
            gtaken[g] = 1;
            keep[g] = 1;
        }
        /* V3 fills the other groups with -inf, V2 with 0.0 */
        float fill = r->topk_method == DSQ_TOPK_NOAUX_TC ? -INFINITY : 0.0f;
        for (int g = 0; g < G; g++)
            if (!keep[g])
                for (int i = 0; i < per; i++) sel[(size_t)g * per + i] = fill;
    }

    memset(tk, 0, (size_t)E);
    double sum = 0.0;
    for (int k = 0; k < r->top_k; k++) {
        int e = argmax_free(sel, tk, E);
        tk[e] = 1;
        idx[k] = e;
        w[k] = orig[e];
        sum += w[k];
    }
    int normed = 0;
    if (r->top_k > 1 && r->norm_topk_prob) {
        float den = (float)sum + 1e-20f;
        for (int k = 0; k < r->top_k; k++) w[k] /= den;
        normed = 1;
    }
    if (r->scale_always || !normed)
        for (int k = 0; k < r->top_k; k++) w[k] *= r->routed_scaling_factor;
}

/* ---- attention kernel ------------------------------------------------- */

void dsq_attend_head(const float *q, int dk, const float *k, size_t kstride,
                     const float *v, size_t vstride, int dv, int n, float scale,
                     float *scores, float *out)
{
    for (int j = 0; j < n; j++) scores[j] = dsq_dot(q, k + (size_t)j * kstride, (size_t)dk) * scale;
    dsq_softmax(scores, n);
    memset(out, 0, (size_t)dv * sizeof *out);
    for (int j = 0; j < n; j++) dsq_axpy(out, scores[j], v + (size_t)j * vstride, (size_t)dv);
}

typedef struct softmax_job {
    float *S;
    int P;
    const int32_t *visible;
} softmax_job;

static void softmax_rows_task(void *ctx, size_t r, int tid)
{
    (void)tid;
    softmax_job *j = ctx;
    float *row = j->S + r * (size_t)j->P;
    int n = j->visible[r];
    dsq_softmax(row, n);
    for (int c = n; c < j->P; c++) row[c] = 0.0f;   /* masked keys */
}

/* Causal blocks: rows in blocks of ATT_MB need only the keys up to the
 * block's widest row; a prefill of T tokens from position 0 then forms and
 * multiplies (1 + 1 / (T / ATT_MB)) / 2 of the full [T, T] scores (T =
 * 128: 62.5%). Smaller blocks trim more but run OpenBLAS at worse shapes. */
#define ATT_MB 32

/* Keys block [r0, r0 + ATT_MB) of M rows reads: its widest row, at least 1
 * (a row with none is all zeros after the softmax) and at most P. */
static int block_keys(const int32_t *visible, int r0, int M, int P)
{
    int pb = 1;
    for (int r = r0; r < M && r < r0 + ATT_MB; r++) pb = visible[r] > pb ? visible[r] : pb;
    return pb < P ? pb : P;
}

void dsq_attend_block(int M, int P, const float *q1, int ldq1, const float *k1, int ldk1, int d1,
                      const float *q2, int ldq2, const float *k2, int ldk2, int d2,
                      const float *v, int ldv, int dv, const int32_t *visible, float scale,
                      float *S, float *o, int ldo, struct dsq_pool *pool)
{
    if (M <= 0 || P <= 0) return;
    /* one block of M rows unless some block needs fewer keys than P (decode
     * and batched decode: every row sees all P, the calls are unchanged);
     * block shapes follow visible[] only, never the pool size. All of S is
     * formed before O is written (O may alias Q1). */
    int trim = 0;
    for (int r0 = 0; r0 < M && !trim; r0 += ATT_MB) trim = block_keys(visible, r0, M, P) < P;
    const int mb = trim ? ATT_MB : M;
    for (int r0 = 0; r0 < M; r0 += mb) {
        const int m = M - r0 < mb ? M - r0 : mb, pb = trim ? block_keys(visible, r0, M, P) : P;
        float *Sb = S + (size_t)r0 * (size_t)P;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, pb, d1, scale, q1 + (size_t)r0 * ldq1, ldq1, k1,
                    ldk1, 0.0f, Sb, P);
        if (d2 > 0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, pb, d2, scale, q2 + (size_t)r0 * ldq2, ldq2,
                        k2, ldk2, 1.0f, Sb, P);
    }
    softmax_job j = { S, P, visible };
    /* small blocks (decode: one row per head) on the caller's thread: waking
     * the pool costs about 10 us; rows are independent, so no value changes */
    dsq_pool_run((size_t)M * (size_t)P < 16384 ? NULL : pool, (size_t)M, softmax_rows_task, &j);
    for (int r0 = 0; r0 < M; r0 += mb) {
        const int m = M - r0 < mb ? M - r0 : mb, pb = trim ? block_keys(visible, r0, M, P) : P;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, dv, pb, 1.0f, S + (size_t)r0 * (size_t)P, P, v,
                    ldv, 0.0f, o + (size_t)r0 * ldo, ldo);
    }
}
