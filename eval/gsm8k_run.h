/* gsm8k_run.h - GSM8K as lm-eval runs it, on a model in process: the
 * few-shot prompts (the same draws an --endpoint run sends), their
 * tokenization under the BOS choice, the stop strings plus the EOS text
 * lm-eval appends, the model's EOS ids, and batched greedy generation. */
#ifndef DSQ_GSM8K_RUN_H
#define DSQ_GSM8K_RUN_H

#include "endpoint.h"
#include "eval_model.h"
#include "gsm8k.h"

/* train.jsonl beside the test file data (malloc'd), the default few-shot pool. */
char *dsq_gsm8k_default_train(const char *data);

/* The n prompts of test in doc order, each doc taking the next few-shot
 * draw from the pool at train_path (not read when shots is 0), as lm-eval
 * draws them. prompts[i] (malloc'd) and lens[i] are filled for i < n. */
int dsq_gsm8k_prompts(const dsq_gsm8k_set *test, size_t n, const char *train_path, int shots, uint64_t seed,
                      char **prompts, size_t *lens, dsq_diag *d);

/* dsq_gsm8k_generate's callbacks over an open model (user: r): prefill
 * and batched decode on its KV cache, the text with special tokens skipped
 * (and ids without a token dropped). */
void dsq_eval_gen_ops(dsq_eval_model *r, int n_slots, dsq_gen_ops *ops);
/* The ids that end a sequence: the tokenizer's EOS, then the model
 * config's eos_token_id(s) not already there; returns how many (<= cap). */
size_t dsq_eval_eos_ids(const dsq_eval_model *r, int32_t *eos, size_t cap);

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
    void (*note)(void *ctx, int level, const char *msg);   /* level 0 a warning, else information (2, 3) */
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

/* ---- the items of a run: completion, score, generation stats ---- */

typedef struct dsq_gsm8k_result_item {
    char *completion;       /* malloc'd, cut at the task's stop strings */
    size_t len;
    dsq_gsm8k_score s;      /* after dsq_gsm8k_score_items */
    dsq_gen_result g;       /* generation stats (its text is not kept here) */
    int have;               /* a completion is there */
} dsq_gsm8k_result_item;

/* A dsq_gen_done_fn filling items (done_ctx: the item array): takes the text. */
int dsq_gsm8k_item_done(void *items, size_t idx, dsq_gen_result *res);

/* Completions made elsewhere (gsm8k --score): moved into items[0..n), cut
 * at the task's stop strings as they are scored. */
void dsq_gsm8k_items_from_completions(dsq_gsm8k_completions *c, dsq_gsm8k_result_item *items, size_t n);

/* Score every item that has a completion (lm-eval v3 strict-match and
 * flexible-extract; the stop strings are applied again, a no-op on
 * dsq's own output): *scored items, *strict and *flexible correct ones. */
int dsq_gsm8k_score_items(const dsq_gsm8k_set *test, dsq_gsm8k_result_item *items, size_t n, size_t *scored,
                          size_t *strict, size_t *flexible, dsq_diag *d);

/* The per-item JSONL (doc_id, question, completion, strict, flexible,
 * gold, correct_strict, correct_flexible, and with generated the token
 * counts and the stop reason), written atomically to path. */
int dsq_gsm8k_write_items(const char *path, int overwrite, const dsq_gsm8k_set *test,
                          const dsq_gsm8k_result_item *items, size_t n, int generated, dsq_diag *d);

void dsq_gsm8k_items_free(dsq_gsm8k_result_item *items, size_t n);

/* ---- against a server ---- */

typedef struct dsq_gsm8k_endpoint_opts {
    const char *data, *train; /* as dsq_gsm8k_local_opts: the same prompts, sent as text */
    int shots;
    uint64_t seed;
    size_t max_new;
    const char *journal;      /* per-item journal a rerun continues from (NULL: none) */
    int restart;              /* start the journal over */
    void (*note)(void *ctx, int level, const char *msg);
    /* requests start: n_todo items for model (after those the journal held) */
    void (*sending)(void *ctx, size_t n_todo, const char *model);
    void (*progress)(void *ctx, size_t done);
    void *ctx;
} dsq_gsm8k_endpoint_opts;

/* GSM8K completions of the first n items of test from the server eo names
 * (POST /completions), cut at the task's stop strings as lm-eval does with
 * an API model's output; with a journal, items already there are reused
 * and each new one is appended as it arrives. */
int dsq_gsm8k_run_endpoint(const dsq_endpoint_opts *eo, const dsq_gsm8k_set *test, size_t n,
                           const dsq_gsm8k_endpoint_opts *o, dsq_gsm8k_result_item *items, dsq_diag *d);

#endif
