/* qsearch.c - searched int4 group parameters (kernels.h, "Searched group
 * parameters").
 *
 * Plain RTN takes a group's scale (and zero) from its min/max. That range is
 * set by the one or two extreme weights, so the other 126 weights of a
 * 128-group get a coarser grid than they need. For fixed codes q_j the best
 * parameters under a weighted squared error sum_j c_j (x_j - deq_j)^2 are a
 * small least-squares solve: (scale, m) of x ~ scale * q + m is a 2x2 system
 * (asymmetric), scale = sum c x q / sum c q^2 (symmetric). So, as llama.cpp's
 * k-quants do, we round with a few inverse scales around the min/max one,
 * refit the parameters to each rounding, and keep the best; then alternate
 * rounding and refitting while the error falls.
 *
 * What differs from llama.cpp's formats: AutoAWQ stores an integer zero point
 * (0..15, deq = (q - zero) * scale), so the refit offset m is rounded to
 * -zero * scale and the scale refit for that zero; the export stores f16
 * scales, so awq candidates are scored with the f16 value the file will
 * hold. w4a8 is symmetric with codes -8..7 and a positive scale: a negative
 * extreme may use code -8, a positive one only 7, so both inverse scales
 * (7 and 8 steps over amax) seed the search.
 *
 * The parameters kept are scored with the quantizer's own rounding
 * (clamp(rint(x / scale) (+ zero))) against the min/max ones, which win
 * ties, so the result's weighted error is never above RTN's.
 *
 * Cost: no pass writes codes to memory, which keeps the search about as
 * cheap as a few quantization passes (a scalar search costs tens of times
 * more).
 * A trial pass (k->qtrial: codes from x * (1 / scale), in registers)
 * returns the fit sums sum c q, sum c q^2, sum c x q of one trial scale's
 * codes, so it gives that rounding's refit s' and the refit's error with
 * those codes, sum c x^2 - 2 s' sum c x q + s'^2 sum c q^2, an upper bound
 * of s''s error with its own codes (the quantizer's rounding is the nearest
 * code weight by weight). The grid is ranked on these bounds; the refit
 * rounds from the best one are trial passes too (their estimated errors
 * decide when to stop). The kept scale and the start are scored exactly
 * (k->qstats: the quantizer's division and rounding, the error in double),
 * and the start wins ties: two exact passes per group. The grid's trials
 * are independent and go DSQ_QTRIALS_MAX to a sweep (k->qtrials, the same
 * bits as one qtrial each): awq's 128-column groups paid the per-call setup
 * and reductions 21 times one trial at a time (a sweep cuts awq-w4a16
 * --search time by about a sixth, with the same output bytes); w4a8's
 * 7168-column rows are compute-bound per trial and gain nothing. */
#include "kernels.h"
#include "dsq_mem.h"

#include <math.h>
#include <string.h>

/* llama.cpp's k-quant grid: inverse scales (steps + QS_RMIN + QS_RDELTA * i)
 * / range for i <= QS_NSTEP, i.e. 14..16 steps over the range for int4. */
#define QS_RMIN   (-1.0f)
#define QS_RDELTA 0.1f
#define QS_NSTEP  20
#define QS_ROUNDS 4   /* refit/re-round rounds after the grid */
/* w4a8's grid in tenths of a step (29 trial scales for -8..7) is ranked
 * every QS_COARSE-th first, then the tenths around the best: 8 + 6 trials.
 * Against the full grid on per-channel rows this changes the weighted error
 * by about 0.01% (mid-dsv3's linears, the e16 layer). awq's 21-point grid
 * stays whole: every other point costs about +0.1% there. */
#define QS_COARSE 4

/* GCC's -O2 vectorizes only loops with no remainder; these per-group
 * loops (run once per search, ~5 trial passes' worth when scalar) are plain
 * element-wise arithmetic, the same bits vectorized or not. Clang
 * vectorizes them at -O2. */
#if defined(__GNUC__) && !defined(__clang__)
#define QS_VEC __attribute__((optimize("O3")))
#else
#define QS_VEC
#endif

/* sum x^2 in double, 8 running sums (j % 8) then added in order: the same
 * bits on every level, and not one long dependency chain of adds */
QS_VEC static double sum_sq(const float *x, int64_t n)
{
    double a[8] = { 0 };
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; l++) a[l] += (double)x[j + l] * x[j + l];
    for (int l = 0; j < n; j++, l++) a[l] += (double)x[j] * x[j];
    double s = 0.0;
    for (int l = 0; l < 8; l++) s += a[l];
    return s;
}

/* sum c, sum c x, sum c x^2 of a group, once per search (lanes as sum_sq) */
QS_VEC static void group_sums(const float *x, int64_t n, const float *c, double *sw, double *sx, double *sxx)
{
    double a[8] = { 0 }, b[8] = { 0 }, e[8] = { 0 };
    for (int64_t j = 0; j < n; j++) {
        const int l = (int)(j & 7);
        double w = c[j], wx = w * x[j];
        a[l] += w;
        b[l] += wx;
        e[l] += wx * x[j];
    }
    double ta = 0.0, tb = 0.0, te = 0.0;
    for (int l = 0; l < 8; l++) {
        ta += a[l];
        tb += b[l];
        te += e[l];
    }
    *sw = ta;
    *sx = tb;
    *sxx = te;
}

QS_VEC void dsq_qsearch_weights(const float *x, int64_t n, const float *imp, float *c)
{
    /* Without calibration, llama.cpp's Q4_K prior (rms of the group plus
     * |x|): large weights matter more. With it, the activation's mean square
     * E[x_j^2] = imp_j^2 (imp is the rms the calibration measured) times the
     * same magnitude term, as llama.cpp uses its imatrix. */
    double s2 = sum_sq(x, n);
    float rms = n > 0 ? (float)sqrt(s2 / (double)n) : 0.0f;
    if (!imp) {
        /* a loop of its own: the compiler vectorizes it */
        for (int64_t j = 0; j < n; j++) c[j] = rms + fabsf(x[j]);
        return;
    }
    for (int64_t j = 0; j < n; j++) c[j] = imp[j] * imp[j] * sqrtf(rms * rms + x[j] * x[j]);
}

/* The scale the awq export will store (f16), when it is a positive normal
 * f16; else the f32 value (tiny or huge groups, which f16 cannot hold). */
static float f16_exact(float s)
{
    float h = dsq_f16_to_f32(dsq_f32_to_f16(s));
    return isfinite(h) && h >= 6.103515625e-05f ? h : s;
}

/* k->qstats and k->qtrial (kernels.h) have this type */
typedef void (*qpass_fn)(const float *, const float *, int64_t, float, float, float, double *);

/* Trial passes for m inverse scales (clamps lo[i]..hi[i]), DSQ_QTRIALS_MAX
 * to a sweep of k->qtrials: g[i] has the bits one k->qtrial call gives. */
static void trials(const dsq_kernels *k, const float *x, const float *c, int64_t n, int m, const float *inv,
                   const float *lo, const float *hi, double (*g)[3])
{
    for (int i = 0; i < m; i += DSQ_QTRIALS_MAX) {
        const int b = m - i < DSQ_QTRIALS_MAX ? m - i : DSQ_QTRIALS_MAX;
        k->qtrials(x, c, n, b, inv + i, lo + i, hi + i, g + i);
    }
}

/* ---- asymmetric (awq-w4a16) -------------------------------------------- */

/* Fit (scale, zero) to codes l = r + z0 (r, the pass's values for zero z0,
 * summarised in st[0..2]): least squares x ~ scale * l + m, zero =
 * rint(-m / scale) in 0..15, then the f16-exact scale refit for that zero.
 * *bound: the weighted error of (scale, zero) with these codes. 0: no fit
 * (degenerate codes or a non-positive scale). */
static int awq_fit(double sw, double sx, double sxx, const double st[3], int z0, float *s, int *z,
                   double *bound)
{
    const double sl = st[0] + z0 * sw, sl2 = st[1] + 2.0 * z0 * st[0] + (double)z0 * z0 * sw,
                 sxl = st[2] + z0 * sx;
    /* scale = P / D and offset m = Q / D, so -m / scale = -Q / P: one
     * division (this runs for every grid point of every group) */
    const double D = sw * sl2 - sl * sl, P = sw * sxl - sx * sl, Q = sl2 * sx - sl * sxl;
    if (!(D > 0.0) || !(P > 0.0)) return 0;
    double zz = rint(-Q / P);
    zz = zz < 0.0 ? 0.0 : zz > 15.0 ? 15.0 : zz;
    /* scale for the integer zero: sum c x (l - z) / sum c (l - z)^2 */
    double num = sxl - zz * sx, den = sl2 - 2.0 * zz * sl + zz * zz * sw;
    if (!(den > 0.0) || !(num > 0.0)) return 0;
    float f = f16_exact((float)(num / den));
    if (!(f > 0.0f) || !isfinite(f)) return 0;
    *s = f;
    *z = (int)zz;
    *bound = sxx - 2.0 * f * num + (double)f * f * den;
    return 1;
}

double dsq_qsearch_awq(const dsq_kernels *k, const float *x, int64_t n, const float *c, float mn, float mx,
                       float *scale, uint8_t *zero)
{
    const qpass_fn qs = k->qstats, qt = k->qtrial;
    float bs = *scale;
    int bz = *zero;
    double st[4];
    qs(x, c, n, bs, (float)-bz, (float)(15 - bz), st);
    double best = st[3];
    mn = mn < 0.0f ? mn : 0.0f;
    mx = mx > 0.0f ? mx : 0.0f;
    const float range = mx - mn;
    if (!(range > 1e-5f) || n < 2) return best;
    double sw, sx, sxx;
    group_sums(x, n, c, &sw, &sx, &sxx);
    /* the grid's trial codes (the rounding for scale range / steps and the
     * zero that puts mn at code 0), ranked by their refit's bound */
    float fs = 0.0f;
    int fz = 0;
    double fb = INFINITY;
    float inv[QS_NSTEP + 1], lo[QS_NSTEP + 1], hi[QS_NSTEP + 1];
    int zs[QS_NSTEP + 1];
    double gs[QS_NSTEP + 1][3];
    for (int i = 0; i <= QS_NSTEP; i++) {
        float sg = range / (15.0f + QS_RMIN + QS_RDELTA * (float)i), z0 = -rintf(mn / sg);
        zs[i] = (int)(z0 > 15.0f ? 15.0f : z0);
        inv[i] = 1.0f / sg;
        lo[i] = (float)-zs[i];
        hi[i] = (float)(15 - zs[i]);
    }
    trials(k, x, c, n, QS_NSTEP + 1, inv, lo, hi, gs);
    for (int i = 0; i <= QS_NSTEP; i++) {
        const int zi = zs[i];
        float s;
        int z;
        double b;
        if (awq_fit(sw, sx, sxx, gs[i], zi, &s, &z, &b) && b < fb) {
            fb = b;
            fs = s;
            fz = z;
        }
    }
    if (fs == 0.0f) return best;
    /* alternate from the best refit: its trial codes, their refit, while
     * the estimated error falls; the one kept is scored with the
     * quantizer's codes against the start */
    float ks = fs, s = fs;
    int kz = fz, z = fz;
    double ke = INFINITY;
    for (int r = 0; r <= QS_ROUNDS; r++) {
        double g[4], b;
        qt(x, c, n, 1.0f / s, (float)-z, (float)(15 - z), g);
        /* error of (s, z) with those codes (r = l - z) */
        const double e = sxx - 2.0 * s * g[2] + (double)s * s * g[1];
        if (!(e < ke)) break;
        ke = e;
        ks = s;
        kz = z;
        float s2;
        int z2;
        if (!awq_fit(sw, sx, sxx, g, z, &s2, &z2, &b) || (s2 == s && z2 == z)) break;
        s = s2;
        z = z2;
    }
    qs(x, c, n, ks, (float)-kz, (float)(15 - kz), st);
    if (st[3] < best) {
        best = st[3];
        bs = ks;
        bz = kz;
    }
    *scale = bs;
    *zero = (uint8_t)bz;
    return best;
}

/* ---- symmetric (w4a8) --------------------------------------------------- */

/* scale = sum c x q / sum c q^2 for the codes summarised in st; 0 when not
 * positive. *bound: its weighted error with these codes, less the constant
 * sum c x^2 (only compared between trials). */
/* The weighted error of scale s with the codes summarised in st, less the
 * constant sum c x^2 (these are only compared with each other). */
static double sym_err(float s, const double st[4])
{
    return -2.0 * s * st[2] + (double)s * s * st[1];
}

static float sym_fit(const double st[4], double *bound)
{
    if (!(st[1] > 0.0) || !(st[2] > 0.0)) return 0.0f;
    float s = (float)(st[2] / st[1]);
    if (!(s >= DSQ_QSCALE_MIN) || !isfinite(s)) return 0.0f;
    *bound = sym_err(s, st);
    return s;
}

/* Trial passes of inverse-scale steps ts[i] / 10 over amax, i < m (at
 * most QS_TRIALS, one k->qtrials batch): where a step's trial codes refit
 * to a scale whose bound is below *fb, that becomes the best (*fb, *fs,
 * *bt), in the order of ts (the first of equal bounds stays). */
#define QS_TRIALS 8
_Static_assert(2 * (QS_COARSE - 1) <= QS_TRIALS, "the fine grid fits one sym_trials call");
static void sym_trials(const dsq_kernels *k, const float *x, int64_t n, const float *c, float amax, const int *ts,
                       int m, float lo, float hi, double *fb, float *fs, int *bt)
{
    float inv[QS_TRIALS], l[QS_TRIALS], h[QS_TRIALS];
    int at[QS_TRIALS], v = 0;
    double g[QS_TRIALS][3];
    for (int i = 0; i < m; i++) {
        const float st = amax / (0.1f * (float)ts[i]);
        if (!(st >= DSQ_QSCALE_MIN) || !isfinite(st)) continue;
        inv[v] = 1.0f / st;
        l[v] = lo;
        h[v] = hi;
        at[v++] = ts[i];
    }
    trials(k, x, c, n, v, inv, l, h, g);
    for (int i = 0; i < v; i++) {
        double b;
        const float s = sym_fit(g[i], &b);
        if (s != 0.0f && b < *fb) {
            *fb = b;
            *fs = s;
            *bt = at[i];
        }
    }
}

double dsq_qsearch_sym(const dsq_kernels *k, const float *x, int64_t n, const float *c, int qlo, int qmax,
                       float amax, float *scale)
{
    const qpass_fn qs = k->qstats, qt = k->qtrial;
    const float lo = (float)qlo, hi = (float)qmax;
    float bs = *scale;
    double bst[4];
    qs(x, c, n, bs, lo, hi, bst);
    double best = bst[3];
    if (!(amax > 0.0f) || n < 1) return best;
    /* inverse scales from min(qmax, -qlo) - 0.9 to max(qmax, -qlo) + 0.9
     * steps over amax, in tenths (w4a8: 6.1 .. 8.9: both extremes' seeds),
     * every QS_COARSE-th first, then the tenths around the best of those;
     * ranked by their codes' refit bound */
    const int t0 = 10 * (qmax < -qlo ? qmax : -qlo) - 9, t1 = 10 * (qmax > -qlo ? qmax : -qlo) + 9;
    const int cs = QS_COARSE;
    float fs = 0.0f;
    double fb = INFINITY;
    int bt = t0, ts[QS_TRIALS], m;
    for (int t = t0; t <= t1;) {   /* the coarse grid, QS_TRIALS at a time */
        for (m = 0; t <= t1 && m < QS_TRIALS; t += cs) ts[m++] = t;
        sym_trials(k, x, n, c, amax, ts, m, lo, hi, &fb, &fs, &bt);
    }
    const int bc = bt;
    m = 0;   /* the tenths around it: 2 (QS_COARSE - 1) <= QS_TRIALS */
    for (int t = bc - cs + 1; t < bc + cs; t++)
        if (t != bc && t >= t0 && t <= t1) ts[m++] = t;
    sym_trials(k, x, n, c, amax, ts, m, lo, hi, &fb, &fs, &bt);
    /* alternate from the best refit: the trial codes of the scale, their
     * refit, while the estimated error (- 2 s sum c x q + s^2 sum c q^2 of
     * the trial sums, plus the constant sum c x^2) falls; then the one
     * kept is scored with the quantizer's codes against the start */
    if (fs == 0.0f) return best;
    float ks = fs, s = fs;
    double ke = INFINITY;
    for (int r = 0; r <= QS_ROUNDS; r++) {
        double g[4], b;
        qt(x, c, n, 1.0f / s, lo, hi, g);
        /* (sum c x^2 is left out: summing it cost as much as 7 trial
         * passes on a 7168-column row, being scalar double) */
        const double e = sym_err(s, g);
        if (!(e < ke)) break;
        ke = e;
        ks = s;
        float s2 = sym_fit(g, &b);
        if (s2 == 0.0f || s2 == s) break;
        s = s2;
    }
    double st[4];
    qs(x, c, n, ks, lo, hi, st);
    if (st[3] < best) {
        best = st[3];
        bs = ks;
    }
    *scale = bs;
    return best;
}
