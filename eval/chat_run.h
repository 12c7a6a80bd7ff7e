/* chat_run.h - the replies a chat evaluation scores, from a server's
 * /v1/chat/completions or generated in process through the same chat
 * template and reasoning split ds-serve applies (so both give the same
 * replies for a greedy run).
 *
 * A run asks every (item, sample) pair once; replies arrive in any order
 * and are handed to a callback (serialized) that may journal them. Pairs
 * marked done beforehand (a resumed journal) are skipped.
 *
 * Library code: nothing prints. */
#ifndef DSQ_CHAT_RUN_H
#define DSQ_CHAT_RUN_H

#include "chat_eval.h"
#include "endpoint.h"
#include "eval_model.h"
#include "gsm8k.h"
#include "tokenizer.h"

#include <stddef.h>
#include <stdint.h>

struct dsq_chat_template;

typedef struct dsq_chat_run_opts {
    const dsq_chat_suite *suite;
    const char *kwargs_json;   /* chat_template_kwargs (JSON object text) or NULL */
    int64_t max_tokens;
    double temperature;
    double top_p;              /* 0: not sent */
    int has_seed;
    uint64_t seed;             /* sample s of an item is asked with seed + s */
    int samples;               /* per item, >= 1 */
    int reasoning_parser;      /* in process: enum dsq_reasoning_parser, as ds-serve's */
    const char *extra_json;    /* further body fields (JSON object text), as AISBench's
                                * generation_kwargs: endpoint only; they win */
} dsq_chat_run_opts;

typedef struct dsq_chat_reply {
    char *content;             /* NULL when the server sent null */
    size_t clen;
    char *reasoning;           /* reasoning_content (or "reasoning"), NULL when null */
    size_t rlen;
    char finish[16];
    int64_t prompt_tokens, completion_tokens; /* -1 when absent */
    char *error;               /* the server refused this request alone (over its context): have 0 */
    int have;
} dsq_chat_reply;

void dsq_chat_reply_release(dsq_chat_reply *r);

/* The /v1/chat/completions body for one sample (malloc'd): messages, model,
 * max_tokens, temperature, top_p (when set), seed, the suite's stops,
 * chat_template_kwargs. */
char *dsq_chat_request_json(const dsq_chat_run_opts *o, const char *model, const char *messages_json,
                            int sample);
/* choices[0].message content / reasoning_content, finish_reason, usage. */
int  dsq_chat_parse_reply(const char *body, size_t len, dsq_chat_reply *r, dsq_diag *d);

/* Called (serialized) for each reply: index = item * samples + sample. The
 * callback may take r's strings (set them NULL). Negative return stops the run. */
typedef int (*dsq_chat_reply_fn)(void *user, size_t index, dsq_chat_reply *r);

/* Against a server: todo[k] for k < n_todo are pair indices; eo->concurrency
 * requests in flight. */
int dsq_chat_run_endpoint(const dsq_endpoint_opts *eo, const char *model, const dsq_chat_run_opts *o,
                          const dsq_gsm8k_set *set, const size_t *todo, size_t n_todo,
                          dsq_chat_reply_fn done, void *user, dsq_diag *d);

/* In process: each item rendered by t with add_generation_prompt and the
 * kwargs, tokenized as ds-serve does (special tokens parsed, nothing added),
 * generated through ops (greedy at temperature 0, else sampled with
 * temperature and top_p, reply s of an item from seed + s, seed 0 when none
 * is set: the tokens ds-serve chooses for the same request and seed), cut
 * at the suite's stops, split by o->reasoning_parser. eos: ids that end a
 * reply. */
int dsq_chat_run_local(const dsq_gen_ops *ops, size_t max_ctx, const dsq_tokenizer *tok,
                       const struct dsq_chat_template *t, const int32_t *eos, size_t n_eos,
                       const dsq_chat_run_opts *o, const dsq_gsm8k_set *set, const size_t *todo,
                       size_t n_todo, volatile int *cancel, dsq_chat_reply_fn done, void *user,
                       dsq_diag *d);

/* The same with a model opened for the run: the tokenizer (tokenizer NULL:
 * the model's own) and chat template (chat_template NULL: the model's own;
 * else an id or file) are loaded, the model is opened into r (the caller
 * closes it), and its EOS ids end the replies. *template_id names the
 * template used. */
typedef struct dsq_chat_model_opts {
    dsq_eval_model_opts model;  /* max_batch: sequences decoded together */
    const char *tokenizer;
    const char *chat_template;
    volatile int *cancel;
} dsq_chat_model_opts;
int dsq_chat_run_model(dsq_eval_model *r, const dsq_chat_model_opts *mo, const dsq_chat_run_opts *o,
                       const dsq_gsm8k_set *set, const size_t *todo, size_t n_todo, dsq_chat_reply_fn done,
                       void *user, const char **template_id, dsq_diag *d);

/* ---- journal, scores, summary --------------------------------------------------- */

/* The per-reply record (one JSONL line, no newline; malloc'd): doc_id,
 * sample, question, content, reasoning_content, reasoning_chars, finish,
 * prompt_tokens, gen_tokens, and when sc is given the scores: answer
 * (AISBench's pred / lm-eval's strict), flexible, correct, correct_flexible. */
char *dsq_chat_record_json(size_t doc, int sample, const dsq_gsm8k_item *it, const dsq_chat_reply *r,
                           const dsq_chat_score *sc);
/* A journal or a finished --out file read back: replies[doc * samples +
 * sample] filled for every record whose doc_id < n and sample < samples
 * and whose question matches the data (else DSQ_ERR_STATE: another data
 * set). *have counts them. A missing file is no error. The records of
 * docs or samples beyond this run's (a larger --limit or --samples) go to
 * *tail as they were written (malloc'd lines, NULL when none), so the file
 * that replaces the journal keeps them. */
int  dsq_chat_journal_load(const char *path, const dsq_gsm8k_set *set, size_t n, int samples,
                           dsq_chat_reply *replies, size_t *have, char **tail, size_t *tail_len, dsq_diag *d);

typedef struct dsq_chat_summary {
    size_t items, missing;       /* items; replies absent (count as wrong) */
    int samples;
    double acc, acc_se;          /* AISBench accuracy / lm-eval strict-match */
    double pass_n;               /* pass@samples */
    size_t correct;
    double acc_flex, acc_flex_se, pass_n_flex; /* lm-eval flexible-extract */
    size_t correct_flex;
    uint64_t gen_tokens, reasoning_chars;
} dsq_chat_summary;

/* Score every reply (replies[doc * samples + sample], n docs) and, when
 * out_path is given, write every record with its scores there atomically,
 * followed by tail (dsq_chat_journal_load's). */
int  dsq_chat_score_all(const dsq_chat_run_opts *o, const char *think_end, const dsq_gsm8k_set *set,
                        size_t n, const dsq_chat_reply *replies, const char *out_path,
                        const char *tail, size_t tail_len, dsq_chat_summary *s, dsq_diag *d);

#endif
