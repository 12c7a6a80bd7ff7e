/* calib.h - the calibration driver: model + data -> a "calibration result"
 * that the converter queries tensor by tensor.
 *
 * dsq_calib_run streams the calibration samples through the model one decoder
 * layer at a time (stats.h: only the current layer is materialized, hidden
 * states live in RAM or in two spill files), collects per-channel activation
 * statistics of every linear input, then per layer:
 *   awq-w4a16  AWQ search per scaling group (awq.h), then the clip search
 *              per (output row, quantization group) on the true error from
 *              the X^T X blocks of the input (awq.h "Clip search on X^T X",
 *              AutoAWQ auto_clip; q/k projections never clipped); the
 *              choices are stored per tensor (and in the statistics file,
 *              "clipidx") and the converter clamps the weights accordingly.
 *              Groups that do not fit 128-column blocks keep the older
 *              path: the converter quantizes with quant's clip_search, weighted by
 *              importance_j = RMS(x_j) / s_j, i.e. AutoAWQ's grid over
 *              amax * (1 - i/20), i < 10, with the diagonal of X^T X standing in
 *              for the sampled X.W error; because that proxy ignores how the
 *              same-signed clipping errors add up in X.W, each tensor keeps
 *              clipping only if it lowers the output MSE on the sampled tokens
 *              (dsq_clip_check; q/k projections are never clipped, as in
 *              AutoAWQ);
 *   w8a8       SmoothQuant with alpha (default 0.5), no search, then static
 *              per-tensor activation scale/offset from the smoothed min/max;
 *   w4a8       scales searched per group on the simulated W4A8 output over
 *              the SmoothQuant alpha grid and the AWQ grid (s = 1 included;
 *              a fixed SmoothQuant alpha with --alpha), plus the importance-
 *              weighted MSE clip search of the int4 weights (kept per tensor
 *              when it lowers the sampled output MSE, as above);
 *   w8a8-dynamic scales searched per group on the simulated w8a8-dynamic
 *              output (per-token int8 activations, per-channel int8
 *              weights) over s = 1 and the SmoothQuant alpha grid (a fixed
 *              alpha with --alpha); no static parameters, no clipping.
 *              A group mixing schemes takes the first of: AWQ, w4a8, static
 *              w8a8 (fixed alpha), w8a8-dynamic.
 * Which scheme a tensor gets comes from a target callback (the converter's
 * recipe); without one every quantizable linear gets opts.scheme and the
 * router stays float. Float schemes get no scales of their own (a float
 * consumer or producer of a smoothed group still absorbs them).
 *
 * The result maps HF tensor names to dsq_calib_tensor. The scales are folded
 * into the checkpoint, so the output stays a plain model of its scheme:
 *   consumer linear   W'[:, j] = W[:, j] * in_scale[j]
 *   producer          W'[i, :] = W[i, :] * row_scale[i]   (1-D tensors, i.e.
 *                     norm weights and biases: v'[i] = v[i] * row_scale[i])
 * row_scale is 1/s on the absorbing rows and exactly 1 elsewhere. A tensor
 * can have both (up_proj: in_scale from post_attention_layernorm, row_scale
 * from its up -> down group). Routers are consumers too (they read the same
 * norm output): they get in_scale and must be scaled even though they stay
 * float. Every scale is finite, within [1e-5, 1e5], and 1 for dead channels.
 *
 * MoE coverage: experts with fewer than min_expert_tokens routed tokens fall
 * back to round-to-nearest (status FALLBACK_RTN, no importance, no clip, no
 * up -> down scaling; their gate/up still take the shared norm's in_scale,
 * which the function needs) and are listed by dsq_calib_fallback_* so the CLI
 * can warn naming them; unless moe_calib_all, which runs every token through
 * every expert for statistics. A w8a8 expert without its own range takes the
 * union of the layer's calibrated ranges of the same input (status fallback).
 *
 * GPTQ (opts.gptq, calib/gptq.h): during the collection pass the X^T X of
 * every non-expert linear input site is accumulated (double), and for MoE
 * layers the router's input rows are kept once with, per routed expert, the
 * indices of its routed rows (every row with moe_calib_all). After the
 * layer's scales and clip decisions each integer-scheme linear is quantized
 * by GPTQ on its scaled (folded) weights with the Hessian of the scaled input
 * (h_ij / (s_i s_j)); an expert's gate/up Hessian is built from its rows
 * when it is quantized, its down_proj's from silu(gate x) * up x of the same
 * rows. The entry keeps the blob (gptq_blob), which the converter packs
 * instead of re-quantizing. Fallback experts and inputs that saw no tokens
 * stay RTN. Memory at DeepSeek-V3 671B, per MoE layer, released after it:
 * non-expert Hessians q_a/kv_a 7168^2, q_b 1536^2, kv_b 512^2, o_proj
 * 16384^2, router/shared gate+up 7168^2, shared down 2048^2 doubles = 2.8 GiB;
 * the MoE input rows 4 x 7168 bytes per calibration token (1.9 GB at 128 x
 * 512 tokens) + 4 bytes per routed token; and the solves running at once.
 * The solves run in parallel on the pool, one task per factor (a routed
 * expert's gate + up, its down, each non-expert input site: its own H, built
 * from the kept rows for experts), OpenBLAS at one thread per call and blobs
 * kept in layer order, so results are the same bytes for any thread count.
 * With P tasks at once, P Hessians: each task holds its H (f64, factored in
 * place), U (f32), the weights twice and its row gathers (gptq.h
 * DSQ_GPTQ_GATHER), 0.82 GB for a V3 gate/up (7168^2 f64
 * = 411 MB) and 4.2 GB for o_proj; the tasks running together stay within
 * ram_limit (a larger one runs alone), so P <= ram_limit / 0.82 GB for the
 * experts (gptq_lanes reports min(threads, tasks, ram_limit / smallest)).
 * Holding every expert's Hessian instead would take 106 GiB. Blobs stay in RAM (the
 * quantized model's size in total) and go into the statistics checkpoint
 * ("L<l>/gptq/<tensor>") so resume and --stats reuse them.
 *
 * Statistics files: save_stats writes the statistics (stats_file.h) and is
 * also the checkpoint: after each layer the statistics, searched scales and
 * the hidden states are made durable, so resume continues after a crash or
 * an interruption. load_stats skips the forward entirely: statistics (and,
 * for AWQ / the w4a8 search, the searched scales, which need the token
 * samples) come from the file; weights are still read layer by layer.
 *
 * Determinism: the result is a pure function of (model, tokens, options):
 * independent of the thread count, and a resumed run equals a straight one.
 * Library rules: nothing printed; progress via callback; cancel via flag
 * (DSQ_ERR_INTERRUPTED, the checkpoint is kept). */
#ifndef DSQ_CALIB_H
#define DSQ_CALIB_H

#include "awq.h"
#include "calib_data.h"
#include "dsq_error.h"
#include "scheme.h"

#include <stddef.h>
#include <stdint.h>

#define DSQ_CALIB_MIN_EXPERT_TOKENS 16
#define DSQ_CALIB_AWQ_TOKENS        512   /* sampled rows per non-expert input */
#define DSQ_CALIB_AWQ_EXPERT_TOKENS 64    /* sampled rows per routed-expert input */
#define DSQ_CALIB_AWQ_ATTN_SEQS    4     /* whole sequences for the attention block loss (awq-w4a16) */

typedef struct dsq_calib_progress {
    int layer, n_layers;          /* layer being processed */
    int sample, n_samples;        /* sample within the layer, -1 outside the forward */
    const char *phase;            /* "data", "embed", "forward", "search", "load" */
    double seconds;               /* since dsq_calib_run started */
} dsq_calib_progress;

typedef void (*dsq_calib_progress_fn)(void *ctx, const dsq_calib_progress *p);

enum dsq_smooth_method { DSQ_SMOOTH_SQ = 0, DSQ_SMOOTH_FLEX = 1 };

typedef struct dsq_calib_opts {
    /* data: a file, or pre-tokenized ids */
    const char *calib;            /* --calib FILE (text or JSONL) */
    const char *tokenizer;        /* tokenizer path; NULL: the model's directory */
    dsq_calib_data_opts data;     /* --calib-samples, --calib-seqlen, --seed */
    const int32_t *tokens;        /* instead of calib: ids, cut into samples */
    size_t n_tokens;
    /* what to compute */
    const char *scheme;           /* target scheme name: awq-w4a16, w8a8, w4a8, ... */
    int32_t group_size;           /* DSQ_GROUP_DEFAULT: the scheme's default */
    dsq_calib_target_fn target;   /* per-tensor scheme; NULL: scheme for every linear but the router */
    void *target_ctx;
    const char *target_id;        /* identifies the target mapping in resume fingerprints */
    float alpha;                  /* --alpha (SmoothQuant migration strength) */
    int alpha_set;                /* alpha given explicitly: w4a8 / w8a8-dynamic use it instead of searching */
    int smooth;                   /* 0: no smoothing for w8a8/w4a8/w8a8-dynamic; default 1 */
    int smooth_method;            /* DSQ_SMOOTH_SQ (default) or DSQ_SMOOTH_FLEX: the int8-weight
                                     groups (w8a8, w8a8-dynamic) search flex smoothing's alpha and
                                     beta (awq.h DSQ_SEARCH_FLEX); w4a8 groups keep their search */
    int clip;                     /* clip search for awq-w4a16 / w4a8; default 1 */
    int range_search;             /* int4 searched group parameters (dsq_qparams.range_search:
                                     0 default, > 0 on, < 0 off) in the clip and GPTQ steps */
    int gptq;                     /* --gptq: GPTQ rounding of every integer-scheme linear */
    double gptq_damp;             /* --gptq-damp (percdamp); default 0.01 */
    int moe_calib_all;            /* --moe-calib all */
    int min_expert_tokens;        /* below: fallback to RTN; default 16 */
    int n_grid;                   /* search grid; default 20 */
    int awq_tokens;               /* reservoir rows per non-expert input; default 512 */
    int awq_expert_tokens;        /* per routed-expert input; default 64 */
    int awq_attn_seqs;            /* --awq-attn-block N: score the attention-input group on the MLA block
                                     output over N whole calibration sequences (awq.h ATTN); 0: on the
                                     q_a / kv_a outputs; -1 (default): DSQ_CALIB_AWQ_ATTN_SEQS for
                                     awq-w4a16 (it lowers the held-out block error, docs/calibration.md),
                                     0 for the SmoothQuant schemes (not measured there) */
    int awq_attn_seqlen;          /* tokens kept per such sequence (0: all); default 512 */
    int rollback;                 /* --rollback N: measure every quantized linear's sensitivity (sens.h)
                                     and mark the N most sensitive rolled_back (kept float) */
    /* files */
    const char *save_stats;       /* --save-stats F: statistics + checkpoint */
    const char *load_stats;       /* --stats F: reuse statistics, no forward */
    int own_stats;                /* load_stats is this run's finished checkpoint (--resume): its
                                     fingerprint must match the data (calib / tokens) and options */
    int resume;                   /* continue save_stats' checkpoint */
    int overwrite;                /* replace an existing save_stats file */
    uint64_t ram_limit;           /* hidden states in RAM up to this; default 2 GiB */
    int threads;                  /* <= 0: all cores */
    int stop_after_layer;         /* tests: -1, or stop as if interrupted after this layer */
} dsq_calib_opts;

void dsq_calib_opts_init(dsq_calib_opts *o);

enum dsq_calib_status {
    DSQ_CALIB_NONE         = 0,   /* calibration has nothing for this tensor */
    DSQ_CALIB_CALIBRATED   = 1,
    DSQ_CALIB_FALLBACK_RTN = 2    /* expert with too few tokens: plain RTN */
};

typedef struct dsq_calib_tensor {
    const char *name;             /* HF tensor name */
    int status;                   /* enum dsq_calib_status */
    const char *reason;           /* fallback reason, else NULL */
    int64_t rows, cols;           /* weight [rows][cols]; 1-D tensors: cols == 0 */
    const float *in_scale;        /* [cols] or NULL: multiply column j */
    const float *row_scale;       /* [rows] or NULL: multiply row i (1-D: element i) */
    const float *importance;      /* [cols] or NULL: dsq_qparams.importance (scaled space) */
    int clip;                     /* dsq_qparams.clip_search */
    int range_search;             /* dsq_qparams.range_search (calib.c calib_search) */
    const uint8_t *clip_idx;      /* [rows][groups of clip_gs]: AWQ clip per (row, group) searched on
                                     X^T X (awq.h), applied by dsq_calib_apply_rows; or NULL. Points
                                     into a read-only file mapping owned by the result */
    int32_t clip_gs;              /* columns per clip group (cols: one group per row) */
    int has_act_static;           /* w8a8: static activation params below */
    float act_scale, act_offset;
    /* GPTQ: the whole quantized blob (scheme gptq_scheme, group size
     * gptq_group, scales already folded), or NULL */
    const uint8_t *gptq_blob;
    size_t gptq_blob_size;
    uint32_t gptq_scheme;
    int32_t gptq_group;
    /* sens.h: relative output error of the linear as converted, on its
     * input's sampled rows (measured with --rollback, for rollback
     * candidates: not routed experts); -1 unknown */
    double sensitivity;
    int rolled_back;              /* --rollback chose it: stays float (scales only) */
} dsq_calib_tensor;

typedef struct dsq_calib_result dsq_calib_result;

/* Run calibration (see top). model_path: what dsq_model_open accepts (a
 * safetensors checkpoint directory in practice). progress/cancel may be NULL.
 * @return DSQ_OK; DSQ_ERR_DATA (bad calibration data); DSQ_ERR_INTERRUPTED
 *         (cancel; with save_stats the checkpoint is kept for resume);
 *         DSQ_ERR_STATE (resume/--stats file from another model or options);
 *         DSQ_ERR_NONFINITE (the model produced NaN/Inf); model and I/O errors. */
int dsq_calib_run(const char *model_path, const dsq_calib_opts *o, dsq_calib_result **out,
                  dsq_calib_progress_fn progress, void *progress_ctx, const volatile int *cancel, dsq_diag *d);
void dsq_calib_result_free(dsq_calib_result *r);

/* The entry for a tensor, or NULL (nothing to do: convert as usual). */
const dsq_calib_tensor *dsq_calib_lookup(const dsq_calib_result *r, const char *tensor);

/* Apply an entry to float32 rows [row0, row0 + nrows) of a tensor whose rows
 * have `cols` values (w is row row0). 2-D: row_scale then in_scale, then
 * the clip (clip_idx: each group clamped to +-amax * (1 - i/20)). 1-D
 * tensors (t->cols == 0, viewed as rows of cols values): element k =
 * row0 * cols + i gets row_scale[k]. DSQ_ERR_SHAPE if the view does not fit
 * the entry. */
int dsq_calib_apply_rows(const dsq_calib_tensor *t, int64_t row0, int64_t nrows, int64_t cols, float *w);
/* Fill the quantization parameters of an entry whose scales were applied by
 * dsq_calib_apply_rows (in_scale stays NULL: already in the weights). */
void dsq_calib_qparams(const dsq_calib_tensor *t, dsq_qparams *qp);

/* Experts that fell back to RTN: "model.layers.L.mlp.experts.E" and why. */
size_t dsq_calib_fallback_count(const dsq_calib_result *r);
const char *dsq_calib_fallback(const dsq_calib_result *r, size_t i, const char **reason);
/* Tensors --rollback chose, most sensitive first: name and sensitivity. */
size_t dsq_calib_rollback_count(const dsq_calib_result *r);
const char *dsq_calib_rollback(const dsq_calib_result *r, size_t i, double *sensitivity);
/* Routed tokens per expert of a layer (coverage); *n = 0 for dense layers. */
int dsq_calib_coverage(const dsq_calib_result *r, int layer, const uint64_t **tokens, int *n);

/* What was done, for metadata and --json: malloc'd JSON object text. With
 * timing == 0 the text is a pure function of the result (no seconds), so it
 * can go into output metadata without breaking byte-identical outputs. */
int dsq_calib_summary_json(const dsq_calib_result *r, int timing, char **json);
/* SHA-256 (hex) over every entry's name, shapes and values: identifies the
 * calibration for resume fingerprints of the conversion. */
int dsq_calib_fingerprint(const dsq_calib_result *r, char hex[65]);

typedef struct dsq_calib_totals {
    int layers;
    int groups_searched, groups_smoothed, groups_identity;
    double loss_identity, loss_best;   /* sums over searched groups */
    size_t tensors, fallback_experts;
    uint64_t tokens;                   /* calibration tokens */
    int samples, seqlen;               /* the token matrix used (0: from --stats) */
    int samples_requested;             /* asked for; > samples when the data was short */
    double seconds, seconds_forward, seconds_search;
    double seconds_search_moe;         /* of seconds_search: MoE and per-expert groups */
    double seconds_sens;               /* --rollback: measuring the sensitivities (of seconds_search) */
    double seconds_sens_moe;           /* of which the shared experts' (routed ones are not measured) */
    size_t gptq_tensors, gptq_rtn;     /* GPTQ'd; of those, factorization failed: RTN */
    double seconds_gptq;               /* Hessians + solves */
    double seconds_gptq_solve;         /* of which the parallel solve phase: wall */
    double cpu_gptq_solve;             /* its process CPU seconds (all threads) */
    int gptq_lanes;                    /* most solves run at once (threads, ram_limit) */
    uint64_t gptq_hess_peak;           /* largest layer's Hessians + kept MoE rows, bytes */
} dsq_calib_totals;
void dsq_calib_get_totals(const dsq_calib_result *r, dsq_calib_totals *t);

#endif
