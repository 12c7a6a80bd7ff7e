/* smooth.c - SmoothQuant scales, sanitizing, static activation params, folding. */
#include "smooth.h"
#include "actq.h"

#include <math.h>

int64_t dsq_scales_sanitize(float *s, int64_t n)
{
    int64_t fixed = 0;
    for (int64_t j = 0; j < n; j++) {
        float v = s[j];
        if (!isfinite(v) || !(v > 0.0f)) {
            s[j] = 1.0f;
            fixed++;
        } else if (v < DSQ_SCALE_MIN) {
            s[j] = DSQ_SCALE_MIN;
        } else if (v > DSQ_SCALE_MAX) {
            s[j] = DSQ_SCALE_MAX;
        }
    }
    return fixed;
}

int dsq_scales_ok(const float *s, int64_t n)
{
    for (int64_t j = 0; j < n; j++)
        if (!isfinite(s[j]) || s[j] < DSQ_SCALE_MIN || s[j] > DSQ_SCALE_MAX) return 0;
    return 1;
}

void dsq_smooth_scales(const float *xmax, const float *wmax, int64_t n, float alpha, float *s)
{
    double a = alpha < 0.0f ? 0.0 : alpha > 1.0f ? 1.0 : (double)alpha;
    for (int64_t j = 0; j < n; j++) {
        if (!(xmax[j] > 0.0f) || !isfinite(xmax[j])) {   /* dead channel */
            s[j] = 1.0f;
            continue;
        }
        double x = xmax[j] > 1e-5f ? xmax[j] : 1e-5;
        double w = wmax[j] > 1e-5f && isfinite(wmax[j]) ? wmax[j] : 1e-5;
        s[j] = (float)(pow(x, a) / pow(w, 1.0 - a));
    }
    dsq_scales_sanitize(s, n);
}

void dsq_flex_scales(const float *xmax, const float *wmax, int64_t n, float alpha, float beta, float *s)
{
    double a = alpha < 0.0f ? 0.0 : alpha > 1.0f ? 1.0 : (double)alpha;
    double b = beta < 0.0f ? 0.0 : beta > 1.0f ? 1.0 : (double)beta;
    for (int64_t j = 0; j < n; j++) {
        if (!(xmax[j] > 0.0f) || !isfinite(xmax[j])) {   /* dead channel */
            s[j] = 1.0f;
            continue;
        }
        double x = xmax[j] > 1e-5f ? xmax[j] : 1e-5;
        double w = wmax[j] > 1e-5f && isfinite(wmax[j]) ? wmax[j] : 1e-5;
        s[j] = (float)(pow(x, a) / pow(w, b));
    }
    dsq_scales_sanitize(s, n);
}

void dsq_scales_normalize(float *s, const float *live, int64_t n)
{
    dsq_scales_sanitize(s, n);
    float mx = 0.0f, mn = INFINITY;
    for (int64_t j = 0; j < n; j++) {
        if (live && !(live[j] > 0.0f)) continue;
        if (s[j] > mx) mx = s[j];
        if (s[j] < mn) mn = s[j];
    }
    if (mx > 0.0f && isfinite(mn)) {
        double k = sqrt((double)mx * (double)mn);
        if (k > 0.0 && isfinite(k))
            for (int64_t j = 0; j < n; j++) s[j] = (float)((double)s[j] / k);
    }
    if (live)
        for (int64_t j = 0; j < n; j++)
            if (!(live[j] > 0.0f)) s[j] = 1.0f;
    dsq_scales_sanitize(s, n);
}

int dsq_smooth_act_static(const float *vmin, const float *vmax, const float *s, int64_t n, float *scale,
                          float *offset)
{
    int32_t o = 0;
    if (dsq_actq_static_params(vmin, vmax, NULL, s, n, scale, &o) < 0) return -1;
    *offset = (float)o;
    return 0;
}

void dsq_fold_cols(float *w, int64_t rows, int64_t cols, const float *s)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) w[i * cols + j] *= s[j];
}

void dsq_fold_rows(float *w, int64_t rows, int64_t cols, const float *rs)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) w[i * cols + j] *= rs[i];
}
