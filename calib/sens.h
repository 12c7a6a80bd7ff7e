/* sens.h - quantization sensitivity of a linear, and the rollback choice.
 *
 * Sensitivity is the relative output error of the linear as the converter
 * will write it, measured on the calibration rows kept for its input (the
 * site's sample reservoir, calib.h awq_tokens / awq_expert_tokens):
 *
 *     sens = sum (y_q - y)^2 / sum y^2,   y = (x / s) W'^T,  y_q = the scheme's gemm
 *
 * W' is the weight with the entry's folded scales (in_scale, row_scale), y_q
 * comes from the stored blob: GPTQ's, else W' clipped as the entry says and
 * quantized with its parameters, and the scheme's own activation path
 * (per-token int8 for the dynamic schemes, the static range for w8a8). So it
 * sees what a weight-only proxy (X^T X) cannot: a w8a8-dynamic linear whose
 * input rows are sparse with a few large values loses most of its small
 * activations to the per-token scale (docs/calibration.md, "Weights or
 * activations?").
 *
 * Rollback (ds-quant --rollback N): the N served modules (dsq_sens_unit:
 * fused pairs count once, with their larger sensitivity; routed experts are
 * never candidates) with the largest sensitivity stay in their float type, as msModelSlim's sensitive-layer
 * rollback and ModelOpt's auto_quantize do. The output stays a plain model
 * of its scheme with those tensors float (vllm-ascend: "FLOAT" in
 * quant_model_description; compressed-tensors: in "ignore"). */
#ifndef DSQ_SENS_H
#define DSQ_SENS_H

#include "calib.h"
#include "model.h"
#include "stats.h"

/* *rel = sensitivity of l under scheme sc (group gs) with calibration entry
 * t (may be NULL: unscaled RTN) on site's sampled rows; -1 when the site kept
 * no rows. DSQ_ERR_NOMEM, or the quantizer's / gemm's error. */
int dsq_linear_sensitivity(const dsq_linear *l, const dsq_scheme *sc, int32_t gs, const dsq_calib_tensor *t,
                           const dsq_act_stats *site, dsq_pool *pool, double *rel, dsq_diag *d);

/* The module a linear is served as, for rollback (a serving engine loads a
 * module with one type: docs/serving-exports.md, "Fused modules and MoE
 * layers"): "P.gate_up_proj" for
 * P.gate_proj / P.up_proj, "P.fused_qkv_a_proj" for P.q_a_proj /
 * P.kv_a_proj_with_mqa, "P.qkv_proj" for P.q_proj / k_proj / v_proj, else the
 * name without ".weight". 0 for a routed expert's linear (a layer's experts
 * are one fused MoE of one type; keeping all of them float is not a
 * rollback), else 1. */
int dsq_sens_unit(const char *name, char *buf, size_t n);

/* The n entries (of cnt, with sens[i] >= 0) of largest sensitivity, ties by
 * name (bytewise), as indices into idx[0..*chosen) in descending order. */
void dsq_sens_top(const double *sens, const char *const *names, size_t cnt, size_t n, size_t *idx, size_t *chosen);

#endif
