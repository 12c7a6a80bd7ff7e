/* smooth.h - SmoothQuant scales, their safety rules, static activation
 * parameters and the folding arithmetic (docs/serving-exports.md,
 * "SmoothQuant" and "AscendV1" / "W8A8 (static)").
 *
 * SmoothQuant (mit-han-lab smooth.py): per input channel j of a group of
 * linears reading the same tensor X,
 *     s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)
 * with max|X_j| and max|W_j| (over every consumer's rows) clamped to >= 1e-5.
 * The group's producer absorbs 1/s (norm weight w_j / s_j, or the producing
 * linear's output row / s_j, and its bias) and every consumer's column j is
 * multiplied by s_j, so X' = X / s and W' = W s compute the same function.
 *
 * Safety (every scale dsq hands out goes through dsq_scales_sanitize):
 *   - a dead channel (the statistic is 0: the channel never fired, or the
 *     site saw no tokens) gets s_j = 1;
 *   - non-finite or non-positive values become 1;
 *   - values are clamped to [DSQ_SCALE_MIN, DSQ_SCALE_MAX] = [1e-5, 1e5],
 *     far inside float range, so W s and w / s stay finite for any finite
 *     weights.
 * dsq_scales_normalize divides by sqrt(max * min) over live channels (AutoAWQ
 * does this after its formula; it changes nothing for per-channel or
 * per-group weight quantization with per-token activations, and keeps the
 * folded norm weights near their original magnitude).
 *
 * Static activations (w8a8, msModelSlim W8A8): per-tensor asymmetric int8
 * from the calibration range of X / s: lo = min(0, min_j vmin_j / s_j),
 * hi = max(0, max_j vmax_j / s_j), scale = (hi - lo) / 255, offset =
 * clamp(rint(-128 - lo / scale), -128, 127) (quant/actq.h). */
#ifndef DSQ_SMOOTH_H
#define DSQ_SMOOTH_H

#include <stddef.h>
#include <stdint.h>

#define DSQ_SCALE_MIN 1e-5f
#define DSQ_SCALE_MAX 1e5f
#define DSQ_SMOOTH_ALPHA_DEFAULT 0.5f

/* s[n] from per-channel max|X| (xmax) and max|W| (wmax). alpha in [0, 1].
 * Channels with xmax == 0 get 1. Result sanitized (not normalized). */
void dsq_smooth_scales(const float *xmax, const float *wmax, int64_t n, float alpha, float *s);

/* Flex smoothing (msModelSlim flex_smooth_quant, scale_computation.py:232-254):
 *     s_j = max|X_j|^alpha / max|W_j|^beta,
 * alpha and beta in [0, 1] independently (SmoothQuant is beta = 1 - alpha);
 * the same clamps, dead channels and sanitizing as dsq_smooth_scales. */
void dsq_flex_scales(const float *xmax, const float *wmax, int64_t n, float alpha, float beta, float *s);

/* Divide s by sqrt(max * min) over channels whose live[j] != 0 (live may be
 * NULL: all), then sanitize; dead channels are set to 1. */
void dsq_scales_normalize(float *s, const float *live, int64_t n);
/* Non-finite / <= 0 -> 1; clamp to [DSQ_SCALE_MIN, DSQ_SCALE_MAX]. Returns
 * how many values had to be replaced (not counting clamps). */
int64_t dsq_scales_sanitize(float *s, int64_t n);
/* 1 when every value is finite and within the clamp range. */
int dsq_scales_ok(const float *s, int64_t n);

/* Static per-tensor params for X / s (s may be NULL) from per-channel
 * vmin/vmax. Returns 0, or -1 for non-finite input. offset is integer-valued. */
int dsq_smooth_act_static(const float *vmin, const float *vmax, const float *s, int64_t n, float *scale,
                          float *offset);

/* Folding on float matrices [rows][cols] (row-major):
 *   cols: W[:, j] *= s[j]     (consumers)
 *   rows: W[i, :] *= rs[i]    (producer rows absorbing 1/s; rs = 1/s mapped)
 * and 1-D vectors (norm weights, biases): v[i] *= rs[i]. */
void dsq_fold_cols(float *w, int64_t rows, int64_t cols, const float *s);
void dsq_fold_rows(float *w, int64_t rows, int64_t cols, const float *rs);

#endif
