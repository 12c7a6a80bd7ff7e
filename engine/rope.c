/* rope.c - rotary position embeddings: frequencies (plain, linear, llama3,
 * YaRN) and the two rotation layouts.
 *
 * Layouts. DeepSeek's reference rotates adjacent pairs (x[2i], x[2i+1]) as a
 * complex number (inference/model.py apply_rotary_emb; HF rope_interleave).
 * HF Llama/Qwen2 rotate_half pairs x[i] with x[i + d/2]. Both use frequency i
 * for pair i, so they differ only in which elements form a pair.
 *
 * Frequencies are computed the way torch does it, in float32:
 *   inv_freq[i] = 1 / base^((2i) / dim)
 * and the angle is (float)pos * inv_freq[i] (torch.outer in float32). */
#include "ops.h"
#include "dsq_error.h"

#include <math.h>
#include <string.h>

void dsq_rope_params_default(dsq_rope_params *p, int dim)
{
    memset(p, 0, sizeof *p);
    p->dim = dim;
    p->style = DSQ_ROPE_PAIRS;
    p->theta = 10000.0;
    p->scaling = DSQ_ROPE_NONE;
    p->factor = 1.0;
    p->original_max_pos = 4096;
    p->beta_fast = 32.0;
    p->beta_slow = 1.0;
    p->mscale = 1.0;
    p->low_freq_factor = 1.0;
    p->high_freq_factor = 4.0;
}

double dsq_yarn_get_mscale(double factor, double mscale)
{
    if (factor <= 1.0) return 1.0;
    return 0.1 * mscale * log(factor) + 1.0;
}

/* Dimension index at which a wavelength completes num_rot rotations over the
 * original context: dim * ln(max_pos / (num_rot * 2 pi)) / (2 ln base). */
static double correction_dim(double num_rot, int dim, double base, int max_pos)
{
    return (dim * log((double)max_pos / (num_rot * 2.0 * M_PI))) / (2.0 * log(base));
}

void dsq_yarn_correction_range(double beta_fast, double beta_slow, int dim, double base,
                               int original_max_pos, int *low, int *high)
{
    double lo = floor(correction_dim(beta_fast, dim, base, original_max_pos));
    double hi = ceil(correction_dim(beta_slow, dim, base, original_max_pos));
    if (lo < 0) lo = 0;
    if (hi > dim - 1) hi = dim - 1;
    *low = (int)lo;
    *high = (int)hi;
}

int dsq_rope_init(dsq_rope *r, const dsq_rope_params *p)
{
    memset(r, 0, sizeof *r);
    if (p->dim <= 0 || p->dim % 2 || p->dim > DSQ_ROPE_MAX_DIM || !(p->theta > 1.0))
        return DSQ_ERR_INVALID_ARG;
    if (p->style != DSQ_ROPE_PAIRS && p->style != DSQ_ROPE_HALF) return DSQ_ERR_INVALID_ARG;
    const int dim = p->dim, half = dim / 2;
    r->dim = dim;
    r->style = p->style;
    r->cos_sin_scale = 1.0f;
    /* torch: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all float32 */
    for (int i = 0; i < half; i++) {
        float e = (float)(2 * i) / (float)dim;
        r->inv_freq[i] = 1.0f / powf((float)p->theta, e);
    }
    switch (p->scaling) {
    case DSQ_ROPE_NONE:
        break;
    case DSQ_ROPE_LINEAR:
        if (!(p->factor > 0)) return DSQ_ERR_INVALID_ARG;
        for (int i = 0; i < half; i++) r->inv_freq[i] /= (float)p->factor;
        break;
    case DSQ_ROPE_LLAMA3: {
        /* transformers _compute_llama3_parameters */
        if (!(p->factor > 0) || p->original_max_pos <= 0 ||
            !(p->high_freq_factor > p->low_freq_factor) || !(p->low_freq_factor > 0))
            return DSQ_ERR_INVALID_ARG;
        double old_ctx = p->original_max_pos;
        double low_wl = old_ctx / p->low_freq_factor, high_wl = old_ctx / p->high_freq_factor;
        for (int i = 0; i < half; i++) {
            double f = r->inv_freq[i];
            double wl = 2.0 * M_PI / f;
            double out;
            if (wl > low_wl) {
                out = f / p->factor;                 /* long wavelengths: interpolate */
            } else if (wl < high_wl) {
                out = f;                             /* short wavelengths: keep */
            } else {
                double smooth = (old_ctx / wl - p->low_freq_factor) /
                                (p->high_freq_factor - p->low_freq_factor);
                out = (1.0 - smooth) * f / p->factor + smooth * f;
            }
            r->inv_freq[i] = (float)out;
        }
        break;
    }
    case DSQ_ROPE_YARN: {
        if (!(p->factor >= 1.0) || p->original_max_pos <= 0 || !(p->beta_fast > 0) ||
            !(p->beta_slow > 0))
            return DSQ_ERR_INVALID_ARG;
        int low, high;
        dsq_yarn_correction_range(p->beta_fast, p->beta_slow, dim, p->theta,
                                  p->original_max_pos, &low, &high);
        r->yarn_low = low;
        r->yarn_high = high;
        /* linear_ramp_factor(low, high, dim/2): 0 below low, 1 above high.
         * ramp 1 = interpolate (freq / factor), ramp 0 = keep (extrapolate). */
        float lo = (float)low, hi = (float)high;
        if (lo == hi) hi += 0.001f;
        for (int i = 0; i < half; i++) {
            float ramp = ((float)i - lo) / (hi - lo);
            if (ramp < 0) ramp = 0;
            if (ramp > 1) ramp = 1;
            float f = r->inv_freq[i];
            r->inv_freq[i] = f / (float)p->factor * ramp + f * (1.0f - ramp);
        }
        /* cos/sin multiplier. DeepSeek: mscale(f, mscale) / mscale(f,
         * mscale_all_dim) (1 for V3, whose attention scale carries the
         * mscale^2 instead); generic HF yarn: attention_factor or
         * 0.1 ln f + 1. */
        double m;
        if (p->attention_factor > 0) m = p->attention_factor;
        else if (p->mscale_all_dim != 0)
            m = dsq_yarn_get_mscale(p->factor, p->mscale != 0 ? p->mscale : 1.0) /
                dsq_yarn_get_mscale(p->factor, p->mscale_all_dim);
        else m = dsq_yarn_get_mscale(p->factor, p->mscale != 0 ? p->mscale : 1.0);
        r->cos_sin_scale = (float)m;
        break;
    }
    default:
        return DSQ_ERR_INVALID_ARG;
    }
    return DSQ_OK;
}

void dsq_rope_cos_sin(const dsq_rope *r, int64_t pos, float *cos_out, float *sin_out)
{
    const int half = r->dim / 2;
    const float fp = (float)pos;
    for (int i = 0; i < half; i++) {
        float a = fp * r->inv_freq[i];
        cos_out[i] = cosf(a) * r->cos_sin_scale;
        sin_out[i] = sinf(a) * r->cos_sin_scale;
    }
}

void dsq_rope_apply(const dsq_rope *r, float *x, const float *c, const float *s)
{
    const int half = r->dim / 2;
    if (r->style == DSQ_ROPE_PAIRS) {
        for (int i = 0; i < half; i++) {
            float a = x[2 * i], b = x[2 * i + 1];
            x[2 * i] = a * c[i] - b * s[i];
            x[2 * i + 1] = a * s[i] + b * c[i];
        }
    } else {
        for (int i = 0; i < half; i++) {
            float a = x[i], b = x[i + half];
            x[i] = a * c[i] - b * s[i];
            x[i + half] = b * c[i] + a * s[i];
        }
    }
}
