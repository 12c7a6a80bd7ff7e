/* dsa.h - DeepSeek sparse attention (DeepSeek-V3.2): the lightning indexer
 * and the FP8 round trips of DeepSeek's reference inference code.
 *
 * Per layer and token (x: the normed hidden state, qr: the normed q-LoRA
 * latent that q_b_proj reads):
 *   q = indexer.wq_b(qr)                 [Hi, D]   (Hi index_n_heads, D index_head_dim)
 *   k = LayerNorm(indexer.wk(x))         [D]       (k_norm: weight and bias, eps 1e-6)
 *   RoPE on the first qk_rope_head_dim values of every q head and of k,
 *   NOT interleaved (pairs x[j], x[j + rope/2]; MLA itself rotates adjacent
 *   pairs), at the token's position with MLA's frequencies
 *   fp8 mode: q, k <- Hadamard(.) * D^-0.5; each head vector and k round
 *   trip through e4m3 with one ue8m0 (power of two) scale per vector:
 *   s = 2^ceil(log2(max(amax, 1e-4) / 448)), code = e4m3(x / s)
 *   w[h] = indexer.weights_proj(x)[h] * Hi^-0.5 * q_scale[h] * D^-0.5
 *   score(key n) = k_scale[n] * sum_h ReLU(q_code[h] . k_code[n]) * w[h]
 * A query at cache index p keeps the top min(index_topk, p + 1) of the keys
 * 0..p (all of them while p < index_topk), and MLA's softmax sees only
 * those keys: in prefill and in decode alike, such a row's attention runs
 * in MLA's absorbed form over just the selected latent and k_pe rows
 * (mla.c). The indexer cache keeps each token's k as D e4m3 codes plus its
 * float scale.
 *
 * fp8 mode also rounds MLA's normed latent (kv_lora_rank values) through
 * e4m3 per 128-value block with ue8m0 scales before it is cached, so the
 * prefill kv_b_proj and the decode path both read the rounded values (the
 * reference simulates its FP8 KV cache that way); k_pe is not rounded.
 *
 * float mode (--dsa float): no Hadamard, no e4m3 anywhere; the score is
 * sum_h ReLU(q[h] . k[n]) * weights_proj(x)[h] * Hi^-0.5 * D^-0.5 with
 * float keys in the cache, as a bf16 indexer (vllm-ascend's default)
 * computes it.
 *
 * A quantization block is one head vector (D values; 128 in V3.2, where
 * that is the reference's act_quant block); the latent's blocks are 128
 * values with a shorter last block when kv_lora_rank is not a multiple. */
#ifndef DSQ_DSA_H
#define DSQ_DSA_H

#include <stddef.h>
#include <stdint.h>

enum dsq_dsa_mode {
    DSQ_DSA_FP8   = 0,   /* DeepSeek's reference numerics (the default) */
    DSQ_DSA_FLOAT = 1    /* indexer and latent in float */
};

#define DSQ_E4M3_MAX 448.0f
#define DSQ_DSA_LATENT_BLOCK 128

/* "fp8" or "float" (the --dsa spelling of a mode). */
const char *dsq_dsa_mode_name(int mode);

/* Nearest e4m3fn value of x (ties to even, subnormals down to 2^-9),
 * saturating at +-448. */
float   dsq_e4m3_round(float x);
/* e4m3fn byte of x (rounded as above) and the value of a byte (NaN for
 * 0x7f / 0xff). */
uint8_t dsq_e4m3_encode(float x);
float   dsq_e4m3_decode(uint8_t b);
/* ue8m0 block scale of a block whose largest magnitude is amax:
 * 2^ceil(log2(max(amax, 1e-4) / 448)), the exponent taken from the float
 * bits as the reference kernel does. */
float   dsq_ue8m0_scale(float amax);
/* Quantize x[0..n) as one block: codes[i] = e4m3(x[i] / s); returns s. */
float   dsq_fp8_block_quant(const float *x, int n, uint8_t *codes);
/* x <- dequant(quant(x)) in blocks of `block` values (a shorter last one). */
void    dsq_fp8_roundtrip(float *x, int n, int block);
/* Walsh-Hadamard transform of x[0..n) (n a power of two, Sylvester order)
 * times n^-0.5: orthonormal. */
void    dsq_hadamard(float *x, int n);
/* The k keys of largest score among score[0..n) (k >= n: all), written to
 * idx in ascending key order; equal scores at the cut go to the lower key.
 * tmp holds n floats. Returns the count, min(k, n). */
int     dsq_dsa_topk(const float *score, int n, int k, int32_t *idx, float *tmp);
/* LayerNorm of x[0..n) into out (weight w, bias b, biased variance). */
void    dsq_layernorm(float *out, const float *x, const float *w, const float *b, int n, float eps);

#endif
