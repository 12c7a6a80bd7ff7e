/* dsq.h - libdsq's public API.
 *
 * libdsq quantizes DeepSeek-V3-family and Llama checkpoints and evaluates
 * them on the CPU. This header is the part of it meant for programs of
 * your own: open a model (a .dsq file or sharded set, a safetensors
 * checkpoint, a serving export directory, a llama2.c .bin), read what it
 * is, run it to logits, tokenize and detokenize with its tokenizer, and
 * measure perplexity as `ds-eval ppl` does. Converting checkpoints is what
 * the ds-quant and ds-export programs do.
 *
 *   #include <dsq/dsq.h>          cc prog.c $(pkg-config --cflags --libs dsq)
 *
 * Conventions, for every function below:
 *   - A function that can fail returns an int status: DSQ_OK (0) on
 *     success, a negative enum dsq_status value on failure (dsq_status.h).
 *     dsq_strerror() turns it into text.
 *   - A function taking a `dsq_diag *d` fills it on failure with the file,
 *     tensor and byte offset involved and a one-line message; d may be NULL.
 *     Clear it with dsq_diag_clear() before first use.
 *   - The library never prints and never exits.
 *   - Handles are opaque; a handle is created by one function and released
 *     by its _free() twin, which accepts NULL. Memory the library returns
 *     through a pointer argument (token ids, text) is the caller's, released
 *     with dsq_free().
 *   - A handle is used by one thread at a time; different handles are
 *     independent.
 *   - While the major version is 0, the API may change between minor
 *     versions; the shared library's SONAME carries MAJOR.MINOR. */
#ifndef DSQ_DSQ_H
#define DSQ_DSQ_H

#include "dsq_status.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version ------------------------------------------------------------ */

#define DSQ_VERSION_MAJOR 0
#define DSQ_VERSION_MINOR 1
#define DSQ_VERSION_PATCH 0
#define DSQ_VERSION_NUMBER (DSQ_VERSION_MAJOR * 100 * 100 + DSQ_VERSION_MINOR * 100 + DSQ_VERSION_PATCH)
#define DSQ_QUOTE_(x) #x
#define DSQ_EXPAND_AND_QUOTE_(x) DSQ_QUOTE_(x)
#ifndef DSQ_VERSION_STRING
#define DSQ_VERSION_STRING \
    DSQ_EXPAND_AND_QUOTE_(DSQ_VERSION_MAJOR) "." DSQ_EXPAND_AND_QUOTE_(DSQ_VERSION_MINOR) "." DSQ_EXPAND_AND_QUOTE_(DSQ_VERSION_PATCH)
#endif

/* dsq_version_number():
 * Returns the version of the library the program runs with, as
 * MAJOR * 10000 + MINOR * 100 + PATCH. Compare it with DSQ_VERSION_NUMBER,
 * the version of the header the program was compiled with. */
DSQ_API unsigned dsq_version_number(void);

/* dsq_version_string():
 * Returns the version of the library the program runs with, as a static
 * string "MAJOR.MINOR.PATCH". */
DSQ_API const char *dsq_version_string(void);

/* dsq_free():
 * Releases memory the library returned through a pointer argument (the ids
 * of dsq_lm_encode, the text of dsq_lm_decode). p may be NULL. */
DSQ_API void dsq_free(void *p);

/* ---- quantization schemes ----------------------------------------------- */

/* dsq_scheme_name():
 * Returns the name of the index-th quantization scheme ("f32", "bf16",
 * "w8a8-dynamic", "w8a8", "w4a8", "awq-w4a16", ...), as `ds-quant --scheme`
 * takes it, or NULL when index is past the last one (or negative).
 * Iterate from 0 until NULL. The strings are static. */
DSQ_API const char *dsq_scheme_name(int index);

/* dsq_scheme_description():
 * Returns a one-line description of the index-th scheme (its weight and
 * activation formats), or NULL when index is out of range. Static. */
DSQ_API const char *dsq_scheme_description(int index);

/* ---- models --------------------------------------------------------------- */

/* A model ready to run: its weights, one sequence's KV cache and, when it
 * has one, its tokenizer. */
typedef struct dsq_lm dsq_lm;

typedef struct dsq_lm_options {
    int         threads;   /* worker threads; <= 0: one per core */
    int64_t     context;   /* KV cache length in tokens; 0: the smaller of
                              max_position_embeddings and 4096 */
    const char *tokenizer; /* tokenizer.json, its directory or a llama2.c
                              tokenizer .bin; NULL: the model's own (below) */
    int         no_verify; /* 1: skip the SHA-256 check of .dsq payloads
                              stored raw (compressed ones are always checked) */
} dsq_lm_options;

/* dsq_lm_options_default():
 * Fills o with the defaults: all cores, the default context, the model's
 * own tokenizer, payloads verified. */
DSQ_API void dsq_lm_options_default(dsq_lm_options *o);

/* dsq_lm_open():
 * Opens the model at path and allocates its KV cache. path is a .dsq file
 * (or a sharded set's index), a safetensors checkpoint (a directory with
 * config.json, a *.safetensors.index.json or a .safetensors file; BF16,
 * F16, F32 or DeepSeek FP8), a serving export directory (AscendV1, AutoAWQ
 * GEMM, compressed-tensors) or a llama2.c checkpoint (.bin). opts may be
 * NULL (the defaults). The tokenizer, unless opts names one, is the one in
 * a .dsq's metadata, else tokenizer.json or tokenizer.bin in the model's
 * directory, or for a llama2.c checkpoint tokenizer.bin / tok<vocab>.bin
 * beside it; a model with none of these opens without a tokenizer (the
 * functions that need one then fail with DSQ_ERR_NOT_FOUND).
 * On success *out is a new handle, released with dsq_lm_free(); on failure
 * *out is NULL.
 * @return DSQ_OK; DSQ_ERR_NOT_FOUND (no such path, a missing tensor or
 *         tokenizer file named in opts); DSQ_ERR_FORMAT, DSQ_ERR_TRUNCATED,
 *         DSQ_ERR_CHECKSUM, DSQ_ERR_JSON (malformed files); DSQ_ERR_SHAPE
 *         (tensors disagree with config.json); DSQ_ERR_UNSUPPORTED
 *         (architecture, dtype or scheme); DSQ_ERR_INVALID_ARG (context
 *         beyond max_position_embeddings); DSQ_ERR_NOMEM. */
DSQ_API int dsq_lm_open(dsq_lm **out, const char *path, const dsq_lm_options *opts, dsq_diag *d);

/* dsq_lm_free():
 * Releases the model, its cache and its tokenizer. lm may be NULL. */
DSQ_API void dsq_lm_free(dsq_lm *lm);

typedef struct dsq_lm_info {
    char    architecture[96]; /* config.json architectures[0], e.g. "DeepseekV3ForCausalLM" */
    int64_t vocab_size;       /* logits per token */
    int64_t hidden_size;
    int64_t num_layers;       /* decoder layers run (a DeepSeek MTP layer is not) */
    int64_t max_position;     /* max_position_embeddings, 0 if unknown */
    int64_t context;          /* this handle's KV cache length */
    uint64_t weight_bytes;    /* bytes of the linears' weights as loaded */
    int     has_tokenizer;    /* 1 when encode / decode / perplexity can run */
} dsq_lm_info;

/* dsq_lm_get_info():
 * Fills *info with what lm is.
 * @return DSQ_OK; DSQ_ERR_INVALID_ARG when lm or info is NULL. */
DSQ_API int dsq_lm_get_info(const dsq_lm *lm, dsq_lm_info *info);

/* dsq_lm_describe():
 * Writes one paragraph about lm (architecture, dimensions, the schemes of
 * its linears, weight bytes) into buf, NUL-terminated and truncated to size
 * bytes. Returns the length the whole paragraph has (as snprintf does), or
 * a negative status when lm is NULL. */
DSQ_API int dsq_lm_describe(const dsq_lm *lm, char *buf, size_t size);

/* ---- running -------------------------------------------------------------- */

enum dsq_lm_forward_flags {
    DSQ_LM_ALL_LOGITS = 1u << 0 /* logits for every token, not only the last */
};

/* dsq_lm_forward():
 * Appends the n tokens (ids below vocab_size) to the sequence in lm's KV
 * cache, at its current position, and computes logits: vocab_size floats
 * for the last token, or with DSQ_LM_ALL_LOGITS n rows of vocab_size (row
 * i predicts the token after tokens[i]). logits is the caller's, of that
 * size, or NULL to only fill the cache. One token at a time is generation;
 * n > 1 at once is prefill (the same values up to float rounding).
 * @return DSQ_OK; DSQ_ERR_INVALID_ARG (n == 0, a token id out of range, or
 *         the cache would pass its context); DSQ_ERR_NOMEM. */
DSQ_API int dsq_lm_forward(dsq_lm *lm, const int32_t *tokens, size_t n, float *logits, unsigned flags,
                           dsq_diag *d);

/* dsq_lm_position():
 * Returns the number of tokens in lm's cache (the position of the next
 * token), or -1 when lm is NULL. */
DSQ_API int64_t dsq_lm_position(const dsq_lm *lm);

/* dsq_lm_rewind():
 * Keeps the first pos tokens of the cache (0 starts a new sequence), so
 * the next dsq_lm_forward continues from there.
 * @return DSQ_OK; DSQ_ERR_INVALID_ARG when pos is negative or beyond the
 *         current position. */
DSQ_API int dsq_lm_rewind(dsq_lm *lm, int64_t pos);

/* ---- tokenizer ------------------------------------------------------------ */

enum dsq_lm_token_flags {
    DSQ_LM_ADD_SPECIAL   = 1u << 0, /* encode: add BOS / EOS as the tokenizer's
                                       config says (Hugging Face add_special_tokens) */
    DSQ_LM_PARSE_SPECIAL = 1u << 1, /* encode: special-token strings in the text
                                       become their ids (Hugging Face's default);
                                       without it they stay text */
    DSQ_LM_SKIP_SPECIAL  = 1u << 2  /* decode: leave special tokens out */
};

/* dsq_lm_encode():
 * Tokenizes len bytes of UTF-8 text (NUL not needed) with lm's tokenizer, as
 * Hugging Face's tokenizer.encode (or llama2.c's encoder) does. On success
 * *ids is a new array of *n token ids, released with dsq_free() (not NULL
 * even when *n is 0).
 * @return DSQ_OK; DSQ_ERR_NOT_FOUND (lm has no tokenizer);
 *         DSQ_ERR_INVALID_ARG; DSQ_ERR_NOMEM. */
DSQ_API int dsq_lm_encode(const dsq_lm *lm, const char *text, size_t len, unsigned flags, int32_t **ids,
                          size_t *n, dsq_diag *d);

/* dsq_lm_decode():
 * Turns n token ids back into text, as Hugging Face's tokenizer.decode
 * does (invalid UTF-8 replaced by U+FFFD). On success *text is a new
 * NUL-terminated string, released with dsq_free(), and *len (when len is
 * not NULL) its length without the NUL.
 * @return DSQ_OK; DSQ_ERR_NOT_FOUND (lm has no tokenizer);
 *         DSQ_ERR_INVALID_ARG (an unknown id); DSQ_ERR_NOMEM. */
DSQ_API int dsq_lm_decode(const dsq_lm *lm, const int32_t *ids, size_t n, unsigned flags, char **text,
                          size_t *len, dsq_diag *d);

/* dsq_lm_bos(), dsq_lm_eos():
 * Return the tokenizer's beginning- and end-of-sequence token ids, or -1
 * when it has none (or lm has no tokenizer). */
DSQ_API int32_t dsq_lm_bos(const dsq_lm *lm);
DSQ_API int32_t dsq_lm_eos(const dsq_lm *lm);

/* ---- perplexity ----------------------------------------------------------- */

typedef struct dsq_perplexity {
    double   ppl;       /* exp(mean negative log-likelihood) */
    double   ppl_error; /* its standard error, as llama-perplexity prints it */
    uint64_t tokens;    /* tokens scored */
    size_t   windows;   /* windows evaluated */
} dsq_perplexity;

/* dsq_lm_perplexity():
 * Measures the perplexity of lm on len bytes of text exactly as
 * `ds-eval ppl --ctx WINDOW --limit-tokens MAX_TOKENS` does, which follows
 * llama.cpp's llama-perplexity: the text is tokenized with add_special (and
 * special-token strings kept as text), cut to max_tokens (0: all), split
 * into non-overlapping windows of `window` tokens (0: 512) with BOS over
 * each window's first token when the tokenizer adds one, and the second
 * half of each window scored. Leftover tokens are not used. The cache is
 * empty afterwards. window must fit lm's context.
 * @return DSQ_OK; DSQ_ERR_NOT_FOUND (lm has no tokenizer);
 *         DSQ_ERR_INVALID_ARG (window below 3 or beyond the context);
 *         DSQ_ERR_DATA (the text gives fewer tokens than one window);
 *         DSQ_ERR_NONFINITE (the model gave NaN or Inf); DSQ_ERR_NOMEM. */
DSQ_API int dsq_lm_perplexity(dsq_lm *lm, const char *text, size_t len, size_t window, size_t max_tokens,
                              dsq_perplexity *out, dsq_diag *d);

#ifdef __cplusplus
}
#endif

#endif
