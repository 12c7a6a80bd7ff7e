/* gptq.h - GPTQ: error-compensating rounding of one linear from its input
 * Hessian, for every integer scheme of the table (w8a8-dynamic, w8a8, w4a8,
 * awq-w4a16; per channel and grouped).
 *
 * The algorithm is the one GPTQ, GPTQModel and llm-compressor run:
 *   H = X^T X over the calibration rows the linear saw (the 2/n factor of
 *       the papers changes nothing below: dampening is relative);
 *   dead columns (H_jj == 0: the input channel was always 0) get H_jj = 1
 *       and W[:, j] = 0;
 *   H += damp * mean(diag H) * I                       (percdamp, default 0.01)
 *   U = upper Cholesky factor of H^-1 (H = L L^T, H^-1 from L, then
 *       H^-1 = U^T U), computed in double with OpenBLAS' LAPACK (dpotrf /
 *       dpotri); if the factorization fails the dampening is raised x10 up to
 *       3 times, then the linear falls back to round-to-nearest (as
 *       llm-compressor does), which the report says;
 *   columns are processed in order (no act-order: dsq blobs, AutoAWQ GEMM,
 *       compressed-tensors and Ascend exports hold no permutation / g_idx) in
 *       lazy blocks of B columns: within the block each column is quantized,
 *       err = (w - q) / U_ii, and the block's later columns get
 *       W[:, j] -= err * U_ij; at the block end the rest of the matrix gets
 *       one GEMM W[:, i2:] -= Err U[i1:i2, i2:];
 *   scales: per channel from the whole (original) row before the loop;
 *       grouped (static_groups = false) when the group starts, from the
 *       group's current (already error-updated) weights. B is the group size
 *       when grouped (else 128), so a group always starts a block and its
 *       weights then hold every earlier update, as in GPTQModel with
 *       group == block.
 * The scale / zero of a group and the code of each weight follow the
 * scheme's rules exactly (quant/scheme.h; the same functions quantize uses,
 * including the optional importance-weighted clip grid), so the result packs
 * into the scheme's blob with dsq_qparams.given_scale / given_zero and the
 * packed codes are exactly GPTQ's (tests/test_gptq.c checks every row).
 *
 * Memory: a linear with `cols` inputs needs its Hessian (cols^2 doubles),
 * the factor U (cols^2 floats) and a float copy of W; at DeepSeek-V3 671B:
 * o_proj (16384 inputs) 2 GiB + 1 GiB, an expert's gate/up (7168) 392 MiB +
 * 196 MiB, down (2048) 32 + 16 MiB.
 *
 * Determinism: a pure function of (W, H, options) for a given OpenBLAS
 * thread count. Calibration runs OpenBLAS single-threaded (the engine sets
 * it), so results do not depend on --threads; with more OpenBLAS threads
 * dpotrf/dpotri change in the last bits (measured), which is why the
 * factorization is not spread over the cores: calibration runs independent
 * factorizations (experts, input sites) in parallel instead, each on one
 * thread (calib.c gptq_phase). factor_init factors H in place (its lower
 * half keeps H for the dampening retries), so a solve needs no second H. Cost: about 1.3 cols^3 flops
 * per factorization (o_proj at 671B: 6e12, single-threaded), rows * cols^2
 * for the lazy updates; gate/up and q_a/kv_a share one factorization. */
#ifndef DSQ_GPTQ_H
#define DSQ_GPTQ_H

#include "dsq_error.h"
#include "dsq_thread.h"
#include "scheme.h"

#include <stddef.h>
#include <stdint.h>

#define DSQ_GPTQ_DAMP 0.01

typedef struct dsq_gptq_opts {
    double damp;              /* percdamp (> 0); 0: DSQ_GPTQ_DAMP */
    int block;                /* lazy block columns; 0: group size, or 128 per channel */
    int clip;                 /* choose each group's scale with the scheme's clip grid */
    const float *importance;  /* [cols] clip weights or NULL */
    int search;               /* > 0: each group's params searched (qsearch.c); else min/max
                                 (the default: under GPTQ's error feedback the search raised
                                 KLD 1-7% on mid-dsv3, calib.c calib_search) */
} dsq_gptq_opts;

typedef struct dsq_gptq_report {
    int64_t dead;             /* columns with H_jj == 0 */
    int damp_raised;          /* times the dampening was raised x10 */
    int rtn_fallback;         /* the factorization failed: plain RTN */
    double loss;              /* sum over weights of (w - q)^2 / U_jj^2 / 2 */
} dsq_gptq_report;

/* The inverse-Hessian factor of one input (dampened, dead columns marked):
 * what every linear reading the same (scaled) input shares, so gate/up and
 * q_a/kv_a factor once. */
typedef struct dsq_gptq_factor {
    int64_t cols;
    float *u;                 /* [cols][cols] upper Cholesky factor of H^-1 */
    uint8_t *dead;            /* [cols] H_jj was 0 */
    int64_t ndead;
    int damp_raised, rtn_fallback;
} dsq_gptq_factor;

/* Build f from h [cols][cols] (X^T X, destroyed). damp <= 0: default. */
int dsq_gptq_factor_init(dsq_gptq_factor *f, double *h, int64_t cols, double damp, dsq_diag *d);
void dsq_gptq_factor_release(dsq_gptq_factor *f);
/* dsq_gptq_solve with a prepared factor (f->cols == shape->cols). */
int dsq_gptq_solve_f(const dsq_scheme *sc, const dsq_qshape *shape, float *w, const dsq_gptq_factor *f,
                     const dsq_gptq_opts *o, float *scales, uint8_t *zeros, dsq_gptq_report *rep, dsq_diag *d);
/* Solve + pack (as dsq_gptq_quantize) with a prepared factor. */
int dsq_gptq_quantize_f(const dsq_scheme *sc, const dsq_qshape *shape, const float *w, const dsq_gptq_factor *f,
                        const dsq_gptq_opts *o, const dsq_qparams *base, uint8_t *blob, dsq_gptq_report *rep,
                        dsq_diag *d);

/* Run GPTQ on w [rows][cols] (in: float weights; out: the quantized values
 * (q - zero) * scale, i.e. what the blob dequantizes to). h [cols][cols] is
 * X^T X (symmetric, both halves); it is used as scratch and destroyed.
 * scales [rows][groups] and zeros [rows][groups] (awq-w4a16 only; else may
 * be NULL) receive the parameters. rep may be NULL.
 * DSQ_ERR_UNSUPPORTED (float scheme), DSQ_ERR_INVALID_ARG, DSQ_ERR_NOMEM,
 * DSQ_ERR_NONFINITE (H or W not finite). */
int dsq_gptq_solve(const dsq_scheme *sc, const dsq_qshape *shape, float *w, double *h,
                   const dsq_gptq_opts *o, float *scales, uint8_t *zeros, dsq_gptq_report *rep,
                   dsq_diag *d);

/* Solve on a copy of w / xtx and pack the result into blob (the scheme's
 * blob_size bytes). base: the scheme's other parameters (w8a8 static
 * activation params); base->in_scale must be NULL (fold scales into w and
 * xtx first: dsq_gptq_hess_scale). */
int dsq_gptq_quantize(const dsq_scheme *sc, const dsq_qshape *shape, const float *w, const double *xtx,
                      const dsq_gptq_opts *o, const dsq_qparams *base, uint8_t *blob,
                      dsq_gptq_report *rep, dsq_diag *d);

/* xtx [in][in] += X^T X for x [T][in], both halves; on the calling thread.
 * Tiles of 256 columns, each a sum over runs of up to 1024 rows computed in
 * float and added in double (gptq.c hess_add_upper says why). */
int dsq_gptq_hess_add(double *xtx, int64_t in, const float *x, int64_t T);
/* The Hessian of the scaled input x_j / s_j: h_ij /= s_i s_j. */
void dsq_gptq_hess_scale(double *h, int64_t n, const float *in_scale);

/* ---- one layer's Hessians, keyed by site name (stats.h sites) ---------- */
typedef struct dsq_gptq_hset {
    char **name;
    int64_t *in;
    double **xtx;
    uint64_t *rows;
    int n, cap;
    uint64_t bytes;           /* held now */
} dsq_gptq_hset;

/* Add x [T][in] to site's Hessian (created on first use). The set's and the
 * experts' Hessians hold the upper half only (the lower half is 0):
 * dsq_gptq_factor_init and dsq_gptq_hess_scale need no more. The tiles of
 * the upper triangle run on pool (NULL: this thread; not from inside one of
 * its tasks); the result is the same bytes for any pool size. */
int dsq_gptq_hset_add(dsq_gptq_hset *hs, const char *site, const float *x, int64_t T, int64_t in, dsq_pool *pool);
/* The site's X^T X and row count, or NULL. */
const double *dsq_gptq_hset_find(const dsq_gptq_hset *hs, const char *site, int64_t in, uint64_t *rows);
void dsq_gptq_hset_release(dsq_gptq_hset *hs);

/* ---- routed experts: rows kept, Hessians built one expert at a time ---- */
/* Holding every routed expert's X^T X at once would take 256 x (7168^2 +
 * 2048^2) doubles = 106 GiB per DeepSeek-V3 layer. Instead the layer's MoE
 * input (post_attention_layernorm output, what the router reads: T x hidden
 * floats) is kept once with, per expert, the indices of the rows routed to
 * it; an expert's gate/up Hessian is built from its rows when it is
 * quantized, and its down_proj Hessian from silu(gate x) * up x of the same
 * rows (the engine's own linears and activation). At 671B with 128 x 512
 * calibration tokens: 1.9 GB of rows + 2 MB of indices + one expert's H. */
/* Rows an expert's Hessian gathers at a time (the tiles sweep H once per
 * gather): 1024 x 7168 floats = 29 MB of buffer per task at V3 shapes. */
#define DSQ_GPTQ_GATHER 1024

typedef struct dsq_gptq_moe {
    int64_t in;               /* hidden */
    float *rows;              /* [nrows][in] */
    uint64_t nrows, caprows;
    uint64_t base;            /* first row of the sample being collected */
    int n_experts;
    uint32_t **idx;           /* [e][n[e]] rows routed to expert e */
    uint64_t *n, *cap;
} dsq_gptq_moe;

int  dsq_gptq_moe_init(dsq_gptq_moe *m, int64_t in, int n_experts);
void dsq_gptq_moe_release(dsq_gptq_moe *m);
/* The router's input of one sample (all its T tokens). */
int  dsq_gptq_moe_add_rows(dsq_gptq_moe *m, const float *x, int64_t T);
/* Expert e's routed tokens of that sample (token_index NULL: 0..T-1). */
int  dsq_gptq_moe_add_routed(dsq_gptq_moe *m, int e, const int32_t *token_index, int64_t T);
/* h [in][in] = X_e^T X_e (zeroed first); rows routed to e in *rows. */
int  dsq_gptq_moe_hessian_in(const dsq_gptq_moe *m, int e, double *h, uint64_t *rows);
/* h [ffn][ffn] of down_proj's input silu(gate x) * up x over e's rows. */
struct dsq_linear;
int  dsq_gptq_moe_hessian_down(const dsq_gptq_moe *m, int e, const struct dsq_linear *gate,
                               const struct dsq_linear *up, dsq_pool *pool, double *h, uint64_t *rows);

#endif
