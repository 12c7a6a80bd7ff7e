/* gsm8k_run.h - GSM8K as lm-eval runs it, on a model in process: the
 * few-shot prompts (the same draws an --endpoint run sends), their
 * tokenization under the BOS choice, the stop strings plus the EOS text
 * lm-eval appends, the model's EOS ids, and batched greedy generation. */
#ifndef DSQ_GSM8K_RUN_H
#define DSQ_GSM8K_RUN_H

#include "eval_model.h"
#include "gsm8k.h"

/* train.jsonl beside the test file data (malloc'd), the default few-shot pool. */
char *dsq_gsm8k_default_train(const char *data);

/* The n prompts of test in doc order, each doc taking the next few-shot
 * draw from the pool at train_path (not read when shots is 0), as lm-eval
 * draws them. prompts[i] (malloc'd) and lens[i] are filled for i < n. */
int dsq_gsm8k_prompts(const dsq_gsm8k_set *test, size_t n, const char *train_path, int shots, uint64_t seed,
                      char **prompts, size_t *lens, dsq_diag *d);

typedef struct dsq_gsm8k_local_opts {
    dsq_eval_model_opts model;  /* max_batch: sequences decoded together; ctx 0: the model's */
    const char *tokenizer;      /* NULL: the model's own */
    const char *data;           /* the test file (names the default training split) */
    const char *train;          /* NULL: train.jsonl beside data */
    int shots;
    uint64_t seed;              /* few-shot draws */
    int bos;                    /* -1 as the tokenizer's add_special_tokens does, 0 no, 1 yes */
    size_t max_new;             /* generation cap */
    volatile int *cancel;
    void (*note)(void *ctx, int level, const char *msg);   /* 2 a warning, 3 information */
    /* the model is open and generation starts: n prompts, max_ctx tokens per sequence */
    void (*generating)(void *ctx, size_t n, size_t max_ctx);
    void *ctx;
} dsq_gsm8k_local_opts;

/* Generate completions for the first n items of test with the model
 * (opened into r, which the caller closes; a tokenizer already in r->tok
 * is used as it is); done gets each finished item
 * (dsq_gsm8k_generate's rules). Refused: a prompt token beyond the model's
 * logits, a context that leaves no room for max_new tokens. */
int dsq_gsm8k_run_local(dsq_eval_model *r, const dsq_gsm8k_set *test, size_t n, const dsq_gsm8k_local_opts *o,
                        dsq_gen_done_fn done, void *done_ctx, dsq_diag *d);

#endif
