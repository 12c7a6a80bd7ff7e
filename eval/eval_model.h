/* eval_model.h - a model opened for evaluation, and the text handling that
 * ppl, kld and gsm8k share: the model with its KV cache and tokenizer, the
 * context policy (no window past max_position_embeddings), the BOS
 * policies of a scored text, and the check that a kld base was computed
 * on the given text's windows. */
#ifndef DSQ_EVAL_MODEL_H
#define DSQ_EVAL_MODEL_H

#include "eval_metrics.h"
#include "model.h"
#include "model_tokenizer.h"
#include "tokenizer.h"

#include <stddef.h>
#include <stdint.h>

typedef struct dsq_eval_model {
    dsq_model *m;
    dsq_state *st;
    dsq_tokenizer *tok;     /* loaded separately (dsq_tokenizer_for_model), freed by close */
    size_t vocab;           /* logits per row */
} dsq_eval_model;

typedef struct dsq_eval_model_opts {
    const char *model;      /* .dsq, safetensors file / index / directory, export directory, llama2.c .bin */
    int threads;            /* 0: all cores */
    int no_verify;          /* skip the SHA-256 check of uncompressed .dsq payloads */
    int bf16_terms;         /* 0: the engine's default */
    int dsa_mode;           /* dsq_model_opts.dsa_mode: DeepSeek-V3.2's DSA in fp8 (0) or float */
    int kv_cache;           /* dsq_model_opts.kv_cache: MLA's cache in f32 (0), bf16, int8 or fp8 */
    int max_batch;          /* sequences in the KV cache (>= 1) */
    size_t ctx;             /* tokens per sequence; 0: the model's, min(max positions, 4096) */
} dsq_eval_model_opts;

/* Open the model and its KV cache. A ctx past the model's
 * max_position_embeddings is refused (DSQ_ERR_INVALID_ARG): positions past
 * it were never trained, so a window that long gives a meaningless number. */
int dsq_eval_model_open(dsq_eval_model *r, const dsq_eval_model_opts *o, dsq_diag *d);
void dsq_eval_model_close(dsq_eval_model *r);

/* dsq_window_logits_fn over an open model (user: the dsq_eval_model): fill
 * the cache with the first half, then compute logits for positions
 * first .. n-2 (the last token's logits predict nothing in the window). */
int dsq_eval_model_window(void *user, const int32_t *w, size_t n, size_t first, float *logits, dsq_diag *d);

/* BOS policy of a scored text (ppl, kld). window: BOS over each window's
 * first token when the tokenizer adds one (llama-perplexity); first: BOS
 * once, at the start of the text; no: no special token at all. */
enum dsq_text_bos { DSQ_TEXT_BOS_WINDOW = 0, DSQ_TEXT_BOS_FIRST = 1, DSQ_TEXT_BOS_NO = 2 };
extern const char *const dsq_text_bos_names[3];

/* The BOS id encode(add_special) puts in front (llama-perplexity's add_bos), or -1. */
int32_t dsq_tokenizer_adds_bos(const dsq_tokenizer *t);

/* Tokenize the text file path under a BOS policy, as llama-perplexity does
 * (add_special, no special-token parsing: "<s>" in the text stays text).
 * limit > 0: only the prefix that yields limit tokens is read. *bytes gets
 * the bytes read (may be NULL). Texts are capped at 1 GiB. */
int dsq_eval_tokenize_text(const dsq_tokenizer *tok, const char *path, int policy, uint64_t limit, int32_t **ids,
                           size_t *n, size_t *bytes, dsq_diag *d);

/* Check that base (from ppl --save-logits) was computed on the windows the
 * text data gives under policy: DSQ_ERR_DATA naming the difference. */
int dsq_kld_check_base(const dsq_logp_reader *base, const dsq_tokenizer *tok, const char *data, int policy,
                       dsq_diag *d);

#endif
