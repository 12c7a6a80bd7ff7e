/* synth_ckpt.h - synthetic Hugging Face checkpoints with real tensor names
 * and shapes, for tests and benchmarks of the conversion pipeline.
 *
 * Writes into a directory: config.json, tokenizer.json, tokenizer_config.json,
 * generation_config.json and the weights (one model.safetensors, or shards
 * plus model.safetensors.index.json when shard_bytes is set), through the
 * streaming safetensors writer: only one tensor is in memory at a time.
 *
 * Values are pseudo-random but a pure function of (seed, tensor name), so the
 * output is byte-identical across runs and machines. Linear weights look like
 * trained ones where it matters for quantization: roughly Gaussian with a
 * per-row spread and a few outlier input channels. With fp8 set, every
 * linear weight that DeepSeek-V3 ships as FP8 (formats.md s.2.2) is written
 * as F8_E4M3 plus an F32 "<name>_scale_inv" grid of 128x128 block scales;
 * embeddings, norms, router, lm_head and eh_proj stay BF16, the router bias
 * F32. */
#ifndef DSQ_SYNTH_CKPT_H
#define DSQ_SYNTH_CKPT_H

#include "dsq_error.h"
#include "dtype.h"

#include <stdint.h>

enum dsq_synth_arch {
    DSQ_SYNTH_DEEPSEEK_V3 = 0,   /* MLA + MoE (V2 if q_lora_rank == 0) */
    DSQ_SYNTH_LLAMA       = 1,
    DSQ_SYNTH_QWEN2       = 2    /* llama + q/k/v biases */
};

typedef struct dsq_synth_opts {
    enum dsq_synth_arch arch;
    int64_t hidden, intermediate, moe_intermediate, vocab;
    int64_t heads, kv_heads;                 /* kv_heads: llama/qwen2 */
    int64_t q_lora_rank, kv_lora_rank;       /* q_lora_rank 0: plain q_proj */
    int64_t qk_nope, qk_rope, v_head;
    int64_t layers;                          /* num_hidden_layers */
    int64_t dense_layers;                    /* first_k_dense_replace */
    int64_t experts, shared_experts, experts_per_tok, n_group, topk_group;
    int     mtp;                             /* add MTP layer `layers` */
    int     fp8;                             /* FP8-block linear weights */
    enum dsq_dtype dtype;                    /* float dtype: BF16, F16 or F32 */
    uint64_t shard_bytes;                    /* 0: single model.safetensors */
    uint64_t seed;
    /* Tests: a tensor whose element 0 becomes NaN (NULL: none). */
    const char *poison;
} dsq_synth_opts;

/* Real DeepSeek-V3 dimensions (formats.md s.2.1) with 1 MoE layer of 256
 * experts, BF16, no MTP, no sharding. */
void dsq_synth_defaults_v3(dsq_synth_opts *o);
/* A tiny DeepSeek-shaped model (hidden 256, 8 experts, 2+1 layers + MTP)
 * that converts in well under a second; tests use it. */
void dsq_synth_defaults_tiny(dsq_synth_opts *o);

/* Write the checkpoint into dir (created if missing). out_flags: enum
 * dsq_outfile_flags (DSQ_OUT_OVERWRITE replaces existing files).
 * *total_bytes (may be NULL) receives the sum of tensor bytes. */
int dsq_synth_write(const dsq_synth_opts *o, const char *dir, unsigned out_flags,
                    uint64_t *total_bytes, dsq_diag *d);

#endif
