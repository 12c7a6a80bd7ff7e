/* quarot.h - QuaRot offline rotation of a DeepSeek-V3-family checkpoint
 * into a plain float model (no online operation).
 *
 * The residual stream is rotated by R1 (order hidden_size), the q-LoRA latent
 * by Rq (block-shifted, blocks of 32), the kv-LoRA latent by Rkv and each
 * head's V by Ruv, as msModelSlim's QuaRot for DeepSeek does
 * (msmodelslim/model/deepseek_v3/quarot.py:78-166, model_adapter.py of
 * deepseek_v3_2 for the indexer). Every RMSNorm
 * weight is first folded into the linears that read it (W <- W diag(g)) and
 * set to one, so that RMSNorm(x R) = RMSNorm(x) R holds; then (right: W <- W R,
 * left: W <- R^T W):
 *   embed_tokens, lm_head                          right R1
 *   q_a_proj                                       right R1, left Rq
 *   q_b_proj (and the V3.2 indexer's wq_b)         right Rq
 *   kv_a_proj_with_mqa                             right R1, left blockdiag(Rkv, I_rope)
 *   kv_b_proj                                      right Rkv, left blockdiag(I_nope, Ruv) per head
 *   o_proj                                         right blockdiag(Ruv) per head, left R1
 *   gate/up of dense, routed and shared experts,
 *   the router mlp.gate, indexer wk / weights_proj right R1
 *   down_proj (dense, routed, shared)              left R1
 *   MTP: embed_tokens right R1, eh_proj right blockdiag(R1, R1) and left R1,
 *        shared_head.head right R1
 * The result computes the same function as the source up to float rounding
 * (tests/test_quarot.c checks dsq's engine on both), so every scheme, recipe,
 * export and dsq's engine run on it unchanged. A tensor this table does not
 * know is refused (DSQ_ERR_UNSUPPORTED) rather than copied: an unrotated
 * reader of the residual stream would silently compute garbage. */
#ifndef DSQ_QUAROT_H
#define DSQ_QUAROT_H

#include "dsq_error.h"
#include "dtype.h"
#include "model_config.h"

#include <stdint.h>

enum dsq_quarot_rot { DSQ_QR_R1 = 0, DSQ_QR_RQ, DSQ_QR_RKV, DSQ_QR_RUV, DSQ_QR_NROT };

#define DSQ_QUAROT_MAX_OPS 8

/* What happens to one tensor. */
typedef struct dsq_quarot_tensor_plan {
    int kind;                 /* DSQ_QP_COPY, DSQ_QP_ONES, DSQ_QP_ROTATE */
    /* norm folding: cols [fold_off[i], + hidden) *= weight of fold_norm[i] */
    int nfold;
    char fold_norm[2][256];
    int64_t fold_off[2];
    /* rotations, applied in order */
    int nops;
    struct {
        int left;             /* 0: right (column slices), 1: left (row slices) */
        int rot;              /* enum dsq_quarot_rot */
        int64_t off;          /* first column (right) or row (left) */
        int64_t stride;       /* repeat every stride columns/rows ... */
        int64_t count;        /* ... count times (per-head blocks); 1 = once */
    } op[DSQ_QUAROT_MAX_OPS];
} dsq_quarot_tensor_plan;

enum { DSQ_QP_COPY = 0, DSQ_QP_ONES = 1, DSQ_QP_ROTATE = 2 };

/* The plan for tensor `name` of a model with config cfg (DeepSeek V2/V3/V3.2
 * family). DSQ_ERR_UNSUPPORTED for a tensor no rule covers or a config this
 * transform does not handle (tied embeddings, non-DeepSeek architectures). */
int dsq_quarot_plan(const dsq_model_config *cfg, const char *name, dsq_quarot_tensor_plan *p, dsq_diag *d);

typedef struct dsq_quarot_opts {
    uint64_t seed;            /* random signs; 0 is a valid seed */
    enum dsq_dtype out_dtype; /* DSQ_DTYPE_F32 (exact) or DSQ_DTYPE_BF16 */
    uint64_t shard_bytes;     /* safetensors shard size; 0 = 4 GiB */
} dsq_quarot_opts;

void dsq_quarot_opts_init(dsq_quarot_opts *o);

/* Read the checkpoint at src (a model directory: config.json and safetensors,
 * BF16 / F32 / FP8 with block scales) and write the rotated float model to the
 * directory out, which must not exist: config.json (quantization_config
 * removed, torch_dtype set to the output dtype), the shards and index, and
 * the other regular files of src (tokenizer, generation config) copied. The
 * work happens in "<out>.partial", renamed to out at the end; on failure the
 * files written there are removed. One tensor is in memory at a time. */
int dsq_quarot_write(const char *src, const char *out, const dsq_quarot_opts *o, dsq_diag *d);

/* 1 when dir is a finished dsq_quarot_write output made with seed (its
 * shards carry the metadata "dsq.rotation" = "quarot seed=N"), else 0. */
int dsq_quarot_is_ours(const char *dir, uint64_t seed);
/* Remove a dsq_quarot_write output: only when dsq_quarot_is_ours says it is
 * one (any seed), and only the files it writes (shards, index, config.json,
 * the files copied from src); the directory goes when that empties it.
 * DSQ_ERR_STATE when dir is not such an output (nothing is touched). */
int dsq_quarot_remove(const char *dir, const char *src, dsq_diag *d);

#endif
