/* hadamard.c - Hadamard constructions and seeded rotations (hadamard.h). */
#include "hadamard.h"
#include "dsq_rand.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int is_prime(int64_t q)
{
    if (q < 2) return 0;
    for (int64_t f = 2; f * f <= q; f++)
        if (q % f == 0) return 0;
    return 1;
}

/* Legendre symbol of a mod the prime q (0, 1 or -1). */
static int chi(int64_t a, int64_t q)
{
    a %= q;
    if (a < 0) a += q;
    if (a == 0) return 0;
    for (int64_t x = 1; x < q; x++)
        if ((x * x) % q == a) return 1;
    return -1;
}

/* Which base construction builds order m: 1 (trivial 1 or 2), 2 (Paley I),
 * 3 (Paley II), 0 (none here). */
static int base_kind(int64_t m)
{
    if (m == 1 || m == 2) return 1;
    if (m % 4 != 0) return 0;
    if (is_prime(m - 1) && (m - 1) % 4 == 3) return 2;
    if (m % 2 == 0 && is_prime(m / 2 - 1) && (m / 2 - 1) % 4 == 1) return 3;
    return 0;
}

int64_t dsq_hadamard_base_order(int64_t n)
{
    if (n < 1 || n > DSQ_HADAMARD_MAX_ORDER) return 0;
    /* m = n / 2^k for k from the largest down: the first constructible m */
    int64_t m = n;
    while (m % 2 == 0) m /= 2;
    for (; m <= n; m *= 2) {
        if (base_kind(m)) return m;
        if (n % (m * 2) != 0) break;
    }
    return 0;
}

/* The m x m base matrix. */
static void base_fill(int64_t m, int8_t *h)
{
    int kind = base_kind(m);
    if (m == 1) { h[0] = 1; return; }
    if (m == 2) { h[0] = 1; h[1] = 1; h[2] = 1; h[3] = -1; return; }
    if (kind == 2) {
        /* Paley I: H = I + [[0, 1^T], [-1, Q]], Q[i][j] = chi(j - i) mod q */
        int64_t q = m - 1;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < m; j++) {
                int v;
                if (i == 0 && j == 0) v = 0;
                else if (i == 0) v = 1;
                else if (j == 0) v = -1;
                else v = chi(j - i, q);
                if (i == j) v += 1;
                h[i * m + j] = (int8_t)v;
            }
        return;
    }
    /* Paley II: the symmetric conference matrix C = [[0, 1^T], [1, Q]] of
     * order q + 1; each 0 becomes [[1, -1], [-1, -1]] and each +-1 becomes
     * +-[[1, 1], [1, -1]]. */
    int64_t q = m / 2 - 1, c = q + 1;
    for (int64_t i = 0; i < c; i++)
        for (int64_t j = 0; j < c; j++) {
            int v;
            if (i == 0 && j == 0) v = 0;
            else if (i == 0 || j == 0) v = 1;
            else v = chi(j - i, q);
            int8_t blk[4];
            if (v == 0) { blk[0] = 1; blk[1] = -1; blk[2] = -1; blk[3] = -1; }
            else { blk[0] = (int8_t)v; blk[1] = (int8_t)v; blk[2] = (int8_t)v; blk[3] = (int8_t)-v; }
            h[(2 * i) * m + 2 * j] = blk[0];
            h[(2 * i) * m + 2 * j + 1] = blk[1];
            h[(2 * i + 1) * m + 2 * j] = blk[2];
            h[(2 * i + 1) * m + 2 * j + 1] = blk[3];
        }
}

int dsq_hadamard_fill(int64_t n, int8_t *h, dsq_diag *d)
{
    int64_t m = dsq_hadamard_base_order(n);
    if (m == 0)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, NULL, -1, "no Hadamard matrix of order %lld is built here",
                        (long long)n);
    int8_t *hm = malloc((size_t)(m * m));
    if (!hm) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "Hadamard base of order %lld", (long long)m);
    base_fill(m, hm);
    int64_t p = n / m;
    /* H[(a, b), (c, e)] = Hm[a][c] * S[b][e], S[b][e] = (-1)^popcount(b & e) */
    for (int64_t a = 0; a < m; a++)
        for (int64_t b = 0; b < p; b++)
            for (int64_t c = 0; c < m; c++)
                for (int64_t e = 0; e < p; e++) {
                    int s = __builtin_popcountll((unsigned long long)(b & e)) & 1 ? -1 : 1;
                    h[(a * p + b) * n + c * p + e] = (int8_t)(hm[a * m + c] * s);
                }
    free(hm);
    return DSQ_OK;
}

void dsq_rot_free(dsq_rotation *r)
{
    if (!r) return;
    free(r->hm);
    free(r->sign);
    memset(r, 0, sizeof *r);
}

int dsq_rot_init(dsq_rotation *r, int kind, int64_t n, int64_t block, uint64_t seed, dsq_diag *d)
{
    memset(r, 0, sizeof *r);
    if (n < 1 || n > DSQ_HADAMARD_MAX_ORDER)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "rotation order %lld out of range", (long long)n);
    int64_t b;
    if (kind == DSQ_ROT_HADAMARD) {
        b = n;
        if (!dsq_hadamard_base_order(n)) {
            /* block-diagonal fallback: the largest constructible divisor */
            b = 0;
            for (int64_t c = n / 2; c >= 1; c--)
                if (n % c == 0 && dsq_hadamard_base_order(c)) { b = c; break; }
            r->fallback = 1;
        }
    } else if (kind == DSQ_ROT_BLOCK || kind == DSQ_ROT_BLOCK_SHIFTED) {
        b = block;
        if (b < 1 || n % b != 0 || !dsq_hadamard_base_order(b) || (kind == DSQ_ROT_BLOCK_SHIFTED && b % 2))
            return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1,
                            "rotation block %lld does not fit order %lld", (long long)block, (long long)n);
    } else {
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "unknown rotation kind %d", kind);
    }
    if (b < 1) return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, NULL, -1, "no rotation of order %lld", (long long)n);
    r->kind = kind;
    r->n = n;
    r->b = b;
    r->m = dsq_hadamard_base_order(b);
    r->p = b / r->m;
    r->norm = (float)(1.0 / sqrt((double)b));
    r->hm = malloc((size_t)(r->m * r->m));
    r->sign = malloc((size_t)b);
    if (!r->hm || !r->sign) {
        dsq_rot_free(r);
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "rotation of order %lld", (long long)n);
    }
    base_fill(r->m, r->hm);
    uint64_t s = seed;
    uint64_t bits = 0;
    for (int64_t i = 0; i < b; i++) {
        if (i % 64 == 0) bits = dsq_splitmix64(&s);
        r->sign[i] = (bits >> (i % 64)) & 1 ? -1 : 1;
    }
    return DSQ_OK;
}

/* In-place y = x H_b (unnormalised, no signs) on one block of b values.
 * H_b = Hm (x) S_p: Walsh-Hadamard over each run of p, then the base over m. */
/* In place: each run of p values times Sylvester's S_p (symmetric). */
static void fwht_runs(double *x, int64_t m, int64_t p)
{
    for (int64_t a = 0; a < m; a++) {
        double *v = x + a * p;
        for (int64_t h = 1; h < p; h *= 2)
            for (int64_t i = 0; i < p; i += 2 * h)
                for (int64_t j = i; j < i + h; j++) {
                    double u = v[j], w = v[j + h];
                    v[j] = u + w;
                    v[j + h] = u - w;
                }
    }
}

/* In place: x (m runs of p) mixed by the base, y[c][e] = sum_a B[a][c] x[a][e]
 * with B = Hm (transposed: B = Hm^T). */
static void base_mix(const dsq_rotation *r, double *x, double *t, int transposed)
{
    int64_t m = r->m, p = r->p;
    if (m == 1) return;
    for (int64_t c = 0; c < m; c++)
        for (int64_t e = 0; e < p; e++) {
            double acc = 0;
            for (int64_t a = 0; a < m; a++) acc += (transposed ? r->hm[c * m + a] : r->hm[a * m + c]) * x[a * p + e];
            t[c * p + e] = acc;
        }
    memcpy(x, t, (size_t)(m * p) * sizeof *x);
}

/* x H_b, or x H_b^T: H_b = Hm (x) S_p */
static void had_block(const dsq_rotation *r, double *x, double *t, int transposed)
{
    fwht_runs(x, r->m, r->p);
    base_mix(r, x, t, transposed);
}

/* x <- x B where B = blockdiag(D H / sqrt(b)) (forward) or its transpose
 * H^T D / sqrt(b) (inverse). */
static void block_apply(const dsq_rotation *r, double *x, double *t, int inverse)
{
    int64_t b = r->b;
    for (int64_t k = 0; k < r->n; k += b) {
        double *v = x + k;
        if (!inverse) {
            for (int64_t i = 0; i < b; i++) v[i] *= r->sign[i];
            had_block(r, v, t, 0);
            for (int64_t i = 0; i < b; i++) v[i] *= r->norm;
        } else {
            /* x (D H)^T = x H^T D */
            had_block(r, v, t, 1);
            for (int64_t i = 0; i < b; i++) v[i] *= r->sign[i] * (double)r->norm;
        }
    }
}

/* x P: (x P)[j] = x[(j - s) mod n]; inverse shifts the other way. */
static void shift_apply(const dsq_rotation *r, double *x, double *t, int inverse)
{
    int64_t n = r->n, s = r->b / 2;
    for (int64_t j = 0; j < n; j++) {
        int64_t src = inverse ? (j + s) % n : (j - s + n) % n;
        t[j] = x[src];
    }
    memcpy(x, t, (size_t)n * sizeof *x);
}

static void rot_row_d(const dsq_rotation *r, double *x, double *t, int inverse)
{
    if (r->kind != DSQ_ROT_BLOCK_SHIFTED) {
        block_apply(r, x, t, inverse);
        return;
    }
    /* R = B P B: x R = ((x B) P) B; x R^T = ((x B^T) P^T) B^T */
    block_apply(r, x, t, inverse);
    shift_apply(r, x, t, inverse);
    block_apply(r, x, t, inverse);
}

static void rot_row(const dsq_rotation *r, float *x, double *work, int inverse)
{
    double *xd = work, *td = work + r->n;
    for (int64_t i = 0; i < r->n; i++) xd[i] = x[i];
    rot_row_d(r, xd, td, inverse);
    for (int64_t i = 0; i < r->n; i++) x[i] = (float)xd[i];
}

void dsq_rot_row(const dsq_rotation *r, float *x, double *work) { rot_row(r, x, work, 0); }
void dsq_rot_row_inv(const dsq_rotation *r, float *x, double *work) { rot_row(r, x, work, 1); }

/* Apply to many vectors with one work buffer. */
static int rot_many(const dsq_rotation *r, float *base, int64_t count, int64_t vstride, int64_t estride,
                    int inverse, dsq_diag *d)
{
    double *buf = malloc((size_t)(2 * r->n) * sizeof *buf);
    if (!buf) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "rotation buffer of %lld", (long long)r->n);
    double *xd = buf, *td = buf + r->n;
    for (int64_t k = 0; k < count; k++) {
        float *v = base + k * vstride;
        for (int64_t i = 0; i < r->n; i++) xd[i] = v[i * estride];
        rot_row_d(r, xd, td, inverse);
        for (int64_t i = 0; i < r->n; i++) v[i * estride] = (float)xd[i];
    }
    free(buf);
    return DSQ_OK;
}

int dsq_rot_right(const dsq_rotation *r, float *w, int64_t rows, int64_t cols, int64_t c0, dsq_diag *d)
{
    if (rows < 0 || c0 < 0 || c0 + r->n > cols)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "right rotation of order %lld at column %lld of %lld",
                        (long long)r->n, (long long)c0, (long long)cols);
    return rot_many(r, w + c0, rows, cols, 1, 0, d);
}

int dsq_rot_left(const dsq_rotation *r, float *w, int64_t rows, int64_t cols, int64_t r0, dsq_diag *d)
{
    if (cols < 0 || r0 < 0 || r0 + r->n > rows)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "left rotation of order %lld at row %lld of %lld",
                        (long long)r->n, (long long)r0, (long long)rows);
    /* (R^T W)[:, c] = R^T w_c = (w_c^T R)^T: each column, as a row vector, times R */
    return rot_many(r, w + r0 * cols, cols, 1, cols, 0, d);
}

int dsq_rot_dense(const dsq_rotation *r, float *out, dsq_diag *d)
{
    /* row i of R is e_i R */
    memset(out, 0, (size_t)(r->n * r->n) * sizeof *out);
    for (int64_t i = 0; i < r->n; i++) out[i * r->n + i] = 1.0f;
    return rot_many(r, out, r->n, r->n, 1, 0, d);
}
