/* actq.c - int8 activation quantization (see actq.h). */
#include "actq.h"
#include "kernels.h"
#include "dsq_mem.h"

#include <math.h>
#include <string.h>

void dsq_actq_token_k(const dsq_kernels *k, const float *x, int64_t T, int64_t cols, int8_t *q,
                      int64_t ldq, float *scale)
{
    for (int64_t t = 0; t < T; t++) {
        const float *xr = x + t * cols;
        float amax = dsq_bits_f32(k->absmax_bits(xr, cols));
        float s = amax / 127.0f;
        if (s < DSQ_QSCALE_MIN) s = DSQ_QSCALE_MIN;   /* false for NaN: NaN propagates */
        scale[t] = s;
        k->quant_i8(xr, cols, s, 0, -127, 127, q + t * ldq);
        if (ldq > cols) memset(q + t * ldq + cols, 0, (size_t)(ldq - cols));
    }
}

void dsq_actq_static_k(const dsq_kernels *k, const float *x, int64_t T, int64_t cols, int8_t *q,
                       int64_t ldq, float act_scale, int32_t act_offset)
{
    for (int64_t t = 0; t < T; t++) {
        k->quant_i8(x + t * cols, cols, act_scale, act_offset, -128, 127, q + t * ldq);
        if (ldq > cols) memset(q + t * ldq + cols, 0, (size_t)(ldq - cols));
    }
}

void dsq_actq_token(const float *x, int64_t T, int64_t cols, int8_t *q, int64_t ldq, float *scale)
{
    dsq_actq_token_k(dsq_kernels_get(), x, T, cols, q, ldq, scale);
}

void dsq_actq_static(const float *x, int64_t T, int64_t cols, int8_t *q, int64_t ldq,
                     float act_scale, int32_t act_offset)
{
    dsq_actq_static_k(dsq_kernels_get(), x, T, cols, q, ldq, act_scale, act_offset);
}

void dsq_actq_group_sums(const int8_t *q, int64_t T, int64_t ldq, int64_t gsize, int64_t ngroups,
                         int32_t *gsum, int64_t ldg)
{
    /* the level's sum_i8: exact integer sums, so any level gives the same */
    const dsq_kernels *k = dsq_kernels_get();
    for (int64_t t = 0; t < T; t++) {
        const int8_t *qr = q + t * ldq;
        for (int64_t g = 0; g < ngroups; g++) {
            int64_t k0 = g * gsize, k1 = g == ngroups - 1 ? ldq : k0 + gsize;
            if (k1 > ldq) k1 = ldq;
            gsum[g * ldg + t] = k0 < k1 ? k->sum_i8(qr + k0, k1 - k0) : 0;
        }
    }
}

void dsq_actq16_block(const float *x, int64_t n, int16_t q[128], float *xs)
{
    /* every level's absmax_bits gives the same bits */
    const uint32_t mb = dsq_kernels_get()->absmax_bits(x, n);
    if (mb >= 0x7f800000u) {   /* Inf or NaN in the block */
        *xs = NAN;
        memset(q, 0, 128 * sizeof *q);
        return;
    }
    float s = dsq_bits_f32(mb) / (float)DSQ_AWQ16_QMAX;
    if (s < DSQ_QSCALE_MIN) s = DSQ_QSCALE_MIN;
    *xs = s;
    for (int64_t k = 0; k < 128; k++) {
        float r = k < n ? rintf(x[k] / s) : 0.0f;
        r = fmaxf(r, (float)-DSQ_AWQ16_QMAX);
        r = fminf(r, (float)DSQ_AWQ16_QMAX);
        q[k] = (int16_t)r;
    }
}

void dsq_actq16_fake(const float *x, int64_t T, int64_t cols, float *out)
{
    int16_t q[128];
    for (int64_t t = 0; t < T; t++)
        for (int64_t c0 = 0; c0 < cols; c0 += 128) {
            const int64_t n = cols - c0 < 128 ? cols - c0 : 128;
            float xs;
            dsq_actq16_block(x + t * cols + c0, n, q, &xs);
            for (int64_t k = 0; k < n; k++) out[t * cols + c0 + k] = (float)q[k] * xs;
        }
}

int dsq_actq_static_params(const float *mn, const float *mx, const float *absmax,
                           const float *div, int64_t cols, float *scale, int32_t *offset)
{
    double lo = 0.0, hi = 0.0;   /* the range always includes 0 */
    if (mn && mx) {
        for (int64_t j = 0; j < cols; j++) {
            double a = mn[j], b = mx[j];
            if (!isfinite(a) || !isfinite(b)) return -1;
            if (div) { a /= div[j]; b /= div[j]; }
            if (a < lo) lo = a;
            if (b > hi) hi = b;
        }
        float s = (float)((hi - lo) / 255.0);
        if (!(s >= DSQ_QSCALE_MIN)) s = DSQ_QSCALE_MIN;
        double o = rint(-128.0 - lo / (double)s);
        if (o < -128) o = -128;
        if (o > 127) o = 127;
        *scale = s;
        *offset = (int32_t)o;
        return 0;
    }
    if (absmax) {
        for (int64_t j = 0; j < cols; j++) {
            double a = fabs((double)absmax[j]);
            if (!isfinite(a)) return -1;
            if (div) a /= div[j];
            if (a > hi) hi = a;
        }
        float s = (float)(hi / 127.0);
        if (!(s >= DSQ_QSCALE_MIN)) s = DSQ_QSCALE_MIN;
        *scale = s;
        *offset = 0;
        return 0;
    }
    return -1;
}
