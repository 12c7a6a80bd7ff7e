/* llama2c.h - karpathy/llama2.c legacy checkpoints (.bin) to Hugging Face.
 *
 * The legacy format (llama2.c export.py legacy_export, "version 0") is seven
 * native-endian int32 header fields
 *   dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
 * followed by float32 arrays, each [out, in] row-major like torch Linear:
 *   tok_embeddings [vocab, dim]
 *   attention_norm [L, dim]
 *   wq [L, dim, dim]  wk [L, kv_dim, dim]  wv [L, kv_dim, dim]  wo [L, dim, dim]
 *   ffn_norm [L, dim]
 *   w1 [L, hidden, dim]  w2 [L, dim, hidden]  w3 [L, hidden, dim]
 *   norm [dim]
 *   freq_cis_real [seq_len, head/2]  freq_cis_imag [seq_len, head/2]
 *   output [vocab, dim]        only when vocab_size < 0 (unshared classifier)
 * with head = dim / n_heads and kv_dim = n_kv_heads * head. A positive
 * vocab_size means the classifier is the embedding (shared). The file must be
 * exactly that long; the versioned exports (magic "ak42", 256-byte header)
 * are refused as unsupported.
 *
 * llama2.c rotates consecutive pairs (2i, 2i+1) of each q/k head (Meta's
 * interleaved RoPE); Hugging Face Llama rotates (i, i + head/2). The
 * conversion therefore permutes q and k rows exactly as transformers'
 * convert_llama_weights_to_hf.py permute():
 *   w.view(heads, rows/heads/2, 2, in).transpose(1, 2).reshape(rows, in)
 * i.e. new row h*head + j*head/2 + i = old row h*head + 2i + j, with
 * heads = n_heads for q and n_kv_heads for k. Everything else maps 1:1
 * (w1 -> gate_proj, w2 -> down_proj, w3 -> up_proj). The stored RoPE tables
 * are not converted; they are checked against theta 10000 (model.py's fixed
 * value), because config.json can only express the standard formula.
 * RMSNorm eps is llama2.c's 1e-5.
 *
 * All sizes are computed with overflow checks before any weight is touched,
 * and errors name the file, the tensor and its byte offset. */
#ifndef DSQ_LLAMA2C_H
#define DSQ_LLAMA2C_H

#include "dsq_error.h"
#include "dsq_file.h"
#include "dtype.h"

#include <stdint.h>

#define DSQ_LLAMA2C_HEADER_BYTES 28

typedef struct dsq_llama2c_config {
    int32_t dim;            /* hidden size */
    int32_t hidden_dim;     /* FFN width */
    int32_t n_layers;
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t vocab_size;     /* always positive here */
    int32_t seq_len;        /* max_position_embeddings */
    int shared_classifier;  /* header vocab_size > 0 */
} dsq_llama2c_config;

/* Byte offsets (from the start of the file) of every array. */
typedef struct dsq_llama2c_layout {
    uint64_t emb, att_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3, norm;
    uint64_t freq_real, freq_imag;
    uint64_t cls;           /* == emb when shared */
    uint64_t total;         /* exact file size */
} dsq_llama2c_layout;

typedef struct dsq_llama2c {
    dsq_llama2c_config cfg;
    dsq_llama2c_layout lay;
    dsq_map map;
    char *path;
} dsq_llama2c;

/* Validate a header (first `size` bytes of a file of `size` bytes) and
 * compute the layout. path only names the file in messages.
 * @return DSQ_OK; DSQ_ERR_TRUNCATED (file shorter than the header or than
 *         the arrays the header declares); DSQ_ERR_FORMAT (non-positive or
 *         inconsistent dims, trailing bytes); DSQ_ERR_UNSUPPORTED (a
 *         versioned "ak42" export); DSQ_ERR_OVERFLOW. */
int dsq_llama2c_parse(const uint8_t *data, uint64_t size, const char *path,
                      dsq_llama2c_config *cfg, dsq_llama2c_layout *lay, dsq_diag *d);

/* Map and validate a checkpoint (header, exact size, RoPE tables).
 * Release with dsq_llama2c_close (safe on a zeroed or failed struct). */
int  dsq_llama2c_open(dsq_llama2c *m, const char *path, dsq_diag *d);
void dsq_llama2c_close(dsq_llama2c *m);

typedef struct dsq_llama2c_hf_opts {
    enum dsq_dtype dtype;   /* DSQ_DTYPE_F32 (default, exact) or DSQ_DTYPE_BF16 */
    int untie;              /* 1: write lm_head.weight (a copy of the embedding
                               when shared) and tie_word_embeddings false;
                               0: shared -> tie_word_embeddings true, no lm_head */
    unsigned out_flags;     /* enum dsq_outfile_flags (DSQ_OUT_OVERWRITE) */
} dsq_llama2c_hf_opts;

void dsq_llama2c_hf_opts_default(dsq_llama2c_hf_opts *o);

/* config.json text for the model (LlamaForCausalLM; bos 1, eos 2 as
 * llama2.c's tokenizer). *out is malloc'd and NUL-terminated. */
int dsq_llama2c_config_json(const dsq_llama2c *m, const dsq_llama2c_hf_opts *o,
                            char **out, dsq_diag *d);

/* Write out_dir/config.json and out_dir/model.safetensors (out_dir is
 * created if missing). Weights are streamed one tensor at a time. Non-finite
 * weights fail with DSQ_ERR_NONFINITE naming the tensor. o may be NULL. */
int dsq_llama2c_to_hf(const dsq_llama2c *m, const char *out_dir,
                      const dsq_llama2c_hf_opts *o, dsq_diag *d);

/* open + to_hf + close. */
int dsq_llama2c_convert(const char *bin_path, const char *out_dir,
                        const dsq_llama2c_hf_opts *o, dsq_diag *d);

/* ---- a checkpoint used as a model ----------------------------------------
 * ds-quant and ds-eval take a llama2.c .bin wherever a model goes: it is
 * converted (float32, exact) into a private temporary directory under
 * $TMPDIR that the engine or the converter then reads like any Hugging Face
 * checkpoint; the caller removes it when done (the engine right after
 * mapping it: the mapping outlives the unlinked file). The copy costs the
 * checkpoint's size in temporary space, fine at llama2.c's scale (<= 110M
 * parameters). */

/* 1 when path is an existing file named *.bin: taken for a llama2.c
 * checkpoint (Hugging Face's pytorch_model.bin pickles are not read), so
 * dsq_llama2c_open's errors describe a broken one. */
int dsq_llama2c_is_checkpoint(const char *path);
/* The tokenizer beside a checkpoint, by llama2.c's names: tokenizer.bin,
 * else tok<vocab_size>.bin. malloc'd path, or NULL when there is none. */
char *dsq_llama2c_find_tokenizer(const char *bin_path);
/* Convert into a fresh temporary directory (*out_dir, malloc'd) holding
 * config.json, model.safetensors and, when tokenizer is given or found
 * beside the checkpoint, tokenizer.bin. */
int dsq_llama2c_to_temp_dir(const char *bin_path, const char *tokenizer, char **out_dir, dsq_diag *d);
/* Remove such a directory and its files, and free the path. NULL is a no-op. */
void dsq_llama2c_temp_dir_remove(char *out_dir);

#endif
