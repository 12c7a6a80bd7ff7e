/* dsa.c - DeepSeek sparse attention: e4m3 / ue8m0 arithmetic, the
 * Hadamard transform, the lightning indexer and its top-k (see dsa.h). */
#include "dsa.h"
#include "model.h"

#include <cblas.h>
#include <pthread.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *dsq_dsa_mode_name(int mode)
{
    return mode == DSQ_DSA_FLOAT ? "float" : "fp8";
}

/* ---- e4m3fn ------------------------------------------------------------ */

float dsq_e4m3_round(float x)
{
    if (isnan(x)) return x;
    float a = fabsf(x);
    if (a >= DSQ_E4M3_MAX) return copysignf(DSQ_E4M3_MAX, x);
    /* quantum: 2^-9 for subnormals (below 2^-6), else 2^(e - 3) for
     * a = m * 2^e, m in [1, 2); x / quantum is exact, rintf rounds to
     * nearest even; a carry into the next binade is representable */
    float q;
    if (a < 0x1p-6f) q = 0x1p-9f;
    else {
        int e;
        (void)frexpf(a, &e);          /* a = f * 2^e, f in [0.5, 1) */
        q = ldexpf(1.0f, e - 1 - 3);
    }
    float r = rintf(a / q) * q;
    if (r > DSQ_E4M3_MAX) r = DSQ_E4M3_MAX;
    return copysignf(r, x);
}

uint8_t dsq_e4m3_encode(float x)
{
    if (isnan(x)) return 0x7f;
    float r = dsq_e4m3_round(x);
    uint8_t s = signbit(r) ? 0x80 : 0;
    float a = fabsf(r);
    if (a == 0.0f) return s;
    if (a < 0x1p-6f) return (uint8_t)(s | (uint8_t)(a * 512.0f));      /* subnormal: m * 2^-9 */
    int e;
    float f = frexpf(a, &e);                                          /* a = 2f * 2^(e-1) */
    int exp = e - 1 + 7, man = (int)((2.0f * f - 1.0f) * 8.0f);
    return (uint8_t)(s | (uint8_t)(exp << 3) | (uint8_t)man);
}

float dsq_e4m3_decode(uint8_t b)
{
    int s = b >> 7, e = (b >> 3) & 0xf, m = b & 7;
    float v;
    if (e == 0xf && m == 7) return NAN;
    if (e == 0) v = (float)m * 0x1p-9f;
    else v = ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return s ? -v : v;
}

float dsq_ue8m0_scale(float amax)
{
    float s = (amax > 1e-4f ? amax : 1e-4f) / DSQ_E4M3_MAX;
    uint32_t bits;
    memcpy(&bits, &s, 4);
    int e = (int)((bits >> 23) & 0xff) - 127 + ((bits & 0x7fffffu) != 0);
    return ldexpf(1.0f, e);
}

float dsq_fp8_block_quant(const float *x, int n, uint8_t *codes)
{
    float amax = 0.0f;
    for (int i = 0; i < n; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    float s = dsq_ue8m0_scale(amax);
    for (int i = 0; i < n; i++) codes[i] = dsq_e4m3_encode(x[i] / s);
    return s;
}

void dsq_fp8_roundtrip(float *x, int n, int block)
{
    for (int b0 = 0; b0 < n; b0 += block) {
        const int nb = n - b0 < block ? n - b0 : block;
        float amax = 0.0f;
        for (int i = 0; i < nb; i++) amax = fabsf(x[b0 + i]) > amax ? fabsf(x[b0 + i]) : amax;
        const float s = dsq_ue8m0_scale(amax);
        for (int i = 0; i < nb; i++) x[b0 + i] = dsq_e4m3_round(x[b0 + i] / s) * s;
    }
}

void dsq_hadamard(float *x, int n)
{
    for (int h = 1; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    const float sc = (float)(1.0 / sqrt((double)n));
    for (int i = 0; i < n; i++) x[i] *= sc;
}

void dsq_layernorm(float *out, const float *x, const float *w, const float *b, int n, float eps)
{
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    var /= n;
    const float inv = (float)(1.0 / sqrt(var + eps)), mu = (float)mean;
    for (int i = 0; i < n; i++) out[i] = (x[i] - mu) * inv * (w ? w[i] : 1.0f) + (b ? b[i] : 0.0f);
}

/* ---- top-k ------------------------------------------------------------- */

/* The k-th largest of v[0..n) (1 <= k <= n), v reordered: quickselect. */
static float kth_largest(float *v, int n, int k)
{
    int lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        float a = v[lo], b = v[(lo + hi) / 2], c = v[hi];
        float piv = a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
        int i = lo, j = hi;
        while (i <= j) {
            while (v[i] > piv) i++;
            while (v[j] < piv) j--;
            if (i <= j) {
                float t = v[i];
                v[i] = v[j];
                v[j] = t;
                i++;
                j--;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else return v[want];
    }
    return v[want];
}

int dsq_dsa_topk(const float *score, int n, int k, int32_t *idx, float *tmp)
{
    if (n <= 0 || k <= 0) return 0;
    if (k >= n) {
        for (int i = 0; i < n; i++) idx[i] = i;
        return n;
    }
    memcpy(tmp, score, (size_t)n * sizeof *tmp);
    const float thr = kth_largest(tmp, n, k);
    int above = 0;
    for (int i = 0; i < n; i++) above += score[i] > thr;
    int ties = k - above, c = 0;
    for (int i = 0; i < n && c < k; i++) {
        if (score[i] > thr) idx[c++] = i;
        else if (score[i] == thr && ties > 0) {
            idx[c++] = i;
            ties--;
        }
    }
    return c;
}

/* ---- the indexer ------------------------------------------------------- */

/* bytes of one token in the indexer cache */
size_t dsq_dsa_row_bytes(const dsq_model *m)
{
    const size_t D = (size_t)m->cfg.index_head_dim;
    return m->opts.dsa_mode == DSQ_DSA_FLOAT ? D * sizeof(float) : D + sizeof(float);
}

typedef struct idx_job {
    dsq_run *r;
    const dsq_layer *ly;
    int64_t Hi, D, rope;
    float hscale;       /* Hi^-0.5 * D^-0.5 */
    int fp8;
} idx_job;

/* One token: k_norm, RoPE (not interleaved), Hadamard and e4m3 of q and k;
 * k into the indexer cache; the per-head weights w[t, h] with the q scales. */
static void idx_prep_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    const idx_job *j = ctx;
    const dsq_run *r = j->r;
    const dsq_model *m = r->m;
    dsq_scratch *sc = r->sc;
    const int t = (int)item, half = m->rope.dim / 2;
    const float *cs = sc->cs + (size_t)t * m->rope.dim, *sn = cs + half;
    const int64_t D = j->D;
    float *k = sc->ik + (size_t)t * D;
    dsq_layernorm(k, k, j->ly->idx_knorm_w, j->ly->idx_knorm_b, (int)D, 1e-6f);
    dsq_rope_apply(&m->index_rope, k, cs, sn);
    float *w = sc->iw + (size_t)t * j->Hi;
    for (int64_t h = 0; h < j->Hi; h++) {
        float *q = sc->iq + ((size_t)t * j->Hi + h) * D;
        dsq_rope_apply(&m->index_rope, q, cs, sn);
        w[h] = w[h] * (float)(1.0 / sqrt((double)j->Hi));
        if (j->fp8) {
            uint8_t codes[4096];
            dsq_hadamard(q, (int)D);
            float qs = dsq_fp8_block_quant(q, (int)D, codes);
            for (int64_t i = 0; i < D; i++) q[i] = dsq_e4m3_decode(codes[i]);
            w[h] = w[h] * qs * (float)(1.0 / sqrt((double)D));
        } else {
            w[h] = w[h] * (float)(1.0 / sqrt((double)D));
        }
    }
    uint8_t *row = dsq_dsa_base(r, t) + (size_t)dsq_kv_index(r, t) * m->dsa_row;
    if (j->fp8) {
        dsq_hadamard(k, (int)D);
        float ks = dsq_fp8_block_quant(k, (int)D, row);
        memcpy(row + D, &ks, sizeof ks);
    } else {
        memcpy(row, k, (size_t)D * sizeof(float));
    }
}

#define IDX_TILE 64

/* e4m3 byte -> value, for the indexer cache's keys (built once) */
static float e4m3_table[256];
static pthread_once_t e4m3_once = PTHREAD_ONCE_INIT;
static void e4m3_table_init(void)
{
    for (int b = 0; b < 256; b++) e4m3_table[b] = dsq_e4m3_decode((uint8_t)b);
}

/* The scores of query row t against its n visible keys into score[0..n),
 * with thread tid's key tile. */
static void idx_score_row(const idx_job *j, int t, int tid, int64_t n, float *score)
{
    const dsq_run *r = j->r;
    const dsq_model *m = r->m;
    dsq_scratch *sc = r->sc;
    const int64_t D = j->D, Hi = j->Hi;
    float *kt = sc->itile + (size_t)tid * (size_t)IDX_TILE * (size_t)(D + Hi), *S = kt + IDX_TILE * D;
    const uint8_t *base = dsq_dsa_base(r, t);
    const float *q = sc->iq + (size_t)t * (size_t)(Hi * D), *w = sc->iw + (size_t)t * Hi;
    for (int64_t n0 = 0; n0 < n; n0 += IDX_TILE) {
        const int nt = (int)(n - n0 < IDX_TILE ? n - n0 : IDX_TILE);
        for (int i = 0; i < nt; i++) {
            const uint8_t *row = base + (size_t)(n0 + i) * m->dsa_row;
            if (j->fp8)
                for (int64_t d = 0; d < D; d++) kt[i * D + d] = e4m3_table[row[d]];
            else
                memcpy(kt + i * D, row, (size_t)D * sizeof(float));
        }
        /* S [Hi, nt] = q [Hi, D] . kt^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)Hi, nt, (int)D, 1.0f, q, (int)D, kt, (int)D,
                    0.0f, S, nt);
        for (int i = 0; i < nt; i++) {
            float acc = 0.0f;
            for (int64_t h = 0; h < Hi; h++) {
                float v = S[h * nt + i];
                acc += (v > 0.0f ? v : 0.0f) * w[h];
            }
            if (j->fp8) {
                float ks;
                memcpy(&ks, base + (size_t)(n0 + i) * m->dsa_row + D, sizeof ks);
                acc *= ks;
            }
            score[n0 + i] = acc;
        }
    }
}

/* One query row: score every visible key, keep the top index_topk. */
static void idx_select_task(void *ctx, size_t item, int tid)
{
    const idx_job *j = ctx;
    const dsq_run *r = j->r;
    const dsq_model *m = r->m;
    dsq_scratch *sc = r->sc;
    const int t = (int)item;
    const int64_t n = dsq_kv_index(r, t) + 1;
    if (n <= m->cfg.index_topk) { /* every visible key: no scoring */
        sc->nsel[t] = -1;
        return;
    }
    float *score = sc->iscore + (size_t)tid * (size_t)sc->cap_ctx * 2, *tmp = score + sc->cap_ctx;
    idx_score_row(j, t, tid, n, score);
    sc->nsel[t] = dsq_dsa_topk(score, (int)n, (int)m->cfg.index_topk, sc->sel + (size_t)t * sc->cap_sel, tmp);
}

int dsq_dsa_forward(dsq_run *r, const float *x, const float *qr)
{
    const dsq_model *m = r->m;
    const dsq_layer *ly = &m->w.layers[r->layer];
    dsq_scratch *sc = r->sc;
    const int T = r->T;
    idx_job j = { r, ly, m->cfg.index_n_heads, m->cfg.index_head_dim, m->cfg.qk_rope_head_dim, 0.0f,
                  m->opts.dsa_mode != DSQ_DSA_FLOAT };
    DSQ_TRY(dsq_linear_hook_call(r, &ly->idx_wq_b, qr, T, NULL));
    DSQ_TRY(dsq_linear_gemm(r, &ly->idx_wq_b, qr, T, sc->iq));
    DSQ_TRY(dsq_linear_hook_call(r, &ly->idx_wk, x, T, NULL));
    DSQ_TRY(dsq_linear_gemm(r, &ly->idx_wk, x, T, sc->ik));
    DSQ_TRY(dsq_linear_hook_call(r, &ly->idx_wp, x, T, NULL));
    DSQ_TRY(dsq_linear_gemm(r, &ly->idx_wp, x, T, sc->iw));
    dsq_prof_mark mk;
    dsq_prof_begin(m->prof, &mk);
    dsq_pool_run(T < 4 ? NULL : m->pool, (size_t)T, idx_prep_task, &j);
    dsq_prof_end(m->prof, &mk, "dsa: indexer q, k, cache writes", 0.0);
    return DSQ_OK;
}

int dsq_dsa_select(dsq_run *r)
{
    const dsq_model *m = r->m;
    const dsq_layer *ly = &m->w.layers[r->layer];
    idx_job j = { r, ly, m->cfg.index_n_heads, m->cfg.index_head_dim, m->cfg.qk_rope_head_dim, 0.0f,
                  m->opts.dsa_mode != DSQ_DSA_FLOAT };
    int sparse = 0;
    for (int t = 0; t < r->T && !sparse; t++) sparse = dsq_kv_index(r, t) + 1 > m->cfg.index_topk;
    if (!sparse) {
        for (int t = 0; t < r->T; t++) r->sc->nsel[t] = -1;
        return 0;
    }
    pthread_once(&e4m3_once, e4m3_table_init);
    dsq_prof_mark mk;
    dsq_prof_begin(m->prof, &mk);
    if (r->T == 1) {
        /* decode: the one row on this thread, its scoring (every cached
         * key: grows with the context) and its selection timed apart */
        dsq_scratch *sc = r->sc;
        const int64_t n = dsq_kv_index(r, 0) + 1;
        float *score = sc->iscore, *tmp = score + sc->cap_ctx;
        idx_score_row(&j, 0, 0, n, score);
        dsq_prof_end(m->prof, &mk, "dsa: indexer scores", 2.0 * (double)j.Hi * (double)j.D * (double)n);
        dsq_prof_begin(m->prof, &mk);
        sc->nsel[0] = dsq_dsa_topk(score, (int)n, (int)m->cfg.index_topk, sc->sel, tmp);
        dsq_prof_end(m->prof, &mk, "dsa: top-k", 0.0);
        return 1;
    }
    dsq_pool_run(r->T < 2 ? NULL : m->pool, (size_t)r->T, idx_select_task, &j);
    dsq_prof_end(m->prof, &mk, "dsa: indexer scores + top-k", 0.0);
    return 1;
}
