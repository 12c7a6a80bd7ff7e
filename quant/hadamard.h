/* hadamard.h - Hadamard matrices and the seeded orthogonal rotations built
 * from them (QuaRot-style offline rotation of a model's weights).
 *
 * Hadamard matrices (entries +-1, H H^T = n I) of order n = m * 2^k are built
 * as the Kronecker product H_m (x) S_{2^k}, where S is Sylvester's matrix and
 * H_m is a base matrix of order m:
 *   - m = 1 or 2;
 *   - Paley I, order q + 1 for a prime q = 3 (mod 4) (12, 20, 24, 32, 44, ...);
 *   - Paley II, order 2 (q + 1) for a prime q = 1 (mod 4) (12, 28, 36, 60, ...).
 * DeepSeek-V3's hidden size 7168 = 28 x 256 is Paley II (q = 13) times
 * Sylvester 256, the decomposition msModelSlim's QuaRot uses
 * (msmodelslim/processor/quarot/common/hadamard.py:96-151); q_lora_rank 1536
 * = 12 x 128, kv_lora_rank 512 and v_head_dim 128 are powers of two. A size
 * no construction here covers (n not a multiple of 4 above 2) has no
 * Hadamard matrix of its own: dsq_rot_init then builds the block-diagonal
 * rotation from the largest constructible order that divides n (stated by
 * dsq_rotation.fallback).
 *
 * A rotation R (n x n, orthogonal) is D H / sqrt(b) on blocks of size b:
 *   DSQ_ROT_HADAMARD        b = n: one dense random Hadamard rotation;
 *   DSQ_ROT_BLOCK           blockdiag of the same b x b random Hadamard
 *                           rotation repeated n / b times;
 *   DSQ_ROT_BLOCK_SHIFTED   B P B with B the DSQ_ROT_BLOCK matrix and P the
 *                           cyclic shift of the columns by b / 2:
 *                           (x P)[j] = x[(j - b/2) mod n] (msModelSlim's
 *                           BLOCK_HADAMARD_SHIFTED, quarot_utils.py:97-110).
 * D is diag(+-1) drawn from the seed (splitmix64), so a rotation is a pure
 * function of (kind, n, block, seed). Weights are rotated as
 *   right:  W <- W R       (a linear that reads the rotated vector x R)
 *   left:   W <- R^T W     (a linear whose output is to be rotated)
 * Row vectors throughout: x' = x R. */
#ifndef DSQ_HADAMARD_H
#define DSQ_HADAMARD_H

#include "dsq_error.h"

#include <stdint.h>

enum dsq_rot_kind {
    DSQ_ROT_HADAMARD = 0,
    DSQ_ROT_BLOCK = 1,
    DSQ_ROT_BLOCK_SHIFTED = 2,
};

/* Largest n this module builds matrices for (far above any DeepSeek width). */
#define DSQ_HADAMARD_MAX_ORDER (1 << 20)

/* The base order m of n = m * 2^k that this module can build, preferring
 * the largest power of two; 0 when no Hadamard matrix of order n is built
 * here (n not 1, 2 or a multiple of 4 with a constructible odd part). */
int64_t dsq_hadamard_base_order(int64_t n);

/* Fill h (n * n int8, row-major) with a Hadamard matrix of order n
 * (H_m (x) S_{2^k}). DSQ_ERR_UNSUPPORTED when dsq_hadamard_base_order(n) is 0
 * or n exceeds DSQ_HADAMARD_MAX_ORDER; DSQ_ERR_NOMEM. The result is
 * deterministic (no seed): the unsigned, unnormalised matrix. */
int dsq_hadamard_fill(int64_t n, int8_t *h, dsq_diag *d);

typedef struct dsq_rotation {
    int kind;          /* enum dsq_rot_kind */
    int64_t n;         /* order of R */
    int64_t b;         /* block order (n for DSQ_ROT_HADAMARD) */
    int64_t m, p;      /* b = m * p, p a power of two, m the base order */
    int8_t *hm;        /* m x m base Hadamard matrix */
    int8_t *sign;      /* b random signs (D) */
    float norm;        /* 1 / sqrt(b) */
    int fallback;      /* 1: DSQ_ROT_HADAMARD was asked for an n without a
                          Hadamard matrix and b < n (block-diagonal) */
} dsq_rotation;

/* Build a rotation. block: for DSQ_ROT_BLOCK / _SHIFTED the block order
 * (must divide n and be constructible; for _SHIFTED also even); ignored for
 * DSQ_ROT_HADAMARD. seed: the random signs. DSQ_ERR_INVALID_ARG for a bad
 * kind or block, DSQ_ERR_UNSUPPORTED when no block order divides n,
 * DSQ_ERR_NOMEM. Release with dsq_rot_free (safe on a zeroed struct). */
int dsq_rot_init(dsq_rotation *r, int kind, int64_t n, int64_t block, uint64_t seed, dsq_diag *d);
void dsq_rot_free(dsq_rotation *r);

/* x <- x R for one row vector of r->n floats. work: 2 * r->n doubles of
 * scratch.
 * Arithmetic in double per output (fast Walsh-Hadamard over p, then the
 * m x m base), so rotating and rotating back returns x to within a few
 * float ulps. */
void dsq_rot_row(const dsq_rotation *r, float *x, double *work);
/* x <- x R^T (the inverse). */
void dsq_rot_row_inv(const dsq_rotation *r, float *x, double *work);

/* W[:, c0 : c0 + n) <- W[:, c0 : c0 + n) R on a row-major rows x cols
 * matrix (right multiplication of a column slice). DSQ_ERR_INVALID_ARG when
 * the slice is out of range; DSQ_ERR_NOMEM. */
int dsq_rot_right(const dsq_rotation *r, float *w, int64_t rows, int64_t cols, int64_t c0, dsq_diag *d);
/* W[r0 : r0 + n, :) <- R^T W[r0 : r0 + n, :) (left multiplication of a row
 * slice). Same errors. */
int dsq_rot_left(const dsq_rotation *r, float *w, int64_t rows, int64_t cols, int64_t r0, dsq_diag *d);

/* The dense matrix R (n x n floats, row-major) for tests and small sizes. */
int dsq_rot_dense(const dsq_rotation *r, float *out, dsq_diag *d);

#endif
