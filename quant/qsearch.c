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
 * Every candidate is scored with the quantizer's own rounding
 * (clamp(rint(x / scale) (+ zero))), and the min/max parameters are the
 * first candidate, so the result's weighted error is never above RTN's. */
#include "kernels.h"
#include "dsq_mem.h"

#include <math.h>

/* llama.cpp's k-quant grid: inverse scales (steps + QS_RMIN + QS_RDELTA * i)
 * / range for i <= QS_NSTEP, i.e. 14..16 steps over the range for int4. */
#define QS_RMIN   (-1.0f)
#define QS_RDELTA 0.1f
#define QS_NSTEP  20
#define QS_ROUNDS 4   /* refit/re-round rounds after the grid */

void dsq_qsearch_weights(const float *x, int64_t n, const float *imp, float *c)
{
    /* Without calibration, llama.cpp's Q4_K prior (rms of the group plus
     * |x|): large weights matter more. With it, the activation's mean square
     * E[x_j^2] = imp_j^2 (imp is the rms the calibration measured) times the
     * same magnitude term, as llama.cpp uses its imatrix. */
    double s2 = 0.0;
    for (int64_t j = 0; j < n; j++) s2 += (double)x[j] * x[j];
    float rms = n > 0 ? (float)sqrt(s2 / (double)n) : 0.0f;
    for (int64_t j = 0; j < n; j++) {
        float m = imp ? sqrtf(rms * rms + x[j] * x[j]) : rms + fabsf(x[j]);
        c[j] = imp ? imp[j] * imp[j] * m : m;
    }
}

/* The scale the awq export will store (f16), when it is a positive normal
 * f16; else the f32 value (tiny or huge groups, which f16 cannot hold). */
static float f16_exact(float s)
{
    float h = dsq_f16_to_f32(dsq_f32_to_f16(s));
    return isfinite(h) && h >= 6.103515625e-05f ? h : s;
}

/* ---- asymmetric (awq-w4a16) -------------------------------------------- */

/* Weighted error of the quantizer's codes (k->quant_i8, into l) for (s, z). */
static double awq_err(const dsq_kernels *k, const float *x, int64_t n, const float *c, float s, int z,
                      int8_t *l)
{
    k->quant_i8(x, n, s, z, 0, 15, l);
    double e = 0.0;
    for (int64_t j = 0; j < n; j++) {
        float d = x[j] - (float)(l[j] - z) * s;
        e += (double)c[j] * (double)d * (double)d;
    }
    return e;
}

/* Fit (scale, zero) to codes l: least squares x ~ scale * l + m, zero =
 * rint(-m / scale) in 0..15, then the scale refit for that zero. 0: no fit
 * (degenerate codes or a non-positive scale). */
static int awq_fit(const float *x, int64_t n, const float *c, const int8_t *l, float *s, int *z)
{
    double sw = 0, sx = 0, sl = 0, sl2 = 0, sxl = 0;
    for (int64_t j = 0; j < n; j++) {
        double w = c[j], lj = l[j], wx = w * x[j];
        sw += w;
        sx += wx;
        sl += w * lj;
        sl2 += w * lj * lj;
        sxl += wx * lj;
    }
    double D = sw * sl2 - sl * sl;
    if (!(D > 0.0)) return 0;
    double sc = (sw * sxl - sx * sl) / D, m = (sl2 * sx - sl * sxl) / D;
    if (!(sc > 0.0)) return 0;
    double zz = rint(-m / sc);
    zz = zz < 0.0 ? 0.0 : zz > 15.0 ? 15.0 : zz;
    /* scale for the integer zero: sum c x (l - z) / sum c (l - z)^2 */
    double num = sxl - zz * sx, den = sl2 - 2.0 * zz * sl + zz * zz * sw;
    if (!(den > 0.0) || !(num > 0.0)) return 0;
    float f = f16_exact((float)(num / den));
    if (!(f > 0.0f) || !isfinite(f)) return 0;
    *s = f;
    *z = (int)zz;
    return 1;
}

double dsq_qsearch_awq(const dsq_kernels *k, const float *x, int64_t n, const float *c, float mn, float mx,
                       float *scale, uint8_t *zero, int8_t *tmp)
{
    float bs = *scale;
    int bz = *zero;
    double best = awq_err(k, x, n, c, bs, bz, tmp);
    mn = mn < 0.0f ? mn : 0.0f;
    mx = mx > 0.0f ? mx : 0.0f;
    const float range = mx - mn;
    if (!(range > 1e-5f) || n < 2) return best;
    for (int i = 0; i <= QS_NSTEP; i++) {
        /* the grid's codes: the quantizer's own for scale range / steps and
         * the zero that puts mn at code 0 */
        float st = range / (15.0f + QS_RMIN + QS_RDELTA * (float)i), z0 = -rintf(mn / st);
        k->quant_i8(x, n, st, (int32_t)(z0 > 15.0f ? 15.0f : z0), 0, 15, tmp);
        float s;
        int z;
        if (!awq_fit(x, n, c, tmp, &s, &z)) continue;
        double e = awq_err(k, x, n, c, s, z, tmp);
        if (e < best) {
            best = e;
            bs = s;
            bz = z;
        }
    }
    /* alternate: the quantizer's codes for the best parameters, refit */
    for (int r = 0; r < QS_ROUNDS; r++) {
        k->quant_i8(x, n, bs, bz, 0, 15, tmp);
        float s;
        int z;
        if (!awq_fit(x, n, c, tmp, &s, &z)) break;
        double e = awq_err(k, x, n, c, s, z, tmp);
        if (!(e < best)) break;
        best = e;
        bs = s;
        bz = z;
    }
    *scale = bs;
    *zero = (uint8_t)bz;
    return best;
}

/* ---- symmetric (w4a8) --------------------------------------------------- */

static double sym_err(const dsq_kernels *k, const float *x, int64_t n, const float *c, float s, int qlo,
                      int qmax, int8_t *l)
{
    k->quant_i8(x, n, s, 0, qlo, qmax, l);
    double e = 0.0;
    for (int64_t j = 0; j < n; j++) {
        float d = x[j] - (float)l[j] * s;
        e += (double)c[j] * (double)d * (double)d;
    }
    return e;
}

/* scale = sum c x q / sum c q^2 for the quantizer's codes of scale st; 0
 * when not positive. */
static float sym_fit(const dsq_kernels *k, const float *x, int64_t n, const float *c, float st, int qlo,
                     int qmax, int8_t *l)
{
    k->quant_i8(x, n, st, 0, qlo, qmax, l);
    double num = 0.0, den = 0.0;
    for (int64_t j = 0; j < n; j++) {
        double cq = (double)c[j] * l[j];
        num += cq * x[j];
        den += cq * l[j];
    }
    if (!(den > 0.0) || !(num > 0.0)) return 0.0f;
    float s = (float)(num / den);
    return s >= DSQ_QSCALE_MIN && isfinite(s) ? s : 0.0f;
}

double dsq_qsearch_sym(const dsq_kernels *k, const float *x, int64_t n, const float *c, int qlo, int qmax,
                       float amax, float *scale, int8_t *tmp)
{
    float bs = *scale;
    double best = sym_err(k, x, n, c, bs, qlo, qmax, tmp);
    if (!(amax > 0.0f) || n < 1) return best;
    const float steps[2] = { (float)qmax, (float)-qlo };
    for (int j = 0; j < 2; j++)
        for (int i = -9; i <= 9; i++) {
            float s = sym_fit(k, x, n, c, amax / (steps[j] + 0.1f * (float)i), qlo, qmax, tmp);
            if (s == 0.0f) continue;
            double e = sym_err(k, x, n, c, s, qlo, qmax, tmp);
            if (e < best) {
                best = e;
                bs = s;
            }
        }
    for (int r = 0; r < QS_ROUNDS; r++) {
        float s = sym_fit(k, x, n, c, bs, qlo, qmax, tmp);
        if (s == 0.0f) break;
        double e = sym_err(k, x, n, c, s, qlo, qmax, tmp);
        if (!(e < best)) break;
        best = e;
        bs = s;
    }
    *scale = bs;
    return best;
}
